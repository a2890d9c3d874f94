//! Pure decisions: from observed objects to what should exist. Nothing here
//! talks to a cluster; the webhook, the reconcilers and `tandem render` call
//! the same functions.

pub mod inference_service;
pub mod resource_scaling_group;
pub mod scale_view;
pub mod shared;
pub mod victims;
