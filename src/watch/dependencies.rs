//! What the cluster has installed of the projects Tandem writes objects of,
//! kept from watching their CustomResourceDefinitions: one watch per CRD,
//! by name (`metadata.name={plural}.{group}`), so that Tandem reads only
//! those (RBAC: get, list and watch on them by name) and an install, an
//! upgrade or a removal while it runs is seen at once. A change
//! re-reconciles every InferenceService (their plans read it) and sets the
//! gauge `tandem_dependency_info`.
//!
//! Until every watch has listed, or when one cannot (the ClusterRole of an
//! older install does not grant CRDs), nothing is known: [`Installed::Assumed`],
//! as before Tandem read them, and a warning says so.
//!
//! Kubernetes' own PodGroups are a built-in API, not a CRD: whether they
//! are served, and which gated fields the API server keeps, is asked by
//! API discovery and a dry-run PodGroup ([`crate::plan::shared::native_gang`])
//! at start and every [`NATIVE_EVERY`] after (an API server's flags change
//! only when it restarts). A change re-reconciles like a CRD's. A probe that
//! fails keeps the last answer; before any, the API is taken as not served
//! and the probe is retried every [`NATIVE_RETRY`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;

use super::metrics::WatchMetrics;
use crate::plan::shared::installed::{self, Found, Installed};
use crate::plan::shared::native_gang::{self as probe, NativeGang};

/// How long after a CRD changed its dependents are re-reconciled. The API
/// server replaces its handler of a CRD whose schema changed and ends the
/// watches of its kind about a second later; a write in between is not seen
/// until the watch is back, and a reconcile then would read the cache from
/// before it and write again. Measured against the tests' real control
/// plane (tests/cluster/dependencies.rs): the PodGroup watch ended 1.0 s
/// after the CRD's patch.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// How often serve asks again what the API server serves and keeps of
/// Kubernetes' PodGroups: two requests each time.
const NATIVE_EVERY: std::time::Duration = std::time::Duration::from_secs(300);
/// How soon a failed probe is retried.
const NATIVE_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// The CRDs read, by name.
fn watched_names() -> Vec<String> {
    installed::ALL
        .iter()
        .chain([&installed::LEGACY_INFERENCE_POOL])
        .map(installed::crd_name)
        .collect()
}

#[derive(Default)]
struct State {
    /// What each watched CRD installs, by CRD name; absent when not there.
    found: BTreeMap<String, ((String, String), Found)>,
    /// Watches that have listed (or could not), by CRD name.
    answered: BTreeMap<String, bool>,
    /// The resourceVersion of each CRD seen, by name.
    versions: BTreeMap<String, String>,
    /// What the API server serves and keeps of Kubernetes' PodGroups, as
    /// last answered; None before any answer.
    native: Option<NativeGang>,
    /// Whether the first probe of Kubernetes' PodGroups has answered (or
    /// failed).
    native_answered: bool,
    /// What is installed, as [`WatchedDependencies::installed`] last made
    /// it from the fields above; cleared by any change to them. Every
    /// reconcile and admission request reads it: sharing it spares a copy
    /// of every found CRD's schemas per read.
    made: Option<Arc<Installed>>,
}

/// The installed dependencies, as the watches last saw them.
pub struct WatchedDependencies {
    state: Mutex<State>,
    /// How many watches have not answered yet.
    pending: watch::Sender<usize>,
    metrics: Arc<WatchMetrics>,
    on_change: Box<dyn Fn() + Send + Sync>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // Every change replaces one entry whole: a panic elsewhere cannot leave
    // it half-written.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WatchedDependencies {
    /// Starts the watches (in the current tokio runtime); `on_change` runs
    /// after anything installed changed.
    pub fn start(
        client: &Client,
        metrics: Arc<WatchMetrics>,
        on_change: impl Fn() + Send + Sync + 'static,
    ) -> Arc<WatchedDependencies> {
        let names = watched_names();
        let watched = Arc::new(WatchedDependencies {
            state: Mutex::default(),
            // One more for the first probe of Kubernetes' PodGroups.
            pending: watch::Sender::new(names.len().saturating_add(1)),
            metrics,
            on_change: Box::new(on_change),
        });
        for name in names {
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            let watched = watched.clone();
            tokio::spawn(async move { watched.follow(api, name).await });
        }
        let probing = watched.clone();
        let client = client.clone();
        tokio::spawn(async move { probing.probe_native_gang(client).await });
        watched
    }

    /// Asks what the API server serves and keeps of Kubernetes' PodGroups
    /// now and every [`NATIVE_EVERY`] (every [`NATIVE_RETRY`] while it
    /// cannot say), and re-reconciles when the answer changes.
    async fn probe_native_gang(self: &Arc<Self>, client: Client) {
        loop {
            let gang = native_gang(&client, crate::plan::shared::children::MANAGER).await;
            let failed = gang.unknown.is_some() && gang.kept.is_empty() && !gang.pod_groups;
            let (first, changed) = {
                let mut state = lock(&self.state);
                let first = !state.native_answered;
                state.native_answered = true;
                state.made = None;
                let changed = if failed {
                    false
                } else {
                    let changed = state.native.as_ref() != Some(&gang);
                    state.native = Some(gang.clone());
                    changed
                };
                (first, changed)
            };
            match &gang.unknown {
                // Discovery failed: the cluster is unreachable, which
                // watch::health says once per attempt already.
                Some(why) if failed => tracing::debug!(%why,
                    "cannot tell whether the API server serves Kubernetes' PodGroups"),
                Some(why) => tracing::warn!(%why,
                    "cannot tell which fields of Kubernetes' PodGroups the API server keeps"),
                None => {}
            }
            if first {
                self.pending.send_modify(|n| *n = n.saturating_sub(1));
            }
            if (changed || first) && *self.pending.borrow() == 0 {
                self.changed();
            }
            let next = if lock(&self.state).native.is_some() {
                NATIVE_EVERY
            } else {
                NATIVE_RETRY
            };
            tokio::time::sleep(next).await;
        }
    }

    /// What is installed; [`Installed::Assumed`] while a watch has not
    /// listed or cannot.
    pub fn installed(&self) -> Arc<Installed> {
        let mut state = lock(&self.state);
        if *self.pending.borrow() > 0 || state.answered.values().any(|listed| !listed) {
            return Arc::new(Installed::Assumed);
        }
        if let Some(made) = &state.made {
            return made.clone();
        }
        let installed = Installed::Known(state.found.values().cloned().collect())
            .with_native_pod_groups(state.native.as_ref().and_then(NativeGang::spec_fields));
        let made = Arc::new(installed);
        state.made = Some(made.clone());
        made
    }

    /// Waits until every watch has listed or found it cannot.
    pub async fn answered(&self) {
        // An Err means the sender is gone with self: nothing to wait for.
        let _ = self.pending.subscribe().wait_for(|n| *n == 0).await;
    }

    /// The CRDs seen, as (name, resourceVersion): what a test compares
    /// with what is stored to know the watches have caught up.
    pub fn versions(&self) -> BTreeMap<String, String> {
        lock(&self.state).versions.clone()
    }

    async fn follow(self: &Arc<Self>, api: Api<CustomResourceDefinition>, name: String) {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher(api, config).default_backoff().boxed();
        let mut seen_in_list = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => seen_in_list = false,
                Ok(watcher::Event::InitApply(crd)) => {
                    seen_in_list = true;
                    self.set(&name, Some(&crd));
                }
                Ok(watcher::Event::InitDone) => {
                    if !seen_in_list {
                        self.set(&name, None);
                    }
                    self.answer(&name, true);
                }
                Ok(watcher::Event::Apply(crd)) => self.set(&name, Some(&crd)),
                Ok(watcher::Event::Delete(_)) => self.set(&name, None),
                Err(error) => {
                    if !lock(&self.state).answered.contains_key(&name) {
                        tracing::warn!(crd = %name, %error,
                            "cannot read a dependency's CustomResourceDefinition: Tandem assumes every dependency is installed at its newest version until it can");
                        self.answer(&name, false);
                    }
                }
            }
        }
    }

    /// Records that the watch of `name` answered (`listed`, or could not).
    /// What is installed becomes known when the last watch answers, or when
    /// one that could not read its CRD (a transient error, RBAC granted
    /// late) lists it after all: then the gauge is set and the services
    /// re-reconciled.
    fn answer(self: &Arc<Self>, name: &str, listed: bool) {
        let known_before = !matches!(*self.installed(), Installed::Assumed);
        let first = {
            let mut state = lock(&self.state);
            state.made = None;
            state.answered.insert(name.to_owned(), listed).is_none()
        };
        if first {
            self.pending.send_modify(|n| *n = n.saturating_sub(1));
        }
        let known_now = !matches!(*self.installed(), Installed::Assumed);
        if known_now && !known_before {
            self.changed();
        }
    }

    /// Records what the CRD `name` installs now (None: it is gone).
    fn set(self: &Arc<Self>, name: &str, crd: Option<&CustomResourceDefinition>) {
        let found = crd
            .and_then(|crd| serde_json::to_value(crd).ok())
            .and_then(|crd| {
                // The typed CRD serialises without its kind.
                let mut crd = crd;
                crd["kind"] = "CustomResourceDefinition".into();
                Found::from_crd(&crd)
            });
        let changed = {
            let mut state = lock(&self.state);
            state.made = None;
            match crd.and_then(|crd| crd.metadata.resource_version.clone()) {
                Some(version) => state.versions.insert(name.to_owned(), version),
                None => state.versions.remove(name),
            };
            let before = state.found.get(name).cloned();
            match &found {
                Some(found) => state.found.insert(name.to_owned(), found.clone()),
                None => state.found.remove(name),
            };
            before != found
        };
        if changed && *self.pending.borrow() == 0 {
            self.changed();
        }
    }

    /// Sets the gauge and, after [`SETTLE`], re-reconciles what reads the
    /// dependencies.
    fn changed(self: &Arc<Self>) {
        let installed = self.installed();
        if matches!(*installed, Installed::Assumed) {
            return;
        }
        self.metrics.dependencies(&installed.info());
        tracing::info!(installed = ?installed.info(), "the cluster's dependencies");
        let watched = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SETTLE).await;
            (watched.on_change)();
        });
    }
}

/// Whether the cluster serves Kubernetes' PodGroups and Workloads (API
/// discovery), and which gated PodGroup fields its API server keeps: a
/// PodGroup created with `dryRun=All` and read back
/// ([`probe::probe`]). A group version that is not served answers
/// 404; any other failure to discover or to probe is said in `unknown`.
pub async fn native_gang(client: &Client, manager: &str) -> NativeGang {
    let group_version = format!("{}/{}", probe::GROUP, probe::VERSION);
    let mut gang = NativeGang::default();
    let served = match client.list_api_group_resources(&group_version).await {
        Ok(list) => list.resources,
        Err(kube::Error::Api(status)) if status.code == 404 => return gang,
        Err(e) => {
            gang.unknown = Some(format!(
                "discovering {group_version}: {}",
                crate::logging::causes(&e)
            ));
            return gang;
        }
    };
    gang.pod_groups = served.iter().any(|r| r.name == probe::POD_GROUP_PLURAL);
    gang.workloads = served.iter().any(|r| r.name == probe::WORKLOAD_PLURAL);
    if !gang.pod_groups {
        return gang;
    }
    let resource = kube::api::ApiResource {
        group: probe::GROUP.into(),
        version: probe::VERSION.into(),
        api_version: group_version,
        kind: "PodGroup".into(),
        plural: probe::POD_GROUP_PLURAL.into(),
    };
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), probe::PROBE_NAMESPACE, &resource);
    let probe: kube::api::DynamicObject = match serde_json::from_value(probe::probe()) {
        Ok(probe) => probe,
        Err(e) => {
            gang.unknown = Some(format!("the probe PodGroup: {e}"));
            return gang;
        }
    };
    let params = kube::api::PostParams {
        dry_run: true,
        field_manager: Some(manager.into()),
    };
    match api.create(&params, &probe).await {
        Ok(answer) => match serde_json::to_value(answer) {
            Ok(answer) => gang.kept = probe::kept(&answer),
            Err(e) => gang.unknown = Some(format!("reading the dry run's answer: {e}")),
        },
        Err(e) => {
            gang.unknown = Some(format!(
                "a dry-run PodGroup in namespace {}: {}",
                probe::PROBE_NAMESPACE,
                crate::logging::causes(&e)
            ));
        }
    }
    gang
}
