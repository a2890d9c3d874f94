//! What one admission decision costs: defaults and validation of each kind,
//! without the transport. `cargo bench --bench admission`.
//!
//! - `admit/*`: mutation then validation of an object already read into a
//!   `Value` (`tandem::admission::admit`, what `tandem render` runs);
//! - `webhook/*`: what the webhook does with a request body, both webhooks
//!   in turn (`/mutate/...` then `/validate/...` of the same CREATE review,
//!   as the API server sends them): read the review, decide, write the
//!   reply (`tandem::admission::http::answer`);
//! - `webhook_reference/*`: the same through the reference path
//!   (`http::reference_answer`: the body read into a `Value`, then into
//!   kube-rs's `AdmissionReview<DynamicObject>`, the patch a diff of the
//!   object), which the webhook took for every request before the fast path;
//! - `parse_only/*`: what the parse-only baseline of `benches/admission_load.rs`
//!   does with the same body, twice (read it as kube-rs's
//!   `AdmissionReview<DynamicObject>`, answer allowed for its uid): the least
//!   any webhook does, for the ratio without the transport;
//! - `installed/*`: the story-4 InferenceService admitted (`admit`, both
//!   webhooks' decisions) by a lookup that knows nothing is installed
//!   (`assumed`), and by one that holds the real CRDs of LWS, Volcano's
//!   PodGroup, Gateway API and InferencePool, taken from their Go modules
//!   (`upstream_crds`): what those CRDs cost each admission (issue 51's
//!   goal: ≤ 1.1×). Criterion measures the two one after the other, and on
//!   this machine the baseline moved by half between runs; so the group
//!   also prints the ratio measured interleaved ([`interleaved_ratio`]):
//!   rounds of both lookups in turn, the order alternating, the median
//!   round's ratio.

use criterion::{Criterion, criterion_group, criterion_main};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::Value;
use std::hint::black_box;
use std::sync::Arc;
use tandem::admission::http::{self, Webhook};
use tandem::admission::lookup::Lookup;
use tandem::admission::{self, Kind};
use tandem::api::resource_scaling_group::ResourceScalingGroupSpec;
use tandem::api::{Findings, InferenceService, ScaleView};
use tandem::plan::shared::installed::Installed;

fn example(path: &str, index: usize, namespace: &str) -> Value {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&full).expect("example exists");
    tandem::render::parse_world(path, &text, namespace)
        .expect("example parses")
        .remove(index)
}

fn admission(c: &mut Criterion) {
    let cases = [
        (
            "inferenceservice_pd_multinode",
            Kind::InferenceService,
            example(
                "examples/seeds/story4-prefill-decode-multinode.yaml",
                0,
                "default",
            ),
            "default",
        ),
        (
            "inferenceservice_router",
            Kind::InferenceService,
            example("examples/inferenceservice/router.yaml", 0, "default"),
            "default",
        ),
        (
            "scaleview",
            Kind::ScaleView,
            example("examples/scaleview/decode-ondemand-spot.yaml", 1, "default"),
            "default",
        ),
        (
            "resourcescalinggroup_inplace",
            Kind::ResourceScalingGroup,
            example(
                "examples/resourcescalinggroup/inplace-scaling.yaml",
                0,
                "ai",
            ),
            "ai",
        ),
    ];
    let mut group = c.benchmark_group("admit");
    for (name, kind, object, namespace) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| {
                admission::admit(
                    *kind,
                    namespace,
                    black_box(object),
                    None,
                    &admission::lookup::Blind,
                )
            })
        });
    }
    group.finish();

    for (group_name, reference) in [("webhook", false), ("webhook_reference", true)] {
        let mut group = c.benchmark_group(group_name);
        for (name, kind, object, namespace) in &cases {
            let body = serde_json::to_vec(&review(*kind, object, namespace)).expect("review");
            let answer = if reference {
                |webhook, kind, body: &[u8]| {
                    http::reference_answer(
                        webhook,
                        kind,
                        body,
                        &admission::lookup::Blind,
                        admission::DEFAULT_SERVICE_ACCOUNT,
                    )
                }
            } else {
                |webhook, kind: Kind, body: &[u8]| {
                    http::answer(
                        webhook,
                        kind.plural(),
                        body,
                        &admission::lookup::Blind,
                        admission::DEFAULT_SERVICE_ACCOUNT,
                    )
                }
            };
            for webhook in [Webhook::Mutate, Webhook::Validate] {
                let answer = answer(webhook, *kind, &body);
                assert_eq!(answer.status, 200, "{name}: {:?}", answer.body);
                assert_ne!(answer.verdict, "denied", "{name}: {:?}", answer.body);
            }
            group.bench_function(*name, |b| {
                b.iter(|| {
                    (
                        answer(Webhook::Mutate, *kind, black_box(&body)),
                        answer(Webhook::Validate, *kind, black_box(&body)),
                    )
                })
            });
        }
        group.finish();
    }

    // What consulting the namespace's stored ResourceScalingGroups (the
    // DAG check on the lookup's follow index) adds to the validating
    // webhook's answer: the same RSG CREATE, blind, beside one stored group
    // and beside a chain of 1 000 (which the candidate does not touch).
    let (_, _, group_object, namespace) = &cases[3];
    let body = serde_json::to_vec(&review(Kind::ResourceScalingGroup, group_object, namespace))
        .expect("review");
    let stored = |i: usize| {
        serde_json::json!({
            "apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
            "metadata": {"name": format!("chain-{i:04}"), "namespace": namespace},
            "spec": {"targetResources": [
                {"name": format!("step-{i:04}"), "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": format!("step-{:04}", i + 1), "apiVersion": "apps/v1", "kind": "Deployment"}],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": format!("step-{i:04}"), "role": "Source"},
                {"name": format!("step-{:04}", i + 1), "role": "Target", "ratio": 2.0}]}}}
        })
    };
    let one_stored = admission::lookup::Objects::new([&stored(0)]);
    let chain: Vec<serde_json::Value> = (0..1_000).map(stored).collect();
    let thousand_stored = admission::lookup::Objects::new(&chain);
    assert_eq!(thousand_stored.follows().groups(namespace), 1_000);
    let mut group = c.benchmark_group("webhook_validate_rsg");
    for (name, lookup) in [
        ("blind", &admission::lookup::Blind as &dyn admission::Lookup),
        ("beside_1_stored", &one_stored),
        ("beside_1000_stored", &thousand_stored),
    ] {
        let answer = || {
            http::answer(
                Webhook::Validate,
                Kind::ResourceScalingGroup.plural(),
                black_box(&body),
                lookup,
                admission::DEFAULT_SERVICE_ACCOUNT,
            )
        };
        assert_eq!(answer().verdict, "allowed", "{name}: {:?}", answer().body);
        group.bench_function(name, |b| b.iter(answer));
    }
    group.finish();

    // Story 4's two webhooks apart, and the parse-only baseline for one
    // request: where the validating answer's time goes beyond reading.
    let (_, _, story, namespace) = &cases[0];
    let body =
        serde_json::to_vec(&review(Kind::InferenceService, story, namespace)).expect("review");
    let mut group = c.benchmark_group("story4_one_request");
    for (name, webhook) in [("mutate", Webhook::Mutate), ("validate", Webhook::Validate)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                http::answer(
                    webhook,
                    Kind::InferenceService.plural(),
                    black_box(&body),
                    &admission::lookup::Blind,
                    admission::DEFAULT_SERVICE_ACCOUNT,
                )
            })
        });
    }
    group.bench_function("parse_only", |b| {
        b.iter(|| {
            let review: AdmissionReview<DynamicObject> =
                serde_json::from_slice(black_box(&body)).expect("a review");
            let request: AdmissionRequest<DynamicObject> = review.try_into().expect("a request");
            serde_json::to_vec(&AdmissionResponse::from(&request).into_review()).expect("a reply")
        })
    });
    group.finish();

    let mut group = c.benchmark_group("parse_only");
    for (name, kind, object, namespace) in &cases {
        let body = serde_json::to_vec(&review(*kind, object, namespace)).expect("review");
        let parse_only = |body: &[u8]| -> Option<Vec<u8>> {
            let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).ok()?;
            let request: AdmissionRequest<DynamicObject> = review.try_into().ok()?;
            serde_json::to_vec(&AdmissionResponse::from(&request).into_review()).ok()
        };
        assert!(parse_only(&body).is_some(), "{name}");
        group.bench_function(*name, |b| {
            b.iter(|| (parse_only(black_box(&body)), parse_only(black_box(&body))))
        });
    }
    group.finish();
}

/// A CREATE review of `object` as the API server sends it.
fn review(kind: Kind, object: &Value, namespace: &str) -> Value {
    let (group, version) = kind
        .api_version()
        .split_once('/')
        .map(|(g, v)| (g.to_owned(), v.to_owned()))
        .expect("Tandem's kinds have a group");
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": version, "kind": kind.name()},
            "resource": {"group": group, "version": version, "resource": kind.plural()},
            "requestKind": {"group": group, "version": version, "kind": kind.name()},
            "requestResource": {"group": group, "version": version, "resource": kind.plural()},
            "name": object["metadata"]["name"],
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "admin", "uid": "014fbff9a07c", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// A lookup that knows what is installed and nothing else (as `Blind`
/// otherwise).
struct InstalledOnly(Arc<Installed>);

impl Lookup for InstalledOnly {
    fn inference_service(&self, _: &str, _: &str) -> Option<Option<InferenceService>> {
        None
    }
    fn scale_views(&self, _: &str) -> Option<Vec<ScaleView>> {
        None
    }
    fn check_follows(&self, _: &str, _: (&str, &ResourceScalingGroupSpec)) -> Option<Findings> {
        None
    }
    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        admission::lookup::Blind.has_scale(api_version, kind)
    }
    fn installed(&self) -> Arc<Installed> {
        self.0.clone()
    }
}

/// The upstream CRDs Tandem reads (every `.yaml` of the folder the tests lay
/// out from the pinned Go modules), or None after saying why (a failure with
/// `CI=true`).
fn upstream_crds() -> Option<Vec<Value>> {
    let dir = harness::upstream_crds("benches/admission.rs installed/*")?;
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the upstream CRD folder reads")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    Some(
        files
            .iter()
            .flat_map(|f| harness::yaml_documents(f))
            .collect(),
    )
}

fn installed(c: &mut Criterion) {
    let Some(crds) = upstream_crds() else {
        return;
    };
    let known = Installed::from_crds(crds.iter());
    let Installed::Known(found) = &known else {
        panic!("CRDs make a known installation");
    };
    assert!(
        found.len() >= 5,
        "LWS, PodGroup, Gateway, HTTPRoute and InferencePool are found: {:?}",
        found.keys()
    );
    let story = example(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
        0,
        "default",
    );
    let assumed = InstalledOnly(Arc::new(Installed::Assumed));
    let upstream = InstalledOnly(Arc::new(known.clone()));
    interleaved_ratio(&story, &assumed, &upstream);
    let mut group = c.benchmark_group("installed");
    for (name, lookup) in [("assumed", assumed), ("known_upstream_crds", upstream)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                admission::admit(
                    Kind::InferenceService,
                    "default",
                    black_box(&story),
                    None,
                    &lookup,
                )
            })
        });
    }
    group.finish();
}

/// Prints the time of an admission with `known` over one with `assumed`,
/// measured in rounds of both in turn (the order alternating, so that
/// neither always runs on a warmer cache): each round admits `story`
/// 2 000 times with each lookup, and the median of 15 rounds' ratios is
/// the figure, with the least and the most. Without `--bench` (the smoke
/// run of `cargo test --all-targets`), 2 rounds of 20.
fn interleaved_ratio(story: &Value, assumed: &impl Lookup, known: &impl Lookup) {
    let benching = std::env::args().any(|a| a == "--bench");
    let (rounds, per_round) = if benching { (15, 2_000) } else { (2, 20) };
    let time = |lookup: &dyn Lookup| {
        let start = std::time::Instant::now();
        for _ in 0..per_round {
            black_box(admission::admit(
                Kind::InferenceService,
                "default",
                black_box(story),
                None,
                lookup,
            ))
            .expect("the story is admitted");
        }
        start.elapsed().as_secs_f64() / f64::from(per_round)
    };
    let mut ratios: Vec<(f64, f64, f64)> = (0..rounds)
        .map(|round| {
            let (a, k) = if round % 2 == 0 {
                let a = time(assumed);
                (a, time(known))
            } else {
                let k = time(known);
                (time(assumed), k)
            };
            (k / a, a, k)
        })
        .collect();
    ratios.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (ratio, a, k) = ratios[ratios.len() / 2];
    println!(
        "installed/interleaved: known upstream CRDs over assumed {ratio:.3} \
         (median of {rounds} rounds of {per_round}: {:.1} µs over {:.1} µs; \
         rounds from {:.3} to {:.3})",
        k * 1e6,
        a * 1e6,
        ratios[0].0,
        ratios[ratios.len() - 1].0
    );
}

criterion_group!(benches, admission, installed);
criterion_main!(benches);
