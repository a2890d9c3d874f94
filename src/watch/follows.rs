//! The webhook's follow graph: a [`FollowIndex`] fed by the shared
//! ResourceScalingGroup cache (`watch::caches`), so that an RSG admission
//! looks up the edges it needs instead of listing and resolving every group
//! of the namespace.
//!
//! The cache reports each group added, changed or deleted ([`WatchedFollows::changed`]),
//! re-lists after a lost watch included: the groups listed again are
//! reported as they come, and those gone only once the list is done, so the
//! index never holds less than the groups stored (a half-listed namespace
//! would let a cycle through), and it holds every group before the cache
//! counts as listed.

use std::sync::{PoisonError, RwLock};

use crate::api::Findings;
use crate::api::resource_scaling_group::{ResourceScalingGroup, ResourceScalingGroupSpec};
use crate::plan::resource_scaling_group::dag::FollowIndex;

#[derive(Default)]
pub struct WatchedFollows {
    index: RwLock<FollowIndex>,
}

impl WatchedFollows {
    /// Takes a change the cache saw: `old` replaced by `new` (None: added,
    /// or deleted).
    pub fn changed(&self, old: Option<&ResourceScalingGroup>, new: Option<&ResourceScalingGroup>) {
        // A lock is poisoned only by a panic while holding it; the index
        // operations do not panic, and a stale answer beats no webhook.
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        match (old, new) {
            (_, Some(group)) => index.upsert(group),
            (Some(group), None) => index.remove(group),
            (None, None) => {}
        }
    }

    /// [`FollowIndex::check`] on the groups reported so far.
    pub fn check(&self, namespace: &str, candidate: (&str, &ResourceScalingGroupSpec)) -> Findings {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .check(namespace, candidate)
    }

    /// A copy of the index, for comparing it with one built from scratch.
    pub fn snapshot(&self) -> FollowIndex {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::resource_scaling_group::dag::generated::{
        NAMESPACES, Shape, candidate, group_of, shape, spec_of,
    };
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn group(name: &str, source: &str, target: &str) -> ResourceScalingGroup {
        serde_json::from_value(json!({
            "apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
            "metadata": {"name": name, "namespace": "ai"},
            "spec": {"targetResources": [
                {"name": source, "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": target, "apiVersion": "apps/v1", "kind": "Deployment"}],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": source, "role": "Source"}, {"name": target, "role": "Target", "ratio": 1}]}}}
        }))
        .expect("test group parses")
    }

    #[test]
    fn reported_changes_keep_the_index_as_the_groups_stored() {
        let follows = WatchedFollows::default();
        let (a, b, c) = (
            group("a", "prefill", "decode"),
            group("b", "decode", "router"),
            group("c", "router", "gate"),
        );
        follows.changed(None, Some(&a));
        follows.changed(None, Some(&b));
        assert_eq!(follows.snapshot(), FollowIndex::new([&a, &b]));
        let back = group("back", "router", "prefill").spec;
        assert_eq!(
            follows.check("ai", ("back", &back)).violations[0].reason,
            "prefill -> decode -> router -> prefill via a, b, back: scaling would follow itself round this loop forever"
        );

        follows.changed(None, Some(&c));
        follows.changed(Some(&a), None);
        assert_eq!(follows.snapshot(), FollowIndex::new([&b, &c]));
        assert!(follows.check("ai", ("back", &back)).is_allowed());

        // `b` changed to follow `gate`: its old edge goes with it.
        let b2 = group("b", "gate", "router");
        follows.changed(Some(&b), Some(&b2));
        assert_eq!(follows.snapshot(), FollowIndex::new([&b2, &c]));
    }

    /// What happens to the stored groups, and how the cache reports it.
    #[derive(Clone, Debug)]
    enum Happening {
        /// Group `name` of a namespace created or updated.
        Applied(usize, usize, Shape),
        /// Group `name` of a namespace deleted.
        Deleted(usize, usize),
        /// The watch lost and listed again: the stored groups reported as
        /// listed, then those gone meanwhile.
        Relisted,
        /// Deleted while the watch was away: seen only at the next re-list.
        DeletedUnseen(usize, usize),
    }

    fn happening() -> impl Strategy<Value = Happening> {
        prop_oneof![
            6 => (0..NAMESPACES.len(), 0..5usize, shape()).prop_map(|(ns, name, shape)| Happening::Applied(ns, name, shape)),
            2 => (0..NAMESPACES.len(), 0..5usize).prop_map(|(ns, name)| Happening::Deleted(ns, name)),
            1 => Just(Happening::Relisted),
            1 => (0..NAMESPACES.len(), 0..5usize).prop_map(|(ns, name)| Happening::DeletedUnseen(ns, name)),
        ]
    }

    proptest! {
        /// Whatever the watch reports, once it has caught up (after every
        /// event, except while a deletion went unseen) the webhook answers
        /// every candidate as `plan::resource_scaling_group::dag::check` over the stored groups
        /// listed by name, the list the webhook used to get from its cache.
        #[test]
        fn the_watched_index_answers_as_check_over_the_stored_groups(
            happenings in prop::collection::vec(happening(), 1..25),
            candidates in prop::collection::vec(candidate(), 3),
        ) {
            let follows = WatchedFollows::default();
            let mut stored: BTreeMap<(&str, String), ResourceScalingGroup> = BTreeMap::new();
            // What the cache last reported, as its store holds it.
            let mut told: BTreeMap<(&str, String), ResourceScalingGroup> = BTreeMap::new();
            let mut unseen = false;
            for happening in &happenings {
                match happening {
                    Happening::Applied(ns, name, shape) => {
                        let key = (NAMESPACES[*ns], format!("rsg-{name}"));
                        let group = group_of(key.0, &key.1, &spec_of(shape));
                        follows.changed(told.get(&key), Some(&group));
                        told.insert(key.clone(), group.clone());
                        stored.insert(key, group);
                    }
                    Happening::Deleted(ns, name) => {
                        let key = (NAMESPACES[*ns], format!("rsg-{name}"));
                        if stored.remove(&key).is_some()
                            && let Some(old) = told.remove(&key)
                        {
                            follows.changed(Some(&old), None);
                        }
                    }
                    Happening::Relisted => {
                        for (key, group) in &stored {
                            follows.changed(told.get(key), Some(group));
                        }
                        for (key, gone) in &told {
                            if !stored.contains_key(key) {
                                follows.changed(Some(gone), None);
                            }
                        }
                        told = stored.clone();
                        unseen = false;
                    }
                    Happening::DeletedUnseen(ns, name) => {
                        unseen |= stored.remove(&(NAMESPACES[*ns], format!("rsg-{name}"))).is_some();
                    }
                }
                if unseen {
                    continue;
                }
                prop_assert_eq!(follows.snapshot(), FollowIndex::new(stored.values()));
                for (ns, name, shape) in &candidates {
                    let namespace = NAMESPACES[*ns];
                    let name = format!("rsg-{name}");
                    let spec = spec_of(shape);
                    let listed: Vec<(String, ResourceScalingGroupSpec)> = stored
                        .iter()
                        .filter(|((ns, _), _)| *ns == namespace)
                        .map(|((_, name), group)| (name.clone(), group.spec.clone()))
                        .collect();
                    prop_assert_eq!(
                        follows.check(namespace, (&name, &spec)),
                        crate::plan::resource_scaling_group::dag::check(&listed, (&name, &spec))
                    );
                }
            }
        }
    }
}
