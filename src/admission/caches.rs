//! The webhook's view of the cluster: the process's informer caches
//! ([`crate::reconcile::caches::Caches`], shared with the controllers), the
//! namespaces' follow graphs kept from the ResourceScalingGroup watch
//! ([`super::follows::WatchedFollows`]), and API discovery for kinds with a
//! scale subresource.

use kube::runtime::reflector::{ObjectRef, Store};

use super::Lookup;
use crate::api::resource_scaling_group::ResourceScalingGroupSpec;
use crate::api::{Findings, InferenceService, ScaleView};
use crate::plan::resource_scaling_group::adapter;
use crate::reconcile::caches::Caches;

fn in_namespace<K: kube::Resource<DynamicType = ()> + Clone>(
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

/// Before a kind's cache has listed (the API server is slow or unreachable,
/// or the request comes before readiness), it is empty, not a view of the
/// cluster: the lookups answer None, so admission skips the check with a
/// warning, as without a cluster, and never says "not found" from it.
impl Lookup for Caches {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>> {
        self.services_listed().then(|| {
            self.services
                .get(&ObjectRef::new(name).within(namespace))
                .map(|s| (*s).clone())
        })
    }

    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>> {
        self.views_listed()
            .then(|| in_namespace(&self.views, namespace))
    }

    fn scale_view(&self, namespace: &str, name: &str) -> Option<Option<ScaleView>> {
        self.views_listed().then(|| {
            self.views
                .get(&ObjectRef::new(name).within(namespace))
                .map(|v| (*v).clone())
        })
    }

    fn check_follows(
        &self,
        namespace: &str,
        candidate: (&str, &ResourceScalingGroupSpec),
    ) -> Option<Findings> {
        self.groups_listed()
            .then(|| self.follows.check(namespace, candidate))
    }

    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        adapter::builtin_has_scale(api_version, kind).or_else(|| {
            self.discovery
                .cached(api_version, kind)
                .map(|found| found.is_some_and(|d| d.has_scale))
        })
    }
}
