//! `tandem serve`: the admission webhook over TLS, and health, readiness and
//! metrics on a separate plain-HTTP port for the kubelet and Prometheus.

pub mod first_byte;
pub mod metrics;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::TokioTimer;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admission::{self, Lookup};
use metrics::Metrics;
use tls::{CertificateResolver, TlsError};

/// The API server refuses AdmissionReview bodies over 3 MiB of object; 7 MiB
/// leaves room for oldObject on updates without letting a client make the
/// server buffer arbitrary amounts.
pub const DEFAULT_BODY_LIMIT_BYTES: usize = 7 * 1024 * 1024;

/// hyper's default wait for a request head; shorter than the 90 s for which
/// Go's HTTP client (the API server's) keeps idle connections.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where the webhook listens (TLS).
    pub listen: SocketAddr,
    /// Where /healthz, /readyz and /metrics listen (plain HTTP).
    pub probe_listen: SocketAddr,
    /// Holds tls.crt and tls.key; watched for changes.
    pub cert_dir: PathBuf,
    /// Larger request bodies get 413.
    pub body_limit_bytes: usize,
    /// A request taking longer gets 503 (the API server's own timeout is the
    /// webhook configuration's timeoutSeconds).
    pub request_timeout: Duration,
    /// An HTTP/1.1 connection that waits longer than this for the head of its
    /// next request is closed: an idle keep-alive connection, or a head sent
    /// slowly (slowloris).
    pub idle_timeout: Duration,
    /// How long in-flight requests may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// A PEM file of CAs: when set, every client must present a certificate
    /// signed by one of them (the API server's, from its admission
    /// kubeconfig), or the TLS handshake fails.
    pub client_ca: Option<PathBuf>,
    /// Tandem's own service account as a username
    /// (`system:serviceaccount:NAMESPACE:NAME`): its InferenceService updates
    /// may change roles that a ScaleView locks.
    pub service_account: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("could not listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the {which} server failed: {source}")]
    Serve {
        which: &'static str,
        source: std::io::Error,
    },
    #[error("the {which} listener stopped while serving")]
    Stopped { which: &'static str },
    #[error("the {which} server task ended abnormally: {source}")]
    Task {
        which: &'static str,
        source: tokio::task::JoinError,
    },
}

/// The webhook's and the probes' sockets, bound before anything else is
/// done (`serve --dev` writes certificates only once it holds its ports).
pub struct Listeners {
    webhook: std::net::TcpListener,
    probes: std::net::TcpListener,
}

impl Listeners {
    /// Binds both addresses of `options`.
    pub fn bind(options: &ServeOptions) -> Result<Listeners, ServerError> {
        let bind = |addr: SocketAddr| {
            std::net::TcpListener::bind(addr)
                .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
                .map_err(|source| ServerError::Listen { addr, source })
        };
        Ok(Listeners {
            webhook: bind(options.listen)?,
            probes: bind(options.probe_listen)?,
        })
    }
}

/// A running server. Dropping it does not stop it: call [`Server::shutdown`].
pub struct Server {
    pub webhook_addr: SocketAddr,
    pub probe_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    pub certificates: Arc<CertificateResolver>,
    ready: Arc<AtomicBool>,
    webhook: axum_server::Handle<SocketAddr>,
    grace: Duration,
    stop_probes: watch::Sender<bool>,
    webhook_task: JoinHandle<std::io::Result<()>>,
    probe_task: JoinHandle<std::io::Result<()>>,
    /// Which listeners are still serving.
    listening: Arc<Listening>,
    _watcher: notify::RecommendedWatcher,
}

/// Whether each listener's task still runs: what `/healthz` answers from,
/// and what [`Server::listener_ended`] waits on.
#[derive(Debug)]
pub struct Listening {
    webhook: AtomicBool,
    probes: AtomicBool,
    ended: watch::Sender<Option<&'static str>>,
}

impl Listening {
    fn new() -> Listening {
        Listening {
            webhook: AtomicBool::new(true),
            probes: AtomicBool::new(true),
            ended: watch::Sender::new(None),
        }
    }

    /// Runs the `which` listener's `serving` as a task that notes when it
    /// ends.
    fn spawn(
        self: &Arc<Self>,
        which: &'static str,
        serving: impl Future<Output = std::io::Result<()>> + Send + 'static,
    ) -> JoinHandle<std::io::Result<()>> {
        let listening = self.clone();
        tokio::spawn(async move {
            let served = serving.await;
            listening.end(which);
            served
        })
    }

    /// Notes that the `which` listener's task ended.
    fn end(&self, which: &'static str) {
        match which {
            "webhook" => self.webhook.store(false, Ordering::SeqCst),
            _ => self.probes.store(false, Ordering::SeqCst),
        }
        self.ended.send_if_modified(|ended| {
            let first = ended.is_none();
            if first {
                *ended = Some(which);
            }
            first
        });
    }

    /// `/healthz`: 200 while both listeners serve, 503 naming the one that
    /// stopped otherwise (a stopped probe listener cannot answer at all,
    /// which a liveness probe sees as well).
    fn health(&self) -> (StatusCode, String) {
        match (
            self.webhook.load(Ordering::SeqCst),
            self.probes.load(Ordering::SeqCst),
        ) {
            (true, true) => (
                StatusCode::OK,
                "ok: the webhook and probe listeners are serving".to_owned(),
            ),
            (false, _) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the webhook listener has stopped".to_owned(),
            ),
            (true, false) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the probe listener has stopped".to_owned(),
            ),
        }
    }
}

impl Server {
    /// Loads the certificate, binds both ports and starts serving. Admission
    /// consults `lookup`; /readyz answers 503 until `caches_ready` is true.
    pub async fn start(
        options: ServeOptions,
        lookup: Arc<dyn Lookup>,
        caches_ready: Arc<AtomicBool>,
    ) -> Result<Server, ServerError> {
        Server::start_with(options, lookup, caches_ready, Arc::new(Metrics::default())).await
    }

    /// [`Server::start`], serving `metrics` on `/metrics`: a registry the
    /// caller shares with what else it runs (the controllers, their client).
    pub async fn start_with(
        options: ServeOptions,
        lookup: Arc<dyn Lookup>,
        caches_ready: Arc<AtomicBool>,
        metrics: Arc<Metrics>,
    ) -> Result<Server, ServerError> {
        let listeners = Listeners::bind(&options)?;
        Server::start_bound(options, listeners, lookup, caches_ready, metrics).await
    }

    /// [`Server::start_with`] on sockets already bound.
    pub async fn start_bound(
        options: ServeOptions,
        listeners: Listeners,
        lookup: Arc<dyn Lookup>,
        caches_ready: Arc<AtomicBool>,
        metrics: Arc<Metrics>,
    ) -> Result<Server, ServerError> {
        let certificates = Arc::new(CertificateResolver::new(tls::load(&options.cert_dir)?));
        tls::record_expiry(&certificates, &metrics);
        let watcher = tls::watch(&options.cert_dir, certificates.clone(), metrics.clone())?;
        let client_cas = options
            .client_ca
            .as_deref()
            .map(tls::load_client_cas)
            .transpose()?;
        let config = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(
            tls::server_config(certificates.clone(), client_cas.as_ref())?,
        ));

        let app = admission::http::router(admission::http::State {
            metrics: metrics.admission.clone(),
            lookup,
            service_account: Arc::from(options.service_account.as_str()),
            body_limit_bytes: options.body_limit_bytes,
        })
        .layer(DefaultBodyLimit::max(options.body_limit_bytes))
        .layer(axum::middleware::from_fn_with_state(
            TimeLimit {
                timeout: options.request_timeout,
                metrics: metrics.clone(),
            },
            time_limit,
        ));
        let listener = listeners.webhook;
        let webhook_addr = listener
            .local_addr()
            .map_err(|source| ServerError::Listen {
                addr: options.listen,
                source,
            })?;
        let webhook = axum_server::Handle::new();
        let mut server = axum_server::from_tcp_rustls(listener, config)
            .map_err(|source| ServerError::Listen {
                addr: webhook_addr,
                source,
            })?
            .handle(webhook.clone())
            // After the handshake, the first byte must come within the idle
            // timeout too (hyper-util's HTTP version sniffing waits forever).
            .map(|tls| first_byte::FirstByteTimeout::new(tls, options.idle_timeout));
        // The TLS handshake must finish within axum-server's 10 s and the
        // body within the request timeout (the TimeoutLayer); this bounds the
        // wait for a request head: a client that dribbles its headers
        // (slowloris) or keeps an idle connection is disconnected instead of
        // holding it forever. (hyper's 30 s default needs a timer to act.)
        server
            .http_builder()
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(options.idle_timeout);
        let listening = Arc::new(Listening::new());
        let webhook_task = listening.spawn("webhook", server.serve(app.into_make_service()));

        let ready = Arc::new(AtomicBool::new(false));
        let probe_listener =
            tokio::net::TcpListener::from_std(listeners.probes).map_err(|source| {
                ServerError::Listen {
                    addr: options.probe_listen,
                    source,
                }
            })?;
        let probe_addr = probe_listener
            .local_addr()
            .map_err(|source| ServerError::Listen {
                addr: options.probe_listen,
                source,
            })?;
        let (stop_probes, mut stopped) = watch::channel(false);
        let probes = probe_routes(
            ready.clone(),
            caches_ready,
            listening.clone(),
            metrics.clone(),
        );
        let probe_task = listening.spawn(
            "probe",
            axum::serve(probe_listener, probes)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .into_future(),
        );

        // Ready once the webhook socket accepts connections.
        webhook.listening().await;
        ready.store(true, Ordering::SeqCst);
        tracing::info!(%webhook_addr, %probe_addr, cert_dir = %options.cert_dir.display(), "serving admission webhooks");
        Ok(Server {
            webhook_addr,
            probe_addr,
            metrics,
            certificates,
            ready,
            webhook,
            grace: options.shutdown_grace,
            stop_probes,
            webhook_task,
            probe_task,
            listening,
            _watcher: watcher,
        })
    }

    /// The webhook listener's handle: what stops it (a graceful shutdown,
    /// or an embedding program's own reasons).
    pub fn webhook_handle(&self) -> axum_server::Handle<SocketAddr> {
        self.webhook.clone()
    }

    /// Waits until a listener's task ends, and names it (`webhook` or
    /// `probe`). Outside a shutdown that is a failure: the process must
    /// exit so that it is restarted, not stay up half-serving.
    pub async fn listener_ended(&self) -> &'static str {
        let mut ended = self.listening.ended.subscribe();
        match ended.wait_for(Option::is_some).await {
            Ok(which) => which.unwrap_or("webhook"),
            // The sender lives in self: it cannot be gone while self is.
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops accepting connections, turns /readyz to 503 and lets in-flight
    /// requests finish within the grace period.
    pub fn shutdown(&self) {
        self.ready.store(false, Ordering::SeqCst);
        self.webhook.graceful_shutdown(Some(self.grace));
    }

    /// Waits for the webhook to drain, then stops the probe server.
    pub async fn finished(self) -> Result<(), ServerError> {
        let webhook = self.webhook_task.await;
        let _ = self.stop_probes.send(true);
        let probes = self.probe_task.await;
        webhook
            .map_err(|source| ServerError::Task {
                which: "webhook",
                source,
            })?
            .map_err(|source| ServerError::Serve {
                which: "webhook",
                source,
            })?;
        probes
            .map_err(|source| ServerError::Task {
                which: "probe",
                source,
            })?
            .map_err(|source| ServerError::Serve {
                which: "probe",
                source,
            })
    }
}

/// What [`time_limit`] needs: the limit and where to count.
#[derive(Clone)]
struct TimeLimit {
    timeout: Duration,
    metrics: Arc<Metrics>,
}

/// Answers 503 to a request not answered within `--request-timeout-ms`
/// (its body read included), saying so in the body, a WARN line and
/// `tandem_admission_requests_total{verdict="timed_out"}`; the API server
/// then applies the webhook's failurePolicy.
async fn time_limit(
    axum::extract::State(limit): axum::extract::State<TimeLimit>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let path = request.uri().path().to_owned();
    let started = std::time::Instant::now();
    match tokio::time::timeout(limit.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let timeout_ms = limit.timeout.as_millis();
            let (webhook, kind) = admission::http::endpoint_labels(&path);
            tracing::warn!(
                path,
                timeout_ms,
                "admission request not answered within --request-timeout-ms: answered 503"
            );
            limit.metrics.record_admission(
                metrics::AdmissionLabels {
                    webhook,
                    kind,
                    operation: "unknown".to_owned(),
                    verdict: "timed_out",
                },
                started.elapsed().as_secs_f64(),
            );
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the request timed out after {timeout_ms} ms, the limit set by --request-timeout-ms"
                ),
            )
                .into_response()
        }
    }
}

fn probe_routes(
    ready: Arc<AtomicBool>,
    caches_ready: Arc<AtomicBool>,
    listening: Arc<Listening>,
    metrics: Arc<Metrics>,
) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let answer = listening.health();
                async move { answer }
            }),
        )
        .route(
            "/readyz",
            get({
                let metrics = metrics.clone();
                move || {
                    let serving = ready.load(Ordering::SeqCst);
                    let synced = caches_ready.load(Ordering::SeqCst);
                    let answer = match (serving, synced) {
                        (true, true) => (StatusCode::OK, "ready".to_owned()),
                        (false, _) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "not ready: starting or shutting down".to_owned(),
                        ),
                        // Which cluster, what failed and since when.
                        (true, false) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            metrics.watch.cluster.not_ready(),
                        ),
                    };
                    async move { answer }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let encoded = metrics.encode();
                async move {
                    match encoded {
                        Ok(text) => (
                            StatusCode::OK,
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        )
                            .into_response(),
                        Err(e) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!("could not encode metrics: {e}"),
                        )
                            .into_response(),
                    }
                }
            }),
        )
}

/// Serves until SIGTERM or Ctrl-C, then shuts down gracefully.
pub async fn run(
    options: ServeOptions,
    listeners: Listeners,
    lookup: Arc<dyn Lookup>,
    caches_ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) -> Result<(), ServerError> {
    // Listen for signals before anything says it is serving, so an early
    // SIGTERM is a graceful stop and not the default action (death).
    let stop = Termination::listen();
    let server = Server::start_bound(options, listeners, lookup, caches_ready, metrics).await?;
    tokio::select! {
        () = stop.wait() => {}
        which = server.listener_ended() => {
            tracing::error!(listener = which, "a listener stopped while serving: exiting so that the pod is restarted");
            server.shutdown();
            // Its own error, if it had one, says more.
            server.finished().await?;
            return Err(ServerError::Stopped { which });
        }
    }
    tracing::info!("shutting down: finishing in-flight requests");
    server.shutdown();
    server.finished().await
}

/// SIGTERM and SIGINT, registered when created.
struct Termination {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Termination {
    fn listen() -> Termination {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signals = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM/SIGINT; serving until killed");
                    None
                }
            };
            Termination { signals }
        }
        #[cfg(not(unix))]
        Termination {}
    }

    async fn wait(self) {
        #[cfg(unix)]
        match self.signals {
            Some((mut term, mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
            None => std::future::pending::<()>().await,
        }
        #[cfg(not(unix))]
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C; serving until killed");
            std::future::pending::<()>().await;
        }
    }
}
