//! The follow graph of a namespace (DESIGN.md §1.2): one node per endpoint (a
//! resource, or a role within one), one edge Source -> Target per binding of
//! every InplaceScaling ResourceScalingGroup. GroupReplication groups bind
//! nothing and add no edges.
//!
//! Nodes are endpoints as [`Endpoint`] compares them: API group, kind, name and
//! role, not the version, so `apps/v1` and `apps/v1beta2` Deployments named
//! `prefill` are one node.
//!
//! Two rules keep scaling well defined, and [`check`] enforces them for the
//! group being created or updated, against every other group of its namespace:
//! - the graph stays acyclic: nothing follows itself through any chain;
//! - an endpoint is the Target of at most one binding: it follows one Source.
//!
//! The graph is built once and its strongly connected components computed
//! once (iteratively, so a chain of any length cannot overflow the stack); a
//! binding lies on a cycle exactly when both its ends are in one component, so
//! only a denied binding pays for a path search, to name the cycle.
//!
//! The webhook does not rebuild that graph per request: [`FollowIndex`] keeps
//! every namespace's edges, updated group by group from the watch events, and
//! answers what [`check`] answers at a cost that does not grow with the
//! number of groups stored.

mod index;

pub use index::FollowIndex;
#[cfg(test)]
pub(crate) use index::generated;

use std::collections::{HashMap, VecDeque};
use std::fmt;

use petgraph::Direction;
use petgraph::algo::kosaraju_scc;
use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::api::Findings;
use crate::api::resource_scaling_group::ResourceScalingGroupSpec;
use crate::plan::resource_scaling_group::ratio::{BINDINGS_FIELD, Bindings, Endpoint, bindings};

/// One binding as an edge: in the group at `group` (its position in the list
/// the graph was built from), Target number `target` (its position in
/// [`Bindings::targets`]) follows that group's Source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Follow {
    pub group: usize,
    pub target: usize,
}

/// The follow graph over a list of groups, each given as (name, bindings).
pub struct FollowGraph<'a> {
    names: Vec<&'a str>,
    graph: DiGraph<&'a Endpoint, Follow>,
    nodes: HashMap<&'a Endpoint, NodeIndex>,
    /// `edges[group][target]`: the edge of each binding.
    edges: Vec<Vec<EdgeIndex>>,
    /// Strongly connected components in reverse topological order.
    components: Vec<Vec<NodeIndex>>,
    /// The component of each node, by node index.
    component_of: Vec<usize>,
}

/// A chain of bindings that comes back to where it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle<'a> {
    /// The endpoints along the chain; the last is the first again.
    pub endpoints: Vec<&'a Endpoint>,
    /// The group of each step: `groups[i]` binds `endpoints[i + 1]` to `endpoints[i]`.
    pub groups: Vec<&'a str>,
}

/// `prefill -> decode -> prefill via rsg-a, rsg-b`.
impl fmt::Display for Cycle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path: Vec<String> = self.endpoints.iter().map(ToString::to_string).collect();
        write!(f, "{} via {}", path.join(" -> "), self.groups.join(", "))
    }
}

impl<'a> FollowGraph<'a> {
    pub fn new(groups: &[(&'a str, &'a Bindings)]) -> Self {
        let mut graph = DiGraph::new();
        let mut nodes: HashMap<&'a Endpoint, NodeIndex> = HashMap::new();
        let mut node = |graph: &mut DiGraph<&'a Endpoint, Follow>, endpoint: &'a Endpoint| {
            *nodes
                .entry(endpoint)
                .or_insert_with(|| graph.add_node(endpoint))
        };
        let mut edges = Vec::with_capacity(groups.len());
        for (group, (_, bindings)) in groups.iter().enumerate() {
            let source = node(&mut graph, &bindings.source);
            let mut group_edges = Vec::with_capacity(bindings.targets.len());
            for (target, binding) in bindings.targets.iter().enumerate() {
                let followed_by = node(&mut graph, &binding.endpoint);
                group_edges.push(graph.add_edge(source, followed_by, Follow { group, target }));
            }
            edges.push(group_edges);
        }
        let components = kosaraju_scc(&graph);
        let mut component_of = vec![0; graph.node_count()];
        for (c, component) in components.iter().enumerate() {
            for n in component {
                component_of[n.index()] = c;
            }
        }
        FollowGraph {
            names: groups.iter().map(|(name, _)| *name).collect(),
            graph,
            nodes,
            edges,
            components,
            component_of,
        }
    }

    /// The bindings whose Target is `endpoint`, in list order (at most one in
    /// a valid namespace).
    pub fn targeting(&self, endpoint: &Endpoint) -> Vec<Follow> {
        let Some(&node) = self.nodes.get(endpoint) else {
            return Vec::new();
        };
        let mut follows: Vec<Follow> = self
            .graph
            .edges_directed(node, Direction::Incoming)
            .map(|edge| *edge.weight())
            .collect();
        follows.sort();
        follows
    }

    /// Every endpoint, Sources before the Targets that follow them; or a
    /// cycle, when there is no such order.
    pub fn topological(&self) -> Result<Vec<&'a Endpoint>, Cycle<'a>> {
        let mut order = Vec::with_capacity(self.graph.node_count());
        for component in self.components.iter().rev() {
            if let Some(cycle) = component.iter().find_map(|&n| self.cycle_from(n)) {
                return Err(cycle);
            }
            order.extend(component.iter().map(|&n| self.graph[n]));
        }
        Ok(order)
    }

    /// The cycle the binding `follow` closes, if it lies on one: the chain
    /// starts at its Target and ends with `follow` itself.
    pub fn cycle_closed_by(&self, follow: Follow) -> Option<Cycle<'a>> {
        let edge = *self.edges.get(follow.group)?.get(follow.target)?;
        let (source, target) = self.graph.edge_endpoints(edge)?;
        // A self-loop (Source = Target) is trivially inside one component,
        // and its path back is empty.
        if self.component_of[source.index()] != self.component_of[target.index()] {
            return None;
        }
        let mut steps = self.path(target, source)?;
        steps.push(Step {
            from: source,
            to: target,
            group: follow.group,
        });
        Some(self.cycle(&steps))
    }

    /// A cycle through one of `node`'s outgoing bindings, if any.
    fn cycle_from(&self, node: NodeIndex) -> Option<Cycle<'a>> {
        let component = self.component_of[node.index()];
        self.graph
            .edges(node)
            .filter(|edge| self.component_of[edge.target().index()] == component)
            .find_map(|edge| self.cycle_closed_by(*edge.weight()))
    }

    /// A shortest chain of bindings from `from` to `to` inside their
    /// component (breadth first), or None when `to` is not reachable there.
    fn path(&self, from: NodeIndex, to: NodeIndex) -> Option<Vec<Step>> {
        let component = self.component_of[from.index()];
        let mut reached_by: HashMap<NodeIndex, Step> = HashMap::new();
        let mut queue = VecDeque::from([from]);
        while let Some(node) = queue.pop_front() {
            if node == to {
                let mut steps = Vec::new();
                let mut at = to;
                while at != from {
                    let step = *reached_by.get(&at)?;
                    steps.push(step);
                    at = step.from;
                }
                steps.reverse();
                return Some(steps);
            }
            for edge in self.graph.edges(node) {
                let next = edge.target();
                if self.component_of[next.index()] == component
                    && next != from
                    && !reached_by.contains_key(&next)
                {
                    let step = Step {
                        from: node,
                        to: next,
                        group: edge.weight().group,
                    };
                    reached_by.insert(next, step);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    fn cycle(&self, steps: &[Step]) -> Cycle<'a> {
        let start = steps.first().map(|step| self.graph[step.from]);
        Cycle {
            endpoints: start
                .into_iter()
                .chain(steps.iter().map(|step| self.graph[step.to]))
                .collect(),
            groups: steps.iter().map(|step| self.names[step.group]).collect(),
        }
    }
}

/// One binding walked along a chain.
#[derive(Clone, Copy, Debug)]
struct Step {
    from: NodeIndex,
    to: NodeIndex,
    group: usize,
}

/// Denies what the candidate group (being created or updated, so it replaces
/// the stored group of the same name) would break across its namespace:
/// a binding that closes a cycle (field path of that binding, the cycle
/// named with its groups), and a Target that another binding already
/// targets (naming the other group, or the other binding of the same group).
///
/// Groups that do not resolve contribute nothing: `validate` denies an
/// unresolvable candidate with the reason, and a stored group that no longer
/// resolves (a resource deleted since) is not the candidate's fault.
/// Problems among the stored groups alone do not deny the candidate either.
pub fn check(
    namespace_groups: &[(String, ResourceScalingGroupSpec)],
    candidate: (&str, &ResourceScalingGroupSpec),
) -> Findings {
    let (candidate_name, candidate_spec) = candidate;
    let Ok(candidate_bindings) = bindings(candidate_spec) else {
        return Findings::default();
    };
    let stored: Vec<(&str, Bindings)> = namespace_groups
        .iter()
        .filter(|(name, _)| name != candidate_name)
        .filter_map(|(name, spec)| Some((name.as_str(), bindings(spec).ok()?)))
        .collect();
    let mut groups: Vec<(&str, &Bindings)> = stored.iter().map(|(n, b)| (*n, b)).collect();
    let candidate_group = groups.len();
    groups.push((candidate_name, &candidate_bindings));
    let graph = FollowGraph::new(&groups);
    findings(
        &candidate_bindings,
        |endpoint| {
            let mut others: Vec<&str> = graph
                .targeting(endpoint)
                .iter()
                .filter(|f| f.group != candidate_group)
                .map(|f| groups[f.group].0)
                .collect();
            others.dedup();
            others
        },
        |target| {
            graph.cycle_closed_by(Follow {
                group: candidate_group,
                target,
            })
        },
    )
}

/// The answer of [`check`] (and of [`FollowIndex::check`], so both word it
/// alike) about the candidate's `bindings`, given for each of its Targets
/// the other groups that already target it (`targeted_by`, by name, each
/// once) and the cycle its binding closes (`cycle_closed_by`, by position in
/// [`Bindings::targets`]).
fn findings<'a>(
    bindings: &Bindings,
    targeted_by: impl Fn(&Endpoint) -> Vec<&'a str>,
    cycle_closed_by: impl Fn(usize) -> Option<Cycle<'a>>,
) -> Findings {
    let mut findings = Findings::default();
    for (t, target) in bindings.targets.iter().enumerate() {
        let at = format!("{BINDINGS_FIELD}[{}]", target.binding);
        let earlier_here = bindings.targets[..t]
            .iter()
            .find(|earlier| earlier.endpoint == target.endpoint);
        if let Some(earlier) = earlier_here {
            findings.deny(
                format!("{at}.name"),
                format!(
                    "{} is already the Target of {BINDINGS_FIELD}[{}]; a resource or role follows one Source only",
                    target.endpoint, earlier.binding
                ),
            );
        } else {
            let other_groups = targeted_by(&target.endpoint);
            if !other_groups.is_empty() {
                findings.deny(
                    format!("{at}.name"),
                    format!(
                        "{} is already the Target of ResourceScalingGroup {}; a resource or role follows one Source only",
                        target.endpoint,
                        other_groups.join(", ")
                    ),
                );
            }
        }
        if let Some(cycle) = cycle_closed_by(t) {
            findings.deny(
                at,
                format!("{cycle}: scaling would follow itself round this loop forever"),
            );
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn spec(value: serde_json::Value) -> ResourceScalingGroupSpec {
        serde_json::from_value(value).expect("test spec parses")
    }

    /// A group over Deployments: `source` drives each of `targets` at ratio 1.
    fn follow(source: &str, targets: &[&str]) -> ResourceScalingGroupSpec {
        let mut resources =
            vec![json!({"name": source, "apiVersion": "apps/v1", "kind": "Deployment"})];
        let mut bindings = vec![json!({"name": source, "role": "Source"})];
        for target in targets {
            resources.push(json!({"name": target, "apiVersion": "apps/v1", "kind": "Deployment"}));
            bindings.push(json!({"name": target, "role": "Target", "ratio": 1}));
        }
        spec(json!({
            "targetResources": resources,
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": bindings}}
        }))
    }

    fn named(
        groups: &[(&str, ResourceScalingGroupSpec)],
    ) -> Vec<(String, ResourceScalingGroupSpec)> {
        groups
            .iter()
            .map(|(name, spec)| ((*name).to_owned(), spec.clone()))
            .collect()
    }

    fn messages(findings: &Findings) -> Vec<String> {
        findings
            .violations
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Seed 000's GroupReplication example, as written.
    fn seed_group_replication() -> ResourceScalingGroupSpec {
        spec(json!({
            "targetResources": [
                {"name": "prefill", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "decode", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
            ],
            "scalingStrategy": {"type": "GroupReplication", "groupConfig": {
                "groupName": "inference-unit", "replicas": 1,
                "scaleDown": {"policy": "Ordered", "candidates": ["inference-unit-02"]}}}
        }))
    }

    /// Seed 000's InplaceScaling example, as written.
    fn seed_inplace() -> ResourceScalingGroupSpec {
        spec(json!({
            "targetResources": [
                {"name": "rolebasedgroup1", "namespace": "ai", "apiVersion": "workloads.x-k8s.io/v1alpha1",
                 "kind": "RoleBasedGroup", "subResources": [{"roleName": "prefill"}, {"roleName": "Decode"}]},
                {"name": "router", "namespace": "ai", "apiVersion": "apps/v1", "kind": "Deployment"},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "router", "role": "Source"},
                {"name": "prefill", "role": "Target", "ratio": 1.0},
                {"name": "decode", "role": "Target", "ratio": 2.0},
            ]}}
        }))
    }

    #[test]
    fn seed_examples_are_accepted() {
        let group_replication = seed_group_replication();
        let inplace = seed_inplace();
        assert!(check(&[], ("pd-cluster", &group_replication)).is_allowed());
        assert!(check(&[], ("pd-pool", &inplace)).is_allowed());
        let both = named(&[
            ("pd-cluster", group_replication.clone()),
            ("pd-pool", inplace.clone()),
        ]);
        assert_eq!(check(&both, ("pd-pool", &inplace)), Findings::default());
        assert_eq!(
            check(&both, ("pd-cluster", &group_replication)),
            Findings::default()
        );
    }

    #[test]
    fn group_replication_adds_no_edges() {
        // Its resources are the same Deployments in the opposite order; as
        // InplaceScaling this would close a cycle, as GroupReplication it
        // binds nothing.
        let stored = named(&[("pd-cluster", seed_group_replication())]);
        assert!(check(&stored, ("b", &follow("decode", &["prefill"]))).is_allowed());
        let stored = named(&[("b", follow("decode", &["prefill"]))]);
        assert!(check(&stored, ("pd-cluster", &seed_group_replication())).is_allowed());
    }

    #[test]
    fn two_groups_forming_a_cycle_are_denied_naming_both() {
        let stored = named(&[("rsg-a", follow("prefill", &["decode"]))]);
        let findings = check(&stored, ("rsg-b", &follow("decode", &["prefill"])));
        assert_eq!(
            messages(&findings),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[1]: prefill -> decode -> prefill via rsg-a, rsg-b: scaling would follow itself round this loop forever"
            ]
        );
    }

    #[test]
    fn a_longer_cycle_names_every_step_in_order() {
        let stored = named(&[
            ("rsg-c", follow("c", &["a", "x"])),
            ("rsg-a", follow("a", &["b"])),
            ("rsg-b", follow("b", &["c"])),
            ("rsg-unrelated", follow("y", &["z"])),
        ]);
        let findings = check(&stored, ("rsg-c", &follow("c", &["a", "x"])));
        assert_eq!(
            messages(&findings),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[1]: a -> b -> c -> a via rsg-a, rsg-b, rsg-c: scaling would follow itself round this loop forever"
            ]
        );
    }

    #[test]
    fn self_loops_are_denied() {
        // Source and Target the same role: the binding `decode` matches the
        // role `Decode` up to case.
        let mut value = serde_json::to_value(seed_inplace()).expect("serialises");
        value["scalingStrategy"]["inplaceConfig"]["bindings"][0]["name"] = json!("Decode");
        value["scalingStrategy"]["inplaceConfig"]["bindings"][1]["name"] = json!("router");
        let findings = check(&[], ("rsg-a", &spec(value)));
        assert_eq!(
            messages(&findings),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[2]: rolebasedgroup1/Decode -> rolebasedgroup1/Decode via rsg-a: scaling would follow itself round this loop forever"
            ]
        );
        // Two entries, two shapes and two versions, one Deployment.
        let aliases = spec(json!({
            "targetResources": [
                {"name": "prefill", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "same", "targetRef": {"apiVersion": "apps/v1beta2", "kind": "Deployment", "name": "prefill"}},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "prefill", "role": "Source"},
                {"name": "same", "role": "Target", "ratio": 2},
            ]}}
        }));
        assert_eq!(
            messages(&check(&[], ("rsg-a", &aliases))),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[1]: prefill -> prefill via rsg-a: scaling would follow itself round this loop forever"
            ]
        );
    }

    #[test]
    fn roles_and_versions_join_cycles_across_groups() {
        // pd-pool makes the role Decode follow router; this group makes router
        // follow Decode, naming it through a differently written apiVersion.
        let stored = named(&[("pd-pool", seed_inplace())]);
        let back = spec(json!({
            "targetResources": [
                {"name": "rbg", "targetRef": {"apiVersion": "workloads.x-k8s.io/v1", "kind": "RoleBasedGroup", "name": "rolebasedgroup1"},
                 "subResources": [{"roleName": "Decode"}]},
                {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "decode", "role": "Source"},
                {"name": "router", "role": "Target", "ratio": 0.5},
            ]}}
        }));
        assert_eq!(
            messages(&check(&stored, ("gate", &back))),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[1]: router -> rolebasedgroup1/Decode -> router via pd-pool, gate: scaling would follow itself round this loop forever"
            ]
        );
    }

    #[test]
    fn a_chain_of_a_hundred_groups_is_accepted() {
        let mut stored: Vec<(String, ResourceScalingGroupSpec)> = (0..100)
            .map(|i| {
                (
                    format!("rsg-{i}"),
                    follow(&format!("d{i}"), &[&format!("d{}", i + 1)]),
                )
            })
            .collect();
        stored.reverse();
        for (name, candidate) in &stored {
            assert_eq!(
                check(&stored, (name, candidate)),
                Findings::default(),
                "{name}"
            );
        }
        // Closing it from the end back to the start is denied, the whole
        // chain named.
        let findings = check(&stored, ("rsg-back", &follow("d100", &["d0"])));
        let expected_path: Vec<String> = (0..=100).map(|i| format!("d{i}")).collect();
        let expected_groups: Vec<String> = (0..100).map(|i| format!("rsg-{i}")).collect();
        assert_eq!(
            messages(&findings),
            [format!(
                "spec.scalingStrategy.inplaceConfig.bindings[1]: {} -> d0 via {}, rsg-back: scaling would follow itself round this loop forever",
                expected_path.join(" -> "),
                expected_groups.join(", ")
            )]
        );
    }

    #[test]
    fn a_second_target_binding_is_denied_naming_the_other_group() {
        let stored = named(&[
            ("rsg-a", follow("router", &["decode"])),
            ("pd-cluster", seed_group_replication()),
        ]);
        let findings = check(&stored, ("rsg-b", &follow("prefill", &["decode"])));
        assert_eq!(
            messages(&findings),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[1].name: decode is already the Target of ResourceScalingGroup rsg-a; a resource or role follows one Source only"
            ]
        );
        // The same role reached through a case-only match.
        let stored = named(&[("pd-pool", seed_inplace())]);
        let mut value = serde_json::to_value(seed_inplace()).expect("serialises");
        value["targetResources"][1]["name"] = json!("other-router");
        value["scalingStrategy"]["inplaceConfig"]["bindings"] = json!([
            {"name": "other-router", "role": "Source"},
            {"name": "DECODE", "role": "Target", "ratio": 1},
        ]);
        assert_eq!(
            messages(&check(&stored, ("rsg-b", &spec(value)))),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[1].name: rolebasedgroup1/Decode is already the Target of ResourceScalingGroup pd-pool; a resource or role follows one Source only"
            ]
        );
    }

    #[test]
    fn a_target_bound_twice_in_one_group_names_the_earlier_binding() {
        let twice = spec(json!({
            "targetResources": [
                {"name": "router", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": "decode-again", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "decode"}},
            ],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "decode", "role": "Target", "ratio": 1},
                {"name": "router", "role": "Source"},
                {"name": "decode-again", "role": "Target", "ratio": 2},
            ]}}
        }));
        assert_eq!(
            messages(&check(&[], ("rsg-a", &twice))),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[2].name: decode is already the Target of spec.scalingStrategy.inplaceConfig.bindings[0]; a resource or role follows one Source only"
            ]
        );
    }

    #[test]
    fn an_update_replaces_the_stored_group() {
        // Stored, rsg-a makes decode follow prefill. Its update makes prefill
        // follow q instead, and q follows decode: next to the stored version
        // that would be a cycle, but the stored version is replaced.
        let stored = named(&[
            ("rsg-a", follow("prefill", &["decode"])),
            ("rsg-b", follow("decode", &["q"])),
        ]);
        let update = follow("q", &["prefill"]);
        assert_eq!(check(&stored, ("rsg-a", &update)), Findings::default());
        assert!(!check(&stored, ("rsg-new", &update)).is_allowed());
        // An update that keeps its own Target is not a second Target binding.
        assert_eq!(
            check(&stored, ("rsg-a", &follow("prefill", &["decode", "extra"]))),
            Findings::default()
        );
    }

    #[test]
    fn an_update_that_removes_a_cycle_is_accepted() {
        // A cycle stored while no webhook ran.
        let stored = named(&[
            ("rsg-a", follow("prefill", &["decode"])),
            ("rsg-b", follow("decode", &["prefill"])),
        ]);
        assert_eq!(
            check(&stored, ("rsg-b", &follow("decode", &["other"]))),
            Findings::default()
        );
        // Updating it without breaking the cycle is still denied.
        assert_eq!(
            messages(&check(
                &stored,
                ("rsg-b", &follow("decode", &["prefill", "other"]))
            )),
            [
                "spec.scalingStrategy.inplaceConfig.bindings[1]: prefill -> decode -> prefill via rsg-a, rsg-b: scaling would follow itself round this loop forever"
            ]
        );
        // A group elsewhere in the namespace is not blamed for the stored cycle.
        assert_eq!(
            check(&stored, ("rsg-c", &follow("x", &["y"]))),
            Findings::default()
        );
    }

    #[test]
    fn unresolvable_groups_add_nothing() {
        let broken = spec(json!({
            "targetResources": [{"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "decode", "role": "Source"},
                {"name": "prefill", "role": "Target", "ratio": 1},
            ]}}
        }));
        let stored = named(&[("stale", broken.clone())]);
        assert!(check(&stored, ("rsg-b", &follow("prefill", &["decode"]))).is_allowed());
        let stored = named(&[("rsg-a", follow("prefill", &["decode"]))]);
        assert_eq!(check(&stored, ("rsg-b", &broken)), Findings::default());
    }

    #[test]
    fn ten_thousand_groups_are_checked_in_well_under_a_second() {
        // A binary tree of 10 000 groups (20 001 Deployments), then a
        // candidate that closes a cycle from a deep leaf back to the root.
        let stored: Vec<(String, ResourceScalingGroupSpec)> = (0..10_000)
            .map(|i| {
                let children = [format!("d{}", 2 * i + 1), format!("d{}", 2 * i + 2)];
                (
                    format!("rsg-{i}"),
                    follow(&format!("d{i}"), &[&children[0], &children[1]]),
                )
            })
            .collect();
        // Correct at scale; how fast is measured in benches/, not asserted here.
        let checked = |candidate: (&str, &ResourceScalingGroupSpec)| check(&stored, candidate);
        let (name, candidate) = &stored[5_000];
        assert_eq!(checked((name, candidate)), Findings::default());
        let findings = checked(("rsg-back", &follow("d20000", &["d0"])));
        assert_eq!(findings.violations.len(), 1);
        assert!(
            findings.violations[0]
                .reason
                .starts_with("d0 -> d1 -> d3 -> d8 -> d18 -> d38 -> "),
            "{}",
            findings.violations[0]
        );
    }

    #[test]
    fn topological_order_and_its_cycle() {
        let groups = [
            (
                "b-to-c",
                crate::plan::resource_scaling_group::ratio::bindings(&follow("b", &["c"]))
                    .expect("resolves"),
            ),
            (
                "a-to-b",
                crate::plan::resource_scaling_group::ratio::bindings(&follow("a", &["b", "d"]))
                    .expect("resolves"),
            ),
        ];
        let list: Vec<(&str, &Bindings)> = groups.iter().map(|(n, b)| (*n, b)).collect();
        let graph = FollowGraph::new(&list);
        let order: Vec<String> = graph
            .topological()
            .expect("acyclic")
            .iter()
            .map(ToString::to_string)
            .collect();
        let position = |name: &str| order.iter().position(|n| n == name).expect("listed");
        assert!(position("a") < position("b"));
        assert!(position("b") < position("c"));
        assert!(position("a") < position("d"));
        assert_eq!(order.len(), 4);
        assert_eq!(
            graph.targeting(&groups[0].1.targets[0].endpoint),
            [Follow {
                group: 0,
                target: 0
            }]
        );
        assert_eq!(graph.targeting(&groups[1].1.source), []);
    }

    /// A random DAG over nodes 0..n: each edge goes from a lower to a higher
    /// node. With `forest`, every node has at most one parent.
    fn random_dag(forest: bool) -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
        (2usize..40).prop_flat_map(move |n| {
            let edges = prop::collection::vec((0..n, 0..n), 0..(2 * n)).prop_map(move |pairs| {
                let mut parent_taken = vec![false; n];
                let mut edges = Vec::new();
                for (a, b) in pairs {
                    let (low, high) = (a.min(b), a.max(b));
                    if low == high || edges.contains(&(low, high)) || (forest && parent_taken[high])
                    {
                        continue;
                    }
                    parent_taken[high] = true;
                    edges.push((low, high));
                }
                edges
            });
            (Just(n), edges)
        })
    }

    /// One group per source node, binding its children; listed in a shuffled order.
    fn groups_of(
        edges: &[(usize, usize)],
        rotate: usize,
    ) -> Vec<(String, ResourceScalingGroupSpec)> {
        let mut children: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (a, b) in edges {
            children.entry(*a).or_default().push(format!("n{b}"));
        }
        let mut groups: Vec<(String, ResourceScalingGroupSpec)> = children
            .iter()
            .map(|(a, targets)| {
                let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
                (format!("rsg-{a}"), follow(&format!("n{a}"), &targets))
            })
            .collect();
        if !groups.is_empty() {
            let shift = rotate % groups.len();
            groups.rotate_left(shift);
        }
        groups
    }

    /// Every pair (ancestor, descendant) joined by a path of edges.
    fn paths(n: usize, edges: &[(usize, usize)]) -> Vec<(usize, usize)> {
        let mut children = vec![Vec::new(); n];
        for &(a, b) in edges {
            children[a].push(b);
        }
        // Edges go from lower to higher nodes, so every node's descendants
        // are known before its own, visiting from the highest down.
        let mut reach = vec![vec![false; n]; n];
        for a in (0..n).rev() {
            for &child in &children[a] {
                let below = reach[child].clone();
                reach[a][child] = true;
                for (d, reached) in below.into_iter().enumerate() {
                    reach[a][d] |= reached;
                }
            }
        }
        let mut pairs = Vec::new();
        for (a, row) in reach.iter().enumerate() {
            for (b, reached) in row.iter().enumerate() {
                if *reached {
                    pairs.push((a, b));
                }
            }
        }
        pairs
    }

    proptest! {
        #[test]
        fn random_forests_are_accepted_and_a_back_edge_is_denied(
            (n, edges) in random_dag(true),
            rotate in any::<usize>(),
            pick in any::<prop::sample::Index>(),
            as_update in any::<bool>(),
        ) {
            let stored = groups_of(&edges, rotate);
            for (name, candidate) in &stored {
                prop_assert_eq!(check(&stored, (name, candidate)), Findings::default());
            }
            let pairs = paths(n, &edges);
            prop_assume!(!pairs.is_empty());
            let (ancestor, descendant) = pairs[pick.index(pairs.len())];
            // The descendant drives the ancestor: a new group, or an update
            // of the descendant's own group when it has one.
            let own = stored.iter().find(|(name, _)| *name == format!("rsg-{descendant}"));
            let (name, mut targets): (String, Vec<String>) = match own {
                Some((name, _)) if as_update => {
                    let kept = edges.iter().filter(|(a, _)| *a == descendant).map(|(_, b)| format!("n{b}")).collect();
                    (name.clone(), kept)
                }
                _ => ("rsg-back".to_owned(), Vec::new()),
            };
            targets.push(format!("n{ancestor}"));
            let target_refs: Vec<&str> = targets.iter().map(String::as_str).collect();
            let candidate = follow(&format!("n{descendant}"), &target_refs);
            let findings = check(&stored, (&name, &candidate));
            // In a forest the path is unique: walk it up from the descendant.
            let mut path = vec![descendant];
            while *path.last().expect("non-empty") != ancestor {
                let child = *path.last().expect("non-empty");
                let parent = edges.iter().find(|(_, b)| *b == child).map(|(a, _)| *a).expect("on the path");
                path.push(parent);
            }
            path.reverse();
            let names: Vec<String> = path.iter().map(|p| format!("n{p}")).collect();
            let groups: Vec<String> = path[..path.len() - 1].iter().map(|p| format!("rsg-{p}")).collect();
            let expected = format!(
                "spec.scalingStrategy.inplaceConfig.bindings[{}]: {} -> n{ancestor} via {}, {name}: scaling would follow itself round this loop forever",
                targets.len(),
                names.join(" -> "),
                groups.join(", ")
            );
            let all = messages(&findings);
            prop_assert!(all.contains(&expected), "expected {:?} in {:?}", expected, all);
            // A root ancestor has no Source yet, so the cycle is the only denial.
            let ancestor_has_parent = edges.iter().any(|(_, b)| *b == ancestor);
            prop_assert_eq!(all.len(), 1 + usize::from(ancestor_has_parent), "{:?}", all);
        }

        #[test]
        fn random_dags_have_no_cycle_and_a_back_edge_makes_one(
            (n, edges) in random_dag(false),
            rotate in any::<usize>(),
            pick in any::<prop::sample::Index>(),
        ) {
            // Nodes with several parents break the one-Source rule; the
            // acyclicity rule must still hold on its own.
            let stored = groups_of(&edges, rotate);
            let is_cycle = |v: &crate::api::Violation| !v.field.ends_with(".name");
            for (name, candidate) in &stored {
                let findings = check(&stored, (name, candidate));
                prop_assert!(!findings.violations.iter().any(is_cycle), "{:?}", findings);
            }
            let pairs = paths(n, &edges);
            prop_assume!(!pairs.is_empty());
            let (ancestor, descendant) = pairs[pick.index(pairs.len())];
            let candidate = follow(&format!("n{descendant}"), &[&format!("n{ancestor}")]);
            let findings = check(&stored, ("rsg-back", &candidate));
            let cycles: Vec<&crate::api::Violation> = findings.violations.iter().filter(|v| is_cycle(v)).collect();
            prop_assert_eq!(cycles.len(), 1, "{:?}", findings);
            let reason = &cycles[0].reason;
            let cycle_start = format!("n{ancestor} -> ");
            let cycle_end = format!("n{descendant} -> n{ancestor} via ");
            prop_assert!(reason.starts_with(&cycle_start), "{}", reason);
            prop_assert!(reason.contains(&cycle_end), "{}", reason);
        }
    }
}
