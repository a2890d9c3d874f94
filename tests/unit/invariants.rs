//! The real-control-plane scenarios' invariants (`tests/harness/src/scenario.rs`)
//! fed streams that break them: each must fail on the defect it exists to
//! catch, or it proves nothing. The audit events are shaped as
//! kube-apiserver v1.36's audit log writes them (`audit.k8s.io/v1` Event,
//! one JSON line each).

use harness::control_plane::TANDEM_USER;
use harness::request::Request;
use harness::rollout::RolloutBudget;
use harness::scenario::{
    Floor, HEALTH_LABEL, QuietWindow, in_motion, leaders_without_workers, quiet_window, reads_in,
    reconciled_lines, refusals, repeated_writes, replicas_without_leaders, short_of_pods,
};
use harness::status_patches::status_patches;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tandem::plan::shared::children::LWS_WORKER_INDEX;

fn audit(user: &str, verb: &str, resource: &str, namespace: &str, code: u16) -> Value {
    json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
        "stage": "ResponseComplete", "verb": verb,
        "requestURI": format!("/api/v1/namespaces/{namespace}/{resource}/x"),
        "user": {"username": user},
        "objectRef": {"resource": resource, "namespace": namespace, "name": "x",
            "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": code,
            "message": if code == 403 {
                format!("{resource} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\"")
            } else { String::new() }},
        "stageTimestamp": "2026-11-27T00:00:00.000000Z",
    })
}

fn requests(events: &[Value]) -> Vec<Request> {
    events.iter().filter_map(Request::audited).collect()
}

#[test]
fn a_get_or_list_of_tandem_in_the_namespace_is_a_read() {
    let steady = [
        audit(TANDEM_USER, "patch", "leaderworkersets", "ns", 200),
        audit(TANDEM_USER, "watch", "pods", "ns", 200),
        audit("e2e-admin", "get", "pods", "ns", 200),
        audit(TANDEM_USER, "get", "pods", "other", 200),
    ];
    assert_eq!(reads_in(&requests(&steady), "ns"), Vec::<String>::new());
    // The defect the invariant exists for: a reconcile that reads the API
    // server. Before, the audit reader dropped every read, so this was never seen.
    let reading = [
        audit(TANDEM_USER, "get", "leaderworkersets", "ns", 200),
        audit(TANDEM_USER, "list", "pods", "ns", 200),
    ];
    assert_eq!(reads_in(&requests(&reading), "ns").len(), 2);
}

#[test]
fn a_refused_read_or_watch_fails_like_a_refused_write() {
    let granted = [audit(TANDEM_USER, "list", "pods", "", 200)];
    assert!(refusals(&requests(&granted)).is_empty());
    for verb in ["get", "list", "watch", "patch"] {
        let refused = [audit(TANDEM_USER, verb, "nodes", "", 403)];
        assert_eq!(refusals(&requests(&refused)).len(), 1, "{verb}");
    }
    // Someone else's refusal is not Tandem's.
    let theirs = [audit("e2e-admin", "get", "nodes", "", 403)];
    assert!(refusals(&requests(&theirs)).is_empty());
}

#[test]
fn a_write_that_answers_a_version_already_seen_changed_nothing() {
    let write = |version: &str| {
        let mut event = audit(TANDEM_USER, "patch", "leaderworkersets", "ns", 200);
        event["responseObject"] = json!({"metadata": {"resourceVersion": version}});
        event
    };
    assert!(repeated_writes(&requests(&[write("1"), write("2")])).is_empty());
    assert_eq!(
        repeated_writes(&requests(&[write("1"), write("2"), write("2")])).len(),
        1
    );
    // The last finalizer removed from an object being deleted: the API
    // server deletes it and answers with its last version, which the status
    // write before had made. Not a write that changed nothing.
    let mut status = write("2");
    status["responseObject"]["metadata"]["deletionTimestamp"] = json!("2026-11-27T18:15:14Z");
    let mut finalizers = status.clone();
    finalizers["requestObject"] = json!({"metadata": {"finalizers": [], "resourceVersion": "2"}});
    assert!(repeated_writes(&requests(&[write("1"), status.clone(), finalizers])).is_empty());
    assert_eq!(
        repeated_writes(&requests(&[write("1"), status.clone(), status])).len(),
        1,
        "a status write repeated on an object being deleted still counts"
    );
}

fn pod(name: &str, role: &str, set: &str, size: usize, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name,
            "labels": {"fusioninfer.io/service": "svc", "fusioninfer.io/role-name": role,
                "leaderworkerset.sigs.k8s.io/name": set, "fusioninfer.io/traffic": "serving"},
            "annotations": {"leaderworkerset.sigs.k8s.io/size": size.to_string()}},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    }))
    .expect("a pod")
}

fn service(decode: i64) -> Value {
    json!({"metadata": {"name": "svc"},
        "spec": {"roles": [{"name": "decode", "replicas": decode}]}})
}

#[test]
fn the_floor_fails_when_every_pod_of_a_role_that_asks_for_replicas_is_gone() {
    let mut floor = Floor::default();
    floor.service(&service(1));
    let leader = pod("svc-decode-0-0", "decode", "svc-decode-0", 2, true);
    let worker = pod("svc-decode-0-0-1", "decode", "svc-decode-0", 2, true);
    floor.pod(&leader);
    floor.pod(&worker);
    floor.check();
    assert!(floor.violations.is_empty(), "{:?}", floor.violations);
    // A node lost: both pods go at once. The role drops out of the pods'
    // map, yet it still asks for a replica: a full outage.
    floor.pod_gone(&leader);
    floor.pod_gone(&worker);
    floor.check();
    assert_eq!(floor.violations.len(), 1, "{:?}", floor.violations);
}

#[test]
fn the_floor_fails_when_a_multi_node_replica_misses_one_ready_pod() {
    let mut floor = Floor::default();
    floor.service(&service(1));
    floor.pod(&pod("a", "decode", "svc-decode-0", 2, true));
    floor.pod(&pod("b", "decode", "svc-decode-0", 2, true));
    floor.check();
    floor.pod(&pod("b", "decode", "svc-decode-0", 2, false));
    floor.check();
    assert_eq!(floor.violations.len(), 1, "{:?}", floor.violations);
}

#[test]
fn the_floor_holds_when_the_role_is_scaled_to_zero_or_its_service_deleted() {
    let mut floor = Floor::default();
    floor.service(&service(1));
    let only = pod("a", "decode", "svc-decode-0", 1, true);
    floor.pod(&only);
    floor.check();
    floor.service(&service(0));
    floor.pod_gone(&only);
    floor.check();
    assert!(floor.violations.is_empty(), "{:?}", floor.violations);

    let mut deleted = Floor::default();
    deleted.service(&service(1));
    deleted.pod(&only);
    deleted.check();
    deleted.service_gone("svc");
    deleted.pod_gone(&only);
    deleted.check();
    assert!(deleted.violations.is_empty(), "{:?}", deleted.violations);
}

#[test]
fn still_reconciling_counts_the_scenarios_own_object_only() {
    let log = "\
2026-11-27T00:00:00Z DEBUG tandem::reconcile: reconciled object=InferenceService.v1alpha1.fusioninfer.io/svc.other
2026-11-27T00:00:01Z DEBUG tandem::reconcile: reconciled object=ScaleView.v1alpha1.fusioninfer.io/svc.ns
2026-11-27T00:00:02Z DEBUG tandem::reconcile: reconciled object=InferenceService.v1alpha1.fusioninfer.io/svc-2.ns
";
    // Another scenario's work (another namespace, kind or name) is no sign
    // that this object is still reconciled.
    assert_eq!(reconciled_lines(log, "InferenceService", "svc", "ns"), 0);
    let ours = format!(
        "{log}2026-11-27T00:00:03Z DEBUG tandem::reconcile: reconciled object=InferenceService.v1alpha1.fusioninfer.io/svc.ns\n"
    );
    assert_eq!(reconciled_lines(&ours, "InferenceService", "svc", "ns"), 1);
}

/// Decode replica `index` at `revision`: one pod, ready or not, being
/// deleted or not.
fn replica(index: u32, revision: &str, ready: bool, deleting: bool) -> Pod {
    let mut pod = json!({
        "metadata": {"name": format!("svc-decode-{index}-0"),
            "labels": {"fusioninfer.io/role-name": "decode",
                "fusioninfer.io/replica-index": index.to_string(),
                "fusioninfer.io/revision": revision}},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    });
    if deleting {
        pod["metadata"]["deletionTimestamp"] = json!("2026-11-27T00:00:00Z");
    }
    serde_json::from_value(pod).expect("a pod")
}

/// A budget of 3 decode replicas, maxUnavailable 1, maxSurge 1, partition
/// 1, over three ready replicas at revision `a`.
fn budget() -> RolloutBudget {
    let mut budget = RolloutBudget::new("decode", 3, 1, 1, 1, ["a".to_owned()].into());
    for index in 0..3 {
        budget.pod(&replica(index, "a", true, false), false);
    }
    budget.check();
    budget
}

#[test]
fn a_rollout_within_its_budget_breaks_nothing() {
    let mut b = budget();
    // A surge replica at b, ready; replica 2 replaced in place.
    b.pod(&replica(3, "b", false, false), true);
    b.pod(&replica(3, "b", true, false), true);
    b.pod(&replica(2, "a", true, true), true);
    b.pod_gone(&replica(2, "a", true, true), true);
    b.pod(&replica(2, "b", true, false), true);
    assert_eq!(b.violations, Vec::<String>::new());
    assert_eq!((b.most_replicas, b.most_unavailable), (4, 0));
}

#[test]
fn a_rollout_beyond_max_surge_fails() {
    let mut b = budget();
    b.pod(&replica(3, "b", false, false), true);
    b.pod(&replica(4, "b", false, false), true);
    assert_eq!(b.violations.len(), 1, "{:?}", b.violations);
    assert!(b.violations[0].starts_with("5 replicas > 3 desired + 1 maxSurge"));
}

#[test]
fn a_replica_terminating_still_counts_against_max_surge() {
    let mut b = budget();
    b.pod(&replica(3, "b", true, false), true);
    // Replica 2 is being deleted (it holds its GPUs until its pod is gone)
    // when a second new replica comes: 5 replicas.
    b.pod(&replica(2, "a", false, true), true);
    assert!(b.violations.is_empty(), "{:?}", b.violations);
    b.pod(&replica(4, "b", false, false), true);
    assert_eq!(b.violations.len(), 1, "{:?}", b.violations);
    assert!(b.violations[0].starts_with("5 replicas"));
}

#[test]
fn a_rollout_beyond_max_unavailable_fails_and_so_does_none_serving() {
    let mut b = budget();
    b.pod(&replica(1, "a", false, true), true);
    assert!(b.violations.is_empty());
    b.pod(&replica(2, "a", false, true), true);
    assert_eq!(b.violations.len(), 1, "{:?}", b.violations);
    assert!(b.violations[0].starts_with("2 unavailable > maxUnavailable 1"));
    b.pod(&replica(0, "a", false, false), true);
    assert!(
        b.violations
            .iter()
            .any(|v| v.starts_with("no replica serving")),
        "{:?}",
        b.violations
    );
}

#[test]
fn a_replica_below_the_partition_at_the_new_revision_fails() {
    let mut b = budget();
    b.pod(&replica(0, "a", false, true), true);
    b.pod_gone(&replica(0, "a", false, true), true);
    assert!(b.violations.is_empty());
    b.pod(&replica(0, "b", false, false), true);
    assert_eq!(b.violations.len(), 1, "{:?}", b.violations);
    assert!(b.violations[0].contains("below partition 1"));
}

#[test]
fn a_quiet_check_waits_for_a_loading_terminating_or_unseen_pod_only() {
    let at = |node: Option<&str>, ready: bool| {
        let mut pod = pod("svc-decode-0-0", "decode", "svc-decode-0", 1, ready);
        pod.spec = Some(
            serde_json::from_value(json!({"containers": [], "nodeName": node})).expect("a spec"),
        );
        pod
    };
    // Bound and loading: kwok makes it Ready after its load delay, and
    // Tandem's status follows. This is the race CI hit twice.
    assert!(in_motion(&at(Some("node-0"), false)));
    let mut terminating = at(Some("node-0"), true);
    terminating.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-11-27T00:00:00Z")).expect("a time"));
    assert!(in_motion(&terminating));
    // Not yet looked at by kube-scheduler: it binds it, or says why not.
    assert!(in_motion(&at(None, false)));
    // At rest: Ready, unschedulable (the scheduler's verdict, no node),
    // held unready on purpose.
    assert!(!in_motion(&at(Some("node-0"), true)));
    let mut unschedulable = at(None, false);
    unschedulable.status = Some(
        serde_json::from_value(json!({"conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable"}]}))
        .expect("a status"),
    );
    assert!(!in_motion(&unschedulable));
    // Volcano's pods are bound by the plane's kube-scheduler too (its
    // `volcano` profile): in motion until it has looked. A scheduler the
    // plane does not run never looks.
    let mut volcanos = at(None, false);
    volcanos.spec.as_mut().expect("a spec").scheduler_name = Some("volcano".into());
    assert!(in_motion(&volcanos));
    let mut elsewhere = at(None, false);
    elsewhere.spec.as_mut().expect("a spec").scheduler_name = Some("kai-scheduler".into());
    assert!(!in_motion(&elsewhere));
    let mut held = at(Some("node-0"), false);
    held.metadata
        .labels
        .get_or_insert_default()
        .insert(HEALTH_LABEL.into(), "unready".into());
    assert!(!in_motion(&held));
}

fn statefulset(
    name: &str,
    generation: i64,
    wanted: i32,
    status: Option<(i64, i32)>,
) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "generation": generation},
        "spec": {"replicas": wanted, "serviceName": name, "selector": {},
            "template": {"spec": {"containers": []}}},
        "status": status.map(|(observed, created)| json!({"observedGeneration": observed,
            "replicas": created})),
    }))
    .expect("a StatefulSet")
}

#[test]
fn a_quiet_window_forgives_a_write_only_when_a_pod_moved_before_it() {
    let patch = audit(TANDEM_USER, "patch", "inferenceservices", "ns", 200);
    let mut status = patch.clone();
    status["requestURI"] = json!("/api/v1/namespaces/ns/inferenceservices/x/status");
    status["objectRef"]["subresource"] = json!("status");
    let bound = audit("system:kube-scheduler", "create", "pods", "ns", 201);
    let kwok = audit("kwok", "patch", "pods", "ns", 200);
    let controller = audit(
        "system:kube-controller-manager",
        "update",
        "statefulsets",
        "ns",
        200,
    );
    let relabel = audit(TANDEM_USER, "patch", "pods", "ns", 200);
    let read =
        |lead_in: &[Value], window: &[Value]| quiet_window(&requests(lead_in), &requests(window));
    assert_eq!(read(&[], &[]), QuietWindow::Quiet);
    // Pods moving while Tandem keeps still is quiet.
    assert_eq!(
        read(&[], &[bound.clone(), kwok.clone()]),
        QuietWindow::Quiet
    );
    // What CI hit: the scheduler bound pods and kwok readied them inside
    // the window, and Tandem's status followed.
    assert!(matches!(
        read(&[], &[bound.clone(), kwok.clone(), status.clone()]),
        QuietWindow::Moved(changes) if changes.len() == 2
    ));
    // What CI hit next: kwok readied a pod just before the window, and
    // Tandem's status, paced at ten seconds for pods inside a replica,
    // followed inside it.
    assert!(matches!(
        read(std::slice::from_ref(&kwok), std::slice::from_ref(&status)),
        QuietWindow::Moved(changes) if changes.len() == 1
    ));
    // The defect: a write with nothing moved before it, or only what is
    // not a pod, or a pod Tandem itself moved; and a write that is no
    // paced status after a pod moved before the window.
    for (lead_in, window) in [
        (vec![], vec![status.clone()]),
        (vec![], vec![patch.clone()]),
        (vec![], vec![controller.clone(), status.clone()]),
        (vec![], vec![relabel.clone(), kwok.clone(), status.clone()]),
        (vec![], vec![status.clone(), bound]),
        (vec![kwok.clone()], vec![patch.clone()]),
        (vec![relabel, controller], vec![status.clone()]),
    ] {
        assert!(
            matches!(read(&lead_in, &window), QuietWindow::Unprompted(_)),
            "{lead_in:#?} {window:#?}"
        );
    }
}

#[test]
fn a_quiet_check_waits_for_the_pods_a_statefulset_has_not_created_yet() {
    // What CI hit: LWS wrote the StatefulSet of a new replica, and
    // kube-controller-manager, busy elsewhere, created its pod 18 s later.
    let fresh = statefulset("svc-decode-1", 1, 1, None);
    assert!(
        short_of_pods(&fresh).is_some_and(|why| why.contains("not observed")),
        "{:?}",
        short_of_pods(&fresh)
    );
    let seen_not_created = statefulset("svc-decode-1", 1, 1, Some((1, 0)));
    assert!(
        short_of_pods(&seen_not_created).is_some_and(|why| why.contains("0 of 1 pods")),
        "{:?}",
        short_of_pods(&seen_not_created)
    );
    let scaled = statefulset("svc-decode-1", 2, 3, Some((1, 1)));
    assert!(short_of_pods(&scaled).is_some());
    let mut deleting = statefulset("svc-decode-1", 1, 1, Some((1, 0)));
    deleting.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-11-27T00:00:00Z")).expect("a time"));
    assert_eq!(short_of_pods(&deleting), None);
    assert_eq!(
        short_of_pods(&statefulset("svc-decode-1", 2, 1, Some((2, 1)))),
        None
    );
}

#[test]
fn a_quiet_check_waits_for_the_workers_of_a_multi_node_leader() {
    // Leaders, as LWS labels them: a multi-node one, and one of a single
    // pod (no workers' StatefulSet to wait for).
    let leader = |name: &str, role: &str, set: &str, size: usize| {
        let mut pod = pod(name, role, set, size, true);
        pod.metadata
            .labels
            .get_or_insert_default()
            .insert(LWS_WORKER_INDEX.into(), "0".into());
        pod
    };
    let pods = [
        leader("svc-decode-0", "decode", "svc-decode", 2),
        leader("svc-prefill-0", "prefill", "svc-prefill", 1),
    ];
    let leaders_only = [statefulset("svc-decode", 1, 1, Some((1, 1)))];
    assert_eq!(
        leaders_without_workers(&pods, &leaders_only),
        vec!["leader svc-decode-0: no workers' StatefulSet yet".to_owned()]
    );
    let with_workers = [
        statefulset("svc-decode", 1, 1, Some((1, 1))),
        statefulset("svc-decode-0", 1, 1, Some((1, 1))),
    ];
    assert!(leaders_without_workers(&pods, &with_workers).is_empty());
}

#[test]
fn a_quiet_check_waits_for_the_leaders_a_leader_worker_set_has_not_made_yet() {
    // What CI hit: a Volcano service's LeaderWorkerSets written, and no
    // StatefulSet of theirs yet, so no pod to be in motion either.
    let replica = |name: &str, replicas: i64| -> kube::api::DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name}, "spec": {"replicas": replicas},
        }))
        .expect("a LeaderWorkerSet")
    };
    let written = [replica("svc-decode", 2), replica("svc-prefill", 0)];
    assert_eq!(
        replicas_without_leaders(&written, &[]),
        vec!["LeaderWorkerSet svc-decode: no leaders' StatefulSet yet".to_owned()]
    );
    let not_yet_scaled = [statefulset("svc-decode", 1, 1, Some((1, 1)))];
    assert!(
        replicas_without_leaders(&written, &not_yet_scaled)[0].contains("2 replicas asked"),
        "{:?}",
        replicas_without_leaders(&written, &not_yet_scaled)
    );
    let made = [statefulset("svc-decode", 2, 2, Some((2, 2)))];
    assert!(replicas_without_leaders(&written, &made).is_empty());
}

/// The in-memory API server's log and the audit log make the same
/// [`Request`] of the same request: the verb the API server resolves from
/// the method and path, the object it names, the HTTP form the fake API's
/// tests compare, and whether it writes.
#[test]
fn both_logs_make_the_same_request_of_the_same_call() {
    let cases = [
        (
            "GET",
            "/api/v1/namespaces/ns/pods",
            "",
            "list",
            "pods",
            None,
            Some("ns"),
            None,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods",
            "watch=true",
            "watch",
            "pods",
            None,
            Some("ns"),
            None,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods/p",
            "",
            "get",
            "pods",
            None,
            Some("ns"),
            Some("p"),
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/pods/p/eviction",
            "",
            "create",
            "pods",
            Some("eviction"),
            Some("ns"),
            Some("p"),
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ns/statefulsets/s/status",
            "fieldManager=tandem",
            "patch",
            "statefulsets",
            Some("status"),
            Some("ns"),
            Some("s"),
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ns/statefulsets/s",
            "dryRun=All",
            "patch",
            "statefulsets",
            None,
            Some("ns"),
            Some("s"),
        ),
        (
            "PUT",
            "/api/v1/namespaces/ns",
            "",
            "update",
            "namespaces",
            None,
            None,
            Some("ns"),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods",
            "",
            "deletecollection",
            "pods",
            None,
            Some("ns"),
            None,
        ),
        (
            "DELETE",
            "/api/v1/nodes/n",
            "",
            "delete",
            "nodes",
            None,
            None,
            Some("n"),
        ),
    ];
    for (method, path, query, verb, resource, subresource, namespace, name) in cases {
        let uri = if query.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{query}")
        };
        let event = json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "stage": "ResponseComplete", "verb": verb, "requestURI": uri,
            "user": {"username": TANDEM_USER},
            "objectRef": {"resource": resource, "subresource": subresource,
                "namespace": namespace, "name": name},
            "responseStatus": {"metadata": {}, "code": 200},
            "stageTimestamp": "2026-12-02T00:00:00.000000Z",
        });
        let audited = Request::audited(&event).expect("an audit event of a request");
        let received = Request::received(TANDEM_USER, method, path, query, None);
        for (log, request) in [("audit", &audited), ("fake API", &received)] {
            let seen = (
                request.verb.as_str(),
                request.resource.as_str(),
                request.subresource.as_deref(),
                request.namespace.as_deref(),
                request.name.as_deref(),
            );
            assert_eq!(
                seen,
                (verb, resource, subresource, namespace, name),
                "{log}: {uri}"
            );
            assert_eq!(request.line(), format!("{method} {path}"), "{log}: {uri}");
            assert_eq!(
                request.is_write(),
                method != "GET" && query != "dryRun=All",
                "{log}: {uri}"
            );
        }
    }
}

#[test]
fn a_status_patch_is_told_by_what_it_moved() {
    let patch = |user: &str, name: &str, status: Value| {
        let mut event = audit(user, "patch", "inferenceservices", "ns", 200);
        event["objectRef"]["name"] = json!(name);
        event["objectRef"]["subresource"] = json!("status");
        event["responseObject"] = json!({"status": status});
        event
    };
    let decode = |ready_pods: i64, ready: i64, phase: &str, message: &str| {
        json!({"components": {"decode": {"readyPods": ready_pods, "totalPods": 4,
            "desiredReplicas": 1, "nodesPerReplica": 4,
            "readyReplicas": ready, "phase": phase,
            "lastUpdateTime": format!("2026-12-03T10:00:0{ready_pods}Z")}},
            "conditions": [{"type": "Ready", "status": "False", "reason": "Waiting",
                "message": message, "lastTransitionTime": "2026-12-03T10:00:00Z"}]})
    };
    let events = [
        patch(TANDEM_USER, "a", decode(0, 0, "Deploying", "0/1")),
        patch(TANDEM_USER, "a", decode(2, 0, "Deploying", "0/1")),
        // Someone else's write is not Tandem's patch.
        patch("e2e-admin", "a", decode(3, 0, "Deploying", "0/1")),
        patch(TANDEM_USER, "a", decode(4, 1, "Deploying", "1/1")),
        patch(TANDEM_USER, "a", decode(4, 1, "Running", "1/1")),
        patch(TANDEM_USER, "a", decode(4, 1, "Running", "1/1")),
        patch(TANDEM_USER, "b", decode(0, 0, "Deploying", "0/1")),
    ];
    let read = status_patches(&requests(&events));
    // In order, each with its answer's time, counts alone marked.
    let only_counts: Vec<bool> = read.timeline.iter().map(|(_, _, c)| *c).collect();
    assert_eq!(only_counts, [false, true, true, false, false, false]);
    assert_eq!(
        read.timeline[0],
        ("ns/a".to_owned(), 1_795_737_600_000, false)
    );
    let classes: Vec<(&str, usize)> = read.by_class.into_iter().collect();
    assert_eq!(
        classes,
        [
            ("counts", 1),
            ("first", 2),
            ("moved", 1),
            ("nothing", 1),
            ("pod counts", 1)
        ]
    );
    assert_eq!(read.by_field[".components.*.readyPods"], 2);
    assert_eq!(read.by_field[".conditions[Ready].message"], 1);
    assert_eq!(read.by_field[".components.*.phase"], 1);
    assert!(!read.by_field.contains_key(".components.*.lastUpdateTime"));
}

#[test]
fn a_longer_hold_replays_count_patches_into_fewer() {
    use harness::status_patches::StatusPatches;
    let at = |service: &str, seconds: i64, only_counts: bool| {
        (service.to_owned(), seconds * 1_000, only_counts)
    };
    let patches = StatusPatches {
        timeline: vec![
            at("ns/a", 0, false),
            at("ns/a", 1, true),
            at("ns/a", 2, true),
            at("ns/a", 3, false),
            at("ns/a", 20, true),
            at("ns/b", 0, false),
            at("ns/b", 4, true),
        ],
        ..Default::default()
    };
    // No hold: every patch.
    assert_eq!(patches.repaced(0, 0), 7);
    // 5 s: a's counts at 1 and 2 s ride with its phase change at 3 s; b's
    // count at 4 s is written once its hold ends.
    assert_eq!(patches.repaced(0, 5_000), 5);
    // Replayed from the fifth on: a's count at 20 s is its first.
    assert_eq!(patches.repaced(4, 5_000), 3);
}
