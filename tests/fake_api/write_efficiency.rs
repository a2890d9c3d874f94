//! How many API requests a reconcile costs, per kind with a reconciler,
//! against the in-memory API server (`harness::fake_api`): a reconcile of an
//! unchanged world must write nothing, and a change must write only what it
//! changes. Each test prints its table (`cargo test --test fake_api
//! write_efficiency:: -- --nocapture --test-threads 1`); BENCHMARKS.md `## Write efficiency`
//! records it.

use std::sync::Arc;

use harness::fake_api::FakeApi;
use harness::request::Request;
use harness::{repo_path, yaml_documents};
use serde_json::{Value, json};
use tandem::admission::{self, Kind, lookup};
use tandem::api::{InferenceService, ResourceScalingGroup, ScaleView};
use tandem::reconcile::Context;

const API: &str = "fusioninfer.io/v1alpha1";

/// The requests of one reconcile, by what they do.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    /// GETs: lists and gets.
    reads: usize,
    /// Server-side applies and patches of objects other than the reconciled
    /// one's status (children, a view's finalizer, a target's roles).
    patches: usize,
    deletes: usize,
    /// Writes of a status subresource.
    status: usize,
    /// Events recorded (created, or a repeat patched into its series).
    events: usize,
}

impl Counts {
    fn of(calls: &[Request]) -> Counts {
        let mut counts = Counts::default();
        for call in calls {
            let field = if call.path.contains("/events") {
                &mut counts.events
            } else if !call.is_write() {
                &mut counts.reads
            } else if call.method == "DELETE" {
                &mut counts.deletes
            } else if call.path.ends_with("/status") {
                &mut counts.status
            } else {
                &mut counts.patches
            };
            *field += 1;
        }
        counts
    }

    fn writes(&self) -> usize {
        self.patches + self.deletes + self.status + self.events
    }
}

/// The table a test prints, one row per reconcile.
struct Table {
    title: &'static str,
    rows: Vec<(String, Counts)>,
}

impl Table {
    fn new(title: &'static str) -> Table {
        Table {
            title,
            rows: Vec::new(),
        }
    }

    /// Records the requests since the last look as one reconcile.
    fn row(&mut self, fake: &FakeApi, scenario: &str) -> &Counts {
        let calls = fake.take_calls();
        let counts = Counts::of(&calls);
        self.rows.push((scenario.to_owned(), counts));
        &self.rows.last().expect("just pushed").1
    }

    fn print(&self) {
        println!("\n{}", self.title);
        println!(
            "| {:<62} | {:>8} | {:>5} | {:>6} | {:>7} | {:>7} | {:>6} | {:>6} |",
            "reconcile", "requests", "reads", "writes", "patches", "deletes", "status", "events"
        );
        println!(
            "|{:-<64}|{:->10}|{:->7}|{:->8}|{:->9}|{:->9}|{:->8}|{:->8}|",
            "", "", "", "", "", "", "", ""
        );
        for (scenario, c) in &self.rows {
            println!(
                "| {:<62} | {:>8} | {:>5} | {:>6} | {:>7} | {:>7} | {:>6} | {:>6} |",
                scenario,
                c.reads + c.writes(),
                c.reads,
                c.writes(),
                c.patches,
                c.deletes,
                c.status,
                c.events
            );
        }
    }
}

fn assert_unchanged(counts: &Counts, what: &str) {
    assert_eq!(
        counts.writes(),
        0,
        "{what}: a reconcile of an unchanged world writes nothing: {counts:?}"
    );
    assert_eq!(
        counts.reads, 0,
        "{what}: it reads the caches, not the API server: {counts:?}"
    );
}

fn story4(fake: &FakeApi) -> String {
    let object = yaml_documents(&repo_path(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
    ))
    .remove(0);
    let (admitted, _) = admission::admit(
        Kind::InferenceService,
        "default",
        &object,
        None,
        &lookup::Blind,
    )
    .expect("story 4 is admitted");
    let stored = fake.insert(admitted);
    stored["metadata"]["name"]
        .as_str()
        .expect("stored with a name")
        .to_owned()
}

async fn reconcile_service(fake: &FakeApi, ctx: &Arc<Context>, name: &str) {
    let stored = fake
        .get(API, "InferenceService", "default", name)
        .expect("service stored");
    let service: InferenceService = serde_json::from_value(stored).expect("service parses");
    fake.caught_up().await;
    tandem::reconcile::inference_service::reconcile(Arc::new(service), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

/// Changes a stored service's spec as `kubectl edit` would.
fn edit_service(fake: &FakeApi, name: &str, change: impl FnOnce(&mut Value)) {
    fake.edit(API, "InferenceService", "default", name, |service| {
        change(service);
        let generation = service["metadata"]["generation"].as_i64().unwrap_or(1);
        service["metadata"]["generation"] = json!(generation + 1);
    });
    fake.take_calls();
}

/// The LeaderWorkerSets of a role, by name, as stored.
fn role_sets(fake: &FakeApi, role: &str) -> Vec<Value> {
    fake.list(LWS, "LeaderWorkerSet", "default")
        .into_iter()
        .filter(|o| o["metadata"]["labels"]["fusioninfer.io/role-name"] == role)
        .collect()
}

/// The LeaderWorkerSets a reconcile patched.
fn patched_sets(calls: &[Request]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.method == "PATCH" && c.path.contains("/leaderworkersets/"))
        .map(|c| c.path.rsplit('/').next().unwrap_or_default().to_owned())
        .collect()
}

const LWS: &str = "leaderworkerset.x-k8s.io/v1";

#[tokio::test]
async fn inference_service_reconciles_write_only_what_changed() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = story4(&fake);
    fake.caught_up().await;
    fake.take_calls();
    let mut table = Table::new(
        "InferenceService story 4 (P/D multi-node: prefill 1 x 2 nodes, decode 2 x 4 nodes)",
    );
    let all_ready = |_: &Value| true;

    reconcile_service(&fake, &ctx, &name).await;
    let created = table.row(
        &fake,
        "create: 3 LeaderWorkerSets, the PodGroup, 2 PodDisruptionBudgets",
    );
    // One apply per child, one Event per apply, one status write.
    assert_eq!(created.patches, 6, "{created:?}");
    assert_eq!(created.events, created.patches);
    assert_eq!((created.deletes, created.status), (0, 1));

    reconcile_service(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after create");

    fake.step_leader_worker_sets("default", all_ready);
    fake.take_calls();
    reconcile_service(&fake, &ctx, &name).await;
    let ready = table.row(&fake, "every pod ready: the status says so");
    assert_eq!((ready.patches, ready.deletes, ready.status), (0, 0, 1));
    reconcile_service(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "once ready");

    edit_service(&fake, &name, |s| {
        s["spec"]["roles"][1]["replicas"] = json!(3)
    });
    reconcile_service(&fake, &ctx, &name).await;
    let scaled = table.row(&fake, "scale decode 2 -> 3");
    // The new replica's LeaderWorkerSet and decode's budget (3 replicas now,
    // 2 of them kept available); the PodGroup's minimum does not move.
    assert!(
        scaled.patches == 2 && scaled.deletes == 0 && scaled.status <= 1,
        "{scaled:?}"
    );
    assert_eq!(scaled.events, scaled.patches);
    reconcile_service(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after scale up");
    fake.step_leader_worker_sets("default", all_ready);
    fake.take_calls();
    reconcile_service(&fake, &ctx, &name).await;
    table.row(&fake, "the new replica ready: the status says so");

    // A new decode image: decode's revision moves, prefill's does not
    // (`plan::inference_service::revision::role_revision`), and RollingUpdate replaces one
    // decode replica at a time (maxUnavailable 1, maxSurge 0).
    let prefill_before = role_sets(&fake, "prefill");
    let pod_group_before = fake.list("scheduling.volcano.sh/v1beta1", "PodGroup", "default");
    edit_service(&fake, &name, |s| {
        s["spec"]["roles"][1]["template"]["spec"]["containers"][0]["image"] =
            json!("vllm/vllm-openai:v0.12.0");
        // Replaced and removed at once: the drain's writes are counted in
        // tests/fake_api/reconcile_inference_service.rs.
        s["spec"]["roles"][1]["drain"] = json!({"seconds": 0});
    });
    let mut replaced = Vec::new();
    for step in 1..=3 {
        reconcile_service(&fake, &ctx, &name).await;
        let calls = fake.take_calls();
        let patched = patched_sets(&calls);
        let counts = Counts::of(&calls);
        assert_eq!(patched.len(), 1, "one replica per step: {patched:?}");
        assert!(
            patched[0].starts_with("deepseek-r1-disagg-decode-"),
            "{patched:?}"
        );
        assert_eq!((counts.patches, counts.deletes), (1, 0), "{counts:?}");
        assert_eq!(counts.events, 1, "the replaced replica's Event: {counts:?}");
        replaced.push(patched[0].clone());
        table.rows.push((
            format!(
                "decode image, step {step}: {} replaced",
                patched[0].trim_start_matches("deepseek-r1-disagg-")
            ),
            counts,
        ));
        // Nothing new is ready: nothing is written.
        reconcile_service(&fake, &ctx, &name).await;
        assert_unchanged(
            table.row(&fake, "unchanged (the replaced replica not ready yet)"),
            "while a replaced replica starts",
        );
        fake.step_leader_worker_sets("default", all_ready);
        fake.take_calls();
    }
    replaced.sort();
    assert_eq!(
        replaced,
        [
            "deepseek-r1-disagg-decode-0",
            "deepseek-r1-disagg-decode-1",
            "deepseek-r1-disagg-decode-2"
        ]
    );
    reconcile_service(&fake, &ctx, &name).await;
    let done = table.row(&fake, "the last replica ready: the status says so");
    assert_eq!((done.patches, done.deletes, done.status), (0, 0, 1));
    assert_eq!(
        role_sets(&fake, "prefill"),
        prefill_before,
        "prefill's LeaderWorkerSets are byte-identical"
    );
    assert_eq!(
        fake.list("scheduling.volcano.sh/v1beta1", "PodGroup", "default"),
        pod_group_before
    );
    reconcile_service(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after the template change");

    edit_service(&fake, &name, |s| {
        s["spec"]["roles"][1]["replicas"] = json!(2)
    });
    reconcile_service(&fake, &ctx, &name).await;
    let down = table.row(&fake, "scale decode 3 -> 2");
    assert_eq!(down.deletes, 1, "{down:?}");
    assert!(down.patches <= 1, "{down:?}");
    assert_eq!(down.events, down.deletes + down.patches);
    reconcile_service(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after scale down");

    table.print();
}

/// The stored status of role `role` of service `name`.
fn stored_component(fake: &FakeApi, name: &str, role: &str) -> Value {
    fake.get(API, "InferenceService", "default", name)
        .expect("service stored")["status"]["components"][role]
        .clone()
}

/// With a pace like `tandem serve`'s (shortened: replica counts once per
/// 300 ms, pods ready inside replicas once per 1.2 s), a status whose counts
/// alone moved is held: the first count change after a quiet pace is
/// written at once, the next ones together when the reconcile looks again;
/// pods that load inside a replica are held to the longer pace, the pod
/// that makes a replica whole to the shorter; a phase or condition that
/// moves is written at once, however soon after the last write.
#[tokio::test]
async fn count_changes_are_written_once_per_pace_and_a_phase_change_at_once() {
    let pace = tandem::plan::inference_service::status::StatusPace {
        counts: std::time::Duration::from_millis(300),
        pods: std::time::Duration::from_millis(1200),
    };
    let fake = FakeApi::new();
    let ctx = fake.context_with(|ctx| {
        ctx.status_writes = tandem::reconcile::status_writes::StatusWrites::new(pace);
    });
    let name = story4(&fake);
    fake.caught_up().await;
    reconcile_service(&fake, &ctx, &name).await;
    let pods = fake.step_leader_worker_sets("default", |_| false);
    fake.caught_up().await;
    reconcile_service(&fake, &ctx, &name).await;
    tokio::time::sleep(pace.pods).await;
    reconcile_service(&fake, &ctx, &name).await;
    fake.take_calls();
    let decode: Vec<&String> = pods
        .iter()
        .filter(|p| p.starts_with(&format!("{name}-decode-0-")))
        .collect();
    assert_eq!(decode.len(), 4, "{pods:?}");
    let status_writes = |fake: &FakeApi| Counts::of(&fake.take_calls()).status;

    // The first pod ready after a quiet pace: written at once.
    fake.set_ready("default", decode[0], true);
    reconcile_service(&fake, &ctx, &name).await;
    assert_eq!(status_writes(&fake), 1);
    assert_eq!(stored_component(&fake, &name, "decode")["readyPods"], 1);

    // Two more inside the replica: held, past the counts' pace too.
    for pod in &decode[1..3] {
        fake.set_ready("default", pod, true);
        reconcile_service(&fake, &ctx, &name).await;
        assert_eq!(status_writes(&fake), 0, "held within the pace");
    }
    tokio::time::sleep(pace.counts).await;
    reconcile_service(&fake, &ctx, &name).await;
    assert_eq!(status_writes(&fake), 0, "held to the pods' pace");
    assert_eq!(stored_component(&fake, &name, "decode")["readyPods"], 1);

    // The look after the pods' pace writes what they moved, in one patch.
    tokio::time::sleep(pace.pods).await;
    reconcile_service(&fake, &ctx, &name).await;
    assert_eq!(status_writes(&fake), 1);
    assert_eq!(stored_component(&fake, &name, "decode")["readyPods"], 3);

    // The fourth makes replica 0 whole: a replica count, held only to the
    // counts' pace.
    fake.set_ready("default", decode[3], true);
    reconcile_service(&fake, &ctx, &name).await;
    assert_eq!(status_writes(&fake), 0, "held within the counts' pace");
    tokio::time::sleep(pace.counts).await;
    reconcile_service(&fake, &ctx, &name).await;
    assert_eq!(status_writes(&fake), 1);
    let written = stored_component(&fake, &name, "decode");
    assert_eq!(
        (&written["readyPods"], &written["readyReplicas"]),
        (&json!(4), &json!(1))
    );
    let phase = written["phase"].clone();

    // Every replica ready: phases and conditions move, written at once.
    fake.step_leader_worker_sets("default", |_| true);
    fake.take_calls();
    reconcile_service(&fake, &ctx, &name).await;
    assert_eq!(status_writes(&fake), 1, "a phase change is not held");
    let written = stored_component(&fake, &name, "decode");
    assert_eq!(written["readyPods"], 8);
    assert_ne!(written["phase"], phase, "{written:#}");
    reconcile_service(&fake, &ctx, &name).await;
    assert_unchanged(&Counts::of(&fake.take_calls()), "once ready, paced");
}

/// The spot example's service and view, stored as after admission, with the
/// view asking for `replicas`.
fn store_spot(fake: &FakeApi, replicas: i64) {
    let mut documents = yaml_documents(&repo_path("examples/scaleview/decode-ondemand-spot.yaml"));
    let (service, _) = admission::admit(
        Kind::InferenceService,
        "default",
        &documents[0],
        None,
        &lookup::Blind,
    )
    .expect("the service is admitted");
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
    .expect("the view is admitted");
    fake.insert(view);
}

async fn reconcile_view(fake: &FakeApi, ctx: &Arc<Context>) {
    let stored = fake
        .get(API, "ScaleView", "default", "spot-decode-sv")
        .expect("view stored");
    let view: ScaleView = serde_json::from_value(stored).expect("view parses");
    fake.caught_up().await;
    tandem::reconcile::scale_view::reconcile(Arc::new(view), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

#[tokio::test]
async fn scale_view_reconciles_write_only_what_changed() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_spot(&fake, 4);
    fake.caught_up().await;
    fake.take_calls();
    let mut table = Table::new(
        "ScaleView spot-decode-sv over spot-decode (decode-ondemand max 2, decode-spot)",
    );

    reconcile_view(&fake, &ctx).await;
    let first = table.row(&fake, "first reconcile: finalizer, lock, roles 2/2, status");
    // Finalizer and roles are patches, the lock and the view's status are
    // status writes; one Event for the lock and one for the scaling.
    assert_eq!(
        (first.patches, first.status, first.deletes),
        (2, 2, 0),
        "{first:?}"
    );
    assert_eq!(first.reads, 0, "the target is read from the cache");

    reconcile_view(&fake, &ctx).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after the first reconcile");

    // `kubectl scale scaleview/spot-decode-sv --replicas=2`: a new generation.
    fake.edit(API, "ScaleView", "default", "spot-decode-sv", |v| {
        v["spec"]["replicas"] = json!(2);
        v["metadata"]["generation"] = json!(2);
    });
    fake.take_calls();
    reconcile_view(&fake, &ctx).await;
    let scaled = table.row(&fake, "kubectl scale 4 -> 2 (decode-spot 2 -> 0)");
    // The lock's generation, the roles and the view's status; no finalizer.
    assert_eq!(
        (scaled.patches, scaled.status, scaled.deletes),
        (1, 2, 0),
        "{scaled:?}"
    );
    reconcile_view(&fake, &ctx).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after scaling");

    table.print();
}

const RSG: &str = "resourcescalinggroup.com/v1";

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "server:1"}]}}}})
}

/// Stores a ResourceScalingGroup as the API server would after admission.
fn store_group(fake: &FakeApi, object: &Value) -> String {
    let (admitted, _) = admission::admit(
        Kind::ResourceScalingGroup,
        "default",
        object,
        None,
        &lookup::Blind,
    )
    .expect("the group is admitted");
    let stored = fake.insert(admitted);
    stored["metadata"]["name"]
        .as_str()
        .expect("stored with a name")
        .to_owned()
}

async fn reconcile_group(fake: &FakeApi, ctx: &Arc<Context>, name: &str) {
    let stored = fake
        .get(RSG, "ResourceScalingGroup", "default", name)
        .expect("group stored");
    let group: ResourceScalingGroup = serde_json::from_value(stored).expect("group parses");
    fake.caught_up().await;
    tandem::reconcile::resource_scaling_group::reconcile(Arc::new(group), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

fn edit_group(fake: &FakeApi, name: &str, change: impl FnOnce(&mut Value)) {
    fake.edit(RSG, "ResourceScalingGroup", "default", name, |group| {
        change(group);
        let generation = group["metadata"]["generation"].as_i64().unwrap_or(1);
        group["metadata"]["generation"] = json!(generation + 1);
    });
    fake.take_calls();
}

#[tokio::test]
async fn inplace_scaling_reconciles_write_only_what_changed() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_group(
        &fake,
        &json!({"apiVersion": RSG, "kind": "ResourceScalingGroup",
            "metadata": {"name": "pd-ratio"},
            "spec": {"targetResources": [
                    {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
                    {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
                    {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
                "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                    {"name": "router", "role": "Source"},
                    {"name": "prefill", "role": "Target", "ratio": 1},
                    {"name": "decode", "role": "Target", "ratio": "2"}]}}}}),
    );
    for (deployment_name, replicas) in [("router", 2), ("prefill", 2), ("decode", 4)] {
        fake.insert(deployment(deployment_name, replicas));
    }
    fake.caught_up().await;
    fake.take_calls();
    let mut table = Table::new(
        "ResourceScalingGroup InplaceScaling: router -> prefill 1:1, decode 1:2 (Deployments)",
    );

    reconcile_group(&fake, &ctx, &name).await;
    let first = table.row(&fake, "first reconcile, targets already at ratio: status");
    assert_eq!(
        (first.patches, first.deletes, first.status),
        (0, 0, 1),
        "{first:?}"
    );
    reconcile_group(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after the first reconcile");

    fake.edit("apps/v1", "Deployment", "default", "router", |d| {
        d["spec"]["replicas"] = json!(10)
    });
    fake.take_calls();
    reconcile_group(&fake, &ctx, &name).await;
    let followed = table.row(&fake, "router 2 -> 10: prefill 10, decode 20 via /scale");
    assert_eq!((followed.patches, followed.deletes), (2, 0), "{followed:?}");
    assert_eq!(followed.status, 1, "currentReplicas moves to 10");
    reconcile_group(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after following");

    fake.edit("apps/v1", "Deployment", "default", "decode", |d| {
        d["spec"]["replicas"] = json!(7)
    });
    fake.take_calls();
    reconcile_group(&fake, &ctx, &name).await;
    let repaired = table.row(&fake, "decode set to 7 by hand: set back to 20");
    assert_eq!((repaired.patches, repaired.status), (1, 0), "{repaired:?}");
    assert!(
        repaired.events >= 1,
        "drift repair is explained: {repaired:?}"
    );
    reconcile_group(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after the repair");

    table.print();
}

#[tokio::test]
async fn group_replication_reconciles_write_only_what_changed() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    let name = store_group(
        &fake,
        &json!({"apiVersion": RSG, "kind": "ResourceScalingGroup",
            "metadata": {"name": "pd-cluster"},
            "spec": {"targetResources": [
                    {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
                    {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
                "scalingStrategy": {"type": "GroupReplication", "groupConfig": {
                    "groupNamePrefix": "inference-unit", "replicas": 1}}}}),
    );
    fake.insert(deployment("prefill", 1));
    fake.insert(deployment("decode", 2));
    fake.caught_up().await;
    fake.take_calls();
    let mut table =
        Table::new("ResourceScalingGroup GroupReplication: prefill + decode Deployments per group");

    reconcile_group(&fake, &ctx, &name).await;
    let adopted = table.row(&fake, "first reconcile: label group 00, status");
    assert_eq!((adopted.patches, adopted.deletes), (2, 0), "{adopted:?}");
    reconcile_group(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after adoption");

    edit_group(&fake, &name, |g| {
        g["spec"]["scalingStrategy"]["groupConfig"]["replicas"] = json!(3)
    });
    reconcile_group(&fake, &ctx, &name).await;
    let up = table.row(&fake, "1 -> 3 groups: 4 clones");
    assert_eq!((up.patches, up.deletes), (4, 0), "{up:?}");
    reconcile_group(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after scaling up");

    edit_group(&fake, &name, |g| {
        g["spec"]["scalingStrategy"]["groupConfig"]["replicas"] = json!(2)
    });
    reconcile_group(&fake, &ctx, &name).await;
    let down = table.row(&fake, "3 -> 2 groups: group 02's 2 clones deleted");
    assert_eq!((down.patches, down.deletes), (0, 2), "{down:?}");
    reconcile_group(&fake, &ctx, &name).await;
    assert_unchanged(table.row(&fake, "unchanged"), "after scaling down");

    table.print();
}
