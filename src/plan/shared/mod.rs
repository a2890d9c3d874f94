//! Pieces several capabilities' decisions use: resource quantities
//! (`quantity`), the arithmetic of replica counts (`replicas`), who leads
//! (`leadership`), how children are named, labelled and owned (`children`),
//! and the names of the decisions the metrics count (`decision`). No seed
//! section is theirs alone: they serve seeds 000 and 003 (and the controller
//! leadership every Tandem replica runs).

pub mod children;
pub mod decision;
pub mod leadership;
pub mod quantity;
pub mod replicas;
