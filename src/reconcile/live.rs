//! The cluster as the controllers see it: reads from the process's informer
//! caches ([`Caches`]), writes through kube-rs.
//!
//! The API server is read only where a cache cannot answer, each said where
//! it happens: an object the cache keeps in part (a workload Tandem neither
//! manages nor replicates, read whole as a GroupReplication template); the
//! `/scale` of a kind found through discovery (where its replicas are kept
//! is in its CustomResourceDefinition, which Tandem does not watch); and a
//! kind first read a moment ago, whose cache has not listed yet.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::FIELD_MANAGER;
use super::cluster::{Cluster, Parsed, Part, Series, Unserved, Written, resource};
use super::events::SpamFilter;
use super::repeated_writes::{RepeatedWrites, patch_hash};
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::resource_scaling_group::adapter;
use crate::plan::shared::installed::Installed;
use crate::plan::shared::pod::Pod;
use crate::watch::cached::Cached;
use crate::watch::caches::{Caches, PARTIAL};
use crate::watch::discovery::Discovered;

/// kube-rs writes and cached reads.
pub struct Live {
    pub client: Client,
    pub caches: Arc<Caches>,
    reporter: Reporter,
    recorder: Recorder,
    /// At most so many Events about one object ([`super::events`]).
    spam: SpamFilter,
    /// The last write of each own object, not sent twice while the cache
    /// lags it ([`super::repeated_writes`]).
    repeated: RepeatedWrites,
}

impl Live {
    pub fn new(client: Client, caches: Arc<Caches>, reporter: Reporter) -> Live {
        Live {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            caches,
            reporter,
            spam: SpamFilter::default(),
            repeated: RepeatedWrites::default(),
        }
    }

    /// One object from its cache; `whole` when a part kept by the cache
    /// (metadata and replica counts) will not do.
    async fn read(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        whole: bool,
    ) -> Result<Option<Value>, kube::Error> {
        if let Some(found) = self.typed(resource, namespace, name) {
            return Ok(found);
        }
        let cached = match self.caches.cache_for(resource, &[]) {
            Err(_) => return Ok(None),
            Ok(Some(watched)) => Some(
                watched
                    .store
                    .get(&ObjectRef::new_with(name, resource.clone()).within(namespace)),
            ),
            Ok(None) => None,
        };
        match cached {
            Some(None) => Ok(None),
            Some(Some(object)) if !whole || !object.annotations().contains_key(PARTIAL) => {
                Ok(Some(object.to_json(resource)))
            }
            // Kept in part and wanted whole, or not listed yet: the API
            // server has it whole.
            _ => Ok(self
                .api(resource, namespace)
                .get_opt(name)
                .await?
                .map(|o| Cached::new(o).to_json(resource))),
        }
    }

    fn api(&self, resource: &ApiResource, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, resource)
    }

    /// Tandem's own kinds come from their typed caches, as JSON; None for
    /// any other kind.
    fn typed(&self, resource: &ApiResource, namespace: &str, name: &str) -> Option<Option<Value>> {
        match (resource.group.as_str(), resource.kind.as_str()) {
            ("fusioninfer.io", "InferenceService") => Some(
                self.service(namespace, name)
                    .and_then(|s| serde_json::to_value(s.as_ref()).ok()),
            ),
            ("fusioninfer.io", "ScaleView") => Some(
                self.scale_view(namespace, name)
                    .and_then(|v| serde_json::to_value(v.as_ref()).ok()),
            ),
            _ => None,
        }
    }
}

/// How long a write of one of Tandem's own kinds waits for its cache to
/// show it ([`Live::await_cached`]), and how often it looks.
const CACHED_WITHIN: Duration = Duration::from_secs(1);
const CACHED_POLL: Duration = Duration::from_millis(10);

impl Live {
    /// The resourceVersion of one of Tandem's own objects (an
    /// InferenceService, a ScaleView, a ResourceScalingGroup) in its cache
    /// (None inside when it is not there); None for any other kind.
    fn cached_version(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
    ) -> Option<Option<String>> {
        match (resource.group.as_str(), resource.kind.as_str()) {
            ("fusioninfer.io", "InferenceService") => Some(
                self.service(namespace, name)
                    .and_then(|s| s.metadata.resource_version.clone()),
            ),
            ("fusioninfer.io", "ScaleView") => Some(
                self.scale_view(namespace, name)
                    .and_then(|v| v.metadata.resource_version.clone()),
            ),
            ("resourcescalinggroup.com", "ResourceScalingGroup") => Some(
                self.caches
                    .groups
                    .get(&ObjectRef::new(name).within(namespace))
                    .and_then(|g| g.metadata.resource_version.clone()),
            ),
            _ => None,
        }
    }

    /// After a write of an InferenceService, a ScaleView or a
    /// ResourceScalingGroup (its status, its
    /// locks, its roles), waits until the cache holds the version written,
    /// or any version other than the one it held before the write (a later
    /// write of someone else's), for at most [`CACHED_WITHIN`].
    ///
    /// The reconciles compare what they plan with the cached object and
    /// write the difference; the next reconcile of the object, which may be
    /// queued already, must not start from the version before this write:
    /// it would write the same status again (a write that changes nothing),
    /// or, finding its plan equal to that older status, write nothing and
    /// leave the status written here standing though the world moved on.
    /// The controller runs one reconcile of an object at a time, so waiting
    /// here, inside the reconcile, is enough. Past the bound the write
    /// stands and its watch event queues the object again
    /// (`caches::on_service`).
    async fn await_cached(
        &self,
        resource: &ApiResource,
        (namespace, name): (&str, &str),
        before: Option<String>,
        written: &str,
    ) {
        let shown = async {
            loop {
                let cached = self.cached_version(resource, namespace, name).flatten();
                if cached.as_deref() == Some(written) || cached != before {
                    return;
                }
                tokio::time::sleep(CACHED_POLL).await;
            }
        };
        if tokio::time::timeout(CACHED_WITHIN, shown).await.is_err() {
            tracing::debug!(
                kind = resource.kind,
                namespace,
                name,
                written,
                "the cache did not show a write within {CACHED_WITHIN:?}"
            );
        }
    }
}

/// A Scale as the API server answers `/scale` for a workload whose replicas
/// are at `.spec.replicas` (every kind of the adapter table scaled through
/// it), from its cached object.
fn scale_of(object: &Value) -> Value {
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"]},
        "spec": {"replicas": object["spec"]["replicas"]},
        "status": {"replicas": object["status"]["replicas"]},
    })
}

impl Cluster for Live {
    fn installed(&self) -> std::sync::Arc<Installed> {
        self.caches.dependencies.installed()
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<InferenceService>> {
        self.caches
            .services
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn scale_view(&self, namespace: &str, name: &str) -> Option<Arc<ScaleView>> {
        self.caches
            .views
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn groups(&self, namespace: &str) -> Vec<Arc<ResourceScalingGroup>> {
        Caches::in_namespace(&self.caches.groups, &self.caches.group_catalog, namespace)
    }

    fn list(
        &self,
        resource: &ApiResource,
        namespace: &str,
        labels: &[(&str, &str)],
    ) -> Result<Vec<Value>, Unserved> {
        self.list_reusing(resource, namespace, labels, &mut Parsed::default())
    }

    fn list_reusing(
        &self,
        resource: &ApiResource,
        namespace: &str,
        labels: &[(&str, &str)],
        kept: &mut Parsed,
    ) -> Result<Vec<Value>, Unserved> {
        match self.caches.cache_for(resource, labels)? {
            Some(watched) => Ok(Caches::objects_reusing(&watched, namespace, labels, kept)),
            // Started a moment ago: the reconcile that started it is told
            // the kind is not readable yet and is triggered again when the
            // cache lists it.
            None => Err(Unserved {
                kind: resource.kind.clone(),
                reason: "its cache is still listing".to_owned(),
            }),
        }
    }

    fn pods(&self, namespace: &str, labels: &[(&str, &str)]) -> Result<Vec<Pod>, Unserved> {
        let pods = resource("v1", "Pod", "pods");
        match self.caches.cache_for(&pods, labels)? {
            Some(watched) => Ok(Caches::pods(&watched, namespace, labels)),
            None => Err(Unserved {
                kind: pods.kind,
                reason: "its cache is still listing".to_owned(),
            }),
        }
    }

    fn get<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        self.read(resource, namespace, name, true).boxed()
    }

    fn workload<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        self.read(resource, namespace, name, false).boxed()
    }

    fn scale<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        async move {
            let at_spec_replicas = adapter::known(&resource.api_version, &resource.kind)
                .is_some_and(|k| k.via == adapter::Via::Scale);
            if at_spec_replicas {
                if let Some(found) = self.typed(resource, namespace, name) {
                    return Ok(found.as_ref().map(scale_of));
                }
                if let Ok(Some(watched)) = self.caches.cache_for(resource, &[]) {
                    let object = watched
                        .store
                        .get(&ObjectRef::new_with(name, resource.clone()).within(namespace));
                    return Ok(object.map(|o| scale_of(&o.to_json(resource))));
                }
            }
            // A kind found through discovery, or one whose cache has not
            // listed yet: the API server answers for its /scale.
            match self.api(resource, namespace).get_scale(name).await {
                Ok(scale) => Ok(serde_json::to_value(scale).ok()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
                Err(e) => Err(e),
            }
        }
        .boxed()
    }

    fn resolve<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFuture<'a, Result<Option<Discovered>, String>> {
        self.caches.discovery.resolve(api_version, kind).boxed()
    }

    fn apply<'a>(&'a self, resource: &'a ApiResource, object: &'a Value) -> Written<'a> {
        async move {
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let params = PatchParams::apply(FIELD_MANAGER).force();
            self.api(resource, namespace)
                .patch(name, &params, &Patch::Apply(object))
                .await
                .map(drop)
        }
        .boxed()
    }

    fn delete<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> Written<'a> {
        async move {
            self.api(resource, namespace)
                .delete(name, &DeleteParams::background())
                .await
                .map(drop)
        }
        .boxed()
    }

    fn patch<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
        part: Part,
        patch: &'a Patch<Value>,
    ) -> Written<'a> {
        async move {
            let api = self.api(resource, namespace);
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            let before = self.cached_version(resource, namespace, name);
            let write = (resource.kind.as_str(), namespace, name, part);
            // The patch's kind and body, as Debug prints them (the same
            // patch built twice prints the same).
            let hash = patch_hash(&format!("{patch:?}"));
            if let Some(Some(cached)) = &before
                && self.repeated.repeats(write, cached, hash)
            {
                tracing::debug!(
                    kind = resource.kind,
                    namespace,
                    name,
                    "the same patch as the last, which the cache does not show yet: not sent again"
                );
                return Ok(());
            }
            let written = match part {
                Part::Object => {
                    api.patch(name, &params, patch)
                        .await?
                        .metadata
                        .resource_version
                }
                Part::Status => {
                    api.patch_status(name, &params, patch)
                        .await?
                        .metadata
                        .resource_version
                }
                Part::Scale => {
                    api.patch_scale(name, &params, patch)
                        .await?
                        .metadata
                        .resource_version
                }
            };
            if let Some(Some(before)) = &before {
                self.repeated.sent(write, before.clone(), hash);
            }
            if let (Some(before), Some(written)) = (before, written) {
                self.await_cached(resource, (namespace, name), before, &written)
                    .await;
            }
            Ok(())
        }
        .boxed()
    }

    fn record<'a>(
        &'a self,
        regarding: &'a ObjectReference,
        event: &'a Event,
        series: Series,
    ) -> BoxFuture<'a, ()> {
        async move {
            let object = format!(
                "{} {}/{} {}",
                regarding.kind.as_deref().unwrap_or_default(),
                regarding.namespace.as_deref().unwrap_or_default(),
                regarding.name.as_deref().unwrap_or_default(),
                regarding.uid.as_deref().unwrap_or_default(),
            );
            if !self.spam.allow(&object, tokio::time::Instant::now()) {
                tracing::info!(
                    object,
                    reason = event.reason,
                    note = event.note,
                    "too many Events about the object: this one is not recorded"
                );
                return;
            }
            let published = match series {
                Series::Fold => self.recorder.publish(event, regarding).await,
                Series::Own => {
                    Recorder::new(self.client.clone(), self.reporter.clone())
                        .publish(event, regarding)
                        .await
                }
            };
            if let Err(e) = published {
                tracing::warn!(error = %e, reason = event.reason, "could not record an event");
            }
        }
        .boxed()
    }
}
