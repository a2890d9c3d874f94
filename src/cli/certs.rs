//! `tandem certs`: a CA and a serving (or client) certificate for the
//! webhook, kept across runs unless told otherwise.

use std::process::ExitCode;

use super::{CertsArgs, fail};
use crate::certs;

pub(super) fn make_certs(args: CertsArgs) -> ExitCode {
    let ca = match existing_ca(&args.out_dir, args.force) {
        Ok(ca) => ca,
        Err(message) => return fail(message),
    };
    if let Some(ca) = &ca {
        eprintln!(
            "signing with the CA already in {} (valid until {}): the caBundle is unchanged",
            args.out_dir.display(),
            ca.not_after
        );
    }
    if let Some(client) = &args.client {
        let written = certs::issue_client_with(ca.as_ref(), client, args.days)
            .and_then(|bundle| certs::write(&args.out_dir, &bundle));
        if let Err(e) = written {
            return fail(e);
        }
        eprintln!(
            "wrote {dir}/ca.crt (for tandem serve --client-ca) and {dir}/ca.key ({ca}), and {dir}/tls.crt and {dir}/tls.key (client certificate for {client}, for the API server)",
            dir = args.out_dir.display(),
            ca = which_ca(ca.as_ref()),
        );
        return ExitCode::SUCCESS;
    }
    let mut hosts = certs::service_hosts(&args.service, &args.namespace);
    hosts.extend(args.hosts);
    let bundle = match certs::issue_with(ca.as_ref(), &hosts, args.days) {
        Ok(bundle) => bundle,
        Err(e) => return fail(e),
    };
    if let Err(e) = certs::write(&args.out_dir, &bundle) {
        return fail(e);
    }
    eprintln!(
        "wrote {dir}/ca.crt and {dir}/ca.key ({ca}), and {dir}/tls.crt and {dir}/tls.key (serving certificate for {hosts})\n\
         the caBundle of the webhook configurations (base64 of ca.crt) follows on stdout:",
        dir = args.out_dir.display(),
        ca = which_ca(ca.as_ref()),
        hosts = hosts.join(", ")
    );
    println!("{}", bundle.ca_bundle());
    ExitCode::SUCCESS
}

/// How `certs` names the CA it wrote.
fn which_ca(kept: Option<&certs::ExistingCa>) -> &'static str {
    if kept.is_some() {
        "the CA kept"
    } else {
        "a new CA"
    }
}

/// The CA in `dir` that signs the new certificate: None to make a new one
/// (there is none, or --force). A CA that cannot sign (no key, expired) is
/// refused with exit status 2 rather than replaced without a word.
fn existing_ca(dir: &std::path::Path, force: bool) -> Result<Option<certs::ExistingCa>, String> {
    if force {
        return Ok(None);
    }
    let found = certs::find_ca(dir).map_err(|e| e.to_string())?;
    match found {
        certs::FoundCa::None => Ok(None),
        certs::FoundCa::WithoutKey(path) => Err(format!(
            "{} exists but its key {} does not, so it cannot sign a new certificate: pass --force to replace the CA (then replace every caBundle made from it)",
            path.display(),
            dir.join(certs::CA_KEY_FILE).display()
        )),
        certs::FoundCa::Signing(ca) if ca.not_after <= time::OffsetDateTime::now_utc() => {
            Err(format!(
                "the CA in {} expired at {}: pass --force to replace it (then replace every caBundle made from it)",
                dir.display(),
                ca.not_after
            ))
        }
        certs::FoundCa::Signing(ca) => Ok(Some(ca)),
    }
}
