"""The parts of one running hub, opened from settings in dependency order and closed again."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lucid_hub.auth import ClientRegistry, TokenService
from lucid_hub.auth.tokens import TrustedIssuer
from lucid_hub.config import Settings
from lucid_hub.db.session import Database
from lucid_hub.errors import ConfigError, StoreError
from lucid_hub.log import PatchLog
from lucid_hub.policy.service import PolicyService
from lucid_hub.publish import Publisher
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.signing import KeyRing, TrustedKeys
from lucid_hub.store import GraphStore

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    db: Database
    store: GraphStore
    log: PatchLog
    keys: KeyRing
    canonicalizer: Canonicalizer
    publisher: Publisher
    clients: ClientRegistry
    tokens: TokenService
    policies: PolicyService
    mirrors: Any = None  # lucid_hub.mirror.MirrorService (its thread runs in `serve` only)
    websub: Any = None  # lucid_hub.delivery.hub.WebSubHub, once start_delivery() ran

    def start_delivery(self, run: bool = True) -> Any:
        """The WebSub hub of this process; `run` starts delivering in the background."""
        if self.websub is None:
            from lucid_hub.delivery.hub import WebSubHub

            self.websub = WebSubHub(self.settings, self.db, self.canonicalizer, self.policies,
                                    publisher=self.publisher)
        if run:
            self.websub.start()
        return self.websub

    @classmethod
    def open(cls, settings: Settings, *, repair: bool = True) -> Runtime:
        """Open everything; upgrade the schema; generate keys at first start; repair."""
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        db = Database(settings.db_url)
        db.upgrade()
        try:
            store = GraphStore(settings.store_dir)
        except StoreError as exc:
            db.dispose()
            raise StoreError(f"{exc} (is another lucid-hub process using {settings.data_dir}?)") from None
        patch_log = open_log(settings, db)
        keys = KeyRing(settings.keys_dir)
        key = keys.ensure()
        canonicalizer = Canonicalizer(settings.canon_timeout, settings.canon_memory_mb)
        trusted_keys = TrustedKeys(keys.jwks())
        publisher = Publisher(db, store, patch_log, key, canonicalizer, trusted_keys,
                              cache_statements=settings.msg_cache_statements)
        tokens = TokenService(db, keys, settings.public_url, lifetime=settings.token_lifetime,
                              trusted=TrustedIssuer.parse_all(settings.trusted_issuers))
        policies = PolicyService(db, publisher, canonicalizer, trusted_keys)
        runtime = cls(settings, db, store, patch_log, keys, canonicalizer, publisher, ClientRegistry(db), tokens,
                      policies)
        from lucid_hub.mirror import MirrorService

        runtime.mirrors = MirrorService(settings, db, publisher, canonicalizer)  # mirrored graphs are read-only
        try:
            if repair:
                publisher.repair()
            log.info("%s", policies.start(settings.policies_dir))
        except BaseException:
            runtime.close()
            raise
        return runtime

    def close(self) -> None:
        if self.mirrors is not None:
            self.mirrors.stop()
        if self.websub is not None:
            self.websub.stop()
        self.publisher.stop_relay()
        self.log.close()
        self.canonicalizer.close()
        self.store.close()
        self.db.dispose()


def open_log(settings: Settings, db: Database) -> PatchLog:
    """The patch log the settings choose: Kafka when a bootstrap is set, else the SQL log."""
    if settings.kafka_bootstrap:
        try:
            from lucid_hub.log.kafka import KafkaPatchLog
        except ImportError:
            raise ConfigError("LUCID_KAFKA_BOOTSTRAP is set but confluent-kafka is not installed") from None
        return KafkaPatchLog(settings.kafka_bootstrap, settings.kafka_topic, partitions=settings.kafka_partitions,
                             session_timeout_ms=settings.kafka_session_timeout_ms)
    from lucid_hub.log.sql import SqlPatchLog

    return SqlPatchLog(db)
