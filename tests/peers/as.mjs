// Test OAuth 2 authorization server for mcp-gate integration tests, built on oidc-provider.
//
//   node as.mjs            (all configuration through env, see README.md)
//
// Prints exactly one JSON line on stdout once it is listening, logs everything else to stderr,
// binds 127.0.0.1 only and exits by itself after AS_MAX_SECONDS.

import { randomBytes, generateKeyPairSync, createPrivateKey } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync, renameSync } from 'node:fs';
import http from 'node:http';

// oidc-provider prints notices with console.info (stdout) and warnings at import time; keep
// stdout for the single ready line only. Hence the dynamic import below.
for (const k of ['log', 'info', 'debug']) console[k] = (...a) => console.error(...a);
const { default: Provider, errors } = await import('oidc-provider');

const env = process.env;
const PORT = Number(env.AS_PORT ?? 0);
const ALG = (env.AS_ALG ?? 'ES256').toUpperCase();
const ROTATE = env.AS_ROTATE ?? '';
const MAX_SECONDS = Number(env.AS_MAX_SECONDS ?? 600);
const TOKEN_TTL = Number(env.AS_TOKEN_TTL ?? 300);
const SCOPES = (env.AS_SCOPES ?? 'mcp:read mcp:write mcp:admin').split(/\s+/).filter(Boolean);
const KEYS_FILE = env.AS_KEYS_FILE;
const DEFAULT_RESOURCE = env.AS_DEFAULT_RESOURCE || undefined;
const STRICT_AUTH = env.AS_LAX_CLIENT_AUTH !== '1';
// AS_DPOP=1: DPoP (RFC 9449) on, explicitly, with ES256 proofs: a token request that carries a
// `DPoP` proof gets a DPoP-bound token (`cnf.jkt` in the JWT and in introspection). Without it
// the provider's own default applies, as before.
const DPOP = env.AS_DPOP === '1';

if (!['ES256', 'RS256'].includes(ALG)) {
  console.error(`as.mjs: AS_ALG must be ES256 or RS256, got ${ALG}`);
  process.exit(2);
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

function newKey(alg) {
  const kid = `${alg.toLowerCase()}-${randomBytes(4).toString('hex')}`;
  const { privateKey } = alg === 'ES256'
    ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
}

function inferAlg(jwk) {
  if (jwk.alg) return jwk.alg;
  if (jwk.kty === 'EC' && jwk.crv === 'P-256') return 'ES256';
  if (jwk.kty === 'RSA') return 'RS256';
  return undefined;
}

function saveKeys(file, jwks) {
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(jwks, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, file);
}

let jwks;
if (KEYS_FILE && existsSync(KEYS_FILE)) {
  jwks = JSON.parse(readFileSync(KEYS_FILE, 'utf8'));
  if (!Array.isArray(jwks?.keys)) throw new Error(`${KEYS_FILE}: not a JWK set`);
  // Validate every key is a usable private key.
  for (const k of jwks.keys) createPrivateKey({ key: k, format: 'jwk' });
} else {
  jwks = { keys: [newKey('ES256'), newKey('RS256')] };
}
// Keep one key of each family, so AS_ALG can change between runs that share a keys file.
for (const alg of ['ES256', 'RS256']) {
  if (!jwks.keys.some((k) => inferAlg(k) === alg)) jwks.keys.push(newKey(alg));
}
if (ROTATE === '1') {
  // New key first; the old ones stay published so tokens they signed still verify.
  jwks.keys.unshift(newKey(ALG));
} else if (ROTATE === 'replace') {
  // New key first and the old keys of this alg dropped: tokens they signed no longer verify.
  jwks.keys = [newKey(ALG), ...jwks.keys.filter((k) => inferAlg(k) !== ALG)];
}
if (KEYS_FILE) saveKeys(KEYS_FILE, jwks);

const signingKey = jwks.keys.find((k) => inferAlg(k) === ALG);
if (!signingKey.kid) throw new Error('signing key has no kid');
// Make sure the provider sees `alg` on every key (the keystore matches on it).
jwks.keys = jwks.keys.map((k) => ({ ...k, alg: inferAlg(k) }));

// ---------------------------------------------------------------------------------------------
// HTTP server first (so that port 0 resolves before the issuer is built)
// ---------------------------------------------------------------------------------------------

const server = http.createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(PORT, '127.0.0.1', resolve);
});
const port = server.address().port;
const issuer = `http://127.0.0.1:${port}`;

// ---------------------------------------------------------------------------------------------
// Provider
// ---------------------------------------------------------------------------------------------

const SECRET = 'mcp-client-secret';
const scopeString = SCOPES.join(' ');
const ccClient = (client_id, client_secret, method) => ({
  client_id,
  client_secret,
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  token_endpoint_auth_method: method,
  scope: scopeString,
  authorization_details_types: ['mcp_tool'],
});

// A resource on this machine: http or https (a gateway terminating TLS) on loopback.
function isLoopbackHttp(uri) {
  const u = URL.parse(uri);
  return !!u && (u.protocol === 'http:' || u.protocol === 'https:')
    && (u.hostname === '127.0.0.1' || u.hostname === 'localhost');
}

const stringArray = (v) => Array.isArray(v) && v.every((x) => typeof x === 'string');

const provider = new Provider(issuer, {
  clients: [
    ccClient('mcp-client', SECRET, 'client_secret_basic'),
    ccClient('mcp-client-post', SECRET, 'client_secret_post'),
    ccClient('mcp-client-opaque', SECRET, 'client_secret_basic'),
    ccClient('mcp-gateway', 'mcp-gateway-secret', 'client_secret_basic'),
  ],
  jwks,
  scopes: ['openid', ...SCOPES],
  ttl: { ClientCredentials: TOKEN_TTL },
  cookies: { keys: [randomBytes(16).toString('hex')] },
  // Every token carries the client as its subject (the JWT format already does; this adds it to
  // introspection responses of opaque tokens too).
  extraTokenClaims: async (_ctx, token) => (token.kind === 'ClientCredentials' ? { sub: token.clientId } : undefined),
  ...(DPOP ? { enabledJWA: { dPoPSigningAlgValues: ['ES256'] } } : {}),
  features: {
    ...(DPOP ? { dPoP: { enabled: true } } : {}),
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: {
      enabled: true,
      allowedPolicy: async (_ctx, client) => client.clientId === 'mcp-gateway',
    },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => DEFAULT_RESOURCE,
      useGrantedResource: async () => false,
      getResourceServerInfo: async (_ctx, resource, client) => {
        if (!isLoopbackHttp(resource)) {
          throw new errors.InvalidTarget('only http(s)://127.0.0.1:* and http(s)://localhost:* resources are served by this test AS');
        }
        const opaque = client.clientId === 'mcp-client-opaque';
        return {
          scope: scopeString,
          audience: resource,
          accessTokenTTL: TOKEN_TTL,
          accessTokenFormat: opaque ? 'opaque' : 'jwt',
          ...(opaque ? {} : { jwt: { sign: { alg: ALG, kid: signingKey.kid } } }),
        };
      },
    },
    richAuthorizationRequests: {
      enabled: true,
      types: {
        mcp_tool: {
          validate: async (_ctx, detail) => {
            for (const f of ['tools', 'actions', 'locations']) {
              if (detail[f] !== undefined && !stringArray(detail[f])) {
                throw new errors.InvalidAuthorizationDetails(`mcp_tool.${f} must be an array of strings`);
              }
            }
          },
        },
      },
      authorizationDetailsForGrantSource: async (_ctx, source) => source.rar,
      authorizationDetailsForAccessToken: async (ctx, _token, source) => {
        if (ctx.oidc.params.authorization_details !== undefined) {
          return JSON.parse(ctx.oidc.params.authorization_details);
        }
        return source?.rar;
      },
      authorizationDetailsForIntrospection: async (_ctx, token) => token.rar,
    },
  },
});

for (const ev of ['server_error', 'grant.error', 'introspection.error', 'revocation.error']) {
  provider.on(ev, (_ctx, err) => console.error(`as.mjs ${ev}: ${err.name}: ${err.message} ${err.error_description ?? ''}`));
}

// ---------------------------------------------------------------------------------------------
// Test hooks and discovery alias
// ---------------------------------------------------------------------------------------------

const stats = { jwks_fetches: 0, token_requests: 0, introspections: 0 };
const JWKS_PATH = new URL(`${issuer}/jwks`).pathname;

provider.use(async (ctx, next) => {
  if (ctx.method === 'GET' && ctx.path === '/__stats') {
    ctx.set('cache-control', 'no-store');
    ctx.body = stats;
    return;
  }
  if (ctx.method === 'POST' && ctx.path === '/__stats/reset') {
    for (const k of Object.keys(stats)) stats[k] = 0;
    ctx.body = stats;
    return;
  }
  if (ctx.method === 'GET' && ctx.path === JWKS_PATH) stats.jwks_fetches += 1;
  if (ctx.method === 'POST' && ctx.path === '/token') stats.token_requests += 1;
  if (ctx.method === 'POST' && ctx.path === '/token/introspection') stats.introspections += 1;
  // RFC 8414 metadata: same document as OIDC discovery.
  if (ctx.path === '/.well-known/oauth-authorization-server') {
    ctx.path = '/.well-known/openid-configuration';
  }
  await next();
  // oidc-provider accepts client_secret_basic and client_secret_post interchangeably for any
  // secret-based client. Make the token endpoint honour each client's registered method, so a
  // test can tell which one a client used. Koa sends the response only after this returns, so
  // replacing it here means the (already stored) token is never handed out.
  if (STRICT_AUTH && ctx.method === 'POST' && ctx.path === '/token' && ctx.oidc?.client) {
    const used = ctx.oidc.params?.client_secret ? 'client_secret_post'
      : /^basic /i.test(ctx.get('authorization')) ? 'client_secret_basic' : undefined;
    const registered = ctx.oidc.client.clientAuthMethod;
    if (used && used !== registered) {
      console.error(`as.mjs: rejected ${used} for ${ctx.oidc.client.clientId} (registered ${registered})`);
      ctx.status = 401;
      ctx.set('cache-control', 'no-store');
      if (used === 'client_secret_basic') ctx.set('www-authenticate', `Basic realm="${issuer}"`);
      ctx.body = {
        error: 'invalid_client',
        error_description: `client authentication failed: this client must use ${registered}`,
      };
    }
  }
});

server.on('request', provider.callback());

process.stdout.write(`${JSON.stringify({
  issuer,
  jwks_uri: `${issuer}${JWKS_PATH}`,
  token_endpoint: `${issuer}/token`,
  introspection_endpoint: `${issuer}/token/introspection`,
  kid: signingKey.kid,
  alg: ALG,
})}\n`);

const stop = (code) => {
  server.close();
  process.exit(code);
};
setTimeout(() => {
  console.error(`as.mjs: AS_MAX_SECONDS=${MAX_SECONDS} elapsed, exiting`);
  stop(0);
}, MAX_SECONDS * 1000);
if (env.AS_EXIT_ON_STDIN_EOF === '1') {
  // Lets a test harness that holds our stdin pipe make sure we die with it.
  process.stdin.on('end', () => stop(0));
  process.stdin.on('error', () => stop(0));
  process.stdin.resume();
}
process.on('SIGTERM', () => stop(0));
process.on('SIGINT', () => stop(0));
