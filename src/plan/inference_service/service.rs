//! Everything an InferenceService should have, from its spec and the replica
//! indices that exist: the plan the reconciler applies and `render` prints.
//!
//! One pass ([`reconcile`]) runs these steps once each, in order, each a
//! file of its own:
//! 1. `world`: what the service's plan is made from, and the lookups the
//!    later steps read it through;
//! 2. the rollout ([`super::rollout`]): which revisions run, at what
//!    capacity;
//! 3. `replicas`: each serving role's replicas in each run (their
//!    LeaderWorkerSets, drains and the RollingUpdate's pace);
//! 4. `objects`: the router's, the traffic's, the budgets and the
//!    PodGroups, and what the cluster cannot take;
//! 5. `diff`: the plan against the world, as applies and deletions, each
//!    with why;
//! 6. `report`: the status, the Events and when to look again.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::rollout::{self, Rollout};
use super::{dependencies, names, pacing, placement, router, traffic};
use crate::api::Findings;
use crate::api::inference_service::{self, InferenceService, InferenceServiceStatus};
use crate::plan::shared::children;
pub use crate::plan::shared::write::{
    APPLIED_HASH, Apply, Change, Delete, change_of, contains, stamp, up_to_date,
};

mod diff;
mod objects;
mod replicas;
mod report;
mod world;

pub use self::diff::why_delete;
use self::diff::{applies, deletions};
pub use self::world::World;
use self::world::kind_name;

/// An object the plan wants, and why (the reconciler's Event says it).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub object: Value,
    pub why: String,
}

/// Plan options that come from the operator's flags, not from the object.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub router: router::RouterOptions,
}

/// Everything that makes an InferenceService unusable: the single-object rules
/// of `api::inference_service`, the router's rules, the placement its gang
/// backend cannot carry out on any cluster, and names of children that
/// Kubernetes would refuse. The webhook and the reconciler both call this, so
/// the webhook rejects exactly what the controller could not apply.
pub fn validate(service: &InferenceService) -> Findings {
    let name = children::service_name(service);
    let mut findings = inference_service::validate(&service.spec);
    findings.extend(router::check(&service.spec));
    findings.extend(names::check(name, &service.spec));
    findings.extend(traffic::check(&service.spec));
    findings.extend(placement::check(&service.spec));
    findings
}

/// What the plan wants: objects to apply, existing objects to leave exactly as
/// they are (a replica that keeps its revision under strategy None, a revision
/// whose record is gone, a revision's record), and what it could not do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub desired: Vec<Desired>,
    pub kept: BTreeSet<(String, String, String)>,
    pub problems: Vec<String>,
    /// Why a RollingUpdate removes a replica, by LeaderWorkerSet name.
    pub delete_notes: BTreeMap<String, String>,
    /// The RollingUpdate step of each role that is moving to a new revision.
    pub paced: BTreeMap<String, pacing::Paced>,
    /// The replicas out of traffic before they are deleted, by role.
    pub draining: BTreeMap<String, BTreeSet<u32>>,
    /// The earliest drain deadline: the plan changes then.
    pub drain_deadline: Option<jiff::Timestamp>,
    /// Replicas put back into traffic instead of new ones being made.
    pub events: Vec<rollout::Event>,
    /// What the service needs of the installed dependencies and lacks, and
    /// the gang layout it gets.
    pub dependencies: Option<dependencies::Dependencies>,
}

/// Everything the service should have, given what the world has now and the
/// time (upgrades step with it): see [`plan`].
pub fn desired(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> Result<Vec<Desired>, String> {
    let rollout = rollout::plan(
        service,
        world.children,
        world.pods,
        world.unavailable,
        now.0,
    );
    Ok(plan(service, world, options, &rollout)?.desired)
}

/// Everything the service should have for `rollout`'s revisions: for each
/// revision and serving role, the replica indices it keeps at its capacity
/// (Ordered: the lowest; Binpack: the cheapest to lose go), the router's
/// objects, an upgrade's Gateway, route, per-revision Services and records,
/// and, for the PodGroup, the replicas whose pods are still there.
pub fn plan(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    rollout: &Rollout,
) -> Result<Plan, String> {
    let mut plan = Plan::default();
    let decided = dependencies::decide(&service.spec, world.installed);
    let replicas = replicas::plan_replicas(service, world, rollout, &mut plan)?;
    objects::plan_objects(
        service,
        world,
        (options, rollout),
        (decided, replicas),
        &mut plan,
    )?;
    Ok(plan)
}

/// One reconcile of one service: what to write, the status to report, the
/// Events about the service itself (upgrade steps), and when to look again.
#[derive(Clone, Debug, PartialEq)]
pub struct Pass {
    pub apply: Vec<Apply>,
    pub delete: Vec<Delete>,
    pub status: InferenceServiceStatus,
    pub events: Vec<rollout::Event>,
    /// Look again after this long even if nothing changes (the next traffic
    /// step of an upgrade); None when only a change needs a look.
    pub requeue: Option<std::time::Duration>,
}

/// Decides one reconcile of `service` in `world` at `now`: the children to
/// apply (those that differ from the plan), the children to delete (what the
/// plan neither wants nor keeps; nothing while the plan cannot be made), the
/// next status, and the upgrade's step (see [`rollout`]).
pub fn reconcile(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> Pass {
    let (rollout, planned, problems) = plan_or_problems(service, world, options, now);
    let apply = applies(service, world, &planned);
    let delete = if problems.is_empty() {
        deletions(service, world, rollout.as_ref(), &planned)
    } else {
        Vec::new()
    };
    let (status, events, requeue) =
        report::report(service, world, rollout, (&planned, &problems), now);
    Pass {
        apply,
        delete,
        status,
        events,
        requeue,
    }
}

/// The rollout and the plan of this reconcile, and every problem that
/// stops it: a spec the webhook would deny (stored before the webhook was
/// installed) is reported, not applied, and its upgrade does not move; a
/// plan that cannot be made, the plan's and the rollout's own problems, and
/// a kind the plan wants whose API is not installed.
fn plan_or_problems(
    service: &InferenceService,
    world: &World<'_>,
    options: &Options,
    now: &Time,
) -> (Option<Rollout>, Plan, Vec<String>) {
    let mut problems = Vec::new();
    let findings = validate(service);
    let rollout = findings.is_allowed().then(|| {
        rollout::plan(
            service,
            world.children,
            world.pods,
            world.unavailable,
            now.0,
        )
    });
    let planned = match &rollout {
        Some(rollout) => match plan(service, world, options, rollout) {
            Ok(plan) => plan,
            Err(reason) => {
                problems.push(format!("cannot plan: {reason}"));
                Plan::default()
            }
        },
        None => {
            problems.push(format!("invalid spec: {}", findings.denial_message()));
            Plan::default()
        }
    };
    problems.extend(planned.problems.iter().cloned());
    if let Some(rollout) = &rollout {
        problems.extend(rollout.problems.iter().cloned());
    }
    for missing in world.unavailable {
        if planned
            .desired
            .iter()
            .any(|d| kind_name(&d.object) == missing.as_str())
        {
            problems.push(format!("the {missing} API is not installed in the cluster"));
        }
    }
    (rollout, planned, problems)
}
#[cfg(test)]
mod rollouts;

#[cfg(test)]
mod tests {
    use super::world::identity;
    use super::*;
    use crate::plan::inference_service::{drain, gang, pod_groups, status};
    use crate::plan::shared::child_kinds::ChildKind;
    use crate::plan::victims;
    use serde_json::json;

    fn service(replicas: i32) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "default", "uid": "u"},
            "spec": {"roles": [
                {"name": "inference", "componentType": "worker", "replicas": replicas,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
                ]}
        }))
        .unwrap()
    }

    fn world<'a>(children: &'a [Value], pods: &'a [Value]) -> World<'a> {
        static NONE: std::sync::LazyLock<BTreeSet<String>> =
            std::sync::LazyLock::new(BTreeSet::new);
        World {
            children,
            pods,
            unavailable: &NONE,
            installed: &crate::plan::shared::installed::ASSUMED,
            scale_views: &[],
        }
    }

    fn epoch() -> Time {
        Time(jiff::Timestamp::UNIX_EPOCH)
    }

    fn names(plan: &[Desired]) -> Vec<&str> {
        plan.iter()
            .filter(|d| d.object["kind"] == "LeaderWorkerSet")
            .map(|d| d.object["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn kubernetes_gang_puts_each_replica_in_its_group_and_deletes_a_group_no_pod_names() {
        let service: InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "pd", "namespace": "default", "uid": "u"},
            "spec": {"schedulingStrategy": {"gangScheduler": "Kubernetes"}, "roles": [
                {"name": "prefill", "componentType": "prefiller", "replicas": 1,
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
                {"name": "decode", "componentType": "decoder", "replicas": 2,
                 "multinode": {"nodeCount": 2},
                 "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}},
            ]}
        }))
        .unwrap();
        let plan = desired(&service, &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        // The groups go first: the core (prefill-0 and decode-0, 1 + 2
        // pods) and decode-1's own.
        let groups: Vec<(&str, &Value)> = plan
            .iter()
            .take_while(|d| pod_groups::is_pod_group(&d.object))
            .map(|d| {
                (
                    d.object["metadata"]["name"].as_str().unwrap(),
                    &d.object["spec"]["schedulingPolicy"]["gang"]["minCount"],
                )
            })
            .collect();
        assert_eq!(groups.len(), 2, "{groups:?}");
        let core = groups
            .iter()
            .find(|(n, _)| n.starts_with("pd-core-"))
            .unwrap();
        assert_eq!(core.1, 3);
        let own = groups
            .iter()
            .find(|(n, _)| n.starts_with("pd-decode-1-"))
            .unwrap();
        assert_eq!(own.1, 2);
        let template_group = |lws: &str, template: &str| {
            let lws = plan
                .iter()
                .find(|d| d.object["metadata"]["name"] == lws)
                .unwrap();
            pod_groups::named_by(&lws.object["spec"]["leaderWorkerTemplate"][template])
                .unwrap()
                .to_owned()
        };
        assert_eq!(template_group("pd-prefill-0", "workerTemplate"), core.0);
        assert_eq!(template_group("pd-decode-0", "leaderTemplate"), core.0);
        assert_eq!(template_group("pd-decode-0", "workerTemplate"), core.0);
        assert_eq!(template_group("pd-decode-1", "workerTemplate"), own.0);
        // No Volcano PodGroup, annotation or scheduler.
        assert!(
            !plan
                .iter()
                .any(|d| d.object["apiVersion"] == gang::POD_GROUP_API_VERSION)
        );
        let lws = &plan
            .iter()
            .find(|d| d.object["kind"] == "LeaderWorkerSet")
            .unwrap()
            .object;
        let pod = &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"];
        assert!(pod["spec"].get("schedulerName").is_none(), "{pod}");
        assert!(pod["metadata"].get("annotations").is_none(), "{pod}");

        // A group of a replica gone: deleted once no pod names it, kept
        // while one does.
        let mut children: Vec<Value> = plan.into_iter().map(|d| d.object).collect();
        let first = children[0].clone();
        let stale = |name: &str| {
            let mut group = first.clone();
            group["metadata"]["name"] = json!(name);
            group
        };
        children.push(stale("pd-decode-2-0000aaaa"));
        children.push(stale("pd-decode-3-0000bbbb"));
        let pods = [json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "pd-decode-3-0", "namespace": "default"},
            "spec": {"schedulingGroup": {"podGroupName": "pd-decode-3-0000bbbb"}}})];
        let pass = reconcile(
            &service,
            &world(&children, &pods),
            &Options::default(),
            &epoch(),
        );
        let deleted: Vec<&str> = pass
            .delete
            .iter()
            .map(|d| d.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(deleted, ["pd-decode-2-0000aaaa"]);
        assert!(
            pass.delete[0]
                .note
                .contains("no pod of the service names this PodGroup")
        );
    }

    #[test]
    fn one_leader_worker_set_per_replica_of_each_serving_role() {
        let plan = desired(&service(3), &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        assert_eq!(
            names(&plan),
            ["qwen-inference-0", "qwen-inference-1", "qwen-inference-2"]
        );
        assert!(
            plan[1]
                .why
                .starts_with("replica 1 of role inference (2 of 3 replicas, 1 node(s) each")
        );
    }

    #[test]
    fn existing_replicas_come_from_the_leader_worker_sets() {
        let plan = desired(&service(2), &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        let objects: Vec<Value> = plan.into_iter().map(|d| d.object).collect();
        let scaled = desired(
            &service(1),
            &world(&objects, &[]),
            &Options::default(),
            &epoch(),
        )
        .unwrap();
        assert_eq!(names(&scaled), ["qwen-inference-0"]);
        assert_eq!(
            why_delete(&service(1), &objects[1], &world(&objects, &[])),
            "role inference is scaled to 1 replica(s); replica 1 is not kept (Ordered: the highest indices go first)"
        );
    }

    fn pod(index: u32, cost: &str, ready: bool) -> Value {
        json!({"metadata": {"name": format!("qwen-inference-{index}-0"),
                "labels": {children::ROLE_NAME: "inference", children::REPLICA_INDEX: index.to_string()},
                "annotations": {victims::DELETION_COST: cost}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    #[test]
    fn binpack_removes_the_cheapest_replicas_and_says_what_they_beat() {
        let mut value = serde_json::to_value(service(4)).unwrap();
        value["spec"]["roles"][0]["scaleDown"] = json!({"policy": "Binpack"});
        let four: InferenceService = serde_json::from_value(value.clone()).unwrap();
        let lws: Vec<Value> = desired(&four, &world(&[], &[]), &Options::default(), &epoch())
            .unwrap()
            .into_iter()
            .map(|d| d.object)
            .collect();
        let pods = [
            pod(0, "100", true),
            pod(1, "50", true),
            pod(2, "0", true),
            pod(3, "75", true),
        ];
        value["spec"]["roles"][0]["replicas"] = json!(2);
        let two: InferenceService = serde_json::from_value(value).unwrap();
        let kept = desired(&two, &world(&lws, &pods), &Options::default(), &epoch()).unwrap();
        assert_eq!(
            names(&kept),
            ["qwen-inference-0", "qwen-inference-3"],
            "costs 100/50/0/75 keep 0 and 3"
        );
        assert_eq!(
            why_delete(&two, &lws[2], &world(&lws, &pods)),
            "role inference is scaled to 2 replica(s); Binpack removes replica 2 (cost 0) before the replicas it keeps: 0 (cost 100), 3 (cost 75)"
        );
    }

    /// A service's children and pods, changed by each pass as the API
    /// server and LeaderWorkerSet would: applied LeaderWorkerSets get one
    /// ready pod each (cost from `costs`), applied Pods get the labels and
    /// annotations Tandem owns replaced, deleted LeaderWorkerSets lose their
    /// pods.
    struct Cluster {
        children: Vec<Value>,
        pods: Vec<Value>,
        costs: BTreeMap<u32, &'static str>,
        /// New pods start not ready (a model loading), else ready.
        loading: bool,
    }

    impl Cluster {
        fn new(costs: &[&'static str]) -> Cluster {
            let costs = costs
                .iter()
                .enumerate()
                .map(|(i, c)| (u32::try_from(i).unwrap(), *c))
                .collect();
            Cluster {
                children: vec![],
                pods: vec![],
                costs,
                loading: false,
            }
        }

        fn pass(&mut self, service: &InferenceService, at: i64) -> Pass {
            let now = Time(jiff::Timestamp::from_second(at).unwrap());
            let pass = reconcile(
                service,
                &world(&self.children, &self.pods),
                &Options::default(),
                &now,
            );
            for step in &pass.apply {
                let object = &step.object;
                if object["kind"] == "Pod" {
                    let pod = self
                        .pods
                        .iter_mut()
                        .find(|p| p["metadata"]["name"] == object["metadata"]["name"])
                        .expect("Tandem applies only pods that exist");
                    pod["metadata"]["labels"][drain::TRAFFIC] =
                        object["metadata"]["labels"][drain::TRAFFIC].clone();
                    let annotations = pod["metadata"]["annotations"].as_object_mut().unwrap();
                    annotations.remove(drain::DRAIN_STARTED);
                    annotations.remove(drain::DRAIN_DEADLINE);
                    for (k, v) in object["metadata"]["annotations"].as_object().unwrap() {
                        annotations.insert(k.clone(), v.clone());
                    }
                    continue;
                }
                self.children.retain(|c| identity(c) != identity(object));
                self.children.push(object.clone());
                if object["kind"] == "LeaderWorkerSet" {
                    let index: u32 = object["metadata"]["labels"][children::REPLICA_INDEX]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    // A new or changed LeaderWorkerSet has a new pod.
                    let index_label = index.to_string();
                    self.pods.retain(|p| {
                        p["metadata"]["labels"][children::REPLICA_INDEX] != index_label.as_str()
                    });
                    let cost = self.costs.get(&index).copied().unwrap_or("0");
                    let mut new = pod(index, cost, !self.loading);
                    new["metadata"]["labels"] = object["spec"]["leaderWorkerTemplate"]
                        ["workerTemplate"]["metadata"]["labels"]
                        .clone();
                    self.pods.push(new);
                }
            }
            for step in &pass.delete {
                let index = step.object["metadata"]["labels"][children::REPLICA_INDEX].clone();
                self.children
                    .retain(|c| identity(c) != identity(&step.object));
                self.pods
                    .retain(|p| p["metadata"]["labels"][children::REPLICA_INDEX] != index);
            }
            pass
        }

        fn lws(&self) -> Vec<&str> {
            self.children
                .iter()
                .filter(|c| c["kind"] == "LeaderWorkerSet")
                .map(|c| c["metadata"]["name"].as_str().unwrap())
                .collect()
        }
    }

    fn scaled(replicas: i32, policy: &str, drain_seconds: Option<i64>) -> InferenceService {
        let mut value = serde_json::to_value(service(replicas)).unwrap();
        value["spec"]["roles"][0]["scaleDown"] = json!({"policy": policy});
        if let Some(seconds) = drain_seconds {
            value["spec"]["roles"][0]["drain"] = json!({"seconds": seconds});
        }
        serde_json::from_value(value).unwrap()
    }

    fn applied_pods(pass: &Pass) -> Vec<(String, String)> {
        pass.apply
            .iter()
            .filter(|a| a.object["kind"] == "Pod")
            .map(|a| {
                (
                    a.object["metadata"]["name"].as_str().unwrap().to_owned(),
                    a.object["metadata"]["labels"][drain::TRAFFIC]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn scale_down_drains_the_chosen_replicas_before_deleting_them() {
        // Ordered removes the highest, 2 and 3; Binpack the cheapest, 0 and 2.
        for (policy, costs, victims) in [
            ("Ordered", ["0", "0", "0", "0"], [2, 3]),
            ("Binpack", ["0", "100", "0", "75"], [0, 2]),
        ] {
            let mut cluster = Cluster::new(&costs);
            cluster.pass(&scaled(4, policy, None), 0);
            assert_eq!(cluster.lws().len(), 4);
            let survivors_before: Vec<Value> = cluster
                .children
                .iter()
                .filter(|c| {
                    !victims
                        .iter()
                        .any(|v| c["metadata"]["name"] == format!("qwen-inference-{v}").as_str())
                })
                .cloned()
                .collect();

            let two = scaled(2, policy, None);
            let first = cluster.pass(&two, 100);
            assert!(
                first.delete.is_empty(),
                "{policy}: nothing is deleted at first"
            );
            assert_eq!(
                applied_pods(&first),
                victims
                    .iter()
                    .map(|v| (format!("qwen-inference-{v}-0"), drain::DRAINING.to_owned()))
                    .collect::<Vec<_>>(),
                "{policy}: the chosen replicas leave traffic"
            );
            assert_eq!(first.apply.len(), 2, "{policy}: only the pods are written");
            assert_eq!(first.requeue, Some(std::time::Duration::from_secs(30)));
            assert_eq!(first.status.components["inference"].draining_replicas, 2);
            assert!(
                first.apply[0]
                    .note
                    .contains("is deleted at 1970-01-01T00:02:10Z")
            );

            let within = cluster.pass(&two, 120);
            assert!(
                within.apply.is_empty() && within.delete.is_empty(),
                "{policy}: {within:?}"
            );
            assert_eq!(within.requeue, Some(std::time::Duration::from_secs(10)));

            let after = cluster.pass(&two, 130);
            assert!(after.apply.is_empty(), "{policy}");
            let mut deleted: Vec<&str> = after
                .delete
                .iter()
                .map(|d| d.object["metadata"]["name"].as_str().unwrap())
                .collect();
            deleted.sort_unstable();
            let mut expected: Vec<String> = victims
                .iter()
                .map(|v| format!("qwen-inference-{v}"))
                .collect();
            expected.sort_unstable();
            assert_eq!(deleted, expected, "{policy}: the drained replicas go");
            assert!(
                after.delete[0]
                    .note
                    .contains("out of traffic for its drain of 30s"),
                "{}",
                after.delete[0].note
            );
            assert_eq!(
                cluster.children, survivors_before,
                "{policy}: survivors unchanged"
            );
            assert_eq!(after.status.components["inference"].draining_replicas, 0);
        }
    }

    #[test]
    fn scaling_back_up_during_a_drain_revives_the_draining_replicas() {
        let mut cluster = Cluster::new(&[]);
        cluster.pass(&scaled(4, "Ordered", None), 0);
        let drained = cluster.pass(&scaled(2, "Ordered", None), 100);
        assert_eq!(applied_pods(&drained).len(), 2);
        let back = cluster.pass(&scaled(4, "Ordered", None), 110);
        assert_eq!(
            applied_pods(&back),
            [
                ("qwen-inference-2-0".to_owned(), drain::SERVING.to_owned()),
                ("qwen-inference-3-0".to_owned(), drain::SERVING.to_owned())
            ]
        );
        assert_eq!(
            back.apply.len(),
            2,
            "no LeaderWorkerSet is created or changed"
        );
        assert!(back.delete.is_empty());
        let revived: Vec<&str> = back
            .events
            .iter()
            .filter(|e| e.reason == "Revived")
            .map(|e| e.note.as_str())
            .collect();
        assert_eq!(revived.len(), 2);
        assert!(
            revived[0]
                .starts_with("replica 2 of role inference was draining and is back in traffic")
        );
        assert_eq!(cluster.lws().len(), 4);
        assert!(cluster.pods.iter().all(|p| !drain::is_draining(p)));
        assert!(
            cluster
                .pods
                .iter()
                .all(|p| p["metadata"]["annotations"][drain::DRAIN_STARTED].is_null())
        );
        let quiet = cluster.pass(&scaled(4, "Ordered", None), 200);
        assert!(quiet.apply.is_empty() && quiet.delete.is_empty() && quiet.requeue.is_none());
    }

    #[test]
    fn a_rolling_update_drains_each_replaced_replica_before_its_leader_worker_set_changes() {
        let mut cluster = Cluster::new(&[]);
        let old = scaled(2, "Ordered", None);
        cluster.pass(&old, 0);
        let mut value = serde_json::to_value(&old).unwrap();
        value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("v2");
        let new: InferenceService = serde_json::from_value(value).unwrap();
        let revision_of = |cluster: &Cluster, index: u32| {
            cluster
                .children
                .iter()
                .find(|c| c["metadata"]["name"] == format!("qwen-inference-{index}").as_str())
                .map(|c| c["metadata"]["labels"][children::REVISION].clone())
                .unwrap()
        };
        let old_revision = revision_of(&cluster, 0);
        // When each replica's pods left traffic, and when its LeaderWorkerSet
        // moved to the new revision.
        let mut drained: BTreeMap<u32, i64> = BTreeMap::new();
        let mut replaced: BTreeMap<u32, i64> = BTreeMap::new();
        let mut t = 100;
        while replaced.len() < 2 {
            assert!(t < 1000, "the update finishes");
            let pass = cluster.pass(&new, t);
            for (name, traffic) in applied_pods(&pass) {
                if traffic == drain::DRAINING {
                    let index: u32 = name
                        .trim_start_matches("qwen-inference-")
                        .trim_end_matches("-0")
                        .parse()
                        .unwrap();
                    assert_eq!(
                        revision_of(&cluster, index),
                        old_revision,
                        "a replica leaving traffic keeps its LeaderWorkerSet"
                    );
                    drained.entry(index).or_insert(t);
                }
            }
            for index in [0, 1] {
                if revision_of(&cluster, index) != old_revision {
                    replaced.entry(index).or_insert(t);
                }
            }
            t += 10;
        }
        for (index, at) in &replaced {
            let started = drained[index];
            assert!(
                at - started >= 30,
                "replica {index} was out of traffic from {started} and changed at {at}"
            );
        }
        let times: BTreeSet<i64> = replaced.values().copied().collect();
        assert_eq!(times.len(), 2, "one replica at a time: {replaced:?}");
    }

    #[test]
    fn a_crash_loop_is_one_event_per_episode() {
        let mut cluster = Cluster::new(&[]);
        let mut service = scaled(2, "Ordered", None);
        cluster.pass(&service, 0);
        let crash = |cluster: &mut Cluster, restarts: i64, ready: bool| {
            let pod = cluster
                .pods
                .iter_mut()
                .find(|p| p["metadata"]["name"] == "qwen-inference-1-0")
                .unwrap();
            pod["status"]["conditions"][0]["status"] = json!(if ready { "True" } else { "False" });
            pod["status"]["containerStatuses"] = json!([{"name": "vllm", "restartCount": restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
        };
        let mut episodes = Vec::new();
        for (at, restarts, ready) in [
            (10, 3, false),
            (20, 4, false),
            (30, 7, false),
            (40, 7, true),
            (50, 8, false),
        ] {
            crash(&mut cluster, restarts, ready);
            let pass = cluster.pass(&service, at);
            episodes.extend(
                pass.events
                    .iter()
                    .filter(|e| e.reason == "Degraded")
                    .map(|e| (at, e.note.clone())),
            );
            let degraded = pass
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == status::DEGRADED)
                .unwrap();
            assert_eq!(
                degraded.status,
                if ready { "False" } else { "True" },
                "at {at}"
            );
            service.status = Some(pass.status);
        }
        let note =
            "role inference: replica 1: pod qwen-inference-1-0 container vllm CrashLoopBackOff";
        assert_eq!(episodes, [(10, note.to_owned()), (50, note.to_owned())]);
    }

    /// The Events of a role's episodes among `pass`'s: (reason, warning, note).
    fn episodes(pass: &Pass) -> Vec<(&'static str, bool, String)> {
        pass.events
            .iter()
            .filter(|e| {
                ["Degraded", "Recovered", status::UNSCHEDULABLE, "Scheduled"].contains(&e.reason)
            })
            .map(|e| (e.reason, e.warning, e.note.clone()))
            .collect()
    }

    /// One pass at `at` whose status becomes the service's, as the
    /// reconciler writes it; its episode Events.
    fn step(
        cluster: &mut Cluster,
        service: &mut InferenceService,
        at: i64,
    ) -> Vec<(&'static str, bool, String)> {
        let pass = cluster.pass(service, at);
        let events = episodes(&pass);
        service.status = Some(pass.status);
        events
    }

    fn pod_named<'a>(cluster: &'a mut Cluster, name: &str) -> &'a mut Value {
        cluster
            .pods
            .iter_mut()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap()
    }

    #[test]
    fn a_replica_lost_with_its_node_is_one_degraded_event_then_one_recovered() {
        let mut cluster = Cluster::new(&[]);
        let mut service = scaled(2, "Ordered", None);
        assert_eq!(step(&mut cluster, &mut service, 0), []);
        assert_eq!(
            step(&mut cluster, &mut service, 10),
            [],
            "whole and settled"
        );

        // The node goes, and replica 1's pod with it; the spec is unchanged.
        cluster
            .pods
            .retain(|p| p["metadata"]["name"] != "qwen-inference-1-0");
        let note = "role inference: 1/2 replicas ready, 1 lost since every replica was ready (1 of 2 pods ready)";
        assert_eq!(
            step(&mut cluster, &mut service, 20),
            [("Degraded", true, note.to_owned())]
        );
        let degraded = |service: &InferenceService| {
            let status = service.status.as_ref().unwrap();
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == status::DEGRADED)
                .unwrap();
            (c.status.clone(), c.reason.clone())
        };
        assert_eq!(
            degraded(&service),
            ("True".into(), status::REPLICAS_UNAVAILABLE.into())
        );
        let before = service.status.clone();
        assert_eq!(
            step(&mut cluster, &mut service, 30),
            [],
            "the same world: no Event"
        );
        assert_eq!(service.status, before, "and the same status");

        // LeaderWorkerSet makes the pod again on another node; it loads.
        let mut back = pod(1, "0", false);
        back["metadata"]["labels"] = cluster.pods[0]["metadata"]["labels"].clone();
        back["metadata"]["labels"][children::REPLICA_INDEX] = json!("1");
        back["metadata"]["name"] = json!("qwen-inference-1-0");
        cluster.pods.push(back);
        assert_eq!(step(&mut cluster, &mut service, 40), [], "still short");
        pod_named(&mut cluster, "qwen-inference-1-0")["status"]["conditions"][0]["status"] =
            json!("True");
        assert_eq!(
            step(&mut cluster, &mut service, 50),
            [(
                "Recovered",
                false,
                "role inference: no replica is failing or lost any more (2/2 replicas ready)"
                    .to_owned()
            )]
        );
        assert_eq!(
            degraded(&service),
            ("False".into(), "ReplicasHealthy".into())
        );
        assert_eq!(step(&mut cluster, &mut service, 60), []);
    }

    #[test]
    fn a_replica_waiting_for_the_scheduler_is_one_warning_then_one_scheduled() {
        let mut cluster = Cluster::new(&[]);
        let mut service = scaled(2, "Ordered", None);
        step(&mut cluster, &mut service, 0);
        let mut three = scaled(3, "Ordered", None);
        three.status = service.status.clone();
        assert_eq!(step(&mut cluster, &mut three, 10), []);
        // The new replica's pod: no node has a GPU free.
        let message = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu.";
        {
            let pod = pod_named(&mut cluster, "qwen-inference-2-0");
            pod["status"] = json!({"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]});
        }
        let note = format!(
            "role inference: 1 replica(s) waiting for the scheduler: replica 2: pod qwen-inference-2-0 unschedulable: {message}"
        );
        assert_eq!(
            step(&mut cluster, &mut three, 20),
            [(status::UNSCHEDULABLE, true, note)],
            "a scale-up waiting is not degraded"
        );
        let ready = |service: &InferenceService| {
            let status = service.status.as_ref().unwrap();
            let c = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap();
            (c.reason.clone(), c.message.clone())
        };
        assert_eq!(ready(&three).0, status::UNSCHEDULABLE);
        assert!(ready(&three).1.contains(message), "{:?}", ready(&three));
        assert_eq!(
            step(&mut cluster, &mut three, 30),
            [],
            "one Event per episode"
        );
        {
            let pod = pod_named(&mut cluster, "qwen-inference-2-0");
            pod["spec"]["nodeName"] = json!("gpu-9");
            pod["status"] =
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        }
        assert_eq!(
            step(&mut cluster, &mut three, 40),
            [(
                "Scheduled",
                false,
                "role inference: no replica waits for the scheduler any more".to_owned()
            )]
        );
        assert_eq!(ready(&three).0, "AllComponentsRunning");
    }

    #[test]
    fn planned_scale_up_rollout_and_drain_are_not_degraded() {
        let mut cluster = Cluster::new(&[]);
        cluster.loading = true;
        let mut service = scaled(2, "Ordered", Some(30));
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut t = 0;
        // Passes until nothing is left to do; a new pod is not ready for one
        // pass, then ready.
        let mut settle = |cluster: &mut Cluster, service: &mut InferenceService, t: &mut i64| {
            for _ in 0..40 {
                for pod in &mut cluster.pods {
                    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
                    let revision = pod["metadata"]["labels"][children::REVISION].clone();
                    if !seen.insert(format!("{name}@{revision}")) {
                        pod["status"]["conditions"][0]["status"] = json!("True");
                    }
                }
                let pass = cluster.pass(service, *t);
                assert_eq!(episodes(&pass), [], "at {t}");
                for (role, c) in &pass.status.components {
                    assert_eq!(c.lost_replicas, 0, "role {role} at {t}");
                }
                let quiet =
                    pass.apply.is_empty() && pass.delete.is_empty() && pass.requeue.is_none();
                let whole = pass
                    .status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                service.status = Some(pass.status);
                *t += 10;
                if quiet && whole {
                    return;
                }
            }
            panic!("settles");
        };
        settle(&mut cluster, &mut service, &mut t);
        // Scale-up.
        let mut next = scaled(3, "Ordered", Some(30));
        next.status = service.status.take();
        settle(&mut cluster, &mut next, &mut t);
        // A RollingUpdate, one replica at a time, replaced at once (no
        // drain): the replaced replica's new pod loads in its place.
        let mut value = serde_json::to_value(&next).unwrap();
        value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("v2");
        value["spec"]["roles"][0]["drain"] = json!({"seconds": 0});
        let mut rolled: InferenceService = serde_json::from_value(value).unwrap();
        settle(&mut cluster, &mut rolled, &mut t);
        assert!(
            cluster
                .pods
                .iter()
                .all(|p| p["metadata"]["labels"][children::REVISION]
                    == cluster.pods[0]["metadata"]["labels"][children::REVISION]),
            "rolled out"
        );
        // A scale-down with a drain.
        let mut value = serde_json::to_value(&rolled).unwrap();
        value["spec"]["roles"][0]["replicas"] = json!(2);
        value["spec"]["roles"][0]["drain"] = json!({"seconds": 30});
        let mut down: InferenceService = serde_json::from_value(value).unwrap();
        settle(&mut cluster, &mut down, &mut t);
        assert_eq!(cluster.lws().len(), 2);
    }

    #[test]
    fn a_zero_drain_deletes_at_once() {
        let mut cluster = Cluster::new(&[]);
        cluster.pass(&scaled(3, "Ordered", Some(0)), 0);
        let pass = cluster.pass(&scaled(1, "Ordered", Some(0)), 10);
        assert!(pass.apply.is_empty());
        assert_eq!(pass.delete.len(), 2);
    }

    #[test]
    fn up_to_date_ignores_server_fields_but_not_drift_or_removed_fields() {
        let desired = stamp(
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        let mut observed = desired.clone();
        observed["metadata"]["uid"] = json!("u");
        observed["spec"]["ports"][0]["protocol"] = json!("TCP");
        observed["status"] = json!({"ready": 1});
        assert!(
            up_to_date(&desired, &observed),
            "server-added fields do not count"
        );
        let mut drifted = observed.clone();
        drifted["spec"]["replicas"] = json!(3);
        assert!(
            !up_to_date(&desired, &drifted),
            "a field changed by hand is set back"
        );
        // A field Tandem stops wanting changes the hash, so it is applied (and
        // server-side apply removes the field Tandem no longer owns).
        let smaller = stamp(
            json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        assert!(!up_to_date(&smaller, &observed));
    }

    #[test]
    fn up_to_date_compares_what_the_api_server_stored_canonically() {
        let desired = stamp(
            json!({"metadata": {"name": "epp"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1024Mi"}}],
            "containers": [{"name": "epp", "args": [], "resources": {
                "requests": {"cpu": 0.5, "memory": "1024Mi", "nvidia.com/gpu": 1},
                "limits": {"cpu": "1.5", "memory": "2Gi"}}}]}}}}),
        );
        // As the API server stores a Deployment: quantities canonical, the
        // empty list dropped (Go's omitempty), defaults added.
        let mut stored = stamp(
            json!({"metadata": {"name": "epp"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
            "containers": [{"name": "epp", "imagePullPolicy": "IfNotPresent", "resources": {
                "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                "limits": {"cpu": "1500m", "memory": "2Gi"}}}]}}}}),
        );
        stored["metadata"]["annotations"] = desired["metadata"]["annotations"].clone();
        assert!(
            up_to_date(&desired, &stored),
            "canonical forms of the same quantities are no hand edit"
        );
        let mut edited = stored.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            json!("1");
        assert!(
            !up_to_date(&desired, &edited),
            "a quantity changed by hand is drift"
        );
        let mut renamed = stored.clone();
        renamed["spec"]["template"]["spec"]["containers"][0]["name"] = json!("0.5");
        assert!(
            !contains(&json!({"name": "500m"}), &json!({"name": "0.5"})),
            "outside resource maps text is compared as text"
        );
        assert!(!up_to_date(&desired, &renamed));
        assert!(
            !contains(&json!({}), &json!({"args": ["--x"]})),
            "a non-empty list that is missing is missing"
        );
    }

    #[test]
    fn a_pass_creates_reverts_and_deletes_with_reasons() {
        let now = Time("2026-11-21T10:00:00Z".parse().unwrap());
        let none = BTreeSet::new();
        let service = service(2);
        let first = reconcile(
            &service,
            &World {
                children: &[],
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert_eq!(
            first.apply.iter().map(|a| a.change).collect::<Vec<_>>(),
            [Change::Create, Change::Create, Change::Create],
            "two replicas and the role's PodDisruptionBudget"
        );
        assert!(first.delete.is_empty());
        let mut world: Vec<Value> = first.apply.iter().map(|a| a.object.clone()).collect();
        let settled = reconcile(
            &service,
            &World {
                children: &world,
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert!(settled.apply.is_empty() && settled.delete.is_empty());

        world[0]["spec"]["replicas"] = json!(4);
        let reverted = reconcile(
            &service,
            &World {
                children: &world,
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert_eq!(reverted.apply[0].change, Change::Revert);
        assert!(reverted.apply[0].note.starts_with(
            "LeaderWorkerSet qwen-inference-0 was changed outside Tandem and is set back"
        ));

        let shrunk = reconcile(
            &super::tests::service(1),
            &World {
                children: &world,
                pods: &[],
                unavailable: &none,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        assert_eq!(shrunk.delete.len(), 1);
        assert_eq!(
            shrunk.delete[0].note,
            "LeaderWorkerSet qwen-inference-1 deleted: role inference is scaled to 1 replica(s); replica 1 is not kept (Ordered: the highest indices go first)"
        );

        let missing = BTreeSet::from(["LeaderWorkerSet".to_owned()]);
        let blocked = reconcile(
            &service,
            &World {
                children: &[],
                pods: &[],
                unavailable: &missing,
                installed: &crate::plan::shared::installed::ASSUMED,
                scale_views: &[],
            },
            &Options::default(),
            &now,
        );
        // Only the PodDisruptionBudget, which needs no LeaderWorkerSet API.
        assert!(
            blocked
                .apply
                .iter()
                .all(|a| a.object["kind"] == "PodDisruptionBudget")
        );
        let failed = blocked
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .unwrap();
        assert_eq!(
            failed.message,
            "the LeaderWorkerSet API is not installed in the cluster"
        );
    }

    #[test]
    fn a_router_adds_its_objects_and_their_removal_is_explained() {
        let mut value = serde_json::to_value(service(1)).unwrap();
        value["spec"]["roles"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "router", "componentType": "router",
            "httproute": {"parentRefs": [{"name": "gw"}]}}));
        let routed: InferenceService = serde_json::from_value(value).unwrap();
        let plan = desired(&routed, &world(&[], &[]), &Options::default(), &epoch()).unwrap();
        let kinds: Vec<&str> = plan
            .iter()
            .map(|d| d.object["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "LeaderWorkerSet",
                "ServiceAccount",
                "RoleBinding",
                "ConfigMap",
                "Deployment",
                "Service",
                "InferencePool",
                "HTTPRoute",
                "PodDisruptionBudget"
            ]
        );
        for d in &plan {
            assert!(
                ChildKind::of(&d.object).is_some(),
                "{} is a known child kind",
                d.object["kind"]
            );
        }
        let pool = plan
            .iter()
            .find(|d| d.object["kind"] == "InferencePool")
            .unwrap();
        assert_eq!(pool.why, "the router's pool of the serving roles' leaders");
        assert_eq!(
            why_delete(&service(1), &pool.object, &world(&[], &[])),
            "the service has no router role any more"
        );
    }
}
