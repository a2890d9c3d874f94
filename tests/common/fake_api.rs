//! An in-memory Kubernetes API server behind kube-rs's `tower-test` mock
//! service: enough of lists (with label selectors), gets, server-side apply,
//! merge and JSON patches, the `/scale` subresource, deletes and creates for
//! reconcilers to run against, with a log of every request so tests can
//! assert exactly what was written, and injected 409 Conflicts for the next
//! writes to a path.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// One request the reconciler sent.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    pub body: Option<Value>,
}

impl Call {
    /// `METHOD path`, the form tests compare.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }
}

#[derive(Default)]
struct State {
    /// Collection path (`/apis/g/v/namespaces/ns/plural`) -> name -> object.
    objects: BTreeMap<String, BTreeMap<String, Value>>,
    /// Plurals whose API is not installed: every request gets 404.
    missing: BTreeSet<String>,
    /// Plurals whose writes are refused, with the status code (as an
    /// admission webhook or missing RBAC would).
    refused: BTreeMap<String, u16>,
    calls: Vec<Call>,
    version: u64,
    /// What each field manager last server-side applied, by collection path,
    /// name and manager: fields it applied before and leaves out now are
    /// removed, everyone else's stay.
    applied: BTreeMap<(String, String, String), Value>,
    /// Writes whose path ends with the text answer 409 Conflict, as many
    /// times as the count says.
    conflicts: Vec<(String, usize)>,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

fn plural(kind: &str) -> String {
    match kind {
        "Pod" | "Service" | "Deployment" | "ConfigMap" | "Role" | "RoleBinding"
        | "ServiceAccount" | "Event" | "LeaderWorkerSet" | "PodGroup" | "InferencePool"
        | "HTTPRoute" | "InferenceService" | "ScaleView" | "Gateway" | "StatefulSet"
        | "RoleBasedGroup" | "ControllerRevision" | "Lease" => {
            format!("{}s", kind.to_lowercase())
        }
        "ResourceScalingGroup" => "resourcescalinggroups".to_owned(),
        other => panic!("the fake API does not know the plural of {other}"),
    }
}

/// The collection path of an object.
fn collection_of(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let resource = plural(object["kind"].as_str().expect("kind"));
    if api_version.contains('/') {
        format!("/apis/{api_version}/namespaces/{namespace}/{resource}")
    } else {
        format!("/api/{api_version}/namespaces/{namespace}/{resource}")
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

fn matches_selector(object: &Value, selector: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    selector
        .split(',')
        .filter(|s| !s.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => labels[k].as_str() == Some(v),
            None => !labels[term].is_null(),
        })
}

/// Removes from `object` what `before` (a manager's last applied
/// configuration) had and `now` (its new one) leaves out; lists and scalars
/// are atomic.
fn drop_unapplied(object: &mut Value, before: &Value, now: &Value) {
    let (Some(object), Some(before)) = (object.as_object_mut(), before.as_object()) else {
        return;
    };
    for (key, was) in before {
        match now.get(key) {
            None => {
                object.remove(key);
            }
            Some(is) => {
                if let Some(child) = object.get_mut(key) {
                    drop_unapplied(child, was, is);
                }
            }
        }
    }
}

/// Merges an applied configuration into an object: maps field by field,
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

fn status(code: u16, reason: &str, message: String) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": if code < 300 { "Success" } else { "Failure" },
        "code": code, "reason": reason, "message": message});
    respond(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &body,
    )
}

fn respond(code: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// Where a kind's `/scale` subresource keeps its replicas, by plural, and
/// what an object without them reports: the workloads' replicas were
/// defaulted to 1 when the API server stored them; a custom resource's
/// missing field reads as 0.
fn scale_field(plural: &str) -> (&'static str, i64) {
    match plural {
        "deployments" | "statefulsets" | "leaderworkersets" => ("/spec/replicas", 1),
        "resourcescalinggroups" => ("/spec/scalingStrategy/groupConfig/replicas", 0),
        _ => ("/spec/replicas", 0),
    }
}

/// The autoscaling/v1 Scale of an object (`spec.replicas` omitted when 0,
/// as the API server's `omitempty` does).
fn scale_of(object: &Value, plural: &str) -> Value {
    let (path, unset) = scale_field(plural);
    let replicas = object
        .pointer(path)
        .and_then(Value::as_i64)
        .unwrap_or(unset);
    let meta = &object["metadata"];
    let mut scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"]},
        "spec": {},
        "status": {"replicas": object["status"]["replicas"].as_i64().unwrap_or(0)}});
    if replicas != 0 {
        scale["spec"]["replicas"] = json!(replicas);
    }
    scale
}

/// A change of the spec through the main resource bumps the generation, as
/// the API server does for custom resources; status writes never do.
fn bump_generation(object: &mut Value, spec_before: &Value, sub: Option<&str>) {
    if sub.is_none() && object["spec"] != *spec_before {
        let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
        object["metadata"]["generation"] = json!(generation + 1);
    }
}

impl FakeApi {
    pub fn new() -> FakeApi {
        FakeApi::default()
    }

    /// A kube client whose every request this fake answers.
    pub fn client(&self) -> kube::Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let response = fake.answer(request).await;
                send.send_response(response);
            }
        });
        kube::Client::new(service, "default")
    }

    /// Stores an object as the API server would (uid, resourceVersion, generation).
    pub fn insert(&self, mut object: Value) -> Value {
        let mut state = self.state.lock().unwrap();
        state.version += 1;
        let version = state.version;
        let name = object["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        let meta = &mut object["metadata"];
        if meta["namespace"].is_null() {
            meta["namespace"] = json!("default");
        }
        if meta["uid"].is_null() {
            meta["uid"] = json!(format!("uid-{name}"));
        }
        if meta["generation"].is_null() {
            meta["generation"] = json!(1);
        }
        meta["resourceVersion"] = json!(version.to_string());
        state
            .objects
            .entry(collection_of(&object))
            .or_default()
            .insert(name, object.clone());
        object
    }

    /// Plays LeaderWorkerSet's controller for every LeaderWorkerSet in
    /// `namespace`: each has its `size` pods (leader and workers) at the
    /// revision and replica index of its pod template, ready when `ready`
    /// says so for the LeaderWorkerSet; pods of another revision or of a
    /// LeaderWorkerSet that is gone are removed (the old pods of a replaced
    /// replica). Returns the pods' names.
    pub fn run_leader_worker_sets(
        &self,
        namespace: &str,
        ready: impl Fn(&Value) -> bool,
    ) -> Vec<String> {
        const LWS: &str = "leaderworkerset.x-k8s.io/v1";
        let sets = self.list(LWS, "LeaderWorkerSet", namespace);
        let mut wanted = BTreeMap::new();
        for lws in &sets {
            let name = lws["metadata"]["name"].as_str().expect("name");
            let group = &lws["spec"]["leaderWorkerTemplate"];
            let size = group["size"].as_u64().unwrap_or(1);
            let is_ready = ready(lws);
            for worker in 0..size {
                let template = if worker == 0 && !group["leaderTemplate"].is_null() {
                    &group["leaderTemplate"]
                } else {
                    &group["workerTemplate"]
                };
                let mut labels = template["metadata"]["labels"].clone();
                labels["leaderworkerset.sigs.k8s.io/worker-index"] = json!(worker.to_string());
                let pod = format!("{name}-0-{worker}");
                wanted.insert(
                    pod.clone(),
                    json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": pod, "namespace": namespace, "labels": labels},
                        "spec": {"nodeName": format!("gpu-{worker}"), "containers": template["spec"]["containers"]},
                        "status": {"phase": "Running", "conditions": [
                            {"type": "Ready", "status": if is_ready { "True" } else { "False" }}]}}),
                );
            }
        }
        for pod in self.list("v1", "Pod", namespace) {
            let name = pod["metadata"]["name"].as_str().expect("name");
            let same = wanted.get(name).is_some_and(|w| {
                w["metadata"]["labels"] == pod["metadata"]["labels"] && w["status"] == pod["status"]
            });
            if same {
                wanted.remove(name);
            } else if !wanted.contains_key(name) {
                self.remove("v1", "Pod", namespace, name);
            }
        }
        let names = wanted.keys().cloned().collect();
        for pod in wanted.into_values() {
            self.insert(pod);
        }
        names
    }

    /// Removes a stored object at once, finalizers or not (as if they had
    /// been stripped by hand, or the controller crashed before running them).
    pub fn remove(&self, api_version: &str, kind: &str, namespace: &str, name: &str) {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"namespace": namespace, "name": name}});
        let mut state = self.state.lock().unwrap();
        let removed = state
            .objects
            .get_mut(&collection_of(&probe))
            .and_then(|c| c.remove(name));
        assert!(
            removed.is_some(),
            "{kind} {namespace}/{name} to remove exists"
        );
    }

    /// Marks an API as not installed (its CRD is missing).
    pub fn uninstall(&self, plural: &str) {
        self.state.lock().unwrap().missing.insert(plural.to_owned());
    }

    /// Refuses every write to a plural with `code` from now on.
    pub fn refuse_writes(&self, plural: &str, code: u16) {
        self.state
            .lock()
            .unwrap()
            .refused
            .insert(plural.to_owned(), code);
    }

    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"namespace": namespace, "name": name}});
        let state = self.state.lock().unwrap();
        state
            .objects
            .get(&collection_of(&probe))?
            .get(name)
            .cloned()
    }

    /// Every stored object of a kind in a namespace, by name.
    pub fn list(&self, api_version: &str, kind: &str, namespace: &str) -> Vec<Value> {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"namespace": namespace, "name": "x"}});
        let state = self.state.lock().unwrap();
        state
            .objects
            .get(&collection_of(&probe))
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Changes a stored object in place (as another actor would).
    pub fn edit(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) {
        let mut object = self
            .get(api_version, kind, namespace, name)
            .expect("object to edit exists");
        change(&mut object);
        self.insert(object);
    }

    /// The Events written so far in namespace default, as sorted `Reason: note` lines.
    pub fn event_notes(&self) -> Vec<String> {
        self.event_notes_in("default")
    }

    /// The Events written so far in `namespace`, as sorted `Reason: note` lines.
    pub fn event_notes_in(&self, namespace: &str) -> Vec<String> {
        let mut notes: Vec<String> = self
            .list("events.k8s.io/v1", "Event", namespace)
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e["reason"].as_str().unwrap_or_default(),
                    e["note"].as_str().unwrap_or_default()
                )
            })
            .collect();
        notes.sort();
        notes
    }

    /// A reconcile context whose client this fake answers, with the clock fixed
    /// at 2026-11-21T10:00:00Z.
    pub fn context(&self) -> std::sync::Arc<tandem::reconcile::Context> {
        self.context_with(|_| {})
    }

    /// [`FakeApi::context`], changed by `adjust` (e.g. a shorter conflict backoff).
    pub fn context_with(
        &self,
        adjust: impl FnOnce(&mut tandem::reconcile::Context),
    ) -> std::sync::Arc<tandem::reconcile::Context> {
        let mut ctx = tandem::reconcile::Context::new(self.client(), Default::default());
        ctx.now = std::sync::Arc::new(|| {
            "2026-11-21T10:00:00Z"
                .parse()
                .expect("a fixed RFC 3339 time")
        });
        adjust(&mut ctx);
        std::sync::Arc::new(ctx)
    }

    /// Makes the next `count` writes (any method but GET) whose path ends
    /// with `path` answer 409 Conflict without changing anything, as the API
    /// server does when another writer got there first. `""` matches every
    /// path.
    pub fn conflict_next_writes(&self, path: &str, count: usize) {
        self.state
            .lock()
            .unwrap()
            .conflicts
            .push((path.to_owned(), count));
    }

    /// Every request since the last `take_calls`.
    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.state.lock().unwrap().calls)
    }

    /// The writes since the last `take_calls`, as `METHOD path` lines.
    pub fn take_writes(&self) -> Vec<String> {
        self.take_calls()
            .iter()
            .filter(|c| c.is_write())
            .map(Call::line)
            .collect()
    }

    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let method = request.method().as_str().to_owned();
        let path = request.uri().path().to_owned();
        // Server-side apply is a PATCH of this content type; merge and JSON
        // patches (with or without a fieldManager) are others.
        let apply = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/apply-patch"));
        let query = request.uri().query().unwrap_or_default().to_owned();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        let body: Option<Value> = if bytes.is_empty() {
            None
        } else {
            serde_json::from_slice(&bytes).ok()
        };
        let mut state = self.state.lock().unwrap();
        state.calls.push(Call {
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
        });
        if method != "GET"
            && let Some(conflict) = state
                .conflicts
                .iter_mut()
                .find(|(suffix, left)| *left > 0 && path.ends_with(suffix.as_str()))
        {
            conflict.1 -= 1;
            return status(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {path}: the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }

        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        // api/v1/namespaces/ns/plural[/name[/sub]] or apis/g/v/namespaces/ns/plural[/name[/sub]]
        let (prefix_len, api_version) = match parts.first() {
            Some(&"api") => (2, parts.get(1).map(|v| v.to_string())),
            Some(&"apis") => (
                3,
                parts
                    .get(1)
                    .zip(parts.get(2))
                    .map(|(g, v)| format!("{g}/{v}")),
            ),
            _ => return status(404, "NotFound", format!("no route {path}")),
        };
        let Some(api_version) = api_version else {
            return status(404, "NotFound", path);
        };
        let rest = &parts[prefix_len..];
        let (collection, name, sub) = match rest {
            ["namespaces", ns, plural, tail @ ..] => {
                let base = parts[..prefix_len].join("/");
                (
                    format!("/{base}/namespaces/{ns}/{plural}"),
                    tail.first().map(|s| s.to_string()),
                    tail.get(1).map(|s| s.to_string()),
                )
            }
            _ => {
                return status(
                    404,
                    "NotFound",
                    format!("cluster-wide requests are not served: {path}"),
                );
            }
        };
        let plural_name = collection.rsplit('/').next().unwrap_or_default().to_owned();
        if state.missing.contains(&plural_name) {
            return status(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({plural_name})"),
            );
        }
        if let Some(&code) = state.refused.get(&plural_name)
            && method != "GET"
        {
            return status(
                code,
                "Forbidden",
                format!("{method} {plural_name} is refused by this test"),
            );
        }
        state.version += 1;
        let version = state.version.to_string();
        let state = &mut *state;
        let applied_before = &mut state.applied;
        let store = state.objects.entry(collection.clone()).or_default();
        match (method.as_str(), name, sub.as_deref()) {
            ("GET", None, _) => {
                let selector = query_param(&query, "labelSelector").unwrap_or_default();
                let items: Vec<Value> = store
                    .values()
                    .filter(|o| matches_selector(o, &selector))
                    .cloned()
                    .collect();
                respond(
                    StatusCode::OK,
                    &json!({"apiVersion": api_version, "kind": "List", "metadata": {"resourceVersion": version}, "items": items}),
                )
            }
            ("GET", Some(name), Some("scale")) => match store.get(&name) {
                Some(object) => respond(StatusCode::OK, &scale_of(object, &plural_name)),
                None => status(
                    404,
                    "NotFound",
                    format!("{plural_name} \"{name}\" not found"),
                ),
            },
            ("PATCH", Some(name), Some("scale")) => {
                // A merge patch of the Scale: its spec.replicas lands in the
                // object's replicas field, which is a spec change.
                let Some(object) = store.get_mut(&name) else {
                    return status(
                        404,
                        "NotFound",
                        format!("{plural_name} \"{name}\" not found"),
                    );
                };
                let patch = body.unwrap_or_default();
                let mut scale = scale_of(object, &plural_name);
                json_patch::merge(&mut scale, &patch);
                let replicas = scale["spec"]["replicas"].as_i64().unwrap_or(0);
                let spec_before = object["spec"].clone();
                let (path, _) = scale_field(&plural_name);
                let mut merge = json!(replicas);
                for field in path.rsplit('/').filter(|f| !f.is_empty()) {
                    merge = json!({ field: merge });
                }
                json_patch::merge(object, &merge);
                bump_generation(object, &spec_before, None);
                object["metadata"]["resourceVersion"] = json!(version);
                respond(StatusCode::OK, &scale_of(object, &plural_name))
            }
            ("GET", Some(name), _) => match store.get(&name) {
                Some(object) => respond(StatusCode::OK, object),
                None => status(
                    404,
                    "NotFound",
                    format!("{plural_name} \"{name}\" not found"),
                ),
            },
            ("PATCH", Some(name), None) if apply && body.is_some() => {
                // Server-side apply: what the manager applied before and
                // leaves out now is removed, the rest of the object (other
                // managers' fields) stays and the applied fields are merged
                // in; server fields and status stay.
                let manager = query_param(&query, "fieldManager").unwrap_or_default();
                let configuration = body.unwrap_or_default();
                let previous = store.get(&name).cloned();
                let key = (collection.clone(), name.clone(), manager);
                let mut applied = match &previous {
                    Some(previous) => {
                        let mut merged = previous.clone();
                        if let Some(before) = applied_before.get(&key) {
                            drop_unapplied(&mut merged, before, &configuration);
                        }
                        merge_applied(&mut merged, &configuration);
                        merged
                    }
                    None => configuration.clone(),
                };
                applied_before.insert(key, configuration);
                let spec_changed = previous
                    .as_ref()
                    .map(|p| p["spec"] != applied["spec"])
                    .unwrap_or(true);
                let meta = &mut applied["metadata"];
                let old_meta = previous
                    .as_ref()
                    .map(|p| p["metadata"].clone())
                    .unwrap_or_default();
                meta["uid"] = old_meta
                    .get("uid")
                    .cloned()
                    .unwrap_or(json!(format!("uid-{name}")));
                meta["creationTimestamp"] = old_meta
                    .get("creationTimestamp")
                    .cloned()
                    .unwrap_or(json!("2026-11-21T00:00:00Z"));
                let generation = old_meta
                    .get("generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                meta["generation"] = json!(if spec_changed {
                    generation + 1
                } else {
                    generation
                });
                meta["resourceVersion"] = json!(version);
                if let Some(status) = previous.as_ref().and_then(|p| p.get("status")) {
                    applied["status"] = status.clone();
                }
                store.insert(name, applied.clone());
                respond(StatusCode::OK, &applied)
            }
            ("PATCH", Some(name), _) => {
                let Some(object) = store.get_mut(&name) else {
                    return status(
                        404,
                        "NotFound",
                        format!("{plural_name} \"{name}\" not found"),
                    );
                };
                let patch = body.unwrap_or_default();
                let spec_before = object["spec"].clone();
                // A JSON Patch (an array of operations) is applied as a whole
                // or not at all, like the API server does; a failing `test`
                // is a 422.
                if patch.is_array() {
                    let ops: json_patch::Patch = match serde_json::from_value(patch) {
                        Ok(ops) => ops,
                        Err(e) => return status(400, "BadRequest", e.to_string()),
                    };
                    let mut patched = object.clone();
                    if let Err(e) = json_patch::patch(&mut patched, &ops) {
                        return status(422, "Invalid", format!("the JSON patch failed: {e}"));
                    }
                    *object = patched;
                    bump_generation(object, &spec_before, sub.as_deref());
                    object["metadata"]["resourceVersion"] = json!(version);
                    return respond(StatusCode::OK, object);
                }
                if let Some(expected) = patch["metadata"]["resourceVersion"].as_str()
                    && object["metadata"]["resourceVersion"].as_str() != Some(expected)
                {
                    return status(
                        409,
                        "Conflict",
                        format!(
                            "the object has been modified; resourceVersion {expected} is stale"
                        ),
                    );
                }
                json_patch::merge(object, &patch);
                bump_generation(object, &spec_before, sub.as_deref());
                object["metadata"]["resourceVersion"] = json!(version);
                let released = !object["metadata"]["deletionTimestamp"].is_null()
                    && object["metadata"]["finalizers"]
                        .as_array()
                        .is_none_or(Vec::is_empty);
                let answer = respond(StatusCode::OK, object);
                if released {
                    // The last finalizer is gone: the object goes away.
                    store.remove(&name);
                }
                answer
            }
            ("POST", None, _) => {
                let mut object = body.unwrap_or_default();
                let name = object["metadata"]["name"]
                    .as_str()
                    .unwrap_or("created")
                    .to_owned();
                if store.contains_key(&name) {
                    return status(
                        409,
                        "AlreadyExists",
                        format!("{plural_name} \"{name}\" already exists"),
                    );
                }
                object["metadata"]["resourceVersion"] = json!(version);
                store.insert(name, object.clone());
                respond(StatusCode::CREATED, &object)
            }
            ("DELETE", Some(name), _)
                if store.get(&name).is_some_and(|o| {
                    o["metadata"]["finalizers"]
                        .as_array()
                        .is_some_and(|f| !f.is_empty())
                }) =>
            {
                // Finalizers hold the object: it is only marked as deleting.
                let object = store.get_mut(&name).expect("checked above");
                object["metadata"]["deletionTimestamp"] = json!("2026-11-21T00:00:00Z");
                object["metadata"]["resourceVersion"] = json!(version);
                respond(StatusCode::OK, object)
            }
            ("DELETE", Some(name), _) => match store.remove(&name) {
                Some(_) => status(200, "Deleted", format!("{plural_name} \"{name}\" deleted")),
                None => status(
                    404,
                    "NotFound",
                    format!("{plural_name} \"{name}\" not found"),
                ),
            },
            _ => status(405, "MethodNotAllowed", format!("{method} {path}?{query}")),
        }
    }
}
