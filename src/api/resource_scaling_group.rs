//! ResourceScalingGroup (`resourcescalinggroup.com/v1`, seed 000): scales
//! existing workloads together, either in place at fixed ratios
//! (InplaceScaling) or by cloning them as whole groups (GroupReplication).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::limits::{
    self, MAX_GROUPS, MAX_RATIO, MAX_REPLICAS, MAX_REPLICATED_OBJECTS, MAX_ROLES,
    MAX_TARGET_RESOURCES,
};
use super::{Findings, dns1123_label_error, dns1123_subdomain_error, schema};

// Each printcolumn(...) repeats name/type_/json_path by design; clippy reads
// the repeated keys as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "resourcescalinggroup.com",
    version = "v1",
    kind = "ResourceScalingGroup",
    plural = "resourcescalinggroups",
    shortname = "rsg",
    category = "tandem",
    namespaced,
    status = "ResourceScalingGroupStatus",
    derive = "PartialEq",
    doc = "Scales existing workloads together: in place at fixed ratios, or as cloned groups.",
    scale(
        spec_replicas_path = ".spec.scalingStrategy.groupConfig.replicas",
        status_replicas_path = ".status.currentReplicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.scalingStrategy.type"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.currentReplicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Stalled\")].reason",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.scalingStrategy.groupConfig) || !has(self.scalingStrategy.groupConfig.replicas) || self.scalingStrategy.groupConfig.replicas * size(self.targetResources) <= 10000",
        "message": "the replicated objects (groupConfig.replicas × target resources) must be at most 10000",
    },
    {
        // A write to /scale sets groupConfig.replicas (the scale
        // subresource's specReplicasPath) and skips webhooks registered on
        // the group itself: this rule refuses it for InplaceScaling, whose
        // replicas follow its Source, even with the webhook down.
        "rule": "self.scalingStrategy.type == 'GroupReplication' || !has(self.scalingStrategy.groupConfig)",
        "message": "spec.scalingStrategy.groupConfig (and /scale) is for GroupReplication only: an InplaceScaling group follows its Source, so scale the Source instead",
    },
]))]
pub struct ResourceScalingGroupSpec {
    /// The resources this group manages, each with a local name that bindings use.
    #[schemars(length(min = 1, max = MAX_TARGET_RESOURCES))]
    pub target_resources: Vec<TargetResource>,
    /// GroupReplication or InplaceScaling, with its configuration.
    pub scaling_strategy: ScalingStrategy,
}

/// A managed resource, written in either of the seed's two shapes: flat
/// (`name`, `namespace`, `apiVersion`, `kind`: `name` is also the object's
/// name) or nested (`name` is a local identifier, `targetRef` names the object).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetResource {
    /// Local identifier referenced by bindings; in the flat shape also the object's name.
    pub name: String,
    /// Flat shape: the object's namespace; must be the group's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Flat shape: the object's apiVersion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Flat shape: the object's kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Nested shape: the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_ref: Option<CrossVersionObjectReference>,
    /// Roles inside the object (RoleBasedGroup, InferenceService) that bindings may name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_ROLES))]
    pub sub_resources: Vec<SubResource>,
}

/// The object a target resource refers to, whichever shape it was written in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
}

impl TargetResource {
    /// The object this entry manages, or None when neither shape is complete.
    pub fn object(&self) -> Option<ObjectRef<'_>> {
        match (&self.target_ref, &self.api_version, &self.kind) {
            (Some(r), _, _) => Some(ObjectRef {
                api_version: r.api_version.as_deref().unwrap_or_default(),
                kind: &r.kind,
                name: &r.name,
            }),
            (None, Some(api_version), Some(kind)) => Some(ObjectRef {
                api_version,
                kind,
                name: &self.name,
            }),
            _ => None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrossVersionObjectReference {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubResource {
    /// A role of the object (`spec.roles[].name`).
    pub role_name: String,
}

/// Kinds whose replicas live per role, so they are bound through subResources.
/// The RSG a clone, an adopted original or a pod belongs to.
pub const NAME_LABEL: &str = "resourcescalinggroup.com/name";
/// The group (`{prefix}-{NN}`) a clone, an adopted original or a pod belongs to.
pub const GROUP_LABEL: &str = "resourcescalinggroup.com/group";

pub const KINDS_WITH_ROLES: [&str; 2] = ["RoleBasedGroup", "InferenceService"];

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingStrategy {
    #[serde(rename = "type")]
    pub type_: ScalingStrategyType,
    /// GroupReplication only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_config: Option<GroupConfig>,
    /// InplaceScaling only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inplace_config: Option<InplaceConfig>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ScalingStrategyType {
    /// The target resources are a template: group `{prefix}-00` is the
    /// originals, further groups are clones.
    GroupReplication,
    /// Targets follow the Source's replicas at a ratio, patched in place.
    InplaceScaling,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupConfig {
    /// Groups are named `{groupNamePrefix}-{NN}`; clones `{prefix}-{NN}-{resource}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name_prefix: Option<String>,
    /// Accepted spelling of groupNamePrefix (seed 000's example); the mutating
    /// webhook moves it to groupNamePrefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    /// Desired number of groups, the originals included. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_GROUPS))]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<GroupScaleDown>,
}

impl GroupConfig {
    pub const DEFAULT_REPLICAS: i32 = 1;

    pub fn prefix(&self) -> Option<&str> {
        self.group_name_prefix
            .as_deref()
            .or(self.group_name.as_deref())
    }

    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(Self::DEFAULT_REPLICAS)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupScaleDown {
    /// Ordered (highest index, default), Newest, Oldest or Binpack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<GroupScaleDownPolicy>,
    /// Group ids (`{prefix}-{NN}`) removed first, in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum GroupScaleDownPolicy {
    #[default]
    Ordered,
    Newest,
    Oldest,
    Binpack,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InplaceConfig {
    #[schemars(length(max = MAX_TARGET_RESOURCES))]
    pub bindings: Vec<Binding>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    /// A target resource's name, or a role named in its subResources.
    pub name: String,
    pub role: BindingRole,
    /// Target only: replicas = ceil(source replicas x ratio), computed exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::number_or_string")]
    pub ratio: Option<Ratio>,
    /// Target only, with `maxRatio` and instead of `ratio`: a band. The
    /// Target (a ScaleView) is scaled by its own autoscaler, and Tandem keeps
    /// its replicas at least ceil(source replicas x minRatio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::number_or_string")]
    pub min_ratio: Option<Ratio>,
    /// Target only, with `minRatio`: at most ceil(source replicas x maxRatio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::number_or_string")]
    pub max_ratio: Option<Ratio>,
    /// Target only: fewest replicas, whatever the ratio gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub min: Option<i32>,
    /// Target only: most replicas, whatever the ratio gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub max: Option<i32>,
}

impl Binding {
    /// Whether this binding gives its Target a band (`minRatio` or
    /// `maxRatio`) rather than a ratio.
    pub fn is_band(&self) -> bool {
        self.min_ratio.is_some() || self.max_ratio.is_some()
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BindingRole {
    /// Drives the scaling (one per group).
    Source,
    /// Follows the Source at its ratio.
    Target,
}

/// An exact, non-negative-or-not decimal ratio, written as a YAML/JSON number or
/// a string. It serialises back the way it was written, so defaulting never
/// rewrites a user's `1.0` into `"1.0"`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ratio {
    value: Decimal,
    written: Written,
}

#[derive(Clone, Debug, PartialEq)]
enum Written {
    Number(serde_json::Number),
    Text(String),
}

impl Ratio {
    pub fn value(&self) -> Decimal {
        self.value
    }
}

impl FromStr for Ratio {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let value = Decimal::from_str_exact(text.trim())
            .or_else(|_| Decimal::from_scientific(text.trim()))
            .map_err(|_| format!("{text:?} is not a decimal number"))?;
        Ok(Ratio {
            value,
            written: Written::Text(text.to_owned()),
        })
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value.normalize())
    }
}

impl Serialize for Ratio {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.written {
            Written::Number(n) => n.serialize(serializer),
            Written::Text(t) => serializer.serialize_str(t),
        }
    }
}

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Ratio;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a decimal number, as a number or a string")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Ratio, E> {
                Ok(Ratio {
                    value: Decimal::from(v),
                    written: Written::Number(v.into()),
                })
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Ratio, E> {
                Ok(Ratio {
                    value: Decimal::from(v),
                    written: Written::Number(v.into()),
                })
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Ratio, E> {
                // A float's shortest round-trip text is what the user wrote
                // (0.1 prints as "0.1"), so it converts to the exact decimal.
                let number = serde_json::Number::from_f64(v)
                    .ok_or_else(|| E::custom(format!("{v} is not a finite number")))?;
                let value = Decimal::from_str_exact(&v.to_string())
                    .or_else(|_| Decimal::from_scientific(&format!("{v:e}")))
                    .map_err(|_| E::custom(format!("{v} does not fit an exact decimal")))?;
                Ok(Ratio {
                    value,
                    written: Written::Number(number),
                })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Ratio, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceScalingGroupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of groups (GroupReplication) or the Source's replicas (InplaceScaling).
    #[serde(default)]
    pub current_replicas: i32,
    /// Pods of all groups, for HPA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Ready and Stalled (with the reason: target missing, patch refused, cycle).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// InplaceScaling: the band of each Target bound by `minRatio` and
    /// `maxRatio`, from the Source's replicas. The Target's ScaleView keeps
    /// its replicas inside it when it splits them over its roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["target"]))]
    pub bands: Vec<Band>,
}

/// The replicas a band Target may have while its Source has `source`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Band {
    /// The binding's name.
    pub target: String,
    /// The Source's replicas the band was worked out from.
    pub source_replicas: i32,
    /// ceil(source replicas x minRatio), within the binding's min and max.
    pub min_replicas: i32,
    /// ceil(source replicas x maxRatio), within the binding's min and max.
    pub max_replicas: i32,
}

pub fn defaults(spec: &mut ResourceScalingGroupSpec) {
    if let Some(group) = spec.scaling_strategy.group_config.as_mut() {
        if group.group_name_prefix.is_none() {
            group.group_name_prefix = group.group_name.take();
        } else if group.group_name == group.group_name_prefix {
            group.group_name = None;
        }
        group.replicas.get_or_insert(GroupConfig::DEFAULT_REPLICAS);
        group
            .scale_down
            .get_or_insert_default()
            .policy
            .get_or_insert_default();
    }
}

/// Everything that makes a single ResourceScalingGroup unusable. `namespace` is
/// the group's own: no target may be elsewhere.
pub fn validate(spec: &ResourceScalingGroupSpec, namespace: &str) -> Findings {
    let mut findings = Findings::default();
    validate_targets(&spec.target_resources, namespace, &mut findings);
    let strategy = &spec.scaling_strategy;
    let at = "spec.scalingStrategy";
    match strategy.type_ {
        ScalingStrategyType::GroupReplication => {
            if strategy.inplace_config.is_some() {
                findings.deny(
                    format!("{at}.inplaceConfig"),
                    "only allowed with type InplaceScaling, type is GroupReplication",
                );
            }
            match &strategy.group_config {
                Some(group) => {
                    validate_group_config(group, &mut findings);
                    validate_clones(&spec.target_resources, group, &mut findings);
                    validate_replicated_objects(&spec.target_resources, group, &mut findings);
                }
                None => findings.deny(
                    format!("{at}.groupConfig"),
                    "required when type is GroupReplication",
                ),
            }
        }
        ScalingStrategyType::InplaceScaling => {
            if strategy.group_config.is_some() {
                findings.deny(
                    format!("{at}.groupConfig"),
                    "only allowed with type GroupReplication, type is InplaceScaling",
                );
            }
            match &strategy.inplace_config {
                Some(inplace) => {
                    validate_bindings(&inplace.bindings, &spec.target_resources, &mut findings)
                }
                None => findings.deny(
                    format!("{at}.inplaceConfig"),
                    "required when type is InplaceScaling",
                ),
            }
        }
    }
    findings
}

/// Where a binding name is declared: a target resource without roles, or one
/// role (`subResources[role]`) of a target resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declaration {
    pub resource: usize,
    pub role: Option<usize>,
}

/// What a binding name resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    Exact(Declaration),
    /// The name matches a declaration only up to case (seed 000: binding
    /// `decode`, role `Decode`): accepted, with a warning naming `matched`.
    CaseOnly {
        declaration: Declaration,
        matched: String,
    },
}

impl Resolution {
    pub fn declaration(&self) -> Declaration {
        match self {
            Resolution::Exact(d) | Resolution::CaseOnly { declaration: d, .. } => *d,
        }
    }
}

/// The one rule for what a binding `name` points at, shared by validation and
/// by the ratio planner. The error is the reason, without the field.
pub fn resolve_binding(targets: &[TargetResource], name: &str) -> Result<Resolution, String> {
    let mut declared: BTreeMap<&str, Vec<Declaration>> = BTreeMap::new();
    let mut with_roles: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (resource, target) in targets.iter().enumerate() {
        if target.sub_resources.is_empty() {
            declared.entry(&target.name).or_default().push(Declaration {
                resource,
                role: None,
            });
            continue;
        }
        with_roles.insert(
            &target.name,
            target
                .sub_resources
                .iter()
                .map(|s| s.role_name.as_str())
                .collect(),
        );
        for (role, sub) in target.sub_resources.iter().enumerate() {
            declared
                .entry(&sub.role_name)
                .or_default()
                .push(Declaration {
                    resource,
                    role: Some(role),
                });
        }
    }
    let one = |name: &str, found: &[Declaration]| -> Result<Declaration, String> {
        match found {
            [declaration] => Ok(*declaration),
            several => {
                let fields: Vec<String> = several.iter().map(|d| declaration_field(*d)).collect();
                Err(format!(
                    "{name:?} is declared more than once ({}): a binding name must name one resource or role",
                    fields.join(", ")
                ))
            }
        }
    };
    if let Some(found) = declared.get(name) {
        return one(name, found).map(Resolution::Exact);
    }
    if let Some(roles) = with_roles.get(name) {
        return Err(format!(
            "{name:?} has subResources; bind one of its roles instead: {}",
            roles.join(", ")
        ));
    }
    let folded: Vec<(&&str, &Vec<Declaration>)> = declared
        .iter()
        .filter(|(candidate, _)| candidate.eq_ignore_ascii_case(name))
        .collect();
    match folded.as_slice() {
        [(matched, found)] => Ok(Resolution::CaseOnly {
            declaration: one(matched, found)?,
            matched: (**matched).to_owned(),
        }),
        [] => {
            let known: Vec<&str> = declared.keys().copied().collect();
            Err(format!(
                "{name:?} names no role or resource (bindable: {})",
                known.join(", ")
            ))
        }
        several => {
            let options: Vec<&str> = several.iter().map(|(n, _)| **n).collect();
            Err(format!(
                "{name:?} matches several names up to case ({}); write one exactly",
                options.join(", ")
            ))
        }
    }
}

/// The field that declares a binding name.
pub fn declaration_field(declaration: Declaration) -> String {
    match declaration.role {
        None => format!("spec.targetResources[{}].name", declaration.resource),
        Some(role) => format!(
            "spec.targetResources[{}].subResources[{role}].roleName",
            declaration.resource
        ),
    }
}

fn validate_targets(targets: &[TargetResource], namespace: &str, findings: &mut Findings) {
    let mut resource_field: BTreeMap<&str, String> = BTreeMap::new();
    let mut declared: BTreeMap<&str, String> = BTreeMap::new();
    if targets.is_empty() {
        findings.deny("spec.targetResources", "must list at least one resource");
    }
    if targets.len() > MAX_TARGET_RESOURCES {
        findings.deny(
            "spec.targetResources",
            format!(
                "must list at most {MAX_TARGET_RESOURCES} resources, got {}",
                targets.len()
            ),
        );
    }
    for (i, target) in targets.iter().enumerate() {
        let at = format!("spec.targetResources[{i}]");
        if target.sub_resources.len() > MAX_ROLES {
            findings.deny(
                format!("{at}.subResources"),
                format!(
                    "must list at most {MAX_ROLES} roles, got {}",
                    target.sub_resources.len()
                ),
            );
        }
        if target.name.trim().is_empty() {
            findings.deny(format!("{at}.name"), "must not be empty");
        }
        if let Some(first) = resource_field.insert(&target.name, format!("{at}.name")) {
            findings.deny(
                format!("{at}.name"),
                format!("duplicate resource name {:?} (also {first})", target.name),
            );
        }
        validate_target_object(target, &at, findings);
        if let Some(ns) = &target.namespace
            && ns != namespace
        {
            findings.deny(
                format!("{at}.namespace"),
                format!(
                    "must be the ResourceScalingGroup's own namespace {namespace:?}, got {ns:?}: a group may not reach into another namespace"
                ),
            );
        }
        let kind = target
            .object()
            .map(|o| o.kind.to_owned())
            .unwrap_or_default();
        if !target.sub_resources.is_empty() && !KINDS_WITH_ROLES.contains(&kind.as_str()) {
            findings.deny(
                format!("{at}.subResources"),
                format!(
                    "only {} have roles; a {kind} is scaled as a whole",
                    KINDS_WITH_ROLES.join(" and ")
                ),
            );
        }
        declare_bindings(target, &at, &mut declared, findings);
    }
}

/// The object a target names, given either flat (apiVersion, kind) or as a
/// complete targetRef, not both.
fn validate_target_object(target: &TargetResource, at: &str, findings: &mut Findings) {
    let flat = target.api_version.is_some() || target.kind.is_some();
    if flat && target.target_ref.is_some() {
        findings.deny(
            at.to_owned(),
            "give the object either flat (apiVersion, kind) or as targetRef, not both",
        );
    } else if target.target_ref.is_none() && (target.api_version.is_none() || target.kind.is_none())
    {
        let missing = if target.kind.is_none() {
            "kind"
        } else {
            "apiVersion"
        };
        findings.deny(
            format!("{at}.{missing}"),
            "required: give the object as apiVersion, kind (and name), or as targetRef",
        );
    }
    if let Some(reference) = &target.target_ref {
        if reference.kind.trim().is_empty() {
            findings.deny(format!("{at}.targetRef.kind"), "must not be empty");
        }
        if reference.name.trim().is_empty() {
            findings.deny(format!("{at}.targetRef.name"), "must not be empty");
        }
        if reference
            .api_version
            .as_deref()
            .is_none_or(|v| v.trim().is_empty())
        {
            findings.deny(
                format!("{at}.targetRef.apiVersion"),
                "required: the group/version of the object (apps/v1 for a Deployment)",
            );
        }
    }
}

/// The binding names a target declares: its roles' names, or its own name
/// when it has no roles.
fn declare_bindings<'a>(
    target: &'a TargetResource,
    at: &str,
    declared: &mut BTreeMap<&'a str, String>,
    findings: &mut Findings,
) {
    if target.sub_resources.is_empty() {
        claim(declared, &target.name, format!("{at}.name"), findings);
        return;
    }
    for (r, sub) in target.sub_resources.iter().enumerate() {
        let field = format!("{at}.subResources[{r}].roleName");
        if sub.role_name.trim().is_empty() {
            findings.deny(field, "must not be empty");
            continue;
        }
        claim(declared, &sub.role_name, field, findings);
    }
}

/// Registers a name bindings may use; it must name one thing only.
fn claim<'a>(
    declared: &mut BTreeMap<&'a str, String>,
    name: &'a str,
    field: String,
    findings: &mut Findings,
) {
    if let Some(first) = declared.get(name) {
        findings.deny(
            field,
            format!("{name:?} is also {first}: a binding name must name one resource or role"),
        );
        return;
    }
    declared.insert(name, field);
}

fn validate_bindings(bindings: &[Binding], targets: &[TargetResource], findings: &mut Findings) {
    let at = "spec.scalingStrategy.inplaceConfig.bindings";
    if bindings.is_empty() {
        findings.deny(at, "must list one Source and at least one Target");
        return;
    }
    if bindings.len() > MAX_TARGET_RESOURCES {
        findings.deny(
            at,
            format!(
                "must list at most {MAX_TARGET_RESOURCES} bindings, got {}",
                bindings.len()
            ),
        );
    }
    let sources: Vec<usize> = bindings
        .iter()
        .enumerate()
        .filter(|(_, b)| b.role == BindingRole::Source)
        .map(|(i, _)| i)
        .collect();
    match sources.as_slice() {
        [] => findings.deny(at, "needs exactly one binding with role Source, found none"),
        [_] => {}
        [first, rest @ ..] => {
            for i in rest {
                findings.deny(
                    format!("{at}[{i}].role"),
                    format!("only one Source is allowed, {at}[{first}] is already the Source"),
                );
            }
        }
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, binding) in bindings.iter().enumerate() {
        let here = format!("{at}[{i}]");
        if let Some(first) = seen.insert(&binding.name, i) {
            findings.deny(
                format!("{here}.name"),
                format!("duplicate binding {:?} (also {at}[{first}])", binding.name),
            );
        }
        resolve_binding_name(&binding.name, &here, targets, findings);
        match binding.role {
            BindingRole::Source => {
                for (field, set) in [
                    ("ratio", binding.ratio.is_some()),
                    ("minRatio", binding.min_ratio.is_some()),
                    ("maxRatio", binding.max_ratio.is_some()),
                    ("min", binding.min.is_some()),
                    ("max", binding.max.is_some()),
                ] {
                    if set {
                        findings.deny(
                            format!("{here}.{field}"),
                            "only valid on a Target: the Source's replicas are set by its own scaler",
                        );
                    }
                }
            }
            BindingRole::Target => {
                validate_target_binding(binding, &here, findings);
                if binding.is_band()
                    && let Some(reason) = band_target_refused(targets, &binding.name)
                {
                    findings.deny(format!("{here}.minRatio"), reason);
                }
            }
        }
    }
}

/// Why the resource a band binding names cannot take a band, if it cannot:
/// only a ScaleView can (an autoscaler writes its `/scale`, and Tandem keeps
/// the band when it splits the view over its roles). On anything else the
/// Target's autoscaler and this group would both write its replicas.
fn band_target_refused(targets: &[TargetResource], name: &str) -> Option<String> {
    // A name that does not resolve is denied at its own field already.
    let declaration = resolve_binding(targets, name).ok()?.declaration();
    let target = targets.get(declaration.resource)?;
    let object = target.object()?;
    let is_view = object.kind == "ScaleView"
        && object.api_version.split('/').next() == Some("fusioninfer.io");
    if is_view && declaration.role.is_none() {
        return None;
    }
    let what = match declaration.role.and_then(|r| target.sub_resources.get(r)) {
        Some(sub) => format!("role {} of {} {}", sub.role_name, object.kind, object.name),
        None => format!("{} {}", object.kind, object.name),
    };
    Some(format!(
        "a band's Target must be a ScaleView (fusioninfer.io/v1alpha1): its autoscaler writes the view, and Tandem keeps the band when it splits the view over its roles; {what} would be written by both its autoscaler and this group. Bind the ScaleView over it, or give a ratio"
    ))
}

fn validate_target_binding(binding: &Binding, here: &str, findings: &mut Findings) {
    let band = binding.is_band();
    match (&binding.ratio, band) {
        (None, false) => findings.deny(
            format!("{here}.ratio"),
            "required for a Target: replicas become ceil(source replicas x ratio); or give minRatio and maxRatio for a band its own autoscaler moves within",
        ),
        (Some(_), true) => findings.deny(
            format!("{here}.ratio"),
            "give either ratio (Tandem sets the Target) or minRatio and maxRatio (the Target's autoscaler scales it within a band), not both",
        ),
        _ => {}
    }
    if band {
        for (field, set) in [
            ("minRatio", binding.min_ratio.is_some()),
            ("maxRatio", binding.max_ratio.is_some()),
        ] {
            if !set {
                findings.deny(
                    format!("{here}.{field}"),
                    "required with the other end of the band: minRatio and maxRatio go together",
                );
            }
        }
    }
    for (field, ratio) in [
        ("ratio", &binding.ratio),
        ("minRatio", &binding.min_ratio),
        ("maxRatio", &binding.max_ratio),
    ] {
        match ratio {
            Some(ratio) if ratio.value().is_sign_negative() && !ratio.value().is_zero() => findings
                .deny(
                    format!("{here}.{field}"),
                    format!("must be >= 0, got {ratio}"),
                ),
            Some(ratio) if ratio.value() > MAX_RATIO => {
                findings.deny(format!("{here}.{field}"), limits::over(MAX_RATIO, ratio))
            }
            _ => {}
        }
    }
    if let (Some(low), Some(high)) = (&binding.min_ratio, &binding.max_ratio)
        && high.value() < low.value()
    {
        findings.deny(
            format!("{here}.maxRatio"),
            format!("must be >= minRatio ({low}), got {high}"),
        );
    }
    for (field, value) in [("min", binding.min), ("max", binding.max)] {
        if let Some(value) = value
            && value > MAX_REPLICAS
        {
            findings.deny(format!("{here}.{field}"), limits::over(MAX_REPLICAS, value));
        }
    }
    if let Some(min) = binding.min
        && min < 0
    {
        findings.deny(format!("{here}.min"), format!("must be >= 0, got {min}"));
    }
    if let (Some(min), Some(max)) = (binding.min, binding.max)
        && max < min
    {
        findings.deny(
            format!("{here}.max"),
            format!("must be >= min ({min}), got {max}"),
        );
    }
    if let Some(max) = binding.max
        && max < 0
    {
        findings.deny(format!("{here}.max"), format!("must be >= 0, got {max}"));
    }
}

/// A binding names a role or a resource without roles ([`resolve_binding`]).
/// A match that differs only in case (seed 000: role `Decode`, binding
/// `decode`) is accepted with a warning.
fn resolve_binding_name(
    name: &str,
    here: &str,
    targets: &[TargetResource],
    findings: &mut Findings,
) {
    let field = format!("{here}.name");
    match resolve_binding(targets, name) {
        Ok(Resolution::Exact(_)) => {}
        Ok(Resolution::CaseOnly {
            declaration,
            matched,
        }) => {
            let resource = targets
                .get(declaration.resource)
                .map_or("", |t| t.name.as_str());
            let described = match declaration.role {
                Some(_) => format!("role {matched:?} of {resource}"),
                None => format!("target resource {matched:?}"),
            };
            findings.warn(format!(
                "{field}: {name:?} matches {described} only up to case; Tandem uses {matched:?}"
            ));
        }
        Err(reason) => findings.deny(field, reason),
    }
}

fn validate_group_config(group: &GroupConfig, findings: &mut Findings) {
    let at = "spec.scalingStrategy.groupConfig";
    if let (Some(prefix), Some(alias)) = (&group.group_name_prefix, &group.group_name)
        && prefix != alias
    {
        findings.deny(
            format!("{at}.groupName"),
            format!("is another spelling of groupNamePrefix; they disagree ({alias:?} vs {prefix:?}), keep one"),
        );
    }
    let Some(prefix) = group.prefix() else {
        findings.deny(
            format!("{at}.groupNamePrefix"),
            "required: groups are named {groupNamePrefix}-{NN}",
        );
        return;
    };
    let prefix_field = if group.group_name_prefix.is_some() {
        "groupNamePrefix"
    } else {
        "groupName"
    };
    if let Some(reason) = dns1123_label_error(prefix) {
        findings.deny(format!("{at}.{prefix_field}"), reason);
    }
    if let Some(replicas) = group.replicas
        && replicas < 1
    {
        findings.deny(
            format!("{at}.replicas"),
            format!("must be >= 1 (group {prefix}-00 holds the original resources and is never deleted), got {replicas}"),
        );
    } else if let Some(replicas) = group.replicas
        && replicas > MAX_GROUPS
    {
        findings.deny(format!("{at}.replicas"), limits::over(MAX_GROUPS, replicas));
    }
    let mut seen = BTreeMap::new();
    let candidates = group.scale_down.iter().flat_map(|s| s.candidates.iter());
    for (i, candidate) in candidates.enumerate() {
        let field = format!("{at}.scaleDown.candidates[{i}]");
        match group_index(prefix, candidate) {
            None => findings.deny(
                field,
                format!("{candidate:?} is not a group id of the form {prefix}-NN (NN: two or more digits)"),
            ),
            Some(0) => findings.deny(
                field,
                format!("{candidate:?} is group 00, the original resources, which is never deleted"),
            ),
            Some(_) => {
                if let Some(first) = seen.insert(candidate.as_str(), i) {
                    findings.deny(
                        field,
                        format!("duplicate candidate {candidate:?} (also candidates[{first}])"),
                    );
                }
            }
        }
    }
}

/// The objects a GroupReplication keeps, `groups × target resources`, within
/// [`MAX_REPLICATED_OBJECTS`] (checked when both factors are within theirs).
fn validate_replicated_objects(
    targets: &[TargetResource],
    group: &GroupConfig,
    findings: &mut Findings,
) {
    let groups = group.replicas();
    if !(1..=MAX_GROUPS).contains(&groups) || targets.len() > MAX_TARGET_RESOURCES {
        return;
    }
    let resources = i64::try_from(targets.len()).unwrap_or(i64::MAX);
    let objects = i64::from(groups).saturating_mul(resources);
    if objects > MAX_REPLICATED_OBJECTS {
        findings.deny(
            "spec.scalingStrategy.groupConfig.replicas",
            format!(
                "the replicated objects (replicas {groups} × {resources} target resources) {}",
                limits::over(MAX_REPLICATED_OBJECTS, objects)
            ),
        );
    }
}

/// Kinds whose object names become label values (LeaderWorkerSet's
/// `leaderworkerset.sigs.k8s.io/name`, a StatefulSet's
/// `controller-revision-hash` and pod names, Tandem's `fusioninfer.io/service`,
/// RoleBasedGroup's name label): their clones' names must be DNS-1123 labels.
pub const KINDS_NAMED_AS_LABELS: [&str; 4] = [
    "LeaderWorkerSet",
    "StatefulSet",
    "InferenceService",
    "RoleBasedGroup",
];

/// Kinds whose names must be DNS-1035 labels (a letter first): Services,
/// and LeaderWorkerSets, since LWS names a headless Service after each
/// (its webhook's `NameIsDNS1035Label`).
pub const KINDS_NAMED_AS_DNS1035_LABELS: [&str; 2] = ["LeaderWorkerSet", "Service"];

/// What GroupReplication needs of the target resources: none is a ScaleView,
/// and every clone name the group's replicas can need is a name Kubernetes
/// accepts. New groups take the lowest free index and never one above
/// `replicas - 1` (an index being deleted counts toward the total), so the
/// longest clone name is that of index `replicas - 1`.
fn validate_clones(targets: &[TargetResource], group: &GroupConfig, findings: &mut Findings) {
    let Some(prefix) = group.prefix() else {
        return;
    };
    if dns1123_label_error(prefix).is_some() {
        return;
    }
    let prefix_field = if group.group_name_prefix.is_some() {
        "spec.scalingStrategy.groupConfig.groupNamePrefix"
    } else {
        "spec.scalingStrategy.groupConfig.groupName"
    };
    let highest = u32::try_from(group.replicas().max(1).saturating_sub(1)).unwrap_or(0);
    for (i, target) in targets.iter().enumerate() {
        let at = format!("spec.targetResources[{i}]");
        let Some(object) = target.object() else {
            continue;
        };
        if object.kind == "ScaleView" {
            findings.deny(
                if target.target_ref.is_some() {
                    format!("{at}.targetRef.kind")
                } else {
                    format!("{at}.kind")
                },
                "a ScaleView cannot be replicated: every clone would target the same InferenceService and fight over its roles; replicate the InferenceService instead",
            );
            continue;
        }
        let name = clone_name(prefix, highest, &target.name);
        // LWS names a headless Service after each LeaderWorkerSet, and a
        // Service's name is a DNS-1035 label: a letter first.
        if KINDS_NAMED_AS_DNS1035_LABELS.contains(&object.kind)
            && !prefix.starts_with(|c: char| c.is_ascii_lowercase())
        {
            findings.deny(
                prefix_field,
                format!(
                    "{prefix:?} makes the {} {name:?} of {at}, which must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter): start the prefix with a letter",
                    object.kind
                ),
            );
            continue;
        }
        let as_label = KINDS_NAMED_AS_LABELS.contains(&object.kind);
        let (limit, problem) = if as_label {
            (63, dns1123_label_error(&name))
        } else {
            (253, dns1123_subdomain_error(&name))
        };
        let Some(problem) = problem else {
            continue;
        };
        if name.len() > limit {
            findings.deny(
                prefix_field,
                format!(
                    "the clone {name:?} of {at} (group {}) would be {} characters, over the {limit} a {}'s name may have{}: shorten the prefix or the resource name",
                    group_id(prefix, highest),
                    name.len(),
                    object.kind,
                    if as_label { " (it becomes a label value)" } else { "" },
                ),
            );
        } else {
            findings.deny(
                format!("{at}.name"),
                format!("clones are named {{prefix}}-{{NN}}-{{name}}, and {name:?} {problem}"),
            );
        }
    }
}

/// The name of the clone of target resource `resource` (its local name) in
/// group `index`: `{prefix}-{NN}-{resource}`.
pub fn clone_name(prefix: &str, index: u32, resource: &str) -> String {
    format!("{}-{resource}", group_id(prefix, index))
}

/// The index of a group id `{prefix}-{NN}` (NN zero-padded to two digits or more).
pub fn group_index(prefix: &str, id: &str) -> Option<u32> {
    let digits = id.strip_prefix(prefix)?.strip_prefix('-')?;
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let index: u32 = digits.parse().ok()?;
    // The canonical spelling pads to two digits and no further.
    (group_id(prefix, index) == id).then_some(index)
}

/// The id of group `index`: `{prefix}-00`, `{prefix}-01`, ... `{prefix}-100`.
pub fn group_id(prefix: &str, index: u32) -> String {
    format!("{prefix}-{index:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> ResourceScalingGroupSpec {
        serde_json::from_value(value).expect("test spec parses")
    }

    /// Seed 000's GroupReplication example, as written.
    fn group_replication() -> serde_json::Value {
        json!({
            "targetResources": [
                {"name": "prefill", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "decode", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
            ],
            "scalingStrategy": {"type": "GroupReplication", "groupConfig": {
                "groupName": "inference-unit", "replicas": 1,
                "scaleDown": {"policy": "Ordered", "candidates": ["inference-unit-02"]}}}
        })
    }

    /// Seed 000's InplaceScaling example, as written.
    fn inplace() -> serde_json::Value {
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

    fn denial(value: serde_json::Value) -> String {
        let findings = validate(&spec(value), "ai");
        assert!(!findings.is_allowed(), "expected a denial");
        findings.denial_message()
    }

    #[test]
    fn seed_group_replication_is_valid() {
        let findings = validate(&spec(group_replication()), "ai");
        assert!(findings.is_allowed(), "{}", findings.denial_message());
    }

    #[test]
    fn seed_inplace_is_valid_with_a_case_warning() {
        let findings = validate(&spec(inplace()), "ai");
        assert!(findings.is_allowed(), "{}", findings.denial_message());
        assert_eq!(
            findings.warnings,
            vec!["spec.scalingStrategy.inplaceConfig.bindings[2].name: \"decode\" matches role \"Decode\" of rolebasedgroup1 only up to case; Tandem uses \"Decode\"".to_owned()]
        );
    }

    #[test]
    fn the_target_ref_shape_is_accepted() {
        let value = json!({
            "targetResources": [
                {"name": "p", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "prefill"}},
                {"name": "d", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "decode"}},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "p", "role": "Source"}, {"name": "d", "role": "Target", "ratio": "4"}]}}
        });
        let s = spec(value);
        assert!(validate(&s, "ai").is_allowed());
        assert_eq!(
            s.target_resources[1].object(),
            Some(ObjectRef {
                api_version: "apps/v1",
                kind: "Deployment",
                name: "decode"
            })
        );
    }

    #[test]
    fn both_or_neither_shape_is_denied() {
        let mut both = group_replication();
        both["targetResources"][0]["targetRef"] =
            json!({"kind": "Deployment", "name": "x", "apiVersion": "apps/v1"});
        assert!(denial(both).starts_with("spec.targetResources[0]: give the object either flat"));
        let mut neither = group_replication();
        neither["targetResources"][1] = json!({"name": "decode"});
        assert!(denial(neither).starts_with("spec.targetResources[1].kind: required"));
        let mut no_version = group_replication();
        no_version["targetResources"][1] =
            json!({"name": "d", "targetRef": {"kind": "Deployment", "name": "decode"}});
        assert!(
            denial(no_version)
                .starts_with("spec.targetResources[1].targetRef.apiVersion: required")
        );
    }

    #[test]
    fn other_namespaces_are_denied() {
        let findings = validate(&spec(group_replication()), "default");
        assert_eq!(
            findings.violations[0].to_string(),
            "spec.targetResources[0].namespace: must be the ResourceScalingGroup's own namespace \"default\", got \"ai\": a group may not reach into another namespace"
        );
    }

    #[test]
    fn strategy_config_must_match_type() {
        let mut wrong = group_replication();
        wrong["scalingStrategy"]["type"] = json!("InplaceScaling");
        let message = denial(wrong);
        assert!(
            message.contains(
                "spec.scalingStrategy.groupConfig: only allowed with type GroupReplication"
            ),
            "{message}"
        );
        assert!(
            message.contains(
                "spec.scalingStrategy.inplaceConfig: required when type is InplaceScaling"
            ),
            "{message}"
        );
        let mut both = inplace();
        both["scalingStrategy"]["groupConfig"] = json!({"groupNamePrefix": "u"});
        assert!(denial(both).starts_with(
            "spec.scalingStrategy.groupConfig: only allowed with type GroupReplication"
        ));
        let mut missing = group_replication();
        missing["scalingStrategy"] = json!({"type": "GroupReplication"});
        assert_eq!(
            denial(missing),
            "spec.scalingStrategy.groupConfig: required when type is GroupReplication"
        );
    }

    #[test]
    fn exactly_one_source() {
        let mut two = inplace();
        two["scalingStrategy"]["inplaceConfig"]["bindings"][1] =
            json!({"name": "prefill", "role": "Source"});
        assert_eq!(
            denial(two),
            "spec.scalingStrategy.inplaceConfig.bindings[1].role: only one Source is allowed, spec.scalingStrategy.inplaceConfig.bindings[0] is already the Source"
        );
        let mut none = inplace();
        none["scalingStrategy"]["inplaceConfig"]["bindings"][0] =
            json!({"name": "router", "role": "Target", "ratio": 1});
        assert_eq!(
            denial(none),
            "spec.scalingStrategy.inplaceConfig.bindings: needs exactly one binding with role Source, found none"
        );
    }

    #[test]
    fn binding_names_must_resolve() {
        let mut unknown = inplace();
        unknown["scalingStrategy"]["inplaceConfig"]["bindings"][1]["name"] = json!("encode");
        assert_eq!(
            denial(unknown),
            "spec.scalingStrategy.inplaceConfig.bindings[1].name: \"encode\" names no role or resource (bindable: Decode, prefill, router)"
        );
        let mut whole = inplace();
        whole["scalingStrategy"]["inplaceConfig"]["bindings"][1]["name"] = json!("rolebasedgroup1");
        assert_eq!(
            denial(whole),
            "spec.scalingStrategy.inplaceConfig.bindings[1].name: \"rolebasedgroup1\" has subResources; bind one of its roles instead: prefill, Decode"
        );
        let mut duplicate = inplace();
        duplicate["scalingStrategy"]["inplaceConfig"]["bindings"][2]["name"] = json!("prefill");
        assert!(denial(duplicate).starts_with(
            "spec.scalingStrategy.inplaceConfig.bindings[2].name: duplicate binding \"prefill\""
        ));
    }

    #[test]
    fn bindable_names_name_one_thing() {
        let mut role_clash = inplace();
        role_clash["targetResources"][0]["subResources"][0]["roleName"] = json!("router");
        let message = denial(role_clash);
        assert!(message.contains("spec.targetResources[1].name: \"router\" is also spec.targetResources[0].subResources[0].roleName"), "{message}");
        let mut resource_clash = inplace();
        resource_clash["targetResources"][1]["name"] = json!("rolebasedgroup1");
        let message = denial(resource_clash);
        assert!(message.contains("spec.targetResources[1].name: duplicate resource name \"rolebasedgroup1\" (also spec.targetResources[0].name)"), "{message}");
        // A role may share the name of the resource it belongs to: the
        // resource itself is not bindable, so the name means the role.
        let mut own_name = inplace();
        own_name["targetResources"][0]["name"] = json!("prefill");
        let findings = validate(&spec(own_name), "ai");
        assert!(findings.is_allowed(), "{}", findings.denial_message());
    }

    #[test]
    fn sub_resources_only_on_kinds_with_roles() {
        let mut value = inplace();
        value["targetResources"][1]["subResources"] = json!([{"roleName": "r"}]);
        assert!(denial(value).contains("spec.targetResources[1].subResources: only RoleBasedGroup and InferenceService have roles; a Deployment is scaled as a whole"));
    }

    /// prefill-sv -> decode-sv in a band, and router -> prefill of a
    /// RoleBasedGroup at ratio 1.
    fn band() -> serde_json::Value {
        json!({
            "targetResources": [
                {"name": "prefill-sv", "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"},
                {"name": "decode-sv", "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"},
                {"name": "rolebasedgroup1", "apiVersion": "workloads.x-k8s.io/v1alpha1",
                 "kind": "RoleBasedGroup", "subResources": [{"roleName": "prefill"}]},
                {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "prefill-sv", "role": "Source"},
                {"name": "decode-sv", "role": "Target", "minRatio": 2, "maxRatio": "4"},
            ]}}
        })
    }

    #[test]
    fn a_band_has_both_ends_in_order_on_a_scale_view() {
        let findings = validate(&spec(band()), "ai");
        assert!(findings.is_allowed(), "{}", findings.denial_message());
        let at = "spec.scalingStrategy.inplaceConfig.bindings[1]";
        let with = |changes: &[(&str, serde_json::Value)]| {
            let mut value = band();
            let binding = &mut value["scalingStrategy"]["inplaceConfig"]["bindings"][1];
            for (field, written) in changes {
                if written.is_null() {
                    binding.as_object_mut().expect("binding").remove(*field);
                } else {
                    binding[*field] = written.clone();
                }
            }
            denial(value)
        };
        assert_eq!(
            with(&[("maxRatio", json!(1))]),
            format!("{at}.maxRatio: must be >= minRatio (2), got 1")
        );
        assert_eq!(
            with(&[("maxRatio", json!(null))]),
            format!(
                "{at}.maxRatio: required with the other end of the band: minRatio and maxRatio go together"
            )
        );
        assert_eq!(
            with(&[("ratio", json!(3))]),
            format!(
                "{at}.ratio: give either ratio (Tandem sets the Target) or minRatio and maxRatio (the Target's autoscaler scales it within a band), not both"
            )
        );
        assert_eq!(
            with(&[("minRatio", json!(-1))]),
            format!("{at}.minRatio: must be >= 0, got -1")
        );
        for (name, what) in [
            ("prefill", "role prefill of RoleBasedGroup rolebasedgroup1"),
            ("router", "Deployment router"),
        ] {
            assert_eq!(
                with(&[("name", json!(name))]),
                format!(
                    "{at}.minRatio: a band's Target must be a ScaleView (fusioninfer.io/v1alpha1): its autoscaler writes the view, and Tandem keeps the band when it splits the view over its roles; {what} would be written by both its autoscaler and this group. Bind the ScaleView over it, or give a ratio"
                )
            );
        }
        let mut on_source = band();
        on_source["scalingStrategy"]["inplaceConfig"]["bindings"][0]["maxRatio"] = json!(2);
        assert_eq!(
            denial(on_source),
            "spec.scalingStrategy.inplaceConfig.bindings[0].maxRatio: only valid on a Target: the Source's replicas are set by its own scaler"
        );
    }

    #[test]
    fn ratios_are_exact_non_negative_decimals() {
        for (ratio, ok) in [
            (json!(0), true),
            (json!("0.25"), true),
            (json!(1.5), true),
            (json!(-1), false),
            (json!("-0.5"), false),
        ] {
            let mut value = inplace();
            value["scalingStrategy"]["inplaceConfig"]["bindings"][1]["ratio"] = ratio.clone();
            let findings = validate(&spec(value), "ai");
            assert_eq!(findings.is_allowed(), ok, "{ratio}");
            if !ok {
                assert!(findings.denial_message().starts_with(
                    "spec.scalingStrategy.inplaceConfig.bindings[1].ratio: must be >= 0"
                ));
            }
        }
        let mut missing = inplace();
        missing["scalingStrategy"]["inplaceConfig"]["bindings"][1]
            .as_object_mut()
            .unwrap()
            .remove("ratio");
        assert!(denial(missing).starts_with(
            "spec.scalingStrategy.inplaceConfig.bindings[1].ratio: required for a Target"
        ));
        let mut on_source = inplace();
        on_source["scalingStrategy"]["inplaceConfig"]["bindings"][0]["ratio"] = json!(2);
        assert!(denial(on_source).starts_with(
            "spec.scalingStrategy.inplaceConfig.bindings[0].ratio: only valid on a Target"
        ));
        let mut clamps = inplace();
        clamps["scalingStrategy"]["inplaceConfig"]["bindings"][1]["min"] = json!(5);
        clamps["scalingStrategy"]["inplaceConfig"]["bindings"][1]["max"] = json!(2);
        assert_eq!(
            denial(clamps),
            "spec.scalingStrategy.inplaceConfig.bindings[1].max: must be >= min (5), got 2"
        );
    }

    #[test]
    fn ratio_parsing_is_exact_and_names_the_field() {
        let exact = |v: serde_json::Value| serde_json::from_value::<Ratio>(v).unwrap().value();
        assert_eq!(exact(json!(0.1)) * Decimal::from(30), Decimal::from(3));
        assert_eq!(exact(json!("0.1")), Decimal::new(1, 1));
        assert_eq!(exact(json!(2)), Decimal::from(2));
        assert_eq!(exact(json!("1e-1")), Decimal::new(1, 1));
        let mut bad = json!({"spec": inplace()});
        bad["spec"]["scalingStrategy"]["inplaceConfig"]["bindings"][1]["ratio"] = json!("lots");
        let err =
            crate::api::parse_at::<ResourceScalingGroupSpec>(&bad["spec"], "spec").unwrap_err();
        assert_eq!(
            err.field,
            "spec.scalingStrategy.inplaceConfig.bindings[1].ratio"
        );
        assert!(
            err.reason.contains("\"lots\" is not a decimal number"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn ratios_serialise_as_written() {
        for written in [json!(1.0), json!(2), json!("0.25"), json!(0.1)] {
            let ratio: Ratio = serde_json::from_value(written.clone()).unwrap();
            assert_eq!(serde_json::to_value(&ratio).unwrap(), written);
        }
    }

    #[test]
    fn group_config_rules() {
        let at = "spec.scalingStrategy.groupConfig";
        let cases = [
            (
                json!({"groupNamePrefix": "unit", "replicas": 0}),
                format!("{at}.replicas: must be >= 1"),
            ),
            (
                json!({"groupNamePrefix": "Unit"}),
                format!("{at}.groupNamePrefix: must be a DNS-1123 label"),
            ),
            (
                json!({"replicas": 2}),
                format!("{at}.groupNamePrefix: required"),
            ),
            (
                json!({"groupNamePrefix": "a", "groupName": "b"}),
                format!("{at}.groupName: is another spelling of groupNamePrefix; they disagree"),
            ),
            (
                json!({"groupNamePrefix": "u", "scaleDown": {"candidates": ["u-1"]}}),
                format!("{at}.scaleDown.candidates[0]: \"u-1\" is not a group id"),
            ),
            (
                json!({"groupNamePrefix": "u", "scaleDown": {"candidates": ["v-01"]}}),
                format!("{at}.scaleDown.candidates[0]: \"v-01\" is not a group id"),
            ),
            (
                json!({"groupNamePrefix": "u", "scaleDown": {"candidates": ["u-00"]}}),
                format!("{at}.scaleDown.candidates[0]: \"u-00\" is group 00"),
            ),
            (
                json!({"groupNamePrefix": "u", "scaleDown": {"candidates": ["u-01", "u-01"]}}),
                format!("{at}.scaleDown.candidates[1]: duplicate candidate \"u-01\""),
            ),
        ];
        for (config, expected) in cases {
            let mut value = group_replication();
            value["scalingStrategy"]["groupConfig"] = config;
            let message = denial(value);
            assert!(
                message.starts_with(&expected),
                "expected {expected:?}, got {message:?}"
            );
        }
    }

    #[test]
    fn clone_names_must_fit() {
        assert_eq!(clone_name("unit", 1, "prefill"), "unit-01-prefill");
        assert_eq!(clone_name("unit", 100, "prefill"), "unit-100-prefill");
        let at = "spec.scalingStrategy.groupConfig";
        // A LeaderWorkerSet's name is a label value: 63 characters at most,
        // checked for the highest index the replicas need.
        let lws = |prefix: &str, replicas: i32| {
            let mut value = group_replication();
            value["targetResources"][0]["kind"] = json!("LeaderWorkerSet");
            value["targetResources"][0]["apiVersion"] = json!("leaderworkerset.x-k8s.io/v1");
            value["scalingStrategy"]["groupConfig"] =
                json!({"groupNamePrefix": prefix, "replicas": replicas});
            value
        };
        // 52 + "-99-" + "prefill" = 63.
        let fits = "p".repeat(52);
        assert!(validate(&spec(lws(&fits, 100)), "ai").is_allowed());
        assert_eq!(
            denial(lws(&fits, 101)),
            format!(
                "{at}.groupNamePrefix: the clone \"{fits}-100-prefill\" of spec.targetResources[0] (group {fits}-100) would be 64 characters, over the 63 a LeaderWorkerSet's name may have (it becomes a label value): shorten the prefix or the resource name"
            )
        );
        // A LeaderWorkerSet's name is also a DNS-1035 label: a letter first.
        assert_eq!(
            denial(lws("7b", 2)),
            format!(
                "{at}.groupNamePrefix: \"7b\" makes the LeaderWorkerSet \"7b-01-prefill\" of spec.targetResources[0], which must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter): start the prefix with a letter"
            )
        );
        // A Deployment's name is a subdomain: the same name is fine.
        let mut digit = lws("7b", 2);
        digit["targetResources"][0]["kind"] = json!("Deployment");
        digit["targetResources"][0]["apiVersion"] = json!("apps/v1");
        assert!(validate(&spec(digit), "ai").is_allowed());
        let mut deployment = lws(&fits, 101);
        deployment["targetResources"][0]["kind"] = json!("Deployment");
        deployment["targetResources"][0]["apiVersion"] = json!("apps/v1");
        assert!(validate(&spec(deployment), "ai").is_allowed());
        // The local name of the targetRef shape becomes part of the clone name.
        let mut upper = group_replication();
        upper["targetResources"][1] = json!({"name": "Decode", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "decode"}});
        assert!(denial(upper).starts_with(
            "spec.targetResources[1].name: clones are named {prefix}-{NN}-{name}, and \"inference-unit-00-Decode\" must be a DNS-1123 subdomain"
        ));
    }

    #[test]
    fn a_scale_view_is_not_replicated() {
        let mut value = group_replication();
        value["targetResources"][1] =
            json!({"name": "decode", "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"});
        assert_eq!(
            denial(value),
            "spec.targetResources[1].kind: a ScaleView cannot be replicated: every clone would target the same InferenceService and fight over its roles; replicate the InferenceService instead"
        );
        let mut nested = group_replication();
        nested["targetResources"][1] = json!({"name": "d", "targetRef": {"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView", "name": "decode"}});
        assert!(denial(nested).starts_with(
            "spec.targetResources[1].targetRef.kind: a ScaleView cannot be replicated"
        ));
        // InplaceScaling binds ScaleViews at a ratio: allowed there.
        let mut inplace = inplace();
        inplace["targetResources"][1]["kind"] = json!("ScaleView");
        inplace["targetResources"][1]["apiVersion"] = json!("fusioninfer.io/v1alpha1");
        assert!(validate(&spec(inplace), "ai").is_allowed());
    }

    #[test]
    fn group_ids() {
        assert_eq!(group_id("unit", 0), "unit-00");
        assert_eq!(group_id("unit", 7), "unit-07");
        assert_eq!(group_id("unit", 123), "unit-123");
        assert_eq!(group_index("unit", "unit-07"), Some(7));
        assert_eq!(group_index("unit", "unit-123"), Some(123));
        assert_eq!(group_index("unit", "unit-007"), None);
        assert_eq!(group_index("unit", "unit-7"), None);
        assert_eq!(group_index("unit", "unit-0x"), None);
        assert_eq!(group_index("unit", "units-01"), None);
    }

    #[test]
    fn defaults_move_group_name_to_prefix() {
        let mut s = spec(group_replication());
        defaults(&mut s);
        let group = s.scaling_strategy.group_config.as_ref().unwrap();
        assert_eq!(group.group_name_prefix.as_deref(), Some("inference-unit"));
        assert_eq!(group.group_name, None);
        assert_eq!(
            group.scale_down.as_ref().unwrap().policy,
            Some(GroupScaleDownPolicy::Ordered)
        );
        assert!(validate(&s, "ai").is_allowed());
        let once = s.clone();
        defaults(&mut s);
        assert_eq!(s, once);
    }
}
