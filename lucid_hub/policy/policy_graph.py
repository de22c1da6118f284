"""The hub's access conditions: seeded from `LUCID_POLICIES_DIR`, kept in the policy graph,
changed by admins. Every change is a signed, hash-chained patch on the policy graph, so its
history is an audit trail of who changed what, and when, that anyone with the hub's JWKS can
verify."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from joserfc import jws
from sqlalchemy import delete

from lucid_hub.archive import Archive, Precondition, at_version
from lucid_hub.db.models import Denial, HubState
from lucid_hub.db.session import Database
from lucid_hub.errors import ConflictError, LucidError, NotFoundError, PolicyError, PreconditionFailedError
from lucid_hub.policy.decisions import Action, Decision, Party, PolicyEngine
from lucid_hub.policy.model import Condition, conditions_from_quads, parse_turtle
from lucid_hub.rdf.apply import apply_to_msgs
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rdf.statements import statement_quads
from lucid_hub.signing import TrustedKeys, verify_patch_bytes

POLICY_GRAPH = "urn:lucid-hub:policies"
DIGEST_KEY = "policy-files-digest"
DENIAL_DAYS = 7  # recorded denials are kept this long
PRUNE_EVERY = 100  # denials recorded by a process between deletions of expired ones
# Seconds a process may decide on conditions another process (or hub) has changed since.
REFRESH_SECONDS = 1.0


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


class GraphWriter(Protocol):
    """What publishes the policy graph's new versions (the hub's publisher)."""

    def replace(self, graph: str, new: GraphMsgs, *, author: str, message: str,
                if_match: Precondition | None = None) -> Patch | None: ...


def archived_statements(archive: Archive, graph: str, canonicalizer: Canonicalizer) -> tuple[str | None, set[str]]:
    """The head and ground statements of one of the hub's own graphs (the policy graph, the
    rules graph), rebuilt from its archived patches (no store: delivery workers open none)."""
    head, bodies = archive.bodies(graph)
    msgs = GraphMsgs()
    for body in bodies:
        apply_to_msgs(msgs, read_rdf_patch(body, canonicalizer))
    return head, msgs.ground


def stored_conditions(archive: Archive, canonicalizer: Canonicalizer) -> tuple[str | None, list[Condition]]:
    """The policy graph's head and its conditions."""
    head, statements = archived_statements(archive, POLICY_GRAPH, canonicalizer)
    return head, conditions_from_quads(statement_quads(statements), "the policy graph")


class PolicyService:
    """Current conditions, their changes (as signed patches) and recent denials."""

    def __init__(self, db: Database, archive: Archive, writer: GraphWriter, canonicalizer: Canonicalizer,
                 trusted: TrustedKeys) -> None:
        self.db = db
        self.archive = archive
        self.writer = writer
        self.canonicalizer = canonicalizer
        self.trusted = trusted
        self.engine = PolicyEngine()
        self._lock = threading.Lock()  # one edit at a time in this process
        self._refresh_lock = threading.Lock()
        self._head: str | None = None  # the policy graph's version the engine holds
        self._checked = 0.0
        self._recorded = 0

    # --- loading ---------------------------------------------------------------------
    def start(self, directory: Path) -> str:
        """Load the conditions: the directory's files when they changed since last start
        (published as a new version of the policy graph), else the policy graph as admins left it."""
        conditions, digest = read_policy_dir(directory)
        with self.db.session() as session:
            state = session.get(HubState, DIGEST_KEY)
            known = state.value if state is not None else None
        if known != digest:
            self._head = self._policy_version()
            self._publish(conditions, author=f"policies directory {directory}",
                          message=f"loaded {len(conditions)} access conditions from {directory}")
            with self.db.session() as session:  # hubs on one database may start together
                session.execute(self.db.insert(HubState).values(key=DIGEST_KEY, value=digest)
                                .on_conflict_do_update(index_elements=[HubState.key], set_={"value": digest}))
            return f"loaded {len(conditions)} access conditions from {directory}"
        self.refresh(every=0)
        return f"{len(self.engine.conditions)} access conditions from the policy graph ({directory} unchanged)"

    def stored(self) -> tuple[str | None, list[Condition]]:
        """The policy graph's version and the conditions in it now."""
        return stored_conditions(self.archive, self.canonicalizer)

    def refresh(self, every: float = REFRESH_SECONDS) -> None:
        """Reload the conditions if the policy graph moved (another process of this hub, or
        another hub on the database, edited them); checked at most every `every` seconds."""
        if time.monotonic() - self._checked < every:
            return
        with self._refresh_lock:
            if time.monotonic() - self._checked < every:
                return
            if self._policy_version() != self._head or not self._checked:
                version, conditions = self.stored()
                self.engine.replace(conditions)
                self._head = version
            self._checked = time.monotonic()

    def _policy_version(self) -> str | None:
        """The policy graph's head in the database (None: no policy patch yet)."""
        return self.archive.current_head(POLICY_GRAPH)

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
            self.refresh(every=0)  # edit what is there now, not what this process saw last
            current = {c.iri: c for c in self.engine.conditions}
            clash = [c.iri for c in new if c.iri in current]
            if clash:
                raise ConflictError(f"access condition <{clash[0]}> exists; update it with PUT")
            self._publish([*current.values(), *new], author=author,
                          message="created " + ", ".join(f"<{c.iri}>" for c in new))

    def update(self, condition: Condition, author: str) -> None:
        with self._lock:
            self.refresh(every=0)
            current = {c.iri: c for c in self.engine.conditions}
            if condition.iri not in current:
                raise NotFoundError(f"no access condition <{condition.iri}>")
            current[condition.iri] = condition
            self._publish(list(current.values()), author=author, message=f"updated <{condition.iri}>")

    def delete(self, iri: str, author: str) -> None:
        with self._lock:
            self.refresh(every=0)
            current = {c.iri: c for c in self.engine.conditions}
            if current.pop(iri, None) is None:
                raise NotFoundError(f"no access condition <{iri}>")
            self._publish(list(current.values()), author=author, message=f"deleted <{iri}>")

    def _publish(self, conditions: list[Condition], *, author: str, message: str) -> None:
        """Publish the conditions as the policy graph's next version, if it is still at the
        version they were computed from (else 409: two edits raced, the later one retries)."""
        statements = {s for c in conditions for s in c.validate().statements()}
        try:
            patch = self.writer.replace(POLICY_GRAPH, GraphMsgs(statements, Counter()), author=author[:512],
                                           message=message[:4096], if_match=at_version(self._head))
        except PreconditionFailedError:
            self._checked = 0.0
            raise ConflictError("the access conditions were changed meanwhile (by another admin or hub "
                                "process); look at them again and retry") from None
        self.engine.replace(conditions)  # takes effect for the next request
        if patch is not None:
            self._head = patch.id

    # --- decisions and explanations ---------------------------------------------------
    def decide(self, party: Party, graph: str, action: Action) -> Decision:
        """The decision; a denial is recorded, under the request id the decision carries."""
        self.refresh()
        decision = self.engine.decide(party, graph, action)
        if decision.allowed:
            return decision
        request_id = uuid.uuid4().hex
        body = {"request_id": request_id, "time": time.time(), **self.engine.why(party, graph, action)}
        now = datetime.now(UTC)
        with self.db.session() as session:
            session.add(Denial(request_id=request_id, created_at=now, body=json.dumps(body)))
            self._recorded += 1
            if self._recorded % PRUNE_EVERY == 0:
                session.execute(delete(Denial).where(Denial.created_at < now - timedelta(days=DENIAL_DAYS)))
        return Decision(False, decision.reason, request_id)

    def allows(self, party: Party, graph: str, action: Action) -> bool:
        """Whether the party may; nothing recorded (a question, not a refusal: is a graph public?)."""
        self.refresh()
        return self.engine.decide(party, graph, action).allowed

    def readable(self, party: Party, graphs: Iterable[str]) -> list[str]:
        """The graphs among `graphs` the party may read (the hub's own graphs never): what a
        SPARQL query's dataset is made of. Allowed reads are not recorded, so no denial is."""
        self.refresh()
        return [g for g in graphs if self.engine.decide(party, g, "read").allowed]

    def denial(self, request_id: str) -> dict[str, Any]:
        with self.db.session() as session:
            found = session.get(Denial, request_id[:32])
            if found is None:
                raise NotFoundError(f"no recorded denial {request_id} (denials are kept {DENIAL_DAYS} days)")
            return dict(json.loads(found.body))

    # --- audit -----------------------------------------------------------------------
    def history(self) -> list[dict[str, Any]]:
        """Every change of the policy graph, each patch's signature and chain link verified."""
        return verified_history(self.archive, POLICY_GRAPH, self.trusted, self.canonicalizer)


def verified_history(archive: Archive, graph: str, trusted: TrustedKeys,
                     canonicalizer: Canonicalizer) -> list[dict[str, Any]]:
    """Every change of one of the hub's own graphs (the policy graph, the rules graph): author,
    message, time, size, and whether its signature and chain link verify (its audit trail)."""
    if archive.current_head(graph) is None:
        return []
    out, prev = [], None
    for record in archive.history(graph):
        entry: dict[str, Any] = {"patch": record.id, "author": record.author, "message": record.message,
                                 "created": record.created.isoformat(), "removed": record.removed,
                                 "added": record.added}
        try:
            patch = verify_patch_bytes(record.body, trusted, canonicalizer)
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

    def __init__(self, archive: Archive, canonicalizer: Canonicalizer) -> None:
        self.archive = archive
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
            if self.archive.current_head(POLICY_GRAPH) != self._head or not self._checked:
                self._head, conditions = stored_conditions(self.archive, self.canonicalizer)
                self.engine.replace(conditions)
            self._checked = time.monotonic()

    def decide(self, party: Party, graph: str, action: Action) -> Decision:
        self.refresh()
        return self.engine.decide(party, graph, action)
