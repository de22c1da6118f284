"""The registry of mirrors: adding one (its publisher's keys pinned, its client checked),
listing, trusting new keys, removing; and which graphs are mirrors (read-only here)."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import requests
from sqlalchemy import or_, select, update

from lucid_hub import nesting, outbound
from lucid_hub.archive import Archive
from lucid_hub.client import (
    HubClient,
    client_credentials_token,
    discover,
    fetch_jwks,
)
from lucid_hub.db.models import Mirror
from lucid_hub.db.session import Database
from lucid_hub.db.times import iso, now
from lucid_hub.errors import (
    ConfigError,
    ConflictError,
    InputError,
    NotFoundError,
    RemoteError,
)
from lucid_hub.outbound import AddressPolicy
from lucid_hub.signing import TrustedKeys

SCOPE = "hub:subscribe graphs:read"  # what a mirror's client asks the publisher for


def _http(policy: AddressPolicy) -> requests.Session:
    """HTTP to publishers: every connection keeps to the outbound address policy, since the
    URLs a mirror follows (discovery links, archive pages) are the publisher's to choose."""
    return outbound.session(policy, "lucid-hub mirror")


def _load_jwks(source: str, http: requests.Session) -> str:
    text = fetch_jwks(source, http)
    where = _jwks_name(source)
    try:
        jwks = nesting.loads(text, f"the JWKS {where}")
        TrustedKeys(jwks)
    except (InputError, ConfigError) as exc:
        raise InputError(f"the JWKS {where} is not one with an Ed25519 key: {exc}") from None
    return json.dumps(jwks)


def _jwks_name(source: str) -> str:
    """How messages name a JWKS source: its URL or file, or "given" for a document itself."""
    return "given" if source.lstrip().startswith("{") else f"at {source}"


def describe(row: Mirror, head: str | None = None, length: int = 0, pinned_from: str | None = None) -> dict[str, Any]:
    """What lists and the admin API show of a mirror (never its secrets)."""
    out = {"id": row.id, "graph": row.graph, "hub": row.hub_url, "publisher": row.publisher_url,
           "client_id": row.client_id, "state": row.state,
           "head": head, "length": length, "lease_expires_at": iso(row.lease_expires_at),
           "applied": row.applied_total, "quarantined": row.quarantined_total,
           "hmac_failures": row.hmac_failures_total, "last_error": row.last_error,
           "keys": [k.get("kid") for k in json.loads(row.jwks).get("keys", [])]}
    if pinned_from:
        out["keys_pinned_from"] = pinned_from
    return out


# --- the running hub's side -----------------------------------------------------------------
class MirroredGraphs:
    """Which graphs are mirrors (read-only here), as the mirrors table said at most a second
    ago (mirrors are added by commands and by other processes of the hub)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._graphs: set[str] = set()
        self._at = 0.0
        self.refresh()

    def refresh(self) -> None:
        with self.db.engine.connect() as conn:
            self._graphs = set(conn.execute(select(Mirror.graph)).scalars())
        self._at = time.monotonic()

    def __call__(self, graph: str, fresh: bool = False) -> bool:
        """Whether `graph` is a mirror; `fresh` looks again before a "no". Every publish asks,
        to refuse a mirror's change before its diff: py-spy showed a lookup per call as 4% of
        a publishing process. A "no" a second old is safe: the archive's compare-and-set
        refuses a mirrored graph's local change itself."""
        if time.monotonic() - self._at > 1.0 or (fresh and graph not in self._graphs):
            self.refresh()
        return graph in self._graphs


class MirrorRegistry:
    """The mirrors this hub keeps, as operators and admins add, list, trust and remove them:
    the one owner of those edits of the mirrors table (usable without a running hub: the
    commands open the database alone). The running hub's side is MirrorService."""

    def __init__(self, db: Database, policy: AddressPolicy) -> None:
        """`policy`: where the registry may connect (the publisher's keys, its token endpoint)."""
        self.db = db
        self.policy = policy

    def add(self, *, graph: str | None, hub_url: str | None, client_id: str, client_secret: str,
            trust_jwks: str | None = None, graph_url: str | None = None) -> dict[str, Any]:
        """Register a mirror; the hub subscribes to it (now if it runs, else at its next start).

        The hub comes from `hub_url` or is discovered from `graph_url`. The publisher's keys are
        pinned now: from `trust_jwks` (a URL or a file), else from the publisher's own JWKS
        (trust on first use, as `mirror add` prints). The client credentials are checked by
        taking a token, so a typo fails here, not later in a log."""
        http = _http(self.policy)
        if graph_url:  # a lucid-hub graph URL (BASE/graphs?graph=…): read with a token from BASE
            base = graph_url.split("/graphs", 1)[0]
            try:
                token = client_credentials_token(base, client_id, client_secret, SCOPE, http=http)
            except RemoteError as exc:
                raise InputError(f"the publisher at {base} refused the client: {exc}") from None
            try:
                hub_url, found = discover(graph_url, http, token)
            except RemoteError as exc:  # the operator's URL: a 400 with the reason
                raise InputError(str(exc)) from None
            graph = graph or found
        if not hub_url or not graph:
            raise InputError("name the publisher's hub (--hub) and the graph (--graph), or the graph's URL (--from)")
        if not hub_url.startswith(("http://", "https://")):
            raise InputError(f"--hub {hub_url!r}: not an http(s) URL")
        publisher = hub_url.rstrip("/").removesuffix("/hub")
        jwks = _load_jwks(trust_jwks or f"{publisher}/.well-known/jwks.json", http)
        try:
            token = client_credentials_token(publisher, client_id, client_secret, SCOPE, http=http)
        except RemoteError as exc:
            raise InputError(f"the publisher refused the client: {exc}") from None
        try:  # a misspelt graph fails here, not as a mirror that turns "revoked" later
            HubClient(publisher, http, token).check_graph(graph)
        except RemoteError as exc:
            raise InputError(f"cannot mirror <{graph}>: {exc}") from None
        with self.db.session() as session:
            if session.scalars(select(Mirror).where(Mirror.graph == graph)).first() is not None:
                raise ConflictError(f"<{graph}> is mirrored already (mirror remove it first)")
            if Archive(self.db).exists(graph):
                raise ConflictError(f"<{graph}> is a graph of this hub: a mirror cannot replace it")
            row = Mirror(id=secrets.token_urlsafe(16), graph=graph, hub_url=hub_url, publisher_url=publisher,
                         client_id=client_id, client_secret=client_secret, jwks=jwks,
                         hmac_secret=secrets.token_urlsafe(32), state="new", last_error="", applied_total=0,
                         quarantined_total=0, hmac_failures_total=0, created_at=now())
            session.add(row)
            session.flush()
            pinned = _jwks_name(trust_jwks).removeprefix("at ") if trust_jwks else \
                f"{publisher}/.well-known/jwks.json (trust on first use)"
            return describe(row, pinned_from=pinned)

    def list(self) -> list[dict[str, Any]]:
        """Every mirror, oldest first, with its graph's head and length here."""
        with self.db.session() as session:
            rows = session.scalars(select(Mirror).order_by(Mirror.created_at)).all()
            heads = {iri: (g.head, g.length) for iri, g in Archive(self.db).graphs_of(r.graph for r in rows).items()}
            return [describe(r, *heads.get(r.graph, (None, 0))) for r in rows]

    def remove(self, mirror: str) -> None:
        """Mark a mirror (by id or graph IRI) for removal: the hub unsubscribes, then forgets it."""
        with self.db.session() as session:  # one UPDATE: a denial arriving meanwhile does not undo it
            result = session.execute(update(Mirror).where(or_(Mirror.id == mirror, Mirror.graph == mirror))
                                     .values(state="removing"))
            if getattr(result, "rowcount", 0) == 0:
                raise NotFoundError(f"no mirror {mirror}")

    def trust(self, mirror: str, source: str, *, replace: bool = False) -> dict[str, Any]:
        """Pin the publisher's keys again (after it rotated its key): the JWKS from `source` (a URL
        or a file). It must keep every key pinned so far (a publisher keeps retired keys in its
        JWKS) unless `replace` (the old key was lost). A running hub then catches the mirror up:
        patches quarantined for an unknown key are fetched again and applied if they verify."""
        which = or_(Mirror.id == mirror, Mirror.graph == mirror)
        with self.db.session() as session:
            if session.scalars(select(Mirror.id).where(which)).first() is None:
                raise NotFoundError(f"no mirror {mirror}")
        jwks = _load_jwks(source, _http(self.policy))
        new_kids = {k.get("kid") for k in json.loads(jwks)["keys"]}
        with self.db.session() as session:
            row = session.scalars(select(Mirror).where(which)).first()
            if row is None:
                raise NotFoundError(f"no mirror {mirror}")
            dropped = {k.get("kid") for k in json.loads(row.jwks).get("keys", [])} - new_kids
            if dropped and not replace:
                raise ConflictError(f"the JWKS {_jwks_name(source)} no longer holds the pinned key(s) "
                                    f"{', '.join(sorted(map(str, dropped)))}: a rotation keeps old keys published; if "
                                    "the old key was lost, pass --replace")
            row.jwks = jwks
            if row.state == "error":
                row.state = "active"
            session.flush()
            return describe(row, pinned_from=_jwks_name(source).removeprefix("at "))

    def pinned_keys(self, graph: str) -> dict[str, Any] | None:
        """The publisher's keys pinned for a mirrored graph (its JWKS); None for a graph not mirrored."""
        with self.db.session() as session:
            row = session.scalars(select(Mirror).where(Mirror.graph == graph)).first()
            return None if row is None else dict(json.loads(row.jwks))
