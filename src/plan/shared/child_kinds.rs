//! The kinds an InferenceService's children can be, and which kind an
//! object is: the registry the plan, the watch caches and the reconciler all
//! read, so that what is watched, listed and deleted agrees.

use serde_json::Value;

/// A kind an InferenceService's children can be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildKind {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

pub const LEADER_WORKER_SET: ChildKind = ChildKind {
    api_version: "leaderworkerset.x-k8s.io/v1",
    kind: "LeaderWorkerSet",
    plural: "leaderworkersets",
};

impl ChildKind {
    /// The kind of an object the plan applies or deletes: a child, or a Pod.
    pub fn of(object: &Value) -> Option<ChildKind> {
        CHILD_KINDS
            .into_iter()
            .chain([POD])
            .find(|k| object["apiVersion"] == k.api_version && object["kind"] == k.kind)
    }

    /// The name of the kind where an unserved API is reported
    /// (`World::unavailable`): the kind, qualified by its group for
    /// Kubernetes' PodGroup, whose kind Volcano's shares.
    pub fn name(&self) -> &'static str {
        if self.api_version == "scheduling.k8s.io/v1alpha2" && self.kind == "PodGroup" {
            "PodGroup.scheduling.k8s.io"
        } else {
            self.kind
        }
    }

    pub fn group(&self) -> &'static str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    pub fn version(&self) -> &'static str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version, |(_, version)| version)
    }
}

pub const POD_GROUP: ChildKind = ChildKind {
    api_version: "scheduling.volcano.sh/v1beta1",
    kind: "PodGroup",
    plural: "podgroups",
};

pub const DEPLOYMENT: ChildKind = ChildKind {
    api_version: "apps/v1",
    kind: "Deployment",
    plural: "deployments",
};

pub const GATEWAY: ChildKind = ChildKind {
    api_version: "gateway.networking.k8s.io/v1",
    kind: "Gateway",
    plural: "gateways",
};

pub const CONTROLLER_REVISION: ChildKind = ChildKind {
    api_version: "apps/v1",
    kind: "ControllerRevision",
    plural: "controllerrevisions",
};

pub const POD_DISRUPTION_BUDGET: ChildKind = ChildKind {
    api_version: "policy/v1",
    kind: "PodDisruptionBudget",
    plural: "poddisruptionbudgets",
};

/// Kubernetes' own PodGroup (`inference_service::pod_groups`).
pub const NATIVE_POD_GROUP: ChildKind = ChildKind {
    api_version: "scheduling.k8s.io/v1alpha2",
    kind: "PodGroup",
    plural: "podgroups",
};

/// Every kind a service's children can be: the replicas, the PodGroup, the
/// router's objects (endpoint picker, its RBAC and config, pool and route),
/// an upgrade's Gateway, per-revision Services and revision records, and the
/// serving roles' PodDisruptionBudgets. Everything of these kinds is
/// watched through Tandem's label, read per service on each reconcile, and
/// what the plan no longer wants is deleted.
pub const CHILD_KINDS: [ChildKind; 13] = [
    LEADER_WORKER_SET,
    POD_GROUP,
    NATIVE_POD_GROUP,
    ChildKind {
        api_version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
    },
    ChildKind {
        api_version: "rbac.authorization.k8s.io/v1",
        kind: "RoleBinding",
        plural: "rolebindings",
    },
    ChildKind {
        api_version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
    },
    DEPLOYMENT,
    ChildKind {
        api_version: "v1",
        kind: "Service",
        plural: "services",
    },
    ChildKind {
        api_version: "inference.networking.k8s.io/v1",
        kind: "InferencePool",
        plural: "inferencepools",
    },
    ChildKind {
        api_version: "gateway.networking.k8s.io/v1",
        kind: "HTTPRoute",
        plural: "httproutes",
    },
    GATEWAY,
    CONTROLLER_REVISION,
    POD_DISRUPTION_BUDGET,
];

/// Pods are applied (a drain's label and annotations) but are
/// not children: they are never listed as such, nor deleted by Tandem.
pub const POD: ChildKind = ChildKind {
    api_version: "v1",
    kind: "Pod",
    plural: "pods",
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn child_kinds_know_their_group() {
        assert_eq!(LEADER_WORKER_SET.group(), "leaderworkerset.x-k8s.io");
        assert_eq!(LEADER_WORKER_SET.version(), "v1");
        assert_eq!(
            ChildKind::of(
                &json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"})
            ),
            Some(LEADER_WORKER_SET)
        );
    }
}
