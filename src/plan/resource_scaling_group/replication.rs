//! GroupReplication (DESIGN.md §1.2, seed 000): the target resources of a
//! ResourceScalingGroup are a template, replicated as whole groups.
//!
//! - The originals are group `{prefix}-00` and are never deleted. Tandem
//!   server-side applies two labels to them, `resourcescalinggroup.com/name`
//!   and `resourcescalinggroup.com/group: {prefix}-00`, on their metadata and
//!   on their pod templates (Deployment/StatefulSet `spec.template`,
//!   LeaderWorkerSet leader and worker templates), and nothing else, so
//!   `status.labelSelector` (`resourcescalinggroup.com/name={rsg}`) finds the
//!   pods of every group, the originals' included. Changing a pod template
//!   rolls the originals' pods once, on adoption. An original's selector is
//!   immutable and is left as it is. The roles of a RoleBasedGroup or an
//!   InferenceService are one list that a partial apply would replace, so
//!   only their metadata is labelled and their group 00 pods are not
//!   selected.
//! - Group `NN` (1, 2, …) is one clone per target resource, named
//!   `{prefix}-{NN}-{resource}` after the resource's local name, with the
//!   two labels on its metadata and on every pod template (each
//!   `spec.roles[].template` of kinds with roles), its Deployment/StatefulSet
//!   selector extended by both labels (clones never select each other's
//!   pods), owned by the RSG (controller owner reference), without the
//!   template's server-set fields, status and owners. A clone is a function
//!   of its template: a template change updates it, a hand edit is set back,
//!   and an unchanged world writes nothing (the applied-hash stamp of
//!   [`write::stamp`]).
//! - A group exists while any of its clones does. It is being deleted when a
//!   clone of it has a deletionTimestamp (its other clones are deleted too: a
//!   group goes as a whole) or when its clones are gone and pods labelled
//!   with it remain. A group being deleted counts toward the total and its
//!   index is reserved until it is gone ([`victims::refill`]).
//! - Scale-down removes the groups named in `scaleDown.candidates` first, in
//!   list order (a name that is no group is skipped with a warning), then by
//!   policy ([`victims::group_victims`]): Ordered (highest index), Newest,
//!   Oldest (the clones' creation time), Binpack (the summed
//!   `pod-deletion-cost` of the group's pods, not running first). Scale-up
//!   fills the lowest free index.
//! - Status: `currentReplicas` counts the groups that exist after this pass
//!   and are not being deleted, group 00 included; Ready is True when every
//!   resource of every kept group (originals included) exists and reports
//!   all its replicas ready (`status.readyReplicas` against `spec.replicas`
//!   at the current generation, or a Ready condition for kinds without
//!   replicas), judged as things will be after this pass (a clone it creates
//!   has no ready replica, a spec it changes rolls out), so the next pass over
//!   the same world reports the same; Stalled is True while the plan cannot be made (a template or
//!   its API missing, a spec the webhook would deny), and then nothing is
//!   written but status.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Map, Value, json};

use crate::api::resource_scaling_group::{
    self as rsg_api, GroupConfig, GroupScaleDownPolicy, KINDS_WITH_ROLES, ResourceScalingGroup,
    ResourceScalingGroupSpec, ResourceScalingGroupStatus, ScalingStrategyType, TargetResource,
    clone_name, group_id, group_index,
};
use crate::plan::shared::condition::condition;
use crate::plan::shared::decision::Replica;
use crate::plan::shared::pod::Pod;
use crate::plan::shared::write::{self, Apply, Delete};
use crate::plan::victims::{self, GroupCandidate};

pub use crate::api::resource_scaling_group::{GROUP_LABEL, NAME_LABEL};

/// Conditions this planner owns.
const READY: &str = "Ready";
const STALLED: &str = "Stalled";
/// The last scale-down skipped names in `scaleDown.candidates` that are no group.
const CANDIDATES_SKIPPED: &str = "CandidatesSkipped";

/// Metadata the API server sets, or that belongs to the template alone.
const TEMPLATE_ONLY_METADATA: [&str; 11] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "ownerReferences",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "generateName",
    "finalizers",
];

/// Annotations written about the template by its tools and controllers.
const TEMPLATE_ONLY_ANNOTATIONS: [&str; 3] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
    write::APPLIED_HASH,
];

/// How many not-ready resources the Ready condition names before it counts.
const NAMED_IN_MESSAGE: usize = 5;

/// What a ResourceScalingGroup's groups look like now.
#[derive(Clone, Copy, Debug)]
pub struct World<'a> {
    /// The target resources as read, in `spec.targetResources` order; None
    /// where the object does not exist.
    pub templates: &'a [Option<Value>],
    /// Objects labelled `resourcescalinggroup.com/name: {rsg}` of the target
    /// resources' kinds: the clones, and the originals once adopted.
    pub objects: &'a [Value],
    /// Pods labelled `resourcescalinggroup.com/name: {rsg}`: of all groups.
    pub pods: &'a [Pod],
    /// Kinds of target resources whose API the cluster does not serve.
    pub unavailable: &'a BTreeSet<String>,
}

/// One reconcile of one ResourceScalingGroup in GroupReplication mode.
#[derive(Clone, Debug, PartialEq)]
pub struct Pass {
    /// Clones to create or update, and the originals' group labels.
    pub apply: Vec<Apply>,
    /// Clones to delete, each with the reason.
    pub delete: Vec<Delete>,
    pub status: ResourceScalingGroupStatus,
    /// Said once, as Warning Events: candidates a scale-down skipped.
    pub warnings: Vec<String>,
}

/// The label selector of the pods of every group of `rsg_name`.
pub fn label_selector(rsg_name: &str) -> String {
    format!("{NAME_LABEL}={rsg_name}")
}

/// The two labels of group `group_id` of `rsg_name`.
pub fn group_labels(rsg_name: &str, group_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_owned(), rsg_name.to_owned()),
        (GROUP_LABEL.to_owned(), group_id.to_owned()),
    ])
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn name_of(object: &Value) -> &str {
    text(&object["metadata"]["name"])
}

fn kind_of(object: &Value) -> &str {
    text(&object["kind"])
}

fn terminating(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// The controller owner reference to the RSG; None before it has a uid
/// (render of an object that was never stored).
pub fn owner_reference(rsg: &ResourceScalingGroup) -> Option<Value> {
    let uid = rsg.metadata.uid.as_deref()?;
    let name = rsg.metadata.name.as_deref()?;
    Some(json!({
        "apiVersion": "resourcescalinggroup.com/v1",
        "kind": "ResourceScalingGroup",
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }))
}

/// Whether `object` is a clone made for `rsg`: it carries the RSG's owner
/// reference, or, for an RSG that was never stored (render), its name label
/// in its namespace with a group label other than group 00's.
pub fn owns(rsg: &ResourceScalingGroup, prefix: &str, object: &Value) -> bool {
    match rsg.metadata.uid.as_deref() {
        Some(uid) => object["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid)),
        None => {
            let labels = &object["metadata"]["labels"];
            labels[NAME_LABEL].as_str() == rsg.metadata.name.as_deref()
                && labels[GROUP_LABEL].as_str() != Some(group_id(prefix, 0).as_str())
                && object["metadata"]["namespace"].as_str() == rsg.metadata.namespace.as_deref()
        }
    }
}

/// The map at `path` under `value` when every step of it is already an
/// object: pod templates are labelled only where they are present.
fn present_object<'a>(value: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
    let mut node = value;
    for key in path {
        node = node.as_object_mut()?.get_mut(*key)?;
    }
    node.as_object_mut()
}

/// The map under `key` of `map`, made an empty object when missing or null;
/// None when it holds something that is not an object.
fn child_object<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let entry = map.entry(key).or_insert_with(|| json!({}));
    if entry.is_null() {
        *entry = json!({});
    }
    entry.as_object_mut()
}

fn add_labels(map: &mut Map<String, Value>, labels: &BTreeMap<String, String>) {
    for (key, value) in labels {
        map.insert(key.clone(), Value::String(value.clone()));
    }
}

/// Adds `labels` to a pod template's `metadata.labels`.
fn label_pod_template(template: &mut Map<String, Value>, labels: &BTreeMap<String, String>) {
    if let Some(found) =
        child_object(template, "metadata").and_then(|meta| child_object(meta, "labels"))
    {
        add_labels(found, labels);
    }
}

/// Where a LeaderWorkerSet keeps its pod templates.
const LEADER_WORKER_TEMPLATES: [&[&str]; 2] = [
    &["spec", "leaderWorkerTemplate", "leaderTemplate"],
    &["spec", "leaderWorkerTemplate", "workerTemplate"],
];

/// Where a Deployment, a StatefulSet and most other workloads keep theirs.
const POD_TEMPLATE: [&[&str]; 1] = [&["spec", "template"]];

/// The paths of the pod templates of `kind` outside roles.
fn pod_template_paths(kind: &str) -> &'static [&'static [&'static str]] {
    match kind {
        "LeaderWorkerSet" => &LEADER_WORKER_TEMPLATES,
        _ if KINDS_WITH_ROLES.contains(&kind) => &[],
        _ => &POD_TEMPLATE,
    }
}

/// Adds `labels` to every pod template of `object` that is present: by
/// kind, and each `spec.roles[].template` of kinds with roles.
fn label_pod_templates(object: &mut Value, labels: &BTreeMap<String, String>) {
    let kind = kind_of(object).to_owned();
    for path in pod_template_paths(&kind) {
        if let Some(template) = present_object(object, path) {
            label_pod_template(template, labels);
        }
    }
    if KINDS_WITH_ROLES.contains(&kind.as_str())
        && let Some(roles) = object
            .get_mut("spec")
            .and_then(|s| s.get_mut("roles"))
            .and_then(Value::as_array_mut)
    {
        for role in roles {
            if let Some(template) = present_object(role, &["template"]) {
                label_pod_template(template, labels);
            }
        }
    }
}

/// Extends a Deployment's or StatefulSet's `spec.selector.matchLabels` by
/// `labels`, so the clone's pods are its own.
fn extend_selector(object: &mut Value, labels: &BTreeMap<String, String>) {
    if !matches!(kind_of(object), "Deployment" | "StatefulSet" | "ReplicaSet") {
        return;
    }
    if let Some(match_labels) =
        present_object(object, &["spec", "selector"]).and_then(|s| child_object(s, "matchLabels"))
    {
        add_labels(match_labels, labels);
    }
}

/// The clone of `template` (target resource `resource`) in group `index`,
/// stamped with its applied hash.
pub fn clone_of(
    rsg: &ResourceScalingGroup,
    prefix: &str,
    template: &Value,
    resource: &str,
    index: u32,
) -> Value {
    let rsg_name = rsg.metadata.name.as_deref().unwrap_or_default();
    let labels = group_labels(rsg_name, &group_id(prefix, index));
    let mut object = template.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    let namespace = template["metadata"]["namespace"].clone();
    if let Some(meta) = object
        .as_object_mut()
        .and_then(|o| child_object(o, "metadata"))
    {
        for key in TEMPLATE_ONLY_METADATA {
            meta.remove(key);
        }
        let annotations_left = meta
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            .map(|annotations| {
                for key in TEMPLATE_ONLY_ANNOTATIONS {
                    annotations.remove(key);
                }
                !annotations.is_empty()
            });
        if annotations_left == Some(false) {
            meta.remove("annotations");
        }
        meta.insert(
            "name".to_owned(),
            Value::String(clone_name(prefix, index, resource)),
        );
        meta.insert("namespace".to_owned(), namespace);
        if let Some(found) = child_object(meta, "labels") {
            add_labels(found, &labels);
        }
        if let Some(owner) = owner_reference(rsg) {
            meta.insert("ownerReferences".to_owned(), json!([owner]));
        }
    }
    label_pod_templates(&mut object, &labels);
    extend_selector(&mut object, &labels);
    write::stamp(object)
}

/// What Tandem applies to an original (group 00): only the two labels, on
/// its metadata and on the pod templates it has (not inside roles: see the
/// module header), stamped with its applied hash.
pub fn adoption_of(rsg: &ResourceScalingGroup, prefix: &str, template: &Value) -> Value {
    let rsg_name = rsg.metadata.name.as_deref().unwrap_or_default();
    let labels = group_labels(rsg_name, &group_id(prefix, 0));
    let mut partial = json!({
        "apiVersion": template["apiVersion"],
        "kind": template["kind"],
        "metadata": {
            "name": template["metadata"]["name"],
            "namespace": template["metadata"]["namespace"],
            "labels": labels,
        },
    });
    for path in pod_template_paths(kind_of(template)) {
        let present = path
            .iter()
            .try_fold(template, |node, key| node.get(*key))
            .is_some_and(Value::is_object);
        if !present {
            continue;
        }
        let mut node = &mut partial;
        for key in *path {
            // `partial` is built here from objects only, so every step is one.
            node = &mut node[*key];
        }
        *node = json!({"metadata": {"labels": labels}});
    }
    write::stamp(partial)
}

/// One target resource with its template.
struct Target<'a> {
    resource: &'a TargetResource,
    kind: &'a str,
    template: &'a Value,
}

/// The groups as the world shows them.
#[derive(Default)]
struct Groups<'a> {
    /// The clones of each group (index ≥ 1), in target resource order.
    clones: BTreeMap<u32, Vec<&'a Value>>,
    /// Objects of the RSG that are no clone of any target in any group.
    stale: Vec<(&'a Value, String)>,
    /// Groups on their way out.
    deleting: BTreeSet<u32>,
    /// The pods of each group.
    pods: BTreeMap<u32, Vec<&'a Pod>>,
}

impl Groups<'_> {
    /// Group 00 and every group with a clone that is not being deleted.
    fn live(&self) -> BTreeSet<u32> {
        std::iter::once(victims::ORIGINAL_GROUP)
            .chain(
                self.clones
                    .keys()
                    .copied()
                    .filter(|i| !self.deleting.contains(i)),
            )
            .collect()
    }

    fn candidate(&self, index: u32) -> GroupCandidate {
        let pods = self.pods.get(&index).map(Vec::as_slice).unwrap_or_default();
        let created = self
            .clones
            .get(&index)
            .into_iter()
            .flatten()
            .filter_map(|c| c["metadata"]["creationTimestamp"].as_str())
            .filter_map(|t| t.parse::<Timestamp>().ok())
            .min();
        GroupCandidate {
            index,
            created,
            running: victims::all_running(pods),
            cost: victims::cost_of(pods),
        }
    }
}

fn observe<'a>(
    rsg: &ResourceScalingGroup,
    prefix: &str,
    targets: &[TargetResource],
    world: &World<'a>,
) -> Groups<'a> {
    let rsg_name = rsg.metadata.name.as_deref().unwrap_or_default();
    let mut groups = Groups::default();
    let mut positioned: BTreeMap<u32, Vec<(usize, &Value)>> = BTreeMap::new();
    for object in world.objects.iter().filter(|o| owns(rsg, prefix, o)) {
        let label = text(&object["metadata"]["labels"][GROUP_LABEL]);
        let index = match group_index(prefix, label) {
            Some(index) if index != victims::ORIGINAL_GROUP => index,
            _ => {
                groups.stale.push((
                    object,
                    format!("its group label {label:?} names no group {prefix}-NN (01 and up) of this ResourceScalingGroup"),
                ));
                continue;
            }
        };
        let target = targets.iter().position(|t| {
            t.object().is_some_and(|o| {
                object["apiVersion"] == o.api_version
                    && object["kind"] == o.kind
                    && name_of(object) == clone_name(prefix, index, &t.name)
            })
        });
        if let Some(target) = target {
            positioned.entry(index).or_default().push((target, object));
        } else {
            groups.stale.push((
                object,
                format!(
                    "it is no clone of a target resource of group {} (a target was removed or renamed)",
                    group_id(prefix, index)
                ),
            ));
        }
    }
    // In target resource order, whatever order the world lists them in.
    for (index, mut clones) in positioned {
        clones.sort_by_key(|(target, _)| *target);
        groups
            .clones
            .insert(index, clones.into_iter().map(|(_, c)| c).collect());
    }
    for pod in world
        .pods
        .iter()
        .filter(|p| p.scaling_group.as_deref() == Some(rsg_name))
    {
        if let Some(index) = group_index(prefix, pod.group.as_deref().unwrap_or_default()) {
            groups.pods.entry(index).or_default().push(pod);
        }
    }
    let with_clones: BTreeSet<u32> = groups.clones.keys().copied().collect();
    groups.deleting = groups
        .clones
        .iter()
        .filter(|(_, clones)| clones.iter().any(|c| terminating(c)))
        .map(|(&index, _)| index)
        .chain(
            groups
                .pods
                .keys()
                .copied()
                .filter(|i| *i != victims::ORIGINAL_GROUP && !with_clones.contains(i)),
        )
        .collect();
    groups
}

/// The groups `scaleDown.candidates` names, as indices in list order, and a
/// warning for every name that is no group (existing or being deleted).
fn listed_candidates(
    group: &GroupConfig,
    prefix: &str,
    known: &BTreeSet<u32>,
) -> (Vec<u32>, Vec<String>) {
    let mut indices = Vec::new();
    let mut warnings = Vec::new();
    let listed = group
        .scale_down
        .iter()
        .flat_map(|s| s.candidates.iter())
        .enumerate();
    for (i, name) in listed {
        match group_index(prefix, name) {
            Some(index) if known.contains(&index) => indices.push(index),
            _ => warnings.push(format!(
                "spec.scalingStrategy.groupConfig.scaleDown.candidates[{i}]: {name:?} is not an existing group; skipped"
            )),
        }
    }
    (indices, warnings)
}

/// Why group `victim` goes, in the words of its policy; for Binpack with the
/// victim's score and the scores of the groups it keeps.
fn why_victim(
    victim: u32,
    listed: &[u32],
    policy: GroupScaleDownPolicy,
    groups: &Groups<'_>,
    kept: &BTreeSet<u32>,
    prefix: &str,
) -> String {
    if listed.contains(&victim) {
        return "it is listed in scaleDown.candidates".to_owned();
    }
    let id = |i: u32| group_id(prefix, i);
    let created = |i: u32| {
        groups
            .candidate(i)
            .created
            .map_or("at an unknown time".to_owned(), |t| format!("at {t}"))
    };
    match policy {
        GroupScaleDownPolicy::Ordered => "Ordered: the highest index goes first".to_owned(),
        GroupScaleDownPolicy::Newest => format!(
            "Newest: it was created {}, the latest of the groups that could go",
            created(victim)
        ),
        GroupScaleDownPolicy::Oldest => format!(
            "Oldest: it was created {}, the earliest of the groups that could go",
            created(victim)
        ),
        GroupScaleDownPolicy::Binpack => {
            let score = |i: u32| {
                let c = groups.candidate(i);
                format!(
                    "cost {}{}",
                    c.cost,
                    if c.running { "" } else { ", not running" }
                )
            };
            let beaten: Vec<String> = kept
                .iter()
                .filter(|&&i| i != victims::ORIGINAL_GROUP && !listed.contains(&i))
                .map(|&i| format!("{} ({})", id(i), score(i)))
                .collect();
            format!(
                "Binpack removes {} ({}) before the groups it keeps: {}",
                id(victim),
                score(victim),
                if beaten.is_empty() {
                    "none but the originals".to_owned()
                } else {
                    beaten.join(", ")
                }
            )
        }
    }
}

/// Whether a workload reports all its replicas ready: `status.readyReplicas`
/// against `spec.replicas` once its status has seen its generation, or, for
/// kinds without `spec.replicas`, a Ready condition. The error says why not.
pub fn workload_ready(object: &Value) -> Result<(), String> {
    let status = &object["status"];
    if let Some(wanted) = object["spec"]["replicas"].as_i64() {
        let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
        let seen = status["observedGeneration"].as_i64().unwrap_or(generation);
        if seen < generation {
            return Err("is rolling out a change".to_owned());
        }
        let ready = status["readyReplicas"].as_i64().unwrap_or(0);
        return if ready >= wanted {
            Ok(())
        } else {
            Err(format!("has {ready}/{wanted} replicas ready"))
        };
    }
    let ready = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    match ready {
        Some(c) if c["status"] == "True" => Ok(()),
        Some(_) => Err("is not Ready".to_owned()),
        None => Err("reports no readiness yet".to_owned()),
    }
}

/// Whether a resource is ready once `planned` is applied to `current` (when
/// `applied`), read as [`workload_ready`] will read it on the next pass: a
/// new one has no status yet, and a changed spec has a new generation its
/// status has not seen (so the prediction never differs from the next
/// reading of an unchanged world, and that pass writes no status).
fn readiness(planned: &Value, current: Option<&Value>, applied: bool) -> Result<(), String> {
    match current {
        None => workload_ready(planned),
        Some(current) if applied && !write::contains(&current["spec"], &planned["spec"]) => {
            let mut next = current.clone();
            let generation = current["metadata"]["generation"].as_i64().unwrap_or(0);
            // Saturating: a generation at i64::MAX (which the API server
            // never reaches) predicts "not ready yet", the safe reading.
            next["metadata"]["generation"] = serde_json::json!(generation.saturating_add(1));
            workload_ready(&next)
        }
        Some(current) => workload_ready(current),
    }
}

/// Decides one reconcile of `rsg` (GroupReplication) in `world` at `now`:
/// the problems that stall it, which groups stay ([`choose_groups`]), what
/// to apply ([`Replication::adoptions`], [`Replication::clones`]) and delete
/// ([`Replication::deletions`]), and the conditions that say so.
pub fn reconcile(rsg: &ResourceScalingGroup, world: &World<'_>, now: &Time) -> Pass {
    let mut spec = rsg.spec.clone();
    rsg_api::defaults(&mut spec);
    let namespace = rsg.metadata.namespace.as_deref().unwrap_or("default");
    let rsg_name = rsg.metadata.name.as_deref().unwrap_or_default();
    let previous = rsg.status.clone().unwrap_or_default();
    let report = Report {
        previous: &previous.conditions,
        generation: rsg.metadata.generation,
        now,
    };

    let mut problems = spec_problems(&spec, namespace);
    let group = spec
        .scaling_strategy
        .group_config
        .clone()
        .unwrap_or(GroupConfig {
            group_name_prefix: None,
            group_name: None,
            replicas: None,
            scale_down: None,
        });
    let prefix = group.prefix().unwrap_or_default().to_owned();
    let targets = resolve_targets(&spec.target_resources, namespace, world, &mut problems);

    let groups = observe(rsg, &prefix, &spec.target_resources, world);
    let live = groups.live();
    let status_of = |current: usize, conditions: Vec<Condition>| ResourceScalingGroupStatus {
        observed_generation: rsg.metadata.generation,
        current_replicas: i32::try_from(current).unwrap_or(i32::MAX),
        label_selector: Some(label_selector(rsg_name)),
        conditions,
        bands: Vec::new(),
    };

    if !problems.is_empty() {
        return Pass {
            apply: Vec::new(),
            delete: Vec::new(),
            status: status_of(live.len(), stalled_conditions(&report, &problems)),
            warnings: Vec::new(),
        };
    }

    let desired = usize::try_from(group.replicas().max(1)).unwrap_or(1);
    let policy = group
        .scale_down
        .as_ref()
        .and_then(|s| s.policy)
        .unwrap_or_default();
    let choice = choose_groups(&group, &prefix, &groups, &live, desired, policy);
    let replication = Replication {
        rsg,
        rsg_name,
        prefix: &prefix,
        targets: &targets,
        groups: &groups,
        desired,
        policy,
    };
    let mut not_ready = Vec::new();
    let mut apply = replication.adoptions(&mut not_ready);
    apply.extend(replication.clones(&choice.kept, &mut not_ready));
    let delete = replication.deletions(&choice);

    let mut conditions = vec![
        ready_condition(&report, choice.kept.len(), not_ready),
        report.make(
            STALLED,
            false,
            "AsExpected",
            format!(
                "{} of {desired} group(s) kept, {} being deleted",
                choice.kept.len(),
                groups.deleting.len()
            ),
        ),
    ];
    conditions.extend(candidates_condition(
        &report,
        &group,
        &choice,
        &previous.conditions,
    ));
    let conditions = report.conditions(conditions);
    Pass {
        apply,
        delete,
        status: status_of(choice.kept.len(), conditions),
        warnings: choice.warnings,
    }
}

/// What in the spec itself stalls a GroupReplication group: a spec the
/// webhook would deny, or another scaling strategy.
fn spec_problems(spec: &ResourceScalingGroupSpec, namespace: &str) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    let findings = rsg_api::validate(spec, namespace);
    if !findings.is_allowed() {
        problems.push((
            "InvalidSpec",
            format!("invalid spec: {}", findings.denial_message()),
        ));
    }
    if spec.scaling_strategy.type_ != ScalingStrategyType::GroupReplication {
        problems.push((
            "InvalidSpec",
            "spec.scalingStrategy.type is not GroupReplication".to_owned(),
        ));
    }
    problems
}

/// The target resources with their templates; a target whose API is not
/// served or whose template does not exist is a problem (pushed in target
/// order) instead.
fn resolve_targets<'a>(
    resources: &'a [TargetResource],
    namespace: &str,
    world: &World<'a>,
    problems: &mut Vec<(&'static str, String)>,
) -> Vec<Target<'a>> {
    let mut targets = Vec::new();
    for (i, resource) in resources.iter().enumerate() {
        let Some(object) = resource.object() else {
            continue;
        };
        if world.unavailable.contains(object.kind) {
            problems.push((
                "ApiUnavailable",
                format!(
                    "spec.targetResources[{i}]: the {} API ({}) is not served by the cluster",
                    object.kind, object.api_version
                ),
            ));
            continue;
        }
        match world.templates.get(i).and_then(Option::as_ref) {
            Some(template) => targets.push(Target {
                resource,
                kind: object.kind,
                template,
            }),
            None => problems.push((
                "TemplateMissing",
                format!(
                    "spec.targetResources[{i}]: {} {namespace}/{} does not exist",
                    object.kind, object.name
                ),
            )),
        }
    }
    targets
}

/// Ready False and Stalled True, naming every problem (the first one's
/// reason is Stalled's): nothing is written but status.
fn stalled_conditions(report: &Report<'_>, problems: &[(&str, String)]) -> Vec<Condition> {
    let reason = problems
        .first()
        .map_or("InvalidSpec", |(reason, _)| *reason);
    let message = problems
        .iter()
        .map(|(_, m)| m.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    report.conditions(vec![
        report.make(READY, false, "Stalled", message.clone()),
        report.make(
            STALLED,
            true,
            reason,
            format!("{message}; nothing is created or deleted until this is fixed"),
        ),
    ])
}

/// Which groups stay, and for a scale-down which go and why.
#[derive(Debug, Default, PartialEq)]
struct GroupChoice {
    kept: BTreeSet<u32>,
    /// The groups removed by this scale-down, in the order chosen.
    victims: Vec<u32>,
    /// `scaleDown.candidates` as existing group indices, in list order.
    listed: Vec<u32>,
    /// A warning per listed candidate that is no group.
    warnings: Vec<String>,
}

/// Which groups stay: a scale-down removes `live - desired` groups chosen by
/// the listed candidates then the policy; otherwise missing groups are
/// refilled up to `desired`.
fn choose_groups(
    group: &GroupConfig,
    prefix: &str,
    groups: &Groups<'_>,
    live: &BTreeSet<u32>,
    desired: usize,
    policy: GroupScaleDownPolicy,
) -> GroupChoice {
    if live.len() <= desired {
        return GroupChoice {
            kept: victims::refill(live, &groups.deleting, desired),
            ..GroupChoice::default()
        };
    }
    let known: BTreeSet<u32> = live.union(&groups.deleting).copied().collect();
    let (listed, warnings) = listed_candidates(group, prefix, &known);
    let weighed: BTreeMap<u32, GroupCandidate> =
        live.iter().map(|&i| (i, groups.candidate(i))).collect();
    let chosen = victims::group_victims(
        &weighed,
        live.len().saturating_sub(desired),
        policy,
        &listed,
    );
    GroupChoice {
        kept: live
            .iter()
            .copied()
            .filter(|i| !chosen.contains(i))
            .collect(),
        victims: chosen,
        listed,
        warnings,
    }
}

/// What one pass of a GroupReplication group works from.
struct Replication<'a> {
    rsg: &'a ResourceScalingGroup,
    rsg_name: &'a str,
    prefix: &'a str,
    targets: &'a [Target<'a>],
    groups: &'a Groups<'a>,
    desired: usize,
    policy: GroupScaleDownPolicy,
}

impl Replication<'_> {
    fn replica(&self) -> Replica {
        Replica {
            policy: Some(self.policy.into()),
        }
    }

    /// The originals, labelled as group 0 (not a replica Tandem made), for
    /// those whose labels change; each original not ready after this pass
    /// is added to `not_ready`.
    fn adoptions(&self, not_ready: &mut Vec<String>) -> Vec<Apply> {
        let mut apply = Vec::new();
        for target in self.targets {
            let adopted = adoption_of(self.rsg, self.prefix, target.template);
            let change = write::change_of(&adopted, Some(target.template));
            if let Err(reason) = readiness(&adopted, Some(target.template), change.is_some()) {
                not_ready.push(format!(
                    "{} {} ({}) {reason}",
                    target.kind,
                    name_of(target.template),
                    group_id(self.prefix, 0)
                ));
            }
            let Some(change) = change else {
                continue;
            };
            let why = format!(
                "labelled as group {} of ResourceScalingGroup {} on its metadata{}, so the group's label selector finds its pods",
                group_id(self.prefix, 0),
                self.rsg_name,
                if pod_template_paths(target.kind).is_empty() {
                    " (its roles' pod templates are left alone)"
                } else {
                    " and pod template (its pods roll once)"
                }
            );
            let note = change.note(target.kind, name_of(target.template), &why);
            apply.push(Apply {
                object: adopted,
                change,
                note,
                replica: None,
            });
        }
        apply
    }

    /// Each kept group's clones that are missing or differ; each clone not
    /// ready after this pass (a spec this pass changes rolls out, a clone it
    /// creates has no ready replicas) is added to `not_ready`.
    fn clones(&self, kept: &BTreeSet<u32>, not_ready: &mut Vec<String>) -> Vec<Apply> {
        let mut apply = Vec::new();
        for (position, &index) in kept.iter().enumerate() {
            if index == victims::ORIGINAL_GROUP {
                continue;
            }
            for target in self.targets {
                let clone = clone_of(
                    self.rsg,
                    self.prefix,
                    target.template,
                    &target.resource.name,
                    index,
                );
                let name = name_of(&clone).to_owned();
                let current = self.existing_clone(index, &name, target.kind);
                let change = write::change_of(&clone, current);
                if let Err(reason) = readiness(&clone, current, change.is_some()) {
                    not_ready.push(format!("{} {name} {reason}", target.kind));
                }
                let Some(change) = change else {
                    continue;
                };
                let why = match change {
                    write::Change::Update => format!(
                        "its template {} {} changed",
                        target.kind,
                        name_of(target.template)
                    ),
                    _ => format!(
                        "clone of {} {} for group {} ({} of {} groups)",
                        target.kind,
                        name_of(target.template),
                        group_id(self.prefix, index),
                        position.saturating_add(1),
                        self.desired
                    ),
                };
                let note = change.note(target.kind, &name, &why);
                apply.push(Apply {
                    object: clone,
                    change,
                    note,
                    replica: Some(self.replica()),
                });
            }
        }
        apply
    }

    fn existing_clone(&self, index: u32, name: &str, kind: &str) -> Option<&Value> {
        self.groups
            .clones
            .get(&index)?
            .iter()
            .copied()
            .find(|c| name_of(c) == name && kind_of(c) == kind)
    }

    /// What goes: the victims' clones, the rest of groups being deleted, and
    /// strays (none already terminating).
    fn deletions(&self, choice: &GroupChoice) -> Vec<Delete> {
        let groups = self.groups;
        let replica = Some(self.replica());
        let mut delete = Vec::new();
        for &victim in &choice.victims {
            let why = why_victim(
                victim,
                &choice.listed,
                self.policy,
                groups,
                &choice.kept,
                self.prefix,
            );
            for clone in groups.clones.get(&victim).into_iter().flatten() {
                delete.push(Delete {
                    object: (*clone).clone(),
                    note: format!(
                        "{} {} deleted: group {} is removed, the ResourceScalingGroup is scaled to {} group(s); {why}",
                        kind_of(clone),
                        name_of(clone),
                        group_id(self.prefix, victim),
                        self.desired
                    ),
                    replica,
                });
            }
        }
        for &index in &groups.deleting {
            for clone in groups
                .clones
                .get(&index)
                .into_iter()
                .flatten()
                .filter(|c| !terminating(c))
            {
                delete.push(Delete {
                    object: (*clone).clone(),
                    note: format!(
                        "{} {} deleted: group {} is being deleted, and a group goes as a whole",
                        kind_of(clone),
                        name_of(clone),
                        group_id(self.prefix, index)
                    ),
                    replica,
                });
            }
        }
        for (object, why) in groups.stale.iter().filter(|(o, _)| !terminating(o)) {
            delete.push(Delete {
                object: (*object).clone(),
                note: format!("{} {} deleted: {why}", kind_of(object), name_of(object)),
                replica,
            });
        }
        delete
    }
}

/// Ready: True when every kept group's resources are ready after this pass,
/// else False naming the first few that are not.
fn ready_condition(report: &Report<'_>, kept: usize, not_ready: Vec<String>) -> Condition {
    let ready = not_ready.is_empty();
    let ready_message = if ready {
        format!("every resource of the {kept} group(s) is ready")
    } else {
        let more = not_ready.len().saturating_sub(NAMED_IN_MESSAGE);
        let mut named: Vec<String> = not_ready.into_iter().take(NAMED_IN_MESSAGE).collect();
        if more > 0 {
            named.push(format!("and {more} more"));
        }
        named.join("; ")
    };
    report.make(
        READY,
        ready,
        if ready {
            "AllGroupsReady"
        } else {
            "GroupsNotReady"
        },
        ready_message,
    )
}

/// CandidatesSkipped: set by a scale-down of a group that lists candidates
/// (True when a listed name is no group), else kept as it was.
fn candidates_condition(
    report: &Report<'_>,
    group: &GroupConfig,
    choice: &GroupChoice,
    previous: &[Condition],
) -> Option<Condition> {
    let listed_any = group
        .scale_down
        .as_ref()
        .is_some_and(|s| !s.candidates.is_empty());
    if !choice.victims.is_empty() && listed_any {
        let skipped = !choice.warnings.is_empty();
        Some(report.make(
            CANDIDATES_SKIPPED,
            skipped,
            if skipped {
                "UnknownCandidates"
            } else {
                "AllCandidatesKnown"
            },
            if skipped {
                choice.warnings.join("; ")
            } else {
                "the last scale-down found every listed candidate".to_owned()
            },
        ))
    } else if choice.victims.is_empty() {
        previous
            .iter()
            .find(|c| c.type_ == CANDIDATES_SKIPPED)
            .cloned()
    } else {
        None
    }
}

/// Builds this planner's conditions, keeping last transition times.
struct Report<'a> {
    previous: &'a [Condition],
    generation: Option<i64>,
    now: &'a Time,
}

impl Report<'_> {
    fn make(&self, type_: &str, is_true: bool, reason: &str, message: String) -> Condition {
        condition(
            self.previous,
            type_,
            is_true,
            reason,
            message,
            self.generation,
            self.now,
        )
    }

    /// `ours` replaces the conditions of the same types; others are kept.
    fn conditions(&self, ours: Vec<Condition>) -> Vec<Condition> {
        let mut all: Vec<Condition> = self
            .previous
            .iter()
            .filter(|c| ![READY, STALLED, CANDIDATES_SKIPPED].contains(&c.type_.as_str()))
            .cloned()
            .collect();
        all.extend(ours);
        all.sort_by(|a, b| a.type_.cmp(&b.type_));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn now() -> Time {
        Time("2026-11-21T10:00:00Z".parse().expect("test time parses"))
    }

    /// Seed 000's GroupReplication example, stored (uid, namespace ai).
    fn rsg(replicas: i32, policy: &str, candidates: &[&str]) -> ResourceScalingGroup {
        serde_json::from_value(json!({
            "apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
            "metadata": {"name": "pd-cluster", "namespace": "ai", "uid": "rsg-uid", "generation": 4},
            "spec": {
                "targetResources": [
                    {"name": "prefill", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
                    {"name": "decode", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
                ],
                "scalingStrategy": {"type": "GroupReplication", "groupConfig": {
                    "groupName": "inference-unit", "replicas": replicas,
                    "scaleDown": {"policy": policy, "candidates": candidates}}}
            }
        }))
        .expect("test RSG parses")
    }

    /// A Deployment as the API server returns it.
    fn deployment(name: &str, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": name, "namespace": "ai", "uid": format!("uid-{name}"),
                "resourceVersion": "17", "generation": 2,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x"}],
                "labels": {"app": name},
                "annotations": {"team": "llm", "deployment.kubernetes.io/revision": "2"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "vllm", "image": image}]},
                },
            },
            "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": 2},
        })
    }

    fn templates(image: &str) -> Vec<Option<Value>> {
        vec![
            Some(deployment("prefill", image)),
            Some(deployment("decode", image)),
        ]
    }

    fn pass(
        rsg: &ResourceScalingGroup,
        templates: &[Option<Value>],
        objects: &[Value],
        pods: &[Value],
    ) -> Pass {
        let none = BTreeSet::new();
        reconcile(
            rsg,
            &World {
                templates,
                objects,
                pods: &crate::plan::shared::pod::from_json_all(pods),
                unavailable: &none,
            },
            &now(),
        )
    }

    fn deep_merge(into: &mut Value, from: &Value) {
        match (into, from) {
            (Value::Object(into), Value::Object(from)) => {
                for (k, v) in from {
                    deep_merge(into.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
            (into, from) => *into = from.clone(),
        }
    }

    /// The world after a pass was carried out: clones stored (with a
    /// creation time and ready), originals merged with what was applied,
    /// deleted clones gone.
    fn carry_out(p: &Pass, templates: &mut [Option<Value>], objects: &mut Vec<Value>) {
        for step in &p.apply {
            let key = (
                kind_of(&step.object).to_owned(),
                name_of(&step.object).to_owned(),
            );
            if let Some(t) = templates
                .iter_mut()
                .flatten()
                .find(|t| (kind_of(t).to_owned(), name_of(t).to_owned()) == key)
            {
                deep_merge(t, &step.object);
                continue;
            }
            let mut stored = step.object.clone();
            stored["metadata"]["creationTimestamp"] = json!("2026-11-21T10:00:00Z");
            stored["metadata"]["uid"] = json!(format!("uid-{}", key.1));
            stored["status"] = json!({"readyReplicas": 2});
            objects.retain(|o| (kind_of(o).to_owned(), name_of(o).to_owned()) != key);
            objects.push(stored);
        }
        for step in &p.delete {
            objects.retain(|o| name_of(o) != name_of(&step.object));
        }
    }

    /// The world of `rsg` after passes until nothing is written.
    fn settle(
        rsg: &ResourceScalingGroup,
        templates: &mut [Option<Value>],
        objects: &mut Vec<Value>,
    ) {
        for _ in 0..3 {
            let p = pass(rsg, templates, objects, &[]);
            if p.apply.is_empty() && p.delete.is_empty() {
                return;
            }
            carry_out(&p, templates, objects);
        }
        panic!("no convergence");
    }

    fn names(steps: impl IntoIterator<Item = Value>) -> Vec<String> {
        steps.into_iter().map(|o| name_of(&o).to_owned()).collect()
    }

    fn applied(p: &Pass) -> Vec<String> {
        names(p.apply.iter().map(|a| a.object.clone()))
    }

    fn deleted(p: &Pass) -> Vec<String> {
        names(p.delete.iter().map(|d| d.object.clone()))
    }

    /// A world with groups 01..=n cloned, settled.
    fn grown(n: i32) -> (Vec<Option<Value>>, Vec<Value>) {
        let mut t = templates("vllm:1");
        let mut objects = Vec::new();
        settle(&rsg(n + 1, "Ordered", &[]), &mut t, &mut objects);
        (t, objects)
    }

    fn find<'a>(objects: &'a [Value], name: &str) -> &'a Value {
        objects
            .iter()
            .find(|o| name_of(o) == name)
            .unwrap_or_else(|| panic!("{name} exists"))
    }

    #[test]
    fn one_to_three_clones_groups_01_and_02() {
        let p = pass(&rsg(3, "Ordered", &[]), &templates("vllm:1"), &[], &[]);
        assert_eq!(
            applied(&p),
            [
                "prefill",
                "decode",
                "inference-unit-01-prefill",
                "inference-unit-01-decode",
                "inference-unit-02-prefill",
                "inference-unit-02-decode"
            ]
        );
        assert!(p.delete.is_empty() && p.warnings.is_empty());
        let clone = &p.apply[4];
        assert_eq!(clone.change, write::Change::Create);
        assert_eq!(
            clone.note,
            "Deployment inference-unit-02-prefill created: clone of Deployment prefill for group inference-unit-02 (3 of 3 groups)"
        );
        let o = &clone.object;
        let labels =
            json!({"app": "prefill", NAME_LABEL: "pd-cluster", GROUP_LABEL: "inference-unit-02"});
        assert_eq!(o["metadata"]["labels"], labels);
        assert_eq!(o["spec"]["template"]["metadata"]["labels"], labels);
        assert_eq!(
            o["spec"]["selector"]["matchLabels"], labels,
            "selects its own pods only"
        );
        assert_eq!(o["metadata"]["namespace"], "ai");
        assert_eq!(
            o["metadata"]["ownerReferences"],
            json!([{"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
                    "name": "pd-cluster", "uid": "rsg-uid", "controller": true, "blockOwnerDeletion": true}])
        );
        for server_set in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
        ] {
            assert!(
                o["metadata"].get(server_set).is_none(),
                "{server_set} stripped"
            );
        }
        assert!(o.get("status").is_none());
        let annotations = o["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(
            annotations["team"], "llm",
            "the user's annotations are kept"
        );
        assert!(!annotations.contains_key("deployment.kubernetes.io/revision"));
        assert!(annotations.contains_key(write::APPLIED_HASH));
        assert_eq!(
            o["spec"]["replicas"], 2,
            "a clone has its template's replicas"
        );

        // The originals get the two labels and nothing else.
        let adopted = &p.apply[0];
        assert_eq!(adopted.change, write::Change::Update);
        let group00 = json!({NAME_LABEL: "pd-cluster", GROUP_LABEL: "inference-unit-00"});
        assert_eq!(adopted.object["metadata"]["labels"], group00);
        assert_eq!(
            adopted.object["spec"],
            json!({"template": {"metadata": {"labels": group00}}})
        );
        assert!(adopted.note.starts_with("Deployment prefill updated: labelled as group inference-unit-00 of ResourceScalingGroup pd-cluster"), "{}", adopted.note);

        assert_eq!(p.status.current_replicas, 3);
        assert_eq!(
            p.status.label_selector.as_deref(),
            Some("resourcescalinggroup.com/name=pd-cluster")
        );
        assert_eq!(p.status.observed_generation, Some(4));
        let ready = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message,
            "Deployment prefill (inference-unit-00) is rolling out a change; Deployment decode (inference-unit-00) is rolling out a change; Deployment inference-unit-01-prefill has 0/2 replicas ready; Deployment inference-unit-01-decode has 0/2 replicas ready; Deployment inference-unit-02-prefill has 0/2 replicas ready; and 1 more"
        );
    }

    #[test]
    fn a_second_pass_over_an_unchanged_world_writes_nothing() {
        let (t, objects) = grown(2);
        assert_eq!(objects.len(), 4);
        let p = pass(&rsg(3, "Ordered", &[]), &t, &objects, &[]);
        assert!(
            p.apply.is_empty() && p.delete.is_empty(),
            "{:?}",
            applied(&p)
        );
        let ready = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == READY)
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "AllGroupsReady")
        );
        let stalled = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == STALLED)
            .unwrap();
        assert_eq!(stalled.status, "False");
    }

    #[test]
    fn a_clone_does_not_depend_on_the_originals_adoption_labels() {
        let raw = deployment("prefill", "vllm:1");
        let r = rsg(2, "Ordered", &[]);
        let mut adopted = raw.clone();
        deep_merge(&mut adopted, &adoption_of(&r, "inference-unit", &raw));
        adopted["metadata"]["resourceVersion"] = json!("18");
        adopted["metadata"]["generation"] = json!(3);
        adopted["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("3");
        assert_eq!(
            clone_of(&r, "inference-unit", &raw, "prefill", 1),
            clone_of(&r, "inference-unit", &adopted, "prefill", 1)
        );
    }

    #[test]
    fn a_template_change_updates_its_clones_and_a_hand_edit_is_set_back() {
        let (mut t, mut objects) = grown(2);
        let r = rsg(3, "Ordered", &[]);
        t[0].as_mut().unwrap()["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("vllm:2");
        let p = pass(&r, &t, &objects, &[]);
        assert_eq!(
            applied(&p),
            ["inference-unit-01-prefill", "inference-unit-02-prefill"]
        );
        assert!(p.apply.iter().all(|a| a.change == write::Change::Update));
        assert_eq!(
            p.apply[0].note,
            "Deployment inference-unit-01-prefill updated: its template Deployment prefill changed"
        );
        assert_eq!(
            p.apply[0].object["spec"]["template"]["spec"]["containers"][0]["image"],
            "vllm:2"
        );
        carry_out(&p, &mut t, &mut objects);
        let edited = objects
            .iter_mut()
            .find(|o| name_of(o) == "inference-unit-01-decode")
            .unwrap();
        edited["spec"]["replicas"] = json!(9);
        let p = pass(&r, &t, &objects, &[]);
        assert_eq!(applied(&p), ["inference-unit-01-decode"]);
        assert_eq!(p.apply[0].change, write::Change::Revert);
        // Removing a label from an original is set back too.
        carry_out(&p, &mut t, &mut objects);
        t[1].as_mut().unwrap()["spec"]["template"]["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(GROUP_LABEL);
        let p = pass(&r, &t, &objects, &[]);
        assert_eq!(applied(&p), ["decode"]);
        assert_eq!(p.apply[0].change, write::Change::Revert);
    }

    #[test]
    fn three_to_one_removes_the_listed_candidate_first() {
        let (t, objects) = grown(2);
        let p = pass(
            &rsg(2, "Ordered", &["inference-unit-01"]),
            &t,
            &objects,
            &[],
        );
        assert_eq!(
            deleted(&p),
            ["inference-unit-01-prefill", "inference-unit-01-decode"]
        );
        assert_eq!(
            p.delete[0].note,
            "Deployment inference-unit-01-prefill deleted: group inference-unit-01 is removed, the ResourceScalingGroup is scaled to 2 group(s); it is listed in scaleDown.candidates"
        );
        let p = pass(
            &rsg(1, "Ordered", &["inference-unit-01"]),
            &t,
            &objects,
            &[],
        );
        assert_eq!(
            deleted(&p),
            [
                "inference-unit-01-prefill",
                "inference-unit-01-decode",
                "inference-unit-02-prefill",
                "inference-unit-02-decode"
            ]
        );
        assert!(
            p.delete[2]
                .note
                .ends_with("; Ordered: the highest index goes first"),
            "{}",
            p.delete[2].note
        );
        assert_eq!(p.status.current_replicas, 1);
        assert!(p.apply.is_empty(), "originals are never deleted or changed");
        let skipped = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CANDIDATES_SKIPPED)
            .unwrap();
        assert_eq!(skipped.status, "False");
    }

    #[test]
    fn an_unknown_candidate_is_skipped_with_a_warning() {
        let (t, objects) = grown(2);
        let p = pass(
            &rsg(2, "Ordered", &["inference-unit-07", "inference-unit-01"]),
            &t,
            &objects,
            &[],
        );
        assert_eq!(
            deleted(&p),
            ["inference-unit-01-prefill", "inference-unit-01-decode"]
        );
        assert_eq!(
            p.warnings,
            [
                "spec.scalingStrategy.groupConfig.scaleDown.candidates[0]: \"inference-unit-07\" is not an existing group; skipped"
            ]
        );
        let skipped = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CANDIDATES_SKIPPED)
            .unwrap();
        assert_eq!(
            (skipped.status.as_str(), skipped.reason.as_str()),
            ("True", "UnknownCandidates")
        );
        assert_eq!(skipped.message, p.warnings[0]);
        // Without a scale-down the list is not consulted: no warning, and
        // the condition of the last scale-down stays as it was.
        let mut stored = rsg(3, "Ordered", &["inference-unit-07"]);
        stored.status = Some(p.status.clone());
        let quiet = pass(&stored, &t, &objects, &[]);
        assert!(quiet.warnings.is_empty() && quiet.delete.is_empty());
        let kept = quiet
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CANDIDATES_SKIPPED);
        assert_eq!(kept, Some(skipped));
    }

    /// Groups 01..=4 with creation days, pod costs and readiness.
    fn four_groups() -> (Vec<Option<Value>>, Vec<Value>, Vec<Value>) {
        let (t, mut objects) = grown(4);
        // Created on: 01 day 3, 02 day 2, 03 day 3 (ties by index), 04 day 1.
        for (group, day) in [(1, 3), (2, 2), (3, 3), (4, 1)] {
            for o in objects
                .iter_mut()
                .filter(|o| name_of(o).starts_with(&format!("inference-unit-0{group}-")))
            {
                o["metadata"]["creationTimestamp"] = json!(format!("2026-01-0{day}T00:00:00Z"));
            }
        }
        // Summed costs: 01 → 10, 02 → 0, 03 → 50 (one pod not ready), 04 → 30.
        let pod = |group: u32, i: u32, cost: i32, ready: bool| {
            json!({"metadata": {"name": format!("p-{group}-{i}"), "labels": {NAME_LABEL: "pd-cluster", GROUP_LABEL: group_id("inference-unit", group)},
                    "annotations": {victims::DELETION_COST: cost.to_string()}},
                   "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
        };
        let pods = vec![
            pod(0, 0, -500, true),
            pod(1, 0, 4, true),
            pod(1, 1, 6, true),
            pod(2, 0, 0, true),
            pod(3, 0, 50, false),
            pod(4, 0, 10, true),
            pod(4, 1, 20, true),
        ];
        (t, objects, pods)
    }

    fn victim_groups(p: &Pass) -> Vec<String> {
        let mut groups: Vec<String> = p
            .delete
            .iter()
            .map(|d| text(&d.object["metadata"]["labels"][GROUP_LABEL]).to_owned())
            .collect();
        groups.dedup();
        groups
    }

    #[test]
    fn each_policy_picks_its_victim() {
        let (t, objects, pods) = four_groups();
        for (policy, expected) in [
            ("Ordered", ["inference-unit-04", "inference-unit-03"]),
            ("Newest", ["inference-unit-03", "inference-unit-01"]),
            ("Oldest", ["inference-unit-04", "inference-unit-02"]),
            ("Binpack", ["inference-unit-03", "inference-unit-02"]),
        ] {
            let p = pass(&rsg(3, policy, &[]), &t, &objects, &pods);
            assert_eq!(victim_groups(&p), expected, "{policy}");
            assert_eq!(p.status.current_replicas, 3);
        }
        let p = pass(&rsg(4, "Binpack", &[]), &t, &objects, &pods);
        assert_eq!(
            p.delete[0].note,
            "Deployment inference-unit-03-prefill deleted: group inference-unit-03 is removed, the ResourceScalingGroup is scaled to 4 group(s); Binpack removes inference-unit-03 (cost 50, not running) before the groups it keeps: inference-unit-01 (cost 10), inference-unit-02 (cost 0), inference-unit-04 (cost 30)"
        );
        let p = pass(&rsg(4, "Newest", &[]), &t, &objects, &pods);
        assert!(p.delete[0].note.ends_with("Newest: it was created at 2026-01-03T00:00:00Z, the latest of the groups that could go"), "{}", p.delete[0].note);
    }

    #[test]
    fn scale_up_refills_a_gap_first() {
        let (t, mut objects) = grown(2);
        objects.retain(|o| !name_of(o).starts_with("inference-unit-01-"));
        let p = pass(&rsg(4, "Ordered", &[]), &t, &objects, &[]);
        assert_eq!(
            applied(&p),
            [
                "inference-unit-01-prefill",
                "inference-unit-01-decode",
                "inference-unit-03-prefill",
                "inference-unit-03-decode"
            ]
        );
        assert_eq!(p.status.current_replicas, 4);
    }

    #[test]
    fn a_group_being_deleted_is_reserved_and_counts() {
        let (t, mut objects) = grown(2);
        // Group 01's prefill clone is terminating, its decode clone was
        // deleted already; group 02 is fine.
        objects.retain(|o| name_of(o) != "inference-unit-01-decode");
        let terminating_clone = objects
            .iter_mut()
            .find(|o| name_of(o) == "inference-unit-01-prefill")
            .unwrap();
        terminating_clone["metadata"]["deletionTimestamp"] = json!("2026-11-21T09:59:00Z");
        // Scaled to 3: 01 counts toward the total until gone, nothing comes.
        let p = pass(&rsg(3, "Ordered", &[]), &t, &objects, &[]);
        assert!(
            p.apply.is_empty() && p.delete.is_empty(),
            "{:?} {:?}",
            applied(&p),
            deleted(&p)
        );
        assert_eq!(
            p.status.current_replicas, 2,
            "a group being deleted is not counted"
        );
        // Scaled to 4: the index is reserved, so 03 comes.
        let p = pass(&rsg(4, "Ordered", &[]), &t, &objects, &[]);
        assert_eq!(
            applied(&p),
            ["inference-unit-03-prefill", "inference-unit-03-decode"]
        );
        // Its clones are gone but pods of it remain: still being deleted.
        objects.retain(|o| name_of(o) != "inference-unit-01-prefill");
        let leftover = json!({"metadata": {"name": "p", "labels": {NAME_LABEL: "pd-cluster", GROUP_LABEL: "inference-unit-01"}}});
        let p = pass(&rsg(3, "Ordered", &[]), &t, &objects, &[leftover]);
        assert!(p.apply.is_empty(), "{:?}", applied(&p));
        // Gone: refilled.
        let p = pass(&rsg(3, "Ordered", &[]), &t, &objects, &[]);
        assert_eq!(
            applied(&p),
            ["inference-unit-01-prefill", "inference-unit-01-decode"]
        );
    }

    #[test]
    fn a_group_goes_as_a_whole() {
        let (t, mut objects) = grown(2);
        let one = objects
            .iter_mut()
            .find(|o| name_of(o) == "inference-unit-02-decode")
            .unwrap();
        one["metadata"]["deletionTimestamp"] = json!("2026-11-21T09:59:00Z");
        let p = pass(&rsg(3, "Ordered", &[]), &t, &objects, &[]);
        assert_eq!(deleted(&p), ["inference-unit-02-prefill"]);
        assert_eq!(
            p.delete[0].note,
            "Deployment inference-unit-02-prefill deleted: group inference-unit-02 is being deleted, and a group goes as a whole"
        );
        assert!(p.apply.is_empty());
    }

    #[test]
    fn strays_are_deleted_and_foreign_objects_left_alone() {
        let (t, mut objects) = grown(1);
        let mut renamed = find(&objects, "inference-unit-01-decode").clone();
        renamed["metadata"]["name"] = json!("inference-unit-01-router");
        let mut other_prefix = find(&objects, "inference-unit-01-decode").clone();
        other_prefix["metadata"]["name"] = json!("unit-01-decode");
        other_prefix["metadata"]["labels"][GROUP_LABEL] = json!("unit-01");
        let mut foreign = find(&objects, "inference-unit-01-decode").clone();
        foreign["metadata"]["name"] = json!("someone-elses");
        foreign["metadata"]["ownerReferences"] = json!([{"uid": "another"}]);
        objects.extend([renamed, other_prefix, foreign]);
        let p = pass(&rsg(2, "Ordered", &[]), &t, &objects, &[]);
        assert_eq!(deleted(&p), ["inference-unit-01-router", "unit-01-decode"]);
        assert!(p.delete[0].note.ends_with("it is no clone of a target resource of group inference-unit-01 (a target was removed or renamed)"));
        assert!(
            p.delete[1]
                .note
                .contains("its group label \"unit-01\" names no group")
        );
    }

    #[test]
    fn a_missing_template_stalls_everything() {
        let (mut t, objects) = grown(2);
        t[1] = None;
        let p = pass(&rsg(1, "Ordered", &[]), &t, &objects, &[]);
        assert!(p.apply.is_empty() && p.delete.is_empty());
        let stalled = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == STALLED)
            .unwrap();
        assert_eq!(
            (stalled.status.as_str(), stalled.reason.as_str()),
            ("True", "TemplateMissing")
        );
        assert_eq!(
            stalled.message,
            "spec.targetResources[1]: Deployment ai/decode does not exist; nothing is created or deleted until this is fixed"
        );
        assert_eq!(p.status.current_replicas, 3, "what exists is reported");
        let unavailable = BTreeSet::from(["Deployment".to_owned()]);
        let p = reconcile(
            &rsg(3, "Ordered", &[]),
            &World {
                templates: &t,
                objects: &objects,
                pods: &[],
                unavailable: &unavailable,
            },
            &now(),
        );
        let stalled = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == STALLED)
            .unwrap();
        assert_eq!(stalled.reason, "ApiUnavailable");
    }

    #[test]
    fn a_spec_the_webhook_would_deny_is_reported_not_applied() {
        let mut bad = rsg(3, "Ordered", &[]);
        bad.spec.target_resources[0].namespace = Some("elsewhere".to_owned());
        let p = pass(&bad, &templates("vllm:1"), &[], &[]);
        assert!(p.apply.is_empty());
        let stalled = p
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == STALLED)
            .unwrap();
        assert_eq!(stalled.reason, "InvalidSpec");
        assert!(
            stalled
                .message
                .contains("spec.targetResources[0].namespace"),
            "{}",
            stalled.message
        );
    }

    #[test]
    fn leader_worker_sets_and_kinds_with_roles_are_labelled_inside() {
        let mut r = rsg(2, "Ordered", &[]);
        r.spec.target_resources.truncate(1);
        r.spec.target_resources[0].api_version = Some("leaderworkerset.x-k8s.io/v1".to_owned());
        r.spec.target_resources[0].kind = Some("LeaderWorkerSet".to_owned());
        let lws = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "prefill", "namespace": "ai"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2,
                "leaderTemplate": {"spec": {"containers": [{"name": "l", "image": "i"}]}},
                "workerTemplate": {"metadata": {"labels": {"role": "w"}}, "spec": {"containers": [{"name": "w", "image": "i"}]}}}}});
        let p = pass(&r, &[Some(lws)], &[], &[]);
        let group01 = json!({NAME_LABEL: "pd-cluster", GROUP_LABEL: "inference-unit-01"});
        let clone = &p.apply[1].object;
        assert_eq!(
            clone["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"],
            group01
        );
        assert_eq!(
            clone["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]["role"],
            "w"
        );
        assert_eq!(
            clone["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
                [GROUP_LABEL],
            "inference-unit-01"
        );
        let adopted = &p.apply[0].object;
        assert_eq!(
            adopted["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
                [GROUP_LABEL],
            "inference-unit-00"
        );
        assert!(
            adopted["spec"]["leaderWorkerTemplate"]
                .get("size")
                .is_none(),
            "only labels are applied"
        );

        r.spec.target_resources[0].api_version = Some("fusioninfer.io/v1alpha1".to_owned());
        r.spec.target_resources[0].kind = Some("InferenceService".to_owned());
        let service = json!({"apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "prefill", "namespace": "ai"},
            "spec": {"roles": [
                {"name": "router", "componentType": "router"},
                {"name": "decode", "componentType": "worker", "template": {"spec": {"containers": [{"name": "v", "image": "i"}]}}}]},
            "status": {"scaleViews": [{"name": "v", "uid": "u", "generation": 1}]}});
        let p = pass(&r, &[Some(service)], &[], &[]);
        let clone = &p.apply[1].object;
        assert!(
            clone["spec"]["roles"][0].get("template").is_none(),
            "only where present"
        );
        assert_eq!(
            clone["spec"]["roles"][1]["template"]["metadata"]["labels"],
            group01
        );
        assert!(
            clone.get("status").is_none(),
            "locks stay with the original"
        );
        let adopted = &p.apply[0].object;
        assert!(
            adopted.get("spec").is_none(),
            "roles are one list: only metadata is labelled"
        );
        assert!(
            p.apply[0]
                .note
                .contains("(its roles' pod templates are left alone)")
        );
    }

    #[test]
    fn an_unstored_group_recognises_its_clones_by_label() {
        let mut r = rsg(2, "Ordered", &[]);
        r.metadata.uid = None;
        let mut t = templates("vllm:1");
        let mut objects = Vec::new();
        settle(&r, &mut t, &mut objects);
        assert_eq!(objects.len(), 2);
        assert!(objects[0]["metadata"].get("ownerReferences").is_none());
        assert!(
            !owns(&r, "inference-unit", t[0].as_ref().unwrap()),
            "an adopted original is no clone"
        );
    }

    #[test]
    fn readiness_of_workloads() {
        let mut d = deployment("prefill", "i");
        assert_eq!(workload_ready(&d), Ok(()));
        d["status"]["readyReplicas"] = json!(1);
        assert_eq!(workload_ready(&d), Err("has 1/2 replicas ready".to_owned()));
        d["status"]["readyReplicas"] = json!(2);
        d["metadata"]["generation"] = json!(3);
        assert_eq!(
            workload_ready(&d),
            Err("is rolling out a change".to_owned())
        );
        let service = json!({"spec": {"roles": []}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(workload_ready(&service), Ok(()));
        assert!(workload_ready(&json!({"spec": {}})).is_err());
    }

    proptest! {
        /// From any set of existing groups, a pass carried out leads to a
        /// world the next pass leaves alone, with exactly the desired groups
        /// and the originals untouched but for their labels.
        #[test]
        fn a_carried_out_pass_settles(
            existing in proptest::collection::btree_set(1u32..8, 0..6),
            replicas in 1i32..9,
            policy in prop_oneof![Just("Ordered"), Just("Newest"), Just("Oldest"), Just("Binpack")],
            listed in proptest::collection::btree_set(1u32..9, 0..3),
        ) {
            let mut t = templates("vllm:1");
            let mut objects = Vec::new();
            let r = rsg(1, "Ordered", &[]);
            for &index in &existing {
                for (resource, template) in [("prefill", &t[0]), ("decode", &t[1])] {
                    let mut clone = clone_of(&r, "inference-unit", template.as_ref().unwrap(), resource, index);
                    clone["metadata"]["creationTimestamp"] = json!(format!("2026-01-0{index}T00:00:00Z"));
                    objects.push(clone);
                }
            }
            let names: Vec<String> = listed.iter().map(|&i| group_id("inference-unit", i)).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let r = rsg(replicas, policy, &names);
            let first = pass(&r, &t, &objects, &[]);
            carry_out(&first, &mut t, &mut objects);
            let second = pass(&r, &t, &objects, &[]);
            prop_assert!(second.apply.is_empty() && second.delete.is_empty());
            prop_assert_eq!(second.status.current_replicas, replicas);
            prop_assert_eq!(objects.len(), 2 * (replicas as usize - 1));
            prop_assert_eq!(t[0].as_ref().unwrap()["spec"]["replicas"].clone(), json!(2));
            // Listed groups that existed go before any other.
            let before: BTreeSet<u32> = existing.clone();
            let gone: BTreeSet<u32> = before
                .iter()
                .copied()
                .filter(|i| !objects.iter().any(|o| o["metadata"]["labels"][GROUP_LABEL] == group_id("inference-unit", *i)))
                .collect();
            let listed_existing: BTreeSet<u32> = listed.intersection(&before).copied().collect();
            if !gone.is_empty() && !listed_existing.is_subset(&gone) {
                prop_assert!(gone.is_subset(&listed_existing), "gone {:?}, listed {:?}", gone, listed_existing);
            }
        }
    }

    #[test]
    fn choose_groups_refills_or_removes_listed_candidates_then_by_policy() {
        let config = |replicas: i32| -> GroupConfig {
            serde_json::from_value(json!({"groupNamePrefix": "g", "replicas": replicas,
                "scaleDown": {"candidates": ["g-01", "nope"]}}))
            .expect("a group config")
        };
        let clone = json!({"kind": "Deployment", "metadata": {"name": "c"}});
        let mut groups = Groups::default();
        for index in 1..=3 {
            groups.clones.insert(index, vec![&clone]);
        }
        let live = groups.live();

        // Four live groups, two desired: g-01 goes first (listed), then the
        // highest index (Ordered); the unknown name is a warning.
        let policy = GroupScaleDownPolicy::default();
        let choice = choose_groups(&config(2), "g", &groups, &live, 2, policy);
        assert_eq!(choice.kept, BTreeSet::from([0, 2]));
        assert_eq!(choice.victims, vec![1, 3]);
        assert_eq!(choice.listed, vec![1]);
        assert_eq!(choice.warnings.len(), 1);
        assert!(
            choice.warnings[0].contains("candidates[1]"),
            "{:?}",
            choice.warnings
        );

        // Five desired: the missing index is refilled, nothing goes.
        let choice = choose_groups(&config(5), "g", &groups, &live, 5, policy);
        assert_eq!(choice.kept, BTreeSet::from([0, 1, 2, 3, 4]));
        assert!(choice.victims.is_empty() && choice.warnings.is_empty());
    }
}
