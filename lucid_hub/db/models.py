"""The tables of a hub. The patch archive is the record of truth; everything else
(store, patch log) can be rebuilt from it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

IRI = String(2048)
PATCH_ID = String(80)


class Base(DeclarativeBase):
    pass


class Graph(Base):
    """An owned graph and its head: the id of its newest patch (its version)."""

    __tablename__ = "graphs"

    iri: Mapped[str] = mapped_column(IRI, primary_key=True)
    head: Mapped[str | None] = mapped_column(PATCH_ID)
    length: Mapped[int] = mapped_column(Integer, default=0)  # patches in the chain
    # Deleted from the Graph Store (DELETE, DROP GRAPH) at this version ("" before any patch): the
    # graph is gone while its head is still that version; its history stays in the archive.
    dropped: Mapped[str | None] = mapped_column(PATCH_ID)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PatchRecord(Base):
    """One archived patch: its wire bytes (RDF Patch, signed) and what lists show of it."""

    __tablename__ = "patches"
    __table_args__ = (
        # One successor per patch: two publishers racing on one head cannot both append.
        UniqueConstraint("graph", "prev_key", name="uq_patches_graph_prev"),
        UniqueConstraint("graph", "seq", name="uq_patches_graph_seq"),
    )

    id: Mapped[str] = mapped_column(PATCH_ID, primary_key=True)
    graph: Mapped[str] = mapped_column(IRI, ForeignKey("graphs.iri"), index=True)
    seq: Mapped[int] = mapped_column(Integer)  # 1 for a graph's first patch
    prev: Mapped[str | None] = mapped_column(PATCH_ID)
    # `prev` or "" for the first patch: NULLs are distinct in unique constraints.
    prev_key: Mapped[str] = mapped_column(PATCH_ID)
    author: Mapped[str] = mapped_column(String(512))
    message: Mapped[str] = mapped_column(String(4096))
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    removed: Mapped[int] = mapped_column(Integer)
    added: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes] = mapped_column(LargeBinary)


class Outbox(Base):
    """Archived patches not yet appended to the patch log (transactional outbox)."""

    __tablename__ = "outbox"

    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                     autoincrement=True)
    patch_id: Mapped[str] = mapped_column(PATCH_ID, ForeignKey("patches.id"), unique=True)
    graph: Mapped[str] = mapped_column(IRI)


class LogEntry(Base):
    """The embedded patch log: one row per patch, in append order."""

    __tablename__ = "log_entries"

    offset: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                        autoincrement=True)
    graph: Mapped[str] = mapped_column(IRI, index=True)
    patch_id: Mapped[str] = mapped_column(PATCH_ID, unique=True)
    body: Mapped[bytes] = mapped_column(LargeBinary)


class LogOffset(Base):
    """Committed position of a consumer group in the embedded patch log."""

    __tablename__ = "log_offsets"

    group: Mapped[str] = mapped_column(String(255), primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger, default=0)


class OAuthClient(Base):
    """A partner's OAuth 2.0 client (client credentials grant). The secret is stored hashed."""

    __tablename__ = "oauth_clients"

    client_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    secret_hash: Mapped[str] = mapped_column(String(255))
    groups: Mapped[str] = mapped_column(String(4096), default="")  # space-separated
    # claim=value words, percent-encoded: the attributes its tokens carry (requiresAttribute)
    attributes: Mapped[str] = mapped_column(String(4096), default="", server_default="")
    scopes: Mapped[str] = mapped_column(String(1024), default="")  # space-separated
    callback_prefixes: Mapped[str] = mapped_column(String(8192), default="")  # space-separated URLs
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)


class RevokedToken(Base):
    """A revoked access token (RFC 7009), remembered until it would have expired anyway."""

    __tablename__ = "revoked_tokens"

    jti: Mapped[str] = mapped_column(String(128), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    revoked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AdminAccount(Base):
    """An account that may sign in to the admin page (password stored hashed)."""

    __tablename__ = "admin_accounts"

    username: Mapped[str] = mapped_column(String(255), primary_key=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Denial(Base):
    """An access denial as explained when it happened, found by the request id of its 403
    (any process of the hub answers `explain?request=`); kept for DENIAL_DAYS."""

    __tablename__ = "denials"

    request_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    body: Mapped[str] = mapped_column(Text)


class HubState(Base):
    """Small named values the hub keeps across restarts (e.g. the policy files' digest)."""

    __tablename__ = "hub_state"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str] = mapped_column(String(4096))


class Subscription(Base):
    """A WebSub subscription of a partner's callback to one graph, with its delivery cursor.

    `delivered_seq` is the chain position (PatchRecord.seq) of the last patch the callback
    acknowledged: the next delivery is always seq + 1, so patches never overtake each other
    and a crash between a POST and its record repeats at most that one delivery.
    """

    __tablename__ = "subscriptions"
    __table_args__ = (UniqueConstraint("graph", "callback", name="uq_subscriptions_graph_callback"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    graph: Mapped[str] = mapped_column(IRI, index=True)
    callback: Mapped[str] = mapped_column(String(2048))
    # The party that subscribed, as its token said: access is re-checked with it at every delivery.
    account: Mapped[str] = mapped_column(String(255))
    endpoint_id: Mapped[str] = mapped_column(String(255))
    groups: Mapped[str] = mapped_column(String(4096), default="")
    secret: Mapped[str | None] = mapped_column(String(200))  # the HMAC key the subscriber chose
    media_type: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), index=True)  # active, failed, expired, cancelled
    lease_expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    delivered_seq: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # consecutive failed attempts
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_success_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str] = mapped_column(String(1024), default="")
    delivered_total: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), default=0)
    failures_total: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The delivery process working on it, until when: several processes share the work, and
    # a killed one's subscriptions are taken over when its claim runs out.
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Mirror(Base):
    """A graph of another hub (the publisher) that this hub mirrors: subscribed with the
    partner's client, every patch verified against the pinned keys before it is applied.
    The mirrored graph's patches go into this hub's own archive, as they are (same ids,
    the publisher's signatures), so the archive, store and log hold the mirror like any graph.
    """

    __tablename__ = "mirrors"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # also the callback path
    graph: Mapped[str] = mapped_column(IRI, unique=True)
    hub_url: Mapped[str] = mapped_column(IRI)  # the publisher's WebSub hub
    publisher_url: Mapped[str] = mapped_column(IRI)  # its base URL: /oauth/token, /patches, /graphs
    client_id: Mapped[str] = mapped_column(String(255))
    client_secret: Mapped[str] = mapped_column(String(255))
    jwks: Mapped[str] = mapped_column(Text)  # the publisher's public keys, pinned when added
    hmac_secret: Mapped[str] = mapped_column(String(200))
    # new, subscribing, active, revoked, removing, error
    state: Mapped[str] = mapped_column(String(16))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    renew_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # half the lease
    last_error: Mapped[str] = mapped_column(String(1024), default="")
    applied_total: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), default=0)
    quarantined_total: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), default=0)
    hmac_failures_total: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), default=0)
    last_applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Its upkeep, kept here so that every replica's console sees what the leader's rounds saw:
    # the first of the failed rounds in a row (none: the last round went well) …
    failing_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # … and how far behind its publisher it is, as the publisher last said (mirror/lags.py)
    lag_patches: Mapped[int | None] = mapped_column(Integer)
    lag_more: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    lag_asked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lag_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Quarantined(Base):
    """A delivered patch the mirror refused to apply, with the reason (never applied)."""

    __tablename__ = "mirror_quarantine"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    mirror_id: Mapped[str] = mapped_column(String(64), index=True)
    patch_id: Mapped[str | None] = mapped_column(PATCH_ID)
    reason: Mapped[str] = mapped_column(String(1024))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class QuerySubscription(Base):
    """A continuous SPARQL query of a party (SEPA's subscription, made durable): its dataset,
    fixed when it was made, its current results and the sequence of its last notification.
    `state`: pending (asked in a process that does not evaluate), active, ended (`reason`)."""

    __tablename__ = "query_subscriptions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the SE protocol's spuid
    alias: Mapped[str] = mapped_column(String(255), default="")
    account: Mapped[str] = mapped_column(String(255), index=True)
    endpoint_id: Mapped[str] = mapped_column(String(255))
    groups: Mapped[str] = mapped_column(String(4096), default="")
    token_id: Mapped[str] = mapped_column(String(255))  # the jti of the token that made it
    query: Mapped[str] = mapped_column(Text)
    default_graphs: Mapped[str | None] = mapped_column(Text)  # JSON list, as asked (None: not given)
    named_graphs: Mapped[str | None] = mapped_column(Text)
    form: Mapped[str] = mapped_column(String(16), default="")
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(String(1024), default="")
    # A pending subscription the evaluating process refused: the error's kind, which the
    # process that took the request answers with (lucid_hub.errors class name).
    refusal: Mapped[str] = mapped_column(String(64), default="")
    sequence: Mapped[int] = mapped_column(Integer, default=0)
    results: Mapped[str] = mapped_column(Text, default="")  # JSON, the results after `sequence`
    callback: Mapped[str | None] = mapped_column(String(2048))  # a webhook, when asked for
    secret: Mapped[str | None] = mapped_column(String(200))
    callback_seq: Mapped[int] = mapped_column(Integer, default=-1)  # the last notification the webhook took
    callback_attempts: Mapped[int] = mapped_column(Integer, default=0)
    callback_next_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    callback_error: Mapped[str] = mapped_column(String(1024), default="")
    # When the WebSocket that carried it closed without unsubscribing (None: attached, or no
    # socket): ended once LUCID_QUERY_ORPHAN_SECONDS pass without a resume (queries/orphans.py).
    detached_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class QueryNotification(Base):
    """One notification of a query subscription (its SE protocol message), kept for resumption."""

    __tablename__ = "query_notifications"

    subscription: Mapped[str] = mapped_column(String(64), ForeignKey("query_subscriptions.id", ondelete="CASCADE"),
                                              primary_key=True)
    sequence: Mapped[int] = mapped_column(Integer, primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class WindowedQuery(Base):
    """A named continuous query over windows of the patch stream (C-SPARQL's model). Its name
    is its owner's choice, unique among that party's queries only; `id` is the hub's key (for
    queries made before names were scoped, the name itself)."""

    __tablename__ = "windowed_queries"
    __table_args__ = (UniqueConstraint("account", "name", name="uq_windowed_queries_account_name"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    account: Mapped[str] = mapped_column(String(255), index=True)
    endpoint_id: Mapped[str] = mapped_column(String(255))
    groups: Mapped[str] = mapped_column(String(4096), default="")
    token_id: Mapped[str] = mapped_column(String(255))
    query: Mapped[str] = mapped_column(Text)
    graphs: Mapped[str] = mapped_column(Text)  # JSON list of graph IRIs
    range_spec: Mapped[str] = mapped_column(String(32))  # as registered: "1h", "100" (patches)
    step_spec: Mapped[str] = mapped_column(String(32))
    with_state: Mapped[bool] = mapped_column(Boolean, default=False)
    # What the default graph holds: "changes" (the reified view) or "triples" (the triples
    # the window's patches added, as C-SPARQL's queries expect).
    view: Mapped[str] = mapped_column(String(16), default="changes", server_default="changes")
    dataset: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")  # JSON: static graphs
    source: Mapped[str | None] = mapped_column(Text)  # the C-SPARQL registration, when it came as one
    state: Mapped[str] = mapped_column(String(16), index=True)  # active, paused, ended
    reason: Mapped[str] = mapped_column(String(1024), default="")
    # Where the next window ends: a time (time windows) or a position in the graphs' merged
    # patch history (count windows).
    next_end_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    next_end_position: Mapped[int] = mapped_column(Integer, default=0)
    sequence: Mapped[int] = mapped_column(Integer, default=-1)  # the last result's
    callback: Mapped[str | None] = mapped_column(String(2048))  # a webhook, when asked for
    secret: Mapped[str | None] = mapped_column(String(200))
    callback_seq: Mapped[int] = mapped_column(Integer, default=-1)  # the last element the webhook took
    callback_attempts: Mapped[int] = mapped_column(Integer, default=0)
    callback_next_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    callback_error: Mapped[str] = mapped_column(String(1024), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class WindowedResult(Base):
    """One element of a windowed query's output stream: the results of one window."""

    __tablename__ = "windowed_results"

    query: Mapped[str] = mapped_column(String(64), ForeignKey("windowed_queries.id", ondelete="CASCADE"),
                                       primary_key=True)
    sequence: Mapped[int] = mapped_column(Integer, primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Notification(Base):
    """A Linked Data Notification a partner sent to a graph's inbox (docs/streams.md)."""

    __tablename__ = "ldn_notifications"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)  # arrival order
    id: Mapped[str] = mapped_column(String(36), unique=True)
    graph: Mapped[str] = mapped_column(IRI, index=True)
    sender: Mapped[str] = mapped_column(String(255), index=True)  # the authenticated account
    endpoint_id: Mapped[str] = mapped_column(String(255))  # the client it sent with
    # sha256 of graph, sender and the body as sent: a replay has the same, and finds no room
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    kinds: Mapped[str] = mapped_column(String(1024))  # the activities' types, space-separated
    objects: Mapped[str] = mapped_column(Text)  # the activities' objects (IRIs), one per line
    body: Mapped[str] = mapped_column(Text)  # the statements, N-Triples
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PendingReaction(Base):
    """A patch whose immediate rules had not finished reacting: written with the patch (same
    transaction), deleted when its cascade is done. One left at start is a cascade a crash
    interrupted (rules/cascade.py, `recover`)."""

    __tablename__ = "pending_reactions"

    patch_id: Mapped[str] = mapped_column(PATCH_ID, ForeignKey("patches.id", ondelete="CASCADE"), primary_key=True)
    graph: Mapped[str] = mapped_column(IRI)


class RuleFiring(Base):
    """One rule reacting to one patch (docs/rules.md): the firing history, and for deferred
    rules the record that makes firing idempotent (one row per rule and triggering patch)."""

    __tablename__ = "rule_firings"
    __table_args__ = (UniqueConstraint("rule", "trigger", name="uq_rule_firings_rule_trigger"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rule: Mapped[str] = mapped_column(IRI, index=True)
    trigger: Mapped[str] = mapped_column(PATCH_ID)  # the triggering patch
    graph: Mapped[str] = mapped_column(IRI)  # its graph
    coupling: Mapped[str] = mapped_column(String(16))
    depth: Mapped[int] = mapped_column(Integer)  # 1: fired by a patch no rule made
    instances: Mapped[int] = mapped_column(Integer)  # the event's instances in the patch
    kept: Mapped[int] = mapped_column(Integer)  # the groups the condition held for
    outcome: Mapped[str] = mapped_column(String(32))  # patched, unchanged, not-met, sent, failed, ...
    reason: Mapped[str] = mapped_column(Text, default="")
    patches: Mapped[str] = mapped_column(Text, default="")  # the patches the action made, space-separated
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    fired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class RuleCursor(Base):
    """How far a deferred rule has followed its graph's patches (the last one it handled),
    and when a failing firing is tried again."""

    __tablename__ = "rule_cursors"

    rule: Mapped[str] = mapped_column(IRI, primary_key=True)
    graph: Mapped[str] = mapped_column(IRI)
    patch: Mapped[str | None] = mapped_column(PATCH_ID, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # of the next patch, so far
    retry_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RuleOffer(Base):
    """A rule set offered between hubs (docs/rules.md, "Rules across hubs"): `out`, one this hub
    offered to a partner (our client's credentials there, where the offer lives there); `in`,
    one a partner offered to this hub (its party as the rules' owner, its keys pinned, its
    rules' summaries for the termination analysis). `id` is the offer's `urn:uuid:` suffix."""

    __tablename__ = "rule_offers"
    __table_args__ = (Index("ix_rule_offers_state", "direction", "state"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    direction: Mapped[str] = mapped_column(String(8))  # "in" | "out"
    peer: Mapped[str] = mapped_column(String(1024))  # the other hub's public URL
    rules: Mapped[str] = mapped_column(Text)  # the rule file offered
    rule_iris: Mapped[str] = mapped_column(Text)  # its rules' IRIs, space-separated
    summaries: Mapped[str] = mapped_column(Text)  # JSON: the peer's rules' summaries
    owner: Mapped[str] = mapped_column(Text)  # in: the offering party (Owner JSON)
    jwks: Mapped[str] = mapped_column(Text)  # in: the offering hub's keys, pinned at the offer
    client_id: Mapped[str] = mapped_column(String(255))  # out: our client at the peer
    client_secret: Mapped[str] = mapped_column(String(255))
    location: Mapped[str] = mapped_column(String(1024))  # out: the offer's URL at the peer
    state: Mapped[str] = mapped_column(String(16))  # pending, accepted, rejected, withdrawn
    reason: Mapped[str] = mapped_column(Text)
    decided_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Lease(Base):
    """Who does what only one process of the whole deployment may do (the relay to the log,
    the mirrors, evaluating queries and windows, deferred rules): held until `expires_at`
    (Unix seconds) unless renewed; `epoch` counts the holders (lucid_hub.leadership)."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    epoch: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[float] = mapped_column(Float)


class DeliveryMinute(Base):
    """Deliveries a minute (UTC, truncated), as the consoles' chart shows them: patches the
    callbacks acknowledged and attempts that failed, added to by every delivering process in
    the transaction that records its outcomes; a day is kept (lucid_hub.delivery.deliverer)."""

    __tablename__ = "delivery_minutes"

    minute: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    delivered: Mapped[int] = mapped_column(BigInteger)
    failed: Mapped[int] = mapped_column(BigInteger)


class ReplicaReport(Base):
    """Each serving process's word on itself, renewed every few seconds (lucid_hub.replicas):
    the console's hub page lists every replica of the deployment from it, not only the one
    that renders the page."""

    __tablename__ = "replicas"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)  # its data directory's name and pid
    host: Mapped[str] = mapped_column(String(255))
    version: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    lag: Mapped[int] = mapped_column(Integer)  # its store's patches behind the archive
    leader: Mapped[bool] = mapped_column(Boolean)
    failing: Mapped[str] = mapped_column(Text)  # JSON: its background roles whose last rounds failed
    # JSON: what needs attention that only its memory holds (web/console/attention.py `local`)
    notes: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
