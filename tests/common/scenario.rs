//! One end-to-end scenario on the real control plane
//! ([`super::control_plane`]): a namespace of its own, the shared `tandem
//! serve`, a stand-in for the kubelet that marks pods ready, and the
//! invariants every scenario checks:
//! - no request of Tandem's is refused for want of a permission (it runs
//!   under exactly `manifests/base/rbac.yaml`) or by its pod-patch policy
//!   (`manifests/base/pod-patches.yaml`);
//! - no write of Tandem's repeats what is stored (a write whose answer
//!   carries a resourceVersion the object already had changed nothing);
//! - no serving role that had a ready replica is ever left without one
//!   (checked on every pod and LeaderWorkerSet event, from a watch);
//! - quiet after settling: no write of Tandem's for 10 s, while the process
//!   is alive and still reconciling.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use super::control_plane::{self, ControlPlane, Request, Tandem};

pub const IS: &str = "fusioninfer.io/v1alpha1";
pub const LWS: &str = "leaderworkerset.x-k8s.io/v1";

/// A scenario's namespace on the shared control plane and Tandem.
pub struct Scenario {
    pub plane: &'static ControlPlane,
    pub tandem: &'static Tandem,
    pub namespace: String,
    pub client: kube::Client,
    floor: Arc<Mutex<Floor>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Scenario {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Which pods the stand-in kubelet marks ready.
pub type Readiness = Arc<dyn Fn(&Pod) -> bool + Send + Sync>;

impl Scenario {
    /// Starts (or joins) the control plane and Tandem, and makes namespace
    /// `namespace`. None, after saying why, when the control plane cannot
    /// run here.
    pub async fn start(namespace: &str) -> Option<Scenario> {
        if let Some(reason) = control_plane::unavailable() {
            eprintln!("SKIPPED {namespace}: {reason}");
            return None;
        }
        let plane = ControlPlane::shared();
        Some(Scenario::with_tandem(namespace, plane, Tandem::shared(plane)).await)
    }

    /// A scenario in namespace `namespace` watched through `tandem`.
    pub async fn with_tandem(
        namespace: &str,
        plane: &'static ControlPlane,
        tandem: &'static Tandem,
    ) -> Scenario {
        let client = plane.namespace(namespace).await;
        let floor = Arc::new(Mutex::new(Floor::default()));
        let mut scenario = Scenario {
            plane,
            tandem,
            namespace: namespace.to_owned(),
            client,
            floor,
            tasks: Vec::new(),
        };
        scenario.watch_floor();
        scenario
    }

    /// Runs a stand-in kubelet: every pod of the namespace for which
    /// `ready` holds is marked Running and Ready once created.
    pub fn kubelet(&mut self, ready: Readiness) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let task = tokio::spawn(async move {
            let mut events = watcher(pods.clone(), watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
                    continue;
                };
                if pod.metadata.deletion_timestamp.is_none() && !is_ready(&pod) && ready(&pod) {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let _ = set_pod_ready(&pods, &name, true).await;
                }
            }
        });
        self.tasks.push(task);
    }

    /// Stops the stand-in kubelet(s): pods keep the status they have.
    pub fn stop_kubelet(&mut self) {
        // The first task is the floor's watch; the rest are kubelets.
        for task in self.tasks.drain(1..) {
            task.abort();
        }
    }

    /// Watches pods and LeaderWorkerSets, and records every moment a
    /// serving role that had a ready replica has none.
    fn watch_floor(&mut self) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let floor = self.floor.clone();
        self.tasks.push(tokio::spawn(async move {
            let mut events = watcher(pods, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let mut floor = floor.lock().expect("the floor");
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        floor.pod(&pod)
                    }
                    Ok(watcher::Event::Delete(pod)) => floor.pod_gone(&pod),
                    _ => continue,
                }
                floor.check();
            }
        }));
    }

    /// Asserts that no serving role was ever left without a ready replica
    /// after it had one (while its desired replicas stayed above zero).
    pub fn assert_floor_held(&self) {
        let floor = self.floor.lock().expect("the floor");
        assert!(
            floor.violations.is_empty(),
            "serving roles left without a ready replica: {:#?}",
            floor.violations
        );
    }

    /// Creates `object` (with this scenario's namespace) as the test's
    /// admin would with `kubectl create`: through every webhook.
    pub async fn create(&self, object: &Value) -> Result<DynamicObject, kube::Error> {
        let object = self.here(object);
        let api = control_plane::api_for(&self.client, &object).await;
        api.create(
            &PostParams::default(),
            &serde_json::from_value(object).expect("a dynamic object"),
        )
        .await
    }

    /// [`Scenario::create`], failing the test on a refusal. Objects applied
    /// together are created one right after the other, with no retry: a
    /// ScaleView's webhook must admit it even when its cache has not yet seen
    /// the InferenceService created a moment before (it reads the service
    /// live before denying "not found").
    pub async fn create_or_fail(&self, object: &Value) -> DynamicObject {
        match self.create(object).await {
            Ok(created) => created,
            Err(e) => panic!(
                "creating {} {}: {e}",
                object["kind"], object["metadata"]["name"]
            ),
        }
    }

    /// Server-side applies `object` as the test's field manager.
    pub async fn apply(&self, object: &Value) -> Result<DynamicObject, kube::Error> {
        control_plane::try_apply(&self.client, &self.here(object)).await
    }

    /// `object` in this scenario's namespace.
    pub fn here(&self, object: &Value) -> Value {
        let mut object = object.clone();
        object["metadata"]["namespace"] = json!(self.namespace);
        object
    }

    /// The Api of a kind in this namespace.
    pub async fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"namespace": self.namespace}});
        control_plane::api_for(&self.client, &probe).await
    }

    /// An object of this namespace, as stored, or None.
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        let api = self.api(api_version, kind).await;
        let object = api.get_opt(name).await.expect("a read")?;
        Some(serde_json::to_value(object).expect("json"))
    }

    /// Every object of a kind in this namespace, as stored.
    pub async fn list(&self, api_version: &str, kind: &str) -> Vec<Value> {
        let api = self.api(api_version, kind).await;
        let mut objects: Vec<Value> = api
            .list(&ListParams::default())
            .await
            .expect("a list")
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).expect("json"))
            .collect();
        objects.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        objects
    }

    /// The names of the objects of a kind in this namespace, sorted.
    pub async fn names(&self, api_version: &str, kind: &str) -> Vec<String> {
        self.list(api_version, kind)
            .await
            .iter()
            .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// Waits up to `seconds` for `check` to hold; fails with `what`,
    /// Tandem's log and the last value checked otherwise.
    pub async fn eventually<T, F, Fut>(&self, seconds: u64, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        loop {
            match check().await {
                Ok(value) => return value,
                Err(last) => {
                    if tokio::time::Instant::now() >= deadline {
                        self.plane.assert_alive();
                        panic!(
                            "{what}: not within {seconds} s; last seen: {last}\ntandem's log (end):\n{}",
                            tail(&self.tandem.log(), 60)
                        );
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Marks the pods matching `selector` ready (or not), as a kubelet
    /// would report them; the count.
    pub async fn set_ready(&self, selector: &str, ready: bool) -> usize {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .expect("pods");
        for pod in &list.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            set_pod_ready(&pods, &name, ready)
                .await
                .expect("pod status");
        }
        list.items.len()
    }

    /// The writes of this namespace in the audit log.
    pub fn writes(&self) -> Vec<Request> {
        self.plane
            .writes()
            .into_iter()
            .filter(|w| w.namespace.as_deref() == Some(&self.namespace))
            .collect()
    }

    /// Asserts no request of Tandem's in this namespace was refused for
    /// want of a permission, and no write repeated what was stored.
    pub fn assert_writes_sound(&self) {
        // Anywhere, not only here: Tandem's cluster-wide lists and watches.
        let forbidden: Vec<String> = self
            .plane
            .requests()
            .iter()
            .filter(|w| w.by_tandem() && (w.forbidden_by_rbac() || w.refused_by_pod_patch_policy()))
            .map(|w| format!("{}: {}", w.line(), w.message))
            .collect();
        assert!(forbidden.is_empty(), "Tandem was refused: {forbidden:#?}");
        let writes = self.writes();
        let repeated = repeated_writes(&writes);
        assert!(
            repeated.is_empty(),
            "writes of Tandem's that changed nothing: {repeated:#?}"
        );
    }

    /// Asserts that Tandem writes nothing in this namespace for `seconds`,
    /// once the writes still carrying out the last change have stopped
    /// (a 2 s pause in them, within 30 s); then that it is alive and still
    /// reconciling: an annotation put on `touch` (one of Tandem's objects,
    /// `(apiVersion, kind, name)`) is reconciled, and writes nothing.
    pub async fn assert_quiet(&self, seconds: u64, touch: (&str, &str, &str)) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut seen = self.writes().len();
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let late = self.tandem_writes_after(seen);
            seen = self.writes().len();
            if late.is_empty() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "still writing after 30 s: {late:#?}\ntandem's log (end):\n{}",
                tail(&self.tandem.log(), 60)
            );
        }
        let (api_version, kind, name) = touch;
        let controller = format!("controller=\"{kind}\"");
        let labels = [controller.as_str()];
        let reconciles = || {
            self.tandem
                .metric("tandem_controller_reconciles_total", &labels)
        };
        let before = reconciles().await;
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let late = self.tandem_writes_after(seen);
        assert!(
            late.is_empty(),
            "writes in a settled namespace within {seconds} s: {late:#?}\ntandem's log (end):\n{}",
            tail(&self.tandem.log(), 60)
        );
        assert!(
            self.tandem.alive(),
            "tandem exited:\n{}",
            tail(&self.tandem.log(), 60)
        );
        let seen = self.writes().len();
        let touched = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "annotations": {"e2e.tandem/touched": "yes"}}});
        self.apply(&touched).await.expect("touching the object");
        self.eventually(30, "the touched object reconciled", || async {
            let now = reconciles().await;
            if now > before {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let late = self.tandem_writes_after(seen);
        assert!(
            late.is_empty(),
            "a touch that changes nothing made Tandem write: {late:#?}"
        );
        self.assert_writes_sound();
    }

    /// How many requests the audit log holds so far: a mark for
    /// [`Scenario::tandem_reads_since`].
    pub fn mark(&self) -> usize {
        self.plane.requests().len()
    }

    /// Tandem's GETs and LISTs of this namespace since `mark` (watches
    /// excluded): what a reconcile sends when it reads the API server
    /// instead of its caches.
    pub fn tandem_reads_since(&self, mark: usize) -> Vec<String> {
        self.plane
            .requests()
            .iter()
            .skip(mark)
            .filter(|r| r.by_tandem() && matches!(r.verb.as_str(), "get" | "list"))
            .filter(|r| r.namespace.as_deref() == Some(&self.namespace))
            .map(Request::line)
            .collect()
    }

    /// Tandem's writes in this namespace after the first `seen` writes.
    fn tandem_writes_after(&self, seen: usize) -> Vec<String> {
        self.writes()
            .iter()
            .skip(seen)
            .filter(|w| w.by_tandem())
            .map(Request::line)
            .collect()
    }
}

/// Tandem's writes whose answer carried a resourceVersion the object had
/// already: they changed nothing.
pub fn repeated_writes(writes: &[Request]) -> Vec<String> {
    let mut versions: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut repeated = Vec::new();
    for write in writes {
        let (Some(name), Some(version)) = (&write.name, &write.resource_version) else {
            continue;
        };
        if write.verb == "delete" || !(200..300).contains(&write.code) {
            continue;
        }
        let key = (write.resource.clone(), name.clone());
        let known = versions.entry(key).or_default();
        if !known.insert(version.clone()) && write.by_tandem() {
            repeated.push(write.line());
        }
    }
    repeated
}

async fn set_pod_ready(pods: &Api<Pod>, name: &str, ready: bool) -> Result<(), kube::Error> {
    let status = if ready { "True" } else { "False" };
    let now = jiff::Timestamp::now().to_string();
    let conditions: Vec<Value> = ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
        .iter()
        .map(|kind| {
            let value = if *kind == "PodScheduled" || *kind == "Initialized" {
                "True"
            } else {
                status
            };
            json!({"type": kind, "status": value, "lastTransitionTime": now})
        })
        .collect();
    let patch = json!({"status": {"phase": "Running", "conditions": conditions, "startTime": now}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map(|_| ())
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The serving replicas of each role, from the pods: a replica (one
/// LeaderWorkerSet) serves when all its pods (the group size LWS writes on
/// each) exist and are ready, and none is draining.
#[derive(Default)]
struct Floor {
    /// pod name → (service/role, replica LeaderWorkerSet, group size, serves)
    pods: BTreeMap<String, (String, String, usize, bool)>,
    /// Roles that have had a serving replica.
    served: BTreeSet<String>,
    violations: Vec<String>,
}

impl Floor {
    fn pod(&mut self, pod: &Pod) {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let (Some(service), Some(role), Some(set)) = (
            labels.get("fusioninfer.io/service"),
            labels.get("fusioninfer.io/role-name"),
            labels.get("leaderworkerset.sigs.k8s.io/name"),
        ) else {
            return;
        };
        let serves = is_ready(pod)
            && labels.get("fusioninfer.io/traffic").map(String::as_str) != Some("draining")
            && pod.metadata.deletion_timestamp.is_none();
        let size = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("leaderworkerset.sigs.k8s.io/size"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.pods.insert(
            name,
            (format!("{service}/{role}"), set.clone(), size, serves),
        );
    }

    fn pod_gone(&mut self, pod: &Pod) {
        self.pods
            .remove(pod.metadata.name.as_deref().unwrap_or_default());
    }

    fn check(&mut self) {
        // replica → (pods serving, group size)
        let mut replicas: BTreeMap<(&str, &str), (usize, usize)> = BTreeMap::new();
        for (role, set, size, serves) in self.pods.values() {
            let entry = replicas
                .entry((role.as_str(), set.as_str()))
                .or_insert((0, *size));
            entry.0 += usize::from(*serves);
        }
        let mut serving: BTreeMap<&str, usize> = BTreeMap::new();
        for ((role, _), (pods, size)) in &replicas {
            *serving.entry(role).or_insert(0) += usize::from(pods == size);
        }
        let roles: BTreeSet<&str> = replicas.keys().map(|(role, _)| *role).collect();
        for role in roles {
            let count = serving.get(role).copied().unwrap_or(0);
            if count > 0 {
                self.served.insert(role.to_owned());
            } else if self.served.contains(role) {
                self.violations.push(format!(
                    "{role}: no serving replica among {:?}",
                    replicas
                        .keys()
                        .filter(|(r, _)| *r == role)
                        .map(|(_, s)| s)
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
}
