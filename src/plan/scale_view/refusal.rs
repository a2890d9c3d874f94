//! A `/scale` that the ScaleView webhook refused, recorded on the view.
//!
//! An autoscaler's write to a strict view's `/scale` that the view cannot
//! honour is denied by admission, so it never reaches the view or its
//! controller: without a record, only the autoscaler's own conditions and
//! the API server's audit log would say so. The webhook therefore writes it
//! on the view (outside dry runs): condition [`SCALE_REFUSED`] in its status
//! and a Warning Event of the same reason. The HPA repeats a refused write
//! each sync period; the record is written again only when it would say
//! something new (another requester, count or reason, or a new generation),
//! so Tandem's writes do not repeat with it.
//!
//! The condition is about the spec it was refused against: the view's
//! reconcile keeps it ([`carried`]) while the view's generation is the one
//! it names, and drops it once the spec changed (a `/scale` admitted, an
//! edit of the view).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::ScaleView;

/// The condition type (and the Event reason) of a refused `/scale`.
pub const SCALE_REFUSED: &str = "ScaleRefused";

/// The condition's reason: admission denied the write.
pub const DENIED: &str = "AdmissionDenied";

/// One `/scale` write the webhook denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub namespace: String,
    /// The view's name.
    pub view: String,
    /// Who wrote `/scale` (the request's `userInfo.username`).
    pub requester: String,
    /// The replicas asked for (`spec.replicas` of the Scale; 0 when unset).
    pub replicas: i64,
    /// Why admission denied it, as the denial said.
    pub reason: String,
}

impl Refusal {
    /// The condition's message and the Event's note.
    pub fn message(&self) -> String {
        let requester = if self.requester.is_empty() {
            "a client"
        } else {
            self.requester.as_str()
        };
        format!(
            "{requester} asked for {} replicas through /scale and was refused: {}",
            self.replicas, self.reason
        )
    }
}

/// The view's conditions with `refusal` recorded, or None when they already
/// record it for this generation (nothing to write).
pub fn record(view: &ScaleView, refusal: &Refusal, now: &Time) -> Option<Vec<Condition>> {
    let message = refusal.message();
    let generation = view.metadata.generation;
    let previous: &[Condition] = view
        .status
        .as_ref()
        .map_or(&[], |status| status.conditions.as_slice());
    let was = previous.iter().find(|c| c.type_ == SCALE_REFUSED);
    if was.is_some_and(|c| c.message == message && c.observed_generation == generation) {
        return None;
    }
    let condition = Condition {
        type_: SCALE_REFUSED.to_owned(),
        status: "True".to_owned(),
        reason: DENIED.to_owned(),
        message,
        // A refusal is an event in time: each new one is a transition.
        last_transition_time: now.clone(),
        observed_generation: generation,
    };
    let mut conditions: Vec<Condition> = previous
        .iter()
        .filter(|c| c.type_ != SCALE_REFUSED)
        .cloned()
        .collect();
    conditions.push(condition);
    Some(conditions)
}

/// The refusal recorded in `previous` that still holds at `generation`: the
/// reconcile keeps it in the status it writes, so that its own write never
/// erases it; a refusal of an older generation is dropped.
pub fn carried(previous: &[Condition], generation: Option<i64>) -> Option<Condition> {
    previous
        .iter()
        .find(|c| c.type_ == SCALE_REFUSED && c.observed_generation == generation)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::scale_view::ScaleViewStatus;

    fn time(at: &str) -> Time {
        Time(at.parse().expect("test time parses"))
    }

    fn view(generation: i64, conditions: Vec<Condition>) -> ScaleView {
        let mut view: ScaleView = serde_json::from_value(serde_json::json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "decode", "namespace": "llm", "generation": generation},
            "spec": {"targetRef": {"name": "svc", "componentType": "decoder"}, "strict": true,
                     "scalePolicy": [{"group": "decode", "constraints": {"max": 3}}]},
        }))
        .expect("a view");
        view.status = Some(ScaleViewStatus {
            conditions,
            ..ScaleViewStatus::default()
        });
        view
    }

    fn refusal(replicas: i64) -> Refusal {
        Refusal {
            namespace: "llm".into(),
            view: "decode".into(),
            requester: "system:serviceaccount:kube-system:horizontal-pod-autoscaler".into(),
            replicas,
            reason: "spec.replicas: must be within [0, 3]".into(),
        }
    }

    fn ready() -> Condition {
        Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Ready".into(),
            message: "3 of 3 replicas ready".into(),
            last_transition_time: time("2026-11-28T09:00:00Z"),
            observed_generation: Some(2),
        }
    }

    #[test]
    fn a_refusal_is_added_beside_the_controllers_conditions() {
        let now = time("2026-11-28T10:00:00Z");
        let conditions = record(&view(2, vec![ready()]), &refusal(4), &now).expect("new");
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0], ready());
        let refused = &conditions[1];
        assert_eq!(
            (
                refused.type_.as_str(),
                refused.status.as_str(),
                refused.reason.as_str()
            ),
            (SCALE_REFUSED, "True", DENIED)
        );
        assert_eq!(
            refused.message,
            "system:serviceaccount:kube-system:horizontal-pod-autoscaler asked for 4 replicas through /scale and was refused: spec.replicas: must be within [0, 3]"
        );
        assert_eq!(refused.observed_generation, Some(2));
        assert_eq!(refused.last_transition_time, now);
    }

    #[test]
    fn the_same_refusal_again_writes_nothing_and_a_new_one_replaces_it() {
        let first = time("2026-11-28T10:00:00Z");
        let conditions = record(&view(2, vec![ready()]), &refusal(4), &first).expect("new");
        let recorded = view(2, conditions);
        // The HPA retrying the same write: nothing new to say.
        assert_eq!(
            record(&recorded, &refusal(4), &time("2026-11-28T10:00:15Z")),
            None
        );
        // Another count: one condition still, saying the new one.
        let later = time("2026-11-28T10:01:00Z");
        let replaced = record(&recorded, &refusal(5), &later).expect("a new count");
        let refused: Vec<_> = replaced
            .iter()
            .filter(|c| c.type_ == SCALE_REFUSED)
            .collect();
        assert_eq!(refused.len(), 1);
        assert!(refused[0].message.contains("asked for 5 replicas"));
        assert_eq!(refused[0].last_transition_time, later);
        // The same words at a new generation: recorded again, for it.
        let mut newer = recorded.clone();
        newer.metadata.generation = Some(3);
        let again = record(&newer, &refusal(4), &later).expect("a new generation");
        assert_eq!(again[1].observed_generation, Some(3));
    }

    #[test]
    fn a_refusal_is_carried_while_its_generation_holds() {
        let conditions = record(
            &view(2, vec![ready()]),
            &refusal(4),
            &time("2026-11-28T10:00:00Z"),
        )
        .expect("new");
        assert_eq!(carried(&conditions, Some(2)), Some(conditions[1].clone()));
        assert_eq!(carried(&conditions, Some(3)), None);
        assert_eq!(carried(&[ready()], Some(2)), None);
    }
}
