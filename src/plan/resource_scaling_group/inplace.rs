//! One reconcile of an InplaceScaling ResourceScalingGroup (DESIGN.md §1.2,
//! seed 000): which of its Targets to patch, why, and its status. The
//! controller, `tandem render` and the tests all run this.
//!
//! Read top to bottom:
//! 1. [`endpoints`]: what a reconcile reads: the group's Source and Targets,
//!    and the Sources of the groups upstream of its Source, so that a chain
//!    (a Target of one group is the Source of another) settles in one pass.
//! 2. [`reconcile`]: from what was read ([`Observed`]), the desired replicas
//!    of every Target (`propagation::propagate`), and the patches of this group's
//!    Targets whose replicas differ, each with its cause: the Source scaled,
//!    the group is new or its spec changed, or a Target drifted (the Source
//!    is where it was last time, yet the Target moved: someone set it by
//!    hand) and is set back. Then the status: `currentReplicas` (the Source's
//!    replicas), `observedGeneration`, and the conditions Ready (every Target
//!    at its ratio) and Stalled (why not: TargetMissing, PatchRefused, Cycle,
//!    TargetConflict, UnsupportedKind, InvalidSpec).
//! 3. [`patches`]: the requests that carry the pass out, one per object (the
//!    roles of one object change in one JSON Patch); [`refused`]: the status
//!    when the API server refused some of them.
//!
//! Nothing here deletes or owns anything: deleting the group leaves every
//! resource as it is (Retain), and a group being deleted decides nothing.
//! An unchanged world gives no patches, no Events and the status as stored.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use super::adapter::{self, RoleReading};
use super::dag::FollowGraph;
use super::propagation;
use super::ratio::{self, Bindings, Endpoint, TargetBinding};
use crate::api::resource_scaling_group::{
    Band, ResourceScalingGroup, ResourceScalingGroupSpec, ResourceScalingGroupStatus,
};
use crate::plan::shared::condition::condition;

/// An endpoint's replicas as read, with what a patch of them needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Through the `/scale` subresource (or, in `render`, the object's
    /// replicas field).
    Scale { replicas: i32 },
    /// A role of an object with roles.
    Role(RoleReading),
}

impl Reading {
    pub fn replicas(&self) -> i32 {
        match self {
            Reading::Scale { replicas } => *replicas,
            Reading::Role(role) => role.replicas,
        }
    }
}

/// What reading an endpoint gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    Read(Reading),
    /// The object, or the role in it, does not exist; the text says which.
    Missing(String),
    /// The kind cannot be scaled (no scale subresource); the text says why.
    Unsupported(String),
}

/// Why the group is not where it should be: a Stalled condition's reason
/// and one line of its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

impl Problem {
    pub const TARGET_MISSING: &'static str = "TargetMissing";
    pub const PATCH_REFUSED: &'static str = "PatchRefused";
    pub const CYCLE: &'static str = "Cycle";
    pub const TARGET_CONFLICT: &'static str = "TargetConflict";
    pub const UNSUPPORTED_KIND: &'static str = "UnsupportedKind";
    pub const INVALID_SPEC: &'static str = "InvalidSpec";

    /// A patch of `target` the API server refused, with its answer.
    pub fn patch_refused(target: &str, answer: &str) -> Problem {
        Problem {
            reason: Problem::PATCH_REFUSED,
            message: format!("Target {target}: the patch was refused: {answer}"),
        }
    }

    /// A Target found missing when it was patched (deleted since it was read).
    pub fn gone(target: &str, answer: &str) -> Problem {
        Problem {
            reason: Problem::TARGET_MISSING,
            message: format!("Target {target}: {answer}"),
        }
    }
}

/// An Event to record on the group; `about` is the resource it concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
    pub about: Option<Endpoint>,
}

/// One Target to scale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetScale {
    /// Index in `spec.scalingStrategy.inplaceConfig.bindings`.
    pub binding: usize,
    /// The binding's name as written (`decode`), for messages.
    pub name: String,
    pub endpoint: Endpoint,
    pub from: Reading,
    pub to: i32,
    /// `Scaled` (following the Source, a new group or a changed spec) or
    /// `DriftRepaired`.
    pub reason: &'static str,
    pub note: String,
}

/// What one reconcile of a group does: patch `scales`, then write `status`
/// when it differs from the stored one, then record `events` (the Note of a
/// scale is recorded once its patch went through).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    pub scales: Vec<TargetScale>,
    pub status: ResourceScalingGroupStatus,
    pub events: Vec<Note>,
    /// What keeps the group from its ratios before any patch is sent.
    pub problems: Vec<Problem>,
    /// The bands of the band Targets, published in the status.
    pub bands: Vec<Band>,
    /// The Ready condition's message when nothing is wrong.
    ready: String,
}

/// Event reasons.
pub use crate::plan::shared::reason::{DRIFT_REPAIRED, SCALED, STALLED};

/// The InplaceScaling groups of a namespace that resolve and are not being
/// deleted (a group being deleted drives nothing any more), by name, with
/// `me` (the group being reconciled) given by its own spec.
///
/// The groups are taken as the cache holds them (`Arc`s) or owned (tests):
/// a reconcile does not copy the namespace's groups.
fn resolved<G: Borrow<ResourceScalingGroup>>(
    me: (&str, &ResourceScalingGroupSpec),
    groups: &[G],
) -> Result<(Vec<(String, Bindings)>, usize), String> {
    let mine = ratio::bindings(me.1)?;
    let mut all: Vec<(String, Bindings)> = groups
        .iter()
        .map(Borrow::borrow)
        .filter(|g| g.metadata.deletion_timestamp.is_none())
        .filter_map(|g| {
            let name = g.metadata.name.clone()?;
            (name != me.0).then_some(())?;
            Some((name, ratio::bindings(&g.spec).ok()?))
        })
        .collect();
    let at = all.len();
    all.push((me.0.to_owned(), mine));
    Ok((all, at))
}

/// The groups one reconcile of group `me` depends on, by index: itself, the
/// groups upstream of its Source (transitively), and any other group that
/// targets one of its Targets (a conflict to report). Returns them with the
/// upstream groups' Sources.
fn relevant(groups: &[(String, Bindings)], me: usize) -> (Vec<usize>, Vec<&Endpoint>) {
    // The groups that target each endpoint, in their order: every question
    // below is one lookup, not a walk over every group's targets (issue 51).
    let mut targeted_by: HashMap<&Endpoint, Vec<usize>> = HashMap::new();
    for (g, (_, bindings)) in groups.iter().enumerate() {
        for target in &bindings.targets {
            let by = targeted_by.entry(&target.endpoint).or_default();
            if by.last() != Some(&g) {
                by.push(g);
            }
        }
    }
    let mine = &groups[me].1;
    let mut chosen: BTreeSet<usize> = BTreeSet::from([me]);
    for target in &mine.targets {
        chosen.extend(targeted_by.get(&target.endpoint).into_iter().flatten());
    }
    let mut sources = Vec::new();
    let mut upstream_of = vec![&mine.source];
    while let Some(endpoint) = upstream_of.pop() {
        for &g in targeted_by.get(endpoint).into_iter().flatten() {
            if chosen.insert(g) {
                let source = &groups[g].1.source;
                sources.push(source);
                upstream_of.push(source);
            }
        }
    }
    (chosen.into_iter().collect(), sources)
}

/// The namespace's InplaceScaling groups as one reconcile of group `me`
/// sees them, resolved once per pass: every group's bindings, and which of
/// them the reconcile depends on ([`relevant`]). The reconciler resolves
/// once and asks both [`Resolved::endpoints`] and [`reconcile_resolved`];
/// each parsed every group's bindings and walked them again before.
pub struct Resolved {
    all: Vec<(String, Bindings)>,
    me: usize,
    chosen: Vec<usize>,
    upstream: Vec<Endpoint>,
}

/// Resolves group `name` (spec `spec`) among the namespace's `groups`; the
/// reason when its own bindings do not resolve.
pub fn resolve<G: Borrow<ResourceScalingGroup>>(
    name: &str,
    spec: &ResourceScalingGroupSpec,
    groups: &[G],
) -> Result<Resolved, String> {
    let (all, me) = resolved((name, spec), groups)?;
    let (chosen, upstream) = relevant(&all, me);
    let upstream = upstream.into_iter().cloned().collect();
    Ok(Resolved {
        all,
        me,
        chosen,
        upstream,
    })
}

impl Resolved {
    /// The endpoints the reconcile must read: the group's Source and
    /// Targets, then the Sources upstream of its Source.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        let mine = &self.all[self.me].1;
        let mut read = vec![mine.source.clone()];
        for endpoint in mine
            .targets
            .iter()
            .map(|t| &t.endpoint)
            .chain(&self.upstream)
        {
            if !read.contains(endpoint) {
                read.push(endpoint.clone());
            }
        }
        read
    }
}

/// The endpoints a reconcile of group `name` (spec `spec`) must read, given
/// the namespace's groups ([`Resolved::endpoints`]). Empty when the group
/// does not resolve.
pub fn endpoints<G: Borrow<ResourceScalingGroup>>(
    name: &str,
    spec: &ResourceScalingGroupSpec,
    groups: &[G],
) -> Vec<Endpoint> {
    resolve(name, spec, groups)
        .map(|resolved| resolved.endpoints())
        .unwrap_or_default()
}

/// Decides one reconcile of `rsg`, an InplaceScaling group, given the
/// namespace's groups as stored (`rsg`'s own entry, if listed, is replaced
/// by `rsg`) and what reading [`endpoints`] gave.
pub fn reconcile<G: Borrow<ResourceScalingGroup>>(
    rsg: &ResourceScalingGroup,
    groups: &[G],
    observed: &BTreeMap<Endpoint, Observed>,
    now: &Time,
) -> Pass {
    let name = rsg.metadata.name.as_deref().unwrap_or_default();
    reconcile_resolved(rsg, resolve(name, &rsg.spec, groups), observed, now)
}

/// [`reconcile`], with the namespace's groups already resolved for `rsg`
/// ([`resolve`]).
pub fn reconcile_resolved(
    rsg: &ResourceScalingGroup,
    resolved: Result<Resolved, String>,
    observed: &BTreeMap<Endpoint, Observed>,
    now: &Time,
) -> Pass {
    let previous = rsg.status.clone().unwrap_or_default();
    let mut pass = Pass::default();
    // Retain: a group being deleted scales nothing and reports nothing.
    if rsg.metadata.deletion_timestamp.is_some() {
        pass.status = previous;
        return pass;
    }
    let Resolved {
        all, me, chosen, ..
    } = match resolved {
        Ok(resolved) => resolved,
        Err(reason) => {
            pass.problems.push(Problem {
                reason: Problem::INVALID_SPEC,
                message: reason,
            });
            return finish(rsg, pass, previous.current_replicas, now);
        }
    };
    let mine = &all[me].1;
    let picked: Vec<(String, Bindings)> = chosen.iter().map(|&g| all[g].clone()).collect();

    pass.problems
        .extend(follow_problems(rsg, &all, me, &picked));
    if !pass.problems.is_empty() {
        return finish(rsg, pass, previous.current_replicas, now);
    }

    let current: BTreeMap<Endpoint, i32> = observed
        .iter()
        .filter_map(|(e, o)| match o {
            Observed::Read(reading) => Some((e.clone(), reading.replicas())),
            _ => None,
        })
        .collect();
    let desired = match propagation::propagate(&current, &picked) {
        Ok(desired) => desired,
        Err(reason) => {
            pass.problems.push(Problem {
                reason: Problem::TARGET_CONFLICT,
                message: reason,
            });
            return finish(rsg, pass, previous.current_replicas, now);
        }
    };

    let source_name = binding_name(rsg, mine.source_binding);
    let source_now = current.get(&mine.source).copied();
    if let Some(problem) = problem_of(observed.get(&mine.source), "Source", &source_name) {
        pass.problems.push(problem);
    }
    // What the Targets follow: the Source's replicas, or, when the Source
    // is itself a Target upstream, the replicas it is about to get.
    let followed = desired.get(&mine.source).copied().or(source_now);
    let mut at_ratio = Vec::new();
    for target in &mine.targets {
        let target_name = binding_name(rsg, target.binding);
        let reading = match observed.get(&target.endpoint) {
            Some(Observed::Read(reading)) => reading,
            other => {
                if let Some(problem) = problem_of(other, "Target", &target_name) {
                    pass.problems.push(problem);
                }
                continue;
            }
        };
        let Some(source) = followed else {
            continue;
        };
        if target.is_band() {
            // Its autoscaler writes it; its view keeps it within the band.
            let (band, said) = band_of(target, target_name, source);
            at_ratio.push(said);
            pass.bands.push(band);
            continue;
        }
        let Some(&want) = desired.get(&target.endpoint) else {
            continue;
        };
        at_ratio.push(format!("{target_name}={want}"));
        let from = reading.replicas();
        if from == want {
            continue;
        }
        let (reason, note) = scale_note(
            cause(rsg, &previous, source),
            (&source_name, source),
            (&target_name, from, want),
            &why(target, source, want),
        );
        pass.scales.push(TargetScale {
            binding: target.binding,
            name: target_name,
            endpoint: target.endpoint.clone(),
            from: reading.clone(),
            to: want,
            reason,
            note,
        });
    }
    if let Some(source) = followed {
        pass.ready = format!("{} follow {source_name}={source}", at_ratio.join(", "));
    }
    let recorded = source_now.unwrap_or(previous.current_replicas);
    finish(rsg, pass, recorded, now)
}

/// A Target another group also drives, or a loop among the groups `picked`
/// (those upstream of `all[me]`): no replicas satisfy them.
fn follow_problems(
    rsg: &ResourceScalingGroup,
    all: &[(String, Bindings)],
    me: usize,
    picked: &[(String, Bindings)],
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for target in &all[me].1.targets {
        let others: Vec<&str> = all
            .iter()
            .enumerate()
            .filter(|(g, (_, b))| {
                *g != me && b.targets.iter().any(|t| t.endpoint == target.endpoint)
            })
            .map(|(_, (n, _))| n.as_str())
            .collect();
        if !others.is_empty() {
            problems.push(Problem {
                reason: Problem::TARGET_CONFLICT,
                message: format!(
                    "Target {} is also the Target of ResourceScalingGroup {}; it can follow one Source only",
                    binding_name(rsg, target.binding),
                    others.join(", ")
                ),
            });
        }
    }
    let named: Vec<(&str, &Bindings)> = picked.iter().map(|(n, b)| (n.as_str(), b)).collect();
    if let Err(cycle) = FollowGraph::new(&named).topological() {
        problems.push(Problem {
            reason: Problem::CYCLE,
            message: format!("{cycle}: the bindings form a cycle, so no replicas satisfy them"),
        });
    }
    problems
}

/// The reason and Event note of scaling a Target from `from` to `want`
/// replicas while its Source has `source`, by what caused it.
fn scale_note(
    cause: Cause,
    (source_name, source): (&str, i32),
    (target_name, from, want): (&str, i32, i32),
    why: &str,
) -> (&'static str, String) {
    match cause {
        Cause::New => (
            SCALED,
            format!(
                "source {source_name} has {source} replicas: {target_name} {from} -> {want} ({why})"
            ),
        ),
        Cause::SpecChanged => (
            SCALED,
            format!(
                "the bindings changed: {target_name} {from} -> {want} ({why} of {source_name}={source})"
            ),
        ),
        Cause::SourceScaled { was } => (
            SCALED,
            format!(
                "source {source_name} scaled from {was} to {source}: {target_name} {from} -> {want} ({why})"
            ),
        ),
        Cause::Drift => (
            DRIFT_REPAIRED,
            format!(
                "{target_name} was set to {from} by hand; set back to {want} ({why} of {source_name}={source})"
            ),
        ),
    }
}

/// Why a Target was changed.
enum Cause {
    /// The group has never recorded a status.
    New,
    /// The group's spec changed since its status was recorded.
    SpecChanged,
    /// The Source moved since its replicas were recorded.
    SourceScaled { was: i32 },
    /// The Source is where it was, the Target moved: set back.
    Drift,
}

fn cause(rsg: &ResourceScalingGroup, previous: &ResourceScalingGroupStatus, source: i32) -> Cause {
    match previous.observed_generation {
        None => Cause::New,
        Some(seen) if Some(seen) != rsg.metadata.generation => Cause::SpecChanged,
        Some(_) if previous.current_replicas != source => Cause::SourceScaled {
            was: previous.current_replicas,
        },
        Some(_) => Cause::Drift,
    }
}

/// `ratio 2`, and the clamp when min or max decided: `ratio 0.5, raised to min 2`.
fn why(target: &TargetBinding, source: i32, want: i32) -> String {
    let ratio = format!("ratio {}", target.ratio.normalize());
    let unclamped = ratio::target_replicas(source, target.ratio, None, None);
    match (target.min, target.max) {
        (Some(min), _) if want == min && unclamped < min => format!("{ratio}, raised to min {min}"),
        (_, Some(max)) if want == max && unclamped > max => format!("{ratio}, capped at max {max}"),
        _ if want == crate::api::limits::MAX_REPLICAS
            && ratio::ceil_product(source, target.ratio) > want =>
        {
            format!("{ratio}, capped at the limit of {want} replicas a ratio may give")
        }
        _ => ratio,
    }
}

/// The band of Target `target` (named `name`) while the Source has `source`,
/// and how the Ready condition says it: `decode within [4, 8] (ratio 2 to 4)`.
fn band_of(target: &TargetBinding, name: String, source: i32) -> (Band, String) {
    let (min_replicas, max_replicas) = target.bounds(source);
    let said = format!(
        "{name} within [{min_replicas}, {max_replicas}] ({})",
        why_band(target)
    );
    let band = Band {
        target: name,
        source_replicas: source,
        min_replicas,
        max_replicas,
    };
    (band, said)
}

/// `ratio 2 to 4`, and the binding's min and max when it has them.
fn why_band(target: &TargetBinding) -> String {
    let high = target.max_ratio.unwrap_or(target.ratio);
    let mut text = format!("ratio {} to {}", target.ratio.normalize(), high.normalize());
    if let Some(min) = target.min {
        text.push_str(&format!(", at least {min}"));
    }
    if let Some(max) = target.max {
        text.push_str(&format!(", at most {max}"));
    }
    text
}

/// The binding's name as written, falling back to its index.
fn binding_name(rsg: &ResourceScalingGroup, binding: usize) -> String {
    rsg.spec
        .scaling_strategy
        .inplace_config
        .as_ref()
        .and_then(|c| c.bindings.get(binding))
        .map_or_else(|| format!("bindings[{binding}]"), |b| b.name.clone())
}

/// What keeps an endpoint from being scaled, if anything.
fn problem_of(observed: Option<&Observed>, side: &str, name: &str) -> Option<Problem> {
    match observed {
        Some(Observed::Read(_)) => None,
        Some(Observed::Missing(what)) => Some(Problem {
            reason: Problem::TARGET_MISSING,
            message: format!("{side} {name}: {what}"),
        }),
        Some(Observed::Unsupported(why)) => Some(Problem {
            reason: Problem::UNSUPPORTED_KIND,
            message: format!("{side} {name}: {why}"),
        }),
        None => Some(Problem {
            reason: Problem::TARGET_MISSING,
            message: format!("{side} {name}: was not read"),
        }),
    }
}

/// The pass with its status and the Stalled Event, from its problems.
fn finish(rsg: &ResourceScalingGroup, mut pass: Pass, current_replicas: i32, now: &Time) -> Pass {
    let (status, stalled) = status(
        rsg,
        (current_replicas, &pass.bands),
        &pass.problems,
        &pass.ready,
        now,
    );
    pass.status = status;
    pass.events = pass
        .scales
        .iter()
        .map(|s| Note {
            warning: false,
            reason: s.reason,
            note: s.note.clone(),
            about: Some(s.endpoint.clone()),
        })
        .chain(stalled)
        .collect();
    pass
}

/// The status for `problems`, and a warning Event when the group newly
/// stalls or stalls for another reason than last time.
fn status(
    rsg: &ResourceScalingGroup,
    (current_replicas, bands): (i32, &[Band]),
    problems: &[Problem],
    ready: &str,
    now: &Time,
) -> (ResourceScalingGroupStatus, Option<Note>) {
    let previous: &[Condition] = rsg.status.as_ref().map_or(&[], |s| s.conditions.as_slice());
    let generation = rsg.metadata.generation;
    let make = |type_: &str, is_true: bool, reason: &str, message: String| {
        condition(previous, type_, is_true, reason, message, generation, now)
    };
    let (conditions, stalled) = match problems.first() {
        None => (
            vec![
                make("Ready", true, "AtRatio", ready.to_owned()),
                make(
                    "Stalled",
                    false,
                    "Following",
                    "every Target follows its Source".to_owned(),
                ),
            ],
            None,
        ),
        Some(first) => {
            let message = problems
                .iter()
                .map(|p| p.message.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            let was = previous.iter().find(|c| c.type_ == "Stalled");
            let news = was.is_none_or(|c| {
                c.status != "True" || c.reason != first.reason || c.message != message
            });
            let note = news.then(|| Note {
                warning: true,
                reason: STALLED,
                note: message.clone(),
                about: None,
            });
            (
                vec![
                    make("Ready", false, first.reason, message.clone()),
                    make("Stalled", true, first.reason, message),
                ],
                note,
            )
        }
    };
    (
        ResourceScalingGroupStatus {
            observed_generation: generation,
            current_replicas,
            label_selector: None,
            conditions,
            bands: bands.to_vec(),
        },
        stalled,
    )
}

/// The status and Events after the API server refused some of `pass`'s
/// patches (`refusals`, one [`Problem`] per refused Target): Ready false,
/// Stalled with the refusals after the pass's own problems; only the
/// scales that went through keep their Events.
pub fn refused(
    rsg: &ResourceScalingGroup,
    pass: &Pass,
    refusals: &[(Endpoint, Problem)],
    now: &Time,
) -> (ResourceScalingGroupStatus, Vec<Note>) {
    let mut problems = pass.problems.clone();
    problems.extend(refusals.iter().map(|(_, p)| p.clone()));
    let (status, stalled) = status(
        rsg,
        (pass.status.current_replicas, &pass.status.bands),
        &problems,
        &pass.ready,
        now,
    );
    let events = pass
        .scales
        .iter()
        .filter(|s| !refusals.iter().any(|(e, _)| *e == s.endpoint))
        .map(|s| Note {
            warning: false,
            reason: s.reason,
            note: s.note.clone(),
            about: Some(s.endpoint.clone()),
        })
        .chain(stalled)
        .collect();
    (status, events)
}

/// A request that carries out scales of one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// A merge patch of the object's `/scale` subresource.
    Scale(Value),
    /// A JSON Patch of the object (its roles).
    Roles(json_patch::Patch),
}

/// One object to patch, and the scales (indexes in `Pass::scales`) it carries.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectPatch {
    /// The object (an endpoint without role).
    pub object: Endpoint,
    pub request: Request,
    pub scales: Vec<usize>,
}

/// The requests that carry out `scales`: one `/scale` patch per resource,
/// one JSON Patch per object for all its roles (each replace behind a test
/// of the role's name), in the order the objects first appear.
pub fn patches(scales: &[TargetScale]) -> Result<Vec<ObjectPatch>, String> {
    let mut order: Vec<Endpoint> = Vec::new();
    let mut by_object: BTreeMap<Endpoint, Vec<usize>> = BTreeMap::new();
    for (i, scale) in scales.iter().enumerate() {
        let object = Endpoint {
            role: None,
            ..scale.endpoint.clone()
        };
        if !by_object.contains_key(&object) {
            order.push(object.clone());
        }
        by_object.entry(object).or_default().push(i);
    }
    let mut out = Vec::new();
    for object in order {
        let indexes = by_object.remove(&object).unwrap_or_default();
        let mut roles: Vec<(&str, &RoleReading, i32)> = Vec::new();
        let mut scale_to = None;
        for &i in &indexes {
            let scale = &scales[i];
            match (&scale.from, scale.endpoint.role.as_deref()) {
                (Reading::Role(reading), Some(role)) => roles.push((role, reading, scale.to)),
                (Reading::Scale { .. }, None) => scale_to = Some(scale.to),
                _ => {
                    return Err(format!(
                        "{}: a role is read through its object and a resource through /scale",
                        scale.endpoint
                    ));
                }
            }
        }
        let request = match scale_to {
            Some(to) if roles.is_empty() => Request::Scale(adapter::scale_patch(to)),
            None => Request::Roles(adapter::role_patch(&roles)?),
            Some(_) => {
                return Err(format!(
                    "{object} is bound both as a whole and by its roles"
                ));
            }
        };
        out.push(ObjectPatch {
            object,
            request,
            scales: indexes,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A namespace with no other group.
    const NO_GROUPS: &[ResourceScalingGroup] = &[];

    fn now() -> Time {
        Time("2026-11-21T10:00:00Z".parse().expect("test time"))
    }

    fn later() -> Time {
        Time("2026-11-21T11:00:00Z".parse().expect("test time"))
    }

    fn endpoint(api_version: &str, kind: &str, name: &str, role: Option<&str>) -> Endpoint {
        Endpoint {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            role: role.map(str::to_owned),
        }
    }

    fn deployment(name: &str) -> Endpoint {
        endpoint("apps/v1", "Deployment", name, None)
    }

    fn rbg_role(role: &str) -> Endpoint {
        endpoint(
            "workloads.x-k8s.io/v1alpha1",
            "RoleBasedGroup",
            "rolebasedgroup1",
            Some(role),
        )
    }

    /// Seed 000's InplaceScaling group, in namespace ai, generation 1.
    fn seed() -> ResourceScalingGroup {
        serde_json::from_value(json!({
            "apiVersion": "resourcescalinggroup.com/v1", "kind": "ResourceScalingGroup",
            "metadata": {"name": "pd-pool", "namespace": "ai", "generation": 1},
            "spec": {
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
            }
        }))
        .expect("seed parses")
    }

    fn role(index: usize, replicas: i32) -> Observed {
        Observed::Read(Reading::Role(RoleReading {
            index,
            written: Some(replicas),
            replicas,
        }))
    }

    fn scaled(replicas: i32) -> Observed {
        Observed::Read(Reading::Scale { replicas })
    }

    /// The seed's world: router, prefill and Decode at these replicas.
    fn world(router: i32, prefill: i32, decode: i32) -> BTreeMap<Endpoint, Observed> {
        BTreeMap::from([
            (deployment("router"), scaled(router)),
            (rbg_role("prefill"), role(0, prefill)),
            (rbg_role("Decode"), role(1, decode)),
        ])
    }

    /// Stores a pass's status on the group, as the reconciler writes it.
    fn settle(rsg: &ResourceScalingGroup, pass: &Pass) -> ResourceScalingGroup {
        let mut stored = rsg.clone();
        stored.status = Some(pass.status.clone());
        stored
    }

    fn moves(pass: &Pass) -> Vec<(String, i32, i32, &'static str)> {
        pass.scales
            .iter()
            .map(|s| (s.name.clone(), s.from.replicas(), s.to, s.reason))
            .collect()
    }

    fn condition<'a>(status: &'a ResourceScalingGroupStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .expect("condition present")
    }

    #[test]
    fn the_seed_router_at_ten_gives_prefill_ten_and_decode_twenty() {
        let rsg = seed();
        assert_eq!(
            endpoints("pd-pool", &rsg.spec, NO_GROUPS),
            [
                deployment("router"),
                rbg_role("prefill"),
                rbg_role("Decode")
            ]
        );
        let pass = reconcile(&rsg, NO_GROUPS, &world(10, 3, 3), &now());
        assert_eq!(
            moves(&pass),
            [
                ("prefill".to_owned(), 3, 10, SCALED),
                ("decode".to_owned(), 3, 20, SCALED)
            ]
        );
        let notes: Vec<&str> = pass.events.iter().map(|n| n.note.as_str()).collect();
        assert_eq!(
            notes,
            [
                "source router has 10 replicas: prefill 3 -> 10 (ratio 1)",
                "source router has 10 replicas: decode 3 -> 20 (ratio 2)"
            ]
        );
        assert_eq!(pass.events[1].about, Some(rbg_role("Decode")));
        assert_eq!(pass.status.current_replicas, 10);
        assert_eq!(pass.status.observed_generation, Some(1));
        let ready = condition(&pass.status, "Ready");
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.message.as_str()
            ),
            ("True", "AtRatio", "prefill=10, decode=20 follow router=10")
        );
        assert_eq!(condition(&pass.status, "Stalled").status, "False");

        // Both roles of the one RoleBasedGroup change in one tested JSON Patch.
        let requests = patches(&pass.scales).expect("patches");
        assert_eq!(requests.len(), 1);
        assert_eq!(
            requests[0].object,
            endpoint(
                "workloads.x-k8s.io/v1alpha1",
                "RoleBasedGroup",
                "rolebasedgroup1",
                None
            )
        );
        assert_eq!(requests[0].scales, [0, 1]);
        let Request::Roles(patch) = &requests[0].request else {
            panic!("a role patch")
        };
        assert_eq!(
            serde_json::to_value(patch).expect("serialises"),
            json!([
                {"op": "test", "path": "/spec/roles/0/name", "value": "prefill"},
                {"op": "replace", "path": "/spec/roles/0/replicas", "value": 10},
                {"op": "test", "path": "/spec/roles/1/name", "value": "Decode"},
                {"op": "replace", "path": "/spec/roles/1/replicas", "value": 20},
            ])
        );

        // Settled: the same world again writes nothing and says nothing.
        let stored = settle(&rsg, &pass);
        let again = reconcile(&stored, NO_GROUPS, &world(10, 10, 20), &later());
        assert!(
            again.scales.is_empty() && again.events.is_empty(),
            "{again:?}"
        );
        assert_eq!(Some(&again.status), stored.status.as_ref());
    }

    #[test]
    fn causes_are_told_apart() {
        let rsg = seed();
        let first = reconcile(&rsg, NO_GROUPS, &world(10, 10, 20), &now());
        assert!(first.scales.is_empty());
        let stored = settle(&rsg, &first);

        // The Source moves: the Targets follow it.
        let followed = reconcile(&stored, NO_GROUPS, &world(12, 10, 20), &now());
        assert_eq!(
            followed
                .events
                .iter()
                .map(|n| n.note.as_str())
                .collect::<Vec<_>>(),
            [
                "source router scaled from 10 to 12: prefill 10 -> 12 (ratio 1)",
                "source router scaled from 10 to 12: decode 20 -> 24 (ratio 2)"
            ]
        );
        assert_eq!(followed.status.current_replicas, 12);

        // The Source is where it was; decode moved: drift, set back.
        let drift = reconcile(&stored, NO_GROUPS, &world(10, 10, 7), &now());
        assert_eq!(
            moves(&drift),
            [("decode".to_owned(), 7, 20, DRIFT_REPAIRED)]
        );
        assert_eq!(
            drift.events[0].note,
            "decode was set to 7 by hand; set back to 20 (ratio 2 of router=10)"
        );
        assert_eq!(
            drift.status, first.status,
            "drift repair does not change the status"
        );

        // A new generation (ratio 3): the spec changed, not drift.
        let mut changed = stored.clone();
        changed.metadata.generation = Some(2);
        changed
            .spec
            .scaling_strategy
            .inplace_config
            .as_mut()
            .expect("inplace")
            .bindings[2]
            .ratio = Some(serde_json::from_value(json!(3)).expect("ratio"));
        let respec = reconcile(&changed, NO_GROUPS, &world(10, 10, 20), &now());
        assert_eq!(
            respec.events[0].note,
            "the bindings changed: decode 20 -> 30 (ratio 3 of router=10)"
        );
        assert_eq!(respec.status.observed_generation, Some(2));
    }

    #[test]
    fn min_and_max_are_named_when_they_decide() {
        let mut rsg = seed();
        let bindings = &mut rsg
            .spec
            .scaling_strategy
            .inplace_config
            .as_mut()
            .expect("inplace")
            .bindings;
        bindings[1].min = Some(4);
        bindings[2].max = Some(5);
        let pass = reconcile(&rsg, NO_GROUPS, &world(2, 1, 1), &now());
        assert_eq!(
            pass.events
                .iter()
                .map(|n| n.note.as_str())
                .collect::<Vec<_>>(),
            [
                "source router has 2 replicas: prefill 1 -> 4 (ratio 1, raised to min 4)",
                "source router has 2 replicas: decode 1 -> 4 (ratio 2)"
            ]
        );
        let capped = reconcile(&rsg, NO_GROUPS, &world(10, 10, 1), &now());
        assert_eq!(
            capped.events[0].note,
            "source router has 10 replicas: decode 1 -> 5 (ratio 2, capped at max 5)"
        );
    }

    #[test]
    fn missing_pieces_stall_the_group_and_the_rest_still_follows() {
        let rsg = seed();
        let mut observed = world(10, 3, 3);
        observed.insert(
            rbg_role("Decode"),
            Observed::Missing("RoleBasedGroup rolebasedgroup1 has no role \"Decode\" in spec.roles (roles: prefill)".into()),
        );
        let pass = reconcile(&rsg, NO_GROUPS, &observed, &now());
        assert_eq!(moves(&pass), [("prefill".to_owned(), 3, 10, SCALED)]);
        let stalled = condition(&pass.status, "Stalled");
        assert_eq!(
            (
                stalled.status.as_str(),
                stalled.reason.as_str(),
                stalled.message.as_str()
            ),
            (
                "True",
                "TargetMissing",
                "Target decode: RoleBasedGroup rolebasedgroup1 has no role \"Decode\" in spec.roles (roles: prefill)"
            )
        );
        assert_eq!(condition(&pass.status, "Ready").status, "False");
        let warnings: Vec<&Note> = pass.events.iter().filter(|n| n.warning).collect();
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].reason, STALLED);
        // The same stall next time: no second warning, the same status.
        let stored = settle(&rsg, &pass);
        let mut now_scaled = observed.clone();
        now_scaled.insert(rbg_role("prefill"), role(0, 10));
        let again = reconcile(&stored, NO_GROUPS, &now_scaled, &later());
        assert!(again.events.is_empty(), "{:?}", again.events);
        assert_eq!(Some(&again.status), stored.status.as_ref());

        // Without its Source nothing moves, and the last replicas stay recorded.
        let mut no_source = world(10, 3, 3);
        no_source.insert(
            deployment("router"),
            Observed::Missing("Deployment router not found".into()),
        );
        let stored = settle(&rsg, &reconcile(&rsg, NO_GROUPS, &world(6, 6, 12), &now()));
        let pass = reconcile(&stored, NO_GROUPS, &no_source, &now());
        assert!(pass.scales.is_empty());
        assert_eq!(pass.status.current_replicas, 6);
        assert_eq!(
            condition(&pass.status, "Stalled").message,
            "Source router: Deployment router not found"
        );

        // A kind without /scale, and an endpoint nobody read.
        let mut odd = world(10, 10, 20);
        odd.insert(
            deployment("router"),
            Observed::Unsupported("Deployment (apps/v1) has no scale subresource".into()),
        );
        odd.remove(&rbg_role("prefill"));
        let pass = reconcile(&rsg, NO_GROUPS, &odd, &now());
        assert_eq!(
            condition(&pass.status, "Stalled").message,
            "Source router: Deployment (apps/v1) has no scale subresource; Target prefill: was not read"
        );
        assert_eq!(condition(&pass.status, "Stalled").reason, "UnsupportedKind");
    }

    /// A group `name` over Deployments: `source` drives `target` at `ratio`.
    fn follow(name: &str, source: &str, target: &str, ratio: i64) -> ResourceScalingGroup {
        let spec: ResourceScalingGroupSpec = serde_json::from_value(json!({
            "targetResources": [
                {"name": source, "apiVersion": "apps/v1", "kind": "Deployment"},
                {"name": target, "apiVersion": "apps/v1", "kind": "Deployment"}],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": source, "role": "Source"}, {"name": target, "role": "Target", "ratio": ratio}]}}
        }))
        .expect("group parses");
        let mut rsg = ResourceScalingGroup::new(name, spec);
        rsg.metadata.namespace = Some("ai".into());
        rsg.metadata.generation = Some(1);
        rsg
    }

    fn view(name: &str) -> Endpoint {
        endpoint("fusioninfer.io/v1alpha1", "ScaleView", name, None)
    }

    /// prefill-sv -> decode-sv in a band of `minRatio` 2 to `maxRatio` 4,
    /// and decode-sv -> kv (a Deployment) at ratio 0.5 downstream.
    fn band_groups() -> (ResourceScalingGroup, ResourceScalingGroup) {
        let views = json!([
            {"name": "prefill-sv", "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"},
            {"name": "decode-sv", "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"}]);
        let spec: ResourceScalingGroupSpec = serde_json::from_value(json!({
            "targetResources": views,
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "prefill-sv", "role": "Source"},
                {"name": "decode-sv", "role": "Target", "minRatio": 2, "maxRatio": "4"}]}}
        }))
        .expect("group parses");
        let mut band = ResourceScalingGroup::new("pd-band", spec);
        band.metadata.namespace = Some("ai".into());
        band.metadata.generation = Some(1);
        let spec: ResourceScalingGroupSpec = serde_json::from_value(json!({
            "targetResources": [
                {"name": "decode-sv", "apiVersion": "fusioninfer.io/v1alpha1", "kind": "ScaleView"},
                {"name": "kv", "apiVersion": "apps/v1", "kind": "Deployment"}],
            "scalingStrategy": {"type": "InplaceScaling", "inplaceConfig": {"bindings": [
                {"name": "decode-sv", "role": "Source"},
                {"name": "kv", "role": "Target", "ratio": 0.5}]}}
        }))
        .expect("group parses");
        let mut downstream = ResourceScalingGroup::new("kv-ratio", spec);
        downstream.metadata.namespace = Some("ai".into());
        downstream.metadata.generation = Some(1);
        (band, downstream)
    }

    /// A band Target is written by its own autoscaler: the group patches
    /// nothing, publishes the band (both ends rounded up) in its status and
    /// says it in Ready; a group downstream follows what the band Target's
    /// view will apply, not what its autoscaler asked.
    #[test]
    fn a_band_is_published_not_written_and_chains_follow_what_the_view_applies() {
        let (band, downstream) = band_groups();
        let groups = [band.clone(), downstream.clone()];
        for (prefill, asked, applied) in [(2, 1, 4), (2, 6, 6), (3, 20, 12)] {
            let world = BTreeMap::from([
                (view("prefill-sv"), scaled(prefill)),
                (view("decode-sv"), scaled(asked)),
                (deployment("kv"), scaled(0)),
            ]);
            let pass = reconcile(&band, &groups, &world, &now());
            assert!(pass.scales.is_empty(), "{:?}", pass.scales);
            assert_eq!(
                pass.status.bands,
                [Band {
                    target: "decode-sv".to_owned(),
                    source_replicas: prefill,
                    min_replicas: 2 * prefill,
                    max_replicas: 4 * prefill,
                }]
            );
            assert_eq!(
                condition(&pass.status, "Ready").message,
                format!(
                    "decode-sv within [{}, {}] (ratio 2 to 4) follow prefill-sv={prefill}",
                    2 * prefill,
                    4 * prefill
                )
            );
            let pass = reconcile(&downstream, &groups, &world, &now());
            let kv = (applied + 1) / 2;
            assert_eq!(
                moves(&pass),
                [("kv".to_owned(), 0, kv, SCALED)],
                "decode asked {asked}, applies {applied}"
            );
        }
        // Ends equal: exactly what that ratio gives, rounded up.
        let mut exact = band.clone();
        let bindings = &mut exact
            .spec
            .scaling_strategy
            .inplace_config
            .as_mut()
            .expect("inplace")
            .bindings;
        bindings[1].min_ratio = Some(serde_json::from_value(json!(1.5)).expect("ratio"));
        bindings[1].max_ratio = Some(serde_json::from_value(json!(1.5)).expect("ratio"));
        let world = BTreeMap::from([
            (view("prefill-sv"), scaled(3)),
            (view("decode-sv"), scaled(1)),
        ]);
        let pass = reconcile(&exact, &[exact.clone()], &world, &now());
        let published = &pass.status.bands[0];
        assert_eq!((published.min_replicas, published.max_replicas), (5, 5));
    }

    #[test]
    fn chains_read_upstream_and_settle_in_one_pass() {
        // a -x2-> b -x3-> c -x1-> d; reconciling b-to-c reads a, and only a.
        let groups = vec![
            follow("c-to-d", "c", "d", 1),
            follow("b-to-c", "b", "c", 3),
            follow("a-to-b", "a", "b", 2),
            follow("x-to-y", "x", "y", 5),
        ];
        let me = groups[1].clone();
        assert_eq!(
            endpoints("b-to-c", &me.spec, &groups),
            [deployment("b"), deployment("c"), deployment("a")]
        );
        // a was scaled to 4 and b has not followed yet: c follows what b is
        // about to be (8), not what it is (1).
        let observed = BTreeMap::from([
            (deployment("a"), scaled(4)),
            (deployment("b"), scaled(1)),
            (deployment("c"), scaled(3)),
        ]);
        let pass = reconcile(&me, &groups, &observed, &now());
        assert_eq!(moves(&pass), [("c".to_owned(), 3, 24, SCALED)]);
        assert_eq!(
            pass.events[0].note,
            "source b has 8 replicas: c 3 -> 24 (ratio 3)"
        );
        assert_eq!(
            pass.status.current_replicas, 1,
            "the Source's replicas as read"
        );
        // Once b follows, a reconcile of the settled chain does nothing,
        // and the Source moving is not mistaken for drift.
        let stored = settle(&me, &pass);
        let settled = BTreeMap::from([
            (deployment("a"), scaled(4)),
            (deployment("b"), scaled(8)),
            (deployment("c"), scaled(24)),
        ]);
        let again = reconcile(&stored, &groups, &settled, &now());
        assert!(again.scales.is_empty());
        assert_eq!(again.status.current_replicas, 8);
        // a-to-b being deleted drives nothing: c follows b as it is.
        let mut going = groups.clone();
        going[2].metadata.deletion_timestamp = Some(now());
        assert_eq!(
            endpoints("b-to-c", &me.spec, &going),
            [deployment("b"), deployment("c")]
        );
        let pass = reconcile(&me, &going, &observed, &now());
        assert!(pass.scales.is_empty(), "c at 3 is b's 1 x 3: {pass:?}");
    }

    #[test]
    fn loops_and_shared_targets_stall_instead_of_fighting() {
        let groups = vec![follow("a-to-b", "a", "b", 1), follow("b-to-a", "b", "a", 1)];
        let me = groups[0].clone();
        let observed = BTreeMap::from([(deployment("a"), scaled(2)), (deployment("b"), scaled(5))]);
        let pass = reconcile(&me, &groups, &observed, &now());
        assert!(pass.scales.is_empty());
        let stalled = condition(&pass.status, "Stalled");
        assert_eq!(stalled.reason, "Cycle");
        assert!(
            stalled.message.contains("the bindings form a cycle"),
            "{}",
            stalled.message
        );

        let shared = vec![follow("a-to-c", "a", "c", 1), follow("b-to-c", "b", "c", 2)];
        let me = shared[0].clone();
        let pass = reconcile(
            &me,
            &shared,
            &BTreeMap::from([(deployment("a"), scaled(2)), (deployment("c"), scaled(1))]),
            &now(),
        );
        assert!(pass.scales.is_empty());
        assert_eq!(
            condition(&pass.status, "Stalled").message,
            "Target c is also the Target of ResourceScalingGroup b-to-c; it can follow one Source only"
        );
        // A loop elsewhere in the namespace does not stall an unrelated group.
        let mut elsewhere = groups.clone();
        elsewhere.push(follow("x-to-y", "x", "y", 2));
        let me = elsewhere[2].clone();
        let pass = reconcile(
            &me,
            &elsewhere,
            &BTreeMap::from([(deployment("x"), scaled(2)), (deployment("y"), scaled(1))]),
            &now(),
        );
        assert_eq!(moves(&pass), [("y".to_owned(), 1, 4, SCALED)]);
    }

    #[test]
    fn a_group_being_deleted_leaves_everything_as_it_is() {
        let mut rsg = seed();
        rsg.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-21T09:00:00Z".parse().expect("test time"),
            ));
        let settled = settle(
            &rsg,
            &reconcile(&seed(), NO_GROUPS, &world(10, 10, 20), &now()),
        );
        let pass = reconcile(&settled, NO_GROUPS, &world(30, 10, 7), &later());
        assert!(pass.scales.is_empty() && pass.events.is_empty(), "{pass:?}");
        assert_eq!(Some(&pass.status), settled.status.as_ref());
    }

    #[test]
    fn an_invalid_spec_is_reported() {
        let mut rsg = seed();
        rsg.spec
            .scaling_strategy
            .inplace_config
            .as_mut()
            .expect("inplace")
            .bindings[2]
            .name = "encode".into();
        let pass = reconcile(&rsg, NO_GROUPS, &world(10, 3, 3), &now());
        assert!(pass.scales.is_empty());
        assert_eq!(
            endpoints("pd-pool", &rsg.spec, NO_GROUPS),
            Vec::<Endpoint>::new()
        );
        let stalled = condition(&pass.status, "Stalled");
        assert_eq!(stalled.reason, "InvalidSpec");
        assert!(
            stalled.message.starts_with(
                "spec.scalingStrategy.inplaceConfig.bindings[2].name: \"encode\" names no role"
            ),
            "{}",
            stalled.message
        );
    }

    #[test]
    fn refusals_stall_and_keep_only_the_events_of_what_went_through() {
        let rsg = seed();
        let mut observed = world(10, 3, 3);
        observed.insert(deployment("router"), scaled(10));
        let mut groups_spec = rsg.spec.clone();
        // decode as a Deployment, so there are two objects to patch.
        groups_spec.target_resources.push(
            serde_json::from_value(
                json!({"name": "decode", "apiVersion": "apps/v1", "kind": "Deployment"}),
            )
            .expect("target"),
        );
        groups_spec.target_resources[0].sub_resources.pop();
        let mut rsg = rsg;
        rsg.spec = groups_spec;
        observed.remove(&rbg_role("Decode"));
        observed.insert(deployment("decode"), scaled(3));
        let pass = reconcile(&rsg, NO_GROUPS, &observed, &now());
        let requests = patches(&pass.scales).expect("patches");
        assert_eq!(requests.len(), 2);
        assert_eq!(
            requests[1].request,
            Request::Scale(json!({"spec": {"replicas": 20}}))
        );
        let (status, events) = refused(
            &rsg,
            &pass,
            &[(
                deployment("decode"),
                Problem::patch_refused("decode", "admission webhook denied the request"),
            )],
            &now(),
        );
        let stalled = condition(&status, "Stalled");
        assert_eq!(
            (stalled.reason.as_str(), stalled.message.as_str()),
            (
                "PatchRefused",
                "Target decode: the patch was refused: admission webhook denied the request"
            )
        );
        let reasons: Vec<(&str, bool)> = events.iter().map(|e| (e.reason, e.warning)).collect();
        assert_eq!(reasons, [(SCALED, false), (STALLED, true)]);
    }

    proptest! {
        /// Whatever the replicas and ratios, one pass puts every Target at
        /// `ceil(source × ratio)`, and the next pass writes nothing.
        #[test]
        fn one_pass_settles_the_seed(
            router in 0i32..1000,
            prefill in 0i32..1000,
            decode in 0i32..1000,
            ratios in (0u32..500, 0u32..3, 0u32..500, 0u32..3),
            recorded in proptest::option::of(0i32..1000),
        ) {
            let mut rsg = seed();
            let bindings = &mut rsg.spec.scaling_strategy.inplace_config.as_mut().expect("inplace").bindings;
            let (p, ps, d, ds) = ratios;
            let ratio = |m: u32, s: u32| serde_json::from_value(json!(rust_decimal::Decimal::new(i64::from(m), s).to_string())).expect("ratio");
            bindings[1].ratio = Some(ratio(p, ps));
            bindings[2].ratio = Some(ratio(d, ds));
            if let Some(recorded) = recorded {
                rsg.status = Some(ResourceScalingGroupStatus { observed_generation: Some(1), current_replicas: recorded, ..Default::default() });
            }
            let pass = reconcile(&rsg, NO_GROUPS, &world(router, prefill, decode), &now());
            let want = |m: u32, s: u32| ratio::target_replicas(router, rust_decimal::Decimal::new(i64::from(m), s), None, None);
            let mut after = world(router, prefill, decode);
            for scale in &pass.scales {
                prop_assert_ne!(scale.from.replicas(), scale.to);
                let index = if scale.name == "prefill" { 0 } else { 1 };
                after.insert(scale.endpoint.clone(), role(index, scale.to));
            }
            prop_assert_eq!(&after[&rbg_role("prefill")], &role(0, want(p, ps)));
            prop_assert_eq!(&after[&rbg_role("Decode")], &role(1, want(d, ds)));
            let drift = pass.scales.iter().any(|s| s.reason == DRIFT_REPAIRED);
            prop_assert_eq!(drift, recorded == Some(router) && !pass.scales.is_empty());
            let stored = settle(&rsg, &pass);
            let again = reconcile(&stored, NO_GROUPS, &after, &later());
            prop_assert!(again.scales.is_empty());
            prop_assert!(again.events.is_empty());
            prop_assert_eq!(Some(&again.status), stored.status.as_ref());
        }
    }

    #[test]
    fn scale_note_says_what_caused_the_scale() {
        let note = |cause| scale_note(cause, ("prefill", 2), ("decode", 5, 4), "ratio 2");
        assert_eq!(
            note(Cause::Drift),
            (
                DRIFT_REPAIRED,
                "decode was set to 5 by hand; set back to 4 (ratio 2 of prefill=2)".to_owned()
            )
        );
        assert_eq!(
            note(Cause::SourceScaled { was: 3 }),
            (
                SCALED,
                "source prefill scaled from 3 to 2: decode 5 -> 4 (ratio 2)".to_owned()
            )
        );
        assert_eq!(note(Cause::New).0, SCALED);
        assert_eq!(note(Cause::SpecChanged).0, SCALED);
    }
}
