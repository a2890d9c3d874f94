//! What the install tests share: a user's checkout to change and build,
//! and the names of the objects an install makes.

use serde_json::Value;

/// A user's checkout: manifests/ and the webhooks/ it includes, in a
/// temporary folder the test may change.
pub fn user_checkout() -> tempfile::TempDir {
    let checkout = tempfile::tempdir().unwrap();
    copy_tree(
        &super::repo_path("manifests"),
        &checkout.path().join("manifests"),
    );
    copy_tree(
        &super::repo_path("webhooks"),
        &checkout.path().join("webhooks"),
    );
    checkout
}

/// Copies `from` into `to`, recursively.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
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

/// `Kind name` of an object, for messages and comparisons.
pub fn kind_and_name(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The kinds of Tandem's install that belong to no namespace.
pub const CLUSTER_SCOPED: [&str; 8] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// Runs `tandem certs ARGS --out-dir DIR`, as a user installing without
/// cert-manager does, and panics with its error if it fails.
pub fn tandem_certs(dir: &std::path::Path, args: &[&str]) {
    let written = std::process::Command::new(crate::tandem_binary())
        .arg("certs")
        .args(args)
        .arg("--out-dir")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        written.status.success(),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
}
