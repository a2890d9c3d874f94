//! Tandem's Helm chart (`charts/tandem/`), rendered and installed with the
//! real Helm, built from its Go module beside the control plane
//! (`tests/cluster/helm`):
//! - `helm lint` passes with the default and the prod values;
//! - `helm template` makes exactly the objects of the kustomize install it
//!   stands for (default, prod, dev, without cert-manager, with monitoring,
//!   in another namespace), Helm's own labels aside, so the two never drift;
//! - values the chart cannot use are refused with their path;
//! - `helm install` into the tests' real control plane (one of its
//!   own: it replaces the RBAC and CRDs the control plane starts with) makes
//!   webhooks the API server calls, `helm upgrade` to the prod values
//!   applies, and `helm uninstall` removes everything but the CRDs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::control_plane::{self, ControlPlane};
use harness::install::{CLUSTER_SCOPED, kind_and_name, tandem_certs, user_checkout};
use serde_json::{Value, json};

/// The control plane of its own these scenarios run on (`main.rs` stops it
/// once they are done).
pub(crate) const PLANE: &str = "helm";

/// The Kubernetes version `helm template` renders for: the tests' control
/// plane's (tests/cluster/go.mod). Without one Helm assumes 1.20, which
/// the chart's `kubeVersion` refuses.
const KUBE_VERSION: &str = "1.36.3";

fn chart() -> PathBuf {
    harness::repo_path("charts/tandem")
}

/// `helm template tandem charts/tandem -n NAMESPACE ARGS`: the objects, or
/// Helm's error.
fn template(home: &Path, namespace: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    let output = harness::modules::helm(home)
        .args(["template", "tandem"])
        .arg(chart())
        .args(["--namespace", namespace, "--kube-version", KUBE_VERSION])
        .args(args)
        .output()
        .expect("helm runs");
    if output.status.success() {
        Ok(harness::modules::yaml_stream(&String::from_utf8_lossy(
            &output.stdout,
        )))
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// The labels Helm's objects carry and kustomize's do not: which release
/// and chart made them.
const HELM_LABELS: [(&str, &str); 4] = [
    ("app.kubernetes.io/instance", "tandem"),
    ("app.kubernetes.io/managed-by", "Helm"),
    ("app.kubernetes.io/version", "0.1.0"),
    ("helm.sh/chart", "tandem-0.1.0"),
];

/// The chart's objects by `Kind name`, each checked to carry Helm's labels
/// and then without them, to compare with kustomize's.
fn without_helm_labels(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|mut object| {
            let name = kind_and_name(&object);
            let labels = object["metadata"]["labels"]
                .as_object_mut()
                .unwrap_or_else(|| panic!("{name} has no labels"));
            for (key, value) in HELM_LABELS {
                assert_eq!(
                    labels.remove(key),
                    Some(json!(value)),
                    "{name}: label {key}"
                );
            }
            (name, object)
        })
        .collect()
}

/// kustomize's objects by `Kind name`, without the Namespace: the chart
/// installs into a namespace Helm is given (`--create-namespace`), as
/// Helm charts do.
fn by_name(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .map(|o| (kind_and_name(&o), o))
        .collect()
}

/// The object with its base64 values (a Secret's data, the webhooks'
/// caBundle) on one line: kustomize's generators wrap them at 76
/// characters, Helm's `b64enc` does not, and both decode the same.
fn unwrapped(mut object: Value) -> Value {
    let unwrap = |value: &mut Value| {
        if let Some(text) = value.as_str() {
            *value = json!(text.split_whitespace().collect::<String>());
        }
    };
    if let Some(data) = object["data"].as_object_mut() {
        data.values_mut().for_each(unwrap);
    }
    if let Some(webhooks) = object["webhooks"].as_array_mut() {
        for webhook in webhooks {
            unwrap(&mut webhook["clientConfig"]["caBundle"]);
        }
    }
    object
}

/// Asserts the chart's objects are kustomize's, object by object.
fn assert_same(case: &str, chart: Vec<Value>, kustomize: Vec<Value>) {
    let chart = without_helm_labels(chart.into_iter().map(unwrapped).collect());
    let kustomize = by_name(kustomize.into_iter().map(unwrapped).collect());
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        kustomize.keys().collect::<Vec<_>>(),
        "{case}: the chart's objects (left) and kustomize's (right)"
    );
    for (name, object) in &chart {
        assert!(
            object == &kustomize[name],
            "{case}: {name} differs.\nchart:\n{}\nkustomize:\n{}",
            serde_json::to_string_pretty(object).unwrap(),
            serde_json::to_string_pretty(&kustomize[name]).unwrap()
        );
    }
}

/// `--set-file` arguments giving the chart the files `tandem certs` wrote.
fn provided_certificate(certs: &Path) -> Vec<String> {
    let mut args = vec!["--set".to_owned(), "certificate.source=provided".to_owned()];
    for (value, file) in [
        ("caCert", "ca.crt"),
        ("tlsCert", "tls.crt"),
        ("tlsKey", "tls.key"),
    ] {
        args.push("--set-file".to_owned());
        args.push(format!(
            "certificate.provided.{value}={}",
            certs.join(file).display()
        ));
    }
    args
}

pub(crate) fn the_chart_lints_with_the_default_and_the_prod_values() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_chart_lints: {reason}");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    for values in [None, Some("values-prod.yaml")] {
        let mut lint = harness::modules::helm(home.path());
        lint.args(["lint", "--strict", "--kube-version", KUBE_VERSION])
            .arg(chart());
        if let Some(file) = values {
            lint.arg("-f").arg(chart().join(file));
        }
        let output = lint.output().expect("helm runs");
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && said.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm lint {values:?}:\n{said}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The chart and the kustomizations make the same objects: with the default
/// values `manifests/`, with `values-prod.yaml` `manifests/prod/`, with one
/// replica and debug logs `manifests/dev/`, with the files of `tandem certs`
/// `manifests/without-cert-manager/`, with both metrics objects and the
/// Grafana dashboard prod plus `manifests/monitoring/`, and in another namespace
/// `manifests/in-namespace/` moved there.
pub(crate) fn the_chart_makes_the_objects_of_the_kustomize_installs() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_chart_makes_the_objects: {reason}");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let checkout = user_checkout();
    let manifests = checkout.path().join("manifests");
    let kustomize = |dir: &Path| {
        harness::modules::kustomize(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
    };
    let prod = chart().join("values-prod.yaml");
    let prod = prod.to_str().unwrap();

    assert_same(
        "default values",
        template(home.path(), "tandem-system", &[]).unwrap(),
        kustomize(&manifests),
    );
    assert_same(
        "values-prod.yaml",
        template(home.path(), "tandem-system", &["-f", prod]).unwrap(),
        kustomize(&manifests.join("prod")),
    );
    let dev = checkout.path().join("values-dev.yaml");
    std::fs::write(&dev, "replicas: 1\nlogLevel: info,tandem=debug\n").unwrap();
    assert_same(
        "one replica and debug logs",
        template(home.path(), "tandem-system", &["-f", dev.to_str().unwrap()]).unwrap(),
        kustomize(&manifests.join("dev")),
    );

    let certs = manifests.join("without-cert-manager/certs");
    tandem_certs(&certs, &[]);
    let provided = provided_certificate(&certs);
    let provided: Vec<&str> = provided.iter().map(String::as_str).collect();
    let chart_objects = template(home.path(), "tandem-system", &provided).unwrap();
    let ca_key = std::fs::read_to_string(certs.join("ca.key")).unwrap();
    let b64 =
        |bytes: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
    let all = serde_json::to_string(&chart_objects).unwrap();
    assert!(
        !all.contains(ca_key.trim()) && !all.contains(&b64(ca_key.as_bytes())),
        "the CA's key is in the chart's objects"
    );
    assert_same(
        "the certificate provided",
        chart_objects,
        kustomize(&manifests.join("without-cert-manager")),
    );

    let monitored = checkout.path().join("monitored");
    std::fs::create_dir(&monitored).unwrap();
    std::fs::write(
        monitored.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources: [../manifests/prod]\ncomponents: [../manifests/monitoring]\n",
    )
    .unwrap();
    assert_same(
        "prod with the ServiceMonitor and the PrometheusRule",
        template(
            home.path(),
            "tandem-system",
            &[
                "-f",
                prod,
                "--set",
                "metrics.serviceMonitor.enabled=true",
                "--set",
                "metrics.prometheusRule.enabled=true",
                "--set",
                "metrics.grafanaDashboard.enabled=true",
            ],
        )
        .unwrap(),
        kustomize(&monitored),
    );

    let overlay = manifests.join("in-namespace");
    let kustomization = overlay.join("kustomization.yaml");
    let text = std::fs::read_to_string(&kustomization).unwrap();
    std::fs::write(
        &kustomization,
        text.replace("\nnamespace: tandem-ops\n", "\nnamespace: inference-ops\n"),
    )
    .unwrap();
    let moved = template(home.path(), "inference-ops", &[]).unwrap();
    assert!(
        !serde_json::to_string(&moved)
            .unwrap()
            .contains("tandem-system")
    );
    for object in moved
        .iter()
        .filter(|o| !CLUSTER_SCOPED.contains(&o["kind"].as_str().unwrap_or_default()))
    {
        assert_eq!(object["metadata"]["namespace"], "inference-ops");
    }
    assert_same("in another namespace", moved, kustomize(&overlay));
}

/// What the chart's values cannot say is refused by `helm install` and
/// `helm template`, naming the value: a misspelled key or a wrong type
/// (values.schema.json), a provided certificate without its files, and the
/// kubelet's port on the nodes' network. The values that are accepted
/// take effect: the webhook port everywhere it is named, the nodes'
/// network with one replica per node, extra labels for Prometheus.
pub(crate) fn values_the_chart_cannot_use_are_refused_with_their_path() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED values_the_chart_cannot_use: {reason}");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let refused = |args: &[&str], says: &[&str]| {
        let error = template(home.path(), "tandem-system", args)
            .err()
            .unwrap_or_else(|| panic!("{args:?} was accepted"));
        for part in says {
            assert!(error.contains(part), "{args:?}: {error}");
        }
    };
    refused(
        &["--set", "certificate.sorce=provided"],
        &["/certificate", "'sorce' not allowed"],
    );
    refused(
        &["--set", "certificate.source=vault"],
        &["/certificate/source", "cert-manager", "provided"],
    );
    refused(&["--set", "replicas=0"], &["/replicas", "minimum"]);
    refused(&["--set", "logFormat=xml"], &["/logFormat"]);
    refused(
        &["--set", "webhook.port=70000"],
        &["/webhook/port", "maximum"],
    );
    refused(
        &["--set", "certificate.source=provided"],
        &[
            "certificate.provided.caCert: required when certificate.source is provided",
            "tandem certs --namespace tandem-system",
        ],
    );
    refused(
        &["--set", "webhook.hostNetwork=true"],
        &["webhook.port: 10250 is the kubelet's port"],
    );

    let objects = template(
        home.path(),
        "tandem-system",
        &[
            "--set",
            "webhook.hostNetwork=true",
            "--set",
            "webhook.port=10260",
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.labels.release=kube-prometheus-stack",
        ],
    )
    .unwrap();
    let find = |name: &str| {
        objects
            .iter()
            .find(|o| kind_and_name(o) == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let pod = &find("Deployment tandem")["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
            == "kubernetes.io/hostname",
        "{}",
        pod["affinity"]
    );
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--listen", "0.0.0.0:10260"]),
        "{args:?}"
    );
    assert_eq!(container["ports"][0]["containerPort"], 10260);
    assert_eq!(
        find("NetworkPolicy tandem")["spec"]["ingress"][0]["ports"][0]["port"],
        10260
    );
    assert_eq!(
        find("ServiceMonitor tandem")["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
}

/// Deletes `object` as the admin and waits until it is gone.
async fn delete_and_wait(admin: &kube::Client, object: &Value) {
    let api = control_plane::api_for(admin, object).await;
    let name = object["metadata"]["name"].as_str().unwrap();
    match api.delete(name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => panic!("deleting {}: {e}", kind_and_name(object)),
    }
    wait_gone(admin, object, "is not gone").await;
}

/// Waits until `object` is gone; after a minute, panics saying it `still`.
async fn wait_gone(admin: &kube::Client, object: &Value, still: &str) {
    let api = control_plane::api_for(admin, object).await;
    let name = object["metadata"]["name"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get_opt(name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "{} {still}",
            kind_and_name(object)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The chart installed as a user installs it, without cert-manager (the
/// tests' cluster has none): `tandem certs` for the namespace, then
/// `helm install --create-namespace` with the files. Helm installs the
/// CRDs from `crds/` and the API server stores every object; the webhooks
/// are registered and fail closed (no pod runs here to answer them).
/// `helm upgrade` to the prod values applies. Then `helm uninstall`
/// removes every object of the release and leaves the CRDs, as
/// docs/install.md says.
pub(crate) async fn helm_installs_upgrades_and_uninstalls_the_chart_on_a_real_control_plane_keeping_the_crds()
 {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED helm_installs_the_chart: {reason}");
        return;
    }
    let plane = ControlPlane::own(PLANE);
    let admin = plane.admin().await.expect("an admin client");

    // The control plane starts with Tandem's CRDs, RBAC and pod-patch
    // policy applied by hand (tests/harness/src/control_plane.rs); Helm will not
    // take over objects it did not make, so they go first. No Tandem
    // object exists in this plane.
    let crds: Vec<Value> = std::fs::read_dir(chart().join("crds"))
        .unwrap()
        .flat_map(|entry| harness::yaml_documents(&entry.unwrap().path()))
        .collect();
    assert_eq!(crds.len(), 3);
    let preinstalled = [
        "manifests/base/rbac.yaml",
        "manifests/base/pod-patches.yaml",
    ]
    .into_iter()
    .flat_map(|file| harness::yaml_documents(&harness::repo_path(file)))
    .filter(|o| CLUSTER_SCOPED.contains(&o["kind"].as_str().unwrap_or_default()))
    .chain(crds.iter().cloned());
    for object in preinstalled {
        delete_and_wait(&admin, &object).await;
    }

    const NS: &str = "inference-ops";
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("kubeconfig");
    std::fs::write(&kubeconfig, plane.admin_kubeconfig()).unwrap();
    let certs = home.path().join("certs");
    tandem_certs(&certs, &["--namespace", NS]);
    let helm = |args: &[&str], extra: &[String]| {
        let output = harness::modules::helm(home.path())
            .args(args)
            .args(extra)
            .args(["--namespace", NS, "--kubeconfig"])
            .arg(&kubeconfig)
            .output()
            .expect("helm runs");
        assert!(
            output.status.success(),
            "helm {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let said = helm(
        &[
            "install",
            "tandem",
            chart().to_str().unwrap(),
            "--create-namespace",
        ],
        &provided_certificate(&certs),
    );
    assert!(said.contains("STATUS: deployed"), "{said}");
    assert!(said.contains(&format!("tandem check -n {NS}")), "{said}");

    for crd in &crds {
        control_plane::wait_established(&admin, crd["metadata"]["name"].as_str().unwrap()).await;
    }
    let released = harness::modules::yaml_stream(&helm(&["get", "manifest", "tandem"], &[]));
    let provided = provided_certificate(&certs);
    let provided: Vec<&str> = provided.iter().map(String::as_str).collect();
    let rendered = template(home.path(), NS, &provided).unwrap();
    let names = |objects: &[Value]| {
        let mut names: Vec<String> = objects.iter().map(kind_and_name).collect();
        names.sort();
        names
    };
    assert_eq!(names(&released), names(&rendered), "what Helm installed");
    for object in &released {
        let api = control_plane::api_for(&admin, object).await;
        let stored = api
            .get(object["metadata"]["name"].as_str().unwrap())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", kind_and_name(object)));
        assert_eq!(
            stored.metadata.annotations.unwrap_or_default()["meta.helm.sh/release-name"],
            "tandem",
            "{}",
            kind_and_name(object)
        );
    }

    // The webhooks are the API server's now: an InferenceService is sent to
    // tandem-webhook in the release's namespace, and refused while nothing
    // answers there (the validating webhooks fail closed).
    let client = plane.namespace("helm-user").await;
    let mut service =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story1-monolithic.yaml"))
            .remove(0);
    service["metadata"]["namespace"] = json!("helm-user");
    let api = control_plane::api_for(&client, &service).await;
    let refused = api
        .create(
            &Default::default(),
            &serde_json::from_value(service.clone()).unwrap(),
        )
        .await
        .expect_err("no webhook answers");
    let refused = refused.to_string();
    assert!(
        refused.contains("failed calling webhook \"validate.inferenceservices.fusioninfer.io\"")
            && refused.contains(&format!("tandem-webhook.{NS}.svc")),
        "{refused}"
    );

    // `helm upgrade` to the prod values (the CRDs are this chart's already):
    // JSON logs, the image from a registry and the NetworkPolicy, and
    // nothing the API server refuses (a Deployment's selector cannot change).
    let prod = chart().join("values-prod.yaml");
    helm(
        &[
            "upgrade",
            "tandem",
            chart().to_str().unwrap(),
            "--reuse-values",
            "-f",
            prod.to_str().unwrap(),
        ],
        &[],
    );
    let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                        "metadata": {"name": "tandem", "namespace": NS}});
    control_plane::api_for(&admin, &policy)
        .await
        .get("tandem")
        .await
        .expect("the prod values' NetworkPolicy");
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "tandem", "namespace": NS}});
    let deployment = control_plane::api_for(&admin, &deployment)
        .await
        .get("tandem")
        .await
        .unwrap();
    let container =
        &serde_json::to_value(deployment).unwrap()["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["env"][0],
        json!({"name": "TANDEM_LOG_FORMAT", "value": "json"})
    );
    assert_eq!(
        container["image"],
        "registry.example.com/platform/tandem:0.1.0"
    );
    let released = harness::modules::yaml_stream(&helm(&["get", "manifest", "tandem"], &[]));

    let said = helm(&["uninstall", "tandem"], &[]);
    assert!(said.contains("uninstalled"), "{said}");
    for object in &released {
        wait_gone(&admin, object, "outlived helm uninstall").await;
    }
    for crd in &crds {
        control_plane::wait_established(&admin, crd["metadata"]["name"].as_str().unwrap()).await;
    }
}
