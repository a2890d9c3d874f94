//! The harness of Tandem's tests, one library for the three test crates
//! (`tests/unit`, `tests/fake_api`, `tests/cluster`) and the benches, so
//! that it is compiled once: CRD schemas as JSON Schema, a webhook server
//! on loopback with a fresh CA, an HTTPS client that verifies the chain,
//! AdmissionReview bodies shaped like the API server's, the in-memory API
//! server ([`fake_api`]) and the real control plane ([`control_plane`],
//! [`scenario`]). `tests/README.md` says which world answers which question.

pub mod audit;
pub mod certificates;
pub mod control_plane;
pub mod fake_api;
pub mod install;
pub mod keda;
pub mod load;
pub mod measure;
pub mod modules;
pub mod picker;
pub mod rbac;
pub mod request;
pub mod rollout;
pub mod running;
pub mod scenario;
pub mod serve;
pub mod status_patches;
pub mod supervision;
pub mod upstream;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tandem::server::{DEFAULT_BODY_LIMIT_BYTES, ServeOptions, Server};

/// Environment variable naming a directory of upstream CRDs (LWS, PodGroup,
/// Gateway API, InferencePool) laid out as [`upstream::fetched`] lays them
/// out: an override for a machine without the Go module proxy. Unset, the
/// tests take them from their Go modules.
pub const UPSTREAM_CRDS_ENV: &str = "TANDEM_UPSTREAM_CRDS";

/// The upstream CRD directory: the one the environment names, else the one
/// laid out from the pinned Go modules; or why there is none.
pub fn upstream_crds_or_why() -> Result<PathBuf, String> {
    match std::env::var_os(UPSTREAM_CRDS_ENV) {
        Some(dir) if Path::new(&dir).is_dir() => Ok(PathBuf::from(dir)),
        Some(dir) => Err(format!(
            "{UPSTREAM_CRDS_ENV}={} is not a directory",
            Path::new(&dir).display()
        )),
        None => upstream::fetched().map(Path::to_path_buf).map_err(|e| {
            format!(
                "the upstream CRDs come from their Go modules, and {e} \
                 (install Go from https://go.dev/dl and reach the Go module proxy, \
                 or set {UPSTREAM_CRDS_ENV} to a folder of them)"
            )
        }),
    }
}

/// The upstream CRD directory, or None when there is none.
pub fn upstream_crds_dir() -> Option<PathBuf> {
    upstream_crds_or_why().ok()
}

/// The upstream CRD directory, or None after printing why the caller skips;
/// with `CI=true` a skip is a failure.
pub fn upstream_crds(test: &str) -> Option<PathBuf> {
    available(test, upstream_crds_or_why())
}

/// What `test` needs, or None after printing why it skips; with `CI=true`
/// a skip is a failure.
pub fn available<T>(test: &str, found: Result<T, String>) -> Option<T> {
    match found {
        Ok(found) => Some(found),
        Err(why) => {
            failed_under_ci(&format!("{test} cannot run"), Some(why.clone()));
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// Waits until the `tandem serve` of `name` answers 200 on `/readyz` at
/// `probes` (its caches loaded), for at most `seconds`; fails with its log
/// then, or as soon as `alive` says it exited.
pub async fn wait_tandem_ready(
    name: &str,
    probes: SocketAddr,
    seconds: u64,
    alive: impl Fn() -> bool,
    log: impl Fn() -> String,
) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        if let Ok((200, _)) = probe(probes, "/readyz").await {
            return;
        }
        assert!(alive(), "tandem {name} exited; its log:\n{}", log());
        assert!(
            tokio::time::Instant::now() < deadline,
            "tandem {name} not ready within {seconds} s; its log:\n{}",
            log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `why` what the tests need is missing here, if it is: a failure with
/// `CI=true` (a test that cannot run proves nothing), else for the caller
/// to print before it skips. `what` says what cannot run.
pub fn failed_under_ci(what: &str, why: Option<String>) -> Option<String> {
    if let Some(why) = &why {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true, yet {what}: {why}"
        );
    }
    why
}

/// Turns a CRD's openAPIV3Schema into a JSON Schema (draft 4) that is stricter
/// than the API server: fields not in the schema are errors instead of being
/// pruned, so a typo in what Tandem generates cannot pass.
pub fn strict_json_schema(openapi: &Value) -> Value {
    let mut schema = openapi.clone();
    // The API server supplies apiVersion, kind and metadata at the root of
    // every kind; CRD schemas may leave them out.
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties
            .entry("apiVersion")
            .or_insert(json!({"type": "string"}));
        properties
            .entry("kind")
            .or_insert(json!({"type": "string"}));
        properties
            .entry("metadata")
            .or_insert(json!({"type": "object"}));
    }
    tighten(&mut schema);
    schema
}

fn tighten(node: &mut Value) {
    let Some(map) = node.as_object_mut() else {
        return;
    };
    let preserve = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if map.remove("x-kubernetes-int-or-string") == Some(Value::Bool(true)) {
        map.remove("type");
        map.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
    }
    if map.remove("nullable") == Some(Value::Bool(true))
        && let Some(Value::String(t)) = map.get("type").cloned()
    {
        map.insert("type".into(), json!([t, "null"]));
    }
    if map.contains_key("properties") && !map.contains_key("additionalProperties") && !preserve {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "definitions" => {
                if let Some(props) = child.as_object_mut() {
                    props.values_mut().for_each(tighten);
                }
            }
            "items" | "additionalProperties" | "not" => tighten(child),
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(list) = child.as_array_mut() {
                    list.iter_mut().for_each(tighten);
                }
            }
            _ => {}
        }
    }
}

/// A validator for objects of a CRD (by its served version's schema).
pub struct CrdSchema {
    pub kind: String,
    validator: jsonschema::Validator,
}

impl CrdSchema {
    pub fn from_crd(crd: &Value, version: Option<&str>) -> CrdSchema {
        let versions = crd["spec"]["versions"]
            .as_array()
            .expect("CRD has versions");
        let served = versions
            .iter()
            .find(|v| version.is_none_or(|want| v["name"] == want))
            .expect("CRD serves the version");
        let schema = strict_json_schema(&served["schema"]["openAPIV3Schema"]);
        CrdSchema {
            kind: crd["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            validator: jsonschema::draft4::new(&schema).expect("schema compiles"),
        }
    }

    /// Every schema error of `object`, as `path: message`.
    pub fn errors(&self, object: &Value) -> Vec<String> {
        self.validator
            .iter_errors(object)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }
}

/// Every served version of every CRD in a directory of upstream CRDs, by
/// (apiVersion, kind).
pub fn upstream_schemas(dir: &Path) -> std::collections::BTreeMap<(String, String), CrdSchema> {
    use serde::Deserialize;
    let mut schemas = std::collections::BTreeMap::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_norway::Deserializer::from_str(&text) {
            let crd = Value::deserialize(document).unwrap();
            if crd["kind"] != "CustomResourceDefinition" {
                continue;
            }
            let group = crd["spec"]["group"].as_str().unwrap().to_owned();
            for version in crd["spec"]["versions"].as_array().unwrap() {
                let name = version["name"].as_str().unwrap();
                let schema = CrdSchema::from_crd(&crd, Some(name));
                schemas.insert((format!("{group}/{name}"), schema.kind.clone()), schema);
            }
        }
    }
    schemas
}

/// `object` is exactly a `T`: it deserializes (serde_path_to_error names the
/// field that does not fit) and serializes back to itself, so no field is
/// misspelt or misplaced (the Kubernetes types ignore unknown fields).
pub fn assert_exactly<T: serde::de::DeserializeOwned + serde::Serialize>(
    name: &str,
    object: &Value,
) {
    let kind = &object["kind"];
    let typed: T = serde_path_to_error::deserialize(object).unwrap_or_else(|e| {
        panic!(
            "{name}: {kind} is not a {}: {}: {}",
            std::any::type_name::<T>(),
            e.path(),
            e.inner()
        )
    });
    let back = serde_json::to_value(typed).unwrap();
    assert_eq!(
        &back, object,
        "{name}: {kind} has fields its type does not know"
    );
}

/// Schemas of Tandem's own CRDs, by kind.
pub fn tandem_schema(kind: &str) -> CrdSchema {
    let crd = tandem::api::crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .expect("Tandem serves the kind");
    CrdSchema::from_crd(&serde_json::to_value(crd).unwrap(), None)
}

/// Points every webhook of a Validating/MutatingWebhookConfiguration, as
/// shipped (reached through a Service), at `base` (`https://127.0.0.1:PORT`)
/// by URL, trusting the CA `ca_pem`: how the tests register a webhook
/// server that runs outside any cluster.
pub fn reach_by_url(configuration: &mut Value, base: &str, ca_pem: &str) {
    use base64::Engine;
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    for webhook in configuration["webhooks"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let path = webhook["clientConfig"]["service"]["path"]
            .as_str()
            .expect("every webhook names its path")
            .to_owned();
        webhook["clientConfig"] = json!({"url": format!("{base}{path}"), "caBundle": bundle});
    }
}

/// Reads every document of a YAML file.
pub fn yaml_documents(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    tandem::render::parse_world(&path.display().to_string(), &text, "default")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `tandem render -f - -o json` with `input` on standard input.
pub fn render_json_stdin(input: &[u8]) -> std::process::Output {
    render_stdin_with(input, &["-o", "json"])
}

/// Runs `tandem render -f -` in the repository with `input` on standard input.
pub fn render_stdin(input: &[u8]) -> std::process::Output {
    render_stdin_with(input, &[])
}

/// Runs `tandem render -f - EXTRA…` in the repository with `input` on
/// standard input.
pub fn render_stdin_with(input: &[u8], extra: &[&str]) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(tandem_binary())
        .args(["render", "-f", "-"])
        .args(extra)
        .current_dir(repo_path(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tandem render starts");
    child
        .stdin
        .take()
        .expect("its standard input is piped")
        .write_all(input)
        .expect("the input is written");
    child.wait_with_output().expect("tandem render ends")
}

/// Polls `check` every `every` until it answers `Ok`, for up to `seconds`;
/// past that, panics with `what`, the last `Err` it gave and what `context`
/// tells (a log to read). What both worlds' waits are made of
/// ([`running::eventually`], [`scenario::Scenario::eventually`]).
pub async fn eventually<T, F, Fut>(
    seconds: u64,
    every: Duration,
    what: &str,
    mut check: F,
    context: impl FnOnce() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!(
                    "{what}: not within {seconds} s; last seen: {last}\n{}",
                    context()
                )
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// A port on loopback that nothing listens on now (the OS's pick for a
/// listener bound and closed at once).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// `relative` in the repository's checkout (this crate is `tests/harness`
/// in it).
pub fn repo_path(relative: &str) -> PathBuf {
    repository().join(relative)
}

fn repository() -> &'static Path {
    let harness = Path::new(env!("CARGO_MANIFEST_DIR"));
    harness
        .parent()
        .and_then(Path::parent)
        .expect("the harness is tests/harness in the checkout")
}

/// The `tandem` binary that cargo built for the test or bench now running.
/// Cargo tells only the package's own test and bench targets where it is
/// (`CARGO_BIN_EXE_tandem`), not a library they use; it puts it in the
/// profile's folder, the parent of the `deps/` folder that holds the
/// running test (what `cargo test` and `cargo bench` both do).
pub fn tandem_binary() -> &'static Path {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("the running test's path");
        let profile = exe
            .parent()
            .and_then(Path::parent)
            .expect("a test runs from <target>/<profile>/deps/");
        let binary = profile.join(format!("tandem{}", std::env::consts::EXE_SUFFIX));
        assert!(
            binary.is_file(),
            "no tandem binary at {} beside the running test {}",
            binary.display(),
            exe.display()
        );
        binary
    })
}

/// Cargo's target folder of the running test or bench (the one that holds
/// its `CACHEDIR.TAG`), for files the tests keep between runs.
pub fn target_dir() -> &'static Path {
    static TARGET: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TARGET.get_or_init(|| {
        let exe = std::env::current_exe().expect("the running test's path");
        exe.ancestors()
            .find(|dir| dir.join("CACHEDIR.TAG").is_file())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| panic!("no cargo target folder above {}", exe.display()))
    })
}

/// A webhook server on loopback ports with a fresh dev CA in a temp directory.
pub struct TestServer {
    pub server: Server,
    pub dir: tempfile::TempDir,
    pub ca_pem: String,
}

pub fn options(dir: &Path) -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        probe_listen: "127.0.0.1:0".parse().unwrap(),
        cert_dir: dir.to_owned(),
        body_limit_bytes: DEFAULT_BODY_LIMIT_BYTES,
        request_timeout: Duration::from_secs(4),
        idle_timeout: tandem::server::DEFAULT_IDLE_TIMEOUT,
        shutdown_grace: Duration::from_secs(10),
        client_ca: None,
        service_account: tandem::admission::DEFAULT_SERVICE_ACCOUNT.to_owned(),
    }
}

pub async fn start_server(adjust: impl FnOnce(&mut ServeOptions)) -> TestServer {
    start_server_seeing(
        adjust,
        std::sync::Arc::new(tandem::admission::lookup::Blind),
    )
    .await
}

/// A test server whose admission sees `lookup` (a fixed set of objects).
pub async fn start_server_seeing(
    adjust: impl FnOnce(&mut ServeOptions),
    lookup: std::sync::Arc<dyn tandem::admission::Lookup>,
) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let bundle = tandem::certs::issue(&tandem::certs::loopback_hosts(), 1).unwrap();
    tandem::certs::write(dir.path(), &bundle).unwrap();
    let mut opts = options(dir.path());
    adjust(&mut opts);
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let server = Server::start(opts, lookup, ready)
        .await
        .expect("server starts");
    TestServer {
        server,
        dir,
        ca_pem: bundle.ca_pem,
    }
}

/// A TLS client configuration that trusts exactly the given CAs.
pub fn client_tls(ca_pems: &[&str]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in ca_pems {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    // Every request is a full handshake: a resumed session reports the
    // certificate of the session it resumes, not the one served now.
    let mut config = config;
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// Like [`client_tls`], presenting a client certificate (chain and key as PEM).
pub fn client_tls_presenting(
    ca_pems: &[&str],
    cert_pem: &str,
    key_pem: &str,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in ca_pems {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// One HTTPS exchange on a new connection.
#[derive(Debug)]
pub struct Exchange {
    pub status: u16,
    pub body: Bytes,
    /// The leaf certificate the server presented in this handshake.
    pub presented: CertificateDer<'static>,
}

impl Exchange {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// POSTs `body` to `path` over a fresh TLS connection to `localhost`, verifying
/// the server's chain against `tls`.
pub async fn post(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    path: &str,
    body: Vec<u8>,
) -> Result<Exchange, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(tls);
    let stream = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let presented = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first().cloned())
        .ok_or("no certificate presented")?
        .into_owned();
    let request = hyper::Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let (status, body) = exchange(stream, request).await?;
    Ok(Exchange {
        status,
        body,
        presented,
    })
}

/// One HTTP/1.1 request over an open connection: status and body.
pub async fn exchange<I>(
    io: I,
    mut request: hyper::Request<Full<Bytes>>,
) -> Result<(u16, Bytes), String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("http handshake: {e}"))?;
    tokio::spawn(connection);
    request
        .headers_mut()
        .insert("host", http::HeaderValue::from_static("localhost"));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {}", error_chain(&e)))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok((status, body))
}

/// An error and its sources, `: `-separated (hyper hides the TLS alert that
/// closed a connection in a source).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// GETs a path of the plain probe port.
pub async fn probe(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let request = hyper::Request::get(path)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = exchange(tcp, request).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The group, version and plural resource of one of Tandem's kinds.
pub fn gvr(kind: &str) -> (&'static str, &'static str, &'static str) {
    match kind {
        "InferenceService" => ("fusioninfer.io", "v1alpha1", "inferenceservices"),
        "ScaleView" => ("fusioninfer.io", "v1alpha1", "scaleviews"),
        "ResourceScalingGroup" => ("resourcescalinggroup.com", "v1", "resourcescalinggroups"),
        other => panic!("not a Tandem kind: {other}"),
    }
}

/// An AdmissionReview as the API server sends it for a CREATE or UPDATE.
pub fn review(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let kind = object["kind"].as_str().unwrap();
    let (group, version, resource) = gvr(kind);
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "admin", "uid": "014fbff9a07c", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old.cloned().unwrap_or(Value::Null),
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": if operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" }}
        }
    })
}

/// The AdmissionReview the API server sends for a write to `scaleviews/scale`:
/// the object is an autoscaling/v1 Scale (Kubernetes PR 76849).
pub fn scale_review(view: &str, namespace: &str, replicas: i64, old_replicas: i64) -> Value {
    let scale = |r: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": view, "namespace": namespace},
        "spec": {"replicas": r}, "status": {"replicas": old_replicas}})
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "b2c3",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "fusioninfer.io", "version": "v1alpha1", "resource": "scaleviews"},
            "subResource": "scale",
            "requestKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "requestResource": {"group": "fusioninfer.io", "version": "v1alpha1", "resource": "scaleviews"},
            "requestSubResource": "scale",
            "name": view,
            "namespace": namespace,
            "operation": "UPDATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
            "object": scale(replicas),
            "oldObject": scale(old_replicas),
            "dryRun": false
        }
    })
}

/// Applies the base64 JSON Patch of an AdmissionReview response to `object`.
pub fn apply_wire_patch(object: &Value, response: &Value) -> Value {
    use base64::Engine;
    let encoded = response["patch"]
        .as_str()
        .expect("patch is a base64 string on the wire");
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("patch is base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch is a JSON Patch");
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).expect("patch applies");
    patched
}

/// Sends a review, expects HTTP 200 and returns the AdmissionReview response.
pub async fn admit(test: &TestServer, path: &str, review: &Value) -> Value {
    let tls = client_tls(&[&test.ca_pem]);
    let exchange = post(
        test.server.webhook_addr,
        tls,
        path,
        serde_json::to_vec(review).unwrap(),
    )
    .await
    .expect("exchange");
    assert_eq!(exchange.status, 200, "{path}: {}", exchange.text());
    let reply = exchange.json();
    assert_eq!(reply["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(reply["kind"], "AdmissionReview");
    assert_eq!(
        reply["response"]["uid"], review["request"]["uid"],
        "uid echoed"
    );
    reply["response"].clone()
}
