//! Volcano PodGroups: the generated objects against the upstream PodGroup CRD,
//! and the seed's "Scheduling Behavior Table" (seed 003, story 4) against a
//! model of Volcano's documented gang admission rule.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::{Value, json};
use tandem::api::inference_service::{GangPolicy, InferenceService, SchedulingStrategy};
use tandem::api::quantity::{Quantity, pod_requests};
use tandem::plan::inference_service::{dependencies, gang, placement};
use tandem::plan::shared::children;
use tandem::plan::shared::installed::Installed;

use harness::{CrdSchema, repo_path, yaml_documents};

const STORY2: &str = "examples/seeds/story2-prefill-decode.yaml";
const STORY3: &str = "examples/seeds/story3-multinode.yaml";
const STORY4: &str = "examples/seeds/story4-prefill-decode-multinode.yaml";
const GANG_VOLCANO: &str = "examples/inferenceservice/gang-volcano.yaml";
const GPU: &str = "nvidia.com/gpu";

/// The InferenceService of an example file, with a uid as if it were stored,
/// so its children carry owner references.
fn example(path: &str) -> InferenceService {
    let document = yaml_documents(&repo_path(path))
        .into_iter()
        .find(|d| d["kind"] == "InferenceService")
        .unwrap_or_else(|| panic!("{path} has an InferenceService"));
    let mut service: InferenceService =
        serde_json::from_value(document).unwrap_or_else(|e| panic!("{path}: {e}"));
    service.metadata.uid = Some("6f1c2a9e-0d4b-4c55-9a51-3e2f8a7b1c00".to_owned());
    service
}

fn with_policy(mut service: InferenceService, policy: GangPolicy) -> InferenceService {
    service
        .spec
        .scheduling_strategy
        .get_or_insert_with(SchedulingStrategy::default)
        .gang_policy = Some(policy);
    service
}

/// Replica indices 0..replicas of every serving role, as the spec asks.
fn spec_replicas(service: &InferenceService) -> BTreeMap<String, BTreeSet<u32>> {
    service
        .spec
        .roles
        .iter()
        .filter(|r| !r.is_router())
        .map(|r| {
            let count = u32::try_from(r.replicas()).expect("replicas >= 0");
            (r.name.clone(), (0..count).collect())
        })
        .collect()
}

fn pod_group_of(service: &InferenceService) -> Value {
    gang::pod_group(
        service,
        &spec_replicas(service),
        dependencies::decide(&service.spec, &Installed::Assumed)
            .gang_policy
            .unwrap_or_default(),
    )
    .expect("the planner accepts the example")
    .expect("the example is gang-scheduled")
}

// ---------------------------------------------------------------------------
// (a) The generated PodGroups against the upstream CRD (Volcano v1.15.1).
// ---------------------------------------------------------------------------

fn pod_group_schema(dir: &std::path::Path) -> CrdSchema {
    let crd = yaml_documents(&dir.join("scheduling.volcano.sh_podgroups.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "CustomResourceDefinition")
        .expect("the PodGroup CRD");
    CrdSchema::from_crd(&crd, Some("v1beta1"))
}

#[test]
fn generated_pod_groups_fit_the_upstream_crd() {
    let Some(dir) = harness::upstream_crds("generated_pod_groups_fit_the_upstream_crd") else {
        return;
    };
    let schema = pod_group_schema(&dir);
    assert_eq!(schema.kind, "PodGroup");
    for path in [STORY2, STORY3, STORY4, GANG_VOLCANO] {
        for policy in [GangPolicy::SubGroup, GangPolicy::TaskMember] {
            let service = with_policy(example(path), policy);
            let pod_group = pod_group_of(&service);
            assert_eq!(
                pod_group["metadata"]["ownerReferences"][0]["uid"],
                "6f1c2a9e-0d4b-4c55-9a51-3e2f8a7b1c00",
                "{path} {policy:?}: owned by the service"
            );
            let errors = schema.errors(&pod_group);
            assert!(
                errors.is_empty(),
                "{path} {policy:?}: {errors:#?}\n{pod_group:#}"
            );
        }
    }
    let queued = pod_group_of(&example(GANG_VOLCANO));
    assert_eq!(queued["spec"]["queue"], "inference");
    assert_eq!(queued["spec"]["priorityClassName"], "high-priority");
}

#[test]
fn the_schema_check_rejects_what_volcano_would() {
    let Some(dir) = harness::upstream_crds("the_schema_check_rejects_what_volcano_would") else {
        return;
    };
    let schema = pod_group_schema(&dir);
    let mut broken = pod_group_of(&example(STORY4));
    broken["spec"]["subGroupPolicy"][0]["matchLabelKeys"] = json!(children::REPLICA_INDEX);
    broken["spec"]["subGroupPolicy"][1]["minSubGroups"] = json!(-1);
    broken["spec"]["subGroupPolicy"][1]["subGroupSize"] = json!(0);
    broken["spec"]["minResources"][GPU] = json!("48 GPUs");
    broken["spec"]["gangPolicy"] = json!("SubGroup");
    let errors = schema.errors(&broken).join("\n");
    for path in [
        "/spec/subGroupPolicy/0/matchLabelKeys",
        "/spec/subGroupPolicy/1/minSubGroups",
        "/spec/subGroupPolicy/1/subGroupSize",
        "/spec/minResources/nvidia.com~1gpu",
        "/spec: ",
    ] {
        assert!(
            errors.contains(path),
            "expected an error at {path}:\n{errors}"
        );
    }
}

/// Issue 34: `spec.placement.replica` on Volcano is each multi-node role's
/// `subGroupPolicy` entry's `networkTopology`, valid strictly against
/// Volcano v1.15.1's CRD; Volcano v1.13.3's PodGroup has no sub-groups (and
/// no `highestTierName`), so the placement is refused there, and its schema
/// would reject the field.
#[test]
fn a_replica_placement_on_volcano_fits_v1_15_strictly_and_is_refused_on_v1_13() {
    let Some(dir) = harness::upstream_crds(
        "a_replica_placement_on_volcano_fits_v1_15_strictly_and_is_refused_on_v1_13",
    ) else {
        return;
    };
    let crd = |path: &str| {
        yaml_documents(&dir.join(path))
            .into_iter()
            .find(|d| d["kind"] == "CustomResourceDefinition")
            .expect("the PodGroup CRD")
    };
    let (v115, v113) = (
        crd("scheduling.volcano.sh_podgroups.yaml"),
        crd("older/scheduling.volcano.sh_podgroups.v1.13.yaml"),
    );
    let lws = json!({"kind": "CustomResourceDefinition", "spec": {
        "group": "leaderworkerset.x-k8s.io", "names": {"kind": "LeaderWorkerSet"},
        "versions": [{"name": "v1", "served": true}]}});
    for mode in ["Required", "Preferred"] {
        let mut service = example(STORY4);
        service.spec.placement = serde_json::from_value(json!({
            "replica": {"topologyKey": "network.topology.kubernetes.io/accelerator", "mode": mode},
        }))
        .expect("a placement");
        let mut pod_group = pod_group_of(&service);
        placement::place_sub_groups(&service.spec, &mut pod_group);
        let placed: Vec<&Value> = pod_group["spec"]["subGroupPolicy"]
            .as_array()
            .expect("sub-groups")
            .iter()
            .filter(|e| !e["networkTopology"].is_null())
            .collect();
        // Story 4's prefill (2 nodes) and decode (4 nodes) roles.
        assert_eq!(placed.len(), 2, "{pod_group:#}");
        assert_eq!(
            placed[0]["networkTopology"],
            json!({"mode": if mode == "Required" { "hard" } else { "soft" },
                "highestTierName": "network.topology.kubernetes.io/accelerator"})
        );
        let errors = CrdSchema::from_crd(&v115, Some("v1beta1")).errors(&pod_group);
        assert!(errors.is_empty(), "{mode}: {errors:#?}\n{pod_group:#}");
        assert!(
            !CrdSchema::from_crd(&v113, Some("v1beta1"))
                .errors(&pod_group)
                .is_empty(),
            "v1.13.3 has no subGroupPolicy"
        );

        let on = |crd: &Value| {
            dependencies::decide(&service.spec, &Installed::from_crds([&lws, crd]))
                .lacking
                .into_iter()
                .map(|n| n.lack.field)
                .collect::<Vec<_>>()
        };
        assert_eq!(on(&v115), Vec::<String>::new(), "{mode}");
        assert_eq!(on(&v113), ["spec.placement.replica"], "{mode}");
    }
}

#[test]
fn a_single_node_monolithic_service_has_no_pod_group() {
    let service = example("examples/seeds/story1-monolithic.yaml");
    assert_eq!(
        gang::pod_group(&service, &spec_replicas(&service), Default::default()).unwrap(),
        None
    );
}

// ---------------------------------------------------------------------------
// (b) A model of Volcano's gang admission rule.
//
// Sources (Volcano's own code and documentation):
// - PodGroup CRD v1.15.1 (/work/shared/crds/scheduling.volcano.sh_podgroups.yaml,
//   upstream config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml):
//   minMember "the minimal number of members/tasks to run the pod group"; minResources
//   likewise; minSubGroups "Scheduling is initiated only if cluster resources meet the
//   requirements of at least this number of subgroups"; subGroupSize "the number of pods in
//   each sub-affinity group"; matchLabelKeys "Pods containing the target label keys with
//   exactly the same corresponding label values are grouped together".
// - volcano-sh/volcano pkg/scheduler/plugins/gang/gang.go: a job is ready when
//   `CheckTaskMinAvailableReady() && Ready()`; pkg/scheduler/api/job_info.go: `Ready()` is
//   "allocated tasks >= MinAvailable (minMember)"; `CheckTaskReady` checks every
//   minTaskMember entry, but "if job minAvailable is less than sum of(task minAvailable),
//   skip this check". docs/design/task-minavailable.md: "If sumof(valid tasks) >=
//   job.minavailable, we take this job as valid (can be scheduled)".
// - volcano-sh/volcano pkg/scheduler/api/sub_job_info.go: pods matching a subGroupPolicy's
//   labelSelector are grouped into sub-jobs by the values of matchLabelKeys; a sub-job's
//   MinAvailable is subGroupSize and it is ready only with that many pods allocated.
//   docs/user-guide/how_to_use_network_topology_aware_scheduling.md §2.4: "each partition
//   must follow the Gang scheduling constraints. That is, a partition is allowed to be
//   scheduled only when all pods within it meet the scheduling conditions."
// - Huawei Cloud CCE, "Multi-dimensional Gang Scheduling" (Volcano's subGroupPolicy):
//   https://support.huaweicloud.com/intl/en-us/usermanual-cce/cce_10_1130.html (subGroupSize:
//   pods a sub-group needs; minSubGroups: sub-groups that must be schedulable); and CCE "Gang"
//   https://support.huaweicloud.com/usermanual-cce/cce_10_0778.html (the group is scheduled
//   only when idle cluster resources meet minResources).
//
// What the model assumes:
// - The cluster is empty, N GPUs in nodes of 8; pods ask only for GPUs and are placed first-fit.
// - Enqueue: the PodGroup leaves Pending only if its minResources GPUs fit in the idle GPUs
//   (the overcommit plugin's factor is taken as 1).
// - Allocate, subGroupPolicy: for each policy in order, whole sub-groups (ascending replica
//   index) until minSubGroups of them are placed; then every further sub-group, whole, when it
//   fits. Volcano's real order is by priority and plugins; the model assumes it reaches a
//   minimal viable set before spending capacity on extra replicas.
// - Allocate, minTaskMember: pods one at a time (Volcano holds them until the job is ready).
// - Readiness as in gang.go/job_info.go above; a job that is not ready binds nothing.
// ---------------------------------------------------------------------------

const GPUS_PER_NODE: u32 = 8;

/// One replica as Volcano sees it: what its pods carry, how many, and GPUs per pod.
#[derive(Debug)]
struct Replica {
    task: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    pods: u32,
    gpus_per_pod: u32,
}

/// The replicas of a service with the labels and annotations Tandem puts on their pods.
fn replicas_of(service: &InferenceService) -> Vec<Replica> {
    let name = children::service_name(service);
    let mut replicas = Vec::new();
    for role in service.spec.roles.iter().filter(|r| !r.is_router()) {
        let template: PodTemplateSpec =
            serde_json::from_value(role.template.clone().expect("a template")).unwrap();
        let requests = pod_requests(&template.spec.expect("a pod spec")).unwrap();
        let gpus = requests.get(GPU).copied().unwrap_or(Quantity::ZERO);
        let gpus_per_pod = u32::try_from(gpus.to_decimal()).expect("whole GPUs");
        for index in 0..u32::try_from(role.replicas()).unwrap() {
            let mut labels = children::role_labels(name, role);
            labels.insert(children::REPLICA_INDEX.to_owned(), index.to_string());
            replicas.push(Replica {
                task: children::task_name(&role.name, index),
                labels,
                annotations: gang::pod_annotations(name, &role.name, index),
                pods: u32::try_from(role.node_count()).unwrap(),
                gpus_per_pod,
            });
        }
    }
    replicas
}

/// Free GPUs per node.
#[derive(Clone)]
struct Cluster {
    free: Vec<u32>,
}

impl Cluster {
    fn new(gpus: u32) -> Cluster {
        assert_eq!(gpus % GPUS_PER_NODE, 0, "whole nodes");
        Cluster {
            free: vec![GPUS_PER_NODE; (gpus / GPUS_PER_NODE) as usize],
        }
    }

    fn place_pod(&mut self, gpus: u32) -> bool {
        match self.free.iter_mut().find(|free| **free >= gpus) {
            Some(free) => {
                *free -= gpus;
                true
            }
            None => false,
        }
    }

    /// Places all pods of `replicas` or none of them.
    fn place_whole(&mut self, replicas: &[&Replica]) -> bool {
        let mut trial = self.clone();
        let fits = replicas
            .iter()
            .all(|r| (0..r.pods).all(|_| trial.place_pod(r.gpus_per_pod)));
        if fits {
            *self = trial;
        }
        fits
    }
}

fn int(value: &Value) -> u32 {
    value
        .as_u64()
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

/// Pods Volcano binds per replica (task name) for `pod_group` on an empty
/// cluster of `cluster_gpus` GPUs; empty when the gang is not admitted.
fn volcano_binds(
    pod_group: &Value,
    replicas: &[Replica],
    cluster_gpus: u32,
) -> BTreeMap<String, u32> {
    let spec = &pod_group["spec"];
    for replica in replicas {
        assert_eq!(
            replica.annotations[children::GROUP_NAME_ANNOTATION],
            pod_group["metadata"]["name"],
            "{}: its pods join this PodGroup",
            replica.task
        );
    }
    let min_gpus = spec["minResources"][GPU]
        .as_str()
        .map_or(Quantity::ZERO, |q| {
            q.parse().unwrap_or_else(|e| panic!("minResources: {e}"))
        });
    if min_gpus.to_decimal() > cluster_gpus.into() {
        return BTreeMap::new(); // never leaves Pending: enqueue needs minResources.
    }
    let mut cluster = Cluster::new(cluster_gpus);
    let bound = match spec.get("subGroupPolicy") {
        Some(policies) => allocate_sub_groups(policies, replicas, &mut cluster),
        None => allocate_tasks(&spec["minTaskMember"], replicas, &mut cluster),
    };
    let ready =
        bound.values().sum::<u32>() >= int(&spec["minMember"]) && task_minimums_met(spec, &bound);
    if ready { bound } else { BTreeMap::new() }
}

/// gang.go's CheckTaskMinAvailableReady: every minTaskMember entry is met,
/// unless minMember is below their sum (then the check is skipped).
fn task_minimums_met(spec: &Value, bound: &BTreeMap<String, u32>) -> bool {
    let Some(tasks) = spec["minTaskMember"].as_object() else {
        return true;
    };
    let sum: u32 = tasks.values().map(int).sum();
    int(&spec["minMember"]) < sum
        || tasks
            .iter()
            .all(|(task, min)| bound.get(task).copied().unwrap_or(0) >= int(min))
}

fn matches(policy: &Value, replica: &Replica) -> bool {
    policy["labelSelector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
        .iter()
        .all(|(k, v)| replica.labels.get(k).map(String::as_str) == v.as_str())
}

/// One sub-group: the replicas whose pods share the matchLabelKeys values.
struct SubGroup<'a> {
    key: Vec<String>,
    members: Vec<&'a Replica>,
    placed: bool,
}

/// subGroupPolicy: sub-groups placed whole, each policy's minimum first.
fn allocate_sub_groups(
    policies: &Value,
    replicas: &[Replica],
    cluster: &mut Cluster,
) -> BTreeMap<String, u32> {
    let policies = policies.as_array().expect("a list");
    // Sub-groups per policy, keyed by the matchLabelKeys values, in replica order.
    let mut groups: Vec<Vec<SubGroup>> = policies.iter().map(|_| Vec::new()).collect();
    for replica in replicas {
        let matching: Vec<usize> = (0..policies.len())
            .filter(|&p| matches(&policies[p], replica))
            .collect();
        assert_eq!(
            matching.len(),
            1,
            "{} is in exactly one sub-group policy",
            replica.task
        );
        let policy = &policies[matching[0]];
        let key: Vec<String> = policy["matchLabelKeys"]
            .as_array()
            .expect("matchLabelKeys")
            .iter()
            .map(|k| replica.labels[k.as_str().expect("a label key")].clone())
            .collect();
        let sub_groups = &mut groups[matching[0]];
        match sub_groups.iter_mut().find(|g| g.key == key) {
            Some(group) => group.members.push(replica),
            None => sub_groups.push(SubGroup {
                key,
                members: vec![replica],
                placed: false,
            }),
        }
    }

    let mut bound = BTreeMap::new();
    for (policy, sub_groups) in policies.iter().zip(&mut groups) {
        let size = int(&policy["subGroupSize"]);
        let minimum = int(&policy["minSubGroups"]);
        let mut count = 0;
        for group in sub_groups.iter_mut() {
            if count == minimum {
                break;
            }
            if place_sub_group(group, size, cluster, &mut bound) {
                count += 1;
            }
        }
        if count < minimum {
            return BTreeMap::new(); // the gang minimum cannot be met
        }
    }
    for (policy, sub_groups) in policies.iter().zip(&mut groups) {
        let size = int(&policy["subGroupSize"]);
        for group in sub_groups.iter_mut().filter(|g| !g.placed) {
            place_sub_group(group, size, cluster, &mut bound);
        }
    }
    bound
}

/// Places a whole sub-group of at least `size` pods, or nothing.
fn place_sub_group(
    group: &mut SubGroup,
    size: u32,
    cluster: &mut Cluster,
    bound: &mut BTreeMap<String, u32>,
) -> bool {
    let pods: u32 = group.members.iter().map(|r| r.pods).sum();
    // A sub-group short of subGroupSize pods can never be ready.
    if pods < size || !cluster.place_whole(&group.members) {
        return false;
    }
    for replica in &group.members {
        bound.insert(replica.task.clone(), replica.pods);
    }
    group.placed = true;
    true
}

/// minTaskMember: pods placed one at a time, counted per task (volcano.sh/task-spec).
fn allocate_tasks(
    tasks: &Value,
    replicas: &[Replica],
    cluster: &mut Cluster,
) -> BTreeMap<String, u32> {
    let mut bound = BTreeMap::new();
    for replica in replicas {
        let task = &replica.annotations[children::TASK_SPEC_ANNOTATION];
        assert!(
            tasks.get(task).is_some(),
            "{task} has a minTaskMember entry"
        );
        for _ in 0..replica.pods {
            if cluster.place_pod(replica.gpus_per_pod) {
                *bound.entry(task.clone()).or_insert(0) += 1;
            }
        }
    }
    bound
}

/// Replicas with every pod bound, and replicas with only some.
fn running(
    bound: &BTreeMap<String, u32>,
    replicas: &[Replica],
) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut whole = BTreeSet::new();
    let mut partial = BTreeSet::new();
    for replica in replicas {
        match bound.get(&replica.task).copied().unwrap_or(0) {
            0 => {}
            n if n == replica.pods => {
                whole.insert(replica.task.clone());
            }
            _ => {
                partial.insert(replica.task.clone());
            }
        }
    }
    (whole, partial)
}

fn names(tasks: &[&str]) -> BTreeSet<String> {
    tasks.iter().map(|t| (*t).to_owned()).collect()
}

#[test]
fn story4_replicas_are_as_the_seed_draws_them() {
    let replicas = replicas_of(&example(STORY4));
    let shape: Vec<(&str, u32, u32)> = replicas
        .iter()
        .map(|r| (r.task.as_str(), r.pods, r.gpus_per_pod))
        .collect();
    assert_eq!(
        shape,
        [("prefill-0", 2, 8), ("decode-0", 4, 8), ("decode-1", 4, 8)]
    );
}

#[test]
fn sub_group_policy_gives_the_seeds_scheduling_behavior_table() {
    let service = with_policy(example(STORY4), GangPolicy::SubGroup);
    let pod_group = pod_group_of(&service);
    let replicas = replicas_of(&service);
    for (gpus, expected) in [
        (80, names(&["prefill-0", "decode-0", "decode-1"])), // full capacity
        (64, names(&["prefill-0", "decode-0"])),             // partial: 1P + 1D
        (48, names(&["prefill-0", "decode-0"])),             // partial: 1P + 1D
        (32, names(&[])), // blocked: cannot place 1P + 1D atomically
        (16, names(&[])), // blocked: only enough for prefill
    ] {
        let bound = volcano_binds(&pod_group, &replicas, gpus);
        let (whole, partial) = running(&bound, &replicas);
        assert_eq!(whole, expected, "{gpus} GPUs");
        assert!(
            partial.is_empty(),
            "{gpus} GPUs: no replica runs partly: {partial:?}"
        );
    }
}

#[test]
fn task_member_policy_is_all_or_nothing() {
    let service = with_policy(example(STORY4), GangPolicy::TaskMember);
    let pod_group = pod_group_of(&service);
    let replicas = replicas_of(&service);
    for (gpus, expected) in [
        (80, names(&["prefill-0", "decode-0", "decode-1"])),
        (64, names(&[])),
        (48, names(&[])),
        (32, names(&[])),
        (16, names(&[])),
    ] {
        let bound = volcano_binds(&pod_group, &replicas, gpus);
        let (whole, partial) = running(&bound, &replicas);
        assert_eq!(whole, expected, "{gpus} GPUs");
        assert!(partial.is_empty(), "{gpus} GPUs: {partial:?}");
    }
    // Without the enqueue check the task minimums alone still block: 64 GPUs
    // bind 8 of 10 pods, decode-1 gets 2 of its 4.
    let mut no_min_resources = pod_group.clone();
    no_min_resources["spec"]
        .as_object_mut()
        .unwrap()
        .remove("minResources");
    assert!(volcano_binds(&no_min_resources, &replicas, 64).is_empty());
}

#[test]
fn min_task_member_below_its_sum_loses_replica_atomicity() {
    // DESIGN §1.1: with minMember below the sum of minTaskMember, Volcano skips
    // the task checks, so the seed's layout with minMember 6 starts half a replica.
    let service = with_policy(example(STORY4), GangPolicy::TaskMember);
    let mut pod_group = pod_group_of(&service);
    pod_group["spec"]["minMember"] = json!(6);
    pod_group["spec"]["minResources"][GPU] = json!("48");
    let replicas = replicas_of(&service);
    let bound = volcano_binds(&pod_group, &replicas, 56);
    let (whole, partial) = running(&bound, &replicas);
    assert_eq!(whole, names(&["prefill-0", "decode-0"]));
    assert_eq!(
        partial,
        names(&["decode-1"]),
        "1 of decode-1's 4 pods holds a node"
    );
}

#[test]
fn one_decode_replica_of_any_zone_completes_the_minimal_set() {
    let mut service = with_policy(example(STORY4), GangPolicy::SubGroup);
    let mut zone_b = service.spec.roles[1].clone();
    service.spec.roles[1].name = "decode-zone-a".to_owned();
    zone_b.name = "decode-zone-b".to_owned();
    service.spec.roles.push(zone_b);
    let pod_group = pod_group_of(&service);
    let replicas = replicas_of(&service);
    let run = |gpus| running(&volcano_binds(&pod_group, &replicas, gpus), &replicas).0;
    assert_eq!(run(48), names(&["prefill-0", "decode-zone-a-0"]));
    assert_eq!(
        run(112),
        names(&[
            "prefill-0",
            "decode-zone-a-0",
            "decode-zone-a-1",
            "decode-zone-b-0"
        ])
    );
    assert_eq!(run(32), names(&[]));

    // Zone a scaled to 0: zone b alone carries the decode minimum.
    service.spec.roles[1].replicas = Some(0);
    let pod_group = pod_group_of(&service);
    let replicas = replicas_of(&service);
    assert_eq!(
        running(&volcano_binds(&pod_group, &replicas, 48), &replicas).0,
        names(&["prefill-0", "decode-zone-b-0"])
    );
}
