//! What a role's engine would refuse or miss, read against the release its
//! image names: each a warning that names the field, the release and, where
//! one is near, the name that release has. A container whose image is no
//! known engine release gets none (forks and private images are not
//! refused, nor second-guessed).

use serde_json::Value;

use super::command::{self, CommandLine};
use super::launch::{self, Launch};
use super::releases::{self, Engine, Release};
use crate::api::inference_service::{ComponentType, InferenceServiceSpec, Role};

/// The resources a pod asks GPUs with.
const GPU_RESOURCES: [&str; 2] = ["nvidia.com/gpu", "amd.com/gpu"];

/// The warnings for every engine container of `spec`'s serving roles.
pub fn check(spec: &InferenceServiceSpec) -> Vec<String> {
    let mut warnings = Vec::new();
    for (r, role) in spec.roles.iter().enumerate() {
        if role.is_router() {
            continue;
        }
        let Some(containers) = role
            .template
            .as_ref()
            .and_then(|t| t["spec"]["containers"].as_array())
        else {
            continue;
        };
        let per_pod = pod_gpus(role);
        for (c, container) in containers.iter().enumerate() {
            let field = format!("spec.roles[{r}].template.spec.containers[{c}]");
            warnings.extend(check_container(role, container, per_pod, &field));
        }
    }
    warnings
}

/// The GPUs each of a replica's pods asks for, as the scheduler counts them
/// ([`Role::pod_requests`], which the gang reserves with too); 0 for a
/// template that does not parse (admission refuses it on its own).
fn pod_gpus(role: &Role) -> u64 {
    let Ok(requests) = role.pod_requests() else {
        return 0;
    };
    GPU_RESOURCES
        .iter()
        .filter_map(|resource| requests.get(*resource))
        .map(|q| {
            // GPUs come in whole devices (admission refuses a fraction).
            q.to_decimal()
                .trunc()
                .to_string()
                .parse::<u64>()
                .unwrap_or(0)
        })
        .sum()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn check_container(role: &Role, container: &Value, per_pod: u64, field: &str) -> Vec<String> {
    let Some((engine, version)) = container["image"].as_str().and_then(releases::identify) else {
        return Vec::new();
    };
    let Some(release) = releases::release(engine, &version) else {
        return Vec::new();
    };
    let mut warnings = environment(release, container, field);
    let Some(words) = command::server_arguments(
        engine,
        &strings(&container["command"]),
        &strings(&container["args"]),
        field,
    ) else {
        return warnings;
    };
    let line = command::parse(release, &words);
    warnings.extend(unknown_flags(release, &line));
    warnings.extend(kv_transfer(release, role, &line, field));
    warnings.extend(parallelism(release, role, &line, per_pod, field));
    warnings.extend(multi_node(release, role, &line));
    warnings
}

fn unknown_flags(release: &Release, line: &CommandLine) -> Vec<String> {
    line.unknown
        .iter()
        .map(|unknown| {
            let hint = match (unknown.ambiguous, unknown.nearest.as_slice()) {
                (true, candidates) => {
                    format!(" (an abbreviation of several: {})", candidates.join(", "))
                }
                (false, [nearest]) => format!(" (did you mean {nearest}?)"),
                (false, _) => String::new(),
            };
            format!(
                "{}: {} has no flag {}{hint}",
                unknown.field,
                release.title(),
                unknown.written
            )
        })
        .collect()
}

/// The KV transfer a prefill or decode role needs, and the connector or
/// backend it names.
fn kv_transfer(release: &Release, role: &Role, line: &CommandLine, field: &str) -> Vec<String> {
    let disaggregated = matches!(
        role.component_type,
        ComponentType::Prefiller | ComponentType::Decoder
    );
    let mut warnings = Vec::new();
    match release.engine {
        Engine::Vllm => {
            let config = line
                .options
                .iter()
                .filter(|o| o.flag == "--kv-transfer-config")
                .collect::<Vec<_>>();
            if config.is_empty() {
                if disaggregated {
                    warnings.push(format!(
                        "{field}: role {} is a {} but its {} has no --kv-transfer-config: its KV cache goes nowhere",
                        role.name,
                        role.component_type.as_str(),
                        release.title()
                    ));
                }
                return warnings;
            }
            let mut connector = None;
            let mut module_path = false;
            for given in config {
                let value = given.value.as_deref().unwrap_or_default();
                match given.key.as_deref() {
                    None => {
                        let parsed: Value = serde_json::from_str(value).unwrap_or(Value::Null);
                        if let Some(name) = parsed["kv_connector"].as_str() {
                            connector = Some((name.to_owned(), given.field.clone()));
                        }
                        module_path |= !parsed["kv_connector_module_path"].is_null();
                    }
                    Some("kv_connector") => {
                        connector = Some((value.to_owned(), given.field.clone()));
                    }
                    Some("kv_connector_module_path") => module_path = true,
                    Some(_) => {}
                }
            }
            // A module path loads a connector of any name.
            if let Some((name, at)) = connector.filter(|_| !module_path)
                && !release.kv_connectors.contains(&name)
            {
                warnings.push(format!(
                    "{at}: {} registers no KV connector {name}{}; it registers {}",
                    release.title(),
                    hint(command::nearest(&name, release.kv_connectors.iter())),
                    names(&release.kv_connectors)
                ));
            }
        }
        Engine::Sglang => {
            if disaggregated && !line.has(&["--disaggregation-mode"]) {
                warnings.push(format!(
                    "{field}: role {} is a {} but its {} has no --disaggregation-mode: it serves whole requests",
                    role.name,
                    role.component_type.as_str(),
                    release.title()
                ));
            }
            if let Some(given) = line.value(&["--disaggregation-transfer-backend"])
                && let Some(backend) = given.value.as_deref()
                && !release.transfer_backends.contains(backend)
            {
                warnings.push(format!(
                    "{}: {} has no transfer backend {backend}{}; it has {}",
                    given.field,
                    release.title(),
                    hint(command::nearest(backend, release.transfer_backends.iter())),
                    names(&release.transfer_backends)
                ));
            }
        }
    }
    warnings
}

/// Tensor × pipeline (× data) parallelism against the replica's GPUs.
fn parallelism(
    release: &Release,
    role: &Role,
    line: &CommandLine,
    per_pod: u64,
    field: &str,
) -> Vec<String> {
    let nodes = role.node_count();
    let gpus = per_pod.saturating_mul(u64::try_from(nodes).unwrap_or(1));
    if gpus == 0 {
        // No GPU asked for (a CPU build, a simulator): nothing to match.
        return Vec::new();
    }
    // 1 when not given; None when given as something else than a number
    // (`$(TP)`), which only the pod knows: then nothing is said.
    let size = |flags: &[&str]| -> Option<u64> {
        match line.value(flags).and_then(|o| o.value.as_deref()) {
            None => Some(1),
            Some(value) => value.parse().ok(),
        }
    };
    let sizes = match release.engine {
        Engine::Vllm => (
            size(&["--tensor-parallel-size", "-tp"]),
            size(&["--pipeline-parallel-size", "-pp"]),
            size(&["--data-parallel-size", "-dp"]),
        ),
        Engine::Sglang => (
            size(&["--tp-size", "--tensor-parallel-size"]),
            size(&["--pp-size", "--pipeline-parallel-size"]),
            // Data-parallel attention runs inside the tensor-parallel group.
            if line.has(&["--enable-dp-attention"]) {
                Some(1)
            } else {
                size(&["--dp-size", "--data-parallel-size"])
            },
        ),
    };
    let (Some(tensor), Some(pipeline), Some(data)) = sizes else {
        return Vec::new();
    };
    let used = tensor.saturating_mul(pipeline).saturating_mul(data);
    if used == gpus {
        return Vec::new();
    }
    vec![format!(
        "{field}: {} runs tensor-parallel {tensor} × pipeline-parallel {pipeline} × data-parallel {data} = {used} GPU(s), but a replica of role {} has {gpus} ({nodes} pod(s) × {} GPU(s))",
        release.title(),
        role.name,
        per_pod
    )]
}

/// A multi-node role is started by Tandem the way its release spans nodes
/// ([`launch::multi_node_launch`]); an executor backend the user sets that
/// contradicts that start is named. vLLM accepts `--nnodes` only on its
/// `mp` backend (`vllm/config/parallel.py`), and Tandem's Ray start needs
/// `ray`.
fn multi_node(release: &Release, role: &Role, line: &CommandLine) -> Vec<String> {
    if role.node_count() < 2 || release.engine != Engine::Vllm {
        return Vec::new();
    }
    let (wanted, how) = match launch::launch_of_release(release) {
        Launch::VllmNodes => (
            "mp",
            "with --nnodes, --node-rank and --master-addr on each pod",
        ),
        _ => (
            "ray",
            "on Ray (a Ray head on the leader, the workers joining it)",
        ),
    };
    line.value(&["--distributed-executor-backend"])
        .and_then(|given| {
            let backend = given.value.as_deref()?;
            (backend != wanted).then(|| {
                format!(
                    "{}: role {} spans {} nodes, which Tandem starts for {} {how}, on the {wanted} executor; --distributed-executor-backend {backend} contradicts it",
                    given.field,
                    role.name,
                    role.node_count(),
                    release.title()
                )
            })
        })
        .into_iter()
        .collect()
}

/// Environment variables named like the engine's own (`VLLM_…`,
/// `SGLANG_…`) that the release does not read.
fn environment(release: &Release, container: &Value, field: &str) -> Vec<String> {
    let prefix = match release.engine {
        Engine::Vllm => "VLLM_",
        Engine::Sglang => "SGLANG_",
    };
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, variable)| {
            let name = variable["name"].as_str()?;
            (name.starts_with(prefix) && !release.environment.contains(name)).then(|| {
                format!(
                    "{field}.env[{i}].name: {} reads no environment variable {name}{}",
                    release.title(),
                    hint(command::nearest(name, release.environment.iter()))
                )
            })
        })
        .collect()
}

fn hint(nearest: Option<String>) -> String {
    nearest.map_or_else(String::new, |n| format!(" (did you mean {n}?)"))
}

fn names(set: &std::collections::BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A service of one role running `container`.
    fn spec(component_type: &str, nodes: i32, container: Value) -> InferenceServiceSpec {
        serde_json::from_value(json!({"roles": [{
            "name": "decode", "componentType": component_type, "replicas": 1,
            "multinode": {"nodeCount": nodes},
            "template": {"spec": {"containers": [container]}}}]}))
        .expect("a spec")
    }

    fn vllm(image: &str, args: &[&str]) -> Value {
        json!({"name": "vllm", "image": image, "args": args,
               "resources": {"limits": {"nvidia.com/gpu": "1"}}})
    }

    const NIXL: &str = r#"{"kv_connector":"NixlConnector","kv_role":"kv_both"}"#;

    #[test]
    fn the_seeds_connector_is_named_with_the_release_and_what_it_registers() {
        let seed = r#"{"kv_connector":"PyNcclConnector","kv_role":"kv_consumer"}"#;
        let warnings = check(&spec(
            "decoder",
            1,
            vllm(
                "vllm/vllm-openai:v0.11.0",
                &["--model", "Qwen/Qwen3-8B", "--kv-transfer-config", seed],
            ),
        ));
        assert_eq!(
            warnings,
            [
                "spec.roles[0].template.spec.containers[0].args[3]: vLLM 0.11.0 registers no KV connector PyNcclConnector (did you mean P2pNcclConnector?); it registers LMCacheConnectorV1, MultiConnector, NixlConnector, OffloadingConnector, P2pNcclConnector, SharedStorageConnector"
            ]
        );
        // The same name through the dotted spelling, on the newest release.
        let dotted = check(&spec(
            "decoder",
            1,
            vllm(
                "vllm/vllm-openai:v0.34.0",
                &[
                    "--kv-transfer-config.kv_connector",
                    "PyNcclConnector",
                    "--kv-transfer-config.kv_role=kv_both",
                ],
            ),
        ));
        assert_eq!(dotted.len(), 1, "{dotted:?}");
        assert!(dotted[0].starts_with("spec.roles[0].template.spec.containers[0].args[1]: vLLM 0.34.0 registers no KV connector PyNcclConnector"), "{dotted:?}");
        // A module path loads a connector of any name.
        let plugin = r#"{"kv_connector":"MyConnector","kv_connector_module_path":"my.module","kv_role":"kv_both"}"#;
        assert_eq!(
            check(&spec(
                "decoder",
                1,
                vllm(
                    "vllm/vllm-openai:v0.11.0",
                    &["--kv-transfer-config", plugin]
                )
            )),
            Vec::<String>::new()
        );
        assert_eq!(
            check(&spec(
                "decoder",
                1,
                vllm("vllm/vllm-openai:v0.34.0", &["--kv-transfer-config", NIXL])
            )),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_prefill_or_decode_role_without_kv_transfer_is_told() {
        let warnings = check(&spec(
            "prefiller",
            1,
            vllm("vllm/vllm-openai:v0.34.0", &["--model", "m"]),
        ));
        assert_eq!(
            warnings,
            [
                "spec.roles[0].template.spec.containers[0]: role decode is a prefiller but its vLLM 0.34.0 has no --kv-transfer-config: its KV cache goes nowhere"
            ]
        );
        assert!(
            check(&spec(
                "worker",
                1,
                vllm("vllm/vllm-openai:v0.34.0", &["--model", "m"])
            ))
            .is_empty()
        );
        let sglang = json!({"name": "sglang", "image": "lmsysorg/sglang:v0.5.23",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": ["--model-path", "m", "--disaggregation-transfer-backend", "nixel"]});
        let warnings = check(&spec("decoder", 1, sglang));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].ends_with("has no --disaggregation-mode: it serves whole requests"));
        assert!(
            warnings[1].starts_with("spec.roles[0].template.spec.containers[0].args[3]: SGLang 0.5.23 has no transfer backend nixel (did you mean nixl?); it has "),
            "{warnings:?}"
        );
    }

    #[test]
    fn an_unknown_flag_is_named_with_its_field_and_the_nearest_flag() {
        let warnings = check(&spec(
            "worker",
            1,
            vllm(
                "vllm/vllm-openai:v0.11.0",
                &[
                    "--model",
                    "m",
                    "--tensor-paralel-size",
                    "1",
                    "--max-model-len=4096",
                    "--enable_prefix_caching",
                ],
            ),
        ));
        assert_eq!(
            warnings,
            [
                "spec.roles[0].template.spec.containers[0].args[2]: vLLM 0.11.0 has no flag --tensor-paralel-size (did you mean --tensor-parallel-size?)"
            ]
        );
    }

    #[test]
    fn parallelism_must_use_the_replicas_gpus() {
        let mut container = vllm(
            "vllm/vllm-openai:v0.11.0",
            &["--model", "m", "-tp", "16", "--kv-transfer-config", NIXL],
        );
        container["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
        assert!(check(&spec("decoder", 2, container.clone())).is_empty());
        assert_eq!(
            check(&spec("decoder", 4, container)),
            [
                "spec.roles[0].template.spec.containers[0]: vLLM 0.11.0 runs tensor-parallel 16 × pipeline-parallel 1 × data-parallel 1 = 16 GPU(s), but a replica of role decode has 32 (4 pod(s) × 8 GPU(s))"
            ]
        );
        // No GPU asked for: a CPU build or a simulator, nothing to match.
        let cpu =
            json!({"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "args": ["-tp", "2"]});
        assert!(check(&spec("worker", 1, cpu)).is_empty());
        // A size only the pod knows (a variable the kubelet expands).
        let mut variable = vllm("vllm/vllm-openai:v0.11.0", &["-tp", "$(TP_SIZE)"]);
        variable["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
        assert!(check(&spec("worker", 1, variable)).is_empty());
    }

    #[test]
    fn a_backend_that_contradicts_tandems_multi_node_start_is_named() {
        let container = |image: &str, backend: &str| {
            let mut c = vllm(
                image,
                &[
                    "--model",
                    "m",
                    "-tp",
                    "16",
                    "--distributed-executor-backend",
                    backend,
                ],
            );
            c["resources"]["limits"]["nvidia.com/gpu"] = json!("8");
            c
        };
        assert!(
            check(&spec(
                "worker",
                2,
                container("vllm/vllm-openai:v0.11.0", "ray")
            ))
            .is_empty()
        );
        assert!(
            check(&spec(
                "worker",
                2,
                container("vllm/vllm-openai:v0.34.0", "mp")
            ))
            .is_empty()
        );
        assert_eq!(
            check(&spec(
                "worker",
                2,
                container("vllm/vllm-openai:v0.34.0", "ray")
            )),
            [
                "spec.roles[0].template.spec.containers[0].args[5]: role decode spans 2 nodes, which Tandem starts for vLLM 0.34.0 with --nnodes, --node-rank and --master-addr on each pod, on the mp executor; --distributed-executor-backend ray contradicts it"
            ]
        );
        let on_ray = check(&spec(
            "worker",
            2,
            container("vllm/vllm-openai:v0.11.0", "mp"),
        ));
        assert_eq!(on_ray.len(), 1, "{on_ray:?}");
        assert!(on_ray[0].contains("for vLLM 0.11.0 on Ray"), "{on_ray:?}");
        // A single-node replica may pick its backend.
        let mut single = container("vllm/vllm-openai:v0.34.0", "ray");
        single["resources"]["limits"]["nvidia.com/gpu"] = json!("16");
        assert!(check(&spec("worker", 1, single)).is_empty());
    }

    #[test]
    fn an_unknown_image_or_release_is_not_second_guessed() {
        for image in [
            "my-registry/vllm-fork:v0.11.0",
            "vllm/vllm-openai:v0.9.9",
            "vllm/vllm-openai:latest",
        ] {
            let container = vllm(
                image,
                &[
                    "--no-such-flag",
                    "--kv-transfer-config",
                    r#"{"kv_connector":"PyNcclConnector"}"#,
                ],
            );
            assert!(check(&spec("decoder", 1, container)).is_empty(), "{image}");
        }
    }

    #[test]
    fn an_engine_variable_the_release_does_not_read_is_named() {
        let mut container = vllm("vllm/vllm-openai:v0.34.0", &["--model", "m"]);
        container["env"] = json!([
            {"name": "HF_HOME", "value": "/models"},
            {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "x"},
            {"name": "VLLM_NIXL_SIDE_CHANEL_PORT", "value": "5600"}]);
        assert_eq!(
            check(&spec("worker", 1, container)),
            [
                "spec.roles[0].template.spec.containers[0].env[2].name: vLLM 0.34.0 reads no environment variable VLLM_NIXL_SIDE_CHANEL_PORT (did you mean VLLM_NIXL_SIDE_CHANNEL_PORT?)"
            ]
        );
    }
}
