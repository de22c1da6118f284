"""Failed-attempt limits for the token endpoint and the admin sign-in (brute force).

Failures are counted per (subject, address) — a client id or admin name, and the address it
was tried from — and per address. A stranger who fails in a client's name locks out that
name *from the stranger's address*, and soon the address itself; the client, calling from
its own address, goes on. Counting per subject alone let anyone lock out any client by its
id; counting per address alone locked out every client behind a shared proxy. Which address
a request comes from, behind proxies the operator trusts, is `lucid_hub.networks.client_address`.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque

# An address may fail this many times the per-subject limit (over all subjects) before it is
# blocked as a whole: a client that mistypes its secret is not the end of its neighbours.
ADDRESS_FACTOR = 5


class FailureLimiter:
    """At most `limit` failures per (subject, address), and `limit * ADDRESS_FACTOR` per
    address, in a sliding `window` (seconds); then blocked until the oldest failure leaves
    the window."""

    def __init__(self, limit: int, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self._failures: defaultdict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def _keys(self, subject: str, address: str) -> list[tuple[str, int]]:
        keys = [(f"@{address}", self.limit * ADDRESS_FACTOR)]
        if subject:
            keys.append((f"{subject}@{address}", self.limit))
        return keys

    def retry_after(self, subject: str, address: str) -> int:
        """Seconds until `subject` may try again from `address`; 0 when it may now."""
        now = time.monotonic()
        wait = 0.0
        with self._lock:
            for key, limit in self._keys(subject, address):
                failures = self._failures.get(key)
                if not failures:
                    continue
                while failures and failures[0] <= now - self.window:
                    failures.popleft()
                if len(failures) >= limit:
                    wait = max(wait, failures[-limit] + self.window - now)
        return math.ceil(wait) if wait > 0 else 0

    def failed(self, subject: str, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            for key, _limit in self._keys(subject, address):
                self._failures[key].append(now)
            if len(self._failures) > 100_000:  # forget idle keys rather than grow without bound
                for key in [k for k, v in self._failures.items() if not v or v[-1] <= now - self.window]:
                    del self._failures[key]
