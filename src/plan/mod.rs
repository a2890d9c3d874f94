//! Pure decisions: from observed objects to what should exist. Nothing here
//! talks to a cluster; the webhook, the reconcilers and `tandem render` call
//! the same functions.
//!
//! One folder per capability, each with what its seed asks for:
//! - `inference_service/`: an InferenceService's children, status, rollouts
//!   and upgrades (seeds 003 and 004);
//! - `scale_view/`: a ScaleView's split and locks (seed 002);
//! - `resource_scaling_group/`: a ResourceScalingGroup's ratios, follow
//!   graph, adapters, in-place scaling and group replication (seed 000);
//! - `engine/`: what the vLLM and SGLang releases inside a role's pods
//!   accept, read from their wheels, and the warnings a role gets when its
//!   command names what its release lacks (issue 52);
//! - `victims/`: which replicas or groups go on a scale-down, for roles and
//!   groups alike (seed 001);
//! - `shared/`: what several of them use (quantities, replica arithmetic,
//!   leadership, child naming, status conditions, the writes a plan asks for
//!   and their applied-hash stamp, scale-down policies, Event reasons, and
//!   the decision names the metrics count).
//!
//! The rule: `shared/` imports nothing from a capability folder, and no
//! module imports one that imports it back. What two capabilities (or a
//! capability and `shared/`) both need lives in `shared/`; a capability may
//! re-export it under its old path (`service::Apply` is
//! `shared::write::Apply`, `status::condition` is `shared::condition`).
//! The capabilities still use each other one way: `inference_service`
//! uses `scale_view` and `victims`, and so does `resource_scaling_group`.
//! `tests/unit/modules.rs` holds the whole crate to the second half of the rule.

pub mod engine;
pub mod inference_service;
pub mod resource_scaling_group;
pub mod scale_view;
pub mod shared;
pub mod victims;
