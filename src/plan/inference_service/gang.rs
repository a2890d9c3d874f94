//! Gang scheduling (DESIGN §1.1): whether a service's pods go to Volcano, the
//! annotations that tie a pod to its PodGroup and task, and the one PodGroup
//! per service.
//!
//! The seed wants three things of the PodGroup at once: every replica atomic;
//! at least one prefill and one decode replica admitted together; further
//! replicas admitted on their own. Volcano's `minTaskMember` cannot give all
//! three, so the default is Volcano ≥ 1.14's `subGroupPolicy`
//! ([`GangPolicy::SubGroup`]); the seed's literal layout ([`GangPolicy::TaskMember`])
//! stays available for older Volcano and is all-or-nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Add, Mul};

use serde_json::{Value, json};

use crate::api::inference_service::{
    ComponentType, GangPolicy, GangScheduler, InferenceService, InferenceServiceSpec, Role,
};
use crate::api::quantity::Quantity;
use crate::plan::shared::children::{self, GROUP_NAME_ANNOTATION, TASK_SPEC_ANNOTATION};
use crate::plan::shared::installed::{Installed, NATIVE_POD_GROUP, POD_GROUP};

/// The scheduler that gang-schedules Tandem's pods.
pub const VOLCANO: &str = "volcano";
/// apiVersion of Volcano's PodGroup.
pub const POD_GROUP_API_VERSION: &str = crate::plan::shared::child_kinds::POD_GROUP.api_version;
pub const POD_GROUP_KIND: &str = crate::plan::shared::child_kinds::POD_GROUP.kind;

/// Who gang-schedules a service's pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Volcano: one Volcano PodGroup per service, pods annotated with it.
    Volcano,
    /// kube-scheduler: Kubernetes' PodGroups (`scheduling.k8s.io/v1alpha2`),
    /// one per replica and one core group, each pod naming its group in
    /// `spec.schedulingGroup.podGroupName` ([`super::pod_groups`]).
    Kubernetes,
}

/// How the pods of a service's serving roles are scheduled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduling {
    /// Pods are gang-scheduled (by `backend`).
    pub gang: bool,
    /// Who gang-schedules them; None when `gang` is false.
    pub backend: Option<Backend>,
    /// `spec.schedulerName` of the serving pods; None leaves the cluster default.
    pub scheduler_name: Option<String>,
    /// `spec.priorityClassName` of the serving pods whose template names
    /// none: the service's class with Kubernetes' gang, whose PodGroups
    /// Tandem writes without one (a PodGroup keeps its own class only under
    /// the WorkloadAwarePreemption gate, and kube-scheduler reads the pods').
    /// With Volcano the class is the PodGroup's.
    pub pod_priority_class: Option<String>,
}

/// Whether the service is gang-scheduled, by whom and by which scheduler.
///
/// A gang is needed when the service is prefill/decode disaggregated (it
/// has a prefiller and a decoder role) or a serving role is multi-node
/// (`nodeCount` ≥ 2) ([`needs_gang`]). `schedulingStrategy.gangScheduler`
/// says who gives it: `Volcano` (the `volcano` scheduler, which also
/// gang-schedules a service that would need none when `schedulerName` is
/// `volcano`), `Kubernetes` (the scheduler the user names, else the
/// cluster's default: kube-scheduler's gang plugins) or `None` (no gang).
/// Admission fills it in for a service that needs a gang
/// ([`default_gang_scheduler`]); left out (a service stored before Tandem
/// filled it in, or `render` of a bare spec), it is Volcano. Naming
/// another scheduler than `volcano` without `Kubernetes` opts out. The answer depends only on the spec's roles and
/// scheduling strategy, all part of the revision, so scaling never changes
/// it.
pub fn scheduling(spec: &InferenceServiceSpec) -> Scheduling {
    let strategy = spec.scheduling_strategy.as_ref();
    let requested = strategy
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|name| !name.trim().is_empty());
    let of = |backend: Option<Backend>, scheduler_name: Option<&str>| Scheduling {
        gang: backend.is_some(),
        backend,
        scheduler_name: scheduler_name.map(str::to_owned),
        pod_priority_class: strategy
            .and_then(|s| s.priority_class_name.clone())
            .filter(|_| backend == Some(Backend::Kubernetes)),
    };
    match (strategy.and_then(|s| s.gang_scheduler), requested) {
        (Some(GangScheduler::None), name) => of(None, name),
        (Some(GangScheduler::Kubernetes), name) if needs_gang(spec) => {
            of(Some(Backend::Kubernetes), name)
        }
        (Some(GangScheduler::Kubernetes), name) => of(None, name),
        // Volcano, or unset: the rule from before gangScheduler.
        (_, Some(name)) if name != VOLCANO => of(None, Some(name)),
        (_, Some(_)) => of(Some(Backend::Volcano), Some(VOLCANO)),
        (_, None) if needs_gang(spec) => of(Some(Backend::Volcano), Some(VOLCANO)),
        (_, None) => of(None, None),
    }
}

/// A prefill/decode pair or a multi-node role needs its pods placed
/// together.
pub fn needs_gang(spec: &InferenceServiceSpec) -> bool {
    is_disaggregated(spec) || spec.roles.iter().any(is_multi_node)
}

/// The `gangScheduler` admission writes into a spec that leaves it out, or
/// None to leave the spec as it is. Only a service that needs a gang
/// ([`needs_gang`]) and names no scheduler gets one:
///
/// - on update, the value the stored service had, so that a client which
///   does not send the field back (a server-side apply by a manager that
///   never set it) keeps it, and a gang never changes behind the user's
///   back; a service stored without it keeps its old meaning (Volcano);
/// - on create (or when the update is what first makes it need a gang):
///   Volcano when its PodGroup CRD is installed, else Kubernetes when the
///   API server serves its PodGroups, else `None`, whose pods the cluster's
///   default scheduler places one by one (with the warning that a gang is
///   missing).
///
/// Chosen once and written down, the backend is part of the spec and of
/// the revision: installing Volcano later rolls nothing.
pub fn default_gang_scheduler(
    spec: &InferenceServiceSpec,
    old: Option<&InferenceServiceSpec>,
    installed: &Installed,
) -> Option<GangScheduler> {
    let strategy = spec.scheduling_strategy.as_ref();
    if strategy.is_some_and(|s| {
        s.gang_scheduler.is_some()
            || s.scheduler_name
                .as_deref()
                .is_some_and(|n| !n.trim().is_empty())
    }) || !needs_gang(spec)
    {
        return None;
    }
    if let Some(old) = old {
        let kept = old
            .scheduling_strategy
            .as_ref()
            .and_then(|s| s.gang_scheduler);
        if kept.is_some() || needs_gang(old) {
            return kept;
        }
    }
    Some(if installed.has(&POD_GROUP) {
        GangScheduler::Volcano
    } else if installed.has(&NATIVE_POD_GROUP) {
        GangScheduler::Kubernetes
    } else {
        GangScheduler::None
    })
}

fn is_disaggregated(spec: &InferenceServiceSpec) -> bool {
    let has = |t: ComponentType| spec.roles.iter().any(|r| r.component_type == t);
    has(ComponentType::Prefiller) && has(ComponentType::Decoder)
}

fn is_multi_node(role: &Role) -> bool {
    !role.is_router() && role.node_count() >= 2
}

/// The annotations that put a pod of replica `index` of `role` into the
/// service's PodGroup (`scheduling.k8s.io/group-name`) and into its Volcano
/// task (`volcano.sh/task-spec: {role}-{index}`).
pub fn pod_annotations(service: &str, role: &str, index: u32) -> BTreeMap<String, String> {
    let mut annotations = group_annotations(service);
    annotations.extend(task_annotations(role, index));
    annotations
}

/// What every gang-scheduled pod of the service carries: its PodGroup.
pub fn group_annotations(service: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(GROUP_NAME_ANNOTATION.to_owned(), service.to_owned())])
}

/// What the pods of replica `index` of `role` carry: their Volcano task.
pub fn task_annotations(role: &str, index: u32) -> BTreeMap<String, String> {
    BTreeMap::from([(
        TASK_SPEC_ANNOTATION.to_owned(),
        children::task_name(role, index),
    )])
}

/// One serving role as the PodGroup sees it.
struct GangRole<'a> {
    role: &'a Role,
    /// Pods per replica (the role's node count).
    pods: u32,
    /// What one pod of the role requests.
    pod_requests: BTreeMap<String, Quantity>,
    /// Replica indices that exist or will exist.
    indices: BTreeSet<u32>,
}

/// The service's PodGroup, or None when it is not gang-scheduled.
///
/// `replicas` maps each serving role's name to the replica indices that exist
/// or will exist; a role that is absent or maps to no index has no replica.
/// Names that are not serving roles of the spec are ignored.
///
/// The PodGroup has the layout `policy` (what
/// [`super::dependencies::decide`] chose from `schedulingStrategy.gangPolicy`
/// and the installed Volcano):
///
/// - [`GangPolicy::SubGroup`] (default; Volcano ≥ 1.14): one `subGroupPolicy`
///   entry per serving role with a replica, selecting the role's pods and
///   grouping them by replica index into sub-groups of `nodeCount` pods, each
///   placed whole. The first such role of each component type (in spec order)
///   has `minSubGroups: 1`, the others `0`: one replica of each type is the
///   minimal viable set (one prefill plus one decode replica, not one per
///   decode zone), and a role at 0 replicas never blocks. `minMember` and
///   `minResources` are that minimal set's pods and requests; every further
///   replica is admitted on its own when it fits.
/// - [`GangPolicy::TaskMember`] (the seed's literal layout): `minTaskMember`
///   `{role}-{index}: nodeCount` for every replica, `minMember` their sum and
///   `minResources` all of their requests. Because `minMember` equals the sum of
///   the task minimums, Volcano checks every task and admits nothing until
///   everything fits: a service that does not fit whole does not start at all.
///
/// Errors name the role whose template is missing or is not a PodTemplateSpec
/// (admission rejects these; the planner reports instead of panicking).
pub fn pod_group(
    service: &InferenceService,
    replicas: &BTreeMap<String, BTreeSet<u32>>,
    policy: GangPolicy,
) -> Result<Option<Value>, String> {
    if scheduling(&service.spec).backend != Some(Backend::Volcano) {
        return Ok(None);
    }
    let roles = gang_roles(&service.spec, replicas)?;
    let name = children::service_name(service);
    let strategy = service.spec.scheduling_strategy.as_ref();

    let mut spec = match policy {
        GangPolicy::SubGroup => sub_group_spec(name, &roles)?,
        GangPolicy::TaskMember => task_member_spec(&roles)?,
    };
    if let Some(queue) = strategy.and_then(|s| s.queue.as_deref()) {
        spec["queue"] = json!(queue);
    }
    if let Some(class) = strategy.and_then(|s| s.priority_class_name.as_deref()) {
        spec["priorityClassName"] = json!(class);
    }
    Ok(Some(json!({
        "apiVersion": POD_GROUP_API_VERSION,
        "kind": POD_GROUP_KIND,
        "metadata": children::metadata(service, name, &children::service_labels(name)),
        "spec": spec,
    })))
}

/// The serving roles in spec order, with their pods and requests.
fn gang_roles<'a>(
    spec: &'a InferenceServiceSpec,
    replicas: &BTreeMap<String, BTreeSet<u32>>,
) -> Result<Vec<GangRole<'a>>, String> {
    spec.roles
        .iter()
        .filter(|role| !role.is_router())
        .map(|role| {
            let pods = super::pod_groups::pods(role)?;
            Ok(GangRole {
                role,
                pods,
                pod_requests: role.pod_requests()?,
                indices: replicas.get(&role.name).cloned().unwrap_or_default(),
            })
        })
        .collect()
}

/// `subGroupPolicy` with the minimal viable set as `minMember`/`minResources`.
/// (`spec.placement` adds each entry's `networkTopology`:
/// [`super::placement::place_sub_groups`].)
fn sub_group_spec(service: &str, roles: &[GangRole<'_>]) -> Result<Value, String> {
    let mut required_types = BTreeSet::new();
    let mut policies = Vec::new();
    let mut minimal_set = Vec::new();
    for gang_role in roles.iter().filter(|r| !r.indices.is_empty()) {
        let role = gang_role.role;
        let required = required_types.insert(role.component_type);
        if required {
            minimal_set.push((gang_role, gang_role.pods));
        }
        policies.push(json!({
            "name": role.name,
            "labelSelector": {"matchLabels": {
                children::SERVICE: service,
                children::ROLE_NAME: role.name,
            }},
            "matchLabelKeys": [children::REPLICA_INDEX],
            "subGroupSize": gang_role.pods,
            "minSubGroups": u32::from(required),
        }));
    }
    let mut spec = json!({
        "minMember": pod_count(&minimal_set)?,
        "subGroupPolicy": policies,
    });
    insert_resources(&mut spec, &minimal_set)?;
    Ok(spec)
}

/// The seed's `minTaskMember` layout: every replica required.
fn task_member_spec(roles: &[GangRole<'_>]) -> Result<Value, String> {
    let mut tasks = BTreeMap::new();
    let mut all = Vec::new();
    for gang_role in roles {
        for &index in &gang_role.indices {
            tasks.insert(
                children::task_name(&gang_role.role.name, index),
                gang_role.pods,
            );
        }
        let count = u32::try_from(gang_role.indices.len())
            .map_err(|_| format!("role {:?}: too many replicas", gang_role.role.name))?;
        let pods = gang_role
            .pods
            .checked_mul(count)
            .ok_or_else(|| format!("role {:?}: too many pods", gang_role.role.name))?;
        all.push((gang_role, pods));
    }
    let mut spec = json!({
        "minMember": pod_count(&all)?,
        "minTaskMember": tasks,
    });
    insert_resources(&mut spec, &all)?;
    Ok(spec)
}

/// The number of pods of `(role, pods)` pairs, as the int32 Volcano stores.
fn pod_count(parts: &[(&GangRole<'_>, u32)]) -> Result<i32, String> {
    let total = parts
        .iter()
        .fold(0u64, |sum, (_, pods)| sum.saturating_add(u64::from(*pods)));
    i32::try_from(total).map_err(|_| format!("{total} pods do not fit a PodGroup's minMember"))
}

/// Sets `minResources` to the summed requests of `pods` pods of each role, or
/// leaves it out when they request nothing.
fn insert_resources(spec: &mut Value, parts: &[(&GangRole<'_>, u32)]) -> Result<(), String> {
    let mut total: BTreeMap<&str, Quantity> = BTreeMap::new();
    for (gang_role, pods) in parts {
        for (name, request) in &gang_role.pod_requests {
            let overflow = |e| format!("role {:?}: {name}: {e}", gang_role.role.name);
            // Quantity's operators are checked: they return a Result.
            let role_total = request.mul(*pods).map_err(overflow)?;
            let entry = total.entry(name.as_str()).or_insert(Quantity::ZERO);
            *entry = entry.add(role_total).map_err(overflow)?;
        }
    }
    if !total.is_empty() {
        let shown: BTreeMap<&str, String> = total
            .into_iter()
            .map(|(name, quantity)| (name, quantity.to_string()))
            .collect();
        spec["minResources"] = json!(shown);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout the spec names, or the default (Volcano assumed current).
    fn requested(service: &InferenceService) -> GangPolicy {
        service
            .spec
            .scheduling_strategy
            .as_ref()
            .and_then(|s| s.gang_policy)
            .unwrap_or_default()
    }

    fn template(gpus: &str) -> Value {
        json!({"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
    }

    fn role(name: &str, component_type: &str, replicas: i32, nodes: Option<i32>) -> Value {
        let mut role = json!({"name": name, "componentType": component_type,
            "replicas": replicas, "template": template("8")});
        if let Some(nodes) = nodes {
            role["multinode"] = json!({"nodeCount": nodes});
        }
        role
    }

    fn service(name: &str, spec: Value) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": "ai", "uid": "uid-1"},
            "spec": spec,
        }))
        .expect("test service parses")
    }

    /// Replica indices 0..replicas of every serving role.
    fn all_replicas(service: &InferenceService) -> BTreeMap<String, BTreeSet<u32>> {
        service
            .spec
            .roles
            .iter()
            .filter(|r| !r.is_router())
            .map(|r| {
                let count = u32::try_from(r.replicas()).unwrap();
                (r.name.clone(), (0..count).collect())
            })
            .collect()
    }

    fn story4(policy: Option<&str>) -> InferenceService {
        let mut spec = json!({"roles": [
            role("prefill", "prefiller", 1, Some(2)),
            role("decode", "decoder", 2, Some(4)),
        ]});
        if let Some(policy) = policy {
            spec["schedulingStrategy"] = json!({"gangPolicy": policy});
        }
        service("deepseek-r1-disagg", spec)
    }

    fn spec_of(service: &InferenceService) -> Value {
        pod_group(service, &all_replicas(service), requested(service))
            .unwrap()
            .expect("gang-scheduled")["spec"]
            .clone()
    }

    fn sub_group(service: &str, role: &str, size: u32, min: u32) -> Value {
        json!({
            "name": role,
            "labelSelector": {"matchLabels": {
                "fusioninfer.io/service": service, "fusioninfer.io/role-name": role}},
            "matchLabelKeys": ["fusioninfer.io/replica-index"],
            "subGroupSize": size,
            "minSubGroups": min,
        })
    }

    #[test]
    fn monolithic_single_node_is_not_gang_scheduled() {
        let s = service(
            "qwen",
            json!({"roles": [role("inference", "worker", 3, None)]}),
        );
        assert_eq!(
            scheduling(&s.spec),
            Scheduling {
                gang: false,
                backend: None,
                scheduler_name: None,
                pod_priority_class: None,
            }
        );
        assert_eq!(
            pod_group(&s, &all_replicas(&s), requested(&s)).unwrap(),
            None
        );
    }

    #[test]
    fn multi_node_is_gang_scheduled_by_volcano() {
        // Story 3: one worker role, 2 replicas × 4 nodes.
        let s = service(
            "deepseek-r1-inference",
            json!({"roles": [role("inference", "worker", 2, Some(4))]}),
        );
        assert_eq!(
            scheduling(&s.spec),
            Scheduling {
                gang: true,
                backend: Some(Backend::Volcano),
                scheduler_name: Some("volcano".into()),
                pod_priority_class: None,
            }
        );
        assert_eq!(
            spec_of(&s),
            json!({
                "minMember": 4,
                "minResources": {"nvidia.com/gpu": "32"},
                "subGroupPolicy": [sub_group("deepseek-r1-inference", "inference", 4, 1)],
            })
        );
    }

    #[test]
    fn prefill_decode_is_gang_scheduled_even_single_node() {
        // Story 2: 2 prefill + 4 decode single-node replicas, 1 GPU each.
        let mut spec = json!({"roles": [
            role("prefill", "prefiller", 2, None),
            role("decode", "decoder", 4, None),
            {"name": "router", "componentType": "router"},
        ]});
        spec["roles"][0]["template"] = template("1");
        spec["roles"][1]["template"] = template("1");
        let s = service("qwen-inference-service", spec);
        assert!(scheduling(&s.spec).gang);
        assert_eq!(
            spec_of(&s),
            json!({
                "minMember": 2,
                "minResources": {"nvidia.com/gpu": "2"},
                "subGroupPolicy": [
                    sub_group("qwen-inference-service", "prefill", 1, 1),
                    sub_group("qwen-inference-service", "decode", 1, 1),
                ],
            }),
            "the router has no sub-group"
        );
    }

    #[test]
    fn explicit_volcano_turns_gang_on() {
        let s = service(
            "qwen",
            json!({"roles": [role("inference", "worker", 2, None)],
                   "schedulingStrategy": {"schedulerName": "volcano"}}),
        );
        assert_eq!(
            scheduling(&s.spec),
            Scheduling {
                gang: true,
                backend: Some(Backend::Volcano),
                scheduler_name: Some("volcano".into()),
                pod_priority_class: None,
            }
        );
        assert_eq!(
            spec_of(&s)["subGroupPolicy"],
            json!([sub_group("qwen", "inference", 1, 1)])
        );
    }

    #[test]
    fn another_scheduler_opts_out() {
        let mut s = story4(None);
        s.spec.scheduling_strategy = Some(crate::api::inference_service::SchedulingStrategy {
            scheduler_name: Some("kai-scheduler".into()),
            ..Default::default()
        });
        assert_eq!(
            scheduling(&s.spec),
            Scheduling {
                gang: false,
                backend: None,
                scheduler_name: Some("kai-scheduler".into()),
                pod_priority_class: None,
            }
        );
        assert_eq!(
            pod_group(&s, &all_replicas(&s), requested(&s)).unwrap(),
            None
        );
    }

    #[test]
    fn annotations_name_group_and_task() {
        assert_eq!(
            pod_annotations("qwen3-inference", "prefill", 1),
            BTreeMap::from([
                (
                    "scheduling.k8s.io/group-name".to_owned(),
                    "qwen3-inference".to_owned()
                ),
                ("volcano.sh/task-spec".to_owned(), "prefill-1".to_owned()),
            ])
        );
    }

    #[test]
    fn story4_task_member_is_the_seed_layout() {
        let s = story4(Some("TaskMember"));
        let pod_group = pod_group(&s, &all_replicas(&s), requested(&s))
            .unwrap()
            .unwrap();
        assert_eq!(
            pod_group,
            json!({
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "name": "deepseek-r1-disagg",
                    "namespace": "ai",
                    "labels": {
                        "fusioninfer.io/service": "deepseek-r1-disagg",
                        "app.kubernetes.io/managed-by": "tandem",
                    },
                    "ownerReferences": [{
                        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
                        "name": "deepseek-r1-disagg", "uid": "uid-1",
                        "controller": true, "blockOwnerDeletion": true,
                    }],
                },
                "spec": {
                    "minMember": 10,
                    "minTaskMember": {"prefill-0": 2, "decode-0": 4, "decode-1": 4},
                    "minResources": {"nvidia.com/gpu": "80"},
                },
            })
        );
    }

    #[test]
    fn story4_sub_group_admits_one_prefill_and_one_decode() {
        for policy in [None, Some("SubGroup")] {
            let s = story4(policy);
            assert_eq!(
                spec_of(&s),
                json!({
                    "minMember": 6,
                    "minResources": {"nvidia.com/gpu": "48"},
                    "subGroupPolicy": [
                        sub_group("deepseek-r1-disagg", "prefill", 2, 1),
                        sub_group("deepseek-r1-disagg", "decode", 4, 1),
                    ],
                }),
                "{policy:?}"
            );
        }
    }

    fn two_decode_zones(zone_a_replicas: i32) -> InferenceService {
        service(
            "qwen",
            json!({"roles": [
                role("prefill", "prefiller", 1, Some(2)),
                role("decode-zone-a", "decoder", zone_a_replicas, Some(4)),
                role("decode-zone-b", "decoder", 2, Some(4)),
            ]}),
        )
    }

    #[test]
    fn one_decode_replica_is_enough_whatever_its_zone() {
        let s = two_decode_zones(1);
        assert_eq!(
            spec_of(&s),
            json!({
                "minMember": 6,
                "minResources": {"nvidia.com/gpu": "48"},
                "subGroupPolicy": [
                    sub_group("qwen", "prefill", 2, 1),
                    sub_group("qwen", "decode-zone-a", 4, 1),
                    sub_group("qwen", "decode-zone-b", 4, 0),
                ],
            })
        );
    }

    #[test]
    fn a_role_at_zero_replicas_never_blocks() {
        let s = two_decode_zones(0);
        assert_eq!(
            spec_of(&s)["subGroupPolicy"],
            json!([
                sub_group("qwen", "prefill", 2, 1),
                sub_group("qwen", "decode-zone-b", 4, 1),
            ]),
            "zone b carries the decode minimum when zone a has no replica"
        );
        assert_eq!(spec_of(&s)["minMember"], 6);

        let mut task_member = two_decode_zones(0);
        task_member.spec.scheduling_strategy =
            Some(crate::api::inference_service::SchedulingStrategy {
                gang_policy: Some(GangPolicy::TaskMember),
                ..Default::default()
            });
        assert_eq!(
            spec_of(&task_member),
            json!({
                "minMember": 10,
                "minTaskMember": {"prefill-0": 2, "decode-zone-b-0": 4, "decode-zone-b-1": 4},
                "minResources": {"nvidia.com/gpu": "80"},
            })
        );
    }

    #[test]
    fn a_service_with_no_replica_requires_nothing() {
        let s = story4(None);
        assert_eq!(
            pod_group(&s, &BTreeMap::new(), requested(&s))
                .unwrap()
                .unwrap()["spec"],
            json!({"minMember": 0, "subGroupPolicy": []})
        );
    }

    #[test]
    fn queue_and_priority_class() {
        let mut s = story4(None);
        s.spec.scheduling_strategy = Some(crate::api::inference_service::SchedulingStrategy {
            scheduler_name: Some("volcano".into()),
            queue: Some("inference".into()),
            priority_class_name: Some("high-priority".into()),
            gang_policy: Some(GangPolicy::TaskMember),
            gang_scheduler: None,
        });
        let spec = spec_of(&s);
        assert_eq!(spec["queue"], "inference");
        assert_eq!(spec["priorityClassName"], "high-priority");
        assert_eq!(spec["minMember"], 10);
        let unset = spec_of(&story4(None));
        assert!(unset.get("queue").is_none() && unset.get("priorityClassName").is_none());
    }

    #[test]
    fn surviving_indices_need_not_be_contiguous() {
        let s = story4(Some("TaskMember"));
        let replicas = BTreeMap::from([
            ("prefill".to_owned(), BTreeSet::from([0])),
            ("decode".to_owned(), BTreeSet::from([0, 3])),
        ]);
        let spec = pod_group(&s, &replicas, requested(&s)).unwrap().unwrap()["spec"].clone();
        assert_eq!(
            spec["minTaskMember"],
            json!({"prefill-0": 2, "decode-0": 4, "decode-3": 4})
        );
        assert_eq!(spec["minMember"], 10);

        let s = story4(None);
        let spec = pod_group(&s, &replicas, requested(&s)).unwrap().unwrap()["spec"].clone();
        assert_eq!(spec["minMember"], 6, "sub-groups follow the index label");
    }

    #[test]
    fn fractional_and_binary_requests_sum_exactly() {
        let mut s = story4(None);
        s.spec.roles[0].template = Some(json!({"spec": {"containers": [
            {"name": "vllm", "image": "x", "resources": {
                "requests": {"cpu": "250m", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": "8"}}},
        ]}}));
        assert_eq!(
            spec_of(&s)["minResources"],
            json!({"cpu": "500m", "memory": "32Gi", "nvidia.com/gpu": "48"})
        );
    }

    #[test]
    fn broken_templates_are_errors_naming_the_role() {
        let mut s = story4(None);
        s.spec.roles[1].template = Some(json!({"spec": {"containers": "vllm"}}));
        let err = pod_group(&s, &all_replicas(&s), requested(&s)).unwrap_err();
        assert!(
            err.starts_with("role \"decode\": not a PodTemplateSpec: template.spec.containers: "),
            "{err}"
        );

        s.spec.roles[1].template = None;
        assert_eq!(
            pod_group(&s, &all_replicas(&s), requested(&s)).unwrap_err(),
            "role \"decode\": has no pod template"
        );

        s.spec.roles[1].template = Some(json!({"metadata": {}}));
        assert_eq!(
            pod_group(&s, &all_replicas(&s), requested(&s)).unwrap_err(),
            "role \"decode\": template has no pod spec"
        );

        s.spec.roles[1].template = Some(json!({"spec": {"containers": [
            {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "eight"}}}]}}));
        assert_eq!(
            pod_group(&s, &all_replicas(&s), requested(&s)).unwrap_err(),
            "role \"decode\": container \"vllm\": limits: nvidia.com/gpu: invalid quantity \"eight\": expected a number"
        );
    }

    fn with_backend(mut s: InferenceService, backend: GangScheduler) -> InferenceService {
        s.spec
            .scheduling_strategy
            .get_or_insert_default()
            .gang_scheduler = Some(backend);
        s
    }

    /// A cluster with the CRDs named (by kind), and Kubernetes' PodGroups
    /// served or not.
    fn cluster(volcano: bool, native: bool) -> Installed {
        let mut crds = Vec::new();
        if volcano {
            crds.push(json!({"kind": "CustomResourceDefinition", "spec": {
                "group": "scheduling.volcano.sh", "names": {"kind": "PodGroup"},
                "versions": [{"name": "v1beta1", "served": true}]}}));
        }
        crds.push(json!({"kind": "CustomResourceDefinition", "spec": {
            "group": "leaderworkerset.x-k8s.io", "names": {"kind": "LeaderWorkerSet"},
            "versions": [{"name": "v1", "served": true}]}}));
        Installed::from_crds(&crds)
            .with_native_pod_groups(native.then(|| BTreeSet::from(["schedulingPolicy".into()])))
    }

    #[test]
    fn admission_chooses_volcano_then_kubernetes_then_none_and_keeps_the_choice() {
        let s = story4(None);
        let choose = |old: Option<&InferenceService>, installed: &Installed| {
            default_gang_scheduler(&s.spec, old.map(|o| &o.spec), installed)
        };
        assert_eq!(
            choose(None, &cluster(true, true)),
            Some(GangScheduler::Volcano)
        );
        assert_eq!(
            choose(None, &cluster(false, true)),
            Some(GangScheduler::Kubernetes)
        );
        assert_eq!(
            choose(None, &cluster(false, false)),
            Some(GangScheduler::None)
        );
        // Nothing known: everything assumed, Volcano first.
        assert_eq!(
            choose(None, &Installed::Assumed),
            Some(GangScheduler::Volcano)
        );
        // An update keeps what the stored service has, whatever the cluster.
        let kubernetes = with_backend(story4(None), GangScheduler::Kubernetes);
        assert_eq!(
            choose(Some(&kubernetes), &cluster(true, true)),
            Some(GangScheduler::Kubernetes)
        );
        // A service stored before the field keeps its meaning (Volcano).
        assert_eq!(choose(Some(&story4(None)), &cluster(false, true)), None);
        // An update that first makes it need a gang chooses.
        let single = service("s", json!({"roles": [role("w", "worker", 1, None)]}));
        assert_eq!(
            choose(Some(&single), &cluster(false, true)),
            Some(GangScheduler::Kubernetes)
        );
        // Set, or a scheduler named, or no gang needed: nothing chosen.
        assert_eq!(
            default_gang_scheduler(&kubernetes.spec, None, &cluster(true, true)),
            None
        );
        assert_eq!(
            default_gang_scheduler(&single.spec, None, &cluster(true, true)),
            None
        );
    }

    #[test]
    fn gang_scheduler_picks_who_gives_the_gang_a_service_needs() {
        let native = scheduling(&with_backend(story4(None), GangScheduler::Kubernetes).spec);
        assert_eq!(native.backend, Some(Backend::Kubernetes));
        assert!(native.gang);
        // kube-scheduler is the cluster's default: no schedulerName, no
        // Volcano annotations.
        assert_eq!(native.scheduler_name, None);
        let none = scheduling(&with_backend(story4(None), GangScheduler::None).spec);
        assert_eq!((none.gang, none.backend), (false, None));
        // Volcano written down is the Volcano of a spec that leaves it out.
        assert_eq!(
            scheduling(&with_backend(story4(None), GangScheduler::Volcano).spec),
            scheduling(&story4(None).spec)
        );
        // A service that needs no gang gets none, whoever is named.
        let single = service("s", json!({"roles": [role("w", "worker", 2, None)]}));
        for backend in [GangScheduler::Kubernetes, GangScheduler::Volcano] {
            assert!(!scheduling(&with_backend(single.clone(), backend).spec).gang);
        }
        // The service's priority class reaches the pods with Kubernetes'
        // gang only (with Volcano it is the PodGroup's).
        let mut classed = with_backend(story4(None), GangScheduler::Kubernetes);
        classed
            .spec
            .scheduling_strategy
            .as_mut()
            .unwrap()
            .priority_class_name = Some("high".into());
        assert_eq!(
            scheduling(&classed.spec).pod_priority_class.as_deref(),
            Some("high")
        );
        // No Volcano PodGroup for Kubernetes' gang.
        assert_eq!(
            pod_group(&classed, &all_replicas(&classed), GangPolicy::SubGroup).unwrap(),
            None
        );
    }
}
