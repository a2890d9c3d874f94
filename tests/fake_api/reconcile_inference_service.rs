//! The InferenceService reconciler against an in-memory API server behind
//! kube-rs's tower-test mock: the exact requests it writes, and none when the
//! world already matches.

use std::sync::Arc;

use harness::fake_api::{EVENTS, FakeApi};
use harness::{repo_path, yaml_documents};
use serde_json::{Value, json};
use tandem::api::InferenceService;
use tandem::reconcile::Context;
use tandem::reconcile::inference_service::reconcile;

const IS: &str = "fusioninfer.io/v1alpha1";
const LWS: &str = "leaderworkerset.x-k8s.io/v1";
const LWS_PATH: &str = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets";
const PDB_PATH: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";

/// Stores a seed story as the API server would after admission.
fn store_story(fake: &FakeApi, file: &str) -> String {
    let object = yaml_documents(&repo_path(file)).remove(0);
    let (admitted, _) = tandem::admission::admit(
        tandem::admission::Kind::InferenceService,
        "default",
        &object,
        None,
        &tandem::admission::lookup::Blind,
    )
    .unwrap();
    let stored = fake.insert(admitted);
    stored["metadata"]["name"].as_str().unwrap().to_owned()
}

async fn reconcile_stored(fake: &FakeApi, ctx: &Arc<Context>, name: &str) {
    let stored = fake
        .get(IS, "InferenceService", "default", name)
        .expect("service stored");
    let service: InferenceService = serde_json::from_value(stored).unwrap();
    fake.caught_up().await;
    reconcile(Arc::new(service), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

fn status_patch(name: &str) -> String {
    format!(
        "PATCH /apis/fusioninfer.io/v1alpha1/namespaces/default/inferenceservices/{name}/status"
    )
}

#[tokio::test]
async fn create_then_nothing_to_write() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            "PATCH /apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/deepseek-r1-inference".to_owned(),
            EVENTS.to_owned(),
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-0"),
            EVENTS.to_owned(),
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-1"),
            EVENTS.to_owned(),
            format!("PATCH {PDB_PATH}/deepseek-r1-inference-inference"),
            EVENTS.to_owned(),
            status_patch(&name),
        ]
    );
    let lws = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-1",
        )
        .unwrap();
    assert_eq!(lws["spec"]["leaderWorkerTemplate"]["size"], 4);
    assert_eq!(
        lws["metadata"]["ownerReferences"][0]["uid"],
        "uid-deepseek-r1-inference"
    );
    let notes = fake.event_notes();
    assert!(notes[0].starts_with("Created: LeaderWorkerSet deepseek-r1-inference-inference-0 created: replica 0 of role inference (1 of 2 replicas, 4 node(s) each"), "{notes:?}");

    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert_eq!(status["ready"], "0/2");
    assert_eq!(status["components"]["inference"]["phase"], "Pending");
    assert_eq!(status["components"]["inference"]["totalPods"], 8);

    // The world now matches the plan: a second reconcile reads the caches
    // and sends nothing.
    reconcile_stored(&fake, &ctx, &name).await;
    let calls = fake.take_calls();
    assert!(
        calls.iter().all(|c| !c.is_write()),
        "writes on an unchanged world: {:?}",
        calls
            .iter()
            .filter(|c| c.is_write())
            .map(|c| c.line())
            .collect::<Vec<_>>()
    );
    assert!(
        calls.is_empty(),
        "no request at all: {:?}",
        calls.iter().map(|c| c.line()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn scale_up_creates_the_lowest_missing_index_and_scale_down_removes_the_highest() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    fake.take_calls();

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(3)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-2"),
            EVENTS.to_owned(),
            // The budget keeps all replicas now but one available: 2 of 3.
            format!("PATCH {PDB_PATH}/deepseek-r1-inference-inference"),
            EVENTS.to_owned(),
            status_patch(&name)
        ]
    );

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(1)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    // The budget first: one replica now (the others have no pod to drain),
    // so none need stay available. Its Event is the same as the scale-up's
    // (object and reason), so it joins that Event's series.
    assert_eq!(
        writes[0],
        format!("PATCH {PDB_PATH}/deepseek-r1-inference-inference")
    );
    assert!(
        writes[1].starts_with("PATCH /apis/events.k8s.io/v1/namespaces/default/events/"),
        "{writes:?}"
    );
    assert_eq!(
        writes[2..],
        [
            format!("DELETE {LWS_PATH}/deepseek-r1-inference-inference-1"),
            EVENTS.to_owned(),
            format!("DELETE {LWS_PATH}/deepseek-r1-inference-inference-2"),
            EVENTS.to_owned(),
            status_patch(&name),
        ]
    );
    let names: Vec<String> = fake
        .list(LWS, "LeaderWorkerSet", "default")
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["deepseek-r1-inference-inference-0"]);
    assert!(fake.event_notes().iter().any(|n| n == "Deleted: LeaderWorkerSet deepseek-r1-inference-inference-2 deleted: role inference is scaled to 1 replica(s); replica 2 is not kept (Ordered: the highest indices go first)"));

    // A gap left by hand is refilled at the lowest index.
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(2)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes()[0],
        format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-1")
    );
}

#[tokio::test]
async fn a_template_change_updates_every_replica_and_a_hand_edit_is_set_back() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    fake.take_calls();
    let revision = |fake: &FakeApi| {
        fake.get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0",
        )
        .unwrap()["metadata"]["labels"]["fusioninfer.io/revision"]
            .clone()
    };
    let before = revision(&fake);

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
            json!("vllm/vllm-openai:v0.12.0");
    });
    reconcile_stored(&fake, &ctx, &name).await;
    // No pod is ready, so no replica serves and RollingUpdate replaces them
    // all at once (spending no maxUnavailable); the status says it rolls.
    assert_eq!(
        fake.take_writes(),
        [
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-0"),
            EVENTS.to_owned(),
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-1"),
            EVENTS.to_owned(),
            status_patch(&name),
        ]
    );
    assert_ne!(revision(&fake), before, "a new revision");
    let lws = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-1",
        )
        .unwrap();
    assert_eq!(
        lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"],
        "vllm/vllm-openai:v0.12.0"
    );

    // Someone scales an LWS by hand: Tandem sets it back.
    fake.edit(
        LWS,
        "LeaderWorkerSet",
        "default",
        "deepseek-r1-inference-inference-0",
        |l| l["spec"]["replicas"] = json!(3),
    );
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-0"),
            EVENTS.to_owned()
        ]
    );
    assert_eq!(
        fake.get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0"
        )
        .unwrap()["spec"]["replicas"],
        1
    );
    assert!(
        fake.event_notes().iter().any(|n| n.starts_with("Reverted: LeaderWorkerSet deepseek-r1-inference-inference-0 was changed outside Tandem and is set back")),
        "{:?}",
        fake.event_notes()
    );
}

#[tokio::test]
async fn only_owned_children_are_deleted() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story1-monolithic.yaml");
    fake.insert(json!({"apiVersion": LWS, "kind": "LeaderWorkerSet",
        "metadata": {"name": "qwen-inference-inference-7", "namespace": "default",
            "labels": {"fusioninfer.io/service": "qwen-inference", "app.kubernetes.io/managed-by": "tandem",
                "fusioninfer.io/role-name": "inference", "fusioninfer.io/replica-index": "7"},
            "ownerReferences": [{"apiVersion": IS, "kind": "InferenceService", "name": "qwen-inference", "uid": "someone-else"}]},
        "spec": {"replicas": 1}}));
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    assert!(
        !writes.iter().any(|w| w.starts_with("DELETE")),
        "{writes:?}"
    );
    assert!(
        fake.get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "qwen-inference-inference-7"
        )
        .is_some()
    );
}

#[tokio::test]
async fn a_missing_leader_worker_set_api_is_reported_not_retried_blindly() {
    let fake = FakeApi::new();
    fake.uninstall("leaderworkersets");
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story1-monolithic.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    // Only the role's PodDisruptionBudget, which needs no LeaderWorkerSet
    // API; one Event for it and one saying what is missing.
    assert_eq!(
        fake.take_writes(),
        [
            format!("PATCH {PDB_PATH}/qwen-inference-inference"),
            EVENTS.to_owned(),
            EVENTS.to_owned(),
            status_patch(&name)
        ]
    );
    let events = fake.list("events.k8s.io/v1", "Event", "default");
    assert!(
        events.iter().any(|e| e["reason"] == "DependencyMissing"
            && e["note"]
                .as_str()
                .unwrap_or_default()
                .contains("install LWS")),
        "{events:#?}"
    );
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    // Said once, by the dependency's conditions below, not also as a
    // failure of the plan.
    let failed = condition_of(&status, "Failed");
    assert_eq!(failed["status"], "False", "{failed}");
    for type_ in ["Ready", "DependenciesMet"] {
        let condition = condition_of(&status, type_);
        assert_eq!(condition["status"], "False", "{condition}");
        assert_eq!(condition["reason"], "DependencyMissing", "{condition}");
        let message = condition["message"].as_str().unwrap();
        assert!(
            message.starts_with("spec.roles: ") && message.contains("not installed"),
            "{message}"
        );
    }
    // A second reconcile of the same world says nothing new.
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(fake.take_writes(), Vec::<String>::new());

    // LWS installed: the condition clears on the next reconcile.
    fake.install(
        "leaderworkersets",
        harness::fake_api::dependency_crds().remove(0),
    );
    reconcile_stored(&fake, &ctx, &name).await;
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    let met = condition_of(&status, "DependenciesMet");
    assert_eq!(met["status"], "True", "{met}");
    // (The replicas follow once the LeaderWorkerSet cache, which looks an
    // unserved kind up again every minute, watches the new API.)
}

/// The condition `type_` of a status, which must have it.
fn condition_of(status: &Value, type_: &str) -> Value {
    status["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {status:#}"))
        .clone()
}

fn pod(role: &str, index: u32, worker: u32, ready: bool, revision: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("deepseek-r1-inference-{role}-{index}-0-{worker}"), "namespace": "default",
            "labels": {"fusioninfer.io/service": "deepseek-r1-inference", "fusioninfer.io/role-name": role,
                "fusioninfer.io/replica-index": index.to_string(), "fusioninfer.io/revision": revision}},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "image": "v"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

#[tokio::test]
async fn status_follows_the_pods_and_clears_when_healthy() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    let revision = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0",
        )
        .unwrap()["metadata"]["labels"]["fusioninfer.io/revision"]
        .clone();
    for index in 0..2 {
        for worker in 0..4 {
            // Replica 1's third worker is not ready.
            fake.insert(pod(
                "inference",
                index,
                worker,
                !(index == 1 && worker == 2),
                &revision,
            ));
        }
    }
    fake.take_calls();
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(fake.take_writes(), [status_patch(&name)]);
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    let inference = &status["components"]["inference"];
    assert_eq!(
        (
            inference["readyReplicas"].as_i64(),
            inference["readyPods"].as_i64()
        ),
        (Some(1), Some(7))
    );
    assert_eq!(inference["phase"], "Deploying");
    assert_eq!(status["ready"], "1/2");

    fake.edit(
        "v1",
        "Pod",
        "default",
        "deepseek-r1-inference-inference-1-0-2",
        |p| p["status"]["conditions"][0]["status"] = json!("True"),
    );
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(fake.take_writes(), [status_patch(&name)]);
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert_eq!(status["ready"], "2/2");
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["status"], "True");

    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        Vec::<String>::new(),
        "a ready, unchanged world writes nothing"
    );
}

/// (apiGroup, resource, verb) of a request path and method; None for API
/// discovery, which Kubernetes grants every authenticated user.
fn permission(method: &str, path: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts[0] {
        "api" => ("".to_owned(), &parts[2..]),
        _ => (parts[1].to_owned(), &parts[3..]),
    };
    // [namespaces/{ns}/]{plural}[/{name}[/{sub}]]
    let (plural, tail) = match rest {
        [] => return None,
        ["namespaces", _, plural, tail @ ..] => (plural, tail),
        [plural, tail @ ..] => (plural, tail),
    };
    let resource = match tail.get(1) {
        Some(sub) => format!("{plural}/{sub}"),
        None => plural.to_string(),
    };
    let verb = match (method, tail.len()) {
        ("GET", 0) => "list",
        ("GET", _) => "get",
        ("PATCH", _) => "patch",
        ("POST", _) => "create",
        ("DELETE", _) => "delete",
        (other, _) => panic!("unexpected method {other}"),
    };
    Some((group, resource, verb.to_owned()))
}

#[tokio::test]
async fn the_cluster_role_grants_every_request_the_reconciler_makes() {
    use serde::Deserialize;
    let text = std::fs::read_to_string(repo_path("manifests/base/rbac.yaml")).unwrap();
    let role = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "ClusterRole")
        .unwrap();
    let granted = |(group, resource, verb): &(String, String, String)| {
        role["rules"].as_array().unwrap().iter().any(|rule| {
            let has = |field: &str, value: &str| {
                rule[field].as_array().unwrap().iter().any(|v| v == value)
            };
            has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
        })
    };

    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    // With pods, a scale-down drains a replica (pods patched) first.
    fake.step_leader_worker_sets("default", |_| true);
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(1)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    for pod in fake.list("v1", "Pod", "default") {
        let pod = pod["metadata"]["name"].as_str().unwrap().to_owned();
        fake.remove("v1", "Pod", "default", &pod);
    }
    reconcile_stored(&fake, &ctx, &name).await;
    // The ScaleView reconciler: grab a lock and scale, then release it.
    let mut spot = yaml_documents(&repo_path("examples/scaleview/decode-ondemand-spot.yaml"));
    spot[1]["spec"]["replicas"] = json!(4);
    for (kind, object) in [
        (tandem::admission::Kind::InferenceService, &spot[0]),
        (tandem::admission::Kind::ScaleView, &spot[1]),
    ] {
        let (admitted, _) = tandem::admission::admit(
            kind,
            "default",
            object,
            None,
            &tandem::admission::lookup::Blind,
        )
        .unwrap();
        fake.insert(admitted);
    }
    let view = || -> tandem::api::ScaleView {
        serde_json::from_value(
            fake.get(IS, "ScaleView", "default", "spot-decode-sv")
                .unwrap(),
        )
        .unwrap()
    };
    fake.caught_up().await;
    tandem::reconcile::scale_view::reconcile(Arc::new(view()), ctx.clone())
        .await
        .unwrap();
    fake.edit(IS, "ScaleView", "default", "spot-decode-sv", |v| {
        v["metadata"]["deletionTimestamp"] = json!("2026-11-21T10:00:00Z")
    });
    fake.caught_up().await;
    tandem::reconcile::scale_view::reconcile(Arc::new(view()), ctx.clone())
        .await
        .unwrap();
    scale_every_adapted_kind(&fake, &ctx).await;
    // The GroupReplication reconciler: clone two Deployments, scale back.
    let mut documents = yaml_documents(&repo_path(
        "examples/render/group-replication-scale-up.yaml",
    ));
    for document in &mut documents {
        document["metadata"]["namespace"] = json!("default");
    }
    for target in documents[0]["spec"]["targetResources"]
        .as_array_mut()
        .unwrap()
    {
        target["namespace"] = json!("default");
    }
    let (group, _) = tandem::admission::admit(
        tandem::admission::Kind::ResourceScalingGroup,
        "default",
        &documents[0],
        None,
        &tandem::admission::lookup::Blind,
    )
    .unwrap();
    fake.insert(group);
    for deployment in documents.drain(1..) {
        fake.insert(deployment);
    }
    let rsg = "resourcescalinggroup.com/v1";
    let group = || -> tandem::api::ResourceScalingGroup {
        serde_json::from_value(
            fake.get(rsg, "ResourceScalingGroup", "default", "pd-cluster")
                .unwrap(),
        )
        .unwrap()
    };
    fake.caught_up().await;
    tandem::reconcile::group_replication::reconcile(Arc::new(group()), ctx.clone())
        .await
        .unwrap();
    fake.edit(rsg, "ResourceScalingGroup", "default", "pd-cluster", |g| {
        g["spec"]["scalingStrategy"]["groupConfig"]["replicas"] = json!(1)
    });
    fake.caught_up().await;
    tandem::reconcile::group_replication::reconcile(Arc::new(group()), ctx.clone())
        .await
        .unwrap();
    // An IncrementalUpgrade: its Gateway, route, per-revision Services and
    // records, installed and then taking its first step.
    let name = store_story(&fake, "examples/inferenceservice/incremental-upgrade.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("vllm:2")
    });
    reconcile_stored(&fake, &ctx, &name).await;
    let mut needed: Vec<(String, String, String)> = fake
        .take_calls()
        .iter()
        .filter_map(|c| permission(&c.method, &c.path))
        .collect();
    // Every cache lists, then watches.
    let watched: Vec<_> = needed
        .iter()
        .filter(|(_, _, verb)| verb == "list")
        .map(|(group, resource, _)| (group.clone(), resource.clone(), "watch".to_owned()))
        .collect();
    needed.extend(watched);
    // Server-side apply creates what does not exist yet: create and patch.
    // GroupReplication clones every kind it knows the plural of the same way.
    for (group, resource) in [
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("fusioninfer.io", "inferenceservices"),
        ("workloads.x-k8s.io", "rolebasedgroups"),
    ] {
        for verb in ["get", "list", "create", "patch", "delete"] {
            needed.push((group.into(), resource.into(), verb.into()));
        }
    }
    for (group, resource) in [
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("gateway.networking.k8s.io", "gateways"),
        ("gateway.networking.k8s.io", "httproutes"),
        ("", "services"),
        ("apps", "controllerrevisions"),
    ] {
        needed.push((group.into(), resource.into(), "create".into()));
    }
    assert!(
        needed
            .iter()
            .any(|(_, resource, verb)| resource == "gateways" && verb == "patch"),
        "the upgrade's requests are in the log"
    );
    // What the controller and the webhook's caches watch (not in this log).
    for (group, resource) in [
        ("fusioninfer.io", "inferenceservices"),
        ("fusioninfer.io", "scaleviews"),
        ("resourcescalinggroup.com", "resourcescalinggroups"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("", "pods"),
        // The ResourceScalingGroup controller's triggers.
        ("apps", "deployments"),
        ("apps", "statefulsets"),
    ] {
        needed.push((group.into(), resource.into(), "watch".into()));
        needed.push((group.into(), resource.into(), "list".into()));
    }
    needed.sort();
    needed.dedup();
    let missing: Vec<_> = needed.iter().filter(|p| !granted(p)).collect();
    assert!(
        missing.is_empty(),
        "manifests/base/rbac.yaml does not grant {missing:?}"
    );
}

/// The ResourceScalingGroup reconciler scales one Target of every adapted
/// kind (in namespace ai): a StatefulSet, a LeaderWorkerSet and a ScaleView
/// through /scale, roles of an InferenceService and of a RoleBasedGroup.
async fn scale_every_adapted_kind(fake: &FakeApi, ctx: &Arc<Context>) {
    let mut spot = yaml_documents(&repo_path("examples/scaleview/decode-ondemand-spot.yaml"));
    for object in &mut spot {
        object["metadata"]["namespace"] = json!("ai");
        fake.insert(object.clone());
    }
    for (api_version, kind, name) in [
        ("apps/v1", "Deployment", "router"),
        ("apps/v1", "StatefulSet", "cache"),
        (LWS, "LeaderWorkerSet", "workers"),
    ] {
        fake.insert(json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "ai"}, "spec": {"replicas": 1}}));
    }
    fake.insert(json!({"apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup",
        "metadata": {"name": "rbg", "namespace": "ai"}, "spec": {"roles": [{"name": "decode", "replicas": 1}]}}));
    let target = |name: &str, api_version: &str, kind: &str| json!({"name": name, "apiVersion": api_version, "kind": kind});
    let group = json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "every-kind", "namespace": "ai"},
        "spec": {"targetResources": [
            target("router", "apps/v1", "Deployment"),
            target("cache", "apps/v1", "StatefulSet"),
            target("workers", LWS, "LeaderWorkerSet"),
            target("spot-decode-sv", IS, "ScaleView"),
            {"name": "spot-decode", "apiVersion": IS, "kind": "InferenceService", "subResources": [{"roleName": "prefill"}]},
            {"name": "rbg", "apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup", "subResources": [{"roleName": "decode"}]}],
        "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
            {"name": "router", "role": "Source"},
            {"name": "cache", "role": "Target", "ratio": 3},
            {"name": "workers", "role": "Target", "ratio": 3},
            {"name": "spot-decode-sv", "role": "Target", "ratio": 3},
            {"name": "prefill", "role": "Target", "ratio": 3},
            {"name": "decode", "role": "Target", "ratio": 3}]}}}});
    let stored = fake.insert(group);
    let group: tandem::api::ResourceScalingGroup = serde_json::from_value(stored).unwrap();
    fake.caught_up().await;
    tandem::reconcile::resource_scaling_group::reconcile(Arc::new(group), ctx.clone())
        .await
        .unwrap();
    let rbg = fake
        .get("workloads.x-k8s.io/v1alpha1", "RoleBasedGroup", "ai", "rbg")
        .unwrap();
    assert_eq!(
        rbg["spec"]["roles"][0]["replicas"], 3,
        "every Target was scaled"
    );
    let view = fake.get(IS, "ScaleView", "ai", "spot-decode-sv").unwrap();
    assert_eq!(view["spec"]["replicas"], 3);
}

/// Tandem binds its endpoint pickers to the two ClusterRoles it ships, and
/// may do exactly that: `bind` on those two by name, and none of their
/// rules itself (the API server's escalation check allows a binding by who
/// may bind the role; the real control plane's router scenario makes one).
#[test]
fn tandem_may_bind_what_it_grants_an_endpoint_picker_and_holds_none_of_it() {
    use serde::Deserialize;
    let text = std::fs::read_to_string(repo_path("manifests/base/rbac.yaml")).unwrap();
    let documents: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let cluster_role = |name: &str| {
        documents
            .iter()
            .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("ClusterRole {name} is shipped"))
    };
    let tandem = cluster_role("tandem");
    let grants = |role: &Value, group: &str, resource: &str, verb: &str, name: Option<&str>| {
        role["rules"].as_array().unwrap().iter().any(|rule| {
            let has = |field: &str, value: &str| {
                rule[field]
                    .as_array()
                    .is_some_and(|values| values.iter().any(|v| v == value))
            };
            has("apiGroups", group)
                && has("resources", resource)
                && has("verbs", verb)
                && name.is_none_or(|n| has("resourceNames", n))
        })
    };
    let mut service = yaml_documents(&repo_path("examples/inferenceservice/router.yaml")).remove(0);
    service["metadata"]["uid"] = json!("u");
    // Two endpoint pickers elect a leader: both ClusterRoles are bound.
    let router = service["spec"]["roles"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["componentType"] == "router")
        .unwrap();
    router["replicas"] = json!(2);
    let service: InferenceService = serde_json::from_value(service).unwrap();
    let objects =
        tandem::plan::inference_service::router::router_objects(&service, &Default::default())
            .unwrap();
    let mut bound = 0;
    for binding in objects.iter().filter(|o| o["kind"] == "RoleBinding") {
        let role = binding["roleRef"]["name"].as_str().unwrap();
        assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
        assert!(
            grants(
                tandem,
                "rbac.authorization.k8s.io",
                "clusterroles",
                "bind",
                Some(role)
            ),
            "Tandem binds {role} but may not"
        );
        for rule in cluster_role(role)["rules"].as_array().unwrap() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        let (group, resource, verb) = (
                            group.as_str().unwrap(),
                            resource.as_str().unwrap(),
                            verb.as_str().unwrap(),
                        );
                        // Pods (status, drains) and InferencePools (the
                        // router's) are Tandem's own work; nothing else of
                        // the pickers' is held.
                        if !["pods", "inferencepools"].contains(&resource) {
                            assert!(
                                !grants(tandem, group, resource, verb, None),
                                "Tandem holds {group} {resource} {verb}, which it only hands on"
                            );
                        }
                    }
                }
            }
        }
        bound += 1;
    }
    assert_eq!(bound, 2);
    assert!(!grants(
        tandem,
        "rbac.authorization.k8s.io",
        "roles",
        "create",
        None
    ));
    assert!(
        !grants(tandem, "coordination.k8s.io", "leases", "get", None),
        "Leases only in its namespace"
    );
}

fn router_paths(service: &str) -> Vec<String> {
    vec![
        format!("/api/v1/namespaces/default/serviceaccounts/{service}-epp"),
        format!(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/{service}-epp-reader"
        ),
        format!("/api/v1/namespaces/default/configmaps/{service}-epp"),
        format!("/apis/apps/v1/namespaces/default/deployments/{service}-epp"),
        format!("/api/v1/namespaces/default/services/{service}-epp"),
        format!(
            "/apis/inference.networking.k8s.io/v1/namespaces/default/inferencepools/{service}-pool"
        ),
        format!("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/{service}-route"),
    ]
}

#[tokio::test]
async fn a_router_is_added_and_removed() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story2-prefill-decode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    fake.take_calls();

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router", "replicas": 1, "strategy": "prefix-cache",
            "httproute": {"parentRefs": [{"name": "inference-gateway"}], "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}]}]}
        }));
    });
    reconcile_stored(&fake, &ctx, &name).await;
    let mut expected: Vec<String> = router_paths(&name)
        .into_iter()
        .flat_map(|path| [format!("PATCH {path}"), EVENTS.to_owned()])
        .collect();
    expected.push(status_patch(&name));
    assert_eq!(fake.take_writes(), expected);
    let pool = fake
        .get(
            "inference.networking.k8s.io/v1",
            "InferencePool",
            "default",
            &format!("{name}-pool"),
        )
        .unwrap();
    assert_eq!(pool["spec"]["targetPorts"], json!([{"number": 8000}]));
    let route = fake
        .get(
            "gateway.networking.k8s.io/v1",
            "HTTPRoute",
            "default",
            &format!("{name}-route"),
        )
        .unwrap();
    assert_eq!(
        route["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/v1"
    );
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"][0]["kind"],
        "InferencePool"
    );
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert_eq!(status["components"]["router"]["phase"], "Pending");

    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        Vec::<String>::new(),
        "the router in place: nothing to write"
    );

    // The endpoint picker becomes ready: only the status changes.
    fake.edit(
        "apps/v1",
        "Deployment",
        "default",
        &format!("{name}-epp"),
        |d| d["status"] = json!({"readyReplicas": 1}),
    );
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(fake.take_writes(), [status_patch(&name)]);
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert_eq!(status["components"]["router"]["phase"], "Running");

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["componentType"] != "router");
    });
    reconcile_stored(&fake, &ctx, &name).await;
    let mut expected: Vec<String> = router_paths(&name)
        .into_iter()
        .flat_map(|path| [format!("DELETE {path}"), EVENTS.to_owned()])
        .collect();
    expected.push(status_patch(&name));
    assert_eq!(fake.take_writes(), expected);
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert!(
        status["components"].get("router").is_none(),
        "the removed role's status is gone: {status}"
    );
    assert!(fake.event_notes().iter().any(|n| n
        == &format!(
            "Deleted: InferencePool {name}-pool deleted: the service has no router role any more"
        )));
}

#[tokio::test]
async fn gang_scheduling_turned_off_removes_the_pod_group_and_the_annotations() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    assert!(
        fake.get(
            "scheduling.volcano.sh/v1beta1",
            "PodGroup",
            "default",
            &name
        )
        .is_some()
    );
    fake.take_calls();

    // One node per replica: no longer multi-node, so no gang scheduling.
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["multinode"]["nodeCount"] = json!(1)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-0"),
            EVENTS.to_owned(),
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-1"),
            EVENTS.to_owned(),
            // One pod per replica now: the budget's maxUnavailable follows.
            format!("PATCH {PDB_PATH}/deepseek-r1-inference-inference"),
            EVENTS.to_owned(),
            "DELETE /apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/deepseek-r1-inference".to_owned(),
            EVENTS.to_owned(),
            status_patch(&name),
        ]
    );
    let lws = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0",
        )
        .unwrap();
    let group = &lws["spec"]["leaderWorkerTemplate"];
    assert_eq!(group["size"], 1);
    assert!(group.get("leaderTemplate").is_none());
    assert!(
        group["workerTemplate"]["metadata"]
            .get("annotations")
            .is_none(),
        "{}",
        group["workerTemplate"]
    );
    assert!(
        group["workerTemplate"]["spec"]
            .get("schedulerName")
            .is_none()
    );
    assert!(fake.event_notes().iter().any(|n| n.starts_with(
        "Deleted: PodGroup deepseek-r1-inference deleted: gang scheduling is no longer needed"
    )));
}

fn costly_pod(index: u32, worker: u32, cost: i64, revision: &Value) -> Value {
    let mut pod = pod("inference", index, worker, true, revision);
    pod["metadata"]["annotations"] =
        json!({"controller.kubernetes.io/pod-deletion-cost": cost.to_string()});
    pod
}

#[tokio::test]
async fn binpack_deletes_the_cheapest_replicas_and_keeps_their_gang_entries_until_pods_go() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let mut service = yaml_documents(&repo_path("examples/seeds/story3-multinode.yaml")).remove(0);
    service["spec"]["roles"][0]["replicas"] = json!(4);
    service["spec"]["roles"][0]["multinode"] = json!({"nodeCount": 2});
    service["spec"]["roles"][0]["scaleDown"] = json!({"policy": "Binpack"});
    // Deleted at once: the drain before a deletion has its own tests.
    service["spec"]["roles"][0]["drain"] = json!({"seconds": 0});
    service["spec"]["schedulingStrategy"] = json!({"gangPolicy": "TaskMember"});
    let (admitted, _) = tandem::admission::admit(
        tandem::admission::Kind::InferenceService,
        "default",
        &service,
        None,
        &tandem::admission::lookup::Blind,
    )
    .unwrap();
    let name = fake.insert(admitted)["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    reconcile_stored(&fake, &ctx, &name).await;
    let revision = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0",
        )
        .unwrap()["metadata"]["labels"]["fusioninfer.io/revision"]
        .clone();
    // Replica scores (two pods each): 100, 50, 0, 75.
    for (index, costs) in [(0, [50, 50]), (1, [25, 25]), (2, [0, 0]), (3, [40, 35])] {
        for (worker, cost) in costs.into_iter().enumerate() {
            fake.insert(costly_pod(index, worker as u32, cost, &revision));
        }
    }
    reconcile_stored(&fake, &ctx, &name).await;
    fake.take_calls();
    let task_members = |fake: &FakeApi| {
        fake.get(
            "scheduling.volcano.sh/v1beta1",
            "PodGroup",
            "default",
            &name,
        )
        .unwrap()["spec"]["minTaskMember"]
            .clone()
    };
    assert_eq!(
        task_members(&fake),
        json!({"inference-0": 2, "inference-1": 2, "inference-2": 2, "inference-3": 2})
    );

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(2)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            format!("DELETE {LWS_PATH}/deepseek-r1-inference-inference-1"),
            EVENTS.to_owned(),
            format!("DELETE {LWS_PATH}/deepseek-r1-inference-inference-2"),
            EVENTS.to_owned(),
            status_patch(&name),
        ],
        "the two cheapest go; the PodGroup and the budget (4 replicas now) are not touched while their pods remain"
    );
    assert_eq!(task_members(&fake)["inference-2"], 2);
    let notes = fake.event_notes();
    assert!(
        notes.iter().any(|n| n == "Deleted: LeaderWorkerSet deepseek-r1-inference-inference-2 deleted: role inference is scaled to 2 replica(s); Binpack removes replica 2 (cost 0) before the replicas it keeps: 0 (cost 100), 3 (cost 75)"),
        "{notes:#?}"
    );

    // Scaled to 3 while replicas 1 and 2 still have pods: they count toward
    // the total until gone (issue 6), so no replica is created yet.
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(3)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    assert!(
        writes.iter().all(|w| !w.contains("leaderworkersets")),
        "nothing is created while replicas are being deleted: {writes:?}"
    );
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(2)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    fake.take_calls();

    // The pods of the deleted replicas go: now their entries go too.
    for index in [1, 2] {
        for worker in 0..2 {
            let pod = format!("deepseek-r1-inference-inference-{index}-0-{worker}");
            fake.remove("v1", "Pod", "default", &pod);
        }
    }
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    assert_eq!(
        writes[0],
        "PATCH /apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/deepseek-r1-inference"
    );
    assert_eq!(
        task_members(&fake),
        json!({"inference-0": 2, "inference-3": 2})
    );
    // And the budget counts the two replicas left: one of them (2 pods)
    // stays available.
    assert!(
        writes.contains(&format!("PATCH {PDB_PATH}/deepseek-r1-inference-inference")),
        "{writes:?}"
    );
    let budget = fake
        .get(
            "policy/v1",
            "PodDisruptionBudget",
            "default",
            "deepseek-r1-inference-inference",
        )
        .unwrap();
    assert_eq!(budget["spec"]["minAvailable"], 2, "{budget}");

    // Scaling back to 4 refills the freed indices, lowest first.
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(4)
    });
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    assert_eq!(
        writes[0],
        "PATCH /apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/deepseek-r1-inference",
        "the new entries before the replicas whose pods name them"
    );
    assert_eq!(
        writes[2],
        format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-1")
    );
    assert_eq!(
        writes[4],
        format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-2")
    );
    assert_eq!(
        task_members(&fake),
        json!({"inference-0": 2, "inference-1": 2, "inference-2": 2, "inference-3": 2})
    );
}

/// A context whose conflict retries wait a millisecond, not 50.
fn quick_retries(fake: &FakeApi) -> Arc<Context> {
    fake.context_with(|ctx| {
        ctx.conflict_backoff = tandem::reconcile::ConflictBackoff {
            first: std::time::Duration::from_millis(1),
            longest: std::time::Duration::from_millis(4),
            attempts: 5,
        }
    })
}

#[tokio::test]
async fn an_apply_that_meets_conflicts_is_retried_until_it_lands() {
    let fake = FakeApi::new();
    let ctx = quick_retries(&fake);
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    let first = format!("{LWS_PATH}/deepseek-r1-inference-inference-0");
    // Another applier creates the same LeaderWorkerSet twice in between.
    fake.conflict_next_writes(&first, 2);
    fake.conflict_next_writes("/status", 1);
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            "PATCH /apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/deepseek-r1-inference".to_owned(),
            EVENTS.to_owned(),
            format!("PATCH {first}"),
            format!("PATCH {first}"),
            format!("PATCH {first}"),
            EVENTS.to_owned(),
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-1"),
            EVENTS.to_owned(),
            format!("PATCH {PDB_PATH}/deepseek-r1-inference-inference"),
            EVENTS.to_owned(),
            status_patch(&name),
            status_patch(&name),
        ]
    );

    // The same world as without conflicts, and nothing more to write.
    let calm = FakeApi::new();
    let calm_ctx = calm.context();
    store_story(&calm, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&calm, &calm_ctx, &name).await;
    for kind in ["LeaderWorkerSet", "PodGroup"] {
        let version = if kind == "PodGroup" {
            "scheduling.volcano.sh/v1beta1"
        } else {
            LWS
        };
        let specs = |f: &FakeApi| -> Vec<Value> {
            f.list(version, kind, "default")
                .into_iter()
                .map(|o| o["spec"].clone())
                .collect()
        };
        assert_eq!(specs(&fake), specs(&calm), "{kind}");
    }
    assert_eq!(
        fake.get(IS, "InferenceService", "default", &name).unwrap()["status"],
        calm.get(IS, "InferenceService", "default", &name).unwrap()["status"]
    );
    assert!(
        !fake
            .event_notes()
            .iter()
            .any(|n| n.starts_with("WriteConflict")),
        "{:?}",
        fake.event_notes()
    );
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(fake.take_writes(), Vec::<String>::new());
}

#[tokio::test]
async fn an_apply_that_keeps_conflicting_gives_up_after_the_cap_with_an_event() {
    let fake = FakeApi::new();
    let ctx = quick_retries(&fake);
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    let first = format!("{LWS_PATH}/deepseek-r1-inference-inference-0");
    fake.conflict_next_writes(&first, 5);
    let stored: InferenceService =
        serde_json::from_value(fake.get(IS, "InferenceService", "default", &name).unwrap())
            .unwrap();
    fake.caught_up().await;
    let error = reconcile(Arc::new(stored), ctx.clone())
        .await
        .expect_err("the reconcile fails and is requeued");
    assert!(error.to_string().contains("409"), "{error}");
    let mut expected = vec![
        "PATCH /apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/deepseek-r1-inference".to_owned(),
        EVENTS.to_owned(),
    ];
    expected.extend(vec![format!("PATCH {first}"); 5]);
    expected.push(EVENTS.to_owned());
    assert_eq!(fake.take_writes(), expected, "five tries, then the Event");
    let notes: Vec<String> = fake
        .event_notes()
        .into_iter()
        .filter(|n| !n.starts_with("Created: PodGroup"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(
            "WriteConflict: gave up applying LeaderWorkerSet deepseek-r1-inference-inference-0 after 5 tries, each answered 409 Conflict"
        ),
        "{notes:?}"
    );
    assert!(
        fake.get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0"
        )
        .is_none()
    );
    // The requeued reconcile finds the way clear.
    reconcile_stored(&fake, &ctx, &name).await;
    assert!(
        fake.get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0"
        )
        .is_some()
    );
}

/// A reconcile context whose clock reads `at`.
fn context_at(fake: &FakeApi, at: &str) -> Arc<Context> {
    let now: jiff::Timestamp = at.parse().unwrap();
    fake.context_with(move |ctx| ctx.now = Arc::new(move || now))
}

fn condition(fake: &FakeApi, name: &str, type_: &str) -> Value {
    fake.get(IS, "InferenceService", "default", name).unwrap()["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap()
}

/// Issue 14: a template change under the default RollingUpdate replaces one
/// replica per step (maxUnavailable 1, maxSurge 0), says which budget let it,
/// writes nothing while the replaced replica starts, and halts with
/// ProgressDeadlineExceeded when it never becomes ready.
#[tokio::test]
async fn a_rolling_update_replaces_one_replica_per_step_and_halts_on_a_broken_revision() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    fake.step_leader_worker_sets("default", |_| true);
    reconcile_stored(&fake, &ctx, &name).await;
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert_eq!(status["ready"], "2/2");
    assert_eq!(status["updated"], "2/2");
    let old = status["components"]["inference"]["updateRevision"].clone();
    assert_eq!(status["components"]["inference"]["currentRevision"], old);
    fake.take_calls();

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("vllm:broken");
        // Replaced at once: the drain before a replacement has its own test.
        s["spec"]["roles"][0]["drain"] = json!({"seconds": 0});
        s["metadata"]["generation"] = json!(2);
    });
    fake.take_calls();
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            format!("PATCH {LWS_PATH}/deepseek-r1-inference-inference-1"),
            EVENTS.to_owned(),
            status_patch(&name),
        ],
        "one replica per step, the highest index first"
    );
    let replaced = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-1",
        )
        .unwrap();
    assert_eq!(
        replaced["metadata"]["annotations"]["fusioninfer.io/updated-at"],
        "2026-11-21T10:00:00Z"
    );
    let notes = fake.event_notes();
    assert!(
        notes.iter().any(|n| n.contains(
            "replica 1 (revision ") && n.contains("is replaced in place, 1 of 2 replicas stay ready and at least 1 must (maxUnavailable 1)")),
        "{notes:#?}"
    );
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert_eq!(status["components"]["inference"]["currentRevision"], old);
    assert_ne!(status["components"]["inference"]["updateRevision"], old);
    assert_eq!(
        condition(&fake, &name, "Progressing")["reason"],
        "RollingUpdate"
    );

    // The new pods are never ready. Nothing new is ready: nothing is written.
    fake.step_leader_worker_sets("default", |lws| {
        lws["metadata"]["labels"]["fusioninfer.io/revision"] == old
    });
    reconcile_stored(&fake, &ctx, &name).await;
    fake.take_calls();
    reconcile_stored(&fake, &ctx, &name).await;
    assert_eq!(fake.take_writes(), Vec::<String>::new());

    // 600 s later the rollout halts, once, with an Event naming the replica.
    let later = context_at(&fake, "2026-11-21T10:10:00Z");
    reconcile_stored(&fake, &later, &name).await;
    assert_eq!(fake.take_writes(), [EVENTS.to_owned(), status_patch(&name)]);
    let progressing = condition(&fake, &name, "Progressing");
    assert_eq!(
        (
            progressing["status"].as_str(),
            progressing["reason"].as_str()
        ),
        (Some("False"), Some("ProgressDeadlineExceeded"))
    );
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .starts_with("replica 1 of role inference at revision "),
        "{progressing}"
    );
    let warning = fake
        .list("events.k8s.io/v1", "Event", "default")
        .into_iter()
        .find(|e| e["reason"] == "ProgressDeadlineExceeded")
        .expect("the halt's Event");
    assert_eq!(warning["type"], "Warning");
    assert!(
        warning["note"]
            .as_str()
            .unwrap()
            .contains("not ready within progressDeadlineSeconds 600"),
        "{warning}"
    );
    reconcile_stored(&fake, &later, &name).await;
    assert_eq!(
        fake.take_writes(),
        Vec::<String>::new(),
        "halted: nothing more"
    );
    assert_eq!(
        fake.get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-0"
        )
        .unwrap()["metadata"]["labels"]["fusioninfer.io/revision"],
        old,
        "the other replica keeps serving the old revision"
    );
}

/// A one-replica role with maxSurge 0 keeps its ready replica and surges one
/// at the new revision instead, saying so.
#[tokio::test]
async fn a_one_replica_role_surges_instead_of_going_dark() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story4-prefill-decode-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    fake.step_leader_worker_sets("default", |_| true);
    reconcile_stored(&fake, &ctx, &name).await;
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("vllm:2");
        // Replaced at once: the drain before a replacement has its own test.
        s["spec"]["roles"][0]["drain"] = json!({"seconds": 0});
        s["metadata"]["generation"] = json!(2);
    });
    fake.take_calls();
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    assert!(
        writes.contains(&format!("PATCH {LWS_PATH}/deepseek-r1-disagg-prefill-1")),
        "{writes:#?}"
    );
    assert!(
        !writes
            .iter()
            .any(|w| w.ends_with("/deepseek-r1-disagg-prefill-0"))
    );
    let notes = fake.event_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("is added beyond maxSurge 0 so that the role keeps serving")),
        "{notes:#?}"
    );
    // Once the surge replica is ready, the old one goes.
    fake.step_leader_worker_sets("default", |_| true);
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    assert!(
        writes.contains(&format!("DELETE {LWS_PATH}/deepseek-r1-disagg-prefill-0")),
        "{writes:#?}"
    );
}

/// A role's own rollingUpdate overrides the service's: decode surges one
/// replica instead of taking one down.
#[tokio::test]
async fn a_role_paces_by_its_own_rolling_update() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_story(&fake, "examples/seeds/story4-prefill-decode-multinode.yaml");
    reconcile_stored(&fake, &ctx, &name).await;
    fake.step_leader_worker_sets("default", |_| true);
    reconcile_stored(&fake, &ctx, &name).await;
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][1]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": 1});
        s["spec"]["roles"][1]["template"]["spec"]["containers"][0]["image"] = json!("vllm:2");
        s["spec"]["roles"][1]["drain"] = json!({"seconds": 0});
        s["metadata"]["generation"] = json!(2);
    });
    fake.take_calls();
    reconcile_stored(&fake, &ctx, &name).await;
    let writes = fake.take_writes();
    let sets: Vec<&String> = writes
        .iter()
        .filter(|w| w.contains("/leaderworkersets/"))
        .collect();
    assert_eq!(
        sets,
        [&format!("PATCH {LWS_PATH}/deepseek-r1-disagg-decode-2")],
        "one surge replica, no replica taken down"
    );
}

/// Issue 15: a scale-down first takes the chosen replicas out of traffic
/// (their pods relabelled, server-side applied), deletes nothing until the
/// drain ends, writes nothing in between, then deletes them; a scale-up
/// during the drain revives them instead.
#[tokio::test]
async fn a_scale_down_drains_then_deletes_and_a_second_reconcile_within_the_drain_writes_nothing() {
    let fake = FakeApi::new();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(3)
    });
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:00:00Z"), &name).await;
    fake.step_leader_worker_sets("default", |_| true);
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:00:01Z"), &name).await;
    fake.take_calls();

    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(2)
    });
    let pods_path = "/api/v1/namespaces/default/pods";
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:01:00Z"), &name).await;
    let writes = fake.take_writes();
    let drained: Vec<String> = (0..4)
        .flat_map(|w| {
            [
                format!("PATCH {pods_path}/deepseek-r1-inference-inference-2-0-{w}"),
                EVENTS.to_owned(),
            ]
        })
        .chain([status_patch(&name)])
        .collect();
    assert_eq!(writes, drained, "the drain step: only replica 2's pods");
    for pod in fake.list("v1", "Pod", "default") {
        let index = pod["metadata"]["labels"]["fusioninfer.io/replica-index"].clone();
        let draining = index == "2";
        assert_eq!(
            pod["metadata"]["labels"]["fusioninfer.io/traffic"],
            if draining { "draining" } else { "serving" }
        );
        if draining {
            assert_eq!(
                pod["metadata"]["annotations"]["fusioninfer.io/drain-deadline"],
                "2026-11-21T10:01:30Z"
            );
        }
        // The pod itself is the LeaderWorkerSet's: its spec is untouched.
        assert_eq!(pod["spec"]["containers"][0]["name"], "vllm");
    }
    let status = fake.get(IS, "InferenceService", "default", &name).unwrap()["status"].clone();
    assert_eq!(status["components"]["inference"]["drainingReplicas"], 1);

    // Within the drain (the LeaderWorkerSet controller ran too): nothing.
    fake.step_leader_worker_sets("default", |_| true);
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:01:20Z"), &name).await;
    let calls = fake.take_calls();
    let writes: Vec<String> = calls
        .iter()
        .filter(|c| c.is_write())
        .map(|c| c.line())
        .collect();
    assert!(writes.is_empty(), "writes within the drain: {writes:?}");
    assert!(
        fake.get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "deepseek-r1-inference-inference-2"
        )
        .is_some()
    );

    // The drain is over: the replica goes.
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:01:30Z"), &name).await;
    assert_eq!(
        fake.take_writes(),
        [
            format!("DELETE {LWS_PATH}/deepseek-r1-inference-inference-2"),
            EVENTS.to_owned(),
            status_patch(&name),
        ]
    );
    assert!(fake.event_notes().iter().any(|n| n.contains(
        "LeaderWorkerSet deepseek-r1-inference-inference-2 deleted: role inference is scaled to 2 replica(s); replica 2 is not kept (Ordered: the highest indices go first); it was out of traffic for its drain of 30s"
    )), "{:#?}", fake.event_notes());
}

#[tokio::test]
async fn a_scale_up_within_the_drain_revives_the_replica_instead_of_making_one() {
    let fake = FakeApi::new();
    let name = store_story(&fake, "examples/seeds/story3-multinode.yaml");
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:00:00Z"), &name).await;
    fake.step_leader_worker_sets("default", |_| true);
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(1)
    });
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:01:00Z"), &name).await;
    fake.take_calls();
    fake.edit(IS, "InferenceService", "default", &name, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(2)
    });
    reconcile_stored(&fake, &context_at(&fake, "2026-11-21T10:01:10Z"), &name).await;
    let writes = fake.take_writes();
    assert!(
        writes.iter().all(|w| !w.contains("/leaderworkersets/")),
        "no LeaderWorkerSet is created or changed: {writes:?}"
    );
    assert_eq!(
        writes.iter().filter(|w| w.contains("/pods/")).count(),
        4,
        "the four pods of replica 1 return to traffic"
    );
    assert!(fake.list("v1", "Pod", "default").iter().all(|p| {
        p["metadata"]["labels"]["fusioninfer.io/traffic"] == "serving"
            && p["metadata"]["annotations"]["fusioninfer.io/drain-started-at"].is_null()
    }));
    assert!(
        fake.event_notes().iter().any(|n| n.starts_with(
            "Revived: replica 1 of role inference was draining and is back in traffic"
        )),
        "{:#?}",
        fake.event_notes()
    );
}

/// The dependencies' CRDs cannot be read at first (here: not served; in a
/// cluster, an older ClusterRole or an API server still starting): Tandem
/// assumes them installed and goes on. Once a retry of the watch lists
/// them, what is installed is known without a restart.
#[tokio::test]
async fn the_dependencies_become_known_once_their_crds_can_be_read() {
    use tandem::plan::shared::installed::Installed;
    let fake = FakeApi::new();
    fake.uninstall("customresourcedefinitions");
    let _ctx = fake.context();
    let caches = fake.caches();
    tokio::time::timeout(std::time::Duration::from_secs(10), caches.ready())
        .await
        .expect("the caches are ready although the CRDs cannot be read");
    assert_eq!(*caches.dependencies.installed(), Installed::Assumed);

    fake.install(
        "customresourcedefinitions",
        harness::fake_api::dependency_crds().remove(0),
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // Known, and said: the gauge is set once it is.
        let gauged = caches
            .metrics()
            .dependencies
            .get_or_create(&tandem::watch::metrics::DependencyLabels {
                dependency: "LeaderWorkerSet",
                version: "v1".to_owned(),
                installed: "true",
            })
            .get();
        if let (Installed::Known(found), 1) = (&*caches.dependencies.installed(), gauged) {
            assert_eq!(found.len(), 5, "every dependency's CRD: {found:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still assumed after 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
