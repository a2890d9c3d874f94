//! Rollouts run pass by pass through [`super::reconcile`]: a simulated cluster
//! applies each pass's plan, and the tests follow an upgrade, a rollback and
//! the docs' worked example from end to end. They live below `service` (not in
//! `rollout`, whose plan `service` calls) so that no module imports its caller.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::{Options, Pass, World};
use crate::api::inference_service::{InferenceService, RevisionStatus, UpgradeStatus};
use crate::plan::inference_service::rollout::tests::{incremental, lws, program, service, t0};
use crate::plan::inference_service::rollout::{ROLLBACK_IN_PROGRESS, UPGRADE_IN_PROGRESS, plan};
use crate::plan::inference_service::{revision, upgrade};
use crate::plan::shared::children::{
    LWS_WORKER_INDEX, REPLICA_INDEX, REVISION, ROLE_NAME, SERVICE,
};

/// A cluster as the reconcile pass sees it: what Tandem applied, a
/// Gateway controller that programs every Gateway and route at once (when
/// `gateway_ready`), and LeaderWorkerSets whose one pod is ready
/// `lag` after the LeaderWorkerSet appeared.
struct Cluster {
    service: InferenceService,
    children: BTreeMap<(String, String), Value>,
    created: BTreeMap<String, Timestamp>,
    now: Timestamp,
    lag: SignedDuration,
    gateway_ready: bool,
    broken: Option<String>,
}

impl Cluster {
    fn new(service: InferenceService) -> Self {
        Self {
            service,
            children: BTreeMap::new(),
            created: BTreeMap::new(),
            now: t0(),
            lag: SignedDuration::from_secs(40),
            gateway_ready: true,
            broken: None,
        }
    }

    fn pods(&self) -> Vec<Value> {
        self.children
            .values()
            .filter(|c| c["kind"] == "LeaderWorkerSet")
            .map(|lws| {
                let labels = &lws["metadata"]["labels"];
                let name = lws["metadata"]["name"].as_str().unwrap();
                let age = self.now.duration_since(self.created[name]);
                let broken = self.broken.as_deref() == labels[REVISION].as_str();
                let ready = age >= self.lag && !broken;
                json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("{name}-0"), "namespace": "default", "labels": {
                        SERVICE: "qwen", ROLE_NAME: labels[ROLE_NAME], REPLICA_INDEX: labels[REPLICA_INDEX],
                        REVISION: labels[REVISION], LWS_WORKER_INDEX: "0"}},
                    "spec": {"nodeName": "gpu-1"},
                    "status": {"phase": "Running", "conditions": [
                        {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
            })
            .collect()
    }

    fn reconcile(&mut self) -> Pass {
        let children: Vec<Value> = self.children.values().cloned().collect();
        let pods = crate::plan::shared::pod::from_json_all(&self.pods());
        let none = BTreeSet::new();
        let world = World {
            children: &children,
            pods: &pods,
            unavailable: &none,
            installed: &crate::plan::shared::installed::ASSUMED,
            scale_views: &[],
        };
        let pass = super::reconcile(&self.service, &world, &Options::default(), &Time(self.now));
        for apply in &pass.apply {
            let kind = apply.object["kind"].as_str().unwrap().to_owned();
            let name = apply.object["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned();
            self.created.entry(name.clone()).or_insert(self.now);
            let mut object = apply.object.clone();
            if self.gateway_ready {
                program(&mut object);
            }
            self.children.insert((kind, name), object);
        }
        for delete in &pass.delete {
            let kind = delete.object["kind"].as_str().unwrap().to_owned();
            let name = delete.object["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned();
            self.children.remove(&(kind, name.clone()));
            self.created.remove(&name);
        }
        self.service.status = Some(pass.status.clone());
        pass
    }

    /// The same service (router, strategy, status) with another image.
    fn set_spec(&mut self, image: &str) {
        let mut value = serde_json::to_value(&self.service).unwrap();
        value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!(image);
        self.service = serde_json::from_value(value).unwrap();
    }

    fn upgrade(&self) -> UpgradeStatus {
        self.service
            .status
            .as_ref()
            .unwrap()
            .upgrade
            .clone()
            .unwrap()
    }

    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.children
            .values()
            .filter(|c| c["kind"] == kind)
            .collect()
    }

    fn backends(&self) -> Vec<(String, i64)> {
        let route = self.of_kind("HTTPRoute")[0];
        route["spec"]["rules"][0]["backendRefs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["name"].as_str().unwrap().to_owned(),
                    b["weight"].as_i64().unwrap(),
                )
            })
            .collect()
    }

    fn images(&self) -> BTreeSet<String> {
        self.of_kind("LeaderWorkerSet")
            .iter()
            .map(|l| {
                l["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    /// Reconciles every 10 s until `done` holds (at most 500 times),
    /// checking after each pass that no more than 125 % of the replicas
    /// run and that the route's weights sum to 100.
    fn run_until(
        &mut self,
        done: impl Fn(&Cluster) -> bool,
    ) -> Vec<(Timestamp, Pass, UpgradeStatus)> {
        let mut history = Vec::new();
        for _ in 0..500 {
            let pass = self.reconcile();
            let upgrade = self.upgrade();
            assert!(
                self.of_kind("LeaderWorkerSet").len() <= 5,
                "never more than 125 % of 4 replicas"
            );
            assert_eq!(self.backends().iter().map(|(_, w)| w).sum::<i64>(), 100);
            history.push((self.now, pass, upgrade));
            if done(self) {
                return history;
            }
            self.now += SignedDuration::from_secs(10);
        }
        panic!("not done after 500 reconciles: {:?}", self.upgrade());
    }
}

fn settled(cluster: &Cluster) -> bool {
    cluster.upgrade().pending.is_none()
}

fn installed_cluster(image: &str) -> Cluster {
    let mut cluster = Cluster::new(service(image, incremental()));
    cluster.run_until(|c| {
        c.pods()
            .iter()
            .all(|p| p["status"]["conditions"][0]["status"] == "True")
    });
    cluster
}

#[test]
fn a_new_service_keeps_the_seed_names_and_routes_everything_to_its_revision() {
    let cluster = installed_cluster("vllm:1");
    let v1 = revision::spec_revision(&cluster.service.spec);
    let mut names: Vec<&str> = cluster
        .of_kind("LeaderWorkerSet")
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "qwen-inference-0",
            "qwen-inference-1",
            "qwen-inference-2",
            "qwen-inference-3"
        ]
    );
    assert_eq!(cluster.backends(), [(format!("qwen-{v1}"), 100)]);
    assert_eq!(
        cluster.of_kind("Gateway")[0]["spec"]["gatewayClassName"],
        "istio"
    );
    assert_eq!(cluster.of_kind("ControllerRevision").len(), 1);
    let upgrade = cluster.upgrade();
    assert_eq!(upgrade.active.unwrap().revision, v1);
    assert_eq!(upgrade.pending, None);
}

#[test]
fn a_full_upgrade_moves_capacity_and_traffic_one_way_at_the_pace_asked() {
    let mut cluster = installed_cluster("vllm:1");
    let v1 = revision::spec_revision(&cluster.service.spec);
    cluster.set_spec("vllm:2");
    let v2 = revision::spec_revision(&cluster.service.spec);
    let history = cluster.run_until(settled);

    let mut last = (100, 100, 0, 0);
    let mut last_traffic_move: Option<Timestamp> = None;
    for (now, pass, upgrade) in &history {
        let active = upgrade.active.as_ref().unwrap();
        let Some(pending) = upgrade.pending.as_ref() else {
            assert_eq!(active.revision, v2);
            continue;
        };
        assert_eq!(
            (active.revision.as_str(), pending.revision.as_str()),
            (v1.as_str(), v2.as_str())
        );
        let now_state = (
            active.target_capacity,
            active.traffic_routed_percent,
            pending.target_capacity,
            pending.traffic_routed_percent,
        );
        assert!(
            now_state.0 <= last.0 && now_state.1 <= last.1,
            "{last:?} -> {now_state:?}"
        );
        assert!(
            now_state.2 >= last.2 && now_state.3 >= last.3,
            "{last:?} -> {now_state:?}"
        );
        assert!(now_state.0 + now_state.2 <= 125);
        if now_state.3 != last.3 {
            if let Some(before) = last_traffic_move {
                assert!(now.duration_since(before) >= SignedDuration::from_secs(30));
            }
            last_traffic_move = Some(*now);
            assert!(
                pass.events.iter().any(|e| e.reason == "UpgradeTraffic"),
                "{:?}",
                pass.events
            );
        }
        last = now_state;
    }
    let traffic_steps = history
        .iter()
        .flat_map(|(_, pass, _)| &pass.events)
        .filter(|e| e.reason == "UpgradeTraffic")
        .count();
    assert_eq!(traffic_steps, 20, "100 % in steps of 5");

    let upgrade = cluster.upgrade();
    let active = upgrade.active.unwrap();
    assert_eq!(
        (
            active.revision.as_str(),
            active.target_capacity,
            active.traffic_routed_percent
        ),
        (v2.as_str(), 100, 100)
    );
    assert_eq!(cluster.backends(), [(format!("qwen-{v2}"), 100)]);
    assert_eq!(cluster.images(), BTreeSet::from(["vllm:2".to_owned()]));
    let names: BTreeSet<&str> = cluster
        .of_kind("LeaderWorkerSet")
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| n.ends_with(&format!("-{v2}"))),
        "{names:?}"
    );
    let records: Vec<&str> = cluster
        .of_kind("ControllerRevision")
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(records, [format!("qwen-{v2}")]);
    let services: Vec<&str> = cluster
        .of_kind("Service")
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(services, [format!("qwen-{v2}")]);
    let conditions = &cluster.service.status.as_ref().unwrap().conditions;
    let upgrading = conditions
        .iter()
        .find(|c| c.type_ == UPGRADE_IN_PROGRESS)
        .unwrap();
    assert_eq!(
        (upgrading.status.as_str(), upgrading.reason.as_str()),
        ("False", "NoUpgrade")
    );

    // Settled: another reconcile writes nothing.
    let again = cluster.reconcile();
    assert!(again.apply.is_empty() && again.delete.is_empty() && again.events.is_empty());
}

/// Runs an upgrade from vllm:1 to vllm:2 until half the traffic moved.
fn halfway() -> (Cluster, String, String) {
    let mut cluster = installed_cluster("vllm:1");
    let v1 = revision::spec_revision(&cluster.service.spec);
    cluster.set_spec("vllm:2");
    let v2 = revision::spec_revision(&cluster.service.spec);
    cluster.run_until(|c| {
        c.upgrade()
            .pending
            .is_some_and(|p| p.traffic_routed_percent >= 50)
    });
    (cluster, v1, v2)
}

#[test]
fn a_rollback_from_the_middle_returns_to_the_old_spec_even_with_a_broken_new_revision() {
    let (mut cluster, v1, v2) = halfway();
    cluster.broken = Some(v2.clone());
    cluster.set_spec("vllm:1");
    let history = cluster.run_until(settled);
    assert!(
        history
            .iter()
            .any(|(_, p, _)| p.events.iter().any(|e| e.reason == "RollbackTraffic"))
    );
    let rolling_back = history[0].2.clone();
    assert_eq!(rolling_back.pending.unwrap().revision, v2);
    let conditions = &history[0].1.status.conditions;
    let rollback = conditions
        .iter()
        .find(|c| c.type_ == ROLLBACK_IN_PROGRESS)
        .unwrap();
    assert_eq!(rollback.status, "True");
    for (_, _, upgrade) in &history {
        if let Some(pending) = &upgrade.pending {
            assert!(
                pending.target_capacity >= pending.traffic_routed_percent,
                "{upgrade:?}"
            );
        }
    }

    let active = cluster.upgrade().active.unwrap();
    assert_eq!(
        (
            active.revision.as_str(),
            active.target_capacity,
            active.traffic_routed_percent
        ),
        (v1.as_str(), 100, 100)
    );
    assert_eq!(cluster.backends(), [(format!("qwen-{v1}"), 100)]);
    assert_eq!(cluster.images(), BTreeSet::from(["vllm:1".to_owned()]));
    assert_eq!(cluster.of_kind("LeaderWorkerSet").len(), 4);
}

#[test]
fn a_third_spec_rolls_back_first_then_upgrades() {
    let (mut cluster, v1, _) = halfway();
    cluster.set_spec("vllm:3");
    let v3 = revision::spec_revision(&cluster.service.spec);
    // First back to v1, which grows again from its record…
    cluster.run_until(settled);
    assert_eq!(cluster.upgrade().active.unwrap().revision, v1);
    assert_eq!(cluster.backends(), [(format!("qwen-{v1}"), 100)]);
    assert_eq!(cluster.images(), BTreeSet::from(["vllm:1".to_owned()]));
    // …then a fresh upgrade to v3.
    cluster.run_until(|c| c.upgrade().pending.is_some());
    let history = cluster.run_until(settled);
    assert!(
        history
            .iter()
            .any(|(_, p, _)| p.events.iter().any(|e| e.reason == "UpgradeComplete"))
    );
    let active = cluster.upgrade().active.unwrap();
    assert_eq!(
        (
            active.revision.as_str(),
            active.target_capacity,
            active.traffic_routed_percent
        ),
        (v3.as_str(), 100, 100)
    );
    assert_eq!(cluster.backends(), [(format!("qwen-{v3}"), 100)]);
    assert_eq!(cluster.images(), BTreeSet::from(["vllm:3".to_owned()]));
}

/// The example's service with a router role whose route attaches to the
/// user's own Gateway too.
fn routed(image: &str) -> InferenceService {
    let mut value = serde_json::to_value(service(image, incremental())).unwrap();
    value["spec"]["roles"].as_array_mut().unwrap().push(json!({
        "name": "router", "componentType": "router",
        "httproute": {"parentRefs": [{"name": "inference-gateway"}],
                      "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}]}]},
    }));
    serde_json::from_value(value).unwrap()
}

fn names_of(cluster: &Cluster, kind: &str) -> Vec<String> {
    cluster
        .of_kind(kind)
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Every pool selects the leaders of the revision it is labelled with, and
/// its endpoint picker serves that pool.
fn assert_one_picker_per_revision_pool(cluster: &Cluster) {
    for pool in cluster.of_kind("InferencePool") {
        let revision = pool["metadata"]["labels"][REVISION].as_str().unwrap();
        assert_eq!(
            pool["spec"]["selector"]["matchLabels"][REVISION], revision,
            "{pool}"
        );
        let epp = pool["spec"]["endpointPickerRef"]["name"].as_str().unwrap();
        let deployment = cluster.children[&("Deployment".to_owned(), epp.to_owned())].clone();
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["args"][1],
            pool["metadata"]["name"]
        );
    }
}

#[test]
fn a_router_upgrades_through_one_pool_and_endpoint_picker_per_revision() {
    let mut cluster = Cluster::new(routed("vllm:1"));
    cluster.run_until(|c| {
        c.pods()
            .iter()
            .all(|p| p["status"]["conditions"][0]["status"] == "True")
    });
    let v1 = revision::spec_revision(&cluster.service.spec);
    // Never upgraded: today's router names, and one route.
    assert_eq!(names_of(&cluster, "InferencePool"), ["qwen-pool"]);
    assert_eq!(names_of(&cluster, "Deployment"), ["qwen-epp"]);
    assert_eq!(names_of(&cluster, "Service"), ["qwen-epp"]);
    assert_eq!(names_of(&cluster, "HTTPRoute"), ["qwen-route"]);
    assert_eq!(cluster.backends(), [("qwen-pool".to_owned(), 100)]);
    let route = cluster.of_kind("HTTPRoute")[0];
    assert_eq!(route["spec"]["parentRefs"][1]["name"], "inference-gateway");
    assert_eq!(
        route["spec"]["rules"][0]["matches"][0]["path"]["value"],
        "/v1"
    );
    assert_one_picker_per_revision_pool(&cluster);

    cluster.set_spec("vllm:2");
    let v2 = revision::spec_revision(&cluster.service.spec);
    let pool2 = format!("qwen-pool-{v2}");
    // run_until checks that the weights sum to 100 after every pass.
    let history = cluster.run_until(|c| {
        c.upgrade()
            .pending
            .is_some_and(|p| p.traffic_routed_percent >= 50)
    });
    let mut splits: Vec<Vec<String>> = history
        .iter()
        .map(|(_, _, u)| {
            let mut pools = vec!["qwen-pool".to_owned()];
            pools.extend(u.pending.as_ref().map(|_| pool2.clone()));
            pools
        })
        .collect();
    splits.dedup();
    assert_eq!(splits, [vec!["qwen-pool".to_owned(), pool2.clone()]]);
    let weights = cluster.backends();
    assert_eq!(
        weights.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["qwen-pool", pool2.as_str()]
    );
    assert_eq!(weights[1].1, 50);
    assert_eq!(
        names_of(&cluster, "InferencePool"),
        ["qwen-pool".to_owned(), pool2.clone()]
    );
    assert_eq!(names_of(&cluster, "HTTPRoute"), ["qwen-route"]);
    assert_one_picker_per_revision_pool(&cluster);

    let history = cluster.run_until(settled);
    assert_eq!(cluster.backends(), [(pool2.clone(), 100)]);
    assert_eq!(names_of(&cluster, "InferencePool"), [pool2.as_str()]);
    let epp2 = format!("qwen-epp-{v2}");
    assert_eq!(names_of(&cluster, "Deployment"), [epp2.as_str()]);
    assert_eq!(names_of(&cluster, "ConfigMap"), [epp2.as_str()]);
    assert_eq!(names_of(&cluster, "Service"), [epp2.as_str()]);
    assert_eq!(names_of(&cluster, "ServiceAccount"), ["qwen-epp"]);
    assert_one_picker_per_revision_pool(&cluster);
    let notes: Vec<&str> = history
        .iter()
        .flat_map(|(_, pass, _)| &pass.delete)
        .map(|d| d.note.as_str())
        .collect();
    for gone in [
        "InferencePool qwen-pool",
        "Deployment qwen-epp",
        "ConfigMap qwen-epp",
        "Service qwen-epp",
    ] {
        let note = format!("{gone} deleted: revision {v1} no longer runs");
        assert!(notes.contains(&note.as_str()), "{note} in {notes:#?}");
    }
    let again = cluster.reconcile();
    assert!(again.apply.is_empty() && again.delete.is_empty() && again.events.is_empty());
}

#[test]
fn new_revision_switches_all_traffic_once_the_new_revision_is_ready() {
    let strategy =
        json!({"type": "NewRevision", "incrementalUpgradeOptions": {"gatewayClassName": "istio"}});
    let mut cluster = Cluster::new(service("vllm:1", strategy));
    cluster.run_until(|c| {
        c.pods()
            .iter()
            .all(|p| p["status"]["conditions"][0]["status"] == "True")
    });
    cluster.set_spec("vllm:2");
    let v2 = revision::spec_revision(&cluster.service.spec);
    let mut splits = Vec::new();
    let mut history = Vec::new();
    for _ in 0..20 {
        let pass = cluster.reconcile();
        let backends = cluster.backends();
        splits.push(backends.iter().map(|(_, w)| *w).collect::<Vec<_>>());
        assert!(cluster.of_kind("LeaderWorkerSet").len() <= 8);
        history.push(pass);
        if settled(&cluster) {
            break;
        }
        cluster.now += SignedDuration::from_secs(10);
    }
    splits.dedup();
    assert_eq!(splits, [vec![100, 0], vec![0, 100], vec![100]]);
    assert_eq!(cluster.backends(), [(format!("qwen-{v2}"), 100)]);
    assert_eq!(cluster.images(), BTreeSet::from(["vllm:2".to_owned()]));
}

#[test]
fn nothing_moves_until_the_gateway_is_programmed() {
    let mut cluster = installed_cluster("vllm:1");
    cluster.gateway_ready = false;
    for kind in ["Gateway", "HTTPRoute"] {
        for object in cluster.children.values_mut().filter(|c| c["kind"] == kind) {
            object["status"] = json!({});
        }
    }
    cluster.set_spec("vllm:2");
    let first = cluster.reconcile();
    assert_eq!(
        first.events.iter().map(|e| e.reason).collect::<Vec<_>>(),
        ["UpgradeStarted"]
    );
    let pending = cluster.upgrade().pending.unwrap();
    assert_eq!(
        (pending.target_capacity, pending.traffic_routed_percent),
        (0, 0)
    );
    let upgrading = first
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == UPGRADE_IN_PROGRESS)
        .unwrap();
    assert_eq!(
        (upgrading.status.as_str(), upgrading.reason.as_str()),
        ("True", "WaitingForGateway")
    );
    assert_eq!(first.requeue, Some(std::time::Duration::from_secs(10)));

    // Nothing changed: nothing is written again.
    cluster.now += SignedDuration::from_secs(10);
    let second = cluster.reconcile();
    assert!(second.apply.is_empty() && second.delete.is_empty() && second.events.is_empty());
    assert_eq!(second.status, first.status);
}

#[test]
fn without_the_gateway_api_the_service_runs_and_the_upgrade_says_why_it_waits() {
    let s = service("vllm:1", incremental());
    let unavailable = BTreeSet::from(["Gateway".to_owned(), "HTTPRoute".to_owned()]);
    let rollout = plan(&s, &[], &[], &unavailable, t0());
    assert_eq!(rollout.runs.len(), 1);
    assert_eq!(rollout.runs[0].capacity, 100);
    let pass = super::reconcile(
        &s,
        &World {
            children: &[],
            pods: &[],
            unavailable: &unavailable,
            installed: &crate::plan::shared::installed::ASSUMED,
            scale_views: &[],
        },
        &Options::default(),
        &Time(t0()),
    );
    let kinds: BTreeSet<&str> = pass
        .apply
        .iter()
        .map(|a| a.object["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ControllerRevision",
            "LeaderWorkerSet",
            "PodDisruptionBudget",
            "Service"
        ])
    );
    let failed = pass
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert!(
        failed.message.contains("the Gateway API is not installed"),
        "{}",
        failed.message
    );

    // A new revision waits, Stalled, and says why.
    let mut v2 = service("vllm:2", incremental());
    v2.status = Some(pass.status.clone());
    let children: Vec<Value> = pass.apply.iter().map(|a| a.object.clone()).collect();
    let rollout = plan(&v2, &children, &[], &unavailable, t0());
    let upgrading = rollout
        .conditions
        .iter()
        .find(|c| c.type_ == UPGRADE_IN_PROGRESS)
        .unwrap();
    assert_eq!((upgrading.is_true, upgrading.reason), (true, "Stalled"));
    assert!(
        upgrading.message.contains("the Gateway API"),
        "{}",
        upgrading.message
    );
    assert_eq!(
        rollout.runs.iter().map(|r| r.capacity).collect::<Vec<_>>(),
        [100, 0]
    );
}

#[test]
fn strategy_none_leaves_running_replicas_on_their_revision() {
    let mut s = service("vllm:2", json!({"type": "None"}));
    s.spec.roles[0].replicas = Some(3);
    let old = [
        lws("qwen-inference-0", 0, "aaaaaaaaaa"),
        lws("qwen-inference-1", 1, "aaaaaaaaaa"),
    ];
    let none = BTreeSet::new();
    let pass = super::reconcile(
        &s,
        &World {
            children: &old,
            pods: &[],
            unavailable: &none,
            installed: &crate::plan::shared::installed::ASSUMED,
            scale_views: &[],
        },
        &Options::default(),
        &Time(t0()),
    );
    let applied: Vec<&str> = pass
        .apply
        .iter()
        .filter(|a| a.object["kind"] == "LeaderWorkerSet")
        .map(|a| a.object["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        applied,
        ["qwen-inference-2"],
        "only the new replica, with the new template"
    );
    assert!(pass.delete.is_empty());
    assert_eq!(
        pass.apply[0].object["metadata"]["labels"][REVISION],
        revision::role_revision(&s.spec, &s.spec.roles[0]),
        "labelled with the role's revision"
    );
    let progressing = pass
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_ne!(
        progressing.reason, "Updating",
        "old revisions are expected under None"
    );
}

/// The worked example of docs/upgrades.md: surge 25, step 5, interval
/// 30 s, 4 replicas, a reconcile every 10 s and replicas ready 40 s
/// after they are created, as a Markdown table of every step the real
/// reconcile pass takes.
fn worked_example() -> String {
    let mut cluster = installed_cluster("vllm:1");
    cluster.set_spec("vllm:2");
    let v2 = revision::spec_revision(&cluster.service.spec);
    let start = cluster.now;
    let history = cluster.run_until(settled);
    let mut table = "| t | step | old revision: capacity / traffic | new revision: capacity / traffic | replicas old + new |\n|---|---|---|---|---|\n".to_owned();
    let replicas =
        |r: Option<&RevisionStatus>| r.map_or(0, |r| upgrade::replicas_for(4, r.target_capacity));
    let show = |r: Option<&RevisionStatus>| {
        r.map_or("removed".to_owned(), |r| {
            format!("{}% / {}%", r.target_capacity, r.traffic_routed_percent)
        })
    };
    for (now, pass, status) in history
        .iter()
        .filter(|(_, pass, _)| !pass.events.is_empty())
    {
        let (old, new) = match (status.active.as_ref(), status.pending.as_ref()) {
            (Some(active), None) if active.revision == v2 => (None, Some(active)),
            (active, pending) => (active, pending),
        };
        let steps: Vec<&str> = pass.events.iter().map(|e| e.reason).collect();
        table.push_str(&format!(
            "| {}s | {} | {} | {} | {} + {} |\n",
            now.duration_since(start).as_secs(),
            steps.join(", "),
            show(old),
            show(new),
            replicas(old),
            replicas(new),
        ));
    }
    table
}

#[test]
fn the_worked_example_in_the_docs_is_what_the_plan_does() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/upgrades.md");
    let (begin, end) = (
        "<!-- worked example: begin -->\n",
        "<!-- worked example: end -->",
    );
    let table = worked_example();
    let doc = std::fs::read_to_string(path).unwrap_or_default();
    let current = doc
        .split_once(begin)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(table, _)| table);
    if std::env::var_os("TANDEM_WRITE_DOCS").is_some() {
        let (head, tail) = doc.split_once(begin).expect("the doc has the begin marker");
        let (_, tail) = tail.split_once(end).expect("the doc has the end marker");
        std::fs::write(path, format!("{head}{begin}{table}{end}{tail}")).unwrap();
        return;
    }
    assert_eq!(
        current,
        Some(table.as_str()),
        "docs/upgrades.md is stale: run TANDEM_WRITE_DOCS=1 cargo test --lib plan::inference_service::service::rollouts::the_worked_example"
    );
}
