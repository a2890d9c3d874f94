//! An in-memory Kubernetes API server, served over real HTTP on loopback, so
//! that both the reconcilers under test (through [`FakeApi::client`]) and the
//! real `tandem serve` binary (through [`FakeApi::kubeconfig`]) talk to it as
//! they would to a cluster. It behaves like the API server where Tandem
//! depends on it:
//!
//! - LIST (in pages of `limit`, with `continue`; see [`list`]) and WATCH
//!   with resourceVersions: a watch from a version replays
//!   every change after it, from no version it starts with the objects as
//!   ADDED, a version older than the kept history is `410 Gone` (an ERROR
//!   event `Expired`, as the API server sends it), bookmarks when asked;
//!   label selectors (`=`, `==`, `!=`, existence, `!key`, `in`, `notin`) and
//!   the field selectors `metadata.name` and `metadata.namespace`; an object
//!   that stops matching a watch's selector is DELETED for that watch;
//! - server-side apply with field managers ([`ownership`]): a changed field
//!   owned by another manager is a 409 unless forced; merge and JSON patches,
//!   replace, `/status` and `/scale`, optimistic concurrency on
//!   `metadata.resourceVersion`; `metadata.managedFields` on every object;
//! - the normalisation of the built-in kinds Tandem writes ([`normalise`]);
//! - deletion with finalizers, ownerReference garbage collection (background
//!   propagation), namespaces that delete their content ([`lifecycle`]);
//! - a minimal LeaderWorkerSet controller; pods become ready when the test
//!   says so ([`FakeApi::set_ready`]);
//! - the CRDs of LWS, Volcano's PodGroup, InferencePool and Gateway API
//!   stored from the start, as in a cluster that has them, so that Tandem's
//!   watch of them ([`dependency_crds`]) finds them; `uninstall` removes one
//!   and `install` puts one back, as deleting and applying a CRD does.
//!
//! Every request is logged, so tests assert exactly what was written, and the
//! next writes to a path can be made to answer 409 Conflict.
//!
//! It is a stand-in: the arbiter is the real control plane of
//! `tests/cluster/end_to_end.rs` (`tests/harness/src/control_plane.rs`), and
//! where the two disagree the real one is right. It stays for the tests
//! that are faster here (leader election, write counts, scale, failures
//! the real API server cannot be made to produce on demand: 409s, 500s,
//! refused writes, expired watches, and a resource's watches held back
//! ([`FakeApi::hold_watches`]): a watch that lags behind the writes, as a
//! real watch cache may, but for as long as the test says, where the real
//! one lagged too little to matter in `tests/cluster/batching.rs`). What it
//! still does differently:
//! - the dependencies' CRDs name only `spec`'s top-level fields and keep
//!   whatever is below them; every kind is served in every group whether or
//!   not a CRD serves it, and a stored CRD whose kind is served already adds
//!   nothing to discovery (the real API server serves a custom kind only
//!   through its CRD);
//! - no CRD schema is enforced: no pruning, no defaults, no OpenAPI or CEL
//!   validation (nor CEL's cost budget: a CRD it takes may be one the real
//!   API server refuses, as the ScaleView CRD was);
//! - server-side apply replaces lists whole instead of merging them by
//!   their keys, and keeps no set of fields per manager inside them;
//! - built-in kinds are not validated; the canonical form of quantities
//!   comes from Tandem's own `Quantity`;
//! - no RBAC: every request is allowed;
//! - `/scale` reads and writes where Tandem's adapter table says, not the
//!   paths a CRD's scale subresource names;
//! - every controller (garbage collection, namespaces, LWS) runs inside the
//!   writing request, so nothing is ever seen half-done;
//! - names are not checked against DNS rules, and the LeaderWorkerSet
//!   controller has no webhook (a name LWS refuses is taken here);
//! - Kubernetes' own `scheduling.k8s.io/v1alpha2` is not served (discovery
//!   answers 404), so no Kubernetes PodGroup is ever written here; a
//!   `dryRun=All` request is admitted, stored nowhere and not counted as a
//!   write.
//! - webhooks' `matchConditions` are not evaluated: a webhook is called for
//!   every write its rules match.

pub mod admission;
pub mod lifecycle;
pub mod normalise;
pub mod ownership;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Body as HttpBody;
use http::{Response, StatusCode};
use serde_json::{Value, json};

use crate::request::{Address, Request, is_dry_run, query_flag, query_param};

use ownership::Owners;

/// An Event's write in [`FakeApi::take_writes_events_as_one`].
pub const EVENT: &str = "event";

/// An Event's write in namespace `default`, as [`FakeApi::take_writes`]
/// lists it.
pub const EVENTS: &str = "POST /apis/events.k8s.io/v1/namespaces/default/events";

/// Where a resource's objects live: `/api/v1` or `/apis/{group}/{version}`,
/// and the plural.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resource {
    pub prefix: String,
    pub plural: String,
}

impl Resource {
    pub fn api_version(&self) -> String {
        self.prefix
            .trim_start_matches("/apis/")
            .trim_start_matches("/api/")
            .to_owned()
    }

    fn of(object: &Value) -> Resource {
        let api_version = object["apiVersion"].as_str().unwrap_or("v1");
        let kind = object["kind"].as_str().unwrap_or_default();
        Resource {
            prefix: if api_version.contains('/') {
                format!("/apis/{api_version}")
            } else {
                format!("/api/{api_version}")
            },
            plural: plural(kind),
        }
    }

    /// Whether objects of this resource have no namespace.
    pub fn cluster_scoped(&self) -> bool {
        CLUSTER_SCOPED.contains(&self.plural.as_str())
    }
}

const CLUSTER_SCOPED: [&str; 12] = [
    "namespaces",
    "nodes",
    "persistentvolumes",
    "storageclasses",
    "priorityclasses",
    "clusterroles",
    "clusterrolebindings",
    "customresourcedefinitions",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
    "gatewayclasses",
    "queues",
];

/// The plural of a kind, as the CRDs and built-in APIs name them.
pub fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    match lower.as_str() {
        _ if lower.ends_with('y') && !lower.ends_with("ay") && !lower.ends_with("ey") => {
            format!("{}ies", &lower[..lower.len() - 1])
        }
        _ if lower.ends_with('s') => format!("{lower}es"),
        _ => format!("{lower}s"),
    }
}

/// A stored object and who owns its fields.
#[derive(Clone, Debug)]
pub struct Stored {
    pub object: Value,
    pub owners: Owners,
}

/// What happened to an object, for watches.
#[derive(Clone, Debug)]
pub struct Change {
    pub version: u64,
    pub resource: Resource,
    pub kind: &'static str,
    pub object: Value,
    /// The object before a modification, to tell a watch whose selector it
    /// no longer matches.
    pub previous: Option<Value>,
}

/// The server's state. Everything in it changes under one lock, so each
/// request is atomic, as an etcd transaction is.
#[derive(Default)]
pub struct State {
    /// Resource → (namespace, name) → object ("" is the namespace of
    /// cluster-scoped objects).
    pub objects: BTreeMap<Resource, BTreeMap<(String, String), Stored>>,
    /// Plurals whose API is not installed: every request gets 404.
    missing: BTreeSet<String>,
    /// Plurals whose writes are refused, with the status code (as an
    /// admission webhook or missing RBAC would).
    refused: BTreeMap<String, u16>,
    /// The requests received since the last [`FakeApi::take_calls`], in
    /// the order they arrived, each with its answer once it is given.
    calls: Vec<Request>,
    /// How many requests [`FakeApi::take_calls`] has taken.
    calls_taken: u64,
    /// The resourceVersion of the last change.
    pub version: u64,
    /// The changes watches can resume from, oldest first.
    history: VecDeque<Change>,
    /// How many changes are kept for watches to resume from.
    history_limit: usize,
    /// Writes whose path ends with the text answer 409 Conflict, as many
    /// times as the count says.
    conflicts: Vec<(String, usize)>,
    /// Cluster IPs handed out to Services.
    allocated_ips: u32,
    uids: u64,
    /// The uids of objects deleted for good, for the garbage collector.
    pub deleted_uids: BTreeSet<String>,
    /// Namespaces that were deleted: nothing can be created in them.
    pub deleted_namespaces: BTreeSet<String>,
    /// Whether LeaderWorkerSets get pods ([`FakeApi::run_leader_worker_sets`]).
    pub leader_worker_sets: bool,
    /// Whether those pods start ready ([`FakeApi::start_pods_ready`]).
    pub pods_start_ready: bool,
    /// What changed since the cluster's controllers last ran, so that they
    /// run only when they may have something to do ([`lifecycle::settle`]).
    pub dirty: Dirty,
}

/// What the cluster's own controllers have to look at again.
#[derive(Clone, Debug, Default)]
pub struct Dirty {
    /// Something was deleted or marked for deletion: dependents, namespaces.
    pub deletions: bool,
    /// LeaderWorkerSets (namespace, name) that changed, or whose pods did.
    pub workloads: BTreeSet<(String, String)>,
}

impl Dirty {
    fn is_empty(&self) -> bool {
        !self.deletions && self.workloads.is_empty()
    }

    /// Notes a change of `object`, of `resource`.
    fn note(&mut self, resource: &Resource, object: &Value) {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let set = match resource.plural.as_str() {
            "leaderworkersets" => object["metadata"]["name"].as_str(),
            "pods" => object["metadata"]["labels"][lifecycle::LWS_NAME].as_str(),
            _ => None,
        };
        if let Some(set) = set {
            self.workloads
                .insert((namespace.to_owned(), set.to_owned()));
        }
    }
}

/// The clock of every timestamp the server writes.
pub const NOW: &str = "2026-11-21T10:00:00Z";

impl State {
    /// Logs a request as it arrives; the number it returns finds it again
    /// for [`State::answered`].
    fn log(&mut self, request: Request) -> u64 {
        self.calls.push(request);
        self.calls_taken + self.calls.len() as u64 - 1
    }

    /// Records the answer to the request logged as `seq`, unless a test
    /// has taken it in the meantime.
    fn answered(&mut self, seq: u64, code: StatusCode, body: &Value) {
        let Some(index) = seq.checked_sub(self.calls_taken) else {
            return;
        };
        if let Some(request) = usize::try_from(index)
            .ok()
            .and_then(|i| self.calls.get_mut(i))
        {
            let time = k8s_openapi::jiff::Timestamp::now().to_string();
            request.answered(code.as_u16(), body, time);
        }
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.uids)
    }

    /// Stores `object` (created, or changed from `previous`) at a new
    /// resourceVersion, and tells the watches.
    pub fn commit(
        &mut self,
        resource: &Resource,
        mut stored: Stored,
        previous: Option<Value>,
    ) -> Value {
        self.version += 1;
        let version = self.version;
        let meta = &mut stored.object["metadata"];
        meta["resourceVersion"] = json!(version.to_string());
        let managed = stored.owners.managed_fields(&resource.api_version(), NOW);
        if managed.as_array().is_some_and(|m| !m.is_empty()) {
            stored.object["metadata"]["managedFields"] = managed;
        }
        let key = key_of(&stored.object);
        let object = stored.object.clone();
        self.objects
            .entry(resource.clone())
            .or_default()
            .insert(key, stored);
        let kind = if previous.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.dirty.deletions |= !object["metadata"]["deletionTimestamp"].is_null()
            || lifecycle::owners_gone(self, &object);
        self.dirty.note(resource, &object);
        self.record(resource, kind, object.clone(), previous);
        object
    }

    /// Removes an object for good, and tells the watches.
    pub fn remove(&mut self, resource: &Resource, key: &(String, String)) -> Option<Value> {
        let stored = self.objects.get_mut(resource)?.remove(key)?;
        if let Some(uid) = stored.object["metadata"]["uid"].as_str() {
            self.deleted_uids.insert(uid.to_owned());
        }
        self.dirty.deletions = true;
        self.dirty.note(resource, &stored.object);
        self.version += 1;
        let mut object = stored.object;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.record(resource, "DELETED", object.clone(), None);
        Some(object)
    }

    fn record(
        &mut self,
        resource: &Resource,
        kind: &'static str,
        object: Value,
        previous: Option<Value>,
    ) {
        self.history.push_back(Change {
            version: self.version,
            resource: resource.clone(),
            kind,
            object,
            previous,
        });
        while self.history.len() > self.history_limit {
            self.history.pop_front();
        }
    }

    pub fn get(&self, resource: &Resource, key: &(String, String)) -> Option<&Stored> {
        self.objects.get(resource)?.get(key)
    }

    /// Every stored object, with its resource.
    pub fn all(&self) -> impl Iterator<Item = (&Resource, &Stored)> {
        self.objects
            .iter()
            .flat_map(|(r, objects)| objects.values().map(move |s| (r, s)))
    }

    /// The kept changes after `version`, oldest first (the history is in
    /// version order, so this is a binary search, not a scan).
    fn changes_after(&self, version: u64) -> impl Iterator<Item = &Change> {
        let start = self.history.partition_point(|c| c.version <= version);
        self.history.range(start..)
    }

    /// The oldest resourceVersion a watch can resume from.
    fn oldest_resumable(&self) -> u64 {
        self.history
            .front()
            .map_or(self.version, |c| c.version.saturating_sub(1))
    }
}

fn key_of(object: &Value) -> (String, String) {
    let meta = &object["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_owned(),
        meta["name"].as_str().unwrap_or_default().to_owned(),
    )
}

struct Shared {
    state: Mutex<State>,
    /// The caches of the contexts handed out, for [`FakeApi::caught_up`].
    caches: Mutex<Vec<Arc<tandem::watch::caches::Caches>>>,
    /// The resourceVersion of the last change, for watches to wait on.
    changed: tokio::sync::watch::Sender<u64>,
    address: Mutex<Option<SocketAddr>>,
    bookmark_every: Duration,
    /// Resources (plural) whose watches deliver nothing until released
    /// ([`FakeApi::hold_watches`]): a cache that lags.
    held: Mutex<BTreeSet<String>>,
}

#[derive(Clone)]
pub struct FakeApi {
    shared: Arc<Shared>,
}

impl Default for FakeApi {
    fn default() -> Self {
        FakeApi::new()
    }
}

/// A request as the server reads it.
pub struct Incoming {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    /// Who sent it: the bearer token of the request, which this server
    /// takes as the user name (`admin` without one).
    pub user: String,
    pub body: Option<Value>,
}

/// What the request names: a resource, and within it perhaps a namespace,
/// a name and a subresource.
#[derive(Clone, Debug)]
pub struct Target {
    pub resource: Resource,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

/// Where a request's path points ([`Address::of`]).
fn target_of(path: &str) -> Option<Target> {
    let address = Address::of(path)?;
    Some(Target {
        resource: Resource {
            prefix: address.prefix,
            plural: address.resource,
        },
        namespace: address.namespace,
        name: address.name,
        sub: address.subresource,
    })
}

/// Splits a selector at the commas that are not inside `in (a, b)`.
fn terms(selector: &str) -> Vec<String> {
    let (mut out, mut current, mut depth) = (Vec::new(), String::new(), 0);
    for c in selector.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current);
    out.into_iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Whether an object's labels match a label selector.
pub fn matches_labels(object: &Value, selector: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    let label = |key: &str| labels[key.trim()].as_str();
    terms(selector).iter().all(|term| {
        let set = |rest: &str| -> Vec<String> {
            rest.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .split(',')
                .map(|v| v.trim().to_owned())
                .collect()
        };
        if let Some((key, rest)) = term.split_once(" notin ") {
            return label(key).is_none_or(|v| !set(rest).iter().any(|s| s == v));
        }
        if let Some((key, rest)) = term.split_once(" in ") {
            return label(key).is_some_and(|v| set(rest).iter().any(|s| s == v));
        }
        if let Some((key, value)) = term.split_once("!=") {
            return label(key) != Some(value.trim());
        }
        if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            return label(key) == Some(value.trim());
        }
        if let Some(key) = term.strip_prefix('!') {
            return label(key).is_none();
        }
        label(term).is_some()
    })
}

/// Whether an object matches a field selector (`metadata.name`,
/// `metadata.namespace`, with `=`, `==` or `!=`).
pub fn matches_fields(object: &Value, selector: &str) -> bool {
    terms(selector).iter().all(|term| {
        let (field, value, equal) = match term.split_once("!=") {
            Some((f, v)) => (f, v, false),
            None => match term.split_once("==").or_else(|| term.split_once('=')) {
                Some((f, v)) => (f, v, true),
                None => return false,
            },
        };
        let actual = match field.trim() {
            "metadata.name" => object["metadata"]["name"].as_str(),
            "metadata.namespace" => object["metadata"]["namespace"].as_str(),
            _ => return false,
        };
        (actual == Some(value.trim())) == equal
    })
}

/// A Status answer, as the API server words its errors.
pub fn status(code: u16, reason: &str, message: String) -> (StatusCode, Value) {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "code": code, "reason": reason, "message": message});
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
    )
}

fn not_found(target: &Target, name: &str) -> (StatusCode, Value) {
    let group = target
        .resource
        .api_version()
        .rsplit_once('/')
        .map(|(g, _)| format!(".{g}"))
        .unwrap_or_default();
    status(
        404,
        "NotFound",
        format!("{}{group} \"{name}\" not found", target.resource.plural),
    )
}

/// Where a kind's `/scale` subresource keeps its replicas, by plural, and
/// what an object without them reports: the workloads' replicas were
/// defaulted to 1 when the API server stored them; a custom resource's
/// missing field reads as 0.
fn scale_field(plural: &str) -> (&'static str, i64) {
    match plural {
        "deployments" | "statefulsets" | "leaderworkersets" => ("/spec/replicas", 1),
        "resourcescalinggroups" => ("/spec/scalingStrategy/groupConfig/replicas", 0),
        _ => ("/spec/replicas", 0),
    }
}

/// The autoscaling/v1 Scale of an object (`spec.replicas` omitted when 0,
/// as the API server's `omitempty` does).
fn scale_of(object: &Value, plural: &str) -> Value {
    let (path, unset) = scale_field(plural);
    let replicas = object
        .pointer(path)
        .and_then(Value::as_i64)
        .unwrap_or(unset);
    let meta = &object["metadata"];
    let mut scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"]},
        "spec": {},
        "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0)}});
    if replicas != 0 {
        scale["spec"]["replicas"] = json!(replicas);
    }
    scale
}

/// Whether a change from `before` to `after` through the main resource
/// moves `metadata.generation`: any change of the spec does (the API server
/// bumps it for custom resources and the workloads alike).
fn generation_moves(before: &Value, after: &Value) -> bool {
    before["spec"] != after["spec"]
}

impl FakeApi {
    pub fn new() -> FakeApi {
        FakeApi::with_bookmarks_every(Duration::from_secs(1))
    }

    /// A server whose watches that ask for bookmarks get one this often
    /// (the real API server sends one about every minute).
    pub fn with_bookmarks_every(bookmark_every: Duration) -> FakeApi {
        let state = State {
            history_limit: 100_000,
            ..State::default()
        };
        let fake = FakeApi {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                caches: Mutex::default(),
                changed: tokio::sync::watch::channel(0).0,
                address: Mutex::new(None),
                bookmark_every,
                held: Mutex::default(),
            }),
        };
        for crd in dependency_crds() {
            fake.insert(crd);
        }
        fake
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock fails anyway.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `change` on the state, settles what the API server's own
    /// controllers would do (garbage collection, namespaces, LeaderWorkerSet
    /// pods), and wakes the watches.
    pub fn change<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        let (out, version) = {
            let mut state = self.lock();
            let out = change(&mut state);
            lifecycle::settle(&mut state);
            (out, state.version)
        };
        self.shared.changed.send_replace(version);
        out
    }

    /// Holds every watch of `plural` from now on: changes are stored and
    /// answered to reads, but no watch event of them is sent (a watch that
    /// lags behind the writes) until [`FakeApi::release_watches`].
    pub fn hold_watches(&self, plural: &str) {
        self.shared
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(plural.to_owned());
    }

    /// Lets the held watches of `plural` send every change they held back.
    pub fn release_watches(&self, plural: &str) {
        self.shared
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(plural);
        let version = self.version();
        self.shared.changed.send_replace(version);
    }

    fn watches_held(&self, plural: &str) -> bool {
        self.shared
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(plural)
    }

    /// Keeps only the last `changes` changes for watches to resume from: a
    /// watch from an older resourceVersion is then told `410 Gone`.
    pub fn keep_history(&self, changes: usize) {
        let mut state = self.lock();
        state.history_limit = changes;
        while state.history.len() > changes {
            state.history.pop_front();
        }
    }

    /// Runs the minimal LeaderWorkerSet controller from now on: pods for
    /// every group ([`lifecycle`]). Off by default, so that tests which
    /// store their own pods see only those.
    pub fn run_leader_worker_sets(&self) {
        self.change(|state| state.leader_worker_sets = true);
    }

    /// Registers Tandem's webhooks exactly as `webhooks/` does, but reached
    /// at `base` (`https://127.0.0.1:PORT`, the server under test) with the
    /// CA that signed its certificate.
    pub fn register_webhooks(&self, base: &str, ca_pem: &str) {
        for file in ["webhooks/mutating.yaml", "webhooks/validating.yaml"] {
            for mut configuration in crate::yaml_documents(&crate::repo_path(file)) {
                crate::reach_by_url(&mut configuration, base, ca_pem);
                self.insert(configuration);
            }
        }
    }

    /// Makes the pods the LeaderWorkerSet controller creates ready from the
    /// start (for worlds too large to make ready pod by pod).
    pub fn start_pods_ready(&self) {
        self.change(|state| state.pods_start_ready = true);
    }

    /// The address the server listens on, starting it on first use (on the
    /// tokio runtime of the caller).
    pub fn address(&self) -> SocketAddr {
        let mut address = self
            .shared
            .address
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(address) = *address {
            return address;
        }
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port for the fake API");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let bound = listener.local_addr().expect("the listener's address");
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        let fake = self.clone();
        let app = axum::Router::new().fallback(move |request: http::Request<HttpBody>| {
            let fake = fake.clone();
            async move { fake.serve(request).await }
        });
        tokio::spawn(async move {
            axum::serve(listener, app).await.ok();
        });
        *address = Some(bound);
        bound
    }

    /// A kube client whose every request this server answers.
    pub fn client(&self) -> kube::Client {
        let url = format!("http://{}", self.address());
        let config = kube::Config::new(url.parse().expect("a loopback URL"));
        kube::Client::try_from(config).expect("a client for the fake API")
    }

    /// A kubeconfig that points at this server as `user` (its token, which
    /// this server takes as the user name admission reviews report), for the
    /// `tandem` binary.
    pub fn kubeconfig(&self, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tandem\n    namespace: default\n\
             current-context: fake\nusers:\n- name: tandem\n  user:\n    token: {user}\n",
            self.address()
        )
    }

    /// Stores an object as the API server would (uid, resourceVersion,
    /// generation, normalisation of built-in kinds), with no owner of its
    /// fields (as if created long ago by someone else).
    pub fn insert(&self, mut object: Value) -> Value {
        let resource = Resource::of(&object);
        self.change(|state| {
            let meta = &mut object["metadata"];
            if meta["namespace"].is_null() && !resource.cluster_scoped() {
                meta["namespace"] = json!("default");
            }
            let key = key_of(&object);
            let previous = state.get(&resource, &key).cloned();
            let meta = &mut object["metadata"];
            if meta["uid"].is_null() {
                meta["uid"] = match &previous {
                    Some(p) => p.object["metadata"]["uid"].clone(),
                    None => json!(format!("uid-{}", key.1)),
                };
            }
            if meta["generation"].is_null() {
                meta["generation"] = json!(1);
            }
            if meta["creationTimestamp"].is_null() {
                meta["creationTimestamp"] = json!(NOW);
            }
            normalise::built_in(&resource.plural, &mut object, &mut state.allocated_ips);
            let owners = previous
                .as_ref()
                .map(|p| p.owners.clone())
                .unwrap_or_default();
            state.commit(
                &resource,
                Stored { object, owners },
                previous.map(|p| p.object),
            )
        })
    }

    /// Plays LeaderWorkerSet's controller once, for tests that step a
    /// rollout by hand and decide readiness per LeaderWorkerSet (the
    /// continuous controller is [`FakeApi::run_leader_worker_sets`]): every
    /// LeaderWorkerSet in `namespace` has its `size` pods (leader and workers) at the
    /// revision and replica index of its pod template, ready when `ready`
    /// says so for the LeaderWorkerSet; pods of another revision or of a
    /// LeaderWorkerSet that is gone are removed (the old pods of a replaced
    /// replica). Returns the pods' names.
    pub fn step_leader_worker_sets(
        &self,
        namespace: &str,
        ready: impl Fn(&Value) -> bool,
    ) -> Vec<String> {
        const LWS: &str = "leaderworkerset.x-k8s.io/v1";
        let sets = self.list(LWS, "LeaderWorkerSet", namespace);
        let mut wanted = BTreeMap::new();
        for lws in &sets {
            let name = lws["metadata"]["name"].as_str().expect("name");
            let group = &lws["spec"]["leaderWorkerTemplate"];
            let size = group["size"].as_u64().unwrap_or(1);
            let is_ready = ready(lws);
            for worker in 0..size {
                let template = if worker == 0 && !group["leaderTemplate"].is_null() {
                    &group["leaderTemplate"]
                } else {
                    &group["workerTemplate"]
                };
                let mut labels = template["metadata"]["labels"].clone();
                labels["leaderworkerset.sigs.k8s.io/worker-index"] = json!(worker.to_string());
                let pod = format!("{name}-0-{worker}");
                wanted.insert(
                    pod.clone(),
                    json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": pod, "namespace": namespace, "labels": labels},
                        "spec": {"nodeName": format!("gpu-{worker}"), "containers": template["spec"]["containers"]},
                        "status": {"phase": "Running", "conditions": [
                            {"type": "Ready", "status": if is_ready { "True" } else { "False" }}]}}),
                );
            }
        }
        for pod in self.list("v1", "Pod", namespace) {
            let name = pod["metadata"]["name"].as_str().expect("name");
            // A label Tandem applies to a pod itself (a drain's) is not the
            // template's business: StatefulSet leaves such a pod alone.
            let own_labels = |p: &Value| {
                let mut labels = p["metadata"]["labels"].clone();
                if let Some(map) = labels.as_object_mut() {
                    map.remove("fusioninfer.io/traffic");
                }
                labels
            };
            let same = wanted
                .get(name)
                .is_some_and(|w| own_labels(w) == own_labels(&pod) && w["status"] == pod["status"]);
            if same {
                wanted.remove(name);
            } else if !wanted.contains_key(name) {
                self.remove("v1", "Pod", namespace, name);
            }
        }
        let names = wanted.keys().cloned().collect();
        for pod in wanted.into_values() {
            self.insert(pod);
        }
        names
    }

    /// Removes a stored object at once, finalizers or not (as if they had
    /// been stripped by hand, or the controller crashed before running them).
    pub fn remove(&self, api_version: &str, kind: &str, namespace: &str, name: &str) {
        let resource = Resource::of(&json!({"apiVersion": api_version, "kind": kind}));
        let removed =
            self.change(|state| state.remove(&resource, &(namespace.to_owned(), name.to_owned())));
        assert!(
            removed.is_some(),
            "{kind} {namespace}/{name} to remove exists"
        );
    }

    /// Marks an API as not installed: it is not served, and its CRD, when
    /// it is one of [`dependency_crds`], is gone.
    pub fn uninstall(&self, plural: &str) {
        self.change(|state| {
            state.missing.insert(plural.to_owned());
            let crds = Resource::of(
                &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}),
            );
            let names: Vec<(String, String)> = state
                .objects
                .get(&crds)
                .into_iter()
                .flat_map(|objects| objects.keys())
                .filter(|(_, name)| name.split_once('.').is_some_and(|(p, _)| p == plural))
                .cloned()
                .collect();
            for key in names {
                state.remove(&crds, &key);
            }
        });
    }

    /// Serves an API again, storing its CRD.
    pub fn install(&self, plural: &str, crd: Value) {
        self.lock().missing.remove(plural);
        self.insert(crd);
    }

    /// Refuses every write to a plural with `code` from now on.
    pub fn refuse_writes(&self, plural: &str, code: u16) {
        self.lock().refused.insert(plural.to_owned(), code);
    }

    /// Accepts writes to a plural again.
    pub fn allow_writes(&self, plural: &str) {
        self.lock().refused.remove(plural);
    }

    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = Resource::of(&json!({"apiVersion": api_version, "kind": kind}));
        let namespace = if resource.cluster_scoped() {
            ""
        } else {
            namespace
        };
        self.lock()
            .get(&resource, &(namespace.to_owned(), name.to_owned()))
            .map(|s| s.object.clone())
    }

    /// Every stored object of a kind in a namespace, by name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: &str) -> Vec<Value> {
        let resource = Resource::of(&json!({"apiVersion": api_version, "kind": kind}));
        self.lock()
            .objects
            .get(&resource)
            .map(|objects| {
                objects
                    .iter()
                    .filter(|((ns, _), _)| ns == namespace)
                    .map(|(_, s)| s.object.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Changes a stored object in place (as another actor would, without
    /// taking ownership of what it changes).
    pub fn edit(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) {
        let mut object = self
            .get(api_version, kind, namespace, name)
            .expect("object to edit exists");
        change(&mut object);
        self.insert(object);
    }

    /// Marks a pod ready (Running, every container ready) or not ready.
    pub fn set_ready(&self, namespace: &str, pod: &str, ready: bool) {
        self.edit("v1", "Pod", namespace, pod, |pod| {
            lifecycle::set_pod_ready(pod, ready);
        });
    }

    /// Marks every pod of `namespace` whose labels match `selector` ready or
    /// not; returns how many there were.
    pub fn set_ready_matching(&self, namespace: &str, selector: &str, ready: bool) -> usize {
        let pods: Vec<String> = self
            .list("v1", "Pod", namespace)
            .into_iter()
            .filter(|p| matches_labels(p, selector))
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        for pod in &pods {
            self.set_ready(namespace, pod, ready);
        }
        pods.len()
    }

    /// The Events written so far in namespace default, as sorted `Reason: note` lines.
    pub fn event_notes(&self) -> Vec<String> {
        self.event_notes_in("default")
    }

    /// The Events written so far in `namespace`, as sorted `Reason: note` lines.
    pub fn event_notes_in(&self, namespace: &str) -> Vec<String> {
        let mut notes: Vec<String> = self
            .list("events.k8s.io/v1", "Event", namespace)
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["note"].as_str().unwrap_or_default()
                )
            })
            .collect();
        notes.sort();
        notes
    }

    /// A reconcile context whose client this server answers, with the clock
    /// fixed at 2026-11-21T10:00:00Z.
    pub fn context(&self) -> std::sync::Arc<tandem::reconcile::Context> {
        self.context_with(|_| {})
    }

    /// [`FakeApi::context`], changed by `adjust` (e.g. a shorter conflict backoff).
    pub fn context_with(
        &self,
        adjust: impl FnOnce(&mut tandem::reconcile::Context),
    ) -> std::sync::Arc<tandem::reconcile::Context> {
        let client = self.client();
        // One set of caches per server, as one `tandem` process has: a
        // second context (another clock, say) reads the same caches.
        let caches = {
            let mut all = self.shared.caches.lock().expect("the caches list");
            match all.first() {
                Some(caches) => caches.clone(),
                None => {
                    let caches =
                        tandem::watch::caches::Caches::start(client.clone(), Arc::default());
                    all.push(caches.clone());
                    caches
                }
            }
        };
        let reporter = kube::runtime::events::Reporter {
            controller: tandem::reconcile::FIELD_MANAGER.to_owned(),
            instance: None,
        };
        let live = tandem::reconcile::live::Live::new(client, caches, reporter);
        let mut ctx = tandem::reconcile::Context::new(Arc::new(live), Default::default());
        ctx.now = std::sync::Arc::new(|| NOW.parse().expect("a fixed RFC 3339 time"));
        adjust(&mut ctx);
        std::sync::Arc::new(ctx)
    }

    /// The caches of the contexts handed out.
    pub fn caches(&self) -> Arc<tandem::watch::caches::Caches> {
        self.shared
            .caches
            .lock()
            .expect("the caches list")
            .last()
            .cloned()
            .expect("a context was made")
    }

    /// `(namespace, name, resourceVersion)` of the stored objects of
    /// `api_version` `plural` that match `selector`.
    pub fn versions(
        &self,
        api_version: &str,
        plural: &str,
        selector: Option<&str>,
    ) -> BTreeSet<(String, String, String)> {
        let prefix = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        let resource = Resource {
            prefix,
            plural: plural.to_owned(),
        };
        let state = self.lock();
        state
            .all()
            .filter(|(r, _)| **r == resource)
            .map(|(_, s)| &s.object)
            .filter(|o| selector.is_none_or(|s| matches_labels(o, s)))
            .map(|o| {
                let (namespace, name) = key_of(o);
                let version = o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                (namespace, name, version)
            })
            .collect()
    }

    /// Waits until every cache of the contexts handed out holds what this
    /// server stores (the same objects at the same resourceVersions), as a
    /// cluster's caches do a moment after each write; panics after 10 s.
    pub async fn caught_up(&self) {
        let caches: Vec<_> = self.shared.caches.lock().expect("the caches list").clone();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        for caches in caches {
            tokio::time::timeout(Duration::from_secs(10), caches.ready())
                .await
                .expect("the caches list within 10 s");
            loop {
                let behind = self.behind(&caches);
                if behind.is_none() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the caches did not catch up with the server: {behind:?}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    /// The first cache that differs from what is stored, by kind.
    fn behind(&self, caches: &tandem::watch::caches::Caches) -> Option<String> {
        fn versions<K>(
            store: &kube::runtime::reflector::Store<K>,
        ) -> BTreeSet<(String, String, String)>
        where
            K: kube::Resource + Clone,
            K::DynamicType: std::hash::Hash + Eq + Clone,
        {
            store
                .state()
                .iter()
                .map(|o| {
                    let meta = o.meta();
                    (
                        meta.namespace.clone().unwrap_or_default(),
                        meta.name.clone().unwrap_or_default(),
                        meta.resource_version.clone().unwrap_or_default(),
                    )
                })
                .collect()
        }
        let typed = [
            (
                "fusioninfer.io/v1alpha1",
                "inferenceservices",
                versions(&caches.services),
            ),
            (
                "fusioninfer.io/v1alpha1",
                "scaleviews",
                versions(&caches.views),
            ),
            (
                "resourcescalinggroup.com/v1",
                "resourcescalinggroups",
                versions(&caches.groups),
            ),
        ];
        for (api_version, plural, cached) in typed {
            if cached != self.versions(api_version, plural, None) {
                return Some(plural.to_owned());
            }
        }
        let seen = caches.dependencies.versions();
        let stored: BTreeMap<String, String> = self
            .versions("apiextensions.k8s.io/v1", "customresourcedefinitions", None)
            .into_iter()
            .filter(|(_, name, _)| {
                tandem::plan::shared::installed::ALL
                    .iter()
                    .chain([&tandem::plan::shared::installed::LEGACY_INFERENCE_POOL])
                    .any(|d| tandem::plan::shared::installed::crd_name(d) == *name)
            })
            .map(|(_, name, version)| (name, version))
            .collect();
        if seen != stored {
            return Some(format!("the dependencies' CRDs: {seen:?} != {stored:?}"));
        }
        for watched in caches.watched() {
            if watched.state() != tandem::watch::caches::WatchState::Listed {
                continue;
            }
            let resource = &watched.resource;
            let cached = versions(&watched.store);
            if cached
                != self.versions(
                    &resource.api_version,
                    &resource.plural,
                    watched.selector.as_deref(),
                )
            {
                return Some(format!("{} {:?}", resource.plural, watched.selector));
            }
        }
        None
    }

    /// Makes the next `count` writes (any method but GET) whose path ends
    /// with `path` answer 409 Conflict without changing anything, as the API
    /// server does when another writer got there first. `""` matches every
    /// path.
    pub fn conflict_next_writes(&self, path: &str, count: usize) {
        self.lock().conflicts.push((path.to_owned(), count));
    }

    /// Every request since the last `take_calls`, watches left out (a watch
    /// is one long request, not a read per event).
    pub fn take_calls(&self) -> Vec<Request> {
        let mut state = self.lock();
        state.calls_taken += state.calls.len() as u64;
        std::mem::take(&mut state.calls)
            .into_iter()
            .filter(|c| !c.is_watch())
            .collect()
    }

    /// The writes since the last `take_calls`, as `METHOD path` lines.
    pub fn take_writes(&self) -> Vec<String> {
        self.take_calls()
            .iter()
            .filter(|c| c.is_write())
            .map(Request::line)
            .collect()
    }

    /// [`FakeApi::take_writes`], each write of an Event as [`EVENT`]: for
    /// tests that count a controller's Events but leave what they say to
    /// tests of their own.
    pub fn take_writes_events_as_one(&self) -> Vec<String> {
        self.take_writes()
            .into_iter()
            .map(|w| {
                if w.contains("/events") {
                    EVENT.to_owned()
                } else {
                    w
                }
            })
            .collect()
    }

    /// The resourceVersion of the last change.
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    async fn serve(&self, request: http::Request<HttpBody>) -> Response<HttpBody> {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        let incoming = Incoming {
            method: parts.method.as_str().to_owned(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|t| t.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            user: parts
                .headers
                .get(http::header::AUTHORIZATION)
                .and_then(|t| t.to_str().ok())
                .and_then(|t| t.strip_prefix("Bearer "))
                .unwrap_or("admin")
                .to_owned(),
            body: if bytes.is_empty() {
                None
            } else {
                serde_json::from_slice(&bytes).ok()
            },
        };
        let received = Request::received(
            &incoming.user,
            &incoming.method,
            &incoming.path,
            &incoming.query,
            incoming.body.clone(),
        );
        if received.is_watch() {
            let mut state = self.lock();
            let seq = state.log(received);
            state.answered(seq, StatusCode::OK, &Value::Null);
            drop(state);
            return self.watch(&incoming);
        }
        let seq = self.lock().log(received);
        let (code, body) = self.answer(incoming).await;
        self.lock().answered(seq, code, &body);
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(HttpBody::from(
                serde_json::to_vec(&body).expect("JSON values serialise"),
            ))
            .expect("a status and a header make a response")
    }

    /// Answers one request that is not a watch. A write is planned under
    /// the lock, admitted by the webhooks registered for it without the
    /// lock, and stored under the lock if nothing changed the object in
    /// between (else planned again, as the API server retries its
    /// optimistic write to etcd).
    async fn answer(&self, request: Incoming) -> (StatusCode, Value) {
        let target = match self.change(|state| screen(state, &request)) {
            Ok(target) => target,
            Err(refusal) => return refusal,
        };
        if !is_write(&request, &target) {
            return self.change(|state| answer(state, &target, &request));
        }
        for _ in 0..5 {
            let planned = match self.change(|state| plan_write(state, &target, &request)) {
                Ok(planned) => planned,
                Err(refusal) => return refusal,
            };
            let hooks = self.change(|state| admission::matching(state, &planned));
            let planned = match admission::admit(&hooks, planned, &request).await {
                Ok(planned) => planned,
                Err(refusal) => return refusal,
            };
            // A dry run is admitted and answered, and stores nothing.
            if is_dry_run(&request.query) {
                return (StatusCode::CREATED, planned.stored.object);
            }
            if let Some(answer) = self.change(|state| finish(state, planned)) {
                return answer;
            }
        }
        status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {}: the object kept changing",
                request.path
            ),
        )
    }

    /// Streams the changes a watch asks for, one JSON event a line.
    fn watch(&self, request: &Incoming) -> Response<HttpBody> {
        let Some(target) = target_of(&request.path) else {
            let (code, body) = status(404, "NotFound", format!("no route {}", request.path));
            return Response::builder()
                .status(code)
                .body(HttpBody::from(body.to_string()))
                .expect("a response");
        };
        let query = &request.query;
        let labels = query_param(query, "labelSelector").unwrap_or_default();
        let fields = query_param(query, "fieldSelector").unwrap_or_default();
        let bookmarks = query_flag(query, "allowWatchBookmarks");
        let timeout = query_param(query, "timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs);
        let since = query_param(query, "resourceVersion").filter(|v| !v.is_empty() && v != "0");
        let send_initial = query_flag(query, "sendInitialEvents");
        let scope = Scope {
            resource: target.resource.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            labels,
            fields,
        };
        let kind = kind_of(&target.resource);
        let api_version = target.resource.api_version();

        // What the watch starts with: the objects as ADDED when it gives no
        // version (or asks for initial events), else every change after it.
        // Subscribed before reading the state, so no change falls between.
        let mut changed = self.shared.changed.subscribe();
        let (mut pending, mut next) = {
            let state = self.lock();
            let mut pending = VecDeque::new();
            match since.as_deref().map(str::parse::<u64>) {
                Some(Ok(version)) if !send_initial => {
                    if version < state.oldest_resumable() {
                        pending.push_back(json!({"type": "ERROR", "object": status(410, "Expired",
                            format!("too old resource version: {version} ({})", state.oldest_resumable())).1}));
                        let body = lines(pending);
                        return Response::builder()
                            .status(StatusCode::OK)
                            .header("content-type", "application/json")
                            .body(HttpBody::from(body))
                            .expect("a response");
                    }
                    for change in state.changes_after(version) {
                        if let Some(event) = scope.event(change) {
                            pending.push_back(event);
                        }
                    }
                }
                Some(Err(_)) => {
                    let (code, body) = status(400, "BadRequest", "invalid resourceVersion".into());
                    return Response::builder()
                        .status(code)
                        .body(HttpBody::from(body.to_string()))
                        .expect("a response");
                }
                _ => {
                    for (resource, stored) in state.all() {
                        if scope.covers(resource, &stored.object) {
                            pending.push_back(json!({"type": "ADDED", "object": stored.object}));
                        }
                    }
                    if send_initial {
                        pending.push_back(json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                            "metadata": {"resourceVersion": state.version.to_string(),
                                "annotations": {"k8s.io/initial-events-end": "true"}}}}));
                    }
                }
            }
            (pending, state.version)
        };

        let fake = self.clone();
        let bookmark_every = self.shared.bookmark_every;
        let stream = async_stream(move |sender| async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut bookmark = tokio::time::Instant::now() + bookmark_every;
            loop {
                if !pending.is_empty()
                    && sender
                        .send(lines(std::mem::take(&mut pending)))
                        .await
                        .is_err()
                {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return,
                    _ = tokio::time::sleep_until(bookmark), if bookmarks => {
                        let version = fake.version();
                        pending.push_back(json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                            "metadata": {"resourceVersion": version.to_string()}}}));
                        bookmark = tokio::time::Instant::now() + bookmark_every;
                    }
                    result = changed.changed() => {
                        if result.is_err() {
                            return;
                        }
                        if fake.watches_held(&scope.resource.plural) {
                            // Held back: sent, in order, once released.
                            continue;
                        }
                        let state = fake.lock();
                        if next < state.oldest_resumable() {
                            pending.push_back(json!({"type": "ERROR", "object": status(410, "Expired",
                                format!("too old resource version: {next} ({})", state.oldest_resumable())).1}));
                        } else {
                            for change in state.changes_after(next) {
                                if let Some(event) = scope.event(change) {
                                    pending.push_back(event);
                                }
                            }
                        }
                        next = state.version;
                    }
                }
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(HttpBody::from_stream(stream))
            .expect("a streaming response")
    }
}

/// A stream fed by a task through a channel.
fn async_stream<F, Fut>(
    produce: F,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::convert::Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Vec<u8>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, mut receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(produce(sender));
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx).map(|chunk| chunk.map(Ok)))
}

fn lines(events: VecDeque<Value>) -> Vec<u8> {
    let mut out = Vec::new();
    for event in events {
        out.extend(serde_json::to_vec(&event).expect("JSON values serialise"));
        out.push(b'\n');
    }
    out
}

/// The kind a resource's objects have, for bookmarks and lists.
fn kind_of(resource: &Resource) -> String {
    KINDS
        .iter()
        .find(|k| plural(k) == resource.plural)
        .map_or_else(|| resource.plural.clone(), |k| k.to_string())
}

/// Every kind this server knows by name.
const KINDS: [&str; 32] = [
    "Pod",
    "Service",
    "Deployment",
    "StatefulSet",
    "ConfigMap",
    "Secret",
    "Role",
    "RoleBinding",
    "ServiceAccount",
    "Event",
    "Lease",
    "Namespace",
    "Node",
    "ControllerRevision",
    "LeaderWorkerSet",
    "PodGroup",
    "InferencePool",
    "HTTPRoute",
    "Gateway",
    "GatewayClass",
    "InferenceService",
    "ScaleView",
    "ResourceScalingGroup",
    "RoleBasedGroup",
    "CustomResourceDefinition",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "Queue",
    "PodDisruptionBudget",
];

/// The CRDs of the projects Tandem writes objects of, at their newest
/// (LWS v1, Volcano's PodGroup with `subGroupPolicy`, InferencePool v1,
/// Gateway API v1), as a cluster that has them holds them: what Tandem reads
/// to know what is installed. Only `spec`'s field names matter to it.
pub fn dependency_crds() -> Vec<Value> {
    let crd = |group: &str, kind: &str, plural: &str, version: &str, fields: &[&str]| {
        let properties: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| {
                (
                    (*f).to_owned(),
                    json!({"x-kubernetes-preserve-unknown-fields": true}),
                )
            })
            .collect();
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
                "versions": [{"name": version, "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": properties}}}}}]}})
    };
    vec![
        crd(
            "leaderworkerset.x-k8s.io",
            "LeaderWorkerSet",
            "leaderworkersets",
            "v1",
            &[
                "replicas",
                "leaderWorkerTemplate",
                "rolloutStrategy",
                "startupPolicy",
                "networkConfig",
            ],
        ),
        crd(
            "scheduling.volcano.sh",
            "PodGroup",
            "podgroups",
            "v1beta1",
            &[
                "minMember",
                "minTaskMember",
                "minResources",
                "queue",
                "priorityClassName",
                "networkTopology",
                "subGroupPolicy",
            ],
        ),
        crd(
            "inference.networking.k8s.io",
            "InferencePool",
            "inferencepools",
            "v1",
            &["selector", "targetPorts", "endpointPickerRef"],
        ),
        crd(
            "gateway.networking.k8s.io",
            "Gateway",
            "gateways",
            "v1",
            &["gatewayClassName", "listeners"],
        ),
        crd(
            "gateway.networking.k8s.io",
            "HTTPRoute",
            "httproutes",
            "v1",
            &["parentRefs", "rules", "hostnames"],
        ),
    ]
}

/// API discovery (`GET /api/v1`, `GET /apis/{group}/{version}`): every kind
/// this server stores is served in every group/version (it keeps any object
/// it is given), less the APIs a test uninstalled, with a `/scale` for the
/// kinds the API server gives one (Deployment, StatefulSet, and CRDs with a
/// scale subresource: LeaderWorkerSet, ScaleView, and those of the stored
/// CustomResourceDefinitions). Not every kind is in every group in a real
/// cluster; Tandem asks only for the kinds it means, by group.
fn discovery(state: &State, path: &str) -> Option<(StatusCode, Value)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let group_version = match parts.as_slice() {
        ["api", version] => version.to_string(),
        // Kubernetes' own PodGroups (alpha in 1.36) are not served, as in a
        // cluster before 1.36 or without the alpha API: their gang is
        // proven against the tests' real control plane.
        ["apis", "scheduling.k8s.io", "v1alpha2"] => {
            return Some((
                StatusCode::NOT_FOUND,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": 404,
                       "message": "the server could not find the requested resource"}),
            ));
        }
        ["apis", group, version] => format!("{group}/{version}"),
        _ => return None,
    };
    const SCALED: [&str; 4] = ["Deployment", "StatefulSet", "LeaderWorkerSet", "ScaleView"];
    let mut resources: Vec<Value> = Vec::new();
    let mut add = |kind: &str, plural: &str, scaled: bool| {
        resources.push(json!({"name": plural, "singularName": kind.to_lowercase(), "namespaced": !CLUSTER_SCOPED.contains(&plural), "kind": kind, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}));
        if scaled {
            resources.push(json!({"name": format!("{plural}/scale"), "singularName": "", "namespaced": true, "kind": "Scale", "group": "autoscaling", "version": "v1", "verbs": ["get", "patch", "update"]}));
        }
    };
    for kind in KINDS {
        let plural = plural(kind);
        if !state.missing.contains(&plural) {
            add(kind, &plural, SCALED.contains(&kind));
        }
    }
    let (group, version) = group_version
        .split_once('/')
        .unwrap_or(("", &group_version));
    for (resource, stored) in state.all() {
        if resource.plural != "customresourcedefinitions" {
            continue;
        }
        let spec = &stored.object["spec"];
        let Some(served) = spec["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == version))
        else {
            continue;
        };
        // The kinds above are served already (the dependencies' CRDs are
        // stored for what they say, not to serve their kinds twice).
        if spec["group"] == group
            && !KINDS.contains(&spec["names"]["kind"].as_str().unwrap_or_default())
        {
            add(
                spec["names"]["kind"].as_str().unwrap_or_default(),
                spec["names"]["plural"].as_str().unwrap_or_default(),
                !served["subresources"]["scale"].is_null(),
            );
        }
    }
    Some((
        StatusCode::OK,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    ))
}

/// What one list or watch covers.
struct Scope {
    resource: Resource,
    namespace: Option<String>,
    name: Option<String>,
    labels: String,
    fields: String,
}

impl Scope {
    fn covers(&self, resource: &Resource, object: &Value) -> bool {
        *resource == self.resource
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && self
                .name
                .as_deref()
                .is_none_or(|n| object["metadata"]["name"].as_str() == Some(n))
            && matches_labels(object, &self.labels)
            && matches_fields(object, &self.fields)
    }

    /// The event this watch sees of a change: a modification that makes an
    /// object match is ADDED, one that makes it stop matching is DELETED.
    fn event(&self, change: &Change) -> Option<Value> {
        let now = self.covers(&change.resource, &change.object);
        let before = change
            .previous
            .as_ref()
            .is_some_and(|p| self.covers(&change.resource, p));
        let kind = match (change.kind, before, now) {
            ("MODIFIED", true, true) => "MODIFIED",
            ("MODIFIED", false, true) => "ADDED",
            ("MODIFIED", true, false) => "DELETED",
            ("MODIFIED", false, false) => return None,
            (kind, _, true) => kind,
            _ => return None,
        };
        Some(json!({"type": kind, "object": change.object}))
    }
}

/// Answers what stops a request before its resource is read:
/// an injected conflict, an API that is not installed, a refused write.
fn screen(state: &mut State, request: &Incoming) -> Result<Target, (StatusCode, Value)> {
    let method = request.method.as_str();
    if method != "GET"
        && let Some(conflict) = state
            .conflicts
            .iter_mut()
            .find(|(suffix, left)| *left > 0 && request.path.ends_with(suffix.as_str()))
    {
        conflict.1 -= 1;
        return Err(status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {}: the object has been modified; please apply your changes to the latest version and try again",
                request.path
            ),
        ));
    }
    if method == "GET"
        && let Some(found) = discovery(state, &request.path)
    {
        return Err(found);
    }
    let Some(target) = target_of(&request.path) else {
        return Err(status(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({})",
                request.path
            ),
        ));
    };
    let plural = target.resource.plural.clone();
    if state.missing.contains(&plural) {
        return Err(status(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({plural})"),
        ));
    }
    if let Some(&code) = state.refused.get(&plural)
        && method != "GET"
    {
        return Err(status(
            code,
            "Forbidden",
            format!("{method} {plural} is refused by this test"),
        ));
    }
    Ok(target)
}

/// Whether a request creates or changes an object (and so is admitted).
fn is_write(request: &Incoming, target: &Target) -> bool {
    matches!(
        (request.method.as_str(), target.name.is_some()),
        ("POST", false) | ("PATCH" | "PUT", true)
    )
}

/// Answers a read or a delete, under the lock.
fn answer(state: &mut State, target: &Target, request: &Incoming) -> (StatusCode, Value) {
    let method = request.method.as_str();
    let plural = target.resource.plural.clone();
    let namespace = target.namespace.clone().unwrap_or_default();
    match (method, target.name.clone(), target.sub.as_deref()) {
        ("GET", None, _) => list(state, target, &request.query),
        ("GET", Some(name), Some("scale")) => {
            match state.get(&target.resource, &(namespace, name.clone())) {
                Some(stored) => (StatusCode::OK, scale_of(&stored.object, &plural)),
                None => not_found(target, &name),
            }
        }
        ("GET", Some(name), _) => match state.get(&target.resource, &(namespace, name.clone())) {
            Some(stored) => (StatusCode::OK, stored.object.clone()),
            None => not_found(target, &name),
        },
        ("DELETE", Some(name), None) => {
            lifecycle::delete(state, &target.resource, &(namespace, name.clone()))
                .unwrap_or_else(|| not_found(target, &name))
        }
        _ => status(
            405,
            "MethodNotAllowed",
            format!("{method} {}?{}", request.path, request.query),
        ),
    }
}

/// Plans a create or a change, under the lock: what would be stored.
fn plan_write(
    state: &mut State,
    target: &Target,
    request: &Incoming,
) -> Result<Planned, (StatusCode, Value)> {
    match (request.method.as_str(), target.name.as_deref()) {
        ("POST", None) => create(
            state,
            target,
            request.body.clone().unwrap_or_default(),
            &request.query,
        ),
        (_, Some(name)) => write(state, target, name, target.sub.as_deref(), request),
        _ => Err(status(405, "MethodNotAllowed", request.path.clone())),
    }
}

/// A write as planned, before admission stores it.
pub struct Planned {
    pub resource: Resource,
    pub key: (String, String),
    /// The object before the write; None when it creates one.
    pub before: Option<Value>,
    pub stored: Stored,
    /// The subresource written (`status`, `scale`).
    pub sub: Option<String>,
    /// Nothing changes: the API server answers without storing.
    pub no_op: bool,
}

impl Planned {
    /// The AdmissionReview operation.
    pub fn operation(&self) -> &'static str {
        if self.before.is_some() {
            "UPDATE"
        } else {
            "CREATE"
        }
    }
}

/// Stores a planned write, under the lock, if what it was planned from is
/// still what is stored (else None: plan again).
fn finish(state: &mut State, planned: Planned) -> Option<(StatusCode, Value)> {
    let current = state
        .get(&planned.resource, &planned.key)
        .map(|s| s.object["metadata"]["resourceVersion"].clone());
    let planned_from = planned
        .before
        .as_ref()
        .map(|b| b["metadata"]["resourceVersion"].clone());
    if current != planned_from {
        return None;
    }
    let plural = planned.resource.plural.clone();
    let scale = planned.sub.as_deref() == Some("scale");
    if planned.no_op {
        let before = planned.before.unwrap_or_default();
        return Some((
            StatusCode::OK,
            if scale {
                scale_of(&before, &plural)
            } else {
                before
            },
        ));
    }
    let created = planned.before.is_none();
    if created && planned.resource.plural == "namespaces" {
        state.deleted_namespaces.remove(&planned.key.1);
    }
    let stored = state.commit(&planned.resource, planned.stored, planned.before);
    if lifecycle::releasable(&stored) {
        // The last finalizer of an object being deleted is gone.
        lifecycle::delete(state, &planned.resource, &planned.key);
    }
    let answer = if scale {
        scale_of(&stored, &plural)
    } else {
        stored
    };
    Some((
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        answer,
    ))
}

/// A LIST, in pages when the client asks for them (`limit`, `continue`), as
/// the API server serves a list that names no resourceVersion (client-go's
/// pager and kube-runtime's watcher ask for 500 at a time).
///
/// The continue token carries the first page's resourceVersion and the last
/// key served; every page reports that resourceVersion, so the watch that
/// follows starts from it. Kubernetes serves the later pages from etcd's
/// snapshot at that version; here they are read from the current state
/// after the last key. The difference is only in what a client sees while
/// objects change between pages, and the watch from the first page's
/// version replays those changes, so a cache ends the same
/// (<https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks>).
fn list(state: &State, target: &Target, query: &str) -> (StatusCode, Value) {
    let scope = Scope {
        resource: target.resource.clone(),
        namespace: target.namespace.clone(),
        name: None,
        labels: query_param(query, "labelSelector").unwrap_or_default(),
        fields: query_param(query, "fieldSelector").unwrap_or_default(),
    };
    let limit = query_param(query, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (version, after) = match query_param(query, "continue").filter(|c| !c.is_empty()) {
        None => (state.version, None),
        Some(token) => match continue_from(&token) {
            Some((version, key)) => (version, Some(key)),
            None => {
                return status(
                    400,
                    "BadRequest",
                    format!("invalid continue token {token:?}"),
                );
            }
        },
    };
    let empty = BTreeMap::new();
    let objects = state.objects.get(&target.resource).unwrap_or(&empty);
    let range = match &after {
        Some(key) => objects.range::<(String, String), _>((
            std::ops::Bound::Excluded(key),
            std::ops::Bound::Unbounded,
        )),
        None => objects.range::<(String, String), _>(..),
    };
    let mut matching = range.filter(|(_, s)| scope.covers(&target.resource, &s.object));
    let page: Vec<(&(String, String), &Stored)> = match limit {
        Some(limit) => matching.by_ref().take(limit).collect(),
        None => matching.by_ref().collect(),
    };
    let more = matching.next().is_some();
    let last = page.last().map(|(key, _)| *key);
    let items: Vec<Value> = page.iter().map(|(_, s)| s.object.clone()).collect();
    let mut metadata = json!({"resourceVersion": version.to_string()});
    if more && let Some((namespace, name)) = last {
        metadata["continue"] = json!(format!("{version}/{namespace}/{name}"));
    }
    (
        StatusCode::OK,
        json!({"apiVersion": target.resource.api_version(), "kind": format!("{}List", kind_of(&target.resource)),
            "metadata": metadata, "items": items}),
    )
}

/// The first page's resourceVersion and the last key served, from a
/// continue token `version/namespace/name`.
fn continue_from(token: &str) -> Option<(u64, (String, String))> {
    let mut parts = token.splitn(3, '/');
    let version = parts.next()?.parse().ok()?;
    let namespace = parts.next()?.to_owned();
    let name = parts.next()?.to_owned();
    Some((version, (namespace, name)))
}

fn field_manager(query: &str) -> String {
    query_param(query, "fieldManager").unwrap_or_else(|| "unknown".to_owned())
}

fn create(
    state: &mut State,
    target: &Target,
    mut object: Value,
    query: &str,
) -> Result<Planned, (StatusCode, Value)> {
    if let Some(namespace) = &target.namespace {
        lifecycle::may_create_in(state, namespace)?;
        object["metadata"]["namespace"] = json!(namespace);
    }
    let Some(name) = object["metadata"]["name"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            object["metadata"]["generateName"]
                .as_str()
                .map(|prefix| format!("{prefix}{:05x}", state.version + 1))
        })
    else {
        return Err(status(
            422,
            "Invalid",
            "metadata.name: Required value: name or generateName is required".into(),
        ));
    };
    object["metadata"]["name"] = json!(name);
    let key = key_of(&object);
    if state.get(&target.resource, &key).is_some() {
        return Err(status(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", target.resource.plural),
        ));
    }
    let mut owners = Owners::default();
    owners.record_update(&field_manager(query), &json!({}), &object);
    Ok(new_object(state, target, key, object, owners))
}

/// A new object as the API server stores it: a uid, generation 1, the time
/// it was made, no status, the normalisation of its kind.
fn new_object(
    state: &mut State,
    target: &Target,
    key: (String, String),
    mut object: Value,
    owners: Owners,
) -> Planned {
    let uid = state.next_uid();
    let meta = &mut object["metadata"];
    meta["uid"] = json!(uid);
    meta["generation"] = json!(1);
    meta["creationTimestamp"] = json!(NOW);
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    normalise::built_in(
        &target.resource.plural,
        &mut object,
        &mut state.allocated_ips,
    );
    Planned {
        resource: target.resource.clone(),
        key,
        before: None,
        stored: Stored { object, owners },
        sub: None,
        no_op: false,
    }
}

/// PATCH and PUT, of the object or of its `/status` or `/scale`.
fn write(
    state: &mut State,
    target: &Target,
    name: &str,
    sub: Option<&str>,
    request: &Incoming,
) -> Result<Planned, (StatusCode, Value)> {
    let key = (
        target.namespace.clone().unwrap_or_default(),
        name.to_owned(),
    );
    let body = request.body.clone().unwrap_or_default();
    let manager = field_manager(&request.query);
    let apply = request.content_type.starts_with("application/apply-patch");
    let existing = state.get(&target.resource, &key).cloned();

    // Server-side apply creates what does not exist yet.
    let Some(mut stored) = existing else {
        if apply && sub.is_none() {
            let mut object = body.clone();
            if let Some(namespace) = &target.namespace {
                lifecycle::may_create_in(state, namespace)?;
                object["metadata"]["namespace"] = json!(namespace);
            }
            let mut owners = Owners::default();
            owners.record_apply(&manager, &json!({}), &body);
            return Ok(new_object(state, target, key, object, owners));
        }
        return Err(not_found(target, name));
    };
    let before = stored.object.clone();
    let owners_before = stored.owners.clone();

    // The object after the write, before normalisation.
    let mut after = match (sub, apply) {
        (Some("scale"), _) => {
            let mut scale = scale_of(&before, &target.resource.plural);
            if request.method == "PUT" {
                scale = body.clone();
            } else if body.is_array() {
                scale = patched(&scale, &body)?;
            } else {
                json_patch::merge(&mut scale, &body);
            }
            let replicas = scale["spec"]["replicas"].as_i64().unwrap_or(0);
            let (path, _) = scale_field(&target.resource.plural);
            let mut after = before.clone();
            let mut merge = json!(replicas);
            for field in path.rsplit('/').filter(|f| !f.is_empty()) {
                merge = json!({ field: merge });
            }
            json_patch::merge(&mut after, &merge);
            after
        }
        (None, true) => {
            let mut configuration = body.clone();
            if let Some(map) = configuration.as_object_mut() {
                map.remove("status");
            }
            let force = query_flag(&request.query, "force");
            if !force {
                let conflicts = stored.owners.conflicts(&manager, &before, &configuration);
                if !conflicts.is_empty() {
                    return Err(status(
                        409,
                        "Conflict",
                        format!(
                            "Apply failed with {} conflict(s): {}",
                            conflicts.len(),
                            conflicts.join(", ")
                        ),
                    ));
                }
            }
            let mut merged = before.clone();
            if let Some(previous) = stored.owners.applied.get(&manager).cloned() {
                ownership::drop_unapplied(
                    &mut merged,
                    &stored.owners,
                    &manager,
                    &previous,
                    &configuration,
                );
            }
            ownership::merge_applied(&mut merged, &configuration);
            stored
                .owners
                .record_apply(&manager, &before, &configuration);
            merged
        }
        (_, false) if request.method == "PUT" => {
            let mut replaced = body.clone();
            // Server-set metadata is kept.
            for field in [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
            ] {
                replaced["metadata"][field] = before["metadata"][field].clone();
            }
            replaced
        }
        (_, false) if body.is_array() => patched(&before, &body)?,
        (_, false) => {
            let mut after = before.clone();
            json_patch::merge(&mut after, &body);
            after
        }
        (_, true) => {
            return Err(status(
                415,
                "UnsupportedMediaType",
                "apply is only for the main resource".into(),
            ));
        }
    };

    // Optimistic concurrency: a resourceVersion in the write must be current.
    let expected = if body.is_array() {
        None
    } else {
        body["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned)
    };
    if let Some(expected) = expected
        && before["metadata"]["resourceVersion"].as_str() != Some(expected.as_str())
    {
        return Err(status(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                target.resource.plural
            ),
        ));
    }

    // A status write changes only the status; any other write leaves it.
    match sub {
        Some("status") => {
            let status_after = after["status"].clone();
            after = before.clone();
            after["status"] = status_after;
        }
        _ => {
            after["status"] = before["status"].clone();
            if after["status"].is_null()
                && let Some(map) = after.as_object_mut()
            {
                map.remove("status");
            }
        }
    }
    for field in [
        "uid",
        "creationTimestamp",
        "generation",
        "name",
        "namespace",
    ] {
        after["metadata"][field] = before["metadata"][field].clone();
    }
    if let Some(meta) = after["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    normalise::built_in(
        &target.resource.plural,
        &mut after,
        &mut state.allocated_ips,
    );
    if sub.is_none() && generation_moves(&before, &after) {
        let generation = before["metadata"]["generation"].as_i64().unwrap_or(0);
        after["metadata"]["generation"] = json!(generation.saturating_add(1));
    }
    if !apply {
        stored.owners.record_update(&manager, &before, &after);
    }
    let mut unchanged_before = before.clone();
    if let Some(meta) = unchanged_before["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    unchanged_before["metadata"]["resourceVersion"] = Value::Null;
    let mut unchanged_after = after.clone();
    unchanged_after["metadata"]["resourceVersion"] = Value::Null;
    // The API server stores nothing for a write that changes nothing.
    let no_op = unchanged_before == unchanged_after && stored.owners == owners_before;
    stored.object = after;
    Ok(Planned {
        resource: target.resource.clone(),
        key,
        before: Some(before),
        stored,
        sub: sub.map(str::to_owned),
        no_op,
    })
}

/// A JSON Patch applied as a whole or not at all, like the API server does;
/// a failing `test` is a 422.
fn patched(object: &Value, patch: &Value) -> Result<Value, (StatusCode, Value)> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| status(400, "BadRequest", e.to_string()))?;
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &ops)
        .map_err(|e| status(422, "Invalid", format!("the JSON patch failed: {e}")))?;
    Ok(patched)
}
