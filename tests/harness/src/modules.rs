//! What the tests take from Go modules pinned in `tests/cluster/`: the
//! binaries `tests/cluster/build.sh` builds (the control plane, kustomize,
//! Helm) and the documents of modules in Go's module cache (the Prometheus
//! operator's and KEDA's CRDs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The objects `kubectl apply -k DIR` would send: DIR built by
/// kustomize's krusty, as kubectl embeds it (`tests/cluster/kustomize`).
pub fn kustomize(dir: &Path) -> Result<Vec<Value>, String> {
    let output = Command::new(binaries().join("kustomize"))
        .arg(dir)
        .output()
        .map_err(|e| format!("running kustomize: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(yaml_stream(&String::from_utf8_lossy(&output.stdout)))
}

/// Helm's command, built from its module (`tests/cluster/helm`), with its
/// cache, configuration and data in `home` (a user's would be in theirs).
pub fn helm(home: &Path) -> Command {
    let mut command = Command::new(binaries().join("helm"));
    for (variable, dir) in [
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_DATA_HOME", "data"),
    ] {
        command.env(variable, home.join(dir));
    }
    command
}

/// The objects of a stream of YAML documents, as kustomize and Helm print
/// them (empty documents left out).
pub fn yaml_stream(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(text)
        .map(|document| Value::deserialize(document).expect("a YAML document"))
        .filter(|object| !object.is_null())
        .collect()
}

/// The binaries `tests/cluster/build.sh` builds (the control plane,
/// kustomize, Helm), built or found in its cache once per test binary.
pub fn binaries() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build)
}

fn build() -> PathBuf {
    built_by("tests/cluster/build.sh")
}

/// Where the Go module cache holds `module` as the Go module at `in_dir` (a
/// path in the repository) requires it.
pub fn go_module_dir(in_dir: &str, module: &str) -> PathBuf {
    let output = Command::new("go")
        .args(["list", "-m", "-f", "{{.Dir}}", module])
        .current_dir(super::repo_path(in_dir))
        .output()
        .expect("go list runs");
    assert!(
        output.status.success(),
        "go list -m {module} in {in_dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// Runs the build script `script` (a path in the repository), which builds
/// or finds in its cache what it builds, and prints the directory of the
/// binaries: that directory.
pub fn built_by(script: &str) -> PathBuf {
    let output = Command::new("bash")
        .arg(super::repo_path(script))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{script} does not run: {e}"));
    assert!(
        output.status.success(),
        "{script} failed ({}); run it by hand to see why",
        output.status
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// Where the Go module cache holds the LeaderWorkerSet module the manager
/// is built from (its webhook configurations and DisaggregatedSet CRD are
/// read from there, as released).
pub fn lws_module_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| go_module_dir("tests/cluster", "sigs.k8s.io/lws"))
        .clone()
}

/// The Prometheus Operator's release whose CRDs (ServiceMonitor,
/// PrometheusRule) the tests check `manifests/monitoring/` against, taken
/// from its Go module (its `example/prometheus-operator-crd/`), and the
/// module's checksum as the Go checksum database records it: the files are
/// upstream's, unchanged, and not copied into this repository.
pub const PROMETHEUS_OPERATOR: (&str, &str, &str) = (
    "github.com/prometheus-operator/prometheus-operator",
    "v0.85.0",
    "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s=",
);

/// The Prometheus Operator's CRD of `plural` (`servicemonitors`,
/// `prometheusrules`, `podmonitors`), from [`PROMETHEUS_OPERATOR`]'s module.
pub fn prometheus_operator_crd(plural: &str) -> Value {
    module_document(
        PROMETHEUS_OPERATOR,
        &format!("example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml"),
    )
}

/// The first document of the file at `path` in the Go module `pin`
/// (module, version, checksum): `go mod download` fetches the module
/// through the proxy the first time, and finds it in the module cache
/// after that.
fn module_document((module, version, sum): (&str, &str, &str), path: &str) -> Value {
    let dir = super::upstream::download(module, version, sum).unwrap_or_else(|e| panic!("{e}"));
    super::yaml_documents(&dir.join(path)).remove(0)
}

/// KEDA's release whose CRDs (ScaledObject, TriggerAuthentication) the
/// tests check `examples/autoscaling/` against, taken from its Go module's
/// `config/crd/bases/`, and the module's checksum as the Go checksum
/// database records it: upstream's files, not copied into this repository.
pub const KEDA: (&str, &str, &str) = (
    "github.com/kedacore/keda/v2",
    "v2.21.0",
    "h1:R6z2HZvstK4RLUMxroNACzBj74xGxt3kG59b5Xc+Xps=",
);

/// KEDA's CRD of `plural` (`scaledobjects`, `triggerauthentications`),
/// from [`KEDA`]'s module.
pub fn keda_crd(plural: &str) -> Value {
    module_document(KEDA, &format!("config/crd/bases/keda.sh_{plural}.yaml"))
}
