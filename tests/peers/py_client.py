#!/usr/bin/env python3
"""MCP client on the official Python SDK (mcp 2.3.0), for mcp-gate integration tests.

    .venv/bin/python py_client.py <mcp-url> [--client-id ID --client-secret S] [--scope "a b"]
        [--issuer URL] [--auth-method basic|post] [--call name='{"json":"args"}']... [--token TOKEN]
        [--no-list] [--mode auto|legacy] [--timeout-ms 30000]
        [--elicit] [--form-action accept|decline|cancel] [--approve true|false]
        [--url-action accept|decline|cancel] [--wait-url]

With --elicit the client declares form and URL elicitation and answers elicitation requests
(the SDK drives multi-round-trip requests itself): a form is answered with --form-action and,
on accept, {"approve": --approve}; a URL request is printed as {"elicit": {...}} and answered
with --url-action, after reading one line from stdin when --wait-url is given (the test
visits the page in between, as a user would).

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
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2

from mcp.client import Client
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

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
    a = p.parse_args()
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


async def run(a: argparse.Namespace) -> bool:
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
                    except Exception as e:  # noqa: BLE001
                        fail({"step": "call", "name": name}, e)
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
