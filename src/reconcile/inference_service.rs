//! The InferenceService reconciler: lists the service's children and pods,
//! plans with `plan::service`, applies what differs, deletes what the plan no
//! longer has (only children this service owns), writes status when it
//! changed, and records an Event for every change saying why.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{Context, Error, FIELD_MANAGER, stamp, up_to_date};
use crate::api::inference_service::{self, InferenceService, InferenceServiceStatus};
use crate::plan::children;
use crate::plan::service::{self as service_plan, CHILD_KINDS, ChildKind};
use crate::plan::status::{self, Observed};

/// How often an unchanged service is looked at again (status of pods that
/// changed without a watch event, children deleted by hand).
const RESYNC: Duration = Duration::from_secs(300);

fn api_resource(kind: &ChildKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(kind.group(), kind.version(), kind.kind),
        kind.plural,
    )
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

fn key(object: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        text(&object["apiVersion"]),
        text(&object["kind"]),
        text(&object["metadata"]["name"]),
    )
}

fn owned_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
}

/// Reconciles one InferenceService.
pub async fn reconcile(service: Arc<InferenceService>, ctx: Arc<Context>) -> Result<Action, Error> {
    let described = format!("InferenceService {}", service.name_any());
    let (Some(namespace), Some(name), Some(uid)) = (
        service.metadata.namespace.as_deref(),
        service.metadata.name.as_deref(),
        service.metadata.uid.as_deref(),
    ) else {
        return Err(Error::Unnamed(described));
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
            Ok(list) => {
                for item in list.items {
                    let value = serde_json::to_value(item).map_err(|e| Error::Plan {
                        object: described.clone(),
                        reason: format!("a listed {} could not be read: {e}", kind.kind),
                    })?;
                    if owned_by(&value, uid) {
                        owned.push(value);
                    }
                }
            }
            Err(e) if is_not_found(&e) => {
                unavailable.insert(kind.kind);
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

    // Plan. A spec the webhook would deny (stored before the webhook was
    // installed) is reported, not applied.
    let mut problems = Vec::new();
    let findings = inference_service::validate(&service.spec);
    let plan = if findings.is_allowed() {
        let leader_worker_sets: Vec<Value> = owned
            .iter()
            .filter(|o| ChildKind::of(o) == Some(service_plan::LEADER_WORKER_SET))
            .cloned()
            .collect();
        let existing = service_plan::existing_indices(&leader_worker_sets);
        match service_plan::desired(&service, &existing, &ctx.options) {
            Ok(plan) => plan,
            Err(reason) => {
                problems.push(format!("cannot plan: {reason}"));
                Vec::new()
            }
        }
    } else {
        problems.push(format!("invalid spec: {}", findings.denial_message()));
        Vec::new()
    };
    for missing in &unavailable {
        if plan.iter().any(|d| d.object["kind"] == *missing) {
            problems.push(format!("the {missing} API is not installed in the cluster"));
        }
    }

    // Apply what differs. Nothing is deleted while the plan failed.
    let reference = service.object_ref(&());
    let planned: BTreeSet<_> = plan.iter().map(|d| key(&d.object)).collect();
    for desired in &plan {
        let object = stamp(desired.object.clone());
        let Some(kind) = ChildKind::of(&object) else {
            continue;
        };
        if unavailable.contains(kind.kind) {
            continue;
        }
        let current = owned.iter().find(|o| key(o) == key(&object));
        if current.is_some_and(|c| up_to_date(&object, c)) {
            continue;
        }
        let child_name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), namespace, &api_resource(&kind));
        api.patch(
            &child_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await?;
        let (reason, note) = match current {
            None => (
                "Created",
                format!("{} {child_name} created: {}", kind.kind, desired.why),
            ),
            // Same plan as last applied, different fields: changed by hand.
            Some(c)
                if c["metadata"]["annotations"][super::APPLIED_HASH]
                    == object["metadata"]["annotations"][super::APPLIED_HASH] =>
            {
                (
                    "Reverted",
                    format!(
                        "{} {child_name} was changed outside Tandem and is set back: {}",
                        kind.kind, desired.why
                    ),
                )
            }
            Some(_) => (
                "Updated",
                format!("{} {child_name} updated: {}", kind.kind, desired.why),
            ),
        };
        record(&ctx, &reference, reason, note, &object).await;
    }
    if problems.is_empty() {
        for object in owned.iter().filter(|o| !planned.contains(&key(o))) {
            let Some(kind) = ChildKind::of(object) else {
                continue;
            };
            let child_name = object["metadata"]["name"].as_str().unwrap_or_default();
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), namespace, &api_resource(&kind));
            match api.delete(child_name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(e.into()),
            }
            let why = service_plan::why_delete(&service, object);
            record(
                &ctx,
                &reference,
                "Deleted",
                format!("{} {child_name} deleted: {why}", kind.kind),
                object,
            )
            .await;
        }
    }

    // Status, written only when it changed.
    let revision = children::revision(&service.spec);
    let problems: Vec<String> = problems.into_iter().collect();
    let observed = Observed {
        pods: &pods,
        router: None,
        revision: &revision,
        problems: &problems,
    };
    let now = Time((ctx.now)());
    let next = status::status(&service, &observed, &now);
    let current = service.status.clone().unwrap_or_default();
    if reported(&next) != reported(&current) {
        let api: Api<InferenceService> = Api::namespaced(ctx.client.clone(), namespace);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(status_patch(&current, &next)),
        )
        .await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// The part of the status this reconciler writes (scaleViews and upgrade
/// belong to other controllers).
fn reported(status: &InferenceServiceStatus) -> Value {
    json!({
        "observedGeneration": status.observed_generation,
        "conditions": status.conditions,
        "components": status.components,
        "ready": status.ready,
    })
}

/// A merge patch of this reconciler's status fields; components of roles that
/// no longer exist are removed explicitly (a merge patch merges maps).
fn status_patch(current: &InferenceServiceStatus, next: &InferenceServiceStatus) -> Value {
    let mut status = reported(next);
    for gone in current
        .components
        .keys()
        .filter(|k| !next.components.contains_key(*k))
    {
        status["components"][gone] = Value::Null;
    }
    json!({"status": status})
}

async fn record(
    ctx: &Context,
    reference: &ObjectReference,
    reason: &str,
    note: String,
    child: &Value,
) {
    let secondary = ObjectReference {
        api_version: child["apiVersion"].as_str().map(str::to_owned),
        kind: child["kind"].as_str().map(str::to_owned),
        name: child["metadata"]["name"].as_str().map(str::to_owned),
        namespace: child["metadata"]["namespace"].as_str().map(str::to_owned),
        ..Default::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(note),
        action: if reason == "Deleted" {
            "Delete".to_owned()
        } else {
            "Apply".to_owned()
        },
        secondary: Some(secondary),
    };
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::warn!(error = %e, reason, "could not record an event");
    }
}

fn error_policy(service: Arc<InferenceService>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(service = %service.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

/// Runs the controller until the stream ends (shutdown).
pub async fn run(ctx: Arc<Context>) {
    let client = ctx.client.clone();
    let services: Api<InferenceService> = Api::all(client.clone());
    let lws = api_resource(&service_plan::LEADER_WORKER_SET);
    let managed = watcher::Config::default().labels(&format!(
        "{}={}",
        children::MANAGED_BY,
        children::MANAGER
    ));
    let pods: Api<Pod> = Api::all(client.clone());
    Controller::new(services, watcher::Config::default())
        .owns_with(
            Api::<DynamicObject>::all_with(client.clone(), &lws),
            lws,
            managed,
        )
        .watches(
            pods,
            watcher::Config::default().labels(children::SERVICE),
            |pod| {
                let service = pod.labels().get(children::SERVICE)?.clone();
                Some(ObjectRef::<InferenceService>::new(&service).within(&pod.namespace()?))
            },
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(service = %object, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
        })
        .await;
}
