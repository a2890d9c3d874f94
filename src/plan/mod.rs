//! Pure decisions: from observed objects to what should exist. Nothing here
//! talks to a cluster; the webhook, the reconcilers and `tandem render` call
//! the same functions.

pub mod adapter;
pub mod children;
pub mod dag;
pub mod decision;
pub mod disruption;
pub mod drain;
pub mod gang;
pub mod inplace;
pub mod leadership;
pub mod locks;
pub mod pacing;
pub mod quantity;
pub mod ratio;
pub mod replicas;
pub mod replication;
pub mod revision;
pub mod rollout;
pub mod router;
pub mod scale_view;
pub mod service;
pub mod split;
pub mod status;
pub mod topology;
pub mod traffic;
pub mod upgrade;
pub mod victims;
