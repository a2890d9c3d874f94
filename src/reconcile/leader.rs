//! Leader election at run time: every replica of `tandem serve` serves the
//! webhooks, and only the one holding the Lease `tandem-controller` (in the
//! pod's namespace) runs the controllers. Each replica tries to take or renew
//! the Lease every retry period with `kube-leader-election`; what a try saw
//! and what follows from it is decided by `plan::shared::leadership` (a taken Lease
//! is confirmed by the next try before controllers start; a leader that loses
//! the Lease or cannot renew it in time stops them). An Event on the Lease
//! says when a replica starts or stops leading. On shutdown the leader
//! releases the Lease so another replica takes over without waiting for it
//! to expire.
//!
//! Stopping is a hand-over, never an overlap: the controllers are told to
//! stop taking work ([`Stopping`], which they pass to kube's
//! `Controller::graceful_shutdown_on`), the reconciles in flight finish, and
//! only then does the replica go on (and, on shutdown, release the Lease).
//! Controllers that have not ended after [`leadership::stop_grace`] are
//! aborted and awaited, so none of them runs once `lead` moves on.
//!
//! Candidates judge expiry by comparing the Lease's renewTime with their own
//! clock (as `kube-leader-election` does), so the nodes' clocks must agree to
//! well within the Lease duration minus the renew deadline (5 s by default).

use std::future::Future;
use std::time::Instant;

use futures::FutureExt;
use futures::future::Shared;
use tokio::sync::oneshot;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube_leader_election::{LeaseLock, LeaseLockParams, LeaseLockResult};
use tokio::task::JoinHandle;

use super::FIELD_MANAGER;
use crate::plan::shared::leadership::{self, Attempt, Change, Leadership, Timing};

/// The Lease whose holder runs the controllers.
pub const LEASE_NAME: &str = "tandem-controller";

/// One replica's part in the election.
pub struct Election {
    lock: LeaseLock,
    identity: String,
    timing: Timing,
    state: Leadership,
    recorder: Recorder,
    lease: ObjectReference,
}

impl Election {
    /// A replica named `identity` (its pod name), taking part in the election
    /// over the Lease [`LEASE_NAME`] in `namespace`.
    pub fn new(client: Client, namespace: &str, identity: &str, timing: Timing) -> Election {
        let lock = LeaseLock::new(
            client.clone(),
            namespace,
            LeaseLockParams {
                lease_name: LEASE_NAME.to_owned(),
                holder_id: identity.to_owned(),
                lease_ttl: timing.lease(),
            },
        );
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: Some(identity.to_owned()),
        };
        Election {
            lock,
            identity: identity.to_owned(),
            timing,
            state: Leadership::Follower,
            recorder: Recorder::new(client, reporter),
            lease: ObjectReference {
                api_version: Some("coordination.k8s.io/v1".to_owned()),
                kind: Some("Lease".to_owned()),
                name: Some(LEASE_NAME.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn state(&self) -> Leadership {
        self.state
    }

    /// One try to take or renew the Lease, cut off at its budget. Returns
    /// when it began and what to start or stop now.
    pub async fn try_once(&mut self) -> (Instant, Option<Change>) {
        let started = Instant::now();
        let budget = leadership::attempt_budget(self.state, started, &self.timing);
        let attempt = match tokio::time::timeout(budget, self.lock.try_acquire_or_renew()).await {
            Ok(Ok(LeaseLockResult::Acquired(lease))) => {
                leadership::attempt_of(true, &lease, &self.identity)
            }
            Ok(Ok(LeaseLockResult::NotAcquired(lease))) => {
                leadership::attempt_of(false, &lease, &self.identity)
            }
            Ok(Err(e)) => Attempt::Failed(e.to_string()),
            Err(_) => Attempt::Failed(format!("no answer within {budget:?}")),
        };
        if let Attempt::Failed(reason) = &attempt {
            tracing::debug!(identity = %self.identity, %reason, "could not take or renew the leader Lease");
        }
        let (state, change) =
            leadership::next(self.state, &attempt, started, Instant::now(), &self.timing);
        self.state = state;
        match &change {
            Some(Change::StartControllers) => {
                tracing::info!(identity = %self.identity, lease = LEASE_NAME, "leading: starting the controllers");
                self.record(
                    "StartControllers",
                    "became leader: starting the controllers".to_owned(),
                )
                .await;
            }
            Some(Change::StopControllers(why)) => {
                tracing::warn!(identity = %self.identity, reason = %why, "no longer leading: stopping the controllers");
                self.record("StopControllers", format!("stopped leading: {why}"))
                    .await;
            }
            None => {}
        }
        (started, change)
    }

    /// When the next try should begin after one that began at `started`.
    pub fn next_try_at(&self, started: Instant) -> Instant {
        leadership::next_try_at(self.state, started, &self.timing)
    }

    /// Releases the Lease if this replica took it, so that another replica
    /// takes over at its next try instead of when the Lease expires.
    pub async fn step_down(&mut self) {
        if self.state == Leadership::Follower {
            return;
        }
        self.state = Leadership::Follower;
        match tokio::time::timeout(self.timing.retry(), self.lock.step_down()).await {
            Ok(Ok(())) => {
                tracing::info!(identity = %self.identity, "released the leader Lease");
            }
            Ok(Err(e)) => {
                tracing::warn!(identity = %self.identity, error = %e, "could not release the leader Lease; it expires on its own");
            }
            Err(_) => {
                tracing::warn!(identity = %self.identity, "releasing the leader Lease took too long; it expires on its own");
            }
        }
    }

    /// An Event on the Lease; the action tells starts and stops apart (the
    /// recorder folds Events of the same reason and action into one series).
    async fn record(&self, action: &str, note: String) {
        let event = Event {
            type_: EventType::Normal,
            reason: "LeaderElection".to_owned(),
            note: Some(format!("{} {note}", self.identity)),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &self.lease).await {
            tracing::warn!(error = %e, "could not record an event");
        }
    }
}

/// Tells the controllers of one leadership term to stop taking work.
#[derive(Clone)]
pub struct Stopping(Shared<oneshot::Receiver<()>>);

impl Stopping {
    /// Completes when the term ends (also if `lead` itself is dropped): what a
    /// controller passes to `Controller::graceful_shutdown_on`, after which
    /// it starts no reconcile, lets those in flight finish and ends.
    pub fn signal(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.0.clone().map(|_| ())
    }
}

/// The controllers of one leadership term and the way to stop them.
struct Term {
    stop: oneshot::Sender<()>,
    controllers: Vec<JoinHandle<()>>,
}

impl Term {
    fn start<S: FnMut(Stopping) -> Vec<JoinHandle<()>>>(start: &mut S) -> Term {
        let (stop, stopping) = oneshot::channel();
        Term {
            stop,
            controllers: start(Stopping(stopping.shared())),
        }
    }

    /// Signals the controllers, waits for them to end for at most `grace`,
    /// then aborts those still running and waits for them too.
    async fn end(self, grace: std::time::Duration, identity: &str) {
        let _ = self.stop.send(());
        let deadline = tokio::time::Instant::now()
            .checked_add(grace)
            .unwrap_or_else(tokio::time::Instant::now);
        for mut controller in self.controllers {
            if tokio::time::timeout_at(deadline, &mut controller)
                .await
                .is_err()
            {
                tracing::warn!(%identity, ?grace, "a controller did not finish its reconciles in time; aborting it");
                controller.abort();
                // Resolves once the task is gone: an abort takes effect at
                // the task's next await, which this waits for.
                let _ = controller.await;
            }
        }
        tracing::info!(%identity, "the controllers have stopped");
    }
}

/// Runs the controllers that `start` spawns while `election` leads: starts
/// them when it becomes leader, stops them (waiting for the reconciles in
/// flight, see [`Term::end`]) when it stops, and tries again at every retry
/// period, until `shutdown` completes; then stops them and only then
/// releases the Lease.
pub async fn lead<S, F>(mut election: Election, mut start: S, shutdown: F)
where
    S: FnMut(Stopping) -> Vec<JoinHandle<()>>,
    F: Future<Output = ()>,
{
    let grace = leadership::stop_grace(&election.timing);
    let mut term: Option<Term> = None;
    tokio::pin!(shutdown);
    loop {
        let tried = tokio::select! {
            tried = election.try_once() => tried,
            () = &mut shutdown => break,
        };
        let (started, change) = tried;
        match change {
            Some(Change::StartControllers) => {
                if let Some(previous) = term.take() {
                    previous.end(grace, &election.identity).await;
                }
                term = Some(Term::start(&mut start));
            }
            Some(Change::StopControllers(_)) => {
                if let Some(current) = term.take() {
                    current.end(grace, &election.identity).await;
                }
            }
            None => {}
        }
        let wake = tokio::time::Instant::from_std(election.next_try_at(started));
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = &mut shutdown => break,
        }
    }
    if let Some(current) = term.take() {
        current.end(grace, &election.identity).await;
    }
    election.step_down().await;
}
