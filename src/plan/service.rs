//! Everything an InferenceService should have, from its spec and the replica
//! indices that exist: the plan the reconciler applies and `render` prints.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{children, replicas, topology};
use crate::api::inference_service::InferenceService;

/// The kinds an InferenceService's children can be: everything here is listed
/// by label on each reconcile, and what the plan no longer wants is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildKind {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

pub const LEADER_WORKER_SET: ChildKind = ChildKind {
    api_version: "leaderworkerset.x-k8s.io/v1",
    kind: "LeaderWorkerSet",
    plural: "leaderworkersets",
};

pub const CHILD_KINDS: [ChildKind; 1] = [LEADER_WORKER_SET];

impl ChildKind {
    pub fn of(object: &Value) -> Option<ChildKind> {
        CHILD_KINDS
            .into_iter()
            .find(|k| object["apiVersion"] == k.api_version && object["kind"] == k.kind)
    }

    pub fn group(&self) -> &'static str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    pub fn version(&self) -> &'static str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version, |(_, version)| version)
    }
}

/// An object the plan wants, and why (the reconciler's Event says it).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub object: Value,
    pub why: String,
}

/// Plan options that come from the operator's flags, not from the object.
#[derive(Clone, Debug, Default)]
pub struct Options {}

/// The replica indices of each role, as seen on the LeaderWorkerSets that exist.
pub fn existing_indices(leader_worker_sets: &[Value]) -> BTreeMap<String, BTreeSet<u32>> {
    let mut indices: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for lws in leader_worker_sets {
        let labels = &lws["metadata"]["labels"];
        let role = labels[children::ROLE_NAME].as_str();
        let index = labels[children::REPLICA_INDEX]
            .as_str()
            .and_then(|i| i.parse().ok());
        if let (Some(role), Some(index)) = (role, index) {
            indices.entry(role.to_owned()).or_default().insert(index);
        }
    }
    indices
}

/// Everything the service should have. `existing` holds the replica indices of
/// each role that exist now.
pub fn desired(
    service: &InferenceService,
    existing: &BTreeMap<String, BTreeSet<u32>>,
    _options: &Options,
) -> Result<Vec<Desired>, String> {
    let revision = children::revision(&service.spec);
    let placement = topology::Placement::default();
    let mut plan = Vec::new();
    for role in service.spec.roles.iter().filter(|r| !r.is_router()) {
        let none = BTreeSet::new();
        let have = existing.get(&role.name).unwrap_or(&none);
        let desired = usize::try_from(role.replicas()).unwrap_or(0);
        for index in replicas::ordered(have, desired) {
            plan.push(Desired {
                object: topology::leader_worker_set(service, role, index, &revision, &placement)?,
                why: format!(
                    "replica {index} of role {} ({} of {desired} replicas, {} node(s) each, revision {revision})",
                    role.name,
                    index + 1,
                    role.node_count()
                ),
            });
        }
    }
    Ok(plan)
}

/// Why an object the service has is no longer wanted, for the Event.
pub fn why_delete(service: &InferenceService, object: &Value) -> String {
    let labels = &object["metadata"]["labels"];
    let kind = object["kind"].as_str().unwrap_or("object");
    match (labels[children::ROLE_NAME].as_str(), kind) {
        (Some(role), "LeaderWorkerSet") => {
            match service.spec.roles.iter().find(|r| r.name == role) {
                None => format!("role {role} was removed from the spec"),
                Some(r) => format!(
                    "role {role} is scaled to {} replica(s); replica {} is not kept",
                    r.replicas(),
                    labels[children::REPLICA_INDEX].as_str().unwrap_or("?")
                ),
            }
        }
        _ => format!("the spec no longer needs this {kind}"),
    }
}

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
                {"name": "router", "componentType": "router"},
            ]}
        }))
        .unwrap()
    }

    fn names(plan: &[Desired]) -> Vec<&str> {
        plan.iter()
            .map(|d| d.object["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn one_leader_worker_set_per_replica_of_each_serving_role() {
        let plan = desired(&service(3), &BTreeMap::new(), &Options::default()).unwrap();
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
    fn existing_indices_come_from_labels() {
        let plan = desired(&service(2), &BTreeMap::new(), &Options::default()).unwrap();
        let objects: Vec<Value> = plan.into_iter().map(|d| d.object).collect();
        let indices = existing_indices(&objects);
        assert_eq!(indices["inference"], BTreeSet::from([0, 1]));
        let scaled = desired(&service(1), &indices, &Options::default()).unwrap();
        assert_eq!(names(&scaled), ["qwen-inference-0"]);
        assert_eq!(
            why_delete(&service(1), &objects[1]),
            "role inference is scaled to 1 replica(s); replica 1 is not kept"
        );
    }

    #[test]
    fn child_kinds_know_their_group() {
        assert_eq!(LEADER_WORKER_SET.group(), "leaderworkerset.x-k8s.io");
        assert_eq!(LEADER_WORKER_SET.version(), "v1");
        assert_eq!(
            ChildKind::of(
                &json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"})
            ),
            Some(LEADER_WORKER_SET)
        );
    }
}
