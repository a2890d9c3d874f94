//! RollingUpdate paced across a role's replicas (`spec.upgradeStrategy.
//! rollingUpdate`, issue 14).
//!
//! Each replica is its own LeaderWorkerSet with `replicas: 1` (DESIGN.md
//! §1.1), so LeaderWorkerSet's own rolling update cannot keep a role up:
//! Tandem decides, replica by replica, which LeaderWorkerSet gets the role's
//! new template (its revision, [`crate::plan::inference_service::revision::role_revision`]) and when.
//! [`pace`] is that decision for one role, from what is observed
//! ([`observe`]) and the clock; it is called by the reconcile pass
//! ([`super::service`]) and so by `tandem render` alike.
//!
//! The rules, per role of `desired` replicas:
//!
//! - A replica is ready when every one of its pods (leader and workers) at
//!   its LeaderWorkerSet's revision is ready.
//! - At least `desired - maxUnavailable` replicas stay ready, and never fewer
//!   than one when one is ready (the floor: no serving role that serves drops
//!   to zero). A replica that is not ready serves nothing, so replacing it
//!   spends no budget: such replicas are replaced first.
//! - With no more replicas than `desired`, an old replica is replaced in
//!   place (its LeaderWorkerSet gets the new template). With more (surge
//!   replicas, or a scale-down), old replicas are removed instead, not ready
//!   first, then in the role's `scaleDown` order (Binpack or Ordered).
//! - New replicas (surge, or a scale-up) are created at the lowest free
//!   indices, as long as the role has at most `desired + maxSurge` replicas,
//!   those still terminating included (they hold their GPUs).
//! - Replicas with an index below `partition` keep their old revision.
//! - When the floor is what stops the rollout (a one-replica role with
//!   `maxSurge: 0`) and nothing is in flight, one replica at the new revision
//!   is added beyond `maxSurge`; the old one goes once it is ready.
//! - A replica the rollout moved to the new revision that is not ready
//!   `progressDeadlineSeconds` after it was moved halts the rollout: nothing
//!   more is created, replaced or removed until the spec changes (going back
//!   to the old template replaces the stuck replicas first, as they are not
//!   ready).
//!
//! When a rollout moves a replica to the new revision, its LeaderWorkerSet
//! carries [`UPDATED_AT`], the time it was moved, which the progress deadline
//! is counted from; later reconciles carry it over unchanged, so a reconcile
//! of an unchanged world writes nothing.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::api::inference_service::{RoleScaleDownPolicy, RollingUpdateOptions};
use crate::plan::shared::children::{REPLICA_INDEX, REVISION, ROLE_NAME};
use crate::plan::shared::pod::Pod;
use crate::plan::victims::Candidate;

/// The annotation on a LeaderWorkerSet the rollout moved to a new revision:
/// when it did (RFC 3339).
pub const UPDATED_AT: &str = "fusioninfer.io/updated-at";

pub const DEFAULT_MAX_UNAVAILABLE: i32 = 1;
pub const DEFAULT_MAX_SURGE: i32 = 0;
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

/// A role's rolling-update budget, resolved against its desired replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub max_unavailable: u32,
    pub max_surge: u32,
    pub partition: u32,
    pub progress_deadline: SignedDuration,
}

/// `value` as a count of `desired` replicas: an int as it is, a percent of
/// `desired` rounded down (`round_up` false) or up. None when it is neither
/// (admission denies it; see [`check`]).
pub fn resolve(value: &IntOrString, desired: i32, round_up: bool) -> Option<i32> {
    match value {
        IntOrString::Int(n) => (*n >= 0).then_some(*n),
        IntOrString::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.parse().ok()?;
            if !(0..=100).contains(&percent) {
                return None;
            }
            let scaled = i64::from(desired.max(0)).saturating_mul(percent);
            let count = if round_up {
                scaled.saturating_add(99) / 100
            } else {
                scaled / 100
            };
            i32::try_from(count).ok()
        }
    }
}

/// The budget of a role with `desired` replicas. Unset fields take their
/// defaults (maxUnavailable 1, maxSurge 0, partition 0, 600 s); when both
/// budgets come to 0 (a percent of a small role), maxUnavailable is 1, as a
/// Deployment does, so that the rollout can move.
pub fn budget(options: Option<&RollingUpdateOptions>, desired: i32) -> Budget {
    let count = |value: Option<&IntOrString>, default: i32, round_up: bool| {
        value
            .and_then(|v| resolve(v, desired, round_up))
            .unwrap_or(default)
    };
    let max_unavailable = count(
        options.and_then(|o| o.max_unavailable.as_ref()),
        DEFAULT_MAX_UNAVAILABLE,
        false,
    );
    let max_surge = count(
        options.and_then(|o| o.max_surge.as_ref()),
        DEFAULT_MAX_SURGE,
        true,
    );
    let to_u32 = |n: i32| u32::try_from(n).unwrap_or(0);
    let deadline = options
        .and_then(|o| o.progress_deadline_seconds)
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    Budget {
        max_unavailable: if max_unavailable == 0 && max_surge == 0 {
            1
        } else {
            to_u32(max_unavailable)
        },
        max_surge: to_u32(max_surge),
        partition: to_u32(options.and_then(|o| o.partition).unwrap_or(0)),
        progress_deadline: SignedDuration::from_secs(i64::from(deadline)),
    }
}

/// One replica of a role as the rollout sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    pub index: u32,
    /// The revision of its LeaderWorkerSet (of its pods, once the
    /// LeaderWorkerSet is gone).
    pub revision: Option<String>,
    /// Its pods at that revision that exist, and those that are ready.
    pub pods: usize,
    pub ready_pods: usize,
    /// Every one of its pods at its revision is ready.
    pub ready: bool,
    /// Its LeaderWorkerSet is being deleted, or gone while pods remain.
    pub terminating: bool,
    /// When the rollout moved it to its revision ([`UPDATED_AT`]).
    pub updated_at: Option<Timestamp>,
}

fn index_of(object: &Value) -> Option<u32> {
    object["metadata"]["labels"][REPLICA_INDEX]
        .as_str()?
        .parse()
        .ok()
}

/// The replicas of `role` from its LeaderWorkerSets and the run's pods by
/// replica; a replica has `nodes` pods.
pub fn observe(
    role: &str,
    nodes: usize,
    leader_worker_sets: &[&Value],
    pods: &super::drain::ReplicaPods<'_>,
) -> Vec<Replica> {
    let of_role = |o: &&Value| o["metadata"]["labels"][ROLE_NAME] == role;
    let count = |index: u32, revision: Option<&str>| {
        let at: Vec<&Pod> = pods
            .of(role, index)
            .iter()
            .copied()
            .filter(|p| !p.deleting() && p.revision.as_deref() == revision)
            .collect();
        // A draining pod is out of traffic: unavailable to the budgets.
        let ready = at.iter().filter(|p| p.ready && !p.draining()).count();
        (at.len(), ready)
    };
    let mut replicas: BTreeMap<u32, Replica> = BTreeMap::new();
    for lws in leader_worker_sets.iter().copied().filter(of_role) {
        let Some(index) = index_of(lws) else {
            continue;
        };
        let revision = lws["metadata"]["labels"][REVISION]
            .as_str()
            .map(str::to_owned);
        let (pods, ready_pods) = count(index, revision.as_deref());
        replicas.insert(
            index,
            Replica {
                index,
                revision,
                pods,
                ready_pods,
                ready: pods == nodes && ready_pods == nodes,
                terminating: !lws["metadata"]["deletionTimestamp"].is_null(),
                updated_at: lws["metadata"]["annotations"][UPDATED_AT]
                    .as_str()
                    .and_then(|t| t.parse().ok()),
            },
        );
    }
    // Pods whose LeaderWorkerSet is gone: a replica on its way out.
    for (index, pod) in pods
        .of_role(role)
        .filter_map(|(index, pods)| Some((index, *pods.first()?)))
    {
        replicas.entry(index).or_insert_with(|| Replica {
            index,
            revision: pod.revision.clone(),
            pods: 0,
            ready_pods: 0,
            ready: false,
            terminating: true,
            updated_at: None,
        });
    }
    replicas.into_values().collect()
}

/// Everything [`pace`] decides from, for one role.
#[derive(Clone, Debug)]
pub struct RoleRollout<'a> {
    pub role: &'a str,
    pub desired: u32,
    /// The revision the role's replicas move to.
    pub update_revision: &'a str,
    pub budget: Budget,
    pub policy: RoleScaleDownPolicy,
    /// The Binpack weights of the replicas (see [`victims::role_candidates`]).
    pub candidates: &'a BTreeMap<u32, Candidate>,
    pub replicas: &'a [Replica],
    pub now: Timestamp,
}

/// What becomes of one replica index in this step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Its LeaderWorkerSet is applied at the update revision. `why` says why
    /// now when the replica moves to it in this step (created, or replaced in
    /// place); `updated_at` is the [`UPDATED_AT`] it carries.
    Apply {
        why: Option<String>,
        updated_at: Option<Timestamp>,
    },
    /// Its LeaderWorkerSet is left exactly as it is (an old revision).
    Keep,
    /// Its LeaderWorkerSet is deleted, for this reason.
    Delete(String),
}

/// The rollout's decision for one role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Paced {
    /// Every live replica index and what becomes of it, new ones included;
    /// terminating replicas are not in it.
    pub steps: BTreeMap<u32, Step>,
    /// Why the role surged beyond maxSurge (the floor), when it did.
    pub floor_surge: Option<String>,
    /// The replica the rollout is halted on and what it waits for, when the
    /// progress deadline has passed.
    pub halted: Option<String>,
    /// What the rollout waits for, when it waits and is not done.
    pub waiting: Option<String>,
    /// Old replicas remain to be replaced, or surge replicas to be removed.
    pub in_progress: bool,
    /// When to look again: the earliest progress deadline still ahead.
    pub deadline: Option<Timestamp>,
}

impl Paced {
    /// Indices whose LeaderWorkerSet stays or comes (not deleted).
    pub fn kept(&self) -> BTreeSet<u32> {
        self.steps
            .iter()
            .filter(|(_, s)| !matches!(s, Step::Delete(_)))
            .map(|(&i, _)| i)
            .collect()
    }
}

/// The order in which old replicas are taken: not ready first, then the
/// role's scale-down order (Binpack: not running, then cheapest, then highest
/// index; Ordered: highest index).
fn take_order(rollout: &RoleRollout<'_>, indices: &[&Replica]) -> Vec<u32> {
    let mut order: Vec<&Replica> = indices.to_vec();
    match rollout.policy {
        RoleScaleDownPolicy::Ordered => {
            order.sort_by_key(|r| (r.ready, Reverse(r.index)));
        }
        RoleScaleDownPolicy::Binpack => {
            order.sort_by_key(|r| {
                let c = rollout
                    .candidates
                    .get(&r.index)
                    .copied()
                    .unwrap_or_else(|| Candidate::without_pods(r.index));
                (r.ready, c.running, c.cost, Reverse(r.index))
            });
        }
    }
    order.into_iter().map(|r| r.index).collect()
}

/// The next step of `rollout`'s role (see the module's rules): the progress
/// deadline first ([`progress_halt`]), then the numbered steps of
/// [`Frame`], each moving the counts of one [`Tally`].
pub fn pace(rollout: &RoleRollout<'_>) -> Paced {
    let update = rollout.update_revision;
    let desired = rollout.desired as usize;
    let budget = rollout.budget;
    let live: Vec<&Replica> = rollout.replicas.iter().filter(|r| !r.terminating).collect();
    let is_new = |r: &Replica| r.revision.as_deref() == Some(update);
    let new: Vec<&Replica> = live.iter().copied().filter(|r| is_new(r)).collect();
    let old: Vec<&Replica> = live.iter().copied().filter(|r| !is_new(r)).collect();
    let (pinned, replaceable): (Vec<&Replica>, Vec<&Replica>) = old
        .iter()
        .copied()
        .partition(|r| r.index < budget.partition);
    let keep_pinned = pinned.len().min(desired);

    let mut paced = Paced::default();
    for r in &new {
        paced.steps.insert(
            r.index,
            Step::Apply {
                why: None,
                updated_at: r.updated_at,
            },
        );
    }
    for r in &old {
        paced.steps.insert(r.index, Step::Keep);
    }
    paced.in_progress = !replaceable.is_empty() || live.len() > desired;
    if let Some(halted) = progress_halt(rollout, &new, &mut paced) {
        paced.halted = Some(halted);
        return paced;
    }

    let ready = live.iter().filter(|r| r.ready).count();
    // The floor: a role that serves keeps one ready replica.
    let floor = usize::from(ready > 0);
    let by_budget = desired.saturating_sub(budget.max_unavailable as usize);
    let frame = Frame {
        rollout,
        desired,
        min_ready: by_budget.max(floor),
        keep_pinned,
        new_target: desired.saturating_sub(keep_pinned),
        // Replicas this rollout moves carry the time they moved.
        stamp: (!old.is_empty()).then_some(rollout.now),
        // Every index `take_order` gives back is a live replica's, so
        // indexing `by_index` with it cannot fail.
        by_index: live.iter().map(|r| (r.index, *r)).collect(),
    };
    let mut tally = Tally {
        ready,
        live: live.len(),
        terminating: rollout.replicas.len().saturating_sub(live.len()),
        acted: false,
        taken: BTreeSet::new(),
    };
    frame.scale_down_old(&replaceable, &pinned, &mut tally, &mut paced);
    frame.scale_down_new(&new, &mut tally, &mut paced);
    let moved = frame.replace_in_place(&replaceable, &mut tally, &mut paced);
    let occupied: BTreeSet<u32> = rollout.replicas.iter().map(|r| r.index).collect();
    let mut free = (0u32..=u32::MAX).filter(|i| !occupied.contains(i));
    frame.add_new(&new, moved, &mut free, &mut tally, &mut paced);
    if floor > by_budget {
        frame.floor_surge(&replaceable, &new, &mut free, &tally, &mut paced);
    }
    paced.waiting = frame.waiting(&paced, &tally);
    paced
}

/// The progress deadline: a replica the rollout moved that is still not
/// ready after it halts everything (the message says why) while the rollout
/// is in progress. Records in `paced` the earliest deadline still to come.
fn progress_halt(rollout: &RoleRollout<'_>, new: &[&Replica], paced: &mut Paced) -> Option<String> {
    let (role, update, budget) = (rollout.role, rollout.update_revision, rollout.budget);
    let mut stuck: Option<String> = None;
    for r in new.iter().filter(|r| !r.ready) {
        let Some(at) = r.updated_at else { continue };
        // A deadline past the end of time never comes.
        let Ok(due) = at.checked_add(budget.progress_deadline) else {
            continue;
        };
        if due <= rollout.now {
            stuck.get_or_insert_with(|| {
                format!(
                    "replica {} of role {role} at revision {update} has {} of its pods, {} ready, since {at}",
                    r.index, r.pods, r.ready_pods
                )
            });
        } else {
            paced.deadline = Some(paced.deadline.map_or(due, |d| d.min(due)));
        }
    }
    stuck.filter(|_| paced.in_progress).map(|what| {
        format!(
            "{what}: not ready within progressDeadlineSeconds {}, so the rollout of role {role} is halted and no further replica is taken down",
            budget.progress_deadline.as_secs()
        )
    })
}

/// The counts one pace's steps move as they act.
struct Tally {
    /// Live replicas that are ready.
    ready: usize,
    /// Live replicas (not terminating).
    live: usize,
    /// Replicas terminating, those this pace deletes included.
    terminating: usize,
    /// Whether a step deleted, replaced or added a replica.
    acted: bool,
    /// Old replicas this pace deletes or replaces.
    taken: BTreeSet<u32>,
}

/// What stays fixed through one pace.
struct Frame<'a> {
    rollout: &'a RoleRollout<'a>,
    desired: usize,
    /// Ready replicas that must stay: maxUnavailable's bound, or the floor.
    min_ready: usize,
    /// Pinned (below the partition) old replicas kept.
    keep_pinned: usize,
    /// Replicas wanted at the update revision.
    new_target: usize,
    /// The time a replica this pace moves carries.
    stamp: Option<Timestamp>,
    by_index: BTreeMap<u32, &'a Replica>,
}

impl Frame<'_> {
    fn is_new(&self, r: &Replica) -> bool {
        r.revision.as_deref() == Some(self.rollout.update_revision)
    }

    /// Step 1: more replicas than desired: old ones go (not ready first, then in
    /// the scale-down order), pinned ones only beyond the desired count.
    fn scale_down_old(
        &self,
        replaceable: &[&Replica],
        pinned: &[&Replica],
        tally: &mut Tally,
        paced: &mut Paced,
    ) {
        let (role, update, budget) = (
            self.rollout.role,
            self.rollout.update_revision,
            self.rollout.budget,
        );
        let (desired, min_ready) = (self.desired, self.min_ready);
        let mut pinned_left = pinned.len();
        for index in take_order(self.rollout, replaceable)
            .into_iter()
            .chain(take_order(self.rollout, pinned))
        {
            if tally.live <= desired {
                break;
            }
            let r = self.by_index[&index];
            let is_pinned = r.index < budget.partition;
            if is_pinned && pinned_left <= self.keep_pinned {
                break;
            }
            if r.ready && tally.ready <= min_ready {
                continue;
            }
            if r.ready {
                tally.ready = tally.ready.saturating_sub(1);
            }
            if is_pinned {
                pinned_left = pinned_left.saturating_sub(1);
            }
            tally.live = tally.live.saturating_sub(1);
            tally.terminating = tally.terminating.saturating_add(1);
            tally.taken.insert(index);
            let (live_count, ready) = (tally.live, tally.ready);
            let from = r.revision.as_deref().unwrap_or("unknown");
            let why = if r.ready {
                format!(
                    "role {role} moves to revision {update}: replica {index} (revision {from}) goes, {live_count} replica(s) remain for {desired} desired and {ready} stay ready, at least {min_ready} must (maxUnavailable {}, maxSurge {})",
                    budget.max_unavailable, budget.max_surge
                )
            } else {
                format!(
                    "role {role} moves to revision {update}: replica {index} (revision {from}) is not ready, so it serves nothing and goes first ({live_count} replica(s) remain for {desired} desired)"
                )
            };
            paced.steps.insert(index, Step::Delete(why));
            tally.acted = true;
        }
    }

    /// Step 1, continued: still more than desired: new replicas beyond their
    /// share go (a scale-down).
    fn scale_down_new(&self, new: &[&Replica], tally: &mut Tally, paced: &mut Paced) {
        let (role, desired) = (self.rollout.role, self.desired);
        if new.len() <= self.new_target || tally.live <= desired {
            return;
        }
        let extra =
            (new.len().saturating_sub(self.new_target)).min(tally.live.saturating_sub(desired));
        for index in take_order(self.rollout, new).into_iter().take(extra) {
            if self.by_index[&index].ready {
                tally.ready = tally.ready.saturating_sub(1);
            }
            tally.live = tally.live.saturating_sub(1);
            tally.terminating = tally.terminating.saturating_add(1);
            paced.steps.insert(
                index,
                Step::Delete(format!(
                    "role {role} is scaled to {desired} replica(s); replica {index} is not kept"
                )),
            );
            tally.acted = true;
        }
    }

    /// Step 2: in place, while no surge replica is there: not ready first (free),
    /// then ready ones as maxUnavailable and the floor allow. Returns how
    /// many were replaced.
    fn replace_in_place(
        &self,
        replaceable: &[&Replica],
        tally: &mut Tally,
        paced: &mut Paced,
    ) -> usize {
        let (role, update, budget) = (
            self.rollout.role,
            self.rollout.update_revision,
            self.rollout.budget,
        );
        let (desired, min_ready) = (self.desired, self.min_ready);
        let mut moved = 0usize;
        if tally.live > desired {
            return moved;
        }
        for index in take_order(self.rollout, replaceable) {
            if tally.taken.contains(&index) {
                continue;
            }
            let r = self.by_index[&index];
            let from = r.revision.as_deref().unwrap_or("unknown");
            let why = if r.ready {
                if tally.ready <= min_ready {
                    continue;
                }
                tally.ready = tally.ready.saturating_sub(1);
                format!(
                    "role {role} moves to revision {update}: replica {index} (revision {from}) is replaced in place, {} of {desired} replicas stay ready and at least {min_ready} must (maxUnavailable {})",
                    tally.ready, budget.max_unavailable
                )
            } else {
                format!(
                    "role {role} moves to revision {update}: replica {index} (revision {from}) is not ready, so it serves nothing and is replaced in place first"
                )
            };
            tally.taken.insert(index);
            moved = moved.saturating_add(1);
            paced.steps.insert(
                index,
                Step::Apply {
                    why: Some(why),
                    updated_at: self.stamp,
                },
            );
            tally.acted = true;
        }
        moved
    }

    /// Step 3: new replicas at the lowest `free` indices, while the role has at
    /// most desired + maxSurge replicas, terminating ones included.
    fn add_new(
        &self,
        new: &[&Replica],
        moved: usize,
        free: &mut impl Iterator<Item = u32>,
        tally: &mut Tally,
        paced: &mut Paced,
    ) {
        let (role, update, budget) = (
            self.rollout.role,
            self.rollout.update_revision,
            self.rollout.budget,
        );
        let desired = self.desired;
        let cap = desired.saturating_add(usize::try_from(budget.max_surge).unwrap_or(usize::MAX));
        let wanted = self
            .new_target
            .saturating_sub(new.len().min(self.new_target).saturating_add(moved));
        let create = wanted.min(cap.saturating_sub(tally.live.saturating_add(tally.terminating)));
        for _ in 0..create {
            let Some(index) = free.next() else { break };
            let live_count = tally.live;
            let why = if live_count >= desired {
                format!(
                    "role {role} moves to revision {update}: a surge replica, {} of at most {cap} (maxSurge {})",
                    live_count.saturating_add(1),
                    budget.max_surge
                )
            } else {
                format!(
                    "role {role} has {live_count} of {desired} replicas: a new one at revision {update}"
                )
            };
            paced.steps.insert(
                index,
                Step::Apply {
                    why: Some(why),
                    updated_at: self.stamp,
                },
            );
            tally.live = tally.live.saturating_add(1);
            tally.acted = true;
        }
    }

    /// Step 4: nothing could move, nothing is in flight, and only the floor keeps
    /// the role's last ready replica: one more at the new revision (called
    /// only when the floor is above maxUnavailable's bound).
    fn floor_surge(
        &self,
        replaceable: &[&Replica],
        new: &[&Replica],
        free: &mut impl Iterator<Item = u32>,
        tally: &Tally,
        paced: &mut Paced,
    ) {
        let (role, update, budget) = (
            self.rollout.role,
            self.rollout.update_revision,
            self.rollout.budget,
        );
        let remaining: Vec<&Replica> = replaceable
            .iter()
            .copied()
            .filter(|r| !tally.taken.contains(&r.index))
            .collect();
        let in_flight = tally.terminating > 0 || new.iter().any(|r| !r.ready);
        let first = take_order(self.rollout, &remaining).first().copied();
        if let Some(last) = first.filter(|_| !tally.acted && !in_flight)
            && let Some(index) = free.next()
        {
            let why = format!(
                "role {role} moves to revision {update} and has one ready replica ({last}), which maxUnavailable {} would take down: replica {index} at revision {update} is added beyond maxSurge {} so that the role keeps serving, and replica {last} goes once it is ready",
                budget.max_unavailable, budget.max_surge
            );
            paced.steps.insert(
                index,
                Step::Apply {
                    why: Some(why.clone()),
                    updated_at: self.stamp,
                },
            );
            paced.floor_surge = Some(why);
        }
    }

    /// What the role waits for: replicas applied this pace that are not
    /// ready at the update revision, or (while in progress) ready replicas.
    fn waiting(&self, paced: &Paced, tally: &Tally) -> Option<String> {
        let (role, update) = (self.rollout.role, self.rollout.update_revision);
        let waiting_for: Vec<String> = paced
            .steps
            .iter()
            .filter(|(i, s)| {
                matches!(s, Step::Apply { .. })
                    && self
                        .by_index
                        .get(i)
                        .is_none_or(|r| !r.ready || !self.is_new(r))
            })
            .map(|(i, _)| i.to_string())
            .collect();
        if !waiting_for.is_empty() {
            Some(format!(
                "role {role}: waiting for replica(s) {} to be ready at revision {update}",
                waiting_for.join(", ")
            ))
        } else if paced.in_progress {
            Some(format!(
                "role {role}: {} of {} replicas ready, at least {} must stay ready",
                tally.ready, self.desired, self.min_ready
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::shared::children::LWS_WORKER_INDEX;
    use proptest::prelude::*;
    use serde_json::json;

    const OLD: &str = "aaaaaaaaaa";
    const NEW: &str = "bbbbbbbbbb";

    fn t0() -> Timestamp {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    /// How long a pod takes to be ready: `(revision, worker) -> steps`, None
    /// for never.
    type Delay = Box<dyn Fn(&str, usize) -> Option<u32>>;

    /// One LeaderWorkerSet of the simulated role.
    #[derive(Clone, Debug)]
    struct Set {
        revision: String,
        /// Steps since it moved to its revision.
        age: u32,
        updated_at: Option<Timestamp>,
    }

    /// A role and a LeaderWorkerSet controller: each step, [`pace`] decides
    /// from the LeaderWorkerSets and pods, its decision is applied at once,
    /// and pods become ready as `delay` says.
    struct Sim {
        nodes: usize,
        desired: u32,
        options: RollingUpdateOptions,
        policy: RoleScaleDownPolicy,
        sets: BTreeMap<u32, Set>,
        now: Timestamp,
        delay: Delay,
        update: String,
        floor_surged: bool,
        events: Vec<String>,
    }

    impl Sim {
        fn new(desired: u32, nodes: usize, options: RollingUpdateOptions) -> Sim {
            let sets = (0..desired)
                .map(|i| {
                    (
                        i,
                        Set {
                            revision: OLD.to_owned(),
                            age: 1000,
                            updated_at: None,
                        },
                    )
                })
                .collect();
            Sim {
                nodes,
                desired,
                options,
                policy: RoleScaleDownPolicy::Ordered,
                sets,
                now: t0(),
                delay: Box::new(|_, _| Some(1)),
                update: NEW.to_owned(),
                floor_surged: false,
                events: Vec::new(),
            }
        }

        fn budget(&self) -> Budget {
            budget(Some(&self.options), self.desired as i32)
        }

        fn objects(&self) -> (Vec<Value>, Vec<Value>) {
            let mut sets = Vec::new();
            let mut pods = Vec::new();
            for (index, set) in &self.sets {
                let labels = json!({ROLE_NAME: "decode", REPLICA_INDEX: index.to_string(), REVISION: set.revision});
                let mut lws =
                    json!({"metadata": {"name": format!("qwen-decode-{index}"), "labels": labels}});
                if let Some(at) = set.updated_at {
                    lws["metadata"]["annotations"] = json!({UPDATED_AT: at.to_string()});
                }
                sets.push(lws);
                for worker in 0..self.nodes {
                    let ready = (self.delay)(&set.revision, worker).is_some_and(|d| d <= set.age);
                    let mut pod_labels = labels.clone();
                    pod_labels[LWS_WORKER_INDEX] = json!(worker.to_string());
                    pods.push(json!({"metadata": {"name": format!("qwen-decode-{index}-{worker}"), "labels": pod_labels},
                        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}));
                }
            }
            (sets, pods)
        }

        fn observed(&self) -> Vec<Replica> {
            let (sets, pods) = self.objects();
            let refs: Vec<&Value> = sets.iter().collect();
            let pods = crate::plan::shared::pod::from_json_all(&pods);
            observe(
                "decode",
                self.nodes,
                &refs,
                &super::super::drain::ReplicaPods::new(&pods),
            )
        }

        fn ready(&self) -> usize {
            self.observed().iter().filter(|r| r.ready).count()
        }

        /// One reconcile; the decision applied.
        fn step(&mut self) -> Paced {
            let replicas = self.observed();
            let candidates = BTreeMap::new();
            let paced = pace(&RoleRollout {
                role: "decode",
                desired: self.desired,
                update_revision: &self.update,
                budget: self.budget(),
                policy: self.policy,
                candidates: &candidates,
                replicas: &replicas,
                now: self.now,
            });
            for (index, step) in &paced.steps {
                match step {
                    Step::Keep => {}
                    Step::Delete(why) => {
                        self.events.push(why.clone());
                        self.sets.remove(index);
                    }
                    Step::Apply { why, updated_at } => {
                        let moves = self
                            .sets
                            .get(index)
                            .is_none_or(|s| s.revision != self.update);
                        if moves {
                            self.events.push(why.clone().expect("a move says why"));
                            self.sets.insert(
                                *index,
                                Set {
                                    revision: self.update.clone(),
                                    age: 0,
                                    updated_at: *updated_at,
                                },
                            );
                        } else {
                            assert_eq!(why, &None, "an unchanged replica has nothing to say");
                        }
                    }
                }
            }
            self.floor_surged |= paced.floor_surge.is_some();
            paced
        }

        fn tick(&mut self) {
            for set in self.sets.values_mut() {
                set.age += 1;
            }
            self.now += SignedDuration::from_secs(10);
        }

        fn done(&self) -> bool {
            let partition = self.budget().partition;
            self.sets.len() == self.desired as usize
                && self.sets.iter().all(|(i, s)| {
                    (s.revision == self.update) != (*i < partition && s.revision != self.update)
                })
                && self.ready() == self.desired as usize
        }

        /// Runs to the end, checking the invariants after every step;
        /// returns the revisions and readiness after each step.
        fn run(&mut self, steps: usize) -> Vec<String> {
            let budget = self.budget();
            let desired = self.desired as usize;
            let floor = usize::from(self.ready() > 0);
            let pinned: BTreeMap<u32, String> = self
                .sets
                .iter()
                .filter(|(i, _)| **i < budget.partition)
                .map(|(i, s)| (*i, s.revision.clone()))
                .collect();
            let mut trace = Vec::new();
            for _ in 0..steps {
                self.step();
                let ready = self.ready();
                let min = desired
                    .saturating_sub(budget.max_unavailable as usize)
                    .max(floor);
                assert!(
                    ready >= min,
                    "{ready} ready, at least {min} must be: {:?}",
                    self.sets
                );
                let extra = usize::from(self.floor_surged);
                assert!(
                    self.sets.len() <= desired + budget.max_surge as usize + extra,
                    "{} replicas for {desired} + {}: {:?}",
                    self.sets.len(),
                    budget.max_surge,
                    self.sets
                );
                for (i, revision) in &pinned {
                    assert_eq!(
                        self.sets.get(i).map(|s| &s.revision),
                        Some(revision),
                        "partition"
                    );
                }
                let observed = self.observed();
                trace.push(
                    observed
                        .iter()
                        .map(|r| {
                            format!(
                                "{}:{}{}",
                                r.index,
                                if r.revision.as_deref() == Some(NEW) {
                                    "new"
                                } else {
                                    "old"
                                },
                                if r.ready { "" } else { "*" }
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                if self.done() {
                    return trace;
                }
                self.tick();
            }
            panic!("no end after {steps} steps: {trace:#?}");
        }
    }

    fn options(unavailable: IntOrString, surge: IntOrString) -> RollingUpdateOptions {
        RollingUpdateOptions {
            max_unavailable: Some(unavailable),
            max_surge: Some(surge),
            ..Default::default()
        }
    }

    #[test]
    fn budgets_resolve_as_a_deployment_does() {
        let percent = |p: &str| IntOrString::String(p.to_owned());
        assert_eq!(resolve(&percent("25%"), 8, false), Some(2));
        assert_eq!(
            resolve(&percent("25%"), 7, false),
            Some(1),
            "unavailable rounds down"
        );
        assert_eq!(
            resolve(&percent("25%"), 7, true),
            Some(2),
            "surge rounds up"
        );
        assert_eq!(resolve(&IntOrString::Int(3), 7, false), Some(3));
        assert_eq!(resolve(&IntOrString::Int(-1), 7, false), None);
        assert_eq!(resolve(&percent("101%"), 7, false), None);
        assert_eq!(resolve(&percent("ten"), 7, false), None);
        let defaults = budget(None, 4);
        assert_eq!(
            (
                defaults.max_unavailable,
                defaults.max_surge,
                defaults.partition
            ),
            (1, 0, 0)
        );
        assert_eq!(defaults.progress_deadline, SignedDuration::from_secs(600));
        // 25% of 2 unavailable is 0 and surge 0: the rollout could not move.
        let small = budget(Some(&options(percent("25%"), IntOrString::Int(0))), 2);
        assert_eq!((small.max_unavailable, small.max_surge), (1, 0));
    }

    #[test]
    fn max_unavailable_one_replaces_one_replica_at_a_time() {
        let mut sim = Sim::new(4, 1, options(IntOrString::Int(1), IntOrString::Int(0)));
        let trace = sim.run(50);
        assert_eq!(
            trace,
            [
                "0:old 1:old 2:old 3:new*",
                "0:old 1:old 2:new* 3:new",
                "0:old 1:new* 2:new 3:new",
                "0:new* 1:new 2:new 3:new",
                "0:new 1:new 2:new 3:new",
            ],
            "the next replica is replaced as soon as the last one is ready"
        );
        assert!(
            sim.events[0]
                .contains("3 of 4 replicas stay ready and at least 3 must (maxUnavailable 1)"),
            "{}",
            sim.events[0]
        );
    }

    #[test]
    fn max_surge_one_adds_a_replica_before_taking_one_down() {
        let mut sim = Sim::new(4, 1, options(IntOrString::Int(0), IntOrString::Int(1)));
        let trace = sim.run(50);
        assert_eq!(trace[0], "0:old 1:old 2:old 3:old 4:new*");
        assert_eq!(
            trace[1], "0:old 1:old 2:old 4:new",
            "the highest old one goes once the surge one is ready"
        );
        assert!(trace.last().unwrap().ends_with(":new"));
        assert!(
            sim.events[0].contains("a surge replica, 5 of at most 5 (maxSurge 1)"),
            "{}",
            sim.events[0]
        );
    }

    #[test]
    fn a_quarter_each_over_eight_replicas() {
        let percent = |p: &str| IntOrString::String(p.to_owned());
        let mut sim = Sim::new(8, 1, options(percent("25%"), percent("25%")));
        let trace = sim.run(50);
        // Two replaced in place and two surge replicas at once.
        assert_eq!(
            trace[0],
            "0:old 1:old 2:old 3:old 4:old 5:old 6:new* 7:new* 8:new* 9:new*"
        );
    }

    #[test]
    fn the_worked_example_decode_four_by_four_nodes() {
        let mut sim = Sim::new(4, 4, options(IntOrString::Int(1), IntOrString::Int(1)));
        // The leader is ready after one step, each worker one step later.
        sim.delay = Box::new(|_, worker| Some(worker as u32 + 1));
        let trace = sim.run(50);
        assert_eq!(trace[0], "0:old 1:old 2:old 3:new* 4:new*");
        // Leader and three workers ready are not a ready replica: nothing
        // more moves until the fourth.
        assert_eq!(trace[1], trace[0]);
        assert_eq!(trace[2], trace[0]);
        assert_eq!(trace[3], trace[0]);
        assert_eq!(
            trace[4], "0:old 1:new* 3:new 4:new",
            "2 goes, 1 is replaced in place"
        );
        assert_eq!(sim.sets.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[test]
    fn binpack_replaces_the_cheapest_replica_first() {
        let sim = Sim::new(4, 1, options(IntOrString::Int(1), IntOrString::Int(0)));
        let replicas = sim.observed();
        let candidates: BTreeMap<u32, Candidate> = [(0, 5), (1, -3), (2, 9), (3, 1)]
            .into_iter()
            .map(|(index, cost)| {
                (
                    index,
                    Candidate {
                        index,
                        running: true,
                        cost,
                        deleting: false,
                    },
                )
            })
            .collect();
        let paced = pace(&RoleRollout {
            role: "decode",
            desired: 4,
            update_revision: NEW,
            budget: sim.budget(),
            policy: RoleScaleDownPolicy::Binpack,
            candidates: &candidates,
            replicas: &replicas,
            now: t0(),
        });
        let moved: Vec<u32> = paced
            .steps
            .iter()
            .filter(|(_, s)| matches!(s, Step::Apply { why: Some(_), .. }))
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(moved, [1], "the lowest deletion cost goes first");
    }

    #[test]
    fn a_partition_keeps_the_lower_replicas_on_the_old_revision() {
        let mut o = options(IntOrString::Int(1), IntOrString::Int(0));
        o.partition = Some(2);
        let mut sim = Sim::new(4, 1, o);
        let trace = sim.run(50);
        assert_eq!(trace.last().unwrap(), "0:old 1:old 2:new 3:new");
    }

    #[test]
    fn a_one_replica_role_without_surge_surges_for_the_floor() {
        let mut sim = Sim::new(1, 1, options(IntOrString::Int(1), IntOrString::Int(0)));
        let trace = sim.run(50);
        assert_eq!(trace, ["0:old 1:new*", "1:new"]);
        assert!(sim.floor_surged);
        assert!(
            sim.events[0].contains("is added beyond maxSurge 0 so that the role keeps serving"),
            "{}",
            sim.events[0]
        );
    }

    #[test]
    fn not_ready_old_replicas_are_replaced_first_and_free() {
        let mut sim = Sim::new(4, 1, options(IntOrString::Int(1), IntOrString::Int(0)));
        // Replica 0 restarts at the old revision: not ready.
        sim.sets.get_mut(&0).unwrap().age = 0;
        let first = sim.step();
        assert!(
            matches!(first.steps[&0], Step::Apply { why: Some(ref w), .. } if w.contains("is not ready, so it serves nothing"))
        );
        assert!(
            matches!(first.steps[&3], Step::Keep),
            "the not-ready one took no budget, but three ready must stay ready"
        );
    }

    #[test]
    fn a_broken_revision_halts_after_the_deadline_and_going_back_restores() {
        let mut o = options(IntOrString::Int(1), IntOrString::Int(0));
        o.progress_deadline_seconds = Some(60);
        let mut sim = Sim::new(4, 1, o);
        sim.delay = Box::new(|revision, _| (revision != NEW).then_some(1));
        let mut halted = None;
        for _ in 0..20 {
            let paced = sim.step();
            let ready = sim.ready();
            assert!(ready >= 3, "{ready}");
            if let Some(h) = paced.halted {
                halted = Some((h, sim.now));
                break;
            }
            sim.tick();
        }
        let (message, at) = halted.expect("the rollout halts");
        assert_eq!(at, t0() + SignedDuration::from_secs(60));
        assert!(
            message.starts_with(
                "replica 3 of role decode at revision bbbbbbbbbb has 1 of its pods, 0 ready"
            ),
            "{message}"
        );
        let revisions: Vec<&str> = sim.sets.values().map(|s| s.revision.as_str()).collect();
        assert_eq!(
            revisions,
            [OLD, OLD, OLD, NEW],
            "halted after maxUnavailable replicas"
        );
        // Halted: nothing more moves.
        sim.tick();
        let again = sim.step();
        assert!(again.halted.is_some());
        assert_eq!(sim.sets.values().filter(|s| s.revision == NEW).count(), 1);

        // Back to the old template: the broken replica goes first.
        sim.update = OLD.to_owned();
        let mut restored = false;
        for _ in 0..10 {
            sim.tick();
            sim.step();
            if sim.sets.values().all(|s| s.revision == OLD) && sim.ready() == 4 {
                restored = true;
                break;
            }
        }
        assert!(restored, "{:?}", sim.sets);
    }

    #[test]
    fn a_scale_change_during_a_rollout_is_honoured() {
        let mut sim = Sim::new(4, 1, options(IntOrString::Int(1), IntOrString::Int(0)));
        sim.step();
        sim.tick();
        sim.desired = 6;
        let up = sim.step();
        let created: Vec<u32> = up
            .steps
            .iter()
            .filter(|(i, _)| **i >= 4)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(created, [4, 5], "new replicas at the new revision");
        assert!(sim.sets[&4].revision == NEW && sim.sets[&5].revision == NEW);
        sim.tick();
        sim.desired = 3;
        let down = sim.step();
        let deleted: Vec<u32> = down
            .steps
            .iter()
            .filter(|(_, s)| matches!(s, Step::Delete(_)))
            .map(|(i, _)| *i)
            .collect();
        assert!(
            deleted.iter().all(|i| *i < 3),
            "old replicas go first: {deleted:?}"
        );
        sim.tick();
        sim.run(50);
        assert_eq!(sim.sets.len(), 3);
    }

    /// The worked example of docs/upgrades.md: decode 4 replicas x 4 nodes,
    /// maxUnavailable 1, maxSurge 1, a reconcile every 10 s, and each new
    /// replica's leader ready 10 s after it moved, each worker 10 s later
    /// than the one before: a Markdown table of every step that moves
    /// something or changes a replica's readiness.
    fn rolling_worked_example() -> String {
        let mut sim = Sim::new(4, 4, options(IntOrString::Int(1), IntOrString::Int(1)));
        sim.delay = Box::new(|_, worker| Some(worker as u32 + 1));
        let show = |sim: &Sim| {
            sim.observed()
                .iter()
                .map(|r| {
                    let revision = if r.revision.as_deref() == Some(NEW) {
                        "new"
                    } else {
                        "old"
                    };
                    if r.ready {
                        format!("{}: {revision}, ready", r.index)
                    } else {
                        format!("{}: {revision}, {}/4 pods ready", r.index, r.ready_pods)
                    }
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        let mut table = "| t | replicas before the step | the step |\n|---|---|---|\n".to_owned();
        let mut last = String::new();
        for second in (0..).step_by(10) {
            let before = show(&sim);
            let existed: BTreeSet<u32> = sim.sets.keys().copied().collect();
            let paced = sim.step();
            let moves: Vec<String> = paced
                .steps
                .iter()
                .filter_map(|(i, step)| match step {
                    Step::Apply { why: Some(_), .. } if existed.contains(i) => {
                        Some(format!("replica {i} gets the new template in place"))
                    }
                    Step::Apply { why: Some(_), .. } => Some(format!(
                        "replica {i} is created at the new revision (surge)"
                    )),
                    Step::Delete(_) => Some(format!("replica {i} (old) is deleted")),
                    _ => None,
                })
                .collect();
            let step = if moves.is_empty() && sim.done() {
                "nothing: every replica runs the new revision and is ready".to_owned()
            } else if moves.is_empty() {
                "nothing: waiting for a ready replica".to_owned()
            } else {
                moves.join("; ")
            };
            if before != last || !moves.is_empty() {
                table.push_str(&format!("| {second}s | {before} | {step} |\n"));
            }
            last = before;
            if sim.done() {
                break;
            }
            sim.tick();
            assert!(second < 1000, "the example ends");
        }
        table
    }

    #[test]
    fn the_rolling_update_example_in_the_docs_is_what_the_plan_does() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/upgrades.md");
        let (begin, end) = (
            "<!-- rolling update example: begin -->\n",
            "<!-- rolling update example: end -->",
        );
        let table = rolling_worked_example();
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        if std::env::var_os("TANDEM_WRITE_DOCS").is_some() {
            let (head, tail) = doc.split_once(begin).expect("the doc has the begin marker");
            let (_, tail) = tail.split_once(end).expect("the doc has the end marker");
            std::fs::write(path, format!("{head}{begin}{table}{end}{tail}")).unwrap();
            return;
        }
        let current = doc
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once(end))
            .map(|(table, _)| table);
        assert_eq!(
            current,
            Some(table.as_str()),
            "docs/upgrades.md is stale: run TANDEM_WRITE_DOCS=1 cargo test --lib plan::inference_service::pacing::tests::the_rolling_update_example"
        );
    }

    fn budget_value() -> impl Strategy<Value = IntOrString> {
        prop_oneof![
            (0i32..4).prop_map(IntOrString::Int),
            (0i32..=100).prop_map(|p| IntOrString::String(format!("{p}%"))),
        ]
    }

    proptest! {
        /// For any role size, budgets, partition, node count and pod
        /// readiness delays: at every step no more than maxUnavailable
        /// replicas are out of service and never the last ready one, no
        /// more than maxSurge extra replicas run (one more only where the
        /// floor surges), the partition keeps its replicas, and the rollout
        /// ends with every replica at the new revision and no surge left.
        #[test]
        fn every_rollout_keeps_the_invariants_and_ends(
            desired in 1u32..9,
            nodes in 1usize..4,
            unavailable in budget_value(),
            surge in budget_value(),
            partition in 0u32..3,
            delays in proptest::collection::vec(0u32..4, 8),
        ) {
            let both_zero = |v: &IntOrString| matches!(v, IntOrString::Int(0)) || v == &IntOrString::String("0%".into());
            prop_assume!(!(both_zero(&unavailable) && both_zero(&surge)));
            let mut o = options(unavailable, surge);
            o.partition = Some(partition.min(desired) as i32);
            let mut sim = Sim::new(desired, nodes, o);
            sim.delay = Box::new(move |revision, worker| {
                let salt = usize::from(revision == NEW) * 3;
                Some(delays[(worker + salt) % delays.len()])
            });
            sim.run(400);
        }

        /// A scale change in the middle of a rollout: it still ends with the
        /// new count at the new revision, never more replicas than the
        /// larger count plus maxSurge (and the floor's one), and a
        /// scale-down removes old replicas before ready new ones (a new one
        /// that is not ready yet may go first when the floor keeps the last
        /// ready old one).
        #[test]
        fn a_rollout_scaled_midway_still_ends(
            desired in 1u32..9,
            scaled in 1u32..9,
            at in 0usize..6,
            unavailable in 0i32..3,
            surge in 0i32..3,
        ) {
            prop_assume!(unavailable + surge > 0);
            let mut sim = Sim::new(desired, 1, options(IntOrString::Int(unavailable), IntOrString::Int(surge)));
            sim.delay = Box::new(|revision, _| Some(if revision == NEW { 2 } else { 1 }));
            for _ in 0..at {
                sim.step();
                sim.tick();
            }
            let ready_new: BTreeSet<u32> = sim
                .observed()
                .iter()
                .filter(|r| r.ready && r.revision.as_deref() == Some(NEW))
                .map(|r| r.index)
                .collect();
            sim.desired = scaled;
            let paced = sim.step();
            let deleted_ready_new = paced
                .steps
                .iter()
                .any(|(i, s)| matches!(s, Step::Delete(_)) && ready_new.contains(i));
            let old_left = sim.sets.values().any(|s| s.revision == OLD);
            prop_assert!(
                !(deleted_ready_new && old_left),
                "a ready new replica went while old ones stay: {:?}",
                sim.sets
            );
            let bound = desired.max(scaled) as usize + surge as usize + usize::from(sim.floor_surged);
            prop_assert!(sim.sets.len() <= bound, "{} > {bound}", sim.sets.len());
            for _ in 0..200 {
                if sim.done() {
                    break;
                }
                sim.tick();
                sim.step();
                let bound = scaled.max(desired) as usize + surge as usize + usize::from(sim.floor_surged);
                prop_assert!(sim.sets.len() <= bound, "{} > {bound}", sim.sets.len());
            }
            prop_assert!(sim.done(), "{:?}", sim.sets);
            prop_assert_eq!(sim.sets.len(), scaled as usize);
        }
    }
}
