//! The `tandem` command line: its commands and flags (clap), each command
//! in a module of its own. The binary (`src/main.rs`) only calls [`run`].

mod certs;
mod check;
mod crds;
mod render;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::logging::LogFormat;

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "Deploys and scales LLM inference services made of roles on Kubernetes",
    after_help = crate::exit::HELP
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
    #[arg(long, default_value_t = crate::server::DEFAULT_BODY_LIMIT_BYTES, env = "TANDEM_BODY_LIMIT_BYTES")]
    body_limit_bytes: usize,
    /// A request that takes longer than this many milliseconds is answered with 503
    /// (the API server then applies the webhook's failurePolicy).
    #[arg(long, default_value_t = 4000, env = "TANDEM_REQUEST_TIMEOUT_MS")]
    request_timeout_ms: u64,
    /// An HTTP/1.1 connection waiting longer than this many seconds for the head of
    /// its next request (idle keep-alive, or a head sent slowly) is closed.
    #[arg(long, default_value_t = crate::server::DEFAULT_IDLE_TIMEOUT.as_secs(), env = "TANDEM_IDLE_TIMEOUT_SECONDS")]
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
    #[arg(long, env = "TANDEM_EPP_IMAGE", default_value = crate::plan::inference_service::router::DEFAULT_EPP_IMAGE)]
    epp_image: String,
    /// Tandem's own service account, as the username the API server reports
    /// for it: its updates may change InferenceService roles a ScaleView locks.
    #[arg(long, env = "TANDEM_SERVICE_ACCOUNT", default_value = crate::admission::DEFAULT_SERVICE_ACCOUNT)]
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
    #[arg(long, value_name = "QPS", default_value_t = crate::reconcile::rate_limit::DEFAULT_QPS, env = "TANDEM_KUBE_API_QPS")]
    kube_api_qps: f64,
    /// Requests this process may send at once above --kube-api-qps.
    #[arg(long, value_name = "N", default_value_t = crate::reconcile::rate_limit::DEFAULT_BURST, env = "TANDEM_KUBE_API_BURST")]
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
    #[arg(short = 'o', long, value_enum, default_value_t = crate::render::Format::Yaml)]
    output: crate::render::Format,
    /// Image of the endpoint picker a router role runs.
    #[arg(long, env = "TANDEM_EPP_IMAGE", default_value = crate::plan::inference_service::router::DEFAULT_EPP_IMAGE)]
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
    #[arg(short = 'o', long, value_enum, default_value_t = crate::check::Format::Text)]
    output: crate::check::Format,
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
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::certs::MAX_DAYS)))]
    days: u32,
    /// Make a new CA even when --out-dir holds one (every caBundle must then
    /// be replaced).
    #[arg(long)]
    force: bool,
}

/// A Service or namespace name, as `tandem certs` takes it.
fn dns_label(value: &str) -> Result<String, String> {
    crate::certs::label_error(value).map_or_else(|| Ok(value.to_owned()), Err)
}

/// A serving certificate's further name, as `tandem certs --host` takes it.
fn host_name(value: &str) -> Result<String, String> {
    crate::certs::host_error(value).map_or_else(|| Ok(value.to_owned()), Err)
}

/// Parses the command line and runs the command it names.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            crate::logging::init(args.log_format);
            serve::serve(args)
        }
        Command::Render(args) => render::render(args),
        Command::Check(args) => check::check(&args),
        Command::Crds { out_dir } => crds::crds(out_dir),
        Command::Certs(args) => certs::make_certs(args),
    }
}

/// Trouble: the error on stderr, exit status 2 (see [`crate::exit`]).
fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("{}{message}", crate::exit::ERROR_PREFIX);
    ExitCode::from(crate::exit::TROUBLE)
}

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
