//! The webhook server over real TLS on loopback: verdicts, patches on the wire,
//! malformed requests, probes and metrics, certificate rotation, shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::SinkExt;
use harness::*;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};

fn example(path: &str, index: usize) -> Value {
    yaml_documents(&repo_path(path)).remove(index)
}

fn in_namespace(mut object: Value, namespace: &str) -> Value {
    object["metadata"]["namespace"] = json!(namespace);
    object
}

#[tokio::test]
async fn each_kind_is_defaulted_and_validated_over_tls() {
    let test = start_server(|_| {}).await;
    // (kind, object, whether it has defaults to fill: an InplaceScaling group has none)
    let cases = [
        (
            "InferenceService",
            example("examples/seeds/story2-prefill-decode.yaml", 0),
            true,
        ),
        (
            "ScaleView",
            example("examples/scaleview/decode-ondemand-spot.yaml", 1),
            true,
        ),
        (
            "ResourceScalingGroup",
            in_namespace(
                example("examples/resourcescalinggroup/inplace-scaling.yaml", 0),
                "ai",
            ),
            false,
        ),
        (
            "ResourceScalingGroup",
            in_namespace(
                example("examples/resourcescalinggroup/group-replication.yaml", 0),
                "ai",
            ),
            true,
        ),
    ];
    for (kind, object, has_defaults) in cases {
        assert_eq!(object["kind"], kind);
        let plural = gvr(kind).2;
        let schema = tandem_schema(kind);
        assert_eq!(
            schema.errors(&object),
            Vec::<String>::new(),
            "{kind}: the input fits the CRD"
        );

        let mutated = admit(
            &test,
            &format!("/mutate/{plural}"),
            &review("CREATE", &object, None),
        )
        .await;
        assert_eq!(mutated["allowed"], true, "{kind}: {mutated}");
        let patched = if has_defaults {
            let patched = apply_wire_patch(&object, &mutated);
            assert_ne!(patched, object, "{kind}: defaults were added");
            patched
        } else {
            assert!(
                mutated.get("patch").is_none(),
                "{kind}: nothing to default: {mutated}"
            );
            object.clone()
        };
        assert_eq!(
            schema.errors(&patched),
            Vec::<String>::new(),
            "{kind}: the patched object fits the CRD"
        );

        let again = admit(
            &test,
            &format!("/mutate/{plural}"),
            &review("CREATE", &patched, None),
        )
        .await;
        assert_eq!(again["allowed"], true);
        assert!(
            again.get("patch").is_none(),
            "{kind}: defaulting is idempotent, no second patch: {again}"
        );

        let validated = admit(
            &test,
            &format!("/validate/{plural}"),
            &review("CREATE", &patched, None),
        )
        .await;
        assert_eq!(validated["allowed"], true, "{kind}: {validated}");
        assert!(validated.get("patch").is_none());
    }
}

#[tokio::test]
async fn warnings_and_denials_name_the_field() {
    let test = start_server(|_| {}).await;

    // Seed 000: binding `decode` for role `Decode` is allowed with a warning.
    let rsg = in_namespace(
        example("examples/resourcescalinggroup/inplace-scaling.yaml", 0),
        "ai",
    );
    let reply = admit(
        &test,
        "/validate/resourcescalinggroups",
        &review("CREATE", &rsg, None),
    )
    .await;
    assert_eq!(reply["allowed"], true);
    let warnings = reply["warnings"].as_array().expect("warnings");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("\"decode\" matches role \"Decode\""),
        "{warnings:?}"
    );

    // The same group applied in another namespace reaches across: denied.
    let elsewhere = in_namespace(rsg.clone(), "default");
    let reply = admit(
        &test,
        "/validate/resourcescalinggroups",
        &review("CREATE", &elsewhere, None),
    )
    .await;
    assert_eq!(reply["allowed"], false);
    assert!(reply["status"]["message"].as_str().unwrap().starts_with(
        "spec.targetResources[0].namespace: must be the ResourceScalingGroup's own namespace"
    ));

    // An invalid InferenceService: the message, code and causes name the field.
    let mut service = example("examples/seeds/story4-prefill-decode-multinode.yaml", 0);
    service["spec"]["roles"][1]["multinode"]["nodeCount"] = json!(0);
    let reply = admit(
        &test,
        "/validate/inferenceservices",
        &review("CREATE", &service, None),
    )
    .await;
    assert_eq!(reply["allowed"], false);
    let status = &reply["status"];
    assert_eq!(
        status["message"],
        "spec.roles[1].multinode.nodeCount: must be >= 1, got 0"
    );
    assert_eq!(status["code"], 422);
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "InferenceService");
    assert_eq!(status["details"]["name"], "deepseek-r1-disagg");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.roles[1].multinode.nodeCount"
    );

    // The mutating webhook refuses what it cannot parse, naming the field.
    service["spec"]["roles"][0]["replicas"] = json!("two");
    let reply = admit(
        &test,
        "/mutate/inferenceservices",
        &review("CREATE", &service, None),
    )
    .await;
    assert_eq!(reply["allowed"], false);
    assert!(
        reply["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.roles[0].replicas: expected a whole number, got the string \"two\"")
    );

    // ScaleView: the target is immutable on update.
    let view = example("examples/scaleview/decode-ondemand-spot.yaml", 1);
    let mut moved = view.clone();
    moved["spec"]["targetRef"]["name"] = json!("another-service");
    let reply = admit(
        &test,
        "/validate/scaleviews",
        &review("UPDATE", &moved, Some(&view)),
    )
    .await;
    assert_eq!(reply["allowed"], false);
    assert!(
        reply["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.targetRef: is immutable")
    );
}

/// The seed's InplaceScaling group in namespace ai, with `change` applied to its spec.
fn inplace_with(change: impl FnOnce(&mut Value)) -> Value {
    let mut rsg = in_namespace(
        example("examples/resourcescalinggroup/inplace-scaling.yaml", 0),
        "ai",
    );
    change(&mut rsg["spec"]);
    rsg
}

async fn denial(test: &TestServer, rsg: &Value) -> String {
    let reply = admit(
        test,
        "/validate/resourcescalinggroups",
        &review("CREATE", rsg, None),
    )
    .await;
    assert_eq!(reply["allowed"], false, "{reply}");
    reply["status"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn resource_scaling_groups_are_denied_naming_the_problem() {
    // The webhook sees one stored group, prefill -> decode, as through its caches.
    let stored = json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "prefill-to-decode", "namespace": "ai"},
        "spec": {"targetResources": [
            {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
        "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
            {"name": "prefill", "role": "Source"}, {"name": "decode", "role": "Target", "ratio": 2}]}}}});
    let lookup = Arc::new(tandem::admission::lookup::Objects::new([&stored]));
    let test = start_server_seeing(|_| {}, lookup).await;

    let second_source = inplace_with(|spec| {
        spec["scalingStrategy"]["inplaceConfig"]["bindings"][1]["role"] = json!("Source");
        spec["scalingStrategy"]["inplaceConfig"]["bindings"][1]
            .as_object_mut()
            .unwrap()
            .remove("ratio");
    });
    assert_eq!(
        denial(&test, &second_source).await,
        "spec.scalingStrategy.inplaceConfig.bindings[1].role: only one Source is allowed, spec.scalingStrategy.inplaceConfig.bindings[0] is already the Source"
    );

    let unknown_name = inplace_with(|spec| {
        spec["scalingStrategy"]["inplaceConfig"]["bindings"][2]["name"] = json!("encode");
    });
    assert_eq!(
        denial(&test, &unknown_name).await,
        "spec.scalingStrategy.inplaceConfig.bindings[2].name: \"encode\" names no role or resource (bindable: Decode, prefill, router)"
    );
    let no_name = inplace_with(|spec| {
        spec["targetResources"][1]
            .as_object_mut()
            .unwrap()
            .remove("name");
    });
    assert!(
        denial(&test, &no_name)
            .await
            .starts_with("spec.targetResources[1]: missing field `name`")
    );

    let elsewhere = inplace_with(|spec| spec["targetResources"][1]["namespace"] = json!("other"));
    assert_eq!(
        denial(&test, &elsewhere).await,
        "spec.targetResources[1].namespace: must be the ResourceScalingGroup's own namespace \"ai\", got \"other\": a group may not reach into another namespace"
    );

    let daemon_set = inplace_with(|spec| spec["targetResources"][1]["kind"] = json!("DaemonSet"));
    let message = denial(&test, &daemon_set).await;
    assert!(
        message.starts_with("spec.targetResources[1].kind: DaemonSet (apps/v1) cannot be scaled in place: it has no scale subresource. Tandem scales Deployment and StatefulSet (apps/v1), LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) and ScaleView (fusioninfer.io/v1alpha1) through /scale; roles of RoleBasedGroup"),
        "{message}"
    );

    // decode -> prefill closes a loop with the stored prefill -> decode.
    let reverse = json!({"apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "decode-to-prefill", "namespace": "ai"},
        "spec": {"targetResources": [
            {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
            {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
        "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
            {"name": "decode", "role": "Source"}, {"name": "prefill", "role": "Target", "ratio": 1}]}}}});
    assert_eq!(
        denial(&test, &reverse).await,
        "spec.scalingStrategy.inplaceConfig.bindings[1]: prefill -> decode -> prefill via prefill-to-decode, decode-to-prefill: scaling would follow itself round this loop forever"
    );

    // The seed's group itself passes, with the case warning, beside the stored one.
    let seed = inplace_with(|_| {});
    let reply = admit(
        &test,
        "/validate/resourcescalinggroups",
        &review("CREATE", &seed, None),
    )
    .await;
    assert_eq!(reply["allowed"], true, "{reply}");
}

#[tokio::test]
async fn a_kind_the_webhook_cannot_look_up_is_a_warning() {
    let test = start_server(|_| {}).await;
    let custom = inplace_with(|spec| {
        spec["targetResources"][1]["apiVersion"] = json!("example.com/v1");
        spec["targetResources"][1]["kind"] = json!("Router");
    });
    let reply = admit(
        &test,
        "/validate/resourcescalinggroups",
        &review("CREATE", &custom, None),
    )
    .await;
    assert_eq!(reply["allowed"], true, "{reply}");
    let warnings: Vec<&str> = reply["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        warnings.contains(&"spec.targetResources[1].kind: Router (example.com/v1) was not checked for a scale subresource: this webhook cannot see the cluster's API discovery; without one it cannot be scaled"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn scale_subresource_writes_are_autoscaling_scale_objects() {
    let test = start_server(|_| {}).await;
    let ok = admit(
        &test,
        "/validate/scaleviews",
        &scale_review("spot-decode-sv", "default", 3, 1),
    )
    .await;
    let (_, metrics) = probe(test.server.probe_addr, "/metrics").await.unwrap();
    assert!(
        metrics.contains(r#"kind="ScaleView/scale",operation="UPDATE",verdict="allowed"} 1"#),
        "{metrics}"
    );
    assert_eq!(ok["allowed"], true, "{ok}");
    let negative = admit(
        &test,
        "/validate/scaleviews",
        &scale_review("spot-decode-sv", "default", -1, 1),
    )
    .await;
    assert_eq!(negative["allowed"], false);
    assert_eq!(
        negative["status"]["message"],
        "spec.replicas: must be >= 0, got -1"
    );
    // The mutating webhook is not registered for /scale and says so if called.
    let wrong = admit(
        &test,
        "/mutate/scaleviews",
        &scale_review("spot-decode-sv", "default", 3, 1),
    )
    .await;
    assert_eq!(wrong["allowed"], false);
    assert!(
        wrong["status"]["message"]
            .as_str()
            .unwrap()
            .contains("does not admit the scale subresource")
    );
}

#[tokio::test]
async fn strict_views_refuse_scale_writes_outside_their_range() {
    // The webhook sees the strict view (as it would through its caches).
    let mut view = example("examples/scaleview/decode-ondemand-spot.yaml", 1);
    view["spec"]["strict"] = json!(true);
    view["spec"]["scalePolicy"][1]["constraints"] = json!({"max": 4});
    let service = example("examples/scaleview/decode-ondemand-spot.yaml", 0);
    let lookup = Arc::new(tandem::admission::lookup::Objects::new([&view, &service]));
    let test = start_server_seeing(|_| {}, lookup).await;
    let name = view["metadata"]["name"].as_str().unwrap();
    // ondemand max 2 + spot max 4: the range is [0, 6].
    let inside = admit(
        &test,
        "/validate/scaleviews",
        &scale_review(name, "default", 6, 1),
    )
    .await;
    assert_eq!(inside["allowed"], true, "{inside}");
    let outside = admit(
        &test,
        "/validate/scaleviews",
        &scale_review(name, "default", 7, 1),
    )
    .await;
    assert_eq!(outside["allowed"], false);
    assert_eq!(
        outside["status"]["message"],
        "spec.replicas: must be within [0, 6] (the sum of the groups' min and max constraints) because spec.strict is true, got 7"
    );
    // The view's own groups are checked against the service it targets.
    let mut wrong = view.clone();
    wrong["spec"]["scalePolicy"][1]["group"] = json!("prefill");
    let denied = admit(
        &test,
        "/validate/scaleviews",
        &review("CREATE", &wrong, None),
    )
    .await;
    assert_eq!(denied["allowed"], false);
    assert_eq!(
        denied["status"]["message"],
        "spec.scalePolicy[1].group: role \"prefill\" of spot-decode is a prefiller, not a decoder"
    );
}

#[tokio::test]
async fn malformed_requests_get_specific_errors_and_the_server_stays_healthy() {
    let test = start_server(|_| {}).await;
    let tls = client_tls(&[&test.ca_pem]);
    let addr = test.server.webhook_addr;
    let valid = review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    );
    let mut no_uid = valid.clone();
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    let mut v1beta1 = valid.clone();
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut pod = valid.clone();
    pod["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    pod["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "pods"});

    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "not JSON",
            "/validate/inferenceservices",
            b"{not json".to_vec(),
            400,
            "the request body is not JSON",
        ),
        (
            "JSON but not a review",
            "/validate/inferenceservices",
            br#"{"hello": 1}"#.to_vec(),
            400,
            "expected an AdmissionReview of apiVersion admission.k8s.io/v1, got kind \"\"",
        ),
        (
            "missing request",
            "/validate/inferenceservices",
            br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#.to_vec(),
            400,
            "the AdmissionReview has no request",
        ),
        (
            "wrong apiVersion",
            "/validate/inferenceservices",
            serde_json::to_vec(&v1beta1).unwrap(),
            400,
            "got kind \"AdmissionReview\" of apiVersion \"admission.k8s.io/v1beta1\"",
        ),
        (
            "request without uid",
            "/validate/inferenceservices",
            serde_json::to_vec(&no_uid).unwrap(),
            400,
            "malformed AdmissionReview at request",
        ),
        (
            "unknown endpoint",
            "/validate/pods",
            serde_json::to_vec(&valid).unwrap(),
            404,
            "no admission webhook for \"pods\"",
        ),
        (
            "oversized body",
            "/validate/inferenceservices",
            vec![b' '; tandem::server::DEFAULT_BODY_LIMIT_BYTES + 1],
            413,
            "the request body is larger than 7340032 bytes, the limit set by --body-limit-bytes",
        ),
    ];
    for (name, path, body, status, message) in cases {
        let exchange = post(addr, tls.clone(), path, body)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(exchange.status, status, "{name}: {}", exchange.text());
        assert!(
            exchange.text().contains(message),
            "{name}: expected {message:?} in {:?}",
            exchange.text()
        );
    }

    // A readable review of another kind is a denial in a proper response.
    let reply = admit(&test, "/validate/inferenceservices", &pod).await;
    assert_eq!(reply["allowed"], false);
    assert_eq!(reply["status"]["code"], 400);
    assert!(
        reply["status"]["message"]
            .as_str()
            .unwrap()
            .contains("this endpoint admits InferenceService (inferenceservices), got Pod")
    );

    // Still healthy and still answering.
    assert_eq!(
        probe(test.server.probe_addr, "/healthz").await.unwrap().0,
        200
    );
    let reply = admit(&test, "/validate/inferenceservices", &valid).await;
    assert_eq!(reply["allowed"], true);

    let (_, metrics) = probe(test.server.probe_addr, "/metrics").await.unwrap();
    for line in [
        r#"tandem_admission_requests_total{webhook="validate",kind="InferenceService",operation="unknown",verdict="invalid"} 5"#,
        r#"tandem_admission_requests_total{webhook="validate",kind="InferenceService",operation="unknown",verdict="too_large"} 1"#,
        r#"tandem_admission_requests_total{webhook="validate",kind="other",operation="unknown",verdict="invalid"} 1"#,
        r#"tandem_admission_requests_total{webhook="validate",kind="other",operation="CREATE",verdict="denied"} 1"#,
        r#"tandem_admission_requests_total{webhook="validate",kind="InferenceService",operation="CREATE",verdict="allowed"} 1"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
    assert!(
        metrics.contains("tandem_admission_duration_seconds_bucket{"),
        "{metrics}"
    );
}

#[tokio::test]
async fn probes_answer_on_the_plain_port() {
    let test = start_server(|_| {}).await;
    let body = review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    );
    admit(&test, "/validate/inferenceservices", &body).await;
    assert_eq!(
        probe(test.server.probe_addr, "/healthz").await.unwrap(),
        (
            200,
            "ok: the webhook and probe listeners are serving".to_owned()
        )
    );
    assert_eq!(
        probe(test.server.probe_addr, "/readyz").await.unwrap(),
        (200, "ready".to_owned())
    );
    let (status, text) = probe(test.server.probe_addr, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE tandem_admission_requests counter"),
        "{text}"
    );
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
}

#[tokio::test]
async fn the_chain_is_verified_and_only_tls_1_2_and_1_3_are_spoken() {
    let test = start_server(|_| {}).await;
    let body = serde_json::to_vec(&review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    ))
    .unwrap();
    let stranger = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1).unwrap();
    let refused = post(
        test.server.webhook_addr,
        client_tls(&[&stranger.ca_pem]),
        "/validate/inferenceservices",
        body.clone(),
    )
    .await;
    assert!(
        refused.unwrap_err().contains("handshake"),
        "a client trusting another CA must not connect"
    );

    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        roots
            .add(rustls::pki_types::CertificateDer::from_pem_slice(test.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let exchange = post(
            test.server.webhook_addr,
            Arc::new(config),
            "/validate/inferenceservices",
            body.clone(),
        )
        .await
        .unwrap_or_else(|e| panic!("{version:?}: {e}"));
        assert_eq!(exchange.status, 200);
    }
}

#[tokio::test]
async fn certificates_rotate_without_a_failed_request() {
    // The certificate directory laid out as kubelet mounts a Secret.
    let dir = tempfile::tempdir().unwrap();
    let first = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1).unwrap();
    load::kubelet_mount(dir.path(), &first).unwrap();
    let server = tandem::server::Server::start(
        options(dir.path()),
        Arc::new(tandem::admission::lookup::Blind),
        Arc::new(AtomicBool::new(true)),
    )
    .await
    .unwrap();
    let second = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1).unwrap();
    // Longer-lived, so the expiry gauge must move to it.
    let third = tandem::certs::issue(&tandem::certs::loopback_hosts(), 2).unwrap();
    let tls = client_tls(&[&first.ca_pem, &second.ca_pem, &third.ca_pem]);
    let body = serde_json::to_vec(&review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    ))
    .unwrap();
    let leaf = |pem: &str| {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    };

    // A client keeps sending, one new connection (so one handshake) per request.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = {
        let (stop, failures, seen, tls, body, addr) = (
            stop.clone(),
            failures.clone(),
            seen.clone(),
            tls.clone(),
            body.clone(),
            server.webhook_addr,
        );
        tokio::spawn(async move {
            let mut sent = 0usize;
            while !stop.load(Ordering::SeqCst) {
                match post(
                    addr,
                    tls.clone(),
                    "/validate/inferenceservices",
                    body.clone(),
                )
                .await
                {
                    Ok(exchange)
                        if exchange.status == 200
                            && exchange.json()["response"]["allowed"] == true =>
                    {
                        let mut seen = seen.lock().unwrap();
                        if seen.last() != Some(&exchange.presented) {
                            seen.push(exchange.presented);
                        }
                    }
                    Ok(exchange) => {
                        eprintln!("failed: {} {}", exchange.status, exchange.text());
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        eprintln!("failed: {e}");
                        failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                sent += 1;
            }
            sent
        })
    };
    let wait_for = |stage: &'static str, want: rustls::pki_types::CertificateDer<'static>| {
        let seen = seen.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen.lock().unwrap().last() != Some(&want) {
                assert!(
                    Instant::now() < deadline,
                    "{stage}: the new certificate was never presented"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    wait_for("start", leaf(&first.cert_pem)).await;
    // Rotation 1: kubelet's atomic symlink swap.
    load::kubelet_swap(dir.path(), 2, &second).unwrap();
    wait_for("kubelet swap", leaf(&second.cert_pem)).await;
    // Rotation 2: a plain directory whose files are replaced in place, the
    // certificate first. In between, a file is missing and then the pair does
    // not match; the previous certificate keeps being served throughout.
    std::fs::remove_file(dir.path().join("tls.crt")).unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    std::fs::write(dir.path().join("tls.crt"), &third.cert_pem).unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    std::fs::remove_file(dir.path().join("tls.key")).unwrap();
    std::fs::write(dir.path().join("tls.key"), &third.key_pem).unwrap();
    wait_for("in place", leaf(&third.cert_pem)).await;

    stop.store(true, Ordering::SeqCst);
    let sent = client.await.unwrap();
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "no request may fail during rotation"
    );
    assert!(sent > 3, "the client kept sending ({sent} requests)");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            leaf(&first.cert_pem),
            leaf(&second.cert_pem),
            leaf(&third.cert_pem)
        ],
        "certificates in order, none after a newer one"
    );

    let (_, metrics) = probe(server.probe_addr, "/metrics").await.unwrap();
    assert!(
        metrics.contains(r#"tandem_certificate_reloads_total{result="loaded"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"tandem_certificate_reloads_total{result="rejected"}"#),
        "the half-written pair was rejected: {metrics}"
    );
    let third_expiry = tandem::server::tls::expires_at(&leaf(&third.cert_pem)).unwrap();
    assert!(
        metrics.contains(&format!(
            "tandem_certificate_expiry_timestamp_seconds {third_expiry}\n"
        )),
        "the gauge follows the certificate served now: {metrics}"
    );
    server.shutdown();
    server.finished().await.unwrap();
}

/// Starts a request whose body is sent in pieces; returns the sender for the
/// rest of the body and the pending response.
async fn streaming_request(
    test: &TestServer,
    path: &str,
) -> (
    futures::channel::mpsc::Sender<Result<Frame<Bytes>, std::convert::Infallible>>,
    tokio::task::JoinHandle<Result<(u16, Bytes), String>>,
) {
    let tcp = tokio::net::TcpStream::connect(test.server.webhook_addr)
        .await
        .unwrap();
    let stream = tokio_rustls::TlsConnector::from(client_tls(&[&test.ca_pem]))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let (tx, rx) = futures::channel::mpsc::channel(4);
    let request = hyper::Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(StreamBody::new(rx))
        .unwrap();
    let response = tokio::spawn(async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    });
    (tx, response)
}

#[tokio::test]
async fn shutdown_finishes_in_flight_requests_and_refuses_new_connections() {
    let test = start_server(|_| {}).await;
    let body = serde_json::to_vec(&review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    ))
    .unwrap();
    let (mut rest, response) = streaming_request(&test, "/validate/inferenceservices").await;
    let (head, tail) = body.split_at(body.len() / 2);
    rest.send(Ok(Frame::data(Bytes::copy_from_slice(head))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    test.server.shutdown();
    assert_eq!(
        probe(test.server.probe_addr, "/readyz").await.unwrap().0,
        503,
        "not ready while draining"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = post(
        test.server.webhook_addr,
        client_tls(&[&test.ca_pem]),
        "/validate/inferenceservices",
        body.clone(),
    )
    .await;
    assert!(
        refused.is_err(),
        "new connections are refused while draining"
    );

    rest.send(Ok(Frame::data(Bytes::copy_from_slice(tail))))
        .await
        .unwrap();
    drop(rest);
    let (status, reply) = response
        .await
        .unwrap()
        .expect("the in-flight request completes");
    assert_eq!(status, 200);
    let reply: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(reply["response"]["allowed"], true);
    tokio::time::timeout(Duration::from_secs(10), test.server.finished())
        .await
        .expect("the server stops once drained")
        .unwrap();
}

#[tokio::test]
async fn a_request_that_stalls_past_the_timeout_gets_503() {
    let test = start_server(|o| o.request_timeout = Duration::from_millis(300)).await;
    let (mut rest, response) = streaming_request(&test, "/validate/inferenceservices").await;
    rest.send(Ok(Frame::data(Bytes::from_static(b"{\"apiVersion\":"))))
        .await
        .unwrap();
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("answered, not left hanging")
        .unwrap()
        .unwrap();
    // 503, not a denying AdmissionReview: the API server then applies the
    // webhook's failurePolicy (validating webhooks fail closed, mutating ones
    // open), which a denial would override.
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        String::from_utf8_lossy(&body),
        "the request timed out after 300 ms, the limit set by --request-timeout-ms"
    );
    drop(rest);
}

/// Opens a TLS connection, sends `head` and then nothing; returns what the
/// server sent before it closed the connection.
async fn stall_after(test: &TestServer, head: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(test.server.webhook_addr)
        .await
        .unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(client_tls(&[&test.ca_pem]))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    stream.write_all(head).await.unwrap();
    stream.flush().await.unwrap();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection, not left hanging");
    // A close without close_notify is as good as one with it here.
    if let Err(e) = closed {
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
    }
    answer
}

#[tokio::test]
async fn a_request_head_that_stalls_or_an_idle_connection_is_closed() {
    let test = start_server(|o| o.idle_timeout = Duration::from_millis(300)).await;
    // Slowloris: the head begins and never ends.
    let answer = stall_after(
        &test,
        b"POST /validate/inferenceservices HTTP/1.1\r\nhost: localhost\r\ncontent-type: appl",
    )
    .await;
    let text = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || text.starts_with("HTTP/1.1 408"),
        "closed, or told it timed out: {text:?}"
    );
    // A keep-alive connection left idle after its request: the answer, then
    // the close.
    let body = serde_json::to_vec(&review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    ))
    .unwrap();
    let mut request = format!(
        "POST /validate/inferenceservices HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend(body);
    let answer = String::from_utf8_lossy(&stall_after(&test, &request).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""allowed":true"#), "{answer}");
}

/// A client that completes the TLS handshake and then sends no byte at all
/// is disconnected after the idle timeout (before, it was held until it
/// closed); one that sends its request in time is answered.
#[tokio::test]
async fn a_connection_that_sends_nothing_after_the_handshake_is_closed() {
    use tokio::io::AsyncReadExt;
    let test = start_server(|o| o.idle_timeout = Duration::from_millis(300)).await;
    let tcp = tokio::net::TcpStream::connect(test.server.webhook_addr)
        .await
        .unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(client_tls(&[&test.ca_pem]))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the handshake completes");
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes a silent connection, not left hanging");
    if let Err(e) = closed {
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
    }
    assert!(answer.is_empty(), "nothing is answered: {answer:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "not before the idle timeout: {:?}",
        started.elapsed()
    );
    // A request sent right away on a new connection is still answered.
    let body = serde_json::to_vec(&review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    ))
    .unwrap();
    let mut request = format!(
        "POST /validate/inferenceservices HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend(body);
    let answer = String::from_utf8_lossy(&stall_after(&test, &request).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A ClientHello offering `version` as its highest (TLS 1.0 is 0x0301, 1.1
/// 0x0302, 1.2 0x0303) without the supported_versions extension, as a
/// pre-TLS 1.3 client sends it, with suites and extensions a TLS 1.2 server
/// with an ECDSA certificate accepts. rustls cannot speak TLS 1.0 or 1.1, so
/// the bytes are written here.
fn client_hello(version: u16) -> Vec<u8> {
    fn vec16(bytes: &[u8]) -> Vec<u8> {
        let mut out = u16::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(bytes);
        out
    }
    fn extension(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend(vec16(body));
        out
    }
    let host = b"localhost";
    let mut server_name = vec![0];
    server_name.extend(vec16(host));
    let extensions = [
        extension(0x0000, &vec16(&server_name)),
        // supported_groups: x25519, secp256r1
        extension(0x000a, &vec16(&[0x00, 0x1d, 0x00, 0x17])),
        // ec_point_formats: uncompressed
        extension(0x000b, &[1, 0]),
        // signature_algorithms: ecdsa_secp256r1_sha256, rsa_pss_rsae_sha256
        extension(0x000d, &vec16(&[0x04, 0x03, 0x08, 0x04])),
    ]
    .concat();
    let mut hello = version.to_be_bytes().to_vec();
    hello.extend([7u8; 32]); // random
    hello.push(0); // no session id
    // ECDHE-ECDSA with AES-128-GCM, AES-256-GCM and AES-128-CBC-SHA (the
    // last one is what a TLS 1.0 client would pick).
    hello.extend(vec16(&[0xc0, 0x2b, 0xc0, 0x2c, 0xc0, 0x09]));
    hello.extend([1, 0]); // compression: null only
    hello.extend(vec16(&extensions));
    let mut handshake = vec![1]; // client_hello
    handshake.extend(&u32::try_from(hello.len()).unwrap().to_be_bytes()[1..]);
    handshake.extend(hello);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend(vec16(&handshake));
    record
}

/// Sends raw bytes and reads the first TLS record of the answer (type and
/// body), or None when the server closed the connection without one.
async fn first_record(addr: std::net::SocketAddr, bytes: &[u8]) -> Option<(u8, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut header = [0u8; 5];
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut header))
        .await
        .expect("the server answers the ClientHello");
    read.ok()?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
    tcp.read_exact(&mut body).await.unwrap();
    Some((header[0], body))
}

#[tokio::test]
async fn tls_1_0_and_1_1_handshakes_are_refused_with_a_protocol_version_alert() {
    let test = start_server(|_| {}).await;
    let addr = test.server.webhook_addr;
    // The same hello offering TLS 1.2 gets a ServerHello: the refusals below
    // are for the version, not for a malformed hello.
    let (kind, body) = first_record(addr, &client_hello(0x0303))
        .await
        .expect("a TLS 1.2 hello is answered");
    assert_eq!(
        (kind, body[0]),
        (0x16, 2),
        "a handshake record, ServerHello"
    );
    assert_eq!(&body[4..6], &[0x03, 0x03], "TLS 1.2 chosen");

    for (name, version) in [
        ("TLS 1.0", 0x0301),
        ("TLS 1.1", 0x0302),
        ("SSL 3.0", 0x0300),
    ] {
        let (kind, body) = first_record(addr, &client_hello(version))
            .await
            .unwrap_or_else(|| panic!("{name}: closed without an alert"));
        // An alert record: level fatal (2), description protocol_version (70).
        assert_eq!((kind, body.as_slice()), (0x15, &[2u8, 70][..]), "{name}");
    }
}

#[tokio::test]
async fn a_client_ca_makes_the_webhook_require_a_certificate_signed_by_it() {
    let api_server = tandem::certs::issue_client("kube-apiserver", 1).unwrap();
    let stranger = tandem::certs::issue_client("kube-apiserver", 1).unwrap();
    let ca_dir = tempfile::tempdir().unwrap();
    let client_ca = ca_dir.path().join("client-ca.crt");
    std::fs::write(&client_ca, &api_server.ca_pem).unwrap();
    let test = start_server(|o| o.client_ca = Some(client_ca.clone())).await;
    let body = serde_json::to_vec(&review(
        "CREATE",
        &example("examples/seeds/story1-monolithic.yaml", 0),
        None,
    ))
    .unwrap();
    let send = |tls: Arc<rustls::ClientConfig>| {
        post(
            test.server.webhook_addr,
            tls,
            "/validate/inferenceservices",
            body.clone(),
        )
    };

    let served = send(client_tls_presenting(
        &[&test.ca_pem],
        &api_server.cert_pem,
        &api_server.key_pem,
    ))
    .await
    .expect("a certificate from the client CA is served");
    assert_eq!(served.status, 200);
    assert_eq!(served.json()["response"]["allowed"], true);

    // TLS 1.3 clients finish their side of the handshake before the server
    // has checked their certificate, so the refusal arrives as an alert on
    // the first read.
    let none = send(client_tls(&[&test.ca_pem]))
        .await
        .expect_err("no client certificate: refused");
    assert!(none.contains("CertificateRequired"), "{none}");
    let other = send(client_tls_presenting(
        &[&test.ca_pem],
        &stranger.cert_pem,
        &stranger.key_pem,
    ))
    .await
    .expect_err("a certificate from another CA: refused");
    // The other CA even has the same name: the chain is built to the trusted
    // CA by name, and its signature does not verify.
    assert!(other.contains("DecryptError"), "{other}");
    let (_, metrics) = probe(test.server.probe_addr, "/metrics").await.unwrap();
    assert!(
        metrics.contains(r#"verdict="allowed"} 1"#),
        "only the verified client got through: {metrics}"
    );
}

#[tokio::test]
async fn a_client_ca_file_that_does_not_load_stops_the_server_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    tandem::certs::write(
        dir.path(),
        &tandem::certs::issue(&tandem::certs::loopback_hosts(), 1).unwrap(),
    )
    .unwrap();
    let missing = dir.path().join("missing-ca.crt");
    let mut opts = options(dir.path());
    opts.client_ca = Some(missing.clone());
    let error = tandem::server::Server::start(
        opts,
        Arc::new(tandem::admission::lookup::Blind),
        Arc::new(AtomicBool::new(true)),
    )
    .await
    .err()
    .expect("the server does not start");
    assert!(
        error
            .to_string()
            .starts_with(&format!("could not read {}", missing.display())),
        "{error}"
    );
}

/// A webhook listener that stops while the process runs is seen: `/healthz`
/// answers 503 naming it (so a liveness probe restarts the pod), and
/// [`Server::listener_ended`], which `serve` waits on beside the signals,
/// returns at once, so the process exits instead of staying up half-serving.
#[tokio::test]
async fn a_webhook_listener_that_stops_fails_liveness_and_ends_the_server() {
    let test = start_server(|_| {}).await;
    test.server.webhook_handle().shutdown();
    let which = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        test.server.listener_ended(),
    )
    .await
    .expect("the end is seen within 5 s");
    assert_eq!(which, "webhook");
    assert_eq!(
        probe(test.server.probe_addr, "/healthz").await.unwrap(),
        (503, "the webhook listener has stopped".to_owned())
    );
}
