//! The router example and its variants, planned into the objects Tandem would
//! apply: the InferencePool and HTTPRoute validate against the upstream CRDs,
//! every core object is exactly its Kubernetes type (no misspelt or misplaced
//! field), and the EPP configuration is YAML of the expected kind.

use std::path::Path;

use harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use serde_json::{Value, json};
use tandem::api::InferenceService;
use tandem::plan::inference_service::router::{
    self, CONFIG_KEY, DEFAULT_EPP_IMAGE, LLM_D_EPP_IMAGE, RouterOptions, router_objects,
};

fn example() -> Value {
    let path = repo_path("examples/inferenceservice/router.yaml");
    let mut documents = yaml_documents(&path);
    assert_eq!(documents.len(), 1, "{}", path.display());
    let mut service = documents.remove(0);
    // As stored: the API server gives every object a uid, so children are owned.
    service["metadata"]["uid"] = json!("9b1f2c4e-0000-4000-8000-000000000003");
    service
}

fn router_role(service: &mut Value) -> &mut Value {
    service["spec"]["roles"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["componentType"] == "router")
        .expect("the example has a router role")
}

/// The example and variants that exercise every path of the planner.
fn variants() -> Vec<(String, Value)> {
    let mut variants = vec![("example".to_owned(), example())];
    for strategy in [
        "prefix-cache",
        "kv-cache-utilization",
        "queue-size",
        "lora-affinity",
    ] {
        let mut service = example();
        router_role(&mut service)["strategy"] = json!(strategy);
        variants.push((format!("strategy {strategy}"), service));
    }
    let mut unset = example();
    router_role(&mut unset)
        .as_object_mut()
        .unwrap()
        .remove("strategy");
    variants.push(("no strategy".to_owned(), unset));

    let mut own = example();
    router_role(&mut own)["endpointPickerConfig"] = json!(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: random-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: random-picker\n"
    );
    variants.push(("own endpointPickerConfig".to_owned(), own));

    let mut templated = example();
    let role = router_role(&mut templated);
    role["replicas"] = json!(3);
    role["template"] = json!({
        "metadata": {"labels": {"team": "inference"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "router", "effect": "NoSchedule"}],
            "priorityClassName": "system-cluster-critical",
            "containers": [
                {"name": "epp", "args": ["--v", "4"],
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                 "ports": [{"name": "zmq", "containerPort": 5557}]},
                {"name": "log-shipper", "image": "fluent/fluent-bit:3.2",
                 "volumeMounts": [{"name": "logs", "mountPath": "/logs"}]},
            ],
            "volumes": [{"name": "logs", "emptyDir": {}}],
        },
    });
    variants.push(("three replicas with a template".to_owned(), templated));

    let mut no_rules = example();
    router_role(&mut no_rules)["httproute"] = json!({
        "parentRefs": [{"name": "inference-gateway", "namespace": "gateways", "sectionName": "https"}],
        "hostnames": ["qwen.example.com"],
    });
    variants.push(("route without rules".to_owned(), no_rules));

    let mut rich = example();
    router_role(&mut rich)["httproute"] = json!({
        "parentRefs": [{"name": "inference-gateway"}],
        "rules": [{
            "name": "completions",
            "matches": [
                {"path": {"type": "PathPrefix", "value": "/v1/completions"}},
                {"path": {"type": "Exact", "value": "/v1/chat/completions"}, "method": "POST"},
            ],
            "filters": [{"type": "RequestHeaderModifier",
                         "requestHeaderModifier": {"set": [{"name": "x-routed-by", "value": "tandem"}]}}],
            "timeouts": {"request": "600s"},
            "backendRefs": [{"name": "legacy", "port": 8000}],
        }],
    });
    variants.push(("route with filters and timeouts".to_owned(), rich));

    let mut unrouted = example();
    router_role(&mut unrouted)
        .as_object_mut()
        .unwrap()
        .remove("httproute");
    variants.push(("no httproute".to_owned(), unrouted));

    let mut namespaced = example();
    namespaced["metadata"]["namespace"] = json!("llm");
    variants.push(("in namespace llm".to_owned(), namespaced));
    variants
}

fn plan(name: &str, service: &Value, options: &RouterOptions) -> Vec<Value> {
    let service: InferenceService = serde_json::from_value(service.clone())
        .unwrap_or_else(|e| panic!("{name}: not an InferenceService: {e}"));
    let admission = tandem::api::inference_service::validate(&service.spec);
    assert!(
        admission.is_allowed(),
        "{name}: {}",
        admission.denial_message()
    );
    let checked = router::check(&service.spec);
    assert!(checked.is_allowed(), "{name}: {}", checked.denial_message());
    let named = tandem::plan::inference_service::names::check(
        service.metadata.name.as_deref().unwrap_or_default(),
        &service.spec,
    );
    assert!(named.is_allowed(), "{name}: {}", named.denial_message());
    router_objects(&service, options).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(name: &str, objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(found.len(), 1, "{name}: one {kind}");
    found[0]
}

fn upstream_schema(dir: &Path, file: &str) -> CrdSchema {
    let path = dir.join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let crd: Value = serde_norway::from_str(&text).unwrap();
    CrdSchema::from_crd(&crd, Some("v1"))
}

#[test]
fn core_objects_are_exactly_their_kubernetes_types() {
    for (name, service) in variants() {
        let objects = plan(&name, &service, &RouterOptions::default());
        assert_exactly::<ServiceAccount>(&name, one(&name, &objects, "ServiceAccount"));
        for binding in of_kind(&objects, "RoleBinding") {
            assert_exactly::<RoleBinding>(&name, binding);
        }
        assert_exactly::<ConfigMap>(&name, one(&name, &objects, "ConfigMap"));
        assert_exactly::<Deployment>(&name, one(&name, &objects, "Deployment"));
        assert_exactly::<Service>(&name, one(&name, &objects, "Service"));
        for object in &objects {
            assert!(
                object["metadata"]["ownerReferences"][0]["uid"].is_string(),
                "{name}: {} is owned by the service",
                object["kind"]
            );
        }
    }
}

#[test]
fn pool_and_route_fit_the_upstream_crds() {
    let Some(dir) = upstream_crds("pool_and_route_fit_the_upstream_crds") else {
        return;
    };
    let pool = upstream_schema(&dir, "inference.networking.k8s.io_inferencepools.yaml");
    let route = upstream_schema(&dir, "gateway.networking.k8s.io_httproutes.yaml");
    assert_eq!(pool.kind, "InferencePool");
    assert_eq!(route.kind, "HTTPRoute");
    let mut routes = 0;
    for (name, service) in variants() {
        let objects = plan(&name, &service, &RouterOptions::default());
        let errors = pool.errors(one(&name, &objects, "InferencePool"));
        assert!(errors.is_empty(), "{name}: InferencePool: {errors:#?}");
        for object in of_kind(&objects, "HTTPRoute") {
            let errors = route.errors(object);
            assert!(errors.is_empty(), "{name}: HTTPRoute: {errors:#?}");
            routes += 1;
        }
    }
    assert!(routes >= 3, "the variants exercise the route");
}

#[test]
fn the_schemas_catch_what_tandem_must_not_generate() {
    let Some(dir) = upstream_crds("the_schemas_catch_what_tandem_must_not_generate") else {
        return;
    };
    let pool = upstream_schema(&dir, "inference.networking.k8s.io_inferencepools.yaml");
    let route = upstream_schema(&dir, "gateway.networking.k8s.io_httproutes.yaml");
    let objects = plan("example", &example(), &RouterOptions::default());
    let mut bad_pool = one("example", &objects, "InferencePool").clone();
    bad_pool["spec"]["targetPortNumber"] = json!(8000);
    assert!(!pool.errors(&bad_pool).is_empty(), "v1alpha2's field in v1");
    let mut bad_route = one("example", &objects, "HTTPRoute").clone();
    bad_route["spec"]["rules"][0]["backendRefs"][0]["kind"] = json!(7);
    assert!(!route.errors(&bad_route).is_empty());
}

#[test]
fn the_example_routes_its_leaders_through_an_llm_d_picker() {
    let options = RouterOptions {
        epp_image: LLM_D_EPP_IMAGE.to_owned(),
    };
    let objects = plan("example", &example(), &options);
    let pool = one("example", &objects, "InferencePool");
    assert_eq!(pool["metadata"]["name"], "qwen-pd-routed-pool");
    assert_eq!(pool["metadata"]["namespace"], "default");
    assert_eq!(
        pool["spec"]["selector"]["matchLabels"],
        json!({"fusioninfer.io/service": "qwen-pd-routed", "leaderworkerset.sigs.k8s.io/worker-index": "0",
            "fusioninfer.io/traffic": "serving"}),
        "every leader in traffic (a draining replica's leave)"
    );
    assert_eq!(pool["spec"]["targetPorts"], json!([{"number": 8000}]));
    let route = one("example", &objects, "HTTPRoute");
    assert_eq!(
        route["spec"]["rules"][0]["matches"],
        json!([{"path": {"type": "PathPrefix", "value": "/v1"}}])
    );
    assert_eq!(
        route["spec"]["rules"][0]["backendRefs"][0]["name"],
        "qwen-pd-routed-pool"
    );
    let deployment = one("example", &objects, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        LLM_D_EPP_IMAGE
    );
    let config: Value = serde_norway::from_str(
        one("example", &objects, "ConfigMap")["data"][CONFIG_KEY]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let types: Vec<&str> = config["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"pd-profile-handler"), "{types:?}");
}

#[test]
fn every_configuration_is_an_endpoint_picker_config() {
    for (name, service) in variants() {
        let objects = plan(&name, &service, &RouterOptions::default());
        let text = one(&name, &objects, "ConfigMap")["data"][CONFIG_KEY]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: the ConfigMap holds {CONFIG_KEY}"));
        let config: Value = serde_norway::from_str(text)
            .unwrap_or_else(|e| panic!("{name}: configuration is not YAML: {e}\n{text}"));
        assert_eq!(
            config["apiVersion"], "inference.networking.x-k8s.io/v1alpha1",
            "{name}"
        );
        assert_eq!(config["kind"], "EndpointPickerConfig", "{name}");
        assert!(
            config["schedulingProfiles"]
                .as_array()
                .is_some_and(|p| !p.is_empty()),
            "{name}: scheduling profiles"
        );
        let deployment = one(&name, &objects, "Deployment");
        let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(
            args.as_array()
                .unwrap()
                .contains(&json!(format!("/config/{CONFIG_KEY}"))),
            "{name}: --config-file points at the mounted key"
        );
        let image = &deployment["spec"]["template"]["spec"]["containers"][0]["image"];
        assert_eq!(image, DEFAULT_EPP_IMAGE, "{name}");
    }
}
