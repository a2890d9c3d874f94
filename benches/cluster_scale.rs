//! `tandem serve` against a big cluster: the real binary pointed at the
//! in-memory API server of the tests (`tests/harness/src/fake_api`), which holds
//! COUNT InferenceServices (story 4, P/D multi-node, with two prefill
//! replicas: three LeaderWorkerSets, a PodGroup and twelve ready pods each, as a previous
//! `tandem` left them), COUNT ScaleViews (one on each service's decode
//! role) and COUNT InplaceScaling ResourceScalingGroups (the seed's
//! `pd-pool`, each binding workloads of its own name, which do not exist:
//! each group reports it and waits), spread over NAMESPACES namespaces. Tandem's own writes come
//! back as watch events, as in a cluster.
//!
//! Two runs of the binary, one after the other, on the same world:
//! 1. the catch-up: from the world `render`'s first pass leaves (its pods
//!    since Ready), which an older Tandem may have left; run with the rate
//!    limit off, it reports the requests the catch-up needs and what they
//!    take at the default limit;
//! 2. the steady state: the same replica started again on the world the
//!    first left: the time from start to ready (caches listed), from ready
//!    to the last request (settled = no request but the leader Lease's for
//!    10 s), the requests in that time by verb, Tandem's CPU seconds from
//!    ready to its last request, and peak and current RSS from
//!    `/proc/<pid>/status`.
//!
//! Then the size of a cached object by kind (its JSON once trimmed, and the
//! text a JSON kind's cache keeps beside the typed metadata; measured on
//! caches started in this process against the same server).
//!
//! Without `--bench` (as under `cargo test --all-targets`) COUNT defaults to
//! 20: a smoke run that checks the benchmark works.
//!
//! ```sh
//! cargo bench --bench cluster_scale                            # COUNT=1000 NAMESPACES=1
//! COUNT=1000 NAMESPACES=10 cargo bench --bench cluster_scale
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use harness::fake_api::FakeApi;
use harness::measure::{admitted, clock_ticks, cpu_seconds, env_number, memory};
use harness::running::Running;
use serde_json::json;
use tandem::admission::Kind;

const IS: &str = "fusioninfer.io/v1alpha1";

/// Stores COUNT services as a previous `tandem` left them, their views and
/// COUNT groups; returns how many objects of each kind the server holds.
fn populate(fake: &FakeApi, count: usize, namespaces: usize) -> BTreeMap<String, usize> {
    let story = harness::yaml_documents(&harness::repo_path(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
    ))
    .remove(0);
    let seed_group = harness::yaml_documents(&harness::repo_path(
        "examples/resourcescalinggroup/inplace-scaling.yaml",
    ))
    .remove(0);
    fake.run_leader_worker_sets();
    for n in 0..namespaces {
        fake.insert(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n}")}}));
    }
    for i in 0..count {
        let namespace = format!("ns-{}", i % namespaces);
        let name = format!("svc-{i}");
        let mut service = story.clone();
        service["metadata"] = json!({"name": name, "namespace": namespace});
        // Two prefill replicas (the story has one): 2 x 2 + 2 x 4 = 12 pods
        // a service, the 12 000 pods issue 13 sizes the cluster with.
        service["spec"]["roles"][0]["replicas"] = json!(2);
        let stored = fake.insert(admitted(Kind::InferenceService, &namespace, &service));
        let rendered =
            tandem::render::render(vec![stored], &Default::default()).expect("story 4 renders");
        for object in rendered.apply {
            if object["kind"] == "InferenceService" {
                let status = object["status"].clone();
                fake.edit(IS, "InferenceService", &namespace, &name, |s| {
                    s["status"] = status
                });
            } else {
                fake.insert(object);
            }
        }
        let view = json!({"apiVersion": IS, "kind": "ScaleView",
            "metadata": {"name": format!("{name}-decode"), "namespace": namespace},
            "spec": {"targetRef": {"name": name, "componentType": "decoder"},
                     "scalePolicy": [{"group": "decode"}]}});
        fake.insert(admitted(Kind::ScaleView, &namespace, &view));
        let mut group = seed_group.clone();
        group["metadata"] = json!({"name": format!("group-{i}"), "namespace": namespace});
        // Each group binds workloads of its own (the seed's names with the
        // group's number): a thousand groups that all bind one Deployment
        // would be a thousand double Targets, each group's status naming
        // the 999 others.
        for target in group["spec"]["targetResources"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            target["namespace"] = json!(namespace);
            let own = format!("{}-{i}", target["name"].as_str().unwrap_or_default());
            target["name"] = json!(own);
        }
        for binding in group["spec"]["scalingStrategy"]["inplaceConfig"]["bindings"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            // The Source names the Deployment; the Targets name the
            // RoleBasedGroup's roles, which keep their names.
            if binding["name"] == "router" {
                binding["name"] = json!(format!("router-{i}"));
            }
        }
        fake.insert(admitted(Kind::ResourceScalingGroup, &namespace, &group));
    }
    for n in 0..namespaces {
        fake.set_ready_matching(&format!("ns-{n}"), "fusioninfer.io/service", true);
    }
    let mut held = BTreeMap::new();
    for (api_version, kind) in [
        (IS, "InferenceService"),
        (IS, "ScaleView"),
        ("resourcescalinggroup.com/v1", "ResourceScalingGroup"),
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
        ("scheduling.volcano.sh/v1beta1", "PodGroup"),
        ("v1", "Pod"),
    ] {
        let total = (0..namespaces)
            .map(|n| fake.list(api_version, kind, &format!("ns-{n}")).len())
            .sum();
        held.insert(kind.to_owned(), total);
    }
    held
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// A cache's name, its objects, their JSON size in all, and (for the caches
/// of JSON kinds) the size of the text each keeps beside its typed metadata.
struct CacheSize {
    name: String,
    objects: usize,
    json: usize,
    text: Option<usize>,
}

/// The sizes of the objects of each cache, on caches started here.
async fn cached_sizes(fake: &FakeApi) -> Vec<CacheSize> {
    let caches = tandem::watch::caches::Caches::start(fake.client(), Default::default());
    caches.ready().await;
    fn json<T: serde::Serialize>(objects: &[std::sync::Arc<T>]) -> usize {
        objects
            .iter()
            .map(|o| serde_json::to_vec(o.as_ref()).map_or(0, |v| v.len()))
            .sum()
    }
    let typed = |name: &str, objects: usize, json: usize| CacheSize {
        name: name.to_owned(),
        objects,
        json,
        text: None,
    };
    let mut sizes = vec![
        typed(
            "InferenceService",
            caches.services.len(),
            json(&caches.services.state()),
        ),
        typed("ScaleView", caches.views.len(), json(&caches.views.state())),
        typed(
            "ResourceScalingGroup",
            caches.groups.len(),
            json(&caches.groups.state()),
        ),
    ];
    for watched in caches.watched() {
        let objects = watched.store.state();
        sizes.push(CacheSize {
            name: match &watched.selector {
                Some(selector) => format!("{} ({selector})", watched.resource.kind),
                None => watched.resource.kind.clone(),
            },
            objects: objects.len(),
            json: json(&objects),
            text: Some(objects.iter().map(|o| o.body_len() + o.marks_len()).sum()),
        });
    }
    sizes
}

/// The resource a request's path names, with its subresource
/// (`deployments/scale`, `inferenceservices/status`).
fn resource_of_path(path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.split('/').collect();
    match parts.iter().position(|p| *p == "namespaces") {
        Some(at) => parts[at + 2..]
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, p)| *p)
            .collect::<Vec<_>>()
            .join("/"),
        None => parts.last().copied().unwrap_or_default().to_owned(),
    }
}

/// What one run of Tandem did from ready (caches listed) until settled: no
/// request but the leader Lease's for 10 s (given up after `cap`).
struct Settled {
    /// From ready to the last request.
    after: Duration,
    /// Requests by verb and resource (Events apart), the Lease's left out.
    verbs: BTreeMap<String, usize>,
    /// Tandem's CPU seconds (utime + stime) from ready to the last request.
    cpu: f64,
    /// Whether it settled within `cap`.
    within_cap: bool,
}

async fn settle(fake: &FakeApi, pid: u32, cap: Duration) -> Settled {
    let ticks = clock_ticks();
    let cpu_at_ready = cpu_seconds(pid, ticks).unwrap_or_default();
    let mut cpu_at_last = cpu_at_ready;
    let ready_at = Instant::now();
    let mut last = ready_at;
    let mut verbs: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let calls: Vec<_> = fake
            .take_calls()
            .into_iter()
            .filter(|c| !c.path.contains("/leases/"))
            .collect();
        if !calls.is_empty() {
            last = Instant::now();
            cpu_at_last = cpu_seconds(pid, ticks).unwrap_or(cpu_at_last);
            for call in calls {
                let verb = match (call.method.as_str(), call.path.contains("/events")) {
                    (_, true) => "event".to_owned(),
                    (method, _) => format!("{method} {}", resource_of_path(&call.path)),
                };
                *verbs.entry(verb).or_default() += 1;
            }
        }
        if last.elapsed() >= Duration::from_secs(10) {
            break;
        }
        if ready_at.elapsed() > cap {
            return Settled {
                after: ready_at.elapsed(),
                verbs,
                cpu: cpu_seconds(pid, ticks).unwrap_or(cpu_at_last) - cpu_at_ready,
                within_cap: false,
            };
        }
    }
    Settled {
        after: last.saturating_duration_since(ready_at),
        verbs,
        cpu: cpu_at_last - cpu_at_ready,
        within_cap: true,
    }
}

async fn run() {
    // Without `--bench` (as under `cargo test --all-targets`) a smoke run of
    // 20, so CI checks that it builds and works.
    let full = std::env::args().any(|a| a == "--bench");
    let count = env_number("COUNT", if full { 1000 } else { 20 });
    let namespaces = env_number("NAMESPACES", 1).max(1);
    let cap = Duration::from_secs(env_number("CAP_SECONDS", 300));
    let fake = FakeApi::new();
    let started = Instant::now();
    let held = populate(&fake, count, namespaces);
    println!(
        "cluster: {held:?} in {namespaces} namespace(s), populated in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    fake.take_calls();

    // 1. The catch-up: the world as `render`'s first pass leaves it, with
    // every pod since Ready, which an older Tandem may have left (its
    // statuses, the views' and groups' statuses and budgets not written
    // yet). Run with the rate limit off: what it reports is the requests the
    // catch-up needs; at the limit they take that many over `--kube-api-qps`.
    let catching_up = Running::start_with(
        &fake,
        "tandem-a",
        &["--controllers", "--kube-api-qps", "0"],
        "info",
    )
    .await;
    let caught_up = settle(&fake, catching_up.pid(), cap).await;
    let requests: usize = caught_up.verbs.values().sum();
    let limit = tandem::reconcile::rate_limit::DEFAULT_QPS;
    println!(
        "catch-up from the rendered world, rate limit off: {} {:.1} s after ready (CPU {:.1} s); \
         requests: {:?} ({requests} in all: {:.0} s at the default {limit} a second)",
        if caught_up.within_cap {
            "settled"
        } else {
            "NOT settled"
        },
        caught_up.after.as_secs_f64(),
        caught_up.cpu,
        caught_up.verbs,
        requests as f64 / limit
    );
    drop(catching_up);
    fake.take_calls();

    // 2. The steady state: the same replica started again on the world it
    // left, at the default rate limit: it should list, reconcile everything
    // from its caches, and write nothing.
    let start = Instant::now();
    let tandem = Running::start_with(&fake, "tandem-a", &["--controllers"], "info").await;
    let ready = start.elapsed();
    let (peak_at_ready, _) = memory(tandem.pid());
    println!(
        "steady state: ready (caches listed) {:.1} s after start; peak RSS then {}",
        ready.as_secs_f64(),
        mib(peak_at_ready)
    );
    let steady = settle(&fake, tandem.pid(), cap).await;
    let (peak, now) = memory(tandem.pid());
    println!(
        "steady state: {} {:.1} s after ready (last request; then 10 s without one); \
         Tandem's CPU from ready to its last request {:.2} s; requests meanwhile: {:?}",
        if steady.within_cap {
            "settled"
        } else {
            "NOT settled"
        },
        steady.after.as_secs_f64(),
        steady.cpu,
        steady.verbs
    );
    println!("peak RSS {} (VmHWM), now {} (VmRSS)", mib(peak), mib(now));
    drop(tandem);

    println!(
        "\nBytes per cached object, by cache (caches started in this process): its JSON once \
         trimmed, and for kinds read as JSON the text kept beside the typed metadata (its \
         fields, labels and annotations)"
    );
    println!(
        "{:<58} {:>8} {:>12} {:>12}",
        "cache", "objects", "JSON", "kept as text"
    );
    for size in cached_sizes(&fake).await {
        let Some(each) = size.json.checked_div(size.objects) else {
            continue;
        };
        let text = size
            .text
            .and_then(|t| t.checked_div(size.objects))
            .map_or("typed".to_owned(), |t| t.to_string());
        println!(
            "{:<58} {:>8} {each:>12} {text:>12}",
            size.name, size.objects
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run());
}
