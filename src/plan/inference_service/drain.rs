//! A replica leaves gracefully (issue 15): before Tandem deletes a replica
//! (scale-down under any policy), it takes the replica's pods out of traffic,
//! waits `spec.roles[].drain.seconds`, and only then deletes its
//! LeaderWorkerSet. A replica still draining when the role scales back up is
//! put back into traffic instead of a new one being made (no second model
//! load).
//!
//! # The mechanism
//!
//! Every serving pod carries the label [`TRAFFIC`]` = `[`SERVING`] from its
//! LeaderWorkerSet's template, and every selector Tandem writes that sends
//! requests to pods requires it: the router's InferencePool
//! (`router::revision_router_objects`) and the per-revision Services of
//! NewRevision/IncrementalUpgrade (`traffic::revision_service`). To drain a
//! replica Tandem server-side applies, to each of its pods, a Pod holding only
//! the label set to [`DRAINING`] and the annotations [`DRAIN_STARTED`] and
//! [`DRAIN_DEADLINE`]; the endpoints controllers and the endpoint picker drop
//! the pods, in-flight requests finish. Reviving applies the label
//! [`SERVING`] without the annotations (server-side apply removes the fields
//! Tandem no longer applies). The start lives on the pods, so a restarted
//! Tandem continues the same drain: the plan is a function of (service,
//! children, pods, now).
//!
//! # Why LeaderWorkerSet and StatefulSet leave a relabelled pod alone
//!
//! - kubernetes/kubernetes `pkg/controller/statefulset/stateful_set.go`,
//!   `StatefulSetController.getPodsForStatefulSet`, claims pods through
//!   `ClaimPods` with the StatefulSet's selector; a pod is released (orphaned)
//!   only when it stops matching that selector. LWS's StatefulSets select on
//!   `leaderworkerset.sigs.k8s.io/name` (+ `group-index`/`group-key` for the
//!   worker sets), never on Tandem's labels, so the pod stays claimed.
//! - `pkg/controller/statefulset/stateful_set_utils.go`, `identityMatches` and
//!   `storageMatches`, which decide whether a pod is recreated or updated in
//!   place, look at the pod's name, namespace, hostname, subdomain, the
//!   `statefulset.kubernetes.io/pod-name` and `apps.kubernetes.io/pod-index`
//!   labels and the volumes; `getPodRevision` reads only
//!   `controller-revision-hash`. A changed Tandem label makes no pod be
//!   recreated.
//! - kubernetes-sigs/lws `pkg/controllers/pod_controller.go`,
//!   `PodReconciler.Reconcile`, builds each group's worker StatefulSet from
//!   the LeaderWorkerSet's worker template and the leader's LWS labels
//!   (`leaderworkerset.sigs.k8s.io/*`, in
//!   `constructWorkerStatefulSetApplyConfiguration`), and selects on those
//!   only; the revision comes from the LeaderWorkerSet's template, not from
//!   pods. `PodReconciler.handleRestartPolicy` (`RecreateGroupOnPodRestart`)
//!   reacts to a container restart or a pod deletion, not to a label.
//!
//! So the relabelled pods keep running until Tandem deletes their
//! LeaderWorkerSet.

use std::collections::{BTreeMap, HashMap};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::plan::shared::pod::Pod;

pub use crate::plan::shared::pod::{DRAIN_DEADLINE, DRAIN_STARTED, DRAINING, SERVING, TRAFFIC};
/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Whether the Pod object `pod` (one a drain writes, or a pod's JSON) takes
/// it out of traffic; an observed pod says it with [`Pod::draining`].
pub fn is_draining(pod: &Value) -> bool {
    pod["metadata"]["labels"][TRAFFIC] == DRAINING
}

/// The pods of each replica, by role and replica index, in the order given:
/// the index of a run's pods a pass builds once and every step reads (the
/// replicas' drains, the Binpack weights, the RollingUpdate's pace), so that
/// asking for one replica's or one role's pods is a lookup and not a scan
/// of every pod (a 1 000-replica service has 1 000 replicas and as many
/// pods).
#[derive(Clone, Debug, Default)]
pub struct ReplicaPods<'a> {
    by_replica: BTreeMap<(&'a str, u32), Vec<&'a Pod>>,
}

impl<'a> ReplicaPods<'a> {
    /// Indexes `pods` by their role and replica index; a pod without both
    /// (or with an index that is not a number) is no replica's.
    pub fn new(pods: impl IntoIterator<Item = &'a Pod>) -> Self {
        let mut by_replica: BTreeMap<(&'a str, u32), Vec<&'a Pod>> = BTreeMap::new();
        for pod in pods {
            if let (Some(role), Some(index)) = (pod.role.as_deref(), pod.replica) {
                by_replica.entry((role, index)).or_default().push(pod);
            }
        }
        ReplicaPods { by_replica }
    }

    /// The pods of replica `index` of `role`.
    pub fn of<'s>(&'s self, role: &'s str, index: u32) -> &'s [&'a Pod] {
        self.by_replica
            .get(&(role, index))
            .map_or(&[], Vec::as_slice)
    }

    /// The replicas of `role` that have pods, by index, with their pods.
    pub fn of_role<'s>(&'s self, role: &'s str) -> impl Iterator<Item = (u32, &'s [&'a Pod])> {
        self.by_replica
            .range((role, 0)..=(role, u32::MAX))
            .map(|(&(_, index), pods)| (index, pods.as_slice()))
    }
}

/// The pods of each revision, by role and replica ([`ReplicaPods`]): what a
/// side-by-side rollout counts each revision's ready replicas from, and a
/// labelled run reads its own pods in.
#[derive(Clone, Debug, Default)]
pub struct RevisionPods<'a> {
    of: HashMap<&'a str, ReplicaPods<'a>>,
    none: ReplicaPods<'a>,
}

impl<'a> RevisionPods<'a> {
    /// Indexes `pods` by their revision label, then role and replica; a pod
    /// without a revision is no revision's.
    pub fn new(pods: impl IntoIterator<Item = &'a Pod>) -> Self {
        let mut of: HashMap<&'a str, Vec<&'a Pod>> = HashMap::new();
        for pod in pods {
            if let Some(revision) = pod.revision.as_deref() {
                of.entry(revision).or_default().push(pod);
            }
        }
        RevisionPods {
            of: of
                .into_iter()
                .map(|(revision, pods)| (revision, ReplicaPods::new(pods)))
                .collect(),
            none: ReplicaPods::default(),
        }
    }

    /// The pods of `revision`, by role and replica (none when it has none).
    pub fn of(&self, revision: &str) -> &ReplicaPods<'a> {
        self.of.get(revision).unwrap_or(&self.none)
    }
}

/// When the drain of a replica with these pods started: the earliest
/// [`DRAIN_STARTED`] of its draining pods; None when none is draining.
pub fn started(pods: &[&Pod]) -> Option<Timestamp> {
    pods.iter()
        .filter(|p| p.draining())
        .filter_map(|p| p.drain_started.as_deref()?.parse::<Timestamp>().ok())
        .min()
}

/// Whether a replica with these pods is draining.
pub fn draining(pods: &[&Pod]) -> bool {
    pods.iter().any(|p| p.draining())
}

/// What happens to a replica the plan no longer keeps.
#[derive(Clone, Debug, PartialEq)]
pub enum Leave {
    /// Its LeaderWorkerSet is deleted now, for this reason.
    Delete(String),
    /// It stays, out of traffic, until `deadline`: `pods` are the Pods to
    /// apply (those not yet marked), empty when every pod is already marked.
    Drain {
        pods: Vec<Value>,
        started: Timestamp,
        deadline: Timestamp,
    },
}

/// The drain of a replica with `pods` that goes, with a drain of `seconds`,
/// at `now`: nothing to drain (drain off, no pod left, no pod ready to take
/// requests) deletes at once; a
/// replica not yet draining starts now; one draining is deleted once its
/// deadline has come. A pod of it that is not marked yet (recreated during
/// the drain) is marked with the replica's start.
pub fn leave(pods: &[&Pod], seconds: i64, now: Timestamp) -> Leave {
    if seconds <= 0 {
        return Leave::Delete("drain.seconds is 0".to_owned());
    }
    let live: Vec<&Pod> = pods.iter().copied().filter(|p| !p.deleting()).collect();
    if live.is_empty() {
        return Leave::Delete("it has no pods to drain".to_owned());
    }
    // Endpoints and the endpoint picker send requests to ready pods only.
    if !draining(&live) && !live.iter().any(|p| p.running()) {
        return Leave::Delete("none of its pods is ready, so no request reaches it".to_owned());
    }
    let start = started(&live).unwrap_or(now);
    let deadline = start
        .checked_add(SignedDuration::from_secs(seconds))
        .unwrap_or(Timestamp::MAX);
    if now >= deadline {
        return Leave::Delete(format!(
            "it was out of traffic for its drain of {seconds}s (since {start})"
        ));
    }
    let (start_text, deadline_text) = (start.to_string(), deadline.to_string());
    let marked = |p: &Pod| {
        p.draining()
            && p.drain_started.as_deref() == Some(start_text.as_str())
            && p.drain_deadline.as_deref() == Some(deadline_text.as_str())
    };
    Leave::Drain {
        pods: live
            .iter()
            .filter(|p| !marked(p))
            .map(|p| pod(p, Some((start, deadline))))
            .collect(),
        started: start,
        deadline,
    }
}

/// The Pods to apply to put a draining replica with `pods` back into
/// traffic; empty when none of them is draining.
pub fn revive(pods: &[&Pod]) -> Vec<Value> {
    pods.iter()
        .filter(|p| p.draining() && !p.deleting())
        .map(|p| pod(p, None))
        .collect()
}

/// The Pod Tandem applies to `observed`: only its name, namespace, the
/// [`TRAFFIC`] label and, while draining, the drain's start and deadline.
fn pod(observed: &Pod, drain: Option<(Timestamp, Timestamp)>) -> Value {
    let mut object = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": observed.name,
            "namespace": observed.namespace,
            "labels": {TRAFFIC: if drain.is_some() { DRAINING } else { SERVING }},
        },
    });
    if let Some((start, deadline)) = drain {
        object["metadata"]["annotations"] = json!({
            DRAIN_STARTED: start.to_string(),
            DRAIN_DEADLINE: deadline.to_string(),
        });
    }
    object
}

/// The termination grace period Tandem gives a role's pods whose template
/// sets none: the drain when it is longer than Kubernetes' default, else
/// none (the default already covers it).
pub fn grace_seconds(template_sets_one: bool, drain_seconds: i64) -> Option<i64> {
    (!template_sets_one && drain_seconds > DEFAULT_GRACE_SECONDS).then_some(drain_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::shared::children::{REPLICA_INDEX, ROLE_NAME};
    use crate::plan::shared::pod::from_json_all;

    fn pod_of(index: u32, worker: u32) -> Value {
        json!({"metadata": {
            "name": format!("qwen-decode-{index}-0-{worker}"), "namespace": "ai",
            "labels": {ROLE_NAME: "decode", REPLICA_INDEX: index.to_string(), TRAFFIC: SERVING},
        }, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    /// `pods` after applying `applied` (labels and annotations replaced by
    /// what Tandem applies, as server-side apply does for fields it owns).
    fn applied(pods: &[Value], applied: &[Value]) -> Vec<Value> {
        pods.iter()
            .map(|p| {
                let mut p = p.clone();
                if let Some(a) = applied
                    .iter()
                    .find(|a| a["metadata"]["name"] == p["metadata"]["name"])
                {
                    p["metadata"]["labels"][TRAFFIC] = a["metadata"]["labels"][TRAFFIC].clone();
                    p["metadata"]["annotations"] = a["metadata"]["annotations"].clone();
                }
                p
            })
            .collect()
    }

    #[test]
    fn a_replica_drains_then_goes_and_the_start_survives_on_the_pods() {
        let pods = vec![pod_of(3, 0), pod_of(3, 1)];
        let parsed = from_json_all(&pods);
        let refs: Vec<&Pod> = parsed.iter().collect();
        let Leave::Drain {
            pods: marks,
            started,
            deadline,
        } = leave(&refs, 30, at(0))
        else {
            panic!("a serving replica drains first");
        };
        assert_eq!((started, deadline), (at(0), at(30)));
        assert_eq!(marks.len(), 2);
        assert_eq!(marks[0]["metadata"]["labels"][TRAFFIC], DRAINING);
        assert_eq!(
            marks[0]["metadata"]["annotations"][DRAIN_DEADLINE],
            at(30).to_string()
        );
        let pods = applied(&pods, &marks);
        let parsed = from_json_all(&pods);
        let refs: Vec<&Pod> = parsed.iter().collect();
        // Within the drain (a later reconcile, or a restarted Tandem): the
        // same deadline and nothing to apply.
        assert_eq!(
            leave(&refs, 30, at(29)),
            Leave::Drain {
                pods: vec![],
                started: at(0),
                deadline: at(30)
            }
        );
        assert!(matches!(leave(&refs, 30, at(30)), Leave::Delete(_)));
        // Revived: both pods go back to serving, without the annotations.
        let back = revive(&refs);
        assert_eq!(back.len(), 2);
        assert_eq!(back[1]["metadata"]["labels"][TRAFFIC], SERVING);
        assert!(back[1]["metadata"]["annotations"].is_null());
        let pods = applied(&pods, &back);
        assert!(!draining(&from_json_all(&pods).iter().collect::<Vec<_>>()));
    }

    #[test]
    fn a_pod_recreated_during_the_drain_is_marked_with_the_replicas_start() {
        let mut pods = vec![pod_of(1, 0), pod_of(1, 1)];
        let parsed = from_json_all(&pods);
        let refs: Vec<&Pod> = parsed.iter().collect();
        let Leave::Drain { pods: marks, .. } = leave(&refs, 60, at(0)) else {
            panic!("drains");
        };
        pods = applied(&pods, &marks);
        pods[1] = pod_of(1, 1);
        let parsed = from_json_all(&pods);
        let refs: Vec<&Pod> = parsed.iter().collect();
        let Leave::Drain {
            pods: marks,
            deadline,
            ..
        } = leave(&refs, 60, at(10))
        else {
            panic!("still drains");
        };
        assert_eq!(deadline, at(60));
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0]["metadata"]["name"], "qwen-decode-1-0-1");
        assert_eq!(
            marks[0]["metadata"]["annotations"][DRAIN_STARTED],
            at(0).to_string()
        );
    }

    #[test]
    fn no_drain_without_seconds_or_pods() {
        let pods = [pod_of(0, 0)];
        let parsed = from_json_all(&pods);
        let refs: Vec<&Pod> = parsed.iter().collect();
        assert_eq!(
            leave(&refs, 0, at(0)),
            Leave::Delete("drain.seconds is 0".into())
        );
        assert_eq!(
            leave(&[], 30, at(0)),
            Leave::Delete("it has no pods to drain".into())
        );
        let mut gone = pod_of(0, 0);
        gone["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(matches!(
            leave(&[&Pod::from_json(&gone)], 30, at(0)),
            Leave::Delete(_)
        ));
        // A replica no request reaches goes at once; one already draining
        // finishes its drain even if its pods stop being ready.
        let mut broken = pod_of(0, 0);
        broken["status"]["conditions"][0]["status"] = json!("False");
        assert_eq!(
            leave(&[&Pod::from_json(&broken)], 30, at(0)),
            Leave::Delete("none of its pods is ready, so no request reaches it".into())
        );
        broken["metadata"]["labels"][TRAFFIC] = json!(DRAINING);
        broken["metadata"]["annotations"] = json!({DRAIN_STARTED: at(0).to_string()});
        assert!(matches!(
            leave(&[&Pod::from_json(&broken)], 30, at(10)),
            Leave::Drain { .. }
        ));
    }

    #[test]
    fn replica_pods_are_those_of_the_role_and_index() {
        let mut other_role = pod_of(1, 0);
        other_role["metadata"]["labels"][ROLE_NAME] = json!("prefill");
        let mut not_a_number = pod_of(4, 0);
        not_a_number["metadata"]["labels"][REPLICA_INDEX] = json!("x");
        let mut no_index = pod_of(5, 0);
        no_index["metadata"]["labels"]
            .as_object_mut()
            .map(|labels| labels.remove(REPLICA_INDEX));
        let pods = vec![
            pod_of(1, 0),
            pod_of(2, 0),
            other_role,
            pod_of(1, 1),
            not_a_number,
            no_index,
        ];
        let pods = from_json_all(&pods);
        let replicas = ReplicaPods::new(&pods);
        let names: Vec<&str> = replicas
            .of("decode", 1)
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["qwen-decode-1-0-0", "qwen-decode-1-0-1"]);
        assert!(replicas.of("decode", 3).is_empty());
        assert!(replicas.of("router", 1).is_empty());
        let decode: Vec<(u32, usize)> = replicas
            .of_role("decode")
            .map(|(index, pods)| (index, pods.len()))
            .collect();
        assert_eq!(decode, [(1, 2), (2, 1)]);
        assert_eq!(replicas.of_role("prefill").count(), 1);
        assert_eq!(replicas.of_role("router").count(), 0);
    }

    #[test]
    fn the_grace_period_covers_a_long_drain_unless_the_template_sets_one() {
        assert_eq!(grace_seconds(false, 30), None);
        assert_eq!(grace_seconds(false, 600), Some(600));
        assert_eq!(grace_seconds(true, 600), None);
    }
}
