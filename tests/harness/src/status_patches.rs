//! What each of Tandem's status patches of an InferenceService moved, read
//! from the audit log: the status stored after it against the status stored
//! after the one before it of the same service. The scale benchmark prints
//! it per phase with `AUDIT=1` (`tests/cluster/scale_nodes.rs`), to tell
//! which changes a rollout's status patches carry.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::request::Request;
use tandem::api::inference_service::InferenceServiceStatus;
use tandem::plan::inference_service::status;

/// Tandem's status patches of InferenceServices, by what they moved.
#[derive(Debug, Default, PartialEq)]
pub struct StatusPatches {
    /// By the most telling change each made: `first` (the service's first
    /// patch in the log, nothing to compare), `pod counts` (a role's
    /// `readyPods` alone: `status::pod_counts_only`), `counts` (counts and
    /// a condition's message: `status::counts_only`), `moved` (a phase, a
    /// condition's status or reason, a revision, ...), `nothing` (what was
    /// stored before).
    pub by_class: BTreeMap<&'static str, usize>,
    /// How many patches moved each field, roles folded into `*` and
    /// conditions named by type (`.components.*.readyPods`,
    /// `.conditions[Ready].message`); `lastUpdateTime` left out, as it
    /// moves with everything else in its role.
    pub by_field: BTreeMap<String, usize>,
    /// Every patch in order: its service (`namespace/name`), when it was
    /// answered (milliseconds), and whether it only moved counts (`pod
    /// counts` or `counts`): what [`StatusPatches::repaced`] replays.
    pub timeline: Vec<(String, i64, bool)>,
}

impl StatusPatches {
    /// How many of the patches from the `from`-th on a hold of `hold_ms`
    /// would have left: each service's patches replayed in order, one
    /// that only moved counts within `hold_ms` of the service's last
    /// written one held, and written once at the end of the hold with
    /// whatever came meanwhile; any other written at once. What a longer
    /// pace would save, read from the patches a run made.
    pub fn repaced(&self, from: usize, hold_ms: i64) -> usize {
        // Per service: the last written patch's time, and when a held one
        // is due.
        let mut services: BTreeMap<&str, (i64, Option<i64>)> = BTreeMap::new();
        let mut written = 0usize;
        for (service, at, only_counts) in self.timeline.iter().skip(from) {
            let Some((last, held)) = services.get_mut(service.as_str()) else {
                services.insert(service, (*at, None));
                written = written.saturating_add(1);
                continue;
            };
            if let Some(due) = *held
                && *at >= due
            {
                written = written.saturating_add(1);
                *last = due;
                *held = None;
            }
            if !only_counts || at.saturating_sub(*last) >= hold_ms {
                written = written.saturating_add(1);
                *last = *at;
                *held = None;
            } else if held.is_none() {
                *held = Some(last.saturating_add(hold_ms));
            }
        }
        let still_held = services.values().filter(|(_, held)| held.is_some()).count();
        written.saturating_add(still_held)
    }
}

/// Reads `requests` (the audit log's, in order).
pub fn status_patches(requests: &[Request]) -> StatusPatches {
    let mut last: BTreeMap<(Option<&str>, Option<&str>), &Value> = BTreeMap::new();
    let mut patches = StatusPatches::default();
    for request in requests.iter().filter(|r| {
        r.by_tandem()
            && r.verb == "patch"
            && r.resource == "inferenceservices"
            && r.subresource.as_deref() == Some("status")
            && r.code < 300
    }) {
        let Some(stored) = request.response.as_deref().map(|o| &o["status"]) else {
            continue;
        };
        let key = (request.namespace.as_deref(), request.name.as_deref());
        let service = format!(
            "{}/{}",
            key.0.unwrap_or_default(),
            key.1.unwrap_or_default()
        );
        let at = serde_json::from_value::<Time>(Value::from(request.time.as_str()))
            .map_or(0, |t| t.0.as_millisecond());
        let Some(before) = last.insert(key, stored) else {
            *patches.by_class.entry("first").or_default() += 1;
            patches.timeline.push((service, at, false));
            continue;
        };
        let mut moved = Vec::new();
        differences(before, stored, String::new(), &mut moved);
        moved.retain(|f| f != ".components.*.lastUpdateTime");
        moved.sort();
        moved.dedup();
        for field in &moved {
            *patches.by_field.entry(field.clone()).or_default() += 1;
        }
        // Told by the functions `tandem serve`'s pace is decided by, on the
        // statuses as stored; one that does not read as a status moved.
        let read = |v: &Value| serde_json::from_value::<InferenceServiceStatus>(v.clone()).ok();
        let class = match (read(before), read(stored)) {
            _ if moved.is_empty() => "nothing",
            (Some(b), Some(s)) if status::pod_counts_only(&b, &s) => "pod counts",
            (Some(b), Some(s)) if status::counts_only(&b, &s) => "counts",
            _ => "moved",
        };
        *patches.by_class.entry(class).or_default() += 1;
        patches
            .timeline
            .push((service, at, matches!(class, "pod counts" | "counts")));
    }
    patches
}

/// The paths at which `a` and `b` differ, roles folded into `*` and
/// conditions named by their type.
fn differences(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                let inner = if path == ".components" {
                    format!("{path}.*")
                } else {
                    format!("{path}.{key}")
                };
                differences(
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                    inner,
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if path == ".conditions" => {
            let by_type = |list: &[Value]| -> BTreeMap<String, Value> {
                list.iter()
                    .map(|c| (c["type"].as_str().unwrap_or_default().to_owned(), c.clone()))
                    .collect()
            };
            let (x, y) = (by_type(x), by_type(y));
            for kind in x.keys().chain(y.keys()) {
                differences(
                    x.get(kind).unwrap_or(&Value::Null),
                    y.get(kind).unwrap_or(&Value::Null),
                    format!("{path}[{kind}]"),
                    out,
                );
            }
        }
        _ if a != b => out.push(path),
        _ => {}
    }
}
