//! What admission counts: each review answered, by webhook, kind, operation
//! and verdict, and how long the answer took. Registered in the process's
//! one registry by `server::metrics`, which serves it; recorded by the
//! handlers (`http.rs`) and by the server's time limit.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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

/// The admission reviews answered and their times.
pub struct AdmissionMetrics {
    pub requests: Family<AdmissionLabels, Counter>,
    pub duration: Family<AdmissionLabels, Histogram, fn() -> Histogram>,
}

fn admission_histogram() -> Histogram {
    // 100 µs to ~1.6 s: admission answers in well under a millisecond, the API
    // server gives up at the webhook's timeoutSeconds.
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

impl AdmissionMetrics {
    /// The metrics, registered in `registry` (`tandem_admission_*`).
    pub fn register(registry: &mut Registry) -> AdmissionMetrics {
        let requests = Family::<AdmissionLabels, Counter>::default();
        let duration =
            Family::<AdmissionLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                admission_histogram,
            );
        registry.register(
            "admission_requests",
            "Admission reviews answered, by webhook, kind, operation and verdict",
            requests.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time to answer an admission review, by webhook, kind, operation and verdict",
            duration.clone(),
        );
        AdmissionMetrics { requests, duration }
    }

    /// One review answered in `seconds`.
    pub fn record(&self, labels: AdmissionLabels, seconds: f64) {
        self.duration.get_or_create(&labels).observe(seconds);
        self.requests.get_or_create(&labels).inc();
    }
}

impl Default for AdmissionMetrics {
    /// Registered nowhere: for handlers run without a server (tests).
    fn default() -> Self {
        AdmissionMetrics::register(&mut Registry::default())
    }
}
