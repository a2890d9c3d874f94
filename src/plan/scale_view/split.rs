//! How a ScaleView's total is split over its groups (DESIGN.md §1.3, seed 002).
//!
//! The rules, in order:
//! 1. A group's min defaults to 0 and its max to [`MAX_REPLICAS`], the most
//!    replicas a role may have; no group gets more. The total is clamped
//!    into [Σmin, Σmax]; a negative request clamps to Σmin. Strict mode is the
//!    webhook's business ([`crate::api::scale_view::validate_total`]): here a
//!    total is never refused, so an autoscaler always gets a split.
//! 2. Every group first gets its min.
//! 3. What is left goes to priority tiers from the highest priority down; a
//!    tier is filled up to its groups' maxes before a lower tier gets anything.
//! 4. Inside a tier replicas are water-filled: every group ends at
//!    `max(min, min(level, max))` for one common integer level, which gives the
//!    smallest variance the constraints allow. The units a whole level cannot
//!    spread evenly go one each to the groups still below their max with the
//!    smaller max first (no max counts as [`MAX_REPLICAS`]), then by group name
//!    (RisingWave's rule).
//!
//! The result does not depend on the order of `scalePolicy`, always sums to
//! the clamped total and respects every min and max. The level is found by a
//! binary search over at most 32 steps, so the work is O(groups × 32) whatever
//! the number of replicas.
//!
//! A spec the webhook would reject still splits without panicking: negative
//! constraints count as 0, a max below its min counts as the min, and repeated
//! entries of one group merge into one group with the highest priority and
//! the tightest constraints.

use std::collections::BTreeMap;

use crate::api::limits::MAX_REPLICAS;
use crate::api::scale_view::ScaleViewSpec;
use crate::plan::shared::children;

/// Replicas of each group of a view for one requested total.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The total actually split, after clamping into [Σmin, Σmax]. An i64
    /// because the mins of a view the webhook did not check may sum past
    /// i32::MAX; every group's own share always fits an i32.
    pub total: i64,
    /// The total that was asked for (spec.replicas or a `/scale` write).
    pub requested: i32,
    /// Whether `total` differs from `requested`.
    pub clamped: bool,
    /// What set `total` when it differs from `requested`.
    pub bound: Option<Bound>,
    /// Replicas per group, keyed by group (role) name.
    pub groups: BTreeMap<String, i32>,
}

/// What clamped a requested total.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Raised to the sum of the groups' mins.
    GroupsMin,
    /// Lowered to the sum of the groups' maxes.
    GroupsMax,
    /// Raised to the band's lower end.
    BandMin,
    /// Lowered to the band's upper end.
    BandMax,
}

/// One group after defaults and normalisation.
#[derive(Clone, Copy, Debug)]
struct Group<'a> {
    name: &'a str,
    priority: i32,
    min: i32,
    /// [`MAX_REPLICAS`] when the group has no max (or a larger one): no role
    /// may hold more replicas than that.
    max: i32,
}

impl Group<'_> {
    /// The group's replicas at a water level.
    fn at(&self, level: i32) -> i32 {
        level.min(self.max).max(self.min)
    }

    /// Replicas above the group's min at a water level.
    fn raised(&self, level: i32) -> i64 {
        i64::from(self.at(level)).saturating_sub(i64::from(self.min))
    }

    fn room(&self) -> i64 {
        i64::from(self.max).saturating_sub(i64::from(self.min))
    }
}

/// Splits `requested` replicas over the view's groups.
pub fn split(spec: &ScaleViewSpec, requested: i32) -> Split {
    split_in(spec, requested, None)
}

/// Splits `requested` replicas over the view's groups, kept within `band`
/// (its lower and upper end) first, then within the groups' constraints:
/// a group's min and max are the roles' own limits, so they win over a band
/// that lies outside them.
pub fn split_in(spec: &ScaleViewSpec, requested: i32, band: Option<(i32, i32)>) -> Split {
    let groups = normalize(spec);
    let sum_min = sum(groups.iter().map(|g| i64::from(g.min)));
    let sum_max = sum(groups.iter().map(|g| i64::from(g.max)));
    let asked = i64::from(requested);
    let banded = band.map_or(asked, |(low, high)| {
        asked.clamp(i64::from(low.min(high)), i64::from(low.max(high)))
    });
    // Each group has max >= min, so sum_min <= sum_max.
    let total = banded.max(sum_min).min(sum_max);
    // The last clamp that moved the total decided it.
    let bound = if total > banded {
        Some(Bound::GroupsMin)
    } else if total < banded {
        Some(Bound::GroupsMax)
    } else if total > asked {
        Some(Bound::BandMin)
    } else if total < asked {
        Some(Bound::BandMax)
    } else {
        None
    };

    let mut replicas: BTreeMap<&str, i32> = groups.iter().map(|g| (g.name, g.min)).collect();
    let mut tiers: BTreeMap<i32, Vec<Group<'_>>> = BTreeMap::new();
    for group in &groups {
        tiers.entry(group.priority).or_default().push(*group);
    }
    let mut left = total.saturating_sub(sum_min);
    for tier in tiers.values().rev() {
        if left == 0 {
            break;
        }
        let room = sum(tier.iter().map(Group::room));
        if left >= room {
            for group in tier {
                replicas.insert(group.name, group.max);
            }
            left = left.saturating_sub(room);
        } else {
            for (name, value) in water_fill(tier, left) {
                replicas.insert(name, value);
            }
            left = 0;
        }
    }

    Split {
        total,
        requested,
        clamped: bound.is_some(),
        bound,
        groups: replicas
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
    }
}

/// A sum of replica counts in an i64, saturating (it would take billions
/// of i32 terms to get there).
fn sum(values: impl Iterator<Item = i64>) -> i64 {
    values.fold(0, i64::saturating_add)
}

/// The integer midpoint of `low <= high`, rounded down, without overflow.
fn midpoint(low: i32, high: i32) -> i32 {
    let middle = (i64::from(low).saturating_add(i64::from(high))).div_euclid(2);
    // Between two i32s, so it is one.
    i32::try_from(middle).unwrap_or(low)
}

/// The groups of a view with defaults applied, one entry per group name.
fn normalize(spec: &ScaleViewSpec) -> Vec<Group<'_>> {
    let mut merged: BTreeMap<&str, Group<'_>> = BTreeMap::new();
    for policy in &spec.scale_policy {
        let entry = Group {
            name: policy.group.as_str(),
            priority: policy.priority(),
            min: policy.min().clamp(0, MAX_REPLICAS),
            max: policy.max().unwrap_or(MAX_REPLICAS).clamp(0, MAX_REPLICAS),
        };
        merged
            .entry(entry.name)
            .and_modify(|group| {
                group.priority = group.priority.max(entry.priority);
                group.min = group.min.max(entry.min);
                group.max = group.max.min(entry.max);
            })
            .or_insert(entry);
    }
    merged
        .into_values()
        .map(|group| Group {
            max: group.max.max(group.min),
            ..group
        })
        .collect()
}

/// Shares `budget` replicas above the mins over one tier, where
/// 0 <= budget < the tier's room (Σ(max - min)).
fn water_fill<'a>(tier: &[Group<'a>], budget: i64) -> BTreeMap<&'a str, i32> {
    let raised = |level: i32| -> i64 { sum(tier.iter().map(|g| g.raised(level))) };
    // The highest level whose raise fits the budget: raised(low) <= budget <
    // raised(high) holds throughout, since at the smallest min nothing is
    // raised and at the largest max the whole room is, which exceeds budget.
    let mut low = tier.iter().map(|g| g.min).min().unwrap_or(0);
    let mut high = tier.iter().map(|g| g.max).max().unwrap_or(0);
    // 0 <= low <= high <= MAX_REPLICAS (normalize clamps), so the
    // differences and the midpoint are exact in an i64.
    while i64::from(high).saturating_sub(i64::from(low)) > 1 {
        let middle = midpoint(low, high);
        if raised(middle) <= budget {
            low = middle;
        } else {
            high = middle;
        }
    }
    let level = low;
    // Fewer units are left than groups that can still rise by one, because
    // raised(level + 1) > budget.
    let leftover = budget.saturating_sub(raised(level));
    let mut rising: Vec<&Group<'a>> = tier
        .iter()
        .filter(|g| g.min <= level && level < g.max)
        .collect();
    rising.sort_by(|a, b| a.max.cmp(&b.max).then(a.name.cmp(b.name)));

    let mut shares: BTreeMap<&'a str, i32> = tier.iter().map(|g| (g.name, g.at(level))).collect();
    for (group, _) in rising.iter().zip(0..leftover) {
        // level < group.max <= MAX_REPLICAS, so level + 1 never saturates.
        shares.insert(group.name, level.saturating_add(1));
    }
    shares
}

/// The label selector of exactly the pods of a view's groups: the scale
/// subresource's status.selector, from which HPA counts pods. With no groups
/// it selects nothing (`in ()` is not valid selector syntax, so it asks for
/// pods without a role label, which Tandem never creates).
pub fn selector(service: &str, component_type: &str, groups: &[&str]) -> String {
    let mut names: Vec<&str> = groups.to_vec();
    names.sort_unstable();
    names.dedup();
    let roles = if names.is_empty() {
        format!("!{}", children::ROLE_NAME)
    } else {
        format!("{} in ({})", children::ROLE_NAME, names.join(","))
    };
    format!(
        "{}={service},{}={component_type},{roles}",
        children::SERVICE,
        children::COMPONENT_TYPE
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::inference_service::ComponentType;
    use crate::api::scale_view::{Constraints, ScalePolicy, ScaleViewTarget};
    use proptest::prelude::*;

    fn group(name: &str, priority: i32, min: Option<i32>, max: Option<i32>) -> ScalePolicy {
        ScalePolicy {
            group: name.to_owned(),
            priority: Some(priority),
            constraints: Some(Constraints { min, max }),
        }
    }

    fn view(policies: Vec<ScalePolicy>) -> ScaleViewSpec {
        ScaleViewSpec {
            target_ref: ScaleViewTarget {
                name: "spot-decode".to_owned(),
                component_type: ComponentType::Decoder,
            },
            replicas: None,
            strict: None,
            scale_policy: policies,
        }
    }

    fn shares(split: &Split) -> Vec<(&str, i32)> {
        split.groups.iter().map(|(n, v)| (n.as_str(), *v)).collect()
    }

    /// A view, the requested total, the total split, whether it was clamped,
    /// and the replicas of each group.
    type Case<'a> = (&'a ScaleViewSpec, i32, i64, bool, Vec<(&'a str, i32)>);

    fn spot() -> ScaleViewSpec {
        view(vec![
            group("ondemand", 1, None, Some(2)),
            group("spot", 0, None, None),
        ])
    }

    /// Each case's total, clamp flag and per-group shares.
    fn check_splits(cases: Vec<Case<'_>>) {
        for (spec, requested, total, clamped, expected) in cases {
            let got = split(spec, requested);
            let names: Vec<_> = spec.scale_policy.iter().map(|p| &p.group).collect();
            assert_eq!(
                (got.total, got.clamped, shares(&got)),
                (total, clamped, expected),
                "{names:?} with {requested}"
            );
            assert_eq!(got.requested, requested);
        }
    }

    #[test]
    fn splits_table() {
        let spot = spot();
        let zones = view(vec![
            group("az-1", 0, None, None),
            group("az-2", 0, None, None),
        ]);
        let three = view(vec![
            group("c", 0, None, None),
            group("a", 0, None, None),
            group("b", 0, None, None),
        ]);
        let capped_ties = view(vec![
            group("a", 0, None, Some(10)),
            group("b", 0, None, Some(3)),
            group("c", 0, None, None),
        ]);
        let big_min = view(vec![
            group("a", 0, Some(5), None),
            group("b", 0, None, None),
            group("c", 0, None, None),
        ]);
        check_splits(vec![
            // Seed 002, case 1: balanced zones.
            (&zones, 4, 4, false, vec![("az-1", 2), ("az-2", 2)]),
            (&zones, 3, 3, false, vec![("az-1", 2), ("az-2", 1)]),
            // Seed 002, case 2: on-demand first, then spot.
            (&spot, 1, 1, false, vec![("ondemand", 1), ("spot", 0)]),
            (&spot, 2, 2, false, vec![("ondemand", 2), ("spot", 0)]),
            (&spot, 4, 4, false, vec![("ondemand", 2), ("spot", 2)]),
            // Uneven: the spare unit goes by name among equal maxes.
            (&three, 5, 5, false, vec![("a", 2), ("b", 2), ("c", 1)]),
            (&three, 7, 7, false, vec![("a", 3), ("b", 2), ("c", 2)]),
            // Uneven: the spare unit goes to the smaller max first.
            (
                &capped_ties,
                4,
                4,
                false,
                vec![("a", 1), ("b", 2), ("c", 1)],
            ),
            (
                &capped_ties,
                5,
                5,
                false,
                vec![("a", 2), ("b", 2), ("c", 1)],
            ),
            // b caps at 3, the rest levels a and c.
            (
                &capped_ties,
                11,
                11,
                false,
                vec![("a", 4), ("b", 3), ("c", 4)],
            ),
            // A min above the fair share stays; the others level below it.
            (&big_min, 7, 7, false, vec![("a", 5), ("b", 1), ("c", 1)]),
            (&big_min, 12, 12, false, vec![("a", 5), ("b", 4), ("c", 3)]),
            (&big_min, 15, 15, false, vec![("a", 5), ("b", 5), ("c", 5)]),
            (&big_min, 16, 16, false, vec![("a", 6), ("b", 5), ("c", 5)]),
        ]);
    }

    #[test]
    fn splits_table_clamped() {
        let zones = view(vec![
            group("az-1", 0, None, None),
            group("az-2", 0, None, None),
        ]);
        let capped = view(vec![
            group("a", 0, Some(1), Some(2)),
            group("b", 3, Some(1), Some(3)),
        ]);
        check_splits(vec![
            // Above Σmax and below Σmin: clamped and flagged.
            (&capped, 10, 5, true, vec![("a", 2), ("b", 3)]),
            (&capped, 5, 5, false, vec![("a", 2), ("b", 3)]),
            (&capped, 3, 3, false, vec![("a", 1), ("b", 2)]),
            (&capped, 1, 2, true, vec![("a", 1), ("b", 1)]),
            (&capped, 0, 2, true, vec![("a", 1), ("b", 1)]),
            (&capped, -7, 2, true, vec![("a", 1), ("b", 1)]),
            // Zero and negative without mins.
            (&zones, 0, 0, false, vec![("az-1", 0), ("az-2", 0)]),
            (&zones, -1, 0, true, vec![("az-1", 0), ("az-2", 0)]),
            (&zones, i32::MIN, 0, true, vec![("az-1", 0), ("az-2", 0)]),
        ]);
    }

    #[test]
    fn splits_table_by_tier() {
        let three_tiers = view(vec![
            group("low", 0, None, None),
            group("mid-a", 5, None, Some(3)),
            group("mid-b", 5, Some(2), Some(4)),
            group("top", 9, None, Some(1)),
        ]);
        check_splits(vec![
            // Tiers fill top down; mid-b's min is given before any tier fills.
            (
                &three_tiers,
                2,
                2,
                false,
                vec![("low", 0), ("mid-a", 0), ("mid-b", 2), ("top", 0)],
            ),
            (
                &three_tiers,
                4,
                4,
                false,
                vec![("low", 0), ("mid-a", 1), ("mid-b", 2), ("top", 1)],
            ),
            (
                &three_tiers,
                6,
                6,
                false,
                // Level 2 leaves one unit: mid-a has the smaller max.
                vec![("low", 0), ("mid-a", 3), ("mid-b", 2), ("top", 1)],
            ),
            (
                &three_tiers,
                10,
                10,
                false,
                vec![("low", 2), ("mid-a", 3), ("mid-b", 4), ("top", 1)],
            ),
        ]);
    }

    #[test]
    fn an_empty_view_splits_nothing() {
        let got = split(&view(vec![]), 3);
        assert_eq!((got.total, got.clamped), (0, true));
        assert!(got.groups.is_empty());
        assert!(!split(&view(vec![]), 0).clamped);
    }

    #[test]
    fn the_largest_total_over_unlimited_groups() {
        let spec = view(vec![group("a", 0, None, None), group("b", 0, None, None)]);
        let got = split(&spec, i32::MAX);
        assert_eq!(
            shares(&got),
            vec![("a", MAX_REPLICAS), ("b", MAX_REPLICAS)],
            "no group gets more than a role may have"
        );
        assert!(got.clamped);
        let odd = split(&spec, MAX_REPLICAS + 1);
        assert_eq!(
            shares(&odd),
            vec![("a", MAX_REPLICAS / 2 + 1), ("b", MAX_REPLICAS / 2)],
            "an odd total: a gets the spare unit by name"
        );
        assert!(!odd.clamped);
    }

    #[test]
    fn ten_thousand_groups_split_fast() {
        let policies: Vec<ScalePolicy> = (0..10_000)
            .map(|i| {
                let max = if i % 3 == 0 { None } else { Some(i % 97) };
                group(
                    &format!("g{i:05}"),
                    i % 11,
                    Some(i % 5).filter(|_| i % 2 == 0),
                    max,
                )
            })
            .collect();
        let spec = view(policies);
        // Correct at scale; how fast is measured in benches/, not asserted here.
        for requested in [0, 1, 12_345, 250_000, 400_000, i32::MAX] {
            let got = split(&spec, requested);
            let sum: i64 = got.groups.values().map(|&v| i64::from(v)).sum();
            assert_eq!(sum, got.total, "requested {requested}");
            assert_eq!(got.groups.len(), 10_000);
        }
    }

    #[test]
    fn specs_the_webhook_rejects_still_split() {
        // max below min: min wins; negative constraints count as 0.
        let inverted = view(vec![
            group("a", 0, Some(3), Some(1)),
            group("b", 0, Some(-2), Some(-1)),
        ]);
        let got = split(&inverted, 10);
        assert_eq!((got.total, got.clamped), (3, true));
        assert_eq!(shares(&got), vec![("a", 3), ("b", 0)]);

        // A repeated group merges: highest priority, tightest constraints,
        // whatever the order of the entries.
        let twice = vec![
            group("a", 0, Some(1), Some(5)),
            group("b", 1, None, None),
            group("a", 2, Some(2), Some(4)),
        ];
        let mut reversed = twice.clone();
        reversed.reverse();
        for policies in [twice, reversed] {
            let got = split(&view(policies), 6);
            assert_eq!(shares(&got), vec![("a", 4), ("b", 2)]);
        }

        // Mins above the limit count as the limit.
        let huge = view(vec![
            group("a", 0, Some(i32::MAX), None),
            group("b", 0, Some(i32::MAX), Some(i32::MAX)),
        ]);
        let got = split(&huge, 5);
        assert_eq!(got.total, 2 * i64::from(MAX_REPLICAS));
        assert_eq!(shares(&got), vec![("a", MAX_REPLICAS), ("b", MAX_REPLICAS)]);
    }

    #[test]
    fn selector_selects_the_groups_pods() {
        assert_eq!(
            selector(
                "spot-decode",
                "decoder",
                &["decode-spot", "decode-ondemand"]
            ),
            "fusioninfer.io/service=spot-decode,fusioninfer.io/component-type=decoder,fusioninfer.io/role-name in (decode-ondemand,decode-spot)"
        );
        assert_eq!(
            selector("svc", "worker", &["b", "a", "b"]),
            "fusioninfer.io/service=svc,fusioninfer.io/component-type=worker,fusioninfer.io/role-name in (a,b)"
        );
        assert_eq!(
            selector("svc", "worker", &[]),
            "fusioninfer.io/service=svc,fusioninfer.io/component-type=worker,!fusioninfer.io/role-name"
        );
    }

    /// The same rules, one replica at a time: each unit goes to the
    /// highest-priority group below its max, the lowest first, ties to the
    /// smaller max, then the name. Slow, and obviously right.
    fn one_by_one(spec: &ScaleViewSpec, requested: i32) -> BTreeMap<String, i32> {
        let groups = normalize(spec);
        let mut replicas: Vec<i32> = groups.iter().map(|g| g.min).collect();
        let sum_min: i64 = replicas.iter().map(|&v| i64::from(v)).sum();
        let sum_max: i64 = groups.iter().map(|g| i64::from(g.max)).sum();
        let total = i64::from(requested).max(sum_min).min(sum_max);
        for _ in sum_min..total {
            let next = (0..groups.len())
                .filter(|&i| replicas[i] < groups[i].max)
                .min_by_key(|&i| {
                    let g = &groups[i];
                    (std::cmp::Reverse(g.priority), replicas[i], g.max, g.name)
                })
                .expect("total <= sum of maxes leaves a group below its max");
            replicas[next] += 1;
        }
        groups
            .iter()
            .zip(replicas)
            .map(|(g, v)| (g.name.to_owned(), v))
            .collect()
    }

    /// Groups g0.. with a priority, a min and an optional max above the min.
    fn policies(priorities: i32) -> impl Strategy<Value = Vec<ScalePolicy>> {
        prop::collection::vec((0..priorities, 0..4i32, prop::option::of(0..8i32)), 0..8).prop_map(
            |rows| {
                rows.into_iter()
                    .enumerate()
                    .map(|(i, (priority, min, room))| {
                        let min = Some(min).filter(|&m| m > 0);
                        let max = room.map(|r| min.unwrap_or(0) + r);
                        group(&format!("g{i}"), priority, min, max)
                    })
                    .collect()
            },
        )
    }

    fn bounds(spec: &ScaleViewSpec) -> BTreeMap<&str, (i32, i32, i32)> {
        spec.scale_policy
            .iter()
            .map(|p| {
                (
                    p.group.as_str(),
                    (p.priority(), p.min(), p.max().unwrap_or(MAX_REPLICAS)),
                )
            })
            .collect()
    }

    proptest! {
        #[test]
        fn sums_to_the_clamped_total_within_every_bound(
            policies in policies(3),
            requested in -5..60i32,
        ) {
            let spec = view(policies);
            let got = split(&spec, requested);
            let (min, max) = spec.replica_range();
            let expected = i64::from(requested).max(min).min(max);
            prop_assert_eq!(got.total, expected);
            prop_assert_eq!(got.clamped, expected != i64::from(requested));
            prop_assert_eq!(got.groups.values().map(|&v| i64::from(v)).sum::<i64>(), got.total);
            let bounds = bounds(&spec);
            prop_assert_eq!(got.groups.len(), bounds.len());
            for (name, &value) in &got.groups {
                let (_, min, max) = bounds[name.as_str()];
                prop_assert!(min <= value && value <= max, "{} = {} outside [{}, {}]", name, value, min, max);
            }
        }

        #[test]
        fn equals_the_one_by_one_rule(policies in policies(3), requested in -5..60i32) {
            let spec = view(policies);
            prop_assert_eq!(split(&spec, requested).groups, one_by_one(&spec, requested));
        }

        #[test]
        fn the_order_of_scale_policy_does_not_matter(
            (policies, shuffled) in policies(3)
                .prop_flat_map(|p| (Just(p.clone()), Just(p).prop_shuffle())),
            requested in -5..60i32,
        ) {
            prop_assert_eq!(
                split(&view(policies), requested),
                split(&view(shuffled), requested)
            );
        }

        #[test]
        fn raising_the_total_never_lowers_a_group(
            policies in policies(3),
            requested in -5..60i32,
            more in 0..20i32,
        ) {
            let spec = view(policies);
            let before = split(&spec, requested);
            let after = split(&spec, requested + more);
            for (name, value) in &before.groups {
                prop_assert!(after.groups[name] >= *value, "{} went from {} to {}", name, value, after.groups[name]);
            }
        }

        #[test]
        fn equal_priorities_without_constraints_differ_by_at_most_one(
            groups in 1..12usize,
            requested in 0..200i32,
        ) {
            let spec = view((0..groups).map(|i| group(&format!("g{i}"), 0, None, None)).collect());
            let got = split(&spec, requested);
            let most = got.groups.values().max().copied().unwrap_or(0);
            let least = got.groups.values().min().copied().unwrap_or(0);
            prop_assert!(most - least <= 1, "{:?}", got.groups);
        }

        #[test]
        fn within_a_tier_only_constraints_keep_groups_apart(
            policies in policies(3),
            requested in 0..60i32,
        ) {
            // Minimal variance: one group is more than one above another of
            // the same priority only if its min holds it up or the other's
            // max holds it down.
            let spec = view(policies);
            let got = split(&spec, requested);
            let bounds = bounds(&spec);
            for (a, &va) in &got.groups {
                for (b, &vb) in &got.groups {
                    let (pa, min_a, _) = bounds[a.as_str()];
                    let (pb, _, max_b) = bounds[b.as_str()];
                    if pa == pb && va > vb + 1 {
                        prop_assert!(va == min_a || vb == max_b, "{}={} {}={}", a, va, b, vb);
                    }
                }
            }
        }

        #[test]
        fn a_lower_priority_gets_more_than_its_min_only_once_higher_ones_are_full(
            policies in policies(4),
            requested in 0..60i32,
        ) {
            let spec = view(policies);
            let got = split(&spec, requested);
            let bounds = bounds(&spec);
            for (low, &v_low) in &got.groups {
                let (p_low, min_low, _) = bounds[low.as_str()];
                if v_low == min_low {
                    continue;
                }
                for (high, &v_high) in &got.groups {
                    let (p_high, _, max_high) = bounds[high.as_str()];
                    if p_high > p_low {
                        prop_assert_eq!(v_high, max_high, "{} is above its min before {} is full", low, high);
                    }
                }
            }
        }
    }
}
