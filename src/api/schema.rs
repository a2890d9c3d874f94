//! Schema fragments the derive cannot express: raw embedded objects the API
//! server must keep as written, and values that may be a number or a string;
//! and the API server's strict field validation against the generated
//! schemas ([`unknown_fields`]).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use super::Violation;

/// An embedded object kept verbatim (a PodTemplateSpec or an HTTPRouteSpec).
/// Its schema stays open so the CRD stays small; the webhook parses it with
/// the real type and names the field that does not fit.
pub fn raw_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A value written either as a number or as a string (`ratio: 1.5` or
/// `ratio: "1.5"`). Structural schemas have no number-or-string type, so the
/// schema admits any scalar and the webhook checks it is an exact decimal.
pub fn number_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "A non-negative decimal, as a number (1.5) or a string (\"1.5\"), computed exactly.",
    })
}

/// The fields of `metadata` the API server knows (ObjectMeta); the CRD
/// schemas leave `metadata` open because the API server checks it itself.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The openAPIV3Schema of each of Tandem's kinds, by kind, as generated.
fn schemas() -> &'static BTreeMap<String, Value> {
    static SCHEMAS: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        super::crds::all()
            .into_iter()
            .filter_map(|crd| {
                let kind = crd.spec.names.kind.clone();
                let schema = crd
                    .spec
                    .versions
                    .into_iter()
                    .next()?
                    .schema?
                    .open_api_v3_schema?;
                Some((kind, serde_json::to_value(schema).ok()?))
            })
            .collect()
    })
}

/// Every field of `object` (one of Tandem's kinds, named by `kind`) that its
/// CRD schema does not declare, with its path, as the API server's strict
/// field validation (`kubectl apply --validate=strict`, the default) refuses
/// it; with a lax client the API server drops it silently. Embedded objects
/// kept verbatim (a role's template, a router's httproute) are not walked:
/// their own validation parses them.
pub fn unknown_fields(kind: &str, object: &Value) -> Vec<Violation> {
    let mut found = Vec::new();
    let Some(schema) = schemas().get(kind) else {
        return found;
    };
    // The root schema declares spec and status; apiVersion, kind and
    // metadata are every object's.
    let Some(fields) = object.as_object() else {
        return found;
    };
    for (key, value) in fields {
        match key.as_str() {
            "apiVersion" | "kind" | "metadata" => {}
            _ => match schema["properties"].get(key) {
                Some(property) => walk(property, value, key, &mut found),
                None => found.push(unknown(
                    "",
                    key,
                    ["apiVersion", "kind", "metadata", "spec", "status"].into_iter(),
                )),
            },
        }
    }
    if let Some(metadata) = object.get("metadata").and_then(Value::as_object) {
        for key in metadata.keys() {
            if !OBJECT_META_FIELDS.contains(&key.as_str()) {
                found.push(unknown("metadata", key, OBJECT_META_FIELDS.iter().copied()));
            }
        }
    }
    found
}

fn walk(schema: &Value, value: &Value, path: &str, found: &mut Vec<Violation>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    match value {
        Value::Object(fields) => {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            if schema.get("additionalProperties").is_some() {
                return;
            }
            for (key, inner) in fields {
                match properties.get(key) {
                    Some(property) => walk(property, inner, &join(path, key), found),
                    None => found.push(unknown(path, key, properties.keys().map(String::as_str))),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), found);
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// An unknown field, with the known one it was probably meant to be.
fn unknown<'a>(path: &str, key: &str, known: impl Iterator<Item = &'a str>) -> Violation {
    let closest = known
        .map(|k| (edit_distance(&k.to_lowercase(), &key.to_lowercase()), k))
        .filter(|(d, _)| *d <= 2)
        .min();
    let hint = closest.map_or(String::new(), |(_, k)| format!(" (did you mean {k:?}?)"));
    Violation {
        field: join(path, key),
        reason: format!(
            "unknown field{hint}: the API server's strict field validation refuses it, and without it the field is dropped"
        ),
    }
}

/// Levenshtein distance over characters, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i.saturating_add(1)];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j].saturating_add(usize::from(ca != *cb));
            let deletion = previous[j.saturating_add(1)].saturating_add(1);
            let insertion = current[j].saturating_add(1);
            current.push(substitution.min(deletion).min(insertion));
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_named_with_a_guess() {
        let object = json!({
            "apiVersion": "fusioninfer.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "a", "lables": {}},
            "spec": {"roles": [{"name": "w", "componentType": "worker", "replicsa": 3,
                "template": {"spec": {"anything": 1}}}]},
            "extra": 1,
        });
        let found: Vec<String> = unknown_fields("InferenceService", &object)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found.iter().any(|f| f.starts_with("extra: unknown field:")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|f| f
                .starts_with("spec.roles[0].replicsa: unknown field (did you mean \"replicas\"?)")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|f| f.starts_with("metadata.lables: unknown field (did you mean \"labels\"?)")),
            "{found:?}"
        );
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("replicsa", "replicas"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
