//! The method model: every JSON-RPC request method falls in exactly one class, and a method
//! no row names is [`MethodClass::Unknown`].
//!
//! **Threat.** A gateway that guards the methods it knows and forwards the rest lets through
//! whatever the inner server adds next: MCP 2026-07-28 added `subscriptions/listen`, the Skills
//! extension added `skills/*` and `resources/directory/read`, and each of them would have
//! reached the server unseen. So the layer decides by a closed table, [`METHODS`], and
//! anything outside it is refused without being forwarded (`-32601`, as a server answers a
//! method it does not have), and without asking the policy: a policy written as
//! `match evaluation.tool() { …, _ => Decision::allow() }` must not let a method through by
//! accident. `GateBuilder::evaluate_unknown_methods` hands such methods to `evaluate` instead,
//! with [`Target::Other`](super::Target::Other) carrying the method and its params.
//!
//! The table is rendered in `docs/methods.md`; a test keeps that page equal to the table.
//!
//! ```
//! use mcp_gate::mcp::{MethodClass, method_class};
//!
//! assert_eq!(method_class("ping"), MethodClass::Lifecycle);
//! assert_eq!(method_class("tools/call"), MethodClass::Guarded);
//! assert!(matches!(method_class("skills/list"), MethodClass::Listing(_)));
//! assert_eq!(method_class("tasks/get"), MethodClass::Tasks);
//! // A method in no row of the table.
//! assert_eq!(method_class("admin/shutdown"), MethodClass::Unknown);
//! ```

/// How the layer treats one request method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MethodClass {
    /// Passes without the policy: the session and connection plumbing, which acts on nothing
    /// the policy governs (`initialize`, `server/discover`, `ping`). Notifications and the
    /// client's responses to server requests are lifecycle too; they are not request methods
    /// and have no row.
    Lifecycle,
    /// The answer enumerates things the policy governs: it is forwarded, and every entry of the
    /// answer is shown to `evaluate` in the discovery phase; entries it does not allow are
    /// removed before the client sees the page.
    Listing(Listing),
    /// `tasks/*`: a task the layer created (a held call) is answered by the layer and judged by
    /// ownership; any other task id is guarded like any other method, with a task target.
    Tasks,
    /// `evaluate` decides before the request is forwarded.
    Guarded,
    /// In no row of the table: refused with `-32601` unless the application opted in to judge
    /// unknown methods.
    Unknown,
}

/// Where a listing's entries are and what each one is to the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// The member of the result that holds the entries (`tools`, `resources`, …).
    pub entries: &'static str,
    /// What each entry is shown to the policy as.
    pub entry: EntryKind,
}

/// What one listed entry is shown to the policy as, and the member that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A tool, named by its `name`.
    Tool,
    /// A prompt, named by its `name`.
    Prompt,
    /// A resource, named by its `uri`.
    Resource,
    /// A resource template, named by its `uriTemplate` (shown as a resource).
    ResourceTemplate,
    /// A skill, named by the `uri` of its `SKILL.md`.
    Skill,
}

impl EntryKind {
    /// The member of an entry that names it.
    pub fn name_field(self) -> &'static str {
        match self {
            EntryKind::Tool | EntryKind::Prompt => "name",
            EntryKind::Resource | EntryKind::Skill => "uri",
            EntryKind::ResourceTemplate => "uriTemplate",
        }
    }

    /// The member of a listing's result that holds entries of this kind.
    const fn entries(self) -> &'static str {
        match self {
            EntryKind::Tool => "tools",
            EntryKind::Prompt => "prompts",
            EntryKind::Resource => "resources",
            EntryKind::ResourceTemplate => "resourceTemplates",
            EntryKind::Skill => "skills",
        }
    }
}

/// One row of the method table.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct MethodRow {
    /// The JSON-RPC method.
    pub method: &'static str,
    /// How the layer treats it.
    pub class: MethodClass,
    /// What `evaluate` is shown, in words (for the docs).
    pub target: &'static str,
    /// Why the method is in its class, where that is not obvious (for the docs).
    pub note: &'static str,
}

impl MethodRow {
    /// A method of `class`; `target` says what `evaluate` is shown.
    const fn new(method: &'static str, class: MethodClass, target: &'static str) -> Self {
        Self {
            method,
            class,
            target,
            note: "",
        }
    }

    /// The row with `note`, for the docs.
    const fn note(mut self, note: &'static str) -> Self {
        self.note = note;
        self
    }
}

/// Plumbing that passes without the policy.
const fn lifecycle(method: &'static str) -> MethodRow {
    MethodRow::new(method, MethodClass::Lifecycle, "—")
}

/// A listing whose entries are each shown to the policy as `entry` (`target` in words).
const fn listing(method: &'static str, entry: EntryKind, target: &'static str) -> MethodRow {
    let entries = entry.entries();
    MethodRow::new(
        method,
        MethodClass::Listing(Listing { entries, entry }),
        target,
    )
}

/// A method `evaluate` decides, shown `target`.
const fn guarded(method: &'static str, target: &'static str) -> MethodRow {
    MethodRow::new(method, MethodClass::Guarded, target)
}

/// A `tasks/*` method: the layer's own tasks are answered by the layer.
const fn task(method: &'static str) -> MethodRow {
    MethodRow::new(method, MethodClass::Tasks, "`Target::Task`")
}

/// Every request method the layer knows, from the MCP schemas 2024-11-05 to 2026-07-28, the
/// Tasks and Skills extensions, and rmcp 3.11's server-side request type. Any other method is
/// [`MethodClass::Unknown`].
pub const METHODS: &[MethodRow] = &[
    lifecycle("initialize")
        .note("Opens a legacy session; the layer binds the session to the caller."),
    lifecycle("server/discover").note("Describes the server; names nothing the policy governs."),
    lifecycle("ping"),
    listing("tools/list", EntryKind::Tool, "each tool (`Target::Tool`, no arguments)"),
    listing("prompts/list", EntryKind::Prompt, "each prompt (`Target::Prompt`, no arguments)"),
    listing("resources/list", EntryKind::Resource, "each resource (`Target::Resource`)"),
    listing(
        "resources/templates/list",
        EntryKind::ResourceTemplate,
        "each template, its `uriTemplate` as `Target::Resource`",
    ),
    listing(
        "resources/directory/read",
        EntryKind::Resource,
        "each child resource (`Target::Resource`)",
    )
    .note("Skills extension: lists the children of a directory resource."),
    listing("skills/list", EntryKind::Skill, "each skill (`Target::Skill`)")
        .note("Skills extension."),
    guarded("tools/call", "`Target::Tool` with the arguments"),
    guarded("prompts/get", "`Target::Prompt` with the arguments"),
    guarded("resources/read", "`Target::Resource`"),
    guarded("resources/subscribe", "`Target::Resource`").note("Legacy."),
    guarded("resources/unsubscribe", "`Target::Resource`").note("Legacy."),
    guarded(
        "subscriptions/listen",
        "one `Target::Resource` per URI in `notifications.resourceSubscriptions`; `Target::None` when there is none",
    )
    .note("2026-07-28. Refused whole when any URI is not allowed: a stream is never trimmed silently."),
    guarded("completion/complete", "`Target::Completion`"),
    guarded("skills/get", "`Target::Skill`").note("Skills extension."),
    guarded("logging/setLevel", "`Target::None`").note(
        "Changes what the server sends the session (log messages may carry data the policy governs), so the policy decides.",
    ),
    task("tasks/get").note("The layer's own tasks are judged by ownership."),
    task("tasks/update").note("The layer's own tasks are judged by ownership."),
    task("tasks/cancel").note("The layer's own tasks are judged by ownership."),
    task("tasks/result").note("2025-11-25."),
    guarded("tasks/list", "`Target::None`").note(
        "2025-11-25. Its entries are the inner server's tasks, which the policy cannot name; the policy allows or refuses the whole list.",
    ),
];

/// The class of `method`: its row in [`METHODS`], or [`MethodClass::Unknown`].
pub fn method_class(method: &str) -> MethodClass {
    row_of(method).map_or(MethodClass::Unknown, |row| row.class)
}

/// The row of `method`, if the table has one: its `'static` name (so that a known method is
/// neither allocated nor copied on its way to the policy) and its class.
pub(crate) fn row_of(method: &str) -> Option<&'static MethodRow> {
    METHODS.iter().find(|row| row.method == method)
}

/// The table as the Markdown page `docs/methods.md` shows it.
#[cfg(test)]
fn render_markdown() -> String {
    use std::fmt::Write as _;
    let mut page = String::from(
        "# Methods: how the layer treats each MCP request\n\n\
         <!-- Generated from `mcp::methods::METHODS` by \
         `MCP_GATE_BLESS=1 cargo test --lib methods_page`; do not edit by hand. -->\n\n\
         Every JSON-RPC request falls in exactly one class. A method in no row is **unknown**: \
         the layer answers `-32601` (HTTP 404 on a 2026-07-28 request, 200 on a legacy one) \
         without forwarding it and without asking the policy, unless \
         `GateBuilder::evaluate_unknown_methods` hands it to `evaluate` as `Target::Other`.\n\n\
         - **lifecycle**: passes without the policy. Notifications (`notifications/*`) and the \
         client's responses to server requests are lifecycle too.\n\
         - **listing**: forwarded; each entry of the answer is shown to `evaluate` (phase \
         `Discovery`) and removed unless allowed.\n\
         - **tasks**: the layer's own task ids are answered by the layer, by ownership; other \
         ids are guarded.\n\
         - **guarded**: `evaluate` decides before the request is forwarded.\n\n\
         | method | class | what `evaluate` sees | note |\n|---|---|---|---|\n",
    );
    for row in METHODS {
        let class = match row.class {
            MethodClass::Lifecycle => "lifecycle".to_owned(),
            MethodClass::Listing(listing) => format!("listing (`{}`)", listing.entries),
            MethodClass::Tasks => "tasks".to_owned(),
            MethodClass::Guarded => "guarded".to_owned(),
            MethodClass::Unknown => "unknown".to_owned(),
        };
        let _ = writeln!(
            page,
            "| `{}` | {} | {} | {} |",
            row.method, class, row.target, row.note
        );
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_has_one_row() {
        let mut seen = std::collections::HashSet::new();
        for row in METHODS {
            assert!(seen.insert(row.method), "{} twice", row.method);
            assert_ne!(row.class, MethodClass::Unknown, "{}", row.method);
            assert!(!row.method.starts_with("notifications/"), "{}", row.method);
        }
    }

    #[test]
    fn unknown_is_everything_else() {
        for method in [
            "",
            "tools/call ",
            "Tools/call",
            "tools/*",
            "sampling/createMessage",
        ] {
            assert_eq!(method_class(method), MethodClass::Unknown, "{method:?}");
        }
    }

    /// `docs/methods.md` is the table, rendered. `MCP_GATE_BLESS=1` rewrites it.
    #[test]
    fn methods_page() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/methods.md");
        let rendered = render_markdown();
        if std::env::var_os("MCP_GATE_BLESS").is_some() {
            std::fs::write(&path, &rendered).expect("write docs/methods.md");
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == rendered,
            "docs/methods.md differs from the method table; run MCP_GATE_BLESS=1 cargo test --lib methods_page"
        );
    }
}
