//! The admission load client, shared by `benches/admission_load.rs` and the
//! resilience tests: HTTP/1.1 keep-alive connections over TLS on loopback,
//! every response checked. [`drive`] sends a fixed number of requests over
//! connections opened beforehand; [`rotate_under_load`] keeps connections
//! reconnecting (so new handshakes happen throughout) while it swaps the
//! serving certificate the way kubelet updates a mounted Secret.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::sync::Barrier;

/// Keep-alive connections driving a server at once.
pub const CONNECTIONS: usize = 32;

/// One kind of request.
#[derive(Clone)]
pub struct Request {
    pub path: &'static str,
    pub body: Bytes,
}

/// What a response must be for the request to count as served.
#[derive(Clone)]
pub struct Expect {
    /// `response.uid`, when the server echoes it (the bare handler does not).
    pub uid: Option<String>,
    pub allowed: bool,
}

/// The outcome of a number of requests against one server.
pub struct Run {
    pub wall: Duration,
    /// Latency of each served request, nanoseconds, sorted.
    pub latencies: Vec<u64>,
    pub failures: usize,
    /// The first few failures, for the report.
    pub examples: Vec<String>,
}

impl Run {
    pub fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }

    /// Nearest-rank percentile, in microseconds.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = (p * self.latencies.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies.len()) - 1;
        self.latencies[index] as f64 / 1_000.0
    }
}

/// Sends `requests` copies of `request` over [`CONNECTIONS`] keep-alive
/// connections opened beforehand (handshakes are not timed).
pub async fn drive(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
    request: &Request,
    expect: &Expect,
    requests: usize,
) -> Result<Run, String> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(CONNECTIONS + 1));
    let mut connections = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let (sender, _) = connect(addr, client).await?;
        connections.push(tokio::spawn(connection(
            sender,
            request.clone(),
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

pub type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Opens a connection: TCP, TLS, HTTP/1.1. Returns the sender and the leaf
/// certificate the server presented in the handshake.
pub async fn connect(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
) -> Result<(Sender, CertificateDer<'static>), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(client.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
    let presented = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or("the server presented no certificate")?
        .clone()
        .into_owned();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {addr}: {e}"))?;
    tokio::spawn(connection);
    Ok((sender, presented))
}

/// One request on an open connection; the latency in nanoseconds, or why it
/// failed (and whether the connection is broken).
pub async fn send(
    sender: &mut Sender,
    request: &Request,
    expect: &Expect,
) -> Result<u64, (String, bool)> {
    let http = hyper::Request::post(request.path)
        .header(http::header::HOST, "localhost")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(request.body.clone()))
        .map_err(|e| (format!("request: {e}"), false))?;
    let sent = Instant::now();
    let response = sender
        .send_request(http)
        .await
        .map_err(|e| (format!("send: {e}"), true))?;
    let status = response.status();
    let reply = response
        .into_body()
        .collect()
        .await
        .map_err(|e| (format!("body: {e}"), true))?
        .to_bytes();
    let latency = sent.elapsed();
    check(status.as_u16(), &reply, expect).map_err(|reason| (reason, false))?;
    Ok(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX))
}

/// One connection's share: takes request numbers until `requests` are taken.
/// Returns the latencies of served requests (ns) and what went wrong with the
/// others. A broken connection stops; its remaining share goes to the others.
async fn connection(
    mut sender: Sender,
    request: Request,
    expect: Expect,
    requests: usize,
    next: Arc<AtomicUsize>,
    start: Arc<Barrier>,
) -> (Vec<u64>, Vec<String>) {
    let mut served = Vec::new();
    let mut failed = Vec::new();
    start.wait().await;
    while next.fetch_add(1, Ordering::Relaxed) < requests {
        match send(&mut sender, &request, &expect).await {
            Ok(latency) => served.push(latency),
            Err((reason, broken)) => {
                failed.push(reason);
                if broken {
                    break;
                }
            }
        }
    }
    (served, failed)
}

/// HTTP 200, an AdmissionReview whose response has the expected verdict and,
/// when the server echoes it, uid.
pub fn check(status: u16, reply: &[u8], expect: &Expect) -> Result<(), String> {
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

/// Writes a certificate pair the way kubelet updates a mounted Secret: a new
/// timestamped directory, then an atomic swap of the `..data` symlink.
pub fn kubelet_swap(
    dir: &Path,
    generation: usize,
    bundle: &tandem::certs::Bundle,
) -> std::io::Result<()> {
    let data = dir.join(format!("..2026_11_21_{generation:02}"));
    std::fs::create_dir(&data)?;
    std::fs::write(data.join("tls.crt"), &bundle.cert_pem)?;
    std::fs::write(data.join("tls.key"), &bundle.key_pem)?;
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(data.file_name().unwrap_or_default(), &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))
}

/// Lays out `dir` as kubelet mounts a Secret holding `bundle`: `..data`
/// pointing at a timestamped directory, `tls.crt` and `tls.key` pointing
/// into `..data`.
pub fn kubelet_mount(dir: &Path, bundle: &tandem::certs::Bundle) -> std::io::Result<()> {
    kubelet_swap(dir, 1, bundle)?;
    for file in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(format!("..data/{file}"), dir.join(file))?;
    }
    Ok(())
}

/// The leaf certificate of a PEM chain.
pub fn leaf(pem: &str) -> Result<CertificateDer<'static>, String> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("certificate PEM: {e}"))
}

/// What a load run that swapped the serving certificate midway saw.
pub struct RotationRun {
    /// Every request of the run, those after the swap included.
    pub run: Run,
    /// TLS handshakes made in all.
    pub handshakes: usize,
    /// Handshakes that began after the server had loaded the new certificate,
    /// and how many of those were presented it.
    pub handshakes_after_reload: usize,
    pub new_certificate_after_reload: usize,
    /// Handshakes that began before the reload and were presented the old
    /// certificate.
    pub old_certificate_before_reload: usize,
    /// Handshakes presented the old certificate on a connection slot that
    /// had already been presented the new one (a step back).
    pub old_after_new: usize,
    /// From the symlink swap to the server serving the new certificate.
    pub reload: Duration,
}

/// Drives `requests` copies of `request` at `addr` over [`CONNECTIONS`]
/// connections that each reconnect (a new handshake) every
/// `reconnect_every` requests; once a third of the requests are taken,
/// swaps the certificate in `cert_dir` (laid out by [`kubelet_mount`]) for
/// `next`, kubelet-style, and waits until `served_leaf` reports it. Every
/// connection slot keeps going until it has made a handshake after that, so
/// new handshakes after the reload are always seen. Fails if the server does
/// not serve the new certificate within 10 s.
#[allow(clippy::too_many_arguments)]
pub async fn rotate_under_load(
    addr: SocketAddr,
    client: &Arc<rustls::ClientConfig>,
    request: &Request,
    expect: &Expect,
    requests: usize,
    reconnect_every: usize,
    cert_dir: &Path,
    next: &tandem::certs::Bundle,
    served_leaf: impl Fn() -> Option<CertificateDer<'static>> + Send + 'static,
) -> Result<RotationRun, String> {
    let new_leaf = leaf(&next.cert_pem)?;
    let taken = Arc::new(AtomicUsize::new(0));
    let reloaded = Arc::new(AtomicBool::new(false));
    let gave_up = Arc::new(AtomicBool::new(false));
    let began = Instant::now();

    let rotator = {
        let (taken, reloaded, gave_up) = (taken.clone(), reloaded.clone(), gave_up.clone());
        let (dir, next, new_leaf) = (cert_dir.to_owned(), clone_bundle(next), new_leaf.clone());
        tokio::spawn(async move {
            while taken.load(Ordering::SeqCst) < requests / 3 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let swapped = Instant::now();
            if let Err(e) = kubelet_swap(&dir, 2, &next) {
                gave_up.store(true, Ordering::SeqCst);
                return Err(format!("swapping the certificate: {e}"));
            }
            while served_leaf().as_ref() != Some(&new_leaf) {
                if swapped.elapsed() > Duration::from_secs(10) {
                    gave_up.store(true, Ordering::SeqCst);
                    return Err("the server did not load the new certificate within 10 s".into());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let reload = swapped.elapsed();
            reloaded.store(true, Ordering::SeqCst);
            Ok(reload)
        })
    };

    let handshakes = Arc::new(Mutex::new(Vec::new()));
    let mut slots = Vec::with_capacity(CONNECTIONS);
    for slot in 0..CONNECTIONS {
        let (taken, reloaded, gave_up, handshakes) = (
            taken.clone(),
            reloaded.clone(),
            gave_up.clone(),
            handshakes.clone(),
        );
        let (client, request, expect, new_leaf) = (
            client.clone(),
            request.clone(),
            expect.clone(),
            new_leaf.clone(),
        );
        slots.push(tokio::spawn(async move {
            let mut served = Vec::new();
            let mut failed = Vec::new();
            let mut seen_new = false;
            let mut old_after_new = 0;
            loop {
                let after_reload = reloaded.load(Ordering::SeqCst);
                let done = taken.load(Ordering::SeqCst) >= requests;
                // A server that keeps failing ends the slot instead of a loop.
                let broken = failed.len() > 100;
                if broken || gave_up.load(Ordering::SeqCst) || (done && seen_new && after_reload) {
                    break;
                }
                let (mut sender, presented) = match connect(addr, &client).await {
                    Ok(connected) => connected,
                    Err(e) => {
                        failed.push(e);
                        taken.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                };
                let is_new = presented == new_leaf;
                if seen_new && !is_new {
                    old_after_new += 1;
                }
                seen_new |= is_new && after_reload;
                handshakes.lock().unwrap_or_else(|p| p.into_inner()).push((
                    slot,
                    after_reload,
                    is_new,
                ));
                // At least one request on every connection, so a handshake
                // after the reload is proven to carry traffic.
                for sent in 0..reconnect_every {
                    if sent > 0 && taken.load(Ordering::SeqCst) >= requests {
                        break;
                    }
                    taken.fetch_add(1, Ordering::SeqCst);
                    match send(&mut sender, &request, &expect).await {
                        Ok(latency) => served.push(latency),
                        Err((reason, broken)) => {
                            failed.push(reason);
                            if broken {
                                break;
                            }
                        }
                    }
                }
            }
            (served, failed, old_after_new)
        }));
    }

    let mut latencies = Vec::new();
    let mut examples = Vec::new();
    let mut failures = 0;
    let mut old_after_new = 0;
    for slot in slots {
        let (served, failed, stepped_back) = slot.await.map_err(|e| format!("client task: {e}"))?;
        latencies.extend(served);
        failures += failed.len();
        old_after_new += stepped_back;
        for failure in failed {
            if examples.len() < 5 {
                examples.push(failure);
            }
        }
    }
    let wall = began.elapsed();
    let reload = rotator.await.map_err(|e| format!("rotator task: {e}"))??;
    latencies.sort_unstable();
    let handshakes = handshakes.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let after: Vec<_> = handshakes.iter().filter(|(_, after, _)| *after).collect();
    Ok(RotationRun {
        run: Run {
            wall,
            latencies,
            failures,
            examples,
        },
        handshakes: handshakes.len(),
        handshakes_after_reload: after.len(),
        new_certificate_after_reload: after.iter().filter(|(_, _, new)| *new).count(),
        old_certificate_before_reload: handshakes
            .iter()
            .filter(|(_, after, new)| !after && !new)
            .count(),
        old_after_new,
        reload,
    })
}

fn clone_bundle(bundle: &tandem::certs::Bundle) -> tandem::certs::Bundle {
    tandem::certs::Bundle {
        ca_pem: bundle.ca_pem.clone(),
        ca_key_pem: bundle.ca_key_pem.clone(),
        cert_pem: bundle.cert_pem.clone(),
        key_pem: bundle.key_pem.clone(),
    }
}
