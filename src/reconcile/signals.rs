//! Tandem's signals for autoscaling: gauges a dashboard and an alert read to
//! see an autoscaler fighting a shortage of GPUs. They are read off the
//! statuses Tandem's controllers write, from the process's watch caches, at
//! each scrape, so every replica serves the same values (the leader's
//! statuses), an object that is gone is gone from them at once, and nothing
//! is kept between scrapes.
//!
//! - `tandem_role_replicas{namespace,service,role,state}`: the replicas of a
//!   role of an InferenceService, `state` one of `desired`, `ready`,
//!   `draining` (out of traffic, about to go), `pending` (a pod waits for the
//!   scheduler: Unschedulable), `failing` (a container crash-loops or
//!   cannot pull its image, or the replica is held for its recovery's
//!   back-off) and `failed` (past its recovery's `maxRestarts`, held with no
//!   pods); from `status.components`.
//! - `tandem_view_replicas{namespace,view,group,state}`: the split of a
//!   ScaleView, `state` `desired` (the view's share for the group) or `ready`;
//!   from `status.groups`.
//! - `tandem_view_requested_replicas{namespace,view}`: what was asked of the
//!   view (`spec.replicas`, what an autoscaler writes through `/scale`).
//!   Below or above the sum of `desired`: the view clamped it.
//! - `tandem_view_band_distance_replicas{namespace,view}`: for a ScaleView
//!   kept in a band by a ResourceScalingGroup, how far what was asked
//!   (`spec.replicas`) lies outside the band: negative below its lower end,
//!   positive above its upper end, 0 inside; from `status.band`.
//! - `tandem_ratio_error_replicas{namespace,resourcescalinggroup,source,target}`:
//!   for each Target of an InplaceScaling group, its ready replicas minus the
//!   replicas its ratio gives for the Source's ready replicas (for a band,
//!   the distance of its ready replicas from the band). Negative: the
//!   Target serves fewer than the ratio asks of what the Source serves (its
//!   new replicas wait for GPUs, say); positive: more. Read where both ends
//!   are a role of an InferenceService or a ScaleView, whose readiness
//!   Tandem's own statuses give; a Deployment or another kind has no sample.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::api::{InferenceService, ResourceScalingGroup, ScaleView};
use crate::plan::resource_scaling_group::ratio::{self, Endpoint};

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct RoleLabels {
    pub namespace: String,
    pub service: String,
    pub role: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ViewLabels {
    pub namespace: String,
    pub view: String,
    pub group: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct RequestedLabels {
    pub namespace: String,
    pub view: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct RatioLabels {
    pub namespace: String,
    pub resourcescalinggroup: String,
    /// The Source as bindings name it (`service/role`, or a view's name).
    pub source: String,
    pub target: String,
}

/// One scrape's values, in a stable order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    pub roles: BTreeMap<RoleLabels, i64>,
    pub views: BTreeMap<ViewLabels, i64>,
    pub requested: BTreeMap<RequestedLabels, i64>,
    pub band_distances: BTreeMap<RequestedLabels, i64>,
    pub ratio_errors: BTreeMap<RatioLabels, i64>,
}

/// The signals of these objects, as their statuses say.
pub fn read(
    services: &[Arc<InferenceService>],
    views: &[Arc<ScaleView>],
    groups: &[Arc<ResourceScalingGroup>],
) -> Signals {
    let mut signals = Signals::default();
    for service in services {
        let Some(status) = &service.status else {
            continue;
        };
        for (role, component) in &status.components {
            for (state, value) in [
                ("desired", component.desired_replicas),
                ("ready", component.ready_replicas),
                ("draining", component.draining_replicas),
                ("pending", component.unschedulable_replicas),
                ("failing", component.failing_replicas),
                ("failed", component.failed_replicas),
            ] {
                signals.roles.insert(
                    RoleLabels {
                        namespace: service.namespace().unwrap_or_default(),
                        service: service.name_any(),
                        role: role.clone(),
                        state,
                    },
                    i64::from(value),
                );
            }
        }
    }
    for view in views {
        let (namespace, name) = (view.namespace().unwrap_or_default(), view.name_any());
        if let Some(replicas) = view.spec.replicas {
            signals.requested.insert(
                RequestedLabels {
                    namespace: namespace.clone(),
                    view: name.clone(),
                },
                i64::from(replicas),
            );
        }
        if let (Some(asked), Some(band)) = (
            view.spec.replicas,
            view.status.as_ref().and_then(|s| s.band.as_ref()),
        ) {
            signals.band_distances.insert(
                RequestedLabels {
                    namespace: namespace.clone(),
                    view: name.clone(),
                },
                band_distance(asked, band.min_replicas, band.max_replicas),
            );
        }
        for group in view.status.iter().flat_map(|s| &s.groups) {
            for (state, value) in [("desired", group.replicas), ("ready", group.ready_replicas)] {
                signals.views.insert(
                    ViewLabels {
                        namespace: namespace.clone(),
                        view: name.clone(),
                        group: group.group.clone(),
                        state,
                    },
                    i64::from(value),
                );
            }
        }
    }
    for group in groups {
        let namespace = group.namespace().unwrap_or_default();
        // Not InplaceScaling, or bindings admission would refuse: no ratio.
        let Ok(bindings) = ratio::bindings(&group.spec) else {
            continue;
        };
        let ready = |endpoint: &Endpoint| ready_of(endpoint, &namespace, services, views);
        let Some(source) = ready(&bindings.source) else {
            continue;
        };
        for target in &bindings.targets {
            let Some(served) = ready(&target.endpoint) else {
                continue;
            };
            signals.ratio_errors.insert(
                RatioLabels {
                    namespace: namespace.clone(),
                    resourcescalinggroup: group.name_any(),
                    source: bindings.source.to_string(),
                    target: target.endpoint.to_string(),
                },
                if target.is_band() {
                    let (low, high) = target.bounds(source);
                    band_distance(served, low, high)
                } else {
                    // Two i32s: their difference always fits an i64.
                    i64::from(served).saturating_sub(i64::from(target.replicas(source)))
                },
            );
        }
    }
    signals
}

/// How far `value` lies outside the band [`low`, `high`]: negative below,
/// positive above, 0 inside.
fn band_distance(value: i32, low: i32, high: i32) -> i64 {
    let value = i64::from(value);
    if value < i64::from(low) {
        value.saturating_sub(i64::from(low))
    } else if value > i64::from(high) {
        value.saturating_sub(i64::from(high))
    } else {
        0
    }
}

/// The ready replicas of a binding's endpoint in `namespace`, where Tandem's
/// statuses say: a role of an InferenceService, or a ScaleView.
fn ready_of(
    endpoint: &Endpoint,
    namespace: &str,
    services: &[Arc<InferenceService>],
    views: &[Arc<ScaleView>],
) -> Option<i32> {
    let here = |meta: &kube::api::ObjectMeta| {
        meta.namespace.as_deref() == Some(namespace)
            && meta.name.as_deref() == Some(endpoint.name.as_str())
    };
    match (endpoint.group(), endpoint.kind.as_str(), &endpoint.role) {
        ("fusioninfer.io", "InferenceService", Some(role)) => services
            .iter()
            .find(|s| here(&s.metadata))?
            .status
            .as_ref()?
            .components
            .get(role)
            .map(|c| c.ready_replicas),
        ("fusioninfer.io", "ScaleView", None) => views
            .iter()
            .find(|v| here(&v.metadata))?
            .status
            .as_ref()
            .map(|s| s.replicas),
        _ => None,
    }
}

/// The caches the signals are read from, once `tandem serve` has them.
struct Sources {
    services: Store<InferenceService>,
    views: Store<ScaleView>,
    groups: Store<ResourceScalingGroup>,
}

/// The gauges above, registered as a collector: read at each scrape from
/// the caches it is given ([`SignalCollector::read_from`]); nothing before.
#[derive(Default)]
pub struct SignalCollector {
    sources: OnceLock<Sources>,
}

impl std::fmt::Debug for SignalCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalCollector")
            .field("reading", &self.sources.get().is_some())
            .finish()
    }
}

impl SignalCollector {
    /// Reads the signals from these caches from now on (once; a second call
    /// changes nothing).
    pub fn read_from(
        &self,
        services: Store<InferenceService>,
        views: Store<ScaleView>,
        groups: Store<ResourceScalingGroup>,
    ) {
        let _ = self.sources.set(Sources {
            services,
            views,
            groups,
        });
    }

    /// This scrape's signals; empty before the caches are given.
    pub fn signals(&self) -> Signals {
        self.sources.get().map_or_else(Signals::default, |s| {
            read(&s.services.state(), &s.views.state(), &s.groups.state())
        })
    }
}

/// One gauge family of `samples`, named `name` under the registry's prefix.
fn encode_family<L>(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    samples: &BTreeMap<L, i64>,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
{
    let family = Family::<L, Gauge>::default();
    for (labels, value) in samples {
        family.get_or_create(labels).set(*value);
    }
    let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric)
}

impl Collector for SignalCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let signals = self.signals();
        encode_family(
            &mut encoder,
            (
                "role_replicas",
                "Replicas of a role of an InferenceService, by state: desired, ready, draining, pending (a pod Unschedulable) and failing, as its status says",
            ),
            &signals.roles,
        )?;
        encode_family(
            &mut encoder,
            (
                "view_replicas",
                "Replicas a ScaleView split to each group (state desired) and those ready (state ready)",
            ),
            &signals.views,
        )?;
        encode_family(
            &mut encoder,
            (
                "view_requested_replicas",
                "Replicas asked of a ScaleView (spec.replicas, what an autoscaler writes through /scale); the sum of view_replicas{state=\"desired\"} differs when the view clamped it",
            ),
            &signals.requested,
        )?;
        encode_family(
            &mut encoder,
            (
                "view_band_distance_replicas",
                "Per ScaleView kept in a band by a ResourceScalingGroup: how far what was asked lies outside the band (negative below its lower end, positive above its upper end, 0 inside)",
            ),
            &signals.band_distances,
        )?;
        encode_family(
            &mut encoder,
            (
                "ratio_error_replicas",
                "Per Target of an InplaceScaling ResourceScalingGroup: its ready replicas minus what its ratio gives for the Source's ready replicas (negative: the Target serves fewer than the ratio asks)",
            ),
            &signals.ratio_errors,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(components: serde_json::Value) -> Arc<InferenceService> {
        let role = |name: &str, component_type: &str| {
            json!({"name": name, "componentType": component_type,
                   "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]}}})
        };
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
                "metadata": {"name": "pd", "namespace": "llm"},
                "spec": {"roles": [role("prefill", "prefiller"), role("decode", "decoder")]},
                "status": {"components": components},
            }))
            .expect("a service"),
        )
    }

    fn component(desired: i32, ready: i32, pending: i32) -> serde_json::Value {
        json!({"desiredReplicas": desired, "readyReplicas": ready, "nodesPerReplica": 1,
               "totalPods": desired, "readyPods": ready, "phase": "Running",
               "unschedulableReplicas": pending, "drainingReplicas": 1, "failingReplicas": 0,
               "failedReplicas": pending.min(1)})
    }

    fn ratio_group(ratio: &str) -> Arc<ResourceScalingGroup> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
                "metadata": {"name": "pd-ratio", "namespace": "llm"},
                "spec": {
                    "targetResources": [{"name": "pd", "apiVersion": "fusioninfer.io/v1alpha1",
                        "kind": "InferenceService",
                        "subResources": [{"roleName": "prefill"}, {"roleName": "decode"}]}],
                    "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                        {"name": "prefill", "role": "Source"},
                        {"name": "decode", "role": "Target", "ratio": ratio}]}},
                },
            }))
            .expect("a group"),
        )
    }

    fn view() -> Arc<ScaleView> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
                "metadata": {"name": "decode-sv", "namespace": "llm"},
                "spec": {"targetRef": {"name": "pd", "componentType": "decoder"}, "replicas": 9,
                         "scalePolicy": [{"group": "decode", "constraints": {"max": 8}}]},
                "status": {"replicas": 6, "groups": [{"group": "decode", "replicas": 8, "readyReplicas": 6}]},
            }))
            .expect("a view"),
        )
    }

    fn role(role: &str, state: &'static str) -> RoleLabels {
        RoleLabels {
            namespace: "llm".into(),
            service: "pd".into(),
            role: role.into(),
            state,
        }
    }

    #[test]
    fn roles_and_views_are_read_off_their_statuses() {
        let services = [service(
            json!({"prefill": component(2, 2, 0), "decode": component(8, 6, 2)}),
        )];
        let signals = read(&services, &[view()], &[]);
        assert_eq!(signals.roles[&role("decode", "desired")], 8);
        assert_eq!(signals.roles[&role("decode", "ready")], 6);
        assert_eq!(signals.roles[&role("decode", "pending")], 2);
        assert_eq!(signals.roles[&role("decode", "draining")], 1);
        assert_eq!(signals.roles[&role("decode", "failing")], 0);
        assert_eq!(signals.roles[&role("decode", "failed")], 1);
        assert_eq!(signals.roles[&role("prefill", "failed")], 0);
        assert_eq!(signals.roles.len(), 12, "6 states of 2 roles");
        let group = |state| ViewLabels {
            namespace: "llm".into(),
            view: "decode-sv".into(),
            group: "decode".into(),
            state,
        };
        assert_eq!(signals.views[&group("desired")], 8);
        assert_eq!(signals.views[&group("ready")], 6);
        let asked = RequestedLabels {
            namespace: "llm".into(),
            view: "decode-sv".into(),
        };
        assert_eq!(signals.requested[&asked], 9, "asked 9, clamped to 8");
    }

    #[test]
    fn the_ratio_error_compares_what_each_end_serves() {
        let error = |prefill_ready: i32, decode_ready: i32, ratio: &str| {
            let services = [service(json!({
                "prefill": component(2, prefill_ready, 0),
                "decode": component(8, decode_ready, 0),
            }))];
            let signals = read(&services, &[], &[ratio_group(ratio)]);
            let labels = RatioLabels {
                namespace: "llm".into(),
                resourcescalinggroup: "pd-ratio".into(),
                source: "pd/prefill".into(),
                target: "pd/decode".into(),
            };
            signals.ratio_errors.get(&labels).copied()
        };
        assert_eq!(error(2, 8, "4"), Some(0), "2 prefill serve with 8 decode");
        assert_eq!(error(2, 6, "4"), Some(-2), "two decode wait for GPUs");
        assert_eq!(error(1, 8, "4"), Some(4), "a prefill is not ready");
        assert_eq!(error(3, 2, "0.5"), Some(0), "ceil(3 x 0.5) is 2");
    }

    #[test]
    fn a_band_gives_the_distance_of_what_was_asked_from_it() {
        let distance = |asked: i32| {
            let mut view = (*view()).clone();
            view.spec.replicas = Some(asked);
            view.status.as_mut().expect("status").band = Some(crate::api::scale_view::ViewBand {
                resource_scaling_group: "pd-band".into(),
                min_replicas: 4,
                max_replicas: 8,
            });
            let signals = read(&[], &[Arc::new(view)], &[]);
            signals
                .band_distances
                .get(&RequestedLabels {
                    namespace: "llm".into(),
                    view: "decode-sv".into(),
                })
                .copied()
        };
        assert_eq!(distance(1), Some(-3));
        assert_eq!(distance(4), Some(0));
        assert_eq!(distance(8), Some(0));
        assert_eq!(distance(11), Some(3));
        let unbanded = read(&[], &[view()], &[]);
        assert!(unbanded.band_distances.is_empty());
    }

    #[test]
    fn nothing_is_read_where_no_status_says() {
        let services = [Arc::new({
            let mut s = (*service(json!({}))).clone();
            s.status = None;
            s
        })];
        let signals = read(&services, &[], &[ratio_group("4")]);
        assert_eq!(signals, Signals::default());
        assert_eq!(SignalCollector::default().signals(), Signals::default());
    }

    #[test]
    fn the_collector_serves_the_caches_gauges_under_tandems_prefix() {
        use kube::runtime::{reflector, watcher};
        let (services, mut services_writer) = reflector::store::<InferenceService>();
        let (views, mut views_writer) = reflector::store::<ScaleView>();
        let (groups, _) = reflector::store::<ResourceScalingGroup>();
        let collector = Arc::new(SignalCollector::default());
        let mut registry = prometheus_client::registry::Registry::with_prefix("tandem");
        registry.register_collector(Box::new(collector.clone()));
        let scrape = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
            text
        };
        assert!(!scrape().contains("tandem_role_replicas{"), "no caches yet");

        collector.read_from(services, views, groups);
        let decode = service(json!({"decode": component(8, 6, 2)}));
        services_writer.apply_watcher_event(&watcher::Event::Apply((*decode).clone()));
        views_writer.apply_watcher_event(&watcher::Event::Apply((*view()).clone()));
        let text = scrape();
        for line in [
            r#"tandem_role_replicas{namespace="llm",service="pd",role="decode",state="pending"} 2"#,
            r#"tandem_view_replicas{namespace="llm",view="decode-sv",group="decode",state="ready"} 6"#,
            r#"tandem_view_requested_replicas{namespace="llm",view="decode-sv"} 9"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
        // Gone from the cache, gone from the next scrape.
        services_writer.apply_watcher_event(&watcher::Event::Delete((*decode).clone()));
        assert!(!scrape().contains("tandem_role_replicas{"), "{}", scrape());
    }
}
