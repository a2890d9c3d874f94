//! The second world: Tandem's controllers, in process or as the real
//! binary, against the in-memory API server (`harness::fake_api`), which
//! keeps resourceVersions, server-side apply's field managers, owner
//! references and a request log. What the real control plane would add
//! (schedulers, kubelets, other controllers) is the third world's
//! (`tests/cluster`). One test binary, the harness linked once.

mod api_server;
mod batching;
mod controller_metrics;
mod leader_election;
mod reconcile_group_replication;
mod reconcile_inference_service;
mod reconcile_resource_scaling_group;
mod reconcile_scale_view;
mod upgrade;
mod write_efficiency;
