//! `tandem render`: what Tandem would do to a world of objects, with no cluster.
//!
//! The world is multi-document YAML: Tandem's objects and any others. Every
//! Tandem object goes through the same defaults and validation as the webhook;
//! a denial stops the render. The output lists, deterministically, every object
//! Tandem would create or change, in its full desired state.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::admission::{self, Kind};
use crate::api::resource_scaling_group::ScalingStrategyType;
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView, Violation};
use crate::plan::adapter::{self, Via};
use crate::plan::inplace::{self, Observed, Reading};
use crate::plan::ratio::Endpoint;
use crate::plan::replication;
use crate::plan::scale_view as view_plan;
use crate::plan::service::{self as service_plan, APPLIED_HASH, ChildKind, World};
use crate::plan::{children, drain, status};

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
    /// Denials exit with 2, as `tandem render` promises; anything else with 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            RenderError::Denied(_) => 2,
            _ => 1,
        }
    }
}

/// An object's identity in the world.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    fn of(object: &Value) -> ObjectKey {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        ObjectKey {
            api_version: text(&object["apiVersion"]),
            kind: text(&object["kind"]),
            namespace: text(&object["metadata"]["namespace"]),
            name: text(&object["metadata"]["name"]),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// Reads the world from files (`-` is standard input).
pub fn read_world(paths: &[PathBuf], namespace: &str) -> Result<Vec<Value>, RenderError> {
    let mut world = Vec::new();
    for path in paths {
        let (name, text) = read_source(path)?;
        world.extend(parse_world(&name, &text, namespace)?);
    }
    Ok(world)
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
            if object["metadata"]["namespace"].is_null() && !CLUSTER_SCOPED.contains(&kind.as_str())
            {
                object["metadata"]["namespace"] = json!(namespace);
            }
            objects.push(object);
        }
    }
    Ok(objects)
}

/// What render does besides reading the world.
#[derive(Clone, Debug)]
pub struct Options {
    /// The clock of every status time; fixed, so the output is reproducible.
    pub now: Time,
    pub plan: service_plan::Options,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            now: Time(jiff::Timestamp::UNIX_EPOCH),
            plan: service_plan::Options::default(),
        }
    }
}

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
    let input: BTreeSet<ObjectKey> = by_key.keys().cloned().collect();
    let mut denials = Vec::new();
    let mut warnings = Vec::new();
    let mut touched = BTreeSet::new();
    // Admission sees the world as it was given, like a webhook sees its caches.
    let known = admission::lookup::Objects::new(by_key.values());
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
        match admission::admit(kind, &key.namespace, object, None, &known) {
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

    let mut deleted = BTreeSet::new();
    let mut converged = false;
    for _ in 0..MAX_PASSES {
        let inplace_changed = reconcile_inplace_scalings(&mut by_key, &mut touched, options)?;
        let views_changed = reconcile_scale_views(&mut by_key, &mut touched, options)?;
        let services_changed =
            reconcile_services(&mut by_key, &mut touched, &mut deleted, options)?;
        let replications_changed =
            reconcile_group_replications(&mut by_key, &mut touched, &mut deleted, options)?;
        if !inplace_changed && !views_changed && !services_changed && !replications_changed {
            converged = true;
            break;
        }
    }
    if !converged {
        return Err(RenderError::NotConverging);
    }
    Ok(Rendered {
        apply: touched
            .iter()
            .filter_map(|k| by_key.get(k).cloned())
            .collect(),
        delete: deleted.intersection(&input).cloned().collect(),
        warnings,
    })
}

/// One pass of the InferenceService reconciler over every service of the
/// world; whether anything changed.
fn reconcile_services(
    world: &mut BTreeMap<ObjectKey, Value>,
    touched: &mut BTreeSet<ObjectKey>,
    deleted: &mut BTreeSet<ObjectKey>,
    options: &Options,
) -> Result<bool, RenderError> {
    let services: Vec<ObjectKey> = world
        .keys()
        .filter(|k| Kind::of(&k.api_version, &k.kind) == Some(Kind::InferenceService))
        .cloned()
        .collect();
    let none = BTreeSet::new();
    let mut changed = false;
    for key in services {
        let service: InferenceService =
            serde_json::from_value(world[&key].clone()).map_err(|e| RenderError::Unreadable {
                object: key.clone(),
                reason: e.to_string(),
            })?;
        let owned: Vec<Value> = world
            .values()
            .filter(|o| ChildKind::of(o).is_some() && children::owns(&service, o))
            .cloned()
            .collect();
        let pods: Vec<Value> = world
            .values()
            .filter(|o| o["apiVersion"] == "v1" && o["kind"] == "Pod")
            .filter(|o| o["metadata"]["namespace"] == key.namespace.as_str())
            .filter(|o| o["metadata"]["labels"][children::SERVICE] == key.name.as_str())
            .cloned()
            .collect();
        let scale_views = scale_views_in(world, &key.namespace);
        let pass = service_plan::reconcile(
            &service,
            &World {
                children: &owned,
                pods: &pods,
                unavailable: &none,
                scale_views: &scale_views,
            },
            &options.plan,
            &options.now,
        );
        for step in pass.apply {
            let child = ObjectKey::of(&step.object);
            // A drain applies only a Pod's traffic label and annotations.
            if step.object["kind"] == "Pod" {
                if let Some(pod) = world.get_mut(&child) {
                    apply_to_pod(pod, &step.object);
                    touched.insert(child);
                    changed = true;
                }
                continue;
            }
            let mut object = step.object;
            if let Some(existing) = world.get(&child) {
                if let Some(status) = existing.get("status") {
                    object["status"] = status.clone();
                }
                // As the API server does: a new spec is a new generation, so
                // a status the input gave for the old one (a Gateway
                // controller's observedGeneration) no longer counts for it.
                if existing.get("spec") != object.get("spec") && existing.get("status").is_some() {
                    let generation = existing["metadata"]["generation"].as_i64().unwrap_or(1);
                    let next = generation.checked_add(1).ok_or_else(|| RenderError::Unreadable {
                        object: child.clone(),
                        reason: format!(
                            "metadata.generation: {generation} is the largest generation there is; a changed spec cannot get a new one"
                        ),
                    })?;
                    object["metadata"]["generation"] = json!(next);
                }
            }
            world.insert(child.clone(), object);
            touched.insert(child);
            changed = true;
        }
        for step in pass.delete {
            let child = ObjectKey::of(&step.object);
            world.remove(&child);
            touched.remove(&child);
            deleted.insert(child);
            changed = true;
        }
        let current = service.status.clone().unwrap_or_default();
        if status::reported(&pass.status) != status::reported(&current)
            || pass.status.scale_views != current.scale_views
        {
            if let Some(object) = world.get_mut(&key) {
                object["status"] = serde_json::to_value(&pass.status).unwrap_or_default();
            }
            touched.insert(key);
            changed = true;
        }
    }
    Ok(changed)
}

/// What server-side apply makes of a Pod Tandem applied a drain's label and
/// annotations to: the fields Tandem owns (plan::drain) are replaced, the
/// rest stays.
fn apply_to_pod(pod: &mut Value, applied: &Value) {
    for key in [drain::DRAIN_STARTED, drain::DRAIN_DEADLINE, APPLIED_HASH] {
        if let Some(annotations) = pod["metadata"]["annotations"].as_object_mut() {
            annotations.remove(key);
        }
    }
    merge_applied(pod, applied);
}

/// Merges what server-side apply sends into an object: maps field by field,
/// lists and scalars replaced (what Tandem applies to an object it does not
/// own, such as the labels on a GroupReplication template).
fn merge_applied(object: &mut Value, applied: &Value) {
    match (object, applied) {
        (Value::Object(object), Value::Object(applied)) => {
            for (key, value) in applied {
                merge_applied(object.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (object, applied) => *object = applied.clone(),
    }
}

/// One pass of the GroupReplication reconciler over every
/// ResourceScalingGroup of the world whose strategy is GroupReplication: the
/// originals' group labels, the clones, the victims, the status; whether
/// anything changed. Pod readiness and deletion costs come from the world.
fn reconcile_group_replications(
    world: &mut BTreeMap<ObjectKey, Value>,
    touched: &mut BTreeSet<ObjectKey>,
    deleted: &mut BTreeSet<ObjectKey>,
    options: &Options,
) -> Result<bool, RenderError> {
    let groups: Vec<ObjectKey> = world
        .keys()
        .filter(|k| Kind::of(&k.api_version, &k.kind) == Some(Kind::ResourceScalingGroup))
        .cloned()
        .collect();
    let none = BTreeSet::new();
    let mut changed = false;
    for key in groups {
        let rsg: ResourceScalingGroup =
            serde_json::from_value(world[&key].clone()).map_err(|e| RenderError::Unreadable {
                object: key.clone(),
                reason: e.to_string(),
            })?;
        if rsg.spec.scaling_strategy.type_ != ScalingStrategyType::GroupReplication {
            continue;
        }
        let template_keys: Vec<Option<ObjectKey>> = rsg
            .spec
            .target_resources
            .iter()
            .map(|t| {
                t.object().map(|o| ObjectKey {
                    api_version: o.api_version.to_owned(),
                    kind: o.kind.to_owned(),
                    namespace: key.namespace.clone(),
                    name: o.name.to_owned(),
                })
            })
            .collect();
        let templates: Vec<Option<Value>> = template_keys
            .iter()
            .map(|k| k.as_ref().and_then(|k| world.get(k)).cloned())
            .collect();
        let labelled = |o: &&Value| {
            o["metadata"]["namespace"] == key.namespace.as_str()
                && o["metadata"]["labels"][replication::NAME_LABEL] == key.name.as_str()
        };
        let objects: Vec<Value> = world
            .values()
            .filter(|o| !(o["apiVersion"] == "v1" && o["kind"] == "Pod"))
            .filter(labelled)
            .cloned()
            .collect();
        let pods: Vec<Value> = world
            .values()
            .filter(|o| o["apiVersion"] == "v1" && o["kind"] == "Pod")
            .filter(labelled)
            .cloned()
            .collect();
        let pass = replication::reconcile(
            &rsg,
            &replication::World {
                templates: &templates,
                objects: &objects,
                pods: &pods,
                unavailable: &none,
            },
            &options.now,
        );
        for step in pass.apply {
            let object_key = ObjectKey::of(&step.object);
            let is_template = template_keys.iter().flatten().any(|k| *k == object_key);
            match world.get_mut(&object_key) {
                Some(original) if is_template => merge_applied(original, &step.object),
                existing => {
                    let status = existing.and_then(|o| o.get("status")).cloned();
                    let mut object = step.object;
                    if let Some(status) = status {
                        object["status"] = status;
                    }
                    world.insert(object_key.clone(), object);
                }
            }
            touched.insert(object_key);
            changed = true;
        }
        for step in pass.delete {
            let object_key = ObjectKey::of(&step.object);
            world.remove(&object_key);
            touched.remove(&object_key);
            deleted.insert(object_key);
            changed = true;
        }
        if rsg.status.as_ref() != Some(&pass.status) {
            if let Some(object) = world.get_mut(&key) {
                object["status"] =
                    serde_json::to_value(&pass.status).map_err(|e| RenderError::Unreadable {
                        object: key.clone(),
                        reason: e.to_string(),
                    })?;
            }
            touched.insert(key);
            changed = true;
        }
    }
    Ok(changed)
}

/// The ScaleViews of a namespace of the world (those that parse; admission
/// has refused the others).
fn scale_views_in(world: &BTreeMap<ObjectKey, Value>, namespace: &str) -> Vec<ScaleView> {
    world
        .iter()
        .filter(|(k, _)| {
            k.namespace == namespace && Kind::of(&k.api_version, &k.kind) == Some(Kind::ScaleView)
        })
        .filter_map(|(_, o)| serde_json::from_value(o.clone()).ok())
        .collect()
}

/// One pass of the ScaleView reconciler over every view of the world: the
/// view's finalizer and status, the lock in its target's status and the
/// target's role replicas; whether anything changed.
fn reconcile_scale_views(
    world: &mut BTreeMap<ObjectKey, Value>,
    touched: &mut BTreeSet<ObjectKey>,
    options: &Options,
) -> Result<bool, RenderError> {
    let views: Vec<ObjectKey> = world
        .keys()
        .filter(|k| Kind::of(&k.api_version, &k.kind) == Some(Kind::ScaleView))
        .cloned()
        .collect();
    let mut changed = false;
    for key in views {
        let unreadable = |e: serde_json::Error, object: &ObjectKey| RenderError::Unreadable {
            object: object.clone(),
            reason: e.to_string(),
        };
        let view: ScaleView =
            serde_json::from_value(world[&key].clone()).map_err(|e| unreadable(e, &key))?;
        let target_key = ObjectKey {
            api_version: Kind::InferenceService.api_version(),
            kind: Kind::InferenceService.name().to_owned(),
            namespace: key.namespace.clone(),
            name: view.spec.target_ref.name.clone(),
        };
        let target: Option<InferenceService> = match world.get(&target_key) {
            Some(object) => Some(
                serde_json::from_value(object.clone()).map_err(|e| unreadable(e, &target_key))?,
            ),
            None => None,
        };
        let pass = view_plan::reconcile(&view, target.as_ref(), &options.now);
        if let Some(object) = world.get_mut(&key) {
            if let Some(finalizers) = &pass.finalizers {
                object["metadata"]["finalizers"] = json!(finalizers);
                touched.insert(key.clone());
                changed = true;
            }
            if let Some(status) = pass
                .status
                .as_ref()
                .filter(|s| view.status.as_ref() != Some(*s))
            {
                object["status"] = serde_json::to_value(status).map_err(|e| unreadable(e, &key))?;
                touched.insert(key.clone());
                changed = true;
            }
        }
        if pass.locks.is_none() && pass.roles.is_empty() {
            continue;
        }
        let Some(object) = world.get_mut(&target_key) else {
            continue;
        };
        if let Some(locks) = &pass.locks {
            object["status"]["scaleViews"] = json!(locks);
        }
        let patch =
            view_plan::role_patch(&pass.roles).map_err(|reason| RenderError::Unreadable {
                object: target_key.clone(),
                reason,
            })?;
        json_patch::patch(object, &patch).map_err(|e| RenderError::Unreadable {
            object: target_key.clone(),
            reason: format!("ScaleView {}: {e}", key.name),
        })?;
        touched.insert(target_key);
        changed = true;
    }
    Ok(changed)
}

/// One pass of the ResourceScalingGroup reconciler over every InplaceScaling
/// group of the world: the Targets it scales (their objects as a `/scale`
/// write or the role patch would leave them) and its status; whether
/// anything changed. A chain settles in the first pass: each group follows
/// what its Source is about to become.
fn reconcile_inplace_scalings(
    world: &mut BTreeMap<ObjectKey, Value>,
    touched: &mut BTreeSet<ObjectKey>,
    options: &Options,
) -> Result<bool, RenderError> {
    let keys: Vec<ObjectKey> = world
        .keys()
        .filter(|k| Kind::of(&k.api_version, &k.kind) == Some(Kind::ResourceScalingGroup))
        .cloned()
        .collect();
    // Render changes no CustomResourceDefinition: gather them once.
    let crds: Vec<Value> = world
        .values()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .cloned()
        .collect();
    let mut changed = false;
    for key in keys {
        let unreadable = |reason: String, object: &ObjectKey| RenderError::Unreadable {
            object: object.clone(),
            reason,
        };
        let rsg: ResourceScalingGroup = serde_json::from_value(world[&key].clone())
            .map_err(|e| unreadable(e.to_string(), &key))?;
        if rsg.spec.scaling_strategy.type_ != ScalingStrategyType::InplaceScaling {
            continue;
        }
        let groups: Vec<ResourceScalingGroup> = world
            .iter()
            .filter(|(k, _)| {
                k.namespace == key.namespace
                    && Kind::of(&k.api_version, &k.kind) == Some(Kind::ResourceScalingGroup)
            })
            .filter_map(|(_, o)| serde_json::from_value(o.clone()).ok())
            .collect();
        let mut observed = BTreeMap::new();
        for endpoint in inplace::endpoints(&key.name, &rsg.spec, &groups) {
            let seen = observe(world, &crds, &key.namespace, &endpoint);
            observed.insert(endpoint, seen);
        }
        let pass = inplace::reconcile(&rsg, &groups, &observed, &options.now);
        for scale in &pass.scales {
            let Some(target) = world_key(world, &key.namespace, &scale.endpoint) else {
                continue;
            };
            let Some(object) = world.get_mut(&target) else {
                continue;
            };
            match &scale.from {
                Reading::Scale { .. } => {
                    let (path, _) = scale_field(&crds, &scale.endpoint)
                        .map_err(|reason| unreadable(reason, &target))?;
                    let patch = adapter::object_patch(&path, scale.to)
                        .map_err(|reason| unreadable(reason, &target))?;
                    json_patch::merge(object, &patch);
                }
                Reading::Role(reading) => {
                    let role = scale.endpoint.role.as_deref().unwrap_or_default();
                    let patch = adapter::role_patch(&[(role, reading, scale.to)])
                        .map_err(|reason| unreadable(reason, &target))?;
                    json_patch::patch(object, &patch).map_err(|e| {
                        unreadable(format!("ResourceScalingGroup {}: {e}", key.name), &target)
                    })?;
                }
            }
            touched.insert(target);
            changed = true;
        }
        if rsg.status.as_ref() != Some(&pass.status)
            && let Some(object) = world.get_mut(&key)
        {
            object["status"] =
                serde_json::to_value(&pass.status).map_err(|e| unreadable(e.to_string(), &key))?;
            touched.insert(key);
            changed = true;
        }
    }
    Ok(changed)
}

/// The key of the object an endpoint names in `namespace`, whatever version
/// its apiVersion is written with.
fn world_key(
    world: &BTreeMap<ObjectKey, Value>,
    namespace: &str,
    endpoint: &Endpoint,
) -> Option<ObjectKey> {
    world
        .keys()
        .find(|k| {
            k.namespace == namespace
                && k.kind == endpoint.kind
                && k.name == endpoint.name
                && adapter::group_version(&k.api_version).0 == endpoint.group()
        })
        .cloned()
}

/// Where an object scaled through `/scale` keeps its replicas, and what an
/// unset field means: the adapter table, Kubernetes' built-in kinds, then
/// the world's CustomResourceDefinitions.
fn scale_field(crds: &[Value], endpoint: &Endpoint) -> Result<(String, i32), String> {
    let (api_version, kind) = (endpoint.api_version.as_str(), endpoint.kind.as_str());
    if let Some(known) = adapter::known(api_version, kind) {
        return Ok((adapter::SPEC_REPLICAS.to_owned(), known.unset));
    }
    match adapter::builtin_has_scale(api_version, kind) {
        Some(true) => return Ok((adapter::SPEC_REPLICAS.to_owned(), 1)),
        Some(false) => return Err(format!("{kind} ({api_version}) has no scale subresource")),
        None => {}
    }
    match crds
        .iter()
        .find_map(|crd| adapter::crd_scale(crd, api_version, kind))
    {
        Some(Some(path)) => Ok((path, 0)),
        Some(None) => Err(format!("{kind} ({api_version}) has no scale subresource")),
        None => Err(format!(
            "{kind} ({api_version}): the world has no CustomResourceDefinition for it, so its scale subresource is unknown"
        )),
    }
}

/// Reads an endpoint from the world as the controller reads it from the
/// API server.
fn observe(
    world: &BTreeMap<ObjectKey, Value>,
    crds: &[Value],
    namespace: &str,
    endpoint: &Endpoint,
) -> Observed {
    let (kind, name) = (&endpoint.kind, &endpoint.name);
    let via = adapter::known(&endpoint.api_version, kind).map_or(Via::Scale, |k| k.via);
    let field = match via {
        Via::Scale => match scale_field(crds, endpoint) {
            Ok(field) => Some(field),
            Err(why) => return Observed::Unsupported(why),
        },
        Via::Role => None,
    };
    let Some(object) = world_key(world, namespace, endpoint).and_then(|k| world.get(&k)) else {
        return Observed::Missing(format!("{kind} {name} not found"));
    };
    match (field, endpoint.role.as_deref()) {
        (Some((path, unset)), None) => match adapter::object_replicas(object, &path, unset) {
            Ok(replicas) => Observed::Read(Reading::Scale { replicas }),
            Err(why) => Observed::Unsupported(format!("{kind} {name}: {why}")),
        },
        (None, Some(role)) => match adapter::role_replicas(object, role) {
            Ok(reading) => Observed::Read(Reading::Role(reading)),
            Err(what) => Observed::Missing(format!("{kind} {name} {what}")),
        },
        (Some(_), Some(_)) => {
            Observed::Unsupported(format!("a {kind} has no roles; bind it as a whole"))
        }
        (None, None) => Observed::Unsupported(format!(
            "a {kind} is scaled per role; bind one of its roles"
        )),
    }
}

impl Rendered {
    /// The output: YAML documents with deletions as `# delete` lines, or one
    /// JSON object `{"apply", "delete", "warnings"}`.
    pub fn write(&self, format: Format) -> Result<String, serde_norway::Error> {
        match format {
            Format::Json => {
                let out =
                    json!({"apply": self.apply, "delete": self.delete, "warnings": self.warnings});
                // A Value of strings, numbers and maps always serialises.
                Ok(format!(
                    "{}\n",
                    serde_json::to_string_pretty(&out).unwrap_or_default()
                ))
            }
            Format::Yaml => {
                let mut out = String::new();
                for object in &self.apply {
                    out.push_str("---\n");
                    out.push_str(&serde_norway::to_string(object)?);
                }
                for key in &self.delete {
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
        assert_eq!(err.exit_code(), 2);
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
