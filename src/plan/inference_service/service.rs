//! Everything an InferenceService should have, from its spec and the replica
//! indices that exist: the plan the reconciler applies and `render` prints.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::rollout::{self, Members, Rollout, Run};
use super::status::{self, Observed};
use super::{
    dependencies, disruption, drain, gang, names, pacing, placement, pod_groups, revision, router,
    topology, traffic, upgrade,
};
use crate::api::Findings;
use crate::api::ScaleView;
use crate::api::inference_service::{
    self, ComponentType, GangPolicy, InferenceService, InferenceServiceSpec,
    InferenceServiceStatus, Role, RoleScaleDownPolicy, ScaleViewLock, UpgradeType,
};
use crate::plan::shared::child_kinds::{ChildKind, DEPLOYMENT, LEADER_WORKER_SET};
use crate::plan::shared::children;
use crate::plan::shared::installed::Installed;
pub use crate::plan::shared::write::{
    APPLIED_HASH, Apply, Change, Delete, change_of, contains, stamp, up_to_date,
};
use crate::plan::{scale_view, victims};

/// An object the plan wants, and why (the reconciler's Event says it).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub object: Value,
    pub why: String,
}

/// Plan options that come from the operator's flags, not from the object.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub router: router::RouterOptions,
}

/// Everything that makes an InferenceService unusable: the single-object rules
/// of `api::inference_service`, the router's rules, the placement its gang
/// backend cannot carry out on any cluster, and names of children that
/// Kubernetes would refuse. The webhook and the reconciler both call this, so
/// the webhook rejects exactly what the controller could not apply.
pub fn validate(service: &InferenceService) -> Findings {
    let name = children::service_name(service);
    let mut findings = inference_service::validate(&service.spec);
    findings.extend(router::check(&service.spec));
    findings.extend(names::check(name, &service.spec));
    findings.extend(traffic::check(&service.spec));
    findings.extend(placement::check(&service.spec));
    findings
}

/// The replicas of one role as the world shows them.
struct RoleReplicas {
    /// Indices with a LeaderWorkerSet (terminating ones included).
    existing: BTreeSet<u32>,
    /// Indices on their way out: LWS terminating, or gone with pods left.
    deleting: BTreeSet<u32>,
    /// Indices that still have pods.
    with_pods: BTreeSet<u32>,
    /// Each replica's deletion cost and readiness, for Binpack.
    candidates: BTreeMap<u32, victims::Candidate>,
}

/// The replicas of `role` among `leader_worker_sets` (those of one run) and
/// `pods` (the run's pods).
fn role_replicas(role: &Role, leader_worker_sets: &[&Value], pods: &[Value]) -> RoleReplicas {
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
    let with_pods: BTreeSet<u32> = victims::candidates(pods, &role.name).into_keys().collect();
    let nodes = usize::try_from(role.node_count()).unwrap_or(1);
    RoleReplicas {
        deleting: victims::being_deleted(&existing, &terminating, &with_pods),
        candidates: victims::role_candidates(pods, &role.name, nodes, &existing),
        existing,
        with_pods,
    }
}

fn index_of(object: &Value) -> Option<u32> {
    object["metadata"]["labels"][children::REPLICA_INDEX]
        .as_str()?
        .parse()
        .ok()
}

/// The LeaderWorkerSets of the service that belong to `run`.
fn members<'a>(run: &Run, world: &World<'a>) -> Vec<&'a Value> {
    world
        .children
        .iter()
        .filter(|o| ChildKind::of(o) == Some(LEADER_WORKER_SET))
        .filter(|o| run.members != Members::Labelled || revision::of(o) == Some(&run.revision))
        .collect()
}

/// The pods of the service that belong to `run`.
fn run_pods(run: &Run, world: &World<'_>) -> Vec<Value> {
    world
        .pods
        .iter()
        .filter(|p| run.members != Members::Labelled || revision::of(p) == Some(&run.revision))
        .cloned()
        .collect()
}

/// What the plan wants: objects to apply, existing objects to leave exactly as
/// they are (a replica that keeps its revision under strategy None, a revision
/// whose record is gone, a revision's record), and what it could not do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub desired: Vec<Desired>,
    pub kept: BTreeSet<(String, String, String)>,
    pub problems: Vec<String>,
    /// Why a RollingUpdate removes a replica, by LeaderWorkerSet name.
    pub delete_notes: BTreeMap<String, String>,
    /// The RollingUpdate step of each role that is moving to a new revision.
    pub paced: BTreeMap<String, pacing::Paced>,
    /// The replicas out of traffic before they are deleted, by role.
    pub draining: BTreeMap<String, BTreeSet<u32>>,
    /// The earliest drain deadline: the plan changes then.
    pub drain_deadline: Option<jiff::Timestamp>,
    /// Replicas put back into traffic instead of new ones being made.
    pub events: Vec<rollout::Event>,
    /// What the service needs of the installed dependencies and lacks, and
    /// the gang layout it gets.
    pub dependencies: Option<dependencies::Dependencies>,
}

fn key(object: &Value) -> (String, String, String) {
    let (a, k, n) = identity(object);
    (a.to_owned(), k.to_owned(), n.to_owned())
}

/// Everything the service should have, given what the world has now and the
/// time (upgrades step with it): see [`plan`].
pub fn desired(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> Result<Vec<Desired>, String> {
    let rollout = rollout::plan(
        service,
        world.children,
        world.pods,
        world.unavailable,
        now.0,
    );
    Ok(plan(service, world, options, &rollout)?.desired)
}

/// Everything the service should have for `rollout`'s revisions: for each
/// revision and serving role, the replica indices it keeps at its capacity
/// (Ordered: the lowest; Binpack: the cheapest to lose go), the router's
/// objects, an upgrade's Gateway, route, per-revision Services and records,
/// and, for the PodGroup, the replicas whose pods are still there.
pub fn plan(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    rollout: &Rollout,
) -> Result<Plan, String> {
    let mut plan = Plan::default();
    let decided = dependencies::decide(&service.spec, world.installed);
    let mut gang_members: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    // Kubernetes' PodGroups, by name (the core group is shared).
    let mut native_groups: BTreeMap<String, Value> = BTreeMap::new();
    // Each role's replicas now, over every revision: what its disruption
    // budget keeps available.
    let mut replicas_now: BTreeMap<String, usize> = BTreeMap::new();
    for run in &rollout.runs {
        let spec = run.spec.as_ref().unwrap_or(&service.spec);
        let scheduling = gang::scheduling(spec);
        let members = members(run, world);
        let pods = run_pods(run, world);
        let replica_pods = drain::ReplicaPods::new(&pods);
        for role in spec.roles.iter().filter(|r| !r.is_router()) {
            let role_run = RoleRun::new(
                (service, world, rollout),
                run,
                spec,
                role,
                &scheduling,
                (&members, &pods, &replica_pods),
            );
            // A replica that goes keeps its PodGroup entry until its pods
            // are gone.
            let kept = if role_run.rolling() {
                role_run.paced(&mut plan)?
            } else {
                role_run.replicated(&mut plan)?
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
    // Revisions side by side each have their own pool and endpoint picker;
    // otherwise one pool selects the leaders of every revision.
    let router_objects = if rollout.traffic.is_some() {
        let pools: Vec<router::RevisionPool<'_>> = rollout
            .runs
            .iter()
            .map(|run| router::RevisionPool {
                revision: &run.revision,
                naming: &run.naming,
            })
            .collect();
        router::revision_router_objects(service, &options.router, &pools)?
    } else {
        router::router_objects(service, &options.router)?
    };
    for object in router_objects {
        let why = router_why(service, &object);
        plan.desired.push(Desired { object, why });
    }
    if let Some(traffic) = &rollout.traffic {
        traffic_objects(service, world, rollout, traffic, &mut plan)?;
    }
    for (object, why) in disruption::budgets(service, &replicas_now) {
        plan.desired.push(Desired { object, why });
    }
    native_pod_groups(service, world, native_groups, &mut plan);
    volcano_pod_group(
        service,
        world,
        (decided.gang_policy, &gang_members),
        &mut plan,
    )?;
    // What the cluster lacks is not written (the API server would refuse
    // it, or prune the fields it does not know).
    let missing = world.installed.missing_kinds();
    plan.desired
        .retain(|d| !Installed::lacks_kind_of(&missing, &d.object));
    let mut decided = decided;
    let (lacking, unwritten) =
        dependencies::unwritable(world.installed, plan.desired.iter().map(|d| &d.object));
    decided.lacking.extend(lacking);
    plan.desired
        .retain(|d| !unwritten.contains(&key(&d.object)));
    plan.kept.extend(unwritten);
    plan.dependencies = Some(decided);
    Ok(plan)
}

/// Volcano's PodGroup, placed (`spec.placement`), goes first: a new
/// replica's entry (a surge replica of a RollingUpdate, a scale-up) is there
/// before its LeaderWorkerSet makes pods that name it. `gang_policy` is the
/// layout `dependencies::decide` chose, `gang_members` each role's replica
/// indices.
fn volcano_pod_group(
    service: &InferenceService,
    world: &World<'_>,
    (gang_policy, gang_members): (Option<GangPolicy>, &BTreeMap<String, BTreeSet<u32>>),
    plan: &mut Plan,
) -> Result<(), String> {
    let volcano = gang::scheduling(&service.spec).backend == Some(gang::Backend::Volcano);
    let pod_group = match gang_policy {
        Some(policy) => gang::pod_group(service, gang_members, policy)?,
        None if !volcano => None,
        None => {
            // A layout the installed Volcano cannot hold: the PodGroup there
            // is left as it is, not deleted under running pods.
            let name = children::service_name(service);
            plan.kept.extend(
                world
                    .children
                    .iter()
                    .filter(|c| c["kind"] == gang::POD_GROUP_KIND && c["metadata"]["name"] == name)
                    .map(key),
            );
            None
        }
    };
    if let Some(mut pod_group) = pod_group {
        placement::place_sub_groups(&service.spec, &mut pod_group);
        let placed = placement::sub_groups_placed(&pod_group)
            .map(|key| format!("; each multi-node replica in one {key} tier (spec.placement)"))
            .unwrap_or_default();
        plan.desired.insert(
            0,
            Desired {
                object: pod_group,
                why: format!(
                    "gang scheduling with Volcano: {}{placed}",
                    gang_reason(service)
                ),
            },
        );
    }
    Ok(())
}

/// Kubernetes' PodGroups go first, like Volcano's: a replica's group is
/// there before its LeaderWorkerSet makes pods that name it. A group that a
/// pod still names stays as it is (a replaced replica's old pods, a replica
/// leaving): it goes only once no pod names it, so no group is deleted
/// under its pods.
fn native_pod_groups(
    service: &InferenceService,
    world: &World<'_>,
    groups: BTreeMap<String, Value>,
    plan: &mut Plan,
) {
    // Ahead of every other desired object, in the groups' order: spliced in
    // at once (one insert at the front per group moved the rest each time).
    let made: Vec<Desired> = groups
        .into_values()
        .map(|object| {
            let placed = pod_groups::topology_key(&object)
                .map(|key| format!("; its pods in one {key} domain (spec.placement)"))
                .unwrap_or_default();
            Desired {
                object,
                why: format!(
                    "gang scheduling with Kubernetes' PodGroups: {}{placed}",
                    gang_reason(service)
                ),
            }
        })
        .collect();
    plan.desired.splice(0..0, made);
    let named: BTreeSet<&str> = world.pods.iter().filter_map(pod_groups::named_by).collect();
    plan.kept.extend(
        world
            .children
            .iter()
            .filter(|c| pod_groups::is_pod_group(c))
            .filter(|c| named.contains(c["metadata"]["name"].as_str().unwrap_or_default()))
            .map(key),
    );
}

/// One serving role within one run of a rollout: what [`plan`] decides its
/// replicas from.
struct RoleRun<'a> {
    service: &'a InferenceService,
    world: &'a World<'a>,
    rollout: &'a Rollout,
    run: &'a Run,
    /// The spec the run's replicas are made from.
    spec: &'a InferenceServiceSpec,
    role: &'a Role,
    scheduling: &'a gang::Scheduling,
    /// The run's LeaderWorkerSets and pods.
    members: &'a [&'a Value],
    pods: &'a [Value],
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
        (service, world, rollout): (&'a InferenceService, &'a World<'a>, &'a Rollout),
        run: &'a Run,
        spec: &'a InferenceServiceSpec,
        role: &'a Role,
        scheduling: &'a gang::Scheduling,
        (members, pods, replica_pods): (&'a [&'a Value], &'a [Value], &'a drain::ReplicaPods<'a>),
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
        for member in members
            .iter()
            .copied()
            .filter(|o| o["metadata"]["labels"][children::ROLE_NAME] == role.name.as_str())
        {
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
            pods,
            replica_pods,
            by_index,
            seen: role_replicas(role, members, pods),
            full,
            count: upgrade::replicas_for(full, run.capacity),
            policy: current.scale_down_policy(),
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
            return Ok(dressed.leader_worker_set(index, &self.run.naming, replica));
        }
        Ok(self
            .templates()?
            .dressed(self.service, self.role, label, &self.placement())
            .leader_worker_set(index, &self.run.naming, replica))
    }

    fn templates(&self) -> Result<&topology::RoleTemplates, String> {
        self.templates
            .get_or_init(|| topology::RoleTemplates::new(self.role))
            .as_ref()
            .map_err(Clone::clone)
    }

    fn of_role(&self, object: &Value) -> bool {
        object["metadata"]["labels"][children::ROLE_NAME] == self.role.name.as_str()
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

    /// A role rolls while a replica or a pod of it runs another revision
    /// (the old pods of the last replaced replica included).
    fn rolling(&self) -> bool {
        self.run.members == Members::All
            && self
                .members
                .iter()
                .copied()
                .filter(|o| self.of_role(o))
                .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
                .chain(self.pods.iter().filter(|p| self.of_role(p)))
                .any(|o| revision::of(o) != Some(self.label.as_str()))
    }

    /// A rolling role: its replicas step as [`pacing::pace`] says, each
    /// replaced or deleted replica draining first. Returns the indices kept.
    fn paced(&self, plan: &mut Plan) -> Result<BTreeSet<u32>, String> {
        let role = self.role;
        let nodes = usize::try_from(role.node_count()).unwrap_or(1);
        let replicas = pacing::observe(&role.name, nodes, self.members, self.pods);
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
                .pods
                .iter()
                .filter(|p| self.of_role(p))
                .any(|p| revision::of(p) != Some(self.label.as_str()));
        if !rolls_on {
            paced.waiting = None;
        }
        let kept = paced.kept();
        plan.paced.insert(role.name.clone(), paced);
        Ok(kept)
    }

    /// One index's step of a rolling role.
    fn paced_step(&self, index: u32, step: &pacing::Step, plan: &mut Plan) -> Result<(), String> {
        let role = self.role;
        let now = self.rollout.now;
        match step {
            pacing::Step::Keep => {
                if let Some(existing) = self.at_index(index) {
                    plan.kept.insert(key(existing));
                }
            }
            pacing::Step::Delete(why) => {
                if let Some(existing) = self.at_index(index) {
                    let replica = self.replica_pods.of(&role.name, index);
                    let left = drain::leave(&replica, self.drain_seconds, now);
                    if keep_draining(
                        (&role.name, index),
                        existing,
                        &left,
                        (self.drain_seconds, "is deleted"),
                        plan,
                    ) {
                        return Ok(());
                    }
                    let why = match left {
                        drain::Leave::Delete(drained) if drain::draining(&replica) => {
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
                }) {
                    let replica = self.replica_pods.of(&role.name, index);
                    let left = drain::leave(&replica, self.drain_seconds, now);
                    if keep_draining(
                        (&role.name, index),
                        existing,
                        &left,
                        (self.drain_seconds, "is replaced by the update revision"),
                        plan,
                    ) {
                        return Ok(());
                    }
                }
                let mut object = self.leader_worker_set(index, &self.label)?;
                if let Some(at) = updated_at {
                    object["metadata"]["annotations"] =
                        serde_json::json!({pacing::UPDATED_AT: at.to_string()});
                }
                plan.desired.push(Desired {
                    object,
                    why: why.clone().unwrap_or_else(|| {
                        format!(
                            "replica {index} of role {} at revision {} ({} node(s))",
                            role.name,
                            self.label,
                            role.node_count()
                        )
                    }),
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
            if drain::draining(&self.replica_pods.of(&role.name, *index)) {
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
            object["metadata"]["annotations"] = serde_json::json!({pacing::UPDATED_AT: at});
        }
        plan.desired.push(Desired {
            object,
            why: format!(
                "replica {index} of role {} ({} of {} replicas{share}, {} node(s) each, revision {label})",
                role.name,
                index.saturating_add(1),
                self.count,
                role.node_count(),
            ),
        });
        Ok(())
    }
}

/// One role's replicas as the drain sees them.
struct DrainScope<'a, 'b> {
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
fn drain_replicas(
    service: &InferenceService,
    world: &World<'_>,
    rollout: &Rollout,
    scope: &DrainScope<'_, '_>,
    plan: &mut Plan,
) {
    let role = scope.role;
    for &index in scope.kept {
        let back = drain::revive(&scope.pods.of(role, index));
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
        match drain::leave(&pods, scope.seconds, rollout.now) {
            drain::Leave::Delete(why) if drain::draining(&pods) => {
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
fn keep_draining(
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

/// Why the plan wants one of the router's objects, for the Event; a
/// revision's pool and endpoint picker name their revision.
fn router_why(service: &InferenceService, object: &Value) -> String {
    let of_revision = object["metadata"]["labels"][children::REVISION]
        .as_str()
        .map_or(String::new(), |r| format!(" of revision {r}"));
    match object["kind"].as_str().unwrap_or_default() {
        "InferencePool" if of_revision.is_empty() => {
            "the router's pool of the serving roles' leaders".to_owned()
        }
        "InferencePool" => format!("the router's pool of the leaders{of_revision}"),
        "HTTPRoute" => "the router role's httproute, sent to the pool".to_owned(),
        "ConfigMap" => format!("the endpoint picker's configuration{of_revision}"),
        "Deployment" => format!(
            "the endpoint picker{of_revision}, {} replica(s)",
            service
                .spec
                .roles
                .iter()
                .find(|r| r.is_router())
                .map_or(1, |r| r.replicas())
        ),
        other => format!("the endpoint picker's {other}{of_revision}"),
    }
}

/// The Gateway, the route with one weighted backend per revision, each
/// revision's Service, and each revision's record (written once, then kept).
fn traffic_objects(
    service: &InferenceService,
    world: &World<'_>,
    rollout: &Rollout,
    traffic: &rollout::Traffic,
    plan: &mut Plan,
) -> Result<(), String> {
    let name = children::service_name(service);
    let strategy = service.spec.upgrade_type();
    let port = router::serving_port(&service.spec).map_err(|v| v.to_string())?;
    plan.desired.push(Desired {
        object: traffic::gateway(service, &traffic.gateway_class, port)?,
        why: format!(
            "{strategy:?} moves traffic between revisions through it (gatewayClassName {})",
            traffic.gateway_class
        ),
    });
    let split = traffic
        .backends
        .iter()
        .map(|(revision, weight)| format!("revision {revision} {weight}%"))
        .collect::<Vec<_>>()
        .join(", ");
    let router = service.spec.roles.iter().find(|r| r.is_router());
    let route = match router {
        // The router's pools are the backends, and its httproute is folded
        // into this route: the service has one route.
        Some(router) => {
            let pools = traffic
                .backends
                .iter()
                .map(|(revision, weight)| {
                    let run = rollout
                        .runs
                        .iter()
                        .find(|r| &r.revision == revision)
                        .ok_or_else(|| format!("the route's revision {revision} does not run"))?;
                    Ok((router::revision_pool_name(name, &run.naming), *weight))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Desired {
                object: traffic::pool_route(service, &pools, router.httproute.as_ref()),
                why: format!("traffic split between the revisions' InferencePools: {split}"),
            }
        }
        None => Desired {
            object: traffic::route(service, &traffic.backends, port)?,
            why: format!("traffic split: {split}"),
        },
    };
    plan.desired.push(route);
    let spec_revision = revision::spec_revision(&service.spec);
    for run in &rollout.runs {
        if router.is_none() {
            plan.desired.push(Desired {
                object: traffic::revision_service(service, &run.revision, port),
                why: format!(
                    "the leaders of revision {}, a backend of the route",
                    run.revision
                ),
            });
        }
        let record_name = revision::record_name(name, &run.revision);
        let existing = world
            .children
            .iter()
            .find(|c| revision::is_record(c) && c["metadata"]["name"] == record_name.as_str());
        match existing {
            Some(record) => {
                plan.kept.insert(key(record));
            }
            None if run.revision == spec_revision => plan.desired.push(Desired {
                object: revision::record(service, revision::next_number(world.children))?,
                why: format!(
                    "the record of revision {}'s pod templates, to rebuild its replicas once the spec has moved on",
                    run.revision
                ),
            }),
            None => {}
        }
    }
    Ok(())
}

/// Why a service is gang-scheduled, in the words of DESIGN.md §1.1.
fn gang_reason(service: &InferenceService) -> String {
    let spec = &service.spec;
    let serving: Vec<_> = spec.roles.iter().filter(|r| !r.is_router()).collect();
    let has = |t| serving.iter().any(|r| r.component_type == t);
    let mut reasons = Vec::new();
    if has(ComponentType::Prefiller) && has(ComponentType::Decoder) {
        reasons.push("the service is prefill/decode disaggregated".to_owned());
    }
    for role in serving.iter().filter(|r| r.node_count() > 1) {
        reasons.push(format!(
            "role {} spans {} nodes",
            role.name,
            role.node_count()
        ));
    }
    let asked = spec
        .scheduling_strategy
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref());
    if asked == Some(gang::VOLCANO) {
        reasons.push("schedulerName is volcano".to_owned());
    }
    if let Some(backend) = spec
        .scheduling_strategy
        .as_ref()
        .and_then(|s| s.gang_scheduler)
    {
        reasons.push(format!("gangScheduler is {backend:?}"));
    }
    reasons.join(", ")
}

/// Why an object the service has is no longer wanted, for the Event. A
/// replica removed by Binpack names its deletion cost and the costs it beat.
pub fn why_delete(service: &InferenceService, object: &Value, world: &World<'_>) -> String {
    why_delete_among(service, object, world, &mut Standings::default())
}

/// Where each role's replicas stand under Binpack (their costs, and which
/// the policy keeps), worked out at most once per role for all the notes of
/// one pass: a scale-down by D replicas of a role read its replicas and pods
/// D times (issue 51).
#[derive(Default)]
struct Standings {
    by_role: BTreeMap<String, (RoleReplicas, BTreeSet<u32>)>,
}

impl Standings {
    fn of(&mut self, role: &Role, world: &World<'_>) -> &(RoleReplicas, BTreeSet<u32>) {
        self.by_role.entry(role.name.clone()).or_insert_with(|| {
            let all: Vec<&Value> = world
                .children
                .iter()
                .filter(|o| ChildKind::of(o) == Some(LEADER_WORKER_SET))
                .collect();
            let seen = role_replicas(role, &all, world.pods);
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
fn why_delete_among(
    service: &InferenceService,
    object: &Value,
    world: &World<'_>,
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

/// What a service's children and pods look like now.
#[derive(Clone, Copy, Debug)]
pub struct World<'a> {
    /// The children this service owns (see [`children::owns`]).
    pub children: &'a [Value],
    /// The service's pods.
    pub pods: &'a [Value],
    /// Kinds whose API is not installed in the cluster.
    pub unavailable: &'a BTreeSet<String>,
    /// What the cluster has of the projects Tandem writes objects of.
    pub installed: &'a Installed,
    /// The ScaleViews named by the service's locks (or more): lock entries of
    /// views not among them are stale and dropped (see [`live_scale_views`]).
    pub scale_views: &'a [ScaleView],
}

/// One reconcile of one service: what to write, the status to report, the
/// Events about the service itself (upgrade steps), and when to look again.
#[derive(Clone, Debug, PartialEq)]
pub struct Pass {
    pub apply: Vec<Apply>,
    pub delete: Vec<Delete>,
    pub status: InferenceServiceStatus,
    pub events: Vec<rollout::Event>,
    /// Look again after this long even if nothing changes (the next traffic
    /// step of an upgrade); None when only a change needs a look.
    pub requeue: Option<std::time::Duration>,
}

/// The name `World::unavailable` knows `object`'s kind by
/// ([`ChildKind::name`]).
fn kind_name(object: &Value) -> &str {
    ChildKind::of(object).map_or_else(|| text(&object["kind"]), |k| k.name())
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn identity(object: &Value) -> (&str, &str, &str) {
    (
        text(&object["apiVersion"]),
        text(&object["kind"]),
        text(&object["metadata"]["name"]),
    )
}

/// Decides one reconcile of `service` in `world` at `now`: the children to
/// apply (those that differ from the plan), the children to delete (what the
/// plan neither wants nor keeps; nothing while the plan cannot be made), the
/// next status, and the upgrade's step (see [`rollout`]).
pub fn reconcile(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> Pass {
    let (rollout, planned, problems) = plan_or_problems(service, world, options, now);
    let apply = applies(service, world, &planned);
    let delete = if problems.is_empty() {
        deletions(service, world, rollout.as_ref(), &planned)
    } else {
        Vec::new()
    };
    let mut status = observed_status(service, world, rollout.as_ref(), &planned, &problems, now);
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
    if let Some(deadline) = planned.drain_deadline {
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
    Pass {
        apply,
        delete,
        status,
        events,
        requeue,
    }
}

/// The rollout and the plan of this reconcile, and every problem that
/// stops it: a spec the webhook would deny (stored before the webhook was
/// installed) is reported, not applied, and its upgrade does not move; a
/// plan that cannot be made, the plan's and the rollout's own problems, and
/// a kind the plan wants whose API is not installed.
fn plan_or_problems(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> (Option<Rollout>, Plan, Vec<String>) {
    let mut problems = Vec::new();
    let findings = validate(service);
    let rollout = findings.is_allowed().then(|| {
        rollout::plan(
            service,
            world.children,
            world.pods,
            world.unavailable,
            now.0,
        )
    });
    let planned = match &rollout {
        Some(rollout) => match plan(service, world, options, rollout) {
            Ok(plan) => plan,
            Err(reason) => {
                problems.push(format!("cannot plan: {reason}"));
                Plan::default()
            }
        },
        None => {
            problems.push(format!("invalid spec: {}", findings.denial_message()));
            Plan::default()
        }
    };
    problems.extend(planned.problems.iter().cloned());
    if let Some(rollout) = &rollout {
        problems.extend(rollout.problems.iter().cloned());
    }
    for missing in world.unavailable {
        if planned
            .desired
            .iter()
            .any(|d| kind_name(&d.object) == missing.as_str())
        {
            problems.push(format!("the {missing} API is not installed in the cluster"));
        }
    }
    (rollout, planned, problems)
}

/// The planned objects that differ from what the world has (a drain applies
/// to pods, which are not children); kinds whose API is missing are left out.
fn applies(service: &InferenceService, world: &World<'_>, planned: &Plan) -> Vec<Apply> {
    // A drain applies to pods, which are not children. Indexed once: a
    // service of 1 000 replicas plans 1 000 objects over 1 000 children
    // and as many pods.
    let mut existing: HashMap<(&str, &str, &str), &Value> = HashMap::new();
    for current in world.children.iter().chain(world.pods) {
        existing.entry(identity(current)).or_insert(current);
    }
    let mut apply = Vec::new();
    for planned in &planned.desired {
        let object = stamp(planned.object.clone());
        let kind = object["kind"].as_str().unwrap_or_default();
        if world.unavailable.contains(kind_name(&object)) {
            continue;
        }
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let current = existing.get(&identity(&object)).copied();
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
fn deletions(
    service: &InferenceService,
    world: &World<'_>,
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

/// The status the world shows: the revisions that run, the revision new
/// replicas get, the router's endpoint picker, the problems, the drains and
/// the ScaleViews' locks that still hold.
fn observed_status(
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
        changing,
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
fn changing_roles(
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
fn role_events(service: &InferenceService, status: &InferenceServiceStatus) -> Vec<rollout::Event> {
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
    events
}

/// Puts the rollout's `status.upgrade` and its UpgradeInProgress and
/// RollbackInProgress conditions into `status` (the strategies without them
/// drop both).
fn report_rollout(
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
const READINESS_POLL: std::time::Duration = std::time::Duration::from_secs(30);

/// What a RollingUpdate adds to a reconcile: Events and when to look again.
struct PacedReport {
    events: Vec<rollout::Event>,
    requeue: Option<std::time::Duration>,
}

/// Puts the RollingUpdate's state into the Progressing condition: False with
/// ProgressDeadlineExceeded while a role is halted (and an Event the first
/// time), True with RollingUpdate and what it waits for while replicas move.
/// None when no role is moving.
fn report_paced(
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

pub use crate::plan::shared::reason::PROGRESS_DEADLINE_EXCEEDED;

/// Why a child goes, for the Event: a revision's replica, Service or record
/// in the words of the upgrade; anything else as [`why_delete`] says.
fn why_gone(
    service: &InferenceService,
    rollout: &Rollout,
    child: &Value,
    world: &World<'_>,
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

/// The ScaleView locks of `service` whose views still exist (DESIGN.md §1.3):
/// dropping the others on every reconcile means no crash of the ScaleView
/// controller can leave a role locked forever.
fn live_scale_views(
    service: &InferenceService,
    locks: &[ScaleViewLock],
    views: &[ScaleView],
) -> Vec<ScaleViewLock> {
    scale_view::live_locks(children::service_name(service), locks, views)
}

#[cfg(test)]
mod rollouts;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(replicas: i32) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "default", "uid": "u"},
            "spec": {"roles": [
                {"name": "inference", "componentType": "worker", "replicas": replicas,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
                ]}
        }))
        .unwrap()
    }

    fn world<'a>(children: &'a [Value], pods: &'a [Value]) -> World<'a> {
        static NONE: std::sync::LazyLock<BTreeSet<String>> =
            std::sync::LazyLock::new(BTreeSet::new);
        World {
            children,
            pods,
            unavailable: &NONE,
            installed: &crate::plan::shared::installed::ASSUMED,
            scale_views: &[],
        }
    }

    fn epoch() -> Time {
        Time(jiff::Timestamp::UNIX_EPOCH)
    }

    fn names(plan: &[Desired]) -> Vec<&str> {
        plan.iter()
            .filter(|d| d.object["kind"] == "LeaderWorkerSet")
            .map(|d| d.object["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn kubernetes_gang_puts_each_replica_in_its_group_and_deletes_a_group_no_pod_names() {
        let service: InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "pd", "namespace": "default", "uid": "u"},
            "spec": {"schedulingStrategy": {"gangScheduler": "Kubernetes"}, "roles": [
                {"name": "prefill", "componentType": "prefiller", "replicas": 1,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
                {"name": "decode", "componentType": "decoder", "replicas": 2,
                 "multinode": {"nodeCount": 2},
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
            ]}
        }))
        .unwrap();
        let plan = desired(&service, &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        // The groups go first: the core (prefill-0 and decode-0, 1 + 2
        // pods) and decode-1's own.
        let groups: Vec<(&str, &Value)> = plan
            .iter()
            .take_while(|d| pod_groups::is_pod_group(&d.object))
            .map(|d| {
                (
                    d.object["metadata"]["name"].as_str().unwrap(),
                    &d.object["spec"]["schedulingPolicy"]["gang"]["minCount"],
                )
            })
            .collect();
        assert_eq!(groups.len(), 2, "{groups:?}");
        let core = groups
            .iter()
            .find(|(n, _)| n.starts_with("pd-core-"))
            .unwrap();
        assert_eq!(core.1, 3);
        let own = groups
            .iter()
            .find(|(n, _)| n.starts_with("pd-decode-1-"))
            .unwrap();
        assert_eq!(own.1, 2);
        let template_group = |lws: &str, template: &str| {
            let lws = plan
                .iter()
                .find(|d| d.object["metadata"]["name"] == lws)
                .unwrap();
            pod_groups::named_by(&lws.object["spec"]["leaderWorkerTemplate"][template])
                .unwrap()
                .to_owned()
        };
        assert_eq!(template_group("pd-prefill-0", "workerTemplate"), core.0);
        assert_eq!(template_group("pd-decode-0", "leaderTemplate"), core.0);
        assert_eq!(template_group("pd-decode-0", "workerTemplate"), core.0);
        assert_eq!(template_group("pd-decode-1", "workerTemplate"), own.0);
        // No Volcano PodGroup, annotation or scheduler.
        assert!(
            !plan
                .iter()
                .any(|d| d.object["apiVersion"] == gang::POD_GROUP_API_VERSION)
        );
        let lws = &plan
            .iter()
            .find(|d| d.object["kind"] == "LeaderWorkerSet")
            .unwrap()
            .object;
        let pod = &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"];
        assert!(pod["spec"].get("schedulerName").is_none(), "{pod}");
        assert!(pod["metadata"].get("annotations").is_none(), "{pod}");

        // A group of a replica gone: deleted once no pod names it, kept
        // while one does.
        let mut children: Vec<Value> = plan.into_iter().map(|d| d.object).collect();
        let first = children[0].clone();
        let stale = |name: &str| {
            let mut group = first.clone();
            group["metadata"]["name"] = json!(name);
            group
        };
        children.push(stale("pd-decode-2-0000aaaa"));
        children.push(stale("pd-decode-3-0000bbbb"));
        let pods = [json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pd-decode-3-0", "namespace": "default"},
            "spec": {"schedulingGroup": {"podGroupName": "pd-decode-3-0000bbbb"}}})];
        let pass = reconcile(
            &service,
            &world(&children, &pods),
            &Options::default(),
            &epoch(),
        );
        let deleted: Vec<&str> = pass
            .delete
            .iter()
            .map(|d| d.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(deleted, ["pd-decode-2-0000aaaa"]);
        assert!(
            pass.delete[0]
                .note
                .contains("no pod of the service names this PodGroup")
        );
    }

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

    fn pod(index: u32, cost: &str, ready: bool) -> Value {
        json!({"metadata": {"name": format!("qwen-inference-{index}-0"),
                "labels": {children::ROLE_NAME: "inference", children::REPLICA_INDEX: index.to_string()},
                "annotations": {victims::DELETION_COST: cost}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

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

    /// A service's children and pods, changed by each pass as the API
    /// server and LeaderWorkerSet would: applied LeaderWorkerSets get one
    /// ready pod each (cost from `costs`), applied Pods get the labels and
    /// annotations Tandem owns replaced, deleted LeaderWorkerSets lose their
    /// pods.
    struct Cluster {
        children: Vec<Value>,
        pods: Vec<Value>,
        costs: BTreeMap<u32, &'static str>,
        /// New pods start not ready (a model loading), else ready.
        loading: bool,
    }

    impl Cluster {
        fn new(costs: &[&'static str]) -> Cluster {
            let costs = costs
                .iter()
                .enumerate()
                .map(|(i, c)| (u32::try_from(i).unwrap(), *c))
                .collect();
            Cluster {
                children: vec![],
                pods: vec![],
                costs,
                loading: false,
            }
        }

        fn pass(&mut self, service: &InferenceService, at: i64) -> Pass {
            let now = Time(jiff::Timestamp::from_second(at).unwrap());
            let pass = reconcile(
                service,
                &world(&self.children, &self.pods),
                &Options::default(),
                &now,
            );
            for step in &pass.apply {
                let object = &step.object;
                if object["kind"] == "Pod" {
                    let pod = self
                        .pods
                        .iter_mut()
                        .find(|p| p["metadata"]["name"] == object["metadata"]["name"])
                        .expect("Tandem applies only pods that exist");
                    pod["metadata"]["labels"][drain::TRAFFIC] =
                        object["metadata"]["labels"][drain::TRAFFIC].clone();
                    let annotations = pod["metadata"]["annotations"].as_object_mut().unwrap();
                    annotations.remove(drain::DRAIN_STARTED);
                    annotations.remove(drain::DRAIN_DEADLINE);
                    for (k, v) in object["metadata"]["annotations"].as_object().unwrap() {
                        annotations.insert(k.clone(), v.clone());
                    }
                    continue;
                }
                self.children.retain(|c| identity(c) != identity(object));
                self.children.push(object.clone());
                if object["kind"] == "LeaderWorkerSet" {
                    let index: u32 = object["metadata"]["labels"][children::REPLICA_INDEX]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    // A new or changed LeaderWorkerSet has a new pod.
                    let index_label = index.to_string();
                    self.pods.retain(|p| {
                        p["metadata"]["labels"][children::REPLICA_INDEX] != index_label.as_str()
                    });
                    let cost = self.costs.get(&index).copied().unwrap_or("0");
                    let mut new = pod(index, cost, !self.loading);
                    new["metadata"]["labels"] = object["spec"]["leaderWorkerTemplate"]
                        ["workerTemplate"]["metadata"]["labels"]
                        .clone();
                    self.pods.push(new);
                }
            }
            for step in &pass.delete {
                let index = step.object["metadata"]["labels"][children::REPLICA_INDEX].clone();
                self.children
                    .retain(|c| identity(c) != identity(&step.object));
                self.pods
                    .retain(|p| p["metadata"]["labels"][children::REPLICA_INDEX] != index);
            }
            pass
        }

        fn lws(&self) -> Vec<&str> {
            self.children
                .iter()
                .filter(|c| c["kind"] == "LeaderWorkerSet")
                .map(|c| c["metadata"]["name"].as_str().unwrap())
                .collect()
        }
    }

    fn scaled(replicas: i32, policy: &str, drain_seconds: Option<i64>) -> InferenceService {
        let mut value = serde_json::to_value(service(replicas)).unwrap();
        value["spec"]["roles"][0]["scaleDown"] = json!({"policy": policy});
        if let Some(seconds) = drain_seconds {
            value["spec"]["roles"][0]["drain"] = json!({"seconds": seconds});
        }
        serde_json::from_value(value).unwrap()
    }

    fn applied_pods(pass: &Pass) -> Vec<(String, String)> {
        pass.apply
            .iter()
            .filter(|a| a.object["kind"] == "Pod")
            .map(|a| {
                (
                    a.object["metadata"]["name"].as_str().unwrap().to_owned(),
                    a.object["metadata"]["labels"][drain::TRAFFIC]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                )
            })
            .collect()
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

    /// The Events of a role's episodes among `pass`'s: (reason, warning, note).
    fn episodes(pass: &Pass) -> Vec<(&'static str, bool, String)> {
        pass.events
            .iter()
            .filter(|e| {
                ["Degraded", "Recovered", status::UNSCHEDULABLE, "Scheduled"].contains(&e.reason)
            })
            .map(|e| (e.reason, e.warning, e.note.clone()))
            .collect()
    }

    /// One pass at `at` whose status becomes the service's, as the
    /// reconciler writes it; its episode Events.
    fn step(
        cluster: &mut Cluster,
        service: &mut InferenceService,
        at: i64,
    ) -> Vec<(&'static str, bool, String)> {
        let pass = cluster.pass(service, at);
        let events = episodes(&pass);
        service.status = Some(pass.status);
        events
    }

    fn pod_named<'a>(cluster: &'a mut Cluster, name: &str) -> &'a mut Value {
        cluster
            .pods
            .iter_mut()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap()
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

    #[test]
    fn roles_under_a_rollout_or_an_upgrade_are_changing() {
        let service = scaled(2, "Ordered", None);
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
    fn a_zero_drain_deletes_at_once() {
        let mut cluster = Cluster::new(&[]);
        cluster.pass(&scaled(3, "Ordered", Some(0)), 0);
        let pass = cluster.pass(&scaled(1, "Ordered", Some(0)), 10);
        assert!(pass.apply.is_empty());
        assert_eq!(pass.delete.len(), 2);
    }

    #[test]
    fn up_to_date_ignores_server_fields_but_not_drift_or_removed_fields() {
        let desired = stamp(
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        let mut observed = desired.clone();
        observed["metadata"]["uid"] = json!("u");
        observed["spec"]["ports"][0]["protocol"] = json!("TCP");
        observed["status"] = json!({"ready": 1});
        assert!(
            up_to_date(&desired, &observed),
            "server-added fields do not count"
        );
        let mut drifted = observed.clone();
        drifted["spec"]["replicas"] = json!(3);
        assert!(
            !up_to_date(&desired, &drifted),
            "a field changed by hand is set back"
        );
        // A field Tandem stops wanting changes the hash, so it is applied (and
        // server-side apply removes the field Tandem no longer owns).
        let smaller = stamp(
            json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        assert!(!up_to_date(&smaller, &observed));
    }

    #[test]
    fn up_to_date_compares_what_the_api_server_stored_canonically() {
        let desired = stamp(
            json!({"metadata": {"name": "epp"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1024Mi"}}],
            "containers": [{"name": "epp", "args": [], "resources": {
                "requests": {"cpu": 0.5, "memory": "1024Mi", "nvidia.com/gpu": 1},
                "limits": {"cpu": "1.5", "memory": "2Gi"}}}]}}}}),
        );
        // As the API server stores a Deployment: quantities canonical, the
        // empty list dropped (Go's omitempty), defaults added.
        let mut stored = stamp(
            json!({"metadata": {"name": "epp"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
            "containers": [{"name": "epp", "imagePullPolicy": "IfNotPresent", "resources": {
                "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                "limits": {"cpu": "1500m", "memory": "2Gi"}}}]}}}}),
        );
        stored["metadata"]["annotations"] = desired["metadata"]["annotations"].clone();
        assert!(
            up_to_date(&desired, &stored),
            "canonical forms of the same quantities are no hand edit"
        );
        let mut edited = stored.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            json!("1");
        assert!(
            !up_to_date(&desired, &edited),
            "a quantity changed by hand is drift"
        );
        let mut renamed = stored.clone();
        renamed["spec"]["template"]["spec"]["containers"][0]["name"] = json!("0.5");
        assert!(
            !contains(&json!({"name": "500m"}), &json!({"name": "0.5"})),
            "outside resource maps text is compared as text"
        );
        assert!(!up_to_date(&desired, &renamed));
        assert!(
            !contains(&json!({}), &json!({"args": ["--x"]})),
            "a non-empty list that is missing is missing"
        );
    }

    #[test]
    fn a_pass_creates_reverts_and_deletes_with_reasons() {
        let now = Time("2026-11-21T10:00:00Z".parse().unwrap());
        let none = BTreeSet::new();
        let service = service(2);
        let first = reconcile(
            &service,
            &World {
                children: &[],
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert_eq!(
            first.apply.iter().map(|a| a.change).collect::<Vec<_>>(),
            [Change::Create, Change::Create, Change::Create],
            "two replicas and the role's PodDisruptionBudget"
        );
        assert!(first.delete.is_empty());
        let mut world: Vec<Value> = first.apply.iter().map(|a| a.object.clone()).collect();
        let settled = reconcile(
            &service,
            &World {
                children: &world,
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert!(settled.apply.is_empty() && settled.delete.is_empty());

        world[0]["spec"]["replicas"] = json!(4);
        let reverted = reconcile(
            &service,
            &World {
                children: &world,
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert_eq!(reverted.apply[0].change, Change::Revert);
        assert!(reverted.apply[0].note.starts_with(
            "LeaderWorkerSet qwen-inference-0 was changed outside Tandem and is set back"
        ));

        let shrunk = reconcile(
            &super::tests::service(1),
            &World {
                children: &world,
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert_eq!(shrunk.delete.len(), 1);
        assert_eq!(
            shrunk.delete[0].note,
            "LeaderWorkerSet qwen-inference-1 deleted: role inference is scaled to 1 replica(s); replica 1 is not kept (Ordered: the highest indices go first)"
        );

        let missing = BTreeSet::from(["LeaderWorkerSet".to_owned()]);
        let blocked = reconcile(
            &service,
            &World {
                children: &[],
                pods: &[],
                unavailable: &missing,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        // Only the PodDisruptionBudget, which needs no LeaderWorkerSet API.
        assert!(
            blocked
                .apply
                .iter()
                .all(|a| a.object["kind"] == "PodDisruptionBudget")
        );
        let failed = blocked
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .unwrap();
        assert_eq!(
            failed.message,
            "the LeaderWorkerSet API is not installed in the cluster"
        );
    }

    #[test]
    fn a_router_adds_its_objects_and_their_removal_is_explained() {
        let mut value = serde_json::to_value(service(1)).unwrap();
        value["spec"]["roles"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "router", "componentType": "router",
            "httproute": {"parentRefs": [{"name": "gw"}]}}));
        let routed: InferenceService = serde_json::from_value(value).unwrap();
        let plan = desired(&routed, &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        let kinds: Vec<&str> = plan
            .iter()
            .map(|d| d.object["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "LeaderWorkerSet",
                "ServiceAccount",
                "RoleBinding",
                "ConfigMap",
                "Deployment",
                "Service",
                "InferencePool",
                "HTTPRoute",
                "PodDisruptionBudget"
            ]
        );
        for d in &plan {
            assert!(
                ChildKind::of(&d.object).is_some(),
                "{} is a known child kind",
                d.object["kind"]
            );
        }
        let pool = plan
            .iter()
            .find(|d| d.object["kind"] == "InferencePool")
            .unwrap();
        assert_eq!(pool.why, "the router's pool of the serving roles' leaders");
        assert_eq!(
            why_delete(&service(1), &pool.object, &world(&[], &[])),
            "the service has no router role any more"
        );
    }
}
