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
    examples(path, "default").remove(0)
}

/// Every object of an example file, in `namespace`.
fn examples(path: &str, namespace: &str) -> Vec<Value> {
    let mut objects = common::yaml_documents(&common::repo_path(path));
    for object in &mut objects {
        object["metadata"]["namespace"] = json!(namespace);
    }
    objects
}

fn api_of(fake: &FakeApi, object: &Value) -> Api<DynamicObject> {
    let (group, version) = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap_or(("", object["apiVersion"].as_str().unwrap()));
    let kind = object["kind"].as_str().unwrap();
    let resource =
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, kind));
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(fake.client(), namespace, &resource),
        None => Api::all_with(fake.client(), &resource),
    }
}

async fn create(fake: &FakeApi, object: &Value) {
    let kind = object["kind"].as_str().unwrap();
    api_of(fake, object)
        .create(
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

fn replicas(fake: &FakeApi, namespace: &str, service: &str) -> Vec<(String, i64)> {
    let stored = fake
        .get(IS, "InferenceService", namespace, service)
        .unwrap();
    stored["spec"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["replicas"].as_i64().unwrap_or(1),
            )
        })
        .collect()
}

async fn scale(fake: &FakeApi, view: &str, replicas: i64) -> Result<(), kube::Error> {
    let views: Api<tandem::api::ScaleView> = Api::namespaced(fake.client(), "default");
    views
        .patch_scale(
            view,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_of_a_view_reaches_the_roles_and_a_strict_view_refuses_out_of_range() {
    let fake = FakeApi::new();
    let tandem = Running::start(&fake, "tandem-a").await;
    let mut objects = examples("examples/scaleview/decode-ondemand-spot.yaml", "default");
    for object in &objects {
        create(&fake, object).await;
    }
    eventually(&tandem, 30, "the view locks its roles", || {
        let stored = fake
            .get(IS, "InferenceService", "default", "spot-decode")
            .unwrap();
        stored["status"]["scaleViews"]
            .as_array()
            .is_some_and(|l| !l.is_empty())
    })
    .await;

    // `kubectl scale scaleview/spot-decode-sv --replicas=4`: 2 on demand, 2 spot.
    scale(&fake, "spot-decode-sv", 4).await.unwrap();
    eventually(&tandem, 30, "decode 2 on demand, 2 spot", || {
        replicas(&fake, "default", "spot-decode")
            == [
                ("prefill".into(), 1),
                ("decode-ondemand".into(), 2),
                ("decode-spot".into(), 2),
            ]
    })
    .await;
    quiet_for(&fake, &tandem, 10).await;

    // A strict view refuses a /scale beyond its range, in the API server's words.
    let view = objects.pop().unwrap();
    assert_eq!(view["kind"], "ScaleView");
    let mut strict = view.clone();
    strict["spec"]["strict"] = json!(true);
    strict["spec"]["scalePolicy"][1]["constraints"] = json!({"max": 3});
    let views = api_of(&fake, &view);
    let stored = views.get("spot-decode-sv").await.unwrap();
    strict["metadata"]["resourceVersion"] = json!(stored.metadata.resource_version);
    views
        .replace(
            "spot-decode-sv",
            &PostParams::default(),
            &serde_json::from_value(strict).unwrap(),
        )
        .await
        .unwrap();
    let refused = scale(&fake, "spot-decode-sv", 9).await.unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("expected a denial, got {refused}");
    };
    assert!(
        status.message.starts_with(
            "admission webhook \"validate.scaleviews.fusioninfer.io\" denied the request:"
        ),
        "{}",
        status.message
    );
    assert_eq!(
        replicas(&fake, "default", "spot-decode")[1..],
        [("decode-ondemand".into(), 2), ("decode-spot".into(), 2)],
        "nothing moved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_namespace_with_a_service_its_view_and_a_scaling_group_leaves_nothing() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let tandem = Running::start(&fake, "tandem-a").await;
    create(
        &fake,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
    )
    .await;
    for path in [
        "examples/scaleview/decode-ondemand-spot.yaml",
        "examples/resourcescalinggroup/prefill-decode-ratio.yaml",
    ] {
        for object in examples(path, "team") {
            create(&fake, &object).await;
        }
    }
    eventually(
        &tandem,
        30,
        "the view holds its finalizer and its lock",
        || {
            let view = fake.get(IS, "ScaleView", "team", "spot-decode-sv").unwrap();
            let service = fake
                .get(IS, "InferenceService", "team", "spot-decode")
                .unwrap();
            view["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
                && service["status"]["scaleViews"]
                    .as_array()
                    .is_some_and(|l| !l.is_empty())
        },
    )
    .await;
    eventually(&tandem, 30, "LeaderWorkerSets", || {
        !fake.list(LWS, "LeaderWorkerSet", "team").is_empty()
    })
    .await;

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fake.client());
    namespaces
        .delete("team", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually(
        &tandem,
        30,
        "the namespace and everything in it gone",
        || fake.get("v1", "Namespace", "", "team").is_none(),
    )
    .await;
    for (api_version, kind) in [
        (IS, "InferenceService"),
        (IS, "ScaleView"),
        ("resourcescalinggroup.com/v1", "ResourceScalingGroup"),
        (LWS, "LeaderWorkerSet"),
        ("v1", "Pod"),
    ] {
        assert!(
            fake.list(api_version, kind, "team").is_empty(),
            "{kind} left in team"
        );
    }
    quiet_for(&fake, &tandem, 10).await;
}
