//! `tandem check`: which dependencies are installed, from files or the
//! cluster, and what Tandem will do with them.

use std::process::ExitCode;

use super::{CheckArgs, ClusterSource};

pub(super) fn check(args: &CheckArgs) -> ExitCode {
    let answer = if args.files.is_empty() {
        check_cluster(args)
    } else {
        crate::check::check_files(&args.files).map(|(reports, ready)| (reports, Vec::new(), ready))
    };
    match answer {
        Ok((reports, checks, ready)) => {
            print!(
                "{}",
                crate::check::write(&reports, &checks, ready, args.output)
            );
            if ready {
                ExitCode::from(crate::exit::DONE)
            } else {
                ExitCode::from(crate::exit::NO)
            }
        }
        Err(e) => {
            let said = crate::check::write_error(&e, args.output);
            match args.output {
                crate::check::Format::Json => print!("{said}"),
                crate::check::Format::Text => eprint!("{said}"),
            }
            ExitCode::from(crate::exit::TROUBLE)
        }
    }
}

/// `tandem check` of the cluster the kubeconfig names: the reports, the
/// checks of Tandem's installation, and whether all is there.
fn check_cluster(
    args: &CheckArgs,
) -> Result<
    (
        Vec<crate::plan::shared::installed::Report>,
        Vec<crate::check::installation::Check>,
        bool,
    ),
    String,
> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    let source = ClusterSource {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    runtime.block_on(async {
        let config = source.config(false).await?.ok_or(
            "no cluster to check: give -f CRD files, or a kubeconfig ($KUBECONFIG, --kubeconfig)",
        )?;
        let server = config.cluster_url.to_string();
        let client = kube::Client::try_from(config)
            .map_err(|e| format!("the cluster at {server}: {}", crate::check::causes(&e)))?;
        crate::check::check_cluster(&client, &args.namespace)
            .await
            .map_err(|e| format!("the cluster at {server}: {e}"))
    })
}
