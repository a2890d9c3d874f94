//! The observed world: what Tandem knows of the cluster, kept from watch
//! events, below both the admission webhook and the controllers, which read
//! it and never each other.
//!
//! - [`caches`]: one reflector per kind, trimmed as it is stored, indexed
//!   by namespace and by service or group label ([`catalog`]), and the
//!   controllers' triggers, matched from the same events;
//! - [`cached`]: the one form a cached object takes;
//! - [`dependencies`]: the installed CRDs of LWS, Volcano, Gateway API and
//!   the Inference Extension, and the native gang probe, as one shared
//!   value recomputed only when one of them changes;
//! - [`discovery`]: which kinds the API server serves, and their `/scale`;
//! - [`follows`]: the ResourceScalingGroups' follow index, for the cycle
//!   check;
//! - [`health`]: whether the cluster answers the watches, for the log and
//!   `/readyz`; [`backoff`]: how a failed watch or reconcile is retried;
//! - [`metrics`]: `tandem_cached_objects` and `tandem_dependency_info`;
//! - [`parsed`]: a wide owner's children kept parsed from one pass to the
//!   next.

pub mod backoff;
pub mod cached;
pub mod caches;
pub mod catalog;
pub mod dependencies;
pub mod discovery;
pub mod follows;
pub mod health;
pub mod metrics;
pub mod parsed;

use kube::api::ApiResource;

/// Why a kind cannot be read: the cluster does not serve it, or Tandem may
/// not watch it (403). A plan that needs it says so in a condition; one
/// that does not is not held up by it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} cannot be read: {reason}")]
pub struct Unserved {
    pub kind: String,
    pub reason: String,
}

/// The API resource of a typed kind.
pub fn resource_of<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// The API resource of `kind` in `api_version` with `plural`.
pub fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = crate::plan::resource_scaling_group::adapter::group_version(api_version);
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(group, version, kind),
        plural,
    )
}
