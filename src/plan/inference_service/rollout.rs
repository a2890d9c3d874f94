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

use super::revision;
use super::status;
use super::traffic;
use super::upgrade::{self, Direction, Gateway, Moved, Pace, Revision, Step, Wait};
use crate::api::inference_service::{
    IncrementalUpgradeOptions, InferenceService, InferenceServiceSpec, RevisionStatus, Role,
    UpgradeStatus, UpgradeType,
};
use crate::plan::shared::children::{self, Naming, ROLE_NAME};

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
    pods: &[Value],
    unavailable: &BTreeSet<String>,
    now: Timestamp,
) -> Rollout {
    let svc = children::service_name(service);
    let spec_revision = children::revision(&service.spec);
    let leader_worker_sets: Vec<&Value> = children
        .iter()
        .filter(|c| {
            c["apiVersion"] == super::service::LEADER_WORKER_SET.api_version
                && c["kind"] == super::service::LEADER_WORKER_SET.kind
        })
        .collect();
    let strategy = service.spec.upgrade_type();
    let single = |members: Members| {
        let previous = service.status.as_ref().and_then(|s| s.upgrade.as_ref());
        let events = previous
            .and_then(|u| u.pending.as_ref().zip(u.active.as_ref()))
            .map(|(pending, active)| Event {
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
                naming: revision::single_naming(svc, &leader_worker_sets),
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
                leader_worker_sets: &leader_worker_sets,
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
    pods: &'a [Value],
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
        let roles = spec.roles.iter().filter(|r| !r.is_router()).map(|role| {
            let pods: Vec<&Value> = self
                .pods
                .iter()
                .filter(|p| p["metadata"]["labels"][ROLE_NAME] == role.name.as_str())
                .filter(|p| revision::of(p) == Some(revision))
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            (
                status::ready_replicas(&pods, role.node_count()),
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
        let svc = children::service_name(self.service);
        let upgrade = UpgradeStatus {
            active: Some(active.to_status()),
            pending: pending.as_ref().map(Revision::to_status),
        };
        let live: Vec<&Revision> = std::iter::once(&active).chain(pending.as_ref()).collect();
        let names: Vec<&str> = live.iter().map(|r| r.name.as_str()).collect();
        let namings = revision::side_by_side_namings(svc, &names, self.leader_worker_sets);
        let runs = live
            .iter()
            .zip(namings)
            .map(|(r, naming)| Run {
                revision: r.name.clone(),
                naming,
                capacity: r.target_capacity,
                spec: self.specs.get(&r.name).cloned(),
                members: Members::Labelled,
            })
            .collect();

        // Where the upgrade stands now, and what the next reconcile would do.
        let direction = upgrade::direction(self.spec_revision, Some(&upgrade));
        let peek = self.next(direction, &active, pending.as_ref());
        let state = live
            .iter()
            .map(|r| {
                format!(
                    "revision {}: capacity {}%, traffic {}%",
                    r.name, r.target_capacity, r.traffic
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let waiting = match (&peek, problems.first()) {
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
                match step.moved {
                    Moved::Nothing(Wait::GatewayNotReady) => "WaitingForGateway",
                    Moved::Nothing(Wait::RouteNotReady) => "WaitingForRoute",
                    Moved::Nothing(Wait::Readiness) => "WaitingForReplicas",
                    Moved::Nothing(Wait::Interval { .. }) => "WaitingForInterval",
                    Moved::Nothing(Wait::InvalidOptions) => "InvalidOptions",
                    _ => "Progressing",
                },
                match step.moved {
                    Moved::Nothing(_) => step.reason.clone(),
                    _ => format!("next: {}", step.reason),
                },
            )),
            (None, None) => None,
        };
        let upgrading = matches!(direction, Direction::Start | Direction::Continue);
        let rolling_back = matches!(
            direction,
            Direction::RollBack | Direction::RollBackThenStart
        );
        let report =
            |type_: &'static str, is_true: bool, idle: &'static str| match (is_true, &waiting) {
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
                    message: state.clone(),
                },
            };
        let conditions = vec![
            report(ROLLBACK_IN_PROGRESS, rolling_back, "NoRollback"),
            report(UPGRADE_IN_PROGRESS, upgrading, "NoUpgrade"),
        ];
        let requeue = match (&peek, problems.is_empty() && self.gateway_api) {
            (None, _) => None,
            (Some(_), false) => Some(GATEWAY_POLL),
            (Some(step), true) => match step.moved {
                Moved::Nothing(Wait::Interval { due }) => {
                    Some(due.duration_since(self.now).max(SOON))
                }
                Moved::Nothing(Wait::GatewayNotReady | Wait::RouteNotReady) => Some(GATEWAY_POLL),
                Moved::Nothing(Wait::Readiness) => Some(READINESS_POLL),
                // Only a new spec mends the options, and specs are watched.
                Moved::Nothing(Wait::InvalidOptions) => None,
                _ => Some(SOON),
            },
        };
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
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use jiff::{SignedDuration, Timestamp};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::{Value, json};

    use super::*;
    use crate::plan::inference_service::service::{self, Options, Pass, World};
    use crate::plan::shared::children::{LWS_WORKER_INDEX, REPLICA_INDEX, REVISION, SERVICE};

    const LWS: &str = "leaderworkerset.x-k8s.io/v1";

    fn t0() -> Timestamp {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    fn service(image: &str, strategy: Value) -> InferenceService {
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

    fn incremental() -> Value {
        json!({"type": "IncrementalUpgrade", "incrementalUpgradeOptions":
            {"maxSurgePercent": 25, "stepSizePercent": 5, "intervalSeconds": 30, "gatewayClassName": "istio"}})
    }

    /// A cluster as the reconcile pass sees it: what Tandem applied, a
    /// Gateway controller that programs every Gateway and route at once (when
    /// `gateway_ready`), and LeaderWorkerSets whose one pod is ready
    /// `lag` after the LeaderWorkerSet appeared.
    struct Cluster {
        service: InferenceService,
        children: BTreeMap<(String, String), Value>,
        created: BTreeMap<String, Timestamp>,
        now: Timestamp,
        lag: SignedDuration,
        gateway_ready: bool,
        broken: Option<String>,
    }

    impl Cluster {
        fn new(service: InferenceService) -> Self {
            Self {
                service,
                children: BTreeMap::new(),
                created: BTreeMap::new(),
                now: t0(),
                lag: SignedDuration::from_secs(40),
                gateway_ready: true,
                broken: None,
            }
        }

        fn pods(&self) -> Vec<Value> {
            self.children
                .values()
                .filter(|c| c["kind"] == "LeaderWorkerSet")
                .map(|lws| {
                    let labels = &lws["metadata"]["labels"];
                    let name = lws["metadata"]["name"].as_str().unwrap();
                    let age = self.now.duration_since(self.created[name]);
                    let broken = self.broken.as_deref() == labels[REVISION].as_str();
                    let ready = age >= self.lag && !broken;
                    json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("{name}-0"), "namespace": "default", "labels": {
                            SERVICE: "qwen", ROLE_NAME: labels[ROLE_NAME], REPLICA_INDEX: labels[REPLICA_INDEX],
                            REVISION: labels[REVISION], LWS_WORKER_INDEX: "0"}},
                        "spec": {"nodeName": "gpu-1"},
                        "status": {"phase": "Running", "conditions": [
                            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
                })
                .collect()
        }

        fn reconcile(&mut self) -> Pass {
            let children: Vec<Value> = self.children.values().cloned().collect();
            let pods = self.pods();
            let none = BTreeSet::new();
            let world = World {
                children: &children,
                pods: &pods,
                unavailable: &none,
                scale_views: &[],
            };
            let pass =
                service::reconcile(&self.service, &world, &Options::default(), &Time(self.now));
            for apply in &pass.apply {
                let kind = apply.object["kind"].as_str().unwrap().to_owned();
                let name = apply.object["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                self.created.entry(name.clone()).or_insert(self.now);
                let mut object = apply.object.clone();
                if self.gateway_ready {
                    program(&mut object);
                }
                self.children.insert((kind, name), object);
            }
            for delete in &pass.delete {
                let kind = delete.object["kind"].as_str().unwrap().to_owned();
                let name = delete.object["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                self.children.remove(&(kind, name.clone()));
                self.created.remove(&name);
            }
            self.service.status = Some(pass.status.clone());
            pass
        }

        /// The same service (router, strategy, status) with another image.
        fn set_spec(&mut self, image: &str) {
            let mut value = serde_json::to_value(&self.service).unwrap();
            value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!(image);
            self.service = serde_json::from_value(value).unwrap();
        }

        fn upgrade(&self) -> UpgradeStatus {
            self.service
                .status
                .as_ref()
                .unwrap()
                .upgrade
                .clone()
                .unwrap()
        }

        fn of_kind(&self, kind: &str) -> Vec<&Value> {
            self.children
                .values()
                .filter(|c| c["kind"] == kind)
                .collect()
        }

        fn backends(&self) -> Vec<(String, i64)> {
            let route = self.of_kind("HTTPRoute")[0];
            route["spec"]["rules"][0]["backendRefs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| {
                    (
                        b["name"].as_str().unwrap().to_owned(),
                        b["weight"].as_i64().unwrap(),
                    )
                })
                .collect()
        }

        fn images(&self) -> BTreeSet<String> {
            self.of_kind("LeaderWorkerSet")
                .iter()
                .map(|l| {
                    l["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect()
        }

        /// Reconciles every 10 s until `done` holds (at most 500 times),
        /// checking after each pass that no more than 125 % of the replicas
        /// run and that the route's weights sum to 100.
        fn run_until(
            &mut self,
            done: impl Fn(&Cluster) -> bool,
        ) -> Vec<(Timestamp, Pass, UpgradeStatus)> {
            let mut history = Vec::new();
            for _ in 0..500 {
                let pass = self.reconcile();
                let upgrade = self.upgrade();
                assert!(
                    self.of_kind("LeaderWorkerSet").len() <= 5,
                    "never more than 125 % of 4 replicas"
                );
                assert_eq!(self.backends().iter().map(|(_, w)| w).sum::<i64>(), 100);
                history.push((self.now, pass, upgrade));
                if done(self) {
                    return history;
                }
                self.now += SignedDuration::from_secs(10);
            }
            panic!("not done after 500 reconciles: {:?}", self.upgrade());
        }
    }

    /// What a Gateway controller writes: the Gateway Accepted and Programmed,
    /// the route's parent Accepted with ResolvedRefs.
    fn program(object: &mut Value) {
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

    fn settled(cluster: &Cluster) -> bool {
        cluster.upgrade().pending.is_none()
    }

    fn installed_cluster(image: &str) -> Cluster {
        let mut cluster = Cluster::new(service(image, incremental()));
        cluster.run_until(|c| {
            c.pods()
                .iter()
                .all(|p| p["status"]["conditions"][0]["status"] == "True")
        });
        cluster
    }

    #[test]
    fn a_new_service_keeps_the_seed_names_and_routes_everything_to_its_revision() {
        let cluster = installed_cluster("vllm:1");
        let v1 = children::revision(&cluster.service.spec);
        let mut names: Vec<&str> = cluster
            .of_kind("LeaderWorkerSet")
            .iter()
            .map(|l| l["metadata"]["name"].as_str().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "qwen-inference-0",
                "qwen-inference-1",
                "qwen-inference-2",
                "qwen-inference-3"
            ]
        );
        assert_eq!(cluster.backends(), [(format!("qwen-{v1}"), 100)]);
        assert_eq!(
            cluster.of_kind("Gateway")[0]["spec"]["gatewayClassName"],
            "istio"
        );
        assert_eq!(cluster.of_kind("ControllerRevision").len(), 1);
        let upgrade = cluster.upgrade();
        assert_eq!(upgrade.active.unwrap().revision, v1);
        assert_eq!(upgrade.pending, None);
    }

    #[test]
    fn a_full_upgrade_moves_capacity_and_traffic_one_way_at_the_pace_asked() {
        let mut cluster = installed_cluster("vllm:1");
        let v1 = children::revision(&cluster.service.spec);
        cluster.set_spec("vllm:2");
        let v2 = children::revision(&cluster.service.spec);
        let history = cluster.run_until(settled);

        let mut last = (100, 100, 0, 0);
        let mut last_traffic_move: Option<Timestamp> = None;
        for (now, pass, upgrade) in &history {
            let active = upgrade.active.as_ref().unwrap();
            let Some(pending) = upgrade.pending.as_ref() else {
                assert_eq!(active.revision, v2);
                continue;
            };
            assert_eq!(
                (active.revision.as_str(), pending.revision.as_str()),
                (v1.as_str(), v2.as_str())
            );
            let now_state = (
                active.target_capacity,
                active.traffic_routed_percent,
                pending.target_capacity,
                pending.traffic_routed_percent,
            );
            assert!(
                now_state.0 <= last.0 && now_state.1 <= last.1,
                "{last:?} -> {now_state:?}"
            );
            assert!(
                now_state.2 >= last.2 && now_state.3 >= last.3,
                "{last:?} -> {now_state:?}"
            );
            assert!(now_state.0 + now_state.2 <= 125);
            if now_state.3 != last.3 {
                if let Some(before) = last_traffic_move {
                    assert!(now.duration_since(before) >= SignedDuration::from_secs(30));
                }
                last_traffic_move = Some(*now);
                assert!(
                    pass.events.iter().any(|e| e.reason == "UpgradeTraffic"),
                    "{:?}",
                    pass.events
                );
            }
            last = now_state;
        }
        let traffic_steps = history
            .iter()
            .flat_map(|(_, pass, _)| &pass.events)
            .filter(|e| e.reason == "UpgradeTraffic")
            .count();
        assert_eq!(traffic_steps, 20, "100 % in steps of 5");

        let upgrade = cluster.upgrade();
        let active = upgrade.active.unwrap();
        assert_eq!(
            (
                active.revision.as_str(),
                active.target_capacity,
                active.traffic_routed_percent
            ),
            (v2.as_str(), 100, 100)
        );
        assert_eq!(cluster.backends(), [(format!("qwen-{v2}"), 100)]);
        assert_eq!(cluster.images(), BTreeSet::from(["vllm:2".to_owned()]));
        let names: BTreeSet<&str> = cluster
            .of_kind("LeaderWorkerSet")
            .iter()
            .map(|l| l["metadata"]["name"].as_str().unwrap())
            .collect();
        assert!(
            names.iter().all(|n| n.ends_with(&format!("-{v2}"))),
            "{names:?}"
        );
        let records: Vec<&str> = cluster
            .of_kind("ControllerRevision")
            .iter()
            .map(|r| r["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(records, [format!("qwen-{v2}")]);
        let services: Vec<&str> = cluster
            .of_kind("Service")
            .iter()
            .map(|r| r["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(services, [format!("qwen-{v2}")]);
        let conditions = &cluster.service.status.as_ref().unwrap().conditions;
        let upgrading = conditions
            .iter()
            .find(|c| c.type_ == UPGRADE_IN_PROGRESS)
            .unwrap();
        assert_eq!(
            (upgrading.status.as_str(), upgrading.reason.as_str()),
            ("False", "NoUpgrade")
        );

        // Settled: another reconcile writes nothing.
        let again = cluster.reconcile();
        assert!(again.apply.is_empty() && again.delete.is_empty() && again.events.is_empty());
    }

    /// Runs an upgrade from vllm:1 to vllm:2 until half the traffic moved.
    fn halfway() -> (Cluster, String, String) {
        let mut cluster = installed_cluster("vllm:1");
        let v1 = children::revision(&cluster.service.spec);
        cluster.set_spec("vllm:2");
        let v2 = children::revision(&cluster.service.spec);
        cluster.run_until(|c| {
            c.upgrade()
                .pending
                .is_some_and(|p| p.traffic_routed_percent >= 50)
        });
        (cluster, v1, v2)
    }

    #[test]
    fn a_rollback_from_the_middle_returns_to_the_old_spec_even_with_a_broken_new_revision() {
        let (mut cluster, v1, v2) = halfway();
        cluster.broken = Some(v2.clone());
        cluster.set_spec("vllm:1");
        let history = cluster.run_until(settled);
        assert!(
            history
                .iter()
                .any(|(_, p, _)| p.events.iter().any(|e| e.reason == "RollbackTraffic"))
        );
        let rolling_back = history[0].2.clone();
        assert_eq!(rolling_back.pending.unwrap().revision, v2);
        let conditions = &history[0].1.status.conditions;
        let rollback = conditions
            .iter()
            .find(|c| c.type_ == ROLLBACK_IN_PROGRESS)
            .unwrap();
        assert_eq!(rollback.status, "True");
        for (_, _, upgrade) in &history {
            if let Some(pending) = &upgrade.pending {
                assert!(
                    pending.target_capacity >= pending.traffic_routed_percent,
                    "{upgrade:?}"
                );
            }
        }

        let active = cluster.upgrade().active.unwrap();
        assert_eq!(
            (
                active.revision.as_str(),
                active.target_capacity,
                active.traffic_routed_percent
            ),
            (v1.as_str(), 100, 100)
        );
        assert_eq!(cluster.backends(), [(format!("qwen-{v1}"), 100)]);
        assert_eq!(cluster.images(), BTreeSet::from(["vllm:1".to_owned()]));
        assert_eq!(cluster.of_kind("LeaderWorkerSet").len(), 4);
    }

    #[test]
    fn a_third_spec_rolls_back_first_then_upgrades() {
        let (mut cluster, v1, _) = halfway();
        cluster.set_spec("vllm:3");
        let v3 = children::revision(&cluster.service.spec);
        // First back to v1, which grows again from its record…
        cluster.run_until(settled);
        assert_eq!(cluster.upgrade().active.unwrap().revision, v1);
        assert_eq!(cluster.backends(), [(format!("qwen-{v1}"), 100)]);
        assert_eq!(cluster.images(), BTreeSet::from(["vllm:1".to_owned()]));
        // …then a fresh upgrade to v3.
        cluster.run_until(|c| c.upgrade().pending.is_some());
        let history = cluster.run_until(settled);
        assert!(
            history
                .iter()
                .any(|(_, p, _)| p.events.iter().any(|e| e.reason == "UpgradeComplete"))
        );
        let active = cluster.upgrade().active.unwrap();
        assert_eq!(
            (
                active.revision.as_str(),
                active.target_capacity,
                active.traffic_routed_percent
            ),
            (v3.as_str(), 100, 100)
        );
        assert_eq!(cluster.backends(), [(format!("qwen-{v3}"), 100)]);
        assert_eq!(cluster.images(), BTreeSet::from(["vllm:3".to_owned()]));
    }

    /// The example's service with a router role whose route attaches to the
    /// user's own Gateway too.
    fn routed(image: &str) -> InferenceService {
        let mut value = serde_json::to_value(service(image, incremental())).unwrap();
        value["spec"]["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router",
            "httproute": {"parentRefs": [{"name": "inference-gateway"}],
                          "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}]}]},
        }));
        serde_json::from_value(value).unwrap()
    }

    fn names_of(cluster: &Cluster, kind: &str) -> Vec<String> {
        cluster
            .of_kind(kind)
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Every pool selects the leaders of the revision it is labelled with, and
    /// its endpoint picker serves that pool.
    fn assert_one_picker_per_revision_pool(cluster: &Cluster) {
        for pool in cluster.of_kind("InferencePool") {
            let revision = pool["metadata"]["labels"][REVISION].as_str().unwrap();
            assert_eq!(
                pool["spec"]["selector"]["matchLabels"][REVISION], revision,
                "{pool}"
            );
            let epp = pool["spec"]["endpointPickerRef"]["name"].as_str().unwrap();
            let deployment = cluster.children[&("Deployment".to_owned(), epp.to_owned())].clone();
            assert_eq!(
                deployment["spec"]["template"]["spec"]["containers"][0]["args"][1],
                pool["metadata"]["name"]
            );
        }
    }

    #[test]
    fn a_router_upgrades_through_one_pool_and_endpoint_picker_per_revision() {
        let mut cluster = Cluster::new(routed("vllm:1"));
        cluster.run_until(|c| {
            c.pods()
                .iter()
                .all(|p| p["status"]["conditions"][0]["status"] == "True")
        });
        let v1 = children::revision(&cluster.service.spec);
        // Never upgraded: today's router names, and one route.
        assert_eq!(names_of(&cluster, "InferencePool"), ["qwen-pool"]);
        assert_eq!(names_of(&cluster, "Deployment"), ["qwen-epp"]);
        assert_eq!(names_of(&cluster, "Service"), ["qwen-epp"]);
        assert_eq!(names_of(&cluster, "HTTPRoute"), ["qwen-route"]);
        assert_eq!(cluster.backends(), [("qwen-pool".to_owned(), 100)]);
        let route = cluster.of_kind("HTTPRoute")[0];
        assert_eq!(route["spec"]["parentRefs"][1]["name"], "inference-gateway");
        assert_eq!(
            route["spec"]["rules"][0]["matches"][0]["path"]["value"],
            "/v1"
        );
        assert_one_picker_per_revision_pool(&cluster);

        cluster.set_spec("vllm:2");
        let v2 = children::revision(&cluster.service.spec);
        let pool2 = format!("qwen-pool-{v2}");
        // run_until checks that the weights sum to 100 after every pass.
        let history = cluster.run_until(|c| {
            c.upgrade()
                .pending
                .is_some_and(|p| p.traffic_routed_percent >= 50)
        });
        let mut splits: Vec<Vec<String>> = history
            .iter()
            .map(|(_, _, u)| {
                let mut pools = vec!["qwen-pool".to_owned()];
                pools.extend(u.pending.as_ref().map(|_| pool2.clone()));
                pools
            })
            .collect();
        splits.dedup();
        assert_eq!(splits, [vec!["qwen-pool".to_owned(), pool2.clone()]]);
        let weights = cluster.backends();
        assert_eq!(
            weights.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            ["qwen-pool", pool2.as_str()]
        );
        assert_eq!(weights[1].1, 50);
        assert_eq!(
            names_of(&cluster, "InferencePool"),
            ["qwen-pool".to_owned(), pool2.clone()]
        );
        assert_eq!(names_of(&cluster, "HTTPRoute"), ["qwen-route"]);
        assert_one_picker_per_revision_pool(&cluster);

        let history = cluster.run_until(settled);
        assert_eq!(cluster.backends(), [(pool2.clone(), 100)]);
        assert_eq!(names_of(&cluster, "InferencePool"), [pool2.as_str()]);
        let epp2 = format!("qwen-epp-{v2}");
        assert_eq!(names_of(&cluster, "Deployment"), [epp2.as_str()]);
        assert_eq!(names_of(&cluster, "ConfigMap"), [epp2.as_str()]);
        assert_eq!(names_of(&cluster, "Service"), [epp2.as_str()]);
        assert_eq!(names_of(&cluster, "ServiceAccount"), ["qwen-epp"]);
        assert_one_picker_per_revision_pool(&cluster);
        let notes: Vec<&str> = history
            .iter()
            .flat_map(|(_, pass, _)| &pass.delete)
            .map(|d| d.note.as_str())
            .collect();
        for gone in [
            "InferencePool qwen-pool",
            "Deployment qwen-epp",
            "ConfigMap qwen-epp",
            "Service qwen-epp",
        ] {
            let note = format!("{gone} deleted: revision {v1} no longer runs");
            assert!(notes.contains(&note.as_str()), "{note} in {notes:#?}");
        }
        let again = cluster.reconcile();
        assert!(again.apply.is_empty() && again.delete.is_empty() && again.events.is_empty());
    }

    #[test]
    fn new_revision_switches_all_traffic_once_the_new_revision_is_ready() {
        let strategy = json!({"type": "NewRevision", "incrementalUpgradeOptions": {"gatewayClassName": "istio"}});
        let mut cluster = Cluster::new(service("vllm:1", strategy));
        cluster.run_until(|c| {
            c.pods()
                .iter()
                .all(|p| p["status"]["conditions"][0]["status"] == "True")
        });
        cluster.set_spec("vllm:2");
        let v2 = children::revision(&cluster.service.spec);
        let mut splits = Vec::new();
        let mut history = Vec::new();
        for _ in 0..20 {
            let pass = cluster.reconcile();
            let backends = cluster.backends();
            splits.push(backends.iter().map(|(_, w)| *w).collect::<Vec<_>>());
            assert!(cluster.of_kind("LeaderWorkerSet").len() <= 8);
            history.push(pass);
            if settled(&cluster) {
                break;
            }
            cluster.now += SignedDuration::from_secs(10);
        }
        splits.dedup();
        assert_eq!(splits, [vec![100, 0], vec![0, 100], vec![100]]);
        assert_eq!(cluster.backends(), [(format!("qwen-{v2}"), 100)]);
        assert_eq!(cluster.images(), BTreeSet::from(["vllm:2".to_owned()]));
    }

    #[test]
    fn nothing_moves_until_the_gateway_is_programmed() {
        let mut cluster = installed_cluster("vllm:1");
        cluster.gateway_ready = false;
        for kind in ["Gateway", "HTTPRoute"] {
            for object in cluster.children.values_mut().filter(|c| c["kind"] == kind) {
                object["status"] = json!({});
            }
        }
        cluster.set_spec("vllm:2");
        let first = cluster.reconcile();
        assert_eq!(
            first.events.iter().map(|e| e.reason).collect::<Vec<_>>(),
            ["UpgradeStarted"]
        );
        let pending = cluster.upgrade().pending.unwrap();
        assert_eq!(
            (pending.target_capacity, pending.traffic_routed_percent),
            (0, 0)
        );
        let upgrading = first
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == UPGRADE_IN_PROGRESS)
            .unwrap();
        assert_eq!(
            (upgrading.status.as_str(), upgrading.reason.as_str()),
            ("True", "WaitingForGateway")
        );
        assert_eq!(first.requeue, Some(std::time::Duration::from_secs(10)));

        // Nothing changed: nothing is written again.
        cluster.now += SignedDuration::from_secs(10);
        let second = cluster.reconcile();
        assert!(second.apply.is_empty() && second.delete.is_empty() && second.events.is_empty());
        assert_eq!(second.status, first.status);
    }

    #[test]
    fn without_the_gateway_api_the_service_runs_and_the_upgrade_says_why_it_waits() {
        let s = service("vllm:1", incremental());
        let unavailable = BTreeSet::from(["Gateway".to_owned(), "HTTPRoute".to_owned()]);
        let rollout = plan(&s, &[], &[], &unavailable, t0());
        assert_eq!(rollout.runs.len(), 1);
        assert_eq!(rollout.runs[0].capacity, 100);
        let pass = service::reconcile(
            &s,
            &World {
                children: &[],
                pods: &[],
                unavailable: &unavailable,
                scale_views: &[],
            },
            &Options::default(),
            &Time(t0()),
        );
        let kinds: BTreeSet<&str> = pass
            .apply
            .iter()
            .map(|a| a.object["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            BTreeSet::from([
                "ControllerRevision",
                "LeaderWorkerSet",
                "PodDisruptionBudget",
                "Service"
            ])
        );
        let failed = pass
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .unwrap();
        assert!(
            failed.message.contains("the Gateway API is not installed"),
            "{}",
            failed.message
        );

        // A new revision waits, Stalled, and says why.
        let mut v2 = service("vllm:2", incremental());
        v2.status = Some(pass.status.clone());
        let children: Vec<Value> = pass.apply.iter().map(|a| a.object.clone()).collect();
        let rollout = plan(&v2, &children, &[], &unavailable, t0());
        let upgrading = rollout
            .conditions
            .iter()
            .find(|c| c.type_ == UPGRADE_IN_PROGRESS)
            .unwrap();
        assert_eq!((upgrading.is_true, upgrading.reason), (true, "Stalled"));
        assert!(
            upgrading.message.contains("the Gateway API"),
            "{}",
            upgrading.message
        );
        assert_eq!(
            rollout.runs.iter().map(|r| r.capacity).collect::<Vec<_>>(),
            [100, 0]
        );
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

    fn lws(name: &str, index: u32, revision: &str) -> Value {
        json!({"apiVersion": LWS, "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "default", "labels": {
                SERVICE: "qwen", ROLE_NAME: "inference", REPLICA_INDEX: index.to_string(), REVISION: revision},
                "ownerReferences": [{"uid": "u-1"}]},
            "spec": {"replicas": 1}})
    }

    #[test]
    fn strategy_none_leaves_running_replicas_on_their_revision() {
        let mut s = service("vllm:2", json!({"type": "None"}));
        s.spec.roles[0].replicas = Some(3);
        let old = [
            lws("qwen-inference-0", 0, "aaaaaaaaaa"),
            lws("qwen-inference-1", 1, "aaaaaaaaaa"),
        ];
        let none = BTreeSet::new();
        let pass = service::reconcile(
            &s,
            &World {
                children: &old,
                pods: &[],
                unavailable: &none,
                scale_views: &[],
            },
            &Options::default(),
            &Time(t0()),
        );
        let applied: Vec<&str> = pass
            .apply
            .iter()
            .filter(|a| a.object["kind"] == "LeaderWorkerSet")
            .map(|a| a.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            applied,
            ["qwen-inference-2"],
            "only the new replica, with the new template"
        );
        assert!(pass.delete.is_empty());
        assert_eq!(
            pass.apply[0].object["metadata"]["labels"][REVISION],
            children::role_revision(&s.spec, &s.spec.roles[0]),
            "labelled with the role's revision"
        );
        let progressing = pass
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .unwrap();
        assert_ne!(
            progressing.reason, "Updating",
            "old revisions are expected under None"
        );
    }

    #[test]
    fn an_active_revision_adopts_the_replicas_that_run() {
        let v2 = service("vllm:2", incremental());
        let spec_revision = children::revision(&v2.spec);
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

    /// The worked example of docs/upgrades.md: surge 25, step 5, interval
    /// 30 s, 4 replicas, a reconcile every 10 s and replicas ready 40 s
    /// after they are created, as a Markdown table of every step the real
    /// reconcile pass takes.
    fn worked_example() -> String {
        let mut cluster = installed_cluster("vllm:1");
        cluster.set_spec("vllm:2");
        let v2 = children::revision(&cluster.service.spec);
        let start = cluster.now;
        let history = cluster.run_until(settled);
        let mut table = "| t | step | old revision: capacity / traffic | new revision: capacity / traffic | replicas old + new |\n|---|---|---|---|---|\n".to_owned();
        let replicas = |r: Option<&RevisionStatus>| {
            r.map_or(0, |r| upgrade::replicas_for(4, r.target_capacity))
        };
        let show = |r: Option<&RevisionStatus>| {
            r.map_or("removed".to_owned(), |r| {
                format!("{}% / {}%", r.target_capacity, r.traffic_routed_percent)
            })
        };
        for (now, pass, status) in history
            .iter()
            .filter(|(_, pass, _)| !pass.events.is_empty())
        {
            let (old, new) = match (status.active.as_ref(), status.pending.as_ref()) {
                (Some(active), None) if active.revision == v2 => (None, Some(active)),
                (active, pending) => (active, pending),
            };
            let steps: Vec<&str> = pass.events.iter().map(|e| e.reason).collect();
            table.push_str(&format!(
                "| {}s | {} | {} | {} | {} + {} |\n",
                now.duration_since(start).as_secs(),
                steps.join(", "),
                show(old),
                show(new),
                replicas(old),
                replicas(new),
            ));
        }
        table
    }

    #[test]
    fn the_worked_example_in_the_docs_is_what_the_plan_does() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/upgrades.md");
        let (begin, end) = (
            "<!-- worked example: begin -->\n",
            "<!-- worked example: end -->",
        );
        let table = worked_example();
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        let current = doc
            .split_once(begin)
            .and_then(|(_, rest)| rest.split_once(end))
            .map(|(table, _)| table);
        if std::env::var_os("TANDEM_WRITE_DOCS").is_some() {
            let (head, tail) = doc.split_once(begin).expect("the doc has the begin marker");
            let (_, tail) = tail.split_once(end).expect("the doc has the end marker");
            std::fs::write(path, format!("{head}{begin}{table}{end}{tail}")).unwrap();
            return;
        }
        assert_eq!(
            current,
            Some(table.as_str()),
            "docs/upgrades.md is stale: run TANDEM_WRITE_DOCS=1 cargo test --lib plan::inference_service::rollout::tests::the_worked_example"
        );
    }
}
