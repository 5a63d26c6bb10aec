//! A reader over JSON text that is already known to be valid: it finds where each value
//! starts and ends, and hands numbers over as their own text, which `serde_json` (without
//! `arbitrary_precision`) cannot do.
//!
//! Why not serde_json's `raw_value`: it delimits one value, but a walk down every level
//! would re-scan each level's text once more per depth, and it still reads numbers as floats.
//! `arbitrary_precision` would keep the text, but it changes `serde_json::Value` for every
//! crate in the build (rmcp's and jsonwebtoken's included). The layer has read the body
//! strictly before any policy runs (see `mcp::json`), so this reader only has to follow the
//! structure; whatever does not follow it is refused as [`Malformed`], never guessed.

use std::borrow::Cow;

/// The text does not follow the JSON grammar where the reader looked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Malformed;

/// The start of one value.
#[derive(Debug, PartialEq)]
pub(super) enum Start<'t> {
    Null,
    Bool(bool),
    /// A number, as its text (`-1.50e3`).
    Number(&'t str),
    String(Cow<'t, str>),
    /// `[` was read: read the items with [`Reader::item`].
    Array,
    /// `{` was read: read the members with [`Reader::key`].
    Object,
}

/// A position in JSON text.
pub(super) struct Reader<'t> {
    text: &'t str,
    at: usize,
}

impl<'t> Reader<'t> {
    /// A reader at the start of `text`.
    pub fn new(text: &'t str) -> Self {
        Self { text, at: 0 }
    }

    fn skip_space(&mut self) {
        let rest = &self.text.as_bytes()[self.at..];
        self.at += rest
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .count();
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), Malformed> {
        self.skip_space();
        if self.peek() != Some(byte) {
            return Err(Malformed);
        }
        self.at += 1;
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), Malformed> {
        if !self.text[self.at..].starts_with(word) {
            return Err(Malformed);
        }
        self.at += word.len();
        Ok(())
    }

    /// A string token at the reader (its opening quote), unescaped.
    fn string(&mut self) -> Result<Cow<'t, str>, Malformed> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut end = start + 1;
        let mut escaped = false;
        loop {
            match bytes.get(end) {
                None => return Err(Malformed),
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    end += 2;
                }
                Some(_) => end += 1,
            }
        }
        self.at = end + 1;
        if !escaped {
            return Ok(Cow::Borrowed(&self.text[start + 1..end]));
        }
        serde_json::from_str::<String>(&self.text[start..=end])
            .map(Cow::Owned)
            .map_err(|_| Malformed)
    }

    /// The next value's start; for an array or an object, its opening bracket is consumed.
    pub fn start(&mut self) -> Result<Start<'t>, Malformed> {
        self.skip_space();
        let start = match self.peek().ok_or(Malformed)? {
            b'n' => self.literal("null").map(|()| Start::Null)?,
            b't' => self.literal("true").map(|()| Start::Bool(true))?,
            b'f' => self.literal("false").map(|()| Start::Bool(false))?,
            b'"' => Start::String(self.string()?),
            b'[' => {
                self.at += 1;
                Start::Array
            }
            b'{' => {
                self.at += 1;
                Start::Object
            }
            b'-' | b'0'..=b'9' => {
                let rest = &self.text.as_bytes()[self.at..];
                let len = rest
                    .iter()
                    .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                let number = &self.text[self.at..self.at + len];
                self.at += len;
                Start::Number(number)
            }
            _ => return Err(Malformed),
        };
        Ok(start)
    }

    /// Inside an array: whether another item follows (the reader is then at it). `first` is
    /// whether no item has been read yet.
    pub fn item(&mut self, first: bool) -> Result<bool, Malformed> {
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(false);
        }
        if !first {
            self.expect(b',')?;
        }
        Ok(true)
    }

    /// Inside an object: the next member's key (the reader is then at its value), or `None`
    /// at the closing brace. `first` is whether no member has been read yet.
    pub fn key(&mut self, first: bool) -> Result<Option<Cow<'t, str>>, Malformed> {
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(None);
        }
        if !first {
            self.expect(b',')?;
            self.skip_space();
        }
        if self.peek() != Some(b'"') {
            return Err(Malformed);
        }
        let key = self.string()?;
        self.expect(b':')?;
        Ok(Some(key))
    }

    /// Skips one whole value and returns its text.
    pub fn skip(&mut self) -> Result<&'t str, Malformed> {
        self.skip_space();
        let from = self.at;
        match self.start()? {
            Start::Array => {
                let mut first = true;
                while self.item(first)? {
                    self.skip()?;
                    first = false;
                }
            }
            Start::Object => {
                let mut first = true;
                while self.key(first)?.is_some() {
                    self.skip()?;
                    first = false;
                }
            }
            _ => {}
        }
        Ok(&self.text[from..self.at])
    }

    /// Checks that nothing but whitespace is left.
    pub fn finish(mut self) -> Result<(), Malformed> {
        self.skip_space();
        if self.at == self.text.len() {
            Ok(())
        } else {
            Err(Malformed)
        }
    }
}

/// The text of `params.arguments` in a JSON-RPC message body already read strictly (so that
/// each key is there at most once); `None` when the body has no such member or it is `null`.
pub(super) fn arguments_text(body: &str) -> Result<Option<&str>, Malformed> {
    let mut reader = Reader::new(body);
    if reader.start()? != Start::Object {
        return Err(Malformed);
    }
    let mut found = None;
    let mut first = true;
    while let Some(key) = reader.key(first)? {
        first = false;
        if key != "params" {
            reader.skip()?;
            continue;
        }
        let mut params = Reader::new(reader.skip()?);
        if params.start()? != Start::Object {
            continue;
        }
        let mut first_param = true;
        while let Some(param) = params.key(first_param)? {
            first_param = false;
            let text = params.skip()?;
            if param == "arguments" && text != "null" {
                found = Some(text);
            }
        }
    }
    reader.finish()?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_arguments_however_the_body_spells_them() {
        for (body, expected) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"p":100.0000000000000001}}}"#,
                Some(r#"{"p":100.0000000000000001}"#),
            ),
            (
                r#" { "params" : { "arguments" : { "s" : "}\"]" , "n" : [ -1e5 ] } , "name" : "a" } , "id" : 1 } "#,
                Some(r#"{ "s" : "}\"]" , "n" : [ -1e5 ] }"#),
            ),
            (
                r#"{"\u0070arams":{"argument\u0073":{"x":1}},"id":1}"#,
                Some(r#"{"x":1}"#),
            ),
            (r#"{"params":{"arguments":null}}"#, None),
            (r#"{"params":{"name":"a"}}"#, None),
            (r#"{"method":"ping"}"#, None),
            (r#"{"arguments":{"x":1},"params":{}}"#, None),
        ] {
            assert_eq!(arguments_text(body), Ok(expected), "{body}");
        }
        for broken in [
            r#"{"params":{"arguments":{"x":1}}"#,
            r#"[1]"#,
            r#"{"a":1} x"#,
            r#"{"a":tru}"#,
        ] {
            assert_eq!(arguments_text(broken), Err(Malformed), "{broken}");
        }
    }

    #[test]
    fn strings_are_unescaped_and_numbers_kept_as_text() {
        let mut reader = Reader::new(r#"["a\"b\u00e9", 1.0e+1, true, null, {"k": -0}]"#);
        assert_eq!(reader.start(), Ok(Start::Array));
        assert!(reader.item(true).unwrap());
        assert_eq!(reader.start(), Ok(Start::String("a\"b\u{e9}".into())));
        assert!(reader.item(false).unwrap());
        assert_eq!(reader.start(), Ok(Start::Number("1.0e+1")));
        assert!(reader.item(false).unwrap());
        assert_eq!(reader.start(), Ok(Start::Bool(true)));
        assert!(reader.item(false).unwrap());
        assert_eq!(reader.start(), Ok(Start::Null));
        assert!(reader.item(false).unwrap());
        assert_eq!(reader.start(), Ok(Start::Object));
        assert_eq!(reader.key(true), Ok(Some("k".into())));
        assert_eq!(reader.start(), Ok(Start::Number("-0")));
        assert_eq!(reader.key(false), Ok(None));
        assert!(!reader.item(false).unwrap());
        assert_eq!(reader.finish(), Ok(()));
    }
}
