//! What a carried-out step decided, named for a dashboard
//! (`tandem_decisions_total{controller,decision,policy}`): a replica created,
//! replaced or deleted with the scale-down policy of its role or group, a
//! drift repaired, an upgrade step, a Target scaled, a role scaled by a view.
//! The reconcilers count a step once it is carried out; what is a replica and
//! which policy is in force is decided here, with the plan.

use serde_json::Value;

use super::children::ROLE_NAME;
use super::reason;
pub use super::scale_down_policy::{Policy, Replica};
use super::write::{Apply, Change, Delete};
use crate::api::inference_service::InferenceService;

/// The `policy` label of a step on no replica, or on a replica whose role or
/// group is gone.
pub const NO_POLICY: &str = "none";

/// One decision as counted: what was done and under which policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub decision: &'static str,
    pub policy: &'static str,
}

fn policy_label(replica: Option<Replica>) -> &'static str {
    replica
        .and_then(|r| r.policy)
        .map_or(NO_POLICY, Policy::label)
}

/// What applying `step` decided: a replica created, or replaced (its
/// template changed, so its pods are recreated), another child created or
/// updated; an object changed by hand and set back is a drift repaired,
/// replica or not.
pub fn of_apply(step: &Apply) -> Decision {
    let decision = match (step.change, step.replica.is_some()) {
        (Change::Revert, _) => "drift_repaired",
        (Change::Create, true) => "replica_created",
        (Change::Update, true) => "replica_replaced",
        (Change::Create, false) => "child_created",
        (Change::Update, false) => "child_updated",
    };
    Decision {
        decision,
        policy: policy_label(step.replica),
    }
}

/// What deleting `step` decided: a replica deleted, or another child.
pub fn of_delete(step: &Delete) -> Decision {
    Decision {
        decision: if step.replica.is_some() {
            "replica_deleted"
        } else {
            "child_deleted"
        },
        policy: policy_label(step.replica),
    }
}

/// An upgrade step, by its Event's reason (`plan::inference_service::rollout`, and
/// `ProgressDeadlineExceeded`): `upgrade_started`, `upgrade_capacity`,
/// `upgrade_traffic`, `upgrade_complete`, `upgrade_abandoned`, the same for
/// `rollback_`, `progress_deadline_exceeded`; a replica's recovery,
/// `replica_backoff`, `replica_failed` and `recovery_reset`; zero and back,
/// `kept_for_pair`, `scaled_to_zero` and `leaving_zero`; `upgrade_other`
/// for a reason not known here, so the label stays bounded.
pub fn of_upgrade_step(reason: &str) -> Decision {
    let decision = match reason {
        "UpgradeStarted" => "upgrade_started",
        "UpgradeCapacity" => "upgrade_capacity",
        "UpgradeTraffic" => "upgrade_traffic",
        "UpgradeComplete" => "upgrade_complete",
        "UpgradeAbandoned" => "upgrade_abandoned",
        "RollbackCapacity" => "rollback_capacity",
        "RollbackTraffic" => "rollback_traffic",
        "RollbackComplete" => "rollback_complete",
        reason::PROGRESS_DEADLINE_EXCEEDED => "progress_deadline_exceeded",
        // A replica's recovery (plan::inference_service::recovery).
        "BackOff" => "replica_backoff",
        "ReplicaFailed" => "replica_failed",
        "RecoveryReset" => "recovery_reset",
        // Zero and back (plan::inference_service::pair).
        "KeptForPair" => "kept_for_pair",
        "ScaledToZero" => "scaled_to_zero",
        "LeavingZero" => "leaving_zero",
        _ => "upgrade_other",
    };
    Decision {
        decision,
        policy: NO_POLICY,
    }
}

/// What an InplaceScaling group's Event reports, when it reports a change
/// Tandem made: a Target scaled to follow its Source (`Scaled`), or a hand
/// edit of a Target set back (`DriftRepaired`). Stalls decide nothing.
pub fn of_inplace_note(reason: &str) -> Option<Decision> {
    let decision = match reason {
        reason::SCALED => "target_scaled",
        reason::DRIFT_REPAIRED => "drift_repaired",
        _ => return None,
    };
    Some(Decision {
        decision,
        policy: NO_POLICY,
    })
}

/// A role of an InferenceService given a new replica count by a ScaleView
/// (its split by priority).
pub const ROLE_SCALED: Decision = Decision {
    decision: "role_scaled",
    policy: NO_POLICY,
};

/// Whether `child` of `service` is a replica (one of a role's
/// LeaderWorkerSets), and the scale-down policy of its role.
pub fn service_replica(service: &InferenceService, child: &Value) -> Option<Replica> {
    if child["kind"] != crate::plan::shared::child_kinds::LEADER_WORKER_SET.kind {
        return None;
    }
    let role = child["metadata"]["labels"][ROLE_NAME].as_str();
    Some(Replica {
        policy: service
            .spec
            .roles
            .iter()
            .find(|r| Some(r.name.as_str()) == role)
            .map(|r| r.scale_down_policy().into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service() -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "m", "namespace": "d"},
            "spec": {"roles": [
                {"name": "decode", "componentType": "worker",
                 "scaleDown": {"policy": "Binpack"},
                 "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
                {"name": "prefill", "componentType": "worker",
                 "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
            ]}
        }))
        .expect("a service")
    }

    fn lws(role: &str) -> Value {
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
               "metadata": {"name": format!("m-{role}-0"), "labels": {ROLE_NAME: role}}})
    }

    #[test]
    fn a_role_replica_carries_its_roles_policy() {
        let service = service();
        assert_eq!(
            service_replica(&service, &lws("decode")),
            Some(Replica {
                policy: Some(Policy::Binpack)
            })
        );
        assert_eq!(
            service_replica(&service, &lws("prefill")),
            Some(Replica {
                policy: Some(Policy::Ordered)
            })
        );
        // A role removed from the spec: still a replica, under no policy.
        assert_eq!(
            service_replica(&service, &lws("gone")),
            Some(Replica { policy: None })
        );
        let pod_group = json!({"kind": "PodGroup", "metadata": {"labels": {ROLE_NAME: "decode"}}});
        assert_eq!(service_replica(&service, &pod_group), None);
    }

    #[test]
    fn each_change_is_named_with_its_policy() {
        let step = |change, replica| Apply {
            object: Value::Null,
            change,
            note: String::new(),
            replica,
        };
        let binpack = Some(Replica {
            policy: Some(Policy::Binpack),
        });
        let named = |d: Decision| (d.decision, d.policy);
        assert_eq!(
            named(of_apply(&step(Change::Create, binpack))),
            ("replica_created", "Binpack")
        );
        assert_eq!(
            named(of_apply(&step(Change::Update, binpack))),
            ("replica_replaced", "Binpack")
        );
        assert_eq!(
            named(of_apply(&step(Change::Revert, binpack))),
            ("drift_repaired", "Binpack")
        );
        assert_eq!(
            named(of_apply(&step(Change::Revert, None))),
            ("drift_repaired", "none")
        );
        assert_eq!(
            named(of_apply(&step(Change::Create, None))),
            ("child_created", "none")
        );
        assert_eq!(
            named(of_apply(&step(Change::Update, None))),
            ("child_updated", "none")
        );
        let delete = |replica| Delete {
            object: Value::Null,
            note: String::new(),
            replica,
        };
        assert_eq!(
            named(of_delete(&delete(Some(Replica {
                policy: Some(Policy::Newest)
            })))),
            ("replica_deleted", "Newest")
        );
        assert_eq!(
            named(of_delete(&delete(Some(Replica { policy: None })))),
            ("replica_deleted", "none")
        );
        assert_eq!(named(of_delete(&delete(None))), ("child_deleted", "none"));
    }

    #[test]
    fn upgrade_steps_and_inplace_notes_have_bounded_names() {
        assert_eq!(
            of_upgrade_step("UpgradeTraffic").decision,
            "upgrade_traffic"
        );
        assert_eq!(
            of_upgrade_step(reason::PROGRESS_DEADLINE_EXCEEDED).decision,
            "progress_deadline_exceeded"
        );
        assert_eq!(of_upgrade_step("SomethingNew").decision, "upgrade_other");
        assert_eq!(
            of_inplace_note(reason::DRIFT_REPAIRED).map(|d| d.decision),
            Some("drift_repaired")
        );
        assert_eq!(
            of_inplace_note(reason::SCALED).map(|d| d.decision),
            Some("target_scaled")
        );
        assert_eq!(of_inplace_note(reason::STALLED), None);
    }
}
