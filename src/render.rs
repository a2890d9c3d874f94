//! `tandem render`: what Tandem would do to a world of objects, with no cluster.
//!
//! The world is multi-document YAML: Tandem's objects and any others. Every
//! Tandem object goes through the same defaults and validation as the webhook;
//! a denial stops the render. Then the controllers' own reconcile functions
//! run over the world ([`crate::reconcile::memory`]), pass after pass, until
//! nothing changes. The output lists, deterministically, every object Tandem
//! would create or change, in its full desired state.

pub mod changes;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::admission::{self, Kind};
use crate::api::resource_scaling_group::ScalingStrategyType;
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView, Violation};
use crate::plan::inference_service::service as service_plan;
use crate::plan::resource_scaling_group::adapter;
use crate::reconcile::memory::Memory;
use crate::reconcile::{self, Context, inference_service, resource_scaling_group, scale_view};

/// Reconcile passes over the world before render gives up on converging.
pub const MAX_PASSES: usize = 10;

/// Kinds that have no namespace; everything else without one is put in the
/// default namespace, as kubectl does.
const CLUSTER_SCOPED: [&str; 12] = [
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "GatewayClass",
    "Queue",
];

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("could not read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{source_name} document {document}: not valid YAML: {reason}")]
    Yaml {
        source_name: String,
        document: usize,
        reason: String,
    },
    #[error("{source_name} document {document}: {reason}")]
    NotAnObject {
        source_name: String,
        document: usize,
        reason: String,
    },
    #[error("{0}: no objects in it (an empty file, or only comments and `---`)")]
    Empty(String),
    #[error("{0}: no .yaml, .yml or .json files in this directory")]
    EmptyDirectory(String),
    #[error(
        "{0}: no objects in this directory's manifests (each is empty, or only comments and `---`)"
    )]
    NoObjectsInDirectory(String),
    #[error("{0} is given twice")]
    Duplicate(ObjectKey),
    #[error("{object}: {reason}")]
    Unreadable { object: ObjectKey, reason: String },
    #[error("the reconcilers did not converge in {MAX_PASSES} passes")]
    NotConverging,
    #[error("{} object(s) denied", .0.len())]
    Denied(Vec<Denial>),
}

impl RenderError {
    /// Denials are the answer no ([`crate::exit::NO`]); anything else is
    /// trouble ([`crate::exit::TROUBLE`]), as for every subcommand.
    pub fn exit_code(&self) -> u8 {
        match self {
            RenderError::Denied(_) => crate::exit::NO,
            _ => crate::exit::TROUBLE,
        }
    }
}

pub use crate::reconcile::memory::ObjectKey;

/// One reason one object was refused: `Kind namespace/name: field.path: reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub object: ObjectKey,
    pub violation: Violation,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.violation)
    }
}

/// What Tandem would do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rendered {
    /// Objects to create or change, in their full desired state, sorted.
    pub apply: Vec<Value>,
    /// Objects to delete, sorted.
    pub delete: Vec<ObjectKey>,
    /// Admission warnings, `Kind namespace/name: warning`.
    pub warnings: Vec<String>,
    /// Why: one per applied object, then one per deleted object, in the
    /// order of `apply` and `delete`.
    pub changes: Vec<changes::Change>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// Reads the world from files (`-` is standard input) and directories (their
/// `.yaml`, `.yml` and `.json` files, sorted by name, not recursing, as
/// `kubectl -f DIR` does). A file named without any object is an error
/// naming it; in a directory such a file is skipped, as kubectl skips it,
/// and only a directory with no object in any file is an error.
pub fn read_world(paths: &[PathBuf], namespace: &str) -> Result<Vec<Value>, RenderError> {
    let mut world = Vec::new();
    for path in paths {
        let before = world.len();
        for file in files_of(path)? {
            let (name, text) = read_source(&file)?;
            let objects = parse_world(&name, &text, namespace)?;
            if objects.is_empty() && !path.is_dir() {
                return Err(RenderError::Empty(name));
            }
            world.extend(objects);
        }
        if world.len() == before {
            return Err(RenderError::NoObjectsInDirectory(
                path.display().to_string(),
            ));
        }
    }
    Ok(world)
}

/// The files `-f path` names: the path itself, or a directory's manifests.
fn files_of(path: &Path) -> Result<Vec<PathBuf>, RenderError> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let read_error = |source| RenderError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(read_error)? {
        let file = entry.map_err(read_error)?.path();
        let manifest = file
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["yaml", "yml", "json"].contains(&e));
        if manifest && file.is_file() {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(RenderError::EmptyDirectory(path.display().to_string()));
    }
    files.sort();
    Ok(files)
}

/// Why `apiVersion` `kind` is refused: it is in one of Tandem's API groups
/// but is not one of Tandem's kinds (a misspelt kind or version), with the
/// nearest one Tandem serves. None for Tandem's kinds and for every other
/// group (those objects are world).
pub fn unknown_tandem_kind(api_version: &str, kind: &str) -> Option<String> {
    let group = |v: &str| adapter::group_version(v).0.to_owned();
    let tandem_group = Kind::ALL
        .iter()
        .any(|k| group(&k.api_version()) == group(api_version));
    if !tandem_group || Kind::of(api_version, kind).is_some() {
        return None;
    }
    let written = format!("{api_version} {kind}");
    let nearest = Kind::ALL
        .into_iter()
        .min_by_key(|k| edit_distance(&written, &format!("{} {}", k.api_version(), k.name())))?;
    let mut meant = Vec::new();
    if nearest.api_version() != api_version {
        meant.push(format!("apiVersion: {}", nearest.api_version()));
    }
    if nearest.name() != kind {
        meant.push(format!("kind: {}", nearest.name()));
    }
    Some(format!(
        "apiVersion {api_version}, kind {kind}: {} serves no such kind: did you mean {}?",
        group(api_version),
        meant.join(", ")
    ))
}

/// The Levenshtein distance of two strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i.saturating_add(1);
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal.saturating_add(usize::from(ca != *cb));
            let insert = row[j].saturating_add(1);
            let remove = row[j.saturating_add(1)].saturating_add(1);
            diagonal = row[j.saturating_add(1)];
            row[j.saturating_add(1)] = substitute.min(insert).min(remove);
        }
    }
    row[b.len()]
}

fn read_source(path: &Path) -> Result<(String, String), RenderError> {
    let name = path.display().to_string();
    let result = if name == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    let text = result.map_err(|source| RenderError::Read {
        path: name.clone(),
        source,
    })?;
    Ok((
        if name == "-" {
            "stdin".to_owned()
        } else {
            name
        },
        text,
    ))
}

/// Parses multi-document YAML into objects; `List` documents are unpacked and
/// objects without a namespace are put in `namespace`.
pub fn parse_world(
    source_name: &str,
    text: &str,
    namespace: &str,
) -> Result<Vec<Value>, RenderError> {
    let mut objects = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let document_number = index.saturating_add(1);
        let value = Value::deserialize(document).map_err(|e| RenderError::Yaml {
            source_name: source_name.to_owned(),
            document: document_number,
            reason: e.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        let items = match value.get("kind").and_then(Value::as_str) {
            Some(kind) if kind.ends_with("List") && value.get("items").is_some() => {
                value["items"].as_array().cloned().unwrap_or_default()
            }
            _ => vec![value],
        };
        for mut object in items {
            let problem = |reason: &str| RenderError::NotAnObject {
                source_name: source_name.to_owned(),
                document: document_number,
                reason: reason.to_owned(),
            };
            if !object.is_object() {
                return Err(problem("is not a Kubernetes object (expected a mapping)"));
            }
            for field in ["apiVersion", "kind"] {
                if object
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(problem(&format!("{field}: required")));
                }
            }
            if object["metadata"]["name"]
                .as_str()
                .is_none_or(str::is_empty)
            {
                return Err(problem("metadata.name: required"));
            }
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            if let Some(reason) = unknown_tandem_kind(api_version, &kind) {
                return Err(problem(&reason));
            }
            if object["metadata"]["namespace"].is_null() && !CLUSTER_SCOPED.contains(&kind.as_str())
            {
                object["metadata"]["namespace"] = json!(namespace);
            }
            objects.push(object);
        }
    }
    Ok(objects)
}

/// The newest time the world records: objects' `creationTimestamp` and
/// `deletionTimestamp`, annotations that hold a time (a drain's start and
/// deadline), and every time in a status (conditions, upgrade steps). None
/// when the world holds no time. `tandem render` without `--now` runs at this
/// clock, so the same input gives the same output, and times it writes
/// are never older than those it reads.
pub fn newest_time(world: &[Value]) -> Option<jiff::Timestamp> {
    fn times(value: &Value, found: &mut Vec<jiff::Timestamp>) {
        match value {
            Value::String(text) => found.extend(text.parse::<jiff::Timestamp>().ok()),
            Value::Array(items) => items.iter().for_each(|item| times(item, found)),
            Value::Object(map) => map.values().for_each(|item| times(item, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for object in world {
        let metadata = &object["metadata"];
        times(&metadata["creationTimestamp"], &mut found);
        times(&metadata["deletionTimestamp"], &mut found);
        times(&metadata["annotations"], &mut found);
        times(&object["status"], &mut found);
    }
    found.into_iter().max()
}

/// What render does besides reading the world.
#[derive(Clone, Debug)]
pub struct Options {
    /// The clock of every status time; fixed, so the output is reproducible.
    /// The default, the epoch, is for tests; `tandem render` uses `--now`,
    /// else [`newest_time`], else the wall clock.
    pub now: Time,
    pub plan: service_plan::Options,
    /// Built-in API versions the cluster serves besides what the world
    /// shows (`--api-versions`, as Helm's): `scheduling.k8s.io/v1alpha2`
    /// makes Kubernetes' PodGroups served.
    pub api_versions: BTreeSet<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            now: Time(jiff::Timestamp::UNIX_EPOCH),
            plan: service_plan::Options::default(),
            api_versions: BTreeSet::new(),
        }
    }
}

/// The warning of a world without an object of Tandem's: nothing acts on it.
pub const NOTHING_TO_DO: &str = "the input holds no InferenceService, ScaleView or ResourceScalingGroup, so Tandem has nothing to do with it: render it together with the files that hold them (-f may be repeated)";

/// Admits every Tandem object of the world as the webhook would (all denials
/// of all objects are reported together), then runs the reconcilers over the
/// world, pass after pass, until nothing changes.
pub fn render(world: Vec<Value>, options: &Options) -> Result<Rendered, RenderError> {
    let mut by_key: BTreeMap<ObjectKey, Value> = BTreeMap::new();
    for object in world {
        let key = ObjectKey::of(&object);
        if by_key.contains_key(&key) {
            return Err(RenderError::Duplicate(key));
        }
        by_key.insert(key, object);
    }
    let input = by_key.clone();
    let mut denials = Vec::new();
    let mut warnings = Vec::new();
    let mut touched = BTreeSet::new();
    // Admission sees the world as it was given, like a webhook sees its caches.
    let known = admission::lookup::WithEppImage {
        inner: Arc::new(
            admission::lookup::Objects::new(by_key.values()).serving(&options.api_versions),
        ),
        epp_image: options.plan.router.epp_image.clone(),
    };
    for (key, object) in by_key.iter_mut() {
        let Some(kind) = Kind::of(&key.api_version, &key.kind) else {
            continue;
        };
        // What the API server's strict field validation would refuse; the
        // webhook never sees such fields (the API server drops or refuses
        // them first), but render reads the YAML as written.
        denials.extend(
            crate::api::schema::unknown_fields(&key.kind, object)
                .into_iter()
                .map(|violation| Denial {
                    object: key.clone(),
                    violation,
                }),
        );
        match admit_one(kind, &key.namespace, object, &known) {
            Ok((admitted, found)) => {
                warnings.extend(found.into_iter().map(|w| format!("{key}: {w}")));
                *object = admitted;
                touched.insert(key.clone());
            }
            Err(findings) => {
                denials.extend(findings.violations.into_iter().map(|violation| Denial {
                    object: key.clone(),
                    violation,
                }))
            }
        }
    }
    if !denials.is_empty() {
        return Err(RenderError::Denied(denials));
    }
    if !by_key
        .keys()
        .any(|key| Kind::of(&key.api_version, &key.kind).is_some())
    {
        warnings.push(NOTHING_TO_DO.to_owned());
    }

    let admitted = by_key.clone();
    let world = Arc::new(Memory::new(by_key).serving(&options.api_versions));
    for key in touched {
        world.touch(key);
    }
    let recording = Arc::new(changes::Recording::new(world.clone()));
    let mut ctx = Context::new(recording.clone(), options.plan.clone());
    let now = options.now.0;
    ctx.now = Arc::new(move || now);
    let ctx = Arc::new(ctx);
    let mut converged = false;
    for _ in 0..MAX_PASSES {
        let before = world.changes();
        reconcile_all(&world, &ctx)?;
        if world.changes() == before {
            converged = true;
            break;
        }
    }
    if !converged {
        return Err(RenderError::NotConverging);
    }
    let (apply, deleted) = world.outcome();
    let delete: Vec<ObjectKey> = deleted
        .into_iter()
        .filter(|key| input.contains_key(key))
        .collect();
    let changes = recording.changes(&input, &admitted, &apply, &delete);
    Ok(Rendered {
        apply,
        delete,
        warnings,
        changes,
    })
}

/// An object of the input as the API server would hold it: one being
/// created goes through mutation and validation; one with a
/// `deletionTimestamp` is stored already (it was admitted when it was
/// created, and only its finalizers may still change), so it only gets the
/// defaults a stored object has, and is never refused as a creation (a
/// ScaleView whose InferenceService is gone is still deleted).
fn admit_one(
    kind: Kind,
    namespace: &str,
    object: &Value,
    known: &dyn admission::Lookup,
) -> Result<(Value, Vec<String>), crate::api::Findings> {
    if object["metadata"]["deletionTimestamp"].is_string() {
        admission::mutate(kind, namespace, object, Some(object), known)
            .map(|mutation| (mutation.object, Vec::new()))
    } else {
        admission::admit(kind, namespace, object, None, known)
    }
}

/// One pass of every reconciler over every object of its kind, in the
/// order a change flows: InplaceScaling groups (a Source's Targets follow
/// it), views (they set roles' replicas), services (they make the
/// children), GroupReplication groups (they copy what the others made).
/// Each runs the controllers' own reconcile function on the world.
fn reconcile_all(world: &Memory, ctx: &Arc<Context>) -> Result<(), RenderError> {
    let groups = world.keys(
        &Kind::ResourceScalingGroup.api_version(),
        Kind::ResourceScalingGroup.name(),
    );
    let strategy_of =
        |key: &ObjectKey| -> Result<ResourceScalingGroup, RenderError> { typed(world, key) };
    for key in &groups {
        let group = strategy_of(key)?;
        if group.spec.scaling_strategy.type_ == ScalingStrategyType::InplaceScaling {
            run(
                key,
                resource_scaling_group::reconcile(Arc::new(group), ctx.clone()),
            )?;
        }
    }
    for key in world.keys(&Kind::ScaleView.api_version(), Kind::ScaleView.name()) {
        let view: ScaleView = typed(world, &key)?;
        run(&key, scale_view::reconcile(Arc::new(view), ctx.clone()))?;
    }
    for key in world.keys(
        &Kind::InferenceService.api_version(),
        Kind::InferenceService.name(),
    ) {
        let service: InferenceService = typed(world, &key)?;
        run(
            &key,
            inference_service::reconcile(Arc::new(service), ctx.clone()),
        )?;
    }
    for key in &groups {
        let group = strategy_of(key)?;
        if group.spec.scaling_strategy.type_ == ScalingStrategyType::GroupReplication {
            run(
                key,
                resource_scaling_group::reconcile(Arc::new(group), ctx.clone()),
            )?;
        }
    }
    Ok(())
}

/// An object of the world as its Tandem kind (admission has refused those
/// that do not parse, so this fails only for one a reconciler broke).
fn typed<K: serde::de::DeserializeOwned>(
    world: &Memory,
    key: &ObjectKey,
) -> Result<K, RenderError> {
    let object = world.object(key).unwrap_or_default();
    serde_json::from_value(object).map_err(|e| RenderError::Unreadable {
        object: key.clone(),
        reason: e.to_string(),
    })
}

/// Runs one reconcile to its end: every write of the world is done at once,
/// so the future never waits.
fn run(
    key: &ObjectKey,
    reconcile: impl std::future::Future<
        Output = Result<kube::runtime::controller::Action, reconcile::Error>,
    >,
) -> Result<(), RenderError> {
    futures::executor::block_on(reconcile)
        .map(drop)
        .map_err(|e| RenderError::Unreadable {
            object: key.clone(),
            reason: e.to_string(),
        })
}

impl Rendered {
    /// The output: YAML documents with deletions as `# delete` lines, each
    /// after a comment line saying why (`# created: …`), or one JSON object
    /// `{"apply", "delete", "warnings", "changes"}`.
    pub fn write(&self, format: Format) -> Result<String, serde_norway::Error> {
        let why = |index: usize| {
            self.changes.get(index).map_or_else(String::new, |change| {
                format!(
                    "# {} {} {}: {}\n",
                    change.action,
                    change.kind,
                    change.name,
                    change.said().replace(['\n', '\r'], " ")
                )
            })
        };
        match format {
            Format::Json => {
                let out = json!({"apply": self.apply, "delete": self.delete,
                    "warnings": self.warnings, "changes": self.changes});
                // A Value of strings, numbers and maps always serialises.
                Ok(format!(
                    "{}\n",
                    serde_json::to_string_pretty(&out).unwrap_or_default()
                ))
            }
            Format::Yaml => {
                let mut out = String::new();
                for (index, object) in self.apply.iter().enumerate() {
                    out.push_str("---\n");
                    out.push_str(&why(index));
                    out.push_str(&serde_norway::to_string(object)?);
                }
                for (index, key) in self.delete.iter().enumerate() {
                    out.push_str(&why(self.apply.len().saturating_add(index)));
                    out.push_str(&format!(
                        "# delete {} {} {}/{}\n",
                        key.api_version, key.kind, key.namespace, key.name
                    ));
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORLD: &str = r#"
apiVersion: fusioninfer.io/v1alpha1
kind: InferenceService
metadata: {name: b}
spec:
  roles:
  - {name: inference, componentType: worker, template: {spec: {containers: [{name: vllm, image: vllm}]}}}
---
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: ai}}
- {apiVersion: apps/v1, kind: Deployment, metadata: {name: router, namespace: ai}, spec: {replicas: 2}}
- apiVersion: fusioninfer.io/v1alpha1
  kind: ScaleView
  metadata: {name: a}
  spec: {targetRef: {name: b, componentType: worker}, scalePolicy: [{group: inference}]}
"#;

    #[test]
    fn parses_documents_lists_and_namespaces() {
        let world = parse_world("w.yaml", WORLD, "default").unwrap();
        let keys: Vec<String> = world.iter().map(|o| ObjectKey::of(o).to_string()).collect();
        assert_eq!(
            keys,
            [
                "InferenceService default/b",
                "Namespace ai",
                "Deployment ai/router",
                "ScaleView default/a"
            ]
        );
        let other = parse_world("w.yaml", WORLD, "team").unwrap();
        assert_eq!(other[0]["metadata"]["namespace"], "team");
    }

    #[test]
    fn admits_tandem_objects_only_and_sorts() {
        let rendered = render(
            parse_world("w.yaml", WORLD, "default").unwrap(),
            &Options::default(),
        )
        .unwrap();
        let kinds: Vec<&str> = rendered
            .apply
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "InferenceService",
                "ScaleView",
                "LeaderWorkerSet",
                "PodDisruptionBudget"
            ]
        );
        assert_eq!(rendered.apply[2]["metadata"]["name"], "b-inference-0");
        assert_eq!(
            rendered.apply[0]["status"]["ready"], "0/1",
            "status as the reconciler writes it"
        );
        assert_eq!(
            rendered.apply[0]["status"]["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:00:00Z",
            "the clock is fixed"
        );
        assert_eq!(
            rendered.apply[0]["spec"]["roles"][0]["replicas"], 1,
            "defaults applied"
        );
        assert_eq!(rendered.apply[1]["spec"]["strict"], false);
        let yaml = rendered.write(Format::Yaml).unwrap();
        assert_eq!(
            yaml,
            render(
                parse_world("w.yaml", WORLD, "default").unwrap(),
                &Options::default()
            )
            .unwrap()
            .write(Format::Yaml)
            .unwrap()
        );
        let json: Value = serde_json::from_str(&rendered.write(Format::Json).unwrap()).unwrap();
        assert_eq!(json["apply"].as_array().unwrap().len(), 4);
        assert_eq!(json["delete"], json!([]));
    }

    #[test]
    fn reconciling_the_world_deletes_what_the_plan_drops() {
        let lws = |index: u32| {
            format!(
                "---\napiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata:\n  name: b-inference-{index}\n  labels: {{fusioninfer.io/service: b, app.kubernetes.io/managed-by: tandem, fusioninfer.io/role-name: inference, fusioninfer.io/replica-index: '{index}'}}\nspec: {{replicas: 1}}\n"
            )
        };
        // One replica wanted, indices 3 and 5 exist: the highest goes.
        let world = format!("{WORLD}\n{}{}", lws(3), lws(5));
        let rendered = render(
            parse_world("w.yaml", &world, "default").unwrap(),
            &Options::default(),
        )
        .unwrap();
        assert_eq!(
            rendered.delete,
            [ObjectKey {
                api_version: "leaderworkerset.x-k8s.io/v1".into(),
                kind: "LeaderWorkerSet".into(),
                namespace: "default".into(),
                name: "b-inference-5".into()
            }]
        );
        let names: Vec<&str> = rendered
            .apply
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"b-inference-3"),
            "index 3 is kept and brought to the plan: {names:?}"
        );
        let yaml = rendered.write(Format::Yaml).unwrap();
        assert!(
            yaml.ends_with(
                "# delete leaderworkerset.x-k8s.io/v1 LeaderWorkerSet default/b-inference-5\n"
            ),
            "{yaml}"
        );
    }

    #[test]
    fn denials_name_object_and_field() {
        let bad = WORLD.replace(
            "template: {spec: {containers: [{name: vllm, image: vllm}]}}",
            "replicas: -1",
        );
        let err = render(
            parse_world("w.yaml", &bad, "default").unwrap(),
            &Options::default(),
        )
        .unwrap_err();
        assert_eq!(err.exit_code(), 1);
        let RenderError::Denied(denials) = err else {
            panic!("expected denials")
        };
        let lines: Vec<String> = denials.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "InferenceService default/b: spec.roles[0].replicas: must be >= 0, got -1",
                "InferenceService default/b: spec.roles[0].template: required: a worker role needs a pod template with at least one container",
            ]
        );
    }

    #[test]
    fn malformed_worlds_say_where() {
        let err = parse_world("w.yaml", "a: [", "default")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("w.yaml document 1: not valid YAML"),
            "{err}"
        );
        let err = parse_world(
            "w.yaml",
            "{apiVersion: v1, kind: A, metadata: {name: a}}\n---\nkind: X\n",
            "default",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(err, "w.yaml document 2: apiVersion: required");
        let err = parse_world(
            "w.yaml",
            "apiVersion: v1\nkind: X\nmetadata: {}\n",
            "default",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(err, "w.yaml document 1: metadata.name: required");
        let twice = format!("{WORLD}\n---\n{}", WORLD.split("---").next().unwrap());
        let err = render(
            parse_world("w.yaml", &twice, "default").unwrap(),
            &Options::default(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(err, "InferenceService default/b is given twice");
    }
}
