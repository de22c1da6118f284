"""What the web layer uses of a running hub: the parts the composition root (`runtime.py`)
builds and hands to `create_app`. A port, so that the surfaces never import the root."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from lucid_hub.archive import Archive
from lucid_hub.auth import ClientRegistry, TokenService
from lucid_hub.auth.admins import AdminAccounts
from lucid_hub.config import Settings
from lucid_hub.db.session import Database
from lucid_hub.delivery.deliverer import Deliverer
from lucid_hub.leadership import Leadership
from lucid_hub.log import PatchLog
from lucid_hub.metrics import Metrics
from lucid_hub.mirror import MirrorRegistry, MirrorService
from lucid_hub.patch_stream import PatchStream
from lucid_hub.policy.policy_graph import PolicyService
from lucid_hub.publish import Publisher
from lucid_hub.publish.capture import Capture
from lucid_hub.queries.service import QueryService
from lucid_hub.queries.windows import WindowService
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.replicas import Replicas
from lucid_hub.rules.offering import RuleOffers
from lucid_hub.rules.service import RuleService
from lucid_hub.signing import KeyRing
from lucid_hub.store.remote_sync import RemoteSync
from lucid_hub.store.sparql import SparqlGuard
from lucid_hub.streams.inbox import Inbox
from lucid_hub.streams.members import StreamIndex
from lucid_hub.supervisor import Supervisor
from lucid_hub.websub import WebSubHub


class HubParts(Protocol):
    """The parts of one hub a request may use (`lucid_hub.runtime.Runtime` is the one)."""

    settings: Settings
    db: Database
    roles: Supervisor
    archive: Archive
    keys: KeyRing
    canonicalizer: Canonicalizer
    publisher: Publisher
    clients: ClientRegistry
    tokens: TokenService
    policies: PolicyService
    metrics: Metrics
    sparql: SparqlGuard
    stream: PatchStream
    log: PatchLog
    mirrors: MirrorService
    mirror_registry: MirrorRegistry
    admins: AdminAccounts
    hub: WebSubHub
    delivery: Deliverer
    queries: QueryService
    windows: WindowService
    streams: StreamIndex
    inbox: Inbox
    rules: RuleService
    remotes: list[RemoteSync]
    capture: Capture | None
    rule_offers: RuleOffers | None
    leadership: Leadership | None
    replicas: Replicas | None
    notes_from: dict[str, Callable[[], list[dict[str, str]]]]
    leader: bool

    def database_answers(self) -> None:
        """Raise unless the database answers a trivial statement now (readiness)."""
