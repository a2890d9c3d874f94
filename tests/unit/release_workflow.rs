//! The release workflow (`.github/workflows/release.yml`): actionlint,
//! built from its Go module at the version `tests/cluster/actionlint/go.mod`
//! pins, finds nothing in it (and does find a misspelled input, so it is
//! checking), and the workflow does what a release must: the image for
//! both architectures pushed, the chart pushed as an OCI artifact pointing
//! at that image, the static binaries and their checksums attached. No
//! workflow ran here: GitHub Actions, GHCR and QEMU are not on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::control_plane;
use serde_json::Value;

const WORKFLOW: &str = ".github/workflows/release.yml";

/// actionlint, built once per test binary into the target's temporary
/// directory (Go's build cache makes a rebuild cheap).
fn actionlint() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("actionlint");
    let status = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg("github.com/rhysd/actionlint/cmd/actionlint")
        .env("GOFLAGS", "-mod=readonly")
        .current_dir(harness::repo_path("tests/cluster/actionlint"))
        .status()
        .expect("go build runs");
    assert!(status.success(), "building actionlint: {status}");
    out
}

/// actionlint's findings on the workflows of `repo` (its exit status and
/// what it printed).
fn lint(binary: &Path, repo: &Path) -> (bool, String) {
    let output = Command::new(binary)
        .args(["-no-color", WORKFLOW])
        .current_dir(repo)
        .output()
        .expect("actionlint runs");
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), said)
}

fn workflow() -> Value {
    let text = std::fs::read_to_string(harness::repo_path(WORKFLOW)).expect("the workflow");
    serde_norway::from_str(&text).expect("the workflow is YAML")
}

/// The steps of job `job`.
fn steps<'a>(workflow: &'a Value, job: &str) -> &'a [Value] {
    workflow["jobs"][job]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("job {job} has steps"))
}

fn step<'a>(workflow: &'a Value, job: &str, uses: &str) -> &'a Value {
    steps(workflow, job)
        .iter()
        .find(|s| s["uses"].as_str().is_some_and(|u| u.starts_with(uses)))
        .unwrap_or_else(|| panic!("job {job} uses no {uses}"))
}

fn scripts(workflow: &Value, job: &str) -> String {
    steps(workflow, job)
        .iter()
        .filter_map(|s| s["run"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_release_workflow_passes_actionlint_which_finds_a_misspelled_input() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED the_release_workflow_passes_actionlint: {reason}");
        return;
    }
    let binary = actionlint();
    let (clean, said) = lint(&binary, &harness::repo_path("."));
    assert!(clean && said.trim().is_empty(), "actionlint:\n{said}");

    // The same workflow with `platforms` misspelled: actionlint knows the
    // inputs of docker/build-push-action, so it must say so.
    let text = std::fs::read_to_string(harness::repo_path(WORKFLOW)).unwrap();
    let broken = text.replacen("          platforms: ", "          platform: ", 1);
    assert_ne!(broken, text, "the workflow sets platforms");
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join(".github/workflows")).unwrap();
    std::fs::write(repo.path().join(WORKFLOW), broken).unwrap();
    let (clean, said) = lint(&binary, repo.path());
    assert!(
        !clean && said.contains(r#"input "platform" is not defined"#),
        "actionlint on a misspelled input:\n{said}"
    );
}

#[test]
fn a_tag_releases_the_image_for_both_architectures_the_chart_and_the_binaries() {
    let workflow = workflow();
    assert!(
        workflow["on"]["push"]["tags"].is_array(),
        "released on a tag: {}",
        workflow["on"]
    );

    let build = &step(&workflow, "image", "docker/build-push-action")["with"];
    let platforms = build["platforms"].as_str().unwrap_or_default();
    for platform in ["linux/amd64", "linux/arm64"] {
        assert!(platforms.contains(platform), "{platform} in {platforms}");
    }
    assert_eq!(build["push"], true);
    assert!(
        workflow["env"]["IMAGE"]
            .as_str()
            .is_some_and(|i| i.starts_with("ghcr.io/")),
        "{}",
        workflow["env"]
    );

    // The binaries come out of the image that was pushed, by its digest.
    let image = scripts(&workflow, "image");
    for needed in [
        "$IMAGE@$DIGEST",
        "/usr/local/bin/tandem",
        "sha256sum tandem-* > SHA256SUMS",
    ] {
        assert!(image.contains(needed), "{needed} in:\n{image}");
    }
    let dockerfile = std::fs::read_to_string(harness::repo_path("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("COPY --from=builder /tandem /usr/local/bin/tandem"),
        "the image keeps the binary where the workflow takes it from"
    );
    let files = step(&workflow, "image", "softprops/action-gh-release")["with"]["files"]
        .as_str()
        .unwrap_or_default();
    assert!(
        files.contains("dist/tandem-*") && files.contains("dist/SHA256SUMS"),
        "{files}"
    );

    // The chart: packaged at the tag's version, pointing at the image just
    // pushed, and pushed to an OCI registry.
    let chart = scripts(&workflow, "chart");
    for needed in [
        "helm package charts/tandem --version \"$VERSION\" --app-version \"$VERSION\"",
        "helm push",
        "repository: $IMAGE",
    ] {
        assert!(chart.contains(needed), "{needed} in:\n{chart}");
    }
    assert!(
        workflow["env"]["CHART_REPOSITORY"]
            .as_str()
            .is_some_and(|r| r.starts_with("oci://ghcr.io/")),
        "{}",
        workflow["env"]
    );
    // What the chart job rewrites is the chart's image repository line.
    let values = std::fs::read_to_string(harness::repo_path("charts/tandem/values.yaml")).unwrap();
    assert!(values.contains("\n  repository: tandem\n"), "values.yaml");
}
