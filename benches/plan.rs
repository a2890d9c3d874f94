//! What Tandem's decisions cost as they grow: `cargo bench --bench plan`.
//! Each group reports throughput per element (replica, group, pod, RSG), so the
//! growth shows as elements per second staying flat (linear) or falling.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use tandem::api::InferenceService;
use tandem::api::inference_service::RoleScaleDownPolicy;
use tandem::api::resource_scaling_group::ResourceScalingGroupSpec;
use tandem::api::scale_view::ScaleViewSpec;
use tandem::plan::inference_service::{drain, service};
use tandem::plan::resource_scaling_group::{dag, propagation, ratio};
use tandem::plan::scale_view::split;
use tandem::plan::victims;

/// The binary's allocator (src/main.rs), so the figures are what `tandem
/// serve` and `tandem render` spend.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn template() -> Value {
    json!({"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
        "ports": [{"containerPort": 8000}], "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
}

/// Topology of a prefill/decode service: 64 replicas of 4 nodes per role.
fn topology(c: &mut Criterion) {
    let service: InferenceService = serde_json::from_value(json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": "ds", "namespace": "default", "uid": "u"},
        "spec": {"roles": [
            {"name": "prefill", "componentType": "prefiller", "replicas": 64, "multinode": {"nodeCount": 4}, "template": template()},
            {"name": "decode", "componentType": "decoder", "replicas": 64, "multinode": {"nodeCount": 4}, "template": template()},
        ]}
    }))
    .expect("the benchmark service parses");
    let none = BTreeSet::new();
    let world = service::World {
        children: &[],
        pods: &[],
        unavailable: &none,
        installed: &tandem::plan::shared::installed::ASSUMED,
        scale_views: &[],
    };
    let mut group = c.benchmark_group("topology");
    group.throughput(Throughput::Elements(128));
    group.bench_function("pd_64x4_per_role", |b| {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
        b.iter(|| {
            service::desired(
                black_box(&service),
                &world,
                &service::Options::default(),
                &now,
            )
        })
    });
    group.finish();
}

/// A steady reconcile of the 64 x 4 service, end to end in memory: the
/// world as Tandem left it (the service, its 128 LeaderWorkerSets, budgets
/// and PodGroup) through `tandem render`'s path: admission of the service as
/// the webhook would, then the controllers' reconcile functions over the
/// world (observe, plan, compare with what is there), which find nothing to
/// write.
fn steady(c: &mut Criterion) {
    let service = json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": "ds", "namespace": "default", "uid": "u"},
        "spec": {"roles": [
            {"name": "prefill", "componentType": "prefiller", "replicas": 64, "multinode": {"nodeCount": 4}, "template": template()},
            {"name": "decode", "componentType": "decoder", "replicas": 64, "multinode": {"nodeCount": 4}, "template": template()},
        ]}
    });
    let options = tandem::render::Options::default();
    let first = tandem::render::render(vec![service], &options).expect("the service renders");
    let settled = first.apply.clone();
    let again = tandem::render::render(settled.clone(), &options).expect("the world renders");
    let writes: Vec<_> = again
        .changes
        .iter()
        .filter(|c| c.kind != "InferenceService")
        .collect();
    assert!(
        writes.is_empty(),
        "a settled world still changes: {writes:?}"
    );
    let mut group = c.benchmark_group("steady");
    group.throughput(Throughput::Elements(128));
    group.bench_function("pd_64x4_settled_world", |b| {
        b.iter_batched(
            || settled.clone(),
            |world| tandem::render::render(black_box(world), &options),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// A service of story 1's shape (one pod and one LeaderWorkerSet a replica)
/// with `replicas` wanted.
fn wide_service(replicas: u32) -> InferenceService {
    serde_json::from_value(json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": "qwen", "namespace": "default", "uid": "u", "generation": 1},
        "spec": {"roles": [{"name": "inference", "componentType": "worker", "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]}
    }))
    .expect("the benchmark service parses")
}

/// One reconcile's decision (`service::reconcile`: plan, compare, status)
/// of a service of n replicas over the world it left: n LeaderWorkerSets as
/// planned and their n Ready pods. `steady` wants the n (nothing to
/// write); `down` wants n / 100 (the others drained first), the pass issue
/// 37's scale-and-back repeats hundreds of times. Per replica, a flat
/// throughput from 100 to 1 000 means the pass is linear in the replicas.
fn wide(c: &mut Criterion) {
    let none = BTreeSet::new();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
    let options = service::Options::default();
    let empty = service::World {
        children: &[],
        pods: &[],
        unavailable: &none,
        installed: &tandem::plan::shared::installed::ASSUMED,
        scale_views: &[],
    };
    let mut group = c.benchmark_group("wide");
    for n in [100u32, 1_000] {
        let all = wide_service(n);
        let children: Vec<Value> = service::desired(&all, &empty, &options, &now)
            .expect("the service plans")
            .into_iter()
            .map(|d| tandem::plan::shared::write::stamp(d.object))
            .collect();
        let pods: Vec<Value> = children
            .iter()
            .filter(|c| c["kind"] == "LeaderWorkerSet")
            .map(|set| {
                let name = format!("{}-0", set["metadata"]["name"].as_str().unwrap_or_default());
                let mut labels =
                    set["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"].clone();
                labels["leaderworkerset.sigs.k8s.io/name"] = set["metadata"]["name"].clone();
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default", "labels": labels},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
            })
            .collect();
        assert_eq!(pods.len(), n as usize, "a pod for each replica");
        let pods = tandem::plan::shared::pod::from_json_all(&pods);
        let world = service::World {
            children: &children,
            pods: &pods,
            ..empty
        };
        let steady = service::reconcile(&all, &world, &options, &now);
        assert!(
            steady.apply.is_empty() && steady.delete.is_empty(),
            "a settled world still changes: {:?} {:?}",
            steady
                .apply
                .iter()
                .take(2)
                .map(|a| &a.note)
                .collect::<Vec<_>>(),
            steady
                .delete
                .iter()
                .take(2)
                .map(|d| &d.note)
                .collect::<Vec<_>>()
        );
        let few = wide_service(n / 100);
        let down = service::reconcile(&few, &world, &options, &now);
        assert_eq!(
            down.apply.len(),
            (n - n / 100) as usize,
            "each replica that goes is drained first (its pod marked)"
        );
        group.throughput(Throughput::Elements(u64::from(n)));
        for (name, service) in [("steady", &all), ("down", &few)] {
            group.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| service::reconcile(black_box(service), &world, &options, &now))
            });
        }
    }
    group.finish();
}

/// The ScaleView split over n groups in three priority tiers.
fn split_groups(c: &mut Criterion) {
    let mut group = c.benchmark_group("split");
    for n in [10usize, 1_000, 10_000] {
        let policies: Vec<Value> = (0..n)
            .map(|i| json!({"group": format!("g{i:05}"), "priority": i % 3, "constraints": {"min": i % 2, "max": 4 + i % 7}}))
            .collect();
        let spec: ScaleViewSpec = serde_json::from_value(json!({
            "targetRef": {"name": "s", "componentType": "decoder"}, "scalePolicy": policies}))
        .expect("the benchmark view parses");
        let total = i32::try_from(n * 3).unwrap_or(i32::MAX);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &spec, |b, spec| {
            b.iter(|| split::split(black_box(spec), total))
        });
    }
    group.finish();
}

/// Binpack's choice over n pods: replicas of 4 pods with costs, halved.
fn binpack(c: &mut Criterion) {
    let mut group = c.benchmark_group("binpack_victims");
    for pods_count in [100usize, 10_000, 100_000] {
        let replicas = pods_count / 4;
        let pods: Vec<Value> = (0..pods_count)
            .map(|p| {
                let index = p / 4;
                json!({"metadata": {"name": format!("p{p}"),
                        "labels": {"fusioninfer.io/role-name": "decode", "fusioninfer.io/replica-index": index.to_string()},
                        "annotations": {victims::DELETION_COST: ((index * 7919) % 1000).to_string()}},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
            })
            .collect();
        let pods = tandem::plan::shared::pod::from_json_all(&pods);
        let existing: BTreeSet<u32> = (0..replicas as u32).collect();
        group.throughput(Throughput::Elements(pods_count as u64));
        group.bench_with_input(BenchmarkId::from_parameter(pods_count), &pods, |b, pods| {
            b.iter(|| {
                // The pods grouped by replica, as a service's pass does once
                // per run, then weighed.
                let by_replica = drain::ReplicaPods::new(black_box(pods));
                let candidates =
                    victims::role_candidates(by_replica.of_role("decode"), 4, &existing);
                victims::keep(
                    &existing,
                    &BTreeSet::new(),
                    replicas / 2,
                    RoleScaleDownPolicy::Binpack,
                    &candidates,
                )
            })
        });
    }
    group.finish();
}

/// An InplaceScaling group whose Source is `from` and whose Target is `to`.
fn follow(from: &str, to: &str) -> ResourceScalingGroupSpec {
    serde_json::from_value(json!({
        "targetResources": [
            {"name": from, "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": to, "apiVersion": "apps/v1", "kind": "Deployment"}],
        "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
            {"name": from, "role": "Source"}, {"name": to, "role": "Target", "ratio": "1.5"}]}}
    }))
    .expect("the benchmark group parses")
}

/// Ratio propagation through a chain of 100 groups (d0 -> d1 -> ... -> d100).
fn propagation(c: &mut Criterion) {
    let chain: Vec<(String, ratio::Bindings)> = (0..100)
        .map(|i| {
            let bindings = ratio::bindings(&follow(&format!("d{i}"), &format!("d{}", i + 1)))
                .expect("the chain resolves");
            (format!("rsg-{i}"), bindings)
        })
        .collect();
    let current: BTreeMap<ratio::Endpoint, i32> = BTreeMap::from([(chain[0].1.source.clone(), 2)]);
    let mut group = c.benchmark_group("ratio_propagation");
    group.throughput(Throughput::Elements(100));
    group.bench_function("chain_100", |b| {
        b.iter(|| propagation::propagate(black_box(&current), &chain))
    });
    group.finish();
}

/// The DAG check of one new group against n stored groups (a binary tree).
fn dag_check(c: &mut Criterion) {
    let mut group = c.benchmark_group("dag_check");
    for n in [10usize, 1_000, 10_000] {
        let stored: Vec<(String, ResourceScalingGroupSpec)> = (0..n)
            .map(|i| {
                (
                    format!("rsg-{i}"),
                    follow(&format!("d{i}"), &format!("d{}", 2 * i + 1)),
                )
            })
            .collect();
        let candidate = follow(&format!("d{}", 4 * n), "d0");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &stored, |b, stored| {
            b.iter(|| dag::check(black_box(stored), ("rsg-new", &candidate)))
        });
    }
    group.finish();
}

/// The same check answered by the webhook's index of the stored groups,
/// kept up to date instead of rebuilt per request. Its cost follows the chain
/// below the candidate's Target (here log2 n groups deep), not n, so no
/// per-group throughput is given.
fn dag_index_check(c: &mut Criterion) {
    let mut group = c.benchmark_group("dag_index_check");
    for n in [10usize, 1_000, 10_000] {
        let mut index = dag::FollowIndex::default();
        for i in 0..n {
            index.upsert_spec(
                "ai",
                &format!("rsg-{i}"),
                &follow(&format!("d{i}"), &format!("d{}", 2 * i + 1)),
            );
        }
        let candidate = follow(&format!("d{}", 4 * n), "d0");
        group.bench_with_input(BenchmarkId::from_parameter(n), &index, |b, index| {
            b.iter(|| black_box(index).check("ai", ("rsg-new", &candidate)))
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    topology,
    steady,
    wide,
    split_groups,
    binpack,
    propagation,
    dag_check,
    dag_index_check
);
criterion_main!(benches);
