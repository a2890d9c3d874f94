//! The webhook under stress, over real TLS on loopback: the serving
//! certificate rotated while the admission load client is running (no request
//! fails, new handshakes get the new certificate), and the real `tandem serve`
//! binary sent SIGTERM under load (requests in flight complete with valid
//! AdmissionReviews, new connections are refused cleanly and never hang, the
//! process exits 0). Nothing here asserts on how long anything took; time
//! limits only turn a hang into a failure.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::SinkExt;
use harness::load::{self, Expect, Request};
use harness::*;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;

/// Turns a hang into a failure; never an assertion on speed.
const HANG: Duration = Duration::from_secs(30);

fn create_review() -> (Request, Expect) {
    let service = yaml_documents(&repo_path("examples/seeds/story2-prefill-decode.yaml")).remove(0);
    let review = review("CREATE", &service, None);
    let uid = review["request"]["uid"].as_str().unwrap().to_owned();
    (
        Request {
            path: "/validate/inferenceservices",
            body: Bytes::from(serde_json::to_vec(&review).unwrap()),
        },
        Expect {
            uid: Some(uid),
            allowed: true,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_rotates_under_load_without_a_failed_request() {
    let dir = tempfile::tempdir().unwrap();
    let first = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1).unwrap();
    let second = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1).unwrap();
    load::kubelet_mount(dir.path(), &first).unwrap();
    let server = tandem::server::Server::start(
        options(dir.path()),
        Arc::new(tandem::admission::lookup::Blind),
        Arc::new(AtomicBool::new(true)),
    )
    .await
    .unwrap();
    let client = client_tls(&[&first.ca_pem, &second.ca_pem]);
    let (request, expect) = create_review();
    let certificates = server.certificates.clone();
    let rotated = tokio::time::timeout(
        HANG,
        load::rotate_under_load(
            server.webhook_addr,
            &client,
            &request,
            &expect,
            600,
            10,
            dir.path(),
            &second,
            move || certificates.current_leaf(),
        ),
    )
    .await
    .expect("the load run ends")
    .expect("the load run works");

    let run = &rotated.run;
    assert_eq!(run.failures, 0, "failed requests: {:?}", run.examples);
    assert!(run.latencies.len() >= 600, "{} served", run.latencies.len());
    assert!(
        rotated.old_certificate_before_reload > 0,
        "handshakes before the swap were presented the first certificate"
    );
    assert!(
        rotated.handshakes_after_reload >= load::CONNECTIONS,
        "every connection slot reconnected after the reload ({} handshakes)",
        rotated.handshakes_after_reload
    );
    assert_eq!(
        rotated.new_certificate_after_reload, rotated.handshakes_after_reload,
        "every handshake after the reload was presented the new certificate"
    );
    assert_eq!(rotated.old_after_new, 0, "no connection stepped back");
    assert_eq!(
        server.certificates.current_leaf(),
        Some(load::leaf(&second.cert_pem).unwrap())
    );
    server.shutdown();
    server.finished().await.unwrap();
}

/// `tandem serve --dev` on loopback ports the kernel picks, without a
/// cluster; its log lines (JSON) are collected as they come.
struct Binary {
    child: Child,
    webhook: SocketAddr,
    probe: SocketAddr,
    ca_pem: String,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Binary {
    fn start() -> Binary {
        let dir = tempfile::tempdir().unwrap();
        let cert_dir = dir.path().join("certs");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["serve", "--log-format", "json", "--dev"])
            .arg("--cert-dir")
            .arg(&cert_dir)
            .args(["--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"])
            // Requests are held open on purpose: no timeout may cut them.
            .args(["--request-timeout-ms", "60000"])
            .args(["--shutdown-grace-seconds", "30"])
            // No cluster: admission only.
            .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tandem serve starts");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addrs, found) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Ok(entry) = serde_json::from_str::<Value>(&line) {
                        let fields = &entry["fields"];
                        if fields["message"] == "serving admission webhooks" {
                            let addr = |key: &str| fields[key].as_str().unwrap().parse().unwrap();
                            let _ = addrs.send((addr("webhook_addr"), addr("probe_addr")));
                        }
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let (webhook, probe) = found.recv_timeout(HANG).unwrap_or_else(|_| {
            panic!(
                "tandem serve never said where it serves: {:?}",
                log.lock().unwrap()
            )
        });
        let ca_pem = std::fs::read_to_string(cert_dir.join("ca.crt")).unwrap();
        Binary {
            child,
            webhook,
            probe,
            ca_pem,
            log,
            _dir: dir,
        }
    }

    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -TERM failed");
    }

    fn logged(&self, message: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(message))
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        // Only if the test failed before the process exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type BodySender = futures::channel::mpsc::Sender<Result<Frame<Bytes>, std::convert::Infallible>>;

/// A request whose head and first half of the body are sent: in flight.
async fn half_sent(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    request: &Request,
) -> (
    BodySender,
    Bytes,
    tokio::task::JoinHandle<Result<(u16, Bytes), String>>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let (mut body, rx) = futures::channel::mpsc::channel(4);
    let http = hyper::Request::post(request.path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("content-length", request.body.len())
        .body(StreamBody::new(rx))
        .unwrap();
    let response = tokio::spawn(async move {
        let response = sender
            .send_request(http)
            .await
            .map_err(|e| error_chain(&e))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| error_chain(&e))?
            .to_bytes();
        Ok((status, bytes))
    });
    let half = request.body.len() / 2;
    body.send(Ok(Frame::data(request.body.slice(..half))))
        .await
        .unwrap();
    (body, request.body.slice(half..), response)
}

/// What became of one attempt to open a new connection and be served.
#[derive(Debug, PartialEq)]
enum Attempt {
    Served,
    Refused(String),
}

/// Connect, handshake, one request. A served request must be a valid review;
/// anything else must be a connection-level refusal; a hang fails the test.
async fn attempt(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    request: &Request,
    expect: &Expect,
) -> Attempt {
    let tried = tokio::time::timeout(HANG, async {
        let (mut sender, _) = load::connect(addr, tls).await?;
        load::send(&mut sender, request, expect)
            .await
            .map(|_| ())
            .map_err(|(reason, broken)| {
                assert!(
                    broken,
                    "an answer that is not a valid AdmissionReview: {reason}"
                );
                reason
            })
    })
    .await
    .expect("a new connection during shutdown hangs");
    match tried {
        Ok(()) => Attempt::Served,
        Err(reason) => Attempt::Refused(reason),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_finishes_what_is_in_flight_refuses_the_rest_and_exits_0() {
    let binary = Binary::start();
    let tls = client_tls(&[&binary.ca_pem]);
    let (request, expect) = create_review();
    let addr = binary.webhook;

    // Load: keep-alive connections sending back to back until they break.
    let served = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load_tasks = Vec::new();
    for _ in 0..8 {
        let (tls, request, expect, served, stop) = (
            tls.clone(),
            request.clone(),
            expect.clone(),
            served.clone(),
            stop.clone(),
        );
        load_tasks.push(tokio::spawn(async move {
            let (mut sender, _) = load::connect(addr, &tls)
                .await
                .expect("connects before SIGTERM");
            while !stop.load(Ordering::SeqCst) {
                match load::send(&mut sender, &request, &expect).await {
                    Ok(_) => {
                        served.fetch_add(1, Ordering::SeqCst);
                    }
                    // The connection was closed by the drain: clean, and the end.
                    Err((reason, true)) => return Some(reason),
                    Err((reason, false)) => panic!("an invalid answer under load: {reason}"),
                }
            }
            None
        }));
    }
    // Requests in flight: head and half a body sent.
    let mut in_flight = Vec::new();
    for _ in 0..4 {
        in_flight.push(half_sent(addr, tls.clone(), &request).await);
    }
    tokio::time::timeout(HANG, async {
        while served.load(Ordering::SeqCst) < 50 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the load gets served");

    binary.terminate();
    // Draining: /readyz says so (the probe port stays up until the drain ends).
    tokio::time::timeout(HANG, async {
        while probe(binary.probe, "/readyz").await.map(|(code, _)| code) != Ok(503) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("/readyz turns 503 after SIGTERM");

    // New connections: each is refused or closed cleanly (or, racing the
    // listener's close, served properly); until one is refused.
    let mut attempts = Vec::new();
    loop {
        let outcome = attempt(addr, &tls, &request, &expect).await;
        let refused = matches!(outcome, Attempt::Refused(_));
        attempts.push(outcome);
        if refused {
            break;
        }
        assert!(
            attempts.len() < 200,
            "new connections are still served: {attempts:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let Some(Attempt::Refused(reason)) = attempts.last() else {
        unreachable!("the loop ends on a refusal")
    };
    assert!(
        reason.starts_with("connect ")
            || reason.starts_with("TLS handshake")
            || reason.starts_with("send:"),
        "refused at connect, handshake or first request: {reason}"
    );

    // The requests in flight complete, with valid reviews.
    for (mut body, rest, response) in in_flight {
        body.send(Ok(Frame::data(rest))).await.unwrap();
        drop(body);
        let (status, reply) = tokio::time::timeout(HANG, response)
            .await
            .expect("an in-flight request completes")
            .unwrap()
            .expect("an in-flight request is answered");
        assert_eq!(status, 200);
        load::check(status, &reply, &expect).expect("a valid AdmissionReview");
    }
    // The load's connections were closed by the drain, each cleanly.
    stop.store(true, Ordering::SeqCst);
    for task in load_tasks {
        tokio::time::timeout(HANG, task)
            .await
            .expect("a load connection hangs")
            .unwrap();
    }

    let exit = tokio::task::spawn_blocking(move || {
        let mut binary = binary;
        let status = binary.child.wait();
        (binary, status)
    });
    let (binary, status) = tokio::time::timeout(HANG, exit)
        .await
        .expect("tandem serve exits after draining")
        .unwrap();
    assert!(status.unwrap().success(), "exit status 0");
    assert!(binary.logged("shutting down: finishing in-flight requests"));
}
