//! `tandem serve`: the webhook server, and the controllers with their
//! caches, leader election and client, wired from the flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{ClusterSource, ServeArgs, fail};
use crate::watch::caches::Caches;
use crate::{admission, certs, plan, reconcile, server};

pub(super) fn serve(args: ServeArgs) -> ExitCode {
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
                    metrics.watch.cluster.watching(&cluster.to_string());
                    caches_ready.store(false, Ordering::SeqCst);
                    let caches = Caches::start(client.clone(), metrics.watch.clone());
                    metrics.controllers.signals.read_from(
                        caches.services.clone(),
                        caches.views.clone(),
                        caches.groups.clone(),
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
fn mark_ready(caches: Arc<Caches>, caches_ready: Arc<AtomicBool>) {
    tokio::spawn(async move {
        caches.ready().await;
        caches_ready.store(true, Ordering::SeqCst);
        tracing::info!("caches loaded");
    });
}

/// Run the three controllers while this replica holds the leader Lease.
fn start_controllers(
    client: kube::Client,
    caches: Arc<Caches>,
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
            .with_pace(plan::shared::batch::Pace::DEFAULT)
            .with_status_pace(plan::inference_service::status::STATUS_PACE)
            .with_rest(reconcile::rest::Rest::DEFAULT),
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

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
