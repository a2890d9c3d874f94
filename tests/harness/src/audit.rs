//! The API server's audit log, as the scenarios' invariants read it: each
//! line parsed once, when it is first read, into a
//! [`Request`] (the type the in-memory API server's log produces too), so a check
//! costs what it keeps, not the length of the log. The log of the shared
//! control plane grows by hundreds of megabytes in a run, and every
//! scenario's quiet check reads it every 2 s; parsing it whole each time
//! made the test process the busiest process of the run (2026-12-02,
//! `perf record` of the cluster binary: 65 % in `ControlPlane::requests`).

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

use crate::request::Request;

/// The audit log of one control plane, read as it grows.
pub struct AuditLog {
    path: PathBuf,
    read: Mutex<Progress>,
}

/// What has been read of the log so far.
#[derive(Default)]
struct Progress {
    /// Bytes of the file consumed: up to the end of the last whole line.
    offset: u64,
    requests: Vec<Request>,
}

impl AuditLog {
    /// The log the API server writes at `path` (it may not exist yet).
    pub fn at(path: PathBuf) -> AuditLog {
        AuditLog {
            path,
            read: Mutex::new(Progress::default()),
        }
    }

    /// The requests logged so far that `keep` keeps, oldest first. Reads
    /// the lines added since the last call first.
    pub fn requests_where(&self, keep: impl Fn(&Request) -> bool) -> Vec<Request> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let offset = read.offset;
        let (consumed, events) = self.lines_from(offset);
        read.offset += consumed;
        read.requests
            .extend(events.iter().filter_map(Request::audited));
        read.requests.iter().filter(|r| keep(r)).cloned().collect()
    }

    /// Every event of the log, Leases and Events too, as the API server
    /// wrote it: read whole, for the one check that needs them all.
    pub fn events(&self) -> Vec<Value> {
        self.lines_from(0).1
    }

    /// The events of the whole lines after byte `offset`, and how many bytes
    /// those lines took. A line the API server is still writing is left for
    /// the next read.
    fn lines_from(&self, offset: u64) -> (u64, Vec<Value>) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return (0, Vec::new());
        };
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return (0, Vec::new());
        }
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let events = bytes[..whole]
            .split(|b| *b == b'\n')
            .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
            .collect();
        (whole as u64, events)
    }
}

/// Writes by every user, with request and response bodies (to tell a write
/// that changed nothing), and every request of Tandem's (to tell one it was
/// refused, and which of its permissions it used: its Leases and Events at
/// Metadata level); other users' reads, Leases and Events are not logged.
pub fn policy() -> String {
    "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
     - level: Metadata\n  users: [\"system:serviceaccount:tandem-system:tandem\"]\n  resources:\n  - group: coordination.k8s.io\n    resources: [leases]\n  - group: \"\"\n    resources: [events]\n  - group: events.k8s.io\n    resources: [events]\n\
     - level: None\n  resources:\n  - group: coordination.k8s.io\n    resources: [leases]\n\
     - level: None\n  resources:\n  - group: \"\"\n    resources: [events]\n  - group: events.k8s.io\n    resources: [events]\n\
     - level: RequestResponse\n  verbs: [create, update, patch, delete, deletecollection]\n\
     - level: Metadata\n  users: [\"system:serviceaccount:tandem-system:tandem\"]\n\
     - level: None\n"
        .to_owned()
}
