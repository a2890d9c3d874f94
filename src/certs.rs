//! Self-signed certificates for the webhook: a CA and a serving certificate
//! signed by it, for development (`serve --dev`) and clusters without
//! cert-manager (`tandem certs`); and a CA with a client certificate for the
//! API server, when the webhook requires one (`tandem certs --client`). Clusters with cert-manager use
//! `manifests/cert-manager/certificate.yaml` instead (see `certs/README.md`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

pub const CA_FILE: &str = "ca.crt";
/// The CA's key, kept so that a later `tandem certs` (or `serve --dev`) signs
/// a new serving certificate with the same CA: the caBundle stays valid.
pub const CA_KEY_FILE: &str = "ca.key";
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("could not create the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("could not write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("a validity of {0} days does not fit the calendar")]
    Validity(u32),
    #[error("could not read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: {reason}")]
    Unusable { path: PathBuf, reason: String },
}

/// The longest validity `tandem certs --days` takes: ten years.
pub const MAX_DAYS: u32 = 3650;

/// Why `value` cannot be a Service or namespace name (a DNS-1123 label), if
/// it cannot.
pub fn label_error(value: &str) -> Option<String> {
    crate::api::dns1123_label_error(value)
}

/// Why `value` cannot be a name in a serving certificate (an IP address, or
/// a DNS-1123 subdomain, optionally with a leading `*.`), if it cannot.
pub fn host_error(value: &str) -> Option<String> {
    if value.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let name = value.strip_prefix("*.").unwrap_or(value);
    crate::api::dns1123_subdomain_error(name)
        .map(|reason| format!("must be an IP address or a DNS name: {reason}"))
}

/// A CA read back from a directory: its certificate, key and expiry.
pub struct ExistingCa {
    pub ca_pem: String,
    pub key_pem: String,
    pub not_after: time::OffsetDateTime,
}

/// What a directory holds of a CA: nothing, a CA that can sign (certificate
/// and key), or a certificate alone (made elsewhere, or by a Tandem older
/// than `ca.key`), which cannot sign.
pub enum FoundCa {
    None,
    Signing(ExistingCa),
    WithoutKey(PathBuf),
}

/// The CA in `dir`, if any.
pub fn find_ca(dir: &Path) -> Result<FoundCa, CertsError> {
    let ca_path = dir.join(CA_FILE);
    let key_path = dir.join(CA_KEY_FILE);
    let read = |path: &Path| {
        fs::read_to_string(path).map_err(|source| CertsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    if !ca_path.exists() {
        return Ok(FoundCa::None);
    }
    if !key_path.exists() {
        return Ok(FoundCa::WithoutKey(ca_path));
    }
    let ca_pem = read(&ca_path)?;
    let key_pem = read(&key_path)?;
    let unusable = |reason: String| CertsError::Unusable {
        path: ca_path.clone(),
        reason,
    };
    let not_after = validity(&ca_pem).map_err(unusable)?.1;
    let key = KeyPair::from_pem(&key_pem).map_err(|e| CertsError::Unusable {
        path: key_path.clone(),
        reason: e.to_string(),
    })?;
    rcgen::Issuer::from_ca_cert_pem(&ca_pem, key).map_err(|e| unusable(e.to_string()))?;
    Ok(FoundCa::Signing(ExistingCa {
        ca_pem,
        key_pem,
        not_after,
    }))
}

/// How long `serve --dev` certificates are valid.
pub const DEV_DAYS: u32 = 30;

/// A `serve --dev` certificate with less than this left is replaced.
pub const DEV_RENEW_BEFORE: time::Duration = time::Duration::days(7);

/// What `serve --dev` found in its certificate directory and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DevCerts {
    /// The CA and serving certificate there are kept (valid until then).
    Kept(time::OffsetDateTime),
    /// The CA there is kept and signs a new serving certificate, because
    /// the old one is unusable (why).
    Signed(String),
    /// A new CA and serving certificate, because the CA there is unusable
    /// (why).
    New(String),
}

/// Why the serving certificate `cert_pem` with key `key_pem` will not do for
/// `hosts` at `now`: it does not parse, its key is another, it is not yet
/// or no longer valid, it expires within [`DEV_RENEW_BEFORE`], or it lacks
/// one of the names. None when it will.
pub fn serving_problem(
    cert_pem: &str,
    key_pem: &str,
    hosts: &[String],
    now: time::OffsetDateTime,
) -> Option<String> {
    let key = match KeyPair::from_pem(key_pem) {
        Ok(key) => key,
        Err(e) => return Some(format!("{KEY_FILE} does not load: {e}")),
    };
    let read = parse_first(cert_pem, |cert| {
        let names: Vec<String> = cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|name| match name {
                        x509_parser::extensions::GeneralName::DNSName(dns) => {
                            Some((*dns).to_owned())
                        }
                        x509_parser::extensions::GeneralName::IPAddress(ip) => ip_text(ip),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let same_key = cert.public_key().raw == rcgen::PublicKeyData::subject_public_key_info(&key);
        let validity = cert.validity();
        (
            names,
            same_key,
            validity.not_before.to_datetime(),
            validity.not_after.to_datetime(),
        )
    });
    let (names, same_key, not_before, not_after) = match read {
        Ok(read) => read,
        Err(reason) => return Some(format!("{CERT_FILE}: {reason}")),
    };
    let missing: Vec<&String> = hosts.iter().filter(|h| !names.contains(h)).collect();
    if !same_key {
        Some(format!("{KEY_FILE} is not the key of {CERT_FILE}"))
    } else if not_before > now {
        Some(format!("{CERT_FILE} is valid only from {not_before}"))
    } else if not_after <= now.saturating_add(DEV_RENEW_BEFORE) {
        Some(format!("{CERT_FILE} expires at {not_after}"))
    } else if !missing.is_empty() {
        Some(format!(
            "{CERT_FILE} is for {}, not {}",
            names.join(", "),
            hosts.join(", ")
        ))
    } else {
        None
    }
}

/// An IP address in a certificate (4 or 16 bytes) as text.
fn ip_text(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes)
            .ok()
            .map(|b| std::net::IpAddr::from(b).to_string()),
        16 => <[u8; 16]>::try_from(bytes)
            .ok()
            .map(|b| std::net::IpAddr::from(b).to_string()),
        _ => None,
    }
}

/// `serve --dev`'s certificates in `dir` for `hosts`: the CA and serving
/// certificate there when they will do; else a new serving certificate
/// signed by the CA there when it can sign and is not near expiry; else a
/// new CA too. Returns what was done and the CA (for the caBundle).
pub fn dev_certs(dir: &Path, hosts: &[String]) -> Result<(DevCerts, String), CertsError> {
    let now = time::OffsetDateTime::now_utc();
    let ca = match find_ca(dir) {
        Ok(FoundCa::Signing(ca)) if ca.not_after > now.saturating_add(DEV_RENEW_BEFORE) => Ok(ca),
        Ok(FoundCa::Signing(ca)) => Err(format!("the CA expires at {}", ca.not_after)),
        Ok(FoundCa::WithoutKey(_)) => Err(format!("{CA_KEY_FILE} is missing")),
        Ok(FoundCa::None) => Err("none there before".to_owned()),
        Err(e) => Err(e.to_string()),
    };
    let ca = match ca {
        Ok(ca) => ca,
        Err(reason) => {
            let bundle = issue(hosts, DEV_DAYS)?;
            write(dir, &bundle)?;
            return Ok((DevCerts::New(reason), bundle.ca_pem));
        }
    };
    let read = |file: &str| fs::read_to_string(dir.join(file)).ok();
    let problem = match (read(CERT_FILE), read(KEY_FILE)) {
        (Some(cert), Some(key)) => serving_problem(&cert, &key, hosts, now),
        _ => Some(format!("{CERT_FILE} or {KEY_FILE} is missing")),
    };
    match problem {
        None => {
            let until = read(CERT_FILE)
                .and_then(|cert| validity(&cert).ok())
                .map_or(ca.not_after, |(_, until)| until);
            Ok((DevCerts::Kept(until), ca.ca_pem))
        }
        Some(reason) => {
            let bundle = issue_with(Some(&ca), hosts, DEV_DAYS)?;
            write(dir, &bundle)?;
            Ok((DevCerts::Signed(reason), bundle.ca_pem))
        }
    }
}

/// The first certificate of a PEM text, parsed.
fn parse_first<T>(
    pem_text: &str,
    read: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T,
) -> Result<T, String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes())
        .map_err(|e| format!("not a PEM certificate: {e}"))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| format!("not an X.509 certificate: {e}"))?;
    Ok(read(&cert))
}

/// When a PEM certificate starts and stops being valid.
pub fn validity(pem_text: &str) -> Result<(time::OffsetDateTime, time::OffsetDateTime), String> {
    parse_first(pem_text, |cert| {
        (
            cert.validity().not_before.to_datetime(),
            cert.validity().not_after.to_datetime(),
        )
    })
}

/// A CA certificate and a serving certificate and key signed by it, as PEM.
pub struct Bundle {
    pub ca_pem: String,
    /// The CA's private key (`ca.key`).
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Bundle {
    /// What goes into a webhook configuration's `clientConfig.caBundle`.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
}

/// The names a serving certificate for the in-cluster Service must carry.
pub fn service_hosts(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// The names of a loopback server, for `serve --dev` and tests.
pub fn loopback_hosts() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

/// A new ECDSA P-256 CA, valid for `days`, and a serving certificate for `hosts`
/// (DNS names or IP addresses) signed by it.
pub fn issue(hosts: &[String], days: u32) -> Result<Bundle, CertsError> {
    issue_with(None, hosts, days)
}

/// A serving certificate for `hosts`, valid for `days` (never beyond the
/// CA), signed by `ca`, or by a new CA when there is none.
pub fn issue_with(
    ca: Option<&ExistingCa>,
    hosts: &[String],
    days: u32,
) -> Result<Bundle, CertsError> {
    let mut leaf = CertificateParams::new(hosts.to_vec())?;
    leaf.distinguished_name = name(hosts.first().map_or("tandem-webhook", String::as_str));
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    match ca {
        None => sign("tandem-webhook-ca", leaf, days),
        Some(ca) => sign_with(ca, leaf, days),
    }
}

/// Signs `leaf` with an existing CA, valid for `days` but not beyond it.
fn sign_with(
    ca: &ExistingCa,
    mut leaf: CertificateParams,
    days: u32,
) -> Result<Bundle, CertsError> {
    let (now, until) = window(days)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.ca_pem, KeyPair::from_pem(&ca.key_pem)?)?;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.not_before = now;
    leaf.not_after = until.min(ca.not_after);
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(Bundle {
        ca_pem: ca.ca_pem.clone(),
        ca_key_pem: ca.key_pem.clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// From a minute ago (so a client whose clock is slightly behind accepts
/// it) to `days` later.
fn window(days: u32) -> Result<(time::OffsetDateTime, time::OffsetDateTime), CertsError> {
    let now = time::OffsetDateTime::now_utc()
        .checked_sub(time::Duration::minutes(1))
        .ok_or(CertsError::Validity(days))?;
    let until = now
        .checked_add(time::Duration::days(i64::from(days)))
        .ok_or(CertsError::Validity(days))?;
    Ok((now, until))
}

/// A new ECDSA P-256 CA, valid for `days`, and a client certificate with
/// common name `client` signed by it: the API server presents it to the
/// webhook (its admission kubeconfig), and `tandem serve --client-ca` takes
/// the CA.
pub fn issue_client(client: &str, days: u32) -> Result<Bundle, CertsError> {
    issue_client_with(None, client, days)
}

/// [`issue_client`], signed by `ca` when there is one.
pub fn issue_client_with(
    ca: Option<&ExistingCa>,
    client: &str,
    days: u32,
) -> Result<Bundle, CertsError> {
    let mut leaf = CertificateParams::new(Vec::<String>::new())?;
    leaf.distinguished_name = name(client);
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    match ca {
        None => sign("tandem-webhook-client-ca", leaf, days),
        Some(ca) => sign_with(ca, leaf, days),
    }
}

/// Makes a CA named `ca_name` and signs `leaf` with it, both valid for `days`.
fn sign(ca_name: &str, mut leaf: CertificateParams, days: u32) -> Result<Bundle, CertsError> {
    let (now, until) = window(days)?;

    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name = name(ca_name);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now;
    ca.not_after = until;
    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca, ca_key)?;

    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.not_before = now;
    leaf.not_after = until;
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &ca)?;

    Ok(Bundle {
        ca_pem: ca.pem(),
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name.push(DnType::OrganizationName, "Tandem");
    name
}

/// Writes `ca.crt`, `ca.key`, `tls.crt` and `tls.key` into `dir` (created
/// if missing); the keys are readable by their owner only.
pub fn write(dir: &Path, bundle: &Bundle) -> Result<(), CertsError> {
    let fail = |path: &Path| {
        let path = path.to_owned();
        move |source| CertsError::Write { path, source }
    };
    fs::create_dir_all(dir).map_err(fail(dir))?;
    for (file, pem) in [(CA_FILE, &bundle.ca_pem), (CERT_FILE, &bundle.cert_pem)] {
        let path = dir.join(file);
        fs::write(&path, pem).map_err(fail(&path))?;
    }
    for (file, pem) in [
        (CA_KEY_FILE, &bundle.ca_key_pem),
        (KEY_FILE, &bundle.key_pem),
    ] {
        let key = dir.join(file);
        write_private(&key, pem).map_err(fail(&key))?;
    }
    Ok(())
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &str) -> io::Result<()> {
    fs::write(path, contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_a_ca_and_a_serving_certificate_for_the_hosts() {
        let bundle = issue(&loopback_hosts(), 1).unwrap();
        assert!(bundle.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(bundle.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(bundle.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(bundle.ca_bundle())
            .unwrap();
        assert_eq!(decoded, bundle.ca_pem.as_bytes());
        assert_ne!(
            issue(&loopback_hosts(), 1).unwrap().ca_pem,
            bundle.ca_pem,
            "a new CA each time"
        );
    }

    #[test]
    fn a_serving_certificate_will_not_do_for_other_names_another_key_or_near_expiry() {
        let now = time::OffsetDateTime::now_utc();
        let hosts = loopback_hosts();
        let good = issue(&hosts, DEV_DAYS).unwrap();
        assert_eq!(
            serving_problem(&good.cert_pem, &good.key_pem, &hosts, now),
            None
        );
        let other = issue(&["a.example".to_owned()], DEV_DAYS).unwrap();
        let problem = serving_problem(&other.cert_pem, &other.key_pem, &hosts, now).unwrap();
        assert!(
            problem.contains("is for a.example, not localhost"),
            "{problem}"
        );
        let problem = serving_problem(&good.cert_pem, &other.key_pem, &hosts, now).unwrap();
        assert_eq!(problem, "tls.key is not the key of tls.crt");
        let soon = issue(&hosts, 3).unwrap();
        let problem = serving_problem(&soon.cert_pem, &soon.key_pem, &hosts, now).unwrap();
        assert!(problem.starts_with("tls.crt expires at"), "{problem}");
    }

    #[test]
    fn writes_the_three_files() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("nested");
        let bundle = issue(&service_hosts("tandem-webhook", "tandem-system"), 1).unwrap();
        write(&target, &bundle).unwrap();
        assert_eq!(
            fs::read_to_string(target.join(CA_FILE)).unwrap(),
            bundle.ca_pem
        );
        assert_eq!(
            fs::read_to_string(target.join(CERT_FILE)).unwrap(),
            bundle.cert_pem
        );
        assert_eq!(
            fs::read_to_string(target.join(KEY_FILE)).unwrap(),
            bundle.key_pem
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(target.join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
