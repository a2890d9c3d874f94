//! Tandem as the control plane runs it: `tandem serve --dev` of this build,
//! as Tandem's service account, under the supervisor, its webhooks
//! registered by URL.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::control_plane::{ControlPlane, block_on};
use crate::free_port;
use crate::supervision::Supervised;

/// A `tandem serve --dev` process against the control plane, as Tandem's
/// service account, under the supervisor.
pub struct Tandem {
    pub name: String,
    process: Mutex<Supervised>,
    pub webhook: SocketAddr,
    pub probes: SocketAddr,
    pub dir: PathBuf,
}

impl Tandem {
    /// The Tandem of `plane`: started once, its webhooks registered.
    pub fn shared(plane: &'static ControlPlane) -> &'static Tandem {
        plane.tandem_serve.get_or_init(|| {
            let tandem = Tandem::start(plane, "tandem-0");
            tandem.register(plane);
            tandem
        })
    }

    /// Starts replica `name` and waits until it is ready (its caches
    /// loaded); its webhooks are not registered.
    pub fn start(plane: &ControlPlane, name: &str) -> Tandem {
        Tandem::start_as(plane, name, true, "info,tandem=debug")
    }

    /// [`Tandem::start`] without `--controllers`: `--dev` serves admission
    /// only, takes no Lease and writes nothing (a cluster's webhooks before
    /// its controllers start, `tests/cluster/first_start.rs`).
    pub fn start_admission_only(plane: &ControlPlane, name: &str) -> Tandem {
        Tandem::start_as(plane, name, false, "info,tandem=debug")
    }

    /// [`Tandem::start`] with `RUST_LOG=rust_log` (the scenarios read
    /// Tandem's debug lines; a benchmark runs it as installed, at `info`).
    pub fn start_logging(plane: &ControlPlane, name: &str, rust_log: &str) -> Tandem {
        Tandem::start_as(plane, name, true, rust_log)
    }

    fn start_as(plane: &ControlPlane, name: &str, controllers: bool, rust_log: &str) -> Tandem {
        let dir = plane.tandem_dir.join(name);
        std::fs::create_dir_all(&dir).expect("tandem's directory");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, plane.tandem_kubeconfig()).expect("tandem's kubeconfig");
        let (webhook, probes) = (free_port(), free_port());
        let mut args = vec![
            "serve".to_owned(),
            "--dev".to_owned(),
            format!("--pod-name={name}"),
            "--pod-namespace=tandem-system".to_owned(),
            format!("--listen=127.0.0.1:{webhook}"),
            format!("--probe-listen=127.0.0.1:{probes}"),
            format!("--cert-dir={}", dir.join("certs").display()),
        ];
        if controllers {
            args.push("--controllers".to_owned());
        }
        let process = Supervised::start(
            &format!("tandem-{name}"),
            &dir,
            crate::tandem_binary(),
            &args,
            &[
                ("KUBECONFIG", kubeconfig.display().to_string()),
                ("RUST_LOG", rust_log.to_owned()),
            ],
        );
        let tandem = Tandem {
            name: name.to_owned(),
            process: Mutex::new(process),
            webhook: SocketAddr::from(([127, 0, 0, 1], webhook)),
            probes: SocketAddr::from(([127, 0, 0, 1], probes)),
            dir,
        };
        block_on(crate::wait_tandem_ready(
            &tandem.name,
            tandem.probes,
            60,
            || tandem.alive(),
            || tandem.log(),
        ));
        tandem
    }

    /// Points Tandem's webhook configurations at this replica.
    pub fn register(&self, plane: &ControlPlane) {
        let ca = std::fs::read_to_string(self.dir.join("certs/ca.crt")).expect("the dev CA");
        block_on(plane.register_tandem_webhooks(&format!("https://{}", self.webhook), &ca));
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        let process = self.process.lock().expect("the process");
        std::fs::read_to_string(&process.log).unwrap_or_default()
    }

    pub fn alive(&self) -> bool {
        self.process.lock().expect("the process").alive()
    }

    /// The process id of `tandem serve` (not its supervisor's), or None.
    pub fn pid(&self) -> Option<u32> {
        self.process.lock().expect("the process").pid()
    }

    /// Kills the process at once: a crash, no graceful shutdown.
    pub fn kill(&self) {
        self.process.lock().expect("the process").kill();
    }

    /// The sum of the `/metrics` samples named `metric` whose labels
    /// contain every one of `labels` (`key="value"`), or None.
    pub async fn metric(&self, metric: &str, labels: &[&str]) -> Option<f64> {
        let (_, body) = super::probe(self.probes, "/metrics").await.ok()?;
        body.lines()
            .filter(|line| line.starts_with(metric) && !line.starts_with('#'))
            .filter(|line| labels.iter().all(|l| line.contains(l)))
            .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
            .reduce(|a, b| a + b)
    }
}
