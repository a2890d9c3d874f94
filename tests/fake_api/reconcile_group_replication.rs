//! The GroupReplication reconciler against an in-memory API server behind
//! kube-rs's tower-test mock: the exact requests of a scale-up and a
//! scale-down, and none when the world already matches; and the clones it
//! makes of a LeaderWorkerSet checked against the upstream CRD schema.

use std::sync::Arc;

use harness::fake_api::{EVENTS, FakeApi};
use harness::{repo_path, upstream_crds, upstream_schemas, yaml_documents};
use serde_json::{Value, json};
use tandem::api::ResourceScalingGroup;
use tandem::reconcile::Context;
use tandem::reconcile::group_replication::reconcile;

const RSG: &str = "resourcescalinggroup.com/v1";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const STATUS: &str = "PATCH /apis/resourcescalinggroup.com/v1/namespaces/default/resourcescalinggroups/pd-cluster/status";

/// The render example's world (seed 000's group and its two Deployments)
/// moved to the default namespace, stored as the API server would after
/// admission, with `replicas` groups.
fn store_world(fake: &FakeApi, replicas: i64) {
    let mut documents = yaml_documents(&repo_path(
        "examples/render/group-replication-scale-up.yaml",
    ));
    for document in &mut documents {
        document["metadata"]["namespace"] = json!("default");
    }
    let mut group = documents.remove(0);
    for target in group["spec"]["targetResources"].as_array_mut().unwrap() {
        target["namespace"] = json!("default");
    }
    group["spec"]["scalingStrategy"]["groupConfig"]["replicas"] = json!(replicas);
    let (admitted, _) = tandem::admission::admit(
        tandem::admission::Kind::ResourceScalingGroup,
        "default",
        &group,
        None,
        &tandem::admission::lookup::Blind,
    )
    .unwrap();
    fake.insert(admitted);
    for mut deployment in documents {
        deployment["status"] =
            json!({"observedGeneration": 1, "readyReplicas": deployment["spec"]["replicas"]});
        fake.insert(deployment);
    }
}

async fn reconcile_stored(fake: &FakeApi, ctx: &Arc<Context>) {
    let stored = fake
        .get(RSG, "ResourceScalingGroup", "default", "pd-cluster")
        .expect("group stored");
    let rsg: ResourceScalingGroup = serde_json::from_value(stored).unwrap();
    fake.caught_up().await;
    reconcile(Arc::new(rsg), ctx.clone())
        .await
        .expect("reconcile succeeds");
}

fn deployment(fake: &FakeApi, name: &str) -> Value {
    fake.get("apps/v1", "Deployment", "default", name)
        .unwrap_or_else(|| panic!("Deployment {name} exists"))
}

/// What the Deployment controller does: every Deployment's status catches
/// up with its generation, all replicas ready.
fn deployments_roll_out(fake: &FakeApi) {
    for d in fake.list("apps/v1", "Deployment", "default") {
        let name = d["metadata"]["name"].as_str().unwrap().to_owned();
        fake.edit("apps/v1", "Deployment", "default", &name, |d| {
            d["status"] = json!({"observedGeneration": d["metadata"]["generation"],
                "readyReplicas": d["spec"]["replicas"]});
        });
    }
}

/// The stored group's condition of `type_`.
fn condition(fake: &FakeApi, type_: &str) -> Value {
    fake.get(RSG, "ResourceScalingGroup", "default", "pd-cluster")
        .unwrap()["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("a {type_} condition"))
        .clone()
}

fn assert_nothing_written(fake: &FakeApi) {
    let calls = fake.take_calls();
    let writes: Vec<String> = calls
        .iter()
        .filter(|c| c.is_write())
        .map(|c| c.line())
        .collect();
    assert_eq!(writes, Vec::<String>::new(), "writes on an unchanged world");
    let lines: Vec<String> = calls.iter().map(|c| c.line()).collect();
    assert_eq!(
        lines,
        Vec::<String>::new(),
        "the world is read from the caches: no request at all"
    );
}

#[tokio::test]
async fn one_to_three_then_three_to_one_with_exact_writes() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_world(&fake, 3);
    reconcile_stored(&fake, &ctx).await;
    let patch = |name: &str| format!("PATCH {DEPLOYMENTS}/{name}");
    assert_eq!(
        fake.take_writes(),
        [
            patch("prefill"),
            EVENTS.to_owned(),
            patch("decode"),
            EVENTS.to_owned(),
            patch("inference-unit-01-prefill"),
            EVENTS.to_owned(),
            patch("inference-unit-01-decode"),
            EVENTS.to_owned(),
            patch("inference-unit-02-prefill"),
            EVENTS.to_owned(),
            patch("inference-unit-02-decode"),
            EVENTS.to_owned(),
            STATUS.to_owned(),
        ]
    );

    // The clones: labels on metadata and pods, their own selector, owned.
    let clone = deployment(&fake, "inference-unit-02-decode");
    let labels = json!({"app": "decode", "resourcescalinggroup.com/name": "pd-cluster",
        "resourcescalinggroup.com/group": "inference-unit-02"});
    assert_eq!(clone["metadata"]["labels"], labels);
    assert_eq!(clone["spec"]["template"]["metadata"]["labels"], labels);
    assert_eq!(clone["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(clone["spec"]["replicas"], 2);
    assert_eq!(
        clone["metadata"]["ownerReferences"][0],
        json!({"apiVersion": RSG, "kind": "ResourceScalingGroup", "name": "pd-cluster",
               "uid": "uid-pd-cluster", "controller": true, "blockOwnerDeletion": true})
    );
    // The originals: the two labels added, everything else as it was.
    let original = deployment(&fake, "prefill");
    assert_eq!(
        original["spec"]["template"]["metadata"]["labels"],
        json!({"app": "prefill", "resourcescalinggroup.com/name": "pd-cluster",
               "resourcescalinggroup.com/group": "inference-unit-00"})
    );
    assert_eq!(
        original["spec"]["selector"]["matchLabels"],
        json!({"app": "prefill"})
    );
    assert_eq!(
        original["spec"]["template"]["spec"]["containers"][0]["name"],
        "vllm"
    );
    let status = fake
        .get(RSG, "ResourceScalingGroup", "default", "pd-cluster")
        .unwrap()["status"]
        .clone();
    assert_eq!(status["currentReplicas"], 3);
    assert_eq!(
        status["labelSelector"],
        "resourcescalinggroup.com/name=pd-cluster"
    );
    let notes = fake.event_notes();
    assert!(
        notes.contains(&"Created: Deployment inference-unit-01-decode created: clone of Deployment decode for group inference-unit-01 (2 of 3 groups)".to_owned()),
        "{notes:#?}"
    );

    // Counted on /metrics: each clone a replica created under the group's
    // policy (Ordered, the default); the originals, labelled, are not.
    let decided = |decision| {
        ctx.metrics
            .decisions("ResourceScalingGroup", decision, "Ordered")
    };
    assert_eq!(decided("replica_created"), 4);
    assert_eq!(
        ctx.metrics
            .decisions("ResourceScalingGroup", "child_updated", "none"),
        2
    );

    // Nothing changed: a second reconcile only reads.
    reconcile_stored(&fake, &ctx).await;
    assert_nothing_written(&fake);

    // 3 → 1 with candidate inference-unit-02 (the seed's): 02 goes first.
    fake.edit(RSG, "ResourceScalingGroup", "default", "pd-cluster", |g| {
        g["spec"]["scalingStrategy"]["groupConfig"]["replicas"] = json!(1)
    });
    reconcile_stored(&fake, &ctx).await;
    let delete = |name: &str| format!("DELETE {DEPLOYMENTS}/{name}");
    assert_eq!(
        fake.take_writes(),
        [
            delete("inference-unit-02-prefill"),
            EVENTS.to_owned(),
            delete("inference-unit-02-decode"),
            EVENTS.to_owned(),
            delete("inference-unit-01-prefill"),
            EVENTS.to_owned(),
            delete("inference-unit-01-decode"),
            EVENTS.to_owned(),
            STATUS.to_owned(),
        ]
    );
    let left: Vec<String> = fake
        .list("apps/v1", "Deployment", "default")
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(left, ["decode", "prefill"], "the originals stay");
    let notes = fake.event_notes();
    assert!(
        notes.contains(&"Deleted: Deployment inference-unit-02-prefill deleted: group inference-unit-02 is removed, the ResourceScalingGroup is scaled to 1 group(s); it is listed in scaleDown.candidates".to_owned()),
        "{notes:#?}"
    );
    assert!(
        notes.contains(&"Deleted: Deployment inference-unit-01-decode deleted: group inference-unit-01 is removed, the ResourceScalingGroup is scaled to 1 group(s); Ordered: the highest index goes first".to_owned()),
        "{notes:#?}"
    );
    assert_eq!(decided("replica_deleted"), 4);
    assert_eq!(decided("replica_created"), 4, "nothing more created");
    reconcile_stored(&fake, &ctx).await;
    assert_nothing_written(&fake);
}

#[tokio::test]
async fn a_template_change_reaches_the_clones_and_a_missing_template_stalls() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_world(&fake, 2);
    reconcile_stored(&fake, &ctx).await;
    deployments_roll_out(&fake);
    reconcile_stored(&fake, &ctx).await;
    assert_eq!(condition(&fake, "Ready")["status"], "True");
    fake.take_calls();
    fake.edit("apps/v1", "Deployment", "default", "decode", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("vllm/vllm-openai:v0.12.0")
    });
    reconcile_stored(&fake, &ctx).await;
    assert_eq!(
        fake.take_writes(),
        [
            format!("PATCH {DEPLOYMENTS}/inference-unit-01-decode"),
            EVENTS.to_owned(),
            STATUS.to_owned(),
        ],
        "the clone follows its template, and Ready says it rolls out"
    );
    let ready = condition(&fake, "Ready");
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("Deployment inference-unit-01-decode is rolling out a change"),
        "{ready}"
    );
    reconcile_stored(&fake, &ctx).await;
    assert_nothing_written(&fake);
    assert_eq!(
        deployment(&fake, "inference-unit-01-decode")["spec"]["template"]["spec"]["containers"][0]
            ["image"],
        "vllm/vllm-openai:v0.12.0"
    );

    fake.remove("apps/v1", "Deployment", "default", "prefill");
    fake.edit(RSG, "ResourceScalingGroup", "default", "pd-cluster", |g| {
        g["spec"]["scalingStrategy"]["groupConfig"]["replicas"] = json!(1)
    });
    reconcile_stored(&fake, &ctx).await;
    assert_eq!(
        fake.take_writes(),
        [STATUS.to_owned()],
        "nothing is deleted"
    );
    let stalled = condition(&fake, "Stalled");
    assert_eq!(stalled["status"], "True");
    assert_eq!(stalled["reason"], "TemplateMissing");
}

/// Generated clones of a LeaderWorkerSet validate against the upstream
/// LeaderWorkerSet CRD (Deployment and StatefulSet have no CRD to check
/// against: they are built into the API server).
#[tokio::test]
async fn leader_worker_set_clones_match_the_upstream_schema() {
    let Some(dir) = upstream_crds("leader_worker_set_clones_match_the_upstream_schema") else {
        return;
    };
    let schemas = upstream_schemas(&dir);
    let schema = &schemas[&(
        "leaderworkerset.x-k8s.io/v1".to_owned(),
        "LeaderWorkerSet".to_owned(),
    )];
    let fake = FakeApi::new();
    let ctx = fake.context();
    let lws = json!({
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "decode", "namespace": "default", "labels": {"app": "decode"}},
        "spec": {"replicas": 1, "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {"size": 2,
                "leaderTemplate": {"metadata": {"labels": {"role": "leader"}},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm", "command": ["ray", "start", "--head"]}]}},
                "workerTemplate": {"spec": {"containers": [{"name": "vllm", "image": "vllm"}]}}}},
        "status": {"readyReplicas": 1},
    });
    fake.insert(lws);
    let group = json!({
        "apiVersion": RSG, "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd-cluster", "namespace": "default"},
        "spec": {"targetResources": [{"name": "decode", "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}],
            "scalingStrategy": {"type": "GroupReplication", "groupConfig": {"groupNamePrefix": "unit", "replicas": 3}}}
    });
    let (admitted, _) = tandem::admission::admit(
        tandem::admission::Kind::ResourceScalingGroup,
        "default",
        &group,
        None,
        &tandem::admission::lookup::Blind,
    )
    .unwrap();
    fake.insert(admitted);
    reconcile_stored(&fake, &ctx).await;
    let calls = fake.take_calls();
    let applied: Vec<&Value> = calls
        .iter()
        .filter(|c| c.method == "PATCH" && c.path.contains("/leaderworkersets/"))
        .filter_map(|c| c.body())
        .collect();
    assert_eq!(applied.len(), 3, "the original's labels and two clones");
    for object in applied.iter().skip(1) {
        let errors = schema.errors(object);
        assert!(
            errors.is_empty(),
            "{}: {errors:#?}",
            object["metadata"]["name"]
        );
    }
    let clone = fake
        .get(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "default",
            "unit-02-decode",
        )
        .unwrap();
    let template = &clone["spec"]["leaderWorkerTemplate"];
    assert_eq!(
        template["leaderTemplate"]["metadata"]["labels"]["resourcescalinggroup.com/group"],
        "unit-02"
    );
    assert_eq!(
        template["workerTemplate"]["metadata"]["labels"]["resourcescalinggroup.com/group"],
        "unit-02"
    );
    // The original's applied labels are a partial object; merged into the
    // stored one it still validates.
    let original = fake
        .get(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "default",
            "decode",
        )
        .unwrap();
    let mut stored = original.clone();
    for server_set in ["uid", "resourceVersion", "generation", "creationTimestamp"] {
        stored["metadata"]
            .as_object_mut()
            .unwrap()
            .remove(server_set);
    }
    stored.as_object_mut().unwrap().remove("status");
    assert!(
        schema.errors(&stored).is_empty(),
        "{:#?}",
        schema.errors(&stored)
    );
    assert_eq!(
        original["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"],
        json!({"role": "leader", "resourcescalinggroup.com/name": "pd-cluster",
               "resourcescalinggroup.com/group": "unit-00"})
    );
}

/// A group deleted while its reconcile runs (the cache not showing it yet):
/// the status write answers 404, which ends the reconcile quietly instead of
/// as a failure retried against an object that is gone.
#[tokio::test]
async fn a_group_gone_before_its_status_is_written_ends_the_reconcile_quietly() {
    let fake = FakeApi::new();
    let ctx = fake.context();
    store_world(&fake, 1);
    let stored = fake
        .get(RSG, "ResourceScalingGroup", "default", "pd-cluster")
        .expect("group stored");
    let rsg: ResourceScalingGroup = serde_json::from_value(stored).unwrap();
    fake.caught_up().await;
    fake.hold_watches("resourcescalinggroups");
    fake.remove(RSG, "ResourceScalingGroup", "default", "pd-cluster");
    fake.take_calls();

    let outcome = reconcile(Arc::new(rsg), ctx.clone()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        fake.take_writes().contains(&STATUS.to_owned()),
        "the status write was tried and found the group gone"
    );
}
