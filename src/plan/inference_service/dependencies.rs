//! What an InferenceService needs of the projects Tandem writes objects of,
//! against what the cluster has installed ([`Installed`]): the one decision
//! the webhook (refuse or warn), the reconciler (a condition, and nothing
//! written that the API server would prune) and `render` share.
//!
//! - Every service is LeaderWorkerSets: without LWS `v1` it is refused.
//! - A gang-scheduled service (DESIGN §1.1) needs Volcano's PodGroup. Without
//!   it the pods would wait for a scheduler that is not there: a warning at
//!   admission, `DependencyMissing` in the status.
//! - The gang layout: `gangPolicy` left unset takes `SubGroup` when the
//!   PodGroup schema has `subGroupPolicy` (Volcano ≥ 1.14) and `TaskMember`
//!   (seed 003's `minTaskMember` table) otherwise. `SubGroup` asked for
//!   explicitly on an older Volcano is refused, naming what was found: the
//!   API server would prune it, and the gang would silently be something
//!   else.
//! - A router role needs InferencePool `v1`. A cluster with only the
//!   pre-GA `v1alpha2` (`inference.networking.x-k8s.io`) is refused too, not
//!   served through it: that API has other fields (`targetPortNumber`, no
//!   `endpointPickerRef`), its endpoint picker images are the pre-GA ones,
//!   and the project has deprecated it. The refusal says what was found.
//! - NewRevision and IncrementalUpgrade route through Gateway API's Gateway
//!   and HTTPRoute `v1`: refused without them.
//!
//! When nothing is known ([`Installed::Assumed`]) everything is taken as
//! there, so the decision never refuses on a guess.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use crate::api::inference_service::{
    GangPolicy, GangScheduler, InferenceService, InferenceServiceSpec, InferenceServiceStatus,
    UpgradeType, placement_shape,
};
use crate::plan::inference_service::{gang, rollout};
use crate::plan::shared::condition::condition;
use crate::plan::shared::installed::{
    self, Dependency, GATEWAY, HTTP_ROUTE, INFERENCE_POOL, Installed, LEADER_WORKER_SET,
    LEGACY_INFERENCE_POOL, Lack, NATIVE_POD_GROUP, POD_GROUP, Shortfall,
};
use crate::plan::shared::native_gang;

/// How a lack is answered at admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The service cannot work: denied.
    Refuse,
    /// It works in part, or once the piece is installed: a warning.
    Warn,
}

/// What a service needs and the cluster lacks, with how admission answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needed {
    pub lack: Lack,
    pub severity: Severity,
}

/// The decision for one service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependencies {
    /// What it needs and lacks, in spec order.
    pub lacking: Vec<Needed>,
    /// The PodGroup layout when the service is gang-scheduled and one can be
    /// written; None when it is not gang-scheduled or the layout it asks for
    /// cannot be (its lack is in `lacking`).
    pub gang_policy: Option<GangPolicy>,
    /// Why the layout is not the one the spec names or defaults to, for the
    /// status; None when it is.
    pub gang_note: Option<String>,
}

impl Dependencies {
    pub fn lacks(&self) -> impl Iterator<Item = &Lack> {
        self.lacking.iter().map(|n| &n.lack)
    }
}

fn lack(
    field: String,
    dependency: &Dependency,
    shortfall: Shortfall,
    severity: Severity,
    message: String,
) -> Needed {
    Needed {
        lack: Lack {
            field,
            dependency: dependency.name,
            shortfall,
            message,
        },
        severity,
    }
}

fn missing(installed: &Installed, dependency: &Dependency, what_needs_it: &str) -> String {
    let found = match installed.find(dependency).flatten() {
        Some(found) => format!(
            "the cluster serves it only at {}",
            found.served.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        None if dependency == &NATIVE_POD_GROUP => "the API server does not serve it".to_owned(),
        None => "it is not installed".to_owned(),
    };
    format!(
        "{what_needs_it} needs {}/{} {}; {found}: {}",
        dependency.group, dependency.version, dependency.kind, dependency.install
    )
}

/// What `spec` needs of the cluster's dependencies and lacks, and the gang
/// layout it gets.
pub fn decide(spec: &InferenceServiceSpec, installed: &Installed) -> Dependencies {
    let mut lacking = Vec::new();
    if !installed.has(&LEADER_WORKER_SET) {
        lacking.push(lack(
            "spec.roles".to_owned(),
            &LEADER_WORKER_SET,
            Shortfall::Missing,
            Severity::Refuse,
            missing(
                installed,
                &LEADER_WORKER_SET,
                "each replica of a serving role is a LeaderWorkerSet, which",
            ),
        ));
    }

    let (gang_policy, gang_note) = gang_layout(spec, installed, &mut lacking);
    placement_lacks(spec, installed, gang_policy, &mut lacking);

    for (index, role) in spec.roles.iter().enumerate() {
        if role.is_router() && !installed.has(&INFERENCE_POOL) {
            let mut message = missing(
                installed,
                &INFERENCE_POOL,
                &format!(
                    "router role {:?} is served through an InferencePool, which",
                    role.name
                ),
            );
            let legacy = installed.find(&LEGACY_INFERENCE_POOL).flatten();
            if legacy.is_some_and(|f| f.serves(LEGACY_INFERENCE_POOL.version)) {
                message.push_str(
                    "; the pre-GA inference.networking.x-k8s.io/v1alpha2 InferencePool is \
                     installed, and Tandem does not write it",
                );
            }
            lacking.push(lack(
                format!("spec.roles[{index}]"),
                &INFERENCE_POOL,
                Shortfall::Missing,
                Severity::Refuse,
                message,
            ));
        }
    }

    let routed = spec
        .upgrade_strategy
        .as_ref()
        .and_then(|u| u.type_)
        .filter(|t| {
            matches!(
                t,
                UpgradeType::NewRevision | UpgradeType::IncrementalUpgrade
            )
        });
    if let Some(upgrade) = routed {
        for dependency in [&GATEWAY, &HTTP_ROUTE] {
            if !installed.has(dependency) {
                lacking.push(lack(
                    "spec.upgradeStrategy.type".to_owned(),
                    dependency,
                    Shortfall::Missing,
                    Severity::Refuse,
                    missing(
                        installed,
                        dependency,
                        &format!(
                            "upgradeStrategy {upgrade:?} moves traffic through a Gateway, which"
                        ),
                    ),
                ));
            }
        }
    }
    Dependencies {
        lacking,
        gang_policy,
        gang_note,
    }
}

/// Whether the service's gang is Volcano's and its layout is to be
/// decided; otherwise what it lacks for another backend (or for none) is
/// in `lacking`.
fn volcano_needed(
    spec: &InferenceServiceSpec,
    installed: &Installed,
    lacking: &mut Vec<Needed>,
) -> bool {
    let asked = spec
        .scheduling_strategy
        .as_ref()
        .and_then(|s| s.gang_scheduler);
    match gang::scheduling(spec).backend {
        None if asked == Some(GangScheduler::None)
            && gang::needs_gang(spec)
            && !installed.has(&POD_GROUP)
            && !installed.has(&NATIVE_POD_GROUP) =>
        {
            // What admission chooses where there is no gang scheduler: the
            // service works, its replicas may start in part.
            lacking.push(lack(
                "spec.schedulingStrategy.gangScheduler".to_owned(),
                &POD_GROUP,
                Shortfall::Missing,
                Severity::Warn,
                format!(
                    "a prefill/decode or multi-node service is gang-scheduled, and the cluster \
                     has neither Volcano's PodGroup ({}) nor Kubernetes' ({}), so gangScheduler \
                     is None: each pod is scheduled on its own, and a replica may start in part \
                     and hold its GPUs while it waits for the rest; {}, or {}",
                    installed.found_text(&POD_GROUP),
                    installed.found_text(&NATIVE_POD_GROUP),
                    POD_GROUP.install,
                    NATIVE_POD_GROUP.install
                ),
            ));
            return false;
        }
        None => return false,
        Some(gang::Backend::Kubernetes) => {
            if !installed.has(&NATIVE_POD_GROUP) {
                lacking.push(lack(
                    "spec.schedulingStrategy.gangScheduler".to_owned(),
                    &NATIVE_POD_GROUP,
                    Shortfall::Missing,
                    Severity::Refuse,
                    missing(
                        installed,
                        &NATIVE_POD_GROUP,
                        "gangScheduler Kubernetes gang-schedules the pods through \
                         kube-scheduler's PodGroups, which",
                    ),
                ));
            }
            return false;
        }
        Some(gang::Backend::Volcano) => {}
    }
    if asked == Some(GangScheduler::Volcano) && !installed.has(&POD_GROUP) {
        lacking.push(lack(
            "spec.schedulingStrategy.gangScheduler".to_owned(),
            &POD_GROUP,
            Shortfall::Missing,
            Severity::Refuse,
            missing(
                installed,
                &POD_GROUP,
                "gangScheduler Volcano gang-schedules the pods through a Volcano PodGroup, which",
            ),
        ));
        return false;
    }
    true
}

/// The PodGroup layout of a gang-scheduled service, and why it differs from
/// the default when it does.
fn gang_layout(
    spec: &InferenceServiceSpec,
    installed: &Installed,
    lacking: &mut Vec<Needed>,
) -> (Option<GangPolicy>, Option<String>) {
    if !volcano_needed(spec, installed, lacking) {
        return (None, None);
    }
    let field = "spec.schedulingStrategy.schedulerName";
    if !installed.has(&POD_GROUP) {
        let explicit = spec
            .scheduling_strategy
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .is_some();
        let what = if explicit {
            "schedulerName volcano gang-schedules the pods through a PodGroup, which".to_owned()
        } else {
            "a prefill/decode or multi-node service is gang-scheduled through a PodGroup \
             (set schedulingStrategy.schedulerName to another scheduler to opt out), which"
                .to_owned()
        };
        lacking.push(lack(
            field.to_owned(),
            &POD_GROUP,
            Shortfall::Missing,
            Severity::Warn,
            missing(installed, &POD_GROUP, &what),
        ));
        return (None, None);
    }
    let requested = spec
        .scheduling_strategy
        .as_ref()
        .and_then(|s| s.gang_policy);
    let sub_groups = installed.pod_group_has("subGroupPolicy");
    let task_members = installed.pod_group_has("minTaskMember");
    let field = "spec.schedulingStrategy.gangPolicy";
    let too_old = |policy: &str, needs: &str| {
        lack(
            field.to_owned(),
            &POD_GROUP,
            Shortfall::TooOld,
            Severity::Refuse,
            format!(
                "gangPolicy {policy} needs the PodGroup field spec.{needs}, which the installed \
                 {}/{} PodGroup ({}) does not have, so the API server would drop it: {}",
                POD_GROUP.group,
                POD_GROUP.version,
                installed.found_text(&POD_GROUP),
                POD_GROUP.install
            ),
        )
    };
    match requested {
        Some(GangPolicy::SubGroup) if !sub_groups => {
            lacking.push(too_old("SubGroup", "subGroupPolicy"));
            (None, None)
        }
        Some(GangPolicy::TaskMember) | None if !task_members && !sub_groups => {
            lacking.push(too_old("TaskMember", "minTaskMember"));
            (None, None)
        }
        Some(GangPolicy::TaskMember) if !task_members => {
            lacking.push(too_old("TaskMember", "minTaskMember"));
            (None, None)
        }
        Some(policy) => (Some(policy), None),
        None if sub_groups => (Some(GangPolicy::SubGroup), None),
        None => (
            Some(GangPolicy::TaskMember),
            Some(format!(
                "the installed PodGroup ({}) has no spec.subGroupPolicy (Volcano < 1.14): the \
                 gang uses the minTaskMember layout, where the service starts only when every \
                 replica fits; {}",
                installed.found_text(&POD_GROUP),
                POD_GROUP.install
            )),
        ),
    }
}

/// What the service's gang backend cannot carry out of `spec.placement` on
/// this cluster ([`super::placement`] says how each backend writes it):
///
/// - Kubernetes' PodGroups keep `schedulingConstraints` only under the
///   `TopologyAwareWorkloadScheduling` gate (learnt by the dry-run probe):
///   a required domain a group would carry is refused without it, rather
///   than written to be dropped (Preferred, by pod affinity, works).
/// - Volcano places one replica's sub-group in a domain through
///   `subGroupPolicy[].networkTopology.highestTierName` (Volcano ≥ 1.15):
///   refused on an older schema, or with the `minTaskMember` layout, whose
///   only `networkTopology` would pack every replica into one domain.
/// - Volcano has no field for a pair of sub-groups in one domain: a
///   required pair is refused on every version.
fn placement_lacks(
    spec: &InferenceServiceSpec,
    installed: &Installed,
    gang_policy: Option<GangPolicy>,
    lacking: &mut Vec<Needed>,
) {
    let Some(placement) = spec.placement.as_ref() else {
        return;
    };
    let shape = placement_shape(spec);
    let (multi_node, pair) = (shape.multi_node, shape.pair);
    let replica = placement.replica.as_ref().filter(|_| multi_node);
    let pair = placement.pair.as_ref().filter(|_| pair);
    match gang::scheduling(spec).backend {
        Some(gang::Backend::Kubernetes)
            if installed.has(&NATIVE_POD_GROUP)
                && !installed.native_pod_group_has(native_gang::TOPOLOGY.field) =>
        {
            for (part, domain) in [("replica", replica), ("pair", pair)] {
                if domain.is_some_and(|d| d.required()) {
                    lacking.push(lack(
                        format!("spec.placement.{part}.mode"),
                        &NATIVE_POD_GROUP,
                        Shortfall::TooOld,
                        Severity::Refuse,
                        format!(
                            "a Required {part} domain is the spec.{} of Kubernetes' PodGroup, \
                             which the API server drops without its {} feature gate (probed \
                             by a dry run): turn the gate on, or set mode Preferred (pod \
                             affinity)",
                            native_gang::TOPOLOGY.field,
                            native_gang::TOPOLOGY.gate
                        ),
                    ));
                }
            }
        }
        Some(gang::Backend::Volcano) => {
            if replica.is_some() {
                let lacks_field = !installed.volcano_places_sub_groups();
                if gang_policy == Some(GangPolicy::TaskMember) || lacks_field {
                    lacking.push(lack(
                        "spec.placement.replica".to_owned(),
                        &POD_GROUP,
                        Shortfall::TooOld,
                        Severity::Refuse,
                        format!(
                            "Volcano places each replica in one domain through \
                             spec.subGroupPolicy[].networkTopology.highestTierName of its \
                             PodGroup (Volcano >= 1.15), and {}: a networkTopology on the \
                             whole PodGroup would pack every replica into one domain; {}, or \
                             use gangScheduler Kubernetes",
                            if lacks_field {
                                format!(
                                    "the installed PodGroup ({}) has no such field",
                                    installed.found_text(&POD_GROUP)
                                )
                            } else {
                                "the gang uses the minTaskMember layout, which has no \
                                 sub-groups"
                                    .to_owned()
                            },
                            POD_GROUP.install
                        ),
                    ));
                }
            }
            if pair.is_some_and(|d| d.required()) {
                lacking.push(lack(
                    "spec.placement.pair.mode".to_owned(),
                    &POD_GROUP,
                    Shortfall::TooOld,
                    Severity::Refuse,
                    "Volcano's PodGroup places the whole PodGroup (every replica of the \
                     service) or one replica's sub-group in a network domain, never a prefill \
                     and a decode replica together: set mode Preferred (pod affinity), or use \
                     gangScheduler Kubernetes (the core PodGroup's topology)"
                        .to_owned(),
                ));
            }
        }
        _ => {}
    }
}

/// The objects among `objects` whose `spec` has fields the installed schema
/// of their kind lacks, as (apiVersion, kind, name), and one lack per kind
/// naming those fields: a safety net beneath the decisions above, for a
/// field of a dependency older than the ones Tandem is tested with. Such an
/// object is not to be written (the API server would drop those fields, and
/// every reconcile would write them again); the one already there is kept.
pub fn unwritable<'a>(
    installed: &Installed,
    objects: impl IntoIterator<Item = &'a Value>,
) -> (Vec<Needed>, BTreeSet<(String, String, String)>) {
    // By dependency name: Volcano's and Kubernetes' PodGroups share a kind.
    let mut by_kind: BTreeMap<&'static str, (Vec<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut unwritten = BTreeSet::new();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let dependencies = || installed::ALL.iter().chain([&NATIVE_POD_GROUP]);
    for object in objects {
        let group = text(&object["apiVersion"]);
        let group = group.split('/').next().unwrap_or_default();
        let Some(dependency) =
            dependencies().find(|d| d.group == group && object["kind"] == d.kind)
        else {
            continue;
        };
        let pruned = installed.pruned(object);
        if pruned.is_empty() {
            continue;
        }
        let name = text(&object["metadata"]["name"]);
        unwritten.insert((
            text(&object["apiVersion"]),
            text(&object["kind"]),
            name.clone(),
        ));
        let entry = by_kind.entry(dependency.name).or_default();
        entry.0.push(name);
        entry.1.extend(pruned);
    }
    let lacking = by_kind
        .into_iter()
        .filter_map(|(dependency, (names, fields))| {
            let dependency = dependencies().find(|d| d.name == dependency)?;
            let kind = dependency.kind;
            Some(lack(
                format!("{kind} {}", names.join(", ")),
                dependency,
                Shortfall::TooOld,
                Severity::Refuse,
                format!(
                    "the installed {}/{} {kind} ({}) has no {}, which Tandem writes; the API \
                     server would drop them, so it is not written: {}",
                    dependency.group,
                    dependency.version,
                    installed.found_text(dependency),
                    fields.into_iter().collect::<Vec<_>>().join(", "),
                    dependency.install
                ),
            ))
        })
        .collect();
    (lacking, unwritten)
}

/// The condition that says what the service lacks of the cluster's
/// dependencies, or that it lacks nothing (and which gang layout it got).
pub const CONDITION: &str = "DependenciesMet";

/// The Event reason of a gang layout chosen because of the installed
/// Volcano, and the condition's reason while it holds.
pub const TASK_MEMBER_LAYOUT: &str = "TaskMemberLayout";

/// Puts `decided` into `status`: the condition [`CONDITION`], and while
/// anything is lacking `Ready=False` with reason `DependencyMissing` or
/// `DependencyTooOld` naming each lack. The Event says the same once per
/// episode: when the lack starts or changes, or the layout falls back.
pub fn report(
    service: &InferenceService,
    decided: &Dependencies,
    status: &mut InferenceServiceStatus,
    now: &Time,
) -> Option<rollout::Event> {
    let previous = service
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = service.metadata.generation;
    let lacks: Vec<&Lack> = decided.lacks().collect();
    let (met, reason, message) = match lacks.first() {
        Some(first) => {
            let reason = if lacks.iter().any(|l| l.shortfall == Shortfall::TooOld) {
                Shortfall::TooOld.reason()
            } else {
                first.shortfall.reason()
            };
            let message = lacks
                .iter()
                .map(|l| format!("{}: {}", l.field, l.message))
                .collect::<Vec<_>>()
                .join("; ");
            (false, reason, message)
        }
        None => match &decided.gang_note {
            Some(note) => (true, TASK_MEMBER_LAYOUT, note.clone()),
            None => (
                true,
                "Installed",
                "everything the spec needs is installed".to_owned(),
            ),
        },
    };
    let before = previous.iter().find(|c| c.type_ == CONDITION).cloned();
    let now_condition = condition(
        &previous,
        CONDITION,
        met,
        reason,
        message.clone(),
        generation,
        now,
    );
    status.conditions.retain(|c| c.type_ != CONDITION);
    status.conditions.push(now_condition);
    if !met {
        status.conditions.retain(|c| c.type_ != "Ready");
        status.conditions.push(condition(
            &previous,
            "Ready",
            false,
            reason,
            message.clone(),
            generation,
            now,
        ));
    }
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    let news = before
        .as_ref()
        .is_none_or(|c| c.reason != reason || c.message != message);
    (news && reason != "Installed").then_some(rollout::Event {
        warning: false,
        reason,
        note: message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::inference_service::InferenceService;
    use serde_json::{Value, json};

    fn crd(group: &str, kind: &str, version: &str, fields: &[&str]) -> Value {
        let properties: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| ((*f).to_owned(), json!({"type": "object"})))
            .collect();
        json!({"kind": "CustomResourceDefinition",
            "spec": {"group": group, "names": {"kind": kind}, "versions": [
                {"name": version, "served": true, "schema": {"openAPIV3Schema":
                    {"properties": {"spec": {"properties": properties}}}}}]}})
    }

    fn lws() -> Value {
        crd(
            "leaderworkerset.x-k8s.io",
            "LeaderWorkerSet",
            "v1",
            &["replicas"],
        )
    }

    fn volcano(fields: &[&str]) -> Value {
        crd("scheduling.volcano.sh", "PodGroup", "v1beta1", fields)
    }

    fn service(extra: Value) -> InferenceServiceSpec {
        let mut spec = json!({"roles": [
            {"name": "prefill", "componentType": "prefiller", "replicas": 1,
             "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            {"name": "decode", "componentType": "decoder", "replicas": 1,
             "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}]});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let service: InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "s", "namespace": "n"}, "spec": spec}))
        .expect("a service");
        service.spec
    }

    #[test]
    fn nothing_known_lacks_nothing_and_keeps_the_default_layout() {
        let decided = decide(&service(json!({})), &Installed::Assumed);
        assert!(decided.lacking.is_empty());
        assert_eq!(decided.gang_policy, Some(GangPolicy::SubGroup));
        assert_eq!(decided.gang_note, None);
    }

    #[test]
    fn an_older_volcano_takes_the_task_member_layout_when_the_policy_is_unset() {
        let installed = Installed::from_crds([&lws(), &volcano(&["minMember", "minTaskMember"])]);
        let decided = decide(&service(json!({})), &installed);
        assert!(decided.lacking.is_empty(), "{:?}", decided.lacking);
        assert_eq!(decided.gang_policy, Some(GangPolicy::TaskMember));
        let note = decided.gang_note.expect("a note");
        assert!(note.contains("no spec.subGroupPolicy"), "{note}");
    }

    #[test]
    fn sub_group_asked_for_on_an_older_volcano_is_refused_naming_what_is_installed() {
        let installed = Installed::from_crds([&lws(), &volcano(&["minMember", "minTaskMember"])]);
        let spec = service(json!({"schedulingStrategy": {"gangPolicy": "SubGroup"}}));
        let decided = decide(&spec, &installed);
        assert_eq!(decided.gang_policy, None);
        let [needed] = decided.lacking.as_slice() else {
            panic!("one lack: {:?}", decided.lacking)
        };
        assert_eq!(needed.severity, Severity::Refuse);
        assert_eq!(needed.lack.shortfall, Shortfall::TooOld);
        assert_eq!(needed.lack.field, "spec.schedulingStrategy.gangPolicy");
        assert!(
            needed.lack.message.contains("serving v1beta1"),
            "{}",
            needed.lack.message
        );
        assert!(needed.lack.message.contains("subGroupPolicy"));
    }

    #[test]
    fn a_newer_volcano_keeps_sub_groups_and_task_member_stays_available() {
        let installed = Installed::from_crds([
            &lws(),
            &volcano(&["minMember", "minTaskMember", "subGroupPolicy"]),
        ]);
        assert_eq!(
            decide(&service(json!({})), &installed).gang_policy,
            Some(GangPolicy::SubGroup)
        );
        let spec = service(json!({"schedulingStrategy": {"gangPolicy": "TaskMember"}}));
        assert_eq!(
            decide(&spec, &installed).gang_policy,
            Some(GangPolicy::TaskMember)
        );
    }

    #[test]
    fn no_volcano_warns_and_no_leader_worker_set_refuses() {
        let decided = decide(&service(json!({})), &Installed::from_crds([]));
        let found: Vec<_> = decided
            .lacking
            .iter()
            .map(|n| (n.lack.dependency, n.severity, n.lack.field.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("LeaderWorkerSet", Severity::Refuse, "spec.roles"),
                (
                    "Volcano PodGroup",
                    Severity::Warn,
                    "spec.schedulingStrategy.schedulerName"
                ),
            ]
        );
        assert!(decided.lacking[0].lack.message.contains("install LWS"));
        assert_eq!(decided.gang_policy, None);
    }

    #[test]
    fn a_router_needs_inference_pool_v1_and_says_when_only_the_pre_ga_one_is_there() {
        let mut spec = service(json!({}));
        let router: crate::api::inference_service::Role = serde_json::from_value(json!({
            "name": "router", "componentType": "router", "strategy": "prefix-cache"}))
        .expect("a router role");
        spec.roles.insert(0, router);
        let legacy = crd(
            "inference.networking.x-k8s.io",
            "InferencePool",
            "v1alpha2",
            &["selector"],
        );
        let installed = Installed::from_crds([
            &lws(),
            &volcano(&["minTaskMember", "subGroupPolicy"]),
            &legacy,
        ]);
        let decided = decide(&spec, &installed);
        let [needed] = decided.lacking.as_slice() else {
            panic!("one lack: {:?}", decided.lacking)
        };
        assert_eq!(needed.lack.field, "spec.roles[0]");
        assert!(
            needed.lack.message.contains("pre-GA"),
            "{}",
            needed.lack.message
        );
    }

    #[test]
    fn a_routed_upgrade_needs_gateway_api() {
        let installed =
            Installed::from_crds([&lws(), &volcano(&["minTaskMember", "subGroupPolicy"])]);
        for (upgrade, lacks) in [
            ("NewRevision", 2),
            ("IncrementalUpgrade", 2),
            ("RollingUpdate", 0),
        ] {
            let spec = service(json!({"upgradeStrategy": {"type": upgrade}}));
            let decided = decide(&spec, &installed);
            assert_eq!(
                decided.lacking.len(),
                lacks,
                "{upgrade}: {:?}",
                decided.lacking
            );
            assert!(
                decided
                    .lacks()
                    .all(|l| l.field == "spec.upgradeStrategy.type")
            );
        }
    }

    #[test]
    fn a_gang_backend_the_cluster_lacks_is_refused_naming_it() {
        let bare = Installed::from_crds([&lws()]);
        let native = |fields: Option<&[&str]>| {
            Installed::from_crds([&lws()])
                .with_native_pod_groups(fields.map(|f| f.iter().map(|f| (*f).to_owned()).collect()))
        };
        // Kubernetes' PodGroups not served: refused, on the field.
        let kubernetes = service(json!({"schedulingStrategy": {"gangScheduler": "Kubernetes"}}));
        let decided = decide(&kubernetes, &bare);
        let needed = &decided.lacking[0];
        assert_eq!(needed.severity, Severity::Refuse);
        assert_eq!(needed.lack.field, "spec.schedulingStrategy.gangScheduler");
        assert!(
            needed.lack.message.contains(
                "needs scheduling.k8s.io/v1alpha2 PodGroup; the API server does not serve it"
            ),
            "{}",
            needed.lack.message
        );
        assert_eq!(decided.gang_policy, None);
        // Served: nothing lacks, and no Volcano layout.
        let decided = decide(&kubernetes, &native(Some(&["schedulingPolicy"])));
        assert!(decided.lacking.is_empty(), "{:?}", decided.lacking);
        assert_eq!(decided.gang_policy, None);
        // Volcano asked for by gangScheduler and missing: refused (left
        // out, it is the warning of before).
        let volcano_asked = service(json!({"schedulingStrategy": {"gangScheduler": "Volcano"}}));
        let decided = decide(&volcano_asked, &bare);
        assert_eq!(decided.lacking[0].severity, Severity::Refuse);
        assert_eq!(
            decide(&service(json!({})), &bare).lacking[0].severity,
            Severity::Warn
        );
        // None chosen where neither is there: a warning that says so.
        let none = service(json!({"schedulingStrategy": {"gangScheduler": "None"}}));
        let decided = decide(&none, &bare);
        assert_eq!(decided.lacking[0].severity, Severity::Warn);
        assert!(
            decided.lacking[0]
                .lack
                .message
                .contains("may start in part")
        );
        assert!(decide(&none, &native(Some(&[]))).lacking.is_empty());
    }

    /// A Volcano PodGroup CRD whose `subGroupPolicy` entries have
    /// `networkTopology` with `fields`.
    fn volcano_topology(fields: &[&str]) -> Value {
        let properties: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| ((*f).to_owned(), json!({"type": "string"})))
            .collect();
        json!({"kind": "CustomResourceDefinition",
            "spec": {"group": "scheduling.volcano.sh", "names": {"kind": "PodGroup"}, "versions": [
                {"name": "v1beta1", "served": true, "schema": {"openAPIV3Schema":
                    {"properties": {"spec": {"properties": {
                        "minMember": {"type": "integer"},
                        "minTaskMember": {"type": "object"},
                        "subGroupPolicy": {"type": "array", "items": {"type": "object",
                            "properties": {"networkTopology": {"type": "object",
                                "properties": properties}}}}}}}}}}]}})
    }

    fn placed(backend: &str, placement: Value) -> InferenceServiceSpec {
        let role = |name: &str, component: &str| {
            json!({"name": name, "componentType": component, "replicas": 2,
                "multinode": {"nodeCount": 2},
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}})
        };
        service(json!({
            "roles": [role("prefill", "prefiller"), role("decode", "decoder")],
            "schedulingStrategy": {"gangScheduler": backend},
            "placement": placement,
        }))
    }

    fn fields(decided: &Dependencies) -> Vec<(&str, Severity)> {
        decided
            .lacking
            .iter()
            .map(|n| (n.lack.field.as_str(), n.severity))
            .collect()
    }

    #[test]
    fn a_required_domain_on_kubernetes_without_the_topology_gate_is_refused() {
        let native = |fields: &[&str]| {
            Installed::from_crds([&lws()])
                .with_native_pod_groups(Some(fields.iter().map(|f| (*f).to_owned()).collect()))
        };
        let rack = json!({"topologyKey": "example.com/rack", "mode": "Required"});
        let block = json!({"topologyKey": "example.com/block", "mode": "Required"});
        let required = placed("Kubernetes", json!({"replica": rack, "pair": block}));
        let gate_off = native(&["schedulingPolicy"]);
        let decided = decide(&required, &gate_off);
        assert_eq!(
            fields(&decided),
            [
                ("spec.placement.replica.mode", Severity::Refuse),
                ("spec.placement.pair.mode", Severity::Refuse)
            ]
        );
        assert!(
            decided.lacking[0]
                .lack
                .message
                .contains("TopologyAwareWorkloadScheduling")
        );
        // With the gate, or Preferred (pod affinity): nothing lacks.
        let gate_on = native(&["schedulingPolicy", "schedulingConstraints"]);
        assert!(decide(&required, &gate_on).lacking.is_empty());
        let preferred = placed(
            "Kubernetes",
            json!({"replica": {"topologyKey": "example.com/rack", "mode": "Preferred"}}),
        );
        assert!(decide(&preferred, &gate_off).lacking.is_empty());
        // No gang: pod affinity, on any cluster.
        assert!(
            decide(&placed("None", json!({"replica": rack})), &gate_off)
                .lacking
                .is_empty()
        );
    }

    #[test]
    fn volcano_places_a_replica_only_with_highest_tier_name_and_never_a_required_pair() {
        let rack = json!({"topologyKey": "example.com/rack", "mode": "Required"});
        let v115 = Installed::from_crds([&lws(), &volcano_topology(&["mode", "highestTierName"])]);
        let v114 = Installed::from_crds([&lws(), &volcano_topology(&["mode"])]);
        let v113 = Installed::from_crds([&lws(), &volcano(&["minMember", "minTaskMember"])]);
        let replica = placed("Volcano", json!({"replica": rack}));
        assert!(decide(&replica, &v115).lacking.is_empty());
        for (installed, says) in [(&v114, "has no such field"), (&v113, "has no such field")] {
            let decided = decide(&replica, installed);
            assert_eq!(
                fields(&decided),
                [("spec.placement.replica", Severity::Refuse)],
                "{:?}",
                decided.lacking
            );
            assert!(
                decided.lacking[0].lack.message.contains(says),
                "{:?}",
                decided.lacking
            );
        }
        // The minTaskMember layout asked for: no sub-group to place.
        let mut task_member = replica.clone();
        if let Some(strategy) = task_member.scheduling_strategy.as_mut() {
            strategy.gang_policy = Some(GangPolicy::TaskMember);
        }
        let decided = decide(&task_member, &v115);
        assert!(
            decided.lacks().any(|l| l.field == "spec.placement.replica"
                && l.message.contains("minTaskMember layout")),
            "{:?}",
            decided.lacking
        );
        let pair = placed("Volcano", json!({"pair": rack}));
        assert_eq!(
            fields(&decide(&pair, &v115)),
            [("spec.placement.pair.mode", Severity::Refuse)]
        );
        let preferred = placed(
            "Volcano",
            json!({"pair": {"topologyKey": "example.com/rack", "mode": "Preferred"}}),
        );
        assert!(decide(&preferred, &v115).lacking.is_empty());
    }

    #[test]
    fn a_kubernetes_pod_group_with_a_field_its_api_server_drops_is_not_written() {
        let gate_off = Installed::from_crds([&lws()])
            .with_native_pod_groups(Some(["schedulingPolicy".to_owned()].into()));
        let group = json!({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "s-w-0-abc"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]}}});
        let (lacking, unwritten) = unwritable(&gate_off, [&group]);
        assert_eq!(unwritten.len(), 1);
        assert_eq!(lacking[0].lack.field, "PodGroup s-w-0-abc");
        assert!(
            lacking[0]
                .lack
                .message
                .contains("spec.schedulingConstraints")
        );
        // Volcano's PodGroup of the same kind is judged by its own schema.
        let volcano_group = json!({"apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup", "metadata": {"name": "s"}, "spec": {"minMember": 1}});
        assert!(unwritable(&gate_off, [&volcano_group]).1.is_empty());
    }
}
