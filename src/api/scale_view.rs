//! ScaleView (`fusioninfer.io/v1alpha1`, seed 002 generalised): a scale
//! subresource over some roles of one component type of an InferenceService, so
//! `kubectl scale`, HPA and KEDA can drive a group of roles split by priority.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::inference_service::{ComponentType, InferenceService};
use super::limits::{self, MAX_PRIORITY, MAX_REPLICAS, MAX_ROLES, MAX_VIEW_REPLICAS};
use super::{Findings, dns1123_label_error};

// Each printcolumn(...) repeats name/type_/json_path by design; clippy reads
// the repeated keys as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "fusioninfer.io",
    version = "v1alpha1",
    kind = "ScaleView",
    plural = "scaleviews",
    shortname = "sview",
    category = "tandem",
    namespaced,
    status = "ScaleViewStatus",
    derive = "PartialEq",
    doc = "A scale subresource over roles of one component type of an InferenceService, split over them by priority.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.targetRef.name"),
    printcolumn(
        name = "Component",
        type_ = "string",
        json_path = ".spec.targetRef.componentType"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(
        name = "Applied",
        type_ = "integer",
        json_path = ".status.appliedReplicas"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Locked", type_ = "boolean", json_path = ".status.locked"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.targetRef == oldSelf.targetRef",
        "message": "spec.targetRef is immutable: create a new ScaleView instead",
    },
    {
        "rule": "(has(self.scalePolicy) ? size(self.scalePolicy) : 0) == 0 && (has(oldSelf.scalePolicy) ? size(oldSelf.scalePolicy) : 0) == 0 || has(self.scalePolicy) && has(oldSelf.scalePolicy) && self.scalePolicy.all(p, oldSelf.scalePolicy.exists(o, o.group == p.group)) && oldSelf.scalePolicy.all(o, self.scalePolicy.exists(p, p.group == o.group))",
        "message": "the set of groups (spec.scalePolicy[].group) is immutable; priorities and constraints may change",
    },
]))]
pub struct ScaleViewSpec {
    /// The InferenceService (same namespace) and the component type whose roles
    /// this view scales. Immutable.
    pub target_ref: ScaleViewTarget,

    /// Replicas over all groups of the view; the scale subresource's
    /// spec.replicas. Left out, it starts at the groups' current sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_VIEW_REPLICAS))]
    pub replicas: Option<i32>,

    /// true: a total outside [sum of mins, sum of maxes] is rejected, also on
    /// /scale. false (default): it is clamped, so an autoscaler is never refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,

    /// The groups (roles of the target with the view's component type) and how
    /// replicas are split over them. The set of groups is immutable.
    #[serde(default)]
    #[schemars(length(max = MAX_ROLES))]
    pub scale_policy: Vec<ScalePolicy>,
}

impl ScaleViewSpec {
    pub fn is_strict(&self) -> bool {
        self.strict.unwrap_or(false)
    }

    /// The range a total must fall in: [sum of mins, sum of maxes], where a
    /// group without a max counts as [`MAX_REPLICAS`], the most a role may
    /// have. Sums of i32s in an i64 cannot overflow.
    pub fn replica_range(&self) -> (i64, i64) {
        let min = self
            .scale_policy
            .iter()
            .fold(0i64, |sum, p| sum.saturating_add(i64::from(p.min())));
        let max = self.scale_policy.iter().fold(0i64, |sum, p| {
            sum.saturating_add(i64::from(p.max().unwrap_or(MAX_REPLICAS)))
        });
        (min, max)
    }

    pub fn groups(&self) -> BTreeSet<&str> {
        self.scale_policy.iter().map(|p| p.group.as_str()).collect()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleViewTarget {
    /// Name of the InferenceService, in the view's namespace.
    pub name: String,
    /// The component type of the roles this view scales.
    pub component_type: ComponentType,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalePolicy {
    /// A role of the target whose componentType is the view's.
    // The length bound is what lets the API server accept the CRD: the CEL
    // rule keeping the set of groups immutable compares every pair of group
    // names, and without it the estimated cost is 64× over the budget
    // (seen on a real kube-apiserver; role names are DNS-1123 labels).
    #[schemars(length(max = 63))]
    pub group: String,
    /// 0-10 (default 0). Higher priorities get replicas first and lose them last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_PRIORITY))]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<Constraints>,
}

impl ScalePolicy {
    pub const DEFAULT_PRIORITY: i32 = 0;

    pub fn priority(&self) -> i32 {
        self.priority.unwrap_or(Self::DEFAULT_PRIORITY)
    }

    pub fn min(&self) -> i32 {
        self.constraints.as_ref().and_then(|c| c.min).unwrap_or(0)
    }

    /// None: no upper bound.
    pub fn max(&self) -> Option<i32> {
        self.constraints.as_ref().and_then(|c| c.max)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Constraints {
    /// Fewest replicas of this group (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub min: Option<i32>,
    /// Most replicas of this group (default: 10000, the most a role may have).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub max: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleViewStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Locked, Clamped; ScaleRefused after the webhook refused a
    /// write to `/scale` at this generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Ready replicas over all groups (the scale subresource's status.replicas).
    #[serde(default)]
    pub replicas: i32,

    /// Label selector of exactly the pods of the view's groups, for HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// Whether this view holds the lock on its groups in the target's status.
    #[serde(default)]
    pub locked: bool,

    /// The split: replicas the view set for each group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["group"]))]
    pub groups: Vec<GroupReplicas>,

    /// The replicas the view applied: what was asked (`spec.replicas`),
    /// clamped by the groups' constraints and by its band, if any. The
    /// Clamped condition says why they differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_replicas: Option<i32>,

    /// The band a ResourceScalingGroup keeps this view in (a binding with
    /// `minRatio` and `maxRatio` whose Target is the view), as applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<ViewBand>,
}

/// The band a view's replicas are kept in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ViewBand {
    /// The ResourceScalingGroup whose binding gives the band.
    pub resource_scaling_group: String,
    pub min_replicas: i32,
    pub max_replicas: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupReplicas {
    pub group: String,
    pub replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
}

pub fn defaults(spec: &mut ScaleViewSpec) {
    spec.strict.get_or_insert(false);
    for policy in &mut spec.scale_policy {
        policy.priority.get_or_insert(ScalePolicy::DEFAULT_PRIORITY);
    }
}

/// Everything that makes a single ScaleView unusable.
pub fn validate(spec: &ScaleViewSpec) -> Findings {
    let mut findings = Findings::default();
    if let Some(reason) = dns1123_label_error(&spec.target_ref.name) {
        findings.deny("spec.targetRef.name", reason);
    }
    if spec.target_ref.component_type == ComponentType::Router {
        findings.deny(
            "spec.targetRef.componentType",
            "must be a serving component type (worker, prefiller or decoder): router replicas are not model servers",
        );
    }
    if spec.scale_policy.len() > MAX_ROLES {
        findings.deny(
            "spec.scalePolicy",
            format!(
                "must list at most {MAX_ROLES} groups, got {}",
                spec.scale_policy.len()
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, policy) in spec.scale_policy.iter().enumerate() {
        let at = format!("spec.scalePolicy[{i}]");
        if let Some(reason) = dns1123_label_error(&policy.group) {
            findings.deny(format!("{at}.group"), reason);
        } else if !seen.insert(policy.group.as_str()) {
            findings.deny(
                format!("{at}.group"),
                format!("duplicate group {:?}", policy.group),
            );
        }
        if let Some(priority) = policy.priority
            && !(0..=MAX_PRIORITY).contains(&priority)
        {
            findings.deny(
                format!("{at}.priority"),
                format!("must be between 0 and {MAX_PRIORITY}, got {priority}"),
            );
        }
        let (min, max) = (policy.min(), policy.max());
        if min < 0 {
            findings.deny(
                format!("{at}.constraints.min"),
                format!("must be >= 0, got {min}"),
            );
        } else if min > MAX_REPLICAS {
            findings.deny(
                format!("{at}.constraints.min"),
                limits::over(MAX_REPLICAS, min),
            );
        }
        if let Some(max) = max {
            if max < 0 {
                findings.deny(
                    format!("{at}.constraints.max"),
                    format!("must be >= 0, got {max}"),
                );
            } else if max > MAX_REPLICAS {
                findings.deny(
                    format!("{at}.constraints.max"),
                    limits::over(MAX_REPLICAS, max),
                );
            } else if max < min {
                findings.deny(
                    format!("{at}.constraints.max"),
                    format!("must be >= constraints.min ({min}), got {max}"),
                );
            }
        }
    }
    if let Some(replicas) = spec.replicas {
        validate_total(spec, i64::from(replicas), "spec.replicas", &mut findings);
    }
    findings
}

/// A total of replicas for this view: never negative, and in strict mode inside
/// [sum of mins, sum of maxes]. Shared by the view itself and by `/scale` writes.
pub fn validate_total(spec: &ScaleViewSpec, replicas: i64, field: &str, findings: &mut Findings) {
    if replicas < 0 {
        findings.deny(field, format!("must be >= 0, got {replicas}"));
        return;
    }
    if replicas > i64::from(MAX_VIEW_REPLICAS) {
        findings.deny(field, limits::over(MAX_VIEW_REPLICAS, replicas));
        return;
    }
    if !spec.is_strict() {
        return;
    }
    let (min, max) = spec.replica_range();
    if replicas < min || replicas > max {
        let unbounded = if spec.scale_policy.iter().any(|p| p.max().is_none()) {
            format!(", a group without a max counting as {MAX_REPLICAS}")
        } else {
            String::new()
        };
        findings.deny(
            field,
            format!(
                "must be within [{min}, {max}] (the sum of the groups' min and max constraints{unbounded}) because spec.strict is true, got {replicas}"
            ),
        );
    }
}

/// What the view's target must be: an InferenceService in the view's namespace
/// whose roles of the view's component type include every group.
pub fn validate_target(spec: &ScaleViewSpec, target: Option<&InferenceService>) -> Findings {
    let mut findings = Findings::default();
    let wanted = spec.target_ref.component_type;
    let Some(target) = target else {
        findings.deny(
            "spec.targetRef.name",
            format!(
                "InferenceService {:?} not found in this namespace",
                spec.target_ref.name
            ),
        );
        return findings;
    };
    let roles: Vec<&str> = target
        .spec
        .roles
        .iter()
        .filter(|r| r.component_type == wanted)
        .map(|r| r.name.as_str())
        .collect();
    for (i, policy) in spec.scale_policy.iter().enumerate() {
        if roles.contains(&policy.group.as_str()) {
            continue;
        }
        let other = target.spec.roles.iter().find(|r| r.name == policy.group);
        let reason = match other {
            Some(role) => format!(
                "role {:?} of {} is a {}, not a {wanted}",
                policy.group, spec.target_ref.name, role.component_type
            ),
            None => format!(
                "{} has no role {:?}; its {wanted} roles are: {}",
                spec.target_ref.name,
                policy.group,
                if roles.is_empty() {
                    "none".to_owned()
                } else {
                    roles.join(", ")
                }
            ),
        };
        findings.deny(format!("spec.scalePolicy[{i}].group"), reason);
    }
    findings
}

/// What may not change once a view exists: its target and its set of groups.
pub fn validate_update(old: &ScaleViewSpec, new: &ScaleViewSpec) -> Findings {
    let mut findings = Findings::default();
    if old.target_ref != new.target_ref {
        findings.deny(
            "spec.targetRef",
            format!(
                "is immutable: was {}/{}, got {}/{}; create a new ScaleView instead",
                old.target_ref.name,
                old.target_ref.component_type,
                new.target_ref.name,
                new.target_ref.component_type
            ),
        );
    }
    let (old_groups, new_groups) = (old.groups(), new.groups());
    if old_groups != new_groups {
        let added: Vec<_> = new_groups.difference(&old_groups).collect();
        let removed: Vec<_> = old_groups.difference(&new_groups).collect();
        findings.deny(
            "spec.scalePolicy",
            format!(
                "the set of groups is immutable (added {added:?}, removed {removed:?}); priorities and constraints may change"
            ),
        );
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> ScaleViewSpec {
        serde_json::from_value(value).expect("test spec parses")
    }

    fn spot() -> serde_json::Value {
        json!({
            "targetRef": {"name": "spot-decode", "componentType": "decoder"},
            "scalePolicy": [
                {"group": "decode-ondemand", "priority": 1, "constraints": {"min": 1, "max": 2}},
                {"group": "decode-spot", "constraints": {"max": 4}},
            ]
        })
    }

    fn denial(value: serde_json::Value) -> String {
        let findings = validate(&spec(value));
        assert!(!findings.is_allowed(), "expected a denial");
        findings.denial_message()
    }

    #[test]
    fn the_spot_view_is_valid() {
        assert!(validate(&spec(spot())).is_allowed());
    }

    #[test]
    fn priority_is_zero_to_ten() {
        for (priority, ok) in [(0, true), (10, true), (11, false), (-1, false)] {
            let mut value = spot();
            value["scalePolicy"][0]["priority"] = json!(priority);
            let findings = validate(&spec(value));
            assert_eq!(findings.is_allowed(), ok, "priority {priority}");
            if !ok {
                assert_eq!(
                    findings.denial_message(),
                    format!(
                        "spec.scalePolicy[0].priority: must be between 0 and 10, got {priority}"
                    )
                );
            }
        }
    }

    #[test]
    fn min_must_not_exceed_max() {
        let mut value = spot();
        value["scalePolicy"][1]["constraints"] = json!({"min": 3, "max": 2});
        assert_eq!(
            denial(value),
            "spec.scalePolicy[1].constraints.max: must be >= constraints.min (3), got 2"
        );
        let mut negative = spot();
        negative["scalePolicy"][1]["constraints"] = json!({"min": -1});
        assert_eq!(
            denial(negative),
            "spec.scalePolicy[1].constraints.min: must be >= 0, got -1"
        );
    }

    #[test]
    fn groups_are_unique() {
        let mut value = spot();
        value["scalePolicy"][1]["group"] = json!("decode-ondemand");
        assert_eq!(
            denial(value),
            "spec.scalePolicy[1].group: duplicate group \"decode-ondemand\""
        );
    }

    #[test]
    fn routers_cannot_be_viewed() {
        let mut value = spot();
        value["targetRef"]["componentType"] = json!("router");
        assert!(
            denial(value)
                .starts_with("spec.targetRef.componentType: must be a serving component type")
        );
    }

    #[test]
    fn strict_range_is_sum_of_mins_to_sum_of_maxes() {
        let mut value = spot();
        value["strict"] = json!(true);
        for (replicas, ok) in [(0, false), (1, true), (6, true), (7, false)] {
            value["replicas"] = json!(replicas);
            let findings = validate(&spec(value.clone()));
            assert_eq!(findings.is_allowed(), ok, "replicas {replicas}");
            if !ok {
                assert_eq!(
                    findings.denial_message(),
                    format!(
                        "spec.replicas: must be within [1, 6] (the sum of the groups' min and max constraints) because spec.strict is true, got {replicas}"
                    )
                );
            }
        }
        // Without strict mode the same totals are clamped later, not refused.
        let mut lenient = spot();
        lenient["replicas"] = json!(100);
        assert!(validate(&spec(lenient)).is_allowed());
        // A group without max counts as the most a role may have.
        let mut open = spot();
        open["strict"] = json!(true);
        open["scalePolicy"][1]["constraints"] = json!({});
        open["replicas"] = json!(1000);
        assert!(validate(&spec(open.clone())).is_allowed());
        open["replicas"] = json!(10_003);
        assert_eq!(
            denial(open),
            "spec.replicas: must be within [1, 10002] (the sum of the groups' min and max constraints, a group without a max counting as 10000) because spec.strict is true, got 10003"
        );
        // Negative totals are refused in every mode.
        let mut negative = spot();
        negative["replicas"] = json!(-1);
        assert_eq!(denial(negative), "spec.replicas: must be >= 0, got -1");
    }

    #[test]
    fn target_and_groups_are_immutable() {
        let old = spec(spot());
        let mut retarget = spot();
        retarget["targetRef"]["name"] = json!("other");
        let findings = validate_update(&old, &spec(retarget));
        assert!(findings.denial_message().starts_with(
            "spec.targetRef: is immutable: was spot-decode/decoder, got other/decoder"
        ));

        let mut regroup = spot();
        regroup["scalePolicy"][1]["group"] = json!("decode-reserved");
        let message = validate_update(&old, &spec(regroup)).denial_message();
        assert!(
            message.contains("the set of groups is immutable"),
            "{message}"
        );
        assert!(
            message.contains("decode-reserved") && message.contains("decode-spot"),
            "{message}"
        );

        // Reordering and retuning the same groups is fine.
        let mut retune = spot();
        retune["scalePolicy"] = json!([
            {"group": "decode-spot", "priority": 5},
            {"group": "decode-ondemand", "priority": 1, "constraints": {"max": 3}},
        ]);
        assert!(validate_update(&old, &spec(retune)).is_allowed());
    }

    #[test]
    fn the_target_must_exist_and_hold_the_groups() {
        let target: InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": "spot-decode"},
            "spec": {"roles": [
                {"name": "prefill", "componentType": "prefiller"},
                {"name": "decode-ondemand", "componentType": "decoder"},
                {"name": "decode-spot", "componentType": "decoder"},
            ]}
        }))
        .unwrap();
        assert!(validate_target(&spec(spot()), Some(&target)).is_allowed());
        assert_eq!(
            validate_target(&spec(spot()), None).denial_message(),
            "spec.targetRef.name: InferenceService \"spot-decode\" not found in this namespace"
        );
        let mut wrong = spot();
        wrong["scalePolicy"][1]["group"] = json!("prefill");
        assert_eq!(
            validate_target(&spec(wrong), Some(&target)).denial_message(),
            "spec.scalePolicy[1].group: role \"prefill\" of spot-decode is a prefiller, not a decoder"
        );
        let mut missing = spot();
        missing["scalePolicy"][1]["group"] = json!("decode-reserved");
        assert_eq!(
            validate_target(&spec(missing), Some(&target)).denial_message(),
            "spec.scalePolicy[1].group: spot-decode has no role \"decode-reserved\"; its decoder roles are: decode-ondemand, decode-spot"
        );
    }

    #[test]
    fn defaults_fill_priority_and_strict() {
        let mut s = spec(spot());
        defaults(&mut s);
        assert_eq!(s.strict, Some(false));
        assert_eq!(s.scale_policy[0].priority, Some(1));
        assert_eq!(s.scale_policy[1].priority, Some(0));
        let once = s.clone();
        defaults(&mut s);
        assert_eq!(s, once);
    }
}
