//! Prometheus metrics, served as text on the plain probe port at `/metrics`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub use crate::admission::metrics::AdmissionLabels;
use crate::admission::metrics::AdmissionMetrics;
use crate::reconcile::metrics::ControllerMetrics;
use crate::watch::metrics::WatchMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateReloadLabels {
    /// loaded or rejected (the new files did not load; the old certificate stays).
    pub result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    /// Admission's metrics, in the same registry: `tandem serve` hands
    /// them to the webhook's handlers.
    pub admission: Arc<AdmissionMetrics>,
    pub certificate_reloads: Family<CertificateReloadLabels, Counter>,
    /// When the serving certificate in use expires (Unix seconds; 0 until
    /// one is loaded, or when it cannot be read).
    pub certificate_expiry: Gauge,
    /// The controllers' metrics, in the same registry: `tandem serve` hands
    /// them to the reconcilers and to the kube client it builds.
    pub controllers: Arc<ControllerMetrics>,
    /// The watch layer's metrics, in the same registry: `tandem serve`
    /// hands them to the caches.
    pub watch: Arc<WatchMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tandem");
        let admission = Arc::new(AdmissionMetrics::register(&mut registry));
        let certificate_reloads = Family::<CertificateReloadLabels, Counter>::default();
        registry.register(
            "certificate_reloads",
            "Serving certificate reloads after a change in the certificate directory",
            certificate_reloads.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the serving certificate in use expires, in seconds since the Unix epoch (the alert TandemCertificateExpiresSoon compares it with time())",
            certificate_expiry.clone(),
        );
        let controllers = Arc::new(ControllerMetrics::register(&mut registry));
        let watch = Arc::new(WatchMetrics::register(&mut registry));
        Metrics {
            registry,
            admission,
            certificate_reloads,
            certificate_expiry,
            controllers,
            watch,
        }
    }
}

impl Metrics {
    pub fn record_admission(&self, labels: AdmissionLabels, seconds: f64) {
        self.admission.record(labels, seconds);
    }

    /// The registry in Prometheus' text format (OpenMetrics).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_requests_are_counted_and_timed() {
        let metrics = Metrics::default();
        let labels = AdmissionLabels {
            webhook: "validate",
            kind: "InferenceService",
            operation: "CREATE".into(),
            verdict: "denied",
        };
        metrics.record_admission(labels.clone(), 0.0003);
        metrics.record_admission(labels, 0.0004);
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(r#"tandem_admission_requests_total{webhook="validate",kind="InferenceService",operation="CREATE",verdict="denied"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("tandem_admission_duration_seconds_bucket"),
            "{text}"
        );
    }
}
