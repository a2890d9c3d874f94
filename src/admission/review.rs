//! The webhook's fast path: the AdmissionReview read once, straight from the
//! body into the types the decision needs (the request's fields, the object's
//! metadata and typed spec, the stored object on update), and the mutation's
//! patch built from the defaults it fills in.
//!
//! It gives the same answer as the reference path in [`super::http`] (the
//! body read into a `Value`, then into kube-rs's
//! `AdmissionReview<DynamicObject>`, the spec parsed from the `Value`, the
//! patch a diff of the whole object), which it leaves every request it does
//! not serve to: a body that does not read strictly into these types (the
//! reference path then says what is wrong with it, with its messages), a
//! spec that does not round-trip as written (its patch also drops what Tandem
//! does not keep), deletions, subresources other than a ScaleView's
//! `/scale`, requests sent to the wrong endpoint. `tests/unit/admission_answers.rs`
//! holds both to the answers recorded for every committed fuzz input.
//!
//! Reading is strict ([`strict::from_slice`]): a body it accepts is one the
//! reference path reads too, and every part of it is read as the reference
//! path reads it, so the decisions agree. The InferenceService and
//! ResourceScalingGroup endpoints read the objects as part of the body; the
//! ScaleView endpoint, whose object is a ScaleView or (for `/scale`) a
//! Scale, keeps them as written and reads them once it knows which.

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::answer::{Answer, REVIEW_API_VERSION, Reply, Verdict, Webhook, reply, verdict_of};
use super::strict::{self, MapOnly, Tracked};
use super::{Kind, Lookup, Requester, patch};
use crate::api::InferenceService;
use crate::api::inference_service::InferenceServiceSpec;
use crate::api::resource_scaling_group::ResourceScalingGroupSpec;
use crate::api::scale_view::ScaleViewSpec;
use crate::plan;

/// The review, as kube-rs's `AdmissionReview` reads it (its `TypeMeta`, and
/// the response it does not use but reads).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "R: Deserialize<'de>"))]
struct Envelope<R> {
    api_version: String,
    kind: String,
    request: Option<MapOnly<R>>,
    #[serde(default)]
    #[allow(dead_code)]
    response: Option<AdmissionResponse>,
}

/// kube-rs's `AdmissionRequest`, field for field and type for type, except
/// for the objects: read as `O` and `P` (the kind the endpoint serves, or
/// kept as written to be read by the kind they turn out to be).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "O: Deserialize<'de>, P: Deserialize<'de>"))]
struct Request<O, P> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    #[serde(default)]
    object: Option<O>,
    #[serde(default)]
    old_object: Option<P>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

/// An object as the decision reads it: its metadata and its spec (a
/// `serde::de::IgnoredAny` spec is read and dropped). Whatever else it holds
/// is read and dropped.
#[derive(Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
struct Object<S> {
    #[serde(default, deserialize_with = "strict::present")]
    metadata: Option<Tracked<ObjectMeta>>,
    #[serde(default, deserialize_with = "strict::present")]
    spec: Option<Tracked<S>>,
}

impl<S> Object<S> {
    fn meta(&self) -> Option<&ObjectMeta> {
        self.metadata.as_ref().map(|m| &m.value)
    }

    fn name(&self) -> &str {
        self.meta()
            .and_then(|m| m.name.as_deref())
            .unwrap_or_default()
    }
}

/// An object of the request, kept as written, read as a `T`. It sits two
/// levels deep in the body (`{"request": {"object": ...}}`).
fn read<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    strict::from_slice_within::<MapOnly<T>>(raw?.get().as_bytes(), 2)
        .ok()
        .map(|m| m.0)
}

/// The answer to `body`, or None when the reference path is to give it.
pub(super) fn answer(
    webhook: Webhook,
    kind: Kind,
    body: &[u8],
    lookup: &dyn Lookup,
    service_account: &str,
) -> Option<Answer> {
    match kind {
        Kind::InferenceService => {
            let (types, mut request) =
                read_review::<ServiceObject, MapOnly<InferenceService>>(body, kind)?;
            let object = request.object.take()?.0;
            let old = request.old_object.take().map(|o| o.0);
            let namespace = namespace(&request, &object);
            let requester = Requester {
                username: request.user_info.username.as_deref().unwrap_or_default(),
                tandem: service_account,
            };
            let verdict = inference_service(webhook, &namespace, object, old, (lookup, requester))?;
            Some(finish(types, request, verdict, kind.name()))
        }
        Kind::ResourceScalingGroup => {
            let (types, request) =
                read_review::<GroupObject, MapOnly<Object<IgnoredAny>>>(body, kind)?;
            let verdict = resource_scaling_group(webhook, &request, lookup)?;
            Some(finish(types, request, verdict, kind.name()))
        }
        Kind::ScaleView => {
            let (types, request) = read_review::<&RawValue, &RawValue>(body, kind)?;
            if request.sub_resource.as_deref() == Some("scale") {
                if webhook != Webhook::Validate || request.kind.kind != "Scale" {
                    return None;
                }
                let scale: Scale = read(request.object)?;
                if let Some(old) = request.old_object {
                    read::<Object<IgnoredAny>>(Some(old))?;
                }
                let namespace = request.namespace.as_deref().unwrap_or("default");
                let verdict = verdict_of(super::scale_findings(scale, namespace, lookup));
                return Some(finish(types, request, verdict, "ScaleView/scale"));
            }
            let verdict = scale_view(webhook, &request, lookup)?;
            Some(finish(types, request, verdict, kind.name()))
        }
    }
}

type ServiceObject = MapOnly<Object<InferenceServiceSpec>>;
type GroupObject = MapOnly<Object<ResourceScalingGroupSpec>>;

/// The review's type and request, when it is an AdmissionReview v1 with a
/// request that reads strictly, for the kind the endpoint serves: neither a
/// subresource other than `/scale` nor a request sent to the wrong
/// endpoint, and a CREATE or UPDATE unless of a subresource.
fn read_review<'a, O: Deserialize<'a>, P: Deserialize<'a>>(
    body: &'a [u8],
    kind: Kind,
) -> Option<(TypeMeta, Request<O, P>)> {
    let MapOnly(envelope) = strict::from_slice::<MapOnly<Envelope<Request<O, P>>>>(body).ok()?;
    if envelope.kind != "AdmissionReview" || envelope.api_version != REVIEW_API_VERSION {
        return None;
    }
    let MapOnly(request) = envelope.request?;
    match request.sub_resource.as_deref() {
        Some("scale") if kind == Kind::ScaleView => {}
        Some(_) => return None,
        None => {
            if request.resource.resource != kind.plural()
                || request.kind.kind != kind.name()
                || !matches!(request.operation, Operation::Create | Operation::Update)
            {
                return None;
            }
        }
    }
    let types = TypeMeta {
        api_version: envelope.api_version,
        kind: envelope.kind,
    };
    Some((types, request))
}

/// The reply to `request`, as the reference path writes it.
fn finish<O, P>(
    types: TypeMeta,
    request: Request<O, P>,
    verdict: Verdict,
    admitted: &'static str,
) -> Answer {
    let operation = format!("{:?}", request.operation).to_uppercase();
    let request = AdmissionRequest::<DynamicObject> {
        types,
        uid: request.uid,
        kind: request.kind,
        resource: request.resource,
        sub_resource: request.sub_resource,
        request_kind: request.request_kind,
        request_resource: request.request_resource,
        request_sub_resource: request.request_sub_resource,
        name: request.name,
        namespace: request.namespace,
        operation: request.operation,
        user_info: request.user_info,
        object: None,
        old_object: None,
        dry_run: request.dry_run,
        options: request.options,
    };
    let (label, review) = reply(&request, verdict);
    Answer {
        status: axum::http::StatusCode::OK,
        body: Reply::Review(review),
        kind: admitted,
        operation,
        verdict: label,
    }
}

/// The namespace the object lives in, as the reference path finds it.
fn namespace<S, O, P>(request: &Request<O, P>, object: &Object<S>) -> String {
    request
        .namespace
        .clone()
        .or_else(|| object.meta().and_then(|m| m.namespace.clone()))
        .unwrap_or_else(|| "default".to_owned())
}

fn patched(ops: patch::Ops) -> Verdict {
    if ops.ops.is_empty() {
        Verdict::Allow { warnings: vec![] }
    } else {
        Verdict::Patch {
            patch: json_patch::Patch(ops.ops),
            warnings: vec![],
        }
    }
}

fn inference_service(
    webhook: Webhook,
    namespace: &str,
    object: Object<InferenceServiceSpec>,
    old: Option<InferenceService>,
    (lookup, requester): (&dyn Lookup, Requester<'_>),
) -> Option<Verdict> {
    let name = object.name().to_owned();
    let spec = object.spec?;
    match webhook {
        Webhook::Validate if old.as_ref().is_some_and(|old| old.spec == spec.value) => {
            // Perhaps an update of metadata only: the reference path allows
            // it (`super::spec_unchanged`). Typed specs that differ come from
            // JSON specs that differ, so below the full validation is the
            // reference path's answer too.
            None
        }
        Webhook::Validate => Some(verdict_of(super::service_findings(
            namespace,
            &name,
            spec.value,
            old.map(Ok),
            (lookup, requester),
        ))),
        Webhook::Mutate => {
            if !spec.seen.is_clean() {
                return None;
            }
            let mut spec = spec.value;
            let gang_scheduler = crate::plan::inference_service::gang::default_gang_scheduler(
                &spec,
                old.as_ref().map(|o| &o.spec),
                &lookup.installed(),
            );
            // The patch never touches them, and defaults do not read them.
            for role in &mut spec.roles {
                role.template = None;
                role.httproute = None;
            }
            Some(patched(
                patch::inference_service(spec, gang_scheduler).ok()?,
            ))
        }
    }
}

fn scale_view(
    webhook: Webhook,
    request: &Request<&RawValue, &RawValue>,
    lookup: &dyn Lookup,
) -> Option<Verdict> {
    let object: Object<ScaleViewSpec> = read(request.object)?;
    let old: Option<Object<ScaleViewSpec>> = match request.old_object {
        Some(old) => Some(read(Some(old))?),
        None => None,
    };
    let namespace = namespace(request, &object);
    let spec = object.spec.as_ref()?;
    match webhook {
        Webhook::Validate => {
            let uid = object
                .meta()
                .and_then(|m| m.uid.as_deref())
                .unwrap_or_default();
            let old_spec = old
                .as_ref()
                .and_then(|o| o.spec.as_ref())
                .map(|s| Ok(s.value.clone()));
            if old_spec.as_ref() == Some(&Ok(spec.value.clone())) {
                // Perhaps an update of metadata only (a finalizer removed):
                // the reference path allows it (`super::spec_unchanged`).
                return None;
            }
            Some(verdict_of(super::view_findings(
                &namespace,
                (object.name(), uid),
                &spec.value,
                old.is_some(),
                old_spec,
                lookup,
            )))
        }
        Webhook::Mutate => {
            // An absent scalePolicy is written back as an empty list.
            if !spec.seen.is_clean() || spec.value.scale_policy.is_empty() {
                return None;
            }
            let (mut ops, defaulted) = patch::scale_view(&spec.value).ok()?;
            if old.is_none() {
                start_from_target(&namespace, &object, &defaulted, lookup, &mut ops)?;
            }
            Some(patched(ops))
        }
    }
}

/// [`super::start_from_target`] as patch operations. None when the
/// metadata's annotations cannot be told apart from an explicit `null`
/// (which the reference path leaves alone).
fn start_from_target(
    namespace: &str,
    object: &Object<ScaleViewSpec>,
    spec: &ScaleViewSpec,
    lookup: &dyn Lookup,
    ops: &mut patch::Ops,
) -> Option<()> {
    let Some(Some(target)) = lookup.inference_service(namespace, &spec.target_ref.name) else {
        return Some(());
    };
    if spec.replicas.is_none() {
        let replicas = plan::scale_view::current_total(spec, &target);
        ops.add(
            json_patch::jsonptr::PointerBuf::from_tokens(["spec", "replicas"]),
            &replicas,
        )
        .ok()?;
    }
    let (Some(uid), Some(metadata)) = (target.metadata.uid.as_deref(), &object.metadata) else {
        return Some(());
    };
    match &metadata.value.annotations {
        Some(annotations) => {
            if annotations
                .get(plan::scale_view::TARGET_UID)
                .map(String::as_str)
                != Some(uid)
            {
                ops.add(
                    json_patch::jsonptr::PointerBuf::from_tokens([
                        "metadata",
                        "annotations",
                        plan::scale_view::TARGET_UID,
                    ]),
                    &uid,
                )
                .ok()?;
            }
        }
        None if metadata.seen.null => return None,
        None => ops
            .add(
                json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "annotations"]),
                &std::collections::BTreeMap::from([(plan::scale_view::TARGET_UID, uid)]),
            )
            .ok()?,
    }
    Some(())
}

fn resource_scaling_group(
    webhook: Webhook,
    request: &Request<GroupObject, MapOnly<Object<IgnoredAny>>>,
    lookup: &dyn Lookup,
) -> Option<Verdict> {
    let object = &request.object.as_ref()?.0;
    let namespace = namespace(request, object);
    let spec = object.spec.as_ref()?;
    match webhook {
        // The stored spec is not read here, so whether an update leaves it
        // as it was (and is allowed: `super::spec_unchanged`) is the
        // reference path's to tell.
        Webhook::Validate if request.old_object.is_some() => None,
        Webhook::Validate => Some(verdict_of(super::group_findings(
            &namespace,
            object.name(),
            &spec.value,
            lookup,
        ))),
        Webhook::Mutate => {
            if !spec.seen.is_clean() {
                return None;
            }
            Some(patched(patch::resource_scaling_group(&spec.value).ok()?))
        }
    }
}
