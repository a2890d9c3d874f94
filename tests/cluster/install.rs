//! Tandem's install against a real control plane (one of its own,
//! since it stops Tandem): with Tandem gone and its webhooks unanswered
//! (failurePolicy Fail), a ScaleView's finalizer can still be removed by
//! hand, because the webhooks' matchConditions skip objects being deleted
//! and updates that leave spec unchanged; the namespace then finishes
//! deleting.

use harness::control_plane::{self, ControlPlane};
use harness::install::{CLUSTER_SCOPED, kind_and_name, tandem_certs, user_checkout};
use harness::scenario::{IS, Invariant, Quiet, Scenario};
use harness::serve::Tandem;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// The control plane of its own these scenarios run on (`main.rs` stops it
/// once they are done).
pub(crate) const PLANE: &str = "install";

/// The plane on which Tandem is stopped, apart from [`PLANE`]: its Tandem
/// registers webhooks by URL, which the installs' dry runs there would
/// meet.
pub(crate) const STOPPED_PLANE: &str = "install-stopped";

pub(crate) async fn with_tandem_stopped_a_views_finalizer_comes_off_by_hand_and_its_namespace_goes()
{
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED with_tandem_stopped: {reason}");
        return;
    }
    let plane = ControlPlane::own(STOPPED_PLANE);
    let tandem = Tandem::shared(plane);
    let mut scenario = Scenario::with_tandem("e2e-uninstall", plane, tandem).await;
    scenario.nodes(1).await;
    scenario.spot_nodes(1).await;
    for object in harness::yaml_documents(&harness::repo_path(
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

    scenario.excuse(
        Invariant::Quiet,
        "Tandem is stopped and the namespace deleted: nothing is left to settle",
    );
    scenario.finish(Quiet::Checked).await;

    // An update that changes spec still needs the webhook: it fails closed.
    let mut other = Scenario::with_tandem("e2e-uninstall-spec", plane, tandem).await;
    let mut service =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story1-monolithic.yaml"))
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
    other.excuse(
        Invariant::Quiet,
        "Tandem is stopped: the service was refused, nothing was made to settle",
    );
    other.finish(Quiet::Checked).await;
}

/// `object` as the real API server would store it: a server-side apply,
/// dry run, as a cluster admin. Panics naming the object if it is refused.
async fn stored_dry_run(admin: &kube::Client, object: &serde_json::Value) -> serde_json::Value {
    let api = control_plane::api_for(admin, object).await;
    let name = object["metadata"]["name"].as_str().unwrap();
    let params = PatchParams::apply("tandem-install-test").force().dry_run();
    let stored = api
        .patch(name, &params, &Patch::Apply(object))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", kind_and_name(object)));
    serde_json::to_value(stored).unwrap()
}

/// Issue 25: both installs build as `kubectl apply -k` builds them, and the
/// one without cert-manager needs no hand edit: `tandem certs` writes into
/// its `certs/`, kustomize mounts that certificate and puts its CA into
/// every webhook, and the CA's key goes nowhere. The real API server accepts
/// every object it makes (server-side apply, dry run).
pub(crate) async fn the_install_without_cert_manager_needs_no_hand_edit() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_install_without_cert_manager: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
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
        o["kind"] == "ValidatingWebhookConfiguration" || o["kind"] == "MutatingWebhookConfiguration"
    }) {
        assert_eq!(
            configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "tandem-system/tandem-ca"
        );
    }

    // Without: `tandem certs` into certs/, then build. Nothing else is edited.
    let overlay = checkout.path().join("manifests/without-cert-manager");
    let certs = overlay.join("certs");
    tandem_certs(&certs, &[]);
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
        stored_dry_run(&admin, object).await;
    }
}

/// An install in another namespace: the namespace of
/// `manifests/in-namespace/` changed (its one line), built with kustomize's
/// library as `kubectl apply -k` does. Every name that holds the namespace
/// agrees: the objects, the Namespace itself, the RoleBindings' subjects,
/// the webhooks' Service, the serving certificate's DNS names (what the
/// API server checks the webhook's TLS name against) and cainjector's
/// annotation, and the user the pod-patch policy matches; and the
/// Deployment takes its service account's user name from the downward API.
/// Nothing names tandem-system.
pub(crate) fn an_install_in_another_namespace_agrees_on_every_name() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED an_install_in_another_namespace: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
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
    for object in objects
        .iter()
        .filter(|o| !CLUSTER_SCOPED.contains(&o["kind"].as_str().unwrap_or_default()))
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
    // The pod-patch policy matches Tandem's account in its namespace.
    assert_eq!(
        find("ValidatingAdmissionPolicy", "tandem-pod-patches")["spec"]["matchConditions"][0]["expression"],
        format!("request.userInfo.username == 'system:serviceaccount:{NS}:tandem'")
    );
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

/// `manifests/base/pod-patches.yaml` on the real API server: Tandem's
/// account may relabel the pods of its services (as a drain does, a
/// server-side apply of a label and an annotation), and the API server
/// refuses it anything else: the spec of its own pods (an image), and any
/// pod it does not manage. Another user is not matched. (Tandem's drains
/// under the policy are `tests/cluster/end_to_end.rs`'s binpack scenario,
/// whose invariants flag a refusal.)
pub(crate) async fn the_pod_patch_policy_lets_tandem_relabel_its_pods_and_nothing_more() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_pod_patch_policy: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    const NS: &str = "e2e-pod-patches";
    let admin = plane.namespace(NS).await;
    let pod = |name: &str, labels: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": NS, "labels": labels},
               "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]}})
    };
    let ours = pod(
        "served-0",
        json!({"app.kubernetes.io/managed-by": "tandem", "fusioninfer.io/service": "s"}),
    );
    let theirs = pod("someone-elses", json!({"app": "other"}));
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(admin, NS);
    for object in [&ours, &theirs] {
        pods.create(
            &Default::default(),
            &serde_json::from_value(object.clone()).unwrap(),
        )
        .await
        .expect("the admin creates the pod");
    }
    let tandem: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        plane.as_tandem().await.expect("a client as Tandem"),
        NS,
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let drain = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
               "labels": {"fusioninfer.io/traffic": "draining"},
               "annotations": {"fusioninfer.io/drain-started-at": "2026-11-26T00:00:00Z"}}})
    };
    let apply = PatchParams::apply("tandem").force();
    let refusal = |result: Result<kube::api::DynamicObject, kube::Error>| match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    // A new policy takes a moment to be enforced: wait for its first
    // refusal, of the image change, tried as a dry run.
    let image = json!({"spec": {"containers": [{"name": "vllm", "image": "evil/vllm:latest"}]}});
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let message = loop {
        let tried = tandem
            .patch(
                "served-0",
                &PatchParams::default().dry_run(),
                &Patch::Strategic(&image),
            )
            .await;
        match tried {
            Err(kube::Error::Api(status)) => break status.message,
            other => assert!(
                std::time::Instant::now() < deadline,
                "the policy is not in force after 30 s: {other:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        message.contains("tandem-pod-patches") && message.contains("not its spec"),
        "{message}"
    );
    let relabelled = tandem
        .patch("served-0", &apply, &Patch::Apply(drain("served-0")))
        .await
        .expect("Tandem relabels its own pod");
    assert_eq!(
        relabelled.metadata.labels.unwrap()["fusioninfer.io/traffic"],
        "draining"
    );
    let message = refusal(
        tandem
            .patch(
                "someone-elses",
                &apply,
                &Patch::Apply(drain("someone-elses")),
            )
            .await,
    );
    assert!(message.contains("pods of its own services"), "{message}");
    let message = refusal(
        tandem
            .patch(
                "served-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
            )
            .await,
    );
    assert!(message.contains("labels and annotations"), "{message}");
    // Anyone else is not matched: the admin changes the image.
    pods.patch(
        "served-0",
        &PatchParams::default(),
        &Patch::Strategic(&image),
    )
    .await
    .expect("the policy matches only Tandem");
}

/// The dev and prod overlays build as `kubectl apply -k` builds them, and the
/// real API server takes each object (cert-manager's kinds aside: the tests'
/// cluster has no cert-manager). Prod: JSON logs in a format the binary
/// reads, the image from the registry the user sets, and a NetworkPolicy
/// that selects Tandem's pods and lets in exactly the ports they serve.
/// Dev: one replica, debug logs, no PodDisruptionBudget to block a drain.
pub(crate) async fn the_dev_and_prod_overlays_build_and_the_api_server_takes_them() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_dev_and_prod_overlays: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    let checkout = user_checkout();
    let build = |overlay: &str| {
        plane
            .kustomize(&checkout.path().join("manifests").join(overlay))
            .unwrap_or_else(|e| panic!("{overlay} builds: {e}"))
    };
    let (prod, dev) = (build("prod"), build("dev"));
    let find = |objects: &[serde_json::Value], kind: &str| -> serde_json::Value {
        let found: Vec<_> = objects.iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "one {kind}");
        found[0].clone()
    };
    let env = |deployment: &serde_json::Value, name: &str| -> Option<String> {
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].as_str().unwrap().to_owned())
    };

    let deployment = find(&prod, "Deployment");
    let format = env(&deployment, "TANDEM_LOG_FORMAT").expect("prod sets the log format");
    assert_eq!(
        <tandem::logging::LogFormat as clap::ValueEnum>::from_str(&format, false),
        Ok(tandem::logging::LogFormat::Json)
    );
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/platform/tandem:0.1.0"
    );
    find(&prod, "PodDisruptionBudget");
    let policy = find(&prod, "NetworkPolicy");
    assert_eq!(policy["metadata"]["namespace"], "tandem-system");
    let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            pod_labels.get(key),
            Some(value),
            "the policy selects Tandem's pods"
        );
    }
    let mut served: Vec<i64> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_i64().unwrap())
        .collect();
    let mut allowed: Vec<i64> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_array().unwrap().iter())
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    served.sort();
    allowed.sort();
    assert_eq!(allowed, served, "ingress: exactly the ports the pod serves");

    let deployment = find(&dev, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(
        env(&deployment, "RUST_LOG").as_deref(),
        Some("info,tandem=debug")
    );
    assert_eq!(env(&deployment, "TANDEM_LOG_FORMAT"), None, "text logs");
    assert!(!dev.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    assert!(!dev.iter().any(|o| o["kind"] == "NetworkPolicy"));

    let admin = plane.admin().await.expect("an admin client");
    for object in prod.iter().chain(&dev).filter(|o| {
        !o["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cert-manager.io/")
    }) {
        stored_dry_run(&admin, object).await;
    }
}

/// `manifests/monitoring/` (the ServiceMonitor, the alerts and the Grafana
/// dashboard) against the Prometheus Operator's own CRDs, from its
/// release's Go module: the real API server takes both objects, unpruned. The ServiceMonitor finds the
/// metrics Service and its port. (That every metric an alert reads is one
/// `tandem serve` exports is `tests/fake_api/controller_metrics.rs`'s, where the
/// binary has admitted and reconciled.)
pub(crate) async fn the_monitoring_component_fits_the_operators_crds_and_finds_the_metrics_service()
{
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_monitoring_component: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    let checkout = user_checkout();
    let overlay = checkout.path().join("manifests/with-monitoring");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources: [../base, ../cert-manager]\ncomponents: [../monitoring]\n",
    )
    .unwrap();
    let objects = plane.kustomize(&overlay).expect("the component builds");
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
            .clone()
    };
    let monitor = find("ServiceMonitor", "tandem");
    let rules = find("PrometheusRule", "tandem");

    let admin = plane.admin().await.expect("an admin client");
    for plural in ["servicemonitors", "prometheusrules"] {
        control_plane::install_crd(&admin, &harness::modules::prometheus_operator_crd(plural))
            .await;
    }
    for object in [&monitor, &rules] {
        let stored = stored_dry_run(&admin, object).await;
        // Nothing pruned: the schema knows every field written.
        assert_eq!(stored["spec"], object["spec"], "{}", kind_and_name(object));
    }

    // The ServiceMonitor selects the metrics Service, not the webhook's,
    // and scrapes a port it has.
    let selected: Vec<_> = objects
        .iter()
        .filter(|o| o["kind"] == "Service")
        .filter(|service| {
            monitor["spec"]["selector"]["matchLabels"]
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| &service["metadata"]["labels"][k] == v)
        })
        .collect();
    assert_eq!(selected.len(), 1, "one Service: {selected:?}");
    assert_eq!(selected[0]["metadata"]["name"], "tandem-metrics");
    let port = &monitor["spec"]["endpoints"][0]["port"];
    assert!(
        selected[0]["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| &p["name"] == port),
        "port {port}"
    );
    // TandemDown reads the job Prometheus gives the Service's targets.
    let text = serde_json::to_string(&rules).unwrap();
    assert!(text.contains("up{job=\\\"tandem-metrics\\\"}"), "{text}");

    // The Grafana dashboard: a ConfigMap in Tandem's namespace that
    // Grafana's sidecar loads by its label, whose JSON is a dashboard, and
    // which the real API server takes as written. (That its queries read
    // exported metrics and labels is tests/fake_api/controller_metrics.rs's.)
    let dashboard = find("ConfigMap", "tandem-grafana-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(dashboard["metadata"]["namespace"], "tandem-system");
    let json: serde_json::Value = serde_json::from_str(
        dashboard["data"]["tandem-dashboard.json"]
            .as_str()
            .expect("the dashboard's file"),
    )
    .expect("the dashboard is JSON");
    assert_eq!(json["uid"], "tandem");
    assert!(json["panels"].as_array().is_some_and(|p| p.len() >= 12));
    let stored = stored_dry_run(&admin, &dashboard).await;
    assert_eq!(stored["data"], dashboard["data"]);
}

/// The install without cert-manager in another namespace:
/// `manifests/in-namespace-without-cert-manager/` with its namespace changed
/// (its one line) and `tandem certs --namespace` given the same name, as its
/// comment says. Every object is in that namespace (the generated Secret
/// too), the webhooks call the Service there, the pod-patch policy matches
/// Tandem's account there, the Secret's certificate serves the Service's
/// name there, and the real API server takes every object. Nothing names
/// tandem-system.
pub(crate) async fn the_install_without_cert_manager_moves_to_another_namespace() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_install_without_cert_manager_moves: {reason}");
        return;
    }
    const NS: &str = "inference-ops";
    let plane = ControlPlane::own(PLANE);
    let checkout = user_checkout();
    let overlay = checkout
        .path()
        .join("manifests/in-namespace-without-cert-manager");
    let kustomization = overlay.join("kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    assert_eq!(text.matches("\nnamespace: ").count(), 1, "named once");
    std::fs::write(
        &kustomization,
        text.replace("\nnamespace: tandem-ops\n", &format!("\nnamespace: {NS}\n")),
    )
    .unwrap();
    let certs = checkout.path().join("manifests/without-cert-manager/certs");
    tandem_certs(&certs, &["--namespace", NS]);
    let objects = plane.kustomize(&overlay).expect("the overlay builds");
    let all = serde_json::to_string(&objects).unwrap();
    assert!(!all.contains("tandem-system"), "{all}");
    for object in &objects {
        if CLUSTER_SCOPED.contains(&object["kind"].as_str().unwrap_or_default()) {
            continue;
        }
        assert_eq!(
            object["metadata"]["namespace"],
            NS,
            "{}",
            kind_and_name(object)
        );
    }
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name}"))
    };
    for configuration in objects.iter().filter(|o| {
        o["kind"] == "ValidatingWebhookConfiguration" || o["kind"] == "MutatingWebhookConfiguration"
    }) {
        for webhook in configuration["webhooks"].as_array().unwrap() {
            assert_eq!(webhook["clientConfig"]["service"]["namespace"], NS);
        }
    }
    assert_eq!(
        find("ValidatingAdmissionPolicy", "tandem-pod-patches")["spec"]["matchConditions"][0]["expression"],
        format!("request.userInfo.username == 'system:serviceaccount:{NS}:tandem'")
    );
    let secret = find("Secret", "tandem-webhook-tls");
    let decoded = |key: &str| {
        // kustomize wraps the base64 text in lines.
        let text: String = secret["data"][key]
            .as_str()
            .unwrap()
            .split_whitespace()
            .collect();
        String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text).unwrap(),
        )
        .unwrap()
    };
    let service = find("Service", "tandem-webhook")["metadata"]["name"]
        .as_str()
        .unwrap();
    assert_eq!(
        tandem::certs::serving_problem(
            &decoded("tls.crt"),
            &decoded("tls.key"),
            &tandem::certs::service_hosts(service, NS),
            time::OffsetDateTime::now_utc(),
        ),
        None,
        "the Secret's certificate serves {service}.{NS}.svc"
    );

    let admin = plane.namespace(NS).await;
    for object in &objects {
        stored_dry_run(&admin, object).await;
    }
}
