//! Seed 003's four stories, rendered end to end: the LeaderWorkerSets and
//! PodGroup the seed describes (and DESIGN.md §1.1 where it decides otherwise).

use harness::{repo_path, yaml_documents};
use serde_json::{Value, json};

/// Renders a story, optionally with a gang policy, and returns the objects.
fn render(file: &str, gang_policy: Option<&str>) -> Vec<Value> {
    let mut service = yaml_documents(&repo_path(file)).remove(0);
    service["metadata"]["uid"] = json!("story-uid");
    if let Some(policy) = gang_policy {
        service["spec"]["schedulingStrategy"] = json!({"gangPolicy": policy});
    }
    let rendered =
        tandem::render::render(vec![service], &Default::default()).expect("the story renders");
    rendered.apply
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", names(objects)))
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

fn lws_names(objects: &[Value]) -> Vec<&str> {
    objects
        .iter()
        .filter(|o| o["kind"] == "LeaderWorkerSet")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect()
}

/// The seed's label set on an LWS and its pod templates.
fn assert_labels(lws: &Value, service: &str, component: &str, role: &str, index: &str) {
    let labels = &lws["metadata"]["labels"];
    assert_eq!(labels["fusioninfer.io/service"], service);
    assert_eq!(labels["fusioninfer.io/component-type"], component);
    assert_eq!(labels["fusioninfer.io/role-name"], role);
    assert_eq!(labels["fusioninfer.io/replica-index"], index);
    assert!(
        labels["fusioninfer.io/revision"]
            .as_str()
            .is_some_and(|r| r.len() == 10)
    );
    for template in ["leaderTemplate", "workerTemplate"] {
        if let Some(pod) = lws["spec"]["leaderWorkerTemplate"].get(template) {
            assert_eq!(
                pod["metadata"]["labels"]["fusioninfer.io/replica-index"], index,
                "{template}"
            );
            assert_eq!(
                pod["metadata"]["labels"]["fusioninfer.io/service"], service,
                "{template}"
            );
        }
    }
    assert_eq!(
        lws["metadata"]["ownerReferences"][0]["kind"],
        "InferenceService"
    );
}

fn assert_gang_annotations(lws: &Value, service: &str, task: &str) {
    for template in ["leaderTemplate", "workerTemplate"] {
        if let Some(pod) = lws["spec"]["leaderWorkerTemplate"].get(template) {
            assert_eq!(
                pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], service,
                "{template}"
            );
            assert_eq!(
                pod["metadata"]["annotations"]["volcano.sh/task-spec"], task,
                "{template}"
            );
            assert_eq!(pod["spec"]["schedulerName"], "volcano", "{template}");
        }
    }
}

#[test]
fn story_1_monolithic_is_one_single_pod_lws_without_gang() {
    let objects = render("examples/seeds/story1-monolithic.yaml", None);
    assert_eq!(lws_names(&objects), ["qwen-inference-inference-0"]);
    let lws = named(&objects, "LeaderWorkerSet", "qwen-inference-inference-0");
    assert_eq!(lws["spec"]["replicas"], 1);
    assert_eq!(lws["spec"]["leaderWorkerTemplate"]["size"], 1);
    assert!(
        lws["spec"]["leaderWorkerTemplate"]
            .get("leaderTemplate")
            .is_none()
    );
    assert_labels(lws, "qwen-inference", "worker", "inference", "0");
    let pod = &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"];
    assert!(
        pod["metadata"].get("annotations").is_none(),
        "no gang annotations"
    );
    assert!(
        pod["spec"].get("schedulerName").is_none(),
        "the default scheduler"
    );
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        json!(["--model", "Qwen/Qwen3-8B"]),
        "the template as written"
    );
    assert!(
        !objects.iter().any(|o| o["kind"] == "PodGroup"),
        "single-node monolithic: no gang scheduling"
    );
}

#[test]
fn story_2_prefill_decode_is_six_lws_in_one_pod_group() {
    let objects = render("examples/seeds/story2-prefill-decode.yaml", None);
    let service = "qwen-inference-service";
    assert_eq!(
        lws_names(&objects),
        [
            "qwen-inference-service-decode-0",
            "qwen-inference-service-decode-1",
            "qwen-inference-service-decode-2",
            "qwen-inference-service-decode-3",
            "qwen-inference-service-prefill-0",
            "qwen-inference-service-prefill-1"
        ]
    );
    for (role, component, count) in [("prefill", "prefiller", 2), ("decode", "decoder", 4)] {
        for i in 0..count {
            let lws = named(
                &objects,
                "LeaderWorkerSet",
                &format!("{service}-{role}-{i}"),
            );
            assert_eq!(lws["spec"]["leaderWorkerTemplate"]["size"], 1);
            assert_labels(lws, service, component, role, &i.to_string());
            assert_gang_annotations(lws, service, &format!("{role}-{i}"));
        }
    }
    // DESIGN.md §1.1: one prefill and one decode replica together.
    let group = named(&objects, "PodGroup", service);
    assert_eq!(group["spec"]["minMember"], 2);
    // The seed's "PodGroup Management" layout with the TaskMember policy.
    let seed = render(
        "examples/seeds/story2-prefill-decode.yaml",
        Some("TaskMember"),
    );
    let group = named(&seed, "PodGroup", service);
    assert_eq!(group["spec"]["minMember"], 6);
    assert_eq!(
        group["spec"]["minTaskMember"],
        json!({"prefill-0": 1, "prefill-1": 1, "decode-0": 1, "decode-1": 1, "decode-2": 1, "decode-3": 1})
    );
}

#[test]
fn story_3_multinode_is_two_lws_of_four_nodes() {
    let objects = render("examples/seeds/story3-multinode.yaml", Some("TaskMember"));
    let service = "deepseek-r1-inference";
    assert_eq!(
        lws_names(&objects),
        [
            "deepseek-r1-inference-inference-0",
            "deepseek-r1-inference-inference-1"
        ]
    );
    for i in 0..2 {
        let lws = named(
            &objects,
            "LeaderWorkerSet",
            &format!("{service}-inference-{i}"),
        );
        assert_eq!(lws["spec"]["replicas"], 1, "always 1 in per-replica mode");
        assert_eq!(lws["spec"]["leaderWorkerTemplate"]["size"], 4);
        assert_labels(lws, service, "worker", "inference", &i.to_string());
        assert_gang_annotations(lws, service, &format!("inference-{i}"));
        let leader =
            &lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0];
        assert_eq!(
            leader["args"],
            json!([
                "ray start --head --port=6379 && vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 32 --distributed-executor-backend ray"
            ])
        );
        let worker =
            &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0];
        assert_eq!(
            worker["args"],
            json!(["ray start --address=$LWS_LEADER_ADDRESS:6379 --block"])
        );
    }
    // The seed's Example 2 PodGroup.
    let group = named(&objects, "PodGroup", service);
    assert_eq!(group["spec"]["minMember"], 8);
    assert_eq!(
        group["spec"]["minTaskMember"],
        json!({"inference-0": 4, "inference-1": 4})
    );
}

#[test]
fn story_4_prefill_decode_multinode_matches_the_seed_and_design() {
    let service = "deepseek-r1-disagg";
    let objects = render("examples/seeds/story4-prefill-decode-multinode.yaml", None);
    assert_eq!(
        lws_names(&objects),
        [
            "deepseek-r1-disagg-decode-0",
            "deepseek-r1-disagg-decode-1",
            "deepseek-r1-disagg-prefill-0"
        ]
    );
    let prefill = named(&objects, "LeaderWorkerSet", "deepseek-r1-disagg-prefill-0");
    assert_eq!(prefill["spec"]["leaderWorkerTemplate"]["size"], 2);
    assert_labels(prefill, service, "prefiller", "prefill", "0");
    assert_gang_annotations(prefill, service, "prefill-0");
    for i in 0..2 {
        let decode = named(
            &objects,
            "LeaderWorkerSet",
            &format!("{service}-decode-{i}"),
        );
        assert_eq!(decode["spec"]["leaderWorkerTemplate"]["size"], 4);
        assert_gang_annotations(decode, service, &format!("decode-{i}"));
    }
    // DESIGN.md §1.1 (SubGroup, the default): the minimal viable set is one
    // prefill replica (2 pods) and one decode replica (4 pods): 48 GPUs.
    let group = named(&objects, "PodGroup", service);
    assert_eq!(group["spec"]["minMember"], 6);
    assert_eq!(group["spec"]["minResources"]["nvidia.com/gpu"], "48");
    let policies = group["spec"]["subGroupPolicy"].as_array().unwrap();
    assert_eq!(policies.len(), 2);
    for policy in policies {
        assert_eq!(
            policy["matchLabelKeys"],
            json!(["fusioninfer.io/replica-index"])
        );
        assert_eq!(policy["minSubGroups"], 1);
    }
    // The seed's literal layout (TaskMember): 2 + 4 + 4 = 10, all or nothing.
    let seed = render(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
        Some("TaskMember"),
    );
    let group = named(&seed, "PodGroup", service);
    assert_eq!(group["spec"]["minMember"], 10);
    assert_eq!(
        group["spec"]["minTaskMember"],
        json!({"prefill-0": 2, "decode-0": 4, "decode-1": 4})
    );
}

#[test]
fn the_status_of_a_fresh_story_says_pending() {
    let objects = render("examples/seeds/story4-prefill-decode-multinode.yaml", None);
    let service = named(&objects, "InferenceService", "deepseek-r1-disagg");
    let status = &service["status"];
    assert_eq!(status["ready"], "0/3");
    assert_eq!(status["components"]["decode"]["totalPods"], 8);
    assert_eq!(status["components"]["decode"]["nodesPerReplica"], 4);
    assert_eq!(status["components"]["prefill"]["phase"], "Pending");
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "False");
    assert_eq!(
        ready["message"],
        "prefill: 0/1 replicas ready (Pending); decode: 0/2 replicas ready (Pending)",
        "roles in spec order"
    );
}
