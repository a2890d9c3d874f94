//! What one admission decision costs: defaults and validation of each kind,
//! without the transport. `cargo bench --bench admission`.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::Value;
use std::hint::black_box;
use tandem::admission::{self, Kind};

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
                "examples/inferenceservice/story4-prefill-decode-multinode.yaml",
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
}

criterion_group!(benches, admission);
criterion_main!(benches);
