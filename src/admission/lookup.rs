//! What admission may look up besides the object under review: the target of
//! a ScaleView, the views that lock a service's roles, the ResourceScalingGroups
//! of a namespace. The webhook reads kube-runtime caches, `render` reads its
//! world, and a server without a cluster knows nothing (the checks that need a
//! lookup then become warnings instead of guesses).

use std::collections::BTreeMap;

use kube::ResourceExt;
use serde_json::Value;

use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};

/// Objects admission can consult. `None` means "cannot know" (no cluster),
/// which is different from "does not exist" (`Some(None)` / an empty list).
pub trait Lookup: Send + Sync {
    fn inference_service(&self, namespace: &str, name: &str) -> Option<Option<InferenceService>>;
    fn scale_views(&self, namespace: &str) -> Option<Vec<ScaleView>>;
    fn resource_scaling_groups(&self, namespace: &str) -> Option<Vec<ResourceScalingGroup>>;

    fn scale_view(&self, namespace: &str, name: &str) -> Option<Option<ScaleView>> {
        self.scale_views(namespace)
            .map(|views| views.into_iter().find(|v| v.name_any() == name))
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
    fn resource_scaling_groups(&self, _: &str) -> Option<Vec<ResourceScalingGroup>> {
        None
    }
}

/// A fixed set of objects: the world of `tandem render`, or a test's.
#[derive(Default)]
pub struct Objects {
    services: BTreeMap<(String, String), InferenceService>,
    views: BTreeMap<String, Vec<ScaleView>>,
    groups: BTreeMap<String, Vec<ResourceScalingGroup>>,
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
                    if let Ok(group) =
                        serde_json::from_value::<ResourceScalingGroup>(object.clone())
                    {
                        known.groups.entry(namespace).or_default().push(group);
                    }
                }
                _ => {}
            }
        }
        known
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
    fn resource_scaling_groups(&self, namespace: &str) -> Option<Vec<ResourceScalingGroup>> {
        Some(self.groups.get(namespace).cloned().unwrap_or_default())
    }
}
