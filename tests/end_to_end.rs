//! Named end-to-end scenarios: the real `tandem serve` binary against the
//! in-memory API server (`tests/common/fake_api`), which calls Tandem's
//! webhooks on writes, runs a minimal LeaderWorkerSet controller, collects
//! garbage and deletes namespaces as Kubernetes does. Pods become ready when
//! a scenario says so. Each scenario asserts its end state, then that the
//! API server sees no write (but the leader Lease's renewals) for 10 s.
//! None of this ran against a real cluster.

mod common;

use common::fake_api::FakeApi;
use common::running::{Running, eventually, quiet_for};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

const IS: &str = "fusioninfer.io/v1alpha1";
const LWS: &str = "leaderworkerset.x-k8s.io/v1";

fn example(path: &str) -> Value {
    let mut object = common::yaml_documents(&common::repo_path(path)).remove(0);
    object["metadata"]["namespace"] = json!("default");
    object
}

async fn create(fake: &FakeApi, object: &Value) {
    let (group, version) = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap();
    let kind = object["kind"].as_str().unwrap();
    let resource =
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, kind));
    let api: Api<DynamicObject> = Api::namespaced_with(fake.client(), "default", &resource);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object.clone()).unwrap(),
    )
    .await
    .unwrap_or_else(|e| panic!("creating {kind}: {e}"));
}

fn condition(object: &Value, kind: &str) -> Option<String> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn story_4_is_deployed_becomes_ready_and_then_nothing_is_written() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let tandem = Running::start(&fake, "tandem-a").await;
    let service = example("examples/inferenceservice/story4-prefill-decode-multinode.yaml");
    create(&fake, &service).await;

    // One LeaderWorkerSet per replica: prefill 1 × 2 nodes, decode 2 × 4.
    eventually(&tandem, 30, "three LeaderWorkerSets", || {
        fake.list(LWS, "LeaderWorkerSet", "default").len() == 3
    })
    .await;
    eventually(
        &tandem,
        30,
        "ten pods from the LeaderWorkerSet controller",
        || fake.list("v1", "Pod", "default").len() == 10,
    )
    .await;
    let stored = fake
        .get(IS, "InferenceService", "default", "deepseek-r1-disagg")
        .unwrap();
    assert_eq!(
        condition(&stored, "Ready").as_deref(),
        Some("False"),
        "{stored}"
    );

    // Every pod becomes ready: so does the service.
    fake.set_ready_matching("default", "fusioninfer.io/service=deepseek-r1-disagg", true);
    eventually(&tandem, 30, "the service Ready", || {
        let stored = fake
            .get(IS, "InferenceService", "default", "deepseek-r1-disagg")
            .unwrap();
        condition(&stored, "Ready").as_deref() == Some("True")
    })
    .await;
    let stored = fake
        .get(IS, "InferenceService", "default", "deepseek-r1-disagg")
        .unwrap();
    assert_eq!(
        stored["status"]["components"]["decode"]["readyReplicas"], 2,
        "{stored}"
    );
    assert_eq!(
        fake.list("scheduling.volcano.sh/v1beta1", "PodGroup", "default")
            .len(),
        1,
        "one PodGroup for the gang-scheduled service"
    );
    quiet_for(&fake, &tandem, 10).await;
}
