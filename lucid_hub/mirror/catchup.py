"""Catching a mirror up: the patches after our head, fetched page by page from the publisher's
archive, each verified in chain order and archived in groups; a clone (no head yet, or a head
the publisher no longer holds) checked against the publisher's content when it is complete."""

from __future__ import annotations

import json
import logging
import threading
from typing import Protocol

import pyoxigraph as ox
import requests

from lucid_hub.archive import Archive
from lucid_hub.client import Budget, HubClient, RoundOver, prefetched
from lucid_hub.config import Settings
from lucid_hub.db.models import Mirror
from lucid_hub.errors import InputError, PatchVerificationError, RemoteAnswerError, RemoteRefusedError
from lucid_hub.mirror.intent import publisher_client
from lucid_hub.mirror.rows import LIVE, MirrorRows
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.statements import statement_quads
from lucid_hub.signing import TrustedKeys, verify_patch_bytes

log = logging.getLogger(__name__)


class Archiver(Protocol):
    """What the mirrors need of the publisher: archive verified patches, read and drop a
    graph's content."""

    def archive_verified(self, patch: Patch, sync: bool = True) -> Patch: ...

    def archive_verified_chain(self, patches: list[Patch], sync: bool = True) -> None: ...

    def content(self, graph: str, version: str | None = None) -> tuple[str | None, list[str]]: ...

    def forget(self, graph: str) -> None: ...


class CatchUp:
    """Each mirror's local chain: its head, its lock (one writer per mirror), verified
    catch-up and clone, and forgetting it."""

    def __init__(self, settings: Settings, rows: MirrorRows, archive: Archive, publisher: Archiver,
                 canonicalizer: Canonicalizer, http: requests.Session, stopping: threading.Event) -> None:
        self.settings = settings
        self.rows = rows
        self.archive = archive
        self.publisher = publisher
        self.canonicalizer = canonicalizer
        self.http = http
        self.stopping = stopping
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._cloning: set[str] = set()  # mirrors whose clone is under way (its check comes at its end)
        self._keys: dict[str, TrustedKeys] = {}

    def lock(self, mirror_id: str) -> threading.Lock:
        """The mirror's lock: deliveries, catch-up and re-clone apply one at a time."""
        with self._locks_guard:
            return self._locks.setdefault(mirror_id, threading.Lock())

    def trusted(self, jwks: str) -> TrustedKeys:
        """The pinned keys, imported once per JWKS text (not on every delivery)."""
        keys = self._keys.get(jwks)
        if keys is None:
            keys = self._keys[jwks] = TrustedKeys(json.loads(jwks))
        return keys

    def budget(self) -> Budget:
        """What one round may spend on a publisher (settings `LUCID_MIRROR_ROUND_*`)."""
        s = self.settings
        return Budget(s.mirror_round_seconds, s.mirror_round_pages, s.mirror_max_answer_bytes, self.stopping.is_set)

    def head(self, graph: str) -> str | None:
        """The mirror's head (None before its first patch)."""
        return self.archive.current_head(graph)

    def known(self, patch_id: str) -> bool:
        return self.archive.contains(patch_id)

    def archive_one(self, mirror_id: str, patch: Patch) -> None:
        self.publisher.archive_verified(patch)
        self.rows.count_applied(mirror_id, 1)

    def forget(self, graph: str) -> None:
        """Drop the local copy of a mirrored graph: archive, log entries and store."""
        self.archive.forget(graph)
        self.publisher.forget(graph)

    def run(self, mirror_id: str, budget: Budget, locked: bool = False) -> tuple[int, bool]:
        """The patches applied, and whether the mirror reached the end of the publisher's
        archive (else the budget ran out first). Re-clones when the publisher's archive no
        longer holds our head; a clone's check against the publisher's content comes when it
        is complete, however many rounds it took."""
        if not locked:
            with self.lock(mirror_id):
                return self.run(mirror_id, budget, locked=True)
        row = self.rows.get(mirror_id)
        if row.state not in LIVE:
            return 0, True
        trusted = self.trusted(row.jwks)
        head = self.head(row.graph)
        if head is None:
            self._cloning.add(mirror_id)
        publisher = publisher_client(row, self.http)
        applied = 0
        try:
            # The next page is fetched while this one is verified and applied; each page's
            # patches are verified one by one in chain order, and what verified is archived
            # and applied in groups (Publisher.archive_verified_chain) before what did not is
            # quarantined.
            for page in prefetched(publisher.archive_pages(row.graph, head, budget)):
                chain: list[Patch] = []
                refused: tuple[str | None, bytes, str] | None = None
                for item in page.get("patches", []):
                    body = str(item["body"]).encode("utf-8")
                    try:
                        patch = verify_patch_bytes(body, trusted, self.canonicalizer)
                    except (PatchVerificationError, InputError) as exc:
                        refused = (item.get("id"), body, f"not verified (catch-up): {exc}")
                        break
                    if patch.graph == row.graph and patch.prev == (chain[-1].id if chain else head):
                        chain.append(patch)  # the next one (the head is tracked here, not re-read)
                    elif not self.known(patch.id):
                        refused = (patch.id, body, f"catch-up: the patch follows {patch.prev}, our head is "
                                   f"{chain[-1].id if chain else head}")
                        break
                if chain:  # (the store is synced before the first page)
                    try:
                        self.publisher.archive_verified_chain(chain, sync=applied == 0)
                    except Exception:  # the ones before the failing patch are in: counted
                        reached = self.head(row.graph)
                        ids = [p.id for p in chain]
                        self.rows.count_applied(mirror_id, ids.index(reached) + 1 if reached in ids else 0)
                        raise
                    head = chain[-1].id
                    applied += len(chain)
                    self.rows.count_applied(mirror_id, len(chain))  # the page's count in one statement
                if refused is not None:
                    self.rows.quarantine(mirror_id, *refused)
                    return applied, True
        except RoundOver:
            if applied == 0 and not self.stopping.is_set():  # pages bringing nothing new: an endless archive
                s = self.settings
                raise RemoteAnswerError(f"a round's worth of the publisher's archive ({s.mirror_round_pages} pages "
                                        f"or {s.mirror_round_seconds:g} s) held no patch after our head") from None
            return applied, False
        except RemoteRefusedError as exc:
            if exc.status == 404 and head is not None and applied == 0:
                log.warning("mirror of <%s>: the publisher's archive does not hold our head %s: re-cloning",
                            row.graph, head)
                self.forget(row.graph)
                return self.run(mirror_id, budget, locked=True)
            raise
        if mirror_id in self._cloning and head is not None:
            self.check_clone(row, head, publisher)
        self._cloning.discard(mirror_id)
        return applied, True

    def check_clone(self, row: Mirror, version: str | None, publisher: HubClient) -> None:
        """A fresh clone against the publisher's content at that version: equal MSG multisets
        (the chain replayed here must give what the publisher serves)."""
        from lucid_hub.diff.local import diff_graph

        # Compared at the version our content is at: another replica may have applied the next
        # delivery meanwhile (its followers moved this store on), which is not a disagreement.
        ours_at, statements = self.publisher.content(row.graph)
        version = ours_at or version
        # The whole graph in one answer: more bytes and time than a page may take, still bounded.
        budget = Budget(max(self.settings.mirror_round_seconds, 600.0), 1, 16 * self.settings.mirror_max_answer_bytes)
        theirs = list(ox.parse(publisher.graph_at(row.graph, version, budget), format=ox.RdfFormat.N_TRIPLES))
        ours = list(statement_quads(statements))
        if not diff_graph(ours, theirs, row.graph, self.canonicalizer).is_empty:
            self.rows.record_error(row.id, f"the clone of <{row.graph}> differs from the publisher's content at "
                                   f"{version}: the publisher's archive and graph disagree", state="error")
            raise PatchVerificationError(f"the clone of <{row.graph}> differs from the publisher's content")
        log.info("mirror of <%s>: cloned at %s and checked against the publisher's content", row.graph, version)
