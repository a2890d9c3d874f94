//! What the plan's tests share: a small service, its world, and a cluster
//! that a pass changes as the API server and LeaderWorkerSet would. Each
//! step's tests sit in its own file; these are what they are written with.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::world::identity;
use super::*;
use crate::plan::inference_service::{drain, status};
use crate::plan::shared::children;
use crate::plan::victims;

pub(super) fn service(replicas: i32) -> InferenceService {
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

/// The world of `children` and `pods` (pods written as the API server
/// shows them, read as the watch reads them). The pods' facts are leaked:
/// a test's world lives as long as its JSON, and tests are short.
pub(super) fn world<'a>(children: &'a [Value], pods: &'a [Value]) -> World<'a> {
    static NONE: std::sync::LazyLock<BTreeSet<String>> = std::sync::LazyLock::new(BTreeSet::new);
    World {
        children,
        pods: Box::leak(crate::plan::shared::pod::from_json_all(pods).into_boxed_slice()),
        unavailable: &NONE,
        installed: &crate::plan::shared::installed::ASSUMED,
        scale_views: &[],
    }
}

pub(super) fn epoch() -> Time {
    Time(jiff::Timestamp::UNIX_EPOCH)
}

pub(super) fn names(plan: &[Desired]) -> Vec<&str> {
    plan.iter()
        .filter(|d| d.object["kind"] == "LeaderWorkerSet")
        .map(|d| d.object["metadata"]["name"].as_str().unwrap())
        .collect()
}

pub(super) fn pod(index: u32, cost: &str, ready: bool) -> Value {
    json!({"metadata": {"name": format!("qwen-inference-{index}-0"),
            "labels": {children::ROLE_NAME: "inference", children::REPLICA_INDEX: index.to_string()},
            "annotations": {victims::DELETION_COST: cost}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

/// A service's children and pods, changed by each pass as the API
/// server and LeaderWorkerSet would: applied LeaderWorkerSets get one
/// ready pod each (cost from `costs`), applied Pods get the labels and
/// annotations Tandem owns replaced, deleted LeaderWorkerSets lose their
/// pods.
pub(super) struct Cluster {
    pub(super) children: Vec<Value>,
    pub(super) pods: Vec<Value>,
    pub(super) costs: BTreeMap<u32, &'static str>,
    /// New pods start not ready (a model loading), else ready.
    pub(super) loading: bool,
}

impl Cluster {
    pub(super) fn new(costs: &[&'static str]) -> Cluster {
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

    pub(super) fn pass(&mut self, service: &InferenceService, at: i64) -> Pass {
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
                let replica = replica_of(object);
                self.pods.retain(|p| replica_of(p) != replica);
                // Scaled to no group (a recovery's hold): no pod.
                if object["spec"]["replicas"] == 0 {
                    continue;
                }
                let cost = self.costs.get(&index).copied().unwrap_or("0");
                let mut new = pod(index, cost, !self.loading);
                new["metadata"]["labels"] =
                    object["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
                        .clone();
                new["metadata"]["name"] = json!(format!(
                    "{}-0",
                    object["metadata"]["name"].as_str().unwrap()
                ));
                new["metadata"]["uid"] = json!(format!("{index}-{at}"));
                new["metadata"]["creationTimestamp"] = json!(now.0.to_string());
                self.pods.push(new);
            }
        }
        for step in &pass.delete {
            let replica = replica_of(&step.object);
            self.children
                .retain(|c| identity(c) != identity(&step.object));
            self.pods.retain(|p| replica_of(p) != replica);
        }
        pass
    }

    pub(super) fn lws(&self) -> Vec<&str> {
        self.children
            .iter()
            .filter(|c| c["kind"] == "LeaderWorkerSet")
            .map(|c| c["metadata"]["name"].as_str().unwrap())
            .collect()
    }
}

/// The role and replica index a LeaderWorkerSet or pod belongs to, by its
/// labels (a pod without a role label is the single role's).
fn replica_of(object: &Value) -> (Value, Value) {
    let labels = &object["metadata"]["labels"];
    let role = match &labels[children::ROLE_NAME] {
        Value::Null => json!("inference"),
        role => role.clone(),
    };
    (role, labels[children::REPLICA_INDEX].clone())
}

/// The status and reason of `service`'s condition `type_`.
pub(super) fn condition(service: &InferenceService, type_: &str) -> (String, String) {
    let found = service
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap();
    (found.status.clone(), found.reason.clone())
}

pub(super) fn scaled(replicas: i32, policy: &str, drain_seconds: Option<i64>) -> InferenceService {
    let mut value = serde_json::to_value(service(replicas)).unwrap();
    value["spec"]["roles"][0]["scaleDown"] = json!({"policy": policy});
    if let Some(seconds) = drain_seconds {
        value["spec"]["roles"][0]["drain"] = json!({"seconds": seconds});
    }
    serde_json::from_value(value).unwrap()
}

pub(super) fn applied_pods(pass: &Pass) -> Vec<(String, String)> {
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

/// The Events of a role's episodes among `pass`'s: (reason, warning, note).
pub(super) fn episodes(pass: &Pass) -> Vec<(&'static str, bool, String)> {
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
pub(super) fn step(
    cluster: &mut Cluster,
    service: &mut InferenceService,
    at: i64,
) -> Vec<(&'static str, bool, String)> {
    let pass = cluster.pass(service, at);
    let events = episodes(&pass);
    service.status = Some(pass.status);
    events
}

pub(super) fn pod_named<'a>(cluster: &'a mut Cluster, name: &str) -> &'a mut Value {
    cluster
        .pods
        .iter_mut()
        .find(|p| p["metadata"]["name"] == name)
        .unwrap()
}
