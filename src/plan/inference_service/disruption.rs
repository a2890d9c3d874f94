//! A PodDisruptionBudget per serving role (issue 15, item 3), owned by the
//! service, so that a node drain evicts the pods of at most
//! `spec.roles[].disruptionBudget.maxUnavailableReplicas` replicas of a role
//! at a time (default 1).
//!
//! A budget counts pods, so the replica count is translated through
//! `nodeCount`: `maxUnavailable = maxUnavailableReplicas × nodeCount`. That
//! holds one replica's worth of pods because every LeaderWorkerSet restarts a
//! replica as a unit (`topology::RESTART_POLICY`): the first eviction of a
//! multi-node replica's pod makes LWS recreate all of its pods, which stop
//! being ready and so use up the whole budget until the replica is ready
//! again. (Between that eviction and LWS recreating the group, a second
//! eviction of another replica's pod can still pass: the budget narrows the
//! window, it cannot close it.)
//!
//! `unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not ready (crash
//! looping, never scheduled) can always be evicted, so a broken replica never
//! blocks a node drain.
//!
//! A one-replica role with the default budget allows its only replica to be
//! evicted: a node drain takes the role down until the replica is ready
//! elsewhere (Kubernetes' own advice for a single replica). Setting
//! `maxUnavailableReplicas: 0` blocks every eviction of the role's pods
//! instead, and a node drain waits until an operator moves the replica.

use serde_json::{Value, json};

use crate::api::inference_service::{InferenceService, Role};
use crate::plan::shared::children::{self, ROLE_NAME, SERVICE};

pub const API_VERSION: &str = "policy/v1";
pub const KIND: &str = "PodDisruptionBudget";

/// The budget of a role: `{service}-{role}`.
pub fn name(service: &str, role: &str) -> String {
    format!("{service}-{role}")
}

/// Pods of one replica times the replicas that may be disrupted at once,
/// within an i32 (the API's int).
pub fn max_unavailable_pods(role: &Role) -> i32 {
    role.max_unavailable_replicas()
        .max(0)
        .saturating_mul(role.node_count().max(1))
}

/// The PodDisruptionBudget of serving role `role`: it selects the role's
/// pods (every revision's) by the service and role labels every one of them
/// carries.
pub fn pod_disruption_budget(service: &InferenceService, role: &Role) -> Value {
    let svc = children::service_name(service);
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": children::metadata(service, &name(svc, &role.name), &children::role_labels(svc, role)),
        "spec": {
            "maxUnavailable": max_unavailable_pods(role),
            "selector": {"matchLabels": {SERVICE: svc, ROLE_NAME: role.name}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    })
}

/// The budgets of every serving role of the service, with why.
pub fn budgets(service: &InferenceService) -> Vec<(Value, String)> {
    service
        .spec
        .roles
        .iter()
        .filter(|r| !r.is_router())
        .map(|role| {
            (
                pod_disruption_budget(service, role),
                format!(
                    "a node drain may evict the pods of at most {} replica(s) of role {} at a time ({} pod(s))",
                    role.max_unavailable_replicas().max(0),
                    role.name,
                    max_unavailable_pods(role)
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::inference_service::topology;
    use crate::plan::shared::children::Naming;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn service(roles: Value) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "ai", "uid": "u-1"},
            "spec": {"roles": roles},
        }))
        .unwrap()
    }

    fn template() -> Value {
        json!({"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}})
    }

    /// The labels of every pod template of a replica of `role`.
    fn pod_labels(service: &InferenceService, role: &Role, index: u32) -> Vec<Value> {
        let lws = topology::leader_worker_set(
            service,
            role,
            index,
            "r1",
            &Naming::Plain,
            &topology::Placement::default(),
        )
        .unwrap();
        let group = &lws["spec"]["leaderWorkerTemplate"];
        ["leaderTemplate", "workerTemplate"]
            .iter()
            .filter(|t| !group[*t].is_null())
            .map(|t| group[*t]["metadata"]["labels"].clone())
            .collect()
    }

    fn selects(budget: &PodDisruptionBudget, labels: &Value) -> bool {
        let selector = budget.spec.as_ref().unwrap().selector.as_ref().unwrap();
        selector
            .match_labels
            .iter()
            .flatten()
            .all(|(k, v)| labels[k] == v.as_str())
            && selector.match_expressions.is_none()
    }

    #[test]
    fn a_budget_per_serving_role_is_a_valid_policy_v1_object_selecting_exactly_its_pods() {
        let service = service(json!([
            {"name": "prefill", "componentType": "prefiller", "replicas": 3, "template": template()},
            {"name": "decode", "componentType": "decoder", "replicas": 2,
             "multinode": {"nodeCount": 4}, "template": template()},
            {"name": "router", "componentType": "router"},
        ]));
        let budgets = budgets(&service);
        assert_eq!(budgets.len(), 2, "none for the router");
        let parsed: Vec<PodDisruptionBudget> = budgets
            .iter()
            .map(|(b, _)| {
                serde_json::from_value(b.clone()).expect("a policy/v1 PodDisruptionBudget")
            })
            .collect();
        // Every field survives the typed round trip: nothing unknown.
        for ((value, _), typed) in budgets.iter().zip(&parsed) {
            let mut back = serde_json::to_value(typed).unwrap();
            back["apiVersion"] = json!(API_VERSION);
            back["kind"] = json!(KIND);
            assert_eq!(&back, value);
        }
        let (prefill, decode) = (&parsed[0], &parsed[1]);
        assert_eq!(prefill.metadata.name.as_deref(), Some("qwen-prefill"));
        assert_eq!(
            prefill.metadata.owner_references.as_ref().unwrap()[0].uid,
            "u-1"
        );
        let spec = |b: &PodDisruptionBudget| b.spec.clone().unwrap();
        // One replica's pods: 1 for a single-node role, nodeCount for a
        // multi-node one.
        assert_eq!(spec(prefill).max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(spec(decode).max_unavailable, Some(IntOrString::Int(4)));
        assert_eq!(spec(prefill).min_available, None);
        assert_eq!(
            spec(decode).unhealthy_pod_eviction_policy.as_deref(),
            Some("AlwaysAllow")
        );
        let roles = &service.spec.roles;
        for index in 0..3 {
            for labels in pod_labels(&service, &roles[0], index) {
                assert!(selects(prefill, &labels));
                assert!(!selects(decode, &labels));
            }
        }
        for index in 0..2 {
            let labels = pod_labels(&service, &roles[1], index);
            assert_eq!(labels.len(), 2, "leader and worker templates");
            for labels in labels {
                assert!(selects(decode, &labels));
                assert!(!selects(prefill, &labels));
            }
        }
    }

    #[test]
    fn the_budget_follows_max_unavailable_replicas() {
        let service = service(json!([
            {"name": "decode", "componentType": "decoder", "replicas": 8,
             "multinode": {"nodeCount": 2}, "disruptionBudget": {"maxUnavailableReplicas": 3},
             "template": template()},
            {"name": "solo", "componentType": "worker",
             "disruptionBudget": {"maxUnavailableReplicas": 0}, "template": template()},
        ]));
        let budgets = budgets(&service);
        assert_eq!(budgets[0].0["spec"]["maxUnavailable"], 6);
        assert_eq!(
            budgets[0].1,
            "a node drain may evict the pods of at most 3 replica(s) of role decode at a time (6 pod(s))"
        );
        assert_eq!(
            budgets[1].0["spec"]["maxUnavailable"], 0,
            "0 blocks evictions"
        );
    }
}
