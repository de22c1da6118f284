"""The patch log behind one interface: `sql` (embedded default) and `kafka`.

Records are keyed by graph IRI, so each graph's patches keep their order. Consumers in a
group commit their position only after they have durably handled what they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LogRecord:
    """One patch in the log. `position` is backend-specific (offset, or partition:offset)."""

    graph: str
    patch_id: str
    body: bytes
    position: str = ""


class LogConsumer(Protocol):
    """Reads the log as a member of a consumer group."""

    def poll(self, max_records: int = 100, timeout: float = 1.0) -> list[LogRecord]:
        """Records after the group's committed position (at most `max_records`)."""
        ...

    def commit(self, records: list[LogRecord]) -> None:
        """Commit the group's position past `records` (all read by this consumer)."""
        ...

    def close(self) -> None: ...


class PatchLog(Protocol):
    """Append-only log of patches."""

    def append(self, records: list[LogRecord]) -> None:
        """Append durably, in order; returns only when the log acknowledged all of them."""
        ...

    def consumer(self, group: str) -> LogConsumer:
        """A consumer in `group` (created at the start of the log if new)."""
        ...

    def check(self, timeout: float = 2.0) -> None:
        """Raise LogUnavailableError unless the log answers within `timeout` seconds (readiness)."""
        ...

    def close(self) -> None: ...
