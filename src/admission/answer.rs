//! What the webhook answers: the verdict on one request, the AdmissionReview
//! reply that carries it (the JSON patch base64-encoded), and the answer with
//! the labels its metrics are counted by. Both ways of reading a request, the
//! short one ([`super::review`]) and the reference one ([`super::http`]),
//! write their answers with this module, so neither imports the other.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status};
use serde_json::{Value, json};

use crate::api::Findings;

/// The only AdmissionReview version Tandem's webhook configurations ask for.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhook {
    Validate,
    Mutate,
}

impl Webhook {
    pub fn label(self) -> &'static str {
        match self {
            Webhook::Validate => "validate",
            Webhook::Mutate => "mutate",
        }
    }
}

/// What one request came to: the reply, and the labels of its metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Reply,
    /// The kind admitted (`ScaleView/scale` for the subresource, `other` when
    /// the request does not match its endpoint).
    pub kind: &'static str,
    /// The request's operation, upper case, or `unknown`.
    pub operation: String,
    /// `allowed`, `patched`, `denied`, `invalid` or `too_large`.
    pub verdict: &'static str,
}

/// The body of a reply: an AdmissionReview, or the reason a request could not
/// be read as one.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Review(Value),
    Text(String),
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self.body {
            Reply::Review(review) => (self.status, axum::Json(review)).into_response(),
            Reply::Text(reason) => (self.status, reason).into_response(),
        }
    }
}

/// The decision about one request.
pub enum Verdict {
    Allow {
        warnings: Vec<String>,
    },
    Patch {
        patch: json_patch::Patch,
        warnings: Vec<String>,
    },
    Deny {
        findings: Findings,
        code: u16,
        reason: &'static str,
    },
}

/// The verdict of the findings about one object: allowed (with their
/// warnings), or denied as a conflict (409) or as invalid (422).
pub fn verdict_of(findings: Findings) -> Verdict {
    if findings.is_allowed() {
        Verdict::Allow {
            warnings: findings.warnings,
        }
    } else if findings.conflict {
        Verdict::Deny {
            findings,
            code: 409,
            reason: "Conflict",
        }
    } else {
        Verdict::Deny {
            findings,
            code: 422,
            reason: "Invalid",
        }
    }
}

/// The AdmissionReview reply. The patch goes on the wire as base64 of the JSON
/// Patch: kube-core's `with_patch` writes a JSON array of bytes instead
/// (kube-rs issue 1781), which the API server rejects.
pub fn reply(request: &AdmissionRequest<DynamicObject>, verdict: Verdict) -> (&'static str, Value) {
    let mut response = AdmissionResponse::from(request);
    let mut patch = None;
    let label = match verdict {
        Verdict::Allow { warnings } => {
            response.warnings = (!warnings.is_empty()).then_some(warnings);
            "allowed"
        }
        Verdict::Patch { patch: p, warnings } => {
            response.warnings = (!warnings.is_empty()).then_some(warnings);
            patch = Some(p);
            "patched"
        }
        Verdict::Deny {
            findings,
            code,
            reason,
        } => {
            let causes = findings
                .violations
                .iter()
                .map(|v| StatusCause {
                    reason: "FieldValueInvalid".to_owned(),
                    message: v.reason.clone(),
                    field: v.field.clone(),
                })
                .collect();
            response.warnings = (!findings.warnings.is_empty()).then(|| findings.warnings.clone());
            response = response.deny(findings.denial_message());
            response.result = Status::failure(&findings.denial_message(), reason)
                .with_code(code)
                .with_details(StatusDetails {
                    name: request.name.clone(),
                    group: request.kind.group.clone(),
                    kind: request.kind.kind.clone(),
                    causes,
                    uid: String::new(),
                    retry_after_seconds: 0,
                });
            "denied"
        }
    };
    let mut review = match serde_json::to_value(response.into_review()) {
        Ok(review) => review,
        // Every field of the response is a string, bool, number or list of
        // those, so serialisation cannot fail; answer a denial if it ever does.
        Err(e) => {
            return (
                "denied",
                json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview",
                    "response": {"uid": request.uid, "allowed": false,
                        "status": {"code": 500, "message": format!("could not write the admission response: {e}")}}}),
            );
        }
    };
    if let Some(patch) = patch
        && let Some(response) = review.get_mut("response").and_then(Value::as_object_mut)
    {
        let encoded = serde_json::to_vec(&patch)
            .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes));
        match encoded {
            Ok(encoded) => {
                response.insert("patch".to_owned(), Value::String(encoded));
                response.insert(
                    "patchType".to_owned(),
                    Value::String("JSONPatch".to_owned()),
                );
            }
            Err(e) => {
                tracing::error!(error = %e, "could not encode the JSON patch; answering without it")
            }
        }
    }
    (label, review)
}

#[cfg(test)]
mod tests {
    use kube::core::admission::AdmissionReview;

    use super::*;

    /// Pins the reason this module encodes patches itself: kube-core's
    /// `with_patch` serialises the patch as an array of numbers. When this test
    /// fails, kube-core sends base64 and `reply` can use `with_patch` again.
    #[test]
    fn kube_core_with_patch_writes_an_array_of_bytes() {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
            "apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE", "userInfo": {}, "name": "p"}
        }))
        .unwrap();
        let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        let patch = json_patch::Patch(vec![]);
        let response = AdmissionResponse::from(&request).with_patch(patch).unwrap();
        let wire = serde_json::to_value(response).unwrap();
        assert!(
            wire["patch"].is_array(),
            "kube-core now writes {}",
            wire["patch"]
        );
    }
}
