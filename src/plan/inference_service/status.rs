//! The status of an InferenceService, from what is observed: its
//! LeaderWorkerSets, their pods, and the router's endpoint-picker Deployment.
//!
//! A replica is ready only when every one of its nodes (pods) is ready. Times
//! move only when something changed, so the status of an unchanged world is
//! the same value and the reconciler writes nothing.
//!
//! Why a role waits or is short, per role (its component):
//!
//! - **failing** replicas: not ready, a container crash looping or an image
//!   that does not come ([`crash_loop`]);
//! - **unschedulable** replicas: a pod of theirs bound to no node, whose
//!   Kubernetes PodGroup's `PodGroupScheduled` condition is False, or whose
//!   own `PodScheduled` condition is False with reason `Unschedulable`; the
//!   reason carries the scheduler's own message ([`unschedulable_replicas`]);
//! - **lost** replicas: see [`lost_replicas`].
//!
//! A role with failing or lost replicas is degraded: one `Degraded`
//! condition for the service, True while any role is, its reason the most
//! pressing cause (`ReplicaFailing` before `ReplicasUnavailable`) and its
//! message every degraded role with its own cause. One condition type with
//! several reasons, not a second type: a `kubectl wait` or an alert on
//! `Degraded` keeps catching every way a service is short, and the causes
//! can be told apart by reason and message. The `Ready` condition says per
//! role what it waits for, and its reason names the cause at a glance (the
//! `Status` printer column): `Unschedulable`, `ReplicaFailing`,
//! `ReplicasUnavailable`, else `ComponentsNotReady`. A service whose every
//! serving role is at zero replicas by its spec is Ready with reason
//! `ScaledToZero`, as Knative keeps a revision scaled to zero Ready.
//!
//! Kubernetes' gang scheduler says why a gang waits on its PodGroup: the
//! `PodGroupScheduled` condition, False with reason `Unschedulable` (no
//! domain or not enough room for the whole gang) or `SchedulerError`, and
//! the gang's message. It writes it per scheduling attempt of the group and
//! never sets it back to False once True. A group held before any attempt
//! (fewer pods than its `minCount`) has no condition: then the pods' own
//! `PodScheduled` is what there is, as on every other scheduler.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use crate::api::inference_service::{
    ComponentPhase, ComponentStatus, InferenceService, InferenceServiceStatus, RevisionStatus, Role,
};
pub use crate::plan::shared::condition::condition;
use crate::plan::shared::pod::Pod;

/// Container states that will not get better by waiting.
const FAILING_REASONS: [&str; 6] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Container waiting reasons that make a replica failing (a crash loop or an
/// image that does not come).
const CRASH_LOOP_REASONS: [&str; 3] = ["CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull"];

/// Restarts of one container after which a replica that is not ready is
/// failing, though the container is between restarts right now.
pub const RESTARTS_FAILING: i64 = 3;

/// The condition that names a failing replica or a role that lost ready
/// replicas.
pub const DEGRADED: &str = "Degraded";

/// Degraded's (and Ready's) reason while a replica crash loops.
pub const REPLICA_FAILING: &str = "ReplicaFailing";
/// Degraded's (and Ready's) reason while a replica is past its recovery
/// limit (`spec.roles[].recovery.maxRestarts`), held with no pods.
pub const REPLICA_FAILED: &str = "ReplicaFailed";
/// Degraded's (and Ready's) reason while a role is short of the ready
/// replicas it had ([`lost_replicas`]).
pub const REPLICAS_UNAVAILABLE: &str = "ReplicasUnavailable";
/// Ready's reason (True) while every serving role is at zero replicas by
/// its spec and none is left ([`super::pair`]): scaled to zero, not failed.
pub const SCALED_TO_ZERO: &str = "ScaledToZero";
/// Ready's reason while a replica waits for the scheduler.
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// Why a role is degraded, if it is: its first failing replica, else the
/// replicas it lost. The same words go into the Degraded condition and the
/// role's Degraded Event.
pub fn degraded_because(status: &ComponentStatus) -> Option<String> {
    if let Some(reason) = &status.failing_reason {
        return Some(reason.clone());
    }
    (status.lost_replicas > 0).then(|| {
        format!(
            "{}/{} replicas ready, {} lost since every replica was ready ({} of {} pods ready)",
            status.ready_replicas,
            status.desired_replicas,
            status.lost_replicas,
            status.ready_pods,
            status.total_pods
        )
    })
}

/// Whether a role is degraded: a replica failing or ready replicas lost.
pub fn is_degraded(status: &ComponentStatus) -> bool {
    status.failing_replicas > 0 || status.lost_replicas > 0
}

/// The replicas a serving role is short because it lost ready replicas
/// without a planned change: 0, or `desired - ready` while
///
/// - the role is short (`ready < desired`), and
/// - either it already was lost at the previous status (`previous`'s
///   `lostReplicas` > 0: an episode lasts until every desired replica is
///   ready again, whatever else happens meanwhile, or the desired count
///   comes down to the ready one), or it begins now: the previous status
///   had the role `Running` (every desired replica ready, none at an
///   outdated revision), it now has fewer ready replicas than it had then
///   (capped at what it wants now) and no planned change is moving it
///   (`planned`).
///
/// So what is not lost: a scale-up (the new replicas were never ready: the
/// ready count does not drop below what it was), a scale-down (what goes is
/// above the new desired count), a RollingUpdate (its role is outdated, or
/// paced, from the pass it starts until its last replica is ready at the
/// new revision, so it is never `Running` with a replica being replaced),
/// a drain (`planned`), an upgrade with revisions side by side (`planned`).
/// What is lost: pods deleted with a node or evicted (fewer pods than
/// nodeCount for a replica), pods no longer ready (a node NotReady, a
/// container that stops passing its readiness probe, a crash loop) while
/// nothing planned moves the role. A ready replica lost during a planned
/// change is not reported here (the RollingUpdate's progress deadline and
/// the crash-loop check still are).
pub fn lost_replicas(
    previous: Option<&ComponentStatus>,
    ready: i32,
    desired: i32,
    planned: bool,
) -> i32 {
    if ready >= desired {
        return 0;
    }
    let short = desired.saturating_sub(ready.max(0));
    match previous {
        Some(p) if p.lost_replicas > 0 => short,
        Some(p)
            if !planned
                && p.phase == ComponentPhase::Running
                && p.desired_replicas > 0
                && ready < p.ready_replicas.min(desired) =>
        {
            short
        }
        _ => 0,
    }
}

/// What the status is computed from.
#[derive(Clone, Debug, Default)]
pub struct Observed<'a> {
    /// Pods of the service (label `fusioninfer.io/service`).
    pub pods: &'a [Pod],
    /// The router's endpoint-picker Deployment, when the service has a router.
    pub router: Option<&'a Value>,
    /// The revisions the pods should run (`fusioninfer.io/revision`): the
    /// spec's, and during an upgrade the other revision that runs beside it.
    /// Pods of any other revision are outdated. Empty when any revision may
    /// run (strategy None leaves running replicas on their revision).
    pub revisions: &'a [&'a str],
    /// What keeps the service from being applied (an API that is not
    /// installed, a spec the webhook would deny): reported as Failed.
    pub problems: &'a [String],
    /// The revision each serving role's new and replaced replicas get, by
    /// role name (`updateRevision`); a role without one reports no
    /// revisions.
    pub update_revisions: BTreeMap<String, String>,
    /// The replicas of each serving role the plan keeps out of traffic until
    /// their drain ends (plan::inference_service::drain), by role name: their own pods may not
    /// say so yet (the plan is marking them).
    pub draining: BTreeMap<String, BTreeSet<u32>>,
    /// The pods (by name) the plan takes out of traffic this pass: its
    /// writes mark them. They count as draining already, so that the status
    /// does not say their replica is ready now and, once the mark is seen a
    /// second later, not (a rollout's status patches carried that echo for
    /// every replica it replaced).
    pub marked: BTreeSet<&'a str>,
    /// The serving roles a planned change is moving this pass besides drains
    /// (a RollingUpdate in progress, revisions side by side during an
    /// upgrade): ready replicas they lose are not lost ([`lost_replicas`]).
    pub changing: BTreeSet<String>,
    /// The replicas a recovery setting holds with no pods, by role and
    /// index: whether failed, and why (`super::recovery`). They are failing
    /// replicas for as long as they are held; a failed one fails its role.
    pub held: BTreeMap<String, BTreeMap<u32, (bool, String)>>,
    /// The role that runs one replica though its side of the prefill/decode
    /// pair asks none, and why (`super::pair`): its `keptForPair`.
    pub kept_for_pair: Option<(&'a str, &'a str)>,
    /// The service's Kubernetes PodGroups (`scheduling.k8s.io`), which say
    /// why a gang waits ([`unschedulable_replicas`]).
    pub pod_groups: Vec<&'a Value>,
}

/// One role's state and, when failing, why.
struct Component {
    status: ComponentStatus,
    failure: Option<String>,
    outdated: bool,
}

/// The service's status: each role's component ([`role_components`]), the
/// four conditions it owns ([`conditions`]), the ready and updated counts;
/// scaleViews and the upgrade are carried over for their owners.
pub fn status(
    service: &InferenceService,
    observed: &Observed<'_>,
    now: &Time,
) -> InferenceServiceStatus {
    let previous = service.status.clone().unwrap_or_default();
    let mut roles = role_components(service, observed, &previous, now);
    roles.failures.extend(observed.problems.iter().cloned());
    let generation = service.metadata.generation;
    let mut kept: Vec<Condition> = previous
        .conditions
        .iter()
        .filter(|c| !["Ready", "Progressing", "Failed", DEGRADED].contains(&c.type_.as_str()))
        .cloned()
        .collect();
    kept.extend(conditions(service, &roles, &previous.conditions, now));
    kept.sort_by(|a, b| a.type_.cmp(&b.type_));

    let (ready, desired, updated) = (roles.ready, roles.desired, roles.updated);
    InferenceServiceStatus {
        observed_generation: generation,
        conditions: kept,
        components: roles.components,
        ready: Some(format!("{ready}/{desired}")),
        updated: Some(format!("{updated}/{desired}")),
        // Owned by the ScaleView controller: carried over as is. The upgrade
        // is decided by plan::inference_service::rollout, which sets it after this.
        scale_views: previous.scale_views,
        upgrade: previous.upgrade,
    }
}

/// Every role's component status, and what the conditions are made of.
#[derive(Default)]
struct RoleComponents {
    components: BTreeMap<String, ComponentStatus>,
    /// Why roles (or, added later, the plan) fail.
    failures: Vec<String>,
    /// The roles not Running, with their ready replicas.
    waiting: Vec<String>,
    /// A role's replicas are moving to the current revision.
    outdated: bool,
    /// Ready, desired and updated replicas of the serving roles.
    ready: i32,
    desired: i32,
    updated: i32,
}

fn role_components(
    service: &InferenceService,
    observed: &Observed<'_>,
    previous: &InferenceServiceStatus,
    now: &Time,
) -> RoleComponents {
    let mut roles = RoleComponents::default();
    let observed_pods = RolePods::by_role(observed.pods);
    for role in &service.spec.roles {
        let before = previous.components.get(&role.name);
        let component = if role.is_router() {
            router_component(role, observed.router)
        } else {
            serving_component(role, observed, &observed_pods, before)
        };
        let mut status = component.status;
        status.kept_for_pair = observed
            .kept_for_pair
            .filter(|(kept, _)| *kept == role.name)
            .map(|(_, why)| why.to_owned());
        if let Some(reason) = component.failure {
            roles.failures.push(format!("{}: {reason}", role.name));
        }
        roles.outdated |= component.outdated;
        if status.phase != ComponentPhase::Running {
            let mut waits = format!(
                "{}: {}/{} replicas ready ({:?})",
                role.name, status.ready_replicas, status.desired_replicas, status.phase
            );
            if let Some(reason) = &status.unschedulable_reason {
                waits.push_str(&format!(
                    ", {} waiting for the scheduler: {reason}",
                    status.unschedulable_replicas
                ));
            }
            roles.waiting.push(waits);
        }
        if !role.is_router() {
            roles.ready = saturating_sum(roles.ready, status.ready_replicas);
            roles.desired = saturating_sum(roles.desired, status.desired_replicas);
            roles.updated = saturating_sum(
                roles.updated,
                status.updated_replicas.min(status.desired_replicas),
            );
        }
        status.last_update_time = last_update_time(before, &status, now);
        roles.components.insert(role.name.clone(), status);
    }
    roles
}

/// A component's lastUpdateTime: kept while nothing else in it changes,
/// else now.
fn last_update_time(
    before: Option<&ComponentStatus>,
    status: &ComponentStatus,
    now: &Time,
) -> Option<Time> {
    match before {
        Some(b)
            if ComponentStatus {
                last_update_time: None,
                ..b.clone()
            } == *status =>
        {
            b.last_update_time.clone()
        }
        _ => Some(now.clone()),
    }
}

/// Whether every serving role asks 0 replicas ([`super::pair::at_zero`])
/// and no serving pod is left in traffic: not while the last replicas drain.
fn scaled_to_zero(service: &InferenceService, roles: &RoleComponents) -> bool {
    super::pair::at_zero(&service.spec)
        && service
            .spec
            .roles
            .iter()
            .filter(|r| !r.is_router())
            .filter_map(|r| roles.components.get(&r.name))
            .all(|c| c.draining_replicas == 0 && c.ready_pods == 0)
}

/// Ready's message: what the service waits for, or why it is ready.
fn ready_message(service: &InferenceService, scaled_to_zero: bool, waiting: &[String]) -> String {
    if scaled_to_zero {
        let router = service
            .spec
            .roles
            .iter()
            .enumerate()
            .find(|(_, r)| r.is_router());
        let held = match router {
            Some((
                _,
                Role {
                    queue: Some(queue), ..
                },
            )) => format!(
                "the router stays (its endpoint picker and InferencePool) and requests wait in \
                 the picker's queue, each up to {} s",
                queue.timeout_seconds()
            ),
            Some((
                index,
                Role {
                    endpoint_picker_config: Some(_),
                    ..
                },
            )) => format!(
                "the router stays (its endpoint picker and InferencePool); whether its picker \
                 holds requests meanwhile is up to spec.roles[{index}].endpointPickerConfig \
                 (featureGates: [flowControl])"
            ),
            Some((index, _)) => format!(
                "the router stays (its endpoint picker and InferencePool), but without a queue \
                 (spec.roles[{index}].queue) its picker answers 503 meanwhile"
            ),
            None => "the service has no router, so nothing holds its requests meanwhile".to_owned(),
        };
        format!(
            "every serving role is scaled to zero replicas until their replicas are raised; {held}"
        )
    } else if waiting.is_empty() {
        "every replica of every role is ready".to_owned()
    } else {
        waiting.join("; ")
    }
}

/// Ready, Progressing, Degraded and Failed, from the roles' components.
fn conditions(
    service: &InferenceService,
    roles: &RoleComponents,
    previous: &[Condition],
    now: &Time,
) -> Vec<Condition> {
    let components: Vec<&ComponentStatus> = service
        .spec
        .roles
        .iter()
        .filter_map(|role| roles.components.get(&role.name))
        .collect();
    let degraded: Vec<String> = service
        .spec
        .roles
        .iter()
        .filter_map(|role| {
            let status = roles.components.get(&role.name)?;
            Some(format!("role {}: {}", role.name, degraded_because(status)?))
        })
        .collect();
    let failed = components.iter().any(|c| c.failed_replicas > 0);
    let failing = components.iter().any(|c| c.failing_replicas > 0);
    let lost = components.iter().any(|c| c.lost_replicas > 0);
    let unschedulable = components
        .iter()
        .any(|c| c.phase != ComponentPhase::Running && c.unschedulable_replicas > 0);
    let generation = service.metadata.generation;
    let (waiting, outdated, failures) = (&roles.waiting, roles.outdated, &roles.failures);
    let all_running = waiting.is_empty();
    let scaled_to_zero = all_running && scaled_to_zero(service, roles);
    vec![
        condition(
            previous,
            "Ready",
            all_running,
            match (all_running, unschedulable, failing, lost) {
                (true, ..) if scaled_to_zero => SCALED_TO_ZERO,
                (true, ..) => "AllComponentsRunning",
                (false, ..) if failed => REPLICA_FAILED,
                (false, true, ..) => UNSCHEDULABLE,
                (false, false, true, _) => REPLICA_FAILING,
                (false, false, false, true) => REPLICAS_UNAVAILABLE,
                (false, false, false, false) => "ComponentsNotReady",
            },
            ready_message(service, scaled_to_zero, waiting),
            generation,
            now,
        ),
        condition(
            previous,
            "Progressing",
            !all_running || outdated,
            match (all_running, outdated) {
                (_, true) => "Updating",
                (false, false) => "Deploying",
                (true, false) => "Stable",
            },
            match (all_running, outdated) {
                (_, true) => "replicas are moving to the current revision".to_owned(),
                (false, false) => waiting.join("; "),
                (true, false) => "nothing is changing".to_owned(),
            },
            generation,
            now,
        ),
        condition(
            previous,
            DEGRADED,
            !degraded.is_empty(),
            match (failing, lost) {
                _ if failed => REPLICA_FAILED,
                (true, _) => REPLICA_FAILING,
                (false, true) => REPLICAS_UNAVAILABLE,
                (false, false) => "ReplicasHealthy",
            },
            if degraded.is_empty() {
                "no replica is crash looping and no role lost ready replicas".to_owned()
            } else {
                degraded.join("; ")
            },
            generation,
            now,
        ),
        condition(
            previous,
            "Failed",
            !failures.is_empty(),
            if failures.is_empty() {
                "NoFailure"
            } else {
                "ComponentFailed"
            },
            if failures.is_empty() {
                "no pod is failing".to_owned()
            } else {
                failures.join("; ")
            },
            generation,
            now,
        ),
    ]
}

/// The part of the status the InferenceService reconciler writes (scaleViews
/// belong to the ScaleView controller). `upgrade` is written whole, with every
/// field present (null when unset), so that a merge patch of it removes what
/// the status no longer has.
pub fn reported(status: &InferenceServiceStatus) -> Value {
    let revision = |r: Option<&RevisionStatus>| {
        r.map_or(Value::Null, |r| {
            serde_json::json!({
                "revision": r.revision,
                "targetCapacity": r.target_capacity,
                "trafficRoutedPercent": r.traffic_routed_percent,
                "lastTrafficMoveTime": r.last_traffic_move_time,
            })
        })
    };
    let upgrade = status.upgrade.as_ref().map_or(Value::Null, |u| {
        serde_json::json!({
            "active": revision(u.active.as_ref()),
            "pending": revision(u.pending.as_ref()),
        })
    });
    serde_json::json!({
        "observedGeneration": status.observed_generation,
        "conditions": status.conditions,
        "components": status.components,
        "ready": status.ready,
        "updated": status.updated,
        "upgrade": upgrade,
    })
}

/// Why a pod is failing, if it is.
fn pod_failure(pod: &Pod) -> Option<String> {
    let name = pod.name_or("pod");
    if pod.phase.as_deref() == Some("Failed") {
        let reason = pod.reason.as_deref().unwrap_or("Failed");
        return Some(format!("pod {name} {reason}"));
    }
    pod.containers.iter().find_map(|container| {
        let waiting = container.waiting.as_deref().unwrap_or_default();
        FAILING_REASONS.contains(&waiting).then(|| {
            let container_name = container.name.as_deref().unwrap_or("container");
            format!("pod {name} container {container_name} {waiting}")
        })
    })
}

/// Why one pod of a replica that is not ready keeps failing: its first
/// container (init containers first) that waits in one of
/// [`CRASH_LOOP_REASONS`] or has restarted [`RESTARTS_FAILING`] times.
fn crash_loop(pod: &Pod) -> Option<String> {
    let name = pod.name_or("pod");
    pod.containers.iter().find_map(|container| {
        let container_name = container.name.as_deref().unwrap_or("container");
        let waiting = container.waiting.as_deref().unwrap_or_default();
        if CRASH_LOOP_REASONS.contains(&waiting) {
            return Some(format!("pod {name} container {container_name} {waiting}"));
        }
        (container.restarts >= RESTARTS_FAILING)
            .then(|| format!("pod {name} container {container_name} restarting repeatedly"))
    })
}

/// Why a pod being deleted shows its replica crashed: a container of it
/// restarted. Every LeaderWorkerSet is written with
/// `RecreateGroupOnPodRestart`, and LeaderWorkerSet's pod controller deletes
/// a group's leader (and with it the group) at the first restart of any of
/// its containers (`ContainerRestarted`: a restart count above 0), so a
/// crash loop never reaches the restart counts and back-off waits of
/// [`crash_loop`] on a live pod: its trace is a pod being deleted with one
/// restart, its last exit beside it, for the pod's grace period.
fn recreated_after_crash(pod: &Pod) -> Option<String> {
    let name = pod.name_or("pod");
    let container = pod.containers.iter().find(|c| c.restarts >= 1)?;
    let container_name = container.name.as_deref().unwrap_or("container");
    let how = match (container.exit_reason.as_deref(), container.exit_code) {
        (Some(reason), Some(code)) => format!("exited with code {code} ({reason})"),
        (None, Some(code)) => format!("exited with code {code}"),
        (Some(reason), None) => format!("terminated ({reason})"),
        (None, None) => "restarted".to_owned(),
    };
    Some(format!(
        "pod {name} container {container_name} {how}; its group is being recreated"
    ))
}

/// The replicas of one role that are not fully ready and whose pods keep
/// failing, by replica index, each with its first reason. `pods` are the
/// role's pods, those being deleted included. A replica (its pods of one
/// revision and index) fails when the pods of it not being deleted are not
/// all `nodes` of them ready, and either one of those shows a crash loop
/// ([`crash_loop`]) or one being deleted shows a crash that made
/// LeaderWorkerSet recreate the group ([`recreated_after_crash`]). A replica
/// whose every one of `nodes` live pods is ready is not failing, whatever
/// its restart counts and whatever its old pods show while they terminate.
fn failing_replicas(role: &RolePods<'_>, nodes: i32) -> Vec<(u32, String)> {
    role.replicas
        .iter()
        .filter(|(_, replica)| !whole_and_ready(replica.live.iter().copied(), nodes))
        .filter_map(|((_, index), replica)| {
            let reason = replica
                .live
                .iter()
                .find_map(|p| crash_loop(p))
                .or_else(|| {
                    replica
                        .deleting
                        .iter()
                        .find_map(|p| recreated_after_crash(p))
                })?;
            Some((*index, format!("replica {index}: {reason}")))
        })
        .collect()
}

/// A role's failing replicas ([`failing_replicas`]) and the first one's
/// reason, carried over an episode. A replica whose group LeaderWorkerSet
/// recreated shows its crash only while the old pods terminate; the new
/// pods load and crash again a model-load later. So an episode that began
/// (`previous` had failing replicas) lasts, with the count it had (capped at
/// the replicas the role is short) and its last reason, until every desired
/// replica is ready (`ready >= desired`): a crash loop is not cleared
/// between two crashes, and the Degraded condition and its Event are one
/// per episode.
fn failing_episode(
    failing: &[String],
    previous: Option<&ComponentStatus>,
    ready: i32,
    desired: i32,
) -> (i32, Option<String>) {
    if !failing.is_empty() {
        return (count(failing.len()), failing.first().cloned());
    }
    match previous {
        Some(p) if p.failing_replicas > 0 && ready < desired => (
            p.failing_replicas.min(desired.saturating_sub(ready.max(0))),
            p.failing_reason.clone(),
        ),
        _ => (0, None),
    }
}

/// Whether a pod waits for the scheduler: bound to no node, with
/// `PodScheduled` False for reason `Unschedulable`; with the scheduler's
/// message (may be empty).
fn unschedulable(pod: &Pod) -> Option<&str> {
    if pod.node.is_some() {
        return None;
    }
    pod.unschedulable.as_deref()
}

/// Why the Kubernetes PodGroup named `name` (among `pod_groups`) waits:
/// its `PodGroupScheduled` condition when False, as "reason: message".
fn group_unschedulable(group: &Value) -> Option<String> {
    let condition = group["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodGroupScheduled" && c["status"] == "False")?;
    let reason = condition["reason"].as_str().unwrap_or(UNSCHEDULABLE);
    Some(
        match condition["message"].as_str().filter(|m| !m.is_empty()) {
            Some(message) => format!("{reason}: {message}"),
            None => reason.to_owned(),
        },
    )
}

/// The replicas among `pods` (of one role, not being deleted) that wait for
/// the scheduler, by revision and replica index, each with why: the words of
/// the PodGroup (among `groups`) an unbound pod of it names, when the gang
/// scheduler says there why the gang waits (which domains it tried), then
/// its first pod (by name) that waits ([`unschedulable`]) with the
/// scheduler's message (why the nodes of the first domain did not do):
/// "replica 0: PodGroup x-worker-0-1a2b Unschedulable: 0/2 placements are
/// available, …; pod x-worker-0 unschedulable: 0/4 nodes are available: …".
pub fn unschedulable_replicas(pods: &[&Pod], groups: &[&Value]) -> Vec<String> {
    waiting_replicas(&RolePods::of(pods.iter().copied()), groups)
}

/// [`unschedulable_replicas`] of a role's indexed pods (its live ones).
fn waiting_replicas(role: &RolePods<'_>, groups: &[&Value]) -> Vec<String> {
    // The live groups by name, the first of a name kept: looked up once per
    // waiting replica.
    let mut live_groups: HashMap<&str, &Value> = HashMap::new();
    for group in groups {
        if group["metadata"]["deletionTimestamp"].is_null()
            && let Some(name) = group["metadata"]["name"].as_str()
        {
            live_groups.entry(name).or_insert(group);
        }
    }
    // By index first, then revision: replica 0 of both revisions before
    // replica 1.
    let mut replicas: Vec<(u32, &[&Pod])> = role
        .replicas
        .iter()
        .filter(|(_, replica)| !replica.live.is_empty())
        .map(|((_, index), replica)| (*index, replica.live.as_slice()))
        .collect();
    replicas.sort_by_key(|(index, _)| *index);
    replicas
        .into_iter()
        .filter_map(|(index, group)| {
            let gang = group.iter().find_map(|p| {
                let name = p.pod_group.as_deref().filter(|_| p.node.is_none())?;
                Some(format!(
                    "PodGroup {name} {}",
                    group_unschedulable(live_groups.get(name)?)?
                ))
            });
            let pod = group.iter().find_map(|p| {
                let message = unschedulable(p)?;
                let name = p.name_or("pod");
                Some(if message.is_empty() {
                    format!("pod {name} unschedulable")
                } else {
                    format!("pod {name} unschedulable: {message}")
                })
            });
            match (gang, pod) {
                (Some(gang), Some(pod)) => Some(format!("replica {index}: {gang}; {pod}")),
                (Some(why), None) | (None, Some(why)) => Some(format!("replica {index}: {why}")),
                (None, None) => None,
            }
        })
        .collect()
}

/// One role's pods, indexed once per status and read by every count of its
/// component: in the order observed, and by replica.
#[derive(Default)]
struct RolePods<'a> {
    /// Every pod of the role, being deleted or not, in the order observed
    /// (the first failure found is the first pod's).
    all: Vec<&'a Pod>,
    /// Each replica's pods, by revision and replica index (a pod without a
    /// numeric index is no replica's).
    replicas: BTreeMap<(&'a str, u32), Replica<'a>>,
}

/// One replica's pods, each list sorted by name.
#[derive(Default)]
struct Replica<'a> {
    live: Vec<&'a Pod>,
    deleting: Vec<&'a Pod>,
}

impl<'a> RolePods<'a> {
    /// The pods of each role among `pods`, by role name, in one pass.
    fn by_role(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeMap<&'a str, RolePods<'a>> {
        let mut roles: BTreeMap<&'a str, RolePods<'a>> = BTreeMap::new();
        for pod in pods {
            if let Some(role) = pod.role.as_deref() {
                roles.entry(role).or_default().push(pod);
            }
        }
        for role in roles.values_mut() {
            role.sort();
        }
        roles
    }

    /// `pods` as the pods of one role.
    fn of(pods: impl IntoIterator<Item = &'a Pod>) -> RolePods<'a> {
        let mut role = RolePods::default();
        for pod in pods {
            role.push(pod);
        }
        role.sort();
        role
    }

    fn push(&mut self, pod: &'a Pod) {
        self.all.push(pod);
        if let Some(index) = pod.replica {
            let revision = pod.revision.as_deref().unwrap_or_default();
            let replica = self.replicas.entry((revision, index)).or_default();
            if pod.deleting() {
                replica.deleting.push(pod);
            } else {
                replica.live.push(pod);
            }
        }
    }

    fn sort(&mut self) {
        for replica in self.replicas.values_mut() {
            replica.live.sort_by(|a, b| a.name.cmp(&b.name));
            replica.deleting.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }

    /// The role's pods not being deleted, in the order observed.
    fn live(&self) -> impl Iterator<Item = &'a Pod> + '_ {
        self.all.iter().copied().filter(|p| !p.deleting())
    }

    /// The replicas whose every one of `nodes` live pods, of those `counted`
    /// keeps, is ready.
    fn ready(&self, nodes: i32, counted: impl Fn(&(&'a str, u32), &Pod) -> bool) -> i32 {
        count(
            self.replicas
                .iter()
                .filter(|(key, replica)| {
                    whole_and_ready(
                        replica.live.iter().copied().filter(|p| counted(key, p)),
                        nodes,
                    )
                })
                .count(),
        )
    }
}

/// Whether `pods` are `nodes` pods (one at least), every one ready.
fn whole_and_ready<'a>(pods: impl Iterator<Item = &'a Pod>, nodes: i32) -> bool {
    let mut seen = 0usize;
    for pod in pods {
        if !pod.ready {
            return false;
        }
        seen = seen.saturating_add(1);
    }
    seen > 0 && i32::try_from(seen) == Ok(nodes)
}

/// A role's failed replicas (held past their recovery limit) and all its
/// failing ones: the held first (failed before those backing off), then
/// those whose pods show the failure ([`failing_replicas`]), each once.
fn failing_and_held(
    held: Option<&BTreeMap<u32, (bool, String)>>,
    pods: &RolePods<'_>,
    nodes: i32,
) -> (Vec<String>, Vec<String>) {
    let held_replicas = || held.into_iter().flatten();
    let failed: Vec<String> = held_replicas()
        .filter(|(_, (failed, _))| *failed)
        .map(|(_, (_, why))| why.clone())
        .collect();
    let failing: Vec<String> = failed
        .iter()
        .cloned()
        .chain(
            held_replicas()
                .filter(|(_, (failed, _))| !failed)
                .map(|(_, (_, why))| why.clone()),
        )
        .chain(
            failing_replicas(pods, nodes)
                .into_iter()
                .filter(|(index, _)| !held.is_some_and(|h| h.contains_key(index)))
                .map(|(_, why)| why),
        )
        .collect();
    (failed, failing)
}

fn serving_component(
    role: &Role,
    observed: &Observed<'_>,
    observed_pods: &BTreeMap<&str, RolePods<'_>>,
    previous: Option<&ComponentStatus>,
) -> Component {
    let desired = role.replicas().max(0);
    let nodes = role.node_count();
    let empty = RolePods::default();
    let pods = observed_pods.get(role.name.as_str()).unwrap_or(&empty);
    // A draining replica is out of traffic: not ready, and counted apart.
    let ready_replicas = pods.ready(nodes, |_, p| {
        !p.draining() && !observed.marked.contains(p.name.as_str())
    });
    let draining_replicas = count(observed.draining.get(&role.name).map_or(0, BTreeSet::len));
    let (failed, failing) = failing_and_held(observed.held.get(&role.name), pods, nodes);
    let waiting_for_scheduler = waiting_replicas(pods, &observed.pod_groups);
    let ready_pods = count(pods.live().filter(|p| p.ready).count());
    let failure = failed
        .first()
        .map(|why| format!("{why} (past spec.roles[].recovery.maxRestarts)"))
        .or_else(|| pods.live().find_map(pod_failure));
    let unknown = pods.live().any(|p| p.phase.as_deref() == Some("Unknown"));
    let scheduled = pods.live().any(|p| p.node.is_some());
    let revisions: BTreeSet<&str> = pods.live().filter_map(|p| p.revision.as_deref()).collect();
    let outdated =
        !observed.revisions.is_empty() && revisions.iter().any(|r| !observed.revisions.contains(r));
    let update_revision = observed.update_revisions.get(&role.name);
    let (updated_replicas, updated_ready_replicas, current_revision) = match update_revision {
        Some(update) => {
            // Replicas with live pods, by revision.
            let mut replicas_at: BTreeMap<&str, usize> = BTreeMap::new();
            let live = pods.replicas.iter().filter(|(_, r)| !r.live.is_empty());
            for ((revision, _), _) in live {
                let replicas = replicas_at.entry(revision).or_default();
                *replicas = replicas.saturating_add(1);
            }
            // The revision most replicas run besides the update revision
            // (the lowest on a tie); the update revision when none other runs.
            let current = replicas_at
                .iter()
                .filter(|(r, _)| **r != update.as_str())
                .max_by_key(|(r, replicas)| (**replicas, std::cmp::Reverse(**r)))
                .map_or(update.as_str(), |(r, _)| *r);
            (
                count(replicas_at.get(update.as_str()).copied().unwrap_or(0)),
                pods.ready(nodes, |(revision, _), _| *revision == update.as_str()),
                Some(current.to_owned()),
            )
        }
        None => (0, 0, None),
    };
    let planned = outdated || draining_replicas > 0 || observed.changing.contains(&role.name);
    let (failing_replicas, failing_reason) =
        failing_episode(&failing, previous, ready_replicas.min(desired), desired);
    let lost = lost_replicas(previous, ready_replicas.min(desired), desired, planned);
    let phase = if failure.is_some() {
        ComponentPhase::Failed
    } else if unknown {
        ComponentPhase::Unknown
    } else if ready_replicas >= desired && !outdated {
        ComponentPhase::Running
    } else if !scheduled {
        ComponentPhase::Pending
    } else {
        ComponentPhase::Deploying
    };
    Component {
        status: ComponentStatus {
            desired_replicas: desired,
            ready_replicas: ready_replicas.min(desired),
            nodes_per_replica: nodes.max(0),
            // Saturating: a spec the webhook would refuse (replicas and
            // nodeCount both huge) still gives a status, never a negative
            // count or a panic.
            total_pods: desired.max(0).saturating_mul(nodes.max(0)),
            ready_pods,
            phase,
            last_update_time: None,
            updated_replicas,
            updated_ready_replicas,
            current_revision,
            update_revision: update_revision.cloned(),
            draining_replicas,
            failing_replicas,
            failing_reason,
            failed_replicas: count(failed.len()),
            unschedulable_replicas: count(waiting_for_scheduler.len()),
            unschedulable_reason: waiting_for_scheduler.first().cloned(),
            lost_replicas: lost,
            kept_for_pair: None,
        },
        failure,
        outdated,
    }
}

/// The replicas among `replicas` (each one replica's pods, of one role and
/// revision) whose every one of `nodes` pods not being deleted is ready.
pub fn ready_replicas_of<'a>(replicas: impl Iterator<Item = &'a [&'a Pod]>, nodes: i32) -> i32 {
    count(
        replicas
            .filter(|pods| whole_and_ready(pods.iter().copied().filter(|p| !p.deleting()), nodes))
            .count(),
    )
}

/// A count of objects as a status field: an i32, saturating.
fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A sum of two non-negative replica counts, saturating at i32::MAX.
fn saturating_sum(a: i32, b: i32) -> i32 {
    a.max(0).saturating_add(b.max(0))
}

fn router_component(role: &Role, deployment: Option<&Value>) -> Component {
    let desired = role.replicas().max(0);
    // An i64 from the Deployment's status, clamped into an i32 count.
    let ready = deployment
        .and_then(|d| d["status"]["readyReplicas"].as_i64())
        .unwrap_or(0)
        .clamp(0, i64::from(i32::MAX));
    let ready = i32::try_from(ready).unwrap_or(i32::MAX);
    // Pending until the endpoint picker has pods, whether or not its
    // Deployment exists yet; Deploying while they are not all ready.
    let pods = deployment
        .and_then(|d| d["status"]["replicas"].as_i64())
        .unwrap_or(0);
    let phase = if ready >= desired {
        ComponentPhase::Running
    } else if pods == 0 {
        ComponentPhase::Pending
    } else {
        ComponentPhase::Deploying
    };
    Component {
        status: ComponentStatus {
            desired_replicas: desired,
            ready_replicas: ready.min(desired),
            nodes_per_replica: 1,
            total_pods: desired,
            ready_pods: ready,
            phase,
            last_update_time: None,
            ..Default::default()
        },
        failure: None,
        outdated: false,
    }
}

/// How often, at most, a status whose counts alone moved is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusPace {
    /// When replica counts moved (ready, updated, draining, failing,
    /// waiting, lost: what the `READY` and `UPDATED` columns and the Ready
    /// condition's message show).
    pub counts: std::time::Duration,
    /// When only the pods ready inside replicas moved (`readyPods`): a
    /// replica's pods load one after another, and no column shows them.
    pub pods: std::time::Duration,
}

impl StatusPace {
    /// Every change written at once (render, the tests' contexts).
    pub const NONE: StatusPace = StatusPace {
        counts: std::time::Duration::ZERO,
        pods: std::time::Duration::ZERO,
    };

    /// The longer of the two: how long a write can hold the next one back.
    pub fn longest(&self) -> std::time::Duration {
        self.counts.max(self.pods)
    }
}

/// `tandem serve`'s pace: replica counts once a second, pods ready inside
/// replicas once every ten.
pub const STATUS_PACE: StatusPace = StatusPace {
    counts: std::time::Duration::from_secs(1),
    pods: std::time::Duration::from_secs(10),
};

/// The fields of a role's component that move with every pod event: pod and
/// replica counts, and the time they last moved.
const COUNTS: [&str; 10] = [
    "readyReplicas",
    "totalPods",
    "readyPods",
    "updatedReplicas",
    "updatedReadyReplicas",
    "drainingReplicas",
    "failingReplicas",
    "unschedulableReplicas",
    "lostReplicas",
    "lastUpdateTime",
];

/// Whether a status write is due, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// What would be written is what is stored.
    Unchanged,
    /// Write it now.
    Now,
    /// Only counts moved, and the last write was less than the pace ago:
    /// write after this long (the reconcile looks again then, and writes
    /// the status as it is by then).
    After(std::time::Duration),
}

/// Whether `next` differs from `current` only in counts: the pods and
/// replicas counted per role (and the `ready` and `updated` summaries made
/// of them), and the words of a condition that keeps its status and reason
/// (its message counts the replicas ready: "decode: 1/3 replicas ready").
/// A condition's status or reason, the observed generation, a role's phase,
/// desired replicas, revisions or reasons, an upgrade's step, and a role
/// come or gone are not counts.
pub fn counts_only(current: &InferenceServiceStatus, next: &InferenceServiceStatus) -> bool {
    reported_without(current, &COUNTS, true) == reported_without(next, &COUNTS, true)
}

/// Whether `next` differs from `current` only in the pods ready inside
/// replicas: a role's `readyPods` (and its `lastUpdateTime`, which moves
/// with it), no replica count, no summary, no condition's words.
pub fn pod_counts_only(current: &InferenceServiceStatus, next: &InferenceServiceStatus) -> bool {
    const PODS: [&str; 2] = ["readyPods", "lastUpdateTime"];
    reported_without(current, &PODS, false) == reported_without(next, &PODS, false)
}

/// What `status` reports less each role's `fields` and, with `words`, less
/// the `ready` and `updated` summaries and every condition's message: what
/// must stay the same for a change to be one of those fields alone.
fn reported_without(status: &InferenceServiceStatus, fields: &[&str], words: bool) -> Value {
    let mut reported = reported(status);
    if words {
        if let Some(object) = reported.as_object_mut() {
            object.remove("ready");
            object.remove("updated");
        }
        for condition in reported["conditions"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            condition.remove("message");
        }
    }
    if let Some(components) = reported["components"].as_object_mut() {
        for component in components.values_mut().filter_map(Value::as_object_mut) {
            for field in fields {
                component.remove(*field);
            }
        }
    }
    reported
}

/// When to write `next` over the stored `current`, `since_last_write` after
/// this process last wrote the object's status (None: not since it
/// started, or longer ago than [`StatusPace::longest`]): while only the
/// pods ready inside replicas move ([`pod_counts_only`]), at most once per
/// `pace.pods`; while only counts move ([`counts_only`]), at most once per
/// `pace.counts`. Any other change is written at once, and so is the first
/// count change after a quiet pace: a lone pod event is reported as soon
/// as before, a burst of them once per pace.
pub fn status_write(
    current: &InferenceServiceStatus,
    next: &InferenceServiceStatus,
    since_last_write: Option<std::time::Duration>,
    pace: StatusPace,
) -> StatusWrite {
    if reported(next) == reported(current) {
        return StatusWrite::Unchanged;
    }
    let Some(since) = since_last_write else {
        return StatusWrite::Now;
    };
    let held = if pod_counts_only(current, next) {
        pace.pods
    } else if counts_only(current, next) {
        pace.counts
    } else {
        return StatusWrite::Now;
    };
    if since < held {
        StatusWrite::After(held.saturating_sub(since))
    } else {
        StatusWrite::Now
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_message_at_zero_says_what_holds_requests() {
        let with_router = |router: serde_json::Value| -> InferenceService {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
                "metadata": {"name": "s"},
                "spec": {"roles": [{"name": "worker", "componentType": "worker", "replicas": 0,
                    "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}, router]}
            }))
            .unwrap()
        };
        let router = serde_json::json!({"name": "router", "componentType": "router"});
        let mut queued = router.clone();
        queued["queue"] = serde_json::json!({"timeoutSeconds": 60});
        let mut own = router.clone();
        own["endpointPickerConfig"] = serde_json::json!("plugins: []");
        for (router, ends) in [
            (
                router,
                "without a queue (spec.roles[1].queue) its picker answers 503 meanwhile",
            ),
            (
                queued,
                "requests wait in the picker's queue, each up to 60 s",
            ),
            (
                own,
                "is up to spec.roles[1].endpointPickerConfig (featureGates: [flowControl])",
            ),
        ] {
            let message = ready_message(&with_router(router), true, &[]);
            assert!(message.ends_with(ends), "{message}");
        }
    }
    use super::*;

    fn counted(ready_pods: i32, phase: ComponentPhase) -> InferenceServiceStatus {
        let mut status = InferenceServiceStatus {
            observed_generation: Some(1),
            ready: Some(format!("{}/2", ready_pods / 4)),
            ..Default::default()
        };
        status.components.insert(
            "decode".into(),
            ComponentStatus {
                desired_replicas: 2,
                total_pods: 8,
                ready_pods,
                ready_replicas: ready_pods / 4,
                phase,
                ..Default::default()
            },
        );
        status
    }

    #[test]
    fn counts_alone_are_written_once_per_pace_and_anything_else_at_once() {
        let pace = STATUS_PACE;
        let soon = Some(std::time::Duration::from_millis(300));
        let two = counted(2, ComponentPhase::Deploying);
        let five = counted(5, ComponentPhase::Deploying);
        assert!(counts_only(&two, &five));
        assert_eq!(status_write(&two, &two, soon, pace), StatusWrite::Unchanged);
        assert_eq!(
            status_write(&two, &five, soon, pace),
            StatusWrite::After(std::time::Duration::from_millis(700))
        );
        // The first write since the process started, or after a quiet pace.
        assert_eq!(status_write(&two, &five, None, pace), StatusWrite::Now);
        assert_eq!(
            status_write(&two, &five, Some(pace.counts), pace),
            StatusWrite::Now
        );
        // A phase that moved is written at once, counts or not.
        let running = counted(8, ComponentPhase::Running);
        assert!(!counts_only(&five, &running));
        assert_eq!(status_write(&five, &running, soon, pace), StatusWrite::Now);
        // So are a condition, the observed generation and desired replicas.
        let mut conditioned = five.clone();
        conditioned.conditions.push(Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "AllReplicasReady".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        });
        assert_eq!(
            status_write(&five, &conditioned, soon, pace),
            StatusWrite::Now
        );
        // Its message alone moving with the counts is held with them; its
        // reason or status moving is not.
        let mut recounted = conditioned.clone();
        recounted.conditions[0].message = "decode: 1/2 replicas ready".into();
        assert_eq!(
            status_write(&conditioned, &recounted, soon, pace),
            StatusWrite::After(std::time::Duration::from_millis(700))
        );
        let mut reasoned = conditioned.clone();
        reasoned.conditions[0].reason = "ReplicasNotReady".into();
        assert_eq!(
            status_write(&conditioned, &reasoned, soon, pace),
            StatusWrite::Now
        );
        let mut observed = five.clone();
        observed.observed_generation = Some(2);
        assert_eq!(status_write(&five, &observed, soon, pace), StatusWrite::Now);
        let mut scaled = five.clone();
        if let Some(decode) = scaled.components.get_mut("decode") {
            decode.desired_replicas = 3;
        }
        assert_eq!(status_write(&five, &scaled, soon, pace), StatusWrite::Now);
        // A pace of zero (render, the tests' contexts) writes every change.
        assert_eq!(
            status_write(&two, &five, soon, StatusPace::NONE),
            StatusWrite::Now
        );
    }

    #[test]
    fn pods_ready_inside_a_replica_are_written_once_per_pods_pace() {
        let pace = STATUS_PACE;
        let secs = std::time::Duration::from_secs;
        // Pods 1 and 2 of a 4-pod replica: no replica count moves.
        let one = counted(1, ComponentPhase::Deploying);
        let two = counted(2, ComponentPhase::Deploying);
        assert!(pod_counts_only(&one, &two));
        assert_eq!(
            status_write(
                &one,
                &two,
                Some(std::time::Duration::from_millis(300)),
                pace
            ),
            StatusWrite::After(std::time::Duration::from_millis(9_700))
        );
        // Past the counts' pace, still held to the pods'.
        assert_eq!(
            status_write(&one, &two, Some(secs(2)), pace),
            StatusWrite::After(secs(8))
        );
        assert_eq!(
            status_write(&one, &two, Some(pace.pods), pace),
            StatusWrite::Now
        );
        assert_eq!(status_write(&one, &two, None, pace), StatusWrite::Now);
        // The pod that makes the replica whole moves a replica count: the
        // counts' pace.
        let whole = counted(4, ComponentPhase::Deploying);
        assert!(!pod_counts_only(&two, &whole));
        assert_eq!(
            status_write(&two, &whole, Some(secs(2)), pace),
            StatusWrite::Now
        );
    }
    use serde_json::json;

    use super::super::drain;
    use crate::plan::shared::children;
    use crate::plan::shared::pod::from_json_all;

    fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
        object["metadata"]["labels"][key].as_str()
    }

    /// The ready replicas of pods written as the API server shows them,
    /// revision by revision and role by role, as a side-by-side rollout
    /// counts them ([`super::ready_replicas_of`]).
    fn ready_replicas(pods: &[&Value], nodes: i32) -> i32 {
        let pods: Vec<Pod> = pods.iter().map(|p| Pod::from_json(p)).collect();
        let by_revision = drain::RevisionPods::new(&pods);
        let revisions: BTreeSet<&str> = pods.iter().filter_map(|p| p.revision.as_deref()).collect();
        let roles: BTreeSet<&str> = pods.iter().filter_map(|p| p.role.as_deref()).collect();
        let mut ready = 0;
        for revision in revisions {
            for role in &roles {
                let replicas = by_revision.of(revision).of_role(role).map(|(_, pods)| pods);
                ready += super::ready_replicas_of(replicas, nodes);
            }
        }
        ready
    }

    /// [`super::unschedulable_replicas`] of pods written as the API server
    /// shows them.
    fn unschedulable_replicas(pods: &[&Value], groups: &[&Value]) -> Vec<String> {
        let pods: Vec<Pod> = pods.iter().map(|p| Pod::from_json(p)).collect();
        super::unschedulable_replicas(&pods.iter().collect::<Vec<_>>(), groups)
    }

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn service() -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "ds", "namespace": "default", "generation": 3},
            "spec": {"roles": [
                {"name": "prefill", "componentType": "prefiller", "replicas": 1, "multinode": {"nodeCount": 2},
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
                {"name": "decode", "componentType": "decoder", "replicas": 2, "multinode": {"nodeCount": 4},
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
            ]}
        }))
        .unwrap()
    }

    fn pod(role: &str, index: u32, worker: u32, ready: bool) -> Value {
        json!({
            "metadata": {"name": format!("ds-{role}-{index}-0-{worker}"), "labels": {
                children::ROLE_NAME: role, children::REPLICA_INDEX: index.to_string(), children::REVISION: "r1"}},
            "spec": {"nodeName": "gpu-node"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        })
    }

    fn all_pods(not_ready: Option<(&str, u32, u32)>) -> Vec<Value> {
        let mut pods = Vec::new();
        for (role, replicas, nodes) in [("prefill", 1, 2), ("decode", 2, 4)] {
            for i in 0..replicas {
                for w in 0..nodes {
                    pods.push(pod(role, i, w, not_ready != Some((role, i, w))));
                }
            }
        }
        pods
    }

    fn compute(s: &InferenceService, pods: &[Value], now: &str) -> InferenceServiceStatus {
        status(
            s,
            &Observed {
                pods: &from_json_all(pods),
                router: None,
                revisions: &["r1"],
                problems: &[],
                ..Default::default()
            },
            &time(now),
        )
    }

    fn find<'a>(status: &'a InferenceServiceStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    /// `pods` with decode replica 1's worker 2 not ready and its `vllm`
    /// container in `state` after `restarts` restarts.
    fn crashing(restarts: i64, state: Value) -> Vec<Value> {
        let mut pods = all_pods(Some(("decode", 1, 2)));
        let pod = pods
            .iter_mut()
            .find(|p| p["metadata"]["name"] == "ds-decode-1-0-2")
            .unwrap();
        pod["status"]["containerStatuses"] =
            json!([{"name": "vllm", "restartCount": restarts, "state": state}]);
        pods
    }

    #[test]
    fn a_crash_looping_replica_is_degraded_until_it_is_ready() {
        let running = json!({"running": {}});
        // One restart is not a loop.
        let once = compute(
            &service(),
            &crashing(1, running.clone()),
            "2026-11-21T10:00:00Z",
        );
        assert_eq!(find(&once, DEGRADED).status, "False");
        assert_eq!(find(&once, DEGRADED).reason, "ReplicasHealthy");
        assert_eq!(once.components["decode"].failing_replicas, 0);

        // Restarts rising past the threshold, between two restarts.
        let mut s = service();
        let looping = compute(&s, &crashing(3, running.clone()), "2026-11-21T10:01:00Z");
        let degraded = find(&looping, DEGRADED);
        assert_eq!(degraded.status, "True");
        assert_eq!(degraded.reason, "ReplicaFailing");
        assert_eq!(
            degraded.message,
            "role decode: replica 1: pod ds-decode-1-0-2 container vllm restarting repeatedly"
        );
        assert_eq!(looping.components["decode"].failing_replicas, 1);
        assert_eq!(looping.components["prefill"].failing_replicas, 0);

        // In back-off: the reason is the wait's.
        s.status = Some(looping.clone());
        let waiting = compute(
            &s,
            &crashing(4, json!({"waiting": {"reason": "CrashLoopBackOff"}})),
            "2026-11-21T10:02:00Z",
        );
        assert_eq!(
            waiting.components["decode"].failing_reason.as_deref(),
            Some("replica 1: pod ds-decode-1-0-2 container vllm CrashLoopBackOff")
        );
        assert_eq!(
            find(&waiting, DEGRADED).last_transition_time,
            time("2026-11-21T10:01:00Z"),
            "the same episode"
        );

        // Ready again (its restart count stays): cleared.
        s.status = Some(waiting);
        let mut pods = crashing(4, running);
        for pod in &mut pods {
            pod["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        }
        let healed = compute(&s, &pods, "2026-11-21T10:03:00Z");
        assert_eq!(find(&healed, DEGRADED).status, "False");
        assert_eq!(healed.components["decode"].failing_replicas, 0);
        assert_eq!(healed.components["decode"].failing_reason, None);
    }

    /// Decode replica 1 as LeaderWorkerSet leaves it when its worker 2's
    /// container exits and restarts (`RecreateGroupOnPodRestart`): the old
    /// group's pods being deleted, the crashed one with one restart and its
    /// exit, and `fresh` of the new group's pods (names of a new UID) loading,
    /// not ready.
    fn recreated(fresh: u32) -> Vec<Value> {
        let mut pods = all_pods(None);
        pods.retain(|p| {
            !p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("ds-decode-1-")
        });
        for w in 0..4 {
            let mut old = pod("decode", 1, w, false);
            old["metadata"]["deletionTimestamp"] = json!("2026-11-21T10:00:03Z");
            if w == 2 {
                old["status"]["containerStatuses"] = json!([{"name": "vllm", "restartCount": 1,
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
            }
            pods.push(old);
        }
        for w in 0..fresh {
            let mut new = pod("decode", 1, w, false);
            new["metadata"]["name"] = json!(format!("ds-decode-1-0-{w}-new"));
            pods.push(new);
        }
        pods
    }

    #[test]
    fn a_group_recreated_after_a_crash_is_failing_for_the_whole_episode() {
        let mut s = service();
        s.status = Some(compute(&s, &all_pods(None), "2026-11-21T09:59:00Z"));

        // The crash: the old group terminates, the new one is not there yet.
        let crashed = compute(&s, &recreated(0), "2026-11-21T10:00:00Z");
        let message = "role decode: replica 1: pod ds-decode-1-0-2 container vllm exited with \
                       code 1 (Error); its group is being recreated";
        assert_eq!(find(&crashed, DEGRADED).status, "True");
        assert_eq!(find(&crashed, DEGRADED).reason, REPLICA_FAILING);
        assert_eq!(find(&crashed, DEGRADED).message, message);
        assert_eq!(crashed.components["decode"].failing_replicas, 1);

        // The old pods are gone and the new group loads (and will crash
        // again): no trace of the crash in any pod, the episode goes on.
        s.status = Some(crashed);
        let mut loading = all_pods(None);
        for p in loading.iter_mut().filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("ds-decode-1-")
        }) {
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        }
        let between = compute(&s, &loading, "2026-11-21T10:00:05Z");
        assert_eq!(
            find(&between, DEGRADED).status,
            "True",
            "between two crashes"
        );
        assert_eq!(
            find(&between, DEGRADED).message,
            message,
            "the last crash seen"
        );
        assert_eq!(
            find(&between, DEGRADED).last_transition_time,
            time("2026-11-21T10:00:00Z"),
            "the same episode"
        );
        assert_eq!(between.components["decode"].failing_replicas, 1);

        // Crashed again, the new group half up: still one failing replica.
        s.status = Some(between);
        let again = compute(&s, &recreated(3), "2026-11-21T10:00:09Z");
        assert_eq!(again.components["decode"].failing_replicas, 1);
        assert_eq!(
            find(&again, DEGRADED).last_transition_time,
            time("2026-11-21T10:00:00Z")
        );

        // Every replica ready: the episode ends.
        s.status = Some(again);
        let healed = compute(&s, &all_pods(None), "2026-11-21T10:01:00Z");
        assert_eq!(find(&healed, DEGRADED).status, "False");
        assert_eq!(healed.components["decode"].failing_replicas, 0);
        assert_eq!(healed.components["decode"].failing_reason, None);
    }

    #[test]
    fn old_pods_that_crashed_do_not_make_a_replica_whose_new_pods_are_ready_failing() {
        let mut pods = recreated(0);
        for w in 0..4 {
            let mut new = pod("decode", 1, w, true);
            new["metadata"]["name"] = json!(format!("ds-decode-1-0-{w}-new"));
            pods.push(new);
        }
        let status = compute(&service(), &pods, "2026-11-21T10:00:00Z");
        assert_eq!(status.components["decode"].failing_replicas, 0);
        assert_eq!(find(&status, DEGRADED).status, "False");
        // And a pod being deleted with no restart is no crash (a scale-down,
        // a rollout replacing it).
        let mut pods = all_pods(None);
        for p in pods.iter_mut().filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("ds-decode-1-")
        }) {
            p["metadata"]["deletionTimestamp"] = json!("2026-11-21T10:00:03Z");
        }
        let status = compute(&service(), &pods, "2026-11-21T10:00:00Z");
        assert_eq!(status.components["decode"].failing_replicas, 0);
    }

    const NO_GPU: &str = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.";

    /// `pods` with every pod of decode replica 1 bound to no node and not
    /// ready, the scheduler's verdict `scheduled` on each.
    fn waiting_for_the_scheduler(scheduled: Value) -> Vec<Value> {
        let mut pods = all_pods(None);
        for pod in pods.iter_mut().filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("ds-decode-1-")
        }) {
            pod["spec"] = json!({});
            pod["status"] = json!({"phase": "Pending", "conditions": [scheduled.clone()]});
        }
        pods
    }

    fn unschedulable_condition() -> Value {
        json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_GPU})
    }

    #[test]
    fn an_unschedulable_replica_says_so_with_the_schedulers_words() {
        let s = compute(
            &service(),
            &waiting_for_the_scheduler(unschedulable_condition()),
            "2026-11-21T10:00:00Z",
        );
        let decode = &s.components["decode"];
        assert_eq!(decode.unschedulable_replicas, 1);
        let reason = format!("replica 1: pod ds-decode-1-0-0 unschedulable: {NO_GPU}");
        assert_eq!(
            decode.unschedulable_reason.as_deref(),
            Some(reason.as_str())
        );
        assert_eq!(s.components["prefill"].unschedulable_replicas, 0);
        let ready = find(&s, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", UNSCHEDULABLE)
        );
        assert_eq!(
            ready.message,
            format!(
                "decode: 1/2 replicas ready (Deploying), 1 waiting for the scheduler: {reason}"
            )
        );
        assert_eq!(
            find(&s, DEGRADED).status,
            "False",
            "waiting is not degraded"
        );
    }

    /// Kubernetes' gang scheduler says why the gang waits on its PodGroup;
    /// that is the replica's reason while a pod of it, naming the group, is
    /// unbound. A group with no False condition (not tried yet, or
    /// scheduled) or being deleted leaves the pods' own words.
    #[test]
    fn a_waiting_gang_says_why_in_its_pod_groups_words() {
        const GANG: &str =
            "0/2 placements are available, first placement status: pod group is unschedulable";
        let pod = |name: &str, index: &str, node: Option<&str>, scheduled: Value| {
            json!({
                "metadata": {"name": name, "labels": {
                    children::REPLICA_INDEX: index, children::REVISION: "r1"}},
                "spec": {"nodeName": node, "schedulingGroup": {"podGroupName": "ds-worker-0-ab"}},
                "status": {"conditions": [scheduled]},
            })
        };
        let group = |conditions: Value, deleting: bool| {
            json!({
                "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                "metadata": {"name": "ds-worker-0-ab",
                    "deletionTimestamp": deleting.then_some("2026-11-21T10:00:00Z")},
                "status": {"conditions": conditions},
            })
        };
        let refused = json!({"type": "PodGroupScheduled", "status": "False",
            "reason": "Unschedulable", "message": GANG});
        let gated = json!({"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"});
        let waiting = [
            pod("ds-worker-0-0", "0", None, unschedulable_condition()),
            pod("ds-worker-0-0-1", "0", None, unschedulable_condition()),
        ];
        let waiting: Vec<&Value> = waiting.iter().collect();
        let by_pod = format!("replica 0: pod ds-worker-0-0 unschedulable: {NO_GPU}");
        let gang = format!("PodGroup ds-worker-0-ab Unschedulable: {GANG}");
        let by_group = format!("replica 0: {gang}; pod ds-worker-0-0 unschedulable: {NO_GPU}");
        for (groups, expected) in [
            (vec![group(json!([refused.clone()]), false)], &by_group),
            (vec![group(json!([refused.clone()]), true)], &by_pod),
            (
                vec![group(
                    json!([{"type": "PodGroupScheduled", "status": "True"}]),
                    false,
                )],
                &by_pod,
            ),
            (vec![group(json!([]), false)], &by_pod),
            (vec![], &by_pod),
        ] {
            let groups: Vec<&Value> = groups.iter().collect();
            assert_eq!(
                unschedulable_replicas(&waiting, &groups),
                vec![expected.clone()],
                "{groups:?}"
            );
        }
        // The group's words without the pods': the scheduler held the pods
        // without a verdict of their own.
        let held = [pod("ds-worker-0-0", "0", None, gated.clone())];
        let refused_group = [group(json!([refused.clone()]), false)];
        let refused_group: Vec<&Value> = refused_group.iter().collect();
        assert_eq!(
            unschedulable_replicas(&held.iter().collect::<Vec<_>>(), &refused_group),
            vec![format!("replica 0: {gang}")]
        );
        // Bound pods do not wait, whatever the group said before.
        let bound = [pod("ds-worker-0-0", "0", Some("n1"), gated)];
        assert!(
            unschedulable_replicas(&bound.iter().collect::<Vec<_>>(), &refused_group).is_empty()
        );
    }

    #[test]
    fn only_a_pod_the_scheduler_refused_and_did_not_bind_is_unschedulable() {
        // Not yet looked at, gated, or bound since: not unschedulable.
        for scheduled in [
            json!({"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}),
            json!({"type": "PodScheduled", "status": "True"}),
            json!({"type": "Ready", "status": "False", "reason": "Unschedulable"}),
        ] {
            let s = compute(
                &service(),
                &waiting_for_the_scheduler(scheduled.clone()),
                "2026-11-21T10:00:00Z",
            );
            assert_eq!(
                s.components["decode"].unschedulable_replicas, 0,
                "{scheduled}"
            );
            assert_eq!(find(&s, "Ready").reason, "ComponentsNotReady");
        }
        let mut bound = waiting_for_the_scheduler(unschedulable_condition());
        for pod in &mut bound {
            pod["spec"]["nodeName"] = json!("gpu-node");
        }
        let s = compute(&service(), &bound, "2026-11-21T10:00:00Z");
        assert_eq!(
            s.components["decode"].unschedulable_replicas, 0,
            "a stale condition on a bound pod"
        );
        // Without a message, the pod is still named.
        let mut silent = unschedulable_condition();
        silent["message"] = Value::Null;
        let s = compute(
            &service(),
            &waiting_for_the_scheduler(silent),
            "2026-11-21T10:00:00Z",
        );
        assert_eq!(
            s.components["decode"].unschedulable_reason.as_deref(),
            Some("replica 1: pod ds-decode-1-0-0 unschedulable")
        );
    }

    /// `all_pods` without the pods of `role`'s replica `index`.
    fn without(role: &str, index: u32) -> Vec<Value> {
        let prefix = format!("ds-{role}-{index}-");
        all_pods(None)
            .into_iter()
            .filter(|p| !p["metadata"]["name"].as_str().unwrap().starts_with(&prefix))
            .collect()
    }

    #[test]
    fn a_replica_lost_with_its_node_is_degraded_until_the_role_is_whole() {
        let mut s = service();
        let whole = compute(&s, &all_pods(None), "2026-11-21T10:00:00Z");
        assert_eq!(find(&whole, DEGRADED).status, "False");
        s.status = Some(whole);

        // The node of decode replica 1 goes, and its four pods with it.
        let lost = compute(&s, &without("decode", 1), "2026-11-21T10:01:00Z");
        assert_eq!(lost.components["decode"].lost_replicas, 1);
        assert_eq!(lost.components["prefill"].lost_replicas, 0);
        let degraded = find(&lost, DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", REPLICAS_UNAVAILABLE)
        );
        assert_eq!(
            degraded.message,
            "role decode: 1/2 replicas ready, 1 lost since every replica was ready (4 of 8 pods ready)"
        );
        assert_eq!(find(&lost, "Ready").reason, REPLICAS_UNAVAILABLE);
        s.status = Some(lost.clone());

        // The same world: the same status.
        let again = compute(&s, &without("decode", 1), "2026-11-21T10:02:00Z");
        assert_eq!(again, lost);

        // Recreated elsewhere, loading: still short, the same episode.
        let loading = compute(
            &s,
            &all_pods(Some(("decode", 1, 0))),
            "2026-11-21T10:03:00Z",
        );
        assert_eq!(loading.components["decode"].lost_replicas, 1);
        assert_eq!(
            find(&loading, DEGRADED).last_transition_time,
            time("2026-11-21T10:01:00Z")
        );
        s.status = Some(loading);

        // Whole again.
        let whole = compute(&s, &all_pods(None), "2026-11-21T10:04:00Z");
        assert_eq!(whole.components["decode"].lost_replicas, 0);
        let degraded = find(&whole, DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("False", "ReplicasHealthy")
        );
        assert_eq!(degraded.last_transition_time, time("2026-11-21T10:04:00Z"));
    }

    #[test]
    fn a_crash_loop_after_being_whole_keeps_its_own_reason() {
        let mut s = service();
        s.status = Some(compute(&s, &all_pods(None), "2026-11-21T10:00:00Z"));
        let looping = compute(
            &s,
            &crashing(5, json!({"waiting": {"reason": "CrashLoopBackOff"}})),
            "2026-11-21T10:01:00Z",
        );
        assert_eq!(looping.components["decode"].lost_replicas, 1);
        let degraded = find(&looping, DEGRADED);
        assert_eq!(degraded.reason, REPLICA_FAILING, "the more precise cause");
        assert_eq!(
            degraded.message,
            "role decode: replica 1: pod ds-decode-1-0-2 container vllm CrashLoopBackOff"
        );
    }

    /// `service()` with decode at `replicas`.
    fn decode_at(replicas: i32) -> InferenceService {
        let mut s = service();
        s.spec.roles[1].replicas = Some(replicas);
        s
    }

    /// `s` as it is once every replica of `service()` was ready.
    fn from_whole(mut s: InferenceService) -> InferenceService {
        s.status = Some(compute(&service(), &all_pods(None), "2026-11-21T10:00:00Z"));
        s
    }

    /// Decode's lost replicas, once `status` is checked not Degraded.
    fn lost(status: &InferenceServiceStatus) -> i32 {
        assert_eq!(find(status, DEGRADED).status, "False");
        status.components["decode"].lost_replicas
    }

    #[test]
    fn planned_changes_lose_nothing() {
        // Scale-up: the new replica was never ready.
        let up = compute(
            &from_whole(decode_at(3)),
            &all_pods(None),
            "2026-11-21T10:01:00Z",
        );
        assert_eq!(up.components["decode"].ready_replicas, 2);
        assert_eq!(lost(&up), 0);

        // Scale-down: the replica that goes is above the desired count.
        let down = compute(
            &from_whole(decode_at(1)),
            &without("decode", 1),
            "2026-11-21T10:01:00Z",
        );
        assert_eq!(lost(&down), 0);

        // A drain: replica 1 out of traffic before it goes.
        let mut draining = all_pods(None);
        for pod in draining.iter_mut().filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("ds-decode-1-")
        }) {
            pod["metadata"]["labels"][drain::TRAFFIC] = json!(drain::DRAINING);
        }
        let observed = Observed {
            pods: &from_json_all(&draining),
            revisions: &["r1"],
            draining: BTreeMap::from([("decode".to_owned(), BTreeSet::from([1]))]),
            ..Default::default()
        };
        let drained = status(
            &from_whole(service()),
            &observed,
            &time("2026-11-21T10:01:00Z"),
        );
        assert_eq!(drained.components["decode"].ready_replicas, 1);
        assert_eq!(lost(&drained), 0);
        // The pass that starts the drain: its pods not marked yet, but the
        // plan's writes mark them; counted out of traffic already.
        let unmarked = all_pods(None);
        let names: Vec<String> = (0..4).map(|w| format!("ds-decode-1-0-{w}")).collect();
        let starting = Observed {
            pods: &from_json_all(&unmarked),
            marked: names.iter().map(String::as_str).collect(),
            ..observed.clone()
        };
        let started = status(
            &from_whole(service()),
            &starting,
            &time("2026-11-21T10:01:00Z"),
        );
        assert_eq!(started.components["decode"].ready_replicas, 1);
        assert_eq!(started.components["decode"].draining_replicas, 1);

        // Revisions side by side or a paced role: planned, whatever else.
        let mut rolling = all_pods(None);
        at_r2(&mut rolling, 1, false);
        let changing = Observed {
            pods: &from_json_all(&rolling),
            revisions: &[],
            changing: BTreeSet::from(["decode".to_owned()]),
            ..Default::default()
        };
        let side_by_side = status(
            &from_whole(service()),
            &changing,
            &time("2026-11-21T10:01:00Z"),
        );
        assert_eq!(lost(&side_by_side), 0);
        let unplanned = Observed {
            changing: BTreeSet::new(),
            ..changing
        };
        assert_eq!(
            status(
                &from_whole(service()),
                &unplanned,
                &time("2026-11-21T10:01:00Z")
            )
            .components["decode"]
                .lost_replicas,
            1,
            "the same world without the plan's word is a loss"
        );
    }

    /// Decode replica `index` among `pods` replaced by one at revision r2.
    fn at_r2(pods: &mut Vec<Value>, index: u32, ready: bool) {
        let prefix = format!("ds-decode-{index}-");
        pods.retain(|p| !p["metadata"]["name"].as_str().unwrap().starts_with(&prefix));
        for worker in 0..4 {
            let mut new = pod("decode", index, worker, ready);
            new["metadata"]["labels"][children::REVISION] = json!("r2");
            pods.push(new);
        }
    }

    #[test]
    fn a_rolling_update_loses_nothing() {
        // A RollingUpdate to r2: replica 1 replaced first (loading) while
        // replica 0 runs r1, then ready; then replica 0, the last, replaced.
        let mut rolling = all_pods(None);
        at_r2(&mut rolling, 1, false);
        let mut s = from_whole(service());
        let at = |pods: &[Value], s: &InferenceService, now: &str| {
            let observed = Observed {
                pods: &from_json_all(pods),
                revisions: &["r2"],
                ..Default::default()
            };
            status(s, &observed, &time(now))
        };
        let first = at(&rolling, &s, "2026-11-21T10:01:00Z");
        assert_eq!(first.components["decode"].ready_replicas, 1);
        assert_eq!(lost(&first), 0, "replica 0 is outdated: the role is moving");
        s.status = Some(first);
        let mut replaced = all_pods(None);
        at_r2(&mut replaced, 1, true);
        let second = at(&replaced, &s, "2026-11-21T10:02:00Z");
        assert_eq!(second.components["decode"].ready_replicas, 2);
        assert_eq!(second.components["decode"].phase, ComponentPhase::Deploying);
        s.status = Some(second);
        at_r2(&mut replaced, 0, false);
        let last_step = at(&replaced, &s, "2026-11-21T10:03:00Z");
        assert_eq!(last_step.components["decode"].ready_replicas, 1);
        assert_eq!(
            lost(&last_step),
            0,
            "the last replica replaced: the role was not Running since the rollout began"
        );
    }

    #[test]
    fn lost_replicas_begin_only_from_a_whole_role_and_last_until_it_is_whole() {
        let running = ComponentStatus {
            desired_replicas: 3,
            ready_replicas: 3,
            phase: ComponentPhase::Running,
            ..ComponentStatus::default()
        };
        assert_eq!(lost_replicas(Some(&running), 2, 3, false), 1);
        assert_eq!(lost_replicas(Some(&running), 2, 3, true), 0, "planned");
        assert_eq!(lost_replicas(Some(&running), 3, 4, false), 0, "scale-up");
        assert_eq!(lost_replicas(Some(&running), 2, 2, false), 0, "scale-down");
        assert_eq!(lost_replicas(None, 0, 3, false), 0, "never seen whole");
        let deploying = ComponentStatus {
            phase: ComponentPhase::Deploying,
            ready_replicas: 2,
            ..running.clone()
        };
        assert_eq!(lost_replicas(Some(&deploying), 1, 3, false), 0);
        let lost = ComponentStatus {
            lost_replicas: 1,
            ..deploying
        };
        assert_eq!(
            lost_replicas(Some(&lost), 2, 3, true),
            1,
            "an episode lasts"
        );
        assert_eq!(lost_replicas(Some(&lost), 1, 4, false), 3);
        assert_eq!(lost_replicas(Some(&lost), 3, 3, false), 0, "whole again");
    }

    #[test]
    fn an_image_that_does_not_come_is_failing_too() {
        let status = compute(
            &service(),
            &crashing(0, json!({"waiting": {"reason": "ImagePullBackOff"}})),
            "2026-11-21T10:00:00Z",
        );
        assert_eq!(
            find(&status, DEGRADED).message,
            "role decode: replica 1: pod ds-decode-1-0-2 container vllm ImagePullBackOff"
        );
    }

    #[test]
    fn all_ready() {
        let s = compute(&service(), &all_pods(None), "2026-11-21T10:00:00Z");
        assert_eq!(s.ready.as_deref(), Some("3/3"));
        let decode = &s.components["decode"];
        assert_eq!(
            (
                decode.desired_replicas,
                decode.ready_replicas,
                decode.nodes_per_replica,
                decode.total_pods,
                decode.ready_pods
            ),
            (2, 2, 4, 8, 8)
        );
        assert_eq!(decode.phase, ComponentPhase::Running);
        assert_eq!(find(&s, "Ready").status, "True");
        assert_eq!(find(&s, "Progressing").status, "False");
        assert_eq!(find(&s, "Failed").status, "False");
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn one_pod_not_ready_makes_its_replica_not_ready() {
        let s = compute(
            &service(),
            &all_pods(Some(("decode", 1, 3))),
            "2026-11-21T10:00:00Z",
        );
        let decode = &s.components["decode"];
        assert_eq!(
            decode.ready_replicas, 1,
            "a replica is ready only when all its nodes are"
        );
        assert_eq!(decode.ready_pods, 7);
        assert_eq!(decode.phase, ComponentPhase::Deploying);
        assert_eq!(s.ready.as_deref(), Some("2/3"));
        let ready = find(&s, "Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ComponentsNotReady")
        );
        assert_eq!(ready.message, "decode: 1/2 replicas ready (Deploying)");
    }

    #[test]
    fn nothing_scheduled_is_pending_and_a_crash_loop_is_failed_until_it_clears() {
        let none = compute(&service(), &[], "2026-11-21T10:00:00Z");
        assert_eq!(none.components["prefill"].phase, ComponentPhase::Pending);

        let mut pods = all_pods(None);
        pods[0]["status"]["containerStatuses"] =
            json!([{"name": "vllm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
        pods[0]["status"]["conditions"][0]["status"] = json!("False");
        let mut s = service();
        let failing = compute(&s, &pods, "2026-11-21T10:00:00Z");
        assert_eq!(failing.components["prefill"].phase, ComponentPhase::Failed);
        let failed = find(&failing, "Failed");
        assert_eq!(failed.status, "True");
        assert_eq!(
            failed.message,
            "prefill: pod ds-prefill-0-0-0 container vllm CrashLoopBackOff"
        );

        s.status = Some(failing);
        let healed = compute(&s, &all_pods(None), "2026-11-21T10:05:00Z");
        let failed = find(&healed, "Failed");
        assert_eq!(
            failed.status, "False",
            "a Failed that never clears is a bug"
        );
        assert_eq!(failed.last_transition_time, time("2026-11-21T10:05:00Z"));
    }

    #[test]
    fn an_unchanged_world_gives_the_same_status() {
        let mut s = service();
        let first = compute(&s, &all_pods(None), "2026-11-21T10:00:00Z");
        s.status = Some(first.clone());
        let second = compute(&s, &all_pods(None), "2026-11-21T11:00:00Z");
        assert_eq!(second, first, "times move only on change");
        // A change moves only what changed.
        s.status = Some(second);
        let third = compute(
            &s,
            &all_pods(Some(("prefill", 0, 1))),
            "2026-11-21T12:00:00Z",
        );
        assert_eq!(
            third.components["prefill"].last_update_time,
            Some(time("2026-11-21T12:00:00Z"))
        );
        assert_eq!(
            third.components["decode"].last_update_time,
            Some(time("2026-11-21T10:00:00Z"))
        );
        assert_eq!(
            find(&third, "Ready").last_transition_time,
            time("2026-11-21T12:00:00Z")
        );
        assert_eq!(
            find(&third, "Failed").last_transition_time,
            time("2026-11-21T10:00:00Z")
        );
    }

    #[test]
    fn problems_are_failures() {
        let problems = vec!["the LeaderWorkerSet API is not installed in the cluster".to_owned()];
        let pods = all_pods(None);
        let s = status(
            &service(),
            &Observed {
                pods: &from_json_all(&pods),
                router: None,
                revisions: &["r1"],
                problems: &problems,
                ..Default::default()
            },
            &time("2026-11-21T10:00:00Z"),
        );
        let failed = find(&s, "Failed");
        assert_eq!(
            (failed.status.as_str(), failed.message.as_str()),
            (
                "True",
                "the LeaderWorkerSet API is not installed in the cluster"
            )
        );
    }

    #[test]
    fn pods_of_an_old_revision_mean_progressing() {
        let mut pods = all_pods(None);
        pods[2]["metadata"]["labels"][children::REVISION] = json!("r0");
        let s = compute(&service(), &pods, "2026-11-21T10:00:00Z");
        let progressing = find(&s, "Progressing");
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("True", "Updating")
        );
        assert_eq!(s.components["decode"].phase, ComponentPhase::Deploying);
    }

    #[test]
    fn two_revisions_side_by_side_are_separate_replicas() {
        let mut pods = all_pods(None);
        // Decode replica 0 of a second revision, beside the first one's.
        for worker in 0..4 {
            let mut pod = pod("decode", 0, worker, worker != 3);
            pod["metadata"]["labels"][children::REVISION] = json!("r2");
            pods.push(pod);
        }
        let decode: Vec<&Value> = pods
            .iter()
            .filter(|p| label(p, children::ROLE_NAME) == Some("decode"))
            .collect();
        assert_eq!(
            ready_replicas(&decode, 4),
            2,
            "r1's two replicas; r2's replica 0 is not whole, and does not spoil r1's"
        );
        let both = status(
            &service(),
            &Observed {
                pods: &from_json_all(&pods),
                router: None,
                revisions: &["r1", "r2"],
                problems: &[],
                ..Default::default()
            },
            &time("2026-11-21T10:00:00Z"),
        );
        assert_eq!(find(&both, "Progressing").status, "False");
        let any = status(
            &service(),
            &Observed {
                pods: &from_json_all(&pods),
                router: None,
                revisions: &[],
                problems: &[],
                ..Default::default()
            },
            &time("2026-11-21T10:00:00Z"),
        );
        assert_eq!(
            find(&any, "Progressing").status,
            "False",
            "no revision is outdated when any may run"
        );
        let only_r1 = compute(&service(), &pods, "2026-11-21T10:00:00Z");
        assert_eq!(find(&only_r1, "Progressing").reason, "Updating");
    }

    #[test]
    fn the_upgrade_is_reported_whole_so_a_merge_patch_clears_what_went() {
        let mut s = InferenceServiceStatus::default();
        assert_eq!(reported(&s)["upgrade"], Value::Null);
        s.upgrade = Some(crate::api::inference_service::UpgradeStatus {
            active: Some(RevisionStatus {
                revision: "r2".into(),
                target_capacity: 100,
                traffic_routed_percent: 100,
                last_traffic_move_time: None,
            }),
            pending: None,
        });
        assert_eq!(
            reported(&s)["upgrade"],
            serde_json::json!({"active": {"revision": "r2", "targetCapacity": 100,
                "trafficRoutedPercent": 100, "lastTrafficMoveTime": null}, "pending": null})
        );
    }

    #[test]
    fn the_router_is_ready_when_its_deployment_is() {
        let mut value = serde_json::to_value(service()).unwrap();
        value["spec"]["roles"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "router", "componentType": "router", "replicas": 2}));
        let s: InferenceService = serde_json::from_value(value).unwrap();
        let pods = all_pods(None);
        let deployment = json!({"status": {"replicas": 2, "readyReplicas": 1}});
        let partial = status(
            &s,
            &Observed {
                pods: &from_json_all(&pods),
                router: Some(&deployment),
                revisions: &["r1"],
                problems: &[],
                ..Default::default()
            },
            &time("2026-11-21T10:00:00Z"),
        );
        assert_eq!(
            partial.components["router"].phase,
            ComponentPhase::Deploying
        );
        assert_eq!(
            partial.ready.as_deref(),
            Some("3/3"),
            "the router does not count as model replicas"
        );
        assert_eq!(find(&partial, "Ready").status, "False");
        let deployment = json!({"status": {"readyReplicas": 2}});
        let full = status(
            &s,
            &Observed {
                pods: &from_json_all(&pods),
                router: Some(&deployment),
                revisions: &["r1"],
                problems: &[],
                ..Default::default()
            },
            &time("2026-11-21T10:00:00Z"),
        );
        assert_eq!(find(&full, "Ready").status, "True");
    }

    #[test]
    fn last_update_time_moves_only_when_the_component_changes() {
        let then = time("2026-11-21T10:00:00Z");
        let now = time("2026-11-21T10:05:00Z");
        let status = ComponentStatus {
            ready_replicas: 2,
            desired_replicas: 2,
            ..ComponentStatus::default()
        };
        let before = ComponentStatus {
            last_update_time: Some(then.clone()),
            ..status.clone()
        };
        assert_eq!(last_update_time(Some(&before), &status, &now), Some(then));
        let changed = ComponentStatus {
            ready_replicas: 1,
            ..status.clone()
        };
        assert_eq!(
            last_update_time(Some(&before), &changed, &now),
            Some(now.clone())
        );
        assert_eq!(last_update_time(None, &status, &now), Some(now));
    }

    /// What becomes of one replica in a generated world.
    #[derive(Clone, Copy, Debug)]
    enum Fate {
        Ready,
        Loading,
        Gone,
        Unschedulable,
        Crashing,
    }

    fn fate() -> impl proptest::strategy::Strategy<Value = Fate> {
        proptest::prop_oneof![
            proptest::strategy::Just(Fate::Ready),
            proptest::strategy::Just(Fate::Loading),
            proptest::strategy::Just(Fate::Gone),
            proptest::strategy::Just(Fate::Unschedulable),
            proptest::strategy::Just(Fate::Crashing),
        ]
    }

    /// The pods of prefill replica 0 and decode replicas 0..3, each replica
    /// as its fate says.
    fn world_of(fates: &[Fate; 4]) -> Vec<Value> {
        let replicas = [
            ("prefill", 0, 2),
            ("decode", 0, 4),
            ("decode", 1, 4),
            ("decode", 2, 4),
        ];
        let mut pods = Vec::new();
        for ((role, index, nodes), fate) in replicas.into_iter().zip(fates) {
            for worker in 0..nodes {
                let mut p = pod(role, index, worker, matches!(fate, Fate::Ready));
                match fate {
                    Fate::Ready | Fate::Loading => {}
                    Fate::Gone => continue,
                    Fate::Unschedulable => {
                        p["spec"] = json!({});
                        p["status"] =
                            json!({"phase": "Pending", "conditions": [unschedulable_condition()]});
                    }
                    Fate::Crashing => {
                        p["status"]["containerStatuses"] = json!([{"name": "vllm", "restartCount": 5,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
                    }
                }
                pods.push(p);
            }
        }
        pods
    }

    proptest::proptest! {
        /// After any history (world `a`, then `b`), a reconcile of `b`
        /// again gives the very same status, times included; and a role
        /// loses replicas only when it has fewer ready than it had.
        #[test]
        fn the_same_world_gives_the_same_status(
            a in proptest::array::uniform4(fate()),
            b in proptest::array::uniform4(fate()),
            desired in 1..=3i32,
        ) {
            let mut s = decode_at(desired);
            let first = compute(&s, &world_of(&a), "2026-11-21T10:00:00Z");
            s.status = Some(first.clone());
            let second = compute(&s, &world_of(&b), "2026-11-21T10:01:00Z");
            s.status = Some(second.clone());
            let third = compute(&s, &world_of(&b), "2026-11-21T10:02:00Z");
            proptest::prop_assert_eq!(&third, &second);
            let (before, after) = (&first.components["decode"], &second.components["decode"]);
            if after.ready_replicas >= before.ready_replicas {
                proptest::prop_assert_eq!(after.lost_replicas, 0);
            }
            if after.lost_replicas > 0 {
                proptest::prop_assert_eq!(before.phase, ComponentPhase::Running);
                proptest::prop_assert_eq!(find(&second, DEGRADED).status.as_str(), "True");
            }
        }
    }
}
