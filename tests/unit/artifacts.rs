//! The files users apply: generated CRDs, examples, deployment manifests and
//! webhook configurations, checked against the code they describe.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use harness::*;
use serde_json::Value;
use tandem::admission::Kind;
use tandem::api::crds;

/// The kustomize install's CRDs and the Helm chart's (its `crds/`, which
/// Helm installs once and never deletes) are both the generated ones.
#[test]
fn committed_crds_are_the_generated_ones() {
    for dir in ["manifests/crds", "charts/tandem/crds"] {
        for crd in crds::all() {
            let path = repo_path(dir).join(crds::file_name(&crd));
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            let generated = crds::to_yaml(&crd).unwrap();
            assert!(
                committed == generated,
                "{} is stale: run `cargo run -- crds --out-dir {dir}` and commit the result",
                path.display()
            );
        }
        let files = std::fs::read_dir(repo_path(dir))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "yaml")
            })
            .count();
        let kustomization = usize::from(dir == "manifests/crds");
        assert_eq!(
            files,
            crds::all().len() + kustomization,
            "{dir} holds a CRD Tandem no longer defines"
        );
    }
}

fn crd_json(kind: &str) -> Value {
    let crd = crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    serde_json::to_value(crd).unwrap()
}

#[test]
fn crds_have_status_columns_names_and_scale_as_designed() {
    for kind in Kind::ALL {
        let crd = crd_json(kind.name());
        let version = &crd["spec"]["versions"][0];
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert!(
            version["subresources"]["status"].is_object(),
            "{kind}: status subresource"
        );
        assert!(
            version["additionalPrinterColumns"]
                .as_array()
                .is_some_and(|c| c.len() >= 3),
            "{kind}: printer columns"
        );
        let short: Vec<&str> = crd["spec"]["names"]["shortNames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert!(
            !short.is_empty() && !short.contains(&"isvc"),
            "{kind}: short names {short:?} (isvc is KServe's)"
        );
        assert_eq!(
            crd["spec"]["names"]["categories"],
            serde_json::json!(["tandem"])
        );
        let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert!(
            status["observedGeneration"].is_object(),
            "{kind}: observedGeneration"
        );
        let conditions = &status["conditions"];
        assert_eq!(
            conditions["x-kubernetes-list-type"], "map",
            "{kind}: conditions are a list map"
        );
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
    }
    let scale = |kind: &str| crd_json(kind)["spec"]["versions"][0]["subresources"]["scale"].clone();
    assert!(
        scale("InferenceService").is_null(),
        "roles are scaled through ScaleViews"
    );
    assert_eq!(
        scale("ScaleView"),
        serde_json::json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"})
    );
    assert_eq!(
        scale("ResourceScalingGroup"),
        serde_json::json!({"specReplicasPath": ".spec.scalingStrategy.groupConfig.replicas", "statusReplicasPath": ".status.currentReplicas", "labelSelectorPath": ".status.labelSelector"})
    );
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else if path.extension().is_some_and(|e| e == "yaml") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The seed's ResourceScalingGroups target namespace `ai`: they are applied
/// with `-n ai`, as their comments say.
fn namespace_of(path: &Path) -> &'static str {
    if path.to_string_lossy().contains("resourcescalinggroup") {
        "ai"
    } else {
        "default"
    }
}

#[test]
fn every_example_fits_the_crds_and_is_admitted() {
    let files = files_under(&repo_path("examples"));
    assert!(files.len() >= 12, "examples: {files:?}");
    let mut kinds_seen = BTreeSet::new();
    let upstream = upstream_crds("every_example_fits_the_crds_and_is_admitted (upstream part)")
        .map(|dir| upstream_schemas(&dir));
    let mut checked_upstream = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let world =
            tandem::render::parse_world(&path.display().to_string(), &text, namespace_of(&path))
                .unwrap_or_else(|e| panic!("{e}"));
        for object in &world {
            let (api_version, kind) = (
                object["apiVersion"].as_str().unwrap(),
                object["kind"].as_str().unwrap(),
            );
            if Kind::of(api_version, kind).is_none() {
                continue;
            }
            kinds_seen.insert(kind.to_owned());
            let errors = tandem_schema(kind).errors(object);
            assert!(
                errors.is_empty(),
                "{}: {kind} does not fit its CRD: {errors:?}",
                path.display()
            );
        }
        let rendered =
            tandem::render::render(world, &Default::default()).unwrap_or_else(|e| match e {
                tandem::render::RenderError::Denied(denials) => {
                    panic!(
                        "{} is denied: {}",
                        path.display(),
                        denials
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                }
                other => panic!("{}: {other}", path.display()),
            });
        for object in &rendered.apply {
            let (api_version, kind) = (
                object["apiVersion"].as_str().unwrap(),
                object["kind"].as_str().unwrap(),
            );
            if Kind::of(api_version, kind).is_some() {
                let errors = tandem_schema(kind).errors(object);
                assert!(
                    errors.is_empty(),
                    "{}: admitted object does not fit its CRD: {errors:?}",
                    path.display()
                );
            } else if api_version == "scheduling.k8s.io/v1alpha2" && kind == "PodGroup" {
                // Kubernetes' PodGroup is newer than k8s-openapi's types; the
                // real kube-apiserver v1.36.3 takes Tandem's by server-side
                // apply, which refuses an undeclared field
                // (tests/cluster/nodes.rs, the Kubernetes gang scenario).
                // Here: only the fields Tandem means to write.
                let spec = object["spec"].as_object().expect("a spec");
                assert!(
                    spec.keys()
                        .all(|k| k == "schedulingPolicy" || k == "schedulingConstraints"),
                    "{}: {spec:?}",
                    path.display()
                );
                assert!(object["spec"]["schedulingPolicy"]["gang"]["minCount"].as_i64() >= Some(1));
                // One topology key at most (v1.36.3's validation), a label key.
                if let Some(constraints) = spec.get("schedulingConstraints") {
                    let topology = constraints["topology"].as_array().expect("a topology");
                    assert_eq!(topology.len(), 1, "{}: {spec:?}", path.display());
                    let key = topology[0]["key"].as_str().expect("a key");
                    assert_eq!(
                        tandem::api::placement::label_key_error(key),
                        None,
                        "{}",
                        path.display()
                    );
                }
            } else if let Some(parsed) = parse_core(object) {
                parsed.unwrap_or_else(|e| {
                    panic!("{}: generated {kind} does not parse: {e}", path.display())
                });
            } else if let Some(upstream) = &upstream {
                let schema = upstream
                    .get(&(api_version.to_owned(), kind.to_owned()))
                    .unwrap_or_else(|| panic!("no upstream CRD for {api_version} {kind}"));
                let errors = schema.errors(object);
                assert!(
                    errors.is_empty(),
                    "{}: generated {kind} {} does not fit the upstream CRD: {errors:?}",
                    path.display(),
                    object["metadata"]["name"]
                );
                checked_upstream += 1;
            }
        }
    }
    assert_eq!(
        kinds_seen,
        ["InferenceService", "ResourceScalingGroup", "ScaleView"]
            .map(String::from)
            .into()
    );
    if upstream.is_some() {
        assert!(
            checked_upstream >= 10,
            "generated objects checked against upstream CRDs: {checked_upstream}"
        );
    }
}

/// Kubernetes' own kinds, parsed as their k8s-openapi types so a wrong field
/// shows with its path; None for kinds that come from CRDs.
fn parse_core(object: &Value) -> Option<Result<(), String>> {
    use k8s_openapi::api::{
        apps::v1 as apps, core::v1 as core, policy::v1 as policy, rbac::v1 as rbac,
    };
    fn parse<T: serde::de::DeserializeOwned>(object: &Value) -> Result<(), String> {
        serde_path_to_error::deserialize::<_, T>(object)
            .map(|_| ())
            .map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }
    Some(
        match (object["apiVersion"].as_str()?, object["kind"].as_str()?) {
            ("v1", "ServiceAccount") => parse::<core::ServiceAccount>(object),
            ("v1", "ConfigMap") => parse::<core::ConfigMap>(object),
            ("v1", "Service") => parse::<core::Service>(object),
            ("v1", "Pod") => parse::<core::Pod>(object),
            ("policy/v1", "PodDisruptionBudget") => parse::<policy::PodDisruptionBudget>(object),
            ("apps/v1", "Deployment") => parse::<apps::Deployment>(object),
            ("apps/v1", "StatefulSet") => parse::<apps::StatefulSet>(object),
            ("apps/v1", "ControllerRevision") => parse::<apps::ControllerRevision>(object),
            ("rbac.authorization.k8s.io/v1", "Role") => parse::<rbac::Role>(object),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => parse::<rbac::RoleBinding>(object),
            _ => return None,
        },
    )
}

#[test]
fn the_seed_ratio_example_warns_about_case() {
    let path = repo_path("examples/resourcescalinggroup/inplace-scaling.yaml");
    let world =
        tandem::render::parse_world("x", &std::fs::read_to_string(path).unwrap(), "ai").unwrap();
    let rendered = tandem::render::render(world, &Default::default()).unwrap();
    assert_eq!(rendered.warnings.len(), 1);
    assert!(rendered.warnings[0].starts_with(
        "ResourceScalingGroup ai/pd-pool: spec.scalingStrategy.inplaceConfig.bindings[2].name"
    ));
}

/// Every non-empty document of a YAML file, as written.
fn manifest(path: &str) -> Vec<Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(repo_path(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

#[test]
fn webhook_configurations_match_the_served_routes_and_crds() {
    let mut paths = BTreeSet::new();
    for (file, config_kind, prefix) in [
        (
            "webhooks/validating.yaml",
            "ValidatingWebhookConfiguration",
            "/validate/",
        ),
        (
            "webhooks/mutating.yaml",
            "MutatingWebhookConfiguration",
            "/mutate/",
        ),
    ] {
        let docs = manifest(file);
        assert_eq!(docs.len(), 1, "{file}");
        let config = &docs[0];
        assert_eq!(config["kind"], config_kind);
        // The CA Certificate's bundle, not the serving certificate's copy of
        // it (tests/unit/certificate_timeline.rs).
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "tandem-system/tandem-ca"
        );
        let webhooks = config["webhooks"].as_array().unwrap();
        assert_eq!(webhooks.len(), 3, "{file}: one webhook per kind");
        for hook in webhooks {
            let name = hook["name"].as_str().unwrap();
            assert_eq!(
                hook["admissionReviewVersions"],
                serde_json::json!(["v1"]),
                "{name}"
            );
            // Only the ScaleView validation has a side effect: a refused
            // /scale is recorded on the view, never in a dry run.
            let side_effects = if name == "validate.scaleviews.fusioninfer.io" {
                "NoneOnDryRun"
            } else {
                "None"
            };
            assert_eq!(hook["sideEffects"], side_effects, "{name}");
            assert_eq!(hook["timeoutSeconds"], 5, "{name}");
            assert!(
                ["Fail", "Ignore"].contains(&hook["failurePolicy"].as_str().unwrap()),
                "{name}"
            );
            let service = &hook["clientConfig"]["service"];
            assert_eq!(
                (
                    service["name"].as_str(),
                    service["namespace"].as_str(),
                    service["port"].as_i64()
                ),
                (Some("tandem-webhook"), Some("tandem-system"), Some(443))
            );
            let path = service["path"].as_str().unwrap();
            let plural = path
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("{name}: path {path}"));
            let kind = Kind::from_plural(plural)
                .unwrap_or_else(|| panic!("{name}: {plural} is not a Tandem kind"));
            paths.insert(path.to_owned());
            let crd = crd_json(kind.name());
            for rule in hook["rules"].as_array().unwrap() {
                assert_eq!(
                    rule["apiGroups"],
                    serde_json::json!([crd["spec"]["group"]]),
                    "{name}"
                );
                assert_eq!(
                    rule["apiVersions"],
                    serde_json::json!([crd["spec"]["versions"][0]["name"]]),
                    "{name}"
                );
                assert_eq!(
                    rule["operations"],
                    serde_json::json!(["CREATE", "UPDATE"]),
                    "{name}"
                );
                let resources: Vec<&str> = rule["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_str().unwrap())
                    .collect();
                // Both kinds with a scale subresource have their /scale
                // validated (a write there skips the main resource's rule).
                let scaled = matches!(kind, Kind::ScaleView | Kind::ResourceScalingGroup);
                let expected: Vec<String> = if scaled && prefix == "/validate/" {
                    vec![plural.to_owned(), format!("{plural}/scale")]
                } else {
                    vec![plural.to_owned()]
                };
                assert_eq!(resources, expected, "{name}");
            }
        }
    }
    assert_eq!(paths.len(), 6);
}

#[tokio::test]
async fn every_configured_webhook_path_is_served() {
    let test = start_server(|_| {}).await;
    let tls = client_tls(&[&test.ca_pem]);
    let samples = [
        yaml_documents(&repo_path("examples/seeds/story1-monolithic.yaml")).remove(0),
        yaml_documents(&repo_path("examples/scaleview/decode-two-zones.yaml")).remove(1),
        yaml_documents(&repo_path(
            "examples/resourcescalinggroup/prefill-decode-ratio.yaml",
        ))
        .remove(0),
    ];
    for file in ["webhooks/validating.yaml", "webhooks/mutating.yaml"] {
        for hook in manifest(file)[0]["webhooks"].as_array().unwrap() {
            let path = hook["clientConfig"]["service"]["path"].as_str().unwrap();
            let plural = path.rsplit('/').next().unwrap();
            let object = samples
                .iter()
                .find(|o| gvr(o["kind"].as_str().unwrap()).2 == plural)
                .unwrap();
            let exchange = post(
                test.server.webhook_addr,
                tls.clone(),
                path,
                serde_json::to_vec(&review("CREATE", object, None)).unwrap(),
            )
            .await
            .unwrap();
            assert_eq!(exchange.status, 200, "{path}: {}", exchange.text());
            assert_eq!(
                exchange.json()["response"]["allowed"],
                true,
                "{path}: {}",
                exchange.text()
            );
        }
    }
}

#[test]
fn rbac_has_no_wildcards() {
    for doc in manifest("manifests/base/rbac.yaml") {
        for rule in doc["rules"].as_array().into_iter().flatten() {
            for field in [
                "apiGroups",
                "resources",
                "verbs",
                "resourceNames",
                "nonResourceURLs",
            ] {
                for value in rule[field].as_array().into_iter().flatten() {
                    // `*` alone, and in `pods/*` or `*/scale`.
                    assert!(
                        !value.as_str().unwrap_or("*").contains('*'),
                        "wildcard {value} in {field} of {} {}: {rule}",
                        doc["kind"],
                        doc["metadata"]["name"]
                    );
                }
            }
        }
    }
}

#[test]
fn the_deployment_is_hardened_and_uses_real_flags() {
    let docs = manifest("manifests/base/deployment.yaml");
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert!(docs.iter().any(|d| d["kind"] == "PodDisruptionBudget"));
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "the pod runs under the container runtime's seccomp profile"
    );
    assert_ne!(
        pod["securityContext"]["runAsUser"], 0,
        "not root by uid either"
    );
    assert!(
        security.get("privileged").is_none_or(|p| p == false),
        "{security}"
    );
    assert!(
        security["capabilities"].get("add").is_none(),
        "no capability is added back: {security}"
    );
    // Leader election: the pod's name and namespace from the downward API.
    let env = container["env"].as_array().unwrap();
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("the container has no {name}"));
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["port"], 8080);
    assert!(container["resources"]["requests"].is_object());

    let help = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "serve");
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(flag),
            "the Deployment passes {flag}, which `tandem serve` does not have"
        );
    }
    // Endpoints drop the pod before SIGTERM stops new connections, and the
    // drain fits the grace period.
    let delay = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .expect("a preStop sleep");
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap();
    let drain = args
        .iter()
        .position(|a| *a == "--shutdown-grace-seconds")
        .map_or(20, |i| args[i + 1].parse::<i64>().unwrap());
    // Then the controllers finish their reconciles (at most the part of the
    // Lease after the renew deadline) and the Lease is released (one try,
    // at most the retry period), so the next leader need not wait it out.
    let timing = tandem::plan::shared::leadership::Timing::DEFAULT;
    let controllers = tandem::plan::shared::leadership::stop_grace(&timing).as_secs();
    let release = timing.retry().as_secs();
    let shutdown = delay + drain + i64::try_from(controllers + release).unwrap();
    assert!(
        shutdown < grace,
        "preStop {delay} s + drain {drain} s + controllers {controllers} s + Lease release {release} s = {shutdown} s, not within the grace period of {grace} s"
    );

    // Protected and spread: Tandem's own PriorityClass, one replica per
    // node and per zone where it can, memory sized by docs/install.md's table.
    assert_eq!(pod["priorityClassName"], "tandem-webhook");
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway");
    let class = manifest("manifests/base/priorityclass.yaml").remove(0);
    assert_eq!(class["metadata"]["name"], "tandem-webhook");
    assert_eq!(class["globalDefault"], false);
    assert_eq!(container["resources"]["requests"]["memory"], "256Mi");
    assert_eq!(container["resources"]["limits"]["memory"], "512Mi");

    // The webhook listens on 10250, a port managed control planes reach
    // (GKE private clusters allow only 443 and 10250 to nodes).
    let listen = args
        .iter()
        .position(|a| *a == "--listen")
        .map(|i| args[i + 1])
        .expect("--listen");
    assert_eq!(listen, "0.0.0.0:10250");
    assert_eq!(container["ports"][0]["containerPort"], 10250);
    let services = manifest("manifests/base/service.yaml");
    assert_eq!(services[0]["spec"]["ports"][0]["targetPort"], "https");
    // The metrics Service is told apart from the webhook's by its labels.
    assert_eq!(services[1]["metadata"]["name"], "tandem-metrics");
    assert_eq!(
        services[1]["metadata"]["labels"]["app.kubernetes.io/component"],
        "metrics"
    );
    assert_ne!(
        services[0]["metadata"]["labels"],
        services[1]["metadata"]["labels"]
    );
}

#[test]
fn the_kustomization_lists_files_that_exist() {
    for dir in [
        "manifests",
        "manifests/base",
        "manifests/without-cert-manager",
        "manifests/cert-manager",
        "manifests/in-namespace",
        "manifests/crds",
        "webhooks",
    ] {
        let kustomization = &manifest(&format!("{dir}/kustomization.yaml"))[0];
        for resource in kustomization["resources"].as_array().unwrap() {
            let path = repo_path(dir).join(resource.as_str().unwrap());
            assert!(
                path.exists(),
                "{dir}/kustomization.yaml lists {} which does not exist",
                path.display()
            );
        }
    }
}

/// `harness::rbac`, which the end-to-end run's RBAC check stands on, reads
/// grants as Kubernetes' authorizer does: a Role's rules hold in its
/// namespace only, resourceNames never allow a create, an apply that
/// created its object used `create` too, and `bind` is used by a
/// RoleBinding to the role it names.
#[test]
fn the_rbac_check_reads_grants_as_the_authorizer_does() {
    use harness::rbac::{Access, accesses, allows, mismatch, uses};
    use tandem::check::installation::shipped_grants as shipped;
    let documents: Vec<serde_json::Value> = manifest("manifests/base/rbac.yaml");
    let grants = shipped(&documents, "tandem-system", "tandem");
    let access =
        |verb: &str, group: &str, resource: &str, ns: Option<&str>, name: Option<&str>| Access {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            binds: None,
        };
    let allowed = |a: &Access| grants.iter().any(|g| allows(g, a));
    let lease = |verb: &str, ns: &str, name: &str| {
        access(verb, "coordination.k8s.io", "leases", Some(ns), Some(name))
    };
    assert!(allowed(&lease(
        "patch",
        "tandem-system",
        "tandem-controller"
    )));
    assert!(!allowed(&lease("patch", "tandem-system", "kube-scheduler")));
    assert!(!allowed(&lease(
        "patch",
        "kube-system",
        "tandem-controller"
    )));
    assert!(allowed(&lease(
        "create",
        "tandem-system",
        "tandem-controller"
    )));
    assert!(!allowed(&lease("create", "kube-system", "kube-scheduler")));
    assert!(allowed(&access("patch", "", "pods", Some("ai"), Some("p"))));
    assert!(!allowed(&access(
        "delete",
        "",
        "pods",
        Some("ai"),
        Some("p")
    )));
    assert!(!allowed(&access(
        "get",
        "",
        "secrets",
        Some("ai"),
        Some("s")
    )));
    // Nothing of the endpoint picker's ClusterRoles is Tandem's own.
    assert!(!allowed(&access(
        "list",
        "inference.networking.x-k8s.io",
        "inferenceobjectives",
        Some("ai"),
        None
    )));
    let bind = grants
        .iter()
        .find(|g| g.verb == "bind")
        .expect("bind on the endpoint picker's roles");
    let binding = |role: &str| Access {
        binds: Some(role.into()),
        ..access(
            "patch",
            "rbac.authorization.k8s.io",
            "rolebindings",
            Some("ai"),
            Some("x"),
        )
    };
    assert!(uses(&binding("tandem-endpoint-picker"), bind));
    assert!(!uses(&binding("cluster-admin"), bind));

    // From the audit log: an apply answered 201 used create too; another
    // user's requests and requests for no resource are not Tandem's.
    let events = vec![
        serde_json::json!({"user": {"username": "me"}, "verb": "patch",
            "objectRef": {"resource": "leaderworkersets", "apiGroup": "leaderworkerset.x-k8s.io",
                          "namespace": "ai", "name": "s-decode-0"},
            "responseStatus": {"code": 201}}),
        serde_json::json!({"user": {"username": "me"}, "verb": "get", "requestURI": "/version"}),
        serde_json::json!({"user": {"username": "other"}, "verb": "delete",
            "objectRef": {"resource": "pods", "namespace": "ai", "name": "p"}}),
    ];
    let seen = accesses(&events, "me");
    let verbs: Vec<&str> = seen.iter().map(|a| a.verb.as_str()).collect();
    assert_eq!(verbs, ["create", "patch"]);
    let (refused, unused) = mismatch(&grants, &seen);
    let unused: Vec<String> = unused.iter().map(ToString::to_string).collect();
    assert!(refused.is_empty(), "{refused:?}");
    assert!(
        unused
            .iter()
            .any(|g| g.starts_with("delete leaderworkersets")),
        "{unused:?}"
    );
    assert!(
        !unused
            .iter()
            .any(|g| g.starts_with("create leaderworkersets")),
        "{unused:?}"
    );
}

/// The Dockerfile (issue 27): every base image pinned by digest, a
/// dependency layer built from cargo-chef's recipe before Tandem's own
/// code is copied in, a static binary on a static base, and the OCI labels
/// with the crate's version and licence. And `.dockerignore` keeps out
/// nothing the build reads.
#[test]
fn the_dockerfile_pins_its_bases_caches_dependencies_and_labels_the_image() {
    let dockerfile = std::fs::read_to_string(repo_path("Dockerfile")).unwrap();
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let default = |arg: &str| -> String {
        let prefix = format!("ARG {arg}=");
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("ARG {arg} has no default"))
            .to_owned()
    };

    let mut stages = Vec::new();
    let mut bases = Vec::new();
    for line in lines.iter().filter(|l| l.starts_with("FROM ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let image = words[1];
        if let Some(stage) = words.get(3) {
            stages.push(*stage);
        }
        if stages.contains(&image) {
            continue;
        }
        // ${X_IMAGE}@${X_DIGEST}: a tag for the reader, a digest for the pull.
        let (name, digest) = image
            .strip_prefix("${")
            .and_then(|rest| rest.split_once("}@${"))
            .and_then(|(name, digest)| Some((name, digest.strip_suffix('}')?)))
            .unwrap_or_else(|| panic!("{line}: not ${{IMAGE}}@${{DIGEST}}"));
        let (tagged, digest) = (default(name), default(digest));
        assert!(
            tagged
                .rsplit_once(':')
                .is_some_and(|(_, tag)| !tag.contains('/'))
                && !tagged.contains('@'),
            "{name}={tagged}: a tag, and the digest apart"
        );
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        assert!(
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{digest}: not a sha256 digest"
        );
        bases.push(tagged);
    }
    assert_eq!(bases.len(), 2, "a build base and a runtime base: {bases:?}");
    assert!(
        bases[0].contains("rust:") && bases[0].contains("alpine"),
        "{}",
        bases[0]
    );
    assert!(
        bases[1].starts_with("gcr.io/distroless/static") && bases[1].ends_with(":nonroot"),
        "a static base without libc, as nonroot: {}",
        bases[1]
    );

    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle}"))
    };
    let builder = at("AS builder");
    assert!(at("cargo chef prepare") < builder);
    let cook = at("cargo chef cook");
    let copy = builder
        + lines[builder..]
            .iter()
            .position(|l| *l == "COPY . .")
            .unwrap();
    let build = at("cargo build --release --locked --bin tandem");
    assert!(
        builder < cook && cook < copy && copy < build,
        "the dependencies are cooked before the sources are copied in"
    );
    assert!(lines[cook].contains("--release") && lines[cook].contains("--locked"));
    assert!(
        dockerfile.contains("grep -q '(NEEDED)'"),
        "the static check"
    );
    assert!(dockerfile.contains("USER 65532:65532"));

    for label in [
        "title",
        "description",
        "version",
        "revision",
        "created",
        "licenses",
        "base.name",
        "base.digest",
    ] {
        assert!(
            dockerfile.contains(&format!("org.opencontainers.image.{label}=")),
            "OCI label {label}"
        );
    }
    assert_eq!(default("VERSION"), env!("CARGO_PKG_VERSION"));
    assert!(dockerfile.contains(&format!(
        "org.opencontainers.image.licenses=\"{}\"",
        env!("CARGO_PKG_LICENSE")
    )));

    let ignored: Vec<String> = std::fs::read_to_string(repo_path(".dockerignore"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/').to_owned())
        .collect();
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "manifests",
        "webhooks",
        "examples",
        "tests",
        "benches",
    ] {
        assert!(
            !ignored.iter().any(|pattern| pattern == needed),
            ".dockerignore keeps out {needed}, which the build reads"
        );
    }
}
