//! The admission webhook endpoints: `POST /validate/{resource}` and
//! `POST /mutate/{resource}`, AdmissionReview v1 in and out.
//!
//! A body that is not a readable AdmissionReview is a transport problem and gets
//! an HTTP 400 with the reason (the API server reports it as a webhook failure).
//! Everything about the object is a verdict in an AdmissionReview response.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde_json::Value;

pub use super::answer::{Answer, REVIEW_API_VERSION, Reply, Webhook};
use super::answer::{Verdict, reply, verdict_of};
use super::lookup::{Amended, Found, Noting};
use super::metrics::{AdmissionLabels, AdmissionMetrics};
use super::{Kind, Lookup, Requester, mutate, validate_as, validate_group_scale, validate_scale};
use crate::api::Findings;
use crate::plan::scale_view::refusal::Refusal;

/// What the handlers share: the metrics they record and what they may look up.
#[derive(Clone)]
pub struct State {
    pub metrics: Arc<AdmissionMetrics>,
    pub lookup: Arc<dyn Lookup>,
    /// The username of Tandem's own service account
    /// (`system:serviceaccount:NAMESPACE:NAME`): its updates may change roles
    /// that a ScaleView locks.
    pub service_account: Arc<str>,
    /// `--body-limit-bytes`, named in the 413 answer.
    pub body_limit_bytes: usize,
}

/// The admission routes. Request size and time limits are layered on by the
/// server, so they hold for every route.
pub fn router(state: State) -> Router {
    Router::new()
        .route(
            "/validate/{resource}",
            post(
                |axum::extract::State(s): axum::extract::State<State>,
                 Path(r): Path<String>,
                 body: Result<Bytes, BytesRejection>| async move {
                    serve(Webhook::Validate, &r, body, &s).await
                },
            ),
        )
        .route(
            "/mutate/{resource}",
            post(
                |axum::extract::State(s): axum::extract::State<State>,
                 Path(r): Path<String>,
                 body: Result<Bytes, BytesRejection>| async move {
                    serve(Webhook::Mutate, &r, body, &s).await
                },
            ),
        )
        .with_state(state)
}

async fn serve(
    webhook: Webhook,
    resource: &str,
    body: Result<Bytes, BytesRejection>,
    state: &State,
) -> Response {
    let started = Instant::now();
    let mut outcome = match body {
        Ok(body) => {
            let outcome = answer_confirmed(webhook, resource, &body, state).await;
            if outcome.verdict == "denied" {
                log_denial(webhook, &body, &outcome);
                if let Some(refusal) = scale_refusal(&body, &outcome) {
                    record_refusal(state, refusal);
                }
            }
            outcome
        }
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let limit = state.body_limit_bytes;
            tracing::warn!(
                webhook = webhook.label(),
                resource,
                limit,
                "admission request refused with 413: its body is larger than --body-limit-bytes"
            );
            Answer {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                body: Reply::Text(format!(
                    "the request body is larger than {limit} bytes, the limit set by --body-limit-bytes"
                )),
                kind: endpoint_kind(resource),
                operation: "unknown".to_owned(),
                verdict: "too_large",
            }
        }
        Err(rejection) => Answer {
            status: rejection.status(),
            body: Reply::Text(rejection.body_text()),
            kind: endpoint_kind(resource),
            operation: "unknown".to_owned(),
            verdict: "invalid",
        },
    };
    let labels = AdmissionLabels {
        webhook: webhook.label(),
        kind: outcome.kind,
        operation: std::mem::take(&mut outcome.operation),
        verdict: outcome.verdict,
    };
    state
        .metrics
        .record(labels, started.elapsed().as_secs_f64());
    tracing::debug!(status = %outcome.status, verdict = outcome.verdict, "admission answered");
    outcome.into_response()
}

/// [`answer`], except that an answer resting on an object the lookup did not
/// find is confirmed first: the objects it missed are read from the API
/// server ([`Lookup::read_live`]), and if any exists after all (a watch
/// cache one event behind a creation), the request is answered again with
/// them. A miss the API server confirms, or cannot answer, stands. That is
/// a denial, or any mutation: a new ScaleView whose target the cache missed
/// would otherwise be stored without `spec.replicas`, and an HPA reads an
/// unset `spec.replicas` as 0 and stops scaling ("ScalingDisabled").
pub async fn answer_confirmed(
    webhook: Webhook,
    resource: &str,
    body: &[u8],
    state: &State,
) -> Answer {
    let lookup = state.lookup.as_ref();
    let noting = Noting::new(lookup);
    let first = answer(webhook, resource, body, &noting, &state.service_account);
    let missing = noting.into_missing();
    let rests_on_a_miss = first.verdict == "denied" || webhook == Webhook::Mutate;
    if !rests_on_a_miss || missing.is_empty() {
        return first;
    }
    let mut found = Vec::new();
    for object in &missing {
        let Some(read) = lookup.read_live(object) else {
            continue;
        };
        match read.await {
            Ok(Found::Nothing) => {}
            Ok(object) => found.push(object),
            Err(error) => {
                tracing::warn!(?object, %error, "could not confirm a cache miss with the API server; the cache's answer stands")
            }
        }
    }
    if found.is_empty() {
        return first;
    }
    tracing::debug!(
        ?missing,
        "the caches had not seen objects the API server has; answering with them"
    );
    let amended = Amended {
        inner: lookup,
        found,
    };
    answer(webhook, resource, body, &amended, &state.service_account)
}

/// The metrics label of a request that could not be read: the kind of the
/// webhook it was sent to.
fn endpoint_kind(resource: &str) -> &'static str {
    Kind::from_plural(resource).map_or("other", Kind::name)
}

/// The webhook and kind labels of a request by its path alone
/// (`/validate/scaleviews`), for an answer given before it was read.
pub fn endpoint_labels(path: &str) -> (&'static str, &'static str) {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let webhook = match parts.next() {
        Some("validate") => Webhook::Validate.label(),
        Some("mutate") => Webhook::Mutate.label(),
        _ => "other",
    };
    (webhook, endpoint_kind(parts.next().unwrap_or_default()))
}

/// One INFO line per denial: what was denied (kind, namespace/name,
/// operation), whose request it was and why.
fn log_denial(webhook: Webhook, body: &[u8], outcome: &Answer) {
    // Read again, only for a denial: the answer's fast path does not keep it.
    let review: Value = serde_json::from_slice(body).unwrap_or_default();
    let request = &review["request"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let name = request["name"]
        .as_str()
        .or_else(|| request["object"]["metadata"]["name"].as_str())
        .unwrap_or_default();
    let namespace = text(&request["namespace"]);
    let reasons = match &outcome.body {
        Reply::Review(reply) => text(&reply["response"]["status"]["message"]),
        Reply::Text(reason) => reason.clone(),
    };
    tracing::info!(
        webhook = %webhook.label(),
        kind = %outcome.kind,
        object = %format!("{namespace}/{name}"),
        operation = %outcome.operation,
        user = %text(&request["userInfo"]["username"]),
        reasons = %reasons,
        "admission denied"
    );
}

/// The refused `/scale` of a ScaleView that `outcome` denies, unless the
/// request was a dry run (the webhook declares `sideEffects: NoneOnDryRun`).
pub fn scale_refusal(body: &[u8], outcome: &Answer) -> Option<Refusal> {
    if outcome.kind != "ScaleView/scale" || outcome.verdict != "denied" {
        return None;
    }
    let review: Value = serde_json::from_slice(body).ok()?;
    let request = &review["request"];
    if request["dryRun"].as_bool() == Some(true) {
        return None;
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let reason = match &outcome.body {
        Reply::Review(reply) => text(&reply["response"]["status"]["message"]),
        Reply::Text(reason) => reason.clone(),
    };
    Some(Refusal {
        namespace: request["namespace"].as_str()?.to_owned(),
        view: request["name"].as_str()?.to_owned(),
        requester: text(&request["userInfo"]["username"]),
        replicas: request["object"]["spec"]["replicas"].as_i64().unwrap_or(0),
        reason,
    })
}

/// Records `refusal` on its view beside the answer, which does not wait for
/// it; a record that fails is logged.
fn record_refusal(state: &State, refusal: Refusal) {
    let Some(recording) = state.lookup.record_refusal(&refusal) else {
        return;
    };
    tokio::spawn(async move {
        match recording.await {
            Ok(()) => tracing::info!(
                object = %format!("{}/{}", refusal.namespace, refusal.view),
                "recorded the refused /scale on the ScaleView (condition ScaleRefused, Event)"
            ),
            Err(error) => tracing::warn!(
                object = %format!("{}/{}", refusal.namespace, refusal.view),
                %error,
                "could not record the refused /scale on the ScaleView"
            ),
        }
    });
}

fn bad_request(resource: &str, reason: String) -> Answer {
    tracing::warn!(resource, %reason, "unreadable admission request");
    Answer {
        status: StatusCode::BAD_REQUEST,
        body: Reply::Text(reason),
        kind: endpoint_kind(resource),
        operation: "unknown".to_owned(),
        verdict: "invalid",
    }
}

/// Reads the review, decides, and writes the reply: everything the webhook
/// does with a request body, without the transport (also what the fuzz
/// targets drive). `lookup` is what admission may consult; `service_account`
/// is Tandem's own username (see [`State::service_account`]).
pub fn answer(
    webhook: Webhook,
    resource: &str,
    body: &[u8],
    lookup: &dyn Lookup,
    service_account: &str,
) -> Answer {
    let Some(kind) = Kind::from_plural(resource) else {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.plural()).collect();
        let reason = format!(
            "no admission webhook for {resource:?}; Tandem admits {}",
            known.join(", ")
        );
        return Answer {
            status: StatusCode::NOT_FOUND,
            body: Reply::Text(reason),
            kind: "other",
            operation: "unknown".to_owned(),
            verdict: "invalid",
        };
    };
    if let Some(answer) = super::review::answer(webhook, kind, body, lookup, service_account) {
        return answer;
    }
    reference_answer(webhook, kind, body, lookup, service_account)
}

/// [`answer`] the short way (see `super::review`), or None for a request
/// that it leaves to [`reference_answer`]. Public for the tests that check
/// which requests it serves.
pub fn fast_answer(
    webhook: Webhook,
    kind: Kind,
    body: &[u8],
    lookup: &dyn Lookup,
    service_account: &str,
) -> Option<Answer> {
    super::review::answer(webhook, kind, body, lookup, service_account)
}

/// [`answer`] the long way, which the fast path leaves every request to that
/// it does not serve (see `super::review`): the body read into a `Value`,
/// then into `AdmissionReview<DynamicObject>`, the spec parsed from the
/// `Value`, the patch a diff of the whole object. Public for the tests and
/// benchmarks that hold the two paths to the same answers.
pub fn reference_answer(
    webhook: Webhook,
    kind: Kind,
    body: &[u8],
    lookup: &dyn Lookup,
    service_account: &str,
) -> Answer {
    let resource = kind.plural();
    let review: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return bad_request(resource, format!("the request body is not JSON: {e}")),
    };
    let (api_version, review_kind) = (
        review
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        review
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    );
    if review_kind != "AdmissionReview" || api_version != REVIEW_API_VERSION {
        return bad_request(
            resource,
            format!(
                "expected an AdmissionReview of apiVersion {REVIEW_API_VERSION}, got kind {review_kind:?} of apiVersion {api_version:?}"
            ),
        );
    }
    if review.get("request").is_none_or(Value::is_null) {
        return bad_request(resource, "the AdmissionReview has no request".to_owned());
    }
    let parsed: Result<AdmissionReview<DynamicObject>, _> =
        serde_path_to_error::deserialize(&review);
    let request: AdmissionRequest<DynamicObject> = match parsed.map(TryInto::try_into) {
        Ok(Ok(request)) => request,
        Ok(Err(_)) => {
            return bad_request(resource, "the AdmissionReview has no request".to_owned());
        }
        Err(e) => {
            return bad_request(
                resource,
                format!("malformed AdmissionReview at {}: {}", e.path(), e.inner()),
            );
        }
    };
    let operation = format!("{:?}", request.operation).to_uppercase();
    let admitted = match (request.sub_resource.as_deref(), request.kind.kind.as_str()) {
        (Some("scale"), _) if kind == Kind::ScaleView => "ScaleView/scale",
        (Some("scale"), _) if kind == Kind::ResourceScalingGroup => "ResourceScalingGroup/scale",
        (None, name) if name == kind.name() => kind.name(),
        _ => "other",
    };
    let raw = &review["request"];
    let requester = Requester {
        username: request.user_info.username.as_deref().unwrap_or_default(),
        tandem: service_account,
    };
    let verdict = decide(webhook, kind, &request, raw, lookup, requester);
    let (status_label, reply) = reply(&request, verdict);
    Answer {
        status: StatusCode::OK,
        body: Reply::Review(reply),
        kind: admitted,
        operation,
        verdict: status_label,
    }
}

fn decide(
    webhook: Webhook,
    kind: Kind,
    request: &AdmissionRequest<DynamicObject>,
    raw: &Value,
    lookup: &dyn Lookup,
    requester: Requester<'_>,
) -> Verdict {
    use kube::core::admission::Operation;

    let wrong_endpoint = |what: String| {
        let mut findings = Findings::default();
        findings.deny("request.kind", what);
        Verdict::Deny {
            findings,
            code: 400,
            reason: "BadRequest",
        }
    };
    let object = &raw["object"];
    let old = raw.get("oldObject").filter(|o| !o.is_null());

    if let Some(sub) = request.sub_resource.as_deref() {
        // Only scaleviews/scale and resourcescalinggroups/scale are
        // registered: the API server sends the autoscaling/v1 Scale being
        // written, not the object.
        let namespace = request.namespace.as_deref().unwrap_or("default");
        return match (kind, sub, webhook) {
            (Kind::ScaleView, "scale", Webhook::Validate) if request.kind.kind == "Scale" => {
                verdict_of(validate_scale(object, namespace, lookup))
            }
            (Kind::ResourceScalingGroup, "scale", Webhook::Validate)
                if request.kind.kind == "Scale" =>
            {
                verdict_of(validate_group_scale(object, namespace, lookup))
            }
            _ => wrong_endpoint(format!(
                "the {} webhook for {} does not admit the {sub} subresource (got {})",
                webhook.label(),
                kind.plural(),
                request.kind.kind
            )),
        };
    }
    if request.resource.resource != kind.plural() || request.kind.kind != kind.name() {
        return wrong_endpoint(format!(
            "this endpoint admits {} ({}), got {} of resource {:?}",
            kind.name(),
            kind.plural(),
            request.kind.kind,
            request.resource.resource
        ));
    }
    match request.operation {
        Operation::Create | Operation::Update => {}
        // Nothing about a deletion or a connect depends on the object's content.
        Operation::Delete | Operation::Connect => return Verdict::Allow { warnings: vec![] },
    }
    let namespace = request
        .namespace
        .clone()
        .or_else(|| object["metadata"]["namespace"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "default".to_owned());
    match webhook {
        Webhook::Mutate => match mutate(kind, &namespace, object, old, lookup) {
            Ok(mutation) if mutation.patch.0.is_empty() => Verdict::Allow { warnings: vec![] },
            Ok(mutation) => Verdict::Patch {
                patch: mutation.patch,
                warnings: vec![],
            },
            Err(findings) => Verdict::Deny {
                findings,
                code: 422,
                reason: "Invalid",
            },
        },
        Webhook::Validate => verdict_of(validate_as(
            kind, &namespace, object, old, lookup, requester,
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A cache one event behind: it has not seen the service, the API
    /// server has (or has not, when `exists` is false).
    struct Lagging {
        cache: crate::admission::lookup::Objects,
        service: crate::api::InferenceService,
        exists: bool,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Lookup for Lagging {
        fn inference_service(
            &self,
            namespace: &str,
            name: &str,
        ) -> Option<Option<crate::api::InferenceService>> {
            self.cache.inference_service(namespace, name)
        }
        fn scale_views(&self, namespace: &str) -> Option<Vec<crate::api::ScaleView>> {
            self.cache.scale_views(namespace)
        }
        fn check_follows(
            &self,
            namespace: &str,
            candidate: (
                &str,
                &crate::api::resource_scaling_group::ResourceScalingGroupSpec,
            ),
        ) -> Option<Findings> {
            self.cache.check_follows(namespace, candidate)
        }
        fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
            self.cache.has_scale(api_version, kind)
        }
        fn read_live(
            &self,
            missing: &crate::admission::lookup::Missing,
        ) -> Option<futures::future::BoxFuture<'static, Result<Found, String>>> {
            use futures::FutureExt;
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(
                missing,
                &crate::admission::lookup::Missing::InferenceService {
                    namespace: "default".into(),
                    name: "qwen".into()
                }
            );
            let found = if self.exists {
                Found::InferenceService(Box::new(self.service.clone()))
            } else {
                Found::Nothing
            };
            Some(async move { Ok(found) }.boxed())
        }
    }

    #[test]
    fn a_denied_scale_of_a_view_is_a_refusal_to_record_unless_a_dry_run() {
        let review = |dry_run: bool| {
            serde_json::to_vec(&json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "1", "namespace": "llm", "name": "decode-sv",
                    "subResource": "scale", "operation": "UPDATE", "dryRun": dry_run,
                    "userInfo": {"username": "system:serviceaccount:kube-system:horizontal-pod-autoscaler"},
                    "object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 4}}},
            }))
            .expect("JSON")
        };
        let denied = |kind: &'static str| Answer {
            status: StatusCode::OK,
            body: Reply::Review(
                json!({"response": {"status": {"message": "spec.replicas: must be within [0, 3]"}}}),
            ),
            kind,
            operation: "UPDATE".to_owned(),
            verdict: "denied",
        };
        assert_eq!(
            scale_refusal(&review(false), &denied("ScaleView/scale")),
            Some(Refusal {
                namespace: "llm".into(),
                view: "decode-sv".into(),
                requester: "system:serviceaccount:kube-system:horizontal-pod-autoscaler".into(),
                replicas: 4,
                reason: "spec.replicas: must be within [0, 3]".into(),
            })
        );
        assert_eq!(
            scale_refusal(&review(true), &denied("ScaleView/scale")),
            None
        );
        assert_eq!(scale_refusal(&review(false), &denied("ScaleView")), None);
        let mut allowed = denied("ScaleView/scale");
        allowed.verdict = "allowed";
        assert_eq!(scale_refusal(&review(false), &allowed), None);
    }

    fn view_review(target: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview",
            "request": {"uid": "u",
                "kind": {"group": "fusioninfer.io", "version": "v1alpha1", "kind": "ScaleView"},
                "resource": {"group": "fusioninfer.io", "version": "v1alpha1", "resource": "scaleviews"},
                "operation": "CREATE", "userInfo": {"username": "alice"},
                "name": "v", "namespace": "default",
                "object": {"apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
                    "metadata": {"name": "v", "namespace": "default"},
                    "spec": {"targetRef": {"name": target, "componentType": "decoder"},
                        "scalePolicy": [{"group": "decode"}]}}}
        }))
        .unwrap()
    }

    fn state_with(exists: bool) -> (State, Arc<Lagging>) {
        let service: crate::api::InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen", "namespace": "default"},
            "spec": {"roles": [
                {"name": "prefill", "componentType": "prefiller", "template": {"spec": {"containers": [{"name": "v", "image": "vllm"}]}}},
                {"name": "decode", "componentType": "decoder", "template": {"spec": {"containers": [{"name": "v", "image": "vllm"}]}}}]}
        }))
        .unwrap();
        let lagging = Arc::new(Lagging {
            cache: crate::admission::lookup::Objects::new([]),
            service,
            exists,
            reads: Default::default(),
        });
        let state = State {
            metrics: Arc::new(AdmissionMetrics::default()),
            lookup: lagging.clone(),
            service_account: Arc::from("system:serviceaccount:tandem-system:tandem"),
            body_limit_bytes: 1 << 20,
        };
        (state, lagging)
    }

    fn allowed(answer: &Answer) -> bool {
        match &answer.body {
            Reply::Review(review) => review["response"]["allowed"] == true,
            Reply::Text(_) => false,
        }
    }

    #[tokio::test]
    async fn a_target_the_cache_has_not_seen_yet_is_read_live_before_a_denial() {
        let (state, lagging) = state_with(true);
        let body = view_review("qwen");
        // What the cache alone says: not found.
        let cached = answer(
            Webhook::Validate,
            "scaleviews",
            &body,
            state.lookup.as_ref(),
            &state.service_account,
        );
        assert_eq!(cached.verdict, "denied");
        let confirmed = answer_confirmed(Webhook::Validate, "scaleviews", &body, &state).await;
        assert!(allowed(&confirmed), "{confirmed:?}");
        assert_eq!(lagging.reads.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_new_view_whose_target_the_cache_has_not_seen_starts_from_it_read_live() {
        let (state, lagging) = state_with(true);
        let body = view_review("qwen");
        let confirmed = answer_confirmed(Webhook::Mutate, "scaleviews", &body, &state).await;
        assert_eq!(lagging.reads.load(std::sync::atomic::Ordering::SeqCst), 1);
        let Reply::Review(review) = &confirmed.body else {
            panic!("{confirmed:?}");
        };
        use base64::Engine;
        let mut patched =
            serde_json::from_slice::<Value>(&body).unwrap()["request"]["object"].clone();
        let patch = base64::engine::general_purpose::STANDARD
            .decode(review["response"]["patch"].as_str().expect("a patch"))
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
        // The decode role's current replicas (1, its default): what the
        // view starts from, and what an HPA reads from its /scale.
        assert_eq!(patched["spec"]["replicas"], 1, "{patched:#}");
    }

    #[tokio::test]
    async fn a_miss_the_api_server_confirms_is_denied() {
        let (state, lagging) = state_with(false);
        let body = view_review("qwen");
        let confirmed = answer_confirmed(Webhook::Validate, "scaleviews", &body, &state).await;
        assert_eq!(confirmed.verdict, "denied");
        match &confirmed.body {
            Reply::Review(review) => assert_eq!(
                review["response"]["status"]["message"],
                "spec.targetRef.name: InferenceService \"qwen\" not found in this namespace"
            ),
            Reply::Text(text) => panic!("{text}"),
        }
        assert_eq!(lagging.reads.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_denial_for_the_view_s_own_spec_stands_once_the_target_is_found() {
        let (state, lagging) = state_with(true);
        let mut body: Value = serde_json::from_slice(&view_review("qwen")).unwrap();
        body["request"]["object"]["spec"]["scalePolicy"][0]["priority"] = json!(11);
        let body = serde_json::to_vec(&body).unwrap();
        let confirmed = answer_confirmed(Webhook::Validate, "scaleviews", &body, &state).await;
        assert_eq!(confirmed.verdict, "denied");
        match &confirmed.body {
            Reply::Review(review) => {
                let message = review["response"]["status"]["message"].as_str().unwrap();
                assert!(message.contains("priority"), "{message}");
                assert!(!message.contains("not found"), "{message}");
            }
            Reply::Text(text) => panic!("{text}"),
        }
        assert_eq!(lagging.reads.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_answer_the_cache_could_give_reads_nothing_live() {
        let (mut state, lagging) = state_with(true);
        let service = lagging.service.clone();
        let seen = Arc::new(Lagging {
            cache: crate::admission::lookup::Objects::new([
                &serde_json::to_value(&service).unwrap()
            ]),
            service,
            exists: true,
            reads: Default::default(),
        });
        state.lookup = seen.clone();
        let body = view_review("qwen");
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            let answered = answer_confirmed(webhook, "scaleviews", &body, &state).await;
            assert_ne!(answered.verdict, "denied", "{answered:?}");
        }
        assert_eq!(seen.reads.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
