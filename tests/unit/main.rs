//! The first world: Tandem's library and its binary with no API server.
//! Pure planning and admission, `tandem render` and `tandem check` on files,
//! the webhook server over TLS on loopback, the examples and the committed
//! fuzz corpora, the artifacts (manifests, chart, Dockerfile, workflows)
//! read as files. Nothing here starts a control plane; a few modules read
//! the upstream CRDs, which come from their Go modules (tests/README.md).
//! One test binary, the harness (`tests/harness`) linked once.

mod admission_answers;
mod admission_mutation;
mod artifacts;
mod certificate_timeline;
mod check;
mod cli;
mod dependencies;
mod docs_agree;
mod drain;
mod engines;
mod examples;
mod extremes;
mod fuzz_corpus;
mod gang;
mod invariants;
mod limits;
mod modules;
mod quickstart;
mod release_workflow;
mod render_foreign_fields;
mod render_names;
mod render_resource_scaling_group;
mod render_scale_view;
mod resilience;
mod router;
mod stories;
mod template_mistakes;
mod webhook_scale_view;
mod webhook_tls;
