//! Everything an InferenceService should have, from its spec and the replica
//! indices that exist: the plan the reconciler applies and `render` prints.
//!
//! One pass ([`reconcile`]) runs these steps once each, in order, each a
//! file of its own:
//! 1. `world`: what the service's plan is made from, and the lookups the
//!    later steps read it through;
//! 2. the rollout ([`super::rollout`]): which revisions run, at what
//!    capacity;
//! 3. `replicas`: each serving role's replicas in each run (their
//!    LeaderWorkerSets, drains and the RollingUpdate's pace);
//! 4. `objects`: the router's, the traffic's, the budgets and the
//!    PodGroups, and what the cluster cannot take;
//! 5. `diff`: the plan against the world, as applies and deletions, each
//!    with why;
//! 6. `report`: the status, the Events and when to look again.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::rollout::{self, Rollout};
use super::{dependencies, names, pacing, pair, placement, router, traffic};
use crate::api::Findings;
use crate::api::inference_service::{self, InferenceService, InferenceServiceStatus};
use crate::plan::shared::children;
pub use crate::plan::shared::write::{
    APPLIED_HASH, Apply, Change, Delete, change_of, contains, stamp, up_to_date,
};

mod diff;
mod objects;
mod replicas;
mod report;
mod world;

pub use self::diff::why_delete;
use self::diff::{applies, deletions};
use self::world::kind_name;
pub use self::world::{Index, World};

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
    for warning in crate::plan::engine::check(&service.spec) {
        findings.warn(warning);
    }
    findings
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
    /// The replicas a recovery setting holds with no pods, by role and
    /// index: whether failed (past the limit), and why
    /// ([`super::recovery::Decision::report`]).
    pub held: BTreeMap<String, BTreeMap<u32, (bool, String)>>,
    /// When a recovery decision changes by itself (a back-off ends, a
    /// replica's restarts are forgotten): the plan changes then.
    pub recovery_wake: Option<jiff::Timestamp>,
    /// Replicas put back into traffic instead of new ones being made.
    pub events: Vec<rollout::Event>,
    /// What the service needs of the installed dependencies and lacks, and
    /// the gang layout it gets.
    pub dependencies: Option<dependencies::Dependencies>,
    /// The role that runs one replica though its side of the prefill/decode
    /// pair asks none ([`pair::kept`]), for its status.
    pub kept_for_pair: Option<pair::Kept>,
}

/// Everything the service should have, given what the world has now and the
/// time (upgrades step with it): see [`plan`].
pub fn desired(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> Result<Vec<Desired>, String> {
    let service = &*pair::effective(service);
    let index = Index::of(world);
    let rollout = rollout::plan_seen(service, &index.seen(), world.unavailable, now.0);
    Ok(plan_of(service, &index, options, &rollout)?.desired)
}

/// Everything the service should have for `rollout`'s revisions: for each
/// revision and serving role, the replica indices it keeps at its capacity
/// (Ordered: the lowest; Binpack: the cheapest to lose go), the router's
/// objects, an upgrade's Gateway, route, per-revision Services and records,
/// and, for the PodGroup, the replicas whose pods are still there. The
/// replicas are those the service runs ([`pair::effective`]).
pub fn plan(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    rollout: &Rollout,
) -> Result<Plan, String> {
    plan_of(service, &Index::of(world), options, rollout)
}

/// [`plan`] of the world as the pass indexed it.
fn plan_of(
    service: &InferenceService,
    world: &Index<'_>,
    options: &Options,
    rollout: &Rollout,
) -> Result<Plan, String> {
    let kept_for_pair = pair::kept(&service.spec);
    let service = &*pair::effective(service);
    let mut plan = Plan {
        kept_for_pair,
        ..Plan::default()
    };
    let decided = dependencies::decide(&service.spec, world.installed);
    let replicas = replicas::plan_replicas(service, world, rollout, &mut plan)?;
    objects::plan_objects(
        service,
        world,
        (options, rollout),
        (decided, replicas),
        &mut plan,
    )?;
    Ok(plan)
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

/// Decides one reconcile of `service` in `world` at `now`: the children to
/// apply (those that differ from the plan), the children to delete (what the
/// plan neither wants nor keeps; nothing while the plan cannot be made), the
/// next status, and the upgrade's step (see [`rollout`]). The plan and
/// the status count the replicas the service runs: a side of a
/// prefill/decode pair that asks 0 while the other serves keeps one
/// ([`pair`]), and its role's status says why.
pub fn reconcile(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> Pass {
    let kept = pair::kept(&service.spec);
    let service = &*pair::effective(service);
    // The world indexed once: every step below looks it up there.
    let world = &Index::of(world);
    let (rollout, mut planned, problems) = plan_or_problems(service, world, options, now);
    planned.kept_for_pair = kept;
    let apply = applies(service, world, &planned);
    let delete = if problems.is_empty() {
        deletions(service, world, rollout.as_ref(), &planned)
    } else {
        Vec::new()
    };
    let (status, events, requeue) =
        report::report(service, world, rollout, (&planned, &problems), now);
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
    world: &Index<'_>,
    options: &Options,
    now: &Time,
) -> (Option<Rollout>, Plan, Vec<String>) {
    let mut problems = Vec::new();
    let findings = validate(service);
    let rollout = findings
        .is_allowed()
        .then(|| rollout::plan_seen(service, &world.seen(), world.unavailable, now.0));
    let planned = match &rollout {
        Some(rollout) => match plan_of(service, world, options, rollout) {
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
#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod pairs;
#[cfg(test)]
mod recoveries;
#[cfg(test)]
mod rollouts;

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use serde_json::json;

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
}
