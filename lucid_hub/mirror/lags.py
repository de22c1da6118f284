"""How far each mirror is behind its publisher, as the publishers last said: asked once a
minute by the role `mirror-lag` (and whenever the console's mirrors page asks), so that the
overview can name a mirror that stays behind without asking anyone while it renders.

A mirror is "behind" when two askings at least BEHIND_FOR seconds apart both found patches
after its head: a delivery in flight (a patch or two for a second) is not named, a publisher
that stopped delivering is."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

EVERY = 60.0  # seconds between two askings of every active mirror's publisher
BEHIND_FOR = 30.0  # a lag seen this long (two askings) makes the mirror behind


@dataclass(frozen=True)
class Lag:
    patches: int  # after our head, on the publisher's first archive page
    more: bool  # further pages after it
    asked: float  # time.time() of the asking
    since: float | None  # when a lag was first seen without a lag-free asking since (None: none now)

    @property
    def behind(self) -> bool:
        return self.since is not None and self.asked - self.since >= BEHIND_FOR


class Lags:
    """The publishers' last word on each mirror's lag (in this process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lags: dict[str, Lag] = {}

    def record(self, mirror_id: str, patches: int, more: bool, at: float | None = None) -> Lag:
        at = time.time() if at is None else at
        with self._lock:
            before = self._lags.get(mirror_id)
            since = None
            if patches or more:
                since = before.since if before is not None and before.since is not None else at
            lag = self._lags[mirror_id] = Lag(patches, more, at, since)
        return lag

    def forget(self, mirror_id: str) -> None:
        with self._lock:
            self._lags.pop(mirror_id, None)

    def of(self, mirror_id: str) -> Lag | None:
        with self._lock:
            return self._lags.get(mirror_id)
