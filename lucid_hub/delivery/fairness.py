"""Who may use this process's delivery threads: one party's slow callbacks delay that party.

Deliveries run in two lanes. The fast lane takes every callback host until one proves slow
(its recent POSTs took longer than LUCID_DELIVERY_SLOW_SECONDS on average, or timed out);
from then on that host's deliveries run in the slow lane, a few threads of their own, until
it answers quickly again. In each lane a client and a callback host may hold only a share of
the threads, so even before a host is known to be slow, one client can block no more than
that share. Measured before: one client with 13 callbacks that took 10 s each occupied all
8 threads and delayed every other subscriber's patches by about 8 s.

The limits hold per delivery process (each `lucid-hub worker` and `serve` has its own).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

# How much one new POST moves a host's average duration (exponentially weighted).
SMOOTHING = 0.3
# Hosts remembered (least recently seen forgotten first).
MAX_HOSTS = 10_000


def callback_host(callback: str) -> str:
    """What per-host limits count: the callback's host and port."""
    parts = urlsplit(callback)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{(parts.hostname or '').lower()}:{port}"


class HostSpeed:
    """Recent POST durations per callback host; a host is slow above `slow_seconds`."""

    def __init__(self, slow_seconds: float) -> None:
        self.slow_seconds = slow_seconds
        self._average: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, host: str, seconds: float) -> None:
        """One POST to `host` took `seconds` (a timeout counts as the whole timeout)."""
        with self._lock:
            before = self._average.pop(host, None)
            self._average[host] = seconds if before is None else before + SMOOTHING * (seconds - before)
            while len(self._average) > MAX_HOSTS:
                self._average.popitem(last=False)

    def is_slow(self, host: str) -> bool:
        with self._lock:
            average = self._average.get(host)
        return average is not None and average > self.slow_seconds


@dataclass(frozen=True)
class LaneLimits:
    threads: int
    per_client: int
    per_host: int


class Capacity:
    """Reservations of delivery threads by lane, client and host."""

    def __init__(self, fast: LaneLimits, slow: LaneLimits, speed: HostSpeed) -> None:
        self.limits = {"fast": fast, "slow": slow}
        self.speed = speed
        self._held: dict[int, tuple[str, str, str]] = {}  # subscription -> (lane, client, host)
        self._lanes: Counter[str] = Counter()
        self._clients: Counter[tuple[str, str]] = Counter()
        self._hosts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def reserve(self, sid: int, client: str, host: str) -> str | None:
        """The lane `sid` may run in now ("fast" or "slow"), reserved; None: not now."""
        lane = "slow" if self.speed.is_slow(host) else "fast"
        limits = self.limits[lane]
        with self._lock:
            if (sid in self._held or self._lanes[lane] >= limits.threads
                    or self._clients[lane, client] >= limits.per_client or self._hosts[lane, host] >= limits.per_host):
                return None
            self._held[sid] = (lane, client, host)
            self._lanes[lane] += 1
            self._clients[lane, client] += 1
            self._hosts[lane, host] += 1
        return lane

    def release(self, sid: int) -> None:
        with self._lock:
            held = self._held.pop(sid, None)
            if held is None:
                return
            lane, client, host = held
            self._lanes[lane] -= 1
            self._clients[lane, client] -= 1
            self._hosts[lane, host] -= 1
            for counter, key in ((self._clients, (lane, client)), (self._hosts, (lane, host))):
                if counter[key] <= 0:
                    del counter[key]
