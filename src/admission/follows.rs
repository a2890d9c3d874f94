//! The webhook's follow graph: a [`FollowIndex`] fed by the
//! ResourceScalingGroup watch, so that an RSG admission looks up the edges it
//! needs instead of listing and resolving every group of the namespace.
//!
//! The events are the reflector's: `Apply` and `Delete` update the index in
//! place; a (re-)list, `Init`, then `InitApply` per group, then `InitDone`,
//! is built aside and swapped in whole at `InitDone`, as the reflector's own
//! store does, so a re-list after a lost watch never shows a half-listed
//! namespace (which would let a cycle through).

use std::sync::{Mutex, PoisonError, RwLock};

use kube::runtime::watcher;
use tokio::sync::watch;

use crate::api::Findings;
use crate::api::resource_scaling_group::{ResourceScalingGroup, ResourceScalingGroupSpec};
use crate::plan::dag::FollowIndex;

pub struct WatchedFollows {
    index: RwLock<FollowIndex>,
    /// The groups listed since the last `Init`, until its `InitDone`.
    relisting: Mutex<Option<FollowIndex>>,
    /// Turns true at the first `InitDone`: the index holds every group.
    listed: watch::Sender<bool>,
}

impl Default for WatchedFollows {
    fn default() -> Self {
        WatchedFollows {
            index: RwLock::default(),
            relisting: Mutex::default(),
            listed: watch::Sender::new(false),
        }
    }
}

impl WatchedFollows {
    /// Takes one event of the ResourceScalingGroup watch.
    pub fn apply(&self, event: &watcher::Event<ResourceScalingGroup>) {
        // A lock is poisoned only by a panic while holding it; the index
        // operations do not panic, and a stale answer beats no webhook.
        let mut relisting = self
            .relisting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Init => *relisting = Some(FollowIndex::default()),
            watcher::Event::InitApply(group) => match relisting.as_mut() {
                Some(listed) => listed.upsert(group),
                None => self.write().upsert(group),
            },
            watcher::Event::InitDone => {
                if let Some(listed) = relisting.take() {
                    *self.write() = listed;
                }
                self.listed.send_replace(true);
            }
            watcher::Event::Apply(group) => self.write().upsert(group),
            watcher::Event::Delete(group) => self.write().remove(group),
        }
    }

    /// Takes a change the shared caches saw: `old` replaced by `new` (None:
    /// added, or deleted). The caches call it before they count as listed,
    /// so the index holds every group once they do.
    pub fn changed(&self, old: Option<&ResourceScalingGroup>, new: Option<&ResourceScalingGroup>) {
        let mut index = self.write();
        match (old, new) {
            (_, Some(group)) => index.upsert(group),
            (Some(group), None) => index.remove(group),
            (None, None) => {}
        }
    }

    /// Returns once the first list is in the index.
    pub async fn listed(&self) {
        // The sender lives in `self`, so the channel cannot close while
        // this borrow waits on it.
        let _ = self.listed.subscribe().wait_for(|listed| *listed).await;
    }

    /// [`FollowIndex::check`] on the groups watched so far.
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

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, FollowIndex> {
        self.index.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::dag::generated::{NAMESPACES, Shape, candidate, group_of, shape, spec_of};
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
    fn watch_events_keep_the_index_as_the_groups_stored() {
        let follows = WatchedFollows::default();
        let (a, b, c) = (
            group("a", "prefill", "decode"),
            group("b", "decode", "router"),
            group("c", "router", "gate"),
        );
        follows.apply(&watcher::Event::Init);
        follows.apply(&watcher::Event::InitApply(a.clone()));
        follows.apply(&watcher::Event::InitApply(b.clone()));
        // Listed in part: nothing shows yet.
        assert_eq!(follows.snapshot(), FollowIndex::default());
        assert!(!*follows.listed.borrow());
        follows.apply(&watcher::Event::InitDone);
        assert!(*follows.listed.borrow());
        assert_eq!(follows.snapshot(), FollowIndex::new([&a, &b]));
        let back = group("back", "router", "prefill").spec;
        assert_eq!(
            follows.check("ai", ("back", &back)).violations[0].reason,
            "prefill -> decode -> router -> prefill via a, b, back: scaling would follow itself round this loop forever"
        );

        follows.apply(&watcher::Event::Apply(c.clone()));
        follows.apply(&watcher::Event::Delete(a.clone()));
        assert_eq!(follows.snapshot(), FollowIndex::new([&b, &c]));
        assert!(follows.check("ai", ("back", &back)).is_allowed());

        // A re-list after a lost watch: the old index answers until it is
        // done, then the listed groups replace it (`c` was deleted meanwhile).
        follows.apply(&watcher::Event::Init);
        follows.apply(&watcher::Event::InitApply(a.clone()));
        assert_eq!(follows.snapshot(), FollowIndex::new([&b, &c]));
        follows.apply(&watcher::Event::InitApply(b.clone()));
        follows.apply(&watcher::Event::InitDone);
        assert_eq!(follows.snapshot(), FollowIndex::new([&a, &b]));
        assert!(!follows.check("ai", ("back", &back)).is_allowed());
    }

    /// What happens to the stored groups, and how the watch reports it.
    #[derive(Clone, Debug)]
    enum Happening {
        /// Group `name` of a namespace created or updated (`Apply`).
        Applied(usize, usize, Shape),
        /// Group `name` of a namespace deleted (`Delete`).
        Deleted(usize, usize),
        /// The watch lost and listed again: `Init`, the stored groups, `InitDone`.
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
        /// every candidate as `plan::dag::check` over the stored groups
        /// listed by name, the list the webhook used to get from its cache.
        #[test]
        fn the_watched_index_answers_as_check_over_the_stored_groups(
            happenings in prop::collection::vec(happening(), 1..25),
            candidates in prop::collection::vec(candidate(), 3),
        ) {
            let follows = WatchedFollows::default();
            let mut stored: BTreeMap<(&str, String), ResourceScalingGroup> = BTreeMap::new();
            let mut unseen = false;
            let relist = |stored: &BTreeMap<(&str, String), ResourceScalingGroup>| {
                follows.apply(&watcher::Event::Init);
                for group in stored.values() {
                    follows.apply(&watcher::Event::InitApply(group.clone()));
                }
                follows.apply(&watcher::Event::InitDone);
            };
            relist(&stored);
            for happening in &happenings {
                match happening {
                    Happening::Applied(ns, name, shape) => {
                        let (ns, name) = (NAMESPACES[*ns], format!("rsg-{name}"));
                        let group = group_of(ns, &name, &spec_of(shape));
                        follows.apply(&watcher::Event::Apply(group.clone()));
                        stored.insert((ns, name), group);
                    }
                    Happening::Deleted(ns, name) => {
                        if let Some(group) = stored.remove(&(NAMESPACES[*ns], format!("rsg-{name}"))) {
                            follows.apply(&watcher::Event::Delete(group));
                        }
                    }
                    Happening::Relisted => {
                        relist(&stored);
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
                        crate::plan::dag::check(&listed, (&name, &spec))
                    );
                }
            }
        }
    }
}
