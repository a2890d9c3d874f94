//! Kubernetes' own gang scheduling (`scheduling.k8s.io/v1alpha2`, alpha in
//! 1.36): whether a cluster serves its PodGroups and Workloads, and which of
//! the PodGroup fields that hang on a feature gate its API server keeps.
//!
//! API discovery shows that the API is served, not which gates are on, and
//! kube-apiserver drops a gated field silently when its gate is off
//! (`pkg/registry/scheduling/podgroup/strategy.go`,
//! `dropDisabledPodGroupSpecFields`, v1.36.3). So what is kept is learnt by
//! asking: a PodGroup created with `dryRun=All` ([`probe`]), and the answer
//! read back ([`kept`]). A writer that sent a dropped field would find it
//! missing on every read, and write it again forever.
//!
//! `tandem check` reports it, serve follows it
//! (`watch::dependencies`), and it decides whether a service may ask
//! for `gangScheduler: Kubernetes` and which fields its PodGroups carry
//! (`plan::inference_service::pod_groups`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::installed::{Installed, Report};

pub const GROUP: &str = "scheduling.k8s.io";
pub const VERSION: &str = "v1alpha2";
pub const POD_GROUP_PLURAL: &str = "podgroups";
pub const WORKLOAD_PLURAL: &str = "workloads";

/// A PodGroup field that kube-apiserver keeps only under a feature gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatedField {
    /// The name `tandem check` gives it (a field of `spec`).
    pub field: &'static str,
    /// kube-apiserver's feature gate that keeps it.
    pub gate: &'static str,
    /// What Tandem writes it for, when it is kept.
    pub serves: &'static str,
    /// What follows when it is dropped.
    pub without: &'static str,
}

/// `spec.schedulingConstraints`: every pod of the group in one domain of a
/// node label.
pub const TOPOLOGY: GatedField = GatedField {
    field: "schedulingConstraints",
    gate: "TopologyAwareWorkloadScheduling",
    serves: "a Required spec.placement replica or pair domain is the topology of the gang's \
             group",
    without: "a Required spec.placement replica or pair domain on gangScheduler Kubernetes is \
              refused (Preferred, by pod affinity, is admitted)",
};

/// `spec.priority`: kube-apiserver's Priority admission plugin resolves a
/// PodGroup's priority (from its `priorityClassName`, else the default
/// class) only under this gate, and drops `priorityClassName` and
/// `priority` without it. The pods' own `priorityClassName` works either
/// way.
pub const PRIORITY: GatedField = GatedField {
    field: "priority",
    gate: "WorkloadAwarePreemption",
    serves: "not written by Tandem: the gang's pods carry the priorityClassName",
    without: "not needed: the gang's pods carry the priorityClassName",
};

/// The gated fields, in the order `tandem check` lists them.
pub const GATED: [GatedField; 2] = [TOPOLOGY, PRIORITY];

/// The node label the probe's placement names; any well-formed key would
/// do, since a dry run schedules nothing.
pub const PROBE_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";

/// The namespace the probe is created in (dry run: nothing is stored); one
/// every cluster has.
pub const PROBE_NAMESPACE: &str = "default";

/// What a cluster offers of Kubernetes' gang scheduling.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NativeGang {
    /// `scheduling.k8s.io/v1alpha2` PodGroups are served.
    pub pod_groups: bool,
    /// `scheduling.k8s.io/v1alpha2` Workloads are served.
    pub workloads: bool,
    /// Each gated field ([`GATED`]) and whether the API server kept it;
    /// empty when PodGroups are not served or the probe failed.
    pub kept: BTreeMap<&'static str, bool>,
    /// Why the probe could not say (forbidden, refused), as the API server
    /// answered.
    pub unknown: Option<String>,
}

impl NativeGang {
    /// The PodGroup `spec` fields the API server keeps: `schedulingPolicy`
    /// and each gated field kept ([`NativeGang::kept_fields`]); None when
    /// PodGroups are not served. What [`Installed::with_native_pod_groups`]
    /// takes.
    pub fn spec_fields(&self) -> Option<BTreeSet<String>> {
        self.pod_groups.then(|| {
            std::iter::once("schedulingPolicy")
                .chain(self.kept_fields())
                .map(str::to_owned)
                .collect()
        })
    }

    /// The PodGroup's `spec` fields, among the gated ones ([`GATED`]),
    /// that the API server keeps: `schedulingConstraints`, and
    /// `priorityClassName` when `priority` is resolved.
    pub fn kept_fields(&self) -> Vec<&'static str> {
        let mut fields = Vec::new();
        for gated in GATED {
            if self.kept.get(gated.field) == Some(&true) {
                fields.push(gated.field);
                if gated == PRIORITY {
                    fields.push("priorityClassName");
                }
            }
        }
        fields
    }
}

/// What a world of objects says is installed (render's, where there is
/// no API server to ask): its CustomResourceDefinitions, and Kubernetes'
/// PodGroups when `api_versions` (render's `--api-versions`, as Helm's)
/// names `scheduling.k8s.io/v1alpha2` or an object of the world is of
/// that API. Served there, every gated field is taken as kept (the gates
/// a cluster serving the API would turn on). Without CRDs nothing is
/// known ([`Installed::Assumed`]).
pub fn of_world<'a>(
    objects: impl IntoIterator<Item = &'a Value>,
    api_versions: &BTreeSet<String>,
) -> Installed {
    let native_version = format!("{GROUP}/{VERSION}");
    let mut crds = Vec::new();
    let mut native = api_versions
        .iter()
        .any(|v| v == &native_version || v.starts_with(&format!("{native_version}/")));
    for object in objects {
        if object["kind"] == "CustomResourceDefinition" {
            crds.push(object);
        }
        native |= object["apiVersion"] == native_version.as_str();
    }
    if crds.is_empty() {
        return Installed::Assumed;
    }
    let gang = NativeGang {
        pod_groups: native,
        workloads: native,
        kept: GATED.iter().map(|g| (g.field, true)).collect(),
        unknown: None,
    };
    Installed::from_crds(crds).with_native_pod_groups(gang.spec_fields())
}

/// The PodGroup a dry run creates: a gang of one pod, with every gated
/// field set (the priority is left to admission, which resolves it from the
/// default class when its gate is on: naming a class would need one that
/// exists).
pub fn probe() -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "PodGroup",
        "metadata": {"generateName": "tandem-check-", "namespace": PROBE_NAMESPACE},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 1}},
            "schedulingConstraints": {"topology": [{"key": PROBE_TOPOLOGY_KEY}]},
        },
    })
}

/// Which gated fields the API server kept, from its answer to [`probe`].
pub fn kept(answer: &Value) -> BTreeMap<&'static str, bool> {
    let spec = &answer["spec"];
    let topology = spec["schedulingConstraints"]["topology"]
        .as_array()
        .is_some_and(|t| t.iter().any(|c| c["key"] == PROBE_TOPOLOGY_KEY));
    let priority = spec["priority"].is_i64();
    BTreeMap::from([(TOPOLOGY.field, topology), (PRIORITY.field, priority)])
}

/// The line `tandem check` prints of it.
pub fn report(gang: &NativeGang) -> Report {
    let mut found = Vec::new();
    if gang.pod_groups {
        found.push(format!("{VERSION} PodGroup"));
    }
    if gang.workloads {
        found.push(format!("{VERSION} Workload"));
    }
    let effect = if !gang.pod_groups {
        "not served (alpha in Kubernetes 1.36: gates GenericWorkload and GangScheduling, and \
         --runtime-config=scheduling.k8s.io/v1alpha2=true): gangScheduler Kubernetes is \
         refused, and a service that needs a gang defaults to Volcano, else to none"
            .to_owned()
    } else {
        let gates: Vec<String> = GATED
            .iter()
            .map(|g| match (gang.kept.get(g.field), &gang.unknown) {
                (Some(true), _) => format!("{} kept ({} on): {}", g.field, g.gate, g.serves),
                (Some(false), _) => {
                    format!("{} dropped ({} off): {}", g.field, g.gate, g.without)
                }
                (None, Some(why)) => format!("{} unknown: {why}", g.field),
                (None, None) => format!("{} unknown", g.field),
            })
            .collect();
        format!(
            "served; {}; gangScheduler Kubernetes writes one per replica and a core group \
             (a service that needs a gang defaults to it when Volcano is not installed)",
            gates.join("; ")
        )
    };
    Report {
        dependency: "Kubernetes PodGroup",
        api: format!("{GROUP}/{VERSION} PodGroup"),
        found,
        fields: gang.kept.clone(),
        fields_probed: true,
        effect,
        install: None,
        required: false,
        rules_out: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-apiserver v1.36.3's answer to the probe with every gate on: the
    /// placement kept, the priority resolved from the (absent) default
    /// class.
    fn answer_gates_on() -> Value {
        let mut answer = probe();
        answer["metadata"]["name"] = json!("tandem-check-x7k2p");
        answer["metadata"]["finalizers"] = json!(["scheduling.k8s.io/podgroup-protection"]);
        answer["spec"]["priority"] = json!(0);
        answer
    }

    /// With TopologyAwareWorkloadScheduling and WorkloadAwarePreemption
    /// off: both dropped, as the registry strategy drops them.
    fn answer_gates_off() -> Value {
        let mut answer = probe();
        answer["spec"]
            .as_object_mut()
            .expect("the probe has a spec")
            .remove("schedulingConstraints");
        answer
    }

    #[test]
    fn the_probe_sets_every_gated_field_it_reads_back() {
        let sent = probe();
        assert_eq!(
            sent["spec"]["schedulingConstraints"]["topology"][0]["key"],
            PROBE_TOPOLOGY_KEY
        );
        // The priority is admission's to resolve: setting it would be refused
        // when it differs from the class's.
        assert!(sent["spec"].get("priority").is_none());
        assert_eq!(sent["spec"]["schedulingPolicy"]["gang"]["minCount"], 1);
    }

    #[test]
    fn what_the_api_server_kept_is_read_from_its_answer() {
        assert_eq!(
            kept(&answer_gates_on()),
            BTreeMap::from([("schedulingConstraints", true), ("priority", true)])
        );
        assert_eq!(
            kept(&answer_gates_off()),
            BTreeMap::from([("schedulingConstraints", false), ("priority", false)])
        );
        let mut other_key = answer_gates_on();
        other_key["spec"]["schedulingConstraints"]["topology"][0]["key"] = json!("rack");
        assert!(!kept(&other_key)["schedulingConstraints"]);
    }

    #[test]
    fn the_report_names_each_gate_and_what_its_absence_costs() {
        let gang = NativeGang {
            pod_groups: true,
            workloads: true,
            kept: kept(&answer_gates_off()),
            unknown: None,
        };
        let report = report(&gang);
        assert_eq!(report.found, ["v1alpha2 PodGroup", "v1alpha2 Workload"]);
        assert!(
            report
                .effect
                .contains("schedulingConstraints dropped (TopologyAwareWorkloadScheduling off)"),
            "{}",
            report.effect
        );
        assert!(
            report
                .effect
                .contains("priority dropped (WorkloadAwarePreemption off)")
        );
        assert!(!report.required && report.install.is_none() && report.rules_out.is_none());

        let unserved = report_of(NativeGang::default());
        assert!(unserved.found.is_empty() && unserved.fields.is_empty());
        assert!(unserved.effect.starts_with("not served"));

        let forbidden = report_of(NativeGang {
            pod_groups: true,
            unknown: Some("podgroups is forbidden".into()),
            ..NativeGang::default()
        });
        assert!(
            forbidden
                .effect
                .contains("schedulingConstraints unknown: podgroups is forbidden"),
            "{}",
            forbidden.effect
        );
    }

    fn report_of(gang: NativeGang) -> Report {
        report(&gang)
    }
}
