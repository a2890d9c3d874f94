//! Reconcilers: observe, plan (with `crate::plan`), server-side apply, status.
//! They decide nothing themselves. A reconcile of an unchanged world writes
//! nothing: every applied child carries a hash of what was applied, and is
//! applied again only when that hash or one of its fields differs.

pub mod inference_service;

use std::sync::Arc;

use jiff::Timestamp;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::Value;

use crate::plan::service::Options;

/// The field manager of every server-side apply Tandem makes.
pub const FIELD_MANAGER: &str = "tandem";
/// The hash of what Tandem last applied to a child.
pub const APPLIED_HASH: &str = "fusioninfer.io/applied-hash";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot plan {object}: {reason}")]
    Plan { object: String, reason: String },
    #[error("{0} has no namespace or name")]
    Unnamed(String),
}

/// What every reconcile needs.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub options: Options,
    /// The clock, fixed in tests.
    pub now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
}

impl Context {
    pub fn new(client: Client, options: Options) -> Context {
        let instance = std::env::var("POD_NAME").ok();
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            options,
            now: Arc::new(Timestamp::now),
        }
    }
}

/// Sets the applied-hash annotation: a hash of the object as planned.
pub fn stamp(mut object: Value) -> Value {
    let bytes = serde_json::to_vec(&object).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(APPLIED_HASH.to_owned(), Value::String(hash));
        }
    }
    object
}

/// Whether `observed` already is what `desired` (stamped) asks for: same
/// applied hash, and every desired field present with the desired value (so a
/// field changed by hand is set back). Fields the server added are ignored.
pub fn up_to_date(desired: &Value, observed: &Value) -> bool {
    let hash = |v: &Value| {
        v["metadata"]["annotations"][APPLIED_HASH]
            .as_str()
            .map(str::to_owned)
    };
    hash(desired) == hash(observed) && contains(observed, desired)
}

fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => want
            .iter()
            .all(|(k, w)| have.get(k).is_some_and(|h| contains(h, w))),
        (Value::Array(have), Value::Array(want)) => {
            have.len() == want.len() && have.iter().zip(want).all(|(h, w)| contains(h, w))
        }
        _ => have == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn up_to_date_ignores_server_fields_but_not_drift_or_removed_fields() {
        let desired = stamp(
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        let mut observed = desired.clone();
        observed["metadata"]["uid"] = json!("u");
        observed["spec"]["ports"][0]["protocol"] = json!("TCP");
        observed["status"] = json!({"ready": 1});
        assert!(
            up_to_date(&desired, &observed),
            "server-added fields do not count"
        );

        let mut drifted = observed.clone();
        drifted["spec"]["replicas"] = json!(3);
        assert!(
            !up_to_date(&desired, &drifted),
            "a field changed by hand is set back"
        );

        // A field Tandem stops wanting changes the hash, so it is applied (and
        // server-side apply removes the field Tandem no longer owns).
        let smaller = stamp(
            json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        assert!(!up_to_date(&smaller, &observed));
        assert_ne!(
            smaller["metadata"]["annotations"][APPLIED_HASH],
            desired["metadata"]["annotations"][APPLIED_HASH]
        );
    }
}
