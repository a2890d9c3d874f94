//! The ResourceScalingGroup controller: one kube-runtime controller for both
//! strategies, dispatching on `spec.scalingStrategy.type` as seed 000's
//! ScalingStrategyHandler does. GroupReplication is
//! [`super::group_replication::reconcile`]; InplaceScaling is here:
//!
//! 1. read the namespace's groups from the cache (the group as cached is the
//!    truth: a group that is gone, or being deleted, touches nothing);
//! 2. resolve the groups once (`plan::resource_scaling_group::inplace::resolve`), and read what
//!    its `endpoints` names through the adapters
//!    (`plan::resource_scaling_group::adapter`) from the caches: the replicas of kinds scaled through
//!    `/scale`, the object for roles; a kind outside the adapter table is
//!    looked up in API discovery;
//! 3. ask `plan::resource_scaling_group::inplace::reconcile_resolved`, and patch the Targets that differ: a
//!    merge patch of `/scale`, or one JSON Patch per object testing each
//!    role's name before replacing its replicas (field manager `tandem`);
//! 4. record an Event per Target changed (following its Source, or drift
//!    repaired) and per new stall, then write the status when it changed.
//!
//! No finalizer and no owner references: deleting a group leaves every
//! resource as it is (Retain).
//!
//! Triggers: the groups themselves; every cached object (Deployments,
//! StatefulSets, LeaderWorkerSets, InferenceServices, ScaleViews, and any
//! kind a group has read), mapped to the groups that name it through an
//! index kept from the groups' watch events, or to the group whose clone or
//! pod it is (its `resourcescalinggroup.com/name` label); and every group
//! again after [`RESYNC`], which is how a change of a kind found through
//! discovery (read through `/scale`, not cached) is seen.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, Patch};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::cluster::{Part, Series, resource, resource_of};
use super::{
    Context, Error, StatusWrite, group_replication, is_not_found, retry_conflicts, write_status,
};
use crate::api::ResourceScalingGroup;
use crate::api::resource_scaling_group::ScalingStrategyType;
use crate::plan::resource_scaling_group::adapter::{self, Via};
use crate::plan::resource_scaling_group::inplace::{
    self, Note, ObjectPatch, Observed, Problem, Reading, Request,
};
use crate::plan::resource_scaling_group::ratio::Endpoint;
use crate::watch::caches::Caches;

/// How often a group is reconciled when nothing it watches changed: the
/// longest a Source of a kind found through discovery (read through
/// `/scale`, not cached) waits before its Targets follow, and a hand edit of
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
/// role test, a conflict): retrying the same request will not help. A 429
/// (too many requests) is not a refusal but a request to come back later.
fn is_refusal(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if (400..500).contains(&status.code) && status.code != 429)
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
    let kind = endpoint.kind.as_str();
    let api_version = endpoint.api_version.as_str();
    let route = match adapter::known(api_version, kind) {
        Some(known) => match known.via {
            Via::Scale => Route::Scale(resource(api_version, kind, known.plural)),
            Via::Role => Route::Role(resource(api_version, kind, known.plural)),
        },
        None => match ctx.cluster.resolve(api_version, kind).await {
            Ok(Some(found)) if found.has_scale => {
                Route::Scale(resource(api_version, kind, &found.plural))
            }
            Ok(Some(_)) => {
                Route::Unsupported(format!("{kind} ({api_version}) has no scale subresource"))
            }
            Ok(None) => Route::Unsupported(format!(
                "{kind} is not served by this cluster in {api_version}"
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
/// name): two roles of one object are read once.
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
        Route::Scale(resource) => match ctx.cluster.scale(resource, namespace, name).await? {
            Some(scale) => Ok(match adapter::scale_replicas(&scale) {
                Ok(replicas) => Observed::Read(Reading::Scale { replicas }),
                Err(why) => Observed::Unsupported(format!("{kind} {name}/scale: {why}")),
            }),
            None => Ok(not_found()),
        },
        Route::Role(resource) => {
            let key = (endpoint.group().to_owned(), kind.clone(), name.clone());
            if !objects.contains_key(&key) {
                let object = ctx.cluster.workload(resource, namespace, name).await?;
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
    let cluster = &ctx.cluster;
    let listed = cluster.groups(namespace);
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
    // The namespace's groups resolved once, for both the reads and the plan.
    let resolved = inplace::resolve(name, &me.spec, &listed);
    let endpoints = resolved
        .as_ref()
        .map(inplace::Resolved::endpoints)
        .unwrap_or_default();
    for endpoint in endpoints {
        let route = route(&ctx, &endpoint).await?;
        let seen = observe(&ctx, namespace, &endpoint, &route, &mut objects).await?;
        observed.insert(endpoint.clone(), seen);
        routes.insert(endpoint, route);
    }

    // Plan.
    let now = Time((ctx.now)());
    let pass = inplace::reconcile_resolved(me, resolved, &observed, &now);
    let requests = inplace::patches(&pass.scales).map_err(|reason| Error::Plan {
        object: format!("ResourceScalingGroup {namespace}/{name}"),
        reason,
    })?;

    // Patch the Targets.
    let refusals = patch_targets(&ctx, me, namespace, &pass, &requests, &routes).await?;
    let (status, events) = if refusals.is_empty() {
        (pass.status.clone(), pass.events.clone())
    } else {
        inplace::refused(me, &pass, &refusals, &now)
    };

    // The Events first: they tell what was just done to the Targets, which
    // stands even if the status write below fails (the next reconcile finds
    // the Targets already where they should be and says nothing).
    let reference = me.object_ref(&());
    for note in &events {
        if let Some(decision) = crate::plan::shared::decision::of_inplace_note(note.reason) {
            ctx.metrics.decided("ResourceScalingGroup", decision);
        }
        record(&ctx, &reference, namespace, note).await;
    }
    if me.status.as_ref() != Some(&status) {
        let groups = resource_of::<ResourceScalingGroup>();
        if write_status(&ctx, &reference, &groups, (namespace, name), &status).await?
            == StatusWrite::Gone
        {
            return Ok(Action::await_change());
        }
    }
    Ok(Action::requeue(if refusals.is_empty() {
        RESYNC
    } else {
        REFUSED_RETRY
    }))
}

/// Sends each patch of `requests` to its Target; a refused patch (the Target
/// gone, or the API server saying no) becomes a problem of each scale it
/// carries, any other error ends the reconcile.
async fn patch_targets(
    ctx: &Context,
    me: &ResourceScalingGroup,
    namespace: &str,
    pass: &inplace::Pass,
    requests: &[ObjectPatch],
    routes: &BTreeMap<Endpoint, Route>,
) -> Result<Vec<(Endpoint, Problem)>, Error> {
    let cluster = &ctx.cluster;
    let mut refusals: Vec<(Endpoint, Problem)> = Vec::new();
    for request in requests {
        let route = request
            .scales
            .first()
            .and_then(|&i| pass.scales.get(i))
            .and_then(|scale| routes.get(&scale.endpoint));
        let Some(Route::Scale(resource) | Route::Role(resource)) = route else {
            continue;
        };
        let object = request.object.name.as_str();
        let (what, regarding) = (format!("scaling {object}"), me.object_ref(&()));
        let (part, patch) = match &request.request {
            Request::Scale(body) => (Part::Scale, Patch::Merge(body.clone())),
            Request::Roles(operations) => (Part::Object, Patch::Json(operations.clone())),
        };
        let sent = retry_conflicts(ctx, &regarding, &what, || {
            cluster.patch(resource, namespace, object, part, &patch)
        })
        .await;
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
    Ok(refusals)
}

/// Records a Note on the group, about the resource it concerns; a role is
/// named by its field path (`spec.roles{Decode}`). Each in a series of its
/// own: every Event here reports a new change, and a shared series would
/// fold a second change of the same Target (within the recorder's
/// six-minute cache) into the first one's, hiding the second note.
async fn record(ctx: &Context, reference: &ObjectReference, namespace: &str, note: &Note) {
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
    ctx.cluster.record(reference, &event, Series::Own).await;
}

/// Runs the controller on the process's caches until `stop` (see
/// [`super::run_controller`]).
pub async fn run(
    ctx: Arc<Context>,
    caches: Arc<Caches>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let store = caches.groups.clone();
    super::run_controller(ctx, caches, store, reconcile, stop).await;
}
