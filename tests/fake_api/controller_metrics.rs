//! The controllers' metrics on `/metrics`, read from the real `tandem serve`
//! binary against the in-memory API server (`tests/harness/src/fake_api`): after
//! a scale-up and a drift repair they show the reconciles, every request
//! sent (equal, verb by verb and kind by kind, to what the API server saw),
//! the objects cached and the decisions taken. None of this ran against a
//! real cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use harness::fake_api::FakeApi;
use harness::request::Request;
use harness::running::{Running, eventually};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tandem::api::InferenceService;
use tandem::reconcile::api_requests::RequestKind;

const LWS: &str = "leaderworkerset.x-k8s.io/v1";
const SERVICE: &str = "qwen-inference";
const SERVICES_PATH: &str = "/apis/fusioninfer.io/v1alpha1/namespaces/default/inferenceservices";

async fn metrics(tandem: &Running) -> String {
    match harness::probe(tandem.probes, "/metrics").await {
        Ok((200, text)) => text,
        other => panic!("/metrics answered {other:?}"),
    }
}

/// Every sample of `family` as (its labels, its value).
fn samples(text: &str, family: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(family)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once("} ")?;
            Some((labels.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The value of `family{labels}`, 0 when there is no such sample.
fn value(text: &str, family: &str, labels: &str) -> f64 {
    samples(text, family)
        .into_iter()
        .find(|(l, _)| l == labels)
        .map_or(0.0, |(_, v)| v)
}

/// `tandem_kube_requests_total` by (verb, kind), watches left out.
fn counted_requests(text: &str) -> BTreeMap<(String, String), u64> {
    samples(text, "tandem_kube_requests_total")
        .into_iter()
        .filter_map(|(labels, value)| {
            let rest = labels.strip_prefix("verb=\"")?;
            let (verb, rest) = rest.split_once("\",kind=\"")?;
            let kind = rest.strip_suffix('"')?;
            let count = value as u64;
            (verb != "watch").then(|| ((verb.to_owned(), kind.to_owned()), count))
        })
        .collect()
}

/// The requests the API server saw, read as Tandem reads its own.
fn seen_requests(calls: &[Request]) -> BTreeMap<(String, String), u64> {
    let mut seen = BTreeMap::new();
    for call in calls {
        let method = http::Method::from_bytes(call.method.as_bytes()).expect("a method");
        let query = (!call.query.is_empty()).then_some(call.query.as_str());
        let request = RequestKind::of(&method, &call.path, query);
        *seen.entry((request.verb, request.kind)).or_insert(0) += 1;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_after_a_scale_up_and_a_drift_repair_show_reconciles_requests_and_decisions() {
    let fake = FakeApi::new();
    fake.run_leader_worker_sets();
    let tandem = Running::start(&fake, "tandem-a").await;
    let services: Api<InferenceService> = Api::namespaced(fake.client(), "default");

    // One replica, then two: a scale-up.
    let mut service =
        harness::yaml_documents(&harness::repo_path("examples/seeds/story1-monolithic.yaml"))
            .remove(0);
    service["metadata"]["namespace"] = json!("default");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(service).expect("an InferenceService"),
        )
        .await
        .expect("created");
    eventually(&tandem, 30, "one LeaderWorkerSet", || {
        fake.list(LWS, "LeaderWorkerSet", "default").len() == 1
    })
    .await;
    services
        .patch(
            SERVICE,
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/roles/0/replicas", "value": 2}
                ]))
                .expect("a JSON Patch"),
            ),
        )
        .await
        .expect("scaled");
    eventually(&tandem, 30, "two LeaderWorkerSets", || {
        fake.list(LWS, "LeaderWorkerSet", "default").len() == 2
    })
    .await;

    // A hand edit of replica 0 is set back: a drift repair.
    let replica = format!("{SERVICE}-inference-0");
    fake.edit(LWS, "LeaderWorkerSet", "default", &replica, |l| {
        l["spec"]["replicas"] = json!(3)
    });
    eventually(&tandem, 30, "replica 0 set back to one group", || {
        fake.get(LWS, "LeaderWorkerSet", "default", &replica)
            .is_some_and(|l| l["spec"]["replicas"] == 1)
    })
    .await;

    // Every request Tandem counted is one the API server saw, and the
    // other way round, by verb and kind (watches, one long request each,
    // are left out on both sides; the test's own two writes are not
    // Tandem's). Requests still in flight (the Lease's renewals) and the
    // third reconcile's return settle within a poll or two.
    let own = |c: &Request| {
        c.path == SERVICES_PATH && c.method == "POST"
            || c.path == format!("{SERVICES_PATH}/{SERVICE}") && c.method == "PATCH"
    };
    let mut calls: Vec<Request> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = metrics(&tandem).await;
        calls.extend(fake.take_calls());
        let tandems: Vec<Request> = calls.iter().filter(|c| !own(c)).cloned().collect();
        // A reconcile is counted when it returns, which can be a moment
        // after its last request (the repair's PATCH) was seen.
        let finished = value(
            &text,
            "tandem_controller_reconciles_total",
            r#"controller="InferenceService",result="ok""#,
        );
        if counted_requests(&text) == seen_requests(&tandems) && finished >= 3.0 {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "counted {:#?}\nseen by the API server {:#?}",
            counted_requests(&text),
            seen_requests(&tandems)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    alerts_read_exported_metrics(&text);
    dashboard_reads_exported_metrics(&text);
    // The autoscaling signals, read off the service's status in the cache
    // at the scrape: the role's six states, desired at the new two.
    let of_the_role = format!(r#"namespace="default",service="{SERVICE}",role="inference","#);
    let role = |state: &str| format!(r#"{of_the_role}state="{state}""#);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = metrics(&tandem).await;
        let states: Vec<_> = samples(&text, "tandem_role_replicas")
            .into_iter()
            .filter(|(labels, _)| labels.starts_with(&of_the_role))
            .collect();
        if states.len() == 6 && value(&text, "tandem_role_replicas", &role("desired")) == 2.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the role's signals: {states:?}\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // What the scenario cost, for `-- --nocapture`.
    for line in text.lines().filter(|l| {
        !l.starts_with('#') && !l.starts_with("tandem_admission") && !l.contains("_bucket")
    }) {
        println!("{line}");
    }
    assert_eq!(
        calls.iter().filter(|c| own(c)).count(),
        2,
        "the test's own create and scale are what is left out"
    );

    // Independently of the parser: the LeaderWorkerSet writes, two
    // server-side applies that created the replicas and one that set
    // replica 0 back, each counted once.
    let lws_patches = calls
        .iter()
        .filter(|c| c.method == "PATCH" && c.path.contains("/leaderworkersets/"))
        .count();
    assert_eq!(lws_patches, 3, "{calls:#?}");
    assert_eq!(
        value(
            &text,
            "tandem_kube_requests_total",
            r#"verb="patch",kind="leaderworkersets.leaderworkerset.x-k8s.io""#
        ),
        3.0,
        "{text}"
    );
    assert!(
        value(
            &text,
            "tandem_kube_requests_total",
            r#"verb="watch",kind="inferenceservices.fusioninfer.io""#
        ) >= 1.0,
        "the controllers and the caches watch InferenceServices: {text}"
    );

    // The decisions: two replicas created under the role's policy (Ordered,
    // the default), one drift repaired, nothing deleted.
    let decision = |decision: &str| {
        value(
            &text,
            "tandem_decisions_total",
            &format!(r#"controller="InferenceService",decision="{decision}",policy="Ordered""#),
        )
    };
    assert_eq!(decision("replica_created"), 2.0, "{text}");
    assert_eq!(decision("drift_repaired"), 1.0, "{text}");
    assert_eq!(decision("replica_deleted"), 0.0, "{text}");

    // The reconciles: at least the creation, the scale-up and the repair,
    // none failed, each timed.
    let reconciles: f64 = samples(&text, "tandem_controller_reconciles_total")
        .into_iter()
        .filter(|(labels, _)| labels.starts_with(r#"controller="InferenceService""#))
        .map(|(_, v)| v)
        .sum();
    let ok = value(
        &text,
        "tandem_controller_reconciles_total",
        r#"controller="InferenceService",result="ok""#,
    );
    assert!(ok >= 3.0, "{text}");
    assert_eq!(reconciles, ok, "no reconcile failed: {text}");
    assert_eq!(
        value(
            &text,
            "tandem_controller_reconcile_duration_seconds_count",
            r#"controller="InferenceService""#
        ),
        ok,
        "{text}"
    );

    // The admission caches hold the one service, and no view or group.
    for (kind, objects) in [
        ("InferenceService", 1.0),
        ("ScaleView", 0.0),
        ("ResourceScalingGroup", 0.0),
    ] {
        assert_eq!(
            value(&text, "tandem_cached_objects", &format!(r#"kind="{kind}""#)),
            objects,
            "{kind}: {text}"
        );
    }
    let stored: Value = fake
        .get(
            "fusioninfer.io/v1alpha1",
            "InferenceService",
            "default",
            SERVICE,
        )
        .expect("stored");
    assert_eq!(stored["spec"]["roles"][0]["replicas"], 2);
}

/// The `tandem_*` series a PromQL expression reads, each with its metric
/// family (the name less a counter's or histogram's suffix).
fn series_read(expr: &str) -> Vec<(String, String)> {
    expr.match_indices("tandem_")
        .map(|(at, _)| {
            let name: String = expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let family = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(&name)
                .to_owned();
            (name, family)
        })
        .collect()
}

/// Every `tandem_*` series an alert of `manifests/monitoring/` reads is one
/// the binary exports (`exported`: its /metrics after it has admitted and
/// reconciled; a family shows once it has a sample).
fn alerts_read_exported_metrics(exported: &str) {
    let rules = harness::yaml_documents(&harness::repo_path(
        "manifests/monitoring/prometheusrule.yaml",
    ))
    .remove(0);
    let mut read = 0;
    for rule in rules["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let expr = rule["expr"].as_str().unwrap();
        for (name, family) in series_read(expr) {
            assert!(
                exported.contains(&format!("# TYPE {family} ")),
                "{} reads {name}, which /metrics does not export:\n{exported}",
                rule["alert"]
            );
            read += 1;
        }
    }
    assert!(read >= 4, "the alerts read Tandem's metrics ({read})");
}

/// Every query of the Grafana dashboard (`manifests/monitoring/`, the same
/// file as the chart's) reads `tandem_*` series the binary exports
/// (`exported`, as for the alerts), and every label it groups by is a label
/// of those series: a renamed metric or label would leave a panel empty.
fn dashboard_reads_exported_metrics(exported: &str) {
    let text = std::fs::read_to_string(harness::repo_path(
        "manifests/monitoring/tandem-dashboard.json",
    ))
    .unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let chart = std::fs::read_to_string(harness::repo_path(
        "charts/tandem/dashboards/tandem-dashboard.json",
    ))
    .unwrap();
    assert_eq!(chart, text, "the chart's dashboard is the manifests' one");
    let mut read = 0;
    let mut ids = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_i64().unwrap()),
            "{title}: a repeated id"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut families = Vec::new();
            for (name, family) in series_read(expr) {
                assert!(
                    exported.contains(&format!("# TYPE {family} ")),
                    "panel {title:?} reads {name}, which /metrics does not export:\n{exported}"
                );
                families.push(family);
                read += 1;
            }
            // The labels of `by (...)`, each on a sample of a family read.
            for (at, _) in expr.match_indices("by (") {
                let labels = &expr[at + 4..];
                let labels = &labels[..labels.find(')').unwrap()];
                for label in labels.split(',').map(str::trim).filter(|l| *l != "le") {
                    let on_a_sample = exported.lines().any(|line| {
                        families.iter().any(|f| line.starts_with(f.as_str()))
                            && line.contains(&format!("{label}=\""))
                    });
                    assert!(
                        on_a_sample,
                        "panel {title:?} groups by {label}, which no sample of {families:?} has:\n{exported}"
                    );
                }
            }
        }
    }
    assert!(read >= 12, "the dashboard reads Tandem's metrics ({read})");
}
