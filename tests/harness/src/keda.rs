//! KEDA's operator, run for real: built from its released Go module
//! (`tests/cluster/build-keda.sh`, pinned by [`super::modules::KEDA`]) and
//! started as a process on a control plane, watching one namespace, with
//! every CRD of the release installed. It scales a ScaledObject's target
//! between `idleReplicaCount` and `minReplicaCount` by itself, through the
//! target's `/scale`; above that it hands over to the HPA it makes, whose
//! External metrics would come from KEDA's metrics server, which is not run
//! here (so the HPA reads none, and changes nothing).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::certificates::Authority;
use super::control_plane::ControlPlane;
use super::free_port;
use super::modules::KEDA;
use super::supervision::Supervised;

/// The operator's binary, built once per test process (and cached between
/// runs by the script).
pub fn operator_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let (_, version, sum) = KEDA;
            let output = Command::new("bash")
                .arg(super::repo_path("tests/cluster/build-keda.sh"))
                .args([version, sum])
                .stderr(Stdio::inherit())
                .output()
                .unwrap_or_else(|e| panic!("build-keda.sh does not run: {e}"));
            assert!(
                output.status.success(),
                "tests/cluster/build-keda.sh failed ({}); run it by hand to see why",
                output.status
            );
            PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()).join("keda-operator")
        })
        .clone()
}

/// Every CRD of KEDA's release (the operator's controllers watch each
/// kind, and do not start without them), applied and established.
pub async fn install_crds(plane: &ControlPlane) {
    let (module, version, sum) = KEDA;
    let dir = super::upstream::download(module, version, sum).unwrap_or_else(|e| panic!("{e}"));
    let admin = plane.admin().await.expect("an admin client");
    let bases = dir.join("config/crd/bases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&bases)
        .expect("KEDA's CRDs")
        .map(|entry| entry.expect("an entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        for crd in super::yaml_documents(&file) {
            super::control_plane::apply(&admin, &crd).await;
            let name = crd["metadata"]["name"].as_str().expect("a CRD name");
            super::control_plane::wait_established(&admin, name).await;
        }
    }
}

/// Starts the operator on `plane`, watching only `namespace` (other
/// scenarios store ScaledObjects they do not run), as the cluster's admin.
/// Its gRPC metrics service gets a certificate of a CA of its own (nothing
/// calls it here); every port is a free loopback one, since the custom
/// metrics test adapter holds KEDA's default metrics port, 8080. Ended when
/// the value is dropped.
pub fn start(plane: &ControlPlane, namespace: &str) -> Supervised {
    let dir = plane.dir.join(format!("keda-{namespace}"));
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("KEDA's directory");
    let authority = Authority::named("keda-test-ca");
    let serving = authority.serving(&["localhost", "127.0.0.1"]);
    for (file, text) in [
        ("ca.crt", authority.pem()),
        ("tls.crt", serving.cert_pem),
        ("tls.key", serving.key_pem),
    ] {
        std::fs::write(certs.join(file), text).expect("a certificate");
    }
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, plane.admin_kubeconfig()).expect("KEDA's kubeconfig");
    let loopback = |port: u16| format!("127.0.0.1:{port}");
    let args = vec![
        format!("--metrics-bind-address={}", loopback(free_port())),
        format!("--health-probe-bind-address={}", loopback(free_port())),
        format!("--metrics-service-bind-address={}", loopback(free_port())),
        format!("--cert-dir={}", certs.display()),
        "--enable-webhook-patching=false".to_owned(),
        "--enable-apiservice-patching=false".to_owned(),
        "--zap-log-level=info".to_owned(),
    ];
    let env = [
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("WATCH_NAMESPACE", namespace.to_owned()),
        ("POD_NAMESPACE", namespace.to_owned()),
        ("KEDA_CLUSTER_OBJECT_NAMESPACE", namespace.to_owned()),
    ];
    Supervised::start(
        &format!("keda-{namespace}"),
        &dir,
        &operator_binary(),
        &args,
        &env,
    )
}
