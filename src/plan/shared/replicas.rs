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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
