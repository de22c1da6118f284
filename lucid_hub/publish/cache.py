"""The MSG multisets of graphs at their current version, kept beside the store."""

from __future__ import annotations

import itertools
import threading

from lucid_hub.memory import estimated_bytes
from lucid_hub.rdf.apply import apply_to_msgs
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rdf.patch import Patch


class MsgCache:
    """MSG multisets of graphs at their current version, so a bulk re-publish need not read
    the whole graph back from the store (10 s for a million triples). Bounded in bytes (an
    estimate per graph, lucid_hub.memory); kept current by applying each patch to it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: dict[str, tuple[str, GraphMsgs, int]] = {}  # graph -> version, MSGs, bytes
        self._lock = threading.Lock()

    @property
    def held(self) -> tuple[int, int]:
        """(MSGs, estimated bytes) held now."""
        with self._lock:
            return (sum(len(m) for _, m, _ in self._entries.values()),
                    sum(size for _, _, size in self._entries.values()))

    def get(self, graph: str, version: str | None) -> GraphMsgs | None:
        with self._lock:
            entry = self._entries.get(graph)
            return entry[1] if entry is not None and entry[0] == version else None

    def put(self, graph: str, version: str, msgs: GraphMsgs, size: int | None = None) -> None:
        if size is None:
            size = estimated_bytes(len(msgs), itertools.chain(msgs.ground, msgs.blank))
        with self._lock:
            self._entries.pop(graph, None)
            if size > self.max_bytes:
                return
            while self._entries and sum(s for _, _, s in self._entries.values()) + size > self.max_bytes:
                self._entries.pop(next(iter(self._entries)))  # oldest first
            self._entries[graph] = (version, msgs, size)

    def advance(self, patch: Patch) -> None:
        """Apply a patch to the cached multiset of its graph (if cached at its prev)."""
        with self._lock:
            entry = self._entries.pop(patch.graph, None)
        if entry is None or entry[0] != patch.prev:
            return
        before = len(entry[1])
        apply_to_msgs(entry[1], patch)
        # (its size scaled by the MSGs it now holds: a sample per patch would cost more than the patch)
        self.put(patch.graph, patch.id, entry[1], entry[2] * len(entry[1]) // max(1, before))

    def drop(self, graph: str) -> None:
        with self._lock:
            self._entries.pop(graph, None)
