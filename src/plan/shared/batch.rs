//! How much of a plan one reconcile carries out (issue 37): a bounded step,
//! then the controller plans again from the newest caches.
//!
//! - **Slow start** ([`Pace`]): the first pass of a burst writes 1 object,
//!   then 2, 4, 8 … up to [`LARGEST_BATCH`], the size doubling after each
//!   batch whose every write succeeded and falling back to 1 after a
//!   failure; Kubernetes' ReplicaSet controller creates pods the same way
//!   (`slowStartBatch`), so that a plan the API server refuses (quota, a
//!   webhook) costs one refused write, not ten thousand.
//! - **Which writes** ([`this_pass`]): a prefix of the plan, in the plan's
//!   own order (the PodGroup before the LeaderWorkerSets that name it,
//!   applies before deletions, each planner's drains and floors), so the
//!   order a planner emits stays the order the API server sees. What is not
//!   written this pass is planned again next pass, from a world that shows
//!   what this pass wrote: a corrected spec takes effect after at most one
//!   batch.
//! - **Expectations** ([`Expected`]): what a batch wrote is remembered until
//!   the cache shows it (or [`EXPECTATION_TIMEOUT`] passes), and while any is
//!   outstanding the owner writes none of its objects, as the ReplicaSet
//!   controller's `SatisfiedExpectations` gate does: a cache that lags does
//!   not make Tandem create an object twice, or announce it twice.
//! - **Events** ([`summarise`]): one Event per kind of change and kind of
//!   object in a batch, naming the count and the names' range, not one per
//!   object.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

/// The first batch of a burst: one write, as the ReplicaSet controller's
/// `SlowStartInitialBatchSize`.
pub const FIRST_BATCH: usize = 1;

/// The largest batch. Kubernetes' ReplicaSet controller allows 500
/// (`burstReplicas`), but its writes are cheap pod creations checked by
/// the API server alone; Tandem's are whole LeaderWorkerSets (each one a
/// StatefulSet, a Service and pods downstream) and go through a client
/// limited to 20 requests a second by default (`--kube-api-qps`): 64 writes
/// take about 3 s at that rate, so a spec corrected during a burst is
/// planned again within about 3 s, where 500 would hold the owner for 25 s.
/// The rate, not the batch, bounds throughput; the batch bounds staleness.
pub const LARGEST_BATCH: usize = 64;

/// How long a write is expected to show in the cache before it is taken as
/// lost and the owner is planned again anyway. A watch delivers a write in
/// milliseconds; 30 s covers a watch that restarts and lists again. The
/// ReplicaSet controller waits 5 minutes, because a pod created twice runs
/// twice; a server-side apply made twice lands once, so the cost of giving
/// up early is one repeated write, and the cost of waiting is an owner held
/// still.
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How soon an owner whose plan was not carried out whole is looked at
/// again, when no watch event comes first (each write of the batch sends
/// one as the cache sees it).
pub const NEXT_STEP: Duration = Duration::from_secs(1);

/// How many writes a pass may make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// All of them: `tandem render` (whose output is the whole desired
    /// state, in at most 10 passes) and tests that look at one pass.
    Unbounded,
    /// Slow start: `first`, doubled after each batch written whole, up to
    /// `largest`.
    SlowStart { first: usize, largest: usize },
}

/// How a batch went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every write succeeded.
    Written,
    /// A write failed; the batch stopped there.
    Failed,
}

impl Pace {
    /// What the controllers of `tandem serve` run with.
    pub const DEFAULT: Pace = Pace::SlowStart {
        first: FIRST_BATCH,
        largest: LARGEST_BATCH,
    };

    /// The size of a burst's first batch.
    pub fn first(self) -> usize {
        match self {
            Pace::Unbounded => usize::MAX,
            Pace::SlowStart { first, largest } => first.clamp(1, largest.max(1)),
        }
    }

    /// The size of the batch after one of `size` that went as `outcome`:
    /// doubled (up to the largest) when it was written whole, the first
    /// size again after a failure.
    pub fn after(self, size: usize, outcome: Outcome) -> usize {
        match (self, outcome) {
            (Pace::Unbounded, _) => usize::MAX,
            (Pace::SlowStart { .. }, Outcome::Failed) => self.first(),
            (Pace::SlowStart { largest, .. }, Outcome::Written) => {
                size.saturating_mul(2).clamp(self.first(), largest.max(1))
            }
        }
    }
}

/// How many of a plan's `planned` writes (applies, then deletions, in the
/// plan's order) this pass makes: none while an earlier batch's writes are
/// `awaited` (not yet in the cache), else the first `size`.
pub fn this_pass(planned: usize, size: usize, awaited: bool) -> usize {
    if awaited { 0 } else { planned.min(size) }
}

/// What one written object is expected to look like in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// `apiVersion`, `kind`, namespace, name.
    pub object: (String, String, String, String),
    pub awaited: Awaited,
    /// When it was written.
    pub since: jiff::Timestamp,
}

/// What the cache is to show of an object written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Awaited {
    /// Applied: the object, at another resourceVersion than `before` (the
    /// one the plan saw; None when it was not there, or the world keeps no
    /// versions, as `render`'s does not).
    Applied { before: Option<String> },
    /// Deleted: no object of uid `uid` without a deletionTimestamp.
    Deleted { uid: Option<String> },
}

/// The identity an [`Expected`] is matched by: apiVersion, kind, namespace
/// and name.
pub fn identity(object: &Value) -> (String, String, String, String) {
    let (api_version, kind, namespace, name) = identity_of(object);
    (
        api_version.to_owned(),
        kind.to_owned(),
        namespace.to_owned(),
        name.to_owned(),
    )
}

/// [`identity`], borrowed from the object: for lookups, which need no copy.
pub fn identity_of(object: &Value) -> (&str, &str, &str, &str) {
    fn text(v: &Value) -> &str {
        v.as_str().unwrap_or_default()
    }
    (
        text(&object["apiVersion"]),
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"]),
    )
}

/// `observed` by identity, the first of an identity kept: each write's and
/// each expectation's object found in one lookup, not a walk over them all.
pub fn by_identity<'a>(
    observed: &[&'a Value],
) -> HashMap<(&'a str, &'a str, &'a str, &'a str), &'a Value> {
    let mut found = HashMap::with_capacity(observed.len());
    for object in observed {
        found.entry(identity_of(object)).or_insert(*object);
    }
    found
}

impl Expected {
    /// `written` applied, `observed` what the plan saw of it.
    pub fn applied(written: &Value, observed: Option<&Value>, since: jiff::Timestamp) -> Expected {
        Expected {
            object: identity(written),
            awaited: Awaited::Applied {
                before: observed
                    .and_then(|o| o["metadata"]["resourceVersion"].as_str().map(str::to_owned)),
            },
            since,
        }
    }

    /// `deleted`, as the plan saw it.
    pub fn deleted(deleted: &Value, since: jiff::Timestamp) -> Expected {
        Expected {
            object: identity(deleted),
            awaited: Awaited::Deleted {
                uid: deleted["metadata"]["uid"].as_str().map(str::to_owned),
            },
            since,
        }
    }

    /// Whether `observed` (the cache's object of the same identity, if any)
    /// shows the write.
    pub fn met(&self, observed: Option<&Value>) -> bool {
        let version = |o: &Value| o["metadata"]["resourceVersion"].as_str().map(str::to_owned);
        match (&self.awaited, observed) {
            (Awaited::Applied { .. }, None) => false,
            (Awaited::Applied { before: None }, Some(_)) => true,
            (Awaited::Applied { before }, Some(o)) => version(o) != *before,
            (Awaited::Deleted { .. }, None) => true,
            (Awaited::Deleted { uid }, Some(o)) => {
                o["metadata"]["uid"].as_str() != uid.as_deref()
                    || !o["metadata"]["deletionTimestamp"].is_null()
            }
        }
    }
}

/// The expectations still outstanding at `now`, the cache showing
/// `observed`: those not met and written less than `timeout` ago.
pub fn outstanding(
    expected: Vec<Expected>,
    observed: &[&Value],
    now: jiff::Timestamp,
    timeout: Duration,
) -> Vec<Expected> {
    let observed = by_identity(observed);
    expected
        .into_iter()
        .filter(|e| {
            let young = now
                .duration_since(e.since)
                .try_into()
                .map_or(true, |age: Duration| age < timeout);
            let (api_version, kind, namespace, name) = &e.object;
            let seen = observed
                .get(&(
                    api_version.as_str(),
                    kind.as_str(),
                    namespace.as_str(),
                    name.as_str(),
                ))
                .copied();
            young && !e.met(seen)
        })
        .collect()
}

/// One object written in a batch, as its Event would have said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written<'a> {
    /// `Created`, `Updated`, `Reverted` or `Deleted`.
    pub reason: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    /// The object's own note: what and why.
    pub note: &'a str,
}

/// The Event for some of a batch's writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub reason: String,
    pub note: String,
    /// The indices (into the batch) of the writes it tells of.
    pub writes: Vec<usize>,
}

/// The Events of a batch: one per reason and kind, in the order each first
/// appears. One write keeps its own note; several are told as
/// "created 16 LeaderWorkerSets a-decode-0..15: {why of the first}", and
/// `left` (writes the plan has beyond this batch) is said when not 0.
pub fn summarise(batch: &[Written<'_>], left: usize) -> Vec<Summary> {
    let mut groups: Vec<((&str, &str), Vec<usize>)> = Vec::new();
    for (i, write) in batch.iter().enumerate() {
        let key = (write.reason, write.kind);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    let rest = if left == 0 {
        String::new()
    } else {
        format!("; {left} more write(s) planned, in the next batches")
    };
    groups
        .into_iter()
        .map(|((reason, kind), writes)| {
            let first = &batch[writes[0]];
            let note = if writes.len() == 1 {
                format!("{}{rest}", first.note)
            } else {
                let names: Vec<&str> = writes.iter().map(|&i| batch[i].name).collect();
                format!(
                    "{} {} {}s {}: {}{rest}",
                    verb(reason),
                    writes.len(),
                    kind,
                    name_ranges(&names),
                    why(first)
                )
            };
            Summary {
                reason: reason.to_owned(),
                note,
                writes,
            }
        })
        .collect()
}

fn verb(reason: &str) -> String {
    match reason {
        "Created" => "created".to_owned(),
        "Updated" => "updated".to_owned(),
        "Reverted" => "set back".to_owned(),
        "Deleted" => "deleted".to_owned(),
        other => other.to_lowercase(),
    }
}

/// The why of a note written as `{kind} {name} {what}: {why}`; the whole
/// note otherwise.
fn why<'a>(write: &Written<'a>) -> &'a str {
    let prefix = format!("{} {} ", write.kind, write.name);
    write
        .note
        .strip_prefix(prefix.as_str())
        .and_then(|rest| rest.split_once(": "))
        .map_or(write.note, |(_, why)| why)
}

/// Consecutive names: a prefix and the first and last number of a run
/// (None: a name told whole), and how many names.
type Run = (String, Option<(u64, u64)>, usize);

/// How many runs of names a range shows before it says "and N more".
const RUNS_SHOWN: usize = 4;

/// Names told briefly: names that share a prefix and end in numbers as
/// `a-decode-0..15` (runs of consecutive numbers joined, `a-decode-0..3, 7`),
/// others listed; at most [`RUNS_SHOWN`] runs, then how many more names.
pub fn name_ranges(names: &[&str]) -> String {
    let mut runs: Vec<Run> = Vec::new();
    for name in names {
        let prefix = name.trim_end_matches(|c: char| c.is_ascii_digit());
        let number = &name[prefix.len()..];
        // A leading zero (or no digits) is not a number to range over.
        let number = match number.parse::<u64>() {
            Ok(n) if !(number.len() > 1 && number.starts_with('0')) => Some(n),
            _ => None,
        };
        match (runs.last_mut(), number) {
            (Some((p, Some((_, last)), count)), Some(n))
                if p == prefix && last.checked_add(1) == Some(n) =>
            {
                *last = n;
                *count = count.saturating_add(1);
            }
            (_, Some(n)) => runs.push((prefix.to_owned(), Some((n, n)), 1)),
            (_, None) => runs.push(((*name).to_owned(), None, 1)),
        }
    }
    let mut shown: Vec<String> = Vec::new();
    let mut previous: Option<&str> = None;
    for (prefix, numbers, _) in runs.iter().take(RUNS_SHOWN) {
        let text = match numbers {
            None => prefix.clone(),
            Some((a, b)) => {
                let span = if a == b {
                    a.to_string()
                } else {
                    format!("{a}..{b}")
                };
                // A run after one of the same prefix shows its numbers only.
                if previous == Some(prefix.as_str()) {
                    span
                } else {
                    format!("{prefix}{span}")
                }
            }
        };
        previous = numbers.map(|_| prefix.as_str());
        shown.push(text);
    }
    let hidden: usize = runs.iter().skip(RUNS_SHOWN).map(|(_, _, n)| n).sum();
    let mut text = shown.join(", ");
    if hidden > 0 {
        text.push_str(&format!(" and {hidden} more"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn slow_start_doubles_to_the_largest_and_starts_over_after_a_failure() {
        let pace = Pace::DEFAULT;
        let mut size = pace.first();
        let mut sizes = vec![size];
        for _ in 0..8 {
            size = pace.after(size, Outcome::Written);
            sizes.push(size);
        }
        assert_eq!(sizes, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(pace.after(32, Outcome::Failed), 1);
        assert_eq!(Pace::Unbounded.first(), usize::MAX);
        assert_eq!(Pace::Unbounded.after(5, Outcome::Failed), usize::MAX);
    }

    #[test]
    fn nothing_is_written_while_a_batch_is_awaited() {
        assert_eq!(this_pass(10_000, 16, true), 0);
        assert_eq!(this_pass(10_000, 16, false), 16);
        assert_eq!(this_pass(3, 16, false), 3);
    }

    proptest! {
        /// Any pace, any plan: a pass writes at most its batch and never
        /// more than planned; the batch stays within [1, largest]; and a
        /// burst of `planned` writes with no failure is written in at most
        /// log2(largest) + planned / largest + 1 passes.
        #[test]
        fn batches_are_bounded_and_a_burst_ends(
            first in 0usize..8, largest in 0usize..600, planned in 0usize..20_000,
            failures in proptest::collection::vec(any::<bool>(), 0..40),
        ) {
            let pace = Pace::SlowStart { first, largest };
            let cap = largest.max(1);
            let mut size = pace.first();
            prop_assert!((1..=cap).contains(&size));
            for failed in failures {
                let outcome = if failed { Outcome::Failed } else { Outcome::Written };
                size = pace.after(size, outcome);
                prop_assert!((1..=cap).contains(&size));
                if failed {
                    prop_assert_eq!(size, pace.first());
                }
            }
            let (mut left, mut size, mut passes) = (planned, pace.first(), 0usize);
            while left > 0 {
                let n = this_pass(left, size, false);
                prop_assert!(n <= size && n <= left && n >= 1);
                left -= n;
                size = pace.after(size, Outcome::Written);
                passes += 1;
            }
            let bound = (usize::BITS - cap.leading_zeros()) as usize + planned / cap + 1;
            prop_assert!(passes <= bound, "{} passes for {} writes, bound {}", passes, planned, bound);
        }
    }

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
    }

    fn lws(name: &str, version: &str, uid: &str) -> Value {
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"namespace": "ns", "name": name, "resourceVersion": version, "uid": uid}})
    }

    #[test]
    fn a_creation_is_met_once_the_cache_has_the_object() {
        let written = lws("a-decode-0", "", "");
        let expected = Expected::applied(&written, None, at(0));
        assert!(!expected.met(None));
        assert!(expected.met(Some(&lws("a-decode-0", "7", "u"))));
    }

    #[test]
    fn an_update_is_met_once_the_cache_has_a_newer_version() {
        let before = lws("a-decode-0", "7", "u");
        let expected = Expected::applied(&before, Some(&before), at(0));
        assert!(!expected.met(Some(&before)), "the stale object");
        assert!(expected.met(Some(&lws("a-decode-0", "8", "u"))));
        assert!(!expected.met(None), "not seen yet");
    }

    #[test]
    fn a_deletion_is_met_when_the_object_goes_or_is_going_or_was_replaced() {
        let before = lws("a-decode-0", "7", "u");
        let expected = Expected::deleted(&before, at(0));
        assert!(!expected.met(Some(&before)));
        assert!(expected.met(None));
        let mut going = before.clone();
        going["metadata"]["deletionTimestamp"] = json!("2027-01-01T00:00:00Z");
        assert!(expected.met(Some(&going)));
        assert!(expected.met(Some(&lws("a-decode-0", "9", "other"))));
    }

    #[test]
    fn expectations_expire_after_the_timeout() {
        let expected = vec![
            Expected::applied(&lws("a", "", ""), None, at(0)),
            Expected::applied(&lws("b", "", ""), None, at(0)),
        ];
        let b = lws("b", "1", "u");
        let left = outstanding(expected.clone(), &[&b], at(29), EXPECTATION_TIMEOUT);
        assert_eq!(left, expected[..1]);
        assert!(outstanding(expected, &[], at(30), EXPECTATION_TIMEOUT).is_empty());
    }

    fn created<'a>(name: &'a str, note: &'a str) -> Written<'a> {
        Written {
            reason: "Created",
            kind: "LeaderWorkerSet",
            name,
            note,
        }
    }

    #[test]
    fn a_batch_is_told_in_one_event_per_reason_and_kind() {
        let notes: Vec<(String, String)> = (0..16)
            .map(|i| {
                let name = format!("a-decode-{i}");
                let note = format!("LeaderWorkerSet {name} created: replica {i} of role decode ({} of 10002 replicas)", i + 1);
                (name, note)
            })
            .collect();
        let mut batch: Vec<Written<'_>> = notes.iter().map(|(n, note)| created(n, note)).collect();
        batch.push(Written {
            reason: "Deleted",
            kind: "LeaderWorkerSet",
            name: "a-prefill-3",
            note: "LeaderWorkerSet a-prefill-3 deleted: the role has 3 replicas",
        });
        let events = summarise(&batch, 9_970);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].reason, "Created");
        assert_eq!(
            events[0].note,
            "created 16 LeaderWorkerSets a-decode-0..15: replica 0 of role decode (1 of 10002 replicas); 9970 more write(s) planned, in the next batches"
        );
        assert_eq!(events[0].writes, (0..16).collect::<Vec<_>>());
        assert_eq!(
            events[1].note,
            "LeaderWorkerSet a-prefill-3 deleted: the role has 3 replicas; 9970 more write(s) planned, in the next batches"
        );
        // A batch written whole says nothing of what is left.
        let events = summarise(&batch[16..], 0);
        assert_eq!(
            events[0].note,
            "LeaderWorkerSet a-prefill-3 deleted: the role has 3 replicas"
        );
    }

    #[test]
    fn names_are_told_as_ranges() {
        assert_eq!(name_ranges(&["a-0", "a-1", "a-2"]), "a-0..2");
        assert_eq!(name_ranges(&["a-0", "a-1", "a-3", "b-4"]), "a-0..1, 3, b-4");
        assert_eq!(name_ranges(&["router", "epp"]), "router, epp");
        assert_eq!(name_ranges(&["g-01", "g-02"]), "g-01, g-02");
        assert_eq!(
            name_ranges(&["a-0", "a-2", "a-4", "a-6", "a-8", "a-10"]),
            "a-0, 2, 4, 6 and 2 more"
        );
    }

    proptest! {
        /// Every write of a batch is told by exactly one Event, and each
        /// Event's count is the number of writes it tells of.
        #[test]
        fn every_write_is_told_once(
            writes in proptest::collection::vec((0usize..4, 0usize..3, 0u32..50), 0..80),
            left in 0usize..5,
        ) {
            let reasons = ["Created", "Updated", "Reverted", "Deleted"];
            let kinds = ["LeaderWorkerSet", "Service", "PodGroup"];
            let names: Vec<String> = writes.iter().map(|(_, _, n)| format!("x-{n}")).collect();
            let notes: Vec<String> = names.iter().map(|n| format!("{n} because")).collect();
            let batch: Vec<Written<'_>> = writes.iter().enumerate().map(|(i, (r, k, _))| Written {
                reason: reasons[*r], kind: kinds[*k], name: &names[i], note: &notes[i],
            }).collect();
            let events = summarise(&batch, left);
            let mut told: Vec<usize> = events.iter().flat_map(|e| e.writes.clone()).collect();
            told.sort_unstable();
            prop_assert_eq!(told, (0..batch.len()).collect::<Vec<_>>());
            for event in &events {
                prop_assert!(event.writes.iter().all(|&i| batch[i].reason == event.reason));
                if event.writes.len() > 1 {
                    let count = format!(" {} ", event.writes.len());
                    prop_assert!(event.note.contains(&count), "{}", event.note);
                }
            }
        }
    }
}
