//! The in-memory API server (`tests/harness/src/fake_api`) behaves like the real
//! one where Tandem depends on it. These tests talk to it over HTTP with a
//! kube client, as Tandem does.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use harness::fake_api::FakeApi;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};

fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels}, "data": {"k": "v"}}))
    .unwrap()
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event within 5 s")
        .expect("the watch goes on")
        .expect("a readable event")
}

fn described(event: &WatchEvent<ConfigMap>) -> String {
    match event {
        WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(e) => format!("ERROR {} {}", e.code, e.reason),
    }
}

#[tokio::test]
async fn a_watch_resumes_from_a_resource_version_and_a_too_old_one_is_gone() {
    let fake = FakeApi::new();
    let maps: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let a = maps
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();
    let after_a = a.metadata.resource_version.clone().unwrap();
    maps.create(&PostParams::default(), &config_map("b", json!({})))
        .await
        .unwrap();

    // Resuming from a's version replays b, then follows new changes.
    let params = WatchParams {
        bookmarks: false,
        ..Default::default()
    };
    let mut stream = maps.watch(&params, &after_a).await.unwrap().boxed();
    assert_eq!(described(&next_event(&mut stream).await), "ADDED b");
    maps.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(described(&next_event(&mut stream).await), "DELETED a");

    // Once the history no longer reaches back that far: 410 Expired.
    fake.keep_history(1);
    let mut stale = maps.watch(&params, &after_a).await.unwrap().boxed();
    assert_eq!(
        described(&next_event(&mut stale).await),
        "ERROR 410 Expired"
    );
}

#[tokio::test]
async fn a_watch_sends_bookmarks_and_leaving_its_selector_is_a_deletion() {
    let fake = FakeApi::with_bookmarks_every(Duration::from_millis(100));
    let maps: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let list = maps.list(&ListParams::default()).await.unwrap();
    let version = list.metadata.resource_version.unwrap();
    let mut params = WatchParams::default().labels("tier=serving");
    params.bookmarks = true;
    let mut stream = maps.watch(&params, &version).await.unwrap().boxed();
    maps.create(
        &PostParams::default(),
        &config_map("other", json!({"tier": "batch"})),
    )
    .await
    .unwrap();
    maps.create(
        &PostParams::default(),
        &config_map("m", json!({"tier": "serving"})),
    )
    .await
    .unwrap();
    assert_eq!(described(&next_event(&mut stream).await), "ADDED m");
    maps.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"tier": "batch"}}})),
    )
    .await
    .unwrap();
    assert_eq!(
        described(&next_event(&mut stream).await),
        "DELETED m",
        "an object that stops matching leaves the watch"
    );
    let bookmark = next_event(&mut stream).await;
    assert!(
        described(&bookmark).starts_with("BOOKMARK "),
        "{}",
        described(&bookmark)
    );
}

#[tokio::test]
async fn a_list_comes_in_pages_when_the_client_asks_for_them() {
    let fake = FakeApi::new();
    let maps: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    for n in 0..7 {
        let labels = if n % 2 == 0 {
            json!({"even": "yes"})
        } else {
            json!({})
        };
        maps.create(
            &PostParams::default(),
            &config_map(&format!("m{n}"), labels),
        )
        .await
        .unwrap();
    }
    let names = |list: &kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        list.items
            .iter()
            .map(|m| m.metadata.name.clone().unwrap())
            .collect()
    };

    // Three at a time: every page names the first page's version, and the
    // last has no continue token.
    let first = maps.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(names(&first), ["m0", "m1", "m2"]);
    let version = first.metadata.resource_version.clone();
    let token = first.metadata.continue_.clone().expect("a continue token");
    maps.create(&PostParams::default(), &config_map("m7", json!({})))
        .await
        .unwrap();
    let second = maps
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["m3", "m4", "m5"]);
    assert_eq!(second.metadata.resource_version, version);
    let token = second.metadata.continue_.clone().expect("a continue token");
    let last = maps
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&last), ["m6", "m7"]);
    assert_eq!(last.metadata.continue_.as_deref().unwrap_or(""), "");

    // Pages count only the objects the selector selects; a whole page needs
    // no token.
    let even = maps
        .list(&ListParams::default().labels("even=yes").limit(2))
        .await
        .unwrap();
    assert_eq!(names(&even), ["m0", "m2"]);
    let token = even.metadata.continue_.clone().expect("a continue token");
    let rest = maps
        .list(
            &ListParams::default()
                .labels("even=yes")
                .limit(2)
                .continue_token(&token),
        )
        .await
        .unwrap();
    assert_eq!(names(&rest), ["m4", "m6"]);
    assert_eq!(rest.metadata.continue_.as_deref().unwrap_or(""), "");
    let all = maps.list(&ListParams::default().limit(8)).await.unwrap();
    assert_eq!(all.items.len(), 8);
    assert_eq!(all.metadata.continue_.as_deref().unwrap_or(""), "");

    // A token the server did not hand out is a 400.
    let refused = maps
        .list(&ListParams::default().limit(3).continue_token("nonsense"))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(status) if status.code == 400),
        "{refused}"
    );

    // kube-runtime's watcher lists in pages (of 2 here; 500 by default) and
    // its store holds every object.
    fake.take_calls();
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(maps.clone(), watcher::Config::default().page_size(2)),
    )
    .applied_objects()
    .boxed();
    tokio::spawn(stream.try_for_each(|_| async { Ok(()) }));
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 8);
    let continued = fake
        .take_calls()
        .iter()
        .filter(|c| c.method == "GET" && c.query.contains("continue="))
        .count();
    assert_eq!(
        continued, 3,
        "8 objects in pages of 2: a first page and 3 continued"
    );
}

#[tokio::test]
async fn a_kube_runtime_reflector_follows_the_server() {
    let fake = FakeApi::new();
    let maps: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    maps.create(&PostParams::default(), &config_map("before", json!({})))
        .await
        .unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(maps.clone(), watcher::Config::default()))
        .applied_objects()
        .boxed();
    tokio::spawn(stream.try_for_each(|_| async { Ok(()) }));
    reader.wait_until_ready().await.unwrap();
    maps.create(&PostParams::default(), &config_map("after", json!({})))
        .await
        .unwrap();
    maps.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    let names = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let mut names: Vec<String> = reader
                .state()
                .iter()
                .map(|m| m.metadata.name.clone().unwrap())
                .collect();
            names.sort();
            if names == ["after"] {
                return names;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the store catches up");
    assert_eq!(names, ["after"]);
}

fn deployment(cpu: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "epp", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "epp"}},
            "template": {"metadata": {"labels": {"app": "epp"}}, "spec": {"containers": [{
                "name": "epp", "image": "epp:v1", "args": [], "ports": [{"containerPort": 9002}],
                "resources": {"requests": {"cpu": cpu, "memory": "1024Mi", "nvidia.com/gpu": 1}}}]}}}})
}

#[tokio::test]
async fn an_apply_conflict_without_force_is_409_and_force_takes_the_field() {
    let fake = FakeApi::new();
    let deployments: Api<Deployment> = Api::namespaced(fake.client(), "default");
    deployments
        .patch(
            "epp",
            &PatchParams::apply("tandem"),
            &Patch::Apply(deployment(json!("1"))),
        )
        .await
        .unwrap();
    let mut other = deployment(json!("1"));
    other["spec"]["replicas"] = json!(5);
    let refused = deployments
        .patch("epp", &PatchParams::apply("kubectl"), &Patch::Apply(&other))
        .await
        .unwrap_err();
    match refused {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert!(
                status
                    .message
                    .contains("conflict with \"tandem\": .spec.replicas"),
                "{}",
                status.message
            );
        }
        other => panic!("expected a 409, got {other}"),
    }
    let forced = deployments
        .patch(
            "epp",
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().replicas, Some(5));

    // A field only the applier owned goes when it stops sending it; one
    // another manager took stays.
    let mut fewer = deployment(json!("1"));
    fewer["spec"].as_object_mut().unwrap().remove("replicas");
    fewer["metadata"]["labels"] = json!({"team": "serving"});
    deployments
        .patch(
            "epp",
            &PatchParams::apply("tandem").force(),
            &Patch::Apply(&fewer),
        )
        .await
        .unwrap();
    let mut without_label = fewer.clone();
    without_label["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    let stored = deployments
        .patch(
            "epp",
            &PatchParams::apply("tandem").force(),
            &Patch::Apply(&without_label),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.spec.unwrap().replicas,
        Some(5),
        "kubectl owns the replicas now"
    );
    assert_eq!(stored.metadata.labels, None, "tandem's own label went");
    let managers: Vec<String> = stored
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["kubectl", "tandem"]);
}

#[tokio::test]
async fn built_in_kinds_are_stored_in_canonical_form_with_their_defaults() {
    let fake = FakeApi::new();
    let deployments: Api<Deployment> = Api::namespaced(fake.client(), "default");
    let stored = deployments
        .patch(
            "epp",
            &PatchParams::apply("tandem"),
            &Patch::Apply(deployment(json!(0.5))),
        )
        .await
        .unwrap();
    let stored = serde_json::to_value(stored).unwrap();
    let container = &stored["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["resources"]["requests"],
        json!({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"})
    );
    assert_eq!(container["imagePullPolicy"], "IfNotPresent");
    assert_eq!(container["ports"][0]["protocol"], "TCP");
    assert!(
        container.get("args").is_none(),
        "an empty list is not stored"
    );
    assert_eq!(stored["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(
        stored["spec"]["template"]["spec"]["restartPolicy"],
        "Always"
    );

    let services: Api<Service> = Api::namespaced(fake.client(), "default");
    let service: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "epp", "namespace": "default"},
        "spec": {"selector": {"app": "epp"}, "ports": [{"name": "grpc", "port": 9002}]}}))
    .unwrap();
    let service = serde_json::to_value(
        services
            .create(&PostParams::default(), &service)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(service["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 9002);
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert!(service["spec"]["clusterIP"].is_string());
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict_and_a_no_op_writes_nothing() {
    let fake = FakeApi::new();
    let maps: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let created = maps
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();
    let mut stale = created.clone();
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .unwrap();
    stale.data = Some([("k".to_owned(), "x".to_owned())].into());
    let refused = maps
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref s) if s.code == 409),
        "{refused}"
    );

    let version = fake.version();
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        fake.version(),
        version,
        "the same value again changes nothing"
    );
}

#[tokio::test]
async fn finalizers_hold_an_object_and_owners_take_their_dependents() {
    let fake = FakeApi::new();
    let maps: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
    let mut held = config_map("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let owner = maps.create(&PostParams::default(), &held).await.unwrap();
    let mut dependent = config_map("dependent", json!({}));
    dependent.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "held".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    maps.create(&PostParams::default(), &dependent)
        .await
        .unwrap();

    maps.delete("held", &DeleteParams::background())
        .await
        .unwrap();
    let marked = maps.get("held").await.unwrap();
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "marked, not gone"
    );
    assert!(
        maps.get_opt("dependent").await.unwrap().is_some(),
        "its owner still exists"
    );

    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        maps.get_opt("held").await.unwrap().is_none(),
        "released by its last finalizer"
    );
    assert!(
        maps.get_opt("dependent").await.unwrap().is_none(),
        "collected with its owner"
    );
}

#[tokio::test]
async fn a_deleted_namespace_empties_and_goes() {
    let fake = FakeApi::new();
    let client = fake.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
    )
    .unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let mut held = config_map("held", json!({}));
    held.metadata.namespace = Some("team".into());
    held.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    maps.create(&PostParams::default(), &held).await.unwrap();
    let mut free = config_map("free", json!({}));
    free.metadata.namespace = Some("team".into());
    maps.create(&PostParams::default(), &free).await.unwrap();

    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    assert!(maps.get_opt("free").await.unwrap().is_none());
    let terminating = namespaces.get("team").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    let mut late = config_map("late", json!({}));
    late.metadata.namespace = Some("team".into());
    let refused = maps
        .create(&PostParams::default(), &late)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref s) if s.code == 403),
        "{refused}"
    );

    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    assert!(
        namespaces.get_opt("team").await.unwrap().is_none(),
        "empty, so gone"
    );
}

#[tokio::test]
async fn leader_worker_sets_get_a_leader_and_workers_per_group() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let lws = json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "svc-decode-0", "namespace": "default"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3,
            "leaderTemplate": {"metadata": {"labels": {"role": "leader"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}},
            "workerTemplate": {"metadata": {"labels": {"role": "worker"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}});
    fake.insert(lws);
    let pods: Api<Pod> = Api::namespaced(fake.client(), "default");
    let names = |list: kube::core::ObjectList<Pod>| -> Vec<String> {
        list.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    let listed = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        names(listed.clone()),
        ["svc-decode-0-0", "svc-decode-0-0-1", "svc-decode-0-0-2"]
    );
    let leader = &listed.items[0].metadata.labels.clone().unwrap();
    assert_eq!(leader["role"], "leader");
    assert_eq!(leader["leaderworkerset.sigs.k8s.io/worker-index"], "0");

    assert_eq!(
        fake.set_ready_matching(
            "default",
            "leaderworkerset.sigs.k8s.io/name=svc-decode-0",
            true
        ),
        3
    );
    let status = fake
        .get(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "default",
            "svc-decode-0",
        )
        .unwrap();
    assert_eq!(status["status"]["readyReplicas"], 1);

    // A new template recreates the group, not ready.
    fake.edit(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "default",
        "svc-decode-0",
        |l| {
            l["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] =
                json!("i:2");
        },
    );
    let recreated = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(recreated.items.len(), 3);
    assert!(
        recreated
            .items
            .iter()
            .all(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Pending"))
    );
    let status = fake
        .get(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "default",
            "svc-decode-0",
        )
        .unwrap();
    assert_eq!(status["status"]["readyReplicas"], 0);
}

#[tokio::test]
async fn writes_of_tandem_kinds_pass_its_webhooks_and_a_denial_is_worded_as_the_api_server_words_it()
 {
    let webhook = harness::start_server(|_| {}).await;
    let fake = FakeApi::new();
    fake.register_webhooks(
        &format!("https://{}", webhook.server.webhook_addr),
        &webhook.ca_pem,
    );
    let services: Api<tandem::api::InferenceService> = Api::namespaced(fake.client(), "default");
    let mut service =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story1-monolithic.yaml"))
            .remove(0);
    service["metadata"]["namespace"] = json!("default");

    // The mutating webhook's defaults are stored.
    let created = services
        .create(
            &PostParams::default(),
            &serde_json::from_value(service.clone()).unwrap(),
        )
        .await
        .unwrap();
    let created = serde_json::to_value(created).unwrap();
    assert_eq!(
        created["spec"]["upgradeStrategy"]["type"], "RollingUpdate",
        "{created}"
    );

    // A denial reaches the client as the API server words it.
    let name = service["metadata"]["name"].as_str().unwrap().to_owned();
    let refused = services
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/roles/0/replicas", "value": -1}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("expected a denial, got {refused}");
    };
    assert!(
        status.message.starts_with(
            "admission webhook \"validate.inferenceservices.fusioninfer.io\" denied the request: spec.roles[0].replicas"
        ),
        "{}",
        status.message
    );
    assert!(status.code >= 400, "{}", status.code);

    // With the webhook gone, the validating one fails closed.
    webhook.server.shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let unreachable = services
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = unreachable else {
        panic!("expected a failure, got {unreachable}");
    };
    assert_eq!(status.code, 500);
    assert!(
        status
            .message
            .contains("failed calling webhook \"validate.inferenceservices.fusioninfer.io\""),
        "{}",
        status.message
    );
}
