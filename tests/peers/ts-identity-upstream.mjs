// An upstream MCP server on the official TypeScript SDK that trusts only the mcp-gate
// gateway's identity token, for mcp-gate-server's integration tests: the SDK's
// `requireBearerAuth` with a verifier that checks the gateway's ES256 JWT with jose
// (`createRemoteJWKSet` on the gateway's key set, `jwtVerify` with `typ`, `aud` this server's
// own MCP URL, `iss`), in front of a stateless `McpServer` whose tool `whoami` returns the
// caller as the verifier read it. The verifier is the one docs/gateway.md shows.
//
//   node ts-identity-upstream.mjs --jwks-url URL --issuer ISS [--max-seconds 300]
//
// stdout: one JSON line once listening, {"url": ..., "audience": ...}. Exits when stdin
// closes or after --max-seconds.

import { parseArgs } from 'node:util';

import { createRemoteJWKSet, jwtVerify } from 'jose';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';

import { statelessHandler } from './stateless-mcp.mjs';

const { values: options } = parseArgs({
  options: {
    'jwks-url': { type: 'string' },
    issuer: { type: 'string' },
    'max-seconds': { type: 'string', default: '300' },
  },
});
if (!options['jwks-url'] || !options.issuer) {
  console.error('usage: ts-identity-upstream.mjs --jwks-url URL --issuer ISS [--max-seconds N]');
  process.exit(2);
}
setTimeout(() => process.exit(0), Number(options['max-seconds']) * 1000).unref();
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();

const host = '127.0.0.1';
let audience; // this server's own MCP URL, known once it listens

const keys = createRemoteJWKSet(new URL(options['jwks-url']));
const verifier = {
  async verifyAccessToken(token) {
    const { payload: c } = await jwtVerify(token, keys, {
      algorithms: ['ES256'], typ: 'mcp-gate-identity+jwt', requiredClaims: ['exp', 'iat'],
      audience, issuer: options.issuer,
    }).catch((error) => { throw new InvalidTokenError(`identity token refused: ${error.code ?? error.message}`); });
    return { token, clientId: c.client_id ?? '', scopes: (c.scope ?? '').split(' ').filter(Boolean),
             expiresAt: c.exp, extra: { sub: c.sub, tokenIssuer: c.token_issuer } };
  },
};

function buildServer() {
  const server = new McpServer({ name: 'ts-identity-upstream', version: '0.0.0' });
  server.registerTool(
    'whoami',
    { description: 'The caller, as the gateway\'s verified identity token states it', annotations: { readOnlyHint: true } },
    async (extra) => {
      const auth = extra.authInfo;
      const caller = auth
        ? { sub: auth.extra?.sub ?? null, client_id: auth.clientId, scopes: auth.scopes, token_issuer: auth.extra?.tokenIssuer ?? null }
        : null;
      return { content: [{ type: 'text', text: JSON.stringify({ caller }) }] };
    },
  );
  return server;
}

const app = createMcpExpressApp({ host });
app.post('/mcp', requireBearerAuth({ verifier }), statelessHandler(buildServer));

// Stateless: no stream to open, no session to end.
const notAllowed = (_req, res) => res.status(405).set('allow', 'POST').end();
app.get('/mcp', notAllowed);
app.delete('/mcp', notAllowed);

const listener = app.listen(0, host, () => {
  audience = `http://${host}:${listener.address().port}/mcp`;
  console.log(JSON.stringify({ url: audience, audience }));
});
listener.on('error', (error) => {
  console.error(`ts-identity-upstream: ${error.message}`);
  process.exit(1);
});
