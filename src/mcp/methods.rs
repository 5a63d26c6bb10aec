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

const fn row(
    method: &'static str,
    class: MethodClass,
    target: &'static str,
    note: &'static str,
) -> MethodRow {
    MethodRow {
        method,
        class,
        target,
        note,
    }
}

const fn listing(entries: &'static str, entry: EntryKind) -> MethodClass {
    MethodClass::Listing(Listing { entries, entry })
}

/// Every request method the layer knows, from the MCP schemas 2024-11-05 to 2026-07-28, the
/// Tasks and Skills extensions, and rmcp 3.11's server-side request type. Any other method is
/// [`MethodClass::Unknown`].
pub const METHODS: &[MethodRow] = &[
    row(
        "initialize",
        MethodClass::Lifecycle,
        "—",
        "Opens a legacy session; the layer binds the session to the caller.",
    ),
    row(
        "server/discover",
        MethodClass::Lifecycle,
        "—",
        "Describes the server; names nothing the policy governs.",
    ),
    row("ping", MethodClass::Lifecycle, "—", ""),
    row(
        "tools/list",
        listing("tools", EntryKind::Tool),
        "each tool (`Target::Tool`, no arguments)",
        "",
    ),
    row(
        "prompts/list",
        listing("prompts", EntryKind::Prompt),
        "each prompt (`Target::Prompt`, no arguments)",
        "",
    ),
    row(
        "resources/list",
        listing("resources", EntryKind::Resource),
        "each resource (`Target::Resource`)",
        "",
    ),
    row(
        "resources/templates/list",
        listing("resourceTemplates", EntryKind::ResourceTemplate),
        "each template, its `uriTemplate` as `Target::Resource`",
        "",
    ),
    row(
        "resources/directory/read",
        listing("resources", EntryKind::Resource),
        "each child resource (`Target::Resource`)",
        "Skills extension: lists the children of a directory resource.",
    ),
    row(
        "skills/list",
        listing("skills", EntryKind::Skill),
        "each skill (`Target::Skill`)",
        "Skills extension.",
    ),
    row(
        "tools/call",
        MethodClass::Guarded,
        "`Target::Tool` with the arguments",
        "",
    ),
    row(
        "prompts/get",
        MethodClass::Guarded,
        "`Target::Prompt` with the arguments",
        "",
    ),
    row(
        "resources/read",
        MethodClass::Guarded,
        "`Target::Resource`",
        "",
    ),
    row(
        "resources/subscribe",
        MethodClass::Guarded,
        "`Target::Resource`",
        "Legacy.",
    ),
    row(
        "resources/unsubscribe",
        MethodClass::Guarded,
        "`Target::Resource`",
        "Legacy.",
    ),
    row(
        "subscriptions/listen",
        MethodClass::Guarded,
        "one `Target::Resource` per URI in `notifications.resourceSubscriptions`; `Target::None` when there is none",
        "2026-07-28. Refused whole when any URI is not allowed: a stream is never trimmed silently.",
    ),
    row(
        "completion/complete",
        MethodClass::Guarded,
        "`Target::Completion`",
        "",
    ),
    row(
        "skills/get",
        MethodClass::Guarded,
        "`Target::Skill`",
        "Skills extension.",
    ),
    row(
        "logging/setLevel",
        MethodClass::Guarded,
        "`Target::None`",
        "Changes what the server sends the session (log messages may carry data the policy governs), so the policy decides.",
    ),
    row(
        "tasks/get",
        MethodClass::Tasks,
        "`Target::Task`",
        "The layer's own tasks are judged by ownership.",
    ),
    row(
        "tasks/update",
        MethodClass::Tasks,
        "`Target::Task`",
        "The layer's own tasks are judged by ownership.",
    ),
    row(
        "tasks/cancel",
        MethodClass::Tasks,
        "`Target::Task`",
        "The layer's own tasks are judged by ownership.",
    ),
    row(
        "tasks/result",
        MethodClass::Tasks,
        "`Target::Task`",
        "2025-11-25.",
    ),
    row(
        "tasks/list",
        MethodClass::Guarded,
        "`Target::None`",
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
