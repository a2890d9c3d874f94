//! Event and condition reasons that a capability reports and
//! [`super::decision`] names for the metrics: defined here, below both.

/// The Progressing reason of a halted RollingUpdate
/// (`plan::inference_service::service`).
pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";

/// An InplaceScaling group's Event reasons
/// (`plan::resource_scaling_group::inplace`): a Target scaled to follow its
/// Source, a hand edit of a Target set back, a group that cannot follow.
pub const SCALED: &str = "Scaled";
pub const DRIFT_REPAIRED: &str = "DriftRepaired";
pub const STALLED: &str = "Stalled";
