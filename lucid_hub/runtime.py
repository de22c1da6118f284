"""The parts of one running hub, opened from settings in dependency order and closed again."""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from sqlalchemy import text

from lucid_hub import memory
from lucid_hub.archive import Archive
from lucid_hub.auth import ClientRegistry, TokenService
from lucid_hub.auth.admins import AdminAccounts
from lucid_hub.auth.tokens import TrustedIssuer
from lucid_hub.config import Settings
from lucid_hub.db.session import Database
from lucid_hub.delivery.deliverer import Deliverer
from lucid_hub.errors import StoreError
from lucid_hub.leadership import Leadership
from lucid_hub.locks import DatabaseLocks, exclusive
from lucid_hub.log import PatchLog, open_log
from lucid_hub.metrics import (
    Metrics,
    cache_metrics,
    canonicalization_metrics,
    mirror_metrics,
    serve_metrics,
    subscription_metrics,
)
from lucid_hub.mirror import MirroredGraphs, MirrorRegistry, MirrorService
from lucid_hub.outbound import AddressPolicy
from lucid_hub.patch_stream import PatchStream
from lucid_hub.policy.policy_graph import PolicyService
from lucid_hub.publish import Publisher
from lucid_hub.publish.capture import Capture
from lucid_hub.queries.evaluator import QueryEngine
from lucid_hub.queries.service import QueryService
from lucid_hub.queries.windows import WindowService
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.replicas import REPORT_EVERY, Replicas, reporter
from lucid_hub.resources import notification_url
from lucid_hub.rules.offering import RuleOffers
from lucid_hub.rules.service import RuleParts, RuleService
from lucid_hub.signing import KeyRing, TrustedKeys
from lucid_hub.store import GraphStore
from lucid_hub.store.remote import RemoteConfig, RemoteStore
from lucid_hub.store.remote_sync import RemoteSync, store_metrics
from lucid_hub.store.sparql import SparqlGuard
from lucid_hub.streams.inbox import Inbox
from lucid_hub.streams.members import StreamIndex
from lucid_hub.supervisor import Supervisor
from lucid_hub.websub import CallbackNotices, WebSubHub

log = logging.getLogger(__name__)
# LUCID_MSG_CACHE_STATEMENTS (the cache's bound before it was in bytes) as bytes.
LEGACY_BYTES_PER_STATEMENT = 220


@dataclass
class Runtime:
    settings: Settings
    db: Database
    archive: Archive
    store: GraphStore
    log: PatchLog
    keys: KeyRing
    canonicalizer: Canonicalizer
    publisher: Publisher
    clients: ClientRegistry
    tokens: TokenService
    policies: PolicyService
    metrics: Metrics
    sparql: SparqlGuard
    stream: PatchStream
    mirrors: MirrorService  # its thread runs in `serve` only
    hub: WebSubHub
    delivery: Deliverer  # delivering once start_delivery(run=True) ran (else a `worker` delivers)
    queries: QueryService  # evaluating (in the leader) once queries.start(roles) ran
    windows: WindowService  # windowed queries: evaluating (in the leader) once windows.start(roles) ran
    streams: StreamIndex  # the graphs' event streams (LDES), built from the archive when read
    inbox: Inbox  # the graphs' Linked Data Notifications inboxes
    mirror_registry: MirrorRegistry  # the mirrors as operators and admins add, list, trust and remove them
    admins: AdminAccounts  # the console's accounts
    rules: RuleService  # event-condition-action rules; deferred ones run (in the leader) once rules.start(roles) ran
    # The process that holds the leadership lease (lucid_hub.leadership): of all processes on
    # all replicas, it alone relays to Kafka, keeps the mirrors, evaluates queries and windows
    # and runs deferred rules. Candidates are the processes with their data directory's first
    # store copy (`candidate`); each serves its replica's metrics port.
    leader: bool = True
    candidate: bool = True
    leadership: Leadership | None = None
    # The background roles of this process (lucid_hub.supervisor): started by start_roles (the
    # leader's) and start_following (every process's).
    roles: Supervisor = field(default_factory=Supervisor)
    metrics_listener: WSGIServer | None = None  # the LUCID_METRICS_PORT listener, once start_metrics_listener() ran
    # What a process that lost the leadership does after it stopped relaying (under `serve`:
    # it exits, and is started again as a follower; server.py).
    on_lost_leadership: Callable[[str], None] | None = None
    serving: bool = False  # start() ran: a candidate waits to take the roles over
    # The operator's own triple stores (LUCID_STORE_*, LUCID_STORES_FILE), each kept at the
    # archive's head by a leader's role `remote-store:<name>`; none: the embedded store only.
    remotes: list[RemoteSync] = field(default_factory=list)
    # Direct edits of the store's graphs published as patches (`lucid-hub capture`, POST
    # /admin/store/capture, and every LUCID_STORE_CAPTURE_SECONDS in the leader).
    capture: Capture | None = None
    # Rules offered to partner hubs and by them (rules.offering; docs/rules.md).
    rule_offers: RuleOffers | None = None
    # Every replica's report of itself (lucid_hub.replicas): this process's, once start() ran.
    replicas: Replicas | None = None
    # What needs attention that only this process's memory holds, for its report: each source
    # by name (the console's: web/console/attention.py `notes`, set by the app).
    notes_from: dict[str, Callable[[], list[dict[str, str]]]] = field(default_factory=dict)

    def _keep_lease(self) -> None:
        """The role `leadership`: renew the lease; where the hub serves, take it when it is free
        (and the roles with it, on a thread of their own: a mirror catching up can take longer
        than a renewal may wait); on losing it, resign."""
        assert self.leadership is not None
        change = self.leadership.renew(take=self.serving)
        if change == "gained":
            self.roles.once("take-over", self.lead)
        elif change == "lost":
            self._resign("another process holds the lease, or it ran out before it could be renewed")

    def database_answers(self) -> None:
        """Raise unless the database answers a trivial statement now (readiness)."""
        with self.db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    @property
    def relay_interval(self) -> float:
        """Seconds between the relay's looks at the outbox: often with several processes
        (others' publishes wait for it), else only to retry (publishes wake it)."""
        return 2.0 if self.settings.web_workers == 1 else 0.1

    def start(self) -> None:
        """Start this process's background work, where the hub serves: deliveries (unless
        `worker`s deliver), the store following the other replicas, the leader's roles, the
        hand-over of the roles to this process if it takes the lease later, and the metrics
        port of one process of each replica."""
        self.start_delivery(self.settings.deliver_in_process)
        self.start_following()
        self.start_roles()
        self.serving = True  # a candidate waits to take the leader's roles over
        if self.replicas is None:
            self.replicas = Replicas(self.db, replica_id(self.settings.data_dir))
            self.roles.add("replica-report", reporter(
                self.replicas, self.publisher.sync.lag, lambda: self.leader,
                lambda: [r.name for r in self.roles.all() if r.failures_in_a_row],
                lambda: [note for source in list(self.notes_from.values()) for note in source()]),
                every=REPORT_EVERY)
            self.roles.start()
        if self.candidate:
            self.start_metrics_listener()

    def start_roles(self) -> None:
        """Start what the leader does (called where the hub serves, and on taking the lease)."""
        if not self.leader:
            return
        self.mirrors.start(self.roles)
        self.queries.start(self.roles)
        self.windows.start(self.roles)
        self.rules.start(self.roles)
        if self.remotes and self.roles.role(f"remote-store:{self.remotes[0].store.config.name}") is None:
            for sync in self.remotes:
                self.roles.add(f"remote-store:{sync.store.config.name}", sync.round, every=0.5, backoff_max=10.0)
            self.metrics.watch(lambda: store_metrics(self.remotes))
            if self.settings.store_capture_seconds > 0 and self.capture is not None:
                self.roles.add("store-capture", self.capture.all, every=self.settings.store_capture_seconds)
        self.publisher.relay.start(self.roles, interval=self.relay_interval)
        self.roles.start()

    def lead(self) -> None:
        """This process took the leadership lease after waiting for it: take the roles over
        (the relay first appends what the last leader left in the outbox)."""
        log.info("this process now leads the hub's replicas")
        self.leader = True
        self.publisher.relay.enabled = True
        self.queries.lead()
        self.windows.lead()
        self.rules.lead()
        try:
            self.publisher.relay.resume()
        except Exception as exc:  # the relay's own loop tries again
            log.warning("relay after taking the leadership failed: %s", exc)
        self.start_roles()

    def _resign(self, reason: str) -> None:
        """The lease is lost: stop relaying at once, then `on_lost_leadership` (the roles'
        threads go with the process under `serve`, which exits; see server.py)."""
        log.error("leadership lost: %s", reason)
        self.leader = False
        self.publisher.relay.enabled = False
        if self.on_lost_leadership is not None:
            self.on_lost_leadership(reason)

    def start_following(self, interval: float = 1.0) -> None:
        """Keep this process's store at most about `interval` behind the archive (other
        replicas' publishes): a read catches its graph up before it answers anyway, but a
        replica that applies as patches come never makes a read wait for a long tail."""
        if self.roles.role("store-follower") is None:
            self.roles.add("store-follower", self.publisher.sync.all, every=interval)
            self.roles.start()

    def start_metrics_listener(self) -> None:
        """/metrics on LUCID_METRICS_PORT, apart from the API port (see web.ops.metrics)."""
        if self.settings.metrics_port and self.metrics_listener is None:
            self.metrics_listener = serve_metrics(self.settings.host, self.settings.metrics_port, self.metrics,
                                                  lambda: True)

    def start_delivery(self, run: bool = True) -> None:
        """Report subscriptions in the metrics; `run` starts delivering in the background."""
        self.metrics.watch(lambda: subscription_metrics(self.hub.subscriptions()))
        if run:
            self.delivery.start(self.roles)
            self.roles.start()

    @classmethod
    def open(cls, settings: Settings, *, repair: bool = True,
             on_lost_leadership: Callable[[str], None] | None = None) -> Runtime:
        """Open everything; upgrade the schema; generate keys at first start; repair.

        Processes of one data directory start one after the other (a file lock): schema
        upgrades, first-start keys and the policy files' load must not race. Each takes the
        first store copy no other process holds; the one with `store` is its data directory's
        candidate for the deployment's leadership, and leads if it can take the lease."""
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        with _startup_lock(settings.data_dir):
            return cls._open(settings, repair, on_lost_leadership)

    @classmethod
    def _open(cls, settings: Settings, repair: bool, on_lost_leadership: Callable[[str], None] | None) -> Runtime:
        remotes = RemoteConfig.all(settings)  # (a ConfigError: nothing opened yet)
        db = Database(settings.db_url)
        db.upgrade()
        try:
            store, slot = _open_store(settings)
        except StoreError:
            db.dispose()
            raise
        leadership = Leadership(db, settings.leader_lease_seconds, holder=replica_id(settings.data_dir)) \
            if slot == 0 else None
        try:
            leader = leadership is not None and leadership.acquire()
        except BaseException:
            store.close()
            db.dispose()
            raise
        try:
            patch_log = open_log(settings, db)  # (a ConfigError for the Kafka settings: nothing left open)
        except BaseException:
            if leader and leadership is not None:
                leadership.release()
            store.close()
            db.dispose()
            raise
        keys = KeyRing(settings.keys_dir)
        key = keys.ensure()
        canonicalizer = Canonicalizer(settings.canon_timeout, settings.canon_memory_mb)
        trusted_keys = TrustedKeys(keys.jwks())
        metrics = Metrics()
        archive = Archive(db)
        # Followers read the archive; with several processes of the hub, another one may have
        # archived a patch: they look again this often.
        stream = PatchStream(archive, poll=0.25 if settings.web_workers > 1 else 1.0)
        mirrored = MirroredGraphs(db)
        # The rules' cascade reacts to each archived patch (the publisher's hooks port); the
        # rule service, built after the publisher, writes through it. `allows` asks the access
        # conditions, whose service publishes through the publisher too: it is looked up when a
        # rule fires, by then long built.
        rule_parts = RuleParts.build(settings, db, archive, store, canonicalizer, metrics, key, leader=leader,
                                     allows=lambda party, graph, action: policies.allows(party, graph, action),
                                     read_only=mirrored)
        publisher = Publisher(archive, store, patch_log, key, canonicalizer, trusted_keys,
                              cache_bytes=memory.cache_bytes(
                                  settings.cache_bytes or settings.msg_cache_statements * LEGACY_BYTES_PER_STATEMENT,
                                  settings.web_workers, memory.container_limit()),
                              metrics=metrics,
                              lock_dir=settings.data_dir / "locks" if settings.web_workers > 1 else None,
                              patch_format=settings.patch_format, read_only=mirrored, announce=stream.announce,
                              relay=leader,  # one relay keeps each graph's order in the log
                              # a holder past its lease appends nothing
                              may_relay=(lambda: leadership.held) if leadership is not None else None,
                              group_commit=settings.group_commit,
                              db_locks=DatabaseLocks(db.engine) if settings.publish_db_lock and db.engine.dialect.name
                              == "postgresql" else None,
                              hooks=rule_parts.cascade)
        tokens = TokenService(db, keys, settings.public_url, lifetime=settings.token_lifetime,
                              trusted=TrustedIssuer.parse_all(settings.trusted_issuers))
        policies = PolicyService(db, archive, publisher, canonicalizer, trusted_keys)
        notices = CallbackNotices(settings)
        delivery = Deliverer(settings, db, archive, canonicalizer, policies, deny=notices.deny, stream=stream,
                             metrics=metrics)
        hub = WebSubHub(settings, db, archive, notices, on_subscribed=delivery.subscribed)
        queries = QueryService(settings, db, store, policies, tokens, publisher.sync.all, evaluates=leader)
        clients = ClientRegistry(db)

        def callback_prefixes(owner: Any) -> list[str]:
            client = clients.get(owner.endpoint_id)
            return list(client.callback_prefixes) if client is not None else []

        rules = RuleService(settings, db, archive, store, canonicalizer, metrics, rule_parts, publisher,
                            read_only=mirrored, callback_prefixes=callback_prefixes)
        runtime = cls(settings, db, archive, store, patch_log, keys, canonicalizer, publisher, clients,
                      tokens, policies, metrics, SparqlGuard(settings, store), stream,
                      MirrorService(settings, db, archive, publisher, canonicalizer, mirrored, stream, metrics),
                      hub, delivery, queries, WindowService(settings, db, publisher, policies, tokens,
                                                            _window_engine(settings, store), canonicalizer,
                                                            evaluates=leader, trial=_window_engine(settings, store),
                                                            on_written=queries.notify_channels),
                      StreamIndex(archive, canonicalizer, settings.stream_graphs),
                      Inbox(db, lambda ident: notification_url(settings.public_url, ident),
                            max_bytes=settings.inbox_max_bytes, per_minute=settings.inbox_rate,
                            poll=stream.poll),
                      MirrorRegistry(db, AddressPolicy.of(settings)), AdminAccounts(db),
                      rules, leader=leader, candidate=slot == 0, leadership=leadership,
                      on_lost_leadership=on_lost_leadership)
        runtime.remotes = [RemoteSync(RemoteStore(config), archive, canonicalizer, store, publisher.locks.lock)
                           for config in remotes]
        runtime.capture = Capture(runtime.remotes, publisher, canonicalizer)
        runtime.rule_offers = RuleOffers(settings, db, rules, key, AddressPolicy.of(settings))
        if leadership is not None:
            runtime.roles.add("leadership", runtime._keep_lease, every=settings.leader_lease_seconds / 3)
            runtime.roles.start()
        metrics.watch(runtime.roles.metrics)
        metrics.watch(lambda: canonicalization_metrics(canonicalizer.failures))
        metrics.watch(lambda: mirror_metrics(runtime.mirror_registry.list()))
        metrics.watch(lambda: cache_metrics(*publisher.cache.held, publisher.cache.max_bytes))
        try:
            if repair:
                publisher.repair()
            log.info("%s", policies.start(settings.policies_dir))
            if repair:
                runtime.rules.recover()  # cascades a crash interrupted (after the store caught up)
        except BaseException:
            runtime.close()
            raise
        return runtime

    def close(self) -> None:
        self.roles.stop()  # every loop ends after its round; then the services close
        if self.metrics_listener is not None:
            self.metrics_listener.shutdown()
            self.metrics_listener.server_close()
        self.mirrors.stop()
        self.rules.stop()
        self.windows.stop()
        self.queries.stop()
        self.delivery.stop()
        self.hub.notices.stop()
        self.publisher.relay.stop()
        self.sparql.close()
        for sync in self.remotes:
            sync.store.close()
        self.log.close()
        self.canonicalizer.close()
        self.store.close()
        if self.leadership is not None:
            self.leadership.release()
        if self.replicas is not None:
            try:
                self.replicas.leave()
            except Exception as exc:  # its report goes silent instead
                log.warning("could not take this replica's report away: %s", exc)
        self.publisher.locks.close()
        self.db.dispose()


def _window_engine(settings: Settings, store: GraphStore) -> QueryEngine:
    """A worker for windowed queries, apart from the continuous queries' one (it holds no
    graphs: a window carries its data): one party's window killed at its budget costs no
    other party its followed graphs' reload."""
    return QueryEngine(store, settings.query_memory_mb, settings.query_budget, settings.query_max_result_bytes,
                       base=f"{settings.public_url}/sparql")


def replica_id(data_dir: Path) -> str:
    """This data directory's name in the leadership lease: made at its first start. One process
    of a data directory at a time holds its first store copy (RocksDB's lock), so a candidate
    restarted after a crash is known to succeed the holder of that name, and resumes its lease
    at once instead of waiting for it to run out."""
    path = data_dir / "replica-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        name = f"{socket.gethostname()[:80]}:{secrets.token_hex(8)}"
        path.write_text(name + "\n")
        return name


def _open_store(settings: Settings) -> tuple[GraphStore, int]:
    """The first store copy no other process holds (RocksDB locks it), and its slot."""
    problem: StoreError | None = None
    for slot, path in enumerate(settings.store_slots()):
        try:
            return GraphStore(path), slot
        except StoreError as exc:
            problem = exc
    raise StoreError(f"{problem} (is another lucid-hub process using {settings.data_dir}?)")


@contextlib.contextmanager
def _startup_lock(data_dir: Path) -> Iterator[None]:
    with (data_dir / ".startup.lock").open("a") as handle, exclusive(handle):
        yield
