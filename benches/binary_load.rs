//! Admission under load from outside: the shipped `tandem serve --dev`
//! binary against a parse-only webhook running as a process of its own, both
//! driven by wrk over TLS keep-alive on loopback. Where `admission_load`
//! measures the servers in one process with the project's own client, this is
//! what a user runs: the binary's runtime, logging, middleware, allocator and
//! connection handling included.
//!
//! - **tandem**: `tandem serve --dev` (release build under `cargo bench`) at
//!   the default log level (info), admission only, against the in-memory API
//!   server (`tests/harness/src/fake_api`) holding the ScaleView the `/scale`
//!   scenario writes to, its InferenceService, one ResourceScalingGroup in
//!   namespace `ai-one` and 1 000 in `ai`: the binary reads them through its
//!   watch caches, as in a cluster.
//! - **parse-only**: this executable started again with `--serve-parse-only`:
//!   a tokio runtime with its defaults, axum-server with rustls' defaults on
//!   Tandem's dev certificate, the body read as kube-rs's
//!   `AdmissionReview<DynamicObject>` and the request allowed. Nothing else
//!   of this executable runs in that process.
//!
//! `cargo bench --bench binary_load` runs wrk (`-t2 -c32`, installed with
//! apt-get when missing) for TURNS turns of SECONDS seconds per server and
//! scenario, the two servers alternating so that other work on the machine
//! weighs on both alike, and prints each pair's ratios (`SCENARIO=text` runs
//! only the scenarios whose name holds it). Without `--bench` (as
//! under `cargo test --all-targets`) it starts both processes and checks
//! every scenario's answer from each with the project's client, so CI keeps
//! it working without wrk.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};

use axum::body::Bytes;
use harness::fake_api::FakeApi;
use harness::load;
use harness::measure::{admitted, env_number, memory, parse_only_router, stored_group};
use harness::running::Running;
use serde_json::{Value, json};
use tandem::admission::Kind;

const STORED_GROUPS: usize = 1_000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--serve-parse-only") {
        let Some(cert_dir) = args.get(at + 1) else {
            eprintln!("--serve-parse-only CERT_DIR");
            return ExitCode::from(2);
        };
        return serve_parse_only(Path::new(cert_dir));
    }
    let full = args.iter().any(|a| a == "--bench");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(full)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("binary load run failed: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// The parse-only webhook as a process of its own: prints `listening on
/// ADDR` once bound, serves until killed.
fn serve_parse_only(cert_dir: &Path) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served: Result<(), String> = runtime.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(
            cert_dir.join("tls.crt"),
            cert_dir.join("tls.key"),
        )
        .await
        .map_err(|e| format!("the certificate: {e}"))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening on {addr}");
        axum_server::from_tcp_rustls(listener, config)
            .map_err(|e| e.to_string())?
            .serve(parse_only_router().into_make_service())
            .await
            .map_err(|e| e.to_string())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("parse-only webhook: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// The parse-only process; killed when dropped.
struct Baseline {
    child: Child,
    addr: SocketAddr,
}

impl Baseline {
    fn start(cert_dir: &Path) -> Result<Baseline, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("--serve-parse-only")
            .arg(cert_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("the parse-only process: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .map_err(|e| e.to_string())?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("the parse-only process said {line:?}"))?;
        Ok(Baseline { child, addr })
    }
}

impl Drop for Baseline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One kind of request, and the verdict both servers must give it.
struct Scenario {
    name: &'static str,
    request: load::Request,
    uid: String,
}

/// The in-memory API server's objects and the scenarios, as in
/// `admission_load`.
fn world(fake: &FakeApi) -> Result<Vec<Scenario>, String> {
    let example = |path: &str, index: usize| -> Result<Value, String> {
        harness::yaml_documents(&harness::repo_path(path))
            .into_iter()
            .nth(index)
            .ok_or_else(|| format!("{path} has no document {index}"))
    };
    let service = example("examples/seeds/story4-prefill-decode-multinode.yaml", 0)?;
    let view_target = example("examples/scaleview/decode-ondemand-spot.yaml", 0)?;
    let view = example("examples/scaleview/decode-ondemand-spot.yaml", 1)?;
    for namespace in ["ai", "ai-one"] {
        fake.insert(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        );
    }
    fake.insert(admitted(Kind::InferenceService, "default", &view_target));
    fake.insert(admitted(Kind::ScaleView, "default", &view));
    for index in 0..STORED_GROUPS {
        fake.insert(stored_group("ai", index));
    }
    fake.insert(stored_group("ai-one", 0));

    let group = |namespace: &str| -> Result<Value, String> {
        let mut group = example("examples/resourcescalinggroup/inplace-scaling.yaml", 0)?;
        group["metadata"]["namespace"] = json!(namespace);
        for target in group["spec"]["targetResources"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            target["namespace"] = json!(namespace);
        }
        Ok(group)
    };
    let view_name = view["metadata"]["name"].as_str().ok_or("a view name")?;
    let scenario = |name, path, review: Value| -> Result<Scenario, String> {
        Ok(Scenario {
            name,
            uid: review["request"]["uid"]
                .as_str()
                .ok_or("review without uid")?
                .to_owned(),
            request: load::Request {
                path,
                body: Bytes::from(serde_json::to_vec(&review).map_err(|e| e.to_string())?),
            },
        })
    };
    Ok(vec![
        scenario(
            "InferenceService CREATE, story 4, validating",
            "/validate/inferenceservices",
            harness::review("CREATE", &service, None),
        )?,
        scenario(
            "InferenceService CREATE, story 4, mutating",
            "/mutate/inferenceservices",
            harness::review("CREATE", &service, None),
        )?,
        scenario(
            "ScaleView /scale write",
            "/validate/scaleviews",
            harness::scale_review(view_name, "default", 4, 2),
        )?,
        scenario(
            "ResourceScalingGroup CREATE beside 1 stored group",
            "/validate/resourcescalinggroups",
            harness::review("CREATE", &group("ai-one")?, None),
        )?,
        scenario(
            "ResourceScalingGroup CREATE beside 1 000 stored groups",
            "/validate/resourcescalinggroups",
            harness::review("CREATE", &group("ai")?, None),
        )?,
    ])
}

async fn run(full: bool) -> Result<(), String> {
    let fake = FakeApi::new();
    let scenarios = world(&fake)?;
    let tandem = Running::start_with(&fake, "tandem-load", &[], "info").await;
    let cert_dir = tandem.dir.path().join("certs");
    let baseline = Baseline::start(&cert_dir)?;
    let ca = std::fs::read_to_string(cert_dir.join("ca.crt")).map_err(|e| e.to_string())?;
    let client = harness::client_tls(&[&ca]);
    let servers = [("tandem", tandem.webhook), ("parse-only", baseline.addr)];
    let pids = [tandem.pid(), baseline.child.id()];

    // Every scenario answered as it must be, by both.
    for scenario in &scenarios {
        for (server, addr) in servers {
            let expect = load::Expect {
                uid: Some(scenario.uid.clone()),
                allowed: true,
            };
            let run = load::drive(addr, &client, &scenario.request, &expect, 64).await?;
            if run.failures > 0 {
                return Err(format!(
                    "{server}, {}: {} of 64 failed: {:?}",
                    scenario.name, run.failures, run.examples
                ));
            }
        }
    }
    if !full {
        println!(
            "binary load smoke run: both processes answered every scenario as expected \
             (cargo bench --bench binary_load for the wrk run)"
        );
        return Ok(());
    }

    let wrk = wrk()?;
    let ticks_per_second: f64 = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    let turns = env_number("TURNS", 3);
    let seconds = env_number("SECONDS", 5);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    println!(
        "binary load run: wrk -t2 -c32 -d{seconds}s --latency over TLS keep-alive on loopback, \
         {turns} turns per server and scenario, the servers alternating; tandem serve --dev \
         (release, RUST_LOG=info, the default level) against the in-memory API server; parse-only in a \
         process of its own\n"
    );
    let only = std::env::var("SCENARIO").unwrap_or_default();
    let mut table = Vec::new();
    for (index, scenario) in scenarios
        .iter()
        .enumerate()
        .filter(|(_, s)| s.name.contains(only.as_str()))
    {
        let body = dir.path().join(format!("body-{index}.json"));
        std::fs::write(&body, &scenario.request.body).map_err(|e| e.to_string())?;
        let script = dir.path().join(format!("post-{index}.lua"));
        std::fs::write(
            &script,
            format!(
                "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
                 local f = io.open(\"{}\", \"rb\")\nwrk.body = f:read(\"*a\")\nf:close()\n",
                body.display()
            ),
        )
        .map_err(|e| e.to_string())?;
        // A warm-up per server (not counted), then the turns.
        for (_, addr) in &servers {
            let url = format!("https://{addr}{}", scenario.request.path);
            run_wrk(&wrk, &script, &url, 2)?;
        }
        let mut results: Vec<Vec<Wrk>> = vec![Vec::new(), Vec::new()];
        for _ in 0..turns {
            for (server, (_, addr)) in servers.iter().enumerate() {
                let url = format!("https://{addr}{}", scenario.request.path);
                let before = cpu_ticks(pids[server]);
                let mut run = run_wrk(&wrk, &script, &url, seconds)?;
                let used = cpu_ticks(pids[server]).saturating_sub(before);
                run.cpu_us = used as f64 * 1e6 / ticks_per_second / run.requests.max(1) as f64;
                results[server].push(run);
            }
        }
        println!(
            "{} (POST {}, {} byte body)",
            scenario.name,
            scenario.request.path,
            scenario.request.body.len()
        );
        println!(
            "  server        req/s (mean of turns)   p99 µs (median of turns)   CPU µs per request   each turn's req/s"
        );
        let mut summary = Vec::new();
        for (server, (name, _)) in servers.iter().enumerate() {
            let runs = &results[server];
            let failures: u64 = runs.iter().map(|r| r.non_2xx + r.errors).sum();
            if failures > 0 {
                return Err(format!(
                    "{name}, {}: {failures} failed requests",
                    scenario.name
                ));
            }
            let throughput = runs.iter().map(|r| r.throughput).sum::<f64>() / runs.len() as f64;
            let mut p99: Vec<f64> = runs.iter().map(|r| r.p99_us).collect();
            p99.sort_by(f64::total_cmp);
            let p99 = p99[p99.len() / 2];
            let cpu = runs.iter().map(|r| r.cpu_us).sum::<f64>() / runs.len() as f64;
            let each: Vec<String> = runs
                .iter()
                .map(|r| format!("{:.0}", r.throughput))
                .collect();
            println!(
                "  {name:<12} {throughput:>12.0}          {p99:>12.0}               {cpu:>8.1}            {}",
                each.join(" ")
            );
            summary.push((throughput, p99, cpu));
        }
        let (throughput, p99, cpu) = (
            summary[0].0 / summary[1].0,
            summary[0].1 / summary[1].1,
            summary[0].2 / summary[1].2,
        );
        println!(
            "  tandem/parse-only: throughput {throughput:.2}x (target >= 0.8x), p99 {p99:.2}x (target <= 1.2x), CPU per request {cpu:.2}x\n"
        );
        table.push((scenario.name, throughput, p99, cpu));
    }
    println!(
        "| scenario | tandem / parse-only throughput (>= 0.8) | p99 (<= 1.2) | CPU per request |"
    );
    println!("|---|---|---|---|");
    for (name, throughput, p99, cpu) in table {
        println!("| {name} | {throughput:.2} | {p99:.2} | {cpu:.2} |");
    }
    let (peak, now) = memory(tandem.pid());
    println!(
        "\ntandem serve after the run: peak RSS (VmHWM) {:.1} MiB, RSS now {:.1} MiB",
        peak as f64 / 1024.0,
        now as f64 / 1024.0
    );
    Ok(())
}

/// What one wrk run measured, and the CPU time the server spent per request
/// meanwhile (user and system, from `/proc/PID/stat`).
struct Wrk {
    requests: u64,
    throughput: f64,
    p99_us: f64,
    non_2xx: u64,
    errors: u64,
    cpu_us: f64,
}

/// User and system CPU time of a process so far, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after it.
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// wrk on PATH, installed from Debian's packages when missing.
fn wrk() -> Result<String, String> {
    let found = |name: &str| Command::new(name).arg("--version").output().is_ok();
    if !found("wrk") {
        eprintln!("wrk is missing: apt-get install -y wrk");
        let installed = Command::new("apt-get")
            .args(["install", "-y", "wrk"])
            .status()
            .map_err(|e| format!("apt-get: {e}"))?;
        if !installed.success() || !found("wrk") {
            return Err("wrk is not installed and apt-get could not install it".to_owned());
        }
    }
    Ok("wrk".to_owned())
}

fn run_wrk(wrk: &str, script: &Path, url: &str, seconds: u64) -> Result<Wrk, String> {
    let output = Command::new(wrk)
        .args(["-t2", "-c32", &format!("-d{seconds}s"), "--latency", "-s"])
        .arg(script)
        .arg(url)
        .output()
        .map_err(|e| format!("wrk: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "wrk {url}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse_wrk(&text).ok_or_else(|| format!("wrk's output not understood:\n{text}"))
}

/// Reads `Requests/sec:`, the 99% latency line of `--latency`, `Non-2xx or
/// 3xx responses:` and `Socket errors:` from wrk's report.
fn parse_wrk(text: &str) -> Option<Wrk> {
    let mut requests = None;
    let mut throughput = None;
    let mut p99_us = None;
    let mut non_2xx = 0;
    let mut errors = 0;
    for line in text.lines().map(str::trim) {
        if line.contains(" requests in ") {
            requests = line.split_whitespace().next().and_then(|n| n.parse().ok());
        }
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            throughput = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix("99%") {
            p99_us = duration_us(rest.trim());
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = rest.trim().parse().ok()?;
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            errors = rest
                .split(',')
                .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
                .sum();
        }
    }
    Some(Wrk {
        requests: requests?,
        throughput: throughput?,
        p99_us: p99_us?,
        non_2xx,
        errors,
        cpu_us: 0.0,
    })
}

/// wrk's durations: `812.00us`, `3.61ms`, `1.02s`.
fn duration_us(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    match unit {
        "us" => Some(number),
        "ms" => Some(number * 1_000.0),
        "s" => Some(number * 1_000_000.0),
        _ => None,
    }
}
