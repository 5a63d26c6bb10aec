//! Strict JSON read without building: a [`Reading`] says which kinds of value it looks into
//! and what it makes of every other kind, and [`Read`] turns it into serde's seed and visitor.
//! Every value is still read whole and as strictly as [`super::json::StrictValue`] reads it
//! (duplicate keys refused at every depth, [`Keys`]; numbers JSON cannot hold refused; and
//! everything `serde_json` refuses), but only what a reading keeps is built. The request's
//! classifier ([`super::json`]) and the listing reader (`enforce/answer/list_json.rs`) are
//! both readings.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// How one JSON value is read: the kinds of value a reading looks into, and its value for
/// every other kind, which is still read whole and strictly ([`check_seq`], [`check_map`]).
pub(crate) trait Reading<'de>: Sized {
    /// What the reading makes of a value.
    type Value;

    /// The value for a JSON value the reading does not look into.
    fn other(self) -> Self::Value;

    /// `null`.
    fn null(self) -> Self::Value {
        self.other()
    }

    /// A string, borrowed from the text when it has no escapes.
    fn string(self, _text: Cow<'de, str>) -> Self::Value {
        self.other()
    }

    /// An array.
    fn array<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        check_seq(seq)?;
        Ok(self.other())
    }

    /// An object.
    fn object<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        check_map(map)?;
        Ok(self.other())
    }
}

/// A [`Reading`] as serde's visitor and seed.
pub(crate) struct Read<R>(pub R);

impl<'de, R: Reading<'de>> DeserializeSeed<'de> for Read<R> {
    type Value = R::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<R::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, R: Reading<'de>> Visitor<'de> for Read<R> {
    type Value = R::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<R::Value, E> {
        Ok(self.0.other())
    }

    fn visit_i64<E>(self, _: i64) -> Result<R::Value, E> {
        Ok(self.0.other())
    }

    fn visit_u64<E>(self, _: u64) -> Result<R::Value, E> {
        Ok(self.0.other())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<R::Value, E> {
        // As `StrictValue` reads it: a number JSON cannot hold is refused.
        if v.is_finite() {
            Ok(self.0.other())
        } else {
            Err(E::custom("number out of range"))
        }
    }

    fn visit_unit<E>(self) -> Result<R::Value, E> {
        Ok(self.0.null())
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<R::Value, E> {
        Ok(self.0.string(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<R::Value, E> {
        Ok(self.0.string(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<R::Value, E> {
        Ok(self.0.string(Cow::Owned(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<R::Value, A::Error> {
        self.0.array(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<R::Value, A::Error> {
        self.0.object(map)
    }
}

/// Any value, read whole and strictly, nothing kept.
pub(crate) struct Checked;

impl Reading<'_> for Checked {
    type Value = ();

    fn other(self) {}
}

/// A string, or `None` for any other value.
pub(crate) struct Text;

impl<'de> Reading<'de> for Text {
    type Value = Option<Cow<'de, str>>;

    fn other(self) -> Self::Value {
        None
    }

    fn string(self, text: Cow<'de, str>) -> Self::Value {
        Some(text)
    }
}

/// Every element of an array, read whole and strictly.
pub(crate) fn check_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element_seed(Read(Checked))?.is_some() {}
    Ok(())
}

/// Every member of an object, read whole and strictly, a duplicate key refused.
pub(crate) fn check_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    let mut keys = Keys::default();
    while keys.next(&mut map)?.is_some() {
        map.next_value_seed(Read(Checked))?;
    }
    Ok(())
}

/// How many keys of one object are kept inline before they go to a tree.
const FEW: usize = 8;

/// The keys of one object read so far, decoded (so that escapes spelling the same key are the
/// same key): a second of any key is refused. The first few keys the text holds without
/// escapes are kept inline, borrowed; the rest in a tree, so an object of many keys costs a
/// logarithm per key, never their number.
#[derive(Default)]
pub(crate) struct Keys<'de> {
    few: [&'de str; FEW],
    len: usize,
    many: BTreeSet<Cow<'de, str>>,
}

impl<'de> Keys<'de> {
    /// The object's next key, refused when it is one already read.
    pub(crate) fn next<A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
    ) -> Result<Option<Cow<'de, str>>, A::Error> {
        let Some(key) = map.next_key_seed(Read(Text))? else {
            return Ok(None);
        };
        // JSON object keys are strings; serde_json reads nothing else as one.
        let key = key.ok_or_else(|| de::Error::custom("an object key that is no string"))?;
        let known = self.few[..self.len].contains(&&*key) || self.many.contains(&key);
        if known {
            return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
        }
        match key {
            Cow::Borrowed(text) if self.len < FEW => {
                self.few[self.len] = text;
                self.len += 1;
            }
            _ => {
                self.many.insert(key.clone());
            }
        }
        Ok(Some(key))
    }
}
