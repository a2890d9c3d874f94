//! The world of `tandem render` as a [`Cluster`]: objects held in memory,
//! read as given and changed at once by every write, so the reconcile
//! functions the controllers run can run here too.
//!
//! Where this world and an API server could differ, the rule followed:
//! - Server-side apply: when the stored object says which fields Tandem's
//!   field manager applied (`metadata.managedFields`, as the API server
//!   returns it), the apply follows server-side apply ([`apply_as_owner`]):
//!   what Tandem sends wins, what it applied before and no longer sends
//!   goes, and what another manager added stays (keyed lists merged by their
//!   keys, `plan::shared::write::list_keys`). Without managedFields nothing
//!   tells Tandem's fields from another's: an applied object that carries
//!   owner references is taken as Tandem's whole (it created it) and
//!   replaces what was there; any other (labels on a GroupReplication
//!   template, the bookkeeping on a foreign object) is merged into it, maps
//!   field by field and lists and scalars replaced. The status is kept.
//!   Tandem writes nothing when only another manager's fields differ
//!   (`plan::shared::write::contains`), so those stay in either case.
//! - A Pod takes a drain's label and annotations (`plan::inference_service::drain`): the
//!   annotations Tandem applied before and no longer applies are removed, as
//!   server-side apply removes the fields a manager stops applying.
//! - A new spec is a new generation (as the API server counts it) when the
//!   object has a status that could name the old one.
//! - A merge patch's `metadata.resourceVersion` is a precondition, and there
//!   is no concurrency here, so it always holds and is not written.
//! - `/status` takes only `status`, the object only the rest, `/scale`
//!   writes the replicas where the kind keeps them (the adapter table,
//!   Kubernetes' own kinds, else the world's CustomResourceDefinition).
//! - Every kind is served: API discovery is answered from the adapter table,
//!   Kubernetes' own kinds and the world's CustomResourceDefinitions.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, Patch};
use kube::runtime::events::Event;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::FIELD_MANAGER;
use super::cluster::{Cluster, Part, Series, Unserved, Written, not_found, resource};
use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::inference_service::drain;
use crate::plan::inference_service::service::APPLIED_HASH;
use crate::plan::resource_scaling_group::adapter;
use crate::plan::shared::installed::Installed;
use crate::plan::shared::pod::Pod;
use crate::plan::shared::write::{item_key, list_keys};
use crate::watch::discovery::Discovered;

/// An object's identity in the world.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn of(object: &Value) -> ObjectKey {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        ObjectKey {
            api_version: text(&object["apiVersion"]),
            kind: text(&object["kind"]),
            namespace: text(&object["metadata"]["namespace"]),
            name: text(&object["metadata"]["name"]),
        }
    }

    /// Whether this is an object of `resource`, whatever version its
    /// apiVersion is written with (an API server serves every version).
    fn is(&self, resource: &ApiResource) -> bool {
        self.kind == resource.kind && adapter::group_version(&self.api_version).0 == resource.group
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// What the world holds and what was done to it.
#[derive(Default)]
struct State {
    objects: BTreeMap<ObjectKey, Value>,
    /// Objects written since the start, still there.
    touched: BTreeSet<ObjectKey>,
    /// Objects deleted since the start.
    deleted: BTreeSet<ObjectKey>,
    /// How many writes changed something.
    changes: u64,
}

impl State {
    fn key(&self, resource: &ApiResource, namespace: &str, name: &str) -> Option<ObjectKey> {
        self.objects
            .keys()
            .find(|k| k.is(resource) && k.namespace == namespace && k.name == name)
            .cloned()
    }

    fn typed<K: DeserializeOwned>(
        &self,
        api_group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<K> {
        self.objects
            .iter()
            .find(|(k, _)| {
                k.kind == kind
                    && adapter::group_version(&k.api_version).0 == api_group
                    && k.namespace == namespace
                    && k.name == name
            })
            .and_then(|(_, o)| serde_json::from_value(o.clone()).ok())
    }

    fn crds(&self) -> impl Iterator<Item = &Value> {
        self.objects
            .values()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
    }

    /// Stores `object` under `key`, noting a change if it is one.
    fn put(&mut self, key: ObjectKey, object: Value) {
        if self.objects.get(&key) != Some(&object) {
            self.changes = self.changes.saturating_add(1);
            self.objects.insert(key.clone(), object);
            self.deleted.remove(&key);
            self.touched.insert(key);
        }
    }

    /// Where an object scaled through `/scale` keeps its replicas, and what
    /// an unset field means.
    fn scale_field(&self, api_version: &str, kind: &str) -> Result<(String, i32), String> {
        if let Some(known) = adapter::known(api_version, kind) {
            return Ok((adapter::SPEC_REPLICAS.to_owned(), known.unset));
        }
        match adapter::builtin_has_scale(api_version, kind) {
            Some(true) => return Ok((adapter::SPEC_REPLICAS.to_owned(), 1)),
            Some(false) => return Err(format!("{kind} ({api_version}) has no scale subresource")),
            None => {}
        }
        match self
            .crds()
            .find_map(|crd| adapter::crd_scale(crd, api_version, kind))
        {
            Some(Some(path)) => Ok((path, 0)),
            Some(None) => Err(format!("{kind} ({api_version}) has no scale subresource")),
            None => Err(format!(
                "{kind} ({api_version}): the world has no CustomResourceDefinition for it"
            )),
        }
    }
}

/// The managedFields entry (fieldsV1) of what Tandem's field manager
/// applied to `object`, if the object carries one.
fn applied_by_tandem(object: &Value) -> Option<&Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|m| {
            m["manager"] == FIELD_MANAGER
                && m["operation"] == "Apply"
                && m.get("subresource").is_none()
        })
        .map(|m| &m["fieldsV1"])
}

/// Server-side apply of `applied` over `existing` by a manager that owned
/// `owned` (a fieldsV1 tree) of it: a field the manager sends takes its
/// value; a field it owned and no longer sends is removed; any other field
/// (another manager's) stays. Keyed lists ([`list_keys`]) are merged item by
/// item; other lists and scalars are the manager's whole.
fn apply_as_owner(existing: &Value, applied: &Value, owned: &Value, field: Option<&str>) -> Value {
    match (existing, applied) {
        (Value::Object(before), Value::Object(sent)) => {
            let mut merged = serde_json::Map::new();
            for (key, value) in before {
                let owned_here = owned.get(format!("f:{key}"));
                match sent.get(key) {
                    Some(new) => {
                        let next = apply_as_owner(
                            value,
                            new,
                            owned_here.unwrap_or(&Value::Null),
                            Some(key),
                        );
                        merged.insert(key.clone(), next);
                    }
                    None if owned_here.is_some() => {}
                    None => {
                        merged.insert(key.clone(), value.clone());
                    }
                }
            }
            for (key, value) in sent {
                merged.entry(key.clone()).or_insert_with(|| value.clone());
            }
            Value::Object(merged)
        }
        (Value::Array(before), Value::Array(sent)) => match field.and_then(list_keys) {
            Some(keys) => Value::Array(apply_list_as_owner(before, sent, owned, keys)),
            None => applied.clone(),
        },
        _ => applied.clone(),
    }
}

/// [`apply_as_owner`] of a keyed list: the items sent, each merged with the
/// stored item of its key, then the stored items of other managers.
fn apply_list_as_owner(
    before: &[Value],
    sent: &[Value],
    owned: &Value,
    keys: &[&str],
) -> Vec<Value> {
    // fieldsV1 names an owned item `k:{"name":"vllm"}`: its key fields.
    let owned_items: Vec<(serde_json::Map<String, Value>, &Value)> = owned
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(entry, fields)| {
            let key = entry.strip_prefix("k:")?;
            Some((serde_json::from_str(key).ok()?, fields))
        })
        .collect();
    let owned_item = |item: &Value| {
        owned_items
            .iter()
            .find(|(key, _)| {
                key.iter()
                    .all(|(field, value)| item_field(item, field) == *value)
            })
            .map(|(_, fields)| *fields)
    };
    let mut merged: Vec<Value> = sent
        .iter()
        .map(|item| {
            let key = item_key(item, keys);
            match before.iter().find(|b| item_key(b, keys) == key) {
                Some(stored) => apply_as_owner(
                    stored,
                    item,
                    owned_item(stored).unwrap_or(&Value::Null),
                    None,
                ),
                None => item.clone(),
            }
        })
        .collect();
    for stored in before {
        let key = item_key(stored, keys);
        if !sent.iter().any(|s| item_key(s, keys) == key) && owned_item(stored).is_none() {
            merged.push(stored.clone());
        }
    }
    merged
}

/// A key field of a list item as fieldsV1 writes it (`protocol` defaults
/// to TCP).
fn item_field(item: &Value, field: &str) -> Value {
    match (item.get(field), field) {
        (Some(value), _) => value.clone(),
        (None, "protocol") => Value::String("TCP".to_owned()),
        (None, _) => Value::Null,
    }
}

/// Merges what server-side apply sends into an object: maps field by field,
/// lists and scalars replaced.
fn merge_applied(object: &mut Value, applied: &Value) {
    match (object, applied) {
        (Value::Object(object), Value::Object(applied)) => {
            for (key, value) in applied {
                merge_applied(object.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (object, applied) => *object = applied.clone(),
    }
}

/// A write the world cannot take, answered as the API server would.
fn invalid(reason: String) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        status: Some(kube::core::response::StatusSummary::Failure),
        message: reason,
        reason: "Invalid".to_owned(),
        code: 422,
        ..Default::default()
    }))
}

/// The objects of a `render` and what the reconcilers did to them.
#[derive(Default)]
pub struct Memory {
    state: Mutex<State>,
    /// The built-in API versions served besides the world's own (render's
    /// `--api-versions`).
    api_versions: BTreeSet<String>,
}

impl Memory {
    pub fn new(objects: BTreeMap<ObjectKey, Value>) -> Memory {
        Memory {
            state: Mutex::new(State {
                objects,
                ..State::default()
            }),
            api_versions: BTreeSet::new(),
        }
    }

    /// This world in a cluster that also serves `api_versions` (render's
    /// `--api-versions`).
    pub fn serving(mut self, api_versions: &BTreeSet<String>) -> Memory {
        self.api_versions.extend(api_versions.iter().cloned());
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every write finishes its change before it lets go: a panic
        // elsewhere cannot leave the world half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many writes changed something so far.
    pub fn changes(&self) -> u64 {
        self.state().changes
    }

    /// The keys of the objects of `api_version` `kind`, sorted.
    pub fn keys(&self, api_version: &str, kind: &str) -> Vec<ObjectKey> {
        self.state()
            .objects
            .keys()
            .filter(|k| k.api_version == api_version && k.kind == kind)
            .cloned()
            .collect()
    }

    /// One object as it is now.
    pub fn object(&self, key: &ObjectKey) -> Option<Value> {
        self.state().objects.get(key).cloned()
    }

    /// Notes `key` as written (admission changed it).
    pub fn touch(&self, key: ObjectKey) {
        self.state().touched.insert(key);
    }

    /// The objects written and still there, sorted, and the keys deleted.
    pub fn outcome(&self) -> (Vec<Value>, BTreeSet<ObjectKey>) {
        let state = self.state();
        let written = state
            .touched
            .iter()
            .filter_map(|k| state.objects.get(k).cloned())
            .collect();
        (written, state.deleted.clone())
    }
}

impl Cluster for Memory {
    /// The CRDs of the world, when it holds any: a dependency not among them
    /// is not installed. Without CRDs, everything is assumed installed.
    fn installed(&self) -> std::sync::Arc<Installed> {
        let state = self.state();
        Arc::new(crate::plan::shared::native_gang::of_world(
            state.objects.values(),
            &self.api_versions,
        ))
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<InferenceService>> {
        self.state()
            .typed("fusioninfer.io", "InferenceService", namespace, name)
            .map(Arc::new)
    }

    fn scale_view(&self, namespace: &str, name: &str) -> Option<Arc<ScaleView>> {
        self.state()
            .typed("fusioninfer.io", "ScaleView", namespace, name)
            .map(Arc::new)
    }

    fn groups(&self, namespace: &str) -> Vec<Arc<ResourceScalingGroup>> {
        self.state()
            .objects
            .iter()
            .filter(|(k, _)| {
                k.kind == "ResourceScalingGroup"
                    && adapter::group_version(&k.api_version).0 == "resourcescalinggroup.com"
                    && k.namespace == namespace
            })
            .filter_map(|(_, o)| serde_json::from_value(o.clone()).ok().map(Arc::new))
            .collect()
    }

    fn list(
        &self,
        resource: &ApiResource,
        namespace: &str,
        labels: &[(&str, &str)],
    ) -> Result<Vec<Value>, Unserved> {
        Ok(self
            .state()
            .objects
            .iter()
            .filter(|(k, _)| k.is(resource) && k.namespace == namespace)
            .filter(|(_, o)| {
                labels
                    .iter()
                    .all(|(key, value)| o["metadata"]["labels"][*key] == *value)
            })
            .map(|(_, o)| o.clone())
            .collect())
    }

    fn pods(&self, namespace: &str, labels: &[(&str, &str)]) -> Result<Vec<Pod>, Unserved> {
        let pods = self.list(&resource("v1", "Pod", "pods"), namespace, labels)?;
        Ok(pods.iter().map(Pod::from_json).collect())
    }

    fn get<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        let state = self.state();
        let found = state
            .key(resource, namespace, name)
            .and_then(|k| state.objects.get(&k).cloned());
        futures::future::ready(Ok(found)).boxed()
    }

    fn workload<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        self.get(resource, namespace, name)
    }

    fn scale<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        let state = self.state();
        let answer = match state.key(resource, namespace, name) {
            None => Ok(None),
            Some(key) => state
                .scale_field(&resource.api_version, &resource.kind)
                .and_then(|(path, unset)| {
                    adapter::object_replicas(&state.objects[&key], &path, unset)
                })
                .map(|replicas| {
                    Some(json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                        "metadata": {"name": name, "namespace": namespace},
                        "spec": {"replicas": replicas}}))
                })
                .map_err(invalid),
        };
        futures::future::ready(answer).boxed()
    }

    fn resolve<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFuture<'a, Result<Option<Discovered>, String>> {
        let state = self.state();
        let (group, version) = adapter::group_version(api_version);
        let found = match adapter::builtin_has_scale(api_version, kind) {
            Some(has_scale) => Some(Discovered {
                plural: format!("{}s", kind.to_lowercase()),
                has_scale,
            }),
            None => state.crds().find_map(|crd| {
                let spec = &crd["spec"];
                let served = spec["group"] == group
                    && spec["names"]["kind"] == kind
                    && spec["versions"]
                        .as_array()
                        .is_some_and(|vs| vs.iter().any(|v| v["name"] == version));
                served.then(|| Discovered {
                    plural: spec["names"]["plural"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    has_scale: matches!(adapter::crd_scale(crd, api_version, kind), Some(Some(_))),
                })
            }),
        };
        futures::future::ready(Ok(found)).boxed()
    }

    fn apply<'a>(&'a self, _resource: &'a ApiResource, object: &'a Value) -> Written<'a> {
        let mut state = self.state();
        let key = ObjectKey::of(object);
        let whole = object["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|owners| !owners.is_empty());
        let next = match state.objects.get(&key) {
            None => object.clone(),
            Some(existing) => {
                let mut next = match (applied_by_tandem(existing), whole) {
                    (Some(owned), _) => apply_as_owner(existing, object, owned, None),
                    (None, true) => object.clone(),
                    (None, false) => {
                        let mut merged = existing.clone();
                        if key.kind == "Pod"
                            && let Some(annotations) =
                                merged["metadata"]["annotations"].as_object_mut()
                        {
                            for owned in [drain::DRAIN_STARTED, drain::DRAIN_DEADLINE, APPLIED_HASH]
                            {
                                annotations.remove(owned);
                            }
                        }
                        merge_applied(&mut merged, object);
                        merged
                    }
                };
                if let Some(status) = existing.get("status") {
                    next["status"] = status.clone();
                    if existing.get("spec") != next.get("spec") {
                        let generation = existing["metadata"]["generation"].as_i64().unwrap_or(1);
                        let Some(newer) = generation.checked_add(1) else {
                            return futures::future::ready(Err(invalid(format!(
                                "{key}: metadata.generation: {generation} is the largest generation there is; a changed spec cannot get a new one"
                            ))))
                            .boxed();
                        };
                        next["metadata"]["generation"] = json!(newer);
                    }
                }
                next
            }
        };
        state.put(key, next);
        futures::future::ready(Ok(())).boxed()
    }

    fn delete<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
    ) -> Written<'a> {
        let mut state = self.state();
        let answer = match state.key(resource, namespace, name) {
            None => Err(not_found(resource, name)),
            Some(key) => {
                state.objects.remove(&key);
                state.touched.remove(&key);
                state.deleted.insert(key);
                state.changes = state.changes.saturating_add(1);
                Ok(())
            }
        };
        futures::future::ready(answer).boxed()
    }

    fn patch<'a>(
        &'a self,
        resource: &'a ApiResource,
        namespace: &'a str,
        name: &'a str,
        part: Part,
        patch: &'a Patch<Value>,
    ) -> Written<'a> {
        let mut state = self.state();
        let answer = (|| {
            let key = state
                .key(resource, namespace, name)
                .ok_or_else(|| not_found(resource, name))?;
            let mut object = state.objects[&key].clone();
            match (part, patch) {
                (Part::Scale, Patch::Merge(body)) => {
                    let replicas = body["spec"]["replicas"]
                        .as_i64()
                        .and_then(|r| i32::try_from(r).ok())
                        .ok_or_else(|| {
                            invalid(
                                "a /scale patch names spec.replicas as a 32-bit integer".to_owned(),
                            )
                        })?;
                    let (path, _) = state
                        .scale_field(&resource.api_version, &resource.kind)
                        .map_err(invalid)?;
                    let merge = adapter::object_patch(&path, replicas).map_err(invalid)?;
                    json_patch::merge(&mut object, &merge);
                }
                (part, Patch::Merge(body)) => {
                    let mut body = body.clone();
                    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.remove("resourceVersion");
                    }
                    if let Some(map) = body.as_object_mut() {
                        match part {
                            Part::Status => map.retain(|k, _| k == "status"),
                            _ => {
                                map.remove("status");
                            }
                        }
                    }
                    json_patch::merge(&mut object, &body);
                }
                (_, Patch::Json(operations)) => {
                    json_patch::patch(&mut object, operations)
                        .map_err(|e| invalid(format!("{} {name}: {e}", resource.kind)))?;
                }
                (_, other) => {
                    return Err(invalid(format!(
                        "the world takes merge and JSON patches, not {other:?}"
                    )));
                }
            }
            state.put(key, object);
            Ok(())
        })();
        futures::future::ready(answer).boxed()
    }

    /// `render` prints what Tandem would write to objects; the Events it
    /// would record are not part of that output.
    fn record<'a>(
        &'a self,
        _regarding: &'a ObjectReference,
        _event: &'a Event,
        _series: Series,
    ) -> BoxFuture<'a, ()> {
        futures::future::ready(()).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A LeaderWorkerSet's worker template as stored: Tandem applied the
    /// `vllm` container with env A and B, another manager added env C, a
    /// sidecar and a label; managedFields say which is whose.
    fn stored() -> Value {
        json!({"metadata": {"name": "s-r-0", "labels": {"app": "a", "team": "ml"},
            "managedFields": [
                {"manager": "tandem", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"vllm\"}": {"f:image": {},
                        "f:env": {"k:{\"name\":\"A\"}": {".": {}}, "k:{\"name\":\"B\"}": {".": {}}}}}}}},
                {"manager": "policy", "operation": "Apply", "fieldsV1": {}}]},
            "spec": {"containers": [
                {"name": "vllm", "image": "v1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]},
                {"name": "sidecar", "image": "busybox"}]},
            "status": {"replicas": 1}})
    }

    #[test]
    fn tandems_apply_keeps_another_managers_fields_and_drops_what_it_no_longer_sends() {
        let sent = json!({"metadata": {"name": "s-r-0", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "vllm", "image": "v2", "env": [{"name": "A", "value": "1"}]}]}});
        let existing = stored();
        let owned = applied_by_tandem(&existing).expect("Tandem's fields");
        let merged = apply_as_owner(&existing, &sent, owned, None);
        assert_eq!(
            merged["metadata"]["labels"],
            json!({"app": "a", "team": "ml"})
        );
        let containers = merged["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 2, "{merged:#}");
        assert_eq!(containers[0]["image"], "v2");
        // B was Tandem's and is no longer sent: gone. C was another's: kept.
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}])
        );
        assert_eq!(containers[1]["name"], "sidecar");
        assert_eq!(merged["status"], json!({"replicas": 1}));
    }

    #[test]
    fn without_managed_fields_nothing_is_known_to_be_tandems() {
        let mut existing = stored();
        existing["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert!(applied_by_tandem(&existing).is_none());
    }
}
