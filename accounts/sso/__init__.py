"""Single sign-on with the organisation's OpenID Connect provider (docs/sso.md).

provider: discovery and signing keys, cached; verify: the one ID-token check that the portal's sign-in and the
API's token exchange share; services: matching or creating the user by issuer and subject, memberships from
the groups claim; backend: loads the users it signed in.
"""
