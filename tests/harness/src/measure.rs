//! What the benchmarks share: their knobs from the environment, a process's
//! memory and CPU seconds, objects stored as admission left them, the stored
//! ResourceScalingGroups of the RSG load scenarios, and the parse-only
//! webhook the load runs compare Tandem with.

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::routing::post;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::{Value, json};
use tandem::admission::{self, Kind};

/// A number from the environment variable `name`, else `default`.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `VmHWM` and `VmRSS` of a process, in KiB (0 when unreadable).
pub fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// A process's CPU seconds so far (utime + stime), or None when it is gone.
pub fn cpu_seconds(pid: u32, ticks: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command (which may hold spaces), from field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks)
}

/// The clock ticks a second `/proc/<pid>/stat` counts in.
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// `object` as the mutating webhook leaves it (its defaults filled in).
pub fn admitted(kind: Kind, namespace: &str, object: &Value) -> Value {
    let (admitted, _) = admission::admit(kind, namespace, object, None, &admission::lookup::Blind)
        .unwrap_or_else(|e| panic!("{object} is admitted: {e:?}"));
    admitted
}

/// The `index`th of a chain of InplaceScaling groups: Deployment `step-{i}`
/// drives `step-{i+1}` at ratio 2, so the namespace's follow graph is one
/// long path (acyclic, each target followed once) and the candidate from the
/// seed example touches none of it.
pub fn stored_group(namespace: &str, index: usize) -> Value {
    let deployment = |i: usize| {
        json!({"name": format!("step-{i:04}"), "namespace": namespace,
            "apiVersion": "apps/v1", "kind": "Deployment"})
    };
    json!({
        "apiVersion": "resourcescalinggroup.com/v1",
        "kind": "ResourceScalingGroup",
        "metadata": {"name": format!("chain-{index:04}"), "namespace": namespace},
        "spec": {
            "targetResources": [deployment(index), deployment(index + 1)],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": format!("step-{index:04}"), "role": "Source"},
                {"name": format!("step-{:04}", index + 1), "role": "Target", "ratio": 2.0}
            ]}}
        }
    })
}

/// The parse-only webhook: what a kube-rs webhook does before it decides
/// anything. Reads the body as an `AdmissionReview<DynamicObject>` and allows
/// the request's uid; a body that is not one gets a 400.
pub fn parse_only_router() -> Router {
    Router::new().route(
        "/{webhook}/{resource}",
        post(|body: Bytes| async move {
            let request: Result<AdmissionRequest<DynamicObject>, String> =
                serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
                    .map_err(|e| e.to_string())
                    .and_then(|review| review.try_into().map_err(|e| format!("{e}")));
            match request.and_then(|request| {
                serde_json::to_vec(&AdmissionResponse::from(&request).into_review())
                    .map_err(|e| e.to_string())
            }) {
                Ok(reply) => (
                    axum::http::StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    reply,
                ),
                Err(reason) => (
                    axum::http::StatusCode::BAD_REQUEST,
                    [(header::CONTENT_TYPE, "text/plain")],
                    reason.into_bytes(),
                ),
            }
        }),
    )
}
