//! Task listens: a `subscriptions/listen` (already judged, as every listen is) that asks for
//! `notifications/tasks` of the layer's own held tasks, answered by the layer itself.
//!
//! The Tasks extension makes task notifications opt-in (`params.notifications.taskIds`,
//! every notification type is opt-in on a listen). The layer answers a listen itself when
//! task notifications are on and the listen asks for nothing but ids of the layer's shape;
//! any other listen (no `taskIds`, other notification types, another server's task ids) is
//! forwarded as it came. Of the named ids, the layer accepts those of live tasks owned by the
//! caller; the others are left out of the acknowledgement, exactly as an unknown id is.
//!
//! # Threat model
//!
//! - **Another principal's task ids.** Accepted only when the stored record's owner is the
//!   caller; the stream is registered under the caller, and records are delivered under
//!   their own owner (`tasks/listeners.rs`): a stranger's listen hears nothing of them.
//! - **Too many streams.** Refused past the bound per owner and per process (429, with
//!   `Retry-After`), and at most [`MAX_TASK_IDS`] ids per listen.

use std::sync::Arc;

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::Value;

use crate::auth::Principal;
use crate::auth::bearer::credential;
use crate::auth::token_cache::digest;
use crate::enforce::answer::{Grant, ListenStream};
use crate::enforce::body::GateBody;
use crate::enforce::call::{Call, Routed};
use crate::enforce::reply::{Reply, STORE_UNAVAILABLE_RETRY_AFTER, refusal_retry_after};
use crate::enforce::routes::tasks::missing_tasks_extension;
use crate::mcp::request::McpRequest;
use crate::mcp::{INTERNAL_ERROR, ProtocolError};
use crate::store::tasks::{TaskId, TaskOwner, TaskRecord, TaskStore};
use crate::tasks::listeners::{Listeners, Refused};

/// The most task ids one listen may name.
pub(crate) const MAX_TASK_IDS: usize = 100;

/// What a listen asks of the layer.
#[derive(Debug, PartialEq)]
pub(crate) enum Asked {
    /// Nothing the layer answers: forward it.
    Forward,
    /// Only notifications of these tasks, all of the layer's shape.
    Tasks(Vec<TaskId>),
    /// `taskIds` is not an array of at most [`MAX_TASK_IDS`] strings.
    Malformed(&'static str),
}

/// What `params.notifications` asks for.
pub(crate) fn asked(request: &McpRequest) -> Asked {
    let Some(Value::Object(filter)) = request.params().get("notifications") else {
        return Asked::Forward;
    };
    let ids = match filter.get("taskIds") {
        None => return Asked::Forward,
        Some(Value::Array(ids)) if ids.len() <= MAX_TASK_IDS => ids,
        Some(_) => {
            return Asked::Malformed(
                "params.notifications.taskIds must be an array of at most 100 task ids",
            );
        }
    };
    // Anything else asked for (another notification type) is the inner server's to honour.
    let only_tasks = filter.iter().all(|(key, value)| {
        key == "taskIds"
            || matches!(value, Value::Null | Value::Bool(false))
            || value.as_array().is_some_and(Vec::is_empty)
    });
    let mut ours = Vec::with_capacity(ids.len());
    for id in ids {
        let Some(text) = id.as_str() else {
            return Asked::Malformed("params.notifications.taskIds must hold strings");
        };
        match TaskId::parse(text) {
            Some(id) if !ours.contains(&id) => ours.push(id),
            Some(_) => {}
            // Another server's task: the inner server's listen.
            None => return Asked::Forward,
        }
    }
    if only_tasks {
        Asked::Tasks(ours)
    } else {
        Asked::Forward
    }
}

/// Answers a judged task listen: `-32021` without the Tasks extension, `429` past a bound,
/// otherwise the stream of the caller's tasks among `ids`.
pub(crate) async fn serve<B>(
    call: &Call<'_>,
    listeners: &Arc<Listeners>,
    ids: Vec<TaskId>,
) -> Routed<B> {
    let request = &call.request;
    if !call.protocol.capabilities.tasks_extension() {
        return Routed::reply(missing_tasks_extension(request));
    }
    let owner = TaskOwner::of(&call.principal);
    // Registered before the tasks are read: a transition recorded in between is heard.
    let listening = match listeners.register(owner, ids.clone()) {
        Ok(listening) => listening,
        Err(refused) => return Routed::reply(too_many(request, refused)),
    };
    let store = call.settings.tasks.store.as_ref();
    let accepted = match owned(store, request, &call.principal, &ids).await {
        Ok(accepted) => accepted,
        Err(reply) => return Routed::reply(reply),
    };
    let stream = ListenStream::new(
        listening,
        request.id.clone(),
        accepted,
        call.settings.denial.revision,
        (
            crate::clock::now_ms(),
            call.principal
                .expires_at()
                .map(|exp| exp.saturating_mul(1000)),
        ),
        grant(call),
    );
    let mut response = Response::new(GateBody::listen(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Routed::Respond(response)
}

/// What the stream asks the revocation set before each notification, when revocation is
/// configured: the listen's token (by its SHA-256, as the authenticator keyed it) and
/// principal.
fn grant(call: &Call<'_>) -> Option<Grant> {
    let set = call.settings.revocations.clone()?;
    // Read as the authenticator read it; a listen only gets here authenticated, so a header
    // that no longer reads leaves nothing to trust: the stream closes at its first
    // notification.
    let key = credential(&call.parts.headers, &call.parts.uri, true)
        .ok()
        .map(|(_, token)| digest(token));
    Some(Grant {
        set,
        key,
        principal: call.principal.clone(),
    })
}

/// The live tasks among `ids` that `principal` owns, as stored now.
async fn owned(
    store: &dyn TaskStore,
    request: &McpRequest,
    principal: &Principal,
    ids: &[TaskId],
) -> Result<Vec<TaskRecord>, Reply> {
    let mut accepted = Vec::new();
    for id in ids {
        match store.get(id).await {
            Ok(Some(record)) if record.owner.is(principal) => accepted.push(record),
            Ok(_) => {}
            Err(failure) => {
                tracing::warn!(target: "mcp_gate::tasks", error = %failure, "task listen: the task store failed");
                let error = ProtocolError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    INTERNAL_ERROR,
                    "The task store is unavailable.",
                );
                return Err(refusal_retry_after(
                    &error.with_id(Some(&request.id)),
                    STORE_UNAVAILABLE_RETRY_AFTER,
                ));
            }
        }
    }
    Ok(accepted)
}

fn too_many(request: &McpRequest, refused: Refused) -> Reply {
    let message = match refused {
        Refused::Owner(most) => {
            format!("At most {most} task listens may be open at once for one principal.")
        }
        Refused::Full(most) => format!("At most {most} task listens may be open at once."),
    };
    let error = ProtocolError::new(StatusCode::TOO_MANY_REQUESTS, INTERNAL_ERROR, message)
        .with_id(Some(&request.id));
    refusal_retry_after(&error, "30")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::request::{Message, classify};

    fn asking(notifications: Value) -> Asked {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
            "params": {"notifications": notifications},
        });
        match classify(body.to_string().as_bytes()) {
            Ok(Message::Request(request)) => asked(&request),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_listens_for_nothing_but_the_layers_tasks_are_the_layers() {
        let ours = TaskId::generate().unwrap();
        let id = ours.as_str();
        assert_eq!(
            asking(serde_json::json!({"taskIds": [id, id], "toolsListChanged": false})),
            Asked::Tasks(vec![ours.clone()])
        );
        assert_eq!(
            asking(serde_json::json!({"taskIds": [], "resourceSubscriptions": []})),
            Asked::Tasks(Vec::new())
        );
        for forwarded in [
            serde_json::json!({}),
            serde_json::json!({"toolsListChanged": true}),
            serde_json::json!({"taskIds": [id], "toolsListChanged": true}),
            serde_json::json!({"taskIds": [id], "resourceSubscriptions": ["file:///a"]}),
            serde_json::json!({"taskIds": [id, "the-inner-servers-task"]}),
        ] {
            assert_eq!(asking(forwarded.clone()), Asked::Forward, "{forwarded}");
        }
        let too_many: Vec<&str> = vec![id; MAX_TASK_IDS + 1];
        for malformed in [
            serde_json::json!({"taskIds": id}),
            serde_json::json!({"taskIds": [1]}),
            serde_json::json!({"taskIds": too_many}),
        ] {
            assert!(matches!(asking(malformed), Asked::Malformed(_)));
        }
    }
}
