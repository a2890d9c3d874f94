//! Which replica a write concerns, and the scale-down policy of its role or
//! group: what the metrics label a decision with
//! ([`super::decision`]) and the writes carry ([`super::write`]).

use crate::api::inference_service::RoleScaleDownPolicy;
use crate::api::resource_scaling_group::GroupScaleDownPolicy;

/// A replica a step creates, replaces or deletes: one of a role's
/// LeaderWorkerSets, or an object of a ResourceScalingGroup's clone group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replica {
    /// The scale-down policy of the replica's role or group: it orders which
    /// replicas go on a scale-down (and, for a role, which indices are kept).
    /// None when the role or group is no longer in the spec.
    pub policy: Option<Policy>,
}

/// A scale-down policy, of a role (Ordered, Binpack) or of a group
/// (Ordered, Newest, Oldest, Binpack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Ordered,
    Binpack,
    Newest,
    Oldest,
}

impl Policy {
    pub fn label(self) -> &'static str {
        match self {
            Policy::Ordered => "Ordered",
            Policy::Binpack => "Binpack",
            Policy::Newest => "Newest",
            Policy::Oldest => "Oldest",
        }
    }
}

impl From<RoleScaleDownPolicy> for Policy {
    fn from(policy: RoleScaleDownPolicy) -> Policy {
        match policy {
            RoleScaleDownPolicy::Ordered => Policy::Ordered,
            RoleScaleDownPolicy::Binpack => Policy::Binpack,
        }
    }
}

impl From<GroupScaleDownPolicy> for Policy {
    fn from(policy: GroupScaleDownPolicy) -> Policy {
        match policy {
            GroupScaleDownPolicy::Ordered => Policy::Ordered,
            GroupScaleDownPolicy::Newest => Policy::Newest,
            GroupScaleDownPolicy::Oldest => Policy::Oldest,
            GroupScaleDownPolicy::Binpack => Policy::Binpack,
        }
    }
}
