//! The fourth step: the plan against the world, as the writes it takes
//! (applies of what differs, deletions of what the plan neither wants nor
//! keeps) and why each is made.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::Plan;
use super::world::{Index, RoleReplicas, World, identity, key, kind_name, role_replicas};
use crate::api::inference_service::{InferenceService, Role, RoleScaleDownPolicy};
use crate::plan::inference_service::rollout::{self, Members, Rollout};
use crate::plan::inference_service::{disruption, gang, pod_groups, revision, upgrade};
use crate::plan::shared::child_kinds::{ChildKind, LEADER_WORKER_SET};
use crate::plan::shared::children;
use crate::plan::shared::pod::Pod;
use crate::plan::shared::write::{Apply, Delete, change_of, stamp};
use crate::plan::victims;

/// The planned objects that differ from what the world has (a drain applies
/// to pods, which are not children); kinds whose API is missing are left out.
pub(super) fn applies(service: &InferenceService, world: &Index<'_>, planned: &Plan) -> Vec<Apply> {
    let mut apply = Vec::new();
    for planned in &planned.desired {
        let object = stamp(planned.object.clone());
        let kind = object["kind"].as_str().unwrap_or_default();
        if world.unavailable.contains(kind_name(&object)) {
            continue;
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        // A pod is compared as what Tandem writes on it.
        let pod = (kind == "Pod")
            .then(|| world.pod(name).map(Pod::observed))
            .flatten();
        let current = match kind {
            "Pod" => pod.as_ref(),
            _ => world.child(identity(&object)),
        };
        let Some(change) = change_of(&object, current) else {
            continue;
        };
        let note = change.note(kind, name, &planned.why);
        let replica = crate::plan::shared::decision::service_replica(service, &object);
        apply.push(Apply {
            object,
            change,
            note,
            replica,
        });
    }
    apply
}

/// The children the plan neither wants nor keeps, with why each goes; what
/// is already being deleted is not deleted (and announced) again.
pub(super) fn deletions(
    service: &InferenceService,
    world: &Index<'_>,
    rollout: Option<&Rollout>,
    planned: &Plan,
) -> Vec<Delete> {
    let mut kept: BTreeSet<(String, String, String)> =
        planned.desired.iter().map(|d| key(&d.object)).collect();
    kept.extend(planned.kept.iter().cloned());
    let mut delete = Vec::new();
    let mut standings = Standings::default();
    for child in world
        .children
        .iter()
        .filter(|c| !kept.contains(&key(c)))
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
    {
        let kind = child["kind"].as_str().unwrap_or("object");
        let name = child["metadata"]["name"].as_str().unwrap_or_default();
        let why = match (rollout, planned.delete_notes.get(name)) {
            (_, Some(note)) => note.clone(),
            (Some(rollout), None) => why_gone(service, rollout, child, world, &mut standings),
            (None, None) => why_delete_among(service, child, world, &mut standings),
        };
        delete.push(Delete {
            object: child.clone(),
            note: format!("{kind} {name} deleted: {why}"),
            replica: crate::plan::shared::decision::service_replica(service, child),
        });
    }
    delete
}

/// Why an object the service has is no longer wanted, for the Event. A
/// replica removed by Binpack names its deletion cost and the costs it beat.
pub fn why_delete(service: &InferenceService, object: &Value, world: &World<'_>) -> String {
    why_delete_among(
        service,
        object,
        &Index::of(world),
        &mut Standings::default(),
    )
}

/// Where each role's replicas stand under Binpack (their costs, and which
/// the policy keeps), worked out at most once per role for all the notes of
/// one pass: a scale-down by D replicas of a role read its replicas and pods
/// D times (issue 51).
#[derive(Default)]
pub(super) struct Standings {
    by_role: BTreeMap<String, (RoleReplicas, BTreeSet<u32>)>,
}

impl Standings {
    fn of(&mut self, role: &Role, world: &Index<'_>) -> &(RoleReplicas, BTreeSet<u32>) {
        self.by_role.entry(role.name.clone()).or_insert_with(|| {
            let seen = role_replicas(
                role,
                world.role_leader_worker_sets(&role.name),
                world.replica_pods(),
            );
            let desired = usize::try_from(role.replicas()).unwrap_or(0);
            let kept = victims::keep(
                &seen.existing,
                &seen.deleting,
                desired,
                RoleScaleDownPolicy::Binpack,
                &seen.candidates,
            );
            (seen, kept)
        })
    }
}

/// [`why_delete`], with the standings of the pass's other notes.
pub(super) fn why_delete_among(
    service: &InferenceService,
    object: &Value,
    world: &Index<'_>,
    standings: &mut Standings,
) -> String {
    let labels = &object["metadata"]["labels"];
    let kind = object["kind"].as_str().unwrap_or("object");
    if pod_groups::is_pod_group(object) {
        return if gang::scheduling(&service.spec).backend == Some(gang::Backend::Kubernetes) {
            "no pod of the service names this PodGroup any more, and no replica will (its replica \
             is gone, or was replaced by one in another group)"
                .to_owned()
        } else {
            "the service is no longer gang-scheduled with Kubernetes' PodGroups, and no pod \
             names this one any more"
                .to_owned()
        };
    }
    match (labels[children::ROLE_NAME].as_str(), kind) {
        (Some(role_name), "LeaderWorkerSet") => {
            let Some(role) = service.spec.roles.iter().find(|r| r.name == role_name) else {
                return format!("role {role_name} was removed from the spec");
            };
            let index: Option<u32> = labels[children::REPLICA_INDEX].as_str().and_then(|i| i.parse().ok());
            let scaled = format!("role {role_name} is scaled to {} replica(s)", role.replicas());
            match (role.scale_down_policy(), index) {
                (RoleScaleDownPolicy::Binpack, Some(index)) => {
                    let (seen, kept) = standings.of(role, world);
                    let score = |i: u32| {
                        seen.candidates.get(&i).map_or("no pods".to_owned(), |c| {
                            format!("cost {}{}", c.cost, if c.running { "" } else { ", not running" })
                        })
                    };
                    let beaten: Vec<String> = kept.iter().map(|&i| format!("{i} ({})", score(i))).collect();
                    format!(
                        "{scaled}; Binpack removes replica {index} ({}) before the replicas it keeps: {}",
                        score(index),
                        if beaten.is_empty() { "none".to_owned() } else { beaten.join(", ") }
                    )
                }
                (_, index) => format!(
                    "{scaled}; replica {} is not kept (Ordered: the highest indices go first)",
                    index.map_or("?".to_owned(), |i| i.to_string())
                ),
            }
        }
        (_, "Gateway" | "HTTPRoute")
            if !(service.spec.upgrade_type().runs_revisions_side_by_side()
                || kind == "HTTPRoute" && service.spec.roles.iter().any(|r| r.is_router())) =>
        {
            format!(
                "spec.upgradeStrategy.type is {:?}, which moves no traffic through a Gateway",
                service.spec.upgrade_type()
            )
        }
        (_, "Service" | "InferencePool" | "Deployment" | "ConfigMap" | revision::CONTROLLER_REVISION_KIND)
            if labels[children::REVISION].is_string() =>
        {
            format!(
                "revision {} no longer runs",
                labels[children::REVISION].as_str().unwrap_or_default()
            )
        }
        (_, "HTTPRoute") if service.spec.roles.iter().any(|r| r.is_router()) => {
            "the router role has no httproute any more".to_owned()
        }
        (_, "ServiceAccount" | "RoleBinding" | "ConfigMap" | "Deployment" | "Service" | "InferencePool" | "HTTPRoute") => {
            "the service has no router role any more".to_owned()
        }
        (Some(role), disruption::KIND) => {
            format!("role {role} is no longer a serving role of the service")
        }
        (_, gang::POD_GROUP_KIND) => {
            "gang scheduling is no longer needed (no prefill/decode pair, no multi-node role, and no volcano schedulerName)".to_owned()
        }
        _ => format!("the spec no longer needs this {kind}"),
    }
}

/// Why a child goes, for the Event: a revision's replica, Service or record
/// in the words of the upgrade; anything else as [`why_delete`] says.
pub(super) fn why_gone(
    service: &InferenceService,
    rollout: &Rollout,
    child: &Value,
    world: &Index<'_>,
    standings: &mut Standings,
) -> String {
    let labels = &child["metadata"]["labels"];
    let side_by_side = rollout.runs.iter().any(|r| r.members == Members::Labelled);
    let is_replica = ChildKind::of(child) == Some(LEADER_WORKER_SET);
    let Some(child_revision) = labels[children::REVISION]
        .as_str()
        .filter(|_| side_by_side && is_replica)
    else {
        return why_delete_among(service, child, world, standings);
    };
    let role = labels[children::ROLE_NAME].as_str().unwrap_or_default();
    let index = labels[children::REPLICA_INDEX].as_str().unwrap_or("?");
    match rollout.runs.iter().find(|r| r.revision == child_revision) {
        Some(run) => {
            let full = run
                .spec
                .as_ref()
                .unwrap_or(&service.spec)
                .roles
                .iter()
                .find(|r| r.name == role)
                .map_or(0, |r| rollout::desired_replicas(service, r));
            format!(
                "revision {child_revision} runs at {}% capacity: role {role} keeps {} of {full} replica(s), and replica {index} is not among them",
                run.capacity,
                upgrade::replicas_for(full, run.capacity)
            )
        }
        None => format!(
            "revision {child_revision} no longer runs (running: {})",
            rollout.revisions().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::*;
    use serde_json::json;

    #[test]
    fn binpack_removes_the_cheapest_replicas_and_says_what_they_beat() {
        let mut value = serde_json::to_value(service(4)).unwrap();
        value["spec"]["roles"][0]["scaleDown"] = json!({"policy": "Binpack"});
        let four: InferenceService = serde_json::from_value(value.clone()).unwrap();
        let lws: Vec<Value> = desired(&four, &world(&[], &[]), &Options::default(), &epoch())
            .unwrap()
            .into_iter()
            .map(|d| d.object)
            .collect();
        let pods = [
            pod(0, "100", true),
            pod(1, "50", true),
            pod(2, "0", true),
            pod(3, "75", true),
        ];
        value["spec"]["roles"][0]["replicas"] = json!(2);
        let two: InferenceService = serde_json::from_value(value).unwrap();
        let kept = desired(&two, &world(&lws, &pods), &Options::default(), &epoch()).unwrap();
        assert_eq!(
            names(&kept),
            ["qwen-inference-0", "qwen-inference-3"],
            "costs 100/50/0/75 keep 0 and 3"
        );
        assert_eq!(
            why_delete(&two, &lws[2], &world(&lws, &pods)),
            "role inference is scaled to 2 replica(s); Binpack removes replica 2 (cost 0) before the replicas it keeps: 0 (cost 100), 3 (cost 75)"
        );
    }
}
