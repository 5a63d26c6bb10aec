// MCP server on the official TypeScript SDK (McpServer + StreamableHTTPServerTransport), for the
// mcp-gate composition tests: a non-rmcp MCP server that the layer protects through a reverse
// proxy. It has NO authentication of its own; the gate in front of the proxy is the only guard.
//
//   node ts-server.mjs        (env: TS_SERVER_MAX_SECONDS, default 300;
//                              TS_SERVER_EXIT_ON_STDIN_EOF=1 to exit when stdin closes)
//
// Binds 127.0.0.1 on a port chosen by the OS and prints exactly one JSON line on stdout once it
// listens: {"url":"http://127.0.0.1:PORT/mcp","log_url":"http://127.0.0.1:PORT/__log"}.
// Everything else goes to stderr.
//
// Stateful Streamable HTTP: `initialize` opens a session (Mcp-Session-Id), POST answers are SSE
// streams, GET opens the standalone SSE stream, DELETE ends the session.
//
// Tools:
//   echo {text}        returns text
//   seen_headers       the header names of the HTTP request that carried this call, and whether
//                      any request this server received so far had an Authorization header
//   forbidden          returns "the forbidden tool ran" (a gate policy should never let it run)
//   slow {ms}          waits ms milliseconds (0 to 30000), then returns "slept <ms> ms": a call
//                      that is still in flight when the test acts (a shutdown that must drain it);
//                      with `_meta.progressToken`, one notifications/progress goes out first
//
// GET /__log (outside MCP, for the test only): every HTTP request this server received on /mcp,
// as {"method","rpc","tool","session","authorization","headers"}.

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { z } from 'zod';

import { listenAndAnnounce, mcpSessions } from './ts-sessions.mjs';

// stdout carries the ready line only.
for (const k of ['log', 'info', 'debug', 'warn']) console[k] = (...a) => console.error(...a);

const MAX_SECONDS = Number(process.env.TS_SERVER_MAX_SECONDS ?? 300);
setTimeout(() => process.exit(0), MAX_SECONDS * 1000).unref();
if (process.env.TS_SERVER_EXIT_ON_STDIN_EOF === '1') {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('error', () => process.exit(0));
  process.stdin.resume();
}

/** Every request received on /mcp, in order. */
const log = [];
const sawAuthorization = () => log.some((entry) => entry.authorization);

function text(value) {
  return { content: [{ type: 'text', text: typeof value === 'string' ? value : JSON.stringify(value) }] };
}

function newServer() {
  const server = new McpServer({ name: 'mcp-gate-ts-server', version: '0.0.0' });
  server.registerTool(
    'echo',
    { description: 'Returns its text.', inputSchema: { text: z.string() } },
    async ({ text: t }) => text(t),
  );
  server.registerTool(
    'seen_headers',
    { description: 'Reports the request headers this server received.' },
    async (extra) => {
      const headers = extra?.requestInfo?.headers ?? {};
      return text({
        headers: Object.keys(headers).map((h) => h.toLowerCase()).sort(),
        authorization: Object.keys(headers).some((h) => h.toLowerCase() === 'authorization'),
        any_request_had_authorization: sawAuthorization(),
        requests: log.length,
      });
    },
  );
  server.registerTool(
    'forbidden',
    { description: 'A tool the gate policy refuses.' },
    async () => text('the forbidden tool ran'),
  );
  server.registerTool(
    'slow',
    {
      description: 'Waits the given milliseconds, then answers.',
      inputSchema: { ms: z.number().int().min(0).max(30000) },
    },
    async ({ ms }, extra) => {
      // With a progress token, a first notification goes out on the call's stream before the
      // wait: a proxy that buffers answers holds it back until the end.
      const progressToken = extra?._meta?.progressToken;
      if (progressToken !== undefined) {
        await extra.sendNotification({
          method: 'notifications/progress',
          params: { progressToken, progress: 0, total: 1 },
        });
      }
      await new Promise((resolve) => setTimeout(resolve, ms));
      return text(`slept ${ms} ms`);
    },
  );
  return server;
}

// Loopback Host validation (DNS rebinding protection) and the JSON body parser, as the SDK sets
// them up for a local server.
const app = createMcpExpressApp({ host: '127.0.0.1' });

const sessions = mcpSessions(newServer, 'ts-server.mjs');
app.all('/mcp', (req, res) => {
  log.push(describe(req));
  return sessions(req, res);
});

function describe(req) {
  const body = req.body && typeof req.body === 'object' && !Array.isArray(req.body) ? req.body : undefined;
  return {
    method: req.method,
    rpc: body?.method ?? null,
    tool: body?.method === 'tools/call' ? body?.params?.name ?? null : null,
    session: req.get('mcp-session-id') ?? null,
    authorization: req.get('authorization') !== undefined,
    headers: Object.keys(req.headers).sort(),
  };
}

app.get('/__log', (_req, res) => {
  res.json(log);
});

listenAndAnnounce(app, { url: '/mcp', log_url: '/__log' }, 'ts-server.mjs');
