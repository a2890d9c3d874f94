//! What Tandem writes follows what the world's CustomResourceDefinitions
//! install (`tandem render -f crds/ -f service.yaml`): Volcano v1.13.3's
//! PodGroup gets the minTaskMember layout and v1.15.1's subGroupPolicy, a
//! layout the installed Volcano cannot hold is refused, a missing LWS is
//! refused naming what to install, and nothing Tandem writes of a
//! dependency's kinds has a field that dependency's installed schema would
//! prune (checked against the upstream CRDs, strictly).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use harness::{CrdSchema, repo_path};

const LWS_CRD: &str = "leaderworkerset.x-k8s.io_leaderworkersets.yaml";
const VOLCANO_1_15: &str = "scheduling.volcano.sh_podgroups.yaml";
const VOLCANO_1_13: &str = "older/scheduling.volcano.sh_podgroups.v1.13.yaml";

/// `tandem render -o json` of `files`: its exit code, its answer (Null
/// when refused) and its standard error.
fn render(files: &[PathBuf], extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tandem"));
    command.arg("render").current_dir(repo_path(""));
    for file in files {
        command.arg("-f").arg(file);
    }
    let output = command
        .args(["-o", "json"])
        .args(extra)
        .output()
        .expect("tandem render runs");
    let answer = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (
        output.status.code(),
        answer,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn applied<'a>(answer: &'a Value, kind: &str) -> Vec<&'a Value> {
    answer["apply"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["kind"] == kind)
        .collect()
}

/// An InferenceService example: a seed story, or one of the others.
fn story(name: &str) -> PathBuf {
    let folder = if name.starts_with("story") {
        "examples/seeds"
    } else {
        "examples/inferenceservice"
    };
    repo_path(&format!("{folder}/{name}"))
}

fn crd(dir: &Path, file: &str) -> Value {
    harness::yaml_documents(&dir.join(file)).remove(0)
}

/// A copy of `example` with `gangPolicy` set, in a file of its own.
fn with_gang_policy(example: &Path, policy: &str, dir: &Path) -> PathBuf {
    let mut service = harness::yaml_documents(example).remove(0);
    service["spec"]["schedulingStrategy"]["gangPolicy"] = policy.into();
    let path = dir.join(format!("gang-{policy}.yaml"));
    std::fs::write(&path, serde_norway::to_string(&service).expect("YAML")).expect("written");
    path
}

#[test]
fn volcano_1_13_gets_the_task_member_layout_and_nothing_it_would_prune() {
    let Some(dir) = harness::upstream_crds("volcano_1_13_gets_the_task_member_layout") else {
        return;
    };
    let (code, answer, stderr) = render(
        &[
            dir.join(LWS_CRD),
            dir.join(VOLCANO_1_13),
            story("story4-prefill-decode-multinode.yaml"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let [pod_group] = applied(&answer, "PodGroup")[..] else {
        panic!("one PodGroup: {answer:#}")
    };
    let spec = &pod_group["spec"];
    assert!(spec["subGroupPolicy"].is_null(), "{spec:#}");
    assert_eq!(spec["minTaskMember"]["prefill-0"], 2, "{spec:#}");
    assert_eq!(spec["minMember"], 10, "{spec:#}");
    let schema = CrdSchema::from_crd(&crd(&dir, VOLCANO_1_13), Some("v1beta1"));
    assert_eq!(schema.errors(pod_group), Vec::<String>::new());
    // The service's change says why.
    let said = answer["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["kind"] == "InferenceService")
        .expect("the service's change");
    assert!(
        said["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("no spec.subGroupPolicy"),
        "{said}"
    );
}

#[test]
fn volcano_1_15_keeps_sub_groups() {
    let Some(dir) = harness::upstream_crds("volcano_1_15_keeps_sub_groups") else {
        return;
    };
    let (code, answer, stderr) = render(
        &[
            dir.join(LWS_CRD),
            dir.join(VOLCANO_1_15),
            story("story4-prefill-decode-multinode.yaml"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let [pod_group] = applied(&answer, "PodGroup")[..] else {
        panic!("one PodGroup: {answer:#}")
    };
    assert!(
        pod_group["spec"]["subGroupPolicy"].is_array(),
        "{pod_group:#}"
    );
    assert!(pod_group["spec"]["minTaskMember"].is_null());
    let schema = CrdSchema::from_crd(&crd(&dir, VOLCANO_1_15), Some("v1beta1"));
    assert_eq!(schema.errors(pod_group), Vec::<String>::new());
}

#[test]
fn sub_group_asked_for_on_volcano_1_13_is_refused_naming_the_field_and_what_is_installed() {
    let Some(dir) = harness::upstream_crds("sub_group_asked_for_on_volcano_1_13_is_refused") else {
        return;
    };
    let scratch = tempfile::tempdir().expect("a scratch folder");
    let service = with_gang_policy(
        &story("story4-prefill-decode-multinode.yaml"),
        "SubGroup",
        scratch.path(),
    );
    let (code, _, stderr) = render(
        &[dir.join(LWS_CRD), dir.join(VOLCANO_1_13), service.clone()],
        &[],
    );
    assert_ne!(code, Some(0), "refused");
    assert!(
        stderr.contains("spec.schedulingStrategy.gangPolicy: gangPolicy SubGroup needs the PodGroup field spec.subGroupPolicy"),
        "{stderr}"
    );
    assert!(stderr.contains("(serving v1beta1)"), "{stderr}");
    assert!(stderr.contains("install Volcano v1.15.1"), "{stderr}");

    // The same service on v1.15.1 is admitted; TaskMember on v1.13.3 too.
    let (code, _, stderr) = render(&[dir.join(LWS_CRD), dir.join(VOLCANO_1_15), service], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let task_member = with_gang_policy(
        &story("story4-prefill-decode-multinode.yaml"),
        "TaskMember",
        scratch.path(),
    );
    let (code, answer, stderr) = render(
        &[dir.join(LWS_CRD), dir.join(VOLCANO_1_13), task_member],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(applied(&answer, "PodGroup")[0]["spec"]["minTaskMember"].is_object());
}

#[test]
fn without_leader_worker_set_the_service_is_refused_with_the_install_hint() {
    let Some(dir) = harness::upstream_crds("without_leader_worker_set_the_service_is_refused")
    else {
        return;
    };
    let (code, answer, stderr) = render(
        &[dir.join(VOLCANO_1_15), story("story1-monolithic.yaml")],
        &[],
    );
    assert_ne!(code, Some(0), "{answer:#}");
    assert!(
        stderr.contains("spec.roles: each replica of a serving role is a LeaderWorkerSet, which needs leaderworkerset.x-k8s.io/v1 LeaderWorkerSet; it is not installed: install LWS"),
        "{stderr}"
    );
}

#[test]
fn a_router_on_a_cluster_with_only_the_pre_ga_inference_pool_is_refused_saying_so() {
    let Some(dir) =
        harness::upstream_crds("a_router_on_a_cluster_with_only_the_pre_ga_inference_pool")
    else {
        return;
    };
    let (code, _, stderr) = render(
        &[
            dir.join(LWS_CRD),
            dir.join(VOLCANO_1_15),
            dir.join("inference.networking.x-k8s.io_inferencepools.v1alpha2.yaml"),
            story("router.yaml"),
        ],
        &[],
    );
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("inference.networking.k8s.io/v1 InferencePool; it is not installed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("pre-GA inference.networking.x-k8s.io/v1alpha2"),
        "{stderr}"
    );
}

#[test]
fn a_routed_upgrade_without_gateway_api_is_refused_naming_both_kinds() {
    let Some(dir) = harness::upstream_crds("a_routed_upgrade_without_gateway_api") else {
        return;
    };
    let (code, _, stderr) = render(
        &[
            dir.join(LWS_CRD),
            dir.join(VOLCANO_1_15),
            dir.join("inference.networking.k8s.io_inferencepools.yaml"),
            story("incremental-upgrade.yaml"),
        ],
        &[],
    );
    assert_ne!(code, Some(0));
    for kind in [
        "gateway.networking.k8s.io/v1 Gateway",
        "gateway.networking.k8s.io/v1 HTTPRoute",
    ] {
        assert!(stderr.contains(kind), "{stderr}");
    }
    assert!(stderr.contains("spec.upgradeStrategy.type"), "{stderr}");
}

/// Every example, rendered in a world of the upstream CRDs (with each
/// Volcano in turn): every object of a dependency's kind is valid, strictly
/// (no field the API server would prune), against the CRD in that world.
#[test]
fn nothing_written_has_a_field_the_installed_schema_would_prune() {
    let Some(dir) =
        harness::upstream_crds("nothing_written_has_a_field_the_installed_schema_would_prune")
    else {
        return;
    };
    let others: Vec<PathBuf> = [
        LWS_CRD,
        "inference.networking.k8s.io_inferencepools.yaml",
        "gateway.networking.k8s.io_gateways.yaml",
        "gateway.networking.k8s.io_httproutes.yaml",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    let mut checked = 0;
    for volcano in [VOLCANO_1_13, VOLCANO_1_15] {
        let crds: Vec<PathBuf> = others.iter().cloned().chain([dir.join(volcano)]).collect();
        let schemas: Vec<(String, CrdSchema)> = crds
            .iter()
            .map(|path| {
                let crd = harness::yaml_documents(path).remove(0);
                let version = if crd["spec"]["group"] == "scheduling.volcano.sh" {
                    "v1beta1"
                } else {
                    "v1"
                };
                let api_version = format!("{}/{version}", crd["spec"]["group"].as_str().unwrap());
                (api_version, CrdSchema::from_crd(&crd, Some(version)))
            })
            .collect();
        let examples = ["examples/inferenceservice", "examples/seeds"]
            .into_iter()
            .flat_map(|dir| std::fs::read_dir(repo_path(dir)).expect("examples"));
        for example in examples {
            let example = example.expect("an entry").path();
            if example.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let mut files = crds.clone();
            files.push(example.clone());
            // A cluster that serves Kubernetes' PodGroups too, for
            // gang-kubernetes.yaml.
            let (code, answer, stderr) =
                render(&files, &["--api-versions", "scheduling.k8s.io/v1alpha2"]);
            let asks_sub_groups = harness::yaml_documents(&example)
                .iter()
                .any(|o| o["spec"]["schedulingStrategy"]["gangPolicy"] == "SubGroup");
            if volcano == VOLCANO_1_13 && asks_sub_groups {
                // Refused, as above: nothing is written.
                assert_ne!(code, Some(0), "{}", example.display());
                assert!(stderr.contains("gangPolicy SubGroup needs"), "{stderr}");
                continue;
            }
            let places_sub_groups = harness::yaml_documents(&example).iter().any(|o| {
                o["spec"]["schedulingStrategy"]["gangScheduler"] == "Volcano"
                    && !o["spec"]["placement"]["replica"].is_null()
            });
            if volcano == VOLCANO_1_13 && places_sub_groups {
                // Volcano < 1.15 cannot place a replica: refused, naming why.
                assert_ne!(code, Some(0), "{}", example.display());
                assert!(
                    stderr.contains("spec.placement.replica: Volcano places each replica"),
                    "{stderr}"
                );
                continue;
            }
            assert_eq!(
                code,
                Some(0),
                "{} with {volcano}: {stderr}",
                example.display()
            );
            for object in answer["apply"].as_array().into_iter().flatten() {
                for (api_version, schema) in &schemas {
                    if object["apiVersion"] == api_version.as_str()
                        && object["kind"] == schema.kind.as_str()
                    {
                        assert_eq!(
                            schema.errors(object),
                            Vec::<String>::new(),
                            "{} {} of {} with {volcano}",
                            object["kind"],
                            object["metadata"]["name"],
                            example.display()
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 40, "only {checked} objects checked");
}

#[test]
fn without_volcano_a_gang_scheduled_service_is_admitted_with_a_warning_and_no_pod_group() {
    let Some(dir) = harness::upstream_crds("without_volcano_a_gang_scheduled_service") else {
        return;
    };
    let (code, answer, stderr) = render(
        &[
            dir.join(LWS_CRD),
            story("story4-prefill-decode-multinode.yaml"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(applied(&answer, "PodGroup").is_empty(), "{answer:#}");
    assert_eq!(applied(&answer, "LeaderWorkerSet").len(), 3);
    let warnings = answer["warnings"].to_string();
    // Admission chose no gang (neither Volcano nor Kubernetes' PodGroups
    // are there), and says so.
    assert!(
        warnings.contains("spec.schedulingStrategy.gangScheduler: a prefill/decode or multi-node service is gang-scheduled, and the cluster has neither Volcano's PodGroup (not installed) nor Kubernetes' (not served)"),
        "{warnings}"
    );
    assert!(warnings.contains("install Volcano"), "{warnings}");
    let service = applied(&answer, "InferenceService");
    assert_eq!(
        service[0]["spec"]["schedulingStrategy"]["gangScheduler"], "None",
        "{answer:#}"
    );
}

/// Beneath the decisions, a safety net: an LWS whose schema lacks a field
/// Tandem writes (here v0.9.0's CRD without `leaderWorkerTemplate.
/// restartPolicy`, as an LWS before that field would be) gets no
/// LeaderWorkerSet, since the API server would drop the field and every
/// reconcile would write it again; the service says which field, and why.
#[test]
fn a_field_the_installed_schema_lacks_is_not_written_and_the_service_says_which() {
    let Some(dir) = harness::upstream_crds("a_field_the_installed_schema_lacks_is_not_written")
    else {
        return;
    };
    let mut lws = crd(&dir, LWS_CRD);
    let template = &mut lws["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["leaderWorkerTemplate"]["properties"];
    assert!(
        template
            .as_object_mut()
            .unwrap()
            .remove("restartPolicy")
            .is_some(),
        "the upstream CRD has restartPolicy"
    );
    let scratch = tempfile::tempdir().expect("a scratch folder");
    let older = scratch.path().join("lws-without-restart-policy.yaml");
    std::fs::write(&older, serde_norway::to_string(&lws).unwrap()).unwrap();
    let (code, answer, stderr) = render(&[older, story("story1-monolithic.yaml")], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(applied(&answer, "LeaderWorkerSet").is_empty(), "{answer:#}");
    let [service] = applied(&answer, "InferenceService")[..] else {
        panic!("the service's status: {answer:#}")
    };
    let ready = service["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["reason"], "DependencyTooOld", "{ready:#}");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.starts_with("LeaderWorkerSet qwen-inference-inference-0: the installed leaderworkerset.x-k8s.io/v1 LeaderWorkerSet"),
        "{message}"
    );
    assert!(
        message.contains("has no spec.leaderWorkerTemplate.restartPolicy"),
        "{message}"
    );
}

/// Issue 34: `gangScheduler: Kubernetes` needs Kubernetes' PodGroups
/// served. In a world of CRDs that says nothing of them it is refused on the
/// field; `--api-versions scheduling.k8s.io/v1alpha2` (as Helm's) says they
/// are, and render shows the groups and the pods naming them.
#[test]
fn kubernetes_gang_renders_where_the_api_is_served_and_is_refused_where_not() {
    let Some(dir) = harness::upstream_crds("kubernetes_gang_renders") else {
        return;
    };
    let files = [dir.join(LWS_CRD), story("gang-kubernetes.yaml")];
    let (code, _, stderr) = render(&files, &[]);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("spec.schedulingStrategy.gangScheduler: gangScheduler Kubernetes gang-schedules the pods through kube-scheduler's PodGroups, which needs scheduling.k8s.io/v1alpha2 PodGroup; the API server does not serve it"),
        "{stderr}"
    );
    let (code, answer, stderr) = render(&files, &["--api-versions", "scheduling.k8s.io/v1alpha2"]);
    assert_eq!(code, Some(0), "{stderr}");
    let groups: Vec<(&str, &Value)> = applied(&answer, "PodGroup")
        .into_iter()
        .map(|g| {
            assert_eq!(g["apiVersion"], "scheduling.k8s.io/v1alpha2");
            (
                g["metadata"]["name"].as_str().unwrap(),
                &g["spec"]["schedulingPolicy"]["gang"]["minCount"],
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("deepseek-r1-kube-gang-core-c758d74f", &json!(6)),
            ("deepseek-r1-kube-gang-decode-1-f5b8a79f", &json!(4)),
        ]
    );
    for lws in applied(&answer, "LeaderWorkerSet") {
        let group = &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulingGroup"]
            ["podGroupName"];
        let expected = if lws["metadata"]["name"] == "deepseek-r1-kube-gang-decode-1" {
            groups[1].0
        } else {
            groups[0].0
        };
        assert_eq!(group, expected, "{lws:#}");
    }
}

/// The LWS release the tests pin (v0.9.0) has `RecreateGroupAfterStart` in
/// its CRD's enum, so a multi-node replica is written with the field, read
/// from the CRD as a cluster serves it.
#[test]
fn the_pinned_lws_lets_a_multi_node_group_wait_for_its_pending_pods() {
    let Some(dir) = harness::upstream_crds("the_pinned_lws_lets_a_multi_node_group_wait") else {
        return;
    };
    let installed = tandem::plan::shared::installed::Installed::from_crds(&[crd(&dir, LWS_CRD)]);
    assert_eq!(
        tandem::plan::inference_service::topology::group_restart(&installed),
        tandem::plan::inference_service::topology::GroupRestart::AfterStartField
    );
}
