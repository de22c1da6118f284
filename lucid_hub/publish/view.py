"""What a change computation sees of a graph (publish.commit hands it one per change)."""

from __future__ import annotations

from collections.abc import Iterable

from lucid_hub.publish.cache import MsgCache
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.store import GraphStore
from lucid_hub.store.plans import Chain


class NeedsFlush(Exception):  # a signal inside the publisher, never an error
    """A change in a group commit needs the store to hold the group's patches so far."""


class GraphView:
    """A graph's current content as a change computation sees it: whole (from the cache or
    read from the store) or one triple at a time, so small changes never read a large graph.
    In a group commit it also sees the group's patches the store does not hold yet."""

    def __init__(self, store: GraphStore, graph: str, version: str | None, cache: MsgCache,
                 chain: Chain | None = None) -> None:
        self._store = store
        self.graph = graph
        self.version = version
        self.exists = version is not None
        self.cache = cache
        self._chain = chain  # a group commit's patches planned before this change (not in the store yet)
        self._msgs: GraphMsgs | None = None

    @property
    def store(self) -> GraphStore:
        """The store, for what the view does not offer (it must be at the view's version)."""
        if self._chain:
            raise NeedsFlush
        return self._store

    def msgs(self) -> GraphMsgs:
        """The graph's MSGs. The caller must not change them (they may be the cache's)."""
        if self._chain:
            raise NeedsFlush
        if self._msgs is None:
            if not self.exists:
                self._msgs = GraphMsgs()
            else:
                self._msgs = self.cache.get(self.graph, self.version)
                if self._msgs is None:
                    self._msgs = self._store.read.graph_msgs(self.graph)
                    assert self.version is not None
                    self.cache.put(self.graph, self.version, self._msgs)
        return self._msgs

    def holding(self, statements: Iterable[str]) -> set[str]:
        """Those of the ground triples the graph holds (`contains` for many)."""
        found: set[str] = set()
        ask: Iterable[str] = statements
        if self._chain:
            ask = []
            for statement in statements:
                touched = self._chain.touched(statement)
                if touched is None:
                    ask.append(statement)
                elif touched:
                    found.add(statement)
        if self.exists:
            found |= self._store.read.holding(self.graph, ask)
        return found

    def contains(self, statement: str) -> bool:
        return bool(self.holding((statement,)))
