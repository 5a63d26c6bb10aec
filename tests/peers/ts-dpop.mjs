// A DPoP (RFC 9449) MCP client for mcp-gate integration tests: the official TypeScript SDK's
// Client and StreamableHTTPClientTransport, with a fetch of its own that presents the token as
// `Authorization: DPoP <token>` and signs a fresh proof (with `jose`) for every request. The
// SDK 1.32.2 has no DPoP client of its own (only the metadata fields), hence this one.
//
//   node ts-dpop.mjs <mcp-url> --token-endpoint URL --client-id ID --client-secret S
//                    --resource URI [--scope "a b"] [--echo TEXT] [--timeout-ms 30000]
//
// 1. Asks the gate without a token and reads its challenges: the `DPoP algs="…"` one must name
//    ES256 (the algorithm this client signs with), or the run fails.
// 2. Gets a DPoP-bound token by `client_credentials` from the token endpoint, proving its key
//    there (a proof without `ath`), following the AS's own `use_dpop_nonce` if it asks.
// 3. Connects, lists the tools and, with --echo, calls `echo` through the SDK. A `401` whose challenge
//    says `use_dpop_nonce` is answered by signing a new proof with the `DPoP-Nonce` it carries
//    and sending the request again (once per request).
//
// stdout: JSON lines: {"algs": [...]}, {"token": {"token_type": ..., "jkt": ...}}, one
// {"http": {...}} per exchange with the gate, one {"step": ...} per step, and at the end
// {"nonce_retries": N}. Exit status 0 if every step succeeded, 1 otherwise (2 for bad usage).

import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SignJWT, generateKeyPair, exportJWK, calculateJwkThumbprint, base64url } from 'jose';
import { createHash } from 'node:crypto';

for (const k of ['log', 'info', 'debug', 'warn']) console[k] = (...a) => console.error(...a);
const out = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

function usage(msg) {
  console.error(`ts-dpop.mjs: ${msg}`);
  console.error('usage: node ts-dpop.mjs <mcp-url> --token-endpoint URL --client-id ID --client-secret S '
    + '--resource URI [--scope "a b"] [--echo TEXT] [--timeout-ms N]');
  process.exit(2);
}

// Flags are `--name value` pairs, each at most once, all required but --scope and --echo.
const FLAGS = {
  '--token-endpoint': 'tokenEndpoint',
  '--client-id': 'clientId',
  '--client-secret': 'clientSecret',
  '--resource': 'resource',
  '--scope': 'scope',
  '--echo': 'echo',
  '--timeout-ms': 'timeoutMs',
};
const opts = { timeoutMs: '30000' };
{
  const [url, ...rest] = process.argv.slice(2);
  if (!url || url.startsWith('--')) usage('the MCP URL comes first');
  opts.url = url;
  if (rest.length % 2 !== 0) usage('flags are --name value pairs');
  for (let i = 0; i < rest.length; i += 2) {
    const key = FLAGS[rest[i]];
    if (!key) usage(`unknown flag ${rest[i]}`);
    opts[key] = rest[i + 1];
  }
  for (const f of ['tokenEndpoint', 'clientId', 'clientSecret', 'resource']) {
    if (!opts[f]) usage(`missing ${f}`);
  }
  opts.timeoutMs = Number(opts.timeoutMs);
}

// The whole run is bounded.
setTimeout(() => {
  out({ step: 'timeout', ok: false });
  process.exit(1);
}, opts.timeoutMs).unref();

// ------------------------------------------------------------------------------------------------
// Challenges (RFC 9110 §11.6.1): every challenge of every WWW-Authenticate value.
// ------------------------------------------------------------------------------------------------
function challengesOf(response) {
  const header = response.headers.get('www-authenticate') ?? '';
  // Each match is a parameter (name=value, the value a token or a quoted string) or a bare
  // token, which starts a new challenge (its scheme). Quoted strings are consumed whole.
  const re = /([A-Za-z0-9!#$%&'*+.^_`|~-]+)(?:\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*))?/g;
  const challenges = [];
  let current;
  for (const [, name, value] of header.matchAll(re)) {
    if (value === undefined) {
      current = { scheme: name, params: {} };
      challenges.push(current);
    } else if (current) {
      current.params[name.toLowerCase()] = value.startsWith('"')
        ? value.slice(1, -1).replace(/\\(.)/g, '$1')
        : value;
    }
  }
  return challenges;
}

// ------------------------------------------------------------------------------------------------
// Proofs
// ------------------------------------------------------------------------------------------------
const { publicKey, privateKey } = await generateKeyPair('ES256');
const jwk = await exportJWK(publicKey);
const jkt = await calculateJwkThumbprint(jwk, 'sha256');

function htuOf(url) {
  const u = new URL(url);
  u.search = '';
  u.hash = '';
  return u.href;
}

async function proof(method, url, { token, nonce } = {}) {
  const claims = { jti: randomUUID(), htm: method, htu: htuOf(url), iat: Math.floor(Date.now() / 1000) };
  if (token) claims.ath = base64url.encode(createHash('sha256').update(token).digest());
  if (nonce) claims.nonce = nonce;
  return new SignJWT(claims)
    .setProtectedHeader({ typ: 'dpop+jwt', alg: 'ES256', jwk })
    .sign(privateKey);
}

// ------------------------------------------------------------------------------------------------
// 1. The gate's challenges
// ------------------------------------------------------------------------------------------------
let ok = true;
{
  const response = await fetch(opts.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'ping' }),
  });
  const challenges = challengesOf(response);
  const dpop = challenges.find((c) => c.scheme.toLowerCase() === 'dpop');
  const algs = (dpop?.params.algs ?? '').split(' ').filter(Boolean);
  out({ algs, status: response.status, schemes: challenges.map((c) => c.scheme) });
  if (!algs.includes('ES256')) {
    out({ step: 'algs', ok: false, error: 'the gate does not accept ES256 proofs' });
    process.exit(1);
  }
}

// ------------------------------------------------------------------------------------------------
// 2. A DPoP-bound token
// ------------------------------------------------------------------------------------------------
async function getToken() {
  const form = new URLSearchParams({ grant_type: 'client_credentials', resource: opts.resource });
  if (opts.scope) form.set('scope', opts.scope);
  const basic = Buffer.from(`${encodeURIComponent(opts.clientId)}:${encodeURIComponent(opts.clientSecret)}`).toString('base64');
  let nonce;
  for (let attempt = 0; attempt < 2; attempt++) {
    const response = await fetch(opts.tokenEndpoint, {
      method: 'POST',
      headers: {
        authorization: `Basic ${basic}`,
        'content-type': 'application/x-www-form-urlencoded',
        dpop: await proof('POST', opts.tokenEndpoint, { nonce }),
      },
      body: form,
    });
    const body = await response.json();
    if (response.status === 400 && body.error === 'use_dpop_nonce' && response.headers.get('dpop-nonce')) {
      nonce = response.headers.get('dpop-nonce');
      continue;
    }
    if (!response.ok) throw new Error(`token endpoint: ${response.status} ${JSON.stringify(body)}`);
    return body;
  }
  throw new Error('token endpoint: use_dpop_nonce twice');
}

const tokenResponse = await getToken();
const token = tokenResponse.access_token;
out({ token: { token_type: tokenResponse.token_type, jkt } });

// ------------------------------------------------------------------------------------------------
// 3. The SDK, over a fetch that speaks DPoP
// ------------------------------------------------------------------------------------------------
let gateNonce;
let nonceRetries = 0;

async function dpopFetch(url, init = {}) {
  const method = (init.method ?? 'GET').toUpperCase();
  const send = async () => {
    const headers = new Headers(init.headers ?? {});
    headers.set('authorization', `DPoP ${token}`);
    headers.set('dpop', await proof(method, url, { token, nonce: gateNonce }));
    return fetch(url, { ...init, headers });
  };
  let response = await send();
  const record = (r) => out({
    http: {
      method,
      status: r.status,
      www_authenticate: r.headers.get('www-authenticate'),
      dpop_nonce: r.headers.get('dpop-nonce'),
    },
  });
  record(response);
  if (response.status === 401) {
    const challenge = challengesOf(response).find((c) => c.scheme.toLowerCase() === 'dpop');
    const fresh = response.headers.get('dpop-nonce');
    if (challenge?.params.error === 'use_dpop_nonce' && fresh) {
      gateNonce = fresh;
      nonceRetries += 1;
      await response.body?.cancel();
      response = await send();
      record(response);
    }
  }
  return response;
}

const client = new Client({ name: 'mcp-gate-ts-dpop', version: '1.0.0' }, { capabilities: {} });
const transport = new StreamableHTTPClientTransport(new URL(opts.url), { fetch: dpopFetch });

async function step(name, fn) {
  try {
    const result = await fn();
    out({ step: name, ok: true, result });
  } catch (e) {
    ok = false;
    out({ step: name, ok: false, error: String(e?.message ?? e) });
  }
}

await step('connect', async () => {
  await client.connect(transport);
  return null;
});
await step('list', async () => (await client.listTools()).tools.map((t) => t.name));
if (opts.echo !== undefined) {
  await step('call:echo', async () => client.callTool({ name: 'echo', arguments: { text: opts.echo } }));
}
out({ nonce_retries: nonceRetries });
await transport.close().catch(() => {});
process.exit(ok ? 0 : 1);
