"""The supervisor of background roles: rounds on waking and on their interval, more rounds at
once while work waits, a failing round restarts the role after a jittered back-off, counted
and reported in the metrics; stop ends each role after the round in hand."""

from __future__ import annotations

import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from lucid_hub.supervisor import Role, Supervisor


class Rounds:
    """A step that records its rounds and does what the test tells it next."""

    def __init__(self, plan: list[object]) -> None:
        self.plan = plan  # each round: an exception to raise, or what to answer (truthy: more work)
        self.count = 0
        self.done = threading.Condition()

    def __call__(self) -> object:
        with self.done:
            self.count += 1
            self.done.notify_all()
            step = self.plan.pop(0) if self.plan else False
        if isinstance(step, Exception):
            raise step
        return step

    def wait_for(self, count: int, timeout: float = 10) -> None:
        with self.done:
            assert self.done.wait_for(lambda: self.count >= count, timeout), (self.count, count)


def scrape(supervisor: Supervisor) -> str:
    class Roles(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            return supervisor.metrics()

    registry = CollectorRegistry()
    registry.register(Roles())
    return generate_latest(registry).decode()


def test_a_role_runs_again_at_once_while_work_waits_and_when_woken() -> None:
    supervisor = Supervisor()
    rounds = Rounds([True, True, False])  # two rounds say more is waiting
    role = supervisor.add("worker", rounds, every=3600)
    supervisor.start()
    try:
        rounds.wait_for(3)  # the first three at once: the interval is an hour
        role.wake()
        rounds.wait_for(4)
        supervisor.wake("worker")
        rounds.wait_for(5)
        supervisor.wake("nobody")  # a role this process does not run: nothing happens
    finally:
        supervisor.stop()
    assert role.restarts == 0 and role.last_success > 0


def test_a_failing_round_is_retried_after_a_growing_jittered_back_off_and_counted() -> None:
    supervisor = Supervisor()
    rounds = Rounds([RuntimeError("database away"), RuntimeError("still away"), False])
    role = supervisor.add("flaky", rounds, every=3600, backoff_max=0.05)
    supervisor.start()
    try:
        rounds.wait_for(3)  # the back-off (at most 50 ms here) brought it back without a wake
        metrics = scrape(supervisor)
    finally:
        supervisor.stop()
    assert role.restarts == 2 and role.failures_in_a_row == 0
    assert 'lucid_role_restarts_total{role="flaky"} 2.0' in metrics
    assert 'lucid_role_up{role="flaky"} 1.0' in metrics


def test_the_back_off_doubles_with_jitter_up_to_its_bound() -> None:
    role = Role("r", lambda: None, every=5.0, backoff_max=8.0)
    assert role.delay() == 5.0
    waits = []
    for failures in (1, 2, 3, 4, 5, 6):
        role.failures_in_a_row = failures
        waits.append(role.delay())
    bounds = [1, 2, 4, 8, 8, 8]
    assert all(b / 2 <= w <= b for w, b in zip(waits, bounds, strict=True)), waits


def test_stop_ends_each_role_after_its_round_and_reports_it_down() -> None:
    supervisor = Supervisor()
    closed = threading.Event()
    rounds = Rounds([])
    supervisor.add("quiet", rounds, every=3600, on_stop=closed.set)
    own_wake = threading.Event()
    other = Rounds([])
    supervisor.add("woken", other, every=3600, wake=own_wake)
    supervisor.start()
    rounds.wait_for(1)
    other.wait_for(1)
    own_wake.set()  # the service's own event wakes its role
    other.wait_for(2)
    supervisor.stop(timeout=10)
    assert closed.is_set() and not supervisor.running
    assert 'lucid_role_up{role="quiet"} 0.0' in scrape(supervisor)
    late = Rounds([])
    supervisor.add("late", late, every=3600)  # added while stopped: runs at the next start
    assert late.count == 0
    supervisor.start()
    late.wait_for(1)
    supervisor.stop()


def test_stop_interrupts_a_round_that_waits_on_the_patch_stream() -> None:
    """A round blocked in a long wait for patches (the deliverer's watch) ends when the roles
    stop, through the role's `interrupt`, not when its wait times out: a hub stopped in 0.85 s,
    0.65 of it that wait, and rolling restarts wait on every pod's stop."""
    from lucid_hub.patch_stream import PatchStream

    stream = PatchStream(archive=None, poll=3600)  # type: ignore[arg-type]  # (no patch is read)
    ended = threading.Event()
    waiting = threading.Event()
    returned = threading.Event()

    def watch() -> bool:
        waiting.set()
        stream.changes(stream.generation(), 3600, stopped=ended.is_set)
        returned.set()
        return False

    def interrupt() -> None:
        ended.set()
        stream.interrupt()

    supervisor = Supervisor()
    supervisor.add("watch", watch, every=3600, interrupt=interrupt)
    supervisor.start()
    assert waiting.wait(10)
    supervisor.stop(timeout=20)  # without the interrupt the round would still wait its hour
    assert returned.is_set()
    assert not any(thread.is_alive() and "watch" in thread.name for thread in threading.enumerate())


def test_only_true_asks_for_another_round_at_once() -> None:
    """A step's count or list is no request for more: a follower that answers the graphs it
    synced spun a core when it was taken for one."""
    supervisor = Supervisor()
    rounds = Rounds([["a graph"], 3, True, False])
    role = supervisor.add("counting", rounds, every=3600)
    supervisor.start()
    try:
        rounds.wait_for(1)
        with rounds.done:  # an hour's interval: no second round unless woken
            assert not rounds.done.wait_for(lambda: rounds.count >= 2, timeout=0.5)
        role.wake()
        rounds.wait_for(2)
        role.wake()
        rounds.wait_for(4)  # the third said True: the fourth came at once
    finally:
        supervisor.stop()


def test_a_serving_hub_runs_its_loops_as_roles_and_reports_each(tmp_path: Path) -> None:
    """Every loop of a serving leader is a role of its supervisor: the lease, delivery and its
    watcher, the store follower and the leader's roles (the relay too, where a Kafka log needs
    one), each up in `/metrics`; none is a thread of its own any more."""
    import requests

    from tests.conftest import running_hub

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}") as hub:
        text = requests.get(f"{hub.url}/metrics", timeout=30).text
        up = {line.split('"')[1] for line in text.splitlines()
              if line.startswith("lucid_role_up{") and line.endswith(" 1.0")}
        assert {"leadership", "websub-delivery", "websub-watch", "store-follower", "deferred-rules", "mirrors",
                "windowed-queries"} <= up, up
        names = {thread.name for thread in threading.enumerate()}
        assert not names & {"leadership", "websub-delivery", "websub-watch", "leadership-gained"}, names
