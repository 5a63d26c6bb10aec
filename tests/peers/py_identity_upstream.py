#!/usr/bin/env python3
"""An upstream MCP server on the official Python SDK (mcp 2.3.0) that trusts only the
mcp-gate gateway's identity token, for mcp-gate-server's integration tests.

    .venv/bin/python py_identity_upstream.py --jwks-url URL --issuer ISS [--max-seconds 300]

The SDK's high-level `MCPServer` over streamable HTTP on 127.0.0.1 (a free port), its bearer
auth given a `TokenVerifier` that verifies the gateway's ES256 JWT with PyJWT: the key from
the gateway's JWK set (`jwt.PyJWKClient` on --jwks-url), ES256 only, `typ`
`mcp-gate-identity+jwt`, `aud` this server's own MCP URL, `iss` --issuer, `exp` required.
A request without a valid token gets the SDK's 401. Tool `whoami` returns the verified
claims.

stdout: one JSON line once listening, {"url": ..., "audience": ...}. Exits when stdin closes
or after --max-seconds.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
from typing import Any

import anyio
import jwt
import uvicorn

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer


class GatewayIdentity(TokenVerifier):
    """The gateway's identity token, verified against its published key."""

    def __init__(self, jwks_url: str, audience: str, issuer: str) -> None:
        self.keys, self.audience, self.issuer = jwt.PyJWKClient(jwks_url), audience, issuer

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            if jwt.get_unverified_header(token).get("typ") != "mcp-gate-identity+jwt":
                return None
            key = await anyio.to_thread.run_sync(self.keys.get_signing_key_from_jwt, token)
            claims = jwt.decode(token, key, algorithms=["ES256"], audience=self.audience,
                                issuer=self.issuer, options={"require": ["exp", "iat"]})
        except jwt.PyJWTError:
            return None
        return AccessToken(token=token, client_id=claims.get("client_id", ""), subject=claims.get("sub"),
                           scopes=claims.get("scope", "").split(), expires_at=claims["exp"], claims=claims)


async def serve(a: argparse.Namespace) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    audience = f"http://127.0.0.1:{port}/mcp"

    server = MCPServer(
        name="py-identity-upstream",
        token_verifier=GatewayIdentity(a.jwks_url, audience, a.issuer),
        auth=AuthSettings(issuer_url=a.issuer, resource_server_url=None),
    )

    @server.tool(annotations={"readOnlyHint": True})
    def whoami() -> dict[str, Any]:
        """The caller, as the gateway's verified identity token states it."""
        token = get_access_token()
        return {"claims": token.claims if token else None}

    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)

    async with anyio.create_task_group() as group:
        group.start_soon(web.serve, [sock])
        # Ready once uvicorn has started (bounded: 10 s).
        with anyio.fail_after(10):
            while not web.started:
                await anyio.sleep(0.02)
        sys.stdout.write(json.dumps({"url": audience, "audience": audience}) + "\n")
        sys.stdout.flush()

        def stop_on_stdin_eof() -> None:
            sys.stdin.read()
            web.should_exit = True

        # A daemon thread: it never holds the process up once serving ends.
        threading.Thread(target=stop_on_stdin_eof, daemon=True).start()
        with anyio.move_on_after(a.max_seconds):
            while not web.should_exit:
                await anyio.sleep(0.2)
        web.should_exit = True


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jwks-url", required=True)
    p.add_argument("--issuer", required=True)
    p.add_argument("--max-seconds", type=float, default=300)
    anyio.run(serve, p.parse_args())


if __name__ == "__main__":
    main()
