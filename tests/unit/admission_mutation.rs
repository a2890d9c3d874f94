//! The mutating webhook on the objects users write: every Tandem object of
//! `examples/` as a CREATE, and updates of a service whose roles a ScaleView
//! locks. The patch (base64 JSON Patch on the wire) applies to the object and
//! mutating the result again patches nothing.

use harness::{apply_wire_patch, repo_path, review, yaml_documents};
use serde_json::{Value, json};
use tandem::admission::http::{self, Reply, Webhook};
use tandem::admission::lookup::Blind;
use tandem::admission::{DEFAULT_SERVICE_ACCOUNT, Kind, Lookup};
use tandem::fuzzing::example_lookup;

/// The AdmissionReview response of `webhook` to `body`.
fn respond(webhook: Webhook, kind: Kind, body: &Value, lookup: &dyn Lookup) -> (String, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let answer = http::answer(
        webhook,
        kind.plural(),
        &bytes,
        lookup,
        DEFAULT_SERVICE_ACCOUNT,
    );
    match answer.body {
        Reply::Review(mut review) => (answer.verdict.to_owned(), review["response"].take()),
        Reply::Text(text) => panic!("{kind}: HTTP {} {text}", answer.status),
    }
}

/// Mutates `object` (as `operation`, over `old`), applies the patch, checks
/// that the result validates and that mutating it again patches nothing.
/// Returns the mutated object.
fn mutate_to_a_fixed_point(
    what: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    lookup: &dyn Lookup,
) -> Value {
    let kind = Kind::of(
        object["apiVersion"].as_str().unwrap(),
        object["kind"].as_str().unwrap(),
    )
    .unwrap();
    let (verdict, response) = respond(
        Webhook::Mutate,
        kind,
        &review(operation, object, old),
        lookup,
    );
    let mutated = match verdict.as_str() {
        "patched" => apply_wire_patch(object, &response),
        "allowed" => {
            assert!(response.get("patch").is_none(), "{what}: {response}");
            object.clone()
        }
        other => panic!("{what}: mutation {other}: {response}"),
    };
    let (verdict, response) = respond(
        Webhook::Mutate,
        kind,
        &review(operation, &mutated, old),
        lookup,
    );
    assert_eq!(
        verdict, "allowed",
        "{what}: mutating the mutated object patches again: {response}"
    );
    assert!(response.get("patch").is_none(), "{what}: {response}");
    mutated
}

fn tandem_objects() -> Vec<(String, Value)> {
    let mut objects = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(repo_path("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            for object in yaml_documents(&file) {
                let (Some(api_version), Some(kind)) =
                    (object["apiVersion"].as_str(), object["kind"].as_str())
                else {
                    continue;
                };
                if Kind::of(api_version, kind).is_some() {
                    let name = format!(
                        "{} {kind} {}",
                        file.strip_prefix(repo_path("")).unwrap().display(),
                        object["metadata"]["name"]
                    );
                    objects.push((name, object));
                }
            }
        }
    }
    objects
}

#[test]
fn every_example_mutates_to_a_fixed_point() {
    let objects = tandem_objects();
    let mut patched = 0;
    for kind in Kind::ALL {
        assert!(
            objects.iter().any(|(_, o)| o["kind"] == kind.name()),
            "the examples have a {kind}"
        );
    }
    let lookups: [(&str, &dyn Lookup); 2] = [("blind", &Blind), ("examples", example_lookup())];
    for (name, object) in &objects {
        for (seen, lookup) in lookups {
            let what = format!("{name} ({seen})");
            let mutated = mutate_to_a_fixed_point(&what, "CREATE", object, None, lookup);
            if mutated != *object {
                patched += 1;
            }
        }
    }
    assert!(patched > 0, "some example leaves a default out");
}

/// The spot service as `render` leaves it: the ScaleView's lock in its
/// status.
fn locked_service() -> Value {
    let rendered = tandem::render::render(
        yaml_documents(&repo_path("examples/scaleview/decode-ondemand-spot.yaml")),
        &Default::default(),
    )
    .unwrap();
    let service = rendered
        .apply
        .into_iter()
        .find(|o| o["kind"] == "InferenceService")
        .unwrap();
    assert!(
        !service["status"]["scaleViews"]
            .as_array()
            .unwrap()
            .is_empty(),
        "render locks the roles"
    );
    service
}

#[test]
fn updates_of_a_service_with_locked_roles_mutate_to_a_fixed_point() {
    let stored = locked_service();
    let locked: Vec<String> = stored["status"]["scaleViews"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|lock| lock["roleReplicas"].as_array().unwrap().iter())
        .map(|r| r["role"].as_str().unwrap().to_owned())
        .collect();
    let roles = stored["spec"]["roles"].as_array().unwrap();
    let locked_index = roles
        .iter()
        .position(|r| locked.iter().any(|l| r["name"] == l.as_str()))
        .unwrap();

    // The locked role's replicas changed (the validating webhook refuses
    // that; mutation still only fills defaults).
    let mut scaled = stored.clone();
    scaled["spec"]["roles"][locked_index]["replicas"] = json!(7);
    // The defaults taken out again, as `kubectl apply` of the user's file
    // would send them.
    let mut bare = stored.clone();
    for role in bare["spec"]["roles"].as_array_mut().unwrap() {
        let role = role.as_object_mut().unwrap();
        role.remove("scaleDown");
        if !locked.iter().any(|l| role["name"] == l.as_str()) {
            role.remove("replicas");
        }
    }
    bare["spec"]
        .as_object_mut()
        .unwrap()
        .remove("upgradeStrategy");
    // An unlocked role's template changed.
    let mut edited = stored.clone();
    let unlocked_index = roles
        .iter()
        .position(|r| !locked.iter().any(|l| r["name"] == l.as_str()));
    if let Some(i) = unlocked_index {
        edited["spec"]["roles"][i]["template"]["metadata"] = json!({"labels": {"edited": "yes"}});
    }

    let lookups: [(&str, &dyn Lookup); 2] = [("blind", &Blind), ("examples", example_lookup())];
    for (change, object) in [("scaled", &scaled), ("bare", &bare), ("edited", &edited)] {
        for (seen, lookup) in lookups {
            let what = format!("update {change} ({seen})");
            let mutated = mutate_to_a_fixed_point(&what, "UPDATE", object, Some(&stored), lookup);
            if change == "bare" {
                assert_eq!(
                    mutated["spec"], stored["spec"],
                    "{what}: the defaults come back"
                );
            }
            let (verdict, response) = respond(
                Webhook::Validate,
                Kind::InferenceService,
                &review("UPDATE", &mutated, Some(&stored)),
                lookup,
            );
            let expected = if change == "scaled" {
                "denied"
            } else {
                "allowed"
            };
            assert_eq!(verdict, expected, "{what}: {response}");
        }
    }
}
