// MCP server on the official TypeScript SDK (McpServer + StreamableHTTPServerTransport) that
// lists what it is told to, for mcp-gate's response-side tests. No authentication of its own.
//
//   TS_LISTS_ENTRIES='{"tools":[..],"prompts":[..],"resources":[..],"templates":[..]}' node ts-lists-server.mjs
//   (env: TS_SERVER_MAX_SECONDS, default 300; TS_SERVER_EXIT_ON_STDIN_EOF=1 to exit when stdin closes)
//
// Each array holds names. A tool `n` takes no arguments; a prompt `n` has no arguments; a
// resource `n` has the URI `test://r/n`; a template `n` has the URI template `test://t/n/{id}`.
// Stateless Streamable HTTP (a server and transport per POST; answers are SSE streams as the
// SDK writes them); GET and DELETE get 405.
//
// Binds 127.0.0.1 on a port chosen by the OS and prints exactly one JSON line on stdout once it
// listens: {"url":"http://127.0.0.1:PORT/mcp"}. Everything else goes to stderr.

import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';

// stdout carries the ready line only; the process ends by itself (after the time limit, or
// when stdin closes if asked to).
console.log = console.info = console.debug = console.warn = console.error;
setTimeout(() => process.exit(0), Number(process.env.TS_SERVER_MAX_SECONDS ?? 300) * 1000).unref();
if (process.env.TS_SERVER_EXIT_ON_STDIN_EOF === '1') {
  for (const event of ['end', 'error']) process.stdin.on(event, () => process.exit(0));
  process.stdin.resume();
}

const entries = JSON.parse(process.env.TS_LISTS_ENTRIES ?? '{}');
const names = (kind) => (Array.isArray(entries[kind]) ? entries[kind] : []);

function newServer() {
  const server = new McpServer({ name: 'mcp-gate-ts-lists-server', version: '0.0.0' });
  for (const name of names('tools')) {
    server.registerTool(name, { description: `tool ${name}` }, async () => ({ content: [{ type: 'text', text: name }] }));
  }
  for (const name of names('prompts')) {
    server.registerPrompt(name, { description: `prompt ${name}` }, async () => ({
      messages: [{ role: 'user', content: { type: 'text', text: name } }],
    }));
  }
  for (const name of names('resources')) {
    const uri = `test://r/${name}`;
    server.registerResource(name, uri, { description: `resource ${name}` }, async () => ({
      contents: [{ uri, text: name }],
    }));
  }
  for (const name of names('templates')) {
    const template = new ResourceTemplate(`test://t/${name}/{id}`, { list: undefined });
    server.registerResource(name, template, { description: `template ${name}` }, async (uri) => ({
      contents: [{ uri: uri.href, text: name }],
    }));
  }
  return server;
}

const app = createMcpExpressApp({ host: '127.0.0.1' });

app.post('/mcp', async (req, res) => {
  try {
    const server = newServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  } catch (e) {
    console.error(e);
    if (!res.headersSent) {
      res.status(500).json({ jsonrpc: '2.0', id: null, error: { code: -32603, message: 'internal error' } });
    }
  }
});

for (const verb of ['get', 'delete']) {
  app[verb]('/mcp', (_req, res) => {
    res.status(405).set('Allow', 'POST').end();
  });
}

const listener = app.listen(0, '127.0.0.1', () => {
  const { port } = listener.address();
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}/mcp` })}\n`);
});
