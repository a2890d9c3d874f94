//! Which replicas (or groups) go when a role (or a ResourceScalingGroup)
//! scales down, and which indices come back when it scales up again
//! (DESIGN.md §1.4). Its own folder because the InferenceService's roles and
//! the ResourceScalingGroup's groups both choose here. It implements seed 001
//! (`001_6664727277b73439.txt`, "Binpack Scale Down"), sections "Cost
//! Calculation for Deleting Roles and Service Groups", "Pod Sequence Number
//! Handling" and "Impact of Binpacking on PodGroups".
//!
//! Under the Binpack policy a replica's score is the sum of
//! `controller.kubernetes.io/pod-deletion-cost` over all its pods (leader and
//! workers), a group's the sum over the pods of all its resources. Replicas
//! that are not fully running go first, then the lowest score, then the
//! highest index; with no annotations this is the Ordered policy's "highest
//! index first". Scale-up fills the lowest free index, and an index whose
//! replica is still being deleted counts toward the total and stays reserved
//! until its pods are gone ([`refill`]).
//! Gang bookkeeping (the PodGroup's entries for a replica) stays until the
//! replica's pods are gone, so a PodGroup never loses a member whose pods still
//! run, and never asks for more members than exist while a role scales down.
//!
//! How the reconciler puts it together for one role:
//!
//! ```text
//! with_pods  = candidates(pods of role by replica).keys()
//! deleting   = being_deleted(existing, terminating, with_pods)
//! kept       = keep(existing, deleting, desired, policy,
//!                   role_candidates(pods of role by replica, nodeCount, existing))
//! pod group  = pod_group_indices(kept, deleting ∩ with_pods)
//! ```

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use crate::plan::shared::pod::Pod;

use crate::api::inference_service::RoleScaleDownPolicy;
use crate::api::resource_scaling_group::GroupScaleDownPolicy;
use crate::plan::shared::replicas;

pub use crate::plan::shared::pod::DELETION_COST;

/// The index of group `{prefix}-00`, the original resources, never deleted.
pub const ORIGINAL_GROUP: u32 = 0;

/// One replica of a role as the scale-down choice sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub index: u32,
    /// Every pod of the replica is Running and Ready (and, from
    /// [`role_candidates`], all of its pods exist).
    pub running: bool,
    /// The summed pod deletion cost of its pods (see [`cost_of`]).
    pub cost: i64,
    /// A pod of it has a deletionTimestamp.
    pub deleting: bool,
}

impl Candidate {
    /// A replica whose LeaderWorkerSet exists but has no pods yet: not running,
    /// no cost, so it is the first to go.
    pub fn without_pods(index: u32) -> Candidate {
        Candidate {
            index,
            running: false,
            cost: 0,
            deleting: false,
        }
    }
}

/// The summed deletion cost of a replica's (or a group's) pods: every pod's
/// [`Pod::deletion_cost`], negatives included, saturating at the i64 bounds.
pub fn cost_of(pods: &[&Pod]) -> i64 {
    pods.iter().fold(0i64, |sum, pod| {
        sum.saturating_add(i64::from(pod.deletion_cost))
    })
}

/// Whether a replica (or group) with these pods is fully running: it has pods
/// and every one is Running and Ready.
pub fn all_running(pods: &[&Pod]) -> bool {
    !pods.is_empty() && pods.iter().all(|pod| pod.running())
}

fn candidate(index: u32, pods: &[&Pod], pods_per_replica: usize) -> Candidate {
    Candidate {
        index,
        running: pods.len() >= pods_per_replica && all_running(pods),
        cost: cost_of(pods),
        deleting: pods.iter().any(|p| p.deleting()),
    }
}

/// The replicas of a role that have pods, from its pods by replica index
/// (`drain::ReplicaPods::of_role` of the service's plan): running when every
/// pod of the replica is Running and Ready, deleting when any pod has a
/// deletionTimestamp. Its keys are the indices that still have pods.
pub fn candidates<'p>(
    by_replica: impl IntoIterator<Item = (u32, &'p [&'p Pod])>,
) -> BTreeMap<u32, Candidate> {
    by_replica
        .into_iter()
        .map(|(index, pods)| (index, candidate(index, pods, 1)))
        .collect()
}

/// Every replica of a role the choice should weigh: those with pods, as in
/// [`candidates`], where a replica with fewer than `pods_per_replica` pods (a
/// multi-node replica whose workers are not created yet) is not running; and
/// each index of `leader_worker_sets` that has no pods yet
/// ([`Candidate::without_pods`]).
pub fn role_candidates<'p>(
    by_replica: impl IntoIterator<Item = (u32, &'p [&'p Pod])>,
    pods_per_replica: usize,
    leader_worker_sets: &BTreeSet<u32>,
) -> BTreeMap<u32, Candidate> {
    let mut candidates: BTreeMap<u32, Candidate> = by_replica
        .into_iter()
        .map(|(index, pods)| (index, candidate(index, pods, pods_per_replica)))
        .collect();
    for &index in leader_worker_sets {
        candidates
            .entry(index)
            .or_insert_with(|| Candidate::without_pods(index));
    }
    candidates
}

/// The indices of a role whose replicas are on their way out: their
/// LeaderWorkerSet is being deleted (`terminating`: it has a
/// deletionTimestamp), or it is gone while pods of it remain (`with_pods`
/// holds the indices that have pods; `existing` those with a LeaderWorkerSet).
/// Pods terminating under a LeaderWorkerSet that stays are a restart, not a
/// deletion, and do not make their replica deleting.
pub fn being_deleted(
    existing: &BTreeSet<u32>,
    terminating: &BTreeSet<u32>,
    with_pods: &BTreeSet<u32>,
) -> BTreeSet<u32> {
    terminating
        .iter()
        .chain(with_pods.difference(existing))
        .copied()
        .collect()
}

/// The Binpack order, first to go first: not running, then lower cost, then
/// higher index.
fn binpack_order(index: u32, running: bool, cost: i64) -> (bool, i64, Reverse<u32>) {
    (running, cost, Reverse(index))
}

/// The replicas to delete, in order, to remove `remove` of them under the
/// Binpack policy: replicas that are not fully running first, then the lowest
/// summed cost, then the highest index. Replicas already being deleted are
/// not chosen again, so fewer than `remove` come back when too few others
/// exist. With no annotations and every replica running this is the Ordered
/// policy's highest-index-first.
pub fn victims(candidates: &BTreeMap<u32, Candidate>, remove: usize) -> Vec<u32> {
    let mut order: Vec<(u32, &Candidate)> = candidates
        .iter()
        .filter(|(_, c)| !c.deleting)
        .map(|(&index, c)| (index, c))
        .collect();
    order.sort_by_key(|&(index, c)| binpack_order(index, c.running, c.cost));
    order
        .into_iter()
        .take(remove)
        .map(|(index, _)| index)
        .collect()
}

/// The replica indices a role keeps (its LeaderWorkerSets) with `desired`
/// replicas, when `existing` have a LeaderWorkerSet and `deleting` are on
/// their way out (see [`being_deleted`]).
///
/// - Ordered: exactly [`replicas::ordered`], the behaviour before Binpack.
/// - Binpack: a replica in `deleting` is never kept. With more live replicas
///   than desired, [`victims`] are removed, weighing each live replica by
///   `candidates` (one without an entry has no pods yet; pods terminating
///   under a live LeaderWorkerSet are a restart, so it is weighed as not
///   running rather than skipped). With fewer, [`refill`]: a replica still
///   being deleted counts toward the total and its index is reserved until it
///   is gone, so `{0, 1 being deleted}` scaled to 3 creates only 2 (and 1
///   once it is gone). Survivors above the desired count stay where they are
///   and count toward it.
pub fn keep(
    existing: &BTreeSet<u32>,
    deleting: &BTreeSet<u32>,
    desired: usize,
    policy: RoleScaleDownPolicy,
    candidates: &BTreeMap<u32, Candidate>,
) -> BTreeSet<u32> {
    match policy {
        RoleScaleDownPolicy::Ordered => replicas::ordered(existing, desired),
        RoleScaleDownPolicy::Binpack => binpack_keep(existing, deleting, desired, candidates),
    }
}

fn binpack_keep(
    existing: &BTreeSet<u32>,
    deleting: &BTreeSet<u32>,
    desired: usize,
    candidates: &BTreeMap<u32, Candidate>,
) -> BTreeSet<u32> {
    let mut kept: BTreeSet<u32> = existing.difference(deleting).copied().collect();
    if kept.len() > desired {
        let live: BTreeMap<u32, Candidate> = kept
            .iter()
            .map(|&index| {
                let weighed = candidates
                    .get(&index)
                    .copied()
                    .unwrap_or_else(|| Candidate::without_pods(index));
                let restarting = weighed.deleting;
                let candidate = Candidate {
                    index,
                    running: weighed.running && !restarting,
                    deleting: false,
                    ..weighed
                };
                (index, candidate)
            })
            .collect();
        for victim in victims(&live, kept.len().saturating_sub(desired)) {
            kept.remove(&victim);
        }
        return kept;
    }
    refill(&kept, deleting, desired)
}

/// Scale-up (DESIGN.md §1.4, issue 6), for replicas of a role and for groups
/// of a ResourceScalingGroup alike: `live` are kept and the lowest free
/// indices are added until `live` plus those still being deleted make
/// `desired`. An index in `deleting` counts toward the total until it is gone
/// and is never reused before then; with as many or more than `desired`
/// already there, nothing is added (and nothing removed: that is the
/// scale-down choice's job).
///
/// `{0,2,4}` to 5 adds 1 and 3; `{10}` to 3 adds 0 and 1; `{0}` with 1 being
/// deleted, to 3, adds only 2.
pub fn refill(live: &BTreeSet<u32>, deleting: &BTreeSet<u32>, desired: usize) -> BTreeSet<u32> {
    let mut kept = live.clone();
    let on_their_way_out = deleting.difference(live).count();
    let target = desired.saturating_sub(on_their_way_out);
    let mut next = Some(0u32);
    while kept.len() < target {
        let Some(index) = next else {
            // Every u32 index is taken or reserved: nothing more can be made.
            break;
        };
        if !deleting.contains(&index) {
            kept.insert(index);
        }
        next = index.checked_add(1);
    }
    kept
}

/// The replica indices of a role whose entries stay in the PodGroup (its
/// `{role}-{i}` TaskMember keys, or its sub-groups): those kept, and those
/// being deleted whose pods are not gone yet. An entry goes only after its
/// replica's pods are gone, so during a scale-down the PodGroup never asks for
/// more members than exist.
pub fn pod_group_indices(
    kept: &BTreeSet<u32>,
    deleting_with_pods: &BTreeSet<u32>,
) -> BTreeSet<u32> {
    kept.union(deleting_with_pods).copied().collect()
}

/// One group of a ResourceScalingGroup as the scale-down choice sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCandidate {
    pub index: u32,
    /// When the group was created (its resources' creationTimestamp); None when
    /// unknown, which counts as the newest (a group not stored yet).
    pub created: Option<Timestamp>,
    /// Every pod of every resource of the group is Running and Ready.
    pub running: bool,
    /// The summed deletion cost of the pods of all its resources.
    pub cost: i64,
}

/// The groups to delete, in order, to remove `remove` of them: first the
/// groups named in `scaleDown.candidates` (`candidates`, as indices, in list
/// order; indices of groups that do not exist, repeats and group 00 are
/// skipped), then the rest by `policy`:
///
/// - Ordered: highest index first.
/// - Newest: latest created first (unknown creation time counts as newest);
///   ties go by highest index.
/// - Oldest: earliest created first (unknown creation time last); ties go by
///   highest index.
/// - Binpack: as [`victims`]: not running first, then lower cost, then
///   higher index.
///
/// Group 00 (the original resources) is never chosen.
pub fn group_victims(
    groups: &BTreeMap<u32, GroupCandidate>,
    remove: usize,
    policy: GroupScaleDownPolicy,
    candidates: &[u32],
) -> Vec<u32> {
    let mut chosen: Vec<u32> = Vec::new();
    for &index in candidates {
        if chosen.len() >= remove {
            return chosen;
        }
        if index != ORIGINAL_GROUP && groups.contains_key(&index) && !chosen.contains(&index) {
            chosen.push(index);
        }
    }
    let mut rest: Vec<(u32, &GroupCandidate)> = groups
        .iter()
        .filter(|&(index, _)| *index != ORIGINAL_GROUP && !chosen.contains(index))
        .map(|(&index, group)| (index, group))
        .collect();
    match policy {
        GroupScaleDownPolicy::Ordered => rest.sort_by_key(|&(index, _)| Reverse(index)),
        GroupScaleDownPolicy::Newest => rest
            .sort_by_key(|&(index, g)| (g.created.is_some(), Reverse(g.created), Reverse(index))),
        GroupScaleDownPolicy::Oldest => {
            rest.sort_by_key(|&(index, g)| (g.created.is_none(), g.created, Reverse(index)))
        }
        GroupScaleDownPolicy::Binpack => {
            rest.sort_by_key(|&(index, g)| binpack_order(index, g.running, g.cost))
        }
    }
    let left = remove.saturating_sub(chosen.len());
    chosen.extend(rest.into_iter().take(left).map(|(index, _)| index));
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::shared::children::{REPLICA_INDEX, ROLE_NAME};
    use crate::plan::shared::pod::from_json_all;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn set(indices: &[u32]) -> BTreeSet<u32> {
        indices.iter().copied().collect()
    }

    /// `pods` of `role` by replica index, as the service's plan hands them
    /// over (`drain::ReplicaPods::of_role`, which tests the grouping).
    fn of_role<'p>(pods: &'p [Pod], role: &str) -> BTreeMap<u32, Vec<&'p Pod>> {
        let mut by_replica: BTreeMap<u32, Vec<&Pod>> = BTreeMap::new();
        for pod in pods.iter().filter(|p| p.role.as_deref() == Some(role)) {
            if let Some(index) = pod.replica {
                by_replica.entry(index).or_default().push(pod);
            }
        }
        by_replica
    }

    fn candidates_of(pods: &[Value], role: &str) -> BTreeMap<u32, Candidate> {
        let pods = from_json_all(pods);
        candidates(of_role(&pods, role).iter().map(|(i, p)| (*i, p.as_slice())))
    }

    fn role_candidates_of(
        pods: &[Value],
        role: &str,
        pods_per_replica: usize,
        existing: &BTreeSet<u32>,
    ) -> BTreeMap<u32, Candidate> {
        let pods = from_json_all(pods);
        role_candidates(
            of_role(&pods, role).iter().map(|(i, p)| (*i, p.as_slice())),
            pods_per_replica,
            existing,
        )
    }

    fn running(index: u32, cost: i64) -> Candidate {
        Candidate {
            index,
            running: true,
            cost,
            deleting: false,
        }
    }

    fn map(candidates: &[Candidate]) -> BTreeMap<u32, Candidate> {
        candidates.iter().map(|c| (c.index, *c)).collect()
    }

    /// A pod of replica `index` (worker `worker`) of `role`.
    fn pod(role: &str, index: u32, worker: u32, phase: &str, ready: bool) -> Value {
        json!({
            "metadata": {
                "name": format!("qwen-{role}-{index}-{worker}"),
                "labels": {ROLE_NAME: role, REPLICA_INDEX: index.to_string()},
            },
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }},
            ]},
        })
    }

    fn with_cost(mut pod: Value, cost: &str) -> Value {
        pod["metadata"]["annotations"] = json!({DELETION_COST: cost});
        pod
    }

    fn terminating(mut pod: Value) -> Value {
        pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        pod
    }

    #[test]
    fn the_issue_table_keeps_the_costliest_running_replicas() {
        // Indices 0..3 all running, costs 100/50/0/75, scaled to 2.
        let all = map(&[
            running(0, 100),
            running(1, 50),
            running(2, 0),
            running(3, 75),
        ]);
        assert_eq!(victims(&all, 2), [2, 1]);
        let kept = keep(
            &set(&[0, 1, 2, 3]),
            &set(&[]),
            2,
            RoleScaleDownPolicy::Binpack,
            &all,
        );
        assert_eq!(kept, set(&[0, 3]));
    }

    #[test]
    fn the_order_of_deletion() {
        let cases: [(&str, Vec<Candidate>, usize, Vec<u32>); 7] = [
            (
                "a creating replica goes first even with a high cost",
                vec![
                    running(0, 10),
                    Candidate {
                        running: false,
                        ..running(1, 1000)
                    },
                    running(2, 5),
                ],
                2,
                vec![1, 2],
            ),
            (
                "negative costs go first",
                vec![running(0, 0), running(1, -5), running(2, 3)],
                1,
                vec![1],
            ),
            (
                "ties go by highest index",
                vec![running(0, 7), running(1, 7), running(2, 7), running(3, 9)],
                2,
                vec![2, 1],
            ),
            (
                "no annotations: highest index first",
                vec![running(0, 0), running(4, 0), running(7, 0)],
                3,
                vec![7, 4, 0],
            ),
            (
                "not-running replicas among themselves: lower cost, then higher index",
                vec![
                    Candidate::without_pods(0),
                    Candidate {
                        running: false,
                        ..running(1, 4)
                    },
                    Candidate::without_pods(2),
                    running(3, -100),
                ],
                3,
                vec![2, 0, 1],
            ),
            (
                "a replica being deleted is not chosen again",
                vec![
                    running(0, 1),
                    Candidate {
                        deleting: true,
                        ..running(1, 0)
                    },
                    running(2, 2),
                ],
                1,
                vec![0],
            ),
            (
                "never more than there is",
                vec![
                    running(0, 1),
                    Candidate {
                        deleting: true,
                        ..running(1, 0)
                    },
                ],
                5,
                vec![0],
            ),
        ];
        for (why, candidates, remove, expected) in cases {
            assert_eq!(victims(&map(&candidates), remove), expected, "{why}");
        }
    }

    #[test]
    fn deletion_cost_is_read_like_kubernetes() {
        let cases = [
            (Some("100"), 100),
            (Some("-5"), -5),
            (Some("0"), 0),
            (Some("2147483647"), i32::MAX),
            (Some("-2147483648"), i32::MIN),
            (Some("2147483648"), 0),
            (Some("-2147483649"), 0),
            (Some("+10"), 0),
            (Some("008"), 0),
            (Some("00"), 0),
            (Some("-"), 0),
            (Some(""), 0),
            (Some(" 5"), 0),
            (Some("1.5"), 0),
            (Some("1e3"), 0),
            (Some("ten"), 0),
            (None, 0),
        ];
        for (annotation, expected) in cases {
            let p = pod("decode", 0, 0, "Running", true);
            let p = match annotation {
                Some(cost) => with_cost(p, cost),
                None => p,
            };
            assert_eq!(Pod::from_json(&p).deletion_cost, expected, "{annotation:?}");
        }
        let number = json!({"metadata": {"annotations": {DELETION_COST: 7}}});
        assert_eq!(
            Pod::from_json(&number).deletion_cost,
            0,
            "annotations are strings"
        );
    }

    #[test]
    fn a_replica_costs_the_sum_of_its_pods() {
        let leader = with_cost(pod("decode", 0, 0, "Running", true), "100");
        let worker = with_cost(pod("decode", 0, 1, "Running", true), "-30");
        let unparseable = with_cost(pod("decode", 0, 2, "Running", true), "lots");
        let bare = pod("decode", 0, 3, "Running", true);
        let pods = from_json_all(&[leader, worker, unparseable, bare]);
        assert_eq!(cost_of(&pods.iter().collect::<Vec<_>>()), 70);
        assert_eq!(cost_of(&[]), 0);
        let max = Pod::from_json(&with_cost(
            pod("decode", 0, 0, "Running", true),
            "2147483647",
        ));
        let many: Vec<&Pod> = std::iter::repeat_n(&max, 4).collect();
        assert_eq!(cost_of(&many), 4 * i64::from(i32::MAX), "no i32 overflow");
    }

    #[test]
    fn candidates_come_from_a_roles_pods() {
        let pods = vec![
            with_cost(pod("decode", 0, 0, "Running", true), "10"),
            with_cost(pod("decode", 0, 1, "Running", true), "5"),
            pod("decode", 1, 0, "Running", true),
            pod("decode", 1, 1, "Pending", false),
            pod("decode", 2, 0, "Running", false),
            terminating(pod("decode", 3, 0, "Running", true)),
            pod("prefill", 0, 0, "Pending", false),
        ];
        let found = candidates_of(&pods, "decode");
        assert_eq!(
            found.values().copied().collect::<Vec<_>>(),
            [
                running(0, 15),
                Candidate {
                    running: false,
                    ..running(1, 0)
                },
                Candidate {
                    running: false,
                    ..running(2, 0)
                },
                Candidate {
                    deleting: true,
                    ..running(3, 0)
                },
            ]
        );
        assert_eq!(found.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(
            candidates_of(&pods, "prefill")[&0],
            Candidate::without_pods(0),
            "a Pending pod is not running"
        );
        assert!(candidates_of(&pods, "router").is_empty());
    }

    #[test]
    fn role_candidates_add_replicas_without_pods_and_need_every_pod() {
        let pods = vec![
            pod("decode", 0, 0, "Running", true),
            pod("decode", 0, 1, "Running", true),
            // Replica 1's leader is up, its worker is not created yet.
            with_cost(pod("decode", 1, 0, "Running", true), "40"),
        ];
        let found = role_candidates_of(&pods, "decode", 2, &set(&[0, 1, 2]));
        assert_eq!(found[&0], running(0, 0));
        assert_eq!(
            found[&1],
            Candidate {
                running: false,
                ..running(1, 40)
            },
            "a replica short of pods is not running"
        );
        assert_eq!(found[&2], Candidate::without_pods(2));
        assert!(
            candidates_of(&pods, "decode")[&1].running,
            "candidates() alone does not know the node count"
        );
        assert_eq!(victims(&found, 2), [2, 1]);
    }

    #[test]
    fn what_is_being_deleted() {
        // LeaderWorkerSets 0, 1, 3; 3 is terminating; pods remain of 2 (its
        // LeaderWorkerSet is gone) and of 1 (restarting: not a deletion).
        let deleting = being_deleted(&set(&[0, 1, 3]), &set(&[3]), &set(&[0, 1, 2]));
        assert_eq!(deleting, set(&[2, 3]));
    }

    #[test]
    fn ordered_is_unchanged() {
        let costly = map(&[running(0, 0), running(1, 0), running(2, 1000)]);
        assert_eq!(
            keep(
                &set(&[0, 1, 2]),
                &set(&[1]),
                2,
                RoleScaleDownPolicy::Ordered,
                &costly
            ),
            set(&[0, 1]),
            "costs and deletions do not matter to Ordered"
        );
    }

    #[test]
    fn binpack_scale_up_refills_the_lowest_free_indices() {
        let none = BTreeMap::new();
        let binpack = RoleScaleDownPolicy::Binpack;
        let cases = [
            (
                "gaps first",
                &[0, 2, 4][..],
                &[][..],
                5,
                &[0, 1, 2, 3, 4][..],
            ),
            (
                "an index being deleted counts until it is gone",
                &[0, 1],
                &[1],
                2,
                &[0],
            ),
            (
                "the issue's {0, 1 being deleted} to 3 creates only 2",
                &[0, 1],
                &[1],
                3,
                &[0, 2],
            ),
            (
                "deleting indices with no object left count too",
                &[0],
                &[1, 2],
                5,
                &[0, 3, 4],
            ),
            ("gone and free again", &[0], &[], 2, &[0, 1]),
            ("lowest missing first", &[10], &[], 3, &[0, 1, 10]),
            (
                "survivors above the count keep their place",
                &[0, 3],
                &[],
                3,
                &[0, 1, 3],
            ),
            ("to zero", &[0, 1], &[1], 0, &[]),
        ];
        for (why, existing, deleting, desired, expected) in cases {
            assert_eq!(
                keep(&set(existing), &set(deleting), desired, binpack, &none),
                set(expected),
                "{why}"
            );
        }
    }

    #[test]
    fn refill_is_the_issue_table() {
        // (live, being deleted, desired, created)
        type Case = (&'static [u32], &'static [u32], usize, &'static [u32]);
        let cases: [Case; 6] = [
            (&[0, 2, 4], &[], 5, &[1, 3]),
            (&[10], &[], 3, &[0, 1]),
            (&[0], &[1], 3, &[2]),
            (&[0], &[1], 2, &[]),
            (&[0, 1, 2], &[], 2, &[]),
            (&[], &[0, 1, 2], 4, &[3]),
        ];
        for (live, deleting, desired, created) in cases {
            let kept = refill(&set(live), &set(deleting), desired);
            let new: Vec<u32> = kept.difference(&set(live)).copied().collect();
            assert_eq!(
                new, created,
                "{live:?} with {deleting:?} being deleted to {desired}"
            );
            assert!(set(live).is_subset(&kept), "refill never removes");
        }
    }

    #[test]
    fn binpack_scale_down_while_a_replica_is_being_deleted() {
        let costs = map(&[
            running(0, 100),
            running(1, 50),
            Candidate {
                deleting: true,
                ..running(2, 0)
            },
            running(3, 75),
        ]);
        // 2 is on its way out and no longer counts: one more goes, the cheapest.
        assert_eq!(
            keep(
                &set(&[0, 1, 2, 3]),
                &set(&[2]),
                2,
                RoleScaleDownPolicy::Binpack,
                &costs
            ),
            set(&[0, 3])
        );
    }

    #[test]
    fn binpack_weighs_a_restarting_replica_as_not_running() {
        // Replica 0's pods terminate under its LeaderWorkerSet (a restart): it
        // counts, and it is the first to go rather than a healthy one.
        let restarting = map(&[
            Candidate {
                deleting: true,
                ..running(0, 100)
            },
            running(1, 0),
        ]);
        assert_eq!(
            keep(
                &set(&[0, 1]),
                &set(&[]),
                1,
                RoleScaleDownPolicy::Binpack,
                &restarting
            ),
            set(&[1])
        );
        // A live replica the candidates do not know has no pods yet.
        let known = map(&[running(0, 0), running(1, 0)]);
        assert_eq!(
            keep(
                &set(&[0, 1, 2]),
                &set(&[]),
                2,
                RoleScaleDownPolicy::Binpack,
                &known
            ),
            set(&[0, 1])
        );
    }

    /// The seed's table (R-0..R-3), walked through keep, being_deleted and
    /// pod_group_indices the way the reconciler uses them.
    #[test]
    fn the_seed_table_stage_by_stage() {
        let binpack = RoleScaleDownPolicy::Binpack;
        let decode =
            |index: u32, cost: &str| with_cost(pod("decode", index, 0, "Running", true), cost);
        // Stage 1: R-0..R-2 running, R-1 the cheapest. Scale to 2.
        let stage1 = vec![decode(0, "30"), decode(1, "-10"), decode(2, "20")];
        let existing = set(&[0, 1, 2]);
        let cands = role_candidates_of(&stage1, "decode", 1, &existing);
        let kept = keep(&existing, &set(&[]), 2, binpack, &cands);
        assert_eq!(kept, set(&[0, 2]));
        assert_eq!(pod_group_indices(&kept, &set(&[])), set(&[0, 2]));

        // Stage 2: R-1's LeaderWorkerSet is deleted, its pod terminates.
        let stage2 = vec![
            decode(0, "30"),
            terminating(decode(1, "-10")),
            decode(2, "20"),
        ];
        let existing = set(&[0, 2]);
        let with_pods: BTreeSet<u32> = candidates_of(&stage2, "decode").keys().copied().collect();
        let deleting = being_deleted(&existing, &set(&[]), &with_pods);
        assert_eq!(deleting, set(&[1]));
        let kept = keep(
            &existing,
            &deleting,
            2,
            binpack,
            &role_candidates_of(&stage2, "decode", 1, &existing),
        );
        assert_eq!(kept, set(&[0, 2]));
        let deleting_with_pods = deleting.intersection(&with_pods).copied().collect();
        assert_eq!(
            pod_group_indices(&kept, &deleting_with_pods),
            set(&[0, 1, 2]),
            "R-1 keeps its PodGroup entry while its pod is there"
        );

        // Scaled to 4 before R-1 is gone: R-1 counts and is reserved, so
        // only 3 comes now.
        assert_eq!(
            keep(&existing, &deleting, 4, binpack, &BTreeMap::new()),
            set(&[0, 2, 3])
        );

        // Stage 3: R-1's pod is gone; its entry goes.
        let stage3 = vec![decode(0, "30"), decode(2, "20")];
        let with_pods: BTreeSet<u32> = candidates_of(&stage3, "decode").keys().copied().collect();
        let deleting = being_deleted(&existing, &set(&[]), &with_pods);
        assert!(deleting.is_empty());
        assert_eq!(pod_group_indices(&kept, &deleting), set(&[0, 2]));

        // Stage 4: scale up by 2: R-1 first, then R-3.
        let kept = keep(
            &existing,
            &deleting,
            4,
            binpack,
            &role_candidates_of(&stage3, "decode", 1, &existing),
        );
        assert_eq!(kept, set(&[0, 1, 2, 3]));
        assert_eq!(pod_group_indices(&kept, &set(&[])), set(&[0, 1, 2, 3]));
    }

    fn group(index: u32, created: Option<&str>, running: bool, cost: i64) -> GroupCandidate {
        GroupCandidate {
            index,
            created: created.map(|t| t.parse().unwrap()),
            running,
            cost,
        }
    }

    fn groups() -> BTreeMap<u32, GroupCandidate> {
        [
            group(0, Some("2026-01-01T00:00:00Z"), true, -1000),
            group(1, Some("2026-01-03T00:00:00Z"), true, 10),
            group(2, Some("2026-01-02T00:00:00Z"), true, 0),
            group(3, Some("2026-01-03T00:00:00Z"), true, 50),
            group(4, Some("2026-01-05T00:00:00Z"), false, 90),
        ]
        .into_iter()
        .map(|g| (g.index, g))
        .collect()
    }

    #[test]
    fn group_victims_by_policy() {
        use GroupScaleDownPolicy::*;
        let cases = [
            (Ordered, 2, vec![4, 3]),
            (Ordered, 9, vec![4, 3, 2, 1]),
            (Newest, 3, vec![4, 3, 1]),
            (Oldest, 3, vec![2, 3, 1]),
            (Binpack, 4, vec![4, 2, 1, 3]),
            (Binpack, 0, vec![]),
        ];
        for (policy, remove, expected) in cases {
            assert_eq!(
                group_victims(&groups(), remove, policy, &[]),
                expected,
                "{policy:?} removing {remove}"
            );
        }
    }

    #[test]
    fn group_victims_unknown_creation_counts_as_newest() {
        let mut groups = groups();
        groups.insert(5, group(5, None, true, 0));
        use GroupScaleDownPolicy::*;
        assert_eq!(group_victims(&groups, 2, Newest, &[]), [5, 4]);
        assert_eq!(group_victims(&groups, 5, Oldest, &[]), [2, 3, 1, 4, 5]);
    }

    #[test]
    fn listed_candidates_go_first() {
        use GroupScaleDownPolicy::*;
        // 9 does not exist, 0 is the originals, 2 is listed twice.
        let listed = [9, 2, 0, 2, 1];
        assert_eq!(group_victims(&groups(), 1, Ordered, &listed), [2]);
        assert_eq!(group_victims(&groups(), 2, Ordered, &listed), [2, 1]);
        assert_eq!(group_victims(&groups(), 3, Ordered, &listed), [2, 1, 4]);
        assert_eq!(group_victims(&groups(), 3, Oldest, &listed), [2, 1, 3]);
        assert_eq!(group_victims(&groups(), 9, Binpack, &listed), [2, 1, 4, 3]);
        assert_eq!(
            group_victims(&groups(), 0, Binpack, &listed),
            Vec::<u32>::new()
        );
    }

    fn arbitrary_candidates() -> impl Strategy<Value = BTreeMap<u32, Candidate>> {
        proptest::collection::btree_map(
            0u32..30,
            (any::<bool>(), -3i64..3, proptest::bool::weighted(0.2)),
            0..15,
        )
        .prop_map(|m| {
            m.into_iter()
                .map(|(index, (running, cost, deleting))| {
                    (
                        index,
                        Candidate {
                            index,
                            running,
                            cost,
                            deleting,
                        },
                    )
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn victims_skip_deleting_and_take_at_most_remove(
            candidates in arbitrary_candidates(),
            remove in 0usize..20,
        ) {
            let chosen = victims(&candidates, remove);
            let choosable = candidates.values().filter(|c| !c.deleting).count();
            prop_assert_eq!(chosen.len(), remove.min(choosable));
            let unique: BTreeSet<u32> = chosen.iter().copied().collect();
            prop_assert_eq!(unique.len(), chosen.len());
            for index in &chosen {
                prop_assert!(!candidates[index].deleting);
            }
            // Nothing left behind is a better victim than one chosen.
            for (index, c) in candidates.iter().filter(|(i, c)| !c.deleting && !unique.contains(i)) {
                for victim in &chosen {
                    let v = candidates[victim];
                    prop_assert!(
                        binpack_order(*victim, v.running, v.cost) < binpack_order(*index, c.running, c.cost)
                    );
                }
            }
        }

        #[test]
        fn equal_costs_all_running_choose_like_ordered(
            existing in proptest::collection::btree_set(0u32..40, 0..20),
            cost in -5i64..5,
            desired in 0usize..25,
        ) {
            let candidates: BTreeMap<u32, Candidate> =
                existing.iter().map(|&i| (i, running(i, cost))).collect();
            let none = BTreeSet::new();
            let binpack = keep(&existing, &none, desired, RoleScaleDownPolicy::Binpack, &candidates);
            prop_assert_eq!(&binpack, &replicas::ordered(&existing, desired));
            let remove = existing.len().saturating_sub(desired);
            let expected: Vec<u32> = existing.iter().rev().take(remove).copied().collect();
            prop_assert_eq!(victims(&candidates, remove), expected);
        }

        #[test]
        fn keep_under_ordered_is_replicas_ordered(
            existing in proptest::collection::btree_set(0u32..40, 0..20),
            deleting in proptest::collection::btree_set(0u32..40, 0..5),
            candidates in arbitrary_candidates(),
            desired in 0usize..25,
        ) {
            prop_assert_eq!(
                keep(&existing, &deleting, desired, RoleScaleDownPolicy::Ordered, &candidates),
                replicas::ordered(&existing, desired)
            );
        }

        #[test]
        fn binpack_keeps_desired_live_replicas_and_reserves_deleting_ones(
            existing in proptest::collection::btree_set(0u32..30, 0..15),
            deleting in proptest::collection::btree_set(0u32..30, 0..6),
            candidates in arbitrary_candidates(),
            desired in 0usize..25,
        ) {
            let kept = keep(&existing, &deleting, desired, RoleScaleDownPolicy::Binpack, &candidates);
            let live: BTreeSet<u32> = existing.difference(&deleting).copied().collect();
            prop_assert!(kept.is_disjoint(&deleting));
            if desired <= live.len() {
                prop_assert_eq!(kept.len(), desired);
                prop_assert!(kept.is_subset(&live));
            } else {
                // What is being deleted counts toward the total until gone.
                prop_assert_eq!(kept.len(), live.len().max(desired.saturating_sub(deleting.len())));
                prop_assert!(live.is_subset(&kept));
                // New indices are the lowest free ones.
                let created: Vec<u32> = kept.difference(&live).copied().collect();
                let free: Vec<u32> = (0u32..)
                    .filter(|i| !live.contains(i) && !deleting.contains(i))
                    .take(created.len())
                    .collect();
                prop_assert_eq!(created, free);
            }
        }

        #[test]
        fn the_pod_group_keeps_entries_until_pods_are_gone(
            existing in proptest::collection::btree_set(0u32..30, 0..15),
            deleting in proptest::collection::btree_set(0u32..30, 0..6),
            with_pods in proptest::collection::btree_set(0u32..30, 0..15),
            candidates in arbitrary_candidates(),
            desired in 0usize..25,
        ) {
            let kept = keep(&existing, &deleting, desired, RoleScaleDownPolicy::Binpack, &candidates);
            let deleting_with_pods: BTreeSet<u32> =
                deleting.intersection(&with_pods).copied().collect();
            let entries = pod_group_indices(&kept, &deleting_with_pods);
            prop_assert!(kept.is_subset(&entries));
            prop_assert!(deleting_with_pods.is_subset(&entries));
            for gone in deleting.difference(&with_pods) {
                prop_assert!(!entries.contains(gone), "entry of {} outlives its pods", gone);
            }
            let live = existing.difference(&deleting).count();
            if desired <= live {
                // Scaling down: no entry for a replica that does not exist.
                let there: BTreeSet<u32> = existing.union(&with_pods).copied().collect();
                prop_assert!(entries.is_subset(&there));
            }
        }

        #[test]
        fn group_victims_never_take_the_originals(
            groups in proptest::collection::btree_map(
                0u32..12,
                (proptest::option::of(0i64..5), any::<bool>(), -3i64..3),
                0..10,
            ),
            listed in proptest::collection::vec(0u32..15, 0..6),
            remove in 0usize..12,
            policy in prop_oneof![
                Just(GroupScaleDownPolicy::Ordered),
                Just(GroupScaleDownPolicy::Newest),
                Just(GroupScaleDownPolicy::Oldest),
                Just(GroupScaleDownPolicy::Binpack),
            ],
        ) {
            let groups: BTreeMap<u32, GroupCandidate> = groups
                .into_iter()
                .map(|(index, (day, running, cost))| {
                    let created = day.map(|d| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(24 * d));
                    (index, GroupCandidate { index, created, running, cost })
                })
                .collect();
            let chosen = group_victims(&groups, remove, policy, &listed);
            let deletable = groups.keys().filter(|&&i| i != ORIGINAL_GROUP).count();
            prop_assert_eq!(chosen.len(), remove.min(deletable));
            prop_assert!(!chosen.contains(&ORIGINAL_GROUP));
            let unique: BTreeSet<u32> = chosen.iter().copied().collect();
            prop_assert_eq!(unique.len(), chosen.len());
            prop_assert!(chosen.iter().all(|i| groups.contains_key(i)));
            // Listed groups that exist come first, in list order.
            let mut valid: Vec<u32> = Vec::new();
            for &i in &listed {
                if i != ORIGINAL_GROUP && groups.contains_key(&i) && !valid.contains(&i) {
                    valid.push(i);
                }
            }
            let head = valid.len().min(chosen.len());
            prop_assert_eq!(&chosen[..head], &valid[..head]);
        }
    }
}
