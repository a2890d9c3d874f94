//! A PodDisruptionBudget per serving role (issue 15, item 3), owned by the
//! service, so that a node drain evicts the pods of at most
//! `spec.roles[].disruptionBudget.maxUnavailableReplicas` replicas of a role
//! at a time (default 1).
//!
//! A budget counts pods, so the replica count is translated through
//! `nodeCount`: `minAvailable = (replicas - maxUnavailableReplicas) ×
//! nodeCount`, where `replicas` is the role's replicas that exist now (the
//! ones the plan keeps, and the ones leaving that still have pods, of every
//! revision). That holds one replica's worth of pods because every
//! LeaderWorkerSet restarts a replica as a unit (`topology::RESTART_POLICY`):
//! the first eviction of a multi-node replica's pod makes LWS recreate all of
//! its pods, which stop being ready and so use up the whole budget until the
//! replica is ready again. (Between that eviction and LWS recreating the
//! group, a second eviction of another replica's pod can still pass: the
//! budget narrows the window, it cannot close it.)
//!
//! Why `minAvailable` and not `maxUnavailable`: for `maxUnavailable` the
//! disruption controller counts the pods it expects from the controllers of
//! the pods that exist now. Each replica is a LeaderWorkerSet of its own, with
//! StatefulSets of its own, so a replica whose pods are all gone for a moment
//! (evicted and not yet recreated) drops out of that count, and the budget
//! then lets a second replica go: a node drain took both replicas of a
//! prefill role out of service at once in `cluster_nodes`' drain scenario.
//! An integer `minAvailable` does not depend on which pods exist; Tandem
//! counts the replicas itself and rewrites the budget when that count
//! changes (a scale, a surge replica, a replica gone).
//!
//! `unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not ready (crash
//! looping, never scheduled) can always be evicted, so a broken replica never
//! blocks a node drain.
//!
//! A one-replica role with the default budget allows its only replica to be
//! evicted: a node drain takes the role down until the replica is ready
//! elsewhere (Kubernetes' own advice for a single replica). Setting
//! `maxUnavailableReplicas: 0` blocks every eviction of the role's ready pods
//! instead, and a node drain waits until an operator moves the replica.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::inference_service::{InferenceService, Role};
use crate::plan::shared::children::{self, ROLE_NAME, SERVICE};

pub const API_VERSION: &str = crate::plan::shared::child_kinds::POD_DISRUPTION_BUDGET.api_version;
pub const KIND: &str = crate::plan::shared::child_kinds::POD_DISRUPTION_BUDGET.kind;

/// The budget of a role: `{service}-{role}`.
pub fn name(service: &str, role: &str) -> String {
    format!("{service}-{role}")
}

/// The replicas of a role that must stay available while `replicas` exist:
/// all but `maxUnavailableReplicas`, and never below 0.
pub fn min_available_replicas(role: &Role, replicas: usize) -> i32 {
    i32::try_from(replicas)
        .unwrap_or(i32::MAX)
        .saturating_sub(role.max_unavailable_replicas().max(0))
        .max(0)
}

/// Their pods (`nodeCount` a replica), within an i32 (the API's int).
pub fn min_available_pods(role: &Role, replicas: usize) -> i32 {
    min_available_replicas(role, replicas).saturating_mul(role.node_count().max(1))
}

/// The PodDisruptionBudget of serving role `role` with `replicas` replicas
/// now: it selects the role's pods (every revision's) by the service and
/// role labels every one of them carries.
pub fn pod_disruption_budget(service: &InferenceService, role: &Role, replicas: usize) -> Value {
    let svc = children::service_name(service);
    json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": children::metadata(service, &name(svc, &role.name), &children::role_labels(svc, role)),
        "spec": {
            "minAvailable": min_available_pods(role, replicas),
            "selector": {"matchLabels": {SERVICE: svc, ROLE_NAME: role.name}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    })
}

/// The budgets of every serving role of the service, with why. `replicas`
/// holds each role's replicas now (kept or still with pods, over every
/// revision); a role it lacks counts its `spec.roles[].replicas`.
pub fn budgets(
    service: &InferenceService,
    replicas: &BTreeMap<String, usize>,
) -> Vec<(Value, String)> {
    service
        .spec
        .roles
        .iter()
        .filter(|r| !r.is_router())
        .map(|role| {
            let now = replicas.get(&role.name).copied().unwrap_or_else(|| {
                usize::try_from(role.replicas().max(0)).unwrap_or_default()
            });
            (
                pod_disruption_budget(service, role, now),
                format!(
                    "a node drain may evict the pods of at most {} replica(s) of role {} at a time: {} of its {now} replica(s) stay available ({} pod(s))",
                    role.max_unavailable_replicas().max(0),
                    role.name,
                    min_available_replicas(role, now),
                    min_available_pods(role, now)
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
        let budgets = budgets(&service, &BTreeMap::new());
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
        // All replicas but one stay available, in pods: 1 a replica for a
        // single-node role, nodeCount for a multi-node one.
        assert_eq!(spec(prefill).min_available, Some(IntOrString::Int(2)));
        assert_eq!(spec(decode).min_available, Some(IntOrString::Int(4)));
        assert_eq!(spec(prefill).max_unavailable, None);
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
    fn the_budget_keeps_all_replicas_now_but_max_unavailable_replicas_available() {
        let service = service(json!([
            {"name": "decode", "componentType": "decoder", "replicas": 8,
             "multinode": {"nodeCount": 2}, "disruptionBudget": {"maxUnavailableReplicas": 3},
             "template": template()},
            {"name": "solo", "componentType": "worker",
             "disruptionBudget": {"maxUnavailableReplicas": 0}, "template": template()},
            {"name": "few", "componentType": "worker", "replicas": 2,
             "disruptionBudget": {"maxUnavailableReplicas": 5}, "template": template()},
        ]));
        let budgets = budgets(&service, &BTreeMap::new());
        assert_eq!(budgets[0].0["spec"]["minAvailable"], 10, "(8 - 3) x 2 pods");
        assert_eq!(
            budgets[0].1,
            "a node drain may evict the pods of at most 3 replica(s) of role decode at a time: 5 of its 8 replica(s) stay available (10 pod(s))"
        );
        assert_eq!(
            budgets[1].0["spec"]["minAvailable"], 1,
            "0 blocks evictions of the ready pod"
        );
        assert_eq!(budgets[2].0["spec"]["minAvailable"], 0, "never below 0");
        // The replicas that exist count, not the spec's: a surge replica
        // of a rollout, or a replica still draining after a scale-down.
        let budgets = budgets_now(&service, &[("decode", 9), ("solo", 2)]);
        assert_eq!(budgets[0].0["spec"]["minAvailable"], 12, "(9 - 3) x 2 pods");
        assert_eq!(budgets[1].0["spec"]["minAvailable"], 2);
    }

    fn budgets_now(service: &InferenceService, now: &[(&str, usize)]) -> Vec<(Value, String)> {
        let now: BTreeMap<String, usize> = now.iter().map(|(r, n)| ((*r).to_owned(), *n)).collect();
        budgets(service, &now)
    }
}
