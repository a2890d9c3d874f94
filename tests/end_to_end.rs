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
    eventually(
        &tandem,
        30,
        "the service not ready while its pods start",
        || {
            let stored = fake
                .get(IS, "InferenceService", "default", "deepseek-r1-disagg")
                .unwrap();
            condition(&stored, "Ready").as_deref() == Some("False")
        },
    )
    .await;

    // Every pod becomes ready: so does the service.
    all_pods_ready(&fake, &tandem).await;
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

/// Makes every pod of story 4 ready, and waits for the service to say so.
async fn all_pods_ready(fake: &FakeApi, tandem: &Running) {
    fake.set_ready_matching("default", "fusioninfer.io/service=deepseek-r1-disagg", true);
    eventually(tandem, 30, "the service Ready", || {
        let stored = fake
            .get(IS, "InferenceService", "default", "deepseek-r1-disagg")
            .unwrap();
        condition(&stored, "Ready").as_deref() == Some("True")
    })
    .await;
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

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": format!("{name}:v1")}]}}}})
}

fn deployment_replicas(fake: &FakeApi, name: &str) -> Option<i64> {
    fake.get("apps/v1", "Deployment", "default", name)?["spec"]["replicas"].as_i64()
}

async fn scale_deployment(fake: &FakeApi, name: &str, replicas: i64) {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(fake.client(), "default");
    deployments
        .patch_scale(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// Creates the Deployments `(name, replicas)` and an InplaceScaling group
/// `pd-pool` whose Source is `router` and whose Targets follow it at
/// `(name, ratio)`.
async fn follow_router(fake: &FakeApi, deployments: &[(&str, i64)], targets: &[(&str, Value)]) {
    for (name, replicas) in deployments {
        create(fake, &deployment(name, *replicas)).await;
    }
    let mut resources =
        vec![json!({"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"})];
    let mut bindings = vec![json!({"name": "router", "role": "Source"})];
    for (name, ratio) in targets {
        resources.push(json!({"name": name, "apiVersion": "apps/v1", "kind": "Deployment"}));
        bindings.push(json!({"name": name, "role": "Target", "ratio": ratio}));
    }
    create(
        fake,
        &json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
            "metadata": {"name": "pd-pool", "namespace": "default"},
            "spec": {"targetResources": resources,
             "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": bindings}}}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_scaling_the_source_moves_the_targets_and_a_hand_edit_is_set_back() {
    let fake = FakeApi::new();
    let tandem = Running::start(&fake, "tandem-a").await;
    follow_router(
        &fake,
        &[("router", 1), ("prefill", 1), ("decode", 2)],
        &[("prefill", json!(1)), ("decode", json!("2"))],
    )
    .await;

    // What an HPA does: a /scale write on the Source.
    scale_deployment(&fake, "router", 3).await;
    eventually(&tandem, 30, "prefill 3, decode 6", || {
        deployment_replicas(&fake, "prefill") == Some(3)
            && deployment_replicas(&fake, "decode") == Some(6)
    })
    .await;

    // A Target changed by hand is set back.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(fake.client(), "default");
    deployments
        .patch(
            "decode",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually(&tandem, 30, "decode back at 6", || {
        deployment_replicas(&fake, "decode") == Some(6)
    })
    .await;
    // The Event follows the patch that set it back: wait for it too.
    eventually(&tandem, 10, "a DriftRepaired Event", || {
        fake.event_notes()
            .iter()
            .any(|n| n.starts_with("DriftRepaired:"))
    })
    .await;
    quiet_for(&fake, &tandem, 10).await;
}

async fn scale_group(fake: &FakeApi, replicas: i64) {
    let groups: Api<tandem::api::ResourceScalingGroup> = Api::namespaced(fake.client(), "default");
    groups
        .patch_scale(
            "pd-cluster",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

fn deployment_names(fake: &FakeApi) -> Vec<String> {
    let mut names: Vec<String> = fake
        .list("apps/v1", "Deployment", "default")
        .iter()
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_replication_goes_from_one_group_to_three_and_back_to_two() {
    let fake = FakeApi::new();
    let tandem = Running::start(&fake, "tandem-a").await;
    for (name, replicas) in [("prefill", 1), ("decode", 2)] {
        create(&fake, &deployment(name, replicas)).await;
    }
    create(
        &fake,
        &json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
            "metadata": {"name": "pd-cluster", "namespace": "default"},
            "spec": {"targetResources": [
                {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
             "scalingStrategy": {"type": "GroupReplication", "groupConfig": {
                "groupNamePrefix": "inference-unit", "replicas": 1,
                "scaleDown": {"policy": "Ordered", "candidates": ["inference-unit-01"]}}}}}),
    )
    .await;
    scale_group(&fake, 3).await;
    eventually(&tandem, 30, "groups 01 and 02 cloned", || {
        deployment_names(&fake)
            == [
                "decode",
                "inference-unit-01-decode",
                "inference-unit-01-prefill",
                "inference-unit-02-decode",
                "inference-unit-02-prefill",
                "prefill",
            ]
    })
    .await;
    let clone = fake
        .get(
            "apps/v1",
            "Deployment",
            "default",
            "inference-unit-02-decode",
        )
        .unwrap();
    assert_eq!(
        clone["metadata"]["ownerReferences"][0]["kind"],
        "ResourceScalingGroup"
    );

    // Down to two: the candidate goes first, even though it is not the newest.
    scale_group(&fake, 2).await;
    eventually(&tandem, 30, "group 01 removed", || {
        deployment_names(&fake)
            == [
                "decode",
                "inference-unit-02-decode",
                "inference-unit-02-prefill",
                "prefill",
            ]
    })
    .await;
    quiet_for(&fake, &tandem, 10).await;
}

fn leader_worker_sets(fake: &FakeApi, namespace: &str) -> Vec<String> {
    let mut names: Vec<String> = fake
        .list(LWS, "LeaderWorkerSet", namespace)
        .iter()
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

async fn set_role_replicas(fake: &FakeApi, service: &str, role: usize, replicas: i64) {
    let services: Api<tandem::api::InferenceService> = Api::namespaced(fake.client(), "default");
    services
        .patch(
            service,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": format!("/spec/roles/{role}/replicas"), "value": replicas}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binpack_scale_down_removes_the_replicas_cheapest_to_lose() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let tandem = Running::start(&fake, "tandem-a").await;
    let mut service = example("examples/inferenceservice/story1-monolithic.yaml");
    let name = service["metadata"]["name"].as_str().unwrap().to_owned();
    let role = service["spec"]["roles"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    service["spec"]["roles"][0]["replicas"] = json!(4);
    service["spec"]["roles"][0]["scaleDown"] = json!({"policy": "Binpack"});
    // A short drain (issue 15): the two go out of traffic first.
    service["spec"]["roles"][0]["drain"] = json!({"seconds": 3});
    create(&fake, &service).await;
    eventually(&tandem, 30, "four replicas with their pods", || {
        fake.list("v1", "Pod", "default").len() == 4
    })
    .await;
    fake.set_ready_matching("default", &format!("fusioninfer.io/service={name}"), true);

    // The pods' deletion costs, as an operator would set them: replicas 1
    // and 2 are the cheapest to lose.
    for (index, cost) in [(0, 100), (1, 50), (2, 0), (3, 75)] {
        let pod = fake
            .list("v1", "Pod", "default")
            .into_iter()
            .find(|p| {
                p["metadata"]["labels"]["fusioninfer.io/replica-index"]
                    == index.to_string().as_str()
            })
            .unwrap_or_else(|| panic!("a pod of replica {index}"));
        let pod_name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        fake.edit("v1", "Pod", "default", &pod_name, |p| {
            p["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] =
                json!(cost.to_string());
        });
    }
    set_role_replicas(&fake, &name, 0, 2).await;
    eventually(&tandem, 30, "replicas 1 and 2 out of traffic first", || {
        let mut draining: Vec<String> = fake
            .list("v1", "Pod", "default")
            .iter()
            .filter(|p| p["metadata"]["labels"]["fusioninfer.io/traffic"] == "draining")
            .map(|p| {
                p["metadata"]["labels"]["fusioninfer.io/replica-index"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        draining.sort();
        draining == ["1", "2"] && leader_worker_sets(&fake, "default").len() == 4
    })
    .await;
    eventually(&tandem, 30, "replicas 0 and 3 kept", || {
        leader_worker_sets(&fake, "default")
            == [format!("{name}-{role}-0"), format!("{name}-{role}-3")]
    })
    .await;
    quiet_for(&fake, &tandem, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leader_dies_the_other_replica_takes_over_and_finishes_the_scale() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let mut first = Running::start(&fake, "tandem-a").await;
    let service = example("examples/inferenceservice/story1-monolithic.yaml");
    let name = service["metadata"]["name"].as_str().unwrap().to_owned();
    create(&fake, &service).await;
    eventually(&first, 30, "the first replica deploys the service", || {
        leader_worker_sets(&fake, "default").len() == 1
    })
    .await;
    let second = Running::start(&fake, "tandem-b").await;
    let lease = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "tandem-system",
            "tandem-controller",
        )
        .expect("the leader Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "tandem-a");

    // A scale the leader cannot finish (its LeaderWorkerSet writes fail),
    // and then it dies.
    fake.refuse_writes("leaderworkersets", 500);
    fake.take_calls();
    set_role_replicas(&fake, &name, 0, 3).await;
    let mut tried = false;
    eventually(&first, 30, "the leader tried to create a replica", || {
        tried |= fake
            .take_calls()
            .iter()
            .any(|c| c.is_write() && c.path.contains("/leaderworkersets/"));
        tried
    })
    .await;
    first.kill();
    fake.allow_writes("leaderworkersets");
    assert_eq!(leader_worker_sets(&fake, "default").len(), 1, "half done");
    eventually(&second, 60, "the new leader finished the scale", || {
        leader_worker_sets(&fake, "default").len() == 3
    })
    .await;
    let lease = fake
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "tandem-system",
            "tandem-controller",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "tandem-b");
    quiet_for(&fake, &second, 10).await;
}

fn decode_sets(fake: &FakeApi) -> Vec<Value> {
    fake.list(LWS, "LeaderWorkerSet", "default")
        .into_iter()
        .filter(|l| l["metadata"]["labels"]["fusioninfer.io/role-name"] == "decode")
        .collect()
}

fn image_of(set: &Value) -> &str {
    set["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_replaces_one_decode_replica_at_a_time_and_leaves_prefill_alone() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let tandem = Running::start(&fake, "tandem-a").await;
    let service = example("examples/inferenceservice/story4-prefill-decode-multinode.yaml");
    create(&fake, &service).await;
    eventually(&tandem, 30, "ten pods", || {
        fake.list("v1", "Pod", "default").len() == 10
    })
    .await;
    all_pods_ready(&fake, &tandem).await;
    let prefill = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-disagg-prefill-0",
        )
        .unwrap();

    // A new decode image, under the default RollingUpdate (maxUnavailable 1,
    // maxSurge 0).
    let services: Api<tandem::api::InferenceService> = Api::namespaced(fake.client(), "default");
    services
        .patch(
            "deepseek-r1-disagg",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "replace",
                    "path": "/spec/roles/1/template/spec/containers/0/image",
                    "value": "vllm/vllm-openai:v0.11.1"}]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();

    // Pods of a replaced replica become ready when the test says so; at every
    // look, at least one decode replica serves and no third one exists.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(90);
    let mut most_replaced_at_once = 0;
    loop {
        let sets = decode_sets(&fake);
        assert!(sets.len() <= 2, "no surge with maxSurge 0: {}", sets.len());
        let ready = sets
            .iter()
            .filter(|s| s["status"]["readyReplicas"] == 1)
            .count();
        let moved: Vec<&Value> = sets
            .iter()
            .filter(|s| image_of(s) == "vllm/vllm-openai:v0.11.1")
            .collect();
        let in_flight = moved
            .iter()
            .filter(|s| s["status"]["readyReplicas"] != 1)
            .count();
        most_replaced_at_once = most_replaced_at_once.max(in_flight);
        assert!(
            ready >= 1,
            "a decode replica serves throughout the rollout; tandem's log:\n{}",
            tandem.log()
        );
        if moved.len() == 2 && in_flight == 0 {
            break;
        }
        for set in moved {
            let name = set["metadata"]["name"].as_str().unwrap();
            fake.set_ready_matching(
                "default",
                &format!("leaderworkerset.sigs.k8s.io/name={name}"),
                true,
            );
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rollout did not finish in 90 s; tandem's log:\n{}",
            tandem.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(most_replaced_at_once, 1, "one replica out at a time");
    let prefill_after = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-disagg-prefill-0",
        )
        .unwrap();
    assert_eq!(
        prefill_after["metadata"]["resourceVersion"], prefill["metadata"]["resourceVersion"],
        "prefill's LeaderWorkerSet is never written"
    );
    eventually(
        &tandem,
        30,
        "every decode replica updated and ready",
        || {
            let stored = fake
                .get(IS, "InferenceService", "default", "deepseek-r1-disagg")
                .unwrap();
            stored["status"]["components"]["decode"]["updatedReadyReplicas"] == 2
        },
    )
    .await;
    quiet_for(&fake, &tandem, 10).await;
    // On /metrics: both decode replicas replaced in place, once each, under
    // the role's scale-down policy; none created or deleted for the rollout.
    let (_, metrics) = common::probe(tandem.probes, "/metrics").await.unwrap();
    let decided = |decision: &str| {
        format!(
            r#"tandem_decisions_total{{controller="InferenceService",decision="{decision}",policy="Ordered"}}"#
        )
    };
    assert!(
        metrics
            .lines()
            .any(|l| l == format!("{} 2", decided("replica_replaced"))),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == format!("{} 3", decided("replica_created"))),
        "the three replicas of the first deployment: {metrics}"
    );
    assert!(!metrics.contains(&decided("replica_deleted")), "{metrics}");
}

/// The reads among `calls` other than Tandem's leader Lease (renewed by
/// GET and PATCH) and API discovery: what a controller's reconcile would
/// send if it read the API server instead of its caches.
fn reads_of_the_world(calls: &[common::fake_api::Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| !c.is_write())
        .filter(|c| !c.path.contains("/leases/"))
        .filter(|c| {
            let parts: Vec<&str> = c.path.trim_matches('/').split('/').collect();
            !matches!(parts.as_slice(), ["api", _] | ["apis", _, _])
        })
        .map(|c| c.line())
        .collect()
}

/// Issue 13: every kind a service creates is watched, so a child deleted
/// by hand is back within seconds, not at the 5-minute resync; a pod's
/// readiness reaches the status; and neither sends a LIST or GET: the
/// reconciles read the caches.
#[tokio::test]
async fn a_child_deleted_by_hand_is_recreated_and_pod_readiness_reaches_status_from_the_caches() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let tandem = Running::start(&fake, "tandem-a").await;
    let service = example("examples/inferenceservice/story4-prefill-decode-multinode.yaml");
    create(&fake, &service).await;
    eventually(&tandem, 30, "three LeaderWorkerSets", || {
        fake.list(LWS, "LeaderWorkerSet", "default").len() == 3
    })
    .await;
    all_pods_ready(&fake, &tandem).await;
    fake.take_calls();

    // The PodGroup, deleted by hand.
    let group = fake
        .list("scheduling.volcano.sh/v1beta1", "PodGroup", "default")
        .remove(0);
    let name = group["metadata"]["name"].as_str().unwrap().to_owned();
    api_of(&fake, &group)
        .delete(&name, &Default::default())
        .await
        .unwrap();
    eventually(&tandem, 10, "the PodGroup recreated", || {
        fake.get(
            "scheduling.volcano.sh/v1beta1",
            "PodGroup",
            "default",
            &name,
        )
        .is_some()
    })
    .await;

    // A decode pod stops being ready: the status says so.
    let pod = fake
        .list("v1", "Pod", "default")
        .into_iter()
        .find(|p| p["metadata"]["labels"]["fusioninfer.io/role-name"] == "decode")
        .unwrap();
    fake.set_ready("default", pod["metadata"]["name"].as_str().unwrap(), false);
    eventually(&tandem, 10, "one decode replica not ready", || {
        let stored = fake
            .get(IS, "InferenceService", "default", "deepseek-r1-disagg")
            .unwrap();
        stored["status"]["components"]["decode"]["readyReplicas"] == 1
    })
    .await;
    let calls = fake.take_calls();
    assert_eq!(
        reads_of_the_world(&calls),
        Vec::<String>::new(),
        "the reconciles read the caches: {:#?}",
        calls.iter().map(|c| c.line()).collect::<Vec<_>>()
    );
    quiet_for(&fake, &tandem, 10).await;
}

/// Issue 13: a foreign Deployment bound by an InplaceScaling group, scaled
/// by hand, is set back at once (Deployments are cached, trimmed to their
/// replicas, and mapped to the groups that name them), reading nothing.
#[tokio::test]
async fn a_target_deployment_scaled_by_hand_is_set_back_without_reading_the_api_server() {
    let fake = FakeApi::new();
    let tandem = Running::start(&fake, "tandem-a").await;
    follow_router(
        &fake,
        &[("router", 2), ("decode", 1)],
        &[("decode", json!(2))],
    )
    .await;
    eventually(&tandem, 30, "decode follows router at 2:1", || {
        deployment_replicas(&fake, "decode") == Some(4)
    })
    .await;
    fake.take_calls();

    scale_deployment(&fake, "decode", 1).await;
    eventually(&tandem, 10, "decode set back to 4", || {
        deployment_replicas(&fake, "decode") == Some(4)
    })
    .await;
    let calls = fake.take_calls();
    assert_eq!(
        reads_of_the_world(&calls),
        Vec::<String>::new(),
        "the reconciles read the caches: {:#?}",
        calls.iter().map(|c| c.line()).collect::<Vec<_>>()
    );
    quiet_for(&fake, &tandem, 10).await;
}
