//! The certificates of a control plane: one CA of the run, which signs the
//! API server's serving certificate and every user's client certificate
//! (an identity is a certificate with the user as its common name and the
//! groups as its organisations).

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// A certificate authority and the certificates it signs.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Authority {
    /// The control plane's CA: it signs the API server's serving
    /// certificate and every user's client certificate.
    pub fn of_the_cluster() -> Authority {
        Authority::named("e2e-cluster-ca")
    }

    /// A CA whose subject is `common_name`.
    pub fn named(common_name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = distinguished(common_name, &[]);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a CA key"))
            .expect("a self-signed CA");
        Authority { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn serving(&self, hosts: &[&str]) -> Identity {
        let hosts: Vec<String> = hosts.iter().map(|h| (*h).to_owned()).collect();
        let mut params = CertificateParams::new(hosts).expect("serving params");
        params.distinguished_name = distinguished("e2e-serving", &[]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate: Kubernetes takes the common name as the user
    /// and each organisation as a group.
    pub fn client(&self, user: &str, groups: &[&str]) -> Identity {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params.distinguished_name = distinguished(user, groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Identity {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a signed certificate");
        Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

fn distinguished(common_name: &str, organisations: &[&str]) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    for organisation in organisations {
        name.push(DnType::OrganizationName, *organisation);
    }
    name
}
