"""One settings object, read once from `LUCID_*` environment variables.

Embedded defaults need nothing installed; every setting can be overridden by the operator.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lucid_hub.errors import ConfigError
from lucid_hub.networks import Network, parse_networks

ENV_PREFIX = "LUCID_"


def listening_url(host: str, port: int) -> str:
    """The URL of a listening address: what LUCID_PUBLIC_URL is when it is not configured (a
    wildcard address is reached at loopback)."""
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 (a comparison, not a bind)
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _default_data_dir() -> Path:
    return Path.cwd() / "data"


def _default_policies_dir() -> Path:
    """The `policies/` directory shipped beside the package (source checkout or image)."""
    return Path(__file__).resolve().parent.parent / "policies"


@dataclass(frozen=True)
class Settings:
    """Configuration of one lucid-hub process. Field `x` is read from `LUCID_X`."""

    data_dir: Path = field(default_factory=_default_data_dir)
    # Seconds one canonicalisation may take before it fails with CanonicalizationLimitExceeded.
    canon_timeout: float = 5.0
    # Memory (MiB) the canonicalisation guard process may use before it is stopped.
    canon_memory_mb: int = 2048
    # Largest patch document (bytes) that is read for apply or verify.
    max_patch_bytes: int = 256 * 1024 * 1024
    # SQLAlchemy URL of the relational state; default: SQLite in the data directory. Or, as
    # operators configure a managed PostgreSQL, its parts (docs/operations.md, "PostgreSQL"):
    # host, port, database, user, a password from the variable or a file (`_FILE`, a mounted
    # Secret) and libpq's TLS settings (sslmode: disable … verify-full; the CA and a client
    # certificate as PEM files).
    database_url: str = ""
    database_host: str = ""
    database_port: int = 5432
    database_name: str = "lucid"
    database_user: str = "lucid"
    database_password: str = field(default="", repr=False)
    database_password_file: str = ""
    database_sslmode: str = ""
    database_sslrootcert: str = ""
    database_sslcert: str = ""
    database_sslkey: str = ""
    # Kafka bootstrap servers; empty: the embedded SQL patch log.
    kafka_bootstrap: str = ""
    kafka_topic: str = "lucid-hub.patches"
    kafka_partitions: int = 3
    # librdkafka's default (45 s) makes joining a consumer group take ~23 s.
    kafka_session_timeout_ms: int = 6000
    # Seconds the relay waits for Kafka to acknowledge a batch (and to create the topic): past
    # that the batch stays in the outbox, the publish is done all the same, the relay tries again.
    kafka_timeout: float = 30.0
    # Kafka as companies secure it (docs/operations.md, "Kafka"): PLAINTEXT, SSL, SASL_PLAINTEXT
    # or SASL_SSL; TLS files (PEM); a SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
    # OAUTHBEARER) and its credentials. Secrets come from the variable or from a file (`_FILE`,
    # a mounted Secret). Any other librdkafka property: `kafka_properties_file`, a client
    # .properties file (what managed Kafka services hand out); the settings here win over it.
    kafka_security_protocol: str = ""
    kafka_ssl_ca_file: str = ""
    kafka_ssl_cert_file: str = ""
    kafka_ssl_key_file: str = ""
    kafka_ssl_key_password: str = field(default="", repr=False)
    kafka_ssl_key_password_file: str = ""
    kafka_ssl_check_hostname: bool = True
    kafka_sasl_mechanism: str = ""
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = field(default="", repr=False)
    kafka_sasl_password_file: str = ""
    kafka_oauth_token_url: str = ""
    kafka_oauth_client_id: str = ""
    kafka_oauth_client_secret: str = field(default="", repr=False)
    kafka_oauth_client_secret_file: str = ""
    kafka_oauth_scope: str = ""
    kafka_properties_file: str = ""
    # A triple store the operator runs, that the hub keeps graphs in (docs/stores.md): its SPARQL
    # query and update endpoints (and Graph Store endpoint), Basic or Digest credentials or a
    # bearer token (variable or `_FILE`), a time-out and a CA file; which graphs (IRIs, or
    # prefixes ending in `*`); blank nodes as blank nodes or as skolem IRIs under a base.
    store_query_url: str = ""
    store_update_url: str = ""
    store_gsp_url: str = ""
    store_user: str = ""
    store_password: str = field(default="", repr=False)
    store_password_file: str = ""
    store_auth: str = "basic"
    store_token: str = field(default="", repr=False)
    store_token_file: str = ""
    store_timeout: float = 30.0
    store_max_answer_bytes: int = 1 << 30
    store_ca_file: str = ""
    store_graphs: str = "*"
    store_blank_nodes: str = "blank"
    store_skolem_base: str = "urn:lucid-hub:bnode:"
    # Seconds between captures of the store's graphs that applications also write (0: none).
    store_capture_seconds: float = 0.0
    # Further stores, each with its own graphs: a JSON file (docs/stores.md, "Several stores").
    stores_file: str = ""
    # The base URL partners reach this hub at (links, WebSub topics, discovery headers).
    public_url: str = "http://127.0.0.1:8080"
    host: str = "127.0.0.1"
    port: int = 8080
    # Largest request body (bytes) the HTTP API accepts.
    max_body_bytes: int = 64 * 1024 * 1024
    # SPARQL (queries and updates) runs in this many worker processes per hub process, each
    # request within a time limit (seconds, kept whether or not the client waits) and each
    # worker within a memory limit (MiB); the largest query and update text, and result
    # (bytes), accepted.
    sparql_workers: int = 2
    sparql_timeout: float = 30.0
    sparql_memory_mb: int = 2048
    max_query_bytes: int = 100_000
    max_update_bytes: int = 1_000_000
    max_result_bytes: int = 64 * 1024 * 1024
    # Continuous queries (docs/queries.md): subscriptions one party may hold; seconds one
    # evaluation of one subscription may take (its budget: beyond it the subscription ends);
    # the largest result set (bytes of JSON) a subscription may have; notifications kept per
    # subscription for clients that resume; memory limit (MiB) of the evaluating worker.
    query_subscriptions_per_party: int = 100
    query_budget: float = 5.0
    query_max_result_bytes: int = 4 * 1024 * 1024
    query_retain: int = 1000
    query_memory_mb: int = 4096
    # WebSockets (SE protocol): a ping every this many seconds, closed without a pong within
    # the timeout; a subscription whose socket closed so is ended when not resumed within
    # query_orphan_seconds (docs/queries.md, "Sockets that go away").
    ws_ping_seconds: float = 25.0
    ws_ping_timeout: float = 20.0
    query_orphan_seconds: float = 600.0
    # Streams as Linked Data (docs/streams.md): members per page of a graph's event stream
    # (a page never changes once full, so this is fixed for a hub's life: changing it moves
    # members to other page URLs that clients may have cached); graphs whose streams are kept
    # in memory.
    stream_page_members: int = 500
    stream_graphs: int = 64
    # Inboxes (docs/streams.md): the largest notification (bytes), and notifications one sender
    # may post a minute (per process).
    inbox_max_bytes: int = 64 * 1024
    inbox_rate: int = 60
    # The default graph (docs/http-api.md, "The default graph"): the graph SPARQL's default
    # graph stands for in updates, queries and subscriptions that name none. One IRI for the
    # hub, or a template whose `{account}` is each party's account: a graph per party. Empty:
    # the hub has no default graph (updates must name their graphs; queries read the union).
    default_graph: str = ""
    # Dynamic client registration (docs/auth.md): off, token (RFC 7591 with the operator's
    # initial access token: LUCID_DCR_TOKEN or _TOKEN_FILE) or open (anyone; closed networks);
    # the groups a registered client gets, and the scopes it may ask for; registrations one
    # address may make a minute.
    dcr: str = "off"
    dcr_token: str = field(default="", repr=False)
    dcr_token_file: str = ""
    dcr_groups: str = ""
    dcr_scopes: str = "graphs:read hub:subscribe"
    dcr_rate: int = 10
    # Notifications over MQTT (docs/queries.md, "MQTT"): the operator's broker (mqtt:// or
    # mqtts://; empty: no MQTT), the hub's credentials there, the CA of an mqtts broker, the
    # topics' prefix, and the broker's URL as partners reach it (default: the same).
    mqtt_url: str = ""
    mqtt_user: str = ""
    mqtt_password: str = field(default="", repr=False)
    mqtt_password_file: str = ""
    mqtt_ca_file: str = ""
    mqtt_topic_prefix: str = "lucid-hub"
    mqtt_public_url: str = ""
    # The applications' part of the hub's JSAP (docs/queries.md, "SEPA clients"): a JSON file
    # of namespaces, queries, updates, graphs and extended.
    jsap_file: str = ""
    # Rules (docs/rules.md): the deepest cascade of immediate rules (beyond it the cascade is
    # rolled back); seconds one rule's evaluation for one patch may take; attempts of a
    # failing deferred firing before it is recorded as failed and passed over.
    rules_max_depth: int = 16
    rules_budget: float = 5.0
    rules_max_attempts: int = 5
    # Format of the patches this hub makes (docs/patch-format.md): 2, or 1 while partners still
    # run a release that reads format 1 only. Either reads both.
    patch_format: int = 2
    # Patches per page of the archive container, and the bytes of patches after which a page
    # ends early (it holds one patch at least): partners cap what they read of one page.
    page_size: int = 100
    page_bytes: int = 8 * 1024 * 1024
    # Bytes of current graph versions' MSGs a process keeps in memory to diff bulk re-publishes
    # quickly; 0: a quarter of the container's memory limit split over LUCID_WEB_WORKERS, or
    # 512 MiB without a limit (lucid_hub.memory). LUCID_MSG_CACHE_STATEMENTS, its former
    # spelling in statements, is still read (as about 220 bytes each).
    cache_bytes: int = 0
    msg_cache_statements: int = 0
    # Spark master for diff jobs, and `spark.*` settings passed through ("key=value,key=value").
    spark_master: str = "local[*]"
    spark_conf: str = ""
    # Files at least this large are published with the Spark engine (when pyspark is installed).
    spark_threshold_bytes: int = 256 * 1024 * 1024
    # On a Spark cluster, each job takes this package along (a zip of the driver's), so that
    # executors need only pyspark, pyarrow and pyoxigraph; false: the executors' own copy.
    spark_ship_package: bool = True
    # Access conditions (`*.ttl`) loaded at start; default: the shipped `policies/` directory.
    policies_dir: Path = field(default_factory=_default_policies_dir)
    # Lifetime (seconds) of the access tokens this hub issues.
    token_lifetime: int = 3600
    # Trusted external OpenID Connect issuers: a JSON list, or the path of a JSON file (docs/auth.md).
    trusted_issuers: str = ""
    # Failed token or sign-in attempts per client (or admin) and address, and minute, before
    # 429; an address as a whole may fail five times as often (lucid_hub.auth.ratelimit).
    auth_rate_limit: int = 10
    # Proxies (CIDRs, comma-separated) whose X-Forwarded-For names the client's address, e.g.
    # the Ingress controller's pods. Empty: the peer's address is the client's.
    trusted_proxies: str = ""
    # Development mode: the admin session cookie may travel over plain HTTP; WebSub callbacks
    # may be http and on loopback. For demos and tests, never in production.
    dev_mode: bool = False
    # WebSub leases (seconds): given when the subscriber asks for none, and the bounds.
    lease_default: int = 10 * 24 * 3600
    lease_min: int = 60
    lease_max: int = 30 * 24 * 3600
    # Address ranges (CIDR, comma-separated) callbacks may resolve to although private.
    callback_allow_cidrs: str = ""
    # A PEM file of certificate authorities trusted, besides the usual ones (certifi's), by
    # every outbound https request: callbacks, intent verification, mirrored hubs, webhooks
    # (partners whose servers carry certificates of a private PKI).
    outbound_ca_file: str = ""
    # Deliveries: attempts before a subscription is marked failed; backoff (seconds) doubles
    # from base up to max, with jitter; seconds a callback may take to answer.
    delivery_max_attempts: int = 10
    delivery_backoff_base: float = 1.0
    delivery_backoff_max: float = 600.0
    delivery_timeout: float = 10.0
    # Offer HTTP/2 to https callbacks (multiplexed on one connection per host; slower here
    # than HTTP/1.1 over kept-alive pools: delivery/sender.py).
    delivery_http2: bool = False
    # Deliveries a process has in flight in its fast lane (one event loop holds them all:
    # delivery/sender.py; the names are from when each was a thread), and how many of them
    # one client and one callback host may hold at once; callback hosts whose POSTs take
    # longer than delivery_slow_seconds on average are served by delivery_slow_threads of
    # their own (docs/websub.md, "Fairness").
    delivery_threads: int = 16
    delivery_per_client: int = 8
    delivery_per_host: int = 8
    delivery_slow_threads: int = 4
    delivery_slow_seconds: float = 2.0
    # Subscriptions one client may hold (a renewal does not count again).
    max_subscriptions_per_client: int = 1000
    # Seconds a delivery process's claim on a subscription lasts (renewed while it works):
    # how long a killed worker's subscriptions wait before another takes them over.
    delivery_claim_seconds: float = 60.0
    # `serve` delivers WebSub notifications itself (false: leave it to `lucid-hub worker`s).
    deliver_in_process: bool = True
    # Concurrent publishes of a graph share one database transaction and one store update
    # (each still its own signed, chained patch; docs/decisions.md). Off: one of each per patch.
    group_commit: bool = True
    # Seconds a leadership lease lasts unless renewed (renewed every third): a dead leader's
    # roles are taken over within about 1.33x this (lucid_hub.leadership).
    leader_lease_seconds: float = 10.0
    # /readyz answers 503 while this process's store is more patches behind the archive than this.
    ready_max_lag: int = 1000
    # On PostgreSQL: writers of a graph on every host of the database take turns by an advisory
    # lock of the graph (hub replicas with stores of their own; lucid_hub.locks.DatabaseLocks).
    publish_db_lock: bool = True
    # Mirrors whose publisher withdrew access: keep the replica as it was, or purge it.
    mirror_on_revoke: str = "keep"
    # Mirrors tell their publisher how far they got: an LDN receipt to the graph's inbox per
    # new head (docs/streams.md, "Receipts"). Off: the publisher learns nothing from us.
    mirror_receipts: bool = True
    # What one mirror's maintenance round may spend on its publisher (docs/mirrors.md,
    # "Isolation"): seconds, archive pages, and bytes of any one answer (an archive page, the
    # graph for the clone check); mirrors maintained at once, each on its own; seconds at most
    # between two tries of a mirror whose rounds fail.
    mirror_round_seconds: float = 20.0
    mirror_round_pages: int = 50
    mirror_max_answer_bytes: int = 64 * 1024 * 1024
    mirror_workers: int = 4
    mirror_max_backoff: float = 300.0
    # Logs of serve and worker: "text" for people, "json" (one object per line) for collectors.
    log_format: str = "text"
    log_level: str = "INFO"
    # `serve`: gunicorn worker processes (each a hub on its own copy of the store, one of them
    # the leader; docs/operations.md), request threads of each, and seconds in-flight work may
    # take after SIGTERM.
    web_workers: int = 1
    web_threads: int = 8
    graceful_timeout: int = 30
    # The front's limits (lucid_hub.web.front, docs/operations.md "Connections"): push channels
    # (event streams, WebSockets) of a process in total, per client address and per OAuth
    # client; seconds a client may take to accept a part of an answer or an event, to send a
    # request body, and to authenticate a WebSocket opened without a token; threads that read
    # for push channels; seconds an idle keep-alive connection is kept.
    push_max_connections: int = 10_000
    push_per_address: int = 256
    push_per_client: int = 64
    push_send_seconds: float = 30.0
    body_seconds: float = 60.0
    push_auth_seconds: float = 10.0
    push_threads: int = 4
    # Requests of one client (its credentials) that request threads serve at once; the rest
    # wait their turn on the event loop, holding no thread. 0: a quarter of LUCID_WEB_THREADS.
    requests_per_client: int = 0
    keepalive_seconds: int = 75
    # `worker`: port of its own /metrics and /healthz listener (0: none).
    metrics_port: int = 0

    @cached_property
    def proxies(self) -> list[Network]:
        """LUCID_TRUSTED_PROXIES as networks."""
        return parse_networks(self.trusted_proxies)

    def spark_settings(self) -> dict[str, str]:
        """LUCID_SPARK_CONF as a dict of `spark.*` settings."""
        out = {}
        for item in filter(None, (part.strip() for part in self.spark_conf.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key.startswith("spark."):
                raise ConfigError(f"LUCID_SPARK_CONF: {item!r} is not spark.key=value")
            out[key.strip()] = value.strip()
        return out

    @property
    def db_url(self) -> str:
        """The database URL in force: LUCID_DATABASE_URL, or PostgreSQL from its parts
        (LUCID_DATABASE_HOST …), else SQLite in the data directory."""
        if self.database_url:
            return self.database_url
        if not self.database_host:
            return f"sqlite:///{self.data_dir / 'lucid-hub.db'}"
        from sqlalchemy.engine import URL

        query = {key: value for key, value in (
            ("sslmode", self.database_sslmode), ("sslrootcert", self.database_sslrootcert),
            ("sslcert", self.database_sslcert), ("sslkey", self.database_sslkey)) if value}
        url = URL.create("postgresql+psycopg", username=self.database_user,
                         password=self.secret("database_password") or None, host=self.database_host,
                         port=self.database_port, database=self.database_name, query=query)
        return url.render_as_string(hide_password=False)

    @property
    def database_configured(self) -> bool:
        """Whether the operator named a database (else: SQLite in the data directory)."""
        return bool(self.database_url or self.database_host)

    def file(self, name: str) -> str:
        """A setting naming a file: its path ("" when unset); a ConfigError when no such file is there."""
        value = str(getattr(self, name))
        if value and not Path(value).is_file():
            raise ConfigError(f"{ENV_PREFIX}{name.upper()}: no file {value}")
        return value

    def secret(self, name: str) -> str:
        """A secret setting: its variable, or the content of its file (`<name>_file`, a
        mounted Secret), stripped of the line end; never both."""
        value = str(getattr(self, name))
        file = str(getattr(self, f"{name}_file"))
        if value and file:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()} and {ENV_PREFIX}{name.upper()}_FILE are both set: give one")
        if not file:
            return value
        try:
            return Path(file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()}_FILE: cannot read {file}: {exc.strerror}") from None

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "store"

    def store_slots(self) -> list[Path]:
        """The store copies `serve`'s worker processes take: `store` (the leader's), `store-1`, …"""
        return [self.store_dir, *(self.data_dir / f"store-{n}" for n in range(1, self.web_workers))]

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from `LUCID_*` variables, defaults for the rest; bad values raise."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = _convert(f.name, raw, f.type)
        if "public_url" not in values:  # the listening address, as partners on this machine reach it
            values["public_url"] = listening_url(values.get("host", cls.host), values.get("port", cls.port))
        settings = cls(**values)
        settings._validate()
        return settings

    def default_graph_for(self, account: str) -> str | None:
        """The graph SPARQL's default graph stands for, for this party (None: no default graph)."""
        if not self.default_graph:
            return None
        return self.default_graph.replace("{account}", quote(account, safe=""))

    def _validate(self) -> None:
        if self.canon_timeout <= 0:
            raise ConfigError("LUCID_CANON_TIMEOUT must be a positive number of seconds")
        if self.canon_memory_mb < 64:
            raise ConfigError("LUCID_CANON_MEMORY_MB must be at least 64")
        if self.max_patch_bytes <= 0:
            raise ConfigError("LUCID_MAX_PATCH_BYTES must be positive")
        if self.max_body_bytes <= 0:
            raise ConfigError("LUCID_MAX_BODY_BYTES must be positive")
        if not self.public_url.startswith(("http://", "https://")):
            raise ConfigError("LUCID_PUBLIC_URL must be an http(s) URL")
        if not 0 < self.port < 65536:
            raise ConfigError("LUCID_PORT must be a TCP port")
        if self.token_lifetime < 30:
            raise ConfigError("LUCID_TOKEN_LIFETIME must be at least 30 seconds")
        if not 0 < self.lease_min <= self.lease_default <= self.lease_max:
            raise ConfigError("WebSub leases need 0 < LUCID_LEASE_MIN <= LUCID_LEASE_DEFAULT <= LUCID_LEASE_MAX")
        if self.delivery_max_attempts < 1 or self.delivery_backoff_base <= 0 or self.delivery_timeout <= 0:
            raise ConfigError("LUCID_DELIVERY_MAX_ATTEMPTS, _BACKOFF_BASE and _TIMEOUT must be positive")
        if min(self.delivery_threads, self.delivery_per_client, self.delivery_per_host,
               self.delivery_slow_threads, self.max_subscriptions_per_client) < 1 or self.delivery_slow_seconds <= 0:
            raise ConfigError("LUCID_DELIVERY_THREADS, _PER_CLIENT, _PER_HOST, _SLOW_THREADS, _SLOW_SECONDS and "
                              "LUCID_MAX_SUBSCRIPTIONS_PER_CLIENT must be positive")
        if min(self.sparql_workers, self.max_query_bytes, self.max_update_bytes, self.max_result_bytes) < 1 or (
                self.sparql_timeout <= 0 or self.sparql_memory_mb < 256):
            raise ConfigError("LUCID_SPARQL_WORKERS, _TIMEOUT and the LUCID_MAX_QUERY/UPDATE/RESULT_BYTES must be "
                              "positive, and LUCID_SPARQL_MEMORY_MB at least 256")
        if min(self.query_subscriptions_per_party, self.query_max_result_bytes, self.query_retain) < 1 or (
                self.query_budget <= 0 or self.query_memory_mb < 256):
            raise ConfigError("LUCID_QUERY_SUBSCRIPTIONS_PER_PARTY, _BUDGET, _MAX_RESULT_BYTES and _RETAIN must be "
                              "positive, and LUCID_QUERY_MEMORY_MB at least 256")
        if min(self.ws_ping_seconds, self.ws_ping_timeout, self.query_orphan_seconds) <= 0:
            raise ConfigError("LUCID_WS_PING_SECONDS, LUCID_WS_PING_TIMEOUT and LUCID_QUERY_ORPHAN_SECONDS must be "
                              "positive")
        if min(self.stream_page_members, self.stream_graphs) < 1:
            raise ConfigError("LUCID_STREAM_PAGE_MEMBERS and LUCID_STREAM_GRAPHS must be positive")
        if min(self.inbox_max_bytes, self.inbox_rate) < 1:
            raise ConfigError("LUCID_INBOX_MAX_BYTES and LUCID_INBOX_RATE must be positive")
        if min(self.rules_max_depth, self.rules_max_attempts) < 1 or self.rules_budget <= 0:
            raise ConfigError("LUCID_RULES_MAX_DEPTH, _BUDGET and _MAX_ATTEMPTS must be positive")
        if self.page_size < 1 or self.page_bytes < 1:
            raise ConfigError("LUCID_PAGE_SIZE and LUCID_PAGE_BYTES must be positive")
        if self.patch_format not in (1, 2):
            raise ConfigError("LUCID_PATCH_FORMAT must be 1 or 2")
        if self.default_graph and (not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s<>\"{}|\\^`]*",
                                                     self.default_graph.replace("{account}", "x"))
                                   or self.default_graph.startswith("urn:lucid-hub:")):
            raise ConfigError("LUCID_DEFAULT_GRAPH must be an IRI (optionally with {account}), not one of the "
                              "hub's own urn:lucid-hub: graphs")
        if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", self.mqtt_topic_prefix):
            raise ConfigError("LUCID_MQTT_TOPIC_PREFIX is topic levels of letters, digits, '.', '_', '-' (no + or #)")
        if self.dcr not in ("off", "token", "open") or self.dcr_rate < 1:
            raise ConfigError("LUCID_DCR must be off, token or open, and LUCID_DCR_RATE positive")
        if self.auth_rate_limit < 1:
            raise ConfigError("LUCID_AUTH_RATE_LIMIT must be at least 1")
        try:
            self.proxies  # noqa: B018 (parsed here so that a bad value stops the start)
        except ValueError as exc:
            raise ConfigError(f"LUCID_TRUSTED_PROXIES: {exc}") from None
        if self.mirror_on_revoke not in ("keep", "purge"):
            raise ConfigError("LUCID_MIRROR_ON_REVOKE must be keep or purge")
        if min(self.mirror_round_pages, self.mirror_max_answer_bytes, self.mirror_workers) < 1 or min(
                self.mirror_round_seconds, self.mirror_max_backoff) <= 0:
            raise ConfigError("LUCID_MIRROR_ROUND_SECONDS, _ROUND_PAGES, _MAX_ANSWER_BYTES, _WORKERS and _MAX_BACKOFF "
                              "must be positive")
        if self.leader_lease_seconds < 1:
            raise ConfigError("LUCID_LEADER_LEASE_SECONDS must be at least 1")
        self.file("outbound_ca_file")
        if self.log_format not in ("text", "json"):
            raise ConfigError("LUCID_LOG_FORMAT must be text or json")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigError("LUCID_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        if not 1 <= self.web_workers <= 64:
            raise ConfigError("LUCID_WEB_WORKERS must be between 1 and 64")
        if not 1 <= self.web_threads <= 4096:
            raise ConfigError("LUCID_WEB_THREADS must be between 1 and 4096")
        if min(self.push_max_connections, self.push_per_address, self.push_per_client, self.push_threads,
               self.keepalive_seconds) < 1:
            raise ConfigError("LUCID_PUSH_MAX_CONNECTIONS, LUCID_PUSH_PER_ADDRESS, LUCID_PUSH_PER_CLIENT, "
                              "LUCID_PUSH_THREADS and LUCID_KEEPALIVE_SECONDS must be 1 or more")
        if self.requests_per_client < 0:
            raise ConfigError("LUCID_REQUESTS_PER_CLIENT must be 0 (a quarter of LUCID_WEB_THREADS) or more")
        if min(self.push_send_seconds, self.body_seconds, self.push_auth_seconds) <= 0:
            raise ConfigError("LUCID_PUSH_SEND_SECONDS, LUCID_BODY_SECONDS and LUCID_PUSH_AUTH_SECONDS must be "
                              "positive numbers of seconds")
        if self.graceful_timeout <= 0:
            raise ConfigError("LUCID_GRACEFUL_TIMEOUT must be a positive number of seconds")
        if not 0 <= self.metrics_port < 65536:
            raise ConfigError("LUCID_METRICS_PORT must be a TCP port (0: none)")
        self._validate_database()

    def _validate_database(self) -> None:
        parts = [name for name in ("database_host", "database_password", "database_password_file",
                                   "database_sslmode", "database_sslrootcert", "database_sslcert", "database_sslkey")
                 if getattr(self, name)]
        if self.database_url and parts:
            raise ConfigError(f"LUCID_DATABASE_URL and {ENV_PREFIX}{parts[0].upper()} are both set: give the URL "
                              "or the database's parts (LUCID_DATABASE_HOST …), not both")
        if parts and not self.database_host:
            raise ConfigError(f"{ENV_PREFIX}{parts[0].upper()} is set but LUCID_DATABASE_HOST is not")
        if not 0 < self.database_port < 65536:
            raise ConfigError("LUCID_DATABASE_PORT must be a TCP port")
        modes = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
        if self.database_sslmode and self.database_sslmode not in modes:
            raise ConfigError(f"LUCID_DATABASE_SSLMODE must be one of {', '.join(modes)}")
        for name in ("database_sslrootcert", "database_sslcert", "database_sslkey"):
            self.file(name)
        if bool(self.database_sslcert) != bool(self.database_sslkey):
            raise ConfigError("LUCID_DATABASE_SSLCERT and LUCID_DATABASE_SSLKEY go together")
        if self.database_host:
            self.secret("database_password")  # a password file that cannot be read stops the start


def _convert(name: str, raw: str, type_name: object) -> Any:
    kind = str(type_name)
    try:
        if kind == "Path":
            return Path(raw)
        if kind == "float":
            return float(raw)
        if kind == "int":
            return int(raw)
        if kind == "bool":
            return raw.strip().lower() in {"1", "true", "yes", "on"}
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()}: not a valid {kind}: {raw!r}") from None
    return raw
