//! Durable approval tasks in the layer: a `task` remediation holds the call in the task store,
//! the owner's `tasks/get` and `tasks/cancel` are answered from the store, and an approved
//! call runs once, on the replica that serves the owner's next poll.
//!
//! # Threat model
//!
//! - **A stranger probing task ids** learns nothing: every task method naming an id of the
//!   layer's shape (`tsk_` + 22 base64url characters) that is unknown, expired or owned by
//!   another principal gets the same `-32602` document, byte for byte. Ids of any other shape
//!   are not the layer's and go to the inner server as they came.
//! - **Several replicas polling one approved task** race to claim it; the store's
//!   compare-and-set (`Approved -> Executing`) lets exactly one run the call. The claim
//!   demands time to spare, so a call is not started too late to record its result, and an
//!   expired task is never claimed.
//! - **A poll that disconnects** while the call runs does not lose the result: the call and the
//!   recording of its outcome run on their own tokio task.
//! - **The decision may have changed** between the denial and the approval: the held call is
//!   evaluated again with the owner's current principal (phase `Approval`), and runs only on
//!   `Allow`.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, StatusCode, header};
use serde_json::{Value, json};

use crate::enforce::answer::{self, Read};
use crate::enforce::reply::Reply;

use crate::auth::Principal;
use crate::denial::RemediationState;
use crate::denial::render::Expressed;
use crate::denial::render::json_rpc;
use crate::denial::{Family, Revision, new_context_id};
use crate::enforce::bounds::Inner;
use crate::enforce::reply::{STORE_FULL_RETRY_AFTER, STORE_UNAVAILABLE_RETRY_AFTER};
use crate::enforce::reply::{internal_error, refusal, refusal_retry_after};
use crate::headers::insert_fixed;
use crate::judge::{Case, DecisionKind, Express, Judged, Refusal, RemedyKind, Ruling, Said};
use crate::mcp::era::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, TASKS_EXTENSION};
use crate::mcp::era::{METHOD_HEADER, NAME_HEADER, SESSION_HEADER, VERSION_HEADER};
use crate::mcp::request::{McpRequest, Message, classify};
use crate::mcp::{
    ClientCapabilities, Era, INTERNAL_ERROR, INVALID_PARAMS, MISSING_CAPABILITY, ProtocolContext,
    ProtocolError, Target,
};
use crate::policy::{Approval, Phase};
use crate::settings::Settings;
use crate::settings::TaskSettings;
use crate::tasks::wire;
use crate::tasks::{
    HeldCall, StartedTask, StoreError, TaskChange, TaskError, TaskId, TaskOwner, TaskRecord,
    TaskStart, TaskStatus, TaskStore, Transition,
};

/// Whether a `task` remediation can become a task: a modern `tools/call` that declared the
/// Tasks extension, under a result-based revision.
pub(crate) fn can_hold(
    request: &McpRequest,
    protocol: &ProtocolContext,
    revision: Revision,
) -> bool {
    request.method == "tools/call"
        && protocol.era == Era::Modern
        && protocol.capabilities.tasks_extension()
        && matches!(revision.family(), Family::ResultBased { .. })
}

fn result_reply(request: &McpRequest, result: Value) -> Reply {
    json_rpc(
        StatusCode::OK,
        json!({"jsonrpc": "2.0", "id": request.id, "result": result}),
        false,
    )
}

/// A JSON-RPC error about this request, logged as a refusal.
fn refuse(request: &McpRequest, status: StatusCode, code: i64, message: &str) -> Reply {
    refusal(&ProtocolError::new(status, code, message).with_id(Some(&request.id)))
}

/// The one answer for every id that is not the caller's task.
fn unknown_task(request: &McpRequest) -> Reply {
    refuse(request, StatusCode::OK, INVALID_PARAMS, "Unknown task")
}

/// The change that fails a task in `from` with an internal error.
fn internal_failure(from: TaskStatus, message: &str) -> TaskChange {
    TaskChange::new(from, TaskStatus::Failed).error(TaskError {
        code: INTERNAL_ERROR,
        message: message.to_owned(),
        data: None,
    })
}

fn store_failed(request: &McpRequest, what: &str, failure: &StoreError) -> Reply {
    tracing::error!(target: "mcp_gate::tasks", method = %request.method, what, error = %failure, "task store failed; refusing");
    match failure {
        // Bounds of the store, said as they are: the caller can retry later; soon when Redis
        // was away even on a fresh connection, later when the store is full.
        StoreError::Full { .. }
        | StoreError::OverBudget { .. }
        | StoreError::Unavailable { .. } => {
            let retry_after = match failure {
                StoreError::Unavailable { .. } => STORE_UNAVAILABLE_RETRY_AFTER,
                _ => STORE_FULL_RETRY_AFTER,
            };
            let status = StatusCode::SERVICE_UNAVAILABLE;
            let error = ProtocolError::new(status, INTERNAL_ERROR, failure.to_string());
            refusal_retry_after(&error.with_id(Some(&request.id)), retry_after)
        }
        _ => internal_error(request),
    }
}

/// A call the layer will not hold because a bound was reached: `-32603` with the status and a
/// message that says which bound.
fn over_limit(request: &McpRequest, status: StatusCode, message: String) -> Reply {
    let error = ProtocolError::new(status, INTERNAL_ERROR, message).with_id(Some(&request.id));
    refusal_retry_after(&error, "30")
}

/// A call held in a task: the `CreateTaskResult` to reply with, and what the decision event
/// names.
pub(crate) struct Held {
    pub reply: Reply,
    pub task_id: String,
    pub context_id: String,
}

/// Holds a denied call as a new task and answers with its `CreateTaskResult`, once the task is
/// stored, the start hook has run and the store reads it back as `working`.
pub(crate) async fn hold(
    settings: &Settings,
    principal: &Principal,
    request: &McpRequest,
    protocol: &ProtocolContext,
    message: &str,
) -> Result<Held, Reply> {
    let tasks = &settings.tasks;
    let call = HeldCall::new(
        request.method.clone(),
        Value::Object(request.params().clone()),
        protocol.protocol_version.clone().unwrap_or_default(),
        settings.resource.uri.as_str(),
    );
    let owner = TaskOwner::of(principal);
    if let Some(refused) = too_large(tasks, request, &call) {
        return Err(refused);
    }
    let (Ok(context_id), Ok(record)) = (
        new_context_id(),
        TaskRecord::new(
            owner,
            call,
            String::new(),
            tasks.ttl_ms,
            tasks.poll_interval_ms,
        ),
    ) else {
        tracing::error!(target: "mcp_gate::tasks", "no random source for a task or context id; refusing");
        return Err(internal_error(request));
    };
    let record = TaskRecord {
        context_id,
        ..record
    };
    match tasks
        .store
        .create_within(record.clone(), tasks.per_owner)
        .await
    {
        Ok(()) => {}
        // The owner's quota: said as it is, and other owners are not affected.
        Err(over @ StoreError::OwnerQuota { .. }) => {
            let status = StatusCode::TOO_MANY_REQUESTS;
            return Err(over_limit(request, status, over.to_string()));
        }
        Err(failure) => return Err(store_failed(request, "create", &failure)),
    }
    announce(settings, request, &record, message).await?;
    // The durability check: the owner is told of a task only once the store can show it.
    match tasks.store.get(&record.id).await {
        Ok(Some(stored))
            if stored.status == TaskStatus::Working && stored.owner == record.owner =>
        {
            let reply = result_reply(request, wire::created(&stored, settings.denial.revision));
            Ok(Held {
                reply,
                task_id: stored.id.to_string(),
                context_id: stored.context_id,
            })
        }
        Ok(_) => {
            tracing::error!(target: "mcp_gate::tasks", task_id = %record.id, "a task just created cannot be read back as working; refusing");
            Err(internal_error(request))
        }
        Err(failure) => Err(store_failed(request, "read back", &failure)),
    }
}

/// The refusal of a call too large to hold, if it is. Its owner's waiting calls are counted
/// by the store, in the create ([`TaskStore::create_within`]).
fn too_large(tasks: &TaskSettings, request: &McpRequest, call: &HeldCall) -> Option<Reply> {
    let size = call.params_len();
    (size > tasks.max_call_bytes).then(|| {
        let message = format!(
            "the call is too large to hold for approval ({size} bytes; at most {})",
            tasks.max_call_bytes
        );
        over_limit(request, StatusCode::PAYLOAD_TOO_LARGE, message)
    })
}

/// Runs the start hook, if one is set, for a task just stored. A hook that fails, panics or
/// runs past the evaluate timeout fails the task and refuses the call.
async fn announce(
    settings: &Settings,
    request: &McpRequest,
    record: &TaskRecord,
    message: &str,
) -> Result<(), Reply> {
    let tasks = &settings.tasks;
    let Some(hook) = &tasks.start else {
        return Ok(());
    };
    let started = StartedTask {
        id: record.id.clone(),
        owner: record.owner.clone(),
        call: record.call.clone(),
        message: message.to_owned(),
        expires_at: record.expires_at(),
    };
    let limit = settings.policy.evaluate_timeout;
    let Err(problem) = run_start(&**hook, started, limit).await else {
        return Ok(());
    };
    tracing::error!(target: "mcp_gate::tasks", task_id = %record.id, problem, "the start hook failed; the task is failed and the call refused");
    let failed = internal_failure(TaskStatus::Working, "the approval could not be requested");
    let _ = tasks.store.transition(&record.id, failed).await;
    Err(internal_error(request))
}

async fn run_start(
    hook: &dyn TaskStart,
    task: StartedTask,
    timeout: std::time::Duration,
) -> Result<(), String> {
    // The call happens inside the contained future, so a hook that panics before its first
    // await is caught too.
    match crate::contain::contained(timeout, async move { hook.start(task).await }).await {
        Err(contained) => Err(contained.to_string()),
        Ok(Err(error)) => Err(error.to_string()),
        Ok(Ok(())) => Ok(()),
    }
}

/// What to do with a task method.
pub(crate) enum TaskRoute {
    /// Not a task of the layer's: the inner server answers.
    NotOurs,
    /// The layer answers.
    Reply(Reply),
    /// The owner polls an approved task: run it, then answer.
    Run(Box<TaskRecord>),
}

/// Routes `tasks/*`: the extension check, the owner check, then the method.
pub(crate) async fn route(
    settings: &Settings,
    principal: &Principal,
    request: &McpRequest,
    protocol: &ProtocolContext,
) -> TaskRoute {
    if protocol.era != Era::Modern {
        // Legacy tasks are the inner server's own; the layer never creates them.
        return TaskRoute::NotOurs;
    }
    if !protocol.capabilities.tasks_extension() {
        return TaskRoute::Reply(missing_tasks_extension(request));
    }
    let Some(id) = (match &request.target {
        Target::Task { task_id } => TaskId::parse(task_id),
        _ => None,
    }) else {
        return TaskRoute::NotOurs;
    };
    let store = &settings.tasks.store;
    let record = match store.get(&id).await {
        Ok(Some(record)) if record.owner == TaskOwner::of(principal) => record,
        Ok(_) => return TaskRoute::Reply(unknown_task(request)),
        Err(failure) => return TaskRoute::Reply(store_failed(request, "get", &failure)),
    };
    let revision = settings.denial.revision;
    match &*request.method {
        "tasks/get" if record.status == TaskStatus::Approved => TaskRoute::Run(Box::new(record)),
        "tasks/get" => TaskRoute::Reply(result_reply(request, wire::status(&record, revision))),
        "tasks/cancel" => TaskRoute::Reply(cancel(store.as_ref(), request, record).await),
        "tasks/update" => TaskRoute::Reply(refuse(
            request,
            StatusCode::OK,
            INVALID_PARAMS,
            "This task does not wait for input.",
        )),
        _ => TaskRoute::Reply(refuse(
            request,
            StatusCode::NOT_FOUND,
            crate::mcp::request::METHOD_NOT_FOUND,
            "Method not found",
        )),
    }
}

/// `-32021`: the request needs the Tasks extension, which it did not declare.
pub(crate) fn missing_tasks_extension(request: &McpRequest) -> Reply {
    let missing = ProtocolError::new(
        StatusCode::BAD_REQUEST,
        MISSING_CAPABILITY,
        format!(
            "{} needs the {TASKS_EXTENSION} extension, which this request did not declare",
            request.method
        ),
    )
    .with_id(Some(&request.id))
    .with_data(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}));
    refusal(&missing)
}

/// Cancels a task that has not started running.
async fn cancel(store: &dyn TaskStore, request: &McpRequest, mut record: TaskRecord) -> Reply {
    // A decision may land between the read and the write: follow the status, at most a few
    // steps, since statuses only move forward.
    for _ in 0..3 {
        match record.status {
            TaskStatus::Working | TaskStatus::Approved => {}
            TaskStatus::Executing => {
                return refuse(
                    request,
                    StatusCode::OK,
                    INVALID_PARAMS,
                    "The task is already running and can no longer be cancelled.",
                );
            }
            TaskStatus::Completed | TaskStatus::Cancelled | TaskStatus::Failed => {
                return refuse(
                    request,
                    StatusCode::OK,
                    INVALID_PARAMS,
                    "The task has already finished.",
                );
            }
        }
        let cancel = TaskChange::new(record.status, TaskStatus::Cancelled);
        match store.transition(&record.id, cancel).await {
            Ok(Transition::Applied(cancelled)) => {
                tracing::info!(target: "mcp_gate::tasks", task_id = %cancelled.id, context_id = %cancelled.context_id, "task cancelled by its owner");
                return result_reply(request, json!({"resultType": "complete"}));
            }
            Ok(Transition::Conflict(Some(now))) => record = now,
            Ok(Transition::Conflict(None)) => return unknown_task(request),
            Err(failure) => return store_failed(request, "cancel", &failure),
        }
    }
    internal_error(request)
}

/// Claims an approved task, evaluates it again, runs it once, records and answers its outcome.
pub(crate) async fn run<S: Inner>(
    settings: &Settings,
    inner: S,
    parts: Parts,
    principal: &Principal,
    request: &McpRequest,
    record: TaskRecord,
    id: crate::judge::RequestId,
) -> Reply {
    let revision = settings.denial.revision;
    let store = settings.tasks.store.clone();
    let claimed = match claim(settings, request, &record).await {
        Ok(claimed) => claimed,
        Err(answered) => return answered,
    };
    // The owner's answer once the outcome is recorded, or an internal error if it could not be.
    let conclude = |done: Option<TaskRecord>| match done {
        Some(done) => result_reply(request, wire::status(&done, revision)),
        None => internal_error(request),
    };
    let executing = TaskStatus::Executing;
    let unreplayable = || internal_failure(executing, "The held call could not be replayed.");
    let Some((body, held)) = held_request(&claimed) else {
        tracing::error!(target: "mcp_gate::tasks", task_id = %claimed.id, "the held call is not a valid request; failing the task");
        return conclude(record_outcome(&store, &claimed, unreplayable()).await);
    };
    if let Err(change) = judge_again(settings, principal, &claimed, &held, id).await {
        return conclude(record_outcome(&store, &claimed, change).await);
    }
    let Some(inner_parts) = held_parts(parts, &claimed, &held) else {
        return conclude(record_outcome(&store, &claimed, unreplayable()).await);
    };
    let max = settings.answers.max_bytes;
    // The call and the recording of its outcome outlive this poll: a client that disconnects
    // now does not leave a call that ran without a recorded result.
    let execution = tokio::spawn(async move {
        let change = match call_inner(inner, inner_parts, body, &claimed.id, max).await {
            Ok(result) => TaskChange::new(executing, TaskStatus::Completed).result(result),
            Err(failure) => TaskChange::new(executing, TaskStatus::Failed).error(failure),
        };
        record_outcome(&store, &claimed, change).await
    });
    match execution.await {
        Ok(Some(done)) => {
            tracing::info!(target: "mcp_gate::tasks", task_id = %done.id, context_id = %done.context_id, status = %done.status, "approved call ran");
            result_reply(request, wire::status(&done, revision))
        }
        _ => internal_error(request),
    }
}

/// Claims an approved task for running (approved → executing, with time left to run it). The
/// answer instead when it cannot be: where the task stands, or, approved too late to run
/// before it expires, the task completed as refused.
async fn claim(
    settings: &Settings,
    request: &McpRequest,
    record: &TaskRecord,
) -> Result<TaskRecord, Reply> {
    let (tasks, revision) = (&settings.tasks, settings.denial.revision);
    let approved = TaskStatus::Approved;
    let claim = TaskChange::new(approved, TaskStatus::Executing)
        .require_remaining_ms(tasks.run_margin_ms());
    match tasks.store.transition(&record.id, claim).await {
        Ok(Transition::Applied(claimed)) => Ok(claimed),
        // Another replica claimed it, or it was cancelled: say where it stands.
        Ok(Transition::Conflict(Some(now))) => {
            Err(result_reply(request, wire::status(&now, revision)))
        }
        Ok(Transition::Conflict(None)) => Err(unknown_task(request)),
        Err(StoreError::Expired(_)) => {
            let message = "The request was approved too late to run before its task expires.";
            let refusal = wire::refusal(&record.context_id, message, revision);
            let change = TaskChange::new(approved, TaskStatus::Completed).result(refusal);
            Err(match tasks.store.transition(&record.id, change).await {
                Ok(Transition::Applied(now) | Transition::Conflict(Some(now))) => {
                    result_reply(request, wire::status(&now, revision))
                }
                Ok(Transition::Conflict(None)) => unknown_task(request),
                Err(failure) => store_failed(request, "complete", &failure),
            })
        }
        Err(failure) => Err(store_failed(request, "claim", &failure)),
    }
}

/// Whether the task's owner was revoked (by subject or client) after the task was created:
/// the judge then refuses it unasked ([`Ruling::Withdrawn`]) and the call never runs. The
/// poll's own token passed the check; the held call was made under the grant withdrawn.
fn owner_revoked(settings: &Settings, claimed: &TaskRecord) -> bool {
    settings
        .revocations
        .as_ref()
        .is_some_and(|set| set.owner_revoked(&claimed.owner, claimed.created_at))
}

/// The policy, asked again in the approval phase before the held call runs: `Ok` to run it,
/// or the outcome to record instead (a refusal completes `unavailable`; a failing policy
/// fails the task).
async fn judge_again(
    settings: &Settings,
    principal: &Principal,
    claimed: &TaskRecord,
    held: &McpRequest,
    id: crate::judge::RequestId,
) -> Result<(), TaskChange> {
    let approval = Approval {
        task_id: claimed.id.to_string(),
        approved_by: match &claimed.decision {
            Some(crate::tasks::TaskDecision::Approved { by }) => by.clone(),
            _ => String::new(),
        },
    };
    let protocol = ProtocolContext {
        era: Era::Modern,
        protocol_version: Some(claimed.call.protocol_version.clone()),
        capabilities: ClientCapabilities::default(),
    };
    let annotations = match &held.target {
        Target::Tool { name, .. } => settings.policy.tool_annotations.get(name),
        _ => None,
    };
    let case = Case {
        principal,
        method: &held.method,
        target: Cow::Borrowed(&held.target),
        protocol: &protocol,
        phase: Phase::Approval,
        answered: None,
        listed: annotations,
        approval: Some(approval),
        // Re-judged on the approval's request, not the caller's: nothing of it is shown.
        extensions: None,
    };
    let approved = Approved {
        claimed,
        revision: settings.denial.revision,
    };
    settings
        .policy
        .judge(id)
        .withdrawn(owner_revoked(settings, claimed))
        .judge(case, approved)
        .await
}

/// How a ruling on an approved call is said: `Ok` to run it, or the outcome to record
/// instead (a refusal completes `unavailable`; a failing policy fails the task).
struct Approved<'a> {
    claimed: &'a TaskRecord,
    revision: Revision,
}

impl Express for Approved<'_> {
    type Then = Result<(), TaskChange>;

    async fn express(self, ruling: Ruling) -> Judged<Self::Then> {
        let claimed = self.claimed;
        let told = |decision| {
            let mut said = Said::plain(decision).context(&claimed.context_id);
            said.task_id = Some(claimed.id.to_string());
            said
        };
        let refused_for = |said: Said, message: &str| {
            let refusal = wire::refusal(&claimed.context_id, message, self.revision);
            let change = TaskChange::new(TaskStatus::Executing, TaskStatus::Completed);
            Judged {
                said: said.expressed(Expressed::State(RemediationState::Unavailable)),
                then: Err(change.result(refusal)),
            }
        };
        let refused = |said| {
            refused_for(
                said,
                "The request was approved, but the policy no longer allows it.",
            )
        };
        match ruling {
            Ruling::Allow => Judged {
                said: told(DecisionKind::Allow),
                then: Ok(()),
            },
            Ruling::Ask { .. } => refused(told(DecisionKind::Ask)),
            Ruling::Abstain => refused(told(DecisionKind::Abstain)),
            // An approved call is not counted again (the judge limits invocations only); were
            // it ever limited, it would not run.
            Ruling::Limited(_) => refused(told(DecisionKind::Limited)),
            Ruling::LimitFailed(_) => refused(told(DecisionKind::Refused)),
            Ruling::Withdrawn => {
                tracing::info!(target: "mcp_gate::tasks", task_id = %claimed.id, context_id = %claimed.context_id, "the task's owner was revoked; the held call does not run");
                let mut said = Said::refused(Refusal::OwnerRevoked).context(&claimed.context_id);
                said.task_id = Some(claimed.id.to_string());
                let message = "The request was approved, but its owner's grant was revoked.";
                refused_for(said, message)
            }
            Ruling::Deny(remediation) => {
                refused(told(DecisionKind::Deny).remedy(RemedyKind::of(&remediation)))
            }
            Ruling::Failed(failure) => {
                let mut said = Said::refused(Refusal::PolicyFailed {
                    kind: failure.kind(),
                    error: failure.to_string(),
                });
                said.context_id = Some(claimed.context_id.clone());
                said.task_id = Some(claimed.id.to_string());
                let message = "internal error while authorizing the request";
                Judged {
                    said,
                    then: Err(internal_failure(TaskStatus::Executing, message)),
                }
            }
        }
    }
}

/// Records the outcome of a claimed task (`change`, from executing); `None` when it could not
/// be.
async fn record_outcome(
    store: &Arc<dyn TaskStore>,
    claimed: &TaskRecord,
    change: TaskChange,
) -> Option<TaskRecord> {
    match store.transition(&claimed.id, change).await {
        Ok(Transition::Applied(done)) => Some(done),
        outcome => {
            tracing::error!(target: "mcp_gate::tasks", task_id = %claimed.id, outcome = ?outcome.as_ref().map(Transition::is_applied), "the outcome of a claimed task could not be recorded");
            None
        }
    }
}

/// The held call as a JSON-RPC request (id: the task id) and its classification.
fn held_request(record: &TaskRecord) -> Option<(Bytes, McpRequest)> {
    let mut params = record.call.params.as_object().cloned().unwrap_or_default();
    params.insert(
        "_meta".into(),
        json!({
            META_PROTOCOL_VERSION: record.call.protocol_version,
            // The owner is not there to answer elicitations, and the layer is the task.
            META_CLIENT_CAPABILITIES: {},
        }),
    );
    let body = Bytes::from(
        json!({"jsonrpc": "2.0", "id": record.id.as_str(), "method": record.call.method, "params": params})
            .to_string(),
    );
    match classify(&body) {
        Ok(Message::Request(held)) if held.method == "tools/call" => Some((body, *held)),
        _ => None,
    }
}

/// The poll's request head, turned into the head of the held call.
fn held_parts(mut parts: Parts, record: &TaskRecord, held: &McpRequest) -> Option<Parts> {
    let headers = &mut parts.headers;
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(SESSION_HEADER);
    let fixed = [
        (header::CONTENT_TYPE, "application/json"),
        (header::ACCEPT, "application/json, text/event-stream"),
        (METHOD_HEADER, "tools/call"),
    ];
    insert_fixed(headers, &fixed);
    headers.insert(
        NAME_HEADER,
        HeaderValue::from_str(held.target.name()?).ok()?,
    );
    headers.insert(
        VERSION_HEADER,
        HeaderValue::from_str(&record.call.protocol_version).ok()?,
    );
    Some(parts)
}

/// Runs the held call through the inner service; its result, or the error the task fails with.
async fn call_inner<S: Inner>(
    mut inner: S,
    parts: Parts,
    body: Bytes,
    task_id: &TaskId,
    max: usize,
) -> Result<Value, TaskError> {
    let failed = |message: &str| TaskError {
        code: INTERNAL_ERROR,
        message: message.to_owned(),
        data: None,
    };
    let call = inner.call(Request::from_parts(parts, S::Req::from(body)));
    let id = Value::String(task_id.to_string());
    // A held call may run long (a deploy): its answer is read without a time limit.
    let read = answer::fetch(call, (max, None), &id)
        .await
        .map_err(|_| failed("The server failed to run the approved call."))?;
    let message = match read {
        Ok(Read::Answered(answer)) => answer.into_response_message(),
        // A non-success's JSON-RPC error is the task's error; any other body says nothing.
        Ok(Read::NotSuccess(_, Some(error))) => error,
        Ok(Read::NotSuccess(head, None)) => {
            tracing::warn!(target: "mcp_gate::answer", status = head.status.as_u16(), "the approved call was answered with a non-success status");
            return Err(failed("The server refused the approved call."));
        }
        Err(problem) => {
            tracing::error!(target: "mcp_gate::answer", method = "tools/call", answer = "held call", problem = problem.code(), "inner answer not read: {}", problem.describe());
            return Err(failed(
                "The server's answer to the approved call could not be read.",
            ));
        }
    };
    if let Some(result) = message.get("result").filter(|r| r.is_object()) {
        return Ok(result.clone());
    }
    let error = message.get("error");
    Err(TaskError {
        code: error
            .and_then(|e| e.get("code"))
            .and_then(Value::as_i64)
            .unwrap_or(INTERNAL_ERROR),
        message: error
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("The server's answer to the approved call was not a result.")
            .to_owned(),
        data: error.and_then(|e| e.get("data")).cloned(),
    })
}
