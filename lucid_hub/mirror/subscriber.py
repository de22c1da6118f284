"""Mirrors of other hubs' graphs: subscribe, verify every delivery, apply in chain order,
catch up on gaps, quarantine what cannot be verified.

A mirror's patches go into this hub's own archive as they are (the publisher's ids and
signatures), through the same atomic archive step as local patches, so the store, the
local patch log (and with it Kafka) and the local WebSub hub serve a mirrored graph like
any other. Nothing is applied before its id, signature and place in the chain are checked
against the publisher's pinned keys; the raw bytes are checked before anything is parsed.

Rows in `mirrors` are also the work queue: `lucid-hub mirror add/remove` write them (with
or without a running hub) and the hub's maintenance thread subscribes, renews leases and
unsubscribes within a second, or at its next start.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import pyoxigraph as ox
from sqlalchemy import delete, select, update

from lucid_hub.archive import Archive
from lucid_hub.client import (
    Budget,
    HubClient,
    RoundOver,
    prefetched,
)
from lucid_hub.config import Settings
from lucid_hub.db.models import Mirror, Quarantined
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now
from lucid_hub.errors import (
    InputError,
    LucidError,
    NotFoundError,
    PatchVerificationError,
    RemoteAnswerError,
    RemoteCredentialsRefused,
    RemoteError,
    RemoteRefusedError,
)
from lucid_hub.metrics import Metrics
from lucid_hub.mirror.receipts import Receipts
from lucid_hub.mirror.registry import SCOPE, MirroredGraphs, _http
from lucid_hub.outbound import AddressPolicy
from lucid_hub.patch_stream import PatchStream
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.statements import statement_quads
from lucid_hub.signing import TrustedKeys, verify_patch_bytes
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)
RETRY_SECONDS = 60.0  # a (re)subscription not verified by then is asked for again


class Archiver(Protocol):
    """What the mirrors need of the publisher: archive verified patches, read and drop a
    graph's content."""

    def archive_verified(self, patch: Patch, sync: bool = True) -> Patch: ...

    def archive_verified_chain(self, patches: list[Patch], sync: bool = True) -> None: ...

    def content(self, graph: str, version: str | None = None) -> tuple[str | None, list[str]]: ...

    def forget(self, graph: str) -> None: ...


class MirrorService:
    """Subscriptions, verification of intent, deliveries and catch-up of this hub's mirrors."""

    def __init__(self, settings: Settings, db: Database, archive: Archive, publisher: Archiver,
                 canonicalizer: Canonicalizer, mirrored: MirroredGraphs, stream: PatchStream,
                 metrics: Metrics) -> None:
        self.settings = settings
        self.db = db
        self.archive = archive
        self.publisher = publisher
        self.canonicalizer = canonicalizer
        self.mirrored = mirrored
        self.stream = stream
        self.metrics = metrics
        self.http = _http(AddressPolicy.of(settings))
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._started_at = 0.0
        self._first_pending: set[str] | None = None  # mirrors whose first round after start has not ended
        self._running: set[str] = set()  # mirrors whose round is under way (one at a time each)
        self._caught_up: set[str] = set()  # mirrors caught up since start (or since their keys were pinned again)
        self._cloning: set[str] = set()  # mirrors whose clone is under way (its check comes at its end)
        self._failures: dict[str, int] = {}  # failed rounds in a row, for each mirror's back-off
        self._not_before: dict[str, float] = {}  # when a failing mirror is tried again (monotonic)
        self._pins: dict[str, str] = {}  # each mirror's pinned JWKS, as the last round saw it
        self._keys: dict[str, TrustedKeys] = {}
        self.receipts = Receipts(settings.public_url, settings.mirror_receipts)

    # --- lifecycle -------------------------------------------------------------------
    def start(self, roles: Supervisor) -> None:
        """Keep the mirrors: the role `mirrors` starts each mirror's rounds (see `schedule`)."""
        if self._pool is None:
            self._started_at = time.monotonic()
            self._pool = ThreadPoolExecutor(self.settings.mirror_workers, thread_name_prefix="mirror")
            roles.add("mirrors", self.schedule, every=1.0, wake=self._wake)

    def stop(self) -> None:
        """After the role stopped: rounds in flight end at their next page or chunk of one."""
        self._stop.set()
        self._wake.set()
        self.end_streams()
        if self._pool is not None:  # rounds in flight end at their next page or chunk
            self._pool.shutdown(wait=True, cancel_futures=True)

    def end_streams(self) -> None:
        """End every event stream (the server is shutting down); safe in a signal handler."""
        self.stream.end()

    def wake(self) -> None:
        self._wake.set()

    @property
    def catching_up(self) -> bool:
        """Whether mirrors are still catching up on what they missed while the hub was down:
        the hub is not ready meanwhile, for one round's time at most (LUCID_MIRROR_ROUND_SECONDS):
        a partner that is down or hostile must not keep this hub from serving (its mirror is
        reported in `stuck()` instead)."""
        if self._pool is None:
            return False
        pending = self._first_pending
        return (pending is None or bool(pending)) and \
            time.monotonic() - self._started_at < self.settings.mirror_round_seconds

    def stuck(self) -> dict[str, str]:
        """Mirrors whose last round failed (graph -> the reason): what /readyz reports beside
        "ready", since one partner's trouble is not the hub's."""
        failing = [mirror_id for mirror_id, count in self._failures.items() if count]
        if not failing:
            return {}
        with self.db.session() as session:
            return {row.graph: row.last_error for row in session.scalars(select(Mirror).where(Mirror.id.in_(failing)))}

    def schedule(self) -> None:
        """Start a round for each mirror that has none under way and is not backing off. Each
        runs on a worker of its own, within its budget: a slow or hostile publisher holds up
        its own mirror, never another's subscription, catch-up or the hub's readiness."""
        with self.db.session() as session:
            rows = [(r.id, r.state, aware(r.renew_at) if r.renew_at is not None else None, r.jwks)
                    for r in session.scalars(select(Mirror))]
        self.mirrored.refresh()
        if self._first_pending is None:
            self._first_pending = {row[0] for row in rows if row[1] in ("new", "active", "subscribing")}
        clock = time.monotonic()
        for mirror_id, state, renew_at, jwks in rows:
            if self._stop.is_set() or self._pool is None:
                return
            if mirror_id in self._running or (state != "removing" and self._not_before.get(mirror_id, 0.0) > clock):
                continue
            self._running.add(mirror_id)
            future = self._pool.submit(self._round, mirror_id, state, renew_at, jwks)
            future.add_done_callback(functools.partial(self._round_ended, mirror_id))

    def _round_ended(self, mirror_id: str, done: Future[bool]) -> None:
        failed = done.cancelled() or done.exception() is not None or not done.result()
        if done.exception() is not None:
            log.error("mirror %s: maintenance failed", mirror_id, exc_info=done.exception())
        if failed:  # tried again after 2, 4, 8 … s (jittered), LUCID_MIRROR_MAX_BACKOFF at most
            count = self._failures[mirror_id] = self._failures.get(mirror_id, 0) + 1
            delay = min(self.settings.mirror_max_backoff, 2.0 ** min(count, 30))
            self._not_before[mirror_id] = time.monotonic() + delay * random.uniform(0.5, 1.0)  # noqa: S311 (jitter)
        else:
            self._failures.pop(mirror_id, None)
            self._not_before.pop(mirror_id, None)
        if self._first_pending is not None:
            self._first_pending.discard(mirror_id)
        self._running.discard(mirror_id)

    def _round(self, mirror_id: str, state: str, renew_at: Any, jwks: str) -> bool:
        """One mirror's maintenance: subscribe when new, renew a lease that is half over,
        unsubscribe when removed; catch up once after start (patches missed while down), in
        rounds of a budget each; send the receipt. Whether it went well (else: back off)."""
        try:
            return self._round_of(mirror_id, state, renew_at, jwks)
        except NotFoundError:  # removed meanwhile (the rows a schedule read can be a round old): nothing to do
            return True

    def _round_of(self, mirror_id: str, state: str, renew_at: Any, jwks: str) -> bool:
        if self._pins.setdefault(mirror_id, jwks) != jwks:  # keys pinned again (`mirror trust`):
            self._pins[mirror_id] = jwks  # what was quarantined for an unknown key may verify now
            self._caught_up.discard(mirror_id)
        if state == "removing":
            self._remove(mirror_id)
            return True
        if state == "new" or (state in ("subscribing", "active", "error") and renew_at is not None
                              and renew_at <= now()):
            self._subscribe(mirror_id)
        if state in ("new", "active", "subscribing") and mirror_id not in self._caught_up:
            try:
                if self._catch_up(mirror_id, self.budget())[1]:
                    self._caught_up.add(mirror_id)
                else:
                    self._wake.set()  # the budget ran out, not the publisher: on at the next round
            except NotFoundError:
                raise
            except LucidError as exc:
                self._record_error(mirror_id, f"catching up failed: {exc}")
                return False
        if state == "active":
            self._send_receipt(mirror_id)
        return True

    def budget(self) -> Budget:
        """What one round may spend on a publisher (settings `LUCID_MIRROR_ROUND_*`)."""
        s = self.settings
        return Budget(s.mirror_round_seconds, s.mirror_round_pages, s.mirror_max_answer_bytes, self._stop.is_set)

    def _send_receipt(self, mirror_id: str) -> None:
        """Tell the publisher the mirror's new head, if it has one not told yet (receipts.py)."""
        row = self._row(mirror_id)
        head = self._head(row.graph)
        if head is None or not self.receipts.due(mirror_id, head):
            return
        try:
            publisher = self._publisher(row)
        except LucidError as exc:
            log.warning("mirror of <%s>: no token for the receipt: %s", row.graph, exc)
            return
        self.receipts.send(mirror_id, row.graph, head, self.stream.position(row.graph), publisher)

    # --- subscribing -----------------------------------------------------------------
    def callback_url(self, mirror_id: str) -> str:
        return f"{self.settings.public_url}/callback/{mirror_id}"

    def _row(self, mirror_id: str) -> Mirror:
        with self.db.session() as session:
            row = session.get(Mirror, mirror_id)
            if row is None:
                raise NotFoundError(f"no mirror {mirror_id}")
            session.expunge(row)
            return row

    def _trusted(self, jwks: str) -> TrustedKeys:
        """The pinned keys, imported once per JWKS text (not on every delivery)."""
        keys = self._keys.get(jwks)
        if keys is None:
            keys = self._keys[jwks] = TrustedKeys(json.loads(jwks))
        return keys

    def _publisher(self, row: Mirror) -> HubClient:
        """The mirror's publisher, as the mirror's client (with a fresh token)."""
        client = HubClient(row.publisher_url, self.http)
        client.authorize(row.client_id, row.client_secret, SCOPE)
        return client

    def _hub_request(self, row: Mirror, mode: str) -> None:
        form = {"hub.mode": mode, "hub.topic": row.graph, "hub.callback": self.callback_url(row.id)}
        if mode == "subscribe":
            form["hub.secret"] = row.hmac_secret
        self._publisher(row).hub_request(row.hub_url, form)

    def _subscribe(self, mirror_id: str) -> None:
        """(Re)subscribe; the hub's verification of intent then makes the mirror active.

        The state moves before the request: the verification may arrive before the hub's
        202 does, and must find the mirror waiting for it (single UPDATEs, no lost update)."""
        with self.db.session() as session:
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                renew_at=now() + timedelta(seconds=RETRY_SECONDS)))  # again unless verified by then
            session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.state.in_(("new", "error")))
                            .values(state="subscribing"))
        try:
            self._hub_request(self._row(mirror_id), "subscribe")
        except LucidError as exc:
            log.warning("mirror %s: %s", mirror_id, exc)
            with self.db.session() as session:
                session.execute(update(Mirror).where(Mirror.id == mirror_id).values(last_error=str(exc)[:1024]))
                session.execute(update(Mirror).where(Mirror.id == mirror_id, Mirror.state == "subscribing")
                                .values(state="error"))

    def _remove(self, mirror_id: str) -> None:
        row = self._row(mirror_id)
        try:
            self._hub_request(row, "unsubscribe")
        except LucidError as exc:  # the publisher's subscription then ends with its lease
            log.info("mirror %s: unsubscribing failed: %s", mirror_id, exc)
        # Forgotten at once: the verification of the unsubscription finds no mirror and is
        # answered 404, so the hub keeps delivering until the lease ends — answered 410
        # Gone, which removes the subscription at the hub.
        with self.db.session() as session:
            session.execute(delete(Mirror).where(Mirror.id == mirror_id))
        self.mirrored.refresh()
        self.receipts.forget(mirror_id)

    def verify_intent(self, mirror_id: str, mode: str, topic: str, challenge: str, lease: str | None,
                      reason: str = "") -> str | None:
        """The answer to a hub's GET on our callback: the challenge to echo, "" for a
        denial taken note of, None for a request we did not ask for (answered 404).
        State changes are single conditional UPDATEs: `mirror remove` may run meanwhile."""
        if mode == "denied":  # anyone can send this GET: believe it only if the publisher agrees
            try:
                claimed = self._row(mirror_id)
            except NotFoundError:
                return None
            if not self._same_topic(claimed, topic):
                return None
            if not self._denial_confirmed(claimed):
                log.warning("mirror of <%s>: a denial notice the publisher does not confirm was ignored",
                            claimed.graph)
                return ""
        with self.db.session() as session:
            row = session.get(Mirror, mirror_id)
            if row is None or not self._same_topic(row, topic):
                return None
            graph = row.graph
            where = (Mirror.id == mirror_id, Mirror.state != "removing")
            if mode == "denied":
                session.execute(update(Mirror).where(*where).values(
                    state="revoked", last_error=f"denied by the publisher: {reason}"[:1024]))
                log.warning("mirror of <%s>: the publisher withdrew access: %s", graph, reason)
            elif mode == "subscribe" and challenge:
                try:
                    seconds = int(lease or self.settings.lease_default)
                except ValueError:
                    return None
                result = session.execute(update(Mirror).where(
                    Mirror.id == mirror_id, Mirror.state.in_(("new", "subscribing", "active", "error"))).values(
                    state="active", last_error="", lease_expires_at=now() + timedelta(seconds=seconds),
                    renew_at=now() + timedelta(seconds=seconds / 2)))
                return challenge if getattr(result, "rowcount", 0) == 1 else None
            else:
                return None  # unsubscribe: we forget a mirror before the hub asks (see _remove)
        if self.settings.mirror_on_revoke == "purge":
            self.forget(graph)
        return ""

    def _denial_confirmed(self, row: Mirror) -> bool:
        """Whether the publisher really refuses us the graph now (a token refused, or 401/403
        on the graph). Unreachable or still readable: not confirmed."""
        try:
            return not self._publisher(row).may_read(row.graph)
        except RemoteCredentialsRefused:
            return True
        except RemoteError:
            return False

    @staticmethod
    def _same_topic(row: Mirror, topic: str) -> bool:
        return topic == row.graph or parse_qs(urlsplit(topic).query).get("graph", [""])[0] == row.graph

    # --- deliveries ------------------------------------------------------------------
    def receive(self, mirror_id: str, body: bytes, signature: str | None) -> int:
        """A delivery to our callback; the HTTP status to answer: 204 applied (or applied
        before), 202 received but not applied (ignored or quarantined: WebSub wants a 2xx,
        a retry would not help), 410 no such mirror (the hub drops the subscription)."""
        received = time.perf_counter()
        with self.db.session() as session:
            row = session.get(Mirror, mirror_id)
            if row is None or row.state in ("revoked", "removing"):
                return 410  # the hub removes the subscription
            secret, jwks, graph = row.hmac_secret, row.jwks, row.graph
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if signature is None or not hmac.compare_digest(signature.encode(), expected.encode()):
            with self.db.session() as session:  # ignored (WebSub §8), counted
                session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                    hmac_failures_total=Mirror.hmac_failures_total + 1))
            log.warning("mirror of <%s>: a delivery with a wrong or missing HMAC was ignored", graph)
            return 202
        try:
            patch = verify_patch_bytes(body, self._trusted(jwks), self.canonicalizer)
        except (PatchVerificationError, InputError) as exc:
            self._quarantine(mirror_id, None, body, f"not verified: {exc}")
            return 202
        if patch.graph != graph:
            self._quarantine(mirror_id, patch.id, body, f"the patch is for <{patch.graph}>, not <{graph}>")
            return 202
        with self._lock(mirror_id):
            applied = self._apply_in_order(mirror_id, patch, body)
        if applied:
            self.metrics.mirror_apply_seconds.observe(time.perf_counter() - received)
        return 204 if applied else 202

    def _apply_in_order(self, mirror_id: str, patch: Patch, body: bytes) -> bool:
        """Whether the patch is in the mirror now (applied, or already before)."""
        if self._known(patch.id):
            return True  # already applied (a repeat after a crash or retry)
        if patch.prev == self._head(patch.graph):
            self._archive(mirror_id, patch)
            return True
        self.catch_up(mirror_id, locked=True)  # a gap: fetch what is missing, in order
        if self._known(patch.id):
            return True
        self._quarantine(mirror_id, patch.id, body, f"unknown prev {patch.prev} (not in the publisher's chain "
                         "after our head): a fork, or a patch of another chain")
        return False

    def publisher_lag(self, mirror_id: str) -> tuple[int, bool]:
        """How far the mirror is behind its publisher, asked of the publisher: the patches its
        archive holds after our head, as (count on the first page, more pages after it).
        Raises what asking raises (the publisher down, access withdrawn)."""
        row = self._row(mirror_id)
        first = next(self._publisher(row).archive_pages(row.graph, self._head(row.graph), self.budget()), {})
        patches = first.get("patches")
        return (len(patches) if isinstance(patches, list) else 0), bool(first.get("next"))

    def reclone(self, mirror_id: str) -> int:
        """Drop the mirror's copy and clone the graph again from the publisher's archive (each
        patch verified, the clone checked against the publisher's content); the number applied.
        An admin's repair for a copy it no longer trusts."""
        with self._lock(mirror_id):
            row = self._row(mirror_id)
            log.warning("mirror of <%s>: re-cloning on an administrator's request", row.graph)
            self.forget(row.graph)
            return self.catch_up(mirror_id, locked=True)

    def catch_up(self, mirror_id: str, locked: bool = False) -> int:
        """Fetch and apply, verified and in order, the patches after our head from the
        publisher's archive, within one round's budget; the number applied (an admin's
        action, or a delivery that found a gap: the maintenance rounds do the rest)."""
        applied, complete = self._catch_up(mirror_id, self.budget(), locked)
        if not complete:  # the maintenance rounds go on from there
            self._caught_up.discard(mirror_id)
            self._wake.set()
        return applied

    def _catch_up(self, mirror_id: str, budget: Budget, locked: bool = False) -> tuple[int, bool]:
        """The patches applied, and whether the mirror reached the end of the publisher's
        archive (else the budget ran out first). Re-clones when the publisher's archive no
        longer holds our head; a clone's check against the publisher's content comes when it
        is complete, however many rounds it took."""
        if not locked:
            with self._lock(mirror_id):
                return self._catch_up(mirror_id, budget, locked=True)
        row = self._row(mirror_id)
        if row.state not in ("new", "subscribing", "active", "error"):
            return 0, True
        trusted = self._trusted(row.jwks)
        head = self._head(row.graph)
        if head is None:
            self._cloning.add(mirror_id)
        publisher = self._publisher(row)
        applied = 0
        try:
            # The next page is fetched while this one is verified and applied; each page's
            # patches are verified one by one in chain order, and what verified is archived
            # and applied in groups (Publisher.archive_verified_chain) before what did not is
            # quarantined.
            for page in prefetched(publisher.archive_pages(row.graph, head, budget)):
                chain: list[Patch] = []
                refused: tuple[str | None, bytes, str] | None = None
                for item in page.get("patches", []):
                    body = str(item["body"]).encode("utf-8")
                    try:
                        patch = verify_patch_bytes(body, trusted, self.canonicalizer)
                    except (PatchVerificationError, InputError) as exc:
                        refused = (item.get("id"), body, f"not verified (catch-up): {exc}")
                        break
                    if patch.graph == row.graph and patch.prev == (chain[-1].id if chain else head):
                        chain.append(patch)  # the next one (the head is tracked here, not re-read)
                    elif not self._known(patch.id):
                        refused = (patch.id, body, f"catch-up: the patch follows {patch.prev}, our head is "
                                   f"{chain[-1].id if chain else head}")
                        break
                if chain:  # (the store is synced before the first page)
                    try:
                        self.publisher.archive_verified_chain(chain, sync=applied == 0)
                    except Exception:  # the ones before the failing patch are in: counted
                        reached = self._head(row.graph)
                        ids = [p.id for p in chain]
                        self._count_applied(mirror_id, ids.index(reached) + 1 if reached in ids else 0)
                        raise
                    head = chain[-1].id
                    applied += len(chain)
                    self._count_applied(mirror_id, len(chain))  # the page's count in one statement
                if refused is not None:
                    self._quarantine(mirror_id, *refused)
                    return applied, True
        except RoundOver:
            if applied == 0 and not self._stop.is_set():  # pages that bring nothing new: an archive that does not end
                s = self.settings
                raise RemoteAnswerError(f"a round's worth of the publisher's archive ({s.mirror_round_pages} pages "
                                        f"or {s.mirror_round_seconds:g} s) held no patch after our head") from None
            return applied, False
        except RemoteRefusedError as exc:
            if exc.status == 404 and head is not None and applied == 0:
                log.warning("mirror of <%s>: the publisher's archive does not hold our head %s: re-cloning",
                            row.graph, head)
                self.forget(row.graph)
                return self._catch_up(mirror_id, budget, locked=True)
            raise
        if mirror_id in self._cloning and head is not None:
            self._check_clone(row, head, publisher)
        self._cloning.discard(mirror_id)
        return applied, True

    def _check_clone(self, row: Mirror, version: str | None, publisher: HubClient) -> None:
        """A fresh clone against the publisher's content at that version: equal MSG multisets
        (the chain replayed here must give what the publisher serves)."""
        from lucid_hub.diff.local import diff_graph

        # Compared at the version our content is at: another replica may have applied the next
        # delivery meanwhile (its followers moved this store on), which is not a disagreement.
        ours_at, statements = self.publisher.content(row.graph)
        version = ours_at or version
        # The whole graph in one answer: more bytes and time than a page may take, still bounded.
        budget = Budget(max(self.settings.mirror_round_seconds, 600.0), 1, 16 * self.settings.mirror_max_answer_bytes)
        theirs = list(ox.parse(publisher.graph_at(row.graph, version, budget), format=ox.RdfFormat.N_TRIPLES))
        ours = list(statement_quads(statements))
        if not diff_graph(ours, theirs, row.graph, self.canonicalizer).is_empty:
            self._record_error(row.id, f"the clone of <{row.graph}> differs from the publisher's content at {version}: "
                       "the publisher's archive and graph disagree", state="error")
            raise PatchVerificationError(f"the clone of <{row.graph}> differs from the publisher's content")
        log.info("mirror of <%s>: cloned at %s and checked against the publisher's content", row.graph, version)

    def _archive(self, mirror_id: str, patch: Patch) -> None:
        self.publisher.archive_verified(patch)
        self._count_applied(mirror_id, 1)
        self._wake.set()  # the maintenance round sends the receipt

    def _count_applied(self, mirror_id: str, count: int) -> None:
        if count:
            with self.db.session() as session:
                session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                    applied_total=Mirror.applied_total + count, last_applied_at=now()))

    def _known(self, patch_id: str) -> bool:
        return self.archive.contains(patch_id)

    def _head(self, graph: str) -> str | None:
        """The mirror's head (None before its first patch)."""
        return self.archive.current_head(graph)

    def _quarantine(self, mirror_id: str, patch_id: str | None, body: bytes, reason: str) -> None:
        log.warning("mirror %s: patch %s quarantined: %s", mirror_id, patch_id or "(unidentified)", reason)
        with self.db.session() as session:
            session.add(Quarantined(mirror_id=mirror_id, patch_id=patch_id, reason=reason[:1024], body=body,
                                    received_at=now()))
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(
                quarantined_total=Mirror.quarantined_total + 1, last_error=reason[:1024]))

    def quarantined(self, mirror_id: str) -> list[dict[str, Any]]:
        with self.db.session() as session:
            return [{"patch_id": q.patch_id, "reason": q.reason, "received_at": q.received_at.isoformat(),
                     "bytes": len(q.body)} for q in session.scalars(
                select(Quarantined).where(Quarantined.mirror_id == mirror_id).order_by(Quarantined.id))]

    def _record_error(self, mirror_id: str, error: str, state: str | None = None) -> None:
        log.warning("mirror %s: %s", mirror_id, error)
        values: dict[str, Any] = {"last_error": error[:1024]}
        if state:
            values["state"] = state
        with self.db.session() as session:
            session.execute(update(Mirror).where(Mirror.id == mirror_id).values(**values))

    def forget(self, graph: str) -> None:
        """Drop the local copy of a mirrored graph: archive, log entries and store."""
        self.archive.forget(graph)
        self.publisher.forget(graph)

    def _lock(self, mirror_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(mirror_id, threading.Lock())

    # --- local fan-out: Server-Sent Events -------------------------------------------
    @property
    def stopped(self) -> bool:
        """Whether the service is stopping (its event streams end)."""
        return self._stop.is_set()
