//! One request to the API, as a log records it. Both worlds that log
//! requests produce it: the in-memory API server
//! ([`crate::fake_api::FakeApi::take_calls`]) and the real API server's
//! audit log ([`crate::audit::AuditLog`]), so a check on what a client sent
//! reads the same fields in either world.
//!
//! A request has two names, and both are kept: the HTTP one a client sends
//! (`PATCH /apis/apps/v1/namespaces/a/statefulsets/b/status`, what the
//! in-memory API server's tests compare, [`Request::line`]) and the
//! Kubernetes one the audit log and RBAC use (`patch statefulsets/status
//! a/b`, [`Request::summary`]). Each log records one; the other is derived.

use std::sync::Arc;

use serde_json::Value;

use crate::control_plane::TANDEM_USER;

/// One request a client sent, and how it was answered.
#[derive(Clone, Debug)]
pub struct Request {
    /// Who sent it: the user of its client certificate, or the bearer token
    /// the in-memory API server takes as the user.
    pub user: String,
    /// The Kubernetes verb: get, list, watch, create, update, patch,
    /// delete or deletecollection.
    pub verb: String,
    /// The HTTP method.
    pub method: String,
    /// The URL's path, `/api/v1/...` or `/apis/{group}/{version}/...`.
    pub path: String,
    /// The URL's query, without the `?`.
    pub query: String,
    /// The resource's plural, `""` for a path outside the resource API.
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The answer's HTTP status.
    pub code: u16,
    /// The stored object's resourceVersion after the request, when the
    /// answer carried the object.
    pub resource_version: Option<String>,
    /// What was sent and what was answered, shared: a request is cloned
    /// for every check that reads it, its bodies are not.
    pub request: Option<Arc<Value>>,
    pub response: Option<Arc<Value>>,
    /// When it was answered, RFC 3339.
    pub time: String,
    /// The reason given for refusing it, if it was refused.
    pub message: String,
}

/// Where a path points: the resource's API (`/api/v1` or
/// `/apis/{group}/{version}`), its plural, and the object and subresource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    pub prefix: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl Address {
    /// Parses `/api/v1/...` and `/apis/{group}/{version}/...` paths as the
    /// API server routes them; `None` for any other path.
    pub fn of(path: &str) -> Option<Address> {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let (prefix, rest) = match parts.as_slice() {
            ["api", version, rest @ ..] => (format!("/api/{version}"), rest),
            ["apis", group, version, rest @ ..] => (format!("/apis/{group}/{version}"), rest),
            _ => return None,
        };
        let owned = |s: &&str| s.to_string();
        let (resource, namespace, name, subresource) = match rest {
            // The namespace object itself and its subresources.
            ["namespaces", name, sub @ ..]
                if sub.len() <= 1
                    && sub
                        .first()
                        .is_none_or(|s| *s == "status" || *s == "finalize") =>
            {
                (
                    "namespaces",
                    None,
                    Some(name.to_string()),
                    sub.first().map(owned),
                )
            }
            ["namespaces", namespace, plural, tail @ ..] if tail.len() <= 2 => (
                *plural,
                Some(namespace.to_string()),
                tail.first().map(owned),
                tail.get(1).map(owned),
            ),
            [plural, tail @ ..] if tail.len() <= 2 => (
                *plural,
                None,
                tail.first().map(owned),
                tail.get(1).map(owned),
            ),
            _ => return None,
        };
        Some(Address {
            prefix,
            resource: resource.to_owned(),
            namespace,
            name,
            subresource,
        })
    }
}

impl Request {
    /// A request as the in-memory API server receives it, before it is
    /// answered ([`Request::answered`] adds the answer). Its verb is the
    /// one the API server's request-info resolver gives the method and
    /// path: a GET of a collection is a list, of an object a get, with
    /// `watch` a watch; a DELETE of a collection is a deletecollection.
    pub fn received(
        user: &str,
        method: &str,
        path: &str,
        query: &str,
        body: Option<Value>,
    ) -> Request {
        let address = Address::of(path);
        let named = address.as_ref().is_some_and(|a| a.name.is_some());
        let verb = match method {
            "GET" if query_flag(query, "watch") => "watch",
            "GET" if named => "get",
            "GET" => "list",
            "POST" => "create",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" if named => "delete",
            "DELETE" => "deletecollection",
            other => other,
        };
        let (resource, subresource, namespace, name) = match address {
            Some(a) => (a.resource, a.subresource, a.namespace, a.name),
            None => (String::new(), None, None, None),
        };
        Request {
            user: user.to_owned(),
            verb: verb.to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            resource,
            subresource,
            namespace,
            name,
            code: 0,
            resource_version: None,
            request: body.map(Arc::new),
            response: None,
            time: String::new(),
            message: String::new(),
        }
    }

    /// This request with its answer: the status, the body, and the time.
    pub fn answered(&mut self, code: u16, body: &Value, time: String) {
        self.code = code;
        self.resource_version = body["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned);
        if code >= 400 {
            self.message = body["message"].as_str().unwrap_or_default().to_owned();
        }
        self.response = Some(Arc::new(body.clone()));
        self.time = time;
    }

    /// The request an audit event records: any verb (the audit policy logs
    /// every user's writes and Tandem's reads and watches too), but for
    /// Leases and Events, which only the RBAC check reads.
    pub fn audited(event: &Value) -> Option<Request> {
        let verb = event["verb"].as_str()?;
        let object = &event["objectRef"];
        // Tandem's Leases and Events are logged only for the RBAC check
        // (tests/harness/src/rbac.rs); the scenarios' invariants never saw them.
        if matches!(object["resource"].as_str(), Some("leases" | "events")) {
            return None;
        }
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let uri = event["requestURI"].as_str()?;
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        Some(Request {
            user: event["user"]["username"].as_str()?.to_owned(),
            verb: verb.to_owned(),
            method: method_of(verb).to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            resource: object["resource"].as_str()?.to_owned(),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            code: event["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())?,
            resource_version: text(&event["responseObject"]["metadata"]["resourceVersion"]),
            request: event.get("requestObject").cloned().map(Arc::new),
            response: event.get("responseObject").cloned().map(Arc::new),
            time: event["stageTimestamp"].as_str()?.to_owned(),
            message: event["responseStatus"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    }

    /// `METHOD path`: the HTTP form, what the in-memory API server's tests
    /// compare.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// `user verb resource[/subresource] namespace/name -> code`: the
    /// Kubernetes form, what a failed check on the real API server shows.
    pub fn summary(&self) -> String {
        format!(
            "{} {} {}{} {}/{} -> {}",
            self.user,
            self.verb,
            self.resource,
            self.subresource
                .as_ref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            self.namespace.as_deref().unwrap_or("-"),
            self.name.as_deref().unwrap_or("-"),
            self.code
        )
    }

    /// [`Request::summary`] with what was sent, cut at 1500 characters.
    pub fn summary_with_body(&self) -> String {
        let sent = self
            .request
            .as_ref()
            .map(|body| body.to_string())
            .unwrap_or_default();
        let cut: String = sent.chars().take(1500).collect();
        format!("{}: {cut}", self.summary())
    }

    /// What was sent, if anything was.
    pub fn body(&self) -> Option<&Value> {
        self.request.as_deref()
    }

    /// A request that may change what is stored: a write verb, and not a
    /// dry run.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) && !is_dry_run(&self.query)
    }

    pub fn is_watch(&self) -> bool {
        self.verb == "watch"
    }

    /// Refused by RBAC (not, say, for a namespace being deleted, which the
    /// API server also answers with 403).
    pub fn forbidden_by_rbac(&self) -> bool {
        self.code == 403 && self.message.contains(" cannot ")
    }

    /// Refused by Tandem's own pod-patch policy
    /// (`manifests/base/pod-patches.yaml`).
    pub fn refused_by_pod_patch_policy(&self) -> bool {
        self.code >= 400
            && self
                .message
                .contains("ValidatingAdmissionPolicy 'tandem-pod-patches'")
    }

    pub fn by_tandem(&self) -> bool {
        self.user == TANDEM_USER
    }
}

/// The HTTP method of a Kubernetes verb.
fn method_of(verb: &str) -> &'static str {
    match verb {
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => "GET",
    }
}

/// A query parameter's value, percent-decoded.
pub fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

/// A boolean query parameter that is set: `true` or `1`.
pub fn query_flag(query: &str, key: &str) -> bool {
    matches!(query_param(query, key).as_deref(), Some("true" | "1"))
}

/// `dryRun=All`: the API server admits the request and stores nothing.
pub fn is_dry_run(query: &str) -> bool {
    query_param(query, "dryRun").as_deref() == Some("All")
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
