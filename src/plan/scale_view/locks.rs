//! ScaleView locks on an InferenceService's roles (DESIGN.md §1.3, seed 002).
//!
//! A ScaleView that scales some roles records a lock in the service's
//! `status.scaleViews`: its name, uid, generation and the replicas it set per
//! role. While the lock is held, the InferenceService validating webhook lets
//! a locked role's replicas change only to the lock's value (or stay as they
//! were), and refuses to remove the role; Tandem's own service account, which
//! writes what the view decided, is not held back.
//!
//! Locks are read from the old object: a spec update cannot write the status
//! subresource, so the old status is the one the API server keeps.

use crate::api::Findings;
use crate::api::inference_service::{InferenceService, InferenceServiceStatus, ScaleViewLock};

/// What the webhook says about an update of an InferenceService's spec.
/// `by_tandem`: the request comes from Tandem's own service account.
pub fn check_update(old: &InferenceService, new: &InferenceService, by_tandem: bool) -> Findings {
    let mut findings = Findings::default();
    if by_tandem {
        return findings;
    }
    let Some(status) = &old.status else {
        return findings;
    };
    for lock in &status.scale_views {
        for locked in &lock.role_replicas {
            let role = locked.role.as_str();
            let old_replicas = old
                .spec
                .roles
                .iter()
                .find(|r| r.name == role)
                .map(|r| r.replicas());
            let in_new: Vec<(usize, i32)> = new
                .spec
                .roles
                .iter()
                .enumerate()
                .filter(|(_, r)| r.name == role)
                .map(|(i, r)| (i, r.replicas()))
                .collect();
            if old_replicas.is_some() && in_new.is_empty() {
                findings.deny(
                    "spec.roles",
                    format!(
                        "role {role:?} is locked by ScaleView {}; delete the ScaleView first",
                        lock.name
                    ),
                );
            }
            // A role the old spec did not have (a stale lock) may come back
            // only at the lock's value.
            for (i, replicas) in in_new {
                if Some(replicas) != old_replicas && replicas != locked.replicas {
                    findings.deny(
                        format!("spec.roles[{i}].replicas"),
                        format!(
                            "is locked by ScaleView {view} at {at} replicas; scale through the ScaleView (kubectl scale scaleview/{view} --replicas=N)",
                            view = lock.name,
                            at = locked.replicas
                        ),
                    );
                }
            }
        }
    }
    findings
}

/// The lock that holds a role, if any. A role is locked by at most one view;
/// should a status list more, the first in the list is returned.
pub fn lock_holder<'a>(
    status: &'a InferenceServiceStatus,
    role: &str,
) -> Option<&'a ScaleViewLock> {
    status
        .scale_views
        .iter()
        .find(|lock| lock.role_replicas.iter().any(|r| r.role == role))
}

/// The groups a view wants that another view already locks, as
/// (group, the other view's name), sorted. Another view is one with another
/// name, or the same name with another uid: a view deleted and recreated
/// under its old name must wait until the old lock is released.
pub fn conflicts(
    status: &InferenceServiceStatus,
    view_name: &str,
    view_uid: &str,
    groups: &[&str],
) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = status
        .scale_views
        .iter()
        .filter(|lock| lock.name != view_name || lock.uid != view_uid)
        .flat_map(|lock| {
            lock.role_replicas
                .iter()
                .filter(|locked| groups.contains(&locked.role.as_str()))
                .map(|locked| (locked.role.clone(), lock.name.clone()))
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const LOCKED: &str = "spec.roles[1].replicas: is locked by ScaleView spot-decode-sv at 2 replicas; scale through the ScaleView (kubectl scale scaleview/spot-decode-sv --replicas=N)";

    fn role(name: &str, replicas: Option<i32>) -> Value {
        let mut role = json!({
            "name": name,
            "componentType": "decoder",
            "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}},
        });
        if let Some(replicas) = replicas {
            role["replicas"] = json!(replicas);
        }
        role
    }

    fn lock(name: &str, uid: &str, roles: &[(&str, i32)]) -> Value {
        json!({
            "name": name, "uid": uid, "generation": 3,
            "roleReplicas": roles.iter().map(|(role, replicas)| json!({"role": role, "replicas": replicas})).collect::<Vec<_>>(),
        })
    }

    fn service(roles: Vec<Value>, locks: Vec<Value>) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "spot-decode", "namespace": "default"},
            "spec": {"roles": roles},
            "status": {"scaleViews": locks},
        }))
        .expect("test service parses")
    }

    /// decode-ondemand (2) and decode-spot (2) locked by spot-decode-sv at
    /// 2 and 2; prefill unlocked.
    fn old() -> InferenceService {
        service(
            vec![
                role("decode-ondemand", Some(2)),
                role("decode-spot", Some(2)),
                role("prefill", Some(1)),
            ],
            vec![lock(
                "spot-decode-sv",
                "uid-1",
                &[("decode-ondemand", 2), ("decode-spot", 2)],
            )],
        )
    }

    fn edited(edit: impl FnOnce(&mut InferenceService)) -> InferenceService {
        let mut new = old();
        new.status = None;
        edit(&mut new);
        new
    }

    #[test]
    fn replica_edits_against_the_lock() {
        // (what is edited, denial or None)
        let cases: Vec<(&str, InferenceService, Option<&str>)> = vec![
            (
                "an unlocked role",
                edited(|s| s.spec.roles[2].replicas = Some(5)),
                None,
            ),
            (
                "a locked role to another value",
                edited(|s| s.spec.roles[1].replicas = Some(5)),
                Some(LOCKED),
            ),
            (
                "a locked role to unset (1)",
                edited(|s| s.spec.roles[1].replicas = None),
                Some(LOCKED),
            ),
            (
                "another field of a locked role",
                edited(|s| s.spec.roles[1].template = Some(json!({"spec": {"containers": []}}))),
                None,
            ),
            ("nothing", edited(|_| {}), None),
        ];
        for (what, new, denial) in cases {
            let findings = check_update(&old(), &new, false);
            assert_eq!(
                (!findings.is_allowed()).then(|| findings.denial_message()),
                denial.map(str::to_owned),
                "editing {what}"
            );
        }
    }

    #[test]
    fn a_locked_role_may_move_to_the_lock_value() {
        // The view has decided 3 but its write has not landed yet: the spec
        // still says 2, and moving to 3 is allowed, to 4 is not.
        let mut old = old();
        if let Some(status) = old.status.as_mut() {
            status.scale_views[0].role_replicas[1].replicas = 3;
        }
        let to_lock = edited(|s| s.spec.roles[1].replicas = Some(3));
        assert!(check_update(&old, &to_lock, false).is_allowed());
        let elsewhere = edited(|s| s.spec.roles[1].replicas = Some(4));
        assert_eq!(
            check_update(&old, &elsewhere, false).denial_message(),
            "spec.roles[1].replicas: is locked by ScaleView spot-decode-sv at 3 replicas; scale through the ScaleView (kubectl scale scaleview/spot-decode-sv --replicas=N)"
        );
        // Unset and 1 are the same value: a lock at 1 accepts an unset field.
        if let Some(status) = old.status.as_mut() {
            status.scale_views[0].role_replicas[1].replicas = 1;
        }
        let unset = edited(|s| s.spec.roles[1].replicas = None);
        assert!(check_update(&old, &unset, false).is_allowed());
    }

    #[test]
    fn a_reordered_role_is_found_by_name() {
        // Reversed, decode-ondemand moves from spec.roles[0] to spec.roles[2].
        let moved = edited(|s| {
            s.spec.roles.reverse();
            s.spec.roles[2].replicas = Some(7);
        });
        assert_eq!(moved.spec.roles[2].name, "decode-ondemand");
        assert_eq!(
            check_update(&old(), &moved, false).denial_message(),
            LOCKED.replace("spec.roles[1]", "spec.roles[2]")
        );
        let reordered_only = edited(|s| s.spec.roles.reverse());
        assert!(check_update(&old(), &reordered_only, false).is_allowed());
    }

    #[test]
    fn removing_a_locked_role_is_denied() {
        let new = edited(|s| {
            s.spec.roles.remove(1);
        });
        assert_eq!(
            check_update(&old(), &new, false).denial_message(),
            "spec.roles: role \"decode-spot\" is locked by ScaleView spot-decode-sv; delete the ScaleView first"
        );
        let unlocked = edited(|s| {
            s.spec.roles.remove(2);
        });
        assert!(check_update(&old(), &unlocked, false).is_allowed());
    }

    #[test]
    fn a_stale_lock_on_a_missing_role() {
        // The lock names a role the old spec lacks: nothing to remove, and the
        // role may come back only at the lock's value.
        let old = service(
            vec![role("prefill", Some(1))],
            vec![lock("sv", "uid-1", &[("decode", 4)])],
        );
        let same = service(vec![role("prefill", Some(3))], vec![]);
        assert!(check_update(&old, &same, false).is_allowed());
        let back_at_lock = service(
            vec![role("prefill", Some(1)), role("decode", Some(4))],
            vec![],
        );
        assert!(check_update(&old, &back_at_lock, false).is_allowed());
        let back_elsewhere = service(
            vec![role("prefill", Some(1)), role("decode", Some(2))],
            vec![],
        );
        assert!(
            check_update(&old, &back_elsewhere, false)
                .denial_message()
                .starts_with("spec.roles[1].replicas: is locked by ScaleView sv at 4 replicas")
        );
    }

    #[test]
    fn tandem_may_change_anything() {
        let rescaled = edited(|s| s.spec.roles[1].replicas = Some(5));
        let removed = edited(|s| {
            s.spec.roles.remove(0);
        });
        for new in [rescaled, removed] {
            assert!(!check_update(&old(), &new, false).is_allowed());
            assert!(check_update(&old(), &new, true).is_allowed());
        }
    }

    #[test]
    fn without_locks_everything_passes() {
        let mut old = old();
        old.status = None;
        let new = edited(|s| {
            s.spec.roles[0].replicas = Some(0);
            s.spec.roles.remove(1);
        });
        assert!(check_update(&old, &new, false).is_allowed());
    }

    #[test]
    fn lock_holders() {
        let status = old().status.unwrap_or_default();
        assert_eq!(
            lock_holder(&status, "decode-spot").map(|l| l.name.as_str()),
            Some("spot-decode-sv")
        );
        assert_eq!(lock_holder(&status, "prefill"), None);
    }

    #[test]
    fn conflicting_views() {
        let status = old().status.unwrap_or_default();
        let groups = ["decode-spot", "decode-ondemand"];
        // The holder itself conflicts with nothing.
        assert!(conflicts(&status, "spot-decode-sv", "uid-1", &groups).is_empty());
        // A second view on one of the groups.
        assert_eq!(
            conflicts(
                &status,
                "spot-only-sv",
                "uid-2",
                &["decode-spot", "prefill"]
            ),
            vec![("decode-spot".to_owned(), "spot-decode-sv".to_owned())]
        );
        // The view recreated under the same name: a new uid, so the old lock
        // still holds both groups.
        assert_eq!(
            conflicts(&status, "spot-decode-sv", "uid-9", &groups),
            vec![
                ("decode-ondemand".to_owned(), "spot-decode-sv".to_owned()),
                ("decode-spot".to_owned(), "spot-decode-sv".to_owned()),
            ]
        );
        assert!(conflicts(&InferenceServiceStatus::default(), "a", "b", &groups).is_empty());
    }

    proptest! {
        #[test]
        fn a_locked_role_moves_only_to_its_old_or_lock_value(
            old_replicas in prop::option::of(0..4i32),
            new_replicas in prop::option::of(0..4i32),
            locked_at in 0..4i32,
            unlocked_replicas in prop::option::of(0..4i32),
            by_tandem in any::<bool>(),
        ) {
            let locks = vec![lock("sv", "uid-1", &[("decode", locked_at)])];
            let old = service(vec![role("decode", old_replicas), role("prefill", Some(1))], locks);
            let new = service(vec![role("decode", new_replicas), role("prefill", unlocked_replicas)], vec![]);
            let (from, to) = (old_replicas.unwrap_or(1), new_replicas.unwrap_or(1));
            let allowed = by_tandem || to == from || to == locked_at;
            let findings = check_update(&old, &new, by_tandem);
            prop_assert_eq!(findings.is_allowed(), allowed, "{}", findings.denial_message());
            if !allowed {
                prop_assert_eq!(findings.violations.len(), 1);
                prop_assert_eq!(&findings.violations[0].field, "spec.roles[0].replicas");
            }
        }
    }
}
