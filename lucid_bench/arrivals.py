"""What the benchmarks' readers share: when each awaited value arrived, and waiting for them."""

from __future__ import annotations

import threading
import time


class Arrivals:
    """A reader that records `arrived[value] = time` under `changed` (a Condition it notifies)."""

    arrived: dict[str, float]
    changed: threading.Condition

    def wait_for(self, statuses: list[str], timeout: float = 30) -> None:
        """Until every one of these values has arrived, or `timeout`."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while any(s not in self.arrived for s in statuses) and time.monotonic() < deadline:
                self.changed.wait(deadline - time.monotonic())
