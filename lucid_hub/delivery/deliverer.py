"""Delivery of each graph's patches to each WebSub subscription, in chain order, signed:
claiming, the ACL re-check, sending, retries with backoff, fairness between clients and hosts.

Delivery is driven by a cursor per subscription (`delivered_seq`, the chain position the
callback last acknowledged), not by the log's offsets: the next POST is always the patch at
seq + 1, so a patch never overtakes an earlier one and retries keep the order. Pending
patches go out in batches and cursor advances are group-committed, so a crash repeats at
most the batch in flight (ids the subscriber has already applied). New patches wake the
deliverer; a scan every second catches retries that fall due and leases that end.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import or_, select, update

from lucid_hub import resources
from lucid_hub.archive import Archive, ChainLink
from lucid_hub.config import Settings
from lucid_hub.db.models import Subscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import aware, now
from lucid_hub.delivery.fairness import Capacity, HostSpeed, LaneLimits, callback_host
from lucid_hub.delivery.records import SUBS, Outcome, Recorder, Task, deliveries_by_minute
from lucid_hub.delivery.sender import AsyncSender
from lucid_hub.errors import InputError, NotFoundError
from lucid_hub.metrics import Metrics
from lucid_hub.outbound import AddressPolicy
from lucid_hub.patch_stream import PatchStream
from lucid_hub.policy.decisions import Action, Decision, Party
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rdf.serialization import write_patch
from lucid_hub.supervisor import Supervisor
from lucid_hub.websub.callbacks import parse_cidrs
from lucid_hub.websub.protocol import MEDIA_TYPES

log = logging.getLogger(__name__)
BATCH = 100  # patches one subscription gets in a row before others have their turn
CANDIDATES = 1000  # due subscriptions a round considers (those it cannot start wait for the next)
# The delivery path uses SQLAlchemy Core on the tables (no ORM identity map per delivery).




def _spans(rows: Any) -> list[tuple[str, int, int]]:
    """(graph, after, up to) seq ranges covering every row's next BATCH patches: one range
    where cursors are close together, several where they are far apart."""
    spans: list[tuple[str, int, int]] = []
    for graph, cursor in sorted({(r.graph, r.delivered_seq) for r in rows}):
        if spans and spans[-1][0] == graph and cursor <= spans[-1][2]:
            spans[-1] = (graph, spans[-1][1], cursor + BATCH)
        else:
            spans.append((graph, cursor, cursor + BATCH))
    return spans


class Decider(Protocol):
    def decide(self, party: Party, graph: str, action: Action) -> Decision: ...


class Deliverer:
    """The delivery of one process (`serve`, or a `worker`): rounds of claimed subscriptions."""

    def __init__(self, settings: Settings, db: Database, archive: Archive, canonicalizer: Canonicalizer,
                 policies: Decider, *, deny: Callable[[str, str, str], None],
                 stream: PatchStream | None = None, worker_id: str | None = None,
                 metrics: Metrics | None = None) -> None:
        """`deny(callback, topic, reason)` tells a callback its subscription ended (the hub's
        notices); `stream`: the patch stream of this process, whose patches wake the
        deliverer at once (without it, as in a delivery worker, rounds come every second
        and at the worker's log records)."""
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.db = db
        self.canonicalizer = canonicalizer
        self.policies = policies
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.claim_seconds = settings.delivery_claim_seconds
        # Every connection to a callback checks the address it connects to (lucid_hub.outbound).
        policy = AddressPolicy(dev_mode=settings.dev_mode, allowed=parse_cidrs(settings.callback_allow_cidrs),
                               ca_file=settings.outbound_ca_file)
        # Deliveries run in a fast and a slow lane, shared out by client and host
        # (delivery/fairness.py), all on one event loop (delivery/sender.py); verifications
        # and notices have threads of their own (hub/).
        fast = LaneLimits(settings.delivery_threads, settings.delivery_per_client, settings.delivery_per_host)
        slow = LaneLimits(settings.delivery_slow_threads, max(1, settings.delivery_slow_threads // 2),
                          max(1, settings.delivery_slow_threads // 2))
        self.speed = HostSpeed(settings.delivery_slow_seconds)
        self.capacity = Capacity(fast, slow, self.speed)
        self.sender = AsyncSender(policy, timeout=settings.delivery_timeout, per_host=fast.per_host + slow.per_host,
                                  user_agent="lucid-hub WebSub hub", http2=settings.delivery_http2)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._generation = 0  # of the patch stream, as the role `websub-watch` last saw it
        self._in_flight: set[int] = set()  # claimed here, outcome not yet recorded
        self._lock = threading.Condition()
        self._expired_at = 0.0
        # Graphs with active subscriptions: a patch of another graph wakes nobody. Without
        # this, every patch a mirror catches up on started a delivery round (a write
        # statement): catch-up ran at 266 patches/s, 794/s without.
        self._subscribed: set[str] = set()
        self._recorder = Recorder(self)
        self._watch_ended = threading.Event()
        self.stream = stream
        self.archive = archive
        self.deny = deny

    def subscribed(self, graph: str) -> None:
        """A subscription to `graph` was recorded: its patches wake the deliverer from now on."""
        self._subscribed = self._subscribed | {graph}
        self._wake.set()

    # --- subscription requests ------------------------------------------------------
    def _watch(self) -> bool:
        """A round of the role `websub-watch`: wait a second at most for the patch stream to move;
        a new patch wakes the deliverer if its graph has subscribers (the set is refreshed every
        second, so other processes' subscriptions count too). Always more to watch."""
        stream = self.stream
        if stream is None or stream.ended or self._stop.is_set() or self._watch_ended.is_set():
            return False
        self._generation, graphs = stream.changes(self._generation, 1.0, stopped=self._watch_ended.is_set)
        if graphs is None or not graphs.isdisjoint(self._subscribed):
            self._wake.set()
        return True

    # --- delivery -------------------------------------------------------------------
    def start(self, roles: Supervisor) -> None:
        """Deliver in the background: the roles `websub-delivery` (a round when woken, at least
        every second) and `websub-watch` (which wakes it when a subscribed graph moves)."""
        if roles.role("websub-delivery") is not None:
            return
        roles.add("websub-delivery", self.deliver_due, every=1.0, backoff_max=5.0, wake=self._wake)
        if self.stream is not None:
            self._generation = self.stream.generation()
            self._watch_ended.clear()
            roles.add("websub-watch", self._watch, every=1.0, backoff_max=5.0, interrupt=self._end_watch)

    def _end_watch(self) -> None:
        """The roles stop: the watch's wait on the patch stream ends now, not after its second
        (it was nearly all of a hub's stop: 0.65 of 0.85 s)."""
        self._watch_ended.set()
        if self.stream is not None:
            self.stream.interrupt()

    def drain(self) -> None:
        """Start no more deliveries: each task stops after its POST in flight (which is then
        recorded as usual). Safe in a signal handler; `stop` follows."""
        self._stop.set()
        self._wake.set()

    def stop(self) -> None:
        """After the roles stopped: the deliveries in flight finish and are recorded, and the
        claims not started are released."""
        self.drain()
        self.sender.stop()  # deliveries in flight finish (each after its POST in flight)
        self._recorder.stop()  # and are recorded
        try:  # what was claimed but not started is free for other processes at once
            with self.db.write() as conn:
                conn.execute(update(SUBS).where(SUBS.c.claimed_by == self.worker_id)
                             .values(claimed_by=None, claimed_until=None))
        except Exception:  # the claims run out by themselves
            log.exception("releasing this process's claims failed")

    def deliver_due(self) -> list[int]:
        """Start a delivery round: the subscriptions with something due that no process is
        delivering to, as many as the lanes' shares allow (fairness.Capacity), are claimed
        (one UPDATE … RETURNING), their pending patches read (one query per graph), and their
        POSTs handed to a thread of their lane. Returns the ids started.

        A few statements a round, whatever the number of subscriptions: py-spy showed the
        per-subscription reads and commits of the first version as most of a delivery's cost."""
        s = SUBS.c
        if self._stop.is_set():
            return []  # draining: what is due stays due for the next process
        with self._lock:
            busy = list(self._in_flight)
        at = now()
        with self.db.write() as conn:
            if time.monotonic() - self._expired_at >= 1.0:  # leases end in seconds, not rounds
                conn.execute(update(SUBS).where(s.state == "active", s.lease_expires_at <= at).values(state="expired"))
                self._subscribed = set(conn.execute(select(s.graph).where(s.state == "active").distinct()).scalars())
                self._expired_at = time.monotonic()
            length = Archive.length_of(s.graph)
            due = (s.state == "active", s.next_attempt_at <= at, s.lease_expires_at > at, s.delivered_seq < length,
                   or_(s.claimed_until.is_(None), s.claimed_until < at))
            candidates = select(s.id, s.endpoint_id, s.callback).where(*due).order_by(s.next_attempt_at).limit(
                CANDIDATES)
            if busy:  # (a claim of ours that ran out while its outcome is being recorded)
                candidates = candidates.where(s.id.not_in(busy))
            lanes: dict[int, str] = {}
            for candidate in conn.execute(candidates):
                lane = self.capacity.reserve(candidate.id, candidate.endpoint_id, callback_host(candidate.callback))
                if lane is not None:
                    lanes[candidate.id] = lane
            if not lanes:
                return []
            claim = update(SUBS).where(s.id.in_(list(lanes)), *due)
            rows = conn.execute(claim.values(
                claimed_by=self.worker_id, claimed_until=at + timedelta(seconds=self.claim_seconds)).returning(
                s.id, s.graph, s.callback, s.secret, s.media_type, s.account, s.endpoint_id, s.groups,
                s.delivered_seq, s.attempts)).all()
            for sid in set(lanes) - {r.id for r in rows}:  # taken by another process meanwhile
                self.capacity.release(sid)
                del lanes[sid]
        # The patches the claimed cursors need: one range query per graph (subscribers of a
        # graph are usually at the same place).
        patches = self.archive.spans(_spans(rows))
        tasks = []
        for r in rows:
            pending: list[ChainLink] = []
            for seq in range(r.delivered_seq + 1, r.delivered_seq + BATCH + 1):
                patch = patches.get((r.graph, seq))
                if patch is None:  # the end of the chain (or not in the archive yet: next round)
                    break
                pending.append(patch)
            tasks.append(Task(r.id, r.graph, r.callback, r.secret, r.media_type,
                               Party(r.account, r.endpoint_id, frozenset(r.groups.split())), r.delivered_seq,
                               r.attempts, pending, lanes[r.id], callback_host(r.callback)))
        with self._lock:
            self._in_flight.update(task.sid for task in tasks)
        retries = sum(1 for task in tasks if task.attempts)
        if retries:
            self.metrics.delivery_retries.inc(retries)
        for task in tasks:
            self.sender.submit(self._deliver(task))
        return [task.sid for task in tasks]

    def wait_for(self, sids: list[int]) -> None:
        """Until the deliveries started for `sids` are recorded (or failed)."""
        with self._lock:
            while self._in_flight.intersection(sids):
                self._lock.wait(1.0)

    def _finished(self, sids: list[int]) -> None:
        """The recorder wrote these subscriptions' outcomes: they may be delivered again."""
        with self._lock:
            self._in_flight.difference_update(sids)
            self._lock.notify_all()
        for sid in sids:
            self.capacity.release(sid)
        self._wake.set()  # more may be due (these ones, after their batch)

    def _extend_claim(self, sid: int) -> bool:
        """Renew this process's claim on a subscription; False if it has lost it meanwhile."""
        with self.db.write() as conn:
            result = conn.execute(update(Subscription).where(
                Subscription.id == sid, Subscription.claimed_by == self.worker_id)
                .values(claimed_until=now() + timedelta(seconds=self.claim_seconds)))
            return bool(result.rowcount == 1)

    async def _deliver(self, task: Task) -> None:
        """POST the task's patches in chain order; the outcome goes to the recorder."""
        outcome = Outcome(task, task.start)
        try:
            await self._send(task, outcome)
        except Exception as exc:  # recorded as a failed attempt, retried with backoff
            log.exception("delivery to subscription %s failed", task.sid)
            outcome.error = f"internal error: {type(exc).__name__}"
        finally:
            self._recorder.record(outcome)

    async def _send(self, task: Task, outcome: Outcome) -> None:
        claimed = time.monotonic()
        for patch in task.patches:
            if self._stop.is_set() or patch.seq != outcome.reached + 1:
                return
            if time.monotonic() - claimed > self.claim_seconds / 2:  # a long batch keeps its claim
                if not await asyncio.to_thread(self._extend_claim, task.sid):
                    return
                claimed = time.monotonic()
            decision = self.policies.decide(task.party, task.graph, "read")
            if not decision.allowed:
                self.metrics.deliveries.labels("denied").inc()
                outcome.cancelled = decision.reason  # the callback is told once that is recorded
                return
            posted = time.perf_counter()
            status, error = await self._post(task.callback, task.graph, task.media_type, task.secret, patch.id,
                                             patch.prev, patch.body)
            took = time.perf_counter() - posted
            self.metrics.delivery_seconds.observe(took)
            self.speed.observe(task.host, took)
            if 200 <= status < 300:
                self.metrics.deliveries.labels("delivered").inc()
                outcome.reached = patch.seq
                if task.lane == "fast" and self.speed.is_slow(task.host):
                    return  # the rest of the batch goes to the slow lane, next round
            elif status == 410:
                self.metrics.deliveries.labels("gone").inc()
                outcome.gone = True
                return
            else:
                self.metrics.deliveries.labels("error").inc()
                outcome.error = error
                return

    async def _post(self, callback: str, graph: str, media_type: str, secret: str | None, patch_id: str,
                    prev: str | None, body: bytes) -> tuple[int, str]:
        if media_type != RDF_PATCH:
            body = write_patch(read_rdf_patch(body, self.canonicalizer), MEDIA_TYPES[media_type])
        headers = {"Content-Type": media_type, "Link": resources.discovery_links(self.settings.public_url, graph),
                   "X-Lucid-Patch-Id": patch_id, "X-Lucid-Prev": prev or "", "X-Lucid-Graph": graph}
        return await self.sender.post(callback, body, headers, secret)

    # --- administration -------------------------------------------------------------
    def redeliver(self, sid: int, from_patch: str | None) -> None:
        """Deliver again from `from_patch` (default: the next undelivered one); reactivates."""
        with self.db.session() as session:
            row = session.get(Subscription, sid)
            if row is None:
                raise NotFoundError(f"no subscription {sid}")
            if from_patch:
                try:
                    row.delivered_seq = self.archive.position(from_patch, row.graph) - 1
                except NotFoundError:
                    raise InputError(f"patch {from_patch} is not in the history of <{row.graph}>") from None
            if aware(row.lease_expires_at) <= now():
                raise InputError("the subscription's lease has ended; the subscriber must subscribe again")
            row.state, row.attempts, row.next_attempt_at = "active", 0, now()
        self._wake.set()

    def by_minute(self, since: datetime) -> dict[datetime, tuple[int, int]]:
        """(delivered, failed) of each minute from `since` on, by every delivering process."""
        return deliveries_by_minute(self.db, since)

    def wake(self) -> None:
        """Look for due deliveries now (e.g. after a publisher's notice)."""
        self._wake.set()
