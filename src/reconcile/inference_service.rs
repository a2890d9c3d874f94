//! The InferenceService reconciler: reads the service's children and pods
//! from the caches, asks `plan::inference_service::service::reconcile` what to do, server-side
//! applies and deletes that, writes status when it changed, and records an
//! Event for every change saying why, and for every step of an upgrade. It
//! looks again when the plan says the next upgrade step is due.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, Patch};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::cluster::{Cluster, Parsed, Part, Series, resource, resource_of};
use super::{Context, Error, carry_out, is_not_found, record_in, retry_conflicts};
use crate::api::inference_service::{InferenceService, InferenceServiceStatus};
use crate::plan::inference_service::recovery;
use crate::plan::inference_service::service::{self as service_plan, World};
use crate::plan::inference_service::status::{self, StatusWrite};
use crate::plan::shared::child_kinds::{CHILD_KINDS, ChildKind};
use crate::plan::shared::children;
use crate::watch::caches::Caches;

/// How often an unchanged service is looked at again: a safety net only,
/// since every kind it creates, its pods and its views are watched.
const RESYNC: Duration = Duration::from_secs(300);

fn api_resource(kind: &ChildKind) -> ApiResource {
    resource(kind.api_version, kind.kind, kind.plural)
}

/// The children of `service` in the caches, found by their `labels`, and
/// the kinds it may create that cannot be read. The children `kept` from
/// the service's last pass are handed back where they have not changed
/// since ([`Parsed`]).
fn owned_children(
    cluster: &dyn Cluster,
    service: &InferenceService,
    (namespace, labels): (&str, &[(&str, &str)]),
    kept: &mut Parsed,
) -> (Vec<Value>, BTreeSet<String>) {
    let mut owned = Vec::new();
    let mut unavailable = BTreeSet::new();
    for kind in &CHILD_KINDS {
        match cluster.list_reusing(&api_resource(kind), namespace, labels, kept) {
            Ok(found) => owned.extend(
                found
                    .into_iter()
                    .filter(|item| children::owns(service, item)),
            ),
            Err(unserved) => {
                tracing::debug!(%unserved, "a kind the service may create cannot be read");
                unavailable.insert(kind.name().to_owned());
            }
        }
    }
    (owned, unavailable)
}

/// Reconciles one InferenceService. Every log line it writes names the
/// service (the span's `object`).
#[tracing::instrument(name = "reconcile", skip_all, fields(kind = "InferenceService", object = %super::object_key(service.as_ref())))]
pub async fn reconcile(service: Arc<InferenceService>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(namespace), Some(name)) = (
        service.metadata.namespace.as_deref(),
        service.metadata.name.as_deref(),
    ) else {
        return Err(Error::Unnamed(format!(
            "InferenceService {}",
            service.name_any()
        )));
    };
    let key = format!("InferenceService {namespace}/{name}");
    if service.metadata.deletion_timestamp.is_some() {
        ctx.forget_step(&service.object_ref(&()));
        ctx.rests.forget(&key);
        ctx.take_parsed(&key);
        // Children carry owner references; the garbage collector removes them.
        return Ok(Action::await_change());
    }

    // Observe, from the caches. Observing and planning wait on nothing:
    // their time is the pass's own cost, which sets its rest ([`super::rest`]).
    let started = tokio::time::Instant::now();
    let cluster = &ctx.cluster;
    let labels = [
        (children::SERVICE, name),
        (children::MANAGED_BY, children::MANAGER),
    ];
    let (owned, unavailable) = owned_children(
        cluster.as_ref(),
        &service,
        (namespace, &labels),
        &mut ctx.take_parsed(&key),
    );
    let pods = cluster
        .pods(namespace, &[(children::SERVICE, name)])
        .unwrap_or_default();
    // Only the views that hold a lock matter (a lock whose view is gone, or
    // recreated, is dropped).
    let scale_views: Vec<_> = service
        .status
        .iter()
        .flat_map(|status| status.scale_views.iter())
        .map(|lock| lock.name.as_str())
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .filter_map(|view| cluster.scale_view(namespace, view))
        .map(|view| (*view).clone())
        .collect();

    let installed = cluster.installed();

    // Plan.
    let world = World {
        children: &owned,
        pods: &pods,
        unavailable: &unavailable,
        installed: &installed,
        scale_views: &scale_views,
    };
    let pass = service_plan::reconcile(&service, &world, &ctx.options, &Time((ctx.now)()));
    let planned = tokio::time::Instant::now();
    ctx.rests
        .passed(&key, planned.saturating_duration_since(started), planned);

    // Apply, delete, report.
    let reference = service.object_ref(&());
    // What the plan was made from: what a batch wrote is awaited there.
    let pods_observed = ctx.pods_written(&reference, &pods, &pass.apply);
    let observed: Vec<&Value> = owned.iter().chain(&pods_observed).collect();
    let carried = carry_out(
        &ctx,
        &reference,
        (&pass.apply, &pass.delete),
        &observed,
        |object| ChildKind::of(object).map(|kind| api_resource(&kind)),
    )
    .await?;
    // Read, planned and written: kept for the next pass when wide.
    ctx.keep_parsed(&key, owned);
    for event in &pass.events {
        // A recovery's Events each say something new (the restart's
        // number and wait): a series of their own. They go with the write
        // of the replica's record: a pass that wrote nothing, its cache
        // not showing the record written a moment ago, counted that
        // restart again and says nothing of it.
        let recovering = recovery::EVENT_REASONS.contains(&event.reason);
        if recovering && carried == super::Carried::Awaited {
            continue;
        }
        let series = if recovering {
            Series::Own
        } else {
            Series::Fold
        };
        record_in(
            &ctx,
            &reference,
            (event.reason, &event.note),
            None,
            event.warning,
            series,
        )
        .await;
    }
    let held = match write_status(&ctx, &service, &reference, &pass.status).await {
        Ok(held) => held,
        // Deleted since it was read: its children go with it.
        Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    };
    let again = [pass.requeue, held]
        .into_iter()
        .flatten()
        .fold(RESYNC, Duration::min);
    Ok(Action::requeue(carried.requeue(again)))
}

/// Writes `next` over the service's stored status when it differs and is
/// due ([`status::status_write`]); a change of counts alone within the
/// pace is held, and the wait after which the reconcile looks again to
/// write it is returned. A lock entry that is no longer live is dropped
/// at once.
async fn write_status(
    ctx: &Context,
    service: &InferenceService,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    next: &InferenceServiceStatus,
) -> Result<Option<Duration>, kube::Error> {
    let (namespace, name) = (
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default(),
    );
    let current = service.status.clone().unwrap_or_default();
    let stale_locks = next.scale_views != current.scale_views;
    let key = format!("{namespace}/{name}");
    let due = status::status_write(
        &current,
        next,
        ctx.status_writes.since(&key),
        ctx.status_writes.pace,
    );
    match due {
        StatusWrite::After(wait) if !stale_locks => return Ok(Some(wait)),
        StatusWrite::Unchanged if !stale_locks => return Ok(None),
        _ => {}
    }
    let mut patch = status_patch(&current, next);
    if stale_locks {
        drop_stale_locks(&mut patch, service, next);
    }
    let services = resource_of::<InferenceService>();
    let patch = Patch::Merge(patch);
    let write = || {
        ctx.cluster
            .patch(&services, namespace, name, Part::Status, &patch)
    };
    if stale_locks {
        // Guarded by the resourceVersion: repeating it cannot succeed.
        write().await?;
    } else {
        retry_conflicts(ctx, reference, "writing the status", write).await?;
    }
    ctx.status_writes.written(&key);
    Ok(None)
}

/// The fields of a role's component that are left out when unset: written
/// as null, so that a merge patch removes a reason that no longer holds (a
/// crash loop, or a wait for the scheduler, that ended) instead of leaving
/// it stored, which would make every later reconcile write the status again.
const COMPONENT_OPTIONAL_FIELDS: [&str; 5] = [
    "lastUpdateTime",
    "currentRevision",
    "updateRevision",
    "failingReason",
    "unschedulableReason",
];

/// A merge patch of this reconciler's status fields; components of roles that
/// no longer exist, and fields of a component that are no longer set, are
/// removed explicitly (a merge patch merges maps).
fn status_patch(current: &InferenceServiceStatus, next: &InferenceServiceStatus) -> Value {
    let mut reported = status::reported(next);
    // Every field the stored component has and the next one leaves out is
    // removed too (`keptForPair` once the pair agrees, a field added later):
    // the list above is what is always written, stored or not.
    let stored = serde_json::to_value(&current.components).unwrap_or_default();
    if let Some(components) = reported["components"].as_object_mut() {
        for (role, component) in components.iter_mut() {
            let Some(component) = component.as_object_mut() else {
                continue;
            };
            for field in COMPONENT_OPTIONAL_FIELDS {
                component.entry(field).or_insert(Value::Null);
            }
            for field in stored[role]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
            {
                component.entry(field.clone()).or_insert(Value::Null);
            }
        }
    }
    for gone in current
        .components
        .keys()
        .filter(|k| !next.components.contains_key(*k))
    {
        reported["components"][gone] = Value::Null;
    }
    json!({"status": reported})
}

/// Adds the lock entries that are still live to a status patch, guarded by
/// the service's resourceVersion: a lock the ScaleView controller wrote since
/// the service was read makes the patch fail with 409 (and the reconcile
/// retry) instead of being dropped.
fn drop_stale_locks(patch: &mut Value, service: &InferenceService, next: &InferenceServiceStatus) {
    patch["status"]["scaleViews"] = json!(next.scale_views);
    patch["metadata"]["resourceVersion"] = json!(service.metadata.resource_version);
}

/// Runs the controller on the process's caches until `stop` (see
/// [`super::run_controller`]). Its triggers: the services; every kind a
/// service creates (through its owner reference); the pods of services,
/// when something a plan reads of them changed; the views that lock a
/// service.
pub async fn run(
    ctx: Arc<Context>,
    caches: Arc<Caches>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let store = caches.services.clone();
    super::run_controller(ctx, caches, store, reconcile, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::inference_service::ComponentStatus;

    #[test]
    fn a_reason_that_no_longer_holds_is_removed_by_the_patch() {
        let waiting = ComponentStatus {
            unschedulable_replicas: 1,
            unschedulable_reason: Some("replica 0: unschedulable".into()),
            failing_reason: Some("replica 0: CrashLoopBackOff".into()),
            kept_for_pair: Some("the prefillers ask 0 replicas".into()),
            ..Default::default()
        };
        let mut current = InferenceServiceStatus::default();
        current.components.insert("decode".into(), waiting);
        let mut next = InferenceServiceStatus::default();
        next.components
            .insert("decode".into(), ComponentStatus::default());
        let patch = status_patch(&current, &next);
        let decode = &patch["status"]["components"]["decode"];
        // A merge patch without the key would leave the stale reason stored.
        assert_eq!(decode.get("unschedulableReason"), Some(&Value::Null));
        assert_eq!(decode.get("failingReason"), Some(&Value::Null));
        assert_eq!(decode.get("keptForPair"), Some(&Value::Null));
        assert_eq!(decode["unschedulableReplicas"], 0);
    }
}
