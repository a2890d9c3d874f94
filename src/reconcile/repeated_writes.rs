//! A patch of one of Tandem's own objects (an InferenceService, a
//! ScaleView, a ResourceScalingGroup) that only repeats the last one, sent while the cache has not
//! caught up with it, is not sent again.
//!
//! After a write, [`super::live`] waits up to a second for the cache to show
//! it, so that the next reconcile does not start from the version before
//! the write. Under load (many reconciles on two cores, the API server's
//! watch behind) the cache can take longer. The next reconcile then plans
//! from the old version, finds the same difference, and sends the same
//! patch again: a write that changes nothing, which the tests' audit check
//! caught once in CI (a ScaleView's status). This remembers, per object and
//! part, the version the cache showed before the last write and a hash of
//! the patch: a patch equal to it while the cache still shows that version
//! is known to be on the server already.
//!
//! What it cannot lose: if someone else changed the object since, the
//! cache shows a version other than the remembered one once it catches up,
//! and that watch event queues the object again, whose reconcile then plans
//! from the new version and writes what it must.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, PoisonError};

use super::cluster::Part;

/// Objects remembered before the memory is emptied: a write is remembered
/// only until the cache catches up, so this bounds entries of objects
/// deleted since, not anything a reconcile needs.
const KEPT: usize = 4096;

/// What identifies a write: the object's kind, namespace and name, and the
/// part written.
type Key = (String, String, String, PartKey);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PartKey {
    Object,
    Status,
    Scale,
}

impl From<Part> for PartKey {
    fn from(part: Part) -> Self {
        match part {
            Part::Object => PartKey::Object,
            Part::Status => PartKey::Status,
            Part::Scale => PartKey::Scale,
        }
    }
}

/// The last write of one object's part: the version the cache showed before
/// it, and the patch's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LastWrite {
    before: String,
    patch: u64,
}

/// The last writes of Tandem's own objects.
#[derive(Debug, Default)]
pub struct RepeatedWrites {
    last: Mutex<HashMap<Key, LastWrite>>,
}

/// The hash of a patch's body as sent.
pub fn patch_hash(body: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    body.hash(&mut hasher);
    hasher.finish()
}

impl RepeatedWrites {
    /// Whether a patch (`hash`) of `part` of `kind` `namespace/name`, whose
    /// cache shows version `cached`, repeats the last write while the cache
    /// has not caught up with it.
    pub fn repeats(
        &self,
        (kind, namespace, name, part): (&str, &str, &str, Part),
        cached: &str,
        hash: u64,
    ) -> bool {
        let key = (
            kind.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
            part.into(),
        );
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.get(&key)
            .is_some_and(|l| l.before == cached && l.patch == hash)
    }

    /// Remembers a patch (`hash`) sent while the cache showed `before`.
    pub fn sent(
        &self,
        (kind, namespace, name, part): (&str, &str, &str, Part),
        before: String,
        hash: u64,
    ) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.len() >= KEPT {
            last.clear();
        }
        last.insert(
            (
                kind.to_owned(),
                namespace.to_owned(),
                name.to_owned(),
                part.into(),
            ),
            LastWrite {
                before,
                patch: hash,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIEW: (&str, &str, &str, Part) = ("ScaleView", "ns", "v", Part::Status);

    #[test]
    fn the_same_patch_while_the_cache_lags_is_a_repeat_and_nothing_else_is() {
        let writes = RepeatedWrites::default();
        let status = patch_hash(r#"{"status":{"replicas":3}}"#);
        assert!(!writes.repeats(VIEW, "10", status), "nothing sent yet");
        writes.sent(VIEW, "10".to_owned(), status);
        // The cache still shows version 10, from before the write: the same
        // patch is on the server already.
        assert!(writes.repeats(VIEW, "10", status));
        // Another patch, another part, another object: sent.
        assert!(!writes.repeats(VIEW, "10", patch_hash(r#"{"status":{"replicas":4}}"#)));
        assert!(!writes.repeats(("ScaleView", "ns", "v", Part::Object), "10", status));
        assert!(!writes.repeats(("ScaleView", "ns", "w", Part::Status), "10", status));
        // The cache caught up (or someone else wrote): planned from the new
        // version, the patch goes.
        assert!(!writes.repeats(VIEW, "11", status));
        assert!(!writes.repeats(VIEW, "12", status));
    }

    #[test]
    fn the_memory_is_bounded() {
        let writes = RepeatedWrites::default();
        for i in 0..KEPT + 1 {
            writes.sent(
                ("ScaleView", "ns", &i.to_string(), Part::Status),
                "1".to_owned(),
                7,
            );
        }
        let kept = writes.last.lock().unwrap().len();
        assert!(kept <= KEPT, "{kept}");
    }
}
