//! Issue 15 through `tandem render --now`: a scale-down shows the drain step
//! (the pods' traffic label and the drain's deadline), deletes nothing, and
//! the same world rendered after the deadline deletes the replica.

use harness::repo_path;
use serde_json::{Value, json};

fn service(replicas: i32) -> Value {
    json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": "qwen", "namespace": "default"},
        "spec": {"roles": [{
            "name": "inference", "componentType": "worker", "replicas": replicas,
            "drain": {"seconds": 120},
            "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]}},
        }]},
    })
}

/// Runs `tandem render` on `world` (a List) at `now`, as JSON.
fn render_at(world: &[Value], now: &str) -> Value {
    let file = std::env::temp_dir().join(format!("tandem-drain-{}-{now}.json", std::process::id()));
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": world})).unwrap(),
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["render", "-f"])
        .arg(&file)
        .args(["--now", now, "-o", "json"])
        .current_dir(repo_path(""))
        .output()
        .unwrap();
    std::fs::remove_file(&file).ok();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn of_kind<'a>(objects: &'a Value, kind: &str) -> Vec<&'a Value> {
    objects
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["kind"] == kind)
        .collect()
}

/// The ready pod LeaderWorkerSet makes from `lws`'s template.
fn pod_of(lws: &Value) -> Value {
    let name = lws["metadata"]["name"].as_str().unwrap();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-0"), "namespace": "default",
            "labels": lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "image": "v"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

#[test]
fn render_shows_the_drain_step_with_its_deadline_then_the_deletion() {
    let created = render_at(&[service(3)], "2026-11-21T10:00:00Z");
    let sets: Vec<Value> = of_kind(&created["apply"], "LeaderWorkerSet")
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(sets.len(), 3);
    for set in &sets {
        let labels = &set["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"];
        assert_eq!(labels["fusioninfer.io/traffic"], "serving");
        assert_eq!(
            set["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["terminationGracePeriodSeconds"],
            120,
            "the grace period covers the drain"
        );
        assert_eq!(
            set["spec"]["leaderWorkerTemplate"]["restartPolicy"],
            "RecreateGroupOnPodRestart"
        );
    }
    let mut world: Vec<Value> = vec![service(2)];
    world.extend(sets.iter().cloned());
    world.extend(sets.iter().map(pod_of));

    let drain = render_at(&world, "2026-11-21T10:05:00Z");
    assert!(
        drain["delete"].as_array().is_none_or(Vec::is_empty),
        "nothing is deleted at the drain step: {}",
        drain["delete"]
    );
    let pods = of_kind(&drain["apply"], "Pod");
    assert_eq!(pods.len(), 1, "{}", drain["apply"]);
    let pod = pods[0];
    assert_eq!(pod["metadata"]["name"], "qwen-inference-2-0");
    assert_eq!(
        pod["metadata"]["labels"]["fusioninfer.io/traffic"],
        "draining"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["fusioninfer.io/drain-started-at"],
        "2026-11-21T10:05:00Z"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["fusioninfer.io/drain-deadline"],
        "2026-11-21T10:07:00Z"
    );
    assert_eq!(
        pod["spec"]["nodeName"], "gpu-1",
        "the rest of the pod stays"
    );
    assert!(of_kind(&drain["apply"], "LeaderWorkerSet").is_empty());
    let status = &of_kind(&drain["apply"], "InferenceService")[0]["status"];
    assert_eq!(status["components"]["inference"]["drainingReplicas"], 1);

    // Its output fed back: before the deadline nothing changes, after it the
    // replica goes.
    for object in drain["apply"].as_array().unwrap() {
        let same = |o: &Value| {
            o["kind"] == object["kind"] && o["metadata"]["name"] == object["metadata"]["name"]
        };
        world.retain(|o| !same(o));
        world.push(object.clone());
    }
    let within = render_at(&world, "2026-11-21T10:06:59Z");
    // (render always shows the service it admitted)
    let written: Vec<&Value> = within["apply"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] != "InferenceService")
        .collect();
    assert!(written.is_empty(), "{written:?}");
    assert_eq!(
        of_kind(&within["apply"], "InferenceService")[0]["status"],
        *status,
        "the status is the same within the drain"
    );
    assert!(
        within["delete"].as_array().is_none_or(Vec::is_empty),
        "{within}"
    );
    let after = render_at(&world, "2026-11-21T10:07:00Z");
    assert_eq!(
        after["delete"],
        json!([{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "namespace": "default", "name": "qwen-inference-2"}]),
        "{after}"
    );
}
