//! Leader election against the in-memory API server: a free or expired
//! Lease is taken and confirmed before controllers start, a Lease another
//! replica holds starts nothing, two replicas never lead at once, a leader
//! that loses the Lease or the API server stops its controllers, and the
//! Lease is released on shutdown, only after the controllers' reconciles in
//! flight have finished: the old leader never writes once the new one starts. The Role in manifests/base/rbac.yaml grants
//! exactly the requests the election makes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use harness::fake_api::FakeApi;
use serde_json::{Value, json};
use tandem::plan::shared::leadership::{Change, Leadership, Timing};
use tandem::reconcile::leader::{Election, LEASE_NAME, lead};

const LEASES: &str = "coordination.k8s.io/v1";

fn lease(fake: &FakeApi) -> Option<Value> {
    fake.get(LEASES, "Lease", "default", LEASE_NAME)
}

fn holder(fake: &FakeApi) -> String {
    lease(fake).expect("the Lease exists")["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A Lease held by `holder`, last renewed `age` ago by the wall clock.
fn store_lease(fake: &FakeApi, holder: &str, age: Duration) {
    let renewed = jiff::Timestamp::now() - jiff::SignedDuration::try_from(age).unwrap();
    let time = format!("{renewed:.6}");
    fake.insert(json!({
        "apiVersion": LEASES, "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": "default"},
        "spec": {"holderIdentity": holder, "acquireTime": time, "renewTime": time,
                 "leaseDurationSeconds": 15, "leaseTransitions": 3}
    }));
}

fn election(fake: &FakeApi, identity: &str, timing: Timing) -> Election {
    Election::new(fake.client(), "default", identity, timing)
}

#[tokio::test]
async fn a_free_lease_is_taken_and_confirmed_before_controllers_start() {
    let fake = FakeApi::new();
    let mut a = election(&fake, "tandem-a", Timing::DEFAULT);
    let (_, change) = a.try_once().await;
    assert_eq!(change, None, "taking the Lease is not yet leading");
    assert_eq!(a.state(), Leadership::Candidate);
    assert_eq!(holder(&fake), "tandem-a");
    assert_eq!(lease(&fake).unwrap()["spec"]["leaseDurationSeconds"], 15);

    let (_, change) = a.try_once().await;
    assert_eq!(change, Some(Change::StartControllers));
    assert!(a.state().runs_controllers());
    let (_, change) = a.try_once().await;
    assert_eq!(change, None, "renewing changes nothing");
    assert!(a.state().runs_controllers());
    assert_eq!(holder(&fake), "tandem-a");
    assert_eq!(
        fake.event_notes(),
        ["LeaderElection: tandem-a became leader: starting the controllers"]
    );
}

#[tokio::test]
async fn a_lease_another_replica_holds_starts_nothing_and_writes_nothing() {
    let fake = FakeApi::new();
    store_lease(&fake, "tandem-b", Duration::from_secs(1));
    let before = lease(&fake);
    let mut a = election(&fake, "tandem-a", Timing::DEFAULT);
    for _ in 0..3 {
        let (_, change) = a.try_once().await;
        assert_eq!(change, None);
        assert_eq!(a.state(), Leadership::Follower);
    }
    assert_eq!(lease(&fake), before);
    assert_eq!(fake.take_writes(), Vec::<String>::new());
}

#[tokio::test]
async fn an_expired_lease_is_taken_over() {
    let fake = FakeApi::new();
    store_lease(&fake, "tandem-b", Duration::from_secs(3600));
    let mut a = election(&fake, "tandem-a", Timing::DEFAULT);
    a.try_once().await;
    let spec = &lease(&fake).unwrap()["spec"];
    assert_eq!(spec["holderIdentity"], "tandem-a");
    assert_eq!(spec["leaseTransitions"], 4);
    let (_, change) = a.try_once().await;
    assert_eq!(change, Some(Change::StartControllers));
}

#[tokio::test]
async fn two_replicas_trying_at_once_never_both_lead() {
    let fake = FakeApi::new();
    let mut a = election(&fake, "tandem-a", Timing::DEFAULT);
    let mut b = election(&fake, "tandem-b", Timing::DEFAULT);
    // Both try at once, round after round; every third round the leader
    // steps down (as on shutdown) and a second passes, so both race for the free Lease again and
    // may both take it in the same round. Never do both lead.
    let mut terms = 0;
    for round in 0..15 {
        tokio::join!(a.try_once(), b.try_once());
        let leading = [&a, &b].map(|e| e.state().runs_controllers());
        assert!(leading != [true, true], "round {round}: both lead");
        if round % 3 == 2 {
            for e in [&mut a, &mut b] {
                if e.state().runs_controllers() {
                    terms += 1;
                    e.step_down().await;
                }
            }
            // The released Lease (1 s long) has run out.
            store_lease(&fake, "", Duration::from_secs(60));
        }
    }
    assert!(terms >= 3, "the Lease changed hands ({terms} terms)");
}

#[tokio::test]
async fn a_stalled_leader_is_replaced_only_after_its_renew_deadline() {
    let fake = FakeApi::new();
    let timing = Timing::new(
        Duration::from_secs(1),
        Duration::from_millis(500),
        Duration::from_millis(50),
    )
    .unwrap();
    let mut a = election(&fake, "tandem-a", timing);
    let mut b = election(&fake, "tandem-b", timing);
    a.try_once().await;
    let (renewed, change) = a.try_once().await;
    assert_eq!(change, Some(Change::StartControllers));
    // a stalls (no more tries); b keeps trying until it leads.
    let b_leads = loop {
        let (started, change) = b.try_once().await;
        if change == Some(Change::StartControllers) {
            break std::time::Instant::now();
        }
        assert_eq!(change, None);
        tokio::time::sleep_until(tokio::time::Instant::from_std(b.next_try_at(started))).await;
    };
    assert!(
        b_leads >= renewed + timing.renew_deadline(),
        "b started its controllers before a had to stop its own"
    );
    // a wakes up: its deadline has passed, so it stops at its first try.
    let (_, change) = a.try_once().await;
    assert!(
        matches!(change, Some(Change::StopControllers(_))),
        "{change:?}"
    );
    assert_eq!(holder(&fake), "tandem-b");
}

#[tokio::test]
async fn a_leader_stops_when_another_replica_takes_the_lease() {
    let fake = FakeApi::new();
    let mut a = election(&fake, "tandem-a", Timing::DEFAULT);
    a.try_once().await;
    a.try_once().await;
    assert!(a.state().runs_controllers());
    store_lease(&fake, "tandem-b", Duration::ZERO);
    let (_, change) = a.try_once().await;
    assert_eq!(
        change,
        Some(Change::StopControllers(
            "the leader Lease is now held by tandem-b".into()
        ))
    );
    assert_eq!(holder(&fake), "tandem-b", "the new holder is left alone");
}

#[tokio::test]
async fn a_leader_that_cannot_reach_the_api_stops_by_its_renew_deadline() {
    let fake = FakeApi::new();
    let timing = Timing::new(
        Duration::from_secs(1),
        Duration::from_millis(300),
        Duration::from_millis(50),
    )
    .unwrap();
    let mut a = election(&fake, "tandem-a", timing);
    a.try_once().await;
    a.try_once().await;
    assert!(a.state().runs_controllers());
    // Every later write fails; reads still answer.
    fake.conflict_next_writes(&format!("/leases/{LEASE_NAME}"), usize::MAX);
    let mut tries = 0;
    let stopped = loop {
        let (started, change) = a.try_once().await;
        tries += 1;
        if let Some(change) = change {
            break change;
        }
        assert!(a.state().runs_controllers());
        tokio::time::sleep_until(tokio::time::Instant::from_std(a.next_try_at(started))).await;
    };
    assert!(
        matches!(&stopped, Change::StopControllers(why) if why.starts_with("could not renew the leader Lease for 300ms")),
        "{stopped:?}"
    );
    assert!(tries > 1, "failures before the deadline were ridden out");
    assert_eq!(a.state(), Leadership::Follower);
}

/// Controllers that count their starts and report when they are aborted.
struct Controllers {
    started: Arc<AtomicUsize>,
    aborted: tokio::sync::mpsc::UnboundedSender<()>,
}

struct Aborted(tokio::sync::mpsc::UnboundedSender<()>);

impl Drop for Aborted {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

impl Controllers {
    fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let guard = Aborted(self.aborted.clone());
        vec![tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        })]
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never happened: {what}"));
}

#[tokio::test]
async fn controllers_run_only_while_leading_and_the_lease_is_released_on_shutdown() {
    let fake = FakeApi::new();
    let timing = Timing::new(
        Duration::from_secs(1),
        Duration::from_millis(500),
        Duration::from_millis(20),
    )
    .unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let (aborted, mut aborts) = tokio::sync::mpsc::unbounded_channel();
    let controllers = Controllers {
        started: started.clone(),
        aborted,
    };
    let (shutdown, shutting_down) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(lead(
        election(&fake, "tandem-a", timing),
        move |_stopping| controllers.start(),
        async move {
            let _ = shutting_down.await;
        },
    ));

    until("the controllers start", || {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    // Another replica takes the Lease: the controllers are aborted.
    store_lease(&fake, "tandem-b", Duration::ZERO);
    tokio::time::timeout(Duration::from_secs(20), aborts.recv())
        .await
        .expect("the controllers are aborted")
        .unwrap();
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "not restarted while b holds it"
    );
    // b lets it expire: a leads again with new controllers.
    store_lease(&fake, "tandem-b", Duration::from_secs(3600));
    until("the controllers start again", || {
        started.load(Ordering::SeqCst) == 2
    })
    .await;

    shutdown.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("lead returns on shutdown")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), aborts.recv())
        .await
        .expect("the controllers are aborted on shutdown")
        .unwrap();
    let spec = &lease(&fake).unwrap()["spec"];
    assert_eq!(spec["holderIdentity"], "", "released: {spec}");
    assert_eq!(spec["leaseDurationSeconds"], 1);
    // The second "became leader" is the same Event, counted in its series.
    let notes = fake.event_notes();
    assert!(
        notes.contains(
            &"LeaderElection: tandem-a became leader: starting the controllers".to_owned()
        ),
        "{notes:?}"
    );
    assert!(
        notes.contains(
            &"LeaderElection: tandem-a stopped leading: the leader Lease is now held by tandem-b"
                .to_owned()
        ),
        "{notes:?}"
    );
}

/// A controller that writes one ConfigMap per reconcile, each write preceded
/// by 150 ms of work, and stops (between reconciles) when told to.
fn writing_controller(
    fake: &FakeApi,
    identity: &'static str,
    stopping: tandem::reconcile::leader::Stopping,
    begun: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(fake.client(), "default");
    tokio::spawn(async move {
        let stop = stopping.signal();
        tokio::pin!(stop);
        for n in 0.. {
            tokio::select! {
                biased;
                () = &mut stop => return,
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            begun.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(150)).await;
            let object: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("{identity}-{n}"), "namespace": "default"}
            }))
            .unwrap();
            configmaps
                .create(&Default::default(), &object)
                .await
                .expect("the fake API server accepts the write");
        }
    })
}

/// The writers of ConfigMaps in the API server's log, in order.
fn configmap_writers(fake: &FakeApi) -> Vec<String> {
    fake.take_calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/configmaps"))
        .filter_map(|c| c.body()?["metadata"]["name"].as_str().map(str::to_owned))
        .map(|name| name.split('-').next().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_hands_over_only_after_its_reconciles_in_flight_finish() {
    let fake = FakeApi::new();
    let timing = Timing::new(
        Duration::from_secs(1),
        Duration::from_millis(500),
        Duration::from_millis(20),
    )
    .unwrap();
    let begun_by_a = Arc::new(AtomicUsize::new(0));
    let begun_by_b = Arc::new(AtomicUsize::new(0));
    let (stop_a, a_stopping) = tokio::sync::oneshot::channel::<()>();
    let a = tokio::spawn(lead(
        election(&fake, "a", timing),
        {
            let (fake, begun) = (fake.clone(), begun_by_a.clone());
            move |stopping| vec![writing_controller(&fake, "a", stopping, begun.clone())]
        },
        async move {
            let _ = a_stopping.await;
        },
    ));
    until("a writes", || begun_by_a.load(Ordering::SeqCst) >= 3).await;
    let (stop_b, b_stopping) = tokio::sync::oneshot::channel::<()>();
    let b = tokio::spawn(lead(
        election(&fake, "b", timing),
        {
            let (fake, begun) = (fake.clone(), begun_by_b.clone());
            move |stopping| vec![writing_controller(&fake, "b", stopping, begun.clone())]
        },
        async move {
            let _ = b_stopping.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        begun_by_b.load(Ordering::SeqCst),
        0,
        "b waits while a leads"
    );

    // a shuts down in the middle of a reconcile: it finishes it, stops, then
    // releases the Lease; b takes over.
    stop_a.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), a)
        .await
        .expect("a stops")
        .unwrap();
    until("b writes", || begun_by_b.load(Ordering::SeqCst) >= 2).await;
    stop_b.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), b)
        .await
        .expect("b stops")
        .unwrap();

    let writers = configmap_writers(&fake);
    let first_of_b = writers
        .iter()
        .position(|w| w == "b")
        .expect("b wrote after taking over");
    assert!(
        writers[first_of_b..].iter().all(|w| w == "b"),
        "a wrote after b started: {writers:?}"
    );
    let written_by_a = writers.iter().filter(|w| *w == "a").count();
    assert_eq!(
        written_by_a,
        begun_by_a.load(Ordering::SeqCst),
        "every reconcile a began was finished, none cut off: {writers:?}"
    );
    assert_eq!(
        writers.iter().filter(|w| *w == "b").count(),
        begun_by_b.load(Ordering::SeqCst),
        "b too finished what it began: {writers:?}"
    );
}

#[tokio::test]
async fn the_role_grants_every_request_the_election_makes() {
    use serde::Deserialize;
    let fake = FakeApi::new();
    let mut a = election(&fake, "tandem-a", Timing::DEFAULT);
    a.try_once().await;
    a.try_once().await;
    store_lease(&fake, "tandem-b", Duration::from_secs(3600));
    a.try_once().await;
    a.step_down().await;
    let mut needed: Vec<(String, Option<String>)> = fake
        .take_calls()
        .iter()
        .filter(|c| c.path.contains("/leases"))
        .map(|c| {
            let name = c
                .path
                .rsplit_once("/leases")
                .unwrap()
                .1
                .trim_start_matches('/');
            let verb = match (c.method.as_str(), name.is_empty()) {
                ("GET", false) => "get",
                ("POST", true) => "create",
                ("PATCH", false) => "patch",
                (method, _) => panic!("unexpected lease request {method} {}", c.path),
            };
            (verb.to_owned(), (!name.is_empty()).then(|| name.to_owned()))
        })
        .collect();
    needed.sort();
    needed.dedup();
    assert_eq!(
        needed,
        [
            ("create".to_owned(), None),
            ("get".to_owned(), Some(LEASE_NAME.to_owned())),
            ("patch".to_owned(), Some(LEASE_NAME.to_owned())),
        ]
    );

    let text = std::fs::read_to_string(harness::repo_path("manifests/base/rbac.yaml")).unwrap();
    let role = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "tandem-leader-election")
        .expect("manifests/base/rbac.yaml has the Role tandem-leader-election");
    assert_eq!(role["metadata"]["namespace"], "tandem-system");
    let rules = role["rules"].as_array().unwrap();
    for (verb, name) in &needed {
        let granted = rules.iter().any(|rule| {
            rule["apiGroups"] == json!(["coordination.k8s.io"])
                && rule["resources"] == json!(["leases"])
                && rule["verbs"].as_array().unwrap().contains(&json!(verb))
                && match name {
                    // Named requests are granted on the one Lease only.
                    Some(name) => rule["resourceNames"] == json!([name]),
                    None => rule["resourceNames"].is_null(),
                }
        });
        assert!(granted, "the Role does not grant {verb} on leases {name:?}");
    }
    // Nothing beyond what the election uses.
    let granted: usize = rules
        .iter()
        .filter(|r| r["resources"] == json!(["leases"]))
        .map(|r| r["verbs"].as_array().unwrap().len())
        .sum();
    assert_eq!(granted, needed.len(), "{rules:?}");
    let binding = serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|d| d["kind"] == "RoleBinding" && d["roleRef"]["name"] == "tandem-leader-election")
        .expect("the Role is bound");
    assert_eq!(binding["metadata"]["namespace"], "tandem-system");
    assert_eq!(binding["subjects"][0]["name"], "tandem");
}

/// Events name the replica that recorded them as `--pod-name` does (the name
/// it uses in the election), not whatever `POD_NAME` holds.
#[tokio::test]
async fn events_name_the_replica_given_by_its_pod_name() {
    use kube::runtime::events::{Event, EventType};
    let fake = FakeApi::new();
    use tandem::reconcile::cluster::{Cluster, Series};
    let live = tandem::reconcile::live::Live::new(
        fake.client(),
        tandem::watch::caches::Caches::start(fake.client(), Default::default()),
        tandem::reconcile::reporter("tandem-7f9c-x2"),
    );
    let about = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("fusioninfer.io/v1alpha1".to_owned()),
        kind: Some("InferenceService".to_owned()),
        name: Some("svc".to_owned()),
        namespace: Some("default".to_owned()),
        ..Default::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "Created".to_owned(),
        note: Some("a child".to_owned()),
        action: "Create".to_owned(),
        secondary: None,
    };
    live.record(&about, &event, Series::Fold).await;
    let events = fake.list("events.k8s.io/v1", "Event", "default");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["reportingInstance"], "tandem-7f9c-x2");
    assert_eq!(events[0]["reportingController"], "tandem");
}
