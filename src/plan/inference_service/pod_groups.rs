//! Kubernetes' own gang scheduling (`scheduling.k8s.io/v1alpha2`, alpha in
//! 1.36): seed 003's gang table on kube-scheduler's PodGroups.
//!
//! kube-scheduler's GangScheduling plugin holds every pod that names a
//! PodGroup (`spec.schedulingGroup.podGroupName`) until `minCount` pods of
//! that group are placed, then binds them together. A pod names exactly one
//! group, so the table maps onto groups like this:
//!
//! - **each replica whole**: one PodGroup per replica, `minCount` = the
//!   replica's pods (its `nodeCount`);
//! - **one replica of each serving role together**: the first replica
//!   (index 0) of the first serving role of each component type shares one
//!   *core* group, `minCount` = the sum of their pods. The same roles make
//!   Volcano's minimal viable set ([`super::gang`]): one prefill and one
//!   decode replica, not one per decode zone. A service with one such role
//!   has no core group;
//! - **further replicas on their own**: each in its own group.
//!
//! A PodGroup's spec is immutable, so a group's name carries a hash of its
//! spec ([`group_name`]): a change (another `nodeCount`) names a new group,
//! which the replica's new pods join when the rollout replaces them, while
//! the old group stays as long as a pod names it ([`super::service`] keeps
//! it). kube-apiserver puts a finalizer on every PodGroup that only
//! kube-controller-manager's podgroup-protection controller takes off once
//! no pod names it, so a group deleted too early would wait Terminating,
//! not vanish under its pods; Tandem deletes a group only when no pod of
//! the service names it.
//!
//! The core group waits for the first replica of every core role: a core
//! role scaled to 0, or whose replica 0 a Binpack scale-down chose, holds
//! the other core roles' first replica back whenever its pods are made
//! again (a bound pod counts toward `minCount`, so running pods are never
//! disturbed).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::api::inference_service::{InferenceService, InferenceServiceSpec, Role};
use crate::plan::shared::children::{self, Naming};

pub const API_VERSION: &str = crate::plan::shared::child_kinds::NATIVE_POD_GROUP.api_version;
pub const KIND: &str = crate::plan::shared::child_kinds::NATIVE_POD_GROUP.kind;

pub use crate::plan::shared::pod::{POD_GROUP_NAME, SCHEDULING_GROUP};

/// The hex digits of a group's spec hash in its name.
const SPEC_HASH_LEN: usize = 8;

/// One PodGroup: its name, `minCount`, and whose it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Group {
    pub name: String,
    pub min_count: u32,
    /// The replica it holds, as (role, index); None for the core group.
    pub replica: Option<(String, u32)>,
    /// The node label all its pods share one domain of
    /// (`schedulingConstraints.topology[0].key`, [`super::placement`]).
    pub topology_key: Option<String>,
}

/// The roles whose first replica forms the core group: the first serving
/// role of each component type, in spec order, when there are at least
/// two; empty otherwise.
pub fn core_roles(spec: &InferenceServiceSpec) -> Vec<&Role> {
    let mut types = BTreeSet::new();
    let core: Vec<&Role> = spec
        .roles
        .iter()
        .filter(|r| !r.is_router())
        .filter(|r| types.insert(r.component_type))
        .collect();
    if core.len() >= 2 { core } else { Vec::new() }
}

/// The pods of one replica of `role` (its `nodeCount`, at least 1).
pub fn pods(role: &Role) -> Result<u32, String> {
    u32::try_from(role.node_count())
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| {
            format!(
                "role {:?}: nodeCount must be at least 1, got {}",
                role.name,
                role.node_count()
            )
        })
}

/// The group of replica `index` of `role` in `spec`, whose replicas are
/// named by `naming` (the core group is one per naming, so two revisions
/// side by side each have their own).
pub fn group_of(
    service: &str,
    spec: &InferenceServiceSpec,
    naming: &Naming,
    role: &Role,
    index: u32,
    topology_key: Option<&str>,
) -> Result<Group, String> {
    let core = core_roles(spec);
    if index == 0 && core.iter().any(|r| r.name == role.name) {
        let mut min_count: u32 = 0;
        for member in &core {
            min_count = min_count
                .checked_add(pods(member)?)
                .ok_or_else(|| "the core group's pods overflow".to_owned())?;
        }
        let stem = match naming {
            Naming::Plain => format!("{service}-core"),
            Naming::Suffixed(suffix) => format!("{service}-core-{suffix}"),
        };
        return Ok(Group {
            name: group_name(&stem, min_count, topology_key),
            min_count,
            replica: None,
            topology_key: topology_key.map(str::to_owned),
        });
    }
    let min_count = pods(role)?;
    Ok(Group {
        name: group_name(
            &naming.replica_name(service, &role.name, index),
            min_count,
            topology_key,
        ),
        min_count,
        replica: Some((role.name.clone(), index)),
        topology_key: topology_key.map(str::to_owned),
    })
}

/// `{stem}-{hash}`, the hash taken over the group's spec: a PodGroup's spec
/// cannot change, so another spec is another group.
pub fn group_name(stem: &str, min_count: u32, topology_key: Option<&str>) -> String {
    let bytes = serde_json::to_vec(&spec(min_count, topology_key)).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hash: String = digest.as_ref()[..SPEC_HASH_LEN / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{stem}-{hash}")
}

/// A group's spec: its `minCount` and, with a placement, the one node label
/// whose domain its pods share. Without one the spec (and so the name) is
/// what it was before placement.
fn spec(min_count: u32, topology_key: Option<&str>) -> Value {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": min_count}}});
    if let Some(key) = topology_key {
        spec["schedulingConstraints"] = json!({"topology": [{"key": key}]});
    }
    spec
}

/// The PodGroup object of `group`, owned by `service`.
pub fn pod_group(service: &InferenceService, group: &Group) -> Value {
    let name = children::service_name(service);
    let mut labels = children::service_labels(name);
    if let Some((role, index)) = &group.replica {
        labels.insert(children::ROLE_NAME.to_owned(), role.clone());
        labels.insert(children::REPLICA_INDEX.to_owned(), index.to_string());
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": children::metadata(service, &group.name, &labels),
        "spec": spec(group.min_count, group.topology_key.as_deref()),
    })
}

/// The node label whose one domain a PodGroup's pods share, if it has one.
pub fn topology_key(object: &Value) -> Option<&str> {
    object["spec"]["schedulingConstraints"]["topology"][0]["key"].as_str()
}

/// Whether `object` is one of Kubernetes' PodGroups.
pub fn is_pod_group(object: &Value) -> bool {
    object["apiVersion"] == API_VERSION && object["kind"] == KIND
}

/// The group a pod template names, if any (an observed pod says it in
/// [`crate::plan::shared::pod::Pod::pod_group`]).
pub fn named_by(pod: &Value) -> Option<&str> {
    pod["spec"][SCHEDULING_GROUP][POD_GROUP_NAME].as_str()
}

/// Makes the pod template `template` name `group`.
pub fn join(template: &mut Value, group: &str) {
    let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let mut scheduling_group = Map::new();
    scheduling_group.insert(POD_GROUP_NAME.to_owned(), Value::from(group));
    spec.insert(SCHEDULING_GROUP.to_owned(), Value::Object(scheduling_group));
}

#[cfg(test)]
mod tests {

    use super::*;

    fn service(spec: Value) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "ds", "namespace": "llm", "uid": "u-1"},
            "spec": spec,
        }))
        .expect("a service")
    }

    fn role(name: &str, component: &str, nodes: i32) -> Value {
        json!({
            "name": name, "componentType": component, "replicas": 2,
            "multinode": {"nodeCount": nodes},
            "template": {"spec": {"containers": [{"name": "s", "image": "vllm"}]}},
        })
    }

    #[test]
    fn the_first_replica_of_each_component_type_shares_the_core_group() {
        let s = service(json!({"roles": [
            role("prefill", "prefiller", 1),
            role("decode", "decoder", 2),
            role("decode-b", "decoder", 2),
        ]}));
        let spec = &s.spec;
        let group =
            |r: usize, i| group_of("ds", spec, &Naming::Plain, &spec.roles[r], i, None).unwrap();
        // prefill-0 and decode-0 together: 1 + 2 pods.
        assert_eq!(group(0, 0), group(1, 0));
        assert_eq!(group(0, 0).min_count, 3);
        assert!(group(0, 0).name.starts_with("ds-core-"));
        assert_eq!(group(0, 0).replica, None);
        // decode-b is a second decoder role: its first replica is on its own.
        assert_eq!(group(2, 0).min_count, 2);
        assert!(group(2, 0).name.starts_with("ds-decode-b-0-"));
        // Further replicas each whole, on their own.
        assert_eq!(group(1, 1).min_count, 2);
        assert_eq!(group(1, 1).replica, Some(("decode".to_owned(), 1)));
        assert_ne!(group(1, 1).name, group(1, 2).name);
    }

    #[test]
    fn one_role_has_no_core_group() {
        let s = service(json!({"roles": [role("worker", "worker", 4)]}));
        let g = group_of("ds", &s.spec, &Naming::Plain, &s.spec.roles[0], 0, None).unwrap();
        assert_eq!(g.replica, Some(("worker".to_owned(), 0)));
        assert_eq!(g.min_count, 4);
    }

    #[test]
    fn another_spec_names_another_group_and_revisions_side_by_side_each_have_a_core() {
        assert_ne!(group_name("ds-w-0", 2, None), group_name("ds-w-0", 4, None));
        assert_eq!(group_name("ds-w-0", 2, None), group_name("ds-w-0", 2, None));
        assert_ne!(
            group_name("ds-w-0", 2, None),
            group_name("ds-w-0", 2, Some("example.com/rack"))
        );
        let s = service(json!({"roles": [
            role("prefill", "prefiller", 1),
            role("decode", "decoder", 1),
        ]}));
        let plain = group_of("ds", &s.spec, &Naming::Plain, &s.spec.roles[0], 0, None).unwrap();
        let suffixed = group_of(
            "ds",
            &s.spec,
            &Naming::Suffixed("abc".into()),
            &s.spec.roles[0],
            0,
            None,
        )
        .unwrap();
        assert_ne!(plain.name, suffixed.name);
    }

    #[test]
    fn the_object_is_owned_labelled_and_a_template_names_its_group() {
        let s = service(json!({"roles": [role("worker", "worker", 2)]}));
        let g = group_of("ds", &s.spec, &Naming::Plain, &s.spec.roles[0], 1, None).unwrap();
        let object = pod_group(&s, &g);
        assert!(is_pod_group(&object));
        assert_eq!(object["spec"]["schedulingPolicy"]["gang"]["minCount"], 2);
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(object["metadata"]["labels"][children::REPLICA_INDEX], "1");
        assert!(object["spec"]["schedulingConstraints"].is_null());
        let mut template = json!({"spec": {"containers": []}});
        join(&mut template, &g.name);
        assert_eq!(named_by(&template), Some(g.name.as_str()));
    }

    #[test]
    fn a_required_placement_is_the_groups_topology_and_part_of_its_name() {
        let s = service(json!({"roles": [role("worker", "worker", 2)]}));
        let rack = Some("example.com/rack");
        let g = group_of("ds", &s.spec, &Naming::Plain, &s.spec.roles[0], 1, rack).unwrap();
        let object = pod_group(&s, &g);
        assert_eq!(
            object["spec"]["schedulingConstraints"],
            json!({"topology": [{"key": "example.com/rack"}]})
        );
        assert_eq!(topology_key(&object), rack);
        let h = group_of("ds", &s.spec, &Naming::Plain, &s.spec.roles[0], 1, None).unwrap();
        assert_ne!(g.name, h.name);
    }
}
