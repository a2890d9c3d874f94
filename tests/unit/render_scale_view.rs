//! `tandem render` of the spot example (seed 002, use case 2): the split, the
//! lock in the InferenceService status and the LeaderWorkerSets it leads to.

use harness::repo_path;
use serde_json::Value;
use tandem::render::{Options, parse_world, render};

fn rendered(replicas: i64) -> Vec<Value> {
    let text =
        std::fs::read_to_string(repo_path("examples/scaleview/decode-ondemand-spot.yaml")).unwrap();
    let mut world = parse_world("spot", &text, "default").unwrap();
    world[1]["spec"]["replicas"] = replicas.into();
    render(world, &Options::default()).unwrap().apply
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name} rendered"))
}

#[test]
fn the_spot_example_at_one_two_and_four() {
    for (replicas, ondemand, spot) in [(1, 1, 0), (2, 2, 0), (4, 2, 2)] {
        let objects = rendered(replicas);
        let service = find(&objects, "InferenceService", "spot-decode");
        let roles: Vec<(String, i64)> = service["spec"]["roles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["replicas"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            roles,
            [
                ("prefill".to_owned(), 1),
                ("decode-ondemand".to_owned(), ondemand),
                ("decode-spot".to_owned(), spot)
            ],
            "replicas {replicas}"
        );
        let lock = &service["status"]["scaleViews"][0];
        assert_eq!(lock["name"], "spot-decode-sv");
        assert_eq!(lock["roleReplicas"][0]["replicas"], ondemand);
        assert_eq!(lock["roleReplicas"][1]["replicas"], spot);
        let view = find(&objects, "ScaleView", "spot-decode-sv");
        assert_eq!(view["status"]["locked"], true);
        assert_eq!(
            view["metadata"]["finalizers"][0],
            "fusioninfer.io/scale-view-lock"
        );
        assert_eq!(view["status"]["groups"][0]["replicas"], ondemand);
        assert_eq!(view["status"]["groups"][1]["replicas"], spot);
        let replicas_of = |role: &str| {
            objects
                .iter()
                .filter(|o| {
                    o["kind"] == "LeaderWorkerSet"
                        && o["metadata"]["labels"]["fusioninfer.io/role-name"] == role
                })
                .count()
        };
        assert_eq!(
            (replicas_of("decode-ondemand"), replicas_of("decode-spot")),
            (ondemand as usize, spot as usize),
            "replicas {replicas}"
        );
    }
}

#[test]
fn unset_replicas_keep_the_service_as_it_is() {
    let text =
        std::fs::read_to_string(repo_path("examples/scaleview/decode-ondemand-spot.yaml")).unwrap();
    let world = parse_world("spot", &text, "default").unwrap();
    let objects = render(world, &Options::default()).unwrap().apply;
    let view = find(&objects, "ScaleView", "spot-decode-sv");
    assert_eq!(
        view["spec"]["replicas"], 1,
        "the mutating webhook set it from the target"
    );
    let service = find(&objects, "InferenceService", "spot-decode");
    assert_eq!(service["spec"]["roles"][1]["replicas"], 1);
    assert_eq!(service["spec"]["roles"][2]["replicas"], 0);
}
