//! The endpoint pickers Tandem configures, run for real: built from their
//! released Go modules (`tests/cluster/build-pickers.sh`) and started as
//! processes against the tests' control plane with the arguments,
//! environment and configuration file of the Deployment and ConfigMap that
//! Tandem wrote, as the ServiceAccount Tandem made for them (a client
//! certificate of that account, so Tandem's RoleBindings are all they have).
//!
//! What a process cannot take as written is replaced, and only that: the
//! three port numbers (each picker gets free loopback ports, so pickers of
//! concurrent scenarios do not collide) and the directory the ConfigMap is
//! mounted at (its files are written to a directory of the test's). The
//! Downward API's `metadata.namespace` and `metadata.name` become the
//! Deployment's namespace and the pod name the test gives the process.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

use super::control_plane::ControlPlane;
use super::free_port;
use super::modules::{built_by, go_module_dir};
use super::supervision::Supervised;

/// The flags whose values are ports the picker listens on.
const PORT_FLAGS: [&str; 3] = ["--grpc-port", "--grpc-health-port", "--metrics-port"];

/// `grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING`.
pub const SERVING: i32 = 1;

/// Why the pickers cannot be built here, or None when they can: llm-d's
/// links libzmq and an embedded Python through cgo, so their headers must
/// be installed (Debian's libzmq3-dev and python3-dev, found with
/// pkg-config; `.ci/run` installs them). Without them the tests that run
/// the pickers print that they are skipped; with `CI=true` that fails.
pub fn unavailable() -> Option<String> {
    let missing: Vec<&str> = [("libzmq", "libzmq3-dev"), ("python3-embed", "python3-dev")]
        .into_iter()
        .filter(|(library, _)| {
            !Command::new("pkg-config")
                .args(["--exists", library])
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(|(_, package)| package)
        .collect();
    let reason = (!missing.is_empty()).then(|| {
        format!(
            "pkg-config finds no {}: llm-d's endpoint picker links libzmq and an embedded Python \
             through cgo; install Debian's {} (and pkg-config), as .ci/run does (tests/cluster/README.md)",
            missing.join(" or "),
            missing.join(" ")
        )
    });
    crate::failed_under_ci("the endpoint pickers cannot be built", reason)
}

/// The directory of the pickers `tests/cluster/build-pickers.sh` builds,
/// built or found in its cache once per test binary.
pub fn binaries() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| built_by("tests/cluster/build-pickers.sh"))
}

/// The version of `module` that `tests/cluster/<dir>/go.mod` requires.
pub fn module_version(dir: &str, module: &str) -> String {
    let path = super::repo_path(&format!("tests/cluster/{dir}/go.mod"));
    let text = std::fs::read_to_string(&path).expect("the pickers' go.mod");
    text.lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            let first = words.next()?;
            let (name, version) = if first == "require" {
                (words.next()?, words.next()?)
            } else {
                (first, words.next()?)
            };
            (name == module).then(|| version.to_owned())
        })
        .unwrap_or_else(|| panic!("{} requires no {module}", path.display()))
}

/// The image `repository:VERSION` of the release of `module` that
/// `tests/cluster/<dir>/go.mod` requires, held to `named`, the image Tandem
/// names for it: the picker the tests build is the one Tandem runs.
pub fn released_image(dir: &str, module: &str, repository: &str, named: &str) -> String {
    let image = format!("{repository}:{}", module_version(dir, module));
    assert_eq!(
        image, named,
        "Tandem names {named}; the tests build {module} of {image}"
    );
    image
}

/// Where the Go module cache holds `module` as `tests/cluster/<dir>/go.mod`
/// requires it (the pickers' build downloaded it, held to go.sum).
pub fn module_dir(dir: &str, module: &str) -> PathBuf {
    go_module_dir(&format!("tests/cluster/{dir}"), module)
}

/// The endpoints a picker holds, as far as its log tells.
#[derive(Debug, PartialEq, Eq)]
pub enum Held {
    /// The addresses of the endpoints it holds now.
    Addresses(BTreeSet<String>),
    /// The names of the pods whose endpoints it holds now.
    Pods(BTreeSet<String>),
}

/// One endpoint picker process.
pub struct RunningPicker {
    process: Supervised,
    binary: String,
    pub name: String,
    pub health: u16,
    pub metrics: u16,
    pub ext_proc: u16,
}

impl RunningPicker {
    /// Starts `binary` (of [`binaries`]) as the container `container` of
    /// `deployment`'s pod template would run, as pod `pod_name`, with the
    /// files of `config_map` where the template mounts it.
    pub fn start(
        plane: &ControlPlane,
        binary: &str,
        deployment: &Value,
        container: &str,
        config_map: &Value,
        pod_name: &str,
    ) -> RunningPicker {
        let namespace = deployment["metadata"]["namespace"]
            .as_str()
            .expect("the Deployment's namespace");
        let pod = &deployment["spec"]["template"]["spec"];
        let spec = pod["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == container)
            .unwrap_or_else(|| panic!("no container {container} in {pod}"));
        let account = pod["serviceAccountName"]
            .as_str()
            .expect("the picker's ServiceAccount");

        let dir = plane.dir.join("pickers").join(pod_name);
        std::fs::create_dir_all(&dir).expect("the picker's directory");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            plane.service_account_kubeconfig(namespace, account),
        )
        .expect("the picker's kubeconfig");

        // The ConfigMap's files, where the container would see them.
        let config_name = config_map["metadata"]["name"].as_str().expect("a name");
        let volume = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["configMap"]["name"] == config_name)
            .and_then(|v| v["name"].as_str())
            .unwrap_or_else(|| panic!("the pod mounts no ConfigMap {config_name}"));
        let mount_path = spec["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == volume)
            .and_then(|m| m["mountPath"].as_str())
            .unwrap_or_else(|| panic!("container {container} does not mount {volume}"));
        let files = dir.join("config");
        std::fs::create_dir_all(&files).expect("the config directory");
        for (key, text) in config_map["data"].as_object().into_iter().flatten() {
            std::fs::write(files.join(key), text.as_str().expect("text data"))
                .expect("a config file");
        }

        let (health, metrics, ext_proc) = (free_port(), free_port(), free_port());
        let port_of = |flag: &str| match flag {
            "--grpc-port" => ext_proc,
            "--grpc-health-port" => health,
            _ => metrics,
        };
        let written: Vec<String> = spec["args"]
            .as_array()
            .expect("the container's args")
            .iter()
            .map(|a| a.as_str().expect("a string arg").to_owned())
            .collect();
        let mut args = Vec::with_capacity(written.len());
        let mut next_is_port = None;
        for arg in written {
            if let Some(flag) = next_is_port.take() {
                args.push(port_of(flag).to_string());
                continue;
            }
            if let Some(flag) = PORT_FLAGS.iter().find(|f| **f == arg) {
                next_is_port = Some(*flag);
                args.push(arg);
                continue;
            }
            if let Some(flag) = PORT_FLAGS
                .iter()
                .find(|f| arg.starts_with(&format!("{f}=")))
            {
                args.push(format!("{flag}={}", port_of(flag)));
                continue;
            }
            args.push(arg.replace(mount_path, &files.display().to_string()));
        }

        let mut env = vec![("KUBECONFIG".to_owned(), kubeconfig.display().to_string())];
        for entry in spec["env"].as_array().into_iter().flatten() {
            let name = entry["name"].as_str().expect("an env name").to_owned();
            let value = match (
                &entry["value"],
                &entry["valueFrom"]["fieldRef"]["fieldPath"],
            ) {
                (Value::String(value), _) => value.clone(),
                (_, Value::String(path)) if path == "metadata.namespace" => namespace.to_owned(),
                (_, Value::String(path)) if path == "metadata.name" => pod_name.to_owned(),
                _ => panic!("an env entry the test cannot give a process: {entry}"),
            };
            env.push((name, value));
        }
        let env: Vec<(&str, String)> = env.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();

        let name = format!("picker-{pod_name}");
        let process = Supervised::start(&name, &dir, &binaries().join(binary), &args, &env);
        RunningPicker {
            process,
            binary: binary.to_owned(),
            name,
            health,
            metrics,
            ext_proc,
        }
    }

    /// What the picker logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.process.log).unwrap_or_default()
    }

    /// Fails the test, with the log's tail, if the picker has exited.
    pub fn assert_alive(&mut self) {
        assert!(
            self.process.alive(),
            "{} exited; its log:\n{}",
            self.name,
            self.process.log_tail()
        );
    }

    /// Waits up to `seconds` until the picker's gRPC health service answers
    /// SERVING for `service`, failing with the last answer and the log.
    pub async fn wait_serving(&mut self, service: &str, seconds: u64) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            self.assert_alive();
            let answer = grpc_health(self.health, service).await;
            if answer == Ok(SERVING) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: health of {service:?} not SERVING within {seconds} s (last: {answer:?}); its log:\n{}",
                self.name,
                self.process.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The gRPC health status of `service`.
    pub async fn health_of(&self, service: &str) -> Result<i32, String> {
        grpc_health(self.health, service).await
    }

    /// The endpoints the picker holds, from its log, as its release logs
    /// them at its default verbosity:
    /// - GIE v1.5.0 (`epp`) logs JSON; its data layer starts collecting from
    ///   each endpoint it adds to its datastore and stops when it removes
    ///   it, and logs both with the endpoint's address
    ///   (`pkg/epp/datalayer/collector.go`: "starting collection",
    ///   "terminating collection"): [`Held::Addresses`].
    /// - GIE v1.2.0's runner (llm-d v0.4.0's `llm-d-epp`) logs zap's console
    ///   lines; it starts a metrics refresher for each endpoint it adds and
    ///   stops it when it removes it, and logs both with the endpoint's name,
    ///   the pod's and its rank (`pkg/epp/backend/metrics/pod_metrics.go`:
    ///   "Starting refresher", "Stopping refresher"): [`Held::Pods`].
    pub fn endpoints(&self) -> Held {
        let mut addresses = BTreeSet::new();
        let mut pods = BTreeSet::new();
        for line in self.log().lines() {
            if let Ok(entry) = serde_json::from_str::<Value>(line) {
                match (entry["msg"].as_str(), entry["endpoint"].as_str()) {
                    (Some("starting collection"), Some(address)) => {
                        addresses.insert(address.to_owned());
                    }
                    (Some("terminating collection"), Some(address)) => {
                        addresses.remove(address);
                    }
                    _ => {}
                }
                continue;
            }
            // A console line: time, level, [logger,] caller, message, then
            // the fields as JSON, whose first `"name"` is the endpoint's
            // (zap writes the key `pod` twice, so it is read as text).
            let started = line.contains("\tStarting refresher\t");
            if !started && !line.contains("\tStopping refresher\t") {
                continue;
            }
            let Some(name) = line
                .split_once("\"name\":\"")
                .and_then(|(_, rest)| rest.split('"').next())
            else {
                continue;
            };
            let pod = name
                .rsplit_once("-rank-")
                .map_or(name, |(pod, _)| pod)
                .to_owned();
            if started {
                pods.insert(pod);
            } else {
                pods.remove(&pod);
            }
        }
        if self.binary == "epp" {
            Held::Addresses(addresses)
        } else {
            Held::Pods(pods)
        }
    }

    /// Stops the picker at once.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// `grpc.health.v1.Health/Check` of `service` on loopback `port`, over
/// plaintext HTTP/2 as a kubelet's gRPC probe sends it: the status of the
/// answer (`SERVING` is 1), or what went wrong.
pub async fn grpc_health(port: u16, service: &str) -> Result<i32, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::spawn(connection);
    // HealthCheckRequest { string service = 1; }, as one length-prefixed,
    // uncompressed gRPC message.
    let mut request = vec![0x0a];
    request.extend(varint(service.len() as u64));
    request.extend(service.as_bytes());
    let mut frame = vec![0u8];
    frame.extend((request.len() as u32).to_be_bytes());
    frame.extend(request);
    let call = hyper::Request::post(format!(
        "http://127.0.0.1:{port}/grpc.health.v1.Health/Check"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Full::new(Bytes::from(frame)))
    .map_err(|e| e.to_string())?;
    let response = tokio::time::timeout(Duration::from_secs(5), sender.send_request(call))
        .await
        .map_err(|_| "no answer within 5 s".to_owned())?
        .map_err(|e| format!("the call: {e}"))?;
    let headers = response.headers().clone();
    let collected = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("the answer's body: {e}"))?;
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let status = trailers
        .get("grpc-status")
        .or_else(|| headers.get("grpc-status"))
        .and_then(|s| s.to_str().ok())
        .unwrap_or("none");
    if status != "0" {
        let message = trailers
            .get("grpc-message")
            .or_else(|| headers.get("grpc-message"))
            .and_then(|m| m.to_str().ok())
            .unwrap_or_default();
        return Err(format!("grpc-status {status}: {message}"));
    }
    let body = collected.to_bytes();
    // HealthCheckResponse { ServingStatus status = 1; }: absent is 0
    // (UNKNOWN), as proto3 leaves a default out.
    match body.get(5..) {
        Some([]) => Ok(0),
        Some([0x08, rest @ ..]) => Ok(read_varint(rest).ok_or("a truncated status")? as i32),
        _ => Err(format!(
            "an answer that is not a HealthCheckResponse: {body:?}"
        )),
    }
}

/// One protobuf field of wire type 2 (length-delimited): `field`, its
/// length, its bytes.
fn delimited(field: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![(field << 3) | 2];
    out.extend(varint(bytes.len() as u64));
    out.extend(bytes);
    out
}

/// One gRPC message: uncompressed, its length, its bytes.
fn grpc_message(message: &[u8]) -> Vec<u8> {
    let mut frame = vec![0u8];
    frame.extend((message.len() as u32).to_be_bytes());
    frame.extend(message);
    frame
}

/// Sends one inference request through the picker's ext-proc stream on
/// loopback `port` as Envoy sends it (`envoy.service.ext_proc.v3`
/// `ExternalProcessor/Process`): a `ProcessingRequest` with the request's
/// headers, then one with its JSON body and `end_of_stream`. Returns, once
/// the picker answers and ends the stream, what it sent back as text (an
/// `ImmediateResponse` carries its error message as bytes; field numbers
/// from go-control-plane's `external_processor.pb.go` and `base.pb.go`),
/// or what went wrong. A request the picker queues is answered only when
/// it leaves the queue, so the caller spawns this and drops it to cancel.
pub async fn ext_proc_request(port: u16, path: &str, body: &str) -> Result<String, String> {
    // The picker starts its ext-proc server after its health server says
    // SERVING (seen a second apart on a busy machine): wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let tcp = loop {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(tcp) => break tcp,
            Err(e) if Instant::now() > deadline => return Err(format!("connect: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    // GIE serves ext-proc over TLS by default (`--secure-serving`), with a
    // certificate it makes itself at start: nothing to verify it against.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(SelfSigned(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls::pki_types::ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::spawn(connection);
    // HeaderValue { key = 1; raw_value = 3 } in a HeaderMap { headers = 1 }.
    let mut headers = Vec::new();
    for (key, value) in [
        (":method", "POST"),
        (":path", path),
        ("content-type", "application/json"),
        ("x-request-id", "tandem-test-queued"),
    ] {
        let mut header = delimited(1, key.as_bytes());
        header.extend(delimited(3, value.as_bytes()));
        headers.extend(delimited(1, &header));
    }
    // ProcessingRequest { request_headers = 2: HttpHeaders { headers = 1 } }.
    let mut frames = grpc_message(&delimited(2, &delimited(1, &headers)));
    // ProcessingRequest { request_body = 4: HttpBody { body = 1; end_of_stream = 2 } }.
    let mut http_body = delimited(1, body.as_bytes());
    http_body.extend([0x10, 0x01]);
    frames.extend(grpc_message(&delimited(4, &http_body)));
    let call = hyper::Request::post(format!(
        "http://127.0.0.1:{port}/envoy.service.ext_proc.v3.ExternalProcessor/Process"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(Full::new(Bytes::from(frames)))
    .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(call)
        .await
        .map_err(|e| format!("the call: {e}"))?;
    let collected = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("the answer's body: {e}"))?;
    Ok(String::from_utf8_lossy(&collected.to_bytes()).into_owned())
}

/// Accepts the picker's self-made certificate (a test on loopback), and
/// checks only that the handshake is signed by it.
#[derive(Debug)]
struct SelfSigned(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SelfSigned {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The value of the picker's metric `name` (the sum over its series), as
/// its `/metrics` endpoint reports it now; None when it has no series.
pub async fn picker_metric(port: u16, name: &str) -> Result<Option<f64>, String> {
    let (status, body) = super::probe(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "/metrics",
    )
    .await?;
    if status != 200 {
        return Err(format!("/metrics answered {status}"));
    }
    let mut sum = None;
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let metric = series.split('{').next().unwrap_or(series);
        if metric == name {
            let value: f64 = value
                .parse()
                .map_err(|e| format!("{line}: not a number: {e}"))?;
            sum = Some(sum.unwrap_or(0.0) + value);
        }
    }
    Ok(sum)
}

fn varint(mut value: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(byte);
            return bytes;
        }
        bytes.push(byte | 0x80);
    }
}

fn read_varint(bytes: &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}
