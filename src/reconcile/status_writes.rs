//! When this process last wrote each object's status, for the pace of
//! count-only status writes (`plan::inference_service::status::status_write`).
//! Kept in memory: after a restart the first write of each object is not
//! held back, which costs one write per object at most.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::plan::inference_service::status::StatusPace;

/// The last status write of each object (`namespace/name`), for as long as
/// it can still hold the next one back.
pub struct StatusWrites {
    /// How often, at most, a status whose counts alone moved is written;
    /// [`StatusPace::NONE`] writes every change.
    pub pace: StatusPace,
    last: Mutex<Writes>,
}

#[derive(Default)]
struct Writes {
    at: HashMap<String, Instant>,
    /// How many entries the map had after it was last pruned: it is pruned
    /// again once it holds twice as many, so a prune costs what the writes
    /// since the last one did.
    pruned_at: usize,
}

/// Fewer entries than this are never pruned.
const PRUNE_FLOOR: usize = 1024;

impl StatusWrites {
    pub fn new(pace: StatusPace) -> StatusWrites {
        StatusWrites {
            pace,
            last: Mutex::default(),
        }
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Writes> {
        // Entries are replaced one at a time: a panic cannot leave one
        // half-written.
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long ago `key`'s status was last written by this process, if it
    /// was within the longer pace.
    pub fn since(&self, key: &str) -> Option<Duration> {
        let since = self.last().at.get(key)?.elapsed();
        (since < self.pace.longest()).then_some(since)
    }

    /// `key`'s status was just written.
    pub fn written(&self, key: &str) {
        if self.pace.longest().is_zero() {
            return;
        }
        let now = Instant::now();
        let mut last = self.last();
        last.at.insert(key.to_owned(), now);
        if last.at.len() >= PRUNE_FLOOR.max(last.pruned_at.saturating_mul(2)) {
            let pace = self.pace.longest();
            last.at.retain(|_, at| now.duration_since(*at) < pace);
            last.pruned_at = last.at.len();
        }
    }

    /// How many objects are remembered.
    pub fn remembered(&self) -> usize {
        self.last().at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_is_remembered_for_the_longer_pace_and_then_forgotten() {
        let writes = StatusWrites::new(StatusPace {
            counts: Duration::from_millis(300),
            pods: Duration::from_secs(1),
        });
        assert_eq!(writes.since("ns/a"), None);
        writes.written("ns/a");
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(writes.since("ns/a"), Some(Duration::from_millis(400)));
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(writes.since("ns/a"), None);
        // Old entries go once the map has doubled since the last prune.
        for i in 0..PRUNE_FLOOR {
            writes.written(&format!("ns/{i}"));
        }
        assert_eq!(writes.remembered(), PRUNE_FLOOR);
        tokio::time::advance(Duration::from_secs(2)).await;
        for i in 0..PRUNE_FLOOR {
            writes.written(&format!("other/{i}"));
        }
        assert!(
            writes.remembered() <= PRUNE_FLOOR,
            "{} remembered",
            writes.remembered()
        );
    }

    #[test]
    fn a_pace_of_zero_remembers_nothing() {
        let writes = StatusWrites::new(StatusPace::NONE);
        writes.written("ns/a");
        assert_eq!(writes.since("ns/a"), None);
        assert_eq!(writes.remembered(), 0);
    }
}
