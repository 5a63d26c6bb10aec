#!/usr/bin/env python3
"""An upstream MCP server on the official Python SDK (mcp 2.3.0, `MCPServer`, the 2.x name of
FastMCP), for the gateway's integration tests (mcp-gate-server/tests/sdk.rs). It has NO
authentication of its own: the gateway in front of it is the only guard.

    .venv/bin/python py_upstream.py     (env: PY_UPSTREAM_MAX_SECONDS, default 300;
                                         PY_UPSTREAM_EXIT_ON_STDIN_EOF=1 to exit when stdin closes)

Binds 127.0.0.1 on a port the OS chooses and prints exactly one JSON line on stdout once it
listens: {"url": "http://127.0.0.1:PORT/mcp", "runs_url": "http://127.0.0.1:PORT/__runs"}.
Everything else goes to stderr.

Streamable HTTP as the SDK serves it: `server/discover` and per-request `_meta` (2026-07-28)
as well as `initialize` sessions (2025-11-25), answers as SSE streams.

Tools (the same names and input schemas as ts-upstream.mjs):
  echo {text}                         returns text
  admin_report                        "admin report: all systems nominal"
  transfer {amount, currency, iban}   "transferred AMOUNT CURRENCY to IBAN"
  share_folder {folder}               "shared folder FOLDER"
  deploy {service}                    "deployed SERVICE"
  delete_file {path}                  "deleted PATH"
  delete_everything                   "deleted everything"
  secret_sauce                        "the secret sauce is ketchup"

GET /__runs (outside MCP, for the test only): how many times each tool ran, {"deploy": 1, ...}.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections import Counter

import anyio
import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp.server.mcpserver import MCPServer

MAX_SECONDS = float(os.environ.get("PY_UPSTREAM_MAX_SECONDS", "300"))

runs: Counter[str] = Counter()
server = MCPServer(name="mcp-gate-py-upstream", version="0.0.0")


def ran(tool: str, text: str) -> str:
    runs[tool] += 1
    return text


@server.tool(description="Returns its text.", structured_output=False)
def echo(text: str) -> str:
    return ran("echo", text)


@server.tool(description="The administrators' report.", structured_output=False)
def admin_report() -> str:
    return ran("admin_report", "admin report: all systems nominal")


@server.tool(description="Transfers money.", structured_output=False)
def transfer(amount: str, currency: str, iban: str) -> str:
    return ran("transfer", f"transferred {amount} {currency} to {iban}")


@server.tool(description="Shares a folder.", structured_output=False)
def share_folder(folder: str) -> str:
    return ran("share_folder", f"shared folder {folder}")


@server.tool(description="Deploys a service.", structured_output=False)
def deploy(service: str) -> str:
    return ran("deploy", f"deployed {service}")


@server.tool(description="Deletes a file.", structured_output=False)
def delete_file(path: str) -> str:
    return ran("delete_file", f"deleted {path}")


@server.tool(description="Deletes everything.", structured_output=False)
def delete_everything() -> str:
    return ran("delete_everything", "deleted everything")


@server.tool(description="The secret recipe.", structured_output=False)
def secret_sauce() -> str:
    return ran("secret_sauce", "the secret sauce is ketchup")


@server.custom_route("/__runs", methods=["GET"])
async def runs_route(_request: Request) -> Response:
    return JSONResponse(dict(runs))


def exit_later() -> None:
    """Exits after MAX_SECONDS, and on stdin EOF when asked to."""
    timer = threading.Timer(MAX_SECONDS, lambda: os._exit(0))
    timer.daemon = True
    timer.start()
    if os.environ.get("PY_UPSTREAM_EXIT_ON_STDIN_EOF") == "1":

        def watch() -> None:
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            finally:
                os._exit(0)

        threading.Thread(target=watch, daemon=True).start()


async def main() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)

    async def announce() -> None:
        while not web.started:
            await anyio.sleep(0.02)
        print(
            f'{{"url": "http://127.0.0.1:{port}/mcp", "runs_url": "http://127.0.0.1:{port}/__runs"}}',
            flush=True,
        )

    async with anyio.create_task_group() as group:
        group.start_soon(announce)
        await web.serve(sockets=[listener])
        group.cancel_scope.cancel()


if __name__ == "__main__":
    # stdout carries the ready line only.
    exit_later()
    anyio.run(main)
