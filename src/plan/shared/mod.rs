pub mod children;
pub mod decision;
pub mod leadership;
pub mod quantity;
pub mod replicas;
