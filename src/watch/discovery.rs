//! Which kinds have a `/scale` subresource, from the API server's discovery
//! (`GET /apis/{group}/{version}`, `GET /api/v1`), cached per group/version.
//!
//! A ResourceScalingGroup may scale any kind whose API has a scale
//! subresource (DESIGN.md §1.2). The webhook must answer at once, so it reads
//! the cache ([`ScaleDiscovery::cached`]): a group/version it has not seen
//! is fetched in the background and, meanwhile, the answer is "cannot know"
//! (a warning, never a guess). The reconciler can wait, so it fetches on a
//! miss ([`ScaleDiscovery::resolve`]). Either way a group/version is fetched
//! again at most every [`REFRESH`]: a kind it did not serve is "not served"
//! until then, so a CRD installed a moment ago is found within that time,
//! and a typo costs one request per [`REFRESH`], not one per admission.
//!
//! Discovery needs no RBAC rule: Kubernetes grants it to every authenticated
//! user (ClusterRole `system:discovery`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;

use crate::plan::resource_scaling_group::adapter::group_version;

/// How long a group/version's discovery stands before a miss fetches it again.
pub const REFRESH: Duration = Duration::from_secs(30);

/// A served kind: its plural and whether it has a `/scale` subresource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    pub plural: String,
    pub has_scale: bool,
}

/// The kinds of one group/version, as of `at`.
struct Fetched {
    /// When it was last fetched or a fetch was started.
    at: Instant,
    /// Kind -> what discovery said; Err: why the last fetch failed (or that
    /// the first is still running).
    kinds: Result<HashMap<String, Discovered>, String>,
}

/// What the cache says about a kind.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Served(Discovered),
    NotServed,
    /// The last fetch failed (or is running) less than [`REFRESH`] ago.
    Failed(String),
    /// Never fetched, or fetched longer than [`REFRESH`] ago without the kind.
    Stale,
}

/// Kind discovery with a cache; cheap to clone (the cache is shared).
#[derive(Clone)]
pub struct ScaleDiscovery {
    client: Client,
    cache: Arc<Mutex<HashMap<String, Fetched>>>,
}

impl ScaleDiscovery {
    pub fn new(client: Client) -> ScaleDiscovery {
        ScaleDiscovery {
            client,
            cache: Arc::default(),
        }
    }

    /// The webhook's answer, without waiting: `Some(Some(_))` served,
    /// `Some(None)` not served, None when discovery has not answered yet
    /// (a fetch is then started in the background, outside a runtime never).
    pub fn cached(&self, api_version: &str, kind: &str) -> Option<Option<Discovered>> {
        match self.answer(api_version, kind) {
            Answer::Served(found) => Some(Some(found)),
            Answer::NotServed => Some(None),
            Answer::Failed(_) => None,
            Answer::Stale => {
                self.start(api_version);
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let this = self.clone();
                    let api_version = api_version.to_owned();
                    runtime.spawn(async move { this.fetch(&api_version).await });
                }
                None
            }
        }
    }

    /// The reconciler's answer: served (with the plural) or not (None);
    /// fetches discovery on a miss. Err says why discovery failed.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<Discovered>, String> {
        if let Answer::Stale = self.answer(api_version, kind) {
            self.start(api_version);
            self.fetch(api_version).await;
        }
        match self.answer(api_version, kind) {
            Answer::Served(found) => Ok(Some(found)),
            Answer::NotServed | Answer::Stale => Ok(None),
            Answer::Failed(reason) => Err(reason),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Fetched>> {
        // The map is only replaced entry by entry, so a panic elsewhere
        // cannot leave it half-written: a poisoned lock is still usable.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answer(&self, api_version: &str, kind: &str) -> Answer {
        let cache = self.lock();
        let Some(fetched) = cache.get(api_version) else {
            return Answer::Stale;
        };
        let fresh = fetched.at.elapsed() < REFRESH;
        match (&fetched.kinds, fresh) {
            (Ok(kinds), _) if let Some(found) = kinds.get(kind) => Answer::Served(found.clone()),
            (Ok(_), true) => Answer::NotServed,
            (Err(reason), true) => Answer::Failed(reason.clone()),
            (_, false) => Answer::Stale,
        }
    }

    /// Marks a fetch as started, so concurrent misses do not start another.
    fn start(&self, api_version: &str) {
        let mut cache = self.lock();
        let entry = cache
            .entry(api_version.to_owned())
            .or_insert_with(|| Fetched {
                at: Instant::now(),
                kinds: Err(format!("discovery of {api_version} has not answered yet")),
            });
        entry.at = Instant::now();
    }

    async fn fetch(&self, api_version: &str) {
        let (group, _) = group_version(api_version);
        let listed = if group.is_empty() {
            self.client.list_core_api_resources(api_version).await
        } else {
            self.client.list_api_group_resources(api_version).await
        };
        let kinds = match listed {
            Ok(list) => Ok(kinds(&list)),
            // The group/version is not served at all: none of its kinds is.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(HashMap::new()),
            Err(error) => {
                tracing::warn!(%error, api_version, "API discovery failed");
                Err(format!("discovery of {api_version} failed: {error}"))
            }
        };
        let mut cache = self.lock();
        let entry = cache
            .entry(api_version.to_owned())
            .or_insert_with(|| Fetched {
                at: Instant::now(),
                kinds: Ok(HashMap::new()),
            });
        entry.at = Instant::now();
        // A failed refresh keeps what an earlier one found.
        if kinds.is_ok() || entry.kinds.is_err() {
            entry.kinds = kinds;
        }
    }
}

/// The kinds of a discovery list: resources without a `/`, each with a scale
/// subresource when `{plural}/scale` is listed too.
fn kinds(list: &APIResourceList) -> HashMap<String, Discovered> {
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| {
            let scale = format!("{}/scale", r.name);
            let has_scale = list.resources.iter().any(|s| s.name == scale);
            (
                r.kind.clone(),
                Discovered {
                    plural: r.name.clone(),
                    has_scale,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A client whose API server serves example.com/v1 (things, with /scale;
    /// gadgets without) and nothing else; counts the requests.
    fn client(requests: Arc<AtomicUsize>) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                requests.fetch_add(1, Ordering::SeqCst);
                let (code, body) = if request.uri().path() == "/apis/example.com/v1" {
                    (
                        200,
                        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "example.com/v1",
                        "resources": [
                            {"name": "things", "singularName": "thing", "namespaced": true, "kind": "Thing", "verbs": ["get"]},
                            {"name": "things/scale", "singularName": "", "namespaced": true, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch"]},
                            {"name": "gadgets", "singularName": "gadget", "namespaced": true, "kind": "Gadget", "verbs": ["get"]},
                        ]}),
                    )
                } else {
                    (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not found"}),
                    )
                };
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).expect("json")))
                    .expect("response");
                send.send_response(response);
            }
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn the_reconciler_fetches_once_per_group_version() {
        let requests = Arc::new(AtomicUsize::new(0));
        let discovery = ScaleDiscovery::new(client(requests.clone()));
        assert_eq!(
            discovery.resolve("example.com/v1", "Thing").await,
            Ok(Some(Discovered {
                plural: "things".into(),
                has_scale: true
            }))
        );
        assert_eq!(
            discovery.resolve("example.com/v1", "Gadget").await,
            Ok(Some(Discovered {
                plural: "gadgets".into(),
                has_scale: false
            }))
        );
        assert_eq!(
            discovery.resolve("example.com/v1", "Nothing").await,
            Ok(None)
        );
        assert_eq!(
            requests.load(Ordering::SeqCst),
            1,
            "one fetch answers all three"
        );
        assert_eq!(discovery.resolve("example.org/v1", "Thing").await, Ok(None));
        assert_eq!(discovery.resolve("example.org/v1", "Other").await, Ok(None));
        assert_eq!(
            requests.load(Ordering::SeqCst),
            2,
            "a group/version that is not served is remembered"
        );
    }

    #[tokio::test]
    async fn the_webhook_does_not_wait_and_knows_after_the_fetch() {
        let requests = Arc::new(AtomicUsize::new(0));
        let discovery = ScaleDiscovery::new(client(requests.clone()));
        assert_eq!(discovery.cached("example.com/v1", "Thing"), None);
        assert_eq!(
            discovery.cached("example.com/v1", "Thing"),
            None,
            "a fetch is running: no second one"
        );
        // Let the background fetch finish (the mock answers on this runtime).
        while requests.load(Ordering::SeqCst) == 0
            || discovery.answer("example.com/v1", "Thing")
                == Answer::Failed("discovery of example.com/v1 has not answered yet".into())
        {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            discovery.cached("example.com/v1", "Thing"),
            Some(Some(Discovered {
                plural: "things".into(),
                has_scale: true
            }))
        );
        assert_eq!(discovery.cached("example.com/v1", "Nothing"), Some(None));
        assert_eq!(requests.load(Ordering::SeqCst), 1);
    }
}
