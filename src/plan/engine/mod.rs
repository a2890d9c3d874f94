//! The model servers inside a role's pods, as their released sources define
//! them: which flags, KV connectors, transfer backends, environment
//! variables, HTTP paths and metrics each vLLM and SGLang release has.
//!
//! The knowledge is a table (`releases.json`) that `extract.py`, beside it,
//! reads out of each release's wheel on PyPI, pinned by sha256;
//! `tests/unit/engines.rs` holds the table to those wheels. Nothing here
//! reads a cluster or a registry: admission and `tandem render` call
//! [`check`] with a service's spec and get warnings, never denials, so a
//! fork or a private image is never refused (docs/inferenceservice.md,
//! "Engines").
//!
//! - [`releases`]: the table, and which engine release an image runs;
//! - [`command`]: a container's command and args read as that engine's
//!   command line;
//! - [`checks`]: what a role's engine would refuse or miss, as warnings;
//! - [`launch`]: how a multi-node replica starts that engine across its pods.

pub mod checks;
pub mod command;
pub mod launch;
pub mod releases;

pub use checks::check;
pub use launch::{Launch, multi_node_launch};
pub use releases::{Engine, Release, identify, release};
