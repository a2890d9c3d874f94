pub mod adapter;
pub mod dag;
pub mod inplace;
pub mod ratio;
pub mod replication;
