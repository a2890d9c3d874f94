//! Issue 34, "gates off": a cluster that serves Kubernetes' PodGroups with
//! the gang gates on and `TopologyAwareWorkloadScheduling` off, the way a
//! cluster may well run an alpha API. Its kube-apiserver drops a PodGroup's
//! `schedulingConstraints` silently, and discovery cannot tell. A control
//! plane of its own (the gates are its processes'),
//! with kube-scheduler and kube-controller-manager under the same gates.
//!
//! Tandem's decision is to refuse, not to fall back: a Required placement
//! is a promise that every pod of a replica lands in one domain, and pod
//! affinity cannot keep it inside a gang (`placement::replica_affinity`).
//! So:
//!
//! - `tandem check` says the field is dropped and why (the dry run);
//! - a Required replica placement on the native backend is refused at
//!   admission, naming `spec.placement.replica.mode` and the gate;
//! - Preferred is admitted: the gang's PodGroup carries no topology, its pods
//!   prefer one rack by pod affinity, the replica runs, and the PodGroup the
//!   API server stored is what Tandem wrote, so nothing is written again.

use harness::control_plane::{self, ControlPlane};
use harness::scenario::{
    IS, Quiet, RACK_LABEL, Scenario, racked, replica_racks, wait_service_ready,
};
use harness::serve::Tandem;
use serde_json::json;

/// The control plane of its own, with other gates, this scenario runs on.
pub(crate) const PLANE: &str = "gates-off";

/// The gang gates without `TopologyAwareWorkloadScheduling` (alpha in
/// v1.36, off by default).
const GANG_WITHOUT_TOPOLOGY: &str = "GenericWorkload=true,GangScheduling=true";

pub(crate) async fn without_the_topology_gate_a_required_placement_is_refused_and_nothing_dropped_is_written()
 {
    if let Some(reason) = control_plane::unavailable() {
        eprintln!("SKIPPED without_the_topology_gate: {reason}");
        return;
    }
    let plane = ControlPlane::own_with_gates(PLANE, GANG_WITHOUT_TOPOLOGY);

    // What the cluster keeps, from the dry run: not the topology.
    let native = plane.tandem_check_line("Kubernetes PodGroup");
    assert_eq!(
        native["fields"]["schedulingConstraints"], false,
        "{native:#}"
    );
    let effect = native["effect"].as_str().unwrap_or_default();
    assert!(
        effect.contains("schedulingConstraints dropped (TopologyAwareWorkloadScheduling off)"),
        "{effect}"
    );

    let scenario = Scenario::with_tandem("gates-off", plane, Tandem::shared(plane)).await;
    scenario.labelled_nodes(4, &[(RACK_LABEL, "a")]).await;
    scenario.labelled_nodes(4, &[(RACK_LABEL, "b")]).await;

    // Required: refused, with the field, the gate and the way out.
    let refused = scenario
        .create(&racked("rack-required", "Kubernetes", 1, 2))
        .await
        .expect_err("a Required rack the API server would drop is refused");
    let said = refused.to_string();
    assert!(
        said.contains("spec.placement.replica.mode")
            && said.contains("TopologyAwareWorkloadScheduling")
            && said.contains("Preferred"),
        "{said}"
    );
    assert!(
        scenario
            .get(IS, "InferenceService", "rack-required")
            .await
            .is_none(),
        "nothing stored"
    );

    // Preferred: the gang without a topology, a rack by pod affinity.
    let name = "rack-preferred";
    let mut service = racked(name, "Kubernetes", 1, 2);
    service["spec"]["placement"]["replica"]["mode"] = json!("Preferred");
    scenario.create_or_fail(&service).await;
    wait_service_ready(&scenario, name).await;
    let racks = &replica_racks(&scenario, name).await["worker-0"];
    assert!(
        racks.len() == 2 && racks[0] == racks[1],
        "with both racks free, the replica's pods share one: {racks:?}"
    );
    let groups = scenario
        .list("scheduling.k8s.io/v1alpha2", "PodGroup")
        .await;
    assert_eq!(groups.len(), 1, "{groups:#?}");
    // The group as Tandem wrote it (the API server adds its defaults, such
    // as `disruptionMode`): a gang, no topology for the server to drop.
    let spec = &groups[0]["spec"];
    assert_eq!(
        spec["schedulingPolicy"],
        json!({"gang": {"minCount": 2}}),
        "{spec:#}"
    );
    assert!(spec.get("schedulingConstraints").is_none(), "{spec:#}");
    let pods = scenario.list("v1", "Pod").await;
    assert_eq!(pods.len(), 2, "the replica's two pods");
    for pod in pods {
        let terms = &pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(
            terms[0]["podAffinityTerm"]["topologyKey"], RACK_LABEL,
            "{pod}"
        );
    }
    scenario.assert_writes_sound();
    scenario
        .finish(Quiet::Touching(IS, "InferenceService", name))
        .await;
}
