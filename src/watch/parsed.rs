//! A wide owner's children kept parsed from one of its passes to the next.
//!
//! The caches keep each object as text ([`super::cached`]): a story-4
//! service's 20 children parse back in well under a millisecond, and the
//! text is what keeps 1 000 services inside their memory goal
//! (BENCHMARKS.md). A service of 1 000 replicas is another matter: while it
//! scales, each of its passes parsed its 1 000 LeaderWorkerSets again, most
//! of them unchanged since the pass before, and that was two thirds of its
//! CPU on the way down (the profile of 2026-12-05 in BENCHMARKS.md).
//!
//! So an owner with at least [`WIDE`] children keeps them, as its pass read
//! them, until its next pass: the objects whose resourceVersion is still
//! the cached one are handed back as they are, moved (not copied), and only
//! the changed ones are parsed. A narrower owner keeps nothing, and a kept
//! set unused for [`UNUSED`] is dropped, so what this costs in memory is the
//! parsed children of the wide owners that move, not of the fleet.
//!
//! Rejected:
//! - every cached object kept parsed: about 60 MiB more for 1 000 story-4
//!   services (the memory goal is 130 MiB), to save what a narrow service's
//!   pass does not spend;
//! - copies of the kept objects handed to the pass (a deep clone allocates
//!   what the parse does).

use std::collections::HashMap;
use std::time::Duration;

use kube::api::ApiResource;
use serde_json::Value;

/// An owner with this many children keeps them parsed between passes.
pub const WIDE: usize = 64;

/// A kept set not used for this long is dropped.
pub const UNUSED: Duration = Duration::from_secs(60);

/// Children as a pass read them, by apiVersion and kind, then name.
#[derive(Debug, Default)]
pub struct Parsed {
    by_kind: HashMap<(String, String), HashMap<String, Value>>,
}

impl Parsed {
    /// `children` kept for the next pass when they are [`WIDE`]; None when
    /// they are too few to be worth keeping.
    pub fn keep(children: Vec<Value>) -> Option<Parsed> {
        if children.len() < WIDE {
            return None;
        }
        let mut parsed = Parsed::default();
        for child in children {
            let (Some(api_version), Some(kind), Some(name)) = (
                child["apiVersion"].as_str(),
                child["kind"].as_str(),
                child["metadata"]["name"].as_str(),
            ) else {
                continue;
            };
            let key = (api_version.to_owned(), kind.to_owned());
            let name = name.to_owned();
            parsed.by_kind.entry(key).or_default().insert(name, child);
        }
        Some(parsed)
    }

    /// The kept object of `resource`'s kind named `name`, taken out, when it
    /// is at `version` (the cached one); None when none is kept or it has
    /// changed since.
    pub fn take(&mut self, resource: &ApiResource, name: &str, version: &str) -> Option<Value> {
        let kept = self
            .by_kind
            .get_mut(&(resource.api_version.clone(), resource.kind.clone()))?;
        let object = kept.remove(name)?;
        (object["metadata"]["resourceVersion"].as_str() == Some(version)).then_some(object)
    }

    /// How many objects are kept.
    pub fn len(&self) -> usize {
        self.by_kind.values().map(HashMap::len).sum()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lws(name: &str, version: &str) -> Value {
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "resourceVersion": version}})
    }

    fn resource() -> ApiResource {
        crate::watch::resource(
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "leaderworkersets",
        )
    }

    #[test]
    fn only_a_wide_owner_keeps_its_children() {
        let few: Vec<Value> = (0..WIDE - 1).map(|i| lws(&format!("s-{i}"), "1")).collect();
        assert!(Parsed::keep(few).is_none());
        let wide: Vec<Value> = (0..WIDE).map(|i| lws(&format!("s-{i}"), "1")).collect();
        assert_eq!(Parsed::keep(wide).map(|p| p.len()), Some(WIDE));
    }

    #[test]
    fn a_kept_object_comes_back_once_and_only_at_its_version() {
        let mut children: Vec<Value> = (0..WIDE).map(|i| lws(&format!("s-{i}"), "1")).collect();
        children.push(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s-0", "resourceVersion": "1"}}));
        let mut parsed = Parsed::keep(children).expect("wide");
        assert_eq!(parsed.take(&resource(), "s-0", "1"), Some(lws("s-0", "1")));
        assert_eq!(parsed.take(&resource(), "s-0", "1"), None, "taken once");
        assert_eq!(parsed.take(&resource(), "s-1", "2"), None, "changed since");
        assert_eq!(
            parsed.take(&resource(), "s-1", "1"),
            None,
            "dropped when stale"
        );
        assert_eq!(parsed.take(&resource(), "missing", "1"), None);
        let service = crate::watch::resource("v1", "Service", "services");
        assert!(parsed.take(&service, "s-0", "1").is_some(), "by kind");
        assert_eq!(parsed.len(), WIDE.saturating_sub(2));
    }
}
