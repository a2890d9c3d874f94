//! The revisions of an InferenceService: which one each LeaderWorkerSet runs,
//! how each revision's LeaderWorkerSets are named, and the record of what a
//! revision's pods are made of.
//!
//! A revision is the hash of everything that shapes the pods
//! ([`spec_revision`]). With NewRevision and IncrementalUpgrade two
//! revisions can run side by side, and the one the spec no longer describes
//! may have to grow again (a rollback to it while the spec names a third
//! revision). Its pod templates are then nowhere in the spec, so each revision
//! that runs side by side is recorded, as a Deployment records its
//! ReplicaSets' templates: an `apps/v1` ControllerRevision `{svc}-{revision}`
//! whose `data` holds the serving roles, the scheduling strategy and the placement. The
//! record is written once (its `data` is immutable) and removed with its
//! revision.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{drain, gang, placement, pod_groups};
use crate::api::inference_service::{
    InferenceService, InferenceServiceSpec, Role, SchedulingStrategy,
};
use crate::api::placement::Placement;
use crate::plan::shared::children::{self, Naming, REVISION, service_labels, service_name};

pub const CONTROLLER_REVISION_API_VERSION: &str =
    crate::plan::shared::child_kinds::CONTROLLER_REVISION.api_version;
pub const CONTROLLER_REVISION_KIND: &str =
    crate::plan::shared::child_kinds::CONTROLLER_REVISION.kind;

/// What a ControllerRevision records of a revision: exactly the parts of the
/// spec its hash covers, with the roles' other settings (replicas, scale-down
/// policy) as they were when it was recorded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Record {
    roles: Vec<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scheduling_strategy: Option<SchedulingStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    placement: Option<Placement>,
}

/// `{svc}-{revision}`: the ControllerRevision of one revision.
pub fn record_name(service: &str, revision: &str) -> String {
    format!("{service}-{revision}")
}

/// The ControllerRevision recording the spec's revision, numbered `number`
/// (one more than any recorded before, as Deployments number theirs).
pub fn record(service: &InferenceService, number: i64) -> Result<Value, String> {
    let svc = service_name(service);
    let revision = spec_revision(&service.spec);
    let record = Record {
        roles: service
            .spec
            .roles
            .iter()
            .filter(|r| !r.is_router())
            .cloned()
            .collect(),
        scheduling_strategy: service.spec.scheduling_strategy.clone(),
        placement: service.spec.placement.clone(),
    };
    let mut labels = service_labels(svc);
    labels.insert(REVISION.to_owned(), revision.clone());
    Ok(json!({
        "apiVersion": CONTROLLER_REVISION_API_VERSION,
        "kind": CONTROLLER_REVISION_KIND,
        "metadata": children::metadata(service, &record_name(svc, &revision), &labels),
        "data": serde_json::to_value(&record)
            .map_err(|e| format!("could not record revision {revision}: {e}"))?,
        "revision": number,
    }))
}

/// Whether a child is one of the service's ControllerRevisions.
pub fn is_record(object: &Value) -> bool {
    object["apiVersion"] == CONTROLLER_REVISION_API_VERSION
        && object["kind"] == CONTROLLER_REVISION_KIND
}

/// The number the next record gets: one more than the highest recorded.
pub fn next_number(children: &[Value]) -> i64 {
    children
        .iter()
        .filter(|c| is_record(c))
        .filter_map(|c| c["revision"].as_i64())
        .max()
        .map_or(1, |n| n.saturating_add(1))
}

/// The spec of every recorded revision, by revision: the recorded serving
/// roles and scheduling strategy with the rest of the service's current spec
/// (router, upgrade strategy). A record whose content does not hash to the
/// revision its label names (edited by hand, or from another version of
/// Tandem) is not used.
pub fn recorded(
    service: &InferenceService,
    children: &[Value],
) -> BTreeMap<String, InferenceServiceSpec> {
    let mut specs = BTreeMap::new();
    for object in children.iter().filter(|c| is_record(c)) {
        let Some(revision) = object["metadata"]["labels"][REVISION].as_str() else {
            continue;
        };
        let Ok(record) = serde_json::from_value::<Record>(object["data"].clone()) else {
            continue;
        };
        let mut roles: Vec<Role> = service
            .spec
            .roles
            .iter()
            .filter(|r| r.is_router())
            .cloned()
            .collect();
        roles.extend(record.roles);
        let spec = InferenceServiceSpec {
            roles,
            scheduling_strategy: record.scheduling_strategy,
            upgrade_strategy: service.spec.upgrade_strategy.clone(),
            placement: record.placement,
        };
        if spec_revision(&spec) == revision {
            specs.insert(revision.to_owned(), spec);
        }
    }
    specs
}

/// The revision a LeaderWorkerSet runs (its `fusioninfer.io/revision` label).
pub fn of(object: &Value) -> Option<&str> {
    object["metadata"]["labels"][REVISION].as_str()
}

/// The naming a set of LeaderWorkerSets already uses: plain when any of them
/// is, else the first one's suffix (by name), None when there are none or
/// none fits a naming.
fn naming_in<'a>(service: &str, sets: impl IntoIterator<Item = &'a Value>) -> Option<Naming> {
    let mut namings: Vec<Naming> = sets
        .into_iter()
        .filter_map(|o| Naming::of(service, o))
        .collect();
    namings.sort();
    namings.into_iter().next()
}

/// The naming of a service that runs one set of LeaderWorkerSets
/// (RollingUpdate, None): the one its LeaderWorkerSets use, plain for a new
/// service.
pub fn single_naming(service: &str, leader_worker_sets: &[&Value]) -> Naming {
    naming_in(service, leader_worker_sets.iter().copied()).unwrap_or(Naming::Plain)
}

/// The naming of each of `revisions` running side by side, in order: a
/// revision keeps the naming its LeaderWorkerSets have; one without any is
/// plain unless another LeaderWorkerSet of the service is plain (then it is
/// suffixed with its hash). Two revisions never share a naming.
pub fn side_by_side_namings(
    service: &str,
    revisions: &[&str],
    leader_worker_sets: &[&Value],
) -> Vec<Naming> {
    let mut namings: Vec<Naming> = Vec::new();
    for revision in revisions {
        let own = naming_in(
            service,
            leader_worker_sets
                .iter()
                .copied()
                .filter(|o| of(o) == Some(*revision)),
        );
        let plain_taken = leader_worker_sets
            .iter()
            .any(|o| of(o) != Some(*revision) && Naming::of(service, o) == Some(Naming::Plain));
        let mut naming = match own {
            Some(naming) => naming,
            None if plain_taken => Naming::Suffixed((*revision).to_owned()),
            None => Naming::Plain,
        };
        if namings.contains(&naming) {
            naming = Naming::Suffixed((*revision).to_owned());
        }
        namings.push(naming);
    }
    namings
}

/// The first [`children::REVISION_LEN`] hex digits of the SHA-256 of `shape`'s JSON.
fn hash(shape: &Value) -> String {
    // serde_json maps are sorted, so the bytes are canonical; a Value always
    // serializes.
    let bytes = serde_json::to_vec(shape).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    digest.as_ref()[..children::REVISION_LEN / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A short, stable hash of everything that shapes the pods of one serving
/// role: its name, component type, node count (which decides the multi-node
/// leader/worker wrapping) and template, and what of the scheduling strategy
/// reaches its pods (the scheduler, whether they carry the gang
/// annotations, whether they name Kubernetes' PodGroups and, for a role in
/// the core group, the node counts of that group's roles), the traffic
/// label and the grace period a drain sets.
/// Replica counts, scale-down policies, the other roles'
/// templates, the PodGroup's queue, priority class and gang policy, router
/// settings and the upgrade strategy do not change it: scaling never restarts
/// pods, and a change to one role restarts only that role's pods.
pub fn role_revision(spec: &InferenceServiceSpec, role: &Role) -> String {
    let scheduling = gang::scheduling(spec);
    let mut shape = json!({
        "name": role.name,
        "componentType": role.component_type,
        "nodeCount": role.node_count(),
        "template": role.template,
        "gang": scheduling.gang,
        "schedulerName": scheduling.scheduler_name,
        // The pods carry the traffic label (plan::inference_service::drain), and a drain longer
        // than Kubernetes' default grace sets the grace: both change pods, so
        // they move replicas by the role's upgrade pace, never all at once.
        "traffic": drain::TRAFFIC,
        "grace": drain::grace_seconds(
            role.template.as_ref().is_some_and(|t| !t["spec"]["terminationGracePeriodSeconds"].is_null()),
            role.drain_seconds(),
        ),
    });
    // Pods of Kubernetes' gang name their PodGroup instead of carrying
    // Volcano's annotations. Added only then, so that every other revision
    // keeps its hash.
    if scheduling.backend == Some(gang::Backend::Kubernetes) {
        shape["gangScheduler"] = json!("Kubernetes");
        shape["priorityClassName"] = json!(scheduling.pod_priority_class);
        // The first replica of a core role names the core group, whose
        // name follows the other core roles' node counts.
        let core = pod_groups::core_roles(spec);
        if core.iter().any(|r| r.name == role.name) {
            shape["coreGroup"] = json!(core.iter().map(|r| r.node_count()).collect::<Vec<_>>());
        }
    }
    // Where the pods land (their affinity, spread and PodGroup's topology).
    // Added only when set, so that every service without one keeps its hash.
    if let Some(placement) = placement::revision_shape(spec, role) {
        shape["placement"] = placement;
    }
    hash(&shape)
}

/// The revision of each serving role, by role name.
pub fn role_revisions(spec: &InferenceServiceSpec) -> BTreeMap<String, String> {
    spec.roles
        .iter()
        .filter(|r| !r.is_router())
        .map(|r| (r.name.clone(), role_revision(spec, r)))
        .collect()
}

/// The service's revision, composed from its serving roles' revisions
/// ([`role_revision`]): it changes exactly when one role's pods change. The
/// strategies that run revisions side by side (NewRevision,
/// IncrementalUpgrade) name and label a whole set of LeaderWorkerSets with it
/// and route to it through the Gateway; RollingUpdate and None label each
/// replica with its role's revision.
pub fn spec_revision(spec: &InferenceServiceSpec) -> String {
    hash(&json!({"roles": role_revisions(spec)}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(image: &str) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "ai", "uid": "u-1"},
            "spec": {"roles": [
                {"name": "inference", "componentType": "worker", "replicas": 4,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": image}]}}},
                {"name": "router", "componentType": "router"},
            ]}
        }))
        .unwrap()
    }

    fn lws(name: &str, index: u32, revision: &str) -> Value {
        json!({"metadata": {"name": name, "labels": {
            children::ROLE_NAME: "inference", children::REPLICA_INDEX: index.to_string(), REVISION: revision}}})
    }

    #[test]
    fn a_record_gives_back_the_revisions_spec() {
        let v1 = service("vllm:1");
        let record = record(&v1, 3).unwrap();
        let revision = spec_revision(&v1.spec);
        assert_eq!(record["metadata"]["name"], format!("qwen-{revision}"));
        assert_eq!(record["metadata"]["labels"][REVISION], revision.as_str());
        assert_eq!(record["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(record["revision"], 3);
        assert_eq!(
            record["data"]["roles"].as_array().unwrap().len(),
            1,
            "serving roles only"
        );

        // The spec has moved on to another image: the record still gives v1.
        let v2 = service("vllm:2");
        let specs = recorded(&v2, std::slice::from_ref(&record));
        assert_eq!(specs.len(), 1);
        let spec = &specs[&revision];
        assert_eq!(spec_revision(spec), revision);
        assert_eq!(
            spec.roles[0].name, "router",
            "the router comes from the current spec"
        );
        assert_eq!(spec.roles[1].template, v1.spec.roles[0].template);

        let mut edited = record.clone();
        edited["data"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("x");
        assert!(
            recorded(&v2, &[edited]).is_empty(),
            "a record that no longer hashes to its label"
        );
        assert!(
            recorded(
                &v2,
                &[
                    json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"labels": {REVISION: revision}}, "data": "nonsense"})
                ]
            )
            .is_empty()
        );
    }

    #[test]
    fn records_are_numbered_one_after_another() {
        assert_eq!(next_number(&[]), 1);
        let numbered =
            |n: i64| json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": n});
        assert_eq!(
            next_number(&[
                numbered(4),
                numbered(2),
                json!({"kind": "Service", "revision": 9})
            ]),
            5
        );
    }

    #[test]
    fn namings_keep_what_exists_and_never_collide() {
        let plain_a = lws("qwen-inference-0", 0, "aaaaaaaaaa");
        let suffixed_b = lws("qwen-inference-0-bbbbbbbbbb", 0, "bbbbbbbbbb");
        let plain_b = lws("qwen-inference-1", 1, "bbbbbbbbbb");
        let suffixed = |r: &str| Naming::Suffixed(r.to_owned());
        for (name, revisions, sets, expected) in [
            (
                "a new service",
                vec!["aaaaaaaaaa"],
                vec![],
                vec![Naming::Plain],
            ),
            (
                "an upgrade starts beside plain replicas",
                vec!["aaaaaaaaaa", "bbbbbbbbbb"],
                vec![&plain_a],
                vec![Naming::Plain, suffixed("bbbbbbbbbb")],
            ),
            (
                "the upgraded revision keeps its suffix",
                vec!["bbbbbbbbbb"],
                vec![&suffixed_b],
                vec![suffixed("bbbbbbbbbb")],
            ),
            (
                "the next upgrade takes the plain names again",
                vec!["bbbbbbbbbb", "cccccccccc"],
                vec![&suffixed_b],
                vec![suffixed("bbbbbbbbbb"), Naming::Plain],
            ),
            (
                "plain wins within a revision",
                vec!["bbbbbbbbbb"],
                vec![&suffixed_b, &plain_b],
                vec![Naming::Plain],
            ),
            (
                "two revisions without replicas",
                vec!["aaaaaaaaaa", "bbbbbbbbbb"],
                vec![],
                vec![Naming::Plain, suffixed("bbbbbbbbbb")],
            ),
        ] {
            assert_eq!(
                side_by_side_namings("qwen", &revisions, &sets),
                expected,
                "{name}"
            );
        }
        assert_eq!(single_naming("qwen", &[]), Naming::Plain);
        assert_eq!(
            single_naming("qwen", &[&suffixed_b]),
            suffixed("bbbbbbbbbb")
        );
        assert_eq!(
            single_naming("qwen", &[&suffixed_b, &plain_b]),
            Naming::Plain
        );
    }

    proptest::proptest! {
        /// Whatever LeaderWorkerSets exist, two revisions side by side never
        /// share a naming (so never a LeaderWorkerSet name), and a revision
        /// that has LeaderWorkerSets keeps the naming one of them has.
        #[test]
        fn side_by_side_revisions_never_share_names(
            existing in proptest::collection::vec((0u32..3, 0usize..3, proptest::bool::ANY), 0..8),
            active in 0usize..3,
            pending in 0usize..3,
        ) {
            let revisions = ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"];
            let objects: Vec<Value> = existing
                .iter()
                .map(|&(index, revision, plain)| {
                    let name = if plain {
                        format!("qwen-inference-{index}")
                    } else {
                        format!("qwen-inference-{index}-{}", revisions[revision])
                    };
                    lws(&name, index, revisions[revision])
                })
                .collect();
            let sets: Vec<&Value> = objects.iter().collect();
            proptest::prop_assume!(active != pending);
            let live = [revisions[active], revisions[pending]];
            let namings = side_by_side_namings("qwen", &live, &sets);
            proptest::prop_assert_eq!(namings.len(), 2);
            proptest::prop_assert_ne!(&namings[0], &namings[1]);
            let own: Vec<Naming> = sets
                .iter()
                .filter(|o| of(o) == Some(live[0]))
                .filter_map(|o| Naming::of("qwen", o))
                .collect();
            if !own.is_empty() {
                proptest::prop_assert!(own.contains(&namings[0]));
            }
        }
    }

    fn parsed(value: Value) -> InferenceService {
        serde_json::from_value(value).unwrap()
    }

    fn story2() -> Value {
        json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "ai", "uid": "u-1"},
            "spec": {"roles": [
                {"name": "prefill", "componentType": "prefiller", "replicas": 2,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}}},
                {"name": "decode", "componentType": "decoder",
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}}},
            ]}
        })
    }

    #[test]
    fn revision_changes_with_templates_not_with_replicas() {
        let base = parsed(story2());
        let r = spec_revision(&base.spec);
        assert_eq!(r.len(), children::REVISION_LEN);
        assert_eq!(r, spec_revision(&base.spec), "stable");
        let mut scaled = story2();
        scaled["spec"]["roles"][0]["replicas"] = json!(7);
        scaled["spec"]["roles"][0]["scaleDown"] = json!({"policy": "Binpack"});
        assert_eq!(
            spec_revision(&parsed(scaled).spec),
            r,
            "scaling is not a new revision"
        );
        let mut image = story2();
        image["spec"]["roles"][1]["template"]["spec"]["containers"][0]["image"] = json!("vllm:2");
        assert_ne!(spec_revision(&parsed(image).spec), r);
        let mut nodes = story2();
        nodes["spec"]["roles"][1]["multinode"] = json!({"nodeCount": 2});
        assert_ne!(spec_revision(&parsed(nodes).spec), r);
    }

    #[test]
    fn a_role_revision_covers_that_role_only() {
        let base = parsed(story2());
        let prefill = role_revision(&base.spec, &base.spec.roles[0]);
        let decode = role_revision(&base.spec, &base.spec.roles[1]);
        assert_ne!(prefill, decode, "the role's name is part of it");
        assert_eq!(
            role_revisions(&base.spec),
            BTreeMap::from([
                ("decode".to_owned(), decode.clone()),
                ("prefill".to_owned(), prefill.clone())
            ])
        );

        // Decode's image: decode's revision and the service's move, prefill's
        // does not.
        let mut image = story2();
        image["spec"]["roles"][1]["template"]["spec"]["containers"][0]["image"] = json!("vllm:2");
        let image = parsed(image);
        assert_eq!(role_revision(&image.spec, &image.spec.roles[0]), prefill);
        assert_ne!(role_revision(&image.spec, &image.spec.roles[1]), decode);
        assert_ne!(spec_revision(&image.spec), spec_revision(&base.spec));

        // The PodGroup's queue and priority class reach no pod.
        let mut queue = story2();
        queue["spec"]["schedulingStrategy"] =
            json!({"queue": "gpu", "priorityClassName": "high", "gangPolicy": "TaskMember"});
        assert_eq!(
            spec_revision(&parsed(queue).spec),
            spec_revision(&base.spec)
        );

        // Another scheduler reaches every pod: every role's revision moves.
        let mut scheduler = story2();
        scheduler["spec"]["schedulingStrategy"] = json!({"schedulerName": "kai"});
        let scheduler = parsed(scheduler);
        assert_ne!(
            role_revision(&scheduler.spec, &scheduler.spec.roles[0]),
            prefill
        );
        assert_ne!(
            role_revision(&scheduler.spec, &scheduler.spec.roles[1]),
            decode
        );
    }

    #[test]
    fn kubernetes_gang_changes_the_pods_and_the_core_follows_its_roles() {
        let base = parsed(json!({"apiVersion": "fusioninfer.io/v1alpha1",
            "kind": "InferenceService", "metadata": {"name": "s"}, "spec": {"roles": [
            {"name": "prefill", "componentType": "prefiller", "replicas": 1,
             "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            {"name": "decode", "componentType": "decoder", "replicas": 1,
             "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]}}));
        let with = |backend: &str, decode_nodes: i32| {
            let mut spec = base.spec.clone();
            spec.roles[1].multinode =
                serde_json::from_value(json!({"nodeCount": decode_nodes})).unwrap();
            spec.scheduling_strategy =
                serde_json::from_value(json!({"gangScheduler": backend})).unwrap();
            spec
        };
        // Volcano written down by admission changes no revision: no pod
        // rolls when Tandem fills it in.
        assert_eq!(
            spec_revision(&with("Volcano", 1)),
            spec_revision(&{
                let mut s = with("Volcano", 1);
                s.scheduling_strategy = None;
                s
            })
        );
        let native = with("Kubernetes", 1);
        assert_ne!(spec_revision(&native), spec_revision(&with("Volcano", 1)));
        // Decode's node count names another core group, which prefill's
        // first replica joins: prefill's revision moves too.
        let wider = with("Kubernetes", 2);
        assert_ne!(
            role_revision(&native, &native.roles[0]),
            role_revision(&wider, &wider.roles[0])
        );
        let volcano_wider = with("Volcano", 2);
        assert_eq!(
            role_revision(&with("Volcano", 1), &native.roles[0]),
            role_revision(&volcano_wider, &volcano_wider.roles[0])
        );
    }
}
