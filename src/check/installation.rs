//! `tandem check` against a cluster: what it has of Tandem's dependencies
//! (their CRDs, read by name) and whether Tandem's own installation works:
//!
//! - its CRDs are there and match this binary's (`manifests/crds/`);
//! - both webhook configurations point at a Service with a ready endpoint,
//!   and their `caBundle` verifies the serving certificate the Deployment
//!   mounts, for the name the API server calls (`{service}.{namespace}.svc`);
//! - the cluster grants Tandem's service account every rule of the shipped
//!   RBAC (`manifests/base/rbac.yaml`, which the tests hold to every request
//!   the controllers make), asked one SubjectAccessReview per rule;
//! - a replica holds the leader Lease.
//!
//! What the cluster says is gathered first ([`gather`]); what it means is
//! decided from that alone ([`judge`]), so each verdict is tested without a
//! cluster.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde::{Deserialize as _, Serialize};
use serde_json::Value;

use crate::plan::shared::installed::{self, Installed};
use crate::plan::shared::native_gang::NativeGang;

const RBAC: &str = include_str!("../../manifests/base/rbac.yaml");
const MUTATING: &str = include_str!("../../webhooks/mutating.yaml");
const VALIDATING: &str = include_str!("../../webhooks/validating.yaml");
/// The Lease a controller replica holds while it leads.
const LEASE: &str = "tandem-controller";
/// Tandem's Deployment and service account, as `manifests/base/` names them.
const DEPLOYMENT: &str = "tandem";
const SERVICE_ACCOUNT: &str = "tandem";

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    /// Something Tandem needs is wrong or missing.
    Fail,
    /// The check could not be made (no permission to read it, a webhook
    /// reached by URL): said, never counted as a failure.
    Unknown,
}

/// One check of Tandem's own installation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: String,
    pub outcome: Outcome,
    /// What was found.
    pub found: String,
    /// What to do, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn check(name: impl Into<String>, outcome: Outcome, found: impl Into<String>) -> Check {
    Check {
        check: name.into(),
        outcome,
        found: found.into(),
        fix: None,
    }
}

impl Snapshot {
    /// Nothing read yet, for Tandem in `namespace`.
    pub fn new(namespace: &str) -> Snapshot {
        Snapshot {
            namespace: namespace.to_owned(),
            dependency_crds: Vec::new(),
            own_crds: Vec::new(),
            webhook_configurations: Vec::new(),
            endpoints: BTreeMap::new(),
            serving_certificate: Ok(None),
            access: Ok(Vec::new()),
            lease: Ok(None),
            native_gang: NativeGang::default(),
        }
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// A read that the cluster answered with the object, with "not there", or
/// with an error (as text: forbidden, unreachable).
pub type Read<T> = Result<Option<T>, String>;

/// One webhook of a configuration, as the cluster has it.
#[derive(Clone, Debug, Default)]
pub struct Webhook {
    pub name: String,
    /// `namespace/name` of the Service it calls; None when called by URL.
    pub service: Option<(String, String)>,
    pub url: Option<String>,
    /// The caBundle, as PEM (empty when not set).
    pub ca_bundle: String,
}

/// What the cluster says, gathered for [`judge`].
#[derive(Debug)]
pub struct Snapshot {
    /// Tandem's namespace.
    pub namespace: String,
    /// The dependencies' CRDs found (as JSON).
    pub dependency_crds: Vec<Value>,
    /// Each of Tandem's CRDs: this binary's, and the cluster's.
    pub own_crds: Vec<(Value, Read<Value>)>,
    /// Each webhook configuration by name: its webhooks.
    pub webhook_configurations: Vec<(String, Read<Vec<Webhook>>)>,
    /// Ready endpoints of each Service called, by `namespace/name`; None
    /// when the Service is not there.
    pub endpoints: BTreeMap<(String, String), Read<usize>>,
    /// The serving certificate the Deployment mounts (PEM), and the Secret
    /// it comes from.
    pub serving_certificate: Read<(String, String)>,
    /// Each rule of the shipped RBAC (as text) and whether the cluster
    /// allows it to Tandem's service account.
    pub access: Result<Vec<(String, bool)>, String>,
    /// The Lease's holder and when it last renewed.
    pub lease: Read<(String, String)>,
    /// What the cluster offers of Kubernetes' own gang scheduling.
    pub native_gang: NativeGang,
}

fn read<T>(result: Result<Option<T>, kube::Error>) -> Read<T> {
    result.map_err(|e| e.to_string())
}

/// One verb on one resource that a rule of the shipped RBAC grants Tandem's
/// service account (the tests' RBAC check reads the same grants).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// `ClusterRole tandem`, `Role tandem-system/tandem-leader-election`.
    pub role: String,
    /// Where it holds; None for every namespace.
    pub namespace: Option<String>,
    pub group: String,
    /// `pods`, `inferenceservices/status`.
    pub resource: String,
    pub verb: String,
    /// The rule's resourceNames; empty for any.
    pub names: Vec<String>,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {}.{group}", self.verb, self.resource)?;
        if !self.names.is_empty() {
            write!(f, " named {}", self.names.join(","))?;
        }
        write!(f, " ({}", self.role)?;
        if let Some(namespace) = &self.namespace {
            write!(f, ", in {namespace}")?;
        }
        write!(f, ")")
    }
}

/// Every grant of `documents` (RBAC manifests) to ServiceAccount `account`:
/// the rules of the ClusterRoles and Roles its bindings name (not those it
/// may only bind for endpoint pickers). A RoleBinding's hold in
/// `namespace`, the install's (kustomize moves the manifests' own).
pub fn shipped_grants(documents: &[Value], namespace: &str, account: &str) -> Vec<Grant> {
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let is_subject = |binding: &Value| {
        binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == account)
    };
    let mut grants = Vec::new();
    for binding in documents.iter().filter(|d| is_subject(d)) {
        let (Some(kind), Some(name)) = (
            binding["roleRef"]["kind"].as_str(),
            binding["roleRef"]["name"].as_str(),
        ) else {
            continue;
        };
        let scope = match binding["kind"].as_str() {
            Some("ClusterRoleBinding") => None,
            Some("RoleBinding") => Some(namespace.to_owned()),
            _ => continue,
        };
        let Some(role) = documents
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        else {
            continue;
        };
        let shown = match &scope {
            Some(namespace) if kind == "Role" => format!("Role {namespace}/{name}"),
            _ => format!("{kind} {name}"),
        };
        for rule in role["rules"].as_array().into_iter().flatten() {
            let names = strings(&rule["resourceNames"]);
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        grants.push(Grant {
                            role: shown.clone(),
                            namespace: scope.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            names: names.clone(),
                        });
                    }
                }
            }
        }
    }
    grants
}

/// One permission the shipped RBAC grants, as one SubjectAccessReview asks
/// it: (namespace for a Role's, API group, resource, verb, resource name).
type Permission = (Option<String>, String, String, String, Option<String>);

/// Every permission the shipped RBAC grants Tandem's service account, one
/// per resource name where a rule names them.
fn shipped_permissions(namespace: &str) -> Vec<Permission> {
    let documents: Vec<Value> = serde_norway::Deserializer::from_str(RBAC)
        .filter_map(|document| Value::deserialize(document).ok())
        .collect();
    let mut permissions = Vec::new();
    for grant in shipped_grants(&documents, namespace, SERVICE_ACCOUNT) {
        let names: Vec<Option<String>> = if grant.names.is_empty() {
            vec![None]
        } else {
            grant.names.iter().cloned().map(Some).collect()
        };
        for name in names {
            permissions.push((
                grant.namespace.clone(),
                grant.group.clone(),
                grant.resource.clone(),
                grant.verb.clone(),
                name,
            ));
        }
    }
    permissions
}

fn permission_text((namespace, group, resource, verb, name): &Permission) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let mut text = format!("{verb} {resource}.{group}");
    if let Some(name) = name {
        text.push_str(&format!(" {name}"));
    }
    if let Some(namespace) = namespace {
        text.push_str(&format!(" in {namespace}"));
    }
    text
}

/// The webhook configurations' names, as `webhooks/` ships them.
fn webhook_configuration_names() -> Vec<String> {
    [MUTATING, VALIDATING]
        .iter()
        .flat_map(|text| serde_norway::Deserializer::from_str(text))
        .filter_map(|document| Value::deserialize(document).ok())
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// Reads what [`judge`] needs. Only a failure to read the dependencies'
/// CRDs is an error: without them nothing can be said.
pub async fn gather(client: &Client, namespace: &str) -> Result<Snapshot, String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut snapshot = Snapshot::new(namespace);
    for dependency in installed::ALL
        .iter()
        .chain([&installed::LEGACY_INFERENCE_POOL])
    {
        let name = installed::crd_name(dependency);
        match crds.get_opt(&name).await {
            Ok(Some(crd)) => {
                let mut crd = serde_json::to_value(crd).map_err(|e| e.to_string())?;
                crd["kind"] = "CustomResourceDefinition".into();
                snapshot.dependency_crds.push(crd);
            }
            Ok(None) => {}
            Err(e) => {
                return Err(format!(
                    "reading the CustomResourceDefinition {name}: {}",
                    crate::check::causes(&e)
                ));
            }
        }
    }
    for own in crate::api::crds::all() {
        let name = own.metadata.name.clone().unwrap_or_default();
        let found = read(crds.get_opt(&name).await)
            .map(|crd| crd.and_then(|crd| serde_json::to_value(crd).ok()));
        snapshot
            .own_crds
            .push((serde_json::to_value(own).unwrap_or_default(), found));
    }

    for name in webhook_configuration_names() {
        let kind = if name.contains("mutating") {
            "mutatingwebhookconfigurations"
        } else {
            "validatingwebhookconfigurations"
        };
        let read = configuration(client, kind, &name).await;
        if let Ok(Some(webhooks)) = &read {
            for (ns, service) in webhooks.iter().filter_map(|w| w.service.clone()) {
                if snapshot
                    .endpoints
                    .contains_key(&(ns.clone(), service.clone()))
                {
                    continue;
                }
                let ready = ready_endpoints(client, &ns, &service).await;
                snapshot.endpoints.insert((ns, service), ready);
            }
        }
        snapshot.webhook_configurations.push((name, read));
    }
    snapshot.native_gang = crate::watch::dependencies::native_gang(client, "tandem-check").await;
    snapshot.serving_certificate = serving_certificate(client, namespace).await;
    snapshot.access = access(client, namespace).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    snapshot.lease = read(leases.get_opt(LEASE).await).map(|lease| {
        lease.and_then(|l| l.spec).map(|spec| {
            (
                spec.holder_identity.unwrap_or_default(),
                spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
            )
        })
    });
    Ok(snapshot)
}

async fn configuration(client: &Client, plural: &str, name: &str) -> Read<Vec<Webhook>> {
    let resource = kube::api::ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: String::new(),
        plural: plural.into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let found = read(api.get_opt(name).await)?;
    Ok(found.map(|object| {
        object.data["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| {
                let config = &w["clientConfig"];
                let bundle = config["caBundle"].as_str().unwrap_or_default();
                let ca_bundle = base64::engine::general_purpose::STANDARD
                    .decode(bundle)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .unwrap_or_default();
                Webhook {
                    name: w["name"].as_str().unwrap_or_default().to_owned(),
                    service: config["service"]["name"].as_str().map(|name| {
                        (
                            config["service"]["namespace"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                            name.to_owned(),
                        )
                    }),
                    url: config["url"].as_str().map(str::to_owned),
                    ca_bundle,
                }
            })
            .collect()
    }))
}

async fn ready_endpoints(client: &Client, namespace: &str, service: &str) -> Read<usize> {
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    if read(services.get_opt(service).await)?.is_none() {
        return Ok(None);
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let selector = format!("kubernetes.io/service-name={service}");
    let list = slices
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| e.to_string())?;
    Ok(Some(
        list.items
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .count(),
    ))
}

/// The `tls.crt` of the Secret Tandem's Deployment mounts, and the
/// Secret's name.
async fn serving_certificate(client: &Client, namespace: &str) -> Read<(String, String)> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let Some(deployment) = read(deployments.get_opt(DEPLOYMENT).await)? else {
        return Ok(None);
    };
    let secret_name = deployment
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.volumes)
        .into_iter()
        .flatten()
        .find_map(|v| v.secret.and_then(|s| s.secret_name));
    let Some(secret_name) = secret_name else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = read(secrets.get_opt(&secret_name).await)?;
    Ok(secret.and_then(|s| {
        let cert = s.data?.get("tls.crt")?.0.clone();
        Some((String::from_utf8(cert).ok()?, secret_name))
    }))
}

/// One SubjectAccessReview per shipped permission, for Tandem's service
/// account.
async fn access(client: &Client, namespace: &str) -> Result<Vec<(String, bool)>, String> {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let user = format!("system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}");
    let mut answers = Vec::new();
    for permission in shipped_permissions(namespace) {
        let (scope, group, resource, verb, name) = permission.clone();
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
            None => (resource, None),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.clone()),
                groups: Some(vec![
                    "system:serviceaccounts".to_owned(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".to_owned(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    namespace: scope,
                    group: Some(group),
                    resource: Some(resource),
                    subresource,
                    verb: Some(verb),
                    name,
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("asking a SubjectAccessReview: {e}"))?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        answers.push((permission_text(&permission), allowed));
    }
    Ok(answers)
}

/// What the dependencies' CRDs install.
pub fn installed(snapshot: &Snapshot) -> Installed {
    Installed::from_crds(&snapshot.dependency_crds)
}

/// The verdicts on Tandem's own installation, from what was gathered.
pub fn judge(snapshot: &Snapshot, now: rustls::pki_types::UnixTime) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(own_crds(snapshot));
    for (name, read) in &snapshot.webhook_configurations {
        checks.push(webhook_configuration(snapshot, name, read, now));
    }
    checks.push(match &snapshot.access {
        Err(e) => check("RBAC", Outcome::Unknown, e.clone()),
        Ok(answers) => {
            let denied: Vec<&str> = answers
                .iter()
                .filter(|(_, allowed)| !allowed)
                .map(|(text, _)| text.as_str())
                .collect();
            if denied.is_empty() {
                check(
                    "RBAC",
                    Outcome::Ok,
                    format!(
                        "all {} permissions of the shipped RBAC are granted",
                        answers.len()
                    ),
                )
            } else {
                check(
                    "RBAC",
                    Outcome::Fail,
                    format!("not granted: {}", denied.join(", ")),
                )
                .fix("apply manifests/base/rbac.yaml of this release")
            }
        }
    });
    checks.push(match &snapshot.lease {
        Ok(Some((holder, renewed))) if !holder.is_empty() => check(
            "leader",
            Outcome::Ok,
            format!("{holder} holds the Lease {LEASE} (renewed {renewed})"),
        ),
        Ok(_) => check(
            "leader",
            Outcome::Fail,
            format!("no replica holds the Lease {}/{LEASE}", snapshot.namespace),
        )
        .fix("is Tandem running? kubectl -n tandem-system get pods,events"),
        Err(e) => check("leader", Outcome::Unknown, e.clone()),
    });
    checks
}

fn own_crds(snapshot: &Snapshot) -> Check {
    let mut problems = Vec::new();
    for (own, found) in &snapshot.own_crds {
        let name = own["metadata"]["name"].as_str().unwrap_or_default();
        match found {
            Ok(None) => problems.push(format!("{name} is not installed")),
            Ok(Some(found)) => {
                let versions = |crd: &Value| -> Vec<(Value, Value)> {
                    crd["spec"]["versions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|v| (v["name"].clone(), v["schema"].clone()))
                        .collect()
                };
                if versions(own) != versions(found) {
                    problems.push(format!("{name} differs from this binary's"));
                }
            }
            Err(e) => return check("Tandem's CRDs", Outcome::Unknown, e.clone()),
        }
    }
    if problems.is_empty() {
        check(
            "Tandem's CRDs",
            Outcome::Ok,
            format!("all {} match this binary's", snapshot.own_crds.len()),
        )
    } else {
        check("Tandem's CRDs", Outcome::Fail, problems.join("; "))
            .fix("apply this release's CRDs first: kubectl apply --server-side -k manifests/crds")
    }
}

fn webhook_configuration(
    snapshot: &Snapshot,
    name: &str,
    read: &Read<Vec<Webhook>>,
    now: rustls::pki_types::UnixTime,
) -> Check {
    let webhooks = match read {
        Err(e) => return check(name, Outcome::Unknown, e.clone()),
        Ok(None) => {
            return check(name, Outcome::Fail, "not installed")
                .fix("apply manifests/ (or manifests/without-cert-manager/)");
        }
        Ok(Some(webhooks)) => webhooks,
    };
    let mut problems = Vec::new();
    let mut unknown = Vec::new();
    for webhook in webhooks {
        if webhook.ca_bundle.trim().is_empty() {
            problems.push(format!("{}: no caBundle", webhook.name));
            continue;
        }
        let Some((namespace, service)) = &webhook.service else {
            unknown.push(format!(
                "{} is called at {}: its endpoint and certificate are not checked",
                webhook.name,
                webhook.url.as_deref().unwrap_or("a URL")
            ));
            continue;
        };
        match snapshot
            .endpoints
            .get(&(namespace.clone(), service.clone()))
        {
            Some(Ok(Some(0))) => problems.push(format!(
                "Service {namespace}/{service} has no ready endpoint"
            )),
            Some(Ok(None)) => problems.push(format!("Service {namespace}/{service} is not there")),
            Some(Err(e)) => unknown.push(e.clone()),
            Some(Ok(Some(_))) | None => {}
        }
        match &snapshot.serving_certificate {
            Ok(Some((cert, secret))) => {
                let host = format!("{service}.{namespace}.svc");
                if let Err(why) = verifies(&webhook.ca_bundle, cert, &host, now) {
                    problems.push(format!(
                        "{}: its caBundle does not verify the certificate in Secret {secret} for {host}: {why}",
                        webhook.name
                    ));
                }
            }
            Ok(None) => unknown.push("the serving certificate's Secret was not found".to_owned()),
            Err(e) => unknown.push(format!("reading the serving certificate: {e}")),
        }
    }
    problems.dedup();
    unknown.dedup();
    if !problems.is_empty() {
        check(name, Outcome::Fail, problems.join("; "))
            .fix("see docs/install.md (certificates) and kubectl -n tandem-system get pods")
    } else if !unknown.is_empty() {
        check(name, Outcome::Unknown, unknown.join("; "))
    } else {
        check(
            name,
            Outcome::Ok,
            format!(
                "{} webhooks reach a ready Service whose certificate the caBundle verifies",
                webhooks.len()
            ),
        )
    }
}

/// Whether `bundle` (PEM) verifies `cert` (PEM, leaf first) for `host` at
/// `now`, as the API server's TLS client would.
pub fn verifies(
    bundle: &str,
    cert: &str,
    host: &str,
    now: rustls::pki_types::UnixTime,
) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for root in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        let root = root.map_err(|e| format!("the caBundle: {e}"))?;
        roots.add(root).map_err(|e| format!("the caBundle: {e}"))?;
    }
    let chain: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate: {e}"))?;
    let (leaf, intermediates) = chain.split_first().ok_or("the certificate is empty")?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider,
    )
    .build()
    .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], now)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> rustls::pki_types::UnixTime {
        rustls::pki_types::UnixTime::now()
    }

    #[test]
    fn the_shipped_rbac_reads_as_permissions_with_names_and_namespaces() {
        let permissions = shipped_permissions("tandem-system");
        assert!(permissions.contains(&(
            None,
            "apiextensions.k8s.io".to_owned(),
            "customresourcedefinitions".to_owned(),
            "watch".to_owned(),
            Some("podgroups.scheduling.volcano.sh".to_owned())
        )));
        assert!(permissions.contains(&(
            Some("tandem-system".to_owned()),
            "coordination.k8s.io".to_owned(),
            "leases".to_owned(),
            "patch".to_owned(),
            Some("tandem-controller".to_owned())
        )));
        assert_eq!(
            webhook_configuration_names(),
            ["tandem-mutating", "tandem-validating"]
        );
        assert!(
            !permissions.iter().any(|p| p.2 == "inferenceobjectives"),
            "what Tandem only binds for endpoint pickers is not Tandem's"
        );
    }

    #[test]
    fn a_ca_bundle_verifies_only_the_certificates_it_signed_for_the_service_name() {
        let host = "tandem-webhook.tandem-system.svc";
        let bundle = crate::certs::issue(&[host.to_owned()], 30).expect("a pair");
        let other = crate::certs::issue(&[host.to_owned()], 30).expect("another pair");
        assert_eq!(
            verifies(&bundle.ca_pem.clone(), &bundle.cert_pem, host, now()),
            Ok(())
        );
        assert!(verifies(&other.ca_pem.clone(), &bundle.cert_pem, host, now()).is_err());
        let wrong_name = verifies(
            &bundle.ca_pem.clone(),
            &bundle.cert_pem,
            "tandem-webhook.other.svc",
            now(),
        );
        assert!(wrong_name.is_err(), "{wrong_name:?}");
    }

    fn snapshot_with(
        webhook: Webhook,
        endpoints: Read<usize>,
        cert: Read<(String, String)>,
    ) -> Snapshot {
        let service = webhook.service.clone().unwrap_or_default();
        Snapshot {
            webhook_configurations: vec![("tandem-validating".to_owned(), Ok(Some(vec![webhook])))],
            endpoints: BTreeMap::from([(service, endpoints)]),
            serving_certificate: cert,
            access: Ok(vec![("get pods.core".to_owned(), true)]),
            lease: Ok(Some(("tandem-0".to_owned(), "now".to_owned()))),
            ..Snapshot::new("tandem-system")
        }
    }

    #[test]
    fn a_webhook_without_endpoints_or_with_a_stale_bundle_fails_and_says_which() {
        let host = "tandem-webhook.tandem-system.svc";
        let pair = crate::certs::issue(&[host.to_owned()], 30).expect("a pair");
        let stale = crate::certs::issue(&[host.to_owned()], 30).expect("another pair");
        let webhook = |bundle: String| Webhook {
            name: "validate.inferenceservices.fusioninfer.io".to_owned(),
            service: Some(("tandem-system".to_owned(), "tandem-webhook".to_owned())),
            url: None,
            ca_bundle: bundle,
        };
        let cert = Ok(Some((
            pair.cert_pem.clone(),
            "tandem-webhook-tls".to_owned(),
        )));
        let good = judge(
            &snapshot_with(webhook(pair.ca_pem.clone()), Ok(Some(2)), cert.clone()),
            now(),
        );
        assert_eq!(good[1].outcome, Outcome::Ok, "{good:#?}");

        let down = judge(
            &snapshot_with(webhook(pair.ca_pem.clone()), Ok(Some(0)), cert.clone()),
            now(),
        );
        assert_eq!(down[1].outcome, Outcome::Fail);
        assert!(down[1].found.contains("no ready endpoint"), "{:?}", down[1]);

        let stale = judge(
            &snapshot_with(webhook(stale.ca_pem.clone()), Ok(Some(2)), cert),
            now(),
        );
        assert_eq!(stale[1].outcome, Outcome::Fail);
        assert!(stale[1].found.contains("does not verify"), "{:?}", stale[1]);
    }

    #[test]
    fn rbac_denials_and_no_leader_fail_and_a_webhook_by_url_is_unknown() {
        let mut snapshot = snapshot_with(
            Webhook {
                name: "w".to_owned(),
                service: None,
                url: Some("https://127.0.0.1:9443".to_owned()),
                ca_bundle: "x".to_owned(),
            },
            Ok(Some(1)),
            Ok(None),
        );
        snapshot.access = Ok(vec![
            ("get pods.core".to_owned(), true),
            ("watch leases.coordination.k8s.io".to_owned(), false),
        ]);
        snapshot.lease = Ok(None);
        let checks = judge(&snapshot, now());
        let outcome = |name: &str| checks.iter().find(|c| c.check == name).map(|c| c.outcome);
        assert_eq!(outcome("tandem-validating"), Some(Outcome::Unknown));
        assert_eq!(outcome("RBAC"), Some(Outcome::Fail));
        assert_eq!(outcome("leader"), Some(Outcome::Fail));
        let rbac = checks.iter().find(|c| c.check == "RBAC").unwrap();
        assert!(
            rbac.found.contains("watch leases.coordination.k8s.io"),
            "{rbac:?}"
        );
    }
}
