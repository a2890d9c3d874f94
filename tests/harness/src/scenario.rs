//! One end-to-end scenario on the real control plane
//! ([`super::control_plane`]): a namespace of its own, the shared `tandem
//! serve`, nodes of its own ([`Scenario::nodes`]: kwok plays them and their
//! pods, the real kube-scheduler binds the pods; nothing marks a pod ready
//! by hand), and the invariants every scenario checks:
//! - no request of Tandem's, of any verb, is refused for want of a
//!   permission (it runs under exactly `manifests/base/rbac.yaml`) or by its
//!   pod-patch policy (`manifests/base/pod-patches.yaml`);
//! - no write of Tandem's repeats what is stored (a write whose answer
//!   carries a resourceVersion the object already had changed nothing);
//! - the floor ([`Floor`]): no serving role that had a ready replica is ever
//!   left without one while it asks for replicas (checked on every pod and
//!   InferenceService event, from a watch);
//! - quiet after settling: no write of Tandem's for 10 s, while the process
//!   is alive and still reconciling the scenario's own object.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use super::control_plane::{self, ControlPlane};
use super::request::Request;
use super::serve::Tandem;
use tandem::plan::shared::children::LWS_WORKER_INDEX;

pub const IS: &str = "fusioninfer.io/v1alpha1";
pub const LWS: &str = "leaderworkerset.x-k8s.io/v1";

/// A scenario's namespace on the shared control plane and Tandem.
pub struct Scenario {
    pub plane: &'static ControlPlane,
    pub tandem: &'static Tandem,
    pub namespace: String,
    pub client: kube::Client,
    floor: Arc<Mutex<Floor>>,
    /// The names of the scenario's nodes.
    fleet: Mutex<Vec<String>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Whether [`Scenario::assert_quiet`] ran.
    quiet_checked: std::sync::atomic::AtomicBool,
    /// The invariants this scenario is excused from, each with why.
    excused: BTreeMap<Invariant, &'static str>,
    /// Whether [`Scenario::finish`] ran.
    finished: bool,
}

/// An invariant that [`Scenario::finish`] checks and that a scenario may be
/// excused from, naming why ([`Scenario::excuse`]). That no request of
/// Tandem's is refused is checked at every end, with no excuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// No serving role left without a ready replica ([`Floor`]).
    Floor,
    /// Quiet after settling ([`Scenario::assert_quiet`]).
    Quiet,
    /// No write of Tandem's in the namespace that changed nothing.
    NoEmptyWrite,
    /// Tandem read the namespace only as a cache miss does
    /// ([`super::rbac::ON_A_CACHE_MISS`]), never listing it.
    ReadsFromCaches,
}

/// How [`Scenario::finish`] checks quiet after settling.
pub enum Quiet<'a> {
    /// Now, touching this object of Tandem's: `(apiVersion, kind, name)`.
    Touching(&'a str, &'a str, &'a str),
    /// The scenario checked it after its last change
    /// ([`Scenario::assert_quiet`]), or is excused from it; `finish` holds
    /// it to one or the other.
    Checked,
}

impl Drop for Scenario {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        // A scenario that ends without its invariants fails; one that ends
        // by a panic has failed already, and a second panic would abort.
        if !self.finished && !std::thread::panicking() {
            panic!(
                "scenario {} ended without Scenario::finish: its invariants (the floor, quiet \
                 after settling, no refused request, no write that changes nothing, reads \
                 only from the caches) were never checked",
                self.namespace
            );
        }
    }
}

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

    /// [`Scenario::start`] on the control plane of its own named `plane`
    /// ([`ControlPlane::own`]) and its Tandem.
    pub async fn start_on(namespace: &str, plane: &'static str) -> Option<Scenario> {
        if let Some(reason) = control_plane::unavailable() {
            eprintln!("SKIPPED {namespace}: {reason}");
            return None;
        }
        let plane = ControlPlane::own(plane);
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
            fleet: Mutex::default(),
            tasks: Vec::new(),
            quiet_checked: std::sync::atomic::AtomicBool::new(false),
            excused: BTreeMap::new(),
            finished: false,
        };
        scenario.watch_floor();
        scenario
    }

    /// Excuses this scenario from `invariant`, saying why; [`Scenario::finish`]
    /// prints the excuse and skips that check.
    pub fn excuse(&mut self, invariant: Invariant, why: &'static str) {
        self.excused.insert(invariant, why);
    }

    /// Ends the scenario through every invariant, each unless excused
    /// ([`Scenario::excuse`]): quiet after settling (`quiet`), the floor,
    /// no write of Tandem's in the namespace that changed nothing, and reads
    /// of it only from the caches; and, with no excuse, no request of
    /// Tandem's refused anywhere. A scenario dropped without it fails.
    pub async fn finish(mut self, quiet: Quiet<'_>) {
        self.finished = true;
        for (invariant, why) in &self.excused {
            eprintln!("{}: not checking {invariant:?}: {why}", self.namespace);
        }
        let excused = |invariant| self.excused.contains_key(&invariant);
        match quiet {
            Quiet::Touching(api_version, kind, name) if !excused(Invariant::Quiet) => {
                self.assert_quiet(10, (api_version, kind, name)).await;
            }
            Quiet::Touching(..) => panic!(
                "{}: finish(Quiet::Touching) with Quiet excused: say Quiet::Checked",
                self.namespace
            ),
            Quiet::Checked => assert!(
                excused(Invariant::Quiet)
                    || self.quiet_checked.load(std::sync::atomic::Ordering::SeqCst),
                "{}: finish(Quiet::Checked), yet quiet after settling was neither checked \
                 (Scenario::assert_quiet) nor excused",
                self.namespace
            ),
        }
        if !excused(Invariant::Floor) {
            self.assert_floor_held();
        }
        self.assert_not_refused();
        if !excused(Invariant::NoEmptyWrite) {
            let repeated = repeated_writes(&self.writes());
            assert!(
                repeated.is_empty(),
                "writes of Tandem's that changed nothing: {repeated:#?}"
            );
        }
        if !excused(Invariant::ReadsFromCaches) {
            let reads = uncached_reads(&self.plane.requests(), &self.namespace);
            assert!(
                reads.is_empty(),
                "Tandem read {} other than as a cache miss: {reads:#?}",
                self.namespace
            );
        }
    }

    /// Makes `count` GPU nodes for this scenario (kwok plays them) and waits
    /// until they are Ready: each has 8 `nvidia.com/gpu`, 64 CPUs and 512 GiB,
    /// is labelled with the scenario's fleet ([`control_plane::FLEET_LABEL`],
    /// the only nodes its pods may land on), a zone (two, alternating), a rack
    /// of four ([`RACK_LABEL`]) and one block ([`BLOCK_LABEL`]). Their names.
    pub async fn nodes(&self, count: usize) -> Vec<String> {
        self.labelled_nodes(count, &[]).await
    }

    /// [`Scenario::nodes`] labelled as spot capacity
    /// (`karpenter.sh/capacity-type: spot`, what the spot examples select).
    pub async fn spot_nodes(&self, count: usize) -> Vec<String> {
        self.labelled_nodes(count, &[("karpenter.sh/capacity-type", "spot")])
            .await
    }

    /// [`Scenario::nodes`] with `labels` too.
    pub async fn labelled_nodes(&self, count: usize, labels: &[(&str, &str)]) -> Vec<String> {
        let first = self.node_count();
        let nodes: Vec<Value> = (0..count)
            .map(|i| {
                let mut node = gpu_node(&self.namespace, first + i, 8);
                for (key, value) in labels {
                    node["metadata"]["labels"][*key] = json!(value);
                }
                node
            })
            .collect();
        self.plane.nodes(&nodes).await;
        let names: Vec<String> = nodes
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        self.fleet.lock().expect("the fleet").extend(names.clone());
        names
    }

    fn node_count(&self) -> usize {
        self.fleet.lock().expect("the fleet").len()
    }

    /// Gives the pods matching `selector` the health `health` (a label kwok's
    /// stages read, `tests/cluster/kwok/stages.yaml`): `Some("unready")` makes
    /// a Ready pod fail its readiness probe, None makes it pass again. The
    /// count of pods.
    pub async fn set_health(&self, selector: &str, health: Option<&str>) -> usize {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .expect("pods");
        for pod in &list.items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let patch = json!({"metadata": {"labels": {HEALTH_LABEL: health}}});
            pods.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .expect("the pod's health label");
        }
        list.items.len()
    }

    /// Watches pods and InferenceServices, and records every moment a
    /// serving role that had a ready replica has none while it asks for
    /// replicas ([`Floor`]).
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
        let services = services_api(&self.client, &self.namespace);
        let floor = self.floor.clone();
        self.tasks.push(tokio::spawn(async move {
            let mut events = watcher(services, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let mut floor = floor.lock().expect("the floor");
                match event {
                    Ok(watcher::Event::Apply(service) | watcher::Event::InitApply(service)) => {
                        floor.service(&serde_json::to_value(service).expect("json"))
                    }
                    Ok(watcher::Event::Delete(service)) => {
                        floor.service_gone(service.metadata.name.as_deref().unwrap_or_default())
                    }
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
    pub async fn eventually<T, F, Fut>(&self, seconds: u64, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        super::eventually(seconds, Duration::from_millis(200), what, check, || {
            self.plane.assert_alive();
            format!("tandem's log (end):\n{}", tail(&self.tandem.log(), 60))
        })
        .await
    }

    /// Waits, at most `limit`, until the namespace's pods are at rest: every
    /// StatefulSet has the pods it asks for ([`short_of_pods`]), every
    /// LeaderWorkerSet has its leaders' StatefulSet
    /// ([`replicas_without_leaders`]), every leader of a multi-node replica has its workers' StatefulSet
    /// ([`leaders_without_workers`]), and no pod is still on a way kwok
    /// takes it by itself ([`in_motion`]). Tandem's status follows the
    /// pods, so a quiet check begun while a pod is still loading sees
    /// Tandem's answer to it (CI failed twice on such a race), and so does
    /// one begun before kube-controller-manager has created a pod: its
    /// StatefulSet controller, busy with another scenario's 200
    /// StatefulSets, created the pod of a StatefulSet 18 s after it was
    /// written (CI failed on that too). This only waits: what is still
    /// moving at `limit` is printed, and the quiet check that follows
    /// decides.
    async fn wait_pods_at_rest(&self, limit: Duration) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let sets: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
        let replicas: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &kube::api::ApiResource {
                group: "leaderworkerset.x-k8s.io".into(),
                version: "v1".into(),
                api_version: "leaderworkerset.x-k8s.io/v1".into(),
                kind: "LeaderWorkerSet".into(),
                plural: "leaderworkersets".into(),
            },
        );
        let deadline = tokio::time::Instant::now() + limit;
        let mut moving = Vec::new();
        while tokio::time::Instant::now() < deadline {
            // A plane without LWS's CRD has no LeaderWorkerSet to wait for.
            let replicas = match replicas.list(&ListParams::default()).await {
                Ok(list) => Ok(list.items),
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
                Err(e) => Err(e),
            };
            moving = match (
                pods.list(&ListParams::default()).await,
                sets.list(&ListParams::default()).await,
                replicas,
            ) {
                (Ok(pods), Ok(sets), Ok(replicas)) => {
                    let mut moving: Vec<String> = sets
                        .items
                        .iter()
                        .filter_map(short_of_pods)
                        .chain(leaders_without_workers(&pods.items, &sets.items))
                        .chain(replicas_without_leaders(&replicas, &sets.items))
                        .collect();
                    moving.extend(
                        pods.items
                            .iter()
                            .filter(|pod| in_motion(pod))
                            .filter_map(|pod| pod.metadata.name.clone()),
                    );
                    moving
                }
                (Err(e), _, _) => vec![format!("(pods not listed: {e})")],
                (_, Err(e), _) => vec![format!("(StatefulSets not listed: {e})")],
                (_, _, Err(e)) => vec![format!("(LeaderWorkerSets not listed: {e})")],
            };
            if moving.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!(
            "{}: pods still moving after {limit:?}, checking quiet anyway: {moving:?}",
            self.namespace
        );
    }

    /// The writes of this namespace in the audit log.
    pub fn writes(&self) -> Vec<Request> {
        self.plane
            .requests_where(|w| w.is_write() && w.namespace.as_deref() == Some(&self.namespace))
    }

    /// Asserts no request of Tandem's in this namespace was refused for
    /// want of a permission, and no write repeated what was stored.
    pub fn assert_writes_sound(&self) {
        self.assert_not_refused();
        let writes = self.writes();
        let repeated = repeated_writes(&writes);
        assert!(
            repeated.is_empty(),
            "writes of Tandem's that changed nothing: {repeated:#?}"
        );
    }

    /// Asserts that no request of Tandem's in this namespace, or for no
    /// namespace (its cluster-wide lists and watches), was refused. Other
    /// namespaces are their own scenarios' to check: a scenario about the
    /// pod-patch policy provokes refusals on purpose.
    fn assert_not_refused(&self) {
        let forbidden: Vec<String> = refusals(&self.plane.requests_where(|r| {
            r.namespace.is_none() || r.namespace.as_deref() == Some(&self.namespace)
        }));
        assert!(forbidden.is_empty(), "Tandem was refused: {forbidden:#?}");
    }

    /// Waits until the writes still carrying out the last change have
    /// stopped (a 2 s pause in Tandem's, within 30 s) and returns how many
    /// writes the namespace has had by then.
    async fn settled_writes(&self) -> usize {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut seen = self.writes().len();
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let late = self.tandem_writes_after(seen);
            seen = self.writes().len();
            if late.is_empty() {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "still writing after 30 s: {late:#?}\ntandem's log (end):\n{}",
                tail(&self.tandem.log(), 60)
            );
        }
    }

    /// Asserts that Tandem writes nothing in this namespace for `seconds`,
    /// once the writes still carrying out the last change have stopped
    /// (a 2 s pause in them, within 30 s), unless a pod moved first in that
    /// window ([`quiet_window`]: the window starts over, for at most 90 s);
    /// then that it is alive and still
    /// reconciling: an annotation put on `touch` (one of Tandem's objects,
    /// `(apiVersion, kind, name)`) is reconciled (Tandem logs that it
    /// reconciled that very object, [`reconciled_lines`]), and writes
    /// nothing.
    pub async fn assert_quiet(&self, seconds: u64, touch: (&str, &str, &str)) {
        self.quiet_checked
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.wait_pods_at_rest(Duration::from_secs(90)).await;
        let (api_version, kind, name) = touch;
        let reconciles = || reconciled_lines(&self.tandem.log(), kind, name, &self.namespace);
        // A window in which a pod moved first is Tandem's answer to the
        // moving world, not a write of a settled one: it starts over, for
        // at most 90 s.
        let moving_until = tokio::time::Instant::now() + Duration::from_secs(90);
        // A held status is written after its pace, and after the
        // service's rest if it is resting then (`tandem::reconcile::rest`).
        let pace = tandem::plan::inference_service::status::STATUS_PACE.longest()
            + tandem::reconcile::rest::Rest::DEFAULT.longest;
        let before = loop {
            let seen = self.settled_writes().await;
            let lead_in_since = jiff::Timestamp::now()
                .checked_sub(jiff::SignedDuration::try_from(pace).unwrap_or_default())
                .unwrap_or(jiff::Timestamp::MIN);
            let before = reconciles();
            tokio::time::sleep(Duration::from_secs(seconds)).await;
            let writes = self.writes();
            let (earlier, window) = writes.split_at(seen.min(writes.len()));
            let lead_in: Vec<Request> = earlier
                .iter()
                .filter(|w| {
                    w.time
                        .parse::<jiff::Timestamp>()
                        .is_ok_and(|t| t >= lead_in_since)
                })
                .cloned()
                .collect();
            match quiet_window(&lead_in, window) {
                QuietWindow::Quiet => break before,
                QuietWindow::Moved(changes) if tokio::time::Instant::now() < moving_until => {
                    eprintln!(
                        "{}: pods moved in the quiet window, Tandem answered; waiting anew: {changes:?}",
                        self.namespace
                    );
                }
                QuietWindow::Moved(changes) => panic!(
                    "pods of {} still moving after 90 s of quiet checks: {changes:#?}",
                    self.namespace
                ),
                QuietWindow::Unprompted(late) => panic!(
                    "writes in a settled namespace within {seconds} s: {late:#?}\ntandem's log (end):\n{}",
                    tail(&self.tandem.log(), 60)
                ),
            }
        };
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
            let now = reconciles();
            if now > before {
                Ok(())
            } else {
                Err(format!(
                    "{now} reconciles of {kind} {name} logged, as before"
                ))
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
        let requests = self.plane.requests();
        reads_in(&requests[mark.min(requests.len())..], &self.namespace)
    }

    /// Tandem's writes in this namespace after the first `seen` writes, each
    /// with what it sent, so that a failed quiet check says what changed.
    fn tandem_writes_after(&self, seen: usize) -> Vec<String> {
        self.writes()
            .iter()
            .skip(seen)
            .filter(|w| w.by_tandem())
            .map(Request::summary_with_body)
            .collect()
    }
}

/// Tandem's requests, of any verb, that RBAC or its pod-patch policy
/// refused.
pub fn refusals(requests: &[Request]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.by_tandem() && (r.forbidden_by_rbac() || r.refused_by_pod_patch_policy()))
        .map(|r| format!("{}: {}", r.summary(), r.message))
        .collect()
}

/// Tandem's GETs and LISTs of `namespace` among `requests` (watches
/// excluded): what a reconcile sends when it reads the API server instead of
/// its caches.
pub fn reads_in(requests: &[Request], namespace: &str) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.by_tandem() && matches!(r.verb.as_str(), "get" | "list"))
        .filter(|r| r.namespace.as_deref() == Some(namespace))
        .map(Request::summary)
        .collect()
}

/// Tandem's reads of `namespace` that no cache miss explains: every `list`
/// (a cache lists once, cluster-wide), and every `get` of a resource not in
/// [`super::rbac::ON_A_CACHE_MISS`].
pub fn uncached_reads(requests: &[Request], namespace: &str) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.by_tandem() && r.namespace.as_deref() == Some(namespace))
        .filter(|r| match r.verb.as_str() {
            "list" => true,
            "get" => {
                let resource = match &r.subresource {
                    Some(sub) => format!("{}/{sub}", r.resource),
                    None => r.resource.clone(),
                };
                !super::rbac::ON_A_CACHE_MISS
                    .iter()
                    .any(|(verb, missed, _, _)| *verb == "get" && *missed == resource)
            }
            _ => false,
        })
        .map(Request::summary)
        .collect()
}

/// How many times Tandem's log (`RUST_LOG=tandem=debug`) says it reconciled
/// object `kind` `namespace/name`: the controller's line `reconciled
/// object=Kind.version.group/name.namespace`.
pub fn reconciled_lines(log: &str, kind: &str, name: &str, namespace: &str) -> usize {
    let object = format!("/{name}.{namespace}");
    log.lines()
        .filter(|line| line.contains("reconciled") && line.contains("object="))
        .filter(|line| {
            line.split_whitespace().any(|word| {
                word.strip_prefix("object=")
                    .is_some_and(|o| o.starts_with(&format!("{kind}.")) && o.ends_with(&object))
            })
        })
        .count()
}

/// The first object of the YAML file at `path` (from the repository's root).
pub fn example(path: &str) -> Value {
    super::yaml_documents(&super::repo_path(path)).remove(0)
}

/// The status of `object`'s condition `kind`, if it has one.
pub fn condition(object: &Value, kind: &str) -> Option<String> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

/// The condition `kind` of `object`'s status, whole (`null` when it has
/// none): its status, reason and message.
pub fn condition_of(object: &Value, kind: &str) -> Value {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or_default()
}

/// A label of `object`, or "".
pub fn label<'a>(object: &'a Value, key: &str) -> &'a str {
    object["metadata"]["labels"][key]
        .as_str()
        .unwrap_or_default()
}

/// Waits up to 90 s for InferenceService `service` to be Ready; it as stored.
pub async fn wait_service_ready(scenario: &Scenario, service: &str) -> Value {
    scenario
        .eventually(90, &format!("InferenceService {service} Ready"), || async {
            let stored = scenario.get(IS, "InferenceService", service).await;
            match stored {
                Some(s) if condition(&s, "Ready").as_deref() == Some("True") => Ok(s),
                other => Err(format!(
                    "{:#}",
                    other.map(|s| s["status"].clone()).unwrap_or_default()
                )),
            }
        })
        .await
}

/// Sets the replicas of role number `role` of `service`, as `kubectl patch`.
pub async fn set_role_replicas(scenario: &Scenario, service: &str, role: usize, replicas: i64) {
    let services = scenario.api(IS, "InferenceService").await;
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": format!("/spec/roles/{role}/replicas"), "value": replicas}
    ]))
    .expect("a JSON patch");
    services
        .patch(service, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .expect("the role's replicas set");
}

/// What a quiet check's window of a namespace's writes says.
#[derive(Debug, PartialEq)]
pub enum QuietWindow {
    /// Tandem wrote nothing.
    Quiet,
    /// Tandem wrote, but another hand changed a pod first: the scheduler
    /// bound it, kwok moved its status, a controller made or deleted it.
    /// Tandem answered a world that moved (CI saw a Volcano service's
    /// decode pods bound 3 s into the window, their first look having
    /// found no node, 2026-12-03). Holds those pod changes.
    Moved(Vec<String>),
    /// Tandem wrote before any pod moved: nothing it watches changed, so
    /// the write is the defect the quiet check exists to catch.
    Unprompted(Vec<String>),
}

/// Reads a quiet check's window: `window` is the namespace's writes in
/// it, in the audit log's order, and `lead_in` those of the status pace
/// before it (`tandem::plan::inference_service::status::STATUS_PACE`):
/// Tandem writes the pods ready inside a replica once every ten seconds,
/// so a status patch in the window may answer a pod that moved in the
/// lead-in, and that is the world moving too.
pub fn quiet_window(lead_in: &[Request], window: &[Request]) -> QuietWindow {
    let Some(first) = window.iter().position(Request::by_tandem) else {
        return QuietWindow::Quiet;
    };
    let moved_pod = |w: &&Request| w.resource == "pods" && !w.by_tandem();
    let status_first = window[first].subresource.as_deref() == Some("status");
    let owed = lead_in.iter().filter(|_| status_first).filter(moved_pod);
    let moved: Vec<String> = owed
        .chain(window[..first].iter().filter(moved_pod))
        .map(Request::summary)
        .collect();
    if moved.is_empty() {
        QuietWindow::Unprompted(
            window
                .iter()
                .filter(|w| w.by_tandem())
                .map(Request::summary_with_body)
                .collect(),
        )
    } else {
        QuietWindow::Moved(moved)
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
        if write.verb == "delete" || !(200..300).contains(&write.code) || completes_deletion(write)
        {
            continue;
        }
        let key = (write.resource.clone(), name.clone());
        let known = versions.entry(key).or_default();
        if !known.insert(version.clone()) && write.by_tandem() {
            repeated.push(write.summary_with_body());
        }
    }
    repeated
}

/// Whether `write` removed the finalizers of an object being deleted: the
/// API server then deletes the object, and answers with it as it was last
/// stored, at the resourceVersion it had (k8s.io/apiserver's
/// `registry/generic/registry/store.go`, `Update`: `ShouldDeleteDuringUpdate`
/// then `deleteWithoutFinalizers`), so the same version is no sign of a
/// write that changed nothing.
fn completes_deletion(write: &Request) -> bool {
    let deleting = write
        .response
        .as_ref()
        .is_some_and(|r| !r["metadata"]["deletionTimestamp"].is_null());
    let finalizers = write
        .request
        .as_ref()
        .is_some_and(|r| r["metadata"]["finalizers"].is_array());
    deleting && finalizers
}

/// Whether `pod` serves: Ready, not draining (Tandem's traffic label), not
/// being deleted.
pub fn serves(pod: &Pod) -> bool {
    let draining = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("fusioninfer.io/traffic"))
        .is_some_and(|t| t == "draining");
    is_ready(pod) && !draining && pod.metadata.deletion_timestamp.is_none()
}

/// The pods of `pod`'s LeaderWorkerSet group (the size LWS writes on each).
pub fn group_size(pod: &Pod) -> usize {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("leaderworkerset.sigs.k8s.io/size"))
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// What `set` still lacks of its pods, if kube-controller-manager has not
/// yet caught up with it: it has not seen its last change
/// (`status.observedGeneration`), or has not created as many pods as it
/// asks for (`status.replicas`, the pods it created, against
/// `spec.replicas`). A StatefulSet being deleted lacks nothing: its pods
/// go with it, and [`in_motion`] waits for them.
pub fn short_of_pods(set: &StatefulSet) -> Option<String> {
    if set.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let wanted = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = set.status.as_ref();
    let created = status.map_or(0, |s| s.replicas);
    let observed = status.and_then(|s| s.observed_generation).unwrap_or(0);
    let generation = set.metadata.generation.unwrap_or(0);
    if observed < generation {
        Some(format!(
            "StatefulSet {name}: generation {generation} not observed yet ({observed})"
        ))
    } else if created != wanted {
        Some(format!(
            "StatefulSet {name}: {created} of {wanted} pods created"
        ))
    } else {
        None
    }
}

/// The LeaderWorkerSets whose leaders' StatefulSet, named after the
/// LeaderWorkerSet, the LWS manager has not created yet, or has not yet
/// given the LeaderWorkerSet's replica count: until it does, no pod of
/// theirs exists to be in motion (CI saw a quiet check begin while a
/// Volcano service's LeaderWorkerSets had no StatefulSet yet, 2026-12-03).
pub fn replicas_without_leaders(replicas: &[DynamicObject], sets: &[StatefulSet]) -> Vec<String> {
    let wanted_of_set: BTreeMap<&str, i32> = sets
        .iter()
        .filter_map(|s| {
            let wanted = s.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(1);
            Some((s.metadata.name.as_deref()?, wanted))
        })
        .collect();
    replicas
        .iter()
        .filter(|lws| lws.metadata.deletion_timestamp.is_none())
        .filter_map(|lws| {
            let name = lws.metadata.name.as_deref()?;
            let wanted = lws.data["spec"]["replicas"].as_i64().unwrap_or(1);
            match wanted_of_set.get(name) {
                None if wanted > 0 => Some(format!(
                    "LeaderWorkerSet {name}: no leaders' StatefulSet yet"
                )),
                Some(&set) if i64::from(set) != wanted => Some(format!(
                    "LeaderWorkerSet {name}: {wanted} replicas asked, its StatefulSet has {set}"
                )),
                _ => None,
            }
        })
        .collect()
}

/// The leader pods of multi-node replicas (group size above 1) whose
/// workers' StatefulSet, named after the leader, the LWS manager has not
/// created yet.
pub fn leaders_without_workers(pods: &[Pod], sets: &[StatefulSet]) -> Vec<String> {
    let names: BTreeSet<&str> = sets
        .iter()
        .filter_map(|s| s.metadata.name.as_deref())
        .collect();
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none() && group_size(pod) > 1)
        .filter(|pod| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LWS_WORKER_INDEX))
                .is_some_and(|index| index == "0")
        })
        .filter_map(|pod| pod.metadata.name.as_deref())
        .filter(|name| !names.contains(name))
        .map(|name| format!("leader {name}: no workers' StatefulSet yet"))
        .collect()
}

/// Whether `pod` will still change by itself: it is terminating; it is
/// bound and running its course to Ready (kwok's load delay); or it waits
/// for kube-scheduler's first look (no `PodScheduled` condition yet), which
/// on a loaded machine can come seconds after the pod (CI saw a quiet check
/// begin before a gang's pods were bound, 2026-12-02). A pod whose health a
/// test set (unready, crash loop), one the scheduler found no place for, one
/// for a scheduler the plane does not run and a finished one stay as they
/// are.
pub fn in_motion(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return true;
    }
    let spec = pod.spec.as_ref();
    let bound = spec.is_some_and(|s| s.node_name.is_some());
    let status = pod.status.as_ref();
    let finished = status
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    let health_set = pod
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(HEALTH_LABEL));
    // The pods of every profile the plane's kube-scheduler runs are its to
    // bind, Volcano's included (CI saw a quiet check begin while a Volcano
    // service's pods waited for that first look, 2026-12-03).
    let ours = spec
        .and_then(|s| s.scheduler_name.as_deref())
        .is_none_or(|name| crate::control_plane::SCHEDULER_PROFILES.contains(&name));
    let looked_at = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled");
    if !bound {
        return ours && !looked_at;
    }
    !finished && !health_set && !is_ready(pod)
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

/// The floor, computed per role from what the InferenceServices ask for
/// and the pods: a replica (one LeaderWorkerSet) serves when all its pods
/// (the group size LWS writes on each) exist and are Ready, and none is
/// draining or being deleted. A role that asks for replicas and once had a
/// serving one must always have one; a role with no pod left at all counts
/// as 0 serving, not as absent. A role asked to zero starts over: coming
/// back, it has a floor once it serves again.
#[derive(Default)]
pub struct Floor {
    /// pod name → (service/role, replica LeaderWorkerSet, group size, serves)
    pods: BTreeMap<String, (String, String, usize, bool)>,
    /// service/role → the replicas its InferenceService asks for.
    desired: BTreeMap<String, i64>,
    /// Roles that have had a serving replica.
    served: BTreeSet<String>,
    pub violations: Vec<String>,
}

impl Floor {
    /// A pod seen (created or changed).
    pub fn pod(&mut self, pod: &Pod) {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let (Some(service), Some(role), Some(set)) = (
            labels.get("fusioninfer.io/service"),
            labels.get("fusioninfer.io/role-name"),
            labels.get("leaderworkerset.sigs.k8s.io/name"),
        ) else {
            return;
        };
        let serves = serves(pod);
        let size = group_size(pod);
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.pods.insert(
            name,
            (format!("{service}/{role}"), set.clone(), size, serves),
        );
    }

    /// A pod gone.
    pub fn pod_gone(&mut self, pod: &Pod) {
        self.pods
            .remove(pod.metadata.name.as_deref().unwrap_or_default());
    }

    /// An InferenceService seen: the replicas each of its roles asks for.
    pub fn service(&mut self, service: &Value) {
        let name = service["metadata"]["name"].as_str().unwrap_or_default();
        self.service_gone(name);
        if !service["metadata"]["deletionTimestamp"].is_null() {
            return;
        }
        for role in service["spec"]["roles"].as_array().into_iter().flatten() {
            let role_name = role["name"].as_str().unwrap_or_default();
            let replicas = role["replicas"].as_i64().unwrap_or(1);
            let key = format!("{name}/{role_name}");
            // Asked to zero: a designed state (issue 54). The role has no
            // floor until it serves again after it is asked back.
            if replicas <= 0 {
                self.served.remove(&key);
            }
            self.desired.insert(key, replicas);
        }
    }

    /// An InferenceService gone (or being deleted): its roles ask for nothing.
    pub fn service_gone(&mut self, name: &str) {
        let prefix = format!("{name}/");
        self.desired.retain(|role, _| !role.starts_with(&prefix));
    }

    /// Records a violation for every role that asks for replicas, had a
    /// serving one, and has none now.
    pub fn check(&mut self) {
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
        for (role, desired) in &self.desired {
            let count = serving.get(role.as_str()).copied().unwrap_or(0);
            if count > 0 {
                self.served.insert(role.clone());
            } else if *desired > 0 && self.served.contains(role) {
                self.violations.push(format!(
                    "{role}: asks for {desired}, no serving replica among {:?}",
                    replicas
                        .keys()
                        .filter(|(r, _)| r == role)
                        .map(|(_, s)| s)
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
}

/// The label of a node's rack: four nodes to a rack.
pub const RACK_LABEL: &str = "topology.e2e.tandem/rack";
/// The label of a node's block (a network domain of racks).
pub const BLOCK_LABEL: &str = "topology.e2e.tandem/block";
/// The label kwok's stages read for a pod's health
/// (`tests/cluster/kwok/stages.yaml`): `never-ready`, `unready`, `crash-loop`.
pub const HEALTH_LABEL: &str = "e2e.tandem/health";

/// Node `index` of the fleet of `namespace`, with `gpus` GPUs, as kwok
/// plays it (its annotation), in zone `index % 2`, rack `index / 4` and
/// block 0.
pub fn gpu_node(namespace: &str, index: usize, gpus: u32) -> Value {
    let name = format!("{namespace}-node-{index}");
    let resources = json!({
        "cpu": "64", "memory": "512Gi", "pods": "110",
        "nvidia.com/gpu": gpus.to_string(),
    });
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                control_plane::FLEET_LABEL: namespace,
                "topology.kubernetes.io/zone": format!("zone-{}", index % 2),
                RACK_LABEL: format!("rack-{}", index / 4),
                BLOCK_LABEL: "block-0",
            },
            "annotations": {control_plane::KWOK_NODE: "fake"},
        },
        "status": {"allocatable": resources, "capacity": resources},
    })
}

/// The InferenceServices of `namespace`, as dynamic objects.
pub fn services_api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::api::ApiResource {
            group: "fusioninfer.io".into(),
            version: "v1alpha1".into(),
            api_version: IS.into(),
            kind: "InferenceService".into(),
            plural: "inferenceservices".into(),
        },
    )
}

/// The value of label `key` of each node of the scenario's fleet, by node
/// name.
pub async fn node_labels(scenario: &Scenario, key: &str) -> BTreeMap<String, String> {
    scenario
        .list("v1", "Node")
        .await
        .iter()
        .map(|n| {
            (
                n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                label(n, key).to_owned(),
            )
        })
        .collect()
}

/// The domains of node label `key` the pods of service `service` are bound
/// in, by replica (`{role}-{index}`); a pod not bound yet is in domain "".
pub async fn replica_domains(
    scenario: &Scenario,
    service: &str,
    key: &str,
) -> BTreeMap<String, Vec<String>> {
    let domains = node_labels(scenario, key).await;
    let mut by_replica: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in scenario.list("v1", "Pod").await {
        if label(&pod, "fusioninfer.io/service") != service {
            continue;
        }
        let replica = format!(
            "{}-{}",
            label(&pod, "fusioninfer.io/role-name"),
            label(&pod, "fusioninfer.io/replica-index")
        );
        let domain = pod["spec"]["nodeName"]
            .as_str()
            .and_then(|node| domains.get(node))
            .cloned()
            .unwrap_or_default();
        by_replica.entry(replica).or_default().push(domain);
    }
    by_replica
}

/// The racks the pods of `service` are bound in, by replica.
pub async fn replica_racks(scenario: &Scenario, service: &str) -> BTreeMap<String, Vec<String>> {
    replica_domains(scenario, service, RACK_LABEL).await
}

/// A service of `replicas` replicas of `nodes` nodes each (8 GPUs a pod),
/// each replica required in one rack.
pub fn racked(name: &str, backend: &str, replicas: u32, nodes: u32) -> Value {
    json!({
        "apiVersion": IS, "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "schedulingStrategy": {"gangScheduler": backend},
            "placement": {"replica": {"topologyKey": RACK_LABEL, "mode": "Required"}},
            "roles": [{"name": "worker", "componentType": "worker", "replicas": replicas,
                "multinode": {"nodeCount": nodes},
                "template": {"spec": {"containers": [{"name": "vllm",
                    "image": "vllm/vllm-openai:v0.11.0",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}],
        },
    })
}
