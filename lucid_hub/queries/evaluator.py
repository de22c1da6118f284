"""The hub process's side of the continuous-query worker (`queries/query_process.py`): which graphs
it holds, which subscriptions it knows, and a new worker, brought back to the same state,
whenever one had to be killed at a subscription's time budget.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from lucid_hub.errors import ForbiddenError, InputError, QueryLimitExceeded, RateLimitedError, StoreError
from lucid_hub.guard import Frame, GuardFailed, GuardProcess
from lucid_hub.store.graphs import GraphStore, StoreChange

WORKER = "lucid_hub.queries.query_process:handle"
WINDOW_STORES = 4  # window contents a worker keeps (it is told: `keep`), for the windows alike evaluated next
# Loading a graph is the store's size, not a subscription's work: it gets this long.
LOAD_TIMEOUT = 600.0


@dataclass(frozen=True)
class Registration:
    """What the worker read from a subscription's query."""

    form: str  # select, ask, construct
    default: list[str]
    named: list[str]
    patterns: list[list[str | None]]
    incremental: bool = False  # conjunctive: a change is matched against the store, not only the index
    delta: bool = False  # its added and removed rows come from the patch (no evaluation)

    @property
    def graphs(self) -> set[str]:
        return set(self.default) | set(self.named)


class BudgetExceeded(Exception):
    """A subscription's evaluation overran its time budget (the worker was killed)."""


class Refusal(Exception):
    """The worker refused a query: `kind` as the SPARQL worker reports it, and why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def as_error(self) -> Exception:
        if self.kind == "too-large":
            return QueryLimitExceeded(self.message)
        if self.kind == "forbidden":
            return ForbiddenError(self.message)
        if self.kind == "internal":
            return StoreError(f"the continuous-query worker failed: {self.message}")
        return InputError(self.message)


class Overruns:
    """Parties whose new queries overran the budget lately. Each overrun kills a worker (and
    costs a core for the budget), so a party whose query overran waits 2 s before its next new
    query is tried, and twice as long after each further overrun (LUCID_QUERY_BUDGET x 60 at
    most); a query that completes ends the wait. The others' queries never wait for it."""

    def __init__(self, budget: float) -> None:
        self.most = max(60.0, 60.0 * budget)
        self._lock = threading.Lock()
        self._parties: dict[str, tuple[int, float]] = {}  # account -> (overruns in a row, refused until)

    def check(self, account: str) -> None:
        """RateLimitedError while the party waits after an overrun."""
        with self._lock:
            count, until = self._parties.get(account, (0, 0.0))
        left = until - time.monotonic()
        if left > 0:
            raise RateLimitedError(f"{account}'s last {'query' if count == 1 else f'{count} queries'} overran the "
                                   f"time budget (LUCID_QUERY_BUDGET): its next new query is taken in "
                                   f"{math.ceil(left)} s", math.ceil(left))

    def overran(self, account: str) -> None:
        with self._lock:
            count = self._parties.get(account, (0, 0.0))[0] + 1
            self._parties[account] = (count, time.monotonic() + min(self.most, 2.0 ** count))

    def standing(self) -> dict[str, tuple[int, float]]:
        """Each party whose last queries overran: (overruns in a row, seconds it still waits)."""
        with self._lock:
            parties = dict(self._parties)
        at = time.monotonic()
        return {account: (count, max(0.0, until - at)) for account, (count, until) in parties.items()}

    def completed(self, account: str) -> None:
        with self._lock:
            self._parties.pop(account, None)


class QueryEngine:
    """The worker process and the state it must hold; one caller at a time (the service's
    thread, or a subscribing request holding `lock`)."""

    worker_target = WORKER  # the guard's entry point (the rules' worker extends this one)

    def __init__(self, store: GraphStore, memory_mb: int, budget: float, max_result_bytes: int,
                 base: str | None = None) -> None:
        self.store = store
        self.base = base  # what relative IRIs in a query resolve against
        self.memory_mb = memory_mb
        self.budget = budget
        self.max_result_bytes = max_result_bytes
        self.lock = threading.RLock()
        self._worker: GuardProcess | None = None
        self._graphs: dict[str, str | None] = {}  # graph -> version the worker holds
        self._loaded: dict[str, int] = {}  # graph -> the store's generation when it was loaded
        self._registered: dict[str, tuple[str, list[str], list[str] | None, list[str] | None]] = {}
        self._window_keys: list[str] = []  # the window contents the worker holds, oldest first

    # --- the worker ------------------------------------------------------------------------
    def _call(self, header: dict[str, Any], body: bytes = b"", timeout: float | None = None) -> Frame:
        if self._worker is None or not self._worker.alive():
            self._start()
        assert self._worker is not None
        try:
            answer = self._worker.call(Frame(header, body), timeout or self.budget)
        except GuardFailed as failure:
            self._worker.kill()
            self._worker = None
            raise BudgetExceeded(failure.reason) from None
        if answer.header.get("status") != "ok":
            raise Refusal(str(answer.header.get("kind")), str(answer.header.get("message", "")))
        return answer

    def _start(self) -> None:
        """A new worker, given every graph and registration the last one held."""
        self._worker = GuardProcess(self.worker_target, self.memory_mb, {"LUCID_GUARD_NO_NETWORK": "1"})
        graphs, self._graphs = list(self._graphs), {}
        for graph in graphs:
            # Keeps the generation it was loaded at before: subscriptions were evaluated on
            # that, and a queued change must not look stale to them (it reloads instead).
            self._load(graph, stamp=False)
        self._restore()

    def _restore(self) -> None:
        """Register again, in a new worker, what the last one held."""
        for sid, (text, readable, default, named) in list(self._registered.items()):
            self._call({"op": "register", "id": sid, "readable": readable, "default": default, "named": named,
                        "base": self.base}, text.encode())

    def _load(self, graph: str, *, stamp: bool = True) -> None:
        generation, version, lines = self.store.triples(graph)
        self._call({"op": "load", "graph": graph}, "\n".join(lines).encode(), timeout=LOAD_TIMEOUT)
        self._graphs[graph] = version
        if stamp or graph not in self._loaded:
            self._loaded[graph] = generation

    def close(self) -> None:
        with self.lock:
            if self._worker is not None:
                self._worker.kill()
                self._worker = None

    # --- graphs ----------------------------------------------------------------------------
    def ensure(self, graphs: set[str]) -> None:
        """Load the graphs the worker does not hold yet (as the store holds them now)."""
        with self.lock:
            for graph in sorted(graphs - self._graphs.keys()):
                self._load(graph)

    def apply(self, change: StoreChange, candidates: set[str] | None = None) -> tuple[str, set[str], dict[str, Any]]:
        """Move a held graph by one store change, and say which of the `candidates` (the
        subscriptions the index matched) it can affect (worker.py, `_affected`), and for
        those on the delta path their added and removed rows (worker.py, `_delta_rows`):
        "applied";
        "stale" when the graph was
        loaded after the change was made (it holds it already: nothing to evaluate);
        "reloaded" when the change was not the graph's next one (loaded again from the
        store: every subscription on it may have changed); "ignored" when not held."""
        with self.lock:
            if change.graph not in self._graphs:
                return "ignored", set(), {}
            if change.generation <= self._loaded[change.graph]:
                return "stale", set(), {}
            if change.patch is None:
                self._call({"op": "change", "graph": change.graph, "drop": True}, timeout=LOAD_TIMEOUT)
                self._graphs[change.graph] = None
                return "reloaded", set(), {}
            if self._graphs[change.graph] != change.prev:
                self._load(change.graph)
                return "reloaded", set(), {}
            body = json.dumps({"removed": change.removed, "added": change.added}).encode()
            answer = self._call({"op": "change", "graph": change.graph, "candidates": sorted(candidates or ()),
                                 "budget": self.budget}, body, timeout=LOAD_TIMEOUT)
            self._graphs[change.graph] = change.patch
            deltas: dict[str, Any] = json.loads(answer.body) if answer.body else {}
            return "applied", set(answer.header.get("affected") or ()), deltas

    # --- subscriptions ---------------------------------------------------------------------
    def register(self, sid: str, text: str, readable: list[str], default: list[str] | None,
                 named: list[str] | None, *, default_graph: str | None = None) -> Registration:
        """Register a subscription; without a dataset (the protocol's or FROM), its default
        graph is `default_graph` when the hub gives the party one, else every readable graph."""
        with self.lock:
            answer = self._call({"op": "register", "id": sid, "readable": readable, "default": default,
                                 "named": named, "base": self.base,
                                 "default_graph": [default_graph] if default_graph else None}, text.encode()).header
            # Kept as the party asked, so that a new worker registers it the same way.
            self._registered[sid] = (text, readable, answer["default"], answer["named"])
            return Registration(answer["form"], answer["default"], answer["named"], answer["patterns"],
                                bool(answer.get("incremental")), bool(answer.get("delta")))

    def evaluate(self, sid: str) -> dict[str, Any]:
        """The subscription's results on the graphs as the worker holds them now."""
        with self.lock:
            answer = self._call({"op": "evaluate", "id": sid, "max_bytes": self.max_result_bytes})
            result: dict[str, Any] = json.loads(answer.body)
            return result

    def window(self, text: str, window: str, changes: list[str], state: dict[str, list[str]], *,
               default: list[str] | None = None, named: list[str] | None = None,
               key: str | None = None) -> dict[str, Any]:
        """A windowed query's results over its window's statements (graph `window`) and other
        graphs (`state`): the dataset's default graph merges `default` (else `window`), its
        named graphs are `named` (else `window` and the states) (query_process.py, `_window`).
        With `key` (naming that content), a worker that was sent it last time is not sent it
        again: windows alike are loaded once. Each query is still one call, on its budget."""
        with self.lock:
            header = {"op": "window", "text": text, "window": window, "max_bytes": self.max_result_bytes,
                      "base": self.base, "default": default, "named": named, "key": key, "keep": WINDOW_STORES}
            answer: Frame | None = None
            if key is not None and key in self._window_keys and self._worker is not None and self._worker.alive():
                try:
                    answer = self._call(header)
                except Refusal as refusal:
                    if refusal.kind != "reload":
                        raise
            if answer is None:
                if key in self._window_keys:
                    self._window_keys.remove(key)
                answer = self._call(header, json.dumps({"changes": changes, "state": state}).encode())
                if key is not None:  # the worker keeps the last WINDOW_STORES contents, as this list does
                    self._window_keys = [*self._window_keys, key][-WINDOW_STORES:]
            result: dict[str, Any] = json.loads(answer.body)
            return result

    def forget(self, sid: str) -> None:
        with self.lock:
            if self._registered.pop(sid, None) is not None and self._worker is not None:
                self._call({"op": "forget", "id": sid})

    def current(self, graphs: set[str]) -> None:
        """Hold `graphs` as the store holds them now: those held at another version than the
        store's are loaded again (for a worker no change follower keeps current: a trial)."""
        with self.lock:
            stale = {g for g in graphs & self._graphs.keys() if self._graphs[g] != self.store.version(g)}
            self.unused_graphs(set(self._graphs) - stale)
            self.ensure(graphs)

    def unused_graphs(self, needed: set[str]) -> None:
        """Drop the graphs no subscription reads any more."""
        with self.lock:
            for graph in set(self._graphs) - needed:
                del self._graphs[graph]
                del self._loaded[graph]
                if self._worker is not None:
                    self._call({"op": "change", "graph": graph, "drop": True}, timeout=LOAD_TIMEOUT)
