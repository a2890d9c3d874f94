//! The quickstart without GPUs (docs/quickstart-kind.md): kind, llm-d's
//! inference simulator as the model server, GIE's endpoint picker and an
//! Istio Gateway. Nothing of it runs here (no kind, no image pull), so what
//! can be checked is checked: the example renders as the webhook would admit
//! it, every object it makes fits its schema (Tandem's, the upstream CRDs',
//! the Kubernetes types), the simulator's flags and probed endpoints are
//! those of the release the example runs (from that release's source,
//! pinned by checksum), and the guide's commands name what the example makes.
//! The real API server and the picker running on this service are in
//! `cluster_pickers`.

use std::collections::BTreeSet;
use std::path::Path;

use harness::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::RoleBinding;
use serde_json::Value;

const EXAMPLE: &str = "examples/quickstart/simulated-router.yaml";
const GUIDE: &str = "docs/quickstart-kind.md";

/// The simulator release the example runs, and its module's checksum.
const SIMULATOR: (&str, &str, &str) = (
    "github.com/llm-d/llm-d-inference-sim",
    "v0.10.2",
    "h1:LzeQsvnsNwgtAIl1tVp/jrC+jI0a+0mjRH8tHo1mTI0=",
);

fn documents() -> Vec<Value> {
    yaml_documents(&repo_path(EXAMPLE))
}

fn document<'a>(documents: &'a [Value], kind: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("{EXAMPLE} has no {kind}"))
}

/// The simulator's container in the example.
fn simulator(documents: &[Value]) -> &Value {
    let service = document(documents, "InferenceService");
    let role = service["spec"]["roles"]
        .as_array()
        .and_then(|roles| roles.iter().find(|r| r["componentType"] != "router"))
        .expect("a serving role");
    &role["template"]["spec"]["containers"][0]
}

#[test]
fn the_quickstart_renders_without_a_warning_and_every_object_fits_its_schema() {
    let Some(dir) = upstream_crds("the_quickstart_renders_without_a_warning") else {
        return;
    };
    let world = tandem::render::parse_world(
        EXAMPLE,
        &std::fs::read_to_string(repo_path(EXAMPLE)).expect("the example"),
        "default",
    )
    .expect("the example parses");
    let rendered = tandem::render::render(world, &Default::default()).expect("admitted");
    assert!(rendered.warnings.is_empty(), "{:#?}", rendered.warnings);

    let upstream = upstream_schemas(&dir);
    // The Gateway the user applies, and everything Tandem makes.
    let mut objects: Vec<Value> = vec![document(&documents(), "Gateway").clone()];
    objects.extend(rendered.apply.iter().cloned());
    let mut checked = BTreeSet::new();
    for object in &objects {
        let (api_version, kind) = (
            object["apiVersion"].as_str().expect("apiVersion"),
            object["kind"].as_str().expect("kind"),
        );
        let name = format!("{kind} {}", object["metadata"]["name"]);
        match kind {
            "Deployment" => assert_exactly::<Deployment>(&name, object),
            "Service" => assert_exactly::<Service>(&name, object),
            "ConfigMap" => assert_exactly::<ConfigMap>(&name, object),
            "ServiceAccount" => assert_exactly::<ServiceAccount>(&name, object),
            "RoleBinding" => assert_exactly::<RoleBinding>(&name, object),
            "PodDisruptionBudget" => assert_exactly::<PodDisruptionBudget>(&name, object),
            "InferenceService" => {
                let errors = tandem_schema(kind).errors(object);
                assert!(errors.is_empty(), "{name}: {errors:#?}");
            }
            _ => {
                let schema = upstream
                    .get(&(api_version.to_owned(), kind.to_owned()))
                    .unwrap_or_else(|| panic!("{name}: no upstream CRD for {api_version}"));
                let errors = schema.errors(object);
                assert!(errors.is_empty(), "{name}: {errors:#?}");
            }
        }
        checked.insert(kind.to_owned());
    }
    for kind in [
        "Gateway",
        "HTTPRoute",
        "InferencePool",
        "LeaderWorkerSet",
        "Deployment",
    ] {
        assert!(checked.contains(kind), "{kind} not among {checked:?}");
    }
}

/// The names a Go file's flag set defines (`f.IntVar(&c.Port, "port", ...)`).
fn defined_flags(parser: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(parser).expect("the simulator's parser.go");
    text.split("Var(&")
        .skip(1)
        .filter_map(|rest| {
            let after = rest.split_once(", \"")?.1;
            Some(after.split_once('"')?.0.to_owned())
        })
        .collect()
}

/// The paths a Go file's router serves (`r.GET("/health", ...)`).
fn served_paths(http: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(http).expect("the simulator's http.go");
    text.split("r.GET(\"")
        .skip(1)
        .filter_map(|rest| Some(rest.split_once('"')?.0.to_owned()))
        .collect()
}

/// The module of the simulator release, or None when it cannot be had here
/// (a failure under `CI=true`).
fn simulator_module(test: &str) -> Option<std::path::PathBuf> {
    let (module, version, sum) = SIMULATOR;
    available(test, harness::upstream::download(module, version, sum))
}

/// The container's arguments.
fn args_of(container: &Value) -> Vec<&str> {
    container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The value after `flag` in `args`.
fn value_of<'a>(args: &[&'a str], flag: &str) -> &'a str {
    args.iter()
        .position(|a| *a == flag)
        .and_then(|i| args.get(i + 1))
        .copied()
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
}

#[test]
fn the_simulator_runs_flags_and_probes_endpoints_its_release_has() {
    let Some(module) = simulator_module("the_simulator_runs_flags_and_probes_endpoints") else {
        return;
    };
    let documents = documents();
    let container = simulator(&documents);
    let (_, version, _) = SIMULATOR;
    assert_eq!(
        container["image"],
        format!("ghcr.io/llm-d/llm-d-inference-sim:{version}"),
        "the image is the release whose source is checked"
    );
    let flags = defined_flags(&module.join("pkg/common/parser.go"));
    assert!(flags.len() > 40 && flags.contains("model"), "{flags:?}");
    let args = args_of(container);
    for arg in &args {
        if let Some(flag) = arg.strip_prefix("--") {
            assert!(
                flags.contains(flag.split('=').next().unwrap_or(flag)),
                "--{flag} is not a flag of the simulator {version}"
            );
        }
    }
    let paths = served_paths(&module.join("pkg/communication/http.go"));
    for probe in ["readinessProbe", "startupProbe"] {
        let get = &container[probe]["httpGet"];
        let path = get["path"].as_str().expect("an httpGet probe");
        assert!(
            paths.contains(path),
            "{probe} {path} is not served by the simulator {version}: {paths:?}"
        );
        assert_eq!(get["port"], 8000);
    }
    // The environment it is given is what it reads, and the header the
    // guide points at is the one it writes.
    let parser = std::fs::read_to_string(module.join("pkg/common/parser.go")).expect("parser.go");
    for variable in container["env"].as_array().expect("env") {
        let name = variable["name"].as_str().expect("a name");
        assert!(
            parser.contains(&format!("\"{name}\"")),
            "the simulator {version} reads no {name}"
        );
    }
    let http = std::fs::read_to_string(module.join("pkg/communication/http.go")).expect("http.go");
    let guide = std::fs::read_to_string(repo_path(GUIDE)).expect("the guide");
    assert!(http.contains("\"x-inference-pod\"") && guide.contains("`x-inference-pod`"));
    // The port the probes and the pool use is the one it listens on.
    assert_eq!(value_of(&args, "--port"), "8000");
    assert_eq!(container["ports"][0]["containerPort"], 8000);
}

#[test]
fn the_guide_asks_the_example_for_what_it_serves() {
    let guide = std::fs::read_to_string(repo_path(GUIDE)).expect("the guide");
    let documents = documents();
    let container = simulator(&documents);
    let args = args_of(container);
    let model = value_of(&args, "--model");
    assert!(
        guide.contains(&format!("\"model\": \"{model}\"")),
        "the guide's request names the model the simulator serves, {model}"
    );
    assert!(guide.contains(&format!("kubectl apply -f {EXAMPLE}")));
    // Istio names the Service of a Gateway `{gateway}-{class}`.
    let gateway = document(&documents, "Gateway");
    let service = format!(
        "svc/{}-{}",
        gateway["metadata"]["name"].as_str().expect("a name"),
        gateway["spec"]["gatewayClassName"]
            .as_str()
            .expect("a class")
    );
    assert!(guide.contains(&service), "the guide forwards to {service}");
    // The DestinationRule names the picker's Service Tandem makes.
    let rule = document(&documents, "DestinationRule");
    let name = document(&documents, "InferenceService")["metadata"]["name"]
        .as_str()
        .expect("a name");
    assert_eq!(
        rule["spec"]["host"],
        format!("{name}-epp.default.svc.cluster.local")
    );
    // The versions it installs are the getting-started block's.
    let started = std::fs::read_to_string(repo_path("docs/getting-started.md")).expect("it");
    for pinned in [
        "lws/releases/download/v0.9.0",
        "gateway-api/releases/download/v1.6.1",
        "gateway-api-inference-extension/releases/download/v1.5.0",
        "ISTIO_VERSION=1.28.0",
    ] {
        assert!(started.contains(pinned), "getting-started: {pinned}");
        assert!(guide.contains(pinned), "{GUIDE}: {pinned}");
    }
}
