//! The webhook's TLS: TLS 1.2 and 1.3 only, a serving certificate that is
//! replaced without a restart when the files in the certificate directory
//! change, and optionally client certificates required of every caller (the
//! API server), verified against a CA given with `--client-ca`.
//!
//! Kubernetes updates a mounted Secret by writing a new timestamped directory
//! and swapping the `..data` symlink, so the directory is watched, not the
//! files. A change that does not load (half-written, or a key that does not
//! match the certificate) is logged and the previous certificate stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio::sync::mpsc;

use crate::certs::{CERT_FILE, KEY_FILE};
use crate::server::metrics::{CertificateReloadLabels, Metrics};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("could not read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path}: {reason}")]
    BadPem { path: PathBuf, reason: String },
    #[error("the key in {key} does not fit the certificate in {cert}: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("cannot verify client certificates with the CAs in {path}: {reason}")]
    ClientCa { path: PathBuf, reason: String },
    #[error("could not watch {path} for certificate changes: {source}")]
    Watch {
        path: PathBuf,
        source: notify::Error,
    },
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads `tls.crt` (the chain) and `tls.key` from `dir` and checks they belong together.
pub fn load(dir: &Path) -> Result<CertifiedKey, TlsError> {
    let cert_path = dir.join(CERT_FILE);
    let key_path = dir.join(KEY_FILE);
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let (cert_pem, key_pem) = (read(&cert_path)?, read(&key_path)?);
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: cert_path.clone(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_path });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::BadPem {
        path: key_path.clone(),
        reason: e.to_string(),
    })?;
    let certified =
        CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Mismatch {
            cert: cert_path.clone(),
            key: key_path.clone(),
            reason: e.to_string(),
        })?;
    certified.keys_match().map_err(|e| TlsError::Mismatch {
        cert: cert_path,
        key: key_path,
        reason: e.to_string(),
    })?;
    Ok(certified)
}

/// Hands every new TLS handshake the current certificate.
#[derive(Debug)]
pub struct CertificateResolver {
    current: ArcSwap<CertifiedKey>,
}

impl CertificateResolver {
    pub fn new(initial: CertifiedKey) -> Self {
        CertificateResolver {
            current: ArcSwap::from_pointee(initial),
        }
    }

    pub fn replace(&self, next: CertifiedKey) {
        self.current.store(Arc::new(next));
    }

    /// The leaf certificate being served now.
    pub fn current_leaf(&self) -> Option<CertificateDer<'static>> {
        self.current.load().cert.first().cloned()
    }
}

impl ResolvesServerCert for CertificateResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The CAs that client certificates must chain to: every certificate in the
/// PEM file at `path`.
pub fn load_client_cas(path: &Path) -> Result<ClientCas, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| TlsError::BadPem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        roots.add(cert).map_err(|e| TlsError::ClientCa {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(ClientCas {
        path: path.to_owned(),
        roots,
    })
}

/// CAs for client certificates, with the file they came from (for errors).
#[derive(Clone, Debug)]
pub struct ClientCas {
    path: PathBuf,
    roots: RootCertStore,
}

/// TLS 1.3 and 1.2 only (rustls offers nothing older), HTTP/2 and HTTP/1.1.
/// With `client_cas`, a client must present a certificate that chains to one
/// of them, or the handshake fails; without, no client certificate is asked.
pub fn server_config(
    resolver: Arc<CertificateResolver>,
    client_cas: Option<&ClientCas>,
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_cas {
        None => builder.with_no_client_auth(),
        Some(cas) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(
                Arc::new(cas.roots.clone()),
                provider(),
            )
            .build()
            .map_err(|e| TlsError::ClientCa {
                path: cas.path.clone(),
                reason: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Watches `dir` and swaps the certificate in `resolver` whenever its files
/// change. The watch lasts as long as the returned watcher is kept.
pub fn watch(
    dir: &Path,
    resolver: Arc<CertificateResolver>,
    metrics: Arc<Metrics>,
) -> Result<notify::RecommendedWatcher, TlsError> {
    let (changed, mut changes) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Any change in the directory may be the new pair; reading is cheap.
        if event.is_ok_and(|event| may_change_the_pair(&event.kind)) {
            let _ = changed.send(());
        }
    })
    .map_err(|source| TlsError::Watch {
        path: dir.to_owned(),
        source,
    })?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(|source| TlsError::Watch {
            path: dir.to_owned(),
            source,
        })?;
    let dir = dir.to_owned();
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            // Writers touch several files in a burst; settle, then drain.
            tokio::time::sleep(Duration::from_millis(50)).await;
            while changes.try_recv().is_ok() {}
            reload(&dir, &resolver, &metrics);
        }
    });
    Ok(watcher)
}

/// Whether an event in the certificate directory can mean a new pair: a
/// file or link created, written (or closed after writing), renamed or
/// removed. Not a file opened,
/// read or closed unwritten: reading the pair to reload it makes exactly
/// those, and taking them for changes made the watcher reload its own reads,
/// about 20 times a second, for as long as the server ran.
fn may_change_the_pair(kind: &notify::EventKind) -> bool {
    use notify::EventKind::Access;
    use notify::event::{AccessKind, AccessMode};
    !matches!(
        kind,
        Access(AccessKind::Open(_) | AccessKind::Read | AccessKind::Close(AccessMode::Read))
    )
}

/// When `leaf` expires, in seconds since the Unix epoch; None when it is
/// not a certificate x509-parser reads (rustls served it, so it is one).
pub fn expires_at(leaf: &CertificateDer<'_>) -> Option<i64> {
    let (_, certificate) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(certificate.validity().not_after.timestamp())
}

/// Sets the expiry gauge from the certificate `resolver` serves now.
pub fn record_expiry(resolver: &CertificateResolver, metrics: &Metrics) {
    let expiry = resolver
        .current_leaf()
        .as_ref()
        .and_then(expires_at)
        .unwrap_or(0);
    metrics.certificate_expiry.set(expiry);
}

fn reload(dir: &Path, resolver: &CertificateResolver, metrics: &Metrics) {
    match load(dir) {
        Ok(next) => {
            if resolver.current_leaf().as_ref() == next.cert.first() {
                return;
            }
            resolver.replace(next);
            record_expiry(resolver, metrics);
            metrics
                .certificate_reloads
                .get_or_create(&CertificateReloadLabels { result: "loaded" })
                .inc();
            tracing::info!(dir = %dir.display(), "serving certificate reloaded");
        }
        Err(error) => {
            metrics
                .certificate_reloads
                .get_or_create(&CertificateReloadLabels { result: "rejected" })
                .inc();
            tracing::warn!(dir = %dir.display(), %error, "certificate files changed but do not load; still serving the previous certificate");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_the_pair_is_not_a_change_of_it() {
        use notify::EventKind;
        use notify::event::{
            AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode,
        };
        for read in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert!(!may_change_the_pair(&read), "{read:?}");
        }
        for change in [
            EventKind::Create(CreateKind::File),
            EventKind::Create(CreateKind::Any),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Any,
            EventKind::Other,
        ] {
            assert!(may_change_the_pair(&change), "{change:?}");
        }
    }
    use crate::certs;

    #[test]
    fn loads_a_matching_pair() {
        let dir = tempfile::tempdir().unwrap();
        certs::write(
            dir.path(),
            &certs::issue(&certs::loopback_hosts(), 1).unwrap(),
        )
        .unwrap();
        let loaded = load(dir.path()).unwrap();
        assert_eq!(loaded.cert.len(), 1);
    }

    /// The gauge the expiry alert reads holds the served leaf's notAfter.
    #[test]
    fn the_expiry_of_the_served_certificate_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        certs::write(
            dir.path(),
            &certs::issue(&certs::loopback_hosts(), 3).unwrap(),
        )
        .unwrap();
        let resolver = CertificateResolver::new(load(dir.path()).unwrap());
        let metrics = Metrics::default();
        assert_eq!(metrics.certificate_expiry.get(), 0);
        record_expiry(&resolver, &metrics);
        let now = jiff::Timestamp::now().as_second();
        let left = metrics.certificate_expiry.get() - now;
        assert!(
            (3 * 86_400 - 3_600..=3 * 86_400 + 3_600).contains(&left),
            "expires in {left} s, not in about 3 days"
        );
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(&format!(
                "tandem_certificate_expiry_timestamp_seconds {}",
                metrics.certificate_expiry.get()
            )),
            "{text}"
        );
    }

    #[test]
    fn refuses_a_key_of_another_certificate() {
        let dir = tempfile::tempdir().unwrap();
        certs::write(
            dir.path(),
            &certs::issue(&certs::loopback_hosts(), 1).unwrap(),
        )
        .unwrap();
        let other = certs::issue(&certs::loopback_hosts(), 1).unwrap();
        std::fs::write(dir.path().join(KEY_FILE), other.key_pem).unwrap();
        let error = load(dir.path()).unwrap_err();
        assert!(matches!(error, TlsError::Mismatch { .. }), "{error}");
    }

    #[test]
    fn client_cas_are_read_from_pem_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client-ca.crt");
        let error = load_client_cas(&path).unwrap_err().to_string();
        assert!(
            error.starts_with("could not read ") && error.contains("client-ca.crt"),
            "{error}"
        );
        std::fs::write(&path, "no certificate here").unwrap();
        let error = load_client_cas(&path).unwrap_err().to_string();
        assert!(
            error.ends_with("client-ca.crt holds no PEM certificate"),
            "{error}"
        );
        let (one, two) = (
            certs::issue(&certs::loopback_hosts(), 1).unwrap(),
            certs::issue(&certs::loopback_hosts(), 1).unwrap(),
        );
        std::fs::write(&path, format!("{}{}", one.ca_pem, two.ca_pem)).unwrap();
        let cas = load_client_cas(&path).unwrap();
        assert_eq!(cas.roots.len(), 2);
        let resolver = Arc::new(CertificateResolver::new(
            CertifiedKey::from_der(
                vec![CertificateDer::from_pem_slice(one.cert_pem.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(one.key_pem.as_bytes()).unwrap(),
                &provider(),
            )
            .unwrap(),
        ));
        assert!(server_config(resolver, Some(&cas)).is_ok());
    }

    #[test]
    fn names_the_file_that_is_missing_or_empty() {
        let dir = tempfile::tempdir().unwrap();
        let error = load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("tls.crt"), "{error}");
        std::fs::write(dir.path().join(CERT_FILE), "not pem").unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "not pem").unwrap();
        let error = load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("holds no PEM certificate"), "{error}");
    }
}
