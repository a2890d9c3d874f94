//! The ScaleView reconciler: reads the view's target InferenceService, asks
//! `plan::scale_view::reconcile` what to do, and writes it in the plan's
//! order: the view's finalizer, the lock in the target's status (a merge
//! patch carrying the target's resourceVersion, so two views never both win
//! a role; 409 requeues), the roles' replicas (a JSON Patch testing each
//! role's name before replacing its replicas), the view's status when it
//! changed; then an Event for each change saying why. The roles and the
//! status are retried on 409 (`retry_conflicts`); the finalizer and the lock
//! carry a resourceVersion, so their 409 requeues the reconcile instead.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error, is_conflict, is_not_found, retry_conflicts};
use crate::api::{InferenceService, ScaleView};
use crate::plan::scale_view as view_plan;
use crate::server::controller_metrics::measured;

/// How often an unchanged view is looked at again.
const RESYNC: Duration = Duration::from_secs(300);

/// How soon a lost race for the target's status is retried.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Reconciles one ScaleView.
#[tracing::instrument(name = "reconcile", skip_all, fields(kind = "ScaleView", object = %super::object_key(view.as_ref())))]
pub async fn reconcile(view: Arc<ScaleView>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (Some(namespace), Some(name)) = (
        view.metadata.namespace.as_deref(),
        view.metadata.name.as_deref(),
    ) else {
        return Err(Error::Unnamed(format!("ScaleView {}", view.name_any())));
    };
    let views: Api<ScaleView> = Api::namespaced(ctx.client.clone(), namespace);
    let services: Api<InferenceService> = Api::namespaced(ctx.client.clone(), namespace);
    let target_name = view.spec.target_ref.name.as_str();

    // Observe and plan.
    let target = services.get_opt(target_name).await?;
    let pass = view_plan::reconcile(&view, target.as_ref(), &Time((ctx.now)()));
    let deleting = view.metadata.deletion_timestamp.is_some();

    // The finalizer comes first, so the lock below cannot outlive the view.
    if !deleting && let Some(finalizers) = &pass.finalizers {
        patch_finalizers(&views, &view, name, finalizers).await?;
    }
    if let (Some(locks), Some(target)) = (&pass.locks, &target) {
        let patch = json!({
            "metadata": {"resourceVersion": target.metadata.resource_version},
            "status": {"scaleViews": locks},
        });
        match services
            .patch_status(target_name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => {
                tracing::debug!(view = name, "the target changed while locking; retrying");
                return Ok(Action::requeue(CONFLICT_RETRY));
            }
            Err(e) if is_not_found(&e) => {
                // Deleted between the read and the write (its namespace is
                // going, say): its locks went with it; plan again without it.
                tracing::debug!(view = name, "the target went while locking; looking again");
                return Ok(Action::requeue(CONFLICT_RETRY));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if !pass.roles.is_empty() {
        let patch = view_plan::role_patch(&pass.roles).map_err(|reason| Error::Plan {
            object: format!("ScaleView {namespace}/{name}"),
            reason,
        })?;
        let reference = view.object_ref(&());
        let (params, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
        retry_conflicts(&ctx, &reference, "scaling the target's roles", || {
            services.patch(target_name, &params, &patch)
        })
        .await?;
        for _ in &pass.roles {
            ctx.metrics
                .decided("ScaleView", crate::plan::decision::ROLE_SCALED);
        }
    }
    if deleting && let Some(finalizers) = &pass.finalizers {
        patch_finalizers(&views, &view, name, finalizers).await?;
    }
    if let Some(status) = &pass.status
        && view.status.as_ref() != Some(status)
    {
        let (params, patch) = (
            PatchParams::default(),
            Patch::Merge(json!({"status": status})),
        );
        retry_conflicts(&ctx, &view.object_ref(&()), "writing the status", || {
            views.patch_status(name, &params, &patch)
        })
        .await?;
    }

    let reference = view.object_ref(&());
    let secondary = target.as_ref().map(|t| t.object_ref(&()));
    for note in &pass.events {
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.to_owned(),
            note: Some(note.note.clone()),
            action: "Scale".to_owned(),
            secondary: secondary.clone(),
        };
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!(error = %e, reason = note.reason, "could not record an event");
        }
    }
    Ok(if deleting {
        Action::await_change()
    } else {
        Action::requeue(RESYNC)
    })
}

/// Writes the view's finalizers, guarded by its resourceVersion.
async fn patch_finalizers(
    views: &Api<ScaleView>,
    view: &ScaleView,
    name: &str,
    finalizers: &[String],
) -> Result<(), Error> {
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": view.metadata.resource_version,
    }});
    views
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

fn error_policy(view: Arc<ScaleView>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(kind = "ScaleView", object = %super::object_key(view.as_ref()), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(30))
}

/// Runs the controller until the stream ends (shutdown). A change of a
/// target (its roles, its readiness) reconciles the views that target it.
///
/// When `stop` completes the controller starts no new reconcile, lets those
/// in flight finish and returns (leadership hand-over, `leader::lead`).
pub async fn run(ctx: Arc<Context>, stop: impl Future<Output = ()> + Send + Sync + 'static) {
    let client = ctx.client.clone();
    let controller = Controller::new(
        Api::<ScaleView>::all(client.clone()),
        watcher::Config::default(),
    )
    .with_config(super::controller_config());
    let known = controller.store();
    controller
        .watches(
            Api::<InferenceService>::all(client),
            watcher::Config::default(),
            move |service| {
                let namespace = service.namespace();
                let service_name = service.name_any();
                known
                    .state()
                    .into_iter()
                    .filter(|view| {
                        view.namespace() == namespace && view.spec.target_ref.name == service_name
                    })
                    .map(|view| ObjectRef::from_obj(view.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stop)
        .run(measured("ScaleView", reconcile), error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(view = %object, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
        })
        .await;
}
