//! Reconcilers: observe, plan (with `crate::plan`), server-side apply, status.
//! They decide nothing themselves: `plan` says what to write and why, so a
//! reconcile of an unchanged world writes nothing, and `tandem render` runs the
//! same decisions offline.
//!
//! Writes that meet a 409 Conflict are retried here with a growing wait
//! ([`retry_conflicts`]); controllers run only on the replica that holds the
//! leader Lease ([`leader`]).

pub mod group_replication;
pub mod inference_service;
pub mod leader;
pub mod resource_scaling_group;
pub mod scale_view;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;

use crate::admission::discovery::ScaleDiscovery;
use crate::plan::decision;
use crate::plan::service::{Apply, Delete, Options};
use crate::server::controller_metrics::{ControllerMetrics, controller_of};

/// The field manager of every server-side apply Tandem makes.
pub const FIELD_MANAGER: &str = "tandem";
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot plan {object}: {reason}")]
    Plan { object: String, reason: String },
    #[error("{0} has no namespace or name")]
    Unnamed(String),
}

/// How many objects each controller reconciles at once. Unbounded, a cluster
/// of 1 000 InferenceServices had all 1 000 reconciles in flight after a
/// restart, each holding its own LIST of the namespace's children and views
/// (BENCHMARKS.md, Memory); a bound keeps the memory of a burst to a few
/// reconciles' worth while the work queue holds the rest.
pub const CONCURRENCY: u16 = 8;

/// The controller settings every Tandem controller runs with.
pub fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENCY)
}

/// What every reconcile needs.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// Who records Tandem's Events, for a recorder of one's own.
    pub reporter: Reporter,
    pub options: Options,
    /// Which kinds outside the adapter table have a scale subresource.
    pub discovery: ScaleDiscovery,
    /// The clock, fixed in tests.
    pub now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    /// How writes that answer 409 Conflict are retried.
    pub conflict_backoff: ConflictBackoff,
    /// Where reconciles and decisions are counted (`/metrics`).
    pub metrics: Arc<ControllerMetrics>,
}

impl Context {
    /// A context whose Events name no reporting instance; `tandem serve`
    /// names its replica with [`Context::reporting_as`].
    pub fn new(client: Client, options: Options) -> Context {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: None,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            reporter,
            discovery: ScaleDiscovery::new(client.clone()),
            client,
            options,
            now: Arc::new(Timestamp::now),
            conflict_backoff: ConflictBackoff::default(),
            metrics: Arc::default(),
        }
    }

    /// Reconciles and decisions counted in `metrics` (served on `/metrics`).
    pub fn with_metrics(mut self, metrics: Arc<ControllerMetrics>) -> Context {
        self.metrics = metrics;
        self
    }
}

impl Context {
    /// Events recorded as by replica `instance` (`--pod-name`, the same name
    /// the replica uses in the leader election), whatever the environment
    /// says.
    pub fn reporting_as(mut self, instance: &str) -> Context {
        self.reporter.instance = Some(instance.to_owned());
        self.recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        self
    }
}

/// `namespace/name`: how every log line of a reconcile names its object
/// (each reconciler's span carries it as `object`).
pub fn object_key<K: kube::Resource>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// Whether the API server answered 404: the object, or its whole API, is not there.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Records a Normal Event on `reference`: about a change to `child` (`reason`
/// `Created`, `Updated`, `Reverted` or `Deleted`), or with no child about the
/// object itself (an upgrade step); `note` says why.
pub(crate) async fn record(
    ctx: &Context,
    reference: &ObjectReference,
    reason: &str,
    note: &str,
    child: Option<&Value>,
) {
    let secondary = child.map(|child| ObjectReference {
        api_version: child["apiVersion"].as_str().map(str::to_owned),
        kind: child["kind"].as_str().map(str::to_owned),
        name: child["metadata"]["name"].as_str().map(str::to_owned),
        namespace: child["metadata"]["namespace"].as_str().map(str::to_owned),
        ..Default::default()
    });
    let action = match (reason, child) {
        ("Deleted", _) => "Delete",
        (_, Some(_)) => "Apply",
        (_, None) => "Upgrade",
    };
    // A halted rollout needs someone to look: a Warning.
    let type_ = if reason == crate::plan::service::PROGRESS_DEADLINE_EXCEEDED {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.to_owned()),
        action: action.to_owned(),
        secondary,
    };
    if child.is_none() {
        let controller = controller_of(reference.kind.as_deref().unwrap_or_default());
        ctx.metrics
            .decided(controller, decision::of_upgrade_step(reason));
    }
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::warn!(error = %e, reason, "could not record an event");
    }
}

/// Carries out what a plan decided for the objects of `regarding`: each
/// `apply` server-side applied (field manager `tandem`, retried on 409), each
/// `delete` deleted in the background (one already gone is no error), with an
/// Event on `regarding` for each saying why. `api_of` gives an object's API
/// and name; an object it cannot place is skipped (the plan only makes
/// objects of kinds it was given).
pub(crate) async fn carry_out(
    ctx: &Context,
    regarding: &ObjectReference,
    apply: &[Apply],
    delete: &[Delete],
    api_of: impl Fn(&Value) -> Option<(Api<DynamicObject>, String)>,
) -> Result<(), Error> {
    let controller = controller_of(regarding.kind.as_deref().unwrap_or_default());
    for step in apply {
        let Some((api, name)) = api_of(&step.object) else {
            continue;
        };
        let kind = step.object["kind"].as_str().unwrap_or("an object");
        let (params, patch) = (
            PatchParams::apply(FIELD_MANAGER).force(),
            Patch::Apply(&step.object),
        );
        retry_conflicts(ctx, regarding, &format!("applying {kind} {name}"), || {
            api.patch(&name, &params, &patch)
        })
        .await?;
        ctx.metrics.decided(controller, decision::of_apply(step));
        record(
            ctx,
            regarding,
            step.change.reason(),
            &step.note,
            Some(&step.object),
        )
        .await;
    }
    for step in delete {
        let Some((api, name)) = api_of(&step.object) else {
            continue;
        };
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {
                ctx.metrics.decided(controller, decision::of_delete(step));
                record(ctx, regarding, "Deleted", &step.note, Some(&step.object)).await;
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// How a write that answers 409 Conflict is retried: after `first`, then
/// twice as long each time up to `longest`, for `attempts` tries in all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConflictBackoff {
    pub first: Duration,
    pub longest: Duration,
    /// Tries in all, the first one included; at least one is always made.
    pub attempts: u32,
}

impl Default for ConflictBackoff {
    /// 50 ms, 100 ms, 200 ms, 400 ms: five tries within a second, well inside
    /// the controller's own requeue of a failed reconcile (30 s).
    fn default() -> Self {
        ConflictBackoff {
            first: Duration::from_millis(50),
            longest: Duration::from_secs(1),
            attempts: 5,
        }
    }
}

impl ConflictBackoff {
    /// The wait after the `retry`th conflict (0 for the first).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 2u32.checked_pow(retry).unwrap_or(u32::MAX);
        self.first.saturating_mul(factor).min(self.longest)
    }
}

/// Whether the API server answered 409 Conflict (the object changed since it
/// was read, or two appliers raced to create it).
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Runs `write`, and runs it again after [`ConflictBackoff::delay`] for as
/// long as it answers 409 Conflict, up to `ctx.conflict_backoff.attempts`
/// tries. Other errors return at once. When the last try conflicts too, a
/// warning is logged and a Warning Event `WriteConflict` recorded on
/// `regarding`, and the conflict is returned (the controller requeues).
///
/// Only for writes without a resourceVersion precondition (server-side
/// apply, plain merge and JSON patches): for those a conflict is a race the
/// API server lost, and the same write can win the next time. A write that
/// carries a resourceVersion conflicts because what it was planned from is
/// stale; repeating it cannot succeed, only a new reconcile from a fresh read.
pub async fn retry_conflicts<T, F, Fut>(
    ctx: &Context,
    regarding: &ObjectReference,
    what: &str,
    mut write: F,
) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let backoff = &ctx.conflict_backoff;
    let attempts = backoff.attempts.max(1);
    let mut retry: u32 = 0;
    loop {
        match write().await {
            Err(e) if is_conflict(&e) && retry.saturating_add(1) < attempts => {
                let wait = backoff.delay(retry);
                tracing::debug!(what, error = %e, ?wait, "conflict; retrying");
                tokio::time::sleep(wait).await;
                retry = retry.saturating_add(1);
            }
            Err(e) if is_conflict(&e) => {
                let note = format!(
                    "gave up {what} after {attempts} tries, each answered 409 Conflict: {e}"
                );
                tracing::warn!(what, attempts, error = %e, "gave up after repeated conflicts");
                let event = Event {
                    type_: EventType::Warning,
                    reason: "WriteConflict".to_owned(),
                    note: Some(note),
                    action: "Write".to_owned(),
                    secondary: None,
                };
                if let Err(e) = ctx.recorder.publish(&event, regarding).await {
                    tracing::warn!(error = %e, "could not record an event");
                }
                return Err(e);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_the_longest() {
        let backoff = ConflictBackoff::default();
        let waits: Vec<u128> = (0..7).map(|n| backoff.delay(n).as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn the_wait_never_overflows() {
        let backoff = ConflictBackoff {
            first: Duration::from_secs(u64::MAX / 2),
            longest: Duration::from_secs(u64::MAX),
            attempts: 3,
        };
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(u64::MAX));
        assert_eq!(backoff.delay(1), Duration::from_secs(u64::MAX / 2 * 2));
    }

    #[test]
    fn only_409_is_a_conflict() {
        let status = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert!(is_conflict(&status(409)));
        assert!(!is_conflict(&status(422)));
        assert!(!is_conflict(&status(404)));
    }
}
