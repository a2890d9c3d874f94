//! How a failed attempt is retried, by the controllers (a reconcile) and by
//! the caches (a watch): a wait that doubles after each failure in a row, up
//! to a longest, moved by jitter so that what failed together does not retry
//! together.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

/// How a failed reconcile is retried: after `first`, twice as long after
/// each failure in a row up to `longest`, each wait moved by up to a quarter
/// either way so that objects that failed together do not retry together.
/// A transient failure (429, 5xx, unreachable) starts from `first_transient`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureBackoff {
    pub first_transient: Duration,
    pub first: Duration,
    pub longest: Duration,
}

impl Default for FailureBackoff {
    fn default() -> Self {
        FailureBackoff {
            first_transient: Duration::from_secs(1),
            first: Duration::from_secs(5),
            longest: Duration::from_secs(300),
        }
    }
}

impl FailureBackoff {
    /// The wait after the `failures`th failure in a row (1 for the first),
    /// before jitter.
    pub fn delay(&self, failures: u32, transient: bool) -> Duration {
        let first = if transient {
            self.first_transient
        } else {
            self.first
        };
        let factor = 2u32
            .checked_pow(failures.saturating_sub(1))
            .unwrap_or(u32::MAX);
        first.saturating_mul(factor).min(self.longest)
    }

    /// `delay` moved by `unit` (in [0, 1)) times half of it, less a quarter:
    /// between 75 % and 125 % of it.
    pub fn jittered(delay: Duration, unit: f64) -> Duration {
        delay.mul_f64(0.75 + unit.clamp(0.0, 1.0) / 2.0)
    }
}

/// A number in [0, 1) that differs from call to call (std's random hasher
/// keys), for jitter; nothing here needs more randomness than that.
pub fn jitter_unit(key: &str) -> f64 {
    let hash = RandomState::new().hash_one(key);
    // 53 bits fit a f64's mantissa exactly.
    (hash >> 11) as f64 / (1u64 << 53) as f64
}
