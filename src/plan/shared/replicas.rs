//! Which replica indices of a role should exist.

use std::collections::BTreeSet;

/// The indices a role keeps with `desired` replicas when `existing` exist, in
/// the Ordered policy: scaling down removes the highest indices, scaling up
/// creates the lowest missing ones (so a gap left by a deleted replica is
/// refilled first).
pub fn ordered(existing: &BTreeSet<u32>, desired: usize) -> BTreeSet<u32> {
    if existing.len() >= desired {
        return existing.iter().copied().take(desired).collect();
    }
    let mut kept = existing.clone();
    let mut candidate = 0u32;
    while kept.len() < desired {
        kept.insert(candidate);
        // desired <= the role's replicas (an i32), so u32 indices never run out.
        candidate = candidate.saturating_add(1);
    }
    kept
}

/// A change of replicas is taken for a possible typo when it multiplies
/// them by more than this (issue 37: 3 → 100 000, a stray run of zeros)…
pub const JUMP_FACTOR: i64 = 10;

/// …and ends above this many: scaling 2 → 40 is an ordinary step, and a
/// role of a hundred replicas is within what one team runs on purpose.
pub const JUMP_FLOOR: i64 = 100;

/// The admission warning for setting `field` from `from` to `to` replicas
/// (a role's, a view's total, a group count): None unless `to` is more
/// than [`JUMP_FACTOR`] times `from` and more than [`JUMP_FLOOR`]. A warning,
/// never a refusal: an autoscaler's sudden, legitimate step must not be
/// refused, and a human sees the warning in kubectl's output at once.
pub fn jump_warning(field: &str, from: i64, to: i64) -> Option<String> {
    let from = from.max(0);
    (to > JUMP_FLOOR && to > from.saturating_mul(JUMP_FACTOR)).then(|| {
        format!(
            "{field}: {from} -> {to} replicas is more than {JUMP_FACTOR} times as many; if it is a typo, set it back now: Tandem makes replicas in batches (1, 2, 4 … up to 64 a pass) and a correction takes effect after the batch in flight"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_jump_is_more_than_ten_times_and_above_a_hundred() {
        assert!(
            jump_warning("spec.replicas", 3, 100_000)
                .is_some_and(|w| w.starts_with("spec.replicas: 3 -> 100000 replicas"))
        );
        assert_eq!(jump_warning("r", 3, 30), None, "ten times, 30: ordinary");
        assert_eq!(jump_warning("r", 5, 100), None, "not above 100");
        assert_eq!(jump_warning("r", 20, 200), None, "exactly ten times");
        assert!(jump_warning("r", 20, 201).is_some());
        assert!(jump_warning("r", 0, 101).is_some(), "from zero");
        assert_eq!(jump_warning("r", 0, 100), None);
        assert_eq!(jump_warning("r", 500, 3), None, "a scale-down");
        assert!(jump_warning("r", -1, 101).is_some());
    }

    fn set(indices: &[u32]) -> BTreeSet<u32> {
        indices.iter().copied().collect()
    }

    #[test]
    fn scale_up_and_down() {
        assert_eq!(ordered(&set(&[]), 3), set(&[0, 1, 2]));
        assert_eq!(
            ordered(&set(&[0, 1, 2, 3]), 2),
            set(&[0, 1]),
            "highest go first"
        );
        assert_eq!(
            ordered(&set(&[0, 2, 4]), 5),
            set(&[0, 1, 2, 3, 4]),
            "gaps refilled"
        );
        assert_eq!(ordered(&set(&[0, 2, 4]), 2), set(&[0, 2]));
        assert_eq!(
            ordered(&set(&[10]), 3),
            set(&[0, 1, 10]),
            "lowest missing first"
        );
        assert_eq!(ordered(&set(&[0, 1]), 0), set(&[]));
    }

    proptest! {
        #[test]
        fn keeps_exactly_desired_and_never_drops_a_lower_existing_index(
            existing in proptest::collection::btree_set(0u32..40, 0..20),
            desired in 0usize..30,
        ) {
            let kept = ordered(&existing, desired);
            prop_assert_eq!(kept.len(), desired);
            // Every existing index below the highest kept one survives.
            if let Some(&top) = kept.iter().next_back() {
                for i in existing.iter().filter(|&&i| i < top) {
                    prop_assert!(kept.contains(i));
                }
            }
            // Scaling down only removes; scaling up only adds.
            if desired <= existing.len() {
                prop_assert!(kept.is_subset(&existing));
            } else {
                prop_assert!(existing.is_subset(&kept));
            }
        }
    }
}
