//! Tandem's install against a real control plane (a test binary of its own,
//! since it stops Tandem): with Tandem gone and its webhooks unanswered
//! (failurePolicy Fail), a ScaleView's finalizer can still be removed by
//! hand, because the webhooks' matchConditions skip objects being deleted
//! and updates that leave spec unchanged; the namespace then finishes
//! deleting.

mod common;

use std::sync::Arc;

use common::control_plane::{self, ControlPlane, Tandem};
use common::scenario::{IS, Scenario};
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tandem_stopped_a_views_finalizer_comes_off_by_hand_and_its_namespace_goes() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED with_tandem_stopped: {reason}");
        return;
    }
    let plane = ControlPlane::shared();
    let tandem = Tandem::shared(plane);
    let mut scenario = Scenario::with_tandem("e2e-uninstall", plane, tandem).await;
    scenario.kubelet(Arc::new(|_| true));
    for object in common::yaml_documents(&common::repo_path(
        "examples/scaleview/decode-ondemand-spot.yaml",
    )) {
        scenario.create_or_fail(&object).await;
    }
    scenario
        .eventually(60, "the view holds its finalizer", || async {
            let view = scenario
                .get(IS, "ScaleView", "spot-decode-sv")
                .await
                .unwrap_or_default();
            let finalizers = view["metadata"]["finalizers"].clone();
            if finalizers.as_array().is_some_and(|f| !f.is_empty()) {
                Ok(())
            } else {
                Err(finalizers.to_string())
            }
        })
        .await;

    // Tandem goes; its webhook configurations stay, failing closed.
    tandem.kill();
    let namespaces = scenario.api("v1", "Namespace").await;
    namespaces
        .delete(&scenario.namespace, &Default::default())
        .await
        .expect("deleted");
    scenario
        .eventually(60, "the view left Terminating by its finalizer", || async {
            let view = scenario
                .get(IS, "ScaleView", "spot-decode-sv")
                .await
                .unwrap_or_default();
            let deleting = !view["metadata"]["deletionTimestamp"].is_null();
            let others = scenario.names(IS, "InferenceService").await;
            if deleting && others.is_empty() {
                Ok(())
            } else {
                Err(format!("{view}"))
            }
        })
        .await;

    // An update of a view under deletion: no webhook is called, so it is
    // not refused although none answers.
    let views = scenario.api(IS, "ScaleView").await;
    let patch: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
            .expect("a patch");
    views
        .patch(
            "spot-decode-sv",
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .expect("the finalizer removed by hand with Tandem down");
    scenario
        .eventually(90, "the namespace gone", || async {
            match namespaces.get_opt(&scenario.namespace).await {
                Ok(None) => Ok(()),
                Ok(Some(ns)) => Err(format!("{:?}", ns.data["status"])),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;

    // An update that changes spec still needs the webhook: it fails closed.
    let mut other = Scenario::with_tandem("e2e-uninstall-spec", plane, tandem).await;
    other.stop_kubelet();
    let mut service = common::yaml_documents(&common::repo_path(
        "examples/inferenceservice/story1-monolithic.yaml",
    ))
    .remove(0);
    service["metadata"]["namespace"] = json!(other.namespace);
    let refused = other
        .create(&service)
        .await
        .expect_err("no webhook answers");
    assert!(
        refused.to_string().contains("failed calling webhook"),
        "{refused}"
    );
}
