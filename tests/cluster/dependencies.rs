//! What the cluster has installed decides what Tandem writes, against a real
//! control plane (one of its own: it swaps cluster-wide CRDs). The
//! API server prunes what a CRD's schema lacks, so a field Tandem wrote that
//! the installed Volcano does not know would vanish, and Tandem would write
//! it again forever:
//!
//! - Volcano v1.13.3's PodGroup CRD (no `subGroupPolicy`): story 4 deploys
//!   with the minTaskMember layout, the stored PodGroup is what Tandem
//!   wrote, nothing is written again for 10 s, the service's condition
//!   says why; a service asking for `gangPolicy: SubGroup` is refused.
//! - v1.15.1's CRD installed while Tandem runs: the next reconcile switches
//!   the PodGroup to `subGroupPolicy`; the running pods are left alone.
//! - The LeaderWorkerSet CRD removed: a new service is refused, naming what
//!   to install.
//! - `tandem check` says which of Kubernetes' gated PodGroup fields the
//!   API server keeps, from a dry run.

use harness::control_plane::{self, ControlPlane};
use harness::scenario::{IS, Invariant, Quiet, Scenario};
use harness::serve::Tandem;
use serde_json::{Value, json};

/// The control plane of its own these scenarios run on (`main.rs` stops it
/// once they are done).
pub(crate) const PLANE: &str = "dependencies";

const POD_GROUP: &str = "scheduling.volcano.sh/v1beta1";
const SERVICE: &str = "deepseek-r1-disagg";

fn dependencies_condition(service: &Value) -> (String, String, String) {
    let condition = service["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "DependenciesMet")
        .cloned()
        .unwrap_or_default();
    let text = |f: &str| condition[f].as_str().unwrap_or_default().to_owned();
    (text("status"), text("reason"), text("message"))
}

async fn install_crd(plane: &ControlPlane, file: &str) {
    let dir = harness::upstream_crds_dir().expect("checked by unavailable()");
    let crd = harness::yaml_documents(&dir.join(file)).remove(0);
    let client = plane.admin().await.expect("an admin client");
    control_plane::apply(&client, &crd).await;
}

pub(crate) async fn the_installed_volcano_decides_the_gang_layout_and_a_missing_lws_is_refused() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_installed_volcano_decides_the_gang_layout: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    // The cluster has Volcano v1.13.3 before Tandem starts.
    install_crd(plane, "older/scheduling.volcano.sh_podgroups.v1.13.yaml").await;
    let mut scenario =
        Scenario::with_tandem("e2e-dependencies", plane, Tandem::shared(plane)).await;
    scenario.nodes(10).await;
    let tandem = scenario.tandem;
    scenario
        .eventually(
            30,
            "the gauge says Volcano has no subGroupPolicy yet is installed",
            || async {
                let found = tandem
                    .metric(
                        "tandem_dependency_info",
                        &["dependency=\"Volcano PodGroup\"", "installed=\"true\""],
                    )
                    .await;
                found
                    .filter(|v| *v == 1.0)
                    .map(drop)
                    .ok_or(format!("{found:?}"))
            },
        )
        .await;

    let service = harness::yaml_documents(&harness::repo_path(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
    ))
    .remove(0);
    scenario.create_or_fail(&service).await;
    let pod_group = scenario
        .eventually(60, "the PodGroup with the minTaskMember layout", || async {
            match scenario.get(POD_GROUP, "PodGroup", SERVICE).await {
                Some(group) if group["spec"]["minTaskMember"].is_object() => Ok(group),
                other => Err(format!("{other:#?}")),
            }
        })
        .await;
    // Stored as written: nothing pruned.
    assert!(
        pod_group["spec"]["subGroupPolicy"].is_null(),
        "{pod_group:#}"
    );
    assert_eq!(
        pod_group["spec"]["minTaskMember"],
        json!({"decode-0": 4, "decode-1": 4, "prefill-0": 2})
    );
    assert_eq!(pod_group["spec"]["minMember"], 10);
    let (status, reason, message) = scenario
        .eventually(60, "the service says which layout and why", || async {
            let stored = scenario.get(IS, "InferenceService", SERVICE).await;
            let said = stored
                .as_ref()
                .map(dependencies_condition)
                .unwrap_or_default();
            if said.1 == "TaskMemberLayout" {
                Ok(said)
            } else {
                Err(format!("{said:?}"))
            }
        })
        .await;
    assert_eq!(status, "True");
    assert_eq!(reason, "TaskMemberLayout");
    assert!(message.contains("no spec.subGroupPolicy"), "{message}");
    scenario
        .assert_quiet(10, (IS, "InferenceService", SERVICE))
        .await;

    // `tandem check`, as a cluster admin runs it: every dependency Tandem
    // needs is there (Volcano without subGroupPolicy only limits a
    // feature), Tandem's CRDs are this binary's, its RBAC is granted and
    // tandem-0 leads. The webhooks are reached by URL here, which the
    // check says it cannot follow.
    let (code, answer) = plane.tandem_check();
    assert_eq!(code, Some(0), "{answer:#}");
    assert_eq!(
        answer["checks"][1]["fields"]["subGroupPolicy"], false,
        "{answer:#}"
    );
    let outcome = |answer: &Value, check: &str| {
        answer["installation"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["check"] == check)
            .map(|c| {
                (
                    c["outcome"].as_str().unwrap_or_default().to_owned(),
                    c["found"].to_string(),
                )
            })
            .unwrap_or_default()
    };
    assert_eq!(outcome(&answer, "Tandem's CRDs").0, "ok", "{answer:#}");
    assert_eq!(outcome(&answer, "RBAC").0, "ok", "{answer:#}");
    let leader = outcome(&answer, "leader");
    assert_eq!(leader.0, "ok", "{answer:#}");
    assert!(leader.1.contains("tandem-0 holds"), "{leader:?}");
    assert_eq!(
        outcome(&answer, "tandem-validating").0,
        "unknown",
        "{answer:#}"
    );

    // Asking for SubGroup on this Volcano is refused, naming the field.
    let mut sub_groups = service.clone();
    sub_groups["metadata"]["name"] = json!("asks-sub-groups");
    sub_groups["spec"]["schedulingStrategy"] = json!({"gangPolicy": "SubGroup"});
    let refused = scenario
        .create(&sub_groups)
        .await
        .expect_err("SubGroup is refused on Volcano v1.13");
    let text = refused.to_string();
    assert!(
        text.contains("spec.schedulingStrategy.gangPolicy: gangPolicy SubGroup needs the PodGroup field spec.subGroupPolicy"),
        "{text}"
    );

    // Volcano upgraded while Tandem runs: the next reconcile switches the
    // layout, and the pods already running stay as they are.
    let pods_before = scenario.list("v1", "Pod").await;
    let uids = |pods: &[Value]| -> Vec<String> {
        pods.iter()
            .map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    install_crd(plane, "scheduling.volcano.sh_podgroups.yaml").await;
    let pod_group = scenario
        .eventually(60, "the PodGroup switched to subGroupPolicy", || async {
            match scenario.get(POD_GROUP, "PodGroup", SERVICE).await {
                Some(group) if group["spec"]["subGroupPolicy"].is_array() => Ok(group),
                other => Err(format!("{other:#?}")),
            }
        })
        .await;
    assert!(
        pod_group["spec"]["minTaskMember"].is_null(),
        "{pod_group:#}"
    );
    scenario
        .eventually(30, "the condition cleared", || async {
            let stored = scenario.get(IS, "InferenceService", SERVICE).await;
            let said = stored
                .as_ref()
                .map(dependencies_condition)
                .unwrap_or_default();
            if said.1 == "Installed" {
                Ok(())
            } else {
                Err(format!("{said:?}"))
            }
        })
        .await;
    assert_eq!(uids(&scenario.list("v1", "Pod").await), uids(&pods_before));
    // Settled again: no write for 10 s (the touch of assert_quiet was
    // spent above).
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let by_tandem = || scenario.writes().iter().filter(|w| w.by_tandem()).count();
    let before = by_tandem();
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    assert_eq!(by_tandem(), before, "Tandem wrote after the switch settled");
    scenario.assert_writes_sound();
    scenario.assert_floor_held();

    // LWS removed: a new service is refused with what to install.
    let client = plane.admin().await.expect("an admin client");
    let crds: kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = kube::Api::all(client);
    crds.delete(
        "leaderworkersets.leaderworkerset.x-k8s.io",
        &Default::default(),
    )
    .await
    .expect("the LWS CRD deleted");
    let monolithic =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story1-monolithic.yaml"))
            .remove(0);
    let text = scenario
        .eventually(60, "a service refused without LWS", || async {
            match scenario.create(&monolithic).await {
                Err(e) if e.to_string().contains("install LWS") => Ok(e.to_string()),
                Err(e) => Err(e.to_string()),
                Ok(_) => {
                    let api = scenario.api(IS, "InferenceService").await;
                    let _ = api.delete("qwen-inference", &Default::default()).await;
                    Err("admitted".to_owned())
                }
            }
        })
        .await;
    assert!(
        text.contains("spec.roles: each replica of a serving role is a LeaderWorkerSet"),
        "{text}"
    );
    // `tandem check` now fails, naming LeaderWorkerSet.
    let (code, answer) = plane.tandem_check();
    assert_eq!(code, Some(1), "{answer:#}");
    assert_eq!(answer["checks"][0]["dependency"], "LeaderWorkerSet");
    assert!(
        answer["checks"][0]["found"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );
    assert!(
        answer["checks"][0]["install"]
            .as_str()
            .unwrap_or_default()
            .contains("install LWS"),
        "{answer:#}"
    );

    // The running service says what it now lacks.
    scenario
        .eventually(60, "the running service reports LWS missing", || async {
            let stored = scenario.get(IS, "InferenceService", SERVICE).await;
            let said = stored
                .as_ref()
                .map(dependencies_condition)
                .unwrap_or_default();
            if said.0 == "False" && said.1 == "DependencyMissing" && said.2.contains("install LWS")
            {
                Ok(())
            } else {
                Err(format!("{said:?}"))
            }
        })
        .await;
    scenario.excuse(
        Invariant::Floor,
        "removing the LeaderWorkerSet CRD deletes every LeaderWorkerSet and so every \
         replica; the floor held up to then (checked above)",
    );
    scenario.finish(Quiet::Checked).await;
}

/// `tandem check` asks the API server which of Kubernetes' gated PodGroup
/// fields it keeps (a dry-run PodGroup, read back): discovery says only that
/// `scheduling.k8s.io/v1alpha2` is served. The tests' kube-apiserver runs
/// the gang gates with TopologyAwareWorkloadScheduling and without
/// WorkloadAwarePreemption, so one field is kept and one dropped: a check
/// that answered from discovery alone, or the same for every field, fails
/// here. The dry run stores nothing.
pub(crate) async fn check_says_which_gated_pod_group_fields_the_api_server_keeps() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED check_says_which_gated_pod_group_fields_the_api_server_keeps: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    let native = plane.tandem_check_line("Kubernetes PodGroup");
    assert_eq!(
        native["found"],
        json!(["v1alpha2 PodGroup", "v1alpha2 Workload"]),
        "{native:#}"
    );
    assert_eq!(
        native["fields"],
        json!({"priority": false, "schedulingConstraints": true}),
        "{native:#}"
    );
    let effect = native["effect"].as_str().unwrap_or_default();
    assert!(
        effect.contains("schedulingConstraints kept (TopologyAwareWorkloadScheduling on)")
            && effect.contains("priority dropped (WorkloadAwarePreemption off)"),
        "{effect}"
    );
    assert_eq!(native["required"], false, "{native:#}");

    let client = plane.admin().await.expect("an admin client");
    let pod_groups = kube::api::ApiResource {
        group: "scheduling.k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    };
    let stored = kube::Api::<kube::api::DynamicObject>::all_with(client, &pod_groups)
        .list(&Default::default())
        .await
        .expect("PodGroups listed");
    let probes: Vec<String> = stored
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .filter(|n| n.starts_with("tandem-check-"))
        .collect();
    assert!(probes.is_empty(), "the dry run stored {probes:?}");
}
