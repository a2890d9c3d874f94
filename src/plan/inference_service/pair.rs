//! Prefill and decode as one unit at zero (issue 54): a disaggregated
//! service's two sides reach zero together and leave it together, so that
//! no instant has one side at zero while the other serves.
//!
//! The sides are the service's prefiller roles and its decoder roles. A side
//! asks the sum of its roles' `replicas` (what its ScaleViews, a
//! ResourceScalingGroup or the user wrote). The rule, applied to the spec
//! before anything is planned, so that the LeaderWorkerSets, the gang, the
//! budgets and the status all see the same counts:
//!
//! - both sides ask 0: every role of both runs 0 (the service is scaled to
//!   zero; its router, picker and InferencePool stay);
//! - both ask more than 0: each role runs what it asks;
//! - one side asks 0 while the other asks more: the first role (in spec
//!   order) of the side asking 0 keeps one replica. Going down, the side
//!   that reaches 0 first keeps serving until the other follows; coming
//!   back, the side that asks first brings the other's first replica with
//!   it, and the gang's core group binds the first prefill and decode
//!   replicas all or nothing.
//!
//! The decision reads the spec only, not what runs, so `render` and the
//! controller agree, and a pass whose spec did not change decides the
//! same. Nothing is written back to the spec: a ScaleView or an
//! autoscaler keeps what it asked, and the role's status says what it runs
//! and why (`keptForPair`).
//!
//! Rejected: holding the side asking 0 at whatever it runs now (the
//! decision would read the world, and a service created with one side at 0
//! would run that way); refusing a spec with one side at 0 (two ScaleViews,
//! or a view and a ResourceScalingGroup, write the two sides one after the
//! other, so the spec passes through that state on every move to and from
//! zero); waking only once both sides ask (a single autoscaler on prefill,
//! with decode at a fixed count of its own, could never wake the service).

use std::borrow::Cow;

use crate::api::inference_service::{ComponentType, InferenceService, InferenceServiceSpec};

/// A role that runs one replica though it asks none, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The role's index in `spec.roles`.
    pub index: usize,
    pub role: String,
    /// Why, for the role's status (`keptForPair`).
    pub why: String,
}

/// What each side of a disaggregated service asks in all.
fn asked(spec: &InferenceServiceSpec, side: ComponentType) -> Option<i64> {
    let mut roles = spec
        .roles
        .iter()
        .filter(|r| r.component_type == side)
        .peekable();
    roles.peek()?;
    Some(roles.map(|r| i64::from(r.replicas().max(0))).sum())
}

fn side_name(side: ComponentType) -> &'static str {
    match side {
        ComponentType::Prefiller => "prefillers",
        _ => "decoders",
    }
}

/// The role `spec` keeps at one replica though its side asks 0, if any: see
/// the module's rule. None unless the service has both prefillers and
/// decoders and exactly one side asks 0.
pub fn kept(spec: &InferenceServiceSpec) -> Option<Kept> {
    let prefill = asked(spec, ComponentType::Prefiller)?;
    let decode = asked(spec, ComponentType::Decoder)?;
    let (zero, other, serving) = match (prefill, decode) {
        (0, n) if n > 0 => (ComponentType::Prefiller, ComponentType::Decoder, n),
        (n, 0) if n > 0 => (ComponentType::Decoder, ComponentType::Prefiller, n),
        _ => return None,
    };
    let (index, role) = spec
        .roles
        .iter()
        .enumerate()
        .find(|(_, r)| r.component_type == zero)?;
    Some(Kept {
        index,
        role: role.name.clone(),
        why: format!(
            "the {} ask 0 replicas while the {} ask {serving}: role {} keeps 1 replica, \
             since prefill and decode reach zero and leave it together",
            side_name(zero),
            side_name(other),
            role.name,
        ),
    })
}

/// `service` with the replicas it runs: unchanged (borrowed) unless a role
/// is [`kept`] at one replica. Idempotent: the result keeps no role.
pub fn effective(service: &InferenceService) -> Cow<'_, InferenceService> {
    match kept(&service.spec) {
        None => Cow::Borrowed(service),
        Some(kept) => {
            let mut running = service.clone();
            running.spec.roles[kept.index].replicas = Some(1);
            Cow::Owned(running)
        }
    }
}

/// Whether every serving role of `spec` asks 0 replicas (and it has one):
/// the service is scaled to zero, by the rule above on both sides at once.
pub fn at_zero(spec: &InferenceServiceSpec) -> bool {
    let mut serving = spec.roles.iter().filter(|r| !r.is_router()).peekable();
    serving.peek().is_some() && serving.all(|r| r.replicas() <= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(roles: &[(&str, &str, i32)]) -> InferenceServiceSpec {
        serde_json::from_value(json!({
            "roles": roles.iter().map(|(name, kind, replicas)| json!({
                "name": name, "componentType": kind, "replicas": replicas,
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn service(roles: &[(&str, &str, i32)]) -> InferenceService {
        InferenceService::new("s", spec(roles))
    }

    fn runs(service: &InferenceService) -> Vec<i32> {
        effective(service)
            .spec
            .roles
            .iter()
            .map(|r| r.replicas())
            .collect()
    }

    #[test]
    fn both_sides_at_zero_run_zero_and_both_asking_run_what_they_ask() {
        let zero = service(&[
            ("prefill", "prefiller", 0),
            ("decode", "decoder", 0),
            ("router", "router", 1),
        ]);
        assert_eq!(runs(&zero), [0, 0, 1]);
        assert!(matches!(effective(&zero), Cow::Borrowed(_)));
        assert!(at_zero(&zero.spec));
        let serving = service(&[("prefill", "prefiller", 2), ("decode", "decoder", 5)]);
        assert_eq!(runs(&serving), [2, 5]);
        assert!(!at_zero(&serving.spec));
    }

    #[test]
    fn the_side_asking_zero_keeps_one_replica_while_the_other_serves() {
        let down = service(&[("prefill", "prefiller", 0), ("decode", "decoder", 4)]);
        assert_eq!(runs(&down), [1, 4]);
        assert_eq!(
            kept(&down.spec).unwrap().why,
            "the prefillers ask 0 replicas while the decoders ask 4: role prefill keeps 1 replica, \
             since prefill and decode reach zero and leave it together"
        );
        // Coming back: prefill asks first, decode's first role comes with it.
        let up = service(&[
            ("prefill", "prefiller", 1),
            ("decode-ondemand", "decoder", 0),
            ("decode-spot", "decoder", 0),
        ]);
        assert_eq!(runs(&up), [1, 1, 0]);
        assert_eq!(kept(&up.spec).unwrap().role, "decode-ondemand");
        // Idempotent.
        assert_eq!(kept(&effective(&up).spec), None);
    }

    #[test]
    fn a_side_is_all_its_roles_so_a_view_may_leave_one_of_them_at_zero() {
        let split = service(&[
            ("prefill", "prefiller", 1),
            ("decode-ondemand", "decoder", 2),
            ("decode-spot", "decoder", 0),
        ]);
        assert_eq!(kept(&split.spec), None);
        assert_eq!(runs(&split), [1, 2, 0]);
    }

    #[test]
    fn services_without_both_sides_are_left_as_asked() {
        let workers = service(&[("a", "worker", 0), ("b", "worker", 3)]);
        assert_eq!(runs(&workers), [0, 3]);
        assert!(!at_zero(&workers.spec));
        let decode_only = service(&[("decode", "decoder", 0), ("router", "router", 1)]);
        assert_eq!(runs(&decode_only), [0, 1]);
        assert!(at_zero(&decode_only.spec));
        let router_only = service(&[("router", "router", 1)]);
        assert!(!at_zero(&router_only.spec));
    }
}
