//! What the inner server said about its tools: the `annotations` and `inputSchema` of each
//! tool in the last `tools/list` answer that passed through the layer, kept for `evaluate`
//! ([`Evaluation::tool_annotations`](crate::policy::Evaluation::tool_annotations),
//! [`Evaluation::tool_input_schema`](crate::policy::Evaluation::tool_input_schema)).
//!
//! Looked up on every `tools/call`, so it is a plain map behind a read-write lock rather than a
//! cache with admission and eviction bookkeeping. Bounded: once it holds `capacity` tool names,
//! new names are not remembered (known names are still updated). The annotations are the
//! server's hints, never facts.
//!
//! A list the layer filters tells it the same thing about most tools every time: a tool listed
//! again with the same text ([`ListedText`]) keeps what was read of it before, so listing costs
//! a comparison per tool, not a JSON tree built and the previous one dropped.
//!
//! The names are hashed with `foldhash` (seeded at random per process), not the standard
//! library's SipHash: a name is hashed once per listed entry and once per call, and the names
//! stored are the inner server's, so no caller chooses what collides in the map.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;

use crate::deadline::OncePer;
use crate::mcp::json::StrictValue;

/// What one `tools/list` entry said of its tool, beside the name.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ListedTool {
    /// The entry's `annotations` (an empty object for an entry that has none).
    pub annotations: Value,
    /// The entry's `inputSchema`, as listed.
    pub input_schema: Option<Value>,
}

impl ListedTool {
    /// Reads one `tools/list` entry.
    pub fn from_entry(entry: &Value) -> Self {
        Self::from_parts(
            entry.get("annotations").cloned(),
            entry.get("inputSchema").cloned(),
        )
    }

    /// What an entry said, from its `annotations` and `inputSchema` members as read (an
    /// `annotations` that is not an object counts as none).
    pub fn from_parts(annotations: Option<Value>, input_schema: Option<Value>) -> Self {
        Self {
            annotations: annotations
                .filter(Value::is_object)
                .unwrap_or_else(|| Value::Object(Default::default())),
            input_schema,
        }
    }
}

/// What one `tools/list` entry said of its tool, beside the name, as the text it came in: its
/// `annotations` and `inputSchema` members, when present, each one JSON value already read
/// strictly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ListedText<'a> {
    /// The `annotations` member's text.
    pub annotations: Option<&'a str>,
    /// The `inputSchema` member's text.
    pub input_schema: Option<&'a str>,
}

impl ListedText<'_> {
    /// What the text says, read (strictly, as everything the layer reads).
    fn read(self) -> Result<ListedTool, serde_json::Error> {
        let value = |text: Option<&str>| {
            text.map(|text| serde_json::from_str::<StrictValue>(text).map(|value| value.0))
                .transpose()
        };
        Ok(ListedTool::from_parts(
            value(self.annotations)?,
            value(self.input_schema)?,
        ))
    }
}

/// A [`ListedText`], kept.
struct KeptText {
    annotations: Option<Box<str>>,
    input_schema: Option<Box<str>>,
}

impl KeptText {
    fn of(text: ListedText<'_>) -> Self {
        Self {
            annotations: text.annotations.map(Box::from),
            input_schema: text.input_schema.map(Box::from),
        }
    }

    /// Whether this is `text`.
    fn is(&self, text: ListedText<'_>) -> bool {
        self.annotations.as_deref() == text.annotations
            && self.input_schema.as_deref() == text.input_schema
    }
}

/// What is known of one tool: what was read of it, and the text it was read from when it came
/// from a list the layer filtered.
struct Known {
    listed: Arc<ListedTool>,
    text: Option<KeptText>,
}

/// Listed tools by name.
pub(crate) struct ToolAnnotations {
    by_name: RwLock<HashMap<String, Known, foldhash::fast::RandomState>>,
    /// Counts the changes to `by_name`: what was read against the map is current while this
    /// has not moved.
    generation: AtomicU64,
    capacity: usize,
    /// The layer lists the tools itself at most once per ten seconds.
    learn: OncePer,
    /// One listing at a time: callers that meet an unknown tool meanwhile wait for it.
    pub learning: tokio::sync::Mutex<()>,
}

/// How often, at most, the layer lists the inner server's tools itself.
const LEARN_INTERVAL_MS: u64 = 10_000;

impl ToolAnnotations {
    /// Remembers at most `capacity` tool names.
    pub fn new(capacity: usize) -> Self {
        Self {
            by_name: RwLock::new(HashMap::default()),
            generation: AtomicU64::new(0),
            capacity,
            learn: OncePer::new(Duration::from_millis(LEARN_INTERVAL_MS)),
            learning: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether this caller should list the tools now: at most once per ten seconds per
    /// process, so a tool the server never lists costs at most that, however often it is
    /// called.
    pub fn may_learn(&self) -> bool {
        self.learn.try_now()
    }

    /// The count of changes made to the map so far: equal counts, the same map.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// What the last list said of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<ListedTool>> {
        let by_name = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
        by_name.get(name).map(|known| known.listed.clone())
    }

    /// Whether the last list named `name`.
    pub fn contains(&self, name: &str) -> bool {
        let by_name = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
        by_name.contains_key(name)
    }

    /// Records what a list said of `name`.
    pub fn remember(&self, name: &str, annotations: Arc<ListedTool>) {
        self.store(name, annotations, None);
    }

    /// What was read of `name` when it was last listed as `text`, if it was.
    pub fn listed_as(&self, name: &str, text: ListedText<'_>) -> Option<Arc<ListedTool>> {
        let by_name = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
        let read_from = |known: &&Known| known.text.as_ref().is_some_and(|kept| kept.is(text));
        by_name
            .get(name)
            .filter(read_from)
            .map(|known| known.listed.clone())
    }

    /// Records what a list said of `name` as `text`, and gives it back read: what was read
    /// before when the text is the same, read now otherwise. An error only for text that is
    /// not strict JSON. The listing's reader checks `text` before it calls this, and checks
    /// no text again that [`Self::listed_as`] finds: only text it checked is given here.
    pub fn remember_text(
        &self,
        name: &str,
        text: ListedText<'_>,
    ) -> Result<Arc<ListedTool>, serde_json::Error> {
        if let Some(listed) = self.listed_as(name, text) {
            return Ok(listed);
        }
        let listed = Arc::new(text.read()?);
        self.store(name, listed.clone(), Some(KeptText::of(text)));
        Ok(listed)
    }

    /// Keeps `listed` for `name`, unless the map is full and `name` new.
    fn store(&self, name: &str, listed: Arc<ListedTool>, text: Option<KeptText>) {
        let mut by_name = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        let known = Known { listed, text };
        if let Some(slot) = by_name.get_mut(name) {
            *slot = known;
        } else if by_name.len() < self.capacity {
            by_name.insert(name.to_owned(), known);
        } else {
            return;
        }
        // Under the write lock: a reader that sees the new count sees the new map.
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_updated() {
        let annotations = ToolAnnotations::new(2);
        let hint = |destructive: bool| {
            let entry = serde_json::json!({"annotations": {"destructiveHint": destructive}});
            Arc::new(ListedTool::from_entry(&entry))
        };
        annotations.remember("a", hint(false));
        annotations.remember("b", hint(false));
        annotations.remember("c", hint(true));
        assert!(
            annotations.get("c").is_none(),
            "over capacity: not remembered"
        );
        annotations.remember("a", hint(true));
        assert_eq!(
            annotations.get("a"),
            Some(hint(true)),
            "a known name is updated"
        );
        assert_eq!(annotations.get("b"), Some(hint(false)));
    }

    #[test]
    fn the_same_text_keeps_what_was_read_and_other_text_is_read_again() {
        let annotations = ToolAnnotations::new(1);
        let text = ListedText {
            annotations: Some(r#"{"destructiveHint": true}"#),
            input_schema: Some(r#"{"type":"object"}"#),
        };
        let first = annotations.remember_text("a", text).unwrap();
        assert_eq!(
            first.annotations,
            serde_json::json!({"destructiveHint": true})
        );
        assert_eq!(
            first.input_schema,
            Some(serde_json::json!({"type": "object"}))
        );
        let again = annotations.remember_text("a", text).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the same text: kept");
        let changed = ListedText {
            annotations: Some(r#"{"destructiveHint":false}"#),
            ..text
        };
        let read = annotations.remember_text("a", changed).unwrap();
        assert_eq!(
            read.annotations,
            serde_json::json!({"destructiveHint": false})
        );
        assert_eq!(annotations.get("a"), Some(read.clone()), "updated");
        let none = annotations
            .remember_text("a", ListedText::default())
            .unwrap();
        assert_eq!(none.annotations, serde_json::json!({}));
        assert_eq!(none.input_schema, None);
        // Over capacity: read, given back, not kept.
        let other = annotations.remember_text("b", text).unwrap();
        assert_eq!(
            other.input_schema,
            Some(serde_json::json!({"type": "object"}))
        );
        assert!(annotations.get("b").is_none());
        // A value set by `remember` (no text) is read again from any text.
        annotations.remember("a", Arc::new(ListedTool::default()));
        let reread = annotations
            .remember_text("a", ListedText::default())
            .unwrap();
        assert_eq!(reread.annotations, serde_json::json!({}));
        assert!(
            annotations
                .remember_text(
                    "a",
                    ListedText {
                        annotations: Some("{\"a\":1,\"a\":2}"),
                        input_schema: None,
                    }
                )
                .is_err()
        );
    }
}
