//! Propagation (DESIGN.md §1.2): the desired replicas of every Target in a
//! namespace, through chains of InplaceScaling groups (a Target of one group
//! may be the Source of another), in the follow graph's topological order so
//! a chain settles in one pass. It sits above both [`super::ratio`] (one
//! binding's arithmetic and its resolution) and [`super::dag`] (the follow
//! graph), which need nothing from it.

use std::collections::BTreeMap;

use super::dag::FollowGraph;
use super::ratio::{Bindings, Endpoint};

/// The desired replicas of every Target, given the current replicas of every
/// endpoint (`current`) and the resolved bindings of every InplaceScaling
/// group of a namespace (name, bindings).
///
/// Endpoints are visited in topological order, so a Target that is itself a
/// Source passes on its desired replicas, not its current ones, and a chain of
/// any length settles in one pass. A band Target (`minRatio`, `maxRatio`)
/// will have what its own autoscaler asked (its replicas in `current`) kept
/// within the band, which is what its ScaleView applies; unread, it is left
/// out. A Target whose Source has no replicas in
/// `current` (and is no Target with a decision) is left out: nothing is
/// decided for it, and its own followers follow its current replicas.
/// A cycle, or an endpoint that is the Target of two bindings, has no
/// answer: the error names it and the groups involved.
pub fn propagate(
    current: &BTreeMap<Endpoint, i32>,
    groups: &[(String, Bindings)],
) -> Result<BTreeMap<Endpoint, i32>, String> {
    let named: Vec<(&str, &Bindings)> = groups.iter().map(|(n, b)| (n.as_str(), b)).collect();
    let graph = FollowGraph::new(&named);
    let order = graph.topological().map_err(|cycle| {
        format!("{cycle}: the bindings form a cycle, so no replicas satisfy them")
    })?;
    let mut desired: BTreeMap<Endpoint, i32> = BTreeMap::new();
    for endpoint in order {
        let follows = graph.targeting(endpoint);
        let follow = match follows.as_slice() {
            [] => continue,
            [follow] => *follow,
            several => {
                let names: Vec<&str> = several.iter().map(|f| named[f.group].0).collect();
                return Err(format!(
                    "{endpoint} is the Target of more than one binding (ResourceScalingGroups {}); it can follow one Source only",
                    names.join(", ")
                ));
            }
        };
        let bindings = named[follow.group].1;
        let source = desired
            .get(&bindings.source)
            .or_else(|| current.get(&bindings.source));
        if let Some(&source) = source
            && let Some(replicas) =
                bindings.targets[follow.target].follows(source, current.get(endpoint).copied())
        {
            desired.insert(endpoint.clone(), replicas);
        }
    }
    Ok(desired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::resource_scaling_group::ratio::tests::{
        deployment, ratio, rbg_role, seed_inplace, spec,
    };
    use crate::plan::resource_scaling_group::ratio::{TargetBinding, bindings, target_replicas};
    use proptest::prelude::*;
    use rust_decimal::Decimal;
    use serde_json::json;

    fn chain_group(source: &str, target: &str, written: serde_json::Value) -> Bindings {
        Bindings {
            source: deployment(source),
            source_binding: 0,
            targets: vec![TargetBinding {
                binding: 1,
                endpoint: deployment(target),
                ratio: ratio(written),
                max_ratio: None,
                min: None,
                max: None,
            }],
        }
    }

    #[test]
    fn propagates_the_seed() {
        let groups = [(
            "pd-pool".to_owned(),
            bindings(&spec(seed_inplace())).expect("seed"),
        )];
        let current = BTreeMap::from([
            (deployment("router"), 10),
            (rbg_role("prefill"), 3),
            (rbg_role("Decode"), 3),
        ]);
        let desired = propagate(&current, &groups).expect("acyclic");
        assert_eq!(
            desired,
            BTreeMap::from([(rbg_role("prefill"), 10), (rbg_role("Decode"), 20)])
        );
    }

    #[test]
    fn chains_settle_in_one_pass_whatever_the_order() {
        // a -x2-> b -x0.5-> c -x3-> d, listed backwards so one pass in list
        // order would read stale replicas.
        let groups = vec![
            ("c-to-d".to_owned(), chain_group("c", "d", json!(3))),
            ("b-to-c".to_owned(), chain_group("b", "c", json!(0.5))),
            ("a-to-b".to_owned(), chain_group("a", "b", json!(2))),
        ];
        let current = BTreeMap::from([
            (deployment("a"), 5),
            (deployment("b"), 1),
            (deployment("c"), 1),
            (deployment("d"), 1),
        ]);
        let desired = propagate(&current, &groups).expect("acyclic");
        assert_eq!(
            desired,
            BTreeMap::from([
                (deployment("b"), 10),
                (deployment("c"), 5),
                (deployment("d"), 15),
            ])
        );
        // A second pass over the result changes nothing.
        let mut settled = current.clone();
        settled.extend(desired.clone());
        assert_eq!(propagate(&settled, &groups), Ok(desired));
    }

    #[test]
    fn unknown_sources_decide_nothing_downstream_follows_current() {
        let groups = vec![
            ("a-to-b".to_owned(), chain_group("a", "b", json!(2))),
            ("b-to-c".to_owned(), chain_group("b", "c", json!(3))),
        ];
        // a is not observed (missing): b is left alone, c follows b's current 4.
        let current = BTreeMap::from([(deployment("b"), 4), (deployment("c"), 1)]);
        assert_eq!(
            propagate(&current, &groups),
            Ok(BTreeMap::from([(deployment("c"), 12)]))
        );
    }

    #[test]
    fn a_chain_of_a_hundred_groups_settles() {
        let mut groups: Vec<(String, Bindings)> = (0..100)
            .map(|i| {
                (
                    format!("rsg-{i}"),
                    chain_group(&format!("d{i}"), &format!("d{}", i + 1), json!(1)),
                )
            })
            .collect();
        groups.reverse();
        let current = BTreeMap::from([(deployment("d0"), 7)]);
        let desired = propagate(&current, &groups).expect("acyclic");
        assert_eq!(desired.len(), 100);
        assert!(desired.values().all(|&r| r == 7), "{desired:?}");
    }

    #[test]
    fn versions_of_one_object_chain_together() {
        let mut second = chain_group("b", "c", json!(2));
        second.source.api_version = "apps/v1beta2".into();
        let groups = vec![
            ("b-to-c".to_owned(), second),
            ("a-to-b".to_owned(), chain_group("a", "b", json!(3))),
        ];
        let current = BTreeMap::from([(deployment("a"), 2)]);
        assert_eq!(
            propagate(&current, &groups),
            Ok(BTreeMap::from([
                (deployment("b"), 6),
                (deployment("c"), 12)
            ]))
        );
    }

    #[test]
    fn cycles_and_double_targets_have_no_answer() {
        let cycle = vec![
            (
                "rsg-a".to_owned(),
                chain_group("prefill", "decode", json!(1)),
            ),
            (
                "rsg-b".to_owned(),
                chain_group("decode", "prefill", json!(1)),
            ),
        ];
        let current = BTreeMap::from([(deployment("prefill"), 1), (deployment("decode"), 1)]);
        let error = propagate(&current, &cycle).expect_err("cycle");
        assert!(
            error
                == "prefill -> decode -> prefill via rsg-a, rsg-b: the bindings form a cycle, so no replicas satisfy them"
                || error
                    == "decode -> prefill -> decode via rsg-b, rsg-a: the bindings form a cycle, so no replicas satisfy them",
            "{error}"
        );
        let self_loop = vec![("rsg-a".to_owned(), chain_group("a", "a", json!(2)))];
        assert_eq!(
            propagate(&current, &self_loop),
            Err("a -> a via rsg-a: the bindings form a cycle, so no replicas satisfy them".into())
        );
        let twice = vec![
            ("rsg-a".to_owned(), chain_group("a", "c", json!(1))),
            ("rsg-b".to_owned(), chain_group("b", "c", json!(2))),
        ];
        assert_eq!(
            propagate(&current, &twice),
            Err("c is the Target of more than one binding (ResourceScalingGroups rsg-a, rsg-b); it can follow one Source only".into())
        );
    }

    proptest! {
        #[test]
        fn propagation_matches_following_each_chain(
            parents in prop::collection::vec(proptest::option::of(any::<prop::sample::Index>()), 1..30),
            ratios in prop::collection::vec((0u32..400, 0u32..3), 30),
            roots in prop::collection::vec(0i32..50, 30),
            order in any::<prop::sample::Index>(),
        ) {
            // Node i+1 follows an earlier node or is a root: a forest.
            let mut groups = Vec::new();
            let mut parent_of = BTreeMap::new();
            for (i, parent) in parents.iter().enumerate() {
                let child = i + 1;
                if let Some(parent) = parent {
                    let parent = parent.index(child);
                    parent_of.insert(child, parent);
                    let (mantissa, scale) = ratios[i];
                    let mut group = chain_group(&format!("n{parent}"), &format!("n{child}"), json!(1));
                    group.targets[0].ratio = Decimal::new(i64::from(mantissa), scale);
                    groups.push((format!("rsg-{child}"), group));
                }
            }
            // Any rotation of the list gives the same answer.
            if !groups.is_empty() {
                let shift = order.index(groups.len());
                groups.rotate_left(shift);
            }
            let current: BTreeMap<Endpoint, i32> = (0..=parents.len())
                .map(|n| (deployment(&format!("n{n}")), roots[n % roots.len()]))
                .collect();
            let desired = propagate(&current, &groups).expect("a forest is acyclic");
            // Oracle: walk each node's chain from its root, node by node.
            for n in 0..=parents.len() {
                let mut chain = vec![n];
                while let Some(&p) = parent_of.get(chain.last().expect("non-empty")) {
                    chain.push(p);
                }
                let root = *chain.last().expect("non-empty");
                let mut replicas = current[&deployment(&format!("n{root}"))];
                for &node in chain.iter().rev().skip(1) {
                    let (mantissa, scale) = ratios[node - 1];
                    replicas = target_replicas(replicas, Decimal::new(i64::from(mantissa), scale), None, None);
                }
                let got = desired.get(&deployment(&format!("n{n}")));
                if chain.len() == 1 {
                    prop_assert_eq!(got, None);
                } else {
                    prop_assert_eq!(got, Some(&replicas));
                }
            }
        }
    }
}
