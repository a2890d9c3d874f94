//! The ScaleView reconciler against the in-memory API server: the lock's
//! whole life (grab, update on a new generation, conflict with a second view,
//! release through the finalizer, garbage collection after a crash), with the
//! exact writes and none on an unchanged world.

use std::sync::Arc;

use harness::fake_api::{EVENT, FakeApi};
use harness::{repo_path, yaml_documents};
use serde_json::{Value, json};
use tandem::admission::{self, Kind, lookup};
use tandem::api::{InferenceService, ScaleView};
use tandem::plan::scale_view::FINALIZER;
use tandem::reconcile::Context;

const API: &str = "fusioninfer.io/v1alpha1";
const SERVICES: &str = "/apis/fusioninfer.io/v1alpha1/namespaces/default/inferenceservices";
const VIEWS: &str = "/apis/fusioninfer.io/v1alpha1/namespaces/default/scaleviews";
/// The spot example's service and view, stored as after admission; the view
/// asks for `replicas`.
fn store_spot(fake: &FakeApi, replicas: i64) {
    let mut documents = yaml_documents(&repo_path("examples/scaleview/decode-ondemand-spot.yaml"));
    let (service, _) = admission::admit(
        Kind::InferenceService,
        "default",
        &documents[0],
        None,
        &lookup::Blind,
    )
    .unwrap();
    fake.insert(service);
    documents[1]["spec"]["replicas"] = json!(replicas);
    documents[1]["metadata"]["uid"] = json!("view-uid");
    let (view, _) = admission::admit(
        Kind::ScaleView,
        "default",
        &documents[1],
        None,
        &lookup::Blind,
    )
    .unwrap();
    fake.insert(view);
}

fn view(fake: &FakeApi, name: &str) -> Option<Value> {
    fake.get(API, "ScaleView", "default", name)
}

fn service(fake: &FakeApi) -> Value {
    fake.get(API, "InferenceService", "default", "spot-decode")
        .unwrap()
}

async fn reconcile_view(fake: &FakeApi, ctx: &Arc<Context>, name: &str) {
    let stored: ScaleView = serde_json::from_value(view(fake, name).unwrap()).unwrap();
    fake.caught_up().await;
    tandem::reconcile::scale_view::reconcile(Arc::new(stored), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

async fn reconcile_service(fake: &FakeApi, ctx: &Arc<Context>) {
    let stored: InferenceService = serde_json::from_value(service(fake)).unwrap();
    fake.caught_up().await;
    tandem::reconcile::inference_service::reconcile(Arc::new(stored), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

/// (role, replicas) of the stored service's roles.
fn role_replicas(fake: &FakeApi) -> Vec<(String, i64)> {
    service(fake)["spec"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["replicas"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn locks(fake: &FakeApi) -> Value {
    service(fake)["status"]["scaleViews"].clone()
}

fn condition(view: &Value, type_: &str) -> Value {
    view["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap()
}

fn assert_no_writes(fake: &FakeApi) {
    let writes = fake.take_writes();
    assert!(
        writes.is_empty(),
        "writes on an unchanged world: {writes:?}"
    );
}

#[tokio::test]
async fn the_lock_is_grabbed_then_nothing_is_written() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_spot(&fake, 4);
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {VIEWS}/spot-decode-sv"),
            format!("PATCH {SERVICES}/spot-decode/status"),
            format!("PATCH {SERVICES}/spot-decode"),
            format!("PATCH {VIEWS}/spot-decode-sv/status"),
            EVENT.to_owned(),
            EVENT.to_owned(),
        ]
    );
    assert_eq!(
        locks(&fake),
        json!([{"name": "spot-decode-sv", "uid": "view-uid", "generation": 1,
            "roleReplicas": [{"role": "decode-ondemand", "replicas": 2}, {"role": "decode-spot", "replicas": 2}]}])
    );
    assert_eq!(
        role_replicas(&fake),
        [
            ("prefill".to_owned(), 1),
            ("decode-ondemand".to_owned(), 2),
            ("decode-spot".to_owned(), 2)
        ]
    );
    let stored = view(&fake, "spot-decode-sv").unwrap();
    assert_eq!(stored["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(stored["status"]["locked"], true);
    assert_eq!(stored["status"]["replicas"], 0, "no pod is ready yet");
    assert_eq!(
        stored["status"]["selector"],
        "fusioninfer.io/service=spot-decode,fusioninfer.io/component-type=decoder,fusioninfer.io/role-name in (decode-ondemand,decode-spot)"
    );
    assert_eq!(condition(&stored, "Locked")["status"], "True");
    assert_eq!(condition(&stored, "Ready")["reason"], "Scaling");
    let notes = fake.event_notes();
    assert!(
        notes.contains(&"Scaled: scaled roles of InferenceService spot-decode: decode-ondemand from 1 to 2, decode-spot from 0 to 2: spec.replicas 4 split by priority (decode-ondemand=2, decode-spot=2)".to_owned()),
        "{notes:?}"
    );

    // Counted on /metrics: one decision per role scaled.
    let scaled = || ctx.metrics.decisions("ScaleView", "role_scaled", "none");
    assert_eq!(scaled(), 2);

    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_no_writes(&fake);
    assert_eq!(scaled(), 2, "nothing scaled again");
    // The service reconciler keeps a live lock as it is.
    reconcile_service(&fake, &ctx).await;
    fake.take_calls();
    reconcile_service(&fake, &ctx).await;
    assert_no_writes(&fake);
    assert_eq!(locks(&fake)[0]["name"], "spot-decode-sv");
}

#[tokio::test]
async fn a_new_generation_moves_the_lock_and_the_roles() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_spot(&fake, 1);
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(
        role_replicas(&fake)[1..],
        [
            ("decode-ondemand".to_owned(), 1),
            ("decode-spot".to_owned(), 0)
        ]
    );
    fake.take_calls();

    // `kubectl scale --replicas=2`: the API server bumps the generation.
    fake.edit(API, "ScaleView", "default", "spot-decode-sv", |v| {
        v["spec"]["replicas"] = json!(2);
        v["metadata"]["generation"] = json!(2);
    });
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {SERVICES}/spot-decode/status"),
            format!("PATCH {SERVICES}/spot-decode"),
            format!("PATCH {VIEWS}/spot-decode-sv/status"),
            EVENT.to_owned(),
            EVENT.to_owned(),
        ]
    );
    assert_eq!(locks(&fake)[0]["generation"], 2);
    assert_eq!(
        role_replicas(&fake)[1..],
        [
            ("decode-ondemand".to_owned(), 2),
            ("decode-spot".to_owned(), 0)
        ]
    );
    assert_eq!(
        view(&fake, "spot-decode-sv").unwrap()["status"]["observedGeneration"],
        2
    );

    // A generation whose split is the same still records the generation.
    fake.edit(API, "ScaleView", "default", "spot-decode-sv", |v| {
        v["metadata"]["generation"] = json!(3);
    });
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {SERVICES}/spot-decode/status"),
            format!("PATCH {VIEWS}/spot-decode-sv/status"),
            EVENT.to_owned(),
        ]
    );
    assert_eq!(locks(&fake)[0]["generation"], 3);
}

#[tokio::test]
async fn a_second_view_on_a_locked_group_is_refused() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_spot(&fake, 4);
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    fake.insert(json!({
        "apiVersion": API, "kind": "ScaleView",
        "metadata": {"name": "spot-only-sv", "namespace": "default", "uid": "other-uid"},
        "spec": {"targetRef": {"name": "spot-decode", "componentType": "decoder"}, "replicas": 3,
            "scalePolicy": [{"group": "decode-spot", "priority": 0}]},
    }));
    fake.take_calls();
    let before = service(&fake);
    reconcile_view(&fake, &ctx, "spot-only-sv").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {VIEWS}/spot-only-sv"),
            format!("PATCH {VIEWS}/spot-only-sv/status"),
            EVENT.to_owned(),
        ],
        "nothing is written to the service"
    );
    assert_eq!(service(&fake), before);
    let second = view(&fake, "spot-only-sv").unwrap();
    assert_eq!(second["status"]["locked"], false);
    let locked = condition(&second, "Locked");
    assert_eq!(locked["reason"], "Conflict");
    assert!(
        locked["message"]
            .as_str()
            .unwrap()
            .contains("decode-spot by ScaleView spot-decode-sv"),
        "{locked}"
    );
    reconcile_view(&fake, &ctx, "spot-only-sv").await;
    assert_no_writes(&fake);
}

/// The spot view, its lock taken, then deleted: held by its finalizer.
async fn locked_then_deleted() -> (FakeApi, Arc<Context>) {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_spot(&fake, 4);
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    let views: kube::Api<ScaleView> = kube::Api::namespaced(fake.client(), "default");
    views
        .delete("spot-decode-sv", &Default::default())
        .await
        .unwrap();
    (fake, ctx)
}

#[tokio::test]
async fn deleting_the_view_releases_the_lock_through_the_finalizer() {
    let (fake, ctx) = locked_then_deleted().await;
    let held = view(&fake, "spot-decode-sv").expect("held by the finalizer");
    assert!(!held["metadata"]["deletionTimestamp"].is_null());
    fake.take_calls();

    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {SERVICES}/spot-decode/status"),
            format!("PATCH {VIEWS}/spot-decode-sv"),
            EVENT.to_owned(),
        ]
    );
    assert_eq!(locks(&fake), json!([]));
    assert!(view(&fake, "spot-decode-sv").is_none(), "the view is gone");
    // The roles keep the replicas they had; nothing locks them any more.
    assert_eq!(role_replicas(&fake)[2], ("decode-spot".to_owned(), 2));
}

/// The cache can show the view being deleted before it shows the view's
/// last status write; the finalizer patch, guarded by the resourceVersion,
/// is then refused (409). That requeues quietly (the cache is behind; nothing
/// failed), and the next pass, on the fresh copy, lets the view go. A real
/// API server shows this when a namespace is deleted (cluster_end_to_end).
#[tokio::test]
async fn a_view_being_deleted_whose_finalizer_write_meets_a_conflict_requeues_quietly() {
    let (fake, ctx) = locked_then_deleted().await;
    fake.caught_up().await;
    fake.take_calls();
    fake.conflict_next_writes(&format!("{VIEWS}/spot-decode-sv"), 1);
    let stored: ScaleView = serde_json::from_value(view(&fake, "spot-decode-sv").unwrap()).unwrap();
    let action = tandem::reconcile::scale_view::reconcile(Arc::new(stored), ctx.clone())
        .await
        .expect("a finalizer write refused for its resourceVersion is not a failure");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(1))
    );
    assert!(view(&fake, "spot-decode-sv").is_some(), "still held");
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert!(view(&fake, "spot-decode-sv").is_none(), "the view is gone");
    assert_eq!(locks(&fake), json!([]));
}

#[tokio::test]
async fn a_stale_lock_left_by_a_crash_is_dropped_by_the_service_reconciler() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_spot(&fake, 4);
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    reconcile_service(&fake, &ctx).await;
    // The view is deleted without its finalizer running (the controller was
    // down and the finalizer was stripped by hand).
    fake.remove(API, "ScaleView", "default", "spot-decode-sv");
    fake.take_calls();
    reconcile_service(&fake, &ctx).await;
    let calls = fake.take_calls();
    let writes: Vec<_> = calls.iter().filter(|c| c.is_write()).collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        writes[0].line(),
        format!("PATCH {SERVICES}/spot-decode/status")
    );
    let body = writes[0].body().cloned().unwrap();
    assert_eq!(body["status"]["scaleViews"], json!([]));
    assert!(
        body["metadata"]["resourceVersion"].is_string(),
        "guarded by the resourceVersion: {body}"
    );
    assert_eq!(locks(&fake), json!([]));

    // A view recreated under the old name with a new uid does not keep an old
    // entry either.
    store_spot(&fake, 4);
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    fake.remove(API, "ScaleView", "default", "spot-decode-sv");
    let mut documents = yaml_documents(&repo_path("examples/scaleview/decode-ondemand-spot.yaml"));
    documents[1]["metadata"]["uid"] = json!("new-uid");
    documents[1]["metadata"]["namespace"] = json!("default");
    fake.insert(documents.remove(1));
    reconcile_service(&fake, &ctx).await;
    assert_eq!(locks(&fake), json!([]));
    // And then the new view takes the lock.
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(locks(&fake)[0]["uid"], "new-uid");
}

#[tokio::test]
async fn role_and_status_writes_are_retried_on_conflict_guarded_ones_are_not() {
    let fake = FakeApi::new();
    let ctx = fake.context_with(|ctx| {
        ctx.conflict_backoff.first = std::time::Duration::from_millis(1);
    });
    store_spot(&fake, 4);
    // The roles and the view's status meet a conflict each, and are retried.
    fake.conflict_next_writes(&format!("{SERVICES}/spot-decode"), 1);
    fake.conflict_next_writes(&format!("{VIEWS}/spot-decode-sv/status"), 2);
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {VIEWS}/spot-decode-sv"),
            format!("PATCH {SERVICES}/spot-decode/status"),
            format!("PATCH {SERVICES}/spot-decode"),
            format!("PATCH {SERVICES}/spot-decode"),
            format!("PATCH {VIEWS}/spot-decode-sv/status"),
            format!("PATCH {VIEWS}/spot-decode-sv/status"),
            format!("PATCH {VIEWS}/spot-decode-sv/status"),
            EVENT.to_owned(),
            EVENT.to_owned(),
        ]
    );
    assert_eq!(
        role_replicas(&fake)[1..],
        [
            ("decode-ondemand".to_owned(), 2),
            ("decode-spot".to_owned(), 2)
        ]
    );
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_no_writes(&fake);

    // The lock carries the target's resourceVersion: a conflict there means
    // the target changed, so it is not repeated; the reconcile requeues.
    fake.edit(API, "ScaleView", "default", "spot-decode-sv", |v| {
        v["spec"]["replicas"] = json!(2);
        v["metadata"]["generation"] = json!(2);
    });
    fake.conflict_next_writes(&format!("{SERVICES}/spot-decode/status"), 1);
    let stored: ScaleView = serde_json::from_value(view(&fake, "spot-decode-sv").unwrap()).unwrap();
    fake.caught_up().await;
    let action = tandem::reconcile::scale_view::reconcile(Arc::new(stored), ctx.clone())
        .await
        .expect("a lost lock race requeues");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(1))
    );
    assert_eq!(
        fake.take_writes_events_as_one(),
        [format!("PATCH {SERVICES}/spot-decode/status")]
    );
    reconcile_view(&fake, &ctx, "spot-decode-sv").await;
    assert_eq!(
        role_replicas(&fake)[1..],
        [
            ("decode-ondemand".to_owned(), 2),
            ("decode-spot".to_owned(), 0)
        ]
    );
}

/// A view deleted before its first reconcile (its namespace going, the
/// cache not showing it yet): the finalizer patch answers 404. That ends the
/// reconcile quietly, and no lock is taken on the target for a view that is
/// gone; not a failure retried against an object that is gone.
#[tokio::test]
async fn a_view_gone_before_its_finalizer_is_written_locks_nothing() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_spot(&fake, 4);
    let stored: ScaleView = serde_json::from_value(view(&fake, "spot-decode-sv").unwrap()).unwrap();
    fake.caught_up().await;
    fake.hold_watches("scaleviews");
    fake.remove(API, "ScaleView", "default", "spot-decode-sv");
    fake.take_calls();

    let outcome = tandem::reconcile::scale_view::reconcile(Arc::new(stored), ctx.clone()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        fake.take_writes_events_as_one(),
        [format!("PATCH {VIEWS}/spot-decode-sv")]
    );
    assert_eq!(locks(&fake), Value::Null, "no lock for a view that is gone");
}
