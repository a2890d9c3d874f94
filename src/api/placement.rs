//! `spec.placement` of an InferenceService: where its replicas land
//! (issue 34). Each multi-node replica whole in one domain of a node label
//! (a rack, an NVLink domain), the prefill/decode pair in one domain (a
//! block), single-node replicas spread over domains (zones); each required
//! or preferred.
//!
//! Only the single-object rules live here; what a gang backend can carry
//! out on the installed cluster is decided in
//! `plan::inference_service::dependencies`, and how it is written in
//! `plan::inference_service::placement`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Findings, dns1123_subdomain_error};

/// Where the service's replicas land.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Each replica of a multi-node role lands whole in one domain of this
    /// node label (a rack, an NVLink or InfiniBand domain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<PlacementDomain>,
    /// The first replica of each serving role (a prefill and a decode
    /// replica: the pair the gang starts together) lands in one domain of
    /// this node label (a block). No narrower than the replica's domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<PlacementDomain>,
    /// The replicas of each single-node role spread over the domains of
    /// this node label (zones), for availability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<PlacementSpread>,
}

/// One domain of a node label that pods must (or should) share.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDomain {
    /// The node label whose value names the domain, e.g.
    /// network.topology.kubernetes.io/block.
    pub topology_key: String,
    /// Required (default): pods wait rather than land apart. Preferred: the
    /// scheduler tries, and places them apart when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PlacementMode>,
    /// `replica` only: each replica alone in its domain, one replica per
    /// domain and no pods of another LeaderWorkerSet of the namespace beside
    /// it (LWS's exclusive-topology). Without a gang scheduler only, and
    /// Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,
}

/// Spread of single-node replicas over the domains of a node label.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpread {
    /// The node label whose value names the domain, e.g.
    /// topology.kubernetes.io/zone.
    pub topology_key: String,
    /// The most a role's replicas in one domain may exceed those in the
    /// emptiest (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_skew: Option<i32>,
    /// Required (default): a replica waits rather than exceed the skew.
    /// Preferred: the scheduler spreads where it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PlacementMode>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PlacementMode {
    #[default]
    Required,
    Preferred,
}

impl PlacementDomain {
    pub fn mode(&self) -> PlacementMode {
        self.mode.unwrap_or_default()
    }

    pub fn required(&self) -> bool {
        self.mode() == PlacementMode::Required
    }

    pub fn exclusive(&self) -> bool {
        self.exclusive == Some(true)
    }
}

impl PlacementSpread {
    pub const DEFAULT_MAX_SKEW: i32 = 1;

    pub fn mode(&self) -> PlacementMode {
        self.mode.unwrap_or_default()
    }

    pub fn max_skew(&self) -> i32 {
        self.max_skew.unwrap_or(Self::DEFAULT_MAX_SKEW)
    }
}

/// Fills in the modes and the skew, so the stored object says what Tandem
/// does.
pub fn defaults(placement: &mut Placement) {
    for domain in [placement.replica.as_mut(), placement.pair.as_mut()]
        .into_iter()
        .flatten()
    {
        domain.mode.get_or_insert_default();
    }
    if let Some(spread) = placement.spread.as_mut() {
        spread.mode.get_or_insert_default();
        spread
            .max_skew
            .get_or_insert(PlacementSpread::DEFAULT_MAX_SKEW);
    }
}

/// What the service's roles offer placement to: whether a role is
/// multi-node, whether there is a prefill/decode pair, whether a serving
/// role is single-node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub multi_node: bool,
    pub pair: bool,
    pub single_node: bool,
}

/// The single-object rules of `spec.placement`: well-formed label keys, a
/// pair domain no narrower than the replica domain, a skew of at least 1,
/// and a warning for each part the service's roles give nothing to place.
pub fn validate(placement: &Placement, shape: Shape, findings: &mut Findings) {
    let at = "spec.placement";
    for (part, key) in [
        (
            "replica",
            placement.replica.as_ref().map(|d| &d.topology_key),
        ),
        ("pair", placement.pair.as_ref().map(|d| &d.topology_key)),
        ("spread", placement.spread.as_ref().map(|s| &s.topology_key)),
    ] {
        if let Some(error) = key.and_then(|k| label_key_error(k)) {
            findings.deny(format!("{at}.{part}.topologyKey"), error);
        }
    }
    if let (Some(replica), Some(pair)) = (&placement.replica, &placement.pair)
        && let (Some(inner), Some(outer)) =
            (breadth(&replica.topology_key), breadth(&pair.topology_key))
        && outer < inner
    {
        findings.deny(
            format!("{at}.pair.topologyKey"),
            format!(
                "{} is a narrower domain than the replica's {}: a pair is two replicas, so \
                 its domain must hold a whole replica; name the replica's domain or a wider one",
                pair.topology_key, replica.topology_key
            ),
        );
    }
    if placement
        .pair
        .as_ref()
        .is_some_and(PlacementDomain::exclusive)
    {
        findings.deny(
            format!("{at}.pair.exclusive"),
            "only a replica's domain can be exclusive (placement.replica.exclusive): a pair is \
             two replicas that share theirs"
                .to_owned(),
        );
    }
    if let Some(replica) = &placement.replica
        && replica.exclusive()
        && !replica.required()
    {
        findings.deny(
            format!("{at}.replica.exclusive"),
            "an exclusive domain is LeaderWorkerSet's exclusive-topology, a required pod \
             anti-affinity: set mode Required, or drop exclusive"
                .to_owned(),
        );
    }
    if let Some(spread) = &placement.spread
        && spread.max_skew() < 1
    {
        findings.deny(
            format!("{at}.spread.maxSkew"),
            format!("must be at least 1, got {}", spread.max_skew()),
        );
    }
    let ignored = [
        (
            placement.replica.is_some() && !shape.multi_node,
            "replica",
            "no serving role is multi-node (multinode.nodeCount ≥ 2), so every replica is one pod",
        ),
        (
            placement.pair.is_some() && !shape.pair,
            "pair",
            "the serving roles are all of one componentType, so there is no pair (a prefiller and \
             a decoder role)",
        ),
        (
            placement.spread.is_some() && !shape.single_node,
            "spread",
            "no serving role is single-node; multi-node replicas are placed by placement.replica",
        ),
    ];
    for (_, part, why) in ignored.into_iter().filter(|(ignored, ..)| *ignored) {
        findings.warn(format!("{at}.{part} is ignored: {why}"));
    }
}

/// Well-known node labels from the narrowest domain to the widest: a host,
/// an accelerator (NVLink) domain, a block, a spine, a datacenter (the
/// labels NVIDIA's Topograph writes), a zone, a region. A key not listed
/// cannot be compared.
const DOMAINS: [&str; 7] = [
    "kubernetes.io/hostname",
    "network.topology.kubernetes.io/accelerator",
    "network.topology.kubernetes.io/block",
    "network.topology.kubernetes.io/spine",
    "network.topology.kubernetes.io/datacenter",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// How wide a well-known domain is ([`DOMAINS`]); None for another key.
fn breadth(key: &str) -> Option<usize> {
    DOMAINS.iter().position(|d| *d == key)
}

/// Why `key` is not a label key (Kubernetes' qualified name: an optional
/// DNS subdomain prefix and `/`, then a name of at most 63 characters,
/// alphanumeric at both ends, with `-`, `_` and `.` inside).
pub fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some(format!("{key:?}: the prefix before '/' must not be empty"));
        }
        if let Some(error) = dns1123_subdomain_error(prefix) {
            return Some(format!(
                "{key:?}: the prefix {prefix:?} is not a DNS subdomain: {error}"
            ));
        }
    }
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() {
        Some(format!("{key:?}: the name must not be empty"))
    } else if name.len() > 63 {
        Some(format!(
            "{key:?}: the name must be at most 63 characters, got {}",
            name.len()
        ))
    } else if !alphanumeric(name.chars().next()) || !alphanumeric(name.chars().last()) {
        Some(format!(
            "{key:?}: the name must start and end with a letter or digit"
        ))
    } else {
        name.chars()
            .find(|c| !c.is_ascii_alphanumeric() && !matches!(c, '-' | '_' | '.'))
            .map(|c| {
                format!(
                    "{key:?}: {c:?} is not allowed in a label key's name (letters, digits, '-', \
                     '_', '.')"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(key: &str) -> Option<PlacementDomain> {
        Some(PlacementDomain {
            topology_key: key.to_owned(),
            ..PlacementDomain::default()
        })
    }

    const ALL: Shape = Shape {
        multi_node: true,
        pair: true,
        single_node: true,
    };

    #[test]
    fn label_keys_are_qualified_names() {
        for good in [
            "rack",
            "example.com/rack",
            "network.topology.kubernetes.io/block",
            "a_b.c-d",
        ] {
            assert_eq!(label_key_error(good), None, "{good}");
        }
        for (bad, says) in [
            ("", "must not be empty"),
            ("/rack", "prefix before '/' must not be empty"),
            ("Example.com/rack", "not a DNS subdomain"),
            ("example.com/", "name must not be empty"),
            ("-rack", "start and end"),
            ("rack zone", "' ' is not allowed"),
            ("a/b/c", "'/' is not allowed"),
        ] {
            let error = label_key_error(bad).unwrap_or_default();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
        let long = "r".repeat(64);
        assert!(label_key_error(&long).is_some_and(|e| e.contains("at most 63")));
    }

    #[test]
    fn a_pair_domain_narrower_than_the_replica_domain_is_denied_naming_both() {
        let mut findings = Findings::default();
        let placement = Placement {
            replica: domain("network.topology.kubernetes.io/block"),
            pair: domain("network.topology.kubernetes.io/accelerator"),
            spread: None,
        };
        validate(&placement, ALL, &mut findings);
        assert_eq!(findings.violations.len(), 1, "{findings:?}");
        assert_eq!(
            findings.violations[0].field,
            "spec.placement.pair.topologyKey"
        );
        assert!(findings.violations[0].reason.contains("narrower"));

        // Wider, equal, or keys that cannot be compared: allowed.
        for (replica, pair) in [
            (
                "network.topology.kubernetes.io/block",
                "topology.kubernetes.io/zone",
            ),
            ("example.com/rack", "example.com/rack"),
            ("example.com/rack", "example.com/block"),
        ] {
            let mut findings = Findings::default();
            let placement = Placement {
                replica: domain(replica),
                pair: domain(pair),
                spread: None,
            };
            validate(&placement, ALL, &mut findings);
            assert!(findings.is_allowed(), "{replica} {pair}: {findings:?}");
        }
    }

    #[test]
    fn a_bad_key_and_a_skew_below_one_are_denied_at_their_fields() {
        let mut findings = Findings::default();
        let placement = Placement {
            replica: domain("rack/"),
            pair: None,
            spread: Some(PlacementSpread {
                topology_key: "topology.kubernetes.io/zone".into(),
                max_skew: Some(0),
                mode: None,
            }),
        };
        validate(&placement, ALL, &mut findings);
        let fields: Vec<&str> = findings
            .violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.placement.replica.topologyKey",
                "spec.placement.spread.maxSkew"
            ]
        );
    }

    #[test]
    fn only_a_required_replica_domain_can_be_exclusive() {
        let exclusive = |key: &str, mode| {
            Some(PlacementDomain {
                topology_key: key.to_owned(),
                mode,
                exclusive: Some(true),
            })
        };
        let mut findings = Findings::default();
        let placement = Placement {
            replica: exclusive("example.com/rack", Some(PlacementMode::Preferred)),
            pair: exclusive("example.com/block", None),
            spread: None,
        };
        validate(&placement, ALL, &mut findings);
        let fields: Vec<&str> = findings
            .violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.placement.pair.exclusive",
                "spec.placement.replica.exclusive"
            ]
        );
        assert!(findings.violations[1].reason.contains("mode Required"));
        for mode in [None, Some(PlacementMode::Required)] {
            let mut findings = Findings::default();
            let placement = Placement {
                replica: exclusive("example.com/rack", mode),
                ..Placement::default()
            };
            validate(&placement, ALL, &mut findings);
            assert!(findings.is_allowed(), "{mode:?}: {findings:?}");
        }
    }

    #[test]
    fn a_part_with_nothing_to_place_is_a_warning() {
        let mut findings = Findings::default();
        let placement = Placement {
            replica: domain("example.com/rack"),
            pair: domain("example.com/block"),
            spread: None,
        };
        validate(&placement, Shape::default(), &mut findings);
        assert!(findings.is_allowed());
        assert_eq!(findings.warnings.len(), 2, "{findings:?}");
        assert!(findings.warnings[0].starts_with("spec.placement.replica is ignored"));
        assert!(findings.warnings[1].starts_with("spec.placement.pair is ignored"));
    }

    #[test]
    fn defaults_fill_the_modes_and_the_skew() {
        let mut placement = Placement {
            replica: domain("example.com/rack"),
            pair: None,
            spread: Some(PlacementSpread {
                topology_key: "topology.kubernetes.io/zone".into(),
                max_skew: None,
                mode: None,
            }),
        };
        defaults(&mut placement);
        assert_eq!(
            placement.replica.as_ref().and_then(|d| d.mode),
            Some(PlacementMode::Required)
        );
        let spread = placement.spread.as_ref().expect("spread");
        assert_eq!(
            (spread.mode, spread.max_skew),
            (Some(PlacementMode::Required), Some(1))
        );
    }
}
