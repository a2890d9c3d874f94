//! The watch layer's metrics, served on `/metrics` beside the controllers'
//! and admission's (one registry, [`crate::server::metrics::Metrics`]):
//!
//! - `tandem_cached_objects{kind}`: objects held in each watch cache;
//! - `tandem_dependency_info{dependency,version,installed}`: what the
//!   cluster has of LWS, Volcano, the Inference Extension and Gateway API;
//!
//! and whether the cluster answers the watches ([`ClusterHealth`]), for the
//! log and `/readyz`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::health::ClusterHealth;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// The kind cached, as the API names it (`InferenceService`).
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DependencyLabels {
    /// The dependency, as `tandem check` names it.
    pub dependency: &'static str,
    /// The versions its CRD serves, comma-separated; empty when missing.
    pub version: String,
    /// Whether the version Tandem writes is served.
    pub installed: &'static str,
}

/// The watch layer's metric families; see the module documentation.
#[derive(Default)]
pub struct WatchMetrics {
    pub cached_objects: Family<CacheLabels, Gauge>,
    pub dependencies: Family<DependencyLabels, Gauge>,
    /// Whether the cluster answers the caches' watches (for the log and
    /// `/readyz`).
    pub cluster: Arc<ClusterHealth>,
}

impl WatchMetrics {
    /// Families registered in `registry` (prefixed `tandem_` there).
    pub fn register(registry: &mut Registry) -> WatchMetrics {
        let metrics = WatchMetrics::default();
        registry.register(
            "cached_objects",
            "Objects held in a watch cache, by kind",
            metrics.cached_objects.clone(),
        );
        registry.register(
            "dependency_info",
            "The projects Tandem writes objects of, as their CustomResourceDefinitions say: 1 per dependency, with the versions served and whether the one Tandem writes is installed",
            metrics.dependencies.clone(),
        );
        metrics
    }

    /// What is installed now, as `(dependency, versions, installed)`: the
    /// gauge holds exactly these.
    pub fn dependencies(&self, info: &[(&'static str, String, bool)]) {
        self.dependencies.clear();
        for (dependency, version, installed) in info {
            self.dependencies
                .get_or_create(&DependencyLabels {
                    dependency,
                    version: version.clone(),
                    installed: if *installed { "true" } else { "false" },
                })
                .set(1);
        }
    }

    /// The cache of `kind` now holds `objects`.
    pub fn cached(&self, kind: &str, objects: usize) {
        self.cached_objects
            .get_or_create(&CacheLabels {
                kind: kind.to_owned(),
            })
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauges_are_served_with_their_last_values() {
        let mut registry = Registry::with_prefix("tandem");
        let metrics = WatchMetrics::register(&mut registry);
        metrics.cached("Pod", 12);
        metrics.cached("Pod", 10);
        metrics.dependencies(&[("LeaderWorkerSet", "v1".to_owned(), true)]);
        metrics.dependencies(&[("Volcano PodGroup", String::new(), false)]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        for line in [
            r#"tandem_cached_objects{kind="Pod"} 10"#,
            r#"tandem_dependency_info{dependency="Volcano PodGroup",version="",installed="false"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
        assert!(
            !text.contains("LeaderWorkerSet"),
            "a dependency no longer said stays in the gauge:\n{text}"
        );
    }
}
