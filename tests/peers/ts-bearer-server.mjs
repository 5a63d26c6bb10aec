// The TypeScript SDK's own answer to what mcp-gate does, for scripts/bench-peers.sh (d):
// `requireBearerAuth` from @modelcontextprotocol/sdk in front of an SDK `McpServer` with the
// same `echo` tool as the Rust example, over the Streamable HTTP transport, stateless, with
// JSON responses. The verifier checks an ES256 JWT against a local JWK set (jose): signature,
// `iss`, `aud`, `exp`, `typ: at+jwt`; the middleware then checks the scope, the resource and
// the expiry from the AuthInfo it returns.
//
//   node ts-bearer-server.mjs --port 18931 --jwks jwks.json \
//        [--issuer https://issuer.bench.example] [--scope mcp:read] [--max-seconds 3600]
//        [--validator-per-request]
//
// Prints one JSON line ({"ready":true,"url":...}) once it listens. Exits by itself after
// --max-seconds, and on SIGTERM/SIGINT.

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { createLocalJWKSet, jwtVerify } from 'jose';
import * as z from 'zod/v4';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv-provider.js';

import { statelessHandler } from './stateless-mcp.mjs';

const { values: options } = parseArgs({
  options: {
    port: { type: 'string' },
    jwks: { type: 'string' },
    issuer: { type: 'string', default: 'https://issuer.bench.example' },
    scope: { type: 'string', default: 'mcp:read' },
    'max-seconds': { type: 'string', default: '3600' },
    'validator-per-request': { type: 'boolean', default: false },
  },
});
if (!options.port || !options.jwks) {
  console.error('usage: ts-bearer-server.mjs --port PORT --jwks FILE [--issuer URL] [--scope SCOPE]');
  process.exit(2);
}

const host = '127.0.0.1';
const port = Number(options.port);
const resource = `http://${host}:${port}/mcp`;
const keySet = createLocalJWKSet(JSON.parse(readFileSync(options.jwks, 'utf8')));

// OAuthTokenVerifier: a full verification on every call, as the middleware asks for no cache.
const verifier = {
  async verifyAccessToken(token) {
    let payload;
    try {
      ({ payload } = await jwtVerify(token, keySet, {
        issuer: options.issuer,
        audience: resource,
        algorithms: ['ES256'],
        typ: 'at+jwt',
      }));
    } catch (error) {
      throw new InvalidTokenError(`token rejected: ${error.code ?? error.message}`);
    }
    const audience = Array.isArray(payload.aud) ? payload.aud[0] : payload.aud;
    return {
      token,
      clientId: String(payload.client_id ?? payload.azp ?? ''),
      scopes: typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : [],
      expiresAt: payload.exp,
      resource: new URL(audience),
      extra: { sub: payload.sub, jti: payload.jti },
    };
  },
};

// A fresh server and transport per request: the SDK's stateless pattern (a stateless transport
// may not be reused, and a server serves one transport at a time), as rmcp builds a fresh
// handler per request in stateless mode. Each `Server` builds its own Ajv JSON Schema validator
// unless given one, which costs about 0.8 ms: by default the servers share one, as a careful
// deployment would (`--validator-per-request` measures the SDK examples' plain pattern).
const sharedValidator = options['validator-per-request'] ? undefined : new AjvJsonSchemaValidator();
function buildServer() {
  const server = new McpServer(
    { name: 'ts-bearer-bench', version: '0.0.0' },
    { jsonSchemaValidator: sharedValidator },
  );
  server.registerTool(
    'echo',
    { description: 'Echo the given text back', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text }] }),
  );
  return server;
}

const app = createMcpExpressApp({ host });
const bearer = requireBearerAuth({
  verifier,
  requiredScopes: [options.scope],
  expectedResource: new URL(resource),
  resourceMetadataUrl: `http://${host}:${port}/.well-known/oauth-protected-resource/mcp`,
});

app.post('/mcp', bearer, statelessHandler(buildServer));

const listener = app.listen(port, host, () => {
  console.log(JSON.stringify({ ready: true, url: resource, config: 'ts-sdk', pid: process.pid }));
});
listener.on('error', (error) => {
  console.error(`ts-bearer-server: ${error.message}`);
  process.exit(1);
});

const stop = () => {
  listener.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
setTimeout(() => {
  console.error(`ts-bearer-server: --max-seconds ${options['max-seconds']} reached, exiting`);
  stop();
}, Number(options['max-seconds']) * 1000).unref();
