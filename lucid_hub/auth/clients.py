"""OAuth clients of partners, created by admins; secrets (256 random bits) are stored as salted hashes."""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from sqlalchemy import select
from werkzeug.security import check_password_hash, generate_password_hash

from lucid_hub.db.models import OAuthClient
from lucid_hub.db.session import Database
from lucid_hub.errors import InputError, NotFoundError
from lucid_hub.networks import check_prefix

SCOPES = ("graphs:read", "graphs:write", "hub:subscribe", "admin")
# Claims of the hub's own tokens: no client attribute may take their names.
RESERVED_CLAIMS = frozenset({"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "scope", "client_id", "azp", "groups",
                             "name", "attributes", "cnf", "act"})
AUTH_METHODS = ("client_secret_basic", "client_secret_post")
# How a client secret is kept: a salted PBKDF2-HMAC-SHA256 of one round. The hub makes every
# secret itself, 256 random bits (`create`), which no stretching makes harder to guess; werkzeug's
# default (scrypt, about 0.1-0.3 s of CPU and 32 MiB a check) only made every token request that
# costly, for partners and for a flood of wrong secrets alike. Hashes made before (scrypt) still
# verify: check_password_hash reads the method from the hash. Admin passwords, which people
# choose, keep the slow default (auth/admins.py).
SECRET_HASH_METHOD = "pbkdf2:sha256:1"  # noqa: S105 (a hashing method, not a password)
# A hash to check against when the client does not exist, so that the answer takes as long.
_DUMMY_HASH = generate_password_hash("not a secret", method=SECRET_HASH_METHOD)


@dataclass(frozen=True)
class ClientRecord:
    """A client as authlib's ClientMixin sees it (client credentials grant only)."""

    client_id: str
    name: str
    secret_hash: str
    groups: tuple[str, ...]
    scopes: tuple[str, ...]
    callback_prefixes: tuple[str, ...]
    created_at: datetime
    disabled: bool = False
    attributes: tuple[tuple[str, str], ...] = ()  # (claim, value): in its tokens, for requiresAttribute

    # --- authlib ClientMixin -------------------------------------------------------
    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        return None

    def get_allowed_scope(self, scope: str | None) -> str:
        """The requested scopes this client may have (all of its scopes when none are asked)."""
        if not scope:
            return " ".join(self.scopes)
        return " ".join(s for s in scope.split() if s in self.scopes)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return False

    def check_client_secret(self, client_secret: str) -> bool:
        return not self.disabled and check_password_hash(self.secret_hash, client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in AUTH_METHODS

    def check_response_type(self, response_type: str) -> bool:
        return False

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "client_credentials" and not self.disabled

    def to_json(self) -> dict[str, Any]:
        """What the admin API shows of a client (never the secret or its hash)."""
        return {"client_id": self.client_id, "name": self.name, "groups": list(self.groups),
                "attributes": [f"{claim}={value}" for claim, value in self.attributes],
                "scopes": list(self.scopes), "callback_prefixes": list(self.callback_prefixes),
                "created_at": self.created_at.isoformat(), "disabled": self.disabled}


def _record(row: OAuthClient) -> ClientRecord:
    attributes = tuple(tuple(unquote(part) for part in word.split("=", 1)) for word in (row.attributes or "").split())
    return ClientRecord(row.client_id, row.name, row.secret_hash, tuple(row.groups.split()),
                        tuple(row.scopes.split()), tuple(row.callback_prefixes.split()),
                        row.created_at, row.disabled, attributes)  # type: ignore[arg-type]


def attributes_of(values: list[str]) -> list[tuple[str, str]]:
    """A client's attributes from "claim=value" words; InputError for one that is not."""
    out = []
    for value in values:
        claim, sep, wanted = value.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", claim) or not 0 < len(wanted) <= 256:
            raise InputError(f"attribute {value[:80]!r} must be claim=value (a claim name of letters, digits, '_', "
                             "'.', ':', '-'; a value of 1-256 characters)")
        if claim in RESERVED_CLAIMS:
            raise InputError(f"{claim} is a claim the hub sets itself; name the attribute otherwise")
        out.append((claim, wanted))
    return out


def _check_words(kind: str, values: list[str]) -> list[str]:
    for value in values:
        if not value or any(c.isspace() for c in value) or len(value) > 255:
            raise InputError(f"{kind} {value!r}: must be 1-255 characters without spaces")
    return values


class ClientRegistry:
    """Create, find, authenticate and delete OAuth clients."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, name: str, *, groups: list[str] | None = None, scopes: list[str] | None = None,
               callback_prefixes: list[str] | None = None,
               attributes: list[str] | None = None) -> tuple[ClientRecord, str]:
        """A new client and its secret (shown once; only its hash is kept)."""
        if not name.strip() or len(name) > 255:
            raise InputError("a client needs a name of 1-255 characters")
        scopes = _check_words("scope", scopes if scopes is not None else ["graphs:read", "hub:subscribe"])
        unknown = [s for s in scopes if s not in SCOPES]
        if unknown:
            raise InputError(f"unknown scope {unknown[0]!r}; known: {', '.join(SCOPES)}")
        prefixes = _check_words("callback prefix", callback_prefixes or [])
        for prefix in prefixes:
            check_prefix(prefix)
        secret = secrets.token_urlsafe(32)
        group_list = _check_words("group", groups or [])
        if any(g.startswith("urn:lucid-hub:") for g in group_list):
            raise InputError("groups of the hub's own namespace (urn:lucid-hub:) are the hub's to give; use "
                             "attributes for a client's claims")
        pairs = attributes_of(attributes or [])
        row = OAuthClient(client_id=f"lc-{secrets.token_hex(8)}", name=name.strip(),
                          attributes=" ".join(f"{quote(c, safe='')}={quote(v, safe='')}" for c, v in pairs),
                          secret_hash=generate_password_hash(secret, method=SECRET_HASH_METHOD),
                          groups=" ".join(group_list),
                          scopes=" ".join(scopes), callback_prefixes=" ".join(prefixes),
                          created_at=datetime.now(UTC), disabled=False)
        with self.db.session() as session:
            session.add(row)
            session.flush()
            record = _record(row)
        return record, secret

    def get(self, client_id: str) -> ClientRecord | None:
        with self.db.session() as session:
            row = session.get(OAuthClient, client_id)
            return _record(row) if row is not None else None

    def list(self) -> list[ClientRecord]:
        with self.db.session() as session:
            return [_record(r) for r in session.scalars(select(OAuthClient).order_by(OAuthClient.name))]

    def names(self) -> dict[str, str]:
        """Each client's name by its id (the console shows parties by name first)."""
        with self.db.session() as session:
            return dict(session.execute(select(OAuthClient.client_id, OAuthClient.name)).tuples().all())

    def delete(self, client_id: str) -> None:
        with self.db.session() as session:
            row = session.get(OAuthClient, client_id)
            if row is None:
                raise NotFoundError(f"unknown client {client_id}")
            session.delete(row)

    def authenticate(self, client_id: str, secret: str) -> ClientRecord | None:
        """The client if the secret is its own (constant work whether or not it exists)."""
        client = self.get(client_id)
        if client is None:
            check_password_hash(_DUMMY_HASH, secret)
            return None
        return client if client.check_client_secret(secret) else None


def create_client_for(data_dir: Path, name: str, extra_env: dict[str, str] | None = None,
                      **fields: Any) -> tuple[ClientRecord, str]:
    """A new client in the database of the hub that runs on `data_dir` with this process's
    environment plus `extra_env` (as `lucid-hub serve` started so would see it): for tools
    that set up a hub."""
    from lucid_hub.config import Settings

    env = {**os.environ, **(extra_env or {}), "LUCID_DATA_DIR": str(data_dir)}
    database = Database(Settings.from_env(env).db_url)
    try:
        database.upgrade()
        return ClientRegistry(database).create(name, **fields)
    finally:
        database.dispose()

