//! The GroupReplication half of the ResourceScalingGroup controller: reads
//! the target resources (the template), the clones and the pods of every
//! group, asks `plan::replication::reconcile` what to do, server-side applies
//! and deletes that with an Event saying why for each, and merge-patches the
//! status when it changed. The RSG controller dispatches GroupReplication
//! groups here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{Context, Error, carry_out, is_not_found, retry_conflicts};
use crate::api::resource_scaling_group::{self as rsg_api, ResourceScalingGroup};
use crate::plan::adapter;
use crate::plan::replication::{self, World};

/// How often an unchanged group is looked at again: pods that changed
/// readiness or cost, and clones of kinds the controller does not watch
/// (LeaderWorkerSets, RoleBasedGroups, discovered kinds). Deployment and
/// StatefulSet clones trigger a reconcile as soon as they change.
const RESYNC: Duration = Duration::from_secs(60);

/// The GroupVersionKind of `kind` in `api_version` (`apps/v1`, or `v1` for
/// the core group).
fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = adapter::group_version(api_version);
    GroupVersionKind::gvk(group, version, kind)
}

/// The API resource of a kind: from the adapter table ([`adapter::KNOWN`]),
/// else from API discovery, through the same cache the InplaceScaling
/// reconciler and the webhook use. None when the cluster does not serve it.
async fn api_resource(
    ctx: &Context,
    api_version: &str,
    kind: &str,
) -> Result<Option<ApiResource>, Error> {
    let gvk = gvk(api_version, kind);
    if let Some(known) = adapter::known(api_version, kind) {
        return Ok(Some(ApiResource::from_gvk_with_plural(&gvk, known.plural)));
    }
    match ctx.discovery.resolve(api_version, kind).await {
        Ok(found) => Ok(found.map(|found| ApiResource::from_gvk_with_plural(&gvk, &found.plural))),
        Err(reason) => Err(Error::Plan {
            object: format!("{kind} ({api_version})"),
            reason,
        }),
    }
}

/// An object read through a DynamicObject Api as JSON, with its apiVersion
/// and kind (list items may come without them).
fn as_value(object: DynamicObject, resource: &ApiResource) -> Option<Value> {
    let mut value = serde_json::to_value(object).ok()?;
    value["apiVersion"] = json!(resource.api_version);
    value["kind"] = json!(resource.kind);
    Some(value)
}

/// Reconciles one ResourceScalingGroup whose strategy is GroupReplication.
pub async fn reconcile(rsg: Arc<ResourceScalingGroup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(namespace), Some(name)) = (
        rsg.metadata.namespace.as_deref(),
        rsg.metadata.name.as_deref(),
    ) else {
        return Err(Error::Unnamed(format!(
            "ResourceScalingGroup {}",
            rsg.name_any()
        )));
    };
    if rsg.metadata.deletion_timestamp.is_some() {
        // Clones carry owner references; the garbage collector removes them.
        // The originals keep their group labels.
        return Ok(Action::await_change());
    }

    // Observe: the templates, the clones of their kinds, the pods.
    let mut spec = rsg.spec.clone();
    rsg_api::defaults(&mut spec);
    let selector = replication::label_selector(name);
    let mut resources: BTreeMap<(String, String), ApiResource> = BTreeMap::new();
    let mut unavailable = BTreeSet::new();
    let mut templates = Vec::new();
    for target in &spec.target_resources {
        let Some(object) = target.object() else {
            templates.push(None);
            continue;
        };
        let key = (object.api_version.to_owned(), object.kind.to_owned());
        if !resources.contains_key(&key) && !unavailable.contains(object.kind) {
            match api_resource(&ctx, object.api_version, object.kind).await? {
                Some(resource) => {
                    resources.insert(key.clone(), resource);
                }
                None => {
                    unavailable.insert(object.kind.to_owned());
                }
            }
        }
        let Some(resource) = resources.get(&key) else {
            templates.push(None);
            continue;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, resource);
        templates.push(
            api.get_opt(object.name)
                .await?
                .and_then(|o| as_value(o, resource)),
        );
    }
    let mut objects = Vec::new();
    for ((_, kind), resource) in &resources {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, resource);
        match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                objects.extend(list.items.into_iter().filter_map(|o| as_value(o, resource)))
            }
            Err(e) if is_not_found(&e) => {
                unavailable.insert(kind.clone());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let pods: Vec<Value> = Api::<Pod>::namespaced(ctx.client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect();

    // Plan.
    let world = World {
        templates: &templates,
        objects: &objects,
        pods: &pods,
        unavailable: &unavailable,
    };
    let pass = replication::reconcile(&rsg, &world, &Time((ctx.now)()));

    // Apply, delete, report.
    let reference = rsg.object_ref(&());
    let api_of = |object: &Value| -> Option<(Api<DynamicObject>, String)> {
        let key = (
            object["apiVersion"].as_str()?.to_owned(),
            object["kind"].as_str()?.to_owned(),
        );
        let resource = resources.get(&key)?;
        let object_name = object["metadata"]["name"].as_str()?.to_owned();
        Some((
            Api::namespaced_with(ctx.client.clone(), namespace, resource),
            object_name,
        ))
    };
    carry_out(&ctx, &reference, &pass.apply, &pass.delete, api_of).await?;
    for warning in &pass.warnings {
        warn(&ctx, &reference, warning).await;
    }
    if rsg.status.as_ref() != Some(&pass.status) {
        let api: Api<ResourceScalingGroup> = Api::namespaced(ctx.client.clone(), namespace);
        let (params, patch) = (
            PatchParams::default(),
            Patch::Merge(json!({"status": pass.status})),
        );
        retry_conflicts(&ctx, &reference, "writing the status", || {
            api.patch_status(name, &params, &patch)
        })
        .await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// A Warning Event: a listed scale-down candidate that names no group.
async fn warn(ctx: &Context, reference: &ObjectReference, note: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: "CandidateSkipped".to_owned(),
        note: Some(note.to_owned()),
        action: "Scale".to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::warn!(error = %e, "could not record an event");
    }
}
