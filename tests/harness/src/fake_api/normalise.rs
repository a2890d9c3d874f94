//! What the API server does to a built-in object before storing it, where
//! Tandem's comparisons depend on it. Custom resources (Tandem's kinds, LWS,
//! PodGroups, the Gateway API) are stored as sent: the API server only prunes
//! and defaults them from their schema, and Tandem sends what its schemas allow.
//!
//! Each rule names where Kubernetes makes it:
//! - quantities: `k8s.io/apimachinery/pkg/api/resource.Quantity` marshals in
//!   canonical form (`0.5` → `500m`, `1024Mi` → `1Gi`, `1` → `"1"`);
//! - empty lists: every slice field of `k8s.io/api` has `omitempty`, so an
//!   empty list is not stored; the same for the map fields listed in
//!   [`EMPTY_MAPS_DROPPED`];
//! - defaults: `pkg/apis/apps/v1/defaults.go` (Deployment) and
//!   `pkg/apis/core/v1/defaults.go` (pod spec, container, Service).

use serde_json::{Value, json};
use tandem::api::quantity::Quantity;

/// Map fields of built-in kinds whose Go type is a map with `omitempty`.
const EMPTY_MAPS_DROPPED: [&str; 7] = [
    "labels",
    "annotations",
    "nodeSelector",
    "data",
    "binaryData",
    "matchLabels",
    "selector",
];

/// Normalises `object`, of the built-in resource `plural` (a custom resource
/// is left alone). `allocated` is the count of cluster IPs handed out so far,
/// for a Service that needs one.
pub fn built_in(plural: &str, object: &mut Value, allocated: &mut u32) {
    match plural {
        "deployments" => deployment(object),
        "statefulsets" => {
            if let Some(template) = object.pointer_mut("/spec/template/spec") {
                pod_spec(template);
            }
        }
        "pods" => {
            if let Some(spec) = object.get_mut("spec") {
                pod_spec(spec);
            }
        }
        "services" => service(object, allocated),
        "configmaps"
        | "roles"
        | "rolebindings"
        | "serviceaccounts"
        | "leases"
        | "controllerrevisions"
        | "namespaces" => {}
        _ => return,
    }
    drop_empty(object);
}

/// Canonical form of a quantity given as a string or a number; anything that
/// does not parse is left as it is (the real API server would refuse it).
fn canonical(value: &mut Value) {
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        _ => return,
    };
    if let Ok(quantity) = text.parse::<Quantity>() {
        *value = Value::String(quantity.to_string());
    }
}

fn deployment(object: &mut Value) {
    let spec = &mut object["spec"];
    if spec.is_null() {
        return;
    }
    default(spec, "replicas", json!(1));
    default(spec, "revisionHistoryLimit", json!(10));
    default(spec, "progressDeadlineSeconds", json!(600));
    default(
        spec,
        "strategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
    );
    if let Some(template) = spec.pointer_mut("/template/spec") {
        pod_spec(template);
    }
}

fn pod_spec(spec: &mut Value) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            containers.iter_mut().for_each(container);
        }
    }
    if let Some(overhead) = spec.get_mut("overhead").and_then(Value::as_object_mut) {
        overhead.values_mut().for_each(canonical);
    }
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for volume in volumes {
            if let Some(limit) = volume.pointer_mut("/emptyDir/sizeLimit") {
                canonical(limit);
            }
        }
    }
}

fn container(container: &mut Value) {
    default(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    default(container, "terminationMessagePolicy", json!("File"));
    // An image without a tag, or tagged `latest`, is pulled every time.
    let image = container["image"].as_str().unwrap_or_default();
    let tag = image
        .rsplit_once('/')
        .map_or(image, |(_, last)| last)
        .split_once(':')
        .map(|(_, tag)| tag);
    let latest = !image.contains('@') && matches!(tag, None | Some("latest"));
    default(
        container,
        "imagePullPolicy",
        json!(if latest { "Always" } else { "IfNotPresent" }),
    );
    if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            default(port, "protocol", json!("TCP"));
        }
    }
    for field in ["limits", "requests"] {
        if let Some(map) = container
            .pointer_mut(&format!("/resources/{field}"))
            .and_then(Value::as_object_mut)
        {
            map.values_mut().for_each(canonical);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get_mut(probe).filter(|p| p.is_object()) {
            default(probe, "timeoutSeconds", json!(1));
            default(probe, "periodSeconds", json!(10));
            default(probe, "successThreshold", json!(1));
            default(probe, "failureThreshold", json!(3));
        }
    }
}

fn service(object: &mut Value, allocated: &mut u32) {
    let spec = &mut object["spec"];
    if spec.is_null() {
        return;
    }
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    default(spec, "internalTrafficPolicy", json!("Cluster"));
    if spec["clusterIP"].is_null() {
        *allocated += 1;
        let ip = format!("10.96.{}.{}", *allocated / 250, *allocated % 250 + 1);
        spec["clusterIP"] = json!(ip);
        spec["clusterIPs"] = json!([ip]);
        spec["ipFamilies"] = json!(["IPv4"]);
        spec["ipFamilyPolicy"] = json!("SingleStack");
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            default(port, "protocol", json!("TCP"));
            let number = port["port"].clone();
            default(port, "targetPort", number);
        }
    }
}

fn default(object: &mut Value, field: &str, value: Value) {
    if let Some(map) = object.as_object_mut() {
        map.entry(field).or_insert(value);
    }
}

/// Drops empty lists everywhere, and empty maps of the fields that are Go maps.
fn drop_empty(value: &mut Value) {
    if let Some(map) = value.as_object_mut() {
        let empty: Vec<String> = map
            .iter()
            .filter(|(k, v)| match v {
                Value::Array(items) => items.is_empty(),
                Value::Object(fields) => {
                    fields.is_empty() && EMPTY_MAPS_DROPPED.contains(&k.as_str())
                }
                _ => false,
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in empty {
            map.remove(&key);
        }
        map.values_mut().for_each(drop_empty);
    } else if let Some(items) = value.as_array_mut() {
        items.iter_mut().for_each(drop_empty);
    }
}
