//! Self-signed certificates for the webhook: a CA and a serving certificate
//! signed by it, for development (`serve --dev`) and clusters without
//! cert-manager (`tandem certs`); and a CA with a client certificate for the
//! API server, when the webhook requires one (`tandem certs --client`). Clusters with cert-manager use
//! `manifests/certificate.yaml` instead (see `certs/README.md`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

pub const CA_FILE: &str = "ca.crt";
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
}

/// A CA certificate and a serving certificate and key signed by it, as PEM.
pub struct Bundle {
    pub ca_pem: String,
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
    let mut leaf = CertificateParams::new(hosts.to_vec())?;
    leaf.distinguished_name = name(hosts.first().map_or("tandem-webhook", String::as_str));
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    sign("tandem-webhook-ca", leaf, days)
}

/// A new ECDSA P-256 CA, valid for `days`, and a client certificate with
/// common name `client` signed by it: the API server presents it to the
/// webhook (its admission kubeconfig), and `tandem serve --client-ca` takes
/// the CA.
pub fn issue_client(client: &str, days: u32) -> Result<Bundle, CertsError> {
    let mut leaf = CertificateParams::new(Vec::<String>::new())?;
    leaf.distinguished_name = name(client);
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign("tandem-webhook-client-ca", leaf, days)
}

/// Makes a CA named `ca_name` and signs `leaf` with it, both valid for `days`.
fn sign(ca_name: &str, mut leaf: CertificateParams, days: u32) -> Result<Bundle, CertsError> {
    // Backdated a minute so a client whose clock is slightly behind accepts it.
    let now = time::OffsetDateTime::now_utc()
        .checked_sub(time::Duration::minutes(1))
        .ok_or(CertsError::Validity(days))?;
    let until = now
        .checked_add(time::Duration::days(i64::from(days)))
        .ok_or(CertsError::Validity(days))?;

    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name = name(ca_name);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now;
    ca.not_after = until;
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.not_before = now;
    leaf.not_after = until;
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &ca)?;

    Ok(Bundle {
        ca_pem: ca.pem(),
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

/// Writes `ca.crt`, `tls.crt` and `tls.key` into `dir` (created if missing);
/// the key is readable by its owner only.
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
    let key = dir.join(KEY_FILE);
    write_private(&key, &bundle.key_pem).map_err(fail(&key))
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
