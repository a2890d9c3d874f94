//! Tandem's three kinds, their defaults and their single-object validation.
//!
//! Each kind lives in its own file with one `defaults` function and one
//! `validate` function. The admission webhook, the reconcilers and `tandem render`
//! all call the same two functions, so the webhook rejects exactly what the
//! controller could not use.

pub mod crds;
pub mod inference_service;
pub mod limits;
pub mod placement;
pub mod pod_template;
pub mod quantity;
pub mod resource_scaling_group;
pub mod scale_view;
pub mod schema;

use std::fmt;

use serde::de::DeserializeOwned;

pub use inference_service::InferenceService;
pub use resource_scaling_group::ResourceScalingGroup;
pub use scale_view::ScaleView;

/// One reason an object cannot be admitted, tied to the field that causes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field path as users write it: `spec.roles[1].multinode.nodeCount`.
    pub field: String,
    pub reason: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// What validation found: violations deny the object, warnings are returned to
/// the client (kubectl prints them) and never deny.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub violations: Vec<Violation>,
    pub warnings: Vec<String>,
    /// The object conflicts with another one (a group locked by another
    /// ScaleView): the webhook answers 409 Conflict instead of 422 Invalid.
    pub conflict: bool,
}

impl Findings {
    pub fn deny(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.violations.push(Violation {
            field: field.into(),
            reason: reason.into(),
        });
    }

    /// A violation caused by another object rather than by this one's
    /// content; it makes the whole denial a conflict (HTTP 409).
    pub fn deny_conflict(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.deny(field, reason);
        self.conflict = true;
    }

    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Adds everything another check found.
    pub fn extend(&mut self, other: Findings) {
        self.violations.extend(other.violations);
        self.warnings.extend(other.warnings);
        self.conflict |= other.conflict;
    }

    pub fn is_allowed(&self) -> bool {
        self.violations.is_empty()
    }

    /// All violations in one line, the form an admission denial carries.
    pub fn denial_message(&self) -> String {
        self.violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Parses a JSON value as `T`, and on failure names the field that did not fit,
/// in a manifest's terms ([`in_user_terms`]: `spec.roles[0].replicas:
/// expected a whole number, got the string "two"`).
pub fn parse<T: DeserializeOwned>(value: &serde_json::Value) -> Result<T, Violation> {
    parse_at(value, "")
}

/// Like [`parse`], for a value that sits at `prefix` inside a larger object.
pub fn parse_at<T: DeserializeOwned>(
    value: &serde_json::Value,
    prefix: &str,
) -> Result<T, Violation> {
    // Read without tracking the path first: the path is only wanted for an
    // error, and tracking it costs on every field of every valid object.
    // A value that does not read is read again, the same way, for its path.
    if let Ok(parsed) = T::deserialize(value) {
        return Ok(parsed);
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let inner = error.path().to_string();
        let field = match (prefix.is_empty(), inner.as_str()) {
            (true, ".") => "(object)".to_owned(),
            (true, _) => inner,
            (false, ".") => prefix.to_owned(),
            (false, _) if inner.starts_with('[') => format!("{prefix}{inner}"),
            (false, _) => format!("{prefix}.{inner}"),
        };
        Violation {
            field,
            reason: in_user_terms(&error.into_inner().to_string()),
        }
    })
}

/// A type error of serde's, said in the terms of a YAML manifest rather than
/// of Rust (`invalid type: string "2", expected i32` becomes `expected a
/// whole number, got the string "2": write 2 without quotes`). Any other
/// message is returned as it is.
pub fn in_user_terms(message: &str) -> String {
    let (got, expected) = match message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.rsplit_once(", expected "))
    {
        Some(parts) => parts,
        None => return message.to_owned(),
    };
    let whole = matches!(
        expected,
        "i8" | "i16" | "i32" | "i64" | "isize" | "u8" | "u16" | "u32" | "u64" | "usize"
    );
    let wanted = match expected {
        _ if whole && expected.starts_with('u') => "a whole number, 0 or more".to_owned(),
        _ if whole => "a whole number".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "a sequence" => "a list".to_owned(),
        "a map" => "an object (a map of fields)".to_owned(),
        other if other.starts_with("struct ") => "an object (a map of fields)".to_owned(),
        other => other.to_owned(),
    };
    let value = |prefix: &str| {
        got.strip_prefix(prefix)
            .map(|v| v.trim_matches('`').to_owned())
    };
    let (said, hint) = if let Some(text) = value("string ") {
        let bare = text.trim_matches('"');
        let number = bare.parse::<i64>().is_ok() || bare.parse::<f64>().is_ok();
        let hint = ((whole && bare.parse::<i64>().is_ok())
            || (matches!(expected, "f32" | "f64") && number))
            .then(|| format!(": write {bare} without quotes"));
        (format!("the string {text}"), hint)
    } else if let Some(number) = value("integer ").or_else(|| value("floating point ")) {
        (format!("the number {number}"), None)
    } else if let Some(boolean) = value("boolean ") {
        (boolean, None)
    } else {
        let said = match got {
            "sequence" => "a list".to_owned(),
            "map" => "an object".to_owned(),
            "unit value" | "null" => "null".to_owned(),
            other => other.to_owned(),
        };
        (said, None)
    };
    format!("expected {wanted}, got {said}{}", hint.unwrap_or_default())
}

/// Kubernetes' DNS-1123 label: what a role name must be, since it becomes part
/// of object names and label values.
pub fn dns1123_label_error(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if value.len() > 63 {
        return Some(format!(
            "must be at most 63 characters, got {} ({value:?})",
            value.len()
        ));
    }
    let valid_chars = value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let bytes = value.as_bytes();
    let alnum_ends = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if !valid_chars || !alnum_ends {
        return Some(format!(
            "must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit), got {value:?}"
        ));
    }
    None
}

/// Kubernetes' DNS-1123 subdomain: what most object names must be (at most
/// 253 characters, DNS-1123 labels joined by dots).
pub fn dns1123_subdomain_error(value: &str) -> Option<String> {
    if value.len() > 253 {
        return Some(format!(
            "must be at most 253 characters, got {} ({value:?})",
            value.len()
        ));
    }
    let labels_valid = !value.is_empty()
        && value.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
                && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        });
    if !labels_valid {
        return Some(format!(
            "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit), got {value:?}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Outer {
        roles: Vec<Inner>,
    }
    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        replicas: i32,
    }

    #[test]
    fn parse_errors_name_the_field() {
        let err = parse_at::<Outer>(
            &serde_json::json!({"roles": [{"replicas": 1}, {"replicas": "two"}]}),
            "spec",
        )
        .unwrap_err();
        assert_eq!(err.field, "spec.roles[1].replicas");
        assert!(
            err.reason.starts_with("expected a whole number"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn type_errors_are_said_in_a_manifests_terms() {
        let reason = |value: serde_json::Value| {
            parse_at::<Outer>(&serde_json::json!({"roles": [{"replicas": value}]}), "spec")
                .unwrap_err()
                .reason
        };
        assert_eq!(
            reason(serde_json::json!("2")),
            "expected a whole number, got the string \"2\": write 2 without quotes"
        );
        assert_eq!(
            reason(serde_json::json!("two")),
            "expected a whole number, got the string \"two\""
        );
        assert_eq!(
            reason(serde_json::json!(1.5)),
            "expected a whole number, got the number 1.5"
        );
        assert_eq!(
            reason(serde_json::json!(true)),
            "expected a whole number, got true"
        );
        assert_eq!(
            reason(serde_json::json!([1])),
            "expected a whole number, got a list"
        );
        let roles = parse_at::<Outer>(&serde_json::json!({"roles": {"a": 1}}), "spec")
            .unwrap_err()
            .reason;
        assert_eq!(roles, "expected a list, got an object");
        assert_eq!(
            in_user_terms("missing field `name`"),
            "missing field `name`"
        );
        assert_eq!(
            in_user_terms("invalid value: integer `-1`, expected u32"),
            "expected a whole number, 0 or more, got the number -1"
        );
    }

    #[test]
    fn parse_of_wrong_root_type_names_the_prefix() {
        let err = parse_at::<Outer>(&serde_json::json!("x"), "spec").unwrap_err();
        assert_eq!(err.field, "spec");
    }

    #[test]
    fn dns1123_labels() {
        assert_eq!(dns1123_label_error("decode-0"), None);
        assert!(dns1123_label_error("").is_some());
        assert!(dns1123_label_error("Decode").unwrap().contains("DNS-1123"));
        assert!(dns1123_label_error("-a").is_some());
        assert!(dns1123_label_error("a_b").is_some());
        assert!(dns1123_label_error(&"a".repeat(64)).unwrap().contains("63"));
    }

    #[test]
    fn dns1123_subdomains() {
        assert_eq!(dns1123_subdomain_error("unit-01-prefill"), None);
        assert_eq!(dns1123_subdomain_error("a.b-c.d"), None);
        assert_eq!(dns1123_subdomain_error(&"a".repeat(253)), None);
        assert!(
            dns1123_subdomain_error(&"a".repeat(254))
                .unwrap()
                .contains("253")
        );
        for bad in ["", "A", "a..b", ".a", "a.", "a_b", "a.-b"] {
            assert!(
                dns1123_subdomain_error(bad).unwrap().contains("subdomain"),
                "{bad:?}"
            );
        }
    }
}
