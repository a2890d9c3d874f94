//! The real HorizontalPodAutoscaler controller scaling Tandem's objects, on
//! the tests' control plane with nodes (`tests/common/control_plane.rs`):
//! kube-controller-manager runs the HPA controller (a sync every
//! [`HPA_SYNC_SECONDS`] s), and the custom metrics API is
//! custom-metrics-apiserver's test adapter behind the aggregation layer,
//! serving the values each scenario writes. kwok makes the pods Ready; the
//! values stand for what vLLM would export (nothing runs a model here:
//! tests/cluster/README.md).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::control_plane::{CustomMetrics, HPA_SYNC_SECONDS};
use common::scenario::{IS, LWS, Scenario, example, label, wait_ready};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const VIEWS: &str = "fusioninfer.io/v1alpha1";
const HPA: &str = "autoscaling/v2";
/// The metric `examples/scaleview/hpa.yaml` scales on: vLLM's waiting
/// requests, per pod.
const WAITING: &str = "vllm:num_requests_waiting";

/// Plays vLLM's `vllm:num_requests_waiting` for the view's pods: every
/// second, `load` waiting requests shared evenly over the pods the view's
/// selector picks (as a router spreads its queue), written per pod.
async fn queue(scenario: &Scenario, metrics: &'static CustomMetrics, view: &str) -> QueueHandle {
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
                        .set(
                            &namespace,
                            "pods",
                            pod,
                            WAITING,
                            &(total / count).to_string(),
                        )
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hpa_on_a_view_scales_it_by_priority_on_a_served_metric_and_back_down_spot_first() {
    let Some(scenario) = Scenario::start("autoscale-view").await else {
        return;
    };
    scenario.nodes(1).await;
    scenario.spot_nodes(1).await;
    let metrics = scenario.plane.custom_metrics().await;

    let objects = common::yaml_documents(&common::repo_path(
        "examples/scaleview/decode-ondemand-spot.yaml",
    ));
    let mut service = objects
        .iter()
        .find(|o| o["kind"] == "InferenceService")
        .expect("the example's service")
        .clone();
    for role in service["spec"]["roles"]
        .as_array_mut()
        .expect("roles")
        .iter_mut()
        .filter(|r| r["componentType"] == "decoder")
    {
        role["drain"] = json!({"seconds": 3});
    }
    let view = objects
        .iter()
        .find(|o| o["kind"] == "ScaleView")
        .expect("the example's view");
    scenario.create_or_fail(&service).await;
    scenario.create_or_fail(view).await;
    wait_ready(&scenario, "spot-decode").await;

    let mut hpa = example("examples/scaleview/hpa.yaml");
    hpa["spec"]["behavior"] = json!({
        "scaleDown": {"stabilizationWindowSeconds": 6},
        "scaleUp": {"stabilizationWindowSeconds": 0},
    });
    let load = queue(&scenario, metrics, "spot-decode-sv").await;
    scenario.create_or_fail(&hpa).await;

    // The HPA reads the metric (an empty queue) before it rises, so what is
    // timed below is the HPA's reaction, not its first discovery of the API.
    scenario
        .eventually(60, "the HPA reads the queue: 0 per pod", || async {
            let hpa = scenario
                .get(HPA, "HorizontalPodAutoscaler", "spot-decode-sv")
                .await
                .unwrap_or_default();
            match hpa_figures(&hpa) {
                (metric, 1, 1) if metric == "0" => Ok(()),
                other => Err(format!("{other:?}: {:#}", hpa["status"])),
            }
        })
        .await;

    // Up: 30 waiting requests, 10 per pod wanted.
    let raised = Instant::now();
    load.set(30);
    scenario
        .eventually(60, "the HPA scaled the view to 3", || async {
            let view = scenario.get(VIEWS, "ScaleView", "spot-decode-sv").await;
            match view.as_ref().and_then(|v| v["spec"]["replicas"].as_i64()) {
                Some(3) => Ok(()),
                other => Err(format!("view spec.replicas {other:?}")),
            }
        })
        .await;
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
    let figures = scenario
        .eventually(
            30,
            "kubectl get hpa shows 10 per pod and 3 replicas",
            || async {
                let hpa = scenario
                    .get(HPA, "HorizontalPodAutoscaler", "spot-decode-sv")
                    .await
                    .unwrap_or_default();
                match hpa_figures(&hpa) {
                    (metric, 3, 3) if metric == "10" => Ok((metric, 3, 3)),
                    other => Err(format!("{other:?}: {:#}", hpa["status"])),
                }
            },
        )
        .await;
    eprintln!("kubectl get hpa: {figures:?}");

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
    scenario
        .eventually(
            90,
            "the HPA scaled the view to 2, on-demand only",
            || async {
                let roles = replicas_by_role(&scenario).await;
                let pods = scenario.names("v1", "Pod").await;
                if roles.get("decode-ondemand") == Some(&2)
                    && !roles.contains_key("decode-spot")
                    && pods.len() == 3
                {
                    Ok(())
                } else {
                    Err(format!("{roles:?}, pods {pods:?}"))
                }
            },
        )
        .await;
    // An empty queue: down to the HPA's minimum, one on-demand replica.
    load.set(0);
    scenario
        .eventually(
            90,
            "the HPA scaled the view down to 1, on-demand kept",
            || async {
                let roles = replicas_by_role(&scenario).await;
                let pods = scenario.names("v1", "Pod").await;
                if roles.get("decode-ondemand") == Some(&1)
                    && !roles.contains_key("decode-spot")
                    && pods.len() == 2
                {
                    Ok(())
                } else {
                    Err(format!("{roles:?}, pods {pods:?}"))
                }
            },
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
    scenario.assert_floor_held();
    scenario.assert_writes_sound();
    scenario
        .assert_quiet(10, (IS, "InferenceService", "spot-decode"))
        .await;
}
