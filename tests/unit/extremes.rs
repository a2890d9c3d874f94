//! Issue 16: the plans are total. Fed any `i32` for replicas, nodeCount, pod
//! deletion costs, ratios' sources and bounds, priorities and constraints
//! (specs the webhook would refuse, stored before it was installed, included),
//! they never panic and never produce a negative count.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use rust_decimal::Decimal;
use serde_json::{Value, json};
use tandem::api::limits::MAX_REPLICAS;
use tandem::api::{InferenceService, ResourceScalingGroup, ScaleView};
use tandem::plan::inference_service::service;
use tandem::plan::resource_scaling_group::{ratio, replication};
use tandem::plan::shared::children;
use tandem::plan::{scale_view, victims};

fn now() -> Time {
    Time(jiff::Timestamp::UNIX_EPOCH)
}

/// Any i32, with the edges and small values (where the plans do real work)
/// drawn often. No value at the limit itself: a service planned at 10 000
/// replicas is 10 000 LeaderWorkerSets, correct but slow to build in a
/// debug test (the `limits` tests admit it).
fn count() -> impl Strategy<Value = i32> {
    prop_oneof![
        any::<i32>(),
        -2i32..6,
        Just(i32::MAX),
        Just(i32::MIN),
        Just(MAX_REPLICAS + 1),
        Just(1_073_741_824),
    ]
}

fn service_of(roles: &[(i32, i32)]) -> InferenceService {
    let roles: Vec<Value> = roles
        .iter()
        .enumerate()
        .map(|(i, (replicas, nodes))| {
            json!({
                "name": format!("r{i}"),
                "componentType": "worker",
                "replicas": replicas,
                "multinode": {"nodeCount": nodes},
                "scaleDown": {"policy": if i % 2 == 0 { "Binpack" } else { "Ordered" }},
                "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}},
            })
        })
        .collect();
    let mut service: InferenceService = serde_json::from_value(json!({
        "apiVersion": "fusioninfer.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "svc", "namespace": "team", "uid": "u-1", "generation": 1},
        "spec": {"roles": roles},
    }))
    .unwrap();
    service.metadata.generation = Some(1);
    service
}

/// A running, ready pod of replica `index` of role `r{role}`, worker `worker`,
/// with a deletion cost.
fn pod(role: usize, index: u32, worker: u32, cost: i32) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("svc-r{role}-{index}-{worker}"),
            "namespace": "team",
            "labels": {
                children::SERVICE: "svc",
                children::ROLE_NAME: format!("r{role}"),
                children::REPLICA_INDEX: index.to_string(),
                children::LWS_WORKER_INDEX: worker.to_string(),
            },
            "annotations": {victims::DELETION_COST: cost.to_string()},
        },
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn assert_counts_not_negative(status: &tandem::api::inference_service::InferenceServiceStatus) {
    for (role, c) in &status.components {
        for (field, value) in [
            ("desiredReplicas", c.desired_replicas),
            ("readyReplicas", c.ready_replicas),
            ("nodesPerReplica", c.nodes_per_replica),
            ("totalPods", c.total_pods),
            ("readyPods", c.ready_pods),
        ] {
            assert!(value >= 0, "{role}.{field} = {value}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The service plan, twice: from nothing, then with what it created and
    /// pods of every replica carrying any deletion cost.
    #[test]
    fn service_plans_take_any_replicas_node_counts_and_costs(
        roles in prop::collection::vec((count(), count()), 1..3),
        costs in prop::collection::vec(any::<i32>(), 8),
    ) {
        let service = service_of(&roles);
        let none = BTreeSet::new();
        let first = service::reconcile(
            &service,
            &service::World { children: &[], pods: &[], unavailable: &none, installed: &tandem::plan::shared::installed::ASSUMED, scale_views: &[] },
            &service::Options::default(),
            &now(),
        );
        assert_counts_not_negative(&first.status);
        let created: Vec<Value> = first.apply.iter().map(|a| a.object.clone()).collect();
        prop_assert!(created.len() <= 2 * usize::try_from(MAX_REPLICAS).unwrap() + 4);
        let pods: Vec<Value> = (0..roles.len())
            .flat_map(|role| (0..4u32).map(move |index| (role, index)))
            .zip(costs.iter().cycle())
            .map(|((role, index), &cost)| pod(role, index, 0, cost))
            .collect();
        let second = service::reconcile(
            &service,
            &service::World { children: &created, pods: &tandem::plan::shared::pod::from_json_all(&pods), unavailable: &none, installed: &tandem::plan::shared::installed::ASSUMED, scale_views: &[] },
            &service::Options::default(),
            &now(),
        );
        assert_counts_not_negative(&second.status);
    }

    /// A ScaleView over a service, with any total, priorities, constraints
    /// and role replicas: the split and the scaled roles are never negative.
    #[test]
    fn scale_view_plans_take_any_totals_priorities_and_constraints(
        replicas in proptest::option::of(count()),
        groups in prop::collection::vec((count(), proptest::option::of(count()), proptest::option::of(count())), 0..4),
        role_replicas in prop::collection::vec(count(), 4),
    ) {
        let target = service_of(&role_replicas.iter().map(|&r| (r, 1)).collect::<Vec<_>>());
        let policies: Vec<Value> = groups
            .iter()
            .enumerate()
            .map(|(i, (priority, min, max))| json!({
                "group": format!("r{i}"),
                "priority": priority,
                "constraints": {"min": min, "max": max},
            }))
            .collect();
        let view: ScaleView = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1",
            "kind": "ScaleView",
            "metadata": {"name": "view", "namespace": "team", "uid": "v-1", "generation": 1,
                         "finalizers": [scale_view::FINALIZER]},
            "spec": {"targetRef": {"name": "svc", "componentType": "worker"},
                     "replicas": replicas, "scalePolicy": policies},
        }))
        .unwrap();
        let pass = scale_view::reconcile(&view, Some(&target), None, &now());
        for role in &pass.roles {
            prop_assert!((0..=MAX_REPLICAS).contains(&role.to), "{} to {}", role.role, role.to);
        }
        if let Some(status) = &pass.status {
            prop_assert!(status.replicas >= 0);
            for group in &status.groups {
                prop_assert!(group.replicas >= 0 && group.ready_replicas >= 0, "{group:?}");
            }
        }
    }

    /// A Target's replicas for any source, ratio (any decimal of either sign)
    /// and bounds: within 0..=MAX_REPLICAS.
    #[test]
    fn ratios_give_bounded_replicas_for_any_source(
        source in count(),
        (lo, mid, hi, negative, scale) in (any::<u32>(), any::<u32>(), any::<u32>(), any::<bool>(), 0u32..=28),
        min in proptest::option::of(count()),
        max in proptest::option::of(count()),
    ) {
        let ratio = Decimal::from_parts(lo, mid, hi, negative, scale);
        let replicas = ratio::target_replicas(source, ratio, min, max);
        prop_assert!((0..=MAX_REPLICAS).contains(&replicas));
    }

    /// GroupReplication with any number of groups and pods of any cost.
    #[test]
    fn group_replication_takes_any_group_count_and_costs(
        groups in count(),
        costs in prop::collection::vec(any::<i32>(), 3),
    ) {
        let rsg: ResourceScalingGroup = serde_json::from_value(json!({
            "apiVersion": "resourcescalinggroup.com/v1",
            "kind": "ResourceScalingGroup",
            "metadata": {"name": "rsg", "namespace": "team", "uid": "g-1", "generation": 1},
            "spec": {
                "targetResources": [{"name": "web", "apiVersion": "apps/v1", "kind": "Deployment"}],
                "scalingStrategy": {"type": "GroupReplication",
                    "groupConfig": {"groupNamePrefix": "g", "replicas": groups,
                                    "scaleDown": {"policy": "Binpack"}}},
            },
        }))
        .unwrap();
        let template = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team", "generation": i64::MAX},
            "spec": {"replicas": i32::MAX, "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"observedGeneration": i64::MAX, "replicas": i32::MAX, "readyReplicas": -1},
        });
        let pods: Vec<Value> = costs
            .iter()
            .enumerate()
            .map(|(i, cost)| json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "team",
                    "labels": {replication::NAME_LABEL: "rsg", replication::GROUP_LABEL: format!("g-{i:02}")},
                    "annotations": {victims::DELETION_COST: cost.to_string()}},
            }))
            .collect();
        let none = BTreeSet::new();
        let pass = replication::reconcile(
            &rsg,
            &replication::World {
                templates: &[Some(template)],
                objects: &[],
                pods: &tandem::plan::shared::pod::from_json_all(&pods),
                unavailable: &none,
            },
            &now(),
        );
        prop_assert!(pass.status.current_replicas >= 0);
        prop_assert!(pass.apply.len() <= 2 * usize::try_from(tandem::api::limits::MAX_GROUPS).unwrap());
    }
}
