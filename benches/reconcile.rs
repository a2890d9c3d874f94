//! A reconcile does not pay for what it does not own (issue 51): one story-4
//! service (P/D multi-node, two prefill replicas: three LeaderWorkerSets, a
//! PodGroup and twelve ready pods, as a previous `tandem` left them), a
//! ScaleView on its decode role and the seed's InplaceScaling group, each
//! reconciled with 0, 10 000 and 100 000 unrelated objects in the caches:
//! pods, LeaderWorkerSets, StatefulSets, Deployments and PodGroups of other
//! services, half in the service's namespace and half in others.
//!
//! The world is the steady state: the reconciles measured write nothing
//! (checked; the benchmark fails otherwise). Reported per reconciler and
//! size: the median time of a reconcile, the allocations (count and bytes)
//! made while it ran, counted by `stats_alloc` around the binary's own
//! allocator, and the requests it sent (a request's allocations in the
//! in-memory API server, in this process, are counted too); then each at
//! the largest size over the same at 0 (the issue's goal: ≤ 1.2).
//!
//! Then one wide service's steady pass (`WIDE` replicas, 1 000 by default),
//! its children kept parsed from the pass before against read anew
//! (`tandem::watch::parsed`).
//!
//! Without `--bench` (as under `cargo test --all-targets`) the sizes are 0
//! and 200, the wide service has 70 replicas, and each reconcile runs 5
//! times: a smoke run that checks the benchmark works.
//!
//! ```sh
//! cargo bench --bench reconcile                  # sizes 0, 10000, 100000; 200 reconciles each
//! SIZES=0,1000 RUNS=50 cargo bench --bench reconcile
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::fake_api::FakeApi;
use harness::measure::{admitted, env_number};
use serde_json::{Value, json};
use stats_alloc::{Region, StatsAlloc};
use tandem::admission::Kind;
use tandem::api::{InferenceService, ResourceScalingGroup, ScaleView};
use tandem::reconcile::Context;

/// The binary's allocator (src/main.rs), counted.
#[global_allocator]
static ALLOCATOR: StatsAlloc<mimalloc::MiMalloc> = StatsAlloc::new(mimalloc::MiMalloc);

const IS: &str = "fusioninfer.io/v1alpha1";
const RSG: &str = "resourcescalinggroup.com/v1";
const NAMESPACE: &str = "bench";
const SERVICE: &str = "svc";
const VIEW: &str = "svc-decode";
const GROUP: &str = "group";

/// The service, its children and ready pods, its view and a group, as a
/// previous `tandem` left them.
fn populate_owned(fake: &FakeApi) {
    let mut service = harness::yaml_documents(&harness::repo_path(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
    ))
    .remove(0);
    service["metadata"] = json!({"name": SERVICE, "namespace": NAMESPACE});
    service["spec"]["roles"][0]["replicas"] = json!(2);
    let stored = fake.insert(admitted(Kind::InferenceService, NAMESPACE, &service));
    let rendered =
        tandem::render::render(vec![stored], &Default::default()).expect("story 4 renders");
    for object in rendered.apply {
        if object["kind"] == "InferenceService" {
            let status = object["status"].clone();
            fake.edit(IS, "InferenceService", NAMESPACE, SERVICE, |s| {
                s["status"] = status
            });
        } else {
            fake.insert(object);
        }
    }
    fake.set_ready_matching(NAMESPACE, "fusioninfer.io/service", true);
    let view = json!({"apiVersion": IS, "kind": "ScaleView",
        "metadata": {"name": VIEW, "namespace": NAMESPACE},
        "spec": {"targetRef": {"name": SERVICE, "componentType": "decoder"},
                 "scalePolicy": [{"group": "decode"}]}});
    fake.insert(admitted(Kind::ScaleView, NAMESPACE, &view));
    let mut group = harness::yaml_documents(&harness::repo_path(
        "examples/resourcescalinggroup/inplace-scaling.yaml",
    ))
    .remove(0);
    group["metadata"] = json!({"name": GROUP, "namespace": NAMESPACE});
    for target in group["spec"]["targetResources"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        target["namespace"] = json!(NAMESPACE);
    }
    fake.insert(admitted(Kind::ResourceScalingGroup, NAMESPACE, &group));
}

/// The `i`th unrelated object: of another service (`other-{i / 16}`), in the
/// benchmark's namespace for even `i / 16` and in one of ten others for odd;
/// ten pods, then a LeaderWorkerSet, a StatefulSet, a Deployment, a PodGroup
/// and two more pods, over and over: the mix of a cluster of services.
fn unrelated(i: usize) -> Value {
    let owner = i / 16;
    let namespace = if owner.is_multiple_of(2) {
        NAMESPACE.to_owned()
    } else {
        format!("other-{}", owner % 10)
    };
    let service = format!("other-{owner}");
    let labels = json!({"fusioninfer.io/service": service,
        "app.kubernetes.io/managed-by": "tandem", "fusioninfer.io/role": "decode"});
    let metadata =
        json!({"name": format!("{service}-{i}"), "namespace": namespace, "labels": labels});
    let template = json!({"metadata": {"labels": labels},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]}});
    match i % 16 {
        10 => json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": metadata,
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": template}}}),
        11 => json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata,
            "spec": {"replicas": 1, "serviceName": service,
                     "selector": {"matchLabels": {"fusioninfer.io/service": service}},
                     "template": template}}),
        12 => json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": 1,
                     "selector": {"matchLabels": {"fusioninfer.io/service": service}},
                     "template": template}}),
        13 => json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": metadata, "spec": {"minMember": 2}}),
        _ => json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": "node-0",
                     "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]}}),
    }
}

/// One reconciler's figures at one size.
struct Figures {
    median: Duration,
    requests: f64,
    allocations: f64,
    bytes: f64,
}

/// Runs `reconcile` `runs` times after three unmeasured runs, checking that
/// none of the measured runs writes.
async fn measure<F, Fut>(fake: &FakeApi, what: &str, runs: usize, reconcile: F) -> Figures
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..3 {
        reconcile().await;
    }
    fake.caught_up().await;
    fake.take_calls();
    let mut times = Vec::with_capacity(runs);
    let (mut allocations, mut bytes) = (0usize, 0usize);
    for _ in 0..runs {
        let region = Region::new(&ALLOCATOR);
        let start = Instant::now();
        reconcile().await;
        times.push(start.elapsed());
        let change = region.change();
        allocations += change.allocations + change.reallocations;
        bytes += change.bytes_allocated;
    }
    let calls = fake.take_calls();
    let writes: Vec<String> = calls
        .iter()
        .filter(|c| c.is_write())
        .map(harness::request::Request::line)
        .collect();
    assert!(
        writes.is_empty(),
        "{what}: a reconcile of the steady state wrote {writes:?}"
    );
    times.sort();
    Figures {
        median: times[times.len() / 2],
        requests: calls.len() as f64 / runs as f64,
        allocations: allocations as f64 / runs as f64,
        bytes: bytes as f64 / runs as f64,
    }
}

async fn at_size(size: usize, runs: usize) -> Vec<(&'static str, Figures)> {
    let fake = FakeApi::new();
    for n in std::iter::once(NAMESPACE.to_owned()).chain((0..10).map(|n| format!("other-{n}"))) {
        fake.insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}));
    }
    for i in 0..size {
        fake.insert(unrelated(i));
    }
    fake.run_leader_worker_sets();
    populate_owned(&fake);
    let ctx: Arc<Context> = fake.context();
    fake.caught_up().await;
    let get = |api_version: &str, kind: &str, name: &str| {
        fake.get(api_version, kind, NAMESPACE, name)
            .unwrap_or_else(|| panic!("{kind} {name} is stored"))
    };
    // Settles the first pass's writes (status, Events) before measuring.
    let service: InferenceService =
        serde_json::from_value(get(IS, "InferenceService", SERVICE)).expect("a service");
    tandem::reconcile::inference_service::reconcile(Arc::new(service), ctx.clone())
        .await
        .expect("the service reconciles");
    fake.caught_up().await;
    let view: Arc<ScaleView> =
        Arc::new(serde_json::from_value(get(IS, "ScaleView", VIEW)).expect("a view"));
    tandem::reconcile::scale_view::reconcile(view.clone(), ctx.clone())
        .await
        .expect("the view reconciles");
    let group: Arc<ResourceScalingGroup> =
        Arc::new(serde_json::from_value(get(RSG, "ResourceScalingGroup", GROUP)).expect("a group"));
    tandem::reconcile::resource_scaling_group::reconcile(group.clone(), ctx.clone())
        .await
        .expect("the group reconciles");
    fake.caught_up().await;
    // The objects reconciled again as the caches now hold them.
    let service: Arc<InferenceService> =
        Arc::new(serde_json::from_value(get(IS, "InferenceService", SERVICE)).expect("a service"));
    let view: Arc<ScaleView> =
        Arc::new(serde_json::from_value(get(IS, "ScaleView", VIEW)).expect("a view"));
    let group: Arc<ResourceScalingGroup> =
        Arc::new(serde_json::from_value(get(RSG, "ResourceScalingGroup", GROUP)).expect("a group"));
    let service_figures = measure(&fake, "InferenceService", runs, || {
        let (service, ctx) = (service.clone(), ctx.clone());
        async move {
            tandem::reconcile::inference_service::reconcile(service, ctx)
                .await
                .expect("the service reconciles");
        }
    })
    .await;
    let view_figures = measure(&fake, "ScaleView", runs, || {
        let (view, ctx) = (view.clone(), ctx.clone());
        async move {
            tandem::reconcile::scale_view::reconcile(view, ctx)
                .await
                .expect("the view reconciles");
        }
    })
    .await;
    let group_figures = measure(&fake, "ResourceScalingGroup", runs, || {
        let (group, ctx) = (group.clone(), ctx.clone());
        async move {
            tandem::reconcile::resource_scaling_group::reconcile(group, ctx)
                .await
                .expect("the group reconciles");
        }
    })
    .await;
    vec![
        ("InferenceService", service_figures),
        ("ScaleView", view_figures),
        ("ResourceScalingGroup", group_figures),
    ]
}

/// A steady pass over one service of `replicas` replicas (story 3: one
/// LeaderWorkerSet a replica, its pods Ready), measured twice: with its
/// children kept parsed from the pass before (one context throughout,
/// `tandem::watch::parsed`), and read anew from the caches' text (a fresh
/// context each pass, which keeps nothing). Returns (kept, anew).
async fn wide(replicas: usize, runs: usize) -> (Figures, Figures) {
    let fake = FakeApi::new();
    fake.insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}));
    fake.run_leader_worker_sets();
    let mut service =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story3-multinode.yaml"))
            .remove(0);
    service["metadata"] = json!({"name": SERVICE, "namespace": NAMESPACE});
    service["spec"]["roles"][0]["replicas"] = json!(replicas);
    let stored = fake.insert(admitted(Kind::InferenceService, NAMESPACE, &service));
    let rendered =
        tandem::render::render(vec![stored], &Default::default()).expect("story 3 renders");
    for object in rendered.apply {
        if object["kind"] != "InferenceService" {
            fake.insert(object);
        }
    }
    fake.caught_up().await;
    fake.set_ready_matching(NAMESPACE, "fusioninfer.io/service", true);
    let ctx: Arc<Context> = fake.context();
    let read = || -> Arc<InferenceService> {
        let stored = fake
            .get(IS, "InferenceService", NAMESPACE, SERVICE)
            .expect("the service is stored");
        Arc::new(serde_json::from_value(stored).expect("a service"))
    };
    // Until a pass writes nothing: the status and Events of the first.
    for _ in 0..5 {
        fake.caught_up().await;
        fake.take_calls();
        tandem::reconcile::inference_service::reconcile(read(), ctx.clone())
            .await
            .expect("the service reconciles");
        if !fake.take_calls().iter().any(|c| c.is_write()) {
            break;
        }
    }
    let service = read();
    let kept = measure(&fake, "a wide service, kept", runs, || {
        let (service, ctx) = (service.clone(), ctx.clone());
        async move {
            tandem::reconcile::inference_service::reconcile(service, ctx)
                .await
                .expect("the service reconciles");
        }
    })
    .await;
    assert_eq!(
        ctx.parsed_owners(),
        1,
        "the wide service keeps its children"
    );
    let anew = measure(&fake, "a wide service, read anew", runs, || {
        let (service, ctx) = (service.clone(), fake.context());
        async move {
            tandem::reconcile::inference_service::reconcile(service, ctx)
                .await
                .expect("the service reconciles");
        }
    })
    .await;
    (kept, anew)
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let sizes: Vec<usize> = std::env::var("SIZES")
        .ok()
        .map(|s| {
            s.split(',')
                .map(|n| {
                    n.trim()
                        .parse()
                        .expect("SIZES: numbers separated by commas")
                })
                .collect()
        })
        .unwrap_or(if benching {
            vec![0, 10_000, 100_000]
        } else {
            vec![0, 200]
        });
    let runs = env_number("RUNS", if benching { 200 } else { 5 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut all = Vec::new();
    for &size in &sizes {
        let figures = runtime.block_on(at_size(size, runs));
        all.push((size, figures));
    }
    println!(
        "| reconciler | unrelated objects | median time | allocations | bytes allocated | requests |"
    );
    println!("|---|---|---|---|---|---|");
    for (size, figures) in &all {
        for (what, f) in figures {
            println!(
                "| {what} | {size} | {:.1} µs | {:.0} | {:.0} | {:.1} |",
                f.median.as_secs_f64() * 1e6,
                f.allocations,
                f.bytes,
                f.requests
            );
        }
    }
    let replicas = env_number("WIDE", if benching { 1000 } else { 70 });
    let (kept, anew) = runtime.block_on(wide(replicas, runs.min(50)));
    println!("\na steady pass over one service of {replicas} replicas:");
    println!("| children | median time | allocations | bytes allocated |");
    println!("|---|---|---|---|");
    for (what, f) in [("kept from the pass before", &kept), ("read anew", &anew)] {
        println!(
            "| {what} | {:.1} µs | {:.0} | {:.0} |",
            f.median.as_secs_f64() * 1e6,
            f.allocations,
            f.bytes
        );
    }
    println!(
        "read anew over kept: time {:.2}×, allocations {:.2}×, bytes {:.2}×",
        anew.median.as_secs_f64() / kept.median.as_secs_f64(),
        anew.allocations / kept.allocations,
        anew.bytes / kept.bytes
    );
    if let (Some((first, base)), Some((last, top))) = (all.first(), all.last()) {
        println!("\nat {last} over at {first} (goal ≤ 1.2):");
        for ((what, b), (_, t)) in base.iter().zip(top) {
            println!(
                "{what}: time {:.2}×, allocations {:.2}×, bytes {:.2}×",
                t.median.as_secs_f64() / b.median.as_secs_f64(),
                t.allocations / b.allocations,
                t.bytes / b.bytes
            );
        }
    }
}
