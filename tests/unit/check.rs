//! `tandem check -f`: the upstream CRDs Tandem is tested with pass, and a
//! folder of only Volcano v1.13's PodGroup CRD fails, naming what is
//! missing and what is absent.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn check(args: &[&Path], extra: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tandem"));
    command.arg("check");
    for path in args {
        command.arg("-f").arg(path);
    }
    command.args(extra).output().expect("tandem check runs")
}

/// The CRD files of the upstream folder (not its `older/` subfolder).
fn upstream_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the upstream CRDs")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_upstream_crds_tandem_is_tested_with_pass() {
    let Some(dir) = harness::upstream_crds("the_upstream_crds_tandem_is_tested_with_pass") else {
        return;
    };
    let files = upstream_files(&dir);
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let output = check(&paths, &[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert_eq!(text.matches("[ok  ]").count(), 5, "{text}");
    assert!(text.contains("subGroupPolicy present"), "{text}");
    assert!(
        text.contains("Tandem can deploy InferenceServices here."),
        "{text}"
    );

    // The folder itself, as `-f DIR` reads it (its .yaml files, not older/).
    let folder = check(&[dir.as_path()], &[]);
    assert_eq!(
        folder.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&folder.stdout)
    );
    assert_eq!(
        folder.stdout, output.stdout,
        "the folder reads as its files"
    );

    let output = check(&paths, &["-o", "json"]);
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(answer["ready"], true);
    assert_eq!(answer["checks"][1]["fields"]["subGroupPolicy"], true);
    assert_eq!(answer["checks"][3]["found"][2], "bundle v1.6.1");
}

#[test]
fn only_volcano_1_13_fails_naming_leader_worker_set_missing_and_sub_groups_absent() {
    let Some(dir) = harness::upstream_crds("only_volcano_1_13_fails") else {
        return;
    };
    let older = dir.join("older/scheduling.volcano.sh_podgroups.v1.13.yaml");
    let output = check(&[&older], &[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "[FAIL] LeaderWorkerSet (leaderworkerset.x-k8s.io/v1 LeaderWorkerSet): not installed"
        ),
        "{text}"
    );
    assert!(text.contains("subGroupPolicy absent"), "{text}");
    assert!(text.contains("to do: install Volcano v1.15.1"), "{text}");
}

#[test]
fn a_file_that_cannot_be_read_exits_2_naming_it() {
    let output = check(&[Path::new("/no/such/crds.yaml")], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/no/such/crds.yaml"));
}

/// With only LeaderWorkerSet installed, Tandem can deploy services, and the
/// verdict names what it cannot deploy as asked: gang-scheduled services,
/// router roles, routed upgrades (each once), in text and in JSON.
#[test]
fn the_verdict_names_what_the_missing_optional_dependencies_rule_out() {
    let Some(dir) = harness::upstream_crds("the_verdict_names_what") else {
        return;
    };
    let lws = dir.join("leaderworkerset.x-k8s.io_leaderworkersets.yaml");
    let output = check(&[&lws], &[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.ends_with(
            "Tandem can deploy InferenceServices here, except gang-scheduled services (no Volcano PodGroup); router roles (no InferencePool); NewRevision and IncrementalUpgrade (no Gateway API).\n"
        ),
        "{text}"
    );
    let output = check(&[&lws], &["-o", "json"]);
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(answer["ready"], true);
    assert_eq!(
        answer["except"].as_array().map(Vec::len),
        Some(3),
        "{answer}"
    );
}

/// A folder of other objects says that it holds no CRD (exit 2), on stderr,
/// or under `-o json` as JSON on stdout.
#[test]
fn a_folder_without_crds_says_so_in_text_and_in_json() {
    let examples = harness::repo_path("examples/inferenceservice");
    let output = check(&[&examples], &[]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.starts_with("error: no CustomResourceDefinition in "),
        "{said}"
    );
    assert!(output.stdout.is_empty());
    let output = check(&[&examples], &["-o", "json"]);
    assert_eq!(output.status.code(), Some(2));
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(answer["ready"], false);
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("no CustomResourceDefinition in ")),
        "{answer}"
    );
}

/// A cluster that does not answer: the error names its address and the
/// cause under kube's message (the refused connection).
#[test]
fn an_unreachable_cluster_is_named_with_its_address_and_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n\
         current-context: c\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["check", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .expect("tandem check runs");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains("the cluster at https://127.0.0.1:1/"),
        "{said}"
    );
    assert!(said.contains("Connection refused"), "{said}");
}

/// What Tandem tells a user to install (check's "to do", the webhook's
/// denials and warnings, `DependencyMissing`) names the release that
/// docs/compatibility.md's table says was tested, and that getting-started's
/// install commands install: never a minimum nobody ran.
#[test]
fn every_install_hint_names_the_release_the_docs_test_and_install() {
    use tandem::plan::shared::installed::{
        GATEWAY, HTTP_ROUTE, INFERENCE_POOL, LEADER_WORKER_SET, POD_GROUP,
    };
    let compatibility =
        std::fs::read_to_string(harness::repo_path("docs/compatibility.md")).expect("the doc");
    let started =
        std::fs::read_to_string(harness::repo_path("docs/getting-started.md")).expect("the doc");
    for (dependency, row, download) in [
        (
            LEADER_WORKER_SET,
            "| LeaderWorkerSet | CRD and manager ",
            "lws/releases/download/",
        ),
        (POD_GROUP, "| Volcano | ", "volcano/"),
        (
            INFERENCE_POOL,
            "| Inference Extension | ",
            "gateway-api-inference-extension/releases/download/",
        ),
        (
            GATEWAY,
            "| Gateway API | ",
            "gateway-api/releases/download/",
        ),
        (
            HTTP_ROUTE,
            "| Gateway API | ",
            "gateway-api/releases/download/",
        ),
    ] {
        let release = dependency
            .install
            .split_whitespace()
            .find(|word| {
                word.starts_with('v') && word[1..].starts_with(|c: char| c.is_ascii_digit())
            })
            .unwrap_or_else(|| {
                panic!(
                    "{}: no release in {:?}",
                    dependency.name, dependency.install
                )
            })
            .trim_end_matches(',');
        assert!(
            !dependency.install.contains(">="),
            "{}: a minimum, not the tested release: {}",
            dependency.name,
            dependency.install
        );
        assert!(
            compatibility
                .lines()
                .any(|l| l.starts_with(row) && l.contains(release)),
            "{}: {release} is not in a row {row:?} of docs/compatibility.md",
            dependency.name
        );
        assert!(
            started.contains(&format!("{download}{release}")),
            "{}: getting-started does not install {download}{release}",
            dependency.name
        );
    }
}
