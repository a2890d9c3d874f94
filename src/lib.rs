//! Tandem: deploys LLM inference services made of roles on Kubernetes, scales
//! roles together at fixed ratios and groups by priority, and guards it all with
//! an admission webhook.
#![forbid(unsafe_code)]

pub mod admission;
pub mod api;
pub mod certs;
pub mod fuzzing;
pub mod plan;
pub mod reconcile;
pub mod render;
pub mod server;
