//! The GroupReplication half of the ResourceScalingGroup controller: reads
//! the target resources (the template), the clones and the pods of every
//! group, asks `plan::resource_scaling_group::replication::reconcile` what to do, server-side applies
//! and deletes that with an Event saying why for each, and merge-patches the
//! status when it changed. The RSG controller dispatches GroupReplication
//! groups here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::cluster::{Series, resource, resource_of};
use super::{Context, Error, StatusWrite, carry_out, write_status};
use crate::api::resource_scaling_group::{self as rsg_api, ResourceScalingGroup};
use crate::plan::resource_scaling_group::adapter;
use crate::plan::resource_scaling_group::replication::{self, NAME_LABEL, World};

/// How often an unchanged group is looked at again: a safety net only, since
/// its templates, clones and pods are watched.
const RESYNC: Duration = Duration::from_secs(300);

/// The API resource of a kind: from the adapter table ([`adapter::KNOWN`]),
/// else from API discovery, through the same cache the InplaceScaling
/// reconciler and the webhook use. None when the cluster does not serve it.
async fn api_resource(
    ctx: &Context,
    api_version: &str,
    kind: &str,
) -> Result<Option<ApiResource>, Error> {
    if let Some(known) = adapter::known(api_version, kind) {
        return Ok(Some(resource(api_version, kind, known.plural)));
    }
    match ctx.cluster.resolve(api_version, kind).await {
        Ok(found) => Ok(found.map(|found| resource(api_version, kind, &found.plural))),
        Err(reason) => Err(Error::Plan {
            object: format!("{kind} ({api_version})"),
            reason,
        }),
    }
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
        ctx.forget_step(&rsg.object_ref(&()));
        // Clones carry owner references; the garbage collector removes them.
        // The originals keep their group labels.
        return Ok(Action::await_change());
    }

    // Observe: the templates, the clones of their kinds, the pods.
    let cluster = &ctx.cluster;
    let mut spec = rsg.spec.clone();
    rsg_api::defaults(&mut spec);
    let labels = [(NAME_LABEL, name)];
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
        templates.push(cluster.get(resource, namespace, object.name).await?);
    }
    let mut objects = Vec::new();
    for ((_, kind), resource) in &resources {
        match cluster.list(resource, namespace, &labels) {
            Ok(found) => objects.extend(found),
            Err(unserved) => {
                tracing::debug!(%unserved, "a kind of the group's templates cannot be read");
                unavailable.insert(kind.clone());
            }
        }
    }
    let pods = cluster.pods(namespace, &labels).unwrap_or_default();

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
    let resource_of_object = |object: &Value| -> Option<ApiResource> {
        let key = (
            object["apiVersion"].as_str()?.to_owned(),
            object["kind"].as_str()?.to_owned(),
        );
        resources.get(&key).cloned()
    };
    // What the plan was made from: what a batch wrote is awaited there.
    let pods_observed = ctx.pods_written(&reference, &pods, &pass.apply);
    let observed: Vec<&Value> = objects
        .iter()
        .chain(&pods_observed)
        .chain(templates.iter().flatten())
        .collect();
    let carried = carry_out(
        &ctx,
        &reference,
        (&pass.apply, &pass.delete),
        &observed,
        resource_of_object,
    )
    .await?;
    for warning in &pass.warnings {
        warn(&ctx, &reference, warning).await;
    }
    if rsg.status.as_ref() != Some(&pass.status) {
        let groups = resource_of::<ResourceScalingGroup>();
        if write_status(&ctx, &reference, &groups, (namespace, name), &pass.status).await?
            == StatusWrite::Gone
        {
            return Ok(Action::await_change());
        }
    }
    Ok(Action::requeue(carried.requeue(RESYNC)))
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
    ctx.cluster.record(reference, &event, Series::Fold).await;
}
