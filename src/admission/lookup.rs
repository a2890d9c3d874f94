//! What admission may look up besides the object under review: the target of
//! a ScaleView, the views that lock a service's roles, the follow graph of the
//! ResourceScalingGroups of a namespace, and whether a kind has a scale
//! subresource. The webhook reads kube-runtime caches and API discovery,
//! `render` reads its world, and a server without a cluster knows only
//! Kubernetes' built-in kinds (the checks that need a lookup then become
//! warnings instead of guesses).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use futures::future::BoxFuture;

use crate::plan::shared::installed::Installed;
use kube::ResourceExt;
use serde_json::Value;

use crate::api::resource_scaling_group::ResourceScalingGroupSpec;
use crate::api::{Findings, InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::resource_scaling_group::adapter;
use crate::plan::resource_scaling_group::dag::FollowIndex;
use crate::plan::scale_view::refusal::Refusal;

/// Objects admission can consult. `None` means "cannot know" (no cluster),
/// which is different from "does not exist" (`Some(None)` / an empty list).
pub trait Lookup: Send + Sync {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>>;
    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>>;
    /// What the follow graph of `namespace`'s stored ResourceScalingGroups
    /// says about `candidate` (name and spec of a group being created or
    /// updated): [`crate::plan::resource_scaling_group::dag::check`]'s answer, from an index kept up
    /// to date rather than from a list of the groups.
    fn check_follows(
        &self,
        namespace: &str,
        candidate: (&str, &ResourceScalingGroupSpec),
    ) -> Option<Findings>;
    /// Whether the API of `apiVersion` `kind` has a scale subresource (false
    /// also when the kind is not served at all).
    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool>;

    fn scale_view(&self, namespace: &str, name: &str) -> Option<Option<ScaleView>> {
        self.scale_views(namespace)
            .map(|views| views.into_iter().find(|v| v.name_any() == name))
    }

    /// The ResourceScalingGroup `namespace/name` (a write to its `/scale`
    /// carries only the Scale); None when it cannot be known.
    fn resource_scaling_group(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> Option<Option<ResourceScalingGroup>> {
        None
    }

    /// The endpoint-picker image Tandem deploys for a router role
    /// (`--epp-image`), when known.
    fn epp_image(&self) -> Option<&str> {
        None
    }

    /// What the cluster has installed of LWS, Volcano, the Inference
    /// Extension and Gateway API; [`Installed::Assumed`] when that cannot be
    /// known (no cluster, or its CRDs not read yet).
    fn installed(&self) -> std::sync::Arc<Installed> {
        std::sync::Arc::new(Installed::Assumed)
    }

    /// Reads an object this lookup answered "does not exist" for from the
    /// API server itself: a watch cache sees an object one event after it was
    /// created, so a ScaleView applied together with its InferenceService
    /// can come before the cache has the service. None: nothing to read
    /// live from (render's world, a test's objects, no cluster).
    fn read_live(&self, _missing: &Missing) -> Option<BoxFuture<'static, Result<Found, String>>> {
        None
    }

    /// Records on a ScaleView that the webhook refused a write to its
    /// `/scale` (a request that was not a dry run): its `ScaleRefused`
    /// condition and a Warning Event, when they say something new
    /// ([`crate::plan::scale_view::refusal`]). None: there is no cluster to
    /// record it in (render's world, a test's objects, `serve` without a
    /// kubeconfig); the denial's log line is then the only record.
    fn record_refusal(&self, _refusal: &Refusal) -> Option<BoxFuture<'static, Result<(), String>>> {
        None
    }
}

/// An object a lookup answered "does not exist" for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    InferenceService { namespace: String, name: String },
    ScaleView { namespace: String, name: String },
}

/// What a live read of a [`Missing`] object found.
#[derive(Clone, Debug)]
pub enum Found {
    InferenceService(Box<InferenceService>),
    ScaleView(Box<ScaleView>),
    /// The API server says it does not exist either.
    Nothing,
}

/// One request's lookup, noting each object it answered "does not exist"
/// for, so that a denial resting on a miss can be confirmed live
/// ([`Lookup::read_live`]) before it is sent.
pub struct Noting<'a> {
    inner: &'a dyn Lookup,
    missing: Mutex<Vec<Missing>>,
}

impl<'a> Noting<'a> {
    pub fn new(inner: &'a dyn Lookup) -> Noting<'a> {
        Noting {
            inner,
            missing: Mutex::new(Vec::new()),
        }
    }

    /// The objects answered "does not exist", in the order asked.
    pub fn into_missing(self) -> Vec<Missing> {
        self.missing
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn note(&self, missing: Missing) {
        let mut noted = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        if !noted.contains(&missing) {
            noted.push(missing);
        }
    }
}

impl Lookup for Noting<'_> {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>> {
        let answer = self.inner.inference_service(namespace, name);
        if matches!(answer, Some(None)) {
            self.note(Missing::InferenceService {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        }
        answer
    }
    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>> {
        self.inner.scale_views(namespace)
    }
    fn check_follows(
        &self,
        namespace: &str,
        candidate: (&str, &ResourceScalingGroupSpec),
    ) -> Option<Findings> {
        self.inner.check_follows(namespace, candidate)
    }
    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        self.inner.has_scale(api_version, kind)
    }
    fn scale_view(&self, namespace: &str, name: &str) -> Option<Option<ScaleView>> {
        let answer = self.inner.scale_view(namespace, name);
        if matches!(answer, Some(None)) {
            self.note(Missing::ScaleView {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            });
        }
        answer
    }
    fn installed(&self) -> std::sync::Arc<Installed> {
        self.inner.installed()
    }
    fn resource_scaling_group(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Option<ResourceScalingGroup>> {
        self.inner.resource_scaling_group(namespace, name)
    }
    fn epp_image(&self) -> Option<&str> {
        self.inner.epp_image()
    }
}

/// A lookup and the objects a live read found that it had missed.
pub struct Amended<'a> {
    pub inner: &'a dyn Lookup,
    pub found: Vec<Found>,
}

impl Lookup for Amended<'_> {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>> {
        let found = self.found.iter().find_map(|found| match found {
            Found::InferenceService(service)
                if service.namespace().as_deref() == Some(namespace)
                    && service.name_any() == name =>
            {
                Some((**service).clone())
            }
            _ => None,
        });
        match found {
            Some(service) => Some(Some(service)),
            None => self.inner.inference_service(namespace, name),
        }
    }
    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>> {
        let mut views = self.inner.scale_views(namespace)?;
        for found in &self.found {
            if let Found::ScaleView(view) = found
                && view.namespace().as_deref() == Some(namespace)
                && !views.iter().any(|v| v.name_any() == view.name_any())
            {
                views.push((**view).clone());
            }
        }
        Some(views)
    }
    fn check_follows(
        &self,
        namespace: &str,
        candidate: (&str, &ResourceScalingGroupSpec),
    ) -> Option<Findings> {
        self.inner.check_follows(namespace, candidate)
    }
    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        self.inner.has_scale(api_version, kind)
    }
    // `scale_view` is the trait's: a view of `scale_views` above, which
    // holds the views found live (only asked after a denial, so the copy of
    // the namespace's views does not matter).
    fn installed(&self) -> std::sync::Arc<Installed> {
        self.inner.installed()
    }
    fn resource_scaling_group(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Option<ResourceScalingGroup>> {
        self.inner.resource_scaling_group(namespace, name)
    }
    fn epp_image(&self) -> Option<&str> {
        self.inner.epp_image()
    }
}

/// Another lookup, and the endpoint-picker image Tandem deploys: what
/// `tandem serve` and `tandem render` admit with.
pub struct WithEppImage {
    pub inner: std::sync::Arc<dyn Lookup>,
    pub epp_image: String,
}

impl Lookup for WithEppImage {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>> {
        self.inner.inference_service(namespace, name)
    }
    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>> {
        self.inner.scale_views(namespace)
    }
    fn check_follows(
        &self,
        namespace: &str,
        candidate: (&str, &ResourceScalingGroupSpec),
    ) -> Option<Findings> {
        self.inner.check_follows(namespace, candidate)
    }
    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        self.inner.has_scale(api_version, kind)
    }
    fn scale_view(&self, namespace: &str, name: &str) -> Option<Option<ScaleView>> {
        self.inner.scale_view(namespace, name)
    }
    fn installed(&self) -> std::sync::Arc<Installed> {
        self.inner.installed()
    }
    fn resource_scaling_group(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Option<ResourceScalingGroup>> {
        self.inner.resource_scaling_group(namespace, name)
    }
    fn epp_image(&self) -> Option<&str> {
        Some(&self.epp_image)
    }
    fn read_live(&self, missing: &Missing) -> Option<BoxFuture<'static, Result<Found, String>>> {
        self.inner.read_live(missing)
    }
    fn record_refusal(&self, refusal: &Refusal) -> Option<BoxFuture<'static, Result<(), String>>> {
        self.inner.record_refusal(refusal)
    }
}

/// No view of a cluster: `tandem serve` without a kubeconfig.
pub struct Blind;

impl Lookup for Blind {
    fn inference_service(&self, _: &str, _: &str) -> Option<Option<InferenceService>> {
        None
    }
    fn scale_views(&self, _: &str) -> Option<Vec<ScaleView>> {
        None
    }
    fn check_follows(&self, _: &str, _: (&str, &ResourceScalingGroupSpec)) -> Option<Findings> {
        None
    }
    /// Kubernetes' own kinds are known to the binary; nothing else is.
    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        adapter::builtin_has_scale(api_version, kind)
    }
}

/// A fixed set of objects: the world of `tandem render`, or a test's.
#[derive(Default)]
pub struct Objects {
    services: BTreeMap<(String, String), InferenceService>,
    views: BTreeMap<String, Vec<ScaleView>>,
    /// The follow graph of the world's ResourceScalingGroups, built as the
    /// webhook's is, so both answer alike.
    follows: FollowIndex,
    /// CustomResourceDefinitions of the world, which say which kinds scale.
    crds: Vec<Value>,
    /// The built-in API versions known to be served: render's
    /// `--api-versions`, and those of the world's objects
    /// ([`crate::plan::shared::native_gang::of_world`]).
    api_versions: BTreeSet<String>,
    groups: BTreeMap<(String, String), ResourceScalingGroup>,
}

impl Objects {
    /// Keeps the Tandem objects among `objects` that parse; others are ignored.
    pub fn new<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Objects {
        let mut known = Objects::default();
        for object in objects {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            match (object["apiVersion"].as_str(), object["kind"].as_str()) {
                (Some("fusioninfer.io/v1alpha1"), Some("InferenceService")) => {
                    if let Ok(service) = serde_json::from_value::<InferenceService>(object.clone())
                    {
                        known
                            .services
                            .insert((namespace, service.name_any()), service);
                    }
                }
                (Some("fusioninfer.io/v1alpha1"), Some("ScaleView")) => {
                    if let Ok(view) = serde_json::from_value::<ScaleView>(object.clone()) {
                        known.views.entry(namespace).or_default().push(view);
                    }
                }
                (Some("resourcescalinggroup.com/v1"), Some("ResourceScalingGroup")) => {
                    if let Ok(mut group) =
                        serde_json::from_value::<ResourceScalingGroup>(object.clone())
                    {
                        group.metadata.namespace = Some(namespace.clone());
                        known.follows.upsert(&group);
                        known.groups.insert((namespace, group.name_any()), group);
                    }
                }
                (Some("apiextensions.k8s.io/v1"), Some("CustomResourceDefinition")) => {
                    known.crds.push(object.clone());
                }
                (Some(api_version @ "scheduling.k8s.io/v1alpha2"), Some(_)) => {
                    known.api_versions.insert(api_version.to_owned());
                }
                _ => {}
            }
        }
        known
    }

    /// These objects in a cluster that also serves `api_versions`
    /// (render's `--api-versions`).
    pub fn serving(mut self, api_versions: &BTreeSet<String>) -> Objects {
        self.api_versions.extend(api_versions.iter().cloned());
        self
    }

    /// The follow graph of the world's ResourceScalingGroups.
    pub fn follows(&self) -> &FollowIndex {
        &self.follows
    }
}

impl Lookup for Objects {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>> {
        Some(
            self.services
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned(),
        )
    }
    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>> {
        Some(self.views.get(namespace).cloned().unwrap_or_default())
    }
    fn check_follows(
        &self,
        namespace: &str,
        candidate: (&str, &ResourceScalingGroupSpec),
    ) -> Option<Findings> {
        Some(self.follows.check(namespace, candidate))
    }
    fn resource_scaling_group(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Option<ResourceScalingGroup>> {
        Some(
            self.groups
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned(),
        )
    }
    /// The world's CRDs, when it holds any: a dependency not among them is
    /// not installed (as render's reconcilers see it).
    fn installed(&self) -> std::sync::Arc<Installed> {
        std::sync::Arc::new(crate::plan::shared::native_gang::of_world(
            &self.crds,
            &self.api_versions,
        ))
    }
    /// Built-in kinds, then the CRDs of the world; a kind neither knows is
    /// unknown (a world need not list its CRDs).
    fn has_scale(&self, api_version: &str, kind: &str) -> Option<bool> {
        adapter::builtin_has_scale(api_version, kind).or_else(|| {
            self.crds
                .iter()
                .find_map(|crd| adapter::crd_scale(crd, api_version, kind))
                .map(|path| path.is_some())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_read_live_are_seen_beside_the_lookup_s_own() {
        let view: ScaleView = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
            "metadata": {"name": "v", "namespace": "a"},
            "spec": {"targetRef": {"name": "s", "componentType": "decoder"}, "scalePolicy": [{"group": "decode"}]}
        }))
        .unwrap();
        let service: InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "s", "namespace": "a"}, "spec": {"roles": []}
        }))
        .unwrap();
        let empty = Objects::new([]);
        let amended = Amended {
            inner: &empty,
            found: vec![
                Found::ScaleView(Box::new(view)),
                Found::InferenceService(Box::new(service)),
            ],
        };
        assert!(matches!(amended.scale_view("a", "v"), Some(Some(_))));
        assert!(matches!(amended.scale_view("b", "v"), Some(None)));
        assert!(matches!(amended.inference_service("a", "s"), Some(Some(_))));
        assert!(matches!(amended.inference_service("a", "t"), Some(None)));
        let noting = Noting::new(&empty);
        assert!(matches!(noting.scale_view("a", "v"), Some(None)));
        assert!(matches!(noting.inference_service("a", "s"), Some(None)));
        assert_eq!(
            noting.into_missing(),
            [
                Missing::ScaleView {
                    namespace: "a".into(),
                    name: "v".into()
                },
                Missing::InferenceService {
                    namespace: "a".into(),
                    name: "s".into()
                },
            ]
        );
    }

    #[test]
    fn scale_subresources_come_from_built_ins_and_the_world_s_crds() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Thing", "plural": "things"}, "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}},
                {"name": "v1beta1", "served": true, "storage": false},
            ]}});
        let world = Objects::new([&crd]);
        let cases = [
            ("apps/v1", "Deployment", Some(true), Some(true)),
            ("apps/v1", "DaemonSet", Some(false), Some(false)),
            ("example.com/v1", "Thing", None, Some(true)),
            ("example.com/v1beta1", "Thing", None, Some(false)),
            ("example.com/v1", "Other", None, None),
        ];
        for (api_version, kind, blind, known) in cases {
            assert_eq!(
                Blind.has_scale(api_version, kind),
                blind,
                "{api_version} {kind}"
            );
            assert_eq!(
                world.has_scale(api_version, kind),
                known,
                "{api_version} {kind}"
            );
        }
    }
}
