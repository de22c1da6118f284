"""The hub's access conditions: seeded from `LUCID_POLICIES_DIR`, kept in the policy graph,
changed by admins. Every change is a signed, hash-chained patch on the policy graph, so its
history is an audit trail of who changed what, and when, that anyone with the hub's JWKS can
verify."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import pyoxigraph as ox
from joserfc import jws

from lucid_hub.db.models import HubState
from lucid_hub.db.session import Database
from lucid_hub.errors import ConflictError, LucidError, NotFoundError, PolicyError
from lucid_hub.policy.engine import Action, Party, PolicyEngine
from lucid_hub.policy.model import Condition, conditions_from_quads, parse_turtle
from lucid_hub.publish import Publisher
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.signing import TrustedKeys, verify_patch_bytes

POLICY_GRAPH = "urn:lucid-hub:policies"
DIGEST_KEY = "policy-files-digest"
DENIALS_KEPT = 1000


def read_policy_dir(directory: Path) -> tuple[list[Condition], str]:
    """The conditions of the `*.ttl` files of a directory, and a digest of those files."""
    digest = hashlib.sha256()
    conditions: dict[str, Condition] = {}
    files = sorted(directory.glob("*.ttl")) if directory.is_dir() else []
    for path in files:
        data = path.read_bytes()
        digest.update(path.name.encode() + b"\0" + data + b"\0")
        for c in parse_turtle(data, str(path), base_iri=path.resolve().as_uri()):
            if c.iri in conditions:
                raise PolicyError(f"{path}: condition <{c.iri}> is defined twice")
            conditions[c.iri] = c
    return list(conditions.values()), digest.hexdigest()


class PolicyService:
    """Current conditions, their changes (as signed patches) and recent denials."""

    def __init__(self, db: Database, publisher: Publisher, canonicalizer: Canonicalizer, trusted: TrustedKeys) -> None:
        self.db = db
        self.publisher = publisher
        self.canonicalizer = canonicalizer
        self.trusted = trusted
        self.engine = PolicyEngine()
        self._lock = threading.Lock()
        self._denials: OrderedDict[str, dict[str, Any]] = OrderedDict()

    # --- loading ---------------------------------------------------------------------
    def start(self, directory: Path) -> str:
        """Load the conditions: the directory's files when they changed since last start
        (published as a new version of the policy graph), else the policy graph as admins left it."""
        conditions, digest = read_policy_dir(directory)
        with self.db.session() as session:
            state = session.get(HubState, DIGEST_KEY)
            known = state.value if state is not None else None
        if known != digest:
            self._publish(conditions, author=f"policies directory {directory}",
                          message=f"loaded {len(conditions)} access conditions from {directory}")
            with self.db.session() as session:
                row = session.get(HubState, DIGEST_KEY)
                if row is None:
                    session.add(HubState(key=DIGEST_KEY, value=digest))
                else:
                    row.value = digest
            return f"loaded {len(conditions)} access conditions from {directory}"
        self.engine.replace(self.stored())
        return f"{len(self.engine.conditions)} access conditions from the policy graph ({directory} unchanged)"

    def stored(self) -> list[Condition]:
        """The conditions in the policy graph now."""
        if self.publisher.head(POLICY_GRAPH) is None:
            return []
        _version, statements = self.publisher.content(POLICY_GRAPH)
        quads = ox.parse("".join(f"{s} .\n" for s in statements), format=ox.RdfFormat.N_TRIPLES)
        return conditions_from_quads(quads, "the policy graph")

    # --- changing --------------------------------------------------------------------
    def conditions(self) -> tuple[Condition, ...]:
        return self.engine.conditions

    def get(self, iri: str) -> Condition:
        for c in self.engine.conditions:
            if c.iri == iri:
                return c
        raise NotFoundError(f"no access condition <{iri}>")

    def create(self, new: list[Condition], author: str) -> None:
        with self._lock:
            current = {c.iri: c for c in self.engine.conditions}
            clash = [c.iri for c in new if c.iri in current]
            if clash:
                raise ConflictError(f"access condition <{clash[0]}> exists; update it with PUT")
            self._publish([*current.values(), *new], author=author,
                          message="created " + ", ".join(f"<{c.iri}>" for c in new))

    def update(self, condition: Condition, author: str) -> None:
        with self._lock:
            current = {c.iri: c for c in self.engine.conditions}
            if condition.iri not in current:
                raise NotFoundError(f"no access condition <{condition.iri}>")
            current[condition.iri] = condition
            self._publish(list(current.values()), author=author, message=f"updated <{condition.iri}>")

    def delete(self, iri: str, author: str) -> None:
        with self._lock:
            current = {c.iri: c for c in self.engine.conditions}
            if current.pop(iri, None) is None:
                raise NotFoundError(f"no access condition <{iri}>")
            self._publish(list(current.values()), author=author, message=f"deleted <{iri}>")

    def _publish(self, conditions: list[Condition], *, author: str, message: str) -> None:
        statements = {s for c in conditions for s in c.validate().statements()}
        self.publisher.replace(POLICY_GRAPH, GraphMsgs(statements, Counter()), author=author[:512],
                               message=message[:4096])
        self.engine.replace(conditions)  # takes effect for the next request

    # --- decisions and explanations ---------------------------------------------------
    def decide(self, party: Party, graph: str, action: Action) -> tuple[bool, str, str | None]:
        """(allowed, reason, request id of a recorded denial)."""
        decision = self.engine.decide(party, graph, action)
        if decision.allowed:
            return True, decision.reason, None
        request_id = uuid.uuid4().hex
        with self._lock:
            self._denials[request_id] = {"request_id": request_id, "time": time.time(),
                                         **self.engine.why(party, graph, action)}
            while len(self._denials) > DENIALS_KEPT:
                self._denials.popitem(last=False)
        return False, decision.reason, request_id

    def denial(self, request_id: str) -> dict[str, Any]:
        found = self._denials.get(request_id)
        if found is None:
            raise NotFoundError(f"no recorded denial {request_id} (the last {DENIALS_KEPT} are kept)")
        return found

    # --- audit -----------------------------------------------------------------------
    def history(self) -> list[dict[str, Any]]:
        """Every change of the policy graph, each patch's signature and chain link verified."""
        if self.publisher.head(POLICY_GRAPH) is None:
            return []
        out, prev = [], None
        for record in self.publisher.history(POLICY_GRAPH):
            entry: dict[str, Any] = {"patch": record.id, "author": record.author, "message": record.message,
                                     "created": record.created.isoformat(), "removed": record.removed,
                                     "added": record.added}
            try:
                patch = verify_patch_bytes(record.body, self.trusted, self.canonicalizer)
                if patch.prev != prev or patch.id != record.id:
                    raise LucidError(f"chain broken: prev {patch.prev} where {prev} was expected")
                entry.update(verified=True, kid=_kid(patch))
            except LucidError as exc:
                entry.update(verified=False, problem=str(exc))
            out.append(entry)
            prev = record.id
        return out


def _kid(patch: Patch) -> str | None:
    """The key id in a (verified) patch signature's protected header."""
    if not patch.signature:
        return None
    kid = jws.extract_compact(patch.signature.encode(), payload=patch.id).headers().get("kid")
    return kid if isinstance(kid, str) else None


class ArchivePolicies:
    """The access conditions as a delivery worker sees them: read from the policy graph's
    archived patches (a worker does not open the store), reloaded when the graph moves."""

    def __init__(self, db: Database, canonicalizer: Canonicalizer) -> None:
        self.db = db
        self.canonicalizer = canonicalizer
        self.engine = PolicyEngine()
        self._head: str | None = None
        self._checked = 0.0
        # Delivery threads decide concurrently: one loads, the others wait for its result
        # (a thread that went ahead would see the empty engine and deny).
        self._lock = threading.Lock()

    def refresh(self, every: float = 1.0) -> None:
        if time.monotonic() - self._checked < every:
            return
        with self._lock:
            if time.monotonic() - self._checked < every:
                return
            self._load()
            self._checked = time.monotonic()

    def _load(self) -> None:
        from sqlalchemy import select

        from lucid_hub.db.models import Graph, PatchRecord
        from lucid_hub.rdf.rdfpatch import read_rdf_patch

        with self.db.session() as session:
            row = session.get(Graph, POLICY_GRAPH)
            head = row.head if row is not None else None
            if head == self._head:
                return
            bodies = list(session.scalars(select(PatchRecord.body).where(PatchRecord.graph == POLICY_GRAPH)
                                          .order_by(PatchRecord.seq)))
        statements: set[str] = set()
        for body in bodies:  # the policy graph is ground: each MSG is one statement
            patch = read_rdf_patch(body, self.canonicalizer)
            statements -= {m.nquads for m in patch.removed}
            statements |= {m.nquads for m in patch.added}
        quads = ox.parse("".join(statements), format=ox.RdfFormat.N_TRIPLES)
        self.engine.replace(conditions_from_quads(quads, "the policy graph"))
        self._head = head

    def decide(self, party: Party, graph: str, action: Action) -> tuple[bool, str, str | None]:
        self.refresh()
        decision = self.engine.decide(party, graph, action)
        return decision.allowed, decision.reason, None

