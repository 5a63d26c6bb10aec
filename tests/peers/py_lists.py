#!/usr/bin/env python3
"""Lists everything with the official Python SDK client (mcp 2.3.0), for mcp-gate's response-side tests.

    .venv/bin/python py_lists.py <mcp-url> [--token TOKEN] [--cases c1,c2,...]
        [--mode auto|legacy] [--request-timeout-ms 4000] [--timeout-ms 30000]

Connects once (`Client`, `streamable_http_client`; mode auto sends `server/discover` and speaks
2026-07-28 when the server answers it), then for each case (one round with no case when --cases
is absent) sends the six listing requests in order: `tools/list`, `prompts/list`,
`resources/list`, `resources/templates/list` through the SDK's typed calls,
`resources/directory/read` and `skills/list` through the session's `send_request` with a
permissive (any object) result type, as the SDK has no typed call for them. A case travels in
the request's `_meta` as `"mcp-gate-test/case"`, for a scripted inner server to choose its
answer's framing.

stdout: one JSON line per request, what the SDK surfaced:
  {"case":C|null,"method":M,"ok":true,"result":{...}}
  {"case":C|null,"method":M,"ok":false,"error":{"class","code","message","data"?}}
Before them one {"step":"connect",...} line. Exit status 0 once every round ran (whatever each
request gave), 1 if the connection failed or the watchdog fired, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from types import SimpleNamespace
from typing import Any, Literal

import anyio

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import PaginatedRequest, Request, RequestParams
from pydantic import TypeAdapter

import py_client  # the same directory: its error_info

CASE_KEY = "mcp-gate-test/case"
ANY_RESULT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class DirectoryReadParams(RequestParams):
    """`resources/directory/read` params: the directory's URI."""

    uri: str


class DirectoryRead(Request[DirectoryReadParams, Literal["resources/directory/read"]]):
    """`resources/directory/read` (Skills extension); `Mcp-Name` mirrors the URI."""

    method: Literal["resources/directory/read"] = "resources/directory/read"
    params: DirectoryReadParams
    name_param = "uri"


class SkillsList(PaginatedRequest[Literal["skills/list"]]):
    """`skills/list` (Skills extension)."""

    method: Literal["skills/list"] = "skills/list"


def error_info(e: BaseException) -> dict[str, Any]:
    """What the SDK raised, as `py_client.py` prints it (no HTTP status: nothing is logged here)."""
    return py_client.error_info(e, SimpleNamespace(last_mcp_status=None))


def dump(result: Any) -> Any:
    if hasattr(result, "model_dump"):
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return result


def listings(client: Client, case: str | None):
    meta: Any = None if case is None else {CASE_KEY: case}
    session = client.session
    return [
        ("tools/list", lambda: client.list_tools(meta=meta)),
        ("prompts/list", lambda: client.list_prompts(meta=meta)),
        ("resources/list", lambda: client.list_resources(meta=meta)),
        ("resources/templates/list", lambda: client.list_resource_templates(meta=meta)),
        (
            "resources/directory/read",
            lambda: session.send_request(
                DirectoryRead(params=DirectoryReadParams(uri="test://dir/", _meta=meta)), ANY_RESULT
            ),
        ),
        ("skills/list", lambda: session.send_request(SkillsList(params=_paginated(meta)), ANY_RESULT)),
    ]


def _paginated(meta: Any) -> Any:
    from mcp_types import PaginatedRequestParams

    return PaginatedRequestParams(_meta=meta)


async def run(a: argparse.Namespace) -> bool:
    headers = {"Authorization": f"Bearer {a.token}"} if a.token else None
    http = create_mcp_http_client(headers=headers, timeout=None)
    connected = False
    try:
        async with http:
            transport = streamable_http_client(a.url, http_client=http)
            async with Client(transport, mode=a.mode, cache=None) as client:
                connected = True
                out({"step": "connect", "ok": True, "protocol_version": client.protocol_version})
                for case in a.cases:
                    for method, send in listings(client, case):
                        try:
                            with anyio.fail_after(a.request_timeout_ms / 1000):
                                result = await send()
                            out({"case": case, "method": method, "ok": True, "result": dump(result)})
                        except Exception as e:  # noqa: BLE001 - what the SDK raised is the output
                            out({"case": case, "method": method, "ok": False, "error": error_info(e)})
    except Exception as e:  # noqa: BLE001
        if not connected:
            out({"step": "connect", "ok": False, "error": error_info(e)})
            return False
    return True


def main() -> None:
    p = argparse.ArgumentParser(description="lists everything with the Python MCP SDK")
    p.add_argument("url")
    p.add_argument("--token")
    p.add_argument("--cases", default=None)
    p.add_argument("--mode", default="auto", choices=["auto", "legacy"])
    p.add_argument("--request-timeout-ms", type=int, default=4000)
    p.add_argument("--timeout-ms", type=int, default=30000)
    a = p.parse_args()
    a.cases = [None] if a.cases is None else [c for c in a.cases.split(",") if c]

    def watchdog() -> None:
        out({"step": "timeout", "ok": False,
             "error": {"class": "Timeout", "code": None, "message": f"no end after {a.timeout_ms} ms"}})
        os._exit(1)

    t = threading.Timer(a.timeout_ms / 1000, watchdog)
    t.daemon = True
    t.start()
    try:
        ok = anyio.run(run, a)
    except BaseException as e:  # noqa: BLE001
        out({"step": "fatal", "ok": False, "error": error_info(e)})
        ok = False
    sys.stdout.flush()
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()
