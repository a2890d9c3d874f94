//! The scale benchmark on the real control plane with nodes
//! (`tests/harness/src/control_plane.rs`): COUNT InferenceServices of story 4's
//! shape (prefill 1 replica x 2 nodes, decode 2 replicas x 4 nodes, 8 GPUs a
//! pod: 10 pods and 80 GPUs a service) in one namespace, on kwok GPU nodes
//! with GPUS_PER_NODE GPUs each (80 by default: ten pods a node, so that
//! the fleet is COUNT x 1.7 nodes and not COUNT x 17), bound by the real
//! kube-scheduler, made Ready by kwok's stages, rolled by the real LWS
//! manager. Phases, one after the other:
//! - create: every service created; their pods Ready; Tandem settled;
//! - scale: decode 2 -> 3 on every service (4 pods more each);
//! - rollout: a new image on both roles of every service.
//!
//! Each phase reports the time to Ready (every service's status says all its
//! replicas are Ready at the update revision, at its generation), the time
//! to settle (Tandem's last request before QUIET seconds with none but its
//! Lease's), Tandem's requests by verb (its `tandem_kube_requests_total`),
//! and the CPU seconds (utime + stime, `/proc/<pid>/stat`) and peak RSS
//! (`VmHWM`) of Tandem and of each process of the control plane.
//!
//! Ignored: minutes of the real control plane, not part of CI's run.
//!
//! ```sh
//! COUNT=50 CI=true cargo test --release --test cluster -- --ignored --nocapture
//! COUNT=200 PHASES=create,scale WIDE=0 CI=true cargo test --release --test cluster -- --ignored --nocapture
//! ```
//!
//! Then, unless WIDE=0, issue 37's scale and back ([`scale_and_back`]): one
//! service of story 1's shape from 10 to WIDE (1 000) replicas and back.
//!
//! The control plane runs with no audit log here
//! ([`ControlPlane::own_without_audit`]), unless AUDIT=1: then each phase
//! also says what Tandem's status patches moved
//! ([`harness::status_patches`]), and the API server's CPU includes writing
//! that log, so its figures are not the benchmark's. kube-apiserver's
//! priority-and-fairness is off, as in every real-control-plane test.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::control_plane::{self, ControlPlane};
use harness::measure::{clock_ticks, cpu_seconds, env_number, memory};
use harness::scenario::{condition, example, gpu_node, services_api};
use harness::serve::Tandem;
use harness::status_patches::{StatusPatches, status_patches};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The control plane of its own, without an audit log, the benchmark runs on.
pub(crate) const PLANE: &str = "scale-nodes";

const NAMESPACE: &str = "scale";

/// Tandem's `tandem_kube_requests_total` samples: (verb, kind) -> count.
async fn tandem_requests(tandem: &Tandem) -> BTreeMap<(String, String), f64> {
    let Ok((_, body)) = harness::probe(tandem.probes, "/metrics").await else {
        return BTreeMap::new();
    };
    let mut samples = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("tandem_kube_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        if let Ok(value) = value.trim().parse::<f64>() {
            samples.insert((label("verb"), label("kind")), value);
        }
    }
    samples
}

/// Requests that are activity: not watches (long-running) and not the
/// leader Lease's renewals.
fn activity(samples: &BTreeMap<(String, String), f64>) -> f64 {
    samples
        .iter()
        .filter(|((verb, kind), _)| verb != "watch" && !kind.starts_with("leases."))
        .map(|(_, v)| v)
        .sum()
}

/// Whether `service`'s status says every replica of every role is Ready at
/// the update revision, for its current generation.
fn done(service: &Value) -> bool {
    let desired: i64 = service["spec"]["roles"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["replicas"].as_i64().unwrap_or(1))
        .sum();
    let all = format!("{desired}/{desired}");
    let status = &service["status"];
    service["metadata"]["generation"] == status["observedGeneration"]
        && condition(service, "Ready").as_deref() == Some("True")
        && status["ready"].as_str() == Some(&all)
        && status["updated"].as_str() == Some(&all)
}

/// The costs of each process at one moment: name -> (CPU seconds, VmHWM KiB).
fn costs(plane: &ControlPlane, tandem: &Tandem, ticks: f64) -> BTreeMap<String, (f64, u64)> {
    let mut processes = plane.pids();
    processes.push(("tandem".to_owned(), tandem.pid()));
    processes
        .into_iter()
        .filter_map(|(name, pid)| {
            let pid = pid?;
            Some((name, (cpu_seconds(pid, ticks)?, memory(pid).0)))
        })
        .collect()
}

struct Phase {
    name: String,
    ready: Duration,
    settled: Duration,
    requests: BTreeMap<(String, String), f64>,
    cpu: BTreeMap<String, f64>,
    peak: BTreeMap<String, u64>,
    pods_ready: usize,
}

/// Waits until every service is [`done`] (the time from `start`), then
/// until Tandem has sent no request but watches and its Lease's for
/// `quiet` (the time of its last one, from `start`).
/// The Events stored in every namespace, by reason (an Event seen again
/// counts its `count`): who did what to the pods, nodes and groups during a
/// phase (the LWS manager's RecreateGroup, the taint eviction controller's
/// TaintManagerEviction, the node lifecycle controller's NodeNotReady, ...).
async fn event_reasons(client: &kube::Client) -> BTreeMap<String, u64> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
    let mut reasons = BTreeMap::new();
    let Ok(list) = events.list(&ListParams::default()).await else {
        return reasons;
    };
    for event in list.items {
        let times = event.count.and_then(|c| u64::try_from(c).ok()).unwrap_or(1);
        *reasons.entry(event.reason.unwrap_or_default()).or_default() += times.max(1);
    }
    reasons
}

/// Those of `now`'s reasons that grew since `before`, as `reason n, ...`.
fn reasons_since(now: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> String {
    now.iter()
        .filter_map(|(reason, n)| {
            let grew = n.saturating_sub(before.get(reason).copied().unwrap_or(0));
            (grew > 0).then(|| format!("{reason} {grew}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reasons that say a pod was taken away from under its replica: printed
/// as a phase goes, so that a phase that does not end says why.
const DISRUPTIONS: [&str; 6] = [
    "RecreateGroup",
    "TaintManagerEviction",
    "NodeNotReady",
    "Preempted",
    "Evicted",
    "Killing",
];

/// Waits for every service to be Ready and Tandem to settle, printing the
/// progress (and the disruptions' Events) every 20 s; the Events of the
/// whole wait are printed at its end. None when `timeout` ran out first,
/// and said so: the caller can still print the figures up to then.
async fn converge(
    client: &kube::Client,
    services: &Api<DynamicObject>,
    tandem: &Tandem,
    start: Instant,
    quiet: Duration,
    timeout: Duration,
) -> Option<(Duration, Duration)> {
    let mut last_activity = activity(&tandem_requests(tandem).await);
    let mut last_change = Instant::now();
    let ready;
    let mut polls = 0u32;
    let reasons_before = event_reasons(client).await;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = activity(&tandem_requests(tandem).await);
        if now != last_activity {
            last_activity = now;
            last_change = Instant::now();
        }
        polls += 1;
        if polls.is_multiple_of(4) {
            let list = services
                .list(&ListParams::default())
                .await
                .expect("the services");
            let values: Vec<Value> = list
                .items
                .iter()
                .map(|s| serde_json::to_value(s).expect("json"))
                .collect();
            let pending = values.iter().filter(|s| !done(s)).count();
            if pending == 0 {
                ready = start.elapsed();
                break;
            }
            if polls.is_multiple_of(40) {
                let mut reasons = event_reasons(client).await;
                reasons.retain(|r, _| DISRUPTIONS.contains(&r.as_str()));
                eprintln!(
                    "  {:>6.1} s: {pending} of {} services not yet Ready; Tandem's requests {now}; Events so far: {}",
                    start.elapsed().as_secs_f64(),
                    values.len(),
                    reasons_since(&reasons, &reasons_before)
                );
            }
        }
        if start.elapsed() >= timeout {
            eprintln!("  not Ready within {timeout:?}");
            return None;
        }
    }
    loop {
        if last_change.elapsed() >= quiet {
            eprintln!(
                "  Events stored meanwhile, by reason: {}",
                reasons_since(&event_reasons(client).await, &reasons_before)
            );
            return Some((ready, last_change.duration_since(start)));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = activity(&tandem_requests(tandem).await);
        if now != last_activity {
            last_activity = now;
            last_change = Instant::now();
        }
        if start.elapsed() >= timeout {
            eprintln!("  Ready in {ready:?}, but Tandem not settled within {timeout:?}");
            return None;
        }
    }
}

/// Ends the benchmark when a phase did not finish within `timeout`, with
/// the end of Tandem's log.
fn stopped(tandem: &Tandem, timeout: Duration) -> ! {
    panic!(
        "not done within {timeout:?}; tandem's log (end):\n{}",
        harness::scenario::tail(&tandem.log(), 40)
    )
}

async fn pods_ready(client: &kube::Client, namespace: &str) -> usize {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.list(&ListParams::default())
        .await
        .expect("the pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && harness::scenario::is_ready(p))
        .count()
}

/// Sends `patch` (a JSON patch) to every service, eight at a time.
async fn patch_all(services: &Api<DynamicObject>, count: usize, patch: Value) {
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a JSON patch");
    futures::stream::iter(0..count)
        .map(|i| {
            let patch = patch.clone();
            async move {
                services
                    .patch(
                        &format!("svc-{i:04}"),
                        &PatchParams::default(),
                        &Patch::<()>::Json(patch),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("patching svc-{i:04}: {e}"));
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
}

pub(crate) async fn story_4_services_on_kwok_nodes() {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let count: usize = env_number("COUNT", 50);
    let gpus_per_node: u32 = env_number("GPUS_PER_NODE", 80);
    let quiet = Duration::from_secs(env_number("QUIET", 10));
    let timeout = Duration::from_secs(env_number("PHASE_TIMEOUT", 1800));
    let pods_per_node = usize::try_from(gpus_per_node / 8).expect("a small count");
    // 14 pods a service once decode has 3 replicas, and room for the
    // rollout's replacements.
    let node_count = (count * 16).div_ceil(pods_per_node.max(1)) + 2;
    let ticks = clock_ticks();

    let audited = env_number::<u8>("AUDIT", 0) == 1;
    let plane = if audited {
        ControlPlane::own(PLANE)
    } else {
        ControlPlane::own_without_audit(PLANE)
    };
    let mut patches_before = StatusPatches::default();
    // Lives to the end of the test process (the sampler borrows it), which
    // ends it as it ends every process of the control plane.
    let tandem: &'static Tandem =
        Box::leak(Box::new(Tandem::start_logging(plane, "tandem-0", "info")));
    tandem.register(plane);
    let client = plane.namespace(NAMESPACE).await;
    let nodes: Vec<Value> = (0..node_count)
        .map(|i| gpu_node(NAMESPACE, i, gpus_per_node))
        .collect();
    let nodes_start = Instant::now();
    plane.nodes(&nodes).await;
    eprintln!(
        "{node_count} nodes of {gpus_per_node} GPUs Ready in {:.1} s",
        nodes_start.elapsed().as_secs_f64()
    );
    let mut before = costs(plane, tandem, ticks);
    let mut requests_before = tandem_requests(tandem).await;
    let mut phases = vec![Phase {
        name: format!("start: control plane, Tandem, {node_count} nodes (idle)"),
        ready: Duration::ZERO,
        settled: Duration::ZERO,
        requests: requests_before.clone(),
        cpu: before.iter().map(|(k, (c, _))| (k.clone(), *c)).collect(),
        peak: before.iter().map(|(k, (_, m))| (k.clone(), *m)).collect(),
        pods_ready: 0,
    }];

    let story = example("examples/seeds/story4-prefill-decode-multinode.yaml");
    let services = services_api(&client, NAMESPACE);
    let plans: Vec<(&str, Option<Value>)> = vec![
        ("create", None),
        (
            "scale: decode 2 -> 3 on every service",
            Some(json!([{"op": "replace", "path": "/spec/roles/1/replicas", "value": 3}])),
        ),
        (
            "rollout: a new image on both roles of every service",
            Some(json!([
                {"op": "replace", "path": "/spec/roles/0/template/spec/containers/0/image",
                 "value": "vllm/vllm-openai:v0.11.1"},
                {"op": "replace", "path": "/spec/roles/1/template/spec/containers/0/image",
                 "value": "vllm/vllm-openai:v0.11.1"}
            ])),
        ),
    ];
    // PHASES=create,scale leaves the rollout out (a phase is named by its
    // first word); all three by default.
    let wanted = std::env::var("PHASES").unwrap_or_else(|_| "create,scale,rollout".to_owned());
    for (name, patch) in plans {
        let word = name.split(':').next().unwrap_or_default();
        if !wanted.split(',').any(|w| w.trim() == word) {
            continue;
        }
        eprintln!("phase {name}: {count} services");
        let start = Instant::now();
        match patch {
            None => {
                futures::stream::iter(0..count)
                    .map(|i| {
                        let mut service = story.clone();
                        service["metadata"] =
                            json!({"name": format!("svc-{i:04}"), "namespace": NAMESPACE});
                        // A short grace period: kwok keeps a replaced pod
                        // Terminating for all of it, and LWS recreates a
                        // group's pods under the same names only once they
                        // are gone.
                        for role in service["spec"]["roles"]
                            .as_array_mut()
                            .into_iter()
                            .flatten()
                        {
                            role["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
                        }
                        let services = &services;
                        async move {
                            services
                                .create(
                                    &PostParams::default(),
                                    &serde_json::from_value(service).expect("a service"),
                                )
                                .await
                                .unwrap_or_else(|e| panic!("creating svc-{i:04}: {e}"));
                        }
                    })
                    .buffer_unordered(8)
                    .collect::<Vec<_>>()
                    .await;
            }
            Some(patch) => patch_all(&services, count, patch).await,
        }
        eprintln!("  sent in {:.1} s", start.elapsed().as_secs_f64());
        let outcome = converge(&client, &services, tandem, start, quiet, timeout).await;
        let (ready, settled) = outcome.unwrap_or((timeout, timeout));
        let after = costs(plane, tandem, ticks);
        let requests = tandem_requests(tandem).await;
        let mut delta = requests.clone();
        for (key, value) in &requests_before {
            *delta.entry(key.clone()).or_default() -= value;
        }
        delta.retain(|_, v| *v != 0.0);
        let phase = Phase {
            name: match outcome {
                Some(_) => name.to_owned(),
                None => format!("{name} (stopped at {timeout:?}: the figures run to then)"),
            },
            ready,
            settled,
            requests: delta,
            cpu: after
                .iter()
                .map(|(k, (c, _))| (k.clone(), c - before.get(k).map_or(0.0, |b| b.0)))
                .collect(),
            peak: after.iter().map(|(k, (_, m))| (k.clone(), *m)).collect(),
            pods_ready: pods_ready(&client, NAMESPACE).await,
        };
        print_phase(&phase);
        if audited {
            let patches = status_patches(
                &plane.requests_where(|r| r.by_tandem() && r.resource == "inferenceservices"),
            );
            print_status_patches(&patches, &patches_before);
            patches_before = patches;
        }
        if outcome.is_none() {
            stopped(tandem, timeout);
        }
        phases.push(phase);
        before = after;
        requests_before = requests;
    }
    println!("\n## COUNT={count}, {node_count} nodes of {gpus_per_node} GPUs\n");
    print_table(&phases);

    let wide: usize = env_number("WIDE", 1000);
    if wide > 0 {
        scale_and_back(plane, tandem, wide, gpus_per_node, quiet, timeout, ticks).await;
    }
}

const WIDE_NAMESPACE: &str = "scale-wide";

/// What the sampler saw at its peak during a phase.
#[derive(Default, Debug)]
struct Peaks {
    leader_worker_sets: usize,
    pods: usize,
    /// Tandem's requests a second (watches and Lease renewals left out),
    /// the highest over a 5 s window.
    requests_per_second: f64,
}

/// Every second: the LeaderWorkerSets and pods of `namespace` (metadata
/// only) and Tandem's requests, keeping their peaks, until aborted.
fn sample(
    client: kube::Client,
    tandem: &'static Tandem,
    namespace: &'static str,
    peaks: std::sync::Arc<std::sync::Mutex<Peaks>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let sets = Api::<DynamicObject>::namespaced_with(
            client,
            namespace,
            &kube::api::ApiResource {
                group: "leaderworkerset.x-k8s.io".into(),
                version: "v1".into(),
                api_version: harness::scenario::LWS.into(),
                kind: "LeaderWorkerSet".into(),
                plural: "leaderworkersets".into(),
            },
        );
        let mut window = std::collections::VecDeque::new();
        loop {
            let pod_count = pods
                .list_metadata(&ListParams::default())
                .await
                .map_or(0, |l| l.items.len());
            let set_count = sets
                .list_metadata(&ListParams::default())
                .await
                .map_or(0, |l| l.items.len());
            window.push_back((Instant::now(), activity(&tandem_requests(tandem).await)));
            while window.len() > 6 {
                window.pop_front();
            }
            let rate = match (window.front(), window.back()) {
                (Some((t0, a0)), Some((t1, a1))) if t1 > t0 => {
                    (a1 - a0) / t1.duration_since(*t0).as_secs_f64()
                }
                _ => 0.0,
            };
            {
                let mut peaks = peaks.lock().expect("the peaks");
                peaks.pods = peaks.pods.max(pod_count);
                peaks.leader_worker_sets = peaks.leader_worker_sets.max(set_count);
                peaks.requests_per_second = peaks.requests_per_second.max(rate);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Issue 37's scale and back: one service of story 1's shape (one pod, one
/// GPU a replica) at 10 replicas, scaled to `wide` and back to 10, on nodes
/// of its own. For each step: the time to converge (the status says every
/// replica Ready, and for the way down, the LeaderWorkerSets and pods gone
/// too), the peak LeaderWorkerSets and pods, the Events written (by
/// Tandem, from its requests; and by everyone, the Events stored in the
/// namespace), Tandem's peak requests a second, and each process's CPU.
#[allow(clippy::too_many_arguments)]
async fn scale_and_back(
    plane: &'static ControlPlane,
    tandem: &'static Tandem,
    wide: usize,
    gpus_per_node: u32,
    quiet: Duration,
    timeout: Duration,
    ticks: f64,
) {
    let client = plane.namespace(WIDE_NAMESPACE).await;
    let per_node = usize::try_from(gpus_per_node)
        .expect("a small count")
        .min(110);
    let node_count = wide.div_ceil(per_node.max(1)) + 2;
    let nodes: Vec<Value> = (0..node_count)
        .map(|i| gpu_node(WIDE_NAMESPACE, i, gpus_per_node))
        .collect();
    plane.nodes(&nodes).await;
    let services = services_api(&client, WIDE_NAMESPACE);
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    service["metadata"] = json!({"name": "wide", "namespace": WIDE_NAMESPACE});
    service["spec"]["roles"][0]["replicas"] = json!(10);
    service["spec"]["roles"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
    let start = Instant::now();
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(service).expect("a service"),
        )
        .await
        .expect("the wide service");
    let (ready, settled) = converge(&client, &services, tandem, start, quiet, timeout)
        .await
        .unwrap_or_else(|| stopped(tandem, timeout));
    eprintln!(
        "wide service at 10: Ready {:.1} s, settled {:.1} s",
        ready.as_secs_f64(),
        settled.as_secs_f64()
    );
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), WIDE_NAMESPACE);
    let mut before = costs(plane, tandem, ticks);
    let mut requests_before = tandem_requests(tandem).await;
    let mut events_before = events
        .list_metadata(&ListParams::default())
        .await
        .map_or(0, |l| l.items.len());
    println!(
        "\n## Scale and back: one service of story 1's shape, 10 -> {wide} -> 10 replicas, {node_count} nodes of {gpus_per_node} GPUs\n"
    );
    println!(
        "| step | to Ready | to settled | objects gone | peak LeaderWorkerSets / pods | Tandem's requests (by verb) | Tandem's Events written | Events stored (all writers) | Tandem's peak requests/s (5 s window) / mean | {} |",
        PROCESSES
            .map(|p| format!("{p} CPU s / peak MiB"))
            .join(" | ")
    );
    println!("|{}", "---|".repeat(9 + PROCESSES.len()));
    for (step, replicas) in [
        (format!("10 -> {wide}"), wide),
        (format!("{wide} -> 10"), 10),
    ] {
        let peaks = std::sync::Arc::new(std::sync::Mutex::new(Peaks::default()));
        let sampler = sample(client.clone(), tandem, WIDE_NAMESPACE, peaks.clone());
        let start = Instant::now();
        patch_named(
            &services,
            "wide",
            json!([{"op": "replace", "path": "/spec/roles/0/replicas", "value": replicas}]),
        )
        .await;
        let (ready, settled) = converge(&client, &services, tandem, start, quiet, timeout)
            .await
            .unwrap_or_else(|| stopped(tandem, timeout));
        // The way down: the status may say 10/10 before the surplus is gone.
        let pods: Api<Pod> = Api::namespaced(client.clone(), WIDE_NAMESPACE);
        loop {
            let left = pods
                .list_metadata(&ListParams::default())
                .await
                .map_or(usize::MAX, |l| l.items.len());
            if left <= replicas {
                break;
            }
            assert!(start.elapsed() < timeout, "{left} pods left");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let gone = start.elapsed();
        sampler.abort();
        let after = costs(plane, tandem, ticks);
        let requests = tandem_requests(tandem).await;
        let mut delta = requests.clone();
        for (key, value) in &requests_before {
            *delta.entry(key.clone()).or_default() -= value;
        }
        let mut by_verb: BTreeMap<String, f64> = BTreeMap::new();
        let mut tandem_events = 0.0;
        for ((verb, kind), value) in &delta {
            if *value == 0.0 || kind.starts_with("leases.") || verb == "watch" {
                continue;
            }
            if kind == "events" || kind.starts_with("events.") {
                tandem_events += value;
            }
            *by_verb.entry(verb.clone()).or_default() += value;
        }
        let total: f64 = by_verb.values().sum();
        let events_now = events
            .list_metadata(&ListParams::default())
            .await
            .map_or(0, |l| l.items.len());
        let peaks = peaks.lock().expect("the peaks");
        let cells: Vec<String> = PROCESSES
            .iter()
            .map(|p| {
                let cpu = after.get(*p).map_or(0.0, |a| a.0) - before.get(*p).map_or(0.0, |b| b.0);
                format!(
                    "{cpu:.1} / {:.0}",
                    after.get(*p).map_or(0, |a| a.1) as f64 / 1024.0
                )
            })
            .collect();
        println!(
            "| {step} | {:.1} s | {:.1} s | {:.1} s | {} / {} | {} | {tandem_events} | {} | {:.1} / {:.1} | {} |",
            ready.as_secs_f64(),
            settled.as_secs_f64(),
            gone.as_secs_f64(),
            peaks.leader_worker_sets,
            peaks.pods,
            by_verb
                .iter()
                .map(|(v, n)| format!("{v} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            events_now.saturating_sub(events_before),
            peaks.requests_per_second,
            total / settled.as_secs_f64().max(1.0),
            cells.join(" | ")
        );
        for ((verb, kind), value) in &delta {
            if *value != 0.0 {
                eprintln!("    {verb} {kind}: {value}");
            }
        }
        before = after;
        requests_before = requests;
        events_before = events_now;
    }
}

async fn patch_named(services: &Api<DynamicObject>, name: &str, patch: Value) {
    let patch: json_patch::Patch = serde_json::from_value(patch).expect("a JSON patch");
    services
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .unwrap_or_else(|e| panic!("patching {name}: {e}"));
}

fn print_phase(phase: &Phase) {
    eprintln!(
        "  {}: Ready {:.1} s, settled {:.1} s, pods Ready {}",
        phase.name,
        phase.ready.as_secs_f64(),
        phase.settled.as_secs_f64(),
        phase.pods_ready
    );
    for ((verb, kind), value) in &phase.requests {
        eprintln!("    {verb} {kind}: {value}");
    }
    for (name, cpu) in &phase.cpu {
        eprintln!(
            "    {name}: {cpu:.1} CPU s, peak {:.1} MiB",
            phase.peak.get(name).copied().unwrap_or(0) as f64 / 1024.0
        );
    }
}

/// What a phase's status patches moved: `now` less `before`, both read
/// from the start of the audit log.
fn print_status_patches(now: &StatusPatches, before: &StatusPatches) {
    let less = |now: usize, before: Option<&usize>| now - before.copied().unwrap_or(0);
    eprintln!("    status patches by what they moved:");
    for (class, count) in &now.by_class {
        eprintln!(
            "      {class}: {}",
            less(*count, before.by_class.get(class))
        );
    }
    let mut fields: Vec<(usize, &String)> = now
        .by_field
        .iter()
        .map(|(field, count)| (less(*count, before.by_field.get(field)), field))
        .filter(|(count, _)| *count > 0)
        .collect();
    fields.sort_by(|a, b| b.cmp(a));
    for (count, field) in fields {
        eprintln!("      {count} moved {field}");
    }
    let from = before.timeline.len();
    let held: Vec<String> = [1_000, 2_000, 5_000, 10_000]
        .iter()
        .map(|hold| format!("{} s: {}", hold / 1_000, now.repaced(from, *hold)))
        .collect();
    eprintln!(
        "    the phase's {} status patches replayed with a hold of {}",
        now.timeline.len().saturating_sub(from),
        held.join(", ")
    );
}

/// The processes in the table's order.
const PROCESSES: [&str; 7] = [
    "tandem",
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "lws-manager",
    "kwok",
];

fn print_table(phases: &[Phase]) {
    println!(
        "| phase | to Ready | to settled | pods Ready | Tandem's requests (by verb; watches and Lease renewals apart) | {} | Tandem's share of the control plane's CPU |",
        PROCESSES
            .map(|p| format!("{p} CPU s / peak MiB"))
            .join(" | ")
    );
    println!("|{}", "---|".repeat(5 + PROCESSES.len() + 1));
    for phase in phases {
        let mut by_verb: BTreeMap<String, f64> = BTreeMap::new();
        let mut leases = 0.0;
        for ((verb, kind), value) in &phase.requests {
            if kind.starts_with("leases.") {
                leases += value;
            } else {
                *by_verb.entry(verb.clone()).or_default() += value;
            }
        }
        let mut verbs: Vec<String> = by_verb
            .iter()
            .map(|(verb, value)| format!("{verb} {value}"))
            .collect();
        verbs.push(format!("(Lease {leases})"));
        let cells: Vec<String> = PROCESSES
            .iter()
            .map(|p| {
                format!(
                    "{:.1} / {:.0}",
                    phase.cpu.get(*p).copied().unwrap_or(0.0),
                    phase.peak.get(*p).copied().unwrap_or(0) as f64 / 1024.0
                )
            })
            .collect();
        let total: f64 = PROCESSES
            .iter()
            .map(|p| phase.cpu.get(*p).copied().unwrap_or(0.0))
            .sum();
        let share = phase.cpu.get("tandem").copied().unwrap_or(0.0) / total.max(f64::EPSILON);
        println!(
            "| {} | {:.1} s | {:.1} s | {} | {} | {} | {:.1} % |",
            phase.name,
            phase.ready.as_secs_f64(),
            phase.settled.as_secs_f64(),
            phase.pods_ready,
            verbs.join(", "),
            cells.join(" | "),
            share * 100.0
        );
    }
}
