//! `tandem check`: which of the projects Tandem writes objects of are
//! installed, and what Tandem will do with what is there, one line per
//! dependency, in the manner of `linkerd check`. It reads
//! CustomResourceDefinition files (`-f FILE|DIR`); the decisions are
//! [`crate::plan::shared::installed`]'s.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::plan::shared::installed::{self, Installed, Report};
use crate::render::{self, RenderError};

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

/// The reports as `format` says.
pub fn write(reports: &[Report], ready: bool, format: Format) -> String {
    match format {
        Format::Json => {
            let answer = serde_json::json!({"ready": ready, "checks": reports});
            // A Report is strings, booleans and maps of them: it serialises.
            serde_json::to_string_pretty(&answer).unwrap_or_default() + "\n"
        }
        Format::Text => text(reports, ready),
    }
}

fn text(reports: &[Report], ready: bool) -> String {
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
    out.push_str(if ready {
        "Tandem can deploy InferenceServices here.\n"
    } else {
        "Tandem cannot deploy InferenceServices here: install what FAIL names.\n"
    });
    out
}
