//! Every request Tandem sends to the API server, counted by verb and kind:
//! a tower layer on the kube `Client` ([`CountRequests`]), and the pure
//! reading of a request's verb and resource from its method, path and query
//! ([`RequestKind::of`]), the way the API server names them in its own
//! metrics (`apiserver_request_total{verb,resource}`).

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{Method, Request};
use tower::{Layer, Service};

use super::metrics::ControllerMetrics;

/// What one request is: its verb (`get`, `list`, `watch`, `create`, `update`,
/// `patch`, `delete`, `deletecollection`, or the method in lower case for
/// anything else) and its kind: the resource's plural with its API group
/// (`deployments.apps`; the core group has none: `pods`), a subresource
/// after a slash (`deployments.apps/scale`), `discovery` for the API
/// discovery documents, `other` for a path that names no resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestKind {
    pub verb: String,
    pub kind: String,
}

/// Subresources of a namespace, which `/api/v1/namespaces/{name}/...` can
/// also end with (as the API server's own request parser knows them).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl RequestKind {
    /// Reads a request from its method, its path (without the query) and
    /// its query string.
    pub fn of(method: &Method, path: &str, query: Option<&str>) -> RequestKind {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, rest) = match segments.as_slice() {
            ["api"] | ["apis"] | ["api", _] | ["apis", _] | ["apis", _, _] => {
                return RequestKind::new(verb(method, query, false, true), "discovery");
            }
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return RequestKind::new(verb(method, query, false, true), "other"),
        };
        // The old watch paths: /api/v1/watch/namespaces/{ns}/pods.
        let (watch_path, rest) = match rest {
            ["watch", rest @ ..] => (true, rest),
            rest => (false, rest),
        };
        let rest = match rest {
            ["namespaces", _namespace, next, rest @ ..]
                if !NAMESPACE_SUBRESOURCES.contains(next) =>
            {
                let mut within = vec![*next];
                within.extend_from_slice(rest);
                within
            }
            rest => rest.to_vec(),
        };
        let (plural, named, subresource) = match rest.as_slice() {
            [plural] => (*plural, false, None),
            [plural, _name] => (*plural, true, None),
            [plural, _name, subresource, ..] => (*plural, true, Some(*subresource)),
            [] => return RequestKind::new(verb(method, query, false, true), "other"),
        };
        let mut kind = if group.is_empty() {
            plural.to_owned()
        } else {
            format!("{plural}.{group}")
        };
        if let Some(subresource) = subresource {
            kind.push('/');
            kind.push_str(subresource);
        }
        let verb = if watch_path {
            "watch".to_owned()
        } else {
            verb(method, query, !named, false)
        };
        RequestKind { verb, kind }
    }

    fn new(verb: String, kind: &str) -> RequestKind {
        RequestKind {
            verb,
            kind: kind.to_owned(),
        }
    }
}

/// Whether `query` sets `name` to true (`watch=true`, `watch=1`).
fn flag(query: Option<&str>, name: &str) -> bool {
    query.unwrap_or_default().split('&').any(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        key == name && matches!(value, "true" | "1")
    })
}

/// The verb of a request to a collection (`collection`) or to one object,
/// or to a document that is not a resource (`document`: always read as a
/// whole, never listed).
fn verb(method: &Method, query: Option<&str>, collection: bool, document: bool) -> String {
    let verb = match *method {
        Method::GET if flag(query, "watch") => "watch",
        Method::GET if collection && !document => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection && !document => "deletecollection",
        Method::DELETE => "delete",
        ref other => return other.as_str().to_ascii_lowercase(),
    };
    verb.to_owned()
}

/// A tower layer that counts every request passing through it in
/// [`ControllerMetrics`] (`tandem_kube_requests_total`). Put on the kube
/// `Client` with `kube::client::ClientBuilder::with_layer`, it sees each
/// request as the client sends it, once: a request kube's own retry layer
/// repeats after a 429, 503 or 504 counts once.
#[derive(Clone)]
pub struct CountRequests {
    metrics: Arc<ControllerMetrics>,
}

impl CountRequests {
    pub fn new(metrics: Arc<ControllerMetrics>) -> CountRequests {
        CountRequests { metrics }
    }
}

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// A service counting its requests; see [`CountRequests`].
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<ControllerMetrics>,
}

impl<S, B> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let uri = request.uri();
        let kind = RequestKind::of(request.method(), uri.path(), uri.query());
        self.metrics.requested(&kind.verb, &kind.kind);
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(method: Method, path_and_query: &str) -> (String, String) {
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path_and_query, None),
        };
        let kind = RequestKind::of(&method, path, query);
        (kind.verb, kind.kind)
    }

    fn is(verb: &str, kind: &str) -> (String, String) {
        (verb.to_owned(), kind.to_owned())
    }

    #[test]
    fn a_get_of_a_collection_is_a_list_and_of_an_object_a_get() {
        assert_eq!(
            read(
                Method::GET,
                "/apis/leaderworkerset.x-k8s.io/v1/namespaces/default/leaderworkersets?&labelSelector=fusioninfer.io%2Fservice%3Dm"
            ),
            is("list", "leaderworkersets.leaderworkerset.x-k8s.io")
        );
        assert_eq!(
            read(
                Method::GET,
                "/apis/fusioninfer.io/v1alpha1/namespaces/default/scaleviews/v"
            ),
            is("get", "scaleviews.fusioninfer.io")
        );
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces/default/pods"),
            is("list", "pods")
        );
        assert_eq!(
            read(Method::GET, "/api/v1/pods?labelSelector=a"),
            is("list", "pods")
        );
    }

    #[test]
    fn watch_true_is_a_watch_whatever_else_the_query_says() {
        assert_eq!(
            read(
                Method::GET,
                "/apis/apps/v1/deployments?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=12"
            ),
            is("watch", "deployments.apps")
        );
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces/a/pods?watch=1"),
            is("watch", "pods")
        );
        assert_eq!(
            read(Method::GET, "/api/v1/watch/namespaces/a/pods"),
            is("watch", "pods")
        );
        // Not a watch: the flag is false, or another parameter is named so.
        assert_eq!(
            read(Method::GET, "/api/v1/pods?watch=false"),
            is("list", "pods")
        );
        assert_eq!(
            read(Method::GET, "/api/v1/pods?nowatch=true"),
            is("list", "pods")
        );
    }

    #[test]
    fn writes_are_named_as_the_api_server_names_them() {
        let lws = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/d/leaderworkersets";
        assert_eq!(
            read(Method::POST, lws),
            is("create", "leaderworkersets.leaderworkerset.x-k8s.io")
        );
        assert_eq!(
            read(
                Method::PATCH,
                &format!("{lws}/m-decode-0?fieldManager=tandem&force=true")
            ),
            is("patch", "leaderworkersets.leaderworkerset.x-k8s.io")
        );
        assert_eq!(
            read(Method::PUT, &format!("{lws}/m-decode-0")),
            is("update", "leaderworkersets.leaderworkerset.x-k8s.io")
        );
        assert_eq!(
            read(Method::DELETE, &format!("{lws}/m-decode-0")),
            is("delete", "leaderworkersets.leaderworkerset.x-k8s.io")
        );
        assert_eq!(
            read(Method::DELETE, lws),
            is(
                "deletecollection",
                "leaderworkersets.leaderworkerset.x-k8s.io"
            )
        );
        assert_eq!(read(Method::HEAD, "/api/v1/pods"), is("head", "pods"));
    }

    #[test]
    fn a_subresource_follows_its_resource() {
        assert_eq!(
            read(
                Method::GET,
                "/apis/apps/v1/namespaces/d/deployments/web/scale"
            ),
            is("get", "deployments.apps/scale")
        );
        assert_eq!(
            read(
                Method::PATCH,
                "/apis/fusioninfer.io/v1alpha1/namespaces/d/inferenceservices/m/status"
            ),
            is("patch", "inferenceservices.fusioninfer.io/status")
        );
    }

    #[test]
    fn namespaces_are_a_resource_too() {
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces"),
            is("list", "namespaces")
        );
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces/d"),
            is("get", "namespaces")
        );
        assert_eq!(
            read(Method::PUT, "/api/v1/namespaces/d/finalize"),
            is("update", "namespaces/finalize")
        );
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces/d/status"),
            is("get", "namespaces/status")
        );
    }

    #[test]
    fn cluster_scoped_and_leases_are_read_alike() {
        assert_eq!(
            read(
                Method::GET,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x.y"
            ),
            is("get", "customresourcedefinitions.apiextensions.k8s.io")
        );
        assert_eq!(
            read(
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/tandem-system/leases/tandem-controller"
            ),
            is("update", "leases.coordination.k8s.io")
        );
        assert_eq!(
            read(Method::POST, "/apis/events.k8s.io/v1/namespaces/d/events"),
            is("create", "events.events.k8s.io")
        );
    }

    #[test]
    fn discovery_and_unknown_paths_have_a_bounded_kind() {
        assert_eq!(read(Method::GET, "/api"), is("get", "discovery"));
        assert_eq!(read(Method::GET, "/apis"), is("get", "discovery"));
        assert_eq!(read(Method::GET, "/api/v1"), is("get", "discovery"));
        assert_eq!(read(Method::GET, "/apis/apps/v1"), is("get", "discovery"));
        assert_eq!(read(Method::GET, "/apis/apps"), is("get", "discovery"));
        assert_eq!(read(Method::GET, "/version"), is("get", "other"));
        assert_eq!(read(Method::GET, "/"), is("get", "other"));
        assert_eq!(read(Method::GET, ""), is("get", "other"));
        assert_eq!(
            read(Method::GET, "/api/v1/namespaces/d/pods/p/log/extra/parts"),
            is("get", "pods/log")
        );
    }

    #[test]
    fn every_request_through_the_layer_is_counted_once() {
        use tower::ServiceExt;

        let metrics = Arc::new(ControllerMetrics::default());
        let service =
            CountRequests::new(metrics.clone()).layer(tower::service_fn(|_: Request<()>| async {
                Ok::<_, std::convert::Infallible>(())
            }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        for uri in [
            "/api/v1/namespaces/d/pods",
            "/api/v1/namespaces/d/pods?watch=true",
            "/api/v1/namespaces/d/pods",
        ] {
            let request = Request::get(uri).body(()).expect("a request");
            runtime
                .block_on(service.clone().oneshot(request))
                .expect("answered");
        }
        assert_eq!(metrics.requests("list", "pods"), 2);
        assert_eq!(metrics.requests("watch", "pods"), 1);
        assert_eq!(metrics.requests("get", "pods"), 0);
    }
}
