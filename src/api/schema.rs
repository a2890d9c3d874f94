//! Schema fragments the derive cannot express: raw embedded objects the API
//! server must keep as written, and values that may be a number or a string.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An embedded object kept verbatim (a PodTemplateSpec or an HTTPRouteSpec).
/// Its schema stays open so the CRD stays small; the webhook parses it with
/// the real type and names the field that does not fit.
pub fn raw_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A value written either as a number or as a string (`ratio: 1.5` or
/// `ratio: "1.5"`). Structural schemas have no number-or-string type, so the
/// schema admits any scalar and the webhook checks it is an exact decimal.
pub fn number_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "A non-negative decimal, as a number (1.5) or a string (\"1.5\"), computed exactly.",
    })
}
