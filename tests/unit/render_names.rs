//! `tandem render` refuses the names Kubernetes or LWS would refuse, as the
//! webhook does (issue 23): a service whose LeaderWorkerSets LWS's webhook
//! refuses, under every upgrade strategy, with or without a router; and an
//! object name the API server refuses.

use serde_json::{Value, json};

fn render(object: &Value) -> std::process::Output {
    harness::render_stdin(serde_json::to_string(object).expect("json").as_bytes())
}

fn story(name: &str, upgrade: Option<&str>, routed: bool) -> Value {
    let path = if routed {
        "examples/inferenceservice/router.yaml"
    } else {
        "examples/seeds/story2-prefill-decode.yaml"
    };
    let mut service = harness::yaml_documents(&harness::repo_path(path))
        .into_iter()
        .find(|o| o["kind"] == "InferenceService")
        .expect("a service");
    service["metadata"]["name"] = json!(name);
    if let Some(kind) = upgrade {
        let mut options = json!({"gatewayClassName": "istio"});
        if kind == "IncrementalUpgrade" {
            options["stepSizePercent"] = json!(10);
            options["intervalSeconds"] = json!(30);
        }
        service["spec"]["upgradeStrategy"] =
            json!({"type": kind, "incrementalUpgradeOptions": options});
    }
    service
}

#[test]
fn a_name_lws_refuses_is_denied_with_a_rename_under_every_strategy() {
    for upgrade in [
        None,
        Some("RollingUpdate"),
        Some("None"),
        Some("NewRevision"),
        Some("IncrementalUpgrade"),
    ] {
        for routed in [false, true] {
            let output = render(&story("llama-3.1-8b", upgrade, routed));
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(1),
                "{upgrade:?} {routed}: {stderr}"
            );
            assert!(
                stderr.contains(
                    "metadata.name: \"llama-3.1-8b\" makes LeaderWorkerSet \"llama-3.1-8b-"
                ) && stderr.contains("which must be a DNS-1035 label")
                    && stderr.contains("use \"llama-3-1-8b\""),
                "{upgrade:?} {routed}: {stderr}"
            );
            let renamed = render(&story("llama-3-1-8b", upgrade, routed));
            assert!(
                renamed.status.success(),
                "{upgrade:?} {routed}: {}",
                String::from_utf8_lossy(&renamed.stderr)
            );
        }
    }
}

#[test]
fn an_object_name_the_api_server_refuses_is_denied() {
    let view = json!({"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
        "metadata": {"name": "Qwen-7B"},
        "spec": {"targetRef": {"name": "qwen", "componentType": "decoder"}}});
    let output = render(&view);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ScaleView default/Qwen-7B: metadata.name: must be a DNS-1123 subdomain"),
        "{stderr}"
    );
}
