// Lists everything with the official TypeScript SDK client, for mcp-gate's response-side tests.
//
//   node ts-lists.mjs <mcp-url> [--token TOKEN] [--cases c1,c2,...] [--request-timeout-ms 4000]
//                     [--timeout-ms 30000]
//
// Connects once (`Client` + `StreamableHTTPClientTransport`, legacy 2025-11-25 `initialize`),
// then for each case (one round with no case when --cases is absent) sends the six listing
// requests in order: `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`
// through the SDK's typed calls, `resources/directory/read` and `skills/list` through its
// generic `request` with a permissive result schema (the SDK has no typed call for them). A case
// travels in the request's `_meta` as `"mcp-gate-test/case"`, for a scripted inner server to
// choose its answer's framing; the gate passes `_meta` on.
//
// stdout: one JSON line per request, what the SDK surfaced:
//   {"case":C|null,"method":M,"ok":true,"result":{...}}
//   {"case":C|null,"method":M,"ok":false,"error":{"class","code","message","data"?}}
// The error's message is the SDK's own text (a non-2xx body is part of it). Before them one
// {"step":"connect",...} line. Exit status 0 once every round ran (whatever each request gave),
// 1 if the connection failed or the watchdog fired, 2 for usage errors.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { parseArgs } from 'node:util';
import { z } from 'zod';

// Keep stdout for JSON lines only.
for (const k of ['log', 'info', 'debug', 'warn']) console[k] = (...a) => console.error(...a);

const out = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

const USAGE = 'usage: node ts-lists.mjs <mcp-url> [--token T] [--cases a,b] [--request-timeout-ms N] [--timeout-ms N]';

let opts;
try {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      token: { type: 'string' },
      cases: { type: 'string' },
      'request-timeout-ms': { type: 'string', default: '4000' },
      'timeout-ms': { type: 'string', default: '30000' },
    },
  });
  if (positionals.length !== 1) throw new Error('exactly one <mcp-url> is needed');
  opts = {
    url: positionals[0],
    token: values.token,
    cases: values.cases === undefined ? [null] : values.cases.split(',').filter(Boolean),
    requestTimeoutMs: Number(values['request-timeout-ms']),
    timeoutMs: Number(values['timeout-ms']),
  };
} catch (e) {
  console.error(`ts-lists.mjs: ${e.message}`);
  console.error(USAGE);
  process.exit(2);
}

const watchdog = setTimeout(() => {
  out({ step: 'timeout', ok: false, error: { class: 'Timeout', code: null, message: `no end after ${opts.timeoutMs} ms` } });
  process.exit(1);
}, opts.timeoutMs);

/** Any object: what the SDK hands back for a method it has no schema of its own for. */
const AnyResult = z.object({}).passthrough();

/** The six listings, each as the SDK sends it. */
const LISTINGS = [
  ['tools/list', (c, params, o) => c.listTools(params, o)],
  ['prompts/list', (c, params, o) => c.listPrompts(params, o)],
  ['resources/list', (c, params, o) => c.listResources(params, o)],
  ['resources/templates/list', (c, params, o) => c.listResourceTemplates(params, o)],
  ['resources/directory/read', (c, params, o) => c.request(
    { method: 'resources/directory/read', params: { uri: 'test://dir/', ...params } }, AnyResult, o)],
  ['skills/list', (c, params, o) => c.request({ method: 'skills/list', params }, AnyResult, o)],
];

function errorInfo(e) {
  const info = { class: e?.constructor?.name ?? typeof e, code: e?.code ?? null, message: String(e?.message ?? e) };
  if (e?.data !== undefined) info.data = e.data;
  return info;
}

async function main() {
  const transport = new StreamableHTTPClientTransport(new URL(opts.url), {
    ...(opts.token ? { requestInit: { headers: { Authorization: `Bearer ${opts.token}` } } } : {}),
  });
  const client = new Client({ name: 'mcp-gate-ts-lists', version: '0.0.0' }, { capabilities: {} });
  try {
    await client.connect(transport);
  } catch (e) {
    out({ step: 'connect', ok: false, error: errorInfo(e) });
    return false;
  }
  out({ step: 'connect', ok: true, protocol_version: transport.protocolVersion ?? null });
  for (const kase of opts.cases) {
    const params = kase === null ? {} : { _meta: { 'mcp-gate-test/case': kase } };
    for (const [method, send] of LISTINGS) {
      try {
        const result = await send(client, params, { timeout: opts.requestTimeoutMs });
        out({ case: kase, method, ok: true, result });
      } catch (e) {
        out({ case: kase, method, ok: false, error: errorInfo(e) });
      }
    }
  }
  try { await client.close(); } catch { /* ignore */ }
  return true;
}

main().then((ok) => {
  clearTimeout(watchdog);
  process.exit(ok ? 0 : 1);
}, (e) => {
  out({ step: 'fatal', ok: false, error: errorInfo(e) });
  process.exit(1);
});
