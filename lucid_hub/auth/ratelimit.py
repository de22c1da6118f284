"""Failed-attempt limits for the token endpoint and the admin sign-in (brute force)."""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque


class FailureLimiter:
    """At most `limit` failures per key in a sliding `window` (seconds); then blocked until
    the oldest failure leaves the window. Keys are client ids and remote addresses."""

    def __init__(self, limit: int, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self._failures: defaultdict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def retry_after(self, *keys: str) -> int:
        """Seconds until any of `keys` may try again; 0 when none is blocked."""
        now = time.monotonic()
        wait = 0.0
        with self._lock:
            for key in keys:
                failures = self._failures.get(key)
                if not failures:
                    continue
                while failures and failures[0] <= now - self.window:
                    failures.popleft()
                if len(failures) >= self.limit:
                    wait = max(wait, failures[0] + self.window - now)
        return math.ceil(wait) if wait > 0 else 0

    def failed(self, *keys: str) -> None:
        now = time.monotonic()
        with self._lock:
            for key in keys:
                self._failures[key].append(now)
            if len(self._failures) > 100_000:  # forget idle keys rather than grow without bound
                for key in [k for k, v in self._failures.items() if not v or v[-1] <= now - self.window]:
                    del self._failures[key]
