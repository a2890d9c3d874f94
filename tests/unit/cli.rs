//! The `tandem` binary as users run it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::{render_stdin, repo_path};
use serde_json::Value;

fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .current_dir(repo_path(""))
        .output()
        .expect("tandem runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What `render --help` promises: with `--now`, or a world that holds a
/// time, the same input gives the same output. (Without either, the clock
/// is the wall clock, whose second may turn between two runs.)
#[test]
fn render_of_an_example_is_deterministic_and_shows_defaults() {
    let args = [
        "render",
        "-f",
        "examples/seeds/story4-prefill-decode-multinode.yaml",
        "--now",
        "2026-11-28T10:00:00Z",
    ];
    let first = tandem(&args);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(first.stdout, tandem(&args).stdout, "same input, same bytes");
    // A world that holds a time runs at its newest, without --now.
    let timed = [
        "render",
        "-f",
        "examples/render/incremental-upgrade-step.yaml",
    ];
    let once = tandem(&timed);
    assert!(once.status.success(), "{}", text(&once.stderr));
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(once.stdout, tandem(&timed).stdout, "same world, same bytes");
    let out = text(&first.stdout);
    assert!(
        out.starts_with("---\n# changed InferenceService deepseek-r1-disagg: admission fills in defaults: spec.roles[0].disruptionBudget, spec.roles[0].drain, spec.roles[0].scaleDown, spec.roles[1].disruptionBudget, spec.roles[1].drain, spec.roles[1].scaleDown, 2 more; Tandem writes status\napiVersion: fusioninfer.io/v1alpha1\nkind: InferenceService\n"),
        "{out}"
    );
    assert!(
        out.contains("namespace: default"),
        "objects without a namespace are in default"
    );
    assert!(
        out.contains("policy: Ordered") && out.contains("type: RollingUpdate"),
        "defaults are shown: {out}"
    );
    // Nothing is installed in this world (no CRDs): everything is assumed,
    // so a prefill/decode service is gang-scheduled by Volcano, written down.
    assert!(out.contains("gangScheduler: Volcano"), "{out}");
}

#[test]
fn render_reports_denials_with_exit_status_2() {
    let output = render_stdin(
        b"apiVersion: fusioninfer.io/v1alpha1\nkind: InferenceService\nmetadata: {name: bad, namespace: team}\n\
          spec:\n  roles:\n  - {name: decode, componentType: decoder, multinode: {nodeCount: 0},\n     \
          template: {spec: {containers: [{name: vllm, image: vllm}]}}}\n",
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "InferenceService team/bad: spec.roles[0].multinode.nodeCount: must be >= 1, got 0"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("InferenceService team/bad: spec.roles: a disaggregated service needs both a prefiller and a decoder role"),
        "{stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "nothing is rendered when something is denied"
    );
}

#[test]
fn render_json_with_a_namespace_and_warnings() {
    let output = tandem(&[
        "render",
        "-n",
        "ai",
        "-o",
        "json",
        "-f",
        "examples/resourcescalinggroup/inplace-scaling.yaml",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rendered: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(rendered["apply"][0]["metadata"]["namespace"], "ai");
    assert_eq!(rendered["delete"], serde_json::json!([]));
    assert_eq!(rendered["warnings"].as_array().unwrap().len(), 1);
    assert!(text(&output.stderr).starts_with("Warning: ResourceScalingGroup ai/pd-pool: "));
    // Without its namespace the seed's group lands in default and reaches
    // into ai: denied.
    let seed = std::fs::read_to_string(repo_path(
        "examples/resourcescalinggroup/inplace-scaling.yaml",
    ))
    .unwrap()
    .replace("  namespace: ai\nspec:", "spec:");
    let denied = render_with(&[], &seed);
    assert_eq!(denied.status.code(), Some(1));
    assert!(
        text(&denied.stderr)
            .contains("ResourceScalingGroup default/pd-pool: spec.targetResources[0].namespace")
    );
}

#[test]
fn render_of_unreadable_input_says_where() {
    let missing = tandem(&["render", "-f", "does-not-exist.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).starts_with("error: could not read does-not-exist.yaml"));
}

#[test]
fn crds_prints_the_committed_manifests() {
    let output = tandem(&["crds"]);
    assert!(output.status.success());
    let printed = text(&output.stdout);
    for file in [
        "inferenceservices.fusioninfer.io",
        "scaleviews.fusioninfer.io",
        "resourcescalinggroups.resourcescalinggroup.com",
    ] {
        let committed =
            std::fs::read_to_string(repo_path(&format!("manifests/crds/{file}.yaml"))).unwrap();
        assert!(
            printed.contains(&committed),
            "{file} missing from `tandem crds`"
        );
    }
}

#[test]
fn certs_writes_a_ca_and_a_serving_certificate() {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let output = tandem(&[
        "certs",
        "--out-dir",
        out.to_str().unwrap(),
        "--host",
        "webhook.example",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let ca = std::fs::read_to_string(out.join("ca.crt")).unwrap();
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(text(&output.stdout).trim())
        .unwrap();
    assert_eq!(bundle, ca.as_bytes(), "stdout is the caBundle");
    assert!(text(&output.stderr).contains("tandem-webhook.tandem-system.svc, tandem-webhook.tandem-system.svc.cluster.local, webhook.example"));
    // Every file written is named, the CA's key too, and the blob on stdout
    // is announced rather than left bare.
    let out_dir = out.display();
    assert!(
        text(&output.stderr).contains(&format!("wrote {out_dir}/ca.crt and {out_dir}/ca.key (a new CA), and {out_dir}/tls.crt and {out_dir}/tls.key")),
        "{}",
        text(&output.stderr)
    );
    assert!(
        text(&output.stderr).contains(
            "the caBundle of the webhook configurations (base64 of ca.crt) follows on stdout"
        ),
        "{}",
        text(&output.stderr)
    );
    let dir_for_load = out.clone();
    tandem::server::tls::load(&dir_for_load).expect("the pair loads");
}

#[test]
fn serve_dev_without_a_cluster_serves_admission_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--dev", "--cert-dir"])
        .arg(dir.path().join("certs"))
        .args(["--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"])
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env("HOME", dir.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        // Colour is for terminals: stderr is a pipe here, so none even
        // without NO_COLOR.
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("# dev CA and serving certificate"),
        "{line}"
    );
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("caBundle: "), "{line}");

    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (sender, logs) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("serving admission webhooks"))
    {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match logs.recv_timeout(remaining) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("the server did not start; logs: {seen:#?}"),
        }
    }
    let no_cluster: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("no kubeconfig reachable"))
        .collect();
    assert_eq!(
        no_cluster.len(),
        1,
        "one log line says there is no cluster: {seen:#?}"
    );
    assert!(no_cluster[0].contains("serving admission only"));

    // A client that connects by IP address sends it as SNI, which rustls
    // warns about on every connection: at debug level, so not in these logs.
    let serving = seen
        .iter()
        .find(|l| l.contains("serving admission webhooks"))
        .unwrap();
    let addr: std::net::SocketAddr = serving
        .split("webhook_addr=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("the address is logged: {serving}"))
        .parse()
        .unwrap();
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.write_all(&client_hello_with_sni("127.0.0.1")).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = [0u8; 5];
    let _ = std::io::Read::read(&mut tcp, &mut answer);
    drop(tcp);
    std::thread::sleep(Duration::from_millis(300));
    seen.extend(logs.try_iter());
    assert!(
        !seen.iter().any(|l| l.contains("Illegal SNI")),
        "the SNI warning is not at info: {seen:#?}"
    );
    assert!(
        !seen.iter().any(|l| l.contains('\u{1b}')),
        "no ANSI codes in a pipe: {seen:#?}"
    );

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "a SIGTERM is a clean stop, got {status}");
}

/// A TLS 1.2 ClientHello whose server_name extension carries `host` (an IP
/// address, as clients that connect by address send it).
fn client_hello_with_sni(host: &str) -> Vec<u8> {
    fn vec16(bytes: &[u8]) -> Vec<u8> {
        let mut out = u16::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(bytes);
        out
    }
    fn extension(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend(vec16(body));
        out
    }
    let mut server_name = vec![0];
    server_name.extend(vec16(host.as_bytes()));
    let extensions = [
        extension(0x0000, &vec16(&server_name)),
        extension(0x000a, &vec16(&[0x00, 0x1d, 0x00, 0x17])),
        extension(0x000b, &[1, 0]),
        extension(0x000d, &vec16(&[0x04, 0x03, 0x08, 0x04])),
    ]
    .concat();
    let mut hello = 0x0303u16.to_be_bytes().to_vec();
    hello.extend([7u8; 32]);
    hello.push(0);
    hello.extend(vec16(&[0xc0, 0x2b, 0xc0, 0x2c]));
    hello.extend([1, 0]);
    hello.extend(vec16(&extensions));
    let mut handshake = vec![1];
    handshake.extend(&u32::try_from(hello.len()).unwrap().to_be_bytes()[1..]);
    handshake.extend(hello);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend(vec16(&handshake));
    record
}

#[test]
fn render_refuses_resource_scaling_groups_that_follow_themselves() {
    let group = |name: &str, from: &str, to: &str| {
        format!(
            "apiVersion: resourcescalinggroup.com/v1\nkind: ResourceScalingGroup\nmetadata: {{name: {name}}}\nspec:\n  targetResources:\n  - {{name: {from}, apiVersion: apps/v1, kind: Deployment}}\n  - {{name: {to}, apiVersion: apps/v1, kind: Deployment}}\n  scalingStrategy:\n    type: InplaceScaling\n    inplaceConfig:\n      bindings:\n      - {{name: {from}, role: Source}}\n      - {{name: {to}, role: Target, ratio: 2}}\n"
        )
    };
    let world = format!(
        "{}---\n{}",
        group("rsg-a", "prefill", "decode"),
        group("rsg-b", "decode", "prefill")
    );
    let output = render_stdin(world.as_bytes());
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "ResourceScalingGroup default/rsg-b: spec.scalingStrategy.inplaceConfig.bindings[1]"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("via rsg-"),
        "the cycle names the groups: {stderr}"
    );
}

#[test]
fn render_replicates_groups_and_deletes_the_binpack_victims() {
    let up = tandem(&[
        "render",
        "-o",
        "json",
        "-f",
        "examples/render/group-replication-scale-up.yaml",
    ]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    let rendered: Value = serde_json::from_slice(&up.stdout).unwrap();
    let names: Vec<&str> = rendered["apply"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "decode",
            "inference-unit-01-decode",
            "inference-unit-01-prefill",
            "inference-unit-02-decode",
            "inference-unit-02-prefill",
            "prefill",
            "pd-cluster"
        ],
        "the originals with their group labels, two groups of clones, the group"
    );
    assert_eq!(rendered["delete"], serde_json::json!([]));
    let original = &rendered["apply"][5];
    assert_eq!(
        original["spec"]["template"]["metadata"]["labels"]["resourcescalinggroup.com/group"],
        "inference-unit-00"
    );
    assert_eq!(
        original["spec"]["template"]["spec"]["containers"][0]["name"], "vllm",
        "an original keeps its spec: only the labels are applied"
    );
    let group = &rendered["apply"][6];
    assert_eq!(group["status"]["currentReplicas"], 3);
    assert_eq!(
        rendered["apply"][2]["spec"]["selector"]["matchLabels"]["resourcescalinggroup.com/group"],
        "inference-unit-01"
    );

    // The world holds no time, so the clock is --now: the wall clock would
    // change the conditions' times when the two runs straddle a second.
    let args = [
        "render",
        "--now",
        "2026-11-28T10:00:00Z",
        "-f",
        "examples/render/group-replication-binpack.yaml",
    ];
    let down = tandem(&args);
    assert!(down.status.success(), "{}", text(&down.stderr));
    assert_eq!(down.stdout, tandem(&args).stdout, "same input, same bytes");
    let out = text(&down.stdout);
    let deletes: Vec<&str> = out.lines().filter(|l| l.starts_with("# delete ")).collect();
    assert_eq!(
        deletes,
        [
            "# delete apps/v1 Deployment ai/inference-unit-02-decode",
            "# delete apps/v1 Deployment ai/inference-unit-02-prefill",
            "# delete apps/v1 Deployment ai/inference-unit-03-decode",
            "# delete apps/v1 Deployment ai/inference-unit-03-prefill",
        ],
        "groups 02 (cost 10) and 03 (cost 75) go, 01 (cost 150) stays: {out}"
    );
    assert!(out.contains("currentReplicas: 2"), "{out}");
}

/// `tandem render ARGS -f -` with `input` on standard input.
fn render_with(args: &[&str], input: &str) -> Output {
    harness::render_stdin_with(input.as_bytes(), args)
}

const SERVICE: &str = "apiVersion: fusioninfer.io/v1alpha1\nkind: InferenceService\nmetadata: {name: chat}\nspec:\n  roles:\n  - {name: inference, componentType: worker, template: {spec: {containers: [{name: vllm, image: vllm}]}}}\n";

/// Issue 25: a misspelt kind or version of Tandem's groups is an error with
/// the nearest kind Tandem serves; other groups' kinds are world.
#[test]
fn render_refuses_misspelt_tandem_kinds_and_suggests_the_right_one() {
    let kind = render_with(&[], &SERVICE.replace("InferenceService", "InferenceSevice"));
    assert_eq!(kind.status.code(), Some(2));
    assert_eq!(
        text(&kind.stderr),
        "error: stdin document 1: apiVersion fusioninfer.io/v1alpha1, kind InferenceSevice: fusioninfer.io serves no such kind: did you mean kind: InferenceService?\n"
    );
    let version = render_with(&[], &SERVICE.replace("v1alpha1", "v1alpah1"));
    assert_eq!(version.status.code(), Some(2));
    assert!(
        text(&version.stderr).contains("did you mean apiVersion: fusioninfer.io/v1alpha1?"),
        "{}",
        text(&version.stderr)
    );
    let group = render_with(
        &[],
        "apiVersion: resourcescalinggroup.com/v1alpha1\nkind: ResourceScalingGroup\nmetadata: {name: g}\n",
    );
    assert!(
        text(&group.stderr).contains("did you mean apiVersion: resourcescalinggroup.com/v1?"),
        "{}",
        text(&group.stderr)
    );
    let foreign = render_with(
        &[],
        &format!("{SERVICE}---\napiVersion: example.com/v1\nkind: Widgit\nmetadata: {{name: w}}\n"),
    );
    assert!(foreign.status.success(), "{}", text(&foreign.stderr));
    assert!(
        !text(&foreign.stdout).contains("Widgit"),
        "another group's object is world, not output"
    );
}

/// Issue 25: an input without objects is an error naming it; a directory is
/// read as `kubectl -f DIR` reads it.
#[test]
fn render_reads_directories_and_refuses_empty_input() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "# nothing yet\n---\n").unwrap();
    let output = tandem(&["render", "-f", empty.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        text(&output.stderr),
        format!(
            "error: {}: no objects in it (an empty file, or only comments and `---`)\n",
            empty.display()
        )
    );
    let stdin = render_with(&[], "");
    assert_eq!(stdin.status.code(), Some(2));
    assert!(text(&stdin.stderr).starts_with("error: stdin: no objects"));

    let world = dir.path().join("world");
    std::fs::create_dir(&world).unwrap();
    let none = tandem(&["render", "-f", world.to_str().unwrap()]);
    assert_eq!(none.status.code(), Some(2));
    assert!(
        text(&none.stderr).contains("no .yaml, .yml or .json files in this directory"),
        "{}",
        text(&none.stderr)
    );
    let blank = dir.path().join("blank");
    std::fs::create_dir(&blank).unwrap();
    std::fs::write(blank.join("empty.yaml"), "# nothing yet\n").unwrap();
    let nothing = tandem(&["render", "-f", blank.to_str().unwrap()]);
    assert_eq!(nothing.status.code(), Some(2));
    assert_eq!(
        text(&nothing.stderr),
        format!(
            "error: {}: no objects in this directory's manifests (each is empty, or only comments and `---`)\n",
            blank.display()
        )
    );
    std::fs::write(world.join("b-service.yaml"), SERVICE).unwrap();
    let view = serde_json::json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
        "metadata": {"name": "view"},
        "spec": {"targetRef": {"name": "chat", "componentType": "worker"},
                 "scalePolicy": [{"group": "inference"}]}
    });
    std::fs::write(world.join("a-view.json"), view.to_string()).unwrap();
    std::fs::write(world.join("notes.txt"), "not a manifest").unwrap();
    // An empty manifest in a directory is skipped, as kubectl skips it.
    std::fs::write(world.join("c-empty.yaml"), "# nothing yet\n---\n").unwrap();
    let output = tandem(&["render", "-o", "json", "-f", world.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rendered: Value = serde_json::from_slice(&output.stdout).unwrap();
    let kinds: Vec<&str> = rendered["apply"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"ScaleView") && kinds.contains(&"LeaderWorkerSet"),
        "both files are read: {kinds:?}"
    );
}

/// Issue 25: an object with a deletionTimestamp is stored, not created: a
/// ScaleView being deleted whose InferenceService is gone is not refused.
#[test]
fn render_does_not_admit_an_object_being_deleted_as_a_creation() {
    let view = "apiVersion: fusioninfer.io/v1alpha1\nkind: ScaleView\nmetadata:\n  name: view\n  deletionTimestamp: '2026-03-01T10:00:00Z'\n  finalizers: [fusioninfer.io/scale-view-lock]\nspec:\n  replicas: 2\n  targetRef: {name: gone, componentType: worker}\n  scalePolicy: [{group: inference}]\n";
    let output = render_with(&["--now", "2026-03-01T10:05:00Z"], view);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("finalizers: []"),
        "the view lets go of its finalizer: {}",
        text(&output.stdout)
    );
    let created = render_with(
        &["--now", "2026-03-01T10:05:00Z"],
        &view.replace("  deletionTimestamp: '2026-03-01T10:00:00Z'\n", ""),
    );
    assert_eq!(
        created.status.code(),
        Some(1),
        "the same view, created, is refused: {}",
        text(&created.stderr)
    );
}

/// The `lastTransitionTime` of the rendered InferenceService's first condition.
fn condition_time(output: &Output) -> String {
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rendered: Value = serde_json::from_slice(&output.stdout).unwrap();
    let service = rendered["apply"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "InferenceService")
        .expect("the service is rendered");
    service["status"]["conditions"][0]["lastTransitionTime"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Issue 25: render's clock is `--now`, else the newest time in the world,
/// else the wall clock; never the epoch.
#[test]
fn render_clock_is_now_else_the_newest_time_of_the_world_else_the_wall_clock() {
    let fixed = render_with(&["-o", "json", "--now", "2026-05-04T03:02:01Z"], SERVICE);
    assert_eq!(condition_time(&fixed), "2026-05-04T03:02:01Z");
    assert_eq!(
        fixed.stdout,
        render_with(&["-o", "json", "--now", "2026-05-04T03:02:01Z"], SERVICE).stdout,
        "same input and --now, same bytes"
    );

    let dated = SERVICE.replace(
        "metadata: {name: chat}",
        "metadata: {name: chat, creationTimestamp: '2026-02-01T08:00:00Z'}",
    );
    let world = format!(
        "{dated}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, creationTimestamp: '2026-02-03T09:30:00Z'}}\nstatus:\n  conditions: [{{type: Ready, status: 'True', lastTransitionTime: '2026-02-03T09:31:00Z'}}]\n"
    );
    let newest = render_with(&["-o", "json"], &world);
    assert_eq!(condition_time(&newest), "2026-02-03T09:31:00Z");
    assert_eq!(
        newest.stdout,
        render_with(&["-o", "json"], &world).stdout,
        "the world's own clock: same input, same bytes"
    );

    let before = jiff::Timestamp::now();
    let wall: jiff::Timestamp = condition_time(&render_with(&["-o", "json"], SERVICE))
        .parse()
        .unwrap();
    let after = jiff::Timestamp::now();
    assert!(
        before.as_second() <= wall.as_second() && wall <= after,
        "no time in the world: the wall clock, got {wall}"
    );
    let help = text(&tandem(&["render", "--help"]).stdout);
    assert!(
        help.contains("newest time found in the world") && help.contains("wall clock"),
        "{help}"
    );
}

/// Issue 25: render says why, in the words of the Events Tandem records:
/// one change per applied or deleted object.
#[test]
fn render_says_why_each_object_is_created_changed_or_deleted() {
    let json = tandem(&[
        "render",
        "-o",
        "json",
        "-f",
        "examples/render/group-replication-binpack.yaml",
    ]);
    assert!(json.status.success(), "{}", text(&json.stderr));
    let rendered: Value = serde_json::from_slice(&json.stdout).unwrap();
    let apply = rendered["apply"].as_array().unwrap();
    let delete = rendered["delete"].as_array().unwrap();
    let changes = rendered["changes"].as_array().unwrap();
    assert_eq!(changes.len(), apply.len() + delete.len(), "{changes:#?}");
    for (object, change) in apply.iter().zip(changes) {
        assert_eq!(change["kind"], object["kind"]);
        assert_eq!(change["namespace"], object["metadata"]["namespace"]);
        assert_eq!(change["name"], object["metadata"]["name"]);
        assert!(
            ["created", "changed"].contains(&change["action"].as_str().unwrap()),
            "{change}"
        );
    }
    for (key, change) in delete.iter().zip(&changes[apply.len()..]) {
        assert_eq!(change["action"], "deleted");
        assert_eq!(change["name"], key["name"]);
    }
    let gone = changes
        .iter()
        .find(|c| c["name"] == "inference-unit-02-decode")
        .unwrap();
    assert_eq!(
        gone["reason"],
        "Deployment inference-unit-02-decode deleted: group inference-unit-02 is removed, the ResourceScalingGroup is scaled to 2 group(s); Binpack removes inference-unit-02 (cost 10) before the groups it keeps: inference-unit-01 (cost 150)",
        "the note of the Event recorded for the deletion"
    );
    let group = changes.iter().find(|c| c["name"] == "pd-cluster").unwrap();
    assert_eq!(group["action"], "changed");
    assert_eq!(group["reason"], "Tandem writes status");

    let args = ["render", "-f", "examples/render/rolling-update-step.yaml"];
    let yaml = tandem(&args);
    assert!(yaml.status.success(), "{}", text(&yaml.stderr));
    let out = text(&yaml.stdout);
    assert!(
        out.contains("---\n# created LeaderWorkerSet qwen-rolling-inference-3: role inference moves to revision "),
        "{out}"
    );
    assert!(
        out.contains("---\n# changed LeaderWorkerSet qwen-rolling-inference-2: role inference moves to revision ")
            && out.contains("(fields: metadata.annotations, metadata.labels, spec.leaderWorkerTemplate)\n"),
        "a change says which fields: {out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        if *line == "---" {
            let why = lines[index + 1];
            assert!(
                why.starts_with("# created ") || why.starts_with("# changed "),
                "every object says why: {why}"
            );
        }
    }
    let binpack = text(
        &tandem(&[
            "render",
            "-f",
            "examples/render/group-replication-binpack.yaml",
        ])
        .stdout,
    );
    let lines: Vec<&str> = binpack.lines().collect();
    let deletes: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i].starts_with("# delete "))
        .collect();
    assert_eq!(deletes.len(), 4);
    for index in deletes {
        assert!(
            lines[index - 1].starts_with("# deleted Deployment inference-unit-0"),
            "{}",
            lines[index - 1]
        );
    }
}

/// Whether `dir/tls.crt` verifies against `dir/ca.crt` for `host`.
fn verifies(dir: &std::path::Path, host: &str) -> Result<(), rustls::Error> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("ca.crt")).unwrap())
        .unwrap();
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap();
    let leaf = CertificateDer::from_pem_file(dir.join("tls.crt")).unwrap();
    verifier
        .verify_server_cert(
            &leaf,
            &[],
            &ServerName::try_from(host.to_owned()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .map(drop)
}

/// Issue 25: `tandem certs` refuses a validity out of range and names that
/// are not DNS names or IPs, naming the flag (exit status 2).
#[test]
fn certs_refuses_bad_days_and_names_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let out = out.to_str().unwrap();
    for (flag, value) in [
        ("--days", "0"),
        ("--days", "3651"),
        ("--service", "Bad_Name!"),
        ("--namespace", "Tandem System"),
        ("--host", "web hook.example"),
    ] {
        let output = tandem(&["certs", "--out-dir", out, flag, value]);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{flag}")),
            "{stderr}"
        );
        assert!(
            !std::path::Path::new(out).exists(),
            "nothing is written for {flag} {value}"
        );
    }
    for host in ["10.0.0.7", "webhook.example", "*.example"] {
        let output = tandem(&["certs", "--out-dir", out, "--host", host, "--days", "3650"]);
        assert!(output.status.success(), "{host}: {}", text(&output.stderr));
    }
}

/// Issue 25: an existing CA signs the new serving certificate (the caBundle
/// stays the same); a CA without its key is refused unless --force.
#[test]
fn certs_reuses_an_existing_ca_and_never_overwrites_one_silently() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let run = |extra: &[&str]| {
        let mut args = vec!["certs", "--out-dir", out.to_str().unwrap()];
        args.extend(extra);
        tandem(&args)
    };
    let first = run(&[]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let ca = std::fs::read(out.join("ca.crt")).unwrap();
    let leaf = std::fs::read(out.join("tls.crt")).unwrap();

    let second = run(&["--host", "webhook.example"]);
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert!(
        text(&second.stderr).contains("signing with the CA already in"),
        "{}",
        text(&second.stderr)
    );
    assert_eq!(first.stdout, second.stdout, "the same caBundle");
    assert!(
        text(&second.stderr).contains("ca.key (the CA kept)"),
        "{}",
        text(&second.stderr)
    );
    assert_eq!(std::fs::read(out.join("ca.crt")).unwrap(), ca);
    assert_ne!(std::fs::read(out.join("tls.crt")).unwrap(), leaf);
    verifies(&out, "webhook.example").expect("the new certificate chains to the old CA");
    verifies(&out, "tandem-webhook.tandem-system.svc").unwrap();

    std::fs::remove_file(out.join("ca.key")).unwrap();
    let refused = run(&[]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("cannot sign a new certificate: pass --force"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(std::fs::read(out.join("ca.crt")).unwrap(), ca, "kept");

    let forced = run(&["--force"]);
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    assert_ne!(std::fs::read(out.join("ca.crt")).unwrap(), ca, "a new CA");
    verifies(&out, "tandem-webhook.tandem-system.svc").unwrap();
}

/// Issue 25: --log-format is a flag of `serve` only; `render --help` says
/// how input, the clock and the exit status work.
#[test]
fn log_format_is_for_serve_only_and_render_help_says_how_it_works() {
    for args in [
        &["render", "--log-format", "json", "-f", "-"][..],
        &["crds", "--log-format", "json"],
        &["certs", "--log-format", "json", "--out-dir", "x"],
        &["--log-format", "json", "crds"],
    ] {
        let output = tandem(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            text(&output.stderr).contains("unexpected argument '--log-format'"),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
    let serve = text(&tandem(&["serve", "--help"]).stdout);
    assert!(serve.contains("--log-format"), "{serve}");
    for promise in [
        "Environment: each flag shown with [env: NAME=] can be set by that variable",
        "[env: TANDEM_LOG_FORMAT=]",
        "Log level: RUST_LOG, default info",
    ] {
        assert!(serve.contains(promise), "{promise:?} in {serve}");
    }
    let render = text(&tandem(&["render", "--help"]).stdout);
    for promise in [
        "-f may be given many times",
        "a directory, whose .yaml, .yml and .json files are read in name order",
        "Clock: --now, else the newest time found in the world",
        "Exit status: 0 rendered; 1 an object was denied",
        "2 the input could not be\nread",
    ] {
        assert!(render.contains(promise), "{promise:?} in {render}");
    }
    assert!(!render.contains("--log-format"), "{render}");
    // One convention for every subcommand, said once at the top.
    let top = text(&tandem(&["--help"]).stdout);
    for promise in [
        "Exit status, the same for every subcommand: 0 done; 1 the answer is no",
        "2 trouble",
        "Errors go to\nstderr as `error: ...`",
    ] {
        assert!(top.contains(promise), "{promise:?} in {top}");
    }
}

/// Every subcommand's trouble is `error: ...` and exit status 2, as clap's
/// own usage errors are; the answer no is 1 (render's denial, check's
/// verdict, tested beside them).
#[test]
fn every_subcommand_reports_trouble_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "x").unwrap();
    let inside_a_file = not_a_dir.join("crds");
    let inside_a_file = inside_a_file.to_str().unwrap();
    for args in [
        vec!["render", "-f", missing],
        vec!["check", "-f", missing],
        vec!["crds", "--out-dir", inside_a_file],
        vec!["certs", "--out-dir", inside_a_file],
        vec!["render", "--no-such-flag"],
    ] {
        let output = tandem(&args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}

/// A kubeconfig with two contexts, `one` (current) and `two`, whose API
/// servers are closed loopback ports.
const TWO_CLUSTERS: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: one\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n- name: two\n  cluster: {server: 'https://127.0.0.1:2', insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: one\n  context: {cluster: one, user: u}\n- name: two\n  context: {cluster: two, user: u}\ncurrent-context: one\n";

/// A `tandem serve` on free loopback ports with `args`, and its log lines.
struct Serving {
    child: std::process::Child,
    logs: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Serving {
    fn start(args: &[&str], dir: tempfile::TempDir) -> Serving {
        Serving::start_with_env(args, dir, &[])
    }

    fn start_with_env(args: &[&str], dir: tempfile::TempDir, env: &[(&str, &str)]) -> Serving {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"])
            .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
            .env("HOME", dir.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Standard output and error as one stream of lines.
        let (sender, logs) = std::sync::mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let errors = sender.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = errors.send(line);
            }
        });
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        Serving {
            child,
            logs,
            seen: Vec::new(),
            _dir: dir,
        }
    }

    /// Waits until a line contains `text`; panics with the log after `secs`.
    fn wait_for(&mut self, text: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(line) = self.seen.iter().find(|l| l.contains(text)) {
                return line.clone();
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.logs.recv_timeout(remaining) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no log line with {text:?}; logs: {:#?}", self.seen),
            }
        }
    }

    /// The lines logged within `window`.
    fn collect(&mut self, window: Duration) -> &[String] {
        let deadline = Instant::now() + window;
        while let Ok(line) = self
            .logs
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line);
        }
        &self.seen
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 25: what `serve --help` says of the environment holds: a
/// `TANDEM_*` variable sets its flag, and RUST_LOG the level.
#[test]
fn serve_takes_its_flags_from_the_environment_and_its_level_from_rust_log() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([
            "serve",
            "--dev",
            "--listen",
            "127.0.0.1:0",
            "--probe-listen",
            "127.0.0.1:0",
        ])
        .env("TANDEM_CERT_DIR", &certs)
        .env("TANDEM_LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env("HOME", dir.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The certificate lands in TANDEM_CERT_DIR once the ports are bound.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !certs.join("tls.crt").exists() {
        assert!(
            Instant::now() < deadline,
            "no certificate in TANDEM_CERT_DIR"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let logs = text(&output.stderr);
    // At warn, none of the INFO lines of a start (the --dev notice among them).
    assert!(!logs.contains("admission only"), "{logs}");
    assert!(!logs.contains("\"level\":\"INFO\""), "{logs}");
    // What is logged is JSON, as TANDEM_LOG_FORMAT asks.
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok(), "not JSON: {line}");
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let mut json = Serving::start_with_env(
        &["--dev", "--cert-dir", &certs.display().to_string()],
        dir,
        &[("TANDEM_LOG_FORMAT", "json")],
    );
    let line = json.wait_for("admission only", 20);
    let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(parsed["level"], "INFO", "{line}");
}

/// Read system calls of a process so far (`syscr` of `/proc/PID/io`).
fn reads_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("syscr:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("syscr in /proc/PID/io")
}

/// An idle server reads nothing, even after someone read its certificate
/// (as `cat`, a backup or a second process using the same pair would): the
/// certificate watcher once took any read of the pair, its own included, for
/// a change, and from the first outside read on reloaded it about 20 times a
/// second for as long as it ran.
#[test]
fn an_idle_server_does_not_reload_its_certificate_over_and_over() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let mut serving = Serving::start(&["--dev", "--cert-dir", &certs.display().to_string()], dir);
    serving.wait_for("serving admission webhooks", 20);
    std::fs::read(certs.join("tls.crt")).unwrap();
    std::fs::read(certs.join("tls.key")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let pid = serving.child.id();
    let before = reads_of(pid);
    std::thread::sleep(Duration::from_secs(2));
    let after = reads_of(pid);
    assert!(
        after - before < 10,
        "{} read calls in 2 s of idleness",
        after - before
    );
    // A real change is still picked up.
    let written = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["certs", "--force", "--host", "localhost", "--out-dir"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(written.status.success(), "{}", text(&written.stderr));
    serving.wait_for("serving certificate reloaded", 10);
}

/// Issue 25: `serve --kubeconfig` and `--context` choose the cluster; --dev
/// is admission only (no controllers, no Lease) unless --controllers.
#[test]
fn serve_chooses_its_cluster_and_dev_runs_no_controllers_unless_asked() {
    let dev = |extra: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, TWO_CLUSTERS).unwrap();
        let certs = dir.path().join("certs");
        let mut args = vec![
            "--dev".to_owned(),
            "--kubeconfig".to_owned(),
            kubeconfig.display().to_string(),
            "--cert-dir".to_owned(),
            certs.display().to_string(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Serving::start(&args, dir)
    };
    let mut admission = dev(&[]);
    admission.wait_for(
        "--dev: admission only, no controllers and no leader Lease (pass --controllers to run them)",
        20,
    );
    let watching = admission.wait_for("watching the cluster", 20);
    assert!(
        watching.contains("https://127.0.0.1:1/") && watching.contains("controllers=false"),
        "{watching}"
    );
    admission.wait_for("serving admission webhooks", 20);
    let seen = admission.collect(Duration::from_millis(500));
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("leader Lease") && l.contains("reconciling")),
        "no controllers: {seen:#?}"
    );

    let mut controllers = dev(&["--controllers", "--context", "two"]);
    let watching = controllers.wait_for("watching the cluster", 20);
    assert!(
        watching.contains("https://127.0.0.1:2/") && watching.contains("controllers=true"),
        "--context two: {watching}"
    );
    controllers.wait_for("reconciling InferenceServices", 20);

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let output = tandem(&[
        "serve",
        "--dev",
        "--cert-dir",
        dir.path().join("certs").to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--probe-listen",
        "127.0.0.1:0",
        "--kubeconfig",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains(&format!("error: --kubeconfig {}: ", missing.display())),
        "{}",
        text(&output.stderr)
    );
    let both = tandem(&["serve", "--dev", "--admission-only", "--controllers"]);
    assert_eq!(both.status.code(), Some(2));
}

/// The address after `field=` in a log line.
fn logged_addr(line: &str, field: &str) -> std::net::SocketAddr {
    line.split(&format!("{field}="))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{field} in {line}"))
        .parse()
        .unwrap()
}

/// Issue 25: the webhook can be watched: a denial is an INFO line with
/// what, whose and why; 413 and 503 are logged, counted and say which flag.
#[tokio::test]
async fn serve_logs_denials_and_explains_and_counts_413_and_503() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let args = [
        "--dev",
        "--cert-dir",
        certs.to_str().unwrap(),
        "--body-limit-bytes",
        "20000",
        "--request-timeout-ms",
        "300",
    ];
    let mut serving = Serving::start(&args, dir);
    let line = serving.wait_for("serving admission webhooks", 20);
    let (webhook, probes) = (
        logged_addr(&line, "webhook_addr"),
        logged_addr(&line, "probe_addr"),
    );
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    let tls = harness::client_tls(&[&ca]);

    let bad: Value = serde_json::from_str(
        r#"{"apiVersion": "fusioninfer.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "bad", "namespace": "team"},
            "spec": {"roles": [{"name": "decode", "componentType": "worker", "replicas": -1,
              "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm"}]}}}]}}"#,
    )
    .unwrap();
    let review = harness::review("CREATE", &bad, None);
    let denied = harness::post(
        webhook,
        tls.clone(),
        "/validate/inferenceservices",
        serde_json::to_vec(&review).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(denied.json()["response"]["allowed"], false);
    let logged = serving.wait_for("admission denied", 10);
    for part in [
        " INFO ",
        "kind=InferenceService",
        "object=team/bad",
        "operation=CREATE",
        "user=admin",
        "spec.roles[0].replicas: must be >= 0, got -1",
    ] {
        assert!(logged.contains(part), "{part:?} in {logged}");
    }

    let large = harness::post(
        webhook,
        tls.clone(),
        "/validate/inferenceservices",
        vec![b' '; 20001],
    )
    .await
    .unwrap();
    assert_eq!(large.status, 413);
    assert_eq!(
        large.text(),
        "the request body is larger than 20000 bytes, the limit set by --body-limit-bytes"
    );
    serving.wait_for("refused with 413", 10);

    // A body promised and never sent: the request times out.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(webhook).await.unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(tls)
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    stream
        .write_all(b"POST /validate/scaleviews HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{")
        .await
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("answered within the timeout")
        .unwrap();
    let answer = text(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer
            .ends_with("the request timed out after 300 ms, the limit set by --request-timeout-ms"),
        "{answer}"
    );
    let warned = serving.wait_for("not answered within --request-timeout-ms", 10);
    assert!(
        warned.contains(" WARN ") && warned.contains("timeout_ms=300"),
        "{warned}"
    );

    let (_, metrics) = harness::probe(probes, "/metrics").await.unwrap();
    for line in [
        r#"tandem_admission_requests_total{webhook="validate",kind="InferenceService",operation="CREATE",verdict="denied"} 1"#,
        r#"tandem_admission_requests_total{webhook="validate",kind="InferenceService",operation="unknown",verdict="too_large"} 1"#,
        r#"tandem_admission_requests_total{webhook="validate",kind="ScaleView",operation="unknown",verdict="timed_out"} 1"#,
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
}

/// Issue 25: `serve --dev` keeps the CA and serving certificate in
/// --cert-dir across restarts, signs a new serving certificate with the
/// kept CA when it is missing, and touches nothing when its port is taken.
#[test]
fn serve_dev_keeps_its_ca_across_restarts_and_a_failed_bind() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let files = || {
        ["ca.crt", "ca.key", "tls.crt", "tls.key"]
            .map(|f| std::fs::read(certs.join(f)).unwrap_or_default())
    };
    let start = |extra: &[&str]| {
        let mut args = vec!["--dev", "--cert-dir", certs.to_str().unwrap()];
        args.extend(extra);
        Serving::start(&args, tempfile::tempdir().unwrap())
    };
    let mut first = start(&[]);
    let written = first.wait_for("# dev CA", 20);
    assert!(
        written.contains("written to") && written.contains("(none there before)"),
        "{written}"
    );
    first.wait_for("serving admission webhooks", 20);
    let made = files();
    assert!(made.iter().all(|f| !f.is_empty()));

    // Its port is taken: nothing is written, the running one is left be.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--dev", "--cert-dir", certs.to_str().unwrap()])
        .args(["--listen", &port, "--probe-listen", "127.0.0.1:0"])
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains(&format!("error: could not listen on {port}: "))
            && text(&output.stderr).contains(&format!(
                "; the certificates in {} are left as they are",
                certs.display()
            )),
        "{}",
        text(&output.stderr)
    );
    assert!(
        !text(&output.stdout).contains("# dev CA"),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(files(), made, "nothing written on a failed bind");
    drop(first);

    let mut again = start(&[]);
    let kept = again.wait_for("# dev CA", 20);
    assert!(kept.contains("kept in"), "{kept}");
    again.wait_for("serving admission webhooks", 20);
    assert_eq!(files(), made, "the same CA and certificate after a restart");
    drop(again);

    std::fs::remove_file(certs.join("tls.crt")).unwrap();
    let mut renewed = start(&[]);
    let signed = renewed.wait_for("# dev CA", 20);
    assert!(
        signed.contains("dev CA kept in") && signed.contains("(tls.crt or tls.key is missing)"),
        "{signed}"
    );
    renewed.wait_for("serving admission webhooks", 20);
    let now = files();
    assert_eq!(now[0], made[0], "the CA, so the caBundle, is kept");
    verifies(&certs, "localhost").expect("the new certificate chains to the kept CA");
}

/// Issue 25: against an unreachable API server on 127.0.0.1, one log line
/// per attempt, naming the cluster and the error, with growing waits (it
/// was 736 lines in 30 s: one per watch per second); `/readyz` says which
/// cluster, what failed and since when.
#[tokio::test]
async fn serve_against_an_unreachable_cluster_logs_one_line_per_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, TWO_CLUSTERS).unwrap();
    let certs = dir.path().join("certs");
    let args = [
        "--dev",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--cert-dir",
        certs.to_str().unwrap(),
    ];
    let mut serving = Serving::start(&args, dir);
    let line = serving.wait_for("serving admission webhooks", 20);
    let probes = logged_addr(&line, "probe_addr");
    let started = Instant::now();
    serving.wait_for("cannot watch the cluster", 10);
    let seen = serving.collect(Duration::from_secs(8).saturating_sub(started.elapsed()));
    let attempts: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("cannot watch the cluster; retrying"))
        .collect();
    // Waits of about 1, 2 and 4 s: attempts at about 0, 1, 3 and 7 s.
    assert!(
        (3..=5).contains(&attempts.len()),
        "one line per attempt, not per watch: {seen:#?}"
    );
    for line in &attempts {
        assert!(
            line.contains("cluster=https://127.0.0.1:1/") && line.contains("error="),
            "{line}"
        );
    }
    assert!(seen.len() < 20, "{} lines in 8 s: {seen:#?}", seen.len());
    let (status, body) = harness::probe(probes, "/readyz").await.unwrap();
    assert_eq!(status, 503);
    assert!(
        body.starts_with("not ready: cannot watch cluster https://127.0.0.1:1/ since 20")
            && body.contains("Connect"),
        "{body}"
    );
}

/// Issue 25: before the caches have listed (here they never do: the API
/// server is unreachable), a check that needs other objects is skipped with
/// a warning, never answered "not found" from the empty cache.
#[tokio::test]
async fn serve_skips_cross_object_checks_with_a_warning_until_the_caches_load() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, TWO_CLUSTERS).unwrap();
    let certs = dir.path().join("certs");
    let args = [
        "--dev",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--cert-dir",
        certs.to_str().unwrap(),
    ];
    let mut serving = Serving::start(&args, dir);
    let line = serving.wait_for("serving admission webhooks", 20);
    let webhook = logged_addr(&line, "webhook_addr");
    serving.wait_for("cannot watch the cluster", 10);
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    let view = serde_json::json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
        "metadata": {"name": "decode", "namespace": "default"},
        "spec": {"replicas": 3, "targetRef": {"name": "multi-az", "componentType": "decoder"},
                 "scalePolicy": [{"group": "decode-a"}, {"group": "decode-b"}]}
    });
    let answer = harness::post(
        webhook,
        harness::client_tls(&[&ca]),
        "/validate/scaleviews",
        serde_json::to_vec(&harness::review("CREATE", &view, None)).unwrap(),
    )
    .await
    .unwrap()
    .json();
    let response = &answer["response"];
    assert_eq!(response["allowed"], true, "{answer}");
    let warnings = response["warnings"].to_string();
    assert!(
        warnings.contains(
            "spec.targetRef: not checked against the InferenceService: this webhook has no view of the cluster"
        ),
        "{warnings}"
    );
    assert!(!answer.to_string().contains("not found"), "{answer}");
}

/// Issue 25: `strategy: pd-disaggregation` with GIE's endpoint picker (the
/// default image) is warned about, alike by render and by the webhook.
#[tokio::test]
async fn pd_disaggregation_with_the_default_endpoint_picker_is_warned_about() {
    let warning = "spec.roles[2].strategy: pd-disaggregation configures llm-d's prefill/decode plugins, which exist only in llm-d's endpoint picker; the router runs registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0, which has none of them: run Tandem with --epp-image ghcr.io/llm-d/llm-d-inference-scheduler:v0.4.0 (or a compatible llm-d release; the chart's value endpointPicker.image), or give the router's template an \"epp\" container with that image";
    let example = "examples/inferenceservice/router.yaml";
    let rendered = tandem(&["render", "-o", "json", "-f", example]);
    assert!(rendered.status.success(), "{}", text(&rendered.stderr));
    assert!(
        text(&rendered.stderr).contains(&format!(
            "Warning: InferenceService default/qwen-pd-routed: {warning}"
        )),
        "{}",
        text(&rendered.stderr)
    );
    let llm_d = tandem(&[
        "render",
        "--epp-image",
        "ghcr.io/llm-d/llm-d-inference-scheduler:v0.4.0",
        "-f",
        example,
    ]);
    assert!(
        !text(&llm_d.stderr).contains("pd-disaggregation"),
        "{}",
        text(&llm_d.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let mut serving = Serving::start(&["--dev", "--cert-dir", certs.to_str().unwrap()], dir);
    let line = serving.wait_for("serving admission webhooks", 20);
    let webhook = logged_addr(&line, "webhook_addr");
    let ca = std::fs::read_to_string(certs.join("ca.crt")).unwrap();
    let mut service = harness::yaml_documents(&repo_path(example)).remove(0);
    service["metadata"]["namespace"] = "default".into();
    let answer = harness::post(
        webhook,
        harness::client_tls(&[&ca]),
        "/validate/inferenceservices",
        serde_json::to_vec(&harness::review("CREATE", &service, None)).unwrap(),
    )
    .await
    .unwrap()
    .json();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(
        answer["response"]["warnings"],
        serde_json::json!([warning]),
        "{answer}"
    );
}

/// Issue 35: a production replica (no --dev, no --admission-only) with no
/// cluster to reconcile refuses to start and says what to give; with
/// --admission-only it serves admission, as asked.
#[test]
fn serve_without_a_cluster_runs_only_when_told_to_run_no_controllers() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let made = tandem(&["certs", "--out-dir", certs.to_str().unwrap()]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--cert-dir", certs.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"])
        .env("KUBECONFIG", dir.path().join("no-kubeconfig"))
        .env("HOME", dir.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A replica that starts serving instead is the defect: stop it, and say so.
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let refused = child.wait_with_output().unwrap();
    assert_eq!(
        refused.status.code(),
        Some(2),
        "serve without a cluster did not exit 2 within 20 s: {}",
        text(&refused.stderr)
    );
    let said = text(&refused.stderr);
    assert!(
        said.contains("error: no cluster to run the controllers in: ")
            && said.contains("pass --admission-only to serve admission without controllers"),
        "{said}"
    );
    let mut admission = Serving::start(
        &["--admission-only", "--cert-dir", certs.to_str().unwrap()],
        dir,
    );
    admission.wait_for("no kubeconfig reachable: serving admission only", 20);
    admission.wait_for("serving admission webhooks", 20);
}
