//! The ResourceScalingGroup's decisions. InplaceScaling: a Target's replicas
//! at its ratio and what each binding resolves to (`ratio`), the follow graph
//! that keeps bindings acyclic (`dag`), replicas propagated along chains of
//! groups (`propagation`), the band a band Target's view applies (`band`),
//! reading and scaling each kind (`adapter`) and one
//! group's reconcile (`inplace`). GroupReplication: cloning the targets into
//! groups and removing whole groups (`replication`). They implement seed 000
//! (`000_2915364211b84d67.txt`), sections "Design Details" (its "Interface")
//! and "Risks and Mitigations" ("1. Circular Dependencies", "2. Orphaned
//! Resources").

pub mod adapter;
pub mod band;
pub mod dag;
pub mod inplace;
pub mod propagation;
pub mod ratio;
pub mod replication;
