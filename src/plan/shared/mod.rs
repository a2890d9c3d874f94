//! Pieces several capabilities' decisions use: resource quantities
//! (`quantity`), the arithmetic of replica counts (`replicas`), who leads
//! (`leadership`), how children are named, labelled and owned (`children`),
//! status conditions (`condition`), the writes a plan asks for and the
//! applied-hash stamp that tells whether one is needed (`write`), which
//! replica a write concerns and its scale-down policy (`scale_down_policy`),
//! Event reasons the metrics name (`reason`), what is installed of the
//! projects whose objects Tandem writes (`installed`), a pod as the plans
//! read it (`pod`), and the names of the decisions
//! the metrics count (`decision`). No seed section is theirs alone: they
//! serve seeds 000 and 003 (and the controller leadership every Tandem
//! replica runs). Nothing here imports from a capability folder.

pub mod batch;
pub mod child_kinds;
pub mod children;
pub mod condition;
pub mod decision;
pub mod installed;
pub mod leadership;
pub mod native_gang;
pub mod pod;
pub mod reason;
pub mod replicas;
pub mod scale_down_policy;
pub mod write;
