//! Issue 16, item 8: what Kubernetes would refuse later is refused now. A
//! role's template is checked the way the API server will check the pods
//! made from it, at admission and in `tandem render` (exit 1), each denial
//! naming the path inside the template; `render` also refuses unknown fields
//! of Tandem's own kinds, as the API server's strict field validation does.
//! (Every example is still admitted: `tests/unit/artifacts.rs`,
//! `every_example_fits_the_crds_and_is_admitted`.)

use std::process::Output;

use serde_json::{Value, json};
use tandem::admission::{self, Kind, lookup};

const AT: &str = "spec.roles[0].template.spec";

fn service(template: Value) -> Value {
    json!({
        "apiVersion": "fusioninfer.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "svc", "namespace": "team"},
        "spec": {"roles": [{"name": "w", "componentType": "worker", "template": template}]},
    })
}

/// A template with one container `vllm`, changed by `edit`.
fn container_with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut container = json!({"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
        "ports": [{"containerPort": 8000, "name": "http"}]});
    edit(&mut container);
    json!({"spec": {"containers": [container]}})
}

fn resources(resources: Value) -> Value {
    container_with(|c| c["resources"] = resources)
}

/// Template mistakes, each with the denial it must get (a prefix of it).
fn mistakes() -> Vec<(&'static str, Value, String)> {
    let c = format!("{AT}.containers[0]");
    vec![
        (
            "imagePullPolicy",
            container_with(|c| c["imagePullPolicy"] = json!("Sometimes")),
            format!(
                "{c}.imagePullPolicy: unsupported value \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\""
            ),
        ),
        (
            "a quantity that does not parse",
            resources(json!({"requests": {"cpu": "lots"}})),
            format!("{c}.resources.requests.cpu: invalid quantity \"lots\""),
        ),
        (
            "a negative quantity",
            resources(json!({"requests": {"cpu": "-1"}})),
            format!("{c}.resources.requests.cpu: must be >= 0, got \"-1\""),
        ),
        (
            "a limit below its request",
            resources(json!({"requests": {"memory": "16Gi"}, "limits": {"memory": "8Gi"}})),
            format!(
                "{c}.resources.requests.memory: must be less than or equal to limits.memory (8Gi), got 16Gi"
            ),
        ),
        (
            "a fractional GPU",
            resources(json!({"limits": {"nvidia.com/gpu": "0.5"}})),
            format!(
                "{c}.resources.limits.nvidia.com/gpu: must be a whole number: nvidia.com/gpu is an extended resource, got \"0.5\""
            ),
        ),
        (
            "GPU request below its limit",
            resources(json!({"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 4}})),
            format!(
                "{c}.resources.requests.nvidia.com/gpu: must equal limits.nvidia.com/gpu (4), got 2"
            ),
        ),
        (
            "GPU request without a limit",
            resources(json!({"requests": {"nvidia.com/gpu": 1}})),
            format!("{c}.resources.limits.nvidia.com/gpu: required"),
        ),
        (
            "huge pages overcommitted",
            resources(
                json!({"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "2Gi"}}),
            ),
            format!("{c}.resources.requests.hugepages-2Mi: must equal limits.hugepages-2Mi (2Gi)"),
        ),
        (
            "pod restartPolicy",
            json!({"spec": {"restartPolicy": "Sometimes", "containers": [{"name": "vllm", "image": "v"}]}}),
            format!("{AT}.restartPolicy: unsupported value \"Sometimes\""),
        ),
        (
            "restartPolicy on a container",
            container_with(|c| c["restartPolicy"] = json!("Always")),
            format!("{c}.restartPolicy: may only be set on init containers"),
        ),
        (
            "init container restartPolicy",
            json!({"spec": {
                "initContainers": [{"name": "fetch", "image": "busybox", "restartPolicy": "OnFailure"}],
                "containers": [{"name": "vllm", "image": "v"}]}}),
            format!("{AT}.initContainers[0].restartPolicy: unsupported value \"OnFailure\""),
        ),
        (
            "a container named like an init container",
            json!({"spec": {
                "initContainers": [{"name": "vllm", "image": "busybox"}],
                "containers": [{"name": "vllm", "image": "v"}]}}),
            format!("{AT}.containers[0].name: duplicate container name \"vllm\""),
        ),
        (
            "port protocol",
            container_with(|c| c["ports"][0]["protocol"] = json!("HTTP")),
            format!(
                "{c}.ports[0].protocol: unsupported value \"HTTP\": supported values: \"TCP\", \"UDP\", \"SCTP\""
            ),
        ),
        (
            "port name with capitals",
            container_with(|c| c["ports"][0]["name"] = json!("HTTP_PORT")),
            format!("{c}.ports[0].name: must contain only lowercase letters, digits and '-'"),
        ),
        (
            "port name too long",
            container_with(|c| c["ports"][0]["name"] = json!("metrics-endpoint")),
            format!("{c}.ports[0].name: must be 1 to 15 characters"),
        ),
        (
            "duplicate port name",
            container_with(
                |c| c["ports"] = json!([{"containerPort": 8000, "name": "http"}, {"containerPort": 8001, "name": "http"}]),
            ),
            format!("{c}.ports[1].name: duplicate port name \"http\""),
        ),
        (
            "host port out of range",
            container_with(|c| c["ports"][0]["hostPort"] = json!(70000)),
            format!("{c}.ports[0].hostPort: must be between 1 and 65535, got 70000"),
        ),
        (
            "container name",
            container_with(|c| c["name"] = json!("VLLM")),
            format!("{c}.name: must be a DNS-1123 label"),
        ),
        (
            "environment variable name",
            container_with(|c| c["env"] = json!([{"name": "HF=TOKEN", "value": "x"}])),
            format!("{c}.env[0].name: must consist of printable ASCII characters other than '='"),
        ),
        (
            "value and valueFrom",
            container_with(|c| {
                c["env"] = json!([{"name": "TOKEN", "value": "x",
                    "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}])
            }),
            format!("{c}.env[0].valueFrom: may not be specified when `value` is not empty"),
        ),
    ]
}

fn admission_denial(object: &Value) -> Option<String> {
    admission::admit(Kind::InferenceService, "team", object, None, &lookup::Blind)
        .err()
        .map(|findings| findings.denial_message())
}

fn render(yaml: &str) -> Output {
    harness::render_stdin(yaml.as_bytes())
}

#[test]
fn template_mistakes_are_denied_at_admission_with_the_path_inside_the_template() {
    for (case, template, expected) in mistakes() {
        let denial = admission_denial(&service(template))
            .unwrap_or_else(|| panic!("{case}: admitted, expected {expected:?}"));
        assert!(
            denial.split("; ").any(|v| v.starts_with(&expected)),
            "{case}: expected {expected:?} in {denial:?}"
        );
    }
}

#[test]
fn template_mistakes_make_render_exit_1_with_the_path() {
    for (case, template, expected) in mistakes() {
        let output = render(&serde_norway::to_string(&service(template)).unwrap());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{case}: {stderr}");
        let line = format!("InferenceService team/svc: {expected}");
        assert!(
            stderr.lines().any(|l| l.starts_with(&line)),
            "{case}: expected a line starting {line:?} in {stderr}"
        );
    }
}

#[test]
fn correct_templates_are_admitted() {
    for template in [
        resources(
            json!({"requests": {"cpu": "500m", "memory": "16Gi", "nvidia.com/gpu": 8},
                         "limits": {"memory": "16Gi", "nvidia.com/gpu": "8"}}),
        ),
        resources(json!({"limits": {"nvidia.com/gpu": 1, "cpu": "1e3"}})),
        container_with(|c| {
            c["imagePullPolicy"] = json!("IfNotPresent");
            c["ports"][0]["protocol"] = json!("TCP");
            c["env"] = json!([{"name": "my.var-1", "value": "x"}, {"name": "EMPTY", "value": "",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
        }),
        json!({"spec": {"restartPolicy": "Always",
            "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
            "containers": [{"name": "vllm", "image": "v"}]}}),
    ] {
        assert_eq!(
            admission_denial(&service(template.clone())),
            None,
            "{template}"
        );
    }
}

/// The issue's new user: a typo, a pull policy that does not exist and a CPU
/// of "lots" rendered with exit 0 and one replica; now each is named.
#[test]
fn the_issue_example_is_refused_by_render_with_every_path() {
    let output = render(
        "apiVersion: fusioninfer.io/v1alpha1\nkind: InferenceService\nmetadata: {name: chat}\n\
         spec:\n  roles:\n  - name: worker\n    componentType: worker\n    replicsa: 3\n    \
         template:\n      spec:\n        containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.11.0\n          \
         imagePullPolicy: Sometimes\n          resources: {requests: {cpu: lots}}\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for expected in [
        "InferenceService default/chat: spec.roles[0].replicsa: unknown field (did you mean \"replicas\"?)",
        "InferenceService default/chat: spec.roles[0].template.spec.containers[0].imagePullPolicy: unsupported value \"Sometimes\"",
        "InferenceService default/chat: spec.roles[0].template.spec.containers[0].resources.requests.cpu: invalid quantity \"lots\"",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(expected)),
            "expected {expected:?} in {stderr}"
        );
    }
}

#[test]
fn render_refuses_unknown_fields_of_every_tandem_kind() {
    let world = "apiVersion: fusioninfer.io/v1alpha1\nkind: ScaleView\nmetadata: {name: v}\n\
                 spec:\n  targetRef: {name: svc, componentType: decoder}\n  scalePolicy:\n  - group: d\n    constraint: {max: 2}\n\
                 ---\napiVersion: resourcescalinggroup.com/v1\nkind: ResourceScalingGroup\nmetadata: {name: g}\n\
                 spec:\n  targetResources: [{name: web, apiVersion: apps/v1, kind: Deployment}]\n  \
                 scalingStrategy: {type: GroupReplication, groupConfig: {groupNamePrefix: g, replica: 2}}\n";
    let output = render(world);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for expected in [
        "ScaleView default/v: spec.scalePolicy[0].constraint: unknown field (did you mean \"constraints\"?)",
        "ResourceScalingGroup default/g: spec.scalingStrategy.groupConfig.replica: unknown field (did you mean \"replicas\"?)",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(expected)),
            "expected {expected:?} in {stderr}"
        );
    }
}
