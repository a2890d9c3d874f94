//! A band (a binding with `minRatio` and `maxRatio`, issue 54) as the
//! Target's ScaleView applies it. The group works the band out from its
//! Source and publishes it in its status (`status.bands`, by
//! [`super::inplace`]); the view's controller reads it here and keeps what its
//! autoscaler asked within it when it splits the view over its roles. So each
//! `/scale` has one writer: the autoscaler writes the view, the group writes
//! its own status, the view writes the roles.

use std::borrow::Borrow;

use super::ratio::{self, TargetBinding};
use crate::api::ResourceScalingGroup;
use crate::plan::scale_view::Band;

/// The band view `view` is kept in: the first group (by the order given,
/// the cache's by name) not being deleted whose bindings make the view a
/// band Target and whose status publishes that band. None when no group
/// binds the view so, or the group has not published its band yet (new,
/// or its Source unread): the view then applies what its autoscaler asked.
///
/// A band published for an older spec is still applied until the group
/// publishes the new one: dropping it meanwhile would let the view jump to
/// its autoscaler's count and back.
pub fn of_view<G: Borrow<ResourceScalingGroup>>(view: &str, groups: &[G]) -> Option<Band> {
    groups.iter().map(Borrow::borrow).find_map(|group| {
        if group.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let bindings = ratio::bindings(&group.spec).ok()?;
        let target = bindings.targets.iter().find(|t| is_band_on(t, view))?;
        let name = group
            .spec
            .scaling_strategy
            .inplace_config
            .as_ref()?
            .bindings
            .get(target.binding)?
            .name
            .as_str();
        let published = group
            .status
            .as_ref()?
            .bands
            .iter()
            .find(|b| b.target == name)?;
        let source = &group
            .spec
            .scaling_strategy
            .inplace_config
            .as_ref()?
            .bindings
            .get(bindings.source_binding)?
            .name;
        let high = target.max_ratio.unwrap_or(target.ratio);
        Some(Band {
            group: group.metadata.name.clone().unwrap_or_default(),
            min: published.min_replicas,
            max: published.max_replicas,
            why: format!(
                "ratio {} to {} of {source}={}",
                target.ratio.normalize(),
                high.normalize(),
                published.source_replicas
            ),
        })
    })
}

fn is_band_on(target: &TargetBinding, view: &str) -> bool {
    target.is_band()
        && target.endpoint.kind == "ScaleView"
        && target.endpoint.group() == "fusioninfer.io"
        && target.endpoint.name == view
        && target.endpoint.role.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resource_scaling_group::Band as Published;
    use serde_json::json;

    fn group(
        name: &str,
        target: &str,
        band: bool,
        published: Option<(i32, i32)>,
    ) -> ResourceScalingGroup {
        let binding = if band {
            json!({"name": target, "role": "Target", "minRatio": 2, "maxRatio": 4})
        } else {
            json!({"name": target, "role": "Target", "ratio": 2})
        };
        let mut group: ResourceScalingGroup = serde_json::from_value(json!({
            "apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
            "metadata": {"name": name, "namespace": "ai", "generation": 1},
            "spec": {
                "targetResources": [
                    {"name": "prefill-sv", "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"},
                    {"name": target, "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"}],
                "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                    {"name": "prefill-sv", "role": "Source"}, binding]}}
            }
        }))
        .expect("group parses");
        if let Some((min, max)) = published {
            group.status = Some(
                crate::api::resource_scaling_group::ResourceScalingGroupStatus {
                    bands: vec![Published {
                        target: target.to_owned(),
                        source_replicas: 2,
                        min_replicas: min,
                        max_replicas: max,
                    }],
                    ..Default::default()
                },
            );
        }
        group
    }

    #[test]
    fn a_view_takes_the_band_its_group_published() {
        let groups = [
            group("a-ratio", "other-sv", false, None),
            group("pd-band", "decode-sv", true, Some((4, 8))),
        ];
        assert_eq!(
            of_view("decode-sv", &groups),
            Some(Band {
                group: "pd-band".to_owned(),
                min: 4,
                max: 8,
                why: "ratio 2 to 4 of prefill-sv=2".to_owned(),
            })
        );
        // A view bound at a ratio, or not bound, or whose band is not
        // published yet, or whose group is going: no band.
        assert_eq!(of_view("other-sv", &groups), None);
        assert_eq!(of_view("prefill-sv", &groups), None);
        assert_eq!(
            of_view("decode-sv", &[group("pd-band", "decode-sv", true, None)]),
            None
        );
        let mut going = group("pd-band", "decode-sv", true, Some((4, 8)));
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-21T10:00:00Z".parse().expect("time"),
            ));
        assert_eq!(of_view("decode-sv", &[going]), None);
    }
}
