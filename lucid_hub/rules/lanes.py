"""Lanes: each party's rules are evaluated in a worker of their own (the operator's and admins'
rules share one), so a party whose condition overruns LUCID_RULES_BUDGET costs its own lane's
worker (killed and started again) and no one else's firing waits for it. A lane that overran
rests before its rules are evaluated again (1, 2, 4 … s, RESTING_MAX at most): a firing
meanwhile fails at once, without a worker. An idle lane's worker is stopped after
LANE_IDLE_SECONDS and started again (its graphs loaded) at its next firing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from lucid_hub.metrics import Metrics
from lucid_hub.queries.evaluator import BudgetExceeded, Refusal
from lucid_hub.rules.model import Owner, Registered, RuleFailed, lane_name
from lucid_hub.rules.replica import RulesReplica
from lucid_hub.store.graphs import GraphStore, StoreChange

RESTING_MAX = 60.0  # the longest a lane rests after overruns in a row
LANE_IDLE_SECONDS = 300.0  # a lane's worker not used this long is stopped (its memory given back)


class Lane:
    """One party's rules (or the operator's): the worker that evaluates them, holding the
    graphs they read; the store changes it has yet to take; how its last evaluations went."""

    def __init__(self, name: str, replica: RulesReplica) -> None:
        self.name = name
        self.replica = replica
        self.pending: list[StoreChange] = []
        self.pending_lock = threading.Lock()
        self.overruns = 0  # evaluations in a row that overran the budget
        self.resting_until = 0.0  # monotonic: its rules are not evaluated before
        self.used = time.monotonic()

    def resting(self) -> str:
        """Why its rules are not evaluated now, or ''."""
        wait = self.resting_until - time.monotonic()
        if wait <= 0:
            return ""
        return (f"not evaluated: its owner's rules overran the time budget {self.overruns} times in a row "
                f"(LUCID_RULES_BUDGET); they are tried again in {wait:.0f} s")

    def overran(self) -> None:
        self.overruns += 1
        self.resting_until = time.monotonic() + min(RESTING_MAX, 2.0 ** (self.overruns - 1))

    def caught_up(self, graphs: Iterable[str]) -> list[StoreChange]:
        """The worker holds `graphs`, as the store holds them now, but for the changes returned:
        the next patches of held graphs, which the next firing carries to the worker (one call,
        not one per change). Anything else (a drop, a gap) is applied now."""
        replica = self.replica
        with self.pending_lock:
            pending, self.pending = self.pending, []
        carried: list[StoreChange] = []
        for change in pending:
            if replica.next_change(change, after=carried):
                carried.append(change)
            else:
                replica.apply_all(carried)
                carried = []
                replica.apply(change)
        replica.ensure(set(graphs))
        return carried


class Lanes:
    """The lanes of one hub process, by owner."""

    def __init__(self, store: GraphStore, memory_mb: int, budget: float, metrics: Metrics) -> None:
        self.store = store
        self.memory_mb = memory_mb
        self.budget = budget
        self.metrics = metrics
        self._lanes: dict[str, Lane] = {}  # by lane_name
        self._lock = threading.Lock()
        self._swept = time.monotonic()

    def lane(self, owner: Owner) -> Lane:
        name = lane_name(owner)
        with self._lock:
            lane = self._lanes.get(name)
            if lane is None:
                lane = self._lanes[name] = Lane(name, RulesReplica(self.store, self.memory_mb, self.budget))
            return lane

    def trim(self, rules: Iterable[Registered]) -> None:
        """Each lane holds the graphs its owner's rules read; a lane without rules is closed."""
        needed: dict[str, set[str]] = {}
        for reg in rules:
            needed.setdefault(lane_name(reg.owner), set()).update(reg.reads)
        with self._lock:
            gone = [self._lanes.pop(name) for name in set(self._lanes) - set(needed)]
            kept = list(self._lanes.values())
        for lane in gone:
            lane.replica.close()
        for lane in kept:
            lane.replica.unused_graphs(needed[lane.name])

    def sweep(self) -> None:
        """Every LANE_IDLE_SECONDS / 4: stop the workers of lanes idle for LANE_IDLE_SECONDS
        (their graphs are loaded again at their next firing)."""
        if time.monotonic() - self._swept <= LANE_IDLE_SECONDS / 4:
            return
        self._swept = time.monotonic()
        with self._lock:
            idle = [lane for lane in self._lanes.values() if self._swept - lane.used > LANE_IDLE_SECONDS]
        for lane in idle:
            if lane.replica.lock.acquire(blocking=False):  # (one firing now: not idle after all)
                try:
                    lane.replica.close()
                finally:
                    lane.replica.lock.release()

    def states(self) -> dict[str, dict[str, Any]]:
        """Each lane's state (for the metrics and the console): '' is the operator's."""
        with self._lock:
            lanes = list(self._lanes.values())
        return {lane.name: {"overruns": lane.overruns, "resting": bool(lane.resting()),
                            "worker": lane.replica._worker is not None} for lane in lanes}

    def watched(self, change: StoreChange) -> None:
        """A store change (under the store's writer lock: only noted, the worker takes it
        before its next firing)."""
        for lane in list(self._lanes.values()):
            if lane.replica.holds(change.graph):
                with lane.pending_lock:
                    lane.pending.append(change)

    def evaluate(self, reg: Registered, graph: str, removed: list[str], added: list[str]) -> dict[str, Any]:
        """The rule's event and condition on a change of `graph`, in its owner's lane."""
        lane = self.lane(reg.owner)
        resting = lane.resting()
        if resting:
            self.metrics.rules_rested.inc()
            raise RuleFailed(reg.rule.iri, resting)
        started = time.perf_counter()
        try:
            with lane.replica.lock:  # (one firing at a time in a lane: its pending changes in order)
                lane.used = time.monotonic()
                answer = lane.replica.fire(reg.rule.iri, graph, removed, added, lane.caught_up(reg.reads))
            lane.overruns = 0
            return answer
        except BudgetExceeded:
            lane.overran()
            raise RuleFailed(reg.rule.iri, "its evaluation overran the time budget of "
                                           f"{self.budget:g} s (LUCID_RULES_BUDGET)") from None
        except Refusal as refusal:
            raise RuleFailed(reg.rule.iri, refusal.message) from None
        finally:
            self.metrics.rule_seconds.observe(time.perf_counter() - started)

    def close(self) -> None:
        with self._lock:
            lanes = list(self._lanes.values())
        for lane in lanes:
            lane.replica.close()
