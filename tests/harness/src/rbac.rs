//! What the RBAC Tandem ships grants its ServiceAccount, and what of it
//! Tandem used: every request of Tandem's in the real API server's audit log
//! ([`super::control_plane::ControlPlane::audit_events`]) against every rule
//! bound to it in `manifests/base/rbac.yaml`, one verb on one resource (and,
//! where the rule names them, its resource names) at a time. The grants are
//! read by the library's `check::installation::shipped_grants` (`tandem
//! check` asks the cluster about the same ones).
//!
//! Kubernetes' authorizer is mirrored where Tandem's requests meet it:
//! - a rule of a ClusterRole bound by a ClusterRoleBinding holds in every
//!   namespace; one bound by a RoleBinding, or of a Role, in that binding's;
//! - a rule with resourceNames never allows `create` (the authorizer does not
//!   know the name of what is being created);
//! - a server-side apply that creates its object (`patch`, answered 201) is
//!   authorized as `patch` and `create`;
//! - `bind` on a ClusterRole is used by writing a RoleBinding to it.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use tandem::check::installation::Grant;

/// One request of Tandem's, as authorized.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    pub verb: String,
    pub group: String,
    /// `pods`, `inferenceservices/status`.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// For a RoleBinding written: the ClusterRole it binds.
    pub binds: Option<String>,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}.{} {}/{}",
            self.verb,
            self.resource,
            if self.group.is_empty() {
                "core"
            } else {
                &self.group
            },
            self.namespace.as_deref().unwrap_or("-"),
            self.name.as_deref().unwrap_or("-")
        )
    }
}

/// Every request of `user` in `events` (the audit log), as authorized.
/// Requests for no resource (discovery, /version) are left out: they are
/// everyone's (system:discovery).
pub fn accesses(events: &[Value], user: &str) -> BTreeSet<Access> {
    let mut seen = BTreeSet::new();
    for event in events.iter().filter(|e| e["user"]["username"] == user) {
        let object = &event["objectRef"];
        let (Some(verb), Some(resource)) = (event["verb"].as_str(), object["resource"].as_str())
        else {
            continue;
        };
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let access = Access {
            verb: verb.to_owned(),
            group: object["apiGroup"].as_str().unwrap_or_default().to_owned(),
            resource: match object["subresource"].as_str() {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_owned(),
            },
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            binds: (resource == "rolebindings"
                && event["requestObject"]["roleRef"]["kind"] == "ClusterRole")
                .then(|| text(&event["requestObject"]["roleRef"]["name"]))
                .flatten(),
        };
        if verb == "patch" && event["responseStatus"]["code"] == 201 {
            seen.insert(Access {
                verb: "create".to_owned(),
                ..access.clone()
            });
        }
        seen.insert(access);
    }
    seen
}

/// Whether `grant` authorizes `access`.
pub fn allows(grant: &Grant, access: &Access) -> bool {
    let names = grant.names.is_empty()
        || (access.verb != "create"
            && access
                .name
                .as_ref()
                .is_some_and(|n| grant.names.contains(n)));
    grant.group == access.group
        && grant.resource == access.resource
        && grant.verb == access.verb
        && names
        && (grant.namespace.is_none() || grant.namespace == access.namespace)
}

/// Whether `access` made use of `grant`: authorized by it, or, for `bind`,
/// a RoleBinding written to a ClusterRole it names.
pub fn uses(access: &Access, grant: &Grant) -> bool {
    if grant.verb == "bind" && grant.resource == "clusterroles" {
        return access.resource == "rolebindings"
            && matches!(access.verb.as_str(), "create" | "patch" | "update")
            && access
                .binds
                .as_ref()
                .is_some_and(|role| grant.names.contains(role));
    }
    allows(grant, access)
}

/// What does not match: requests no grant allows, and grants no request used.
pub fn mismatch(grants: &[Grant], seen: &BTreeSet<Access>) -> (Vec<String>, Vec<Grant>) {
    let refused = seen
        .iter()
        .filter(|a| !grants.iter().any(|g| allows(g, a)))
        .map(ToString::to_string)
        .collect();
    let unused = grants
        .iter()
        .filter(|g| !seen.iter().any(|a| uses(a, g)))
        .cloned()
        .collect();
    (refused, unused)
}

/// Grants used only when a cache misses, which depends on timing: a run
/// may use them or not, so the RBAC check (`tests/cluster/end_to_end.rs`)
/// takes either, and they are the only reads of a namespace that
/// [`crate::scenario::Scenario::finish`] allows. `(verb, resource,
/// group, why)`.
pub const ON_A_CACHE_MISS: &[(&str, &str, &str, &str)] = &[
    (
        "get",
        "inferenceservices",
        "fusioninfer.io",
        "the webhook reads a ScaleView's target its cache does not hold yet (admission::caches, read_live)",
    ),
    (
        "get",
        "scaleviews",
        "fusioninfer.io",
        "the webhook reads a view its cache does not hold yet (admission::caches, read_live)",
    ),
    (
        "get",
        "leaderworkersets",
        "leaderworkerset.x-k8s.io",
        "a GroupReplication template or InplaceScaling target read before its cache lists (reconcile::live, read)",
    ),
    (
        "get",
        "deployments",
        "apps",
        "a GroupReplication template read before its cache lists (reconcile::live, read)",
    ),
    (
        "get",
        "deployments/scale",
        "apps",
        "an InplaceScaling target's /scale read before its cache lists (reconcile::live, scale)",
    ),
    (
        "get",
        "scaleviews/scale",
        "fusioninfer.io",
        "an InplaceScaling target's /scale read before its cache lists (reconcile::live, scale)",
    ),
];
