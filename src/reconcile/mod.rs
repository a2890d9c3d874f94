//! Reconcilers: observe, plan (with `crate::plan`), server-side apply, status.
//! They decide nothing themselves: `plan` says what to write and why, so a
//! reconcile of an unchanged world writes nothing, and `tandem render` runs the
//! same decisions offline.
//!
//! Each reconcile function is written once against [`cluster::Cluster`]:
//! the controllers run it on the process's informer caches and kube-rs
//! ([`live`], [`caches`]), `tandem render` on an in-memory world
//! ([`memory`]).
//!
//! Writes that meet a 409 Conflict are retried here with a growing wait
//! ([`retry_conflicts`]); a failed reconcile is retried after a growing,
//! jittered wait ([`FailureBackoff`]); controllers run only on the replica
//! that holds the leader Lease ([`leader`]).

pub mod api_requests;
pub mod cluster;
pub mod events;
pub mod group_replication;
pub mod inference_service;
pub mod leader;
pub mod live;
pub mod memory;
pub mod metrics;
pub mod rate_limit;
pub mod repeated_writes;
pub mod resource_scaling_group;
pub mod rest;
pub mod scale_view;
pub mod signals;
pub mod status_writes;
pub mod turns;
pub mod window;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::ApiResource;
use kube::runtime::controller::{Action, applier};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;

use self::cluster::{Cluster, Series};
use crate::plan::inference_service::service::{Apply, Delete, Options};
use crate::plan::shared::batch::{self, Pace};
use crate::plan::shared::decision;
use crate::plan::shared::pod::Pod;
pub use crate::watch::backoff::FailureBackoff;
use crate::watch::backoff::jitter_unit;
use crate::watch::caches::{Caches, Queue};
use metrics::{ControllerMetrics, controller_of, measured};

pub use crate::plan::shared::children::FIELD_MANAGER;
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot plan {object}: {reason}")]
    Plan { object: String, reason: String },
    #[error("{0} has no namespace or name")]
    Unnamed(String),
}

impl Error {
    /// Whether trying again soon may help: the API server was busy (429),
    /// failed (5xx) or could not be reached. Anything else is a refusal or
    /// a mistake that waits for a change.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube(kube::Error::Api(status)) => status.code == 429 || status.code >= 500,
            Error::Kube(_) => true,
            Error::Plan { .. } | Error::Unnamed(_) => false,
        }
    }

    /// Whether the API server refused a write because the object's namespace
    /// is being deleted (403 with the cause `NamespaceTerminating`): a child
    /// the namespace controller removed is not to be put back, and trying
    /// again cannot help.
    pub fn is_namespace_terminating(&self) -> bool {
        let Error::Kube(kube::Error::Api(status)) = self else {
            return false;
        };
        status.code == 403
            && status
                .details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
    }

    /// The error's kind, for logs and metrics: `transient`, `conflict`,
    /// `namespace_terminating`, `refused`, `plan` or `unnamed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            _ if self.is_namespace_terminating() => "namespace_terminating",
            _ if self.is_transient() => "transient",
            Error::Kube(_) => "refused",
            Error::Plan { .. } => "plan",
            Error::Unnamed(_) => "unnamed",
        }
    }
}

/// How many objects each controller reconciles at once. Unbounded, a cluster
/// of 1 000 InferenceServices had all 1 000 reconciles in flight after a
/// restart; a bound keeps a burst's memory to a few reconciles' worth while
/// the rest wait for their turn ([`turns`]: each holds only its object's
/// key while it waits, and reads the object once its turn comes).
pub const CONCURRENCY: u16 = 8;

/// The controller settings every Tandem controller runs with: no debounce,
/// and no bound of kube-runtime's. Triggers are batched before they reach
/// the controller ([`window::batched`]), because kube-runtime's debounce
/// postpones an object for as long as its triggers keep coming (issue 37;
/// see [`window`]); and each reconcile takes a turn first ([`turns`]), at
/// most [`CONCURRENCY`] at once, because kube-runtime's own bound starts the
/// objects that wait in no set order.
pub fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default()
}

/// What every reconcile needs.
pub struct Context {
    /// What the reconcile reads and writes.
    pub cluster: Arc<dyn Cluster>,
    pub options: Options,
    /// The clock, fixed in tests.
    pub now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    /// How writes that answer 409 Conflict are retried.
    pub conflict_backoff: ConflictBackoff,
    /// How failed reconciles are retried.
    pub failure_backoff: FailureBackoff,
    /// Failures in a row, by object (`Kind namespace/name`).
    failures: Mutex<HashMap<String, u32>>,
    /// Where reconciles and decisions are counted (`/metrics`).
    pub metrics: Arc<ControllerMetrics>,
    /// How many writes one pass of a reconcile makes ([`carry_out`]):
    /// [`Pace::Unbounded`] from [`Context::new`], [`Pace::DEFAULT`] in
    /// `tandem serve` ([`Context::with_pace`]).
    pub pace: Pace,
    /// Each owner's step of a burst of writes (`Kind namespace/name`).
    steps: Mutex<HashMap<String, Step>>,
    /// When each service's status was last written, and how often a
    /// status whose counts alone moved may be: every change from
    /// [`Context::new`], `STATUS_PACE` in `tandem serve`
    /// ([`Context::with_status_pace`]).
    pub status_writes: status_writes::StatusWrites,
    /// How long each object rests after a pass, in proportion to its cost:
    /// none from [`Context::new`], [`rest::Rest::DEFAULT`] in `tandem serve`
    /// ([`Context::with_rest`]).
    pub rests: rest::Rests,
    /// The children each wide service's last pass read, kept parsed for its
    /// next (`Kind namespace/name`; [`crate::watch::parsed`]), with when
    /// they were kept.
    parsed: Mutex<HashMap<String, (cluster::Parsed, std::time::Instant)>>,
}

impl Context {
    pub fn new(cluster: Arc<dyn Cluster>, options: Options) -> Context {
        Context {
            cluster,
            options,
            now: Arc::new(Timestamp::now),
            conflict_backoff: ConflictBackoff::default(),
            failure_backoff: FailureBackoff::default(),
            failures: Mutex::default(),
            metrics: Arc::default(),
            pace: Pace::Unbounded,
            steps: Mutex::default(),
            status_writes: status_writes::StatusWrites::new(
                crate::plan::inference_service::status::StatusPace::NONE,
            ),
            rests: rest::Rests::new(rest::Rest::NONE),
            parsed: Mutex::default(),
        }
    }

    /// Forgets the step of an owner being deleted: a burst cut short by
    /// its deletion would otherwise stay in memory.
    pub(crate) fn forget_step(&self, regarding: &ObjectReference) {
        self.steps().remove(&owner_key(regarding));
    }

    /// Writes made `pace` by pace ([`carry_out`]).
    pub fn with_pace(mut self, pace: Pace) -> Context {
        self.pace = pace;
        self
    }

    /// Status writes whose counts alone moved made at most once per `pace`
    /// per object (`plan::inference_service::status::status_write`).
    pub fn with_status_pace(
        mut self,
        pace: crate::plan::inference_service::status::StatusPace,
    ) -> Context {
        self.status_writes = status_writes::StatusWrites::new(pace);
        self
    }

    /// Each object resting after a pass by `rule` ([`rest`]).
    pub fn with_rest(mut self, rule: rest::Rest) -> Context {
        self.rests = rest::Rests::new(rule);
        self
    }

    /// Reconciles and decisions counted in `metrics` (served on `/metrics`).
    pub fn with_metrics(mut self, metrics: Arc<ControllerMetrics>) -> Context {
        self.metrics = metrics;
        self
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // Entries are replaced one at a time: a panic cannot leave one half-written.
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The Pods among `pods` a batch of `regarding` awaits or `apply`
    /// writes, as the writes compare with them ([`Pod::observed`]): only
    /// these are looked up by [`carry_out`], and a wide service has a
    /// thousand pods, rendered once a pass each for nothing otherwise.
    pub(crate) fn pods_written(
        &self,
        regarding: &ObjectReference,
        pods: &[Pod],
        apply: &[Apply],
    ) -> Vec<Value> {
        let mut names: std::collections::BTreeSet<&str> = apply
            .iter()
            .filter(|a| a.object["kind"] == "Pod")
            .filter_map(|a| a.object["metadata"]["name"].as_str())
            .collect();
        let awaited: Vec<String> = self
            .steps()
            .get(&owner_key(regarding))
            .into_iter()
            .flat_map(|step| &step.expected)
            .filter(|e| e.object.0 == "v1" && e.object.1 == "Pod")
            .map(|e| e.object.3.clone())
            .collect();
        names.extend(awaited.iter().map(String::as_str));
        pods.iter()
            .filter(|p| names.contains(p.name.as_str()))
            .map(Pod::observed)
            .collect()
    }

    /// The children `key`'s last pass kept parsed, taken out for this one
    /// (nothing when it kept none).
    pub(crate) fn take_parsed(&self, key: &str) -> cluster::Parsed {
        self.parsed()
            .remove(key)
            .map(|(parsed, _)| parsed)
            .unwrap_or_default()
    }

    /// Keeps `children`, as this pass of `key` read them, for its next pass
    /// when they are wide ([`cluster::Parsed::keep`]); what other objects
    /// kept and left unused for [`crate::watch::parsed::UNUSED`] is dropped.
    pub(crate) fn keep_parsed(&self, key: &str, children: Vec<Value>) {
        let now = std::time::Instant::now();
        let mut parsed = self.parsed();
        parsed.retain(|_, (_, kept)| {
            now.saturating_duration_since(*kept) < crate::watch::parsed::UNUSED
        });
        match cluster::Parsed::keep(children) {
            Some(kept) => {
                parsed.insert(key.to_owned(), (kept, now));
            }
            None => {
                parsed.remove(key);
            }
        }
    }

    /// How many objects' children are kept parsed now.
    pub fn parsed_owners(&self) -> usize {
        self.parsed().len()
    }

    fn parsed(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (cluster::Parsed, std::time::Instant)>> {
        // Entries are inserted and removed whole: a panic cannot leave one
        // half-written.
        self.parsed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn steps(&self) -> std::sync::MutexGuard<'_, HashMap<String, Step>> {
        // Each entry is whole between two statements: a panic cannot leave
        // one half-written.
        self.steps.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Who records Tandem's Events: controller `tandem`, instance the replica's
/// name (`--pod-name`, the same name it uses in the leader election),
/// whatever the environment says.
pub fn reporter(instance: &str) -> kube::runtime::events::Reporter {
    kube::runtime::events::Reporter {
        controller: FIELD_MANAGER.to_owned(),
        instance: Some(instance.to_owned()),
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

/// Records an Event on `reference`: about a change to `child` (`reason`
/// `Created`, `Updated`, `Reverted` or `Deleted`), or with no child about the
/// object itself (an upgrade step, a role's episode); `note` says why. A
/// Warning when `warning`, else Normal.
pub(crate) async fn record(
    ctx: &Context,
    reference: &ObjectReference,
    reason: &str,
    note: &str,
    child: Option<&Value>,
    warning: bool,
) {
    record_in(ctx, reference, (reason, note), child, warning, Series::Fold).await;
}

/// [`record`], in a series of its own when `series` says so (an Event whose
/// note says something new each time: a folded one keeps the first note).
pub(crate) async fn record_in(
    ctx: &Context,
    reference: &ObjectReference,
    (reason, note): (&str, &str),
    child: Option<&Value>,
    warning: bool,
    series: Series,
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
    // The plan decides when someone should look (a halted rollout, a
    // degraded or unschedulable role).
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    if child.is_none() {
        let controller = controller_of(reference.kind.as_deref().unwrap_or_default());
        ctx.metrics
            .decided(controller, decision::of_upgrade_step(reason));
    }
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.to_owned()),
        action: action.to_owned(),
        secondary,
    };
    ctx.cluster.record(reference, &event, series).await;
}

/// What [`carry_out`] did of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub(crate) enum Carried {
    /// Every write the plan asked for.
    All,
    /// A batch: the owner is to be planned again soon ([`batch::NEXT_STEP`]).
    Part,
    /// Nothing, as an earlier batch is not in the cache yet: the plan was
    /// made from a world without Tandem's own last writes, so what it
    /// decided from them (a restart counted again) is not to be announced;
    /// planned again soon, like [`Carried::Part`].
    Awaited,
}

impl Carried {
    /// The requeue of a reconcile that would otherwise look again after
    /// `otherwise`.
    pub(crate) fn requeue(self, otherwise: Duration) -> Duration {
        match self {
            Carried::All => otherwise,
            Carried::Part | Carried::Awaited => otherwise.min(batch::NEXT_STEP),
        }
    }
}

/// One write of a batch, carried out.
struct Done<'a> {
    reason: &'a str,
    object: &'a Value,
    note: &'a str,
}

/// Carries out what a plan decided for the objects of `regarding`: each
/// `apply` server-side applied (field manager `tandem`, retried on 409), each
/// `delete` deleted in the background (one already gone is no error).
/// `resource_of` gives an object's API; an object it cannot place is skipped
/// (the plan only makes objects of kinds it was given).
///
/// With [`Context::pace`] unbounded every write is made, each with an Event
/// on `regarding` saying why. Otherwise (`tandem serve`) a bounded step
/// ([`batch`]): nothing while an earlier batch of this owner is not yet in
/// `observed` (the objects the plan was made from), else the plan's first
/// writes up to the owner's batch size, in the plan's order, stopping at
/// the first failure, with one Event per reason and kind of object. The
/// batch size grows after a batch written whole and starts over after a
/// failure; the writes made are expected in the cache.
pub(crate) async fn carry_out(
    ctx: &Context,
    regarding: &ObjectReference,
    (apply, delete): (&[Apply], &[Delete]),
    observed: &[&Value],
    resource_of: impl Fn(&Value) -> Option<ApiResource>,
) -> Result<Carried, Error> {
    let owner = owner_key(regarding);
    let now = (ctx.now)();
    let planned = apply.len().saturating_add(delete.len());
    let batched = ctx.pace != Pace::Unbounded;
    let (size, awaited) = if batched {
        let mut steps = ctx.steps();
        let step = steps.entry(owner.clone()).or_insert_with(|| Step {
            size: ctx.pace.first(),
            expected: Vec::new(),
        });
        step.expected = batch::outstanding(
            std::mem::take(&mut step.expected),
            observed,
            now,
            batch::EXPECTATION_TIMEOUT,
        );
        let awaited = !step.expected.is_empty();
        let size = step.size;
        if planned == 0 && !awaited {
            // The burst is over: the next one starts slow again.
            steps.remove(&owner);
        }
        (size, awaited)
    } else {
        (usize::MAX, false)
    };
    let count = batch::this_pass(planned, size, awaited);
    if awaited {
        tracing::debug!(owner, planned, "an earlier batch is not in the cache yet");
    }
    let mut done: Vec<Done<'_>> = Vec::new();
    let mut expected: Vec<batch::Expected> = Vec::new();
    let result = write_batch(
        ctx,
        regarding,
        (apply, delete),
        count,
        (observed, &resource_of),
        (&mut done, &mut expected),
        batched,
    )
    .await;
    if batched {
        let mut steps = ctx.steps();
        if let Some(step) = steps.get_mut(&owner) {
            step.expected.extend(expected);
            if count > 0 {
                let outcome = if result.is_ok() {
                    batch::Outcome::Written
                } else {
                    batch::Outcome::Failed
                };
                step.size = ctx.pace.after(size, outcome);
            }
        }
    }
    let left = planned.saturating_sub(count);
    announce(ctx, regarding, &done, left).await;
    result?;
    Ok(if awaited {
        Carried::Awaited
    } else if left == 0 {
        Carried::All
    } else {
        Carried::Part
    })
}

/// How an owner's step is keyed: `Kind namespace/name`.
fn owner_key(regarding: &ObjectReference) -> String {
    format!(
        "{} {}/{}",
        regarding.kind.as_deref().unwrap_or_default(),
        regarding.namespace.as_deref().unwrap_or_default(),
        regarding.name.as_deref().unwrap_or_default()
    )
}

/// The owner's step: the next batch's size and what the last ones wrote.
#[derive(Debug)]
struct Step {
    size: usize,
    expected: Vec<batch::Expected>,
}

/// Makes the first `count` writes of the plan, in its order: applies, then
/// deletions. What the cache is to show of each write made is pushed to
/// `expected`; the write itself to `done` when `batched` (its Event comes
/// with the batch's), else its Event is recorded at once. Stops at the
/// first failure.
async fn write_batch<'a>(
    ctx: &Context,
    regarding: &ObjectReference,
    (apply, delete): (&'a [Apply], &'a [Delete]),
    count: usize,
    (observed, resource_of): (&[&Value], &impl Fn(&Value) -> Option<ApiResource>),
    (done, expected): (&mut Vec<Done<'a>>, &mut Vec<batch::Expected>),
    batched: bool,
) -> Result<(), Error> {
    let controller = controller_of(regarding.kind.as_deref().unwrap_or_default());
    let observed = batch::by_identity(observed);
    let seen = |object: &Value| observed.get(&batch::identity_of(object)).copied();
    for step in apply.iter().take(count) {
        let Some(resource) = resource_of(&step.object) else {
            continue;
        };
        let kind = step.object["kind"].as_str().unwrap_or("an object");
        let name = step.object["metadata"]["name"].as_str().unwrap_or_default();
        retry_conflicts(ctx, regarding, &format!("applying {kind} {name}"), || {
            ctx.cluster.apply(&resource, &step.object)
        })
        .await?;
        ctx.metrics.decided(controller, decision::of_apply(step));
        expected.push(batch::Expected::applied(
            &step.object,
            seen(&step.object),
            (ctx.now)(),
        ));
        if batched {
            done.push(Done {
                reason: step.change.reason(),
                object: &step.object,
                note: &step.note,
            });
        } else {
            let reason = step.change.reason();
            record(
                ctx,
                regarding,
                reason,
                &step.note,
                Some(&step.object),
                false,
            )
            .await;
        }
    }
    for step in delete.iter().take(count.saturating_sub(apply.len())) {
        let Some(resource) = resource_of(&step.object) else {
            continue;
        };
        let namespace = step.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let name = step.object["metadata"]["name"].as_str().unwrap_or_default();
        match ctx.cluster.delete(&resource, namespace, name).await {
            Ok(()) => {
                ctx.metrics.decided(controller, decision::of_delete(step));
                expected.push(batch::Expected::deleted(&step.object, (ctx.now)()));
                if batched {
                    done.push(Done {
                        reason: "Deleted",
                        object: &step.object,
                        note: &step.note,
                    });
                } else {
                    record(
                        ctx,
                        regarding,
                        "Deleted",
                        &step.note,
                        Some(&step.object),
                        false,
                    )
                    .await;
                }
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The Events of a batch's writes `done`: one per reason and kind of
/// object ([`batch::summarise`]), saying how many writes the plan has
/// `left`. (Unbounded, each write's Event follows it at once.)
async fn announce(ctx: &Context, regarding: &ObjectReference, done: &[Done<'_>], left: usize) {
    let written: Vec<batch::Written<'_>> = done
        .iter()
        .map(|d| batch::Written {
            reason: d.reason,
            kind: d.object["kind"].as_str().unwrap_or("object"),
            name: d.object["metadata"]["name"].as_str().unwrap_or_default(),
            note: d.note,
        })
        .collect();
    for summary in batch::summarise(&written, left) {
        match summary.writes.as_slice() {
            // One write: its own Event, about its object, in the series of
            // that object's Events.
            [one] => {
                let object = done.get(*one).map(|d| d.object);
                record(
                    ctx,
                    regarding,
                    &summary.reason,
                    &summary.note,
                    object,
                    false,
                )
                .await;
            }
            // Several: about none of them alone, and a series of its own
            // (a folded Event keeps its first note: a second batch's would
            // be lost).
            _ => {
                let event = Event {
                    type_: EventType::Normal,
                    reason: summary.reason.clone(),
                    note: Some(summary.note.clone()),
                    action: if summary.reason == "Deleted" {
                        "Delete"
                    } else {
                        "Apply"
                    }
                    .to_owned(),
                    secondary: None,
                };
                ctx.cluster.record(regarding, &event, Series::Own).await;
            }
        }
    }
}

/// What to do after a failed reconcile of `key`: wait, longer each time in a
/// row, and log it with the error's kind.
fn failed(ctx: &Context, key: &str, error: &Error) -> Action {
    if error.is_namespace_terminating() {
        // Seen on a real API server while a namespace is deleted: its
        // content goes in no set order, so a service may outlive children
        // the namespace controller already removed. Its own deletion ends it.
        tracing::info!(object = key, %error, "the namespace is being deleted: not retrying");
        return Action::await_change();
    }
    let failures = {
        let mut failures = ctx.failures();
        let count = failures.entry(key.to_owned()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    };
    let wait = FailureBackoff::jittered(
        ctx.failure_backoff.delay(failures, error.is_transient()),
        jitter_unit(key),
    );
    tracing::warn!(object = key, kind = error.kind(), failures, ?wait, %error, "reconcile failed; retrying");
    Action::requeue(wait)
}

/// Runs a controller of `K` on the process's caches until `stop`: waits
/// until the caches have listed, reconciles every object once, then each
/// object an event concerns (batched by [`window::batched`]: a trigger
/// waits at most [`window::BATCH_WINDOW`]), and on a failure
/// again after [`FailureBackoff`]. When `stop` completes it starts no new
/// reconcile, lets those in flight finish and returns.
pub async fn run_controller<K, F, Fut>(
    ctx: Arc<Context>,
    caches: Arc<Caches>,
    store: Store<K>,
    reconcile: F,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) where
    K: Queue + Clone + std::fmt::Debug + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let kind = K::kind(&()).into_owned();
    caches.ready().await;
    let waiting = ctx
        .metrics
        .waiting
        .get_or_create(&metrics::ControllerLabels {
            controller: controller_of(&kind),
        })
        .clone();
    let turns = turns::Turns::new(usize::from(CONCURRENCY), waiting);
    let marks = turns.clone();
    // Set once the queue ends (the controller stopping): a reconcile still
    // waiting for its turn then starts no work, as kube-runtime starts none
    // once its queue ends.
    let stopped = Arc::new(AtomicBool::new(false));
    let ending = stopped.clone();
    let queue = window::batched(caches.queue(&store).take_until(stop), window::BATCH_WINDOW)
        .map(move |(object, cause)| {
            if cause == crate::watch::caches::Cause::OwnSpec {
                marks.spec_changed(object.clone());
            }
            Some(Ok::<_, Infallible>(object))
        })
        .chain(futures::stream::once(async move {
            ending.store(true, Ordering::SeqCst);
            None
        }))
        .filter_map(std::future::ready);
    // Every reconcile counted and timed (`/metrics`), from when it has its
    // turn.
    let reconcile = Arc::new(Mutex::new(measured(controller_of(&kind), reconcile)));
    let label = kind.clone();
    let objects = store.clone();
    applier(
        move |object: Arc<K>, ctx: Arc<Context>| {
            let key = format!("{label} {}", object_key(object.as_ref()));
            let controller = controller_of(&label);
            let (turns, objects, reconcile) = (turns.clone(), objects.clone(), reconcile.clone());
            let stopped = stopped.clone();
            Box::pin(async move {
                let reference = ObjectRef::from_obj(object.as_ref());
                // Resting after its last pass ([`rest`]): the triggers that
                // arrive meanwhile are held by the applier, as one.
                let now = tokio::time::Instant::now();
                if let Some(until) = ctx.rests.resting(&key, now) {
                    let rest = until.saturating_duration_since(now);
                    tracing::debug!(object = key, ?rest, "resting after its last pass");
                    ctx.metrics
                        .rested
                        .get_or_create(&metrics::ControllerLabels { controller })
                        .inc_by(rest.as_secs_f64());
                    tokio::time::sleep_until(until).await;
                }
                let _turn = turns.turn(reference.clone()).await;
                if stopped.load(Ordering::SeqCst) {
                    return Ok(Action::await_change());
                }
                // Read again now that it is its turn: the newest spec.
                let Some(object) = objects.get(&reference) else {
                    ctx.rests.forget(&key);
                    return Ok(Action::await_change());
                };
                let reconciling = {
                    let mut reconcile = reconcile.lock().unwrap_or_else(PoisonError::into_inner);
                    (*reconcile)(object, ctx.clone())
                };
                let result = reconciling.await;
                if result.is_ok() {
                    ctx.failures().remove(&key);
                }
                result
            })
        },
        move |object: Arc<K>, error: &Error, ctx: Arc<Context>| {
            let key = format!("{} {}", K::kind(&()), object_key(object.as_ref()));
            failed(&ctx, &key, error)
        },
        ctx,
        store,
        queue,
        controller_config(),
    )
    .for_each(|result| async move {
        match result {
            Ok((object, _)) => tracing::debug!(%object, "reconciled"),
            Err(e) => tracing::debug!(error = %e, "controller"),
        }
    })
    .await;
    caches.close::<K>();
    tracing::info!(kind, "controller stopped");
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

/// Whether an object's own status was written, or the object had gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusWrite {
    Written,
    /// Deleted between the cache's read and the write (its namespace being
    /// deleted, say): there is nothing left to report on, and the deletion
    /// is a change the controller hears of anyway; not a failure to retry.
    Gone,
}

/// Merge-patches `status` into the object's status subresource, retrying
/// conflicts ([`retry_conflicts`]); a 404 is [`StatusWrite::Gone`].
pub(crate) async fn write_status(
    ctx: &Context,
    regarding: &ObjectReference,
    resource: &ApiResource,
    (namespace, name): (&str, &str),
    status: &(impl serde::Serialize + Sync),
) -> Result<StatusWrite, kube::Error> {
    let patch = kube::api::Patch::Merge(serde_json::json!({ "status": status }));
    let written = retry_conflicts(ctx, regarding, "writing the status", || {
        ctx.cluster
            .patch(resource, namespace, name, cluster::Part::Status, &patch)
    })
    .await;
    match written {
        Ok(()) => Ok(StatusWrite::Written),
        Err(e) if is_not_found(&e) => {
            tracing::debug!(namespace, name, "gone before its status was written");
            Ok(StatusWrite::Gone)
        }
        Err(e) => Err(e),
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
                ctx.cluster.record(regarding, &event, Series::Fold).await;
                return Err(e);
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch compares what it wrote and awaits with the pods it names
    /// only: those this pass applies and those an earlier batch awaits, as
    /// the writes see them; every other pod is left unread.
    #[test]
    fn only_the_pods_a_batch_writes_or_awaits_are_rendered() {
        let ctx = Context::new(
            Arc::new(memory::Memory::new(std::collections::BTreeMap::new())),
            Options::default(),
        );
        let regarding = ObjectReference {
            kind: Some("InferenceService".into()),
            namespace: Some("ai".into()),
            name: Some("qwen".into()),
            ..ObjectReference::default()
        };
        let pod = |name: &str| crate::plan::shared::pod::Pod {
            name: name.into(),
            namespace: "ai".into(),
            ..Default::default()
        };
        let pods = [pod("a"), pod("b"), pod("c")];
        let apply = |name: &str| Apply {
            object: serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "ai"}}),
            change: crate::plan::shared::write::Change::Update,
            note: String::new(),
            replica: None,
        };
        let names = |rendered: Vec<Value>| -> Vec<String> {
            rendered
                .iter()
                .map(|p| {
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        };
        assert_eq!(
            names(ctx.pods_written(&regarding, &pods, &[apply("b")])),
            ["b"]
        );
        assert!(ctx.pods_written(&regarding, &pods, &[]).is_empty());
        ctx.steps().insert(
            owner_key(&regarding),
            Step {
                size: 1,
                expected: vec![batch::Expected::applied(
                    &apply("c").object,
                    None,
                    Timestamp::UNIX_EPOCH,
                )],
            },
        );
        assert_eq!(
            names(ctx.pods_written(&regarding, &pods, &[apply("a")])),
            ["a", "c"]
        );
        assert_eq!(
            ctx.pods_written(&regarding, &pods, &[apply("a")])[0],
            pods[0].observed()
        );
    }

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

    /// The Status a real kube-apiserver answers a create in a namespace being
    /// deleted with (v1.36, seen in the tests' audit log), and an RBAC refusal.
    #[test]
    fn a_namespace_being_deleted_is_told_from_a_refusal() {
        let terminating: kube::core::Status = serde_json::from_value(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": "leaderworkersets.leaderworkerset.x-k8s.io \"a-decode-1\" is forbidden: unable to create new content in namespace e2e because it is being terminated",
            "details": {"name": "a-decode-1", "group": "leaderworkerset.x-k8s.io", "kind": "leaderworkersets",
                "causes": [{"reason": "NamespaceTerminating",
                    "message": "namespace e2e is being terminated", "field": "metadata.namespace"}]}
        }))
        .unwrap();
        let error = Error::Kube(kube::Error::Api(Box::new(terminating)));
        assert!(error.is_namespace_terminating());
        assert_eq!(error.kind(), "namespace_terminating");
        assert!(!error.is_transient());

        let rbac: kube::core::Status = serde_json::from_value(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": "pods is forbidden: User \"x\" cannot patch resource \"pods\"",
            "details": {"kind": "pods"}
        }))
        .unwrap();
        let error = Error::Kube(kube::Error::Api(Box::new(rbac)));
        assert!(!error.is_namespace_terminating());
        assert_eq!(error.kind(), "refused");
    }
}
