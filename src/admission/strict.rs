//! Reading JSON straight into typed values with the guarantees of reading it
//! into a `serde_json::Value` first, in one pass.
//!
//! serde_json skips what a type does not ask for (an unknown field) without
//! looking at it closely: a skipped string may hold invalid UTF-8 or a lone
//! surrogate, a skipped number may be out of range, a skipped value may nest
//! deeper than serde_json's recursion limit. Reading the same body into a
//! `Value` fails on each of those. [`from_slice`] wraps the deserializer so
//! that nothing is skipped unread: what a type ignores is read as
//! `deserialize_any` would read it (and then dropped), so a body that
//! [`from_slice`] accepts is one that `serde_json::from_slice::<Value>`
//! accepts too, and the typed values are the ones read through a `Value`.
//!
//! It also notes, for the value being read inside [`Tracked`], what a typed
//! round trip (`serde_json::to_value` of what was read) would not give back
//! as written: an ignored field, an explicit `null` read as `None`, an empty
//! list. A mutation may then build its patch from the defaults it fills in
//! only when none of these was seen (see `super::patch`).

use std::cell::Cell;
use std::fmt;

use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// What was seen while reading a value that a typed round trip would not
/// write back the same way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// A field the type does not have (it is dropped by the round trip).
    pub ignored: bool,
    /// An explicit `null` read as an absent optional field (dropped).
    pub null: bool,
    /// An empty list read into a typed list (may be dropped or kept).
    pub empty_list: bool,
}

impl Seen {
    /// Nothing was seen: the value round-trips as written.
    pub fn is_clean(&self) -> bool {
        *self == Seen::default()
    }
}

thread_local! {
    static SEEN: Cell<Seen> = const { Cell::new(Seen { ignored: false, null: false, empty_list: false }) };
    /// How deep the value being read nests (objects and arrays), and how
    /// deep it may ([`from_slice_within`]).
    static DEPTH: Cell<(usize, usize)> = const { Cell::new((0, usize::MAX)) };
}

/// serde_json's recursion limit: a value nests at most this deep (the
/// outermost object or array counts one).
const SERDE_JSON_DEPTH: usize = 127;

fn note(update: impl FnOnce(&mut Seen)) {
    SEEN.with(|seen| {
        let mut now = seen.get();
        update(&mut now);
        seen.set(now);
    });
}

/// A value and what was seen while reading it (see [`Seen`]). Read it with
/// [`from_slice`]; read otherwise, nothing is ever seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Tracked<T> {
    pub value: T,
    pub seen: Seen,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Tracked<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let outer = SEEN.with(|seen| seen.replace(Seen::default()));
        let value = T::deserialize(deserializer);
        let seen = SEEN.with(|seen| seen.replace(outer));
        Ok(Tracked {
            value: value?,
            seen,
        })
    }
}

/// A `T` read only from a JSON object. serde's derived structs also accept
/// an array of their fields in order; kube-rs's `AdmissionReview` and
/// `DynamicObject` (which flatten) do not, and neither does this.
#[derive(Clone, Debug, PartialEq)]
pub struct MapOnly<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for MapVisitor<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(MapVisitor(std::marker::PhantomData))
            .map(MapOnly)
    }
}

/// For `#[serde(default, deserialize_with = "strict::present")]` on an
/// `Option` field: absent is `None`, `null` is refused like any other value
/// that is not a `T` (where a plain `Option` would read it as `None`).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// Reads `bytes` as a `T`, accepting only JSON that reads as a
/// `serde_json::Value` too (see the module's documentation).
pub fn from_slice<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(Strict {
        inner: &mut deserializer,
    })?;
    deserializer.end()?;
    Ok(value)
}

/// [`from_slice`] of a value that sits `outer` objects or arrays deep in
/// the body it was cut from (as a `RawValue`): read alone, serde_json would
/// let it nest `outer` levels deeper than reading the whole body allows.
pub fn from_slice_within<'de, T: Deserialize<'de>>(
    bytes: &'de [u8],
    outer: usize,
) -> Result<T, serde_json::Error> {
    let before = DEPTH.with(|depth| depth.replace((0, SERDE_JSON_DEPTH.saturating_sub(outer))));
    let value = from_slice(bytes);
    DEPTH.with(|depth| depth.set(before));
    value
}

/// Runs `read` one object or array deeper, refusing what nests deeper than
/// [`from_slice_within`] allows.
fn nested<T, E: de::Error>(read: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let (depth, limit) = DEPTH.with(Cell::get);
    if depth >= limit {
        return Err(E::custom("nested too deeply"));
    }
    // Below the limit, so one more fits.
    DEPTH.with(|d| d.set((depth.saturating_add(1), limit)));
    let value = read();
    DEPTH.with(|d| d.set((depth, limit)));
    value
}

/// A deserializer that reads everything it is asked to skip.
struct Strict<D> {
    inner: D,
}

/// Which request a visitor answers, for what it notes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Asked {
    Other,
    Option,
    Seq,
}

struct Wrap<V> {
    visitor: V,
    asked: Asked,
}

impl<V> Wrap<V> {
    fn new(visitor: V) -> Self {
        Wrap {
            visitor,
            asked: Asked::Other,
        }
    }
}

macro_rules! forward_wrapped {
    ($($method:ident($($arg:ident: $ty:ty),*))*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Self::Error> {
                self.inner.$method($($arg,)* Wrap::new(visitor))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    forward_wrapped! {
        deserialize_any()
        deserialize_bool()
        deserialize_i8()
        deserialize_i16()
        deserialize_i32()
        deserialize_i64()
        deserialize_i128()
        deserialize_u8()
        deserialize_u16()
        deserialize_u32()
        deserialize_u64()
        deserialize_u128()
        deserialize_f32()
        deserialize_f64()
        deserialize_char()
        deserialize_str()
        deserialize_string()
        deserialize_bytes()
        deserialize_byte_buf()
        deserialize_unit()
        deserialize_unit_struct(name: &'static str)
        deserialize_newtype_struct(name: &'static str)
        deserialize_tuple(len: usize)
        deserialize_tuple_struct(name: &'static str, len: usize)
        deserialize_map()
        deserialize_struct(name: &'static str, fields: &'static [&'static str])
        deserialize_enum(name: &'static str, variants: &'static [&'static str])
        deserialize_identifier()
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_option(Wrap {
            visitor,
            asked: Asked::Option,
        })
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_seq(Wrap {
            visitor,
            asked: Asked::Seq,
        })
    }

    /// Read in full, as `deserialize_any` reads, then dropped.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        note(|seen| seen.ignored = true);
        self.inner.deserialize_any(Wrap::new(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty))*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.visitor.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    forward_visit! {
        visit_bool(bool)
        visit_i8(i8)
        visit_i16(i16)
        visit_i32(i32)
        visit_i64(i64)
        visit_i128(i128)
        visit_u8(u8)
        visit_u16(u16)
        visit_u32(u32)
        visit_u64(u64)
        visit_u128(u128)
        visit_f32(f32)
        visit_f64(f64)
        visit_char(char)
        visit_str(&str)
        visit_borrowed_str(&'de str)
        visit_string(String)
        visit_bytes(&[u8])
        visit_borrowed_bytes(&'de [u8])
        visit_byte_buf(Vec<u8>)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        if self.asked == Asked::Option {
            note(|seen| seen.null = true);
        }
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(Strict {
            inner: deserializer,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(Strict {
            inner: deserializer,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        nested(|| {
            self.visitor.visit_seq(StrictSeq {
                inner: seq,
                read: 0,
                typed_list: self.asked == Asked::Seq,
            })
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        nested(|| self.visitor.visit_map(StrictMap { inner: map }))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_enum(StrictEnum { inner: data })
    }
}

struct StrictSeed<S> {
    seed: S,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for StrictSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Strict {
            inner: deserializer,
        })
    }
}

struct StrictSeq<A> {
    inner: A,
    read: usize,
    typed_list: bool,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for StrictSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        let element = self.inner.next_element_seed(StrictSeed { seed })?;
        match element {
            Some(_) => self.read = self.read.saturating_add(1),
            None if self.read == 0 && self.typed_list => note(|seen| seen.empty_list = true),
            None => {}
        }
        Ok(element)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct StrictMap<A> {
    inner: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for StrictMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(StrictSeed { seed })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.inner.next_value_seed(StrictSeed { seed })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

struct StrictEnum<A> {
    inner: A,
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for StrictEnum<A> {
    type Error = A::Error;
    type Variant = StrictVariant<A::Variant>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), A::Error> {
        let (value, variant) = self.inner.variant_seed(StrictSeed { seed })?;
        Ok((value, StrictVariant { inner: variant }))
    }
}

struct StrictVariant<A> {
    inner: A,
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for StrictVariant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.newtype_variant_seed(StrictSeed { seed })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner.tuple_variant(len, Wrap::new(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner.struct_variant(fields, Wrap::new(visitor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Small {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        list: Vec<u32>,
        #[serde(default)]
        raw: Option<Value>,
    }

    /// Whatever the typed read accepts, the `Value` read accepts, and the
    /// typed values agree.
    #[test]
    fn accepts_only_what_a_value_read_accepts() {
        let accepted = [
            r#"{"name": "a", "list": [1, 2], "raw": {"x": null, "y": []}}"#,
            r#"{"unknown": {"deep": [1, 2.5, "s", null, true]}}"#,
        ];
        for text in accepted {
            let typed: Small = from_slice(text.as_bytes()).unwrap();
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(typed, serde_json::from_value::<Small>(value).unwrap());
        }
        let deep = format!("{{\"unknown\": {}{}}}", "[".repeat(200), "]".repeat(200));
        let refused: Vec<Vec<u8>> = vec![
            br#"{"unknown": 1e999}"#.to_vec(),
            br#"{"unknown": "\ud800"}"#.to_vec(),
            b"{\"unknown\": \"\xff\"}".to_vec(),
            deep.into_bytes(),
        ];
        for bytes in refused {
            assert!(serde_json::from_slice::<Value>(&bytes).is_err());
            // serde_json alone skips these without a word.
            assert!(serde_json::from_slice::<Small>(&bytes).is_ok());
            assert!(from_slice::<Small>(&bytes).is_err(), "{bytes:?}");
        }
    }

    #[test]
    fn a_value_cut_from_a_body_nests_no_deeper_than_the_body_allows() {
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        // Alone, serde_json reads 127 levels; two levels down in a body, 125.
        assert!(serde_json::from_str::<Value>(&nested(127)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(128)).is_err());
        let body = |levels: usize| format!("{{\"a\": {{\"b\": {}}}}}", nested(levels));
        assert!(serde_json::from_str::<Value>(&body(125)).is_ok());
        assert!(serde_json::from_str::<Value>(&body(126)).is_err());
        assert!(from_slice_within::<Value>(nested(125).as_bytes(), 2).is_ok());
        assert!(from_slice_within::<Value>(nested(126).as_bytes(), 2).is_err());
        assert!(from_slice::<Value>(nested(127).as_bytes()).is_ok());
    }

    #[test]
    fn notes_what_a_round_trip_would_not_write_back() {
        let seen = |text: &str| from_slice::<Tracked<Small>>(text.as_bytes()).unwrap().seen;
        assert!(seen(r#"{"name": "a", "list": [1], "raw": {"n": null, "e": []}}"#).is_clean());
        assert!(seen(r#"{"name": null}"#).null);
        assert!(seen(r#"{"list": []}"#).empty_list);
        assert!(seen(r#"{"other": 1}"#).ignored);
    }
}
