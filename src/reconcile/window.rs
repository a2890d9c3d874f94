//! How a controller's triggers are batched: the first trigger of an object
//! opens a window of [`BATCH_WINDOW`]; every trigger of the same object that
//! arrives while the window is open joins it; when the window closes the
//! object goes to the controller's queue, once. A trigger therefore waits
//! at most one window, whatever arrives after it (client-go's delaying
//! queue, `AddAfter` of an item already waiting, keeps the earlier time the
//! same way).
//!
//! Why not kube-runtime's `Config::debounce`: its scheduler moves an
//! object's time to `now + debounce` on every new trigger
//! (`Scheduler::schedule_message`: an entry whose `run_at` is not earlier
//! than the new request's is reset to the request's time plus the
//! debounce), so an object whose children keep changing, faster than the
//! debounce, is never reconciled (issue 37: an InferenceService with
//! 10 000 LeaderWorkerSets, each reporting status, kept its
//! observedGeneration behind for 13 minutes). Its documentation says so:
//! it "delays (and keeps delaying) reconcile requests" and "can permanently
//! hide updates". The test
//! `kube_runtime_debounce_starves_an_object_triggered_without_pause`
//! below shows it.
//!
//! After the window, the controller runs without debounce: an object whose
//! reconcile is running when it is triggered again is held (once, however
//! many triggers) and reconciled as soon as the running one ends; at most
//! [`super::CONCURRENCY`] reconciles run at once.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::time::Instant;

/// How long the first trigger of an object waits for more of its kind: a
/// rollout's burst of pod events becomes one reconcile, and no trigger
/// waits longer than this before it is queued.
pub const BATCH_WINDOW: Duration = Duration::from_millis(500);

/// What [`batched`] keeps between items.
struct Windows<S, T, L> {
    input: std::pin::Pin<Box<futures::stream::Fuse<S>>>,
    /// The objects whose window is open, each with the greatest label of
    /// the triggers it holds.
    open: HashMap<T, L>,
    /// When each open window closes, in order: every window is equally
    /// long, so they close in the order they opened.
    closing: VecDeque<(Instant, T)>,
    window: Duration,
}

/// `input`, each item held until its window of `window` closes (see the
/// module's documentation), with the greatest label of the triggers its
/// window held (an object's own change outranks a child's: see
/// [`crate::watch::caches::Cause`]). Ends when `input` ends; items still in an open
/// window are dropped then (the controller is stopping and starts no new
/// reconcile).
pub fn batched<T, L, S>(input: S, window: Duration) -> impl Stream<Item = (T, L)>
where
    T: Hash + Eq + Clone,
    L: Ord + Copy,
    S: Stream<Item = (T, L)>,
{
    let state = Windows {
        input: Box::pin(input.fuse()),
        open: HashMap::<T, L>::new(),
        closing: VecDeque::new(),
        window,
    };
    futures::stream::unfold(state, |mut state| async move {
        loop {
            if let Some((at, _)) = state.closing.front()
                && *at <= Instant::now()
                && let Some((_, item)) = state.closing.pop_front()
                && let Some(label) = state.open.remove(&item)
            {
                return Some(((item, label), state));
            }
            let next_close = state.closing.front().map(|(at, _)| *at);
            tokio::select! {
                arrived = state.input.next() => match arrived {
                    Some((item, label)) => match state.open.get_mut(&item) {
                        Some(held) => *held = (*held).max(label),
                        None => {
                            state.open.insert(item.clone(), label);
                            let now = Instant::now();
                            // Past the end of time (never): at once.
                            let closes = now.checked_add(state.window).unwrap_or(now);
                            state.closing.push_back((closes, item));
                        }
                    },
                    None => return None,
                },
                () = sleep_until(next_close) => {}
            }
        }
    })
}

/// Sleeps until `at`; forever when there is no `at`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => futures::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::controller::{Action, Config, applier};
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    /// One object in a store, and a trigger of it every `every` for `for_`,
    /// fed to kube-runtime's applier with `config` (through [`batched`]
    /// when `window` is set). Returns the times (since the start) at which
    /// the reconciler started, each reconcile taking `takes`, until 5 s
    /// after the last trigger.
    async fn reconciles_under_triggers(
        config: Config,
        window: Option<Duration>,
        every: Duration,
        for_: Duration,
        takes: Duration,
    ) -> Vec<Duration> {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let object = ConfigMap {
            metadata: ObjectMeta {
                name: Some("owner".to_owned()),
                namespace: Some("default".to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        // Listed, as a reflector lists: the applier waits for a ready store.
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(object.clone()));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let start = Instant::now();
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        let triggers = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            while start.elapsed() < for_ {
                ticks.tick().await;
                if sender.unbounded_send(ObjectRef::from_obj(&object)).is_err() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(sender);
        });
        let queue: std::pin::Pin<Box<dyn Stream<Item = ObjectRef<ConfigMap>> + Send>> = match window
        {
            Some(window) => Box::pin(batched(receiver.map(|o| (o, ())), window).map(|(o, ())| o)),
            None => Box::pin(receiver),
        };
        let started = Arc::new(Mutex::new(Vec::new()));
        let seen = started.clone();
        applier(
            move |_: Arc<ConfigMap>, _: Arc<()>| {
                seen.lock().expect("not poisoned").push(start.elapsed());
                Box::pin(async move {
                    tokio::time::sleep(takes).await;
                    Ok::<_, Never>(Action::await_change())
                })
            },
            |_, _: &Never, _| Action::await_change(),
            Arc::new(()),
            store,
            queue.map(Ok::<_, Infallible>),
            config,
        )
        // The applier may outlive its queue; the measure ends 5 s after
        // the last trigger.
        .take_until(tokio::time::sleep(for_ + Duration::from_secs(5)))
        .for_each(|_| async {})
        .await;
        triggers.await.expect("the trigger task ends");
        started.lock().expect("not poisoned").clone()
    }

    /// Issue 37's cause (b): kube-runtime's debounce of 500 ms, which
    /// Tandem's controllers ran with, and a child reporting status every
    /// 100 ms for 30 s: the owner is not reconciled once in those 30 s,
    /// only half a second after the triggers stop.
    #[tokio::test(start_paused = true)]
    async fn kube_runtime_debounce_starves_an_object_triggered_without_pause() {
        let started = reconciles_under_triggers(
            Config::default().debounce(Duration::from_millis(500)),
            None,
            Duration::from_millis(100),
            Duration::from_secs(30),
            Duration::from_millis(50),
        )
        .await;
        assert!(
            started.iter().all(|t| *t >= Duration::from_secs(30)),
            "reconciled while triggered: {started:?}"
        );
        assert_eq!(started.len(), 1, "{started:?}");
    }

    /// The fix: the same stream of triggers through [`batched`] and the
    /// controllers' own configuration. The owner is reconciled about once
    /// per window, and no trigger waits for a reconcile to start longer
    /// than the window plus one reconcile's time.
    #[tokio::test(start_paused = true)]
    async fn a_trigger_waits_at_most_one_window_however_many_follow() {
        let takes = Duration::from_millis(50);
        let started = reconciles_under_triggers(
            super::super::controller_config(),
            Some(BATCH_WINDOW),
            Duration::from_millis(100),
            Duration::from_secs(30),
            takes,
        )
        .await;
        // A trigger at each 100 ms tick from 0 to 30 s.
        let mut worst = Duration::ZERO;
        for tick in 0..300u32 {
            let at = Duration::from_millis(100) * tick;
            let next = started
                .iter()
                .find(|t| **t >= at)
                .unwrap_or_else(|| panic!("the trigger at {at:?} was never served: {started:?}"));
            worst = worst.max(*next - at);
        }
        assert!(
            worst <= BATCH_WINDOW + takes,
            "a trigger waited {worst:?} for its reconcile"
        );
        // Batched, not one reconcile per trigger: about one per window.
        assert!(
            (55..=65).contains(&started.len()),
            "{} reconciles for 300 triggers: {started:?}",
            started.len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn triggers_of_different_objects_each_get_their_own_window() {
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        let start = Instant::now();
        let out = tokio::spawn(async move {
            batched(receiver.map(|item| (item, ())), Duration::from_millis(500))
                .map(|(item, ()): (&str, ())| (item, start.elapsed()))
                .collect::<Vec<_>>()
                .await
        });
        sender.unbounded_send("a").expect("open");
        tokio::time::sleep(Duration::from_millis(200)).await;
        sender.unbounded_send("b").expect("open");
        sender.unbounded_send("a").expect("open");
        tokio::time::sleep(Duration::from_millis(400)).await;
        sender.unbounded_send("a").expect("open");
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(sender);
        let out = out.await.expect("the batching ends");
        let at = |ms| Duration::from_millis(ms);
        assert_eq!(out, [("a", at(500)), ("b", at(700)), ("a", at(1100))]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_input_ends_the_stream_without_waiting() {
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        sender.unbounded_send(1).expect("open");
        drop(sender);
        let start = Instant::now();
        let out: Vec<(i32, ())> = batched(receiver.map(|i| (i, ())), Duration::from_secs(60))
            .collect()
            .await;
        assert!(out.is_empty());
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    /// A window that holds an object's own change and its children's
    /// comes out with the greater label, whichever came first.
    #[tokio::test(start_paused = true)]
    async fn a_window_keeps_the_greatest_label_of_its_triggers() {
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        let out = tokio::spawn(async move {
            batched(receiver, Duration::from_millis(500))
                .collect::<Vec<_>>()
                .await
        });
        sender.unbounded_send(("a", 1)).expect("open");
        sender.unbounded_send(("a", 2)).expect("open");
        sender.unbounded_send(("a", 1)).expect("open");
        sender.unbounded_send(("b", 1)).expect("open");
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(sender);
        assert_eq!(out.await.expect("the batching ends"), [("a", 2), ("b", 1)]);
    }
}
