//! Exact Kubernetes resource quantities, and the resources one pod asks the
//! scheduler for.
//!
//! A [`Quantity`] holds the value Kubernetes stores for a quantity string as a
//! decimal, so sums are exact: `500m + 250m` is `750m`, never a rounded `1`.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, Mul};
use std::str::FromStr;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use rust_decimal::Decimal;

/// Kubernetes keeps at most nine fractional digits (nano); finer values are
/// rounded up to the next `1n`, as the API server does.
const NANO_SCALE: u32 = 9;

/// Decimal SI suffixes, largest first, with their power of ten.
const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("E", 18),
    ("P", 15),
    ("T", 12),
    ("G", 9),
    ("M", 6),
    ("k", 3),
    ("", 0),
    ("m", -3),
    ("u", -6),
    ("n", -9),
];

/// Binary SI suffixes, largest first, with their power of 1024.
const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ei", 6),
    ("Pi", 5),
    ("Ti", 4),
    ("Gi", 3),
    ("Mi", 2),
    ("Ki", 1),
];

/// An exact resource quantity (`8`, `750m`, `16Gi`, `1e3`).
///
/// Equality and order compare values: `1Ki == 1024`. Display prints the value
/// exactly, with the largest suffix that represents it; binary suffixes for
/// values that came from binary quantities (`32Gi`), decimal ones otherwise
/// (`750m`, `16`, `2k`).
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    value: Decimal,
    binary: bool,
}

/// Why a quantity could not be parsed or computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is not a Kubernetes quantity.
    #[error("invalid quantity {text:?}: {reason}")]
    Invalid { text: String, reason: String },
    /// The result is too large to hold exactly.
    #[error("quantity overflow: {operation}")]
    Overflow { operation: String },
}

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        value: Decimal::ZERO,
        binary: false,
    };

    /// The exact value.
    pub fn to_decimal(self) -> Decimal {
        self.value
    }

    pub fn is_zero(self) -> bool {
        self.value.is_zero()
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.value.cmp(&other.value)
    }
}

/// The sum; an error instead of a wrap or a panic when it does not fit.
impl Add for Quantity {
    type Output = Result<Quantity, QuantityError>;

    fn add(self, other: Quantity) -> Self::Output {
        let value = self
            .value
            .checked_add(other.value)
            .ok_or_else(|| QuantityError::Overflow {
                operation: format!("{self} + {other}"),
            })?;
        Ok(Quantity {
            value,
            binary: self.binary || other.binary,
        })
    }
}

/// The quantity `count` times; an error instead of a wrap or a panic when it
/// does not fit.
impl Mul<u32> for Quantity {
    type Output = Result<Quantity, QuantityError>;

    fn mul(self, count: u32) -> Self::Output {
        let value = self
            .value
            .checked_mul(Decimal::from(count))
            .ok_or_else(|| QuantityError::Overflow {
                operation: format!("{self} × {count}"),
            })?;
        Ok(Quantity {
            value,
            binary: self.binary,
        })
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    /// Parses every form the API server accepts: `<sign><number><suffix>` where
    /// the number is `12`, `12.5`, `12.` or `.5` and the suffix is empty, a
    /// decimal SI suffix (`n u m k M G T P E`), a binary SI suffix (`Ki … Ei`)
    /// or a decimal exponent (`e3`, `E-2`).
    fn from_str(text: &str) -> Result<Quantity, QuantityError> {
        let invalid = |reason: &str| QuantityError::Invalid {
            text: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (negative, unsigned) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            Some(_) => (false, text),
            None => return Err(invalid("empty")),
        };
        let number_length = unsigned
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(number_length);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number"));
        }
        if fraction.contains('.') {
            return Err(invalid("more than one decimal point"));
        }

        let (exponent, binary_power) = parse_suffix(suffix).ok_or_else(|| {
            invalid("unknown suffix: expected one of n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent like e3")
        })?;

        // digits × 10^exponent × 1024^binary_power, digits without the point;
        // trailing zeros of the fraction change nothing.
        let fraction = fraction.trim_end_matches('0');
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        let fraction_digits =
            i32::try_from(fraction.len()).map_err(|_| invalid("too many digits"))?;
        let too_large = || invalid("too large to hold exactly");
        let mut mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| too_large())?
        };
        // binary_power <= 6 (Ei), from the suffix table.
        let binary_factor = 1024_i128.checked_pow(binary_power).ok_or_else(too_large)?;
        mantissa = mantissa.checked_mul(binary_factor).ok_or_else(too_large)?;
        let mut exponent = exponent
            .checked_sub(fraction_digits)
            .ok_or_else(too_large)?;
        // Strip trailing zeros so large exponents of round numbers stay small.
        // (exponent < 0 here, so exponent + 1 cannot overflow.)
        while mantissa != 0 && mantissa.checked_rem(10) == Some(0) && exponent < 0 {
            mantissa = mantissa.checked_div(10).unwrap_or(0);
            exponent = exponent.saturating_add(1);
        }
        let (mantissa, scale) = if exponent >= 0 {
            let power = 10_i128
                .checked_pow(exponent.unsigned_abs())
                .ok_or_else(too_large)?;
            (mantissa.checked_mul(power).ok_or_else(too_large)?, 0)
        } else {
            round_up_to_nano(mantissa, exponent.unsigned_abs())
        };
        let signed = if negative {
            mantissa.checked_neg().ok_or_else(too_large)?
        } else {
            mantissa
        };
        let value = Decimal::try_from_i128_with_scale(signed, scale).map_err(|_| too_large())?;
        Ok(Quantity {
            value,
            binary: binary_power > 0,
        })
    }
}

/// The power of ten and power of 1024 a suffix stands for; None when it is not
/// a Kubernetes suffix.
fn parse_suffix(suffix: &str) -> Option<(i32, u32)> {
    if let Some((_, power)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Some((0, *power));
    }
    if let Some((_, exponent)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Some((*exponent, 0));
    }
    // `E` alone is exa (handled above); `e3`, `E-2`, `e+4` are exponents.
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((rest.parse().ok()?, 0))
}

/// `mantissa × 10^-scale` with at most nine fractional digits, rounded away
/// from zero like the API server rounds sub-nano quantities (`0.1n` is `1n`).
fn round_up_to_nano(mantissa: i128, scale: u32) -> (i128, u32) {
    if scale <= NANO_SCALE {
        return (mantissa, scale);
    }
    let excess = scale.saturating_sub(NANO_SCALE);
    // Any i128 is below 10^39, so beyond that every non-zero value is < 1n.
    let Some(divisor) = 10_i128.checked_pow(excess) else {
        return (i128::from(mantissa != 0), NANO_SCALE);
    };
    // divisor >= 10, so neither division can fail; a quotient below
    // i128::MAX / 10 leaves room for the one unit of rounding.
    let quotient = mantissa.checked_div(divisor).unwrap_or(0);
    let rounded = if mantissa.checked_rem(divisor) == Some(0) {
        quotient
    } else {
        quotient.saturating_add(1)
    };
    (rounded, NANO_SCALE)
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.value.normalize();
        let (mantissa, scale) = (value.mantissa(), value.scale());
        if mantissa == 0 {
            return f.write_str("0");
        }
        if self.binary && scale == 0 && mantissa.unsigned_abs() >= 1024 {
            for (suffix, power) in BINARY_SUFFIXES {
                let Some(unit) = 1024_i128.checked_pow(power) else {
                    continue;
                };
                if mantissa.checked_rem(unit) == Some(0)
                    && let Some(whole) = mantissa.checked_div(unit)
                {
                    return write!(f, "{whole}{suffix}");
                }
            }
        }
        // value = mantissa × 10^-scale; the largest exponent that leaves an
        // integer wins. Nano always does: parsing keeps at most nine fractional digits.
        let scale = i32::try_from(scale).unwrap_or(i32::MAX);
        for (suffix, exponent) in DECIMAL_SUFFIXES {
            let shift = scale.saturating_add(exponent);
            if shift <= 0 {
                if let Some(scaled) = 10_i128
                    .checked_pow(shift.unsigned_abs())
                    .and_then(|p| mantissa.checked_mul(p))
                {
                    return write!(f, "{scaled}{suffix}");
                }
            } else if let Some(unit) = 10_i128.checked_pow(shift.unsigned_abs())
                && mantissa.checked_rem(unit) == Some(0)
                && let Some(whole) = mantissa.checked_div(unit)
            {
                return write!(f, "{whole}{suffix}");
            }
        }
        // Unreachable for parsed quantities (see above); the plain decimal is
        // still exact.
        write!(f, "{value}")
    }
}

/// The resources one pod of `pod` requests, per resource name, as the
/// scheduler computes them (Kubernetes' `resource.PodRequests`):
///
/// - a container requests its `requests` entry, or its `limits` entry when
///   `requests` has none for that resource (the API server defaults one from
///   the other);
/// - the pod requests the larger of the sum over its containers and the
///   largest init container, where sidecars (init containers with
///   `restartPolicy: Always`) keep running: they add to the containers' sum and
///   to every later init container;
/// - pod-level `resources` (cpu, memory, hugepages) replace the containers'
///   total for the resources they set;
/// - `overhead` is added on top.
pub fn pod_requests(pod: &PodSpec) -> Result<BTreeMap<String, Quantity>, String> {
    let mut total = BTreeMap::new();
    for container in &pod.containers {
        add_all(&mut total, &container_requests(container)?)?;
    }
    let mut init_peak: BTreeMap<String, Quantity> = BTreeMap::new();
    let mut sidecars = BTreeMap::new();
    for container in pod.init_containers.iter().flatten() {
        let requests = container_requests(container)?;
        let running = if container.restart_policy.as_deref() == Some("Always") {
            add_all(&mut total, &requests)?;
            add_all(&mut sidecars, &requests)?;
            sidecars.clone()
        } else {
            let mut running = requests;
            add_all(&mut running, &sidecars)?;
            running
        };
        for (name, quantity) in running {
            let peak = init_peak.entry(name).or_insert(Quantity::ZERO);
            *peak = (*peak).max(quantity);
        }
    }
    for (name, peak) in init_peak {
        let entry = total.entry(name).or_insert(Quantity::ZERO);
        *entry = (*entry).max(peak);
    }
    if let Some(pod_level) = &pod.resources {
        for (name, quantity) in effective_requests(pod_level, "the pod's resources")? {
            if is_pod_level_resource(&name) {
                total.insert(name, quantity);
            }
        }
    }
    if let Some(overhead) = &pod.overhead {
        let overhead = parse_all(overhead, "overhead")?;
        add_all(&mut total, &overhead)?;
    }
    Ok(total)
}

/// What one container requests per resource: requests, else limits.
fn container_requests(container: &Container) -> Result<BTreeMap<String, Quantity>, String> {
    match &container.resources {
        Some(resources) => {
            effective_requests(resources, &format!("container {:?}", container.name))
        }
        None => Ok(BTreeMap::new()),
    }
}

fn effective_requests(
    resources: &ResourceRequirements,
    owner: &str,
) -> Result<BTreeMap<String, Quantity>, String> {
    let mut effective = match &resources.limits {
        Some(limits) => parse_all(limits, &format!("{owner}: limits"))?,
        None => BTreeMap::new(),
    };
    if let Some(requests) = &resources.requests {
        effective.extend(parse_all(requests, &format!("{owner}: requests"))?);
    }
    Ok(effective)
}

fn parse_all(
    list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    owner: &str,
) -> Result<BTreeMap<String, Quantity>, String> {
    list.iter()
        .map(|(name, quantity)| {
            quantity
                .0
                .parse()
                .map(|q| (name.clone(), q))
                .map_err(|e| format!("{owner}: {name}: {e}"))
        })
        .collect()
}

fn add_all(
    total: &mut BTreeMap<String, Quantity>,
    more: &BTreeMap<String, Quantity>,
) -> Result<(), String> {
    for (name, quantity) in more {
        let entry = total.entry(name.clone()).or_insert(Quantity::ZERO);
        *entry = entry.add(*quantity).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// The resources Kubernetes accepts at pod level (PodLevelResources).
fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
    use serde_json::json;

    fn q(text: &str) -> Quantity {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} parses: {e}"))
    }

    fn shown(text: &str) -> String {
        q(text).to_string()
    }

    #[test]
    fn plain_and_decimal_numbers() {
        assert_eq!(shown("8"), "8");
        assert_eq!(shown("0"), "0");
        assert_eq!(shown("000"), "0");
        assert_eq!(shown("0.5"), "500m");
        assert_eq!(shown(".5"), "500m");
        assert_eq!(shown("5."), "5");
        assert_eq!(shown("1.25"), "1250m");
        assert_eq!(shown("+3"), "3");
        assert_eq!(shown("-0.25"), "-250m");
        assert_eq!(shown("1000"), "1k");
        assert_eq!(shown("1500"), "1500");
        assert_eq!(shown("0.000001"), "1u");
        assert_eq!(q("1.50").to_decimal(), Decimal::new(15, 1));
        assert_eq!(shown("1.000000000000000000000000000000000000000000"), "1");
    }

    #[test]
    fn decimal_si_suffixes() {
        for (text, expected) in [
            ("1n", "1n"),
            ("1u", "1u"),
            ("250m", "250m"),
            ("1000m", "1"),
            ("2k", "2k"),
            ("3M", "3M"),
            ("4G", "4G"),
            ("5T", "5T"),
            ("6P", "6P"),
            ("7E", "7E"),
            ("1.5G", "1500M"),
            ("1500k", "1500k"),
            ("0.5k", "500"),
        ] {
            assert_eq!(shown(text), expected, "{text}");
        }
        assert_eq!(
            q("7E").to_decimal(),
            Decimal::from(7_000_000_000_000_000_000_u64)
        );
    }

    #[test]
    fn binary_si_suffixes() {
        for (text, expected) in [
            ("1Ki", "1Ki"),
            ("16Mi", "16Mi"),
            ("16Gi", "16Gi"),
            ("2Ti", "2Ti"),
            ("3Pi", "3Pi"),
            ("4Ei", "4Ei"),
            ("1024Ki", "1Mi"),
            ("0.5Gi", "512Mi"),
            ("1.5Ki", "1536"),
            ("0.5Ki", "512"),
        ] {
            assert_eq!(shown(text), expected, "{text}");
        }
        assert_eq!(q("1Ki"), q("1024"), "equality compares values");
        assert_eq!(q("1Gi").to_decimal(), Decimal::from(1_073_741_824_u64));
    }

    #[test]
    fn exponents() {
        assert_eq!(shown("1e3"), "1k");
        assert_eq!(shown("1E3"), "1k");
        assert_eq!(shown("12e+2"), "1200");
        assert_eq!(shown("5e-1"), "500m");
        assert_eq!(shown("2.5e6"), "2500k");
        assert_eq!(shown("1e0"), "1");
        assert_eq!(shown("1E"), "1E", "E alone is exa, not an exponent");
        assert_eq!(shown("1e-9"), "1n");
    }

    #[test]
    fn sub_nano_values_round_up_like_the_api_server() {
        assert_eq!(shown("0.1n"), "1n");
        assert_eq!(shown("1e-20"), "1n");
        assert_eq!(shown("1e-100"), "1n");
        assert_eq!(shown("1.0000000001"), "1000000001n");
        assert_eq!(shown("0e-50"), "0");
    }

    #[test]
    fn sums_are_exact() {
        let sum = |a: &str, b: &str| (q(a) + q(b)).unwrap().to_string();
        assert_eq!(sum("0.5", "0.25"), "750m");
        assert_eq!(sum("500m", "250m"), "750m");
        assert_eq!(sum("8", "8"), "16");
        assert_eq!(sum("16Gi", "16Gi"), "32Gi");
        assert_eq!(sum("512Mi", "512Mi"), "1Gi");
        assert_eq!(sum("1Gi", "1G"), "2073741824");
        assert_eq!(sum("1Gi", "500m"), "1073741824500m");
        assert_eq!(sum("100m", "900m"), "1");
        assert_eq!(
            (Quantity::ZERO + q("16Gi")).unwrap().to_string(),
            "16Gi",
            "a sum that starts at zero keeps the binary form"
        );
    }

    #[test]
    fn products_by_a_count() {
        assert_eq!((q("8") * 6).unwrap().to_string(), "48");
        assert_eq!((q("250m") * 3).unwrap().to_string(), "750m");
        assert_eq!((q("16Gi") * 4).unwrap().to_string(), "64Gi");
        assert_eq!((q("3") * 0).unwrap().to_string(), "0");
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        let huge = q("70000000000000000000000000000");
        assert!(matches!(huge + huge, Err(QuantityError::Overflow { .. })));
        let message = (huge * 2).unwrap_err().to_string();
        assert!(message.starts_with("quantity overflow: "), "{message}");
    }

    #[test]
    fn invalid_text_names_the_text() {
        for (text, reason) in [
            ("", "empty"),
            ("abc", "expected a number"),
            ("-", "expected a number"),
            (".", "expected a number"),
            ("1..2", "more than one decimal point"),
            ("1.2.3", "more than one decimal point"),
            ("1x", "unknown suffix"),
            ("1KI", "unknown suffix"),
            ("1ki", "unknown suffix"),
            ("1e", "unknown suffix"),
            ("1e3.5", "unknown suffix"),
            ("1e+", "unknown suffix"),
            ("1 Gi", "unknown suffix"),
            ("--1", "expected a number"),
            ("1Gi ", "unknown suffix"),
            ("1e400", "too large"),
            ("99999999999999999999999999999999999999999", "too large"),
        ] {
            let err = text.parse::<Quantity>().unwrap_err();
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("invalid quantity {text:?}: ")),
                "{text:?}: {message}"
            );
            assert!(message.contains(reason), "{text:?}: {message}");
        }
    }

    fn pod(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).unwrap()
    }

    fn shown_requests(spec: &PodSpec) -> BTreeMap<String, String> {
        pod_requests(spec)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect()
    }

    fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_pod_without_resources_requests_nothing() {
        let spec = pod(json!({"containers": [{"name": "a"}]}));
        assert!(pod_requests(&spec).unwrap().is_empty());
        let spec = pod(json!({"containers": []}));
        assert!(pod_requests(&spec).unwrap().is_empty());
    }

    #[test]
    fn containers_add_up_and_limits_stand_in_for_requests() {
        let spec = pod(json!({"containers": [
            {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "4"},
                                           "requests": {"cpu": "500m", "memory": "16Gi"}}},
            {"name": "proxy", "resources": {"requests": {"cpu": "250m", "memory": "16Gi"}}},
        ]}));
        assert_eq!(
            shown_requests(&spec),
            expect(&[("cpu", "750m"), ("memory", "32Gi"), ("nvidia.com/gpu", "8")])
        );
    }

    #[test]
    fn init_containers_count_as_their_largest() {
        let spec = pod(json!({
            "initContainers": [
                {"name": "download", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                {"name": "warm", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}},
            ],
            "containers": [{"name": "vllm", "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}}],
        }));
        assert_eq!(
            shown_requests(&spec),
            expect(&[("cpu", "2"), ("memory", "4Gi")]),
            "max(sum of containers, largest init container), per resource"
        );
    }

    #[test]
    fn sidecars_keep_running_beside_later_containers() {
        let spec = pod(json!({
            "initContainers": [
                {"name": "mesh", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "3"}}},
            ],
            "containers": [{"name": "vllm", "resources": {"requests": {"cpu": "1"}}}],
        }));
        // During setup: 3 + 500m sidecar; afterwards: 1 + 500m.
        assert_eq!(shown_requests(&spec), expect(&[("cpu", "3500m")]));
    }

    #[test]
    fn pod_level_resources_and_overhead() {
        let spec = pod(json!({
            "resources": {"requests": {"cpu": "6"}, "limits": {"memory": "8Gi"}},
            "overhead": {"cpu": "250m"},
            "containers": [{"name": "vllm", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}],
        }));
        assert_eq!(
            shown_requests(&spec),
            expect(&[("cpu", "6250m"), ("memory", "8Gi"), ("nvidia.com/gpu", "1")])
        );
    }

    #[test]
    fn an_invalid_quantity_names_container_and_resource() {
        let mut spec = pod(json!({"containers": [{"name": "vllm"}]}));
        spec.containers[0].resources = Some(ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "cpu".to_owned(),
                K8sQuantity("lots".to_owned()),
            )])),
            ..Default::default()
        });
        assert_eq!(
            pod_requests(&spec).unwrap_err(),
            "container \"vllm\": requests: cpu: invalid quantity \"lots\": expected a number"
        );
    }

    /// What Kubernetes makes of each quantity the API server may store:
    /// every input of apimachinery v0.36.3's `TestQuantityParse` and
    /// `TestQuantityParseEmit` (`pkg/api/resource/quantity_test.go`), with a
    /// few more Tandem writes, and the string `resource.ParseQuantity(in)
    /// .String()` gives for it (generated by running that code). Tandem must
    /// read each as the same value as its canonical form, and print the
    /// canonical form itself where Kubernetes prints a value by its suffix
    /// rules (not where it keeps the text as written, or an exponent form,
    /// which Tandem never writes).
    const KUBERNETES_CANONICAL: &[(&str, &str)] = &[
        ("0", "0"),
        ("0n", "0"),
        ("0u", "0"),
        ("0m", "0"),
        ("0Ki", "0"),
        ("0k", "0"),
        ("0Mi", "0"),
        ("0M", "0"),
        ("0Gi", "0"),
        ("0G", "0"),
        ("0Ti", "0"),
        ("0T", "0"),
        ("1", "1"),
        ("1Ki", "1Ki"),
        ("8Ki", "8Ki"),
        ("7Mi", "7Mi"),
        ("6Gi", "6Gi"),
        ("5Ti", "5Ti"),
        ("4Pi", "4Pi"),
        ("3Ei", "3Ei"),
        ("10Ti", "10Ti"),
        ("100Ti", "100Ti"),
        ("5n", "5n"),
        ("4u", "4u"),
        ("3m", "3m"),
        ("9", "9"),
        ("8k", "8k"),
        ("50k", "50k"),
        ("7M", "7M"),
        ("6G", "6G"),
        ("5T", "5T"),
        ("40T", "40T"),
        ("300T", "300T"),
        ("2P", "2P"),
        ("1E", "1E"),
        ("1E-3", "1E-3"),
        ("1e3", "1e3"),
        ("1E6", "1E6"),
        ("1e9", "1e9"),
        ("1E12", "1E12"),
        ("1e15", "1e15"),
        ("1E18", "1E18"),
        ("1e14", "100e12"),
        ("1e13", "10e12"),
        ("100.035k", "100.035k"),
        ("0.001", "1m"),
        ("0.0005k", "500m"),
        ("0.005", "5m"),
        ("0.05", "50m"),
        ("0.5", "500m"),
        ("0.00050k", "500m"),
        ("0.00500", "5m"),
        ("0.05000", "50m"),
        ("0.50000", "500m"),
        ("0.5e0", "500e-3"),
        ("0.5e-1", "50e-3"),
        ("0.5e-2", "5e-3"),
        ("10.035M", "10.035M"),
        ("1.2e3", "1200"),
        ("1.3E+6", "1300e3"),
        ("1.40e9", "1400e6"),
        ("1.53E12", "1530e9"),
        ("1.6e15", "1600e12"),
        ("1.7E18", "1700e15"),
        ("9.01", "9010m"),
        ("8.1k", "8100"),
        ("7.123456M", "7.123456M"),
        ("6.987654321G", "6.987654321G"),
        ("5.444T", "5.444T"),
        ("40.1T", "40100G"),
        ("300.2T", "300200G"),
        ("2.5P", "2500T"),
        ("1.01E", "1010P"),
        ("3.001n", "4n"),
        ("1.1E-9", "2e-9"),
        ("0.0000000001", "1n"),
        ("0.0000000005", "1n"),
        ("0.00000000050", "1n"),
        ("0.5e-9", "1e-9"),
        ("0.9n", "1n"),
        ("0.00000012345", "124n"),
        ("0.00000012354", "124n"),
        ("12E", "12E"),
        ("100.035Ki", "102435840m"),
        ("0.5Mi", "512Ki"),
        ("0.05Gi", "53687091200m"),
        ("0.025Ti", "27487790694400m"),
        ("0.000000000001Ki", "2n"),
        (".001", "1m"),
        (".0001k", "100m"),
        ("1.", "1."),
        ("1.G", "1.G"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        ("1024", "1024"),
        ("1025", "1025"),
        ("1023Ki", "1023Ki"),
        ("1536Mi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1000m", "1"),
        ("1500m", "1500m"),
        ("250m", "250m"),
        ("64", "64"),
        ("80Gi", "80Gi"),
        ("8", "8"),
    ];

    #[test]
    fn quantities_read_and_print_as_kubernetes_does() {
        let mut printed_differently = Vec::new();
        for (input, canonical) in KUBERNETES_CANONICAL {
            let read: Quantity = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
            let stored: Quantity = canonical
                .parse()
                .unwrap_or_else(|e| panic!("{canonical}: {e}"));
            assert_eq!(
                read, stored,
                "{input} is read as {read}, Kubernetes stores {canonical}"
            );
            // Kubernetes keeps the text of an exponent, and of some inputs
            // already in a suffix form, as written.
            let kept_as_written = canonical.contains(['e', 'E']) && !canonical.ends_with('E')
                || canonical.ends_with('.')
                || canonical.contains(".");
            if !kept_as_written && read.to_string() != *canonical {
                printed_differently.push(format!("{input}: Tandem {read}, Kubernetes {canonical}"));
            }
        }
        assert!(printed_differently.is_empty(), "{printed_differently:#?}");
    }
}
