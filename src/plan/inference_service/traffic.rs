//! The Gateway API objects through which NewRevision and IncrementalUpgrade
//! move traffic between revisions (seed 004, DESIGN.md §1.5), and what their
//! status says.
//!
//! | Object | Name | What it is for |
//! |---|---|---|
//! | Gateway | `{svc}-gateway` | one HTTP listener on the serving port, of `gatewayClassName` |
//! | HTTPRoute | `{svc}-route` | one weighted backend per revision; the weights sum to 100 |
//! | Service | `{svc}-{revision}` | one per revision: its leaders on the serving port |
//!
//! Nothing here exists for RollingUpdate and None, so those strategies work in
//! a cluster without the Gateway API. The objects are built from the
//! `gateway-api` crate's types, so their fields are the upstream CRDs'.

use std::collections::BTreeMap;

use gateway_api::apis::standard::gateways::{GatewayListeners, GatewaySpec};
use gateway_api::apis::standard::httproutes::{
    HttpRouteParentRefs, HttpRouteRules, HttpRouteRulesBackendRefs, HttpRouteSpec,
};
use serde_json::{Value, json};

use super::drain;
use super::router;
use super::upgrade::Gateway;
use crate::api::Findings;
use crate::api::inference_service::{InferenceService, InferenceServiceSpec};
use crate::plan::shared::children::{
    self, LWS_WORKER_INDEX, REVISION, SERVICE, service_labels, service_name,
};

pub const GATEWAY_API_VERSION: &str = crate::plan::shared::child_kinds::GATEWAY.api_version;
/// The Gateway's only listener.
pub const LISTENER: &str = "http";

/// `{svc}-gateway`: the Gateway.
pub fn gateway_name(service: &str) -> String {
    format!("{service}-gateway")
}

/// `{svc}-route`: the HTTPRoute. A router's route has the same name: with
/// NewRevision and IncrementalUpgrade the router's `httproute` is folded into
/// this one ([`pool_route`]), so the service has exactly one route.
pub fn route_name(service: &str) -> String {
    router::route_name(service)
}

/// `{svc}-{revision}`: the Service of one revision's leaders.
pub fn revision_service_name(service: &str, revision: &str) -> String {
    format!("{service}-{revision}")
}

/// What a side-by-side upgrade needs beyond the single-object rules: the
/// serving roles must listen on one port (the Services, the pools and the
/// listener have one). Nothing for RollingUpdate and None. The names it
/// makes are admission's ([`super::names::check`]).
pub fn check(spec: &InferenceServiceSpec) -> Findings {
    let mut findings = Findings::default();
    if !spec.upgrade_type().runs_revisions_side_by_side() {
        return findings;
    }
    if let Err(violation) = router::serving_port(spec) {
        findings.violations.push(violation);
    }
    findings
}

/// The Gateway: one HTTP listener on the serving port, as seed 004's example.
pub fn gateway(service: &InferenceService, class: &str, port: u16) -> Result<Value, String> {
    let svc = service_name(service);
    let spec = GatewaySpec {
        gateway_class_name: class.to_owned(),
        listeners: vec![GatewayListeners {
            name: LISTENER.to_owned(),
            protocol: "HTTP".to_owned(),
            port: i32::from(port),
            ..Default::default()
        }],
        ..Default::default()
    };
    Ok(json!({
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "Gateway",
        "metadata": children::metadata(service, &gateway_name(svc), &service_labels(svc)),
        "spec": to_value(&spec)?,
    }))
}

/// The HTTPRoute on the Gateway's listener: one rule with one backend per
/// revision, `(revision, weight)` in the order given, each the revision's
/// Service on the serving port.
pub fn route(
    service: &InferenceService,
    backends: &[(String, i32)],
    port: u16,
) -> Result<Value, String> {
    let svc = service_name(service);
    let spec = HttpRouteSpec {
        parent_refs: Some(vec![HttpRouteParentRefs {
            group: Some("gateway.networking.k8s.io".to_owned()),
            kind: Some("Gateway".to_owned()),
            name: gateway_name(svc),
            section_name: Some(LISTENER.to_owned()),
            ..Default::default()
        }]),
        rules: Some(vec![HttpRouteRules {
            backend_refs: Some(
                backends
                    .iter()
                    .map(|(revision, weight)| HttpRouteRulesBackendRefs {
                        name: revision_service_name(svc, revision),
                        port: Some(i32::from(port)),
                        weight: Some(*weight),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }]),
        ..Default::default()
    };
    Ok(json!({
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": children::metadata(service, &route_name(svc), &service_labels(svc)),
        "spec": to_value(&spec)?,
    }))
}

/// The HTTPRoute of a service with a router role: one weighted backend per
/// revision, each the revision's InferencePool (`(pool, weight)` in the order
/// given), on every rule of the router's `httproute` (its matches, filters,
/// timeouts and names kept, as [`router::route_spec`] does), attached to
/// Tandem's Gateway first and then to the `httproute`'s own parents, so
/// clients that reach the service through their own Gateway see the same
/// split. It replaces the router's own route of the same name: the service
/// has one route.
pub fn pool_route(
    service: &InferenceService,
    backends: &[(String, i32)],
    router_route: Option<&Value>,
) -> Value {
    let svc = service_name(service);
    let pools: Vec<Value> = backends
        .iter()
        .map(|(pool, weight)| router::pool_backend(pool, Some(*weight)))
        .collect();
    let mut spec = router::route_spec(router_route, &pools);
    let own = json!({
        "group": "gateway.networking.k8s.io",
        "kind": "Gateway",
        "name": gateway_name(svc),
        "sectionName": LISTENER,
    });
    let mut parents = vec![own];
    parents.extend(
        spec["parentRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| !is_own_gateway(service, p))
            .cloned(),
    );
    spec["parentRefs"] = Value::Array(parents);
    json!({
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": children::metadata(service, &route_name(svc), &service_labels(svc)),
        "spec": spec,
    })
}

/// Whether a parentRef names the service's own Gateway.
fn is_own_gateway(service: &InferenceService, reference: &Value) -> bool {
    reference["name"] == gateway_name(service_name(service)).as_str()
        && reference["kind"].as_str().is_none_or(|k| k == "Gateway")
        && reference["group"]
            .as_str()
            .is_none_or(|g| g == "gateway.networking.k8s.io")
        && reference["namespace"]
            .as_str()
            .is_none_or(|ns| Some(ns) == service.metadata.namespace.as_deref())
}

/// The Service of one revision: its leaders (LeaderWorkerSet's worker index
/// 0) on the serving port.
pub fn revision_service(service: &InferenceService, revision: &str, port: u16) -> Value {
    let svc = service_name(service);
    let mut labels = service_labels(svc);
    labels.insert(REVISION.to_owned(), revision.to_owned());
    // A draining replica's pods leave the Service (plan::inference_service::drain).
    let selector = BTreeMap::from([
        (SERVICE, svc),
        (REVISION, revision),
        (LWS_WORKER_INDEX, "0"),
        (drain::TRAFFIC, drain::SERVING),
    ]);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": children::metadata(service, &revision_service_name(svc, revision), &labels),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": LISTENER, "protocol": "TCP", "port": port, "targetPort": port}],
        },
    })
}

fn to_value(spec: &impl serde::Serialize) -> Result<Value, String> {
    serde_json::to_value(spec).map_err(|e| format!("could not write a Gateway API object: {e}"))
}

/// What the service's Gateway and HTTPRoute report, from its children: the
/// Gateway is Accepted and Programmed, and the route's parent status for that
/// Gateway is Accepted with ResolvedRefs. A condition counts only when it is
/// True and, when it says which generation it observed, was observed for the
/// object's current generation: weights written since the Gateway controller
/// last looked are not programmed yet.
pub fn observe(service: &InferenceService, children: &[Value]) -> Gateway {
    let svc = service_name(service);
    let find = |kind: &str, name: &str| {
        children.iter().find(|c| {
            c["apiVersion"] == GATEWAY_API_VERSION
                && c["kind"] == kind
                && c["metadata"]["name"] == name
        })
    };
    let gateway = find("Gateway", &gateway_name(svc));
    let route = find("HTTPRoute", &route_name(svc));
    let parent = route.and_then(|route| {
        route["status"]["parents"]
            .as_array()?
            .iter()
            .find(|p| is_own_gateway(service, &p["parentRef"]))
    });
    let generation =
        |object: Option<&Value>| object.and_then(|o| o["metadata"]["generation"].as_i64());
    let route_generation = generation(route);
    Gateway {
        accepted: gateway
            .is_some_and(|g| is_true(&g["status"]["conditions"], "Accepted", generation(Some(g)))),
        programmed: gateway.is_some_and(|g| {
            is_true(
                &g["status"]["conditions"],
                "Programmed",
                generation(Some(g)),
            )
        }),
        route_accepted: parent
            .is_some_and(|p| is_true(&p["conditions"], "Accepted", route_generation)),
        route_resolved_refs: parent
            .is_some_and(|p| is_true(&p["conditions"], "ResolvedRefs", route_generation)),
    }
}

fn is_true(conditions: &Value, type_: &str, generation: Option<i64>) -> bool {
    conditions.as_array().is_some_and(|conditions| {
        conditions.iter().any(|c| {
            c["type"] == type_
                && c["status"] == "True"
                && match (c["observedGeneration"].as_i64(), generation) {
                    (Some(observed), Some(current)) => observed >= current,
                    _ => true,
                }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(extra: Value) -> InferenceService {
        let mut value = json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "ai", "uid": "u-1"},
            "spec": {"roles": [
                {"name": "inference", "componentType": "worker", "replicas": 4,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1",
                    "ports": [{"containerPort": 8000}]}]}}},
            ],
            "upgradeStrategy": {"type": "IncrementalUpgrade", "incrementalUpgradeOptions":
                {"maxSurgePercent": 25, "stepSizePercent": 5, "intervalSeconds": 30, "gatewayClassName": "istio"}}}
        });
        json_patch::merge(&mut value, &extra);
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_gateway_has_one_http_listener_of_the_class() {
        let gateway = gateway(&service(json!({})), "istio", 8000).unwrap();
        assert_eq!(gateway["metadata"]["name"], "qwen-gateway");
        assert_eq!(gateway["metadata"]["namespace"], "ai");
        assert_eq!(gateway["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(
            gateway["spec"],
            json!({"gatewayClassName": "istio",
                   "listeners": [{"name": "http", "protocol": "HTTP", "port": 8000}]})
        );
    }

    #[test]
    fn the_route_has_one_weighted_backend_per_revision() {
        let backends = [("aaaaaaaaaa".to_owned(), 70), ("bbbbbbbbbb".to_owned(), 30)];
        let route = route(&service(json!({})), &backends, 8000).unwrap();
        assert_eq!(route["metadata"]["name"], "qwen-route");
        assert_eq!(
            route["spec"],
            json!({
                "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                "name": "qwen-gateway", "sectionName": "http"}],
                "rules": [{"backendRefs": [
                    {"name": "qwen-aaaaaaaaaa", "port": 8000, "weight": 70},
                    {"name": "qwen-bbbbbbbbbb", "port": 8000, "weight": 30},
                ]}],
            })
        );
    }

    #[test]
    fn a_revision_service_selects_that_revisions_leaders() {
        let object = revision_service(&service(json!({})), "aaaaaaaaaa", 8000);
        assert_eq!(object["metadata"]["name"], "qwen-aaaaaaaaaa");
        assert_eq!(object["metadata"]["labels"][REVISION], "aaaaaaaaaa");
        assert_eq!(
            object["spec"]["selector"],
            json!({SERVICE: "qwen", REVISION: "aaaaaaaaaa", LWS_WORKER_INDEX: "0", drain::TRAFFIC: drain::SERVING})
        );
        assert_eq!(
            object["spec"]["ports"],
            json!([{"name": "http", "protocol": "TCP", "port": 8000, "targetPort": 8000}])
        );
    }

    #[test]
    fn a_routers_route_splits_between_the_revisions_pools_and_keeps_its_rules() {
        let backends = [
            ("qwen-pool".to_owned(), 70),
            ("qwen-pool-bbbbbbbbbb".to_owned(), 30),
        ];
        let user = json!({
            "parentRefs": [{"name": "inference-gateway"}, {"name": "qwen-gateway", "namespace": "ai"}],
            "hostnames": ["llm.example.com"],
            "rules": [
                {"name": "v1", "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                 "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "x-team", "value": "a"}]}}],
                 "backendRefs": [{"name": "mine", "port": 8000}]},
                {"matches": [{"headers": [{"name": "x-model", "value": "qwen"}]}]},
            ],
        });
        let pools = json!([
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-pool", "weight": 70},
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-pool-bbbbbbbbbb", "weight": 30},
        ]);
        let route = pool_route(&service(json!({})), &backends, Some(&user));
        assert_eq!(route["metadata"]["name"], "qwen-route");
        assert_eq!(
            route["spec"],
            json!({
                // Tandem's Gateway first, the user's own after it, never twice.
                "parentRefs": [
                    {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "qwen-gateway", "sectionName": "http"},
                    {"name": "inference-gateway"},
                ],
                "hostnames": ["llm.example.com"],
                "rules": [
                    {"name": "v1", "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                     "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "x-team", "value": "a"}]}}],
                     "backendRefs": pools},
                    {"matches": [{"headers": [{"name": "x-model", "value": "qwen"}]}], "backendRefs": pools},
                ],
            })
        );
        // Without the router's httproute: one rule on Tandem's Gateway.
        let bare = pool_route(&service(json!({})), &backends[..1], None);
        assert_eq!(
            bare["spec"],
            json!({
                "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "qwen-gateway", "sectionName": "http"}],
                "rules": [{"backendRefs": [
                    {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-pool", "weight": 70}]}],
            })
        );
    }

    fn gateway_status(accepted: &str, programmed: &str, observed: i64) -> Value {
        json!({"apiVersion": GATEWAY_API_VERSION, "kind": "Gateway",
        "metadata": {"name": "qwen-gateway", "namespace": "ai", "generation": 1},
        "status": {"conditions": [
            {"type": "Accepted", "status": accepted, "observedGeneration": observed},
            {"type": "Programmed", "status": programmed, "observedGeneration": observed},
        ]}})
    }

    fn route_status(parent: &str, accepted: &str, resolved: &str, observed: i64) -> Value {
        json!({"apiVersion": GATEWAY_API_VERSION, "kind": "HTTPRoute",
        "metadata": {"name": "qwen-route", "namespace": "ai", "generation": 2},
        "status": {"parents": [{"controllerName": "istio.io/gateway-controller",
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": parent},
            "conditions": [
                {"type": "Accepted", "status": accepted, "observedGeneration": observed},
                {"type": "ResolvedRefs", "status": resolved, "observedGeneration": observed},
            ]}]}})
    }

    #[test]
    fn observe_reads_the_gateway_and_the_routes_parent() {
        let s = service(json!({}));
        let ready = [
            gateway_status("True", "True", 1),
            route_status("qwen-gateway", "True", "True", 2),
        ];
        assert_eq!(observe(&s, &ready), Gateway::READY);
        assert_eq!(observe(&s, &[]), Gateway::default());
        let cases = [
            (
                "not programmed",
                [gateway_status("True", "False", 1), ready[1].clone()],
                Gateway {
                    programmed: false,
                    ..Gateway::READY
                },
            ),
            (
                "gateway status of an older generation",
                [gateway_status("True", "True", 0), ready[1].clone()],
                Gateway {
                    accepted: false,
                    programmed: false,
                    ..Gateway::READY
                },
            ),
            (
                "refs not resolved",
                [
                    ready[0].clone(),
                    route_status("qwen-gateway", "True", "False", 2),
                ],
                Gateway {
                    route_resolved_refs: false,
                    ..Gateway::READY
                },
            ),
            (
                "weights not programmed yet",
                [
                    ready[0].clone(),
                    route_status("qwen-gateway", "True", "True", 1),
                ],
                Gateway {
                    route_accepted: false,
                    route_resolved_refs: false,
                    ..Gateway::READY
                },
            ),
            (
                "accepted by another parent only",
                [ready[0].clone(), route_status("other", "True", "True", 2)],
                Gateway {
                    route_accepted: false,
                    route_resolved_refs: false,
                    ..Gateway::READY
                },
            ),
        ];
        for (name, children, expected) in cases {
            assert_eq!(observe(&s, &children), expected, "{name}");
        }
    }

    #[test]
    fn only_side_by_side_strategies_need_one_serving_port() {
        let two_ports = json!({"spec": {"roles": [
            {"name": "a", "componentType": "worker", "template": {"spec": {"containers": [
                {"name": "vllm", "image": "vllm:1", "ports": [{"containerPort": 8000}]}]}}},
            {"name": "b", "componentType": "worker", "template": {"spec": {"containers": [
                {"name": "vllm", "image": "vllm:1", "ports": [{"containerPort": 9000}]}]}}},
        ]}});
        let mut rolling = two_ports.clone();
        rolling["spec"]["upgradeStrategy"] = json!({"type": "RollingUpdate"});
        assert!(check(&service(rolling).spec).is_allowed());
        assert!(!check(&service(two_ports).spec).is_allowed());
        assert!(check(&service(json!({})).spec).is_allowed());
    }
}
