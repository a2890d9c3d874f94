//! Replaced by the GroupReplication branch at merge.

use std::sync::Arc;

use kube::runtime::controller::Action;

use super::{Context, Error};
use crate::api::ResourceScalingGroup;

/// Reconciles one GroupReplication ResourceScalingGroup.
pub async fn reconcile(
    _rsg: Arc<ResourceScalingGroup>,
    _ctx: Arc<Context>,
) -> Result<Action, Error> {
    Ok(Action::await_change())
}
