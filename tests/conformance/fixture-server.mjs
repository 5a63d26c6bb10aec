// An MCP server (Streamable HTTP, stateful sessions, `/mcp` on 127.0.0.1) with exactly the
// fixtures the server scenarios of @modelcontextprotocol/conformance (0.1.16, suite `active`)
// call: tools, resources, prompts, completion, logging, progress, sampling and elicitation.
// tests/conformance.rs runs the suite against it with and without the layer.
//
//   node fixture-server.mjs <port>        (or PORT=<port> node fixture-server.mjs)
//
// No authentication of its own: the token proxy and the gate in front of it do that. Like any
// local server without auth, it refuses a Host or Origin that is not a loopback name (DNS
// rebinding), whatever the port.

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';

const port = Number(process.argv[2] ?? process.env.PORT);
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node fixture-server.mjs <port>  (or PORT=<port>)');
  process.exit(2);
}

// ---- Content ---------------------------------------------------------------------------------

// A 1x1 red PNG.
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';

// A WAV: 8 kHz, 8-bit mono, 8 samples of silence.
const WAV = (() => {
  const samples = Buffer.alloc(8, 0x80);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + samples.length, 4);
  header.write('WAVEfmt ', 8);
  header.writeUInt32LE(16, 16); // fmt chunk size
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // channels
  header.writeUInt32LE(8000, 24); // sample rate
  header.writeUInt32LE(8000, 28); // byte rate
  header.writeUInt16LE(1, 32); // block align
  header.writeUInt16LE(8, 34); // bits per sample
  header.write('data', 36);
  header.writeUInt32LE(samples.length, 40);
  return Buffer.concat([header, samples]).toString('base64');
})();

const text = (value) => ({ type: 'text', text: value });
const image = () => ({ type: 'image', data: PNG, mimeType: 'image/png' });
const noArguments = { type: 'object', properties: {} };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- Tools -----------------------------------------------------------------------------------

const TOOLS = [
  ['test_simple_text', 'Returns a simple text content', noArguments],
  ['test_image_content', 'Returns an image content (PNG)', noArguments],
  ['test_audio_content', 'Returns an audio content (WAV)', noArguments],
  ['test_embedded_resource', 'Returns an embedded resource', noArguments],
  ['test_multiple_content_types', 'Returns text, image and resource contents', noArguments],
  ['test_tool_with_logging', 'Sends three log notifications while it runs', noArguments],
  ['test_tool_with_progress', 'Reports progress while it runs', noArguments],
  ['test_error_handling', 'Always fails (a tool error result)', noArguments],
  [
    'test_sampling',
    'Asks the client for an LLM completion (sampling)',
    {
      type: 'object',
      properties: { prompt: { type: 'string', description: 'The prompt to send to the LLM' } },
      required: ['prompt'],
    },
  ],
  [
    'test_elicitation',
    'Asks the user for input (elicitation)',
    {
      type: 'object',
      properties: { message: { type: 'string', description: 'The message to show the user' } },
      required: ['message'],
    },
  ],
  ['test_elicitation_sep1034_defaults', 'Elicitation with a default for each primitive type', noArguments],
  ['test_elicitation_sep1330_enums', 'Elicitation with the five enum schema variants', noArguments],
].map(([name, description, inputSchema]) => ({ name, description, inputSchema }));

const ELICIT_DEFAULTS = {
  type: 'object',
  properties: {
    name: { type: 'string', description: 'User name', default: 'John Doe' },
    age: { type: 'integer', description: 'User age', default: 30 },
    score: { type: 'number', description: 'User score', default: 95.5 },
    status: {
      type: 'string',
      description: 'User status',
      enum: ['active', 'inactive', 'pending'],
      default: 'active',
    },
    verified: { type: 'boolean', description: 'Verification status', default: true },
  },
};

const ELICIT_ENUMS = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string',
      oneOf: [
        { const: 'value1', title: 'First Option' },
        { const: 'value2', title: 'Second Option' },
        { const: 'value3', title: 'Third Option' },
      ],
    },
    legacyEnum: {
      type: 'string',
      enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three'],
    },
    untitledMulti: {
      type: 'array',
      items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    },
    titledMulti: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'value1', title: 'First Choice' },
          { const: 'value2', title: 'Second Choice' },
          { const: 'value3', title: 'Third Choice' },
        ],
      },
    },
  },
};

function requireString(args, name) {
  const value = args?.[name];
  if (typeof value !== 'string') {
    throw new McpError(ErrorCode.InvalidParams, `argument "${name}" (string) is required`);
  }
  return value;
}

async function callTool(server, { params }, extra) {
  const args = params.arguments ?? {};
  // Notifications and requests tied to this call go on its own response stream.
  const notify = (method, notificationParams) =>
    extra.sendNotification({ method, params: notificationParams });
  const elicit = async (message, requestedSchema) => {
    if (!server.getClientCapabilities()?.elicitation) {
      return { isError: true, content: [text('The client does not support elicitation.')] };
    }
    return extra.sendRequest(
      { method: 'elicitation/create', params: { message, requestedSchema } },
      ElicitResultSchema,
    );
  };

  switch (params.name) {
    case 'test_simple_text':
      return { content: [text('This is a simple text response for testing.')] };
    case 'test_image_content':
      return { content: [image()] };
    case 'test_audio_content':
      return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
    case 'test_embedded_resource':
      return {
        content: [
          {
            type: 'resource',
            resource: {
              uri: 'test://embedded-resource',
              mimeType: 'text/plain',
              text: 'This is an embedded resource content.',
            },
          },
        ],
      };
    case 'test_multiple_content_types':
      return {
        content: [
          text('Multiple content types test:'),
          image(),
          {
            type: 'resource',
            resource: {
              uri: 'test://mixed-content-resource',
              mimeType: 'application/json',
              text: JSON.stringify({ test: 'data', value: 123 }),
            },
          },
        ],
      };
    case 'test_tool_with_logging': {
      // At level `info`, unless the client asked for less (logging/setLevel, kept by the SDK).
      const log = async (data) => {
        if (!server.isMessageIgnored('info', extra.sessionId)) {
          await notify('notifications/message', { level: 'info', logger: 'fixture', data });
        }
      };
      await log('Tool execution started');
      await sleep(50);
      await log('Tool processing data');
      await sleep(50);
      await log('Tool execution completed');
      return { content: [text('Logging test completed: sent 3 log notifications.')] };
    }
    case 'test_tool_with_progress': {
      const progressToken = extra._meta?.progressToken;
      for (const [i, progress] of [0, 50, 100].entries()) {
        if (i > 0) await sleep(50);
        if (progressToken !== undefined) {
          await notify('notifications/progress', { progressToken, progress, total: 100 });
        }
      }
      return { content: [text('Progress test completed.')] };
    }
    case 'test_error_handling':
      return {
        isError: true,
        content: [text('This tool intentionally returns an error for testing')],
      };
    case 'test_sampling': {
      const prompt = requireString(args, 'prompt');
      if (!server.getClientCapabilities()?.sampling) {
        return { isError: true, content: [text('The client does not support sampling.')] };
      }
      const answer = await extra.sendRequest(
        {
          method: 'sampling/createMessage',
          params: { messages: [{ role: 'user', content: text(prompt) }], maxTokens: 100 },
        },
        CreateMessageResultSchema,
      );
      const reply = answer.content?.type === 'text' ? answer.content.text : JSON.stringify(answer.content);
      return { content: [text(`LLM response: ${reply}`)] };
    }
    case 'test_elicitation': {
      const message = requireString(args, 'message');
      const answer = await elicit(message, {
        type: 'object',
        properties: {
          username: { type: 'string', description: "User's response" },
          email: { type: 'string', description: "User's email address" },
        },
        required: ['username', 'email'],
      });
      if (answer.isError) return answer;
      return {
        content: [
          text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`),
        ],
      };
    }
    case 'test_elicitation_sep1034_defaults':
    case 'test_elicitation_sep1330_enums': {
      const defaults = params.name === 'test_elicitation_sep1034_defaults';
      const answer = await elicit(
        defaults ? 'Please review your details (every field has a default)' : 'Please choose options',
        defaults ? ELICIT_DEFAULTS : ELICIT_ENUMS,
      );
      if (answer.isError) return answer;
      return {
        content: [
          text(
            `Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`,
          ),
        ],
      };
    }
    default:
      throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${params.name}`);
  }
}

// ---- Resources -------------------------------------------------------------------------------

const RESOURCES = [
  {
    uri: 'test://static-text',
    name: 'static-text',
    description: 'A static text resource',
    mimeType: 'text/plain',
  },
  {
    uri: 'test://static-binary',
    name: 'static-binary',
    description: 'A static binary resource (PNG)',
    mimeType: 'image/png',
  },
  {
    uri: 'test://watched-resource',
    name: 'watched-resource',
    description: 'A resource to subscribe to',
    mimeType: 'text/plain',
  },
];

const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

function readResource(uri) {
  switch (uri) {
    case 'test://static-text':
      return { uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' };
    case 'test://static-binary':
      return { uri, mimeType: 'image/png', blob: PNG };
    case 'test://watched-resource':
      return { uri, mimeType: 'text/plain', text: 'The watched resource.' };
  }
  const templated = TEMPLATE.exec(uri);
  if (templated) {
    const id = decodeURIComponent(templated[1]);
    return {
      uri,
      mimeType: 'application/json',
      text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
    };
  }
  throw new McpError(-32002, `Resource not found: ${uri}`, { uri });
}

// ---- Prompts ---------------------------------------------------------------------------------

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with two arguments',
    arguments: [
      { name: 'arg1', description: 'First test argument', required: true },
      { name: 'arg2', description: 'Second test argument', required: true },
    ],
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt that embeds a resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
  },
  { name: 'test_prompt_with_image', description: 'A prompt with an image' },
];

function getPrompt({ name, arguments: args }) {
  const user = (content) => ({ role: 'user', content });
  switch (name) {
    case 'test_simple_prompt':
      return { messages: [user(text('This is a simple prompt for testing.'))] };
    case 'test_prompt_with_arguments': {
      const [arg1, arg2] = [requireString(args, 'arg1'), requireString(args, 'arg2')];
      return { messages: [user(text(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`))] };
    }
    case 'test_prompt_with_embedded_resource': {
      const uri = requireString(args, 'resourceUri');
      return {
        messages: [
          user({
            type: 'resource',
            resource: { uri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
          }),
          user(text('Please process the embedded resource above.')),
        ],
      };
    }
    case 'test_prompt_with_image':
      return { messages: [user(image()), user(text('Please analyze the image above.'))] };
    default:
      throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${name}`);
  }
}

const COMPLETIONS = ['paris', 'park', 'party', 'test', 'testing', 'tested'];

// ---- One MCP server per session --------------------------------------------------------------

function mcpServer() {
  const server = new Server(
    { name: 'mcp-gate-conformance-fixtures', version: '1.0.0' },
    {
      capabilities: {
        tools: {},
        resources: { subscribe: true },
        prompts: {},
        logging: {},
        completions: {},
      },
    },
  );
  const subscriptions = new Set();

  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, (request, extra) => callTool(server, request, extra));

  server.setRequestHandler(ListResourcesRequestSchema, () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, () => ({
    resourceTemplates: [
      {
        uriTemplate: 'test://template/{id}/data',
        name: 'template-data',
        description: 'Data for an id',
        mimeType: 'application/json',
      },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, ({ params }) => ({
    contents: [readResource(params.uri)],
  }));
  server.setRequestHandler(SubscribeRequestSchema, ({ params }) => {
    subscriptions.add(params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, ({ params }) => {
    subscriptions.delete(params.uri);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, ({ params }) => getPrompt(params));

  server.setRequestHandler(CompleteRequestSchema, ({ params }) => {
    const known =
      params.ref.type === 'ref/prompt' &&
      params.ref.name === 'test_prompt_with_arguments' &&
      ['arg1', 'arg2'].includes(params.argument.name);
    const values = known ? COMPLETIONS.filter((v) => v.startsWith(params.argument.value)) : [];
    return { completion: { values, total: values.length, hasMore: false } };
  });
  // logging/setLevel: handled by the SDK's Server (the `logging` capability).
  return server;
}

// ---- HTTP ------------------------------------------------------------------------------------

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

/** Whether `host` (a Host header, or an Origin's host) names a loopback interface, any port. */
function isLoopback(host) {
  try {
    return LOOPBACK.has(new URL(`http://${host}`).hostname.toLowerCase());
  } catch {
    return false;
  }
}

function refuse(res, status, message) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks).toString('utf8');
  return body ? JSON.parse(body) : undefined;
}

const sessions = new Map();

async function handle(req, res) {
  if (new URL(req.url, 'http://localhost').pathname !== '/mcp') {
    return refuse(res, 404, 'Not found');
  }
  // DNS rebinding protection: a loopback Host, and a loopback Origin when there is one.
  const origin = req.headers.origin;
  const originHost = origin && URL.canParse(origin) ? new URL(origin).host : '';
  if (!isLoopback(req.headers.host ?? '') || (origin !== undefined && !isLoopback(originHost))) {
    return refuse(res, 403, 'Forbidden: the Host or Origin is not a loopback name');
  }

  let body;
  if (req.method === 'POST') {
    try {
      body = await readJson(req);
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      const error = { code: -32700, message: 'Parse error' };
      return res.end(JSON.stringify({ jsonrpc: '2.0', error, id: null }));
    }
  }

  const id = req.headers['mcp-session-id'];
  if (id) {
    const transport = sessions.get(id);
    if (!transport) return refuse(res, 404, 'Session not found');
    return transport.handleRequest(req, res, body);
  }
  if (req.method !== 'POST' || !isInitializeRequest(body)) {
    return refuse(res, 400, 'Bad Request: no session ID, and not an initialize request');
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (sessionId) => sessions.set(sessionId, transport),
  });
  transport.onclose = () => {
    if (transport.sessionId) sessions.delete(transport.sessionId);
  };
  await mcpServer().connect(transport);
  return transport.handleRequest(req, res, body);
}

http
  .createServer((req, res) => {
    handle(req, res).catch((error) => {
      console.error('fixture-server:', error);
      if (!res.headersSent) refuse(res, 500, 'Internal server error');
      else res.end();
    });
  })
  .listen(port, '127.0.0.1', () => console.log(`fixture-server listening on http://127.0.0.1:${port}/mcp`));
