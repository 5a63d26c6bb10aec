//! One message of a listing's answer, read in one strict pass.
//!
//! The pass reads the whole message as strictly as [`crate::mcp::json`] does (duplicate keys
//! refused at every depth, and everything `serde_json` refuses: invalid UTF-8, lone
//! surrogates, trailing bytes, nesting deeper than 128 levels, numbers out of range), and keeps
//! only what the layer asks of the message: the members that say its [`Kind`](super::message::Kind),
//! and, from the result, each entry's name (a tool's annotations and input schema too, as
//! their text) and the next cursor. Nothing else is built: the entries stay in the bytes they
//! came in, and [`super::list_edit`] writes the kept ones from there.

use std::borrow::Cow;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess};
use serde_json::Value;
use serde_json::value::RawValue;

use super::list_memo;
use super::message::Top;
use crate::mcp::annotations::{ListedText, ListedTool, ToolAnnotations};
use crate::mcp::json::StrictValue;
use crate::mcp::listings::{KeptList, ListMemo};
use crate::mcp::reading::{Checked, Keys, Read, Reading, Text};

/// What the pass keeps of a listing's result.
#[derive(Clone, Copy)]
pub(crate) struct Wanted<'k> {
    /// The member of the result that holds the entries (`tools`, `resources`, …).
    pub entries: &'static str,
    /// The member of an entry that names it (`name`, `uri`, `uriTemplate`).
    pub name: &'static str,
    /// Whether the entries are tools, whose annotations and input schema are kept.
    pub tools: bool,
    /// What is known of the tools: a tool listed again with the same text is given what was
    /// read of it before, and its text, checked when it was first read, is not read again.
    pub known: Option<&'k ToolAnnotations>,
    /// The last message read per listing: the same message again (its id aside) is not read
    /// again ([`super::list_memo`]).
    pub memo: Option<&'k ListMemo>,
}

/// What a `tools/list` result is read for (the tests').
#[cfg(test)]
pub(super) const TOOLS: Wanted<'static> = Wanted {
    entries: "tools",
    name: "name",
    tools: true,
    known: None,
    memo: None,
};

/// One message, read.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "made once per message and taken apart at once; a box would be an allocation per message"
)]
pub(crate) enum Message<'a> {
    /// An object: its members.
    Object(Members<'a>),
    /// Any other JSON value (an array is a batch, never one message).
    NotObject,
}

/// The top-level members of a message object that the layer reads.
#[derive(Debug, Default)]
pub(crate) struct Members<'a> {
    /// `jsonrpc` is present and is exactly the string `"2.0"`.
    pub jsonrpc_is_2_0: bool,
    /// `method`, when present: whether it is a string.
    pub method: Option<bool>,
    /// `id`, when present.
    pub id: Option<Value>,
    /// The text of `id`'s value, as it stands in the message.
    pub id_text: Option<&'a str>,
    /// The message as the memo keeps it, when it was taken from there or kept there
    /// ([`super::list_memo`]).
    pub kept: Option<Arc<KeptList>>,
    /// `result`, when present.
    pub result: Option<Outcome<'a>>,
    /// `error`, when present.
    pub error: Option<Value>,
}

impl Members<'_> {
    /// The members the message's kind depends on.
    pub(crate) fn top(&self) -> Top<'_> {
        Top {
            jsonrpc_is_2_0: self.jsonrpc_is_2_0,
            method: self.method,
            id: self.id.as_ref(),
            has_result: self.result.is_some(),
            error: self.error.as_ref(),
        }
    }
}

/// A message's `result`.
#[derive(Debug)]
pub(crate) enum Outcome<'a> {
    /// An object: a page of the listing.
    Page(Page<'a>),
    /// Any other value (refused as a result).
    NotObject,
}

/// What the layer reads of a listing's result.
#[derive(Debug, Default)]
pub(crate) struct Page<'a> {
    /// The entries member.
    pub entries: Entries<'a>,
    /// `nextCursor`, when it is a string.
    pub next_cursor: Option<Cow<'a, str>>,
}

/// A result's entries member.
#[derive(Debug, Default)]
pub(crate) enum Entries<'a> {
    /// The result has none: nothing is shown.
    #[default]
    Absent,
    /// Not an array: refused.
    NotArray,
    /// The entries, in order.
    Listed(Vec<Entry<'a>>),
}

/// What the layer reads of one entry.
#[derive(Debug, Default)]
pub(crate) struct Entry<'a> {
    /// The entry's name (its [`Wanted::name`] member), when it is a string.
    pub name: Option<Cow<'a, str>>,
    /// What a tool entry says beside its name (`None` for other entries, and for an entry
    /// that is not an object).
    pub tool: Option<Tool<'a>>,
}

/// What a tool entry says beside its name.
#[derive(Debug)]
pub(crate) enum Tool<'a> {
    /// The same as when it was last listed: what was read of it then.
    Known(Arc<ListedTool>),
    /// Its annotations and input schema, as their text.
    Text(ListedText<'a>),
}

/// Reads `text` as one message, strictly, keeping what `wanted` asks of its result.
pub(crate) fn read<'a>(
    text: &'a str,
    wanted: Wanted<'_>,
) -> Result<Message<'a>, serde_json::Error> {
    if let Some(remembered) = wanted
        .memo
        .and_then(|memo| list_memo::recall(memo, text, wanted))
    {
        return Ok(remembered);
    }
    // Counted before the read: a change to the map during the read leaves the message unkept.
    let generation = wanted.known.map(ToolAnnotations::generation);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let message = Read(MessageReading(wanted)).deserialize(&mut deserializer)?;
    deserializer.end()?;
    let mut message = message;
    if let (Some(memo), Message::Object(members)) = (wanted.memo, &mut message) {
        members.kept = list_memo::keep(memo, text, members, wanted, generation);
    }
    Ok(message)
}

/// A message object's members.
struct MessageReading<'k>(Wanted<'k>);

impl<'de> Reading<'de> for MessageReading<'_> {
    type Value = Message<'de>;

    fn other(self) -> Message<'de> {
        Message::NotObject
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Message<'de>, A::Error> {
        let mut keys = Keys::default();
        let mut members = Members::default();
        while let Some(key) = keys.next(&mut map)? {
            match &*key {
                "jsonrpc" => {
                    let version = map.next_value_seed(Read(Text))?;
                    members.jsonrpc_is_2_0 = version.as_deref() == Some("2.0");
                }
                "method" => members.method = Some(map.next_value_seed(Read(Text))?.is_some()),
                "id" => {
                    // Taken as its text first, so that the memo knows where it stands.
                    let text = map.next_value::<&'de RawValue>()?.get();
                    members.id = Some(strict_id(text).map_err(de::Error::custom)?);
                    members.id_text = Some(text);
                }
                "result" => members.result = Some(map.next_value_seed(Read(PageReading(self.0)))?),
                "error" => members.error = Some(map.next_value::<StrictValue>()?.0),
                _ => map.next_value_seed(Read(Checked))?,
            }
        }
        Ok(Message::Object(members))
    }
}

/// A result: its entries and next cursor.
struct PageReading<'k>(Wanted<'k>);

impl<'de> Reading<'de> for PageReading<'_> {
    type Value = Outcome<'de>;

    fn other(self) -> Outcome<'de> {
        Outcome::NotObject
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Outcome<'de>, A::Error> {
        let mut keys = Keys::default();
        let mut page = Page::default();
        while let Some(key) = keys.next(&mut map)? {
            if key == self.0.entries {
                page.entries = map.next_value_seed(Read(EntriesReading(self.0)))?;
            } else if key == "nextCursor" {
                page.next_cursor = map.next_value_seed(Read(Text))?;
            } else {
                map.next_value_seed(Read(Checked))?;
            }
        }
        Ok(Outcome::Page(page))
    }
}

/// A result's entries member.
struct EntriesReading<'k>(Wanted<'k>);

impl<'de> Reading<'de> for EntriesReading<'_> {
    type Value = Entries<'de>;

    fn other(self) -> Entries<'de> {
        Entries::NotArray
    }

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries<'de>, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = seq.next_element_seed(Read(EntryReading(self.0)))? {
            entries.push(entry);
        }
        Ok(Entries::Listed(entries))
    }
}

/// One entry: its name, and a tool's annotations and input schema.
struct EntryReading<'k>(Wanted<'k>);

impl<'de> Reading<'de> for EntryReading<'_> {
    type Value = Entry<'de>;

    fn other(self) -> Entry<'de> {
        Entry::default()
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry<'de>, A::Error> {
        let Wanted { name, tools, .. } = self.0;
        let mut keys = Keys::default();
        let mut entry = Entry::default();
        let mut text = ListedText::default();
        while let Some(key) = keys.next(&mut map)? {
            if key == name {
                entry.name = map.next_value_seed(Read(Text))?;
            } else if tools && key == "annotations" {
                text.annotations = Some(map.next_value::<&'de RawValue>()?.get());
            } else if tools && key == "inputSchema" {
                text.input_schema = Some(map.next_value::<&'de RawValue>()?.get());
            } else {
                map.next_value_seed(Read(Checked))?;
            }
        }
        if tools {
            let known = self.0.known.zip(entry.name.as_deref());
            let known = known.and_then(|(known, name)| known.listed_as(name, text));
            entry.tool = Some(match known {
                // The same text was checked when it was first read: it reads the same.
                Some(listed) => Tool::Known(listed),
                None => {
                    check_member(text.annotations).map_err(de::Error::custom)?;
                    check_member(text.input_schema).map_err(de::Error::custom)?;
                    Tool::Text(text)
                }
            });
        }
        Ok(entry)
    }
}

/// How many arrays and objects deep an entry's member may nest: serde_json reads at most 127
/// levels, and the member's value is the fifth (the message, its result, the entries, the
/// entry, the member).
const MEMBER_LEVELS: u8 = 127 - 4;

/// How many arrays and objects deep a message's id may nest: it is the second level.
const ID_LEVELS: u8 = 127 - 1;

/// A message's id, taken as its text, read whole and exactly as strictly as the rest of the
/// message, within the levels left.
pub(super) fn strict_id(text: &str) -> Result<Value, serde_json::Error> {
    check_within(text, ID_LEVELS)?;
    serde_json::from_str::<StrictValue>(text).map(|id| id.0)
}

/// An entry's member, taken as its text (serde_json checks its syntax, and nothing more),
/// read whole and exactly as strictly as the rest of the message, within the levels left.
fn check_member(text: Option<&str>) -> Result<(), serde_json::Error> {
    match text {
        Some(text) => check_within(text, MEMBER_LEVELS),
        None => Ok(()),
    }
}

/// `text` read whole and strictly as one value of at most `levels` arrays and objects deep.
fn check_within(text: &str, levels: u8) -> Result<(), serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    Read(Nested(levels)).deserialize(&mut deserializer)?;
    deserializer.end()
}

/// Any value, read whole and strictly, nothing kept, at most this many arrays and objects
/// deep (counting its own).
#[derive(Clone, Copy)]
struct Nested(u8);

impl Nested {
    /// The levels left inside an array or object this one opens.
    fn inside<E: de::Error>(self) -> Result<Self, E> {
        let levels = self.0.checked_sub(1);
        levels
            .map(Nested)
            .ok_or_else(|| E::custom("recursion limit exceeded"))
    }
}

impl<'de> Reading<'de> for Nested {
    type Value = ();

    fn other(self) {}

    fn array<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inside = self.inside()?;
        while seq.next_element_seed(Read(inside))?.is_some() {}
        Ok(())
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inside = self.inside()?;
        let mut keys = Keys::default();
        while keys.next(&mut map)?.is_some() {
            map.next_value_seed(Read(inside))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str) -> Page<'_> {
        match read(text, TOOLS) {
            Ok(Message::Object(Members {
                result: Some(Outcome::Page(page)),
                ..
            })) => page,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn names_annotations_and_the_cursor_are_read() {
        let text = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[
            {"name":"a","annotations":{"readOnlyHint":true},"inputSchema":{"type":"object"}},
            {"name":"b\u0021","annotations":7},
            {"title":"no name"},
            3
        ],"nextCursor":"n1"}}"#;
        let page = page(text);
        let Entries::Listed(entries) = page.entries else {
            panic!("entries")
        };
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0].name.as_deref(), Some("a"));
        assert!(matches!(entries[0].name, Some(Cow::Borrowed(_))));
        fn listed<'a>(entry: &Entry<'a>) -> ListedText<'a> {
            match &entry.tool {
                Some(Tool::Text(text)) => *text,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            listed(&entries[0]).annotations,
            Some(r#"{"readOnlyHint":true}"#)
        );
        assert_eq!(
            listed(&entries[0]).input_schema,
            Some(r#"{"type":"object"}"#)
        );
        assert_eq!(entries[1].name.as_deref(), Some("b!"));
        assert_eq!(listed(&entries[1]).annotations, Some("7"));
        assert_eq!(listed(&entries[1]).input_schema, None);
        assert_eq!(entries[2].name, None);
        assert_eq!(entries[3].name, None);
        assert!(entries[3].tool.is_none(), "not an object: nothing read");
        assert_eq!(page.next_cursor.as_deref(), Some("n1"));
    }

    #[test]
    fn a_tool_listed_again_with_the_same_text_is_known_and_other_text_is_read() {
        let known = ToolAnnotations::new(8);
        let text = ListedText {
            annotations: Some(r#"{"readOnlyHint":true}"#),
            input_schema: None,
        };
        let remembered = known.remember_text("a", text).unwrap();
        let wanted = Wanted {
            known: Some(&known),
            ..TOOLS
        };
        let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[
            {"annotations":{"readOnlyHint":true},"name":"a"},
            {"name":"a","annotations":{"readOnlyHint":false}},
            {"name":"b","annotations":{"readOnlyHint":true}}
        ]}}"#;
        let Ok(Message::Object(Members {
            result: Some(Outcome::Page(page)),
            ..
        })) = read(list, wanted)
        else {
            panic!("a page")
        };
        let Entries::Listed(entries) = page.entries else {
            panic!("entries")
        };
        assert!(
            matches!(&entries[0].tool, Some(Tool::Known(listed)) if Arc::ptr_eq(listed, &remembered))
        );
        assert!(matches!(entries[1].tool, Some(Tool::Text(_))), "other text");
        assert!(
            matches!(entries[2].tool, Some(Tool::Text(_))),
            "another name"
        );
        // Text nobody checked is read strictly, named or not, whatever is known.
        for entry in [
            r#"{"name":"a","annotations":{"readOnlyHint":true,"x":1,"x":1}}"#,
            r#"{"annotations":{"x":1,"x":1}}"#,
            r#"{"name":"b","inputSchema":{"x":"\ud800"}}"#,
        ] {
            let list = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{entry}]}}}}"#);
            assert!(read(&list, wanted).is_err(), "{entry}");
        }
    }

    #[test]
    fn duplicates_are_refused_at_every_depth_and_after_many_keys() {
        let many: String = (0..20).map(|n| format!("\"k{n}\":{n},")).collect();
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"id":1,"result":{}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"tools":[]}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","name":"b"}]}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","n\u0061me":"b"}]}}"#
                .to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"n\u0061me":"a","name":"b"}]}}"#
                .to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":{"\u0061":1,"a":1}}]}}"#
                .to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"x":{"y":1,"y":2}}]}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":{"y":1,"y":2}}]}}"#
                .to_owned(),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{{many}"k19":0}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{{many}"k3":0}}}}"#),
        ] {
            let error = read(&text, TOOLS).unwrap_err();
            assert!(
                error.to_string().starts_with("duplicate key"),
                "{text}: {error}"
            );
        }
        let distinct = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{{many}"k20":0}}}}"#);
        assert!(read(&distinct, TOOLS).is_ok());
    }

    #[test]
    fn accepts_exactly_what_the_strict_tree_accepts() {
        let deep = |depth: usize| {
            let (open, close) = ("[".repeat(depth), "]".repeat(depth));
            [
                format!(
                    r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{{"x":{open}{close}}}]}}}}"#
                ),
                format!(
                    r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{{"annotations":{open}{close}}}]}}}}"#
                ),
                format!(
                    r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{{"inputSchema":{{"a":{open}{close}}}}}]}}}}"#
                ),
            ]
        };
        let texts = [
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}} "#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}} x"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"\ud800"}]}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"annotations":"\ud800"}]}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":{"a":1,"a":1}}]}}"#
                .to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":[1e400]}]}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":{"a":[01]}}]}}"#
                .to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"n":1e400}]}}"#.to_owned(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"n":-0.5e-3}]}}"#.to_owned(),
            r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#.to_owned(),
            r#"[{"a":1,"a":1}]"#.to_owned(),
            "\"text\"".to_owned(),
            String::new(),
        ];
        // Around serde_json's nesting limit, counted from the message's top.
        let mut accepted = [0; 2];
        for text in texts.into_iter().chain((118..=128).flat_map(deep)) {
            let strict = crate::mcp::json::parse_strict(text.as_bytes()).is_ok();
            assert_eq!(read(&text, TOOLS).is_ok(), strict, "{text}");
            accepted[usize::from(strict)] += 1;
        }
        assert!(accepted[0] > 0 && accepted[1] > 0, "{accepted:?}");
        for position in 0..3 {
            let at = |depth| deep(depth)[position].clone();
            let limit = (118..=128).find(|depth| read(&at(*depth), TOOLS).is_err());
            assert!(matches!(limit, Some(119..=128)), "{position}: {limit:?}");
        }
    }
}
