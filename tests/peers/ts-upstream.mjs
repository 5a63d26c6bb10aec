// An upstream MCP server on the official TypeScript SDK (McpServer + StreamableHTTPServerTransport),
// for the gateway's integration tests (mcp-gate-server/tests/sdk.rs). It has NO authentication of
// its own: the gateway in front of it is the only guard.
//
//   node ts-upstream.mjs      (env: TS_UPSTREAM_MAX_SECONDS, default 300;
//                              TS_UPSTREAM_EXIT_ON_STDIN_EOF=1 to exit when stdin closes)
//
// Binds 127.0.0.1 on a port the OS chooses and prints exactly one JSON line on stdout once it
// listens: {"url":"http://127.0.0.1:PORT/mcp","runs_url":"http://127.0.0.1:PORT/__runs",
// "sessions_url":"http://127.0.0.1:PORT/__sessions"}.
// Everything else goes to stderr.
//
// Stateful Streamable HTTP (2025-11-25): `initialize` opens a session (Mcp-Session-Id), POST
// answers are SSE streams, GET opens the standalone SSE stream, DELETE ends the session. A
// `server/discover` (2026-07-28) is answered 400, as the SDK does, so modern clients fall back.
//
// Tools (the same names and input schemas as py_upstream.py):
//   echo {text}                         returns text
//   admin_report                        "admin report: all systems nominal"
//   transfer {amount, currency, iban}   "transferred AMOUNT CURRENCY to IBAN"
//   share_folder {folder}               "shared folder FOLDER"
//   deploy {service}                    "deployed SERVICE"
//   delete_file {path}                  "deleted PATH"
//   delete_everything                   "deleted everything"
//   secret_sauce                        "the secret sauce is ketchup"
//
// GET /__runs (outside MCP, for the test only): how many times each tool ran, {"deploy":1,...}.
// GET /__sessions (likewise): how many sessions were opened, and how many are open now,
// {"opened":3,"open":1}.

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { z } from 'zod';

import { listenAndAnnounce, mcpSessions } from './ts-sessions.mjs';

// stdout carries the ready line only.
for (const k of ['log', 'info', 'debug', 'warn']) console[k] = (...a) => console.error(...a);

const MAX_SECONDS = Number(process.env.TS_UPSTREAM_MAX_SECONDS ?? 300);
setTimeout(() => process.exit(0), MAX_SECONDS * 1000).unref();
if (process.env.TS_UPSTREAM_EXIT_ON_STDIN_EOF === '1') {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('error', () => process.exit(0));
  process.stdin.resume();
}

/** How many times each tool ran, across sessions. */
const runs = {};

function ran(tool, text) {
  runs[tool] = (runs[tool] ?? 0) + 1;
  return { content: [{ type: 'text', text }] };
}

function newServer() {
  const server = new McpServer({ name: 'mcp-gate-ts-upstream', version: '0.0.0' });
  const tool = (name, description, inputSchema, run) => {
    server.registerTool(name, { description, ...(inputSchema ? { inputSchema } : {}) }, async (args) => ran(name, run(args)));
  };
  tool('echo', 'Returns its text.', { text: z.string() }, ({ text }) => text);
  tool('admin_report', "The administrators' report.", null, () => 'admin report: all systems nominal');
  tool('transfer', 'Transfers money.', { amount: z.string(), currency: z.string(), iban: z.string() },
    ({ amount, currency, iban }) => `transferred ${amount} ${currency} to ${iban}`);
  tool('share_folder', 'Shares a folder.', { folder: z.string() }, ({ folder }) => `shared folder ${folder}`);
  tool('deploy', 'Deploys a service.', { service: z.string() }, ({ service }) => `deployed ${service}`);
  tool('delete_file', 'Deletes a file.', { path: z.string() }, ({ path }) => `deleted ${path}`);
  tool('delete_everything', 'Deletes everything.', null, () => 'deleted everything');
  tool('secret_sauce', 'The secret recipe.', null, () => 'the secret sauce is ketchup');
  return server;
}

// Loopback Host validation (DNS rebinding protection) and the JSON body parser, as the SDK sets
// them up for a local server.
const app = createMcpExpressApp({ host: '127.0.0.1' });

const sessions = mcpSessions(newServer, 'ts-upstream.mjs');
app.all('/mcp', sessions);

app.get('/__sessions', (_req, res) => {
  res.json(sessions.sessions());
});

app.get('/__runs', (_req, res) => {
  res.json(runs);
});

listenAndAnnounce(app, { url: '/mcp', runs_url: '/__runs', sessions_url: '/__sessions' }, 'ts-upstream.mjs');
