//! The first step of a service's plan: the world it is planned from (its
//! children, its pods, what the cluster serves and has installed, its
//! views), indexed once ([`Index`]), and the lookups every later step reads
//! it through.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;

use serde_json::Value;

use crate::api::ScaleView;
use crate::api::inference_service::Role;
use crate::plan::inference_service::drain::{ReplicaPods, RevisionPods};
use crate::plan::inference_service::revision;
use crate::plan::inference_service::rollout::{Members, Run, Seen};
use crate::plan::shared::child_kinds::{ChildKind, LEADER_WORKER_SET};
use crate::plan::shared::children;
use crate::plan::shared::installed::Installed;
use crate::plan::shared::pod::Pod;
use crate::plan::victims;

/// What a service's children and pods look like now.
#[derive(Clone, Copy, Debug)]
pub struct World<'a> {
    /// The children this service owns (see [`children::owns`]).
    pub children: &'a [Value],
    /// The service's pods.
    pub pods: &'a [Pod],
    /// Kinds whose API is not installed in the cluster.
    pub unavailable: &'a BTreeSet<String>,
    /// What the cluster has of the projects Tandem writes objects of.
    pub installed: &'a Installed,
    /// The ScaleViews named by the service's locks (or more): lock entries of
    /// views not among them are stale and dropped (see [`live_scale_views`]).
    pub scale_views: &'a [ScaleView],
}

/// The world indexed once, at the start of a pass: the runs, drains,
/// victims, pacing and the diff look a revision's LeaderWorkerSets, a
/// replica's pods, a child or a pod up here, at the cost of what they ask
/// for, instead of each scanning the world again (a 1 000-replica service
/// has 1 000 LeaderWorkerSets and as many pods). It reads as the world it
/// indexes (`Deref`).
pub struct Index<'a> {
    world: &'a World<'a>,
    /// The service's LeaderWorkerSets, in the world's order…
    leader_worker_sets: Vec<&'a Value>,
    /// …those of each role, all revisions together…
    role_leader_worker_sets: HashMap<&'a str, Vec<&'a Value>>,
    /// …and those of each revision and role, by their labels.
    leader_worker_sets_of: HashMap<&'a str, HashMap<&'a str, Vec<&'a Value>>>,
    /// Every pod by role and replica, all revisions together…
    replica_pods: ReplicaPods<'a>,
    /// …and the pods of each revision, by role and replica.
    replica_pods_of: RevisionPods<'a>,
    /// The children by apiVersion, kind and name (the first of each).
    by_identity: HashMap<(&'a str, &'a str, &'a str), &'a Value>,
    /// The pods by name.
    pods_by_name: HashMap<&'a str, &'a Pod>,
    /// The PodGroups the pods name.
    named_pod_groups: BTreeSet<&'a str>,
}

impl<'a> Index<'a> {
    /// Indexes `world`, in one pass over its children and one over its pods.
    pub fn of(world: &'a World<'a>) -> Index<'a> {
        let mut leader_worker_sets = Vec::new();
        let mut role_leader_worker_sets: HashMap<&str, Vec<&Value>> = HashMap::new();
        let mut leader_worker_sets_of: HashMap<&str, HashMap<&str, Vec<&Value>>> = HashMap::new();
        let mut by_identity = HashMap::with_capacity(world.children.len());
        for child in world.children {
            by_identity.entry(identity(child)).or_insert(child);
            if ChildKind::of(child) != Some(LEADER_WORKER_SET) {
                continue;
            }
            leader_worker_sets.push(child);
            let Some(role) = child["metadata"]["labels"][children::ROLE_NAME].as_str() else {
                continue;
            };
            role_leader_worker_sets.entry(role).or_default().push(child);
            if let Some(revision) = revision::of(child) {
                leader_worker_sets_of
                    .entry(revision)
                    .or_default()
                    .entry(role)
                    .or_default()
                    .push(child);
            }
        }
        let mut pods_by_name = HashMap::with_capacity(world.pods.len());
        for pod in world.pods {
            pods_by_name.entry(pod.name.as_str()).or_insert(pod);
        }
        Index {
            world,
            leader_worker_sets,
            role_leader_worker_sets,
            leader_worker_sets_of,
            replica_pods: ReplicaPods::new(world.pods),
            replica_pods_of: RevisionPods::new(world.pods),
            by_identity,
            pods_by_name,
            named_pod_groups: world
                .pods
                .iter()
                .filter_map(|p| p.pod_group.as_deref())
                .collect(),
        }
    }

    /// The LeaderWorkerSets of `role` that belong to `run`: its revision's
    /// when its members are labelled, else all the role's.
    pub(super) fn members(&self, run: &Run, role: &str) -> &[&'a Value] {
        match run.members {
            Members::Labelled => self
                .leader_worker_sets_of
                .get(run.revision.as_str())
                .and_then(|roles| roles.get(role))
                .map_or(&[], Vec::as_slice),
            Members::All | Members::AllKeepingOthers => self.role_leader_worker_sets(role),
        }
    }

    /// The LeaderWorkerSets of `role`, every revision's.
    pub(super) fn role_leader_worker_sets(&self, role: &str) -> &[&'a Value] {
        self.role_leader_worker_sets
            .get(role)
            .map_or(&[], Vec::as_slice)
    }

    /// The pods that belong to `run`, by role and replica: its revision's
    /// when its members are labelled, else all.
    pub(super) fn run_pods(&self, run: &Run) -> &ReplicaPods<'a> {
        match run.members {
            Members::Labelled => self.replica_pods_of.of(&run.revision),
            Members::All | Members::AllKeepingOthers => &self.replica_pods,
        }
    }

    /// What the rollout is planned from ([`crate::plan::inference_service::rollout::plan_seen`]).
    pub(super) fn seen(&self) -> Seen<'_> {
        Seen {
            children: self.world.children,
            leader_worker_sets: &self.leader_worker_sets,
            pods: &self.replica_pods_of,
        }
    }

    /// Every pod of the service, by role and replica.
    pub(super) fn replica_pods(&self) -> &ReplicaPods<'a> {
        &self.replica_pods
    }

    /// The child with `identity` (apiVersion, kind, name), if the world has
    /// it.
    pub(super) fn child(&self, identity: (&str, &str, &str)) -> Option<&'a Value> {
        self.by_identity.get(&identity).copied()
    }

    /// The pod named `name`, if the world has it.
    pub(super) fn pod(&self, name: &str) -> Option<&'a Pod> {
        self.pods_by_name.get(name).copied()
    }

    /// Whether a pod names the PodGroup `name`.
    pub(super) fn names_pod_group(&self, name: &str) -> bool {
        self.named_pod_groups.contains(name)
    }
}

impl<'a> Deref for Index<'a> {
    type Target = World<'a>;

    fn deref(&self) -> &World<'a> {
        self.world
    }
}

/// The replicas of one role as the world shows them.
pub(super) struct RoleReplicas {
    /// Indices with a LeaderWorkerSet (terminating ones included).
    pub(super) existing: BTreeSet<u32>,
    /// Indices on their way out: LWS terminating, or gone with pods left.
    pub(super) deleting: BTreeSet<u32>,
    /// Indices that still have pods.
    pub(super) with_pods: BTreeSet<u32>,
    /// Each replica's deletion cost and readiness, for Binpack.
    pub(super) candidates: BTreeMap<u32, victims::Candidate>,
}

/// The replicas of `role` among `leader_worker_sets` (the role's, of one
/// run: [`Index::members`]) and `pods` (the run's pods, by replica).
pub(super) fn role_replicas(
    role: &Role,
    leader_worker_sets: &[&Value],
    pods: &ReplicaPods<'_>,
) -> RoleReplicas {
    let existing: BTreeSet<u32> = leader_worker_sets
        .iter()
        .filter_map(|o| index_of(o))
        .collect();
    let terminating: BTreeSet<u32> = leader_worker_sets
        .iter()
        .filter(|o| !o["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|o| index_of(o))
        .collect();
    let with_pods: BTreeSet<u32> = pods.of_role(&role.name).map(|(index, _)| index).collect();
    let nodes = usize::try_from(role.node_count()).unwrap_or(1);
    RoleReplicas {
        deleting: victims::being_deleted(&existing, &terminating, &with_pods),
        candidates: victims::role_candidates(pods.of_role(&role.name), nodes, &existing),
        existing,
        with_pods,
    }
}

pub(super) fn index_of(object: &Value) -> Option<u32> {
    object["metadata"]["labels"][children::REPLICA_INDEX]
        .as_str()?
        .parse()
        .ok()
}

pub(super) fn key(object: &Value) -> (String, String, String) {
    let (a, k, n) = identity(object);
    (a.to_owned(), k.to_owned(), n.to_owned())
}

/// The name `World::unavailable` knows `object`'s kind by
/// ([`ChildKind::name`]).
pub(super) fn kind_name(object: &Value) -> &str {
    ChildKind::of(object).map_or_else(|| text(&object["kind"]), |k| k.name())
}

pub(super) fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

pub(super) fn identity(object: &Value) -> (&str, &str, &str) {
    (
        text(&object["apiVersion"]),
        text(&object["kind"]),
        text(&object["metadata"]["name"]),
    )
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::*;
    use super::{Index, Members, Run};
    use crate::plan::shared::children::{Naming, REPLICA_INDEX, REVISION, ROLE_NAME};
    use serde_json::json;

    fn run(revision: &str, members: Members) -> Run {
        Run {
            revision: revision.into(),
            naming: Naming::Plain,
            capacity: 100,
            spec: None,
            members,
        }
    }

    /// What a run reads of the world comes from the pass's index: a
    /// labelled run's LeaderWorkerSets and pods are its revision's, any
    /// other run's are all; a child, a pod and a named PodGroup are found
    /// by name.
    #[test]
    fn the_index_answers_what_each_step_looks_up() {
        let set = |revision: &str, index: u32| {
            json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": {"name": format!("qwen-inference-{index}-{revision}"), "labels": {
                    ROLE_NAME: "inference", REPLICA_INDEX: index.to_string(), REVISION: revision}}})
        };
        let children = [
            set("a", 0),
            set("b", 0),
            set("a", 1),
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "qwen"}}),
        ];
        let pod = |revision: &str, index: u32, group: &str| {
            json!({"metadata": {"name": format!("qwen-inference-{index}-{revision}-0"),
                "labels": {ROLE_NAME: "inference", REPLICA_INDEX: index.to_string(), REVISION: revision}},
                "spec": {"schedulingGroup": {"podGroupName": group}}})
        };
        let pods = [pod("a", 0, "g-a"), pod("b", 0, "g-b"), pod("a", 1, "g-a")];
        let world = world(&children, &pods);
        let index = Index::of(&world);
        let names = |sets: &[&Value]| -> Vec<String> {
            sets.iter()
                .map(|s| s["metadata"]["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            names(index.members(&run("a", Members::Labelled), "inference")),
            ["qwen-inference-0-a", "qwen-inference-1-a"]
        );
        assert_eq!(
            names(index.members(&run("c", Members::Labelled), "inference")),
            Vec::<String>::new()
        );
        assert_eq!(index.members(&run("a", Members::All), "inference").len(), 3);
        assert!(
            index
                .members(&run("a", Members::Labelled), "other")
                .is_empty()
        );
        assert!(index.role_leader_worker_sets("other").is_empty());
        let of = |run: &Run, replica: u32| -> Vec<String> {
            index
                .run_pods(run)
                .of("inference", replica)
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(
            of(&run("b", Members::Labelled), 0),
            ["qwen-inference-0-b-0"]
        );
        assert!(of(&run("b", Members::Labelled), 1).is_empty());
        assert!(of(&run("c", Members::Labelled), 0).is_empty());
        assert_eq!(
            of(&run("b", Members::AllKeepingOthers), 0),
            ["qwen-inference-0-a-0", "qwen-inference-0-b-0"]
        );
        assert_eq!(index.replica_pods().of_role("inference").count(), 2);
        assert!(index.child(("v1", "Service", "qwen")).is_some());
        assert!(index.child(("v1", "Service", "other")).is_none());
        assert_eq!(
            index.pod("qwen-inference-1-a-0").and_then(|p| p.replica),
            Some(1)
        );
        assert!(index.names_pod_group("g-b") && !index.names_pod_group("g-c"));
        assert_eq!(
            (index.children.len(), index.pods.len()),
            (4, 3),
            "it reads as its world"
        );
    }

    #[test]
    fn existing_replicas_come_from_the_leader_worker_sets() {
        let plan = desired(&service(2), &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        let objects: Vec<Value> = plan.into_iter().map(|d| d.object).collect();
        let scaled = desired(
            &service(1),
            &world(&objects, &[]),
            &Options::default(),
            &epoch(),
        )
        .unwrap();
        assert_eq!(names(&scaled), ["qwen-inference-0"]);
        assert_eq!(
            why_delete(&service(1), &objects[1], &world(&objects, &[])),
            "role inference is scaled to 1 replica(s); replica 1 is not kept (Ordered: the highest indices go first)"
        );
    }
}
