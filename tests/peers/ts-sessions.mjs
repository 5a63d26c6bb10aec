// Stateful streamable HTTP for the TS SDK test servers (ts-server.mjs, ts-upstream.mjs): one
// `McpServer` per session, as the SDK's own examples serve it, and the ready line.
//
// `mcpSessions(newServer)` is an express handler for the MCP path: `initialize` opens a session
// (Mcp-Session-Id) on a fresh server from `newServer()`; a request naming a known session goes
// to its transport; anything else is answered 400 (no session) or 404 (unknown session). The
// handler's `sessions()` says how many sessions were opened and how many are open.
// `listenAndAnnounce(app, paths)` binds 127.0.0.1 on a free port and prints exactly one JSON
// line on stdout: each of `paths` ({key: "/path"}) as a full URL.

import { randomUUID } from 'node:crypto';

import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

export function mcpSessions(newServer, name) {
  /** Open sessions: id -> transport. */
  const transports = new Map();
  /** Sessions opened since the start. */
  let opened = 0;
  const handler = async (req, res) => {
    try {
      const sessionId = req.get('mcp-session-id');
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        const isInitialize = req.method === 'POST' && req.body?.method === 'initialize';
        if (sessionId || !isInitialize) {
          res.status(sessionId ? 404 : 400).json({
            jsonrpc: '2.0',
            id: null,
            error: { code: -32000, message: sessionId ? 'Session not found' : 'No session; send initialize first' },
          });
          return;
        }
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => { transports.set(id, transport); opened += 1; },
          onsessionclosed: (id) => { transports.delete(id); },
        });
        transport.onclose = () => {
          if (transport.sessionId) transports.delete(transport.sessionId);
        };
        await newServer().connect(transport);
      }
      await transport.handleRequest(req, res, req.body);
    } catch (e) {
      console.error(`${name}: request failed`, e);
      if (!res.headersSent) {
        res.status(500).json({ jsonrpc: '2.0', id: null, error: { code: -32603, message: 'internal error' } });
      }
    }
  };
  /** How many sessions were opened since the start, and how many are open now. */
  handler.sessions = () => ({ opened, open: transports.size });
  return handler;
}

export function listenAndAnnounce(app, paths, name) {
  const listener = app.listen(0, '127.0.0.1', () => {
    const { port } = listener.address();
    const urls = Object.fromEntries(Object.entries(paths).map(([key, path]) => [key, `http://127.0.0.1:${port}${path}`]));
    process.stdout.write(`${JSON.stringify(urls)}\n`);
  });
  listener.on('error', (e) => {
    console.error(`${name}: listen failed`, e);
    process.exit(1);
  });
}
