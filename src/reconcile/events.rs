//! A bound on the Events Tandem records about one object, like client-go's
//! `EventSourceObjectSpamFilter` (part of its `EventCorrelator`): a token
//! bucket per source and object. Tandem is the one source here, so one
//! bucket per object: [`EVENT_BURST`] Events at once, then one every
//! [`EVENT_REFILL`]. An Event over the bound is dropped and counted in the
//! log, never sent.
//!
//! What kube-runtime's `Recorder` folds into a series ([`super::cluster::Series::Fold`])
//! is narrower than its name suggests (kube-runtime 4.2 `events.rs`,
//! measured by the tests below): an Event folds only into an earlier one
//! with the same type, reason, action, reporter, `regarding` *and*
//! `secondary`, so one Event per child (each its own `secondary`) never
//! folds; a folded Event keeps the first Event's note (a later note is
//! lost); each repeat is still a request (a PATCH of the series); and the
//! recorder's cache keeps every key for six minutes. Folding alone bounds
//! neither the requests nor the Events; this filter and one Event per batch
//! ([`crate::plan::shared::batch::summarise`]) do.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::rate_limit::Bucket;

/// Events about one object at once: client-go's `defaultSpamBurst` (25).
pub const EVENT_BURST: u32 = 25;

/// One more Event about an object every this long, once its burst is spent.
/// client-go refills one every 5 minutes (`defaultSpamQPS` 1/300), made for
/// controllers that record an Event per pod; Tandem records one per batch
/// or decision, and a slow-start burst at 64 writes a pass and 20 requests a
/// second makes a batch about every 4 s: one Event every 10 s (6 a minute)
/// keeps every third summary of a long burst and bounds a runaway loop to
/// 360 Events an hour per object.
pub const EVENT_REFILL: Duration = Duration::from_secs(10);

/// How many objects' buckets are kept before full ones are dropped (a full
/// bucket is the same as none).
const KEPT: usize = 1024;

/// The buckets, by object.
#[derive(Debug)]
pub struct SpamFilter {
    buckets: Mutex<HashMap<String, Bucket>>,
    burst: u32,
    refill: Duration,
}

impl Default for SpamFilter {
    fn default() -> Self {
        SpamFilter::new(EVENT_BURST, EVENT_REFILL)
    }
}

impl SpamFilter {
    pub fn new(burst: u32, refill: Duration) -> SpamFilter {
        SpamFilter {
            buckets: Mutex::default(),
            burst,
            refill,
        }
    }

    /// Whether an Event about `object` may be sent at `now` (and counts it).
    pub fn allow(&self, object: &str, now: Instant) -> bool {
        let qps = 1.0 / self.refill.as_secs_f64().max(f64::MIN_POSITIVE);
        // A bucket is replaced whole: a poisoned lock still holds valid ones.
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= KEPT && !buckets.contains_key(object) {
            buckets.retain(|_, bucket| !bucket.full(now));
        }
        buckets
            .entry(object.to_owned())
            .or_insert_with(|| Bucket::new(qps, self.burst, now))
            .take(now)
            .is_none()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body_util::BodyExt;
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    use super::*;

    #[test]
    fn an_object_gets_its_burst_then_one_event_per_refill() {
        let filter = SpamFilter::default();
        let start = Instant::now();
        let sent = (0..12_000).filter(|_| filter.allow("a", start)).count();
        assert_eq!(sent, 25);
        // Another object has its own bucket.
        assert!(filter.allow("b", start));
        // A minute later, six more.
        let later = start + Duration::from_secs(60);
        let sent = (0..100).filter(|_| filter.allow("a", later)).count();
        assert_eq!(sent, 6);
    }

    #[test]
    fn full_buckets_are_forgotten_when_many_objects_were_seen() {
        let filter = SpamFilter::default();
        let start = Instant::now();
        for i in 0..KEPT {
            assert!(filter.allow(&format!("o{i}"), start));
        }
        let later = start + Duration::from_secs(3600);
        assert!(filter.allow("new", later));
        let kept = filter.buckets.lock().expect("not poisoned").len();
        assert_eq!(kept, 1, "the full buckets are dropped");
    }

    /// What kube-runtime's Recorder sends for a burst of Events: measured
    /// on a client whose every request is recorded and answered with its
    /// own body.
    #[tokio::test]
    async fn kube_runtime_folds_only_events_about_the_same_secondary_and_keeps_the_first_note() {
        let requests: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
        let seen = requests.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let method = request.method().to_string();
                let body = request.into_body().collect().await?.to_bytes().to_vec();
                let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                seen.lock().expect("not poisoned").push((method, json));
                Ok::<_, tower::BoxError>(
                    http::Response::builder()
                        .status(201)
                        .body(kube::client::Body::from(body))
                        .expect("a valid response"),
                )
            }
        });
        let client = kube::Client::new(service, "default");
        let recorder = Recorder::new(client, Reporter::from("tandem"));
        let service = ObjectReference {
            api_version: Some("fusioninfer.io/v1alpha1".to_owned()),
            kind: Some("InferenceService".to_owned()),
            namespace: Some("default".to_owned()),
            name: Some("a".to_owned()),
            ..ObjectReference::default()
        };
        let created = |name: &str| Event {
            type_: EventType::Normal,
            reason: "Created".to_owned(),
            note: Some(format!("LeaderWorkerSet {name} created")),
            action: "Apply".to_owned(),
            secondary: Some(ObjectReference {
                kind: Some("LeaderWorkerSet".to_owned()),
                namespace: Some("default".to_owned()),
                name: Some(name.to_owned()),
                ..ObjectReference::default()
            }),
        };
        // 100 children created: 100 Events, none folded.
        for i in 0..100 {
            recorder
                .publish(&created(&format!("a-decode-{i}")), &service)
                .await
                .expect("recorded");
        }
        let posts =
            |r: &[(String, serde_json::Value)]| r.iter().filter(|(m, _)| m == "POST").count();
        assert_eq!(posts(&requests.lock().expect("not poisoned")), 100);
        // The same secondary again, with another note: folded into a PATCH
        // of the series, which still says the first note.
        let mut again = created("a-decode-0");
        again.note = Some("a second, different note".to_owned());
        recorder.publish(&again, &service).await.expect("recorded");
        let requests = requests.lock().expect("not poisoned");
        assert_eq!(requests.len(), 101);
        let (method, body) = &requests[100];
        assert_eq!(method, "PATCH");
        assert_eq!(body["note"], "LeaderWorkerSet a-decode-0 created");
        assert_eq!(body["series"]["count"], 2);
    }
}
