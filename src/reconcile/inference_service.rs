//! The InferenceService reconciler: lists the service's children and pods,
//! asks `plan::service::reconcile` what to do, server-side applies and deletes
//! that, writes status when it changed, and records an Event for every change
//! saying why, and for every step of an upgrade. It looks again when the plan
//! says the next upgrade step is due (Gateways are not watched).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{Context, Error, carry_out, is_not_found, record, retry_conflicts};
use crate::api::ScaleView;
use crate::api::inference_service::{InferenceService, InferenceServiceStatus};
use crate::plan::children;
use crate::plan::service::{self as service_plan, CHILD_KINDS, ChildKind, World};
use crate::plan::status;
use crate::server::controller_metrics::measured;

/// How often an unchanged service is looked at again (status of pods that
/// changed without a watch event, children deleted by hand).
const RESYNC: Duration = Duration::from_secs(300);

fn api_resource(kind: &ChildKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(kind.group(), kind.version(), kind.kind),
        kind.plural,
    )
}

fn child_api(
    ctx: &Context,
    namespace: &str,
    object: &Value,
) -> Option<(Api<DynamicObject>, String)> {
    let kind = ChildKind::of(object)?;
    let name = object["metadata"]["name"].as_str()?.to_owned();
    Some((
        Api::namespaced_with(ctx.client.clone(), namespace, &api_resource(&kind)),
        name,
    ))
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
    if service.metadata.deletion_timestamp.is_some() {
        // Children carry owner references; the garbage collector removes them.
        return Ok(Action::await_change());
    }

    // Observe.
    let selector = format!(
        "{}={name},{}={}",
        children::SERVICE,
        children::MANAGED_BY,
        children::MANAGER
    );
    let mut owned = Vec::new();
    let mut unavailable = BTreeSet::new();
    for kind in &CHILD_KINDS {
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), namespace, &api_resource(kind));
        match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => owned.extend(
                list.items
                    .into_iter()
                    .filter_map(|item| serde_json::to_value(item).ok())
                    .filter(|item| children::owns(&service, item)),
            ),
            Err(e) if is_not_found(&e) => {
                unavailable.insert(kind.kind.to_owned());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let pods: Vec<Value> = Api::<Pod>::namespaced(ctx.client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("{}={name}", children::SERVICE)))
        .await?
        .items
        .into_iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect();

    // Only the views that hold a lock matter (a lock whose view is gone, or
    // recreated, is dropped), so each is read by name: listing the
    // namespace's views on every reconcile cost memory in proportion to
    // services × views (BENCHMARKS.md, Memory).
    let views = Api::<ScaleView>::namespaced(ctx.client.clone(), namespace);
    let mut scale_views = Vec::new();
    let locked: BTreeSet<&str> = service
        .status
        .iter()
        .flat_map(|status| status.scale_views.iter())
        .map(|lock| lock.name.as_str())
        .collect();
    for view in locked {
        scale_views.extend(views.get_opt(view).await?);
    }

    // Plan.
    let world = World {
        children: &owned,
        pods: &pods,
        unavailable: &unavailable,
        scale_views: &scale_views,
    };
    let pass = service_plan::reconcile(&service, &world, &ctx.options, &Time((ctx.now)()));

    // Apply, delete, report.
    let reference = service.object_ref(&());
    carry_out(&ctx, &reference, &pass.apply, &pass.delete, |object| {
        child_api(&ctx, namespace, object)
    })
    .await?;
    for event in &pass.events {
        record(&ctx, &reference, event.reason, &event.note, None).await;
    }
    let current = service.status.clone().unwrap_or_default();
    let stale_locks = pass.status.scale_views != current.scale_views;
    if status::reported(&pass.status) != status::reported(&current) || stale_locks {
        let mut patch = status_patch(&current, &pass.status);
        if stale_locks {
            drop_stale_locks(&mut patch, &service, &pass.status);
        }
        let api: Api<InferenceService> = Api::namespaced(ctx.client.clone(), namespace);
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let write = || api.patch_status(name, &params, &patch);
        let written = if stale_locks {
            // Guarded by the resourceVersion: repeating it cannot succeed.
            write().await
        } else {
            retry_conflicts(&ctx, &reference, "writing the status", write).await
        };
        match written {
            Ok(_) => {}
            // Deleted since it was read: its children go with it.
            Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::requeue(
        pass.requeue.map_or(RESYNC, |d| d.min(RESYNC)),
    ))
}

/// A merge patch of this reconciler's status fields; components of roles that
/// no longer exist are removed explicitly (a merge patch merges maps).
fn status_patch(current: &InferenceServiceStatus, next: &InferenceServiceStatus) -> Value {
    let mut reported = status::reported(next);
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

fn error_policy(service: Arc<InferenceService>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(kind = "InferenceService", object = %super::object_key(service.as_ref()), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

/// Runs the controller until the stream ends (shutdown).
///
/// When `stop` completes the controller starts no new reconcile, lets those
/// in flight finish and returns (leadership hand-over, `leader::lead`).
pub async fn run(ctx: Arc<Context>, stop: impl Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    let services: Api<InferenceService> = Api::all(client.clone());
    let lws = api_resource(&service_plan::LEADER_WORKER_SET);
    let deployments = api_resource(&service_plan::DEPLOYMENT);
    let managed = watcher::Config::default().labels(&format!(
        "{}={}",
        children::MANAGED_BY,
        children::MANAGER
    ));
    let pods: Api<Pod> = Api::all(client.clone());
    Controller::new(services, watcher::Config::default())
        .with_config(super::controller_config())
        .owns_with(
            Api::<DynamicObject>::all_with(client.clone(), &lws),
            lws,
            managed.clone(),
        )
        // The router's endpoint picker: its readiness is the router's status.
        .owns_with(
            Api::<DynamicObject>::all_with(client.clone(), &deployments),
            deployments,
            managed,
        )
        // A view that goes away may leave a stale lock to drop.
        .watches(
            Api::<ScaleView>::all(client.clone()),
            watcher::Config::default(),
            |view| {
                let namespace = view.namespace()?;
                Some(
                    ObjectRef::<InferenceService>::new(&view.spec.target_ref.name)
                        .within(&namespace),
                )
            },
        )
        .watches(
            pods,
            watcher::Config::default().labels(children::SERVICE),
            |pod| {
                let service = pod.labels().get(children::SERVICE)?.clone();
                Some(ObjectRef::<InferenceService>::new(&service).within(&pod.namespace()?))
            },
        )
        .graceful_shutdown_on(stop)
        .run(measured("InferenceService", reconcile), error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(service = %object, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
        })
        .await;
}
