//! `tandem render`: what Tandem would do to a world of objects, without a
//! cluster.

use std::process::ExitCode;

use super::{RenderArgs, fail};
use crate::render;

pub(super) fn render(args: RenderArgs) -> ExitCode {
    let mut options = render::Options::default();
    options.plan.router.epp_image = args.epp_image;
    options.api_versions = args.api_versions.into_iter().collect();
    let result = render::read_world(&args.files, &args.namespace).and_then(|world| {
        let now = args
            .now
            .or_else(|| render::newest_time(&world))
            .unwrap_or_else(wall_clock);
        options.now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
        render::render(world, &options)
    });
    match result {
        Ok(rendered) => {
            for warning in &rendered.warnings {
                eprintln!("Warning: {warning}");
            }
            match rendered.write(args.output) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!("could not write the output: {e}")),
            }
        }
        Err(render::RenderError::Denied(denials)) => {
            for denial in &denials {
                eprintln!("{denial}");
            }
            ExitCode::from(crate::exit::NO)
        }
        Err(e) => {
            let code = e.exit_code();
            eprintln!("{}{e}", crate::exit::ERROR_PREFIX);
            ExitCode::from(code)
        }
    }
}

/// The wall clock to the second, as the API server writes times.
fn wall_clock() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
}
