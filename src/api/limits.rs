//! The upper limits of every number users write in Tandem's objects, in one
//! place.
//!
//! Each limit is far above any real deployment and far below where the
//! arithmetic done with it could overflow: a role's pods are
//! `replicas × nodeCount` and a service's the sum over its roles, a Target's
//! replicas `ceil(source × ratio)`, a replicated group's objects
//! `groups × target resources`. With every factor bounded, every product of
//! them fits an `i32` many times over. The validation functions of the three
//! kinds (`api::*::validate`, run by the webhook and by `tandem render` alike)
//! deny a value over its limit with the field path and the limit; the
//! generated CRD schemas carry the same numbers as `maximum`/`maxItems`, so
//! the API server refuses them even while the webhook is unreachable (bar
//! the ratio, which may be written as a number or a string).
//!
//! The plans never rely on these limits for safety: they compute with checked
//! or saturating arithmetic and stay total on any input. The limits are what
//! makes the answers meaningful.

use rust_decimal::Decimal;

/// Replicas of one role of an InferenceService (`spec.roles[].replicas`), of
/// one ScaleView group (`constraints.min`/`max`), of a binding's
/// `min`/`max`, and the most a ratio may give a Target.
pub const MAX_REPLICAS: i32 = 10_000;

/// Nodes (pods) per replica of a multi-node role (`multinode.nodeCount`).
pub const MAX_NODE_COUNT: i32 = 1_000;

/// Pods of one role: `replicas × nodeCount`.
pub const MAX_PODS_PER_ROLE: i64 = 100_000;

/// Pods of one service: the sum of its roles' pods.
pub const MAX_PODS_PER_SERVICE: i64 = 100_000;

/// Roles of one InferenceService (`spec.roles`), and groups of one ScaleView
/// (`spec.scalePolicy`), which are roles.
pub const MAX_ROLES: usize = 32;

/// The highest ScaleView group priority (`scalePolicy[].priority`, 0..=10).
pub const MAX_PRIORITY: i32 = 10;

/// A ScaleView's total over all its groups (`spec.replicas`, and `/scale`).
pub const MAX_VIEW_REPLICAS: i32 = 100_000;

/// Resources of one ResourceScalingGroup (`spec.targetResources`), and
/// bindings of an InplaceScaling group.
pub const MAX_TARGET_RESOURCES: usize = 64;

/// Groups of a GroupReplication (`groupConfig.replicas`).
pub const MAX_GROUPS: i32 = 1_000;

/// Objects a GroupReplication keeps: `groups × target resources`.
pub const MAX_REPLICATED_OBJECTS: i64 = 10_000;

/// The largest ratio a Target may follow its Source at (`bindings[].ratio`).
pub const MAX_RATIO: Decimal = Decimal::from_parts(1_000, 0, 0, false, 0);

/// Seconds between the traffic steps of an IncrementalUpgrade
/// (`incrementalUpgradeOptions.intervalSeconds`): one day.
pub const MAX_INTERVAL_SECONDS: i32 = 86_400;

/// The message of a value over its limit: `must be at most 10000, got 10001`.
pub fn over(limit: impl std::fmt::Display, got: impl std::fmt::Display) -> String {
    format!("must be at most {limit}, got {got}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_of_the_limits_fit_with_room() {
        // A role at both limits is refused by the pods-per-role limit, and
        // even the product of the two factors fits an i32.
        let role = i64::from(MAX_REPLICAS) * i64::from(MAX_NODE_COUNT);
        assert!(role < i64::from(i32::MAX));
        assert!(MAX_PODS_PER_SERVICE <= i64::from(i32::MAX) / 100);
        let replicated = i64::from(MAX_GROUPS) * MAX_TARGET_RESOURCES as i64;
        assert!(replicated < i64::from(i32::MAX));
        assert_eq!(MAX_RATIO, Decimal::from(1_000));
        assert!(i64::from(MAX_REPLICAS) * 1_000 < i64::from(i32::MAX));
    }

    #[test]
    fn over_says_the_limit_and_the_value() {
        assert_eq!(
            over(MAX_REPLICAS, 10_001),
            "must be at most 10000, got 10001"
        );
    }
}
