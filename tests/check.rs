//! `tandem check -f`: the upstream CRDs Tandem is tested with pass, and a
//! folder of only Volcano v1.13's PodGroup CRD fails, naming what is
//! missing and what is absent.

mod common;

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
    let Some(dir) = common::upstream_crds("the_upstream_crds_tandem_is_tested_with_pass") else {
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
    let Some(dir) = common::upstream_crds("only_volcano_1_13_fails") else {
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
    assert!(text.contains("to do: install Volcano >= v1.14"), "{text}");
}

#[test]
fn a_file_that_cannot_be_read_exits_2_naming_it() {
    let output = check(&[Path::new("/no/such/crds.yaml")], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/no/such/crds.yaml"));
}
