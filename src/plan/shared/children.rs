//! How Tandem names, labels and owns what it creates for an InferenceService.
//! Every planner builds its objects' metadata here, so names and labels agree
//! between LeaderWorkerSets, PodGroups, router objects and status.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::api::inference_service::{InferenceService, Role};

/// `fusioninfer.io/service`: the InferenceService's name.
pub const SERVICE: &str = "fusioninfer.io/service";
/// `fusioninfer.io/component-type`: router, prefiller, decoder or worker.
pub const COMPONENT_TYPE: &str = "fusioninfer.io/component-type";
/// `fusioninfer.io/role-name`: the role's name from the spec.
pub const ROLE_NAME: &str = "fusioninfer.io/role-name";
/// `fusioninfer.io/replica-index`: the replica's index within its role.
pub const REPLICA_INDEX: &str = "fusioninfer.io/replica-index";
/// `fusioninfer.io/revision`: a hash of everything that shapes the pods.
pub const REVISION: &str = "fusioninfer.io/revision";
/// Marks objects Tandem manages.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "tandem";
/// The field manager of every server-side apply Tandem makes, and the
/// controller its Events name.
pub const FIELD_MANAGER: &str = "tandem";

/// Volcano: the PodGroup a pod belongs to.
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Volcano: the task (`{role}-{index}`) a pod belongs to.
pub const TASK_SPEC_ANNOTATION: &str = "volcano.sh/task-spec";

/// LeaderWorkerSet's label on every pod: 0 on the leader.
pub const LWS_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";

/// The LeaderWorkerSet of one replica: `{service}-{role}-{index}`.
pub fn replica_name(service: &str, role: &str, index: u32) -> String {
    format!("{service}-{role}-{index}")
}

/// How the LeaderWorkerSets of one revision are named. A service that was
/// never upgraded has only [`Naming::Plain`] replicas, the seed's
/// `{service}-{role}-{i}`; a revision that runs beside another one during a
/// NewRevision or IncrementalUpgrade upgrade takes its hash as a suffix,
/// `{service}-{role}-{i}-{revision}`, and keeps those names once it is the
/// only one (LeaderWorkerSets cannot be renamed).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Naming {
    /// `{service}-{role}-{i}`.
    Plain,
    /// `{service}-{role}-{i}-{suffix}`.
    Suffixed(String),
}

impl Naming {
    /// The LeaderWorkerSet of replica `index` of `role`.
    pub fn replica_name(&self, service: &str, role: &str, index: u32) -> String {
        match self {
            Naming::Plain => replica_name(service, role, index),
            Naming::Suffixed(suffix) => format!("{}-{suffix}", replica_name(service, role, index)),
        }
    }

    /// Characters the naming adds to the seed's name.
    pub fn extra_len(&self) -> usize {
        match self {
            Naming::Plain => 0,
            Naming::Suffixed(suffix) => suffix.len().saturating_add(1),
        }
    }

    /// The naming of a LeaderWorkerSet of `service`, from its name and its
    /// role and replica-index labels; None when it fits neither form.
    pub fn of(service: &str, object: &Value) -> Option<Naming> {
        let labels = &object["metadata"]["labels"];
        let role = labels[ROLE_NAME].as_str()?;
        let index: u32 = labels[REPLICA_INDEX].as_str()?.parse().ok()?;
        let name = object["metadata"]["name"].as_str()?;
        let plain = replica_name(service, role, index);
        if name == plain {
            return Some(Naming::Plain);
        }
        let suffix = name.strip_prefix(&plain)?.strip_prefix('-')?;
        (!suffix.is_empty()).then(|| Naming::Suffixed(suffix.to_owned()))
    }
}

/// Volcano's task name of one replica: `{role}-{index}`.
pub fn task_name(role: &str, index: u32) -> String {
    format!("{role}-{index}")
}

/// Labels every child of a role carries.
pub fn role_labels(service: &str, role: &Role) -> BTreeMap<String, String> {
    BTreeMap::from([
        (SERVICE.to_owned(), service.to_owned()),
        (
            COMPONENT_TYPE.to_owned(),
            role.component_type.as_str().to_owned(),
        ),
        (ROLE_NAME.to_owned(), role.name.clone()),
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
    ])
}

/// Labels of a service-wide child (PodGroup, router objects).
pub fn service_labels(service: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (SERVICE.to_owned(), service.to_owned()),
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
    ])
}

/// The controller owner reference to the service, so children are garbage
/// collected with it. None before the service has a uid (render of an object
/// that was never stored).
pub fn owner_reference(service: &InferenceService) -> Option<Value> {
    let uid = service.metadata.uid.as_deref()?;
    let name = service.metadata.name.as_deref()?;
    // Built by moving the parts in (not `json!`): a big service writes one
    // per child (see `metadata`).
    let mut owner = Map::new();
    owner.insert(
        "apiVersion".to_owned(),
        Value::from("fusioninfer.io/v1alpha1"),
    );
    owner.insert("kind".to_owned(), Value::from("InferenceService"));
    owner.insert("name".to_owned(), Value::from(name));
    owner.insert("uid".to_owned(), Value::from(uid));
    owner.insert("controller".to_owned(), Value::Bool(true));
    owner.insert("blockOwnerDeletion".to_owned(), Value::Bool(true));
    Some(Value::Object(owner))
}

/// Whether `object` is a child of `service`: it carries the service's owner
/// reference, or, for a service that was never stored (render), Tandem's
/// labels for it in its namespace. A Pod never is.
pub fn owns(service: &InferenceService, object: &Value) -> bool {
    // Pods carry the service's labels but belong to their LeaderWorkerSet.
    if object["apiVersion"] == "v1" && object["kind"] == "Pod" {
        return false;
    }
    match service.metadata.uid.as_deref() {
        Some(uid) => object["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid)),
        None => {
            let labels = &object["metadata"]["labels"];
            labels[SERVICE].as_str() == service.metadata.name.as_deref()
                && labels[MANAGED_BY] == MANAGER
                && object["metadata"]["namespace"].as_str() == service.metadata.namespace.as_deref()
        }
    }
}

/// The metadata of a child object named `name` in the service's namespace.
pub fn metadata(
    service: &InferenceService,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Value {
    metadata_labelled(service, name, label_map(labels))
}

/// [`metadata`] with the labels already as JSON, which a caller building
/// many children from the same labels makes once and clones.
pub fn metadata_labelled(
    service: &InferenceService,
    name: &str,
    labels: Map<String, Value>,
) -> Value {
    // Built by moving the parts in: `json!` copies every interpolated value
    // through serde's serializer, and a 64 x 4 service has 128 of these.
    let mut meta = Map::new();
    meta.insert("name".to_owned(), Value::from(name));
    meta.insert(
        "namespace".to_owned(),
        Value::from(service.metadata.namespace.as_deref().unwrap_or("default")),
    );
    meta.insert("labels".to_owned(), Value::Object(labels));
    if let Some(owner) = owner_reference(service) {
        meta.insert("ownerReferences".to_owned(), Value::Array(vec![owner]));
    }
    Value::Object(meta)
}

/// Labels (or annotations) as a JSON object.
pub fn label_map(labels: &BTreeMap<String, String>) -> Map<String, Value> {
    labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// The service's name; validated services always have one.
pub fn service_name(service: &InferenceService) -> &str {
    service.metadata.name.as_deref().unwrap_or_default()
}

/// The length of a revision hash
/// ([`crate::plan::inference_service::revision::spec_revision`]).
pub const REVISION_LEN: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(value: Value) -> InferenceService {
        serde_json::from_value(value).unwrap()
    }

    fn story2() -> Value {
        json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "ai", "uid": "u-1"},
            "spec": {"roles": [
                {"name": "prefill", "componentType": "prefiller", "replicas": 2,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}}},
                {"name": "decode", "componentType": "decoder",
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}}},
            ]}
        })
    }

    #[test]
    fn names_follow_the_seed() {
        assert_eq!(
            replica_name("qwen-inference", "inference", 0),
            "qwen-inference-inference-0"
        );
        assert_eq!(task_name("decode", 1), "decode-1");
    }

    #[test]
    fn a_revision_beside_another_is_named_with_its_hash() {
        let lws = |name: &str| json!({"metadata": {"name": name, "labels": {ROLE_NAME: "decode", REPLICA_INDEX: "2"}}});
        let suffixed = Naming::Suffixed("0a1b2c3d4e".into());
        assert_eq!(
            Naming::Plain.replica_name("qwen", "decode", 2),
            "qwen-decode-2"
        );
        assert_eq!(
            suffixed.replica_name("qwen", "decode", 2),
            "qwen-decode-2-0a1b2c3d4e"
        );
        assert_eq!(suffixed.extra_len(), 11);
        assert_eq!(
            Naming::of("qwen", &lws("qwen-decode-2")),
            Some(Naming::Plain)
        );
        assert_eq!(
            Naming::of("qwen", &lws("qwen-decode-2-0a1b2c3d4e")),
            Some(suffixed)
        );
        for other in ["qwen-decode-3", "qwen-decode-2-", "other-decode-2"] {
            assert_eq!(Naming::of("qwen", &lws(other)), None, "{other}");
        }
        assert_eq!(
            Naming::of("qwen", &json!({"metadata": {"name": "qwen-decode-2"}})),
            None
        );
    }

    #[test]
    fn metadata_carries_labels_and_the_owner() {
        let s = service(story2());
        let labels = role_labels("qwen", &s.spec.roles[0]);
        let meta = metadata(&s, "qwen-prefill-0", &labels);
        assert_eq!(meta["namespace"], "ai");
        assert_eq!(meta["labels"][COMPONENT_TYPE], "prefiller");
        assert_eq!(meta["labels"][ROLE_NAME], "prefill");
        assert_eq!(meta["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(meta["ownerReferences"][0]["controller"], true);
        let mut unstored = story2();
        unstored["metadata"].as_object_mut().unwrap().remove("uid");
        assert!(
            metadata(&service(unstored), "x", &labels)
                .get("ownerReferences")
                .is_none()
        );
    }
}
