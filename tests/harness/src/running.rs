//! The real `tandem serve` binary, run against the in-memory API server
//! ([`super::fake_api`]) through a kubeconfig, with its webhooks registered
//! in that server as `webhooks/` registers them.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::fake_api::FakeApi;

/// Tandem's own identity, as the API server reports it to webhooks.
pub const SERVICE_ACCOUNT: &str = tandem::admission::DEFAULT_SERVICE_ACCOUNT;

/// A `tandem serve` process; killed when dropped.
pub struct Running {
    child: Child,
    pub dir: tempfile::TempDir,
    pub webhook: SocketAddr,
    pub probes: SocketAddr,
    pub name: String,
}

impl Running {
    /// Starts `tandem serve --dev --controllers` as replica `name` against
    /// `fake`, waits until it is ready (its caches synced), and registers its
    /// webhooks.
    pub async fn start(fake: &FakeApi, name: &str) -> Running {
        Running::start_with(fake, name, &["--controllers"], "info,tandem=debug").await
    }

    /// [`Running::start`] with `args` after `serve --dev` and `RUST_LOG`
    /// set to `log`.
    pub async fn start_with(fake: &FakeApi, name: &str, args: &[&str], rust_log: &str) -> Running {
        let dir = tempfile::tempdir().expect("a temp directory");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, fake.kubeconfig(SERVICE_ACCOUNT)).expect("kubeconfig written");
        let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let (webhook, probes) = (loopback(crate::free_port()), loopback(crate::free_port()));
        let log = std::fs::File::create(dir.path().join("tandem.log")).expect("a log file");
        let child = Command::new(crate::tandem_binary())
            .args(["serve", "--dev"])
            .args(args)
            .args(["--pod-name", name, "--pod-namespace", "tandem-system"])
            .arg("--listen")
            .arg(webhook.to_string())
            .arg("--probe-listen")
            .arg(probes.to_string())
            .arg("--cert-dir")
            .arg(dir.path().join("certs"))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("tandem serve starts");
        let running = Running {
            child,
            dir,
            webhook,
            probes,
            name: name.to_owned(),
        };
        super::wait_tandem_ready(&running.name, running.probes, 30, || true, || running.log())
            .await;
        let ca =
            std::fs::read_to_string(running.dir.path().join("certs/ca.crt")).expect("the dev CA");
        fake.register_webhooks(&format!("https://{webhook}"), &ca);
        running
    }

    /// The process id, to read its memory from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the process logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tandem.log")).unwrap_or_default()
    }

    /// Kills the process at once (no graceful shutdown: a crash).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits up to `seconds` for `check` to hold, polling; panics with `what`
/// and the log of `running` otherwise.
pub async fn eventually(
    running: &Running,
    seconds: u64,
    what: &str,
    mut check: impl FnMut() -> bool,
) {
    let held = || {
        std::future::ready(if check() {
            Ok(())
        } else {
            Err("no".to_owned())
        })
    };
    super::eventually(seconds, Duration::from_millis(100), what, held, || {
        format!("tandem's log:\n{}", running.log())
    })
    .await
}

fn writes(fake: &FakeApi) -> Vec<String> {
    fake.take_calls()
        .iter()
        .filter(|c| c.is_write() && !c.path.contains("/leases/"))
        .map(|c| c.line())
        .collect()
}

/// Asserts that nothing but the leader Lease is written for `seconds`,
/// once the writes that carry out the last change (the reconciles still
/// under way when the scenario saw its end state) have stopped: after a
/// 2 s pause in them, within 30 s.
pub async fn quiet_for(fake: &FakeApi, running: &Running, seconds: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    fake.take_calls();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let late = writes(fake);
        if late.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still writing after 30 s: {late:#?}\ntandem's log:\n{}",
            running.log()
        );
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let writes = writes(fake);
    assert!(
        writes.is_empty(),
        "writes in a settled world within {seconds} s: {writes:#?}\ntandem's log:\n{}",
        running.log()
    );
}
