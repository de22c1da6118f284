"""Dynamic client registration (docs/auth.md, "Clients that register themselves"): OAuth 2.0
Dynamic Client Registration (RFC 7591, authlib's endpoint) and SEPA's registration and token
request, which SEPA's clients (sepy, sepa-js) send unchanged.

An operator switches it on (`LUCID_DCR`): `token` takes registrations that carry the
operator's initial access token (RFC 7591 §3, as a bearer token); `open` takes any (a closed
network's SEPA applications). A registered client gets the groups `LUCID_DCR_GROUPS` and the
scopes it asked for among `LUCID_DCR_SCOPES`: the same groups and scopes as any client, so
access conditions decide what it may read and write. Each identity registers once (SEPA's
`client_identity`, RFC 7591's `software_id`): a second registration is 409.
"""

from __future__ import annotations

import hmac
import threading
from pathlib import Path
from typing import Any

from authlib.oauth2.rfc7591 import ClientMetadataClaims, ClientRegistrationEndpoint
from authlib.oauth2.rfc7591.errors import InvalidClientMetadataError

from lucid_hub.auth.clients import SCOPES, ClientRecord, ClientRegistry
from lucid_hub.config import Settings
from lucid_hub.errors import AuthenticationError, ConfigError, ConflictError, ForbiddenError, InputError

MODES = ("off", "token", "open")
IDENTITY_PREFIX = "registered: "  # a registered client's name: its identity, unique


def initial_token(settings: Settings) -> str:
    """The operator's initial access token (`LUCID_DCR_TOKEN` or `_TOKEN_FILE`); "" when the
    mode needs none. ConfigError for a token mode without one of at least 16 characters."""
    if settings.dcr != "token":
        return ""
    token = settings.dcr_token
    if settings.dcr_token_file:
        try:
            token = Path(settings.dcr_token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"LUCID_DCR_TOKEN_FILE cannot be read: {exc.strerror}") from None
    if len(token) < 16:
        raise ConfigError("LUCID_DCR=token needs an initial access token of at least 16 characters "
                          "(LUCID_DCR_TOKEN or LUCID_DCR_TOKEN_FILE)")
    return token


class Registrations:
    """Who may register, and the clients they become."""

    def __init__(self, settings: Settings, clients: ClientRegistry) -> None:
        self.settings = settings
        self.clients = clients
        self._lock = threading.Lock()
        self.token = initial_token(settings)
        self.groups = [g for g in settings.dcr_groups.replace(",", " ").split() if g]
        self.scopes = [s for s in settings.dcr_scopes.replace(",", " ").split() if s]
        unknown = [s for s in self.scopes if s not in SCOPES]
        if unknown or "admin" in self.scopes:
            raise ConfigError(f"LUCID_DCR_SCOPES may name {', '.join(s for s in SCOPES if s != 'admin')}; "
                              f"not {(unknown or ['admin'])[0]}")

    def admit(self, authorization: str) -> bool:
        """Whether a registration with this Authorization header may register."""
        if self.settings.dcr == "off":
            raise ForbiddenError("this hub takes no client registrations (LUCID_DCR is off); ask its operator "
                                 "for a client")
        if self.settings.dcr == "open":
            return True
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("registering needs the operator's initial access token: Authorization: "
                                      "Bearer <token> (RFC 7591 §3)", error="invalid_token")
        if not hmac.compare_digest(token.strip().encode(), self.token.encode()):
            raise AuthenticationError("the initial access token is not this hub's", error="invalid_token")
        return True

    def granted(self, asked: str | None) -> list[str]:
        """The scopes a registration gets: those it asked for that registrations may have (all of
        them when it asked for none)."""
        wanted = asked.split() if asked else self.scopes
        return [s for s in wanted if s in self.scopes]

    def register(self, identity: str, scopes: list[str]) -> tuple[ClientRecord, str]:
        """The new client of `identity` and its secret; 409 when the identity registered before."""
        identity = " ".join(identity.split())
        if not identity or len(identity) > 200:
            raise InputError("a registration names its identity: 1-200 characters")
        name = IDENTITY_PREFIX + identity
        if not scopes:
            raise InputError(f"none of the scopes asked for may be registered for; this hub gives "
                             f"{' '.join(self.scopes)}")
        with self._lock:  # the same identity twice at once: one registration (in this process)
            if any(c.name == name for c in self.clients.list()):
                raise ConflictError(f"{identity!r} registered before; each identity registers once (its operator "
                                    "can remove the client to let it register again)")
            return self.clients.create(name, groups=self.groups, scopes=scopes)


class Endpoint(ClientRegistrationEndpoint):
    """RFC 7591's endpoint (authlib), on `Registrations`: client credentials only."""

    def __init__(self, registrations: Registrations) -> None:
        super().__init__(claims_classes=[ClientMetadataClaims])
        self.registrations = registrations
        self._made: dict[int, tuple[ClientRecord, str]] = {}

    def authenticate_token(self, request: Any) -> Any:
        return self.registrations.admit(request.headers.get("Authorization", "")) or None

    def get_server_metadata(self) -> dict[str, Any]:
        return {"grant_types_supported": ["client_credentials"], "response_types_supported": [],
                "scopes_supported": list(SCOPES),  # asked for: validated; granted: `granted`
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"]}

    def extract_client_metadata(self, request: Any) -> dict[str, Any]:
        metadata: dict[str, Any] = super().extract_client_metadata(request)
        grants = metadata.get("grant_types") or ["client_credentials"]
        if grants != ["client_credentials"]:
            raise InvalidClientMetadataError("this hub issues client credentials only: grant_types "
                                             "[\"client_credentials\"]")
        if metadata.get("response_types"):
            raise InvalidClientMetadataError("response_types: this hub has no authorization endpoint")
        metadata["grant_types"] = ["client_credentials"]
        metadata["scope"] = " ".join(self.registrations.granted(metadata.get("scope")))
        identity = metadata.get("software_id") or metadata.get("client_name")
        if not isinstance(identity, str) or not identity.strip():
            raise InvalidClientMetadataError("name the client: client_name (or software_id, its identity)")
        record, secret = self.registrations.register(identity, metadata["scope"].split())
        self._made[id(request)] = (record, secret)
        return metadata

    def generate_client_id(self, request: Any) -> str:
        return self._made[id(request)][0].client_id

    def generate_client_secret(self, request: Any) -> str:
        return self._made[id(request)][1]

    def save_client(self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any) -> ClientRecord:
        record, _secret = self._made.pop(id(request))
        return record

    def resolve_public_key(self, request: Any) -> None:
        return None  # software statements are not taken
