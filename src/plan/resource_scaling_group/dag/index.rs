//! The follow graph of every namespace, kept up to date group by group.
//!
//! [`super::check`] builds a namespace's graph from the list of its groups, so
//! its cost grows with the groups stored; the webhook would pay that on every
//! request. [`FollowIndex`] holds the edges each stored group contributes,
//! replaced by [`FollowIndex::upsert`] and dropped by [`FollowIndex::remove`]
//! as watch events arrive, and [`FollowIndex::check`] answers exactly what
//! [`super::check`] answers over the namespace's groups listed by name:
//! - the groups already targeting an endpoint come from a map by endpoint;
//! - a candidate's binding Source -> Target closes a cycle exactly when the
//!   Source is reachable from the Target over the other groups' edges (the
//!   candidate's own edges all leave its Source, so a path that reaches the
//!   Source first uses none of them). A breadth-first search from the Target
//!   visits only what follows it, whatever else the namespace holds, and
//!   takes each endpoint's edges in the order [`super::FollowGraph`] does
//!   (the latest group by name first), so the cycle it names is the same.

use std::collections::{BTreeSet, HashMap, VecDeque};

use kube::ResourceExt;

use super::{Cycle, findings};
use crate::api::Findings;
use crate::api::resource_scaling_group::{ResourceScalingGroup, ResourceScalingGroupSpec};
use crate::plan::resource_scaling_group::ratio::{Bindings, Endpoint, bindings};

/// Every namespace's follow graph, by namespace. Two indexes are equal when
/// they hold the same groups with the same bindings, however they got them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FollowIndex {
    namespaces: HashMap<String, NamespaceFollows>,
}

/// One namespace's groups and the edges they contribute. Only groups whose
/// bindings resolve are held (the others contribute no edge); no map keeps an
/// empty entry, so a namespace's state depends only on its groups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct NamespaceFollows {
    /// The resolved bindings of each group, by name.
    groups: HashMap<String, Bindings>,
    /// The bindings leaving each Source.
    from: HashMap<Endpoint, BTreeSet<Edge>>,
    /// The bindings arriving at each Target.
    to: HashMap<Endpoint, BTreeSet<Edge>>,
}

/// A binding of a stored group: its Target number `target` (position in
/// [`Bindings::targets`]) follows its Source. Ordered by group name, then
/// target: the order of [`super::FollowGraph`]'s edges when its groups are
/// listed by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Edge {
    group: String,
    target: usize,
}

impl FollowIndex {
    /// The index of `groups`, built from scratch.
    pub fn new<'a>(groups: impl IntoIterator<Item = &'a ResourceScalingGroup>) -> FollowIndex {
        let mut index = FollowIndex::default();
        for group in groups {
            index.upsert(group);
        }
        index
    }

    /// A group created or updated: its edges replace the ones its stored
    /// version contributed (none when its bindings do not resolve).
    pub fn upsert(&mut self, group: &ResourceScalingGroup) {
        self.upsert_spec(namespace_of(group), &group.name_any(), &group.spec);
    }

    /// [`FollowIndex::upsert`] of the group `name` in `namespace` with `spec`.
    pub fn upsert_spec(&mut self, namespace: &str, name: &str, spec: &ResourceScalingGroupSpec) {
        self.remove_named(namespace, name);
        if let Ok(resolved) = bindings(spec) {
            self.namespaces
                .entry(namespace.to_owned())
                .or_default()
                .insert(name, resolved);
        }
    }

    /// A group deleted: the edges it contributed go.
    pub fn remove(&mut self, group: &ResourceScalingGroup) {
        self.remove_named(namespace_of(group), &group.name_any());
    }

    /// [`FollowIndex::remove`] of the group `name` in `namespace`.
    pub fn remove_named(&mut self, namespace: &str, name: &str) {
        if let Some(follows) = self.namespaces.get_mut(namespace) {
            follows.remove(name);
            if follows.groups.is_empty() {
                self.namespaces.remove(namespace);
            }
        }
    }

    /// How many groups of `namespace` contribute to its graph (those whose
    /// bindings resolve).
    pub fn groups(&self, namespace: &str) -> usize {
        self.namespaces
            .get(namespace)
            .map_or(0, |follows| follows.groups.len())
    }

    /// What [`super::check`] answers for `candidate` (being created or
    /// updated in `namespace`) over the namespace's stored groups listed by
    /// name: a Target another binding already targets, a binding that closes
    /// a cycle. The candidate replaces the stored group of its name.
    pub fn check(&self, namespace: &str, candidate: (&str, &ResourceScalingGroupSpec)) -> Findings {
        let (name, spec) = candidate;
        let Ok(resolved) = bindings(spec) else {
            return Findings::default();
        };
        let Some(follows) = self.namespaces.get(namespace) else {
            let empty = NamespaceFollows::default();
            return empty.check(name, &resolved);
        };
        follows.check(name, &resolved)
    }
}

fn namespace_of(group: &ResourceScalingGroup) -> &str {
    group.metadata.namespace.as_deref().unwrap_or_default()
}

impl NamespaceFollows {
    fn insert(&mut self, name: &str, resolved: Bindings) {
        for (target, binding) in resolved.targets.iter().enumerate() {
            let edge = Edge {
                group: name.to_owned(),
                target,
            };
            self.from
                .entry(resolved.source.clone())
                .or_default()
                .insert(edge.clone());
            self.to
                .entry(binding.endpoint.clone())
                .or_default()
                .insert(edge);
        }
        self.groups.insert(name.to_owned(), resolved);
    }

    fn remove(&mut self, name: &str) {
        let Some(resolved) = self.groups.remove(name) else {
            return;
        };
        for (target, binding) in resolved.targets.iter().enumerate() {
            let edge = Edge {
                group: name.to_owned(),
                target,
            };
            unlink(&mut self.from, &resolved.source, &edge);
            unlink(&mut self.to, &binding.endpoint, &edge);
        }
    }

    fn check(&self, name: &str, candidate: &Bindings) -> Findings {
        findings(
            candidate,
            |endpoint| {
                let mut others: Vec<&str> = self
                    .to
                    .get(endpoint)
                    .into_iter()
                    .flatten()
                    .filter(|edge| edge.group != name)
                    .map(|edge| edge.group.as_str())
                    .collect();
                others.dedup();
                others
            },
            |target| self.cycle_closed_by(name, candidate, target),
        )
    }

    /// The cycle the candidate's binding of Target number `target` closes:
    /// a shortest chain from that Target back to the candidate's Source
    /// through the other groups, then the binding itself.
    fn cycle_closed_by<'a>(
        &'a self,
        name: &'a str,
        candidate: &'a Bindings,
        target: usize,
    ) -> Option<Cycle<'a>> {
        let start = &candidate.targets.get(target)?.endpoint;
        let source = &candidate.source;
        // Each endpoint reached, with the endpoint and group it was reached from.
        let mut reached_by: HashMap<&'a Endpoint, (&'a Endpoint, &'a str)> = HashMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(at) = queue.pop_front() {
            if at == source {
                let mut endpoints = vec![start];
                let mut groups = vec![name];
                let mut walked = at;
                while walked != start {
                    let &(from, group) = reached_by.get(walked)?;
                    endpoints.push(walked);
                    groups.push(group);
                    walked = from;
                }
                // Built backwards from the Source: [start, Source, ...,
                // start's successor], groups [candidate, ..., first step].
                endpoints[1..].reverse();
                endpoints.push(start);
                groups.reverse();
                return Some(Cycle { endpoints, groups });
            }
            // The latest group by name first, as FollowGraph walks its edges.
            for edge in self.from.get(at).into_iter().flatten().rev() {
                if edge.group == name {
                    continue;
                }
                let Some(next) = self
                    .groups
                    .get(&edge.group)
                    .and_then(|group| group.targets.get(edge.target))
                    .map(|binding| &binding.endpoint)
                else {
                    continue;
                };
                if next != start && !reached_by.contains_key(next) {
                    reached_by.insert(next, (at, edge.group.as_str()));
                    queue.push_back(next);
                }
            }
        }
        None
    }
}

/// Drops `edge` from the set at `endpoint`, and the set once empty.
fn unlink(edges: &mut HashMap<Endpoint, BTreeSet<Edge>>, endpoint: &Endpoint, edge: &Edge) {
    if let Some(set) = edges.get_mut(endpoint) {
        set.remove(edge);
        if set.is_empty() {
            edges.remove(endpoint);
        }
    }
}

/// Generated groups among a few Deployments and roles, for the property
/// tests here and in `watch::follows`.
#[cfg(test)]
pub(crate) mod generated {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    pub(crate) const NAMESPACES: [&str; 2] = ["ai", "ml"];
    /// Endpoints 0..4 are Deployments, 4 and 5 the roles of a RoleBasedGroup.
    pub(crate) const ENDPOINTS: usize = 6;
    pub(crate) const ROLES: [&str; 2] = ["prefill", "Decode"];

    /// What a generated group binds.
    #[derive(Clone, Debug)]
    pub(crate) enum Shape {
        /// `source` drives `targets` (repeats allowed: a second binding of
        /// one Target); `versioned` writes Deployments through a targetRef
        /// with another apiVersion.
        Inplace {
            source: usize,
            targets: Vec<usize>,
            versioned: bool,
        },
        GroupReplication,
        /// A binding names no declared resource.
        Unresolvable,
    }

    pub(crate) fn shape() -> impl Strategy<Value = Shape> {
        prop_oneof![
            8 => (0..ENDPOINTS, prop::collection::vec(0..ENDPOINTS, 1..4), any::<bool>())
                .prop_map(|(source, targets, versioned)| Shape::Inplace { source, targets, versioned }),
            1 => Just(Shape::GroupReplication),
            1 => Just(Shape::Unresolvable),
        ]
    }

    /// The binding name of endpoint `e`; its declaration is added to
    /// `resources` once.
    fn declare(e: usize, versioned: bool, resources: &mut Vec<Value>) -> String {
        if e >= 4 {
            if !resources.iter().any(|r| r["name"] == "rbg") {
                resources.push(json!({"name": "rbg", "apiVersion": "workloads.x-k8s.io/v1alpha1",
                    "kind": "RoleBasedGroup", "subResources": [{"roleName": ROLES[0]}, {"roleName": ROLES[1]}]}));
            }
            // Bindings match roles up to case.
            return ROLES[e - 4].to_lowercase();
        }
        let name = if versioned {
            format!("alias-d{e}")
        } else {
            format!("d{e}")
        };
        if !resources.iter().any(|r| r["name"] == name.as_str()) {
            resources.push(if versioned {
                json!({"name": name, "targetRef": {"apiVersion": "apps/v1beta2", "kind": "Deployment", "name": format!("d{e}")}})
            } else {
                json!({"name": name, "apiVersion": "apps/v1", "kind": "Deployment"})
            });
        }
        name
    }

    pub(crate) fn spec_of(shape: &Shape) -> ResourceScalingGroupSpec {
        let value = match shape {
            Shape::Inplace {
                source,
                targets,
                versioned,
            } => {
                let mut resources = Vec::new();
                let mut bindings = vec![
                    json!({"name": declare(*source, *versioned, &mut resources), "role": "Source"}),
                ];
                for target in targets {
                    bindings.push(json!({"name": declare(*target, *versioned, &mut resources),
                        "role": "Target", "ratio": 1}));
                }
                json!({"targetResources": resources,
                    "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": bindings}}})
            }
            Shape::GroupReplication => json!({
                "targetResources": [
                    {"name": "d0", "apiVersion": "apps/v1", "kind": "Deployment"},
                    {"name": "d1", "apiVersion": "apps/v1", "kind": "Deployment"}],
                "scalingStrategy": {"type": "GroupReplication", "groupConfig": {"groupName": "unit", "replicas": 1}}
            }),
            Shape::Unresolvable => json!({
                "targetResources": [{"name": "d0", "apiVersion": "apps/v1", "kind": "Deployment"}],
                "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                    {"name": "d0", "role": "Source"}, {"name": "d1", "role": "Target", "ratio": 1}]}}
            }),
        };
        serde_json::from_value(value).expect("generated spec parses")
    }

    pub(crate) fn group_of(
        namespace: &str,
        name: &str,
        spec: &ResourceScalingGroupSpec,
    ) -> ResourceScalingGroup {
        let mut group = ResourceScalingGroup::new(name, spec.clone());
        group.metadata.namespace = Some(namespace.to_owned());
        group
    }

    /// A group under review: new (`rsg-5`) or an update of a stored one.
    pub(crate) fn candidate() -> impl Strategy<Value = (usize, usize, Shape)> {
        (0..NAMESPACES.len(), 0..6usize, shape())
    }
}

#[cfg(test)]
mod tests {
    use super::generated::*;
    use super::*;
    use crate::plan::resource_scaling_group::dag::check;
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    /// One change to the stored groups: group `name` of namespace
    /// `namespace` created or updated with `Some(shape)`, deleted with `None`.
    #[derive(Clone, Debug)]
    struct Change {
        namespace: usize,
        name: usize,
        shape: Option<Shape>,
    }

    fn change() -> impl Strategy<Value = Change> {
        (
            0..NAMESPACES.len(),
            0..5usize,
            prop::option::weighted(0.8, shape()),
        )
            .prop_map(|(namespace, name, shape)| Change {
                namespace,
                name,
                shape,
            })
    }

    #[test]
    fn an_index_answers_as_check_on_the_examples() {
        // check's own examples, through an index: the cycle named alike.
        let chain: Vec<ResourceScalingGroup> = (0..100)
            .map(|i| {
                let shape = Shape::Inplace {
                    source: 0,
                    targets: vec![1],
                    versioned: false,
                };
                let mut spec = serde_json::to_value(spec_of(&shape)).expect("serialises");
                spec["targetResources"][0]["name"] = json!(format!("n{i}"));
                spec["targetResources"][1]["name"] = json!(format!("n{}", i + 1));
                spec["scalingStrategy"]["inplaceConfig"]["bindings"][0]["name"] =
                    json!(format!("n{i}"));
                spec["scalingStrategy"]["inplaceConfig"]["bindings"][1]["name"] =
                    json!(format!("n{}", i + 1));
                let spec = serde_json::from_value(spec).expect("parses");
                group_of("ai", &format!("rsg-{i:03}"), &spec)
            })
            .collect();
        let index = FollowIndex::new(&chain);
        assert_eq!(index.groups("ai"), 100);
        assert_eq!(index.groups("other"), 0);
        let mut back = serde_json::to_value(&chain[0].spec).expect("serialises");
        back["targetResources"][0]["name"] = json!("n100");
        back["targetResources"][1]["name"] = json!("n0");
        back["scalingStrategy"]["inplaceConfig"]["bindings"][0]["name"] = json!("n100");
        back["scalingStrategy"]["inplaceConfig"]["bindings"][1]["name"] = json!("n0");
        let back: ResourceScalingGroupSpec = serde_json::from_value(back).expect("parses");
        let findings = index.check("ai", ("rsg-back", &back));
        let stored: Vec<(String, ResourceScalingGroupSpec)> = chain
            .iter()
            .map(|g| (g.name_any(), g.spec.clone()))
            .collect();
        assert_eq!(findings, check(&stored, ("rsg-back", &back)));
        assert!(
            findings.violations[0]
                .reason
                .starts_with("n0 -> n1 -> n2 -> "),
            "{findings:?}"
        );
        // Another namespace holds none of it.
        assert!(index.check("other", ("rsg-back", &back)).is_allowed());
        // Removing one link of the chain breaks the cycle, and the index is
        // as if that group had never been stored.
        let mut cut = index.clone();
        cut.remove(&chain[50]);
        assert!(cut.check("ai", ("rsg-back", &back)).is_allowed());
        let rest: Vec<&ResourceScalingGroup> =
            chain.iter().filter(|g| g.name_any() != "rsg-050").collect();
        assert_eq!(cut, FollowIndex::new(rest));
        assert_ne!(cut, index);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Random creates, updates and deletes of groups among a few
        /// Deployments and roles (chains, cycles, second Target bindings,
        /// groups that bind nothing or do not resolve): after each, the index
        /// kept up to date equals one rebuilt from the stored groups, and it
        /// answers every candidate as `check` does over the stored groups
        /// listed by name (as the webhook's cache listed them).
        #[test]
        fn an_index_kept_up_to_date_equals_a_rebuilt_one_and_answers_as_check(
            changes in prop::collection::vec(change(), 1..30),
            candidates in prop::collection::vec(candidate(), 3),
        ) {
            let mut index = FollowIndex::default();
            let mut stored: BTreeMap<(&str, String), ResourceScalingGroupSpec> = BTreeMap::new();
            for change in &changes {
                let namespace = NAMESPACES[change.namespace];
                let name = format!("rsg-{}", change.name);
                match &change.shape {
                    Some(shape) => {
                        let spec = spec_of(shape);
                        index.upsert(&group_of(namespace, &name, &spec));
                        stored.insert((namespace, name), spec);
                    }
                    None => {
                        index.remove(&group_of(namespace, &name, &spec_of(&Shape::GroupReplication)));
                        stored.remove(&(namespace, name));
                    }
                }
                let groups: Vec<ResourceScalingGroup> = stored
                    .iter()
                    .map(|((namespace, name), spec)| group_of(namespace, name, spec))
                    .collect();
                prop_assert_eq!(&index, &FollowIndex::new(&groups));
                for (namespace, name, shape) in &candidates {
                    let namespace = NAMESPACES[*namespace];
                    let name = format!("rsg-{name}");
                    let spec = spec_of(shape);
                    // By name, as the webhook's cache listed them.
                    let listed: Vec<(String, ResourceScalingGroupSpec)> = stored
                        .iter()
                        .filter(|((ns, _), _)| *ns == namespace)
                        .map(|((_, name), spec)| (name.clone(), spec.clone()))
                        .collect();
                    prop_assert_eq!(
                        index.check(namespace, (&name, &spec)),
                        check(&listed, (&name, &spec)),
                        "{} {} {:?} over {:?}", namespace, name, shape, listed.iter().map(|(n, _)| n).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}
