//! A rolling update's budget, checked at every instant of a pod watch: what
//! `spec.upgradeStrategy.rollingUpdate` promises a role, counted from the
//! pods alone (`plan::inference_service::pacing` is what keeps it; this is
//! what a user watching `kubectl get pods -w` would count).
//!
//! A replica is a role's pods of one replica index and one revision: the
//! leader and workers of one LeaderWorkerSet group. A replica replaced in
//! place goes before its successor comes (StatefulSet pods keep their
//! names), and a replica removed holds its GPUs until its last pod is gone,
//! so a replica counts from its first pod seen to its last pod gone, being
//! deleted or not. At every pod event, with `desired` the role's replicas:
//!
//! - replicas present <= `desired + max_surge`;
//! - replicas serving (every one of its group's pods Ready, none draining or
//!   being deleted) >= `desired - max_unavailable`, and >= 1: no serving
//!   role at 0;
//! - no pod of a replica index below `partition` runs a revision the role
//!   did not run before the update.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

use super::scenario::{group_size, serves};

/// One pod of the role, as the budget sees it.
#[derive(Clone, Debug)]
struct Seen {
    index: u32,
    revision: String,
    size: usize,
    serves: bool,
}

/// The budget of one role's rolling update and what the pods did to it.
#[derive(Debug)]
pub struct RolloutBudget {
    role: String,
    desired: usize,
    max_unavailable: usize,
    max_surge: usize,
    partition: u32,
    /// The revisions the role ran before the update.
    before: BTreeSet<String>,
    pods: BTreeMap<String, Seen>,
    /// The most replicas present at once.
    pub most_replicas: usize,
    /// The most replicas not serving at once (counted against `desired`).
    pub most_unavailable: usize,
    /// Each broken promise, with the instant's replicas.
    pub violations: Vec<String>,
}

impl RolloutBudget {
    /// The budget of `role`: `desired` replicas, the rolling update's
    /// `max_unavailable`, `max_surge` and `partition`, and the revisions it
    /// ran before (`fusioninfer.io/revision` of its pods).
    pub fn new(
        role: &str,
        desired: usize,
        max_unavailable: usize,
        max_surge: usize,
        partition: u32,
        before: BTreeSet<String>,
    ) -> Self {
        RolloutBudget {
            role: role.to_owned(),
            desired,
            max_unavailable,
            max_surge,
            partition,
            before,
            pods: BTreeMap::new(),
            most_replicas: 0,
            most_unavailable: 0,
            violations: Vec::new(),
        }
    }

    /// A pod seen (created or changed). Pods of other roles are ignored.
    /// `check` says whether this event ends an instant (false while a
    /// watch's first list is being read: half a list is not a moment of the
    /// cluster).
    pub fn pod(&mut self, pod: &Pod, check: bool) {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if labels.get("fusioninfer.io/role-name") != Some(&self.role) {
            return;
        }
        let Some(index) = labels
            .get("fusioninfer.io/replica-index")
            .and_then(|i| i.parse().ok())
        else {
            return;
        };
        let serves = serves(pod);
        let size = group_size(pod);
        let seen = Seen {
            index,
            revision: labels
                .get("fusioninfer.io/revision")
                .cloned()
                .unwrap_or_default(),
            size,
            serves,
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.pods.insert(name, seen);
        if check {
            self.check();
        }
    }

    /// A pod gone.
    pub fn pod_gone(&mut self, pod: &Pod, check: bool) {
        if self
            .pods
            .remove(pod.metadata.name.as_deref().unwrap_or_default())
            .is_some()
            && check
        {
            self.check();
        }
    }

    /// The promises, at this instant.
    pub fn check(&mut self) {
        let mut replicas: BTreeMap<(u32, &str), Vec<&Seen>> = BTreeMap::new();
        for seen in self.pods.values() {
            replicas
                .entry((seen.index, seen.revision.as_str()))
                .or_default()
                .push(seen);
        }
        let present = replicas.len();
        let serving = replicas
            .values()
            .filter(|group| group.len() == group[0].size && group.iter().all(|p| p.serves))
            .count();
        let unavailable = self.desired.saturating_sub(serving);
        self.most_replicas = self.most_replicas.max(present);
        self.most_unavailable = self.most_unavailable.max(unavailable);
        let instant: Vec<String> = replicas
            .iter()
            .map(|((index, revision), group)| {
                let up = group.iter().filter(|p| p.serves).count();
                format!("{index}@{revision}:{up}/{}", group[0].size)
            })
            .collect();
        if present > self.desired.saturating_add(self.max_surge) {
            self.violations.push(format!(
                "{present} replicas > {} desired + {} maxSurge: {instant:?}",
                self.desired, self.max_surge
            ));
        }
        if unavailable > self.max_unavailable {
            self.violations.push(format!(
                "{unavailable} unavailable > maxUnavailable {}: {instant:?}",
                self.max_unavailable
            ));
        }
        if self.desired > 0 && serving == 0 {
            self.violations
                .push(format!("no replica serving: {instant:?}"));
        }
        let beyond: Vec<&(u32, &str)> = replicas
            .keys()
            .filter(|(index, revision)| *index < self.partition && !self.before.contains(*revision))
            .collect();
        if !beyond.is_empty() {
            self.violations.push(format!(
                "replicas {beyond:?} below partition {} at a new revision: {instant:?}",
                self.partition
            ));
        }
    }
}
