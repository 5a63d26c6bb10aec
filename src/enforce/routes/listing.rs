//! Discovery filtering: the answers of every listing method of the
//! [method table](crate::mcp::METHODS) (`tools/list`, `prompts/list`, `resources/list`,
//! `resources/templates/list`, `resources/directory/read`, `skills/list`) are filtered per
//! caller.
//!
//! Each entry of the inner server's page is shown to `evaluate` in the discovery phase, and
//! entries it does not allow are removed before the client sees the page. Pagination cursors
//! are wrapped in the layer's own signed cursor, bound to the caller and the list method, so a
//! cursor cannot be replayed by someone else or against another list. A policy that fails on
//! any entry fails the whole list with an internal error: a list is never silently emptied.
//! List-changed notifications are not filtered: they carry no entries, only a hint to list
//! again, and the next list is filtered.

use std::borrow::Cow;

use bytes::Bytes;
use http::{Response, header};

use http::request::Parts;

use crate::auth::Principal;
use crate::denial::render::Expressed;
use crate::enforce::answer;
use crate::enforce::body::GateBody;
use crate::enforce::bounds::Inner;
use crate::enforce::call::{protocol_error, replied, start};
use crate::enforce::interaction::binding;
use crate::enforce::reply::Reply;
use crate::enforce::reply::internal_error;
use crate::judge::{Case, DecisionKind, Express, Judged, Refusal, RemedyKind, Ruling, Said};
use crate::mcp::request::McpRequest;
use crate::mcp::{EntryKind, Era, Listing, ProtocolContext, ProtocolError, Target};
use crate::policy::Phase;
use crate::settings::Settings;

/// What `evaluate` is shown for one list entry: the entry's name as the kind of target the
/// listing holds, or `None` when the entry does not name itself as it must.
#[cfg(test)]
pub(crate) fn entry_target(listing: Listing, entry: &serde_json::Value) -> Option<Target> {
    let name = entry.get(listing.entry.name_field())?.as_str()?;
    Some(named_target(listing.entry, name.to_owned()))
}

/// An entry of `kind` named `name`, as `evaluate` is shown it.
fn named_target(kind: EntryKind, name: String) -> Target {
    match kind {
        EntryKind::Tool => Target::Tool {
            name,
            arguments: Default::default(),
        },
        EntryKind::Prompt => Target::Prompt {
            name,
            arguments: Default::default(),
        },
        EntryKind::Resource | EntryKind::ResourceTemplate => Target::Resource { uri: name },
        EntryKind::Skill => Target::Skill { uri: name },
    }
}

/// A list request: its cursor opened, the inner answer filtered, the next cursor sealed.
pub(crate) struct ListRequest<'a> {
    pub settings: &'a Settings,
    pub principal: &'a Principal,
    pub request: &'a McpRequest,
    pub protocol: &'a ProtocolContext,
    pub class: Listing,
    /// The request's id, on every entry's decision.
    pub id: crate::judge::RequestId,
    /// What the entries' decisions see of the request's extensions (the request itself goes
    /// on to the inner server before its entries are judged).
    pub seen: http::Extensions,
}

impl ListRequest<'_> {
    pub(crate) async fn run<S: Inner>(
        &self,
        inner: &mut S,
        mut parts: Parts,
        bytes: Bytes,
    ) -> Result<Response<GateBody<S::Res>>, S::Error> {
        let settings = self.settings;
        let resource = self.settings.resource.uri.as_str();
        let binding = binding(self.principal, resource, self.protocol, self.request);
        let body = match self.inner_cursor(&binding) {
            Ok(None) => bytes,
            Ok(Some(rewritten)) => {
                // The body is rewritten: the client's length no longer describes it.
                parts.headers.remove(header::CONTENT_LENGTH);
                rewritten
            }
            Err(error) => return Ok(protocol_error(&error.with_id(Some(&self.request.id)))),
        };
        let limits = &settings.answers;
        let call = start(inner, parts, S::Req::from(body));
        let refused = |problem| Ok(replied(answer::refusal(self.request, problem, "list")));
        let (head, bytes) = match answer::fetch_whole(call, limits.bounds()).await? {
            Ok(fetched) => fetched,
            Err(problem) => return refused(problem),
        };
        if !head.status.is_success() {
            return match answer::read(head, &bytes, &self.request.id) {
                Ok(read) => Ok(replied(read.into_http())),
                Err(problem) => refused(problem),
            };
        }
        let frame = match answer::Frame::of(&head.headers, &bytes) {
            Ok(frame) => frame,
            Err(problem) => return refused(problem),
        };
        let wanted = answer::Wanted {
            entries: self.class.entries,
            name: self.class.entry.name_field(),
            tools: self.class.entry == EntryKind::Tool,
            known: Some(&settings.policy.tool_annotations),
            memo: Some(&settings.discovery.lists),
        };
        let mut list = match answer::ListAnswer::read(&frame, &self.request.id, wanted) {
            Ok(list) => list,
            Err(problem) => return refused(problem),
        };
        let mut edit = answer::Edit::default();
        if let Some(page) = list.page_mut() {
            if let Err(response) = self.filter(page, &binding, &mut edit).await {
                return Ok(replied(response));
            }
            if self.protocol.era == Era::Modern {
                edit.private = Some(settings.discovery.cache_ttl_cap);
            }
        }
        match list.into_http(head, &edit) {
            Ok(response) => Ok(replied(response)),
            Err(problem) => refused(problem),
        }
    }

    /// The request to send on when the client's cursor is one of the layer's: the same request
    /// with the inner server's cursor in its place. `None` for a first page.
    fn inner_cursor(
        &self,
        binding: &crate::continuation::Binding<'_>,
    ) -> Result<Option<Bytes>, ProtocolError> {
        let cursor = match self.request.param("cursor") {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(cursor)) => cursor,
            Some(_) => return Err(ProtocolError::invalid_params("the cursor must be a string")),
        };
        let state = &self.settings.continuation.state;
        let inner_cursor = state
            .open_cursor(binding, cursor)
            .map_err(|error| ProtocolError::invalid_params(error.to_string()))?;
        let mut params = self.request.params().clone();
        params.insert("cursor".into(), inner_cursor.into());
        let (id, method) = (&self.request.id, &self.request.method);
        let message =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        Ok(Some(Bytes::from(message.to_string())))
    }

    /// Whether the policy lets this caller see one entry; an entry the layer cannot name is
    /// hidden. A listed tool's annotations are remembered on the way (an empty object for a
    /// tool listed without any).
    async fn shows(&self, entry: &mut answer::Entry<'_>) -> Result<bool, Unjudged> {
        let Some(name) = entry.name.take() else {
            return Ok(false);
        };
        let known = &self.settings.policy.tool_annotations;
        let annotations = match entry.tool.take() {
            Some(answer::Tool::Known(listed)) => Some(listed),
            Some(answer::Tool::Text(text)) => match known.remember_text(&name, text) {
                Ok(listed) => Some(listed),
                // Read whole and strictly before: not reached, and refused were it ever.
                Err(_) => return Err(Unjudged),
            },
            None => None,
        };
        let case = Case {
            principal: self.principal,
            method: &self.request.method,
            target: Cow::Owned(named_target(self.class.entry, name.into_owned())),
            protocol: self.protocol,
            phase: Phase::Discovery,
            answered: None,
            listed: annotations,
            approval: None,
            extensions: Some(&self.seen),
        };
        let entry = Entry {
            list_remediable: self.settings.discovery.list_remediable,
        };
        self.settings.policy.judge(self.id).judge(case, entry).await
    }

    /// Judges the entries of the list result, and seals its next cursor: what changes goes
    /// into `edit`.
    async fn filter(
        &self,
        page: &mut answer::Page<'_>,
        binding: &crate::continuation::Binding<'_>,
        edit: &mut answer::Edit,
    ) -> Result<(), Reply> {
        let settings = self.settings;
        let entries = match &mut page.entries {
            answer::Entries::Listed(entries) => entries,
            // No entries: nothing is shown.
            answer::Entries::Absent => return Ok(()),
            answer::Entries::NotArray => {
                let problem = answer::Problem::BadResult;
                return Err(answer::refusal(self.request, problem, "list"));
            }
        };
        let listed = entries.len();
        let mut kept = Vec::with_capacity(listed);
        for entry in entries.iter_mut() {
            match self.shows(entry).await {
                Ok(shown) => kept.push(shown),
                Err(Unjudged) => return Err(internal_error(self.request)),
            }
        }
        let shown = kept.iter().filter(|shown| **shown).count();
        if shown < listed {
            edit.kept = Some(kept);
        }
        if let Some(next) = &page.next_cursor {
            let sealed = settings.continuation.state.seal_cursor(
                binding,
                next,
                settings.continuation.cursor_ttl,
            );
            edit.next_cursor = Some(sealed);
        }
        tracing::info!(
            target: "mcp_gate::discovery",
            subject = self.principal.subject().unwrap_or(""),
            client_id = self.principal.client_id().unwrap_or(""),
            method = %self.request.method,
            listed,
            shown,
            hidden = listed - shown,
            "discovery filtered"
        );
        Ok(())
    }
}

/// How a ruling on one listed entry is said: the entry shown or hidden.
struct Entry {
    /// Entries whose remedy the client can act on stay listed.
    list_remediable: bool,
}

/// An entry the layer could not judge (the policy failed, or its tool could not be
/// remembered): the whole list is answered with an internal error.
///
/// A unit, not the error's response: the outcome of each entry passes through every future
/// between the policy and the list's loop, and a response there (144 bytes) was copied at
/// each of them, for every entry of every list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Unjudged;

impl Express for Entry {
    type Then = Result<bool, Unjudged>;

    async fn express(self, ruling: Ruling) -> Judged<Self::Then> {
        let (decision, remedy, shown) = match ruling {
            Ruling::Allow => (DecisionKind::Allow, None, true),
            // A remedy the client can act on keeps the entry listed only when asked for.
            Ruling::Ask { .. } => (DecisionKind::Ask, None, self.list_remediable),
            Ruling::Deny(remedy) => {
                let shown = self.list_remediable && remedy.is_actionable();
                (DecisionKind::Deny, Some(RemedyKind::of(&remedy)), shown)
            }
            Ruling::Abstain => (DecisionKind::Abstain, None, false),
            // Listings are not counted (the judge limits invocations only); were one ever
            // limited, its entries would be hidden, never shown uncounted.
            Ruling::Limited(_) => (DecisionKind::Limited, None, false),
            Ruling::LimitFailed(_) | Ruling::Withdrawn => (DecisionKind::Refused, None, false),
            Ruling::Failed(failure) => {
                let refusal = Refusal::PolicyFailed {
                    kind: failure.kind(),
                    error: failure.to_string(),
                };
                return Judged {
                    said: Said::refused(refusal),
                    then: Err(Unjudged),
                };
            }
        };
        let expressed_as = if shown {
            Expressed::Shown
        } else {
            Expressed::Hidden
        };
        let mut said = Said::plain(decision).expressed(expressed_as);
        said.remediation = remedy;
        Judged {
            said,
            then: Ok(shown),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(method: &str) -> Listing {
        match crate::mcp::method_class(method) {
            crate::mcp::MethodClass::Listing(listing) => listing,
            other => panic!("{method} is {other:?}"),
        }
    }

    #[test]
    fn targets_of_entries() {
        let tool = serde_json::json!({"name": "echo"});
        assert_eq!(
            entry_target(listing("tools/list"), &tool)
                .and_then(|t| t.name().map(str::to_owned))
                .as_deref(),
            Some("echo")
        );
        let template = serde_json::json!({"uriTemplate": "file:///{path}"});
        assert!(matches!(
            entry_target(listing("resources/templates/list"), &template),
            Some(Target::Resource { .. })
        ));
        let skill = serde_json::json!({"uri": "skill://a/SKILL.md", "frontmatter": {"name": "a"}});
        assert_eq!(
            entry_target(listing("skills/list"), &skill),
            Some(Target::Skill {
                uri: "skill://a/SKILL.md".into()
            })
        );
        let child = serde_json::json!({"uri": "demo://secret", "name": "secret"});
        assert_eq!(
            entry_target(listing("resources/directory/read"), &child),
            Some(Target::Resource {
                uri: "demo://secret".into()
            })
        );
        assert!(
            entry_target(
                listing("tools/list"),
                &serde_json::json!({"title": "no name"})
            )
            .is_none()
        );
    }
}
