//! Where each object of one cache is: the names of its objects by
//! namespace, and by namespace and the label that names their service or
//! group, kept from the same watch events as the cache itself. A reconcile
//! reads one service's or one group's objects, and admission one
//! namespace's: through the catalog that costs what it returns, where a
//! scan of the cache cost every object of the kind in the cluster (issue
//! 51: 51 to 60 % of Tandem's CPU at 500 services was that scan).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use kube::api::ObjectMeta;

use crate::plan::resource_scaling_group::replication::NAME_LABEL;
use crate::plan::shared::children::SERVICE;

/// The labels the catalog files objects under: the service of a service's
/// children and pods, the group of a GroupReplication group's objects and
/// pods. These are the labels the reconcilers look objects up by.
pub const FILED_BY: [&str; 2] = [SERVICE, NAME_LABEL];

/// The names of one cache's objects by namespace and by filing label.
#[derive(Debug, Default)]
pub struct Catalog {
    shelves: Mutex<Shelves>,
}

#[derive(Debug, Default)]
struct Shelves {
    /// namespace -> names.
    by_namespace: HashMap<String, BTreeSet<String>>,
    /// (namespace, label, value) -> names, for each label of [`FILED_BY`].
    by_label: HashMap<(String, &'static str, String), BTreeSet<String>>,
}

impl Shelves {
    fn file(&mut self, meta: &ObjectMeta) {
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        self.by_namespace
            .entry(namespace.clone())
            .or_default()
            .insert(name.clone());
        for label in FILED_BY {
            if let Some(value) = meta.labels.as_ref().and_then(|l| l.get(label)) {
                self.by_label
                    .entry((namespace.clone(), label, value.clone()))
                    .or_default()
                    .insert(name.clone());
            }
        }
    }

    fn unfile(&mut self, meta: &ObjectMeta) {
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        if let Some(names) = self.by_namespace.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                self.by_namespace.remove(namespace);
            }
        }
        for label in FILED_BY {
            if let Some(value) = meta.labels.as_ref().and_then(|l| l.get(label)) {
                let key = (namespace.clone(), label, value.clone());
                if let Some(names) = self.by_label.get_mut(&key) {
                    names.remove(name);
                    if names.is_empty() {
                        self.by_label.remove(&key);
                    }
                }
            }
        }
    }
}

impl Catalog {
    /// Files a change the cache has just applied: `old` is what the cache
    /// held (None for a new object), `new` what it holds now (None once
    /// deleted, a re-list's vanished objects included).
    pub fn changed(&self, old: Option<&ObjectMeta>, new: Option<&ObjectMeta>) {
        let mut shelves = self.shelves.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = old {
            shelves.unfile(old);
        }
        if let Some(new) = new {
            shelves.file(new);
        }
    }

    /// The names of the objects in `namespace`, sorted.
    pub fn in_namespace(&self, namespace: &str) -> Vec<String> {
        let shelves = self.shelves.lock().unwrap_or_else(PoisonError::into_inner);
        shelves
            .by_namespace
            .get(namespace)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The names, sorted, of the objects in `namespace` that may carry
    /// every label of `labels`: those filed under one of them when one is a
    /// filing label, else every object of the namespace. The caller still
    /// matches the labels.
    pub fn candidates(&self, namespace: &str, labels: &[(&str, &str)]) -> Vec<String> {
        let filed = labels.iter().find_map(|(key, value)| {
            FILED_BY
                .iter()
                .copied()
                .find(|l| l == key)
                .map(|l| (l, *value))
        });
        let Some((label, value)) = filed else {
            return self.in_namespace(namespace);
        };
        let shelves = self.shelves.lock().unwrap_or_else(PoisonError::into_inner);
        shelves
            .by_label
            .get(&(namespace.to_owned(), label, value.to_owned()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(namespace: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn an_object_is_found_by_its_namespace_and_its_service_until_it_goes() {
        let catalog = Catalog::default();
        let a = meta("ns", "a-0", &[(SERVICE, "a")]);
        let b = meta("ns", "b-0", &[(SERVICE, "b")]);
        let other = meta("other", "a-0", &[(SERVICE, "a")]);
        for object in [&a, &b, &other] {
            catalog.changed(None, Some(object));
        }
        assert_eq!(catalog.in_namespace("ns"), ["a-0", "b-0"]);
        assert_eq!(catalog.candidates("ns", &[(SERVICE, "a")]), ["a-0"]);
        assert_eq!(
            catalog.candidates("ns", &[("app", "x"), (SERVICE, "b")]),
            ["b-0"]
        );
        // No filing label: every object of the namespace is a candidate.
        assert_eq!(catalog.candidates("ns", &[("app", "x")]), ["a-0", "b-0"]);
        assert!(catalog.candidates("ns", &[(SERVICE, "c")]).is_empty());

        // A relabel moves it; a deletion removes it everywhere.
        let moved = meta("ns", "a-0", &[(SERVICE, "b")]);
        catalog.changed(Some(&a), Some(&moved));
        assert!(catalog.candidates("ns", &[(SERVICE, "a")]).is_empty());
        assert_eq!(catalog.candidates("ns", &[(SERVICE, "b")]), ["a-0", "b-0"]);
        catalog.changed(Some(&moved), None);
        catalog.changed(Some(&b), None);
        assert!(catalog.in_namespace("ns").is_empty());
        // Nothing of the gone objects is kept on any shelf.
        let shelves = catalog.shelves.lock().expect("not poisoned");
        assert_eq!(shelves.by_namespace.keys().collect::<Vec<_>>(), ["other"]);
        assert_eq!(
            shelves.by_label.keys().collect::<Vec<_>>(),
            [&("other".to_owned(), SERVICE, "a".to_owned())]
        );
    }

    #[test]
    fn a_group_replications_objects_are_filed_under_its_name() {
        let catalog = Catalog::default();
        catalog.changed(None, Some(&meta("ns", "pool-0", &[(NAME_LABEL, "pool")])));
        assert_eq!(
            catalog.candidates("ns", &[(NAME_LABEL, "pool")]),
            ["pool-0"]
        );
    }
}
