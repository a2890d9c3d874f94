//! The seed's ResourceAdapter as data (DESIGN.md §1.2): how the replicas of
//! a ResourceScalingGroup's resource are read and set.
//!
//! Read top to bottom:
//! 1. [`KNOWN`]: the kinds Tandem knows. Deployment, StatefulSet,
//!    LeaderWorkerSet and ScaleView are scaled through their `/scale`
//!    subresource; RoleBasedGroup (any served version) and InferenceService
//!    through a role, the `spec.roles[]` entry whose `name` is the role.
//!    Any other kind works through `/scale` when the API server's discovery
//!    says it has one ([`builtin_has_scale`] answers for Kubernetes' own
//!    groups, [`crd_scale`] for a CustomResourceDefinition).
//! 2. Reading replicas: from an autoscaling/v1 Scale ([`scale_replicas`]),
//!    from a whole object ([`object_replicas`], defaulting an unset
//!    `spec.replicas` as Kubernetes does), or of a role ([`role_replicas`]).
//! 3. Setting them: a merge patch of `/scale` ([`scale_patch`]), or a JSON
//!    Patch that tests the role's name before replacing its replicas
//!    ([`role_patch`], the ScaleView reconciler's).
//! 4. Admission ([`check`]): an InplaceScaling group may only name kinds that
//!    can be scaled; a kind nobody can tell about is a warning, not a guess.

use serde_json::{Value, json};

use crate::api::Findings;
use crate::api::resource_scaling_group::{ResourceScalingGroupSpec, ScalingStrategyType};
use crate::plan::scale_view::{self, RoleScale};

/// How a kind's replicas are reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The `/scale` subresource (an autoscaling/v1 Scale).
    Scale,
    /// `spec.roles[i].replicas` of the role named `spec.roles[i].name`.
    Role,
}

/// A kind Tandem scales without asking discovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownKind {
    pub group: &'static str,
    /// None: every version the API server serves.
    pub version: Option<&'static str>,
    pub kind: &'static str,
    pub plural: &'static str,
    pub via: Via,
    /// The replicas of an object whose `spec.replicas` is unset: what the
    /// API server defaults it to (1 for the workloads), or what `/scale`
    /// reports for a custom resource without it (0).
    pub unset: i32,
}

/// The kinds of DESIGN.md §1.2's adapter table.
pub const KNOWN: [KnownKind; 6] = [
    KnownKind {
        group: "apps",
        version: Some("v1"),
        kind: "Deployment",
        plural: "deployments",
        via: Via::Scale,
        unset: 1,
    },
    KnownKind {
        group: "apps",
        version: Some("v1"),
        kind: "StatefulSet",
        plural: "statefulsets",
        via: Via::Scale,
        unset: 1,
    },
    KnownKind {
        group: "leaderworkerset.x-k8s.io",
        version: Some("v1"),
        kind: "LeaderWorkerSet",
        plural: "leaderworkersets",
        via: Via::Scale,
        unset: 1,
    },
    KnownKind {
        group: "fusioninfer.io",
        version: Some("v1alpha1"),
        kind: "ScaleView",
        plural: "scaleviews",
        via: Via::Scale,
        unset: 0,
    },
    KnownKind {
        group: "workloads.x-k8s.io",
        version: None,
        kind: "RoleBasedGroup",
        plural: "rolebasedgroups",
        via: Via::Role,
        unset: 1,
    },
    KnownKind {
        group: "fusioninfer.io",
        version: Some("v1alpha1"),
        kind: "InferenceService",
        plural: "inferenceservices",
        via: Via::Role,
        unset: 1,
    },
];

/// Where a scaled kind keeps its replicas in the object (`.spec.replicas`
/// for every kind of [`KNOWN`] scaled through `/scale`).
pub const SPEC_REPLICAS: &str = ".spec.replicas";

/// `apps` and `v1` of `apps/v1`; the core group is empty (`v1`).
pub fn group_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// The kind of [`KNOWN`] that `apiVersion` and `kind` name, if any.
pub fn known(api_version: &str, kind: &str) -> Option<&'static KnownKind> {
    let (group, version) = group_version(api_version);
    KNOWN
        .iter()
        .find(|k| k.group == group && k.kind == kind && k.version.is_none_or(|v| v == version))
}

/// Kubernetes' own API groups: every kind they serve is known to this binary.
const BUILTIN_GROUPS: [&str; 16] = [
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "networking.k8s.io",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "apiextensions.k8s.io",
    "admissionregistration.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "node.k8s.io",
    "scheduling.k8s.io",
    "certificates.k8s.io",
];

/// Built-in kinds with a scale subresource, besides those in [`KNOWN`].
const BUILTIN_SCALED: [(&str, &str); 2] =
    [("apps/v1", "ReplicaSet"), ("v1", "ReplicationController")];

/// Whether a kind of Kubernetes' own groups has a scale subresource; None
/// for any other group, which only discovery (or its CRD) can tell.
pub fn builtin_has_scale(api_version: &str, kind: &str) -> Option<bool> {
    let (group, _) = group_version(api_version);
    if !BUILTIN_GROUPS.contains(&group) {
        return None;
    }
    let scaled = known(api_version, kind).is_some_and(|k| k.via == Via::Scale)
        || BUILTIN_SCALED.contains(&(api_version, kind));
    Some(scaled)
}

/// What a CustomResourceDefinition says about `apiVersion` `kind`: None when
/// it defines something else (or is not a CRD), `Some(None)` when it serves
/// the kind without a scale subresource, `Some(Some(path))` with the
/// `specReplicasPath` (`.spec.replicas`) when it has one.
pub fn crd_scale(crd: &Value, api_version: &str, kind: &str) -> Option<Option<String>> {
    if crd["kind"] != "CustomResourceDefinition" {
        return None;
    }
    let (group, version) = group_version(api_version);
    let spec = &crd["spec"];
    if spec["group"] != group || spec["names"]["kind"] != kind {
        return None;
    }
    let served = spec["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version && v["served"].as_bool().unwrap_or(true))?;
    Some(
        served["subresources"]["scale"]["specReplicasPath"]
            .as_str()
            .map(str::to_owned),
    )
}

/// The replicas an autoscaling/v1 Scale reports (`spec.replicas` is omitted
/// when 0).
pub fn scale_replicas(scale: &Value) -> Result<i32, String> {
    match &scale["spec"]["replicas"] {
        Value::Null => Ok(0),
        value => replicas_value(value, "spec.replicas"),
    }
}

/// The replicas of an object at `path` (a specReplicasPath such as
/// `.spec.replicas`), or `unset` when the field is absent.
pub fn object_replicas(object: &Value, path: &str, unset: i32) -> Result<i32, String> {
    let pointer = pointer(path)?;
    match object.pointer(&pointer) {
        None | Some(Value::Null) => Ok(unset),
        Some(value) => replicas_value(value, path.trim_start_matches('.')),
    }
}

/// A role of an object with roles, as read: where it sits in `spec.roles`
/// and its replicas (an unset `replicas` is 1, as both kinds default it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleReading {
    pub index: usize,
    /// `spec.roles[index].replicas` as written (None: unset).
    pub written: Option<i32>,
    pub replicas: i32,
}

/// The role `role` of an object with roles; the error says what is missing.
pub fn role_replicas(object: &Value, role: &str) -> Result<RoleReading, String> {
    let roles = object["spec"]["roles"]
        .as_array()
        .ok_or_else(|| "has no spec.roles".to_owned())?;
    let index = roles
        .iter()
        .position(|r| r["name"] == role)
        .ok_or_else(|| {
            let names: Vec<&str> = roles.iter().filter_map(|r| r["name"].as_str()).collect();
            format!(
                "has no role {role:?} in spec.roles (roles: {})",
                names.join(", ")
            )
        })?;
    let written = match &roles[index]["replicas"] {
        Value::Null => None,
        value => Some(replicas_value(
            value,
            &format!("spec.roles[{index}].replicas"),
        )?),
    };
    Ok(RoleReading {
        index,
        written,
        replicas: written.unwrap_or(1),
    })
}

fn replicas_value(value: &Value, field: &str) -> Result<i32, String> {
    value
        .as_i64()
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| format!("{field}: {value} is not a replica count"))
}

/// `.spec.replicas` as a JSON pointer, `/spec/replicas`. Only plain dotted
/// paths are accepted (what specReplicasPath allows, without indexes).
fn pointer(path: &str) -> Result<String, String> {
    let fields: Vec<&str> = path.strip_prefix('.').unwrap_or(path).split('.').collect();
    if fields.iter().any(|f| f.is_empty() || f.contains('[')) {
        return Err(format!(
            "{path:?} is not a dotted path to the replicas field"
        ));
    }
    Ok(fields
        .iter()
        .map(|f| format!("/{}", f.replace('~', "~0").replace('/', "~1")))
        .collect())
}

/// The merge patch of a `/scale` subresource that sets `replicas`.
pub fn scale_patch(replicas: i32) -> Value {
    json!({"spec": {"replicas": replicas}})
}

/// The merge patch of a whole object that sets the field at `path` (a
/// specReplicasPath) to `replicas`: what a `/scale` write does to it.
pub fn object_patch(path: &str, replicas: i32) -> Result<Value, String> {
    let pointer = pointer(path)?;
    let patch =
        pointer
            .rsplit('/')
            .filter(|f| !f.is_empty())
            .fold(json!(replicas), |inner, field| {
                let field = field.replace("~1", "/").replace("~0", "~");
                json!({ field: inner })
            });
    Ok(patch)
}

/// The JSON Patch that scales roles of one object: for each, a `test` that
/// `spec.roles[i].name` still is the role, then its replicas.
pub fn role_patch(roles: &[(&str, &RoleReading, i32)]) -> Result<json_patch::Patch, String> {
    let scales: Vec<RoleScale> = roles
        .iter()
        .map(|(role, reading, to)| RoleScale {
            index: reading.index,
            role: (*role).to_owned(),
            from: reading.written,
            to: *to,
        })
        .collect();
    scale_view::role_patch(&scales)
}

/// The kinds Tandem scales, as an admission message lists them.
pub fn supported() -> String {
    "Deployment and StatefulSet (apps/v1), LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) and \
     ScaleView (fusioninfer.io/v1alpha1) through /scale; roles of RoleBasedGroup \
     (workloads.x-k8s.io, any version) and InferenceService (fusioninfer.io/v1alpha1); \
     any other kind whose API has a scale subresource"
        .to_owned()
}

/// Denies the resources of an InplaceScaling group that cannot be scaled,
/// naming `spec.targetResources[i].kind` (or `.targetRef.kind`) and what is
/// supported. `has_scale` answers for kinds outside [`KNOWN`] (None: cannot
/// know, which is a warning). A kind with roles must list the roles it binds.
/// GroupReplication clones its resources instead of scaling them, so its
/// kinds are not checked here.
pub fn check(
    spec: &ResourceScalingGroupSpec,
    has_scale: &dyn Fn(&str, &str) -> Option<bool>,
) -> Findings {
    let mut findings = Findings::default();
    if spec.scaling_strategy.type_ != ScalingStrategyType::InplaceScaling {
        return findings;
    }
    for (i, target) in spec.target_resources.iter().enumerate() {
        let Some(object) = target.object() else {
            continue;
        };
        let field = if target.target_ref.is_some() {
            format!("spec.targetResources[{i}].targetRef.kind")
        } else {
            format!("spec.targetResources[{i}].kind")
        };
        let (api_version, kind) = (object.api_version, object.kind);
        if api_version.is_empty() || kind.is_empty() {
            continue;
        }
        match known(api_version, kind) {
            Some(k) if k.via == Via::Role && target.sub_resources.is_empty() => findings.deny(
                format!("spec.targetResources[{i}].subResources"),
                format!(
                    "required: a {kind} is scaled per role; list the roles to bind (subResources[].roleName)"
                ),
            ),
            Some(_) => {}
            None => match has_scale(api_version, kind) {
                Some(true) => {}
                Some(false) => findings.deny(
                    field,
                    format!(
                        "{kind} ({api_version}) cannot be scaled in place: it has no scale subresource. Tandem scales {}",
                        supported()
                    ),
                ),
                None => findings.warn(format!(
                    "{field}: {kind} ({api_version}) was not checked for a scale subresource: this webhook cannot see the cluster's API discovery; without one it cannot be scaled"
                )),
            },
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_adapter_table() {
        // (apiVersion, kind, via, unset replicas)
        let cases = [
            ("apps/v1", "Deployment", Some((Via::Scale, 1))),
            ("apps/v1", "StatefulSet", Some((Via::Scale, 1))),
            (
                "leaderworkerset.x-k8s.io/v1",
                "LeaderWorkerSet",
                Some((Via::Scale, 1)),
            ),
            (
                "fusioninfer.io/v1alpha1",
                "ScaleView",
                Some((Via::Scale, 0)),
            ),
            (
                "workloads.x-k8s.io/v1alpha1",
                "RoleBasedGroup",
                Some((Via::Role, 1)),
            ),
            (
                "workloads.x-k8s.io/v1alpha2",
                "RoleBasedGroup",
                Some((Via::Role, 1)),
            ),
            (
                "workloads.x-k8s.io/v1",
                "RoleBasedGroup",
                Some((Via::Role, 1)),
            ),
            (
                "fusioninfer.io/v1alpha1",
                "InferenceService",
                Some((Via::Role, 1)),
            ),
            ("apps/v1beta2", "Deployment", None),
            ("apps/v1", "deployment", None),
            ("extensions/v1beta1", "Deployment", None),
            ("leaderworkerset.x-k8s.io/v1alpha1", "LeaderWorkerSet", None),
            ("serving.kserve.io/v1beta1", "InferenceService", None),
            ("apps/v1", "DaemonSet", None),
        ];
        for (api_version, kind, expected) in cases {
            assert_eq!(
                known(api_version, kind).map(|k| (k.via, k.unset)),
                expected,
                "{api_version} {kind}"
            );
        }
    }

    #[test]
    fn built_in_groups_are_answered_without_discovery() {
        let cases = [
            ("apps/v1", "Deployment", Some(true)),
            ("apps/v1", "ReplicaSet", Some(true)),
            ("v1", "ReplicationController", Some(true)),
            ("apps/v1", "DaemonSet", Some(false)),
            ("v1", "Service", Some(false)),
            ("batch/v1", "Job", Some(false)),
            ("apps/v1beta2", "Deployment", Some(false)),
            ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", None),
            ("example.com/v1", "Thing", None),
        ];
        for (api_version, kind, expected) in cases {
            assert_eq!(
                builtin_has_scale(api_version, kind),
                expected,
                "{api_version} {kind}"
            );
        }
    }

    fn crd(scale: Option<&str>, served: bool) -> Value {
        let mut version = json!({"name": "v1", "served": served, "storage": true});
        if let Some(path) = scale {
            version["subresources"] = json!({"scale": {"specReplicasPath": path, "statusReplicasPath": ".status.replicas"}});
        }
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Thing", "plural": "things"},
                "scope": "Namespaced", "versions": [version]}})
    }

    #[test]
    fn crds_tell_whether_a_kind_has_a_scale_subresource() {
        let scaled = crd(Some(".spec.size"), true);
        assert_eq!(
            crd_scale(&scaled, "example.com/v1", "Thing"),
            Some(Some(".spec.size".to_owned()))
        );
        assert_eq!(
            crd_scale(&crd(None, true), "example.com/v1", "Thing"),
            Some(None)
        );
        for (api_version, kind) in [
            ("example.com/v2", "Thing"),
            ("example.org/v1", "Thing"),
            ("example.com/v1", "Other"),
        ] {
            assert_eq!(
                crd_scale(&scaled, api_version, kind),
                None,
                "{api_version} {kind}"
            );
        }
        assert_eq!(
            crd_scale(&crd(Some(".spec.size"), false), "example.com/v1", "Thing"),
            None,
            "a version that is not served is not there"
        );
        let mut not_a_crd = scaled.clone();
        not_a_crd["kind"] = json!("Thing");
        assert_eq!(crd_scale(&not_a_crd, "example.com/v1", "Thing"), None);
    }

    #[test]
    fn replicas_are_read_as_kubernetes_defaults_them() {
        let deployment = json!({"spec": {"replicas": 3}});
        assert_eq!(object_replicas(&deployment, SPEC_REPLICAS, 1), Ok(3));
        assert_eq!(
            object_replicas(&json!({"spec": {}}), SPEC_REPLICAS, 1),
            Ok(1)
        );
        assert_eq!(object_replicas(&json!({}), SPEC_REPLICAS, 0), Ok(0));
        assert_eq!(
            object_replicas(&json!({"spec": {"size": 4}}), ".spec.size", 0),
            Ok(4)
        );
        assert_eq!(
            object_replicas(&json!({"spec": {"replicas": "three"}}), SPEC_REPLICAS, 1),
            Err("spec.replicas: \"three\" is not a replica count".to_owned())
        );
        assert_eq!(
            object_replicas(
                &json!({"spec": {"replicas": 1_i64 << 40}}),
                SPEC_REPLICAS,
                1
            ),
            Err("spec.replicas: 1099511627776 is not a replica count".to_owned())
        );
        assert!(object_replicas(&deployment, ".spec.items[0]", 1).is_err());
        assert_eq!(scale_replicas(&json!({"spec": {"replicas": 7}})), Ok(7));
        assert_eq!(
            scale_replicas(&json!({"spec": {}})),
            Ok(0),
            "omitted when 0"
        );
    }

    fn rbg() -> Value {
        json!({"spec": {"roles": [
            {"name": "prefill", "replicas": 2},
            {"name": "Decode"},
            {"name": "bad", "replicas": -1.5},
        ]}})
    }

    #[test]
    fn roles_are_found_by_name() {
        assert_eq!(
            role_replicas(&rbg(), "prefill"),
            Ok(RoleReading {
                index: 0,
                written: Some(2),
                replicas: 2
            })
        );
        assert_eq!(
            role_replicas(&rbg(), "Decode"),
            Ok(RoleReading {
                index: 1,
                written: None,
                replicas: 1
            })
        );
        assert_eq!(
            role_replicas(&rbg(), "decode"),
            Err("has no role \"decode\" in spec.roles (roles: prefill, Decode, bad)".to_owned())
        );
        assert_eq!(
            role_replicas(&rbg(), "bad"),
            Err("spec.roles[2].replicas: -1.5 is not a replica count".to_owned())
        );
        assert_eq!(
            role_replicas(&json!({"spec": {}}), "prefill"),
            Err("has no spec.roles".to_owned())
        );
    }

    #[test]
    fn patches_set_what_was_read() {
        assert_eq!(scale_patch(20), json!({"spec": {"replicas": 20}}));
        assert_eq!(
            object_patch(SPEC_REPLICAS, 20),
            Ok(json!({"spec": {"replicas": 20}}))
        );
        assert_eq!(
            object_patch(".spec.group.size", 2),
            Ok(json!({"spec": {"group": {"size": 2}}}))
        );
        let mut object = rbg();
        let prefill = role_replicas(&object, "prefill").expect("role");
        let decode = role_replicas(&object, "Decode").expect("role");
        let patch =
            role_patch(&[("prefill", &prefill, 10), ("Decode", &decode, 20)]).expect("patch");
        assert_eq!(
            serde_json::to_value(&patch).expect("patch serialises"),
            json!([
                {"op": "test", "path": "/spec/roles/0/name", "value": "prefill"},
                {"op": "replace", "path": "/spec/roles/0/replicas", "value": 10},
                {"op": "test", "path": "/spec/roles/1/name", "value": "Decode"},
                {"op": "add", "path": "/spec/roles/1/replicas", "value": 20},
            ])
        );
        json_patch::patch(&mut object, &patch).expect("applies");
        assert_eq!(
            role_replicas(&object, "prefill").map(|r| r.replicas),
            Ok(10)
        );
        assert_eq!(role_replicas(&object, "Decode").map(|r| r.replicas), Ok(20));
        // A spec reordered since it was read fails the test instead of
        // scaling the wrong role.
        let mut reordered =
            json!({"spec": {"roles": [{"name": "Decode"}, {"name": "prefill", "replicas": 2}]}});
        assert!(json_patch::patch(&mut reordered, &patch).is_err());
    }

    proptest! {
        #[test]
        fn an_object_patch_is_read_back(
            fields in prop::collection::vec("[a-zA-Z/~]{1,6}", 1..4),
            replicas in any::<i32>(),
            before in proptest::option::of(any::<i32>()),
        ) {
            let path = format!(".{}", fields.join("."));
            let mut object = json!({});
            if let Some(before) = before {
                json_patch::merge(&mut object, &object_patch(&path, before).expect("a dotted path"));
            }
            json_patch::merge(&mut object, &object_patch(&path, replicas).expect("a dotted path"));
            prop_assert_eq!(object_replicas(&object, &path, 0), Ok(replicas));
        }
    }

    fn inplace(targets: Value) -> ResourceScalingGroupSpec {
        serde_json::from_value(json!({
            "targetResources": targets,
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "a", "role": "Source"}]}}
        }))
        .expect("test spec parses")
    }

    #[test]
    fn admission_denies_what_cannot_be_scaled() {
        let spec = inplace(json!([
            {"name": "a", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "b", "apiVersion": "apps/v1", "kind": "DaemonSet"},
            {"name": "c", "targetRef": {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t"}},
            {"name": "d", "apiVersion": "example.com/v1", "kind": "Scaled"},
            {"name": "e", "apiVersion": "example.org/v1", "kind": "Unknown"},
            {"name": "f", "apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup"},
            {"name": "g", "apiVersion": "workloads.x-k8s.io/v1alpha1", "kind": "RoleBasedGroup",
             "subResources": [{"roleName": "r"}]},
        ]));
        let has_scale = |api_version: &str, kind: &str| match (api_version, kind) {
            ("example.com/v1", "Scaled") => Some(true),
            ("example.com/v1", _) => Some(false),
            _ => builtin_has_scale(api_version, kind),
        };
        let findings = check(&spec, &has_scale);
        let messages: Vec<String> = findings
            .violations
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                format!("spec.targetResources[1].kind: DaemonSet (apps/v1) cannot be scaled in place: it has no scale subresource. Tandem scales {}", supported()),
                format!("spec.targetResources[2].targetRef.kind: Thing (example.com/v1) cannot be scaled in place: it has no scale subresource. Tandem scales {}", supported()),
                "spec.targetResources[5].subResources: required: a RoleBasedGroup is scaled per role; list the roles to bind (subResources[].roleName)".to_owned(),
            ]
        );
        assert_eq!(
            findings.warnings,
            [
                "spec.targetResources[4].kind: Unknown (example.org/v1) was not checked for a scale subresource: this webhook cannot see the cluster's API discovery; without one it cannot be scaled"
            ]
        );
    }

    #[test]
    fn group_replication_kinds_are_not_checked_here() {
        let mut spec =
            inplace(json!([{"name": "a", "apiVersion": "apps/v1", "kind": "DaemonSet"}]));
        spec.scaling_strategy.type_ = ScalingStrategyType::GroupReplication;
        assert_eq!(check(&spec, &|_, _| Some(false)), Findings::default());
    }
}
