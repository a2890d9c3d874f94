//! The webhook's view of the cluster: the process's informer caches
//! ([`crate::watch::caches::Caches`], shared with the controllers), the
//! namespaces' follow graphs kept from the ResourceScalingGroup watch
//! ([`crate::watch::follows::WatchedFollows`]), and API discovery for kinds with a
//! scale subresource.

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource};
use serde_json::json;

use super::Lookup;
use super::lookup::{Found, Missing};
use crate::api::resource_scaling_group::ResourceScalingGroupSpec;
use crate::api::{Findings, InferenceService, ScaleView};
use crate::plan::resource_scaling_group::adapter;
use crate::plan::scale_view::refusal::{self, Refusal};
use crate::plan::shared::children::FIELD_MANAGER;
use crate::watch::caches::Caches;

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
        self.views_listed().then(|| {
            Caches::in_namespace(&self.views, &self.view_catalog, namespace)
                .into_iter()
                .map(|v| (*v).clone())
                .collect()
        })
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

    fn resource_scaling_group(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Option<crate::api::ResourceScalingGroup>> {
        self.groups_listed().then(|| {
            self.groups
                .get(&ObjectRef::new(name).within(namespace))
                .map(|g| (*g).clone())
        })
    }

    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        adapter::builtin_has_scale(api_version, kind).or_else(|| {
            self.discovery
                .cached(api_version, kind)
                .map(|found| found.is_some_and(|d| d.has_scale))
        })
    }

    fn installed(&self) -> std::sync::Arc<crate::plan::shared::installed::Installed> {
        self.dependencies.installed()
    }

    /// The view's conditions with the refusal recorded, written with a merge
    /// patch that carries the cached view's resourceVersion (a 409 says the
    /// cache is behind a write of the controller's: this refusal is then not
    /// recorded, and the autoscaler's next retry of it is), then a Warning
    /// Event `ScaleRefused`. Nothing is written when the view already records
    /// the same refusal for its generation, or is not cached.
    fn record_refusal(&self, refusal: &Refusal) -> Option<BoxFuture<'static, Result<(), String>>> {
        let view = self
            .views
            .get(&ObjectRef::new(&refusal.view).within(&refusal.namespace))?;
        let conditions = refusal::record(&view, refusal, &Time(jiff::Timestamp::now()))?;
        let client = self.client();
        let reporter = self.reporter();
        let note = refusal.message();
        let (namespace, name) = (refusal.namespace.clone(), refusal.view.clone());
        let write = async move {
            let patch = Patch::Merge(json!({
                "metadata": {"resourceVersion": view.metadata.resource_version},
                "status": {"conditions": conditions},
            }));
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            Api::<ScaleView>::namespaced(client.clone(), &namespace)
                .patch_status(&name, &params, &patch)
                .await
                .map_err(|e| format!("writing the ScaleRefused condition: {e}"))?;
            let event = Event {
                type_: EventType::Warning,
                reason: refusal::SCALE_REFUSED.to_owned(),
                note: Some(note),
                action: "Scale".to_owned(),
                secondary: None,
            };
            Recorder::new(client, reporter)
                .publish(&event, &view.object_ref(&()))
                .await
                .map_err(|e| format!("recording the ScaleRefused Event: {e}"))
        };
        Some(
            async move {
                tokio::time::timeout(RECORD_TIMEOUT, write)
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {RECORD_TIMEOUT:?}")))
            }
            .boxed(),
        )
    }

    /// One GET, given at most [`LIVE_READ_TIMEOUT`] so that the answer still
    /// comes well within the webhook's own request timeout.
    fn read_live(&self, missing: &Missing) -> Option<BoxFuture<'static, Result<Found, String>>> {
        let client = self.client();
        let read = match missing.clone() {
            Missing::InferenceService { namespace, name } => async move {
                Api::<InferenceService>::namespaced(client, &namespace)
                    .get_opt(&name)
                    .await
                    .map(|found| {
                        found.map_or(Found::Nothing, |s| Found::InferenceService(Box::new(s)))
                    })
            }
            .boxed(),
            Missing::ScaleView { namespace, name } => async move {
                Api::<ScaleView>::namespaced(client, &namespace)
                    .get_opt(&name)
                    .await
                    .map(|found| found.map_or(Found::Nothing, |v| Found::ScaleView(Box::new(v))))
            }
            .boxed(),
        };
        Some(
            async move {
                match tokio::time::timeout(LIVE_READ_TIMEOUT, read).await {
                    Ok(Ok(found)) => Ok(found),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err(format!("no answer within {LIVE_READ_TIMEOUT:?}")),
                }
            }
            .boxed(),
        )
    }
}

/// How long admission gives a refusal's record (the status write, then the
/// Event): it runs beside the answer, never before it.
pub const RECORD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long admission waits for the API server to confirm a cache miss.
pub const LIVE_READ_TIMEOUT: Duration = Duration::from_secs(1);
