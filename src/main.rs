//! The `tandem` binary: serve | render | crds | certs.
// As in the library: no unchecked arithmetic (issue 16).
#![warn(
    clippy::arithmetic_side_effects,
    clippy::too_many_lines,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss
)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Parser, Subcommand};
use tandem::logging::LogFormat;
use tandem::{admission, api, certs, plan, reconcile, render, server};

/// mimalloc rather than glibc's malloc: a plan and an admission answer are
/// trees of small JSON values made and freed at once, where glibc spent
/// about half of the time of the 64 x 4 plan (`perf` in BENCHMARKS.md, issue
/// 26). The library does not set it, so the fuzz targets keep
/// AddressSanitizer's allocator; `benches/plan.rs` sets the same one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "Deploys and scales LLM inference services made of roles on Kubernetes",
    after_help = tandem::exit::HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the admission webhooks over TLS, and health, readiness and metrics over plain HTTP.
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),
    /// Say which of LeaderWorkerSet, Volcano, the Inference Extension and
    /// Gateway API are installed, what Tandem will do with what is there, and
    /// what to install. Exits 0 when InferenceServices can be deployed, 1
    /// when they cannot, 2 when the input or the cluster cannot be used.
    Check(CheckArgs),
    /// Show what Tandem would do to a world of objects, without a cluster.
    #[command(after_long_help = RENDER_HELP)]
    Render(RenderArgs),
    /// Print the CustomResourceDefinitions, or write them to a directory.
    Crds {
        /// Write one file per CRD here instead of printing them.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Make a self-signed CA and a serving certificate for the webhook Service.
    Certs(CertsArgs),
}

/// `serve --help`: the environment, and the log level.
const SERVE_HELP: &str = "\
Environment: each flag shown with [env: NAME=] can be set by that variable instead; a
flag given on the command line wins. The cluster comes from --kubeconfig, else
KUBECONFIG, else ~/.kube/config, else the in-cluster service account
(KUBERNETES_SERVICE_HOST). With none of them, serve exits 2 unless it runs no controllers
(--admission-only, or --dev without --controllers): then it serves admission only and its
cross-object checks become warnings.

Log level: RUST_LOG, default info. For example RUST_LOG=debug, or RUST_LOG=warn,tandem=debug
to see only Tandem's own debug lines (one per admission answered). The kube client's
per-request errors are off unless RUST_LOG names kube_client. Colour only on a terminal
and without NO_COLOR.";

/// `render --help`: what the flags do not say.
const RENDER_HELP: &str = "\
Input: -f may be given many times; each is a file of YAML or JSON documents, `-` for
standard input, or a directory, whose .yaml, .yml and .json files are read in name order
(not recursing), as `kubectl -f DIR` does. A file without objects is an error.

Clock: --now, else the newest time found in the world (creation and deletion
timestamps, times in annotations and statuses), else the wall clock. With --now, or a
world that holds a time, the same input gives the same output.

Exit status: 0 rendered; 1 an object was denied, as the webhook would deny it (each
reason on stderr as `Kind namespace/name: field.path: reason`); 2 the input could not be
read or parsed (a misspelt Tandem kind or version, a file without objects), or the
reconcilers did not settle.";

#[derive(clap::Args)]
struct ServeArgs {
    /// Log format: text, or json (one object per line). RUST_LOG filters (default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "TANDEM_LOG_FORMAT")]
    log_format: LogFormat,
    /// TLS address of the webhook [default: 0.0.0.0:10250, the port managed
    /// control planes reach on nodes; with --dev 127.0.0.1:8443].
    #[arg(long, env = "TANDEM_LISTEN")]
    listen: Option<SocketAddr>,
    /// Plain-HTTP address of /healthz, /readyz and /metrics [default: 0.0.0.0:8080, with --dev 127.0.0.1:8080].
    #[arg(long, env = "TANDEM_PROBE_LISTEN")]
    probe_listen: Option<SocketAddr>,
    /// Directory holding tls.crt and tls.key; watched, and reloaded when they change
    /// [default: /etc/tandem/certs, with --dev tandem-dev-certs].
    #[arg(long, env = "TANDEM_CERT_DIR")]
    cert_dir: Option<PathBuf>,
    /// Request bodies larger than this many bytes are refused with 413.
    #[arg(long, default_value_t = server::DEFAULT_BODY_LIMIT_BYTES, env = "TANDEM_BODY_LIMIT_BYTES")]
    body_limit_bytes: usize,
    /// A request that takes longer than this many milliseconds is answered with 503
    /// (the API server then applies the webhook's failurePolicy).
    #[arg(long, default_value_t = 4000, env = "TANDEM_REQUEST_TIMEOUT_MS")]
    request_timeout_ms: u64,
    /// An HTTP/1.1 connection waiting longer than this many seconds for the head of
    /// its next request (idle keep-alive, or a head sent slowly) is closed.
    #[arg(long, default_value_t = server::DEFAULT_IDLE_TIMEOUT.as_secs(), env = "TANDEM_IDLE_TIMEOUT_SECONDS")]
    idle_timeout_seconds: u64,
    /// A PEM file of CAs: every caller must present a client certificate signed
    /// by one of them (the API server's, from its admission kubeconfig), or the
    /// TLS handshake fails. Read at start. Unset: no client certificate is asked.
    #[arg(long, env = "TANDEM_CLIENT_CA")]
    client_ca: Option<PathBuf>,
    /// After SIGTERM, in-flight requests get this many seconds to finish.
    #[arg(long, default_value_t = 20, env = "TANDEM_SHUTDOWN_GRACE_SECONDS")]
    shutdown_grace_seconds: u64,
    /// Image of the endpoint picker a router role runs (llm-d's image for
    /// `strategy: pd-disaggregation`).
    #[arg(long, env = "TANDEM_EPP_IMAGE", default_value = plan::inference_service::router::DEFAULT_EPP_IMAGE)]
    epp_image: String,
    /// Tandem's own service account, as the username the API server reports
    /// for it: its updates may change InferenceService roles a ScaleView locks.
    #[arg(long, env = "TANDEM_SERVICE_ACCOUNT", default_value = admission::DEFAULT_SERVICE_ACCOUNT)]
    service_account: String,
    /// This replica's name in the leader election (the pod's name, from the
    /// downward API) [default: $HOSTNAME-PID].
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    /// Namespace of the leader Lease `tandem-controller` (the pod's namespace,
    /// from the downward API). Only the replica holding the Lease runs the
    /// controllers; every replica serves the webhooks.
    #[arg(long, env = "POD_NAMESPACE", default_value = "tandem-system")]
    pod_namespace: String,
    /// The kubeconfig file of the cluster [default: $KUBECONFIG, else
    /// ~/.kube/config, else the in-cluster service account]. Given, it must load.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: its current context].
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Serve admission only: no controllers and no leader Lease. The cluster,
    /// when reachable, is still watched for the webhook's cross-object checks.
    #[arg(long, conflicts_with = "controllers")]
    admission_only: bool,
    /// With --dev: run the controllers too (they take the leader Lease in
    /// --pod-namespace of the cluster the kubeconfig names). Without --dev
    /// they run unless --admission-only.
    #[arg(long)]
    controllers: bool,
    /// Development: make a CA and a loopback serving certificate in --cert-dir,
    /// print the caBundle, and serve on loopback only. Admission only unless
    /// --controllers.
    #[arg(long)]
    dev: bool,
    /// Requests a second this process sends the API server at most (its
    /// watches, its writes, its Events and its Lease), with --kube-api-burst
    /// more at once above that: a token bucket, as client-go's QPS and Burst.
    /// 0 turns the limit off.
    #[arg(long, value_name = "QPS", default_value_t = reconcile::rate_limit::DEFAULT_QPS, env = "TANDEM_KUBE_API_QPS")]
    kube_api_qps: f64,
    /// Requests this process may send at once above --kube-api-qps.
    #[arg(long, value_name = "N", default_value_t = reconcile::rate_limit::DEFAULT_BURST, env = "TANDEM_KUBE_API_BURST")]
    kube_api_burst: u32,
}

impl ServeArgs {
    /// Whether this process runs the controllers (and takes the Lease).
    fn runs_controllers(&self) -> bool {
        !self.admission_only && (!self.dev || self.controllers)
    }
}

#[derive(clap::Args)]
struct RenderArgs {
    /// A file of the world: multi-document YAML or JSON, `-` for standard
    /// input, or a directory of .yaml, .yml and .json files. Repeat for more.
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    files: Vec<PathBuf>,
    /// Namespace of objects that do not name one.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = render::Format::Yaml)]
    output: render::Format,
    /// Image of the endpoint picker a router role runs.
    #[arg(long, env = "TANDEM_EPP_IMAGE", default_value = plan::inference_service::router::DEFAULT_EPP_IMAGE)]
    epp_image: String,
    /// The clock for the times render writes (conditions, drain annotations,
    /// upgrade steps), in RFC 3339 (`2026-03-01T10:00:00Z`). Without it: the
    /// newest time found in the world (creation and deletion timestamps, times
    /// in annotations and statuses), so the same input gives the same output;
    /// when the world holds no time, the wall clock (then two runs may differ).
    #[arg(long, value_name = "RFC3339")]
    now: Option<jiff::Timestamp>,
    /// A built-in API version the cluster serves, as Helm's --api-versions:
    /// `scheduling.k8s.io/v1alpha2` makes Kubernetes' PodGroups served
    /// (with their gated fields kept), so gangScheduler Kubernetes renders
    /// and a gang defaults to it when the world's CRDs hold no Volcano.
    /// Repeat for more. An object of that API in the world says the same.
    #[arg(long = "api-versions", value_name = "GROUP/VERSION")]
    api_versions: Vec<String>,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// CustomResourceDefinition files or folders to check: a file of
    /// multi-document YAML or JSON, `-` for standard input, or a folder, whose
    /// .yaml, .yml and .json files are read (not its subfolders). Repeat for
    /// more; objects of other kinds are ignored. Without it, the cluster is
    /// checked.
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    files: Vec<PathBuf>,
    /// The kubeconfig file of the cluster to check [default: $KUBECONFIG,
    /// else ~/.kube/config, else in-cluster].
    #[arg(long, conflicts_with = "files")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: its current context].
    #[arg(long, conflicts_with = "files")]
    context: Option<String>,
    /// The namespace Tandem is installed in.
    #[arg(
        short = 'n',
        long,
        default_value = "tandem-system",
        conflicts_with = "files"
    )]
    namespace: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = tandem::check::Format::Text)]
    output: tandem::check::Format,
}

#[derive(clap::Args)]
struct CertsArgs {
    /// Where to write ca.crt, ca.key, tls.crt and tls.key. A CA already there
    /// (ca.crt and ca.key) signs the new certificate, so the caBundle stays
    /// the same; a ca.crt without its key is refused unless --force.
    #[arg(long)]
    out_dir: PathBuf,
    /// The webhook Service's name (a DNS-1123 label).
    #[arg(long, default_value = "tandem-webhook", value_parser = dns_label)]
    service: String,
    /// The webhook Service's namespace (a DNS-1123 label).
    #[arg(long, default_value = "tandem-system", value_parser = dns_label)]
    namespace: String,
    /// Further DNS names or IP addresses for the serving certificate.
    #[arg(long = "host", value_parser = host_name)]
    hosts: Vec<String>,
    /// Make a client certificate with this common name instead, for the API
    /// server to present to the webhook: ca.crt is what `tandem serve
    /// --client-ca` takes, tls.crt and tls.key go into the API server's
    /// admission kubeconfig (certs/README.md).
    #[arg(long, value_name = "NAME", conflicts_with = "hosts")]
    client: Option<String>,
    /// Validity of the CA and the certificate, in days, from 1 to 3650 (a
    /// certificate signed by an existing CA never outlives it).
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=i64::from(certs::MAX_DAYS)))]
    days: u32,
    /// Make a new CA even when --out-dir holds one (every caBundle must then
    /// be replaced).
    #[arg(long)]
    force: bool,
}

/// A Service or namespace name, as `tandem certs` takes it.
fn dns_label(value: &str) -> Result<String, String> {
    certs::label_error(value).map_or_else(|| Ok(value.to_owned()), Err)
}

/// A serving certificate's further name, as `tandem certs --host` takes it.
fn host_name(value: &str) -> Result<String, String> {
    certs::host_error(value).map_or_else(|| Ok(value.to_owned()), Err)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            tandem::logging::init(args.log_format);
            serve(args)
        }
        Command::Render(args) => run_render(args),
        Command::Check(args) => check(&args),
        Command::Crds { out_dir } => crds(out_dir),
        Command::Certs(args) => make_certs(args),
    }
}

/// Trouble: the error on stderr, exit status 2 (see [`tandem::exit`]).
fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("{}{message}", tandem::exit::ERROR_PREFIX);
    ExitCode::from(tandem::exit::TROUBLE)
}

fn serve(args: ServeArgs) -> ExitCode {
    let (listen, probe_listen, cert_dir) = addresses(&args);
    if args.dev
        && let Err(message) = dev_loopback_only(listen, probe_listen)
    {
        return fail(message);
    }
    let controllers = ControllerArgs {
        run: args.runs_controllers(),
        epp_image: args.epp_image.clone(),
        identity: identity(args.pod_name.clone()),
        lease_namespace: args.pod_namespace.clone(),
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
    };
    if args.dev && !controllers.run {
        tracing::info!(
            "--dev: admission only, no controllers and no leader Lease (pass --controllers to run them)"
        );
    } else if !controllers.run {
        tracing::info!("--admission-only: no controllers and no leader Lease");
    }
    let source = ClusterSource {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let options = server::ServeOptions {
        listen,
        probe_listen,
        cert_dir,
        body_limit_bytes: args.body_limit_bytes,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        idle_timeout: Duration::from_secs(args.idle_timeout_seconds),
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        client_ca: args.client_ca,
        service_account: args.service_account,
    };
    // The ports first: --dev touches its certificates only once it holds
    // them, so a second start on taken ports leaves the first one's be.
    let listeners = match server::Listeners::bind(&options) {
        Ok(listeners) => listeners,
        Err(e) if args.dev => {
            return fail(format!(
                "{e}; the certificates in {} are left as they are",
                options.cert_dir.display()
            ));
        }
        Err(e) => return fail(e),
    };
    if args.dev
        && let Err(e) = dev_certs(&options.cert_dir)
    {
        return fail(e);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(format!("could not start the async runtime: {e}")),
    };
    runtime.block_on(serve_and_control(options, listeners, source, controllers))
}

/// The webhook's and the probes' addresses and the certificate directory:
/// the flags, else the defaults (loopback and a local directory with --dev).
fn addresses(args: &ServeArgs) -> (SocketAddr, SocketAddr, PathBuf) {
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let any = |port: u16| SocketAddr::from(([0, 0, 0, 0], port));
    // In a cluster the webhook listens where managed control planes can
    // reach a node (10250); on a workstation 8443, clear of a local
    // kubelet on 10250.
    let (host, webhook_port, cert_dir): (fn(u16) -> SocketAddr, u16, &str) = if args.dev {
        (loopback, 8443, "tandem-dev-certs")
    } else {
        (any, 10250, "/etc/tandem/certs")
    };
    (
        args.listen.unwrap_or(host(webhook_port)),
        args.probe_listen.unwrap_or(host(8080)),
        args.cert_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(cert_dir)),
    )
}

/// --dev serves on loopback only: the first address that is not is refused.
fn dev_loopback_only(listen: SocketAddr, probe_listen: SocketAddr) -> Result<(), String> {
    for (flag, addr) in [("--listen", listen), ("--probe-listen", probe_listen)] {
        if !addr.ip().is_loopback() {
            return Err(format!("--dev serves on loopback only, got {flag} {addr}"));
        }
    }
    Ok(())
}

/// --dev: a CA and a loopback serving certificate in `cert_dir`, kept from
/// an earlier start when they will do, and the caBundle printed for the
/// webhook configuration.
fn dev_certs(cert_dir: &std::path::Path) -> Result<(), certs::CertsError> {
    let (done, ca_pem) = certs::dev_certs(cert_dir, &certs::loopback_hosts())?;
    let dir = cert_dir.display();
    match done {
        certs::DevCerts::Kept(until) => println!(
            "# dev CA and serving certificate for localhost kept in {dir} (valid until {until})"
        ),
        certs::DevCerts::Signed(why) => println!(
            "# dev CA kept in {dir}, serving certificate for localhost written there ({why})"
        ),
        certs::DevCerts::New(why) => {
            println!("# dev CA and serving certificate for localhost written to {dir} ({why})")
        }
    }
    use base64::Engine;
    println!(
        "caBundle: {}",
        base64::engine::general_purpose::STANDARD.encode(ca_pem)
    );
    Ok(())
}

/// This replica's name in the leader election: the pod's name, else
/// `$HOSTNAME-PID`.
fn identity(pod_name: Option<String>) -> String {
    pod_name.unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "tandem".to_owned());
        format!("{host}-{}", std::process::id())
    })
}

/// What the controllers need from the flags.
struct ControllerArgs {
    /// Whether to run them at all (not with --admission-only, nor with
    /// --dev unless --controllers).
    run: bool,
    epp_image: String,
    identity: String,
    lease_namespace: String,
    /// The client's rate limit (`--kube-api-qps`, `--kube-api-burst`).
    qps: f64,
    burst: u32,
}

/// The leader election task, and the sender that tells it to stop.
type Controllers = (
    tokio::task::JoinHandle<()>,
    tokio::sync::oneshot::Sender<()>,
);

/// Where the cluster's kubeconfig comes from: the flags, else kube's
/// inference ($KUBECONFIG, ~/.kube/config, in-cluster).
struct ClusterSource {
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
}

impl ClusterSource {
    /// The cluster's client configuration: None when nothing was named,
    /// none is reachable and the controllers are not `required` (admission
    /// only, logged); an error when the kubeconfig or context the flags
    /// name does not load, or when none is reachable and the controllers
    /// are required: a replica meant to reconcile must not start without.
    async fn config(&self, required: bool) -> Result<Option<kube::Config>, String> {
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let loaded = match (&self.kubeconfig, &self.context) {
            (None, None) => {
                return match kube::Config::infer().await {
                    Ok(config) => Ok(Some(config)),
                    Err(e) if required => Err(format!(
                        "no cluster to run the controllers in: {e} (looked at $KUBECONFIG, \
                         ~/.kube/config and the in-cluster service account); give --kubeconfig, \
                         or pass --admission-only to serve admission without controllers"
                    )),
                    Err(e) => {
                        tracing::info!(reason = %e, "no kubeconfig reachable: serving admission only");
                        Ok(None)
                    }
                };
            }
            (Some(path), _) => match kube::config::Kubeconfig::read_from(path) {
                Ok(file) => kube::Config::from_custom_kubeconfig(file, &options).await,
                Err(e) => return Err(format!("--kubeconfig {}: {e}", path.display())),
            },
            (None, Some(_)) => kube::Config::from_kubeconfig(&options).await,
        };
        loaded
            .map(Some)
            .map_err(|e| match (&self.kubeconfig, &self.context) {
                (Some(path), Some(context)) => {
                    format!("--kubeconfig {} --context {context}: {e}", path.display())
                }
                (Some(path), None) => format!("--kubeconfig {}: {e}", path.display()),
                (None, context) => {
                    format!("--context {}: {e}", context.as_deref().unwrap_or_default())
                }
            })
    }
}

/// Serve the webhooks (and, with a cluster, run the controllers while
/// holding the Lease) until shutdown; then stop the controllers.
async fn serve_and_control(
    options: server::ServeOptions,
    listeners: server::Listeners,
    source: ClusterSource,
    args: ControllerArgs,
) -> ExitCode {
    let mut lookup: Arc<dyn admission::Lookup> = Arc::new(admission::lookup::Blind);
    // Admission warns about a router its endpoint picker cannot serve.
    let epp_image = args.epp_image.clone();
    let caches_ready = Arc::new(AtomicBool::new(true));
    // One registry for the webhook's, the controllers' and the client's metrics.
    let metrics = Arc::new(server::metrics::Metrics::default());
    let config = match source.config(args.run).await {
        Ok(config) => config,
        Err(message) => return fail(message),
    };
    let controllers = match config {
        Some(config) => {
            let cluster = config.cluster_url.clone();
            // Every request of the process (caches, controllers, Lease) is counted.
            let counting = reconcile::api_requests::CountRequests::new(metrics.controllers.clone());
            // Every request is counted as it is made, then waits for its
            // turn under the rate limit.
            let limit = reconcile::rate_limit::RateLimit::new(args.qps, args.burst);
            match kube::client::ClientBuilder::try_from(config)
                .map(|b| b.with_layer(&limit).with_layer(&counting).build())
            {
                Ok(client) => {
                    tracing::info!(%cluster, controllers = args.run, "watching the cluster");
                    metrics.controllers.cluster.watching(&cluster.to_string());
                    caches_ready.store(false, Ordering::SeqCst);
                    let caches = reconcile::caches::Caches::start(
                        client.clone(),
                        metrics.controllers.clone(),
                    );
                    caches.record_events_as(reconcile::reporter(&args.identity));
                    lookup = caches.clone();
                    mark_ready(caches.clone(), caches_ready.clone());
                    args.run
                        .then(|| start_controllers(client, caches, &metrics, args, &cluster))
                }
                Err(e) if args.run => {
                    return fail(format!(
                        "cannot build a client for {cluster} from the kubeconfig: {e}"
                    ));
                }
                Err(e) => {
                    tracing::warn!(%cluster, error = %e, "cannot build a client from the kubeconfig: serving admission only");
                    None
                }
            }
        }
        None => None,
    };
    let lookup: Arc<dyn admission::Lookup> = Arc::new(admission::lookup::WithEppImage {
        inner: lookup,
        epp_image,
    });
    let served = server::run(options, listeners, lookup, caches_ready, metrics).await;
    if let Some((leading, stop)) = controllers {
        // Stop the controllers and release the Lease, so the other
        // replica takes over at once.
        let _ = stop.send(());
        if let Err(e) = leading.await {
            tracing::warn!(error = %e, "the leader election task ended abnormally");
        }
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Mark the caches ready once loaded.
fn mark_ready(caches: Arc<reconcile::caches::Caches>, caches_ready: Arc<AtomicBool>) {
    tokio::spawn(async move {
        caches.ready().await;
        caches_ready.store(true, Ordering::SeqCst);
        tracing::info!("caches loaded");
    });
}

/// Run the three controllers while this replica holds the leader Lease.
fn start_controllers(
    client: kube::Client,
    caches: Arc<reconcile::caches::Caches>,
    metrics: &server::metrics::Metrics,
    args: ControllerArgs,
    cluster: &impl std::fmt::Display,
) -> Controllers {
    let ControllerArgs {
        run: _,
        epp_image,
        identity,
        lease_namespace,
        qps: _,
        burst: _,
    } = args;
    let options = plan::inference_service::service::Options {
        router: plan::inference_service::router::RouterOptions { epp_image },
    };
    let live = reconcile::live::Live::new(
        client.clone(),
        caches.clone(),
        reconcile::reporter(&identity),
    );
    let ctx = Arc::new(
        reconcile::Context::new(Arc::new(live), options)
            .with_metrics(metrics.controllers.clone())
            .with_pace(plan::shared::batch::Pace::DEFAULT),
    );
    tracing::info!(%cluster, %identity, lease_namespace, "reconciling InferenceServices, ScaleViews and ResourceScalingGroups while holding the leader Lease");
    let election = reconcile::leader::Election::new(
        client,
        &lease_namespace,
        &identity,
        plan::shared::leadership::Timing::DEFAULT,
    );
    let start = move |stopping: reconcile::leader::Stopping| {
        vec![
            tokio::spawn(reconcile::inference_service::run(
                ctx.clone(),
                caches.clone(),
                stopping.signal(),
            )),
            tokio::spawn(reconcile::scale_view::run(
                ctx.clone(),
                caches.clone(),
                stopping.signal(),
            )),
            tokio::spawn(reconcile::resource_scaling_group::run(
                ctx.clone(),
                caches.clone(),
                stopping.signal(),
            )),
        ]
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let leading = tokio::spawn(reconcile::leader::lead(election, start, async move {
        let _ = stopped.await;
    }));
    (leading, stop)
}

fn run_render(args: RenderArgs) -> ExitCode {
    let mut options = render::Options::default();
    options.plan.router.epp_image = args.epp_image;
    options.api_versions = args.api_versions.into_iter().collect();
    let result = render::read_world(&args.files, &args.namespace).and_then(|world| {
        let now = args
            .now
            .or_else(|| render::newest_time(&world))
            .unwrap_or_else(wall_clock);
        options.now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
        render::render(world, &options)
    });
    match result {
        Ok(rendered) => {
            for warning in &rendered.warnings {
                eprintln!("Warning: {warning}");
            }
            match rendered.write(args.output) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!("could not write the output: {e}")),
            }
        }
        Err(render::RenderError::Denied(denials)) => {
            for denial in &denials {
                eprintln!("{denial}");
            }
            ExitCode::from(tandem::exit::NO)
        }
        Err(e) => {
            let code = e.exit_code();
            eprintln!("{}{e}", tandem::exit::ERROR_PREFIX);
            ExitCode::from(code)
        }
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    let answer = if args.files.is_empty() {
        check_cluster(args)
    } else {
        tandem::check::check_files(&args.files).map(|(reports, ready)| (reports, Vec::new(), ready))
    };
    match answer {
        Ok((reports, checks, ready)) => {
            print!(
                "{}",
                tandem::check::write(&reports, &checks, ready, args.output)
            );
            if ready {
                ExitCode::from(tandem::exit::DONE)
            } else {
                ExitCode::from(tandem::exit::NO)
            }
        }
        Err(e) => {
            let said = tandem::check::write_error(&e, args.output);
            match args.output {
                tandem::check::Format::Json => print!("{said}"),
                tandem::check::Format::Text => eprint!("{said}"),
            }
            ExitCode::from(tandem::exit::TROUBLE)
        }
    }
}

/// `tandem check` of the cluster the kubeconfig names: the reports, the
/// checks of Tandem's installation, and whether all is there.
fn check_cluster(
    args: &CheckArgs,
) -> Result<
    (
        Vec<tandem::plan::shared::installed::Report>,
        Vec<tandem::check::installation::Check>,
        bool,
    ),
    String,
> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let source = ClusterSource {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    runtime.block_on(async {
        let config = source.config(false).await?.ok_or(
            "no cluster to check: give -f CRD files, or a kubeconfig ($KUBECONFIG, --kubeconfig)",
        )?;
        let server = config.cluster_url.to_string();
        let client = kube::Client::try_from(config)
            .map_err(|e| format!("the cluster at {server}: {}", tandem::check::causes(&e)))?;
        tandem::check::check_cluster(&client, &args.namespace)
            .await
            .map_err(|e| format!("the cluster at {server}: {e}"))
    })
}

/// The wall clock to the second, as the API server writes times.
fn wall_clock() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
}

fn crds(out_dir: Option<PathBuf>) -> ExitCode {
    let all = api::crds::all();
    let mut printed = Vec::new();
    for crd in &all {
        let yaml = match api::crds::to_yaml(crd) {
            Ok(yaml) => yaml,
            Err(e) => return fail(format!("could not write a CRD as YAML: {e}")),
        };
        match &out_dir {
            Some(dir) => {
                let path = dir.join(api::crds::file_name(crd));
                if let Err(e) =
                    std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, yaml))
                {
                    return fail(format!("could not write {}: {e}", path.display()));
                }
                println!("wrote {}", path.display());
            }
            None => printed.push(yaml),
        }
    }
    if out_dir.is_none() {
        print!("{}", printed.join("---\n"));
    }
    ExitCode::SUCCESS
}

fn make_certs(args: CertsArgs) -> ExitCode {
    let ca = match existing_ca(&args.out_dir, args.force) {
        Ok(ca) => ca,
        Err(message) => return fail(message),
    };
    if let Some(ca) = &ca {
        eprintln!(
            "signing with the CA already in {} (valid until {}): the caBundle is unchanged",
            args.out_dir.display(),
            ca.not_after
        );
    }
    if let Some(client) = &args.client {
        let written = certs::issue_client_with(ca.as_ref(), client, args.days)
            .and_then(|bundle| certs::write(&args.out_dir, &bundle));
        if let Err(e) = written {
            return fail(e);
        }
        eprintln!(
            "wrote {dir}/ca.crt (for tandem serve --client-ca) and {dir}/ca.key ({ca}), and {dir}/tls.crt and {dir}/tls.key (client certificate for {client}, for the API server)",
            dir = args.out_dir.display(),
            ca = which_ca(ca.as_ref()),
        );
        return ExitCode::SUCCESS;
    }
    let mut hosts = certs::service_hosts(&args.service, &args.namespace);
    hosts.extend(args.hosts);
    let bundle = match certs::issue_with(ca.as_ref(), &hosts, args.days) {
        Ok(bundle) => bundle,
        Err(e) => return fail(e),
    };
    if let Err(e) = certs::write(&args.out_dir, &bundle) {
        return fail(e);
    }
    eprintln!(
        "wrote {dir}/ca.crt and {dir}/ca.key ({ca}), and {dir}/tls.crt and {dir}/tls.key (serving certificate for {hosts})\n\
         the caBundle of the webhook configurations (base64 of ca.crt) follows on stdout:",
        dir = args.out_dir.display(),
        ca = which_ca(ca.as_ref()),
        hosts = hosts.join(", ")
    );
    println!("{}", bundle.ca_bundle());
    ExitCode::SUCCESS
}

/// How `certs` names the CA it wrote.
fn which_ca(kept: Option<&certs::ExistingCa>) -> &'static str {
    if kept.is_some() {
        "the CA kept"
    } else {
        "a new CA"
    }
}

/// The CA in `dir` that signs the new certificate: None to make a new one
/// (there is none, or --force). A CA that cannot sign (no key, expired) is
/// refused with exit status 2 rather than replaced without a word.
fn existing_ca(dir: &std::path::Path, force: bool) -> Result<Option<certs::ExistingCa>, String> {
    if force {
        return Ok(None);
    }
    let found = certs::find_ca(dir).map_err(|e| e.to_string())?;
    match found {
        certs::FoundCa::None => Ok(None),
        certs::FoundCa::WithoutKey(path) => Err(format!(
            "{} exists but its key {} does not, so it cannot sign a new certificate: pass --force to replace the CA (then replace every caBundle made from it)",
            path.display(),
            dir.join(certs::CA_KEY_FILE).display()
        )),
        certs::FoundCa::Signing(ca) if ca.not_after <= time::OffsetDateTime::now_utc() => {
            Err(format!(
                "the CA in {} expired at {}: pass --force to replace it (then replace every caBundle made from it)",
                dir.display(),
                ca.not_after
            ))
        }
        certs::FoundCa::Signing(ca) => Ok(Some(ca)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_args(flags: &[&str]) -> ServeArgs {
        let cli =
            Cli::try_parse_from(["tandem", "serve"].iter().chain(flags)).expect("the flags parse");
        match cli.command {
            Command::Serve(args) => args,
            _ => panic!("not the serve command"),
        }
    }

    #[test]
    fn addresses_default_to_every_interface_and_the_mounted_certificates() {
        let (listen, probe, certs) = addresses(&serve_args(&[]));
        assert_eq!(listen, "0.0.0.0:10250".parse().unwrap());
        assert_eq!(probe, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(certs, PathBuf::from("/etc/tandem/certs"));
    }

    #[test]
    fn addresses_with_dev_default_to_loopback_and_a_local_directory() {
        let (listen, probe, certs) = addresses(&serve_args(&["--dev"]));
        assert_eq!(listen, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(probe, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(certs, PathBuf::from("tandem-dev-certs"));
    }

    #[test]
    fn addresses_given_as_flags_win_over_the_defaults() {
        let args = serve_args(&[
            "--dev",
            "--listen",
            "127.0.0.1:9443",
            "--probe-listen",
            "127.0.0.1:9080",
            "--cert-dir",
            "/tmp/c",
        ]);
        let (listen, probe, certs) = addresses(&args);
        assert_eq!(listen, "127.0.0.1:9443".parse().unwrap());
        assert_eq!(probe, "127.0.0.1:9080".parse().unwrap());
        assert_eq!(certs, PathBuf::from("/tmp/c"));
    }

    #[test]
    fn dev_refuses_an_address_off_loopback_naming_its_flag() {
        let loopback: SocketAddr = "127.0.0.1:8443".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(dev_loopback_only(loopback, loopback), Ok(()));
        assert_eq!(
            dev_loopback_only(loopback, any),
            Err("--dev serves on loopback only, got --probe-listen 0.0.0.0:8080".to_owned())
        );
        assert_eq!(
            dev_loopback_only(any, loopback),
            Err("--dev serves on loopback only, got --listen 0.0.0.0:8080".to_owned())
        );
    }

    #[test]
    fn controllers_run_unless_admission_only_or_dev_without_controllers() {
        assert!(serve_args(&[]).runs_controllers());
        assert!(serve_args(&["--controllers"]).runs_controllers());
        assert!(!serve_args(&["--admission-only"]).runs_controllers());
        assert!(!serve_args(&["--dev"]).runs_controllers());
        assert!(serve_args(&["--dev", "--controllers"]).runs_controllers());
        assert!(
            Cli::try_parse_from(["tandem", "serve", "--admission-only", "--controllers"]).is_err()
        );
    }

    #[test]
    fn identity_is_the_pod_name_when_given() {
        assert_eq!(identity(Some("tandem-0".to_owned())), "tandem-0");
        assert!(identity(None).ends_with(&format!("-{}", std::process::id())));
    }
}
