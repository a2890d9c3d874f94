//! The bodies of Tandem's fuzz targets (the `fuzz/` crate, run with
//! cargo-fuzz). They live in the main crate so that an ordinary test
//! (`tests/unit/fuzz_corpus.rs`) runs the committed corpora through exactly the
//! code libFuzzer runs, on every CI run, with or without libFuzzer.
//!
//! Each function takes the fuzzer's bytes, drives what the binary does with
//! such bytes (the webhook's body-to-reply function, `tandem render`), and
//! checks what must hold for any input. A broken promise panics, which
//! libFuzzer reports as a crash; so does any panic of the code under test.
//!
//! The promises:
//! - admission: every body gets HTTP 200 with an AdmissionReview that echoes
//!   the request's uid, or a 400 saying why it is not one; a denial carries a
//!   400, 409 or 422 status with a message; a patch is base64 JSON Patch that
//!   applies to the request's object, and defaulting what it produces
//!   changes nothing more. Each body goes to both webhooks of its kind, once
//!   with no view of a cluster and once seeing the objects of `examples/`
//!   (so the checks against a ScaleView's target, the locks, the strict
//!   range of `/scale` and the namespace-wide DAG run too).
//! - render: any text gets an error or a result; a result writes as YAML and
//!   JSON, and rendering the same world twice gives the same result. Worlds
//!   whose Tandem objects ask for more than [`RENDER_REPLICA_LIMIT`] replicas
//!   but no more than the admitted limit (`api::limits::MAX_VIEW_REPLICAS`) are
//!   only parsed: render makes one LeaderWorkerSet per replica, as asked, so
//!   such a world is slow by design, not a crash. Numbers past the limits
//!   (`i32::MAX`, `i64::MAX`, negative) are rendered: admission denies them,
//!   or, in objects Tandem does not own (a Source's replicas, a child's
//!   generation, a pod's deletion cost), the plans must take them. Only a
//!   large Source that could drive an InferenceService or ScaleView (whose
//!   replicas become LeaderWorkerSets) is skipped, for the same reason.

use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Value, json};

use crate::admission::http::{self, Answer, Reply, Webhook};
use crate::admission::lookup::{Blind, Objects};
use crate::admission::{DEFAULT_SERVICE_ACCOUNT, Kind, Lookup};
use crate::render;

/// A fuzz target's body: what it does with the fuzzer's bytes.
pub type Body = fn(&[u8]);

/// Every fuzz target by the name of its `fuzz/fuzz_targets/` file and its
/// corpus directories (`fuzz/seeds/NAME`, `fuzz/corpus/NAME`).
pub const TARGETS: [(&str, Body); 4] = [
    ("admission_inference_service", |data| {
        admission(Kind::InferenceService, data)
    }),
    ("admission_scale_view", |data| {
        admission(Kind::ScaleView, data)
    }),
    ("admission_resource_scaling_group", |data| {
        admission(Kind::ResourceScalingGroup, data)
    }),
    ("render", render),
];

/// The example worlds admission sees in the second round: the objects
/// that the seed corpora's reviews name.
const EXAMPLES: [(&str, &str); 4] = [
    (
        "examples/scaleview/decode-ondemand-spot.yaml",
        include_str!("../examples/scaleview/decode-ondemand-spot.yaml"),
    ),
    (
        "examples/scaleview/decode-two-zones.yaml",
        include_str!("../examples/scaleview/decode-two-zones.yaml"),
    ),
    (
        "examples/resourcescalinggroup/prefill-decode-ratio.yaml",
        include_str!("../examples/resourcescalinggroup/prefill-decode-ratio.yaml"),
    ),
    (
        "examples/resourcescalinggroup/inplace-scaling.yaml",
        include_str!("../examples/resourcescalinggroup/inplace-scaling.yaml"),
    ),
];

/// What admission can look up in the second round: the objects of
/// [`EXAMPLES`], in the namespace each names or `default`, and the
/// ResourceScalingGroups again in `ai` (the namespace of the seed's
/// InplaceScaling example).
pub fn example_lookup() -> &'static Objects {
    static LOOKUP: OnceLock<Objects> = OnceLock::new();
    LOOKUP.get_or_init(|| {
        let mut objects = Vec::new();
        for (name, text) in EXAMPLES {
            // The examples are parsed by tests (tests/unit/stories.rs,
            // tests/unit/cli.rs); a broken one is a bug in the repository, and
            // the fuzz targets must not run against a smaller world than
            // they say.
            let parsed = render::parse_world(name, text, "default")
                .unwrap_or_else(|e| panic!("an example does not parse: {e}"));
            for object in parsed {
                if object["kind"] == "ResourceScalingGroup" {
                    let mut in_ai = object.clone();
                    in_ai["metadata"]["namespace"] = json!("ai");
                    objects.push(in_ai);
                }
                objects.push(object);
            }
        }
        Objects::new(&objects)
    })
}

/// One admission request body, as sent to `/mutate/{kind}` and
/// `/validate/{kind}`.
pub fn admission(kind: Kind, data: &[u8]) {
    let lookups: [&dyn Lookup; 2] = [&Blind, example_lookup()];
    for lookup in lookups {
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            let answer = http::answer(
                webhook,
                kind.plural(),
                data,
                lookup,
                DEFAULT_SERVICE_ACCOUNT,
            );
            check_answer(webhook, kind, data, &answer, lookup);
        }
    }
}

fn check_answer(webhook: Webhook, kind: Kind, data: &[u8], answer: &Answer, lookup: &dyn Lookup) {
    let review = match (&answer.body, answer.status.as_u16()) {
        (Reply::Text(reason), 400) => {
            assert!(!reason.is_empty(), "a 400 says why");
            assert_eq!(answer.verdict, "invalid", "a 400 is counted as invalid");
            return;
        }
        (Reply::Review(review), 200) => review,
        (body, status) => panic!("{webhook:?} {kind}: HTTP {status} with {body:?}"),
    };
    // A 200 means the body parsed as an AdmissionReview with a request.
    let request: Value = serde_json::from_slice(data)
        .unwrap_or_else(|e| panic!("answered 200 to a body that is not JSON: {e}"));
    let request = &request["request"];
    assert_eq!(review["apiVersion"], http::REVIEW_API_VERSION);
    assert_eq!(review["kind"], "AdmissionReview");
    let response = &review["response"];
    assert_eq!(
        response["uid"], request["uid"],
        "the request's uid is echoed"
    );
    let allowed = response["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("response.allowed is a boolean: {response}"));
    match answer.verdict {
        "allowed" => {
            assert!(allowed);
            assert!(response.get("patch").is_none(), "allowed without a patch");
        }
        "patched" => {
            assert!(allowed);
            assert_eq!(
                webhook,
                Webhook::Mutate,
                "only the mutating webhook patches"
            );
            check_patch(kind, request, response, lookup);
        }
        "denied" => {
            assert!(!allowed);
            let code = response["status"]["code"].as_u64();
            assert!(
                matches!(code, Some(400 | 409 | 422 | 500)),
                "a denial has a status code: {response}"
            );
            let message = response["status"]["message"].as_str().unwrap_or_default();
            assert!(!message.is_empty(), "a denial says why: {response}");
        }
        other => panic!("verdict {other:?} with HTTP 200"),
    }
}

/// The patch applies to the request's object, and the mutating webhook has
/// nothing more to add to what it produced.
fn check_patch(kind: Kind, request: &Value, response: &Value, lookup: &dyn Lookup) {
    assert_eq!(response["patchType"], "JSONPatch");
    let encoded = response["patch"].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap_or_else(|e| panic!("the patch is not base64: {e}"));
    let patch: json_patch::Patch = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("the patch is not a JSON Patch: {e}"));
    let mut object = request["object"].clone();
    json_patch::patch(&mut object, &patch)
        .unwrap_or_else(|e| panic!("the patch does not apply to the object: {e}"));
    let mut again = json!({"apiVersion": http::REVIEW_API_VERSION, "kind": "AdmissionReview",
        "request": request.clone()});
    again["request"]["object"] = object;
    let bytes = serde_json::to_vec(&again).unwrap_or_default();
    let second = http::answer(
        Webhook::Mutate,
        kind.plural(),
        &bytes,
        lookup,
        DEFAULT_SERVICE_ACCOUNT,
    );
    assert_eq!(
        second.verdict, "allowed",
        "defaulting a defaulted {kind} changes nothing, got {:?}",
        second.body
    );
}

/// The most replicas (of anything: a role, a ScaleView) that the render
/// target renders.
pub const RENDER_REPLICA_LIMIT: f64 = 1000.0;

/// Whether some `replicas` in `value` is above [`RENDER_REPLICA_LIMIT`] and
/// at most `ceiling`.
fn replicas_between(value: &Value, ceiling: f64) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(key, value)| {
            (key == "replicas"
                && value
                    .as_f64()
                    .is_some_and(|n| n > RENDER_REPLICA_LIMIT && n <= ceiling))
                || replicas_between(value, ceiling)
        }),
        Value::Array(items) => items.iter().any(|item| replicas_between(item, ceiling)),
        _ => false,
    }
}

/// A ResourceScalingGroup that may scale an InferenceService or a ScaleView.
fn scales_tandem_objects(object: &Value) -> bool {
    object["kind"] == "ResourceScalingGroup"
        && object["spec"]["targetResources"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| {
                let kind = t["kind"]
                    .as_str()
                    .or_else(|| t["targetRef"]["kind"].as_str());
                matches!(kind, Some("InferenceService" | "ScaleView"))
            })
}

fn asks_for_many_replicas(world: &[Value]) -> bool {
    let is_tandem = |o: &Value| {
        Kind::of(
            o["apiVersion"].as_str().unwrap_or_default(),
            o["kind"].as_str().unwrap_or_default(),
        )
        .is_some()
    };
    // The largest replicas any Tandem object may be admitted with (a
    // ScaleView's total); above it, admission denies before any plan runs.
    let admitted = f64::from(crate::api::limits::MAX_VIEW_REPLICAS);
    let drives_tandem = world.iter().any(scales_tandem_objects);
    world.iter().any(|o| {
        if is_tandem(o) {
            replicas_between(o, admitted)
        } else {
            drives_tandem && replicas_between(o, f64::INFINITY)
        }
    })
}

/// One `tandem render` input, as if read from a file.
pub fn render(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        // `render` reads files as UTF-8 and says so when they are not.
        return;
    };
    let world = match render::parse_world("fuzz", text, "default") {
        Ok(world) => world,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    if asks_for_many_replicas(&world) {
        return;
    }
    let options = render::Options::default();
    let first = render::render(world.clone(), &options);
    let second = render::render(world, &options);
    match (first, second) {
        (Ok(first), Ok(second)) => {
            assert_eq!(first, second, "the same world renders the same way");
            for format in [render::Format::Yaml, render::Format::Json] {
                if let Err(e) = first.write(format) {
                    panic!("a render result does not write as {format:?}: {e}");
                }
            }
        }
        (Err(first), Err(second)) => {
            assert_eq!(first.to_string(), second.to_string());
            if let render::RenderError::Denied(denials) = &first {
                assert!(!denials.is_empty(), "a denial names what was denied");
            }
        }
        (first, second) => panic!("the same world rendered as {first:?} and then {second:?}"),
    }
}
