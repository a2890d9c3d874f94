//! Why render writes what it writes: the world of a render seen through the
//! Events the reconcilers record on it. Each applied or deleted object gets
//! one [`Change`], its reason in the words of the Event Tandem records for
//! that decision in a cluster (`Apply.note`, `Delete.note`, a scale note),
//! and, for an object that was there, which fields change.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, Patch};
use kube::runtime::events::Event;
use serde_json::Value;

use super::ObjectKey;
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::reconcile::cluster::{Cluster, Part, Series, Unserved, Written};
use crate::reconcile::memory::Memory;
use crate::watch::discovery::Discovered;

/// What happens to one object, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `created`, `changed` or `deleted`.
    pub action: &'static str,
    pub reason: String,
}

/// One Event as a reconciler recorded it: on which object, about which
/// (its `secondary`), and its note.
#[derive(Clone, Debug)]
struct Noted {
    regarding: (String, String, String),
    about: Option<(String, String, String)>,
    note: String,
}

fn identity(reference: &ObjectReference) -> (String, String, String) {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    (
        text(&reference.kind),
        text(&reference.namespace),
        text(&reference.name),
    )
}

fn key_identity(key: &ObjectKey) -> (String, String, String) {
    (key.kind.clone(), key.namespace.clone(), key.name.clone())
}

/// The world of a render that also keeps the Events recorded on it.
pub struct Recording {
    pub world: Arc<Memory>,
    events: Mutex<Vec<Noted>>,
}

impl Recording {
    pub fn new(world: Arc<Memory>) -> Recording {
        Recording {
            world,
            events: Mutex::default(),
        }
    }

    fn events(&self) -> Vec<Noted> {
        // A push cannot leave the list half-written: a poisoned lock still
        // holds whole entries.
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The Events' notes about `key`: those naming it as their secondary
    /// object (a child applied or deleted, a resource scaled), else those
    /// recorded on it about itself (an upgrade step). Repeats (one per
    /// pass) are said once.
    fn notes(&self, key: &ObjectKey) -> Vec<String> {
        let id = key_identity(key);
        let events = self.events();
        let about: Vec<&Noted> = events
            .iter()
            .filter(|e| e.about.as_ref() == Some(&id))
            .collect();
        let chosen = if about.is_empty() {
            events
                .iter()
                .filter(|e| e.about.is_none() && e.regarding == id)
                .collect()
        } else {
            about
        };
        let mut notes: Vec<String> = Vec::new();
        for event in chosen {
            if !notes.contains(&event.note) {
                notes.push(event.note.clone());
            }
        }
        notes
    }

    /// One change per applied or deleted object, in the output's order:
    /// `input` is the world as given (an object not in it is created),
    /// `admitted` as admission left it (with the defaults it fills in).
    pub fn changes(
        &self,
        input: &BTreeMap<ObjectKey, Value>,
        admitted: &BTreeMap<ObjectKey, Value>,
        apply: &[Value],
        delete: &[ObjectKey],
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        for object in apply {
            let key = ObjectKey::of(object);
            let notes = self.notes(&key);
            let (action, reason) = match input.get(&key) {
                None => ("created", notes.join("; ")),
                Some(before) => {
                    let defaulted = admitted.get(&key).unwrap_or(before);
                    ("changed", changed_reason(&notes, before, defaulted, object))
                }
            };
            changes.push(change(&key, action, reason));
        }
        for key in delete {
            let notes = self.notes(key);
            let reason = if notes.is_empty() {
                "deleted by Tandem".to_owned()
            } else {
                notes.join("; ")
            };
            changes.push(change(key, "deleted", reason));
        }
        changes
    }
}

impl Change {
    /// The reason without the object's own name and verb at the head of
    /// each note (`LeaderWorkerSet x created: `), for a line that already
    /// names them.
    pub fn said(&self) -> String {
        let mut said = self.reason.clone();
        for verb in ["created", "updated", "deleted"] {
            said = said.replace(&format!("{} {} {verb}: ", self.kind, self.name), "");
        }
        said
    }
}

fn change(key: &ObjectKey, action: &'static str, reason: String) -> Change {
    Change {
        kind: key.kind.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        action,
        reason: if reason.is_empty() {
            format!("{action} by Tandem")
        } else {
            reason
        },
    }
}

/// Why an object that was there changes: the notes, then which fields;
/// without notes, which fields admission defaults (`before` to
/// `defaulted`) and which the reconcilers write (`defaulted` to `after`).
fn changed_reason(notes: &[String], before: &Value, defaulted: &Value, after: &Value) -> String {
    if !notes.is_empty() {
        let fields = changed_fields(before, after).join(", ");
        return if fields.is_empty() {
            notes.join("; ")
        } else {
            format!("{} (fields: {fields})", notes.join("; "))
        };
    }
    let mut parts = Vec::new();
    let defaults = changed_fields(before, defaulted);
    if !defaults.is_empty() {
        parts.push(format!(
            "admission fills in defaults: {}",
            defaults.join(", ")
        ));
    }
    let written = changed_fields(defaulted, after);
    if !written.is_empty() {
        parts.push(format!("Tandem writes {}", written.join(", ")));
    }
    parts.join("; ")
}

/// At most this many fields are named in a reason; the rest are counted.
const FIELDS_NAMED: usize = 6;

/// The fields that differ, as paths a user reads in the object
/// (`spec.roles[0].replicas`, `status`), in the order of a JSON Patch from
/// `before`; past [`FIELDS_NAMED`] (and one), how many more.
pub fn changed_fields(before: &Value, after: &Value) -> Vec<String> {
    let mut fields: Vec<String> = Vec::new();
    for operation in json_patch::diff(before, after).0 {
        let field = field_path(operation.path().as_ref());
        if !fields.contains(&field) {
            fields.push(field);
        }
    }
    // "1 more" would take the room of the one it stands for.
    if fields.len() > FIELDS_NAMED.saturating_add(1) {
        let more = fields.len().saturating_sub(FIELDS_NAMED);
        fields.truncate(FIELDS_NAMED);
        fields.push(format!("{more} more"));
    }
    fields
}

/// A JSON Pointer (`/spec/roles/0/replicas`) as a field path
/// (`spec.roles[0].replicas`); a metadata map's key stays one segment
/// (`metadata.labels`), since its keys hold dots and slashes.
fn field_path(pointer: &str) -> String {
    let mut path = String::new();
    let segments = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"));
    let mut names = 0_usize;
    for segment in segments {
        let index = !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit());
        if index && !path.is_empty() {
            path.push_str(&format!("[{segment}]"));
            continue;
        }
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&segment);
        names = names.saturating_add(1);
        if path == "metadata.labels" || path == "metadata.annotations" || names >= 5 {
            break;
        }
    }
    path
}

impl Cluster for Recording {
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<InferenceService>> {
        self.world.service(namespace, name)
    }

    fn scale_view(&self, namespace: &str, name: &str) -> Option<Arc<ScaleView>> {
        self.world.scale_view(namespace, name)
    }

    fn groups(&self, namespace: &str) -> Vec<Arc<ResourceScalingGroup>> {
        self.world.groups(namespace)
    }

    fn installed(&self) -> std::sync::Arc<crate::plan::shared::installed::Installed> {
        self.world.installed()
    }

    fn list(
        &self,
        resource: &ApiResource,
        namespace: &str,
        labels: &[(&str, &str)],
    ) -> Result<Vec<Value>, Unserved> {
        self.world.list(resource, namespace, labels)
    }

    fn pods(
        &self,
        namespace: &str,
        labels: &[(&str, &str)],
    ) -> Result<Vec<crate::plan::shared::pod::Pod>, Unserved> {
        self.world.pods(namespace, labels)
    }

    fn get<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        self.world.get(resource, namespace, name)
    }

    fn workload<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        self.world.workload(resource, namespace, name)
    }

    fn scale<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        self.world.scale(resource, namespace, name)
    }

    fn resolve<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFuture<'a, Result<Option<Discovered>, String>> {
        self.world.resolve(api_version, kind)
    }

    fn apply<'a>(&'a self, resource: &'a ApiResource, object: &'a Value) -> Written<'a> {
        self.world.apply(resource, object)
    }

    fn delete<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> Written<'a> {
        self.world.delete(resource, namespace, name)
    }

    fn patch<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
        part: Part,
        patch: &'a Patch<Value>,
    ) -> Written<'a> {
        self.world.patch(resource, namespace, name, part, patch)
    }

    /// Kept, for [`Recording::changes`]; render prints no Events.
    fn record<'a>(
        &'a self,
        regarding: &'a ObjectReference,
        event: &'a Event,
        _series: Series,
    ) -> BoxFuture<'a, ()> {
        if let Some(note) = &event.note {
            self.events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Noted {
                    regarding: identity(regarding),
                    about: event.secondary.as_ref().map(identity),
                    note: note.clone(),
                });
        }
        futures::future::ready(()).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changed_fields_are_paths_a_user_reads_each_said_once() {
        let before =
            json!({"spec": {"replicas": 1, "roles": [{"a": 1}]}, "metadata": {"name": "x"}});
        let after = json!({"spec": {"replicas": 2, "roles": [{"a": 2, "b": 1}]},
            "metadata": {"name": "x"}, "status": {"ready": "0/1"}});
        assert_eq!(
            changed_fields(&before, &after),
            [
                "spec.replicas",
                "spec.roles[0].a",
                "spec.roles[0].b",
                "status"
            ]
        );
        assert_eq!(
            changed_reason(&[], &before, &before, &after),
            "Tandem writes spec.replicas, spec.roles[0].a, spec.roles[0].b, status"
        );
        let mut defaulted = before.clone();
        defaulted["spec"]["roles"][0]["b"] = json!(1);
        assert_eq!(
            changed_reason(&[], &before, &defaulted, &after),
            "admission fills in defaults: spec.roles[0].b; Tandem writes spec.replicas, spec.roles[0].a, status"
        );
        assert_eq!(
            changed_reason(&["Scaled".to_owned()], &before, &before, &after),
            "Scaled (fields: spec.replicas, spec.roles[0].a, spec.roles[0].b, status)"
        );
    }

    #[test]
    fn a_label_key_stays_whole_and_a_long_list_is_counted() {
        let before = json!({"metadata": {"labels": {"a": "1"}}});
        let after = json!({"metadata": {"labels": {"a": "2", "fusioninfer.io/role-name": "x"}}});
        assert_eq!(changed_fields(&before, &after), ["metadata.labels"]);
        let deep = json!({"spec": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}});
        assert_eq!(
            changed_fields(&json!({}), &deep),
            ["spec"],
            "a whole new field is named where it starts"
        );
        let mut nested = json!({"spec": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}});
        assert_eq!(changed_fields(&deep, &nested), Vec::<String>::new());
        nested["spec"]["a"]["b"]["c"]["d"]["e"]["f"] = json!(2);
        assert_eq!(
            changed_fields(&deep, &nested),
            ["spec.a.b.c.d"],
            "five deep at most"
        );
        let many: serde_json::Map<String, Value> =
            (0..9).map(|i| (format!("f{i}"), json!(i))).collect();
        let seven: serde_json::Map<String, Value> =
            (0..7).map(|i| (format!("f{i}"), json!(i))).collect();
        let named = changed_fields(&json!({"spec": {}}), &json!({"spec": seven}));
        assert_eq!(named.len(), 7, "one more is named, not counted: {named:?}");
        let fields = changed_fields(&json!({"spec": {}}), &json!({"spec": many}));
        assert_eq!(fields.len(), FIELDS_NAMED + 1);
        assert_eq!(fields.last().map(String::as_str), Some("3 more"));
    }

    #[test]
    fn a_line_naming_the_object_does_not_repeat_it() {
        let change = Change {
            kind: "LeaderWorkerSet".to_owned(),
            namespace: "default".to_owned(),
            name: "x-0".to_owned(),
            action: "created",
            reason: "LeaderWorkerSet x-0 created: replica 0; LeaderWorkerSet x-0 updated: again"
                .to_owned(),
        };
        assert_eq!(change.said(), "replica 0; again");
    }
}
