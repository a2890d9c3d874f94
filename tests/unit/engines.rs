//! The engine table (`src/plan/engine/releases.json`) is what the pinned
//! vLLM and SGLang wheels define: `extract.py` downloads each wheel from
//! PyPI with pip, checks its sha256, reads the flags, connectors, transfer
//! backends, variables, paths and metrics out of its source, and must print
//! the checked-in table byte for byte. Without PyPI the test is skipped with
//! the reason; with `CI=true` that is a failure.

use std::collections::BTreeSet;
use std::process::Command;

use harness::*;
use serde_json::Value;

const SCRIPT: &str = "src/plan/engine/extract.py";
const TABLE: &str = "src/plan/engine/releases.json";

/// The exit code `extract.py` gives when PyPI cannot be reached.
const UNREACHABLE: i32 = 3;

#[test]
fn the_engine_table_is_what_the_pinned_wheels_define() {
    let cache = target_dir().join("tmp").join("engine-wheels");
    let run = Command::new("python3")
        .arg(repo_path(SCRIPT))
        .arg("--cache")
        .arg(&cache)
        .output();
    let found = match run {
        Err(e) => Err(format!("python3 cannot run: {e}")),
        Ok(out) if out.status.code() == Some(UNREACHABLE) => Err(format!(
            "PyPI cannot be reached: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(out) => Ok(out),
    };
    let Some(out) = available("the_engine_table_is_what_the_pinned_wheels_define", found) else {
        return;
    };
    assert!(
        out.status.success(),
        "{SCRIPT} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checked_in = std::fs::read_to_string(repo_path(TABLE)).expect("the table");
    let extracted = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        checked_in == extracted,
        "{TABLE} is not what the pinned wheels define; regenerate it with \
         `python3 {SCRIPT} --cache target/tmp/engine-wheels > {TABLE}`"
    );
}

/// The seed stories (`examples/seeds/`): the seeds' text, which names vLLM
/// 0.11.0 and, in stories 2 and 4, a connector it lacks (their headers list
/// the warnings).
const SEED_STORIES: [&str; 4] = [
    "examples/seeds/story1-monolithic.yaml",
    "examples/seeds/story2-prefill-decode.yaml",
    "examples/seeds/story3-multinode.yaml",
    "examples/seeds/story4-prefill-decode-multinode.yaml",
];

/// One container of an example: its file, its field path, the container
/// and the pod spec around it.
struct ExampleContainer {
    file: String,
    field: String,
    container: Value,
    pod: Value,
}

/// The pod templates of one object of an example, each with its field
/// path: an InferenceService's roles, and the workloads a
/// ResourceScalingGroup targets (a Deployment's or StatefulSet's template,
/// a LeaderWorkerSet's leader and worker templates, a RoleBasedGroup's
/// roles). Pods are not among them: in a world for render they stand for
/// what runs, reduced to what Tandem reads.
fn pod_templates(document: &Value) -> Vec<(String, Value)> {
    let roles = |at: &str| -> Vec<(String, Value)> {
        document["spec"]["roles"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(r, role)| (format!("{at}[{r}].template"), role["template"].clone()))
            .collect()
    };
    match document["kind"].as_str() {
        Some("InferenceService" | "RoleBasedGroup") => roles("spec.roles"),
        Some("Deployment" | "StatefulSet") => {
            vec![(
                "spec.template".to_owned(),
                document["spec"]["template"].clone(),
            )]
        }
        Some("LeaderWorkerSet") => ["leaderTemplate", "workerTemplate"]
            .iter()
            .map(|t| {
                (
                    format!("spec.leaderWorkerTemplate.{t}"),
                    document["spec"]["leaderWorkerTemplate"][t].clone(),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Every container of every pod template of the examples ([`pod_templates`]).
fn example_containers() -> Vec<ExampleContainer> {
    let mut found = Vec::new();
    for folder in std::fs::read_dir(repo_path("examples")).expect("examples") {
        let folder = folder.expect("a folder").path();
        for file in std::fs::read_dir(&folder).expect("a folder") {
            let path = file.expect("a file").path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let name = path
                .strip_prefix(repo_path("."))
                .expect("in the repository")
                .display()
                .to_string();
            for document in yaml_documents(&path) {
                let object = document["metadata"]["name"].as_str().unwrap_or_default();
                let kind = document["kind"].as_str().unwrap_or_default();
                for (at, template) in pod_templates(&document) {
                    let containers = template["spec"]["containers"].as_array();
                    for (c, container) in containers.into_iter().flatten().enumerate() {
                        found.push(ExampleContainer {
                            file: name.clone(),
                            field: format!("{kind} {object} {at}.spec.containers[{c}]"),
                            container: container.clone(),
                            pod: template["spec"].clone(),
                        });
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| (&a.file, &a.field).cmp(&(&b.file, &b.field)));
    found
}

/// What a vLLM or SGLang pod needs on a GPU node, in every example but the
/// seeds' stories (InferenceServices and the workloads the
/// ResourceScalingGroup examples target alike): the newest release in the table, a
/// memory-backed /dev/shm, a model cache volume that HF_HOME points into, a
/// token Secret reference, CPU and memory requests, and startup, readiness
/// and liveness probes on paths the release serves (SGLang's liveness on
/// /health, not /health_generate, which generates a token). And every
/// engine variable is one the release reads.
#[test]
fn every_engine_example_runs_the_newest_release_with_what_a_gpu_node_needs() {
    use tandem::plan::engine::{Engine, identify, release, releases};
    let newest = |engine: Engine| {
        releases::all()
            .iter()
            .filter(|r| r.engine == engine)
            .max_by_key(|r| {
                r.release
                    .split('.')
                    .map(|p| p.parse::<u32>().unwrap_or(0))
                    .collect::<Vec<_>>()
            })
            .map(|r| r.release.clone())
            .expect("a release")
    };
    let mut checked = 0;
    let mut problems = Vec::new();
    for ExampleContainer {
        file,
        field,
        container,
        pod: spec,
    } in example_containers()
    {
        let Some((engine, version)) = container["image"].as_str().and_then(identify) else {
            continue;
        };
        if SEED_STORIES.contains(&file.as_str()) {
            continue;
        }
        checked += 1;
        let mut problem = |what: String| problems.push(format!("{file} {field}: {what}"));
        if version != newest(engine) {
            problem(format!(
                "runs {} {version}, not the newest in the table",
                engine.name()
            ));
        }
        let Some(release) = release(engine, &version) else {
            continue;
        };
        let volume = |name: &str| {
            spec["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["name"] == name)
                .cloned()
                .unwrap_or(Value::Null)
        };
        let mounts: Vec<&Value> = container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let shm = mounts.iter().find(|m| m["mountPath"] == "/dev/shm");
        if !shm.is_some_and(|m| {
            volume(m["name"].as_str().unwrap_or_default())["emptyDir"]["medium"] == "Memory"
        }) {
            problem("no memory-backed /dev/shm".to_owned());
        }
        let env: Vec<&Value> = container["env"].as_array().into_iter().flatten().collect();
        let variable = |name: &str| env.iter().find(|e| e["name"] == name).copied();
        match variable("HF_HOME").and_then(|e| e["value"].as_str()) {
            Some(home)
                if mounts.iter().any(|m| {
                    let at = m["mountPath"].as_str().unwrap_or_default();
                    at != "/dev/shm" && home.starts_with(at)
                }) => {}
            other => problem(format!(
                "HF_HOME {other:?} is not inside a mounted cache volume"
            )),
        }
        if variable("HF_TOKEN").is_none_or(|e| e["valueFrom"]["secretKeyRef"]["name"].is_null()) {
            problem("no HF_TOKEN from a Secret".to_owned());
        }
        for resource in ["cpu", "memory"] {
            if container["resources"]["requests"][resource].is_null() {
                problem(format!("no {resource} request"));
            }
        }
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            match container[probe]["httpGet"]["path"].as_str() {
                Some(path) if release.paths.contains(path) => {}
                other => problem(format!(
                    "{probe} {other:?} is not a path {} serves",
                    release.title()
                )),
            }
        }
        if container["livenessProbe"]["httpGet"]["path"] == "/health_generate" {
            problem("a liveness probe that generates a token".to_owned());
        }
        for e in &env {
            let name = e["name"].as_str().unwrap_or_default();
            let own = name.starts_with("VLLM_") || name.starts_with("SGLANG_");
            if own && !release.environment.contains(name) {
                problem(format!("{} reads no {name}", release.title()));
            }
        }
        let nixl = container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a.as_str().is_some_and(|a| a.contains("\"NixlConnector\"")));
        if nixl
            && variable("VLLM_NIXL_SIDE_CHANNEL_HOST")
                .is_none_or(|e| e["valueFrom"]["fieldRef"]["fieldPath"] != "status.podIP")
        {
            problem("NIXL's side channel is not on the pod's IP".to_owned());
        }
    }
    assert!(checked >= 20, "{checked} engine containers checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// llm-d's routing sidecar, as the examples run it: the release's module
/// (`cmd/pd-sidecar` of llm-d-inference-scheduler, the module the tests'
/// endpoint picker is built from), pinned by its go.sum line.
const SIDECAR: (&str, &str, &str) = (
    "github.com/llm-d/llm-d-inference-scheduler",
    "v0.4.0",
    "h1:MiqBuyXtWIOHnbcg0l++5ke2vqBOC8ITuStMIPchk/8=",
);

/// The names a Go program defines with `flag.String("name"`, `flag.Bool(`…
fn go_flags(source: &str) -> BTreeSet<String> {
    [
        "flag.String(\"",
        "flag.Bool(\"",
        "flag.Int(\"",
        "flag.Duration(\"",
    ]
    .iter()
    .flat_map(|call| {
        source
            .split(call)
            .skip(1)
            .filter_map(|rest| Some(rest.split_once('"')?.0.to_owned()))
    })
    .collect()
}

#[test]
fn the_routing_sidecar_runs_flags_and_a_connector_its_release_has() {
    let (module, version, sum) = SIDECAR;
    let Some(dir) = available(
        "the_routing_sidecar_runs_flags_and_a_connector_its_release_has",
        harness::upstream::download(module, version, sum),
    ) else {
        return;
    };
    let main = std::fs::read_to_string(dir.join("cmd/pd-sidecar/main.go")).expect("main.go");
    let flags = go_flags(&main);
    assert!(
        flags.contains("vllm-port") && flags.contains("connector"),
        "{flags:?}"
    );
    let proxy = std::fs::read_to_string(dir.join("pkg/sidecar/proxy/proxy.go")).expect("proxy.go");
    let connectors: BTreeSet<String> = proxy
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().split_once('=')?;
            name.trim()
                .starts_with("Connector")
                .then(|| value.trim().trim_matches('"').to_owned())
        })
        .collect();
    assert!(connectors.contains("nixlv2"), "{connectors:?}");
    let mut seen = 0;
    for ExampleContainer {
        file,
        field,
        container,
        ..
    } in example_containers()
    {
        let sidecar = format!("ghcr.io/llm-d/llm-d-routing-sidecar:{version}");
        if container["image"].as_str() != Some(sidecar.as_str()) {
            continue;
        }
        seen += 1;
        for arg in container["args"].as_array().into_iter().flatten() {
            let arg = arg.as_str().expect("a string");
            let (flag, value) = arg
                .trim_start_matches('-')
                .split_once('=')
                .unwrap_or((arg.trim_start_matches('-'), ""));
            assert!(
                flags.contains(flag),
                "{file} {field}: the sidecar {version} has no --{flag}"
            );
            if flag == "connector" {
                assert!(
                    connectors.contains(value),
                    "{file} {field}: no connector {value} in {connectors:?}"
                );
            }
        }
    }
    assert!(
        seen >= 2,
        "{seen} sidecars: the vLLM and the SGLang prefill/decode examples"
    );
}

/// The engine containers of the examples' other workloads (the Deployments,
/// StatefulSets and RoleBasedGroups the ResourceScalingGroup examples
/// target, a world's LeaderWorkerSets), which no admission of Tandem sees:
/// each pod template read as the one role of a service, the engine checks
/// say nothing of it (every flag, connector and variable is one its release
/// has).
#[test]
fn every_engine_workload_of_the_examples_passes_the_engine_checks() {
    use tandem::api::inference_service::InferenceServiceSpec;
    let mut checked = 0;
    let mut warnings = BTreeSet::new();
    for example in example_containers() {
        if example.field.starts_with("InferenceService ")
            || example.container["image"]
                .as_str()
                .and_then(tandem::plan::engine::identify)
                .is_none()
        {
            continue;
        }
        checked += 1;
        let spec: InferenceServiceSpec = serde_json::from_value(serde_json::json!({
            "roles": [{"name": "workload", "componentType": "worker",
                       "template": {"spec": example.pod}}]
        }))
        .expect("a pod template");
        let pod = example
            .field
            .split(".spec.containers")
            .next()
            .unwrap_or_default()
            .to_owned();
        for warning in tandem::plan::engine::check(&spec) {
            warnings.insert(format!("{} {pod}: {warning}", example.file));
        }
    }
    assert!(checked >= 20, "{checked} engine containers checked");
    assert!(
        warnings.is_empty(),
        "{}",
        warnings.into_iter().collect::<Vec<_>>().join("\n")
    );
}
