pub mod adapter;
pub mod dag;
pub mod inplace;
pub mod propagation;
pub mod ratio;
pub mod replication;
