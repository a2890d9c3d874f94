//! Whether the cluster answers the caches' watches, for the log and for
//! `/readyz`. Against an unreachable or forbidden API server every watch
//! fails at once; the process logs one line per attempt (naming the cluster
//! and the error), not one per watch, and each watch waits longer after each
//! failure in a row ([`WATCH_BACKOFF`], with jitter).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::backoff::{FailureBackoff, jitter_unit};

/// How a failed watch is retried: 1 s, then twice as long after each
/// failure in a row, at most a minute, each wait moved by up to a quarter
/// either way so that the watches do not retry in step.
pub const WATCH_BACKOFF: FailureBackoff = FailureBackoff {
    first_transient: Duration::from_secs(1),
    first: Duration::from_secs(1),
    longest: Duration::from_secs(60),
};

/// Whether the failure of a watch starts a new attempt to be logged: the
/// first failure does, and later ones once three quarters of the nominal
/// wait after the `logged`th line have passed (jitter moves the watches'
/// retries by up to a quarter), so every watch's retry of one attempt
/// shares its line.
pub fn new_attempt(logged: u32, since_last_line: Option<Duration>) -> bool {
    match since_last_line {
        None => true,
        Some(elapsed) => elapsed >= WATCH_BACKOFF.delay(logged, true).mul_f64(0.75),
    }
}

/// A failure that has not been followed by a successful list yet.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Failing {
    since: jiff::Timestamp,
    error: String,
}

#[derive(Debug, Default)]
struct State {
    cluster: String,
    failing: Option<Failing>,
    /// Lines logged since the failures began.
    logged: u32,
    last_line: Option<Instant>,
}

/// The cluster's health as the caches see it.
#[derive(Debug, Default)]
pub struct ClusterHealth {
    state: Mutex<State>,
}

impl ClusterHealth {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is whole before the lock is let go.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Names the cluster the caches watch (its URL).
    pub fn watching(&self, cluster: &str) {
        cluster.clone_into(&mut self.state().cluster);
    }

    /// A watch of `kind` failed with `error`: logged when it starts a new
    /// attempt ([`new_attempt`]).
    pub fn failed(&self, kind: &str, error: &str) {
        let mut state = self.state();
        let now = Instant::now();
        let since = match &state.failing {
            Some(failing) => failing.since,
            None => jiff::Timestamp::now(),
        };
        state.failing = Some(Failing {
            since,
            error: error.to_owned(),
        });
        if !new_attempt(
            state.logged,
            state.last_line.map(|at| now.saturating_duration_since(at)),
        ) {
            return;
        }
        state.logged = state.logged.saturating_add(1);
        state.last_line = Some(now);
        let retry = WATCH_BACKOFF.delay(state.logged, true);
        tracing::warn!(
            cluster = %state.cluster,
            attempt = state.logged,
            since = %since,
            kind,
            error,
            retry_in = ?retry,
            "cannot watch the cluster; retrying"
        );
    }

    /// A watch got an object or finished a list: the cluster answers again.
    pub fn listed(&self) {
        let mut state = self.state();
        if let Some(failing) = state.failing.take() {
            tracing::info!(cluster = %state.cluster, since = %failing.since, "the cluster answers again");
        }
        state.logged = 0;
        state.last_line = None;
    }

    /// What `/readyz` says while the caches are not loaded.
    pub fn not_ready(&self) -> String {
        let state = self.state();
        match &state.failing {
            Some(failing) => format!(
                "not ready: cannot watch cluster {} since {} ({} attempts): {}",
                state.cluster, failing.since, state.logged, failing.error
            ),
            None if state.cluster.is_empty() => {
                "not ready: cluster caches are still loading".to_owned()
            }
            None => format!(
                "not ready: the caches of cluster {} are still loading",
                state.cluster
            ),
        }
    }
}

/// A watch's backoff: [`watch_delay`] after each failure in a row. The
/// watcher's own reset (on every event, its `Init` included, which it sends
/// before each list, so a list that keeps failing never waited longer) is
/// ignored: the reflector resets it when an object or a list's end comes.
#[derive(Clone, Debug, Default)]
pub struct WatchBackoff {
    failures: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl WatchBackoff {
    /// The cluster answered: the next failure waits the first wait again.
    pub fn listed(&self) {
        self.failures.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let failures = self
            .failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .saturating_add(1);
        Some(watch_delay(failures))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {}
}

/// The wait after a watch's `failures`th failure in a row, with jitter.
pub fn watch_delay(failures: u32) -> Duration {
    FailureBackoff::jittered(WATCH_BACKOFF.delay(failures, true), jitter_unit("watch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_attempt_with_growing_waits() {
        assert!(new_attempt(0, None));
        // The other watches failing within the same attempt share its line.
        assert!(!new_attempt(1, Some(Duration::from_millis(200))));
        assert!(new_attempt(1, Some(Duration::from_millis(800))));
        assert!(!new_attempt(3, Some(Duration::from_secs(2))));
        assert!(new_attempt(3, Some(Duration::from_secs(3))));
        assert!(!new_attempt(20, Some(Duration::from_secs(40))));
        assert!(new_attempt(20, Some(Duration::from_secs(45))));
        for failures in 1..30 {
            let wait = watch_delay(failures);
            assert!(wait >= Duration::from_millis(750) && wait <= Duration::from_secs(75));
        }
    }

    #[test]
    fn readiness_names_the_cluster_the_error_and_since_when() {
        let health = ClusterHealth::default();
        assert_eq!(
            health.not_ready(),
            "not ready: cluster caches are still loading"
        );
        health.watching("https://127.0.0.1:1/");
        health.failed("Pod", "connection refused");
        let said = health.not_ready();
        assert!(
            said.starts_with("not ready: cannot watch cluster https://127.0.0.1:1/ since ")
                && said.ends_with("(1 attempts): connection refused"),
            "{said}"
        );
        health.listed();
        assert_eq!(
            health.not_ready(),
            "not ready: the caches of cluster https://127.0.0.1:1/ are still loading"
        );
    }
}
