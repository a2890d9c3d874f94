//! Admission under load, over TLS on loopback: the real Tandem webhook server
//! against two baselines served by the same axum + rustls stack in the same
//! process: a bare handler that answers a fixed AdmissionReview without
//! parsing the body, and a parse-only webhook that reads the body as
//! kube-rs's `AdmissionReview<DynamicObject>` and allows the request's uid
//! (the least any webhook does). All three get the same TLS configuration,
//! certificate, client and bodies, so tandem/bare is what Tandem's admission
//! adds to the transport and tandem/parse-only what it adds to reading the
//! review.
//!
//! Then, against Tandem alone, the serving certificate is rotated mid-run the
//! way kubelet updates a mounted Secret, while the connections keep
//! reconnecting: every request must still be served, and every handshake
//! after the reload must be presented the new certificate.
//!
//! `cargo bench --bench admission_load` runs the full load (a warm-up, then
//! 20 000 requests per scenario and server); without `--bench` (as under
//! `cargo test --all-targets`) it runs 200 requests per scenario, so CI checks
//! that it builds and works. Every response is checked; the process exits
//! non-zero when any request failed or the new certificate was not seen.
//! The client is `tests/harness/src/load.rs`, which the resilience tests share.

use harness::load;
use harness::measure::{parse_only_router, stored_group};

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::post;
use serde_json::{Value, json};
use tandem::admission::lookup::Objects;
use tandem::admission::{Kind, Lookup};
use tandem::server::tls::{self, CertificateResolver};
use tandem::server::{DEFAULT_BODY_LIMIT_BYTES, ServeOptions, Server};

/// How many turns the servers take at each scenario (the requests are
/// split evenly over them).
const ROUNDS: usize = 4;

/// ResourceScalingGroups in the namespace of the large RSG scenario.
const STORED_GROUPS: usize = 1_000;
const RSG_NAMESPACE: &str = "ai";
/// The namespace of the small RSG scenario, which holds one stored group.
const RSG_NAMESPACE_ONE: &str = "ai-one";
/// The two RSG scenarios, which Tandem then serves again taking turns, to
/// compare them: admission's cost must not grow with the groups stored
/// (target: p99 beside 1 000 <= 1.2x beside 1).
const RSG_ONE_STORED: &str = "ResourceScalingGroup CREATE, 1 RSG in the namespace";
const RSG_THOUSAND_STORED: &str = "ResourceScalingGroup CREATE, 1 000 RSGs in the namespace";

/// What the bare handler answers to everything.
const FIXED_REPLY: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"bare","allowed":true}}"#;

struct Mode {
    name: &'static str,
    warm_up: usize,
    requests: usize,
    /// Requests per connection between reconnects in the rotation run.
    reconnect_every: usize,
}

const SMOKE: Mode = Mode {
    name: "smoke (no --bench argument)",
    warm_up: 20,
    requests: 200,
    reconnect_every: 5,
};

const FULL: Mode = Mode {
    name: "full (cargo bench)",
    warm_up: 2_000,
    requests: 20_000,
    reconnect_every: 50,
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

/// One server under load.
struct Target {
    name: &'static str,
    addr: SocketAddr,
    /// Whether the server decides (so the scenario's verdict applies).
    decides: bool,
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
    let rotated = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1)
        .map_err(|e| format!("dev CA: {e}"))?;
    // Mounted as kubelet mounts a Secret, so the rotation below is a swap.
    load::kubelet_mount(dir.path(), &bundle).map_err(|e| format!("certificate dir: {e}"))?;
    let client = harness::client_tls(&[&bundle.ca_pem, &rotated.ca_pem]);

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
    let (bare_addr, bare) = start_baseline(dir.path(), bare_router())?;
    let (parse_only_addr, parse_only) = start_baseline(dir.path(), parse_only_router())?;

    let targets = [
        Target {
            name: "bare",
            addr: bare_addr,
            decides: false,
        },
        Target {
            name: "parse-only",
            addr: parse_only_addr,
            decides: false,
        },
        Target {
            name: "tandem",
            addr: tandem.webhook_addr,
            decides: true,
        },
    ];
    println!(
        "admission load run, {}: {} requests per scenario and server after {} warm-up, the servers taking {ROUNDS} turns, {} keep-alive HTTP/1.1 connections over TLS, loopback",
        mode.name,
        mode.requests,
        mode.warm_up,
        load::CONNECTIONS
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
            "  {:<10} {:>10} {:>10} {:>10} {:>10} {:>9}",
            "server", "req/s", "p50 µs", "p99 µs", "p99.9 µs", "failures"
        );
        // The servers take turns, ROUNDS times, so that other work on the
        // machine weighs on each of them alike.
        let mut runs: Vec<load::Run> = Vec::new();
        for target in &targets {
            let warm = load::drive(
                target.addr,
                &client,
                &request_of(scenario),
                &expect_of(target, scenario),
                mode.warm_up,
            )
            .await?;
            failures += report_failures(&warm, "during the warm-up");
            runs.push(load::Run {
                wall: Duration::ZERO,
                latencies: Vec::new(),
                failures: 0,
                examples: Vec::new(),
            });
        }
        for _ in 0..ROUNDS {
            for (target, run) in targets.iter().zip(runs.iter_mut()) {
                let measured = load::drive(
                    target.addr,
                    &client,
                    &request_of(scenario),
                    &expect_of(target, scenario),
                    mode.requests / ROUNDS,
                )
                .await?;
                failures += report_failures(&measured, "");
                run.wall += measured.wall;
                run.failures += measured.failures;
                run.latencies.extend(measured.latencies);
            }
        }
        for (target, run) in targets.iter().zip(runs.iter_mut()) {
            run.latencies.sort_unstable();
            println!(
                "  {:<10} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>9}",
                target.name,
                run.throughput(),
                run.percentile(0.50),
                run.percentile(0.99),
                run.percentile(0.999),
                run.failures
            );
        }
        if let [bare, parse_only, tandem] = runs.as_slice() {
            println!(
                "  tandem/bare:       throughput {:.2}x, p99 {:.2}x",
                tandem.throughput() / bare.throughput(),
                tandem.percentile(0.99) / bare.percentile(0.99)
            );
            println!(
                "  tandem/parse-only: throughput {:.2}x (target >= 0.8x), p99 {:.2}x (target <= 1.2x)",
                tandem.throughput() / parse_only.throughput(),
                tandem.percentile(0.99) / parse_only.percentile(0.99)
            );
        }
    }
    failures += stored_groups(&tandem, mode, &client, &scenarios).await?;
    failures += rotation(&tandem, mode, &client, &scenarios[0], dir.path(), &rotated).await?;
    println!("\nfailed requests in all: {failures}");
    match peak_rss_kib() {
        Some(kib) => println!(
            "peak RSS of this process (the three servers, the client, {} stored RSGs and the latencies): {} MiB",
            STORED_GROUPS + 1,
            kib / 1024
        ),
        None => println!("peak RSS of this process: unavailable (no /proc/self/status)"),
    }

    bare.graceful_shutdown(Some(Duration::from_secs(5)));
    parse_only.graceful_shutdown(Some(Duration::from_secs(5)));
    tandem.shutdown();
    tandem
        .finished()
        .await
        .map_err(|e| format!("Tandem server stopped badly: {e}"))?;
    Ok(failures)
}

/// Turns of the comparison beside 1 and beside 1 000 stored groups.
const STORED_GROUPS_TURNS: usize = 10;

/// Tandem alone at the two RSG scenarios, which take turns
/// [`STORED_GROUPS_TURNS`] times so that other work on the machine weighs on
/// both alike (in the scenario blocks above they run one after the other,
/// seconds apart, on a shared machine). Returns the failures.
async fn stored_groups(
    tandem: &Server,
    mode: &Mode,
    client: &Arc<rustls::ClientConfig>,
    scenarios: &[Scenario],
) -> Result<usize, String> {
    let find = |name: &str| {
        scenarios
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("no scenario {name:?}"))
    };
    let pair = [find(RSG_ONE_STORED)?, find(RSG_THOUSAND_STORED)?];
    let mut runs = [(); 2].map(|()| load::Run {
        wall: Duration::ZERO,
        latencies: Vec::new(),
        failures: 0,
        examples: Vec::new(),
    });
    let mut failures = 0;
    for _ in 0..STORED_GROUPS_TURNS {
        for (scenario, run) in pair.iter().zip(runs.iter_mut()) {
            let measured = load::drive(
                tandem.webhook_addr,
                client,
                &request_of(scenario),
                &load::Expect {
                    uid: Some(scenario.uid.clone()),
                    allowed: scenario.allowed,
                },
                mode.requests / STORED_GROUPS_TURNS,
            )
            .await?;
            failures += report_failures(&measured, "");
            run.wall += measured.wall;
            run.failures += measured.failures;
            run.latencies.extend(measured.latencies);
        }
    }
    println!(
        "\nResourceScalingGroup CREATE beside 1 and beside 1 000 stored groups, tandem alone, the two taking {STORED_GROUPS_TURNS} turns of {} requests",
        mode.requests / STORED_GROUPS_TURNS
    );
    println!(
        "  {:<10} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "stored", "req/s", "p50 µs", "p99 µs", "p99.9 µs", "failures"
    );
    for (stored, run) in ["1", "1 000"].iter().zip(runs.iter_mut()) {
        run.latencies.sort_unstable();
        println!(
            "  {:<10} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>9}",
            stored,
            run.throughput(),
            run.percentile(0.50),
            run.percentile(0.99),
            run.percentile(0.999),
            run.failures
        );
    }
    let [one, thousand] = &runs;
    println!(
        "  1 000 / 1: throughput {:.2}x, p99 {:.2}x (target <= 1.2x)",
        thousand.throughput() / one.throughput(),
        thousand.percentile(0.99) / one.percentile(0.99)
    );
    Ok(failures)
}

fn request_of(scenario: &Scenario) -> load::Request {
    load::Request {
        path: scenario.path,
        body: scenario.body.clone(),
    }
}

/// What a server must answer: the baselines allow everything, the
/// parse-only one echoes the uid, Tandem decides.
fn expect_of(target: &Target, scenario: &Scenario) -> load::Expect {
    load::Expect {
        uid: (target.name != "bare").then(|| scenario.uid.clone()),
        allowed: !target.decides || scenario.allowed,
    }
}

/// Prints the first failures of a run; returns how many there were.
fn report_failures(run: &load::Run, when: &str) -> usize {
    for example in &run.examples {
        println!(
            "    failed{}: {example}",
            if when.is_empty() {
                String::new()
            } else {
                format!(" {when}")
            }
        );
    }
    run.failures
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// The objects Tandem's admission can look up, and the three scenarios.
fn world() -> Result<(Arc<dyn Lookup>, Vec<Scenario>), String> {
    let example = |path: &str, index: usize| -> Result<Value, String> {
        harness::yaml_documents(&harness::repo_path(path))
            .into_iter()
            .nth(index)
            .ok_or_else(|| format!("{path} has no document {index}"))
    };
    let service = example("examples/seeds/story4-prefill-decode-multinode.yaml", 0)?;
    let view = example("examples/scaleview/decode-ondemand-spot.yaml", 1)?;
    let view_target = example("examples/scaleview/decode-ondemand-spot.yaml", 0)?;
    let mut group = example("examples/resourcescalinggroup/inplace-scaling.yaml", 0)?;
    group["metadata"]["namespace"] = json!(RSG_NAMESPACE);
    let mut group_beside_one = group.clone();
    group_beside_one["metadata"]["namespace"] = json!(RSG_NAMESPACE_ONE);
    if let Some(targets) = group_beside_one["spec"]["targetResources"].as_array_mut() {
        for target in targets {
            if target.get("namespace").is_some() {
                target["namespace"] = json!(RSG_NAMESPACE_ONE);
            }
        }
    }

    let view_name = view["metadata"]["name"]
        .as_str()
        .ok_or("the ScaleView example has no name")?
        .to_owned();
    let view_namespace = view["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let mut stored: Vec<Value> = (0..STORED_GROUPS)
        .map(|i| stored_group(RSG_NAMESPACE, i))
        .collect();
    stored.push(stored_group(RSG_NAMESPACE_ONE, 0));
    let objects = Objects::new(stored.iter().chain([&view, &view_target]));
    // Objects::new drops what does not parse: make sure the world is as claimed.
    for (namespace, expected) in [(RSG_NAMESPACE, STORED_GROUPS), (RSG_NAMESPACE_ONE, 1)] {
        let groups = objects.follows().groups(namespace);
        if groups != expected {
            return Err(format!(
                "the lookup holds {groups} ResourceScalingGroups in {namespace}, not {expected}"
            ));
        }
    }
    if !matches!(
        objects.scale_view(&view_namespace, &view_name),
        Some(Some(_))
    ) {
        return Err(format!("the lookup does not hold ScaleView {view_name}"));
    }

    let scenario = |name, path, review: Value, allowed| -> Result<Scenario, String> {
        let uid = review["request"]["uid"]
            .as_str()
            .ok_or("review without uid")?
            .to_owned();
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        Ok(Scenario {
            name,
            path,
            body: Bytes::from(body),
            uid,
            allowed,
        })
    };
    // Story 4 as stored (defaults filled in), scaled by the user.
    let stored_service = tandem::admission::admit(
        Kind::InferenceService,
        "default",
        &service,
        None,
        &tandem::admission::lookup::Blind,
    )
    .map_err(|f| format!("story 4 is not admitted: {}", f.denial_message()))?
    .0;
    let mut scaled_service = stored_service.clone();
    scaled_service["spec"]["roles"][1]["replicas"] = json!(3);
    let scenarios = vec![
        scenario(
            "InferenceService CREATE, P/D multi-node (story 4)",
            "/validate/inferenceservices",
            harness::review("CREATE", &service, None),
            true,
        )?,
        scenario(
            "InferenceService CREATE, story 4, mutating webhook (patches the defaults)",
            "/mutate/inferenceservices",
            harness::review("CREATE", &service, None),
            true,
        )?,
        scenario(
            "InferenceService UPDATE, story 4 decode 2 -> 3 replicas",
            "/validate/inferenceservices",
            harness::review("UPDATE", &scaled_service, Some(&stored_service)),
            true,
        )?,
        scenario(
            "ScaleView /scale write (autoscaling/v1 Scale, view in the lookup)",
            "/validate/scaleviews",
            harness::scale_review(&view_name, &view_namespace, 4, 2),
            true,
        )?,
        scenario(
            RSG_ONE_STORED,
            "/validate/resourcescalinggroups",
            harness::review("CREATE", &group_beside_one, None),
            true,
        )?,
        scenario(
            RSG_THOUSAND_STORED,
            "/validate/resourcescalinggroups",
            harness::review("CREATE", &group, None),
            true,
        )?,
    ];
    Ok((Arc::new(objects), scenarios))
}

/// The bare handler: reads the body and answers a fixed review without
/// looking at it.
fn bare_router() -> Router {
    Router::new().route(
        "/{webhook}/{resource}",
        post(|_body: Bytes| async { ([(header::CONTENT_TYPE, "application/json")], FIXED_REPLY) }),
    )
}

/// A baseline server: the same TLS configuration and certificate as Tandem's,
/// served by the same axum-server + rustls stack, without the body-limit and
/// timeout layers.
fn start_baseline(
    cert_dir: &std::path::Path,
    app: Router,
) -> Result<(SocketAddr, axum_server::Handle<SocketAddr>), String> {
    let resolver = Arc::new(CertificateResolver::new(
        tls::load(cert_dir).map_err(|e| e.to_string())?,
    ));
    let config = tls::server_config(resolver, None).map_err(|e| e.to_string())?;
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
    .map_err(|e| format!("baseline server: {e}"))?
    .handle(handle.clone());
    tokio::spawn(server.serve(app.into_make_service()));
    Ok((addr, handle))
}

/// The serving certificate rotated while Tandem is under load: a kubelet
/// `..data` swap a third of the way in, connections reconnecting every
/// `reconnect_every` requests. Returns the failures; a handshake after the
/// reload that was not presented the new certificate counts as one.
async fn rotation(
    tandem: &Server,
    mode: &Mode,
    client: &Arc<rustls::ClientConfig>,
    scenario: &Scenario,
    cert_dir: &std::path::Path,
    next: &tandem::certs::Bundle,
) -> Result<usize, String> {
    let certificates = tandem.certificates.clone();
    let rotated = load::rotate_under_load(
        tandem.webhook_addr,
        client,
        &load::Request {
            path: scenario.path,
            body: scenario.body.clone(),
        },
        &load::Expect {
            uid: Some(scenario.uid.clone()),
            allowed: scenario.allowed,
        },
        mode.requests,
        mode.reconnect_every,
        cert_dir,
        next,
        move || certificates.current_leaf(),
    )
    .await?;
    let run = &rotated.run;
    println!(
        "\ncertificate rotation under load ({}; kubelet ..data swap after a third of {} requests, {} connections reconnecting every {} requests)",
        scenario.name,
        mode.requests,
        load::CONNECTIONS,
        mode.reconnect_every
    );
    println!(
        "  requests served {}, failed {}; {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs, p99.9 {:.0} µs",
        run.latencies.len(),
        run.failures,
        run.throughput(),
        run.percentile(0.50),
        run.percentile(0.99),
        run.percentile(0.999)
    );
    println!(
        "  handshakes {}, after the reload {} of which {} presented the new certificate; old after new: {}; swap to reload: {} ms",
        rotated.handshakes,
        rotated.handshakes_after_reload,
        rotated.new_certificate_after_reload,
        rotated.old_after_new,
        rotated.reload.as_millis()
    );
    for example in &run.examples {
        println!("    failed: {example}");
    }
    let stale = rotated.handshakes_after_reload - rotated.new_certificate_after_reload
        + rotated.old_after_new;
    if rotated.handshakes_after_reload == 0 {
        println!("    no handshake after the reload: the new certificate was not seen");
        return Ok(run.failures + 1);
    }
    Ok(run.failures + stale)
}

/// VmHWM of this process, in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}
