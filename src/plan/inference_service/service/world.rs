//! The first step of a service's plan: the world it is planned from (its
//! children, its pods, what the cluster serves and has installed, its
//! views), and the lookups every later step reads it through.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::api::ScaleView;
use crate::api::inference_service::Role;
use crate::plan::inference_service::drain::ReplicaPods;
use crate::plan::inference_service::revision;
use crate::plan::inference_service::rollout::{Members, Run};
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

/// The replicas of `role` among `leader_worker_sets` (those of one run) and
/// `pods` (the run's pods, by replica).
pub(super) fn role_replicas(
    role: &Role,
    leader_worker_sets: &[&Value],
    pods: &ReplicaPods<'_>,
) -> RoleReplicas {
    let leader_worker_sets: Vec<&Value> = leader_worker_sets
        .iter()
        .copied()
        .filter(|o| o["metadata"]["labels"][children::ROLE_NAME] == role.name.as_str())
        .collect();
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

/// The LeaderWorkerSets of the service that belong to `run`.
pub(super) fn members<'a>(run: &Run, world: &World<'a>) -> Vec<&'a Value> {
    world
        .children
        .iter()
        .filter(|o| ChildKind::of(o) == Some(LEADER_WORKER_SET))
        .filter(|o| run.members != Members::Labelled || revision::of(o) == Some(&run.revision))
        .collect()
}

/// The pods of the service that belong to `run`.
pub(super) fn run_pods<'a>(run: &Run, world: &World<'a>) -> Vec<&'a Pod> {
    world
        .pods
        .iter()
        .filter(|p| {
            run.members != Members::Labelled || p.revision.as_deref() == Some(&run.revision)
        })
        .collect()
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
