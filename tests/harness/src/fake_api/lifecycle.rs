//! What happens to objects without a client asking, as the API server and
//! the cluster's own controllers do it, settled after every request:
//!
//! - **deletion**: an object with finalizers is only marked
//!   (`deletionTimestamp`) and goes when the last finalizer is removed;
//! - **garbage collection** (background propagation, the default of
//!   `kubectl delete` and of Tandem's deletes): an object whose every owner
//!   has been deleted is deleted. One difference from the real collector, to
//!   keep fixtures small: an owner this server never stored is taken as not
//!   yet visible, not as gone, so a test may store children without their
//!   owner;
//! - **namespaces**: deleting one marks it `Terminating`, refuses new
//!   content in it, deletes everything in it (finalizers still hold objects)
//!   and removes it once it is empty;
//! - **LeaderWorkerSets**: per group, a leader pod `{lws}-{i}` and workers
//!   `{lws}-{i}-{j}` for `j` in `1..size`, labelled as LWS labels them
//!   (`leaderworkerset.sigs.k8s.io/{name,group-index,worker-index,template-revision-hash}`)
//!   and owned by the LeaderWorkerSet (LWS puts a StatefulSet in between;
//!   garbage collection reaches the pods either way); a group whose template
//!   changed is recreated, as LWS's rolling update does with one replica;
//!   groups past `replicas` are deleted; `status` counts ready and updated
//!   groups. Pods start Pending; tests make them ready.

use std::collections::BTreeSet;

use http::StatusCode;
use serde_json::{Value, json};

use super::{NOW, Resource, State, Stored, normalise, ownership::Owners, status};

const LWS: &str = "leaderworkerset.sigs.k8s.io";

/// The label naming a pod's LeaderWorkerSet.
pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";

fn pods() -> Resource {
    Resource {
        prefix: "/api/v1".into(),
        plural: "pods".into(),
    }
}

fn namespaces() -> Resource {
    Resource {
        prefix: "/api/v1".into(),
        plural: "namespaces".into(),
    }
}

fn leader_worker_sets() -> Resource {
    Resource {
        prefix: "/apis/leaderworkerset.x-k8s.io/v1".into(),
        plural: "leaderworkersets".into(),
    }
}

fn finalizers(object: &Value) -> usize {
    object["metadata"]["finalizers"]
        .as_array()
        .map_or(0, Vec::len)
}

fn deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// Whether an object being deleted has no finalizer left, so it goes.
pub fn releasable(object: &Value) -> bool {
    deleting(object) && finalizers(object) == 0
}

/// Refuses new content in a namespace that is being deleted (403), or was
/// (404), as the API server's NamespaceLifecycle admission does. A namespace
/// never created is taken to exist, so tests need not create `default`.
pub fn may_create_in(state: &State, namespace: &str) -> Result<(), (StatusCode, Value)> {
    let terminating = state
        .get(&namespaces(), &(String::new(), namespace.to_owned()))
        .is_some_and(|n| deleting(&n.object));
    if terminating {
        return Err(status(
            403,
            "Forbidden",
            format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        ));
    }
    if state.deleted_namespaces.contains(namespace) {
        return Err(status(
            404,
            "NotFound",
            format!("namespaces \"{namespace}\" not found"),
        ));
    }
    Ok(())
}

/// Whether an object names an owner that was deleted (created by a client
/// that had not seen the deletion yet): the garbage collector takes it.
pub fn owners_gone(state: &State, object: &Value) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str())
                .any(|uid| state.deleted_uids.contains(uid))
        })
}

/// Deletes an object: marks it while finalizers hold it, removes it
/// otherwise. None when there is no such object.
pub fn delete(
    state: &mut State,
    resource: &Resource,
    key: &(String, String),
) -> Option<(StatusCode, Value)> {
    let stored = state.get(resource, key)?.clone();
    let is_namespace = *resource == namespaces();
    if finalizers(&stored.object) > 0 || is_namespace {
        if deleting(&stored.object) {
            return Some((StatusCode::OK, stored.object));
        }
        let previous = stored.object.clone();
        let mut marked = stored;
        marked.object["metadata"]["deletionTimestamp"] = json!(NOW);
        if is_namespace {
            marked.object["status"]["phase"] = json!("Terminating");
        }
        let object = state.commit(resource, marked, Some(previous));
        return Some((StatusCode::OK, object));
    }
    state.remove(resource, key)?;
    let kind = resource.plural.clone();
    let (_, mut answer) = status(200, "", String::new());
    answer["details"] =
        json!({"name": key.1, "kind": kind, "uid": stored.object["metadata"]["uid"]});
    answer["status"] = json!("Success");
    Some((StatusCode::OK, answer))
}

/// Runs the cluster's own controllers until nothing changes.
pub fn settle(state: &mut State) {
    // Each round changes something or ends the loop; a bound keeps a bug in
    // this fake from hanging a test.
    for _ in 0..100 {
        let dirty = std::mem::take(&mut state.dirty);
        if dirty.deletions {
            collect_garbage(state);
            empty_namespaces(state);
        }
        if state.leader_worker_sets {
            for (namespace, name) in &dirty.workloads {
                reconcile_leader_worker_set(state, namespace, name);
            }
        }
        if state.dirty.is_empty() {
            return;
        }
    }
    panic!("the fake API's controllers did not settle in 100 rounds");
}

fn collect_garbage(state: &mut State) -> bool {
    let live: BTreeSet<String> = state
        .all()
        .filter_map(|(_, s)| s.object["metadata"]["uid"].as_str().map(str::to_owned))
        .collect();
    let orphans: Vec<(Resource, (String, String))> = state
        .all()
        .filter(|(_, s)| !deleting(&s.object))
        .filter(|(_, s)| {
            let owners: Vec<&str> = s.object["metadata"]["ownerReferences"]
                .as_array()
                .map(|refs| refs.iter().filter_map(|r| r["uid"].as_str()).collect())
                .unwrap_or_default();
            !owners.is_empty()
                && owners.iter().all(|uid| !live.contains(*uid))
                && owners.iter().any(|uid| state.deleted_uids.contains(*uid))
        })
        .map(|(r, s)| (r.clone(), super::key_of(&s.object)))
        .collect();
    for (resource, key) in &orphans {
        delete(state, resource, key);
    }
    !orphans.is_empty()
}

fn empty_namespaces(state: &mut State) -> bool {
    let terminating: Vec<String> = state
        .objects
        .get(&namespaces())
        .into_iter()
        .flat_map(|n| n.values())
        .filter(|n| deleting(&n.object))
        .filter_map(|n| n.object["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    let mut changed = false;
    for namespace in terminating {
        let content: Vec<(Resource, (String, String), bool)> = state
            .all()
            .filter(|(_, s)| s.object["metadata"]["namespace"].as_str() == Some(namespace.as_str()))
            .map(|(r, s)| (r.clone(), super::key_of(&s.object), deleting(&s.object)))
            .collect();
        if content.is_empty() {
            state.remove(&namespaces(), &(String::new(), namespace.clone()));
            state.deleted_namespaces.insert(namespace);
            changed = true;
            continue;
        }
        for (resource, key, _) in content.iter().filter(|(_, _, marked)| !marked) {
            delete(state, resource, key);
            changed = true;
        }
    }
    changed
}

/// A short, stable hash of a template, as LWS's template-revision-hash.
fn revision_hash(template: &Value) -> String {
    let text = template.to_string();
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{:08x}", hash & 0xffff_ffff)
}

/// Marks a pod ready (Running, every container ready) or not ready.
pub fn set_pod_ready(pod: &mut Value, ready: bool) {
    let condition = if ready { "True" } else { "False" };
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    json!({"name": c["name"], "image": c["image"], "ready": ready,
                    "restartCount": 0, "started": ready, "state": {"running": {"startedAt": NOW}}})
                })
                .collect()
        })
        .unwrap_or_default();
    pod["status"] = json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": condition, "lastTransitionTime": NOW},
            {"type": "ContainersReady", "status": condition, "lastTransitionTime": NOW}],
        "containerStatuses": containers});
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The pods of LeaderWorkerSet `name`: they are named `{name}-{group}` and
/// `{name}-{group}-{worker}`, so a range of names holds them all.
fn pods_of(state: &State, namespace: &str, name: &str) -> Vec<Value> {
    let Some(pods) = state.objects.get(&pods()) else {
        return Vec::new();
    };
    let prefix = format!("{name}-");
    pods.range((namespace.to_owned(), prefix.clone())..)
        .take_while(|((ns, pod), _)| ns == namespace && pod.starts_with(&prefix))
        .map(|(_, p)| &p.object)
        .filter(|p| p["metadata"]["labels"][LWS_NAME] == name)
        .cloned()
        .collect()
}

fn reconcile_leader_worker_set(state: &mut State, namespace: &str, name: &str) {
    let key = (namespace.to_owned(), name.to_owned());
    let Some(set) = state
        .get(&leader_worker_sets(), &key)
        .map(|s| s.object.clone())
    else {
        // Its pods are the garbage collector's.
        return;
    };
    let Some(uid) = set["metadata"]["uid"].as_str() else {
        return;
    };
    if deleting(&set) {
        return;
    }
    let groups = set["spec"]["replicas"].as_u64().unwrap_or(1);
    let template = &set["spec"]["leaderWorkerTemplate"];
    let size = template["size"].as_u64().unwrap_or(1).max(1);
    let hash = revision_hash(template);
    let existing = pods_of(state, namespace, name);

    // Pods past the replicas, or of an old template, go (a whole group at
    // once: LWS recreates a group as a unit).
    let stale_groups: BTreeSet<String> = existing
        .iter()
        .filter(|p| {
            p["metadata"]["labels"][format!("{LWS}/template-revision-hash")] != hash.as_str()
        })
        .filter_map(|p| {
            p["metadata"]["labels"][format!("{LWS}/group-index")]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    for pod in &existing {
        let labels = &pod["metadata"]["labels"];
        let group = labels[format!("{LWS}/group-index")]
            .as_str()
            .and_then(|g| g.parse::<u64>().ok());
        let stale = group.is_none_or(|g| g >= groups)
            || labels[format!("{LWS}/group-index")]
                .as_str()
                .is_some_and(|g| stale_groups.contains(g));
        if stale && !deleting(pod) {
            delete(state, &pods(), &super::key_of(pod));
        }
    }

    // Missing pods are created.
    for group in 0..groups {
        for worker in 0..size {
            let pod_name = if worker == 0 {
                format!("{name}-{group}")
            } else {
                format!("{name}-{group}-{worker}")
            };
            let key = (namespace.to_owned(), pod_name.clone());
            if state.get(&pods(), &key).is_some() {
                continue;
            }
            let source = if worker == 0 && !template["leaderTemplate"].is_null() {
                &template["leaderTemplate"]
            } else {
                &template["workerTemplate"]
            };
            let mut labels = source["metadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            labels[format!("{LWS}/name")] = json!(name);
            labels[format!("{LWS}/group-index")] = json!(group.to_string());
            labels[format!("{LWS}/worker-index")] = json!(worker.to_string());
            labels[format!("{LWS}/template-revision-hash")] = json!(hash);
            let mut annotations = source["metadata"]["annotations"].clone();
            if !annotations.is_object() {
                annotations = json!({});
            }
            annotations[format!("{LWS}/size")] = json!(size.to_string());
            let uid_of_pod = state.next_uid();
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": namespace, "uid": uid_of_pod,
                    "creationTimestamp": NOW, "labels": labels, "annotations": annotations,
                    "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                        "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
                "spec": source["spec"].clone(),
                "status": {"phase": "Pending"}});
            normalise::built_in("pods", &mut pod, &mut 0);
            if state.pods_start_ready {
                set_pod_ready(&mut pod, true);
            }
            state.commit(
                &pods(),
                Stored {
                    object: pod,
                    owners: Owners::default(),
                },
                None,
            );
        }
    }

    // Status: groups whose every pod is ready, and at the current template.
    let current: Vec<Value> = pods_of(state, namespace, name)
        .into_iter()
        .filter(|p| !deleting(p))
        .collect();
    let group_pods = |g: u64| {
        current.iter().filter(move |p| {
            p["metadata"]["labels"][format!("{LWS}/group-index")] == g.to_string().as_str()
        })
    };
    let ready = (0..groups)
        .filter(|g| group_pods(*g).count() as u64 == size && group_pods(*g).all(pod_ready))
        .count();
    let updated = (0..groups)
        .filter(|g| group_pods(*g).count() as u64 == size)
        .count();
    let next = json!({"replicas": groups, "readyReplicas": ready, "updatedReplicas": updated,
        "hpaPodSelector": format!("{LWS}/name={name},{LWS}/worker-index=0"),
        "conditions": [{"type": "Available", "status": if ready as u64 == groups { "True" } else { "False" },
            "reason": "AllGroupsReady", "message": "", "lastTransitionTime": NOW}]});
    if let Some(stored) = state.get(&leader_worker_sets(), &key).cloned()
        && stored.object["status"] != next
    {
        let previous = stored.object.clone();
        let mut stored = stored;
        stored.object["status"] = next;
        state.commit(&leader_worker_sets(), stored, Some(previous));
    }
}
