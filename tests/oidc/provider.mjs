// node-oidc-provider (OpenID Certified) for the sign-in tests. Its own development login and consent pages
// (devInteractions: any login name is the subject, any password) and the device flow (RFC 8628) are on.
//
// Usage: node provider.mjs CONFIG.json
// CONFIG: {"clients": [...client metadata...], "users": "path/to/users.json"}; users.json maps a subject
// to its claims ({"alice": {"email": ..., "groups": [...]}}) and is read at every sign-in, so a test can
// change someone's groups between two sign-ins. The provider listens on 127.0.0.1 on a free port and prints
// one line, `ready ISSUER`, once it answers.
import { readFileSync } from 'node:fs';
import http from 'node:http';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

function account(sub) {
  const users = JSON.parse(readFileSync(config.users, 'utf8'));
  const claims = users[sub] ?? {};
  return {
    accountId: sub,
    async claims() {
      return { sub, preferred_username: sub, ...claims };
    },
  };
}

let handler = (req, res) => { res.statusCode = 503; res.end(); };
const server = http.createServer((req, res) => handler(req, res));
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: config.clients,
    findAccount: async (ctx, sub) => account(sub),
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username'],
      groups: ['groups'],
    },
    scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'],
    // The groups go into the ID token itself, as Azure AD, Okta and Keycloak (with a mapper) put them.
    conformIdTokenClaims: false,
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      revocation: { enabled: true },
    },
    pkce: { required: () => true },
    ttl: {
      // A client named "short-lived" gets ID tokens that expire in two seconds (the expiry test's).
      IdToken: (ctx, token, client) => (client && client.clientId === 'short-lived' ? 2 : 3600),
    },
  });
  provider.proxy = false;
  handler = provider.callback();
  console.log(`ready ${issuer}`);
});

process.on('SIGTERM', () => server.close(() => process.exit(0)));
