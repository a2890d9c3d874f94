//! Leader election, decided: whether this replica runs the controllers, from
//! what each try to take or renew the leader Lease saw. Every replica serves
//! the webhooks; only the leader reconciles, so two replicas never write the
//! same object at once.
//!
//! The Lease is read and written by `kube-leader-election` (see
//! `reconcile::leader`), which takes an expired Lease with a merge patch that
//! carries no resourceVersion: two candidates that see it expire together may
//! both be told they took it, and the later write wins. So taking the Lease
//! is not yet leading: a replica starts its controllers only when the next
//! try finds the Lease still its own (a *candidate* confirms). A leader stops
//! them as soon as a try finds another holder, and when it could not renew
//! for `renew_deadline`, which is shorter than the Lease, so it has stopped
//! before any other replica may take the Lease over.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

/// How long a Lease lasts, how long a leader keeps leading without renewing
/// it, and how often every replica tries to take or renew it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    lease: Duration,
    renew_deadline: Duration,
    retry: Duration,
}

impl Timing {
    /// client-go's defaults: a 15 s Lease, renewed every 2 s, given up after
    /// 10 s without a renewal.
    pub const DEFAULT: Timing = Timing {
        lease: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry: Duration::from_secs(2),
    };

    /// Checks that a leader stops before its Lease can be taken over: the
    /// Lease is whole seconds (`leaseDurationSeconds`), the renew deadline is
    /// shorter than the Lease, and tries come more often than the deadline.
    pub fn new(
        lease: Duration,
        renew_deadline: Duration,
        retry: Duration,
    ) -> Result<Timing, String> {
        if lease.is_zero() || lease.subsec_nanos() != 0 {
            return Err(format!(
                "lease: must be a whole number of seconds, at least 1, got {lease:?}"
            ));
        }
        if renew_deadline >= lease {
            return Err(format!(
                "renewDeadline: must be shorter than the lease ({lease:?}), got {renew_deadline:?}"
            ));
        }
        if retry.is_zero() || retry >= renew_deadline {
            return Err(format!(
                "retryPeriod: must be above zero and shorter than the renew deadline ({renew_deadline:?}), got {retry:?}"
            ));
        }
        Ok(Timing {
            lease,
            renew_deadline,
            retry,
        })
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    pub fn retry(&self) -> Duration {
        self.retry
    }
}

/// What one try to take or renew the Lease saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// After the write, the Lease names this replica as its holder.
    Held,
    /// Another replica holds the Lease (and it has not expired), or took it
    /// between the read and the write of this try.
    HeldBy(String),
    /// The API server could not be asked, answered an error, or took longer
    /// than the try may take.
    Failed(String),
}

/// What a try's answer from `kube-leader-election` means for `identity`:
/// the Lease it returns is what the API server stored, so a renewal that
/// landed on a Lease another replica had just taken shows that holder.
pub fn attempt_of(acquired: bool, lease: &Lease, identity: &str) -> Attempt {
    let holder = lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .unwrap_or_default();
    if acquired && holder == identity {
        Attempt::Held
    } else if holder.is_empty() || holder == identity {
        // Released (a leader that stepped down) or not given to us: the next
        // try takes it if it is free.
        Attempt::HeldBy(String::new())
    } else {
        Attempt::HeldBy(holder.to_owned())
    }
}

/// Where this replica stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Another replica leads, or none is known to: controllers stopped.
    Follower,
    /// Took the Lease once; waits for the next try to confirm it.
    Candidate,
    /// Holds the Lease: controllers run. `renewed` is when the last try that
    /// found it held began (the Lease's renewTime is no earlier).
    Leader { renewed: Instant },
}

impl Leadership {
    /// Whether the controllers should be running.
    pub fn runs_controllers(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }
}

/// A change of what runs, with the reason for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    StartControllers,
    StopControllers(String),
}

/// How long a replica that stops leading gives its controllers to finish the
/// reconciles in flight before it aborts them: the part of the Lease that is
/// left after the renew deadline. A leader that could not renew stops at its
/// deadline, and no other replica can take the Lease before it expires, so
/// waiting this long never overlaps with the next leader. On shutdown the
/// Lease is released only after the wait.
pub fn stop_grace(timing: &Timing) -> Duration {
    timing.lease.saturating_sub(timing.renew_deadline)
}

/// How long the try beginning at `now` may take: the retry period, and for a
/// leader no longer than is left of its renew deadline (so a try that hangs
/// ends, as a failure, in time for the leader to stop).
pub fn attempt_budget(state: Leadership, now: Instant, timing: &Timing) -> Duration {
    match state {
        // A deadline past the clock's range (durations of centuries) leaves
        // just the retry period.
        Leadership::Leader { renewed } => renewed
            .checked_add(timing.renew_deadline)
            .map_or(timing.retry, |deadline| {
                timing.retry.min(deadline.saturating_duration_since(now))
            }),
        Leadership::Follower | Leadership::Candidate => timing.retry,
    }
}

/// When the try after one that began at `started` begins: a retry period
/// later, and for a leader no later than its renew deadline (that try has no
/// time left, fails, and stops the controllers on time).
pub fn next_try_at(state: Leadership, started: Instant, timing: &Timing) -> Instant {
    // Periods past the clock's range (centuries) count as none.
    let regular = started.checked_add(timing.retry).unwrap_or(started);
    match state {
        Leadership::Leader { renewed } => renewed
            .checked_add(timing.renew_deadline)
            .map_or(regular, |deadline| regular.min(deadline)),
        Leadership::Follower | Leadership::Candidate => regular,
    }
}

/// The next state after a try that began at `started` and ended at `now`, and
/// what to start or stop.
pub fn next(
    state: Leadership,
    attempt: &Attempt,
    started: Instant,
    now: Instant,
    timing: &Timing,
) -> (Leadership, Option<Change>) {
    match (state, attempt) {
        (Leadership::Follower, Attempt::Held) => (Leadership::Candidate, None),
        (Leadership::Candidate, Attempt::Held) => (
            Leadership::Leader { renewed: started },
            Some(Change::StartControllers),
        ),
        (Leadership::Leader { .. }, Attempt::Held) => {
            (Leadership::Leader { renewed: started }, None)
        }
        (Leadership::Leader { .. }, Attempt::HeldBy(holder)) => (
            Leadership::Follower,
            Some(Change::StopControllers(if holder.is_empty() {
                "the leader Lease is no longer held by this replica".to_owned()
            } else {
                format!("the leader Lease is now held by {holder}")
            })),
        ),
        (Leadership::Leader { renewed }, Attempt::Failed(reason)) => {
            if now.saturating_duration_since(renewed) >= timing.renew_deadline {
                (
                    Leadership::Follower,
                    Some(Change::StopControllers(format!(
                        "could not renew the leader Lease for {:?}: {reason}",
                        timing.renew_deadline
                    ))),
                )
            } else {
                (state, None)
            }
        }
        (Leadership::Follower | Leadership::Candidate, Attempt::HeldBy(_) | Attempt::Failed(_)) => {
            (Leadership::Follower, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_get_what_the_lease_leaves_after_the_deadline_to_stop() {
        assert_eq!(stop_grace(&Timing::DEFAULT), Duration::from_secs(5));
        let tight = Timing::new(
            Duration::from_secs(1),
            Duration::from_millis(900),
            Duration::from_millis(100),
        )
        .unwrap();
        assert_eq!(stop_grace(&tight), Duration::from_millis(100));
    }
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use proptest::prelude::*;

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_default_timing_is_valid() {
        let t = Timing::DEFAULT;
        assert_eq!(Timing::new(t.lease, t.renew_deadline, t.retry), Ok(t));
    }

    #[test]
    fn timing_that_would_let_two_leaders_overlap_is_refused() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let cases = [
            (
                ms(1500),
                s(1),
                ms(100),
                "lease: must be a whole number of seconds",
            ),
            (
                s(0),
                ms(500),
                ms(100),
                "lease: must be a whole number of seconds",
            ),
            (
                s(10),
                s(10),
                s(2),
                "renewDeadline: must be shorter than the lease",
            ),
            (
                s(10),
                s(5),
                s(5),
                "retryPeriod: must be above zero and shorter",
            ),
            (
                s(10),
                s(5),
                s(0),
                "retryPeriod: must be above zero and shorter",
            ),
        ];
        for (lease, deadline, retry, message) in cases {
            let error = Timing::new(lease, deadline, retry).unwrap_err();
            assert!(error.starts_with(message), "{error}");
        }
    }

    #[test]
    fn what_a_try_saw() {
        let cases = [
            (true, Some("me"), Attempt::Held),
            // The renewal landed after another replica took the Lease.
            (true, Some("other"), Attempt::HeldBy("other".into())),
            (false, Some("other"), Attempt::HeldBy("other".into())),
            (false, Some(""), Attempt::HeldBy(String::new())),
            (true, None, Attempt::HeldBy(String::new())),
            (false, Some("me"), Attempt::HeldBy(String::new())),
        ];
        for (acquired, holder, want) in cases {
            assert_eq!(
                attempt_of(acquired, &lease(holder), "me"),
                want,
                "{acquired} {holder:?}"
            );
        }
        let no_spec = Lease::default();
        assert_eq!(
            attempt_of(true, &no_spec, "me"),
            Attempt::HeldBy(String::new())
        );
    }

    #[test]
    fn controllers_start_only_when_a_second_try_confirms_the_lease() {
        let t = Timing::DEFAULT;
        let t0 = Instant::now();
        let (s, change) = next(Leadership::Follower, &Attempt::Held, t0, t0, &t);
        assert_eq!((s, change), (Leadership::Candidate, None));
        assert!(!s.runs_controllers());
        let t1 = t0 + t.retry;
        let (s, change) = next(s, &Attempt::Held, t1, t1, &t);
        assert_eq!(s, Leadership::Leader { renewed: t1 });
        assert_eq!(change, Some(Change::StartControllers));
        assert!(s.runs_controllers());
    }

    #[test]
    fn a_candidate_that_lost_the_race_starts_nothing() {
        let t = Timing::DEFAULT;
        let t0 = Instant::now();
        for seen in [
            Attempt::HeldBy("b".into()),
            Attempt::Failed("timeout".into()),
        ] {
            let (s, change) = next(Leadership::Candidate, &seen, t0, t0, &t);
            assert_eq!((s, change), (Leadership::Follower, None), "{seen:?}");
        }
    }

    #[test]
    fn a_leader_stops_when_another_holds_the_lease() {
        let t = Timing::DEFAULT;
        let t0 = Instant::now();
        let leader = Leadership::Leader { renewed: t0 };
        let (s, change) = next(leader, &Attempt::HeldBy("b".into()), t0, t0, &t);
        assert_eq!(s, Leadership::Follower);
        assert_eq!(
            change,
            Some(Change::StopControllers(
                "the leader Lease is now held by b".into()
            ))
        );
    }

    #[test]
    fn a_leader_rides_out_failures_until_the_renew_deadline() {
        let t = Timing::DEFAULT;
        let t0 = Instant::now();
        let leader = Leadership::Leader { renewed: t0 };
        let failed = Attempt::Failed("503".into());
        let just_before = t0 + t.renew_deadline - Duration::from_millis(1);
        assert_eq!(
            next(leader, &failed, just_before, just_before, &t),
            (leader, None)
        );
        let at = t0 + t.renew_deadline;
        let (s, change) = next(leader, &failed, at, at, &t);
        assert_eq!(s, Leadership::Follower);
        assert!(
            matches!(change, Some(Change::StopControllers(ref why)) if why.contains("could not renew the leader Lease for 10s: 503")),
            "{change:?}"
        );
    }

    #[test]
    fn a_try_of_a_leader_never_outlasts_its_deadline() {
        let t = Timing::DEFAULT;
        let t0 = Instant::now();
        let leader = Leadership::Leader { renewed: t0 };
        assert_eq!(attempt_budget(leader, t0, &t), t.retry);
        let late = t0 + t.renew_deadline - Duration::from_millis(300);
        assert_eq!(attempt_budget(leader, late, &t), Duration::from_millis(300));
        assert_eq!(attempt_budget(leader, t0 + t.lease, &t), Duration::ZERO);
        assert_eq!(attempt_budget(Leadership::Follower, late, &t), t.retry);
    }

    #[test]
    fn a_leader_tries_again_by_its_deadline_at_the_latest() {
        let t = Timing::DEFAULT;
        let t0 = Instant::now();
        let leader = Leadership::Leader { renewed: t0 };
        assert_eq!(next_try_at(leader, t0, &t), t0 + t.retry);
        // After failed tries, the last one comes at the deadline itself.
        let late = t0 + t.renew_deadline - Duration::from_millis(500);
        assert_eq!(next_try_at(leader, late, &t), t0 + t.renew_deadline);
        assert_eq!(next_try_at(Leadership::Follower, late, &t), late + t.retry);
    }

    fn attempt() -> impl Strategy<Value = Attempt> {
        prop_oneof![
            Just(Attempt::Held),
            Just(Attempt::HeldBy("b".into())),
            Just(Attempt::Failed("error".into())),
        ]
    }

    proptest! {
        /// Over any sequence of tries, paced by `next_try_at` and cut off at
        /// their budget: controllers start only after two tries in a row
        /// held the Lease, start and stop alternate, and a leader's
        /// controllers never run past the renew deadline counted from the
        /// start of its last try that held the Lease (so they have stopped
        /// before that Lease expires and another replica may take it).
        #[test]
        fn leadership_is_confirmed_alternates_and_never_outlives_the_lease(
            tries in proptest::collection::vec((attempt(), 0u64..3_000), 1..60)
        ) {
            let t = Timing::DEFAULT;
            let mut started = Instant::now();
            let mut state = Leadership::Follower;
            let mut running = false;
            let mut previous_held = false;
            let mut last_held_start = None;
            for (seen, took_ms) in tries {
                let budget = attempt_budget(state, started, &t);
                let took = Duration::from_millis(took_ms);
                // A try that outlasts its budget is cut off as a failure.
                let (seen, ended) = if took > budget {
                    (Attempt::Failed("timed out".into()), started + budget)
                } else {
                    (seen, started + took)
                };
                let (after, change) = next(state, &seen, started, ended, &t);
                match change {
                    Some(Change::StartControllers) => {
                        prop_assert!(!running, "started twice");
                        prop_assert!(previous_held && seen == Attempt::Held, "started without two held tries");
                        running = true;
                    }
                    Some(Change::StopControllers(_)) => {
                        prop_assert!(running, "stopped what was not running");
                        running = false;
                    }
                    None => {}
                }
                prop_assert_eq!(running, after.runs_controllers());
                if seen == Attempt::Held {
                    last_held_start = Some(started);
                }
                let following = next_try_at(after, started, &t).max(ended);
                if running {
                    // Running until the next try, which ends within its budget.
                    let renewed = last_held_start.expect("a leader held the Lease once");
                    let latest = following + attempt_budget(after, following, &t);
                    prop_assert!(latest.duration_since(renewed) <= t.renew_deadline);
                }
                previous_held = seen == Attempt::Held;
                state = after;
                started = following;
            }
        }
    }
}
