//! `tandem render` leaves alone what another field manager added to an
//! object Tandem owns, as the API server does (issue 23): a settled world
//! with an env var, a sidecar, a template label and an annotation added to
//! a LeaderWorkerSet renders no change for it; and when Tandem does change
//! it, a field Tandem applied before and no longer wants goes while the
//! other manager's stay (told apart by `metadata.managedFields`).

use serde_json::{Value, json};

/// `tandem render -o json` of `world`.
fn render(world: &[Value]) -> Value {
    let input: Vec<String> = world
        .iter()
        .map(|o| serde_json::to_string(o).expect("json"))
        .collect();
    let output = harness::render_json_stdin(input.join("\n---\n").as_bytes());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("render's JSON")
}

fn service(env: Value) -> Value {
    let mut service =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story1-monolithic.yaml"))
            .remove(0);
    service["spec"]["roles"][0]["template"]["spec"]["containers"][0]["env"] = env;
    service
}

fn applied<'a>(rendered: &'a Value, kind: &str) -> Vec<&'a Value> {
    rendered["apply"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["kind"] == kind)
        .collect()
}

/// The settled world for `service`: what render applies, as stored.
fn settled(service: &Value) -> Vec<Value> {
    let rendered = render(std::slice::from_ref(service));
    rendered["apply"].as_array().expect("applied").clone()
}

/// Adds another manager's env var, sidecar, template label and annotation.
fn add_foreign_fields(set: &mut Value) {
    set["metadata"]["annotations"]["policy.example.com/checked"] = json!("yes");
    let template = &mut set["spec"]["leaderWorkerTemplate"]["workerTemplate"];
    template["metadata"]["labels"]["policy.example.com/team"] = json!("ml");
    let containers = template["spec"]["containers"]
        .as_array_mut()
        .expect("containers");
    containers[0]["env"]
        .as_array_mut()
        .expect("env")
        .push(json!({"name": "POLICY_INJECTED", "value": "1"}));
    containers.push(json!({"name": "policy-sidecar", "image": "busybox:1.36"}));
}

#[test]
fn another_managers_additions_to_a_settled_leader_worker_set_render_no_change() {
    let service = service(json!([{"name": "A", "value": "1"}]));
    let mut world = settled(&service);
    for object in &mut world {
        if object["kind"] == "LeaderWorkerSet" {
            add_foreign_fields(object);
        }
    }
    let rendered = render(&world);
    assert!(
        applied(&rendered, "LeaderWorkerSet").is_empty(),
        "{:#}",
        rendered["apply"]
    );
}

#[test]
fn a_field_tandem_no_longer_applies_goes_and_another_managers_stay() {
    let before = service(json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]));
    let mut world = settled(&before);
    for object in &mut world {
        if object["kind"] == "LeaderWorkerSet" {
            add_foreign_fields(object);
            // What the API server records: Tandem applied the container with
            // A and B; the policy engine the rest.
            object["metadata"]["managedFields"] = json!([
                {"manager": "tandem", "operation": "Apply", "apiVersion": "leaderworkerset.x-k8s.io/v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:leaderWorkerTemplate": {"f:workerTemplate": {
                    "f:spec": {"f:containers": {"k:{\"name\":\"vllm\"}": {"f:image": {}, "f:env": {
                        "k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}},
                        "k:{\"name\":\"B\"}": {".": {}, "f:name": {}, "f:value": {}}}}}}}}}}},
                {"manager": "policy-engine", "operation": "Apply", "apiVersion": "leaderworkerset.x-k8s.io/v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {}}
            ]);
        }
    }
    // The user drops B from the role template.
    for object in &mut world {
        if object["kind"] == "InferenceService" {
            object["spec"]["roles"][0]["template"]["spec"]["containers"][0]["env"] =
                json!([{"name": "A", "value": "1"}]);
        }
    }
    let rendered = render(&world);
    let sets = applied(&rendered, "LeaderWorkerSet");
    assert_eq!(sets.len(), 1, "{:#}", rendered["apply"]);
    let template = &sets[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"];
    let containers = template["spec"]["containers"]
        .as_array()
        .expect("containers");
    let env: Vec<&str> = containers[0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        env.contains(&"A") && env.contains(&"POLICY_INJECTED"),
        "{env:?} in {:#}",
        sets[0]["metadata"]
    );
    assert!(
        !env.contains(&"B"),
        "B was Tandem's and is no longer wanted: {env:?}"
    );
    assert!(
        containers.iter().any(|c| c["name"] == "policy-sidecar"),
        "{template:#}"
    );
    assert_eq!(
        template["metadata"]["labels"]["policy.example.com/team"],
        "ml"
    );
}
