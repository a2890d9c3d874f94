//! Issue 16: every number users write has a documented upper limit
//! (`src/api/limits.rs`). A value one past it is denied with its field path
//! and the limit, by the webhook's validation and by `tandem render` (exit
//! status 2) alike; a value at the limit is admitted.

use std::process::Output;

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
    harness::render_stdin(yaml.as_bytes())
}

#[test]
fn over_limit_objects_make_render_exit_1_with_the_message() {
    for (case, object, expected) in over_limit() {
        let output = render(&object);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{case}: {stderr}");
        let name = object["metadata"]["name"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let line = format!("{kind} team/{name}: {expected}");
        assert!(
            stderr.lines().any(|l| l == line),
            "{case}: expected the line {line:?} in {stderr}"
        );
    }
}

// The same limits in the CRD schemas: `maximum`/`maxItems`, and the products
// and the ScaleView's immutability as CEL `x-kubernetes-validations`, so the
// API server refuses them even while the webhook is unreachable. The rules
// run here in the `cel` crate's interpreter, over the seed examples and the
// over-limit table.

/// Every CEL rule of `kind`'s schema: where it sits (object keys, `*` for
/// the items of an array), the rule and its message.
fn cel_rules(kind: &str) -> Vec<(Vec<String>, String, String)> {
    let crd = tandem::api::crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    let schema =
        serde_json::to_value(&crd).unwrap()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            .clone();
    let mut found = Vec::new();
    fn walk(schema: &Value, path: Vec<String>, found: &mut Vec<(Vec<String>, String, String)>) {
        for rule in schema["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            found.push((
                path.clone(),
                rule["rule"].as_str().unwrap().to_owned(),
                rule["message"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        for (key, property) in schema["properties"].as_object().into_iter().flatten() {
            let mut inner = path.clone();
            inner.push(key.clone());
            walk(property, inner, found);
        }
        if schema.get("items").is_some() {
            let mut inner = path;
            inner.push("*".to_owned());
            walk(&schema["items"], inner, found);
        }
    }
    walk(&schema, Vec::new(), &mut found);
    found
}

/// The values at `path` in `object` (every item where the path says `*`).
fn values_at<'a>(object: &'a Value, path: &[String]) -> Vec<&'a Value> {
    match path.split_first() {
        None => vec![object],
        Some((key, rest)) if key == "*" => object
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|item| values_at(item, rest))
            .collect(),
        Some((key, rest)) => object
            .get(key.as_str())
            .map(|inner| values_at(inner, rest))
            .unwrap_or_default(),
    }
}

/// A JSON value as the API server hands it to CEL: integers are `int`
/// (int64), never `uint` as a plain serde conversion would make positive ones.
fn cel_value(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => cel::Value::Int(i),
            None => cel::Value::Float(n.as_f64().unwrap()),
        },
        Value::String(s) => cel::Value::String(std::sync::Arc::new(s.clone())),
        Value::Array(items) => {
            cel::Value::List(std::sync::Arc::new(items.iter().map(cel_value).collect()))
        }
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| (k.clone(), cel_value(v)))
            .collect::<std::collections::HashMap<String, cel::Value>>()
            .into(),
    }
}

/// Runs one rule with `self` (and `oldSelf` for a transition rule).
fn holds(rule: &str, this: &Value, old: Option<&Value>) -> bool {
    let program = cel::Program::compile(rule).unwrap_or_else(|e| panic!("{rule}: {e:?}"));
    let mut context = cel::Context::default();
    // Kubernetes' CEL lists library (since 1.27): `list.sum()`.
    context
        .add_function(
            "sum",
            |cel::extractors::This(list): cel::extractors::This<
                std::sync::Arc<Vec<cel::Value>>,
            >| {
                list.iter()
                    .map(|v| match v {
                        cel::Value::Int(i) => *i,
                        other => panic!("sum over {other:?}"),
                    })
                    .sum::<i64>()
            },
        )
        .expect("sum() is a new function");
    context.add_variable_from_value("self", cel_value(this));
    if let Some(old) = old {
        context.add_variable_from_value("oldSelf", cel_value(old));
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(result)) => result,
        other => panic!("{rule} on {this}: {other:?}"),
    }
}

/// The CEL messages `object` (an update of `old`, if given) violates, as
/// the API server would evaluate them: transition rules only on updates.
fn cel_violations(object: &Value, old: Option<&Value>) -> Vec<String> {
    let kind = object["kind"].as_str().unwrap();
    let mut messages = Vec::new();
    for (path, rule, message) in cel_rules(kind) {
        let transition = rule.contains("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let news = values_at(object, &path);
        let olds = old.map(|o| values_at(o, &path));
        for (i, this) in news.iter().enumerate() {
            let previous = olds.as_ref().and_then(|o| o.get(i).copied());
            if transition && previous.is_none() {
                continue;
            }
            if !holds(&rule, this, previous.filter(|_| transition)) {
                messages.push(message.clone());
            }
        }
    }
    messages
}

fn schema_errors(object: &Value) -> Vec<String> {
    harness::tandem_schema(object["kind"].as_str().unwrap())
        .errors(object)
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

/// What only the webhook refuses: a ratio may be a number or a string, so
/// its schema has no type to bound.
const WEBHOOK_ONLY: [&str; 1] = ["ratio"];

#[test]
fn the_api_server_refuses_over_limit_objects_through_the_crd_schemas() {
    for (case, object, expected) in over_limit() {
        let schema = schema_errors(&object);
        let cel = cel_violations(&object, None);
        if WEBHOOK_ONLY.contains(&case) {
            assert!(
                schema.is_empty() && cel.is_empty(),
                "{case}: {schema:?} {cel:?}"
            );
            continue;
        }
        assert!(
            !schema.is_empty() || !cel.is_empty(),
            "{case}: the CRD admits what the webhook denies ({expected})"
        );
    }
    for (case, object) in at_limit() {
        assert_eq!(schema_errors(&object), Vec::<String>::new(), "{case}");
        assert_eq!(
            cel_violations(&object, None),
            Vec::<String>::new(),
            "{case}"
        );
    }
}

#[test]
fn cel_rules_name_the_products_they_bound() {
    // 101 000 pods: over the role's limit, and so over the service's too.
    let role = cel_violations(&service(json!([worker("w", 101, Some(1_000))])), None);
    assert_eq!(
        role,
        [
            "the service's pods (the sum over its roles of replicas × multinode.nodeCount) must be at most 100000",
            "the role's pods (replicas × multinode.nodeCount) must be at most 100000",
        ]
    );
    let service_pods = cel_violations(
        &service(json!([
            worker("a", 10_000, Some(5)),
            worker("b", 10_000, Some(5)),
            worker("c", 1, None)
        ])),
        None,
    );
    assert_eq!(
        service_pods,
        [
            "the service's pods (the sum over its roles of replicas × multinode.nodeCount) must be at most 100000"
        ]
    );
    let groups = cel_violations(&replication(201, 50), None);
    assert_eq!(
        groups,
        ["the replicated objects (groupConfig.replicas × target resources) must be at most 10000"]
    );
}

/// Every example (the seeds and the rest) passes every rule, as a create
/// and as an update that changes nothing.
#[test]
fn every_example_passes_the_cel_rules() {
    let mut checked = 0;
    for dir in [
        "examples/inferenceservice",
        "examples/seeds",
        "examples/scaleview",
        "examples/resourcescalinggroup",
        "examples/render",
    ] {
        let mut paths: Vec<_> = std::fs::read_dir(harness::repo_path(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        paths.sort();
        for path in paths {
            for object in harness::yaml_documents(&path) {
                if Kind::of(
                    object["apiVersion"].as_str().unwrap_or_default(),
                    object["kind"].as_str().unwrap_or_default(),
                )
                .is_none()
                {
                    continue;
                }
                assert_eq!(
                    cel_violations(&object, None),
                    Vec::<String>::new(),
                    "{}",
                    path.display()
                );
                assert_eq!(
                    cel_violations(&object, Some(&object)),
                    Vec::<String>::new(),
                    "{} (unchanged update)",
                    path.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 12, "{checked} objects");
}

#[test]
fn a_scale_views_target_and_groups_are_immutable_in_the_crd_too() {
    let old = view(
        3,
        json!([{"group": "decode-a", "priority": 1}, {"group": "decode-b"}]),
    );
    let immutable_target = "spec.targetRef is immutable: create a new ScaleView instead";
    let immutable_groups = "the set of groups (spec.scalePolicy[].group) is immutable; priorities and constraints may change";
    let change = |edit: &dyn Fn(&mut Value)| {
        let mut new = old.clone();
        edit(&mut new);
        cel_violations(&new, Some(&old))
    };
    assert_eq!(
        change(&|v| v["spec"]["replicas"] = json!(5)),
        Vec::<String>::new()
    );
    assert_eq!(
        change(&|v| v["spec"]["scalePolicy"] =
            json!([{"group": "decode-b", "priority": 3}, {"group": "decode-a"}])),
        Vec::<String>::new(),
        "reordered, priorities changed: the same groups"
    );
    assert_eq!(
        change(&|v| v["spec"]["targetRef"]["name"] = json!("other")),
        [immutable_target]
    );
    assert_eq!(
        change(&|v| v["spec"]["targetRef"]["componentType"] = json!("prefiller")),
        [immutable_target]
    );
    assert_eq!(
        change(&|v| v["spec"]["scalePolicy"] = json!([{"group": "decode-a"}])),
        [immutable_groups],
        "a group removed"
    );
    assert_eq!(
        change(&|v| v["spec"]["scalePolicy"]
            .as_array_mut()
            .unwrap()
            .push(json!({"group": "decode-c"}))),
        [immutable_groups],
        "a group added"
    );
    assert_eq!(
        change(&|v| {
            v["spec"].as_object_mut().unwrap().remove("scalePolicy");
        }),
        [immutable_groups],
        "all groups dropped"
    );
    // No groups before and after, written or not: the same (empty) set.
    let mut empty = old.clone();
    empty["spec"]["scalePolicy"] = json!([]);
    let mut absent = old.clone();
    absent["spec"]
        .as_object_mut()
        .unwrap()
        .remove("scalePolicy");
    assert_eq!(cel_violations(&absent, Some(&empty)), Vec::<String>::new());
}
