//! A pod as the plans read it: typed facts, parsed once from the pod's JSON
//! when the watch delivers it ([`Pod::from_json`]), never read as JSON by a
//! plan. A plan can only read what this type carries, so a field the watch
//! layer drops cannot be read as missing by a plan that needs it (the
//! bounded recovery once read a trimmed-away creation time as "none").
//!
//! The label and annotation keys a pod is read by live here, and the
//! capabilities that write them (drains, Binpack, the native gang, a
//! ResourceScalingGroup's groups) re-export them.

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::api::resource_scaling_group::{GROUP_LABEL, NAME_LABEL};
use crate::plan::shared::children::{REPLICA_INDEX, REVISION, ROLE_NAME};
use crate::plan::shared::write::APPLIED_HASH;

/// The pod label every traffic selector of Tandem requires to be [`SERVING`].
pub const TRAFFIC: &str = "fusioninfer.io/traffic";
/// A pod that receives requests.
pub const SERVING: &str = "serving";
/// A pod taken out of traffic before its replica is deleted.
pub const DRAINING: &str = "draining";
/// When the drain of the pod's replica started (RFC 3339).
pub const DRAIN_STARTED: &str = "fusioninfer.io/drain-started-at";
/// When the pod's replica is deleted (RFC 3339): start plus the drain.
pub const DRAIN_DEADLINE: &str = "fusioninfer.io/drain-deadline";
/// The pod annotation whose sum over a replica's pods is its Binpack score.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// The pod field that names its Kubernetes PodGroup
/// (`spec.schedulingGroup.podGroupName`).
pub const SCHEDULING_GROUP: &str = "schedulingGroup";
pub const POD_GROUP_NAME: &str = "podGroupName";

/// One observed pod. Serialised only to weigh what a cache keeps of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp`: set once the pod is being deleted.
    pub deleted: Option<Timestamp>,
    /// The role it serves ([`ROLE_NAME`]).
    pub role: Option<String>,
    /// Its replica's index ([`REPLICA_INDEX`]); None when the label is
    /// missing or not a number.
    pub replica: Option<u32>,
    /// Its revision ([`REVISION`]).
    pub revision: Option<String>,
    /// The [`TRAFFIC`] label: [`SERVING`], [`DRAINING`] or none.
    pub traffic: Option<String>,
    /// The drain's [`DRAIN_STARTED`] and [`DRAIN_DEADLINE`], as written.
    pub drain_started: Option<String>,
    pub drain_deadline: Option<String>,
    /// The [`APPLIED_HASH`] of what Tandem last applied to it (a drain).
    pub applied_hash: Option<String>,
    /// The ResourceScalingGroup ([`NAME_LABEL`]) and its group
    /// ([`GROUP_LABEL`]) it belongs to.
    pub scaling_group: Option<String>,
    pub group: Option<String>,
    /// Its [`DELETION_COST`], read as Kubernetes' ReplicaSet controller
    /// reads it ([`deletion_cost`]).
    pub deletion_cost: i32,
    /// `spec.nodeName`: the node it is bound to.
    pub node: Option<String>,
    /// The Kubernetes PodGroup it names (`spec.schedulingGroup`).
    pub pod_group: Option<String>,
    /// `status.phase`, and the `reason` a failed pod gives.
    pub phase: Option<String>,
    pub reason: Option<String>,
    /// Its Ready condition is True, and since when (its
    /// `lastTransitionTime`).
    pub ready: bool,
    pub ready_since: Option<Timestamp>,
    /// `PodScheduled` is False for reason `Unschedulable`: the scheduler's
    /// message (may be empty).
    pub unschedulable: Option<String>,
    /// Its init containers', then its containers' statuses.
    pub containers: Vec<Container>,
}

/// One container's status, as the plans read it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Container {
    pub name: Option<String>,
    pub restarts: i64,
    /// `state.waiting.reason`.
    pub waiting: Option<String>,
    /// `lastState.terminated`: its reason and exit code.
    pub exit_reason: Option<String>,
    pub exit_code: Option<i64>,
}

impl Pod {
    /// The facts of the pod `object` (a Pod's JSON as the API server sends
    /// it); a field it lacks is read as absent, never as an error.
    pub fn from_json(object: &Value) -> Pod {
        let metadata = &object["metadata"];
        let labels = &metadata["labels"];
        let annotations = &metadata["annotations"];
        let status = &object["status"];
        let conditions = status["conditions"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let condition = |kind: &str| conditions.iter().find(|c| c["type"] == kind);
        let ready = condition("Ready").filter(|c| c["status"] == "True");
        Pod {
            name: text(&metadata["name"]).unwrap_or_default(),
            namespace: text(&metadata["namespace"]).unwrap_or_default(),
            uid: text(&metadata["uid"]),
            resource_version: text(&metadata["resourceVersion"]),
            created: time(&metadata["creationTimestamp"]),
            deleted: time(&metadata["deletionTimestamp"]),
            role: text(&labels[ROLE_NAME]),
            replica: labels[REPLICA_INDEX].as_str().and_then(|i| i.parse().ok()),
            revision: text(&labels[REVISION]),
            traffic: text(&labels[TRAFFIC]),
            drain_started: text(&annotations[DRAIN_STARTED]),
            drain_deadline: text(&annotations[DRAIN_DEADLINE]),
            applied_hash: text(&annotations[APPLIED_HASH]),
            scaling_group: text(&labels[NAME_LABEL]),
            group: text(&labels[GROUP_LABEL]),
            deletion_cost: annotations[DELETION_COST].as_str().map_or(0, deletion_cost),
            node: text(&object["spec"]["nodeName"]),
            pod_group: text(&object["spec"][SCHEDULING_GROUP][POD_GROUP_NAME]),
            phase: text(&status["phase"]),
            reason: text(&status["reason"]),
            ready: ready.is_some(),
            ready_since: ready.and_then(|c| time(&c["lastTransitionTime"])),
            unschedulable: condition("PodScheduled")
                .filter(|c| c["status"] == "False" && c["reason"] == "Unschedulable")
                .map(|c| text(&c["message"]).unwrap_or_default()),
            containers: ["initContainerStatuses", "containerStatuses"]
                .iter()
                .flat_map(|k| status[k].as_array().into_iter().flatten())
                .map(|c| Container {
                    name: text(&c["name"]),
                    restarts: c["restartCount"].as_i64().unwrap_or(0),
                    waiting: text(&c["state"]["waiting"]["reason"]),
                    exit_reason: text(&c["lastState"]["terminated"]["reason"]),
                    exit_code: c["lastState"]["terminated"]["exitCode"].as_i64(),
                })
                .collect(),
        }
    }

    /// Whether it is being deleted.
    pub fn deleting(&self) -> bool {
        self.deleted.is_some()
    }

    /// Whether a drain took it out of traffic.
    pub fn draining(&self) -> bool {
        self.traffic.as_deref() == Some(DRAINING)
    }

    /// Whether it is Running with its Ready condition True.
    pub fn running(&self) -> bool {
        self.phase.as_deref() == Some("Running") && self.ready
    }

    /// Its name, or `fallback` when it has none.
    pub fn name_or<'a>(&'a self, fallback: &'a str) -> &'a str {
        if self.name.is_empty() {
            fallback
        } else {
            &self.name
        }
    }

    /// The pod as the writes compare with it: its identity, version and
    /// deletion, and the fields Tandem applies to a pod (the [`TRAFFIC`]
    /// label, the drain's annotations, the [`APPLIED_HASH`]). What a drain
    /// wrote is "up to date" or "seen" against this as against the whole
    /// pod, since a drain writes nothing else.
    pub fn observed(&self) -> Value {
        let mut metadata = Map::new();
        metadata.insert("name".to_owned(), json!(self.name));
        metadata.insert("namespace".to_owned(), json!(self.namespace));
        for (key, value) in [
            ("uid", &self.uid),
            ("resourceVersion", &self.resource_version),
        ] {
            if let Some(value) = value {
                metadata.insert(key.to_owned(), json!(value));
            }
        }
        if let Some(deleted) = self.deleted {
            metadata.insert("deletionTimestamp".to_owned(), json!(deleted.to_string()));
        }
        let labels: Map<String, Value> = [(TRAFFIC, &self.traffic)]
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_owned(), json!(v.as_ref()?))))
            .collect();
        let annotations: Map<String, Value> = [
            (DRAIN_STARTED, &self.drain_started),
            (DRAIN_DEADLINE, &self.drain_deadline),
            (APPLIED_HASH, &self.applied_hash),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), json!(v.as_ref()?))))
        .collect();
        if !labels.is_empty() {
            metadata.insert("labels".to_owned(), Value::Object(labels));
        }
        if !annotations.is_empty() {
            metadata.insert("annotations".to_owned(), Value::Object(annotations));
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata})
    }

    /// Whether `other` is the same pod in everything but its
    /// resourceVersion.
    pub fn same_but_version(&self, other: &Pod) -> bool {
        let unversioned = |p: &Pod| Pod {
            resource_version: None,
            ..p.clone()
        };
        unversioned(self) == unversioned(other)
    }
}

/// The pods of `objects` (Pods' JSON): for tests and fixtures, which write
/// pods as the API server shows them.
pub fn from_json_all(objects: &[Value]) -> Vec<Pod> {
    objects.iter().map(Pod::from_json).collect()
}

/// A deletion cost read as Kubernetes' ReplicaSet controller reads it: a
/// 32-bit decimal integer; a `+` sign, leading zeros (`008`), anything
/// else unparseable or out of the int32 range counts 0.
pub fn deletion_cost(text: &str) -> i32 {
    let first_digit_valid = match text.as_bytes() {
        [] => false,
        [b'-', ..] => true,
        [b'0'] => true,
        [first, ..] => first.is_ascii_digit() && *first != b'0',
    };
    if !first_digit_valid {
        return 0;
    }
    text.parse().unwrap_or(0)
}

fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

fn time(value: &Value) -> Option<Timestamp> {
    value.as_str()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A story-4 decode pod as the API server sends it, with what no plan
    /// reads (another manager's label, its spec's containers) beside it.
    fn whole() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "svc-decode-0-1", "namespace": "ai", "uid": "u1",
                "resourceVersion": "42", "creationTimestamp": "2026-12-01T10:00:00Z",
                "labels": {ROLE_NAME: "decode", REPLICA_INDEX: "3", REVISION: "abc",
                    TRAFFIC: DRAINING, NAME_LABEL: "rsg", GROUP_LABEL: "rsg-01",
                    "app": "mine"},
                "annotations": {DRAIN_STARTED: "2026-12-01T10:05:00Z",
                    DRAIN_DEADLINE: "2026-12-01T10:06:00Z", APPLIED_HASH: "h",
                    DELETION_COST: "-5"}},
            "spec": {"nodeName": "n1", "schedulingGroup": {"podGroupName": "g"},
                "containers": [{"name": "vllm", "image": "v"}]},
            "status": {"phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True",
                     "lastTransitionTime": "2026-12-01T10:01:00Z"}],
                "initContainerStatuses": [{"name": "wait", "restartCount": 0}],
                "containerStatuses": [{"name": "vllm", "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}]}
        })
    }

    fn at(text: &str) -> Option<Timestamp> {
        Some(text.parse().unwrap())
    }

    #[test]
    fn a_pod_is_read_into_every_fact_a_plan_reads() {
        let pod = Pod::from_json(&whole());
        assert_eq!(
            pod,
            Pod {
                name: "svc-decode-0-1".into(),
                namespace: "ai".into(),
                uid: Some("u1".into()),
                resource_version: Some("42".into()),
                created: at("2026-12-01T10:00:00Z"),
                deleted: None,
                role: Some("decode".into()),
                replica: Some(3),
                revision: Some("abc".into()),
                traffic: Some(DRAINING.into()),
                drain_started: Some("2026-12-01T10:05:00Z".into()),
                drain_deadline: Some("2026-12-01T10:06:00Z".into()),
                applied_hash: Some("h".into()),
                scaling_group: Some("rsg".into()),
                group: Some("rsg-01".into()),
                deletion_cost: -5,
                node: Some("n1".into()),
                pod_group: Some("g".into()),
                phase: Some("Running".into()),
                reason: None,
                ready: true,
                ready_since: at("2026-12-01T10:01:00Z"),
                unschedulable: None,
                containers: vec![
                    Container {
                        name: Some("wait".into()),
                        ..Container::default()
                    },
                    Container {
                        name: Some("vllm".into()),
                        restarts: 2,
                        waiting: Some("CrashLoopBackOff".into()),
                        exit_reason: Some("Error".into()),
                        exit_code: Some(1),
                    },
                ],
            }
        );
        assert!(pod.running() && pod.draining() && !pod.deleting());
    }

    #[test]
    fn what_a_pod_lacks_or_says_otherwise_is_read_as_absent() {
        assert_eq!(Pod::from_json(&json!({})), Pod::default());
        let mut waiting = whole();
        waiting["metadata"]["labels"][REPLICA_INDEX] = json!("x");
        waiting["metadata"]["deletionTimestamp"] = json!("2026-12-01T11:00:00Z");
        waiting["spec"] = json!({});
        waiting["status"] = json!({"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-01T10:01:00Z"},
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
        let pod = Pod::from_json(&waiting);
        assert_eq!(pod.replica, None, "an index that is not a number");
        assert!(pod.deleting());
        assert!(!pod.ready && !pod.running());
        assert_eq!(
            pod.ready_since, None,
            "since when it is not ready is no ready time"
        );
        assert_eq!(pod.unschedulable.as_deref(), Some(""), "no message");
        assert_eq!((pod.node, pod.pod_group), (None, None));
    }

    #[test]
    fn deletion_cost_is_read_as_the_replica_set_controller_reads_it() {
        for (text, cost) in [
            ("10", 10),
            ("-3", -3),
            ("0", 0),
            ("+5", 0),
            ("008", 0),
            ("", 0),
            ("x", 0),
            ("2147483648", 0),
            ("-2147483648", i32::MIN),
        ] {
            assert_eq!(deletion_cost(text), cost, "{text:?}");
        }
    }

    #[test]
    fn observed_holds_what_tandem_writes_on_a_pod_and_its_identity() {
        let pod = Pod::from_json(&whole());
        assert_eq!(
            pod.observed(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "svc-decode-0-1", "namespace": "ai", "uid": "u1", "resourceVersion": "42",
                "labels": {TRAFFIC: DRAINING},
                "annotations": {DRAIN_STARTED: "2026-12-01T10:05:00Z",
                    DRAIN_DEADLINE: "2026-12-01T10:06:00Z", APPLIED_HASH: "h"}}})
        );
    }

    #[test]
    fn a_new_version_alone_is_the_same_pod() {
        let pod = Pod::from_json(&whole());
        let mut newer = pod.clone();
        newer.resource_version = Some("43".into());
        assert!(pod.same_but_version(&newer));
        newer.ready = false;
        assert!(!pod.same_but_version(&newer));
    }
}
