//! A replica that cannot start is not recreated forever (`spec.roles[].recovery`).
//!
//! Without a recovery setting, LeaderWorkerSet recreates a replica's group
//! at once each time one of its containers restarts (`RecreateGroupOnPodRestart`,
//! or `RecreateGroupAfterStart` once every pod has started,
//! [`super::topology::set_group_restart`]): a model that cannot load is
//! downloaded and loaded again and again, its GPUs held all the while.
//!
//! With one, Tandem recreates the group itself, with a back-off:
//!
//! - Its new LeaderWorkerSets have LWS's restart policy `None`, so that LWS
//!   leaves a restarted container to the kubelet and the restart stays
//!   visible on the pod until Tandem has counted it.
//! - A restart counts ([`decide`]) when a container of one of the replica's
//!   pods has restarted (LWS's own test, `ContainerRestarted`), the pod is
//!   not of a group counted before, and either every pod of the group exists
//!   and none is Pending (LWS's `RecreateGroupAfterStart`: a pull or a
//!   scheduling wait is no failure) or the pod is being deleted (someone,
//!   an older LWS policy, recreates the group already).
//! - Each restart scales the replica's LeaderWorkerSet to `replicas: 0` for
//!   `backoffSeconds × 2^(restarts-1)`, at most `maxBackoffSeconds`: its pods
//!   go, its nodes are free, and then it is scaled back and LWS makes a new
//!   group. One Warning `BackOff` Event per restart.
//! - Past `maxRestarts` the replica is failed: held at `replicas: 0` until
//!   the role's revision (its template) or its recovery setting changes,
//!   with one Warning `ReplicaFailed` Event. The role's status counts it
//!   (`failedReplicas`), its phase is `Failed`, and the service's `Failed`
//!   and `Degraded` conditions name it.
//! - A replica ready for `maxBackoffSeconds` (the kubelet forgets a
//!   container's back-off after ten minutes of running, the default here)
//!   has its restarts forgotten.
//!
//! What was counted lives on the replica's LeaderWorkerSet, in the
//! [`RECORD`] annotation, so that a restart of Tandem or a second replica
//! of it continues the count: the restarts, when the last was counted and
//! the pods it saw then (a pod created before is of a group already
//! counted), and until when the replica is held.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::rollout::Event;
use crate::api::inference_service::{Recovery, Role};
use crate::plan::shared::pod::Pod;

/// The annotation on a replica's LeaderWorkerSet that carries its [`Record`].
pub const RECORD: &str = "fusioninfer.io/recovery";

/// The reasons of a recovery's Events: a restart counted, a replica failed,
/// a hold lifted by a change.
pub const EVENT_REASONS: [&str; 3] = [BACK_OFF, REPLICA_FAILED, RECOVERY_RESET];
pub const BACK_OFF: &str = "BackOff";
pub const REPLICA_FAILED: &str = "ReplicaFailed";
pub const RECOVERY_RESET: &str = "RecoveryReset";

/// LeaderWorkerSet's restart policy that leaves a restarted container to
/// the kubelet (LWS 0.6 and later; `Default` before).
pub const NO_GROUP_RESTART: &str = "None";

/// A role's recovery setting with its defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub backoff_seconds: i64,
    pub max_backoff_seconds: i64,
    pub max_restarts: Option<u32>,
}

impl Settings {
    /// The role's setting, None when it has none.
    pub fn of(role: &Role) -> Option<Settings> {
        let recovery = role.recovery.as_ref()?;
        let backoff_seconds = recovery
            .backoff_seconds
            .unwrap_or(Recovery::DEFAULT_BACKOFF_SECONDS)
            .max(1);
        Some(Settings {
            backoff_seconds,
            max_backoff_seconds: recovery
                .max_backoff_seconds
                .unwrap_or(Recovery::DEFAULT_MAX_BACKOFF_SECONDS)
                .max(backoff_seconds),
            max_restarts: recovery
                .max_restarts
                .and_then(|limit| u32::try_from(limit).ok()),
        })
    }

    /// The back-off after restart number `restarts` (1 for the first):
    /// the base doubled per restart before it, at most the maximum.
    pub fn backoff(&self, restarts: u32) -> i64 {
        let doublings = restarts.saturating_sub(1).min(62);
        self.backoff_seconds
            .saturating_mul(1_i64 << doublings)
            .min(self.max_backoff_seconds)
    }

    /// What the restarts are counted under: the replica's revision and this
    /// setting. A change of either begins the count again.
    fn key(&self, revision: &str) -> String {
        let limit = self
            .max_restarts
            .map_or_else(|| "-".to_owned(), |l| l.to_string());
        format!(
            "{revision}/{}/{}/{limit}",
            self.backoff_seconds, self.max_backoff_seconds
        )
    }

    fn limit_text(&self) -> String {
        self.max_restarts
            .map_or_else(|| "no limit".to_owned(), |l| format!("limit {l}"))
    }
}

/// What Tandem counted of one replica's restarts ([`RECORD`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The revision and setting the restarts were counted under.
    pub key: String,
    pub restarts: u32,
    /// When the last restart was counted (RFC 3339).
    pub counted_at: String,
    /// The uids of the replica's pods then: their restarts are counted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// Until when the replica holds no pods (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Past the limit: held until the key changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// The last restart: pod, container and exit.
    #[serde(default)]
    pub last: String,
}

impl Record {
    /// The record `lws` carries, if it carries one that reads.
    pub fn of(lws: &Value) -> Option<Record> {
        lws["metadata"]["annotations"][RECORD]
            .as_str()
            .and_then(|text| serde_json::from_str(text).ok())
    }

    fn counted_at(&self) -> Option<Timestamp> {
        self.counted_at.parse().ok()
    }

    fn until(&self) -> Option<Timestamp> {
        self.until.as_deref().and_then(|t| t.parse().ok())
    }
}

/// Which replica is decided for.
#[derive(Clone, Copy, Debug)]
pub struct Replica<'a> {
    pub role: &'a str,
    pub index: u32,
    /// Pods in its group (the role's node count).
    pub nodes: usize,
    /// The revision its LeaderWorkerSet is written at.
    pub revision: &'a str,
}

/// Where a replica stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Not held: its LeaderWorkerSet keeps its group.
    Serving,
    /// Held with no pods until then, and recreated after.
    BackingOff { until: Timestamp },
    /// Past its limit: held until its revision or setting changes.
    Failed,
}

/// One replica's recovery this pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// What its LeaderWorkerSet carries ([`RECORD`]); None: nothing.
    pub record: Option<Record>,
    pub standing: Standing,
    /// The Event of a restart counted, a failure, or a hold lifted by a change.
    pub event: Option<Event>,
    /// When the decision changes without anything else changing.
    pub wake: Option<Timestamp>,
}

impl Decision {
    fn serving(record: Option<Record>) -> Decision {
        Decision {
            record,
            standing: Standing::Serving,
            event: None,
            wake: None,
        }
    }

    /// Whether the replica holds no pods.
    pub fn held(&self) -> bool {
        self.standing != Standing::Serving
    }

    /// What the role's status says of the replica while it is held.
    pub fn report(&self, replica: &Replica<'_>) -> Option<String> {
        let record = self.record.as_ref()?;
        let index = replica.index;
        match &self.standing {
            Standing::Serving => None,
            Standing::BackingOff { until } => Some(format!(
                "replica {index}: restarted {} time(s), last {}; it holds no pods until {until}, then is recreated",
                record.restarts, record.last
            )),
            Standing::Failed => Some(format!(
                "replica {index}: failed after {} restart(s), last {}; it holds no pods until the role's template or recovery changes",
                record.restarts, record.last
            )),
        }
    }
}

/// One replica's recovery this pass, from the role's `settings` (None: no
/// recovery, nothing held, no record), its LeaderWorkerSet as `observed`,
/// its `pods` (those being deleted too) and `now`. See the module's text.
pub fn decide(
    settings: Option<&Settings>,
    replica: &Replica<'_>,
    observed: Option<&Value>,
    pods: &[&Pod],
    now: Timestamp,
) -> Decision {
    let Some(settings) = settings else {
        return Decision::serving(None);
    };
    let key = settings.key(replica.revision);
    let (role, index) = (replica.role, replica.index);
    let mut reset = None;
    let record = match observed.and_then(Record::of) {
        Some(record) if record.key == key => Some(record),
        // The role's template or setting changed: the count begins again;
        // the pods already seen stay seen.
        Some(record) => {
            if record.failed || record.until().is_some_and(|until| until > now) {
                reset = Some(Event {
                    warning: false,
                    reason: RECOVERY_RESET,
                    note: format!(
                        "replica {index} of role {role}: the role's template or recovery changed since its {} restart(s); it is recreated now",
                        record.restarts
                    ),
                });
            }
            Some(Record {
                key: key.clone(),
                restarts: 0,
                until: None,
                failed: false,
                ..record
            })
        }
        None => None,
    };
    if record.as_ref().is_some_and(|r| r.failed) {
        return Decision {
            record,
            standing: Standing::Failed,
            event: None,
            wake: None,
        };
    }
    if let Some((pod, why)) = restart(pods, replica.nodes, record.as_ref()) {
        let restarts = record.as_ref().map_or(0, |r| r.restarts).saturating_add(1);
        return counted(
            settings,
            replica,
            (key, restarts),
            format!("pod {pod} {why}"),
            (pods, now),
        );
    }
    let Some(record) = record else {
        return Decision::serving(None);
    };
    if let Some(until) = record.until().filter(|until| *until > now) {
        return Decision {
            record: Some(record),
            standing: Standing::BackingOff { until },
            event: reset,
            wake: Some(until),
        };
    }
    // Forgotten once the whole group has been ready for the longest
    // back-off.
    let mut decision = Decision::serving(Some(record));
    decision.event = reset;
    if whole_and_ready(pods, replica.nodes) {
        let since = pods.iter().filter_map(|p| p.ready_since).max();
        let forget_at = since
            .and_then(|s| {
                s.checked_add(SignedDuration::from_secs(settings.max_backoff_seconds))
                    .ok()
            })
            .unwrap_or(now);
        if forget_at <= now {
            decision.record = None;
        } else {
            decision.wake = Some(forget_at);
        }
    }
    decision
}

/// Restart number `restarts` of `replica`, counted under `key` at `now`
/// (`last` says what restarted; `pods` are the replica's pods then): held
/// for its back-off, or failed past the limit, with its Event.
fn counted(
    settings: &Settings,
    replica: &Replica<'_>,
    (key, restarts): (String, u32),
    last: String,
    (pods, now): (&[&Pod], Timestamp),
) -> Decision {
    let (role, index) = (replica.role, replica.index);
    let failed = settings.max_restarts.is_some_and(|limit| restarts > limit);
    let backoff = settings.backoff(restarts);
    let until = now.saturating_add(SignedDuration::from_secs(backoff)).ok();
    let event = if failed {
        Event {
            warning: true,
            reason: REPLICA_FAILED,
            note: format!(
                "replica {index} of role {role}: {last}; restart {restarts} is past maxRestarts {}: it holds no pods until the role's template or recovery changes",
                settings.max_restarts.unwrap_or(0)
            ),
        }
    } else {
        Event {
            warning: true,
            reason: BACK_OFF,
            note: format!(
                "replica {index} of role {role}: {last}; restart {restarts} ({}): it holds no pods for {backoff} s, then is recreated",
                settings.limit_text()
            ),
        }
    };
    let record = Record {
        key,
        restarts,
        counted_at: now.to_string(),
        pods: pods.iter().filter_map(|p| p.uid.clone()).collect(),
        until: (!failed).then(|| until.map(|u| u.to_string())).flatten(),
        failed,
        last,
    };
    Decision {
        standing: match (failed, until) {
            (false, Some(until)) => Standing::BackingOff { until },
            _ => Standing::Failed,
        },
        wake: (!failed).then_some(until).flatten(),
        record: Some(record),
        event: Some(event),
    }
}

/// The first restart among `pods` not counted before (`record`): a pod
/// with a restarted container (LWS's `ContainerRestarted`: a main or init
/// container with `restartCount > 0`), created since the last count and
/// not seen then, either being deleted or in a group of `nodes` pods none
/// of which is Pending. The pod's name and what restarted.
fn restart(pods: &[&Pod], nodes: usize, record: Option<&Record>) -> Option<(String, String)> {
    let since = record.and_then(Record::counted_at);
    let seen = |pod: &Pod| {
        record.is_some_and(|r| {
            pod.uid
                .as_ref()
                .is_some_and(|u| r.pods.iter().any(|p| p == u))
        }) || matches!((since, pod.created), (Some(since), Some(created)) if created < since)
    };
    let live: Vec<&Pod> = pods.iter().copied().filter(|p| !p.deleting()).collect();
    let started = live.len() >= nodes && live.iter().all(|p| p.phase.as_deref() != Some("Pending"));
    pods.iter()
        .copied()
        .filter(|p| !seen(p))
        .filter(|p| started || p.deleting())
        .find_map(|pod| Some((pod.name.clone(), restarted(pod)?)))
}

/// What restarted in `pod`, if a container did: its name, restarts and last
/// exit.
fn restarted(pod: &Pod) -> Option<String> {
    pod.containers.iter().find(|c| c.restarts > 0).map(|c| {
        let name = c.name.as_deref().unwrap_or("?");
        let exit = match (c.exit_code, c.exit_reason.as_deref()) {
            (Some(code), Some(reason)) => format!(", exit code {code} ({reason})"),
            (Some(code), None) => format!(", exit code {code}"),
            _ => String::new(),
        };
        format!("container {name} restarted {} time(s){exit}", c.restarts)
    })
}

/// Whether `pods` not being deleted are `nodes` of them, all ready.
fn whole_and_ready(pods: &[&Pod], nodes: usize) -> bool {
    let live: Vec<&&Pod> = pods.iter().filter(|p| !p.deleting()).collect();
    !live.is_empty() && live.len() >= nodes && live.iter().all(|p| p.ready)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn settings(limit: Option<u32>) -> Settings {
        Settings {
            backoff_seconds: 30,
            max_backoff_seconds: 100,
            max_restarts: limit,
        }
    }

    const REPLICA: Replica<'static> = Replica {
        role: "decode",
        index: 1,
        nodes: 2,
        revision: "r1",
    };

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    /// A pod of the group, created at `created`, its container restarted
    /// `restarts` times.
    fn pod(uid: &str, created: i64, restarts: i64) -> Value {
        json!({"metadata": {"name": format!("ds-decode-1-{uid}"), "uid": uid,
                "creationTimestamp": at(created).to_string()},
            "status": {"phase": "Running",
                "containerStatuses": [{"name": "vllm", "restartCount": restarts,
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}})
    }

    /// [`super::decide`] of pods written as the API server shows them.
    fn decide(
        settings: Option<&Settings>,
        replica: &Replica<'_>,
        observed: Option<&Value>,
        pods: &[&Value],
        now: Timestamp,
    ) -> Decision {
        let pods: Vec<Pod> = pods.iter().map(|p| Pod::from_json(p)).collect();
        let pods: Vec<&Pod> = pods.iter().collect();
        super::decide(settings, replica, observed, &pods, now)
    }

    fn lws(decision: &Decision) -> Value {
        json!({"metadata": {"annotations": {RECORD: serde_json::to_string(decision.record.as_ref().unwrap()).unwrap()}}})
    }

    /// The first restart of the group of pods `a` and `b`, counted at 5 s.
    fn first_restart(s: &Settings) -> Decision {
        decide(
            Some(s),
            &REPLICA,
            None,
            &[&pod("a", 0, 1), &pod("b", 0, 0)],
            at(5),
        )
    }

    #[test]
    fn the_backoff_doubles_up_to_its_maximum() {
        let s = settings(None);
        assert_eq!(
            (1..=5).map(|n| s.backoff(n)).collect::<Vec<_>>(),
            [30, 60, 100, 100, 100]
        );
        assert_eq!(s.backoff(u32::MAX), 100);
    }

    #[test]
    fn without_a_setting_nothing_is_held_or_recorded() {
        let pods = [pod("a", 0, 3), pod("b", 0, 0)];
        let pods: Vec<&Value> = pods.iter().collect();
        let decision = decide(None, &REPLICA, None, &pods, at(10));
        assert_eq!(decision, Decision::serving(None));
    }

    /// A replica that keeps failing: held for 30, 60, 100 s, failed at the
    /// third restart past a limit of 2, and held until its revision changes;
    /// each group counted once, however often its pods are seen.
    #[test]
    fn a_replica_that_keeps_failing_backs_off_then_fails_at_its_limit() {
        let s = settings(Some(2));
        let mut observed: Option<Value> = None;
        let mut holds = Vec::new();
        let mut events = Vec::new();
        let mut now = 0;
        for group in ["g1", "g2", "g3"] {
            // The group starts after the hold; its leader restarts.
            let pods = [
                pod(&format!("{group}-0"), now, 1),
                pod(&format!("{group}-1"), now, 0),
            ];
            let pods: Vec<&Value> = pods.iter().collect();
            let decision = decide(Some(&s), &REPLICA, observed.as_ref(), &pods, at(now + 5));
            events.push(decision.event.clone().unwrap().reason);
            // Seen again, the same restart is not counted twice.
            let again = decide(
                Some(&s),
                &REPLICA,
                Some(&lws(&decision)),
                &pods,
                at(now + 6),
            );
            assert_eq!(again.event, None);
            assert_eq!(again.record, decision.record);
            match decision.standing {
                Standing::BackingOff { until } => {
                    holds.push(until.as_second() - at(now + 5).as_second());
                    assert_eq!(decision.wake, Some(until));
                    now = until.as_second() - at(0).as_second();
                }
                Standing::Failed => holds.push(-1),
                Standing::Serving => panic!("counted: {decision:?}"),
            }
            observed = Some(lws(&decision));
        }
        assert_eq!(holds, [30, 60, -1]);
        assert_eq!(events, ["BackOff", "BackOff", "ReplicaFailed"]);
        let failed = decide(Some(&s), &REPLICA, observed.as_ref(), &[], at(now + 3600));
        assert_eq!(failed.standing, Standing::Failed);
        assert_eq!(
            failed.report(&REPLICA).unwrap(),
            "replica 1: failed after 3 restart(s), last pod ds-decode-1-g3-0 container vllm restarted 1 time(s), exit code 1 (Error); it holds no pods until the role's template or recovery changes"
        );
        // A new revision brings it back, with one Event, its count at 0.
        let changed = Replica {
            revision: "r2",
            ..REPLICA
        };
        let back = decide(Some(&s), &changed, observed.as_ref(), &[], at(now + 3601));
        assert_eq!(back.standing, Standing::Serving);
        assert_eq!(back.record.as_ref().unwrap().restarts, 0);
        assert_eq!(back.event.unwrap().reason, "RecoveryReset");
        // So does a higher limit.
        let raised = decide(
            Some(&settings(Some(5))),
            &REPLICA,
            observed.as_ref(),
            &[],
            at(now + 3601),
        );
        assert_eq!(raised.standing, Standing::Serving);
    }

    /// LWS's `RecreateGroupAfterStart`: a restart while a pod of the group
    /// is Pending or missing is no failure yet; once the group is whole it
    /// is.
    #[test]
    fn a_restart_counts_once_the_whole_group_has_started() {
        let s = settings(None);
        let restarted = pod("a", 0, 2);
        let mut pending = pod("b", 0, 0);
        pending["status"]["phase"] = json!("Pending");
        for pods in [vec![&restarted], vec![&restarted, &pending]] {
            let decision = decide(Some(&s), &REPLICA, None, &pods, at(5));
            assert_eq!(decision, Decision::serving(None), "{pods:?}");
        }
        let running = pod("b", 0, 0);
        let decision = decide(Some(&s), &REPLICA, None, &[&restarted, &running], at(5));
        assert!(decision.held());
        // A pod being deleted with a restart (an older LWS policy recreating
        // the group) counts whatever its group shows.
        let mut deleting = pod("c", 0, 1);
        deleting["metadata"]["deletionTimestamp"] = json!(at(4).to_string());
        assert!(decide(Some(&s), &REPLICA, None, &[&deleting], at(5)).held());
    }

    /// Pods of a group counted before (created before the count) are not a
    /// new restart, even when their uids were not seen.
    #[test]
    fn a_pod_older_than_the_last_count_is_not_counted() {
        let s = settings(None);
        let first = first_restart(&s);
        let observed = lws(&first);
        let mut old = pod("z", 1, 1);
        old["metadata"]["deletionTimestamp"] = json!(at(6).to_string());
        let later = decide(Some(&s), &REPLICA, Some(&observed), &[&old], at(40));
        assert_eq!(later.record, first.record);
        assert_eq!(later.event, None);
        // A group made after the count and restarting is.
        let new = decide(
            Some(&s),
            &REPLICA,
            Some(&observed),
            &[&pod("c", 36, 1), &pod("d", 36, 0)],
            at(40),
        );
        assert_eq!(new.record.unwrap().restarts, 2);
    }

    /// Restarts are forgotten once the group has been ready for the longest
    /// back-off, not before.
    #[test]
    fn a_replica_ready_for_the_longest_backoff_forgets_its_restarts() {
        let s = settings(None);
        let first = first_restart(&s);
        let observed = lws(&first);
        let ready = |uid: &str| {
            let mut p = pod(uid, 40, 0);
            p["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "lastTransitionTime": at(50).to_string()}]);
            p
        };
        let (c, d) = (ready("c"), ready("d"));
        let soon = decide(Some(&s), &REPLICA, Some(&observed), &[&c, &d], at(60));
        assert_eq!(soon.standing, Standing::Serving);
        assert_eq!(soon.record, first.record);
        assert_eq!(soon.wake, Some(at(150)));
        let later = decide(Some(&s), &REPLICA, Some(&observed), &[&c, &d], at(150));
        assert_eq!(later, Decision::serving(None));
        // One pod short of the group: not forgotten.
        let short = decide(Some(&s), &REPLICA, Some(&observed), &[&c], at(500));
        assert_eq!(short.record, first.record);
    }

    #[test]
    fn a_limit_of_zero_fails_at_the_first_restart() {
        let decision = decide(
            Some(&settings(Some(0))),
            &REPLICA,
            None,
            &[&pod("a", 0, 1), &pod("b", 0, 0)],
            at(5),
        );
        assert_eq!(decision.standing, Standing::Failed);
        assert_eq!(decision.wake, None);
        assert!(decision.record.unwrap().failed);
    }
}
