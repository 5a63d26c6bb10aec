// The TypeScript SDK's stateless pattern, shared by the peers that serve MCP without sessions:
// a fresh server and transport per POST (a stateless transport may not be reused, and a server
// serves one transport at a time), answers as JSON.

import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

/** An Express handler serving each POST with a new server from `buildServer()`. */
export function statelessHandler(buildServer) {
  return async (req, res) => {
    const server = buildServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => {
      transport.close().catch(() => {});
      server.close().catch(() => {});
    });
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, req.body);
    } catch (error) {
      if (!res.headersSent) {
        res.status(500).json({
          jsonrpc: '2.0',
          error: { code: -32603, message: `internal error: ${error.message}` },
          id: null,
        });
      }
    }
  };
}
