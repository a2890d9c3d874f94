//! The real HorizontalPodAutoscaler controller scaling Tandem's objects, on
//! the tests' control plane with nodes (`tests/harness/src/control_plane.rs`):
//! kube-controller-manager runs the HPA controller (a sync every
//! [`HPA_SYNC_SECONDS`] s), and the custom metrics API is
//! custom-metrics-apiserver's test adapter behind the aggregation layer,
//! serving the values each scenario writes. kwok makes the pods Ready; the
//! values stand for what vLLM would export (nothing runs a model here:
//! tests/cluster/README.md).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::control_plane::{CustomMetrics, HPA_SYNC_SECONDS};
use harness::scenario::{IS, Invariant, LWS, Quiet, Scenario, example, label, wait_service_ready};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const VIEWS: &str = "fusioninfer.io/v1alpha1";
const HPA: &str = "autoscaling/v2";
/// The metric `examples/scaleview/hpa.yaml` scales on: vLLM's waiting
/// requests, per pod.
const WAITING: &str = "vllm:num_requests_waiting";

/// Plays vLLM's `vllm:num_requests_waiting` for the pods of ScaleView
/// `view`: every second, `load` waiting requests shared evenly over the
/// pods its `status.selector` picks (as a router spreads its queue),
/// written per pod.
async fn queue(scenario: &Scenario, metrics: &'static CustomMetrics, view: &str) -> QueueHandle {
    per_pod(scenario, metrics, view, WAITING, |total, pods| {
        (total / pods).to_string()
    })
    .await
}

/// Plays per-pod metric `metric` for the pods of ScaleView `view`: every
/// second, `value(load, pods)` for each of the view's live pods.
async fn per_pod(
    scenario: &Scenario,
    metrics: &'static CustomMetrics,
    view: &str,
    metric: &'static str,
    value: fn(u64, u64) -> String,
) -> QueueHandle {
    let load = Arc::new(Mutex::new(0u64));
    let shared = load.clone();
    let namespace = scenario.namespace.clone();
    let view = view.to_owned();
    let views = scenario.api(VIEWS, "ScaleView").await;
    let pods: Api<Pod> = Api::namespaced(scenario.client.clone(), &namespace);
    let task = tokio::spawn(async move {
        loop {
            let selector = views
                .get_opt(&view)
                .await
                .ok()
                .flatten()
                .and_then(|v| v.data["status"]["selector"].as_str().map(str::to_owned));
            if let Some(selector) = selector
                && let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await
            {
                let live: Vec<String> = list
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                let total = *shared.lock().expect("the load");
                let count = u64::try_from(live.len().max(1)).unwrap_or(1);
                for pod in &live {
                    metrics
                        .set(&namespace, "pods", pod, metric, &value(total, count))
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    QueueHandle { load, task }
}

struct QueueHandle {
    load: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl QueueHandle {
    fn set(&self, waiting: u64) {
        *self.load.lock().expect("the load") = waiting;
    }
}

impl Drop for QueueHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The replicas of each role of `service` as its LeaderWorkerSets stand
/// (not being deleted), by role.
async fn replicas_by_role(scenario: &Scenario) -> BTreeMap<String, usize> {
    let mut roles = BTreeMap::new();
    for set in scenario.list(LWS, "LeaderWorkerSet").await {
        if set["metadata"]["deletionTimestamp"].is_null() {
            *roles
                .entry(label(&set, "fusioninfer.io/role-name").to_owned())
                .or_insert(0) += 1;
        }
    }
    roles
}

/// The HPA's `kubectl get hpa` figures: the current metric (average value
/// per pod), the current and the desired replicas.
fn hpa_figures(hpa: &Value) -> (String, i64, i64) {
    let status = &hpa["status"];
    (
        status["currentMetrics"][0]["pods"]["current"]["averageValue"]
            .as_str()
            .unwrap_or("<unknown>")
            .to_owned(),
        status["currentReplicas"].as_i64().unwrap_or(-1),
        status["desiredReplicas"].as_i64().unwrap_or(-1),
    )
}

/// A scenario in `namespace` running `examples/scaleview/decode-ondemand-spot.yaml`
/// (service spot-decode, view spot-decode-sv), each object changed by
/// `adjust` first, Ready, on one on-demand and `spot` spot nodes, with
/// the custom metrics API up. None when the control plane cannot run here.
async fn spot_decode(
    namespace: &str,
    spot: usize,
    adjust: impl Fn(&mut Value),
) -> Option<(Scenario, &'static CustomMetrics)> {
    let scenario = Scenario::start(namespace).await?;
    scenario.nodes(1).await;
    scenario.spot_nodes(spot).await;
    let metrics = scenario.plane.custom_metrics().await;
    for mut object in harness::yaml_documents(&harness::repo_path(
        "examples/scaleview/decode-ondemand-spot.yaml",
    )) {
        adjust(&mut object);
        let created = scenario.create_or_fail(&object).await;
        // The view, created right after its service, starts from the
        // service's replicas even when the webhook's cache has not seen the
        // service yet (it reads it live): an unset spec.replicas is 0 to
        // an HPA, which then stops scaling.
        if object["kind"] == "ScaleView" {
            assert!(
                created.data["spec"]["replicas"].is_i64(),
                "the view's spec.replicas set at creation: {:#}",
                created.data["spec"]
            );
        }
    }
    wait_service_ready(&scenario, "spot-decode").await;
    Some((scenario, metrics))
}

/// Waits up to 90 s for spot-decode's decode roles to stand at `on_demand`
/// and `spot` replicas (no spot LeaderWorkerSet at 0) with one pod each,
/// and prefill's.
async fn decode_at(scenario: &Scenario, on_demand: usize, spot: usize, what: &str) {
    scenario
        .eventually(90, what, || async {
            let roles = replicas_by_role(scenario).await;
            let pods = scenario.names("v1", "Pod").await;
            if roles.get("decode-ondemand") == Some(&on_demand)
                && roles.get("decode-spot").copied().unwrap_or(0) == spot
                && (spot > 0 || !roles.contains_key("decode-spot"))
                && pods.len() == 1 + on_demand + spot
            {
                Ok(())
            } else {
                Err(format!("{roles:?}, pods {pods:?}"))
            }
        })
        .await;
}

/// Waits up to `seconds` for ScaleView `view`'s `spec.replicas` to be
/// `replicas` (what the HPA writes through `/scale`).
async fn view_becomes(scenario: &Scenario, view: &str, replicas: i64, seconds: u64) {
    scenario
        .eventually(seconds, &format!("{view} at {replicas}"), || async {
            match view_replicas(scenario, view).await {
                Some(now) if now == replicas => Ok(()),
                other => Err(format!("spec.replicas {other:?}")),
            }
        })
        .await;
}

/// Waits up to 60 s for condition `kind` of HPA `name` to have `status`;
/// its reason and message.
async fn hpa_says(scenario: &Scenario, name: &str, kind: &str, status: &str) -> (String, String) {
    scenario
        .eventually(60, &format!("HPA {name}: {kind}={status}"), || async {
            let hpa = scenario
                .get(HPA, "HorizontalPodAutoscaler", name)
                .await
                .unwrap_or_default();
            match hpa_condition(&hpa, kind) {
                Some((now, reason, message)) if now == status => Ok((reason, message)),
                other => Err(format!("{other:?}")),
            }
        })
        .await
}

/// `examples/scaleview/hpa.yaml` on the view of
/// `examples/scaleview/decode-ondemand-spot.yaml` (on-demand decode at
/// priority 1 up to 2 replicas, spot decode after), as written but for a
/// short scale-down stabilization window (Kubernetes' default is 5
/// minutes) and a 3-second drain:
///
/// - **Up.** 30 waiting requests against a target of 10 per pod: the HPA
///   writes the view's `/scale` to 3, the view fills on-demand first (2)
///   and puts the third replica on spot; `kubectl get hpa`'s figures show
///   the metric and 3 replicas.
/// - **Down.** The queue falls to 20: after its stabilization window the
///   HPA scales to 2, and the spot replica is the one that goes. The queue
///   empties: the HPA scales to its minimum, 1, and an on-demand replica
///   goes. Each is drained (out of the traffic label) before its pods are
///   deleted.
/// - Throughout, the floor held, no write was refused or changed nothing,
///   and Tandem is quiet after.
pub(crate) async fn an_hpa_on_a_view_scales_it_by_priority_on_a_served_metric_and_back_down_spot_first()
 {
    let Some((scenario, metrics)) = spot_decode("autoscale-view", 1, |object| {
        for role in object["spec"]["roles"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter(|r| r["componentType"] == "decoder")
        {
            role["drain"] = json!({"seconds": 3});
        }
    })
    .await
    else {
        return;
    };

    let mut hpa = example("examples/scaleview/hpa.yaml");
    hpa["spec"]["behavior"] = fast();
    // The HPA reads the metric (an empty queue) before it rises, so what is
    // timed below is the HPA's reaction, not its first discovery of the API.
    let load = autoscale_view(&scenario, metrics, &hpa, 1).await;

    // Up: 30 waiting requests, 10 per pod wanted.
    let raised = Instant::now();
    load.set(30);
    view_becomes(&scenario, "spot-decode-sv", 3, 60).await;
    eprintln!(
        "the HPA wrote the view's /scale {:.1} s after the queue rose (sync period {HPA_SYNC_SECONDS} s)",
        raised.elapsed().as_secs_f64()
    );
    scenario
        .eventually(90, "on-demand 2, spot 1, all Ready", || async {
            let roles = replicas_by_role(&scenario).await;
            let view = scenario
                .get(VIEWS, "ScaleView", "spot-decode-sv")
                .await
                .unwrap_or_default();
            let split = &view["status"]["groups"];
            let wanted = json!([
                {"group": "decode-ondemand", "replicas": 2, "readyReplicas": 2},
                {"group": "decode-spot", "replicas": 1, "readyReplicas": 1},
            ]);
            if roles.get("decode-ondemand") == Some(&2)
                && roles.get("decode-spot") == Some(&1)
                && view["status"]["replicas"] == 3
                && *split == wanted
            {
                Ok(())
            } else {
                Err(format!("{roles:?}, view status {:#}", view["status"]))
            }
        })
        .await;
    let spot_pods: Vec<String> = scenario
        .list("v1", "Pod")
        .await
        .iter()
        .filter(|p| label(p, "fusioninfer.io/role-name") == "decode-spot")
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(spot_pods.len(), 1, "one spot pod: {spot_pods:?}");
    hpa_reads(&scenario, "spot-decode-sv", "10", 3).await;

    // Down: the queue empties. Every pod event from here: when each pod was
    // first seen being deleted, and with which traffic label.
    let seen: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let record = seen.clone();
    let pods: Api<Pod> = Api::namespaced(scenario.client.clone(), &scenario.namespace);
    let watch = tokio::spawn(async move {
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event
                && pod.metadata.deletion_timestamp.is_some()
            {
                let labels = pod.metadata.labels.clone().unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap_or_default();
                let mut seen = record.lock().expect("seen");
                if !seen.iter().any(|(n, _, _)| *n == name) {
                    seen.push((
                        name,
                        labels
                            .get("fusioninfer.io/role-name")
                            .cloned()
                            .unwrap_or_default(),
                        labels
                            .get("fusioninfer.io/traffic")
                            .cloned()
                            .unwrap_or_default(),
                    ));
                }
            }
        }
    });
    // 20 waiting requests: 2 replicas are enough, and the view gives up
    // its spot replica, keeping both on-demand ones.
    load.set(20);
    decode_at(
        &scenario,
        2,
        0,
        "the HPA scaled the view to 2, on-demand only",
    )
    .await;
    // An empty queue: down to the HPA's minimum, one on-demand replica.
    load.set(0);
    decode_at(
        &scenario,
        1,
        0,
        "the HPA scaled the view down to 1, on-demand kept",
    )
    .await;
    watch.abort();
    let seen = seen.lock().expect("seen").clone();
    let roles: Vec<&str> = seen.iter().map(|(_, role, _)| role.as_str()).collect();
    assert_eq!(
        roles,
        ["decode-spot", "decode-ondemand"],
        "the spot replica deleted first, then one on-demand: {seen:?}"
    );
    assert_eq!(seen[0].0, spot_pods[0], "the spot replica's pod went");
    for (pod, _, traffic) in &seen {
        assert_eq!(
            traffic, "draining",
            "{pod} was out of traffic before it was deleted"
        );
    }
    drop(load);
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", "spot-decode"))
        .await;
}

/// The `behavior` of the scenarios' HPAs: up at once, down after a 6 s
/// window instead of Kubernetes' 5 minutes, so a scenario runs in seconds.
fn fast() -> Value {
    json!({
        "scaleDown": {"stabilizationWindowSeconds": 6},
        "scaleUp": {"stabilizationWindowSeconds": 0},
    })
}

/// Plays the queue of ScaleView `view`'s pods ([`queue`], empty at first),
/// creates `hpa` on the view and waits until it reads the empty queue with
/// the view at `replicas`: from then on, what the HPA does answers the
/// queue the scenario sets.
async fn autoscale_view(
    scenario: &Scenario,
    metrics: &'static CustomMetrics,
    hpa: &Value,
    replicas: i64,
) -> QueueHandle {
    let view = hpa["spec"]["scaleTargetRef"]["name"]
        .as_str()
        .expect("the HPA's view");
    let load = queue(scenario, metrics, view).await;
    scenario.create_or_fail(hpa).await;
    hpa_reads(
        scenario,
        hpa["metadata"]["name"].as_str().expect("the HPA's name"),
        "0",
        replicas,
    )
    .await;
    load
}

/// Waits until HPA `name` reads `metric` per pod and has `replicas` current
/// and desired, as `kubectl get hpa` would show it.
async fn hpa_reads(scenario: &Scenario, name: &str, metric: &str, replicas: i64) {
    scenario
        .eventually(
            90,
            &format!("HPA {name} at {metric} per pod and {replicas} replicas"),
            || async {
                let hpa = scenario
                    .get(HPA, "HorizontalPodAutoscaler", name)
                    .await
                    .unwrap_or_default();
                match hpa_figures(&hpa) {
                    (m, current, desired)
                        if m == metric && current == replicas && desired == replicas =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?}: {:#}", hpa["status"])),
                }
            },
        )
        .await;
}

/// The condition `kind` of an HPA: (status, reason, message).
fn hpa_condition(hpa: &Value, kind: &str) -> Option<(String, String, String)> {
    let found = hpa["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?;
    let text = |key: &str| found[key].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

/// The `spec.replicas` of a ScaleView.
async fn view_replicas(scenario: &Scenario, view: &str) -> Option<i64> {
    scenario
        .get(VIEWS, "ScaleView", view)
        .await
        .and_then(|v| v["spec"]["replicas"].as_i64())
}

/// `examples/render/hpa-prefill-decode-follows.yaml` in a cluster: an HPA
/// scales prefill through ScaleView spot-prefill-sv, and
/// ResourceScalingGroup prefill-decode-ratio keeps decode at 4 per prefill
/// replica through ScaleView spot-decode-sv (on-demand up to 2, then spot).
/// The view starts at 1 replica (the file's 3 is an HPA's count already
/// there) and the HPA stops at 3.
///
/// At every HPA step (queue 20 → 2 prefill, 30 → 3, 10 → 1), once settled,
/// decode's view and LeaderWorkerSets are at 4 × prefill, split on-demand
/// first; no serving role was ever without a ready replica, no write was
/// refused or changed nothing, and Tandem is quiet after.
pub(crate) async fn an_hpa_on_prefill_moves_decode_at_its_ratio_at_every_step() {
    let Some(scenario) = Scenario::start("autoscale-ratio").await else {
        return;
    };
    scenario.nodes(1).await;
    scenario.spot_nodes(2).await;
    let metrics = scenario.plane.custom_metrics().await;
    let mut hpa = None;
    for mut object in harness::yaml_documents(&harness::repo_path(
        "examples/render/hpa-prefill-decode-follows.yaml",
    )) {
        match object["kind"].as_str() {
            Some("HorizontalPodAutoscaler") => {
                hpa = Some(object);
                continue;
            }
            Some("ScaleView") if object["metadata"]["name"] == "spot-prefill-sv" => {
                object["spec"]["replicas"] = json!(1);
            }
            Some("InferenceService") => {
                for role in object["spec"]["roles"].as_array_mut().expect("roles") {
                    role["drain"] = json!({"seconds": 2});
                }
            }
            _ => {}
        }
        scenario.create_or_fail(&object).await;
    }
    let mut hpa = hpa.expect("the example's HPA");
    hpa["spec"]["maxReplicas"] = json!(3);
    hpa["spec"]["behavior"] = fast();
    wait_service_ready(&scenario, "spot-decode").await;
    let load = autoscale_view(&scenario, metrics, &hpa, 1).await;

    for (waiting, prefill) in [(20u64, 2usize), (30, 3), (10, 1)] {
        load.set(waiting);
        let decode = 4 * prefill;
        let on_demand = decode.min(2);
        scenario
            .eventually(
                120,
                &format!("{waiting} waiting: prefill {prefill}, decode {decode} ({on_demand} on-demand), all Ready"),
                || async {
                    let roles = replicas_by_role(&scenario).await;
                    let views = (
                        view_replicas(&scenario, "spot-prefill-sv").await,
                        view_replicas(&scenario, "spot-decode-sv").await,
                    );
                    let service = scenario
                        .get(IS, "InferenceService", "spot-decode")
                        .await
                        .unwrap_or_default();
                    let ready = harness::scenario::condition(&service, "Ready");
                    let pods = scenario.names("v1", "Pod").await.len();
                    let wanted_views = (
                        i64::try_from(prefill).ok(),
                        i64::try_from(decode).ok(),
                    );
                    if roles.get("prefill") == Some(&prefill)
                        && roles.get("decode-ondemand") == Some(&on_demand)
                        && roles.get("decode-spot").copied().unwrap_or(0) == decode - on_demand
                        && views == wanted_views
                        && pods == prefill + decode
                        && ready.as_deref() == Some("True")
                    {
                        Ok(())
                    } else {
                        Err(format!("{roles:?}, views {views:?}, {pods} pods, Ready {ready:?}"))
                    }
                },
            )
            .await;
        eprintln!("{waiting} waiting: prefill {prefill}, decode {decode}, settled");
    }
    drop(load);
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", "spot-decode"))
        .await;
}

/// vLLM's KV-cache use per pod, 0 to 1: what the band example's decode HPA
/// reads.
const KV_CACHE: &str = "vllm:kv_cache_usage_perc";

/// The decode replicas of spot-decode's spec (on-demand and spot), and its
/// prefill replicas.
fn decode_and_prefill(service: &Value) -> (i64, i64) {
    let mut decode = 0;
    let mut prefill = 0;
    for role in service["spec"]["roles"].as_array().into_iter().flatten() {
        let replicas = role["replicas"].as_i64().unwrap_or(1);
        match role["name"].as_str() {
            Some("prefill") => prefill += replicas,
            Some(_) => decode += replicas,
            None => {}
        }
    }
    (decode, prefill)
}

/// `examples/render/hpa-prefill-decode-band.yaml` in a cluster: each role
/// on an HPA of its own (prefill on its waiting requests, decode on its
/// KV-cache use), and ResourceScalingGroup prefill-decode-band keeping
/// decode within 2 to 4 replicas per prefill replica.
///
/// Prefill held at 2 (the band [4, 8]), decode's HPA is driven to ask 6
/// (inside: applied exactly), 2 (below: applied 4, `BelowBand`), 12 (above:
/// applied 8, `AboveBand`) and 5 (inside again). A watch of the service's
/// spec sees decode inside the band at every change from the first step on;
/// the view says asked, applied and why; one Event per clamp episode; the
/// HPA's `spec.replicas` is never overwritten (it stays what the HPA asked);
/// and Tandem is quiet after.
pub(crate) async fn an_hpa_on_each_role_keeps_decode_within_its_band_of_prefill_at_every_instant() {
    let Some(scenario) = Scenario::start("autoscale-band").await else {
        return;
    };
    scenario.nodes(1).await;
    scenario.spot_nodes(2).await;
    let metrics = scenario.plane.custom_metrics().await;
    let mut hpas = BTreeMap::new();
    for mut object in harness::yaml_documents(&harness::repo_path(
        "examples/render/hpa-prefill-decode-band.yaml",
    )) {
        match object["kind"].as_str() {
            Some("HorizontalPodAutoscaler") => {
                object["spec"]["behavior"] = fast();
                let view = object["spec"]["scaleTargetRef"]["name"]
                    .as_str()
                    .expect("the HPA's view")
                    .to_owned();
                hpas.insert(view, object);
                continue;
            }
            Some("ScaleView") if object["metadata"]["name"] == "spot-prefill-sv" => {
                object["spec"]["replicas"] = json!(2);
            }
            Some("ScaleView") => {
                // The band's lower end until decode's HPA asks.
                object["spec"]["replicas"] = json!(4);
            }
            Some("InferenceService") => {
                for role in object["spec"]["roles"].as_array_mut().expect("roles") {
                    role["drain"] = json!({"seconds": 2});
                }
            }
            _ => {}
        }
        scenario.create_or_fail(&object).await;
    }
    wait_service_ready(&scenario, "spot-decode").await;
    // Prefill: 20 waiting over its pods at 10 a pod is 2 replicas, held.
    let prefill = queue(&scenario, metrics, "spot-prefill-sv").await;
    prefill.set(20);
    scenario.create_or_fail(&hpas["spot-prefill-sv"]).await;
    // Decode: the load is the replicas its HPA should ask; each pod reports
    // the KV-cache use that makes it so at its 80 % target
    // (ceil(pods x use / 0.8) = load), to the thousandth, rounded down so the
    // HPA's ceiling lands on the load, not above it.
    let decode = per_pod(
        &scenario,
        metrics,
        "spot-decode-sv",
        KV_CACHE,
        |load, pods| {
            // A JSON number: the adapter decodes the body as JSON, so
            // "800m" would be read as 800.
            let milli = load * 800 / pods;
            format!("{}.{:03}", milli / 1000, milli % 1000)
        },
    )
    .await;
    decode.set(4);
    scenario.create_or_fail(&hpas["spot-decode-sv"]).await;
    hpa_reads_kv(&scenario, "spot-decode-sv", 4).await;

    // From here on, decode must be inside [2, 4] x prefill at every change
    // of the service's spec.
    let seen: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
    let record = seen.clone();
    let services = scenario.api(IS, "InferenceService").await;
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().fields("metadata.name=spot-decode");
        let mut events = watcher(services, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(service) | watcher::Event::InitApply(service)) = event {
                let data = serde_json::to_value(&service).unwrap_or_default();
                record.lock().expect("seen").push(decode_and_prefill(&data));
            }
        }
    });

    let mut episodes = Vec::new();
    for (asked, applied, reason) in [
        (6, 6, "WithinRange"),
        (2, 4, "BelowBand"),
        (12, 8, "AboveBand"),
        (5, 5, "WithinRange"),
    ] {
        decode.set(asked);
        scenario
            .eventually(
                120,
                &format!(
                    "decode's HPA asks {asked}, the view applies {applied} ({reason}), all Ready"
                ),
                || async {
                    let view = scenario
                        .get(VIEWS, "ScaleView", "spot-decode-sv")
                        .await
                        .unwrap_or_default();
                    let clamped = view_condition(&view, "Clamped").unwrap_or_default();
                    let service = scenario
                        .get(IS, "InferenceService", "spot-decode")
                        .await
                        .unwrap_or_default();
                    let roles = replicas_by_role(&scenario).await;
                    let sets = roles.get("decode-ondemand").copied().unwrap_or(0)
                        + roles.get("decode-spot").copied().unwrap_or(0);
                    let state = (
                        view["spec"]["replicas"].as_i64(),
                        view["status"]["appliedReplicas"].as_i64(),
                        clamped["reason"].as_str().map(str::to_owned),
                        decode_and_prefill(&service),
                        sets,
                        harness::scenario::condition(&service, "Ready"),
                    );
                    if state
                        == (
                            Some(asked as i64),
                            Some(applied),
                            Some(reason.to_owned()),
                            (applied, 2),
                            usize::try_from(applied).unwrap_or(0),
                            Some("True".to_owned()),
                        )
                    {
                        Ok(())
                    } else {
                        Err(format!("{state:?}: {:#}", view["status"]))
                    }
                },
            )
            .await;
        let view = scenario
            .get(VIEWS, "ScaleView", "spot-decode-sv")
            .await
            .unwrap_or_default();
        if reason != "WithinRange" {
            assert_eq!(
                view["status"]["band"],
                json!({"resourceScalingGroup": "prefill-decode-band", "minReplicas": 4, "maxReplicas": 8}),
                "{:#}",
                view["status"]
            );
            episodes.push(reason);
        }
        eprintln!("decode's HPA asks {asked}: applied {applied} ({reason})");
    }
    watch.abort();
    let seen = seen.lock().expect("seen").clone();
    let outside: Vec<&(i64, i64)> = seen
        .iter()
        .filter(|(decode, prefill)| *decode < 2 * prefill || *decode > 4 * prefill)
        .collect();
    assert!(
        outside.is_empty() && seen.len() > 4,
        "decode left the band of its prefill ((decode, prefill) at each change: {seen:?})"
    );
    // One Event per episode, each its own Event with its own note.
    let mut events: Vec<Value> = scenario
        .list("events.k8s.io/v1", "Event")
        .await
        .into_iter()
        .filter(|e| {
            e["regarding"]["name"] == "spot-decode-sv" && e["reportingController"] == "tandem"
        })
        .filter(|e| e["reason"] == "BelowBand" || e["reason"] == "AboveBand")
        .collect();
    events.sort_by(|a, b| a["eventTime"].as_str().cmp(&b["eventTime"].as_str()));
    let events: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_owned(),
                e["note"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        events.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(),
        episodes,
        "{events:#?}"
    );
    assert!(
        events[0].1.starts_with("requested 2 replicas, applied 4: raised to the lower end of the band [4, 8] of ResourceScalingGroup prefill-decode-band"),
        "{events:#?}"
    );
    drop((prefill, decode));
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", "spot-decode"))
        .await;
}

/// Waits until HPA `name` (on the KV-cache use) has `replicas` current and
/// desired.
async fn hpa_reads_kv(scenario: &Scenario, name: &str, replicas: i64) {
    scenario
        .eventually(
            90,
            &format!("HPA {name} at {replicas} replicas"),
            || async {
                let hpa = scenario
                    .get(HPA, "HorizontalPodAutoscaler", name)
                    .await
                    .unwrap_or_default();
                let status = &hpa["status"];
                if status["currentReplicas"] == replicas && status["desiredReplicas"] == replicas {
                    Ok(())
                } else {
                    Err(format!("{status:#}"))
                }
            },
        )
        .await;
}

const GROUPS: &str = "resourcescalinggroup.com/v1";

/// `examples/resourcescalinggroup/group-replication.yaml` (group
/// `inference-unit` of Deployments prefill and decode, from
/// `examples/resourcescalinggroup/world.yaml`) with an HPA on its `/scale`.
/// The metric is an Object metric on the group itself (the waiting requests
/// of all its pods, as prometheus-adapter serves a sum) with an
/// `AverageValue` target of 10 per unit: the HPA divides it by the group's
/// replicas. A Pods metric would not do here: the HPA multiplies its ratio
/// by the number of pods, not of replicas (`calcPlainMetricReplicas` in
/// `pkg/controller/podautoscaler/replica_calculator.go`), so a unit of two
/// pods would be scaled twice as far (seen here: 40 waiting over 2 pods
/// gave 3 units, not 2).
///
/// 20 waiting is 2 units, 30 is 3, 20 again is 2 and an empty queue 1. Each
/// unit added is both clones; each removed goes whole, the candidate
/// `inference-unit-02` first, then `-01`; the originals (`-00`) stay.
pub(crate) async fn an_hpa_on_a_replicated_group_adds_and_removes_whole_units() {
    let Some(scenario) = Scenario::start("autoscale-units").await else {
        return;
    };
    scenario.nodes(1).await;
    let metrics = scenario.plane.custom_metrics().await;
    for object in harness::yaml_documents(&harness::repo_path(
        "examples/resourcescalinggroup/world.yaml",
    )) {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if object["kind"] == "Deployment" && (name == "prefill" || name == "decode") {
            let mut object = object.clone();
            object["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(2);
            scenario.create_or_fail(&object).await;
        }
    }
    let mut group = example("examples/resourcescalinggroup/group-replication.yaml");
    for target in group["spec"]["targetResources"]
        .as_array_mut()
        .expect("targets")
    {
        target["namespace"] = json!(scenario.namespace);
    }
    scenario.create_or_fail(&group).await;
    let hpa = json!({
        "apiVersion": HPA, "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "pd-cluster"},
        "spec": {
            "scaleTargetRef": {"apiVersion": GROUPS, "kind": "ResourceScalingGroup",
                               "name": "pd-cluster"},
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{"type": "Object", "object": {
                "describedObject": {"apiVersion": GROUPS, "kind": "ResourceScalingGroup",
                                    "name": "pd-cluster"},
                "metric": {"name": WAITING},
                "target": {"type": "AverageValue", "averageValue": "10"}}}],
            "behavior": fast(),
        },
    });
    let namespace = scenario.namespace.clone();
    let waiting_in_group = |waiting: u64| {
        let namespace = namespace.clone();
        async move {
            metrics
                .set(
                    &namespace,
                    "resourcescalinggroups.resourcescalinggroup.com",
                    "pd-cluster",
                    WAITING,
                    &waiting.to_string(),
                )
                .await;
        }
    };
    waiting_in_group(0).await;
    scenario.create_or_fail(&hpa).await;
    scenario
        .eventually(90, "the HPA reads the group's queue: 0", || async {
            let hpa = scenario
                .get(HPA, "HorizontalPodAutoscaler", "pd-cluster")
                .await
                .unwrap_or_default();
            let status = &hpa["status"];
            let metric = &status["currentMetrics"][0]["object"]["current"]["averageValue"];
            if metric == "0" && status["currentReplicas"] == 1 && status["desiredReplicas"] == 1 {
                Ok(())
            } else {
                Err(format!("{status:#}"))
            }
        })
        .await;

    let deployments = || async {
        scenario
            .list("apps/v1", "Deployment")
            .await
            .iter()
            .filter(|d| d["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_owned))
            .collect::<Vec<String>>()
    };
    for (waiting, units) in [(20u64, 2usize), (30, 3), (20, 2), (0, 1)] {
        waiting_in_group(waiting).await;
        let mut wanted = vec!["decode".to_owned(), "prefill".to_owned()];
        for unit in 1..units {
            wanted.push(format!("inference-unit-{unit:02}-decode"));
            wanted.push(format!("inference-unit-{unit:02}-prefill"));
        }
        wanted.sort();
        scenario
            .eventually(
                120,
                &format!("{waiting} waiting: {units} whole units, their pods Ready"),
                || async {
                    let names = deployments().await;
                    let group = scenario
                        .get(GROUPS, "ResourceScalingGroup", "pd-cluster")
                        .await
                        .unwrap_or_default();
                    let ready = harness::scenario::condition(&group, "Ready");
                    let pods = scenario.names("v1", "Pod").await.len();
                    if names == wanted
                        && group["status"]["currentReplicas"] == json!(units)
                        && pods == 2 * units
                        && ready.as_deref() == Some("True")
                    {
                        Ok(())
                    } else {
                        Err(format!(
                            "{names:?}, {pods} pods, status {:#}",
                            group["status"]
                        ))
                    }
                },
            )
            .await;
        eprintln!("{waiting} waiting: {units} units, settled");
    }
    scenario.assert_writes_sound();
    scenario
        .finish(Quiet::Touching(
            GROUPS,
            "ResourceScalingGroup",
            "pd-cluster",
        ))
        .await;
}

/// The HPA of `examples/scaleview/hpa.yaml` on the spot/on-demand view with
/// the spot group bounded (`max: 3`, so the view holds at most 5), and a
/// metric that is first absent and then absurd:
///
/// - **No value served.** The HPA says so (`ScalingActive=False`,
///   `FailedGetPodsMetric`) and writes nothing; the view stays at 1.
/// - **A huge value** (10⁹ waiting per pod), with an HPA allowed 1 000
///   replicas at once: the HPA writes 1 000, the view clamps it to 5 and
///   says so (`Clamped=True`), the roles stop at their bounds (on-demand 2,
///   spot 3), and Tandem writes nothing more while the HPA holds there.
pub(crate) async fn absent_then_absurd_metrics_leave_the_view_within_its_bounds_without_a_loop() {
    let Some((scenario, metrics)) = spot_decode("autoscale-bad-metrics", 1, |object| {
        if object["kind"] == "ScaleView" {
            object["spec"]["scalePolicy"][1]["constraints"] = json!({"max": 3});
        }
    })
    .await
    else {
        return;
    };
    let mut hpa = example("examples/scaleview/hpa.yaml");
    hpa["spec"]["maxReplicas"] = json!(1000);
    hpa["spec"]["behavior"] = json!({
        "scaleUp": {"stabilizationWindowSeconds": 0,
                    "policies": [{"type": "Pods", "value": 1000, "periodSeconds": 1}]},
    });
    scenario.create_or_fail(&hpa).await;

    // Nothing served for the view's pods.
    let (reason, said) = hpa_says(&scenario, "spot-decode-sv", "ScalingActive", "False").await;
    assert_eq!(reason, "FailedGetPodsMetric", "{said}");
    eprintln!("ScalingActive=False FailedGetPodsMetric: {said}");
    assert_eq!(view_replicas(&scenario, "spot-decode-sv").await, Some(1));

    // 10⁹ waiting requests per pod.
    let load = queue(&scenario, metrics, "spot-decode-sv").await;
    load.set(1_000_000_000);
    view_becomes(&scenario, "spot-decode-sv", 1000, 60).await;
    scenario
        .eventually(90, "the view clamped to 5: on-demand 2, spot 3", || async {
            let roles = replicas_by_role(&scenario).await;
            let view = scenario
                .get(VIEWS, "ScaleView", "spot-decode-sv")
                .await
                .unwrap_or_default();
            let clamped = harness::scenario::condition(&view, "Clamped");
            if roles.get("decode-ondemand") == Some(&2)
                && roles.get("decode-spot") == Some(&3)
                && clamped.as_deref() == Some("True")
            {
                Ok(())
            } else {
                Err(format!("{roles:?}, view status {:#}", view["status"]))
            }
        })
        .await;
    let view = scenario
        .get(VIEWS, "ScaleView", "spot-decode-sv")
        .await
        .unwrap_or_default();
    let message = view_condition(&view, "Clamped")
        .and_then(|c| c["message"].as_str().map(str::to_owned))
        .unwrap_or_default();
    assert!(
        message.contains("requested 1000 replicas, applied 5"),
        "the view says what it did: {message}"
    );
    scenario.assert_writes_sound();
    // The HPA holds at 1000 (its own maximum) and rewrites nothing; Tandem
    // neither.
    scenario
        .finish(Quiet::Touching(VIEWS, "ScaleView", "spot-decode-sv"))
        .await;
    drop(load);
}

/// The condition of type `kind` in a view's status.
fn view_condition(view: &Value, kind: &str) -> Option<Value> {
    view["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

/// The HPA's writes of `/scale` of `view` that were refused, with the
/// answer's message.
fn refused_scales(scenario: &Scenario, view: &str) -> Vec<String> {
    scenario
        .writes()
        .iter()
        .filter(|w| w.user == "system:serviceaccount:kube-system:horizontal-pod-autoscaler")
        .filter(|w| w.subresource.as_deref() == Some("scale"))
        .filter(|w| w.name.as_deref() == Some(view) && w.code >= 400)
        .map(|w| format!("{} {}", w.code, w.message))
        .collect()
}

/// The HPA of `examples/scaleview/hpa.yaml` on the spot/on-demand view made
/// strict, with spot bounded (`max: 1`): the view takes 0 to 3 replicas,
/// and the HPA (maximum 4) asks for 4 on 40 waiting requests.
///
/// - The webhook refuses the HPA's `/scale`, and its message reaches the
///   HPA's conditions: `AbleToScale=False`, `FailedUpdateScale`, naming
///   the range and the field.
/// - Tandem records the refusal on the view once: condition ScaleRefused
///   and a Warning Event, each saying who asked for how many and why.
/// - The HPA retries each sync period (its refused writes keep coming);
///   the view stays at 1, and Tandem writes nothing meanwhile: not the
///   record again (the view's resourceVersion holds), nor anything else.
pub(crate) async fn an_hpa_asking_a_strict_view_for_too_much_is_refused_in_its_conditions() {
    let Some((scenario, metrics)) = spot_decode("autoscale-strict", 1, |object| {
        if object["kind"] == "ScaleView" {
            object["spec"]["strict"] = json!(true);
            object["spec"]["scalePolicy"][1]["constraints"] = json!({"max": 1});
        }
    })
    .await
    else {
        return;
    };
    let load = autoscale_view(
        &scenario,
        metrics,
        &example("examples/scaleview/hpa.yaml"),
        1,
    )
    .await;
    load.set(40);
    let (reason, message) = hpa_says(&scenario, "spot-decode-sv", "AbleToScale", "False").await;
    eprintln!("AbleToScale=False {reason}: {message}");
    assert_eq!(reason, "FailedUpdateScale");
    assert!(
        message.contains(
            "spec.replicas: must be within [0, 3] (the sum of the groups' min and max \
             constraints) because spec.strict is true, got 4"
        ),
        "Tandem's reason reaches the HPA: {message}"
    );
    // Tandem's own record of it: the view's ScaleRefused condition, and a
    // Warning Event of the same reason, naming who asked and why.
    let said = "system:serviceaccount:kube-system:horizontal-pod-autoscaler asked for 4 \
                replicas through /scale and was refused: spec.replicas: must be within [0, 3]";
    let recorded = scenario
        .eventually(30, "the view records the refusal", || async {
            let view = scenario
                .get(VIEWS, "ScaleView", "spot-decode-sv")
                .await
                .unwrap_or_default();
            match view_condition(&view, "ScaleRefused") {
                Some(c) if c["status"] == "True" && c["reason"] == "AdmissionDenied" => {
                    Ok((c, view["metadata"]["resourceVersion"].clone()))
                }
                other => Err(format!("{other:?} in {:#}", view["status"])),
            }
        })
        .await;
    let (condition, version) = recorded;
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(said), "{message}");
    let events = scenario
        .eventually(30, "the refusal's Event", || async {
            let events: Vec<Value> = scenario
                .list("events.k8s.io/v1", "Event")
                .await
                .into_iter()
                .filter(|e| {
                    e["reason"] == "ScaleRefused" && e["regarding"]["name"] == "spot-decode-sv"
                })
                .collect();
            if events.is_empty() {
                Err("no ScaleRefused Event yet".to_owned())
            } else {
                Ok(events)
            }
        })
        .await;
    assert_eq!(events.len(), 1, "one Event: {events:#?}");
    assert_eq!(events[0]["type"], "Warning");
    assert!(
        events[0]["note"]
            .as_str()
            .unwrap_or_default()
            .starts_with(said),
        "{:#}",
        events[0]
    );
    let refused = refused_scales(&scenario, "spot-decode-sv").len();
    scenario
        .eventually(30, "the HPA retries its refused /scale", || async {
            let now = refused_scales(&scenario, "spot-decode-sv");
            if now.len() >= refused + 2 {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    assert_eq!(view_replicas(&scenario, "spot-decode-sv").await, Some(1));
    // The retries said nothing new: the record was not written again.
    let view = scenario
        .get(VIEWS, "ScaleView", "spot-decode-sv")
        .await
        .expect("the view");
    assert_eq!(view["metadata"]["resourceVersion"], version, "{view:#}");
    scenario.assert_writes_sound();
    scenario
        .finish(Quiet::Touching(VIEWS, "ScaleView", "spot-decode-sv"))
        .await;
    drop(load);
}

/// The HPA of `examples/scaleview/hpa.yaml` on the spot/on-demand view
/// while the decode roles roll to a new image whose pods take 8 s to load
/// (one replica at a time, the default pace): the view's lock on the roles
/// holds throughout. The HPA's scale-up in the middle of the rollout is
/// neither refused nor lost: the view takes it at once (a newer total; the
/// docs: a scale change during a rollout is honoured), the new replicas are
/// made at the new revision, and the rollout and the scale both finish,
/// with every decode replica at the new image and the floor held.
pub(crate) async fn an_hpa_scaling_a_view_in_the_middle_of_a_rollout_is_honoured() {
    let Some((scenario, metrics)) = spot_decode("autoscale-rollout", 1, |object| {
        if object["kind"] == "InferenceService" {
            for role in object["spec"]["roles"].as_array_mut().into_iter().flatten() {
                role["drain"] = json!({"seconds": 2});
            }
            object["spec"]["roles"][1]["replicas"] = json!(2);
        }
    })
    .await
    else {
        return;
    };
    let load = queue(&scenario, metrics, "spot-decode-sv").await;
    let mut hpa = example("examples/scaleview/hpa.yaml");
    hpa["spec"]["behavior"] = json!({"scaleUp": {"stabilizationWindowSeconds": 0}});
    // 20 waiting over the view's 2 replicas: the HPA keeps 2.
    load.set(20);
    scenario.create_or_fail(&hpa).await;
    hpa_reads(&scenario, "spot-decode-sv", "10", 2).await;

    // Both decode roles move to a new image whose pods load for 8 s.
    const NEW: &str = "vllm/vllm-openai:v0.11.1";
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/roles/1/template/spec/containers/0/image", "value": NEW},
        {"op": "replace", "path": "/spec/roles/2/template/spec/containers/0/image", "value": NEW},
        {"op": "add", "path": "/spec/roles/1/template/metadata",
         "value": {"annotations": {"e2e.tandem/load-delay": "8s"}}},
        {"op": "add", "path": "/spec/roles/2/template/metadata/annotations",
         "value": {"e2e.tandem/load-delay": "8s"}},
    ]))
    .expect("a JSON patch");
    scenario
        .api(IS, "InferenceService")
        .await
        .patch(
            "spot-decode",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::<()>::Json(patch),
        )
        .await
        .expect("the new image");
    scenario
        .eventually(30, "the rollout under way", || async {
            let service = scenario
                .get(IS, "InferenceService", "spot-decode")
                .await
                .unwrap_or_default();
            match harness::scenario::condition(&service, "Progressing") {
                Some(status) if status == "True" => Ok(()),
                other => Err(format!("Progressing {other:?}: {:#}", service["status"])),
            }
        })
        .await;

    // Mid-rollout, 40 waiting: the HPA asks for 4.
    load.set(40);
    view_becomes(&scenario, "spot-decode-sv", 4, 30).await;
    // Taken at once, not held until the rollout ends: the roles are at the
    // new split while the service is still Progressing.
    let progressing = scenario
        .eventually(30, "the view's split in the service's roles", || async {
            let service = scenario
                .get(IS, "InferenceService", "spot-decode")
                .await
                .unwrap_or_default();
            let roles = &service["spec"]["roles"];
            if roles[1]["replicas"] == 2 && roles[2]["replicas"] == 2 {
                Ok(harness::scenario::condition(&service, "Progressing"))
            } else {
                Err(format!("{roles:#}"))
            }
        })
        .await;
    assert_eq!(
        progressing.as_deref(),
        Some("True"),
        "the HPA's scale-up applied in the middle of the rollout"
    );
    scenario
        .eventually(
            180,
            "on-demand 2, spot 2, every decode pod at the new image, Ready",
            || async {
                let roles = replicas_by_role(&scenario).await;
                let pods = scenario.list("v1", "Pod").await;
                let decode: Vec<&Value> = pods
                    .iter()
                    .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                    .filter(|p| label(p, "fusioninfer.io/role-name").starts_with("decode"))
                    .collect();
                let old: Vec<&str> = decode
                    .iter()
                    .filter(|p| p["spec"]["containers"][0]["image"] != NEW)
                    .filter_map(|p| p["metadata"]["name"].as_str())
                    .collect();
                let service = scenario
                    .get(IS, "InferenceService", "spot-decode")
                    .await
                    .unwrap_or_default();
                let ready = harness::scenario::condition(&service, "Ready");
                if roles.get("decode-ondemand") == Some(&2)
                    && roles.get("decode-spot") == Some(&2)
                    && decode.len() == 4
                    && old.is_empty()
                    && ready.as_deref() == Some("True")
                {
                    Ok(())
                } else {
                    Err(format!(
                        "{roles:?}, {} decode pods, old {old:?}, Ready {ready:?}",
                        decode.len()
                    ))
                }
            },
        )
        .await;
    hpa_reads(&scenario, "spot-decode-sv", "10", 4).await;
    drop(load);
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", "spot-decode"))
        .await;
}

/// Where `stored` does not hold `written` as written: a field missing or
/// changed (pruned by a schema that does not know it), at its path; fields
/// only `stored` has (defaults) are fine.
fn not_kept(written: &Value, stored: &Value, at: &str) -> Option<String> {
    match (written, stored) {
        (Value::Object(fields), Value::Object(kept)) => fields.iter().find_map(|(k, v)| {
            not_kept(v, kept.get(k).unwrap_or(&Value::Null), &format!("{at}.{k}"))
        }),
        (Value::Array(items), Value::Array(kept)) if items.len() == kept.len() => items
            .iter()
            .zip(kept)
            .enumerate()
            .find_map(|(i, (v, k))| not_kept(v, k, &format!("{at}[{i}]"))),
        _ if written == stored => None,
        _ => Some(format!("{at}: wrote {written}, stored {stored}")),
    }
}

pub(crate) fn a_default_added_is_kept_a_field_dropped_is_not() {
    let written = json!({"a": {"b": 1}, "list": [{"c": "x"}]});
    let defaulted = json!({"a": {"b": 1, "d": 2}, "list": [{"c": "x", "e": true}]});
    assert_eq!(not_kept(&written, &defaulted, "spec"), None);
    let pruned = json!({"a": {}, "list": [{"c": "x"}]});
    assert_eq!(
        not_kept(&written, &pruned, "spec").as_deref(),
        Some("spec.a.b: wrote 1, stored null")
    );
}

/// Every object of the recipes in `examples/autoscaling/`, with its file.
fn recipes() -> Vec<(String, Value)> {
    let folder = harness::repo_path("examples/autoscaling");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .expect("examples/autoscaling/")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let recipes: Vec<(String, Value)> = files
        .iter()
        .flat_map(|path| {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            harness::yaml_documents(path)
                .into_iter()
                .map(move |object| (file.clone(), object))
        })
        .collect();
    assert!(recipes.len() >= 6, "{recipes:#?}");
    recipes
}

/// The metric names a PromQL expression reads: each name written before a
/// `{` selector (the recipes select every series they read).
fn promql_metrics(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in query.match_indices('{') {
        let name: String = query[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        // `<<.Series>>{…}` in an adapter's metricsQuery names no metric.
        if !name.is_empty() && !query[..at].ends_with(">>") {
            names.push(name);
        }
    }
    names
}

/// The metric names a recipe object reads: a ScaledObject's Prometheus
/// queries, an HPA's metrics, a prometheus-adapter configuration's series
/// queries.
fn metrics_read(object: &Value) -> Vec<String> {
    let mut names = Vec::new();
    match object["kind"].as_str().unwrap_or_default() {
        "ScaledObject" => {
            for trigger in object["spec"]["triggers"].as_array().into_iter().flatten() {
                assert_eq!(trigger["type"], "prometheus", "{trigger:#}");
                let query = trigger["metadata"]["query"].as_str().expect("a query");
                names.extend(promql_metrics(query));
            }
        }
        "HorizontalPodAutoscaler" => {
            for metric in object["spec"]["metrics"].as_array().into_iter().flatten() {
                let kind = match metric["type"].as_str() {
                    Some("Pods") => "pods",
                    Some("Object") => "object",
                    Some("External") => "external",
                    other => panic!("a metric of type {other:?}: {metric:#}"),
                };
                let name = metric[kind]["metric"]["name"].as_str().expect("a name");
                names.push(name.to_owned());
            }
        }
        "ConfigMap" => {
            for file in object["data"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(_, v)| v)
            {
                let config: Value =
                    serde_norway::from_str(file.as_str().expect("text")).expect("YAML");
                for key in ["rules", "externalRules"] {
                    for rule in config[key].as_array().into_iter().flatten() {
                        let series = rule["seriesQuery"].as_str().expect("a seriesQuery");
                        names.extend(promql_metrics(series));
                    }
                }
            }
        }
        _ => {}
    }
    names
}

/// The metrics docs/autoscaling.md cites: the first code span of each row
/// of the table under "The metrics the recipes read" (the rows that start
/// "| `"), by name, with the rest of the row.
fn cited_metrics() -> BTreeMap<String, String> {
    let page = std::fs::read_to_string(harness::repo_path("docs/autoscaling.md")).unwrap();
    let section = page
        .split_once("### The metrics the recipes read\n")
        .expect("the section of cited metrics")
        .1;
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, row)| (name.to_owned(), row.to_owned()))
        .collect()
}

/// Every metric a recipe reads is one the docs cite, at the version of
/// vLLM, SGLang or the endpoint picker that the examples run, with the file
/// that exports it; and every metric cited is read by a recipe.
pub(crate) fn every_metric_a_recipe_reads_is_cited_with_its_exporter() {
    let cited = cited_metrics();
    let mut read = BTreeMap::<String, Vec<String>>::new();
    for (file, object) in recipes() {
        for name in metrics_read(&object) {
            read.entry(name).or_default().push(file.clone());
        }
    }
    assert!(!read.is_empty());
    let uncited: Vec<_> = read.keys().filter(|n| !cited.contains_key(*n)).collect();
    assert!(
        uncited.is_empty(),
        "read by a recipe, not cited in docs/autoscaling.md: {uncited:?}\n{read:#?}"
    );
    let unread: Vec<_> = cited.keys().filter(|n| !read.contains_key(*n)).collect();
    assert!(unread.is_empty(), "cited, read by no recipe: {unread:?}");
    for (name, row) in &cited {
        // Each row names its exporter's version and a source file.
        assert!(
            row.contains(" v0.") || row.contains(" v1."),
            "{name}: no version in {row:?}"
        );
        assert!(
            row.contains(".py") || row.contains(".go"),
            "{name}: no source file in {row:?}"
        );
    }
}

pub(crate) fn promql_metrics_are_the_names_before_selectors() {
    assert_eq!(
        promql_metrics(r#"sum(vllm:num_requests_waiting{namespace="llm"}) / count(up{job="x"})"#),
        ["vllm:num_requests_waiting", "up"]
    );
    assert_eq!(
        promql_metrics("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"),
        Vec::<String>::new()
    );
}

/// Every recipe object but Tandem's own is one the real API server takes as
/// written: KEDA's ScaledObjects against KEDA's own CRD (from its Go
/// module, pinned by checksum), the PodMonitors against the Prometheus
/// Operator's, the HPAs and the adapter's ConfigMap against Kubernetes' own
/// API; nothing pruned (a field the schema does not know would be). And
/// every `scaleTargetRef` names a kind whose API has a scale subresource, as
/// the API server's discovery says with Tandem's CRDs installed.
pub(crate) async fn every_autoscaling_recipe_is_taken_by_the_real_api_server_against_its_crd() {
    let Some(mut scenario) = Scenario::start("autoscale-recipes").await else {
        return;
    };
    let admin = scenario.plane.admin().await.expect("an admin client");
    for plural in ["scaledobjects", "triggerauthentications"] {
        harness::control_plane::install_crd(&admin, &harness::modules::keda_crd(plural)).await;
    }
    harness::control_plane::install_crd(
        &admin,
        &harness::modules::prometheus_operator_crd("podmonitors"),
    )
    .await;
    let mut kinds = std::collections::BTreeSet::new();
    for (file, mut object) in recipes() {
        let what = format!(
            "{file}: {} {}",
            object["kind"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default()
        );
        kinds.insert(object["kind"].as_str().unwrap_or_default().to_owned());
        // Tandem's own objects (a recipe's service and view) are held to
        // Tandem's CRDs and admission by tests/unit/artifacts.rs, with the rest
        // of their file; a dry run here could not store the service a view
        // needs.
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        if api_version.starts_with("fusioninfer.io/")
            || api_version.starts_with("resourcescalinggroup.com/")
        {
            continue;
        }
        object["metadata"]["namespace"] = json!(scenario.namespace);
        let api = harness::control_plane::api_for(&admin, &object).await;
        let name = object["metadata"]["name"].as_str().expect("a name");
        let params = kube::api::PatchParams::apply("tandem-recipe-test")
            .force()
            .dry_run();
        let stored = api
            .patch(name, &params, &kube::api::Patch::Apply(&object))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let stored = serde_json::to_value(stored).expect("JSON");
        // Nothing pruned: every field written is stored as written (the API
        // server may add defaults, an HPA's behavior policies say).
        for part in ["spec", "data"] {
            if let Some(dropped) = not_kept(&object[part], &stored[part], part) {
                panic!("{what}: {dropped}\nstored: {:#}", stored[part]);
            }
        }
        let target = &object["spec"]["scaleTargetRef"];
        if target.is_object() {
            let api_version = target["apiVersion"].as_str().expect("an apiVersion");
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let kind = target["kind"].as_str().expect("a kind");
            let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
            let (_, capabilities) = kube::discovery::pinned_kind(&admin, &gvk)
                .await
                .unwrap_or_else(|e| panic!("{what}: {api_version} {kind}: {e}"));
            assert!(
                capabilities
                    .subresources
                    .iter()
                    .any(|(resource, _)| resource.plural == "scale"),
                "{what}: {api_version} {kind} has no scale subresource"
            );
        }
    }
    for kind in [
        "ScaledObject",
        "HorizontalPodAutoscaler",
        "ConfigMap",
        "PodMonitor",
    ] {
        assert!(
            kinds.contains(kind),
            "no {kind} among the recipes: {kinds:?}"
        );
    }
    scenario.excuse(
        Invariant::Quiet,
        "the recipes are stored, not run: no object of Tandem's is made to settle",
    );
    scenario.finish(Quiet::Checked).await;
}

/// GIE's queue metric, what the zero recipes scale on.
const PICKER_QUEUE: &str = "inference_extension_flow_control_queue_size";

/// Plays the endpoint picker's queue metric on its Service `service` (an
/// Object metric): every second, the value set.
fn picker_queue(namespace: &str, metrics: &'static CustomMetrics, service: &str) -> QueueHandle {
    let load = Arc::new(Mutex::new(0u64));
    let shared = load.clone();
    let (namespace, service) = (namespace.to_owned(), service.to_owned());
    let task = tokio::spawn(async move {
        loop {
            let queued = *shared.lock().expect("the queue");
            metrics
                .set(
                    &namespace,
                    "services",
                    &service,
                    PICKER_QUEUE,
                    &queued.to_string(),
                )
                .await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    QueueHandle { load, task }
}

/// A serving pod's event: its name, whether it is bound to a node, and
/// when its drain started (Tandem's annotation), if it did.
type PodEvent = (String, bool, Option<String>);

/// The desired replicas of prefill and decode in a service's status.
fn desired_pair(service: &Value) -> (i64, i64) {
    let of = |role: &str| {
        service["status"]["components"][role]["desiredReplicas"]
            .as_i64()
            .unwrap_or(-1)
    };
    (of("prefill"), of("decode"))
}

/// The service of the zero scenarios: story 4.
const ZERO_SERVICE: &str = "deepseek-r1-disagg";

/// Story 4 (prefill 1 × 2 nodes, decode 2 × 4 nodes) on Kubernetes' gang,
/// with a router whose picker queues, a ScaleView per side
/// (`prefill-sv`, `decode-sv`) and ResourceScalingGroup `prefill-decode`
/// keeping decode at 2 per prefill: created on 10 nodes, and Ready.
async fn story_4_with_views(scenario: &Scenario) {
    scenario.nodes(10).await;
    let mut service = example("examples/seeds/story4-prefill-decode-multinode.yaml");
    service["spec"]["schedulingStrategy"] = json!({"gangScheduler": "Kubernetes"});
    for role in service["spec"]["roles"].as_array_mut().expect("roles") {
        role["drain"] = json!({"seconds": 2});
    }
    service["spec"]["roles"]
        .as_array_mut()
        .expect("roles")
        .push(
            json!({"name": "router", "componentType": "router", "replicas": 1,
            "queue": {"timeoutSeconds": 900}}),
        );
    scenario.create_or_fail(&service).await;
    let view = |name: &str, component: &str, group: &str, replicas: i64| {
        json!({"apiVersion": VIEWS, "kind": "ScaleView", "metadata": {"name": name},
            "spec": {"replicas": replicas, "targetRef": {"name": ZERO_SERVICE, "componentType": component},
                "scalePolicy": [{"group": group}]}})
    };
    scenario
        .create_or_fail(&view("prefill-sv", "prefiller", "prefill", 1))
        .await;
    scenario
        .create_or_fail(&view("decode-sv", "decoder", "decode", 2))
        .await;
    scenario
        .create_or_fail(&json!({
            "apiVersion": GROUPS, "kind": "ResourceScalingGroup",
            "metadata": {"name": "prefill-decode"},
            "spec": {"targetResources": [
                    {"name": "prefill", "targetRef": {"apiVersion": VIEWS, "kind": "ScaleView", "name": "prefill-sv"}},
                    {"name": "decode", "targetRef": {"apiVersion": VIEWS, "kind": "ScaleView", "name": "decode-sv"}}],
                "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                    {"name": "prefill", "role": "Source"},
                    {"name": "decode", "role": "Target", "ratio": "2"}]}}},
        }))
        .await;
    wait_service_ready(scenario, ZERO_SERVICE).await;
}

/// (prefill, decode) desired replicas, one per status seen.
type Pairs = Arc<Mutex<Vec<(i64, i64)>>>;

/// Records, from a watch, the desired replicas of prefill and decode in
/// every status of the zero scenarios' service.
fn watch_desired_pair(
    services: Api<kube::api::DynamicObject>,
) -> (Pairs, tokio::task::JoinHandle<()>) {
    let seen: Pairs = Arc::default();
    let record = seen.clone();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={ZERO_SERVICE}"));
        let mut events = watcher(services, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(service) | watcher::Event::InitApply(service)) = event {
                let data = serde_json::to_value(&service).unwrap_or_default();
                record.lock().expect("seen").push(desired_pair(&data));
            }
        }
    });
    (seen, watch)
}

/// Waits until the zero scenarios' service is at zero: Ready
/// `ScaledToZero`, both views at 0 and every serving pod gone (the ones
/// terminating too, so that the pods of a wake are new ones); then its
/// router's Deployment, Service and InferencePool are still there.
async fn wait_at_zero(scenario: &Scenario) {
    let epp = format!("{ZERO_SERVICE}-epp");
    scenario
        .eventually(180, "the service at zero", || async {
            let stored = scenario
                .get(IS, "InferenceService", ZERO_SERVICE)
                .await
                .unwrap_or_default();
            let ready = harness::scenario::condition_of(&stored, "Ready");
            let serving: Vec<String> = scenario
                .list("v1", "Pod")
                .await
                .iter()
                .filter(|p| label(p, "fusioninfer.io/component-type") != "router")
                .map(|p| {
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect();
            let views = (
                view_replicas(scenario, "prefill-sv").await,
                view_replicas(scenario, "decode-sv").await,
            );
            if ready["reason"] == "ScaledToZero"
                && ready["status"] == "True"
                && serving.is_empty()
                && views == (Some(0), Some(0))
            {
                Ok(())
            } else {
                Err(format!("Ready {ready}, pods {serving:?}, views {views:?}"))
            }
        })
        .await;
    assert_eq!(
        scenario.names(LWS, "LeaderWorkerSet").await,
        Vec::<String>::new()
    );
    for (api, kind, name) in [
        ("apps/v1", "Deployment", epp.clone()),
        ("v1", "Service", epp.clone()),
        (
            "inference.networking.k8s.io/v1",
            "InferencePool",
            format!("{ZERO_SERVICE}-pool"),
        ),
    ] {
        assert!(
            scenario.get(api, kind, &name).await.is_some(),
            "the router's {kind} {name} stays at zero"
        );
    }
}

/// Waits until the zero scenarios' service is back at 1 prefill and 2
/// decode replicas, Ready.
async fn wait_pair_back(scenario: &Scenario) {
    scenario
        .eventually(
            180,
            "the service back at 1 prefill and 2 decode, Ready",
            || async {
                let stored = scenario
                    .get(IS, "InferenceService", ZERO_SERVICE)
                    .await
                    .unwrap_or_default();
                let ready = harness::scenario::condition(&stored, "Ready");
                let roles = replicas_by_role(scenario).await;
                if ready.as_deref() == Some("True")
                    && roles.get("prefill") == Some(&1)
                    && roles.get("decode") == Some(&2)
                    && desired_pair(&stored) == (1, 2)
                {
                    Ok(())
                } else {
                    Err(format!(
                        "Ready {ready:?}, {roles:?}, desired {:?}",
                        desired_pair(&stored)
                    ))
                }
            },
        )
        .await;
}

/// Prefill and decode were at zero together or not at all, in every status
/// seen, and at zero once.
fn assert_zero_together(seen: &Mutex<Vec<(i64, i64)>>) {
    let seen = seen.lock().expect("seen").clone();
    let apart: Vec<&(i64, i64)> = seen
        .iter()
        .filter(|(prefill, decode)| (*prefill == 0) != (*decode == 0))
        .collect();
    assert!(
        apart.is_empty() && seen.contains(&(0, 0)),
        "prefill and decode at zero together or not at all, in every status: {seen:?}"
    );
}

/// Issue 54, zero and back: [`story_4_with_views`] and an HPA with
/// `minReplicas: 0` (the `HPAScaleToZero` gate on the API server and the
/// controller manager) on prefill's view, reading the picker's queue as an
/// Object metric of its Service.
///
/// An empty queue: the HPA takes prefill's view to 0, the group takes
/// decode's; every prefill and decode pod goes, each drained out of traffic
/// first; the router's Deployment, Service and InferencePool stay; the
/// service is Ready `ScaledToZero` and the HPA says it scaled to zero. One
/// queued request: the HPA wakes the view, and the first prefill and decode
/// replicas come back in the core group, no pod of it bound before all six
/// exist. A watch of the service's status sees, at every version, prefill
/// and decode at zero together or not at all.
pub(crate) async fn an_hpa_takes_a_prefill_decode_service_to_zero_and_a_queued_request_brings_the_pair_back()
 {
    let Some(scenario) = Scenario::start("autoscale-zero").await else {
        return;
    };
    let metrics = scenario.plane.custom_metrics().await;
    story_4_with_views(&scenario).await;
    let (seen, watch) = watch_desired_pair(scenario.api(IS, "InferenceService").await);

    // Every serving pod event: (name, bound, drain started at).
    let pods: Api<Pod> = Api::namespaced(scenario.client.clone(), &scenario.namespace);
    let order: Arc<Mutex<Vec<PodEvent>>> = Arc::default();
    let record = order.clone();
    let pod_watch = tokio::spawn(async move {
        let config = watcher::Config::default().labels("fusioninfer.io/component-type!=router");
        let mut events = watcher(pods, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                let bound = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some();
                let drain = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(tandem::plan::inference_service::drain::DRAIN_STARTED))
                    .cloned();
                let name = pod.metadata.name.unwrap_or_default();
                record.lock().expect("order").push((name, bound, drain));
            }
        }
    });

    let epp = format!("{ZERO_SERVICE}-epp");
    let queue = picker_queue(&scenario.namespace, metrics, &epp);
    scenario
        .create_or_fail(&json!({
            "apiVersion": HPA, "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "prefill-sv"},
            "spec": {
                "scaleTargetRef": {"apiVersion": VIEWS, "kind": "ScaleView", "name": "prefill-sv"},
                "minReplicas": 0, "maxReplicas": 1, "behavior": fast(),
                "metrics": [{"type": "Object", "object": {
                    "describedObject": {"apiVersion": "v1", "kind": "Service", "name": epp},
                    "metric": {"name": PICKER_QUEUE},
                    "target": {"type": "AverageValue", "averageValue": "1"}}}]},
        }))
        .await;

    // An empty queue: to zero.
    wait_at_zero(&scenario).await;
    let hpa = scenario
        .get(HPA, "HorizontalPodAutoscaler", "prefill-sv")
        .await
        .unwrap_or_default();
    assert_eq!(
        hpa_condition(&hpa, "ScaledToZero").map(|(status, ..)| status),
        Some("True".to_owned()),
        "{:#}",
        hpa["status"]
    );

    // One request queued at the picker: the pair comes back, bound as one
    // gang.
    let woken = order.lock().expect("order").len();
    queue.set(1);
    wait_pair_back(&scenario).await;
    pod_watch.abort();
    watch.abort();
    drop(queue);
    let order = order.lock().expect("order").clone();
    // Going down, every pod of both sides left traffic before its replica
    // went (decided in one pass, written in Tandem's slow-start batches).
    let drains: BTreeMap<&String, &String> = order[..woken]
        .iter()
        .filter_map(|(pod, _, drain)| Some((pod, drain.as_ref()?)))
        .collect();
    assert_eq!(
        drains.len(),
        10,
        "all ten pods of prefill and decode drained out of traffic: {drains:#?}"
    );
    let order: Vec<(String, bool)> = order[woken..]
        .iter()
        .map(|(pod, bound, _)| (pod.clone(), *bound))
        .collect();
    // The core pair: prefill-0's 2 pods and decode-0's 4.
    let core = |pod: &str| {
        pod.starts_with(&format!("{ZERO_SERVICE}-prefill-0"))
            || pod.starts_with(&format!("{ZERO_SERVICE}-decode-0"))
    };
    let first_bound = order
        .iter()
        .position(|(_, bound)| *bound)
        .expect("a pod bound");
    let before: BTreeSet<&String> = order[..first_bound]
        .iter()
        .map(|(pod, _)| pod)
        .filter(|pod| core(pod))
        .collect();
    assert_eq!(
        before.len(),
        6,
        "all six pods of the core pair exist before the first is bound: {order:?}"
    );
    assert_zero_together(&seen);
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", ZERO_SERVICE))
        .await;
}

/// The same with KEDA: [`story_4_with_views`] and a ScaledObject on
/// prefill's view (`idleReplicaCount: 0`, `minReplicaCount: 1`, activation
/// above 0), run by KEDA v2.21.0's operator built from its module
/// ([`harness::keda`]). The trigger reads the picker's queue from an HTTP
/// endpoint the test serves (`metrics-api`: no Prometheus runs here; the
/// recipe's trigger is `prometheus`). An empty queue: KEDA takes the view to
/// 0 and the service goes to zero, the router kept; a queue of 1: KEDA
/// wakes the view and the pair comes back. Prefill and decode at zero
/// together in every status.
pub(crate) async fn keda_takes_a_prefill_decode_service_to_zero_and_a_queued_request_brings_the_pair_back()
 {
    let Some(scenario) = Scenario::start("autoscale-keda").await else {
        return;
    };
    harness::keda::install_crds(scenario.plane).await;
    let mut operator = harness::keda::start(scenario.plane, &scenario.namespace);
    story_4_with_views(&scenario).await;
    let (seen, watch) = watch_desired_pair(scenario.api(IS, "InferenceService").await);

    // The picker's queue, as KEDA's metrics-api trigger reads it.
    let queued = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let served = queued.clone();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("a port for the queue");
    let port = listener.local_addr().expect("its address").port();
    let app =
        axum::Router::new().route(
            "/queue",
            axum::routing::get(move || {
                let served = served.clone();
                async move {
                    axum::Json(json!({"queue": served.load(std::sync::atomic::Ordering::SeqCst)}))
                }
            }),
        );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    scenario
        .create_or_fail(&json!({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": "prefill-sv"},
            "spec": {
                "scaleTargetRef": {"apiVersion": VIEWS, "kind": "ScaleView", "name": "prefill-sv"},
                "idleReplicaCount": 0, "minReplicaCount": 1, "maxReplicaCount": 1,
                "pollingInterval": 1, "cooldownPeriod": 5,
                "triggers": [{"type": "metrics-api", "name": "picker-queue", "metricType": "AverageValue",
                    "metadata": {"url": format!("http://127.0.0.1:{port}/queue"),
                        "valueLocation": "queue", "targetValue": "16", "activationTargetValue": "0"}}]},
        }))
        .await;

    // An empty queue: to zero.
    wait_at_zero(&scenario).await;
    // One request queued: the pair comes back.
    queued.store(1, std::sync::atomic::Ordering::SeqCst);
    wait_pair_back(&scenario).await;
    watch.abort();
    assert_zero_together(&seen);
    assert!(
        operator.alive(),
        "KEDA's operator exited:\n{}",
        operator.log_tail()
    );
    // KEDA's HPA reads an External metric from KEDA's metrics server, which
    // does not run here: its failed reads are its own, not Tandem's.
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", ZERO_SERVICE))
        .await;
    server.abort();
    drop(operator);
}
