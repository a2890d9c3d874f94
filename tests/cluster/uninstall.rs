//! The documented uninstall (`docs/install.md`) against a real control
//! plane (one of its own: it removes Tandem's webhooks and CRDs):
//! Tandem's objects deleted while it runs, then the webhooks, then Tandem,
//! then the CRDs. Nothing is left Terminating, and no LeaderWorkerSet is
//! deleted before its InferenceService.

use harness::control_plane::{self, ControlPlane};
use harness::scenario::{IS, Invariant, LWS, Quiet, Scenario};
use harness::serve::Tandem;
use serde_json::json;

/// The control plane of its own these scenarios run on (`main.rs` stops it
/// once they are done).
pub(crate) const PLANE: &str = "uninstall";

const CRDS: [&str; 3] = [
    "inferenceservices.fusioninfer.io",
    "scaleviews.fusioninfer.io",
    "resourcescalinggroups.resourcescalinggroup.com",
];

pub(crate) async fn the_documented_uninstall_leaves_nothing_terminating_and_no_replica_deleted_first()
 {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_documented_uninstall: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    let tandem = Tandem::shared(plane);
    let mut scenario = Scenario::with_tandem("e2e-remove", plane, tandem).await;
    scenario.nodes(1).await;
    scenario.spot_nodes(1).await;
    for object in harness::yaml_documents(&harness::repo_path(
        "examples/scaleview/decode-ondemand-spot.yaml",
    )) {
        scenario.create_or_fail(&object).await;
    }
    scenario
        .eventually(60, "the service's replicas and the view's lock", || async {
            let sets = scenario.names(LWS, "LeaderWorkerSet").await;
            let service = scenario
                .get(IS, "InferenceService", "spot-decode")
                .await
                .unwrap_or_default();
            let locked = service["status"]["scaleViews"]
                .as_array()
                .is_some_and(|l| !l.is_empty());
            if sets.len() >= 2 && locked {
                Ok(())
            } else {
                Err(format!("{sets:?}"))
            }
        })
        .await;

    // 1. Tandem's objects, while Tandem runs.
    for kind in ["ScaleView", "InferenceService"] {
        let api = scenario.api(IS, kind).await;
        api.delete_collection(&Default::default(), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("deleting the {kind}s: {e}"));
    }
    scenario
        .eventually(
            90,
            "Tandem's objects and their LeaderWorkerSets gone",
            || async {
                let mut left = Vec::new();
                for (api_version, kind) in [
                    (IS, "ScaleView"),
                    (IS, "InferenceService"),
                    (LWS, "LeaderWorkerSet"),
                ] {
                    left.extend(scenario.names(api_version, kind).await);
                }
                if left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{left:?}"))
                }
            },
        )
        .await;

    // 2. The webhooks. 3. Tandem.
    for (api_version, kind, name) in [
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "tandem-validating",
        ),
        (
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration",
            "tandem-mutating",
        ),
    ] {
        let object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}});
        control_plane::api_for(&scenario.client, &object)
            .await
            .delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    }
    tandem.kill();

    // 4. The CRDs, last.
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {}});
    let crds = control_plane::api_for(&scenario.client, &crd).await;
    for name in CRDS {
        crds.delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    }
    scenario
        .eventually(60, "the CRDs gone, none Terminating", || async {
            let mut left = Vec::new();
            for name in CRDS {
                if crds
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some()
                {
                    left.push(name);
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        })
        .await;
    // The garbage collector deletes the pods after their StatefulSets, and
    // each stays Terminating for its grace period on its node (30 s, the
    // default): gone, none stuck, within that and a margin.
    scenario
        .eventually(90, "every pod gone, none stuck Terminating", || async {
            let pods: Vec<String> = scenario
                .list("v1", "Pod")
                .await
                .iter()
                .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
                .collect();
            if pods.is_empty() {
                Ok(())
            } else {
                Err(format!("pods left: {pods:?}"))
            }
        })
        .await;

    // No LeaderWorkerSet was deleted before its InferenceService: each went
    // by garbage collection after the service's delete.
    let writes = scenario.writes();
    let service_deleted = writes
        .iter()
        .filter(|w| w.resource == "inferenceservices" && w.verb.starts_with("delete"))
        .map(|w| w.time.clone())
        .min()
        .expect("the services' delete in the audit log");
    let early: Vec<String> = writes
        .iter()
        .filter(|w| {
            w.resource == "leaderworkersets" && w.verb == "delete" && w.time < service_deleted
        })
        .map(harness::request::Request::summary)
        .collect();
    assert!(early.is_empty(), "deleted before their service: {early:#?}");
    let by_collector = writes
        .iter()
        .filter(|w| w.resource == "leaderworkersets" && w.verb == "delete")
        .all(|w| w.user.ends_with(":generic-garbage-collector"));
    assert!(
        by_collector,
        "the LeaderWorkerSets go by garbage collection"
    );
    scenario.excuse(
        Invariant::Quiet,
        "Tandem, its webhooks and its CRDs are uninstalled: nothing of Tandem's is left to settle",
    );
    scenario.finish(Quiet::Checked).await;
}
