//! What happens after the API server, on the tests' control plane with
//! nodes (`tests/harness/src/control_plane.rs`): kwok plays each scenario's GPU
//! nodes and the pods' lifecycles (Running, Ready after a load delay,
//! Terminating for the whole grace period, never-ready and crash-looping
//! pods, a node that stops being Ready), the real kube-scheduler binds the
//! pods, and Kubernetes' node lifecycle, taint eviction and disruption
//! controllers act on them. Each scenario checks the invariants of
//! `tests/harness/src/scenario.rs` too. Nothing here ran on real hardware: kwok
//! runs no container and no GPU (tests/cluster/README.md).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::rollout::RolloutBudget;
use harness::scenario::{
    BLOCK_LABEL, HEALTH_LABEL, IS, Invariant, LWS, Quiet, RACK_LABEL, Scenario, condition, example,
    label, racked, replica_domains, replica_racks, set_role_replicas, wait_service_ready,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

/// Every role's pods may stay on a node with no other pod of the role: the
/// replicas of a role land on different nodes, so one node lost takes one
/// replica.
fn one_replica_per_node(service: &mut Value) {
    for role in service["spec"]["roles"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let name = role["name"].as_str().unwrap_or_default().to_owned();
        role["template"]["spec"]["affinity"] = json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"fusioninfer.io/role-name": name}},
                "topologyKey": "kubernetes.io/hostname"}]}});
    }
}

/// A grace period of `seconds` on every role's pods: kwok keeps a deleted
/// pod Terminating for all of it, as a kubelet whose container takes that
/// long to stop.
fn grace(service: &mut Value, seconds: i64) {
    for role in service["spec"]["roles"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        role["template"]["spec"]["terminationGracePeriodSeconds"] = json!(seconds);
    }
}

/// Creates `service` and waits until it is ready; its name and its first
/// role's.
async fn deploy(scenario: &Scenario, service: &Value) -> (String, String) {
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let role = service["spec"]["roles"][0]["name"]
        .as_str()
        .expect("a role")
        .to_owned();
    scenario.create_or_fail(service).await;
    wait_service_ready(scenario, &name).await;
    (name, role)
}

/// Replaces the spec of InferenceService `name` with `service`'s, as
/// `kubectl edit` does (a merge patch: the roles list is replaced whole).
async fn set_spec(scenario: &Scenario, name: &str, service: &Value) {
    scenario
        .api(IS, "InferenceService")
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": service["spec"]})),
        )
        .await
        .expect("the spec changed");
}

fn pods_api(scenario: &Scenario) -> Api<Pod> {
    Api::namespaced(scenario.client.clone(), &scenario.namespace)
}

/// The node each pod of the scenario is bound to.
async fn placement(scenario: &Scenario) -> BTreeMap<String, String> {
    scenario
        .list("v1", "Pod")
        .await
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| {
            Some((
                p["metadata"]["name"].as_str()?.to_owned(),
                p["spec"]["nodeName"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// `kubectl cordon NODE`: no new pod lands on it.
async fn cordon(scenario: &Scenario, node: &str) {
    let nodes: Api<Node> = Api::all(scenario.client.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordoned");
}

/// `kubectl drain NODE`: cordon it, then evict its pods through the
/// Eviction API, again and again while a budget refuses (429), until none
/// is left. The answers, in order: (pod, HTTP code).
async fn drain(scenario: &Scenario, node: &str, seconds: u64) -> Vec<(String, u16)> {
    cordon(scenario, node).await;
    let pods = pods_api(scenario);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut answers = Vec::new();
    loop {
        let on_node: Vec<Pod> = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .expect("the node's pods")
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if on_node.is_empty() {
            return answers;
        }
        for pod in &on_node {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let code = match pods.evict(&name, &EvictParams::default()).await {
                Ok(_) => 201,
                Err(kube::Error::Api(status)) => status.code,
                Err(e) => panic!("evicting {name}: {e}"),
            };
            answers.push((name, code));
        }
        assert!(
            Instant::now() < deadline,
            "node {node} not drained within {seconds} s: {answers:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Story 2 (2 prefill, 4 decode, one GPU each), with a grace period of 3 s,
/// created and Ready; its name.
async fn story_two_ready(scenario: &Scenario) -> String {
    let mut service = example("examples/seeds/story2-prefill-decode.yaml");
    grace(&mut service, 3);
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    scenario.create_or_fail(&service).await;
    wait_service_ready(scenario, &name).await;
    name
}

pub(crate) async fn a_node_drain_through_the_eviction_api_is_held_by_each_roles_budget() {
    let Some(scenario) = Scenario::start("nodes-drain").await else {
        return;
    };
    // Story 2 (2 prefill, 4 decode, one GPU each) on one node of 8 GPUs.
    let first = scenario.nodes(1).await;
    let name = story_two_ready(&scenario).await;
    assert!(
        placement(&scenario).await.values().all(|n| *n == first[0]),
        "every pod on the only node"
    );
    // A second node comes; the first is drained as `kubectl drain` does.
    let second = scenario.nodes(1).await;
    let answers = drain(&scenario, &first[0], 240).await;
    // Each role's budget lets one replica go at a time: the API server
    // refused evictions beyond it (429), as its audit log shows (kube's
    // client retries a 429 by itself, so the answers above are the last
    // tries), and every pod was evicted in the end.
    let evictions: Vec<(String, u16)> = scenario
        .plane
        .requests()
        .into_iter()
        .filter(|r| r.subresource.as_deref() == Some("eviction"))
        .filter(|r| r.namespace.as_deref() == Some(scenario.namespace.as_str()))
        .map(|r| (r.name.unwrap_or_default(), r.code))
        .collect();
    for role in ["prefill", "decode"] {
        let of_role = |code: u16| {
            evictions
                .iter()
                .filter(|(pod, c)| pod.contains(&format!("-{role}-")) && *c == code)
                .count()
        };
        assert!(
            of_role(429) >= 1,
            "{role}: the budget refused an eviction: {evictions:?}"
        );
        assert_eq!(
            of_role(201),
            if role == "prefill" { 2 } else { 4 },
            "{role}: every pod evicted once: {evictions:?}; the drain's answers {answers:?}"
        );
    }
    // The drain completes once LWS has put every replica on the other node.
    let service = wait_service_ready(&scenario, &name).await;
    assert_eq!(
        service["status"]["components"]["decode"]["readyReplicas"],
        4
    );
    let now = placement(&scenario).await;
    assert_eq!(now.len(), 6, "{now:?}");
    assert!(now.values().all(|n| *n == second[0]), "{now:?}");
    scenario.assert_floor_held();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

/// The names of the pods of role `role` not being deleted, in order.
async fn role_pods(scenario: &Scenario, role: &str) -> Vec<String> {
    pods_api(scenario)
        .list(&ListParams::default().labels(&format!("fusioninfer.io/role-name={role}")))
        .await
        .expect("the role's pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Evicts pod `name` once; the HTTP code of the answer.
async fn evict(scenario: &Scenario, name: &str) -> u16 {
    match pods_api(scenario)
        .evict(name, &EvictParams::default())
        .await
    {
        Ok(_) => 201,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("evicting {name}: {e}"),
    }
}

/// Sets the namespace's ResourceQuota on pods to `pods`.
async fn pod_quota(scenario: &Scenario, pods: usize) {
    let quota = json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "pods", "namespace": scenario.namespace},
        "spec": {"hard": {"pods": pods.to_string()}},
    });
    scenario
        .api("v1", "ResourceQuota")
        .await
        .patch(
            "pods",
            &PatchParams::apply("e2e-admin").force(),
            &Patch::Apply(quota),
        )
        .await
        .expect("the quota set");
}

/// Each replica is a LeaderWorkerSet with StatefulSets of its own, so a
/// replica whose pods are gone (evicted, and not yet made again) leaves no
/// pod through which the disruption controller could find its controller.
/// Here a ResourceQuota keeps the evicted prefill replica's pod from coming
/// back, and the role's budget must still refuse to evict the other
/// replica's: a budget of `maxUnavailable` counts only the controllers of the
/// pods that exist, and let it go (both prefill replicas out of service, as
/// a node drain did on CI). Once the quota allows the pod again, the replica
/// comes back and the second eviction passes.
pub(crate) async fn a_replica_whose_pods_cannot_come_back_still_counts_in_its_roles_budget() {
    let Some(scenario) = Scenario::start("nodes-budget-gap").await else {
        return;
    };
    scenario.nodes(1).await;
    let name = story_two_ready(&scenario).await;
    let prefill = role_pods(&scenario, "prefill").await;
    assert_eq!(prefill.len(), 2, "{prefill:?}");
    let all = placement(&scenario).await.len();
    assert_eq!(all, 6, "story 2's six pods");
    // One pod fewer than there are: an evicted pod is not made again.
    pod_quota(&scenario, all - 1).await;
    assert_eq!(
        evict(&scenario, &prefill[0]).await,
        201,
        "the first replica"
    );
    scenario
        .eventually(30, &format!("pod {} gone", prefill[0]), || async {
            match pods_api(&scenario).get_opt(&prefill[0]).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    // For 8 s, with the first replica's pod gone and refused by the quota,
    // the budget refuses the second replica's pod every time.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        assert_eq!(
            role_pods(&scenario, "prefill").await,
            [prefill[1].clone()],
            "the first replica's pod is still kept out by the quota"
        );
        assert_eq!(
            evict(&scenario, &prefill[1]).await,
            429,
            "the budget refuses the role's last replica"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The quota lifted, the first replica comes back, and the second may go.
    // The StatefulSet controller retries a refused pod with a backoff that
    // doubles at each refusal (5 ms to 1 000 s) and every event of its pods
    // retries at once, so after the hold its next try can be minutes away
    // (461 to 904 s for this scenario, 2026-12-02). What this scenario is
    // about is Tandem's budget, not that backoff: a change to the
    // StatefulSets queues them again at once, as an edit by hand would.
    pod_quota(&scenario, 100).await;
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(scenario.client.clone(), &scenario.namespace);
    for set in sets
        .list(&Default::default())
        .await
        .expect("the StatefulSets")
    {
        let set_name = set.metadata.name.expect("a stored StatefulSet has a name");
        sets.patch(
            &set_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e.tandem/quota": "lifted"}}})),
        )
        .await
        .expect("the StatefulSet queued again");
    }
    scenario
        .eventually(120, &format!("pod {} evicted", prefill[1]), || async {
            match evict(&scenario, &prefill[1]).await {
                201 => Ok(()),
                code => Err(format!("HTTP {code}")),
            }
        })
        .await;
    wait_service_ready(&scenario, &name).await;
    scenario.assert_floor_held();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

pub(crate) async fn a_lost_node_is_tainted_its_pods_evicted_and_the_replica_comes_back_elsewhere() {
    let Some(scenario) = Scenario::start("nodes-lost").await else {
        return;
    };
    scenario.nodes(3).await;
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    service["spec"]["roles"][0]["replicas"] = json!(2);
    one_replica_per_node(&mut service);
    grace(&mut service, 3);
    let (name, role) = deploy(&scenario, &service).await;
    let before = placement(&scenario).await;
    let lost = before.values().next().expect("a pod's node").clone();

    // The node stops answering: kwok's node-not-ready stage turns its Ready
    // condition False.
    let nodes: Api<Node> = Api::all(scenario.client.clone());
    nodes
        .patch(
            &lost,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": "true"}}}),
            ),
        )
        .await
        .expect("the node fails");
    // The node lifecycle controller taints it.
    scenario
        .eventually(30, "the lost node tainted NoExecute", || async {
            let node = nodes.get(&lost).await.expect("the node");
            let taints: Vec<String> = node
                .spec
                .and_then(|s| s.taints)
                .into_iter()
                .flatten()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            if taints.contains(&"node.kubernetes.io/not-ready:NoExecute".to_owned()) {
                Ok(())
            } else {
                Err(format!("{taints:?}"))
            }
        })
        .await;
    // The taint eviction controller evicts its pod once the toleration
    // (10 s here) runs out; LWS recreates it, and the scheduler puts it on
    // the spare node.
    scenario
        .eventually(
            90,
            "the lost replica back on another node and ready",
            || async {
                let now = placement(&scenario).await;
                let stored = scenario
                    .get(IS, "InferenceService", &name)
                    .await
                    .expect("the service");
                let ready = &stored["status"]["components"][role.as_str()]["readyReplicas"];
                if now.len() == 2 && !now.values().any(|n| *n == lost) && *ready == 2 {
                    Ok(())
                } else {
                    Err(format!("{now:?}; ready {ready}"))
                }
            },
        )
        .await;
    // Tandem said so: the role degraded, then recovered, one Event each.
    one_episode_in_events(&scenario, &name).await;
    scenario.assert_writes_sound();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

/// A rolling update's budget ([`RolloutBudget`]) checked at every pod event
/// of the scenario, from the end of the watch's first list on, until
/// dropped.
struct RolloutWatch {
    budget: Arc<Mutex<RolloutBudget>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RolloutWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RolloutWatch {
    /// Starts watching; returns once the first list is read, so that every
    /// change after it is checked.
    async fn start(scenario: &Scenario, budget: RolloutBudget) -> Self {
        let budget = Arc::new(Mutex::new(budget));
        let pods = pods_api(scenario);
        let seen = budget.clone();
        let (listed, ready) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut listed = Some(listed);
            let mut events = watcher(pods, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let mut budget = seen.lock().expect("the budget");
                let check = listed.is_none();
                match event {
                    Ok(watcher::Event::InitDone) => {
                        budget.check();
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        budget.pod(&pod, check);
                    }
                    Ok(watcher::Event::Delete(pod)) => budget.pod_gone(&pod, check),
                    _ => {}
                }
            }
        });
        ready.await.expect("the pods listed");
        RolloutWatch { budget, task }
    }

    /// The broken promises so far, and the most replicas present and
    /// unavailable at once.
    fn seen(&self) -> (Vec<String>, usize, usize) {
        let budget = self.budget.lock().expect("the budget");
        (
            budget.violations.clone(),
            budget.most_replicas,
            budget.most_unavailable,
        )
    }
}

/// The revisions the pods of `role` run now.
async fn revisions_of(scenario: &Scenario, role: &str) -> BTreeSet<String> {
    scenario
        .list("v1", "Pod")
        .await
        .iter()
        .filter(|p| label(p, "fusioninfer.io/role-name") == role)
        .map(|p| label(p, "fusioninfer.io/revision").to_owned())
        .collect()
}

pub(crate) async fn a_rolling_update_to_an_image_that_never_gets_ready_halts_after_one_replica_and_a_revert_resumes()
 {
    let Some(scenario) = Scenario::start("nodes-rollout").await else {
        return;
    };
    scenario.nodes(1).await;
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    service["spec"]["roles"][0]["replicas"] = json!(3);
    service["spec"]["upgradeStrategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "progressDeadlineSeconds": 20}});
    grace(&mut service, 3);
    let (name, role) = deploy(&scenario, &service).await;
    let before = revisions_of(&scenario, &role).await;
    let watch = RolloutWatch::start(&scenario, RolloutBudget::new(&role, 3, 1, 0, 0, before)).await;

    // A new image that never becomes ready (kwok's never-ready stage).
    let mut bad = service.clone();
    bad["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
        json!("vllm/vllm-openai:v0.11.1-broken");
    bad["spec"]["roles"][0]["template"]["metadata"]["labels"][HEALTH_LABEL] = json!("never-ready");
    set_spec(&scenario, &name, &bad).await;
    let halted = scenario
        .eventually(90, "the rollout halts and says so", || async {
            let stored = scenario
                .get(IS, "InferenceService", &name)
                .await
                .expect("the service");
            let text = stored["status"].to_string();
            if text.contains("ProgressDeadlineExceeded") {
                Ok(stored)
            } else {
                Err(format!("{:#}", stored["status"]))
            }
        })
        .await;
    // One replica moved, no more.
    let sets = scenario.list(LWS, "LeaderWorkerSet").await;
    let moved = sets
        .iter()
        .filter(|s| s.to_string().contains("v0.11.1-broken"))
        .count();
    assert_eq!(
        moved, 1,
        "one replica replaced, the rollout halted: {halted:#}"
    );
    let (broken, _, _) = watch.seen();
    assert_eq!(
        broken,
        Vec::<String>::new(),
        "the budget held while halting"
    );

    // Reverting the image resumes: every replica ready on the old revision.
    set_spec(&scenario, &name, &service).await;
    scenario
        .eventually(90, "every replica ready again after the revert", || async {
            let stored = scenario
                .get(IS, "InferenceService", &name)
                .await
                .expect("the service");
            let component = &stored["status"]["components"][role.as_str()];
            let sets = scenario.list(LWS, "LeaderWorkerSet").await;
            let broken = sets
                .iter()
                .filter(|s| s.to_string().contains("v0.11.1-broken"))
                .count();
            if broken == 0
                && component["readyReplicas"] == 3
                && condition(&stored, "Ready").as_deref() == Some("True")
            {
                Ok(())
            } else {
                Err(format!("{broken} broken; {component}"))
            }
        })
        .await;
    let (broken, most, unavailable) = watch.seen();
    assert_eq!(broken, Vec::<String>::new(), "the budget held throughout");
    assert_eq!(
        (most, unavailable),
        (3, 1),
        "no surge; one replica out at most"
    );
    scenario.assert_floor_held();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

pub(crate) async fn a_rolling_update_with_surge_and_a_partition_keeps_its_budget_at_every_pod_event()
 {
    let Some(scenario) = Scenario::start("nodes-surge").await else {
        return;
    };
    scenario.nodes(1).await;
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    service["spec"]["roles"][0]["replicas"] = json!(4);
    service["spec"]["upgradeStrategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1, "partition": 1}});
    grace(&mut service, 2);
    let (name, role) = deploy(&scenario, &service).await;
    let before = revisions_of(&scenario, &role).await;
    let watch = RolloutWatch::start(
        &scenario,
        RolloutBudget::new(&role, 4, 1, 1, 1, before.clone()),
    )
    .await;

    // A new image, each pod ready after kwok's load delay (2-6 s).
    let mut next = service.clone();
    next["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
        json!("vllm/vllm-openai:v0.11.1");
    set_spec(&scenario, &name, &next).await;
    let done = scenario
        .eventually(120, "replicas 1..3 at the new revision, 0 kept", || async {
            let stored = scenario
                .get(IS, "InferenceService", &name)
                .await
                .expect("the service");
            let component = &stored["status"]["components"][role.as_str()];
            let sets = scenario.list(LWS, "LeaderWorkerSet").await;
            let new = sets
                .iter()
                .filter(|s| s.to_string().contains("v0.11.1\""))
                .count();
            if component["updatedReplicas"] == 3
                && component["readyReplicas"] == 4
                && new == 3
                && sets.len() == 4
            {
                Ok(component.clone())
            } else {
                Err(format!("{new} of {} sets new; {component}", sets.len()))
            }
        })
        .await;
    let (broken, most, unavailable) = watch.seen();
    assert_eq!(
        broken,
        Vec::<String>::new(),
        "maxSurge 1, maxUnavailable 1, the partition and the floor at every pod event ({done})"
    );
    eprintln!("surge rollout: at most {most} replicas and {unavailable} unavailable at once");
    // Replica 0 (below the partition) still runs the old revision.
    let zero: BTreeSet<String> = scenario
        .list("v1", "Pod")
        .await
        .iter()
        .filter(|p| label(p, "fusioninfer.io/role-name") == role.as_str())
        .filter(|p| label(p, "fusioninfer.io/replica-index") == "0")
        .map(|p| label(p, "fusioninfer.io/revision").to_owned())
        .collect();
    assert!(zero.is_subset(&before) && !zero.is_empty(), "{zero:?}");
    scenario.assert_floor_held();
    scenario.assert_writes_sound();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

pub(crate) async fn a_scale_down_drains_the_victims_then_their_pods_terminate_for_their_grace_period()
 {
    let Some(scenario) = Scenario::start("nodes-scale-down").await else {
        return;
    };
    scenario.nodes(1).await;
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    service["spec"]["roles"][0]["replicas"] = json!(4);
    service["spec"]["roles"][0]["drain"] = json!({"seconds": 3});
    grace(&mut service, 4);
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    scenario.create_or_fail(&service).await;
    wait_service_ready(&scenario, &name).await;

    // Every pod event from here: when each pod was first seen being
    // deleted, with which traffic label, and when it went.
    type Seen = BTreeMap<String, (Instant, String, Option<Instant>)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let record = seen.clone();
    let pods = pods_api(&scenario);
    let task = tokio::spawn(async move {
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let mut seen = record.lock().expect("seen");
            match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))
                    if pod.metadata.deletion_timestamp.is_some() =>
                {
                    let traffic = pod
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("fusioninfer.io/traffic"))
                        .cloned()
                        .unwrap_or_default();
                    seen.entry(pod.metadata.name.clone().unwrap_or_default())
                        .or_insert((Instant::now(), traffic, None));
                }
                Ok(watcher::Event::Delete(pod)) => {
                    if let Some(entry) =
                        seen.get_mut(pod.metadata.name.as_deref().unwrap_or_default())
                    {
                        entry.2 = Some(Instant::now());
                    }
                }
                _ => {}
            }
        }
    });
    set_role_replicas(&scenario, &name, 0, 2).await;
    scenario
        .eventually(60, "two replicas left, the others' pods gone", || async {
            let pods = scenario.list("v1", "Pod").await;
            let sets = scenario.names(LWS, "LeaderWorkerSet").await;
            if pods.len() == 2 && sets.len() == 2 {
                Ok(())
            } else {
                Err(format!("{} pods, {sets:?}", pods.len()))
            }
        })
        .await;
    task.abort();
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(
        seen.len(),
        2,
        "two victims' pods deleted: {:?}",
        seen.keys()
    );
    for (pod, (deleted, traffic, gone)) in seen.iter() {
        // Out of traffic before they were deleted: a request path selecting
        // fusioninfer.io/traffic=serving never lists a terminating pod.
        assert_eq!(traffic, "draining", "{pod}");
        // Terminating for their grace period (4 s), not gone at once.
        let gone = gone.unwrap_or_else(|| panic!("{pod} never went"));
        let terminating = gone.duration_since(*deleted);
        assert!(
            terminating >= Duration::from_secs(3),
            "{pod} terminated after {terminating:?}"
        );
    }
    let kept: Vec<String> = scenario
        .list("v1", "Pod")
        .await
        .iter()
        .map(|p| label(p, "fusioninfer.io/traffic").to_owned())
        .collect();
    assert_eq!(kept, ["serving", "serving"]);
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

const GATEWAY_API: &str = "gateway.networking.k8s.io/v1";

/// Plays the Gateway controller no test can run: every 300 ms, a Gateway
/// or HTTPRoute of the scenario whose status has not seen its generation
/// is marked Accepted and Programmed (a route: Accepted and ResolvedRefs
/// for its parent), as a controller that took it would.
fn gateway_controller(scenario: &Scenario) -> tokio::task::JoinHandle<()> {
    let client = scenario.client.clone();
    let namespace = scenario.namespace.clone();
    tokio::spawn(async move {
        let api = |kind: &str, plural: &str| {
            Api::<kube::api::DynamicObject>::namespaced_with(
                client.clone(),
                &namespace,
                &kube::api::ApiResource {
                    group: "gateway.networking.k8s.io".into(),
                    version: "v1".into(),
                    api_version: GATEWAY_API.into(),
                    kind: kind.into(),
                    plural: plural.into(),
                },
            )
        };
        let (gateways, routes) = (api("Gateway", "gateways"), api("HTTPRoute", "httproutes"));
        let condition = |t: &str, generation: i64| {
            json!({"type": t, "status": "True", "reason": t, "message": "",
                   "lastTransitionTime": jiff::Timestamp::now().to_string(),
                   "observedGeneration": generation})
        };
        loop {
            for gateway in gateways
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let value = serde_json::to_value(&gateway).unwrap_or_default();
                let generation = value["metadata"]["generation"].as_i64().unwrap_or(0);
                if value["status"]["conditions"][0]["observedGeneration"] != generation {
                    let status = json!({"status": {"conditions": [
                        condition("Accepted", generation), condition("Programmed", generation)]}});
                    let name = gateway.metadata.name.clone().unwrap_or_default();
                    let _ = gateways
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                        .await;
                }
            }
            for route in routes
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let value = serde_json::to_value(&route).unwrap_or_default();
                let generation = value["metadata"]["generation"].as_i64().unwrap_or(0);
                let seen = &value["status"]["parents"][0]["conditions"][0]["observedGeneration"];
                if *seen != generation {
                    let parents: Vec<Value> = value["spec"]["parentRefs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|parent| {
                            json!({"controllerName": "e2e.tandem/gateway",
                            "parentRef": parent,
                            "conditions": [condition("Accepted", generation),
                                           condition("ResolvedRefs", generation)]})
                        })
                        .collect();
                    let name = route.metadata.name.clone().unwrap_or_default();
                    let _ = routes
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"parents": parents}})),
                        )
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// The route's backends and weights, as stored.
async fn weights(scenario: &Scenario, route: &str) -> Vec<(String, i64)> {
    let Some(route) = scenario.get(GATEWAY_API, "HTTPRoute", route).await else {
        return Vec::new();
    };
    route["spec"]["rules"][0]["backendRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_owned(),
                b["weight"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

/// From the API server's own order of writes (its audit log): every
/// weight Tandem gave the backends of `image`'s revision, each with the
/// share of traffic that revision's Ready pods could carry at that moment
/// (`floor(ready × 100 / desired)`, one pod per replica). A weight above
/// its share is traffic sent to replicas that were not Ready.
fn weights_against_readiness(scenario: &Scenario, image: &str, desired: i64) -> Vec<(i64, i64)> {
    let mut ready: BTreeMap<String, bool> = BTreeMap::new();
    let mut seen = Vec::new();
    for request in scenario.writes() {
        let Some(object) = request.response.as_ref() else {
            continue;
        };
        match request.resource.as_str() {
            "pods" => {
                let name = request.name.clone().unwrap_or_default();
                let ours = object["spec"]["containers"][0]["image"] == image;
                let is_ready = object["metadata"]["deletionTimestamp"].is_null()
                    && object["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True");
                if request.verb == "delete" {
                    ready.remove(&name);
                } else if ours {
                    ready.insert(name, is_ready);
                }
            }
            "httproutes" if request.by_tandem() && request.subresource.is_none() => {
                let share = ready.values().filter(|r| **r).count() as i64 * 100 / desired;
                let backends = object["spec"]["rules"][0]["backendRefs"].as_array();
                // The backend of the revision whose pods run `image` is the
                // one that is not the first (the active) revision's.
                if let Some(backends) = backends
                    && backends.len() == 2
                {
                    seen.push((backends[1]["weight"].as_i64().unwrap_or(0), share));
                }
            }
            _ => {}
        }
    }
    seen
}

/// Creates `service` (an upgrade through a Gateway) with a 3 s grace
/// period, waits until it is ready and its route sends all traffic to its
/// first revision; its name, its route's and that revision's backend.
async fn upgrade_ready(scenario: &Scenario, service: &mut Value) -> (String, String, String) {
    grace(service, 3);
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let route = format!("{name}-route");
    scenario.create_or_fail(service).await;
    wait_service_ready(scenario, &name).await;
    scenario
        .eventually(60, "all traffic on the first revision", || async {
            let now = weights(scenario, &route).await;
            if now.len() == 1 && now[0].1 == 100 {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    let first = weights(scenario, &route).await[0].0.clone();
    (name, route, first)
}

pub(crate) async fn an_incremental_upgrade_moves_traffic_only_onto_ready_pods_and_a_rollback_returns_it()
 {
    let Some(scenario) = Scenario::start("nodes-upgrade").await else {
        return;
    };
    scenario.nodes(1).await;
    let gateway = gateway_controller(&scenario);
    let mut service = example("examples/inferenceservice/incremental-upgrade.yaml");
    service["spec"]["upgradeStrategy"]["incrementalUpgradeOptions"] = json!({
        "maxSurgePercent": 50, "stepSizePercent": 25, "intervalSeconds": 2,
        "gatewayClassName": "cluster-gateway"});
    let (name, route, first) = upgrade_ready(&scenario, &mut service).await;

    // A new image: capacity and traffic move step by step.
    let image = |tag: &str| format!("vllm/vllm-openai:{tag}");
    let mut second = service.clone();
    second["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
        json!(image("v0.12.0"));
    set_spec(&scenario, &name, &second).await;
    scenario
        .eventually(180, "all traffic on the second revision", || async {
            let now = weights(&scenario, &route).await;
            let stored = scenario
                .get(IS, "InferenceService", &name)
                .await
                .expect("the service");
            let done = stored["status"]["upgrade"]["pending"].is_null();
            if now.len() == 1 && now[0].0 != first && now[0].1 == 100 && done {
                Ok(())
            } else {
                Err(format!("{now:?}; {}", stored["status"]["upgrade"]))
            }
        })
        .await;
    let moves = weights_against_readiness(&scenario, &image("v0.12.0"), 4);
    assert!(
        moves.iter().any(|(weight, _)| *weight > 0 && *weight < 100),
        "traffic moved in steps: {moves:?}"
    );
    for (weight, share) in &moves {
        assert!(weight <= share, "a weight beyond the Ready pods: {moves:?}");
    }
    // Every replica runs the new image, on a node; the revisions are stored
    // as ControllerRevisions by the API server.
    let pods: Vec<Value> = scenario
        .list("v1", "Pod")
        .await
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    assert_eq!(pods.len(), 4, "{pods:#?}");
    for pod in &pods {
        assert_eq!(pod["spec"]["containers"][0]["image"], image("v0.12.0"));
        assert!(pod["spec"]["nodeName"].is_string());
    }
    let records = scenario.names("apps/v1", "ControllerRevision").await;
    assert!(records.len() >= 2, "{records:?}");

    // A third image, taken back while it moves: the rollback returns the
    // traffic to the second revision and removes the third's replicas.
    let second_backend = weights(&scenario, &route).await[0].0.clone();
    let mut third = second.clone();
    third["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
        json!(image("v0.13.0"));
    set_spec(&scenario, &name, &third).await;
    scenario
        .eventually(120, "some traffic on the third revision", || async {
            let now = weights(&scenario, &route).await;
            if now.len() == 2 && now[1].1 > 0 {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
    set_spec(&scenario, &name, &second).await;
    scenario
        .eventually(120, "all traffic back on the second revision", || async {
            let now = weights(&scenario, &route).await;
            let pods = scenario.list("v1", "Pod").await;
            let third = pods
                .iter()
                .filter(|p| p["spec"]["containers"][0]["image"] == image("v0.13.0"))
                .count();
            if now == [(second_backend.clone(), 100)] && third == 0 {
                Ok(())
            } else {
                Err(format!("{now:?}; {third} pods of the third image"))
            }
        })
        .await;
    gateway.abort();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

pub(crate) async fn a_new_revision_takes_all_traffic_at_once_only_when_every_replica_of_it_is_ready()
 {
    let Some(scenario) = Scenario::start("nodes-blue-green").await else {
        return;
    };
    scenario.nodes(1).await;
    let gateway = gateway_controller(&scenario);
    let mut service = example("examples/inferenceservice/incremental-upgrade.yaml");
    service["spec"]["roles"][0]["replicas"] = json!(2);
    service["spec"]["upgradeStrategy"] = json!({"type": "NewRevision",
        "incrementalUpgradeOptions": {"gatewayClassName": "cluster-gateway"}});
    let (name, route, first) = upgrade_ready(&scenario, &mut service).await;

    // A new image whose pods load for 4 s each: the new revision comes up
    // whole beside the old one, then takes every request at once.
    let image = "vllm/vllm-openai:v0.12.0";
    let mut second = service.clone();
    second["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!(image);
    second["spec"]["roles"][0]["template"]["metadata"]["annotations"]["e2e.tandem/load-delay"] =
        json!("4s");
    set_spec(&scenario, &name, &second).await;
    scenario
        .eventually(
            120,
            "all traffic on the new revision, the old one gone",
            || async {
                let now = weights(&scenario, &route).await;
                let stored = scenario
                    .get(IS, "InferenceService", &name)
                    .await
                    .expect("the service");
                let pods: Vec<Value> = scenario
                    .list("v1", "Pod")
                    .await
                    .into_iter()
                    .filter(|p| p["spec"]["containers"][0]["image"] != image)
                    .collect();
                let done = stored["status"]["upgrade"]["pending"].is_null();
                if now.len() == 1 && now[0].0 != first && now[0].1 == 100 && done && pods.is_empty()
                {
                    Ok(())
                } else {
                    Err(format!(
                        "{now:?}; {} old pods; {}",
                        pods.len(),
                        stored["status"]["upgrade"]
                    ))
                }
            },
        )
        .await;
    // From the audit log: the new revision's weight was only ever 0 or 100,
    // and 100 only once both its replicas were Ready.
    let moves = weights_against_readiness(&scenario, image, 2);
    assert!(
        moves.iter().any(|(weight, _)| *weight == 100),
        "the switch was written: {moves:?}"
    );
    for (weight, share) in &moves {
        assert!(
            *weight == 0 || *weight == 100,
            "blue/green moves all at once: {moves:?}"
        );
        assert!(
            weight <= share,
            "traffic before every replica was Ready: {moves:?}"
        );
    }
    let records = scenario.names("apps/v1", "ControllerRevision").await;
    assert!(records.len() >= 2, "{records:?}");
    gateway.abort();
    scenario.assert_floor_held();
    scenario.assert_writes_sound();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

/// A workload of `kind` named `name` with `replicas` pods of one container
/// asking for no GPU: a Deployment, a StatefulSet or a LeaderWorkerSet of
/// groups of one.
fn workload(kind: &str, name: &str, replicas: i64) -> Value {
    let template = json!({"metadata": {"labels": {"app": name}},
        "spec": {"terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "c", "image": format!("{name}:v1")}]}});
    match kind {
        "LeaderWorkerSet" => json!({"apiVersion": LWS, "kind": kind,
            "metadata": {"name": name},
            "spec": {"replicas": replicas,
                "leaderWorkerTemplate": {"size": 1, "workerTemplate": template}}}),
        _ => json!({"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "serviceName": name, "template": template}}),
    }
}

/// The Ready pods of workload `name` (its `app` label).
async fn ready_pods_of(scenario: &Scenario, name: &str) -> usize {
    pods_api(scenario)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && harness::scenario::is_ready(p))
        .count()
}

pub(crate) async fn a_scaling_group_moves_a_statefulset_and_a_leaderworkerset_with_a_deployment_and_their_pods_follow()
 {
    let Some(scenario) = Scenario::start("nodes-targets").await else {
        return;
    };
    scenario.nodes(1).await;
    let mut deployment = workload("Deployment", "router", 1);
    deployment["spec"]
        .as_object_mut()
        .expect("a spec")
        .remove("serviceName");
    scenario.create_or_fail(&deployment).await;
    scenario
        .create_or_fail(&workload("StatefulSet", "prefill", 1))
        .await;
    scenario
        .create_or_fail(&workload("LeaderWorkerSet", "decode", 2))
        .await;
    let group = json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd-mixed"},
        "spec": {"targetResources": [
            {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "prefill", "apiVersion": "apps/v1", "kind": "StatefulSet"},
            {"name": "decode", "apiVersion": LWS, "kind": "LeaderWorkerSet"}],
         "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
            {"name": "router", "role": "Source"},
            {"name": "prefill", "role": "Target", "ratio": 1},
            {"name": "decode", "role": "Target", "ratio": 2}]}}}});
    scenario.create_or_fail(&group).await;

    // What an HPA does: a /scale write on the Source. The Targets follow
    // through their /scale, and their own controllers make Ready pods.
    scenario
        .api("apps/v1", "Deployment")
        .await
        .patch_scale(
            "router",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("the scale");
    scenario
        .eventually(
            90,
            "2 router, 2 prefill and 4 decode pods Ready",
            || async {
                let now = (
                    ready_pods_of(&scenario, "router").await,
                    ready_pods_of(&scenario, "prefill").await,
                    ready_pods_of(&scenario, "decode").await,
                );
                if now == (2, 2, 4) {
                    Ok(())
                } else {
                    Err(format!("{now:?}"))
                }
            },
        )
        .await;
    let decode = scenario
        .get(LWS, "LeaderWorkerSet", "decode")
        .await
        .expect("decode");
    assert_eq!(
        decode["status"]["readyReplicas"], 4,
        "{:#}",
        decode["status"]
    );

    // The LeaderWorkerSet scaled down by hand is set back, and LWS makes
    // its groups again.
    scenario
        .api(LWS, "LeaderWorkerSet")
        .await
        .patch(
            "decode",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("a hand edit");
    scenario
        .eventually(60, "decode back at 4 Ready", || async {
            let stored = scenario.get(LWS, "LeaderWorkerSet", "decode").await;
            let replicas = stored.as_ref().map(|s| s["spec"]["replicas"].clone());
            let ready = ready_pods_of(&scenario, "decode").await;
            if replicas == Some(json!(4)) && ready == 4 {
                Ok(())
            } else {
                Err(format!("{replicas:?}, {ready} ready"))
            }
        })
        .await;
    scenario
        .finish(Quiet::Touching(
            "resourcescalinggroup.com/v1",
            "ResourceScalingGroup",
            "pd-mixed",
        ))
        .await;
}

pub(crate) async fn a_service_larger_than_the_fleet_waits_with_the_schedulers_reason_and_starts_when_nodes_come()
 {
    let Some(scenario) = Scenario::start("nodes-short").await else {
        return;
    };
    // Story 4 needs 10 nodes of 8 GPUs; the fleet has 4.
    scenario.nodes(4).await;
    let service = example("examples/seeds/story4-prefill-decode-multinode.yaml");
    let name = service["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    scenario.create_or_fail(&service).await;
    let why = scenario
        .eventually(60, "pods the scheduler cannot place", || async {
            let pods = scenario.list("v1", "Pod").await;
            let waiting: Vec<String> = pods
                .iter()
                .filter(|p| p["spec"]["nodeName"].is_null())
                .filter_map(|p| {
                    p["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")?["message"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect();
            if waiting.is_empty() {
                Err(format!("{} pods, none unschedulable yet", pods.len()))
            } else {
                Ok(waiting)
            }
        })
        .await;
    assert!(
        why.iter()
            .any(|m| m.contains("Insufficient nvidia.com/gpu")),
        "{why:?}"
    );
    // Tandem's status names the role and the scheduler's reason, with one
    // Warning for the episode.
    scenario
        .eventually(60, "the status says why the replicas wait", || async {
            let stored = scenario
                .get(IS, "InferenceService", &name)
                .await
                .expect("the service");
            let ready = harness::scenario::condition_of(&stored, "Ready");
            let message = ready["message"].as_str().unwrap_or_default();
            if ready["reason"] == "Unschedulable" && message.contains("Insufficient nvidia.com/gpu")
            {
                Ok(())
            } else {
                Err(format!("{ready}"))
            }
        })
        .await;
    // Six more nodes: it becomes Ready with nothing done by the user.
    scenario.nodes(6).await;
    let stored = wait_service_ready(&scenario, &name).await;
    assert_eq!(stored["status"]["components"]["decode"]["readyReplicas"], 2);
    let reasons = event_reasons(&scenario, &name).await;
    assert!(
        reasons.iter().any(|r| r == "Unschedulable") && reasons.iter().any(|r| r == "Scheduled"),
        "{reasons:?}"
    );
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

/// Waits until Tandem's Events about `name` tell one episode: one
/// `Degraded` and one `Recovered`.
async fn one_episode_in_events(scenario: &Scenario, name: &str) {
    scenario
        .eventually(30, "one Degraded and one Recovered Event", || async {
            let reasons = event_reasons(scenario, name).await;
            let count = |r: &str| reasons.iter().filter(|x| *x == r).count();
            if count("Degraded") == 1 && count("Recovered") == 1 {
                Ok(())
            } else {
                Err(format!("{reasons:?}"))
            }
        })
        .await;
}

/// The reasons of Tandem's Events about `name`, oldest first.
async fn event_reasons(scenario: &Scenario, name: &str) -> Vec<String> {
    let mut events: Vec<Value> = scenario
        .list("events.k8s.io/v1", "Event")
        .await
        .into_iter()
        .filter(|e| e["regarding"]["name"] == name && e["reportingController"] == "tandem")
        .collect();
    events.sort_by(|a, b| a["eventTime"].as_str().cmp(&b["eventTime"].as_str()));
    events
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect()
}

/// The Degraded condition's status of `name`, sampled every 200 ms until
/// dropped, collapsed to its changes: the episodes as the user's
/// `kubectl get -w` would see them.
struct DegradedHistory {
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for DegradedHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DegradedHistory {
    async fn watch(scenario: &Scenario, name: &str) -> Self {
        let api = scenario.api(IS, "InferenceService").await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let name = name.to_owned();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(stored) = api.get(&name).await {
                    let stored = serde_json::to_value(stored).expect("json");
                    let now = condition(&stored, "Degraded").unwrap_or_default();
                    let mut seen = record.lock().expect("the history");
                    if seen.last() != Some(&now) {
                        seen.push(now);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        DegradedHistory { seen, task }
    }

    fn changes(&self) -> Vec<String> {
        self.seen.lock().expect("the history").clone()
    }
}

pub(crate) async fn a_crash_loop_under_group_recreation_is_one_degraded_episode_with_the_exit_and_one_event()
 {
    let Some(scenario) = Scenario::start("nodes-crash").await else {
        return;
    };
    scenario.nodes(1).await;
    let mut service = example("examples/seeds/story1-monolithic.yaml");
    service["spec"]["roles"][0]["replicas"] = json!(2);
    grace(&mut service, 3);
    let (name, role) = deploy(&scenario, &service).await;
    let history = DegradedHistory::watch(&scenario, &name).await;

    // A release whose container exits 2 s after it runs (kwok's crash-loop
    // stage: restartCount 1, its last exit code 1, CrashLoopBackOff). LeaderWorkerSet
    // (RecreateGroupOnPodRestart) deletes the group at the restart and makes
    // a new one, which crashes in turn: the pods never show the back-off for
    // long, only a pod being deleted with its exit, every ~6 s.
    let mut bad = service.clone();
    bad["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
        json!("vllm/vllm-openai:v0.11.1-crashes");
    bad["spec"]["roles"][0]["template"]["metadata"]["labels"][HEALTH_LABEL] = json!("crash-loop");
    set_spec(&scenario, &name, &bad).await;
    let degraded = scenario
        .eventually(60, "Degraded names the crash", || async {
            let stored = scenario
                .get(IS, "InferenceService", &name)
                .await
                .expect("the service");
            let component = &stored["status"]["components"][role.as_str()];
            let message = stored["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Degraded")
                .map(|c| format!("{}: {}", c["reason"], c["message"]))
                .unwrap_or_default();
            if condition(&stored, "Degraded").as_deref() == Some("True")
                && message.contains("ReplicaFailing")
                && message.contains("exited with code 1 (Error); its group is being recreated")
                && component["failingReplicas"] == 1
            {
                Ok(message)
            } else {
                Err(format!("{message}; {component}"))
            }
        })
        .await;
    // LeaderWorkerSet recreates the group again and again meanwhile: the
    // episode lasts through it, with one Event.
    let recreated = scenario
        .eventually(
            60,
            "LeaderWorkerSet recreated the group 3 times",
            || async {
                let count: i64 = scenario
                    .list("events.k8s.io/v1", "Event")
                    .await
                    .iter()
                    .filter(|e| e["reason"] == "RecreateGroup")
                    .map(|e| e["series"]["count"].as_i64().unwrap_or(1))
                    .sum();
                if count >= 3 {
                    Ok(count)
                } else {
                    Err(format!("{count} recreations"))
                }
            },
        )
        .await;
    let during = history.changes();
    assert_eq!(
        during,
        ["False", "True"],
        "one episode through {recreated} recreations ({degraded})"
    );
    let tandem_events: Vec<Value> = scenario
        .list("events.k8s.io/v1", "Event")
        .await
        .into_iter()
        .filter(|e| {
            e["regarding"]["name"] == name.as_str()
                && e["reportingController"] == "tandem"
                && e["reason"] == "Degraded"
        })
        .collect();
    assert_eq!(tandem_events.len(), 1, "{tandem_events:#?}");
    assert!(
        tandem_events[0]["series"].is_null(),
        "one Event, not a series: {:#}",
        tandem_events[0]
    );

    // The release rolled back: the replica comes back, the episode ends.
    set_spec(&scenario, &name, &service).await;
    scenario
        .eventually(90, "every replica ready, Degraded False", || async {
            let stored = scenario
                .get(IS, "InferenceService", &name)
                .await
                .expect("the service");
            let component = &stored["status"]["components"][role.as_str()];
            if component["readyReplicas"] == 2
                && component["failingReplicas"] == 0
                && condition(&stored, "Degraded").as_deref() == Some("False")
            {
                Ok(())
            } else {
                Err(format!("{component}"))
            }
        })
        .await;
    one_episode_in_events(&scenario, &name).await;
    // The sampler may be a beat behind under load: wait for its last sample.
    scenario
        .eventually(10, "the episode ended once", || async {
            let changes = history.changes();
            if changes == ["False", "True", "False"] {
                Ok(())
            } else {
                Err(format!("{changes:?}"))
            }
        })
        .await;
    scenario.assert_floor_held();
    scenario.assert_writes_sound();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", &name))
        .await;
}

/// kwok deletes a pod by name (`tests/cluster/kwok/uid-safe-deletes.yaml`):
/// its late delete for a pod already gone would hit the next pod of that
/// name. The policy lets kwok delete only a pod that is being deleted, as a
/// kubelet's UID-preconditioned delete would: a live pod is refused, and a
/// terminating one still ends at its grace period through kwok's stage.
pub(crate) async fn kwok_deletes_only_a_pod_that_is_being_deleted() {
    let Some(mut scenario) = Scenario::start("nodes-kwok-deletes").await else {
        return;
    };
    let node = scenario.nodes(1).await.remove(0);
    let pods = pods_api(&scenario);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "same-name", "namespace": scenario.namespace},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "model", "image": "vllm/vllm-openai:v0.11.0"}]}
    }))
    .expect("a pod");
    pods.create(&Default::default(), &pod)
        .await
        .expect("the pod");
    scenario
        .eventually(60, "kwok runs the pod", || async {
            let pod = pods.get("same-name").await.map_err(|e| e.to_string())?;
            let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
            if phase == "Running" {
                Ok(())
            } else {
                Err(phase)
            }
        })
        .await;
    let kwok: Api<Pod> = Api::namespaced(
        scenario.plane.as_kwok().await.expect("a client as kwok"),
        &scenario.namespace,
    );
    let refused = kwok
        .delete(
            "same-name",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await
        .expect_err("kwok's delete of a live pod is refused");
    assert!(
        refused
            .to_string()
            .contains("kwok-deletes-terminating-pods"),
        "refused by the policy: {refused}"
    );
    let live = pods.get("same-name").await.expect("the pod is still there");
    assert!(live.metadata.deletion_timestamp.is_none());
    // Deleted as a user deletes it: terminating for its grace period, then
    // kwok's pod-delete stage removes it, through the policy.
    pods.delete("same-name", &Default::default())
        .await
        .expect("the delete");
    scenario
        .eventually(60, "kwok ends the terminating pod", || async {
            match pods.get_opt("same-name").await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err("still there".to_owned()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
    scenario.excuse(
        Invariant::Quiet,
        "kwok's pod lifecycle alone: no object of Tandem's is made to settle",
    );
    scenario.finish(Quiet::Checked).await;
}

/// Kubernetes' PodGroups of the scenario, by name: their `minCount` and
/// finalizers.
async fn native_pod_groups(scenario: &Scenario) -> BTreeMap<String, (i64, Value)> {
    scenario
        .list("scheduling.k8s.io/v1alpha2", "PodGroup")
        .await
        .into_iter()
        .map(|g| {
            (
                g["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                (
                    g["spec"]["schedulingPolicy"]["gang"]["minCount"]
                        .as_i64()
                        .unwrap_or_default(),
                    g["metadata"]["finalizers"].clone(),
                ),
            )
        })
        .collect()
}

/// The pods of replica `index` of `role`, as (PodGroup named, node).
async fn replica_pods(
    scenario: &Scenario,
    role: &str,
    index: u32,
) -> Vec<(String, Option<String>)> {
    scenario
        .list("v1", "Pod")
        .await
        .into_iter()
        .filter(|p| {
            label(p, "fusioninfer.io/role-name") == role
                && label(p, "fusioninfer.io/replica-index") == index.to_string()
        })
        .map(|p| {
            (
                p["spec"]["schedulingGroup"]["podGroupName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                p["spec"]["nodeName"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// Waits until both pods of replica `index` of `role` are bound; their
/// (PodGroup, node).
async fn bound_replica(
    scenario: &Scenario,
    role: &str,
    index: u32,
) -> Vec<(String, Option<String>)> {
    scenario
        .eventually(90, &format!("{role}-{index} bound"), || async {
            let pods = replica_pods(scenario, role, index).await;
            if pods.len() == 2 && pods.iter().all(|(_, node)| node.is_some()) {
                Ok(pods)
            } else {
                Err(format!("{role}-{index}'s pods: {pods:?}"))
            }
        })
        .await
}

/// Issue 34, seed 003's gang table on Kubernetes' own gang scheduling
/// (kube-scheduler v1.36.3, GangScheduling on): prefill and decode of 2
/// nodes each, on 3 nodes of 8 GPUs. The first replica of each role shares
/// the core group (4 pods), which cannot fit: none of its pods is bound,
/// though either replica alone would fit. Decode's second replica, in a
/// group of its own, starts alone. Three more nodes: the core starts with
/// nothing done by the user. A scale-up adds a replica in a group of its own; a scale-down
/// deletes that group once its pods are gone, with no finalizer left.
pub(crate) async fn kubernetes_gang_binds_the_core_pair_all_or_nothing_and_each_further_replica_alone()
 {
    let Some(scenario) = Scenario::start("nodes-native-gang").await else {
        return;
    };
    scenario.nodes(3).await;
    let role = |name: &str, component: &str, replicas: u32| {
        json!({"name": name, "componentType": component, "replicas": replicas,
            "multinode": {"nodeCount": 2},
            "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}})
    };
    let name = "pd-native";
    scenario
        .create_or_fail(&json!({
            "apiVersion": IS, "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {"schedulingStrategy": {"gangScheduler": "Kubernetes"},
                "roles": [role("prefill", "prefiller", 1), role("decode", "decoder", 1)]},
        }))
        .await;

    // The core pair needs 4 nodes of the 3: not one of its pods is bound,
    // though either replica alone would fit.
    let core_pods = || async {
        replica_pods(&scenario, "prefill", 0)
            .await
            .into_iter()
            .chain(replica_pods(&scenario, "decode", 0).await)
            .collect::<Vec<_>>()
    };
    scenario
        .eventually(60, "the core pair's pods, unschedulable", || async {
            let pods = scenario.list("v1", "Pod").await;
            let unschedulable = pods
                .iter()
                .filter(|p| {
                    p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                })
                .count();
            if pods.len() == 4 && unschedulable == 4 {
                Ok(())
            } else {
                Err(format!(
                    "{unschedulable} of {} pods unschedulable",
                    pods.len()
                ))
            }
        })
        .await;
    // Time for the scheduler to bind what it would.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let core = core_pods().await;
    assert_eq!(core.len(), 4, "{core:?}");
    let core_group = core[0].0.clone();
    assert!(core_group.starts_with("pd-native-core-"), "{core:?}");
    assert!(
        core.iter()
            .all(|(group, node)| group == &core_group && node.is_none()),
        "the core pair is bound all or nothing: {core:?}"
    );
    // The status says which roles wait, with the scheduler's reason.
    scenario
        .eventually(60, "the status says why the pair waits", || async {
            let stored = scenario.get(IS, "InferenceService", name).await;
            let ready = stored
                .as_ref()
                .and_then(|s| s["status"]["conditions"].as_array())
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .cloned()
                .unwrap_or_default();
            let message = ready["message"].as_str().unwrap_or_default();
            if ready["reason"] == "Unschedulable"
                && message.contains("prefill")
                && message.contains("decode")
            {
                Ok(())
            } else {
                Err(format!("{ready}"))
            }
        })
        .await;

    // A second decode replica, in a group of its own, starts alone.
    set_role_replicas(&scenario, name, 1, 2).await;
    let own = bound_replica(&scenario, "decode", 1).await;
    assert!(own.iter().all(|(group, _)| group != &core_group));
    let core = core_pods().await;
    assert!(
        core.iter().all(|(_, node)| node.is_none()),
        "the core pair is still not bound: {core:?}"
    );
    let groups = native_pod_groups(&scenario).await;
    assert_eq!(groups.get(&core_group).map(|g| g.0), Some(4), "{groups:?}");
    assert_eq!(groups.get(&own[0].0).map(|g| g.0), Some(2), "{groups:?}");

    // Room for the pair: it starts with nothing done by the user.
    scenario.nodes(3).await;
    let stored = wait_service_ready(&scenario, name).await;
    assert_eq!(stored["status"]["components"]["decode"]["readyReplicas"], 2);
    assert_eq!(
        stored["status"]["components"]["prefill"]["readyReplicas"],
        1
    );
    // One Warning for the episode, and the Event that it ended.
    let reasons = event_reasons(&scenario, name).await;
    assert_eq!(
        reasons.iter().filter(|r| *r == "Unschedulable").count(),
        1,
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r == "Scheduled"), "{reasons:?}");

    // A third decode replica needs two more nodes: in its own group.
    scenario.nodes(2).await;
    set_role_replicas(&scenario, name, 1, 3).await;
    let third = bound_replica(&scenario, "decode", 2).await;
    let third_group = third[0].0.clone();
    assert!(third_group.starts_with("pd-native-decode-2-"), "{third:?}");
    wait_service_ready(&scenario, name).await;

    // Back to 2: decode-2's group goes once its pods are gone, finalizer
    // and all; the others stay.
    set_role_replicas(&scenario, name, 1, 2).await;
    scenario
        .eventually(120, "decode-2's PodGroup gone with its pods", || async {
            let groups = native_pod_groups(&scenario).await;
            let pods = replica_pods(&scenario, "decode", 2).await;
            if !groups.contains_key(&third_group) && pods.is_empty() {
                Ok(())
            } else {
                Err(format!("pods {pods:?}, groups {groups:?}"))
            }
        })
        .await;
    let groups = native_pod_groups(&scenario).await;
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert!(groups.contains_key(&core_group) && groups.contains_key(&own[0].0));
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// Waits until the scenario has `count` pods and the scheduler has marked
/// every one `PodScheduled=False`, then gives it 10 s more to bind what it
/// would.
async fn all_unschedulable(scenario: &Scenario, count: usize) {
    scenario
        .eventually(60, &format!("{count} pods, unschedulable"), || async {
            let pods = scenario.list("v1", "Pod").await;
            let unschedulable = pods
                .iter()
                .filter(|p| {
                    p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                })
                .count();
            if pods.len() == count && unschedulable == count {
                Ok(())
            } else {
                let bound: Vec<&Value> = pods.iter().map(|p| &p["spec"]["nodeName"]).collect();
                Err(format!(
                    "{unschedulable} of {} pods unschedulable; bound to {bound:?}",
                    pods.len()
                ))
            }
        })
        .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
}

/// Issue 34, placement on Kubernetes' PodGroups (kube-scheduler v1.36.3,
/// TopologyAwareWorkloadScheduling on): a replica of 6 nodes required in
/// one rack, on 8 free nodes in 2 racks of 4. The nodes would hold it; no
/// rack does, so no pod of it is bound, and the status names the role and
/// the scheduler's reason. A rack of 6 comes: it lands there, with nothing
/// done by the user. Then the fleet: 3 replicas of 2 nodes on the racks of
/// 4, each replica's pods in one rack.
pub(crate) async fn kubernetes_gang_keeps_each_replica_in_one_rack_and_waits_whole_for_a_rack_that_holds_it()
 {
    let Some(scenario) = Scenario::start("nodes-placement").await else {
        return;
    };
    scenario.labelled_nodes(4, &[(RACK_LABEL, "a")]).await;
    scenario.labelled_nodes(4, &[(RACK_LABEL, "b")]).await;
    let big = "rack-six";
    scenario
        .create_or_fail(&racked(big, "Kubernetes", 1, 6))
        .await;
    all_unschedulable(&scenario, 6).await;
    let placed = replica_racks(&scenario, big).await;
    assert_eq!(placed.get("worker-0").map(Vec::len), Some(6), "{placed:?}");
    assert!(
        placed.values().flatten().all(String::is_empty),
        "no rack holds 6 nodes, so no pod is bound: {placed:?}"
    );
    let groups = scenario
        .list("scheduling.k8s.io/v1alpha2", "PodGroup")
        .await;
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(
        groups[0]["spec"]["schedulingConstraints"]["topology"],
        json!([{"key": RACK_LABEL}]),
        "the API server kept the group's topology"
    );
    scenario
        .eventually(60, "the status says why the replica waits", || async {
            let stored = scenario.get(IS, "InferenceService", big).await;
            let ready = stored
                .as_ref()
                .and_then(|s| s["status"]["conditions"].as_array())
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .cloned()
                .unwrap_or_default();
            let message = ready["message"].as_str().unwrap_or_default();
            // The gang scheduler's words on the PodGroup: no rack holds the
            // gang. A pod's own words may say only that its gang waits.
            if ready["reason"] == "Unschedulable"
                && message.contains("worker")
                && message.contains("PodGroup rack-six-worker-0-")
                && message.contains("placements are available")
            {
                Ok(message.to_owned())
            } else {
                Err(format!("{ready}"))
            }
        })
        .await;

    // A rack of 6: the replica lands in it whole.
    scenario.labelled_nodes(6, &[(RACK_LABEL, "c")]).await;
    wait_service_ready(&scenario, big).await;
    let placed = replica_racks(&scenario, big).await;
    assert_eq!(placed["worker-0"], vec!["c"; 6], "{placed:?}");

    // The fleet: 3 replicas of 2 nodes, on the 8 nodes of racks a and b.
    let fleet = "rack-fleet";
    scenario
        .create_or_fail(&racked(fleet, "Kubernetes", 3, 2))
        .await;
    wait_service_ready(&scenario, fleet).await;
    let placed = replica_racks(&scenario, fleet).await;
    assert_eq!(placed.len(), 3, "{placed:?}");
    for (replica, racks) in &placed {
        assert_eq!(racks.len(), 2, "{replica}: {racks:?}");
        assert!(
            racks[0] == racks[1] && ["a", "b"].contains(&racks[0].as_str()),
            "{replica}'s pods share one rack: {placed:?}"
        );
    }
    for name in [big, fleet] {
        scenario
            .assert_quiet(10, (IS, "InferenceService", name))
            .await;
    }
    scenario.finish(Quiet::Checked).await;
}

/// Issue 34, the pair on Kubernetes' PodGroups: prefill and decode of 2
/// nodes each, the pair required in one block (each replica's rack, for
/// these core replicas, only preferred). Two blocks of 3 nodes hold 6 nodes
/// but no block holds the pair's 4: no pod of it is bound. A block of 4
/// comes: the core group lands in it with nothing done by the user.
pub(crate) async fn kubernetes_gang_lands_the_prefill_decode_pair_in_one_block() {
    let Some(scenario) = Scenario::start("nodes-pair").await else {
        return;
    };
    for (block, rack, count) in [
        ("x", "x1", 2),
        ("x", "x2", 1),
        ("y", "y1", 2),
        ("y", "y2", 1),
    ] {
        scenario
            .labelled_nodes(count, &[(BLOCK_LABEL, block), (RACK_LABEL, rack)])
            .await;
    }
    let role = |name: &str, component: &str| {
        json!({"name": name, "componentType": component, "replicas": 1,
            "multinode": {"nodeCount": 2},
            "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}})
    };
    let name = "pd-block";
    scenario
        .create_or_fail(&json!({
            "apiVersion": IS, "kind": "InferenceService",
            "metadata": {"name": name},
            "spec": {"schedulingStrategy": {"gangScheduler": "Kubernetes"},
                "placement": {"replica": {"topologyKey": RACK_LABEL},
                    "pair": {"topologyKey": BLOCK_LABEL}},
                "roles": [role("prefill", "prefiller"), role("decode", "decoder")]},
        }))
        .await;
    all_unschedulable(&scenario, 4).await;
    let blocks = replica_domains(&scenario, name, BLOCK_LABEL).await;
    assert!(
        blocks.values().flatten().all(String::is_empty),
        "no block holds the pair, so no pod is bound: {blocks:?}"
    );
    let groups = scenario
        .list("scheduling.k8s.io/v1alpha2", "PodGroup")
        .await;
    assert_eq!(groups.len(), 1, "one core group: {groups:?}");
    assert_eq!(
        groups[0]["spec"]["schedulingConstraints"]["topology"],
        json!([{"key": BLOCK_LABEL}])
    );

    for rack in ["z1", "z2"] {
        scenario
            .labelled_nodes(2, &[(BLOCK_LABEL, "z"), (RACK_LABEL, rack)])
            .await;
    }
    wait_service_ready(&scenario, name).await;
    let blocks = replica_domains(&scenario, name, BLOCK_LABEL).await;
    assert!(
        blocks.values().flatten().all(|b| b == "z"),
        "the pair in block z: {blocks:?}"
    );
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// Issue 34, placement without a gang scheduler (`gangScheduler: None`):
/// required pod affinity on the replica's own pods. Three replicas of 2
/// pods (4 GPUs each, two to a node) on three racks of 4 nodes: every pod
/// requires its replica's rack, and each replica's pods share one rack,
/// with no PodGroup written. Without a gang the first pod of each replica
/// lands anywhere and the other follows it, so each rack has room for
/// every pod (8 places for 6 pods): with less, first pods can fill a rack
/// and leave a replica waiting, which is what a gang is for (racks of 2
/// nodes failed 2 runs of 5 that way). Without the affinity the scheduler
/// often packs a replica's pods into one rack by itself (it split one in 2
/// runs of 3 here), so the test also checks the term on every pod.
pub(crate) async fn without_a_gang_each_replica_shares_one_rack_by_pod_affinity() {
    let Some(scenario) = Scenario::start("nodes-affinity").await else {
        return;
    };
    for rack in ["a", "b", "c"] {
        scenario.labelled_nodes(4, &[(RACK_LABEL, rack)]).await;
    }
    let name = "rack-affinity";
    let mut service = racked(name, "None", 3, 2);
    service["spec"]["roles"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!("4");
    scenario.create_or_fail(&service).await;
    wait_service_ready(&scenario, name).await;
    let placed = replica_racks(&scenario, name).await;
    assert_eq!(placed.len(), 3, "{placed:?}");
    for (replica, racks) in &placed {
        assert!(
            racks.len() == 2 && racks[0] == racks[1] && !racks[0].is_empty(),
            "{replica}'s pods share one rack: {placed:?}"
        );
    }
    assert!(
        scenario
            .list("scheduling.k8s.io/v1alpha2", "PodGroup")
            .await
            .is_empty()
    );
    for pod in scenario.list("v1", "Pod").await {
        let terms = &pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(terms[0]["topologyKey"], RACK_LABEL, "{pod}");
        assert_eq!(
            terms[0]["labelSelector"]["matchLabels"]["fusioninfer.io/replica-index"],
            label(&pod, "fusioninfer.io/replica-index"),
            "{pod}"
        );
    }
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// Issue 34, Preferred placement on Kubernetes' PodGroups: the replica's
/// group carries no topology, and its pods prefer one rack by pod
/// affinity. With three nodes of each rack of 4 cordoned, no rack has room
/// for a replica of 2 nodes: Required would wait, Preferred schedules it
/// across the two racks.
pub(crate) async fn a_preferred_rack_schedules_across_racks_when_no_rack_has_room() {
    let Some(scenario) = Scenario::start("nodes-preferred").await else {
        return;
    };
    for rack in ["a", "b"] {
        let nodes = scenario.labelled_nodes(4, &[(RACK_LABEL, rack)]).await;
        for node in &nodes[1..] {
            cordon(&scenario, node).await;
        }
    }
    let name = "rack-preferred";
    let mut service = racked(name, "Kubernetes", 1, 2);
    service["spec"]["placement"]["replica"]["mode"] = json!("Preferred");
    scenario.create_or_fail(&service).await;
    wait_service_ready(&scenario, name).await;
    let mut racks = replica_racks(&scenario, name).await["worker-0"].clone();
    racks.sort();
    assert_eq!(racks, ["a", "b"]);
    let groups = scenario
        .list("scheduling.k8s.io/v1alpha2", "PodGroup")
        .await;
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert!(
        groups[0]["spec"]["schedulingConstraints"].is_null(),
        "{groups:?}"
    );
    for pod in scenario.list("v1", "Pod").await {
        let terms = &pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(
            terms[0]["podAffinityTerm"]["topologyKey"], RACK_LABEL,
            "{pod}"
        );
    }
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// Issue 34, a placement change on Kubernetes' PodGroups rolls with the
/// replicas. A group's topology is immutable and part of its name, so each
/// replica joins a new group (the block's) as the rolling update replaces
/// it, and its old group (the rack's) goes only once no pod names it, its
/// finalizer lifted. Polled through the rollout: no pod names a group that
/// is not there for longer than a reconcile (5 s), and no pod names an old
/// group that is deleted (gone, or held by its finalizer).
pub(crate) async fn a_placement_change_replaces_each_replicas_group_only_with_the_replica() {
    let Some(scenario) = Scenario::start("nodes-placement-roll").await else {
        return;
    };
    for (block, rack) in [("x", "x1"), ("x", "x2"), ("y", "y1"), ("y", "y2")] {
        scenario
            .labelled_nodes(2, &[(BLOCK_LABEL, block), (RACK_LABEL, rack)])
            .await;
    }
    let name = "rack-roll";
    let mut service = racked(name, "Kubernetes", 2, 2);
    scenario.create_or_fail(&service).await;
    wait_service_ready(&scenario, name).await;
    let topology = |group: &Value| group["spec"]["schedulingConstraints"]["topology"].clone();
    let groups = scenario
        .list("scheduling.k8s.io/v1alpha2", "PodGroup")
        .await;
    assert_eq!(groups.len(), 2, "{groups:#?}");
    assert!(
        groups
            .iter()
            .all(|g| topology(g) == json!([{"key": RACK_LABEL}]))
    );
    let old: BTreeSet<String> = groups
        .iter()
        .filter_map(|g| g["metadata"]["name"].as_str().map(str::to_owned))
        .collect();

    service["spec"]["placement"]["replica"]["topologyKey"] = json!(BLOCK_LABEL);
    set_spec(&scenario, name, &service).await;
    let started = Instant::now();
    let mut missing_since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut old_groups_seen_gone = BTreeSet::new();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(420),
            "the rollout did not end within 420 s"
        );
        let pods = scenario.list("v1", "Pod").await;
        let groups: BTreeMap<String, Value> = scenario
            .list("scheduling.k8s.io/v1alpha2", "PodGroup")
            .await
            .into_iter()
            .filter_map(|g| Some((g["metadata"]["name"].as_str()?.to_owned(), g)))
            .collect();
        // Deleted: gone, or held by the API server's finalizer. Tandem
        // deletes a group only once no pod names it.
        for gone in old.iter().filter(|g| {
            groups
                .get(*g)
                .is_none_or(|g| !g["metadata"]["deletionTimestamp"].is_null())
        }) {
            old_groups_seen_gone.insert(gone.clone());
        }
        let mut named = BTreeSet::new();
        for pod in &pods {
            let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let group = pod["spec"]["schedulingGroup"]["podGroupName"]
                .as_str()
                .unwrap_or_default();
            named.insert(group.to_owned());
            assert!(
                !old_groups_seen_gone.contains(group),
                "pod {pod_name} names {group}, which was deleted before its pods"
            );
            if groups.contains_key(group) {
                missing_since.remove(pod_name);
            } else {
                let since = *missing_since
                    .entry(pod_name.to_owned())
                    .or_insert_with(Instant::now);
                assert!(
                    since.elapsed() < Duration::from_secs(5),
                    "pod {pod_name} has named {group}, which is not there, for 5 s"
                );
            }
        }
        let stored = scenario.get(IS, "InferenceService", name).await;
        let rolled = stored.as_ref().is_some_and(|s| {
            s["status"]["ready"] == "2/2"
                && s["status"]["updated"] == "2/2"
                && condition(s, "Ready").as_deref() == Some("True")
        });
        if rolled && pods.len() == 4 && named.is_disjoint(&old) && groups.len() == 2 {
            assert!(
                groups
                    .values()
                    .all(|g| topology(g) == json!([{"key": BLOCK_LABEL}])),
                "{groups:#?}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(old_groups_seen_gone, old, "both rack groups went");
    let blocks = replica_domains(&scenario, name, BLOCK_LABEL).await;
    for (replica, domains) in &blocks {
        assert!(
            domains.len() == 2 && domains[0] == domains[1] && !domains[0].is_empty(),
            "{replica} in one block: {blocks:?}"
        );
    }
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// Issue 34, spread: 4 single-node replicas (8 GPUs each) spread over
/// blocks, required with a skew of 1, on a block of 6 nodes and a block of
/// 2. Each block gets 2. Without the constraint the scheduler picks 4 of the
/// 8 free nodes by its own scores, which puts 2 in each block only about
/// one time in five.
pub(crate) async fn single_node_replicas_spread_evenly_over_blocks() {
    let Some(scenario) = Scenario::start("nodes-spread").await else {
        return;
    };
    scenario.labelled_nodes(6, &[(BLOCK_LABEL, "x")]).await;
    scenario.labelled_nodes(2, &[(BLOCK_LABEL, "y")]).await;
    let name = "spread";
    let mut service = racked(name, "None", 4, 1);
    service["spec"]["placement"] = json!({"spread": {"topologyKey": BLOCK_LABEL}});
    if let Some(role) = service["spec"]["roles"][0].as_object_mut() {
        role.remove("multinode");
    }
    scenario.create_or_fail(&service).await;
    wait_service_ready(&scenario, name).await;
    let mut per_block: BTreeMap<String, usize> = BTreeMap::new();
    for blocks in replica_domains(&scenario, name, BLOCK_LABEL).await.values() {
        for block in blocks {
            *per_block.entry(block.clone()).or_default() += 1;
        }
    }
    assert_eq!(
        per_block,
        BTreeMap::from([("x".to_owned(), 2), ("y".to_owned(), 2)])
    );
    for pod in scenario.list("v1", "Pod").await {
        let spread = &pod["spec"]["topologySpreadConstraints"][0];
        assert_eq!(
            (
                &spread["topologyKey"],
                &spread["maxSkew"],
                &spread["whenUnsatisfiable"]
            ),
            (&json!(BLOCK_LABEL), &json!(1), &json!("DoNotSchedule")),
            "{pod}"
        );
    }
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// Issue 34, one replica per domain without a gang
/// (`placement.replica.exclusive`, LWS's exclusive-topology, applied by the
/// real LWS v0.9.0 webhook and controller): 3 replicas of 2 pods (4 GPUs
/// each, two to a node) on 2 racks of 4 nodes. Each rack would hold all
/// three; exclusive, each replica takes a rack alone and the third waits.
/// A third rack comes: it lands there, with nothing done by the user.
pub(crate) async fn an_exclusive_rack_holds_one_replica_and_the_next_waits_for_a_rack_of_its_own() {
    let Some(scenario) = Scenario::start("nodes-exclusive").await else {
        return;
    };
    for rack in ["a", "b"] {
        scenario.labelled_nodes(4, &[(RACK_LABEL, rack)]).await;
    }
    let name = "rack-exclusive";
    let mut service = racked(name, "None", 3, 2);
    service["spec"]["placement"]["replica"]["exclusive"] = json!(true);
    service["spec"]["roles"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!("4");
    scenario.create_or_fail(&service).await;
    let leader_worker_sets = scenario
        .eventually(30, "3 LeaderWorkerSets", || async {
            let all = scenario.list(LWS, "LeaderWorkerSet").await;
            if all.len() == 3 {
                Ok(all)
            } else {
                Err(format!("{}", all.len()))
            }
        })
        .await;
    for lws in leader_worker_sets {
        assert_eq!(
            lws["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"],
            RACK_LABEL,
            "{lws}"
        );
    }
    // Two replicas run, each alone in its rack; the third's leader waits.
    let placed = scenario
        .eventually(90, "two replicas bound, one waiting", || async {
            let placed = replica_racks(&scenario, name).await;
            let bound: Vec<&Vec<String>> = placed
                .values()
                .filter(|racks| racks.len() == 2 && racks.iter().all(|r| !r.is_empty()))
                .collect();
            let waiting = placed
                .values()
                .filter(|racks| racks.iter().all(String::is_empty))
                .count();
            if bound.len() == 2 && waiting == 1 {
                Ok(placed)
            } else {
                Err(format!("{placed:?}"))
            }
        })
        .await;
    let mut racks: Vec<&String> = placed
        .values()
        .filter(|r| !r[0].is_empty())
        .map(|r| {
            assert_eq!(r[0], r[1], "a replica in one rack: {placed:?}");
            &r[0]
        })
        .collect();
    racks.sort();
    assert_eq!(racks, ["a", "b"], "one replica per rack: {placed:?}");
    // LWS's webhook gave each leader (the third's too) the anti-affinity.
    let leaders: Vec<Value> = scenario
        .list("v1", "Pod")
        .await
        .into_iter()
        .filter(|p| label(p, "leaderworkerset.sigs.k8s.io/worker-index") == "0")
        .collect();
    assert_eq!(leaders.len(), 3, "{leaders:#?}");
    for pod in leaders {
        let anti = &pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(anti[0]["topologyKey"], RACK_LABEL, "{pod}");
    }

    scenario.labelled_nodes(4, &[(RACK_LABEL, "c")]).await;
    wait_service_ready(&scenario, name).await;
    let placed = replica_racks(&scenario, name).await;
    let mut racks: Vec<String> = placed
        .values()
        .map(|r| {
            assert!(r.len() == 2 && r[0] == r[1], "{placed:?}");
            r[0].clone()
        })
        .collect();
    racks.sort();
    assert_eq!(racks, ["a", "b", "c"], "{placed:?}");
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// The service's pods, by name: (uid, phase, restarts of its first
/// container, being deleted).
async fn pods_of(
    scenario: &Scenario,
    service: &str,
) -> BTreeMap<String, (String, String, i64, bool)> {
    scenario
        .list("v1", "Pod")
        .await
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["fusioninfer.io/service"] == service)
        .map(|p| {
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                (
                    p["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                    p["status"]["phase"].as_str().unwrap_or_default().to_owned(),
                    p["status"]["containerStatuses"][0]["restartCount"]
                        .as_i64()
                        .unwrap_or(0),
                    !p["metadata"]["deletionTimestamp"].is_null(),
                ),
            )
        })
        .collect()
}

/// A multi-node replica whose started pod restarts while another of its
/// pods is still Pending keeps the pod that started: Tandem writes
/// `RecreateGroupAfterStart` where the installed LWS has it (v0.9.0 here),
/// and LWS does not recreate a group with a Pending pod. Once every pod has
/// started, the next restart recreates the group, as it must.
///
/// One node of 8 GPUs and a replica of two 8-GPU pods: one pod runs and,
/// crash-looping (kwok's stage), restarts every 2 s; the other waits for a
/// node. Under `RecreateGroupOnPodRestart` the first restart would delete
/// the group, the running pod with it.
pub(crate) async fn a_multi_node_replica_is_not_recreated_while_one_of_its_pods_is_pending() {
    let Some(scenario) = Scenario::start("nodes-after-start").await else {
        return;
    };
    scenario.nodes(1).await;
    let name = "after-start";
    let service = crash_looping_pair(name);
    scenario.create_or_fail(&service).await;
    let lws = scenario
        .eventually(60, "the replica's LeaderWorkerSet", || async {
            scenario
                .list(LWS, "LeaderWorkerSet")
                .await
                .into_iter()
                .find(|l| l["metadata"]["labels"]["fusioninfer.io/service"] == name)
                .ok_or_else(|| "none yet".to_owned())
        })
        .await;
    assert_eq!(
        lws["spec"]["leaderWorkerTemplate"]["restartPolicy"], "RecreateGroupAfterStart",
        "{lws:#}"
    );

    let started = scenario
        .eventually(60, "one pod restarting, the other pending", || async {
            let pods = pods_of(&scenario, name).await;
            let running = pods.values().find(|(_, phase, restarts, deleting)| {
                phase == "Running" && *restarts >= 1 && !deleting
            });
            let pending = pods.values().any(|(_, phase, ..)| phase == "Pending");
            match running {
                Some((uid, ..)) if pending => Ok(uid.clone()),
                _ => Err(format!("{pods:?}")),
            }
        })
        .await;
    // Ten more seconds of restarts: the pod that started stays, restarting.
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let pods = pods_of(&scenario, name).await;
        assert!(
            pods.values()
                .any(|(uid, _, _, deleting)| *uid == started && !deleting),
            "the group was recreated while a pod of it was pending: {pods:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let restarts = pods_of(&scenario, name)
        .await
        .into_values()
        .find(|(uid, ..)| *uid == started)
        .map(|(_, _, restarts, _)| restarts)
        .unwrap_or_default();
    assert!(restarts >= 3, "it kept restarting: {restarts} restarts");

    // A node for the waiting pod: every pod has started, and the next
    // restart recreates the group.
    scenario.nodes(1).await;
    scenario
        .eventually(
            90,
            "the group recreated once all its pods started",
            || async {
                let pods = pods_of(&scenario, name).await;
                if pods
                    .values()
                    .all(|(uid, _, _, deleting)| *uid != started || *deleting)
                {
                    Ok(())
                } else {
                    Err(format!("{pods:?}"))
                }
            },
        )
        .await;

    // The release fixed: the replica serves, and Tandem settles.
    let mut healthy = service.clone();
    healthy["spec"]["roles"][0]["template"]["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove(HEALTH_LABEL);
    set_spec(&scenario, name, &healthy).await;
    wait_service_ready(&scenario, name).await;
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// A replica that keeps failing is not recreated forever
/// (`spec.roles[].recovery`, `plan::inference_service::recovery`): each
/// restart holds it with no pods, for 3 s then 6 s, and the third restart,
/// past `maxRestarts: 2`, fails it: its LeaderWorkerSet stays at no
/// group, its nodes are free, its role says Failed, with one Event each.
/// A new template brings it back, and once it has been ready for the
/// longest back-off its restarts are forgotten.
///
/// One replica of two 8-GPU pods on two nodes, crash-looping (kwok's
/// stage: a container restarts 2 s after it runs). Tandem writes LWS's
/// restart policy `None`, so LWS never recreates the group itself.
pub(crate) async fn a_replica_that_keeps_restarting_backs_off_fails_at_its_limit_and_a_new_template_brings_it_back()
 {
    let Some(scenario) = Scenario::start("nodes-recovery").await else {
        return;
    };
    scenario.nodes(2).await;
    let name = "recovery";
    let mut service = crash_looping_pair(name);
    grace(&mut service, 1);
    service["spec"]["roles"][0]["recovery"] =
        json!({"backoffSeconds": 3, "maxBackoffSeconds": 6, "maxRestarts": 2});
    let role = service["spec"]["roles"][0]["name"]
        .as_str()
        .expect("a role")
        .to_owned();
    scenario.create_or_fail(&service).await;
    let lws_of = || async {
        scenario
            .list(LWS, "LeaderWorkerSet")
            .await
            .into_iter()
            .find(|l| l["metadata"]["labels"]["fusioninfer.io/service"] == name)
    };

    // Two back-offs, then the failure.
    let notes = scenario
        .eventually(120, "failed past its limit", || async {
            let notes = recovery_events(&scenario, name).await;
            if notes.iter().any(|(reason, _)| reason == "ReplicaFailed") {
                Ok(notes)
            } else {
                Err(format!("{notes:?}"))
            }
        })
        .await;
    let reasons: Vec<&str> = notes.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        ["BackOff", "BackOff", "ReplicaFailed"],
        "{notes:#?}"
    );
    assert!(
        notes[0]
            .1
            .contains("restart 1 (limit 2): it holds no pods for 3 s"),
        "{notes:#?}"
    );
    assert!(
        notes[1]
            .1
            .contains("restart 2 (limit 2): it holds no pods for 6 s"),
        "{notes:#?}"
    );
    assert!(
        notes[2].1.contains("restart 3 is past maxRestarts 2")
            && notes[2].1.contains("exit code 1 (Error)"),
        "{notes:#?}"
    );
    let lws = lws_of().await.expect("the replica's LeaderWorkerSet");
    assert_eq!(lws["spec"]["replicas"], 0, "{lws:#}");
    assert_eq!(lws["spec"]["leaderWorkerTemplate"]["restartPolicy"], "None");

    // Its nodes are released, and stay so.
    scenario
        .eventually(60, "no pod of the replica left", || async {
            let pods = pods_of(&scenario, name).await;
            if pods.is_empty() {
                Ok(())
            } else {
                Err(format!("{pods:?}"))
            }
        })
        .await;
    let stored = scenario
        .eventually(30, "the role says Failed", || async {
            let stored = scenario
                .get(IS, "InferenceService", name)
                .await
                .expect("the service");
            let component = &stored["status"]["components"][role.as_str()];
            let degraded = stored["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Degraded")
                .map(|c| c["reason"].clone());
            if component["failedReplicas"] == 1
                && component["phase"] == "Failed"
                && degraded == Some(json!("ReplicaFailed"))
                && condition(&stored, "Failed").as_deref() == Some("True")
            {
                Ok(stored)
            } else {
                Err(format!("{component} {degraded:?}"))
            }
        })
        .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        pods_of(&scenario, name).await.is_empty(),
        "held: no pod comes back"
    );
    assert_eq!(
        recovery_events(&scenario, name).await.len(),
        3,
        "one Event for the failure ({:#})",
        stored["status"]
    );

    // A new template: the replica comes back, with its count begun again.
    let mut healthy = service.clone();
    healthy["spec"]["roles"][0]["template"]["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove(HEALTH_LABEL);
    set_spec(&scenario, name, &healthy).await;
    wait_service_ready(&scenario, name).await;
    let reasons: Vec<String> = recovery_events(&scenario, name)
        .await
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(reasons.last().map(String::as_str), Some("RecoveryReset"));
    // Ready for the longest back-off (6 s): the record is dropped, and not
    // before (a cache that lost the pods' Ready time forgot it at once).
    let forgotten_after = scenario
        .eventually(60, "its restarts forgotten", || async {
            let lws = lws_of().await.ok_or("no LeaderWorkerSet")?;
            let annotations = &lws["metadata"]["annotations"];
            if annotations["fusioninfer.io/recovery"].is_null() && lws["spec"]["replicas"] == 1 {
                Ok(ready_for(&scenario, name).await)
            } else {
                Err(format!("{annotations}"))
            }
        })
        .await;
    assert!(
        forgotten_after >= Some(6),
        "the record is forgotten only after the group was ready for 6 s: it was gone after {forgotten_after:?} s"
    );
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}

/// For how many whole seconds every pod of service `name` has been Ready:
/// now against the latest Ready time its pods say (kwok's, on this
/// machine's clock); None when one is not Ready.
async fn ready_for(scenario: &Scenario, name: &str) -> Option<i64> {
    let mut latest = None;
    for pod in scenario.list("v1", "Pod").await {
        if pod["metadata"]["labels"]["fusioninfer.io/service"] != name {
            continue;
        }
        let since = pod["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready" && c["status"] == "True")?["lastTransitionTime"]
            .as_str()?
            .parse::<jiff::Timestamp>()
            .ok()?;
        latest = latest.max(Some(since));
    }
    Some(jiff::Timestamp::now().duration_since(latest?).as_secs())
}

/// A service `name` of one replica of two 8-GPU pods, placed anywhere, whose
/// containers crash-loop (kwok's stage: a restart 2 s after they run).
fn crash_looping_pair(name: &str) -> Value {
    let mut service = racked(name, "None", 1, 2);
    service["spec"]
        .as_object_mut()
        .expect("a spec")
        .remove("placement");
    service["spec"]["roles"][0]["template"]["metadata"]["labels"][HEALTH_LABEL] =
        json!("crash-loop");
    service
}

/// Tandem's recovery Events about `name` (BackOff, ReplicaFailed,
/// RecoveryReset), oldest first: reason and note.
async fn recovery_events(scenario: &Scenario, name: &str) -> Vec<(String, String)> {
    let mut events: Vec<Value> = scenario
        .list("events.k8s.io/v1", "Event")
        .await
        .into_iter()
        .filter(|e| e["regarding"]["name"] == name && e["reportingController"] == "tandem")
        .filter(|e| {
            ["BackOff", "ReplicaFailed", "RecoveryReset"]
                .iter()
                .any(|r| e["reason"] == *r)
        })
        .collect();
    events.sort_by(|a, b| a["eventTime"].as_str().cmp(&b["eventTime"].as_str()));
    events
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_owned(),
                e["note"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}
