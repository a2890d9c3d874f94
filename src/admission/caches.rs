//! The webhook's view of the cluster: kube-runtime reflector caches of
//! InferenceServices, ScaleViews and ResourceScalingGroups, kept current by
//! watches, and API discovery for kinds with a scale subresource. Readiness
//! waits until all three caches have listed once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::Lookup;
use super::discovery::ScaleDiscovery;
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::adapter;
use crate::server::controller_metrics::ControllerMetrics;

pub struct Caches {
    services: Store<InferenceService>,
    views: Store<ScaleView>,
    groups: Store<ResourceScalingGroup>,
    discovery: ScaleDiscovery,
}

fn watch<K>(client: &Client, metrics: &Arc<ControllerMetrics>) -> Store<K>
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
    .default_backoff();
    let (metrics, cached) = (metrics.clone(), reader.clone());
    tokio::spawn(async move {
        stream
            .for_each(|event| {
                metrics.cached(&K::kind(&()), cached.len());
                async move {
                    if let Err(error) = event {
                        tracing::warn!(%error, kind = %K::kind(&()), "admission cache watch failed; retrying");
                    }
                }
            })
            .await;
    });
    reader
}

impl Caches {
    /// Starts the watches; `ready` turns true once every cache has listed.
    /// Each cache's size is kept in `metrics` (`tandem_cached_objects`).
    pub fn start(
        client: &Client,
        ready: Arc<AtomicBool>,
        metrics: Arc<ControllerMetrics>,
    ) -> Caches {
        let caches = Caches {
            services: watch(client, &metrics),
            views: watch(client, &metrics),
            groups: watch(client, &metrics),
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

    fn resource_scaling_groups(&self, namespace: &str) -> Option<Vec<ResourceScalingGroup>> {
        let mut groups = in_namespace(&self.groups, namespace);
        groups.sort_by_key(|g| g.name_any());
        Some(groups)
    }

    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        adapter::builtin_has_scale(api_version, kind).or_else(|| {
            self.discovery
                .cached(api_version, kind)
                .map(|found| found.is_some_and(|d| d.has_scale))
        })
    }
}
