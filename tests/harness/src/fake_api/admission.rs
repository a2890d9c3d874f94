//! Admission as the API server runs it: every create and update of a
//! resource matched by a stored Mutating- or ValidatingWebhookConfiguration
//! is sent, as an AdmissionReview v1 over HTTPS, to each matching webhook
//! (mutating first, their JSON Patches applied in turn, then validating);
//! a denial reaches the client worded as the API server words it
//! (`admission webhook "NAME" denied the request: MESSAGE`, the webhook's
//! code if it is 400 or more, else 400: `webhookerrors.ToStatusErr` in
//! k8s.io/apiserver), and a webhook that cannot be reached fails the request
//! (`failurePolicy: Fail`, 500 `failed calling webhook`) or is skipped
//! (`Ignore`). A write to `/scale` is reviewed as an `autoscaling/v1` Scale
//! with `subResource: scale`, and only by webhooks whose rules name
//! `PLURAL/scale`; `/status` writes by webhooks naming `PLURAL/status`.
//!
//! Rules match on apiGroups, apiVersions, operations and resources (with
//! `*`); namespace and object selectors and match conditions are not
//! implemented (Tandem's configurations use none). The webhook must be given
//! by `clientConfig.url` (a test points it at the `tandem serve` under
//! test), with its `caBundle`.

use std::time::Duration;

use base64::Engine;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};

use super::{Incoming, Planned, Resource, State, scale_of, status};

/// One webhook a write must pass.
#[derive(Clone, Debug)]
pub struct Hook {
    pub name: String,
    pub url: String,
    pub ca_bundle: Option<String>,
    pub fail_closed: bool,
    pub timeout: Duration,
    pub mutating: bool,
}

fn configurations(kind: &str) -> Resource {
    Resource {
        prefix: "/apis/admissionregistration.k8s.io/v1".into(),
        plural: kind.into(),
    }
}

fn names(list: &Value, wanted: &str) -> bool {
    list.as_array()
        .is_some_and(|items| items.iter().any(|i| i == "*" || i == wanted))
}

/// The webhooks that review `planned`, mutating ones first.
pub fn matching(state: &State, planned: &Planned) -> Vec<Hook> {
    let api_version = planned.resource.api_version();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let resource = match &planned.sub {
        Some(sub) => format!("{}/{sub}", planned.resource.plural),
        None => planned.resource.plural.clone(),
    };
    let operation = planned.operation();
    let mut hooks = Vec::new();
    for (plural, mutating) in [
        ("mutatingwebhookconfigurations", true),
        ("validatingwebhookconfigurations", false),
    ] {
        let Some(stored) = state.objects.get(&configurations(plural)) else {
            continue;
        };
        for configuration in stored.values() {
            for webhook in configuration.object["webhooks"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let applies = webhook["rules"].as_array().is_some_and(|rules| {
                    rules.iter().any(|rule| {
                        names(&rule["apiGroups"], group)
                            && names(&rule["apiVersions"], version)
                            && names(&rule["operations"], operation)
                            && (names(&rule["resources"], &resource)
                                || (planned.sub.is_some() && names(&rule["resources"], "*/*")))
                    })
                });
                if !applies {
                    continue;
                }
                hooks.push(Hook {
                    name: webhook["name"].as_str().unwrap_or_default().to_owned(),
                    url: webhook["clientConfig"]["url"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    ca_bundle: webhook["clientConfig"]["caBundle"].as_str().and_then(|b| {
                        base64::engine::general_purpose::STANDARD
                            .decode(b)
                            .ok()
                            .and_then(|pem| String::from_utf8(pem).ok())
                    }),
                    fail_closed: webhook["failurePolicy"].as_str() != Some("Ignore"),
                    timeout: Duration::from_secs(webhook["timeoutSeconds"].as_u64().unwrap_or(10)),
                    mutating,
                });
            }
        }
    }
    hooks
}

/// The AdmissionReview the API server sends for `planned`.
fn review(planned: &Planned, request: &Incoming, uid: &str) -> Value {
    let api_version = planned.resource.api_version();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let scale = planned.sub.as_deref() == Some("scale");
    let (object, old, kind) = if scale {
        (
            scale_of(&planned.stored.object, &planned.resource.plural),
            planned
                .before
                .as_ref()
                .map(|b| scale_of(b, &planned.resource.plural)),
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}),
        )
    } else {
        (
            planned.stored.object.clone(),
            planned.before.clone(),
            json!({"group": group, "version": version, "kind": planned.stored.object["kind"]}),
        )
    };
    let resource = json!({"group": group, "version": version, "resource": planned.resource.plural});
    let mut body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": kind, "resource": resource, "requestKind": kind,
            "requestResource": resource, "name": planned.key.1, "operation": planned.operation(),
            "userInfo": {"username": request.user, "groups": ["system:authenticated"]},
            "object": object, "oldObject": old, "dryRun": false}});
    if !planned.key.0.is_empty() {
        body["request"]["namespace"] = json!(planned.key.0);
    }
    if let Some(sub) = &planned.sub {
        body["request"]["subResource"] = json!(sub);
        body["request"]["requestSubResource"] = json!(sub);
    }
    body
}

/// Sends `planned` through `hooks`; the planned write as mutated, or the
/// refusal the client gets.
pub async fn admit(
    hooks: &[Hook],
    mut planned: Planned,
    request: &Incoming,
) -> Result<Planned, (StatusCode, Value)> {
    if planned.no_op {
        return Ok(planned);
    }
    for (index, hook) in hooks.iter().enumerate() {
        let uid = format!("review-{}-{index}", planned.key.1);
        let sent = review(&planned, request, &uid);
        let answer = match call(hook, &sent).await {
            Ok(answer) => answer,
            Err(reason) if hook.fail_closed => {
                return Err(status(
                    500,
                    "InternalError",
                    format!(
                        "Internal error occurred: failed calling webhook \"{}\": {reason}",
                        hook.name
                    ),
                ));
            }
            Err(_) => continue,
        };
        let response = &answer["response"];
        if response["allowed"] != true {
            return Err(denial(&hook.name, &response["status"]));
        }
        if hook.mutating
            && planned.sub.is_none()
            && let Some(patch) = response["patch"].as_str()
        {
            let ops = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<json_patch::Patch>(&bytes).ok());
            let applied = ops.and_then(|ops| {
                let mut object = planned.stored.object.clone();
                json_patch::patch(&mut object, &ops).ok().map(|()| object)
            });
            match applied {
                Some(object) => planned.stored.object = object,
                None => {
                    return Err(status(
                        500,
                        "InternalError",
                        format!(
                            "Internal error occurred: the patch of webhook \"{}\" does not apply",
                            hook.name
                        ),
                    ));
                }
            }
        }
    }
    Ok(planned)
}

/// The error a denial becomes, as `webhookerrors.ToStatusErr` makes it.
fn denial(webhook: &str, result: &Value) -> (StatusCode, Value) {
    let denied_by = format!("admission webhook \"{webhook}\" denied the request");
    let code = result["code"].as_u64().unwrap_or(0).max(400);
    let message = match (result["message"].as_str(), result["reason"].as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{denied_by}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{denied_by}: {r}"),
        _ => format!("{denied_by} without explanation"),
    };
    let (code, mut body) = status(
        u16::try_from(code).unwrap_or(400),
        result["reason"].as_str().unwrap_or_default(),
        message,
    );
    if !result["details"].is_null() {
        body["details"] = result["details"].clone();
    }
    (code, body)
}

/// POSTs a review to a webhook over HTTPS, trusting its caBundle.
async fn call(hook: &Hook, review: &Value) -> Result<Value, String> {
    let tls = crate::client_tls(&[hook.ca_bundle.as_deref().unwrap_or_default()]);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls).clone())
        .https_only()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Full<Bytes>>(connector);
    let request = http::Request::post(&hook.url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(review).map_err(|e| e.to_string())?,
        )))
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let response = client.request(request).await.map_err(|e| {
            format!(
                "failed to call webhook: Post \"{}\": {}",
                hook.url,
                crate::error_chain(&e)
            )
        })?;
        let code = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !code.is_success() {
            return Err(format!(
                "received invalid webhook response: {code}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        serde_json::from_slice::<Value>(&bytes)
            .map_err(|e| format!("received invalid webhook response: {e}"))
    };
    tokio::time::timeout(hook.timeout, exchange)
        .await
        .map_err(|_| {
            format!(
                "failed to call webhook: Post \"{}\": context deadline exceeded",
                hook.url
            )
        })?
}
