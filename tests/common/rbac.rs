//! What the RBAC Tandem ships grants its ServiceAccount, and what of it
//! Tandem used: every request of Tandem's in the real API server's audit log
//! ([`super::control_plane::ControlPlane::audit_events`]) against every rule
//! bound to it in `manifests/base/rbac.yaml`, one verb on one resource (and,
//! where the rule names them, its resource names) at a time.
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

/// One verb on one resource, granted by one rule of the shipped RBAC.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// `ClusterRole tandem`, `Role tandem-system/tandem-leader-election`.
    pub role: String,
    /// Where it holds; None for everywhere.
    pub namespace: Option<String>,
    pub group: String,
    /// `pods`, `inferenceservices/status`.
    pub resource: String,
    pub verb: String,
    /// The rule's resourceNames; empty for any.
    pub names: Vec<String>,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}.{}{}{} ({}{})",
            self.verb,
            self.resource,
            if self.group.is_empty() {
                "core"
            } else {
                &self.group
            },
            if self.names.is_empty() { "" } else { " named " },
            self.names.join(","),
            self.role,
            self.namespace
                .as_ref()
                .map(|n| format!(", in {n}"))
                .unwrap_or_default()
        )
    }
}

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

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Every grant of `documents` (the RBAC manifests) to ServiceAccount
/// `account` of `namespace`.
pub fn shipped(documents: &[Value], namespace: &str, account: &str) -> Vec<Grant> {
    let is_subject = |binding: &Value| {
        binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"] == namespace
            })
    };
    let role = |kind: &str, name: &str, at: Option<&str>| {
        documents
            .iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["name"] == name
                    && (kind == "ClusterRole" || d["metadata"]["namespace"].as_str() == at)
            })
            .unwrap_or_else(|| panic!("the bound {kind} {name} is shipped"))
    };
    let mut grants = Vec::new();
    for binding in documents.iter().filter(|d| is_subject(d)) {
        let (kind, name) = (
            binding["roleRef"]["kind"].as_str().unwrap_or_default(),
            binding["roleRef"]["name"].as_str().unwrap_or_default(),
        );
        let at = match binding["kind"].as_str() {
            Some("ClusterRoleBinding") => None,
            Some("RoleBinding") => binding["metadata"]["namespace"].as_str(),
            _ => continue,
        };
        let shown = match at {
            Some(ns) if kind == "Role" => format!("Role {ns}/{name}"),
            _ => format!("{kind} {name}"),
        };
        for rule in role(kind, name, at)["rules"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let names = strings(&rule["resourceNames"]);
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        grants.push(Grant {
                            role: shown.clone(),
                            namespace: at.map(str::to_owned),
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            names: names.clone(),
                        });
                    }
                }
            }
        }
    }
    grants
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
