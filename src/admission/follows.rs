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
    use serde_json::json;

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
}
