//! Field ownership for server-side apply, as the API server keeps it in
//! `managedFields`: which manager set which field, so that a manager's apply
//! removes only the fields it owned and no longer sends, a changed field
//! owned by another manager is a conflict unless the apply is forced, and an
//! update (merge or JSON patch, replace, `/scale`) takes the fields it changes.
//!
//! One simplification against the real API server, written down where it
//! could matter: lists are owned whole (atomic), where Kubernetes tracks
//! lists with merge keys (containers by name, conditions by type) item by
//! item. Tandem applies whole objects with force, so this only differs when
//! two managers share one list.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// A path to a field: map keys from the root.
pub type Path = Vec<String>;

/// The fields each manager owns, by operation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Owners {
    /// Manager → its last applied configuration (server-side apply).
    pub applied: BTreeMap<String, Value>,
    /// Manager → a tree of the fields its updates set (leaves `true`).
    pub updated: BTreeMap<String, Value>,
}

/// Every leaf path of `value` whose ownership counts: maps are descended,
/// anything else (lists included) is a leaf. At the root only `spec`-like
/// fields and the owned parts of `metadata` count.
pub fn leaves(value: &Value) -> Vec<Path> {
    let mut out = Vec::new();
    let Some(root) = value.as_object() else {
        return out;
    };
    for (key, child) in root {
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(child) = child.get(field) {
                        collect(child, vec!["metadata".into(), field.into()], &mut out);
                    }
                }
            }
            _ => collect(child, vec![key.clone()], &mut out),
        }
    }
    out
}

fn collect(value: &Value, path: Path, out: &mut Vec<Path>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                let mut deeper = path.clone();
                deeper.push(key.clone());
                collect(child, deeper, out);
            }
        }
        _ => out.push(path),
    }
}

pub fn get<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

/// Sets `path` in `tree`, making the maps on the way.
pub fn set(tree: &mut Value, path: &[String], leaf: Value) {
    let mut node = tree;
    for key in path {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        node = node
            .as_object_mut()
            .expect("made a map just above")
            .entry(key.clone())
            .or_insert(Value::Null);
    }
    *node = leaf;
}

/// Removes `path` from `tree` and any map it leaves empty.
pub fn remove(tree: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    if let Some(parent) = parents
        .iter()
        .try_fold(&mut *tree, |v, key| v.get_mut(key))
        .and_then(Value::as_object_mut)
    {
        parent.remove(last);
    }
    if !parents.is_empty()
        && get(tree, parents).is_some_and(|p| p.as_object().is_some_and(Map::is_empty))
    {
        remove(tree, parents);
    }
}

impl Owners {
    /// Managers other than `manager` that own `path`.
    pub fn others_owning(&self, manager: &str, path: &[String]) -> Vec<String> {
        self.applied
            .iter()
            .chain(&self.updated)
            .filter(|(m, tree)| *m != manager && get(tree, path).is_some())
            .map(|(m, _)| m.clone())
            .collect()
    }

    /// The fields of `configuration` whose live value differs and that
    /// another manager owns: what a non-forced apply conflicts on.
    pub fn conflicts(&self, manager: &str, live: &Value, configuration: &Value) -> Vec<String> {
        let mut found = Vec::new();
        for path in leaves(configuration) {
            if get(live, &path) == get(configuration, &path) {
                continue;
            }
            for other in self.others_owning(manager, &path) {
                found.push(format!("conflict with \"{other}\": .{}", path.join(".")));
            }
        }
        found
    }

    /// Records an apply by `manager`: it owns what it sent; others lose the
    /// fields it changed.
    pub fn record_apply(&mut self, manager: &str, before: &Value, configuration: &Value) {
        for path in leaves(configuration) {
            if get(before, &path) != get(configuration, &path) {
                self.drop_others(manager, &path);
            }
        }
        self.applied
            .insert(manager.to_owned(), configuration.clone());
    }

    /// Records an update by `manager` from `before` to `after`: it owns the
    /// fields it changed, and nobody else does any more.
    pub fn record_update(&mut self, manager: &str, before: &Value, after: &Value) {
        let mut changed: Vec<Path> = leaves(after)
            .into_iter()
            .filter(|p| get(before, p) != get(after, p))
            .collect();
        changed.extend(
            leaves(before)
                .into_iter()
                .filter(|p| get(after, p).is_none()),
        );
        for path in &changed {
            self.drop_others(manager, path);
            let tree = self.updated.entry(manager.to_owned()).or_insert(json!({}));
            if get(after, path).is_some() {
                set(tree, path, json!(true));
            } else {
                remove(tree, path);
            }
        }
    }

    fn drop_others(&mut self, manager: &str, path: &[String]) {
        for (other, tree) in self.applied.iter_mut().chain(self.updated.iter_mut()) {
            if other != manager {
                remove(tree, path);
            }
        }
    }

    /// `metadata.managedFields` as the API server reports it (`fieldsV1`
    /// with `f:` keys), for clients that must cope with it.
    pub fn managed_fields(&self, api_version: &str, time: &str) -> Value {
        let entry = |manager: &str, operation: &str, tree: &Value| {
            json!({"manager": manager, "operation": operation, "apiVersion": api_version,
                "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(tree)})
        };
        let mut entries: Vec<Value> = self
            .applied
            .iter()
            .map(|(m, tree)| entry(m, "Apply", tree))
            .collect();
        entries.extend(
            self.updated
                .iter()
                .filter(|(_, tree)| tree.as_object().is_some_and(|t| !t.is_empty()))
                .map(|(m, tree)| entry(m, "Update", tree)),
        );
        Value::Array(entries)
    }
}

fn fields_v1(tree: &Value) -> Value {
    let mut out = Map::new();
    for path in leaves(tree) {
        let mut node = &mut out;
        for key in path {
            node = node
                .entry(format!("f:{key}"))
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("every node made here is a map");
        }
    }
    Value::Object(out)
}

/// Removes from `object` what `before` (a manager's last applied
/// configuration) had and `now` (its new one) leaves out, unless another
/// manager still owns it.
pub fn drop_unapplied(
    object: &mut Value,
    owners: &Owners,
    manager: &str,
    before: &Value,
    now: &Value,
) {
    for path in leaves(before) {
        if get(now, &path).is_none() && owners.others_owning(manager, &path).is_empty() {
            remove(object, &path);
        }
    }
}

/// Merges an applied configuration into an object: maps field by field,
/// lists and scalars replaced.
pub fn merge_applied(object: &mut Value, applied: &Value) {
    match (object, applied) {
        (Value::Object(object), Value::Object(applied)) => {
            for (key, value) in applied {
                merge_applied(object.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (object, applied) => *object = applied.clone(),
    }
}
