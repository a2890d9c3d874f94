//! Prometheus metrics, served as text on the plain probe port at `/metrics`.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::reconcile::metrics::ControllerMetrics;

/// One admission request, as counted: which kind, which operation, what verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// `validate` or `mutate`.
    pub webhook: &'static str,
    /// The kind admitted: InferenceService, ScaleView, ScaleView/scale or
    /// ResourceScalingGroup; for a request that could not be read, the kind of
    /// the webhook it was sent to; `other` for a kind Tandem does not admit
    /// (bounded, whatever clients send).
    pub kind: &'static str,
    /// CREATE, UPDATE, DELETE, CONNECT or `unknown`.
    pub operation: String,
    /// allowed, patched, denied, invalid (not a readable review), too_large
    /// (413) or timed_out (503).
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateReloadLabels {
    /// loaded or rejected (the new files did not load; the old certificate stays).
    pub result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub admission_requests: Family<AdmissionLabels, Counter>,
    pub admission_duration: Family<AdmissionLabels, Histogram, fn() -> Histogram>,
    pub certificate_reloads: Family<CertificateReloadLabels, Counter>,
    /// When the serving certificate in use expires (Unix seconds; 0 until
    /// one is loaded, or when it cannot be read).
    pub certificate_expiry: Gauge,
    /// The controllers' metrics, in the same registry: `tandem serve` hands
    /// them to the reconcilers and to the kube client it builds.
    pub controllers: Arc<ControllerMetrics>,
}

fn admission_histogram() -> Histogram {
    // 100 µs to ~1.6 s: admission answers in well under a millisecond, the API
    // server gives up at the webhook's timeoutSeconds.
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("tandem");
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        let admission_duration =
            Family::<AdmissionLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                admission_histogram,
            );
        let certificate_reloads = Family::<CertificateReloadLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission reviews answered, by webhook, kind, operation and verdict",
            admission_requests.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time to answer an admission review, by webhook, kind, operation and verdict",
            admission_duration.clone(),
        );
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
        Metrics {
            registry,
            admission_requests,
            admission_duration,
            certificate_reloads,
            certificate_expiry,
            controllers,
        }
    }
}

impl Metrics {
    pub fn record_admission(&self, labels: AdmissionLabels, seconds: f64) {
        self.admission_duration
            .get_or_create(&labels)
            .observe(seconds);
        self.admission_requests.get_or_create(&labels).inc();
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
