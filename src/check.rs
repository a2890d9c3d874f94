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
use crate::render::{self, RenderError};

use installation::{Check, Outcome};

/// How `tandem check` prints its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// The reports for the CRDs in `paths`, and whether Tandem can deploy
/// InferenceServices with them.
pub fn check_files(paths: &[PathBuf]) -> Result<(Vec<Report>, bool), RenderError> {
    let objects = render::read_world(paths, "default")?;
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
    let reports = installed::report(&installation::installed(&snapshot));
    let checks = installation::judge(&snapshot, rustls::pki_types::UnixTime::now());
    let ready = installed::ready(&reports) && checks.iter().all(|c| c.outcome != Outcome::Fail);
    Ok((reports, checks, ready))
}

/// The reports as `format` says.
pub fn write(reports: &[Report], checks: &[Check], ready: bool, format: Format) -> String {
    match format {
        Format::Json => {
            let mut answer = serde_json::json!({"ready": ready, "checks": reports});
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
            (None, _) => "ok  ",
            (Some(_), false) => "old ",
            (Some(_), true) if report.required => "FAIL",
            (Some(_), true) => "none",
        };
        let found = if report.found.is_empty() {
            "not installed".to_owned()
        } else {
            format!("found {}", report.found.join(", "))
        };
        let _ = write!(
            out,
            "[{mark}] {} ({}): {found}",
            report.dependency, report.api
        );
        for (field, present) in &report.fields {
            let _ = write!(
                out,
                "; {field} {}",
                if *present { "present" } else { "absent" }
            );
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
    out.push_str(if ready {
        "Tandem can deploy InferenceServices here.\n"
    } else {
        "Tandem cannot deploy InferenceServices here: fix what FAIL names.\n"
    });
    out
}
