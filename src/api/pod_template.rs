//! What the API server will refuse in the pods made from a role's template,
//! checked when the InferenceService is admitted (and rendered) rather than
//! when LeaderWorkerSet creates the pods, far from the user.
//!
//! These are the rules of Kubernetes' `ValidatePodSpec` that people get wrong
//! most often, with the API server's own wording where it has one:
//!
//! - resource quantities parse, and a limit is at least its request;
//! - extended resources (`nvidia.com/gpu`: a domain-qualified name outside
//!   `kubernetes.io/`) are whole numbers, need a limit, and when both are set
//!   the request equals the limit (they cannot be overcommitted);
//! - the enums `imagePullPolicy` (Always, IfNotPresent, Never), the pod's
//!   `restartPolicy` (Always, OnFailure, Never), an init container's
//!   `restartPolicy` (Always) and a port's `protocol` (TCP, UDP, SCTP);
//! - container names are DNS-1123 labels, unique over containers and init
//!   containers; port names are IANA service names (at most 15 characters,
//!   lowercase letters, digits and '-', at least one letter), unique in their
//!   container; container and host ports are within 1..=65535;
//! - environment variable names are non-empty printable ASCII without '='
//!   (Kubernetes 1.32's relaxed rule), and a variable has a `value` or a
//!   `valueFrom`, not both.
//!
//! Each denial names the path inside the template
//! (`spec.roles[0].template.spec.containers[0].resources.requests.cpu`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as Text;

use super::{Findings, dns1123_label_error};
use crate::api::quantity::Quantity;

const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];
const POD_RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// Checks a pod spec at `field` (`spec.roles[0].template.spec`). Whether a
/// container needs an image stays with the caller (a router's endpoint picker
/// gets its image from the planner).
pub fn check(pod: &PodSpec, field: &str, findings: &mut Findings) {
    if let Some(policy) = pod.restart_policy.as_deref() {
        check_enum(
            policy,
            &POD_RESTART_POLICIES,
            format!("{field}.restartPolicy"),
            findings,
        );
    }
    let mut names = BTreeSet::new();
    let init = pod.init_containers.iter().flatten().enumerate();
    for (i, container) in init {
        let at = format!("{field}.initContainers[{i}]");
        check_name(container, &at, &mut names, findings);
        if let Some(policy) = container.restart_policy.as_deref() {
            check_enum(policy, &["Always"], format!("{at}.restartPolicy"), findings);
        }
        check_container(container, &at, findings);
    }
    for (i, container) in pod.containers.iter().enumerate() {
        let at = format!("{field}.containers[{i}]");
        check_name(container, &at, &mut names, findings);
        if container.restart_policy.is_some() {
            findings.deny(
                format!("{at}.restartPolicy"),
                "may only be set on init containers (sidecars); a container restarts as the pod's restartPolicy says",
            );
        }
        check_container(container, &at, findings);
    }
}

/// A container name: a DNS-1123 label, unique over the pod's containers and
/// init containers.
fn check_name<'a>(
    container: &'a Container,
    at: &str,
    names: &mut BTreeSet<&'a str>,
    findings: &mut Findings,
) {
    if let Some(reason) = dns1123_label_error(&container.name) {
        findings.deny(format!("{at}.name"), reason);
    } else if !names.insert(container.name.as_str()) {
        findings.deny(
            format!("{at}.name"),
            format!("duplicate container name {:?}", container.name),
        );
    }
}

fn check_container(container: &Container, at: &str, findings: &mut Findings) {
    if let Some(policy) = container.image_pull_policy.as_deref() {
        check_enum(
            policy,
            &PULL_POLICIES,
            format!("{at}.imagePullPolicy"),
            findings,
        );
    }
    let mut port_names = BTreeSet::new();
    for (p, port) in container.ports.iter().flatten().enumerate() {
        let here = format!("{at}.ports[{p}]");
        if !(1..=65535).contains(&port.container_port) {
            findings.deny(
                format!("{here}.containerPort"),
                format!("must be between 1 and 65535, got {}", port.container_port),
            );
        }
        if let Some(host) = port.host_port
            && !(1..=65535).contains(&host)
        {
            findings.deny(
                format!("{here}.hostPort"),
                format!("must be between 1 and 65535, got {host}"),
            );
        }
        if let Some(protocol) = port.protocol.as_deref() {
            check_enum(protocol, &PROTOCOLS, format!("{here}.protocol"), findings);
        }
        if let Some(name) = port.name.as_deref() {
            if let Some(reason) = port_name_error(name) {
                findings.deny(format!("{here}.name"), reason);
            } else if !port_names.insert(name) {
                findings.deny(
                    format!("{here}.name"),
                    format!("duplicate port name {name:?} in this container"),
                );
            }
        }
    }
    for (e, var) in container.env.iter().flatten().enumerate() {
        let here = format!("{at}.env[{e}]");
        if let Some(reason) = env_name_error(&var.name) {
            findings.deny(format!("{here}.name"), reason);
        }
        if var.value.as_deref().is_some_and(|v| !v.is_empty()) && var.value_from.is_some() {
            findings.deny(
                format!("{here}.valueFrom"),
                "may not be specified when `value` is not empty",
            );
        }
    }
    if let Some(resources) = &container.resources {
        check_resources(
            resources.requests.as_ref(),
            resources.limits.as_ref(),
            &format!("{at}.resources"),
            findings,
        );
    }
}

type Amounts = std::collections::BTreeMap<String, Text>;

/// Requests and limits: every quantity parses, a limit is at least its
/// request, extended resources are whole, limited and not overcommitted.
fn check_resources(
    requests: Option<&Amounts>,
    limits: Option<&Amounts>,
    at: &str,
    findings: &mut Findings,
) {
    let requested = parse_amounts(requests, &format!("{at}.requests"), findings);
    let limited = parse_amounts(limits, &format!("{at}.limits"), findings);
    for (name, request) in &requested {
        let field = format!("{at}.requests.{name}");
        match limited.get(name) {
            Some(limit) if !overcommittable(name) && request != limit => findings.deny(
                field,
                format!(
                    "must equal limits.{name} ({limit}), got {request}: {name} cannot be overcommitted"
                ),
            ),
            Some(limit) if request > limit => findings.deny(
                field,
                format!("must be less than or equal to limits.{name} ({limit}), got {request}"),
            ),
            None if !overcommittable(name) && !limits.is_some_and(|l| l.contains_key(*name)) => {
                findings.deny(
                    format!("{at}.limits.{name}"),
                    format!(
                        "required: {name} cannot be overcommitted, so it needs a limit (equal to the request)"
                    ),
                );
            }
            _ => {}
        }
    }
}

/// The quantities of `requests` or `limits` (at `at`) that parse; each one
/// that does not, or is negative, or is a fractional extended resource, is
/// denied.
fn parse_amounts<'a>(
    amounts: Option<&'a Amounts>,
    at: &str,
    findings: &mut Findings,
) -> std::collections::BTreeMap<&'a str, Quantity> {
    let mut out = std::collections::BTreeMap::new();
    for (name, text) in amounts.into_iter().flatten() {
        let field = format!("{at}.{name}");
        match text.0.parse::<Quantity>() {
            Ok(q) if q.to_decimal().is_sign_negative() && !q.is_zero() => {
                findings.deny(field, format!("must be >= 0, got {:?}", text.0));
            }
            Ok(q) => {
                if is_extended(name) && !q.to_decimal().fract().is_zero() {
                    findings.deny(
                        field,
                        format!(
                            "must be a whole number: {name} is an extended resource, got {:?}",
                            text.0
                        ),
                    );
                }
                out.insert(name.as_str(), q);
            }
            Err(e) => findings.deny(
                field,
                format!(
                    "{e}; a quantity is a number with an optional suffix such as 500m, 2, 16Gi or 1e3"
                ),
            ),
        }
    }
    out
}

/// Whether Kubernetes lets requests of `name` stay below its limit: native
/// resources (cpu, memory, ephemeral-storage) yes; extended resources and
/// huge pages no.
fn overcommittable(name: &str) -> bool {
    !is_extended(name) && !name.starts_with("hugepages-")
}

/// An extended resource: a domain-qualified name outside `kubernetes.io/`
/// and `requests.` (`nvidia.com/gpu`), which Kubernetes never overcommits.
pub fn is_extended(name: &str) -> bool {
    name.contains('/')
        && !name.starts_with("kubernetes.io/")
        && !name.contains(".kubernetes.io/")
        && !name.starts_with("requests.")
}

fn check_enum(value: &str, allowed: &[&str], field: String, findings: &mut Findings) {
    if !allowed.contains(&value) {
        findings.deny(
            field,
            format!(
                "unsupported value {value:?}: supported values: {}",
                allowed
                    .iter()
                    .map(|a| format!("{a:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
}

/// An IANA service name, what Kubernetes requires of a port name.
fn port_name_error(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let problem = if name.is_empty() || name.len() > 15 {
        Some("must be 1 to 15 characters")
    } else if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    {
        Some("must contain only lowercase letters, digits and '-'")
    } else if !bytes.iter().any(u8::is_ascii_lowercase) {
        Some("must contain at least one letter")
    } else if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        Some("must not begin or end with '-' nor contain \"--\"")
    } else {
        None
    };
    problem.map(|p| format!("{p} (an IANA service name), got {name:?}"))
}

/// An environment variable name as Kubernetes 1.32+ accepts it.
fn env_name_error(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if !name
        .bytes()
        .all(|b| (0x20..=0x7e).contains(&b) && b != b'=')
    {
        return Some(format!(
            "must consist of printable ASCII characters other than '=', got {name:?}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resources_are_domain_qualified_outside_kubernetes_io() {
        for (name, extended) in [
            ("nvidia.com/gpu", true),
            ("amd.com/gpu", true),
            ("cpu", false),
            ("memory", false),
            ("hugepages-2Mi", false),
            ("kubernetes.io/something", false),
            ("example.kubernetes.io/x", false),
        ] {
            assert_eq!(is_extended(name), extended, "{name}");
        }
    }

    #[test]
    fn port_and_env_names() {
        assert_eq!(port_name_error("http"), None);
        assert_eq!(port_name_error("metrics-1"), None);
        for bad in [
            "",
            "HTTP",
            "1234",
            "-a",
            "a-",
            "a--b",
            "a-very-long-port-name",
        ] {
            assert!(port_name_error(bad).is_some(), "{bad:?}");
        }
        assert_eq!(env_name_error("HF_TOKEN"), None);
        assert_eq!(env_name_error("my.var-1"), None);
        assert!(env_name_error("A=B").is_some());
        assert!(env_name_error("").is_some());
        assert!(env_name_error("tab\there").is_some());
    }
}
