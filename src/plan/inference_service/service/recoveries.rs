//! A role's recovery setting run pass by pass through [`super::reconcile`]
//! (see `plan::inference_service::recovery`): a replica that keeps
//! restarting is held with no pods for a growing back-off, failed at its
//! limit, and brought back by a change of its template; the status, the
//! Events, the RollingUpdate's pace and its floor see it as not serving.

use serde_json::{Value, json};

use super::fixtures::{Cluster, condition, scaled};
use super::{InferenceService, Pass};
use crate::api::inference_service::ComponentPhase;
use crate::plan::inference_service::{recovery, status};

/// Two replicas, back-off 30 s then 60 s, failed at the third restart.
fn recovering() -> InferenceService {
    let mut value = serde_json::to_value(scaled(2, "Ordered", None)).unwrap();
    value["spec"]["roles"][0]["recovery"] =
        json!({"backoffSeconds": 30, "maxBackoffSeconds": 60, "maxRestarts": 2});
    serde_json::from_value(value).unwrap()
}

/// Replica 1's pod restarts: kubelet counts one more restart and it is not
/// ready (LWS's policy None leaves it to the kubelet).
fn restart(cluster: &mut Cluster) {
    let pod = cluster
        .pods
        .iter_mut()
        .find(|p| p["metadata"]["name"] == "qwen-inference-1-0")
        .expect("replica 1 has its pod");
    pod["status"]["conditions"][0]["status"] = json!("False");
    pod["status"]["containerStatuses"] = json!([{"name": "vllm", "restartCount": 1,
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
}

fn replica_one(pass: &Pass) -> Option<&Value> {
    pass.apply
        .iter()
        .map(|a| &a.object)
        .find(|o| o["kind"] == "LeaderWorkerSet" && o["metadata"]["name"] == "qwen-inference-1")
}

fn held_events(pass: &Pass) -> Vec<&'static str> {
    pass.events
        .iter()
        .filter(|e| ["BackOff", "ReplicaFailed", "RecoveryReset"].contains(&e.reason))
        .map(|e| e.reason)
        .collect()
}

/// Replica 1's write says why it is held.
fn assert_held_note(pass: &Pass) {
    let note = &pass
        .apply
        .iter()
        .find(|a| a.object["metadata"]["name"] == "qwen-inference-1")
        .expect("replica 1 written")
        .note;
    assert!(note.contains("held with no pods: replica 1: "), "{note}");
}

#[test]
fn a_replica_that_keeps_restarting_backs_off_fails_and_returns_when_its_template_changes() {
    let mut cluster = Cluster::new(&[]);
    let mut service = recovering();
    let first = cluster.pass(&service, 0);
    let lws = replica_one(&first).unwrap();
    assert_eq!(lws["spec"]["leaderWorkerTemplate"]["restartPolicy"], "None");
    assert!(lws["metadata"]["annotations"][recovery::RECORD].is_null());
    service.status = Some(first.status);

    let mut waits = Vec::new();
    let mut events = Vec::new();
    let mut at = 10;
    loop {
        restart(&mut cluster);
        let counted = cluster.pass(&service, at);
        events.extend(held_events(&counted));
        let lws = replica_one(&counted).expect("the count is written");
        assert_eq!(lws["spec"]["replicas"], 0, "held with no pods");
        assert_held_note(&counted);
        assert!(
            cluster
                .pods
                .iter()
                .all(|p| p["metadata"]["name"] != "qwen-inference-1-0"),
            "its pods are gone"
        );
        let component = &counted.status.components["inference"];
        assert_eq!(component.failing_replicas, 1);
        service.status = Some(counted.clone().status);
        // An unchanged world writes nothing, and the hold stays.
        let again = cluster.pass(&service, at + 1);
        assert!(again.apply.is_empty(), "{:?}", again.apply);
        assert!(held_events(&again).is_empty());
        service.status = Some(again.status);
        if component.failed_replicas > 0 {
            assert_eq!(counted.requeue, None, "a failed replica waits for a change");
            break;
        }
        let wait = counted.requeue.expect("look again when the back-off ends");
        waits.push(wait.as_secs());
        assert_eq!(
            condition(&service, status::DEGRADED).1,
            status::REPLICA_FAILING
        );
        // The back-off ends: the replica is recreated.
        at += i64::try_from(wait.as_secs()).unwrap();
        let back = cluster.pass(&service, at);
        assert_eq!(replica_one(&back).unwrap()["spec"]["replicas"], 1);
        service.status = Some(back.status);
        at += 5;
    }
    assert_eq!(waits, [30, 60]);
    assert_eq!(events, ["BackOff", "BackOff", "ReplicaFailed"]);
    let failed = &service.status.as_ref().unwrap().components["inference"];
    assert_eq!(failed.phase, ComponentPhase::Failed);
    assert_eq!(failed.ready_replicas, 1);
    assert_eq!(
        condition(&service, "Failed"),
        ("True".into(), "ComponentFailed".into())
    );
    assert_eq!(
        condition(&service, status::DEGRADED),
        ("True".into(), status::REPLICA_FAILED.into())
    );
    assert_eq!(condition(&service, "Ready").1, status::REPLICA_FAILED);
    // An hour later it is still held, and nothing is written.
    let later = cluster.pass(&service, at + 3600);
    assert!(later.apply.is_empty(), "{:?}", later.apply);

    // A new image: the RollingUpdate replaces the failed replica first
    // (it serves nothing), and its floor keeps the ready one until the
    // new one is ready: the failed replica is not counted as serving.
    let mut value = serde_json::to_value(&service).unwrap();
    value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("v2");
    let mut fixed: InferenceService = serde_json::from_value(value).unwrap();
    cluster.loading = true;
    let moved = cluster.pass(&fixed, at + 3601);
    let revisions = |pass: &Pass| -> Vec<(String, i64)> {
        pass.apply
            .iter()
            .filter(|a| a.object["kind"] == "LeaderWorkerSet")
            .map(|a| {
                (
                    a.object["metadata"]["name"].as_str().unwrap().to_owned(),
                    a.object["spec"]["replicas"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(revisions(&moved), [("qwen-inference-1".to_owned(), 1)]);
    assert_eq!(held_events(&moved), ["RecoveryReset"]);
    let record = replica_one(&moved).unwrap()["metadata"]["annotations"][recovery::RECORD]
        .as_str()
        .map(|r| serde_json::from_str::<recovery::Record>(r).unwrap());
    assert_eq!(record.map(|r| (r.restarts, r.failed)), Some((0, false)));
    fixed.status = Some(moved.status);
    let waiting = cluster.pass(&fixed, at + 3602);
    assert!(
        revisions(&waiting).is_empty(),
        "replica 0 stays while the new replica loads: {:?}",
        revisions(&waiting)
    );
    assert_eq!(
        fixed.status.as_ref().unwrap().components["inference"].failed_replicas,
        0
    );
}

/// Without a recovery setting nothing is recorded or held: LWS recreates
/// the group itself, at once.
#[test]
fn without_a_recovery_setting_a_restarting_replica_is_left_to_leader_worker_set() {
    let mut cluster = Cluster::new(&[]);
    let service = scaled(2, "Ordered", None);
    cluster.pass(&service, 0);
    restart(&mut cluster);
    let pass = cluster.pass(&service, 10);
    assert!(replica_one(&pass).is_none(), "{:?}", pass.apply);
    assert!(held_events(&pass).is_empty());
    assert_eq!(pass.status.components["inference"].failed_replicas, 0);
}
