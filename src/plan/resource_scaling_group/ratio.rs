//! InplaceScaling (DESIGN.md §1.2): a Target follows its Source at a ratio.
//!
//! Two decisions, read top to bottom (a third, propagating replicas through
//! chains of groups, is [`super::propagation`], above the follow graph):
//! 1. [`target_replicas`]: a Target's replicas, `ceil(source × ratio)` computed
//!    exactly (0.1 × 30 is 3, never 4), then clamped by the binding's min/max.
//! 2. [`bindings`]: what each binding of a group points at, an [`Endpoint`] (a
//!    resource, or a role within one), resolving names exactly as
//!    `api::resource_scaling_group::validate` does.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use rust_decimal::Decimal;

use crate::api::limits::MAX_REPLICAS;

use crate::api::resource_scaling_group::{
    BindingRole, ResourceScalingGroupSpec, ScalingStrategyType, TargetResource, declaration_field,
    resolve_binding,
};

/// Where a group's bindings sit, as users write the path.
pub const BINDINGS_FIELD: &str = "spec.scalingStrategy.inplaceConfig.bindings";

/// The replicas of a Target whose Source has `source` replicas:
/// `ceil(source × ratio)`, then at most `max`, then at least `min`, and never
/// more than [`MAX_REPLICAS`], the most replicas a ratio may give.
///
/// Total on every input: a negative source or ratio counts as 0, the result
/// is between 0 and [`MAX_REPLICAS`]. Should `min` exceed `max` (validation
/// denies it), `min` wins: a floor protects availability.
pub fn target_replicas(source: i32, ratio: Decimal, min: Option<i32>, max: Option<i32>) -> i32 {
    let followed = ceil_product(source, ratio);
    let capped = max.map_or(followed, |max| followed.min(max));
    let floored = min.map_or(capped, |min| capped.max(min));
    floored.clamp(0, MAX_REPLICAS)
}

/// `ceil(source × ratio)` in integers, so no rounding ever happens: a decimal
/// is `mantissa / 10^scale` with |mantissa| < 2^96 and scale <= 28, so
/// `source × mantissa` < 2^31 × 2^96 and `10^scale` < 2^94 both fit an i128
/// (the saturating operations therefore never saturate).
pub(crate) fn ceil_product(source: i32, ratio: Decimal) -> i32 {
    if source <= 0 || ratio <= Decimal::ZERO {
        return 0;
    }
    let numerator = i128::from(source).saturating_mul(ratio.mantissa());
    let denominator = 10i128.saturating_pow(ratio.scale());
    // denominator >= 1 (10^0), so neither division can fail or overflow.
    let quotient = numerator
        .checked_div(denominator)
        .unwrap_or(i128::MAX)
        .saturating_add(i128::from(numerator.checked_rem(denominator) != Some(0)));
    i32::try_from(quotient).unwrap_or(i32::MAX)
}

/// What a binding points at: a whole resource (`role` is None) or one role of
/// a resource with roles (RoleBasedGroup, InferenceService).
///
/// Identity is (API group, kind, name, role): the same object is the same
/// endpoint whatever version its apiVersion is written with (`apps/v1` and
/// `apps/v1beta2` name one Deployment), so equality, ordering and hashing
/// ignore the version. Kinds, names and roles compare case-sensitively, as the
/// API server does; a binding's case-only match was already resolved to the
/// declared spelling by [`bindings`].
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub role: Option<String>,
}

impl Endpoint {
    /// The API group: `apps` for `apps/v1`, empty for the core group (`v1`).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _version)| group)
    }

    fn identity(&self) -> (&str, &str, &str, Option<&str>) {
        (self.group(), &self.kind, &self.name, self.role.as_deref())
    }
}

impl PartialEq for Endpoint {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Endpoint {}

impl PartialOrd for Endpoint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Endpoint {
    fn cmp(&self, other: &Self) -> Ordering {
        self.identity().cmp(&other.identity())
    }
}

impl Hash for Endpoint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

/// `prefill` for a resource, `rolebasedgroup1/Decode` for a role of one
/// (object names cannot contain `/`, so this never reads two ways).
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.role {
            None => write!(f, "{}", self.name),
            Some(role) => write!(f, "{}/{role}", self.name),
        }
    }
}

/// One group's bindings, resolved: the Source and every Target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bindings {
    pub source: Endpoint,
    /// Index of the Source in `spec.scalingStrategy.inplaceConfig.bindings`.
    pub source_binding: usize,
    /// In binding order.
    pub targets: Vec<TargetBinding>,
}

/// A Target and how it follows the Source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetBinding {
    /// Index in `spec.scalingStrategy.inplaceConfig.bindings`, for field paths.
    pub binding: usize,
    pub endpoint: Endpoint,
    /// The ratio; for a band, its lower end (`minRatio`).
    pub ratio: Decimal,
    /// A band's upper end (`maxRatio`); None for a ratio.
    pub max_ratio: Option<Decimal>,
    pub min: Option<i32>,
    pub max: Option<i32>,
}

impl TargetBinding {
    /// This Target's replicas when the Source has `source` (a band's lower
    /// end).
    pub fn replicas(&self, source: i32) -> i32 {
        target_replicas(source, self.ratio, self.min, self.max)
    }

    /// Whether the Target's own autoscaler scales it within a band.
    pub fn is_band(&self) -> bool {
        self.max_ratio.is_some()
    }

    /// The fewest and most replicas the Target may have when the Source has
    /// `source`: `ceil(source × minRatio)` and `ceil(source × maxRatio)`,
    /// each within min and max. Both ends round up, so a band whose ends are
    /// equal gives exactly what that ratio gives. Ordered, even for ends
    /// given the wrong way round (validation denies it).
    pub fn bounds(&self, source: i32) -> (i32, i32) {
        let low = self.replicas(source);
        let high = target_replicas(
            source,
            self.max_ratio.unwrap_or(self.ratio),
            self.min,
            self.max,
        );
        (low.min(high), low.max(high))
    }

    /// What the Target will have when the Source has `source` and the
    /// Target `current`: its ratio's replicas, or, in a band, `current`
    /// (what its autoscaler asked) kept within the band. None for a band
    /// Target whose replicas are unknown.
    pub fn follows(&self, source: i32, current: Option<i32>) -> Option<i32> {
        if !self.is_band() {
            return Some(self.replicas(source));
        }
        let (low, high) = self.bounds(source);
        current.map(|asked| asked.clamp(low, high))
    }
}

/// Resolves an InplaceScaling group's bindings. A binding names a role (by
/// `subResources[].roleName`) or a resource without roles (by `name`); a
/// name that matches only up to case resolves to the declared spelling
/// (seed 000: binding `decode`, role `Decode`). The error names the first
/// field that stops resolution; `validate` reports all of them.
pub fn bindings(spec: &ResourceScalingGroupSpec) -> Result<Bindings, String> {
    let strategy = &spec.scaling_strategy;
    if strategy.type_ != ScalingStrategyType::InplaceScaling {
        return Err(format!(
            "spec.scalingStrategy.type: {:?} has no bindings; only InplaceScaling binds Targets to a Source",
            strategy.type_
        ));
    }
    let Some(inplace) = &strategy.inplace_config else {
        return Err(
            "spec.scalingStrategy.inplaceConfig: required when type is InplaceScaling".into(),
        );
    };
    let mut source: Option<(usize, Endpoint)> = None;
    let mut targets = Vec::new();
    for (i, binding) in inplace.bindings.iter().enumerate() {
        let here = format!("{BINDINGS_FIELD}[{i}]");
        let endpoint = endpoint(&spec.target_resources, &binding.name, &here)?;
        match binding.role {
            BindingRole::Source => {
                if let Some((first, _)) = &source {
                    return Err(format!(
                        "{here}.role: only one Source is allowed, {BINDINGS_FIELD}[{first}] is already the Source"
                    ));
                }
                source = Some((i, endpoint));
            }
            BindingRole::Target => {
                let (ratio, max_ratio) = match (
                    &binding.ratio,
                    &binding.min_ratio,
                    &binding.max_ratio,
                ) {
                    (Some(ratio), None, None) => (ratio.value(), None),
                    (None, Some(low), Some(high)) => {
                        if endpoint.kind != "ScaleView" || endpoint.group() != "fusioninfer.io" {
                            return Err(format!(
                                "{here}.minRatio: a band's Target must be a ScaleView, not {} {}",
                                endpoint.kind, endpoint
                            ));
                        }
                        (low.value(), Some(high.value()))
                    }
                    (None, None, None) => {
                        return Err(format!(
                            "{here}.ratio: required for a Target: replicas become ceil(source replicas x ratio)"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "{here}: give either ratio or both minRatio and maxRatio"
                        ));
                    }
                };
                targets.push(TargetBinding {
                    binding: i,
                    endpoint,
                    ratio,
                    max_ratio,
                    min: binding.min,
                    max: binding.max,
                });
            }
        }
    }
    let (source_binding, source) = source.ok_or_else(|| {
        format!("{BINDINGS_FIELD}: needs exactly one binding with role Source, found none")
    })?;
    Ok(Bindings {
        source,
        source_binding,
        targets,
    })
}

/// The endpoint a binding name points at, resolved by the same rule as
/// validation ([`resolve_binding`]).
fn endpoint(targets: &[TargetResource], name: &str, here: &str) -> Result<Endpoint, String> {
    let declaration = resolve_binding(targets, name)
        .map_err(|reason| format!("{here}.name: {reason}"))?
        .declaration();
    let target = targets.get(declaration.resource);
    let object = target.and_then(TargetResource::object).ok_or_else(|| {
        format!(
            "{here}.name: {name:?} is declared at {} without a complete object (apiVersion and kind, or targetRef)",
            declaration_field(declaration)
        )
    })?;
    let role = declaration
        .role
        .and_then(|r| target.and_then(|t| t.sub_resources.get(r)))
        .map(|sub| sub.role_name.clone());
    Ok(Endpoint {
        api_version: object.api_version.to_owned(),
        kind: object.kind.to_owned(),
        name: object.name.to_owned(),
        role,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::resource_scaling_group::{Ratio, validate};
    use proptest::prelude::*;
    use serde_json::json;

    pub(crate) fn ratio(value: serde_json::Value) -> Decimal {
        serde_json::from_value::<Ratio>(value)
            .expect("test ratio parses")
            .value()
    }

    #[test]
    fn replicas_table() {
        // (source, ratio as written, min, max, expected)
        let cases = [
            (10, json!(1), None, None, 10),
            (10, json!(2), None, None, 20),
            (10, json!(1.0), None, None, 10),
            (10, json!("2.0"), None, None, 20),
            (30, json!(0.1), None, None, 3),
            (30, json!("0.1"), None, None, 3),
            (3, json!(0.25), None, None, 1),
            (3, json!("0.25"), None, None, 1),
            (4, json!(0.25), None, None, 1),
            (5, json!(0.25), None, None, 2),
            (3, json!(1.5), None, None, 5),
            (2, json!(1.5), None, None, 3),
            (7, json!("1e-1"), None, None, 1),
            (1, json!("0.0000000000000000000000000001"), None, None, 1),
            (0, json!(4), None, None, 0),
            (5, json!(0), None, None, 0),
            (5, json!("0.0"), None, None, 0),
            (0, json!(0.5), Some(1), None, 1),
            (10, json!(2), None, Some(15), 15),
            (10, json!(2), Some(25), Some(30), 25),
            (10, json!(2), Some(1), Some(30), 20),
            (1, json!(0.1), Some(2), Some(2), 2),
            // Invalid inputs still give an answer and never panic.
            (-5, json!(2), None, None, 0),
            (5, json!(-2), None, None, 0),
            (5, json!(1), Some(4), Some(2), 4),
            (5, json!(1), None, Some(-3), 0),
            (5, json!(1), Some(-3), None, 5),
            // Never more than the limit of what a ratio gives.
            (i32::MAX, json!(2), None, None, MAX_REPLICAS),
            (i32::MAX, json!(1), None, None, MAX_REPLICAS),
            (i32::MAX, json!(0.5), None, None, MAX_REPLICAS),
            (
                i32::MAX,
                json!("79228162514264337593543950335"),
                None,
                None,
                MAX_REPLICAS,
            ),
            (i32::MAX, json!(2), None, Some(40), 40),
            (5_000, json!(2), None, None, MAX_REPLICAS),
            (5_001, json!(2), None, None, MAX_REPLICAS),
            (4_999, json!(2), None, None, 9_998),
            (1, json!(1), Some(i32::MAX), None, MAX_REPLICAS),
        ];
        for (source, written, min, max, expected) in cases {
            assert_eq!(
                target_replicas(source, ratio(written.clone()), min, max),
                expected,
                "source {source}, ratio {written}, min {min:?}, max {max:?}"
            );
        }
    }

    #[test]
    fn rounding_is_exact_where_binary_floats_are_not() {
        // 0.1 * 30 is 3.0000000000000004 in f64, whose ceiling would be 4.
        assert_eq!(
            target_replicas(30, ratio(json!(0.1)), None, None),
            3,
            "ceil of an exact 3"
        );
        // The smallest excess above an integer still rounds up.
        let just_above_one = Decimal::from_i128_with_scale(10i128.pow(28) + 1, 28);
        assert_eq!(
            target_replicas(MAX_REPLICAS - 1, just_above_one, None, None),
            MAX_REPLICAS
        );
        assert_eq!(target_replicas(1_000, just_above_one, None, None), 1_001);
    }

    /// Any decimal rust_decimal can hold, of either sign and any scale.
    fn any_decimal() -> impl Strategy<Value = Decimal> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<bool>(),
            0u32..=28,
        )
            .prop_map(|(lo, mid, hi, negative, scale)| {
                Decimal::from_parts(lo, mid, hi, negative, scale)
            })
    }

    proptest! {
        #[test]
        fn never_negative_and_within_valid_clamps(
            source in any::<i32>(),
            ratio in any_decimal(),
            min in proptest::option::of(any::<i32>()),
            max in proptest::option::of(any::<i32>()),
        ) {
            let replicas = target_replicas(source, ratio, min, max);
            prop_assert!((0..=MAX_REPLICAS).contains(&replicas));
            if let Some(max) = max && min.is_none_or(|min| min <= max) && max >= 0 {
                prop_assert!(replicas <= max);
            }
            if let Some(min) = min {
                prop_assert!(replicas >= min.min(MAX_REPLICAS));
            }
        }

        #[test]
        fn monotonic_in_the_source(
            a in any::<i32>(),
            b in any::<i32>(),
            ratio in any_decimal(),
            min in proptest::option::of(any::<i32>()),
            max in proptest::option::of(any::<i32>()),
        ) {
            let (low, high) = (a.min(b), a.max(b));
            prop_assert!(
                target_replicas(low, ratio, min, max) <= target_replicas(high, ratio, min, max)
            );
        }

        #[test]
        fn integer_ratios_multiply_exactly(source in 0i32..=i32::MAX, k in 0i64..=100_000) {
            let expected = i32::try_from((i64::from(source) * k).min(i64::from(MAX_REPLICAS)))
                .unwrap_or(MAX_REPLICAS);
            prop_assert_eq!(target_replicas(source, Decimal::from(k), None, None), expected);
            // However the integer is written: 2, 2.0, 2.000.
            let rescaled = Decimal::from_i128_with_scale(i128::from(k) * 1000, 3);
            prop_assert_eq!(target_replicas(source, rescaled, None, None), expected);
        }

        #[test]
        fn is_the_ceiling_of_the_exact_product(
            source in 0i32..1_000_000,
            mantissa in 0i64..100_000_000,
            scale in 0u32..=8,
        ) {
            // Here the product fits rust_decimal without rounding, so its
            // arithmetic is an independent oracle.
            let ratio = Decimal::new(mantissa, scale);
            let exact = Decimal::from(source) * ratio;
            let replicas = target_replicas(source, ratio, None, None);
            let expected = i32::try_from(exact.ceil().mantissa() / 10i128.pow(exact.ceil().scale()))
                .unwrap_or(i32::MAX)
                .min(MAX_REPLICAS);
            prop_assert_eq!(replicas, expected);
            if replicas < MAX_REPLICAS {
                prop_assert!(Decimal::from(replicas) >= exact);
                prop_assert!(Decimal::from(replicas) - Decimal::ONE < exact);
            }
        }
    }

    pub(crate) fn spec(value: serde_json::Value) -> ResourceScalingGroupSpec {
        serde_json::from_value(value).expect("test spec parses")
    }

    /// Seed 000's InplaceScaling example, as written.
    pub(crate) fn seed_inplace() -> serde_json::Value {
        json!({
            "targetResources": [
                {"name": "rolebasedgroup1", "namespace": "ai", "apiVersion": "workloads.x-k8s.io/v1alpha1",
                 "kind": "RoleBasedGroup", "subResources": [{"roleName": "prefill"}, {"roleName": "Decode"}]},
                {"name": "router", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "router", "role": "Source"},
                {"name": "prefill", "role": "Target", "ratio": 1.0},
                {"name": "decode", "role": "Target", "ratio": 2.0},
            ]}}
        })
    }

    pub(crate) fn endpoint(
        api_version: &str,
        kind: &str,
        name: &str,
        role: Option<&str>,
    ) -> Endpoint {
        Endpoint {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            role: role.map(Into::into),
        }
    }

    pub(crate) fn deployment(name: &str) -> Endpoint {
        endpoint("apps/v1", "Deployment", name, None)
    }

    pub(crate) fn rbg_role(role: &str) -> Endpoint {
        endpoint(
            "workloads.x-k8s.io/v1alpha1",
            "RoleBasedGroup",
            "rolebasedgroup1",
            Some(role),
        )
    }

    #[test]
    fn seed_bindings_resolve() {
        let resolved = bindings(&spec(seed_inplace())).expect("seed resolves");
        assert_eq!(resolved.source, deployment("router"));
        assert_eq!(resolved.source_binding, 0);
        let targets: Vec<(usize, &Endpoint, Decimal)> = resolved
            .targets
            .iter()
            .map(|t| (t.binding, &t.endpoint, t.ratio))
            .collect();
        assert_eq!(
            targets,
            [
                (1, &rbg_role("prefill"), Decimal::ONE),
                (2, &rbg_role("Decode"), Decimal::TWO),
            ]
        );
        // The case-only match resolves to the declared spelling.
        assert_eq!(resolved.targets[1].endpoint.role.as_deref(), Some("Decode"));
        assert_eq!(
            resolved.targets[1].endpoint.to_string(),
            "rolebasedgroup1/Decode"
        );
        // Seed 000: router at 10 gives prefill 10 and decode 20.
        assert_eq!(resolved.targets[0].replicas(10), 10);
        assert_eq!(resolved.targets[1].replicas(10), 20);
    }

    #[test]
    fn target_ref_shape_and_limits_resolve() {
        let value = json!({
            "targetResources": [
                {"name": "front", "targetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "router-sts"}},
                {"name": "back", "targetRef": {"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView", "name": "decode-view"}},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "back", "role": "Target", "ratio": "0.5", "min": 1, "max": 8},
                {"name": "front", "role": "Source"},
            ]}}
        });
        let resolved = bindings(&spec(value)).expect("resolves");
        assert_eq!(
            resolved.source,
            endpoint("apps/v1", "StatefulSet", "router-sts", None)
        );
        assert_eq!(resolved.source_binding, 1);
        let target = &resolved.targets[0];
        assert_eq!(target.binding, 0);
        assert_eq!(
            target.endpoint,
            endpoint("fusioninfer.io/v1alpha1", "ScaleView", "decode-view", None)
        );
        assert_eq!((target.min, target.max), (Some(1), Some(8)));
        assert_eq!(target.replicas(0), 1);
        assert_eq!(target.replicas(5), 3);
        assert_eq!(target.replicas(100), 8);
    }

    #[test]
    fn unresolvable_bindings_name_the_field() {
        let at = BINDINGS_FIELD;
        // The seed with the value at a JSON pointer replaced.
        let set = |pointer: &str, to: serde_json::Value| {
            let mut value = seed_inplace();
            *value.pointer_mut(pointer).expect("test pointer exists") = to;
            bindings(&spec(value)).expect_err("does not resolve")
        };
        let binding = |field: &str| format!("/scalingStrategy/inplaceConfig/bindings/{field}");
        let cases = [
            (
                set(&binding("1/name"), json!("encode")),
                format!("{at}[1].name: \"encode\" names no role or resource (bindable: Decode, prefill, router)"),
            ),
            (
                set(&binding("1/name"), json!("rolebasedgroup1")),
                format!("{at}[1].name: \"rolebasedgroup1\" has subResources; bind one of its roles instead: prefill, Decode"),
            ),
            (
                set(&binding("1/role"), json!("Source")),
                format!("{at}[1].role: only one Source is allowed, {at}[0] is already the Source"),
            ),
            (
                set(&binding("0/role"), json!("Target")),
                format!("{at}[0].ratio: required for a Target: replicas become ceil(source replicas x ratio)"),
            ),
            (
                set("/targetResources/0/subResources/0/roleName", json!("decode")),
                format!("{at}[1].name: \"prefill\" names no role or resource (bindable: Decode, decode, router)"),
            ),
            (
                set("/targetResources/0/subResources/1/roleName", json!("router")),
                format!("{at}[0].name: \"router\" is declared more than once (spec.targetResources[0].subResources[1].roleName, spec.targetResources[1].name): a binding name must name one resource or role"),
            ),
            (
                set("/targetResources/1/kind", serde_json::Value::Null),
                format!("{at}[0].name: \"router\" is declared at spec.targetResources[1].name without a complete object (apiVersion and kind, or targetRef)"),
            ),
            (
                set("/scalingStrategy/inplaceConfig", serde_json::Value::Null),
                "spec.scalingStrategy.inplaceConfig: required when type is InplaceScaling".to_owned(),
            ),
            (
                set("/scalingStrategy/type", json!("GroupReplication")),
                "spec.scalingStrategy.type: GroupReplication has no bindings; only InplaceScaling binds Targets to a Source".to_owned(),
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(error, expected);
        }
        // Two roles that differ only in case make a case-folded name ambiguous.
        let mut ambiguous = seed_inplace();
        ambiguous["targetResources"][0]["subResources"][0]["roleName"] = json!("DECODE");
        ambiguous["scalingStrategy"]["inplaceConfig"]["bindings"][1]["name"] = json!("router2");
        ambiguous["targetResources"]
            .as_array_mut()
            .expect("array")
            .push(json!({"name": "router2", "apiVersion": "apps/v1", "kind": "Deployment"}));
        assert_eq!(
            bindings(&spec(ambiguous)).expect_err("ambiguous"),
            format!(
                "{at}[2].name: \"decode\" matches several names up to case (DECODE, Decode); write one exactly"
            )
        );
        let mut none = seed_inplace();
        none["scalingStrategy"]["inplaceConfig"]["bindings"][0] =
            json!({"name": "router", "role": "Target", "ratio": 1});
        assert_eq!(
            bindings(&spec(none)).expect_err("no Source"),
            format!("{at}: needs exactly one binding with role Source, found none")
        );
    }

    /// Small specs over a few names that differ in case, so exact, case-only,
    /// ambiguous, clashing and unknown names all come up.
    fn small_spec() -> impl Strategy<Value = serde_json::Value> {
        let name = prop::sample::select(vec!["a", "A", "b", "B", "rbg", "c"]);
        let resource =
            (name.clone(), prop::collection::vec(name.clone(), 0..3)).prop_map(|(name, roles)| {
                let kind = if roles.is_empty() {
                    "Deployment"
                } else {
                    "RoleBasedGroup"
                };
                let roles: Vec<serde_json::Value> =
                    roles.iter().map(|r| json!({"roleName": r})).collect();
                json!({"name": name, "apiVersion": "apps/v1", "kind": kind, "subResources": roles})
            });
        let binding = (name, any::<bool>()).prop_map(|(name, source)| {
            if source {
                json!({"name": name, "role": "Source"})
            } else {
                json!({"name": name, "role": "Target", "ratio": "1.5"})
            }
        });
        (
            prop::collection::vec(resource, 1..4),
            prop::collection::vec(binding, 1..4),
        )
            .prop_map(|(resources, bindings)| {
                json!({
                    "targetResources": resources,
                    "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": bindings}}
                })
            })
    }

    proptest! {
        #[test]
        fn resolves_names_as_validation_does(value in small_spec()) {
            let spec = spec(value);
            let findings = validate(&spec, "ai");
            let resolved = bindings(&spec);
            if let Err(error) = &resolved {
                // Whatever stops resolution is something validate() denies.
                prop_assert!(!findings.is_allowed(), "{}", error);
            }
            if findings.is_allowed() {
                let resolved = resolved.expect("a valid group resolves");
                let mut by_binding: BTreeMap<usize, &Endpoint> =
                    resolved.targets.iter().map(|t| (t.binding, &t.endpoint)).collect();
                by_binding.insert(resolved.source_binding, &resolved.source);
                let inplace = spec.scaling_strategy.inplace_config.as_ref().expect("inplace");
                for (i, binding) in inplace.bindings.iter().enumerate() {
                    let endpoint = by_binding[&i];
                    let declared = endpoint.role.as_deref().unwrap_or(&endpoint.name);
                    // validate() warns exactly when the spelling differs, and
                    // names the spelling Tandem uses.
                    let warning = findings.warnings.iter().find(|w| w.starts_with(&format!("{BINDINGS_FIELD}[{i}].name:")));
                    match warning {
                        Some(warning) => prop_assert!(warning.ends_with(&format!("Tandem uses {declared:?}")), "{}", warning),
                        None => prop_assert_eq!(declared, binding.name.as_str()),
                    }
                }
            }
        }
    }

    #[test]
    fn endpoints_are_the_same_object_whatever_the_version() {
        let v1 = deployment("prefill");
        let beta = endpoint("apps/v1beta2", "Deployment", "prefill", None);
        assert_eq!(v1, beta);
        assert_eq!(v1.cmp(&beta), Ordering::Equal);
        let hash = |e: &Endpoint| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            e.hash(&mut hasher);
            hasher.finish()
        };
        assert_eq!(hash(&v1), hash(&beta));
        assert_eq!(endpoint("v1", "Service", "x", None).group(), "");
        assert_eq!(v1.group(), "apps");
        for different in [
            endpoint("extensions/v1beta1", "Deployment", "prefill", None),
            endpoint("apps/v1", "StatefulSet", "prefill", None),
            deployment("Prefill"),
            endpoint("apps/v1", "Deployment", "prefill", Some("prefill")),
        ] {
            assert_ne!(v1, different, "{different:?}");
        }
    }
}
