//! The writes a plan asks for: a child to server-side apply ([`Apply`]) or
//! to delete ([`Delete`]), how an apply changes what is there ([`Change`]),
//! and the applied-hash stamp that tells whether a write is needed at all.
//! An InferenceService's children and a ResourceScalingGroup's replicated
//! objects are written alike.

use serde_json::Value;

use super::scale_down_policy::Replica;
use crate::api::quantity::Quantity;

/// The hash of what Tandem last applied to a child.
pub const APPLIED_HASH: &str = "fusioninfer.io/applied-hash";

/// How an applied child differs from what was there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Create,
    /// The plan changed.
    Update,
    /// The plan is the same but the object was changed by hand.
    Revert,
}

impl Change {
    /// The Event reason.
    pub fn reason(self) -> &'static str {
        match self {
            Change::Create => "Created",
            Change::Update => "Updated",
            Change::Revert => "Reverted",
        }
    }

    /// The Event's note for applying `kind` `name` because of `why`.
    pub fn note(self, kind: &str, name: &str, why: &str) -> String {
        match self {
            Change::Create => format!("{kind} {name} created: {why}"),
            Change::Update => format!("{kind} {name} updated: {why}"),
            Change::Revert => {
                format!("{kind} {name} was changed outside Tandem and is set back: {why}")
            }
        }
    }
}

/// How applying `desired` (stamped, see [`stamp`]) changes `current`, the
/// object as observed; None when it is [`up_to_date`] and nothing is written.
pub fn change_of(desired: &Value, current: Option<&Value>) -> Option<Change> {
    match current {
        Some(c) if up_to_date(desired, c) => None,
        Some(c) if applied_hash(c) == applied_hash(desired) => Some(Change::Revert),
        Some(_) => Some(Change::Update),
        None => Some(Change::Create),
    }
}

/// A child to server-side apply (stamped with its applied hash).
#[derive(Clone, Debug, PartialEq)]
pub struct Apply {
    pub object: Value,
    pub change: Change,
    /// The Event's note: what and why.
    pub note: String,
    /// Set when the object is a replica, with its policy (counted on
    /// /metrics, [`super::decision`]).
    pub replica: Option<Replica>,
}

/// A child to delete, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Delete {
    pub object: Value,
    pub note: String,
    /// Set when the object is a replica, with its policy (counted on
    /// /metrics, [`super::decision`]).
    pub replica: Option<Replica>,
}

fn applied_hash(object: &Value) -> Option<&str> {
    object["metadata"]["annotations"][APPLIED_HASH].as_str()
}

/// Sets the applied-hash annotation: a hash of the object as planned.
pub fn stamp(mut object: Value) -> Value {
    let bytes = serde_json::to_vec(&object).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(APPLIED_HASH.to_owned(), Value::String(hash));
        }
    }
    object
}

/// Whether `observed` already is what `desired` (stamped) asks for: same
/// applied hash (so a field Tandem stops wanting is applied away), and every
/// desired field present with the desired value (so a hand edit is set back).
/// Fields the server added are ignored.
pub fn up_to_date(desired: &Value, observed: &Value) -> bool {
    applied_hash(desired) == applied_hash(observed) && contains(observed, desired)
}

/// Whether every field of `want` is in `have` with the same value; fields
/// only `have` has do not matter, so what another field manager added (a
/// label, an env var, a sidecar) is no drift.
///
/// Lists are compared as server-side apply merges them: a list with merge
/// keys ([`list_keys`]: containers and env by `name`, ports by port and
/// protocol, volume mounts by `mountPath`, conditions by `type`, …) matches
/// each wanted item to the item with its key, and items only `have` has
/// (another manager's) do not matter; any other list is atomic and compared
/// whole, element by element.
///
/// Values are compared as the API server stores them, so that what it
/// normalised is not taken for a hand edit:
/// - a resource quantity (an entry of `limits`, `requests` or `overhead`, or
///   a `sizeLimit`) is compared by value: the API server stores built-in
///   kinds' quantities in canonical form (`cpu: 0.5` comes back as `500m`,
///   `1024Mi` as `1Gi`, `nvidia.com/gpu: 1` as `"1"`), Kubernetes'
///   `resource.Quantity` marshalling;
/// - an empty list or map that `have` lacks is there: Go's `omitempty` drops
///   empty slices and maps when the API server serialises a built-in object.
pub fn contains(have: &Value, want: &Value) -> bool {
    contains_within(have, want, None)
}

/// Keys whose map values are resource quantities.
const QUANTITY_MAPS: [&str; 3] = ["limits", "requests", "overhead"];

/// [`contains`], where `key` is the field that holds `want`.
fn contains_within(have: &Value, want: &Value, key: Option<&str>) -> bool {
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => {
            let quantities = key.is_some_and(|k| QUANTITY_MAPS.contains(&k));
            want.iter().all(|(k, w)| match have.get(k) {
                Some(h) if quantities => same_quantity(h, w),
                Some(h) if k == "sizeLimit" => same_quantity(h, w),
                Some(h) => contains_within(h, w, Some(k)),
                None => is_empty_collection(w),
            })
        }
        (Value::Array(have), Value::Array(want)) => match key.and_then(list_keys) {
            Some(keys) => want.iter().all(|w| {
                let wanted = item_key(w, keys);
                have.iter()
                    .find(|h| item_key(h, keys) == wanted)
                    .is_some_and(|h| contains_within(h, w, None))
            }),
            None => {
                have.len() == want.len()
                    && have
                        .iter()
                        .zip(want)
                        .all(|(h, w)| contains_within(h, w, None))
            }
        },
        _ => have == want,
    }
}

/// The merge keys of a list, by the field that holds it: the
/// `x-kubernetes-list-map-keys` (and Kubernetes' `+listMapKey` markers) of
/// the lists Tandem writes in pod templates (LeaderWorkerSet's CRD embeds
/// them, Deployments are built in), Services, Gateways and HTTPRoutes, as
/// the CRDs in `shared/crds` and k8s.io/api v0.36 declare them. `ports` is
/// keyed by `containerPort` in a container and by `port` in a Service, each
/// with `protocol`. Lists not named here (`args`, `tolerations`, an
/// HTTPRoute's `rules`, …) are atomic. `add` and `set` are keyed in an
/// HTTPRoute's header filters but atomic in a container's capabilities, so
/// they are left atomic: a difference there is a write, never a miss.
pub fn list_keys(field: &str) -> Option<&'static [&'static str]> {
    const NAME: &[&str] = &["name"];
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "claims"
        | "schedulingGates"
        | "listeners"
        | "headers"
        | "queryParams" => Some(NAME),
        "ports" => Some(&["port", "protocol"]),
        "volumeMounts" => Some(&["mountPath"]),
        "volumeDevices" => Some(&["devicePath"]),
        "hostAliases" => Some(&["ip"]),
        "topologySpreadConstraints" => Some(&["topologyKey", "whenUnsatisfiable"]),
        "conditions" => Some(&["type"]),
        _ => None,
    }
}

/// The values of an item's merge keys; a container port's `containerPort`
/// stands for `port`, and a missing `protocol` is TCP, its default.
pub fn item_key(item: &Value, keys: &[&str]) -> Vec<Value> {
    keys.iter()
        .map(|key| match *key {
            "port" => item
                .get("containerPort")
                .or_else(|| item.get("port"))
                .cloned()
                .unwrap_or(Value::Null),
            "protocol" => item
                .get("protocol")
                .cloned()
                .unwrap_or_else(|| Value::String("TCP".to_owned())),
            key => item.get(key).cloned().unwrap_or(Value::Null),
        })
        .collect()
}

fn is_empty_collection(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
        _ => false,
    }
}

/// Whether two quantities (strings or numbers) have the same value; text that
/// is not a quantity is compared as it is.
fn same_quantity(have: &Value, want: &Value) -> bool {
    fn parse(value: &Value) -> Option<Quantity> {
        match value {
            Value::String(text) => text.parse().ok(),
            Value::Number(number) => number.to_string().parse().ok(),
            _ => None,
        }
    }
    have == want || matches!((parse(have), parse(want)), (Some(h), Some(w)) if h == w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(containers: Value) -> Value {
        json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": containers}})
    }

    #[test]
    fn what_another_manager_adds_to_keyed_lists_is_no_drift() {
        let want = template(json!([{"name": "vllm", "image": "v1",
            "env": [{"name": "A", "value": "1"}],
            "ports": [{"containerPort": 8000, "name": "http"}],
            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}]));
        let have = template(json!([
            {"name": "policy-sidecar", "image": "busybox"},
            {"name": "vllm", "image": "v1",
             "env": [{"name": "INJECTED", "value": "x"}, {"name": "A", "value": "1"}],
             "ports": [{"containerPort": 9090, "protocol": "TCP"}, {"containerPort": 8000, "name": "http", "protocol": "TCP"}],
             "volumeMounts": [{"name": "other", "mountPath": "/other"}, {"name": "cache", "mountPath": "/cache"}]}]));
        let mut labelled = have.clone();
        labelled["metadata"]["labels"]["team"] = json!("ml");
        assert!(contains(&have, &want));
        assert!(contains(&labelled, &want));
    }

    #[test]
    fn a_changed_or_missing_item_of_tandems_is_drift() {
        let want = template(json!([{"name": "vllm", "env": [{"name": "A", "value": "1"}]}]));
        let changed = template(json!([{"name": "vllm", "env": [{"name": "A", "value": "2"}]}]));
        let gone = template(json!([{"name": "vllm", "env": [{"name": "B", "value": "1"}]}]));
        let no_container = template(json!([{"name": "other"}]));
        for have in [changed, gone, no_container] {
            assert!(!contains(&have, &want), "{have}");
        }
    }

    #[test]
    fn ports_are_keyed_by_port_and_protocol_with_tcp_by_default() {
        let want = json!({"ports": [{"containerPort": 8000}]});
        assert!(contains(
            &json!({"ports": [{"containerPort": 8000, "protocol": "TCP"}]}),
            &want
        ));
        assert!(!contains(
            &json!({"ports": [{"containerPort": 8000, "protocol": "UDP"}]}),
            &want
        ));
        let service = json!({"ports": [{"port": 80, "targetPort": 8000}]});
        assert!(contains(
            &json!({"ports": [{"port": 443}, {"port": 80, "targetPort": 8000, "protocol": "TCP"}]}),
            &service
        ));
    }

    #[test]
    fn an_atomic_list_is_compared_whole() {
        let want = json!({"args": ["--model", "a"], "tolerations": [{"key": "gpu"}]});
        assert!(contains(&want.clone(), &want));
        assert!(!contains(
            &json!({"args": ["--model", "a", "--extra"], "tolerations": [{"key": "gpu"}]}),
            &want
        ));
        assert!(!contains(
            &json!({"args": ["--model", "a"], "tolerations": [{"key": "gpu"}, {"key": "x"}]}),
            &want
        ));
    }

    #[test]
    fn a_field_tandem_no_longer_applies_is_removed_by_the_next_apply() {
        // The applied hash of what Tandem wants changes when the template
        // drops a field, so the object is stale and applied again; server-side
        // apply then removes what Tandem's manager no longer sends.
        let before = template(json!([{"name": "vllm", "env": [{"name": "A", "value": "1"}]}]));
        let after = template(json!([{"name": "vllm"}]));
        assert!(
            contains(&before, &after),
            "every field still wanted is there"
        );
        let (before, after) = (stamp(before), stamp(after));
        assert!(!up_to_date(&after, &before));
        assert_eq!(change_of(&after, Some(&before)), Some(Change::Update));
    }

    #[test]
    fn up_to_date_ignores_server_fields_but_not_drift_or_removed_fields() {
        let desired = stamp(
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        let mut observed = desired.clone();
        observed["metadata"]["uid"] = json!("u");
        observed["spec"]["ports"][0]["protocol"] = json!("TCP");
        observed["status"] = json!({"ready": 1});
        assert!(
            up_to_date(&desired, &observed),
            "server-added fields do not count"
        );
        let mut drifted = observed.clone();
        drifted["spec"]["replicas"] = json!(3);
        assert!(
            !up_to_date(&desired, &drifted),
            "a field changed by hand is set back"
        );
        // A field Tandem stops wanting changes the hash, so it is applied (and
        // server-side apply removes the field Tandem no longer owns).
        let smaller = stamp(
            json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "ports": [{"port": 80}]}}),
        );
        assert!(!up_to_date(&smaller, &observed));
    }

    #[test]
    fn up_to_date_compares_what_the_api_server_stored_canonically() {
        let desired = stamp(
            json!({"metadata": {"name": "epp"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1024Mi"}}],
            "containers": [{"name": "epp", "args": [], "resources": {
                "requests": {"cpu": 0.5, "memory": "1024Mi", "nvidia.com/gpu": 1},
                "limits": {"cpu": "1.5", "memory": "2Gi"}}}]}}}}),
        );
        // As the API server stores a Deployment: quantities canonical, the
        // empty list dropped (Go's omitempty), defaults added.
        let mut stored = stamp(
            json!({"metadata": {"name": "epp"}, "spec": {"template": {"spec": {
            "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
            "containers": [{"name": "epp", "imagePullPolicy": "IfNotPresent", "resources": {
                "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                "limits": {"cpu": "1500m", "memory": "2Gi"}}}]}}}}),
        );
        stored["metadata"]["annotations"] = desired["metadata"]["annotations"].clone();
        assert!(
            up_to_date(&desired, &stored),
            "canonical forms of the same quantities are no hand edit"
        );
        let mut edited = stored.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] =
            json!("1");
        assert!(
            !up_to_date(&desired, &edited),
            "a quantity changed by hand is drift"
        );
        let mut renamed = stored.clone();
        renamed["spec"]["template"]["spec"]["containers"][0]["name"] = json!("0.5");
        assert!(
            !contains(&json!({"name": "500m"}), &json!({"name": "0.5"})),
            "outside resource maps text is compared as text"
        );
        assert!(!up_to_date(&desired, &renamed));
        assert!(
            !contains(&json!({}), &json!({"args": ["--x"]})),
            "a non-empty list that is missing is missing"
        );
    }
}
