//! The fuzz targets' inputs, without libFuzzer: the seed corpora are made
//! here from the examples and the tests' AdmissionReview shapes (and must
//! match what is committed under `fuzz/seeds/`), and every committed input
//! (`fuzz/seeds`, the minimised `fuzz/corpus` of the last fuzzing run, and
//! `fuzz/regressions`, inputs that once crashed) runs through the same
//! function its fuzz target calls (`tandem::fuzzing::TARGETS`).
//!
//! `TANDEM_WRITE_FUZZ_SEEDS=1 cargo test --test unit fuzz_corpus::` rewrites
//! `fuzz/seeds/` after the examples or the review shapes change.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use harness::{repo_path, review, scale_review, yaml_documents};
use serde_json::{Value, json};
use tandem::admission::http::{self, Webhook};
use tandem::admission::{DEFAULT_SERVICE_ACCOUNT, Kind};
use tandem::fuzzing::{TARGETS, example_lookup};

const WRITE_SEEDS_ENV: &str = "TANDEM_WRITE_FUZZ_SEEDS";

/// Seeds of one target: file name -> bytes.
type Seeds = BTreeMap<String, Vec<u8>>;

fn document(file: &str, kind: &str, name: &str) -> Value {
    yaml_documents(&repo_path(file))
        .into_iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{file} has {kind} {name}"))
}

fn in_namespace(mut object: Value, namespace: &str) -> Value {
    object["metadata"]["namespace"] = json!(namespace);
    object
}

fn compact(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

fn example_files(dir: &str) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(repo_path(dir))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    files
}

fn stem(file: &str) -> &str {
    file.trim_end_matches(".yaml")
}

/// A review of `object` whose operation no API server sends: the handler
/// cannot read it (HTTP 400).
fn malformed(object: &Value) -> Vec<u8> {
    let mut body = review("CREATE", object, None);
    body["request"]["operation"] = json!("REPLACE");
    compact(&body)
}

/// `object` with the value at each JSON pointer replaced (created, with its
/// parents, where missing).
fn with(object: &Value, changes: &[(&str, Value)]) -> Value {
    let mut changed = object.clone();
    for (pointer, value) in changes {
        let mut at = &mut changed;
        for key in pointer.trim_start_matches('/').split('/') {
            let key = key.replace("~1", "/");
            at = match key.parse::<usize>() {
                Ok(index) if at.is_array() => {
                    let items = at.as_array_mut().unwrap();
                    if index >= items.len() {
                        items.resize(index + 1, Value::Null);
                    }
                    &mut items[index]
                }
                _ => &mut at[key.as_str()],
            };
        }
        *at = value.clone();
    }
    changed
}

/// Values at a limit (`at`) and one past it (`past`, and the extremes),
/// each as a create and as an update of `base` (old and new object): the
/// paths of issue 16's bounds.
fn limit_seeds(seeds: &mut Seeds, base: &Value, cases: &[(&str, &str, Vec<Value>)]) {
    for (name, pointer, values) in cases {
        for (i, value) in values.iter().enumerate() {
            let label = match i {
                0 => "at".to_owned(),
                1 => "past".to_owned(),
                _ => format!("extreme-{}", i - 1),
            };
            let object = with(base, &[(pointer, value.clone())]);
            seeds.insert(
                format!("create-limit-{name}-{label}.json"),
                compact(&review("CREATE", &object, None)),
            );
            seeds.insert(
                format!("update-limit-{name}-{label}.json"),
                compact(&review("UPDATE", &object, Some(base))),
            );
        }
    }
}

/// `object` being deleted: a deletionTimestamp, and the finalizers an
/// update takes off (the old object still has them).
fn being_deleted(seeds: &mut Seeds, name: &str, object: &Value, finalizer: &str) {
    let old = with(
        object,
        &[
            ("/metadata/deletionTimestamp", json!("2026-11-21T10:00:00Z")),
            ("/metadata/finalizers", json!([finalizer])),
        ],
    );
    let new = with(&old, &[("/metadata/finalizers", json!([]))]);
    seeds.insert(
        format!("update-being-deleted-{name}.json"),
        compact(&review("UPDATE", &new, Some(&old))),
    );
    seeds.insert(
        format!("delete-being-deleted-{name}.json"),
        compact(&review("DELETE", &old, Some(&old))),
    );
}

fn inference_service_seeds() -> Seeds {
    let mut seeds = Seeds::new();
    let folders = ["examples/inferenceservice", "examples/seeds"];
    for (folder, file) in folders
        .into_iter()
        .flat_map(|folder| example_files(folder).into_iter().map(move |f| (folder, f)))
    {
        let path = format!("{folder}/{file}");
        for object in yaml_documents(&repo_path(&path)) {
            seeds.insert(
                format!("create-{}.json", stem(&file)),
                compact(&review("CREATE", &object, None)),
            );
        }
    }
    let story4 = document(
        "examples/seeds/story4-prefill-decode-multinode.yaml",
        "InferenceService",
        "deepseek-r1-disagg",
    );
    let mut scaled = story4.clone();
    scaled["spec"]["roles"][0]["replicas"] = json!(3);
    seeds.insert(
        "update-story4-scale.json".into(),
        compact(&review("UPDATE", &scaled, Some(&story4))),
    );
    seeds.insert(
        "delete-story4.json".into(),
        compact(&review("DELETE", &story4, Some(&story4))),
    );
    let mut bad = story4.clone();
    bad["spec"]["roles"][1]["replicas"] = json!("two");
    bad["spec"]["roles"][0]["multinode"]["nodeCount"] = json!(0);
    seeds.insert(
        "create-unparseable-replicas.json".into(),
        compact(&review("CREATE", &bad, None)),
    );
    // The spot service as render leaves it, with the ScaleView's lock in its
    // status, and an update that changes a locked role.
    let rendered = tandem::render::render(
        yaml_documents(&repo_path("examples/scaleview/decode-ondemand-spot.yaml")),
        &Default::default(),
    )
    .unwrap();
    let locked = rendered
        .apply
        .into_iter()
        .find(|o| o["kind"] == "InferenceService")
        .unwrap();
    assert!(
        !locked["status"]["scaleViews"]
            .as_array()
            .unwrap()
            .is_empty(),
        "render locks the roles"
    );
    let mut changed = locked.clone();
    changed["spec"]["roles"][1]["replicas"] = json!(7);
    seeds.insert(
        "update-locked-role.json".into(),
        compact(&review("UPDATE", &changed, Some(&locked))),
    );
    // A ScaleView sent to the InferenceService endpoint, and a body that is
    // JSON but no AdmissionReview.
    let view = document(
        "examples/scaleview/decode-ondemand-spot.yaml",
        "ScaleView",
        "spot-decode-sv",
    );
    seeds.insert(
        "wrong-endpoint.json".into(),
        compact(&review("CREATE", &view, None)),
    );
    seeds.insert(
        "not-a-review.json".into(),
        compact(&json!({"apiVersion": "v1", "kind": "Status", "request": {}})),
    );
    let story1 = yaml_documents(&repo_path("examples/seeds/story1-monolithic.yaml")).remove(0);
    let (max, past) = (i64::from(i32::MAX), i64::from(i32::MIN));
    limit_seeds(
        &mut seeds,
        &story1,
        &[
            (
                "replicas",
                "/spec/roles/0/replicas",
                vec![json!(10_000), json!(10_001), json!(max), json!(-1)],
            ),
            (
                "node-count",
                "/spec/roles/0/multinode",
                vec![
                    json!({"nodeCount": 1_000}),
                    json!({"nodeCount": 1_001}),
                    json!({"nodeCount": 1_073_741_824}),
                    json!({"nodeCount": past}),
                ],
            ),
            (
                "roles",
                "/spec/roles/1",
                vec![
                    json!({"name": "extra", "componentType": "worker", "replicas": 0,
                       "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}),
                ],
            ),
            (
                "pull-policy",
                "/spec/roles/0/template/spec/containers/0/imagePullPolicy",
                vec![json!("Never"), json!("Sometimes")],
            ),
            (
                "cpu",
                "/spec/roles/0/template/spec/containers/0/resources",
                vec![
                    json!({"requests": {"cpu": "500m", "nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}),
                    json!({"requests": {"cpu": "lots", "nvidia.com/gpu": "0.5"}}),
                    json!({"requests": {"memory": "1e400"}, "limits": {"memory": "-1"}}),
                ],
            ),
        ],
    );
    let pods = with(
        &story1,
        &[
            ("/spec/roles/0/replicas", json!(100)),
            ("/spec/roles/0/multinode", json!({"nodeCount": 1_000})),
        ],
    );
    seeds.insert(
        "update-limit-pods-per-role-past.json".into(),
        compact(&review(
            "UPDATE",
            &with(&pods, &[("/spec/roles/0/replicas", json!(101))]),
            Some(&pods),
        )),
    );
    being_deleted(&mut seeds, "story4", &story4, "example.com/keep");
    seeds
}

fn scale_view_seeds() -> Seeds {
    let mut seeds = Seeds::new();
    for (file, name) in [
        ("decode-ondemand-spot.yaml", "spot-decode-sv"),
        ("decode-two-zones.yaml", "multi-az-decode"),
    ] {
        let view = document(&format!("examples/scaleview/{file}"), "ScaleView", name);
        seeds.insert(
            format!("create-{name}.json"),
            compact(&review("CREATE", &view, None)),
        );
        let mut unset = view.clone();
        unset["spec"].as_object_mut().unwrap().remove("replicas");
        seeds.insert(
            format!("create-{name}-without-replicas.json"),
            compact(&review("CREATE", &unset, None)),
        );
        let mut retargeted = view.clone();
        retargeted["spec"]["targetRef"]["name"] = json!("another-service");
        seeds.insert(
            format!("update-{name}-target.json"),
            compact(&review("UPDATE", &retargeted, Some(&view))),
        );
    }
    for (replicas, old) in [(4, 2), (100, 4), (-1, 2), (0, 3)] {
        seeds.insert(
            format!("scale-spot-decode-sv-{old}-to-{replicas}.json"),
            compact(&scale_review("spot-decode-sv", "default", replicas, old)),
        );
    }
    let view = document(
        "examples/scaleview/decode-ondemand-spot.yaml",
        "ScaleView",
        "spot-decode-sv",
    );
    seeds.insert("malformed-operation.json".into(), malformed(&view));
    seeds.insert(
        "scale-unknown-view.json".into(),
        compact(&scale_review("no-such-view", "default", 3, 1)),
    );
    limit_seeds(
        &mut seeds,
        &view,
        &[
            (
                "replicas",
                "/spec/replicas",
                vec![
                    json!(100_000),
                    json!(100_001),
                    json!(i64::from(i32::MAX)),
                    json!(i64::from(i32::MIN)),
                ],
            ),
            (
                "priority",
                "/spec/scalePolicy/0/priority",
                vec![json!(10), json!(11), json!(i64::from(i32::MIN))],
            ),
            (
                "max",
                "/spec/scalePolicy/0/constraints",
                vec![
                    json!({"min": 10_000, "max": 10_000}),
                    json!({"max": 10_001}),
                    json!({"min": i64::from(i32::MAX)}),
                ],
            ),
        ],
    );
    for replicas in [100_000, 100_001, i32::MAX, i32::MIN] {
        seeds.insert(
            format!("scale-spot-decode-sv-2-to-{replicas}.json"),
            compact(&scale_review(
                "spot-decode-sv",
                "default",
                replicas.into(),
                2,
            )),
        );
    }
    being_deleted(
        &mut seeds,
        "spot-decode-sv",
        &view,
        "fusioninfer.io/scale-view-lock",
    );
    seeds
}

fn resource_scaling_group_seeds() -> Seeds {
    let mut seeds = Seeds::new();
    for file in example_files("examples/resourcescalinggroup") {
        let path = format!("examples/resourcescalinggroup/{file}");
        for object in yaml_documents(&repo_path(&path)) {
            if object["kind"] != "ResourceScalingGroup" {
                continue;
            }
            let object = in_namespace(object, "ai");
            seeds.insert(
                format!("create-{}.json", stem(&file)),
                compact(&review("CREATE", &object, None)),
            );
        }
    }
    let pool = in_namespace(
        document(
            "examples/resourcescalinggroup/inplace-scaling.yaml",
            "ResourceScalingGroup",
            "pd-pool",
        ),
        "ai",
    );
    let mut ratios = pool.clone();
    ratios["spec"]["scalingStrategy"]["inplaceConfig"]["bindings"][2]["ratio"] = json!("0.1");
    seeds.insert(
        "update-pd-pool-ratio.json".into(),
        compact(&review("UPDATE", &ratios, Some(&pool))),
    );
    // Another group that makes the stored pd-pool's Target drive its Source.
    let mut reverse = pool.clone();
    reverse["metadata"]["name"] = json!("pd-pool-reverse");
    reverse["spec"]["scalingStrategy"]["inplaceConfig"]["bindings"] = json!([
        {"name": "prefill", "role": "Source"},
        {"name": "router", "role": "Target", "ratio": 1}
    ]);
    seeds.insert(
        "create-reverse-cycle.json".into(),
        compact(&review("CREATE", &reverse, None)),
    );
    seeds.insert("malformed-operation.json".into(), malformed(&pool));
    limit_seeds(
        &mut seeds,
        &pool,
        &[
            (
                "ratio",
                "/spec/scalingStrategy/inplaceConfig/bindings/2/ratio",
                vec![
                    json!(1000),
                    json!("1000.5"),
                    json!("79228162514264337593543950335"),
                    json!(-1e300),
                ],
            ),
            (
                "binding-max",
                "/spec/scalingStrategy/inplaceConfig/bindings/1/max",
                vec![json!(10_000), json!(10_001), json!(i64::from(i32::MAX))],
            ),
        ],
    );
    let groups = in_namespace(
        yaml_documents(&repo_path(
            "examples/resourcescalinggroup/group-replication.yaml",
        ))
        .into_iter()
        .find(|o| o["kind"] == "ResourceScalingGroup")
        .unwrap(),
        "ai",
    );
    limit_seeds(
        &mut seeds,
        &groups,
        &[(
            "groups",
            "/spec/scalingStrategy/groupConfig/replicas",
            vec![
                json!(1_000),
                json!(1_001),
                json!(i64::from(i32::MAX)),
                json!(i64::from(i32::MIN)),
            ],
        )],
    );
    being_deleted(&mut seeds, "pd-pool", &pool, "example.com/keep");
    seeds
}

fn render_seeds() -> Seeds {
    let mut seeds = Seeds::new();
    for dir in [
        "inferenceservice",
        "render",
        "resourcescalinggroup",
        "scaleview",
        "seeds",
    ] {
        for file in example_files(&format!("examples/{dir}")) {
            let text = std::fs::read(repo_path(&format!("examples/{dir}/{file}"))).unwrap();
            seeds.insert(format!("{dir}-{file}"), text);
        }
    }
    // Worlds with extreme numbers (issue 16): in Tandem's objects (denied),
    // and where the plans must take them, in the objects around them.
    let yaml = |objects: &[Value]| {
        objects
            .iter()
            .map(|o| format!("---\n{}", serde_norway::to_string(o).unwrap()))
            .collect::<String>()
            .into_bytes()
    };
    let story1 = yaml_documents(&repo_path("examples/seeds/story1-monolithic.yaml"));
    let (max, min) = (i64::from(i32::MAX), i64::from(i32::MIN));
    seeds.insert(
        "extreme-replicas.yaml".into(),
        yaml(&[with(
            &story1[0],
            &[
                ("/spec/roles/0/replicas", json!(max)),
                ("/spec/roles/0/multinode", json!({"nodeCount": min})),
            ],
        )]),
    );
    // A child Tandem will change, at the largest generation there is.
    let rendered = tandem::render::render(story1.clone(), &Default::default()).unwrap();
    let mut world = story1.clone();
    for object in rendered
        .apply
        .iter()
        .filter(|o| o["kind"] == "LeaderWorkerSet")
    {
        world.push(with(
            object,
            &[
                ("/metadata/generation", json!(i64::MAX)),
                ("/spec/replicas", json!(max)),
                ("/status", json!({"replicas": max, "readyReplicas": min})),
            ],
        ));
    }
    seeds.insert("extreme-child-generation.yaml".into(), yaml(&world));
    // Binpack over pods of the extreme deletion costs.
    let binpack = yaml_documents(&repo_path("examples/render/binpack-scale-down.yaml"));
    let costs = ["2147483647", "-2147483648", "9223372036854775807", "-1"];
    let mut pods = 0;
    let extreme: Vec<Value> = binpack
        .iter()
        .map(|o| {
            if o["kind"] != "Pod" {
                return o.clone();
            }
            pods += 1;
            with(
                o,
                &[(
                    "/metadata/annotations/controller.kubernetes.io~1pod-deletion-cost",
                    json!(costs[(pods - 1) % costs.len()]),
                )],
            )
        })
        .collect();
    seeds.insert("extreme-deletion-costs.yaml".into(), yaml(&extreme));
    // An InplaceScaling Source at i32::MAX: its Targets get at most the limit.
    let inplace = yaml_documents(&repo_path("examples/render/inplace-scaling.yaml"));
    let sourced: Vec<Value> = inplace
        .iter()
        .map(|o| {
            if o["kind"] == "Deployment" {
                with(
                    o,
                    &[
                        ("/spec/replicas", json!(max)),
                        ("/status/replicas", json!(max)),
                    ],
                )
            } else {
                o.clone()
            }
        })
        .collect();
    seeds.insert("extreme-source.yaml".into(), yaml(&sourced));
    seeds
}

fn seeds() -> BTreeMap<&'static str, Seeds> {
    BTreeMap::from([
        ("admission_inference_service", inference_service_seeds()),
        ("admission_scale_view", scale_view_seeds()),
        (
            "admission_resource_scaling_group",
            resource_scaling_group_seeds(),
        ),
        ("render", render_seeds()),
    ])
}

/// The files of a corpus directory (none when it does not exist).
fn read_dir(dir: &Path) -> Seeds {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Seeds::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_seed_corpora_are_current() {
    let made = seeds();
    let names: BTreeSet<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        made.keys().copied().collect::<BTreeSet<_>>(),
        names,
        "one seed corpus per fuzz target"
    );
    let write = std::env::var_os(WRITE_SEEDS_ENV).is_some();
    for (target, seeds) in &made {
        let dir = repo_path(&format!("fuzz/seeds/{target}"));
        if write {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, bytes) in seeds {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        }
        assert!(
            read_dir(&dir) == *seeds,
            "fuzz/seeds/{target} is stale: run {WRITE_SEEDS_ENV}=1 cargo test --test unit fuzz_corpus::"
        );
    }
}

/// The seeds reach every kind of answer, so the fuzzer starts from each of
/// them and not only from parse errors.
#[test]
fn the_admission_seeds_reach_every_verdict() {
    for (target, kind) in [
        ("admission_inference_service", Kind::InferenceService),
        ("admission_scale_view", Kind::ScaleView),
        (
            "admission_resource_scaling_group",
            Kind::ResourceScalingGroup,
        ),
    ] {
        let mut verdicts = BTreeSet::new();
        let mut kinds = BTreeSet::new();
        for body in seeds()[target].values() {
            for webhook in [Webhook::Mutate, Webhook::Validate] {
                let answer = http::answer(
                    webhook,
                    kind.plural(),
                    body,
                    example_lookup(),
                    DEFAULT_SERVICE_ACCOUNT,
                );
                verdicts.insert(answer.verdict);
                kinds.insert(answer.kind);
            }
        }
        let wanted: &[&str] = if kind == Kind::ResourceScalingGroup {
            // No default of a ResourceScalingGroup is missing from the
            // examples, so nothing is patched.
            &["allowed", "denied", "invalid"]
        } else {
            &["allowed", "patched", "denied", "invalid"]
        };
        for verdict in wanted {
            assert!(
                verdicts.contains(verdict),
                "{target}: no seed is {verdict} ({verdicts:?})"
            );
        }
        assert!(kinds.contains(kind.name()), "{target}: {kinds:?}");
        if kind == Kind::ScaleView {
            assert!(kinds.contains("ScaleView/scale"), "{target}: {kinds:?}");
        }
    }
}

#[test]
fn every_committed_input_passes_its_fuzz_target() {
    let mut ran = 0;
    for (target, body) in TARGETS {
        for dir in ["seeds", "corpus", "regressions"] {
            let inputs = read_dir(&repo_path(&format!("fuzz/{dir}/{target}")));
            for (name, bytes) in &inputs {
                let outcome = std::panic::catch_unwind(|| body(bytes));
                assert!(outcome.is_ok(), "fuzz/{dir}/{target}/{name} fails");
                ran += 1;
            }
        }
    }
    assert!(ran >= seeds().values().map(Seeds::len).sum::<usize>());
    eprintln!("{ran} committed fuzz inputs passed");
}

/// `tandem::fuzzing::TARGETS` and the fuzz crate's binaries are the same set.
#[test]
fn every_target_is_a_fuzz_binary() {
    let manifest = std::fs::read_to_string(repo_path("fuzz/Cargo.toml")).unwrap();
    let mut binaries: Vec<String> = read_dir(&repo_path("fuzz/fuzz_targets"))
        .into_keys()
        .map(|file| file.trim_end_matches(".rs").to_owned())
        .collect();
    binaries.sort();
    let mut names: Vec<String> = TARGETS.iter().map(|(n, _)| (*n).to_owned()).collect();
    names.sort();
    assert_eq!(binaries, names);
    for name in &names {
        assert!(
            manifest.contains(&format!(
                "name = \"{name}\"\npath = \"fuzz_targets/{name}.rs\""
            )),
            "fuzz/Cargo.toml declares {name}"
        );
    }
}

/// The limit seeds say what they are: each value at a limit is admitted,
/// each one past it (or extreme) is denied, as a create and as an update;
/// and the extreme render worlds reach the paths they are for.
#[test]
fn the_limit_seeds_sit_on_both_sides_of_every_limit() {
    let mut checked = 0;
    for (target, kind) in [
        ("admission_inference_service", Kind::InferenceService),
        ("admission_scale_view", Kind::ScaleView),
        (
            "admission_resource_scaling_group",
            Kind::ResourceScalingGroup,
        ),
    ] {
        for (name, body) in read_dir(&repo_path(&format!("fuzz/seeds/{target}"))) {
            if !name.contains("-limit-") {
                continue;
            }
            let answer = http::answer(
                Webhook::Validate,
                kind.plural(),
                &body,
                &tandem::admission::lookup::Blind,
                DEFAULT_SERVICE_ACCOUNT,
            );
            let expected = if name.ends_with("-at.json") {
                "allowed"
            } else {
                "denied"
            };
            assert_eq!(
                answer.verdict, expected,
                "{target}/{name}: {:?}",
                answer.body
            );
            checked += 1;
        }
    }
    assert!(checked >= 50, "{checked} limit seeds");

    let render = |file: &str| {
        let text =
            std::fs::read_to_string(repo_path(&format!("fuzz/seeds/render/{file}"))).unwrap();
        tandem::render::render(
            tandem::render::parse_world(file, &text, "default").unwrap(),
            &Default::default(),
        )
    };
    let denied = render("extreme-replicas.yaml").unwrap_err().to_string();
    assert!(denied.contains("denied"), "{denied}");
    let generation = render("extreme-child-generation.yaml")
        .unwrap_err()
        .to_string();
    assert!(generation.contains("largest generation"), "{generation}");
    render("extreme-deletion-costs.yaml").expect("binpack takes any cost");
    let sourced = render("extreme-source.yaml").expect("a huge Source is followed");
    let replicas_of = |name: &str| {
        sourced
            .apply
            .iter()
            .find(|o| o["metadata"]["name"] == name && o["kind"] != "ResourceScalingGroup")
            .map(|o| o["spec"]["replicas"].clone())
    };
    // router is at i32::MAX: its Targets get the most a ratio may give,
    // and kv-cache follows decode at 1:4.
    let limit = tandem::api::limits::MAX_REPLICAS;
    assert_eq!(replicas_of("prefill"), Some(json!(limit)));
    assert_eq!(replicas_of("decode"), Some(json!(limit)));
    assert_eq!(replicas_of("kv-cache"), Some(json!(limit / 4)));
}
