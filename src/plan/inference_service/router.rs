//! The router role: what Tandem creates so a Gateway routes requests to the
//! serving roles through an endpoint picker (EPP) of the Gateway API Inference
//! Extension (GIE).
//!
//! For a service `{svc}` with a router role:
//!
//! | Object | Name | What it is for |
//! |---|---|---|
//! | ServiceAccount | `{svc}-epp` | the EPP's identity |
//! | RoleBinding | `{svc}-epp-reader`, and with 2+ replicas `{svc}-epp-leader-election` | what the EPP reads, nothing more: the ClusterRoles `tandem-endpoint-picker` and `tandem-endpoint-picker-leader-election` that Tandem ships, bound in the service's namespace |
//! | ConfigMap | `{svc}-epp` | the EPP's `EndpointPickerConfig` |
//! | Deployment | `{svc}-epp` | the EPP pods |
//! | Service | `{svc}-epp` | the ext-proc (gRPC) endpoint the Gateway calls, and metrics |
//! | InferencePool | `{svc}-pool` | the leaders of every serving role, and which EPP picks among them |
//! | HTTPRoute | `{svc}-route` | the user's matches and filters, with the pool as the only backend |
//!
//! With NewRevision and IncrementalUpgrade ([`revision_router_objects`]) each
//! revision has its own pool (selecting only its leaders) and endpoint picker
//! (ConfigMap, Deployment, Service), `{svc}-pool`/`{svc}-epp` for a revision
//! with the seed's replica names and `{svc}-pool-{revision}`/`{svc}-epp-{revision}`
//! for a suffixed one; the RBAC is shared, and the route is the upgrade's
//! (`super::traffic::pool_route`), which folds in the router's `httproute`.
//!
//! Versions. The EPP's flags, ports, probes and RBAC follow GIE v1.5.0
//! (`registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0`, the last
//! release that ships the endpoint picker: v1.6.0 moved it to llm-d's router
//! repository and builds only the conformance picker `lwepp`):
//! `pkg/epp/server/options.go` (flags and defaults), `cmd/epp/runner/health.go`
//! (gRPC health services), `config/charts/epplib/templates/_deployment.yaml` and
//! `config/charts/epplib/templates/{_rbac,_leader-election-rbac,_service}.yaml`
//! in kubernetes-sigs/gateway-api-inference-extension. The plugin names of the
//! generated configurations are those `cmd/epp/runner/runner.go` registers
//! (`queue-scorer`, `kv-cache-utilization-scorer`, `prefix-cache-scorer`,
//! `lora-affinity-scorer`, `max-score-picker`, `single-profile-handler`), as in
//! GIE's `site-src/guides/epp-configuration/config-text.md` and
//! `config/charts/inferencepool/templates/epp-config.yaml`, and, for
//! prefill/decode disaggregation, from llm-d-inference-scheduler's
//! `docs/architecture.md`, `pkg/plugins/filter/by_label.go` and
//! `deploy/config/pd-epp-config.yaml`, as of v0.4.0 (`pkg/plugins/register.go`,
//! `pkg/plugins/profile/pd_profile_handler.go`, `pkg/plugins/pre-request/pd_prerequest.go`),
//! whose runner is GIE v1.2.0's (`cmd/epp/runner/runner.go`: the same flags).
//! The tests build GIE v1.5.0's `cmd/epp` and llm-d v0.4.0's from their Go
//! modules and run each on every configuration generated for it
//! (`tests/cluster/pickers.rs`).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::api::inference_service::{
    ComponentType, InferenceService, InferenceServiceSpec, ROUTER_CONTAINER, RequestQueue, Role,
    RoutingStrategy,
};
use crate::api::{Findings, Violation};

use super::drain;
use crate::plan::shared::children::{
    self, COMPONENT_TYPE, LWS_WORKER_INDEX, Naming, REVISION, SERVICE, role_labels, service_labels,
    service_name,
};

/// The GIE endpoint picker whose flags, ports and plugins this module uses:
/// GIE v1.5.0, the last release with an `epp` image (registry path as in its
/// Makefile, `IMAGE_NAME := epp`, and its quickstarts). It serves the
/// InferencePool `v1` that Tandem writes. `tests/cluster/pickers.rs` holds
/// this tag to the module version the tests build and run.
pub const DEFAULT_EPP_IMAGE: &str = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0";

/// llm-d's endpoint picker whose P/D plugin names (`pd-profile-handler`,
/// `prefill-header-handler`, `by-label`) the `pd-disaggregation` strategy
/// generates. GIE's image has none of them: pass this image (or a compatible
/// llm-d release) as `--epp-image`, or as the router template's `epp`
/// container image, for `pd-disaggregation`. v0.4.0 is the newest release
/// the tests can build (v0.5's `llm-d-kv-cache` module is not served by the
/// Go module proxy), and the first whose runner (GIE v1.2.0's) takes every
/// flag Tandem writes: v0.3.2's (GIE v1.0.0's `cmd/epp/runner/runner.go`)
/// defines no `--metrics-endpoint-auth`, and Go's flag package exits on a
/// flag it does not define. Later llm-d releases renamed
/// the P/D plugins (`disagg-profile-handler`, `disagg-headers-handler`) and
/// reshaped their parameters; with those, set `endpointPickerConfig`
/// instead. `tests/cluster/pickers.rs` holds this tag to the module version
/// the tests build and run.
pub const LLM_D_EPP_IMAGE: &str = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.4.0";

/// `app.kubernetes.io/component`: `router` on every router object.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// `app.kubernetes.io/name`: `{svc}-epp` on the EPP pods; selects them.
pub const NAME: &str = "app.kubernetes.io/name";
/// Pod-template annotation with a hash of the EPP configuration. The EPP reads
/// its configuration only at startup (GIE config-text.md: "only read on
/// startup"), so a new configuration must roll the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "fusioninfer.io/epp-config-hash";

/// The EPP's ext-proc gRPC port, which the Gateway calls (GIE options.go: `--grpc-port`, default 9002).
pub const EXT_PROC_PORT: u16 = 9002;
/// The EPP's gRPC health port (`--grpc-health-port`, default 9003).
pub const HEALTH_PORT: u16 = 9003;
/// The EPP's Prometheus metrics port (`--metrics-port`, default 9090).
pub const METRICS_PORT: u16 = 9090;
/// The model servers' port when no serving role declares one (vLLM's default).
pub const DEFAULT_SERVING_PORT: u16 = 8000;

/// Key of the EPP configuration in the ConfigMap, and the file name it is mounted as.
pub const CONFIG_KEY: &str = "epp-config.yaml";
/// Where the ConfigMap is mounted in the EPP container.
pub const CONFIG_DIR: &str = "/config";
/// Volume names Tandem adds to the EPP pod; a router template must not use them.
pub const CONFIG_VOLUME: &str = "tandem-epp-config";
pub const TMP_VOLUME: &str = "tandem-epp-tmp";
/// A writable scratch directory, since the root filesystem is read-only.
pub const TMP_DIR: &str = "/tmp";
/// The uid of GIE's and llm-d's EPP images (distroless `nonroot`, llm-d's
/// `USER 65532:65532`); used when the template sets no other non-root user.
pub const EPP_UID: i64 = 65532;

/// GIE's plugin configuration kind (config-text.md: "The first two lines of the
/// configuration are constant and must appear as is").
const CONFIG_API_VERSION: &str = "inference.networking.x-k8s.io/v1alpha1";
const CONFIG_KIND: &str = "EndpointPickerConfig";

/// How Tandem runs the endpoint picker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterOptions {
    /// The EPP image, unless the router template's container sets its own.
    pub epp_image: String,
}

impl Default for RouterOptions {
    fn default() -> Self {
        RouterOptions {
            epp_image: DEFAULT_EPP_IMAGE.to_owned(),
        }
    }
}

/// `{svc}-epp`: the EPP's ServiceAccount, Role, RoleBinding, ConfigMap, Deployment and Service.
pub fn epp_name(service: &str) -> String {
    format!("{service}-epp")
}

/// `{svc}-pool`: the InferencePool.
pub fn pool_name(service: &str) -> String {
    format!("{service}-pool")
}

/// `{svc}-route`: the HTTPRoute.
pub fn route_name(service: &str) -> String {
    format!("{service}-route")
}

/// The port of the model servers: the `containerPort` of the first port of the
/// first container of the serving roles' templates, 8000 when none declares
/// one. The InferencePool has one target port for the leaders of every serving
/// role, so serving roles that declare a first port must agree; the first role
/// that disagrees is the violation.
pub fn serving_port(spec: &InferenceServiceSpec) -> Result<u16, Violation> {
    let mut first: Option<(u16, String)> = None;
    for (i, role) in spec.roles.iter().enumerate() {
        if role.is_router() {
            continue;
        }
        let Some(value) = role
            .template
            .as_ref()
            .and_then(|t| t.pointer("/spec/containers/0/ports/0/containerPort"))
        else {
            continue;
        };
        let field = format!("spec.roles[{i}].template.spec.containers[0].ports[0].containerPort");
        let Some(port) = value
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            return Err(Violation {
                field,
                reason: format!("must be a port number between 1 and 65535, got {value}"),
            });
        };
        match &first {
            None => first = Some((port, field)),
            Some((expected, at)) if *expected != port => {
                return Err(Violation {
                    field,
                    reason: format!(
                        "serving roles must listen on the same port, got {port} but {at} is {expected}: \
                         the router's InferencePool sends requests to one port on the leaders of every serving role"
                    ),
                });
            }
            Some(_) => {}
        }
    }
    Ok(first.map_or(DEFAULT_SERVING_PORT, |(port, _)| port))
}

/// The router rules admission enforces beyond single fields: everything
/// [`router_objects`] needs to build objects that deploy and route. Nothing
/// when the service has no router. The names made from the service's name
/// are checked by [`super::names`].
pub fn check(spec: &InferenceServiceSpec) -> Findings {
    let mut findings = Findings::default();
    let Some((r, router)) = router_of(spec) else {
        return findings;
    };
    let at = format!("spec.roles[{r}]");
    if let Err(violation) = serving_port(spec) {
        findings.violations.push(violation);
    }
    check_strategy(spec, router, &at, &mut findings);
    if let Some(route) = &router.httproute {
        check_route(route, &format!("{at}.httproute"), &mut findings);
    }
    if let Some(template) = &router.template {
        check_template(template, &format!("{at}.template"), &mut findings);
    }
    findings
}

/// GIE's endpoint-picker image, whatever its tag: it has none of llm-d's
/// plugins.
const GIE_EPP_REPOSITORY: &str = "registry.k8s.io/gateway-api-inference-extension/epp";

/// Why the router of `spec` will not work with the endpoint picker it
/// runs: the image of its template's EPP container when set, else
/// `epp_image` (Tandem's `--epp-image`). `strategy: pd-disaggregation`
/// (without an `endpointPickerConfig` of the user's) configures llm-d's
/// prefill/decode plugins, which GIE's image (the default,
/// [`DEFAULT_EPP_IMAGE`]) does not have. A warning, said alike by the webhook
/// and by `tandem render`; None for any other strategy, a config of the
/// user's, or another image.
pub fn epp_image_warning(spec: &InferenceServiceSpec, epp_image: &str) -> Option<String> {
    let (index, router) = router_of(spec)?;
    let generated_pd = router.strategy == Some(RoutingStrategy::PdDisaggregation)
        && router.endpoint_picker_config.is_none();
    let containers = array_at(
        router.template.as_ref().and_then(|t| t.get("spec")),
        "containers",
    );
    let own_image = containers
        .get(epp_index(containers))
        .and_then(|c| c.get("image"))
        .and_then(Value::as_str)
        .filter(|i| !i.trim().is_empty());
    let image = own_image.unwrap_or(epp_image);
    let gie = image
        .strip_prefix(GIE_EPP_REPOSITORY)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', '@']));
    (generated_pd && gie).then(|| {
        let fix = if own_image.is_some() {
            format!("set the image of the router template's {ROUTER_CONTAINER:?} container to {LLM_D_EPP_IMAGE} (or a compatible llm-d release)")
        } else {
            format!(
                "run Tandem with --epp-image {LLM_D_EPP_IMAGE} (or a compatible llm-d release; \
                 the chart's value endpointPicker.image), or give the router's template an \
                 {ROUTER_CONTAINER:?} container with that image"
            )
        };
        format!(
            "spec.roles[{index}].strategy: pd-disaggregation configures llm-d's prefill/decode plugins, \
             which exist only in llm-d's endpoint picker; the router runs {image}, which has none of them: {fix}"
        )
    })
}

fn router_of(spec: &InferenceServiceSpec) -> Option<(usize, &Role)> {
    spec.roles.iter().enumerate().find(|(_, r)| r.is_router())
}

fn check_strategy(spec: &InferenceServiceSpec, router: &Role, at: &str, findings: &mut Findings) {
    match (router.strategy, &router.endpoint_picker_config) {
        (Some(strategy), Some(_)) => findings.warn(format!(
            "{at}.strategy ({}) is ignored: {at}.endpointPickerConfig is used as the endpoint picker's configuration",
            strategy_name(strategy)
        )),
        (Some(RoutingStrategy::PdDisaggregation), None)
            if !spec
                .roles
                .iter()
                .any(|r| r.component_type == ComponentType::Decoder) =>
        {
            findings.deny(
                format!("{at}.strategy"),
                "pd-disaggregation needs prefiller and decoder roles: this service has none, so the decode profile would never find an endpoint",
            )
        }
        _ => {}
    }
}

/// The fields of an HTTPRouteSpec rule Tandem keeps; the rest is dropped and
/// the backends are replaced by the pool.
const KEPT_RULE_FIELDS: [&str; 4] = ["name", "matches", "filters", "timeouts"];

fn check_route(route: &Value, at: &str, findings: &mut Findings) {
    if route
        .get("parentRefs")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        findings.warn(format!(
            "{at}.parentRefs is empty: the HTTPRoute attaches to no Gateway and routes nothing"
        ));
    }
    if let Some(spec) = route.as_object() {
        for key in spec.keys() {
            if !["parentRefs", "hostnames", "rules"].contains(&key.as_str()) {
                findings.warn(format!(
                    "{at}.{key} is ignored: Tandem keeps parentRefs, hostnames and rules"
                ));
            }
        }
    }
    for (i, rule) in route
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        for key in rule.as_object().into_iter().flat_map(|r| r.keys()) {
            if key == "backendRefs" {
                findings.warn(format!(
                    "{at}.rules[{i}].backendRefs is replaced: every rule routes to the service's InferencePool"
                ));
            } else if !KEPT_RULE_FIELDS.contains(&key.as_str()) {
                findings.warn(format!(
                    "{at}.rules[{i}].{key} is ignored: Tandem keeps each rule's name, matches, filters and timeouts"
                ));
            }
        }
    }
}

fn check_template(template: &Value, at: &str, findings: &mut Findings) {
    let pod = template.get("spec");
    if pod
        .and_then(|p| p.get("serviceAccountName"))
        .is_some_and(|v| !v.is_null())
    {
        findings.deny(
            format!("{at}.spec.serviceAccountName"),
            "must not be set: the endpoint picker runs as the ServiceAccount <service>-epp that Tandem grants what it reads",
        );
    }
    for (v, volume) in array_at(pod, "volumes").iter().enumerate() {
        if let Some(name) = volume.get("name").and_then(Value::as_str)
            && (name == CONFIG_VOLUME || name == TMP_VOLUME)
        {
            findings.deny(
                format!("{at}.spec.volumes[{v}].name"),
                format!("{name:?} is reserved: Tandem adds this volume to the endpoint picker pod"),
            );
        }
    }
    let containers = array_at(pod, "containers");
    let epp = epp_index(containers);
    for (c, container) in containers.iter().enumerate() {
        let container_at = format!("{at}.spec.containers[{c}]");
        if c == epp {
            for (m, mount) in array_at(Some(container), "volumeMounts").iter().enumerate() {
                if let Some(path) = mount.get("mountPath").and_then(Value::as_str)
                    && (path.trim_end_matches('/') == CONFIG_DIR
                        || path.trim_end_matches('/') == TMP_DIR)
                {
                    findings.deny(
                        format!("{container_at}.volumeMounts[{m}].mountPath"),
                        format!("{path:?} is reserved: Tandem mounts the endpoint picker's configuration at {CONFIG_DIR} and scratch space at {TMP_DIR}"),
                    );
                }
            }
            continue;
        }
        for (p, port) in array_at(Some(container), "ports").iter().enumerate() {
            if let Some(number) = port.get("containerPort").and_then(Value::as_u64)
                && [EXT_PROC_PORT, HEALTH_PORT, METRICS_PORT]
                    .iter()
                    .any(|own| u64::from(*own) == number)
            {
                findings.deny(
                    format!("{container_at}.ports[{p}].containerPort"),
                    format!("{number} is the endpoint picker's (ext-proc {EXT_PROC_PORT}, health {HEALTH_PORT}, metrics {METRICS_PORT}); another container of its pod cannot listen on it"),
                );
            }
        }
    }
}

fn array_at<'a>(value: Option<&'a Value>, key: &str) -> &'a [Value] {
    value
        .and_then(|v| v.get(key))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The container of the router template that becomes the EPP: the one named
/// `epp`, else the first.
fn epp_index(containers: &[Value]) -> usize {
    containers
        .iter()
        .position(|c| c.get("name").and_then(Value::as_str) == Some(ROUTER_CONTAINER))
        .unwrap_or(0)
}

fn strategy_name(strategy: RoutingStrategy) -> &'static str {
    match strategy {
        RoutingStrategy::PrefixCache => "prefix-cache",
        RoutingStrategy::KvCacheUtilization => "kv-cache-utilization",
        RoutingStrategy::QueueSize => "queue-size",
        RoutingStrategy::LoraAffinity => "lora-affinity",
        RoutingStrategy::PdDisaggregation => "pd-disaggregation",
    }
}

/// The EPP configuration (YAML): `endpointPickerConfig` verbatim when set, else
/// generated from `strategy` (prefix-cache when unset):
///
/// - `prefix-cache`: GIE's default profile (`config/charts/inferencepool/templates/epp-config.yaml`):
///   `queue-scorer` (weight 2), `kv-cache-utilization-scorer` (2),
///   `prefix-cache-scorer` (3), then `max-score-picker`.
/// - `kv-cache-utilization`, `queue-size`, `lora-affinity`: that one scorer
///   (`kv-cache-utilization-scorer`, `queue-scorer`, `lora-affinity-scorer`)
///   with `max-score-picker` (GIE config-text.md, "Plugin Configuration").
///
///   Every single-profile configuration names `single-profile-handler`, which
///   GIE would otherwise add itself.
/// - `pd-disaggregation`: llm-d's prefill/decode profiles, as in llm-d's
///   `deploy/config/pd-epp-config.yaml`: `pd-profile-handler` runs the `decode`
///   profile and then the `prefill` profile, `prefill-header-handler` tells the
///   decode pod which prefill pod to use, and each profile scores with
///   `prefix-cache-scorer` (2) and `queue-scorer` (1) and picks with
///   `max-score-picker`. The two profiles filter pods with llm-d's `by-label`
///   filter on Tandem's `fusioninfer.io/component-type` label (`prefiller`,
///   `decoder`) rather than llm-d's `prefill-filter`/`decode-filter`, which
///   read an `llm-d.ai/role` label Tandem's pods do not carry.
///
///   **These plugins exist only in llm-d's EPP image
///   (llm-d-inference-scheduler, e.g. [`LLM_D_EPP_IMAGE`]), not in GIE's:
///   `pd-disaggregation` needs `--epp-image` pointing at llm-d's.** The decode
///   pods must also run llm-d's routing sidecar (which reads the prefill header)
///   as the container whose port the pool targets. Newer llm-d releases renamed
///   these plugins; use `endpointPickerConfig` with those.
pub fn endpoint_picker_config(role: &Role) -> Result<String, String> {
    if !role.is_router() {
        return Err(format!(
            "role {:?} is a {}: only a router has an endpoint picker",
            role.name, role.component_type
        ));
    }
    if let Some(config) = &role.endpoint_picker_config {
        return Ok(config.clone());
    }
    let strategy = role.strategy.unwrap_or(RoutingStrategy::PrefixCache);
    let mut config = generated_config(strategy);
    if let Some(queue) = &role.queue {
        queued(&mut config, queue);
    }
    serde_norway::to_string(&config).map_err(|e| {
        format!(
            "cannot write the {} endpoint picker configuration as YAML: {e}",
            strategy_name(strategy)
        )
    })
}

/// The feature gate of GIE v1.5.0's flow control
/// (`pkg/epp/flowcontrol/config.go`). It must be in the parsed
/// configuration: the runner decides which admission controller to run from
/// the gates it read before its deprecated environment variable
/// (`ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER`) is folded in
/// (`cmd/epp/runner/runner.go`), so the variable alone leaves the legacy
/// controller, which answers 503 when the pool has no pods.
pub const FLOW_CONTROL_GATE: &str = "flowControl";

/// Turns on GIE's flow control in `config` with the router's queue: requests
/// are held while the pool is saturated, and a pool without pods is
/// saturated (the utilization detector's saturation of no endpoints is 1.0,
/// `saturationdetector/utilization/detector.go`), so they wait for the
/// first pod instead of a 503. `defaultRequestTTL` is a duration string
/// (`metav1.Duration`, parsed by `time.ParseDuration`); `maxRequests` a
/// quantity. The loader adds the saturation detector and the queue's
/// policies by itself (`pkg/epp/config/loader/defaults.go`).
fn queued(config: &mut Value, queue: &RequestQueue) {
    let mut flow = json!({"defaultRequestTTL": format!("{}s", queue.timeout_seconds())});
    if let Some(count) = queue.max_requests {
        flow["maxRequests"] = json!(count);
    }
    config["featureGates"] = json!([FLOW_CONTROL_GATE]);
    config["flowControl"] = flow;
}

fn plugin(plugin_type: &str) -> Value {
    json!({"type": plugin_type})
}

fn plugin_ref(name: &str, weight: Option<u32>) -> Value {
    match weight {
        Some(weight) => json!({"pluginRef": name, "weight": weight}),
        None => json!({"pluginRef": name}),
    }
}

fn config(plugins: Vec<Value>, profiles: Vec<Value>) -> Value {
    json!({
        "apiVersion": CONFIG_API_VERSION,
        "kind": CONFIG_KIND,
        "plugins": plugins,
        "schedulingProfiles": profiles,
    })
}

/// One `default` profile: the scorers with their weights, then the picker.
fn single_profile(scorers: &[(&str, u32)]) -> Value {
    let mut plugins: Vec<Value> = scorers.iter().map(|(s, _)| plugin(s)).collect();
    plugins.push(plugin("max-score-picker"));
    plugins.push(plugin("single-profile-handler"));
    let mut refs: Vec<Value> = scorers
        .iter()
        .map(|(s, w)| plugin_ref(s, Some(*w)))
        .collect();
    refs.push(plugin_ref("max-score-picker", None));
    config(plugins, vec![json!({"name": "default", "plugins": refs})])
}

/// Instance names of the two `by-label` filters of the P/D configuration.
const PREFILLER_FILTER: &str = "prefiller-filter";
const DECODER_FILTER: &str = "decoder-filter";

fn generated_config(strategy: RoutingStrategy) -> Value {
    match strategy {
        RoutingStrategy::PrefixCache => single_profile(&[
            ("queue-scorer", 2),
            ("kv-cache-utilization-scorer", 2),
            ("prefix-cache-scorer", 3),
        ]),
        RoutingStrategy::KvCacheUtilization => {
            single_profile(&[("kv-cache-utilization-scorer", 1)])
        }
        RoutingStrategy::QueueSize => single_profile(&[("queue-scorer", 1)]),
        RoutingStrategy::LoraAffinity => single_profile(&[("lora-affinity-scorer", 1)]),
        RoutingStrategy::PdDisaggregation => {
            let by_component = |name: &str, component: ComponentType| {
                json!({
                    "name": name,
                    "type": "by-label",
                    "parameters": {
                        "label": COMPONENT_TYPE,
                        "validValues": [component.as_str()],
                        "allowsNoLabel": false,
                    },
                })
            };
            let profile = |name: &str, filter: &str| {
                json!({"name": name, "plugins": [
                    plugin_ref(filter, None),
                    plugin_ref("prefix-cache-scorer", Some(2)),
                    plugin_ref("queue-scorer", Some(1)),
                    plugin_ref("max-score-picker", None),
                ]})
            };
            config(
                vec![
                    plugin("prefill-header-handler"),
                    plugin("prefix-cache-scorer"),
                    plugin("queue-scorer"),
                    by_component(PREFILLER_FILTER, ComponentType::Prefiller),
                    by_component(DECODER_FILTER, ComponentType::Decoder),
                    plugin("max-score-picker"),
                    plugin("pd-profile-handler"),
                ],
                vec![
                    profile("prefill", PREFILLER_FILTER),
                    profile("decode", DECODER_FILTER),
                ],
            )
        }
    }
}

/// Everything Tandem creates for the service's router role, empty without one.
/// All objects are named from the service, live in its namespace, are owned by
/// it and are labelled with the service labels and `app.kubernetes.io/component:
/// router`. Without `httproute` on the router there is no HTTPRoute: a route
/// needs `parentRefs` to attach to a Gateway, and Tandem cannot guess them, so
/// the pool is then reachable only through routes the user writes.
///
/// This is the router of RollingUpdate and None, where one pool selects the
/// leaders of every revision. NewRevision and IncrementalUpgrade use
/// [`revision_router_objects`] instead.
pub fn router_objects(
    service: &InferenceService,
    options: &RouterOptions,
) -> Result<Vec<Value>, String> {
    let Some(router) = checked_router(service)? else {
        return Ok(Vec::new());
    };
    let svc = service_name(service);
    let mut objects = rbac_objects(service, router);
    objects.extend(picker_objects(service, router, options, None)?);
    if let Some(route) = &router.httproute {
        objects.push(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": children::metadata(service, &route_name(svc), &object_labels(svc)),
            "spec": route_spec(Some(route), &[pool_backend(&pool_name(svc), None)]),
        }));
    }
    Ok(objects)
}

/// One revision that runs side by side with another (NewRevision,
/// IncrementalUpgrade), and how its replicas are named: its pool and endpoint
/// picker are named the same way.
#[derive(Clone, Copy, Debug)]
pub struct RevisionPool<'a> {
    pub revision: &'a str,
    pub naming: &'a Naming,
}

/// The endpoint picker of one revision: `{svc}-epp` for a revision whose
/// replicas have the seed's names (so a service that was never upgraded keeps
/// today's names), `{svc}-epp-{revision}` for one whose replicas are suffixed.
pub fn revision_epp_name(service: &str, naming: &Naming) -> String {
    match naming {
        Naming::Plain => epp_name(service),
        Naming::Suffixed(suffix) => format!("{}-{suffix}", epp_name(service)),
    }
}

/// The InferencePool of one revision: `{svc}-pool` or `{svc}-pool-{revision}`,
/// as [`revision_epp_name`].
pub fn revision_pool_name(service: &str, naming: &Naming) -> String {
    match naming {
        Naming::Plain => pool_name(service),
        Naming::Suffixed(suffix) => format!("{}-{suffix}", pool_name(service)),
    }
}

/// The router of a service whose revisions run side by side (NewRevision,
/// IncrementalUpgrade), empty without a router role: one ServiceAccount
/// and its RoleBindings shared by every endpoint picker (what they read
/// is the same), and for each revision its own InferencePool, selecting only
/// that revision's leaders, and its own endpoint picker (ConfigMap,
/// Deployment, Service), since an endpoint picker serves exactly one pool.
/// There is no HTTPRoute here: the upgrade's route (see
/// [`super::traffic::pool_route`]) is the one route of the service, with the
/// router's `httproute` folded into it.
pub fn revision_router_objects(
    service: &InferenceService,
    options: &RouterOptions,
    revisions: &[RevisionPool<'_>],
) -> Result<Vec<Value>, String> {
    let Some(router) = checked_router(service)? else {
        return Ok(Vec::new());
    };
    let mut objects = rbac_objects(service, router);
    for revision in revisions {
        objects.extend(picker_objects(service, router, options, Some(revision))?);
    }
    Ok(objects)
}

/// The router role, once the service's ports are known to fit it (its
/// names are admission's: [`super::names::check`]).
fn checked_router(service: &InferenceService) -> Result<Option<&Role>, String> {
    let Some((_, router)) = router_of(&service.spec) else {
        return Ok(None);
    };
    serving_port(&service.spec).map_err(|v| v.to_string())?;
    Ok(Some(router))
}

/// The ClusterRole, shipped with Tandem (`manifests/base/rbac.yaml`), of what
/// an endpoint picker reads in its namespace; bound there per service.
pub const PICKER_CLUSTER_ROLE: &str = "tandem-endpoint-picker";
/// The ClusterRole of what endpoint pickers need to elect a leader among
/// their replicas; bound only for a router of more than one replica.
pub const PICKER_LEADER_ELECTION_CLUSTER_ROLE: &str = "tandem-endpoint-picker-leader-election";

/// The RoleBinding of a service's endpoint pickers to [`PICKER_CLUSTER_ROLE`].
pub fn reader_binding_name(service: &str) -> String {
    format!("{}-reader", epp_name(service))
}

/// The RoleBinding of a service's endpoint pickers to
/// [`PICKER_LEADER_ELECTION_CLUSTER_ROLE`].
pub fn leader_election_binding_name(service: &str) -> String {
    format!("{}-leader-election", epp_name(service))
}

/// The endpoint pickers' ServiceAccount `{svc}-epp`, and RoleBindings in the
/// service's namespace to the ClusterRoles Tandem ships: Tandem holds `bind`
/// on those two by name, not their rules, so it grants nothing it was not
/// given to grant (Kubernetes lets a binding be made by who may bind its
/// role).
fn rbac_objects(service: &InferenceService, router: &Role) -> Vec<Value> {
    let svc = service_name(service);
    let epp = epp_name(svc);
    let meta = |name: &str| children::metadata(service, name, &object_labels(svc));
    let binding = |name: String, role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": meta(&name),
            "subjects": [{"kind": "ServiceAccount", "name": epp, "namespace": namespace(service)}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        })
    };
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(&epp)}),
        binding(reader_binding_name(svc), PICKER_CLUSTER_ROLE),
    ];
    if router.replicas() > 1 {
        objects.push(binding(
            leader_election_binding_name(svc),
            PICKER_LEADER_ELECTION_CLUSTER_ROLE,
        ));
    }
    objects
}

/// One endpoint picker (ConfigMap, Deployment, Service) and the pool it
/// serves: for the whole service (`revision` None: the pool selects every
/// serving leader), or for one revision (the pool selects that revision's
/// leaders, and every object carries the revision label).
fn picker_objects(
    service: &InferenceService,
    router: &Role,
    options: &RouterOptions,
    revision: Option<&RevisionPool<'_>>,
) -> Result<Vec<Value>, String> {
    let svc = service_name(service);
    let port = serving_port(&service.spec).map_err(|v| v.to_string())?;
    let config = endpoint_picker_config(router)?;
    let mut labels = object_labels(svc);
    // A draining replica's pods leave the pool (plan::inference_service::drain).
    let mut pool_selector = BTreeMap::from([
        (SERVICE.to_owned(), svc.to_owned()),
        (LWS_WORKER_INDEX.to_owned(), "0".to_owned()),
        (drain::TRAFFIC.to_owned(), drain::SERVING.to_owned()),
    ]);
    let names = match revision {
        None => Picker {
            epp: epp_name(svc),
            pool: pool_name(svc),
        },
        Some(pool) => {
            labels.insert(REVISION.to_owned(), pool.revision.to_owned());
            pool_selector.insert(REVISION.to_owned(), pool.revision.to_owned());
            Picker {
                epp: revision_epp_name(svc, pool.naming),
                pool: revision_pool_name(svc, pool.naming),
            }
        }
    };
    let meta = |name: &str| children::metadata(service, name, &labels);
    Ok(vec![
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": meta(&names.epp),
            "data": {CONFIG_KEY: config},
        }),
        deployment(service, router, &config, options, &names, meta(&names.epp))?,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": meta(&names.epp),
            "spec": {
                "type": "ClusterIP",
                "selector": selector_labels(svc, &names.epp),
                "ports": [
                    {"name": "grpc-ext-proc", "protocol": "TCP", "appProtocol": "http2",
                     "port": EXT_PROC_PORT, "targetPort": EXT_PROC_PORT},
                    {"name": "metrics", "protocol": "TCP",
                     "port": METRICS_PORT, "targetPort": METRICS_PORT},
                ],
            },
        }),
        json!({
            "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": meta(&names.pool),
            "spec": {
                // LWS labels every leader pod with worker-index 0, so this
                // selects the leader of every replica of every serving role
                // (of the one revision, when the pool is a revision's).
                "selector": {"matchLabels": pool_selector},
                "targetPorts": [{"number": port}],
                "endpointPickerRef": {"name": names.epp, "port": {"number": EXT_PROC_PORT}},
            },
        }),
    ])
}

/// The names of one endpoint picker's objects and of the pool it serves.
struct Picker {
    epp: String,
    pool: String,
}

fn namespace(service: &InferenceService) -> &str {
    service.metadata.namespace.as_deref().unwrap_or("default")
}

/// Labels of every router object: the service's, and `component: router`.
fn object_labels(svc: &str) -> BTreeMap<String, String> {
    let mut labels = service_labels(svc);
    labels.insert(COMPONENT.to_owned(), "router".to_owned());
    labels
}

/// What selects the pods of the endpoint picker `epp` (Deployment selector,
/// Service selector).
fn selector_labels(svc: &str, epp: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME.to_owned(), epp.to_owned()),
        (SERVICE.to_owned(), svc.to_owned()),
    ])
}

/// A short stable hash of the configuration, so a new one rolls the pods.
fn config_hash(config: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, config.as_bytes());
    digest.as_ref()[..5]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn deployment(
    service: &InferenceService,
    router: &Role,
    config: &str,
    options: &RouterOptions,
    names: &Picker,
    metadata: Value,
) -> Result<Value, String> {
    let svc = service_name(service);
    let base = router.template.as_ref();
    let template_meta = base.and_then(|t| t.get("metadata"));

    let mut pod_labels = string_map(template_meta.and_then(|m| m.get("labels")));
    pod_labels.extend(role_labels(svc, router));
    pod_labels.insert(COMPONENT.to_owned(), "router".to_owned());
    pod_labels.extend(selector_labels(svc, &names.epp));
    let mut annotations = string_map(template_meta.and_then(|m| m.get("annotations")));
    annotations.insert(CONFIG_HASH_ANNOTATION.to_owned(), config_hash(config));

    Ok(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": router.replicas(),
            "selector": {"matchLabels": selector_labels(svc, &names.epp)},
            // GIE's chart: one active EPP is the recommended pattern (its
            // prefix-cache state is per process); Recreate replaces it at once.
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": annotations},
                "spec": pod_spec(service, router, options, names)?,
            },
        },
    }))
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect()
}

/// The EPP pod: the router template's pod spec (scheduling constraints,
/// resources, extra containers) with Tandem's EPP container, ServiceAccount and
/// volumes.
fn pod_spec(
    service: &InferenceService,
    router: &Role,
    options: &RouterOptions,
    names: &Picker,
) -> Result<Value, String> {
    let svc = service_name(service);
    let mut pod = match router.template.as_ref().and_then(|t| t.get("spec")) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(spec)) => spec.clone(),
        Some(_) => return Err("the router's template.spec is not an object".to_owned()),
    };
    pod.insert("serviceAccountName".into(), json!(epp_name(svc)));
    // GIE's chart: "this timeout should mirror the longest grace period of the
    // pods within the pool".
    pod.entry("terminationGracePeriodSeconds")
        .or_insert(json!(130));

    let mut containers = match pod.remove("containers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(containers)) => containers,
        Some(_) => {
            return Err("the router's template.spec.containers is not a list".to_owned());
        }
    };
    let epp = epp_index(&containers);
    if containers.is_empty() {
        containers.push(json!({"name": ROUTER_CONTAINER}));
    }
    let pod_security = pod.get("securityContext").cloned();
    let container = containers
        .get_mut(epp)
        .ok_or("the router's EPP container is missing")?;
    *container = epp_container(
        container,
        &EppArgs {
            pool: names.pool.clone(),
            namespace: namespace(service).to_owned(),
            leader_election: router.replicas() > 1,
        },
        options,
        pod_security.as_ref(),
    )?;
    pod.insert("containers".into(), Value::Array(containers));

    let mut volumes = match pod.remove("volumes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(volumes)) => volumes,
        Some(_) => return Err("the router's template.spec.volumes is not a list".to_owned()),
    };
    volumes.push(json!({"name": CONFIG_VOLUME, "configMap": {"name": names.epp}}));
    volumes.push(json!({"name": TMP_VOLUME, "emptyDir": {}}));
    pod.insert("volumes".into(), Value::Array(volumes));
    Ok(Value::Object(pod))
}

struct EppArgs {
    pool: String,
    namespace: String,
    leader_election: bool,
}

/// Tandem's EPP flags (GIE options.go), then the template container's own
/// args, so a template can add flags such as `--v` or `--tracing=false`.
fn epp_args(args: &EppArgs) -> Vec<String> {
    let mut flags = vec![
        "--pool-name".to_owned(),
        args.pool.clone(),
        "--pool-namespace".to_owned(),
        args.namespace.clone(),
        "--config-file".to_owned(),
        format!("{CONFIG_DIR}/{CONFIG_KEY}"),
        "--grpc-port".to_owned(),
        EXT_PROC_PORT.to_string(),
        "--grpc-health-port".to_owned(),
        HEALTH_PORT.to_string(),
        "--metrics-port".to_owned(),
        METRICS_PORT.to_string(),
        // Scrapes would otherwise be authenticated with TokenReviews and
        // SubjectAccessReviews, which need a ClusterRole (see `rbac_objects`).
        "--metrics-endpoint-auth=false".to_owned(),
    ];
    if args.leader_election {
        // GIE's chart turns leader election on for more than one replica: only
        // the leader is ready and serves.
        flags.push("--ha-enable-leader-election".to_owned());
    }
    flags
}

fn grpc_probe(service: &str, period_seconds: u32) -> Value {
    // GIE health.go: "liveness" passes on every running EPP, "readiness" on the
    // one that has synced its pool (and leads, with leader election).
    json!({
        "grpc": {"port": HEALTH_PORT, "service": service},
        "initialDelaySeconds": 5,
        "periodSeconds": period_seconds,
    })
}

fn epp_container(
    base: &Value,
    args: &EppArgs,
    options: &RouterOptions,
    pod_security: Option<&Value>,
) -> Result<Value, String> {
    let mut container = match base {
        Value::Object(c) => c.clone(),
        _ => return Err("a container of the router's template is not an object".to_owned()),
    };
    container.entry("name").or_insert(json!(ROUTER_CONTAINER));
    let own_image = container
        .get("image")
        .and_then(Value::as_str)
        .is_some_and(|i| !i.trim().is_empty());
    if !own_image {
        container.insert("image".into(), json!(options.epp_image));
    }

    let mut all_args: Vec<Value> = epp_args(args).into_iter().map(Value::String).collect();
    all_args.extend(list(&container, "args"));
    container.insert("args".into(), Value::Array(all_args));

    let own_ports = [
        ("grpc", EXT_PROC_PORT),
        ("grpc-health", HEALTH_PORT),
        ("metrics", METRICS_PORT),
    ];
    let mut ports: Vec<Value> = own_ports
        .iter()
        .map(|(name, port)| json!({"name": name, "containerPort": port, "protocol": "TCP"}))
        .collect();
    ports.extend(list(&container, "ports").into_iter().filter(|p| {
        let number = p.get("containerPort").and_then(Value::as_u64);
        let name = p.get("name").and_then(Value::as_str);
        !own_ports
            .iter()
            .any(|(n, port)| Some(u64::from(*port)) == number || Some(*n) == name)
    }));
    container.insert("ports".into(), Value::Array(ports));

    let own_env = ["NAMESPACE", "POD_NAME"];
    let mut env = vec![
        // GIE pool-namespace-behavior.md and its chart: the EPP's namespace
        // from the Downward API.
        json!({"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
    ];
    env.extend(list(&container, "env").into_iter().filter(|e| {
        !e.get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| own_env.contains(&n))
    }));
    container.insert("env".into(), Value::Array(env));

    let mut mounts = vec![
        json!({"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": true}),
        json!({"name": TMP_VOLUME, "mountPath": TMP_DIR}),
    ];
    mounts.extend(list(&container, "volumeMounts"));
    container.insert("volumeMounts".into(), Value::Array(mounts));

    container.insert("livenessProbe".into(), grpc_probe("liveness", 10));
    container.insert("readinessProbe".into(), grpc_probe("readiness", 2));
    container.insert(
        "securityContext".into(),
        security_context(container.get("securityContext"), pod_security),
    );
    Ok(Value::Object(container))
}

fn list(container: &Map<String, Value>, key: &str) -> Vec<Value> {
    container
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The EPP container runs as a non-root user, with a read-only root filesystem,
/// no capabilities, no privilege escalation and the runtime's default seccomp
/// profile; the template may choose which non-root user.
fn security_context(own: Option<&Value>, pod: Option<&Value>) -> Value {
    let mut context = own.and_then(Value::as_object).cloned().unwrap_or_default();
    let uid = context
        .get("runAsUser")
        .and_then(Value::as_i64)
        .filter(|uid| *uid != 0)
        .unwrap_or(EPP_UID);
    context.insert("runAsUser".into(), json!(uid));
    context.insert("runAsNonRoot".into(), json!(true));
    context.insert("allowPrivilegeEscalation".into(), json!(false));
    context.insert("privileged".into(), json!(false));
    context.insert("readOnlyRootFilesystem".into(), json!(true));
    context.insert("capabilities".into(), json!({"drop": ["ALL"]}));
    let pod_seccomp = pod.and_then(|p| p.get("seccompProfile")).is_some();
    if !pod_seccomp {
        context
            .entry("seccompProfile")
            .or_insert(json!({"type": "RuntimeDefault"}));
    }
    Value::Object(context)
}

/// A backend of an HTTPRoute: the InferencePool `pool`, with a weight when
/// the route splits traffic between pools.
pub fn pool_backend(pool: &str, weight: Option<i32>) -> Value {
    let mut backend = json!({
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": pool,
    });
    if let Some(weight) = weight {
        backend["weight"] = json!(weight);
    }
    backend
}

/// The HTTPRoute spec: the user's parents and hostnames, and each rule's name,
/// matches, filters and timeouts with `backends` as its backends; a single
/// rule (matching everything) when the user gave none or no route at all.
pub fn route_spec(route: Option<&Value>, backends: &[Value]) -> Value {
    let backend = Value::Array(backends.to_vec());
    let mut spec = Map::new();
    for key in ["parentRefs", "hostnames"] {
        if let Some(value) = route.and_then(|r| r.get(key)).filter(|v| !v.is_null()) {
            spec.insert(key.into(), value.clone());
        }
    }
    let given = route
        .and_then(|r| r.get("rules"))
        .and_then(Value::as_array)
        .filter(|rules| !rules.is_empty());
    let rules: Vec<Value> = match given {
        None => vec![json!({"backendRefs": backend})],
        Some(rules) => rules
            .iter()
            .map(|rule| {
                let mut kept: Map<String, Value> = KEPT_RULE_FIELDS
                    .iter()
                    .filter_map(|key| {
                        rule.get(*key)
                            .filter(|v| !v.is_null())
                            .map(|v| ((*key).to_owned(), v.clone()))
                    })
                    .collect();
                kept.insert("backendRefs".into(), backend.clone());
                Value::Object(kept)
            })
            .collect(),
    };
    spec.insert("rules".into(), Value::Array(rules));
    Value::Object(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vllm(port: Option<u16>) -> Value {
        let mut container = json!({"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"});
        if let Some(port) = port {
            container["ports"] = json!([{"containerPort": port, "name": "http"}]);
        }
        json!({"spec": {"containers": [container]}})
    }

    fn pd_service(router: Value) -> Value {
        json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "ai", "uid": "u-1"},
            "spec": {"roles": [
                {"name": "prefill", "componentType": "prefiller", "replicas": 2, "template": vllm(Some(8000))},
                {"name": "decode", "componentType": "decoder", "replicas": 4, "template": vllm(Some(8000))},
                router,
            ]}
        })
    }

    fn service(value: Value) -> InferenceService {
        serde_json::from_value(value).expect("test service parses")
    }

    fn router(extra: Value) -> Value {
        let mut role = json!({"name": "router", "componentType": "router"});
        if let (Some(role), Some(extra)) = (role.as_object_mut(), extra.as_object()) {
            role.extend(extra.clone());
        }
        role
    }

    fn objects(value: Value) -> Vec<Value> {
        router_objects(&service(value), &RouterOptions::default()).expect("router objects")
    }

    #[test]
    fn pd_disaggregation_is_warned_about_with_gie_s_image_only() {
        let warned = |router_role: Value, image: &str| {
            epp_image_warning(&service(pd_service(router_role)).spec, image)
        };
        let pd_default = || router(json!({"strategy": "pd-disaggregation"}));
        let pd = pd_default();
        let said = warned(pd.clone(), DEFAULT_EPP_IMAGE).expect("warned");
        assert!(
            said.starts_with("spec.roles[2].strategy: pd-disaggregation configures llm-d's"),
            "{said}"
        );
        assert!(
            warned(
                pd.clone(),
                "registry.k8s.io/gateway-api-inference-extension/epp:v9"
            )
            .is_some()
        );
        assert!(
            warned(
                pd.clone(),
                "registry.k8s.io/gateway-api-inference-extension/epp@sha256:ab"
            )
            .is_some()
        );
        assert_eq!(warned(pd, LLM_D_EPP_IMAGE), None);
        let own = router(json!({"strategy": "pd-disaggregation", "endpointPickerConfig": "a: b"}));
        assert_eq!(
            warned(own, DEFAULT_EPP_IMAGE),
            None,
            "the user's config is the user's"
        );
        let prefix = router(json!({"strategy": "prefix-cache"}));
        assert_eq!(warned(prefix, DEFAULT_EPP_IMAGE), None);
        // The router template's own image is the one that runs.
        let template = |image: &str| {
            router(
                json!({"strategy": "pd-disaggregation", "template": {"spec": {"containers": [
                    {"name": "sidecar", "image": "busybox"},
                    {"name": "epp", "image": image},
                ]}}}),
            )
        };
        assert_eq!(warned(template(LLM_D_EPP_IMAGE), DEFAULT_EPP_IMAGE), None);
        let said = warned(template(DEFAULT_EPP_IMAGE), LLM_D_EPP_IMAGE).expect("warned");
        assert!(
            said.ends_with(&format!(
                "the router runs {DEFAULT_EPP_IMAGE}, which has none of them: set the image of \
                 the router template's \"epp\" container to {LLM_D_EPP_IMAGE} (or a compatible llm-d release)"
            )),
            "{said}"
        );
        assert!(
            warned(pd_default(), DEFAULT_EPP_IMAGE)
                .expect("warned")
                .contains("the chart's value endpointPicker.image"),
        );
    }

    fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
        objects
            .iter()
            .find(|o| o["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {objects:#?}"))
    }

    fn epp_container(objects: &[Value]) -> &Value {
        let containers = &find(objects, "Deployment")["spec"]["template"]["spec"]["containers"];
        containers
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["args"][0] == "--pool-name")
            .expect("a container with Tandem's EPP args")
    }

    fn config_of(role: Value) -> Value {
        let role: Role = serde_json::from_value(role).unwrap();
        let text = endpoint_picker_config(&role).unwrap();
        serde_norway::from_str(&text).expect("the generated configuration is YAML")
    }

    /// (plugin type or name, weight) per profile, and that every reference resolves.
    fn profiles(config: &Value) -> BTreeMap<String, Vec<(String, Option<u64>)>> {
        assert_eq!(config["apiVersion"], CONFIG_API_VERSION);
        assert_eq!(config["kind"], "EndpointPickerConfig");
        let names: Vec<&str> = config["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().or(p["type"].as_str()).unwrap())
            .collect();
        config["schedulingProfiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|profile| {
                let refs = profile["plugins"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| {
                        let name = r["pluginRef"].as_str().unwrap();
                        assert!(names.contains(&name), "{name} is not a declared plugin");
                        (name.to_owned(), r["weight"].as_u64())
                    })
                    .collect();
                (profile["name"].as_str().unwrap().to_owned(), refs)
            })
            .collect()
    }

    fn plugin_types(config: &Value) -> Vec<&str> {
        config["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect()
    }

    fn owned(name: &str, weight: Option<u64>) -> (String, Option<u64>) {
        (name.to_owned(), weight)
    }

    #[test]
    fn prefix_cache_is_gies_default_profile_and_the_default_strategy() {
        for role in [
            router(json!({"strategy": "prefix-cache"})),
            router(json!({})),
        ] {
            let config = config_of(role);
            assert_eq!(
                profiles(&config),
                BTreeMap::from([(
                    "default".to_owned(),
                    vec![
                        owned("queue-scorer", Some(2)),
                        owned("kv-cache-utilization-scorer", Some(2)),
                        owned("prefix-cache-scorer", Some(3)),
                        owned("max-score-picker", None),
                    ]
                )])
            );
            assert!(plugin_types(&config).contains(&"single-profile-handler"));
        }
    }

    #[test]
    fn single_scorer_strategies() {
        for (strategy, scorer) in [
            ("kv-cache-utilization", "kv-cache-utilization-scorer"),
            ("queue-size", "queue-scorer"),
            ("lora-affinity", "lora-affinity-scorer"),
        ] {
            let config = config_of(router(json!({"strategy": strategy})));
            assert_eq!(
                profiles(&config),
                BTreeMap::from([(
                    "default".to_owned(),
                    vec![owned(scorer, Some(1)), owned("max-score-picker", None)]
                )]),
                "{strategy}"
            );
            assert_eq!(
                plugin_types(&config),
                [scorer, "max-score-picker", "single-profile-handler"],
                "{strategy}"
            );
        }
    }

    #[test]
    fn pd_disaggregation_uses_llm_ds_profiles_on_tandems_labels() {
        let config = config_of(router(json!({"strategy": "pd-disaggregation"})));
        let profile = |filter: &str| {
            vec![
                owned(filter, None),
                owned("prefix-cache-scorer", Some(2)),
                owned("queue-scorer", Some(1)),
                owned("max-score-picker", None),
            ]
        };
        assert_eq!(
            profiles(&config),
            BTreeMap::from([
                ("prefill".to_owned(), profile(PREFILLER_FILTER)),
                ("decode".to_owned(), profile(DECODER_FILTER)),
            ])
        );
        let types = plugin_types(&config);
        for llm_d in ["pd-profile-handler", "prefill-header-handler", "by-label"] {
            assert!(types.contains(&llm_d), "{llm_d} in {types:?}");
        }
        let filters: BTreeMap<&str, &Value> = config["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "by-label")
            .map(|p| (p["name"].as_str().unwrap(), &p["parameters"]))
            .collect();
        assert_eq!(
            filters[PREFILLER_FILTER],
            &json!({"label": COMPONENT_TYPE, "validValues": ["prefiller"], "allowsNoLabel": false})
        );
        assert_eq!(
            filters[DECODER_FILTER],
            &json!({"label": COMPONENT_TYPE, "validValues": ["decoder"], "allowsNoLabel": false})
        );
    }

    #[test]
    fn endpoint_picker_config_is_used_verbatim() {
        let text = "# mine\napiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: random-picker\n";
        let role: Role = serde_json::from_value(router(
            json!({"strategy": "queue-size", "endpointPickerConfig": text}),
        ))
        .unwrap();
        assert_eq!(endpoint_picker_config(&role).unwrap(), text);
        let value = pd_service(router(json!({"endpointPickerConfig": text})));
        let objects = objects(value);
        assert_eq!(find(&objects, "ConfigMap")["data"][CONFIG_KEY], text);
    }

    #[test]
    fn a_queue_turns_on_gies_flow_control_in_the_generated_configuration() {
        let plain = config_of(router(json!({})));
        assert!(plain.get("featureGates").is_none() && plain.get("flowControl").is_none());
        let queued = config_of(router(json!({"queue": {}})));
        assert_eq!(queued["featureGates"], json!(["flowControl"]));
        assert_eq!(queued["flowControl"], json!({"defaultRequestTTL": "600s"}));
        // The scorers are those of the strategy, as without a queue.
        assert_eq!(profiles(&queued), profiles(&plain));
        let bounded = config_of(router(
            json!({"strategy": "queue-size", "queue": {"timeoutSeconds": 900, "maxRequests": 200}}),
        ));
        assert_eq!(
            bounded["flowControl"],
            json!({"defaultRequestTTL": "900s", "maxRequests": 200})
        );
    }

    #[test]
    fn only_routers_have_an_endpoint_picker() {
        let worker: Role = serde_json::from_value(
            json!({"name": "w", "componentType": "worker", "template": vllm(None)}),
        )
        .unwrap();
        assert_eq!(
            endpoint_picker_config(&worker).unwrap_err(),
            "role \"w\" is a worker: only a router has an endpoint picker"
        );
    }

    fn spec_of(value: Value) -> InferenceServiceSpec {
        service(value).spec
    }

    #[test]
    fn serving_port_is_the_first_declared_port_or_8000() {
        assert_eq!(
            serving_port(&spec_of(pd_service(router(json!({}))))),
            Ok(8000)
        );
        let mut custom = pd_service(router(json!({})));
        custom["spec"]["roles"][0]["template"] = vllm(Some(9000));
        custom["spec"]["roles"][1]["template"] = vllm(None);
        assert_eq!(serving_port(&spec_of(custom)), Ok(9000));
        let mut none = pd_service(router(json!({})));
        none["spec"]["roles"][0]["template"] = vllm(None);
        none["spec"]["roles"][1]["template"] = vllm(None);
        assert_eq!(serving_port(&spec_of(none)), Ok(DEFAULT_SERVING_PORT));
        // A router's own ports are not the model servers'.
        let mut routed = pd_service(router(json!({"template": {"spec": {"containers": [
            {"name": "epp", "ports": [{"containerPort": 7000}]}]}}})));
        routed["spec"]["roles"].as_array_mut().unwrap().swap(0, 2);
        assert_eq!(serving_port(&spec_of(routed)), Ok(8000));
    }

    #[test]
    fn serving_ports_must_agree() {
        let mut value = pd_service(router(json!({})));
        value["spec"]["roles"].as_array_mut().unwrap().push(
            json!({"name": "extra", "componentType": "worker", "template": vllm(Some(8080))}),
        );
        let violation = serving_port(&spec_of(value.clone())).unwrap_err();
        assert_eq!(
            violation.field,
            "spec.roles[3].template.spec.containers[0].ports[0].containerPort"
        );
        assert_eq!(
            violation.reason,
            "serving roles must listen on the same port, got 8080 but spec.roles[0].template.spec.containers[0].ports[0].containerPort is 8000: \
             the router's InferencePool sends requests to one port on the leaders of every serving role"
        );
        let findings = check(&spec_of(value.clone()));
        assert_eq!(findings.violations, vec![violation]);
        assert_eq!(
            router_objects(&service(value), &RouterOptions::default()).unwrap_err(),
            findings.denial_message()
        );
    }

    #[test]
    fn without_a_router_nothing_is_checked_or_built() {
        let mut value = pd_service(router(json!({})));
        value["spec"]["roles"].as_array_mut().unwrap().pop();
        value["spec"]["roles"][1]["template"] = vllm(Some(8080));
        value["metadata"]["name"] = json!("9-no-router");
        let spec = spec_of(value.clone());
        assert!(serving_port(&spec).is_err(), "the ports disagree");
        assert_eq!(check(&spec), Findings::default());
        assert_eq!(objects(value), Vec::<Value>::new());
    }

    #[test]
    fn a_valid_router_passes_the_checks() {
        let value = pd_service(router(json!({
            "strategy": "pd-disaggregation",
            "httproute": {"parentRefs": [{"name": "gw"}], "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}]}]},
            "template": {"spec": {"containers": [{"name": "epp", "args": ["--v", "4"]}]}},
        })));
        let findings = check(&spec_of(value));
        assert_eq!(findings, Findings::default());
    }

    #[test]
    fn pd_disaggregation_needs_decoders() {
        let value = json!({
            "metadata": {"name": "mono"},
            "spec": {"roles": [
                {"name": "inference", "componentType": "worker", "template": vllm(Some(8000))},
                router(json!({"strategy": "pd-disaggregation", "httproute": {"parentRefs": [{"name": "gw"}]}})),
            ]}
        });
        let findings = check(&spec_of(value.clone()));
        assert_eq!(findings.violations.len(), 1);
        assert_eq!(findings.violations[0].field, "spec.roles[1].strategy");
        assert!(
            findings.violations[0]
                .reason
                .starts_with("pd-disaggregation needs prefiller and decoder roles"),
            "{}",
            findings.denial_message()
        );
        // With its own configuration the strategy is only ignored.
        let mut own = value;
        own["spec"]["roles"][1]["endpointPickerConfig"] = json!("plugins: []");
        let findings = check(&spec_of(own));
        assert!(findings.is_allowed());
        assert_eq!(
            findings.warnings,
            vec![
                "spec.roles[1].strategy (pd-disaggregation) is ignored: spec.roles[1].endpointPickerConfig is used as the endpoint picker's configuration"
            ]
        );
    }

    #[test]
    fn route_fields_tandem_drops_are_warned_about() {
        let value = pd_service(router(json!({"httproute": {
            "hostnames": ["llm.example.com"],
            "rules": [{
                "name": "chat",
                "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                "backendRefs": [{"name": "vllm", "port": 8000}],
                "sessionPersistence": {"sessionName": "s"},
            }],
        }})));
        let findings = check(&spec_of(value));
        assert!(findings.is_allowed());
        assert_eq!(
            findings.warnings,
            vec![
                "spec.roles[2].httproute.parentRefs is empty: the HTTPRoute attaches to no Gateway and routes nothing",
                "spec.roles[2].httproute.rules[0].backendRefs is replaced: every rule routes to the service's InferencePool",
                "spec.roles[2].httproute.rules[0].sessionPersistence is ignored: Tandem keeps each rule's name, matches, filters and timeouts",
            ]
        );
    }

    #[test]
    fn router_templates_must_leave_room_for_the_epp() {
        let value = pd_service(router(json!({"template": {"spec": {
            "serviceAccountName": "mine",
            "volumes": [{"name": CONFIG_VOLUME, "emptyDir": {}}],
            "containers": [
                {"name": "proxy", "image": "envoy:1", "ports": [{"containerPort": 9090}]},
                {"name": "epp", "volumeMounts": [{"name": "x", "mountPath": "/config/"}]},
            ],
        }}})));
        let findings = check(&spec_of(value));
        let fields: Vec<&str> = findings
            .violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.roles[2].template.spec.serviceAccountName",
                "spec.roles[2].template.spec.volumes[0].name",
                "spec.roles[2].template.spec.containers[0].ports[0].containerPort",
                "spec.roles[2].template.spec.containers[1].volumeMounts[0].mountPath",
            ],
            "{}",
            findings.denial_message()
        );
    }

    #[test]
    fn every_object_is_named_labelled_and_owned() {
        let objects = objects(pd_service(router(
            json!({"httproute": {"parentRefs": [{"name": "gw"}]}}),
        )));
        let kinds: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("ServiceAccount", "qwen-epp"),
                ("RoleBinding", "qwen-epp-reader"),
                ("ConfigMap", "qwen-epp"),
                ("Deployment", "qwen-epp"),
                ("Service", "qwen-epp"),
                ("InferencePool", "qwen-pool"),
                ("HTTPRoute", "qwen-route"),
            ]
        );
        for object in &objects {
            let meta = &object["metadata"];
            assert_eq!(meta["namespace"], "ai");
            assert_eq!(meta["labels"][SERVICE], "qwen");
            assert_eq!(meta["labels"][COMPONENT], "router");
            assert_eq!(meta["labels"][children::MANAGED_BY], children::MANAGER);
            assert_eq!(meta["ownerReferences"][0]["uid"], "u-1");
            assert_eq!(meta["ownerReferences"][0]["kind"], "InferenceService");
        }
    }

    #[test]
    fn the_pool_selects_every_leader_and_names_the_epp() {
        let objects = objects(pd_service(router(json!({}))));
        assert_eq!(
            find(&objects, "InferencePool")["spec"],
            json!({
                "selector": {"matchLabels": {
                    "fusioninfer.io/service": "qwen",
                    "leaderworkerset.sigs.k8s.io/worker-index": "0",
                    "fusioninfer.io/traffic": "serving",
                }},
                "targetPorts": [{"number": 8000}],
                "endpointPickerRef": {"name": "qwen-epp", "port": {"number": 9002}},
            })
        );
        let service = &find(&objects, "Service")["spec"];
        assert_eq!(
            service["ports"],
            json!([
                {"name": "grpc-ext-proc", "protocol": "TCP", "appProtocol": "http2", "port": 9002, "targetPort": 9002},
                {"name": "metrics", "protocol": "TCP", "port": 9090, "targetPort": 9090},
            ])
        );
        let deployment = &find(&objects, "Deployment")["spec"];
        assert_eq!(service["selector"], deployment["selector"]["matchLabels"]);
        assert_eq!(deployment["selector"]["matchLabels"][NAME], "qwen-epp");
        let pod_labels = &deployment["template"]["metadata"]["labels"];
        for (key, value) in deployment["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(
                &pod_labels[key], value,
                "pods carry the selector label {key}"
            );
        }
        assert!(
            pod_labels.get(LWS_WORKER_INDEX).is_none(),
            "EPP pods are not in the pool"
        );
    }

    #[test]
    fn the_default_epp_deployment() {
        let objects = objects(pd_service(router(json!({}))));
        let deployment = &find(&objects, "Deployment")["spec"];
        assert_eq!(deployment["replicas"], 1);
        assert_eq!(deployment["strategy"]["type"], "Recreate");
        let pod = &deployment["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "qwen-epp");
        assert_eq!(pod["containers"].as_array().unwrap().len(), 1);
        let epp = epp_container(&objects);
        assert_eq!(epp["name"], "epp");
        assert_eq!(epp["image"], DEFAULT_EPP_IMAGE);
        assert_eq!(
            epp["args"],
            json!([
                "--pool-name",
                "qwen-pool",
                "--pool-namespace",
                "ai",
                "--config-file",
                "/config/epp-config.yaml",
                "--grpc-port",
                "9002",
                "--grpc-health-port",
                "9003",
                "--metrics-port",
                "9090",
                "--metrics-endpoint-auth=false",
            ])
        );
        assert_eq!(
            epp["ports"],
            json!([
                {"name": "grpc", "containerPort": 9002, "protocol": "TCP"},
                {"name": "grpc-health", "containerPort": 9003, "protocol": "TCP"},
                {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
            ])
        );
        assert_eq!(
            epp["livenessProbe"]["grpc"],
            json!({"port": 9003, "service": "liveness"})
        );
        assert_eq!(
            epp["readinessProbe"]["grpc"],
            json!({"port": 9003, "service": "readiness"})
        );
        let security = &epp["securityContext"];
        assert_eq!(security["runAsNonRoot"], true);
        assert_eq!(security["runAsUser"], EPP_UID);
        assert_eq!(security["readOnlyRootFilesystem"], true);
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["capabilities"], json!({"drop": ["ALL"]}));
        // The configuration is mounted where --config-file points.
        let mount = epp["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == CONFIG_DIR)
            .unwrap();
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        assert_eq!(volume["configMap"]["name"], "qwen-epp");
        assert!(
            find(&objects, "ConfigMap")["data"]
                .get(CONFIG_KEY)
                .is_some()
        );
    }

    #[test]
    fn the_router_template_is_the_base_of_the_epp_pod() {
        let objects = objects(pd_service(router(json!({"replicas": 1, "template": {
            "metadata": {"labels": {"team": "infra", NAME: "spoofed"}, "annotations": {"note": "x"}},
            "spec": {
                "nodeSelector": {"pool": "cpu"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "terminationGracePeriodSeconds": 30,
                "securityContext": {"fsGroup": 2000},
                "volumes": [{"name": "certs", "secret": {"secretName": "epp-certs"}}],
                "containers": [
                    {"name": "proxy", "image": "envoy:1", "ports": [{"containerPort": 15000}]},
                    {"name": "epp", "image": "ghcr.io/llm-d/llm-d-inference-scheduler:v0.4.0",
                     "args": ["--v", "4"],
                     "env": [{"name": "HF_TOKEN", "value": "t"}, {"name": "NAMESPACE", "value": "other"}],
                     "ports": [{"name": "zmq", "containerPort": 5557}, {"name": "grpc", "containerPort": 9100}],
                     "resources": {"limits": {"cpu": "2"}},
                     "volumeMounts": [{"name": "certs", "mountPath": "/certs"}],
                     "securityContext": {"runAsUser": 1001, "capabilities": {"add": ["NET_ADMIN"]}}},
                ],
            },
        }}))));
        let template = &find(&objects, "Deployment")["spec"]["template"];
        let pod = &template["spec"];
        assert_eq!(pod["nodeSelector"], json!({"pool": "cpu"}));
        assert_eq!(pod["tolerations"][0]["key"], "dedicated");
        assert_eq!(pod["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["securityContext"], json!({"fsGroup": 2000}));
        assert_eq!(pod["containers"][0]["name"], "proxy");
        assert_eq!(pod["containers"][0]["image"], "envoy:1");
        let volumes: Vec<&str> = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(volumes, ["certs", CONFIG_VOLUME, TMP_VOLUME]);
        assert_eq!(template["metadata"]["labels"]["team"], "infra");
        assert_eq!(template["metadata"]["labels"][NAME], "qwen-epp");
        assert_eq!(template["metadata"]["annotations"]["note"], "x");

        let epp = &pod["containers"][1];
        assert_eq!(
            epp["image"],
            "ghcr.io/llm-d/llm-d-inference-scheduler:v0.4.0"
        );
        assert_eq!(epp["resources"], json!({"limits": {"cpu": "2"}}));
        let args: Vec<&str> = epp["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args[..2], ["--pool-name", "qwen-pool"]);
        assert_eq!(
            args[args.len() - 2..],
            ["--v", "4"],
            "the template's args follow"
        );
        let ports: Vec<(&str, u64)> = epp["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap(),
                    p["containerPort"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            ports,
            [
                ("grpc", 9002),
                ("grpc-health", 9003),
                ("metrics", 9090),
                ("zmq", 5557)
            ],
            "Tandem's ports win over the template's by name and number"
        );
        let env: Vec<&str> = epp["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(env, ["NAMESPACE", "POD_NAME", "HF_TOKEN"]);
        assert_eq!(
            epp["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        let mounts: Vec<&str> = epp["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert_eq!(mounts, [CONFIG_DIR, TMP_DIR, "/certs"]);
        assert_eq!(epp["securityContext"]["runAsUser"], 1001);
        assert_eq!(
            epp["securityContext"]["capabilities"],
            json!({"drop": ["ALL"]})
        );
    }

    #[test]
    fn the_first_container_is_the_epp_and_gets_the_configured_image() {
        let value = pd_service(router(json!({"template": {"spec": {"containers": [
            {"name": "scheduler", "securityContext": {"runAsUser": 0}},
            {"name": "sidecar", "image": "busybox:1"},
        ]}}})));
        let options = RouterOptions {
            epp_image: LLM_D_EPP_IMAGE.to_owned(),
        };
        let objects = router_objects(&service(value), &options).unwrap();
        let pod = &find(&objects, "Deployment")["spec"]["template"]["spec"];
        let epp = &pod["containers"][0];
        assert_eq!(epp["name"], "scheduler");
        assert_eq!(epp["image"], LLM_D_EPP_IMAGE);
        assert_eq!(epp["args"][0], "--pool-name");
        assert_eq!(epp["securityContext"]["runAsUser"], EPP_UID, "never root");
        assert_eq!(pod["containers"][1]["args"], Value::Null);
        assert_eq!(pod["terminationGracePeriodSeconds"], 130);
    }

    #[test]
    fn more_than_one_replica_elects_a_leader() {
        let bound = |objects: &[Value]| {
            objects
                .iter()
                .filter(|o| o["kind"] == "RoleBinding")
                .map(|b| {
                    (
                        b["metadata"]["name"].as_str().unwrap().to_owned(),
                        b["roleRef"]["name"].as_str().unwrap().to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let one = objects(pd_service(router(json!({"replicas": 1}))));
        assert_eq!(
            bound(&one),
            [("qwen-epp-reader".to_owned(), PICKER_CLUSTER_ROLE.to_owned())]
        );
        assert!(
            !epp_container(&one)["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--ha-enable-leader-election"))
        );
        let three = objects(pd_service(router(json!({"replicas": 3}))));
        assert_eq!(find(&three, "Deployment")["spec"]["replicas"], 3);
        assert_eq!(
            bound(&three),
            [
                ("qwen-epp-reader".to_owned(), PICKER_CLUSTER_ROLE.to_owned()),
                (
                    "qwen-epp-leader-election".to_owned(),
                    PICKER_LEADER_ELECTION_CLUSTER_ROLE.to_owned()
                )
            ]
        );
        assert!(
            epp_container(&three)["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--ha-enable-leader-election"))
        );
    }

    #[test]
    fn rbac_binds_the_shipped_cluster_roles_to_the_pickers_account_only() {
        let objects = objects(pd_service(router(json!({"replicas": 2}))));
        assert!(
            objects
                .iter()
                .all(|o| o["kind"] != "Role" && o["kind"] != "ClusterRole"),
            "Tandem makes no role of its own"
        );
        for binding in objects.iter().filter(|o| o["kind"] == "RoleBinding") {
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": "qwen-epp", "namespace": "ai"}])
            );
            assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
            assert_eq!(binding["metadata"]["namespace"], "ai");
        }
    }

    #[test]
    fn a_new_configuration_rolls_the_epp_pods() {
        let hash = |strategy: &str| {
            let objects = objects(pd_service(router(json!({"strategy": strategy}))));
            find(&objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
                [CONFIG_HASH_ANNOTATION]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(hash("queue-size"), hash("queue-size"));
        assert_ne!(hash("queue-size"), hash("prefix-cache"));
    }

    #[test]
    fn the_route_keeps_matches_and_filters_and_routes_to_the_pool() {
        let objects = objects(pd_service(router(json!({"httproute": {
            "parentRefs": [{"name": "inference-gateway", "sectionName": "http"}],
            "hostnames": ["llm.example.com"],
            "rules": [
                {
                    "name": "v1",
                    "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                    "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "x-team", "value": "a"}]}}],
                    "timeouts": {"request": "300s"},
                    "backendRefs": [{"name": "old-service", "port": 8000, "weight": 3}],
                },
                {"matches": [{"headers": [{"name": "x-model", "value": "qwen"}]}]},
            ],
        }}))));
        let pool = json!([{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-pool"}]);
        assert_eq!(
            find(&objects, "HTTPRoute")["spec"],
            json!({
                "parentRefs": [{"name": "inference-gateway", "sectionName": "http"}],
                "hostnames": ["llm.example.com"],
                "rules": [
                    {
                        "name": "v1",
                        "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                        "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "x-team", "value": "a"}]}}],
                        "timeouts": {"request": "300s"},
                        "backendRefs": pool,
                    },
                    {"matches": [{"headers": [{"name": "x-model", "value": "qwen"}]}], "backendRefs": pool},
                ],
            })
        );
    }

    #[test]
    fn a_route_without_rules_sends_everything_to_the_pool() {
        let objects = objects(pd_service(router(
            json!({"httproute": {"parentRefs": [{"name": "gw"}]}}),
        )));
        assert_eq!(
            find(&objects, "HTTPRoute")["spec"],
            json!({
                "parentRefs": [{"name": "gw"}],
                "rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-pool"}]}],
            })
        );
    }

    #[test]
    fn each_revision_has_its_own_pool_and_endpoint_picker() {
        let value = pd_service(router(
            json!({"httproute": {"parentRefs": [{"name": "gw"}]}}),
        ));
        let suffixed = Naming::Suffixed("bbbbbbbbbb".to_owned());
        let revisions = [
            RevisionPool {
                revision: "aaaaaaaaaa",
                naming: &Naming::Plain,
            },
            RevisionPool {
                revision: "bbbbbbbbbb",
                naming: &suffixed,
            },
        ];
        let objects =
            revision_router_objects(&service(value), &RouterOptions::default(), &revisions)
                .unwrap();
        let names: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        // The RBAC is shared; the plain revision keeps today's names; no route
        // (the upgrade's route is the service's one route).
        assert_eq!(
            names,
            [
                ("ServiceAccount", "qwen-epp"),
                ("RoleBinding", "qwen-epp-reader"),
                ("ConfigMap", "qwen-epp"),
                ("Deployment", "qwen-epp"),
                ("Service", "qwen-epp"),
                ("InferencePool", "qwen-pool"),
                ("ConfigMap", "qwen-epp-bbbbbbbbbb"),
                ("Deployment", "qwen-epp-bbbbbbbbbb"),
                ("Service", "qwen-epp-bbbbbbbbbb"),
                ("InferencePool", "qwen-pool-bbbbbbbbbb"),
            ]
        );
        for (revision, pool, epp) in [
            ("aaaaaaaaaa", "qwen-pool", "qwen-epp"),
            ("bbbbbbbbbb", "qwen-pool-bbbbbbbbbb", "qwen-epp-bbbbbbbbbb"),
        ] {
            let named = |kind: &str, name: &str| {
                objects
                    .iter()
                    .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                    .unwrap_or_else(|| panic!("{kind} {name}"))
            };
            let pool_object = named("InferencePool", pool);
            assert_eq!(
                pool_object["spec"]["selector"]["matchLabels"],
                json!({SERVICE: "qwen", REVISION: revision, LWS_WORKER_INDEX: "0", drain::TRAFFIC: drain::SERVING}),
                "the pool of {revision} selects only its leaders, while in traffic"
            );
            assert_eq!(
                pool_object["spec"]["endpointPickerRef"]["name"], epp,
                "each pool has its own endpoint picker"
            );
            let deployment = named("Deployment", epp);
            let pod = &deployment["spec"]["template"];
            let args = &pod["spec"]["containers"][0]["args"];
            assert_eq!((&args[0], &args[1]), (&json!("--pool-name"), &json!(pool)));
            assert_eq!(pod["spec"]["serviceAccountName"], "qwen-epp");
            assert_eq!(pod["spec"]["volumes"][0]["configMap"]["name"], epp);
            let selector = json!({NAME: epp, SERVICE: "qwen"});
            assert_eq!(deployment["spec"]["selector"]["matchLabels"], selector);
            assert_eq!(named("Service", epp)["spec"]["selector"], selector);
            for kind in ["ConfigMap", "Deployment", "Service"] {
                assert_eq!(named(kind, epp)["metadata"]["labels"][REVISION], revision);
            }
            assert_eq!(pool_object["metadata"]["labels"][REVISION], revision);
        }
        assert!(
            objects[..2]
                .iter()
                .all(|o| o["metadata"]["labels"].get(REVISION).is_none()),
            "the shared RBAC belongs to no revision"
        );
        // Without revisions side by side, today's objects, without the revision.
        let plain = objects_of_rolling();
        assert_eq!(
            find(&plain, "InferencePool")["spec"]["selector"]["matchLabels"],
            json!({SERVICE: "qwen", LWS_WORKER_INDEX: "0", drain::TRAFFIC: drain::SERVING})
        );
    }

    fn objects_of_rolling() -> Vec<Value> {
        objects(pd_service(router(json!({}))))
    }

    #[test]
    fn without_a_router_no_revision_has_a_pool() {
        let mut value = pd_service(router(json!({})));
        value["spec"]["roles"].as_array_mut().unwrap().pop();
        let revisions = [RevisionPool {
            revision: "aaaaaaaaaa",
            naming: &Naming::Plain,
        }];
        assert_eq!(
            revision_router_objects(&service(value), &RouterOptions::default(), &revisions),
            Ok(Vec::new())
        );
    }

    #[test]
    fn no_httproute_no_route() {
        let objects = objects(pd_service(router(json!({}))));
        assert!(objects.iter().all(|o| o["kind"] != "HTTPRoute"));
        // ServiceAccount, RoleBinding, ConfigMap, Deployment, Service, InferencePool.
        assert_eq!(objects.len(), 6);
    }
}
