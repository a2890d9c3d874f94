//! The webhook's view of the cluster: kube-runtime reflector caches of
//! InferenceServices, ScaleViews and ResourceScalingGroups, kept current by
//! watches, and API discovery for kinds with a scale subresource. The
//! ResourceScalingGroup watch also feeds the namespaces' follow graphs
//! ([`WatchedFollows`]). Readiness waits until all three caches, and the
//! follow graphs, have listed once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

use super::Lookup;
use super::discovery::ScaleDiscovery;
use super::follows::WatchedFollows;
use crate::api::resource_scaling_group::ResourceScalingGroupSpec;
use crate::api::{Findings, InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::adapter;

pub struct Caches {
    services: Store<InferenceService>,
    views: Store<ScaleView>,
    groups: Store<ResourceScalingGroup>,
    follows: Arc<WatchedFollows>,
    discovery: ScaleDiscovery,
}

/// A reflector of every `K`; each event is also given to `on_event`.
fn watch<K>(client: &Client, on_event: impl Fn(&watcher::Event<K>) + Send + 'static) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .inspect_ok(on_event)
    .applied_objects();
    tokio::spawn(async move {
        stream
            .for_each(|event| async move {
                if let Err(error) = event {
                    tracing::warn!(%error, kind = %K::kind(&()), "admission cache watch failed; retrying");
                }
            })
            .await;
    });
    reader
}

impl Caches {
    /// Starts the watches; `ready` turns true once every cache has listed.
    pub fn start(client: &Client, ready: Arc<AtomicBool>) -> Caches {
        let follows = Arc::new(WatchedFollows::default());
        let fed = follows.clone();
        let caches = Caches {
            services: watch(client, |_| {}),
            views: watch(client, |_| {}),
            groups: watch(client, move |event| fed.apply(event)),
            follows: follows.clone(),
            discovery: ScaleDiscovery::new(client.clone()),
        };
        let (services, views, groups) = (
            caches.services.clone(),
            caches.views.clone(),
            caches.groups.clone(),
        );
        tokio::spawn(async move {
            let synced = services.wait_until_ready().await.is_ok()
                && views.wait_until_ready().await.is_ok()
                && groups.wait_until_ready().await.is_ok();
            if synced {
                follows.listed().await;
                ready.store(true, Ordering::SeqCst);
                tracing::info!("admission caches loaded");
            }
        });
        caches
    }
}

fn in_namespace<K: Resource<DynamicType = ()> + Clone>(
    store: &Store<K>,
    namespace: &str,
) -> Vec<K> {
    store
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
        .map(|o| (*o).clone())
        .collect()
}

impl Lookup for Caches {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>> {
        Some(
            self.services
                .get(&ObjectRef::new(name).within(namespace))
                .map(|s| (*s).clone()),
        )
    }

    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>> {
        Some(in_namespace(&self.views, namespace))
    }

    fn scale_view(&self, namespace: &str, name: &str) -> Option<Option<ScaleView>> {
        Some(
            self.views
                .get(&ObjectRef::new(name).within(namespace))
                .map(|v| (*v).clone()),
        )
    }

    fn check_follows(
        &self,
        namespace: &str,
        candidate: (&str, &ResourceScalingGroupSpec),
    ) -> Option<Findings> {
        Some(self.follows.check(namespace, candidate))
    }

    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        adapter::builtin_has_scale(api_version, kind).or_else(|| {
            self.discovery
                .cached(api_version, kind)
                .map(|found| found.is_some_and(|d| d.has_scale))
        })
    }
}
