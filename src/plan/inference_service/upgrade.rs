//! Incremental upgrade (seed 004, DESIGN.md §1.5): how capacity and traffic
//! move from the active revision to the pending one, a step at a time, so an
//! upgrade never needs twice the GPUs.
//!
//! A revision's *capacity* is the percent of the desired replicas it is scaled
//! to ([`replicas_for`]); its *traffic* is its weight on the HTTPRoute
//! ([`weights`]). Each call of [`step`] (or [`rollback_step`]) looks at both
//! revisions and says what moves next; the reconciler applies it, observes the
//! result and calls again. Nothing here reads the clock: `now` is passed in.
//!
//! [`plan::inference_service::rollout`](super::rollout) calls it once per reconcile with the
//! revisions of `status.upgrade`; NewRevision runs the same machine at full
//! surge with traffic moving all at once ([`Pace::AllAtOnce`]).
//!
//! The state machine is KubeRay's `NewClusterWithIncrementalUpgrade`, read in
//! `ray-project/kuberay`, `ray-operator/controllers/ray/rayservice_controller.go`
//! (commit caf57e18): `checkIfNeedTargetCapacityUpdate` (the Gateway and route
//! gates and the end state), `reconcileServeTargetCapacity` (the capacity step)
//! and `calculateTrafficRoutedPercent` (the traffic step), with the cases of
//! `TestReconcileServeTargetCapacity` and `TestCreateHTTPRoute` in
//! `rayservice_controller_unit_test.go` as tests below. Rollback follows the
//! seed's "Rollback Support". Where Tandem differs, the doc comment says so.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::Findings;
use crate::api::inference_service::{
    IncrementalUpgradeOptions, RevisionStatus, UpgradeStatus, UpgradeStrategy, UpgradeType,
    validate_upgrade,
};

/// The replicas a role with `desired` replicas runs at `capacity_percent`:
/// `ceil(desired × percent / 100)`, at least 1 while both are above 0, and 0
/// at 0 percent. The percent is clamped to 0..=100 and a negative `desired`
/// counts as 0, so any input gives an answer between 0 and `desired`.
pub fn replicas_for(desired: i32, capacity_percent: i32) -> i32 {
    let desired = i64::from(desired.max(0));
    let percent = i64::from(capacity_percent.clamp(0, 100));
    // desired <= i32::MAX and percent <= 100: exact in an i64.
    let replicas = desired.saturating_mul(percent).saturating_add(99) / 100;
    // replicas <= desired <= i32::MAX, so the conversion always succeeds.
    i32::try_from(replicas).unwrap_or(i32::MAX)
}

/// The share of the traffic a revision's ready replicas can carry, from each
/// serving role's `(ready replicas, desired replicas)` where `desired` is the
/// role's full count (its replicas at 100 % capacity): the smallest
/// `floor(ready × 100 / desired)` over the roles, clamped to 0..=100. Rounding
/// down keeps traffic off replicas that are not there, and a revision scaled
/// to `replicas_for(desired, c)` with every replica ready always covers `c`.
/// Roles with no desired replicas do not limit the share; when no role has
/// any, nothing is ready and the share is 0.
pub fn ready_percent(roles: impl IntoIterator<Item = (i32, i32)>) -> i32 {
    roles
        .into_iter()
        .filter(|&(_, desired)| desired > 0)
        .map(|(ready, desired)| {
            // desired > 0 (filtered above), and ready × 100 fits an i64.
            let share = i64::from(ready.max(0))
                .saturating_mul(100)
                .checked_div(i64::from(desired))
                .unwrap_or(0);
            // Clamped to 0..=100 first, so the conversion always succeeds.
            i32::try_from(share.clamp(0, 100)).unwrap_or(100)
        })
        .min()
        .unwrap_or(0)
}

/// One revision as the state machine sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    /// The revision hash (`fusioninfer.io/revision`).
    pub name: String,
    /// Percent of the desired replicas this revision is scaled to.
    pub target_capacity: i32,
    /// Percent of the traffic routed to this revision.
    pub traffic: i32,
    /// When traffic last moved between the revisions.
    pub last_traffic_move: Option<Timestamp>,
    /// Share of the desired replicas of this revision that are ready, 0..=100
    /// ([`ready_percent`]).
    pub ready_percent: i32,
}

impl Revision {
    /// A revision at `target_capacity` and `traffic`, with nothing ready and no
    /// traffic moved yet: `Revision::at(spec_revision, 0, 0)` is the pending
    /// revision of a fresh upgrade.
    pub fn at(name: impl Into<String>, target_capacity: i32, traffic: i32) -> Self {
        Self {
            name: name.into(),
            target_capacity,
            traffic,
            last_traffic_move: None,
            ready_percent: 0,
        }
    }

    /// The revision recorded in the service's status, with its observed
    /// readiness.
    pub fn from_status(status: &RevisionStatus, ready_percent: i32) -> Self {
        Self {
            name: status.revision.clone(),
            target_capacity: status.target_capacity,
            traffic: status.traffic_routed_percent,
            last_traffic_move: status.last_traffic_move_time.as_ref().map(|t| t.0),
            ready_percent,
        }
    }

    /// What the service's status records of this revision.
    pub fn to_status(&self) -> RevisionStatus {
        RevisionStatus {
            revision: self.name.clone(),
            target_capacity: self.target_capacity,
            traffic_routed_percent: self.traffic,
            last_traffic_move_time: self.last_traffic_move.map(Time),
        }
    }

    fn is_whole(&self) -> bool {
        self.target_capacity == 100 && self.traffic == 100
    }
}

/// What the Gateway and the HTTPRoute report. KubeRay moves nothing until the
/// Gateway is Accepted and Programmed (`IsGatewayReady`) and the route's
/// parent status for that Gateway is Accepted with ResolvedRefs
/// (`IsHTTPRouteReady`): weights on a route nobody programmed move no traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gateway {
    pub accepted: bool,
    pub programmed: bool,
    pub route_accepted: bool,
    pub route_resolved_refs: bool,
}

impl Gateway {
    /// Every condition true.
    pub const READY: Gateway = Gateway {
        accepted: true,
        programmed: true,
        route_accepted: true,
        route_resolved_refs: true,
    };
}

/// Why nothing moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The options break `spec.upgradeStrategy`'s rules (the reason names the field).
    InvalidOptions,
    /// The Gateway is not Accepted and Programmed.
    GatewayNotReady,
    /// The HTTPRoute's parent is not Accepted with ResolvedRefs.
    RouteNotReady,
    /// The revision gaining traffic has no more ready replicas to take it.
    Readiness,
    /// The next traffic step is due at this time (`intervalSeconds` after the last).
    Interval { due: Timestamp },
}

/// What a step changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    Nothing(Wait),
    /// One revision's target capacity changed.
    Capacity,
    /// The traffic weights changed (and both revisions' `last_traffic_move`).
    Traffic,
    /// The upgrade (or rollback) is complete: one revision carries all traffic
    /// at full capacity ([`Step::survivor`]) and the other can be removed.
    Done,
}

/// The next state of both revisions, what moved, and why (the message of the
/// Event the reconciler records).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub active: Revision,
    pub pending: Revision,
    pub moved: Moved,
    pub reason: String,
}

impl Step {
    /// The revision that stays once the step is [`Moved::Done`]: the pending
    /// one after an upgrade, the active one after a rollback.
    pub fn survivor(&self) -> Option<&Revision> {
        match self.moved {
            Moved::Done if self.pending.is_whole() => Some(&self.pending),
            Moved::Done => Some(&self.active),
            _ => None,
        }
    }
}

/// What the spec's revision asks of an upgrade in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// There is no active revision: the spec's revision becomes active at
    /// 100 % capacity and traffic (nothing to move traffic from).
    Install,
    /// The spec is the active revision and nothing is pending.
    Steady,
    /// The spec is a new revision and nothing is pending: it becomes pending
    /// at `Revision::at(spec, 0, 0)` and [`step`] moves it forward.
    Start,
    /// The spec is the pending revision: keep calling [`step`].
    Continue,
    /// The spec went back to the active revision: call [`rollback_step`] until
    /// done, then remove the pending revision.
    RollBack,
    /// The spec is neither revision: roll back first (as [`Direction::RollBack`]);
    /// once the pending revision is gone this becomes [`Direction::Start`].
    RollBackThenStart,
}

/// Whether to continue, roll back or start, from the spec's revision and the
/// status's active and pending revisions (seed 004, "Rollback Support"). A
/// pending revision recorded with the active revision's name is no upgrade and
/// is ignored; a status with a pending but no active revision installs the
/// spec's revision, as there is no traffic to keep.
pub fn direction(spec_revision: &str, status: Option<&UpgradeStatus>) -> Direction {
    let active = status.and_then(|s| s.active.as_ref());
    let pending = status
        .and_then(|s| s.pending.as_ref())
        .filter(|p| active.is_none_or(|a| a.revision != p.revision));
    match (active, pending) {
        (None, _) => Direction::Install,
        (Some(a), None) if a.revision == spec_revision => Direction::Steady,
        (Some(_), None) => Direction::Start,
        (Some(a), Some(_)) if a.revision == spec_revision => Direction::RollBack,
        (Some(_), Some(p)) if p.revision == spec_revision => Direction::Continue,
        (Some(_), Some(_)) => Direction::RollBackThenStart,
    }
}

/// The HTTPRoute's backends: each revision with its weight. The weights come
/// from the pending revision's traffic (clamped to 0..=100) and always sum to
/// 100; the pending backend is listed even at weight 0, as KubeRay's
/// `createHTTPRoute` does, so the route is ready before traffic moves.
pub fn weights(active: &Revision, pending: Option<&Revision>) -> Vec<(String, i32)> {
    match pending {
        None => vec![(active.name.clone(), 100)],
        Some(pending) => {
            let moved = pending.traffic.clamp(0, 100);
            vec![
                (active.name.clone(), 100i32.saturating_sub(moved)),
                (pending.name.clone(), moved),
            ]
        }
    }
}

/// One step of the upgrade from `active` to `pending`.
///
/// - Nothing moves while the options are invalid (the rules of
///   `validate_upgrade`, the webhook's) or the Gateway or route is not ready.
/// - Done when the active revision is at 0/0 and the pending one at 100/100.
/// - Capacity step, only once the pending traffic has caught up with the
///   pending capacity: while both capacities sum to at most 100, the pending
///   capacity rises by `maxSurgePercent` (capped at 100); above 100, the
///   active capacity falls by `maxSurgePercent` (floored at 0). This is
///   KubeRay's rule exactly, including its test case 80 + 30 → 60, where the
///   active revision ends below the 70 % traffic it still carries.
/// - Traffic step, once `intervalSeconds` have passed since the pending
///   revision's last traffic move (at once when there was none): the pending
///   weight rises by `stepSizePercent` up to its capacity and — Tandem's
///   safety rule, beyond KubeRay — only as far as its ready share covers, so
///   traffic never goes to replicas that are not ready. The active weight is
///   100 minus the pending weight.
///
/// Order: a capacity step needs traffic equal to capacity and a traffic step
/// needs it below, so the two are never due in the same state. KubeRay's
/// reconcile runs the capacity step first (`reconcileServe` →
/// `reconcileServeTargetCapacity`) and then the traffic step against the raised
/// capacity (`reconcileHTTPRoute` → `calculateTrafficRoutedPercent`) in the
/// same pass. Tandem checks them in that order but makes one move per call:
/// the traffic that follows a capacity rise comes on the next call, after the
/// reconciler has scaled the revision and observed which replicas are ready.
///
/// The inputs are clamped to 0..=100 and the pending traffic is authoritative
/// (the active traffic is taken as 100 minus it), so any input gives weights
/// that sum to 100 and capacities in 0..=100.
pub fn step(
    options: &IncrementalUpgradeOptions,
    active: &Revision,
    pending: &Revision,
    gateway: &Gateway,
    now: Timestamp,
) -> Step {
    Pace::Incremental(options.clone()).step(active, pending, gateway, now)
}

/// One step of rolling back to `active` when the spec returns to it: the
/// steps of [`step`] in reverse, until the active revision is at 100/100 and
/// the pending one at 0/0 (then it is removed). The active revision gains: its
/// capacity rises when its traffic has caught up and both sum to at most 100,
/// otherwise the pending capacity falls; its weight rises by `stepSizePercent`
/// per interval up to its capacity and ready share.
///
/// The pending revision's readiness is never consulted, so an unhealthy
/// pending revision can always be rolled back from.
///
/// One rule beyond the mirror image: the pending capacity never falls below
/// the traffic it still carries. A rollback starts wherever the upgrade
/// stood, and the plain mirror would cut capacity under live traffic: with
/// maxSurgePercent 30 an upgrade passes through active 10/10, pending 100/90,
/// and the mirror would drop the pending revision to 70 % of its replicas
/// while it serves 90 % of the traffic. The floor never stalls a rollback:
/// when the active traffic equals its capacity and the capacities sum above
/// 100, the pending capacity is above its traffic.
pub fn rollback_step(
    options: &IncrementalUpgradeOptions,
    active: &Revision,
    pending: &Revision,
    gateway: &Gateway,
    now: Timestamp,
) -> Step {
    Pace::Incremental(options.clone()).rollback_step(active, pending, gateway, now)
}

/// How an upgrade moves: IncrementalUpgrade's steps, or NewRevision's
/// blue/green, which is the same machine with `maxSurgePercent` 100,
/// `stepSizePercent` 100, no interval, and traffic that moves only once the
/// gaining revision's replicas are all ready: the pending revision is brought
/// to full size, takes all traffic at once when it is ready, and then the
/// active revision is scaled to 0 and removed. A rollback before the switch
/// drops the pending revision; after it, traffic switches back at once.
#[derive(Clone, Debug, PartialEq)]
pub enum Pace {
    Incremental(IncrementalUpgradeOptions),
    AllAtOnce,
}

impl Pace {
    /// The next step towards the pending revision ([`step`]).
    pub fn step(
        &self,
        active: &Revision,
        pending: &Revision,
        gateway: &Gateway,
        now: Timestamp,
    ) -> Step {
        advance(self.settings(), active, pending, gateway, now, Way::Forward)
    }

    /// The next step back to the active revision ([`rollback_step`]).
    pub fn rollback_step(
        &self,
        active: &Revision,
        pending: &Revision,
        gateway: &Gateway,
        now: Timestamp,
    ) -> Step {
        advance(self.settings(), active, pending, gateway, now, Way::Back)
    }

    fn settings(&self) -> Result<Settings, String> {
        match self {
            Pace::Incremental(options) => settings(options),
            Pace::AllAtOnce => Ok(Settings {
                surge: 100,
                step_size: 100,
                interval: SignedDuration::ZERO,
                all_at_once: true,
            }),
        }
    }
}

/// Which revision gains capacity and traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// The pending revision gains ([`step`]).
    Forward,
    /// The active revision gains ([`rollback_step`]).
    Back,
}

/// The options a step needs, once they pass the webhook's rules.
struct Settings {
    surge: i32,
    step_size: i32,
    interval: SignedDuration,
    /// Traffic moves only when the gaining revision's ready replicas cover
    /// the whole new share (NewRevision), not as far as they cover it.
    all_at_once: bool,
}

fn settings(options: &IncrementalUpgradeOptions) -> Result<Settings, String> {
    let strategy = UpgradeStrategy {
        type_: Some(UpgradeType::IncrementalUpgrade),
        incremental_upgrade_options: Some(options.clone()),
        rolling_update: None,
    };
    let mut findings = Findings::default();
    validate_upgrade(&strategy, &mut findings);
    // validate_upgrade denies a missing stepSizePercent or intervalSeconds, so
    // a clean result always has both.
    match (
        findings.is_allowed(),
        options.step_size_percent,
        options.interval_seconds,
    ) {
        (true, Some(step_size), Some(interval)) => Ok(Settings {
            surge: options
                .max_surge_percent
                .unwrap_or(IncrementalUpgradeOptions::DEFAULT_MAX_SURGE_PERCENT),
            step_size,
            interval: SignedDuration::from_secs(i64::from(interval)),
            all_at_once: false,
        }),
        _ => Err(findings.denial_message()),
    }
}

/// Both revisions with every percent in 0..=100 and weights that sum to 100.
fn normalized(active: &Revision, pending: &Revision) -> (Revision, Revision) {
    let mut pending = pending.clone();
    pending.target_capacity = pending.target_capacity.clamp(0, 100);
    pending.traffic = pending.traffic.clamp(0, 100);
    pending.ready_percent = pending.ready_percent.clamp(0, 100);
    let mut active = active.clone();
    active.target_capacity = active.target_capacity.clamp(0, 100);
    active.traffic = 100i32.saturating_sub(pending.traffic);
    active.ready_percent = active.ready_percent.clamp(0, 100);
    (active, pending)
}

fn advance(
    settings: Result<Settings, String>,
    active: &Revision,
    pending: &Revision,
    gateway: &Gateway,
    now: Timestamp,
    way: Way,
) -> Step {
    let (mut active, mut pending) = normalized(active, pending);
    let hold = |active: Revision, pending: Revision, wait: Wait, reason: String| Step {
        active,
        pending,
        moved: Moved::Nothing(wait),
        reason,
    };
    let settings = match settings {
        Ok(settings) => settings,
        Err(denial) => return hold(active, pending, Wait::InvalidOptions, denial),
    };
    if let Some((wait, reason)) = gateway_wait(gateway) {
        return hold(active, pending, wait, reason);
    }

    let last_move = pending.last_traffic_move;
    let (gainer, loser) = match way {
        Way::Forward => (&mut pending, &mut active),
        Way::Back => (&mut active, &mut pending),
    };

    if let Some(reason) = finished(gainer, loser, way) {
        return Step {
            active,
            pending,
            moved: Moved::Done,
            reason,
        };
    }

    if gainer.traffic == gainer.target_capacity {
        let reason = move_capacity(&settings, gainer, loser, way);
        return Step {
            active,
            pending,
            moved: Moved::Capacity,
            reason,
        };
    }

    let goal = traffic_goal(&settings, gainer);
    if goal == gainer.traffic {
        let reason = format!(
            "waiting for revision {}: its ready replicas cover {}% of the traffic, it carries {}% and is scaled for {}%",
            gainer.name, gainer.ready_percent, gainer.traffic, gainer.target_capacity
        );
        return hold(active, pending, Wait::Readiness, reason);
    }
    if let Some(due) = interval_due(&settings, last_move, now) {
        let reason = format!(
            "next traffic step to revision {} at {due} (intervalSeconds {})",
            gainer.name,
            settings.interval.as_secs()
        );
        return hold(active, pending, Wait::Interval { due }, reason);
    }
    let from = gainer.traffic;
    gainer.traffic = goal;
    loser.traffic = 100i32.saturating_sub(goal);
    let reason = format!(
        "moved traffic to revision {} from {from}% to {goal}%; revision {} keeps {}%",
        gainer.name, loser.name, loser.traffic
    );
    active.last_traffic_move = Some(now);
    pending.last_traffic_move = Some(now);
    Step {
        active,
        pending,
        moved: Moved::Traffic,
        reason,
    }
}

/// What the upgrade waits for before anything moves: the Gateway, then the
/// HTTPRoute; `None` when both are ready.
fn gateway_wait(gateway: &Gateway) -> Option<(Wait, String)> {
    if !(gateway.accepted && gateway.programmed) {
        let reason = format!(
            "waiting for the Gateway: Accepted={}, Programmed={}",
            gateway.accepted, gateway.programmed
        );
        return Some((Wait::GatewayNotReady, reason));
    }
    if !(gateway.route_accepted && gateway.route_resolved_refs) {
        let reason = format!(
            "waiting for the HTTPRoute: parent Accepted={}, ResolvedRefs={}",
            gateway.route_accepted, gateway.route_resolved_refs
        );
        return Some((Wait::RouteNotReady, reason));
    }
    None
}

/// The reason the upgrade (or rollback) is over: the gaining revision serves
/// all traffic at full capacity and the losing one is scaled to nothing.
fn finished(gainer: &Revision, loser: &Revision, way: Way) -> Option<String> {
    if !(gainer.is_whole() && loser.target_capacity == 0) {
        return None;
    }
    Some(match way {
        Way::Forward => format!(
            "upgrade to revision {} complete: it serves all traffic at full capacity; revision {} can be removed",
            gainer.name, loser.name
        ),
        Way::Back => format!(
            "rolled back to revision {}: it serves all traffic at full capacity; revision {} can be removed",
            gainer.name, loser.name
        ),
    })
}

/// The gaining revision carries all the traffic it is scaled for: scale it
/// up by the surge while both fit in 100%, else scale the loser down (going
/// back, never below the traffic the loser still carries). Returns the reason.
fn move_capacity(
    settings: &Settings,
    gainer: &mut Revision,
    loser: &mut Revision,
    way: Way,
) -> String {
    if gainer.target_capacity.saturating_add(loser.target_capacity) <= 100 {
        let from = gainer.target_capacity;
        gainer.target_capacity = from.saturating_add(settings.surge).min(100);
        format!(
            "revision {} scaled up from {from}% to {}% of the desired replicas (maxSurgePercent {})",
            gainer.name, gainer.target_capacity, settings.surge
        )
    } else {
        let floor = match way {
            Way::Forward => 0,
            Way::Back => loser.traffic,
        };
        let from = loser.target_capacity;
        loser.target_capacity = from.saturating_sub(settings.surge).max(floor);
        format!(
            "revision {} scaled down from {from}% to {}% of the desired replicas (maxSurgePercent {})",
            loser.name, loser.target_capacity, settings.surge
        )
    }
}

/// The traffic the gaining revision may carry after this step: one step
/// more, within its capacity, and as far as its ready replicas cover (all at
/// once: only when they cover the whole step). Its current traffic when it
/// may not move.
fn traffic_goal(settings: &Settings, gainer: &Revision) -> i32 {
    let goal = gainer
        .traffic
        .saturating_add(settings.step_size)
        .min(gainer.target_capacity);
    if goal <= gainer.traffic {
        return goal;
    }
    if settings.all_at_once {
        if gainer.ready_percent >= goal {
            goal
        } else {
            gainer.traffic
        }
    } else {
        goal.min(gainer.traffic.max(gainer.ready_percent))
    }
}

/// When the next traffic step is due, if the interval since the last move
/// has not passed yet.
fn interval_due(
    settings: &Settings,
    last_move: Option<Timestamp>,
    now: Timestamp,
) -> Option<Timestamp> {
    let last = last_move?;
    if now.duration_since(last) < settings.interval {
        Some(
            last.checked_add(settings.interval)
                .unwrap_or(Timestamp::MAX),
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FIELD: &str = "spec.upgradeStrategy.incrementalUpgradeOptions";

    fn t0() -> Timestamp {
        Timestamp::from_second(1_750_000_000).unwrap()
    }

    fn secs(n: i64) -> SignedDuration {
        SignedDuration::from_secs(n)
    }

    fn options(surge: Option<i32>, step_size: i32, interval: i32) -> IncrementalUpgradeOptions {
        IncrementalUpgradeOptions {
            max_surge_percent: surge,
            step_size_percent: Some(step_size),
            interval_seconds: Some(interval),
            gateway_class_name: Some("istio".into()),
        }
    }

    fn revision(name: &str, capacity: i32, traffic: i32, ready: i32) -> Revision {
        Revision {
            ready_percent: ready,
            ..Revision::at(name, capacity, traffic)
        }
    }

    fn split(step: &Step) -> (i32, i32) {
        (step.active.traffic, step.pending.traffic)
    }

    fn stepping(step_size: i32, all_at_once: bool) -> Settings {
        Settings {
            surge: 25,
            step_size,
            interval: secs(60),
            all_at_once,
        }
    }

    #[test]
    fn traffic_goal_moves_one_step_as_far_as_ready_replicas_cover() {
        let by_readiness = stepping(20, false);
        // Ready replicas cover 30%: the step to 30% of a 20% step from 10% is
        // cut to what is ready.
        assert_eq!(traffic_goal(&by_readiness, &revision("b", 50, 10, 25)), 25);
        assert_eq!(traffic_goal(&by_readiness, &revision("b", 50, 10, 90)), 30);
        // Never beyond the capacity the revision is scaled for.
        assert_eq!(traffic_goal(&by_readiness, &revision("b", 20, 10, 90)), 20);
        // Nothing ready beyond what it carries: it stays.
        assert_eq!(traffic_goal(&by_readiness, &revision("b", 50, 10, 5)), 10);
    }

    #[test]
    fn traffic_goal_all_at_once_waits_until_the_whole_step_is_ready() {
        let whole = stepping(100, true);
        assert_eq!(traffic_goal(&whole, &revision("b", 100, 0, 99)), 0);
        assert_eq!(traffic_goal(&whole, &revision("b", 100, 0, 100)), 100);
    }

    #[test]
    fn gateway_wait_names_the_gateway_before_the_route() {
        assert!(gateway_wait(&Gateway::READY).is_none());
        let nothing = Gateway {
            accepted: false,
            programmed: true,
            route_accepted: false,
            route_resolved_refs: true,
        };
        let (wait, reason) = gateway_wait(&nothing).unwrap();
        assert_eq!(wait, Wait::GatewayNotReady);
        assert_eq!(
            reason,
            "waiting for the Gateway: Accepted=false, Programmed=true"
        );
        let route = Gateway {
            route_resolved_refs: false,
            ..Gateway::READY
        };
        assert_eq!(gateway_wait(&route).unwrap().0, Wait::RouteNotReady);
    }

    #[test]
    fn interval_due_only_while_the_interval_since_the_last_move_runs() {
        let settings = stepping(20, false);
        assert_eq!(interval_due(&settings, None, t0()), None);
        let due = t0().checked_add(secs(60)).unwrap();
        assert_eq!(
            interval_due(&settings, Some(t0()), t0().checked_add(secs(59)).unwrap()),
            Some(due)
        );
        assert_eq!(interval_due(&settings, Some(t0()), due), None);
    }

    #[test]
    fn move_capacity_surges_the_gainer_then_shrinks_the_loser() {
        let settings = stepping(20, false);
        let (mut gainer, mut loser) = (revision("b", 25, 25, 25), revision("a", 75, 75, 100));
        move_capacity(&settings, &mut gainer, &mut loser, Way::Forward);
        assert_eq!((gainer.target_capacity, loser.target_capacity), (50, 75));
        move_capacity(&settings, &mut gainer, &mut loser, Way::Forward);
        assert_eq!((gainer.target_capacity, loser.target_capacity), (50, 50));
        // Going back, the loser keeps capacity for the traffic it carries.
        let (mut gainer, mut loser) = (revision("a", 100, 60, 100), revision("b", 50, 40, 100));
        move_capacity(&settings, &mut gainer, &mut loser, Way::Back);
        assert_eq!(loser.target_capacity, 40);
    }

    #[test]
    fn finished_only_when_the_gainer_is_whole_and_the_loser_scaled_to_nothing() {
        assert!(
            finished(
                &revision("b", 100, 100, 100),
                &revision("a", 10, 0, 100),
                Way::Forward
            )
            .is_none()
        );
        let reason = finished(
            &revision("a", 100, 100, 100),
            &revision("b", 0, 0, 0),
            Way::Back,
        )
        .unwrap();
        assert!(reason.starts_with("rolled back to revision a"), "{reason}");
    }

    #[test]
    fn replicas_follow_the_capacity_rounded_up() {
        for (desired, percent, replicas) in [
            (10, 0, 0),
            (10, 100, 10),
            (10, 25, 3),
            (10, 30, 3),
            (3, 34, 2),
            (3, 33, 1),
            (1, 1, 1),
            (8, 1, 1),
            (0, 50, 0),
            (10, 150, 10),
            (10, -5, 0),
            (-3, 50, 0),
            (i32::MAX, 100, i32::MAX),
            (i32::MAX, 1, 21_474_837),
            (i32::MIN, i32::MIN, 0),
        ] {
            assert_eq!(
                replicas_for(desired, percent),
                replicas,
                "replicas_for({desired}, {percent})"
            );
        }
    }

    #[test]
    fn ready_share_is_the_weakest_role_rounded_down() {
        for (roles, share) in [
            (vec![(2, 10)], 20),
            (vec![(1, 3)], 33),
            (vec![(3, 3), (1, 4)], 25),
            (vec![(5, 4)], 100),
            (vec![(-1, 4)], 0),
            (vec![(0, 0), (2, 2)], 100),
            (vec![(0, 0)], 0),
            (vec![], 0),
            (vec![(i32::MAX, 1)], 100),
        ] {
            assert_eq!(ready_percent(roles.clone()), share, "{roles:?}");
        }
    }

    // TestCreateHTTPRoute in KubeRay, plus Tandem's readiness rule: step 10,
    // interval 30 s, active at 100/100, pending at 30 % capacity and no traffic.
    #[test]
    fn traffic_steps() {
        let options = options(None, 10, 30);
        let active = revision("v1", 100, 100, 100);
        let long_ago = Some(t0() - secs(31));
        let pending = |capacity: i32, ready: i32, last: Option<Timestamp>| Revision {
            last_traffic_move: last,
            ..revision("v2", capacity, 0, ready)
        };
        let cases = [
            ("pending not ready", pending(30, 0, long_ago), (100, 0)),
            (
                "interval not elapsed",
                pending(30, 100, Some(t0())),
                (100, 0),
            ),
            ("elapsed, capacity 60", pending(60, 100, long_ago), (90, 10)),
            (
                "capacity 5 caps the step",
                pending(5, 100, long_ago),
                (95, 5),
            ),
            ("never moved: at once", pending(60, 100, None), (90, 10)),
            ("ready covers 8 %", pending(60, 8, long_ago), (92, 8)),
        ];
        for (name, pending, expected) in cases {
            let next = step(&options, &active, &pending, &Gateway::READY, t0());
            assert_eq!(split(&next), expected, "{name}: {}", next.reason);
            assert_eq!(
                next.active.target_capacity, 100,
                "{name}: traffic steps leave capacity alone"
            );
            assert_eq!(next.pending.target_capacity, pending.target_capacity);
        }

        let held = step(
            &options,
            &active,
            &pending(30, 0, long_ago),
            &Gateway::READY,
            t0(),
        );
        assert_eq!(held.moved, Moved::Nothing(Wait::Readiness));
        let early = step(
            &options,
            &active,
            &pending(30, 100, Some(t0() - secs(29))),
            &Gateway::READY,
            t0(),
        );
        assert_eq!(
            early.moved,
            Moved::Nothing(Wait::Interval {
                due: t0() + secs(1)
            })
        );
        assert!(
            early.reason.contains("intervalSeconds 30"),
            "{}",
            early.reason
        );
        let moved = step(
            &options,
            &active,
            &pending(60, 100, long_ago),
            &Gateway::READY,
            t0(),
        );
        assert_eq!(moved.moved, Moved::Traffic);
        assert_eq!(moved.pending.last_traffic_move, Some(t0()));
        assert_eq!(moved.active.last_traffic_move, Some(t0()));
    }

    #[test]
    fn traffic_stops_where_the_ready_replicas_stop() {
        let options = options(None, 10, 30);
        let mut active = revision("v1", 100, 100, 100);
        let mut pending = revision("v2", 60, 0, 20);
        let mut now = t0();
        let mut traffic_moves = 0;
        for _ in 0..10 {
            let next = step(&options, &active, &pending, &Gateway::READY, now);
            traffic_moves += usize::from(next.moved == Moved::Traffic);
            (active, pending) = (next.active, next.pending);
            now += secs(30);
        }
        assert_eq!((active.traffic, pending.traffic), (80, 20));
        assert_eq!(traffic_moves, 2, "0 → 10 → 20, then held");
        let held = step(&options, &active, &pending, &Gateway::READY, now);
        assert_eq!(held.moved, Moved::Nothing(Wait::Readiness));
        assert!(held.reason.contains("cover 20%"), "{}", held.reason);
    }

    // TestReconcileServeTargetCapacity in KubeRay: maxSurgePercent 20.
    #[test]
    fn capacity_steps() {
        let options = options(Some(20), 10, 30);
        for (name, active, pending, expected) in [
            (
                "sum <= 100: pending rises",
                revision("v1", 70, 90, 100),
                revision("v2", 10, 10, 100),
                (70, 30),
            ),
            (
                "sum > 100: active falls",
                revision("v1", 80, 70, 100),
                revision("v2", 30, 30, 100),
                (60, 30),
            ),
            (
                "pending capped at 100",
                revision("v1", 10, 10, 100),
                revision("v2", 90, 90, 100),
                (10, 100),
            ),
            (
                "active floored at 0",
                revision("v1", 10, 0, 100),
                revision("v2", 100, 100, 100),
                (0, 100),
            ),
        ] {
            let next = step(&options, &active, &pending, &Gateway::READY, t0());
            assert_eq!(next.moved, Moved::Capacity, "{name}: {}", next.reason);
            assert_eq!(
                (next.active.target_capacity, next.pending.target_capacity),
                expected,
                "{name}"
            );
            assert_eq!(split(&next), (active.traffic, pending.traffic), "{name}");
        }

        // Traffic has not caught up with capacity: a traffic step instead.
        let next = step(
            &options,
            &revision("v1", 70, 90, 100),
            &revision("v2", 30, 10, 100),
            &Gateway::READY,
            t0(),
        );
        assert_eq!(next.moved, Moved::Traffic);
        assert_eq!(
            (next.active.target_capacity, next.pending.target_capacity),
            (70, 30)
        );
        assert_eq!(split(&next), (80, 20));
    }

    #[test]
    fn all_at_once_brings_the_new_revision_to_full_size_then_switches() {
        let pace = Pace::AllAtOnce;
        let ready = &Gateway::READY;
        let active = revision("v1", 100, 100, 100);
        let grown = pace.step(&active, &Revision::at("v2", 0, 0), ready, t0());
        assert_eq!(grown.moved, Moved::Capacity);
        assert_eq!(
            (grown.active.target_capacity, grown.pending.target_capacity),
            (100, 100)
        );
        let almost = Revision {
            ready_percent: 99,
            ..grown.pending.clone()
        };
        let held = pace.step(&grown.active, &almost, ready, t0());
        assert_eq!(
            held.moved,
            Moved::Nothing(Wait::Readiness),
            "{}",
            held.reason
        );
        let full = Revision {
            ready_percent: 100,
            ..grown.pending.clone()
        };
        let switched = pace.step(&grown.active, &full, ready, t0());
        assert_eq!(switched.moved, Moved::Traffic);
        assert_eq!(split(&switched), (0, 100), "all traffic at once");
        let shrunk = pace.step(&switched.active, &switched.pending, ready, t0());
        assert_eq!(
            (shrunk.moved, shrunk.active.target_capacity),
            (Moved::Capacity, 0)
        );
        let done = pace.step(&shrunk.active, &shrunk.pending, ready, t0());
        assert_eq!(done.survivor().map(|r| r.name.as_str()), Some("v2"));

        // Back before the switch: the pending revision is dropped.
        let dropped = pace.rollback_step(&grown.active, &almost, ready, t0());
        assert_eq!(
            (dropped.moved, dropped.pending.target_capacity),
            (Moved::Capacity, 0)
        );
        let back = pace.rollback_step(&dropped.active, &dropped.pending, ready, t0());
        assert_eq!(back.survivor().map(|r| r.name.as_str()), Some("v1"));
        // Back after it: all traffic returns at once, with no interval to wait.
        let returned = pace.rollback_step(&switched.active, &switched.pending, ready, t0());
        assert_eq!(
            (returned.moved, split(&returned)),
            (Moved::Traffic, (100, 0))
        );
    }

    #[test]
    fn nothing_moves_until_gateway_and_route_are_ready() {
        let options = options(Some(20), 10, 30);
        let active = revision("v1", 100, 100, 100);
        let pending = revision("v2", 20, 0, 100);
        let not = |change: fn(&mut Gateway)| {
            let mut gateway = Gateway::READY;
            change(&mut gateway);
            gateway
        };
        for (gateway, wait) in [
            (not(|g| g.accepted = false), Wait::GatewayNotReady),
            (not(|g| g.programmed = false), Wait::GatewayNotReady),
            (not(|g| g.route_accepted = false), Wait::RouteNotReady),
            (not(|g| g.route_resolved_refs = false), Wait::RouteNotReady),
            (Gateway::default(), Wait::GatewayNotReady),
        ] {
            for next in [
                step(&options, &active, &pending, &gateway, t0()),
                rollback_step(&options, &active, &pending, &gateway, t0()),
            ] {
                assert_eq!(next.moved, Moved::Nothing(wait), "{gateway:?}");
                assert_eq!((&next.active, &next.pending), (&active, &pending));
            }
        }
        let moved = step(&options, &active, &pending, &Gateway::READY, t0());
        assert_eq!(moved.moved, Moved::Traffic);
    }

    #[test]
    fn invalid_options_move_nothing_and_name_the_field() {
        let active = revision("v1", 100, 100, 100);
        let pending = revision("v2", 20, 0, 100);
        let missing_interval = IncrementalUpgradeOptions {
            interval_seconds: None,
            ..options(None, 10, 30)
        };
        for (options, field) in [
            (options(None, 0, 30), "stepSizePercent"),
            (options(Some(10), 20, 30), "stepSizePercent"),
            (options(Some(0), 10, 30), "maxSurgePercent"),
            (options(Some(101), 10, 30), "maxSurgePercent"),
            (options(None, 10, 0), "intervalSeconds"),
            (missing_interval, "intervalSeconds"),
        ] {
            let next = step(&options, &active, &pending, &Gateway::READY, t0());
            assert_eq!(next.moved, Moved::Nothing(Wait::InvalidOptions));
            assert!(
                next.reason.contains(&format!("{FIELD}.{field}")),
                "{}",
                next.reason
            );
            assert_eq!((&next.active, &next.pending), (&active, &pending));
        }
    }

    #[test]
    fn done_at_the_end_state_in_either_direction() {
        let options = options(Some(25), 5, 30);
        let upgraded = step(
            &options,
            &revision("v1", 0, 0, 100),
            &revision("v2", 100, 100, 100),
            &Gateway::READY,
            t0(),
        );
        assert_eq!(upgraded.moved, Moved::Done, "{}", upgraded.reason);
        assert_eq!(upgraded.survivor().map(|r| r.name.as_str()), Some("v2"));

        let rolled_back = rollback_step(
            &options,
            &revision("v1", 100, 100, 100),
            &revision("v2", 0, 0, 0),
            &Gateway::READY,
            t0(),
        );
        assert_eq!(rolled_back.moved, Moved::Done, "{}", rolled_back.reason);
        assert_eq!(rolled_back.survivor().map(|r| r.name.as_str()), Some("v1"));

        // A rollback's end state is no upgrade's end state, and the reverse.
        let not_done = step(
            &options,
            &revision("v1", 100, 100, 100),
            &revision("v2", 0, 0, 0),
            &Gateway::READY,
            t0(),
        );
        assert_eq!(not_done.moved, Moved::Capacity);
        assert_eq!(not_done.survivor(), None);
    }

    /// The world the reconciler would observe: a revision's replicas become
    /// ready `lag` after its capacity rises, and go at once when it falls.
    struct World {
        options: IncrementalUpgradeOptions,
        active: Revision,
        pending: Revision,
        now: Timestamp,
        /// When each revision's capacity last rose.
        raised: [Timestamp; 2],
        lag: SignedDuration,
        /// The pending revision's replicas are broken: none is ever ready.
        pending_broken: bool,
    }

    impl World {
        fn new(options: IncrementalUpgradeOptions, active: Revision, pending: Revision) -> Self {
            Self {
                options,
                active,
                pending,
                now: t0(),
                raised: [t0(), t0()],
                lag: secs(40),
                pending_broken: false,
            }
        }

        fn observe(&mut self) {
            for (index, revision) in [&mut self.active, &mut self.pending]
                .into_iter()
                .enumerate()
            {
                if self.now.duration_since(self.raised[index]) >= self.lag {
                    revision.ready_percent = revision.target_capacity;
                }
                revision.ready_percent = revision.ready_percent.min(revision.target_capacity);
            }
            if self.pending_broken {
                self.pending.ready_percent = 0;
            }
        }

        /// Ticks of 10 s until done, checking each move against the previous state.
        fn run(&mut self, back: bool, stop: impl Fn(&Revision, &Revision) -> bool) -> Vec<Step> {
            let mut steps = Vec::new();
            let mut last_traffic_move: Option<Timestamp> = None;
            for _ in 0..2_000 {
                self.observe();
                if stop(&self.active, &self.pending) {
                    return steps;
                }
                let next = if back {
                    rollback_step(
                        &self.options,
                        &self.active,
                        &self.pending,
                        &Gateway::READY,
                        self.now,
                    )
                } else {
                    step(
                        &self.options,
                        &self.active,
                        &self.pending,
                        &Gateway::READY,
                        self.now,
                    )
                };
                let (gainer, loser, gained, lost) = if back {
                    (&self.active, &self.pending, &next.active, &next.pending)
                } else {
                    (&self.pending, &self.active, &next.pending, &next.active)
                };
                assert!(
                    gained.target_capacity >= gainer.target_capacity,
                    "{}",
                    next.reason
                );
                assert!(
                    lost.target_capacity <= loser.target_capacity,
                    "{}",
                    next.reason
                );
                assert!(gained.traffic >= gainer.traffic, "{}", next.reason);
                assert_eq!(next.active.traffic + next.pending.traffic, 100);
                assert!(
                    next.active.target_capacity + next.pending.target_capacity <= 125,
                    "{}",
                    next.reason
                );
                assert!(lost.target_capacity >= lost.traffic, "{}", next.reason);
                if gained.traffic > gainer.traffic {
                    assert!(gained.traffic <= gainer.ready_percent, "{}", next.reason);
                    if let Some(last) = last_traffic_move {
                        assert!(self.now.duration_since(last) >= secs(30), "{}", next.reason);
                    }
                    last_traffic_move = Some(self.now);
                }
                if gained.target_capacity > gainer.target_capacity {
                    self.raised[usize::from(!back)] = self.now;
                }
                self.active = next.active.clone();
                self.pending = next.pending.clone();
                let done = next.moved == Moved::Done;
                steps.push(next);
                if done {
                    return steps;
                }
                self.now += secs(10);
            }
            panic!(
                "no end after 2000 ticks: {:?} {:?}",
                self.active, self.pending
            );
        }
    }

    fn count(steps: &[Step], moved: Moved) -> usize {
        steps.iter().filter(|s| s.moved == moved).count()
    }

    fn upgrade_world() -> World {
        World::new(
            options(Some(25), 5, 30),
            revision("v1", 100, 100, 100),
            Revision::at("v2", 0, 0),
        )
    }

    #[test]
    fn a_full_upgrade_reaches_the_new_revision() {
        let mut world = upgrade_world();
        let steps = world.run(false, |_, _| false);
        let done = steps.last().unwrap();
        assert_eq!(done.moved, Moved::Done);
        let survivor = done.survivor().unwrap();
        assert_eq!(
            (
                survivor.name.as_str(),
                survivor.target_capacity,
                survivor.traffic
            ),
            ("v2", 100, 100)
        );
        assert_eq!((done.active.target_capacity, done.active.traffic), (0, 0));
        assert_eq!(count(&steps, Moved::Traffic), 20, "100 % in steps of 5");
        assert_eq!(
            count(&steps, Moved::Capacity),
            8,
            "v2 up 4 times, v1 down 4 times"
        );
        // The pending revision waited for its replicas after each rise.
        assert!(count(&steps, Moved::Nothing(Wait::Readiness)) >= 4);
        assert!(
            steps
                .iter()
                .any(|s| matches!(s.moved, Moved::Nothing(Wait::Interval { .. })))
        );
    }

    #[test]
    fn a_rollback_from_the_middle_returns_to_the_active_revision() {
        let mut world = upgrade_world();
        world.run(false, |_, pending| pending.traffic >= 50);
        assert_eq!(world.pending.traffic, 50);
        let status = UpgradeStatus {
            active: Some(world.active.to_status()),
            pending: Some(world.pending.to_status()),
        };
        assert_eq!(direction("v1", Some(&status)), Direction::RollBack);

        // The pending revision breaks: the rollback does not need it.
        world.pending_broken = true;
        let steps = world.run(true, |_, _| false);
        let done = steps.last().unwrap();
        assert_eq!(done.moved, Moved::Done, "{}", done.reason);
        let survivor = done.survivor().unwrap();
        assert_eq!(
            (
                survivor.name.as_str(),
                survivor.target_capacity,
                survivor.traffic
            ),
            ("v1", 100, 100)
        );
        assert_eq!((done.pending.target_capacity, done.pending.traffic), (0, 0));
        assert_eq!(weights(survivor, None), vec![("v1".to_owned(), 100)]);
        assert_eq!(count(&steps, Moved::Traffic), 10, "50 % back in steps of 5");
    }

    #[test]
    fn a_third_revision_rolls_back_then_upgrades() {
        let mut world = upgrade_world();
        world.run(false, |_, pending| pending.traffic >= 35);
        let status = UpgradeStatus {
            active: Some(world.active.to_status()),
            pending: Some(world.pending.to_status()),
        };
        assert_eq!(direction("v3", Some(&status)), Direction::RollBackThenStart);

        let rolled_back = world.run(true, |_, _| false);
        let survivor = rolled_back.last().unwrap().survivor().unwrap().clone();
        assert_eq!(survivor.name, "v1");
        let status = UpgradeStatus {
            active: Some(survivor.to_status()),
            pending: None,
        };
        assert_eq!(direction("v3", Some(&status)), Direction::Start);

        let mut world = World::new(world.options.clone(), survivor, Revision::at("v3", 0, 0));
        let steps = world.run(false, |_, _| false);
        let survivor = steps.last().unwrap().survivor().unwrap();
        assert_eq!(
            (
                survivor.name.as_str(),
                survivor.target_capacity,
                survivor.traffic
            ),
            ("v3", 100, 100)
        );
        assert_eq!(weights(survivor, None), vec![("v3".to_owned(), 100)]);
        let status = UpgradeStatus {
            active: Some(survivor.to_status()),
            pending: None,
        };
        assert_eq!(direction("v3", Some(&status)), Direction::Steady);
    }

    #[test]
    fn a_rollback_never_cuts_capacity_under_live_traffic() {
        // maxSurgePercent 30 passes through active 10/10, pending 100/90.
        let options = options(Some(30), 10, 30);
        let active = revision("v1", 10, 10, 10);
        let pending = revision("v2", 100, 90, 100);
        let next = rollback_step(&options, &active, &pending, &Gateway::READY, t0());
        assert_eq!(next.moved, Moved::Capacity);
        assert_eq!(
            (next.active.target_capacity, next.pending.target_capacity),
            (10, 90),
            "the mirror of KubeRay's rule would give 70 under 90 % traffic"
        );
        let next = rollback_step(&options, &next.active, &next.pending, &Gateway::READY, t0());
        assert_eq!(
            (next.active.target_capacity, next.pending.target_capacity),
            (40, 90)
        );
    }

    #[test]
    fn direction_from_the_spec_and_the_status() {
        let revision_status = |name: &str| RevisionStatus {
            revision: name.into(),
            ..RevisionStatus::default()
        };
        let status = |active: Option<&str>, pending: Option<&str>| UpgradeStatus {
            active: active.map(revision_status),
            pending: pending.map(revision_status),
        };
        for (spec, status, expected) in [
            ("v1", None, Direction::Install),
            ("v1", Some(status(None, None)), Direction::Install),
            ("v2", Some(status(None, Some("v1"))), Direction::Install),
            ("v1", Some(status(Some("v1"), None)), Direction::Steady),
            ("v2", Some(status(Some("v1"), None)), Direction::Start),
            (
                "v2",
                Some(status(Some("v1"), Some("v2"))),
                Direction::Continue,
            ),
            (
                "v1",
                Some(status(Some("v1"), Some("v2"))),
                Direction::RollBack,
            ),
            (
                "v3",
                Some(status(Some("v1"), Some("v2"))),
                Direction::RollBackThenStart,
            ),
            (
                "v1",
                Some(status(Some("v1"), Some("v1"))),
                Direction::Steady,
            ),
            ("v2", Some(status(Some("v1"), Some("v1"))), Direction::Start),
        ] {
            assert_eq!(
                direction(spec, status.as_ref()),
                expected,
                "{spec} {status:?}"
            );
        }
    }

    #[test]
    fn weights_for_the_route() {
        let active = revision("v1", 100, 70, 100);
        for (pending, expected) in [
            (None, vec![("v1", 100)]),
            (
                Some(revision("v2", 30, 30, 30)),
                vec![("v1", 70), ("v2", 30)],
            ),
            (Some(revision("v2", 0, 0, 0)), vec![("v1", 100), ("v2", 0)]),
            (
                Some(revision("v2", 100, 250, 0)),
                vec![("v1", 0), ("v2", 100)],
            ),
            (
                Some(revision("v2", 100, -4, 0)),
                vec![("v1", 100), ("v2", 0)],
            ),
        ] {
            let expected: Vec<(String, i32)> = expected
                .into_iter()
                .map(|(n, w)| (n.to_owned(), w))
                .collect();
            assert_eq!(weights(&active, pending.as_ref()), expected);
        }
    }

    #[test]
    fn status_round_trip() {
        let revision = Revision {
            last_traffic_move: Some(t0()),
            ..revision("v2", 40, 35, 60)
        };
        let status = revision.to_status();
        assert_eq!(status.traffic_routed_percent, 35);
        assert_eq!(status.last_traffic_move_time, Some(Time(t0())));
        assert_eq!(Revision::from_status(&status, 60), revision);
    }

    fn any_options() -> impl Strategy<Value = IncrementalUpgradeOptions> {
        (1..=100i32, 1..=100i32, 1..=300i32).prop_map(|(surge, step_size, interval)| {
            options(Some(surge), step_size.min(surge), interval)
        })
    }

    fn any_revision(name: &'static str) -> impl Strategy<Value = Revision> {
        (
            any::<i32>(),
            any::<i32>(),
            any::<i32>(),
            proptest::option::of(-1_000i64..1_000),
        )
            .prop_map(move |(capacity, traffic, ready, moved)| Revision {
                last_traffic_move: moved.map(|s| t0() + secs(s)),
                ..revision(name, capacity, traffic, ready)
            })
    }

    fn any_gateway() -> impl Strategy<Value = Gateway> {
        any::<[bool; 4]>().prop_map(|[a, b, c, d]| Gateway {
            accepted: a,
            programmed: b,
            route_accepted: c,
            route_resolved_refs: d,
        })
    }

    fn check_bounds(next: &Step) -> Result<(), TestCaseError> {
        prop_assert_eq!(next.active.traffic + next.pending.traffic, 100);
        for revision in [&next.active, &next.pending] {
            prop_assert!((0..=100).contains(&revision.target_capacity));
            prop_assert!((0..=100).contains(&revision.traffic));
        }
        Ok(())
    }

    /// One thing that can happen between two reconciles.
    #[derive(Clone, Debug)]
    enum Event {
        Tick(i64),
        Ready { pending: bool, percent: i32 },
        Gateway(Gateway),
        Flip,
    }

    fn any_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => (0..120i64).prop_map(Event::Tick),
            3 => (any::<bool>(), 0..=100i32).prop_map(|(pending, percent)| Event::Ready { pending, percent }),
            1 => any_gateway().prop_map(Event::Gateway),
            1 => Just(Event::Flip),
        ]
    }

    proptest! {
        #[test]
        fn replicas_for_is_a_rounded_up_share(desired in any::<i32>(), percent in any::<i32>()) {
            let replicas = replicas_for(desired, percent);
            let (d, p) = (i64::from(desired.max(0)), i64::from(percent.clamp(0, 100)));
            prop_assert!(replicas >= 0 && i64::from(replicas) <= d);
            prop_assert_eq!(replicas == 0, d == 0 || p == 0);
            prop_assert!(i64::from(replicas) * 100 >= d * p, "covers the share");
            prop_assert!((i64::from(replicas) - 1) * 100 < d * p || replicas == 0, "by the fewest replicas");
            prop_assert!(replicas_for(desired, percent.saturating_add(1)) >= replicas);
        }

        #[test]
        fn a_full_ready_revision_covers_its_capacity(desired in 1..500i32, capacity in 0..=100i32) {
            let replicas = replicas_for(desired, capacity);
            prop_assert!(ready_percent([(replicas, desired)]) >= capacity);
        }

        #[test]
        fn any_step_keeps_weights_and_capacities_in_bounds(
            options in any_options(),
            active in any_revision("v1"),
            pending in any_revision("v2"),
            gateway in any_gateway(),
            back in any::<bool>(),
        ) {
            let next = if back {
                rollback_step(&options, &active, &pending, &gateway, t0())
            } else {
                step(&options, &active, &pending, &gateway, t0())
            };
            check_bounds(&next)?;
            let surge = options.max_surge_percent.unwrap_or_default();
            let before = active.target_capacity.clamp(0, 100) + pending.target_capacity.clamp(0, 100);
            let after = next.active.target_capacity + next.pending.target_capacity;
            prop_assert!(after <= before.max(100 + surge), "{} -> {}: {}", before, after, next.reason);
        }

        #[test]
        fn any_options_never_panic(
            surge in proptest::option::of(any::<i32>()),
            step_size in proptest::option::of(any::<i32>()),
            interval in proptest::option::of(any::<i32>()),
            active in any_revision("v1"),
            pending in any_revision("v2"),
        ) {
            let options = IncrementalUpgradeOptions {
                max_surge_percent: surge,
                step_size_percent: step_size,
                interval_seconds: interval,
                gateway_class_name: Some("istio".into()),
            };
            check_bounds(&step(&options, &active, &pending, &Gateway::READY, t0()))?;
            check_bounds(&rollback_step(&options, &active, &pending, &Gateway::READY, t0()))?;
        }

        #[test]
        fn upgrades_and_rollbacks_keep_their_invariants(
            options in any_options(),
            events in proptest::collection::vec(any_event(), 1..300),
        ) {
            let surge = options.max_surge_percent.unwrap_or_default();
            let interval = secs(i64::from(options.interval_seconds.unwrap_or_default()));
            let mut active = revision("v1", 100, 100, 100);
            let mut pending = Revision::at("v2", 0, 0);
            let mut gateway = Gateway::READY;
            let mut back = false;
            let mut now = t0();
            let mut last_move: Option<Timestamp> = None;
            for event in events {
                match event {
                    Event::Tick(seconds) => now += secs(seconds),
                    Event::Ready { pending: true, percent } => pending.ready_percent = percent,
                    Event::Ready { pending: false, percent } => active.ready_percent = percent,
                    Event::Gateway(next) => gateway = next,
                    Event::Flip => back = !back,
                }
                let next = if back {
                    rollback_step(&options, &active, &pending, &gateway, now)
                } else {
                    step(&options, &active, &pending, &gateway, now)
                };
                check_bounds(&next)?;
                prop_assert!(next.active.target_capacity + next.pending.target_capacity <= 100 + surge);
                prop_assert!(next.pending.traffic <= next.pending.target_capacity, "{:?}", next);
                prop_assert!(next.active.traffic <= next.active.target_capacity, "{:?}", next);
                let (before, after) = if back {
                    (&active, &next.active)
                } else {
                    (&pending, &next.pending)
                };
                if after.traffic > before.traffic {
                    prop_assert!(after.traffic <= before.ready_percent, "{}", next.reason);
                }
                if next.moved == Moved::Traffic {
                    prop_assert!(last_move.is_none_or(|last| now.duration_since(last) >= interval));
                    last_move = Some(now);
                } else {
                    prop_assert_eq!(
                        (next.active.traffic, next.pending.traffic),
                        (100 - pending.traffic, pending.traffic)
                    );
                }
                if matches!(next.moved, Moved::Nothing(_) | Moved::Done) {
                    prop_assert_eq!((&next.active, &next.pending), (&active, &pending));
                }
                if next.moved == Moved::Done {
                    break;
                }
                (active, pending) = (next.active, next.pending);
            }
        }
    }
}
