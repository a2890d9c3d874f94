//! The third step: the objects beside the replicas (the router's, an
//! upgrade's traffic objects, the disruption budgets, the PodGroups), and
//! what of the plan the cluster cannot take.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::replicas::Replicas;
use super::world::{Index, key};
use super::{Desired, Options, Plan};
use crate::api::inference_service::{ComponentType, GangPolicy, InferenceService};
use crate::plan::inference_service::rollout::{self, Rollout};
use crate::plan::inference_service::{
    dependencies, disruption, gang, placement, pod_groups, revision, router, traffic,
};
use crate::plan::shared::children;
use crate::plan::shared::installed::Installed;

/// The objects beside the replicas: the router's (each revision side by
/// side has its own pool and endpoint picker), an upgrade's traffic
/// objects, the disruption budgets and the PodGroups, which go first; then
/// what the cluster cannot take is left out of the plan, and said.
pub(super) fn plan_objects(
    service: &InferenceService,
    world: &Index<'_>,
    (options, rollout): (&Options, &Rollout),
    (decided, replicas): (dependencies::Dependencies, Replicas),
    plan: &mut Plan,
) -> Result<(), String> {
    let Replicas {
        gang_members,
        native_groups,
        replicas_now,
    } = replicas;
    // Revisions side by side each have their own pool and endpoint picker;
    // otherwise one pool selects the leaders of every revision.
    let router_objects = if rollout.traffic.is_some() {
        let pools: Vec<router::RevisionPool<'_>> = rollout
            .runs
            .iter()
            .map(|run| router::RevisionPool {
                revision: &run.revision,
                naming: &run.naming,
            })
            .collect();
        router::revision_router_objects(service, &options.router, &pools)?
    } else {
        router::router_objects(service, &options.router)?
    };
    for object in router_objects {
        let why = router_why(service, &object);
        plan.desired.push(Desired { object, why });
    }
    if let Some(traffic) = &rollout.traffic {
        traffic_objects(service, world, rollout, traffic, plan)?;
    }
    for (object, why) in disruption::budgets(service, &replicas_now) {
        plan.desired.push(Desired { object, why });
    }
    native_pod_groups(service, world, native_groups, plan);
    volcano_pod_group(service, world, (decided.gang_policy, &gang_members), plan)?;
    // What the cluster lacks is not written (the API server would refuse
    // it, or prune the fields it does not know).
    let missing = world.installed.missing_kinds();
    plan.desired
        .retain(|d| !Installed::lacks_kind_of(&missing, &d.object));
    let mut decided = decided;
    let (lacking, unwritten) =
        dependencies::unwritable(world.installed, plan.desired.iter().map(|d| &d.object));
    decided.lacking.extend(lacking);
    plan.desired
        .retain(|d| !unwritten.contains(&key(&d.object)));
    plan.kept.extend(unwritten);
    plan.dependencies = Some(decided);
    Ok(())
}

/// Volcano's PodGroup, placed (`spec.placement`), goes first: a new
/// replica's entry (a surge replica of a RollingUpdate, a scale-up) is there
/// before its LeaderWorkerSet makes pods that name it. `gang_policy` is the
/// layout `dependencies::decide` chose, `gang_members` each role's replica
/// indices.
pub(super) fn volcano_pod_group(
    service: &InferenceService,
    world: &Index<'_>,
    (gang_policy, gang_members): (Option<GangPolicy>, &BTreeMap<String, BTreeSet<u32>>),
    plan: &mut Plan,
) -> Result<(), String> {
    let volcano = gang::scheduling(&service.spec).backend == Some(gang::Backend::Volcano);
    let pod_group = match gang_policy {
        Some(policy) => gang::pod_group(service, gang_members, policy)?,
        None if !volcano => None,
        None => {
            // A layout the installed Volcano cannot hold: the PodGroup there
            // is left as it is, not deleted under running pods.
            let name = children::service_name(service);
            plan.kept.extend(
                world
                    .children
                    .iter()
                    .filter(|c| c["kind"] == gang::POD_GROUP_KIND && c["metadata"]["name"] == name)
                    .map(key),
            );
            None
        }
    };
    if let Some(mut pod_group) = pod_group {
        placement::place_sub_groups(&service.spec, &mut pod_group);
        let placed = placement::sub_groups_placed(&pod_group)
            .map(|key| format!("; each multi-node replica in one {key} tier (spec.placement)"))
            .unwrap_or_default();
        plan.desired.insert(
            0,
            Desired {
                object: pod_group,
                why: format!(
                    "gang scheduling with Volcano: {}{placed}",
                    gang_reason(service)
                ),
            },
        );
    }
    Ok(())
}

/// Kubernetes' PodGroups go first, like Volcano's: a replica's group is
/// there before its LeaderWorkerSet makes pods that name it. A group that a
/// pod still names stays as it is (a replaced replica's old pods, a replica
/// leaving): it goes only once no pod names it, so no group is deleted
/// under its pods.
pub(super) fn native_pod_groups(
    service: &InferenceService,
    world: &Index<'_>,
    groups: BTreeMap<String, Value>,
    plan: &mut Plan,
) {
    // Ahead of every other desired object, in the groups' order: spliced in
    // at once (one insert at the front per group moved the rest each time).
    let made: Vec<Desired> = groups
        .into_values()
        .map(|object| {
            let placed = pod_groups::topology_key(&object)
                .map(|key| format!("; its pods in one {key} domain (spec.placement)"))
                .unwrap_or_default();
            Desired {
                object,
                why: format!(
                    "gang scheduling with Kubernetes' PodGroups: {}{placed}",
                    gang_reason(service)
                ),
            }
        })
        .collect();
    plan.desired.splice(0..0, made);
    plan.kept.extend(
        world
            .children
            .iter()
            .filter(|c| pod_groups::is_pod_group(c))
            .filter(|c| world.names_pod_group(c["metadata"]["name"].as_str().unwrap_or_default()))
            .map(key),
    );
}

/// Why the plan wants one of the router's objects, for the Event; a
/// revision's pool and endpoint picker name their revision.
pub(super) fn router_why(service: &InferenceService, object: &Value) -> String {
    let of_revision = object["metadata"]["labels"][children::REVISION]
        .as_str()
        .map_or(String::new(), |r| format!(" of revision {r}"));
    match object["kind"].as_str().unwrap_or_default() {
        "InferencePool" if of_revision.is_empty() => {
            "the router's pool of the serving roles' leaders".to_owned()
        }
        "InferencePool" => format!("the router's pool of the leaders{of_revision}"),
        "HTTPRoute" => "the router role's httproute, sent to the pool".to_owned(),
        "ConfigMap" => format!("the endpoint picker's configuration{of_revision}"),
        "Deployment" => format!(
            "the endpoint picker{of_revision}, {} replica(s)",
            service
                .spec
                .roles
                .iter()
                .find(|r| r.is_router())
                .map_or(1, |r| r.replicas())
        ),
        other => format!("the endpoint picker's {other}{of_revision}"),
    }
}

/// The Gateway, the route with one weighted backend per revision, each
/// revision's Service, and each revision's record (written once, then kept).
pub(super) fn traffic_objects(
    service: &InferenceService,
    world: &Index<'_>,
    rollout: &Rollout,
    traffic: &rollout::Traffic,
    plan: &mut Plan,
) -> Result<(), String> {
    let name = children::service_name(service);
    let strategy = service.spec.upgrade_type();
    let port = router::serving_port(&service.spec).map_err(|v| v.to_string())?;
    plan.desired.push(Desired {
        object: traffic::gateway(service, &traffic.gateway_class, port)?,
        why: format!(
            "{strategy:?} moves traffic between revisions through it (gatewayClassName {})",
            traffic.gateway_class
        ),
    });
    let split = traffic
        .backends
        .iter()
        .map(|(revision, weight)| format!("revision {revision} {weight}%"))
        .collect::<Vec<_>>()
        .join(", ");
    let router = service.spec.roles.iter().find(|r| r.is_router());
    let route = match router {
        // The router's pools are the backends, and its httproute is folded
        // into this route: the service has one route.
        Some(router) => {
            let pools = traffic
                .backends
                .iter()
                .map(|(revision, weight)| {
                    let run = rollout
                        .runs
                        .iter()
                        .find(|r| &r.revision == revision)
                        .ok_or_else(|| format!("the route's revision {revision} does not run"))?;
                    Ok((router::revision_pool_name(name, &run.naming), *weight))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Desired {
                object: traffic::pool_route(service, &pools, router.httproute.as_ref()),
                why: format!("traffic split between the revisions' InferencePools: {split}"),
            }
        }
        None => Desired {
            object: traffic::route(service, &traffic.backends, port)?,
            why: format!("traffic split: {split}"),
        },
    };
    plan.desired.push(route);
    let spec_revision = revision::spec_revision(&service.spec);
    for run in &rollout.runs {
        if router.is_none() {
            plan.desired.push(Desired {
                object: traffic::revision_service(service, &run.revision, port),
                why: format!(
                    "the leaders of revision {}, a backend of the route",
                    run.revision
                ),
            });
        }
        let record_name = revision::record_name(name, &run.revision);
        let existing = world.child((
            revision::CONTROLLER_REVISION_API_VERSION,
            revision::CONTROLLER_REVISION_KIND,
            &record_name,
        ));
        match existing {
            Some(record) => {
                plan.kept.insert(key(record));
            }
            None if run.revision == spec_revision => plan.desired.push(Desired {
                object: revision::record(service, revision::next_number(world.children))?,
                why: format!(
                    "the record of revision {}'s pod templates, to rebuild its replicas once the spec has moved on",
                    run.revision
                ),
            }),
            None => {}
        }
    }
    Ok(())
}

/// Why a service is gang-scheduled, in the words of DESIGN.md §1.1.
pub(super) fn gang_reason(service: &InferenceService) -> String {
    let spec = &service.spec;
    let serving: Vec<_> = spec.roles.iter().filter(|r| !r.is_router()).collect();
    let has = |t| serving.iter().any(|r| r.component_type == t);
    let mut reasons = Vec::new();
    if has(ComponentType::Prefiller) && has(ComponentType::Decoder) {
        reasons.push("the service is prefill/decode disaggregated".to_owned());
    }
    for role in serving.iter().filter(|r| r.node_count() > 1) {
        reasons.push(format!(
            "role {} spans {} nodes",
            role.name,
            role.node_count()
        ));
    }
    let asked = spec
        .scheduling_strategy
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref());
    if asked == Some(gang::VOLCANO) {
        reasons.push("schedulerName is volcano".to_owned());
    }
    if let Some(backend) = spec
        .scheduling_strategy
        .as_ref()
        .and_then(|s| s.gang_scheduler)
    {
        reasons.push(format!("gangScheduler is {backend:?}"));
    }
    reasons.join(", ")
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::*;
    use crate::plan::inference_service::{gang, pod_groups};
    use crate::plan::shared::child_kinds::ChildKind;
    use serde_json::json;

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
