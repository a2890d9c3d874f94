//! Pure decisions: from observed objects to what should exist. Nothing here
//! talks to a cluster; the webhook, the reconcilers and `tandem render` call
//! the same functions.

pub mod children;
pub mod router;
