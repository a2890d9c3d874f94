//! The one interface every reconciler is written against: reads of the world
//! (from informer caches in a cluster, from the given objects in `render`)
//! and the writes a plan asks for (apply, delete, patch, Event).
//!
//! Two implementations: [`super::live::Live`] (kube-runtime reflector
//! caches, kube-rs writes) and [`super::memory::Memory`] (the world of
//! `tandem render`, where a write changes the world at once). The reconcile
//! functions in this module's siblings are the same for both, so `render`
//! shows exactly what the controllers would do.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, Patch};
use kube::runtime::events::Event;
use serde_json::Value;

use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::shared::installed::Installed;
use crate::plan::shared::pod::Pod;
pub use crate::watch::discovery::Discovered;
pub use crate::watch::parsed::Parsed;
pub use crate::watch::{Unserved, resource, resource_of};

/// Which part of an object a patch writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Object,
    Status,
    Scale,
}

/// Whether an Event may be folded into an earlier one of the same reason on
/// the same object (kube-runtime's recorder keeps a series for six
/// minutes), or must show on its own because its note says something new.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Series {
    Fold,
    Own,
}

/// A write's outcome; the API server's answer on failure (404, 409, 422 …).
pub type Written<'a> = BoxFuture<'a, Result<(), kube::Error>>;

/// What a reconcile reads and writes.
pub trait Cluster: Send + Sync {
    /// The InferenceService `namespace/name`, as cached.
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<InferenceService>>;
    /// The ScaleView `namespace/name`, as cached.
    fn scale_view(&self, namespace: &str, name: &str) -> Option<Arc<ScaleView>>;
    /// The ResourceScalingGroups of a namespace, sorted by name.
    fn groups(&self, namespace: &str) -> Vec<Arc<ResourceScalingGroup>>;
    /// The objects of a kind in a namespace that carry every label of
    /// `labels`, sorted by name, each with its `apiVersion` and `kind`.
    fn list(
        &self,
        resource: &ApiResource,
        namespace: &str,
        labels: &[(&str, &str)],
    ) -> Result<Vec<Value>, Unserved>;
    /// [`Cluster::list`], handing back the objects `kept` holds at their
    /// current version rather than reading them again: a wide service's
    /// children kept from its last pass ([`Parsed`]). Reading them anew is
    /// always right, and what a cluster without text caches does.
    fn list_reusing(
        &self,
        resource: &ApiResource,
        namespace: &str,
        labels: &[(&str, &str)],
        kept: &mut Parsed,
    ) -> Result<Vec<Value>, Unserved> {
        let _ = kept;
        self.list(resource, namespace, labels)
    }
    /// The pods in a namespace that carry every label of `labels`, sorted
    /// by name, as the plans read them.
    fn pods(&self, namespace: &str, labels: &[(&str, &str)]) -> Result<Vec<Pod>, Unserved>;
    /// One object, whole (with its `apiVersion` and `kind`); None when it is
    /// not there. May ask the API server when the cache keeps only part of
    /// the object (a workload Tandem does not manage).
    fn get<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>>;
    /// An object at least as far as its replica counts go (metadata,
    /// `spec.replicas`, `spec.roles[].name` and `.replicas`,
    /// `status.replicas` and `.readyReplicas`): what scaling a workload
    /// reads. None when it is not there.
    fn workload<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>>;
    /// The `/scale` of an object, as an `autoscaling/v1` Scale; None when the
    /// object is not there.
    fn scale<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>>;
    /// How the cluster serves a kind outside the adapter table (API
    /// discovery); None when it does not.
    fn resolve<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFuture<'a, Result<Option<Discovered>, String>>;

    /// What the cluster has installed of the projects Tandem writes objects
    /// of ([`Installed::Assumed`] when that cannot be known).
    fn installed(&self) -> std::sync::Arc<Installed>;

    /// Server-side applies `object` as field manager `tandem`, forced.
    fn apply<'a>(&'a self, resource: &'a ApiResource, object: &'a Value) -> Written<'a>;
    /// Deletes in the background (dependents go through the garbage
    /// collector). An object already gone answers 404.
    fn delete<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> Written<'a>;
    /// A merge or JSON patch of the object, its status or its scale. A merge
    /// patch that names `metadata.resourceVersion` is refused with 409 when
    /// the object changed since.
    fn patch<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
        part: Part,
        patch: &'a Patch<Value>,
    ) -> Written<'a>;
    /// Records an Event on `regarding`; a failure is logged, never returned.
    fn record<'a>(
        &'a self,
        regarding: &'a ObjectReference,
        event: &'a Event,
        series: Series,
    ) -> BoxFuture<'a, ()>;
}

/// The answer the API server gives for an object that is not there, for
/// implementations that keep the world themselves.
pub fn not_found(resource: &ApiResource, name: &str) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        status: Some(kube::core::response::StatusSummary::Failure),
        message: format!("{} \"{name}\" not found", resource.plural),
        reason: "NotFound".to_owned(),
        code: 404,
        ..Default::default()
    }))
}
