//! Issue 37 on the in-memory API server, with the controllers' pace
//! ([`Pace::DEFAULT`]) and real informer caches: a mistaken scale to
//! thousands of replicas is written in slow-start batches with one Event per
//! batch, a correction takes effect at the next pass, and a failed write
//! stops its batch and starts the next one small again.

use std::sync::Arc;

use harness::fake_api::{EVENTS, FakeApi};
use harness::{repo_path, yaml_documents};
use serde_json::json;
use tandem::api::InferenceService;
use tandem::plan::shared::batch::{LARGEST_BATCH, Pace};
use tandem::reconcile::Context;
use tandem::reconcile::inference_service::reconcile;

const IS: &str = "fusioninfer.io/v1alpha1";
const LWS: &str = "leaderworkerset.x-k8s.io/v1";
const LWS_PATH: &str = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets/";
const NAME: &str = "deepseek-r1-inference";

/// Story 3 (one role, `inference`) stored with `replicas`.
fn store(fake: &FakeApi, replicas: i64) {
    let mut object = yaml_documents(&repo_path("examples/seeds/story3-multinode.yaml")).remove(0);
    object["spec"]["roles"][0]["replicas"] = json!(replicas);
    admit_and_store(fake, &object);
}

/// `object` as admission makes it (its defaults), stored.
fn admit_and_store(fake: &FakeApi, object: &serde_json::Value) {
    let (admitted, _) = tandem::admission::admit(
        tandem::admission::Kind::InferenceService,
        "default",
        object,
        None,
        &tandem::admission::lookup::Blind,
    )
    .unwrap();
    fake.insert(admitted);
}

/// One pass, from caches that have seen every earlier write; the writes it
/// sent (Events included).
async fn pass(fake: &FakeApi, ctx: &Arc<Context>) -> Result<Vec<String>, String> {
    fake.caught_up().await;
    let stored = fake.get(IS, "InferenceService", "default", NAME).unwrap();
    let service: InferenceService = serde_json::from_value(stored).unwrap();
    let result = reconcile(Arc::new(service), ctx.clone()).await;
    let writes = fake.take_writes();
    result.map(|_| writes).map_err(|e| e.to_string())
}

fn lws_writes(writes: &[String]) -> Vec<&String> {
    writes.iter().filter(|w| w.contains(LWS_PATH)).collect()
}

fn paced(fake: &FakeApi) -> Arc<Context> {
    fake.context_with(|ctx| ctx.pace = Pace::DEFAULT)
}

#[tokio::test]
async fn a_mistaken_scale_goes_in_slow_start_batches_and_a_correction_stops_it() {
    let fake = FakeApi::new();
    let ctx = paced(&fake);
    store(&fake, 10_000);

    // 1, 2, 4, 8, 16, 32 writes: the PodGroup first, then LeaderWorkerSets
    // in index order, one Event per batch.
    let mut made = 0;
    for (i, size) in [1usize, 2, 4, 8, 16, 32].into_iter().enumerate() {
        let writes = pass(&fake, &ctx).await.unwrap();
        let events = writes.iter().filter(|w| *w == EVENTS).count();
        let lws = lws_writes(&writes);
        assert_eq!(
            writes.len() - events,
            size + usize::from(i == 0),
            "pass {i}: {writes:#?}"
        );
        if i == 0 {
            assert!(writes[0].contains("/podgroups/"), "{writes:?}");
            assert!(lws.is_empty());
        } else {
            assert_eq!(lws.len(), size);
            assert!(lws[0].ends_with(&format!("-inference-{made}")), "{lws:?}");
        }
        assert_eq!(events, 1, "one Event per batch: {writes:#?}");
        made += lws.len();
    }
    assert_eq!(fake.list(LWS, "LeaderWorkerSet", "default").len(), 62);
    let notes = fake.event_notes();
    assert!(
        notes.iter().any(|n| n.starts_with(
            "Created: created 32 LeaderWorkerSets deepseek-r1-inference-inference-30..61: replica 30 of role inference (31 of 10000 replicas"
        ) && n.ends_with("; 9939 more write(s) planned, in the next batches")),
        "{notes:#?}"
    );
    // The batch stops growing at the largest.
    let writes = pass(&fake, &ctx).await.unwrap();
    assert_eq!(lws_writes(&writes).len(), LARGEST_BATCH);

    // Corrected to 3: the next pass creates nothing more, and the extra
    // replicas go, a bounded batch at a time.
    fake.edit(IS, "InferenceService", "default", NAME, |s| {
        s["spec"]["roles"][0]["replicas"] = json!(3);
    });
    let mut passes = 0;
    loop {
        let writes = pass(&fake, &ctx).await.unwrap();
        let creates = lws_writes(&writes)
            .into_iter()
            .filter(|w| w.starts_with("PATCH"))
            .count();
        assert_eq!(
            creates, 0,
            "nothing is created after the correction: {writes:#?}"
        );
        let changes = writes
            .iter()
            .filter(|w| *w != EVENTS && !w.contains("/status"))
            .count();
        assert!(changes <= LARGEST_BATCH, "{changes} writes in one pass");
        passes += 1;
        if changes == 0 {
            break;
        }
        assert!(passes < 20, "not settling");
    }
    let left: Vec<String> = fake
        .list(LWS, "LeaderWorkerSet", "default")
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(
        passes > 2,
        "126 deletions took {passes} passes: not batched"
    );
}

#[tokio::test]
async fn a_failed_write_stops_the_batch_and_the_next_starts_small() {
    let fake = FakeApi::new();
    let ctx = paced(&fake);
    store(&fake, 100);
    for _ in 0..4 {
        pass(&fake, &ctx).await.unwrap();
    }
    // Batches 1, 2, 4, 8 made: the next would be 16; the API server refuses.
    assert_eq!(fake.list(LWS, "LeaderWorkerSet", "default").len(), 14);
    fake.refuse_writes("leaderworkersets", 422);
    let error = pass(&fake, &ctx).await.unwrap_err();
    assert!(error.contains("422"), "{error}");
    fake.allow_writes("leaderworkersets");
    let writes = pass(&fake, &ctx).await.unwrap();
    assert_eq!(
        lws_writes(&writes).len(),
        1,
        "starts over at 1: {writes:#?}"
    );
    let writes = pass(&fake, &ctx).await.unwrap();
    assert_eq!(lws_writes(&writes).len(), 2, "{writes:#?}");
}

/// The unbounded pace (render, single-pass tests) still writes the whole
/// plan at once.
#[tokio::test]
async fn unbounded_writes_everything_in_one_pass() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store(&fake, 100);
    let writes = pass(&fake, &ctx).await.unwrap();
    assert_eq!(lws_writes(&writes).len(), 100);
}

/// One pass from the caches as they are, whether or not they have seen the
/// last writes; the writes it sent (Events included).
async fn pass_lagging(fake: &FakeApi, ctx: &Arc<Context>) -> Vec<String> {
    pass_lagging_named(fake, ctx, NAME).await
}

/// The expectations: a cache that has not seen a batch's LeaderWorkerSets
/// (their watch held back) makes the next pass write none, instead of
/// applying those again and announcing them twice; once the cache shows
/// them, the next batch goes on from where the last ended. Without the gate
/// (`this_pass` ignoring `awaited`) the lagging pass writes
/// `-inference-0` and `-1` again.
#[tokio::test]
async fn a_cache_that_lags_behind_a_batch_holds_the_next_until_it_shows_it() {
    let fake = FakeApi::new();
    let ctx = paced(&fake);
    store(&fake, 100);
    // The PodGroup, then the LeaderWorkerSets' watch held.
    pass(&fake, &ctx).await.unwrap();
    fake.hold_watches("leaderworkersets");
    let writes = pass(&fake, &ctx).await.unwrap();
    let first: Vec<&String> = lws_writes(&writes);
    assert_eq!(first.len(), 2, "{writes:#?}");
    assert_eq!(fake.list(LWS, "LeaderWorkerSet", "default").len(), 2);

    // The cache does not show them yet: nothing is written again.
    for _ in 0..3 {
        let writes = pass_lagging(&fake, &ctx).await;
        assert_eq!(
            lws_writes(&writes),
            Vec::<&String>::new(),
            "a lagging cache makes no second write: {writes:#?}"
        );
        assert!(
            !writes.iter().any(|w| w.starts_with("POST /apis/events")),
            "nor a second Event: {writes:#?}"
        );
    }

    // Caught up: the next batch (4) starts at replica 2.
    fake.release_watches("leaderworkersets");
    let writes = pass(&fake, &ctx).await.unwrap();
    let next = lws_writes(&writes);
    assert_eq!(next.len(), 4, "{writes:#?}");
    assert!(next[0].ends_with("-inference-2"), "{next:?}");
}

/// A recovery's Event goes with the write of the replica's record: a pass
/// whose cache has not seen the record written a moment ago (the
/// LeaderWorkerSets' watch held back) counts the same restart again, writes
/// nothing (the expectations), and records no second `BackOff`. Without
/// the rule (`Carried::Awaited` ignored) each lagging pass announces the
/// restart once more.
#[tokio::test]
async fn a_restart_counted_from_a_lagging_cache_is_announced_once() {
    const SERVICE: &str = "qwen-inference";
    let fake = FakeApi::new();
    let ctx = paced(&fake);
    let mut object = yaml_documents(&repo_path("examples/seeds/story1-monolithic.yaml")).remove(0);
    object["spec"]["roles"][0]["recovery"] = json!({"backoffSeconds": 600});
    admit_and_store(&fake, &object);
    let service_pass = || async {
        fake.caught_up().await;
        let stored = fake
            .get(IS, "InferenceService", "default", SERVICE)
            .unwrap();
        let service: InferenceService = serde_json::from_value(stored).unwrap();
        reconcile(Arc::new(service), ctx.clone()).await.unwrap();
        fake.take_writes()
    };
    // Until the replica's LeaderWorkerSet is there (a batch at a time).
    for _ in 0..4 {
        service_pass().await;
    }
    let lws = fake
        .get(
            LWS,
            "LeaderWorkerSet",
            "default",
            "qwen-inference-inference-0",
        )
        .expect("the replica's LeaderWorkerSet");
    assert_eq!(lws["spec"]["leaderWorkerTemplate"]["restartPolicy"], "None");
    let labels = &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"];
    fake.insert(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "qwen-inference-inference-0-0", "namespace": "default",
            "uid": "pod-1", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": labels},
        "status": {"phase": "Running", "containerStatuses": [{"name": "vllm", "restartCount": 1,
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}
    }));
    let backoffs = || {
        fake.list("events.k8s.io/v1", "Event", "default")
            .into_iter()
            .filter(|e| e["reason"] == "BackOff")
            .count()
    };
    fake.caught_up().await;
    // The record's write is not seen by the cache until released.
    fake.hold_watches("leaderworkersets");
    let writes = pass_lagging_named(&fake, &ctx, SERVICE).await;
    assert_eq!(lws_writes(&writes).len(), 1, "the record: {writes:#?}");
    assert_eq!(backoffs(), 1);
    for _ in 0..3 {
        let writes = pass_lagging_named(&fake, &ctx, SERVICE).await;
        assert!(lws_writes(&writes).is_empty(), "{writes:#?}");
        assert_eq!(backoffs(), 1, "announced once: {writes:#?}");
    }
    fake.release_watches("leaderworkersets");
    service_pass().await;
    assert_eq!(backoffs(), 1, "counted once");
}

/// [`pass_lagging`] of the service `name`.
async fn pass_lagging_named(fake: &FakeApi, ctx: &Arc<Context>, name: &str) -> Vec<String> {
    // Long enough for the watches that are not held to deliver.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let stored = fake.get(IS, "InferenceService", "default", name).unwrap();
    let service: InferenceService = serde_json::from_value(stored).unwrap();
    reconcile(Arc::new(service), ctx.clone()).await.unwrap();
    fake.take_writes()
}

/// A wide service keeps its children parsed between its passes
/// (`tandem::watch::parsed`), and what it keeps is never staler than the
/// cache: a LeaderWorkerSet edited by hand after a pass is read anew by the
/// next one and set back. Handing back the kept object whatever its version
/// leaves the edit in place.
#[tokio::test]
async fn a_wide_services_kept_children_are_read_anew_once_changed() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store(&fake, 70);
    let mut passes = 0;
    while !lws_writes(&pass(&fake, &ctx).await.unwrap()).is_empty() || passes == 0 {
        passes += 1;
        assert!(passes < 5, "not settling");
    }
    assert_eq!(ctx.parsed_owners(), 1, "70 LeaderWorkerSets are wide");
    fake.edit(
        LWS,
        "LeaderWorkerSet",
        "default",
        &format!("{NAME}-inference-5"),
        |lws| lws["spec"]["replicas"] = json!(3),
    );
    let writes = pass(&fake, &ctx).await.unwrap();
    assert_eq!(
        lws_writes(&writes),
        [&format!("PATCH {LWS_PATH}{NAME}-inference-5")],
        "{writes:#?}"
    );
    let unchanged = pass(&fake, &ctx).await.unwrap();
    assert!(lws_writes(&unchanged).is_empty(), "{unchanged:#?}");

    // A narrow service keeps nothing.
    let fake = FakeApi::new();
    let ctx = fake.context();
    store(&fake, 3);
    pass(&fake, &ctx).await.unwrap();
    pass(&fake, &ctx).await.unwrap();
    assert_eq!(ctx.parsed_owners(), 0);
}
