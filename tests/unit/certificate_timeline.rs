//! The webhook's certificates over five years, from the manifests
//! themselves (issue 27): at every hour the caBundle cainjector puts into the
//! webhook configurations must verify the serving certificate in use, or the
//! API server refuses every call to Tandem's fail-closed webhooks.
//!
//! The model follows cert-manager's documented rules:
//! - a Certificate's `duration` defaults to 90 days (2160h), and it is
//!   renewed at `notAfter - renewBefore`, `renewBefore` defaulting to a third
//!   of the duration;
//! - a renewed Certificate gets a new key with `rotationPolicy: Always`, and
//!   keeps its key with `Never`;
//! - a CA issuer signs with the CA certificate's key whatever the CA's own
//!   expiry (cert-manager issue #5864: issued certificates may outlive the
//!   CA), and the Secret of a certificate it signs holds, as `ca.crt`, the CA
//!   certificate current at that signing;
//! - `cert-manager.io/inject-ca-from: NS/NAME` injects the `ca.crt` of that
//!   Certificate's Secret: for the self-signed CA, the CA certificate itself
//!   (updated at each renewal); for the serving certificate, the copy made
//!   when it was last issued.
//!
//! A bundle verifies a serving certificate when both are within their dates
//! (Go's x509 checks the root's dates too) and the serving certificate was
//! signed with the bundle certificate's key.

use serde_json::Value;

const HOUR: u64 = 1;
const FIVE_YEARS: u64 = 5 * 365 * 24 * HOUR;

/// Go's `time.ParseDuration` for the forms cert-manager manifests use
/// (`2160h`, `90m`, `1h30m`), in whole hours.
fn hours(text: &str) -> u64 {
    let mut total_minutes = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number
            .parse()
            .unwrap_or_else(|_| panic!("a duration: {text}"));
        number.clear();
        total_minutes += match c {
            'h' => n * 60,
            'm' => n,
            's' => 0,
            other => panic!("unit {other} in {text}"),
        };
    }
    assert!(number.is_empty(), "a duration ends with its unit: {text}");
    total_minutes / 60
}

/// A Certificate's schedule: how long each issue lives, when it is renewed
/// (hours before the end), and whether the key changes.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    duration: u64,
    renew_before: u64,
    new_key: bool,
}

impl Schedule {
    fn of(certificate: &Value) -> Schedule {
        let spec = &certificate["spec"];
        let duration = spec["duration"].as_str().map_or(2160, hours);
        let renew_before = spec["renewBefore"].as_str().map_or(duration / 3, hours);
        // cert-manager's default rotationPolicy is Always since v1.18.
        let new_key = spec["privateKey"]["rotationPolicy"].as_str() != Some("Never");
        assert!(renew_before < duration, "{certificate}");
        Schedule {
            duration,
            renew_before,
            new_key,
        }
    }
}

/// One issued certificate.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Issued {
    not_before: u64,
    not_after: u64,
    /// Which key signed it.
    signed_with: u32,
    /// Its own key.
    key: u32,
}

impl Issued {
    fn valid_at(&self, t: u64) -> bool {
        self.not_before <= t && t <= self.not_after
    }
}

/// Where the webhooks' caBundle comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Injected {
    FromCa,
    FromServing,
}

/// The hours within `until` at which the bundle does not verify the serving
/// certificate in use.
fn outages(ca: Schedule, serving: Schedule, injected: Injected, until: u64) -> Vec<u64> {
    let mut next_key = 0u32;
    let mut key = || {
        next_key += 1;
        next_key
    };
    let ca_key = key();
    let mut ca_cert = Issued {
        not_before: 0,
        not_after: ca.duration,
        signed_with: ca_key,
        key: ca_key,
    };
    let serving_key = key();
    let mut serving_cert = Issued {
        not_before: 0,
        not_after: serving.duration,
        signed_with: ca_cert.key,
        key: serving_key,
    };
    // The ca.crt copied into the serving certificate's Secret.
    let mut serving_copy = ca_cert;
    let mut down = Vec::new();
    for t in 0..=until {
        if t == ca_cert.not_after - ca.renew_before {
            let k = if ca.new_key { key() } else { ca_cert.key };
            ca_cert = Issued {
                not_before: t,
                not_after: t + ca.duration,
                signed_with: k,
                key: k,
            };
        }
        if t == serving_cert.not_after - serving.renew_before {
            let k = if serving.new_key {
                key()
            } else {
                serving_cert.key
            };
            serving_cert = Issued {
                not_before: t,
                not_after: t + serving.duration,
                signed_with: ca_cert.key,
                key: k,
            };
            serving_copy = ca_cert;
        }
        let bundle = match injected {
            Injected::FromCa => ca_cert,
            Injected::FromServing => serving_copy,
        };
        let verifies = bundle.valid_at(t)
            && serving_cert.valid_at(t)
            && serving_cert.signed_with == bundle.key;
        if !verifies {
            down.push(t);
        }
    }
    down
}

fn certificate(documents: &[Value], name: &str) -> Value {
    documents
        .iter()
        .find(|d| d["kind"] == "Certificate" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("Certificate {name} in manifests/cert-manager/certificate.yaml"))
        .clone()
}

/// What the webhook configurations inject, from their annotation.
fn injected(documents: &[Value]) -> Injected {
    let sources: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as_str())
        .collect();
    assert_eq!(sources.len(), 2, "both webhook configurations inject a CA");
    assert!(sources.windows(2).all(|w| w[0] == w[1]), "{sources:?}");
    match sources[0] {
        "tandem-system/tandem-ca" => Injected::FromCa,
        "tandem-system/tandem-webhook" => Injected::FromServing,
        other => panic!("inject-ca-from {other}: not a Certificate of certificate.yaml"),
    }
}

#[test]
fn the_shipped_bundle_verifies_the_serving_certificate_at_every_hour_of_five_years() {
    let manifests = harness::yaml_documents(&harness::repo_path(
        "manifests/cert-manager/certificate.yaml",
    ));
    let ca = Schedule::of(&certificate(&manifests, "tandem-ca"));
    let serving = Schedule::of(&certificate(&manifests, "tandem-webhook"));
    let mut webhooks = harness::yaml_documents(&harness::repo_path("webhooks/validating.yaml"));
    webhooks.extend(harness::yaml_documents(&harness::repo_path(
        "webhooks/mutating.yaml",
    )));
    let down = outages(ca, serving, injected(&webhooks), FIVE_YEARS);
    assert!(
        down.is_empty(),
        "{} hours without a verifying bundle over five years, the first at day {}",
        down.len(),
        down[0] / 24
    );
    // The serving certificate is renewed many times inside the CA's life.
    assert!(
        ca.duration - ca.renew_before > 10 * serving.duration,
        "{ca:?} {serving:?}"
    );
}

/// The install before this test existed: the CA at cert-manager's default 90
/// days and the bundle injected from the serving certificate. Its first
/// outage comes at day 210, as the issue computed, and recurs.
#[test]
fn the_old_install_had_a_time_bomb_that_this_model_finds() {
    let ca = Schedule {
        duration: 2160,
        renew_before: 720,
        new_key: false,
    };
    let serving = Schedule {
        duration: 2160,
        renew_before: 360,
        new_key: true,
    };
    let down = outages(ca, serving, Injected::FromServing, FIVE_YEARS);
    assert_eq!(down.first().map(|t| t / 24), Some(210), "the first outage");
    assert!(down.len() > 24 * 30, "it recurs: {} hours", down.len());
    // Injected from the CA, the same schedules never fail.
    assert!(outages(ca, serving, Injected::FromCa, FIVE_YEARS).is_empty());
}

#[test]
fn durations_read_as_go_writes_them() {
    assert_eq!(hours("2160h"), 2160);
    assert_eq!(hours("87600h"), 87600);
    assert_eq!(hours("1h30m"), 1);
    assert_eq!(hours("120m"), 2);
}
