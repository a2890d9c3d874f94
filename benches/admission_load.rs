//! Admission under load, over TLS on loopback: the real Tandem webhook server
//! against a bare axum + rustls handler that answers a fixed AdmissionReview
//! without parsing the body. Both get the same TLS configuration, certificate,
//! client and bodies, so the ratio is what Tandem's admission adds to the
//! transport.
//!
//! `cargo bench --bench admission_load` runs the full load (a warm-up, then
//! 20 000 requests per scenario and server); without `--bench` (as under
//! `cargo test --all-targets`) it runs 200 requests per scenario, so CI checks
//! that it builds and works. Every response is checked; the process exits
//! non-zero when any request failed.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::post;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tandem::admission::lookup::Objects;
use tandem::admission::{Kind, Lookup};
use tandem::server::tls::{self, CertificateResolver};
use tandem::server::{DEFAULT_BODY_LIMIT_BYTES, ServeOptions, Server};
use tokio::sync::Barrier;

/// Keep-alive connections driving a server at once.
const CONNECTIONS: usize = 32;
/// ResourceScalingGroups in the namespace of the RSG scenario.
const STORED_GROUPS: usize = 1_000;
const RSG_NAMESPACE: &str = "ai";

/// What the bare handler answers to everything.
const FIXED_REPLY: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"bare","allowed":true}}"#;

struct Mode {
    name: &'static str,
    warm_up: usize,
    requests: usize,
}

const SMOKE: Mode = Mode {
    name: "smoke (no --bench argument)",
    warm_up: 20,
    requests: 200,
};

const FULL: Mode = Mode {
    name: "full (cargo bench)",
    warm_up: 2_000,
    requests: 20_000,
};

/// One kind of request, sent to both servers.
struct Scenario {
    name: &'static str,
    path: &'static str,
    body: Bytes,
    /// The uid Tandem must echo.
    uid: String,
    /// Tandem's expected `response.allowed`.
    allowed: bool,
}

/// What a response must be for the request to count as served.
#[derive(Clone)]
struct Expect {
    /// `response.uid`, when the server echoes it (the bare handler does not).
    uid: Option<String>,
    allowed: bool,
}

/// One server under load.
struct Target {
    name: &'static str,
    addr: SocketAddr,
    /// Whether the server decides (so the scenario's verdict applies).
    decides: bool,
}

/// The outcome of a fixed number of requests against one server.
struct Run {
    wall: Duration,
    /// Latency of each served request, nanoseconds, sorted.
    latencies: Vec<u64>,
    failures: usize,
    /// The first few failures, for the report.
    examples: Vec<String>,
}

impl Run {
    fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }

    /// Nearest-rank percentile, in microseconds.
    fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = (p * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len()) - 1;
        self.latencies[index] as f64 / 1_000.0
    }
}

fn main() -> ExitCode {
    let mode = if std::env::args().any(|a| a == "--bench") {
        FULL
    } else {
        SMOKE
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("admission_load: could not start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&mode)) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failures) => {
            eprintln!("admission_load: {failures} requests failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("admission_load: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(mode: &Mode) -> Result<usize, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let bundle = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1)
        .map_err(|e| format!("dev CA: {e}"))?;
    tandem::certs::write(dir.path(), &bundle).map_err(|e| format!("dev CA: {e}"))?;
    let client = common::client_tls(&[&bundle.ca_pem]);

    let (lookup, scenarios) = world()?;
    let tandem = Server::start(
        ServeOptions {
            listen: loopback(),
            probe_listen: loopback(),
            cert_dir: dir.path().to_owned(),
            body_limit_bytes: DEFAULT_BODY_LIMIT_BYTES,
            request_timeout: Duration::from_secs(4),
            idle_timeout: tandem::server::DEFAULT_IDLE_TIMEOUT,
            shutdown_grace: Duration::from_secs(10),
            client_ca: None,
            service_account: tandem::admission::DEFAULT_SERVICE_ACCOUNT.to_owned(),
        },
        lookup,
        Arc::new(AtomicBool::new(true)),
    )
    .await
    .map_err(|e| format!("Tandem server: {e}"))?;
    let (bare_addr, bare) = start_bare(dir.path())?;

    let targets = [
        Target {
            name: "bare",
            addr: bare_addr,
            decides: false,
        },
        Target {
            name: "tandem",
            addr: tandem.webhook_addr,
            decides: true,
        },
    ];
    println!(
        "admission load run, {}: {} requests per scenario and server after {} warm-up, {CONNECTIONS} keep-alive HTTP/1.1 connections over TLS, loopback",
        mode.name, mode.requests, mode.warm_up
    );
    let mut failures = 0;
    for scenario in &scenarios {
        println!(
            "\n{} (POST {}, {} byte body)",
            scenario.name,
            scenario.path,
            scenario.body.len()
        );
        println!(
            "  {:<8} {:>10} {:>10} {:>10} {:>10} {:>9}",
            "server", "req/s", "p50 µs", "p99 µs", "p99.9 µs", "failures"
        );
        let mut runs = Vec::new();
        for target in &targets {
            let expect = Expect {
                uid: target.decides.then(|| scenario.uid.clone()),
                allowed: !target.decides || scenario.allowed,
            };
            let warm = drive(target.addr, &client, scenario, &expect, mode.warm_up).await?;
            let measured = drive(target.addr, &client, scenario, &expect, mode.requests).await?;
            println!(
                "  {:<8} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>9}",
                target.name,
                measured.throughput(),
                measured.percentile(0.50),
                measured.percentile(0.99),
                measured.percentile(0.999),
                measured.failures
            );
            for run in [&warm, &measured] {
                failures += run.failures;
                for example in &run.examples {
                    println!("    failed: {example}");
                }
            }
            if warm.failures > 0 {
                println!("    ({} failures during the warm-up)", warm.failures);
            }
            runs.push(measured);
        }
        if let [bare, tandem] = runs.as_slice() {
            println!(
                "  tandem/bare: throughput {:.2}x (target >= 0.9x), p99 {:.2}x (target <= 1.2x)",
                tandem.throughput() / bare.throughput(),
                tandem.percentile(0.99) / bare.percentile(0.99)
            );
        }
    }
    println!("\nfailed requests in all: {failures}");
    match peak_rss_kib() {
        Some(kib) => println!(
            "peak RSS of this process (both servers, the client, {STORED_GROUPS} stored RSGs and the latencies): {} MiB",
            kib / 1024
        ),
        None => println!("peak RSS of this process: unavailable (no /proc/self/status)"),
    }

    bare.graceful_shutdown(Some(Duration::from_secs(5)));
    tandem.shutdown();
    tandem
        .finished()
        .await
        .map_err(|e| format!("Tandem server stopped badly: {e}"))?;
    Ok(failures)
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The objects Tandem's admission can look up, and the three scenarios.
fn world() -> Result<(Arc<dyn Lookup>, Vec<Scenario>), String> {
    let example = |path: &str, index: usize| -> Result<Value, String> {
        common::yaml_documents(&common::repo_path(path))
            .into_iter()
            .nth(index)
            .ok_or_else(|| format!("{path} has no document {index}"))
    };
    let service = example(
        "examples/inferenceservice/story4-prefill-decode-multinode.yaml",
        0,
    )?;
    let view = example("examples/scaleview/decode-ondemand-spot.yaml", 1)?;
    let view_target = example("examples/scaleview/decode-ondemand-spot.yaml", 0)?;
    let mut group = example("examples/resourcescalinggroup/inplace-scaling.yaml", 0)?;
    group["metadata"]["namespace"] = json!(RSG_NAMESPACE);

    let view_name = view["metadata"]["name"]
        .as_str()
        .ok_or("the ScaleView example has no name")?
        .to_owned();
    let view_namespace = view["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let stored: Vec<Value> = (0..STORED_GROUPS).map(stored_group).collect();
    let objects = Objects::new(stored.iter().chain([&view, &view_target]));
    // Objects::new drops what does not parse: make sure the world is as claimed.
    let groups = objects
        .resource_scaling_groups(RSG_NAMESPACE)
        .map_or(0, |g| g.len());
    if groups != STORED_GROUPS {
        return Err(format!(
            "the lookup holds {groups} ResourceScalingGroups, not {STORED_GROUPS}"
        ));
    }
    if !matches!(
        objects.scale_view(&view_namespace, &view_name),
        Some(Some(_))
    ) {
        return Err(format!("the lookup does not hold ScaleView {view_name}"));
    }

    let scenario = |name, kind: Kind, review: Value, allowed| -> Result<Scenario, String> {
        let uid = review["request"]["uid"]
            .as_str()
            .ok_or("review without uid")?
            .to_owned();
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        Ok(Scenario {
            name,
            path: match kind {
                Kind::InferenceService => "/validate/inferenceservices",
                Kind::ScaleView => "/validate/scaleviews",
                Kind::ResourceScalingGroup => "/validate/resourcescalinggroups",
            },
            body: Bytes::from(body),
            uid,
            allowed,
        })
    };
    let scenarios = vec![
        scenario(
            "InferenceService CREATE, P/D multi-node (story 4)",
            Kind::InferenceService,
            common::review("CREATE", &service, None),
            true,
        )?,
        scenario(
            "ScaleView /scale write (autoscaling/v1 Scale, view in the lookup)",
            Kind::ScaleView,
            common::scale_review(&view_name, &view_namespace, 4, 2),
            true,
        )?,
        scenario(
            "ResourceScalingGroup CREATE, 1 000 RSGs in the namespace",
            Kind::ResourceScalingGroup,
            common::review("CREATE", &group, None),
            true,
        )?,
    ];
    Ok((Arc::new(objects), scenarios))
}

/// The `index`th of a chain of InplaceScaling groups: Deployment `step-{i}`
/// drives `step-{i+1}` at ratio 2, so the namespace's follow graph is one
/// long path (acyclic, each target followed once) and the candidate from the
/// example touches none of it.
fn stored_group(index: usize) -> Value {
    let deployment = |i: usize| {
        json!({"name": format!("step-{i:04}"), "namespace": RSG_NAMESPACE,
            "apiVersion": "apps/v1", "kind": "Deployment"})
    };
    json!({
        "apiVersion": "resourcescalinggroup.com/v1",
        "kind": "ResourceScalingGroup",
        "metadata": {"name": format!("chain-{index:04}"), "namespace": RSG_NAMESPACE},
        "spec": {
            "targetResources": [deployment(index), deployment(index + 1)],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": format!("step-{index:04}"), "role": "Source"},
                {"name": format!("step-{:04}", index + 1), "role": "Target", "ratio": 2.0}
            ]}}
        }
    })
}

/// The bare handler: the same TLS configuration and certificate, reads the
/// body and answers a fixed review without looking at it.
fn start_bare(
    cert_dir: &std::path::Path,
) -> Result<(SocketAddr, axum_server::Handle<SocketAddr>), String> {
    let resolver = Arc::new(CertificateResolver::new(
        tls::load(cert_dir).map_err(|e| e.to_string())?,
    ));
    let config = tls::server_config(resolver, None).map_err(|e| e.to_string())?;
    let app = Router::new().route(
        "/validate/{resource}",
        post(|_body: Bytes| async { ([(header::CONTENT_TYPE, "application/json")], FIXED_REPLY) }),
    );
    let listener = std::net::TcpListener::bind(loopback()).map_err(|e| format!("bind: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("bind: {e}"))?;
    let handle = axum_server::Handle::new();
    let server = axum_server::from_tcp_rustls(
        listener,
        axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(config)),
    )
    .map_err(|e| format!("bare server: {e}"))?
    .handle(handle.clone());
    tokio::spawn(server.serve(app.into_make_service()));
    Ok((addr, handle))
}

/// Sends `requests` copies of the scenario's request over CONNECTIONS
/// keep-alive connections opened beforehand (handshakes are not timed).
async fn drive(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
    scenario: &Scenario,
    expect: &Expect,
    requests: usize,
) -> Result<Run, String> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(CONNECTIONS + 1));
    let mut connections = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let sender = connect(addr, client).await?;
        connections.push(tokio::spawn(connection(
            sender,
            scenario.path,
            scenario.body.clone(),
            expect.clone(),
            requests,
            next.clone(),
            start.clone(),
        )));
    }
    start.wait().await;
    let began = Instant::now();
    let mut latencies = Vec::with_capacity(requests);
    let mut examples = Vec::new();
    for task in connections {
        let (served, failed) = task.await.map_err(|e| format!("client task: {e}"))?;
        latencies.extend(served);
        for failure in failed {
            if examples.len() < 5 {
                examples.push(failure);
            }
        }
    }
    let wall = began.elapsed();
    latencies.sort_unstable();
    Ok(Run {
        wall,
        failures: requests - latencies.len(),
        latencies,
        examples,
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr, client: &Arc<rustls::ClientConfig>) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(client.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {addr}: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One connection's share: takes request numbers until `requests` are taken.
/// Returns the latencies of served requests (ns) and what went wrong with the
/// others. A broken connection stops; its remaining share goes to the others.
async fn connection(
    mut sender: Sender,
    path: &'static str,
    body: Bytes,
    expect: Expect,
    requests: usize,
    next: Arc<AtomicUsize>,
    start: Arc<Barrier>,
) -> (Vec<u64>, Vec<String>) {
    let mut served = Vec::new();
    let mut failed = Vec::new();
    start.wait().await;
    while next.fetch_add(1, Ordering::Relaxed) < requests {
        let request = match hyper::Request::post(path)
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body.clone()))
        {
            Ok(request) => request,
            Err(e) => {
                failed.push(format!("request: {e}"));
                continue;
            }
        };
        let sent = Instant::now();
        let response = match sender.send_request(request).await {
            Ok(response) => response,
            Err(e) => {
                failed.push(format!("send: {e}"));
                break;
            }
        };
        let status = response.status();
        let reply = match response.into_body().collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                failed.push(format!("body: {e}"));
                break;
            }
        };
        let latency = sent.elapsed();
        match check(status.as_u16(), &reply, &expect) {
            Ok(()) => served.push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX)),
            Err(reason) => failed.push(reason),
        }
    }
    (served, failed)
}

/// HTTP 200, an AdmissionReview whose response has the expected verdict and,
/// when the server echoes it, uid.
fn check(status: u16, reply: &[u8], expect: &Expect) -> Result<(), String> {
    let text = || {
        String::from_utf8_lossy(reply)
            .chars()
            .take(300)
            .collect::<String>()
    };
    if status != 200 {
        return Err(format!("HTTP {status}: {}", text()));
    }
    let review: Value =
        serde_json::from_slice(reply).map_err(|e| format!("not JSON ({e}): {}", text()))?;
    let response = &review["response"];
    if response["allowed"] != json!(expect.allowed) {
        return Err(format!(
            "allowed is {}, expected {}: {}",
            response["allowed"],
            expect.allowed,
            text()
        ));
    }
    if let Some(uid) = &expect.uid
        && response["uid"] != json!(uid)
    {
        return Err(format!("uid is {}, expected {uid:?}", response["uid"]));
    }
    Ok(())
}

/// VmHWM of this process, in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}
