//! What is installed of the projects whose objects Tandem writes (DESIGN
//! §5): LeaderWorkerSet, Volcano's PodGroup, the Inference Extension's
//! InferencePool and Gateway API, read from their CustomResourceDefinitions
//! (served versions and the fields of each schema), and the decisions that
//! follow from it. Pure: the CRDs come from a watch, from a folder
//! (`tandem check -f`) or from render's world.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

/// A project Tandem writes objects of, and the kind it reads to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Dependency {
    /// What users call it.
    pub name: &'static str,
    pub group: &'static str,
    pub kind: &'static str,
    /// The version Tandem writes.
    pub version: &'static str,
    /// Where to get it.
    pub install: &'static str,
}

pub const LEADER_WORKER_SET: Dependency = Dependency {
    name: "LeaderWorkerSet",
    group: "leaderworkerset.x-k8s.io",
    kind: "LeaderWorkerSet",
    version: "v1",
    install: "install LWS v0.9.0, the release Tandem is tested with (kubernetes-sigs/lws releases, manifests.yaml)",
};

pub const POD_GROUP: Dependency = Dependency {
    name: "Volcano PodGroup",
    group: "scheduling.volcano.sh",
    kind: "PodGroup",
    version: "v1beta1",
    install: "install Volcano v1.15.1, the release Tandem is tested with (volcano-sh/volcano releases; subGroupPolicy needs v1.14 or later)",
};

pub const INFERENCE_POOL: Dependency = Dependency {
    name: "InferencePool",
    group: "inference.networking.k8s.io",
    kind: "InferencePool",
    version: "v1",
    install: "install the Gateway API Inference Extension v1.5.0, the release Tandem is tested with (its manifests.yaml; InferencePool v1)",
};

pub const GATEWAY: Dependency = Dependency {
    name: "Gateway API Gateway",
    group: "gateway.networking.k8s.io",
    kind: "Gateway",
    version: "v1",
    install: "install Gateway API v1.6.1, the release Tandem is tested with (standard-install.yaml, the standard channel)",
};

pub const HTTP_ROUTE: Dependency = Dependency {
    name: "Gateway API HTTPRoute",
    group: "gateway.networking.k8s.io",
    kind: "HTTPRoute",
    version: "v1",
    install: "install Gateway API v1.6.1, the release Tandem is tested with (standard-install.yaml, the standard channel)",
};

/// Kubernetes' own PodGroup (alpha in 1.36): a built-in API, not a CRD.
/// What a cluster serves of it is learnt from API discovery and a dry run
/// ([`super::native_gang`]), and enters [`Installed`] through
/// [`Installed::with_native_pod_groups`].
pub const NATIVE_POD_GROUP: Dependency = Dependency {
    name: "Kubernetes PodGroup",
    group: "scheduling.k8s.io",
    kind: "PodGroup",
    version: "v1alpha2",
    install: "Kubernetes 1.36 or later with the alpha API on: kube-apiserver \
              --runtime-config=scheduling.k8s.io/v1alpha2=true and the feature gates \
              GenericWorkload and GangScheduling on kube-apiserver, kube-scheduler and \
              kube-controller-manager (docs/inferenceservice.md, \"Gang scheduling by Kubernetes itself\")",
};

/// The Inference Extension's pre-GA InferencePool (v0.x, and served beside
/// v1 until v1.2): Tandem does not write it, but says when it is what a
/// cluster has.
pub const LEGACY_INFERENCE_POOL: Dependency = Dependency {
    name: "InferencePool (pre-GA)",
    group: "inference.networking.x-k8s.io",
    kind: "InferencePool",
    version: "v1alpha2",
    install: INFERENCE_POOL.install,
};

/// The CustomResourceDefinition of `dependency` (its `metadata.name`, which
/// is `{plural}.{group}`): what Tandem watches to know it.
pub fn crd_name(dependency: &Dependency) -> String {
    let plural = match dependency.kind {
        "LeaderWorkerSet" => "leaderworkersets",
        "PodGroup" => "podgroups",
        "InferencePool" => "inferencepools",
        "Gateway" => "gateways",
        "HTTPRoute" => "httproutes",
        other => return format!("{}s.{}", other.to_lowercase(), dependency.group),
    };
    format!("{plural}.{}", dependency.group)
}

/// Every dependency, in the order `tandem check` lists them.
pub const ALL: [Dependency; 5] = [
    LEADER_WORKER_SET,
    POD_GROUP,
    INFERENCE_POOL,
    GATEWAY,
    HTTP_ROUTE,
];

/// The PodGroup fields whose presence decides the gang layout.
pub const POD_GROUP_FIELDS: [&str; 3] = ["subGroupPolicy", "minTaskMember", "networkTopology"];

/// One installed CRD: its served versions, the `spec` fields of each, and
/// the bundle version its annotations name (Gateway API writes one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Found {
    pub served: BTreeMap<String, BTreeSet<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle_version: Option<String>,
    /// The `spec` schema of each served version, for [`Installed::pruned`].
    #[serde(skip)]
    pub spec_schemas: BTreeMap<String, Value>,
}

impl Found {
    /// What one CustomResourceDefinition installs, by (group, kind); None
    /// for anything else.
    pub fn from_crd(crd: &Value) -> Option<((String, String), Found)> {
        if crd["kind"] != "CustomResourceDefinition" {
            return None;
        }
        let spec = &crd["spec"];
        let group = spec["group"].as_str()?;
        let kind = spec["names"]["kind"].as_str()?;
        let bundle_version =
            crd["metadata"]["annotations"]["gateway.networking.k8s.io/bundle-version"]
                .as_str()
                .map(str::to_owned);
        let versions: Vec<(&str, &Value)> = spec["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["served"] != false)
            .filter_map(|v| Some((v["name"].as_str()?, v)))
            .collect();
        let served = versions
            .iter()
            .map(|(name, v)| ((*name).to_owned(), spec_fields(v)))
            .collect();
        let spec_schemas = versions
            .iter()
            .map(|(name, v)| {
                (
                    (*name).to_owned(),
                    v["schema"]["openAPIV3Schema"]["properties"]["spec"].clone(),
                )
            })
            .collect();
        Some((
            (group.to_owned(), kind.to_owned()),
            Found {
                served,
                bundle_version,
                spec_schemas,
            },
        ))
    }

    /// The values the served `version`'s schema allows at `path` under
    /// `spec` (its `enum`), if it lists them.
    pub fn spec_enum(&self, version: &str, path: &[&str]) -> Option<BTreeSet<String>> {
        let mut schema = self.spec_schemas.get(version)?;
        for field in path {
            schema = &schema["properties"][*field];
        }
        let values = schema["enum"].as_array()?;
        Some(
            values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        )
    }

    /// Whether `version` is served.
    pub fn serves(&self, version: &str) -> bool {
        self.served.contains_key(version)
    }

    /// The `spec` fields of the served `version`.
    pub fn spec_fields(&self, version: &str) -> Option<&BTreeSet<String>> {
        self.served.get(version)
    }
}

/// What a cluster (or a folder, or render's world) has installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Installed {
    /// Nothing is known: the versions docs/getting-started.md lists are assumed, and
    /// every dependency with every field is taken as there.
    Assumed,
    /// Read from CRDs, by (group, kind); a dependency not among them is not
    /// installed.
    Known(BTreeMap<(String, String), Found>),
}

/// Nothing known, as a value to borrow for as long as needed.
pub static ASSUMED: Installed = Installed::Assumed;

impl Installed {
    /// What the CustomResourceDefinitions among `objects` install; anything
    /// else among them is ignored.
    pub fn from_crds<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Installed {
        Installed::Known(objects.into_iter().filter_map(Found::from_crd).collect())
    }

    /// The CRD of `dependency`: Some(None) when it is known to be missing,
    /// None when nothing is known (assumed there).
    pub fn find(&self, dependency: &Dependency) -> Option<Option<&Found>> {
        match self {
            Installed::Assumed => None,
            Installed::Known(found) => {
                Some(found.get(&(dependency.group.to_owned(), dependency.kind.to_owned())))
            }
        }
    }

    /// Whether `dependency` is served at the version Tandem writes (assumed
    /// so when nothing is known).
    pub fn has(&self, dependency: &Dependency) -> bool {
        match self.find(dependency) {
            None => true,
            Some(found) => found.is_some_and(|f| f.serves(dependency.version)),
        }
    }

    /// The kinds Tandem writes whose version it writes is not served, as
    /// (group, kind): what a plan leaves out. Empty when nothing is known.
    pub fn missing_kinds(&self) -> BTreeSet<(&'static str, &'static str)> {
        ALL.iter()
            .chain([&NATIVE_POD_GROUP])
            .filter(|d| !self.has(d))
            .map(|d| (d.group, d.kind))
            .collect()
    }

    /// Whether `object` is of a kind in [`Installed::missing_kinds`].
    pub fn lacks_kind_of(missing: &BTreeSet<(&str, &str)>, object: &Value) -> bool {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let kind = object["kind"].as_str().unwrap_or_default();
        missing.contains(&(group, kind))
    }

    /// This with what the API server serves of Kubernetes' PodGroups
    /// (discovery and a dry run, [`super::native_gang`]): None when it does
    /// not serve them, else the `spec` fields it keeps. Nothing changes when
    /// nothing is known ([`Installed::Assumed`]).
    pub fn with_native_pod_groups(mut self, fields: Option<BTreeSet<String>>) -> Installed {
        if let Installed::Known(found) = &mut self {
            let key = (
                NATIVE_POD_GROUP.group.to_owned(),
                NATIVE_POD_GROUP.kind.to_owned(),
            );
            match fields {
                Some(fields) => {
                    found.insert(
                        key,
                        Found {
                            served: BTreeMap::from([(NATIVE_POD_GROUP.version.to_owned(), fields)]),
                            ..Found::default()
                        },
                    );
                }
                None => {
                    found.remove(&key);
                }
            }
        }
        self
    }

    /// Whether the API server keeps `spec.{field}` of Kubernetes' PodGroup
    /// (assumed so when nothing is known).
    pub fn native_pod_group_has(&self, field: &str) -> bool {
        match self.find(&NATIVE_POD_GROUP) {
            None => true,
            Some(found) => found
                .and_then(|f| f.spec_fields(NATIVE_POD_GROUP.version))
                .is_some_and(|fields| fields.contains(field)),
        }
    }

    /// Whether the installed Volcano PodGroup takes a domain per sub-group
    /// (`subGroupPolicy[].networkTopology.highestTierName`, Volcano 1.15),
    /// where `spec.placement.replica` goes; true when nothing is known of
    /// its CRD (nothing is pruned then).
    pub fn volcano_places_sub_groups(&self) -> bool {
        let probe = serde_json::json!({
            "apiVersion": format!("{}/{}", POD_GROUP.group, POD_GROUP.version),
            "kind": POD_GROUP.kind,
            "spec": {"subGroupPolicy": [{"networkTopology": {"highestTierName": "k"}}]},
        });
        self.pruned(&probe).is_empty()
    }

    /// The fields of `object`'s `spec` that the installed schema of its
    /// kind and version does not have, so that the API server would drop
    /// them (as `spec.a.b[0].c`); empty when nothing is known of its CRD.
    pub fn pruned(&self, object: &Value) -> Vec<String> {
        let Installed::Known(found) = self else {
            return Vec::new();
        };
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = object["kind"].as_str().unwrap_or_default();
        let found = found.get(&(group.to_owned(), kind.to_owned()));
        let Some(schema) = found
            .and_then(|f| f.spec_schemas.get(version))
            .filter(|schema| !schema.is_null())
        else {
            // Kubernetes' PodGroup has no CRD: what its API server keeps of
            // `spec` is the set of top-level fields the probe learnt.
            let Some(fields) = found
                .filter(|f| f.spec_schemas.is_empty())
                .and_then(|f| f.spec_fields(version))
            else {
                return Vec::new();
            };
            return object["spec"]
                .as_object()
                .into_iter()
                .flat_map(|spec| spec.keys())
                .filter(|key| !fields.contains(*key))
                .map(|key| format!("spec.{key}"))
                .collect();
        };
        let mut pruned = Vec::new();
        unknown_fields(schema, &object["spec"], "spec", &mut pruned);
        pruned
    }

    /// Whether the PodGroup schema has `spec.{field}` (assumed so when
    /// nothing is known).
    pub fn pod_group_has(&self, field: &str) -> bool {
        match self.find(&POD_GROUP) {
            None => true,
            Some(found) => found
                .and_then(|f| f.spec_fields(POD_GROUP.version))
                .is_some_and(|fields| fields.contains(field)),
        }
    }
}

/// Why something a service needs is not there: the condition reason
/// (`DependencyMissing`, `DependencyTooOld`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Shortfall {
    /// The CRD is not installed, or does not serve the version Tandem writes.
    Missing,
    /// It is installed, but its schema lacks a field the service needs.
    TooOld,
}

impl Shortfall {
    pub fn reason(self) -> &'static str {
        match self {
            Shortfall::Missing => "DependencyMissing",
            Shortfall::TooOld => "DependencyTooOld",
        }
    }
}

/// One thing a service needs that the cluster lacks.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Lack {
    /// What needs it: a field of the InferenceService (`spec.roles[0]`), or
    /// the objects Tandem would write (`LeaderWorkerSet s-w-0`).
    pub field: String,
    pub dependency: &'static str,
    pub shortfall: Shortfall,
    /// What needs it, what was found and what to install, in a sentence.
    pub message: String,
}

impl Installed {
    /// What was found of `dependency`, in words: `not installed`, or the
    /// versions served (and, for the pre-GA InferencePool, that it is there).
    pub fn found_text(&self, dependency: &Dependency) -> String {
        match self.find(dependency) {
            None => "assumed installed".to_owned(),
            Some(None) if dependency == &NATIVE_POD_GROUP => "not served".to_owned(),
            Some(None) => "not installed".to_owned(),
            Some(Some(found)) => {
                let versions: Vec<&str> = found.served.keys().map(String::as_str).collect();
                format!("serving {}", versions.join(", "))
            }
        }
    }

    /// Every dependency as `(name, versions found, installed)`: the gauge
    /// `tandem_dependency_info`. Nothing when nothing is known.
    pub fn info(&self) -> Vec<(&'static str, String, bool)> {
        let Installed::Known(_) = self else {
            return Vec::new();
        };
        ALL.iter()
            .chain([&LEGACY_INFERENCE_POOL, &NATIVE_POD_GROUP])
            .map(|dependency| {
                let found = self.find(dependency).flatten();
                let versions = found
                    .map(|f| f.served.keys().cloned().collect::<Vec<_>>().join(","))
                    .unwrap_or_default();
                (dependency.name, versions, self.has(dependency))
            })
            .collect()
    }
}

/// Adds to `pruned` the paths under `path` of `value` that a structural
/// schema drops (Kubernetes' pruning): an object's fields that are neither
/// in `properties` nor allowed by `additionalProperties`, unless the schema
/// keeps unknown fields (`x-kubernetes-preserve-unknown-fields`) or the
/// field is an embedded resource's `apiVersion`, `kind` or `metadata`.
fn unknown_fields(schema: &Value, value: &Value, path: &str, pruned: &mut Vec<String>) {
    if schema["x-kubernetes-int-or-string"] == true {
        return;
    }
    let keeps_unknown = schema["x-kubernetes-preserve-unknown-fields"] == true;
    match value {
        Value::Object(fields) => {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let embedded = schema["x-kubernetes-embedded-resource"] == true;
            for (name, field) in fields {
                let at = format!("{path}.{name}");
                if let Some(known) = properties.and_then(|p| p.get(name)) {
                    unknown_fields(known, field, &at, pruned);
                } else if additional.is_object() {
                    unknown_fields(additional, field, &at, pruned);
                } else if additional == &Value::Bool(true)
                    || keeps_unknown
                    || (embedded && ["apiVersion", "kind", "metadata"].contains(&name.as_str()))
                {
                } else {
                    pruned.push(at);
                }
            }
        }
        // A list under a schema that keeps unknown fields and says nothing
        // of its items is kept whole.
        Value::Array(_) if keeps_unknown && schema["items"].is_null() => {}
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                unknown_fields(&schema["items"], item, &format!("{path}[{index}]"), pruned);
            }
        }
        _ => {}
    }
}

/// The properties of a CRD version's `spec`; empty when it keeps unknown
/// fields or has no schema.
fn spec_fields(version: &Value) -> BTreeSet<String> {
    version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// What `tandem check` says of one dependency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    pub dependency: &'static str,
    /// `group/version Kind`.
    pub api: String,
    /// Served versions found (and Gateway API's bundle version); empty when
    /// missing.
    pub found: Vec<String>,
    /// The fields that matter and whether each is there.
    pub fields: BTreeMap<&'static str, bool>,
    /// Whether `fields` says what the API server kept of an object sent to
    /// it (a dry run), rather than what a schema has.
    #[serde(skip)]
    pub fields_probed: bool,
    /// What Tandem will do with what is there.
    pub effect: String,
    /// What to install, when something is missing; None when all is there.
    pub install: Option<&'static str>,
    /// Whether Tandem can deploy every InferenceService with it (false for
    /// a missing LeaderWorkerSet; the others only limit features).
    pub required: bool,
    /// The services Tandem cannot deploy as asked with what is there (a
    /// dependency that only limits features, missing or too old); None
    /// when it limits nothing.
    pub rules_out: Option<&'static str>,
}

/// One report per dependency, for `tandem check`.
pub fn report(installed: &Installed) -> Vec<Report> {
    ALL.iter()
        .map(|dependency| report_one(installed, dependency))
        .collect()
}

fn report_one(installed: &Installed, dependency: &Dependency) -> Report {
    let found = installed.find(dependency).flatten();
    let mut versions: Vec<String> = found
        .map(|f| f.served.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(bundle) = found.and_then(|f| f.bundle_version.clone()) {
        versions.push(format!("bundle {bundle}"));
    }
    let has = installed.has(dependency);
    let mut fields = BTreeMap::new();
    if *dependency == POD_GROUP && has {
        for field in POD_GROUP_FIELDS {
            fields.insert(field, installed.pod_group_has(field));
        }
    }
    let (effect, install) = effect(installed, dependency, has);
    Report {
        dependency: dependency.name,
        api: format!(
            "{}/{} {}",
            dependency.group, dependency.version, dependency.kind
        ),
        found: versions,
        fields,
        fields_probed: false,
        rules_out: rules_out(installed, dependency, has),
        effect,
        install,
        required: *dependency == LEADER_WORKER_SET,
    }
}

/// What a missing (or too old) dependency that only limits features rules
/// out, for the verdict of `tandem check` (as `effect` says in full).
fn rules_out(installed: &Installed, dependency: &Dependency, has: bool) -> Option<&'static str> {
    match (dependency.kind, has) {
        ("LeaderWorkerSet", _) => None,
        ("PodGroup", true) if installed.pod_group_has("subGroupPolicy") => None,
        ("PodGroup", true) => {
            Some("gangPolicy: SubGroup (Volcano's PodGroup has no subGroupPolicy)")
        }
        ("PodGroup", false) => Some("gang-scheduled services (no Volcano PodGroup)"),
        (_, true) => None,
        ("InferencePool", false) => Some("router roles (no InferencePool)"),
        (_, false) => Some("NewRevision and IncrementalUpgrade (no Gateway API)"),
    }
}

/// What follows for Tandem's objects from `dependency` being there or not,
/// and what to install if anything (the decisions are
/// `plan::inference_service::dependencies`').
fn effect(
    installed: &Installed,
    dependency: &Dependency,
    has: bool,
) -> (String, Option<&'static str>) {
    let missing = |what: &str| (what.to_owned(), Some(dependency.install));
    match (dependency.kind, has) {
        ("LeaderWorkerSet", true) => ("one LeaderWorkerSet per replica".to_owned(), None),
        ("LeaderWorkerSet", false) => {
            missing("every InferenceService is refused: each replica is a LeaderWorkerSet")
        }
        ("PodGroup", true) if installed.pod_group_has("subGroupPolicy") => (
            format!(
                "gang scheduling with subGroupPolicy (each replica atomic, one of each gang role \
                 together); {}",
                if installed.volcano_places_sub_groups() {
                    "spec.placement.replica is each sub-group's networkTopology.highestTierName"
                } else {
                    "spec.placement.replica is refused (no subGroupPolicy[].networkTopology.\
                     highestTierName before Volcano 1.15)"
                }
            ),
            None,
        ),
        ("PodGroup", true) => (
            "no subGroupPolicy: a gang-scheduled service without gangPolicy gets the minTaskMember \
             layout (it starts only when every replica fits), and gangPolicy: SubGroup and \
             spec.placement.replica are refused"
                .to_owned(),
            Some(dependency.install),
        ),
        ("PodGroup", false) => missing(
            "a gang-scheduled service is admitted with a warning and reports DependencyMissing: \
             no PodGroup is written and its pods wait for Volcano",
        ),
        ("InferencePool", true) => ("a router role gets an InferencePool v1".to_owned(), None),
        ("InferencePool", false) => missing("a service with a router role is refused"),
        (_, true) => ("NewRevision and IncrementalUpgrade route through a Gateway".to_owned(), None),
        (_, false) => missing("NewRevision and IncrementalUpgrade are refused"),
    }
}

/// Whether everything an InferenceService always needs is there: `tandem
/// check` exits 0 only then.
pub fn ready(reports: &[Report]) -> bool {
    reports
        .iter()
        .filter(|r| r.required)
        .all(|r| r.install.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(group: &str, kind: &str, versions: &[(&str, &[&str])]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .map(|(name, fields)| {
                let properties: serde_json::Map<String, Value> = fields
                    .iter()
                    .map(|f| ((*f).to_owned(), json!({"type": "object"})))
                    .collect();
                json!({"name": name, "served": true, "storage": true, "schema": {"openAPIV3Schema":
                    {"properties": {"spec": {"properties": properties}}}}})
            })
            .collect();
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("x.{group}")},
            "spec": {"group": group, "names": {"kind": kind}, "versions": versions}})
    }

    #[test]
    fn nothing_known_assumes_everything() {
        let installed = Installed::Assumed;
        assert!(ALL.iter().all(|d| installed.has(d)));
        assert!(installed.pod_group_has("subGroupPolicy"));
        assert!(ready(&report(&installed)));
    }

    #[test]
    fn an_older_volcano_lacks_sub_groups_and_the_report_says_what_follows() {
        let lws = crd(
            "leaderworkerset.x-k8s.io",
            "LeaderWorkerSet",
            &[("v1", &["leaderWorkerTemplate"])],
        );
        let volcano = crd(
            "scheduling.volcano.sh",
            "PodGroup",
            &[("v1beta1", &["minMember", "minTaskMember"])],
        );
        let installed = Installed::from_crds([&lws, &volcano]);
        assert!(installed.has(&LEADER_WORKER_SET));
        assert!(installed.has(&POD_GROUP));
        assert!(!installed.pod_group_has("subGroupPolicy"));
        assert!(installed.pod_group_has("minTaskMember"));
        assert!(!installed.has(&INFERENCE_POOL));
        let reports = report(&installed);
        let pod_group = &reports[1];
        assert!(!pod_group.fields["subGroupPolicy"]);
        assert!(
            pod_group.effect.contains("gets the minTaskMember"),
            "{}",
            pod_group.effect
        );
        assert!(
            ready(&reports),
            "LWS is there: the rest only limits features"
        );
    }

    #[test]
    fn a_missing_leader_worker_set_is_not_ready_and_says_what_to_install() {
        let installed = Installed::from_crds([]);
        let reports = report(&installed);
        assert!(!ready(&reports));
        assert_eq!(reports[0].install, Some(LEADER_WORKER_SET.install));
        assert!(reports[0].found.is_empty());
    }

    #[test]
    fn pruned_fields_follow_the_structural_schema() {
        let mut crd = crd("example.io", "Thing", &[("v1", &[])]);
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
            "type": "object",
            "properties": {
                "size": {"type": "integer"},
                "port": {"x-kubernetes-int-or-string": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                "items": {"type": "array", "items": {"type": "object",
                    "properties": {"name": {"type": "string"}}}},
                "closed": {"type": "object"}
            }
        });
        let installed = Installed::from_crds([&crd]);
        let object =
            |spec: Value| json!({"apiVersion": "example.io/v1", "kind": "Thing", "spec": spec});
        let kept = object(json!({
            "size": 1, "port": "http", "labels": {"a": "b"}, "free": {"any": {"thing": 1}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"a": "b"}},
            "items": [{"name": "one"}]
        }));
        assert_eq!(installed.pruned(&kept), Vec::<String>::new());
        let dropped = object(json!({
            "sizes": 1, "template": {"spec": {"b": 1}}, "items": [{"name": "one"}, {"nam": "two"}],
            "closed": {"x": 1}
        }));
        assert_eq!(
            installed.pruned(&dropped),
            [
                "spec.closed.x",
                "spec.items[1].nam",
                "spec.sizes",
                "spec.template.spec.b"
            ]
        );
        // Another version, kind or nothing known: nothing to say.
        let other = json!({"apiVersion": "example.io/v2", "kind": "Thing", "spec": {"sizes": 1}});
        assert!(installed.pruned(&other).is_empty());
        assert!(Installed::Assumed.pruned(&dropped).is_empty());
    }

    #[test]
    fn a_version_not_served_is_not_there() {
        let pool = crd(
            "inference.networking.k8s.io",
            "InferencePool",
            &[("v1alpha2", &["selector"])],
        );
        let installed = Installed::from_crds([&pool]);
        assert!(!installed.has(&INFERENCE_POOL));
        let legacy = crd(
            "inference.networking.x-k8s.io",
            "InferencePool",
            &[("v1alpha2", &["selector"])],
        );
        assert!(!Installed::from_crds([&legacy]).has(&INFERENCE_POOL));
    }
}
