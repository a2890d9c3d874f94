//! Admission: what Tandem says about an object before the API server stores it.
//!
//! This file is the pure part, object in and decision out, shared by the
//! webhook handlers (`http`) and by `tandem render`. Transport problems (a body
//! that is not an AdmissionReview) are the handlers' business; everything about
//! the object itself is decided here.

pub mod answer;
pub mod caches;
pub mod http;
pub mod lookup;
pub mod metrics;
pub mod patch;
mod review;
pub mod strict;

use std::fmt;

use serde_json::Value;

use crate::api::{
    self, Findings, InferenceService, ResourceScalingGroup, ScaleView, Violation,
    inference_service, resource_scaling_group, scale_view,
};
use crate::plan;
use crate::plan::inference_service::dependencies;
use crate::plan::shared::installed::Installed;
use crate::plan::shared::replicas;
use kube::Resource;
pub use lookup::Lookup;

/// Tandem's kinds, as the admission endpoints and `render` know them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    InferenceService,
    ScaleView,
    ResourceScalingGroup,
}

impl Kind {
    pub const ALL: [Kind; 3] = [
        Kind::InferenceService,
        Kind::ScaleView,
        Kind::ResourceScalingGroup,
    ];

    pub fn plural(self) -> &'static str {
        match self {
            Kind::InferenceService => "inferenceservices",
            Kind::ScaleView => "scaleviews",
            Kind::ResourceScalingGroup => "resourcescalinggroups",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::InferenceService => "InferenceService",
            Kind::ScaleView => "ScaleView",
            Kind::ResourceScalingGroup => "ResourceScalingGroup",
        }
    }

    pub fn api_version(self) -> String {
        match self {
            Kind::InferenceService => InferenceService::api_version(&()).into_owned(),
            Kind::ScaleView => ScaleView::api_version(&()).into_owned(),
            Kind::ResourceScalingGroup => ResourceScalingGroup::api_version(&()).into_owned(),
        }
    }

    pub fn from_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }

    /// The kind of an object by its apiVersion and kind, if it is Tandem's.
    pub fn of(api_version: &str, kind: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == kind && k.api_version() == api_version)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the mutating webhook does to an object: the defaults as a JSON Patch,
/// and the object with the patch applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Mutation {
    pub patch: json_patch::Patch,
    pub object: Value,
}

/// Who sent a request: its `userInfo.username`, and the username of Tandem's
/// own service account, which may write what a ScaleView decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requester<'a> {
    pub username: &'a str,
    pub tandem: &'a str,
}

/// Tandem's service account as `manifests/base/rbac.yaml` installs it.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "system:serviceaccount:tandem-system:tandem";

impl Requester<'_> {
    /// Someone other than Tandem: what `render` and callers that do not know
    /// the user admit as.
    pub const OTHER: Requester<'static> = Requester {
        username: "",
        tandem: DEFAULT_SERVICE_ACCOUNT,
    };

    pub fn is_tandem(&self) -> bool {
        !self.username.is_empty() && self.username == self.tandem
    }
}

/// Fills the defaults of a Tandem object. Fails with the same violation the
/// validating webhook would give when the spec does not parse. On create
/// (`old` is None) a ScaleView without spec.replicas starts at its groups'
/// current sum in the target, and records the target's uid in the
/// annotation [`plan::scale_view::TARGET_UID`]; both need the `lookup` and
/// are left out when it cannot see the target.
pub fn mutate(
    kind: Kind,
    namespace: &str,
    object: &Value,
    old: Option<&Value>,
    lookup: &dyn Lookup,
) -> Result<Mutation, Findings> {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let defaulted = match kind {
        Kind::InferenceService => default_spec(spec, inference_service::defaults),
        Kind::ScaleView => default_spec(spec, scale_view::defaults),
        Kind::ResourceScalingGroup => default_spec(spec, resource_scaling_group::defaults),
    }
    .map_err(|violation| Findings {
        violations: vec![violation],
        ..Findings::default()
    })?;
    let mut defaulted = defaulted;
    if kind == Kind::InferenceService {
        choose_gang_scheduler(&mut defaulted, old, &lookup.installed());
    }
    let mut mutated = object.clone();
    if let Some(map) = mutated.as_object_mut() {
        map.insert("spec".to_owned(), defaulted);
    }
    if kind == Kind::ScaleView && old.is_none() {
        start_from_target(namespace, &mut mutated, lookup);
    }
    let patch = json_patch::diff(object, &mutated);
    Ok(Mutation {
        patch,
        object: mutated,
    })
}

/// Writes into a service's defaulted `spec` the gang backend admission
/// chooses when the spec leaves it out
/// ([`plan::inference_service::gang::default_gang_scheduler`]). An old
/// object that does not parse is read as none.
fn choose_gang_scheduler(spec: &mut Value, old: Option<&Value>, installed: &Installed) {
    let Ok(parsed) = api::parse_at::<inference_service::InferenceServiceSpec>(spec, "spec") else {
        return;
    };
    let old = old.and_then(|o| {
        api::parse_at::<inference_service::InferenceServiceSpec>(&o["spec"], "oldObject.spec").ok()
    });
    let Some(backend) =
        plan::inference_service::gang::default_gang_scheduler(&parsed, old.as_ref(), installed)
    else {
        return;
    };
    if !spec["schedulingStrategy"].is_object() {
        spec["schedulingStrategy"] = Value::Object(Default::default());
    }
    spec["schedulingStrategy"]["gangScheduler"] = serde_json::json!(backend);
}

/// A new ScaleView's starting replicas and target uid, from its target.
fn start_from_target(namespace: &str, view: &mut Value, lookup: &dyn Lookup) {
    let Ok(spec) = api::parse_at::<scale_view::ScaleViewSpec>(&view["spec"], "spec") else {
        return;
    };
    let Some(Some(target)) = lookup.inference_service(namespace, &spec.target_ref.name) else {
        return;
    };
    if spec.replicas.is_none() {
        view["spec"]["replicas"] = Value::from(plan::scale_view::current_total(&spec, &target));
    }
    if let Some(uid) = target.metadata.uid.as_deref()
        && let Some(metadata) = view.get_mut("metadata").and_then(Value::as_object_mut)
    {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(
                plan::scale_view::TARGET_UID.to_owned(),
                Value::String(uid.to_owned()),
            );
        }
    }
}

fn default_spec<S>(spec: &Value, defaults: fn(&mut S)) -> Result<Value, Violation>
where
    S: serde::de::DeserializeOwned + serde::Serialize,
{
    let mut parsed: S = api::parse_at(spec, "spec")?;
    defaults(&mut parsed);
    serde_json::to_value(&parsed).map_err(|e| Violation {
        field: "spec".to_owned(),
        reason: format!("could not be written back after defaulting: {e}"),
    })
}

/// Everything wrong with a Tandem object (and, on update, with the change from
/// `old`), sent by someone other than Tandem. `namespace` is where the
/// object lives.
pub fn validate(
    kind: Kind,
    namespace: &str,
    object: &Value,
    old: Option<&Value>,
    lookup: &dyn Lookup,
) -> Findings {
    validate_as(kind, namespace, object, old, lookup, Requester::OTHER)
}

/// [`validate`] for a request sent by `requester`: an InferenceService update
/// that changes a role locked by a ScaleView is refused unless Tandem sends it.
pub fn validate_as(
    kind: Kind,
    namespace: &str,
    object: &Value,
    old: Option<&Value>,
    lookup: &dyn Lookup,
    requester: Requester<'_>,
) -> Findings {
    if old.is_some_and(|old| spec_unchanged(old, object)) {
        return Findings::default();
    }
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    match kind {
        Kind::InferenceService => with_spec(spec, |s: inference_service::InferenceServiceSpec| {
            let old = old.map(|old| api::parse_at::<InferenceService>(old, "oldObject"));
            service_findings(namespace, name, s, old, (lookup, requester))
        }),
        Kind::ResourceScalingGroup => with_spec(
            spec,
            |s: resource_scaling_group::ResourceScalingGroupSpec| {
                let mut findings = group_findings(namespace, name, &s, lookup);
                let groups = |spec: &resource_scaling_group::ResourceScalingGroupSpec| {
                    spec.scaling_strategy
                        .group_config
                        .as_ref()
                        .and_then(|c| c.replicas)
                };
                let before = old.and_then(|o| o.get("spec")).and_then(|o| {
                    api::parse_at::<resource_scaling_group::ResourceScalingGroupSpec>(
                        o,
                        "oldObject.spec",
                    )
                    .ok()
                });
                if let (Some(before), Some(after)) = (before.as_ref().and_then(groups), groups(&s))
                {
                    findings.warnings.extend(replicas::jump_warning(
                        "spec.scalingStrategy.groupConfig.replicas",
                        i64::from(before),
                        i64::from(after),
                    ));
                }
                findings
            },
        ),
        Kind::ScaleView => with_spec(spec, |new: scale_view::ScaleViewSpec| {
            let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
            let old_spec = old.and_then(|o| o.get("spec")).map(|old_spec| {
                api::parse_at::<scale_view::ScaleViewSpec>(old_spec, "oldObject.spec")
            });
            view_findings(
                namespace,
                (name, uid),
                &new,
                old.is_some(),
                old_spec,
                lookup,
            )
        }),
    }
}

/// Whether an update leaves the spec as it was: it changes only metadata
/// (finalizers, labels, annotations) or status. Everything the validation
/// refuses is about the spec, so such an update is never refused for it: the
/// stored object was admitted before, or got in while the webhook was away,
/// and refusing, say, the removal of a finalizer because the view's target is
/// gone would keep the object, and its namespace, from ever being deleted.
fn spec_unchanged(old: &Value, new: &Value) -> bool {
    old.get("spec") == new.get("spec")
}

/// The findings about an InferenceService named `name` in `namespace` with
/// `spec`; on update, `old` is the stored object as it parsed.
/// The denial of an object name the API server refuses (not a DNS-1123
/// subdomain, as `Qwen-7B`), which it does before any webhook is called:
/// render has no API server, so its admission says it here. An empty name
/// is the API server's to fill (generateName) or refuse.
fn refused_name(name: &str) -> Option<Findings> {
    let reason = api::dns1123_subdomain_error(name).filter(|_| !name.is_empty())?;
    let mut findings = Findings::default();
    findings.deny("metadata.name", reason);
    Some(findings)
}

fn service_findings(
    namespace: &str,
    name: &str,
    spec: inference_service::InferenceServiceSpec,
    old: Option<Result<InferenceService, Violation>>,
    (lookup, requester): (&dyn Lookup, Requester<'_>),
) -> Findings {
    if let Some(refused) = refused_name(name) {
        return refused;
    }
    // The children's names depend on the service's name too.
    let mut service = InferenceService::new(name, spec);
    service.metadata.namespace = Some(namespace.to_owned());
    let mut findings = crate::plan::inference_service::service::validate(&service);
    dependency_findings(&service, old.as_ref(), &lookup.installed(), &mut findings);
    if let Some(warning) = lookup
        .epp_image()
        .and_then(|image| plan::inference_service::router::epp_image_warning(&service.spec, image))
    {
        findings.warn(warning);
    }
    if let Some(old) = old {
        if let Ok(old) = &old {
            for (i, role) in service.spec.roles.iter().enumerate() {
                if let Some(before) = old.spec.roles.iter().find(|r| r.name == role.name) {
                    findings.warnings.extend(replicas::jump_warning(
                        &format!("spec.roles[{i}].replicas"),
                        i64::from(before.replicas()),
                        i64::from(role.replicas()),
                    ));
                }
            }
        }
        findings.extend(locked_roles(old, &service, requester));
    }
    findings
}

/// What the service needs of the installed dependencies and the cluster
/// lacks: denied when the service cannot work without it, a warning
/// otherwise. An update is denied only for a lack it brings: one the stored
/// spec had too (its dependency was removed since) is a warning, so the
/// service can still be changed, scaled down or deleted.
fn dependency_findings(
    service: &InferenceService,
    old: Option<&Result<InferenceService, Violation>>,
    installed: &Installed,
    findings: &mut Findings,
) {
    let decided = dependencies::decide(&service.spec, installed);
    let before: Vec<_> = match old {
        Some(Ok(old)) => dependencies::decide(&old.spec, installed)
            .lacking
            .into_iter()
            .map(|n| n.lack)
            .collect(),
        _ => Vec::new(),
    };
    for needed in decided.lacking {
        let lack = needed.lack;
        if needed.severity == dependencies::Severity::Refuse && !before.contains(&lack) {
            findings.deny(lack.field, lack.message);
        } else {
            findings.warn(format!("{}: {}", lack.field, lack.message));
        }
    }
}

/// The findings about a ResourceScalingGroup named `name` in `namespace`.
fn group_findings(
    namespace: &str,
    name: &str,
    spec: &resource_scaling_group::ResourceScalingGroupSpec,
    lookup: &dyn Lookup,
) -> Findings {
    if let Some(refused) = refused_name(name) {
        return refused;
    }
    let mut findings = resource_scaling_group::validate(spec, namespace);
    // Every resource of an InplaceScaling group can be scaled.
    findings.extend(plan::resource_scaling_group::adapter::check(
        spec,
        &|api_version: &str, kind: &str| lookup.has_scale(api_version, kind),
    ));
    // Across every group of the namespace: no resource may follow
    // itself through a chain, nor be the Target of two bindings.
    match lookup.check_follows(namespace, (name, spec)) {
        Some(follows) => findings.extend(follows),
        None => findings.warn(
            "spec.scalingStrategy: cycles and double Targets across the namespace's ResourceScalingGroups were not checked: this webhook has no view of the cluster",
        ),
    }
    findings
}

/// The findings about a ScaleView (`name`, `uid`) in `namespace` with spec
/// `new`. `has_old` on update; `old_spec` is the stored object's spec as it
/// parsed, when it has one.
fn view_findings(
    namespace: &str,
    (name, uid): (&str, &str),
    new: &scale_view::ScaleViewSpec,
    has_old: bool,
    old_spec: Option<Result<scale_view::ScaleViewSpec, Violation>>,
    lookup: &dyn Lookup,
) -> Findings {
    if let Some(refused) = refused_name(name) {
        return refused;
    }
    let mut findings = scale_view::validate(new);
    match lookup.inference_service(namespace, &new.target_ref.name) {
        Some(target) => {
            findings.extend(scale_view::validate_target(new, target.as_ref()));
            // Only on create: the groups are immutable, so an update
            // cannot add a conflict, and refusing one would keep a view
            // that got in without the webhook from ever dropping its
            // finalizer.
            if let (Some(target), false) = (&target, has_old) {
                findings.extend(unlocked_groups((name, uid), new, target));
            }
        }
        None => findings.warn(
            "spec.targetRef: not checked against the InferenceService: this webhook has no view of the cluster",
        ),
    }
    if let Some(old_spec) = old_spec {
        // The old object was admitted before; if it no longer parses
        // (an older CRD version), immutability cannot be checked.
        match old_spec {
            Ok(old) => {
                if let (Some(before), Some(after)) = (old.replicas, new.replicas) {
                    findings.warnings.extend(replicas::jump_warning(
                        "spec.replicas",
                        i64::from(before),
                        i64::from(after),
                    ));
                }
                let update = scale_view::validate_update(&old, new);
                findings.violations.extend(update.violations);
                findings.warnings.extend(update.warnings);
            }
            Err(v) => findings.warn(format!(
                "immutability of spec.targetRef and the groups was not checked: the stored object does not parse ({v})"
            )),
        }
    }
    findings
}

/// An InferenceService update against the ScaleView locks in the stored
/// object's status ([`plan::scale_view::locks::check_update`]).
fn locked_roles(
    old: Result<InferenceService, Violation>,
    new: &InferenceService,
    requester: Requester<'_>,
) -> Findings {
    match old {
        Ok(old) => plan::scale_view::locks::check_update(&old, new, requester.is_tandem()),
        Err(v) => {
            let mut findings = Findings::default();
            findings.warn(format!(
                "the ScaleView locks were not checked: the stored object does not parse ({v})"
            ));
            findings
        }
    }
}

/// A view's groups that another view locks in the target: a conflict (409)
/// naming the other view.
fn unlocked_groups(
    (name, uid): (&str, &str),
    spec: &scale_view::ScaleViewSpec,
    target: &InferenceService,
) -> Findings {
    let mut findings = Findings::default();
    let Some(status) = &target.status else {
        return findings;
    };
    let groups: Vec<&str> = spec.scale_policy.iter().map(|p| p.group.as_str()).collect();
    for (group, other) in plan::scale_view::locks::conflicts(status, name, uid, &groups) {
        let index = groups.iter().position(|g| *g == group).unwrap_or(0);
        findings.deny_conflict(
            format!("spec.scalePolicy[{index}].group"),
            format!(
                "role {group:?} of {} is locked by ScaleView {other}; delete that view first",
                spec.target_ref.name
            ),
        );
    }
    findings
}

fn with_spec<S: serde::de::DeserializeOwned>(
    spec: &Value,
    check: impl FnOnce(S) -> Findings,
) -> Findings {
    match api::parse_at::<S>(spec, "spec") {
        Ok(parsed) => check(parsed),
        Err(violation) => Findings {
            violations: vec![violation],
            ..Findings::default()
        },
    }
}

/// A write to `scaleviews/scale`: the API server sends an `autoscaling/v1`
/// Scale. The view it scales is looked up; its strict range then applies to the
/// new total (writes to /scale skip the webhook on the ScaleView itself).
pub fn validate_scale(scale: &Value, namespace: &str, lookup: &dyn Lookup) -> Findings {
    let parsed: Result<k8s_openapi::api::autoscaling::v1::Scale, _> = api::parse(scale);
    match parsed {
        Ok(scale) => scale_findings(scale, namespace, lookup),
        Err(v) => {
            let mut findings = Findings::default();
            findings.deny(
                v.field,
                format!("not an autoscaling/v1 Scale: {}", v.reason),
            );
            findings
        }
    }
}

/// A write to `resourcescalinggroups/scale` (an `autoscaling/v1` Scale): a
/// GroupReplication group's new `groupConfig.replicas` is held to the same
/// rules as a write of the group itself; an InplaceScaling group has no
/// replicas of its own to scale (the CRD's CEL rule refuses it too, for a
/// cluster where the webhook is not called).
pub fn validate_group_scale(scale: &Value, namespace: &str, lookup: &dyn Lookup) -> Findings {
    let mut findings = Findings::default();
    let scale: k8s_openapi::api::autoscaling::v1::Scale = match api::parse(scale) {
        Ok(scale) => scale,
        Err(v) => {
            findings.deny(
                v.field,
                format!("not an autoscaling/v1 Scale: {}", v.reason),
            );
            return findings;
        }
    };
    let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
    let name = scale.metadata.name.unwrap_or_default();
    let Some(found) = lookup.resource_scaling_group(namespace, &name) else {
        if replicas < 1 {
            findings.deny("spec.replicas", format!("must be >= 1, got {replicas}"));
        }
        findings.warn(format!(
            "spec.replicas: not checked against ResourceScalingGroup {name:?}: this webhook has no view of the cluster"
        ));
        return findings;
    };
    let Some(group) = found else {
        findings.deny(
            "metadata.name",
            format!("ResourceScalingGroup {name:?} not found"),
        );
        return findings;
    };
    let mut spec = group.spec;
    if let Some(before) = spec
        .scaling_strategy
        .group_config
        .as_ref()
        .and_then(|c| c.replicas)
    {
        findings.warnings.extend(replicas::jump_warning(
            "spec.replicas",
            i64::from(before),
            i64::from(replicas),
        ));
    }
    // As stored, the group went through the mutating webhook; defaulting
    // again changes nothing then, and reads one stored without it alike.
    resource_scaling_group::defaults(&mut spec);
    match spec.scaling_strategy.type_ {
        resource_scaling_group::ScalingStrategyType::InplaceScaling => {
            findings.deny(
                "spec.replicas",
                format!(
                    "ResourceScalingGroup {name:?} is InplaceScaling: it has no replicas of its own, its Targets follow their Source; scale the Source instead"
                ),
            );
        }
        resource_scaling_group::ScalingStrategyType::GroupReplication => {
            spec.scaling_strategy
                .group_config
                .get_or_insert(resource_scaling_group::GroupConfig {
                    group_name_prefix: None,
                    group_name: None,
                    replicas: None,
                    scale_down: None,
                })
                .replicas = Some(replicas);
            // The group's own rules, with the field as /scale names it.
            for violation in resource_scaling_group::validate(&spec, namespace).violations {
                let field = if violation.field.ends_with("groupConfig.replicas") {
                    "spec.replicas".to_owned()
                } else {
                    violation.field
                };
                findings.deny(field, violation.reason);
            }
        }
    }
    findings
}

/// [`validate_scale`] of a Scale as it parsed.
fn scale_findings(
    scale: k8s_openapi::api::autoscaling::v1::Scale,
    namespace: &str,
    lookup: &dyn Lookup,
) -> Findings {
    let mut findings = Findings::default();
    let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
    let name = scale.metadata.name.unwrap_or_default();
    match lookup.scale_view(namespace, &name) {
        Some(Some(view)) => {
            scale_view::validate_total(
                &view.spec,
                i64::from(replicas),
                "spec.replicas",
                &mut findings,
            );
            if let Some(before) = view.spec.replicas {
                findings.warnings.extend(replicas::jump_warning(
                    "spec.replicas",
                    i64::from(before),
                    i64::from(replicas),
                ));
            }
        }
        Some(None) => findings.deny("metadata.name", format!("ScaleView {name:?} not found")),
        None => {
            if replicas < 0 {
                findings.deny("spec.replicas", format!("must be >= 0, got {replicas}"));
            } else if replicas > api::limits::MAX_VIEW_REPLICAS {
                findings.deny(
                    "spec.replicas",
                    api::limits::over(api::limits::MAX_VIEW_REPLICAS, replicas),
                );
            }
            findings.warn("spec.replicas: the strict range was not checked: this webhook has no view of the cluster");
        }
    }
    findings
}

/// Mutation then validation, as the API server runs them on a create or an
/// update: the object the API server would store, or why it would refuse it.
pub fn admit(
    kind: Kind,
    namespace: &str,
    object: &Value,
    old: Option<&Value>,
    lookup: &dyn Lookup,
) -> Result<(Value, Vec<String>), Findings> {
    let mutation = mutate(kind, namespace, object, old, lookup)?;
    let findings = validate(kind, namespace, &mutation.object, old, lookup);
    if findings.is_allowed() {
        Ok((mutation.object, findings.warnings))
    } else {
        Err(findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn story2() -> Value {
        json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "default"},
            "spec": {"roles": [
                {"name": "prefill", "componentType": "prefiller", "replicas": 2,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm",
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}}]}}},
                {"name": "decode", "componentType": "decoder",
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm",
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}}]}}},
            ]}
        })
    }

    #[test]
    fn kinds_round_trip() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_plural(kind.plural()), Some(kind));
            assert_eq!(Kind::of(&kind.api_version(), kind.name()), Some(kind));
        }
        assert_eq!(
            Kind::ResourceScalingGroup.api_version(),
            "resourcescalinggroup.com/v1"
        );
        assert_eq!(Kind::of("fusioninfer.io/v1", "ScaleView"), None);
    }

    #[test]
    fn mutation_only_adds_defaults() {
        let mutation = mutate(
            Kind::InferenceService,
            "default",
            &story2(),
            None,
            &lookup::Blind,
        )
        .unwrap();
        let paths: Vec<String> = mutation
            .patch
            .0
            .iter()
            .map(|op| op.path().to_string())
            .collect();
        assert!(
            paths.contains(&"/spec/roles/1/replicas".to_owned()),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"/spec/upgradeStrategy".to_owned()),
            "{paths:?}"
        );
        assert!(
            !paths.iter().any(|p| p == "/spec/roles/0/replicas"),
            "set fields stay: {paths:?}"
        );
        assert!(paths.iter().all(|p| p.starts_with("/spec/")), "{paths:?}");
        let mut patched = story2();
        json_patch::patch(&mut patched, &mutation.patch).unwrap();
        assert_eq!(patched, mutation.object);
        // Defaulting a defaulted object changes nothing.
        assert!(
            mutate(
                Kind::InferenceService,
                "default",
                &mutation.object,
                None,
                &lookup::Blind
            )
            .unwrap()
            .patch
            .0
            .is_empty()
        );
    }

    #[test]
    fn mutation_keeps_ratios_as_written() {
        let rsg = json!({"spec": {
            "targetResources": [{"name": "a", "apiVersion": "apps/v1", "kind": "Deployment"},
                                {"name": "b", "apiVersion": "apps/v1", "kind": "Deployment"}],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "a", "role": "Source"}, {"name": "b", "role": "Target", "ratio": 1.0}]}}}});
        assert!(
            mutate(
                Kind::ResourceScalingGroup,
                "default",
                &rsg,
                None,
                &lookup::Blind
            )
            .unwrap()
            .patch
            .0
            .is_empty()
        );
    }

    #[test]
    fn unparseable_specs_fail_mutation_with_the_field() {
        let mut bad = story2();
        bad["spec"]["roles"][0]["replicas"] = json!("two");
        let findings = mutate(
            Kind::InferenceService,
            "default",
            &bad,
            None,
            &lookup::Blind,
        )
        .unwrap_err();
        assert_eq!(findings.violations[0].field, "spec.roles[0].replicas");
        let missing = json!({"metadata": {"name": "x"}});
        let findings = validate(
            Kind::InferenceService,
            "default",
            &missing,
            None,
            &lookup::Blind,
        );
        assert_eq!(findings.violations[0].field, "spec");
    }

    #[test]
    fn scale_view_updates_check_immutability() {
        let view = |target: &str| {
            json!({"spec": {"targetRef": {"name": target, "componentType": "decoder"},
            "scalePolicy": [{"group": "decode"}]}})
        };
        let findings = validate(
            Kind::ScaleView,
            "default",
            &view("b"),
            Some(&view("a")),
            &lookup::Blind,
        );
        assert!(
            findings
                .denial_message()
                .starts_with("spec.targetRef: is immutable")
        );
        assert!(
            validate(
                Kind::ScaleView,
                "default",
                &view("a"),
                Some(&view("a")),
                &lookup::Blind
            )
            .is_allowed()
        );
    }

    #[test]
    fn group_scale_writes_hold_group_replication_to_its_rules_and_refuse_inplace_scaling() {
        let scale = |name: &str, replicas: i64| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": name, "namespace": "ai"}, "spec": {"replicas": replicas}})
        };
        let read = |file: &str| {
            let text = std::fs::read_to_string(format!(
                "{}/examples/resourcescalinggroup/{file}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            use serde::Deserialize as _;
            serde_norway::Deserializer::from_str(&text)
                .map(|d| Value::deserialize(d).unwrap())
                .find(|o| o["kind"] == "ResourceScalingGroup")
                .map(|mut g| {
                    // Applied in namespace ai, where its targets are.
                    g["metadata"]["namespace"] = json!("ai");
                    g
                })
                .unwrap()
        };
        let (replicated, inplace) = (read("group-replication.yaml"), read("inplace-scaling.yaml"));
        let name = |g: &Value| g["metadata"]["name"].as_str().unwrap().to_owned();
        let known = lookup::Objects::new([&replicated, &inplace]);
        let three = validate_group_scale(&scale(&name(&replicated), 3), "ai", &known);
        assert!(three.is_allowed(), "{}", three.denial_message());
        let zero = validate_group_scale(&scale(&name(&replicated), 0), "ai", &known);
        assert!(
            zero.denial_message()
                .starts_with("spec.replicas: must be >= 1"),
            "{}",
            zero.denial_message()
        );
        let inplace = validate_group_scale(&scale(&name(&inplace), 2), "ai", &known);
        assert!(
            inplace
                .denial_message()
                .contains("is InplaceScaling: it has no replicas of its own"),
            "{}",
            inplace.denial_message()
        );
        assert_eq!(
            validate_group_scale(&scale("nope", 2), "ai", &known).denial_message(),
            "metadata.name: ResourceScalingGroup \"nope\" not found"
        );
        let blind = validate_group_scale(&scale("any", 2), "default", &lookup::Blind);
        assert!(blind.is_allowed() && blind.warnings[0].contains("not checked"));
    }

    #[test]
    fn scale_writes() {
        let scale = |replicas: i64| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": "v", "namespace": "default"}, "spec": {"replicas": replicas}})
        };
        let blind = &lookup::Blind;
        assert!(validate_scale(&scale(3), "default", blind).is_allowed());
        assert!(validate_scale(&scale(3), "default", blind).warnings[0].contains("not checked"));
        assert!(
            validate_scale(&scale(-1), "default", blind)
                .denial_message()
                .starts_with("spec.replicas: must be >= 0, got -1")
        );
        let view = json!({"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"targetRef": {"name": "s", "componentType": "decoder"}, "strict": true,
                "scalePolicy": [{"group": "a", "constraints": {"min": 1, "max": 2}}]}});
        let known = lookup::Objects::new([&view]);
        assert!(validate_scale(&scale(2), "default", &known).is_allowed());
        assert!(
            validate_scale(&scale(3), "default", &known)
                .denial_message()
                .contains("must be within [1, 2]")
        );
        assert_eq!(
            validate_scale(&scale(2), "other", &known).denial_message(),
            "metadata.name: ScaleView \"v\" not found"
        );
        assert!(
            validate_scale(&json!({"spec": {"replicas": "x"}}), "default", blind)
                .denial_message()
                .starts_with("spec.replicas: not an autoscaling/v1 Scale")
        );
    }

    /// Issue 37: 3 -> 100 000 on `kubectl scale` of a ScaleView, a role's
    /// replicas on an InferenceService update: admitted, with a warning
    /// naming the jump; an ordinary step says nothing.
    #[test]
    fn a_replica_jump_is_admitted_with_a_warning() {
        let scale = |replicas: i64| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": "v", "namespace": "default"}, "spec": {"replicas": replicas}})
        };
        let view = json!({"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"targetRef": {"name": "s", "componentType": "decoder"}, "replicas": 3,
                "scalePolicy": [{"group": "a"}, {"group": "b", "constraints": {"max": 2}}]}});
        let known = lookup::Objects::new([&view]);
        let jump = validate_scale(&scale(100_000), "default", &known);
        assert!(jump.is_allowed(), "{}", jump.denial_message());
        assert!(
            jump.warnings
                .iter()
                .any(|w| w.starts_with("spec.replicas: 3 -> 100000 replicas is more than 10 times")),
            "{:?}",
            jump.warnings
        );
        let step = validate_scale(&scale(30), "default", &known);
        assert!(step.warnings.is_empty(), "{:?}", step.warnings);

        let old = story2();
        let mut new = old.clone();
        new["spec"]["roles"][0]["replicas"] = json!(5000);
        let findings = validate(
            Kind::InferenceService,
            "default",
            &new,
            Some(&old),
            &lookup::Blind,
        );
        assert!(findings.is_allowed(), "{}", findings.denial_message());
        assert!(
            findings
                .warnings
                .iter()
                .any(|w| w.starts_with("spec.roles[0].replicas: 2 -> 5000 replicas")),
            "{:?}",
            findings.warnings
        );
        new["spec"]["roles"][0]["replicas"] = json!(20);
        let findings = validate(
            Kind::InferenceService,
            "default",
            &new,
            Some(&old),
            &lookup::Blind,
        );
        assert!(
            !findings.warnings.iter().any(|w| w.contains(" -> ")),
            "{:?}",
            findings.warnings
        );
    }

    #[test]
    fn scale_views_are_checked_against_their_target_when_it_can_be_seen() {
        let view = json!({"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "v", "namespace": "default"},
            "spec": {"targetRef": {"name": "qwen", "componentType": "decoder"}, "scalePolicy": [{"group": "decode"}]}});
        let blind = validate(Kind::ScaleView, "default", &view, None, &lookup::Blind);
        assert!(blind.is_allowed());
        assert!(blind.warnings[0].starts_with("spec.targetRef: not checked"));
        let known = lookup::Objects::new([&story2()]);
        assert!(validate(Kind::ScaleView, "default", &view, None, &known).is_allowed());
        let empty = lookup::Objects::new([]);
        assert_eq!(
            validate(Kind::ScaleView, "default", &view, None, &empty).denial_message(),
            "spec.targetRef.name: InferenceService \"qwen\" not found in this namespace"
        );
    }

    #[test]
    fn an_update_that_leaves_the_spec_is_never_refused_for_it() {
        let mut view = json!({"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "v", "namespace": "default", "finalizers": ["fusioninfer.io/scale-view-lock"],
                "deletionTimestamp": "2026-11-21T10:00:00Z"},
            "spec": {"targetRef": {"name": "qwen", "componentType": "decoder"}, "scalePolicy": [{"group": "decode"}]}});
        let gone = lookup::Objects::new([]);
        let old = view.clone();
        view["metadata"]["finalizers"] = json!([]);
        assert!(
            validate(Kind::ScaleView, "default", &view, Some(&old), &gone).is_allowed(),
            "removing the finalizer of a view whose target is gone"
        );
        // A change of the spec is still checked, target and all.
        let mut moved = view.clone();
        moved["spec"]["scalePolicy"][0]["priority"] = json!(3);
        assert!(
            validate(Kind::ScaleView, "default", &moved, Some(&old), &gone)
                .denial_message()
                .contains("InferenceService \"qwen\" not found"),
        );
        // An InferenceService whose locked role is unchanged but whose labels move.
        let mut service = story2();
        let stored = service.clone();
        service["metadata"]["labels"] = json!({"team": "serving"});
        assert!(
            validate(
                Kind::InferenceService,
                "default",
                &service,
                Some(&stored),
                &gone
            )
            .is_allowed()
        );
    }

    #[test]
    fn children_that_kubernetes_would_refuse_are_denied_at_admission() {
        let mut long = story2();
        let name = "s".repeat(55);
        long["metadata"]["name"] = json!(name);
        long["spec"]["roles"][0]["replicas"] = json!(10);
        let findings = admit(
            Kind::InferenceService,
            "default",
            &long,
            None,
            &lookup::Blind,
        )
        .unwrap_err();
        let message = findings.denial_message();
        // The highest index a surge may create is 10: "-prefill-10", which
        // the hint is sized for; the first replica is the one named first.
        assert!(
            message.starts_with(&format!("metadata.name: \"{name}\" makes LeaderWorkerSet \"{name}-prefill-0\" (up to \"{name}-prefill-10\" during a surge), which must be at most 63 characters (a DNS-1035 label): use \"{}\"", "s".repeat(52))),
            "{message}"
        );
        // A 53-character name with 8 prefill replicas fits: "...-prefill-8" is 63.
        long["metadata"]["name"] = json!("s".repeat(53));
        long["spec"]["roles"][0]["replicas"] = json!(8);
        assert!(
            admit(
                Kind::InferenceService,
                "default",
                &long,
                None,
                &lookup::Blind
            )
            .is_ok()
        );
    }

    #[test]
    fn resource_scaling_groups_that_close_a_cycle_are_denied_naming_it() {
        let group = |name: &str, from: &str, to: &str| {
            json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
                "metadata": {"name": name, "namespace": "ai"},
                "spec": {"targetResources": [
                    {"name": from, "apiVersion": "apps/v1", "kind": "Deployment"},
                    {"name": to, "apiVersion": "apps/v1", "kind": "Deployment"}],
                "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                    {"name": from, "role": "Source"}, {"name": to, "role": "Target", "ratio": 2}]}}}})
        };
        let a = group("rsg-a", "prefill", "decode");
        let b = group("rsg-b", "decode", "prefill");
        let stored = lookup::Objects::new([&a]);
        let findings = validate(Kind::ResourceScalingGroup, "ai", &b, None, &stored);
        let message = findings.denial_message();
        assert!(
            message.contains("prefill -> decode -> prefill")
                || message.contains("decode -> prefill -> decode"),
            "{message}"
        );
        assert!(
            message.contains("rsg-a") && message.contains("rsg-b"),
            "{message}"
        );
        // The same group alone, or with a group it does not loop with, passes.
        assert!(
            validate(
                Kind::ResourceScalingGroup,
                "ai",
                &b,
                None,
                &lookup::Objects::new([])
            )
            .is_allowed()
        );
        let c = group("rsg-c", "decode", "router");
        assert!(validate(Kind::ResourceScalingGroup, "ai", &c, None, &stored).is_allowed());
        // Without a cluster the check is skipped, and says so.
        let blind = validate(Kind::ResourceScalingGroup, "ai", &b, None, &lookup::Blind);
        assert!(blind.is_allowed() && blind.warnings[0].contains("were not checked"));
    }

    #[test]
    fn resource_scaling_groups_name_only_kinds_that_scale() {
        let group = |api_version: &str, kind: &str| {
            json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
                "metadata": {"name": "rsg", "namespace": "ai"},
                "spec": {"targetResources": [
                    {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
                    {"name": "agents", "apiVersion": api_version, "kind": kind}],
                "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                    {"name": "router", "role": "Source"}, {"name": "agents", "role": "Target", "ratio": 1}]}}}})
        };
        let denied = validate(
            Kind::ResourceScalingGroup,
            "ai",
            &group("apps/v1", "DaemonSet"),
            None,
            &lookup::Blind,
        );
        assert!(
            denied.denial_message().starts_with(
                "spec.targetResources[1].kind: DaemonSet (apps/v1) cannot be scaled in place: it has no scale subresource. Tandem scales Deployment and StatefulSet (apps/v1)"
            ),
            "{}",
            denied.denial_message()
        );
        // Without discovery a custom kind is a warning, not a guess.
        let blind = validate(
            Kind::ResourceScalingGroup,
            "ai",
            &group("example.com/v1", "Agent"),
            None,
            &lookup::Blind,
        );
        assert!(blind.is_allowed());
        assert!(
            blind.warnings.iter().any(|w| w.starts_with(
                "spec.targetResources[1].kind: Agent (example.com/v1) was not checked for a scale subresource"
            )),
            "{:?}",
            blind.warnings
        );
        // With the kind's CRD in view, it is known either way.
        let crd = |scale: bool| {
            let mut version = json!({"name": "v1", "served": true, "storage": true});
            if scale {
                version["subresources"] = json!({"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}});
            }
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "agents.example.com"},
                "spec": {"group": "example.com", "names": {"kind": "Agent", "plural": "agents"},
                    "scope": "Namespaced", "versions": [version]}})
        };
        let (with, without) = (crd(true), crd(false));
        let scaled = lookup::Objects::new([&with]);
        let findings = validate(
            Kind::ResourceScalingGroup,
            "ai",
            &group("example.com/v1", "Agent"),
            None,
            &scaled,
        );
        assert!(
            findings.is_allowed() && findings.warnings.is_empty(),
            "{findings:?}"
        );
        let unscaled = lookup::Objects::new([&without]);
        assert!(
            validate(
                Kind::ResourceScalingGroup,
                "ai",
                &group("example.com/v1", "Agent"),
                None,
                &unscaled,
            )
            .denial_message()
            .starts_with(
                "spec.targetResources[1].kind: Agent (example.com/v1) cannot be scaled in place"
            )
        );
    }

    #[test]
    fn admit_is_mutate_then_validate() {
        let (object, warnings) = admit(
            Kind::InferenceService,
            "default",
            &story2(),
            None,
            &lookup::Blind,
        )
        .unwrap();
        assert_eq!(object["spec"]["roles"][1]["replicas"], json!(1));
        assert!(warnings.is_empty());
        let mut bad = story2();
        bad["spec"]["roles"][1]["multinode"] = json!({"nodeCount": 0});
        let findings = admit(
            Kind::InferenceService,
            "default",
            &bad,
            None,
            &lookup::Blind,
        )
        .unwrap_err();
        assert_eq!(
            findings.denial_message(),
            "spec.roles[1].multinode.nodeCount: must be >= 1, got 0"
        );
    }
}
