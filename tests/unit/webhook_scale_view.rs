//! ScaleView locks at the webhook over TLS: an InferenceService update
//! against the locks in the stored object's status, a new view that starts at
//! its groups' current replicas, and a view on another view's groups refused
//! with 409 Conflict.

use std::sync::Arc;

use harness::*;
use serde_json::{Value, json};
use tandem::admission::{self, Kind, lookup};

const SPOT: &str = "examples/scaleview/decode-ondemand-spot.yaml";

/// The spot service as stored: admitted, decode-ondemand at 2 and decode-spot
/// at 2, both locked by spot-decode-sv (decode-spot's lock at 3: the view
/// decided 3 and its write has not landed yet).
fn locked_service() -> Value {
    let object = yaml_documents(&repo_path(SPOT)).remove(0);
    let (mut service, _) = admission::admit(
        Kind::InferenceService,
        "default",
        &object,
        None,
        &lookup::Blind,
    )
    .unwrap();
    service["metadata"]["namespace"] = json!("default");
    service["metadata"]["uid"] = json!("svc-uid");
    service["spec"]["roles"][1]["replicas"] = json!(2);
    service["spec"]["roles"][2]["replicas"] = json!(2);
    service["status"] = json!({"scaleViews": [{"name": "spot-decode-sv", "uid": "view-uid", "generation": 4,
        "roleReplicas": [{"role": "decode-ondemand", "replicas": 2}, {"role": "decode-spot", "replicas": 3}]}]});
    service
}

fn as_user(mut review: Value, username: &str) -> Value {
    review["request"]["userInfo"]["username"] = json!(username);
    review
}

#[tokio::test]
async fn locked_roles_change_only_through_their_view() {
    let test = start_server(|_| {}).await;
    let old = locked_service();
    let edit = |change: &dyn Fn(&mut Value)| {
        let mut new = old.clone();
        new.as_object_mut().unwrap().remove("status");
        change(&mut new);
        review("UPDATE", &new, Some(&old))
    };
    let locked = "spec.roles[2].replicas: is locked by ScaleView spot-decode-sv at 3 replicas; scale through the ScaleView (kubectl scale scaleview/spot-decode-sv --replicas=N)";
    // (what, review, denial)
    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        (
            "an unlocked role",
            edit(&|s| s["spec"]["roles"][0]["replicas"] = json!(3)),
            None,
        ),
        (
            "a locked role to another value",
            edit(&|s| s["spec"]["roles"][2]["replicas"] = json!(5)),
            Some(locked),
        ),
        (
            "a locked role to the lock's value",
            edit(&|s| s["spec"]["roles"][2]["replicas"] = json!(3)),
            None,
        ),
        (
            "the removal of a locked role",
            edit(&|s| {
                s["spec"]["roles"].as_array_mut().unwrap().remove(1);
            }),
            Some(
                "spec.roles: role \"decode-ondemand\" is locked by ScaleView spot-decode-sv; delete the ScaleView first",
            ),
        ),
        (
            "a locked role, by Tandem's service account",
            as_user(
                edit(&|s| s["spec"]["roles"][2]["replicas"] = json!(5)),
                admission::DEFAULT_SERVICE_ACCOUNT,
            ),
            None,
        ),
    ];
    for (what, review, denial) in cases {
        let response = admit(&test, "/validate/inferenceservices", &review).await;
        match denial {
            None => assert_eq!(response["allowed"], true, "{what}: {response}"),
            Some(message) => {
                assert_eq!(response["allowed"], false, "{what}");
                assert_eq!(response["status"]["message"], message, "{what}");
                assert_eq!(response["status"]["code"], 422, "{what}");
            }
        }
    }
    // Another service account is not Tandem.
    let other = as_user(
        edit(&|s| s["spec"]["roles"][2]["replicas"] = json!(5)),
        "system:serviceaccount:default:ci",
    );
    let response = admit(&test, "/validate/inferenceservices", &other).await;
    assert_eq!(response["allowed"], false);
}

#[tokio::test]
async fn tandems_service_account_is_a_flag() {
    let test =
        start_server(|o| o.service_account = "system:serviceaccount:ops:tandem".to_owned()).await;
    let old = locked_service();
    let mut new = old.clone();
    new["spec"]["roles"][2]["replicas"] = json!(5);
    let default_account = as_user(
        review("UPDATE", &new, Some(&old)),
        admission::DEFAULT_SERVICE_ACCOUNT,
    );
    assert_eq!(
        admit(&test, "/validate/inferenceservices", &default_account).await["allowed"],
        false
    );
    let configured = as_user(
        review("UPDATE", &new, Some(&old)),
        "system:serviceaccount:ops:tandem",
    );
    assert_eq!(
        admit(&test, "/validate/inferenceservices", &configured).await["allowed"],
        true
    );
}

#[tokio::test]
async fn a_new_view_starts_at_its_groups_current_replicas() {
    let mut service = yaml_documents(&repo_path(SPOT)).remove(0);
    service["metadata"]["namespace"] = json!("default");
    service["metadata"]["uid"] = json!("svc-uid");
    service["spec"]["roles"][1]["replicas"] = json!(2);
    service["spec"]["roles"][2]["replicas"] = json!(1);
    let lookup = Arc::new(lookup::Objects::new([&service]));
    let test = start_server_seeing(|_| {}, lookup).await;
    let view = yaml_documents(&repo_path(SPOT)).remove(1);
    let response = admit(&test, "/mutate/scaleviews", &review("CREATE", &view, None)).await;
    assert_eq!(response["allowed"], true, "{response}");
    let patched = apply_wire_patch(&view, &response);
    assert_eq!(patched["spec"]["replicas"], 3, "2 on demand + 1 spot");
    assert_eq!(
        patched["metadata"]["annotations"]["fusioninfer.io/target-uid"],
        "svc-uid"
    );
    // Replicas the user set are kept.
    let mut set = view.clone();
    set["spec"]["replicas"] = json!(1);
    let response = admit(&test, "/mutate/scaleviews", &review("CREATE", &set, None)).await;
    assert_eq!(apply_wire_patch(&set, &response)["spec"]["replicas"], 1);
    // An update is not re-seeded from the target.
    let response = admit(
        &test,
        "/mutate/scaleviews",
        &review("UPDATE", &view, Some(&view)),
    )
    .await;
    assert!(apply_wire_patch(&view, &response)["spec"]["replicas"].is_null());

    // Without a view of the cluster the replicas stay unset.
    let blind = start_server(|_| {}).await;
    let response = admit(&blind, "/mutate/scaleviews", &review("CREATE", &view, None)).await;
    let patched = apply_wire_patch(&view, &response);
    assert!(patched["spec"]["replicas"].is_null());
    assert!(patched["metadata"]["annotations"].is_null());
}

#[tokio::test]
async fn a_view_on_a_locked_group_is_a_conflict() {
    let service = locked_service();
    let lookup = Arc::new(lookup::Objects::new([&service]));
    let test = start_server_seeing(|_| {}, lookup).await;
    let other = json!({
        "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView",
        "metadata": {"name": "spot-only-sv", "namespace": "default"},
        "spec": {"targetRef": {"name": "spot-decode", "componentType": "decoder"},
            "scalePolicy": [{"group": "decode-spot"}]},
    });
    let response = admit(
        &test,
        "/validate/scaleviews",
        &review("CREATE", &other, None),
    )
    .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 409);
    assert_eq!(response["status"]["reason"], "Conflict");
    assert_eq!(
        response["status"]["message"],
        "spec.scalePolicy[0].group: role \"decode-spot\" of spot-decode is locked by ScaleView spot-decode-sv; delete that view first"
    );
    // An update of a view already in conflict (it got in without the
    // webhook) is not refused: it must be able to drop its finalizer.
    let response = admit(
        &test,
        "/validate/scaleviews",
        &review("UPDATE", &other, Some(&other)),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");
    // The holder itself is not in conflict with its own lock.
    let mut holder = yaml_documents(&repo_path(SPOT)).remove(1);
    holder["metadata"]["namespace"] = json!("default");
    holder["metadata"]["uid"] = json!("view-uid");
    let response = admit(
        &test,
        "/validate/scaleviews",
        &review("UPDATE", &holder, Some(&holder)),
    )
    .await;
    assert_eq!(response["allowed"], true, "{response}");
}

/// `kubectl scale rsg/NAME` over TLS: the API server sends the group
/// webhook an autoscaling/v1 Scale (the rule lists
/// `resourcescalinggroups/scale`). A GroupReplication group's new replicas
/// are held to its own rules; an InplaceScaling group is refused.
#[tokio::test]
async fn a_group_scale_is_answered_by_the_group_webhook() {
    let group = |file: &str| {
        let mut group =
            yaml_documents(&repo_path(&format!("examples/resourcescalinggroup/{file}")))
                .into_iter()
                .find(|o| o["kind"] == "ResourceScalingGroup")
                .expect("a group");
        group["metadata"]["namespace"] = json!("ai");
        group
    };
    let (replicated, inplace) = (
        group("group-replication.yaml"),
        group("inplace-scaling.yaml"),
    );
    let lookup = Arc::new(lookup::Objects::new([&replicated, &inplace]));
    let test = start_server_seeing(|_| {}, lookup).await;
    let group_scale = |group: &Value, replicas: i64| {
        let mut review = scale_review(
            group["metadata"]["name"].as_str().unwrap(),
            "ai",
            replicas,
            1,
        );
        for field in ["resource", "requestResource"] {
            review["request"][field] = json!({"group": "resourcescalinggroup.com", "version": "v1", "resource": "resourcescalinggroups"});
        }
        review
    };
    let path = "/validate/resourcescalinggroups";
    let response = admit(&test, path, &group_scale(&replicated, 3)).await;
    assert_eq!(response["allowed"], true, "{response}");
    let response = admit(&test, path, &group_scale(&replicated, 0)).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("spec.replicas: must be >= 1"),
        "{response}"
    );
    let response = admit(&test, path, &group_scale(&inplace, 2)).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("is InplaceScaling"),
        "{response}"
    );
}
