"""OAuth 2.0 for the hub: clients, JWT access tokens (RFC 9068), trusted external issuers.

authlib runs the authorization server's endpoints (token, introspection, revocation);
joserfc signs and verifies the tokens with the hub's Ed25519 key.
"""

from lucid_hub.auth.clients import SCOPES, ClientRecord, ClientRegistry
from lucid_hub.auth.tokens import Principal, TokenService

__all__ = ["SCOPES", "ClientRecord", "ClientRegistry", "Principal", "TokenService"]
