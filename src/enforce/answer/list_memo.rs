//! A listing's message taken from what was kept of the last one ([`ListMemo`]), when it is the
//! same message with nothing changed but the value of its top-level `id`:
//!
//! - the bytes before that value and the bytes after it are the kept ones, exactly;
//! - what stands between them is read strictly as one JSON value (within the levels left), and
//!   becomes the message's id.
//!
//! JSON's grammar lets any value stand where a value stood, so such a message is valid, strict
//! JSON exactly when its id is, and it reads as the kept message with the new id; anything
//! else is read whole, as before. For a `tools/list`, the entries' annotations are what the
//! tool-annotation map held: a message is kept only when the map knew every tool with the same
//! text, and taken only while the map has not changed since
//! ([`ToolAnnotations::generation`](crate::mcp::annotations::ToolAnnotations::generation)).

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use super::list_json::{Entries, Entry, Members, Message, Outcome, Page, Tool, Wanted, strict_id};
use crate::mcp::listings::{KeptEntries, KeptEntry, KeptList, ListMemo};

/// `text` read from what `memo` kept: `Some` only when it is the kept message of this listing
/// with at most its id changed, and the id it carries now is strict JSON.
pub(super) fn recall<'a>(
    memo: &ListMemo,
    text: &'a str,
    wanted: Wanted<'_>,
) -> Option<Message<'a>> {
    let kept = memo.last(wanted.entries)?;
    // Read the same way, and for tools against the map as it still is.
    let current = match (wanted.tools, kept.generation) {
        (false, None) => true,
        (true, Some(generation)) => wanted
            .known
            .is_some_and(|known| known.generation() == generation),
        _ => false,
    };
    if !current || kept.name != wanted.name {
        return None;
    }
    let before = kept.text.get(..kept.id.start)?;
    let after = kept.text.get(kept.id.end..)?;
    if text.len() < before.len() + after.len()
        || !text.starts_with(before)
        || !text.ends_with(after)
    {
        return None;
    }
    let id_text = text.get(before.len()..text.len() - after.len())?;
    let id = strict_id(id_text).ok()?;
    // The value without the whitespace around it, as the writer copies it.
    let id_text = id_text.trim_matches(JSON_WHITESPACE);
    let page = Page {
        entries: match &kept.entries {
            KeptEntries::Absent => Entries::Absent,
            KeptEntries::NotArray => Entries::NotArray,
            KeptEntries::Listed(entries) => Entries::Listed(
                entries
                    .iter()
                    .map(|entry| Entry {
                        name: entry.name.clone().map(Cow::Owned),
                        tool: entry.tool.clone().map(Tool::Known),
                    })
                    .collect(),
            ),
        },
        next_cursor: kept.next_cursor.clone().map(Cow::Owned),
    };
    Some(Message::Object(Members {
        jsonrpc_is_2_0: kept.jsonrpc_is_2_0,
        method: None,
        id: Some(id),
        id_text: Some(id_text),
        result: Some(Outcome::Page(page)),
        error: None,
        kept: Some(kept),
    }))
}

/// The characters JSON allows around a value.
const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// Keeps the message just read from `text` (its `members`) in `memo` when it is a listing's
/// result whose every tool the map knew (at `generation`, counted before the read): it
/// replaces what was kept for this listing, and is returned.
pub(super) fn keep(
    memo: &ListMemo,
    text: &str,
    members: &Members<'_>,
    wanted: Wanted<'_>,
    generation: Option<u64>,
) -> Option<Arc<KeptList>> {
    let (Some(id_text), Some(Outcome::Page(page)), None, None) = (
        members.id_text,
        &members.result,
        members.method,
        &members.error,
    ) else {
        return None;
    };
    let id = span_in(text, id_text)?;
    // Tools are kept only as read against the map.
    let generation = generation.filter(|_| wanted.tools);
    if wanted.tools && generation.is_none() {
        return None;
    }
    let entries = match &page.entries {
        Entries::Absent => KeptEntries::Absent,
        Entries::NotArray => KeptEntries::NotArray,
        Entries::Listed(entries) => {
            let mut kept = Vec::with_capacity(entries.len());
            for entry in entries {
                let tool = match &entry.tool {
                    Some(Tool::Known(listed)) => Some(listed.clone()),
                    // A tool the map did not know yet: kept once the map knows it.
                    Some(Tool::Text(_)) => return None,
                    None => None,
                };
                let name = entry.name.as_deref().map(str::to_owned);
                kept.push(KeptEntry { name, tool });
            }
            KeptEntries::Listed(kept)
        }
    };
    let kept = KeptList {
        name: wanted.name,
        text: Box::from(text),
        id,
        generation,
        jsonrpc_is_2_0: members.jsonrpc_is_2_0,
        entries,
        next_cursor: page.next_cursor.as_deref().map(str::to_owned),
        written: Mutex::default(),
    };
    memo.replace(wanted.entries, kept)
}

/// Where `part`, a slice of `text`, stands in it.
fn span_in(text: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    (end <= text.len()).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::super::list_json::read;
    use super::*;
    use crate::mcp::annotations::{ListedText, ToolAnnotations};
    use crate::mcp::listings::MAX_KEPT_TEXT;

    const SCHEMA: &str = r#"{"type":"object"}"#;
    const HINTS: &str = r#"{"readOnlyHint":true}"#;

    fn page(id: &str, cursor: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","result":{{"tools":[{{"name":"a","annotations":{HINTS},"inputSchema":{SCHEMA}}},{{"name":"b\u0062","inputSchema":{SCHEMA}}}],"nextCursor":"{cursor}"}},"id":{id}}}"#
        )
    }

    /// A map that knows tools `a` and `bb` as `page` lists them.
    fn known() -> ToolAnnotations {
        let known = ToolAnnotations::new(10);
        let a = ListedText {
            annotations: Some(HINTS),
            input_schema: Some(SCHEMA),
        };
        let b = ListedText {
            annotations: None,
            input_schema: Some(SCHEMA),
        };
        known.remember_text("a", a).unwrap();
        known.remember_text("bb", b).unwrap();
        known
    }

    fn wanted<'k>(known: &'k ToolAnnotations, memo: &'k ListMemo) -> Wanted<'k> {
        Wanted {
            entries: "tools",
            name: "name",
            tools: true,
            known: Some(known),
            memo: Some(memo),
        }
    }

    /// What a message reads as, its id's place aside (the memo does not say it).
    fn shown(message: Result<Message<'_>, serde_json::Error>) -> String {
        match message {
            Ok(Message::Object(mut members)) => {
                members.id_text = None;
                members.kept = None;
                format!("{members:?}")
            }
            other => format!(
                "{:?}",
                other.map(|_| "not an object").map_err(|_| "refused")
            ),
        }
    }

    #[test]
    fn the_same_message_with_another_id_reads_from_the_memo_as_it_reads_whole() {
        let (known, memo) = (known(), ListMemo::default());
        let first = page("1", "c1");
        let read_first = shown(read(&first, wanted(&known, &memo)));
        assert!(read_first.contains("Known"), "{read_first}");
        for id in ["1", "\"x\"", " 7 ", "123456789012", "{\"k\":1}"] {
            let text = page(id, "c1");
            let remembered = recall(&memo, &text, wanted(&known, &memo));
            assert!(remembered.is_some(), "{id}: from the memo");
            let plain = Wanted {
                memo: None,
                ..wanted(&known, &memo)
            };
            assert_eq!(
                shown(Ok(remembered.unwrap())),
                shown(read(&text, plain)),
                "{id}"
            );
        }
    }

    #[test]
    fn anything_else_changed_is_read_whole_and_refused_as_before() {
        let (known, memo) = (known(), ListMemo::default());
        read(&page("1", "c1"), wanted(&known, &memo)).unwrap();
        let plain = Wanted {
            memo: None,
            ..wanted(&known, &memo)
        };
        for text in [
            page("1", "c2"),
            page("1,\"id\":2", "c1"),
            page("{\"k\":1,\"k\":2}", "c1"),
            page("[", "c1"),
            page("", "c1"),
            page("1e400", "c1"),
            page(&format!("{}1{}", "[".repeat(126), "]".repeat(126)), "c1"),
            page(&format!("{}1{}", "[".repeat(127), "]".repeat(127)), "c1"),
            page("\"\\ud800\"", "c1"),
            page("1", "c1").replace("\"a\"", "\"z\""),
            format!("{} ", page("1", "c1")),
        ] {
            let remembered = recall(&memo, &text, wanted(&known, &memo));
            let whole = shown(read(&text, plain));
            match remembered {
                Some(message) => assert_eq!(shown(Ok(message)), whole, "{text}"),
                None => assert_ne!(whole, "", "{text}"),
            }
            // Read through the memo, the message reads as it reads whole.
            assert_eq!(shown(read(&text, wanted(&known, &memo))), whole, "{text}");
        }
        // The memo keeps the last message read.
        read(&page("1", "c2"), wanted(&known, &memo)).unwrap();
        assert!(recall(&memo, &page("2", "c2"), wanted(&known, &memo)).is_some());
        assert!(recall(&memo, &page("1", "c1"), wanted(&known, &memo)).is_none());
        let deep = page(&format!("{}1{}", "[".repeat(127), "]".repeat(127)), "c2");
        assert!(shown(read(&deep, wanted(&known, &memo))).contains("refused"));
        assert!(recall(&memo, &deep, wanted(&known, &memo)).is_none());
    }

    #[test]
    fn a_change_to_the_tool_map_or_an_unknown_tool_keeps_nothing() {
        let (known, memo) = (known(), ListMemo::default());
        let text = page("1", "c1");
        read(&text, wanted(&known, &memo)).unwrap();
        assert!(recall(&memo, &text, wanted(&known, &memo)).is_some());
        let other = ListedText {
            annotations: Some(r#"{"destructiveHint":true}"#),
            input_schema: None,
        };
        known.remember_text("a", other).unwrap();
        assert!(
            recall(&memo, &text, wanted(&known, &memo)).is_none(),
            "the map changed"
        );
        // Now `a` is listed with other text than the map holds: read, not kept.
        let fresh = ListMemo::default();
        read(&text, wanted(&known, &fresh)).unwrap();
        assert!(recall(&fresh, &text, wanted(&known, &fresh)).is_none());
        // A memo of tools needs the map.
        let without = Wanted {
            known: None,
            ..wanted(&known, &fresh)
        };
        read(&text, without).unwrap();
        assert!(recall(&fresh, &text, without).is_none());
    }

    #[test]
    fn other_listings_are_kept_apart_and_a_large_message_is_not_kept() {
        let memo = ListMemo::default();
        let known = ToolAnnotations::new(1);
        let resources = Wanted {
            entries: "resources",
            name: "uri",
            tools: false,
            known: Some(&known),
            memo: Some(&memo),
        };
        let text = r#"{"jsonrpc":"2.0","id":3,"result":{"resources":[{"uri":"file:///a"}]}}"#;
        read(text, resources).unwrap();
        assert!(recall(&memo, text, resources).is_some());
        let prompts = Wanted {
            entries: "prompts",
            name: "name",
            ..resources
        };
        assert!(recall(&memo, text, prompts).is_none(), "another listing");
        let named_otherwise = Wanted {
            name: "name",
            ..resources
        };
        assert!(
            recall(&memo, text, named_otherwise).is_none(),
            "read for another name member"
        );
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{{"resources":[{{"uri":"file:///{}"}}]}}}}"#,
            "a".repeat(MAX_KEPT_TEXT)
        );
        read(&long, resources).unwrap();
        assert!(
            recall(&memo, &long, resources).is_none(),
            "too long to keep"
        );
        assert!(
            recall(&memo, text, resources).is_some(),
            "the last kept stays"
        );
    }
}
