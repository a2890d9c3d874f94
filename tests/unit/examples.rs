//! Every example says, in its header, what `tandem render` makes of it: a line
//! `# Rendered by `tandem render ARGS`` and below it one line per change
//! (`#   created Kind name`, `changed`, `deleted`), per admission warning
//! (`#   warning: ...`), or `#   nothing`. This test runs exactly that command
//! on the built binary and holds its `-o json` output to the list, in order,
//! so an example's documented outcome cannot drift from what Tandem does.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const MARK: &str = "# Rendered by `tandem render ";

/// The examples, every `.yaml` under `examples/`, sorted.
fn examples() -> Vec<PathBuf> {
    let mut found = Vec::new();
    for folder in std::fs::read_dir(harness::repo_path("examples")).unwrap() {
        let folder = folder.unwrap().path();
        for file in std::fs::read_dir(&folder).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "yaml") {
                found.push(file);
            }
        }
    }
    found.sort();
    assert!(found.len() >= 20, "{found:?}");
    found
}

/// The command's arguments and the documented lines of an example's header.
fn documented(path: &Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines().skip_while(|l| !l.starts_with(MARK));
    let command = lines.next().unwrap_or_else(|| {
        panic!(
            "{} has no line starting {MARK:?}: say what render makes of it",
            path.display()
        )
    });
    let args = command[MARK.len()..]
        .split('`')
        .next()
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let outcome = lines
        .map_while(|l| l.strip_prefix("#   "))
        .map(str::to_owned)
        .collect();
    (args, outcome)
}

fn render(args: &[String]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .arg("render")
        .args(args)
        .args(["-o", "json"])
        .current_dir(harness::repo_path("."))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "tandem render {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn every_example_renders_as_its_header_says() {
    let mut failures = Vec::new();
    for path in examples() {
        let (args, expected) = documented(&path);
        let rendered = render(&args);
        let mut actual: Vec<String> = rendered["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{} {} {}",
                    c["action"].as_str().unwrap(),
                    c["kind"].as_str().unwrap(),
                    c["name"].as_str().unwrap()
                )
            })
            .collect();
        if actual.is_empty() {
            actual.push("nothing".to_owned());
        }
        actual.extend(
            rendered["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| format!("warning: {}", w.as_str().unwrap())),
        );
        if actual != expected {
            failures.push(format!(
                "{}: `tandem render {}`\n  documented: {expected:#?}\n  rendered:   {actual:#?}",
                path.display(),
                args.join(" ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Every example renders alone, as written, with exit status 0: no `-n`,
/// no other file (a ScaleView without its target, a group without its
/// world, render only warns). What the header's command adds is what the
/// example needs to show its outcome, never what it needs to be valid.
#[test]
fn every_example_renders_alone_as_written() {
    let mut failures = Vec::new();
    for path in examples() {
        let output = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["render", "-f"])
            .arg(&path)
            .current_dir(harness::repo_path("."))
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        if !output.status.success() {
            failures.push(format!(
                "{}: exit {:?}: {}",
                path.display(),
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every image an example would run names a release: a tag other than
/// `latest`, or a digest. Pods in render worlds are stored objects that
/// stand for what runs (their image is never pulled), so they are left out.
#[test]
fn every_example_image_is_a_pinned_release() {
    fn images<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
        match value {
            Value::Object(fields) => {
                for (key, field) in fields {
                    match (key.as_str(), field) {
                        ("image", Value::String(image)) => found.push(image),
                        _ => images(field, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| images(item, found)),
            _ => {}
        }
    }
    let mut failures = Vec::new();
    for path in examples() {
        for object in harness::yaml_documents(&path) {
            if object["kind"] == "Pod" {
                continue;
            }
            let mut found = Vec::new();
            images(&object, &mut found);
            for image in found {
                let name = image.rsplit('/').next().unwrap_or(image);
                let pinned = image.contains("@sha256:")
                    || name.split_once(':').is_some_and(|(_, tag)| tag != "latest");
                if !pinned {
                    failures.push(format!("{}: {image}", path.display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "not a pinned release: {failures:#?}");
}

/// docs/inferenceservice.md: the binpack example's drained replicas are
/// deleted by a render after their deadline, with the drained pods in the
/// world, and the Event names the costs it beat.
#[test]
fn the_binpack_example_deletes_what_it_drained_once_the_drain_is_over() {
    let path = harness::repo_path("examples/render/binpack-scale-down.yaml");
    let world = harness::yaml_documents(&path);
    let first = render(&[
        "-f".to_owned(),
        path.display().to_string(),
        "--now".to_owned(),
        "2026-11-21T10:00:00Z".to_owned(),
    ]);
    let applied: Vec<&Value> = first["apply"].as_array().unwrap().iter().collect();
    let next: Vec<Value> = world
        .iter()
        .map(|object| {
            applied
                .iter()
                .find(|a| {
                    a["kind"] == object["kind"]
                        && a["metadata"]["name"] == object["metadata"]["name"]
                })
                .map_or_else(|| object.clone(), |a| (*a).clone())
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let after = dir.path().join("after.json");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": next});
    std::fs::write(&after, serde_json::to_vec(&list).unwrap()).unwrap();
    let second = render(&[
        "-f".to_owned(),
        after.display().to_string(),
        "--now".to_owned(),
        "2026-11-21T10:00:31Z".to_owned(),
    ]);
    let deleted: Vec<(&str, &str)> = second["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["action"] == "deleted")
        .map(|c| (c["name"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        deleted.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        ["qwen-binpack-decode-1", "qwen-binpack-decode-2"]
    );
    assert!(
        deleted[1]
            .1
            .contains("Binpack removes replica 2 (cost 0) before the replicas it keeps: 0 (cost 100), 3 (cost 75)"),
        "{}",
        deleted[1].1
    );
}

/// The model servers' health endpoints that say the model is loaded: vLLM's
/// and SGLang's `/health`; llm-d's inference simulator's `/health/ready`
/// (its `/health` is 200 from the start).
const HEALTH_PATHS: [&str; 2] = ["/health", "/health/ready"];

/// Every example's model servers (a container of each serving role of an
/// InferenceService) have a readiness probe and a startup probe of the
/// server's health endpoint on one of its ports, so Ready means the model
/// is loaded, and no header shows the readiness warning.
#[test]
fn every_example_model_server_is_probed_until_its_model_is_loaded() {
    let mut failures = Vec::new();
    for path in examples() {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let (_, outcome) = documented(&path);
        let warned = outcome.iter().any(|l| {
            l.starts_with("warning: ") && l.contains(".readinessProbe: no container of role ")
        });
        if warned {
            failures.push(format!("{file}: warned about a missing readiness probe"));
        }
        for service in harness::yaml_documents(&path)
            .into_iter()
            .filter(|o| o["kind"] == "InferenceService")
        {
            for role in service["spec"]["roles"].as_array().unwrap() {
                if role["componentType"] == "router" {
                    continue;
                }
                // The model server: the container with the probes (a
                // routing sidecar may come first and take the pool's port).
                let containers = role["template"]["spec"]["containers"].as_array().unwrap();
                let probed = containers.iter().any(|server| {
                    let ports: Vec<i64> = server["ports"]
                        .as_array()
                        .map(|p| {
                            p.iter()
                                .filter_map(|p| p["containerPort"].as_i64())
                                .collect()
                        })
                        .unwrap_or_else(|| vec![8000]);
                    ["readinessProbe", "startupProbe"].iter().all(|probe| {
                        let get = &server[*probe]["httpGet"];
                        get["path"]
                            .as_str()
                            .is_some_and(|path| HEALTH_PATHS.contains(&path))
                            && get["port"].as_i64().is_some_and(|p| ports.contains(&p))
                    })
                });
                if !probed {
                    failures.push(format!(
                        "{file}: role {}: no container has readiness and startup probes of its health endpoint on its own port",
                        role["name"]
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
