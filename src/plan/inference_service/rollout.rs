//! How a change of an InferenceService's pods reaches its replicas
//! (`spec.upgradeStrategy`, DESIGN.md §1.5): which revisions run in this
//! reconcile, each at what share of the desired replicas, and, for NewRevision
//! and IncrementalUpgrade, the one step [`upgrade`] takes between them.
//!
//! - **RollingUpdate** (default): one set of LeaderWorkerSets, each role's
//!   moving to the role's revision a few replicas at a time
//!   ([`super::pacing`], decided per role by the reconcile pass).
//! - **None**: one set; a running replica keeps the revision it has, and only
//!   replicas created later get the spec's.
//! - **NewRevision** and **IncrementalUpgrade**: the spec's revision runs
//!   beside the active one, each with its own LeaderWorkerSets, and capacity
//!   and traffic move between them through a Gateway ([`super::traffic`]).
//!   `status.upgrade` records both revisions; when none is recorded yet, the
//!   revision the service's replicas run becomes the active one.
//!
//! Everything is decided from the spec, the status, the observed children
//! and pods, and `now`. The status conditions say where the upgrade stands and
//! what it waits for, computed from the state after the step, so a reconcile
//! that moves nothing reports the same conditions again (and writes nothing).

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::drain::RevisionPods;
use super::revision;
use super::status;
use super::traffic;
use super::upgrade::{self, Direction, Gateway, Moved, Pace, Revision, Step, Wait};
use crate::api::inference_service::{
    IncrementalUpgradeOptions, InferenceService, InferenceServiceSpec, RevisionStatus, Role,
    UpgradeStatus, UpgradeType,
};
use crate::plan::shared::child_kinds::LEADER_WORKER_SET;
use crate::plan::shared::children::{self, Naming};
use crate::plan::shared::pod::Pod;

/// The conditions this module reports for NewRevision and IncrementalUpgrade.
pub const UPGRADE_IN_PROGRESS: &str = "UpgradeInProgress";
pub const ROLLBACK_IN_PROGRESS: &str = "RollbackInProgress";

/// Which LeaderWorkerSets of the service belong to a [`Run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    /// Those labelled with the run's revision (NewRevision, IncrementalUpgrade).
    Labelled,
    /// Every LeaderWorkerSet, moved to its role's revision as
    /// [`super::pacing`] allows (RollingUpdate).
    All,
    /// Every LeaderWorkerSet; those of another revision are left as they are
    /// (None).
    AllKeepingOthers,
}

/// One revision that runs in this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The revision hash.
    pub revision: String,
    /// How its LeaderWorkerSets are named.
    pub naming: Naming,
    /// Percent of each role's desired replicas it runs
    /// ([`upgrade::replicas_for`]).
    pub capacity: i32,
    /// What its LeaderWorkerSets are made of: the service's spec for the
    /// spec's revision, the recorded one for another. None when its record is
    /// gone: its LeaderWorkerSets are kept as they are, and it cannot grow.
    pub spec: Option<InferenceServiceSpec>,
    pub members: Members,
}

/// The route's backends and the Gateway's class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traffic {
    pub gateway_class: String,
    /// `(revision, weight)`, the active revision first; weights sum to 100.
    pub backends: Vec<(String, i32)>,
}

/// A decision worth an Event on the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// A Warning Event (someone should look), else Normal.
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// A status condition to report, before its times are filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub type_: &'static str,
    pub is_true: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Everything this reconcile does about revisions.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    pub runs: Vec<Run>,
    /// `status.upgrade`: recorded for NewRevision and IncrementalUpgrade only.
    pub upgrade: Option<UpgradeStatus>,
    /// The Gateway and route, for NewRevision and IncrementalUpgrade only.
    pub traffic: Option<Traffic>,
    pub events: Vec<Event>,
    /// UpgradeInProgress and RollbackInProgress, for NewRevision and
    /// IncrementalUpgrade only (the other strategies report neither).
    pub conditions: Vec<Report>,
    /// When to look again even if nothing changes (the next traffic step).
    pub requeue: Option<SignedDuration>,
    /// What keeps the rollout from doing what it should.
    pub problems: Vec<String>,
    /// The time it was planned at (RollingUpdate paces replicas with it).
    pub now: Timestamp,
}

impl Rollout {
    /// The revisions that run, in order (the active one first).
    pub fn revisions(&self) -> Vec<&str> {
        self.runs.iter().map(|r| r.revision.as_str()).collect()
    }
}

/// How soon to look again while capacity or traffic can move at once, and
/// while waiting for something Tandem does not watch (the Gateway's status)
/// or that may not send an event (pods becoming ready).
const SOON: SignedDuration = SignedDuration::from_secs(1);
const GATEWAY_POLL: SignedDuration = SignedDuration::from_secs(10);
const READINESS_POLL: SignedDuration = SignedDuration::from_secs(30);

/// The replicas a role has at full capacity: the spec's count for a role the
/// spec still has, else what the revision recorded.
pub fn desired_replicas(service: &InferenceService, role: &Role) -> i32 {
    service
        .spec
        .roles
        .iter()
        .find(|r| r.name == role.name && !r.is_router())
        .map_or_else(|| role.replicas(), Role::replicas)
}

/// Decides this reconcile's revisions from the service, its children (the
/// LeaderWorkerSets, ControllerRevisions, Gateway and HTTPRoute among them),
/// its pods, the kinds whose API is not installed, and `now`.
pub fn plan(
    service: &InferenceService,
    children: &[Value],
    pods: &[Pod],
    unavailable: &BTreeSet<String>,
    now: Timestamp,
) -> Rollout {
    let leader_worker_sets: Vec<&Value> = children
        .iter()
        .filter(|c| {
            c["apiVersion"] == LEADER_WORKER_SET.api_version && c["kind"] == LEADER_WORKER_SET.kind
        })
        .collect();
    let seen = Seen {
        children,
        leader_worker_sets: &leader_worker_sets,
        pods: &RevisionPods::new(pods),
    };
    plan_seen(service, &seen, unavailable, now)
}

/// What a rollout is planned from, indexed once per pass: the service's
/// children, its LeaderWorkerSets among them, and its pods by revision,
/// role and replica (the pass's index hands its own).
pub struct Seen<'a> {
    pub children: &'a [Value],
    pub leader_worker_sets: &'a [&'a Value],
    pub pods: &'a RevisionPods<'a>,
}

/// [`plan`] from what the pass has indexed already.
pub fn plan_seen(
    service: &InferenceService,
    seen: &Seen<'_>,
    unavailable: &BTreeSet<String>,
    now: Timestamp,
) -> Rollout {
    let Seen {
        children,
        leader_worker_sets,
        pods,
    } = *seen;
    let svc = children::service_name(service);
    let spec_revision = revision::spec_revision(&service.spec);
    let strategy = service.spec.upgrade_type();
    let single = |members: Members| {
        let previous = service.status.as_ref().and_then(|s| s.upgrade.as_ref());
        let events = previous
            .and_then(|u| u.pending.as_ref().zip(u.active.as_ref()))
            .map(|(pending, active)| Event {
                warning: false,
                reason: "UpgradeAbandoned",
                note: format!(
                    "spec.upgradeStrategy.type is {strategy:?}: the upgrade from revision {} to {} stops; the replicas move to revision {spec_revision} in place",
                    active.revision, pending.revision
                ),
            })
            .into_iter()
            .collect();
        Rollout {
            runs: vec![Run {
                revision: spec_revision.clone(),
                naming: revision::single_naming(svc, leader_worker_sets),
                capacity: 100,
                spec: Some(service.spec.clone()),
                members,
            }],
            upgrade: None,
            traffic: None,
            events,
            conditions: Vec::new(),
            requeue: None,
            problems: Vec::new(),
            now,
        }
    };
    match strategy {
        UpgradeType::RollingUpdate => single(Members::All),
        UpgradeType::None => single(Members::AllKeepingOthers),
        UpgradeType::NewRevision | UpgradeType::IncrementalUpgrade => {
            let gateway_api = !["Gateway", "HTTPRoute"]
                .iter()
                .any(|k| unavailable.contains(*k));
            SideBySide {
                service,
                spec_revision: &spec_revision,
                leader_worker_sets,
                pods,
                specs: {
                    let mut specs = revision::recorded(service, children);
                    specs.insert(spec_revision.clone(), service.spec.clone());
                    specs
                },
                gateway: if gateway_api {
                    traffic::observe(service, children)
                } else {
                    Gateway::default()
                },
                gateway_api,
                now,
            }
            .plan()
        }
    }
}

/// The revision a service adopts as active when none is recorded: the one
/// most of its LeaderWorkerSets run (the spec's on a tie), the spec's when it
/// has none.
fn installed(leader_worker_sets: &[&Value], spec_revision: &str) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for revision in leader_worker_sets.iter().filter_map(|o| revision::of(o)) {
        let count = counts.entry(revision).or_default();
        *count = count.saturating_add(1);
    }
    let most = counts.values().copied().max().unwrap_or(0);
    if most == 0 || counts.get(spec_revision) == Some(&most) {
        return spec_revision.to_owned();
    }
    counts
        .into_iter()
        .find(|(_, n)| *n == most)
        .map_or_else(|| spec_revision.to_owned(), |(r, _)| r.to_owned())
}

/// The inputs of a NewRevision or IncrementalUpgrade reconcile.
struct SideBySide<'a> {
    service: &'a InferenceService,
    spec_revision: &'a str,
    leader_worker_sets: &'a [&'a Value],
    pods: &'a RevisionPods<'a>,
    /// The spec of every revision Tandem can build: the spec's own and the
    /// recorded ones.
    specs: BTreeMap<String, InferenceServiceSpec>,
    gateway: Gateway,
    /// Whether the Gateway and HTTPRoute APIs are installed.
    gateway_api: bool,
    now: Timestamp,
}

impl SideBySide<'_> {
    fn options(&self) -> IncrementalUpgradeOptions {
        self.service
            .spec
            .upgrade_strategy
            .as_ref()
            .and_then(|u| u.incremental_upgrade_options.clone())
            .unwrap_or_default()
    }

    fn pace(&self) -> Pace {
        match self.service.spec.upgrade_type() {
            UpgradeType::NewRevision => Pace::AllAtOnce,
            _ => Pace::Incremental(self.options()),
        }
    }

    fn describe_pace(&self) -> String {
        match self.pace() {
            Pace::AllAtOnce => {
                "NewRevision: the new revision at full size, then all traffic at once".to_owned()
            }
            Pace::Incremental(options) => format!(
                "IncrementalUpgrade: maxSurgePercent {}, stepSizePercent {}, intervalSeconds {}",
                options
                    .max_surge_percent
                    .unwrap_or(IncrementalUpgradeOptions::DEFAULT_MAX_SURGE_PERCENT),
                options.step_size_percent.unwrap_or_default(),
                options.interval_seconds.unwrap_or_default()
            ),
        }
    }

    /// The share of `revision`'s desired replicas that are ready
    /// ([`upgrade::ready_percent`] over its serving roles).
    fn ready_percent(&self, revision: &str) -> i32 {
        let spec = self.specs.get(revision).unwrap_or(&self.service.spec);
        let pods = self.pods.of(revision);
        let roles = spec.roles.iter().filter(|r| !r.is_router()).map(|role| {
            let replicas = pods.of_role(&role.name).map(|(_, pods)| pods);
            (
                status::ready_replicas_of(replicas, role.node_count()),
                desired_replicas(self.service, role),
            )
        });
        upgrade::ready_percent(roles)
    }

    fn revision(&self, recorded: &RevisionStatus) -> Revision {
        Revision::from_status(recorded, self.ready_percent(&recorded.revision))
    }

    /// The next step from `active` and `pending` in `direction`; None when
    /// there is nothing to move.
    fn next(
        &self,
        direction: Direction,
        active: &Revision,
        pending: Option<&Revision>,
    ) -> Option<Step> {
        let pace = self.pace();
        match (direction, pending) {
            (Direction::Continue, Some(pending)) => {
                Some(pace.step(active, pending, &self.gateway, self.now))
            }
            (Direction::Start, _) => {
                let pending = Revision {
                    ready_percent: self.ready_percent(self.spec_revision),
                    ..Revision::at(self.spec_revision, 0, 0)
                };
                Some(pace.step(active, &pending, &self.gateway, self.now))
            }
            (Direction::RollBack | Direction::RollBackThenStart, Some(pending)) => {
                Some(pace.rollback_step(active, pending, &self.gateway, self.now))
            }
            _ => None,
        }
    }

    fn plan(self) -> Rollout {
        let previous = self
            .service
            .status
            .as_ref()
            .and_then(|s| s.upgrade.clone())
            .unwrap_or_default();
        // A pending revision without an active one has no traffic to take
        // over: the service adopts an active revision and starts afresh.
        let (active_status, pending_status) = match previous.active {
            Some(active) => (active, previous.pending),
            None => (
                RevisionStatus {
                    revision: installed(self.leader_worker_sets, self.spec_revision),
                    target_capacity: 100,
                    traffic_routed_percent: 100,
                    last_traffic_move_time: None,
                },
                None,
            ),
        };
        let direction = upgrade::direction(
            self.spec_revision,
            Some(&UpgradeStatus {
                active: Some(active_status.clone()),
                pending: pending_status.clone(),
            }),
        );
        let mut active = self.revision(&active_status);
        let mut pending = pending_status
            .as_ref()
            .filter(|p| p.revision != active.name)
            .map(|p| self.revision(p));
        if direction == Direction::Steady {
            // Nothing pending: the active revision carries everything.
            active.target_capacity = 100;
            active.traffic = 100;
        }

        let mut events = Vec::new();
        let mut problems = Vec::new();
        if let Some(step) = self.next(direction, &active, pending.as_ref()) {
            let back = matches!(
                direction,
                Direction::RollBack | Direction::RollBackThenStart
            );
            let grows = if back { &step.active } else { &step.pending };
            let before = if back {
                Some(&active)
            } else {
                pending.as_ref()
            };
            let blocked = step.moved == Moved::Capacity
                && grows.target_capacity > before.map_or(0, |b| b.target_capacity)
                && !self.specs.contains_key(&grows.name);
            if blocked {
                problems.push(format!(
                    "revision {} cannot grow back: its pod templates are not recorded (no ControllerRevision {}); set the spec back to it, or to revision {}",
                    grows.name,
                    revision::record_name(children::service_name(self.service), &grows.name),
                    pending.as_ref().map_or(self.spec_revision, |p| p.name.as_str()),
                ));
            } else {
                if direction == Direction::Start {
                    events.push(Event {
                        warning: false,
                        reason: "UpgradeStarted",
                        note: format!(
                            "upgrade from revision {} to revision {} started ({})",
                            active.name,
                            self.spec_revision,
                            self.describe_pace()
                        ),
                    });
                }
                let reason = match (back, step.moved) {
                    (false, Moved::Capacity) => Some("UpgradeCapacity"),
                    (false, Moved::Traffic) => Some("UpgradeTraffic"),
                    (false, Moved::Done) => Some("UpgradeComplete"),
                    (true, Moved::Capacity) => Some("RollbackCapacity"),
                    (true, Moved::Traffic) => Some("RollbackTraffic"),
                    (true, Moved::Done) => Some("RollbackComplete"),
                    (_, Moved::Nothing(_)) => None,
                };
                if let Some(reason) = reason {
                    events.push(Event {
                        warning: false,
                        reason,
                        note: step.reason.clone(),
                    });
                }
                match (step.moved, step.survivor()) {
                    (Moved::Done, Some(survivor)) => {
                        active = survivor.clone();
                        pending = None;
                    }
                    _ => {
                        active = step.active;
                        pending = Some(step.pending);
                    }
                }
            }
        }
        self.rollout(active, pending, events, problems)
    }

    /// The rollout that leaves the revisions at `active` and `pending`.
    fn rollout(
        &self,
        active: Revision,
        pending: Option<Revision>,
        events: Vec<Event>,
        problems: Vec<String>,
    ) -> Rollout {
        let upgrade = UpgradeStatus {
            active: Some(active.to_status()),
            pending: pending.as_ref().map(Revision::to_status),
        };
        let live: Vec<&Revision> = std::iter::once(&active).chain(pending.as_ref()).collect();
        let runs = self.runs(&live);

        // Where the upgrade stands now, and what the next reconcile would do.
        let direction = upgrade::direction(self.spec_revision, Some(&upgrade));
        let peek = self.next(direction, &active, pending.as_ref());
        let waiting = self.waiting(peek.as_ref(), &problems, direction);
        let conditions = self.conditions(direction, &state_of(&live), waiting.as_ref());
        let requeue = self.requeue(peek.as_ref(), problems.is_empty() && self.gateway_api);
        Rollout {
            runs,
            upgrade: Some(upgrade),
            traffic: Some(Traffic {
                gateway_class: self.options().gateway_class_name.unwrap_or_default(),
                backends: upgrade::weights(&active, pending.as_ref()),
            }),
            events,
            conditions,
            requeue,
            problems,
            now: self.now,
        }
    }

    /// One run per live revision, side by side, at its capacity.
    fn runs(&self, live: &[&Revision]) -> Vec<Run> {
        let svc = children::service_name(self.service);
        let names: Vec<&str> = live.iter().map(|r| r.name.as_str()).collect();
        let namings = revision::side_by_side_namings(svc, &names, self.leader_worker_sets);
        live.iter()
            .zip(namings)
            .map(|(r, naming)| Run {
                revision: r.name.clone(),
                naming,
                capacity: r.target_capacity,
                spec: self.specs.get(&r.name).cloned(),
                members: Members::Labelled,
            })
            .collect()
    }

    /// Why the upgrade is in progress (reason, message), given the step the
    /// next reconcile would take; `None` when there is no step to take.
    fn waiting(
        &self,
        peek: Option<&Step>,
        problems: &[String],
        direction: Direction,
    ) -> Option<(&'static str, String)> {
        match (peek, problems.first()) {
            (_, Some(problem)) => Some(("Stalled", problem.clone())),
            (Some(_), None) if !self.gateway_api => Some((
                "Stalled",
                "the Gateway API (gateway.networking.k8s.io Gateway and HTTPRoute) is not installed in the cluster; NewRevision and IncrementalUpgrade move traffic through it".to_owned(),
            )),
            (Some(_), None) if direction == Direction::Start => Some((
                "Progressing",
                format!("the upgrade to revision {} starts", self.spec_revision),
            )),
            (Some(step), None) => Some((
                step_reason(step.moved),
                match step.moved {
                    Moved::Nothing(_) => step.reason.clone(),
                    _ => format!("next: {}", step.reason),
                },
            )),
            (None, None) => None,
        }
    }

    /// The RollbackInProgress and UpgradeInProgress conditions: the one the
    /// direction makes true says why, the other is idle.
    fn conditions(
        &self,
        direction: Direction,
        state: &str,
        waiting: Option<&(&'static str, String)>,
    ) -> Vec<Report> {
        let upgrading = matches!(direction, Direction::Start | Direction::Continue);
        let rolling_back = matches!(
            direction,
            Direction::RollBack | Direction::RollBackThenStart
        );
        let report =
            |type_: &'static str, is_true: bool, idle: &'static str| match (is_true, waiting) {
                (true, Some((reason, why))) => Report {
                    type_,
                    is_true,
                    reason,
                    message: match direction {
                        Direction::RollBackThenStart => format!(
                            "{state}; {why}; then the upgrade to revision {} starts",
                            self.spec_revision
                        ),
                        _ => format!("{state}; {why}"),
                    },
                },
                _ => Report {
                    type_,
                    is_true: false,
                    reason: idle,
                    message: state.to_owned(),
                },
            };
        vec![
            report(ROLLBACK_IN_PROGRESS, rolling_back, "NoRollback"),
            report(UPGRADE_IN_PROGRESS, upgrading, "NoUpgrade"),
        ]
    }

    /// When to look again: at the interval's end, soon after a move, or at a
    /// poll for what is not watched (the Gateway, the replicas' readiness).
    fn requeue(&self, peek: Option<&Step>, can_move: bool) -> Option<SignedDuration> {
        let step = peek?;
        if !can_move {
            return Some(GATEWAY_POLL);
        }
        match step.moved {
            Moved::Nothing(Wait::Interval { due }) => Some(due.duration_since(self.now).max(SOON)),
            Moved::Nothing(Wait::GatewayNotReady | Wait::RouteNotReady) => Some(GATEWAY_POLL),
            Moved::Nothing(Wait::Readiness) => Some(READINESS_POLL),
            // Only a new spec mends the options, and specs are watched.
            Moved::Nothing(Wait::InvalidOptions) => None,
            _ => Some(SOON),
        }
    }
}

/// Each live revision's capacity and traffic, for the conditions' messages.
fn state_of(live: &[&Revision]) -> String {
    live.iter()
        .map(|r| {
            format!(
                "revision {}: capacity {}%, traffic {}%",
                r.name, r.target_capacity, r.traffic
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The condition reason for the step the next reconcile would take.
fn step_reason(moved: Moved) -> &'static str {
    match moved {
        Moved::Nothing(Wait::GatewayNotReady) => "WaitingForGateway",
        Moved::Nothing(Wait::RouteNotReady) => "WaitingForRoute",
        Moved::Nothing(Wait::Readiness) => "WaitingForReplicas",
        Moved::Nothing(Wait::Interval { .. }) => "WaitingForInterval",
        Moved::Nothing(Wait::InvalidOptions) => "InvalidOptions",
        _ => "Progressing",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use jiff::Timestamp;
    use serde_json::{Value, json};

    use super::*;
    use crate::plan::shared::children::ROLE_NAME;

    #[test]
    fn step_reason_names_what_the_upgrade_waits_for() {
        let due = Timestamp::from_second(1_750_000_000).unwrap();
        for (moved, reason) in [
            (Moved::Nothing(Wait::GatewayNotReady), "WaitingForGateway"),
            (Moved::Nothing(Wait::RouteNotReady), "WaitingForRoute"),
            (Moved::Nothing(Wait::Readiness), "WaitingForReplicas"),
            (Moved::Nothing(Wait::Interval { due }), "WaitingForInterval"),
            (Moved::Nothing(Wait::InvalidOptions), "InvalidOptions"),
            (Moved::Traffic, "Progressing"),
            (Moved::Capacity, "Progressing"),
        ] {
            assert_eq!(step_reason(moved), reason, "{moved:?}");
        }
    }

    #[test]
    fn state_of_lists_each_live_revision() {
        let (a, b) = (Revision::at("a", 100, 80), Revision::at("b", 30, 20));
        assert_eq!(
            state_of(&[&a, &b]),
            "revision a: capacity 100%, traffic 80%; revision b: capacity 30%, traffic 20%"
        );
    }
    use crate::plan::shared::children::{REPLICA_INDEX, REVISION, SERVICE};

    const LWS: &str = "leaderworkerset.x-k8s.io/v1";

    pub(crate) fn t0() -> Timestamp {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    pub(crate) fn service(image: &str, strategy: Value) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "default", "uid": "u-1", "generation": 1},
            "spec": {"roles": [
                {"name": "inference", "componentType": "worker", "replicas": 4,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": image,
                    "ports": [{"containerPort": 8000}]}]}}},
            ], "upgradeStrategy": strategy}
        }))
        .unwrap()
    }

    pub(crate) fn incremental() -> Value {
        json!({"type": "IncrementalUpgrade", "incrementalUpgradeOptions":
            {"maxSurgePercent": 25, "stepSizePercent": 5, "intervalSeconds": 30, "gatewayClassName": "istio"}})
    }

    /// What a Gateway controller writes: the Gateway Accepted and Programmed,
    /// the route's parent Accepted with ResolvedRefs.
    pub(crate) fn program(object: &mut Value) {
        let condition = |t: &str| json!({"type": t, "status": "True"});
        match object["kind"].as_str() {
            Some("Gateway") => {
                object["status"] =
                    json!({"conditions": [condition("Accepted"), condition("Programmed")]});
            }
            Some("HTTPRoute") => {
                object["status"] = json!({"parents": [{"controllerName": "example.com/gateway",
                    "parentRef": {"name": "qwen-gateway"},
                    "conditions": [condition("Accepted"), condition("ResolvedRefs")]}]});
            }
            _ => {}
        }
    }

    #[test]
    fn rolling_update_and_none_run_one_set_and_drop_the_upgrade() {
        let rolling = service("vllm:1", json!({"type": "RollingUpdate"}));
        let rollout = plan(&rolling, &[], &[], &BTreeSet::new(), t0());
        assert_eq!(rollout.runs.len(), 1);
        assert_eq!(
            (rollout.runs[0].members, rollout.runs[0].capacity),
            (Members::All, 100)
        );
        assert_eq!(
            (rollout.upgrade.clone(), rollout.traffic.clone()),
            (None, None)
        );
        assert!(rollout.conditions.is_empty());

        let mut none = service("vllm:1", json!({"type": "None"}));
        none.status = Some(crate::api::inference_service::InferenceServiceStatus {
            upgrade: Some(UpgradeStatus {
                active: Some(RevisionStatus {
                    revision: "aaaaaaaaaa".into(),
                    ..Default::default()
                }),
                pending: Some(RevisionStatus {
                    revision: "bbbbbbbbbb".into(),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        });
        let rollout = plan(&none, &[], &[], &BTreeSet::new(), t0());
        assert_eq!(rollout.runs[0].members, Members::AllKeepingOthers);
        assert_eq!(rollout.upgrade, None);
        assert_eq!(rollout.events[0].reason, "UpgradeAbandoned");
    }

    pub(crate) fn lws(name: &str, index: u32, revision: &str) -> Value {
        json!({"apiVersion": LWS, "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "default", "labels": {
                SERVICE: "qwen", ROLE_NAME: "inference", REPLICA_INDEX: index.to_string(), REVISION: revision},
                "ownerReferences": [{"uid": "u-1"}]},
            "spec": {"replicas": 1}})
    }

    #[test]
    fn an_active_revision_adopts_the_replicas_that_run() {
        let v2 = service("vllm:2", incremental());
        let spec_revision = revision::spec_revision(&v2.spec);
        let old: Vec<Value> = (0..4)
            .map(|i| lws(&format!("qwen-inference-{i}"), i, "aaaaaaaaaa"))
            .collect();
        let refs: Vec<&Value> = old.iter().collect();
        assert_eq!(installed(&refs, &spec_revision), "aaaaaaaaaa");
        assert_eq!(installed(&[], &spec_revision), spec_revision);
        // The replicas of another revision become the active one, and the
        // spec's is pending beside them; the old replicas are left as they
        // are, as nothing records their templates.
        let rollout = plan(&v2, &old, &[], &BTreeSet::new(), t0());
        assert_eq!(rollout.revisions(), ["aaaaaaaaaa", spec_revision.as_str()]);
        assert_eq!(rollout.runs[0].spec, None);
        assert_eq!(
            rollout.runs[1].naming,
            Naming::Suffixed(spec_revision.clone())
        );
        assert_eq!(rollout.events[0].reason, "UpgradeStarted");
    }

    #[test]
    fn a_revision_without_its_record_cannot_grow_back() {
        let mut v3 = service("vllm:3", incremental());
        v3.status = Some(crate::api::inference_service::InferenceServiceStatus {
            upgrade: Some(UpgradeStatus {
                active: Some(RevisionStatus {
                    revision: "aaaaaaaaaa".into(),
                    target_capacity: 75,
                    traffic_routed_percent: 75,
                    last_traffic_move_time: None,
                }),
                pending: Some(RevisionStatus {
                    revision: "bbbbbbbbbb".into(),
                    target_capacity: 25,
                    traffic_routed_percent: 25,
                    last_traffic_move_time: None,
                }),
            }),
            ..Default::default()
        });
        let gateway = [
            {
                let mut g = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "qwen-gateway"}});
                program(&mut g);
                g
            },
            {
                let mut r = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "qwen-route"}});
                program(&mut r);
                r
            },
        ];
        let rollout = plan(&v3, &gateway, &[], &BTreeSet::new(), t0());
        assert_eq!(rollout.problems.len(), 1, "{:?}", rollout);
        assert!(
            rollout.problems[0].starts_with("revision aaaaaaaaaa cannot grow back"),
            "{}",
            rollout.problems[0]
        );
        let upgrade = rollout.upgrade.unwrap();
        assert_eq!(upgrade.active.unwrap().target_capacity, 75, "nothing moved");
        let rollback = rollout
            .conditions
            .iter()
            .find(|c| c.type_ == ROLLBACK_IN_PROGRESS)
            .unwrap();
        assert_eq!((rollback.is_true, rollback.reason), (true, "Stalled"));
    }
}
