//! What the inner server last listed: per listing, the last response message the layer read
//! whole, and what it read of it.
//!
//! An inner server answers `tools/list` (and the other listings) with the same text again and
//! again; only the response's `id` differs from one request to the next. The listing reader
//! (`enforce/answer/list_memo.rs`) keeps the message here and takes a message from here only
//! when it is the kept text with nothing changed but its id. What is kept does not depend on
//! the caller: the entries are judged for each request after they are read.
//!
//! Beside the message, the last text the layer wrote of it ([`KeptWrite`]) and the edit it
//! wrote it with: the same message written with the same edit is the same text, its id aside,
//! so the writer copies it rather than walking the message again. The edit is all that
//! depends on the caller (which entries are shown, the sealed cursor, the private mark), and a
//! written text is taken only for an edit equal to the one it was written with.
//!
//! Bounded: one message per entries member (`tools`, `resources`, `resourceTemplates`,
//! `prompts`, `skills`; `resources/list` and `resources/directory/read` share one), of at most
//! [`MAX_KEPT_TEXT`] bytes, and one written text of it, of at most [`MAX_KEPT_WRITE`] bytes.
//! Per process: a replica that has not seen a list reads it whole once.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use super::annotations::ListedTool;

/// The longest message kept: a list of about a thousand tools.
pub(crate) const MAX_KEPT_TEXT: usize = 256 * 1024;

/// The longest written text kept: the kept message and room for what an edit adds.
pub(crate) const MAX_KEPT_WRITE: usize = MAX_KEPT_TEXT + 4096;

/// The listings kept apart, by the member of their result that holds the entries.
const LISTINGS: [&str; 5] = [
    "tools",
    "resources",
    "resourceTemplates",
    "prompts",
    "skills",
];

/// The last response message read per listing.
#[derive(Default)]
pub(crate) struct ListMemo {
    slots: [RwLock<Option<Arc<KeptList>>>; LISTINGS.len()],
}

impl fmt::Debug for ListMemo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListMemo").finish_non_exhaustive()
    }
}

/// One response message of a listing, kept, and what was read of it.
pub(crate) struct KeptList {
    /// The member of an entry that names it, as the message was read.
    pub name: &'static str,
    /// The message, as it came.
    pub text: Box<str>,
    /// Where the value of its top-level `id` stands in `text`.
    pub id: Range<usize>,
    /// For entries read as tools, the tool-annotation map's generation when the message was
    /// read; `None` for other entries.
    pub generation: Option<u64>,
    /// `jsonrpc` is exactly `"2.0"`.
    pub jsonrpc_is_2_0: bool,
    /// What was read of the result's entries member.
    pub entries: KeptEntries,
    /// The result's `nextCursor`.
    pub next_cursor: Option<String>,
    /// The last text written of the message, and the edit it was written with.
    pub written: Mutex<Option<Arc<KeptWrite>>>,
}

impl fmt::Debug for KeptList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeptList")
            .field("bytes", &self.text.len())
            .finish_non_exhaustive()
    }
}

impl KeptList {
    /// The text last written of this message, when it was written with `edit`.
    pub(crate) fn written_with(&self, edit: &Edit) -> Option<Arc<KeptWrite>> {
        let written = self
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        (written.edit == *edit).then_some(written)
    }

    /// Keeps `written` in place of the last written text, unless it is longer than
    /// [`MAX_KEPT_WRITE`] or its id's span is not in it.
    pub(crate) fn keep_written(&self, written: KeptWrite) {
        if written.text.len() > MAX_KEPT_WRITE || written.text.get(written.id.clone()).is_none() {
            return;
        }
        *self.written.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(written));
    }
}

/// What the layer changes in a listing's result before it writes it
/// (`enforce/answer/list_edit.rs` writes it).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Edit {
    /// Per entry, whether it is shown; `None` when every entry is.
    pub kept: Option<Vec<bool>>,
    /// The layer's sealed cursor, in place of the inner server's `nextCursor`.
    pub next_cursor: Option<String>,
    /// Marks the result private to the caller, its `ttlMs` capped at this.
    pub private: Option<Duration>,
}

impl Edit {
    /// Whether the edit leaves the message as it came.
    pub(crate) fn changes_nothing(&self) -> bool {
        self.kept.is_none() && self.next_cursor.is_none() && self.private.is_none()
    }
}

/// A kept message as the layer last wrote it.
pub(crate) struct KeptWrite {
    /// The edit it was written with.
    pub edit: Edit,
    /// The text written.
    pub text: Box<[u8]>,
    /// Where the value of its top-level `id` stands in `text`.
    pub id: Range<usize>,
}

/// A result's entries member, kept.
pub(crate) enum KeptEntries {
    /// The result had none.
    Absent,
    /// It was not an array.
    NotArray,
    /// The entries, in order.
    Listed(Vec<KeptEntry>),
}

/// One entry, kept: its name, and a tool's annotations as the map held them.
pub(crate) struct KeptEntry {
    /// The entry's name, when it was a string.
    pub name: Option<String>,
    /// A tool's annotations and schema (`None` for other entries).
    pub tool: Option<Arc<ListedTool>>,
}

impl ListMemo {
    /// The slot of the listing whose entries member is `entries`; none for another name.
    fn slot(&self, entries: &str) -> Option<&RwLock<Option<Arc<KeptList>>>> {
        let index = LISTINGS.iter().position(|listing| *listing == entries)?;
        self.slots.get(index)
    }

    /// The message last kept for the listing whose entries member is `entries`.
    pub(crate) fn last(&self, entries: &str) -> Option<Arc<KeptList>> {
        let slot = self.slot(entries)?;
        slot.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Keeps `kept` for the listing whose entries member is `entries`, in place of the last,
    /// unless its text is longer than [`MAX_KEPT_TEXT`]; returns it when it was kept.
    pub(crate) fn replace(&self, entries: &str, kept: KeptList) -> Option<Arc<KeptList>> {
        if kept.text.len() > MAX_KEPT_TEXT {
            return None;
        }
        let slot = self.slot(entries)?;
        let kept = Arc::new(kept);
        *slot.write().unwrap_or_else(PoisonError::into_inner) = Some(kept.clone());
        Some(kept)
    }
}
