//! The controllers' metrics, served on `/metrics` beside the admission ones
//! (one registry, [`crate::server::metrics::Metrics`]): what Tandem did and what it
//! cost the API server.
//!
//! - `tandem_controller_reconciles_total{controller,result}`: reconciles
//!   finished, `result` `ok` or the kind of error ([`error_kind`]);
//! - `tandem_controller_reconcile_duration_seconds{controller}`: how long
//!   they took;
//! - `tandem_kube_requests_total{verb,kind}`: every request sent to the API
//!   server ([`super::api_requests`]);
//! - `tandem_decisions_total{controller,decision,policy}`: each step carried
//!   out ([`crate::plan::shared::decision`]);
//! - `tandem_controller_rest_seconds_total{controller}`: the time objects
//!   rested after a costly pass before their next reconcile
//!   ([`super::rest`]);
//! - the autoscaling signals, read off the cached statuses at each scrape:
//!   `tandem_role_replicas`, `tandem_view_replicas`,
//!   `tandem_view_requested_replicas` and `tandem_ratio_error_replicas`
//!   ([`super::signals`]).
//!
//! `controller` is the kind a controller reconciles: `InferenceService`,
//! `ScaleView` or `ResourceScalingGroup`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::runtime::controller::Action;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{Context, Error};
use crate::plan::shared::decision::Decision;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: &'static str,
    /// `ok`, or the kind of error ([`error_kind`]).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub controller: &'static str,
    pub decision: &'static str,
    pub policy: &'static str,
}

/// The controllers' metric families; see the module documentation.
pub struct ControllerMetrics {
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    pub requests: Family<RequestLabels, Counter>,
    pub decisions: Family<DecisionLabels, Counter>,
    /// Reconciles due that wait for a turn (`super::turns`), by controller.
    pub waiting: Family<ControllerLabels, Gauge>,
    /// Seconds objects rested before a reconcile (`super::rest`).
    pub rested: Family<ControllerLabels, Counter<f64, AtomicU64>>,
    /// The autoscaling signals, read from the caches once they are given.
    pub signals: Arc<super::signals::SignalCollector>,
}

fn reconcile_histogram() -> Histogram {
    // 1 ms to ~33 s: a reconcile of an unchanged world takes milliseconds, a
    // big service's first one (dozens of writes, each retried on conflict)
    // seconds.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Default for ControllerMetrics {
    /// Families registered nowhere: counted, but not served (a reconcile
    /// context of a test, `tandem render`). [`ControllerMetrics::register`]
    /// makes ones that are.
    fn default() -> Self {
        ControllerMetrics {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(reconcile_histogram),
            requests: Family::default(),
            decisions: Family::default(),
            waiting: Family::default(),
            rested: Family::default(),
            signals: Arc::default(),
        }
    }
}

/// The controller label of a kind reconciled (bounded: `other` for a kind
/// no Tandem controller reconciles).
pub fn controller_of(kind: &str) -> &'static str {
    match kind {
        "InferenceService" => "InferenceService",
        "ScaleView" => "ScaleView",
        "ResourceScalingGroup" => "ResourceScalingGroup",
        _ => "other",
    }
}

/// The `result` label of a failed reconcile: for an answer of the API
/// server, what it said (`conflict`, `not_found`, `forbidden`,
/// `unauthorized`, `invalid`, `throttled` for 429, `server_error` for 5xx,
/// `refused` for another 4xx, `api_error` otherwise); `decode` for an
/// answer that could not be read, `transport` for a request that got no
/// answer; `plan` for a spec the plan cannot carry out, `unnamed` for an
/// object without namespace or name.
pub fn error_kind(error: &Error) -> &'static str {
    match error {
        Error::Kube(kube::Error::Api(status)) => match status.code {
            409 => "conflict",
            404 => "not_found",
            403 => "forbidden",
            401 => "unauthorized",
            422 => "invalid",
            429 => "throttled",
            500..=599 => "server_error",
            400..=499 => "refused",
            _ => "api_error",
        },
        Error::Kube(kube::Error::SerdeError(_)) => "decode",
        Error::Kube(_) => "transport",
        Error::Plan { .. } => "plan",
        Error::Unnamed(_) => "unnamed",
    }
}

impl ControllerMetrics {
    /// Families registered in `registry` (prefixed `tandem_` there).
    pub fn register(registry: &mut Registry) -> ControllerMetrics {
        let metrics = ControllerMetrics::default();
        registry.register(
            "controller_reconciles",
            "Reconciles finished, by controller and result (ok, or the kind of error)",
            metrics.reconciles.clone(),
        );
        registry.register(
            "controller_reconcile_duration_seconds",
            "Time a reconcile took, by controller",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "kube_requests",
            "Requests sent to the Kubernetes API server, by verb and kind (resource.group[/subresource])",
            metrics.requests.clone(),
        );
        registry.register(
            "decisions",
            "Steps the controllers carried out, by controller, decision and the scale-down policy that chose the replica (none for other steps)",
            metrics.decisions.clone(),
        );
        registry.register(
            "controller_waiting_reconciles",
            "Reconciles due that wait for a turn, by controller: at most 8 run at once, and a change to an object's own spec goes first",
            metrics.waiting.clone(),
        );
        registry.register(
            "controller_rest_seconds",
            "Seconds objects rested before a reconcile, by controller: after each pass an object waits nineteen times what the pass's own work took, at most 5 s",
            metrics.rested.clone(),
        );
        registry.register_collector(Box::new(metrics.signals.clone()));
        metrics
    }

    /// A reconcile of `controller` finished after `elapsed` with `result`.
    pub fn reconciled<T>(
        &self,
        controller: &'static str,
        elapsed: Duration,
        result: &Result<T, Error>,
    ) {
        let result = match result {
            Ok(_) => "ok",
            Err(error) => error_kind(error),
        };
        self.reconciles
            .get_or_create(&ReconcileLabels { controller, result })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabels { controller })
            .observe(elapsed.as_secs_f64());
    }

    /// One request was sent.
    pub fn requested(&self, verb: &str, kind: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// `controller` carried out `decision`.
    pub fn decided(&self, controller: &'static str, decision: Decision) {
        self.decisions
            .get_or_create(&DecisionLabels {
                controller,
                decision: decision.decision,
                policy: decision.policy,
            })
            .inc();
    }

    /// Decisions counted of `controller`, `decision` and `policy`.
    pub fn decisions(
        &self,
        controller: &'static str,
        decision: &'static str,
        policy: &'static str,
    ) -> u64 {
        self.decisions
            .get(&DecisionLabels {
                controller,
                decision,
                policy,
            })
            .map_or(0, |c| c.get())
    }

    /// Requests counted of `verb` on `kind`.
    pub fn requests(&self, verb: &str, kind: &str) -> u64 {
        self.requests
            .get(&RequestLabels {
                verb: verb.to_owned(),
                kind: kind.to_owned(),
            })
            .map_or(0, |c| c.get())
    }
}

/// `reconcile`, counted and timed in the context's metrics as a reconcile
/// of `controller`: what each controller's `run` hands to kube-runtime.
pub fn measured<K, F, Fut>(
    controller: &'static str,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<Context>) -> BoxFuture<'static, Result<Action, Error>>
where
    F: Fn(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    move |object, ctx| {
        let metrics = ctx.metrics.clone();
        let reconciling = reconcile(object, ctx);
        async move {
            let started = Instant::now();
            let result = reconciling.await;
            metrics.reconciled(controller, started.elapsed(), &result);
            result
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> Error {
        Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        })))
    }

    #[test]
    fn errors_are_named_by_what_the_api_server_said() {
        let named: Vec<&str> = [409, 404, 403, 401, 422, 429, 500, 503, 400, 302]
            .into_iter()
            .map(|code| error_kind(&api_error(code)))
            .collect();
        assert_eq!(
            named,
            [
                "conflict",
                "not_found",
                "forbidden",
                "unauthorized",
                "invalid",
                "throttled",
                "server_error",
                "server_error",
                "refused",
                "api_error"
            ]
        );
        let plan = Error::Plan {
            object: "x".into(),
            reason: "y".into(),
        };
        assert_eq!(error_kind(&plan), "plan");
        assert_eq!(error_kind(&Error::Unnamed("x".into())), "unnamed");
        let decode = serde_json::from_str::<u8>("x").expect_err("not a number");
        assert_eq!(
            error_kind(&Error::Kube(kube::Error::SerdeError(decode))),
            "decode"
        );
    }

    #[test]
    fn the_counters_are_served_with_their_values() {
        let mut registry = Registry::with_prefix("tandem");
        let metrics = ControllerMetrics::register(&mut registry);
        let ok: Result<(), Error> = Ok(());
        metrics.reconciled("InferenceService", Duration::from_millis(3), &ok);
        metrics.reconciled("InferenceService", Duration::from_millis(5), &ok);
        metrics.reconciled(
            "InferenceService",
            Duration::from_millis(7),
            &Err::<(), _>(api_error(409)),
        );
        metrics.requested("patch", "deployments.apps");
        metrics.decided(
            "ResourceScalingGroup",
            Decision {
                decision: "replica_deleted",
                policy: "Newest",
            },
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        for line in [
            r#"tandem_controller_reconciles_total{controller="InferenceService",result="ok"} 2"#,
            r#"tandem_controller_reconciles_total{controller="InferenceService",result="conflict"} 1"#,
            r#"tandem_controller_reconcile_duration_seconds_count{controller="InferenceService"} 3"#,
            r#"tandem_kube_requests_total{verb="patch",kind="deployments.apps"} 1"#,
            r#"tandem_decisions_total{controller="ResourceScalingGroup",decision="replica_deleted",policy="Newest"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
        }
    }

    #[tokio::test]
    async fn a_measured_reconcile_is_counted_by_result_and_timed() {
        // A world that is never read: the reconciles here touch nothing.
        let ctx = Arc::new(Context::new(
            Arc::new(crate::reconcile::memory::Memory::default()),
            Default::default(),
        ));
        let mut failing = measured("ScaleView", |_: Arc<()>, _| async {
            Err(Error::Unnamed("ScaleView x".into()))
        });
        let mut succeeding = measured("ScaleView", |_: Arc<()>, _| async {
            Ok(Action::await_change())
        });
        assert!(failing(Arc::new(()), ctx.clone()).await.is_err());
        assert!(succeeding(Arc::new(()), ctx.clone()).await.is_ok());
        assert!(succeeding(Arc::new(()), ctx.clone()).await.is_ok());
        let count = |result| {
            ctx.metrics
                .reconciles
                .get(&ReconcileLabels {
                    controller: "ScaleView",
                    result,
                })
                .map_or(0, |c| c.get())
        };
        assert_eq!((count("ok"), count("unnamed")), (2, 1));
        let mut text = String::new();
        let mut registry = Registry::default();
        registry.register("duration", "", ctx.metrics.reconcile_duration.clone());
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        assert!(
            text.lines()
                .any(|l| l == r#"duration_count{controller="ScaleView"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn kinds_outside_tandems_controllers_share_one_label() {
        assert_eq!(controller_of("ScaleView"), "ScaleView");
        assert_eq!(controller_of("Deployment"), "other");
    }
}
