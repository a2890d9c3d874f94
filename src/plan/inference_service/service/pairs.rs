//! Prefill and decode reaching zero and leaving it together
//! (`plan::inference_service::pair`), pass by pass through
//! [`super::reconcile`]: the side that asks 0 first keeps a replica until
//! the other follows, both go in one pass, the service at zero is Ready
//! `ScaledToZero` with its router kept, and the first ask brings both back
//! in one pass. An unchanged world writes nothing at every stop.

use serde_json::json;

use super::fixtures::{Cluster, condition};
use super::{InferenceService, Pass};
use crate::plan::inference_service::status;

/// Prefill and decode with a router, at `prefill` and `decode` replicas.
fn paired(prefill: i32, decode: i32) -> InferenceService {
    let template = json!({"spec": {"containers": [{"name": "vllm", "image": "v"}]}});
    serde_json::from_value(json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": "qwen", "namespace": "default", "uid": "u"},
        "spec": {"roles": [
            {"name": "prefill", "componentType": "prefiller", "replicas": prefill,
             "drain": {"seconds": 5}, "template": template},
            {"name": "decode", "componentType": "decoder", "replicas": decode,
             "drain": {"seconds": 5}, "template": template},
            {"name": "router", "componentType": "router", "replicas": 1},
        ]}
    }))
    .unwrap()
}

/// The service's views ask `prefill` and `decode`; its status stays.
fn rescale(service: &mut InferenceService, prefill: i32, decode: i32) {
    let status = service.status.take();
    *service = paired(prefill, decode);
    service.status = status;
}

/// The LeaderWorkerSets a pass creates and deletes, by name.
fn moved(pass: &Pass) -> (Vec<&str>, Vec<&str>) {
    fn names(objects: Vec<&serde_json::Value>) -> Vec<&str> {
        let mut names: Vec<&str> = objects
            .into_iter()
            .filter(|o| o["kind"] == "LeaderWorkerSet")
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        names.sort_unstable();
        names
    }
    (
        names(pass.apply.iter().map(|a| &a.object).collect()),
        names(pass.delete.iter().map(|d| &d.object).collect()),
    )
}

/// The reasons of a pass's Events about the pair and zero.
fn reasons(pass: &Pass) -> Vec<&'static str> {
    pass.events
        .iter()
        .map(|e| e.reason)
        .filter(|r| ["KeptForPair", status::SCALED_TO_ZERO, "LeavingZero"].contains(r))
        .collect()
}

fn ready(service: &InferenceService) -> (String, String) {
    condition(service, "Ready")
}

/// One pass, and the endpoint picker's Deployment ready, as its
/// controller would make it.
fn step(cluster: &mut Cluster, service: &InferenceService, at: i64) -> Pass {
    let pass = cluster.pass(service, at);
    for child in &mut cluster.children {
        if child["kind"] == "Deployment" {
            let replicas = child["spec"]["replicas"].clone();
            child["status"] = json!({"replicas": replicas, "readyReplicas": replicas});
        }
    }
    pass
}

/// A pass, its status kept on the service, then a second pass of the same
/// world, which must write nothing (children or status).
fn settle(cluster: &mut Cluster, service: &mut InferenceService, at: i64) -> Pass {
    let pass = step(cluster, service, at);
    service.status = Some(pass.status.clone());
    // The status of the world the pass made.
    service.status = Some(step(cluster, service, at + 1).status);
    let again = step(cluster, service, at + 2);
    assert!(
        again.apply.is_empty() && again.delete.is_empty(),
        "an unchanged world writes nothing: {:?}",
        moved(&again)
    );
    assert_eq!(Some(&again.status), service.status.as_ref());
    pass
}

/// The service at zero: Ready `ScaledToZero`, `0/0`, nothing kept, its
/// message saying the picker has no queue, the router's objects there.
fn assert_at_zero(service: &InferenceService, cluster: &Cluster) {
    let at_zero = service.status.as_ref().unwrap();
    assert_eq!(at_zero.ready.as_deref(), Some("0/0"));
    assert_eq!(at_zero.components["prefill"].kept_for_pair, None);
    assert_eq!(
        ready(service),
        ("True".into(), status::SCALED_TO_ZERO.into())
    );
    let message = &at_zero
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(
        message.ends_with("without a queue (spec.roles[2].queue) its picker answers 503 meanwhile"),
        "{message}"
    );
    for kind in ["InferencePool", "Deployment", "ConfigMap", "Service"] {
        assert!(
            cluster.children.iter().any(|c| c["kind"] == kind),
            "the router's {kind} stays at zero"
        );
    }
}

#[test]
fn prefill_and_decode_reach_zero_together_and_come_back_together() {
    let mut cluster = Cluster::new(&[]);
    let mut service = paired(1, 2);
    settle(&mut cluster, &mut service, 0);
    assert_eq!(
        cluster.lws(),
        ["qwen-prefill-0", "qwen-decode-0", "qwen-decode-1"]
    );

    // Prefill's view asks 0 first: prefill keeps its replica while decode
    // serves, and says why.
    rescale(&mut service, 0, 2);
    let first = settle(&mut cluster, &mut service, 10);
    assert_eq!(reasons(&first), ["KeptForPair"]);
    assert_eq!(moved(&first), (vec![], vec![]));
    let prefill = &service.status.as_ref().unwrap().components["prefill"];
    assert_eq!(prefill.desired_replicas, 1);
    assert!(
        prefill
            .kept_for_pair
            .as_deref()
            .unwrap()
            .starts_with("the prefillers ask 0 replicas while the decoders ask 2"),
        "{prefill:?}"
    );
    assert_eq!(
        ready(&service),
        ("True".into(), "AllComponentsRunning".into())
    );

    // Decode follows: every replica of both leaves traffic in one pass and
    // is deleted in one pass when the drain ends; the router's objects stay.
    rescale(&mut service, 0, 0);
    let draining = step(&mut cluster, &service, 20);
    let mut marked = super::fixtures::applied_pods(&draining);
    marked.sort();
    assert_eq!(
        marked
            .iter()
            .map(|(pod, _)| pod.as_str())
            .collect::<Vec<_>>(),
        ["qwen-decode-0-0", "qwen-decode-1-0", "qwen-prefill-0-0"],
        "{marked:?}"
    );
    assert_eq!(moved(&draining), (vec![], vec![]));
    assert_eq!(
        ready(&InferenceService {
            status: Some(draining.status.clone()),
            ..paired(0, 0)
        }),
        ("True".into(), "AllComponentsRunning".into()),
        "not at zero while the last replicas drain"
    );
    service.status = Some(draining.status);
    let down = step(&mut cluster, &service, 25);
    assert_eq!(
        moved(&down),
        (
            vec![],
            vec!["qwen-decode-0", "qwen-decode-1", "qwen-prefill-0"]
        )
    );
    assert!(
        down.delete
            .iter()
            .all(|d| d.object["kind"] == "LeaderWorkerSet")
    );
    service.status = Some(down.status);
    let zero = settle(&mut cluster, &mut service, 26);
    assert_eq!(reasons(&zero), [status::SCALED_TO_ZERO]);
    assert!(cluster.lws().is_empty());
    assert!(cluster.pods.is_empty());
    assert_at_zero(&service, &cluster);

    // Prefill's view asks 1: decode's first replica comes in the same pass.
    rescale(&mut service, 1, 0);
    let up = settle(&mut cluster, &mut service, 40);
    assert_eq!(reasons(&up), ["KeptForPair", "LeavingZero"]);
    assert!(
        up.events
            .iter()
            .any(|e| e.note == "the service leaves zero: prefill 1, decode 1"),
        "{:?}",
        up.events
    );
    assert_eq!(
        moved(&up),
        (vec!["qwen-decode-0", "qwen-prefill-0"], vec![])
    );
    assert_eq!(
        service.status.as_ref().unwrap().components["decode"]
            .kept_for_pair
            .as_deref()
            .map(|why| why.starts_with("the decoders ask 0 replicas while the prefillers ask 1")),
        Some(true)
    );
    assert_eq!(
        ready(&service),
        ("True".into(), "AllComponentsRunning".into())
    );
}
