"""Query subscriptions as the evaluating process holds them, and the index that finds which
of them a changed triple may affect (SEPA's LUTT: by graph and predicate)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from lucid_hub.policy.decisions import Party
from lucid_hub.queries import results as rs
from lucid_hub.queries.evaluator import Registration
from lucid_hub.rdf.statements import terms


@dataclass
class Live:
    """A subscription as the evaluating process holds it."""

    id: str
    alias: str
    party: Party
    token_id: str
    registration: Registration
    results: rs.Results
    sequence: int


@dataclass
class Index:
    """Subscriptions by the graphs and triple patterns they can match (SEPA's LUTT)."""

    by_graph: dict[str, dict[str | None, list[tuple[str, str | None, str | None]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list)))

    def add(self, sid: str, registration: Registration) -> None:
        for graph in registration.graphs:
            for s, p, o in registration.patterns:
                entry = (sid, s, o)
                if entry not in self.by_graph[graph][p]:
                    self.by_graph[graph][p].append(entry)

    def remove(self, sid: str) -> None:
        for graph in list(self.by_graph):
            for p in list(self.by_graph[graph]):
                self.by_graph[graph][p] = [e for e in self.by_graph[graph][p] if e[0] != sid]
                if not self.by_graph[graph][p]:
                    del self.by_graph[graph][p]
            if not self.by_graph[graph]:
                del self.by_graph[graph]

    def graphs(self) -> set[str]:
        return set(self.by_graph)

    def matching(self, graph: str, statements: Iterable[str]) -> set[str]:
        """The subscriptions a change of these triples of `graph` may affect."""
        patterns = self.by_graph.get(graph)
        if not patterns:
            return set()
        found: set[str] = set()
        wildcard = patterns.get(None, [])
        for statement in statements:
            s, p, o = terms(statement)[:3]
            for sid, ps, po in (*patterns.get(p[1:-1], ()), *wildcard):
                if sid in found:
                    continue
                if (ps is None or s == f"<{ps}>") and (po is None or o == f"<{po}>"):
                    found.add(sid)
        return found
