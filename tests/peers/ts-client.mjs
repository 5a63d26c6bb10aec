// MCP client on the official TypeScript SDK, for mcp-gate integration tests.
//
//   node ts-client.mjs <mcp-url> [--client-id ID --client-secret S] [--scope "a b"] [--issuer URL]
//                      [--auth-method basic|post] [--call name='{"json":"args"}']... [--token TOKEN]
//                      [--no-list] [--timeout-ms 30000] [--step-up] [--url-elicitation]
//
// With --url-elicitation the Client declares `capabilities: { elicitation: { form: {}, url: {} } }`
// in `initialize` and registers an `elicitation/create` handler that prints the request as
// {"elicit": {...}} and answers `{action: "cancel"}`. It also records the raw JSON-RPC error
// the transport received for a failed step (before the SDK turns it into an error object) and
// prints it in the step's error as `wire`: the SDK's UrlElicitationRequiredError (-32042)
// rebuilds `data` as `{elicitations}` only, so members beside them are visible only there.
// Without the flag the Client declares no capabilities and steps carry no `wire`.
//
// With --client-id/--client-secret it uses the SDK's ClientCredentialsProvider as the transport's
// authProvider (401 -> protected resource metadata -> AS metadata -> token -> retry).
// With --token it sends a static bearer token and does no OAuth. With neither it sends no token.
//
// stdout: one JSON line per HTTP exchange ({"http":{...}}) and per step ({"step":...}).
// Exit status 0 if every step succeeded, 1 otherwise (2 for bad usage).

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

// Keep stdout for JSON lines only: SDK warnings (e.g. a missing expectedIssuer) go to stderr.
for (const k of ['log', 'info', 'debug', 'warn']) console[k] = (...a) => console.error(...a);

const out = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

function usage(msg) {
  console.error(`ts-client.mjs: ${msg}`);
  console.error('usage: node ts-client.mjs <mcp-url> [--client-id ID --client-secret S] [--scope "a b"] [--issuer URL] '
    + '[--auth-method basic|post] [--call name=\'{"json":"args"}\']... [--token TOKEN] [--no-list] [--timeout-ms N] '
    + '[--step-up] [--url-elicitation]');
  process.exit(2);
}

// ------------------------------------------------------------------------------------------------
// CLI
// ------------------------------------------------------------------------------------------------
const opts = { calls: [], list: true, timeoutMs: 30000, authMethod: 'basic' };
{
  const argv = process.argv.slice(2);
  const need = (i) => {
    if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--client-id': opts.clientId = need(i); i++; break;
      case '--client-secret': opts.clientSecret = need(i); i++; break;
      case '--scope': opts.scope = need(i); i++; break;
      case '--issuer': opts.issuer = need(i); i++; break;
      case '--auth-method': opts.authMethod = need(i); i++; break;
      case '--token': opts.token = need(i); i++; break;
      case '--timeout-ms': opts.timeoutMs = Number(need(i)); i++; break;
      case '--no-list': opts.list = false; break;
      case '--step-up': opts.stepUp = true; break;
      case '--url-elicitation': opts.urlElicitation = true; break;
      case '--call': {
        const spec = need(i); i++;
        const eq = spec.indexOf('=');
        const name = eq < 0 ? spec : spec.slice(0, eq);
        let args = {};
        if (eq >= 0 && spec.slice(eq + 1).trim() !== '') {
          try { args = JSON.parse(spec.slice(eq + 1)); } catch (e) { usage(`--call ${name}: bad JSON: ${e.message}`); }
        }
        opts.calls.push({ name, args });
        break;
      }
      case '-h': case '--help': usage('help');
      // falls through
      default:
        if (a.startsWith('--')) usage(`unknown flag ${a}`);
        if (opts.url) usage(`unexpected argument ${a}`);
        opts.url = a;
    }
  }
  if (!opts.url) usage('missing <mcp-url>');
  if (!!opts.clientId !== !!opts.clientSecret) usage('--client-id and --client-secret go together');
  if (opts.token && opts.clientId) usage('--token and --client-id are exclusive');
  if (!['basic', 'post'].includes(opts.authMethod)) usage('--auth-method is basic or post');
}

const timer = setTimeout(() => {
  out({ step: 'timeout', ok: false, error: { class: 'Timeout', code: null, message: `no result after ${opts.timeoutMs} ms` } });
  process.exit(1);
}, opts.timeoutMs);

// ------------------------------------------------------------------------------------------------
// fetch wrapper: logs every HTTP exchange made by the transport and by the OAuth flow.
// ------------------------------------------------------------------------------------------------
const mcpUrl = new URL(opts.url);
let lastMcpStatus;
// The scope named by the last 403 insufficient_scope challenge from the MCP endpoint.
let lastScopeChallenge;

function describeBody(body) {
  if (body == null) return {};
  if (body instanceof URLSearchParams) {
    const form = Object.fromEntries(body);
    delete form.client_secret;
    return { form };
  }
  if (typeof body === 'string') {
    try {
      const j = JSON.parse(body);
      const msgs = Array.isArray(j) ? j : [j];
      return { rpc: msgs.map((m) => m.method ?? (m.id !== undefined ? 'response' : '?')).join(',') };
    } catch {
      return {};
    }
  }
  return {};
}

async function loggingFetch(input, init) {
  const url = input instanceof Request ? input.url : String(input);
  const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
  const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
  const entry = { method, url, bearer: /^bearer /i.test(headers.get('authorization') ?? ''), ...describeBody(init?.body) };
  let res;
  try {
    res = await fetch(input, init);
  } catch (e) {
    out({ http: { ...entry, status: null, www_authenticate: null, error: String(e?.cause?.code ?? e?.cause?.errors?.[0]?.code ?? e?.cause?.message ?? e?.message ?? e) } });
    throw e;
  }
  entry.status = res.status;
  entry.www_authenticate = res.headers.get('www-authenticate');
  const u = new URL(url);
  if (u.origin === mcpUrl.origin && u.pathname === mcpUrl.pathname) {
    lastMcpStatus = res.status;
    const challenge = entry.www_authenticate ?? '';
    if (res.status === 403 && /error="insufficient_scope"/.test(challenge)) {
      lastScopeChallenge = /scope="([^"]*)"/.exec(challenge)?.[1];
    }
  }
  if (res.status >= 400) {
    try {
      const text = await res.clone().text();
      entry.body = text.length > 500 ? `${text.slice(0, 500)}...` : text;
    } catch { /* ignore */ }
  }
  out({ http: entry });
  return res;
}

// ------------------------------------------------------------------------------------------------
// Client
// ------------------------------------------------------------------------------------------------
// One connected client per scope set: a step-up (--step-up) reconnects with a wider one.
function makeClient(scope) {
  let authProvider;
  if (opts.clientId) {
    const o = { clientId: opts.clientId, clientSecret: opts.clientSecret, clientName: 'mcp-gate-ts-client' };
    if (scope) o.scope = scope;
    if (opts.issuer) o.expectedIssuer = opts.issuer;
    authProvider = new ClientCredentialsProvider(o);
    if (opts.authMethod === 'post') {
      // The SDK prefers the method recorded in the client information (if the AS supports it).
      authProvider.saveClientInformation({ ...authProvider.clientInformation(), token_endpoint_auth_method: 'client_secret_post' });
    }
  }
  const transport = new StreamableHTTPClientTransport(mcpUrl, {
    fetch: loggingFetch,
    ...(authProvider ? { authProvider } : {}),
    ...(opts.token ? { requestInit: { headers: { Authorization: `Bearer ${opts.token}` } } } : {}),
  });
  const capabilities = opts.urlElicitation ? { elicitation: { form: {}, url: {} } } : {};
  const client = new Client({ name: 'mcp-gate-ts-client', version: '0.0.0' }, { capabilities });
  if (opts.urlElicitation) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      const p = request.params;
      out({ elicit: { mode: p.mode ?? 'form', url: p.url, message: p.message, elicitationId: p.elicitationId }, answered: 'cancel' });
      return { action: 'cancel' };
    });
  }
  return { client, transport };
}

// With --url-elicitation: the last JSON-RPC error the transport handed to the SDK, as received.
let lastWireError;
async function connectClient() {
  await client.connect(transport);
  if (opts.urlElicitation) {
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
      if (message && typeof message === 'object' && 'error' in message) lastWireError = message;
      deliver?.(message, extra);
    };
  }
}

let currentScope = opts.scope;
let { client, transport } = makeClient(currentScope);

function errorInfo(e) {
  const info = {
    class: e?.constructor?.name ?? typeof e,
    code: e?.code ?? null,
    message: String(e?.message ?? e),
  };
  const cause = e?.cause?.code ?? e?.cause?.errors?.[0]?.code ?? e?.cause?.message;
  if (cause) info.cause = cause;
  if (e?.data !== undefined) info.data = e.data;
  if (lastMcpStatus !== undefined) info.http_status = lastMcpStatus;
  if (opts.urlElicitation && lastWireError !== undefined) info.wire = lastWireError;
  return info;
}

let allOk = true;
async function step(base, fn) {
  lastMcpStatus = undefined;
  lastWireError = undefined;
  try {
    const extra = await fn();
    out({ ...base, ok: true, ...extra });
    return true;
  } catch (e) {
    allOk = false;
    out({ ...base, ok: false, error: errorInfo(e) });
    return false;
  }
}

async function main() {
  const connected = await step({ step: 'connect' }, async () => {
    await connectClient();
    return { protocol_version: transport.protocolVersion ?? null };
  });
  if (connected) {
    if (opts.list) {
      await step({ step: 'list' }, async () => {
        const r = await client.listTools();
        return { tools: r.tools.map((t) => t.name) };
      });
    }
    for (const c of opts.calls) {
      lastScopeChallenge = undefined;
      const okBefore = allOk;
      const ok = await step({ step: 'call', name: c.name }, async () => ({ result: await client.callTool({ name: c.name, arguments: c.args }) }));
      // The SDK's client_credentials provider asks only for its configured scope, so it cannot
      // follow a 403 insufficient_scope by itself. With --step-up the application does: it
      // reconnects asking for the union of its scopes and the challenge's, and retries once.
      if (!ok && opts.stepUp && opts.clientId && lastScopeChallenge !== undefined) {
        const union = [...new Set([...(currentScope ?? '').split(' '), ...lastScopeChallenge.split(' ')].filter(Boolean))].join(' ');
        try { await client.close(); } catch { /* ignore */ }
        currentScope = union;
        ({ client, transport } = makeClient(currentScope));
        allOk = okBefore;
        await step({ step: 'step-up', scope: union }, async () => { await connectClient(); return {}; });
        await step({ step: 'call', name: c.name, retried: true }, async () => ({ result: await client.callTool({ name: c.name, arguments: c.args }) }));
      }
    }
  }
  try { await client.close(); } catch { /* ignore */ }
}

main().catch((e) => {
  allOk = false;
  out({ step: 'fatal', ok: false, error: errorInfo(e) });
}).finally(() => {
  clearTimeout(timer);
  process.exit(allOk ? 0 : 1);
});
