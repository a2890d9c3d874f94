//! Status conditions as Kubernetes keeps them: a condition's last transition
//! time moves only when its status changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition, keeping its last transition time when its status is unchanged
/// (so an unchanged world gives an unchanged status). `previous` are the
/// object's conditions as stored.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    is_true: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if is_true { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: generation,
    }
}
