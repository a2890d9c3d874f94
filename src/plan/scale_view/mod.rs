//! The ScaleView's decisions (DESIGN.md §1.3): here, one reconcile of a view,
//! what to write to the view and to its target InferenceService, and why;
//! the split of a total over the view's groups by priority and constraints
//! in [`split`]; the locks a view holds on its target's roles in [`locks`].
//! They implement seed 002 (`002_fa92b445fea73c75.txt`), sections
//! "`RisingWaveScaleView` CRD", "Priority and Replica Constraints",
//! "`RisingWaveScaleView` Webhooks" and "`RisingWaveScaleView` Controller".
//!
//! Read top to bottom, a pass:
//! 1. A view being deleted releases its lock (removes its entry from the
//!    target's `status.scaleViews`) and then its finalizer.
//! 2. Otherwise the view gets the finalizer [`FINALIZER`] first, so it cannot
//!    go away without releasing its lock.
//! 3. Without a target, with groups that are not roles of the target's
//!    component type, or with a group locked by another view, nothing is
//!    written to the target; the view's status says why.
//! 4. Otherwise the total (`spec.replicas`, or the groups' current sum when
//!    unset) is split ([`split`]); the lock entry (name, uid,
//!    generation, per-role replicas) is written when it differs, then every
//!    role whose replicas differ from the split is scaled.
//! 5. The view's status: ready replicas of the groups, the selector of their
//!    pods, the split with ready replicas, conditions Ready, Locked, Clamped,
//!    and ScaleRefused while the webhook's record of a refused `/scale`
//!    holds ([`refusal`]).
//!
//! An unchanged world gives a pass with nothing to write and no Events.
//! [`live_locks`] is the other half of the lock's life: the InferenceService
//! reconciler drops the entries of views that are gone, so a crash between
//! two steps above never leaves a role locked forever.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

pub mod locks;
pub mod refusal;
pub mod split;

use crate::api::ScaleView;
use crate::api::inference_service::{InferenceService, Role, RoleReplicas, ScaleViewLock};
use crate::api::scale_view::{self as api_view, GroupReplicas, ScaleViewSpec, ScaleViewStatus};

/// The Clamped condition's reasons (and the Event's, `Clamped`): the
/// groups' constraints, or the band's lower or upper end, set the total.
pub const CLAMPED: &str = "Clamped";
pub const BELOW_BAND: &str = "BelowBand";
pub const ABOVE_BAND: &str = "AboveBand";

/// The finalizer that holds a view until its lock is released.
pub const FINALIZER: &str = "fusioninfer.io/scale-view-lock";

/// The annotation, set at creation, recording the uid of the view's target.
pub const TARGET_UID: &str = "fusioninfer.io/target-uid";

/// The replicas the view's groups have now in the target: the sum of the
/// replicas of the target's roles of the view's component type that are
/// groups of the view. Saturates instead of overflowing.
pub fn current_total(spec: &ScaleViewSpec, target: &InferenceService) -> i32 {
    let groups = spec.groups();
    target
        .spec
        .roles
        .iter()
        .filter(|r| {
            r.component_type == spec.target_ref.component_type && groups.contains(r.name.as_str())
        })
        .fold(0i32, |sum, r| sum.saturating_add(r.replicas().max(0)))
}

fn uid_of(view: &ScaleView) -> &str {
    view.metadata.uid.as_deref().unwrap_or_default()
}

fn name_of(view: &ScaleView) -> &str {
    view.metadata.name.as_deref().unwrap_or_default()
}

/// The lock entries of service `service` whose view still exists: an entry
/// is stale when no view of that name targets the service, or the view of
/// that name has another uid (deleted and recreated). `views` are the views
/// of the service's namespace.
pub fn live_locks(
    service: &str,
    locks: &[ScaleViewLock],
    views: &[ScaleView],
) -> Vec<ScaleViewLock> {
    locks
        .iter()
        .filter(|lock| {
            views.iter().any(|view| {
                name_of(view) == lock.name
                    && uid_of(view) == lock.uid
                    && view.spec.target_ref.name == service
            })
        })
        .cloned()
        .collect()
}

/// The band a ResourceScalingGroup keeps the view in: a binding with
/// `minRatio` and `maxRatio` whose Target is the view
/// (`plan::resource_scaling_group::band::of_view`). The view applies it
/// when it splits what its autoscaler asked; it never writes `spec.replicas`,
/// which stays the autoscaler's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Band {
    /// The group whose binding gives it.
    pub group: String,
    pub min: i32,
    pub max: i32,
    /// How the group worked it out: `ratio 2 to 4 of prefill-sv=2`.
    pub why: String,
}

impl Band {
    /// `the band [4, 8] of ResourceScalingGroup pd-band (ratio 2 to 4 of prefill-sv=2)`.
    fn describe(&self) -> String {
        format!(
            "the band [{}, {}] of ResourceScalingGroup {} ({})",
            self.min, self.max, self.group, self.why
        )
    }
}

/// A role of the target to scale: `spec.roles[index]`, named `role`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleScale {
    pub index: usize,
    pub role: String,
    /// The replicas written in the spec now (None: unset, which means 1).
    pub from: Option<i32>,
    pub to: i32,
}

/// An Event to record on the view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

impl Note {
    /// Whether the Event starts an episode of its own (a clamp), so it must
    /// not be folded into an earlier one of its reason, whose note it would
    /// keep.
    pub fn is_episode(&self) -> bool {
        [CLAMPED, BELOW_BAND, ABOVE_BAND].contains(&self.reason)
    }

    fn normal(reason: &'static str, note: String) -> Note {
        Note {
            warning: false,
            reason,
            note,
        }
    }

    fn warning(reason: &'static str, note: String) -> Note {
        Note {
            warning: true,
            reason,
            note,
        }
    }
}

/// What one reconcile of a view writes, in this order: the view's
/// finalizers (added before anything else, removed last), the target's
/// locks, the target's role replicas, the view's status; then the Events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    /// The view's new `metadata.finalizers`, when they change.
    pub finalizers: Option<Vec<String>>,
    /// The target's new `status.scaleViews`, when they change.
    pub locks: Option<Vec<ScaleViewLock>>,
    /// Roles of the target whose replicas change.
    pub roles: Vec<RoleScale>,
    /// The view's next status (None while the view is being deleted).
    pub status: Option<ScaleViewStatus>,
    pub events: Vec<Note>,
}

/// The JSON Patch that scales `roles` in the target's spec: before each
/// replace, a `test` that `spec.roles[i]` still is the role, so a spec
/// reordered since it was read fails the patch instead of scaling the
/// wrong role.
pub fn role_patch(roles: &[RoleScale]) -> Result<json_patch::Patch, String> {
    let mut ops = Vec::new();
    for scale in roles {
        ops.push(json!({"op": "test", "path": format!("/spec/roles/{}/name", scale.index), "value": scale.role}));
        // `add` sets a member that is missing and replaces one that is there.
        let op = if scale.from.is_some() {
            "replace"
        } else {
            "add"
        };
        ops.push(json!({"op": op, "path": format!("/spec/roles/{}/replicas", scale.index), "value": scale.to}));
    }
    serde_json::from_value(serde_json::Value::Array(ops))
        .map_err(|e| format!("could not build the role patch: {e}"))
}

/// Decides one reconcile of `view`, whose target (by `spec.targetRef.name`,
/// in the view's namespace) is `target`, kept within `band` if a group gives
/// it one: release on deletion ([`on_deletion`]), else hold the finalizer,
/// refuse what cannot be applied ([`blocker`]), split and lock, scale the
/// roles that differ ([`role_scales`]) and report ([`applied_status`]).
pub fn reconcile(
    view: &ScaleView,
    target: Option<&InferenceService>,
    band: Option<&Band>,
    now: &Time,
) -> Pass {
    let name = name_of(view);
    let uid = uid_of(view);
    let finalizers = view.metadata.finalizers.clone().unwrap_or_default();
    let (held, others) = locks_of(target, name, uid);
    let target_name = view.spec.target_ref.name.as_str();

    if view.metadata.deletion_timestamp.is_some() {
        return on_deletion(held, others, finalizers, target_name);
    }
    let mut pass = Pass::default();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        let mut next = finalizers;
        next.push(FINALIZER.to_owned());
        pass.finalizers = Some(next);
    }

    let previous = view.status.clone().unwrap_or_default();
    let spec = &view.spec;
    let groups: Vec<&str> = spec.groups().into_iter().collect();
    let selector = split::selector(
        target_name,
        spec.target_ref.component_type.as_str(),
        &groups,
    );
    let ready_of = |group: &str| -> i32 {
        target
            .and_then(|t| t.status.as_ref())
            .and_then(|s| s.components.get(group))
            .map_or(0, |c| c.ready_replicas.max(0))
    };
    let ready_total = groups
        .iter()
        .fold(0i32, |sum, g| sum.saturating_add(ready_of(g)));
    let conditions = Conditions {
        previous: &previous.conditions,
        generation: view.metadata.generation,
        now,
    };

    let Some(target) = target else {
        let message = format!("InferenceService {target_name} not found in this namespace");
        return blocked(
            &conditions,
            ready_total,
            selector,
            ("TargetNotFound", message),
            pass,
        );
    };
    if let Some(why) = blocker(spec, target, name, uid, &groups) {
        return blocked(&conditions, ready_total, selector, why, pass);
    }

    let requested = spec.replicas.unwrap_or_else(|| current_total(spec, target));
    let split = split::split_in(spec, requested, band.map(|b| (b.min, b.max)));
    let shares = shares(&split.groups);
    let lock = view_lock(view, &split);
    let asked = match spec.replicas {
        Some(replicas) => format!("spec.replicas {replicas}"),
        None => format!("the groups' current {requested} replicas (spec.replicas is unset)"),
    };
    if held != Some(&lock) {
        relock(
            &mut pass,
            (held, others),
            &lock,
            (target_name, &asked, &shares),
        );
    }
    let (clamped_reason, clamped_message) = clamped_condition(spec, &split, band);
    pass.events.extend(clamp_episode(
        &previous.conditions,
        split.clamped,
        (clamped_reason, &clamped_message),
    ));
    pass.roles = role_scales(target, &split);
    pass.events
        .extend(scaled_note(&pass.roles, (target_name, &asked, &shares)));

    let group_status: Vec<GroupReplicas> = split
        .groups
        .iter()
        .map(|(group, replicas)| GroupReplicas {
            group: group.clone(),
            replicas: *replicas,
            ready_replicas: ready_of(group),
        })
        .collect();
    let locked = format!(
        "roles {} of InferenceService {target_name} change only through this view",
        groups.join(", ")
    );
    pass.status = Some(applied_status(
        &conditions,
        (&split, band, clamped_reason, clamped_message),
        group_status,
        locked,
        (ready_total, selector),
    ));
    pass
}

/// One Event per episode: when the view starts to clamp, or clamps at
/// another bound; not again while the same bound holds it (`previous`, the
/// stored conditions, says which held it).
fn clamp_episode(
    previous: &[Condition],
    clamped: bool,
    (reason, message): (&'static str, &str),
) -> Option<Note> {
    let was = previous.iter().find(|c| c.type_ == "Clamped");
    (clamped && was.is_none_or(|c| c.status != "True" || c.reason != reason))
        .then(|| Note::warning(reason, message.to_owned()))
}

/// The Clamped condition's reason and message for `split`.
fn clamped_condition(
    spec: &ScaleViewSpec,
    split: &split::Split,
    band: Option<&Band>,
) -> (&'static str, String) {
    let applied = format!(
        "requested {} replicas, applied {}",
        split.requested, split.total
    );
    match (split.bound, band) {
        (Some(split::Bound::BandMin), Some(band)) => (
            BELOW_BAND,
            format!("{applied}: raised to the lower end of {}", band.describe()),
        ),
        (Some(split::Bound::BandMax), Some(band)) => (
            ABOVE_BAND,
            format!("{applied}: lowered to the upper end of {}", band.describe()),
        ),
        (Some(_), _) => (CLAMPED, clamp_message(spec, split)),
        (None, Some(band)) => (
            "WithinRange",
            format!(
                "{} replicas split as asked, within {}",
                split.total,
                band.describe()
            ),
        ),
        (None, None) => (
            "WithinRange",
            format!("{} replicas split as asked", split.total),
        ),
    }
}

/// The lock this view (`name`, `uid`) holds on `target`, if any, and the
/// other views' locks.
fn locks_of<'a>(
    target: Option<&'a InferenceService>,
    name: &str,
    uid: &str,
) -> (Option<&'a ScaleViewLock>, Vec<ScaleViewLock>) {
    let current_locks: &[ScaleViewLock] = target
        .and_then(|t| t.status.as_ref())
        .map_or(&[], |s| s.scale_views.as_slice());
    let this = |lock: &ScaleViewLock| lock.name == name && lock.uid == uid;
    (
        current_locks.iter().find(|lock| this(lock)),
        current_locks
            .iter()
            .filter(|lock| !this(lock))
            .cloned()
            .collect(),
    )
}

/// The lock entry `view` holds on its target's roles for `split`.
fn view_lock(view: &ScaleView, split: &split::Split) -> ScaleViewLock {
    ScaleViewLock {
        name: name_of(view).to_owned(),
        uid: uid_of(view).to_owned(),
        generation: view.metadata.generation.unwrap_or(0),
        role_replicas: split
            .groups
            .iter()
            .map(|(role, replicas)| RoleReplicas {
                role: role.clone(),
                replicas: *replicas,
            })
            .collect(),
    }
}

/// Writes the view's new lock into the target's locks (`others` are the
/// other views'), with an Event saying it locked or updated, and the clamp
/// warning when the split was clamped.
fn relock(
    pass: &mut Pass,
    (held, others): (Option<&ScaleViewLock>, Vec<ScaleViewLock>),
    lock: &ScaleViewLock,
    (target_name, asked, shares): (&str, &str, &str),
) {
    let mut next = others;
    next.push(lock.clone());
    next.sort_by(|a, b| a.name.cmp(&b.name).then(a.uid.cmp(&b.uid)));
    pass.locks = Some(next);
    let note = match held {
        None => format!(
            "locked roles {shares} of InferenceService {target_name}: {asked} split by priority"
        ),
        Some(old) => format!(
            "updated the lock on InferenceService {target_name} to generation {} ({shares}, was {}): {asked} split by priority",
            lock.generation,
            lock_roles(old)
        ),
    };
    pass.events.push(Note::normal(
        if held.is_none() {
            "Locked"
        } else {
            "LockUpdated"
        },
        note,
    ));
}

/// One Event for all roles scaled: the recorder folds repeats of a reason
/// into one series, which would hide all but the first role.
fn scaled_note(
    roles: &[RoleScale],
    (target_name, asked, shares): (&str, &str, &str),
) -> Option<Note> {
    if roles.is_empty() {
        return None;
    }
    let scaled: Vec<String> = roles
        .iter()
        .map(|r| {
            let from = r.from.unwrap_or(Role::DEFAULT_REPLICAS);
            format!("{} from {from} to {}", r.role, r.to)
        })
        .collect();
    Some(Note::normal(
        "Scaled",
        format!(
            "scaled roles of InferenceService {target_name}: {}: {asked} split by priority ({shares})",
            scaled.join(", ")
        ),
    ))
}

/// A view being deleted releases its lock (if it holds one) and then its
/// finalizer; nothing else is written.
fn on_deletion(
    held: Option<&ScaleViewLock>,
    others: Vec<ScaleViewLock>,
    finalizers: Vec<String>,
    target_name: &str,
) -> Pass {
    let mut pass = Pass::default();
    if let Some(lock) = held {
        pass.locks = Some(others);
        pass.events.push(Note::normal(
            "Released",
            format!(
                "released the lock on roles {} of InferenceService {target_name}: the ScaleView is being deleted",
                lock_roles(lock)
            ),
        ));
    }
    if finalizers.iter().any(|f| f == FINALIZER) {
        pass.finalizers = Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect());
    }
    pass
}

/// Why the view cannot be applied to its (existing) target, if it cannot:
/// a spec the webhook would deny, or roles another view holds.
fn blocker(
    spec: &ScaleViewSpec,
    target: &InferenceService,
    name: &str,
    uid: &str,
    groups: &[&str],
) -> Option<(&'static str, String)> {
    let mut findings = api_view::validate(spec);
    findings.extend(api_view::validate_target(spec, Some(target)));
    if !findings.is_allowed() {
        return Some(("InvalidSpec", findings.denial_message()));
    }
    let status_now = target.status.clone().unwrap_or_default();
    let conflicting = locks::conflicts(&status_now, name, uid, groups);
    if conflicting.is_empty() {
        return None;
    }
    let held_by: Vec<String> = conflicting
        .iter()
        .map(|(group, other)| format!("{group} by ScaleView {other}"))
        .collect();
    Some((
        "Conflict",
        format!(
            "roles of InferenceService {} are locked by another view: {}; delete that view first",
            spec.target_ref.name,
            held_by.join(", ")
        ),
    ))
}

/// The view cannot be applied: say why in status (and once in an Event,
/// when the reason or message changes).
fn blocked(
    conditions: &Conditions<'_>,
    ready_total: i32,
    selector: String,
    (reason, message): (&'static str, String),
    mut pass: Pass,
) -> Pass {
    let status = ScaleViewStatus {
        observed_generation: conditions.generation,
        conditions: vec![
            conditions.make(
                "Clamped",
                false,
                "NotSplit",
                "the view is not applied".to_owned(),
            ),
            conditions.make("Locked", false, reason, message.clone()),
            conditions.make("Ready", false, reason, message.clone()),
        ]
        .into_iter()
        .chain(conditions.refusal())
        .collect(),
        replicas: ready_total,
        selector: Some(selector),
        locked: false,
        groups: Vec::new(),
        applied_replicas: None,
        band: None,
    };
    let was = conditions.previous.iter().find(|c| c.type_ == "Ready");
    if was.is_none_or(|c| c.reason != reason || c.message != message) {
        pass.events.push(Note::warning(reason, message));
    }
    pass.status = Some(status);
    pass
}

/// The target's roles whose replicas differ from their share of `split`, in
/// the split's (group name) order; a group that is no role is left out.
fn role_scales(target: &InferenceService, split: &split::Split) -> Vec<RoleScale> {
    let mut scales = Vec::new();
    for (group, replicas) in &split.groups {
        let Some((index, role)) = target
            .spec
            .roles
            .iter()
            .enumerate()
            .find(|(_, r)| &r.name == group)
        else {
            continue;
        };
        if role.replicas() == *replicas {
            continue;
        }
        scales.push(RoleScale {
            index,
            role: group.clone(),
            from: role.replicas,
            to: *replicas,
        });
    }
    scales
}

/// The status of an applied view: Clamped, Locked True (`locked` says
/// which roles), Ready once every group has its replicas ready; the view's
/// replicas are `ready_total`, its pods found by `selector`.
fn applied_status(
    conditions: &Conditions<'_>,
    (split, band, clamped_reason, clamped_message): (&split::Split, Option<&Band>, &str, String),
    groups: Vec<GroupReplicas>,
    locked: String,
    (ready_total, selector): (i32, String),
) -> ScaleViewStatus {
    let waiting: Vec<String> = groups
        .iter()
        .filter(|g| g.ready_replicas != g.replicas)
        .map(|g| format!("{} {}/{}", g.group, g.ready_replicas, g.replicas))
        .collect();
    let clamped = conditions.make("Clamped", split.clamped, clamped_reason, clamped_message);
    let ready = if waiting.is_empty() {
        conditions.make(
            "Ready",
            true,
            "Ready",
            format!("{ready_total} of {} replicas ready", split.total),
        )
    } else {
        conditions.make(
            "Ready",
            false,
            "Scaling",
            format!(
                "{ready_total} of {} replicas ready; waiting for {}",
                split.total,
                waiting.join(", ")
            ),
        )
    };
    ScaleViewStatus {
        observed_generation: conditions.generation,
        conditions: vec![
            clamped,
            conditions.make("Locked", true, "Held", locked),
            ready,
        ]
        .into_iter()
        .chain(conditions.refusal())
        .collect(),
        replicas: ready_total,
        selector: Some(selector),
        locked: true,
        groups,
        // The split's total is within [Σmin, Σmax] of i32 shares; saturate
        // should a view the webhook never saw sum past i32::MAX.
        applied_replicas: Some(i32::try_from(split.total).unwrap_or(i32::MAX)),
        band: band.map(|b| api_view::ViewBand {
            resource_scaling_group: b.group.clone(),
            min_replicas: b.min,
            max_replicas: b.max,
        }),
    }
}

/// `a=2, b=0`: replicas per group, by group name.
fn shares(groups: &BTreeMap<String, i32>) -> String {
    groups
        .iter()
        .map(|(group, replicas)| format!("{group}={replicas}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn lock_roles(lock: &ScaleViewLock) -> String {
    lock.role_replicas
        .iter()
        .map(|r| format!("{}={}", r.role, r.replicas))
        .collect::<Vec<_>>()
        .join(", ")
}

fn clamp_message(spec: &ScaleViewSpec, split: &split::Split) -> String {
    let (min, max) = spec.replica_range();
    format!(
        "requested {} replicas, applied {}: the total must be within [{min}, {max}] (the sum of the groups' min and max constraints)",
        split.requested, split.total
    )
}

/// Builds conditions that keep their last transition time while their status
/// stays the same, so an unchanged world gives an unchanged status.
struct Conditions<'a> {
    previous: &'a [Condition],
    generation: Option<i64>,
    now: &'a Time,
}

impl Conditions<'_> {
    fn make(&self, type_: &str, is_true: bool, reason: &str, message: String) -> Condition {
        let status = if is_true { "True" } else { "False" };
        let since = self
            .previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| self.now.clone(), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: since,
            observed_generation: self.generation,
        }
    }

    /// A `/scale` the webhook refused at this generation, kept as it was
    /// written ([`refusal::carried`]).
    fn refusal(&self) -> Option<Condition> {
        refusal::carried(self.previous, self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn now() -> Time {
        Time("2026-11-21T10:00:00Z".parse().expect("test time parses"))
    }

    fn role(name: &str, component_type: &str, replicas: Option<i32>) -> Value {
        let mut role = json!({"name": name, "componentType": component_type,
            "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}}});
        if let Some(replicas) = replicas {
            role["replicas"] = json!(replicas);
        }
        role
    }

    /// spot-decode: prefill, decode-ondemand (1), decode-spot (0).
    fn target(locks: Value) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "spot-decode", "namespace": "default", "uid": "svc-uid"},
            "spec": {"roles": [
                role("prefill", "prefiller", Some(1)),
                role("decode-ondemand", "decoder", Some(1)),
                role("decode-spot", "decoder", Some(0)),
            ]},
            "status": {"scaleViews": locks,
                "components": {"decode-ondemand": {"desiredReplicas": 1, "readyReplicas": 1, "nodesPerReplica": 1, "totalPods": 1, "readyPods": 1, "phase": "Running"}}},
        }))
        .expect("test target parses")
    }

    fn view(replicas: Option<i32>, finalized: bool) -> ScaleView {
        let mut value = json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "spot-decode-sv", "namespace": "default", "uid": "view-uid", "generation": 2},
            "spec": {"targetRef": {"name": "spot-decode", "componentType": "decoder"},
                "scalePolicy": [
                    {"group": "decode-ondemand", "priority": 1, "constraints": {"max": 2}},
                    {"group": "decode-spot"},
                ]},
        });
        if let Some(replicas) = replicas {
            value["spec"]["replicas"] = json!(replicas);
        }
        if finalized {
            value["metadata"]["finalizers"] = json!([FINALIZER]);
        }
        serde_json::from_value(value).expect("test view parses")
    }

    fn lock(name: &str, uid: &str, generation: i64, roles: &[(&str, i32)]) -> Value {
        json!({"name": name, "uid": uid, "generation": generation,
            "roleReplicas": roles.iter().map(|(r, n)| json!({"role": r, "replicas": n})).collect::<Vec<_>>()})
    }

    /// Applies a pass to the view and target as the executor would.
    fn apply(view: &mut ScaleView, target: &mut InferenceService, pass: &Pass) {
        if let Some(finalizers) = &pass.finalizers {
            view.metadata.finalizers = Some(finalizers.clone());
        }
        if let Some(locks) = &pass.locks {
            target
                .status
                .get_or_insert_with(Default::default)
                .scale_views = locks.clone();
        }
        let mut object = serde_json::to_value(&*target).expect("target serialises");
        let patch = role_patch(&pass.roles).expect("patch builds");
        json_patch::patch(&mut object, &patch).expect("patch applies");
        *target = serde_json::from_value(object).expect("target parses");
        if pass.status.is_some() {
            view.status = pass.status.clone();
        }
    }

    fn replicas_of(target: &InferenceService) -> Vec<(String, i32)> {
        target
            .spec
            .roles
            .iter()
            .map(|r| (r.name.clone(), r.replicas()))
            .collect()
    }

    #[test]
    fn the_spot_example_at_one_two_and_four() {
        for (total, ondemand, spot) in [(1, 1, 0), (2, 2, 0), (4, 2, 2)] {
            let (mut view, mut target) = (view(Some(total), false), target(json!([])));
            let pass = reconcile(&view, Some(&target), None, &now());
            assert_eq!(pass.finalizers, Some(vec![FINALIZER.to_owned()]));
            apply(&mut view, &mut target, &pass);
            assert_eq!(
                replicas_of(&target),
                [
                    ("prefill".to_owned(), 1),
                    ("decode-ondemand".to_owned(), ondemand),
                    ("decode-spot".to_owned(), spot)
                ],
                "total {total}"
            );
            let locks = &target.status.as_ref().expect("status").scale_views;
            assert_eq!(locks.len(), 1);
            assert_eq!(locks[0].generation, 2);
            assert_eq!(locks[0].uid, "view-uid");
            let status = view.status.clone().expect("view status");
            assert!(status.locked);
            assert_eq!(status.replicas, 1, "decode-ondemand has one ready replica");
            assert_eq!(
                status.selector.as_deref(),
                Some(
                    "fusioninfer.io/service=spot-decode,fusioninfer.io/component-type=decoder,fusioninfer.io/role-name in (decode-ondemand,decode-spot)"
                )
            );
            // A second pass over the changed world writes nothing.
            let again = reconcile(&view, Some(&target), None, &now());
            assert_eq!(
                again,
                Pass {
                    status: view.status.clone(),
                    ..Pass::default()
                },
                "total {total}"
            );
        }
    }

    fn band(min: i32, max: i32) -> Band {
        Band {
            group: "pd-band".to_owned(),
            min,
            max,
            why: "ratio 2 to 4 of prefill-sv=2".to_owned(),
        }
    }

    /// The decode view's autoscaler asks 1, 2, 6, 20, 30 with a band of
    /// [4, 8]: below, the view applies 4; inside, exactly what was asked;
    /// above, 8. One Event per episode (entering a clamp, or the other end),
    /// none while the same end holds it; an unchanged world writes nothing.
    #[test]
    fn a_band_raises_and_lowers_what_was_asked_with_one_event_per_episode() {
        let (mut view, mut target) = (view(Some(1), true), target(json!([])));
        let band = band(4, 8);
        let mut generation = 2;
        let mut episodes = Vec::new();
        for (asked, applied, reason) in [
            (1, 4, BELOW_BAND),
            (2, 4, BELOW_BAND),
            (6, 6, "WithinRange"),
            (20, 8, ABOVE_BAND),
            (30, 8, ABOVE_BAND),
            (3, 4, BELOW_BAND),
        ] {
            generation += 1;
            view.metadata.generation = Some(generation);
            view.spec.replicas = Some(asked);
            let pass = reconcile(&view, Some(&target), Some(&band), &now());
            episodes.extend(
                pass.events
                    .iter()
                    .filter(|e| e.is_episode())
                    .map(|e| (asked, e.reason, e.note.clone())),
            );
            apply(&mut view, &mut target, &pass);
            let status = view.status.clone().expect("status");
            assert_eq!(status.applied_replicas, Some(applied), "asked {asked}");
            assert_eq!(current_total(&view.spec, &target), applied, "asked {asked}");
            let clamped = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Clamped")
                .expect("Clamped");
            assert_eq!(clamped.reason, reason, "asked {asked}");
            assert_eq!(
                clamped.status,
                if asked == applied { "False" } else { "True" }
            );
            assert_eq!(
                status.band,
                Some(api_view::ViewBand {
                    resource_scaling_group: "pd-band".to_owned(),
                    min_replicas: 4,
                    max_replicas: 8,
                })
            );
            let again = reconcile(&view, Some(&target), Some(&band), &now());
            assert_eq!(
                again,
                Pass {
                    status: view.status.clone(),
                    ..Pass::default()
                },
                "asked {asked}: an unchanged world writes nothing"
            );
        }
        assert_eq!(
            episodes,
            [
                (
                    1,
                    BELOW_BAND,
                    "requested 1 replicas, applied 4: raised to the lower end of the band [4, 8] of ResourceScalingGroup pd-band (ratio 2 to 4 of prefill-sv=2)".to_owned()
                ),
                (
                    20,
                    ABOVE_BAND,
                    "requested 20 replicas, applied 8: lowered to the upper end of the band [4, 8] of ResourceScalingGroup pd-band (ratio 2 to 4 of prefill-sv=2)".to_owned()
                ),
                (
                    3,
                    BELOW_BAND,
                    "requested 3 replicas, applied 4: raised to the lower end of the band [4, 8] of ResourceScalingGroup pd-band (ratio 2 to 4 of prefill-sv=2)".to_owned()
                ),
            ]
        );
    }

    /// A band the groups' constraints cannot hold: the groups win (a role's
    /// max is its own limit), and the Clamped condition names them.
    #[test]
    fn the_groups_constraints_win_over_a_band_outside_them() {
        let mut view = view(Some(1), true);
        view.spec.scale_policy[1].constraints = Some(api_view::Constraints {
            min: None,
            max: Some(1),
        });
        let pass = reconcile(&view, Some(&target(json!([]))), Some(&band(10, 12)), &now());
        let status = pass.status.expect("status");
        assert_eq!(status.applied_replicas, Some(3));
        let clamped = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Clamped")
            .expect("Clamped");
        assert_eq!(
            (clamped.status.as_str(), clamped.reason.as_str()),
            ("True", CLAMPED)
        );
    }

    #[test]
    fn unset_replicas_keep_the_current_sum() {
        let (mut view, mut target) = (view(None, true), target(json!([])));
        let pass = reconcile(&view, Some(&target), None, &now());
        assert!(pass.roles.is_empty(), "1 = 1/0 already: {:?}", pass.roles);
        assert_eq!(pass.events[0].reason, "Locked");
        assert!(
            pass.events[0]
                .note
                .contains("the groups' current 1 replicas (spec.replicas is unset)"),
            "{}",
            pass.events[0].note
        );
        apply(&mut view, &mut target, &pass);
        assert_eq!(current_total(&view.spec, &target), 1);
    }

    #[test]
    fn a_new_generation_updates_the_lock() {
        let (mut view, mut target) = (view(Some(2), true), target(json!([])));
        let first = reconcile(&view, Some(&target), None, &now());
        apply(&mut view, &mut target, &first);
        view.metadata.generation = Some(3);
        view.spec.replicas = Some(4);
        let pass = reconcile(&view, Some(&target), None, &now());
        let locks = pass.locks.clone().expect("lock rewritten");
        assert_eq!(locks[0].generation, 3);
        assert_eq!(pass.events[0].reason, "LockUpdated");
        assert_eq!(
            pass.roles,
            [RoleScale {
                index: 2,
                role: "decode-spot".to_owned(),
                from: Some(0),
                to: 2
            }]
        );
        assert_eq!(
            pass.events[1].note,
            "scaled roles of InferenceService spot-decode: decode-spot from 0 to 2: spec.replicas 4 split by priority (decode-ondemand=2, decode-spot=2)"
        );
    }

    #[test]
    fn another_views_lock_blocks_and_says_whose() {
        let target = target(json!([lock("other-sv", "o", 1, &[("decode-spot", 3)])]));
        let pass = reconcile(&view(Some(4), true), Some(&target), None, &now());
        assert_eq!(pass.locks, None);
        assert!(pass.roles.is_empty());
        let status = pass.status.expect("status");
        assert!(!status.locked);
        let locked = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Locked")
            .expect("Locked condition");
        assert_eq!(locked.reason, "Conflict");
        assert!(
            locked.message.contains("decode-spot by ScaleView other-sv"),
            "{}",
            locked.message
        );
        assert!(pass.events[0].warning);
    }

    #[test]
    fn a_missing_target_or_a_wrong_group_writes_nothing_to_the_target() {
        let missing = reconcile(&view(Some(2), true), None, None, &now());
        assert_eq!(missing.locks, None);
        assert_eq!(missing.events[0].reason, "TargetNotFound");
        let mut wrong = view(Some(2), true);
        wrong.spec.scale_policy[1].group = "prefill".to_owned();
        let pass = reconcile(&wrong, Some(&target(json!([]))), None, &now());
        assert_eq!((pass.locks, pass.roles.len()), (None, 0));
        assert_eq!(pass.events[0].reason, "InvalidSpec");
    }

    #[test]
    fn deletion_releases_the_lock_then_the_finalizer() {
        let mut target = target(json!([
            lock("spot-decode-sv", "view-uid", 2, &[("decode-ondemand", 1)]),
            lock("zone-sv", "z", 1, &[("prefill", 1)]),
        ]));
        let mut view = view(Some(1), true);
        view.metadata.deletion_timestamp = Some(now());
        let pass = reconcile(&view, Some(&target), None, &now());
        let locks = pass.locks.clone().expect("released");
        assert_eq!(locks.len(), 1);
        assert_eq!(locks[0].name, "zone-sv");
        assert_eq!(pass.finalizers, Some(vec![]));
        assert_eq!(pass.status, None);
        assert_eq!(pass.events[0].reason, "Released");
        apply(&mut view, &mut target, &pass);
        // Nothing left to do, even without a target.
        assert_eq!(
            reconcile(&view, Some(&target), None, &now()),
            Pass::default()
        );
        assert_eq!(reconcile(&view, None, None, &now()), Pass::default());
    }

    #[test]
    fn a_refused_scale_stays_in_status_for_its_generation_only() {
        let mut target = target(json!([]));
        let mut view = view(Some(1), true);
        let pass = reconcile(&view, Some(&target), None, &now());
        apply(&mut view, &mut target, &pass);
        // The webhook records a refused /scale at generation 2.
        let refused = refusal::Refusal {
            namespace: "default".into(),
            view: "spot-decode-sv".into(),
            requester: "hpa".into(),
            replicas: 9,
            reason: "spec.replicas: must be within [0, 3]".into(),
        };
        let conditions = refusal::record(&view, &refused, &now()).expect("new");
        view.status.as_mut().expect("a status").conditions = conditions;
        // The reconcile keeps it: the status it plans is the one stored
        // (the executor writes nothing), and nothing else moves.
        let pass = reconcile(&view, Some(&target), None, &now());
        assert_eq!(pass.status, view.status);
        assert!(pass.events.is_empty() && pass.roles.is_empty(), "{pass:?}");
        // A new spec: the refusal was about the old one, and goes.
        view.metadata.generation = Some(3);
        view.spec.replicas = Some(2);
        let status = reconcile(&view, Some(&target), None, &now())
            .status
            .expect("a new status");
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.type_ != refusal::SCALE_REFUSED),
            "{status:?}"
        );
    }

    #[test]
    fn clamping_is_reported() {
        let mut view = view(Some(9), true);
        view.spec.scale_policy[1].constraints = Some(api_view::Constraints {
            min: None,
            max: Some(3),
        });
        let pass = reconcile(&view, Some(&target(json!([]))), None, &now());
        let status = pass.status.expect("status");
        let clamped = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Clamped")
            .expect("Clamped condition");
        assert_eq!(clamped.status, "True");
        assert_eq!(
            clamped.message,
            "requested 9 replicas, applied 5: the total must be within [0, 5] (the sum of the groups' min and max constraints)"
        );
        assert!(
            pass.events
                .iter()
                .any(|e| e.reason == "Clamped" && e.warning)
        );
    }

    #[test]
    fn role_patches_test_the_name_first() {
        let patch = role_patch(&[
            RoleScale {
                index: 2,
                role: "decode-spot".to_owned(),
                from: Some(0),
                to: 2,
            },
            RoleScale {
                index: 1,
                role: "decode-ondemand".to_owned(),
                from: None,
                to: 2,
            },
        ])
        .expect("builds");
        assert_eq!(
            serde_json::to_value(&patch).expect("serialises"),
            json!([
                {"op": "test", "path": "/spec/roles/2/name", "value": "decode-spot"},
                {"op": "replace", "path": "/spec/roles/2/replicas", "value": 2},
                {"op": "test", "path": "/spec/roles/1/name", "value": "decode-ondemand"},
                {"op": "add", "path": "/spec/roles/1/replicas", "value": 2},
            ])
        );
        // A reordered spec makes the patch fail instead of scaling the wrong role.
        let mut reordered = serde_json::to_value(target(json!([]))).expect("serialises");
        if let Some(roles) = reordered["spec"]["roles"].as_array_mut() {
            roles.reverse();
        }
        assert!(json_patch::patch(&mut reordered, &patch).is_err());
    }

    #[test]
    fn stale_locks_are_dropped() {
        let locks: Vec<ScaleViewLock> = serde_json::from_value(json!([
            lock("spot-decode-sv", "view-uid", 2, &[("decode-spot", 1)]),
            lock("gone-sv", "g", 1, &[("prefill", 1)]),
            lock("recreated-sv", "old", 1, &[("decode-ondemand", 1)]),
        ]))
        .expect("locks parse");
        let mut recreated = view(None, true);
        recreated.metadata.name = Some("recreated-sv".to_owned());
        recreated.metadata.uid = Some("new".to_owned());
        let views = [view(None, true), recreated];
        let live = live_locks("spot-decode", &locks, &views);
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].name, "spot-decode-sv");
        // A view of the same name and uid that targets another service does
        // not keep this service's entry.
        assert!(live_locks("other", &locks, &views).is_empty());
    }

    proptest! {
        /// Whatever the total and the ready replicas, a pass applied once
        /// leaves nothing for the next pass to write, and the role replicas
        /// equal the lock.
        #[test]
        fn one_pass_settles(total in 0..12i32, ondemand in 0..4i32, spot in 0..4i32) {
            let mut target = target(json!([]));
            target.spec.roles[1].replicas = Some(ondemand);
            target.spec.roles[2].replicas = Some(spot);
            let mut view = view(Some(total), false);
            let pass = reconcile(&view, Some(&target), None, &now());
            apply(&mut view, &mut target, &pass);
            let again = reconcile(&view, Some(&target), None, &now());
            prop_assert!(again.locks.is_none() && again.roles.is_empty() && again.events.is_empty());
            let locks = target.status.clone().unwrap_or_default().scale_views;
            for locked in &locks[0].role_replicas {
                let role = target.spec.roles.iter().find(|r| r.name == locked.role);
                prop_assert_eq!(role.map(|r| r.replicas()), Some(locked.replicas));
            }
            prop_assert_eq!(current_total(&view.spec, &target), total);
        }
    }

    #[test]
    fn role_scales_lists_only_roles_whose_replicas_differ() {
        let split = split::Split {
            total: 5,
            requested: 5,
            clamped: false,
            bound: None,
            groups: BTreeMap::from([
                ("decode-ondemand".to_owned(), 1),
                ("decode-spot".to_owned(), 4),
                ("no-such-role".to_owned(), 0),
            ]),
        };
        assert_eq!(
            role_scales(&target(json!([])), &split),
            vec![RoleScale {
                index: 2,
                role: "decode-spot".to_owned(),
                from: Some(0),
                to: 4,
            }]
        );
    }
}
