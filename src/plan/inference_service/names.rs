//! Every name Tandem makes from a service, checked at admission against the
//! rule of the kind that carries it, so that nothing Tandem writes is
//! refused later by the API server or by another project's webhook (issue
//! 23): a service called `llama-3.1-8b` was admitted, and LWS's webhook then
//! refused its LeaderWorkerSet `llama-3.1-8b-decode-0`.
//!
//! The rules, from Kubernetes' apimachinery (`pkg/util/validation`,
//! `IsDNS1035Label`, `IsDNS1123Label`, `IsDNS1123Subdomain`, v0.36):
//! - LeaderWorkerSets are DNS-1035 labels: LWS names a headless Service
//!   after each (`NameIsDNS1035Label` in LWS's `leaderworkerset_webhook.go`);
//! - Services are DNS-1035 labels (the API server's Service validation);
//! - every other kind's name is a DNS-1123 subdomain;
//! - the service's name is also the value of the `fusioninfer.io/service`
//!   label on every child, so at most 63 characters.
//!
//! One finding is given for the first child a name breaks, with the field to
//! change and a name that fits ([`hint`]).

use crate::api::inference_service::{InferenceServiceSpec, Role};
use crate::api::{self, Findings};
use crate::plan::shared::children::{self, Naming};

use super::{disruption, gang, placement, pod_groups, revision, router, traffic};

/// What a name must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// At most 63 lowercase letters, digits and '-', starting with a letter
    /// and ending with a letter or digit.
    Dns1035Label,
    /// At most 253 characters of DNS-1123 labels joined by '.'.
    Dns1123Subdomain,
}

impl Rule {
    /// Why `name` breaks this rule, or None when it keeps it. The character
    /// rules are `api`'s, which the single-field checks use too.
    pub fn broken_by(self, name: &str) -> Option<&'static str> {
        match self {
            Rule::Dns1035Label if name.len() > 63 => {
                Some("must be at most 63 characters (a DNS-1035 label)")
            }
            Rule::Dns1035Label
                if api::dns1123_label_error(name).is_some()
                    || !name.starts_with(|c: char| c.is_ascii_lowercase()) =>
            {
                Some(
                    "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit)",
                )
            }
            Rule::Dns1123Subdomain if name.len() > 253 => {
                Some("must be at most 253 characters (a DNS-1123 subdomain)")
            }
            Rule::Dns1123Subdomain if api::dns1123_subdomain_error(name).is_some() => Some(
                "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit)",
            ),
            Rule::Dns1035Label | Rule::Dns1123Subdomain => None,
        }
    }
}

/// One object Tandem makes from a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    pub kind: &'static str,
    pub name: String,
    pub rule: Rule,
    /// The role the name comes from (index in `spec.roles`), if any.
    pub role: Option<usize>,
    /// For a role's LeaderWorkerSet, checked at the highest index: the name
    /// of its first replica, the one a user sees.
    pub first: Option<String>,
}

/// The serving roles with their index in `spec.roles` and the highest
/// replica index they may reach (their replicas, one beyond the last, for a
/// surge).
fn serving_roles(spec: &InferenceServiceSpec) -> impl Iterator<Item = (usize, &Role, u32)> {
    spec.roles
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.is_router())
        .map(|(i, role)| {
            let highest = u32::try_from(role.replicas().max(1)).unwrap_or(u32::MAX);
            (i, role, highest)
        })
}

/// Kubernetes' PodGroups of each serving role: its first replica's (the
/// core group, for a core role) and its highest's.
fn native_pod_groups(name: &str, spec: &InferenceServiceSpec, naming: &Naming) -> Vec<Child> {
    let mut made = Vec::new();
    for (i, role, highest) in serving_roles(spec) {
        for index in [0, highest] {
            let topology_key = placement::group_topology_key(spec, role, index);
            if let Ok(group) = pod_groups::group_of(name, spec, naming, role, index, topology_key) {
                made.push(Child {
                    kind: pod_groups::KIND,
                    name: group.name,
                    rule: Rule::Dns1123Subdomain,
                    role: Some(i),
                    first: None,
                });
            }
        }
    }
    made
}

/// Every name Tandem will make from service `name`: each serving role's
/// LeaderWorkerSet at the highest index it may reach (its replicas, one
/// beyond the last, for a surge), with the revision suffix when revisions
/// run side by side; the roles' disruption budgets; the PodGroup; the
/// router's endpoint picker objects, pool and route (per revision when side
/// by side); the Gateway, HTTPRoute, per-revision Services and revision
/// records of NewRevision and IncrementalUpgrade.
pub fn children_of(name: &str, spec: &InferenceServiceSpec) -> Vec<Child> {
    let side_by_side = spec.upgrade_type().runs_revisions_side_by_side();
    let naming = if side_by_side {
        Naming::Suffixed("0".repeat(children::REVISION_LEN))
    } else {
        Naming::Plain
    };
    let child = |kind, name: String, rule, role| Child {
        kind,
        name,
        rule,
        role,
        first: None,
    };
    let mut made = Vec::new();
    for (i, role, highest) in serving_roles(spec) {
        let set = naming.replica_name(name, &role.name, highest);
        made.push(Child {
            first: Some(naming.replica_name(name, &role.name, 0)),
            ..child("LeaderWorkerSet", set, Rule::Dns1035Label, Some(i))
        });
        let budget = disruption::name(name, &role.name);
        made.push(child(
            "PodDisruptionBudget",
            budget,
            Rule::Dns1123Subdomain,
            Some(i),
        ));
    }
    if gang::scheduling(spec).backend == Some(gang::Backend::Kubernetes) {
        made.extend(native_pod_groups(name, spec, &naming));
    } else if gang::scheduling(spec).gang {
        made.push(child(
            gang::POD_GROUP_KIND,
            name.to_owned(),
            Rule::Dns1123Subdomain,
            None,
        ));
    }
    if spec.roles.iter().any(|r| r.is_router()) {
        let epp = router::revision_epp_name(name, &naming);
        made.push(child("Service", epp.clone(), Rule::Dns1035Label, None));
        for kind in ["Deployment", "ConfigMap", "ServiceAccount"] {
            made.push(child(kind, epp.clone(), Rule::Dns1123Subdomain, None));
        }
        for binding in [
            router::reader_binding_name(name),
            router::leader_election_binding_name(name),
        ] {
            made.push(child("RoleBinding", binding, Rule::Dns1123Subdomain, None));
        }
        let pool = router::revision_pool_name(name, &naming);
        made.push(child("InferencePool", pool, Rule::Dns1123Subdomain, None));
        made.push(child(
            "HTTPRoute",
            router::route_name(name),
            Rule::Dns1123Subdomain,
            None,
        ));
    }
    if side_by_side {
        let revision = "0".repeat(children::REVISION_LEN);
        let per_revision = traffic::revision_service_name(name, &revision);
        made.push(child("Service", per_revision, Rule::Dns1035Label, None));
        made.push(child(
            "Gateway",
            traffic::gateway_name(name),
            Rule::Dns1123Subdomain,
            None,
        ));
        made.push(child(
            "HTTPRoute",
            traffic::route_name(name),
            Rule::Dns1123Subdomain,
            None,
        ));
        let record = revision::record_name(name, &revision);
        made.push(child(
            "ControllerRevision",
            record,
            Rule::Dns1123Subdomain,
            None,
        ));
    }
    made
}

/// Denies service `name` when it, or a name Tandem makes from it, would be
/// refused: one finding, at `metadata.name` (or at the role whose name
/// alone is too long), naming the child, its rule and a name that fits.
pub fn check(name: &str, spec: &InferenceServiceSpec) -> Findings {
    let mut findings = Findings::default();
    if name.is_empty() {
        // The API server's to fill (generateName) or refuse.
        return findings;
    }
    let made = children_of(name, spec);
    // How long the service's name may be for every child to fit, and for
    // it to be a label value.
    let room = made
        .iter()
        .map(|c| limit(c.rule).saturating_sub(c.name.len().saturating_sub(name.len())))
        .fold(63, usize::min);
    if name.len() > 63 {
        findings.deny(
            "metadata.name",
            format!(
                "{name:?} is {} characters: it is the value of the {} label on every child, which must be at most 63: use {:?}",
                name.len(),
                children::SERVICE,
                hint(name, room)
            ),
        );
        return findings;
    }
    let Some((child, why)) = made
        .iter()
        .find_map(|c| Some((c, c.rule.broken_by(&c.name)?)))
    else {
        return findings;
    };
    let named = said(child);
    match child.role {
        Some(i) if room == 0 => findings.deny(
            format!("spec.roles[{i}].name"),
            format!("makes {named}, which {why}: shorten the role's name"),
        ),
        _ => findings.deny(
            "metadata.name",
            format!(
                "{name:?} makes {named}, which {why}: use {:?}",
                hint(name, room)
            ),
        ),
    }
    findings
}

/// How a denial names `child`: its kind and name. A role's LeaderWorkerSet
/// is checked at the highest index a surge may reach, but named by its first
/// replica (`qwen-inference-0`), the one a user sees: alone when the longest
/// is as long, else with the longest (`qwen-inference-10`), which the hint's
/// length is for.
fn said(child: &Child) -> String {
    match &child.first {
        // As long as the longest (one replica: "-0" and "-1"): the first alone.
        Some(first) if first.len() == child.name.len() => format!("{} {first:?}", child.kind),
        // The first breaks the rule too: it, and how long the names get.
        Some(first) if child.rule.broken_by(first).is_some() => format!(
            "{} {first:?} (up to {:?} during a surge)",
            child.kind, child.name
        ),
        Some(first) => format!(
            "{} {first:?} and, during a surge, up to {:?}, the longest",
            child.kind, child.name
        ),
        None => format!("{} {:?}", child.kind, child.name),
    }
}

fn limit(rule: Rule) -> usize {
    match rule {
        Rule::Dns1035Label => 63,
        Rule::Dns1123Subdomain => 253,
    }
}

/// A name like `name` that every rule takes, in at most `room` characters:
/// lowercase, every other character a '-', starting with a letter (`m-`
/// put before a leading digit), no '-' at either end.
pub fn hint(name: &str, room: usize) -> String {
    let mut fitted: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    fitted = fitted.trim_matches('-').to_owned();
    if !fitted.starts_with(|c: char| c.is_ascii_lowercase()) {
        fitted.insert_str(0, "m-");
    }
    fitted.truncate(room.max(1));
    let trimmed = fitted.trim_end_matches('-');
    if trimmed.is_empty() {
        "m".to_owned()
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(roles: serde_json::Value, upgrade: Option<&str>) -> InferenceServiceSpec {
        let mut spec = json!({"roles": roles});
        if let Some(kind) = upgrade {
            spec["upgradeStrategy"] =
                json!({"type": kind, "incrementalUpgradeOptions": {"gatewayClassName": "istio"}});
        }
        serde_json::from_value(spec).unwrap()
    }

    fn worker(name: &str, replicas: i32) -> serde_json::Value {
        json!({"name": name, "componentType": "worker", "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}})
    }

    fn router() -> serde_json::Value {
        json!({"name": "router", "componentType": "router", "replicas": 1})
    }

    /// apimachinery v0.36 `pkg/util/validation/validation_test.go`,
    /// `TestIsDNS1123Label` and `TestIsDNS1035Label`: their good and bad
    /// values (the 63/64-character cases built the same way).
    #[test]
    fn the_rules_keep_apimachinerys_test_vectors() {
        let long = |n| "a".repeat(n);
        let good_1123 = [
            "a",
            "ab",
            "abc",
            "a1",
            "a-1",
            "a--1--2--b",
            "0",
            "01",
            "012",
            "1a",
            "1-a",
            "1--a--b--2",
        ];
        let bad_1123 = [
            "", "A", "ABC", "aBc", "A1", "A-1", "1-A", "-", "a-", "-a", "1-", "-1", "_", "a_",
            "_a", "a_b", "1_", "_1", "1_2", ".", "a.", ".a", "a.b", "1.", ".1", "1.2", " ", "a ",
            " a", "a b", "1 ", " 1", "1 2",
        ];
        let good_1035 = ["a", "ab", "abc", "a1", "a-1", "a--1--2--b"];
        let bad_1035 = [
            "0",
            "01",
            "012",
            "1a",
            "1-a",
            "1--a--b--2",
            "",
            "A",
            "ABC",
            "aBc",
            "A1",
            "A-1",
            "1-A",
            "-",
            "a-",
            "-a",
            "1-",
            "-1",
            "_",
            "a_",
            "_a",
            "a_b",
            "1_",
            "_1",
            "1_2",
            ".",
            "a.",
            ".a",
            "a.b",
            "1.",
            ".1",
            "1.2",
            " ",
            "a ",
            " a",
            "a b",
            "1 ",
            " 1",
            "1 2",
        ];
        for good in good_1123 {
            assert_eq!(api::dns1123_label_error(good), None, "{good:?}");
        }
        assert_eq!(api::dns1123_label_error(&long(63)), None);
        assert!(api::dns1123_label_error(&long(64)).is_some());
        for bad in bad_1123 {
            assert!(api::dns1123_label_error(bad).is_some(), "{bad:?}");
        }
        for good in good_1035 {
            assert_eq!(Rule::Dns1035Label.broken_by(good), None, "{good:?}");
        }
        assert_eq!(Rule::Dns1035Label.broken_by(&long(63)), None);
        assert!(Rule::Dns1035Label.broken_by(&long(64)).is_some());
        for bad in bad_1035 {
            assert!(Rule::Dns1035Label.broken_by(bad).is_some(), "{bad:?}");
        }
        // TestIsDNS1123Subdomain: labels joined by dots, 253 at most.
        for good in ["a.a", "ab.ab", "a--1--2--b.0", "1.a", "0.0", "a.b.c.d.e"] {
            assert_eq!(Rule::Dns1123Subdomain.broken_by(good), None, "{good:?}");
        }
        for bad in ["a..b", ".a", "a.", "A.a", "a_b.c", "-a.b", "a.b-"] {
            assert!(Rule::Dns1123Subdomain.broken_by(bad).is_some(), "{bad:?}");
        }
        assert_eq!(Rule::Dns1123Subdomain.broken_by(&long(253)), None);
        assert!(Rule::Dns1123Subdomain.broken_by(&long(254)).is_some());
    }

    #[test]
    fn a_dotted_name_is_denied_naming_its_leader_worker_set_with_a_rename() {
        let findings = check("llama-3.1-8b", &spec(json!([worker("decode", 1)]), None));
        assert_eq!(
            findings.denial_message(),
            "metadata.name: \"llama-3.1-8b\" makes LeaderWorkerSet \"llama-3.1-8b-decode-0\", which must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a letter or digit): use \"llama-3-1-8b\""
        );
        assert!(check("llama-3-1-8b", &spec(json!([worker("decode", 1)]), None)).is_allowed());
    }

    /// The first replica's name is the one shown; the longest only when it
    /// alone breaks the rule (ten replicas: `-10`, one character more).
    #[test]
    fn a_leader_worker_set_is_named_by_its_first_replica() {
        let one = "a".repeat(54); // "{one}-decode-0" is 63 characters.
        let message =
            check(&"b".repeat(56), &spec(json!([worker("decode", 1)]), None)).denial_message();
        assert!(
            message.contains(&format!(
                "makes LeaderWorkerSet \"{}-decode-0\", which",
                "b".repeat(56)
            )),
            "{message}"
        );
        let message = check(&one, &spec(json!([worker("decode", 10)]), None)).denial_message();
        assert!(
            message.contains(&format!(
                "makes LeaderWorkerSet \"{one}-decode-0\" and, during a surge, up to \"{one}-decode-10\", the longest, which"
            )),
            "{message}"
        );
        assert!(check(&one, &spec(json!([worker("decode", 9)]), None)).is_allowed());
    }

    #[test]
    fn the_same_names_are_refused_under_every_strategy_with_or_without_a_router() {
        for upgrade in [
            None,
            Some("RollingUpdate"),
            Some("None"),
            Some("NewRevision"),
            Some("IncrementalUpgrade"),
        ] {
            for roles in [
                json!([worker("decode", 2)]),
                json!([worker("decode", 2), router()]),
            ] {
                let spec = spec(roles, upgrade);
                for bad in ["llama-3.1-8b", "7b-chat", "Qwen-7B", "qwen2.5-7b"] {
                    let findings = check(bad, &spec);
                    let message = findings.denial_message();
                    assert!(
                        message.starts_with(&format!("metadata.name: {bad:?} makes ")),
                        "{upgrade:?} {bad}: {message}"
                    );
                    let hint = message.rsplit("use ").next().unwrap().trim_matches('"');
                    assert!(
                        check(hint, &spec).is_allowed(),
                        "{upgrade:?}: the hint {hint:?} fits"
                    );
                }
                assert!(check("qwen-7b", &spec).is_allowed(), "{upgrade:?}");
            }
        }
    }

    #[test]
    fn a_long_name_is_told_how_long_it_may_be() {
        let spec = spec(json!([worker("decode", 10)]), Some("IncrementalUpgrade"));
        let name = "a".repeat(50);
        let message = check(&name, &spec).denial_message();
        // The longest child: `{svc}-decode-10-{revision}`, 20 more characters.
        assert!(
            message.contains("must be at most 63 characters"),
            "{message}"
        );
        let hint = message.rsplit("use ").next().unwrap().trim_matches('"');
        assert_eq!(hint.len(), 63 - "-decode-10-0000000000".len());
        assert!(check(hint, &spec).is_allowed());
    }

    #[test]
    fn a_role_name_too_long_for_any_service_name_is_blamed_on_the_role() {
        let spec = spec(json!([worker(&"r".repeat(62), 1)]), None);
        let findings = check("s", &spec);
        assert!(
            findings
                .denial_message()
                .starts_with("spec.roles[0].name: makes LeaderWorkerSet"),
            "{}",
            findings.denial_message()
        );
    }

    #[test]
    fn the_service_name_is_a_label_value_on_every_child() {
        let findings = check(&"a".repeat(64), &spec(json!([worker("w", 1)]), None));
        assert!(
            findings.denial_message().contains("at most 63"),
            "{}",
            findings.denial_message()
        );
    }

    #[test]
    fn hints_fit_every_rule() {
        assert_eq!(hint("llama-3.1-8b", 63), "llama-3-1-8b");
        assert_eq!(hint("7b-chat", 63), "m-7b-chat");
        assert_eq!(hint("Qwen-7B", 63), "qwen-7b");
        assert_eq!(hint("a-b-c", 2), "a");
        assert_eq!(hint("...", 63), "m");
    }
}
