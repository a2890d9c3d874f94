//! `tandem render` of InplaceScaling ResourceScalingGroups: the example world
//! (Deployments following a router, a StatefulSet chained behind decode), drift
//! set back, Retain for a group being deleted, and a custom kind whose CRD in
//! the world gives its scale subresource.

use harness::repo_path;
use serde_json::{Value, json};
use tandem::render::{Options, parse_world, render};

fn example() -> Vec<Value> {
    let text = std::fs::read_to_string(repo_path("examples/render/inplace-scaling.yaml")).unwrap();
    parse_world("inplace-scaling", &text, "default").unwrap()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn condition<'a>(object: &'a Value, type_: &str) -> &'a Value {
    object["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap()
}

#[test]
fn the_example_follows_the_router_through_a_chain() {
    let rendered = render(example(), &Options::default()).unwrap();
    assert!(rendered.warnings.is_empty(), "{:?}", rendered.warnings);
    let objects = &rendered.apply;
    let names: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{} {}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "Deployment decode",
            "Deployment prefill",
            "StatefulSet kv-cache",
            "ResourceScalingGroup kv-cache-ratio",
            "ResourceScalingGroup pd-ratio"
        ],
        "router is only read"
    );
    let prefill = find(objects, "Deployment", "prefill").unwrap();
    assert_eq!(prefill["spec"]["replicas"], 10);
    assert_eq!(
        prefill["spec"]["template"]["spec"]["containers"][0]["name"], "vllm",
        "the full object"
    );
    assert_eq!(
        find(objects, "Deployment", "decode").unwrap()["spec"]["replicas"],
        20
    );
    assert_eq!(
        find(objects, "StatefulSet", "kv-cache").unwrap()["spec"]["replicas"],
        5
    );
    let group = find(objects, "ResourceScalingGroup", "pd-ratio").unwrap();
    assert_eq!(group["status"]["currentReplicas"], 10);
    assert_eq!(
        condition(group, "Ready")["message"],
        "prefill=10, decode=20 follow router=10"
    );
    let chained = find(objects, "ResourceScalingGroup", "kv-cache-ratio").unwrap();
    assert_eq!(chained["status"]["currentReplicas"], 20);
    assert_eq!(condition(chained, "Stalled")["status"], "False");
    // The same input gives the same bytes.
    let again = render(example(), &Options::default()).unwrap();
    assert_eq!(
        rendered.write(tandem::render::Format::Yaml).unwrap(),
        again.write(tandem::render::Format::Yaml).unwrap()
    );
}

/// The example as it is after the first render, with decode then set to 7.
fn drifted() -> Vec<Value> {
    let settled = render(example(), &Options::default()).unwrap().apply;
    let mut world = example();
    for object in &mut world {
        if let Some(after) = find(
            &settled,
            object["kind"].as_str().unwrap(),
            object["metadata"]["name"].as_str().unwrap(),
        ) {
            *object = after.clone();
        }
        object["metadata"]["generation"] = json!(1);
        if object["metadata"]["name"] == "decode" {
            object["spec"]["replicas"] = json!(7);
        }
    }
    world
}

#[test]
fn a_target_set_by_hand_is_set_back() {
    let rendered = render(drifted(), &Options::default()).unwrap();
    let objects = &rendered.apply;
    assert_eq!(
        find(objects, "Deployment", "decode").unwrap()["spec"]["replicas"],
        20
    );
    assert!(
        find(objects, "Deployment", "prefill").is_none(),
        "prefill did not move"
    );
    assert!(
        find(objects, "StatefulSet", "kv-cache").is_none(),
        "kv-cache follows decode's 20 throughout"
    );
}

#[test]
fn a_group_being_deleted_scales_nothing() {
    let mut world = drifted();
    for object in &mut world {
        if object["metadata"]["name"] == "pd-ratio" {
            object["metadata"]["deletionTimestamp"] = json!("2026-11-21T10:00:00Z");
        }
    }
    let rendered = render(world, &Options::default()).unwrap();
    assert!(
        find(&rendered.apply, "Deployment", "decode").is_none(),
        "Retain: decode stays at 7"
    );
    // kv-cache still follows decode, now at 7: ceil(7 x 0.25) = 2.
    assert_eq!(
        find(&rendered.apply, "StatefulSet", "kv-cache").unwrap()["spec"]["replicas"],
        2
    );
}

#[test]
fn a_custom_kind_scales_through_its_crd_scale_path() {
    let text = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: agents.example.com}
spec:
  group: example.com
  names: {kind: Agent, plural: agents}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.size}}
---
apiVersion: example.com/v1
kind: Agent
metadata: {name: tools}
spec: {size: 1}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: router}
spec: {replicas: 3}
---
apiVersion: resourcescalinggroup.com/v1
kind: ResourceScalingGroup
metadata: {name: tools-follow-router}
spec:
  targetResources:
  - {name: router, apiVersion: apps/v1, kind: Deployment}
  - {name: tools, apiVersion: example.com/v1, kind: Agent}
  scalingStrategy:
    type: InplaceScaling
    inplaceConfig:
      bindings:
      - {name: router, role: Source}
      - {name: tools, role: Target, ratio: 1.5}
"#;
    let world = parse_world("agents", text, "default").unwrap();
    let rendered = render(world.clone(), &Options::default()).unwrap();
    assert!(rendered.warnings.is_empty(), "{:?}", rendered.warnings);
    assert_eq!(
        find(&rendered.apply, "Agent", "tools").unwrap()["spec"]["size"],
        5
    );

    // Without its CRD nobody can tell: a warning at admission, a stall after.
    let without: Vec<Value> = world
        .into_iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
        .collect();
    let rendered = render(without, &Options::default()).unwrap();
    assert!(
        rendered.warnings[0]
            .contains("Agent (example.com/v1) was not checked for a scale subresource"),
        "{:?}",
        rendered.warnings
    );
    let group = find(
        &rendered.apply,
        "ResourceScalingGroup",
        "tools-follow-router",
    )
    .unwrap();
    assert_eq!(condition(group, "Stalled")["reason"], "UnsupportedKind");
    assert!(find(&rendered.apply, "Agent", "tools").is_none());
}

/// DESIGN.md §1.2 with §1.3: an HPA on the prefill view (it has set 3), the
/// group makes the decode view follow at 1:4, and that view fills on-demand
/// (at most 2) before spot.
#[test]
fn hpa_on_prefill_and_decode_following_at_one_to_four_over_on_demand_and_spot() {
    let text =
        std::fs::read_to_string(repo_path("examples/render/hpa-prefill-decode-follows.yaml"))
            .unwrap();
    let world = parse_world("hpa-prefill-decode-follows", &text, "default").unwrap();
    let rendered = render(world, &Options::default()).unwrap();
    assert!(rendered.warnings.is_empty(), "{:?}", rendered.warnings);
    let objects = &rendered.apply;
    let decode_view = find(objects, "ScaleView", "spot-decode-sv").unwrap();
    assert_eq!(decode_view["spec"]["replicas"], 12, "4 x prefill's 3");
    let service = find(objects, "InferenceService", "spot-decode").unwrap();
    let roles: Vec<(&str, i64)> = service["spec"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["replicas"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        roles,
        [("prefill", 3), ("decode-ondemand", 2), ("decode-spot", 10)]
    );
    let group = find(objects, "ResourceScalingGroup", "prefill-decode-ratio").unwrap();
    assert_eq!(group["status"]["currentReplicas"], 3);
    assert_eq!(condition(group, "Ready")["status"], "True");
    let spot = objects
        .iter()
        .filter(|o| {
            o["kind"] == "LeaderWorkerSet"
                && o["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("spot-decode-decode-spot-")
        })
        .count();
    assert_eq!(spot, 10);
    assert!(
        find(objects, "HorizontalPodAutoscaler", "spot-prefill-sv").is_none(),
        "the HPA is only read"
    );
}
