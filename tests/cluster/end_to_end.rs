//! Named end-to-end scenarios against a real control plane
//! (`tests/harness/src/control_plane.rs`: etcd, kube-apiserver,
//! kube-controller-manager and the LeaderWorkerSet manager, built from
//! upstream Go modules), with the real `tandem serve` binary under exactly
//! the RBAC of `manifests/base/rbac.yaml`. Each scenario has a namespace of its
//! own and checks its end state, then the invariants of
//! `tests/harness/src/scenario.rs` (no permission refused, no write that changes
//! nothing, no serving role left without a ready replica, quiet after
//! settling). Pods run on kwok's nodes of each scenario's own, bound by the
//! real kube-scheduler and made Ready by kwok's stages, never by hand.
//!
//! The harness is libtest's command line (libtest-mimic), so that one step
//! runs after every scenario: when all of them ran and passed, every
//! request Tandem made is checked against the RBAC it runs under, both
//! ways: each allowed by a rule of `manifests/base/rbac.yaml`, and each
//! rule used by some request (`tests/harness/src/rbac.rs`).

use harness::scenario::{
    IS, Invariant, LWS, Quiet, Scenario, example, label, set_role_replicas, wait_service_ready,
};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

pub(crate) async fn story_4_is_deployed_by_the_real_controllers_and_becomes_ready() {
    let Some(scenario) = Scenario::start("e2e-story4").await else {
        return;
    };
    scenario.nodes(10).await;
    let service = example("examples/seeds/story4-prefill-decode-multinode.yaml");
    scenario
        .create(&service)
        .await
        .expect("story 4 is admitted");

    let stored = wait_service_ready(&scenario, "deepseek-r1-disagg").await;
    assert_eq!(
        stored["status"]["components"]["decode"]["readyReplicas"], 2,
        "{stored:#}"
    );
    assert_eq!(
        scenario.names(LWS, "LeaderWorkerSet").await,
        [
            "deepseek-r1-disagg-decode-0",
            "deepseek-r1-disagg-decode-1",
            "deepseek-r1-disagg-prefill-0"
        ]
    );
    // The LeaderWorkerSet controller made the pods: 1 × 2 + 2 × 4.
    assert_eq!(scenario.names("v1", "Pod").await.len(), 10);
    assert_eq!(
        scenario
            .names("scheduling.volcano.sh/v1beta1", "PodGroup")
            .await,
        ["deepseek-r1-disagg"]
    );
    scenario
        .finish(Quiet::Touching(
            IS,
            "InferenceService",
            "deepseek-r1-disagg",
        ))
        .await;
}

/// The replicas of each role of `service`, from its spec.
async fn role_replicas(scenario: &Scenario, service: &str) -> Vec<(String, i64)> {
    let stored = scenario
        .get(IS, "InferenceService", service)
        .await
        .expect("the service");
    stored["spec"]["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["replicas"].as_i64().unwrap_or(1),
            )
        })
        .collect()
}

/// `kubectl scale KIND/NAME --replicas=N`: a merge patch of `/scale`.
async fn scale(
    scenario: &Scenario,
    api_version: &str,
    kind: &str,
    name: &str,
    replicas: i64,
) -> Result<(), kube::Error> {
    let api = scenario.api(api_version, kind).await;
    api.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .map(|_| ())
}

fn examples(path: &str) -> Vec<Value> {
    harness::yaml_documents(&harness::repo_path(path))
}

pub(crate) async fn kubectl_scale_of_a_view_reaches_the_roles_and_a_strict_view_refuses_out_of_range()
 {
    let Some(scenario) = Scenario::start("e2e-view-scale").await else {
        return;
    };
    scenario.nodes(1).await;
    scenario.spot_nodes(1).await;
    let objects = examples("examples/scaleview/decode-ondemand-spot.yaml");
    for object in &objects {
        scenario.create_or_fail(object).await;
    }
    scenario
        .eventually(60, "the view locks its roles", || async {
            let stored = scenario.get(IS, "InferenceService", "spot-decode").await;
            let locks = stored
                .map(|s| s["status"]["scaleViews"].clone())
                .unwrap_or_default();
            if locks.as_array().is_some_and(|l| !l.is_empty()) {
                Ok(())
            } else {
                Err(locks.to_string())
            }
        })
        .await;

    // `kubectl scale scaleview/spot-decode-sv --replicas=4`: 2 on demand, 2 spot.
    scale(&scenario, IS, "ScaleView", "spot-decode-sv", 4)
        .await
        .expect("the scale");
    scenario
        .eventually(60, "decode 2 on demand, 2 spot", || async {
            let now = role_replicas(&scenario, "spot-decode").await;
            let want = [("prefill", 1), ("decode-ondemand", 2), ("decode-spot", 2)];
            let want: Vec<(String, i64)> =
                want.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect();
            if now == want {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    scenario
        .eventually(
            60,
            "five decode LeaderWorkerSets and one prefill",
            || async {
                let sets = scenario.names(LWS, "LeaderWorkerSet").await;
                if sets.len() == 5 {
                    Ok(())
                } else {
                    Err(format!("{sets:?}"))
                }
            },
        )
        .await;
    // The view's status counts Ready replicas, and each pod turns Ready only
    // after kwok's load delay: the quiet check starts once all four count.
    wait_service_ready(&scenario, "spot-decode").await;
    scenario
        .eventually(60, "the view counts 4 Ready replicas", || async {
            let view = scenario.get(IS, "ScaleView", "spot-decode-sv").await;
            let ready = view.map(|v| v["status"]["replicas"].clone());
            if ready == Some(json!(4)) {
                Ok(())
            } else {
                Err(format!("{ready:?}"))
            }
        })
        .await;
    scenario
        .assert_quiet(10, (IS, "ScaleView", "spot-decode-sv"))
        .await;

    // A strict view refuses a /scale beyond its range, in the API server's words.
    let mut strict = objects.last().expect("the view").clone();
    assert_eq!(strict["kind"], "ScaleView");
    strict["spec"]["strict"] = json!(true);
    strict["spec"]["scalePolicy"][1]["constraints"] = json!({"max": 3});
    strict["spec"]["replicas"] = json!(4);
    scenario.apply(&strict).await.expect("the view made strict");
    let refused = scale(&scenario, IS, "ScaleView", "spot-decode-sv", 9)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("expected a denial, got {refused}");
    };
    assert!(
        status.message.starts_with(
            "admission webhook \"validate.scaleviews.fusioninfer.io\" denied the request:"
        ),
        "{}",
        status.message
    );
    let now = role_replicas(&scenario, "spot-decode").await;
    assert_eq!(
        now[1..],
        [("decode-ondemand".into(), 2), ("decode-spot".into(), 2)],
        "nothing moved"
    );
    scenario.finish(Quiet::Checked).await;
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": format!("{name}:v1")}]}}}})
}

async fn deployment_replicas(scenario: &Scenario, name: &str) -> Option<i64> {
    scenario.get("apps/v1", "Deployment", name).await?["spec"]["replicas"].as_i64()
}

pub(crate) async fn an_hpa_scaling_the_inplace_source_moves_the_targets_and_a_hand_edit_is_set_back()
 {
    let Some(scenario) = Scenario::start("e2e-inplace").await else {
        return;
    };
    scenario.nodes(1).await;
    for (name, replicas) in [("router", 1), ("prefill", 1), ("decode", 2)] {
        scenario
            .create(&deployment(name, replicas))
            .await
            .expect("a Deployment");
    }
    let group = json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd-pool"},
        "spec": {"targetResources": [
            {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
         "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
            {"name": "router", "role": "Source"},
            {"name": "prefill", "role": "Target", "ratio": 1},
            {"name": "decode", "role": "Target", "ratio": "2"}]}}}});
    scenario
        .create(&group)
        .await
        .expect("the group is admitted");

    // What an HPA does: a /scale write on the Source.
    scale(&scenario, "apps/v1", "Deployment", "router", 3)
        .await
        .expect("the scale");
    scenario
        .eventually(60, "prefill 3, decode 6", || async {
            let now = (
                deployment_replicas(&scenario, "prefill").await,
                deployment_replicas(&scenario, "decode").await,
            );
            if now == (Some(3), Some(6)) {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;

    // A Target changed by hand is set back.
    let deployments = scenario.api("apps/v1", "Deployment").await;
    deployments
        .patch(
            "decode",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("a hand edit");
    scenario
        .eventually(60, "decode back at 6", || async {
            let now = deployment_replicas(&scenario, "decode").await;
            if now == Some(6) {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    // `kubectl scale rsg/pd-pool`: an InplaceScaling group has no replicas
    // of its own. The API server refuses it by the CRD's rule, which runs
    // before the validating webhooks (whose /scale rule refuses it too, for
    // a CRD installed without the rule).
    let rsg = "resourcescalinggroup.com/v1";
    let refused = scale(&scenario, rsg, "ResourceScalingGroup", "pd-pool", 3)
        .await
        .expect_err("/scale of an InplaceScaling group is refused");
    assert!(
        refused.to_string().contains("is for GroupReplication only"),
        "{refused}"
    );
    let stored = scenario
        .get(rsg, "ResourceScalingGroup", "pd-pool")
        .await
        .expect("the group");
    assert!(
        stored["spec"]["scalingStrategy"]["groupConfig"].is_null(),
        "{stored:#}"
    );
    scenario
        .finish(Quiet::Touching(rsg, "ResourceScalingGroup", "pd-pool"))
        .await;
}

pub(crate) async fn group_replication_goes_from_one_group_to_three_and_back_to_two() {
    let Some(scenario) = Scenario::start("e2e-replication").await else {
        return;
    };
    scenario.nodes(1).await;
    for (name, replicas) in [("prefill", 1), ("decode", 2)] {
        scenario
            .create(&deployment(name, replicas))
            .await
            .expect("a Deployment");
    }
    let group = json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd-cluster"},
        "spec": {"targetResources": [
            {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
         "scalingStrategy": {"type": "GroupReplication", "groupConfig": {
            "groupNamePrefix": "inference-unit", "replicas": 1,
            "scaleDown": {"policy": "Ordered", "candidates": ["inference-unit-01"]}}}}});
    scenario
        .create(&group)
        .await
        .expect("the group is admitted");
    let rsg = "resourcescalinggroup.com/v1";
    scale(&scenario, rsg, "ResourceScalingGroup", "pd-cluster", 3)
        .await
        .expect("the scale");
    let want = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let three = want(&[
        "decode",
        "inference-unit-01-decode",
        "inference-unit-01-prefill",
        "inference-unit-02-decode",
        "inference-unit-02-prefill",
        "prefill",
    ]);
    scenario
        .eventually(60, "groups 01 and 02 cloned", || async {
            let now = scenario.names("apps/v1", "Deployment").await;
            if now == three {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    let clone = scenario
        .get("apps/v1", "Deployment", "inference-unit-02-decode")
        .await
        .expect("a clone");
    assert_eq!(
        clone["metadata"]["ownerReferences"][0]["kind"],
        "ResourceScalingGroup"
    );
    // The clones' pods exist: the real ReplicaSet controller made them.
    scenario
        .eventually(60, "the clones' pods", || async {
            let pods = scenario.names("v1", "Pod").await;
            let cloned = pods
                .iter()
                .filter(|p| p.starts_with("inference-unit-02-decode-"))
                .count();
            if cloned == 2 {
                Ok(())
            } else {
                Err(format!("{pods:?}"))
            }
        })
        .await;

    // Down to two: the candidate goes first, even though it is not the newest.
    scale(&scenario, rsg, "ResourceScalingGroup", "pd-cluster", 2)
        .await
        .expect("the scale");
    let two = want(&[
        "decode",
        "inference-unit-02-decode",
        "inference-unit-02-prefill",
        "prefill",
    ]);
    scenario
        .eventually(60, "group 01 removed", || async {
            let now = scenario.names("apps/v1", "Deployment").await;
            if now == two {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    scenario
        .finish(Quiet::Touching(rsg, "ResourceScalingGroup", "pd-cluster"))
        .await;
}

pub(crate) async fn binpack_scale_down_drains_then_removes_the_replicas_cheapest_to_lose() {
    let Some(scenario) = Scenario::start("e2e-binpack").await else {
        return;
    };
    scenario.nodes(1).await;
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let role = service["spec"]["roles"][0]["name"]
        .as_str()
        .expect("a role")
        .to_owned();
    service["spec"]["roles"][0]["replicas"] = json!(4);
    service["spec"]["roles"][0]["scaleDown"] = json!({"policy": "Binpack"});
    service["spec"]["roles"][0]["drain"] = json!({"seconds": 3});
    // kwok keeps a deleted pod Terminating for its whole grace period.
    service["spec"]["roles"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
    scenario
        .create(&service)
        .await
        .expect("the service is admitted");
    wait_service_ready(&scenario, &name).await;

    // The pods' deletion costs, as an operator would set them: replicas 1
    // and 2 are the cheapest to lose.
    let pods = scenario.api("v1", "Pod").await;
    for pod in scenario.list("v1", "Pod").await {
        let cost = match label(&pod, "fusioninfer.io/replica-index") {
            "0" => "100",
            "1" => "50",
            "2" => "0",
            _ => "75",
        };
        let patch = json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": cost}}});
        let pod_name = pod["metadata"]["name"].as_str().expect("a pod name");
        pods.patch(pod_name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("a cost");
    }
    set_role_replicas(&scenario, &name, 0, 2).await;
    scenario
        .eventually(30, "replicas 1 and 2 out of traffic first", || async {
            let mut draining: Vec<String> = scenario
                .list("v1", "Pod")
                .await
                .iter()
                .filter(|p| label(p, "fusioninfer.io/traffic") == "draining")
                .map(|p| label(p, "fusioninfer.io/replica-index").to_owned())
                .collect();
            draining.sort();
            if draining == ["1", "2"] {
                Ok(())
            } else {
                Err(format!("{draining:?}"))
            }
        })
        .await;
    let kept = vec![format!("{name}-{role}-0"), format!("{name}-{role}-3")];
    scenario
        .eventually(60, "replicas 0 and 3 kept", || async {
            let now = scenario.names(LWS, "LeaderWorkerSet").await;
            if now == kept {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

fn image_of(set: &Value) -> &str {
    set["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

pub(crate) async fn a_paced_rolling_update_replaces_one_decode_replica_at_a_time_and_leaves_prefill_alone()
 {
    let Some(scenario) = Scenario::start("e2e-rolling").await else {
        return;
    };
    scenario.nodes(10).await;
    let mut service = example("examples/seeds/story4-prefill-decode-multinode.yaml");
    // A short drain: each replaced replica leaves traffic for 2 s first.
    service["spec"]["roles"][1]["drain"] = json!({"seconds": 2});
    // kwok keeps a replaced pod Terminating for its whole grace period.
    service["spec"]["roles"][1]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
    scenario
        .create(&service)
        .await
        .expect("story 4 is admitted");
    wait_service_ready(&scenario, "deepseek-r1-disagg").await;
    let prefill = scenario
        .get(LWS, "LeaderWorkerSet", "deepseek-r1-disagg-prefill-0")
        .await
        .expect("prefill");

    // A new decode image, under the default RollingUpdate (maxUnavailable 1,
    // maxSurge 0).
    let services = scenario.api(IS, "InferenceService").await;
    let patch: json_patch::Patch = serde_json::from_value(json!([{"op": "replace",
        "path": "/spec/roles/1/template/spec/containers/0/image", "value": "vllm/vllm-openai:v0.11.1"}]))
    .expect("a JSON patch");
    services
        .patch(
            "deepseek-r1-disagg",
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .expect("the new image");
    scenario
        .eventually(120, "every decode replica updated and ready", || async {
            let stored = scenario
                .get(IS, "InferenceService", "deepseek-r1-disagg")
                .await
                .expect("the service");
            let decode = &stored["status"]["components"]["decode"];
            let sets = scenario.list(LWS, "LeaderWorkerSet").await;
            let moved = sets
                .iter()
                .filter(|s| image_of(s) == "vllm/vllm-openai:v0.11.1")
                .count();
            let observed =
                stored["status"]["observedGeneration"] == stored["metadata"]["generation"];
            if observed && decode["updatedReadyReplicas"] == 2 && moved == 2 {
                Ok(())
            } else {
                Err(format!("{moved} moved; {decode}"))
            }
        })
        .await;
    for set in scenario.list(LWS, "LeaderWorkerSet").await {
        if label(&set, "fusioninfer.io/role-name") == "decode" {
            assert_eq!(image_of(&set), "vllm/vllm-openai:v0.11.1");
        }
    }
    // One replica out at a time: Tandem wrote each decode LeaderWorkerSet's
    // new template only once the one before was ready again (the floor).
    let decode_template_writes = scenario
        .writes()
        .iter()
        .filter(|w| w.by_tandem() && w.resource == "leaderworkersets")
        .filter(|w| w.name.as_deref().is_some_and(|n| n.contains("-decode-")))
        .filter(|w| {
            w.request
                .as_ref()
                .is_some_and(|r| r.to_string().contains("v0.11.1"))
        })
        .count();
    assert_eq!(decode_template_writes, 2, "each decode replica moved once");
    let prefill_after = scenario
        .get(LWS, "LeaderWorkerSet", "deepseek-r1-disagg-prefill-0")
        .await
        .expect("prefill");
    assert_eq!(
        prefill_after["metadata"]["generation"], prefill["metadata"]["generation"],
        "prefill's LeaderWorkerSet spec is never changed"
    );
    scenario
        .finish(Quiet::Touching(
            IS,
            "InferenceService",
            "deepseek-r1-disagg",
        ))
        .await;
}

pub(crate) async fn deleting_a_namespace_with_a_service_its_view_and_a_scaling_group_leaves_nothing()
 {
    let Some(mut scenario) = Scenario::start("e2e-namespace").await else {
        return;
    };
    scenario.nodes(1).await;
    scenario.spot_nodes(1).await;
    for path in [
        "examples/scaleview/decode-ondemand-spot.yaml",
        "examples/resourcescalinggroup/prefill-decode-ratio.yaml",
    ] {
        for object in examples(path) {
            scenario.create_or_fail(&object).await;
        }
    }
    scenario
        .eventually(60, "the view holds its finalizer and its lock", || async {
            let view = scenario
                .get(IS, "ScaleView", "spot-decode-sv")
                .await
                .unwrap_or_default();
            let service = scenario
                .get(IS, "InferenceService", "spot-decode")
                .await
                .unwrap_or_default();
            let finalized = view["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
            let locked = service["status"]["scaleViews"]
                .as_array()
                .is_some_and(|l| !l.is_empty());
            if finalized && locked {
                Ok(())
            } else {
                Err(format!("{view} {service}"))
            }
        })
        .await;
    scenario
        .eventually(60, "LeaderWorkerSets and their pods", || async {
            let pods = scenario.names("v1", "Pod").await;
            if pods.is_empty() {
                Err("no pods".to_owned())
            } else {
                Ok(())
            }
        })
        .await;

    let namespaces = scenario.api("v1", "Namespace").await;
    namespaces
        .delete(&scenario.namespace, &Default::default())
        .await
        .expect("the namespace deleted");
    scenario
        .eventually(120, "the namespace and everything in it gone", || async {
            match namespaces.get_opt(&scenario.namespace).await {
                Ok(None) => Ok(()),
                Ok(Some(ns)) => Err(format!("{:?}", ns.data["status"])),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    // The namespace's content goes in no set order: Tandem may try to put
    // back a child the namespace controller removed, and is refused (403,
    // NamespaceTerminating). It must take that as the end, not retry.
    let log = scenario.tandem.log();
    let retried: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("reconcile failed") && l.contains(&scenario.namespace))
        .collect();
    assert!(
        retried.is_empty(),
        "retried in a namespace being deleted: {retried:#?}"
    );
    scenario.excuse(
        Invariant::Quiet,
        "the namespace is gone: nothing in it is left to settle",
    );
    scenario.excuse(
        Invariant::Floor,
        "the namespace controller deletes the pods and the service in no set order, so a \
         role may lose its replicas before its service is gone",
    );
    scenario.finish(Quiet::Checked).await;
}

/// Every kind a service creates is watched, so a child deleted by hand is
/// back within seconds; a pod's readiness reaches the status; and neither
/// sends a GET or LIST: the reconciles read the caches.
pub(crate) async fn a_child_deleted_by_hand_is_recreated_and_pod_readiness_reaches_status_from_the_caches()
 {
    let Some(mut scenario) = Scenario::start("e2e-repair").await else {
        return;
    };
    scenario.nodes(10).await;
    let service = example("examples/seeds/story4-prefill-decode-multinode.yaml");
    scenario
        .create(&service)
        .await
        .expect("story 4 is admitted");
    wait_service_ready(&scenario, "deepseek-r1-disagg").await;
    let mark = scenario.mark();

    // The PodGroup, deleted by hand.
    let groups = scenario
        .api("scheduling.volcano.sh/v1beta1", "PodGroup")
        .await;
    let before = scenario
        .get(
            "scheduling.volcano.sh/v1beta1",
            "PodGroup",
            "deepseek-r1-disagg",
        )
        .await
        .expect("the PodGroup");
    groups
        .delete("deepseek-r1-disagg", &Default::default())
        .await
        .expect("deleted by hand");
    scenario
        .eventually(20, "the PodGroup recreated", || async {
            let now = scenario
                .get(
                    "scheduling.volcano.sh/v1beta1",
                    "PodGroup",
                    "deepseek-r1-disagg",
                )
                .await;
            match now {
                Some(g) if g["metadata"]["uid"] != before["metadata"]["uid"] => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;

    // A decode pod stops passing its readiness probe (kwok's `unready`
    // stage): the status says so.
    let pod = scenario
        .list("v1", "Pod")
        .await
        .into_iter()
        .find(|p| label(p, "fusioninfer.io/role-name") == "decode")
        .expect("a decode pod");
    let pod_name = pod["metadata"]["name"].as_str().expect("a name");
    scenario
        .set_health(
            &format!("statefulset.kubernetes.io/pod-name={pod_name}"),
            Some("unready"),
        )
        .await;
    scenario
        .eventually(20, "one decode replica not ready", || async {
            let stored = scenario
                .get(IS, "InferenceService", "deepseek-r1-disagg")
                .await
                .expect("the service");
            let ready = &stored["status"]["components"]["decode"]["readyReplicas"];
            if *ready == 1 {
                Ok(())
            } else {
                Err(ready.to_string())
            }
        })
        .await;
    let reads = scenario.tandem_reads_since(mark);
    assert!(
        reads.is_empty(),
        "the reconciles read the caches: {reads:#?}"
    );
    scenario.excuse(
        Invariant::Floor,
        "the LeaderWorkerSet deleted by hand takes its replica's pods with it, the only \
         decode replica's, until Tandem makes it again",
    );
    scenario
        .finish(Quiet::Touching(
            IS,
            "InferenceService",
            "deepseek-r1-disagg",
        ))
        .await;
}

/// A foreign Deployment bound by an InplaceScaling group, scaled by hand,
/// is set back at once (Deployments are cached, trimmed to their replicas,
/// and mapped to the groups that name them), reading nothing.
pub(crate) async fn a_target_deployment_scaled_by_hand_is_set_back_without_reading_the_api_server()
{
    let Some(scenario) = Scenario::start("e2e-setback").await else {
        return;
    };
    scenario.nodes(1).await;
    for (name, replicas) in [("router", 2), ("decode", 1)] {
        scenario
            .create(&deployment(name, replicas))
            .await
            .expect("a Deployment");
    }
    let group = json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd-pool"},
        "spec": {"targetResources": [
            {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
         "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
            {"name": "router", "role": "Source"},
            {"name": "decode", "role": "Target", "ratio": 2}]}}}});
    scenario
        .create(&group)
        .await
        .expect("the group is admitted");
    scenario
        .eventually(60, "decode follows router at 2:1", || async {
            let now = deployment_replicas(&scenario, "decode").await;
            if now == Some(4) {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    let mark = scenario.mark();
    scale(&scenario, "apps/v1", "Deployment", "decode", 1)
        .await
        .expect("scaled by hand");
    scenario
        .eventually(20, "decode set back to 4", || async {
            let now = deployment_replicas(&scenario, "decode").await;
            if now == Some(4) {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    let reads = scenario.tandem_reads_since(mark);
    assert!(
        reads.is_empty(),
        "the reconciles read the caches: {reads:#?}"
    );
    scenario
        .finish(Quiet::Touching(
            "resourcescalinggroup.com/v1",
            "ResourceScalingGroup",
            "pd-pool",
        ))
        .await;
}

/// A router role on the real control plane: the endpoint picker's
/// Deployment (whose pods the real ReplicaSet controller makes), Service,
/// ConfigMap, ServiceAccount and RoleBinding to the shipped ClusterRole (the
/// API server lets Tandem bind only a role it may bind or whose rules it
/// holds), the InferencePool and the HTTPRoute.
pub(crate) async fn a_router_role_gets_its_endpoint_picker_pool_and_route_from_the_real_controllers()
 {
    let Some(scenario) = Scenario::start("e2e-router").await else {
        return;
    };
    scenario.nodes(1).await;
    let service = example("examples/inferenceservice/router.yaml");
    scenario
        .create(&service)
        .await
        .expect("the router example is admitted");
    wait_service_ready(&scenario, "qwen-pd-routed").await;
    let epp = "qwen-pd-routed-epp";
    for (api_version, kind) in [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("v1", "ServiceAccount"),
    ] {
        assert!(
            scenario.get(api_version, kind, epp).await.is_some(),
            "{kind} {epp}: {:?}",
            scenario.names(api_version, kind).await
        );
    }
    // The picker's binding to the ClusterRole Tandem ships, which the API
    // server's escalation check lets Tandem make because it may `bind` that
    // role (it holds none of its rules); no Role of its own.
    let rbac = "rbac.authorization.k8s.io/v1";
    let binding = scenario
        .get(rbac, "RoleBinding", &format!("{epp}-reader"))
        .await
        .expect("the picker's RoleBinding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tandem-endpoint-picker"})
    );
    assert_eq!(binding["subjects"][0]["name"], epp);
    assert!(scenario.names(rbac, "Role").await.is_empty());
    assert!(!scenario.names("v1", "ConfigMap").await.is_empty());
    assert_eq!(
        scenario
            .names("inference.networking.k8s.io/v1", "InferencePool")
            .await
            .len(),
        1
    );
    assert_eq!(
        scenario
            .names("gateway.networking.k8s.io/v1", "HTTPRoute")
            .await
            .len(),
        1
    );
    scenario
        .eventually(
            60,
            "the endpoint picker's pod, from the ReplicaSet controller",
            || async {
                let pods = scenario.names("v1", "Pod").await;
                if pods.iter().any(|p| p.starts_with(epp)) {
                    Ok(())
                } else {
                    Err(format!("{pods:?}"))
                }
            },
        )
        .await;
    scenario
        .assert_quiet(10, (IS, "InferenceService", "qwen-pd-routed"))
        .await;

    // The router role removed: every object of the picker goes (Tandem's
    // deletes, which the RBAC check after the scenarios counts), and the
    // serving roles stay.
    let services: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        scenario.client.clone(),
        &scenario.namespace,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "fusioninfer.io",
            "v1alpha1",
            "InferenceService",
        )),
    );
    services
        .patch(
            "qwen-pd-routed",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/spec/roles/2/name", "value": "router"},
                    {"op": "remove", "path": "/spec/roles/2"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .expect("the router role can be removed");
    let picker_kinds = [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("v1", "ServiceAccount"),
        ("v1", "ConfigMap"),
        (rbac, "RoleBinding"),
        ("inference.networking.k8s.io/v1", "InferencePool"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ];
    scenario
        .eventually(60, "the picker's objects deleted", || async {
            let mut left = Vec::new();
            for (api_version, kind) in picker_kinds {
                let names = scenario.names(api_version, kind).await;
                let picker: Vec<_> = names
                    .into_iter()
                    .filter(|n| {
                        n.starts_with(epp) || kind == "InferencePool" || kind == "HTTPRoute"
                    })
                    .collect();
                if !picker.is_empty() {
                    left.push(format!("{kind} {picker:?}"));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(left.join(", "))
            }
        })
        .await;
    assert_eq!(
        role_replicas(&scenario, "qwen-pd-routed").await.len(),
        2,
        "prefill and decode stay"
    );
    scenario.finish(Quiet::Checked).await;
}
/// What a policy engine or `kubectl edit` adds to a LeaderWorkerSet Tandem
/// owns, as another field manager: an env var, a sidecar and a template
/// label. The API server keeps them (server-side apply merges lists by
/// key); Tandem must leave them and write nothing.
pub(crate) async fn fields_another_manager_adds_to_a_leader_worker_set_are_kept_and_nothing_is_written()
 {
    let Some(mut scenario) = Scenario::start("e2e-foreign").await else {
        return;
    };
    scenario.nodes(1).await;
    let service = example("examples/seeds/story1-monolithic.yaml");
    scenario
        .create(&service)
        .await
        .expect("story 1 is admitted");
    wait_service_ready(&scenario, "qwen-inference").await;
    let name = "qwen-inference-inference-0";
    let addition = json!({"apiVersion": LWS, "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": scenario.namespace},
        "spec": {"leaderWorkerTemplate": {"workerTemplate": {
            "metadata": {"labels": {"policy.example.com/team": "ml"}},
            "spec": {"containers": [
                {"name": "vllm", "env": [{"name": "POLICY_INJECTED", "value": "1"}]},
                {"name": "policy-sidecar", "image": "busybox:1.36"}]}}}}});
    let sets = scenario.api(LWS, "LeaderWorkerSet").await;
    sets.patch(
        name,
        &PatchParams::apply("policy-engine"),
        &Patch::Apply(&addition),
    )
    .await
    .expect("the policy engine's fields applied");
    // LWS rolls the replica's pods for the new template; kwok's stages
    // make the new pods ready again. The service is still ready from its
    // old pods until LWS gets to it (later on a busy control plane), so the
    // wait is for the roll itself: every pod of the new template and Ready.
    scenario
        .eventually(
            180,
            "the replica's pods rolled to the new template",
            || async {
                let pods = scenario.list("v1", "Pod").await;
                let rolled = |pod: &Value| {
                    pod["metadata"]["labels"]["policy.example.com/team"] == "ml"
                        && pod["metadata"]["deletionTimestamp"].is_null()
                        && pod["status"]["conditions"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                };
                if !pods.is_empty() && pods.iter().all(rolled) {
                    Ok(())
                } else {
                    Err(format!(
                        "{} pods, {} rolled and ready",
                        pods.len(),
                        pods.iter().filter(|p| rolled(p)).count()
                    ))
                }
            },
        )
        .await;
    wait_service_ready(&scenario, "qwen-inference").await;
    scenario
        .assert_quiet(10, (IS, "InferenceService", "qwen-inference"))
        .await;

    let stored = scenario
        .get(LWS, "LeaderWorkerSet", name)
        .await
        .expect("the replica");
    let template = &stored["spec"]["leaderWorkerTemplate"]["workerTemplate"];
    assert_eq!(
        template["metadata"]["labels"]["policy.example.com/team"], "ml",
        "{template:#}"
    );
    let containers = template["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert!(
        containers.iter().any(|c| c["name"] == "policy-sidecar"),
        "{template:#}"
    );
    let vllm = containers
        .iter()
        .find(|c| c["name"] == "vllm")
        .expect("Tandem's container");
    assert!(
        vllm["env"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["name"] == "POLICY_INJECTED"),
        "{vllm:#}"
    );
    assert_eq!(
        vllm["image"], "vllm/vllm-openai:v0.11.0",
        "Tandem's own fields stay"
    );
    scenario.excuse(
        Invariant::Floor,
        "the policy engine's template change makes LWS restart the only replica's pods, \
         which is LWS's doing, not Tandem's",
    );
    scenario.finish(Quiet::Checked).await;
}
/// A name every child accepts is deployed; `llama-3.1-8b`, whose
/// LeaderWorkerSet LWS's own webhook would refuse (a DNS-1035 label: no
/// dots), is denied at admission with the field and a rename hint.
pub(crate) async fn a_service_named_as_every_child_accepts_deploys_and_a_dotted_name_is_denied_with_a_hint()
 {
    let Some(scenario) = Scenario::start("e2e-names").await else {
        return;
    };
    scenario.nodes(1).await;
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    service["metadata"]["name"] = json!("llama-3.1-8b");
    let refused = scenario
        .create(&service)
        .await
        .expect_err("a dotted name is denied");
    let kube::Error::Api(status) = refused else {
        panic!("expected a denial, got {refused}");
    };
    assert!(
        status.message.contains(r#"metadata.name: "llama-3.1-8b" makes LeaderWorkerSet "llama-3.1-8b-inference-0", which must be a DNS-1035 label"#)
            && status.message.contains(r#"use "llama-3-1-8b""#),
        "{}",
        status.message
    );
    assert!(scenario.names(IS, "InferenceService").await.is_empty());

    service["metadata"]["name"] = json!("llama-3-1-8b");
    scenario
        .create(&service)
        .await
        .expect("the suggested name is admitted");
    wait_service_ready(&scenario, "llama-3-1-8b").await;
    assert_eq!(
        scenario.names(LWS, "LeaderWorkerSet").await,
        ["llama-3-1-8b-inference-0"]
    );
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", "llama-3-1-8b"))
        .await;
}

/// Grants no scenario of the shared plane uses, each with what needs it: `(verb,
/// resource, group, why)`. The check holds this list exact: a grant unused
/// and not listed fails it (remove the grant, or say here why it stays),
/// and so does one listed that a scenario now uses (take it off the list).
const NOT_IN_THESE_SCENARIOS: &[(&str, &str, &str, &str)] = &[
    // Reads of /scale that the scaling group's scenario
    // (tests/cluster/nodes.rs) makes from its caches, and kinds no scenario
    // clones.
    (
        "get",
        "statefulsets/scale",
        "apps",
        "InplaceScaling of a StatefulSet",
    ),
    (
        "get",
        "leaderworkersets/scale",
        "leaderworkerset.x-k8s.io",
        "InplaceScaling of a LeaderWorkerSet",
    ),
    (
        "get",
        "statefulsets",
        "apps",
        "GroupReplication of a StatefulSet",
    ),
    (
        "create",
        "statefulsets",
        "apps",
        "GroupReplication of a StatefulSet",
    ),
    (
        "patch",
        "statefulsets",
        "apps",
        "GroupReplication of a StatefulSet",
    ),
    (
        "delete",
        "statefulsets",
        "apps",
        "GroupReplication of a StatefulSet",
    ),
    (
        "create",
        "inferenceservices",
        "fusioninfer.io",
        "GroupReplication of an InferenceService",
    ),
    (
        "delete",
        "inferenceservices",
        "fusioninfer.io",
        "GroupReplication of an InferenceService",
    ),
    // RoleBasedGroup's CRD is not among the tests' upstream CRDs.
    (
        "get",
        "rolebasedgroups",
        "workloads.x-k8s.io",
        "InplaceScaling and GroupReplication of RoleBasedGroups",
    ),
    (
        "list",
        "rolebasedgroups",
        "workloads.x-k8s.io",
        "GroupReplication of RoleBasedGroups",
    ),
    (
        "watch",
        "rolebasedgroups",
        "workloads.x-k8s.io",
        "GroupReplication of RoleBasedGroups",
    ),
    (
        "create",
        "rolebasedgroups",
        "workloads.x-k8s.io",
        "GroupReplication of RoleBasedGroups",
    ),
    (
        "patch",
        "rolebasedgroups",
        "workloads.x-k8s.io",
        "InplaceScaling and GroupReplication of RoleBasedGroups",
    ),
    (
        "delete",
        "rolebasedgroups",
        "workloads.x-k8s.io",
        "GroupReplication of RoleBasedGroups",
    ),
    // An upgrade's Gateway is made and moved in tests/cluster/nodes.rs, and
    // deleted only once the upgrade is done, which no scenario waits for.
    (
        "delete",
        "gateways",
        "gateway.networking.k8s.io",
        "an upgrade's Gateway, once done",
    ),
    // Children a spec change makes unneeded, which no scenario here makes.
    (
        "delete",
        "podgroups",
        "scheduling.volcano.sh",
        "a service that no longer needs gang scheduling",
    ),
    (
        "delete",
        "poddisruptionbudgets",
        "policy",
        "a serving role removed from its service",
    ),
];

/// Tandem's requests in every scenario, from the real API server's audit
/// log, against `manifests/base/rbac.yaml`: each allowed by a rule bound to
/// Tandem's ServiceAccount, and each of those rules used, but for
/// [`NOT_IN_THESE_SCENARIOS`] (never used here) and [`harness::rbac::ON_A_CACHE_MISS`]
/// (used or not).
pub(crate) fn every_request_granted_and_every_grant_used() -> Result<String, String> {
    let plane = harness::control_plane::ControlPlane::shared();
    requests_against_grants(&plane.audit_events())
}

/// The check of [`every_request_granted_and_every_grant_used`] on the
/// events of an audit log.
fn requests_against_grants(events: &[serde_json::Value]) -> Result<String, String> {
    let documents = harness::yaml_documents(&harness::repo_path("manifests/base/rbac.yaml"));
    let grants = tandem::check::installation::shipped_grants(&documents, "tandem-system", "tandem");
    let seen = harness::rbac::accesses(events, harness::control_plane::TANDEM_USER);
    let (refused, unused) = harness::rbac::mismatch(&grants, &seen);
    let listed = |g: &tandem::check::installation::Grant| {
        NOT_IN_THESE_SCENARIOS
            .iter()
            .any(|(verb, resource, group, _)| {
                g.verb == *verb && g.resource == *resource && g.group == *group
            })
    };
    let on_a_miss = |g: &tandem::check::installation::Grant| {
        harness::rbac::ON_A_CACHE_MISS
            .iter()
            .any(|(verb, resource, group, _)| {
                g.verb == *verb && g.resource == *resource && g.group == *group
            })
    };
    let unlisted: Vec<String> = unused
        .iter()
        .filter(|g| !listed(g) && !on_a_miss(g))
        .map(ToString::to_string)
        .collect();
    let now_used: Vec<String> = NOT_IN_THESE_SCENARIOS
        .iter()
        .filter(|(verb, resource, group, _)| {
            !unused
                .iter()
                .any(|g| g.verb == *verb && g.resource == *resource && g.group == *group)
        })
        .map(|(verb, resource, group, _)| format!("{verb} {resource}.{group}"))
        .collect();
    let now_used: Vec<String> = now_used
        .into_iter()
        .chain(
            harness::rbac::ON_A_CACHE_MISS
                .iter()
                .filter(|(verb, resource, group, _)| {
                    !grants
                        .iter()
                        .any(|g| g.verb == *verb && g.resource == *resource && g.group == *group)
                })
                .map(|(verb, resource, group, _)| format!("{verb} {resource}.{group}")),
        )
        .collect();
    if refused.is_empty() && unlisted.is_empty() && now_used.is_empty() {
        return Ok(format!(
            "{} distinct requests, {} grants: each request granted; each grant used but the {} \
             listed in NOT_IN_THESE_SCENARIOS and ON_A_CACHE_MISS",
            seen.len(),
            grants.len(),
            unused.len()
        ));
    }
    Err(format!(
        "requests no shipped rule allows:\n  {}\ngrants no request used and not listed:\n  {}\n\
         listed as unused but used now (or not granted):\n  {}",
        refused.join("\n  "),
        unlisted.join("\n  "),
        now_used.join("\n  ")
    ))
}

/// The mechanism that keeps every scenario's invariants checked, caught
/// in the act: a scenario dropped without [`Scenario::finish`] fails (its
/// `Drop` panics), so a scenario that forgets its invariants cannot pass.
/// The panic's message is printed above this test's result, as any panic's.
pub(crate) async fn a_scenario_that_ends_without_finish_fails() {
    let Some(scenario) = Scenario::start("e2e-forgotten").await else {
        return;
    };
    let forgotten = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(scenario)));
    let panic = forgotten.expect_err("a scenario dropped unfinished panics");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("e2e-forgotten ended without Scenario::finish"),
        "{message}"
    );
}
