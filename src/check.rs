//! `tandem check`: which of the projects Tandem writes objects of are
//! installed, and what Tandem will do with what is there, one line per
//! dependency, in the manner of `linkerd check`. It reads
//! CustomResourceDefinition files (`-f FILE|DIR`), or a cluster, where it
//! also checks Tandem's own installation ([`installation`]); the decisions
//! are [`crate::plan::shared::installed`]'s.

pub mod installation;

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::plan::shared::installed::{self, Installed, Report};
use crate::plan::shared::native_gang;
use crate::render;

use installation::{Check, Outcome};

/// How `tandem check` prints its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// The reports for the CRDs in `paths`, and whether Tandem can deploy
/// InferenceServices with them.
pub fn check_files(paths: &[PathBuf]) -> Result<(Vec<Report>, bool), String> {
    let objects = render::read_world(paths, "default").map_err(|e| e.to_string())?;
    if !objects
        .iter()
        .any(|o| o["kind"] == "CustomResourceDefinition")
    {
        let given: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "no CustomResourceDefinition in {} ({} other object(s) read): check -f reads the CRD \
             files of the projects Tandem writes objects of (LeaderWorkerSet, Volcano, the \
             Inference Extension, the Gateway API); without -f it checks the cluster",
            given.join(", "),
            objects.len()
        ));
    }
    let reports = installed::report(&Installed::from_crds(&objects));
    let ready = installed::ready(&reports);
    Ok((reports, ready))
}

/// The reports on the cluster's dependencies and on Tandem's installation
/// in `namespace`, and whether everything needed is there (no dependency
/// that every service needs is missing, no installation check failed).
pub async fn check_cluster(
    client: &kube::Client,
    namespace: &str,
) -> Result<(Vec<Report>, Vec<Check>, bool), String> {
    let snapshot = installation::gather(client, namespace).await?;
    let mut reports = installed::report(&installation::installed(&snapshot));
    reports.push(native_gang::report(&snapshot.native_gang));
    let checks = installation::judge(&snapshot, rustls::pki_types::UnixTime::now());
    let ready = installed::ready(&reports) && checks.iter().all(|c| c.outcome != Outcome::Fail);
    Ok((reports, checks, ready))
}

/// The reports as `format` says.
pub fn write(reports: &[Report], checks: &[Check], ready: bool, format: Format) -> String {
    match format {
        Format::Json => {
            let mut answer = serde_json::json!({
                "ready": ready, "except": ruled_out(reports), "checks": reports,
            });
            if !checks.is_empty() {
                answer["installation"] = serde_json::json!(checks);
            }
            // A Report is strings, booleans and maps of them: it serialises.
            serde_json::to_string_pretty(&answer).unwrap_or_default() + "\n"
        }
        Format::Text => text(reports, checks, ready),
    }
}

fn text(reports: &[Report], checks: &[Check], ready: bool) -> String {
    let mut out = String::new();
    for report in reports {
        let mark = match (&report.install, report.found.is_empty()) {
            (None, false) => "ok  ",
            // Nothing to install: what Tandem does not write yet.
            (None, true) => "none",
            (Some(_), false) => "old ",
            (Some(_), true) if report.required => "FAIL",
            (Some(_), true) => "none",
        };
        let found = if report.found.is_empty() && report.fields_probed {
            // An API of Kubernetes' own, not something to install.
            "not served".to_owned()
        } else if report.found.is_empty() {
            "not installed".to_owned()
        } else {
            format!("found {}", report.found.join(", "))
        };
        let _ = write!(
            out,
            "[{mark}] {} ({}): {found}",
            report.dependency, report.api
        );
        let (yes, no) = if report.fields_probed {
            ("kept", "dropped")
        } else {
            ("present", "absent")
        };
        for (field, present) in &report.fields {
            let _ = write!(out, "; {field} {}", if *present { yes } else { no });
        }
        let _ = write!(out, "\n       Tandem: {}", report.effect);
        if let Some(install) = report.install {
            let _ = write!(out, "\n       to do: {install}");
        }
        out.push('\n');
    }
    for check in checks {
        let mark = match check.outcome {
            Outcome::Ok => "ok  ",
            Outcome::Fail => "FAIL",
            Outcome::Unknown => "??  ",
        };
        let _ = write!(out, "[{mark}] {}: {}", check.check, check.found);
        if let Some(fix) = &check.fix {
            let _ = write!(out, "\n       to do: {fix}");
        }
        out.push('\n');
    }
    let except = ruled_out(reports);
    match (ready, except.is_empty()) {
        (true, true) => out.push_str("Tandem can deploy InferenceServices here.\n"),
        (true, false) => {
            let _ = writeln!(
                out,
                "Tandem can deploy InferenceServices here, except {}.",
                except.join("; ")
            );
        }
        (false, _) => {
            out.push_str("Tandem cannot deploy InferenceServices here: fix what FAIL names.\n")
        }
    }
    out
}

/// What the dependencies that are missing or too old rule out, each once.
pub fn ruled_out(reports: &[Report]) -> Vec<&'static str> {
    let mut except: Vec<&'static str> = Vec::new();
    for limit in reports.iter().filter_map(|r| r.rules_out) {
        if !except.contains(&limit) {
            except.push(limit);
        }
    }
    except
}

pub use crate::logging::causes;

/// An error of `tandem check`, as `format` says: the message, or under
/// `-o json` an object a script can read (`ready` false and the `error`).
pub fn write_error(error: &str, format: Format) -> String {
    match format {
        Format::Json => {
            serde_json::to_string_pretty(&serde_json::json!({"ready": false, "error": error}))
                .unwrap_or_default()
                + "\n"
        }
        Format::Text => format!("error: {error}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::shared::native_gang::NativeGang;
    use std::collections::BTreeMap;

    #[test]
    fn kubernetes_gang_api_reads_as_kept_or_dropped_and_unserved_as_none() {
        let served = native_gang::report(&NativeGang {
            pod_groups: true,
            workloads: true,
            kept: BTreeMap::from([("schedulingConstraints", true), ("priority", false)]),
            unknown: None,
        });
        let text = write(&[served], &[], true, Format::Text);
        assert!(
            text.starts_with(
                "[ok  ] Kubernetes PodGroup (scheduling.k8s.io/v1alpha2 PodGroup): found \
                 v1alpha2 PodGroup, v1alpha2 Workload; priority dropped; schedulingConstraints \
                 kept\n"
            ),
            "{text}"
        );
        let unserved = native_gang::report(&NativeGang::default());
        let text = write(&[unserved], &[], true, Format::Text);
        assert!(
            text.starts_with(
                "[none] Kubernetes PodGroup (scheduling.k8s.io/v1alpha2 PodGroup): not served\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with("Tandem can deploy InferenceServices here.\n"),
            "{text}"
        );
    }
}
