//! The mutating webhook's JSON Patch, built from the defaults it fills in:
//! one operation per field that `defaults` sets (or, for a
//! ResourceScalingGroup's deprecated `groupName`, takes away), instead of
//! a copy of the whole object and a diff of it.
//!
//! The operations take the spec as written to the spec as Tandem writes it
//! back only when the spec round-trips as written, which the caller checks
//! ([`super::strict::Seen`]): no unknown field, no explicit `null` where a
//! field is optional, no empty list. Otherwise the caller takes the
//! reference path ([`super::mutate`]), whose patch also drops what Tandem
//! does not keep.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use serde::Serialize;

use crate::api::inference_service::{self, InferenceServiceSpec};
use crate::api::resource_scaling_group::{self, ResourceScalingGroupSpec};
use crate::api::scale_view::{self, ScaleViewSpec};

/// The operations of a patch, and where the next one goes.
#[derive(Default)]
pub struct Ops {
    pub ops: Vec<PatchOperation>,
}

impl Ops {
    /// Sets `path` to `value` (an `add` replaces a member that is there).
    pub fn add(
        &mut self,
        path: PointerBuf,
        value: &impl Serialize,
    ) -> Result<(), serde_json::Error> {
        let value = serde_json::to_value(value)?;
        self.ops
            .push(PatchOperation::Add(AddOperation { path, value }));
        Ok(())
    }

    /// Takes the field at `path` from `before` to `after`.
    fn field<T: Serialize + PartialEq>(
        &mut self,
        path: PointerBuf,
        before: &Option<T>,
        after: &Option<T>,
    ) -> Result<(), serde_json::Error> {
        match (before == after, after) {
            (true, _) => Ok(()),
            (false, Some(value)) => self.add(path, value),
            (false, None) => {
                self.ops
                    .push(PatchOperation::Remove(RemoveOperation { path }));
                Ok(())
            }
        }
    }

    /// Takes an optional object from `before` to `after`: field by field
    /// (`inner`) when it is there on both sides, else as a whole.
    fn nested<T: Serialize + PartialEq>(
        &mut self,
        path: PointerBuf,
        before: &Option<T>,
        after: &Option<T>,
        inner: impl FnOnce(&mut Ops, &PointerBuf, &T, &T) -> Result<(), serde_json::Error>,
    ) -> Result<(), serde_json::Error> {
        match (before, after) {
            (Some(b), Some(a)) => inner(self, &path, b, a),
            _ => self.field(path, before, after),
        }
    }
}

fn at(base: &PointerBuf, token: &str) -> PointerBuf {
    let mut path = base.clone();
    path.push_back(token);
    path
}

fn spec_path() -> PointerBuf {
    PointerBuf::from_tokens(["spec"])
}

/// The defaults of an InferenceService spec as patch operations.
/// `spec` is the spec as written without its pod templates and HTTPRoutes
/// (which `defaults` does not read and the patch never touches).
/// `gang_scheduler` is the backend admission chose for a spec that leaves
/// it out ([`crate::plan::inference_service::gang::default_gang_scheduler`]).
pub fn inference_service(
    spec: InferenceServiceSpec,
    gang_scheduler: Option<inference_service::GangScheduler>,
) -> Result<Ops, serde_json::Error> {
    let before = spec;
    let mut after = before.clone();
    inference_service::defaults(&mut after);
    if let Some(backend) = gang_scheduler {
        after
            .scheduling_strategy
            .get_or_insert_default()
            .gang_scheduler = Some(backend);
    }
    let mut ops = Ops::default();
    // In the order of the reference path's diff: its keys sorted.
    ops.nested(
        at(&spec_path(), "placement"),
        &before.placement,
        &after.placement,
        |ops, path, b, a| {
            for (part, b, a) in [
                ("pair", &b.pair, &a.pair),
                ("replica", &b.replica, &a.replica),
            ] {
                ops.nested(at(path, part), b, a, |ops, path, b, a| {
                    ops.field(at(path, "mode"), &b.mode, &a.mode)
                })?;
            }
            ops.nested(
                at(path, "spread"),
                &b.spread,
                &a.spread,
                |ops, path, b, a| {
                    ops.field(at(path, "maxSkew"), &b.max_skew, &a.max_skew)?;
                    ops.field(at(path, "mode"), &b.mode, &a.mode)
                },
            )
        },
    )?;
    let roles = at(&spec_path(), "roles");
    for (i, (b, a)) in before.roles.iter().zip(&after.roles).enumerate() {
        let role = at(&roles, &i.to_string());
        ops.field(at(&role, "replicas"), &b.replicas, &a.replicas)?;
        ops.nested(
            at(&role, "multinode"),
            &b.multinode,
            &a.multinode,
            |ops, path, b, a| ops.field(at(path, "nodeCount"), &b.node_count, &a.node_count),
        )?;
        ops.nested(
            at(&role, "scaleDown"),
            &b.scale_down,
            &a.scale_down,
            |ops, path, b, a| ops.field(at(path, "policy"), &b.policy, &a.policy),
        )?;
        ops.nested(at(&role, "drain"), &b.drain, &a.drain, |ops, path, b, a| {
            ops.field(at(path, "seconds"), &b.seconds, &a.seconds)
        })?;
        ops.nested(
            at(&role, "disruptionBudget"),
            &b.disruption_budget,
            &a.disruption_budget,
            |ops, path, b, a| {
                ops.field(
                    at(path, "maxUnavailableReplicas"),
                    &b.max_unavailable_replicas,
                    &a.max_unavailable_replicas,
                )
            },
        )?;
    }
    ops.nested(
        at(&spec_path(), "schedulingStrategy"),
        &before.scheduling_strategy,
        &after.scheduling_strategy,
        |ops, path, b, a| {
            ops.field(at(path, "gangPolicy"), &b.gang_policy, &a.gang_policy)?;
            ops.field(
                at(path, "gangScheduler"),
                &b.gang_scheduler,
                &a.gang_scheduler,
            )
        },
    )?;
    ops.nested(
        at(&spec_path(), "upgradeStrategy"),
        &before.upgrade_strategy,
        &after.upgrade_strategy,
        |ops, path, b, a| {
            ops.field(at(path, "type"), &b.type_, &a.type_)?;
            ops.nested(
                at(path, "incrementalUpgradeOptions"),
                &b.incremental_upgrade_options,
                &a.incremental_upgrade_options,
                |ops, path, b, a| {
                    ops.field(
                        at(path, "maxSurgePercent"),
                        &b.max_surge_percent,
                        &a.max_surge_percent,
                    )
                },
            )
        },
    )?;
    Ok(ops)
}

/// The defaults of a ScaleView spec as patch operations, and the spec with
/// them.
pub fn scale_view(before: &ScaleViewSpec) -> Result<(Ops, ScaleViewSpec), serde_json::Error> {
    let mut after = before.clone();
    scale_view::defaults(&mut after);
    let mut ops = Ops::default();
    ops.field(at(&spec_path(), "strict"), &before.strict, &after.strict)?;
    let policies = at(&spec_path(), "scalePolicy");
    for (i, (b, a)) in before
        .scale_policy
        .iter()
        .zip(&after.scale_policy)
        .enumerate()
    {
        let policy = at(&policies, &i.to_string());
        ops.field(at(&policy, "priority"), &b.priority, &a.priority)?;
    }
    Ok((ops, after))
}

/// The defaults of a ResourceScalingGroup spec as patch operations.
pub fn resource_scaling_group(before: &ResourceScalingGroupSpec) -> Result<Ops, serde_json::Error> {
    let mut after = before.clone();
    resource_scaling_group::defaults(&mut after);
    let mut ops = Ops::default();
    let strategy = at(&spec_path(), "scalingStrategy");
    ops.nested(
        at(&strategy, "groupConfig"),
        &before.scaling_strategy.group_config,
        &after.scaling_strategy.group_config,
        |ops, path, b, a| {
            ops.field(
                at(path, "groupNamePrefix"),
                &b.group_name_prefix,
                &a.group_name_prefix,
            )?;
            ops.field(at(path, "groupName"), &b.group_name, &a.group_name)?;
            ops.field(at(path, "replicas"), &b.replicas, &a.replicas)?;
            ops.nested(
                at(path, "scaleDown"),
                &b.scale_down,
                &a.scale_down,
                |ops, path, b, a| ops.field(at(path, "policy"), &b.policy, &a.policy),
            )
        },
    )?;
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The operations make what a round trip through `defaults` makes.
    fn check<S: serde::de::DeserializeOwned + Serialize>(
        spec: Value,
        ops: impl Fn(S) -> Ops,
        defaults: fn(&mut S),
    ) {
        let parsed: S = serde_json::from_value(spec.clone()).unwrap();
        let mut expected: S = serde_json::from_value(spec.clone()).unwrap();
        defaults(&mut expected);
        let mut object = json!({"spec": spec});
        json_patch::patch(&mut object, &ops(parsed).ops).unwrap();
        assert_eq!(object["spec"], serde_json::to_value(&expected).unwrap());
    }

    #[test]
    fn operations_make_the_defaulted_spec() {
        let role = |name: &str, component: &str| json!({"name": name, "componentType": component, "template": {"spec": {}}});
        for spec in [
            json!({"roles": [role("p", "prefiller"), role("d", "decoder")]}),
            json!({"roles": [
                {"name": "r", "componentType": "router", "replicas": 2},
                {"name": "w", "componentType": "worker", "multinode": {}, "scaleDown": {},
                 "drain": {}, "disruptionBudget": {}}],
                "schedulingStrategy": {"schedulerName": "volcano"},
                "upgradeStrategy": {"incrementalUpgradeOptions": {"stepSizePercent": 10}}}),
            json!({"roles": [{"name": "w", "componentType": "worker", "replicas": 1,
                "multinode": {"nodeCount": 2}, "scaleDown": {"policy": "Binpack"},
                "drain": {"seconds": 0}, "disruptionBudget": {"maxUnavailableReplicas": 2}}],
                "schedulingStrategy": {"gangPolicy": "TaskMember"},
                "upgradeStrategy": {"type": "NewRevision"}}),
            json!({"roles": [role("p", "prefiller"), role("d", "decoder")],
                "placement": {"replica": {"topologyKey": "k"}, "pair": {"topologyKey": "b",
                    "mode": "Preferred"}, "spread": {"topologyKey": "z", "maxSkew": 2}}}),
            json!({"roles": [role("p", "prefiller")],
                "placement": {"spread": {"topologyKey": "z", "mode": "Preferred"}}}),
        ] {
            check(
                spec.clone(),
                |s| inference_service(s, None).unwrap(),
                inference_service::defaults,
            );
            // The backend admission chose lands beside the defaults, in a
            // schedulingStrategy that is there or not.
            check(
                spec,
                |s| {
                    inference_service(s, Some(inference_service::GangScheduler::Kubernetes))
                        .unwrap()
                },
                |s| {
                    inference_service::defaults(s);
                    s.scheduling_strategy.get_or_insert_default().gang_scheduler =
                        Some(inference_service::GangScheduler::Kubernetes);
                },
            );
        }
        for spec in [
            json!({"targetRef": {"name": "s", "componentType": "decoder"},
                "scalePolicy": [{"group": "a"}, {"group": "b", "priority": 3}]}),
            json!({"targetRef": {"name": "s", "componentType": "decoder"}, "strict": true,
                "scalePolicy": [{"group": "a", "priority": 1}]}),
        ] {
            check(spec, |s| scale_view(&s).unwrap().0, scale_view::defaults);
        }
        let targets = json!([{"name": "a", "apiVersion": "apps/v1", "kind": "Deployment"}]);
        for group_config in [
            json!({"groupName": "g"}),
            json!({"groupName": "g", "groupNamePrefix": "g"}),
            json!({"groupName": "g", "groupNamePrefix": "h", "replicas": 2,
                "scaleDown": {"candidates": ["x"]}}),
            json!({}),
        ] {
            check(
                json!({"targetResources": targets,
                    "scalingStrategy": {"type": "GroupReplication", "groupConfig": group_config}}),
                |s| resource_scaling_group(&s).unwrap(),
                resource_scaling_group::defaults,
            );
        }
    }
}
