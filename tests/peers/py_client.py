#!/usr/bin/env python3
"""MCP client on the official Python SDK (mcp 2.3.0), for mcp-gate integration tests.

    .venv/bin/python py_client.py <mcp-url> [--client-id ID --client-secret S] [--scope "a b"]
        [--issuer URL] [--auth-method basic|post] [--call name='{"json":"args"}']... [--token TOKEN]
        [--no-list] [--mode auto|legacy] [--timeout-ms 30000]
        [--elicit] [--form-action accept|decline|cancel] [--approve true|false]
        [--url-action accept|decline|cancel] [--wait-url]
        [--tasks] [--wait-task] [--cancel-task] [--traceparent TRACEPARENT]

With --elicit the client declares form and URL elicitation and answers elicitation requests
(the SDK drives multi-round-trip requests itself): a form is answered with --form-action and,
on accept, {"approve": --approve}; a URL request is printed as {"elicit": {...}} and answered
with --url-action, after reading one line from stdin when --wait-url is given (the test
visits the page in between, as a user would).

With --tasks the client declares the Tasks extension (`io.modelcontextprotocol/tasks`, empty
settings) through the SDK's `Client(extensions=[...])`. The SDK puts it in
`_meta["io.modelcontextprotocol/clientCapabilities"].extensions` of every modern (2026-07-28)
request; on a legacy connection nothing is declared (the SDK advertises a result-claiming
extension only where its claim is active). A `tools/call` answered with a CreateTaskResult
(`resultType: "task"`) is printed raw as {"task": {...}}; with --wait-task one line is read from
stdin (the test approves the task in between); then `tasks/get` is polled every `pollIntervalMs`
(default 200, at least 50) until the status is completed, failed or cancelled, each answer
printed raw as {"poll": {...}}. With --cancel-task, `tasks/cancel` is sent after the first poll
(even a terminal one; at least one more poll follows) and its answer printed as {"cancel": {...}}
(or {"cancel": {"error": {...}}}). The call step is then {"step":"call","name":N,"ok":true,"task_status":S,"result"?: the task's CallToolResult,
"error"?: the failed task's error}. A JSON-RPC error on `tasks/get` prints {"poll": {"error":
{...}}} and fails the step at once; one on `tasks/cancel` keeps polling to a terminal status and
then fails the step (ok false, "task_status", "error"). `tasks/get` and `tasks/cancel` go
through the SDK session's `send_request`, so they carry the same `_meta` and headers as every
other modern request, plus `Mcp-Name: <taskId>`.

With --traceparent the client runs inside that W3C trace context, and the SDK itself puts it in
every request's `_meta` (SEP-414: with the OpenTelemetry API alone, the span the SDK opens per
request is the ambient one).

With --client-id/--client-secret it uses the SDK's ClientCredentialsOAuthProvider as the httpx2
auth of the streamable HTTP transport (401 -> protected resource metadata -> AS metadata -> token
-> retry). With --token it sends a static bearer token and does no OAuth.

stdout: one JSON line per HTTP exchange ({"http": {...}}) and per step ({"step": ...}), in the
same format as ts-client.mjs. Exit status 0 if every step succeeded, 1 otherwise (2 bad usage).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import warnings
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2

from mcp.client import ClaimContext, Client, ClientExtension, ResultClaim
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from mcp_types import CancelTaskRequest, CancelTaskRequestParams, GetTaskRequest, GetTaskRequestParams, Result
from pydantic import ConfigDict, PrivateAttr, TypeAdapter, model_validator
from pydantic.alias_generators import to_camel

# Keep the deprecation warning for a missing issuer visible, but on stderr only (the default).
warnings.simplefilter("default")


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class MemoryTokenStorage(TokenStorage):
    """TokenStorage kept in memory for the life of the process."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client_info = client_info


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="MCP client (Python SDK) for mcp-gate tests")
    p.add_argument("url")
    p.add_argument("--client-id")
    p.add_argument("--client-secret")
    p.add_argument("--scope")
    p.add_argument("--issuer")
    p.add_argument("--auth-method", choices=["basic", "post"], default="basic")
    p.add_argument("--call", action="append", default=[], metavar="NAME=JSON")
    p.add_argument("--token")
    p.add_argument("--no-list", action="store_true")
    p.add_argument("--mode", default="auto", help="auto (server/discover then initialize) or legacy (initialize)")
    p.add_argument("--timeout-ms", type=int, default=30000)
    p.add_argument("--elicit", action="store_true")
    p.add_argument("--form-action", choices=["accept", "decline", "cancel"], default="accept")
    p.add_argument("--approve", choices=["true", "false"], default="true")
    p.add_argument("--url-action", choices=["accept", "decline", "cancel"], default="accept")
    p.add_argument("--wait-url", action="store_true")
    p.add_argument("--tasks", action="store_true", help="declare io.modelcontextprotocol/tasks and follow tasks")
    p.add_argument("--wait-task", action="store_true", help="read one stdin line after a task is created")
    p.add_argument("--cancel-task", action="store_true", help="send tasks/cancel after the first tasks/get")
    p.add_argument("--traceparent", metavar="TRACEPARENT",
                   help="run inside this W3C trace context: the SDK sends it in each request's _meta (SEP-414)")
    p.add_argument("--listen", action="append", default=[], metavar="URI",
                   help="open one subscriptions/listen for these resource URIs, report the ack, close it")
    a = p.parse_args()
    if (a.wait_task or a.cancel_task) and not a.tasks:
        p.error("--wait-task and --cancel-task need --tasks")
    if bool(a.client_id) != bool(a.client_secret):
        p.error("--client-id and --client-secret go together")
    if a.token and a.client_id:
        p.error("--token and --client-id are exclusive")
    calls = []
    for spec in a.call:
        name, eq, raw = spec.partition("=")
        args: Any = {}
        if eq and raw.strip():
            try:
                args = json.loads(raw)
            except json.JSONDecodeError as e:
                p.error(f"--call {name}: bad JSON: {e}")
        calls.append((name, args))
    a.calls = calls
    return a


class HttpLog:
    """httpx2 response hook that prints one JSON line per exchange (OAuth requests included)."""

    def __init__(self, mcp_url: str) -> None:
        u = urlsplit(mcp_url)
        self._mcp = (u.scheme, u.netloc, u.path)
        self.last_mcp_status: int | None = None

    async def __call__(self, response: httpx2.Response) -> None:
        req = response.request
        entry: dict[str, Any] = {
            "method": req.method,
            "url": str(req.url),
            "bearer": req.headers.get("authorization", "").lower().startswith("bearer "),
        }
        try:
            content = req.content
        except Exception:  # streaming request body
            content = b""
        ctype = req.headers.get("content-type", "")
        if content and ctype.startswith("application/x-www-form-urlencoded"):
            form = dict(parse_qsl(content.decode()))
            form.pop("client_secret", None)
            entry["form"] = form
        elif content and ctype.startswith("application/json"):
            try:
                j = json.loads(content)
                msgs = j if isinstance(j, list) else [j]
                entry["rpc"] = ",".join(
                    m.get("method") or ("response" if "id" in m else "?") for m in msgs if isinstance(m, dict)
                )
            except ValueError:
                pass
        entry["status"] = response.status_code
        entry["www_authenticate"] = response.headers.get("www-authenticate")
        if (req.url.scheme, req.url.netloc.decode(), req.url.path) == self._mcp:
            self.last_mcp_status = response.status_code
        if response.status_code >= 400:
            try:
                text = (await response.aread()).decode(errors="replace")
                entry["body"] = text if len(text) <= 500 else text[:500] + "..."
            except Exception:
                pass
        out({"http": entry})


def leaf_exception(e: BaseException) -> BaseException:
    """Unwrap (single-member) exception groups raised by anyio task groups."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) >= 1:
        e = e.exceptions[0]
    return e


def error_info(e: BaseException, log: HttpLog) -> dict[str, Any]:
    e = leaf_exception(e)
    code: Any = None
    data: Any = None
    err = getattr(e, "error", None)  # MCPError carries ErrorData
    if err is not None and hasattr(err, "code"):
        code = err.code
        data = getattr(err, "data", None)
    elif isinstance(getattr(e, "code", None), int):
        code = e.code
    info: dict[str, Any] = {"class": type(e).__name__, "code": code, "message": str(e)}
    if data is not None:
        info["data"] = data
    if log.last_mcp_status is not None:
        info["http_status"] = log.last_mcp_status
    return info


def make_elicitation_callback(a: argparse.Namespace):
    """Answers the server's elicitation requests as the command line says."""
    from mcp_types import ElicitResult

    async def callback(context: Any, params: Any) -> Any:
        mode = getattr(params, "mode", "form")
        if mode == "url":
            out({"elicit": {"mode": "url", "url": params.url, "message": params.message}})
            if a.wait_url:
                await anyio.to_thread.run_sync(sys.stdin.readline)
            return ElicitResult(action=a.url_action)
        out({"elicit": {"mode": "form", "message": params.message}})
        if a.form_action == "accept":
            return ElicitResult(action="accept", content={"approve": a.approve == "true"})
        return ElicitResult(action=a.form_action)

    return callback


TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL_TASK_STATUSES = frozenset({"completed", "failed", "cancelled"})
DEFAULT_POLL_MS = 200
MIN_POLL_MS = 50
RAW_RESULT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


class CreatedTask(Result):
    """A CreateTaskResult (`resultType: "task"`), keeping the raw result dict as received."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")
    result_type: Literal["task"]
    task_id: str
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_raw(cls, data: Any, handler: Any) -> Any:
        model = handler(data)
        model._raw = dict(data) if isinstance(data, dict) else model.model_dump(by_alias=True, mode="json")
        return model

    @property
    def raw(self) -> dict[str, Any]:
        return self._raw


class TaskCreated(Exception):
    """Raised by the claim resolver: Client.call_tool hands the created task back to run()."""

    def __init__(self, task: CreatedTask) -> None:
        super().__init__(f"task {task.task_id} created")
        self.task = task


async def hand_back_task(task: CreatedTask, ctx: ClaimContext) -> Any:
    raise TaskCreated(task)


class TasksExtension(ClientExtension):
    """Declares io.modelcontextprotocol/tasks ({} settings) and claims `resultType: "task"` on tools/call."""

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=hand_back_task)]


class GetTask(GetTaskRequest):
    """tasks/get {"taskId"}; name_param makes the session send `Mcp-Name: <taskId>`."""

    name_param = "taskId"


class CancelTask(CancelTaskRequest):
    """tasks/cancel {"taskId"}, with `Mcp-Name: <taskId>`."""

    name_param = "taskId"


def poll_interval(answer: dict[str, Any], previous: float) -> float:
    ms = answer.get("pollIntervalMs")
    if isinstance(ms, int | float) and not isinstance(ms, bool):
        return max(float(ms), MIN_POLL_MS) / 1000
    return previous


async def follow_task(a: argparse.Namespace, client: Client, name: str, task: CreatedTask, log: HttpLog) -> bool:
    """Print the task, optionally wait for stdin and cancel, poll tasks/get to a terminal status."""
    created = task.raw
    out({"task": created})
    if a.wait_task:
        await anyio.to_thread.run_sync(sys.stdin.readline)
    task_id = task.task_id
    interval = poll_interval(created, DEFAULT_POLL_MS / 1000)
    status = created.get("status")
    cancel_error: dict[str, Any] | None = None
    polls = 0
    while True:
        await anyio.sleep(interval)
        log.last_mcp_status = None
        try:
            answer = await client.session.send_request(
                GetTask(params=GetTaskRequestParams(task_id=task_id)), RAW_RESULT
            )
        except Exception as e:  # noqa: BLE001
            info = error_info(e, log)
            out({"poll": {"error": info}})
            out({"step": "call", "name": name, "ok": False, "task_status": status, "error": info})
            return False
        out({"poll": answer})
        polls += 1
        status = answer.get("status")
        interval = poll_interval(answer, interval)
        if a.cancel_task and polls == 1:  # even when already terminal; then one more poll below
            log.last_mcp_status = None
            try:
                cancelled = await client.session.send_request(
                    CancelTask(params=CancelTaskRequestParams(task_id=task_id)), RAW_RESULT
                )
                out({"cancel": cancelled})
            except Exception as e:  # noqa: BLE001
                cancel_error = error_info(e, log)
                out({"cancel": {"error": cancel_error}})
            continue
        if status in TERMINAL_TASK_STATUSES:
            break
    step: dict[str, Any] = {"step": "call", "name": name, "ok": cancel_error is None, "task_status": status}
    if "result" in answer:
        step["result"] = answer["result"]
    if cancel_error is not None:
        step["error"] = cancel_error
    elif "error" in answer:
        step["error"] = answer["error"]
    out(step)
    return cancel_error is None


async def run(a: argparse.Namespace) -> bool:
    if a.traceparent:
        # The ambient trace context: the SDK's dispatcher injects the current one into every
        # request's `_meta` (with the OpenTelemetry API alone, its own span is the parent's).
        otel_context.attach(TraceContextTextMapPropagator().extract({"traceparent": a.traceparent}))
    log = HttpLog(a.url)
    auth: httpx2.Auth | None = None
    headers: dict[str, str] | None = None
    if a.client_id:
        auth = ClientCredentialsOAuthProvider(
            server_url=a.url,
            storage=MemoryTokenStorage(),
            client_id=a.client_id,
            client_secret=a.client_secret,
            token_endpoint_auth_method="client_secret_post" if a.auth_method == "post" else "client_secret_basic",
            scope=a.scope,
            issuer=a.issuer,
        )
    elif a.token:
        headers = {"Authorization": f"Bearer {a.token}"}

    timeout = httpx2.Timeout(a.timeout_ms / 1000)
    http = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
    http.event_hooks["response"].append(log)

    all_ok = True

    def fail(base: dict[str, Any], e: BaseException) -> None:
        nonlocal all_ok
        all_ok = False
        out({**base, "ok": False, "error": error_info(e, log)})

    connected = False
    steps_done = False
    try:
        async with http:
            transport = streamable_http_client(a.url, http_client=http)
            log.last_mcp_status = None
            extra: dict[str, Any] = {}
            if a.elicit:
                extra["elicitation_callback"] = make_elicitation_callback(a)
            if a.tasks:
                extra["extensions"] = [TasksExtension()]
            async with Client(transport, mode=a.mode, cache=None, **extra) as client:
                connected = True
                out({"step": "connect", "ok": True, "protocol_version": client.protocol_version})
                if not a.no_list:
                    log.last_mcp_status = None
                    try:
                        r = await client.list_tools()
                        out({"step": "list", "ok": True, "tools": [t.name for t in r.tools]})
                    except Exception as e:  # noqa: BLE001
                        fail({"step": "list"}, e)
                for name, args in a.calls:
                    log.last_mcp_status = None
                    try:
                        r = await client.call_tool(name, args)
                        result = r.model_dump(by_alias=True, exclude_none=True, mode="json")
                        out({"step": "call", "name": name, "ok": True, "result": result})
                    except TaskCreated as created:
                        if not await follow_task(a, client, name, created.task, log):
                            all_ok = False
                    except Exception as e:  # noqa: BLE001
                        fail({"step": "call", "name": name}, e)
                if a.listen:
                    log.last_mcp_status = None
                    try:
                        with anyio.fail_after(10):
                            async with client.listen(resource_subscriptions=a.listen) as sub:
                                honored = sub.honored.model_dump(by_alias=True, exclude_none=True, mode="json")
                                out({"step": "listen", "ok": True, "honored": honored})
                    except Exception as e:  # noqa: BLE001
                        fail({"step": "listen"}, e)
                steps_done = True
    except Exception as e:  # noqa: BLE001 - ExceptionGroup included
        if not connected:
            fail({"step": "connect"}, e)
        elif not steps_done:
            fail({"step": "fatal"}, e)
        # else: an error while closing the session does not change the verdict
    return all_ok


def main() -> None:
    a = parse_args()
    # Hard watchdog: whatever happens in the event loop, the process ends.
    def watchdog() -> None:
        out({"step": "timeout", "ok": False,
             "error": {"class": "Timeout", "code": None, "message": f"no result after {a.timeout_ms} ms"}})
        os._exit(1)

    t = threading.Timer(a.timeout_ms / 1000 + 2, watchdog)
    t.daemon = True
    t.start()
    try:
        ok = anyio.run(run_with_timeout, a)
    except BaseException as e:  # noqa: BLE001
        leaf = leaf_exception(e)
        out({"step": "fatal", "ok": False, "error": {"class": type(leaf).__name__, "code": None, "message": str(leaf)}})
        ok = False
    sys.stdout.flush()
    os._exit(0 if ok else 1)


async def run_with_timeout(a: argparse.Namespace) -> bool:
    try:
        with anyio.fail_after(a.timeout_ms / 1000):
            return await run(a)
    except TimeoutError:
        out({"step": "timeout", "ok": False,
             "error": {"class": "Timeout", "code": None, "message": f"no result after {a.timeout_ms} ms"}})
        return False


if __name__ == "__main__":
    main()
