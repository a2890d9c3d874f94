//! The ResourceScalingGroup reconciler (InplaceScaling) against the in-memory
//! API server: the seed's group scaling two roles of a RoleBasedGroup with one
//! tested JSON Patch, Deployments scaled through `/scale`, drift set back with
//! an Event, nothing written on an unchanged world, nothing touched once the
//! group is deleted, and stalls that say why.

use std::sync::Arc;

use harness::fake_api::{EVENT, FakeApi};
use harness::{repo_path, yaml_documents};
use serde_json::{Value, json};
use tandem::admission::{self, Kind, lookup};
use tandem::api::ResourceScalingGroup;
use tandem::reconcile::Context;

const RSG: &str = "resourcescalinggroup.com/v1";
const RBG: &str = "workloads.x-k8s.io/v1alpha1";
fn groups(namespace: &str) -> String {
    format!("/apis/resourcescalinggroup.com/v1/namespaces/{namespace}/resourcescalinggroups")
}

fn deployments(namespace: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/deployments")
}

/// Stores a group as the API server would after admission.
fn store_group(fake: &FakeApi, namespace: &str, object: &Value) {
    let (admitted, _) = admission::admit(
        Kind::ResourceScalingGroup,
        namespace,
        object,
        None,
        &lookup::Blind,
    )
    .expect("the group is admitted");
    let mut admitted = admitted;
    admitted["metadata"]["namespace"] = json!(namespace);
    fake.insert(admitted);
}

fn deployment(namespace: &str, name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "server:1"}]}}}})
}

fn replicas_of(fake: &FakeApi, namespace: &str, name: &str) -> i64 {
    fake.get("apps/v1", "Deployment", namespace, name).unwrap()["spec"]["replicas"]
        .as_i64()
        .unwrap()
}

fn group(fake: &FakeApi, namespace: &str, name: &str) -> Value {
    fake.get(RSG, "ResourceScalingGroup", namespace, name)
        .unwrap()
}

async fn reconcile(fake: &FakeApi, ctx: &Arc<Context>, namespace: &str, name: &str) {
    let stored: ResourceScalingGroup =
        serde_json::from_value(group(fake, namespace, name)).unwrap();
    fake.caught_up().await;
    tandem::reconcile::resource_scaling_group::reconcile(Arc::new(stored), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

fn assert_no_writes(fake: &FakeApi) {
    let writes = fake.take_writes();
    assert!(
        writes.is_empty(),
        "writes on an unchanged world: {writes:?}"
    );
}

fn condition(group: &Value, type_: &str) -> Value {
    group["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap()
}

/// (role, replicas) of the stored RoleBasedGroup.
fn roles(fake: &FakeApi) -> Vec<(String, i64)> {
    fake.get(RBG, "RoleBasedGroup", "ai", "rolebasedgroup1")
        .unwrap()["spec"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["replicas"].as_i64().unwrap_or(1),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_seed_group_scales_two_roles_in_one_tested_patch_then_writes_nothing() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    // Seed 000's example as written, applied in namespace ai.
    let seed = yaml_documents(&repo_path(
        "examples/resourcescalinggroup/inplace-scaling.yaml",
    ))
    .remove(0);
    store_group(&fake, "ai", &seed);
    fake.insert(deployment("ai", "router", 10));
    fake.insert(json!({"apiVersion": RBG, "kind": "RoleBasedGroup",
        "metadata": {"name": "rolebasedgroup1", "namespace": "ai"},
        "spec": {"roles": [{"name": "prefill", "replicas": 3}, {"name": "Decode", "replicas": 3}]}}));
    fake.caught_up().await;
    fake.take_calls();

    reconcile(&fake, &ctx, "ai", "pd-pool").await;
    let calls = fake.take_calls();
    // The Deployment's replicas come from the cache. RoleBasedGroups are
    // first read now: their cache starts listing (its LIST, in the
    // background, is left out) and meanwhile the object is read whole.
    let lines: Vec<String> = calls
        .iter()
        .filter(|c| c.line() != "GET /apis/workloads.x-k8s.io/v1alpha1/rolebasedgroups")
        .map(|c| {
            if c.path.contains("/events") {
                EVENT.to_owned()
            } else {
                c.line()
            }
        })
        .collect();
    let rbg = "/apis/workloads.x-k8s.io/v1alpha1/namespaces/ai/rolebasedgroups/rolebasedgroup1";
    assert_eq!(
        lines,
        [
            format!("GET {rbg}"),
            format!("PATCH {rbg}"),
            EVENT.to_owned(),
            EVENT.to_owned(),
            format!("PATCH {}/pd-pool/status", groups("ai")),
        ]
    );
    let role_patch = calls
        .iter()
        .find(|c| c.line() == format!("PATCH {rbg}"))
        .unwrap();
    assert_eq!(
        role_patch.body().cloned(),
        Some(json!([
            {"op": "test", "path": "/spec/roles/0/name", "value": "prefill"},
            {"op": "replace", "path": "/spec/roles/0/replicas", "value": 10},
            {"op": "test", "path": "/spec/roles/1/name", "value": "Decode"},
            {"op": "replace", "path": "/spec/roles/1/replicas", "value": 20},
        ]))
    );
    assert_eq!(
        roles(&fake),
        [("prefill".to_owned(), 10), ("Decode".to_owned(), 20)]
    );
    let stored = group(&fake, "ai", "pd-pool");
    assert_eq!(stored["status"]["currentReplicas"], 10);
    assert_eq!(stored["status"]["observedGeneration"], 1);
    let ready = condition(&stored, "Ready");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["message"], "prefill=10, decode=20 follow router=10");
    assert_eq!(condition(&stored, "Stalled")["status"], "False");
    assert_eq!(
        fake.event_notes_in("ai"),
        [
            "Scaled: source router has 10 replicas: decode 3 -> 20 (ratio 2)",
            "Scaled: source router has 10 replicas: prefill 3 -> 10 (ratio 1)",
        ]
    );

    reconcile(&fake, &ctx, "ai", "pd-pool").await;
    assert_no_writes(&fake);
}

/// Deployments router -> prefill (x1), decode (x2), all in namespace default.
fn store_deployments(fake: &FakeApi, router: i64) {
    fake.insert(deployment("default", "router", router));
    fake.insert(deployment("default", "prefill", 1));
    fake.insert(deployment("default", "decode", 1));
    store_group(
        fake,
        "default",
        &json!({"apiVersion": RSG, "kind": "ResourceScalingGroup",
            "metadata": {"name": "pd-ratio"},
            "spec": {"targetResources": [
                {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "p", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "prefill"}},
                {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "router", "role": "Source"},
                {"name": "p", "role": "Target", "ratio": 1},
                {"name": "decode", "role": "Target", "ratio": "2"}]}}}}),
    );
    fake.take_calls();
}

#[tokio::test]
async fn deployments_follow_through_scale_and_drift_is_set_back() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_deployments(&fake, 10);

    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    let calls = fake.take_calls();
    let scale_patches: Vec<(String, Option<Value>)> = calls
        .iter()
        .filter(|c| c.method == "PATCH" && c.path.ends_with("/scale"))
        .map(|c| (c.path.clone(), c.body().cloned()))
        .collect();
    assert_eq!(
        scale_patches,
        [
            (
                format!("{}/prefill/scale", deployments("default")),
                Some(json!({"spec": {"replicas": 10}}))
            ),
            (
                format!("{}/decode/scale", deployments("default")),
                Some(json!({"spec": {"replicas": 20}}))
            ),
        ]
    );
    assert_eq!(replicas_of(&fake, "default", "prefill"), 10);
    assert_eq!(replicas_of(&fake, "default", "decode"), 20);
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    assert_no_writes(&fake);

    // Someone sets decode to 7 by hand: it is set back, and the Event says so.
    fake.edit("apps/v1", "Deployment", "default", "decode", |d| {
        d["spec"]["replicas"] = json!(7)
    });
    fake.take_calls();
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {}/decode/scale", deployments("default")),
            EVENT.to_owned()
        ],
        "drift repair leaves the status as it was"
    );
    assert_eq!(replicas_of(&fake, "default", "decode"), 20);
    assert!(
        fake.event_notes().contains(
            &"DriftRepaired: decode was set to 7 by hand; set back to 20 (ratio 2 of router=10)"
                .to_owned()
        ),
        "{:?}",
        fake.event_notes()
    );
    let decided = |decision| {
        ctx.metrics
            .decisions("ResourceScalingGroup", decision, "none")
    };
    assert_eq!(decided("drift_repaired"), 1, "counted on /metrics");
    let scaled = decided("target_scaled");

    // The router scales (an HPA): the Targets follow, the Event says why.
    fake.edit("apps/v1", "Deployment", "default", "router", |d| {
        d["spec"]["replicas"] = json!(12)
    });
    fake.take_calls();
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    assert_eq!(
        fake.take_writes_events_as_one(),
        [
            format!("PATCH {}/prefill/scale", deployments("default")),
            format!("PATCH {}/decode/scale", deployments("default")),
            EVENT.to_owned(),
            EVENT.to_owned(),
            format!("PATCH {}/pd-ratio/status", groups("default")),
        ]
    );
    assert_eq!(
        (
            replicas_of(&fake, "default", "prefill"),
            replicas_of(&fake, "default", "decode")
        ),
        (12, 24)
    );
    assert!(
        fake.event_notes().contains(
            &"Scaled: source router scaled from 10 to 12: decode 20 -> 24 (ratio 2)".to_owned()
        ),
        "{:?}",
        fake.event_notes()
    );
    assert_eq!(
        decided("target_scaled"),
        scaled + 2,
        "both Targets followed"
    );
    assert_eq!(decided("drift_repaired"), 1);
    assert_eq!(
        group(&fake, "default", "pd-ratio")["status"]["currentReplicas"],
        12
    );
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    assert_no_writes(&fake);
}

#[tokio::test]
async fn a_deleted_group_leaves_every_target_as_it_is() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_deployments(&fake, 10);
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    fake.edit("apps/v1", "Deployment", "default", "router", |d| {
        d["spec"]["replicas"] = json!(30)
    });
    let stale: ResourceScalingGroup =
        serde_json::from_value(group(&fake, "default", "pd-ratio")).unwrap();

    // Being deleted (another controller's finalizer holds it): hands off.
    fake.edit(RSG, "ResourceScalingGroup", "default", "pd-ratio", |g| {
        g["metadata"]["deletionTimestamp"] = json!("2026-11-21T10:00:00Z");
        g["metadata"]["finalizers"] = json!(["example.com/hold"]);
    });
    fake.take_calls();
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    assert_no_writes(&fake);

    // Gone: a reconcile still queued for it touches nothing either.
    fake.remove(RSG, "ResourceScalingGroup", "default", "pd-ratio");
    fake.caught_up().await;
    tandem::reconcile::resource_scaling_group::reconcile(Arc::new(stale), ctx.clone())
        .await
        .expect("reconcile succeeds");
    assert_no_writes(&fake);
    assert_eq!(
        (
            replicas_of(&fake, "default", "prefill"),
            replicas_of(&fake, "default", "decode")
        ),
        (10, 20),
        "Retain: the Targets stay where the group left them"
    );
}

#[tokio::test]
async fn a_missing_target_and_a_refused_patch_stall_the_group_saying_why() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_deployments(&fake, 10);
    fake.remove("apps/v1", "Deployment", "default", "prefill");
    fake.take_calls();

    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    assert_eq!(
        replicas_of(&fake, "default", "decode"),
        20,
        "the rest still follows"
    );
    let stored = group(&fake, "default", "pd-ratio");
    let stalled = condition(&stored, "Stalled");
    assert_eq!(stalled["status"], "True");
    assert_eq!(stalled["reason"], "TargetMissing");
    assert_eq!(stalled["message"], "Target p: Deployment prefill not found");
    assert_eq!(condition(&stored, "Ready")["status"], "False");
    assert!(
        fake.event_notes()
            .contains(&"Stalled: Target p: Deployment prefill not found".to_owned()),
        "{:?}",
        fake.event_notes()
    );
    fake.take_calls();
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    assert_no_writes(&fake);

    // The prefill Deployment is back, but writes to Deployments are refused.
    fake.insert(deployment("default", "prefill", 1));
    fake.refuse_writes("deployments", 403);
    fake.take_calls();
    reconcile(&fake, &ctx, "default", "pd-ratio").await;
    let stored = group(&fake, "default", "pd-ratio");
    let stalled = condition(&stored, "Stalled");
    assert_eq!(stalled["reason"], "PatchRefused");
    assert_eq!(
        stalled["message"],
        "Target p: the patch was refused: PATCH deployments is refused by this test"
    );
    assert_eq!(replicas_of(&fake, "default", "prefill"), 1);
}

/// A group deleted while its reconcile runs (its namespace going, the cache
/// not showing it yet): the Targets are scaled from the cache, then the
/// status write answers 404. That ends the reconcile quietly, not as a
/// failure retried with backoff against an object that is gone.
#[tokio::test]
async fn a_group_gone_before_its_status_is_written_ends_the_reconcile_quietly() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_deployments(&fake, 10);
    let stored: ResourceScalingGroup =
        serde_json::from_value(group(&fake, "default", "pd-ratio")).unwrap();
    fake.caught_up().await;
    fake.hold_watches("resourcescalinggroups");
    fake.remove(RSG, "ResourceScalingGroup", "default", "pd-ratio");

    let outcome =
        tandem::reconcile::resource_scaling_group::reconcile(Arc::new(stored), ctx.clone()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let status = format!("PATCH {}/pd-ratio/status", groups("default"));
    assert!(
        fake.take_writes_events_as_one().contains(&status),
        "the status write was tried and found the group gone"
    );
}

/// A reconcile that starts from a cached group older than the status just
/// written (its watch behind the write for longer than the second the write
/// waits, as on a loaded CI machine) plans the same status again, and does
/// not send it: the patch repeats the last one while the cache still shows
/// the version before it. The namespace-deletion scenario's audit check
/// caught this write of nothing once in CI.
#[tokio::test]
async fn a_status_the_cache_does_not_show_yet_is_not_written_again() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_deployments(&fake, 10);
    let stale: ResourceScalingGroup =
        serde_json::from_value(group(&fake, "default", "pd-ratio")).unwrap();
    fake.caught_up().await;
    fake.hold_watches("resourcescalinggroups");
    let status = format!("PATCH {}/pd-ratio/status", groups("default"));

    for pass in ["first", "second"] {
        let outcome = tandem::reconcile::resource_scaling_group::reconcile(
            Arc::new(stale.clone()),
            ctx.clone(),
        )
        .await;
        assert!(outcome.is_ok(), "{pass} pass: {outcome:?}");
        let writes = fake.take_writes();
        let sent = writes.iter().filter(|w| **w == status).count();
        let expected = usize::from(pass == "first");
        assert_eq!(sent, expected, "{pass} pass wrote: {writes:?}");
    }
    assert_eq!(
        group(&fake, "default", "pd-ratio")["status"]["currentReplicas"],
        10
    );
}
