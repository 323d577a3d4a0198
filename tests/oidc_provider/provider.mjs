// A real OpenID provider for Boxcar's single sign-on tests: panva's oidc-provider (an OpenID
// Certified OP), installed by the test into .cache/oidc-provider (tests/helpers.npm_tool).
//
// One confidential client (CLIENT_ID / CLIENT_SECRET, REDIRECT_URI), the accounts of ACCOUNTS (a
// JSON object: each login, which is also its sub, to its preferred_username; any password), the
// built-in development login and consent pages
// (devInteractions), authorization code + PKCE S256 only. It listens on 127.0.0.1 on a free port
// and prints "issuer <url>" on its first stdout line once it serves. Plain http: oidc-provider
// takes an http issuer as given; only the implicit flow insists on https redirect URIs.
import http from 'node:http';
import { createRequire } from 'node:module';

const require = createRequire(process.env.OIDC_PROVIDER_MODULES + '/');
const { default: Provider } = await import(require.resolve('oidc-provider'));

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const accounts = JSON.parse(env('ACCOUNTS'));

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: env('CLIENT_ID'),
    client_secret: env('CLIENT_SECRET'),
    redirect_uris: [env('REDIRECT_URI')],
    grant_types: ['authorization_code'],
    response_types: ['code'],
  }],
  claims: { openid: ['sub'], profile: ['preferred_username', 'name'], email: ['email'] },
  async findAccount(ctx, sub) {
    if (!Object.hasOwn(accounts, sub)) return undefined; // only the test's accounts exist here
    return {
      accountId: sub,
      async claims() {
        return { sub, preferred_username: accounts[sub], name: 'Test User', email: `${sub}@example.test` };
      },
    };
  },
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['boxcar-test-only-cookie-key'] },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));

server.on('request', provider.callback());
console.log(`issuer ${issuer}`);
