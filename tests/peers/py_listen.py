#!/usr/bin/env python3
"""Task listens on the official Python SDK (mcp 2.3.0), for mcp-gate integration tests.

    .venv/bin/python py_listen.py <mcp-url> --token TOKEN --task-id ID [--task-id ID]...
        [--timeout-ms 30000]

The SDK's `Client.listen()` opens a `subscriptions/listen` for the core notification types
only: its `SubscriptionFilter` has no `taskIds`, and `notifications/tasks` is no event it
yields. So the listen goes through the SDK session's lower level, the way `Client.listen()`
itself sends one (mcp/client/subscriptions.py):

- the client is the SDK's `Client` over its streamable HTTP transport with a static bearer
  token, declaring the Tasks extension through `Client(extensions=[TasksExtension()])`;
- the request `{"notifications": {"taskIds": [...]}}` is stamped by the session's `_stamp`
  (protocol version and client capabilities, the extension included, in `_meta`), its id
  registered with `_register_listen_route` (the session then consumes the acknowledgement
  and records the honoured filter), and sent with the dispatcher's `send_raw_request`, which
  returns when the server closes the listen with its response;
- `notifications/tasks` are read in wire order where the session demultiplexes listen
  streams (`ClientSession._intercept_notification`, wrapped before the client starts).

stdout, one JSON line each: {"ack": honoured filter} once acknowledged; {"task": params} per
`notifications/tasks` of this listen (its `_meta` subscription id); {"closed": result} when
the server closes the listen; {"error": {...}} on failure. Exit status 0 after a graceful
close, 1 otherwise (2 bad usage).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from mcp.client import Client, ClientExtension
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

import httpx2

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
LISTEN_ID = "listen-tasks-1"


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


class TasksExtension(ClientExtension):
    """Declares io.modelcontextprotocol/tasks with empty settings."""

    identifier = TASKS_EXTENSION


_intercept = ClientSession._intercept_notification


def _heard(self: ClientSession, method: str, params: Any) -> bool:
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and meta.get(SUBSCRIPTION_ID) == LISTEN_ID:
        if method == "notifications/subscriptions/acknowledged":
            out({"ack": params.get("notifications")})
        elif method == "notifications/tasks":
            out({"task": params})
    return _intercept(self, method, params)


ClientSession._intercept_notification = _heard  # type: ignore[method-assign]


async def run(a: argparse.Namespace) -> bool:
    headers = {"Authorization": f"Bearer {a.token}"}
    timeout = httpx2.Timeout(a.timeout_ms / 1000)
    http = create_mcp_http_client(headers=headers, timeout=timeout)
    async with http:
        transport = streamable_http_client(a.url, http_client=http)
        async with Client(transport, mode="auto", cache=None, extensions=[TasksExtension()]) as client:
            session = client.session
            data: dict[str, Any] = {
                "method": "subscriptions/listen",
                "params": {"notifications": {"taskIds": a.task_id}},
            }
            opts: Any = {"request_id": LISTEN_ID}
            session._stamp(data, opts)  # noqa: SLF001
            route = session._register_listen_route(LISTEN_ID)  # noqa: SLF001

            try:
                with anyio.fail_after(a.timeout_ms / 1000):
                    result = await session._dispatcher.send_raw_request(  # noqa: SLF001
                        data["method"], data.get("params"), opts
                    )
                out({"closed": result})
                return True
            except MCPError as e:
                out({"error": {"code": e.code, "message": str(e)}})
                return False
            finally:
                session._unregister_listen_route(LISTEN_ID)  # noqa: SLF001


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--token", required=True)
    p.add_argument("--task-id", action="append", default=[])
    p.add_argument("--timeout-ms", type=int, default=30000)
    a = p.parse_args()
    ok = anyio.run(run, a)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
