//! How long an object rests between two reconciles: in proportion to what
//! its last pass cost, so that the passes of one object take at most a
//! fixed share of one core, however large the object is.
//!
//! A pass over an InferenceService costs what its replicas do: reading its
//! children and pods from the caches, planning, comparing (about 0.1 to
//! 0.2 s for a service of 1 000 replicas, BENCHMARKS.md). While such a
//! service scales, its pods change many times a second, so the trigger
//! window ([`super::window::BATCH_WINDOW`]) queues it again right after
//! each pass: it was reconciled every half second or so, and Tandem's CPU
//! grew with the service's size times the length of the scale. With a rest
//! of [`Rest::DEFAULT`]'s nineteen times the pass's cost, a trigger that
//! arrives meanwhile waits, joined by every later one, and the passes of
//! one object use at most a twentieth of a core: a wide service is
//! reconciled every second or two, a small one (a pass of a few
//! milliseconds) as before, its rest far inside the trigger window.
//!
//! The factor was nine (a tenth of a core) until a wide service kept its
//! children parsed between passes ([`crate::watch::parsed`]): that made its
//! passes cheaper, and at nine their rests shorter and their number larger,
//! for the same tenth of a core, which is what a wide service's way up
//! spent (BENCHMARKS.md, "Scale and back"). Nineteen halves that share and
//! keeps the rest about what it was before the passes got cheaper.
//!
//! What it costs: the status of a wide service, and its next write, lag by
//! up to its rest, at most [`Rest::DEFAULT`]'s five seconds (docs/serve.md).
//!
//! Rejected:
//! - a longer trigger window for every object: it slows every small
//!   service's status for what only wide ones need;
//! - a fixed rest per replica: the cost of a pass depends on the machine
//!   and on what the pass finds, which the measured time already says;
//! - the reconcile's whole time: it includes its waits on the API server
//!   and the client's rate limit, which cost no CPU. Only the pass's own
//!   work (observe and plan, which do not wait) is measured.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The rule: an object rests `factor` times what its last pass cost, and
/// never longer than `longest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rest {
    pub factor: u32,
    pub longest: Duration,
}

impl Rest {
    /// No rest: every trigger is reconciled after its window
    /// ([`super::Context::new`], for tests that drive reconciles).
    pub const NONE: Rest = Rest {
        factor: 0,
        longest: Duration::ZERO,
    };

    /// `tandem serve`'s: a twentieth of a core per object, a rest of at
    /// most five seconds.
    pub const DEFAULT: Rest = Rest {
        factor: 19,
        longest: Duration::from_secs(5),
    };

    /// How long an object rests after a pass whose own work took `cost`.
    pub fn after(self, cost: Duration) -> Duration {
        cost.saturating_mul(self.factor).min(self.longest)
    }
}

/// When each object may be reconciled again, by key (`Kind namespace/name`).
#[derive(Debug)]
pub struct Rests {
    rule: Rest,
    until: Mutex<HashMap<String, Instant>>,
}

impl Rests {
    pub fn new(rule: Rest) -> Rests {
        Rests {
            rule,
            until: Mutex::default(),
        }
    }

    pub fn rule(&self) -> Rest {
        self.rule
    }

    /// Records that `key`'s pass, ending `now`, cost `cost`.
    pub fn passed(&self, key: &str, cost: Duration, now: Instant) {
        let rest = self.rule.after(cost);
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        match now.checked_add(rest) {
            Some(end) if !rest.is_zero() => {
                until.insert(key.to_owned(), end);
            }
            _ => {
                until.remove(key);
            }
        }
    }

    /// Forgets `key` (its object deleted): a rest that no later reconcile
    /// reads would otherwise stay in memory.
    pub fn forget(&self, key: &str) {
        self.until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// Until when `key` rests, if it still does at `now`; a rest that is
    /// over is forgotten (so that objects deleted since are not kept).
    pub fn resting(&self, key: &str, now: Instant) -> Option<Instant> {
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        match until.get(key) {
            Some(&at) if at > now => Some(at),
            Some(_) => {
                until.remove(key);
                None
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_pass_rests_nineteen_times_its_cost_up_to_five_seconds() {
        let rule = Rest::DEFAULT;
        assert_eq!(rule.after(Duration::ZERO), Duration::ZERO);
        // A small service: far inside the trigger window.
        assert_eq!(rule.after(2 * MS), 38 * MS);
        // A service of 1 000 replicas.
        assert_eq!(rule.after(60 * MS), 1140 * MS);
        assert_eq!(rule.after(Duration::from_secs(2)), Duration::from_secs(5));
        assert_eq!(Rest::NONE.after(Duration::from_secs(2)), Duration::ZERO);
    }

    #[test]
    fn an_object_rests_after_its_pass_and_only_until_its_rest_is_over() {
        let rests = Rests::new(Rest::DEFAULT);
        let start = Instant::now();
        assert_eq!(rests.resting("InferenceService a/wide", start), None);
        rests.passed("InferenceService a/wide", 200 * MS, start);
        rests.passed("InferenceService a/small", Duration::ZERO, start);
        let until = start + 3800 * MS;
        assert_eq!(rests.resting("InferenceService a/wide", start), Some(until));
        assert_eq!(
            rests.resting("InferenceService a/wide", start + 3799 * MS),
            Some(until)
        );
        assert_eq!(rests.resting("InferenceService a/small", start), None);
        assert_eq!(rests.resting("InferenceService a/wide", until), None);
        // Forgotten once over.
        assert!(rests.until.lock().unwrap().is_empty());
        // A later, cheaper pass shortens the rest.
        rests.passed("InferenceService a/wide", 200 * MS, start);
        rests.passed("InferenceService a/wide", Duration::ZERO, start);
        assert_eq!(rests.resting("InferenceService a/wide", start), None);
        // A deleted object's rest is forgotten.
        rests.passed("InferenceService a/gone", 200 * MS, start);
        rests.forget("InferenceService a/gone");
        assert!(rests.until.lock().unwrap().is_empty());
    }
}
