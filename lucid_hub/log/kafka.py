"""The patch log on Apache Kafka (confluent-kafka): key = graph IRI, so each graph's
patches stay in one partition, in order; idempotent producer with acks=all; consumers
commit offsets by hand, after they have handled what they read.

Nothing here waits for the broker at construction: a hub whose Kafka is down, refuses its
credentials or presents a certificate it does not trust starts all the same, its relay keeps
the patches in the outbox and /readyz answers 503 with librdkafka's own one-line reason
(the last error any client of the log reported). The topic is created at the first use.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lucid_hub.errors import ConfigError, LogUnavailableError
from lucid_hub.log import LogRecord

PATCH_ID_HEADER = "lucid-patch-id"
log = logging.getLogger(__name__)
# librdkafka's own log lines go through Python's logging rather than straight to stderr. They
# repeat at every reconnection attempt (several a second while a broker is down), and each
# failure is reported through the error callback already (a warning per reason and minute), so
# they are shown only when an operator asks for them (this logger at DEBUG or INFO).
LIBRDKAFKA = logging.getLogger("lucid_hub.log.librdkafka")
if LIBRDKAFKA.level == logging.NOTSET:  # (a level the operator's logging set up wins)
    LIBRDKAFKA.setLevel(logging.CRITICAL)
WARN_EVERY = 60.0  # seconds between warnings of the same reason
RETRY_AFTER = 5.0  # seconds a broker that did not answer is taken to be down


def plain_reason(reason: str) -> str:
    """librdkafka's error as an operator reads it, one phrasing for one failure: a TLS
    handshake that fails (a certificate not trusted, a host name not in it) is reported as
    "<broker>: SSL handshake failed: <OpenSSL's reason> (after … in state SSL_HANDSHAKE)" or,
    on a busy machine, without "SSL handshake failed" when OpenSSL's error surfaces on the
    transport's read; both become the first."""
    if "in state SSL_HANDSHAKE" in reason and "SSL handshake failed" not in reason:
        broker, sep, rest = reason.partition(": ")
        return f"{broker}: SSL handshake failed: {rest}" if sep else f"SSL handshake failed: {reason}"
    return reason

class KafkaPatchLog:
    def __init__(self, bootstrap: str, topic: str, *, partitions: int = 3, session_timeout_ms: int = 6000,
                 timeout: float = 30.0, extra: dict[str, Any] | None = None) -> None:
        """`extra`: the librdkafka properties every client shares (security: kafka_config.py)."""
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.written_by_archive = False  # the archive writes outbox rows; the publisher relays them
        self.session_timeout_ms = session_timeout_ms
        self.timeout = timeout
        self.extra = {k: v for k, v in (extra or {}).items() if k != "bootstrap.servers"}
        self.last_error = ""  # the last error a client of this log reported (why Kafka does not answer)
        self._warned: dict[str, float] = {}
        self._topic_ready = False
        self._topic_lock = threading.Lock()
        self._down_until = 0.0
        self._down_reason = ""
        self._admin: AdminClient | None = None
        self._producer = self._new_producer()

    def common(self) -> dict[str, Any]:
        """What every client of the log is configured with: the brokers, security, and the
        error and log callbacks."""
        return {"bootstrap.servers": self.bootstrap, **self.extra, "error_cb": self._error, "logger": LIBRDKAFKA}

    def _error(self, err: KafkaError) -> None:
        reason = plain_reason(err.str())
        now = time.monotonic()
        if now - self._warned.get(reason, -WARN_EVERY) >= WARN_EVERY:
            self._warned[reason] = now
            log.warning("Kafka: %s", reason)
        if "brokers are down" not in reason or not self.last_error:  # (the cause says more)
            self.last_error = reason

    def why(self, what: str) -> str:
        """`what` failed, with librdkafka's last reported reason."""
        return f"{what}: {self.last_error}" if self.last_error else what

    def _new_producer(self) -> Producer:
        try:
            return Producer({
                **self.common(),
                "enable.idempotence": True,  # implies acks=all and ordered retries
                "acks": "all",
                "linger.ms": 1,
            })
        except KafkaException as exc:  # a property librdkafka does not take (the properties file)
            raise ConfigError(f"Kafka client settings: {exc.args[0].str()}") from None

    def ensure_topic(self, timeout: float | None = None) -> None:
        """Create the topic unless it exists (once per process); LogUnavailableError with
        the reason when the broker does not answer in time (LUCID_KAFKA_TIMEOUT, 10 s at most).
        After a failure, calls within RETRY_AFTER seconds fail at once with the same reason: a
        start, a command or a readiness probe does not wait for a broker known to be down."""
        if self._topic_ready:
            return
        with self._topic_lock:
            if self._topic_ready:
                return
            if time.monotonic() < self._down_until:
                raise LogUnavailableError(self._down_reason)
            try:
                self._create_topic(min(timeout or self.timeout, 10.0))
            except LogUnavailableError as exc:
                self._down_until, self._down_reason = time.monotonic() + RETRY_AFTER, str(exc)
                raise
            self._topic_ready = True

    def _create_topic(self, timeout: float) -> None:
        if self._admin is None:
            self._admin = AdminClient(self.common())
        admin = self._admin
        futures = admin.create_topics([NewTopic(self.topic, num_partitions=self.partitions,
                                                replication_factor=-1)], request_timeout=timeout)
        try:
            futures[self.topic].result(timeout=timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                admin.poll(0)  # its error reports (why the broker did not answer)
                raise LogUnavailableError(self.why(f"cannot create Kafka topic {self.topic}: "
                                                    f"{exc.args[0].str()}")) from None
        except TimeoutError:
            admin.poll(0)
            raise LogUnavailableError(self.why(f"Kafka did not answer within {timeout:g} s")) \
                from None

    def append(self, records: list[LogRecord]) -> None:
        self.ensure_topic()
        failures: list[str] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())

        for r in records:
            self._producer.produce(self.topic, key=r.graph.encode(), value=r.body,
                                   headers={PATCH_ID_HEADER: r.patch_id.encode()}, on_delivery=delivered)
        remaining = self._producer.flush(self.timeout)
        if remaining or failures:
            reason = failures[0] if failures else f"{remaining} records unacknowledged after {self.timeout:g} s"
            # Not appended, as far as the caller knows: the rows stay in the outbox and are
            # relayed again. Records the producer still held would otherwise go out on their
            # own once the broker is back, beside that relay — each patch twice in the log.
            # (Any that reached the broker before are found by the relay's look at the tail.)
            # A new producer takes over: the idempotent one whose records were purged in flight
            # is fenced by the broker ("a newer producer with the same id") once it is back.
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer.flush(0)  # their delivery reports (purged), so nothing of them lingers
            self._producer = self._new_producer()
            raise LogUnavailableError(self.why(f"Kafka did not take the patches: {reason}"))

    def holding(self, patch_ids: set[str], recent: int) -> set[str]:
        return recent_patch_ids(self, recent) & patch_ids if patch_ids else set()

    def consumer(self, group: str) -> KafkaLogConsumer:
        """A consumer in `group`; the topic is created first when the broker answers (else
        the consumer's polls say why it does not)."""
        try:
            self.ensure_topic()
        except LogUnavailableError as exc:
            log.warning("the patch log's consumer %s starts without its topic: %s", group, exc)
        return KafkaLogConsumer(self, group)

    def check(self, timeout: float = 2.0) -> None:
        self.ensure_topic(timeout)
        try:
            meta = self._producer.list_topics(self.topic, timeout=timeout).topics.get(self.topic)
        except KafkaException as exc:
            self._producer.poll(0)
            raise LogUnavailableError(self.why(f"Kafka does not answer: {exc.args[0].str()}")) from None
        if meta is None or meta.error is not None:
            raise LogUnavailableError(f"Kafka topic {self.topic}: {meta.error.str() if meta else 'unknown'}")
        leaderless = [p for p in meta.partitions.values() if p.leader < 0]
        if not meta.partitions or leaderless:
            raise LogUnavailableError(f"Kafka topic {self.topic}: {len(leaderless)} partitions without a leader")

    def close(self) -> None:
        self._producer.flush(self.timeout)


class KafkaLogConsumer:
    def __init__(self, log: KafkaPatchLog, group: str) -> None:
        self.topic = log.topic
        self._log = log
        self._consumer = Consumer({
            **log.common(),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": log.session_timeout_ms,
            "heartbeat.interval.ms": max(100, log.session_timeout_ms // 12),
        })
        self._consumer.subscribe([log.topic])

    def poll(self, max_records: int = 100, timeout: float = 1.0) -> list[LogRecord]:
        out = []
        for msg in self._consumer.consume(num_messages=max_records, timeout=timeout):
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise LogUnavailableError(self._log.why(f"Kafka consumer error: {error.str()}"))
            headers = dict(msg.headers() or [])
            key = msg.key()
            out.append(LogRecord(
                graph=key.decode() if isinstance(key, bytes) else str(key or ""),
                patch_id=_bytes(headers.get(PATCH_ID_HEADER)).decode(),
                body=_bytes(msg.value()),
                position=f"{msg.partition()}:{msg.offset()}",
            ))
        return out

    def commit(self, records: list[LogRecord]) -> None:
        if not records:
            return
        last: dict[int, int] = {}
        for r in records:
            partition, offset = (int(x) for x in r.position.split(":"))
            last[partition] = max(last.get(partition, -1), offset)
        self._consumer.commit(offsets=[TopicPartition(self.topic, p, o + 1) for p, o in last.items()],
                              asynchronous=False)

    def close(self) -> None:
        self._consumer.close()


def _bytes(value: str | bytes | None) -> bytes:
    if value is None:
        return b""
    return value if isinstance(value, bytes) else value.encode()


def recent_patch_ids(log: KafkaPatchLog, per_partition: int, timeout: float = 10.0) -> set[str]:
    """Patch ids among the last `per_partition` records of each partition (read without a group).

    The relay appends at most one batch between the broker's acknowledgement and deleting
    its outbox rows; a crash there leaves rows whose patches the log already holds. Repair
    reads this tail and drops those rows instead of appending the patches twice.
    """
    consumer = Consumer({**log.common(), "group.id": "lucid-hub-repair", "enable.auto.commit": False})
    try:
        try:
            metadata = consumer.list_topics(log.topic, timeout=timeout)
        except KafkaException as exc:
            raise LogUnavailableError(log.why(f"Kafka does not answer: {exc.args[0].str()}")) from None
        partitions = list(metadata.topics[log.topic].partitions)
        assignment, ends = [], {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(log.topic, p), timeout=timeout)
            if high > low:
                assignment.append(TopicPartition(log.topic, p, max(low, high - per_partition)))
                ends[p] = high
        if not assignment:
            return set()
        consumer.assign(assignment)
        found: set[str] = set()
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is not None:
                    continue
                found.add(_bytes(dict(msg.headers() or []).get(PATCH_ID_HEADER)).decode())
                offset, partition = msg.offset(), msg.partition()
                if offset is not None and partition is not None and offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
        if ends:
            raise LogUnavailableError(log.why("could not read the tail of the Kafka topic to repair the outbox"))
        return found
    finally:
        consumer.close()
