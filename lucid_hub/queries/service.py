"""Continuous SPARQL query subscriptions (SEPA's model, made durable).

A party subscribes with a query over graphs it may read; the first notification (sequence
0) holds the current results, each later one the rows added and removed by a patch that
changed them. Subscriptions, their current results and their recent notifications are in
the database: they survive restarts, and a client that comes back with the last sequence
it saw gets every notification it missed, or a reset when they are no longer kept.

How a patch reaches the subscriptions: the store tells this service each change it
applies (`GraphStore.watch`), in chain order; the service moves its worker's replica by the
same change, finds the subscriptions whose triple patterns the changed triples can match
(an index by graph and predicate, SEPA's LUTT), re-checks each one's access, evaluates it
in the worker within its time budget and notifies when the results differ. One process of
a hub evaluates (the leader); others take subscriptions as `pending` and serve
notifications from the database.

`QueryService` is the face the web layer sees; behind it `records.py` (the tables),
`index.py` (the live subscriptions and their index), `evaluation.py` (the leader's
evaluation) and `webhooks.py` (callbacks).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from lucid_hub.auth.tokens import Principal, TokenService
from lucid_hub.config import Settings
from lucid_hub.db.models import QuerySubscription
from lucid_hub.db.session import Database
from lucid_hub.db.times import iso, now
from lucid_hub.errors import ForbiddenError, InputError, InputTooLargeError, QueryLimitExceeded, StoreError
from lucid_hub.policy.policy_graph import PolicyService
from lucid_hub.queries import results as rs
from lucid_hub.queries.evaluation import Evaluation
from lucid_hub.queries.orphans import Orphans
from lucid_hub.queries.records import POLL, QueryRecords, iri_list
from lucid_hub.queries.webhooks import Webhooks, webhook_state
from lucid_hub.store.graphs import GraphStore
from lucid_hub.supervisor import Supervisor

REVOCATION_CHECK = 5.0  # seconds between checks of the subscriptions' tokens


class QueryService:
    """Query subscriptions of one hub process (thread-safe)."""

    def __init__(self, settings: Settings, db: Database, store: GraphStore, policies: PolicyService,
                 tokens: TokenService, sync: Callable[[], list[str]], *, evaluates: bool) -> None:
        self.settings = settings
        self.store = store
        self.policies = policies
        self.tokens = tokens
        self.sync = sync  # brings this process's store up to the archive (others' patches)
        self.evaluates = evaluates
        self.records = QueryRecords(settings, db)
        self.orphans = Orphans(settings, db, lambda sid, reason: self._end(sid, reason))
        self.evaluation = Evaluation(settings, store, policies, tokens, self.records, sync, self._wake_channels)
        self._cond = threading.Condition()  # notifications written (wakes channels)
        self._written = 0  # counts notifications written in this process
        self._stop = threading.Event()
        self._started = False
        self._last_poll = 0.0
        self._revocations_checked = 0.0
        self.webhooks = Webhooks(settings, db, self.records.messages, self.evaluation.may_deliver,
                                 self.evaluation.end)

    # --- lifecycle -------------------------------------------------------------------------
    def lead(self) -> None:
        """This process took the leadership over: it is the one to evaluate the subscriptions (`start` follows)."""
        self.evaluates = True

    def start(self, roles: Supervisor) -> None:
        """Evaluate in this process: load the active subscriptions, catch each up with what
        changed while none ran (one notification each), then follow the store's changes (the
        role `query-subscriptions`, woken by each change)."""
        if not self.evaluates or self._started:
            return
        self._started = True
        self.store.watch(self.evaluation.changed)
        self.evaluation.resume_all()
        roles.add("query-subscriptions", self.round, every=POLL, wake=self.evaluation.work)
        sweep_every = min(30.0, max(0.5, self.settings.query_orphan_seconds / 4))
        roles.add("query-orphans", self.orphans.sweep, every=sweep_every)
        self.webhooks.start(roles, "query-webhooks")

    def stop(self) -> None:
        """After the roles stopped: wake what waits for notifications, close the worker."""
        self._stop.set()
        self.evaluation.work.set()
        self.wake_all()
        self.webhooks.stop()
        self.store.unwatch(self.evaluation.changed)
        self.evaluation.close()

    # --- subscribing -----------------------------------------------------------------------
    def subscribe(self, caller: Principal, text: str, *, default: list[str] | None = None,
                  named: list[str] | None = None, alias: str = "", callback: str | None = None,
                  secret: str | None = None) -> dict[str, Any]:
        """Make a subscription; its first notification (sequence 0: the current results)."""
        if len(text.encode()) > self.settings.max_query_bytes:
            raise InputTooLargeError(f"the query is longer than {self.settings.max_query_bytes:,} bytes "
                                     "(LUCID_MAX_QUERY_BYTES)")
        if len(alias) > 255:
            raise InputError("the alias is longer than 255 characters")
        party = caller.party
        self.evaluation.overruns.check(party.account)  # before the database: a refused party's flood costs the least
        held = self.records.held(party.account)
        if held >= self.settings.query_subscriptions_per_party:
            raise QueryLimitExceeded(f"{party.account} holds {held} query subscriptions, the most one party may "
                                     f"hold (LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY); unsubscribe some first")
        sid = "qs-" + secrets.token_hex(12)
        stamp = now()
        row = QuerySubscription(
            id=sid, alias=alias, account=party.account, endpoint_id=party.endpoint_id, groups=" ".join(
                sorted(party.groups)), token_id=caller.jti, query=text,
            default_graphs=None if default is None else json.dumps(default),
            named_graphs=None if named is None else json.dumps(named), form="", state="pending", reason="", refusal="",
            sequence=0, results="", callback=callback, secret=secret, callback_seq=-1, callback_attempts=0,
            callback_next_at=None, callback_error="", created_at=stamp, updated_at=stamp)
        if self.evaluates:
            return self.evaluation.activate(row, new=True)
        self.records.add_pending(row)
        self.records.await_first(sid)
        return self.records.messages(sid, -1)[0][1]

    # --- following the store ---------------------------------------------------------------
    def round(self) -> None:
        """One round of the role: other processes' work (every POLL s), the queued changes,
        and now and then whether the parties may still read what they subscribed to."""
        if self._stop.is_set():
            return
        if time.monotonic() - self._last_poll >= POLL:
            self._last_poll = time.monotonic()
            self.sync()  # other processes' patches reach this store (and come back as changes)
            self._take_pending()
        self.evaluation.drain()
        if time.monotonic() - self._revocations_checked >= REVOCATION_CHECK:
            self._revocations_checked = time.monotonic()
            self.evaluation.check_revocations()

    def _take_pending(self) -> None:
        """Subscriptions other processes took: evaluate them here (or refuse them)."""
        for row in self.records.rows("pending"):
            try:
                self.evaluation.activate(row, new=False)
            except (InputError, ForbiddenError, QueryLimitExceeded, StoreError) as exc:
                self.evaluation.end(row.id, str(exc), refusal=type(exc).__name__)

    # --- ending ----------------------------------------------------------------------------
    def _end(self, sid: str, reason: str) -> None:
        """End a subscription: in the evaluating process at once, elsewhere in its row (the
        leader lets go of it at its next look)."""
        if self.evaluates:
            self.evaluation.end(sid, reason)
        else:
            self.records.end(sid, reason)

    def unsubscribe(self, caller: Principal, sid: str) -> None:
        row = self.describe_row(caller, sid)
        if row.state != "ended":
            self._end(sid, "unsubscribed")

    # --- reading ---------------------------------------------------------------------------
    def describe_row(self, caller: Principal, sid: str) -> QuerySubscription:
        """The subscription, when it is the caller's (404 otherwise: ids are not disclosed)."""
        return self.records.own(caller, sid)

    def lapse(self, caller: Principal, row: QuerySubscription) -> str | None:
        """Why the caller may no longer read the notifications stored for its subscription
        (None while it may), ending the subscription when it lost access to a graph of its
        dataset. Asked at each read: access is decided when notifications are read, not
        only when they were made."""
        graphs = sorted(set(iri_list(row.default_graphs) or []) | set(iri_list(row.named_graphs) or []))
        lost = [g for g in graphs if g not in set(self.policies.readable(caller.party, graphs))]
        if not lost:
            return None
        reason = f"access to {', '.join(lost[:5])} was withdrawn: the subscription ended"
        if row.state != "ended":
            self._end(row.id, reason)
        return f"{caller.account} may no longer read {', '.join(lost[:5])}: {reason}"

    def describe(self, caller: Principal, sid: str) -> dict[str, Any]:
        row = self.describe_row(caller, sid)
        return {"spuid": row.id, "alias": row.alias, "state": row.state, "reason": row.reason or None,
                "query": row.query, "form": row.form, "default-graph-uri": iri_list(row.default_graphs),
                "named-graph-uri": iri_list(row.named_graphs), "sequence": row.sequence,
                "created": iso(row.created_at), "updated": iso(row.updated_at),
                "webhook": webhook_state(row)}

    def state(self, sid: str) -> tuple[str, str, int]:
        """(state, reason, last sequence) of a subscription."""
        return self.records.state(sid)

    def messages(self, sid: str, after: int, limit: int = 100) -> list[tuple[int, dict[str, Any]]]:
        """Notifications after sequence `after` (see `QueryRecords.messages`)."""
        return self.records.messages(sid, after, limit)

    def catch_up(self, sid: str, after: int,
                 caller: Principal) -> tuple[list[tuple[int, dict[str, Any]]], dict[str, Any] | None]:
        """What a channel of `caller` sends next: the notifications after `after` (up to 100:
        ask again), and, once none is left, the SE error that closes the channel when the
        subscription ended, the caller may no longer read its graphs or the channel's token
        was revoked (None: it goes on)."""
        revoked = self.tokens.is_revoked(caller.jti)
        if self.evaluation.up_to_date(sid, after) and not revoked:
            return [], None  # (known in this process: no need to ask the database)
        found = self.messages(sid, after)
        if found:
            lapse = self.lapse(caller, self.describe_row(caller, sid))  # every batch is a read
            if lapse is not None:
                return [], rs.error(410, "subscription_ended", lapse, spuid=sid)
            return found, None
        state, reason, _sequence = self.state(sid)
        if state == "ended":
            return [], rs.error(410, "subscription_ended", reason, spuid=sid)
        if revoked:
            return [], rs.error(401, "invalid_token", "the access token was revoked", spuid=sid)
        return [], None

    # --- waking channels -------------------------------------------------------------------
    def _wake_channels(self) -> None:
        self.notify_channels()
        self.webhooks.wake()

    def notify_channels(self) -> None:
        """Wake the channels (SSE, WebSockets) to look for what is new: this service's
        notifications, or the windowed queries' results a WebSocket observes."""
        with self._cond:
            self._written += 1
            self._cond.notify_all()

    def wake_all(self) -> None:
        """Wake every channel waiting for notifications (e.g. one whose client left)."""
        with self._cond:
            self._cond.notify_all()

    def generation(self) -> int:
        with self._cond:
            return self._written

    def wait(self, generation: int, timeout: float) -> int:
        """Until a notification is written in this process after `generation` (others'
        processes' are seen by polling: at most POLL later), or `timeout`."""
        with self._cond:
            if self._written == generation:
                self._cond.wait(min(timeout, POLL) if not self.evaluates else timeout)
            return self._written
