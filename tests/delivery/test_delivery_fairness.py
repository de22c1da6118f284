"""Fairness of delivery: one party's slow callbacks delay that party only (issue 14, point 6).
Real callback servers on loopback, one per party (so one callback host each)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from lucid_hub.delivery.fairness import Capacity, HostSpeed, LaneLimits, callback_host
from lucid_hub.demo.ports import free_port
from tests.conftest import RunningHub, running_hub
from tests.websub.test_websub import G, grant, publish

FAST_ENV = {"LUCID_DEV_MODE": "1", "LUCID_LEASE_MIN": "120"}


class Party:
    """A partner's callback host: any path is a callback; POSTs wait for `gate` (when set)
    or take `delay` seconds (a slow partner, which is what is under test), then answer 204."""

    def __init__(self, delay: float = 0.0) -> None:
        self.port = free_port()
        self.delay = delay
        self.gate: threading.Event | None = None
        self.waiting = 0
        self.received: list[tuple[str, str]] = []  # (path, patch id)
        self.changed = threading.Condition()
        party = self

        @Request.application  # type: ignore[misc]
        def app(request: Request) -> Response:
            if request.method == "GET":
                return Response(request.args.get("hub.challenge", ""), 200)
            gate = party.gate
            with party.changed:
                party.waiting += 1
                party.changed.notify_all()
            if gate is not None:
                gate.wait(60)
            elif party.delay:
                time.sleep(party.delay)  # the partner's own slowness, the subject of the test
            with party.changed:
                party.waiting -= 1
                party.received.append((request.path, request.headers.get("X-Lucid-Patch-Id", "")))
                party.changed.notify_all()
            return Response("", 204)

        self.server = make_server("127.0.0.1", self.port, app, threaded=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.port}/cb/{n}"

    def wait(self, what: Callable[[], bool], timeout: float = 20) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not what():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.05))
        return True

    def close(self) -> None:
        if self.gate is not None:
            self.gate.set()
        self.server.shutdown()


@pytest.fixture
def parties() -> Iterator[tuple[Party, Party]]:
    slow, fast = Party(), Party()
    yield slow, fast
    slow.close()
    fast.close()


def subscribe_all(hub: RunningHub, party: Party, name: str, callbacks: int) -> Any:
    """A new client of the party subscribes `callbacks` callbacks; its session."""
    record, _ = hub.runtime.clients.create(name, groups=["partner"], scopes=["hub:subscribe", "graphs:read"],
                                           callback_prefixes=[f"http://127.0.0.1:{party.port}/cb/"])
    session = hub.session(str(hub.runtime.tokens.issue(record, "hub:subscribe graphs:read")))
    for n in range(callbacks):
        answer = session.post(f"{hub.url}/hub", timeout=30, data={
            "hub.mode": "subscribe", "hub.topic": G, "hub.callback": party.url(n)})
        assert answer.status_code == 202, answer.text
    return session


def active(hub: RunningHub) -> int:
    return sum(s["state"] == "active" for s in hub.runtime.hub.subscriptions())


def test_a_client_whose_callbacks_hang_delays_no_other_client(tmp_path: Path, parties: tuple[Party, Party]) -> None:
    slow, fast = parties
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'f.db'}", FAST_ENV) as hub:
        publish(hub, "0")
        grant(hub)
        subscribe_all(hub, slow, "Hanging partner", 13)
        subscribe_all(hub, fast, "Other partner", 1)
        assert slow.wait(lambda: active(hub) == 14)
        slow.gate = threading.Event()  # every POST to the slow party now hangs
        patch = publish(hub, "1")
        # the hanging party holds its share of the threads (8 of 16), no more ...
        assert slow.wait(lambda: slow.waiting == 8), slow.waiting
        # ... and the other party has its patch while all of those still hang
        assert fast.wait(lambda: fast.received == [("/cb/0", patch)], 10), fast.received
        assert slow.waiting == 8 and slow.received == []
        slow.gate.set()
        assert slow.wait(lambda: len(slow.received) == 13)
        assert Counter(p for _, p in slow.received) == {patch: 13}


def test_a_slow_host_gets_a_lane_of_its_own(tmp_path: Path, parties: tuple[Party, Party]) -> None:
    slow, fast = parties
    slow.delay = 0.3
    env = {**FAST_ENV, "LUCID_DELIVERY_THREADS": "2", "LUCID_DELIVERY_PER_CLIENT": "2", "LUCID_DELIVERY_PER_HOST": "2",
           "LUCID_DELIVERY_SLOW_THREADS": "2", "LUCID_DELIVERY_SLOW_SECONDS": "0.1"}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'f.db'}", env) as hub:
        publish(hub, "0")
        grant(hub)
        subscribe_all(hub, slow, "Slow partner", 6)
        subscribe_all(hub, fast, "Fast partner", 1)
        assert slow.wait(lambda: active(hub) == 7)
        first = publish(hub, "1")
        assert fast.wait(lambda: fast.received == [("/cb/0", first)])
        speed = hub.runtime.delivery.speed
        assert speed.is_slow(callback_host(slow.url(0))) and not speed.is_slow(callback_host(fast.url(0)))
        second = publish(hub, "2")
        # the slow party's 12 deliveries take 1.8 s in its own lane (one at a time per client);
        # the fast party's next patch does not wait for them
        assert fast.wait(lambda: [p for _, p in fast.received] == [first, second], 10)
        assert len(slow.received) < 12, "the fast party waited for the slow one"
        assert slow.wait(lambda: len(slow.received) == 12, 30)


def test_subscriptions_per_client_are_capped(tmp_path: Path, parties: tuple[Party, Party]) -> None:
    _slow, party = parties
    env = {**FAST_ENV, "LUCID_MAX_SUBSCRIPTIONS_PER_CLIENT": "2"}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'f.db'}", env) as hub:
        publish(hub, "0")
        grant(hub)
        session = subscribe_all(hub, party, "Partner", 2)
        assert party.wait(lambda: active(hub) == 2)
        third = session.post(f"{hub.url}/hub", timeout=30, data={
            "hub.mode": "subscribe", "hub.topic": G, "hub.callback": party.url(2)})
        assert third.status_code == 403 and "limit (LUCID_MAX_SUBSCRIPTIONS_PER_CLIENT)" in third.text
        renewal = session.post(f"{hub.url}/hub", timeout=30, data={
            "hub.mode": "subscribe", "hub.topic": G, "hub.callback": party.url(1)})
        assert renewal.status_code == 202  # a renewal is not a new subscription


def test_capacity_shares_threads_by_client_and_host() -> None:
    speed = HostSpeed(slow_seconds=1.0)
    capacity = Capacity(LaneLimits(threads=4, per_client=2, per_host=3), LaneLimits(2, 1, 1), speed)
    assert [capacity.reserve(n, "a", "h1:443") for n in range(3)] == ["fast", "fast", None]  # client share
    assert capacity.reserve(3, "b", "h1:443") == "fast"
    assert capacity.reserve(4, "c", "h1:443") is None  # host share (3)
    assert capacity.reserve(5, "c", "h2:443") == "fast"
    assert capacity.reserve(6, "e", "h4:443") is None  # lane full (4)
    capacity.release(0)
    assert capacity.reserve(6, "e", "h4:443") == "fast"
    speed.observe("h3:443", 5.0)
    assert capacity.reserve(7, "d", "h3:443") == "slow"
    assert capacity.reserve(8, "d", "h3:443") is None  # the slow lane's client share
    assert capacity.reserve(7, "d", "h3:443") is None  # one reservation per subscription
    for _ in range(10):  # a host that answers quickly again leaves the slow lane
        speed.observe("h3:443", 0.01)
    assert not speed.is_slow("h3:443")
