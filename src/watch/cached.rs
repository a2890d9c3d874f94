//! An object as the JSON caches keep it: its metadata typed (names, labels
//! and owners are what the stores, the triggers and the label lookups match
//! on), and everything else (spec, status, data) as compact JSON text,
//! parsed only when a reconcile reads the object.
//!
//! The watches read list pages and events straight into this form
//! ([`Cached`]'s `Deserialize`): a page of 500 pods is never held as 500
//! `Value` trees with their `managedFields`, only one object's at a time.
//!
//! Why not kube's `DynamicObject`: its `serde_json::Value` tree costs about
//! six times the object's JSON size in memory (every map a B-tree node of
//! eleven slots, every string its own allocation). With 1 000 services'
//! LeaderWorkerSets, PodGroups, disruption budgets and 10 000 pods cached,
//! that was most of the process's heap (BENCHMARKS.md, "With a cluster").
//! Reads are few by comparison: a reconcile reads the objects of one
//! service or group, and `DynamicObject` reads were already converted to a
//! fresh `Value` each time ([`Cached::to_json`]).
//!
//! The labels and annotations are kept as compact text too, beside the
//! typed metadata, which holds neither: as `ObjectMeta`'s B-trees of
//! strings they were most of a cached pod (2 970 of its 3 578 bytes for a
//! story-4 pod's 12 labels and 3 annotations, against 758 as text;
//! measured with a counting allocator). The caches read them once per
//! watch event (the catalog's filing labels, the triggers) and once per
//! read by a reconcile, through [`Cached::labels`] and [`Cached::to_json`];
//! [`Cached::meta`] has neither, so no caller may read them from there.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::Resource;
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::DynamicResourceScope;
use kube::runtime::watcher;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::ser::{Error as _, SerializeMap};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use super::catalog::FILED_BY;
use crate::plan::shared::pod::Pod;

/// A cached object of a kind read as JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct Cached {
    /// The metadata less its labels and annotations (in `marks`).
    metadata: ObjectMeta,
    /// The labels and annotations: `{"annotations":…,"labels":…}` as text,
    /// each present only when the object has it; empty when it has neither.
    marks: Box<str>,
    /// The object less apiVersion, kind and metadata: a JSON object, as text.
    body: Box<str>,
    /// A pod's facts ([`Cached::pod`]), its body then empty.
    pod: Option<Box<Pod>>,
}

/// The labels and annotations of an object, as `marks` keeps them.
#[derive(Default, Serialize, Deserialize)]
struct Marks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    labels: Option<BTreeMap<String, String>>,
}

impl Cached {
    /// Keeps `object` (trimmed already) in its cached form.
    pub fn new(object: DynamicObject) -> Cached {
        let body = match &object.data {
            Value::Object(_) => serde_json::to_string(&object.data).unwrap_or_default(),
            // A watch item always is a JSON object; anything else has no
            // fields a plan could read.
            _ => String::new(),
        };
        Cached::kept(object.metadata, body)
    }

    /// `metadata` and `body` in the cached form: the labels and annotations
    /// taken out of the metadata into text.
    fn kept(mut metadata: ObjectMeta, body: String) -> Cached {
        let marks = Marks {
            annotations: metadata.annotations.take().filter(|a| !a.is_empty()),
            labels: metadata.labels.take().filter(|l| !l.is_empty()),
        };
        let marks = if marks.annotations.is_none() && marks.labels.is_none() {
            String::new()
        } else {
            // Maps of strings always serialise.
            serde_json::to_string(&marks).unwrap_or_default()
        };
        Cached {
            metadata,
            marks: marks.into_boxed_str(),
            body: body.into_boxed_str(),
            pod: None,
        }
    }

    /// A pod kept as its facts, parsed once here, when its watch event
    /// arrives ([`Pod::from_json`]): the plans read nothing else of it. The
    /// metadata keeps only what the store and the triggers key on (name,
    /// namespace, version, deletion) and the labels the catalog files it
    /// under ([`FILED_BY`]); the body is empty.
    pub fn pod(self) -> Cached {
        let mut object = Value::Object(self.fields());
        let metadata = self.metadata();
        object["metadata"] = serde_json::to_value(&metadata).unwrap_or_default();
        let facts = Pod::from_json(&object);
        let labels: BTreeMap<String, String> = metadata
            .labels
            .into_iter()
            .flatten()
            .filter(|(key, _)| FILED_BY.contains(&key.as_str()))
            .collect();
        let kept = ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            resource_version: metadata.resource_version,
            deletion_timestamp: metadata.deletion_timestamp,
            labels: Some(labels),
            ..ObjectMeta::default()
        };
        Cached {
            pod: Some(Box::new(facts)),
            ..Cached::kept(kept, String::new())
        }
    }

    /// The facts of a pod kept by [`Cached::pod`]; None for any other
    /// object.
    pub fn as_pod(&self) -> Option<&Pod> {
        self.pod.as_deref()
    }

    fn marks(&self) -> Marks {
        if self.marks.is_empty() {
            return Marks::default();
        }
        // Written by `kept` from a `Marks`, so it reads back as one.
        serde_json::from_str(&self.marks).unwrap_or_default()
    }

    /// The metadata whole, its labels and annotations in it again.
    pub fn metadata(&self) -> ObjectMeta {
        let Marks {
            annotations,
            labels,
        } = self.marks();
        ObjectMeta {
            annotations,
            labels,
            ..self.metadata.clone()
        }
    }

    /// The object's name, when it has one.
    pub fn name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }

    /// The object's resourceVersion, when it has one.
    pub fn version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    /// The object's labels (empty when it has none).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.marks().labels.unwrap_or_default()
    }

    /// The object's annotations (empty when it has none).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        self.marks().annotations.unwrap_or_default()
    }

    /// The object as kube's `DynamicObject`, to trim its fields.
    pub fn into_dynamic(self) -> DynamicObject {
        let data = Value::Object(self.fields());
        DynamicObject {
            types: None,
            metadata: self.metadata(),
            data,
        }
    }

    /// The object's fields but apiVersion, kind and metadata.
    fn fields(&self) -> Map<String, Value> {
        if self.body.is_empty() {
            return Map::new();
        }
        // Written by `new` from a JSON object, so it parses back to one.
        serde_json::from_str(&self.body).unwrap_or_default()
    }

    /// The whole object as JSON, with its apiVersion and kind (list and
    /// watch items may come without them). A pod kept as its facts reads
    /// back as the little metadata it keeps: read it through
    /// [`Cached::as_pod`].
    pub fn to_json(&self, resource: &ApiResource) -> Value {
        let mut object = self.fields();
        object.insert("apiVersion".to_owned(), json!(resource.api_version));
        object.insert("kind".to_owned(), json!(resource.kind));
        // The typed metadata, then the marks' text read straight into JSON:
        // not through `Marks`' maps and `ObjectMeta` again, which was a
        // fifth of a wide service's pass (BENCHMARKS.md, 2026-12-05).
        let mut metadata = serde_json::to_value(&self.metadata).unwrap_or_default();
        if !self.marks.is_empty()
            && let Ok(Value::Object(marks)) = serde_json::from_str::<Value>(&self.marks)
            && let Some(metadata) = metadata.as_object_mut()
        {
            metadata.extend(marks);
        }
        object.insert("metadata".to_owned(), metadata);
        Value::Object(object)
    }

    /// Whether `other` is the same object in everything but its
    /// resourceVersion.
    pub fn same_but_version(&self, other: &Cached) -> bool {
        let same_pod = match (&self.pod, &other.pod) {
            (Some(a), Some(b)) => a.same_but_version(b),
            (a, b) => a == b,
        };
        same_pod && self.body == other.body && self.marks == other.marks && {
            let version = |meta: &ObjectMeta| ObjectMeta {
                resource_version: None,
                ..meta.clone()
            };
            version(&self.metadata) == version(&other.metadata)
        }
    }

    /// The size of what it keeps as text (its fields but the metadata).
    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// The size of its labels and annotations as text.
    pub fn marks_len(&self) -> usize {
        self.marks.len()
    }
}

/// Serialised as the object (less apiVersion and kind), as `DynamicObject`
/// would be; a pod kept as its facts with them under `facts`.
impl Serialize for Cached {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = if self.body.is_empty() {
            Map::new()
        } else {
            serde_json::from_str::<Map<String, Value>>(&self.body).map_err(S::Error::custom)?
        };
        let entries = fields
            .len()
            .saturating_add(1)
            .saturating_add(usize::from(self.pod.is_some()));
        let mut map = serializer.serialize_map(Some(entries))?;
        map.serialize_entry("metadata", &self.metadata())?;
        for (key, value) in &fields {
            map.serialize_entry(key, value)?;
        }
        // A pod's facts, under a key no object has: what the cache keeps of
        // it, to weigh (no reader parses it back).
        if let Some(pod) = &self.pod {
            map.serialize_entry("facts", pod)?;
        }
        map.end()
    }
}

/// Read from an object's JSON one field at a time: the metadata without its
/// `managedFields` and kubectl's last-applied annotation (no plan reads
/// them, and they are often the biggest part of a small object), apiVersion
/// and kind dropped (the cache knows them), the rest kept as text once the
/// object is read.
impl<'de> Deserialize<'de> for Cached {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Cached;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Cached, A::Error> {
                let mut metadata = ObjectMeta::default();
                let mut fields = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "metadata" => {
                            let mut meta: Map<String, Value> = map.next_value()?;
                            meta.remove("managedFields");
                            if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
                                annotations.remove(LAST_APPLIED);
                            }
                            metadata = serde_json::from_value(Value::Object(meta))
                                .map_err(serde::de::Error::custom)?;
                        }
                        "apiVersion" | "kind" => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        _ => {
                            fields.insert(key, map.next_value::<Value>()?);
                        }
                    }
                }
                let body = if fields.is_empty() {
                    String::new()
                } else {
                    serde_json::to_string(&fields).map_err(serde::de::Error::custom)?
                };
                Ok(Cached::kept(metadata, body))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

impl Resource for Cached {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(resource: &ApiResource) -> Cow<'_, str> {
        resource.group.as_str().into()
    }

    fn version(resource: &ApiResource) -> Cow<'_, str> {
        resource.version.as_str().into()
    }

    fn kind(resource: &ApiResource) -> Cow<'_, str> {
        resource.kind.as_str().into()
    }

    fn api_version(resource: &ApiResource) -> Cow<'_, str> {
        resource.api_version.as_str().into()
    }

    fn plural(resource: &ApiResource) -> Cow<'_, str> {
        resource.plural.as_str().into()
    }

    /// The metadata less its labels and annotations: read those through
    /// [`Cached::labels`], [`Cached::annotations`] and [`Cached::metadata`],
    /// whose names a method call finds before `ResourceExt`'s (which would
    /// find none here).
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// kubectl's annotation of the last configuration it applied: a copy of
/// the object, which no plan reads.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A watch event with its object kept as `keep` makes it.
pub fn event<A, B>(event: watcher::Event<A>, keep: impl Fn(A) -> B) -> watcher::Event<B> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(keep(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(keep(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(keep(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7",
                "labels": {"app": "a"}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("a pod")
    }

    fn pods() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Pod".into(),
            plural: "pods".into(),
        }
    }

    #[test]
    fn reads_back_as_the_object_it_kept() {
        let object = pod();
        let whole = serde_json::to_value(&object).expect("serialises");
        let cached = Cached::new(object);
        assert_eq!(cached.to_json(&pods()), whole);
        assert_eq!(
            serde_json::to_value(&cached).expect("serialises"),
            json!({
                "metadata": whole["metadata"],
                "spec": whole["spec"],
                "status": whole["status"],
            })
        );
        assert_eq!(
            cached.body_len(),
            serde_json::to_string(&json!({"spec": whole["spec"], "status": whole["status"]}))
                .expect("text")
                .len()
        );
    }

    #[test]
    fn a_new_resource_version_alone_is_the_same_object() {
        let cached = Cached::new(pod());
        let mut newer = pod();
        newer.metadata.resource_version = Some("8".into());
        assert!(cached.same_but_version(&Cached::new(newer.clone())));
        newer.data["status"]["phase"] = json!("Failed");
        assert!(!cached.same_but_version(&Cached::new(newer.clone())));
        let mut relabelled = pod();
        relabelled.metadata.labels = None;
        assert!(!cached.same_but_version(&Cached::new(relabelled)));
    }

    #[test]
    fn read_from_json_it_is_the_object_less_its_managed_fields() {
        let mut text = serde_json::to_value(pod()).expect("serialises");
        text["metadata"]["managedFields"] =
            json!([{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]);
        let read: Cached = serde_json::from_str(&text.to_string()).expect("reads");
        assert_eq!(read, Cached::new(pod()));
        assert_eq!(read.clone().into_dynamic().data, pod().data);
        // Inside a watch event, where serde may buffer the object first.
        let event = json!({"object": text, "type": "ADDED"}).to_string();
        let event: kube::core::WatchEvent<Cached> = serde_json::from_str(&event).expect("reads");
        assert!(matches!(event, kube::core::WatchEvent::Added(o) if o == read));
        assert!(serde_json::from_str::<Cached>("[1]").is_err());
    }

    #[test]
    fn labels_and_annotations_are_kept_as_text_and_read_back_whole() {
        let mut object = pod();
        object.metadata.annotations = Some(
            [
                ("volcano.sh/task-spec", "decode-0"),
                (LAST_APPLIED, "{\"kind\":\"Pod\"}"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        );
        let read: Cached =
            serde_json::from_str(&serde_json::to_string(&object).expect("text")).expect("reads");
        // The typed metadata holds neither; the text holds both, less
        // kubectl's copy of the object.
        assert_eq!(read.meta().labels, None);
        assert_eq!(read.meta().annotations, None);
        assert_eq!(
            &*read.marks,
            r#"{"annotations":{"volcano.sh/task-spec":"decode-0"},"labels":{"app":"a"}}"#
        );
        assert_eq!(read.marks_len(), read.marks.len());
        assert_eq!(read.labels().get("app").map(String::as_str), Some("a"));
        assert!(read.annotations().contains_key("volcano.sh/task-spec"));
        let whole = read.to_json(&pods());
        assert_eq!(whole["metadata"]["labels"], json!({"app": "a"}));
        assert_eq!(
            whole["metadata"]["annotations"],
            json!({"volcano.sh/task-spec": "decode-0"})
        );
        assert_eq!(whole["metadata"]["name"], "p");
        assert_eq!(read.metadata().labels, pod().metadata.labels);
        assert_eq!(
            read.clone().into_dynamic().metadata.annotations,
            whole["metadata"]["annotations"].as_object().map(|a| a
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect())
        );
        // An object with neither keeps no text for them.
        let mut bare = pod();
        bare.metadata.labels = Some(BTreeMap::new());
        let bare = Cached::new(bare);
        assert!(bare.marks.is_empty());
        assert!(bare.labels().is_empty());
        assert!(bare.to_json(&pods())["metadata"].get("labels").is_none());
    }

    #[test]
    fn an_object_without_fields_reads_back_with_its_metadata_only() {
        let mut object = pod();
        object.data = Value::Null;
        let cached = Cached::new(object);
        let read = cached.to_json(&pods());
        assert_eq!(read["metadata"]["name"], "p");
        assert_eq!(read["kind"], "Pod");
        assert!(read.get("spec").is_none());
    }
}
