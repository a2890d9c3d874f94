//! The processes of a control plane, each under a small supervisor that
//! ends it when this test process goes away (its stdin, a pipe this process
//! holds, closes), so nothing outlives the test binary, however it ends.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A process under the supervisor: ended when the pipe to it closes.
pub struct Supervised {
    pub name: String,
    child: Child,
    /// Closing it (dropping it, or this process ending) tells the
    /// supervisor to end the process; a line `kill` kills it at once.
    lifeline: ChildStdin,
    pub log: PathBuf,
}

impl Supervised {
    pub fn start(
        name: &str,
        dir: &Path,
        command: &Path,
        args: &[String],
        env: &[(&str, String)],
    ) -> Supervised {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("a log file");
        // The supervisor exits with the process. Its reader ends the
        // process when stdin closes (SIGTERM, SIGKILL after 2 s), and kills
        // it at once on a line `kill`.
        let script = "\"$@\" </dev/null & child=$!; \
                      { while read -r line; do [ \"$line\" = kill ] && kill -KILL $child 2>/dev/null; done; \
                        kill -TERM $child 2>/dev/null; sleep 2; kill -KILL $child 2>/dev/null; } <&0 & \
                      wait $child";
        let mut supervisor = Command::new("bash");
        supervisor
            .arg("-c")
            .arg(script)
            .arg("supervise")
            .arg(command)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(file.try_clone().expect("the log again"))
            .stderr(file);
        for (key, value) in env {
            supervisor.env(key, value);
        }
        let mut child = supervisor
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({}): {e}", command.display()));
        let lifeline = child.stdin.take().expect("the supervisor's stdin");
        Supervised {
            name: name.to_owned(),
            child,
            lifeline,
            log,
        }
    }

    /// The supervised process's id: the supervisor's child that is not its
    /// own reader (a `bash` subshell). None once it is gone.
    pub fn pid(&self) -> Option<u32> {
        let supervisor = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
                .ok()?;
        children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .find(|c| {
                std::fs::read_to_string(format!("/proc/{c}/comm"))
                    .is_ok_and(|comm| comm.trim() != "bash")
            })
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process at once (a crash, no graceful shutdown) and waits
    /// for the supervisor to see it.
    pub fn kill(&mut self) {
        use std::io::Write as _;
        let _ = self.lifeline.write_all(b"kill\n");
        let _ = self.lifeline.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until `port` on loopback accepts a connection, failing with the
/// log's end when `process` exits or `seconds` pass first.
pub fn wait_for_port(port: u16, what: &str, process: &mut Supervised, seconds: u64) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
        assert!(
            process.alive(),
            "{} exited before {what} was up; its log:\n{}",
            process.name,
            process.log_tail()
        );
        assert!(
            Instant::now() < deadline,
            "{what} not up within {seconds} s; {}'s log:\n{}",
            process.name,
            process.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
