//! One LeaderWorkerSet per replica of a serving role (DESIGN.md §1.1):
//! `{service}-{role}-{i}`, `replicas: 1`, `size: nodeCount`.
//!
//! A single-node role keeps the user's pod template as written, adding only
//! Tandem's labels, Volcano's annotations and the scheduler. A multi-node role
//! is started the way its engine release spans nodes
//! ([`crate::plan::engine::Launch`]): on Ray, a leader that starts a Ray head
//! and then the user's serve command with vLLM's Ray executor, and workers
//! that join the leader's Ray cluster and block (seed 003, the Note under
//! Example 2); without Ray (vLLM 0.34, SGLang), every pod runs the serve
//! command with the node count, its rank from LWS and the leader's address.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerPort, HTTPGetAction, PodTemplateSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

use super::{drain, pod_groups};
use crate::api::inference_service::{InferenceService, Role};
use crate::plan::engine::{self, Launch};
use crate::plan::shared::children;

/// LeaderWorkerSet's group restart policy: any pod of a replica restarting
/// recreates all of its pods.
pub const RESTART_POLICY: &str = "RecreateGroupOnPodRestart";
/// The same, but not while a pod of the group is Pending (an image pull, a
/// scheduling wait): LWS 0.9's field value.
pub const RESTART_AFTER_START: &str = "RecreateGroupAfterStart";
/// LWS 0.8's way to ask for [`RESTART_AFTER_START`]'s behaviour: an
/// annotation on the LeaderWorkerSet, read by its presence
/// (`pkg/controllers/pod_controller.go`, 0.8 and 0.9).
pub const RESTART_AFTER_START_ANNOTATION: &str =
    "leaderworkerset.sigs.k8s.io/experimental-recreate-group-after-start";

/// How a multi-node replica's group is recreated when one of its pods
/// fails: never while one of its pods is still Pending, through the field
/// where the installed LeaderWorkerSet has it, else through LWS 0.8's
/// annotation (older releases ignore it and recreate at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRestart {
    AfterStartField,
    AfterStartAnnotation,
}

/// The [`GroupRestart`] the installed LeaderWorkerSet allows: its CRD's
/// `spec.leaderWorkerTemplate.restartPolicy` enum, or LWS 0.9's when
/// nothing is known.
pub fn group_restart(installed: &crate::plan::shared::installed::Installed) -> GroupRestart {
    use crate::plan::shared::installed::LEADER_WORKER_SET;
    let values = installed.find(&LEADER_WORKER_SET).map(|found| {
        found.and_then(|f| {
            f.spec_enum(
                LEADER_WORKER_SET.version,
                &["leaderWorkerTemplate", "restartPolicy"],
            )
        })
    });
    match values {
        // Nothing known: the release Tandem is tested with.
        None => GroupRestart::AfterStartField,
        Some(Some(values)) if values.contains(RESTART_AFTER_START) => GroupRestart::AfterStartField,
        Some(_) => GroupRestart::AfterStartAnnotation,
    }
}

/// Sets how LWS recreates the group of replica LeaderWorkerSet `object`.
///
/// - With a recovery setting (`recovery`), never: LWS's `None`, so that
///   Tandem recreates the group with a back-off ([`super::recovery`]).
/// - Else a multi-node replica is recreated at once, but never while one of
///   its pods is still Pending ([`GroupRestart`]); a single-node replica
///   keeps [`RESTART_POLICY`] (a group of one pod has no other pod to wait
///   for).
///
/// An existing LeaderWorkerSet at the same revision (`observed`) keeps its
/// restart policy: LWS hashes the whole `leaderWorkerTemplate` into its
/// revision, so changing it would recreate every running group; the
/// annotation, which is no part of the revision, gives it the after-start
/// behaviour. A new revision recreates the groups anyway and takes the
/// policy asked for. One exception: a multi-node group's kept `None`
/// without a recovery setting any more is replaced, since nothing would
/// recreate the group (a single-node one keeps it: the kubelet restarts its
/// one container in place, as a Deployment's).
pub fn set_group_restart(
    object: &mut Value,
    restart: GroupRestart,
    observed: Option<&Value>,
    recovery: bool,
) {
    let group = &object["spec"]["leaderWorkerTemplate"];
    let multi_node = group["size"].as_i64().unwrap_or(1) >= 2;
    let revision = |o: &Value| o["metadata"]["labels"][children::REVISION].clone();
    let kept = observed
        .filter(|o| revision(o) == revision(object))
        .and_then(|o| o["spec"]["leaderWorkerTemplate"]["restartPolicy"].as_str())
        .map(str::to_owned);
    if !multi_node && !recovery {
        // A group of one pod: the kubelet's own restart serves it as well
        // as a recreated group, so a kept policy stays, whatever it is.
        if let Some(kept) = kept {
            object["spec"]["leaderWorkerTemplate"]["restartPolicy"] = Value::from(kept);
        }
        return;
    }
    let kept = kept.filter(|kept| recovery || kept != super::recovery::NO_GROUP_RESTART);
    let policy = match (&kept, restart) {
        (Some(kept), _) => kept.clone(),
        (None, _) if recovery => super::recovery::NO_GROUP_RESTART.to_owned(),
        (None, GroupRestart::AfterStartField) => RESTART_AFTER_START.to_owned(),
        (None, GroupRestart::AfterStartAnnotation) => RESTART_POLICY.to_owned(),
    };
    let annotate =
        multi_node && policy != RESTART_AFTER_START && policy != super::recovery::NO_GROUP_RESTART;
    object["spec"]["leaderWorkerTemplate"]["restartPolicy"] = Value::from(policy);
    if annotate && let Some(metadata) = object["metadata"].as_object_mut() {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(
                RESTART_AFTER_START_ANNOTATION.to_owned(),
                Value::from("true"),
            );
        }
    }
}

/// Ray's GCS port on the leader, which workers join.
pub const RAY_PORT: i32 = 6379;
/// The port of SGLang's distributed init on the leader
/// (`--dist-init-addr`; SGLang's multi-node guide uses 20000).
pub const SGLANG_DIST_PORT: i32 = 20000;
/// The environment variables LWS (0.6 and later) sets in every pod of a
/// group: the leader's address and the pod's index in the group (0 for the
/// leader). The kubelet expands `$(NAME)` in a container's args.
const LEADER_ADDRESS: &str = "$(LWS_LEADER_ADDRESS)";
const WORKER_INDEX: &str = "$(LWS_WORKER_INDEX)";
/// The model server's port when the template declares none (vLLM's default).
pub const DEFAULT_SERVING_PORT: i32 = 8000;

/// How a replica's pods are scheduled: the scheduler and the annotations that
/// place them in the service's PodGroup.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    pub scheduler_name: Option<String>,
    pub annotations: BTreeMap<String, String>,
    /// The pods' `priorityClassName`, where the template has none (the
    /// service's, with Kubernetes' gang).
    pub priority_class_name: Option<String>,
    /// A topology spread constraint the pods add to their own
    /// (`spec.placement.spread`, [`super::placement::spread`]).
    pub spread: Option<Value>,
}

/// What the pods of one replica alone carry: their Volcano task
/// annotations, the Kubernetes PodGroup they name, and the pod affinity
/// that keeps them (or the pair) in one domain ([`super::placement`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplicaPlacement<'a> {
    pub annotations: Option<&'a BTreeMap<String, String>>,
    pub pod_group: Option<&'a str>,
    pub affinity: Option<&'a Value>,
    /// The node label LWS keeps the replica alone in a domain of
    /// ([`super::placement::exclusive_topology`]).
    pub exclusive_topology: Option<&'a str>,
}

/// The pod templates of one role's replicas, made once for all of them: the
/// user's template read, the grace period set, the leader's and workers'
/// templates built (as JSON). Each replica only adds its labels and
/// placement ([`RoleTemplates::leader_worker_set`]), so a role of many
/// replicas costs one template build, not one per replica.
#[derive(Clone, Debug)]
pub struct RoleTemplates {
    /// Multi-node roles: the Ray head's template.
    leader: Option<Value>,
    /// Multi-node roles: the Ray workers'; single-node roles: the user's.
    worker: Value,
}

impl RoleTemplates {
    pub fn new(role: &Role) -> Result<RoleTemplates, String> {
        let template: PodTemplateSpec = match &role.template {
            Some(t) => serde_json::from_value(t.clone()).map_err(|e| {
                format!("role {}: template is not a PodTemplateSpec: {e}", role.name)
            })?,
            None => {
                return Err(format!(
                    "role {}: a serving role needs a template",
                    role.name
                ));
            }
        };
        let grace = drain::grace_seconds(
            template
                .spec
                .as_ref()
                .is_some_and(|s| s.termination_grace_period_seconds.is_some()),
            role.drain_seconds(),
        );
        let written = |mut t: PodTemplateSpec| -> Result<Value, String> {
            if let (Some(grace), Some(spec)) = (grace, t.spec.as_mut()) {
                spec.termination_grace_period_seconds = Some(grace);
            }
            serde_json::to_value(t).map_err(|e| format!("could not write the pod template: {e}"))
        };
        if role.node_count() > 1 {
            let launch = launch_of(&template);
            Ok(RoleTemplates {
                leader: Some(written(leader_template(&template, role, launch)?)?),
                worker: written(worker_template(&template, role, launch)?)?,
            })
        } else {
            Ok(RoleTemplates {
                leader: None,
                worker: written(template)?,
            })
        }
    }

    /// The LeaderWorkerSet of replica `index` of `role` in `revision`, named
    /// by `naming`.
    pub fn leader_worker_set(
        &self,
        service: &InferenceService,
        role: &Role,
        index: u32,
        revision: &str,
        naming: &children::Naming,
        placement: &Placement,
    ) -> Value {
        let role_wide = Placement {
            annotations: BTreeMap::new(),
            ..placement.clone()
        };
        self.dressed(service, role, revision, &role_wide)
            .leader_worker_set(
                index,
                naming,
                ReplicaPlacement {
                    annotations: Some(&placement.annotations),
                    ..ReplicaPlacement::default()
                },
            )
    }

    /// The templates with all that the role's replicas in `revision` share:
    /// Tandem's labels but the replica's index, the placement's annotations
    /// and its scheduler. Made once for all of the role's replicas.
    pub fn dressed<'a>(
        &self,
        service: &'a InferenceService,
        role: &'a Role,
        revision: &str,
        placement: &Placement,
    ) -> DressedTemplates<'a> {
        let service_name = children::service_name(service);
        let mut labels = children::label_map(&children::role_labels(service_name, role));
        labels.insert(children::REVISION.to_owned(), Value::from(revision));
        // Pods start in traffic; a drain relabels them (plan::inference_service::drain).
        let mut pod_labels = labels.clone();
        pod_labels.insert(drain::TRAFFIC.to_owned(), Value::from(drain::SERVING));
        let annotations = children::label_map(&placement.annotations);
        let dress = |template: &Value| {
            let mut template = dress(
                template.clone(),
                &pod_labels,
                &annotations,
                (
                    placement.scheduler_name.as_deref(),
                    placement.priority_class_name.as_deref(),
                ),
            );
            if let Some(spread) = &placement.spread {
                super::placement::add_spread(&mut template, spread);
            }
            template
        };
        DressedTemplates {
            service,
            role,
            labels,
            leader: self.leader.as_ref().map(dress),
            worker: dress(&self.worker),
        }
    }
}

/// A role's pod templates dressed for one revision
/// ([`RoleTemplates::dressed`]): each replica adds its index and its own
/// annotations.
#[derive(Clone, Debug)]
pub struct DressedTemplates<'a> {
    service: &'a InferenceService,
    role: &'a Role,
    /// The LeaderWorkerSet's labels but the replica's index.
    labels: Map<String, Value>,
    leader: Option<Value>,
    worker: Value,
}

impl DressedTemplates<'_> {
    /// The LeaderWorkerSet of replica `index`, named by `naming`, its pods
    /// carrying what `replica` places on them besides the role's.
    pub fn leader_worker_set(
        &self,
        index: u32,
        naming: &children::Naming,
        replica: ReplicaPlacement<'_>,
    ) -> Value {
        let index_label = Map::from_iter([(
            children::REPLICA_INDEX.to_owned(),
            Value::String(index.to_string()),
        )]);
        let annotations = replica
            .annotations
            .map(children::label_map)
            .unwrap_or_default();
        let (pod_group, affinity) = (replica.pod_group, replica.affinity);
        let exclusive_topology = replica.exclusive_topology;
        let replica = |template: &Value| {
            let mut template = template.clone();
            if let Some(metadata) = template.get_mut("metadata").and_then(Value::as_object_mut) {
                add(metadata, "labels", &index_label);
                if !annotations.is_empty() {
                    add(metadata, "annotations", &annotations);
                }
            }
            if let Some(group) = pod_group {
                pod_groups::join(&mut template, group);
            }
            if let Some(affinity) = affinity {
                super::placement::add_affinity(&mut template, affinity);
            }
            template
        };
        let mut labels = self.labels.clone();
        labels.extend(index_label.clone());

        // Built by moving the parts in: `json!` would copy each interpolated
        // Value through the serializer, which was most of a replica's cost.
        let mut group = Map::new();
        group.insert("size".to_owned(), Value::from(self.role.node_count()));
        // Set explicitly (it is LWS's default): a multi-node replica whose pod
        // restarts is recreated as a unit, never left half-broken.
        group.insert("restartPolicy".to_owned(), Value::from(RESTART_POLICY));
        if let Some(leader) = &self.leader {
            group.insert("leaderTemplate".to_owned(), replica(leader));
        }
        group.insert("workerTemplate".to_owned(), replica(&self.worker));
        let mut spec = Map::new();
        spec.insert("replicas".to_owned(), Value::from(1));
        spec.insert("leaderWorkerTemplate".to_owned(), Value::Object(group));
        let mut object = Map::new();
        object.insert(
            "apiVersion".to_owned(),
            Value::from("leaderworkerset.x-k8s.io/v1"),
        );
        object.insert("kind".to_owned(), Value::from("LeaderWorkerSet"));
        let service_name = children::service_name(self.service);
        let mut metadata = children::metadata_labelled(
            self.service,
            &naming.replica_name(service_name, &self.role.name, index),
            labels,
        );
        if let (Some(key), Some(fields)) = (exclusive_topology, metadata.as_object_mut()) {
            fields.insert(
                "annotations".to_owned(),
                serde_json::json!({super::placement::EXCLUSIVE_TOPOLOGY: key}),
            );
        }
        object.insert("metadata".to_owned(), metadata);
        object.insert("spec".to_owned(), Value::Object(spec));
        Value::Object(object)
    }
}

/// The LeaderWorkerSet of replica `index` of `role` in `revision`, named by
/// `naming`: [`RoleTemplates`] for one replica.
pub fn leader_worker_set(
    service: &InferenceService,
    role: &Role,
    index: u32,
    revision: &str,
    naming: &children::Naming,
    placement: &Placement,
) -> Result<Value, String> {
    Ok(RoleTemplates::new(role)?
        .leader_worker_set(service, role, index, revision, naming, placement))
}

/// Adds Tandem's labels, the placement's annotations, scheduler and
/// priority class (unless the template names one) to a pod template (as
/// JSON); everything else stays as the user wrote it.
fn dress(
    mut template: Value,
    labels: &Map<String, Value>,
    annotations: &Map<String, Value>,
    (scheduler, priority_class): (Option<&str>, Option<&str>),
) -> Value {
    let Some(fields) = template.as_object_mut() else {
        return template;
    };
    let metadata = fields
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    if let Some(metadata) = metadata.as_object_mut() {
        add(metadata, "labels", labels);
        if !annotations.is_empty() {
            add(metadata, "annotations", annotations);
        }
    }
    if let (Some(scheduler), Some(spec)) = (
        scheduler,
        fields.get_mut("spec").and_then(Value::as_object_mut),
    ) {
        spec.insert("schedulerName".to_owned(), Value::from(scheduler));
    }
    if let (Some(class), Some(spec)) = (
        priority_class,
        fields.get_mut("spec").and_then(Value::as_object_mut),
    ) {
        spec.entry("priorityClassName")
            .or_insert_with(|| Value::from(class));
    }
    template
}

/// Adds `entries` to the map at `key` of `metadata`, the user's own entries
/// staying beside them (Tandem's win on a clash). A template without that
/// map takes a copy of `entries` whole.
fn add(metadata: &mut Map<String, Value>, key: &str, entries: &Map<String, Value>) {
    match metadata.get_mut(key) {
        Some(Value::Object(map)) => {
            for (k, v) in entries {
                map.insert(k.clone(), v.clone());
            }
        }
        _ => {
            metadata.insert(key.to_owned(), Value::Object(entries.clone()));
        }
    }
}

/// The model server: the template's first container.
fn server_mut<'a>(
    template: &'a mut PodTemplateSpec,
    role: &str,
) -> Result<&'a mut Container, String> {
    template
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .ok_or_else(|| format!("role {role}: the template has no container"))
}

/// The port the model server listens on: its first declared port.
pub fn serving_port(container: &Container) -> i32 {
    container
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .next()
        .unwrap_or(DEFAULT_SERVING_PORT)
}

/// How the role's server (the template's first container) spans nodes.
fn launch_of(template: &PodTemplateSpec) -> Launch {
    template
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        .map_or(Launch::Ray, engine::multi_node_launch)
}

/// The leader: on Ray, a Ray head, then the user's serve command on Ray's
/// executor; otherwise the serve command as rank 0 of the role's nodes.
fn leader_template(
    template: &PodTemplateSpec,
    role: &Role,
    launch: Launch,
) -> Result<PodTemplateSpec, String> {
    let mut leader = template.clone();
    let server = server_mut(&mut leader, &role.name)?;
    // Where the other pods reach the leader: Ray's head, or the engine's
    // own rendezvous.
    let (rendezvous, rendezvous_name) = match launch {
        Launch::Ray => {
            let serve = serve_command(server);
            server.command = Some(vec!["/bin/sh".into(), "-c".into()]);
            server.args = Some(vec![format!(
                "ray start --head --port={RAY_PORT} && {}",
                shell_join(&serve)
            )]);
            (RAY_PORT, "ray-gcs")
        }
        Launch::VllmNodes | Launch::SglangNodes => {
            span_nodes(server, launch, role.node_count(), "0");
            match launch {
                Launch::SglangNodes => (SGLANG_DIST_PORT, "dist-init"),
                _ => (VLLM_MASTER_PORT, "dist-master"),
            }
        }
    };
    let port = serving_port(server);
    let ports = server.ports.get_or_insert_default();
    if !ports.iter().any(|p| p.container_port == rendezvous) {
        ports.push(ContainerPort {
            container_port: rendezvous,
            name: Some(rendezvous_name.into()),
            ..Default::default()
        });
    }
    if server.readiness_probe.is_none() {
        server.readiness_probe = Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/health".into()),
                port: IntOrString::Int(port),
                ..Default::default()
            }),
            period_seconds: Some(10),
            failure_threshold: Some(3),
            ..Default::default()
        });
    }
    Ok(leader)
}

/// A worker: on Ray, joins the leader's Ray cluster and blocks; otherwise
/// runs the serve command as its rank (vLLM's `--headless`). It serves
/// nothing, so the server's ports and probes go.
fn worker_template(
    template: &PodTemplateSpec,
    role: &Role,
    launch: Launch,
) -> Result<PodTemplateSpec, String> {
    let mut worker = template.clone();
    let server = server_mut(&mut worker, &role.name)?;
    match launch {
        Launch::Ray => {
            server.command = Some(vec!["/bin/sh".into(), "-c".into()]);
            server.args = Some(vec![format!(
                "ray start --address=$LWS_LEADER_ADDRESS:{RAY_PORT} --block"
            )]);
        }
        Launch::VllmNodes | Launch::SglangNodes => {
            span_nodes(server, launch, role.node_count(), WORKER_INDEX);
        }
    }
    server.ports = None;
    server.readiness_probe = None;
    server.liveness_probe = None;
    server.startup_probe = None;
    Ok(worker)
}

/// vLLM's default `--master-port`, where the other ranks reach the leader
/// (`vllm/config/parallel.py`).
pub const VLLM_MASTER_PORT: i32 = 29501;

/// Adds to the server's arguments what spans `nodes` nodes without Ray, as
/// rank `rank` (a number, or LWS's index): the node count, the rank and the
/// leader's address; vLLM's workers run `--headless`. A flag the user
/// already gives is left as given. An SGLang container with no command gets
/// SGLang's server (its images start a shell).
fn span_nodes(server: &mut Container, launch: Launch, nodes: i32, rank: &str) {
    let mut args = server.args.clone().unwrap_or_default();
    let given = |args: &[String], flag: &str| {
        args.iter()
            .chain(server.command.iter().flatten())
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    };
    let leader = match launch {
        Launch::SglangNodes => format!("{LEADER_ADDRESS}:{SGLANG_DIST_PORT}"),
        _ => LEADER_ADDRESS.to_owned(),
    };
    let address_flag = match launch {
        Launch::SglangNodes => "--dist-init-addr",
        _ => "--master-addr",
    };
    for (flag, value) in [
        ("--nnodes", Some(nodes.to_string())),
        ("--node-rank", Some(rank.to_owned())),
        (address_flag, Some(leader)),
        ("--headless", None),
    ] {
        let wanted = flag != "--headless" || (launch == Launch::VllmNodes && rank != "0");
        if wanted && !given(&args, flag) {
            args.push(flag.to_owned());
            args.extend(value);
        }
    }
    if launch == Launch::SglangNodes && server.command.as_ref().is_none_or(Vec::is_empty) {
        server.command = Some(
            ["python3", "-m", "sglang.launch_server"]
                .map(str::to_owned)
                .to_vec(),
        );
    }
    server.args = Some(args);
}

/// The user's serve command as an argument list: `command` + `args` when a
/// command is set; otherwise `vllm serve` + `args`, with `--model X` turned
/// into vllm serve's positional model (the seed's form). The Ray executor flag
/// is appended unless present.
fn serve_command(server: &Container) -> Vec<String> {
    let args = server.args.clone().unwrap_or_default();
    let mut command = match server.command.as_deref() {
        Some(command) if !command.is_empty() => [command, &args].concat(),
        _ => {
            let mut serve = vec!["vllm".to_owned(), "serve".to_owned()];
            match args.iter().position(|a| a == "--model") {
                Some(at) if at.saturating_add(1) < args.len() => {
                    serve.extend(args.get(at.saturating_add(1)).cloned());
                    serve.extend(args[..at].iter().cloned());
                    serve.extend(args.iter().skip(at.saturating_add(2)).cloned());
                }
                _ => serve.extend(args),
            }
            serve
        }
    };
    let has_backend = command.iter().any(|a| {
        a == "--distributed-executor-backend" || a.starts_with("--distributed-executor-backend=")
    });
    if !has_backend {
        command.extend([
            "--distributed-executor-backend".to_owned(),
            "ray".to_owned(),
        ]);
    }
    command
}

/// Joins arguments into one shell command line, quoting what the shell would
/// otherwise interpret.
fn shell_join(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn story(nodes: i32) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "deepseek-r1-inference", "namespace": "default", "uid": "u"},
            "spec": {"roles": [{"name": "inference", "componentType": "worker", "replicas": 2,
                "multinode": {"nodeCount": nodes},
                "template": {"metadata": {"labels": {"team": "llm"}}, "spec": {"containers": [{
                    "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                    "args": ["--model", "deepseek-ai/DeepSeek-R1", "--tensor-parallel-size", "32"],
                    "ports": [{"containerPort": 8000, "name": "http"}],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}]}
        }))
        .unwrap()
    }

    fn gang() -> Placement {
        Placement {
            scheduler_name: Some("volcano".into()),
            annotations: BTreeMap::from([
                (
                    children::GROUP_NAME_ANNOTATION.to_owned(),
                    "deepseek-r1-inference".to_owned(),
                ),
                (
                    children::TASK_SPEC_ANNOTATION.to_owned(),
                    "inference-1".to_owned(),
                ),
            ]),
            priority_class_name: None,
            spread: None,
        }
    }

    /// Replica `index` of `service`'s first role, in revision `abc`, named
    /// plainly, placed nowhere in particular.
    fn replica(service: &InferenceService, index: u32) -> Value {
        leader_worker_set(
            service,
            &service.spec.roles[0],
            index,
            "abc",
            &children::Naming::Plain,
            &Placement::default(),
        )
        .unwrap()
    }

    #[test]
    fn single_node_keeps_the_template_and_adds_labels() {
        let service = story(1);
        let lws = replica(&service, 1);
        assert_eq!(lws["metadata"]["name"], "deepseek-r1-inference-inference-1");
        assert_eq!(lws["spec"]["replicas"], 1);
        let group = &lws["spec"]["leaderWorkerTemplate"];
        assert_eq!(group["size"], 1);
        assert!(group.get("leaderTemplate").is_none());
        let pod = &group["workerTemplate"];
        assert_eq!(pod["metadata"]["labels"]["team"], "llm", "user labels kept");
        assert_eq!(pod["metadata"]["labels"][children::REPLICA_INDEX], "1");
        assert_eq!(pod["metadata"]["labels"][children::REVISION], "abc");
        assert_eq!(
            pod["spec"],
            service.spec.roles[0].template.as_ref().unwrap()["spec"],
            "spec untouched"
        );
        assert!(pod["metadata"].get("annotations").is_none());
    }

    #[test]
    fn multi_node_leader_runs_ray_head_then_the_serve_command() {
        let service = story(4);
        let lws = leader_worker_set(
            &service,
            &service.spec.roles[0],
            0,
            "abc",
            &children::Naming::Plain,
            &gang(),
        )
        .unwrap();
        let group = &lws["spec"]["leaderWorkerTemplate"];
        assert_eq!(group["size"], 4);
        let leader = &group["leaderTemplate"]["spec"]["containers"][0];
        assert_eq!(leader["command"], json!(["/bin/sh", "-c"]));
        assert_eq!(
            leader["args"],
            json!([
                "ray start --head --port=6379 && vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 32 --distributed-executor-backend ray"
            ]),
            "the seed's leader command"
        );
        assert_eq!(
            leader["ports"],
            json!([{"containerPort": 8000, "name": "http"}, {"containerPort": 6379, "name": "ray-gcs"}])
        );
        assert_eq!(
            leader["readinessProbe"]["httpGet"],
            json!({"path": "/health", "port": 8000})
        );
        let worker = &group["workerTemplate"]["spec"]["containers"][0];
        assert_eq!(
            worker["args"],
            json!(["ray start --address=$LWS_LEADER_ADDRESS:6379 --block"])
        );
        assert!(worker.get("ports").is_none() && worker.get("readinessProbe").is_none());
        assert_eq!(
            worker["resources"],
            json!({"limits": {"nvidia.com/gpu": "8"}})
        );
        for template in ["leaderTemplate", "workerTemplate"] {
            let pod = &group[template];
            assert_eq!(pod["spec"]["schedulerName"], "volcano");
            assert_eq!(
                pod["metadata"]["annotations"][children::TASK_SPEC_ANNOTATION],
                "inference-1"
            );
            assert_eq!(
                pod["metadata"]["labels"][children::SERVICE],
                "deepseek-r1-inference"
            );
        }
    }

    /// The leader's and the worker's server container of a 2-node replica
    /// whose server is `container`.
    fn two_nodes(container: Value) -> (Value, Value) {
        let service: InferenceService = serde_json::from_value(json!({
            "apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "r1", "namespace": "default", "uid": "u"},
            "spec": {"roles": [{"name": "inference", "componentType": "worker",
                "multinode": {"nodeCount": 2},
                "template": {"spec": {"containers": [container]}}}]}
        }))
        .unwrap();
        let lws = replica(&service, 0);
        let group = &lws["spec"]["leaderWorkerTemplate"];
        (
            group["leaderTemplate"]["spec"]["containers"][0].clone(),
            group["workerTemplate"]["spec"]["containers"][0].clone(),
        )
    }

    #[test]
    fn a_release_that_spans_nodes_without_ray_is_started_its_own_way() {
        let (leader, worker) =
            two_nodes(json!({"name": "vllm", "image": "vllm/vllm-openai:v0.34.0",
            "args": ["deepseek-ai/DeepSeek-R1", "--tensor-parallel-size", "16"],
            "ports": [{"containerPort": 8000, "name": "http"}]}));
        assert_eq!(leader.get("command"), None, "the image's `vllm serve`");
        assert_eq!(
            leader["args"],
            json!([
                "deepseek-ai/DeepSeek-R1",
                "--tensor-parallel-size",
                "16",
                "--nnodes",
                "2",
                "--node-rank",
                "0",
                "--master-addr",
                "$(LWS_LEADER_ADDRESS)"
            ])
        );
        assert_eq!(
            leader["ports"],
            json!([{"containerPort": 8000, "name": "http"}, {"containerPort": 29501, "name": "dist-master"}])
        );
        assert_eq!(leader["readinessProbe"]["httpGet"]["path"], "/health");
        assert_eq!(
            worker["args"],
            json!([
                "deepseek-ai/DeepSeek-R1",
                "--tensor-parallel-size",
                "16",
                "--nnodes",
                "2",
                "--node-rank",
                "$(LWS_WORKER_INDEX)",
                "--master-addr",
                "$(LWS_LEADER_ADDRESS)",
                "--headless"
            ])
        );
        assert!(worker.get("ports").is_none() && worker.get("readinessProbe").is_none());

        let (leader, worker) =
            two_nodes(json!({"name": "sglang", "image": "lmsysorg/sglang:v0.5.23",
            "args": ["--model-path", "m", "--tp-size", "16", "--nnodes=2"]}));
        assert_eq!(
            leader["command"],
            json!(["python3", "-m", "sglang.launch_server"])
        );
        assert_eq!(
            leader["args"],
            json!([
                "--model-path",
                "m",
                "--tp-size",
                "16",
                "--nnodes=2",
                "--node-rank",
                "0",
                "--dist-init-addr",
                "$(LWS_LEADER_ADDRESS):20000"
            ]),
            "a flag the user gives is kept as given"
        );
        assert_eq!(
            worker["args"],
            json!([
                "--model-path",
                "m",
                "--tp-size",
                "16",
                "--nnodes=2",
                "--node-rank",
                "$(LWS_WORKER_INDEX)",
                "--dist-init-addr",
                "$(LWS_LEADER_ADDRESS):20000"
            ])
        );
    }

    /// Every command Tandem writes for a multi-node replica of every release
    /// in the engine table names only flags that release has: read back by
    /// the same reader that warns about a user's command.
    #[test]
    fn the_commands_tandem_writes_are_valid_for_every_known_release() {
        use crate::plan::engine::{self, Engine, command};
        for release in engine::releases::all() {
            let (image, container) = match release.engine {
                Engine::Vllm => (
                    format!("vllm/vllm-openai:v{}", release.release),
                    json!({"name": "vllm", "args": ["--model", "m", "--tensor-parallel-size", "16"]}),
                ),
                Engine::Sglang => (
                    format!("lmsysorg/sglang:v{}", release.release),
                    json!({"name": "sglang", "command": ["python3", "-m", "sglang.launch_server"],
                        "args": ["--model-path", "m", "--tp-size", "16"]}),
                ),
            };
            let mut container = container;
            container["image"] = json!(image);
            let (leader, worker) = two_nodes(container);
            let mut read = 0;
            for (pod, server) in [("leader", &leader), ("worker", &worker)] {
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .map(|s| s.as_str().unwrap().to_owned())
                        .collect()
                };
                let Some(words) = command::server_arguments(
                    release.engine,
                    &strings(&server["command"]),
                    &strings(&server["args"]),
                    pod,
                ) else {
                    // A Ray worker runs `ray start`, not the engine.
                    assert_eq!(
                        engine::multi_node_launch(&image),
                        Launch::Ray,
                        "{}: the {pod} runs no server",
                        release.title()
                    );
                    continue;
                };
                let line = command::parse(release, &words);
                assert!(
                    line.unknown.is_empty(),
                    "{} {pod}: {:?}",
                    release.title(),
                    line.unknown
                );
                read += 1;
            }
            assert!(read >= 1, "{}", release.title());
        }
    }

    /// An LWS CRD whose `restartPolicy` allows `values`.
    fn lws_crd(values: &[&str]) -> crate::plan::shared::installed::Installed {
        crate::plan::shared::installed::Installed::from_crds([&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "spec": {"group": "leaderworkerset.x-k8s.io", "names": {"kind": "LeaderWorkerSet"},
                "versions": [{"name": "v1", "served": true, "schema": {"openAPIV3Schema": {
                    "properties": {"spec": {"properties": {"leaderWorkerTemplate": {"properties": {
                        "restartPolicy": {"type": "string", "enum": values}}}}}}}}}]}})])
    }

    #[test]
    fn a_multi_node_group_is_not_recreated_while_a_pod_is_pending() {
        use crate::plan::shared::installed::ASSUMED;
        let nine = lws_crd(&[
            "Default",
            "RecreateGroupOnPodRestart",
            "RecreateGroupAfterStart",
            "None",
        ]);
        let eight = lws_crd(&["Default", "RecreateGroupOnPodRestart", "None"]);
        assert_eq!(group_restart(&nine), GroupRestart::AfterStartField);
        assert_eq!(group_restart(&ASSUMED), GroupRestart::AfterStartField);
        assert_eq!(group_restart(&eight), GroupRestart::AfterStartAnnotation);

        let service = story(4);
        let built = || replica(&service, 0);
        let policy = |o: &Value| o["spec"]["leaderWorkerTemplate"]["restartPolicy"].clone();
        let annotated =
            |o: &Value| o["metadata"]["annotations"][RESTART_AFTER_START_ANNOTATION] == "true";
        // A new group: the field where LWS has it, else the annotation.
        let mut new = built();
        set_group_restart(&mut new, GroupRestart::AfterStartField, None, false);
        assert_eq!(policy(&new), RESTART_AFTER_START);
        assert!(!annotated(&new));
        let mut older = built();
        set_group_restart(&mut older, GroupRestart::AfterStartAnnotation, None, false);
        assert_eq!(policy(&older), RESTART_POLICY);
        assert!(annotated(&older));
        // A running group keeps its policy (a new one would be a new LWS
        // revision, recreating it) and gets the annotation instead.
        let mut running = built();
        let observed = older.clone();
        set_group_restart(
            &mut running,
            GroupRestart::AfterStartField,
            Some(&observed),
            false,
        );
        assert_eq!(policy(&running), RESTART_POLICY);
        assert!(annotated(&running));
        // A single-node replica is left as it was.
        let single = story(1);
        let mut one = replica(&single, 0);
        set_group_restart(&mut one, GroupRestart::AfterStartField, None, false);
        assert_eq!(policy(&one), RESTART_POLICY);

        // With a recovery setting, LWS never recreates: Tandem does, with
        // its back-off. A running group keeps its policy (and so would
        // recreate at once, Tandem holding it after); a new revision or a
        // new group takes None, single-node or not.
        for (mut object, observed) in [(built(), None), (replica(&single, 0), None)] {
            set_group_restart(&mut object, GroupRestart::AfterStartField, observed, true);
            assert_eq!(policy(&object), "None");
            assert!(!annotated(&object));
        }
        let mut kept = built();
        set_group_restart(
            &mut kept,
            GroupRestart::AfterStartField,
            Some(&observed),
            true,
        );
        assert_eq!(policy(&kept), RESTART_POLICY);
        let mut old_revision = observed.clone();
        old_revision["metadata"]["labels"][children::REVISION] = json!("an-older-one");
        let mut moved = built();
        set_group_restart(
            &mut moved,
            GroupRestart::AfterStartField,
            Some(&old_revision),
            true,
        );
        assert_eq!(policy(&moved), "None");
        // The setting removed: a kept None is replaced, since nothing would
        // recreate the group any more.
        let mut unset = built();
        set_group_restart(
            &mut unset,
            GroupRestart::AfterStartField,
            Some(&moved),
            false,
        );
        assert_eq!(policy(&unset), RESTART_AFTER_START);
        let mut single_none = replica(&single, 0);
        set_group_restart(&mut single_none, GroupRestart::AfterStartField, None, true);
        let mut single_unset = replica(&single, 0);
        set_group_restart(
            &mut single_unset,
            GroupRestart::AfterStartField,
            Some(&single_none),
            false,
        );
        assert_eq!(policy(&single_unset), "None", "no restart of every replica");
    }

    #[test]
    fn serve_commands() {
        let container = |v: Value| -> Container { serde_json::from_value(v).unwrap() };
        let c = container(
            json!({"name": "s", "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "args": ["--model", "m", "--kv-transfer-config", "{\"kv_role\":\"kv_consumer\"}"]}),
        );
        assert_eq!(
            shell_join(&serve_command(&c)),
            r#"python3 -m vllm.entrypoints.openai.api_server --model m --kv-transfer-config '{"kv_role":"kv_consumer"}' --distributed-executor-backend ray"#
        );
        let own_backend =
            container(json!({"name": "s", "args": ["m", "--distributed-executor-backend=mp"]}));
        assert_eq!(
            serve_command(&own_backend),
            ["vllm", "serve", "m", "--distributed-executor-backend=mp"]
        );
        assert_eq!(
            shell_join(&["it's".to_owned(), String::new()]),
            r#"'it'\''s' ''"#
        );
    }

    #[test]
    fn a_user_readiness_probe_is_kept() {
        let mut value = serde_json::to_value(story(2)).unwrap();
        value["spec"]["roles"][0]["template"]["spec"]["containers"][0]["readinessProbe"] =
            json!({"tcpSocket": {"port": 8000}});
        let service: InferenceService = serde_json::from_value(value).unwrap();
        let lws = replica(&service, 0);
        assert_eq!(
            lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["readinessProbe"],
            json!({"tcpSocket": {"port": 8000}})
        );
    }
}
