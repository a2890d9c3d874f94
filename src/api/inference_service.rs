//! InferenceService (`fusioninfer.io/v1alpha1`, seed 003): a model server made of
//! roles (router, prefiller, decoder, worker), each replica one LeaderWorkerSet.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::limits::{
    self, MAX_NODE_COUNT, MAX_PODS_PER_ROLE, MAX_PODS_PER_SERVICE, MAX_REPLICAS, MAX_ROLES,
};
use super::placement::{self, Placement};
use super::{Findings, dns1123_label_error, parse_at, schema};

/// The desired state of an inference service: its roles and how they are
/// scheduled and upgraded.
// Each printcolumn(...) repeats name/type_/json_path by design; clippy reads
// the repeated keys as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "fusioninfer.io",
    version = "v1alpha1",
    kind = "InferenceService",
    plural = "inferenceservices",
    shortname = "infsvc",
    category = "tandem",
    namespaced,
    status = "InferenceServiceStatus",
    derive = "PartialEq",
    doc = "An LLM inference service made of roles (router, prefiller, decoder, worker); each replica of a role is one LeaderWorkerSet.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Ready replicas over desired replicas, all serving roles together"
    ),
    printcolumn(
        name = "Up-To-Date",
        type_ = "string",
        json_path = ".status.updated",
        description = "Replicas at their role's update revision over desired replicas, all serving roles together"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the service is or is not ready"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        description = "What the service waits for: each role not ready, with why (unschedulable pods)",
        priority = 1
    ),
    printcolumn(
        name = "Upgrade",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"UpgradeInProgress\")].status",
        description = "Whether an upgrade is moving capacity and traffic",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.roles.map(r, (has(r.replicas) ? r.replicas : 1) * (has(r.multinode) && has(r.multinode.nodeCount) ? r.multinode.nodeCount : 1)).sum() <= 100000",
    "message": "the service's pods (the sum over its roles of replicas × multinode.nodeCount) must be at most 100000",
}]))]
pub struct InferenceServiceSpec {
    /// The components of the service. Each role is named by the user and
    /// classified by its componentType.
    #[schemars(length(min = 1, max = MAX_ROLES))]
    pub roles: Vec<Role>,

    /// Scheduler, queue, priority class and gang policy for the service's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_strategy: Option<SchedulingStrategy>,

    /// How a change of the pod templates reaches running replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<UpgradeStrategy>,

    /// Where the replicas land: each multi-node replica in one network
    /// domain, the prefill/decode pair in one block, single-node replicas
    /// spread over zones; required or preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

impl InferenceServiceSpec {
    /// The RollingUpdate pace of `role`: each field of its own
    /// `rollingUpdate` when set, else the service's
    /// `upgradeStrategy.rollingUpdate`.
    pub fn rolling_update_for(&self, role: &Role) -> RollingUpdateOptions {
        let service = self
            .upgrade_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.clone())
            .unwrap_or_default();
        let Some(own) = role.rolling_update.clone() else {
            return service;
        };
        RollingUpdateOptions {
            max_unavailable: own.max_unavailable.or(service.max_unavailable),
            max_surge: own.max_surge.or(service.max_surge),
            partition: own.partition.or(service.partition),
            progress_deadline_seconds: own
                .progress_deadline_seconds
                .or(service.progress_deadline_seconds),
        }
    }

    /// `spec.upgradeStrategy.type`, RollingUpdate when unset.
    pub fn upgrade_type(&self) -> UpgradeType {
        self.upgrade_strategy
            .as_ref()
            .and_then(|u| u.type_)
            .unwrap_or_default()
    }
}

/// The semantic role of a component.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ComponentType {
    /// Request router: an endpoint picker behind an InferencePool.
    Router,
    /// Prompt processing and KV-cache production.
    Prefiller,
    /// Token generation.
    Decoder,
    /// Monolithic inference (full request lifecycle).
    Worker,
}

impl ComponentType {
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentType::Router => "router",
            ComponentType::Prefiller => "prefiller",
            ComponentType::Decoder => "decoder",
            ComponentType::Worker => "worker",
        }
    }
}

impl fmt::Display for ComponentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the router's endpoint picker chooses a model server.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingStrategy {
    PrefixCache,
    KvCacheUtilization,
    QueueSize,
    LoraAffinity,
    PdDisaggregation,
}

/// One logical component of the service.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.replicas) || !has(self.multinode) || !has(self.multinode.nodeCount) || self.replicas * self.multinode.nodeCount <= 100000",
    "message": "the role's pods (replicas × multinode.nodeCount) must be at most 100000",
}]))]
pub struct Role {
    /// User-chosen, unique name (a DNS-1123 label); part of every child's name.
    pub name: String,

    /// router, prefiller, decoder or worker.
    pub component_type: ComponentType,

    /// Number of independent replicas (for a router: endpoint-picker pods). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub replicas: Option<i32>,

    /// Spreads each replica over several nodes (leader + workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multinode: Option<Multinode>,

    /// Pod template (a PodTemplateSpec) of the role's model servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::raw_object")]
    pub template: Option<serde_json::Value>,

    /// Which replicas go first when the role scales down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<RoleScaleDown>,

    /// Router only: the endpoint picker's strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RoutingStrategy>,

    /// Router only: a Gateway API HTTPRouteSpec; Tandem keeps its parents,
    /// hostnames, matches and filters and adds the InferencePool as backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::raw_object")]
    pub httproute: Option<serde_json::Value>,

    /// Router only: the endpoint picker's configuration as YAML, used verbatim
    /// instead of the one generated from `strategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker_config: Option<String>,

    /// Router only: requests wait in the endpoint picker's queue while no
    /// serving pod can take them (every one saturated, or none at all: a
    /// service scaled to zero) instead of being answered 503. Tandem turns
    /// on flow control in the generated configuration of GIE's picker
    /// (`featureGates: [flowControl]` and a `flowControl` block). Not with
    /// `strategy: pd-disaggregation` (llm-d v0.4.0's picker has no queue
    /// when its pool is empty) nor with `endpointPickerConfig` (set it there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<RequestQueue>,

    /// Serving roles: this role's RollingUpdate pace; each field it sets
    /// overrides the same field of spec.upgradeStrategy.rollingUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateOptions>,

    /// Serving roles: how long a replica Tandem removes (scale-down, a
    /// RollingUpdate replacing it) is out of traffic before it is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,

    /// Serving roles: the PodDisruptionBudget Tandem keeps for the role's
    /// pods, counted in replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_budget: Option<DisruptionBudget>,

    /// Serving roles: how a replica whose containers keep restarting is
    /// recreated. Tandem holds it with no pods for a back-off that doubles
    /// with each restart, and past `maxRestarts` marks it failed and holds
    /// it until the role's template or this setting changes. Unset:
    /// LeaderWorkerSet recreates the group at once, every time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// A replica's bounded recovery (RBG's `restartPolicyConfig` back-off, LWS
/// KEP-820's `maxGroupRestarts`): after each restart of one of its
/// containers the replica is scaled to no pods for `backoffSeconds ×
/// 2^(restarts-1)`, at most `maxBackoffSeconds`, then recreated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recovery {
    /// Seconds the replica holds no pods after its first restart. Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = Recovery::MAX_SECONDS))]
    pub backoff_seconds: Option<i64>,
    /// The longest back-off, in seconds; also how long a replica must stay
    /// ready before its restarts are forgotten. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = Recovery::MAX_SECONDS))]
    pub max_backoff_seconds: Option<i64>,
    /// Restarts after which the replica is failed: it holds no pods until
    /// the role's template or this setting changes. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = Recovery::MAX_RESTARTS))]
    pub max_restarts: Option<i32>,
}

impl Recovery {
    /// RBG's base delay.
    pub const DEFAULT_BACKOFF_SECONDS: i64 = 30;
    /// RBG's maximum delay (and the kubelet's ten minutes of running
    /// before it forgets a container's back-off).
    pub const DEFAULT_MAX_BACKOFF_SECONDS: i64 = 600;
    /// A day: a longer wait holds a replica out for no reason it can know.
    pub const MAX_SECONDS: i64 = 86_400;
    pub const MAX_RESTARTS: i32 = 1_000;
}

/// The drain of a replica that goes: out of the InferencePool's and the
/// revision Services' selectors for `seconds`, then deleted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drain {
    /// Seconds a replica stays out of traffic before it is deleted; 0 deletes
    /// it at once. Default 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = Drain::MAX_SECONDS))]
    pub seconds: Option<i64>,
}

impl Drain {
    pub const DEFAULT_SECONDS: i64 = 30;
    /// A day: a longer drain holds GPUs for no generation that exists.
    pub const MAX_SECONDS: i64 = 86_400;
}

/// The endpoint picker's queue (GIE's flow control): how many requests
/// wait, and how long each may.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestQueue {
    /// Seconds a request may wait before the picker answers it 503 ("request
    /// timed out in queue"): GIE's `defaultRequestTTL`. Longer than a cold
    /// start (the pods scheduled, the model loaded), and shorter than the
    /// Gateway's route timeout, which must be raised to match. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = RequestQueue::MAX_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<i64>,
    /// The most requests waiting at once; one more is answered 429. GIE's
    /// `maxRequests`. Default: no count limit (GIE bounds each priority band
    /// at 1 GB of request bodies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = RequestQueue::MAX_REQUESTS))]
    pub max_requests: Option<i64>,
}

impl RequestQueue {
    pub const DEFAULT_TIMEOUT_SECONDS: i64 = 600;
    /// An hour: no client waits longer for a first token.
    pub const MAX_TIMEOUT_SECONDS: i64 = 3_600;
    pub const MAX_REQUESTS: i64 = 1_000_000;

    /// The timeout in seconds, default applied.
    pub fn timeout_seconds(&self) -> i64 {
        self.timeout_seconds
            .unwrap_or(Self::DEFAULT_TIMEOUT_SECONDS)
    }
}

/// How many replicas of a role a voluntary disruption (a node drain's
/// eviction) may take down at once.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudget {
    /// Replicas whose pods may be evicted at the same time; the
    /// PodDisruptionBudget's minAvailable is the role's replicas less this,
    /// times nodeCount. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_REPLICAS))]
    pub max_unavailable_replicas: Option<i32>,
}

impl DisruptionBudget {
    pub const DEFAULT_MAX_UNAVAILABLE_REPLICAS: i32 = 1;
}

impl Role {
    pub const DEFAULT_REPLICAS: i32 = 1;

    /// Seconds a replica that goes is out of traffic before it is deleted.
    pub fn drain_seconds(&self) -> i64 {
        self.drain
            .as_ref()
            .and_then(|d| d.seconds)
            .unwrap_or(Drain::DEFAULT_SECONDS)
    }

    /// Replicas a voluntary disruption may take down at once.
    pub fn max_unavailable_replicas(&self) -> i32 {
        self.disruption_budget
            .as_ref()
            .and_then(|d| d.max_unavailable_replicas)
            .unwrap_or(DisruptionBudget::DEFAULT_MAX_UNAVAILABLE_REPLICAS)
    }

    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(Self::DEFAULT_REPLICAS)
    }

    /// Pods per replica: 1 unless the role is multi-node.
    pub fn node_count(&self) -> i32 {
        self.multinode
            .as_ref()
            .and_then(|m| m.node_count)
            .unwrap_or(1)
    }

    pub fn is_router(&self) -> bool {
        self.component_type == ComponentType::Router
    }

    /// What one pod of the role requests, per resource, as the scheduler
    /// counts it ([`super::quantity::pod_requests`]): what a gang reserves,
    /// and the GPUs an engine's parallelism must use.
    pub fn pod_requests(&self) -> Result<BTreeMap<String, super::quantity::Quantity>, String> {
        let template = self
            .template
            .as_ref()
            .ok_or_else(|| format!("role {:?}: has no pod template", self.name))?;
        let template: PodTemplateSpec = parse_at(template, "template")
            .map_err(|v| format!("role {:?}: not a PodTemplateSpec: {v}", self.name))?;
        let pod = template
            .spec
            .ok_or_else(|| format!("role {:?}: template has no pod spec", self.name))?;
        super::quantity::pod_requests(&pod).map_err(|e| format!("role {:?}: {e}", self.name))
    }

    pub fn scale_down_policy(&self) -> RoleScaleDownPolicy {
        self.scale_down
            .as_ref()
            .and_then(|s| s.policy)
            .unwrap_or_default()
    }
}

/// Multi-node distributed inference.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Multinode {
    /// Number of distinct nodes (pods) per replica. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_NODE_COUNT))]
    pub node_count: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleScaleDown {
    /// Ordered (highest index first, the default) or Binpack (lowest summed
    /// pod-deletion-cost first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RoleScaleDownPolicy>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RoleScaleDownPolicy {
    #[default]
    Ordered,
    Binpack,
}

/// Pod-level scheduling for the whole service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingStrategy {
    /// Scheduler for the pods; `volcano` turns on gang scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Who gang-schedules the service: Volcano (a Volcano PodGroup),
    /// Kubernetes (kube-scheduler's own PodGroups, scheduling.k8s.io/v1alpha2:
    /// one per replica and one for the first replica of each serving role)
    /// or None. Left out, admission fills it in when the service needs a
    /// gang: Volcano when its PodGroup CRD is installed, else Kubernetes when
    /// the API server serves its PodGroups, else None.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_scheduler: Option<GangScheduler>,
    /// Volcano queue of the service's PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Priority class of the PodGroup and its pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// SubGroup (Volcano >= 1.14: each replica atomic, one replica of each
    /// gang role together, more replicas independently) or TaskMember (the
    /// seed's minTaskMember layout: all or nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_policy: Option<GangPolicy>,
}

/// Who gang-schedules a service's pods.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum GangScheduler {
    /// Volcano's scheduler, through one Volcano PodGroup per service.
    Volcano,
    /// kube-scheduler, through Kubernetes' PodGroups (alpha in 1.36).
    Kubernetes,
    /// No gang: each pod is scheduled on its own.
    None,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum GangPolicy {
    #[default]
    SubGroup,
    TaskMember,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStrategy {
    /// RollingUpdate (default), NewRevision, IncrementalUpgrade or None.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<UpgradeType>,
    /// Options of IncrementalUpgrade; NewRevision uses only its gatewayClassName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_upgrade_options: Option<IncrementalUpgradeOptions>,
    /// How RollingUpdate paces a role's replicas (every role alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateOptions>,
}

/// The pace of a RollingUpdate, applied to each serving role: how many of its
/// replicas may be out of service, and how many extra may run, while its
/// replicas move to the role's new revision one LeaderWorkerSet at a time.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateOptions {
    /// Replicas of a role that may be out of service (not ready, or being
    /// replaced) during the update: a count, or a percent of the role's
    /// replicas rounded down. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Replicas of a role that may run beyond its desired count during the
    /// update (extra GPUs): a count, or a percent of the role's replicas
    /// rounded up. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Replicas with an index below it keep the old revision (a canary).
    /// Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// Seconds a replica moved to the new revision may take to become ready
    /// before the rollout halts (Progressing=False, ProgressDeadlineExceeded).
    /// Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpgradeType {
    /// Each LeaderWorkerSet rolls its own pods.
    #[default]
    RollingUpdate,
    /// Blue/green: a full new revision, then all traffic at once.
    NewRevision,
    /// Capacity and traffic move step by step through a Gateway.
    IncrementalUpgrade,
    /// Running replicas are left alone; only replicas created later change.
    None,
}

impl UpgradeType {
    /// NewRevision and IncrementalUpgrade run the pending revision beside the
    /// active one, each with its own LeaderWorkerSets, behind a Gateway.
    pub fn runs_revisions_side_by_side(self) -> bool {
        matches!(
            self,
            UpgradeType::NewRevision | UpgradeType::IncrementalUpgrade
        )
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IncrementalUpgradeOptions {
    /// Capacity (percent of the desired replicas) added to the new revision per step. Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge_percent: Option<i32>,
    /// Traffic percent moved to the new revision every intervalSeconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_size_percent: Option<i32>,
    /// Seconds between traffic steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = limits::MAX_INTERVAL_SECONDS))]
    pub interval_seconds: Option<i32>,
    /// GatewayClass of the Gateway Tandem creates for the service (NewRevision and IncrementalUpgrade).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_class_name: Option<String>,
}

impl IncrementalUpgradeOptions {
    pub const DEFAULT_MAX_SURGE_PERCENT: i32 = 100;
}

/// The observed state of an inference service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServiceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Progressing, Degraded, Failed, UpgradeInProgress, RollbackInProgress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Per role, keyed by spec.roles[].name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentStatus>,

    /// Ready replicas over desired replicas of the serving roles ("3/6").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,

    /// Replicas at their role's update revision over desired replicas of the
    /// serving roles ("3/6").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated: Option<String>,

    /// Locks held by ScaleViews: a locked role's replicas change only through its view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub scale_views: Vec<ScaleViewLock>,

    /// Active and pending revisions during NewRevision and IncrementalUpgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
}

/// The aggregated state of one role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    pub desired_replicas: i32,
    /// Replicas whose every node is ready.
    pub ready_replicas: i32,
    pub nodes_per_replica: i32,
    pub total_pods: i32,
    pub ready_pods: i32,
    pub phase: ComponentPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Serving roles: replicas at the role's update revision.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Serving roles: replicas at the update revision whose every node is ready.
    #[serde(default)]
    pub updated_ready_replicas: i32,
    /// Serving roles: the revision most replicas ran before the update; the
    /// update revision once every replica runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// Serving roles: the revision new and replaced replicas get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// Serving roles: replicas Draining, out of traffic until their drain
    /// ends and they are deleted (or revived by a scale-up). They are not
    /// counted as ready.
    #[serde(default)]
    pub draining_replicas: i32,
    /// Serving roles: replicas that are not ready because a container keeps
    /// restarting or waits in CrashLoopBackOff, ImagePullBackOff or
    /// ErrImagePull.
    #[serde(default)]
    pub failing_replicas: i32,
    /// The first failing replica: its index, pod, container and reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_reason: Option<String>,
    /// Serving roles: replicas past their recovery limit
    /// (`recovery.maxRestarts`), held with no pods until the role's template
    /// or recovery changes. Counted among the failing replicas too.
    #[serde(default)]
    pub failed_replicas: i32,
    /// Serving roles: replicas waiting for the scheduler: a pod of theirs
    /// is bound to no node and its PodScheduled condition is False with
    /// reason Unschedulable.
    #[serde(default)]
    pub unschedulable_replicas: i32,
    /// The first unschedulable replica: its index, pod and the scheduler's
    /// own message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable_reason: Option<String>,
    /// Serving roles: replicas short of desiredReplicas since the role,
    /// Running with every replica ready, lost ready replicas without a
    /// planned change (pods gone with a node, evicted, or no longer ready).
    /// Counted until every desired replica is ready again; the role is
    /// Degraded (ReplicasUnavailable) meanwhile.
    #[serde(default)]
    pub lost_replicas: i32,
    /// Prefill/decode services: why the role runs one replica though it
    /// asks none. Its side (the prefillers or the decoders) asks 0 while
    /// the other side serves, and the two reach zero and leave it together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_for_pair: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ComponentPhase {
    #[default]
    Pending,
    Deploying,
    Running,
    Failed,
    Unknown,
}

/// A ScaleView's lock on some roles of this service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleViewLock {
    /// The ScaleView's name (same namespace).
    pub name: String,
    /// The ScaleView's uid: a view recreated under the same name is another view.
    pub uid: String,
    /// The ScaleView generation the replicas below were computed from.
    pub generation: i64,
    /// The locked roles and the replicas the view set for them.
    #[serde(default)]
    pub role_replicas: Vec<RoleReplicas>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleReplicas {
    pub role: String,
    pub replicas: i32,
}

/// The revisions of a NewRevision or IncrementalUpgrade service: the active
/// one, and the pending one while an upgrade or rollback is under way.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<RevisionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<RevisionStatus>,
}

/// Capacity and traffic of one revision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    /// The revision hash, the value of the fusioninfer.io/revision label on its LeaderWorkerSets and pods.
    pub revision: String,
    /// Percent of the desired replicas this revision is scaled to.
    pub target_capacity: i32,
    /// Percent of the traffic routed to this revision.
    pub traffic_routed_percent: i32,
    /// When traffic last moved between the revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_traffic_move_time: Option<Time>,
}

/// Fills every default into the spec, so the stored object says what Tandem
/// will do. Tandem reads an absent field as the same default, so an object that
/// skipped this (mutating webhook unreachable) behaves the same.
pub fn defaults(spec: &mut InferenceServiceSpec) {
    for role in &mut spec.roles {
        role.replicas.get_or_insert(Role::DEFAULT_REPLICAS);
        if let Some(multinode) = role.multinode.as_mut() {
            multinode.node_count.get_or_insert(1);
        }
        if !role.is_router() {
            role.scale_down
                .get_or_insert(RoleScaleDown { policy: None })
                .policy
                .get_or_insert_default();
            role.drain
                .get_or_insert_default()
                .seconds
                .get_or_insert(Drain::DEFAULT_SECONDS);
            role.disruption_budget
                .get_or_insert_default()
                .max_unavailable_replicas
                .get_or_insert(DisruptionBudget::DEFAULT_MAX_UNAVAILABLE_REPLICAS);
        }
    }
    // `schedulingStrategy.gangPolicy` is left unset: unset, the layout
    // follows the installed Volcano (plan::inference_service::dependencies),
    // and only a layout asked for is refused on a Volcano that cannot hold it.
    if let Some(placement) = spec.placement.as_mut() {
        placement::defaults(placement);
    }
    let upgrade = spec.upgrade_strategy.get_or_insert_default();
    upgrade.type_.get_or_insert_default();
    if let Some(options) = upgrade.incremental_upgrade_options.as_mut() {
        options
            .max_surge_percent
            .get_or_insert(IncrementalUpgradeOptions::DEFAULT_MAX_SURGE_PERCENT);
    }
}

/// Everything that makes a single InferenceService unusable, each with its field path.
pub fn validate(spec: &InferenceServiceSpec) -> Findings {
    let mut findings = Findings::default();
    validate_roles(&spec.roles, &mut findings);
    if let Some(scheduling) = &spec.scheduling_strategy {
        validate_scheduling(scheduling, &mut findings);
    }
    if let Some(upgrade) = &spec.upgrade_strategy {
        validate_upgrade(upgrade, &mut findings);
    }
    validate_rolling_update(spec, &mut findings);
    if let Some(placement) = &spec.placement {
        placement::validate(placement, placement_shape(spec), &mut findings);
    }
    findings
}

/// What the service's serving roles give `spec.placement` to place (the
/// admission rules and the plan's both read it).
pub fn placement_shape(spec: &InferenceServiceSpec) -> placement::Shape {
    let serving = || spec.roles.iter().filter(|r| !r.is_router());
    let types: BTreeSet<ComponentType> = serving().map(|r| r.component_type).collect();
    placement::Shape {
        multi_node: serving().any(|r| r.node_count() > 1),
        pair: types.len() >= 2,
        single_node: serving().any(|r| r.node_count() <= 1),
    }
}

/// One budget of a `rollingUpdate` block: a count >= 0 or a percent from 0%
/// to 100%.
fn validate_budget(value: &IntOrString, at: &str, findings: &mut Findings) {
    match value {
        IntOrString::Int(n) if *n < 0 => findings.deny(at, format!("must be >= 0, got {n}")),
        IntOrString::Int(_) => {}
        IntOrString::String(text) => match text.strip_suffix('%').map(|p| p.parse::<i64>()) {
            Some(Ok(percent)) if (0..=100).contains(&percent) => {}
            Some(Ok(percent)) => findings.deny(
                at,
                format!("a percent must be between 0% and 100%, got {percent}%"),
            ),
            _ => findings.deny(
                at,
                format!("must be a count (such as 1) or a percent (such as \"25%\"), got {text:?}"),
            ),
        },
    }
}

/// The fields of one `rollingUpdate` block at `at` on their own: budgets a
/// count >= 0 or a percent from 0% to 100%, a partition >= 0, a deadline
/// above 0.
fn validate_rolling_fields(rolling: &RollingUpdateOptions, at: &str, findings: &mut Findings) {
    if let Some(value) = &rolling.max_unavailable {
        validate_budget(value, &format!("{at}.maxUnavailable"), findings);
    }
    if let Some(value) = &rolling.max_surge {
        validate_budget(value, &format!("{at}.maxSurge"), findings);
    }
    if let Some(partition) = rolling.partition
        && partition < 0
    {
        findings.deny(
            format!("{at}.partition"),
            format!("must be >= 0, got {partition}"),
        );
    }
    if let Some(seconds) = rolling.progress_deadline_seconds
        && seconds <= 0
    {
        findings.deny(
            format!("{at}.progressDeadlineSeconds"),
            format!("must be > 0, got {seconds}"),
        );
    }
}

/// `spec.upgradeStrategy.rollingUpdate` and each role's `rollingUpdate`:
/// their fields ([`validate_rolling_fields`]), then each serving role's
/// effective pace ([`InferenceServiceSpec::rolling_update_for`]): budgets not
/// both 0 (the rollout could never move) and a partition at most the role's
/// replicas, denied at the field that sets them. A router role has no
/// replicas to roll; other strategies ignore the blocks, with a warning.
fn validate_rolling_update(spec: &InferenceServiceSpec, findings: &mut Findings) {
    let service_at = "spec.upgradeStrategy.rollingUpdate";
    let service = spec
        .upgrade_strategy
        .as_ref()
        .and_then(|u| u.rolling_update.as_ref());
    let strategy = spec.upgrade_type();
    let mut given: Vec<String> = service.iter().map(|_| service_at.to_owned()).collect();
    given.extend(
        spec.roles
            .iter()
            .enumerate()
            .filter(|(_, r)| r.rolling_update.is_some())
            .map(|(i, _)| format!("spec.roles[{i}].rollingUpdate")),
    );
    if given.is_empty() {
        return;
    }
    if strategy != UpgradeType::RollingUpdate {
        for at in given {
            findings.warn(format!(
                "{at} is ignored: spec.upgradeStrategy.type is {strategy:?}"
            ));
        }
        return;
    }
    if let Some(rolling) = service {
        validate_rolling_fields(rolling, service_at, findings);
    }
    for (i, role) in spec.roles.iter().enumerate() {
        let Some(own) = &role.rolling_update else {
            continue;
        };
        let at = format!("spec.roles[{i}].rollingUpdate");
        if role.is_router() {
            findings.deny(
                at,
                "a router role has no replicas to roll: set it on a serving role or in spec.upgradeStrategy.rollingUpdate",
            );
            continue;
        }
        validate_rolling_fields(own, &at, findings);
    }
    let is_zero = |v: &IntOrString| match v {
        IntOrString::Int(n) => *n == 0,
        IntOrString::String(text) => text
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .is_some_and(|p| p == 0),
    };
    for (i, role) in spec
        .roles
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.is_router())
    {
        let effective = spec.rolling_update_for(role);
        let own = role.rolling_update.as_ref();
        let from = |set: bool| {
            if set {
                format!("spec.roles[{i}].rollingUpdate")
            } else {
                service_at.to_owned()
            }
        };
        // Unset: maxUnavailable 1, maxSurge 0.
        let unavailable_zero = effective.max_unavailable.as_ref().is_some_and(is_zero);
        let surge_zero = effective.max_surge.as_ref().is_none_or(is_zero);
        if unavailable_zero && surge_zero {
            let own_sets =
                own.is_some_and(|o| o.max_unavailable.is_some() || o.max_surge.is_some());
            let field = format!("{}.maxUnavailable", from(own_sets));
            if !findings.violations.iter().any(|v| v.field == field) {
                findings.deny(
                    field,
                    "maxUnavailable and maxSurge cannot both be 0: no replica could ever be replaced",
                );
            }
        }
        if let Some(partition) = effective.partition
            && partition > role.replicas()
        {
            let own_sets = own.is_some_and(|o| o.partition.is_some());
            findings.deny(
                format!("{}.partition", from(own_sets)),
                format!(
                    "must be at most the replicas of role {} (spec.roles[{i}].replicas {}), got {partition}",
                    role.name,
                    role.replicas()
                ),
            );
        }
    }
}

fn validate_roles(roles: &[Role], findings: &mut Findings) {
    if roles.is_empty() {
        findings.deny("spec.roles", "must list at least one role");
        return;
    }
    if roles.len() > MAX_ROLES {
        findings.deny(
            "spec.roles",
            format!("must list at most {MAX_ROLES} roles, got {}", roles.len()),
        );
    }
    let mut first_index_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, role) in roles.iter().enumerate() {
        let at = format!("spec.roles[{i}]");
        if let Some(reason) = dns1123_label_error(&role.name) {
            findings.deny(format!("{at}.name"), reason);
        }
        if let Some(first) = first_index_of.insert(&role.name, i) {
            findings.deny(
                format!("{at}.name"),
                format!(
                    "duplicate role name {:?} (also spec.roles[{first}].name)",
                    role.name
                ),
            );
            first_index_of.insert(&role.name, first);
        }
        validate_role(role, &at, findings);
    }
    validate_service_pods(roles, findings);

    let types: BTreeSet<ComponentType> = roles.iter().map(|r| r.component_type).collect();
    let routers: Vec<usize> = roles
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_router())
        .map(|(i, _)| i)
        .collect();
    if routers.len() > 1 {
        findings.deny(
            format!("spec.roles[{}].componentType", routers[1]),
            format!(
                "a service has at most one router role, spec.roles[{}] is already one",
                routers[0]
            ),
        );
    }
    if types.iter().all(|t| *t == ComponentType::Router) {
        findings.deny(
            "spec.roles",
            "needs at least one role that serves (componentType worker, prefiller or decoder)",
        );
    }
    let has = |t| types.contains(&t);
    if has(ComponentType::Prefiller) != has(ComponentType::Decoder) {
        let (present, missing) = if has(ComponentType::Prefiller) {
            ("prefiller", "decoder")
        } else {
            ("decoder", "prefiller")
        };
        findings.deny(
            "spec.roles",
            format!(
                "a disaggregated service needs both a prefiller and a decoder role: has a {present} but no {missing}"
            ),
        );
    }
}

/// The pods of a role: `replicas × nodeCount` (a router's replicas are one
/// pod each), exact in an i64 for any two i32s.
pub fn role_pods(role: &Role) -> i64 {
    let nodes = if role.is_router() {
        1
    } else {
        role.node_count().max(1)
    };
    i64::from(role.replicas().max(0)).saturating_mul(i64::from(nodes))
}

/// The service's pods, over all roles, within [`MAX_PODS_PER_SERVICE`].
/// Checked only when every role is within its own limits, so the message
/// points at the sum, not at a role already denied.
fn validate_service_pods(roles: &[Role], findings: &mut Findings) {
    let each_within = roles.iter().all(|r| {
        (0..=MAX_REPLICAS).contains(&r.replicas())
            && (r.is_router() || (1..=MAX_NODE_COUNT).contains(&r.node_count()))
            && role_pods(r) <= MAX_PODS_PER_ROLE
    });
    if !each_within {
        return;
    }
    let total = roles
        .iter()
        .fold(0i64, |sum, role| sum.saturating_add(role_pods(role)));
    if total > MAX_PODS_PER_SERVICE {
        findings.deny(
            "spec.roles",
            format!(
                "the service's pods (the sum over its roles of replicas × nodeCount) {}",
                limits::over(MAX_PODS_PER_SERVICE, total)
            ),
        );
    }
}

fn validate_role(role: &Role, at: &str, findings: &mut Findings) {
    let replicas_within = validate_replicas(role, at, findings);
    let node_count_within = validate_multinode(role, at, findings);
    validate_drain_seconds(role, at, findings);
    validate_disruption_budget(role, at, findings);
    validate_recovery(role, at, findings);
    if replicas_within && node_count_within {
        validate_role_pods(role, at, findings);
    }
    if role.is_router() {
        validate_router_role(role, at, findings);
    } else {
        validate_serving_role(role, at, findings);
    }
}

/// `replicas` within 0..=MAX_REPLICAS; false when it is not (the pod count
/// check then has nothing sensible to multiply).
fn validate_replicas(role: &Role, at: &str, findings: &mut Findings) -> bool {
    let Some(replicas) = role.replicas else {
        return true;
    };
    if replicas < 0 {
        findings.deny(
            format!("{at}.replicas"),
            format!("must be >= 0, got {replicas}"),
        );
        false
    } else if replicas > MAX_REPLICAS {
        findings.deny(
            format!("{at}.replicas"),
            limits::over(MAX_REPLICAS, replicas),
        );
        false
    } else {
        true
    }
}

/// `multinode` only on serving roles, its `nodeCount` within
/// 1..=MAX_NODE_COUNT; false when the node count is out of range.
fn validate_multinode(role: &Role, at: &str, findings: &mut Findings) -> bool {
    let Some(multinode) = &role.multinode else {
        return true;
    };
    if role.is_router() {
        findings.deny(
            format!("{at}.multinode"),
            "only allowed on serving roles, this role is a router",
        );
        return true;
    }
    let Some(n) = multinode.node_count else {
        return true;
    };
    if n < 1 {
        findings.deny(
            format!("{at}.multinode.nodeCount"),
            format!("must be >= 1, got {n}"),
        );
        false
    } else if n > MAX_NODE_COUNT {
        findings.deny(
            format!("{at}.multinode.nodeCount"),
            limits::over(MAX_NODE_COUNT, n),
        );
        false
    } else {
        true
    }
}

fn validate_drain_seconds(role: &Role, at: &str, findings: &mut Findings) {
    if let Some(seconds) = role.drain.as_ref().and_then(|d| d.seconds)
        && !(0..=Drain::MAX_SECONDS).contains(&seconds)
    {
        findings.deny(
            format!("{at}.drain.seconds"),
            format!(
                "must be between 0 (no drain) and {} (a day), got {seconds}",
                Drain::MAX_SECONDS
            ),
        );
    }
}

fn validate_disruption_budget(role: &Role, at: &str, findings: &mut Findings) {
    let Some(count) = role
        .disruption_budget
        .as_ref()
        .and_then(|d| d.max_unavailable_replicas)
    else {
        return;
    };
    if count < 0 {
        findings.deny(
            format!("{at}.disruptionBudget.maxUnavailableReplicas"),
            format!("must be >= 0, got {count}"),
        );
    } else if count > MAX_REPLICAS {
        findings.deny(
            format!("{at}.disruptionBudget.maxUnavailableReplicas"),
            limits::over(MAX_REPLICAS, count),
        );
    }
}

/// `recovery` only on serving roles, its seconds within 1..=a day with the
/// base no longer than the maximum, its limit within 0..=MAX_RESTARTS.
fn validate_recovery(role: &Role, at: &str, findings: &mut Findings) {
    let Some(recovery) = &role.recovery else {
        return;
    };
    let at = format!("{at}.recovery");
    if role.is_router() {
        findings.deny(
            at,
            "only allowed on serving roles, this role is a router (its endpoint picker is a Deployment the kubelet restarts)",
        );
        return;
    }
    let mut within = true;
    for (field, value) in [
        ("backoffSeconds", recovery.backoff_seconds),
        ("maxBackoffSeconds", recovery.max_backoff_seconds),
    ] {
        if let Some(seconds) = value
            && !(1..=Recovery::MAX_SECONDS).contains(&seconds)
        {
            within = false;
            findings.deny(
                format!("{at}.{field}"),
                format!(
                    "must be between 1 and {} (a day), got {seconds}",
                    Recovery::MAX_SECONDS
                ),
            );
        }
    }
    let base = recovery
        .backoff_seconds
        .unwrap_or(Recovery::DEFAULT_BACKOFF_SECONDS);
    let max = recovery
        .max_backoff_seconds
        .unwrap_or(Recovery::DEFAULT_MAX_BACKOFF_SECONDS);
    if within && base > max {
        findings.deny(
            format!("{at}.maxBackoffSeconds"),
            format!("must be at least backoffSeconds ({base}), got {max}"),
        );
    }
    if let Some(limit) = recovery.max_restarts
        && !(0..=Recovery::MAX_RESTARTS).contains(&limit)
    {
        findings.deny(
            format!("{at}.maxRestarts"),
            format!(
                "must be between 0 (failed at the first restart) and {}, got {limit}",
                Recovery::MAX_RESTARTS
            ),
        );
    }
}

/// The role's pods (replicas × nodeCount) within MAX_PODS_PER_ROLE; only
/// asked when both factors are within their own limits.
fn validate_role_pods(role: &Role, at: &str, findings: &mut Findings) {
    let pods = role_pods(role);
    if pods > MAX_PODS_PER_ROLE {
        findings.deny(
            format!("{at}.replicas"),
            format!(
                "the role's pods (replicas {} × nodeCount {}) {}",
                role.replicas(),
                role.node_count(),
                limits::over(MAX_PODS_PER_ROLE, pods)
            ),
        );
    }
}

/// A router: no serving-only fields; its HTTPRoute, endpoint picker config
/// and base template parse.
fn validate_router_role(role: &Role, at: &str, findings: &mut Findings) {
    for (field, set) in [
        ("scaleDown", role.scale_down.is_some()),
        ("drain", role.drain.is_some()),
        ("disruptionBudget", role.disruption_budget.is_some()),
    ] {
        if set {
            findings.deny(
                format!("{at}.{field}"),
                "only allowed on serving roles, this role is a router",
            );
        }
    }
    if let Some(httproute) = &role.httproute {
        let field = format!("{at}.httproute");
        if let Err(v) =
            parse_at::<gateway_api::apis::standard::httproutes::HttpRouteSpec>(httproute, &field)
        {
            findings.deny(
                v.field,
                format!("not a Gateway API HTTPRouteSpec: {}", v.reason),
            );
        }
    }
    if let Some(config) = &role.endpoint_picker_config {
        let field = format!("{at}.endpointPickerConfig");
        match serde_norway::from_str::<serde_json::Value>(config) {
            Ok(serde_json::Value::Object(_)) => {}
            Ok(_) => findings.deny(field, "must be a YAML mapping (an EndpointPickerConfig)"),
            Err(e) => findings.deny(field, format!("is not valid YAML: {e}")),
        }
    }
    if let Some(template) = &role.template {
        validate_template(template, at, TemplateOf::Router, findings);
    }
    if let Some(queue) = &role.queue {
        validate_queue(queue, role, &format!("{at}.queue"), findings);
    }
}

/// A router's queue: its bounds, and a picker that can hold it.
fn validate_queue(queue: &RequestQueue, role: &Role, at: &str, findings: &mut Findings) {
    if let Some(seconds) = queue.timeout_seconds
        && !(1..=RequestQueue::MAX_TIMEOUT_SECONDS).contains(&seconds)
    {
        findings.deny(
            format!("{at}.timeoutSeconds"),
            format!(
                "must be between 1 and {} (an hour), got {seconds}",
                RequestQueue::MAX_TIMEOUT_SECONDS
            ),
        );
    }
    if let Some(count) = queue.max_requests
        && !(1..=RequestQueue::MAX_REQUESTS).contains(&count)
    {
        findings.deny(
            format!("{at}.maxRequests"),
            format!(
                "must be between 1 and {}, got {count}",
                RequestQueue::MAX_REQUESTS
            ),
        );
    }
    if role.endpoint_picker_config.is_some() {
        findings.deny(
            at,
            "cannot be combined with endpointPickerConfig, which is used verbatim: set \
             featureGates: [flowControl] and a flowControl block in it instead",
        );
    } else if role.strategy == Some(RoutingStrategy::PdDisaggregation) {
        findings.deny(
            at,
            "pd-disaggregation runs llm-d v0.4.0's endpoint picker, built on GIE v1.2.0, which \
             answers 503 when the pool has no pods before any queue is consulted; queueing at \
             zero came with GIE v1.3.0: use another strategy, or an endpointPickerConfig for a \
             later llm-d release with flow control in it",
        );
    }
}

/// A serving role: no router-only fields, and a pod template.
fn validate_serving_role(role: &Role, at: &str, findings: &mut Findings) {
    for (field, set) in [
        ("strategy", role.strategy.is_some()),
        ("httproute", role.httproute.is_some()),
        (
            "endpointPickerConfig",
            role.endpoint_picker_config.is_some(),
        ),
        ("queue", role.queue.is_some()),
    ] {
        if set {
            findings.deny(
                format!("{at}.{field}"),
                format!(
                    "only allowed on a role with componentType router, this role is a {}",
                    role.component_type
                ),
            );
        }
    }
    match &role.template {
        Some(template) => {
            validate_template(template, at, TemplateOf::Server, findings);
            warn_without_readiness(role, template, at, findings);
        }
        None => findings.deny(
            format!("{at}.template"),
            format!(
                "required: a {} role needs a pod template with at least one container",
                role.component_type
            ),
        ),
    }
}

/// A warning when no container of a single-node serving role's pods has a
/// readiness probe: a pod is Ready when each of its containers is, and a
/// container without a probe is Ready as soon as it starts, minutes before
/// the model is loaded. Every guarantee counted in Ready replicas (the
/// rollout's floor and `maxUnavailable`, traffic moved only onto Ready
/// replicas, a ScaleView's `status.replicas`) would then count replicas that
/// cannot serve. The probe may sit on another container than the first (the
/// one whose port the pool targets), as when a routing sidecar fronts the
/// model server. A multi-node leader gets Tandem's own probe of `/health`
/// when it has none (`plan::inference_service::topology`), so only
/// single-node roles are warned about.
fn warn_without_readiness(
    role: &Role,
    template: &serde_json::Value,
    at: &str,
    findings: &mut Findings,
) {
    if role.node_count() != 1 {
        return;
    }
    let Some(containers) = template
        .pointer("/spec/containers")
        .and_then(serde_json::Value::as_array)
    else {
        return;
    };
    let probed = containers
        .iter()
        .any(|c| c.get("readinessProbe").is_some_and(|p| !p.is_null()));
    let Some(first) = containers.first() else {
        return;
    };
    if probed {
        return;
    }
    let name = first
        .get("name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("(unnamed)");
    findings.warn(format!(
        "{at}.template.spec.containers[0].readinessProbe: no container of role {:?} has a readiness probe \
         (its model server is {name:?}), so its pods are Ready when they start, before the model is \
         loaded, and the rollout floor, maxUnavailable, traffic shifting and ScaleView replicas count \
         them as serving; probe the server's health endpoint (vLLM and SGLang: httpGet /health on the \
         serving port), with a startupProbe long enough to load the model (docs/inferenceservice.md, \
         Readiness)",
        role.name
    ));
}

/// Whose pod template is validated: a serving role's is the whole pod; a
/// router's is a base that the router planner completes with the endpoint
/// picker container (`plan::inference_service::router`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum TemplateOf {
    Server,
    Router,
}

/// The container of a router template that becomes the endpoint picker: the
/// one with this name, else the first. The planner fills in its image when it
/// has none, so only this container may leave the image out.
pub const ROUTER_CONTAINER: &str = "epp";

/// The template must be a PodTemplateSpec that would deploy: at least one
/// container, each with a unique name and an image, ports in range. A router's
/// template may leave out the pod spec, the containers and the endpoint
/// picker's image: the planner supplies them.
fn validate_template(
    template: &serde_json::Value,
    at: &str,
    of: TemplateOf,
    findings: &mut Findings,
) {
    let field = format!("{at}.template");
    let template: PodTemplateSpec = match parse_at(template, &field) {
        Ok(t) => t,
        Err(v) => {
            findings.deny(v.field, format!("not a PodTemplateSpec: {}", v.reason));
            return;
        }
    };
    let Some(pod) = template.spec else {
        if of == TemplateOf::Server {
            findings.deny(
                format!("{field}.spec"),
                "required: the pod spec with its containers",
            );
        }
        return;
    };
    if pod.containers.is_empty() && of == TemplateOf::Server {
        findings.deny(
            format!("{field}.spec.containers"),
            "must list at least one container",
        );
    }
    let filled_by_planner = match of {
        TemplateOf::Server => None,
        TemplateOf::Router => Some(
            pod.containers
                .iter()
                .position(|c| c.name == ROUTER_CONTAINER)
                .unwrap_or(0),
        ),
    };
    super::pod_template::check(&pod, &format!("{field}.spec"), findings);
    for (c, container) in pod.containers.iter().enumerate() {
        let at = format!("{field}.spec.containers[{c}]");
        if filled_by_planner != Some(c)
            && container
                .image
                .as_deref()
                .is_none_or(|i| i.trim().is_empty())
        {
            findings.deny(format!("{at}.image"), "required: the container image");
        }
    }
}

fn validate_scheduling(scheduling: &SchedulingStrategy, findings: &mut Findings) {
    for (field, value) in [
        ("schedulerName", &scheduling.scheduler_name),
        ("queue", &scheduling.queue),
        ("priorityClassName", &scheduling.priority_class_name),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            findings.deny(
                format!("spec.schedulingStrategy.{field}"),
                "must not be empty when set (leave it out for the default)",
            );
        }
    }
    let scheduler = scheduling
        .scheduler_name
        .as_deref()
        .filter(|n| !n.trim().is_empty());
    let at = "spec.schedulingStrategy.gangScheduler";
    match (scheduling.gang_scheduler, scheduler) {
        (Some(GangScheduler::Volcano), Some(name)) if name != "volcano" => findings.deny(
            at,
            format!(
                "Volcano gang-schedules through the volcano scheduler, and schedulerName names \
                 {name:?}: leave schedulerName out, or set it to volcano"
            ),
        ),
        (Some(backend @ (GangScheduler::Kubernetes | GangScheduler::None)), Some("volcano")) => {
            findings.deny(
                at,
                format!(
                    "schedulerName volcano is Volcano's scheduler, which gang-schedules only \
                     through a Volcano PodGroup, and gangScheduler is {backend:?}: set \
                     gangScheduler to Volcano, or name another scheduler"
                ),
            )
        }
        _ => {}
    }
    if scheduling.gang_scheduler == Some(GangScheduler::Kubernetes) {
        if scheduling.queue.is_some() {
            findings.warn(format!(
                "spec.schedulingStrategy.queue is ignored: a queue is Volcano's, and {at} is \
                 Kubernetes"
            ));
        }
        if scheduling.gang_policy.is_some() {
            findings.warn(format!(
                "spec.schedulingStrategy.gangPolicy is ignored: it is the layout of Volcano's \
                 PodGroup, and {at} is Kubernetes (one PodGroup per replica and a core group)"
            ));
        }
    }
}

/// The rules of `spec.upgradeStrategy`; `plan::inference_service::upgrade` checks the options it
/// steps with through this same function.
///
/// IncrementalUpgrade needs `stepSizePercent`, `intervalSeconds` and
/// `gatewayClassName`, with 0 < step ≤ maxSurgePercent ≤ 100 and an interval
/// above 0. NewRevision moves traffic through a Gateway too, so it needs
/// `gatewayClassName` (from the same options; the others are ignored, with a
/// warning). RollingUpdate and None use no Gateway and ignore the options.
pub(crate) fn validate_upgrade(upgrade: &UpgradeStrategy, findings: &mut Findings) {
    let at = "spec.upgradeStrategy.incrementalUpgradeOptions";
    let strategy = upgrade.type_.unwrap_or_default();
    let options = upgrade.incremental_upgrade_options.as_ref();
    match (strategy, options) {
        (UpgradeType::IncrementalUpgrade | UpgradeType::NewRevision, None) => {
            let needed = if strategy == UpgradeType::NewRevision {
                "gatewayClassName"
            } else {
                "stepSizePercent, intervalSeconds and gatewayClassName"
            };
            findings.deny(
                at,
                format!("required when spec.upgradeStrategy.type is {strategy:?}: set {needed}"),
            );
            return;
        }
        (UpgradeType::RollingUpdate | UpgradeType::None, Some(_)) => {
            findings.warn(format!(
                "{at} is ignored: spec.upgradeStrategy.type is {strategy:?}, which uses no Gateway"
            ));
            return;
        }
        (UpgradeType::RollingUpdate | UpgradeType::None, None) => return,
        _ => {}
    }
    let Some(options) = options else {
        return;
    };
    if options
        .gateway_class_name
        .as_deref()
        .is_none_or(|c| c.trim().is_empty())
    {
        findings.deny(
            format!("{at}.gatewayClassName"),
            format!("required for {strategy:?}: the GatewayClass of the Gateway Tandem creates"),
        );
    }
    if strategy == UpgradeType::NewRevision {
        for (field, set) in [
            ("maxSurgePercent", options.max_surge_percent.is_some()),
            ("stepSizePercent", options.step_size_percent.is_some()),
            ("intervalSeconds", options.interval_seconds.is_some()),
        ] {
            if set {
                findings.warn(format!(
                    "{at}.{field} is ignored: NewRevision brings the new revision to full size and moves all traffic at once"
                ));
            }
        }
        return;
    }
    let surge = options
        .max_surge_percent
        .unwrap_or(IncrementalUpgradeOptions::DEFAULT_MAX_SURGE_PERCENT);
    if !(1..=100).contains(&surge) {
        findings.deny(
            format!("{at}.maxSurgePercent"),
            format!("must be between 1 and 100, got {surge}"),
        );
    }
    match options.step_size_percent {
        None => findings.deny(
            format!("{at}.stepSizePercent"),
            "required for IncrementalUpgrade: the traffic percent moved per interval",
        ),
        Some(step) if step <= 0 => findings.deny(
            format!("{at}.stepSizePercent"),
            format!("must be > 0, got {step}"),
        ),
        Some(step) if step > surge => findings.deny(
            format!("{at}.stepSizePercent"),
            format!("must be <= maxSurgePercent ({surge}), got {step}"),
        ),
        Some(_) => {}
    }
    match options.interval_seconds {
        None => findings.deny(
            format!("{at}.intervalSeconds"),
            "required for IncrementalUpgrade: seconds between traffic steps",
        ),
        Some(interval) if interval <= 0 => findings.deny(
            format!("{at}.intervalSeconds"),
            format!("must be > 0, got {interval}"),
        ),
        Some(interval) if interval > limits::MAX_INTERVAL_SECONDS => findings.deny(
            format!("{at}.intervalSeconds"),
            limits::over(limits::MAX_INTERVAL_SECONDS, interval),
        ),
        Some(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container() -> serde_json::Value {
        json!({"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
            "ports": [{"containerPort": 8000, "name": "http"}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}}}]}})
    }

    fn spec(value: serde_json::Value) -> InferenceServiceSpec {
        serde_json::from_value(value).expect("test spec parses")
    }

    fn pd() -> serde_json::Value {
        json!({"roles": [
            {"name": "prefill", "componentType": "prefiller", "template": container()},
            {"name": "decode", "componentType": "decoder", "replicas": 2, "template": container()},
        ]})
    }

    fn denial(value: serde_json::Value) -> String {
        let findings = validate(&spec(value));
        assert!(!findings.is_allowed(), "expected a denial");
        findings.denial_message()
    }

    #[test]
    fn a_routers_queue_is_bounded_and_needs_a_picker_that_can_hold_it() {
        let with = |queue: serde_json::Value, extra: serde_json::Value| {
            let mut value = pd();
            let mut router = json!({"name": "router", "componentType": "router", "queue": queue});
            for (k, v) in extra.as_object().unwrap() {
                router[k] = v.clone();
            }
            value["roles"].as_array_mut().unwrap().push(router);
            value
        };
        assert!(validate(&spec(with(json!({}), json!({})))).is_allowed());
        assert!(
            validate(&spec(with(
                json!({"timeoutSeconds": 3600, "maxRequests": 1}),
                json!({})
            )))
            .is_allowed()
        );
        assert_eq!(
            denial(with(json!({"timeoutSeconds": 0}), json!({}))),
            "spec.roles[2].queue.timeoutSeconds: must be between 1 and 3600 (an hour), got 0"
        );
        assert_eq!(
            denial(with(json!({"maxRequests": -1}), json!({}))),
            "spec.roles[2].queue.maxRequests: must be between 1 and 1000000, got -1"
        );
        assert!(
            denial(with(json!({}), json!({"strategy": "pd-disaggregation"})))
                .starts_with("spec.roles[2].queue: pd-disaggregation runs llm-d v0.4.0's endpoint picker, built on GIE v1.2.0, which answers 503")
        );
        assert!(
            denial(with(
                json!({}),
                json!({"endpointPickerConfig": "plugins: []"})
            ))
            .starts_with("spec.roles[2].queue: cannot be combined with endpointPickerConfig")
        );
    }

    #[test]
    fn a_prefill_decode_service_is_valid() {
        let findings = validate(&spec(pd()));
        assert!(findings.is_allowed(), "{}", findings.denial_message());
        assert!(findings.warnings.is_empty());
    }

    /// A single-node serving role without a readiness probe is warned
    /// about, naming the role, its container and the field; a multi-node
    /// role is not (its leader gets Tandem's probe), nor is a router.
    #[test]
    fn a_model_server_without_a_readiness_probe_is_warned_about() {
        let mut value = pd();
        value["roles"][1]["template"]["spec"]["containers"][0]
            .as_object_mut()
            .expect("a container")
            .remove("readinessProbe");
        let findings = validate(&spec(value.clone()));
        assert!(findings.is_allowed(), "{}", findings.denial_message());
        assert_eq!(findings.warnings.len(), 1, "{:?}", findings.warnings);
        assert!(
            findings.warnings[0].starts_with(
                "spec.roles[1].template.spec.containers[0].readinessProbe: no container of role \"decode\" has a readiness probe (its model server is \"vllm\")"
            ),
            "{}",
            findings.warnings[0]
        );
        // A probe on another container (a routing sidecar first) counts:
        // the pod is Ready only when that container is.
        let mut fronted = value.clone();
        let server = fronted["roles"][1]["template"]["spec"]["containers"][0].clone();
        let mut probed = server.clone();
        probed["name"] = json!("sglang");
        probed["readinessProbe"] = json!({"httpGet": {"path": "/health", "port": 8200}});
        fronted["roles"][1]["template"]["spec"]["containers"] = json!([
            {"name": "sidecar", "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.4.0",
             "ports": [{"containerPort": 8000}]},
            probed,
        ]);
        assert!(validate(&spec(fronted)).warnings.is_empty());
        value["roles"][1]["template"]["spec"]["containers"][0]["readinessProbe"] = json!(null);
        assert_eq!(
            validate(&spec(value.clone())).warnings.len(),
            1,
            "a null probe is none"
        );
        value["roles"][1]["multinode"] = json!({"nodeCount": 2});
        assert!(validate(&spec(value)).warnings.is_empty());
    }

    #[test]
    fn role_names_must_be_unique() {
        let mut value = pd();
        value["roles"][1]["name"] = json!("prefill");
        let message = denial(value);
        assert!(
            message.contains(
                "spec.roles[1].name: duplicate role name \"prefill\" (also spec.roles[0].name)"
            ),
            "{message}"
        );
    }

    #[test]
    fn role_names_must_be_dns_labels() {
        let mut value = pd();
        value["roles"][0]["name"] = json!("Prefill");
        assert!(denial(value).starts_with("spec.roles[0].name: must be a DNS-1123 label"));
    }

    #[test]
    fn unknown_component_type_is_a_parse_error_naming_the_field() {
        let mut value = json!({"spec": pd()});
        value["spec"]["roles"][0]["componentType"] = json!("encoder");
        let err = crate::api::parse_at::<InferenceServiceSpec>(&value["spec"], "spec").unwrap_err();
        assert_eq!(err.field, "spec.roles[0].componentType");
        assert!(
            err.reason.contains("unknown variant `encoder`"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn replicas_must_not_be_negative() {
        let mut value = pd();
        value["roles"][1]["replicas"] = json!(-1);
        assert_eq!(
            denial(value),
            "spec.roles[1].replicas: must be >= 0, got -1"
        );
        let mut zero = pd();
        zero["roles"][1]["replicas"] = json!(0);
        assert!(validate(&spec(zero)).is_allowed());
    }

    #[test]
    fn node_count_must_be_at_least_one() {
        let mut value = pd();
        value["roles"][1]["multinode"] = json!({"nodeCount": 0});
        assert_eq!(
            denial(value),
            "spec.roles[1].multinode.nodeCount: must be >= 1, got 0"
        );
        let mut four = pd();
        four["roles"][1]["multinode"] = json!({"nodeCount": 4});
        assert!(validate(&spec(four)).is_allowed());
    }

    #[test]
    fn router_fields_only_on_routers() {
        for (field, value) in [
            ("strategy", json!("prefix-cache")),
            ("httproute", json!({"parentRefs": [{"name": "gw"}]})),
            ("endpointPickerConfig", json!("plugins: []")),
            ("queue", json!({})),
        ] {
            let mut bad = pd();
            bad["roles"][1][field] = value.clone();
            assert_eq!(
                denial(bad),
                format!(
                    "spec.roles[1].{field}: only allowed on a role with componentType router, this role is a decoder"
                )
            );
            let mut good = pd();
            good["roles"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "router", "componentType": "router", field: value}));
            let findings = validate(&spec(good));
            assert!(
                findings.is_allowed(),
                "{field}: {}",
                findings.denial_message()
            );
        }
    }

    #[test]
    fn router_httproute_must_be_an_httproute_spec() {
        let mut value = pd();
        value["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router",
            "httproute": {"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": 7}}]}]}
        }));
        let message = denial(value);
        assert!(
            message.starts_with("spec.roles[2].httproute.rules[0].matches[0].path.value: not a Gateway API HTTPRouteSpec"),
            "{message}"
        );
    }

    #[test]
    fn a_router_template_is_a_base_the_planner_completes() {
        let with_router = |template: serde_json::Value| {
            let mut value = pd();
            value["roles"].as_array_mut().unwrap().push(json!({
                "name": "router", "componentType": "router", "template": template
            }));
            value
        };
        for allowed in [
            json!({"metadata": {"labels": {"team": "a"}}}),
            json!({"spec": {"nodeSelector": {"pool": "cpu"}}}),
            json!({"spec": {"containers": [{"name": "epp", "args": ["--v", "4"]}]}}),
            json!({"spec": {"containers": [
                {"name": "proxy", "image": "envoy:1"},
                {"name": "epp"},
            ]}}),
            json!({"spec": {"containers": [{"name": "scheduler"}]}}),
        ] {
            let findings = validate(&spec(with_router(allowed.clone())));
            assert!(
                findings.is_allowed(),
                "{allowed}: {}",
                findings.denial_message()
            );
        }
        // Only the endpoint picker's container gets its image from Tandem.
        assert_eq!(
            denial(with_router(json!({"spec": {"containers": [
                {"name": "epp"},
                {"name": "proxy"},
            ]}}))),
            "spec.roles[2].template.spec.containers[1].image: required: the container image"
        );
        assert_eq!(
            denial(with_router(json!({"spec": {"containers": [
                {"name": "proxy"},
                {"name": "epp", "image": "epp:1"},
            ]}}))),
            "spec.roles[2].template.spec.containers[0].image: required: the container image"
        );
    }

    #[test]
    fn router_endpoint_picker_config_must_be_yaml_mapping() {
        let mut value = pd();
        value["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router", "endpointPickerConfig": "plugins: [unclosed"
        }));
        assert!(denial(value).starts_with("spec.roles[2].endpointPickerConfig: is not valid YAML"));
    }

    #[test]
    fn at_most_one_router_and_at_least_one_server() {
        let routers = json!({"roles": [
            {"name": "r1", "componentType": "router"},
            {"name": "r2", "componentType": "router"},
        ]});
        let message = denial(routers);
        assert!(
            message.contains("spec.roles[1].componentType: a service has at most one router role"),
            "{message}"
        );
        assert!(
            message.contains("spec.roles: needs at least one role that serves"),
            "{message}"
        );
        assert_eq!(
            denial(json!({"roles": []})),
            "spec.roles: must list at least one role"
        );
    }

    #[test]
    fn prefill_needs_decode() {
        let value = json!({"roles": [
            {"name": "prefill", "componentType": "prefiller", "template": container()},
        ]});
        assert_eq!(
            denial(value),
            "spec.roles: a disaggregated service needs both a prefiller and a decoder role: has a prefiller but no decoder"
        );
    }

    #[test]
    fn multinode_and_scale_down_not_on_routers() {
        let mut value = pd();
        value["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router",
            "multinode": {"nodeCount": 2}, "scaleDown": {"policy": "Binpack"}
        }));
        let message = denial(value);
        assert!(
            message.contains("spec.roles[2].multinode: only allowed on serving roles"),
            "{message}"
        );
        assert!(
            message.contains("spec.roles[2].scaleDown: only allowed on serving roles"),
            "{message}"
        );
    }

    #[test]
    fn recovery_is_checked_with_its_paths() {
        let mut value = pd();
        value["roles"][0]["recovery"] = json!({"backoffSeconds": 0, "maxRestarts": -1});
        value["roles"][1]["recovery"] = json!({"backoffSeconds": 120, "maxBackoffSeconds": 60});
        value["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router", "recovery": {}
        }));
        let message = denial(value);
        for expected in [
            "spec.roles[0].recovery.backoffSeconds: must be between 1 and 86400 (a day), got 0",
            "spec.roles[0].recovery.maxRestarts: must be between 0 (failed at the first restart) and 1000, got -1",
            "spec.roles[1].recovery.maxBackoffSeconds: must be at least backoffSeconds (120), got 60",
            "spec.roles[2].recovery: only allowed on serving roles",
        ] {
            assert!(message.contains(expected), "{expected} in {message}");
        }
        let mut fine = pd();
        fine["roles"][0]["recovery"] = json!({"backoffSeconds": 600, "maxRestarts": 0});
        fine["roles"][1]["recovery"] = json!({});
        let spec: InferenceServiceSpec = serde_json::from_value(fine).unwrap();
        assert!(validate(&spec).is_allowed());
    }

    #[test]
    fn drain_and_disruption_budget_are_checked_with_their_paths() {
        let mut value = pd();
        value["roles"][0]["drain"] = json!({"seconds": -1});
        value["roles"][1]["drain"] = json!({"seconds": 86_401});
        value["roles"][1]["disruptionBudget"] = json!({"maxUnavailableReplicas": -2});
        value["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router",
            "drain": {"seconds": 5}, "disruptionBudget": {"maxUnavailableReplicas": 1}
        }));
        let message = denial(value);
        for expected in [
            "spec.roles[0].drain.seconds: must be between 0 (no drain) and 86400 (a day), got -1",
            "spec.roles[1].drain.seconds: must be between 0 (no drain) and 86400 (a day), got 86401",
            "spec.roles[1].disruptionBudget.maxUnavailableReplicas: must be >= 0, got -2",
            "spec.roles[2].drain: only allowed on serving roles",
            "spec.roles[2].disruptionBudget: only allowed on serving roles",
        ] {
            assert!(message.contains(expected), "{expected} in {message}");
        }
        let mut fine = pd();
        fine["roles"][0]["drain"] = json!({"seconds": 0});
        fine["roles"][0]["disruptionBudget"] = json!({"maxUnavailableReplicas": 0});
        let spec: InferenceServiceSpec = serde_json::from_value(fine).unwrap();
        assert!(validate(&spec).is_allowed());
    }

    #[test]
    fn drain_and_disruption_budget_default_on_serving_roles_only() {
        let mut value = pd();
        value["roles"].as_array_mut().unwrap().push(json!({
            "name": "router", "componentType": "router"
        }));
        let mut spec: InferenceServiceSpec = serde_json::from_value(value).unwrap();
        defaults(&mut spec);
        assert_eq!(spec.roles[0].drain, Some(Drain { seconds: Some(30) }));
        assert_eq!(
            spec.roles[1].disruption_budget,
            Some(DisruptionBudget {
                max_unavailable_replicas: Some(1)
            })
        );
        assert_eq!(spec.roles[2].drain, None);
        assert_eq!(spec.roles[2].disruption_budget, None);
    }

    #[test]
    fn templates_must_deploy() {
        let cases = [
            (
                json!(null),
                "spec.roles[1].template: required: a decoder role needs a pod template",
            ),
            (
                json!({"metadata": {}}),
                "spec.roles[1].template.spec: required: the pod spec",
            ),
            (
                json!({"spec": {"containers": []}}),
                "spec.roles[1].template.spec.containers: must list at least one container",
            ),
            (
                json!({"spec": {"containers": [{"name": "vllm"}]}}),
                "spec.roles[1].template.spec.containers[0].image: required: the container image",
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}}),
                "spec.roles[1].template.spec.containers[1].name: duplicate container name \"a\"",
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 70000}]}]}}),
                "spec.roles[1].template.spec.containers[0].ports[0].containerPort: must be between 1 and 65535, got 70000",
            ),
            (
                json!({"spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": "http"}]}]}}),
                "spec.roles[1].template.spec.containers[0].ports[0].containerPort: not a PodTemplateSpec: expected a whole number, got the string \"http\"",
            ),
            (
                json!({"spec": {"containers": "vllm"}}),
                "spec.roles[1].template.spec.containers: not a PodTemplateSpec",
            ),
        ];
        for (template, expected) in cases {
            let mut value = pd();
            if template.is_null() {
                value["roles"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("template");
            } else {
                value["roles"][1]["template"] = template;
            }
            let message = denial(value);
            assert!(
                message.starts_with(expected),
                "expected {expected:?}, got {message:?}"
            );
        }
    }

    fn incremental(options: serde_json::Value) -> serde_json::Value {
        let mut value = pd();
        value["upgradeStrategy"] =
            json!({"type": "IncrementalUpgrade", "incrementalUpgradeOptions": options});
        value
    }

    /// Issue 7's validation table: each case names the field it breaks.
    #[test]
    fn incremental_upgrade_options() {
        let valid = json!({"maxSurgePercent": 20, "stepSizePercent": 5, "intervalSeconds": 10, "gatewayClassName": "istio"});
        assert!(validate(&spec(incremental(valid.clone()))).is_allowed());
        let at = "spec.upgradeStrategy.incrementalUpgradeOptions";
        let cases = [
            (
                "surge 200",
                json!({"maxSurgePercent": 200}),
                format!("{at}.maxSurgePercent: must be between 1 and 100, got 200"),
            ),
            (
                "surge 0",
                json!({"maxSurgePercent": 0}),
                format!("{at}.maxSurgePercent: must be between 1 and 100, got 0"),
            ),
            (
                "step missing",
                json!({"stepSizePercent": null}),
                format!("{at}.stepSizePercent: required for IncrementalUpgrade"),
            ),
            (
                "step 0",
                json!({"stepSizePercent": 0}),
                format!("{at}.stepSizePercent: must be > 0, got 0"),
            ),
            (
                "step 75 with surge 50",
                json!({"maxSurgePercent": 50, "stepSizePercent": 75}),
                format!("{at}.stepSizePercent: must be <= maxSurgePercent (50), got 75"),
            ),
            (
                "interval 0",
                json!({"intervalSeconds": 0}),
                format!("{at}.intervalSeconds: must be > 0, got 0"),
            ),
            (
                "interval missing",
                json!({"intervalSeconds": null}),
                format!("{at}.intervalSeconds: required for IncrementalUpgrade"),
            ),
            (
                "empty class",
                json!({"gatewayClassName": ""}),
                format!("{at}.gatewayClassName: required for IncrementalUpgrade"),
            ),
            (
                "blank class",
                json!({"gatewayClassName": "  "}),
                format!("{at}.gatewayClassName: required for IncrementalUpgrade"),
            ),
        ];
        for (name, change, expected) in cases {
            let mut options = valid.clone();
            for (field, value) in change.as_object().unwrap() {
                if value.is_null() {
                    options.as_object_mut().unwrap().remove(field);
                } else {
                    options[field] = value.clone();
                }
            }
            let message = denial(incremental(options));
            assert!(
                message.starts_with(&expected),
                "{name}: expected {expected:?}, got {message:?}"
            );
        }
        // maxSurgePercent defaults to 100, so a step of 75 alone is fine.
        let mut no_surge = valid.clone();
        no_surge.as_object_mut().unwrap().remove("maxSurgePercent");
        no_surge["stepSizePercent"] = json!(75);
        assert!(validate(&spec(incremental(no_surge))).is_allowed());
        // Missing options altogether.
        let mut missing = pd();
        missing["upgradeStrategy"] = json!({"type": "IncrementalUpgrade"});
        assert!(denial(missing).starts_with(&format!("{at}: required when")));
    }

    fn rolling(options: serde_json::Value) -> serde_json::Value {
        let mut value = pd();
        value["upgradeStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": options});
        value
    }

    /// Issue 14's validation table: each case names the field it breaks.
    #[test]
    fn rolling_update_options() {
        for valid in [
            json!({}),
            json!({"maxUnavailable": 1, "maxSurge": 0}),
            json!({"maxUnavailable": 0, "maxSurge": 1}),
            json!({"maxUnavailable": "25%", "maxSurge": "25%", "partition": 1, "progressDeadlineSeconds": 60}),
            json!({"maxUnavailable": "100%", "partition": 1}),
        ] {
            let findings = validate(&spec(rolling(valid.clone())));
            assert!(
                findings.is_allowed(),
                "{valid}: {}",
                findings.denial_message()
            );
        }
        let at = "spec.upgradeStrategy.rollingUpdate";
        let cases = [
            (
                json!({"maxUnavailable": 0, "maxSurge": 0}),
                format!("{at}.maxUnavailable: maxUnavailable and maxSurge cannot both be 0"),
            ),
            (
                json!({"maxUnavailable": "0%", "maxSurge": "0%"}),
                format!("{at}.maxUnavailable: maxUnavailable and maxSurge cannot both be 0"),
            ),
            (
                json!({"maxUnavailable": 0}),
                format!("{at}.maxUnavailable: maxUnavailable and maxSurge cannot both be 0"),
            ),
            (
                json!({"maxUnavailable": -1}),
                format!("{at}.maxUnavailable: must be >= 0, got -1"),
            ),
            (
                json!({"maxSurge": -2}),
                format!("{at}.maxSurge: must be >= 0, got -2"),
            ),
            (
                json!({"maxSurge": "150%"}),
                format!("{at}.maxSurge: a percent must be between 0% and 100%, got 150%"),
            ),
            (
                json!({"maxUnavailable": "101%"}),
                format!("{at}.maxUnavailable: a percent must be between 0% and 100%, got 101%"),
            ),
            (
                json!({"maxUnavailable": "one"}),
                format!("{at}.maxUnavailable: must be a count (such as 1) or a percent"),
            ),
            (
                json!({"partition": 3}),
                format!(
                    "{at}.partition: must be at most the replicas of role prefill (spec.roles[0].replicas 1), got 3"
                ),
            ),
            (
                json!({"partition": -1}),
                format!("{at}.partition: must be >= 0, got -1"),
            ),
            (
                json!({"progressDeadlineSeconds": 0}),
                format!("{at}.progressDeadlineSeconds: must be > 0, got 0"),
            ),
        ];
        for (options, expected) in cases {
            let message = denial(rolling(options.clone()));
            assert!(
                message.starts_with(&expected),
                "{options}: expected {expected:?}, got {message:?}"
            );
        }
    }

    /// A role's own block overrides the service's field by field, and is
    /// denied at its own path.
    #[test]
    fn rolling_update_options_of_a_role() {
        let mut own = rolling(json!({"maxUnavailable": 0, "maxSurge": 1}));
        own["roles"][1]["rollingUpdate"] = json!({"maxSurge": 0});
        assert!(
            denial(own).starts_with(
                "spec.roles[1].rollingUpdate.maxUnavailable: maxUnavailable and maxSurge cannot both be 0"
            )
        );
        let mut own = rolling(json!({"maxUnavailable": 0, "maxSurge": 1}));
        own["roles"][1]["rollingUpdate"] = json!({"maxUnavailable": 1, "partition": 3});
        assert!(
            denial(own).starts_with(
                "spec.roles[1].rollingUpdate.partition: must be at most the replicas of role decode (spec.roles[1].replicas 2), got 3"
            )
        );
        let mut own = rolling(json!({}));
        own["roles"][0]["rollingUpdate"] = json!({"maxSurge": "-5%"});
        assert!(denial(own).starts_with(
            "spec.roles[0].rollingUpdate.maxSurge: a percent must be between 0% and 100%, got -5%"
        ));
        let mut fine = rolling(json!({"maxUnavailable": 0, "maxSurge": 1}));
        fine["roles"][1]["rollingUpdate"] =
            json!({"maxUnavailable": 1, "maxSurge": 0, "partition": 2});
        let fine = spec(fine);
        assert!(validate(&fine).is_allowed());
        let decode = fine.rolling_update_for(&fine.roles[1]);
        assert_eq!(
            (decode.max_unavailable, decode.max_surge, decode.partition),
            (
                Some(IntOrString::Int(1)),
                Some(IntOrString::Int(0)),
                Some(2)
            )
        );
        let prefill = fine.rolling_update_for(&fine.roles[0]);
        assert_eq!(
            (
                prefill.max_unavailable,
                prefill.max_surge,
                prefill.partition
            ),
            (Some(IntOrString::Int(0)), Some(IntOrString::Int(1)), None)
        );
        let mut router = rolling(json!({}));
        router["roles"].as_array_mut().unwrap().push(
            json!({"name": "router", "componentType": "router", "rollingUpdate": {"maxSurge": 1}}),
        );
        assert!(
            denial(router)
                .starts_with("spec.roles[2].rollingUpdate: a router role has no replicas to roll")
        );
    }

    /// Another strategy ignores them, with a warning.
    #[test]
    fn rolling_update_options_ignored_by_another_strategy() {
        let mut other = rolling(json!({"maxUnavailable": 0, "maxSurge": 0}));
        other["upgradeStrategy"]["type"] = json!("None");
        let findings = validate(&spec(other));
        assert!(findings.is_allowed());
        assert!(findings.warnings[0].starts_with("spec.upgradeStrategy.rollingUpdate is ignored"));
    }

    /// The webhook denies the same, naming the field.
    #[test]
    fn the_webhook_denies_a_rolling_update_that_cannot_move() {
        let object = json!({"apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "qwen"},
            "spec": rolling(json!({"maxUnavailable": "0%", "maxSurge": 0}))});
        let denied = crate::admission::admit(
            crate::admission::Kind::InferenceService,
            "default",
            &object,
            None,
            &crate::admission::lookup::Blind,
        )
        .expect_err("denied");
        assert_eq!(
            denied.violations[0].field,
            "spec.upgradeStrategy.rollingUpdate.maxUnavailable"
        );
    }

    #[test]
    fn new_revision_needs_a_gateway_class_and_ignores_the_steps() {
        let at = "spec.upgradeStrategy.incrementalUpgradeOptions";
        let mut value = pd();
        value["upgradeStrategy"] = json!({"type": "NewRevision"});
        assert_eq!(
            denial(value.clone()),
            format!(
                "{at}: required when spec.upgradeStrategy.type is NewRevision: set gatewayClassName"
            )
        );
        value["upgradeStrategy"]["incrementalUpgradeOptions"] = json!({"gatewayClassName": ""});
        assert!(
            denial(value.clone())
                .starts_with(&format!("{at}.gatewayClassName: required for NewRevision"))
        );
        value["upgradeStrategy"]["incrementalUpgradeOptions"] =
            json!({"gatewayClassName": "istio", "stepSizePercent": 5});
        let findings = validate(&spec(value));
        assert!(findings.is_allowed(), "{}", findings.denial_message());
        assert_eq!(
            findings.warnings,
            [format!(
                "{at}.stepSizePercent is ignored: NewRevision brings the new revision to full size and moves all traffic at once"
            )]
        );
    }

    #[test]
    fn incremental_options_with_another_strategy_warn() {
        for strategy in ["RollingUpdate", "None"] {
            let mut value = pd();
            value["upgradeStrategy"] =
                json!({"type": strategy, "incrementalUpgradeOptions": {"stepSizePercent": 5}});
            let findings = validate(&spec(value));
            assert!(findings.is_allowed());
            assert_eq!(findings.warnings.len(), 1);
            assert!(
                findings.warnings[0].contains("is ignored"),
                "{:?}",
                findings.warnings
            );
        }
    }

    #[test]
    fn empty_scheduling_fields_are_denied() {
        let mut value = pd();
        value["schedulingStrategy"] = json!({"schedulerName": "volcano", "queue": " "});
        assert_eq!(
            denial(value),
            "spec.schedulingStrategy.queue: must not be empty when set (leave it out for the default)"
        );
    }

    #[test]
    fn a_gang_scheduler_that_contradicts_the_scheduler_is_denied() {
        let with = |strategy: serde_json::Value| {
            let mut value = pd();
            value["schedulingStrategy"] = strategy;
            value
        };
        assert_eq!(
            denial(with(
                json!({"gangScheduler": "Volcano", "schedulerName": "kai"})
            )),
            "spec.schedulingStrategy.gangScheduler: Volcano gang-schedules through the volcano \
             scheduler, and schedulerName names \"kai\": leave schedulerName out, or set it to volcano"
        );
        assert!(
            denial(with(json!({"gangScheduler": "Kubernetes", "schedulerName": "volcano"})))
                .starts_with("spec.schedulingStrategy.gangScheduler: schedulerName volcano is Volcano's scheduler")
        );
        // A kube-scheduler profile of the user's own is fine with
        // Kubernetes' gang; Volcano's queue and layout are ignored, said.
        let findings = validate(&spec(with(json!({"gangScheduler": "Kubernetes",
            "schedulerName": "gpu-profile", "queue": "q", "gangPolicy": "TaskMember"}))));
        assert!(findings.is_allowed(), "{}", findings.denial_message());
        assert_eq!(findings.warnings.len(), 2, "{:?}", findings.warnings);
    }

    #[test]
    fn defaults_fill_every_default_and_are_idempotent() {
        let mut value = pd();
        value["roles"][1]["multinode"] = json!({});
        value["roles"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "router", "componentType": "router"}));
        value["schedulingStrategy"] = json!({"schedulerName": "volcano"});
        let mut s = spec(value);
        defaults(&mut s);
        assert_eq!(s.roles[0].replicas, Some(1));
        assert_eq!(s.roles[1].replicas, Some(2));
        assert_eq!(s.roles[1].multinode.as_ref().unwrap().node_count, Some(1));
        assert_eq!(
            s.roles[0].scale_down.as_ref().unwrap().policy,
            Some(RoleScaleDownPolicy::Ordered)
        );
        assert_eq!(
            s.roles[2].scale_down, None,
            "routers have no scale-down policy"
        );
        assert_eq!(
            s.scheduling_strategy.as_ref().unwrap().gang_policy,
            None,
            "unset, the layout follows the installed Volcano"
        );
        assert_eq!(
            s.upgrade_strategy.as_ref().unwrap().type_,
            Some(UpgradeType::RollingUpdate)
        );
        assert!(validate(&s).is_allowed());
        let once = s.clone();
        defaults(&mut s);
        assert_eq!(s, once);
    }

    #[test]
    fn defaults_set_max_surge_for_incremental() {
        let mut s = spec(incremental(
            json!({"stepSizePercent": 5, "intervalSeconds": 10, "gatewayClassName": "gw"}),
        ));
        defaults(&mut s);
        let options = s
            .upgrade_strategy
            .unwrap()
            .incremental_upgrade_options
            .unwrap();
        assert_eq!(options.max_surge_percent, Some(100));
    }
}
