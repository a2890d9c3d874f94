//! The leader killed mid-scale, against a real control plane (one of
//! its own, so that killing Tandem disturbs no other scenario):
//! the other replica takes the Lease and finishes the scale.

use harness::control_plane::{self, ControlPlane};
use harness::scenario::{IS, LWS, Quiet, Scenario, wait_service_ready};
use harness::serve::Tandem;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The control plane of its own these scenarios run on (`main.rs` stops it
/// once they are done).
pub(crate) const PLANE: &str = "leader";

/// Refuses LeaderWorkerSets named `*-2` in `namespace`: the API server's
/// own admission, so a scale to three replicas stops half-done.
fn refuse_third_replica(namespace: &str) -> [Value; 2] {
    [
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "e2e-refuse-third-replica"},
            "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["leaderworkerset.x-k8s.io"],
                    "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["leaderworkersets"]}]},
                "validations": [{"expression": "!object.metadata.name.endsWith('-2')",
                    "message": "the test holds the third replica back"}]}}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "e2e-refuse-third-replica"},
            "spec": {"policyName": "e2e-refuse-third-replica", "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}}),
    ]
}

async fn holder(scenario: &Scenario) -> String {
    let leases = control_plane::api_for(
        &scenario.client,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"namespace": "tandem-system"}}),
    )
    .await;
    leases
        .get_opt("tandem-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.data["spec"]["holderIdentity"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

pub(crate) async fn when_the_leader_dies_mid_scale_the_other_replica_takes_over_and_finishes_it() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED when_the_leader_dies_mid_scale: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    let first = Tandem::shared(plane);
    let mut scenario = Scenario::with_tandem("e2e-leader", plane, first).await;
    scenario.nodes(1).await;
    let service =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story1-monolithic.yaml"))
            .remove(0);
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    scenario
        .create(&service)
        .await
        .expect("the service is admitted");
    scenario
        .eventually(60, "the first replica deploys the service", || async {
            let sets = scenario.names(LWS, "LeaderWorkerSet").await;
            if sets.len() == 1 {
                Ok(())
            } else {
                Err(format!("{sets:?}"))
            }
        })
        .await;
    let second: &'static Tandem = Box::leak(Box::new(Tandem::start(plane, "tandem-1")));
    assert_eq!(holder(&scenario).await, "tandem-0");

    // A scale the leader cannot finish: the API server refuses the third
    // replica. Once the second is written, the leader dies.
    for object in refuse_third_replica(&scenario.namespace) {
        control_plane::apply(&scenario.client, &object).await;
    }
    // The policy reaches the API server's admission a moment after it is
    // stored: a dry-run create of a copy of the first set, named `*-2`, is
    // refused by it once it is in force. Only then does the scale start, so
    // that the leader cannot write the third replica before the policy holds.
    let sets = scenario.api(LWS, "LeaderWorkerSet").await;
    let first_set = scenario.list(LWS, "LeaderWorkerSet").await.remove(0);
    let mut probe = json!({
        "apiVersion": LWS, "kind": "LeaderWorkerSet",
        "metadata": {"name": "e2e-policy-probe-2", "namespace": scenario.namespace},
        "spec": first_set["spec"].clone(),
    });
    probe["spec"]["replicas"] = json!(1);
    let probe: DynamicObject = serde_json::from_value(probe).expect("a LeaderWorkerSet");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    scenario
        .eventually(30, "the policy in force", || async {
            match sets.create(&dry_run, &probe).await {
                Err(e) if e.to_string().contains("holds the third replica back") => Ok(()),
                Err(e) => Err(e.to_string()),
                Ok(_) => Err("a dry-run create of e2e-policy-probe-2 was admitted".to_owned()),
            }
        })
        .await;

    let services = scenario.api(IS, "InferenceService").await;
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/roles/0/replicas", "value": 3}
    ]))
    .expect("a JSON patch");
    services
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .expect("the scale to three admitted");
    scenario
        .eventually(30, "the third replica refused", || async {
            let refused = scenario.writes().iter().any(|w| {
                w.by_tandem()
                    && w.code == 422
                    && w.name.as_deref().is_some_and(|n| n.ends_with("-2"))
            });
            if refused {
                return Ok(());
            }
            Err(format!(
                "{:?}",
                scenario.names(LWS, "LeaderWorkerSet").await
            ))
        })
        .await;
    first.kill();
    assert_eq!(
        scenario.names(LWS, "LeaderWorkerSet").await.len(),
        2,
        "half done"
    );

    // The webhooks go to the replica that is left (as the Service would send
    // them), the policy goes, and the new leader finishes the scale.
    second.register(plane);
    for object in refuse_third_replica(&scenario.namespace).iter().rev() {
        let api = control_plane::api_for(&scenario.client, object).await;
        api.delete(
            object["metadata"]["name"].as_str().expect("a name"),
            &Default::default(),
        )
        .await
        .expect("the policy removed");
    }
    scenario.tandem = second;
    scenario
        .eventually(90, "the new leader finished the scale", || async {
            let sets = scenario.names(LWS, "LeaderWorkerSet").await;
            let holder = holder(&scenario).await;
            if sets.len() == 3 && holder == "tandem-1" {
                Ok(())
            } else {
                Err(format!("{holder}: {sets:?}"))
            }
        })
        .await;
    // The third replica's pod is Ready only after kwok's load delay (2 to
    // 6 s): its status write comes then, and is not a write of a settled
    // namespace.
    wait_service_ready(&scenario, &name).await;
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}
