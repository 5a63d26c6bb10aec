//! What the inner server last listed: per listing, the last response message the layer read
//! whole, and what it read of it.
//!
//! An inner server answers `tools/list` (and the other listings) with the same text again and
//! again; only the response's `id` differs from one request to the next. The listing reader
//! (`enforce/answer/list_memo.rs`) keeps the message here and takes a message from here only
//! when it is the kept text with nothing changed but its id. What is kept does not depend on
//! the caller: the entries are judged for each request after they are read.
//!
//! Bounded: one message per entries member (`tools`, `resources`, `resourceTemplates`,
//! `prompts`, `skills`; `resources/list` and `resources/directory/read` share one), of at most
//! [`MAX_KEPT_TEXT`] bytes. Per process: a replica that has not seen a list reads it
//! whole once.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, PoisonError, RwLock};

use super::annotations::ListedTool;

/// The longest message kept: a list of about a thousand tools.
pub(crate) const MAX_KEPT_TEXT: usize = 256 * 1024;

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
    /// unless its text is longer than [`MAX_KEPT_TEXT`].
    pub(crate) fn replace(&self, entries: &str, kept: KeptList) {
        if kept.text.len() > MAX_KEPT_TEXT {
            return;
        }
        if let Some(slot) = self.slot(entries) {
            *slot.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(kept));
        }
    }
}
