"""SPARQL for one hub process, run in guard processes against snapshots of its store.

SPARQL text is never parsed or evaluated in the hub process: a query nested 5,000 levels
deep overflowed the parser's stack (SIGSEGV), 10 KB of nested property paths took the
parser 37 s, and pyoxigraph calls SERVICE endpoints over HTTP. Each query or update runs
in a worker process (`store/sparql_worker.py`) against a read-only checkpoint of the store
(`GraphStore.snapshot`), under a time limit that holds whether or not the client is still
there: at the deadline the worker is killed, the request answered 422, and a new worker
started for the next one. A memory limit bounds each worker; a result size limit bounds
what comes back. One party holds at most half of the workers, so one party's heavy queries
wait for that party's own turn, not everybody's.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from lucid_hub.config import Settings
from lucid_hub.errors import (
    ConflictError,
    InputError,
    InputTooLargeError,
    NotAcceptableError,
    QueryLimitExceeded,
    StoreError,
)
from lucid_hub.guard import Frame, GuardFailed, GuardProcess
from lucid_hub.rdf.syntax import EXPANSION
from lucid_hub.store.graphs import GraphStore

WORKER = "lucid_hub.store.sparql_worker:handle"


@dataclass(frozen=True)
class UpdateEdits:
    """What an update does: per written graph its edit; the graphs it leaves deleted from
    the Graph Store (DROP GRAPH, MOVE's source) and the ones it writes otherwise."""

    graphs: dict[str, GraphEdit]
    dropped: list[str]
    written: list[str]


@dataclass(frozen=True)
class GraphEdit:
    """What an update does to one graph: statements removed and added, computed on the
    graph at `version` (existing blank nodes appear as the store's skolem IRIs)."""

    version: str | None
    removed: list[str]
    added: list[str]


class SparqlGuard:
    """A pool of SPARQL worker processes for one hub process (thread-safe)."""

    def __init__(self, settings: Settings, store: GraphStore) -> None:
        self.store = store
        self.timeout = settings.sparql_timeout
        self.memory_mb = settings.sparql_memory_mb
        self.max_result_bytes = settings.max_result_bytes
        self.max_data_bytes = settings.max_update_bytes * EXPANSION
        self.per_party = max(1, settings.sparql_workers // 2)
        self._workers: list[GuardProcess | None] = [None] * settings.sparql_workers
        self._idle = list(range(settings.sparql_workers))
        self._parties: Counter[Any] = Counter()
        self._cond = threading.Condition()
        self._closed = False
        # Requests stopped at a limit (for the operator's metrics).
        self.stopped = 0

    # --- the pool ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _worker(self, party: Hashable, deadline: float) -> Iterator[GuardProcess]:
        with self._cond:
            while True:
                if self._closed:
                    raise StoreError("the hub is stopping")
                if self._idle and self._parties[party] < self.per_party:
                    slot = self._idle.pop()
                    self._parties[party] += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.stopped += 1
                    raise QueryLimitExceeded(f"no SPARQL worker became free within {self.timeout:g} s "
                                             "(LUCID_SPARQL_TIMEOUT); try again later")
                self._cond.wait(remaining)
        worker = self._workers[slot]
        if worker is None or not worker.alive():
            worker = self._workers[slot] = GuardProcess(WORKER, self.memory_mb, {"LUCID_GUARD_NO_NETWORK": "1"})
        try:
            yield worker
        finally:
            if not worker.alive():  # stopped at a limit (or crashed): the next request starts a new one
                self._workers[slot] = None
            with self._cond:
                self._idle.append(slot)
                self._parties[party] -= 1
                if self._parties[party] <= 0:
                    del self._parties[party]
                self._cond.notify_all()

    def _call(self, worker: GuardProcess, request: Frame, deadline: float, what: str) -> Frame:
        try:
            answer = worker.call(request, max(0.001, deadline - time.monotonic()))
        except GuardFailed as failure:
            worker.kill()  # the work stops now, whether or not anybody waits for its answer
            if failure.reason.startswith("could not start"):  # the hub's configuration, not the request
                raise StoreError(f"a SPARQL worker {failure.reason} (is LUCID_SPARQL_MEMORY_MB, "
                                 f"{self.memory_mb} MiB of address space, too low?)") from failure
            self.stopped += 1
            if "work limit" in failure.reason:
                reason = f"exceeded the time limit of {self.timeout:g} s (LUCID_SPARQL_TIMEOUT)"
            else:
                reason = (f"exceeded the memory limit of {self.memory_mb} MiB (LUCID_SPARQL_MEMORY_MB) or "
                          "could not be processed (for example, nesting too deep)")
            raise QueryLimitExceeded(f"the {what} {reason}; it was stopped") from failure
        if answer.header.get("status") != "ok":
            raise _error(answer.header, what)
        return answer

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers, self._workers = self._workers, [None] * len(self._workers)
            self._cond.notify_all()
        for worker in workers:
            if worker is not None:
                worker.kill()

    # --- requests ----------------------------------------------------------------------------
    def query(self, text: str, *, party: Hashable, readable: list[str], default: list[str] | None,
              named: list[str] | None, accept: str | None, base: str | None = None,
              default_graph: str | None = None) -> tuple[str, bytes]:
        """(media type, serialised result) of a query over the graphs in `readable`; the
        protocol's dataset (`default`, `named`) when given, else the query's FROM clauses,
        else every readable graph. Relative IRIs resolve against `base` (the service's URL)."""
        deadline = time.monotonic() + self.timeout
        with self._worker(party, deadline) as worker:
            snapshot = self.store.snapshot()
            try:
                answer = self._call(worker, Frame({
                    "op": "query", "snapshot": str(snapshot.path), "readable": readable, "default": default,
                    "named": named, "accept": accept, "max_bytes": self.max_result_bytes, "base": base,
                    "default_graph": [default_graph] if default_graph else None},
                    text.encode()),
                    deadline, "query")
            finally:
                snapshot.release()
        return str(answer.header["media_type"]), answer.body

    def update(self, text: str, *, party: Hashable, readable: list[str], authorize: Callable[[list[str]], None],
               using: list[str] | None = None, using_named: list[str] | None = None,
               base: str | None = None, absent: Callable[[list[str]], list[str]] | None = None,
               default_graph: str | None = None) -> UpdateEdits:
        """Evaluate an update into each written graph's removals and additions (relative IRIs
        resolved against `base`; `absent` says which of its targets are deleted graphs).

        `authorize` sees the graphs the update names as targets before anything is
        evaluated (and raises to refuse it); the caller authorises the graphs a `GRAPH ?g`
        template reached, which are known only now, before it writes anything."""
        deadline = time.monotonic() + self.timeout
        with self._worker(party, deadline) as worker:
            analysis = self._call(worker, Frame({"op": "analyse", "using": using, "using_named": using_named,
                                                 "max_data_bytes": self.max_data_bytes, "base": base,
                                                 "default_graph": default_graph},
                                                text.encode()),
                                  deadline, "update")
            targets = list(analysis.header["targets"])
            authorize(targets)
            snapshot = self.store.snapshot()
            try:
                result = self._call(worker, Frame({"op": "evaluate", "snapshot": str(snapshot.path),
                                                   "readable": readable,
                                                   "absent": absent(targets) if absent else []}), deadline, "update")
            finally:
                snapshot.release()
        graphs = json.loads(result.body)
        return UpdateEdits({graph: GraphEdit(edit["version"], edit["removed"], edit["added"])
                            for graph, edit in graphs.items()},
                           list(analysis.header.get("dropped", [])), list(analysis.header.get("written", [])))


def _error(header: dict[str, Any], what: str) -> Exception:
    """The hub's error for a refusal the worker reported."""
    kind, message = header.get("kind"), str(header.get("message", ""))
    if kind == "unacceptable":
        return NotAcceptableError(message)
    if kind == "too-large":
        return QueryLimitExceeded(message)
    if kind == "body-too-large":
        return InputTooLargeError(message)
    if kind == "conflict":
        return ConflictError(message)
    if kind == "internal":
        return StoreError(f"the SPARQL worker failed on the {what}: {message}")
    return InputError(message)  # syntax, a refused feature, an evaluation that failed
