"""Access tokens: issued as RFC 9068 JWTs signed with the hub key; validated for this hub
and for trusted external OpenID Connect issuers (e.g. Keycloak) with a claim mapping.

Validation is cached per token (until it expires) so that a request costs a dictionary
lookup once a token has been seen; revocations reach the cache at once in this process and
from the database every few seconds from other processes.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from sqlalchemy import delete, select

from lucid_hub import nesting
from lucid_hub.auth.clients import ClientRecord
from lucid_hub.db.models import RevokedToken
from lucid_hub.db.session import Database
from lucid_hub.errors import AuthenticationError, ConfigError, InputError
from lucid_hub.policy.decisions import ATTRIBUTE_PREFIX, Party, attribute_group
from lucid_hub.signing import ALGORITHM, VERIFY_ALGORITHMS, KeyRing

EXTERNAL_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "Ed25519", "EdDSA"]
LEEWAY = 30  # seconds of clock skew tolerated on exp/nbf/iat
CACHE_SIZE = 50_000
REVOCATION_REFRESH = 5.0  # seconds between reloads of revocations made by other processes
JWKS_REFRESH = 30.0  # least seconds between fetches of an external issuer's keys


@dataclass(frozen=True)
class Principal:
    """Who calls: the attributes access conditions test, and the token's scopes."""

    account: str  # the subject (for client credentials: the client id)
    endpoint_id: str  # the OAuth client that holds the token
    groups: frozenset[str]
    scopes: frozenset[str]
    issuer: str
    jti: str
    expires_at: int
    claims: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    attributes: frozenset[tuple[str, str]] = frozenset()  # (claim, value) access conditions may require

    @property
    def party(self) -> Party:
        """What access decisions depend on (tokens of one party share cached decisions); its
        attributes are groups of the hub's own namespace (decisions.attribute_group)."""
        return Party(self.account, self.endpoint_id,
                     self.groups | {attribute_group(claim, value) for claim, value in self.attributes})

    def check_client(self, client: ClientRecord) -> bool:
        """authlib (revocation, introspection): was this token issued to `client`?"""
        return self.endpoint_id == client.client_id

    def get_scope(self) -> str:
        return " ".join(sorted(self.scopes))

    def is_expired(self) -> bool:
        return self.expires_at < time.time()

    def is_revoked(self) -> bool:
        return False  # revoked tokens never become Principals


@dataclass(frozen=True)
class TrustedIssuer:
    """An external OpenID Connect issuer and how its claims map to our attributes."""

    issuer: str
    audience: str
    jwks_uri: str = ""
    jwks_file: str = ""
    groups_claim: str = "groups"
    account_claim: str = "sub"
    client_claim: str = "azp"
    scope_claim: str = "scope"
    # The claims of this issuer's tokens that access conditions may require (requiresAttribute):
    # a partner tier, a country. Only these: a token's other claims never make parties differ.
    attribute_claims: tuple[str, ...] = ()
    # Least seconds between fetches of the issuer's keys (an unknown kid triggers one).
    jwks_refresh_seconds: float = JWKS_REFRESH

    @classmethod
    def parse_all(cls, text: str) -> list[TrustedIssuer]:
        """LUCID_TRUSTED_ISSUERS: a JSON list, or the path of a file holding one."""
        if not text.strip():
            return []
        try:
            raw = text if text.lstrip().startswith("[") else Path(text).read_text()
        except OSError as exc:
            raise ConfigError(f"LUCID_TRUSTED_ISSUERS: neither a JSON list nor a readable file: {exc}") from None
        try:
            items = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"LUCID_TRUSTED_ISSUERS is not JSON: {exc}") from None
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ConfigError("LUCID_TRUSTED_ISSUERS is a JSON list of objects, one per issuer")
        known = {f.name for f in fields(cls)}
        issuers = []
        for item in items:
            unknown = sorted(set(item) - known)
            if unknown:
                raise ConfigError(f"LUCID_TRUSTED_ISSUERS: unknown member(s) {', '.join(unknown)} (known: "
                                  f"{', '.join(sorted(known))})")
            lacking = [name for name in ("issuer", "audience") if not item.get(name)]
            if not (item.get("jwks_uri") or item.get("jwks_file")):
                lacking.append("jwks_uri or jwks_file")
            if lacking:
                raise ConfigError(f"LUCID_TRUSTED_ISSUERS: the issuer {item.get('issuer') or '(unnamed)'!r} lacks "
                                  f"{', '.join(lacking)} (each needs issuer, audience and jwks_uri or jwks_file)")
            claims = item.get("attribute_claims", [])
            if not isinstance(claims, list) or not all(isinstance(c, str) and c for c in claims):
                raise ConfigError("LUCID_TRUSTED_ISSUERS: attribute_claims is a list of claim names")
            issuers.append(cls(**{**item, "attribute_claims": tuple(claims)}))
        return issuers


def _claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by dotted path (`realm_access.roles`)."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


MAX_ATTRIBUTES = 32  # attribute values one token carries at most (more are not read)


def _attributes(claims: dict[str, Any], names: Iterable[str]) -> frozenset[tuple[str, str]]:
    """(claim, value) of the named claims: strings, numbers and booleans, or lists of them."""
    found: set[tuple[str, str]] = set()
    for name in names:
        value = _claim(claims, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, bool):
                item = "true" if item else "false"
            if isinstance(item, str | int | float) and 0 < len(str(item)) <= 256:
                found.add((name, str(item)))
    return frozenset(sorted(found)[:MAX_ATTRIBUTES])


def _strings(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(str(v) for v in value)
    return frozenset()


def _unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and claims of a compact JWS, not yet verified (to choose the keys)."""
    try:
        for segment in token.split(".")[:2]:  # joserfc parses the header with json: bound it first
            nesting.check_json(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)), "access token")
        compact = jws.extract_compact(token.encode())
        claims = json.loads(compact.payload)
    except (JoseError, ValueError, InputError):
        raise AuthenticationError("the access token is not a JWT") from None
    if not isinstance(claims, dict):
        raise AuthenticationError("the access token is not a JWT")
    return compact.headers(), claims


class _ExternalKeys:
    """An external issuer's JWKS, fetched on first use and again for an unknown kid."""

    def __init__(self, issuer: TrustedIssuer) -> None:
        self.issuer = issuer
        self.keys: KeySet | None = None
        self.fetched = 0.0
        self.lock = threading.Lock()

    def get(self, kid: str | None) -> KeySet:
        with self.lock:
            known = self.keys is not None and (kid is None or any(k.kid == kid for k in self.keys.keys))
            wait = self.issuer.jwks_refresh_seconds if self.keys else 0
            if not known and time.monotonic() - self.fetched >= wait:
                self.keys = KeySet.import_key_set(self._load())
                self.fetched = time.monotonic()
            if self.keys is None:
                raise AuthenticationError(f"no keys of issuer {self.issuer.issuer}")
            return self.keys

    def _load(self) -> Any:
        if self.issuer.jwks_file:
            return json.loads(Path(self.issuer.jwks_file).read_text())
        import requests

        try:
            response = requests.get(self.issuer.jwks_uri, timeout=5)
            response.raise_for_status()
            return response.json()
        except (requests.RequestException, ValueError) as exc:
            raise AuthenticationError(f"cannot fetch the keys of issuer {self.issuer.issuer}: "
                                      f"{type(exc).__name__}") from None


class TokenService:
    """Issues this hub's access tokens and turns any trusted token into a Principal."""

    def __init__(self, db: Database, keys: KeyRing, issuer: str, *, lifetime: int = 3600,
                 trusted: list[TrustedIssuer] | None = None) -> None:
        self.db = db
        self.keys = keys
        self.issuer = issuer
        self.audience = issuer
        self.lifetime = lifetime
        self.external = {t.issuer: _ExternalKeys(t) for t in trusted or []}
        # Verification keys without their "alg": a JWK's alg would refuse tokens that name the
        # same algorithm as "EdDSA" (VERIFY_ALGORITHMS says which names are accepted).
        self._own_keys = KeySet.import_key_set(
            {"keys": [{k: v for k, v in jwk.items() if k != "alg"} for jwk in keys.jwks()["keys"]]})
        self._signing = keys.active()
        self._cache: OrderedDict[str, Principal] = OrderedDict()
        self._lock = threading.Lock()
        self._revoked: dict[str, float] = {}
        self._revoked_loaded = 0.0

    # --- issuing ---------------------------------------------------------------------
    def issue(self, client: ClientRecord, scope: str) -> str:
        """An RFC 9068 access token for a client (client credentials grant)."""
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": client.client_id, "aud": self.audience, "client_id": client.client_id,
                  "iat": now, "exp": now + self.lifetime, "jti": secrets.token_urlsafe(16), "scope": scope,
                  "groups": list(client.groups), "name": client.name}
        if client.attributes:
            attributes: dict[str, list[str]] = {}
            for claim, value in client.attributes:
                attributes.setdefault(claim, []).append(value)
            claims["attributes"] = attributes
        header = {"alg": ALGORITHM, "typ": "at+jwt", "kid": self._signing.kid}
        return jwt.encode(header, claims, self._signing.key, algorithms=[ALGORITHM])

    # --- validating ------------------------------------------------------------------
    def validate(self, token: str, *, check_expiry: bool = True) -> Principal:
        """The Principal of a valid token; AuthenticationError says why one is not."""
        self._refresh_revocations()
        cached = self._cache.get(token)
        if cached is not None:
            if cached.jti in self._revoked:
                raise AuthenticationError("the access token has been revoked")
            if check_expiry and cached.expires_at + LEEWAY < time.time():
                raise AuthenticationError("the access token has expired")
            return cached
        principal = self._verify(token, check_expiry)
        if principal.jti in self._revoked:
            raise AuthenticationError("the access token has been revoked")
        if check_expiry:
            with self._lock:
                self._cache[token] = principal
                if len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
        return principal

    def _verify(self, token: str, check_expiry: bool) -> Principal:
        if len(token) > 8192:
            raise AuthenticationError("the access token is too long")
        header, unverified = _unverified(token)
        iss = unverified.get("iss")
        if iss == self.issuer:
            if header.get("typ") != "at+jwt":
                raise AuthenticationError("the access token is not an RFC 9068 access token (typ at+jwt)")
            keys, algorithms, audience, mapping = self._own_keys, VERIFY_ALGORITHMS, self.audience, None
        elif isinstance(iss, str) and iss in self.external:
            external = self.external[iss]
            keys = external.get(header.get("kid"))
            algorithms, audience, mapping = EXTERNAL_ALGORITHMS, external.issuer.audience, external.issuer
        else:
            raise AuthenticationError(f"the access token's issuer {str(iss)[:200]!r} is not trusted")
        if header.get("alg") not in algorithms:
            raise AuthenticationError(f"the access token's algorithm {str(header.get('alg'))[:20]!r} is not accepted")
        try:
            claims = jwt.decode(token, keys, algorithms=algorithms).claims
        except JoseError as exc:
            raise AuthenticationError(f"the access token's signature does not verify ({exc.error})") from None
        except ValueError:
            raise AuthenticationError("the access token's signature does not verify") from None
        registry = jwt.JWTClaimsRegistry(
            leeway=LEEWAY, iss={"essential": True, "value": iss}, aud={"essential": True, "value": audience},
            exp={"essential": True}, sub={"essential": True})
        try:
            if check_expiry:
                registry.validate(claims)
            else:
                registry.validate_iss(claims["iss"])
                registry.validate_aud(claims["aud"])
        except JoseError as exc:
            reason = "has expired" if exc.error == "expired_token" else f"is not valid ({exc.error}: {exc.description})"
            raise AuthenticationError(f"the access token {reason}") from None
        except KeyError as exc:
            raise AuthenticationError(f"the access token lacks the claim {exc}") from None
        return self._principal(claims, mapping)

    def _principal(self, claims: dict[str, Any], mapping: TrustedIssuer | None) -> Principal:
        if mapping is None:
            account, endpoint = str(claims["sub"]), str(claims.get("client_id", claims["sub"]))
            groups, scopes = _strings(claims.get("groups")), _strings(claims.get("scope"))
            given = claims.get("attributes")  # the client's, as the hub issued them
            attributes = _attributes(given, given) if isinstance(given, dict) else frozenset()
        else:
            account = str(_claim(claims, mapping.account_claim) or claims["sub"])
            endpoint = str(_claim(claims, mapping.client_claim) or claims.get("client_id") or account)
            groups = _strings(_claim(claims, mapping.groups_claim))
            scopes = _strings(_claim(claims, mapping.scope_claim))
            attributes = _attributes(claims, mapping.attribute_claims)
        # attributes are the hub's to say, from the claims it reads: a group that looks like one is dropped
        groups = frozenset(g for g in groups if not g.startswith(ATTRIBUTE_PREFIX))
        jti = str(claims.get("jti") or f"{claims['iss']}|{claims['sub']}|{claims.get('iat')}")
        return Principal(account, endpoint, groups, scopes, str(claims["iss"]), jti, int(claims["exp"]), claims,
                         attributes)

    # --- revocation ------------------------------------------------------------------
    def revoke(self, principal: Principal) -> None:
        """Revoke a token (by its jti) until it would have expired."""
        expires = datetime.fromtimestamp(principal.expires_at, UTC)
        with self.db.session() as session:
            # Forget revocations of tokens that have expired anyway (here, where the table is
            # written, not in the reload that runs on the request path).
            session.execute(delete(RevokedToken).where(RevokedToken.expires_at < datetime.now(UTC)))
            session.execute(self.db.insert(RevokedToken).values(  # revoked twice at once: one row
                jti=principal.jti, expires_at=expires, revoked_at=datetime.now(UTC)).on_conflict_do_nothing())
        with self._lock:
            self._revoked[principal.jti] = principal.expires_at

    def is_revoked(self, jti: str) -> bool:
        """Whether the token with this jti was revoked (as of the last look at the table)."""
        self._refresh_revocations()
        return jti in self._revoked

    def _refresh_revocations(self) -> None:
        now = time.monotonic()
        if now - self._revoked_loaded < REVOCATION_REFRESH:
            return
        self._revoked_loaded = now
        with self.db.session() as session:
            rows = session.execute(select(RevokedToken.jti, RevokedToken.expires_at).where(
                RevokedToken.expires_at >= datetime.now(UTC))).all()
        with self._lock:
            self._revoked = {jti: expires.timestamp() for jti, expires in rows}
