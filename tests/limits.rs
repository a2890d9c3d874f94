//! Issue 16: every number users write has a documented upper limit
//! (`src/api/limits.rs`). A value one past it is denied with its field path
//! and the limit, by the webhook's validation and by `tandem render` (exit
//! status 2) alike; a value at the limit is admitted.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use tandem::admission::{self, Kind, lookup};
use tandem::api::limits;

fn service(roles: Value) -> Value {
    json!({
        "apiVersion": "fusioninfer.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "svc", "namespace": "team"},
        "spec": {"roles": roles},
    })
}

fn worker(name: &str, replicas: i64, node_count: Option<i64>) -> Value {
    let mut role = json!({
        "name": name,
        "componentType": "worker",
        "replicas": replicas,
        "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]}},
    });
    if let Some(n) = node_count {
        role["multinode"] = json!({"nodeCount": n});
    }
    role
}

fn with_upgrade(mut object: Value, interval: i64) -> Value {
    object["spec"]["upgradeStrategy"] = json!({
        "type": "IncrementalUpgrade",
        "incrementalUpgradeOptions": {
            "stepSizePercent": 10, "intervalSeconds": interval, "gatewayClassName": "istio"
        },
    });
    object
}

fn view(replicas: i64, policies: Value) -> Value {
    json!({
        "apiVersion": "fusioninfer.io/v1alpha1",
        "kind": "ScaleView",
        "metadata": {"name": "view", "namespace": "team"},
        "spec": {
            "targetRef": {"name": "svc", "componentType": "decoder"},
            "replicas": replicas,
            "scalePolicy": policies,
        },
    })
}

fn groups(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"group": format!("decode-{i}")}))
            .collect(),
    )
}

fn replication(replicas: i64, targets: usize) -> Value {
    let targets: Vec<Value> = (0..targets)
        .map(|i| json!({"name": format!("r{i}"), "apiVersion": "apps/v1", "kind": "Deployment"}))
        .collect();
    json!({
        "apiVersion": "resourcescalinggroup.com/v1",
        "kind": "ResourceScalingGroup",
        "metadata": {"name": "rsg", "namespace": "team"},
        "spec": {
            "targetResources": targets,
            "scalingStrategy": {
                "type": "GroupReplication",
                "groupConfig": {"groupNamePrefix": "g", "replicas": replicas},
            },
        },
    })
}

fn inplace(ratio: Value, min: Option<i64>, max: Option<i64>) -> Value {
    let mut target = json!({"name": "decode", "role": "Target", "ratio": ratio});
    if let Some(min) = min {
        target["min"] = json!(min);
    }
    if let Some(max) = max {
        target["max"] = json!(max);
    }
    json!({
        "apiVersion": "resourcescalinggroup.com/v1",
        "kind": "ResourceScalingGroup",
        "metadata": {"name": "rsg", "namespace": "team"},
        "spec": {
            "targetResources": [
                {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"},
            ],
            "scalingStrategy": {
                "type": "InplaceScaling",
                "inplaceConfig": {"bindings": [{"name": "router", "role": "Source"}, target]},
            },
        },
    })
}

fn roles(n: usize) -> Value {
    Value::Array((0..n).map(|i| worker(&format!("w{i}"), 1, None)).collect())
}

/// Objects one past a limit, each with the denial it must get.
fn over_limit() -> Vec<(&'static str, Value, String)> {
    let max = limits::MAX_REPLICAS;
    vec![
        (
            "role replicas",
            service(json!([worker("w", 10_001, None)])),
            format!("spec.roles[0].replicas: must be at most {max}, got 10001"),
        ),
        (
            "role replicas at i32::MAX",
            service(json!([worker("w", i64::from(i32::MAX), None)])),
            format!("spec.roles[0].replicas: must be at most {max}, got 2147483647"),
        ),
        (
            "nodeCount (the issue's 2 × 2^30)",
            service(json!([worker("w", 2, Some(1_073_741_824))])),
            "spec.roles[0].multinode.nodeCount: must be at most 1000, got 1073741824".to_owned(),
        ),
        (
            "pods per role",
            service(json!([worker("w", 101, Some(1_000))])),
            "spec.roles[0].replicas: the role's pods (replicas 101 × nodeCount 1000) must be at most 100000, got 101000".to_owned(),
        ),
        (
            "pods per service",
            service(json!([worker("a", 10_000, Some(5)), worker("b", 10_000, Some(5)), worker("c", 1, None)])),
            "spec.roles: the service's pods (the sum over its roles of replicas × nodeCount) must be at most 100000, got 100001".to_owned(),
        ),
        (
            "roles",
            service(roles(33)),
            "spec.roles: must list at most 32 roles, got 33".to_owned(),
        ),
        (
            "intervalSeconds",
            with_upgrade(service(json!([worker("w", 1, None)])), 86_401),
            "spec.upgradeStrategy.incrementalUpgradeOptions.intervalSeconds: must be at most 86400, got 86401".to_owned(),
        ),
        (
            "view replicas",
            view(100_001, groups(1)),
            "spec.replicas: must be at most 100000, got 100001".to_owned(),
        ),
        (
            "view group max",
            view(1, json!([{"group": "decode", "constraints": {"max": 10_001}}])),
            format!("spec.scalePolicy[0].constraints.max: must be at most {max}, got 10001"),
        ),
        (
            "view group min",
            view(1, json!([{"group": "decode", "constraints": {"min": 10_001}}])),
            format!("spec.scalePolicy[0].constraints.min: must be at most {max}, got 10001"),
        ),
        (
            "view priority",
            view(1, json!([{"group": "decode", "priority": 11}])),
            "spec.scalePolicy[0].priority: must be between 0 and 10, got 11".to_owned(),
        ),
        (
            "view groups",
            view(1, groups(33)),
            "spec.scalePolicy: must list at most 32 groups, got 33".to_owned(),
        ),
        (
            "groups of a GroupReplication",
            replication(1_001, 1),
            "spec.scalingStrategy.groupConfig.replicas: must be at most 1000, got 1001".to_owned(),
        ),
        (
            "replicated objects",
            replication(201, 50),
            "spec.scalingStrategy.groupConfig.replicas: the replicated objects (replicas 201 × 50 target resources) must be at most 10000, got 10050".to_owned(),
        ),
        (
            "target resources",
            replication(1, 65),
            "spec.targetResources: must list at most 64 resources, got 65".to_owned(),
        ),
        (
            "ratio",
            inplace(json!("1000.5"), None, None),
            "spec.scalingStrategy.inplaceConfig.bindings[1].ratio: must be at most 1000, got 1000.5".to_owned(),
        ),
        (
            "binding max",
            inplace(json!(1), None, Some(10_001)),
            format!("spec.scalingStrategy.inplaceConfig.bindings[1].max: must be at most {max}, got 10001"),
        ),
        (
            "binding min",
            inplace(json!(1), Some(10_001), None),
            format!("spec.scalingStrategy.inplaceConfig.bindings[1].min: must be at most {max}, got 10001"),
        ),
    ]
}

/// The same objects at their limits: admitted.
fn at_limit() -> Vec<(&'static str, Value)> {
    vec![
        ("role replicas", service(json!([worker("w", 10_000, None)]))),
        ("nodeCount", service(json!([worker("w", 100, Some(1_000))]))),
        (
            "pods per service",
            service(json!([
                worker("a", 10_000, Some(5)),
                worker("b", 10_000, Some(5))
            ])),
        ),
        ("roles", service(roles(32))),
        (
            "intervalSeconds",
            with_upgrade(service(json!([worker("w", 1, None)])), 86_400),
        ),
        ("view replicas", view(100_000, groups(32))),
        (
            "view group bounds",
            view(
                10_000,
                json!([{"group": "decode", "priority": 10, "constraints": {"min": 10_000, "max": 10_000}}]),
            ),
        ),
        ("groups", replication(1_000, 1)),
        ("replicated objects", replication(200, 50)),
        ("target resources", replication(1, 64)),
        (
            "ratio and binding bounds",
            inplace(json!(1000), Some(10_000), Some(10_000)),
        ),
    ]
}

fn kind_of(object: &Value) -> Kind {
    Kind::of(
        object["apiVersion"].as_str().unwrap(),
        object["kind"].as_str().unwrap(),
    )
    .unwrap()
}

fn admission_denial(object: &Value) -> Option<String> {
    admission::admit(kind_of(object), "team", object, None, &lookup::Blind)
        .err()
        .map(|findings| findings.denial_message())
}

#[test]
fn over_limit_objects_are_denied_at_admission_with_the_field_and_the_limit() {
    for (case, object, expected) in over_limit() {
        let denial = admission_denial(&object)
            .unwrap_or_else(|| panic!("{case}: admitted, expected {expected:?}"));
        assert!(
            denial.split("; ").any(|v| v == expected),
            "{case}: expected {expected:?} among {denial:?}"
        );
    }
}

#[test]
fn objects_at_their_limits_are_admitted() {
    for (case, object) in at_limit() {
        assert_eq!(admission_denial(&object), None, "{case}");
    }
}

fn render(object: &Value) -> Output {
    let yaml = serde_norway::to_string(object).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["render", "-f", "-"])
        .current_dir(common::repo_path(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn over_limit_objects_make_render_exit_2_with_the_message() {
    for (case, object, expected) in over_limit() {
        let output = render(&object);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{case}: {stderr}");
        let name = object["metadata"]["name"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let line = format!("{kind} team/{name}: {expected}");
        assert!(
            stderr.lines().any(|l| l == line),
            "{case}: expected the line {line:?} in {stderr}"
        );
    }
}
