//! The client's own limit on how fast it talks to the API server, as
//! client-go's (`rest.Config.QPS` and `Burst`, a token bucket): a tower layer
//! on the kube `Client` ([`RateLimit`]) in front of every request the
//! process makes (caches, controllers, Events, the leader Lease).
//!
//! The bucket holds `burst` tokens and gains `qps` a second; a request takes
//! one, and waits for it when there is none. The kube `Client` sends its
//! requests one at a time through a buffer to this layer, so requests wait
//! their turn in the order they were made; a watch takes a token when it
//! starts, not while it streams. The API server's own answer to overload
//! (429 from API Priority and Fairness) is handled where it always was: a
//! reconcile that meets it fails as transient and is retried after a
//! growing wait ([`super::FailureBackoff`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Requests a second, as controller-runtime's default client (20).
pub const DEFAULT_QPS: f64 = 20.0;
/// Requests at once above the rate, as controller-runtime's default (30).
pub const DEFAULT_BURST: u32 = 30;

/// A token bucket, its time given: the pure arithmetic of the limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket at `now`. A `qps` that is not a positive number means
    /// no limit; `burst` is at least 1.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            qps,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn unlimited(&self) -> bool {
        !(self.qps.is_finite() && self.qps > 0.0)
    }

    fn refill(&mut self, now: Instant) {
        if now > self.at {
            let gained = now.duration_since(self.at).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + gained).min(self.burst);
            self.at = now;
        }
    }

    /// Whether the bucket is full at `now` (as if it were new).
    pub fn full(&self, now: Instant) -> bool {
        let mut bucket = self.clone();
        bucket.refill(now);
        bucket.unlimited() || bucket.tokens >= bucket.burst
    }

    /// Takes a token at `now`: None when there was one, else how long until
    /// there is (nothing is taken then).
    pub fn take(&mut self, now: Instant) -> Option<Duration> {
        if self.unlimited() {
            return None;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// The layer: one bucket shared by every service it makes.
#[derive(Clone, Debug)]
pub struct RateLimit {
    bucket: Arc<Mutex<Bucket>>,
}

impl RateLimit {
    pub fn new(qps: f64, burst: u32) -> RateLimit {
        RateLimit {
            bucket: Arc::new(Mutex::new(Bucket::new(qps, burst, Instant::now()))),
        }
    }
}

impl<S> Layer<S> for RateLimit {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            bucket: self.bucket.clone(),
            waiting: None,
            ready: false,
        }
    }
}

/// A service whose requests wait for a token of the bucket.
pub struct Limited<S> {
    inner: S,
    bucket: Arc<Mutex<Bucket>>,
    /// The wait for the next token.
    waiting: Option<Pin<Box<Sleep>>>,
    /// A token is taken for the next call.
    ready: bool,
}

impl<S, R> Service<R> for Limited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.ready {
            if let Some(waiting) = self.waiting.as_mut() {
                if waiting.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.waiting = None;
            }
            // Each change to the bucket is whole: a poisoned lock still holds a valid one.
            let wait = self
                .bucket
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(Instant::now());
            match wait {
                None => self.ready = true,
                Some(wait) => self.waiting = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.ready = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[test]
    fn a_full_bucket_gives_its_burst_then_one_token_per_period() {
        let start = Instant::now();
        let mut bucket = Bucket::new(20.0, 30, start);
        for _ in 0..30 {
            assert_eq!(bucket.take(start), None);
        }
        let wait = bucket.take(start).expect("empty");
        assert!((wait.as_secs_f64() - 0.05).abs() < 1e-9, "{wait:?}");
        let later = start + Duration::from_millis(50);
        assert_eq!(bucket.take(later), None);
        assert!(bucket.take(later).is_some());
        // Idle for long, it fills up to the burst and no further.
        let idle = later + Duration::from_secs(3600);
        for _ in 0..30 {
            assert_eq!(bucket.take(idle), None);
        }
        assert!(bucket.take(idle).is_some());
    }

    #[test]
    fn no_positive_rate_is_no_limit() {
        let now = Instant::now();
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut bucket = Bucket::new(qps, 1, now);
            for _ in 0..1000 {
                assert_eq!(bucket.take(now), None);
            }
        }
    }

    /// 130 requests through the layer at 20 a second with a burst of 30:
    /// the first 30 at once, the other 100 over 5 s (measured on tokio's
    /// paused clock).
    #[tokio::test(start_paused = true)]
    async fn requests_through_the_layer_keep_to_the_rate() {
        let start = Instant::now();
        let service = tower::service_fn(|_: ()| async move { Ok::<_, ()>(Instant::now()) });
        let mut limited = RateLimit::new(20.0, 30).layer(service);
        let mut sent = Vec::new();
        for _ in 0..130 {
            let at = limited
                .ready()
                .await
                .expect("ready")
                .call(())
                .await
                .expect("answered");
            sent.push(at.duration_since(start));
        }
        assert!(sent[..30].iter().all(|t| *t == Duration::ZERO), "{sent:?}");
        let last = sent[129].as_secs_f64();
        assert!(
            (4.99..=5.01).contains(&last),
            "the last request went at {last}s"
        );
        // No second holds more than 20 requests after the burst.
        for second in 1..5u64 {
            let within = sent.iter().filter(|t| t.as_secs() == second).count();
            assert!(within <= 20, "{within} requests in second {second}");
        }
    }
}
