//! The process's informer caches: one kube-runtime reflector per kind (and
//! label selection), started once and shared by the controllers (their
//! triggers and their reads) and the admission lookups.
//!
//! - Tandem's kinds (InferenceService, ScaleView, ResourceScalingGroup) are
//!   watched whole.
//! - The kinds an InferenceService creates are watched through the label
//!   `app.kubernetes.io/managed-by=tandem`, except the workloads a
//!   ResourceScalingGroup may also bind (Deployment, StatefulSet,
//!   LeaderWorkerSet), watched unselected: an object of theirs that Tandem
//!   neither manages nor replicates is kept trimmed to its metadata and
//!   replica counts ([`trim_workload`]).
//! - Pods are watched in two label selections, those of services and those
//!   of GroupReplication groups, kept as the facts the plans read
//!   ([`Cached::pod`], parsed once per watch event).
//! - A kind a group names that none of these covers (a RoleBasedGroup, a
//!   template's kind) is watched from the first time it is read.
//!
//! `managedFields` and the last-applied annotation are dropped from every
//! object before it is stored.
//!
//! Every event is also matched to the objects whose reconcile it concerns
//! ([`Triggers`]): through owner references and labels, and through indexes
//! updated from the same events (the views of a service, the groups that
//! name an object), never by scanning a cache. An event whose object did not
//! change in anything a plan reads (a new resourceVersion alone) triggers
//! nothing. A service's or a view's own status does trigger it, Tandem's
//! own writes included: the reconcile compares with the cached status, and
//! one that read it before the last write arrived must be followed by one
//! that reads it after ([`on_service`]). That costs one reconcile from the
//! caches per status write, which writes nothing. A ResourceScalingGroup's
//! own status does not trigger it: its reconcile reads its targets' `/scale`
//! from the API server.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::health::WatchBackoff;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::cached::{self, Cached};
use super::catalog::Catalog;
use super::dependencies::WatchedDependencies;
use super::discovery::ScaleDiscovery;
use super::follows::WatchedFollows;
use super::metrics::WatchMetrics;
use super::parsed::Parsed;
use super::{Unserved, resource};
use crate::api::resource_scaling_group::TargetResource;
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::resource_scaling_group::adapter;
use crate::plan::resource_scaling_group::replication::NAME_LABEL;
use crate::plan::shared::child_kinds::CHILD_KINDS;
use crate::plan::shared::children::{FIELD_MANAGER, MANAGED_BY, MANAGER, SERVICE};
use crate::plan::shared::pod::Pod;

/// The annotation that marks a cached object kept only in part (metadata and
/// replica counts); set in the cache only, never written.
pub const PARTIAL: &str = "tandem.fusioninfer.io/cached-in-part";

/// How often a kind the cluster does not serve is looked up again, so a CRD
/// installed after Tandem started is watched without a restart.
const UNSERVED_RETRY: Duration = Duration::from_secs(60);

/// How often, and how soon, a failed discovery of a kind watched from the
/// start is tried again before the kind counts as not served for now.
const DISCOVERY_TRIES: u32 = 10;
const DISCOVERY_RETRY: Duration = Duration::from_millis(300);

/// Workloads that both an InferenceService and a ResourceScalingGroup may
/// use, watched whole and trimmed unless Tandem manages them.
const WORKLOADS: [(&str, &str, &str); 3] = [
    ("apps/v1", "Deployment", "deployments"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    (
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "leaderworkersets",
    ),
];

/// A watch's identity: apiVersion, plural, label selector.
type WatchKey = (String, String, Option<String>);

/// Where a watch stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchState {
    /// Started, not yet listed.
    Listing,
    /// Listed at least once; events keep the cache current.
    Listed,
    /// The API server refused the watch (403, 404) before it ever listed.
    Refused(String),
}

/// One reflector over a kind of objects read as JSON.
pub struct Watched {
    pub resource: ApiResource,
    /// The label selector of the watch, if any.
    pub selector: Option<String>,
    pub store: Store<Cached>,
    /// Where each of the store's objects is, kept from the same events.
    pub catalog: Arc<Catalog>,
    state: watch::Receiver<WatchState>,
}

impl Watched {
    pub fn state(&self) -> WatchState {
        self.state.borrow().clone()
    }
}

/// Which objects of a kind a watch keeps, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trim {
    /// Whole, less managedFields and the last-applied annotation.
    Whole,
    /// Trimmed to metadata and replica counts unless Tandem manages it.
    Workload,
    /// Kept as a pod's facts ([`Cached::pod`]).
    Pod,
}

/// Why an object is queued. Ordered: when one window holds both, the
/// object's own change wins ([`super::window::batched`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// Something it reads changed: a child, a pod, a target, a lock.
    Other,
    /// Its own spec changed (a new generation), or it is new: its next
    /// reconcile goes ahead of other waiting ones ([`super::turns`]).
    OwnSpec,
}

/// One trigger of a controller: the object, and why.
pub type Trigger<K> = (ObjectRef<K>, Cause);

/// The sending end of a controller's queue, while it runs.
pub type Sender<K> = Mutex<Option<UnboundedSender<Trigger<K>>>>;

/// The controllers' queues and the indexes that map an event to them.
#[derive(Default)]
pub struct Triggers {
    services: Sender<InferenceService>,
    views: Sender<ScaleView>,
    groups: Sender<ResourceScalingGroup>,
    index: Mutex<Index>,
}

/// Who refers to whom, kept from watch events.
#[derive(Default)]
struct Index {
    /// (namespace, service) -> the views that target it.
    views_of_service: HashMap<(String, String), BTreeSet<String>>,
    /// (namespace, API group, kind, name) -> the groups that name it.
    groups_naming: HashMap<(String, String, String, String), BTreeSet<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every guarded value is replaced whole or changed entry by entry, so a
    // panic elsewhere cannot leave it half-written.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn send<K: Resource>(slot: &Sender<K>, to: ObjectRef<K>, cause: Cause)
where
    K::DynamicType: Debug + Eq + std::hash::Hash + Clone,
{
    let mut slot = lock(slot);
    if let Some(sender) = slot.as_ref()
        && sender.unbounded_send((to, cause)).is_err()
    {
        // The controller stopped (leadership handed over).
        *slot = None;
    }
}

impl Triggers {
    fn service(&self, namespace: &str, name: &str) {
        self.service_for(namespace, name, Cause::Other);
    }

    fn service_for(&self, namespace: &str, name: &str, cause: Cause) {
        send(
            &self.services,
            ObjectRef::new(name).within(namespace),
            cause,
        );
    }

    fn view(&self, namespace: &str, name: &str) {
        self.view_for(namespace, name, Cause::Other);
    }

    fn view_for(&self, namespace: &str, name: &str, cause: Cause) {
        send(&self.views, ObjectRef::new(name).within(namespace), cause);
    }

    fn group(&self, namespace: &str, name: &str) {
        self.group_for(namespace, name, Cause::Other);
    }

    fn group_for(&self, namespace: &str, name: &str, cause: Cause) {
        send(&self.groups, ObjectRef::new(name).within(namespace), cause);
    }

    /// The groups that name `group`/`kind` `name` in `namespace`.
    fn groups_naming(&self, namespace: &str, api_group: &str, kind: &str, name: &str) {
        let key = (
            namespace.to_owned(),
            api_group.to_owned(),
            kind.to_owned(),
            name.to_owned(),
        );
        let named: Vec<String> = lock(&self.index)
            .groups_naming
            .get(&key)
            .map(|groups| groups.iter().cloned().collect())
            .unwrap_or_default();
        for group in named {
            self.group(namespace, &group);
        }
    }

    /// Replaces what a view contributes to the index.
    fn index_view(&self, old: Option<&ScaleView>, new: Option<&ScaleView>) {
        let mut index = lock(&self.index);
        for (view, add) in [(old, false), (new, true)] {
            let Some(view) = view else { continue };
            let key = (
                ResourceExt::namespace(view).unwrap_or_default(),
                view.spec.target_ref.name.clone(),
            );
            let entry = index.views_of_service.entry(key.clone()).or_default();
            if add {
                entry.insert(view.name_any());
            } else {
                entry.remove(&view.name_any());
                if entry.is_empty() {
                    index.views_of_service.remove(&key);
                }
            }
        }
    }

    /// Replaces what a group contributes to the index.
    fn index_group(&self, old: Option<&ResourceScalingGroup>, new: Option<&ResourceScalingGroup>) {
        let mut index = lock(&self.index);
        for (group, add) in [(old, false), (new, true)] {
            let Some(group) = group else { continue };
            let namespace = ResourceExt::namespace(group).unwrap_or_default();
            for target in &group.spec.target_resources {
                let Some(object) = target.object() else {
                    continue;
                };
                let key = (
                    namespace.clone(),
                    adapter::group_version(object.api_version).0.to_owned(),
                    object.kind.to_owned(),
                    object.name.to_owned(),
                );
                let entry = index.groups_naming.entry(key.clone()).or_default();
                if add {
                    entry.insert(group.name_any());
                } else {
                    entry.remove(&group.name_any());
                    if entry.is_empty() {
                        index.groups_naming.remove(&key);
                    }
                }
            }
        }
    }

    fn views_of(&self, namespace: &str, service: &str) -> Vec<String> {
        lock(&self.index)
            .views_of_service
            .get(&(namespace.to_owned(), service.to_owned()))
            .map(|views| views.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// A controller's queue of objects to reconcile, open while it runs.
pub trait Queue: Resource<DynamicType = ()> + Sized {
    fn slot(triggers: &Triggers) -> &Sender<Self>;
}

impl Queue for InferenceService {
    fn slot(triggers: &Triggers) -> &Sender<Self> {
        &triggers.services
    }
}

impl Queue for ScaleView {
    fn slot(triggers: &Triggers) -> &Sender<Self> {
        &triggers.views
    }
}

impl Queue for ResourceScalingGroup {
    fn slot(triggers: &Triggers) -> &Sender<Self> {
        &triggers.groups
    }
}

/// The caches of one process.
pub struct Caches {
    client: Client,
    pub discovery: ScaleDiscovery,
    pub services: Store<InferenceService>,
    pub views: Store<ScaleView>,
    pub groups: Store<ResourceScalingGroup>,
    /// Where the views and the groups are, by namespace.
    pub view_catalog: Arc<Catalog>,
    pub group_catalog: Arc<Catalog>,
    /// The namespaces' follow graphs, for the webhook's DAG check.
    pub follows: Arc<WatchedFollows>,
    typed: Vec<watch::Receiver<WatchState>>,
    /// Kinds read as JSON, by (apiVersion, plural, selector).
    kinds: Mutex<HashMap<WatchKey, Arc<Watched>>>,
    /// Kinds the cluster did not serve when last looked up, and why.
    unserved: Mutex<HashMap<(String, String), String>>,
    /// The kinds watched from the start, by (apiVersion, kind).
    initial: HashSet<(String, String)>,
    /// How many of them API discovery has not answered for yet.
    undiscovered: watch::Sender<usize>,
    pub triggers: Arc<Triggers>,
    /// What is installed of LWS, Volcano, the Inference Extension and
    /// Gateway API.
    pub dependencies: Arc<WatchedDependencies>,
    /// Where each cache's size is kept (`tandem_cached_objects`).
    metrics: Arc<WatchMetrics>,
    /// This replica, in admission's Events ([`Caches::record_events_as`]).
    reporter: std::sync::OnceLock<kube::runtime::events::Reporter>,
}

/// The label selection of the pods of services.
fn service_pods() -> String {
    SERVICE.to_owned()
}

/// The label selection of the pods of GroupReplication groups.
fn group_pods() -> String {
    NAME_LABEL.to_owned()
}

/// The label selection of the objects Tandem manages.
fn managed() -> String {
    format!("{MANAGED_BY}={MANAGER}")
}

/// The kinds read as JSON that are watched from the start: the workloads
/// unselected and trimmed, every other kind a service creates through the
/// managed-by label, whole. (apiVersion, kind, plural, selector, trim.)
fn watched_from_the_start() -> Vec<(String, String, String, Option<String>, Trim)> {
    let mut wanted: Vec<(String, String, String, Option<String>, Trim)> = WORKLOADS
        .iter()
        .map(|(v, k, p)| {
            (
                v.to_string(),
                k.to_string(),
                p.to_string(),
                None,
                Trim::Workload,
            )
        })
        .collect();
    for kind in &CHILD_KINDS {
        if WORKLOADS.iter().any(|(_, k, _)| *k == kind.kind) {
            continue;
        }
        wanted.push((
            kind.api_version.to_owned(),
            kind.kind.to_owned(),
            kind.plural.to_owned(),
            Some(managed()),
            Trim::Whole,
        ));
    }
    wanted
}

impl Caches {
    /// Starts every watch (in the current tokio runtime); [`Caches::ready`]
    /// says when they have listed. Kinds the cluster does not serve are
    /// looked up again every minute.
    pub fn start(client: Client, metrics: Arc<WatchMetrics>) -> Arc<Caches> {
        let triggers = Arc::new(Triggers::default());
        let (services, services_state) = {
            let triggers = triggers.clone();
            reflect_typed::<InferenceService>(&client, &metrics, move |old, new| {
                on_service(&triggers, old, new)
            })
        };
        let view_catalog = Arc::new(Catalog::default());
        let (views, views_state) = {
            let (triggers, catalog) = (triggers.clone(), view_catalog.clone());
            reflect_typed::<ScaleView>(&client, &metrics, move |old, new| {
                catalog.changed(old.map(|v| &v.metadata), new.map(|v| &v.metadata));
                on_view(&triggers, old, new)
            })
        };
        let follows = Arc::new(WatchedFollows::default());
        let group_catalog = Arc::new(Catalog::default());
        let (groups, groups_state) = {
            let (triggers, follows, catalog) =
                (triggers.clone(), follows.clone(), group_catalog.clone());
            reflect_typed::<ResourceScalingGroup>(&client, &metrics, move |old, new| {
                catalog.changed(old.map(|g| &g.metadata), new.map(|g| &g.metadata));
                follows.changed(old, new);
                on_group(&triggers, old, new)
            })
        };
        let dependencies = {
            let (triggers, services) = (triggers.clone(), services.clone());
            // Every service's plan reads what is installed.
            WatchedDependencies::start(&client, metrics.clone(), move || {
                for service in services.state() {
                    if let (Some(namespace), Some(name)) = (
                        service.metadata.namespace.as_deref(),
                        service.metadata.name.as_deref(),
                    ) {
                        triggers.service(namespace, name);
                    }
                }
            })
        };
        let wanted = watched_from_the_start();
        let initial: HashSet<(String, String)> = wanted
            .iter()
            .map(|(api_version, kind, ..)| (api_version.clone(), kind.clone()))
            .chain([("v1".to_owned(), "Pod".to_owned())])
            .collect();
        let caches = Arc::new(Caches {
            discovery: ScaleDiscovery::new(client.clone()),
            client,
            services,
            views,
            groups,
            view_catalog,
            group_catalog,
            follows,
            typed: vec![services_state, views_state, groups_state],
            kinds: Mutex::default(),
            unserved: Mutex::default(),
            initial,
            undiscovered: watch::Sender::new(wanted.len()),
            triggers,
            dependencies,
            metrics,
            reporter: std::sync::OnceLock::new(),
        });
        let pods = resource("v1", "Pod", "pods");
        caches.watch(&pods, Some(service_pods()), Trim::Pod);
        caches.watch(&pods, Some(group_pods()), Trim::Pod);
        for (api_version, kind, plural, selector, trim) in wanted {
            let caches_for_kind = caches.clone();
            tokio::spawn(async move {
                caches_for_kind
                    .watch_when_served(&api_version, &kind, &plural, selector, trim)
                    .await;
            });
        }
        caches
    }

    /// Looks the kind up in API discovery (built-in kinds are always
    /// served) and watches it once it is served.
    async fn watch_when_served(
        self: Arc<Self>,
        api_version: &str,
        kind: &str,
        plural: &str,
        selector: Option<String>,
        trim: Trim,
    ) {
        let key = (api_version.to_owned(), kind.to_owned());
        // Kinds of one group/version share a discovery request: while it is
        // in flight the others are told it "has not answered yet", so a
        // failure is tried again soon a few times before it counts.
        let mut tries: u32 = 0;
        loop {
            let served = if adapter::builtin_has_scale(api_version, kind).is_some() {
                Ok(Some(()))
            } else {
                self.discovery
                    .resolve(api_version, kind)
                    .await
                    .map(|found| found.map(drop))
            };
            tries = tries.saturating_add(1);
            let wait = match served {
                Ok(Some(())) => {
                    lock(&self.unserved).remove(&key);
                    self.watch(&resource(api_version, kind, plural), selector, trim);
                    self.discovered(tries);
                    return;
                }
                Ok(None) => {
                    lock(&self.unserved).insert(
                        key.clone(),
                        format!("the cluster does not serve {kind} in {api_version}"),
                    );
                    UNSERVED_RETRY
                }
                Err(_) if tries < DISCOVERY_TRIES => DISCOVERY_RETRY,
                Err(reason) => {
                    lock(&self.unserved).insert(key.clone(), reason);
                    UNSERVED_RETRY
                }
            };
            if wait == UNSERVED_RETRY {
                self.discovered(tries);
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Counts a kind watched from the start as answered for, the first time.
    fn discovered(&self, tries: u32) {
        if tries <= DISCOVERY_TRIES {
            self.undiscovered.send_if_modified(|n| {
                let changed = *n > 0;
                *n = n.saturating_sub(1);
                changed
            });
        }
    }

    /// The watch of `resource` with `selector`, started if it was not.
    fn watch(&self, resource: &ApiResource, selector: Option<String>, trim: Trim) -> Arc<Watched> {
        let key = (
            resource.api_version.clone(),
            resource.plural.clone(),
            selector.clone(),
        );
        let mut kinds = lock(&self.kinds);
        if let Some(watched) = kinds.get(&key) {
            return watched.clone();
        }
        let triggers = self.triggers.clone();
        let kind = resource.kind.clone();
        let group = resource.group.clone();
        let catalog = Arc::new(Catalog::default());
        let filed = catalog.clone();
        let (store, state) = reflect_dynamic(
            &self.client,
            &self.metrics,
            resource,
            selector.clone(),
            trim,
            move |old, new| {
                let (old_meta, new_meta) = (old.map(Cached::metadata), new.map(Cached::metadata));
                filed.changed(old_meta.as_ref(), new_meta.as_ref());
                on_object(&triggers, &group, &kind, old, new)
            },
        );
        let watched = Arc::new(Watched {
            resource: resource.clone(),
            selector,
            store,
            catalog,
            state,
        });
        kinds.insert(key, watched.clone());
        watched
    }

    /// Waits until API discovery has answered for every kind watched from
    /// the start, and every cache started so far has listed or been refused.
    pub async fn ready(&self) {
        // An Err means the sender is gone with the caches: nothing to wait for.
        let _ = self.undiscovered.subscribe().wait_for(|n| *n == 0).await;
        self.dependencies.answered().await;
        let mut states: Vec<watch::Receiver<WatchState>> = self.typed.clone();
        states.extend(lock(&self.kinds).values().map(|w| w.state.clone()));
        for mut state in states {
            // An Err means the reflector task ended (shutdown): nothing to wait for.
            let _ = state.wait_for(|s| *s != WatchState::Listing).await;
        }
    }

    /// Where the caches' sizes and the installed dependencies are gauged.
    pub fn metrics(&self) -> &WatchMetrics {
        &self.metrics
    }

    /// The client the caches watch with, for a read the caches cannot
    /// answer yet (admission confirming a miss).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Who admission's Events say recorded them: this replica
    /// ([`Caches::record_events_as`]), else controller `tandem` alone.
    pub fn reporter(&self) -> kube::runtime::events::Reporter {
        self.reporter
            .get()
            .cloned()
            .unwrap_or_else(|| kube::runtime::events::Reporter::from(FIELD_MANAGER))
    }

    /// Names this replica in the Events admission records (`tandem serve`
    /// sets it once, as [`super::reporter`] of its identity; a second call
    /// changes nothing).
    pub fn record_events_as(&self, reporter: kube::runtime::events::Reporter) {
        let _ = self.reporter.set(reporter);
    }

    /// Whether the InferenceServices have been listed (admission must not
    /// read an empty cache as "not found").
    pub fn services_listed(&self) -> bool {
        self.typed_listed(0)
    }

    /// Whether the ScaleViews have been listed.
    pub fn views_listed(&self) -> bool {
        self.typed_listed(1)
    }

    /// Whether the ResourceScalingGroups have been listed.
    pub fn groups_listed(&self) -> bool {
        self.typed_listed(2)
    }

    /// Whether the typed watch `index` (services, views, groups, as
    /// [`Caches::start`] orders them) has listed.
    fn typed_listed(&self, index: usize) -> bool {
        self.typed
            .get(index)
            .is_some_and(|state| *state.borrow() == WatchState::Listed)
    }

    /// Every JSON cache, for metrics and tests.
    pub fn watched(&self) -> Vec<Arc<Watched>> {
        let mut all: Vec<Arc<Watched>> = lock(&self.kinds).values().cloned().collect();
        all.sort_by(|a, b| {
            (&a.resource.api_version, &a.resource.plural, &a.selector).cmp(&(
                &b.resource.api_version,
                &b.resource.plural,
                &b.selector,
            ))
        });
        all
    }

    /// The cache that holds the objects of `resource` with every label of
    /// `labels`: the kind's unselected watch, else one whose selector
    /// `labels` implies. A kind watched in neither way is watched from now
    /// on, unselected and trimmed as a workload; None until it has listed.
    pub fn cache_for(
        &self,
        resource: &ApiResource,
        labels: &[(&str, &str)],
    ) -> Result<Option<Arc<Watched>>, Unserved> {
        if let Some(reason) =
            lock(&self.unserved).get(&(resource.api_version.clone(), resource.kind.clone()))
        {
            return Err(Unserved {
                kind: resource.kind.clone(),
                reason: reason.clone(),
            });
        }
        let found = {
            let kinds = lock(&self.kinds);
            let selected = |selector: &Option<String>| match selector.as_deref() {
                None => true,
                Some(selector) => labels
                    .iter()
                    .any(|(key, value)| selector == *key || selector == format!("{key}={value}")),
            };
            kinds
                .values()
                .filter(|w| {
                    w.resource.api_version == resource.api_version
                        && w.resource.plural == resource.plural
                        && selected(&w.selector)
                })
                .min_by_key(|w| w.selector.is_some())
                .cloned()
        };
        let watched = match found {
            Some(watched) => watched,
            // Watched from the start once discovery answers.
            None if self
                .initial
                .contains(&(resource.api_version.clone(), resource.kind.clone())) =>
            {
                return Ok(None);
            }
            None => self.watch(resource, None, Trim::Workload),
        };
        match watched.state() {
            WatchState::Listed => Ok(Some(watched)),
            WatchState::Listing => Ok(None),
            WatchState::Refused(reason) => Err(Unserved {
                kind: resource.kind.clone(),
                reason,
            }),
        }
    }

    /// The objects of a typed cache in `namespace`, sorted by name, found
    /// through its catalog.
    pub fn in_namespace<K>(store: &Store<K>, catalog: &Catalog, namespace: &str) -> Vec<Arc<K>>
    where
        K: kube::runtime::reflector::Lookup<DynamicType = ()> + Clone,
    {
        catalog
            .in_namespace(namespace)
            .into_iter()
            .filter_map(|name| store.get(&ObjectRef::new(&name).within(namespace)))
            .collect()
    }

    /// The objects of a cache in `namespace` its catalog files under
    /// `labels`' filing label, sorted by name (the catalog's names are); the
    /// other labels are for the caller to check.
    fn candidates<'w>(
        watched: &'w Watched,
        namespace: &'w str,
        labels: &[(&str, &str)],
    ) -> impl Iterator<Item = Arc<Cached>> + 'w {
        watched
            .catalog
            .candidates(namespace, labels)
            .into_iter()
            .filter_map(move |name| {
                watched
                    .store
                    .get(&ObjectRef::new_with(&name, watched.resource.clone()).within(namespace))
            })
    }

    /// The objects of a cache in `namespace` with every label of `labels`,
    /// as JSON with their apiVersion and kind, sorted by name; those `kept`
    /// holds at their cached version are handed back instead of parsed
    /// again ([`super::parsed`]).
    pub fn objects_reusing(
        watched: &Watched,
        namespace: &str,
        labels: &[(&str, &str)],
        kept: &mut Parsed,
    ) -> Vec<Value> {
        read(
            Caches::candidates(watched, namespace, labels),
            &watched.resource,
            labels,
            kept,
        )
    }

    /// The pods of a pod cache in `namespace` with every label of `labels`,
    /// as the plans read them, sorted by name.
    pub fn pods(watched: &Watched, namespace: &str, labels: &[(&str, &str)]) -> Vec<Pod> {
        Caches::candidates(watched, namespace, labels)
            .filter(|o| {
                labels
                    .iter()
                    .all(|(key, value)| o.labels().get(*key).map(String::as_str) == Some(*value))
            })
            .filter_map(|o| o.as_pod().cloned())
            .collect()
    }

    /// Opens the queue of controller `K`: every event that concerns one of
    /// its objects is sent to it from now on, and every object cached now
    /// is sent first (a controller that starts late, on taking the Lease,
    /// looks at everything once).
    pub fn queue<K>(&self, store: &Store<K>) -> UnboundedReceiver<Trigger<K>>
    where
        K: Queue + Clone + 'static,
    {
        let (sender, receiver) = unbounded();
        *lock(K::slot(&self.triggers)) = Some(sender.clone());
        for object in store.state() {
            // The receiver is held right here, so the send cannot fail.
            let _ = sender.unbounded_send((ObjectRef::from_obj(object.as_ref()), Cause::Other));
        }
        receiver
    }

    /// Closes the queue of controller `K`.
    pub fn close<K: Queue>(&self) {
        *lock(K::slot(&self.triggers)) = None;
    }
}

/// Drops what no plan reads from any object's metadata.
fn trim_metadata(meta: &mut kube::api::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(cached::LAST_APPLIED);
    }
}

/// Whether Tandem manages or replicates a workload, so its whole object
/// matters.
fn tandem_workload(object: &DynamicObject) -> bool {
    let labels = object.labels();
    labels.get(MANAGED_BY).map(String::as_str) == Some(MANAGER) || labels.contains_key(NAME_LABEL)
}

/// Keeps of a workload Tandem does not manage its metadata and replica
/// counts, and marks it [`PARTIAL`].
fn trim_workload(object: &mut DynamicObject) {
    if tandem_workload(object) {
        return;
    }
    let data = &object.data;
    let mut kept = json!({});
    if let Some(replicas) = data.pointer("/spec/replicas") {
        kept["spec"]["replicas"] = replicas.clone();
    }
    if let Some(roles) = data.pointer("/spec/roles").and_then(Value::as_array) {
        kept["spec"]["roles"] = Value::Array(
            roles
                .iter()
                .map(|r| json!({"name": r["name"], "replicas": r["replicas"]}))
                .collect(),
        );
    }
    for field in ["replicas", "readyReplicas"] {
        if let Some(value) = data["status"].get(field) {
            kept["status"][field] = value.clone();
        }
    }
    object.data = kept;
    object
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(PARTIAL.to_owned(), "true".to_owned());
}

/// Whether `new` differs from `old` in anything but its resourceVersion (and
/// `status`, when `with_status` is false).
pub fn changed<K: Serialize>(old: Option<&K>, new: Option<&K>, with_status: bool) -> bool {
    let seen = |object: &K| {
        let mut value = serde_json::to_value(object).unwrap_or_default();
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        if !with_status && let Some(map) = value.as_object_mut() {
            map.remove("status");
        }
        value
    };
    match (old, new) {
        (Some(old), Some(new)) => seen(old) != seen(new),
        _ => true,
    }
}

/// Why an object's own watch event queues it: [`Cause::OwnSpec`] when it is
/// new or its generation moved (its spec changed), else [`Cause::Other`]
/// (its metadata, or the locks in its status; a deletion has nothing left
/// to put ahead).
fn own_cause<K: Resource>(old: Option<&K>, new: Option<&K>) -> Cause {
    match (old, new) {
        (None, Some(_)) => Cause::OwnSpec,
        (Some(old), Some(new)) if old.meta().generation != new.meta().generation => Cause::OwnSpec,
        _ => Cause::Other,
    }
}

fn on_service(triggers: &Triggers, old: Option<&InferenceService>, new: Option<&InferenceService>) {
    let Some(object) = new.or(old) else { return };
    let (namespace, name) = (
        ResourceExt::namespace(object).unwrap_or_default(),
        object.name_any(),
    );
    // Its status too: the plan reads it (a lost replica's episode, the
    // locks the ScaleView controller writes), and the reconcile decides
    // whether to write by comparing with it. A reconcile that starts before
    // the cache holds the status its predecessor wrote plans from the older
    // one and may find nothing to write; the written status, once it
    // arrives, is looked at again, else it stays as written until something
    // else changes (issue 37's typo scenario saw a touch write it).
    if changed(old, new, true) {
        triggers.service_for(&namespace, &name, own_cause(old, new));
        for view in triggers.views_of(&namespace, &name) {
            triggers.view(&namespace, &view);
        }
        triggers.groups_naming(&namespace, "fusioninfer.io", "InferenceService", &name);
    }
}

fn on_view(triggers: &Triggers, old: Option<&ScaleView>, new: Option<&ScaleView>) {
    let Some(object) = new.or(old) else { return };
    let (namespace, name) = (
        ResourceExt::namespace(object).unwrap_or_default(),
        object.name_any(),
    );
    triggers.index_view(old, new);
    // With its status, as a service's (see [`on_service`]): a reconcile that
    // compared with a status older than the one written is followed by one
    // that sees it.
    if changed(old, new, true) {
        triggers.view_for(&namespace, &name, own_cause(old, new));
        // A view that goes, or moves to another target, may leave a lock.
        for view in [old, new].into_iter().flatten() {
            triggers.service(&namespace, &view.spec.target_ref.name);
        }
        triggers.groups_naming(&namespace, "fusioninfer.io", "ScaleView", &name);
    }
}

fn on_group(
    triggers: &Triggers,
    old: Option<&ResourceScalingGroup>,
    new: Option<&ResourceScalingGroup>,
) {
    let Some(object) = new.or(old) else { return };
    triggers.index_group(old, new);
    let namespace = ResourceExt::namespace(object).unwrap_or_default();
    if changed(old, new, false) {
        triggers.group_for(&namespace, &object.name_any(), own_cause(old, new));
    }
    // A band moved, came or went (`status.bands`, or the spec that makes
    // them): the views the group names apply it.
    let (old_bands, new_bands) = [old, new]
        .map(|group| group.map(|g| (&g.spec, g.status.as_ref().map(|s| &s.bands))))
        .into();
    if old_bands != new_bands {
        let views: BTreeSet<&str> = [old, new]
            .into_iter()
            .flatten()
            .flat_map(|g| &g.spec.target_resources)
            .filter_map(TargetResource::object)
            .filter(|o| o.kind == "ScaleView")
            .map(|o| o.name)
            .collect();
        for view in views {
            triggers.view(&namespace, view);
        }
    }
}

fn on_object(
    triggers: &Triggers,
    api_group: &str,
    kind: &str,
    old: Option<&Cached>,
    new: Option<&Cached>,
) {
    if let (Some(old), Some(new)) = (old, new)
        && old.same_but_version(new)
    {
        return;
    }
    let Some(object) = new.or(old) else { return };
    let namespace = ResourceExt::namespace(object).unwrap_or_default();
    let labels = object.labels();
    if let Some(service) = labels.get(SERVICE)
        && kind == "Pod"
    {
        triggers.service(&namespace, service);
    }
    for owner in object.owner_references() {
        if owner.kind == "InferenceService" && owner.api_version.starts_with("fusioninfer.io/") {
            triggers.service(&namespace, &owner.name);
        }
    }
    if let Some(group) = labels.get(NAME_LABEL) {
        triggers.group(&namespace, group);
    }
    triggers.groups_naming(&namespace, api_group, kind, &object.name_any());
}

/// Starts a reflector of a typed kind, watched whole.
fn reflect_typed<K>(
    client: &Client,
    metrics: &Arc<WatchMetrics>,
    on_change: impl Fn(Option<&K>, Option<&K>) + Send + 'static,
) -> (Store<K>, watch::Receiver<WatchState>)
where
    K: Resource<DynamicType = ()>
        + kube::runtime::reflector::Lookup<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let writer = Writer::<K>::new(());
    let store = writer.as_reader();
    let backoff = WatchBackoff::default();
    let stream = watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .backoff(backoff.clone())
        .boxed();
    let state = run_reflector(
        (stream, backoff),
        writer,
        |object: &mut K| trim_metadata(object.meta_mut()),
        on_change,
        (),
        <K as Resource>::kind(&()).into_owned(),
        metrics.clone(),
    );
    (store, state)
}

/// Starts a reflector of a kind read as JSON, each object trimmed and kept
/// in its cached form as it arrives.
fn reflect_dynamic(
    client: &Client,
    metrics: &Arc<WatchMetrics>,
    resource: &ApiResource,
    selector: Option<String>,
    trim: Trim,
    on_change: impl Fn(Option<&Cached>, Option<&Cached>) + Send + 'static,
) -> (Store<Cached>, watch::Receiver<WatchState>) {
    let writer = Writer::<Cached>::new(resource.clone());
    let store = writer.as_reader();
    let mut config = watcher::Config::default();
    if let Some(selector) = &selector {
        config = config.labels(selector);
    }
    // Read without managedFields and kubectl's last-applied annotation
    // already (`Cached`'s `Deserialize`).
    let keep = move |object: Cached| match trim {
        Trim::Whole => object,
        Trim::Workload => {
            let mut object = object.into_dynamic();
            trim_workload(&mut object);
            Cached::new(object)
        }
        Trim::Pod => object.pod(),
    };
    let backoff = WatchBackoff::default();
    let stream = watcher(Api::<Cached>::all_with(client.clone(), resource), config)
        .backoff(backoff.clone())
        .map(move |event| event.map(|event| cached::event(event, keep)))
        .boxed();
    // Pods are cached in two selections: the gauge tells them apart.
    let label = match &selector {
        Some(selector) => format!("{} {selector}", resource.kind),
        None => resource.kind.clone(),
    };
    let state = run_reflector(
        (stream, backoff),
        writer,
        |_: &mut Cached| {},
        on_change,
        resource.clone(),
        label,
        metrics.clone(),
    );
    (store, state)
}

/// Drives a watch into a store: trims each object, keeps the store, and
/// calls `on_change(old, new)` for every object added (old None), changed
/// or deleted (new None), re-lists included. A failure is reported to the
/// cluster's health (one log line per attempt); a list done resets the
/// watch's backoff.
fn run_reflector<K>(
    (mut stream, backoff): (
        futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
        WatchBackoff,
    ),
    mut writer: Writer<K>,
    trim: impl Fn(&mut K) + Send + 'static,
    on_change: impl Fn(Option<&K>, Option<&K>) + Send + 'static,
    dyntype: <K as kube::runtime::reflector::Lookup>::DynamicType,
    kind: String,
    metrics: Arc<WatchMetrics>,
) -> watch::Receiver<WatchState>
where
    K: kube::runtime::reflector::Lookup + Clone + Send + Sync + 'static,
    <K as kube::runtime::reflector::Lookup>::DynamicType:
        Clone + Eq + std::hash::Hash + Send + Sync,
{
    let (state, receiver) = watch::channel(WatchState::Listing);
    let reader = writer.as_reader();
    tokio::spawn(async move {
        let mut relisted: HashSet<ObjectRef<K>> = HashSet::new();
        // Since the last failure, nothing but the watcher's Init came.
        let mut failing = false;
        while let Some(event) = stream.next().await {
            let event = match event {
                // An object, or a list's end, is the cluster answering: the
                // next failure waits the first wait again. (Init is not: the
                // watcher sends it before every list, failing or not.)
                Ok(event) if failing && !matches!(event, watcher::Event::Init) => {
                    failing = false;
                    backoff.listed();
                    metrics.cluster.listed();
                    event.modify(&trim)
                }
                Ok(event) => event.modify(&trim),
                Err(error) => {
                    failing = true;
                    let refused = match &error {
                        watcher::Error::InitialListFailed(kube::Error::Api(status))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
                            if matches!(status.code, 403 | 404) =>
                        {
                            Some(format!("{} ({})", status.message, status.code))
                        }
                        _ => None,
                    };
                    tracing::debug!(%error, kind, "cache watch failed; retrying");
                    metrics.cluster.failed(&kind, &error.to_string());
                    if let Some(reason) = refused {
                        state.send_if_modified(|s| {
                            let first = *s == WatchState::Listing;
                            if first {
                                *s = WatchState::Refused(reason);
                            }
                            first
                        });
                    }
                    continue;
                }
            };
            let key = |object: &K| object.to_object_ref(dyntype.clone());
            match &event {
                watcher::Event::Init => {
                    relisted.clear();
                    writer.apply_watcher_event(&event);
                }
                watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                    if matches!(event, watcher::Event::InitApply(_)) {
                        relisted.insert(key(object));
                    }
                    let old = reader.get(&key(object));
                    writer.apply_watcher_event(&event);
                    on_change(old.as_deref(), Some(object));
                }
                watcher::Event::Delete(object) => {
                    let old = reader.get(&key(object));
                    writer.apply_watcher_event(&event);
                    on_change(Some(old.as_deref().unwrap_or(object)), None);
                }
                watcher::Event::InitDone => {
                    let gone: Vec<Arc<K>> = reader
                        .state()
                        .into_iter()
                        .filter(|o| !relisted.contains(&key(o)))
                        .collect();
                    writer.apply_watcher_event(&event);
                    for object in gone {
                        on_change(Some(&object), None);
                    }
                    relisted.clear();
                    state.send_if_modified(|s| {
                        let first = *s != WatchState::Listed;
                        *s = WatchState::Listed;
                        first
                    });
                }
            }
            metrics.cached(&kind, reader.len());
        }
    });
    receiver
}

/// `candidates` as JSON with their apiVersion and kind, those with every
/// label of `labels`: each taken from `kept` when it holds the object at its
/// cached version, else parsed from the cache.
fn read(
    candidates: impl Iterator<Item = Arc<Cached>>,
    resource: &ApiResource,
    labels: &[(&str, &str)],
    kept: &mut Parsed,
) -> Vec<Value> {
    candidates
        .map(|o| {
            o.name()
                .zip(o.version())
                .and_then(|(name, version)| kept.take(resource, name, version))
                .unwrap_or_else(|| o.to_json(resource))
        })
        // Checked on the JSON it reads anyway: the labels' text is
        // parsed once per object read, not twice.
        .filter(|o| {
            labels
                .iter()
                .all(|(key, value)| o["metadata"]["labels"][*key] == *value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wide owner's kept children come back as kept when the cache holds
    /// them at the same version, and are read from the cache when it holds
    /// a newer one; the labels still filter both.
    #[test]
    fn a_kept_child_at_its_cached_version_is_handed_back_not_parsed_again() {
        let lws = |name: &str, version: &str, service: &str| {
            json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": {"name": name, "resourceVersion": version,
                    "labels": {"fusioninfer.io/service": service}},
                "spec": {"replicas": 1}})
        };
        let marked = |mut object: Value| {
            object["kept"] = json!(true);
            object
        };
        let mut children: Vec<Value> = (0..super::super::parsed::WIDE)
            .map(|i| lws(&format!("other-{i}"), "1", "svc"))
            .collect();
        children.extend([
            marked(lws("a", "1", "svc")),
            marked(lws("b", "1", "svc")),
            marked(lws("c", "1", "svc")),
        ]);
        let mut kept = Parsed::keep(children).expect("wide");
        let cached: Vec<Arc<Cached>> = [
            lws("a", "1", "svc"),
            lws("b", "2", "svc"),
            lws("c", "2", "x"),
        ]
        .into_iter()
        .map(|o| Arc::new(serde_json::from_value::<Cached>(o).expect("an object")))
        .collect();
        let lws_resource = resource(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "leaderworkersets",
        );
        let read = read(
            cached.into_iter(),
            &lws_resource,
            &[("fusioninfer.io/service", "svc")],
            &mut kept,
        );
        assert_eq!(read, [marked(lws("a", "1", "svc")), lws("b", "2", "svc")]);
    }

    #[test]
    fn a_cached_pod_keeps_its_facts_and_the_metadata_it_is_filed_by() {
        let whole = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "svc-decode-0-1", "namespace": "ns", "uid": "u", "resourceVersion": "9",
                "generateName": "svc-decode-0-", "creationTimestamp": "2026-12-03T10:00:00Z",
                "deletionTimestamp": "2026-12-03T11:00:00Z",
                "labels": {
                    "fusioninfer.io/service": "svc", "fusioninfer.io/role": "decode",
                    "leaderworkerset.sigs.k8s.io/worker-index": "1",
                    "resourcescalinggroup.com/group": "01",
                    "controller-revision-hash": "svc-decode-0-5d9", "team": "ml",
                    "statefulset.kubernetes.io/pod-name": "svc-decode-0-1",
                },
                "annotations": {
                    "fusioninfer.io/drain-started-at": "2026-12-03T10:59:00Z",
                    "controller.kubernetes.io/pod-deletion-cost": "10",
                    "leaderworkerset.sigs.k8s.io/size": "4",
                    "volcano.sh/task-spec": "decode-0",
                    "kubectl.kubernetes.io/restartedAt": "x",
                },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "svc-decode-0", "uid": "s"}],
            },
            "spec": {"nodeName": "n1", "schedulingGroup": {"podGroupName": "g"},
                "containers": [{"name": "vllm", "image": "v"}]},
            "status": {
                "phase": "Failed", "reason": "Evicted", "hostIP": "10.0.0.1",
                "conditions": [{"type": "PodScheduled", "status": "False",
                    "reason": "Unschedulable", "message": "0/4 nodes",
                    "lastProbeTime": null, "lastTransitionTime": "2026-12-03T10:00:00Z"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                    "lastProbeTime": null, "lastTransitionTime": "2026-12-03T10:00:01Z"}],
                "containerStatuses": [{"name": "vllm", "ready": false, "restartCount": 3,
                    "image": "v", "imageID": "sha", "containerID": "c", "started": false,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                        "startedAt": "t", "finishedAt": "t"}}}],
                "initContainerStatuses": [{"name": "init", "ready": true, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0}}}],
            },
        });
        let cached = as_watched(&whole);
        assert_eq!(cached.as_pod(), Some(&Pod::from_json(&whole)));
        assert_eq!(
            cached.metadata(),
            serde_json::from_value(json!({"name": "svc-decode-0-1", "namespace": "ns",
                "resourceVersion": "9", "deletionTimestamp": "2026-12-03T11:00:00Z",
                "labels": {"fusioninfer.io/service": "svc"}}))
            .expect("metadata"),
            "what the store keys on and the catalog files by, nothing else"
        );
        assert_eq!((cached.body_len(), cached.annotations().len()), (0, 0));
        let mut ready = whole.clone();
        ready["metadata"]["resourceVersion"] = json!("10");
        assert!(
            cached.same_but_version(&as_watched(&ready)),
            "a new version alone"
        );
        ready["status"]["conditions"][1]["status"] = json!("True");
        assert!(!cached.same_but_version(&as_watched(&ready)), "now Ready");
    }

    /// `pod` as its watch delivers it into the cache.
    fn as_watched(pod: &Value) -> Cached {
        serde_json::from_value::<Cached>(pod.clone())
            .expect("a pod")
            .pod()
    }

    /// A pod of replica 0 of a two-pod decode role as the API server shows
    /// it: created at `created`, its container restarted `restarts` times,
    /// Ready since `ready` if given (seconds after an epoch).
    fn whole_pod(uid: &str, created: i64, restarts: i64, ready: Option<i64>) -> Value {
        let at = |s: i64| {
            jiff::Timestamp::from_second(1_800_000_000 + s)
                .unwrap()
                .to_string()
        };
        let conditions = match ready {
            Some(since) => json!([{"type": "Ready", "status": "True", "lastProbeTime": null,
                "lastTransitionTime": at(since)}]),
            None => json!([{"type": "Ready", "status": "False", "lastProbeTime": null,
                "lastTransitionTime": at(created)}]),
        };
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("svc-decode-0-{uid}"), "namespace": "ns", "uid": uid,
                "creationTimestamp": at(created), "generateName": "svc-decode-0-",
                "labels": {"fusioninfer.io/role": "decode"}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": conditions,
                "containerStatuses": [{"name": "vllm", "ready": ready.is_some(),
                    "restartCount": restarts,
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]},
        })
    }

    fn cached(pod: &Value) -> Pod {
        as_watched(pod).as_pod().cloned().expect("a pod's facts")
    }

    /// The recovery reads two times of a pod: its creation (a pod created
    /// before a restart was counted is not counted again) and since when it
    /// is Ready (a replica's restarts are forgotten once it has been ready
    /// for the longest back-off). A pod as the caches keep it decides as the
    /// whole pod does.
    #[test]
    fn a_cached_pod_decides_a_recovery_as_the_whole_pod_does() {
        use crate::plan::inference_service::recovery::{self, Replica, Settings};
        let at = |s: i64| jiff::Timestamp::from_second(1_800_000_000 + s).unwrap();
        let settings = Settings {
            backoff_seconds: 3,
            max_backoff_seconds: 6,
            max_restarts: Some(2),
        };
        let replica = Replica {
            role: "decode",
            index: 0,
            nodes: 2,
            revision: "r1",
        };
        let decide = |observed: Option<&Value>, pods: &[Pod], now: i64| {
            let pods: Vec<&Pod> = pods.iter().collect();
            recovery::decide(Some(&settings), &replica, observed, &pods, at(now))
        };
        let both = |observed: Option<&Value>, pods: &[Value], now: i64| {
            let whole: Vec<Pod> = pods.iter().map(Pod::from_json).collect();
            let kept: Vec<Pod> = pods.iter().map(cached).collect();
            (decide(observed, &whole, now), decide(observed, &kept, now))
        };
        // The first restart, counted at 5 s: held until 8 s.
        let first = decide(
            None,
            &[
                Pod::from_json(&whole_pod("a", 0, 1, None)),
                Pod::from_json(&whole_pod("b", 0, 0, None)),
            ],
            5,
        );
        let record = serde_json::to_string(first.record.as_ref().expect("counted")).unwrap();
        let lws = json!({"metadata": {"annotations": {recovery::RECORD: record}}});

        // A new group, Ready since 20 s: at 22 s the record stays, to be
        // forgotten at 26 s (ready for 6 s).
        let group = [
            whole_pod("c", 9, 0, Some(20)),
            whole_pod("d", 9, 0, Some(19)),
        ];
        let (whole, cached) = both(Some(&lws), &group, 22);
        assert_eq!(whole.wake, Some(at(26)), "{whole:?}");
        assert!(whole.record.is_some());
        assert_eq!(cached, whole, "ready since, as cached");

        // A pod created before the count (3 s), not among the pods the
        // count saw, shows a restart: it was counted already.
        let group = [
            whole_pod("e", 3, 1, Some(20)),
            whole_pod("d", 9, 0, Some(19)),
        ];
        let (whole, cached) = both(Some(&lws), &group, 22);
        assert_eq!(whole.event, None, "{whole:?}");
        assert_eq!(cached, whole, "created, as cached");
    }

    fn service(resource_version: &str, status: Value) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns", "generation": 1,
                "resourceVersion": resource_version},
            "spec": {"roles": []},
            "status": status,
        }))
        .expect("a service")
    }

    fn view(resource_version: &str, status: Value) -> ScaleView {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "sv", "namespace": "ns", "generation": 1,
                "resourceVersion": resource_version},
            "spec": {"targetRef": {"name": "svc", "componentType": "decoder"},
                "scalePolicy": [{"group": "decode", "priority": 0}]},
            "status": status,
        }))
        .expect("a view")
    }

    fn queued<K: Resource>(receiver: &mut UnboundedReceiver<Trigger<K>>) -> Vec<(String, Cause)>
    where
        K::DynamicType: Debug + Eq + std::hash::Hash + Clone,
    {
        std::iter::from_fn(|| receiver.try_recv().ok())
            .map(|(object, cause)| (object.name, cause))
            .collect()
    }

    /// A reconcile that read the status before its predecessor's write
    /// arrived compares with the older one and may write nothing: the
    /// written status arriving must queue the service again (the typo
    /// scenario of tests/cluster/batching.rs saw a later touch write it).
    #[test]
    fn a_status_that_arrives_queues_its_service_and_a_new_version_alone_does_not() {
        let triggers = Triggers::default();
        let (sender, mut receiver) = unbounded();
        *lock(&triggers.services) = Some(sender);
        let before = service("1", json!({"observedGeneration": 1, "ready": "0/1"}));
        let written = service("2", json!({"observedGeneration": 1, "ready": "1/1"}));
        on_service(&triggers, Some(&before), Some(&written));
        assert_eq!(queued(&mut receiver), [("svc".to_owned(), Cause::Other)]);
        let resynced = service("3", json!({"observedGeneration": 1, "ready": "1/1"}));
        on_service(&triggers, Some(&written), Some(&resynced));
        assert_eq!(queued(&mut receiver), []);
    }

    #[test]
    fn a_status_that_arrives_queues_its_view_and_a_new_version_alone_does_not() {
        let triggers = Triggers::default();
        let (sender, mut receiver) = unbounded();
        *lock(&triggers.views) = Some(sender);
        let before = view("1", json!({"replicas": 1}));
        let written = view("2", json!({"replicas": 2}));
        on_view(&triggers, Some(&before), Some(&written));
        assert_eq!(queued(&mut receiver), [("sv".to_owned(), Cause::Other)]);
        let resynced = view("3", json!({"replicas": 2}));
        on_view(&triggers, Some(&written), Some(&resynced));
        assert_eq!(queued(&mut receiver), []);
    }
}
