//! Tandem: deploys LLM inference services made of roles on Kubernetes, scales
//! roles together at fixed ratios and groups by priority, and guards it all with
//! an admission webhook.
#![forbid(unsafe_code)]
// Values read from objects are user input: every operation on them is checked
// or saturating (issue 16), and these lints keep it so. Tests may compute
// expectations with plain operators.
#![cfg_attr(
    not(test),
    warn(
        clippy::arithmetic_side_effects,
        clippy::cast_possible_truncation,
        clippy::cast_possible_wrap,
        clippy::cast_sign_loss
    )
)]
// No function, tests included, longer than clippy.toml's
// too-many-lines-threshold (issue 18): a longer one is split along its steps.
#![warn(clippy::too_many_lines)]

pub mod admission;
pub mod api;
pub mod certs;
pub mod check;
pub mod cli;
pub mod exit;
pub mod fuzzing;
pub mod logging;
pub mod plan;
pub mod reconcile;
pub mod render;
pub mod server;
pub mod watch;
