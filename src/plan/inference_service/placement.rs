//! How `spec.placement` (issue 34) reaches the pods, per gang backend
//! (`gang::Backend`, or none):
//!
//! | placement            | Kubernetes' PodGroups                | Volcano                                  | no gang              |
//! |----------------------|--------------------------------------|------------------------------------------|----------------------|
//! | replica, Required    | the replica's group: `schedulingConstraints.topology` (a core replica: preferred pod affinity) | `networkTopology` `hard` on the role's `subGroupPolicy` entry | required pod affinity |
//! | replica, Preferred   | preferred pod affinity               | `networkTopology` `soft`                 | preferred pod affinity |
//! | pair, Required       | the core group's `schedulingConstraints.topology` | refused (`dependencies`)     | required pod affinity |
//! | pair, Preferred      | preferred pod affinity               | preferred pod affinity                   | preferred pod affinity |
//! | spread               | `topologySpreadConstraints` on single-node roles' pods, on every backend |
//!
//! A pod names one Kubernetes PodGroup, and a PodGroup takes one topology
//! key: the core group carries the pair's key, so a core replica's own
//! domain is only preferred (pod affinity on the replica's own pods; a
//! required one could hold the gang forever, [`replica_affinity`]). A
//! replica's affinity selects the pods of that replica at that revision
//! (its labels), so the first pod lands anywhere (it matches its own term)
//! and the others follow it. The pair's affinity draws the first replica of
//! each further core role to the first core role's first replica.
//!
//! What a cluster cannot carry out is refused at admission
//! ([`super::dependencies`]): Kubernetes' topology without the
//! `TopologyAwareWorkloadScheduling` gate, Volcano's `networkTopology`
//! without `highestTierName` on `subGroupPolicy` (Volcano ≥ 1.15), a
//! required pair on Volcano.

use serde_json::{Map, Value, json};

use super::gang::{self, Backend};
use super::pod_groups;
use crate::api::Findings;
use crate::api::inference_service::{InferenceServiceSpec, Role, placement_shape};
use crate::api::placement::{PlacementDomain, PlacementMode};
use crate::plan::shared::children;

/// The weight of a preferred term: the most a term can weigh, so that a
/// placement asked for outweighs the scheduler's own spreading.
pub const PREFERRED_WEIGHT: i32 = 100;

/// The replica domain of `role`: `spec.placement.replica` when the role is
/// multi-node (a single-node replica is one pod, in one domain anyway).
fn replica_domain<'a>(spec: &'a InferenceServiceSpec, role: &Role) -> Option<&'a PlacementDomain> {
    spec.placement
        .as_ref()
        .and_then(|p| p.replica.as_ref())
        .filter(|_| role.node_count() > 1)
}

/// LeaderWorkerSet's annotation that puts each of its replicas alone in one
/// domain of a node label: its webhook gives the leader a required pod
/// affinity to its own group and an anti-affinity to every other group in
/// the namespace (any LeaderWorkerSet's), and its controller creates the workers only
/// once the leader is bound, pinned to the leader's domain.
pub const EXCLUSIVE_TOPOLOGY: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";

/// The node label of `role`'s exclusive replica domain
/// (`spec.placement.replica.exclusive`), which goes on each of its
/// LeaderWorkerSets as [`EXCLUSIVE_TOPOLOGY`]: multi-node roles, Required,
/// and without a gang only. LWS creates a replica's workers once its leader
/// is bound, and a gang binds none of its pods until all exist, so on a
/// gang backend it would wait forever: admission refuses it there
/// ([`check`]), and it is never written there.
pub fn exclusive_topology<'a>(
    spec: &'a InferenceServiceSpec,
    backend: Option<Backend>,
    role: &Role,
) -> Option<&'a str> {
    replica_domain(spec, role)
        .filter(|d| backend.is_none() && d.exclusive() && d.required())
        .map(|d| d.topology_key.as_str())
}

/// What the service's gang backend cannot carry out of its placement on any
/// cluster (what depends on the installed versions is
/// `dependencies::placement_lacks`'): an exclusive replica domain under a
/// gang ([`exclusive_topology`]).
pub fn check(spec: &InferenceServiceSpec) -> Findings {
    let mut findings = Findings::default();
    let exclusive = spec
        .placement
        .as_ref()
        .and_then(|p| p.replica.as_ref())
        .is_some_and(PlacementDomain::exclusive);
    let multi_node = placement_shape(spec).multi_node;
    if let (true, true, Some(backend)) = (exclusive, multi_node, gang::scheduling(spec).backend) {
        findings.deny(
            "spec.placement.replica.exclusive",
            format!(
                "an exclusive domain is LeaderWorkerSet's exclusive-topology, which creates a \
                 replica's workers only once its leader is bound, and the {backend:?} gang \
                 binds none of a replica's pods until all of them exist: it would wait \
                 forever. Set spec.schedulingStrategy.gangScheduler to None, or drop exclusive \
                 (each replica still lands whole in one domain)"
            ),
        );
    }
    findings
}

/// The pair domain, when the service has a pair (a core group).
fn pair_domain(spec: &InferenceServiceSpec) -> Option<&PlacementDomain> {
    spec.placement
        .as_ref()
        .and_then(|p| p.pair.as_ref())
        .filter(|_| !pod_groups::core_roles(spec).is_empty())
}

/// Whether replica `index` of `role` is in the core group: the first
/// replica of a core role.
fn in_core(spec: &InferenceServiceSpec, role: &Role, index: u32) -> bool {
    index == 0
        && pod_groups::core_roles(spec)
            .iter()
            .any(|r| r.name == role.name)
}

/// The node label a Kubernetes PodGroup requires its pods to share, or
/// None: the pair's key for the core group, the replica's key for a
/// multi-node replica's own group, each only when Required.
pub fn group_topology_key<'a>(
    spec: &'a InferenceServiceSpec,
    role: &Role,
    index: u32,
) -> Option<&'a str> {
    let domain = if in_core(spec, role, index) {
        pair_domain(spec)
    } else {
        replica_domain(spec, role)
    };
    domain
        .filter(|d| d.required())
        .map(|d| d.topology_key.as_str())
}

/// The `networkTopology` of `role`'s `subGroupPolicy` entry in Volcano's
/// PodGroup: each sub-group (one replica) within one tier of the HyperNodes
/// that Volcano's label discovery builds from the replica's node label
/// (their tier name is the label key).
pub fn volcano_network_topology(spec: &InferenceServiceSpec, role: &Role) -> Option<Value> {
    replica_domain(spec, role).map(|domain| {
        json!({
            "mode": match domain.mode() {
                PlacementMode::Required => "hard",
                PlacementMode::Preferred => "soft",
            },
            "highestTierName": domain.topology_key,
        })
    })
}

/// Adds to Volcano's PodGroup `pod_group` (of [`super::gang::pod_group`])
/// the `networkTopology` of each `subGroupPolicy` entry whose role has one
/// ([`volcano_network_topology`]).
pub fn place_sub_groups(spec: &InferenceServiceSpec, pod_group: &mut Value) {
    // `get_mut`, not indexing: indexing would add `subGroupPolicy: null` to
    // a minTaskMember PodGroup.
    let Some(entries) = pod_group
        .get_mut("spec")
        .and_then(|spec| spec.get_mut("subGroupPolicy"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for entry in entries {
        let role = spec
            .roles
            .iter()
            .find(|r| entry["name"].as_str() == Some(r.name.as_str()));
        if let Some(topology) = role.and_then(|r| volcano_network_topology(spec, r)) {
            entry["networkTopology"] = topology;
        }
    }
}

/// The tier Volcano's PodGroup `pod_group` places its sub-groups in
/// ([`place_sub_groups`]), if any.
pub fn sub_groups_placed(pod_group: &Value) -> Option<&str> {
    pod_group["spec"]["subGroupPolicy"]
        .as_array()?
        .iter()
        .find_map(|entry| entry["networkTopology"]["highestTierName"].as_str())
}

/// The pod affinity that replica `index` of `role` at revision `revision`
/// adds to its pods' `spec.affinity`, or None.
pub fn replica_affinity(
    spec: &InferenceServiceSpec,
    backend: Option<Backend>,
    service: &str,
    (role, index, revision): (&Role, u32, &str),
) -> Option<Value> {
    let mut required = Vec::new();
    let mut preferred = Vec::new();
    // `preferred_only`: a required domain given as preferred pod affinity.
    let mut add = |domain: &PlacementDomain, selector: Value, preferred_only: bool| {
        let term = json!({
            "labelSelector": {"matchLabels": selector},
            "topologyKey": domain.topology_key,
        });
        match domain.mode() {
            PlacementMode::Required if !preferred_only => required.push(term),
            _ => preferred.push(json!({
                "weight": PREFERRED_WEIGHT,
                "podAffinityTerm": term,
            })),
        }
    };
    let core = in_core(spec, role, index);
    if let Some(domain) = replica_domain(spec, role) {
        let (by_affinity, preferred_only) = match backend {
            // The group's topology carries a required domain. A core
            // replica's group is the core group, which carries the pair's
            // key (one key per group), and a required affinity inside a
            // gang can hold the group forever: kube-scheduler places the
            // group's pods one by one without going back, so two replicas'
            // first pods in one rack can leave no room for the rest
            // (tests/cluster/nodes.rs saw it). A core replica's domain is
            // preferred.
            Some(Backend::Kubernetes) => (!domain.required() || core, core),
            Some(Backend::Volcano) => (false, false),
            None => (true, false),
        };
        if by_affinity {
            add(
                domain,
                json!({
                    children::SERVICE: service,
                    children::ROLE_NAME: role.name,
                    children::REPLICA_INDEX: index.to_string(),
                    children::REVISION: revision,
                }),
                preferred_only,
            );
        }
    }
    let first_core = pod_groups::core_roles(spec).first().map(|r| r.name.clone());
    if let (Some(domain), true, Some(first)) = (pair_domain(spec), core, first_core)
        && first != role.name
    {
        // On a gang backend a required pair is the core group's topology
        // (Kubernetes), or refused at admission (Volcano).
        let by_affinity = backend.is_none() || !domain.required();
        if by_affinity {
            add(
                domain,
                json!({
                    children::SERVICE: service,
                    children::ROLE_NAME: first,
                    children::REPLICA_INDEX: "0",
                }),
                false,
            );
        }
    }
    if required.is_empty() && preferred.is_empty() {
        return None;
    }
    let mut pod_affinity = Map::new();
    if !required.is_empty() {
        pod_affinity.insert(
            "requiredDuringSchedulingIgnoredDuringExecution".to_owned(),
            Value::Array(required),
        );
    }
    if !preferred.is_empty() {
        pod_affinity.insert(
            "preferredDuringSchedulingIgnoredDuringExecution".to_owned(),
            Value::Array(preferred),
        );
    }
    Some(json!({"podAffinity": pod_affinity}))
}

/// The topology spread constraint of `role`'s pods (`spec.placement.spread`,
/// single-node roles only): the role's pods of one revision spread over the
/// label's domains (the revision label is among its `matchLabelKeys`).
pub fn spread(spec: &InferenceServiceSpec, service: &str, role: &Role) -> Option<Value> {
    let spread = spec.placement.as_ref()?.spread.as_ref()?;
    if role.node_count() > 1 {
        return None;
    }
    Some(json!({
        "maxSkew": spread.max_skew(),
        "topologyKey": spread.topology_key,
        "whenUnsatisfiable": match spread.mode() {
            PlacementMode::Required => "DoNotSchedule",
            PlacementMode::Preferred => "ScheduleAnyway",
        },
        "labelSelector": {"matchLabels": {
            children::SERVICE: service,
            children::ROLE_NAME: role.name,
        }},
        "matchLabelKeys": [children::REVISION],
    }))
}

/// Adds `affinity` (a `podAffinity` of [`replica_affinity`]) to the pod
/// template `template` (as JSON), after the user's own terms.
pub fn add_affinity(template: &mut Value, affinity: &Value) {
    let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let ours = &affinity["podAffinity"];
    let pod_affinity = &mut spec.entry("affinity").or_insert_with(|| json!({}))["podAffinity"];
    if !pod_affinity.is_object() {
        *pod_affinity = json!({});
    }
    for list in [
        "requiredDuringSchedulingIgnoredDuringExecution",
        "preferredDuringSchedulingIgnoredDuringExecution",
    ] {
        let Some(terms) = ours[list].as_array() else {
            continue;
        };
        let existing = &mut pod_affinity[list];
        match existing.as_array_mut() {
            Some(existing) => existing.extend(terms.iter().cloned()),
            None => *existing = Value::Array(terms.clone()),
        }
    }
}

/// Adds `constraint` ([`spread`]) to the pod template `template`'s
/// `topologySpreadConstraints`, after the user's own.
pub fn add_spread(template: &mut Value, constraint: &Value) {
    let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let constraints = spec
        .entry("topologySpreadConstraints")
        .or_insert_with(|| json!([]));
    match constraints.as_array_mut() {
        Some(list) => list.push(constraint.clone()),
        None => *constraints = json!([constraint]),
    }
}

/// What of the placement reaches `role`'s pods, for the role's revision
/// hash: None when nothing does, so that every service without a placement
/// keeps its revision.
pub fn revision_shape(spec: &InferenceServiceSpec, role: &Role) -> Option<Value> {
    let core = pod_groups::core_roles(spec)
        .iter()
        .any(|r| r.name == role.name);
    let shape = json!({
        "replica": replica_domain(spec, role),
        "pair": pair_domain(spec).filter(|_| core),
        "spread": spread(spec, "", role),
    });
    if shape
        .as_object()
        .is_some_and(|m| m.values().all(Value::is_null))
    {
        None
    } else {
        Some(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(placement: Value, roles: Value) -> InferenceServiceSpec {
        serde_json::from_value(json!({"roles": roles, "placement": placement})).expect("a spec")
    }

    fn role(name: &str, component: &str, nodes: i32) -> Value {
        json!({"name": name, "componentType": component, "replicas": 2,
            "multinode": {"nodeCount": nodes},
            "template": {"spec": {"containers": [{"name": "s", "image": "vllm"}]}}})
    }

    fn rack(mode: &str) -> Value {
        json!({"topologyKey": "example.com/rack", "mode": mode})
    }

    fn block(mode: &str) -> Value {
        json!({"topologyKey": "example.com/block", "mode": mode})
    }

    fn pd() -> Value {
        json!([
            role("prefill", "prefiller", 2),
            role("decode", "decoder", 2)
        ])
    }

    #[test]
    fn kubernetes_groups_carry_the_required_key_the_core_group_the_pairs() {
        let s = spec(
            json!({"replica": rack("Required"), "pair": block("Required")}),
            pd(),
        );
        let [prefill, decode] = [&s.roles[0], &s.roles[1]];
        assert_eq!(
            group_topology_key(&s, prefill, 0),
            Some("example.com/block")
        );
        assert_eq!(group_topology_key(&s, decode, 0), Some("example.com/block"));
        assert_eq!(group_topology_key(&s, decode, 1), Some("example.com/rack"));
        // The core replicas prefer their rack, by affinity on their own
        // pods (required, it could hold the gang forever); a further
        // replica needs none (its group has the key).
        let affinity = replica_affinity(&s, Some(Backend::Kubernetes), "ds", (decode, 0, "r1"))
            .expect("an affinity");
        assert!(
            affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].is_null()
        );
        let terms = &affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(terms.as_array().map(Vec::len), Some(1), "{affinity}");
        let term = &terms[0]["podAffinityTerm"];
        assert_eq!(term["topologyKey"], "example.com/rack");
        assert_eq!(
            term["labelSelector"]["matchLabels"],
            json!({"fusioninfer.io/service": "ds", "fusioninfer.io/role-name": "decode",
                "fusioninfer.io/replica-index": "0", "fusioninfer.io/revision": "r1"})
        );
        assert_eq!(
            replica_affinity(&s, Some(Backend::Kubernetes), "ds", (decode, 1, "r1")),
            None
        );
    }

    #[test]
    fn preferred_is_preferred_pod_affinity_and_no_group_key() {
        let s = spec(
            json!({"replica": rack("Preferred"), "pair": block("Preferred")}),
            pd(),
        );
        let decode = &s.roles[1];
        assert_eq!(group_topology_key(&s, decode, 0), None);
        assert_eq!(group_topology_key(&s, decode, 1), None);
        let affinity = replica_affinity(&s, Some(Backend::Kubernetes), "ds", (decode, 0, "r1"))
            .expect("an affinity");
        let terms = &affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
        // Its own replica's rack, and the prefill's first replica's block.
        assert_eq!(terms.as_array().map(Vec::len), Some(2), "{affinity}");
        assert_eq!(terms[0]["weight"], PREFERRED_WEIGHT);
        assert_eq!(
            terms[1]["podAffinityTerm"]["topologyKey"],
            "example.com/block"
        );
        assert_eq!(
            terms[1]["podAffinityTerm"]["labelSelector"]["matchLabels"]["fusioninfer.io/role-name"],
            "prefill"
        );
        assert!(
            affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].is_null()
        );
    }

    #[test]
    fn without_a_gang_every_domain_is_pod_affinity() {
        let s = spec(
            json!({"replica": rack("Required"), "pair": block("Required")}),
            pd(),
        );
        let [prefill, decode] = [&s.roles[0], &s.roles[1]];
        let terms = |role, index| {
            replica_affinity(&s, None, "ds", (role, index, "r1")).map(|a| {
                a["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    .as_array()
                    .map(|t| {
                        t.iter()
                            .map(|t| t["topologyKey"].clone())
                            .collect::<Vec<_>>()
                    })
            })
        };
        // The pair's first role draws the others; it is drawn by none.
        assert_eq!(
            terms(prefill, 0),
            Some(Some(vec![json!("example.com/rack")]))
        );
        assert_eq!(
            terms(decode, 0),
            Some(Some(vec![
                json!("example.com/rack"),
                json!("example.com/block")
            ]))
        );
        assert_eq!(
            terms(decode, 1),
            Some(Some(vec![json!("example.com/rack")]))
        );
    }

    #[test]
    fn volcano_places_each_multi_node_sub_group_and_no_single_node_one() {
        let s = spec(
            json!({"replica": rack("Preferred")}),
            json!([
                role("prefill", "prefiller", 1),
                role("decode", "decoder", 2)
            ]),
        );
        assert_eq!(volcano_network_topology(&s, &s.roles[0]), None);
        assert_eq!(
            volcano_network_topology(&s, &s.roles[1]),
            Some(json!({"mode": "soft", "highestTierName": "example.com/rack"}))
        );
        assert_eq!(
            replica_affinity(&s, Some(Backend::Volcano), "ds", (&s.roles[1], 0, "r1")),
            None
        );
    }

    #[test]
    fn spread_constrains_single_node_roles_by_revision() {
        let s = spec(
            json!({"spread": {"topologyKey": "topology.kubernetes.io/zone"}}),
            json!([
                role("prefill", "prefiller", 1),
                role("decode", "decoder", 2)
            ]),
        );
        let constraint = spread(&s, "ds", &s.roles[0]).expect("a constraint");
        assert_eq!(constraint["whenUnsatisfiable"], "DoNotSchedule");
        assert_eq!(constraint["maxSkew"], 1);
        assert_eq!(
            constraint["matchLabelKeys"],
            json!(["fusioninfer.io/revision"])
        );
        assert_eq!(spread(&s, "ds", &s.roles[1]), None);
    }

    #[test]
    fn terms_go_after_the_users_own() {
        let mut template = json!({"spec": {
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "mine"}]}},
            "topologySpreadConstraints": [{"topologyKey": "mine"}],
        }});
        add_affinity(
            &mut template,
            &json!({"podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "ours"}],
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100}],
            }}),
        );
        add_spread(&mut template, &json!({"topologyKey": "ours"}));
        let affinity = &template["spec"]["affinity"]["podAffinity"];
        assert_eq!(
            affinity["requiredDuringSchedulingIgnoredDuringExecution"],
            json!([{"topologyKey": "mine"}, {"topologyKey": "ours"}])
        );
        assert_eq!(
            affinity["preferredDuringSchedulingIgnoredDuringExecution"],
            json!([{"weight": 100}])
        );
        assert_eq!(
            template["spec"]["topologySpreadConstraints"],
            json!([{"topologyKey": "mine"}, {"topologyKey": "ours"}])
        );
    }

    #[test]
    fn sub_groups_get_their_roles_topology_and_a_task_member_group_is_left_alone() {
        let s = spec(
            json!({"replica": rack("Required")}),
            json!([
                role("prefill", "prefiller", 1),
                role("decode", "decoder", 2)
            ]),
        );
        let mut sub_groups =
            json!({"spec": {"subGroupPolicy": [{"name": "prefill"}, {"name": "decode"}]}});
        place_sub_groups(&s, &mut sub_groups);
        assert_eq!(sub_groups_placed(&sub_groups), Some("example.com/rack"));
        assert_eq!(
            sub_groups["spec"]["subGroupPolicy"],
            json!([{"name": "prefill"}, {"name": "decode",
                "networkTopology": {"mode": "hard", "highestTierName": "example.com/rack"}}])
        );
        let mut task_members = json!({"spec": {"minTaskMember": {"decode-0": 2}}});
        place_sub_groups(&s, &mut task_members);
        assert_eq!(
            task_members,
            json!({"spec": {"minTaskMember": {"decode-0": 2}}})
        );
    }

    /// An exclusive replica domain is LWS's exclusive-topology on each
    /// multi-node replica's LeaderWorkerSet, without a gang only: under a
    /// gang LWS would hold the workers until the leader is bound, and the
    /// gang the leader until the workers exist. Refused there, by name.
    #[test]
    fn an_exclusive_domain_is_lws_exclusive_topology_without_a_gang_only() {
        let exclusive = json!({"topologyKey": "example.com/rack", "exclusive": true});
        let mut s = spec(
            json!({"replica": exclusive}),
            json!([
                role("prefill", "prefiller", 1),
                role("decode", "decoder", 2)
            ]),
        );
        s.scheduling_strategy =
            Some(serde_json::from_value(json!({"gangScheduler": "None"})).expect("a strategy"));
        assert!(check(&s).is_allowed());
        let (prefill, decode) = (&s.roles[0], &s.roles[1]);
        assert_eq!(
            exclusive_topology(&s, None, decode),
            Some("example.com/rack")
        );
        assert_eq!(exclusive_topology(&s, None, prefill), None, "single-node");
        for backend in [Backend::Kubernetes, Backend::Volcano] {
            assert_eq!(exclusive_topology(&s, Some(backend), decode), None);
        }
        for gang in ["Kubernetes", "Volcano"] {
            s.scheduling_strategy =
                Some(serde_json::from_value(json!({"gangScheduler": gang})).expect("a strategy"));
            let findings = check(&s);
            assert_eq!(findings.violations.len(), 1, "{gang}: {findings:?}");
            assert_eq!(
                findings.violations[0].field,
                "spec.placement.replica.exclusive"
            );
            assert!(
                findings.violations[0]
                    .reason
                    .contains("gangScheduler to None"),
                "{findings:?}"
            );
        }
        // Not exclusive: nothing to refuse under a gang.
        s.placement = serde_json::from_value(json!({"replica": rack("Required")})).ok();
        assert!(check(&s).is_allowed());
    }

    #[test]
    fn no_placement_leaves_the_revision_shape_empty() {
        let s = spec(json!({}), pd());
        assert_eq!(revision_shape(&s, &s.roles[0]), None);
        let s = spec(json!({"pair": block("Required")}), pd());
        assert!(revision_shape(&s, &s.roles[0]).is_some());
    }
}
