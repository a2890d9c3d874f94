//! Reconcilers: observe, plan (with `crate::plan`), server-side apply, status.
//! They decide nothing themselves: `plan` says what to write and why, so a
//! reconcile of an unchanged world writes nothing, and `tandem render` runs the
//! same decisions offline.

pub mod group_replication;
pub mod inference_service;
pub mod resource_scaling_group;
pub mod scale_view;

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;

use crate::admission::discovery::ScaleDiscovery;
use crate::plan::service::Options;

/// The field manager of every server-side apply Tandem makes.
pub const FIELD_MANAGER: &str = "tandem";
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
    /// Who records Tandem's Events, for a recorder of one's own.
    pub reporter: Reporter,
    pub options: Options,
    /// Which kinds outside the adapter table have a scale subresource.
    pub discovery: ScaleDiscovery,
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
            recorder: Recorder::new(client.clone(), reporter.clone()),
            reporter,
            discovery: ScaleDiscovery::new(client.clone()),
            client,
            options,
            now: Arc::new(Timestamp::now),
        }
    }
}

/// Whether the API server answered 404: the object, or its whole API, is not there.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Records a Normal Event on `reference`: about a change to `child` (`reason`
/// `Created`, `Updated`, `Reverted` or `Deleted`), or with no child about the
/// object itself (an upgrade step); `note` says why.
pub(crate) async fn record(
    ctx: &Context,
    reference: &ObjectReference,
    reason: &str,
    note: &str,
    child: Option<&Value>,
) {
    let secondary = child.map(|child| ObjectReference {
        api_version: child["apiVersion"].as_str().map(str::to_owned),
        kind: child["kind"].as_str().map(str::to_owned),
        name: child["metadata"]["name"].as_str().map(str::to_owned),
        namespace: child["metadata"]["namespace"].as_str().map(str::to_owned),
        ..Default::default()
    });
    let action = match (reason, child) {
        ("Deleted", _) => "Delete",
        (_, Some(_)) => "Apply",
        (_, None) => "Upgrade",
    };
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(note.to_owned()),
        action: action.to_owned(),
        secondary,
    };
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::warn!(error = %e, reason, "could not record an event");
    }
}
