"""`lucid-hub bench push`: what open push channels cost the hub that serves them.

A hub runs as `lucid-hub serve` runs it (its own process: gunicorn and one uvicorn worker),
with a public graph. Measured in one run:
- request p99 (`/healthz`, `GET /graphs?graph=…`, `POST /oauth/token`, one after another)
  without push channels, then with N idle ones open: the ratio (goal ≤ 1.5);
- the worker's resident memory before and with the N channels: bytes per channel (goal ≤ 20 KB);
- fan-out: events published one at a time, each timed from the publish request to its arrival
  at every one of the N clients: p50, p99 and the slowest (goal: p99 ≤ 100 ms at 10,000).
The N clients are one asyncio process (this one: raw sockets, an SSE request each), spread over
loopback addresses 127.0.0.2 and up, so the hub's limit per address is set to let them in.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import click
import psutil
import requests

from lucid_hub.demo.processes import HubProcess

G = "https://bench.example/open/kpi"
PUBLIC = {"iri": "urn:bench:public", "requiresGroup": ["urn:lucid-hub:everyone"], "readGraph": [G]}
PER_ADDRESS = 2_000  # clients per loopback address


def _p(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def _request_p99(hub: HubProcess, samples: int) -> float:
    """p99 of the three requests a well-behaved client makes, timed together."""
    session = requests.Session()
    session.trust_env = False
    form = {"grant_type": "client_credentials", "client_id": hub.client_id, "client_secret": hub._secret}
    token = hub.http.headers["Authorization"]
    took = []
    for _ in range(samples):
        began = time.perf_counter()
        assert session.get(f"{hub.url}/healthz", timeout=60).status_code == 200
        assert session.get(f"{hub.url}/graphs", params={"graph": G}, headers={"Authorization": token},
                           timeout=60).status_code == 200
        assert session.post(f"{hub.url}/oauth/token", data=form, timeout=60).status_code == 200
        took.append(time.perf_counter() - began)
    return _p(took, 99)


class _Client(asyncio.Protocol):
    """One push client: the arrival time of each awaited patch id."""

    def __init__(self, fleet: _Fleet) -> None:
        self.fleet = fleet
        self.buffer = b""
        self.opened = False

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.opened:
            self.buffer += data
            if b": lucid-hub patch stream" in self.buffer:
                self.opened = True
                self.fleet.opened += 1
                if not self.buffer.startswith(b"HTTP/1.1 200"):
                    self.fleet.refused += 1
                self.buffer = b""
            return
        awaited = self.fleet.awaited
        if awaited is not None and awaited in data:
            self.fleet.arrived.append(now)
            if len(self.fleet.arrived) == self.fleet.size:
                self.fleet.all_arrived.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fleet.lost += 1


class _Fleet:
    def __init__(self, size: int) -> None:
        self.size = size
        self.opened = self.refused = self.lost = 0
        self.awaited: bytes | None = None
        self.arrived: list[float] = []
        self.all_arrived = asyncio.Event()
        self.transports: list[asyncio.BaseTransport] = []

    async def open(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        request = f"GET /patches/events?graph={G} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
        for index in range(self.size):
            source = f"127.0.0.{2 + index // PER_ADDRESS}"
            transport, _ = await loop.create_connection(lambda: _Client(self), "127.0.0.1", port,
                                                        local_addr=(source, 0))
            transport.write(request)
            self.transports.append(transport)
            if index % 500 == 499:  # (a few hundred in flight at a time)
                await self._until(partial(self.has_opened, index + 1 - 200), 120)
        await self._until(lambda: self.opened == self.size, 120)

    def has_opened(self, wanted: int) -> bool:
        return self.opened >= wanted

    @staticmethod
    async def _until(condition: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise click.ClickException("the push clients did not all open in time")
            await asyncio.sleep(0.01)  # (polling the fleet's own counters)

    def close(self) -> None:
        for transport in self.transports:
            transport.close()


def _worker(hub: HubProcess) -> psutil.Process:
    """The process that serves (gunicorn's one worker)."""
    assert hub.proc is not None
    children = psutil.Process(hub.proc.pid).children()
    return children[0] if children else psutil.Process(hub.proc.pid)


def run(connections: int, events: int, samples: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lucid-bench-push-") as tmp:
        env = {"LUCID_PUSH_MAX_CONNECTIONS": str(connections + 100), "LUCID_PUSH_PER_ADDRESS": str(PER_ADDRESS),
               "LUCID_LOG_LEVEL": "WARNING"}
        hub = HubProcess("push", Path(tmp) / "hub", env).start()
        try:
            hub.call("POST", "/admin/conditions", json=PUBLIC)
            hub.publish(G, '<https://bench.example/s> <https://bench.example/p> "0" .')
            worker = _worker(hub)
            _request_p99(hub, 20)  # (warm-up)
            unloaded = _request_p99(hub, samples)
            rss_before = worker.memory_info().rss
            asyncio.run(_loaded(hub, worker, connections, events, samples, unloaded, rss_before))
        finally:
            hub.stop()


async def _loaded(hub: HubProcess, worker: psutil.Process, connections: int, events: int, samples: int,
                  unloaded: float, rss_before: int) -> None:
    fleet = _Fleet(connections)
    began = time.perf_counter()
    await fleet.open(hub.port)
    opened_in = time.perf_counter() - began
    if fleet.refused:
        raise click.ClickException(f"{fleet.refused} push clients were refused")
    rss_with = worker.memory_info().rss
    loaded = await asyncio.to_thread(_request_p99, hub, samples)
    latencies: list[float] = []
    slowest: list[float] = []
    for i in range(events):
        fleet.arrived, fleet.all_arrived = [], asyncio.Event()
        body = f'<https://bench.example/s> <https://bench.example/p> "{i + 1}" .'
        fleet.awaited = f"id: {i + 2}\n".encode()  # (its chain position: set before the event can come)
        sent = time.perf_counter()
        await asyncio.to_thread(hub.publish, G, body)
        try:
            await asyncio.wait_for(fleet.all_arrived.wait(), 60)
        except TimeoutError:
            raise click.ClickException(f"event {i + 1} reached {len(fleet.arrived)} of {connections} clients "
                                       "in 60 s") from None
        latencies += [t - sent for t in fleet.arrived]
        slowest.append(max(fleet.arrived) - sent)
    fleet.close()
    per_channel = (rss_with - rss_before) / connections
    ratio = loaded / unloaded
    click.echo(f"push channels: {connections:,} open in {opened_in:.1f} s, {fleet.lost} lost")
    click.echo(f"memory: worker RSS {rss_before / 1e6:.1f} MB -> {rss_with / 1e6:.1f} MB = "
               f"{per_channel / 1024:.1f} KiB per channel (goal <= 20 KB)")
    click.echo(f"requests p99 (healthz + GET graph + token): {unloaded * 1000:.1f} ms without, "
               f"{loaded * 1000:.1f} ms with {connections:,} idle channels = {ratio:.2f}x (goal <= 1.5x)")
    click.echo(f"fan-out of {events} events to {connections:,} clients: p50 {_p(latencies, 50) * 1000:.0f} ms, "
               f"p99 {_p(latencies, 99) * 1000:.0f} ms, slowest {max(slowest) * 1000:.0f} ms (goal: p99 <= 100 ms)")
