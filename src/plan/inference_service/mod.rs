//! The InferenceService's decisions: its replicas as one LeaderWorkerSet each
//! (`topology`), the shared Volcano PodGroup (`gang`) or Kubernetes'
//! PodGroups (`pod_groups`), the router's objects
//! (`router`), status (`status`), revisions and how a rollout moves between
//! them (`revision`, `rollout`, `pacing`), a replica's drain out of traffic
//! (`drain`), PodDisruptionBudgets (`disruption`), a replica's bounded
//! recreation after restarts (`recovery`), prefill and decode reaching and
//! leaving zero together (`pair`), the names of
//! every child and the rules they must keep (`names`), incremental upgrades and
//! their traffic split (`upgrade`, `traffic`), and the whole plan of one
//! reconcile (`service`). They implement seed 003
//! (`003_7139499c8997c161.txt`), sections "Reconciliation Logic", "Gang
//! Scheduling Behavior" and "PodGroup Management", and seed 004
//! (`004_9c98a1cdfac31be9.txt`), sections "Example Upgrade Process" and
//! "Rollback Support".

pub mod dependencies;
pub mod disruption;
pub mod drain;
pub mod gang;
pub mod names;
pub mod pacing;
pub mod pair;
pub mod placement;
pub mod pod_groups;
pub mod recovery;
pub mod revision;
pub mod rollout;
pub mod router;
pub mod service;
pub mod status;
pub mod topology;
pub mod traffic;
pub mod upgrade;
