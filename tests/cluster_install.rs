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

/// Copies `from` into `to`, recursively.
/// A user's checkout: manifests/ and the webhooks/ it includes, in a
/// temporary folder the test may change.
fn user_checkout() -> tempfile::TempDir {
    let checkout = tempfile::tempdir().unwrap();
    copy_tree(
        &common::repo_path("manifests"),
        &checkout.path().join("manifests"),
    );
    copy_tree(
        &common::repo_path("webhooks"),
        &checkout.path().join("webhooks"),
    );
    checkout
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn kind_and_name(object: &serde_json::Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Issue 25: both installs build as `kubectl apply -k` builds them, and the
/// one without cert-manager needs no hand edit: `tandem certs` writes into
/// its `certs/`, kustomize mounts that certificate and puts its CA into
/// every webhook, and the CA's key goes nowhere. The real API server accepts
/// every object it makes (server-side apply, dry run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_without_cert_manager_needs_no_hand_edit() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_install_without_cert_manager: {reason}");
        return;
    }
    let plane = ControlPlane::shared();
    let checkout = user_checkout();

    // With cert-manager (the default): its Issuers and Certificates, and
    // cainjector's annotation instead of a caBundle.
    let with = plane
        .kustomize(&checkout.path().join("manifests"))
        .expect("manifests/ builds");
    let names: Vec<String> = with.iter().map(kind_and_name).collect();
    for expected in [
        "Issuer tandem-selfsigned",
        "Certificate tandem-ca",
        "Issuer tandem-ca",
        "Certificate tandem-webhook",
        "Deployment tandem",
        "ValidatingWebhookConfiguration tandem-validating",
        "MutatingWebhookConfiguration tandem-mutating",
    ] {
        assert!(
            names.contains(&expected.to_owned()),
            "{expected} in {names:?}"
        );
    }
    for configuration in with.iter().filter(|o| {
        o["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("admissionregistration.k8s.io/"))
    }) {
        assert_eq!(
            configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "tandem-system/tandem-ca"
        );
    }

    // Without: `tandem certs` into certs/, then build. Nothing else is edited.
    let overlay = checkout.path().join("manifests/without-cert-manager");
    let certs = overlay.join("certs");
    let written = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["certs", "--out-dir"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(
        written.status.success(),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
    let without = plane
        .kustomize(&overlay)
        .expect("manifests/without-cert-manager/ builds");
    let ca = std::fs::read(certs.join("ca.crt")).unwrap();
    let ca_key = std::fs::read_to_string(certs.join("ca.key")).unwrap();
    let b64 =
        |bytes: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
    let unwrapped = |value: &serde_json::Value| -> String {
        value
            .as_str()
            .unwrap_or_default()
            .split_whitespace()
            .collect()
    };
    let mut webhooks = 0;
    for object in &without {
        let text = object.to_string();
        assert!(
            !object["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .starts_with("cert-manager.io/"),
            "{}",
            kind_and_name(object)
        );
        assert!(
            !text.contains("inject-ca-from"),
            "{}",
            kind_and_name(object)
        );
        assert!(
            !text.contains(&b64(ca_key.as_bytes())) && !text.contains(ca_key.trim()),
            "the CA's key is in {}",
            kind_and_name(object)
        );
        if let Some(list) = object["webhooks"].as_array() {
            for webhook in list {
                assert_eq!(
                    unwrapped(&webhook["clientConfig"]["caBundle"]),
                    b64(&ca),
                    "{} {}",
                    kind_and_name(object),
                    webhook["name"]
                );
                webhooks += 1;
            }
        }
    }
    assert_eq!(webhooks, 6, "three validating and three mutating");
    let secret = without
        .iter()
        .find(|o| kind_and_name(o) == "Secret tandem-webhook-tls")
        .expect("the Secret the Deployment mounts");
    assert_eq!(secret["metadata"]["namespace"], "tandem-system");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let data = secret["data"].as_object().unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["tls.crt", "tls.key"],
        "only the serving pair"
    );
    for key in ["tls.crt", "tls.key"] {
        assert_eq!(
            unwrapped(&data[key]),
            b64(&std::fs::read(certs.join(key)).unwrap()),
            "{key}"
        );
    }
    // The same objects but cert-manager's, and the Secret.
    let mut expected: Vec<String> = names
        .iter()
        .filter(|n| !n.starts_with("Issuer ") && !n.starts_with("Certificate "))
        .cloned()
        .chain(["Secret tandem-webhook-tls".to_owned()])
        .collect();
    let mut made: Vec<String> = without.iter().map(kind_and_name).collect();
    expected.sort();
    made.sort();
    assert_eq!(made, expected);

    // The real API server takes every one of them.
    let admin = plane.admin().await.expect("an admin client");
    for object in &without {
        let api = control_plane::api_for(&admin, object).await;
        let name = object["metadata"]["name"].as_str().unwrap();
        let params = PatchParams::apply("tandem-install-test").force().dry_run();
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", kind_and_name(object)));
    }
}

/// An install in another namespace: the namespace of
/// `manifests/in-namespace/` changed (its one line), built with kustomize's
/// library as `kubectl apply -k` does. Every name that holds the namespace
/// agrees: the objects, the Namespace itself, the RoleBindings' subjects,
/// the webhooks' Service, the serving certificate's DNS names (what the
/// API server checks the webhook's TLS name against) and cainjector's
/// annotation; and the Deployment takes its service account's user name
/// from the downward API. Nothing names tandem-system.
#[test]
fn an_install_in_another_namespace_agrees_on_every_name() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED an_install_in_another_namespace: {reason}");
        return;
    }
    let plane = ControlPlane::shared();
    let checkout = user_checkout();
    let overlay = checkout.path().join("manifests/in-namespace");
    let kustomization = overlay.join("kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    assert_eq!(text.matches("\nnamespace: ").count(), 1, "named once");
    std::fs::write(
        &kustomization,
        text.replace("\nnamespace: tandem-ops\n", "\nnamespace: inference-ops\n"),
    )
    .unwrap();
    let objects = plane.kustomize(&overlay).expect("the overlay builds");
    let all = serde_json::to_string(&objects).unwrap();
    assert!(!all.contains("tandem-system"), "{all}");
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
    };
    const NS: &str = "inference-ops";
    assert!(
        objects
            .iter()
            .any(|o| o["kind"] == "Namespace" && o["metadata"]["name"] == NS)
    );
    let cluster_scoped = [
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ];
    for object in objects
        .iter()
        .filter(|o| !cluster_scoped.contains(&o["kind"].as_str().unwrap_or_default()))
    {
        assert_eq!(
            object["metadata"]["namespace"],
            NS,
            "{}",
            kind_and_name(object)
        );
    }
    for binding in objects
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        for subject in binding["subjects"].as_array().unwrap() {
            assert_eq!(subject["namespace"], NS, "{}", kind_and_name(binding));
            find("ServiceAccount", subject["name"].as_str().unwrap());
        }
    }
    let service = find("Service", "tandem-webhook");
    let host = format!("tandem-webhook.{NS}.svc");
    assert_eq!(
        find("Certificate", "tandem-webhook")["spec"]["dnsNames"],
        json!([host, format!("{host}.cluster.local")])
    );
    find("Certificate", "tandem-ca");
    for configuration in objects.iter().filter(|o| {
        o["kind"] == "ValidatingWebhookConfiguration" || o["kind"] == "MutatingWebhookConfiguration"
    }) {
        assert_eq!(
            configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NS}/tandem-ca")
        );
        for webhook in configuration["webhooks"].as_array().unwrap() {
            let called = &webhook["clientConfig"]["service"];
            assert_eq!(called["namespace"], NS);
            assert_eq!(called["name"], service["metadata"]["name"]);
        }
    }
    let pod = &find("Deployment", "tandem")["spec"]["template"]["spec"];
    find(
        "ServiceAccount",
        pod["serviceAccountName"].as_str().unwrap(),
    );
    let env = &pod["containers"][0]["env"];
    let value = |name: &str| {
        env.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("env {name}"))
    };
    assert_eq!(
        value("POD_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        value("POD_SERVICE_ACCOUNT")["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.serviceAccountName"
    );
    assert_eq!(
        value("TANDEM_SERVICE_ACCOUNT")["value"],
        "system:serviceaccount:$(POD_NAMESPACE):$(POD_SERVICE_ACCOUNT)"
    );
}
