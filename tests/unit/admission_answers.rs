//! The admission webhook's answers to every committed fuzz input, recorded.
//!
//! Each input of `fuzz/seeds/` and `fuzz/corpus/` of the three admission
//! targets goes to both webhooks of its kind, once with no view of a cluster
//! and once seeing the objects of `examples/` (as the fuzz targets send it,
//! `tandem::fuzzing::admission`). What comes back (HTTP status, metrics
//! labels, the whole reply, and for a patch the object it produces) must be
//! what `tests/fixtures/admission_answers/TARGET.jsonl` recorded: a change
//! of any answer fails here, naming the input.
//!
//! The patch itself is not recorded as sent: two patches that make the same
//! object are the same answer. What is recorded is the object the patch
//! makes, as the JSON Patch `json_patch::diff` computes from the request's
//! object to it (one canonical form of that object, much smaller than the
//! object).
//!
//! `TANDEM_RECORD_ANSWERS=1 cargo test --test unit admission_answers::` rewrites the
//! records: only on purpose, when an answer is meant to change (say why in the
//! commit).

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use harness::repo_path;
use serde_json::{Value, json};
use tandem::admission::http::{self, Answer, Reply, Webhook};
use tandem::admission::lookup::Blind;
use tandem::admission::{DEFAULT_SERVICE_ACCOUNT, Kind, Lookup};
use tandem::fuzzing::example_lookup;

const RECORD_ENV: &str = "TANDEM_RECORD_ANSWERS";

const TARGETS: [(&str, Kind); 3] = [
    ("admission_inference_service", Kind::InferenceService),
    ("admission_scale_view", Kind::ScaleView),
    (
        "admission_resource_scaling_group",
        Kind::ResourceScalingGroup,
    ),
];

/// The committed inputs of a target, by `DIR/FILE` (`seeds/...`, `corpus/...`).
fn inputs(target: &str) -> BTreeMap<String, Vec<u8>> {
    let mut inputs = BTreeMap::new();
    for dir in ["seeds", "corpus"] {
        let Ok(entries) = std::fs::read_dir(repo_path(&format!("fuzz/{dir}/{target}"))) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                inputs.insert(format!("{dir}/{name}"), std::fs::read(&path).unwrap());
            }
        }
    }
    inputs
}

/// One answer as recorded: the reply with its patch replaced by the object
/// the patch makes (as a diff from the request's object).
fn record(answer: &Answer, body: &[u8]) -> Value {
    let reply = match &answer.body {
        Reply::Text(text) => json!({"text": text}),
        Reply::Review(review) => {
            let mut review = review.clone();
            if let Some(encoded) = review["response"]
                .as_object_mut()
                .and_then(|r| r.remove("patch"))
            {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(encoded.as_str().unwrap())
                    .unwrap();
                let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
                let request: Value = serde_json::from_slice(body).unwrap();
                let original = &request["request"]["object"];
                let mut patched = original.clone();
                json_patch::patch(&mut patched, &patch).unwrap();
                review["response"]["patched"] =
                    serde_json::to_value(json_patch::diff(original, &patched)).unwrap();
            }
            json!({"review": review})
        }
    };
    json!({
        "status": answer.status.as_u16(),
        "kind": answer.kind,
        "operation": answer.operation,
        "verdict": answer.verdict,
        "reply": reply,
    })
}

/// The four answers to one input: mutate and validate, blind and seeing the
/// examples.
fn answers(kind: Kind, body: &[u8]) -> Value {
    let lookups: [(&str, &dyn Lookup); 2] = [("blind", &Blind), ("examples", example_lookup())];
    let mut out = serde_json::Map::new();
    for (seen, lookup) in lookups {
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            let answer = http::answer(
                webhook,
                kind.plural(),
                body,
                lookup,
                DEFAULT_SERVICE_ACCOUNT,
            );
            let name = match webhook {
                Webhook::Mutate => "mutate",
                Webhook::Validate => "validate",
            };
            out.insert(format!("{name}/{seen}"), record(&answer, body));
        }
    }
    Value::Object(out)
}

/// The records file: one line per input, `{"input": ..., "answers": ...}`.
fn read_records(path: &Path) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; record it with {RECORD_ENV}=1 cargo test --test unit admission_answers::",
            path.display()
        )
    });
    text.lines()
        .map(|line| {
            let mut entry: Value = serde_json::from_str(line).unwrap();
            let input = entry["input"].as_str().unwrap().to_owned();
            (input, entry["answers"].take())
        })
        .collect()
}

fn write_records(path: &Path, records: &BTreeMap<String, Value>) {
    let mut text = String::new();
    for (input, answers) in records {
        text.push_str(
            &serde_json::to_string(&json!({"input": input, "answers": answers})).unwrap(),
        );
        text.push('\n');
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn every_committed_admission_input_gets_its_recorded_answer() {
    let record_now = std::env::var_os(RECORD_ENV).is_some();
    let mut compared = 0;
    let mut differences = Vec::new();
    for (target, kind) in TARGETS {
        let path = repo_path(&format!("tests/fixtures/admission_answers/{target}.jsonl"));
        let current: BTreeMap<String, Value> = inputs(target)
            .iter()
            .map(|(name, body)| (name.clone(), answers(kind, body)))
            .collect();
        assert!(!current.is_empty(), "{target} has committed inputs");
        if record_now {
            write_records(&path, &current);
        }
        let recorded = read_records(&path);
        for (input, answers) in &current {
            compared += 1;
            match recorded.get(input) {
                None => differences.push(format!("{target}/{input}: no recorded answer")),
                Some(expected) if expected != answers => {
                    let expected = expected.as_object().unwrap();
                    for (run, got) in answers.as_object().unwrap() {
                        if expected.get(run) != Some(got) {
                            differences.push(format!(
                                "{target}/{input} ({run}):\n  recorded {}\n  now      {got}",
                                expected.get(run).unwrap_or(&Value::Null)
                            ));
                        }
                    }
                }
                Some(_) => {}
            }
        }
        for input in recorded.keys().filter(|i| !current.contains_key(*i)) {
            differences.push(format!(
                "{target}/{input}: recorded, but no longer a committed input"
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} answers to the {compared} inputs differ from the recorded ones (rerun with {RECORD_ENV}=1 only if the change is meant):\n{}",
        differences.len(),
        differences
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!("{compared} committed admission inputs answered as recorded");
}

/// Whether the fast path leaves a validation to the reference path by
/// design: an update whose spec may be unchanged (allowed whatever the spec
/// says, `admission::spec_unchanged`), and every update of a
/// ResourceScalingGroup (the fast path does not read the stored spec).
fn left_to_reference(kind: Kind, body: &[u8]) -> bool {
    let Ok(review) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let request = &review["request"];
    let update = !request["oldObject"].is_null();
    update
        && (kind == Kind::ResourceScalingGroup
            || request["object"]["spec"] == request["oldObject"]["spec"])
}

/// The fast path (the review read once into typed values, the patch built
/// from the defaults) and the reference path (`Value`, then
/// `AdmissionReview<DynamicObject>`, the patch a diff of the object) give the
/// same answer to every input the fast path serves, and it serves what the
/// API server sends for the examples.
#[test]
fn the_fast_path_answers_as_the_reference_path() {
    let lookups: [(&str, &dyn Lookup); 2] = [("blind", &Blind), ("examples", example_lookup())];
    for (target, kind) in TARGETS {
        let mut served = 0;
        let inputs = inputs(target);
        for (input, body) in &inputs {
            for (seen, lookup) in lookups {
                for webhook in [Webhook::Mutate, Webhook::Validate] {
                    let reference = http::reference_answer(
                        webhook,
                        kind,
                        body,
                        lookup,
                        DEFAULT_SERVICE_ACCOUNT,
                    );
                    let fast =
                        http::fast_answer(webhook, kind, body, lookup, DEFAULT_SERVICE_ACCOUNT);
                    let should_be_fast = input.starts_with("seeds/")
                        && (input.contains("create-")
                            || input.contains("update-")
                            || input.contains("scale-"))
                        && !input.contains("unparseable")
                        && !input.contains("wrong-endpoint")
                        && !(input.contains("scale-") && webhook == Webhook::Mutate)
                        // Numbers at the ends of their types may read
                        // differently when typed: the reference path answers.
                        && !input.contains("-extreme")
                        && !(webhook == Webhook::Validate && left_to_reference(kind, body));
                    let Some(fast) = fast else {
                        assert!(
                            !should_be_fast,
                            "{target}/{input} ({webhook:?}, {seen}) takes the reference path"
                        );
                        continue;
                    };
                    served += 1;
                    assert_eq!(
                        record(&fast, body),
                        record(&reference, body),
                        "{target}/{input} ({webhook:?}, {seen})"
                    );
                }
            }
        }
        eprintln!(
            "{target}: the fast path served {served} of {} answers",
            inputs.len() * 4
        );
        assert!(served > 0, "{target}: the fast path served nothing");
    }
}

/// An unknown field that nests as deep as serde_json allows, or one level
/// deeper, gets the same answer from both paths (the ScaleView endpoint
/// reads its object apart from the body, where serde_json would allow it
/// two levels more).
#[test]
fn deeply_nested_objects_get_the_same_answer_from_both_paths() {
    let lookups: [&dyn Lookup; 2] = [&Blind, example_lookup()];
    for (target, kind) in TARGETS {
        for (input, body) in inputs(target)
            .into_iter()
            .filter(|(name, _)| name.starts_with("seeds/create-"))
        {
            let review: Value = serde_json::from_slice(&body).unwrap();
            for levels in 120..=127 {
                let mut deep = review.clone();
                let nested: Value =
                    serde_json::from_str(&format!("{}{}", "[".repeat(levels), "]".repeat(levels)))
                        .unwrap_or(Value::Null);
                deep["request"]["object"]["extra"] = nested;
                let Ok(text) = serde_json::to_vec(&deep) else {
                    continue;
                };
                for lookup in lookups {
                    for webhook in [Webhook::Mutate, Webhook::Validate] {
                        let reference = http::reference_answer(
                            webhook,
                            kind,
                            &text,
                            lookup,
                            DEFAULT_SERVICE_ACCOUNT,
                        );
                        if let Some(fast) =
                            http::fast_answer(webhook, kind, &text, lookup, DEFAULT_SERVICE_ACCOUNT)
                        {
                            assert_eq!(
                                record(&fast, &text),
                                record(&reference, &text),
                                "{target}/{input} with {levels} levels ({webhook:?})"
                            );
                        }
                    }
                }
            }
        }
    }
}
