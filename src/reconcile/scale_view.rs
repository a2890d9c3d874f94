//! The ScaleView reconciler: reads the view's target InferenceService, asks
//! `plan::scale_view::reconcile` what to do, and writes it in the plan's
//! order: the view's finalizer, the lock in the target's status (a merge
//! patch carrying the target's resourceVersion, so two views never both win
//! a role; 409 requeues), the roles' replicas (a JSON Patch testing each
//! role's name before replacing its replicas), the view's status when it
//! changed; then an Event for each change saying why. The roles and the
//! status are retried on 409 (`retry_conflicts`); the finalizer and the lock
//! carry a resourceVersion, so their 409 requeues the reconcile instead,
//! quietly: it says the cache is behind, not that anything failed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::cluster::{Part, Series, resource_of};
use super::{
    Context, Error, StatusWrite, is_conflict, is_not_found, retry_conflicts, write_status,
};
use crate::api::{InferenceService, ScaleView};
use crate::plan::resource_scaling_group::band;
use crate::plan::scale_view as view_plan;
use crate::watch::caches::Caches;

/// How often an unchanged view is looked at again: a safety net only, since
/// its target is watched.
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
    let cluster = &ctx.cluster;
    let (views, services) = (
        resource_of::<ScaleView>(),
        resource_of::<InferenceService>(),
    );
    let target_name = view.spec.target_ref.name.as_str();

    // Observe and plan.
    let target = cluster.service(namespace, target_name);
    let band = band::of_view(name, &cluster.groups(namespace));
    let pass = view_plan::reconcile(&view, target.as_deref(), band.as_ref(), &Time((ctx.now)()));
    let deleting = view.metadata.deletion_timestamp.is_some();

    // The finalizer comes first, so the lock below cannot outlive the view.
    if !deleting && let Some(finalizers) = &pass.finalizers {
        match patch_finalizers(&ctx, &view, name, finalizers).await {
            Ok(()) => {}
            // Deleted before it was first seen (its namespace is going, say):
            // nothing was locked for it, and nothing is.
            Err(Error::Kube(e)) if is_not_found(&e) => return Ok(Action::await_change()),
            Err(Error::Kube(e)) if is_conflict(&e) => return Ok(finalizers_raced(name)),
            Err(e) => return Err(e),
        }
    }
    if let (Some(locks), Some(target)) = (&pass.locks, &target) {
        let patch = Patch::Merge(json!({
            "metadata": {"resourceVersion": target.metadata.resource_version},
            "status": {"scaleViews": locks},
        }));
        match cluster
            .patch(&services, namespace, target_name, Part::Status, &patch)
            .await
        {
            Ok(()) => {}
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
        let patch = Patch::Json(patch);
        retry_conflicts(&ctx, &reference, "scaling the target's roles", || {
            cluster.patch(&services, namespace, target_name, Part::Object, &patch)
        })
        .await?;
        for _ in &pass.roles {
            ctx.metrics
                .decided("ScaleView", crate::plan::shared::decision::ROLE_SCALED);
        }
    }
    if deleting && let Some(finalizers) = &pass.finalizers {
        match patch_finalizers(&ctx, &view, name, finalizers).await {
            Ok(()) => {}
            // The cache showed the view being deleted before it showed our
            // own last status write: look again once it has caught up.
            Err(Error::Kube(e)) if is_conflict(&e) => return Ok(finalizers_raced(name)),
            Err(e) => return Err(e),
        }
    }
    if let Some(status) = &pass.status
        && view.status.as_ref() != Some(status)
    {
        let reference = view.object_ref(&());
        if write_status(&ctx, &reference, &views, (namespace, name), status).await?
            == StatusWrite::Gone
        {
            return Ok(Action::await_change());
        }
    }

    record(&ctx, &view, target.as_deref(), &pass.events).await;
    Ok(if deleting {
        Action::await_change()
    } else {
        Action::requeue(RESYNC)
    })
}

/// Records the pass's Events on the view, its target as the related object.
async fn record(
    ctx: &Context,
    view: &ScaleView,
    target: Option<&InferenceService>,
    events: &[view_plan::Note],
) {
    let reference = view.object_ref(&());
    let secondary = target.map(|t| t.object_ref(&()));
    for note in events {
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
        let series = if note.is_episode() {
            Series::Own
        } else {
            Series::Fold
        };
        ctx.cluster.record(&reference, &event, series).await;
    }
}

/// What a finalizer write refused for its resourceVersion leads to: the view
/// changed after the cache's copy (a status write of ours not yet seen, or
/// another manager's finalizer), so the merge patch, which replaces the whole
/// list, must not land; the reconcile looks again on a fresher copy. Not a
/// failure: nothing is wrong, the cache is behind.
fn finalizers_raced(name: &str) -> Action {
    tracing::debug!(
        view = name,
        "the view changed while writing its finalizers; retrying"
    );
    Action::requeue(CONFLICT_RETRY)
}

/// Writes the view's finalizers, guarded by its resourceVersion.
async fn patch_finalizers(
    ctx: &Context,
    view: &ScaleView,
    name: &str,
    finalizers: &[String],
) -> Result<(), Error> {
    let patch = Patch::Merge(json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": view.metadata.resource_version,
    }}));
    let namespace = view.metadata.namespace.as_deref().unwrap_or_default();
    ctx.cluster
        .patch(
            &resource_of::<ScaleView>(),
            namespace,
            name,
            Part::Object,
            &patch,
        )
        .await?;
    Ok(())
}

/// Runs the controller on the process's caches until `stop` (see
/// [`super::run_controller`]). A change of a target (its roles, its
/// readiness) reconciles the views that target it, found through an index
/// kept from the views' watch events.
pub async fn run(
    ctx: Arc<Context>,
    caches: Arc<Caches>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let store = caches.views.clone();
    super::run_controller(ctx, caches, store, reconcile, stop).await;
}
