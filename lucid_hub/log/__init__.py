"""The patch log behind one interface: `sql` (embedded default) and `kafka`.

Records are keyed by graph IRI, so each graph's patches keep their order. Consumers in a
group commit their position only after they have durably handled what they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from lucid_hub.errors import ConfigError

if TYPE_CHECKING:
    from lucid_hub.config import Settings
    from lucid_hub.db.session import Database


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

    # Whether the archive writes this log's entries in its own transaction (the SQL log:
    # the log is its own outbox, nothing to relay); else the archive writes outbox rows
    # and a relay appends them here.
    written_by_archive: bool

    def holding(self, patch_ids: set[str], recent: int) -> set[str]:
        """Which of `patch_ids` are among the log's last `recent` records per partition (after
        a crash between the log's acknowledgement and the outbox delete)."""
        ...

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


def open_log(settings: Settings, db: Database) -> PatchLog:
    """The patch log the settings choose: Kafka when a bootstrap is set, else the SQL log."""
    from lucid_hub.log.kafka_config import client_config, uses_kafka

    if uses_kafka(settings):
        try:
            from lucid_hub.log.kafka import KafkaPatchLog
        except ImportError:
            raise ConfigError("LUCID_KAFKA_BOOTSTRAP is set but confluent-kafka is not installed") from None
        config = client_config(settings)
        return KafkaPatchLog(config["bootstrap.servers"], settings.kafka_topic, partitions=settings.kafka_partitions,
                             session_timeout_ms=settings.kafka_session_timeout_ms, timeout=settings.kafka_timeout,
                             extra=config)
    from lucid_hub.log.sql import SqlPatchLog

    return SqlPatchLog(db)
