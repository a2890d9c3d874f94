//! Named end-to-end scenarios against a real control plane
//! (`tests/common/control_plane.rs`: etcd, kube-apiserver,
//! kube-controller-manager and the LeaderWorkerSet manager, built from
//! upstream Go modules), with the real `tandem serve` binary under exactly
//! the RBAC of `manifests/rbac.yaml`. Each scenario has a namespace of its
//! own and checks its end state, then the invariants of
//! `tests/common/scenario.rs` (no permission refused, no write that changes
//! nothing, no serving role left without a ready replica, quiet after
//! settling). No kubelet runs: a stand-in marks pods ready.

mod common;

use std::sync::Arc;

use common::scenario::{IS, LWS, Scenario};
use serde_json::Value;

fn example(path: &str) -> Value {
    common::yaml_documents(&common::repo_path(path)).remove(0)
}

fn condition(object: &Value, kind: &str) -> Option<String> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

async fn wait_ready(scenario: &Scenario, service: &str) -> Value {
    scenario
        .eventually(90, &format!("InferenceService {service} Ready"), || async {
            let stored = scenario.get(IS, "InferenceService", service).await;
            match stored {
                Some(s) if condition(&s, "Ready").as_deref() == Some("True") => Ok(s),
                other => Err(format!(
                    "{:#}",
                    other.map(|s| s["status"].clone()).unwrap_or_default()
                )),
            }
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_4_is_deployed_by_the_real_controllers_and_becomes_ready() {
    let Some(mut scenario) = Scenario::start("e2e-story4").await else {
        return;
    };
    scenario.kubelet(Arc::new(|_| true));
    let service = example("examples/inferenceservice/story4-prefill-decode-multinode.yaml");
    scenario
        .create(&service)
        .await
        .expect("story 4 is admitted");

    let stored = wait_ready(&scenario, "deepseek-r1-disagg").await;
    assert_eq!(
        stored["status"]["components"]["decode"]["readyReplicas"], 2,
        "{stored:#}"
    );
    assert_eq!(
        scenario.names(LWS, "LeaderWorkerSet").await,
        [
            "deepseek-r1-disagg-decode-0",
            "deepseek-r1-disagg-decode-1",
            "deepseek-r1-disagg-prefill-0"
        ]
    );
    // The LeaderWorkerSet controller made the pods: 1 × 2 + 2 × 4.
    assert_eq!(scenario.names("v1", "Pod").await.len(), 10);
    assert_eq!(
        scenario
            .names("scheduling.volcano.sh/v1beta1", "PodGroup")
            .await,
        ["deepseek-r1-disagg"]
    );
    scenario.assert_quiet(10, "deepseek-r1-disagg").await;
    scenario.assert_floor_held();
}
