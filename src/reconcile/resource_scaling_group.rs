//! The ResourceScalingGroup controller: one kube-runtime controller for both
//! strategies, dispatching on `spec.scalingStrategy.type` as seed 000's
//! ScalingStrategyHandler does. GroupReplication is
//! [`super::group_replication::reconcile`]; InplaceScaling is here:
//!
//! 1. list the namespace's groups (the group as listed is the truth: a group
//!    that is gone, or being deleted, touches nothing);
//! 2. read what `plan::inplace::endpoints` names through the adapters
//!    (`plan::adapter`): GET `/scale` for kinds scaled through it, GET the
//!    object for roles; a kind outside the adapter table is looked up in API
//!    discovery;
//! 3. ask `plan::inplace::reconcile`, and patch the Targets that differ: a
//!    merge patch of `/scale`, or one JSON Patch per object testing each
//!    role's name before replacing its replicas (field manager `tandem`);
//! 4. write the status when it changed, and record an Event per Target
//!    changed (following its Source, or drift repaired) and per new stall.
//!
//! No finalizer and no owner references: deleting a group leaves every
//! resource as it is (Retain).
//!
//! Triggers: the groups themselves; Deployments, StatefulSets,
//! InferenceServices and ScaleViews, each mapped to the groups that name
//! it or own it as a GroupReplication clone; and every group again after [`RESYNC`], which is how a change of the
//! other kinds (LeaderWorkerSets, RoleBasedGroups, discovered kinds) is seen.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::{Context, Error, FIELD_MANAGER, group_replication, is_not_found, retry_conflicts};
use crate::api::resource_scaling_group::ScalingStrategyType;
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::adapter::{self, Via};
use crate::plan::inplace::{self, Note, Observed, Problem, Reading, Request};
use crate::plan::ratio::Endpoint;
use crate::plan::replication::NAME_LABEL;
use crate::server::controller_metrics::measured;

/// How often a group is reconciled when nothing it watches changed: the
/// longest a Source of an unwatched kind (LeaderWorkerSet, RoleBasedGroup,
/// a discovered kind) waits before its Targets follow, and a hand edit of
/// one of them before it is set back. HPA itself acts every 15 seconds.
pub const RESYNC: Duration = Duration::from_secs(30);

/// How soon a group whose patch was refused is tried again.
const REFUSED_RETRY: Duration = Duration::from_secs(60);

/// Reconciles one ResourceScalingGroup, by strategy.
#[tracing::instrument(name = "reconcile", skip_all, fields(kind = "ResourceScalingGroup", object = %super::object_key(rsg.as_ref())))]
pub async fn reconcile(rsg: Arc<ResourceScalingGroup>, ctx: Arc<Context>) -> Result<Action, Error> {
    match rsg.spec.scaling_strategy.type_ {
        ScalingStrategyType::InplaceScaling => inplace(rsg, ctx).await,
        ScalingStrategyType::GroupReplication => group_replication::reconcile(rsg, ctx).await,
    }
}

/// The API server refused the request itself (forbidden, invalid, a failed
/// role test, a conflict): retrying the same request will not help.
fn is_refusal(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if (400..500).contains(&status.code))
}

fn answer(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// How an endpoint is reached.
#[derive(Clone)]
enum Route {
    Scale(ApiResource),
    Role(ApiResource),
    Unsupported(String),
}

/// The route of an endpoint: the adapter table, else discovery.
async fn route(ctx: &Context, endpoint: &Endpoint) -> Result<Route, Error> {
    let (group, version) = adapter::group_version(&endpoint.api_version);
    let kind = endpoint.kind.as_str();
    let resource = |plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    };
    let route = match adapter::known(&endpoint.api_version, kind) {
        Some(known) => match known.via {
            Via::Scale => Route::Scale(resource(known.plural)),
            Via::Role => Route::Role(resource(known.plural)),
        },
        None => match ctx.discovery.resolve(&endpoint.api_version, kind).await {
            Ok(Some(found)) if found.has_scale => Route::Scale(resource(&found.plural)),
            Ok(Some(_)) => Route::Unsupported(format!(
                "{kind} ({}) has no scale subresource",
                endpoint.api_version
            )),
            Ok(None) => Route::Unsupported(format!(
                "{kind} is not served by this cluster in {}",
                endpoint.api_version
            )),
            Err(reason) => {
                return Err(Error::Plan {
                    object: format!("{kind} {}", endpoint.name),
                    reason,
                });
            }
        },
    };
    Ok(match (route, &endpoint.role) {
        (Route::Role(_), None) => Route::Unsupported(format!(
            "a {kind} is scaled per role; bind one of its roles"
        )),
        (Route::Scale(_), Some(_)) => {
            Route::Unsupported(format!("a {kind} has no roles; bind it as a whole"))
        }
        (route, _) => route,
    })
}

/// Objects read for their roles in this reconcile, by (API group, kind,
/// name): two roles of one object cost one GET. None: not found.
type Objects = HashMap<(String, String, String), Option<Value>>;

/// Reads one endpoint through its route.
async fn observe(
    ctx: &Context,
    namespace: &str,
    endpoint: &Endpoint,
    route: &Route,
    objects: &mut Objects,
) -> Result<Observed, Error> {
    let (kind, name) = (&endpoint.kind, &endpoint.name);
    let not_found = || Observed::Missing(format!("{kind} {name} not found"));
    match route {
        Route::Unsupported(why) => Ok(Observed::Unsupported(why.clone())),
        Route::Scale(resource) => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), namespace, resource);
            match api.get_scale(name).await {
                Ok(scale) => {
                    let scale = serde_json::to_value(scale).unwrap_or_default();
                    Ok(match adapter::scale_replicas(&scale) {
                        Ok(replicas) => Observed::Read(Reading::Scale { replicas }),
                        Err(why) => Observed::Unsupported(format!("{kind} {name}/scale: {why}")),
                    })
                }
                Err(e) if is_not_found(&e) => Ok(not_found()),
                Err(e) => Err(e.into()),
            }
        }
        Route::Role(resource) => {
            let key = (endpoint.group().to_owned(), kind.clone(), name.clone());
            if !objects.contains_key(&key) {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(ctx.client.clone(), namespace, resource);
                let object = api
                    .get_opt(name)
                    .await?
                    .and_then(|o| serde_json::to_value(o).ok());
                objects.insert(key.clone(), object);
            }
            let Some(Some(object)) = objects.get(&key) else {
                return Ok(not_found());
            };
            let role = endpoint.role.as_deref().unwrap_or_default();
            Ok(match adapter::role_replicas(object, role) {
                Ok(reading) => Observed::Read(Reading::Role(reading)),
                Err(what) => Observed::Missing(format!("{kind} {name} {what}")),
            })
        }
    }
}

/// Reconciles one InplaceScaling group.
async fn inplace(rsg: Arc<ResourceScalingGroup>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(namespace), Some(name)) = (
        rsg.metadata.namespace.as_deref(),
        rsg.metadata.name.as_deref(),
    ) else {
        return Err(Error::Unnamed(format!(
            "ResourceScalingGroup {}",
            rsg.name_any()
        )));
    };
    let groups_api: Api<ResourceScalingGroup> = Api::namespaced(ctx.client.clone(), namespace);
    let listed = groups_api.list(&ListParams::default()).await?.items;
    // Retain: a group that is gone or going scales nothing any more.
    let Some(me) = listed
        .iter()
        .find(|g| g.metadata.name.as_deref() == Some(name) && g.metadata.uid == rsg.metadata.uid)
    else {
        return Ok(Action::await_change());
    };
    if me.metadata.deletion_timestamp.is_some()
        || me.spec.scaling_strategy.type_ != ScalingStrategyType::InplaceScaling
    {
        return Ok(Action::await_change());
    }

    // Observe.
    let mut routes: BTreeMap<Endpoint, Route> = BTreeMap::new();
    let mut observed = BTreeMap::new();
    let mut objects = Objects::new();
    for endpoint in inplace::endpoints(name, &me.spec, &listed) {
        let route = route(&ctx, &endpoint).await?;
        let seen = observe(&ctx, namespace, &endpoint, &route, &mut objects).await?;
        observed.insert(endpoint.clone(), seen);
        routes.insert(endpoint, route);
    }

    // Plan.
    let now = Time((ctx.now)());
    let pass = inplace::reconcile(me, &listed, &observed, &now);
    let requests = inplace::patches(&pass.scales).map_err(|reason| Error::Plan {
        object: format!("ResourceScalingGroup {namespace}/{name}"),
        reason,
    })?;

    // Patch the Targets.
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let mut refusals: Vec<(Endpoint, Problem)> = Vec::new();
    for request in &requests {
        let route = request
            .scales
            .first()
            .and_then(|&i| pass.scales.get(i))
            .and_then(|scale| routes.get(&scale.endpoint));
        let Some(Route::Scale(resource) | Route::Role(resource)) = route else {
            continue;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, resource);
        let object = request.object.name.as_str();
        let (what, regarding) = (format!("scaling {object}"), me.object_ref(&()));
        let sent = match &request.request {
            Request::Scale(body) => {
                let patch = Patch::Merge(body);
                retry_conflicts(&ctx, &regarding, &what, || {
                    api.patch_scale(object, &params, &patch)
                })
                .await
                .map(drop)
            }
            Request::Roles(operations) => {
                let patch = Patch::Json::<()>(operations.clone());
                retry_conflicts(&ctx, &regarding, &what, || {
                    api.patch(object, &params, &patch)
                })
                .await
                .map(drop)
            }
        };
        match sent {
            Ok(()) => {}
            Err(e) if is_refusal(&e) => {
                for scale in request.scales.iter().filter_map(|&i| pass.scales.get(i)) {
                    let problem = if is_not_found(&e) {
                        Problem::gone(&scale.name, &answer(&e))
                    } else {
                        Problem::patch_refused(&scale.name, &answer(&e))
                    };
                    refusals.push((scale.endpoint.clone(), problem));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let (status, events) = if refusals.is_empty() {
        (pass.status.clone(), pass.events.clone())
    } else {
        inplace::refused(me, &pass, &refusals, &now)
    };

    // Status, then the Events.
    if me.status.as_ref() != Some(&status) {
        let (params, patch) = (
            PatchParams::default(),
            Patch::Merge(json!({"status": status})),
        );
        retry_conflicts(&ctx, &me.object_ref(&()), "writing the status", || {
            groups_api.patch_status(name, &params, &patch)
        })
        .await?;
    }
    // A recorder of this reconcile's own: every Event here reports a new
    // change, and the shared recorder would fold a second change of the
    // same Target (within its six-minute cache) into the first one's
    // series, hiding the second note.
    let recorder = Recorder::new(ctx.client.clone(), ctx.reporter.clone());
    let reference = me.object_ref(&());
    for note in &events {
        if let Some(decision) = crate::plan::decision::of_inplace_note(note.reason) {
            ctx.metrics.decided("ResourceScalingGroup", decision);
        }
        record(&recorder, &reference, namespace, note).await;
    }
    Ok(Action::requeue(if refusals.is_empty() {
        RESYNC
    } else {
        REFUSED_RETRY
    }))
}

/// Records a Note on the group, about the resource it concerns; a role is
/// named by its field path (`spec.roles{Decode}`).
async fn record(recorder: &Recorder, reference: &ObjectReference, namespace: &str, note: &Note) {
    let secondary = note.about.as_ref().map(|about| ObjectReference {
        api_version: Some(about.api_version.clone()),
        kind: Some(about.kind.clone()),
        name: Some(about.name.clone()),
        namespace: Some(namespace.to_owned()),
        field_path: about
            .role
            .as_ref()
            .map(|role| format!("spec.roles{{{role}}}")),
        ..ObjectReference::default()
    });
    let event = Event {
        type_: if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: note.reason.to_owned(),
        note: Some(note.note.clone()),
        action: "Scale".to_owned(),
        secondary,
    };
    if let Err(e) = recorder.publish(&event, reference).await {
        tracing::warn!(error = %e, reason = note.reason, "could not record an event");
    }
}

fn error_policy(rsg: Arc<ResourceScalingGroup>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(kind = "ResourceScalingGroup", object = %super::object_key(rsg.as_ref()), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

/// The groups of `object`'s namespace that name it (API group, kind, name),
/// or whose clone it is (labelled `resourcescalinggroup.com/name`).
fn naming(
    groups: &Store<ResourceScalingGroup>,
    group: &str,
    kind: &str,
    object: &impl Resource,
) -> Vec<ObjectRef<ResourceScalingGroup>> {
    let (namespace, name) = (
        object.meta().namespace.as_deref(),
        object.meta().name.as_deref(),
    );
    groups
        .state()
        .into_iter()
        .filter(|rsg| rsg.metadata.namespace.as_deref() == namespace)
        .filter(|rsg| {
            object
                .meta()
                .labels
                .as_ref()
                .and_then(|l| l.get(NAME_LABEL))
                == rsg.metadata.name.as_ref()
                || rsg.spec.target_resources.iter().any(|t| {
                    t.object().is_some_and(|o| {
                        adapter::group_version(o.api_version).0 == group
                            && o.kind == kind
                            && Some(o.name) == name
                    })
                })
        })
        .map(|rsg| ObjectRef::from_obj(rsg.as_ref()))
        .collect()
}

/// Runs the controller until the stream ends (shutdown).
///
/// When `stop` completes the controller starts no new reconcile, lets those
/// in flight finish and returns (leadership hand-over, `leader::lead`).
pub async fn run(ctx: Arc<Context>, stop: impl Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    let controller = Controller::new(
        Api::<ResourceScalingGroup>::all(client.clone()),
        watcher::Config::default(),
    )
    .with_config(super::controller_config());
    let known = controller.store();
    let mut controller = controller;
    for (group, kind, plural) in [
        ("apps", "Deployment", "deployments"),
        ("apps", "StatefulSet", "statefulsets"),
    ] {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural);
        let groups = known.clone();
        controller = controller.watches_with(
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            resource,
            watcher::Config::default(),
            move |object| naming(&groups, group, kind, &object),
        );
    }
    let (for_services, for_views) = (known.clone(), known);
    controller
        .watches(
            Api::<InferenceService>::all(client.clone()),
            watcher::Config::default(),
            move |service| {
                naming(
                    &for_services,
                    "fusioninfer.io",
                    "InferenceService",
                    &service,
                )
            },
        )
        .watches(
            Api::<ScaleView>::all(client),
            watcher::Config::default(),
            move |view| naming(&for_views, "fusioninfer.io", "ScaleView", &view),
        )
        .graceful_shutdown_on(stop)
        .run(
            measured("ResourceScalingGroup", reconcile),
            error_policy,
            ctx,
        )
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(group = %object, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
        })
        .await;
}
