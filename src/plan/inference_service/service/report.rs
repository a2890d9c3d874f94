//! The last step: the status the world shows and the Events that say what
//! moved (a rollout's steps, a role's health, the pace of a RollingUpdate).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Plan;
use super::world::World;
use crate::api::ScaleView;
use crate::api::inference_service::{
    InferenceService, InferenceServiceStatus, ScaleViewLock, UpgradeType,
};
use crate::plan::inference_service::rollout::{self, Rollout};
use crate::plan::inference_service::status::{self, Observed};
use crate::plan::inference_service::{dependencies, drain, pacing, pod_groups, revision, router};
use crate::plan::scale_view;
use crate::plan::shared::child_kinds::{ChildKind, DEPLOYMENT, POD};
use crate::plan::shared::children;
use crate::plan::shared::reason::PROGRESS_DEADLINE_EXCEEDED;

/// The status of this pass, the Events about the service itself, and when
/// to look again even if nothing changes: the world as observed, then the
/// rollout's step, the dependencies, each role's health, a drain's end
/// and a RollingUpdate's pace.
pub(super) fn report(
    service: &InferenceService,
    world: &World<'_>,
    rollout: Option<Rollout>,
    (planned, problems): (&Plan, &[String]),
    now: &Time,
) -> (
    InferenceServiceStatus,
    Vec<rollout::Event>,
    Option<std::time::Duration>,
) {
    let mut status = observed_status(service, world, rollout.as_ref(), planned, problems, now);
    if let Some(rollout) = &rollout {
        report_rollout(service, rollout, &mut status, now);
    }
    let dependency_event = planned
        .dependencies
        .as_ref()
        .and_then(|decided| dependencies::report(service, decided, &mut status, now));
    let (mut events, mut requeue) = rollout.map_or_else(Default::default, |r| {
        (r.events, r.requeue.map(|d| d.unsigned_abs()))
    });
    events.extend(planned.events.iter().cloned());
    events.extend(role_events(service, &status));
    events.extend(dependency_event);
    for deadline in [planned.drain_deadline, planned.recovery_wake]
        .into_iter()
        .flatten()
    {
        let left = now.0.duration_until(deadline).unsigned_abs();
        requeue = Some(requeue.map_or(left, |r: std::time::Duration| r.min(left)));
    }
    if let Some(paced) = report_paced(service, &planned.paced, &mut status, now) {
        events.extend(paced.events);
        requeue = match (requeue, paced.requeue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    (status, events, requeue)
}

/// The status the world shows: the revisions that run, the revision new
/// replicas get, the router's endpoint picker, the problems, the drains and
/// the ScaleViews' locks that still hold.
pub(super) fn observed_status(
    service: &InferenceService,
    world: &World<'_>,
    rollout: Option<&Rollout>,
    planned: &Plan,
    problems: &[String],
    now: &Time,
) -> InferenceServiceStatus {
    let spec_revision = revision::spec_revision(&service.spec);
    let role_revisions = revision::role_revisions(&service.spec);
    let side_by_side = service.spec.upgrade_type().runs_revisions_side_by_side();
    let revisions: Vec<&str> = match (service.spec.upgrade_type(), rollout) {
        (UpgradeType::None, _) => Vec::new(),
        (UpgradeType::NewRevision | UpgradeType::IncrementalUpgrade, Some(rollout)) => {
            rollout.revisions()
        }
        (UpgradeType::NewRevision | UpgradeType::IncrementalUpgrade, None) => {
            vec![spec_revision.as_str()]
        }
        (UpgradeType::RollingUpdate, _) => role_revisions.values().map(String::as_str).collect(),
    };
    // The revision new replicas get: the role's own, or side by side the
    // spec's (service) revision.
    let update_revisions: BTreeMap<String, String> = if side_by_side {
        role_revisions
            .keys()
            .map(|role| (role.clone(), spec_revision.clone()))
            .collect()
    } else {
        role_revisions.clone()
    };
    // The router's status is its endpoint picker's; with revisions side by
    // side, the active revision's.
    let epp = match rollout.filter(|r| r.traffic.is_some()) {
        Some(rollout) => rollout.runs.first().map_or_else(
            || router::epp_name(children::service_name(service)),
            |run| router::revision_epp_name(children::service_name(service), &run.naming),
        ),
        None => router::epp_name(children::service_name(service)),
    };
    let router_deployment = world
        .children
        .iter()
        .find(|c| ChildKind::of(c) == Some(DEPLOYMENT) && c["metadata"]["name"] == epp.as_str());
    let side_by_side_upgrade = rollout.is_some_and(|r| r.runs.len() > 1);
    let changing = changing_roles(service, side_by_side_upgrade, &planned.paced);
    let observed = Observed {
        pods: world.pods,
        router: router_deployment,
        revisions: &revisions,
        problems,
        update_revisions,
        draining: planned.draining.clone(),
        marked: planned
            .desired
            .iter()
            .filter(|d| ChildKind::of(&d.object) == Some(POD) && drain::is_draining(&d.object))
            .filter_map(|d| d.object["metadata"]["name"].as_str())
            .collect(),
        changing,
        held: planned.held.clone(),
        kept_for_pair: planned
            .kept_for_pair
            .as_ref()
            .map(|k| (k.role.as_str(), k.why.as_str())),
        pod_groups: world
            .children
            .iter()
            .filter(|c| pod_groups::is_pod_group(c))
            .collect(),
    };
    let mut status = status::status(service, &observed, now);
    status.scale_views = live_scale_views(service, &status.scale_views, world.scale_views);
    status
}

/// The roles a planned change moves (so ready replicas they lose are not
/// lost, [`status::lost_replicas`]): with revisions side by side during an
/// upgrade (`side_by_side_upgrade`), every role; else those whose
/// RollingUpdate has replicas left to move or is halted.
pub(super) fn changing_roles(
    service: &InferenceService,
    side_by_side_upgrade: bool,
    paced: &BTreeMap<String, pacing::Paced>,
) -> BTreeSet<String> {
    service
        .spec
        .roles
        .iter()
        .filter(|role| {
            side_by_side_upgrade
                || paced
                    .get(&role.name)
                    .is_some_and(|p| p.in_progress || p.halted.is_some())
        })
        .map(|role| role.name.clone())
        .collect()
}

/// The Events of the roles' episodes, one when each begins and one when it
/// ends, from the previous status (the service's, as stored) and `status`,
/// so a reconcile of an unchanged world records none:
///
/// - Warning `Degraded` when a role turns degraded (a replica failing, or
///   ready replicas lost: [`status::lost_replicas`]), with why; Normal
///   `Recovered` when it is no longer (no replica failing, none lost).
/// - Warning `Unschedulable` when a replica of a role starts waiting for the
///   scheduler, with the first such pod and the scheduler's message; Normal
///   `Scheduled` when none waits any more. The closing Event is worth its
///   line: the Warning stays in `kubectl events` for its hour whatever
///   happens, and only the second says the wait is over and how long it
///   lasted.
///
/// Per role, not per service: a second role degrading while the first still
/// is gets its own Event.
pub(super) fn role_events(
    service: &InferenceService,
    status: &InferenceServiceStatus,
) -> Vec<rollout::Event> {
    let before = service.status.as_ref().map(|s| &s.components);
    let mut events = Vec::new();
    for role in service.spec.roles.iter().filter(|r| !r.is_router()) {
        let Some(now) = status.components.get(&role.name) else {
            continue;
        };
        let then = before
            .and_then(|c| c.get(&role.name))
            .cloned()
            .unwrap_or_default();
        let name = &role.name;
        if let (None, Some(why)) = (&then.kept_for_pair, &now.kept_for_pair) {
            events.push(rollout::Event {
                warning: false,
                reason: "KeptForPair",
                note: why.clone(),
            });
        }
        match (status::is_degraded(&then), status::degraded_because(now)) {
            (false, Some(why)) => events.push(rollout::Event {
                warning: true,
                reason: "Degraded",
                note: format!("role {name}: {why}"),
            }),
            (true, None) => events.push(rollout::Event {
                warning: false,
                reason: "Recovered",
                note: format!(
                    "role {name}: no replica is failing or lost any more ({}/{} replicas ready)",
                    now.ready_replicas, now.desired_replicas
                ),
            }),
            _ => {}
        }
        match (
            then.unschedulable_replicas > 0,
            now.unschedulable_reason.as_deref(),
        ) {
            (false, Some(why)) => events.push(rollout::Event {
                warning: true,
                reason: status::UNSCHEDULABLE,
                note: format!(
                    "role {name}: {} replica(s) waiting for the scheduler: {why}",
                    now.unschedulable_replicas
                ),
            }),
            (true, None) => events.push(rollout::Event {
                warning: false,
                reason: "Scheduled",
                note: format!("role {name}: no replica waits for the scheduler any more"),
            }),
            _ => {}
        }
    }
    events.extend(zero_event(service, status));
    events
}

/// One Event when the service reaches zero (`ScaledToZero`, the Ready
/// condition's message as its note) and one when it leaves it
/// (`LeavingZero`, with the replicas each serving role runs).
fn zero_event(
    service: &InferenceService,
    status: &InferenceServiceStatus,
) -> Option<rollout::Event> {
    let at_zero = |conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]| {
        conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .filter(|c| c.reason == status::SCALED_TO_ZERO)
            .map(|c| c.message.clone())
    };
    let then = service.status.as_ref().and_then(|s| at_zero(&s.conditions));
    match (then, at_zero(&status.conditions)) {
        (None, Some(message)) => Some(rollout::Event {
            warning: false,
            reason: status::SCALED_TO_ZERO,
            note: message,
        }),
        (Some(_), None) if !crate::plan::inference_service::pair::at_zero(&service.spec) => {
            let asked: Vec<String> = service
                .spec
                .roles
                .iter()
                .filter(|r| !r.is_router())
                .map(|r| format!("{} {}", r.name, r.replicas()))
                .collect();
            Some(rollout::Event {
                warning: false,
                reason: "LeavingZero",
                note: format!("the service leaves zero: {}", asked.join(", ")),
            })
        }
        _ => None,
    }
}

/// Puts the rollout's `status.upgrade` and its UpgradeInProgress and
/// RollbackInProgress conditions into `status` (the strategies without them
/// drop both).
pub(super) fn report_rollout(
    service: &InferenceService,
    rollout: &Rollout,
    status: &mut InferenceServiceStatus,
    now: &Time,
) {
    let previous = service
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    status.upgrade = rollout.upgrade.clone();
    let moving = rollout
        .upgrade
        .as_ref()
        .and_then(|u| u.pending.as_ref())
        .is_some();
    let replaced = |type_: &str| {
        [rollout::UPGRADE_IN_PROGRESS, rollout::ROLLBACK_IN_PROGRESS].contains(&type_)
            || moving && type_ == "Progressing"
    };
    status.conditions.retain(|c| !replaced(&c.type_));
    if moving {
        // Both revisions' pods are expected, so none is outdated; the service
        // is progressing all the same while capacity and traffic move.
        status.conditions.push(status::condition(
            previous,
            "Progressing",
            true,
            "Upgrading",
            "capacity and traffic are moving between revisions (see UpgradeInProgress and RollbackInProgress)".to_owned(),
            service.metadata.generation,
            now,
        ));
    }
    for report in &rollout.conditions {
        status.conditions.push(status::condition(
            previous,
            report.type_,
            report.is_true,
            report.reason,
            report.message.clone(),
            service.metadata.generation,
            now,
        ));
    }
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// How soon to look again while a RollingUpdate waits for replicas to
/// become ready (pods may send no event the controller watches).
pub(super) const READINESS_POLL: std::time::Duration = std::time::Duration::from_secs(30);

/// What a RollingUpdate adds to a reconcile: Events and when to look again.
pub(super) struct PacedReport {
    events: Vec<rollout::Event>,
    requeue: Option<std::time::Duration>,
}

/// Puts the RollingUpdate's state into the Progressing condition: False with
/// ProgressDeadlineExceeded while a role is halted (and an Event the first
/// time), True with RollingUpdate and what it waits for while replicas move.
/// None when no role is moving.
pub(super) fn report_paced(
    service: &InferenceService,
    paced: &BTreeMap<String, pacing::Paced>,
    status: &mut InferenceServiceStatus,
    now: &Time,
) -> Option<PacedReport> {
    if paced.is_empty() {
        return None;
    }
    let previous = service
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let halted: Vec<&str> = paced.values().filter_map(|p| p.halted.as_deref()).collect();
    let waiting: Vec<&str> = paced
        .values()
        .filter_map(|p| p.waiting.as_deref())
        .collect();
    let mut events = Vec::new();
    let condition = if halted.is_empty() {
        if waiting.is_empty() {
            None
        } else {
            Some(status::condition(
                previous,
                "Progressing",
                true,
                "RollingUpdate",
                waiting.join("; "),
                service.metadata.generation,
                now,
            ))
        }
    } else {
        let message = halted.join("; ");
        let already = previous.iter().any(|c| {
            c.type_ == "Progressing"
                && c.reason == PROGRESS_DEADLINE_EXCEEDED
                && c.message == message
        });
        if !already {
            // A halted rollout needs someone to look.
            events.push(rollout::Event {
                warning: true,
                reason: PROGRESS_DEADLINE_EXCEEDED,
                note: message.clone(),
            });
        }
        Some(status::condition(
            previous,
            "Progressing",
            false,
            PROGRESS_DEADLINE_EXCEEDED,
            message,
            service.metadata.generation,
            now,
        ))
    };
    if let Some(condition) = condition {
        status.conditions.retain(|c| c.type_ != "Progressing");
        status.conditions.push(condition);
        status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    }
    let moving = paced.values().any(|p| p.in_progress && p.halted.is_none());
    let deadline = paced
        .values()
        .filter_map(|p| p.deadline)
        .min()
        .map(|d| d.duration_since(now.0).unsigned_abs());
    let requeue = match (moving, deadline) {
        (false, _) => None,
        (true, Some(d)) => Some(d.clamp(std::time::Duration::from_secs(1), READINESS_POLL)),
        (true, None) => Some(READINESS_POLL),
    };
    Some(PacedReport { events, requeue })
}

/// The ScaleView locks of `service` whose views still exist (DESIGN.md §1.3):
/// dropping the others on every reconcile means no crash of the ScaleView
/// controller can leave a role locked forever.
pub(super) fn live_scale_views(
    service: &InferenceService,
    locks: &[ScaleViewLock],
    views: &[ScaleView],
) -> Vec<ScaleViewLock> {
    scale_view::live_locks(children::service_name(service), locks, views)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn roles_under_a_rollout_or_an_upgrade_are_changing() {
        let service: InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "default", "uid": "u"},
            "spec": {"roles": [
                {"name": "inference", "componentType": "worker", "replicas": 2,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
                ]}
        }))
        .unwrap();
        let none = BTreeMap::new();
        assert!(changing_roles(&service, false, &none).is_empty());
        assert_eq!(
            changing_roles(&service, true, &none),
            BTreeSet::from(["inference".to_owned()])
        );
        let moving = pacing::Paced {
            in_progress: true,
            ..Default::default()
        };
        let halted = pacing::Paced {
            halted: Some("stuck".to_owned()),
            ..Default::default()
        };
        for paced in [moving, halted] {
            let paced = BTreeMap::from([("inference".to_owned(), paced)]);
            assert_eq!(changing_roles(&service, false, &paced).len(), 1);
        }
        let done = BTreeMap::from([("inference".to_owned(), pacing::Paced::default())]);
        assert!(
            changing_roles(&service, false, &done).is_empty(),
            "nothing left to move"
        );
    }

    #[test]
    fn a_crash_loop_is_one_event_per_episode() {
        let mut cluster = Cluster::new(&[]);
        let mut service = scaled(2, "Ordered", None);
        cluster.pass(&service, 0);
        let crash = |cluster: &mut Cluster, restarts: i64, ready: bool| {
            let pod = cluster
                .pods
                .iter_mut()
                .find(|p| p["metadata"]["name"] == "qwen-inference-1-0")
                .unwrap();
            pod["status"]["conditions"][0]["status"] = json!(if ready { "True" } else { "False" });
            pod["status"]["containerStatuses"] = json!([{"name": "vllm", "restartCount": restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
        };
        let mut episodes = Vec::new();
        for (at, restarts, ready) in [
            (10, 3, false),
            (20, 4, false),
            (30, 7, false),
            (40, 7, true),
            (50, 8, false),
        ] {
            crash(&mut cluster, restarts, ready);
            let pass = cluster.pass(&service, at);
            episodes.extend(
                pass.events
                    .iter()
                    .filter(|e| e.reason == "Degraded")
                    .map(|e| (at, e.note.clone())),
            );
            let degraded = pass
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == status::DEGRADED)
                .unwrap();
            assert_eq!(
                degraded.status,
                if ready { "False" } else { "True" },
                "at {at}"
            );
            service.status = Some(pass.status);
        }
        let note =
            "role inference: replica 1: pod qwen-inference-1-0 container vllm CrashLoopBackOff";
        assert_eq!(episodes, [(10, note.to_owned()), (50, note.to_owned())]);
    }

    #[test]
    fn a_replica_lost_with_its_node_is_one_degraded_event_then_one_recovered() {
        let mut cluster = Cluster::new(&[]);
        let mut service = scaled(2, "Ordered", None);
        assert_eq!(step(&mut cluster, &mut service, 0), []);
        assert_eq!(
            step(&mut cluster, &mut service, 10),
            [],
            "whole and settled"
        );

        // The node goes, and replica 1's pod with it; the spec is unchanged.
        cluster
            .pods
            .retain(|p| p["metadata"]["name"] != "qwen-inference-1-0");
        let note = "role inference: 1/2 replicas ready, 1 lost since every replica was ready (1 of 2 pods ready)";
        assert_eq!(
            step(&mut cluster, &mut service, 20),
            [("Degraded", true, note.to_owned())]
        );
        let degraded = |service: &InferenceService| {
            let status = service.status.as_ref().unwrap();
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == status::DEGRADED)
                .unwrap();
            (c.status.clone(), c.reason.clone())
        };
        assert_eq!(
            degraded(&service),
            ("True".into(), status::REPLICAS_UNAVAILABLE.into())
        );
        let before = service.status.clone();
        assert_eq!(
            step(&mut cluster, &mut service, 30),
            [],
            "the same world: no Event"
        );
        assert_eq!(service.status, before, "and the same status");

        // LeaderWorkerSet makes the pod again on another node; it loads.
        let mut back = pod(1, "0", false);
        back["metadata"]["labels"] = cluster.pods[0]["metadata"]["labels"].clone();
        back["metadata"]["labels"][children::REPLICA_INDEX] = json!("1");
        back["metadata"]["name"] = json!("qwen-inference-1-0");
        cluster.pods.push(back);
        assert_eq!(step(&mut cluster, &mut service, 40), [], "still short");
        pod_named(&mut cluster, "qwen-inference-1-0")["status"]["conditions"][0]["status"] =
            json!("True");
        assert_eq!(
            step(&mut cluster, &mut service, 50),
            [(
                "Recovered",
                false,
                "role inference: no replica is failing or lost any more (2/2 replicas ready)"
                    .to_owned()
            )]
        );
        assert_eq!(
            degraded(&service),
            ("False".into(), "ReplicasHealthy".into())
        );
        assert_eq!(step(&mut cluster, &mut service, 60), []);
    }

    #[test]
    fn a_replica_waiting_for_the_scheduler_is_one_warning_then_one_scheduled() {
        let mut cluster = Cluster::new(&[]);
        let mut service = scaled(2, "Ordered", None);
        step(&mut cluster, &mut service, 0);
        let mut three = scaled(3, "Ordered", None);
        three.status = service.status.clone();
        assert_eq!(step(&mut cluster, &mut three, 10), []);
        // The new replica's pod: no node has a GPU free.
        let message = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.";
        {
            let pod = pod_named(&mut cluster, "qwen-inference-2-0");
            pod["status"] = json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]});
        }
        let note = format!(
            "role inference: 1 replica(s) waiting for the scheduler: replica 2: pod qwen-inference-2-0 unschedulable: {message}"
        );
        assert_eq!(
            step(&mut cluster, &mut three, 20),
            [(status::UNSCHEDULABLE, true, note)],
            "a scale-up waiting is not degraded"
        );
        let ready = |service: &InferenceService| {
            let status = service.status.as_ref().unwrap();
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap();
            (c.reason.clone(), c.message.clone())
        };
        assert_eq!(ready(&three).0, status::UNSCHEDULABLE);
        assert!(ready(&three).1.contains(message), "{:?}", ready(&three));
        assert_eq!(
            step(&mut cluster, &mut three, 30),
            [],
            "one Event per episode"
        );
        {
            let pod = pod_named(&mut cluster, "qwen-inference-2-0");
            pod["spec"]["nodeName"] = json!("gpu-9");
            pod["status"] =
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        }
        assert_eq!(
            step(&mut cluster, &mut three, 40),
            [(
                "Scheduled",
                false,
                "role inference: no replica waits for the scheduler any more".to_owned()
            )]
        );
        assert_eq!(ready(&three).0, "AllComponentsRunning");
    }

    #[test]
    fn planned_scale_up_rollout_and_drain_are_not_degraded() {
        let mut cluster = Cluster::new(&[]);
        cluster.loading = true;
        let mut service = scaled(2, "Ordered", Some(30));
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut t = 0;
        // Passes until nothing is left to do; a new pod is not ready for one
        // pass, then ready.
        let mut settle = |cluster: &mut Cluster, service: &mut InferenceService, t: &mut i64| {
            for _ in 0..40 {
                for pod in &mut cluster.pods {
                    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
                    let revision = pod["metadata"]["labels"][children::REVISION].clone();
                    if !seen.insert(format!("{name}@{revision}")) {
                        pod["status"]["conditions"][0]["status"] = json!("True");
                    }
                }
                let pass = cluster.pass(service, *t);
                assert_eq!(episodes(&pass), [], "at {t}");
                for (role, c) in &pass.status.components {
                    assert_eq!(c.lost_replicas, 0, "role {role} at {t}");
                }
                let quiet =
                    pass.apply.is_empty() && pass.delete.is_empty() && pass.requeue.is_none();
                let whole = pass
                    .status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                service.status = Some(pass.status);
                *t += 10;
                if quiet && whole {
                    return;
                }
            }
            panic!("settles");
        };
        settle(&mut cluster, &mut service, &mut t);
        // Scale-up.
        let mut next = scaled(3, "Ordered", Some(30));
        next.status = service.status.take();
        settle(&mut cluster, &mut next, &mut t);
        // A RollingUpdate, one replica at a time, replaced at once (no
        // drain): the replaced replica's new pod loads in its place.
        let mut value = serde_json::to_value(&next).unwrap();
        value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("v2");
        value["spec"]["roles"][0]["drain"] = json!({"seconds": 0});
        let mut rolled: InferenceService = serde_json::from_value(value).unwrap();
        settle(&mut cluster, &mut rolled, &mut t);
        assert!(
            cluster
                .pods
                .iter()
                .all(|p| p["metadata"]["labels"][children::REVISION]
                    == cluster.pods[0]["metadata"]["labels"][children::REVISION]),
            "rolled out"
        );
        // A scale-down with a drain.
        let mut value = serde_json::to_value(&rolled).unwrap();
        value["spec"]["roles"][0]["replicas"] = json!(2);
        value["spec"]["roles"][0]["drain"] = json!({"seconds": 30});
        let mut down: InferenceService = serde_json::from_value(value).unwrap();
        settle(&mut cluster, &mut down, &mut t);
        assert_eq!(cluster.lws().len(), 2);
    }
}
