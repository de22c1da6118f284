"""Background roles, written once: a role is a name and a step (one round of its work); the
supervisor runs each on a thread of its own, wakes it when asked or after its interval, runs
it again at once while it says more work is waiting, survives a failing step with a jittered
back-off (a restart of the role, counted), and reports each role's health in the metrics
(`lucid_role_up`, `lucid_role_last_success_timestamp_seconds`, `lucid_role_restarts_total`).

The composition root (`lucid_hub.runtime`) decides which roles a process runs; services
hand it their steps and never start threads of their own for a loop.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from lucid_hub.errors import LucidError

log = logging.getLogger(__name__)

Step = Callable[[], object]  # one round; answering True (nothing else): more is waiting, run it again at once


@dataclass
class Role:
    """One supervised loop."""

    name: str
    step: Step
    every: float = 1.0  # seconds between rounds when nothing wakes it
    backoff_max: float = 60.0  # the longest wait after failed rounds in a row
    on_stop: Callable[[], None] | None = None  # after the loop has ended (close what it holds)
    # When the supervisor stops, before it waits for the loop: wakes a step that blocks inside
    # its round (a wait on the patch stream), so that a hub stops at once, not after the wait.
    interrupt: Callable[[], None] | None = None
    wake_event: threading.Event = field(default_factory=threading.Event, repr=False)
    up: bool = False
    last_success: float = 0.0  # wall-clock time of the last round that did not fail
    restarts: int = 0  # rounds that failed (each a restart of the role's work)
    failures_in_a_row: int = 0
    _thread: threading.Thread | None = field(default=None, repr=False)

    def wake(self) -> None:
        self.wake_event.set()

    def delay(self) -> float:
        """Seconds until the next round: the interval, or a back-off after failures (1, 2, 4 …
        s, jittered to between half and all of it, `backoff_max` at most)."""
        if not self.failures_in_a_row:
            return self.every
        return min(self.backoff_max, 2.0 ** (self.failures_in_a_row - 1)) * random.uniform(0.5, 1.0)  # noqa: S311


class Supervisor:
    """The background roles of one process."""

    def __init__(self) -> None:
        self._roles: dict[str, Role] = {}
        self._stop = threading.Event()

    def add(self, name: str, step: Step, *, every: float = 1.0, backoff_max: float = 60.0,
            on_stop: Callable[[], None] | None = None, wake: threading.Event | None = None,
            interrupt: Callable[[], None] | None = None) -> Role:
        """A role, started by `start` (or now, when the supervisor runs already). `wake`: an
        event of the service's own that others set to wake the role (else the role's).
        `interrupt`: ends a round that waits inside its step, called when the roles stop."""
        if name in self._roles:
            raise ValueError(f"a role named {name} exists already")
        role = self._roles[name] = Role(name, step, every, backoff_max, on_stop, interrupt=interrupt)
        if wake is not None:
            role.wake_event = wake
        if self.running:
            self._launch(role)
        return role

    @property
    def running(self) -> bool:
        return any(role._thread is not None for role in self._roles.values())

    def role(self, name: str) -> Role | None:
        return self._roles.get(name)

    def all(self) -> list[Role]:
        """Every role of this process, by name."""
        return [self._roles[name] for name in sorted(self._roles)]

    def wake(self, name: str) -> None:
        """Run the role's next round now (a no-op for a role this process does not run)."""
        role = self._roles.get(name)
        if role is not None:
            role.wake()

    def start(self) -> None:
        self._stop.clear()
        for role in self._roles.values():
            if role._thread is None:
                self._launch(role)

    def _launch(self, role: Role) -> None:
        role._thread = threading.Thread(target=self._run, args=(role,), name=f"role-{role.name}", daemon=True)
        role.up = True
        role._thread.start()

    def once(self, name: str, work: Callable[[], None]) -> None:
        """Run `work` once on a thread of its own (a hand-over that may take longer than the
        role that asks for it may wait); a failure is logged."""
        def run() -> None:
            try:
                work()
            except Exception:
                log.exception("%s failed", name)

        threading.Thread(target=run, name=f"once-{name}", daemon=True).start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every role: each ends after the round in hand; then its `on_stop` runs."""
        self._stop.set()
        for role in self._roles.values():
            role.wake()
            if role.interrupt is not None:
                try:
                    role.interrupt()
                except Exception:  # the others still stop; this one ends after its round
                    log.exception("role %s: interrupting its round failed", role.name)
        deadline = time.monotonic() + timeout
        for role in self._roles.values():
            if role._thread is not None:
                role._thread.join(timeout=max(0.0, deadline - time.monotonic()))
                role._thread = None
            role.up = False
            if role.on_stop is not None:
                try:
                    role.on_stop()
                except Exception:  # the others still stop
                    log.exception("role %s: stopping failed", role.name)

    def _run(self, role: Role) -> None:
        while not self._stop.is_set():
            try:
                more = role.step()
            except Exception as exc:  # the role goes on after a back-off: each failure is logged and counted
                role.failures_in_a_row += 1
                role.restarts += 1
                role.up = False
                if isinstance(exc, LucidError):  # what operations meet (a log or a partner away): a line
                    log.warning("role %s: a round failed (%d in a row): %s", role.name, role.failures_in_a_row, exc)
                else:  # a defect: its traceback
                    log.exception("role %s: a round failed (%d in a row)", role.name, role.failures_in_a_row)
                more = False
            else:
                role.failures_in_a_row = 0
                role.up = True
                role.last_success = time.time()
            if more is True and not self._stop.is_set():  # (a count or a list a step returns is no request)
                continue
            role.wake_event.wait(role.delay())
            role.wake_event.clear()

    def metrics(self) -> Iterable[Metric]:
        """The roles' health at scrape time."""
        up = GaugeMetricFamily("lucid_role_up", "Whether a background role of this process runs and its last "
                               "round did not fail.", labels=["role"])
        last = GaugeMetricFamily("lucid_role_last_success_timestamp_seconds", "When a background role last "
                                 "finished a round without failing (Unix time; 0: not yet).", labels=["role"])
        restarts = CounterMetricFamily("lucid_role_restarts", "Rounds of a background role that failed: each "
                                       "is logged, and the role starts again after a back-off.", labels=["role"])
        for role in self._roles.values():
            up.add_metric([role.name], 1.0 if role.up and role._thread is not None else 0.0)
            last.add_metric([role.name], role.last_success)
            restarts.add_metric([role.name], role.restarts)
        return [up, last, restarts]
