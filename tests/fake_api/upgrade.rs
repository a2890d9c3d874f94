//! Issue 7, upgrades without doubling GPUs: the InferenceService reconciler
//! against the in-memory API server through one capacity step and one traffic
//! step of an IncrementalUpgrade (and nothing written within the interval),
//! a cluster without the Gateway API, and the generated Gateway, HTTPRoute and
//! LeaderWorkerSets against the upstream CRDs; the same for a service with a
//! router role, whose revisions each have an InferencePool and an endpoint
//! picker.

use std::sync::Arc;
use std::time::Duration;

use harness::fake_api::{EVENTS, FakeApi};
use harness::{repo_path, upstream_crds, upstream_schemas, yaml_documents};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use tandem::api::InferenceService;
use tandem::reconcile::Context;
use tandem::reconcile::inference_service::reconcile;

const IS: &str = "fusioninfer.io/v1alpha1";
const LWS: &str = "leaderworkerset.x-k8s.io/v1";
const GATEWAY_API: &str = "gateway.networking.k8s.io/v1";
const EXAMPLE: &str = "examples/inferenceservice/incremental-upgrade.yaml";
const NAME: &str = "qwen-incremental";

fn path(kind_path: &str, name: &str) -> String {
    format!("PATCH {kind_path}/{name}")
}

const LWS_PATH: &str = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets";
const ROUTE_PATH: &str = "/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes";
const SERVICE_PATH: &str = "/api/v1/namespaces/default/services";
const RECORD_PATH: &str = "/apis/apps/v1/namespaces/default/controllerrevisions";
const BUDGET_PATH: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
const STATUS: &str = "PATCH /apis/fusioninfer.io/v1alpha1/namespaces/default/inferenceservices/qwen-incremental/status";

/// A reconcile context whose clock reads `at`.
fn context_at(fake: &FakeApi, at: &str) -> Arc<Context> {
    let now: jiff::Timestamp = at.parse().unwrap();
    fake.context_with(|ctx| ctx.now = Arc::new(move || now))
}

fn store_example(fake: &FakeApi) {
    store(fake, yaml_documents(&repo_path(EXAMPLE)).remove(0));
}

/// The example with a router role whose httproute attaches to the user's
/// own Gateway and keeps a path match.
fn routed_example() -> Value {
    let mut object = yaml_documents(&repo_path(EXAMPLE)).remove(0);
    object["spec"]["roles"].as_array_mut().unwrap().push(json!({
        "name": "router", "componentType": "router",
        "httproute": {"parentRefs": [{"name": "inference-gateway"}],
                      "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}]}]},
    }));
    object
}

/// Stores `object` as the API server would: through Tandem's admission.
fn store(fake: &FakeApi, object: Value) {
    let (admitted, _) = tandem::admission::admit(
        tandem::admission::Kind::InferenceService,
        "default",
        &object,
        None,
        &tandem::admission::lookup::Blind,
    )
    .unwrap();
    fake.insert(admitted);
}

async fn reconcile_at(fake: &FakeApi, at: &str) -> Action {
    let stored = fake.get(IS, "InferenceService", "default", NAME).unwrap();
    let service: InferenceService = serde_json::from_value(stored).unwrap();
    let ctx = context_at(fake, at);
    fake.caught_up().await;
    reconcile(Arc::new(service), ctx)
        .await
        .expect("reconcile succeeds")
}

/// What the Gateway controller writes once it has programmed the current
/// generation of the Gateway and the route.
fn program_gateway(fake: &FakeApi) {
    let condition = |t: &str, generation: &Value| {
        json!({"type": t, "status": "True", "reason": t, "message": "",
               "lastTransitionTime": "2026-11-21T09:00:00Z", "observedGeneration": generation})
    };
    fake.edit(GATEWAY_API, "Gateway", "default", &format!("{NAME}-gateway"), |g| {
        let generation = g["metadata"]["generation"].clone();
        g["status"] = json!({"conditions": [condition("Accepted", &generation), condition("Programmed", &generation)]});
    });
    fake.edit(GATEWAY_API, "HTTPRoute", "default", &format!("{NAME}-route"), |r| {
        let generation = r["metadata"]["generation"].clone();
        r["status"] = json!({"parents": [{"controllerName": "example.com/gateway",
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": format!("{NAME}-gateway")},
            "conditions": [condition("Accepted", &generation), condition("ResolvedRefs", &generation)]}]});
    });
}

/// A ready pod (the leader) for every LeaderWorkerSet, as LWS would make.
fn ready_pods(fake: &FakeApi) {
    for lws in fake.list(LWS, "LeaderWorkerSet", "default") {
        let labels = &lws["metadata"]["labels"];
        let name = lws["metadata"]["name"].as_str().unwrap();
        fake.insert(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-0"), "namespace": "default", "labels": {
                "fusioninfer.io/service": NAME, "fusioninfer.io/role-name": labels["fusioninfer.io/role-name"],
                "fusioninfer.io/replica-index": labels["fusioninfer.io/replica-index"],
                "fusioninfer.io/revision": labels["fusioninfer.io/revision"],
                "leaderworkerset.sigs.k8s.io/worker-index": "0"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "image": "v"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}));
    }
}

fn revision_of(fake: &FakeApi) -> String {
    let stored = fake.get(IS, "InferenceService", "default", NAME).unwrap();
    let service: InferenceService = serde_json::from_value(stored).unwrap();
    tandem::plan::inference_service::revision::spec_revision(&service.spec)
}

fn weights(fake: &FakeApi) -> Vec<(String, i64)> {
    let route = fake
        .get(
            GATEWAY_API,
            "HTTPRoute",
            "default",
            &format!("{NAME}-route"),
        )
        .unwrap();
    route["spec"]["rules"][0]["backendRefs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_owned(),
                b["weight"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn upgrade_status(fake: &FakeApi) -> Value {
    fake.get(IS, "InferenceService", "default", NAME).unwrap()["status"]["upgrade"].clone()
}

/// Installs the example, lets its replicas become ready and its Gateway be
/// programmed, then changes the image: the returned revisions are the old
/// and the new one.
async fn installed_then_changed(fake: &FakeApi) -> (String, String) {
    store_example(fake);
    settle_then_change(fake, |v1| format!("{NAME}-{v1}")).await
}

/// Lets the stored service's replicas become ready and its Gateway be
/// programmed (the route's one backend is `backend` of the revision), then
/// changes the image: the returned revisions are the old and the new one.
async fn settle_then_change(fake: &FakeApi, backend: impl Fn(&str) -> String) -> (String, String) {
    reconcile_at(fake, "2026-11-21T09:00:00Z").await;
    ready_pods(fake);
    program_gateway(fake);
    reconcile_at(fake, "2026-11-21T09:00:10Z").await;
    let v1 = revision_of(fake);
    assert_eq!(weights(fake), [(backend(&v1), 100)]);
    fake.edit(IS, "InferenceService", "default", NAME, |s| {
        s["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
            json!("vllm/vllm-openai:v0.12.0");
    });
    fake.take_calls();
    (v1, revision_of(fake))
}

#[tokio::test]
async fn one_capacity_step_then_one_traffic_step_then_nothing_within_the_interval() {
    let fake = FakeApi::new();
    let (v1, v2) = installed_then_changed(&fake).await;

    // Capacity: the pending revision starts at 0/0 and grows by maxSurgePercent
    // 20, ceil(4 × 20 / 100) = 1 replica, beside the 4 of the active one.
    let action = reconcile_at(&fake, "2026-11-21T10:00:00Z").await;
    let pending_lws = format!("{NAME}-inference-0-{v2}");
    assert_eq!(
        fake.take_writes(),
        [
            path(LWS_PATH, &pending_lws),
            EVENTS.to_owned(),
            path(ROUTE_PATH, &format!("{NAME}-route")),
            EVENTS.to_owned(),
            path(SERVICE_PATH, &format!("{NAME}-{v2}")),
            EVENTS.to_owned(),
            path(RECORD_PATH, &format!("{NAME}-{v2}")),
            EVENTS.to_owned(),
            // The role has 5 replicas now over both revisions: its budget
            // keeps 4 of them available.
            path(BUDGET_PATH, &format!("{NAME}-inference")),
            EVENTS.to_owned(),
            EVENTS.to_owned(),
            EVENTS.to_owned(),
            STATUS.to_owned(),
        ]
    );
    assert_eq!(
        weights(&fake),
        [(format!("{NAME}-{v1}"), 100), (format!("{NAME}-{v2}"), 0)]
    );
    assert_eq!(
        upgrade_status(&fake)["pending"],
        json!({"revision": v2, "targetCapacity": 20, "trafficRoutedPercent": 0})
    );
    assert_eq!(fake.list(LWS, "LeaderWorkerSet", "default").len(), 5);
    let notes = fake.event_notes();
    assert!(
        notes.contains(&format!("UpgradeStarted: upgrade from revision {v1} to revision {v2} started (IncrementalUpgrade: maxSurgePercent 20, stepSizePercent 5, intervalSeconds 10)")),
        "{notes:?}"
    );
    assert!(
        notes.contains(&format!("UpgradeCapacity: revision {v2} scaled up from 0% to 20% of the desired replicas (maxSurgePercent 20)")),
        "{notes:?}"
    );
    // Its replica is not ready: look again soon, pods are watched anyway.
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    // Traffic: its replica is ready and the route programmed; the first
    // traffic step moves 5 % at once.
    ready_pods(&fake);
    program_gateway(&fake);
    fake.take_calls();
    let action = reconcile_at(&fake, "2026-11-21T10:00:05Z").await;
    assert_eq!(
        fake.take_writes(),
        [
            path(ROUTE_PATH, &format!("{NAME}-route")),
            EVENTS.to_owned(),
            EVENTS.to_owned(),
            STATUS.to_owned(),
        ]
    );
    assert_eq!(
        weights(&fake),
        [(format!("{NAME}-{v1}"), 95), (format!("{NAME}-{v2}"), 5)]
    );
    assert_eq!(
        upgrade_status(&fake)["pending"],
        json!({"revision": v2, "targetCapacity": 20, "trafficRoutedPercent": 5,
               "lastTrafficMoveTime": "2026-11-21T10:00:05Z"})
    );
    assert!(
        fake.event_notes().contains(&format!(
            "UpgradeTraffic: moved traffic to revision {v2} from 0% to 5%; revision {v1} keeps 95%"
        )),
        "{:?}",
        fake.event_notes()
    );
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(10)),
        "the next step is due in intervalSeconds"
    );

    // Within the interval: the world is unchanged, nothing is written, and
    // the next look is when the next step is due.
    program_gateway(&fake);
    fake.take_calls();
    let action = reconcile_at(&fake, "2026-11-21T10:00:09Z").await;
    assert_eq!(fake.take_writes(), Vec::<String>::new());
    assert_eq!(action, Action::requeue(Duration::from_secs(6)));
    let status = fake.get(IS, "InferenceService", "default", NAME).unwrap()["status"].clone();
    let upgrading = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "UpgradeInProgress")
        .unwrap()
        .clone();
    assert_eq!(upgrading["status"], "True");
    assert_eq!(upgrading["reason"], "WaitingForInterval");
}

#[tokio::test]
async fn each_upgrade_step_and_write_is_counted_as_a_decision() {
    let fake = FakeApi::new();
    installed_then_changed(&fake).await;
    let ctx = context_at(&fake, "2026-11-21T10:00:00Z");
    let stored = fake.get(IS, "InferenceService", "default", NAME).unwrap();
    reconcile(
        Arc::new(serde_json::from_value(stored).unwrap()),
        ctx.clone(),
    )
    .await
    .expect("reconcile succeeds");
    // The first capacity step (see the test above): the pending revision's
    // replica, the route, the revision's Service and its record, the role's
    // budget, and the two steps' Events.
    let decided = |decision| ctx.metrics.decisions("InferenceService", decision, "none");
    assert_eq!(
        ctx.metrics
            .decisions("InferenceService", "replica_created", "Ordered"),
        1
    );
    // The route, and the budget for the replica more.
    assert_eq!(decided("child_updated"), 2);
    assert_eq!(decided("child_created"), 2);
    assert_eq!(decided("upgrade_started"), 1);
    assert_eq!(decided("upgrade_capacity"), 1);
    assert_eq!(decided("upgrade_traffic"), 0);
}

const CONFIG_MAP_PATH: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYMENT_PATH: &str = "/apis/apps/v1/namespaces/default/deployments";
const POOL_PATH: &str = "/apis/inference.networking.k8s.io/v1/namespaces/default/inferencepools";

#[tokio::test]
async fn a_router_service_steps_capacity_then_traffic_through_one_pool_per_revision() {
    let fake = FakeApi::new();
    store(&fake, routed_example());
    let (v1, v2) = settle_then_change(&fake, |_| format!("{NAME}-pool")).await;
    let pool2 = format!("{NAME}-pool-{v2}");
    let epp2 = format!("{NAME}-epp-{v2}");

    // Capacity: the pending revision's first replica, and its own endpoint
    // picker and pool; the route gets the pool as a backend at weight 0.
    reconcile_at(&fake, "2026-11-21T10:00:00Z").await;
    assert_eq!(
        fake.take_writes(),
        [
            path(LWS_PATH, &format!("{NAME}-inference-0-{v2}")),
            EVENTS.to_owned(),
            path(CONFIG_MAP_PATH, &epp2),
            EVENTS.to_owned(),
            path(DEPLOYMENT_PATH, &epp2),
            EVENTS.to_owned(),
            path(SERVICE_PATH, &epp2),
            EVENTS.to_owned(),
            path(POOL_PATH, &pool2),
            EVENTS.to_owned(),
            path(ROUTE_PATH, &format!("{NAME}-route")),
            EVENTS.to_owned(),
            path(RECORD_PATH, &format!("{NAME}-{v2}")),
            EVENTS.to_owned(),
            // The role has 5 replicas now over both revisions: its budget
            // keeps 4 of them available.
            path(BUDGET_PATH, &format!("{NAME}-inference")),
            EVENTS.to_owned(),
            EVENTS.to_owned(),
            EVENTS.to_owned(),
            STATUS.to_owned(),
        ]
    );
    assert_eq!(
        weights(&fake),
        [(format!("{NAME}-pool"), 100), (pool2.clone(), 0)]
    );
    let pool = fake
        .get(
            "inference.networking.k8s.io/v1",
            "InferencePool",
            "default",
            &pool2,
        )
        .unwrap();
    assert_eq!(
        pool["spec"]["selector"]["matchLabels"],
        json!({"fusioninfer.io/service": NAME, "fusioninfer.io/revision": v2,
               "leaderworkerset.sigs.k8s.io/worker-index": "0", "fusioninfer.io/traffic": "serving"})
    );
    assert_eq!(pool["spec"]["endpointPickerRef"]["name"], epp2.as_str());
    let active_pool = fake
        .get(
            "inference.networking.k8s.io/v1",
            "InferencePool",
            "default",
            &format!("{NAME}-pool"),
        )
        .unwrap();
    assert_eq!(
        active_pool["spec"]["selector"]["matchLabels"]["fusioninfer.io/revision"],
        v1.as_str()
    );
    let route = fake
        .get(
            GATEWAY_API,
            "HTTPRoute",
            "default",
            &format!("{NAME}-route"),
        )
        .unwrap();
    let parents: Vec<&str> = route["spec"]["parentRefs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        parents,
        [format!("{NAME}-gateway").as_str(), "inference-gateway"]
    );
    assert_eq!(
        route["spec"]["rules"][0]["matches"],
        json!([{"path": {"type": "PathPrefix", "value": "/v1"}}])
    );
    assert!(
        fake.event_notes().contains(&format!(
            "Created: InferencePool {pool2} created: the router's pool of the leaders of revision {v2}"
        )),
        "{:?}",
        fake.event_notes()
    );

    // Traffic: the first step moves 5 % to the new pool.
    ready_pods(&fake);
    program_gateway(&fake);
    fake.take_calls();
    reconcile_at(&fake, "2026-11-21T10:00:05Z").await;
    assert_eq!(
        fake.take_writes(),
        [
            path(ROUTE_PATH, &format!("{NAME}-route")),
            EVENTS.to_owned(),
            EVENTS.to_owned(),
            STATUS.to_owned(),
        ]
    );
    assert_eq!(
        weights(&fake),
        [(format!("{NAME}-pool"), 95), (pool2.clone(), 5)]
    );

    // Within the interval nothing is written.
    program_gateway(&fake);
    fake.take_calls();
    reconcile_at(&fake, "2026-11-21T10:00:09Z").await;
    assert_eq!(fake.take_writes(), Vec::<String>::new());
}

#[tokio::test]
async fn without_the_gateway_api_the_service_runs_and_the_upgrade_is_stalled() {
    let fake = FakeApi::new();
    fake.uninstall("gateways");
    fake.uninstall("httproutes");
    store_example(&fake);
    reconcile_at(&fake, "2026-11-21T10:00:00Z").await;
    let lws = fake.list(LWS, "LeaderWorkerSet", "default");
    assert_eq!(lws.len(), 4, "the replicas run without the Gateway API");
    let status = fake.get(IS, "InferenceService", "default", NAME).unwrap()["status"].clone();
    let condition = |t: &str| {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .unwrap()
            .clone()
    };
    // Said by the service's dependency conditions (Ready too), naming both.
    for type_ in ["DependenciesMet", "Ready"] {
        let said = condition(type_);
        assert_eq!(said["status"], "False", "{said}");
        assert_eq!(said["reason"], "DependencyMissing", "{said}");
        let message = said["message"].as_str().unwrap();
        for missing in [
            "gateway.networking.k8s.io/v1 Gateway",
            "gateway.networking.k8s.io/v1 HTTPRoute",
        ] {
            assert!(message.contains(missing), "{message}");
        }
        assert!(
            message.starts_with("spec.upgradeStrategy.type: "),
            "{message}"
        );
    }

    fake.edit(IS, "InferenceService", "default", NAME, |s| {
        s["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
            json!("vllm/vllm-openai:v0.12.0");
    });
    reconcile_at(&fake, "2026-11-21T10:00:10Z").await;
    let status = fake.get(IS, "InferenceService", "default", NAME).unwrap()["status"].clone();
    let upgrading = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "UpgradeInProgress")
        .unwrap()
        .clone();
    assert_eq!(
        (upgrading["status"].as_str(), upgrading["reason"].as_str()),
        (Some("True"), Some("Stalled"))
    );
    assert!(upgrading["message"].as_str().unwrap().contains(
        "the Gateway API (gateway.networking.k8s.io Gateway and HTTPRoute) is not installed"
    ));
    assert_eq!(
        status["upgrade"]["pending"]["targetCapacity"], 0,
        "nothing moves"
    );
    assert_eq!(fake.list(LWS, "LeaderWorkerSet", "default").len(), 4);

    // Another strategy needs nothing of it.
    fake.edit(IS, "InferenceService", "default", NAME, |s| {
        s["spec"]["upgradeStrategy"] = json!({"type": "RollingUpdate"});
    });
    reconcile_at(&fake, "2026-11-21T10:00:20Z").await;
    let status = fake.get(IS, "InferenceService", "default", NAME).unwrap()["status"].clone();
    assert_eq!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Failed")
            .unwrap()["status"],
        "False"
    );
    assert!(status.get("upgrade").is_none(), "{status}");
    assert!(
        !status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "UpgradeInProgress"),
        "{status}"
    );
}

#[test]
fn generated_gateway_route_and_revisions_fit_the_upstream_crds() {
    let Some(dir) = upstream_crds("generated_gateway_route_and_revisions_fit_the_upstream_crds")
    else {
        return;
    };
    let schemas = upstream_schemas(&dir);
    // Mid-upgrade, with both revisions: render the example with a status
    // that records a pending revision and a programmed Gateway.
    let mut world = yaml_documents(&repo_path(EXAMPLE));
    let revision = |object: &Value| {
        let service: InferenceService = serde_json::from_value(object.clone()).unwrap();
        tandem::plan::inference_service::revision::spec_revision(&service.spec)
    };
    let v1 = revision(&world[0]);
    world[0]["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
        json!("vllm/vllm-openai:v0.12.0");
    let v2 = revision(&world[0]);
    world[0]["status"] = json!({"upgrade": {
        "active": {"revision": v1, "targetCapacity": 100, "trafficRoutedPercent": 60},
        "pending": {"revision": v2, "targetCapacity": 40, "trafficRoutedPercent": 40},
    }});
    let rendered = tandem::render::render(world, &Default::default()).unwrap();
    let mut checked = Vec::new();
    for object in &rendered.apply {
        let api_version = object["apiVersion"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let Some(schema) = schemas.get(&(api_version.to_owned(), kind.to_owned())) else {
            continue;
        };
        let errors = schema.errors(object);
        assert!(
            errors.is_empty(),
            "{kind} {}: {errors:?}",
            object["metadata"]["name"]
        );
        checked.push(kind.to_owned());
    }
    checked.sort();
    assert_eq!(
        checked,
        ["Gateway", "HTTPRoute", "LeaderWorkerSet", "LeaderWorkerSet"],
        "no LeaderWorkerSet of the active revision is written: the world has none of it, and nothing records its templates"
    );
    let route = rendered
        .apply
        .iter()
        .find(|o| o["kind"] == "HTTPRoute")
        .unwrap();
    let backends: Vec<(&str, i64)> = route["spec"]["rules"][0]["backendRefs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b["weight"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        backends,
        [
            (format!("{NAME}-{v1}").as_str(), 60),
            (format!("{NAME}-{v2}").as_str(), 40)
        ]
    );
    // And the schemas are strict enough to catch a wrong route.
    let mut bad = route.clone();
    bad["spec"]["rules"][0]["backendRefs"][0]["weight"] = json!(-1);
    assert!(
        !schemas[&(GATEWAY_API.to_owned(), "HTTPRoute".to_owned())]
            .errors(&bad)
            .is_empty()
    );
}

#[test]
fn a_router_services_pools_and_route_fit_the_upstream_crds() {
    let Some(dir) = upstream_crds("a_router_services_pools_and_route_fit_the_upstream_crds") else {
        return;
    };
    let schemas = upstream_schemas(&dir);
    let mut world = vec![routed_example()];
    let revision = |object: &Value| {
        let service: InferenceService = serde_json::from_value(object.clone()).unwrap();
        tandem::plan::inference_service::revision::spec_revision(&service.spec)
    };
    let v1 = revision(&world[0]);
    world[0]["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
        json!("vllm/vllm-openai:v0.12.0");
    let v2 = revision(&world[0]);
    world[0]["status"] = json!({"upgrade": {
        "active": {"revision": v1, "targetCapacity": 100, "trafficRoutedPercent": 60},
        "pending": {"revision": v2, "targetCapacity": 40, "trafficRoutedPercent": 40},
    }});
    let rendered = tandem::render::render(world, &Default::default()).unwrap();
    let mut checked = Vec::new();
    for object in &rendered.apply {
        let api_version = object["apiVersion"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let Some(schema) = schemas.get(&(api_version.to_owned(), kind.to_owned())) else {
            continue;
        };
        let errors = schema.errors(object);
        assert!(
            errors.is_empty(),
            "{kind} {}: {errors:?}",
            object["metadata"]["name"]
        );
        checked.push(format!(
            "{kind} {}",
            object["metadata"]["name"].as_str().unwrap()
        ));
    }
    checked.retain(|c| !c.starts_with("LeaderWorkerSet"));
    checked.sort();
    assert_eq!(
        checked,
        [
            format!("Gateway {NAME}-gateway"),
            format!("HTTPRoute {NAME}-route"),
            format!("InferencePool {NAME}-pool"),
            format!("InferencePool {NAME}-pool-{v2}"),
        ]
    );
    let route = rendered
        .apply
        .iter()
        .find(|o| o["kind"] == "HTTPRoute")
        .unwrap();
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"],
        json!([
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": format!("{NAME}-pool"), "weight": 60},
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": format!("{NAME}-pool-{v2}"), "weight": 40},
        ])
    );
    // No per-revision Service: the pools are the backends.
    assert!(!rendered.apply.iter().any(
        |o| o["kind"] == "Service" && o["metadata"]["name"] == format!("{NAME}-{v2}").as_str()
    ));
}

/// Runs `tandem render` on the mid-upgrade example at `now`, as JSON.
fn render_at(now: &str) -> Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "render",
            "-f",
            "examples/render/incremental-upgrade-step.yaml",
            "--now",
            now,
            "-o",
            "json",
        ])
        .current_dir(repo_path(""))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn rendered<'a>(out: &'a Value, kind: &str) -> &'a Value {
    out["apply"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {out}"))
}

#[test]
fn render_now_shows_the_next_step_from_the_given_statuses() {
    let (v1, v2) = ("0e66c5141c", "b0655f4937");
    let backends =
        |out: &Value| rendered(out, "HTTPRoute")["spec"]["rules"][0]["backendRefs"].clone();
    let condition = |out: &Value, t: &str| {
        rendered(out, "InferenceService")["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .unwrap()
            .clone()
    };

    // The interval has passed: one traffic step, then render stops, as the
    // rewritten route is not programmed yet.
    let due = render_at("2026-11-21T10:00:30Z");
    assert_eq!(
        backends(&due),
        json!([{"name": format!("{NAME}-{v1}"), "port": 8000, "weight": 75},
               {"name": format!("{NAME}-{v2}"), "port": 8000, "weight": 25}])
    );
    assert_eq!(
        rendered(&due, "InferenceService")["status"]["upgrade"]["pending"],
        json!({"revision": v2, "targetCapacity": 40, "trafficRoutedPercent": 25,
               "lastTrafficMoveTime": "2026-11-21T10:00:30Z"})
    );
    assert_eq!(
        condition(&due, "UpgradeInProgress")["reason"],
        "WaitingForRoute"
    );
    assert_eq!(condition(&due, "Progressing")["reason"], "Upgrading");
    assert_eq!(due["delete"], json!([]));

    // Not yet: the weights stay, and the status says when the next step is due.
    let early = render_at("2026-11-21T10:00:05Z");
    assert_eq!(
        backends(&early),
        json!([{"name": format!("{NAME}-{v1}"), "port": 8000, "weight": 80},
               {"name": format!("{NAME}-{v2}"), "port": 8000, "weight": 20}])
    );
    let upgrading = condition(&early, "UpgradeInProgress");
    assert_eq!(upgrading["reason"], "WaitingForInterval");
    assert!(
        upgrading["message"].as_str().unwrap().ends_with(&format!(
            "next traffic step to revision {v2} at 2026-11-21T10:00:10Z (intervalSeconds 10)"
        )),
        "{upgrading}"
    );
    // The active revision's replicas run as they are: the spec no longer
    // describes them and nothing records their templates, so they are
    // neither rewritten nor deleted.
    let lws: Vec<&str> = early["apply"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "LeaderWorkerSet")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        lws,
        [
            format!("{NAME}-inference-0-{v2}"),
            format!("{NAME}-inference-1-{v2}")
        ]
    );
}

/// Runs `tandem render` on a world file at `now`, as JSON.
fn render_file_at(file: &std::path::Path, now: &str) -> Value {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["render", "-f"])
        .arg(file)
        .args(["--now", now, "-o", "json"])
        .current_dir(repo_path(""))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Issue 14: `tandem render --now` shows the next step of a RollingUpdate
/// from a world with pods, with the plan the reconciler uses; fed its own
/// output back after the progress deadline, it shows the halt.
#[test]
fn render_now_shows_the_next_step_of_a_rolling_update() {
    let example = repo_path("examples/render/rolling-update-step.yaml");
    let out = render_file_at(&example, "2026-11-21T10:00:00Z");
    let sets: Vec<&Value> = out["apply"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "LeaderWorkerSet")
        .collect();
    let names: Vec<&str> = sets
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["qwen-rolling-inference-2", "qwen-rolling-inference-3"],
        "replica 2 in place and one surge replica; 0 and 1 keep serving"
    );
    for set in &sets {
        assert_eq!(
            set["metadata"]["annotations"]["fusioninfer.io/updated-at"],
            "2026-11-21T10:00:00Z"
        );
        assert_ne!(
            set["metadata"]["labels"]["fusioninfer.io/revision"],
            "1111111111"
        );
    }
    let service = rendered(&out, "InferenceService");
    let progressing = service["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_eq!(progressing["reason"], "RollingUpdate");
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .starts_with("role inference: waiting for replica(s) 2, 3 to be ready at revision "),
        "{progressing}"
    );

    // The world after that step, with nothing new ready, 10 minutes later.
    let mut world = yaml_documents(&example);
    for object in out["apply"].as_array().unwrap() {
        let same = |o: &Value| {
            o["kind"] == object["kind"] && o["metadata"]["name"] == object["metadata"]["name"]
        };
        world.retain(|o| !same(o));
        world.push(object.clone());
    }
    let file = std::env::temp_dir().join(format!("tandem-rolling-{}.json", std::process::id()));
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": world})).unwrap(),
    )
    .unwrap();
    let later = render_file_at(&file, "2026-11-21T10:10:00Z");
    std::fs::remove_file(&file).ok();
    let service = rendered(&later, "InferenceService");
    let progressing = service["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_eq!(
        (
            progressing["status"].as_str(),
            progressing["reason"].as_str()
        ),
        (Some("False"), Some("ProgressDeadlineExceeded"))
    );
    assert!(
        !later["apply"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["kind"] == "LeaderWorkerSet"),
        "halted: no replica moves"
    );
}

/// The pods LeaderWorkerSet's controller would run for `sets`, all ready.
fn ready_pods_of(sets: &[&Value]) -> Vec<Value> {
    let mut pods = Vec::new();
    for lws in sets {
        let name = lws["metadata"]["name"].as_str().unwrap();
        let group = &lws["spec"]["leaderWorkerTemplate"];
        for worker in 0..group["size"].as_u64().unwrap() {
            let template = if worker == 0 && !group["leaderTemplate"].is_null() {
                &group["leaderTemplate"]
            } else {
                &group["workerTemplate"]
            };
            let mut labels = template["metadata"]["labels"].clone();
            labels["leaderworkerset.sigs.k8s.io/worker-index"] = json!(worker.to_string());
            pods.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-0-{worker}"), "namespace": "default", "labels": labels},
                "spec": {"nodeName": format!("gpu-{worker}"), "containers": [{"name": "vllm", "image": "v"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}));
        }
    }
    pods
}

/// Issue 14: with every replica of story 4 ready, a new decode image renders
/// one decode LeaderWorkerSet and nothing of prefill (nor the PodGroup).
#[test]
fn render_of_a_decode_change_touches_no_prefill_object() {
    let options = tandem::render::Options::default();
    let story = yaml_documents(&repo_path(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
    ));
    let first = tandem::render::render(story, &options).unwrap();
    let sets: Vec<&Value> = first
        .apply
        .iter()
        .filter(|o| o["kind"] == "LeaderWorkerSet")
        .collect();
    assert_eq!(sets.len(), 3);
    let mut world: Vec<Value> = first.apply.clone();
    world.extend(ready_pods_of(&sets));
    for object in world.iter_mut().filter(|o| o["kind"] == "InferenceService") {
        object["spec"]["roles"][1]["template"]["spec"]["containers"][0]["image"] =
            json!("vllm/vllm-openai:v0.12.0");
    }
    let second = tandem::render::render(world.clone(), &options).unwrap();
    let changed: Vec<String> = second
        .apply
        .iter()
        .filter(|o| o["kind"] != "InferenceService")
        .filter(|o| !world.contains(o))
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    // The replica the step replaces first leaves traffic (its pods
    // relabelled for the drain); its LeaderWorkerSet changes after it.
    assert_eq!(
        changed,
        (0..4)
            .map(|w| format!("Pod deepseek-r1-disagg-decode-1-0-{w}"))
            .collect::<Vec<_>>(),
        "one decode replica per step, no prefill object, no PodGroup"
    );
    assert!(second.delete.is_empty());
}
