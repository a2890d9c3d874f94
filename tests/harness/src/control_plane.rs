//! A real Kubernetes control plane for the end-to-end tests, on loopback:
//! etcd, kube-apiserver (RBAC on, client-certificate users, an audit log of
//! every write and of Tandem's reads), kube-controller-manager (garbage
//! collection, namespaces, Deployments, ReplicaSets, StatefulSets,
//! ServiceAccounts, disruption budgets, node lifecycle, taint eviction, pod
//! garbage collection, PodGroup protection, the HPA), kube-scheduler, kwok
//! (fake GPU nodes and the pods' lifecycles) and the LeaderWorkerSet manager
//! with its webhooks; on demand, a custom metrics API behind the aggregation
//! layer ([`ControlPlane::custom_metrics`]). The binaries are built once
//! from the upstream Go modules pinned in `tests/cluster/` by
//! `tests/cluster/build.sh` (see its README).
//!
//! One control plane that the scenarios share ([`ControlPlane::shared`]),
//! and one of its own for each group of scenarios that changes what the
//! whole cluster sees ([`ControlPlane::own`]), each with
//! Tandem installed as a user would: its CRDs and the upstream ones from
//! their Go modules (`super::upstream`), the RBAC of
//! `manifests/base/rbac.yaml` bound to Tandem's identity, its webhook
//! configurations from `webhooks/` pointed at the test's `tandem serve` by
//! URL. Each scenario works in a namespace of its own, with GPU nodes of its
//! own ([`super::scenario::Scenario::nodes`]): the scheduler binds the pods
//! and kwok's stages make them Ready; no test sets a pod's status.
//!
//! Every process is started under a small supervisor that ends it when this
//! test process goes away (its stdin, a pipe this process holds, closes), so
//! nothing outlives the test binary, however it ends.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;

use crate::audit::{self, AuditLog};
use crate::certificates::{Authority, Identity};
use crate::free_port;
use crate::modules::{binaries, kustomize, lws_module_dir};
use crate::request::Request;
use crate::serve::Tandem;
use crate::supervision::{Supervised, wait_for_port};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

/// Tandem's identity: a client certificate whose subject is its service
/// account, so RBAC bindings to the ServiceAccount apply as in a cluster.
pub const TANDEM_USER: &str = "system:serviceaccount:tandem-system:tandem";
const TANDEM_GROUPS: [&str; 2] = [
    "system:serviceaccounts",
    "system:serviceaccounts:tandem-system",
];
/// The test's own user: cluster-admin through `system:masters`.
pub const ADMIN_USER: &str = "e2e-admin";
/// The field manager the tests write with, as `kubectl` would.
pub const TEST_MANAGER: &str = "e2e-test";

/// Why the real control plane cannot run here, or None when it can.
/// Without Go (a user's machine) or the upstream CRDs the tests that need
/// it print that they are skipped; with `CI=true` a missing piece fails.
pub fn unavailable() -> Option<String> {
    let go = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    let reason = if !go {
        Some(
            "no Go toolchain on PATH: install Go 1.26 or later (https://go.dev/dl), which builds \
             the control plane and fetches the upstream CRDs through the Go module proxy \
             (tests/cluster/README.md)"
                .to_owned(),
        )
    } else {
        super::upstream_crds_or_why().err()
    };
    crate::failed_under_ci("the real control plane cannot run", reason)
}

/// One control plane of the test process.
pub struct ControlPlane {
    pub dir: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    pub ca_pem: String,
    admin: Identity,
    tandem: Identity,
    /// The run's CA, which signs the identities of service accounts that run
    /// as processes here (an endpoint picker).
    authority: Authority,
    /// The API server's audit log (see [`audit::policy`]).
    pub audit: AuditLog,
    processes: Mutex<Vec<Supervised>>,
    /// Where `tandem serve --dev` of this binary keeps its files.
    pub tandem_dir: PathBuf,
    /// The custom metrics API, once a test has asked for it
    /// ([`ControlPlane::custom_metrics`]).
    custom_metrics: tokio::sync::OnceCell<CustomMetrics>,
    /// The Tandem its scenarios share ([`Tandem::shared`]).
    pub(crate) tandem_serve: OnceLock<Tandem>,
}

/// The schedulers the control plane's kube-scheduler runs, as profiles: the
/// default one, and `volcano`, which binds the pods Tandem gives to Volcano
/// like any other pod (Volcano's own scheduler cannot be built here).
pub const SCHEDULER_PROFILES: [&str; 2] = ["default-scheduler", "volcano"];

/// The name of [`ControlPlane::shared`].
pub const SHARED: &str = "shared";

/// The control planes of this test process, by name, each started on
/// first use.
static PLANES: Mutex<BTreeMap<&'static str, &'static OnceLock<ControlPlane>>> =
    Mutex::new(BTreeMap::new());

impl ControlPlane {
    /// The control plane the scenarios share, each in namespaces and on
    /// nodes of its own, started on first use (the binaries are built first
    /// when they are not cached yet).
    pub fn shared() -> &'static ControlPlane {
        ControlPlane::named(SHARED, true, WORKLOAD_GATES)
    }

    /// A control plane of its own for the scenarios that change what the
    /// whole cluster sees (its CRDs, webhooks, RBAC, or Tandem's process),
    /// which would disturb the scenarios of the shared one. Every call with
    /// the same `name` gets the same plane.
    pub fn own(name: &'static str) -> &'static ControlPlane {
        ControlPlane::named(name, true, WORKLOAD_GATES)
    }

    /// [`ControlPlane::own`] with no audit log (the API server logs
    /// nothing): for the scale benchmark, where logging every write with its
    /// bodies would be most of the API server's work. [`ControlPlane::requests`]
    /// then finds none. The first call with a name decides.
    pub fn own_without_audit(name: &'static str) -> &'static ControlPlane {
        ControlPlane::named(name, false, WORKLOAD_GATES)
    }

    /// [`ControlPlane::own`] with feature gates `gates` on kube-apiserver,
    /// kube-controller-manager and kube-scheduler instead of
    /// [`WORKLOAD_GATES`]: a cluster whose gates differ. The first call with
    /// a name decides.
    pub fn own_with_gates(name: &'static str, gates: &'static str) -> &'static ControlPlane {
        ControlPlane::named(name, true, gates)
    }

    fn named(name: &'static str, audit: bool, gates: &'static str) -> &'static ControlPlane {
        let cell: &'static OnceLock<ControlPlane> = {
            let mut planes = PLANES.lock().expect("the planes");
            match planes.get(name) {
                Some(cell) => cell,
                None => {
                    let cell = Box::leak(Box::new(OnceLock::new()));
                    planes.insert(name, cell);
                    cell
                }
            }
        };
        cell.get_or_init(|| ControlPlane::start(name, audit, gates))
    }

    /// Stops the plane named `name`, if this process started it: every
    /// process it runs (and every Tandem, picker or adapter started on it),
    /// so that a plane whose scenarios are done costs no CPU while the
    /// others run. Its directory stays, to be read after a failure.
    pub fn stop(name: &str) {
        let cell = PLANES.lock().expect("the planes").get(name).copied();
        if let Some(plane) = cell.and_then(OnceLock::get) {
            plane.stop_processes();
        }
    }

    /// Kills every process whose command line names this plane's
    /// directory: its components, their supervisors, and what the tests
    /// started on it (Tandem's `--cert-dir`, a picker's kubeconfig), all
    /// of which keep their files there.
    fn stop_processes(&self) {
        // Every path of the plane's is below its directory: matching the
        // directory with its slash leaves a plane whose name merely starts
        // with this one's alone.
        let dir = format!("{}/", self.dir.display());
        let mine = std::process::id().to_string();
        let pids: Vec<String> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()) && *pid != mine)
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|line| String::from_utf8_lossy(&line).contains(&dir))
            })
            .collect();
        if !pids.is_empty() {
            let _ = Command::new("kill").arg("-KILL").args(&pids).status();
        }
        eprintln!(
            "control plane {} stopped ({} processes)",
            self.dir.display(),
            pids.len()
        );
    }

    fn start(name: &str, audit: bool, gates: &'static str) -> ControlPlane {
        let bin = binaries().to_path_buf();
        remove_stale_runs();
        let dir = std::env::temp_dir().join(format!("tandem-e2e-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the control plane's directory");
        eprintln!("control plane in {}", dir.display());

        let authority = Authority::of_the_cluster();
        let ca_pem = authority.pem();
        let serving = authority.serving(&["127.0.0.1", "localhost"]);
        let admin = authority.client(ADMIN_USER, &["system:masters"]);
        let tandem = authority.client(TANDEM_USER, &TANDEM_GROUPS);
        let controller_manager = authority.client("system:kube-controller-manager", &[]);
        let lws = authority.client(
            "system:serviceaccount:lws-system:lws-controller-manager",
            &["system:masters"],
        );
        let account_key = rcgen::KeyPair::generate().expect("a service account signing key");
        // The aggregation layer's own CA: kube-apiserver proxies a request
        // to an aggregated API (the custom metrics API) with a client
        // certificate of it and the user in headers, which the backend
        // trusts only from this CA and this name.
        let front_proxy = Authority::named("e2e-front-proxy-ca");
        let proxy_client = front_proxy.client(FRONT_PROXY_CLIENT, &[]);
        let files = [
            ("ca.crt", ca_pem.clone()),
            ("apiserver.crt", serving.cert_pem.clone()),
            ("apiserver.key", serving.key_pem.clone()),
            ("sa.key", account_key.serialize_pem()),
            ("sa.pub", account_key.public_key_pem()),
            ("front-proxy-ca.crt", front_proxy.pem()),
            ("front-proxy-client.crt", proxy_client.cert_pem),
            ("front-proxy-client.key", proxy_client.key_pem),
            (
                "audit-policy.yaml",
                if audit {
                    audit::policy()
                } else {
                    "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n".to_owned()
                },
            ),
        ];
        for (name, contents) in files {
            std::fs::write(dir.join(name), contents).expect("a control plane file");
        }

        let mut processes = Vec::new();
        let etcd_port = free_port();
        let mut etcd = Supervised::start(
            "etcd",
            &dir,
            &bin.join("etcd"),
            &[
                format!("-data-dir={}", dir.join("etcd").display()),
                format!("-listen=http://127.0.0.1:{etcd_port}"),
                format!("-peer=http://127.0.0.1:{}", free_port()),
            ],
            &[],
        );
        wait_for_port(etcd_port, "etcd", &mut etcd, 60);
        processes.push(etcd);

        let api_port = free_port();
        let audit_log = dir.join("audit.log");
        let apiserver = Supervised::start(
            "kube-apiserver",
            &dir,
            &bin.join("kube-apiserver"),
            &apiserver_args(&dir, (etcd_port, api_port), &audit_log, gates),
            &[],
        );
        processes.push(apiserver);
        let server = format!("https://127.0.0.1:{api_port}");
        let plane = ControlPlane {
            tandem_dir: dir.join("tandem"),
            dir: dir.clone(),
            server,
            ca_pem,
            admin,
            tandem,
            authority,
            audit: AuditLog::at(audit_log),
            processes: Mutex::new(processes),
            custom_metrics: tokio::sync::OnceCell::new(),
            tandem_serve: OnceLock::new(),
        };
        block_on(plane.wait_api_server_ready());

        let kcm_kubeconfig = dir.join("kube-controller-manager.kubeconfig");
        std::fs::write(&kcm_kubeconfig, plane.kubeconfig_for(&controller_manager))
            .expect("kubeconfig");
        plane.spawn(
            "kube-controller-manager",
            &bin.join("kube-controller-manager"),
            &controller_manager_args(&dir, &kcm_kubeconfig, gates),
            &[],
        );
        plane.start_scheduler(&bin, &plane.authority, gates);
        plane.start_nodes(&bin, &plane.authority);

        block_on(plane.install());
        plane.start_leader_worker_sets(&bin, &plane.authority, &lws);
        plane
    }

    /// Starts kube-scheduler as `system:kube-scheduler` (the bootstrap
    /// ClusterRole of that name is what it runs under), with the gang and
    /// feature gates `gates` (the gang and topology ones, [`WORKLOAD_GATES`],
    /// but for a cluster without them). It has two profiles: the default
    /// scheduler, and one named `volcano` that binds the pods Tandem gives
    /// to Volcano like any other pod. Volcano's own scheduler cannot be
    /// built here (tests/cluster/README.md), so that profile does not
    /// gang-schedule: no test claims Volcano's gang.
    fn start_scheduler(&self, bin: &Path, authority: &Authority, gates: &str) {
        let identity = authority.client("system:kube-scheduler", &[]);
        let kubeconfig = self.dir.join("kube-scheduler.kubeconfig");
        std::fs::write(&kubeconfig, self.kubeconfig_for(&identity)).expect("kubeconfig");
        let config = self.dir.join("kube-scheduler.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                 clientConnection:\n  kubeconfig: {}\n  qps: 200\n  burst: 400\n\
                 leaderElection:\n  leaderElect: false\n\
                 profiles:\n{}",
                kubeconfig.display(),
                SCHEDULER_PROFILES
                    .iter()
                    .map(|name| format!("- schedulerName: {name}\n"))
                    .collect::<String>()
            ),
        )
        .expect("the scheduler's configuration");
        self.spawn(
            "kube-scheduler",
            &bin.join("kube-scheduler"),
            &[
                format!("--config={}", config.display()),
                format!("--feature-gates={gates}"),
                "--secure-port=0".into(),
            ],
            &[],
        );
    }

    /// Starts kwok's controller: it plays every node annotated
    /// `kwok.x-k8s.io/node: fake` (the tests make them, [`ControlPlane::nodes`])
    /// and the pods bound to them, through the stages of
    /// `tests/cluster/kwok/stages.yaml`; it renews each node's Lease as a
    /// kubelet does.
    fn start_nodes(&self, bin: &Path, authority: &Authority) {
        let identity = authority.client("kwok", &["system:masters"]);
        let kubeconfig = self.dir.join("kwok.kubeconfig");
        std::fs::write(&kubeconfig, self.kubeconfig_for(&identity)).expect("kubeconfig");
        self.spawn(
            "kwok",
            &bin.join("kwok"),
            &[
                format!("--kubeconfig={}", kubeconfig.display()),
                format!(
                    "--config={}",
                    super::repo_path("tests/cluster/kwok/stages.yaml").display()
                ),
                format!("--manage-nodes-with-annotation-selector={KWOK_NODE}=fake"),
                format!("--node-lease-duration-seconds={NODE_LEASE_SECONDS}"),
            ],
            &[],
        );
    }

    /// Creates `nodes` (kwok plays them: Ready within a second or so) and
    /// waits until each is Ready and free of the not-ready taint, so the
    /// scheduler can bind to it.
    pub async fn nodes(&self, nodes: &[Value]) {
        let client = self.admin().await.expect("an admin client");
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
        for node in nodes {
            api.create(
                &PostParams::default(),
                &serde_json::from_value(node.clone()).expect("a Node"),
            )
            .await
            .unwrap_or_else(|e| panic!("creating node {}: {e}", node["metadata"]["name"]));
        }
        // The node lifecycle controller lifts each node's not-ready taint
        // with a PATCH, at its client's 20 requests a second shared with its
        // other work: 800 nodes took it more than a minute.
        let allowed = Duration::from_secs(60) + Duration::from_millis(250) * nodes.len() as u32;
        let deadline = Instant::now() + allowed;
        for node in nodes {
            let name = node["metadata"]["name"].as_str().expect("a node name");
            loop {
                let stored = api.get(name).await.expect("the node");
                let ready = stored
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let tainted = stored
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|t| t.key.starts_with("node.kubernetes.io/"));
                if ready && !tainted {
                    break;
                }
                self.assert_alive();
                assert!(
                    Instant::now() < deadline,
                    "node {name} not Ready and schedulable within {allowed:?}: {:?}, taints {:?}",
                    stored.status.and_then(|s| s.conditions),
                    stored.spec.and_then(|s| s.taints)
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    fn spawn(&self, name: &str, command: &Path, args: &[String], env: &[(&str, String)]) {
        let process = Supervised::start(name, &self.dir, command, args, env);
        self.processes.lock().expect("processes").push(process);
    }

    /// The process id of each process of the control plane, by name
    /// (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `kube-scheduler`, `kwok`, `lws-manager`, and `metrics-adapter` once
    /// a test has asked for the custom metrics API): the process itself, not
    /// its supervisor.
    pub fn pids(&self) -> Vec<(String, Option<u32>)> {
        self.processes
            .lock()
            .expect("processes")
            .iter()
            .map(|p| (p.name.clone(), p.pid()))
            .collect()
    }

    /// Asserts every process of the control plane is still running.
    pub fn assert_alive(&self) {
        for process in self.processes.lock().expect("processes").iter_mut() {
            assert!(
                process.alive(),
                "{} of the control plane exited; its log:\n{}",
                process.name,
                process.log_tail()
            );
        }
    }

    async fn wait_api_server_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(client) = self.admin().await {
                let request = http::Request::get("/readyz")
                    .body(Vec::new())
                    .expect("a request");
                if let Ok(text) = client.request_text(request).await
                    && text.trim() == "ok"
                {
                    return;
                }
            }
            self.assert_alive();
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready within 90 s"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A kubeconfig for `identity` against this control plane.
    pub fn kubeconfig_for(&self, identity: &Identity) -> String {
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        serde_json::to_string(&json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": self.server,
                "certificate-authority-data": b64(&self.ca_pem),
            }}],
            "users": [{"name": "user", "user": {
                "client-certificate-data": b64(&identity.cert_pem),
                "client-key-data": b64(&identity.key_pem),
            }}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "user"}}],
            "current-context": "e2e",
        }))
        .expect("a kubeconfig")
    }

    /// A kubeconfig for ServiceAccount `name` of `namespace`: a client
    /// certificate with the user and groups the API server gives that
    /// account's tokens, so the RBAC bound to the account is what applies.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> String {
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let group = format!("system:serviceaccounts:{namespace}");
        let identity = self
            .authority
            .client(&user, &["system:serviceaccounts", &group]);
        self.kubeconfig_for(&identity)
    }

    /// Tandem's kubeconfig: its service account's identity.
    pub fn tandem_kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.tandem)
    }

    /// A client for `identity`, bound to the calling test's runtime.
    async fn client_for(&self, identity: &Identity) -> Result<kube::Client, kube::Error> {
        client_of(
            Kubeconfig::from_yaml(&self.kubeconfig_for(identity))
                .map_err(|e| kube::Error::Service(e.into()))?,
        )
        .await
    }

    /// A cluster-admin's kubeconfig, as a user running `tandem check` has.
    pub fn admin_kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.admin)
    }

    /// `tandem check -o json` with a cluster admin's kubeconfig: its exit
    /// code and answer.
    pub fn tandem_check(&self) -> (Option<i32>, Value) {
        let dir = tempfile::tempdir().expect("a scratch folder");
        let kubeconfig = dir.path().join("admin.kubeconfig");
        std::fs::write(&kubeconfig, self.admin_kubeconfig()).expect("the kubeconfig written");
        let output = Command::new(crate::tandem_binary())
            .arg("check")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["-o", "json"])
            .output()
            .expect("tandem check runs");
        let answer = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
            panic!(
                "tandem check answered no JSON: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (output.status.code(), answer)
    }

    /// The line of [`ControlPlane::tandem_check`]'s answer about `dependency`
    /// ("Kubernetes PodGroup", …); panics naming the answer when there is none.
    pub fn tandem_check_line(&self, dependency: &str) -> Value {
        let (_, answer) = self.tandem_check();
        answer["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["dependency"] == dependency)
            .cloned()
            .unwrap_or_else(|| panic!("no {dependency} line: {answer:#}"))
    }

    /// The objects `kubectl apply -k DIR` would send ([`kustomize`]).
    pub fn kustomize(&self, dir: &Path) -> Result<Vec<Value>, String> {
        kustomize(dir)
    }

    /// A cluster-admin client, bound to the calling test's runtime.
    pub async fn admin(&self) -> Result<kube::Client, kube::Error> {
        self.client_for(&self.admin).await
    }

    /// A client acting as kwok (the user `kwok`, of `system:masters`), for
    /// checking what `tests/cluster/kwok/uid-safe-deletes.yaml` lets it do.
    pub async fn as_kwok(&self) -> Result<kube::Client, kube::Error> {
        client_of(
            Kubeconfig::read_from(self.dir.join("kwok.kubeconfig"))
                .map_err(|e| kube::Error::Service(e.into()))?,
        )
        .await
    }

    /// A client acting as Tandem (for checking what its RBAC allows).
    pub async fn as_tandem(&self) -> Result<kube::Client, kube::Error> {
        self.client_for(&self.tandem).await
    }

    /// Installs what a user installs before Tandem: the upstream CRDs
    /// (LeaderWorkerSet, PodGroup, Gateway API, InferencePool), Tandem's
    /// namespace, CRDs, RBAC and pod-patch policy from `manifests/`.
    async fn install(&self) {
        let client = self.admin().await.expect("an admin client");
        let upstream = super::upstream_crds_dir().expect("checked by unavailable()");
        let mut crds = Vec::new();
        for entry in std::fs::read_dir(&upstream).expect("the upstream CRDs") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                crds.extend(super::yaml_documents(&path));
            }
        }
        for name in [
            "inferenceservices.fusioninfer.io.yaml",
            "scaleviews.fusioninfer.io.yaml",
            "resourcescalinggroups.resourcescalinggroup.com.yaml",
        ] {
            crds.extend(super::yaml_documents(&super::repo_path(&format!(
                "manifests/crds/{name}"
            ))));
        }
        // LWS's manager also runs a DisaggregatedSet controller, which
        // needs its CRD; it comes from the same module as the manager.
        crds.extend(super::yaml_documents(&lws_module_dir().join(
            "config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml",
        )));
        for crd in &crds {
            apply(&client, crd).await;
        }
        for crd in &crds {
            wait_established(
                &client,
                crd["metadata"]["name"].as_str().expect("a CRD name"),
            )
            .await;
        }
        for object in super::yaml_documents(&super::repo_path("manifests/base/namespace.yaml"))
            .into_iter()
            .chain(super::yaml_documents(&super::repo_path(
                "manifests/base/rbac.yaml",
            )))
            .chain(super::yaml_documents(&super::repo_path(
                "manifests/base/pod-patches.yaml",
            )))
            .chain(super::yaml_documents(&super::repo_path(
                "tests/cluster/kwok/uid-safe-deletes.yaml",
            )))
        {
            apply(&client, &object).await;
        }
    }

    /// The custom metrics API (`custom.metrics.k8s.io` v1beta2 and v1beta1),
    /// started and registered on first call: custom-metrics-apiserver's test
    /// adapter as a process, serving on a loopback port with a certificate
    /// for `custom-metrics-apiserver.custom-metrics.svc`, behind an
    /// ExternalName Service pointing at `localhost` and an APIService per
    /// version. Returns once the aggregator reports both Available and the
    /// API answers. The values it serves are the ones a test writes
    /// ([`CustomMetrics::set`]); it serves nothing else.
    pub async fn custom_metrics(&self) -> &CustomMetrics {
        self.custom_metrics
            .get_or_init(|| self.start_custom_metrics())
            .await
    }

    async fn start_custom_metrics(&self) -> CustomMetrics {
        // The adapter takes values on a fixed plain-HTTP port of all
        // interfaces (test-adapter/main.go): say so if something holds it.
        if let Err(e) = std::net::TcpListener::bind(("0.0.0.0", CustomMetrics::WRITE_PORT)) {
            panic!(
                "the custom metrics test adapter takes its values on port {}, which is \
                 taken here ({e}): free it to run the autoscaling scenarios",
                CustomMetrics::WRITE_PORT
            );
        }
        let dir = self.dir.join("metrics-adapter");
        std::fs::create_dir_all(&dir).expect("the adapter's directory");
        let host = format!("{METRICS_SERVICE}.{METRICS_NAMESPACE}.svc");
        let serving = self
            .authority
            .serving(&[host.as_str(), "localhost", "127.0.0.1"]);
        std::fs::write(dir.join("tls.crt"), &serving.cert_pem).expect("the adapter's cert");
        std::fs::write(dir.join("tls.key"), &serving.key_pem).expect("the adapter's key");
        // It lists the objects a metric describes, reviews the tokens and
        // access of whoever asks (the HPA controller, through the
        // aggregator) and reads the aggregator's CA from kube-system.
        let identity = self
            .authority
            .client("e2e-metrics-adapter", &["system:masters"]);
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, self.kubeconfig_for(&identity)).expect("kubeconfig");
        let port = free_port();
        let file = |name: &str| dir.join(name).display().to_string();
        self.spawn(
            "metrics-adapter",
            &binaries().join("metrics-adapter"),
            &[
                format!("--secure-port={port}"),
                "--bind-address=127.0.0.1".into(),
                format!("--tls-cert-file={}", file("tls.crt")),
                format!("--tls-private-key-file={}", file("tls.key")),
                format!("--lister-kubeconfig={}", kubeconfig.display()),
                format!("--authentication-kubeconfig={}", kubeconfig.display()),
                format!("--authorization-kubeconfig={}", kubeconfig.display()),
                format!("--cert-dir={}", file("certs")),
            ],
            &[],
        );
        let client = self.admin().await.expect("an admin client");
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let mut objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": METRICS_NAMESPACE}}),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": METRICS_SERVICE, "namespace": METRICS_NAMESPACE},
                   "spec": {"type": "ExternalName", "externalName": "localhost",
                            "ports": [{"name": "https", "port": port}]}}),
        ];
        for (version, priority) in [("v1beta2", 200), ("v1beta1", 100)] {
            objects.push(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": format!("{version}.custom.metrics.k8s.io")},
                "spec": {
                    "group": "custom.metrics.k8s.io", "version": version,
                    "service": {"name": METRICS_SERVICE, "namespace": METRICS_NAMESPACE,
                                "port": port},
                    "caBundle": b64(&self.ca_pem),
                    "groupPriorityMinimum": 100, "versionPriority": priority,
                },
            }));
        }
        for object in &objects {
            apply(&client, object).await;
        }
        let services: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
                "apiservices",
            ),
        );
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let mut waiting = Vec::new();
            for version in ["v1beta2", "v1beta1"] {
                let name = format!("{version}.custom.metrics.k8s.io");
                let available = services.get(&name).await.ok().and_then(|s| {
                    s.data["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "Available")
                        .cloned()
                });
                match available {
                    Some(c) if c["status"] == "True" => {}
                    other => waiting.push(format!("{name}: {other:?}")),
                }
            }
            let answered = client
                .request_text(
                    http::Request::get("/apis/custom.metrics.k8s.io/v1beta2")
                        .body(Vec::new())
                        .expect("a request"),
                )
                .await;
            if waiting.is_empty() && answered.is_ok() {
                return CustomMetrics {
                    write: SocketAddr::from(([127, 0, 0, 1], CustomMetrics::WRITE_PORT)),
                };
            }
            self.assert_alive();
            assert!(
                Instant::now() < deadline,
                "the custom metrics API not available within 90 s: {waiting:?}, {answered:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Starts the LeaderWorkerSet manager with its webhooks on loopback and
    /// registers them (as its kustomization does, with the pod webhooks'
    /// object selectors), by URL.
    fn start_leader_worker_sets(&self, bin: &Path, authority: &Authority, identity: &Identity) {
        let lws_dir = self.dir.join("lws");
        std::fs::create_dir_all(&lws_dir).expect("lws dir");
        let serving = authority.serving(&["127.0.0.1"]);
        std::fs::write(lws_dir.join("tls.crt"), &serving.cert_pem).expect("lws cert");
        std::fs::write(lws_dir.join("tls.key"), &serving.key_pem).expect("lws key");
        let kubeconfig = lws_dir.join("kubeconfig");
        std::fs::write(&kubeconfig, self.kubeconfig_for(identity)).expect("lws kubeconfig");
        let (webhook_port, probe_port) = (free_port(), free_port());
        let config = lws_dir.join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: config.lws.x-k8s.io/v1alpha1\nkind: Configuration\n\
                 leaderElection:\n  leaderElect: false\n\
                 internalCertManagement:\n  enable: false\n\
                 webhook:\n  host: 127.0.0.1\n  port: {webhook_port}\n  certDir: {}\n\
                 metrics:\n  bindAddress: \"0\"\n\
                 health:\n  healthProbeBindAddress: 127.0.0.1:{probe_port}\n",
                lws_dir.display()
            ),
        )
        .expect("lws config");
        let mut manager = Supervised::start(
            "lws-manager",
            &self.dir,
            &bin.join("lws-manager"),
            &[
                format!("--config={}", config.display()),
                format!("--kubeconfig={}", kubeconfig.display()),
            ],
            &[("KUBECONFIG", kubeconfig.display().to_string())],
        );
        wait_for_port(webhook_port, "the LWS webhook", &mut manager, 60);
        self.processes.lock().expect("processes").push(manager);
        let base = format!("https://127.0.0.1:{webhook_port}");
        block_on(async {
            let client = self.admin().await.expect("an admin client");
            let path = lws_module_dir().join("config/webhook/manifests.yaml");
            for mut configuration in super::yaml_documents(&path) {
                let name = configuration["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default();
                configuration["metadata"]["name"] = json!(format!("lws-{name}"));
                super::reach_by_url(&mut configuration, &base, &self.ca_pem);
                // config/webhook/{mutating,validating}-patch.yaml: the pod
                // webhooks see only LeaderWorkerSet pods.
                for webhook in configuration["webhooks"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    if webhook["name"] == "mpod.kb.io" || webhook["name"] == "vpod.kb.io" {
                        webhook["objectSelector"] = json!({"matchExpressions": [
                            {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}
                        ]});
                    }
                }
                apply(&client, &configuration).await;
            }
        });
    }

    /// Registers Tandem's webhook configurations from `webhooks/`, pointed at
    /// `base` (`https://127.0.0.1:PORT`) and trusting `ca_pem`.
    pub async fn register_tandem_webhooks(&self, base: &str, ca_pem: &str) {
        let client = self.admin().await.expect("an admin client");
        for file in ["webhooks/validating.yaml", "webhooks/mutating.yaml"] {
            for mut configuration in super::yaml_documents(&super::repo_path(file)) {
                super::reach_by_url(&mut configuration, base, ca_pem);
                apply(&client, &configuration).await;
            }
        }
    }

    /// Creates namespace `name` for one scenario and waits for its default
    /// ServiceAccount (pods cannot be created before it exists).
    ///
    /// The namespace's pods may land only on nodes labelled
    /// [`FLEET_LABEL`]` = name` (the PodNodeSelector admission plugin reads
    /// the annotation), so each scenario has a fleet of its own
    /// ([`super::scenario::Scenario::nodes`]).
    pub async fn namespace(&self, name: &str) -> kube::Client {
        let client = self.admin().await.expect("an admin client");
        apply(
            &client,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": name,
                "annotations": {"scheduler.alpha.kubernetes.io/node-selector":
                    format!("{FLEET_LABEL}={name}")},
            }}),
        )
        .await;
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while accounts.get_opt("default").await.ok().flatten().is_none() {
            assert!(
                Instant::now() < deadline,
                "namespace {name} has no default ServiceAccount after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        client
    }

    /// The writes the API server recorded in its audit log so far.
    pub fn writes(&self) -> Vec<Request> {
        self.audit.requests_where(Request::is_write)
    }

    /// Every event of the audit log so far, as the API server wrote it,
    /// Leases and Events too: what the RBAC check reads, once, at the end.
    pub fn audit_events(&self) -> Vec<Value> {
        self.audit.events()
    }

    /// Every request the API server recorded in its audit log so far.
    pub fn requests(&self) -> Vec<Request> {
        self.audit.requests_where(|_| true)
    }

    /// The requests of the audit log so far that `keep` keeps, in the
    /// order the API server logged them.
    pub fn requests_where(&self, keep: impl Fn(&Request) -> bool) -> Vec<Request> {
        self.audit.requests_where(keep)
    }
}

/// The alpha gates of Kubernetes' own gang and topology scheduling, on
/// kube-apiserver, kube-controller-manager and kube-scheduler alike: without
/// `TopologyAwareWorkloadScheduling` on the API server a PodGroup's
/// `schedulingConstraints` is dropped, and without `GenericWorkload` on the
/// controller manager nothing takes the PodGroupProtection finalizer off.
///
/// And `HPAScaleToZero` (alpha, off by default in v1.36.3), which lets an
/// HPA with an Object or External metric take its target to 0 and back
/// (`pkg/controller/podautoscaler/horizontal.go`); an HPA whose
/// `minReplicas` is 1 or more behaves as without it. It is on every plane,
/// not on one of its own: the custom metrics test adapter takes its values
/// on a fixed port (8080, its `main.go`), so one plane at a time can serve
/// custom metrics, and the shared plane's autoscaling scenarios run one.
pub const WORKLOAD_GATES: &str = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true,HPAScaleToZero=true";

/// How often the HPA controller syncs each HorizontalPodAutoscaler.
pub const HPA_SYNC_SECONDS: u64 = 2;

/// The common name of the client certificate kube-apiserver proxies to
/// aggregated APIs with.
const FRONT_PROXY_CLIENT: &str = "e2e-front-proxy-client";

/// Where the custom metrics API is registered: an ExternalName Service of
/// this name and namespace, pointing at the adapter on loopback.
const METRICS_SERVICE: &str = "custom-metrics-apiserver";
const METRICS_NAMESPACE: &str = "custom-metrics";

/// The custom metrics API of the control plane ([`ControlPlane::custom_metrics`]).
pub struct CustomMetrics {
    /// The adapter's plain-HTTP port for values.
    write: SocketAddr,
}

impl CustomMetrics {
    /// The port the test adapter takes values on (fixed in its `main.go`).
    pub const WRITE_PORT: u16 = 8080;

    /// Sets metric `metric` of the object `resource`/`name` (a plural
    /// resource such as `pods`, or `scaleviews.fusioninfer.io`) in
    /// `namespace` to `value` (a quantity): what the API serves for it from
    /// now on, with the time of this write.
    pub async fn set(
        &self,
        namespace: &str,
        resource: &str,
        name: &str,
        metric: &str,
        value: &str,
    ) {
        let path = format!("/write-metrics/namespaces/{namespace}/{resource}/{name}/{metric}");
        let tcp = tokio::net::TcpStream::connect(self.write)
            .await
            .unwrap_or_else(|e| panic!("connecting to the metrics adapter: {e}"));
        let request = hyper::Request::post(path.as_str())
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(hyper::body::Bytes::from(
                value.to_owned(),
            )))
            .expect("a request");
        let (status, body) = super::exchange(tcp, request)
            .await
            .unwrap_or_else(|e| panic!("writing {path}: {e}"));
        assert!(
            status == 200,
            "writing {value} to {path}: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
}

/// The label of a scenario's nodes: its namespace.
pub const FLEET_LABEL: &str = "e2e.tandem/fleet";

/// The annotation kwok's controller selects its nodes by.
pub const KWOK_NODE: &str = "kwok.x-k8s.io/node";

/// The Lease kwok renews for each node, as a kubelet does: the node
/// lifecycle controller reads a node whose Lease lapses as unreachable.
const NODE_LEASE_SECONDS: u32 = 40;

/// How long a pod tolerates a not-ready or unreachable node before the taint
/// eviction controller evicts it (the API server's default tolerations;
/// Kubernetes' default is 300 s).
pub const NODE_TOLERATION_SECONDS: u32 = 10;

fn apiserver_args(
    dir: &Path,
    (etcd_port, api_port): (u16, u16),
    audit_log: &Path,
    gates: &str,
) -> Vec<String> {
    let file = |name: &str| dir.join(name).display().to_string();
    vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={api_port}"),
        format!("--tls-cert-file={}", file("apiserver.crt")),
        format!("--tls-private-key-file={}", file("apiserver.key")),
        format!("--client-ca-file={}", file("ca.crt")),
        "--authorization-mode=RBAC".into(),
        format!("--service-account-key-file={}", file("sa.pub")),
        format!("--service-account-signing-key-file={}", file("sa.key")),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        "--endpoint-reconciler-type=none".into(),
        "--enable-priority-and-fairness=false".into(),
        "--profiling=false".into(),
        format!("--audit-policy-file={}", file("audit-policy.yaml")),
        format!("--audit-log-path={}", audit_log.display()),
        "--audit-log-mode=blocking".into(),
        "--audit-log-maxsize=0".into(),
        format!("--cert-dir={}", file("apiserver-certs")),
        format!("--feature-gates={gates}"),
        "--runtime-config=scheduling.k8s.io/v1alpha2=true".into(),
        // A scenario's pods land on its own nodes only: its namespace names
        // them (scheduler.alpha.kubernetes.io/node-selector), so scenarios
        // running side by side never take each other's GPUs.
        "--enable-admission-plugins=PodNodeSelector".into(),
        format!("--default-not-ready-toleration-seconds={NODE_TOLERATION_SECONDS}"),
        format!("--default-unreachable-toleration-seconds={NODE_TOLERATION_SECONDS}"),
        // The aggregation layer (the custom metrics API): the CA and name of
        // the client certificate kube-apiserver proxies with, and the
        // headers that carry the user (empty by default). Requests reach an
        // APIService's backend through its Service's cluster address, which
        // for an ExternalName Service is that name
        // (k8s.io/apiserver/pkg/util/proxy ResolveCluster):
        // `--enable-aggregator-routing` would route through EndpointSlices
        // instead, which refuse a loopback address, and refuses ExternalName
        // Services ("unsupported service type").
        format!(
            "--requestheader-client-ca-file={}",
            file("front-proxy-ca.crt")
        ),
        format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
        "--requestheader-username-headers=X-Remote-User".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        format!(
            "--proxy-client-cert-file={}",
            file("front-proxy-client.crt")
        ),
        format!("--proxy-client-key-file={}", file("front-proxy-client.key")),
    ]
}

fn controller_manager_args(dir: &Path, kubeconfig: &Path, gates: &str) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--use-service-account-credentials=true".into(),
        format!("--root-ca-file={}", dir.join("ca.crt").display()),
        format!(
            "--service-account-private-key-file={}",
            dir.join("sa.key").display()
        ),
        // What the scenarios need of Kubernetes' own controllers; the rest
        // (volumes, jobs, certificates, IPAM) have nothing to do here. The
        // node lifecycle controller taints a node that is not Ready, the
        // taint eviction controller evicts its pods once their toleration
        // ends, the pod garbage collector removes the pods of a node that
        // is gone, and the PodGroup protection controller lifts the
        // finalizer the API server puts on Kubernetes' PodGroups. The
        // resource quota controller counts what a ResourceQuota holds.
        "--controllers=namespace-controller,garbage-collector-controller,deployment-controller,\
         replicaset-controller,statefulset-controller,serviceaccount-controller,\
         serviceaccount-token-controller,disruption-controller,endpointslice-controller,\
         root-ca-certificate-publisher-controller,node-lifecycle-controller,\
         taint-eviction-controller,pod-garbage-collector-controller,\
         podgroup-protection-controller,horizontal-pod-autoscaler-controller,\
         resourcequota-controller"
            .into(),
        format!("--feature-gates={gates}"),
        // The HPA controller: a sync every 2 s instead of 15 s, so a
        // scenario sees it act within seconds; Kubernetes' defaults for the
        // rest (a tolerance of 0.1, a 5-minute scale-down stabilization
        // that each scenario's HPA shortens in its own `behavior`).
        format!("--horizontal-pod-autoscaler-sync-period={HPA_SYNC_SECONDS}s"),
        "--horizontal-pod-autoscaler-tolerance=0.1".into(),
        "--node-monitor-period=1s".into(),
        "--concurrent-gc-syncs=5".into(),
    ]
}

/// Removes the directories (about 150 MB each, etcd's data mostly) of
/// earlier test processes that are gone; a run's directory stays until the
/// next run, to be read after a failure.
fn remove_stale_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("tandem-e2e-"))
            .and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Runs `future` to its end on a runtime of its own, on a thread of its
/// own: callable from inside or outside a test's runtime.
pub fn block_on<T: Send>(future: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(future)
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Applies `crd` and waits until the API server serves its kind.
pub async fn install_crd(client: &kube::Client, crd: &Value) {
    apply(client, crd).await;
    wait_established(
        client,
        crd["metadata"]["name"].as_str().expect("a CRD name"),
    )
    .await;
}

/// The API resource of `object`'s kind, found through discovery.
pub async fn resource_of(client: &kube::Client, object: &Value) -> (ApiResource, bool) {
    let api_version = object["apiVersion"].as_str().expect("an apiVersion");
    let kind = object["kind"].as_str().expect("a kind");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((resource, capabilities)) => {
                return (
                    resource,
                    capabilities.scope == kube::discovery::Scope::Namespaced,
                );
            }
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "discovering {api_version} {kind}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A client from `kubeconfig`, bound to the calling test's runtime.
///
/// Without kube's default retry: it retries a 429 up to 15 times, its wait
/// doubling from 5 ms up to 1 000 s, so a test asking whether a disruption
/// budget refuses an eviction (429) waited minutes inside one call for the
/// answer it asked about (2026-12-02: 6 min for the quota scenario's 8 s).
async fn client_of(kubeconfig: Kubeconfig) -> Result<kube::Client, kube::Error> {
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| kube::Error::Service(e.into()))?;
    config.default_retry = false;
    kube::Client::try_from(config)
}

/// An Api for `object`'s kind in its namespace (or cluster-wide).
pub async fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let (resource, namespaced) = resource_of(client, object).await;
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) if namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        _ => Api::all_with(client.clone(), &resource),
    }
}

/// Server-side applies `object` as the test's field manager.
pub async fn apply(client: &kube::Client, object: &Value) {
    try_apply(client, object).await.unwrap_or_else(|e| {
        panic!(
            "applying {} {}: {e}",
            object["kind"], object["metadata"]["name"]
        )
    });
}

/// Server-side applies `object` as the test's field manager.
pub async fn try_apply(
    client: &kube::Client,
    object: &Value,
) -> Result<DynamicObject, kube::Error> {
    let api = api_for(client, object).await;
    let name = object["metadata"]["name"].as_str().expect("a name");
    api.patch(
        name,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
}

pub async fn wait_established(client: &kube::Client, name: &str) {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(crd) = crds.get(name).await {
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "CRD {name} not established within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
