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

`MirrorService` is the face the hub and the web layer see; behind it, one module each:
`rows.py` (the tables), `intent.py` (subscribing and the verification of intent),
`catchup.py` (verified catch-up and clone), `rounds.py` (maintenance and back-off).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from datetime import datetime
from typing import Any

from lucid_hub.archive import Archive
from lucid_hub.config import Settings
from lucid_hub.db.session import Database
from lucid_hub.errors import InputError, LucidError, PatchVerificationError
from lucid_hub.metrics import Metrics
from lucid_hub.mirror.catchup import Archiver, CatchUp
from lucid_hub.mirror.intent import Subscriptions, publisher_client
from lucid_hub.mirror.lags import EVERY as LAG_EVERY
from lucid_hub.mirror.lags import Lags
from lucid_hub.mirror.receipts import Receipts
from lucid_hub.mirror.registry import MirroredGraphs, _http
from lucid_hub.mirror.rounds import Rounds
from lucid_hub.mirror.rows import MirrorRows
from lucid_hub.outbound import AddressPolicy
from lucid_hub.patch_stream import PatchStream
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.signing import verify_patch_bytes
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

__all__ = ["Archiver", "MirrorService"]


class MirrorService:
    """Subscriptions, verification of intent, deliveries and catch-up of this hub's mirrors."""

    def __init__(self, settings: Settings, db: Database, archive: Archive, publisher: Archiver,
                 canonicalizer: Canonicalizer, mirrored: MirroredGraphs, stream: PatchStream,
                 metrics: Metrics) -> None:
        self.canonicalizer = canonicalizer
        self.mirrored = mirrored
        self.stream = stream
        self.metrics = metrics
        self._stop = threading.Event()
        http = self.http = _http(AddressPolicy.of(settings))
        self.rows = MirrorRows(db)
        self.lags = Lags(db)
        receipts = Receipts(settings.public_url, settings.mirror_receipts)
        self.catchup = CatchUp(settings, self.rows, archive, publisher, canonicalizer, http, self._stop)
        self.subscriptions = Subscriptions(settings, self.rows, http, mirrored, receipts, self.catchup.forget)
        self.rounds = Rounds(settings, self.rows, mirrored, self.subscriptions, self.catchup, receipts, stream, http,
                             self._stop)

    # --- lifecycle -------------------------------------------------------------------
    def start(self, roles: Supervisor) -> None:
        """Keep the mirrors: the role `mirrors` starts each mirror's rounds."""
        self.rounds.start(roles)
        roles.add("mirror-lag", self.ask_lags, every=LAG_EVERY)

    def stop(self) -> None:
        """After the role stopped: rounds in flight end at their next page or chunk of one."""
        self._stop.set()
        self.end_streams()
        self.rounds.stop()

    def end_streams(self) -> None:
        """End every event stream (the server is shutting down); safe in a signal handler."""
        self.stream.end()

    def wake(self) -> None:
        self.rounds.woken.set()

    @property
    def stopped(self) -> bool:
        """Whether the service is stopping (its event streams end)."""
        return self._stop.is_set()

    @property
    def catching_up(self) -> bool:
        """Whether mirrors are still catching up after a start (see `Rounds.catching_up`)."""
        return self.rounds.catching_up

    def stuck(self) -> dict[str, tuple[str, datetime]]:
        """Mirrors whose last round failed (graph -> the reason, failing since)."""
        return self.rounds.stuck()

    # --- the publisher's hub calls us --------------------------------------------------
    def callback_url(self, mirror_id: str) -> str:
        return self.subscriptions.callback_url(mirror_id)

    def verify_intent(self, mirror_id: str, mode: str, topic: str, challenge: str, lease: str | None,
                      reason: str = "") -> str | None:
        """The answer to a hub's GET on our callback (see `Subscriptions.verify_intent`)."""
        return self.subscriptions.verify_intent(mirror_id, mode, topic, challenge, lease, reason)

    def receive(self, mirror_id: str, body: bytes, signature: str | None) -> int:
        """A delivery to our callback; the HTTP status to answer: 204 applied (or applied
        before), 202 received but not applied (ignored or quarantined: WebSub wants a 2xx,
        a retry would not help), 410 no such mirror (the hub drops the subscription)."""
        received = time.perf_counter()
        keys = self.rows.delivery_keys(mirror_id)
        if keys is None:
            return 410  # the hub removes the subscription
        secret, jwks, graph = keys
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if signature is None or not hmac.compare_digest(signature.encode(), expected.encode()):
            self.rows.count_hmac_failure(mirror_id)  # ignored (WebSub §8), counted
            log.warning("mirror of <%s>: a delivery with a wrong or missing HMAC was ignored", graph)
            return 202
        try:
            patch = verify_patch_bytes(body, self.catchup.trusted(jwks), self.canonicalizer)
        except (PatchVerificationError, InputError) as exc:
            self.rows.quarantine(mirror_id, None, body, f"not verified: {exc}")
            return 202
        if patch.graph != graph:
            self.rows.quarantine(mirror_id, patch.id, body, f"the patch is for <{patch.graph}>, not <{graph}>")
            return 202
        with self.catchup.lock(mirror_id):
            applied = self._apply_in_order(mirror_id, patch, body)
        if applied:
            self.metrics.mirror_apply_seconds.observe(time.perf_counter() - received)
        return 204 if applied else 202

    def _apply_in_order(self, mirror_id: str, patch: Patch, body: bytes) -> bool:
        """Whether the patch is in the mirror now (applied, or already before)."""
        if self.catchup.known(patch.id):
            return True  # already applied (a repeat after a crash or retry)
        if patch.prev == self.catchup.head(patch.graph):
            self.catchup.archive_one(mirror_id, patch)
            self.rounds.woken.set()  # the maintenance round sends the receipt
            return True
        self.catch_up(mirror_id, locked=True)  # a gap: fetch what is missing, in order
        if self.catchup.known(patch.id):
            return True
        self.rows.quarantine(mirror_id, patch.id, body, f"unknown prev {patch.prev} (not in the publisher's "
                             "chain after our head): a fork, or a patch of another chain")
        return False

    # --- an admin's actions ------------------------------------------------------------
    def publisher_lag(self, mirror_id: str) -> tuple[int, bool]:
        """How far the mirror is behind its publisher, asked of the publisher: the patches its
        archive holds after our head, as (count on the first page, more pages after it).
        Raises what asking raises (the publisher down, access withdrawn)."""
        row = self.rows.get(mirror_id)
        pages = publisher_client(row, self.http).archive_pages(
            row.graph, self.catchup.head(row.graph), self.catchup.budget())
        first = next(pages, {})
        patches = first.get("patches")
        lag = self.lags.record(mirror_id, len(patches) if isinstance(patches, list) else 0, bool(first.get("next")))
        return lag.patches, lag.more

    def ask_lags(self) -> None:
        """Ask each active mirror's publisher how far behind it is (the role `mirror-lag`); a
        publisher that does not answer leaves the last word (its failing rounds say why)."""
        for mirror_id, state, _renew_at, _jwks in self.rows.for_rounds():
            if state != "active":
                self.lags.forget(mirror_id)
                continue
            try:
                self.publisher_lag(mirror_id)
            except LucidError as exc:
                log.info("mirror %s: its publisher did not say how far behind it is: %s", mirror_id, exc)

    def reclone(self, mirror_id: str) -> int:
        """Drop the mirror's copy and clone the graph again from the publisher's archive (each
        patch verified, the clone checked against the publisher's content); the number applied.
        An admin's repair for a copy it no longer trusts."""
        with self.catchup.lock(mirror_id):
            row = self.rows.get(mirror_id)
            log.warning("mirror of <%s>: re-cloning on an administrator's request", row.graph)
            self.forget(row.graph)
            return self.catch_up(mirror_id, locked=True)

    def catch_up(self, mirror_id: str, locked: bool = False) -> int:
        """Fetch and apply, verified and in order, the patches after our head from the
        publisher's archive, within one round's budget; the number applied (an admin's
        action, or a delivery that found a gap: the maintenance rounds do the rest)."""
        applied, complete = self.catchup.run(mirror_id, self.catchup.budget(), locked)
        if not complete:  # the maintenance rounds go on from there
            self.rounds.again(mirror_id)
        return applied

    def quarantined(self, mirror_id: str) -> list[dict[str, Any]]:
        return self.rows.quarantined(mirror_id)

    def forget(self, graph: str) -> None:
        """Drop the local copy of a mirrored graph: archive, log entries and store."""
        self.catchup.forget(graph)
