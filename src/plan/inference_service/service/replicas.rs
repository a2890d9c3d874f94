//! The second step: each serving role's replicas in each run of the
//! rollout (how many, which indices, their LeaderWorkerSets), the drains
//! of those that leave, and the RollingUpdate's pace.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::diff::{Standings, why_gone};
use super::world::{Index, RoleReplicas, index_of, key, role_replicas, text};
use super::{Desired, Plan};
use crate::api::inference_service::{
    InferenceService, InferenceServiceSpec, Role, RoleScaleDownPolicy,
};
use crate::plan::inference_service::rollout::{self, Members, Rollout, Run};
use crate::plan::inference_service::{
    drain, gang, pacing, placement, pod_groups, recovery, revision, topology, upgrade,
};
use crate::plan::shared::children;
use crate::plan::shared::pod::Pod;
use crate::plan::victims;

/// What the replicas' step leaves to the objects': each role's replica
/// indices in the gang, Kubernetes' PodGroups by name, and each role's
/// replicas now over every revision.
pub(super) struct Replicas {
    pub(super) gang_members: BTreeMap<String, BTreeSet<u32>>,
    /// Kubernetes' PodGroups, by name (the core group is shared).
    pub(super) native_groups: BTreeMap<String, Value>,
    /// What each role's disruption budget keeps available.
    pub(super) replicas_now: BTreeMap<String, usize>,
}

/// Every serving role's replicas in every run of `rollout`: their
/// LeaderWorkerSets and drains go into `plan`; a replica that goes keeps
/// its PodGroup entry until its pods are gone.
pub(super) fn plan_replicas(
    service: &InferenceService,
    world: &Index<'_>,
    rollout: &Rollout,
    plan: &mut Plan,
) -> Result<Replicas, String> {
    let mut gang_members: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    // Kubernetes' PodGroups, by name (the core group is shared).
    let mut native_groups: BTreeMap<String, Value> = BTreeMap::new();
    // Each role's replicas now, over every revision: what its disruption
    // budget keeps available.
    let mut replicas_now: BTreeMap<String, usize> = BTreeMap::new();
    for run in &rollout.runs {
        let spec = run.spec.as_ref().unwrap_or(&service.spec);
        let scheduling = gang::scheduling(spec);
        let replica_pods = world.run_pods(run);
        for role in spec.roles.iter().filter(|r| !r.is_router()) {
            let members = world.members(run, &role.name);
            let role_run = RoleRun::new(
                (service, world, rollout),
                run,
                spec,
                role,
                &scheduling,
                (members, replica_pods),
            );
            // A replica that goes keeps its PodGroup entry until its pods
            // are gone.
            let kept = if role_run.rolling() {
                role_run.paced(plan)?
            } else {
                role_run.replicated(plan)?
            };
            let leaving: BTreeSet<u32> =
                role_run.seen.with_pods.difference(&kept).copied().collect();
            let now = replicas_now.entry(role.name.clone()).or_default();
            *now = now.saturating_add(kept.len()).saturating_add(leaving.len());
            let members = victims::pod_group_indices(&kept, &leaving);
            role_run.native_groups(&members, &mut native_groups)?;
            gang_members
                .entry(role.name.clone())
                .or_default()
                .extend(members);
        }
    }
    Ok(Replicas {
        gang_members,
        native_groups,
        replicas_now,
    })
}

/// One serving role within one run of a rollout: what [`plan`] decides its
/// replicas from.
pub(super) struct RoleRun<'a> {
    service: &'a InferenceService,
    world: &'a Index<'a>,
    rollout: &'a Rollout,
    run: &'a Run,
    /// The spec the run's replicas are made from.
    spec: &'a InferenceServiceSpec,
    role: &'a Role,
    scheduling: &'a gang::Scheduling,
    /// The role's LeaderWorkerSets in the run.
    members: &'a [&'a Value],
    /// The run's pods by replica.
    replica_pods: &'a drain::ReplicaPods<'a>,
    /// The role's LeaderWorkerSets in the run, by replica index (the first
    /// of an index when two claim it).
    by_index: BTreeMap<u32, &'a Value>,
    seen: RoleReplicas,
    /// The role's replicas at full capacity, and at the run's capacity.
    full: i32,
    count: i32,
    policy: RoleScaleDownPolicy,
    /// How a replica that keeps restarting is recreated (the role's
    /// setting now: it is no part of a revision).
    recovery: Option<recovery::Settings>,
    /// The revision the run's replicas of this role are labelled with.
    label: String,
    drain_seconds: i64,
    /// The role's pod templates, made on first use and shared by all its
    /// replicas.
    templates: std::cell::OnceCell<Result<topology::RoleTemplates, String>>,
    /// The templates dressed for the run's revision label, likewise.
    dressed: std::cell::OnceCell<Result<topology::DressedTemplates<'a>, String>>,
}

impl<'a> RoleRun<'a> {
    fn new(
        (service, world, rollout): (&'a InferenceService, &'a Index<'a>, &'a Rollout),
        run: &'a Run,
        spec: &'a InferenceServiceSpec,
        role: &'a Role,
        scheduling: &'a gang::Scheduling,
        (members, replica_pods): (&'a [&'a Value], &'a drain::ReplicaPods<'a>),
    ) -> Self {
        let full = rollout::desired_replicas(service, role);
        // The role as the service's spec has it now (a past revision's role
        // when it is no longer there).
        let current = service
            .spec
            .roles
            .iter()
            .find(|r| r.name == role.name)
            .unwrap_or(role);
        // Side by side, a replica is labelled with its run's (service)
        // revision; otherwise with its role's own.
        let label = match run.members {
            Members::Labelled => run.revision.clone(),
            Members::All | Members::AllKeepingOthers => revision::role_revision(spec, role),
        };
        // While two revisions run side by side their capacities move at
        // the upgrade's surge, which a replica kept for its drain would
        // exceed: their replicas go at once (traffic leaves them by the
        // route's weights first).
        let drain_seconds = if rollout.runs.len() > 1 {
            0
        } else {
            current.drain_seconds()
        };
        let mut by_index = BTreeMap::new();
        for &member in members {
            if let Some(index) = index_of(member) {
                by_index.entry(index).or_insert(member);
            }
        }
        RoleRun {
            service,
            world,
            rollout,
            run,
            spec,
            role,
            scheduling,
            members,
            replica_pods,
            by_index,
            seen: role_replicas(role, members, replica_pods),
            full,
            count: upgrade::replicas_for(full, run.capacity),
            policy: current.scale_down_policy(),
            recovery: recovery::Settings::of(current),
            label,
            drain_seconds,
            templates: std::cell::OnceCell::new(),
            dressed: std::cell::OnceCell::new(),
        }
    }

    /// The Kubernetes PodGroup of replica `index` ([`pod_groups::group_of`]).
    fn pod_group(&self, index: u32) -> Result<pod_groups::Group, String> {
        pod_groups::group_of(
            children::service_name(self.service),
            self.spec,
            &self.run.naming,
            self.role,
            index,
            placement::group_topology_key(self.spec, self.role, index),
        )
    }

    /// With Kubernetes' gang, adds the PodGroups of replicas `indices` to
    /// `groups` (by name: the core group is shared).
    fn native_groups(
        &self,
        indices: &BTreeSet<u32>,
        groups: &mut BTreeMap<String, Value>,
    ) -> Result<(), String> {
        if self.scheduling.backend != Some(gang::Backend::Kubernetes) {
            return Ok(());
        }
        for &index in indices {
            let group = self.pod_group(index)?;
            groups
                .entry(group.name.clone())
                .or_insert_with(|| pod_groups::pod_group(self.service, &group));
        }
        Ok(())
    }

    /// The LeaderWorkerSet of replica `index`, at revision label `label`.
    fn leader_worker_set(&self, index: u32, label: &str) -> Result<Value, String> {
        let per_replica = self.replica_annotations(index);
        let group = match self.scheduling.backend {
            Some(gang::Backend::Kubernetes) => Some(self.pod_group(index)?.name),
            _ => None,
        };
        let affinity = placement::replica_affinity(
            self.spec,
            self.scheduling.backend,
            children::service_name(self.service),
            (self.role, index, label),
        );
        let replica = topology::ReplicaPlacement {
            annotations: Some(&per_replica),
            pod_group: group.as_deref(),
            affinity: affinity.as_ref(),
            exclusive_topology: placement::exclusive_topology(
                self.spec,
                self.scheduling.backend,
                self.role,
            ),
        };
        // The run's own label (nearly every replica) is dressed once.
        if label == self.label {
            let dressed = self
                .dressed
                .get_or_init(|| {
                    Ok(self
                        .templates()?
                        .dressed(self.service, self.role, label, &self.placement()))
                })
                .as_ref()
                .map_err(Clone::clone)?;
            return Ok(self.restarting(
                dressed.leader_worker_set(index, &self.run.naming, replica),
                index,
            ));
        }
        Ok(self.restarting(
            self.templates()?
                .dressed(self.service, self.role, label, &self.placement())
                .leader_worker_set(index, &self.run.naming, replica),
            index,
        ))
    }

    /// The LeaderWorkerSet of replica `index` with the group restart the
    /// installed LWS allows, or none under a recovery setting, an existing
    /// one's kept ([`topology::set_group_restart`]).
    fn restarting(&self, mut object: Value, index: u32) -> Value {
        topology::set_group_restart(
            &mut object,
            topology::group_restart(self.world.installed),
            self.at_index(index),
            self.recovery.is_some(),
        );
        object
    }

    /// Replica `index`'s recovery ([`recovery::decide`]) written onto its
    /// LeaderWorkerSet `object`: the record it carries, and no pods while
    /// it is held; its Event, its line in the role's status and when to
    /// look again go into `plan`. Returns why it is held, if it is.
    fn recover(&self, object: &mut Value, index: u32, plan: &mut Plan) -> Option<String> {
        let revision = revision::of(object).unwrap_or(&self.label).to_owned();
        let replica = recovery::Replica {
            role: &self.role.name,
            index,
            nodes: usize::try_from(self.role.node_count()).unwrap_or(1),
            revision: &revision,
        };
        let decision = recovery::decide(
            self.recovery.as_ref(),
            &replica,
            self.at_index(index),
            self.replica_pods.of(&self.role.name, index),
            self.rollout.now,
        );
        if let Some(record) = &decision.record {
            annotate(object, recovery::RECORD, &record_text(record));
        }
        if decision.held() {
            object["spec"]["replicas"] = Value::from(0);
        }
        let held = decision.report(&replica);
        if let Some(why) = &held {
            plan.held.entry(self.role.name.clone()).or_default().insert(
                index,
                (decision.standing == recovery::Standing::Failed, why.clone()),
            );
        }
        if let Some(wake) = decision.wake {
            plan.recovery_wake = Some(plan.recovery_wake.map_or(wake, |w| w.min(wake)));
        }
        plan.events.extend(decision.event);
        held
    }

    fn templates(&self) -> Result<&topology::RoleTemplates, String> {
        self.templates
            .get_or_init(|| topology::RoleTemplates::new(self.role))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The run's LeaderWorkerSet of this role at `index`.
    fn at_index(&self, index: u32) -> Option<&'a Value> {
        self.by_index.get(&index).copied()
    }

    /// What every replica's pods of the role share: the scheduler and, when
    /// gang-scheduled, the service's PodGroup.
    fn placement(&self) -> topology::Placement {
        topology::Placement {
            scheduler_name: self.scheduling.scheduler_name.clone(),
            annotations: if self.scheduling.backend == Some(gang::Backend::Volcano) {
                gang::group_annotations(children::service_name(self.service))
            } else {
                BTreeMap::new()
            },
            priority_class_name: self.scheduling.pod_priority_class.clone(),
            spread: placement::spread(self.spec, children::service_name(self.service), self.role),
        }
    }

    /// What the pods of replica `index` alone carry: their Volcano task.
    fn replica_annotations(&self, index: u32) -> BTreeMap<String, String> {
        if self.scheduling.backend == Some(gang::Backend::Volcano) {
            gang::task_annotations(&self.role.name, index)
        } else {
            BTreeMap::new()
        }
    }

    /// The pods of the role in the run.
    fn role_pods(&self) -> impl Iterator<Item = &'a Pod> {
        self.replica_pods
            .of_role(&self.role.name)
            .flat_map(|(_, pods)| pods.iter().copied())
    }

    /// A role rolls while a replica or a pod of it runs another revision
    /// (the old pods of the last replaced replica included).
    fn rolling(&self) -> bool {
        self.run.members == Members::All
            && self
                .members
                .iter()
                .copied()
                .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
                .any(|o| revision::of(o) != Some(self.label.as_str()))
            || self
                .role_pods()
                .any(|p| p.revision.as_deref() != Some(self.label.as_str()))
    }

    /// A rolling role: its replicas step as [`pacing::pace`] says, each
    /// replaced or deleted replica draining first. Returns the indices kept.
    fn paced(&self, plan: &mut Plan) -> Result<BTreeSet<u32>, String> {
        let role = self.role;
        let nodes = usize::try_from(role.node_count()).unwrap_or(1);
        let replicas = pacing::observe(&role.name, nodes, self.members, self.replica_pods);
        let current = self
            .service
            .spec
            .roles
            .iter()
            .find(|r| r.name == role.name)
            .unwrap_or(role);
        let options = self.service.spec.rolling_update_for(current);
        let mut paced = pacing::pace(&pacing::RoleRollout {
            role: &role.name,
            desired: u32::try_from(self.count).unwrap_or(0),
            update_revision: &self.label,
            budget: pacing::budget(Some(&options), self.count),
            policy: self.policy,
            candidates: &self.seen.candidates,
            replicas: &replicas,
            now: self.rollout.now,
        });
        for (&index, step) in &paced.steps {
            self.paced_step(index, step, plan)?;
        }
        // The next reconcile looks at this role again only while an
        // old replica or old pods remain: the status says it rolls
        // only then, so that it stays the same when nothing changes.
        let rolls_on = paced.steps.values().any(|s| *s == pacing::Step::Keep)
            || self
                .role_pods()
                .any(|p| p.revision.as_deref() != Some(self.label.as_str()));
        if !rolls_on {
            paced.waiting = None;
        }
        let kept = paced.kept();
        plan.paced.insert(role.name.clone(), paced);
        Ok(kept)
    }

    /// Replica `index` (its LeaderWorkerSet `existing`) leaves traffic
    /// for its drain before it `goes`: None while the drain holds it (kept,
    /// its pods marked, in `plan`), else how it left.
    fn after_drain(
        &self,
        index: u32,
        existing: &Value,
        goes: &str,
        plan: &mut Plan,
    ) -> Option<drain::Leave> {
        let replica = self.replica_pods.of(&self.role.name, index);
        let left = drain::leave(replica, self.drain_seconds, self.rollout.now);
        let held = keep_draining(
            (&self.role.name, index),
            existing,
            &left,
            (self.drain_seconds, goes),
            plan,
        );
        (!held).then_some(left)
    }

    /// One index's step of a rolling role.
    fn paced_step(&self, index: u32, step: &pacing::Step, plan: &mut Plan) -> Result<(), String> {
        let role = self.role;
        match step {
            pacing::Step::Keep => {
                if let Some(existing) = self.at_index(index) {
                    plan.kept.insert(key(existing));
                }
            }
            pacing::Step::Delete(why) => {
                if let Some(existing) = self.at_index(index) {
                    let Some(left) = self.after_drain(index, existing, "is deleted", plan) else {
                        return Ok(());
                    };
                    let replica = self.replica_pods.of(&role.name, index);
                    let why = match left {
                        drain::Leave::Delete(drained) if drain::draining(replica) => {
                            format!("{why}; {drained}")
                        }
                        _ => why.clone(),
                    };
                    plan.delete_notes
                        .insert(text(&existing["metadata"]["name"]).to_owned(), why);
                }
            }
            pacing::Step::Apply { why, updated_at } => {
                // A replica replaced in place leaves traffic for
                // its drain before its LeaderWorkerSet changes.
                if let Some(existing) = self.at_index(index).filter(|o| {
                    revision::of(o) != Some(self.label.as_str())
                        && o["metadata"]["deletionTimestamp"].is_null()
                }) && self
                    .after_drain(index, existing, "is replaced by the update revision", plan)
                    .is_none()
                {
                    return Ok(());
                }
                let mut object = self.leader_worker_set(index, &self.label)?;
                if let Some(at) = updated_at {
                    annotate(&mut object, pacing::UPDATED_AT, &at.to_string());
                }
                let held = self.recover(&mut object, index, plan);
                let why = why.clone().unwrap_or_else(|| {
                    format!(
                        "replica {index} of role {} at revision {} ({} node(s))",
                        role.name,
                        self.label,
                        role.node_count()
                    )
                });
                plan.desired.push(Desired {
                    object,
                    why: with_hold(why, held),
                });
            }
        }
        Ok(())
    }

    /// A role that does not roll: the indices [`victims::keep`] keeps at the
    /// run's capacity (a draining replica first to go, so the choice stays
    /// the same for the whole drain), the others drained. Returns the
    /// indices kept.
    fn replicated(&self, plan: &mut Plan) -> Result<BTreeSet<u32>, String> {
        let role = self.role;
        let seen = &self.seen;
        let mut candidates = seen.candidates.clone();
        for (index, candidate) in &mut candidates {
            if drain::draining(self.replica_pods.of(&role.name, *index)) {
                candidate.running = false;
                candidate.cost = i64::MIN;
            }
        }
        let indices = victims::keep(
            &seen.existing,
            &seen.deleting,
            usize::try_from(self.count).unwrap_or(0),
            self.policy,
            &candidates,
        );
        drain_replicas(
            self.service,
            self.world,
            self.rollout,
            &DrainScope {
                role: &role.name,
                seconds: self.drain_seconds,
                pods: self.replica_pods,
                kept: &indices,
                live: &seen.existing.difference(&seen.deleting).copied().collect(),
                replica: &|index| self.at_index(index),
            },
            plan,
        );
        for &index in &indices {
            self.replica(index, plan)?;
        }
        Ok(indices)
    }

    /// The LeaderWorkerSet of kept replica `index` of a role that does not
    /// roll, or why it is left alone or cannot be made.
    fn replica(&self, index: u32, plan: &mut Plan) -> Result<(), String> {
        let (role, run, label) = (self.role, self.run, self.label.as_str());
        let left_alone = match (run.members, &run.spec) {
            (Members::AllKeepingOthers, _) => self
                .at_index(index)
                .filter(|o| revision::of(o) != Some(label)),
            (Members::Labelled, None) => self.at_index(index),
            _ => None,
        };
        if let Some(existing) = left_alone {
            plan.kept.insert(key(existing));
            return Ok(());
        }
        if run.spec.is_none() {
            plan.problems.push(format!(
                "replica {index} of role {} in revision {} cannot be made: the revision's pod templates are not recorded",
                role.name, run.revision
            ));
            return Ok(());
        }
        let share = if run.capacity < 100 {
            format!(", {}% of {}", run.capacity, self.full)
        } else {
            String::new()
        };
        let mut object = self.leader_worker_set(index, label)?;
        // The time a past rollout moved this replica stays as it is.
        if let Some(at) = self
            .at_index(index)
            .filter(|o| run.members == Members::All && revision::of(o) == Some(label))
            .and_then(|o| o["metadata"]["annotations"][pacing::UPDATED_AT].as_str())
        {
            annotate(&mut object, pacing::UPDATED_AT, at);
        }
        let held = self.recover(&mut object, index, plan);
        let why = format!(
            "replica {index} of role {} ({} of {} replicas{share}, {} node(s) each, revision {label})",
            role.name,
            index.saturating_add(1),
            self.count,
            role.node_count(),
        );
        plan.desired.push(Desired {
            object,
            why: with_hold(why, held),
        });
        Ok(())
    }
}

/// Sets annotation `key` of `object` to `value`, keeping the others.
fn annotate(object: &mut Value, key: &str, value: &str) {
    if !object["metadata"]["annotations"].is_object() {
        object["metadata"]["annotations"] = Value::Object(serde_json::Map::new());
    }
    object["metadata"]["annotations"][key] = Value::from(value);
}

/// A replica's reason to be written, with why it is held, if it is.
fn with_hold(why: String, held: Option<String>) -> String {
    match held {
        Some(held) => format!("{why}; held with no pods: {held}"),
        None => why,
    }
}

/// A recovery record as its annotation carries it.
fn record_text(record: &recovery::Record) -> String {
    // A struct of strings, numbers and a list of strings: it serializes.
    serde_json::to_string(record).unwrap_or_default()
}

/// One role's replicas as the drain sees them.
pub(super) struct DrainScope<'a, 'b> {
    role: &'a str,
    seconds: i64,
    /// The pods of the role's run, by replica.
    pods: &'b drain::ReplicaPods<'a>,
    /// The indices the plan keeps.
    kept: &'a BTreeSet<u32>,
    /// The indices with a LeaderWorkerSet that is not being deleted.
    live: &'a BTreeSet<u32>,
    /// The LeaderWorkerSet of an index.
    replica: &'b dyn Fn(u32) -> Option<&'a Value>,
}

/// The drain of one role (see [`drain`]): a kept replica that was draining
/// goes back into traffic (with an Event), a live replica that is not kept
/// leaves traffic and is kept until its deadline, then deleted with a note
/// saying it drained.
pub(super) fn drain_replicas(
    service: &InferenceService,
    world: &Index<'_>,
    rollout: &Rollout,
    scope: &DrainScope<'_, '_>,
    plan: &mut Plan,
) {
    let role = scope.role;
    for &index in scope.kept {
        let back = drain::revive(scope.pods.of(role, index));
        if back.is_empty() {
            continue;
        }
        plan.events.push(rollout::Event {
            warning: false,
            reason: "Revived",
            note: format!(
                "replica {index} of role {role} was draining and is back in traffic instead of a new replica being made (no second model load)"
            ),
        });
        for object in back {
            plan.desired.push(Desired {
                object,
                why: format!("replica {index} of role {role} returns to traffic"),
            });
        }
    }
    let mut standings = Standings::default();
    for &index in scope.live.difference(scope.kept) {
        let Some(existing) = (scope.replica)(index) else {
            continue;
        };
        let name = text(&existing["metadata"]["name"]).to_owned();
        let pods = scope.pods.of(role, index);
        match drain::leave(pods, scope.seconds, rollout.now) {
            drain::Leave::Delete(why) if drain::draining(pods) => {
                let gone = why_gone(service, rollout, existing, world, &mut standings);
                plan.delete_notes.insert(name, format!("{gone}; {why}"));
            }
            left => {
                keep_draining(
                    (role, index),
                    existing,
                    &left,
                    (scope.seconds, "is deleted"),
                    plan,
                );
            }
        }
    }
}

/// When `left` is a drain: keeps the replica's LeaderWorkerSet `existing` as
/// it is until the deadline, marks its pods, and returns true.
pub(super) fn keep_draining(
    (role, index): (&str, u32),
    existing: &Value,
    left: &drain::Leave,
    (seconds, then): (i64, &str),
    plan: &mut Plan,
) -> bool {
    let drain::Leave::Drain {
        pods: marks,
        deadline,
        ..
    } = left
    else {
        return false;
    };
    plan.kept.insert(key(existing));
    plan.draining
        .entry(role.to_owned())
        .or_default()
        .insert(index);
    plan.drain_deadline = Some(plan.drain_deadline.map_or(*deadline, |d| d.min(*deadline)));
    for object in marks {
        plan.desired.push(Desired {
            object: object.clone(),
            why: format!(
                "replica {index} of role {role} leaves traffic and {then} at {deadline} (drain.seconds {seconds})"
            ),
        });
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::*;
    use crate::plan::inference_service::drain;
    use serde_json::json;

    #[test]
    fn one_leader_worker_set_per_replica_of_each_serving_role() {
        let plan = desired(&service(3), &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        assert_eq!(
            names(&plan),
            ["qwen-inference-0", "qwen-inference-1", "qwen-inference-2"]
        );
        assert!(
            plan[1]
                .why
                .starts_with("replica 1 of role inference (2 of 3 replicas, 1 node(s) each")
        );
    }

    #[test]
    fn scale_down_drains_the_chosen_replicas_before_deleting_them() {
        // Ordered removes the highest, 2 and 3; Binpack the cheapest, 0 and 2.
        for (policy, costs, victims) in [
            ("Ordered", ["0", "0", "0", "0"], [2, 3]),
            ("Binpack", ["0", "100", "0", "75"], [0, 2]),
        ] {
            let mut cluster = Cluster::new(&costs);
            cluster.pass(&scaled(4, policy, None), 0);
            assert_eq!(cluster.lws().len(), 4);
            let survivors_before: Vec<Value> = cluster
                .children
                .iter()
                .filter(|c| {
                    !victims
                        .iter()
                        .any(|v| c["metadata"]["name"] == format!("qwen-inference-{v}").as_str())
                })
                .cloned()
                .collect();

            let two = scaled(2, policy, None);
            let first = cluster.pass(&two, 100);
            assert!(
                first.delete.is_empty(),
                "{policy}: nothing is deleted at first"
            );
            assert_eq!(
                applied_pods(&first),
                victims
                    .iter()
                    .map(|v| (format!("qwen-inference-{v}-0"), drain::DRAINING.to_owned()))
                    .collect::<Vec<_>>(),
                "{policy}: the chosen replicas leave traffic"
            );
            assert_eq!(first.apply.len(), 2, "{policy}: only the pods are written");
            assert_eq!(first.requeue, Some(std::time::Duration::from_secs(30)));
            assert_eq!(first.status.components["inference"].draining_replicas, 2);
            assert!(
                first.apply[0]
                    .note
                    .contains("is deleted at 1970-01-01T00:02:10Z")
            );

            let within = cluster.pass(&two, 120);
            assert!(
                within.apply.is_empty() && within.delete.is_empty(),
                "{policy}: {within:?}"
            );
            assert_eq!(within.requeue, Some(std::time::Duration::from_secs(10)));

            let after = cluster.pass(&two, 130);
            assert!(after.apply.is_empty(), "{policy}");
            let mut deleted: Vec<&str> = after
                .delete
                .iter()
                .map(|d| d.object["metadata"]["name"].as_str().unwrap())
                .collect();
            deleted.sort_unstable();
            let mut expected: Vec<String> = victims
                .iter()
                .map(|v| format!("qwen-inference-{v}"))
                .collect();
            expected.sort_unstable();
            assert_eq!(deleted, expected, "{policy}: the drained replicas go");
            assert!(
                after.delete[0]
                    .note
                    .contains("out of traffic for its drain of 30s"),
                "{}",
                after.delete[0].note
            );
            assert_eq!(
                cluster.children, survivors_before,
                "{policy}: survivors unchanged"
            );
            assert_eq!(after.status.components["inference"].draining_replicas, 0);
        }
    }

    #[test]
    fn scaling_back_up_during_a_drain_revives_the_draining_replicas() {
        let mut cluster = Cluster::new(&[]);
        cluster.pass(&scaled(4, "Ordered", None), 0);
        let drained = cluster.pass(&scaled(2, "Ordered", None), 100);
        assert_eq!(applied_pods(&drained).len(), 2);
        let back = cluster.pass(&scaled(4, "Ordered", None), 110);
        assert_eq!(
            applied_pods(&back),
            [
                ("qwen-inference-2-0".to_owned(), drain::SERVING.to_owned()),
                ("qwen-inference-3-0".to_owned(), drain::SERVING.to_owned())
            ]
        );
        assert_eq!(
            back.apply.len(),
            2,
            "no LeaderWorkerSet is created or changed"
        );
        assert!(back.delete.is_empty());
        let revived: Vec<&str> = back
            .events
            .iter()
            .filter(|e| e.reason == "Revived")
            .map(|e| e.note.as_str())
            .collect();
        assert_eq!(revived.len(), 2);
        assert!(
            revived[0]
                .starts_with("replica 2 of role inference was draining and is back in traffic")
        );
        assert_eq!(cluster.lws().len(), 4);
        assert!(cluster.pods.iter().all(|p| !drain::is_draining(p)));
        assert!(
            cluster
                .pods
                .iter()
                .all(|p| p["metadata"]["annotations"][drain::DRAIN_STARTED].is_null())
        );
        let quiet = cluster.pass(&scaled(4, "Ordered", None), 200);
        assert!(quiet.apply.is_empty() && quiet.delete.is_empty() && quiet.requeue.is_none());
    }

    #[test]
    fn a_rolling_update_drains_each_replaced_replica_before_its_leader_worker_set_changes() {
        let mut cluster = Cluster::new(&[]);
        let old = scaled(2, "Ordered", None);
        cluster.pass(&old, 0);
        let mut value = serde_json::to_value(&old).unwrap();
        value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("v2");
        let new: InferenceService = serde_json::from_value(value).unwrap();
        let revision_of = |cluster: &Cluster, index: u32| {
            cluster
                .children
                .iter()
                .find(|c| c["metadata"]["name"] == format!("qwen-inference-{index}").as_str())
                .map(|c| c["metadata"]["labels"][children::REVISION].clone())
                .unwrap()
        };
        let old_revision = revision_of(&cluster, 0);
        // When each replica's pods left traffic, and when its LeaderWorkerSet
        // moved to the new revision.
        let mut drained: BTreeMap<u32, i64> = BTreeMap::new();
        let mut replaced: BTreeMap<u32, i64> = BTreeMap::new();
        let mut t = 100;
        while replaced.len() < 2 {
            assert!(t < 1000, "the update finishes");
            let pass = cluster.pass(&new, t);
            for (name, traffic) in applied_pods(&pass) {
                if traffic == drain::DRAINING {
                    let index: u32 = name
                        .trim_start_matches("qwen-inference-")
                        .trim_end_matches("-0")
                        .parse()
                        .unwrap();
                    assert_eq!(
                        revision_of(&cluster, index),
                        old_revision,
                        "a replica leaving traffic keeps its LeaderWorkerSet"
                    );
                    drained.entry(index).or_insert(t);
                }
            }
            for index in [0, 1] {
                if revision_of(&cluster, index) != old_revision {
                    replaced.entry(index).or_insert(t);
                }
            }
            t += 10;
        }
        for (index, at) in &replaced {
            let started = drained[index];
            assert!(
                at - started >= 30,
                "replica {index} was out of traffic from {started} and changed at {at}"
            );
        }
        let times: BTreeSet<i64> = replaced.values().copied().collect();
        assert_eq!(times.len(), 2, "one replica at a time: {replaced:?}");
    }

    #[test]
    fn a_zero_drain_deletes_at_once() {
        let mut cluster = Cluster::new(&[]);
        cluster.pass(&scaled(3, "Ordered", Some(0)), 0);
        let pass = cluster.pass(&scaled(1, "Ordered", Some(0)), 10);
        assert!(pass.apply.is_empty());
        assert_eq!(pass.delete.len(), 2);
    }
}
