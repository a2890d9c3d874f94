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
//! - `victims/`: which replicas or groups go on a scale-down, for roles and
//!   groups alike (seed 001);
//! - `shared/`: what several of them use (quantities, replica arithmetic,
//!   leadership, child naming, decision names).
//!
//! `dag` and `ratio`, and `rollout` and `service`, no longer import each
//! other; `shared/` still reaches up in places (`children` uses `gang` and
//! `drain`, `decision` uses `service`'s and `inplace`'s names), and
//! `resource_scaling_group::replication` uses `service`'s Apply/Delete and
//! `status::condition`.

pub mod inference_service;
pub mod resource_scaling_group;
pub mod scale_view;
pub mod shared;
pub mod victims;
