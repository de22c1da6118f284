"""The rule set of one hub process: the rules graph's rules (every change a signed patch, so
the set is read from the archive), compiled in their owners' lanes, and the index of which
rules a graph's patches can fire."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import pyoxigraph as ox
from rdflib import URIRef

from lucid_hub.archive import Archive
from lucid_hub.errors import NotFoundError
from lucid_hub.policy.policy_graph import archived_statements
from lucid_hub.queries.evaluator import BudgetExceeded, Refusal
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rules.lanes import Lanes
from lucid_hub.rules.model import (
    OPERATOR,
    RULE_OWNER,
    RULE_TEXT,
    RULES_GRAPH,
    Owner,
    Registered,
    lane_name,
    may_match,
)
from lucid_hub.rules.replica import rule_from_json

log = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0


class RuleSet:
    """The rules as the rules graph says, the immediate ones indexed by graph and predicate."""

    def __init__(self, archive: Archive, canonicalizer: Canonicalizer, lanes: Lanes,
                 on_deferred: Callable[[list[Registered]], None] = lambda _rules: None) -> None:
        """`on_deferred` hears of the deferred rules each time the set is loaded (the leader
        starts the new ones' cursors)."""
        self.archive = archive
        self.canonicalizer = canonicalizer
        self.lanes = lanes
        self.on_deferred = on_deferred
        self._rules: dict[str, Registered] = {}
        self._immediate: dict[str, list[Registered]] = {}
        # graph -> predicate (N-Triples, None: any) -> the immediate rules whose event names it
        self._by_predicate: dict[str, dict[str | None, list[Registered]]] = {}
        self.deferred: list[Registered] = []  # fired after commit by the deferred rules' role
        self._locks_for: dict[str, frozenset[str]] = {}
        self._head: str | None = None
        self._loaded = False
        self._checked = 0.0
        self._lock = threading.RLock()
        # Set when the set changes or a patch arrives while deferred rules exist: their role wakes.
        self.wake = threading.Event()

    def stored(self) -> tuple[str | None, dict[str, tuple[str, Owner]]]:
        """The rules graph's head and its rules (IRI -> text, owner), from the archive."""
        head, statements = archived_statements(self.archive, RULES_GRAPH, self.canonicalizer)
        texts: dict[str, str] = {}
        owners: dict[str, Owner] = {}
        for triple in ox.parse("".join(f"{s} .\n" for s in sorted(statements)), format=ox.RdfFormat.N_TRIPLES):
            iri, predicate, value = triple.subject.value, triple.predicate.value, triple.object.value
            if predicate == RULE_TEXT:
                texts[iri] = value
            elif predicate == RULE_OWNER:
                owners[iri] = Owner.from_json(json.loads(value))
        return head, {iri: (text, owners.get(iri, OPERATOR)) for iri, text in texts.items()}

    def refresh(self, every: float = REFRESH_SECONDS) -> None:
        """Load the rule set again if the rules graph moved (an edit here or in another process)."""
        self.lanes.sweep()
        if self._loaded and time.monotonic() - self._checked < every:
            return
        with self._lock:
            if self._loaded and time.monotonic() - self._checked < every:
                return
            head = self.archive.current_head(RULES_GRAPH)
            if head != self._head or not self._loaded:
                _version, stored = self.stored()
                self._install(head, stored)
            self._checked = time.monotonic()

    def changed(self) -> None:
        """The rules graph has a new patch: the next refresh loads it."""
        self._checked = 0.0

    def _install(self, head: str | None, stored: dict[str, tuple[str, Owner]]) -> None:
        rules: dict[str, Registered] = {}
        for iri, (text, owner) in sorted(stored.items()):
            known = self._rules.get(iri)
            if known is not None and known.text == text and known.owner == owner:
                rules[iri] = known
                continue
            if known is not None and lane_name(known.owner) != lane_name(owner):
                self.lanes.lane(known.owner).replica.forget(iri)  # (its owner changed: another lane)
            try:
                rule, reads, text = rule_from_json(self.lanes.lane(owner).replica.register(iri, text, None))
            except (Refusal, BudgetExceeded, ValueError) as exc:  # stored by an older version, say
                log.error("rule <%s> cannot be loaded, it stays off: %s", iri, exc)
                continue
            rules[iri] = Registered(rule, reads, owner, text)
        for iri in set(self._rules) - set(rules):
            self.lanes.lane(self._rules[iri].owner).replica.forget(iri)
        immediate: dict[str, list[Registered]] = {}
        for reg in rules.values():
            if reg.rule.coupling == "immediate" and reg.rule.action == "update":
                immediate.setdefault(reg.graph, []).append(reg)
        for regs in immediate.values():
            regs.sort(key=lambda r: r.order)
        self._rules = rules
        self._immediate = immediate
        self._by_predicate = {graph: _by_predicate(regs) for graph, regs in immediate.items()}
        fired_inside = {r.rule.iri for regs in immediate.values() for r in regs}
        self.deferred = sorted((r for r in rules.values() if r.rule.iri not in fired_inside), key=lambda r: r.order)
        self._locks_for = _closures(immediate)
        self._head = head
        self._loaded = True
        self.lanes.trim(rules.values())
        self.on_deferred(self.deferred)
        self.wake.set()

    @property
    def version(self) -> str | None:
        """The rules graph's version this process holds."""
        return self._head

    def all(self) -> list[Registered]:
        self.refresh()
        return sorted(self._rules.values(), key=lambda r: r.order)

    def known(self) -> dict[str, Registered]:
        """The rules as loaded last (no refresh: the caller refreshed)."""
        return dict(self._rules)

    def get(self, iri: str) -> Registered:
        self.refresh()
        found = self._rules.get(iri)
        if found is None:
            raise NotFoundError(f"no rule <{iri}>")
        return found

    def locks_for(self, graph: str) -> frozenset[str]:
        """The graphs an immediate cascade from a patch of `graph` can write, with `graph`
        itself (empty when no immediate rule reacts to it): locked with it."""
        if not self._loaded:
            self.refresh()
        return self._locks_for.get(graph, frozenset())

    def fires_on(self, graph: str) -> bool:
        """Whether immediate rules react to patches of `graph`."""
        return graph in self._immediate

    def candidates(self, patch: Patch) -> list[Registered]:
        """The immediate rules of the patch's graph whose event can match it, in firing order:
        by the predicates the patch changes (an index, so that rules of other predicates cost
        nothing), then each candidate's first look (`may_match`)."""
        index = self._by_predicate.get(patch.graph)
        if index is None:
            return []
        found = set(index.get(None, ()))
        for side in (patch.added, patch.removed):
            for msg in side:
                for line in msg.nquads.split("\n"):  # (not splitlines: U+2028 is raw in literals)
                    parts = line.split(" ", 2)
                    if len(parts) > 1:
                        found.update(index.get(parts[1], ()))
        return [reg for reg in sorted(found, key=lambda r: r.order) if may_match(reg.rule, patch)]


def _closures(immediate: dict[str, list[Registered]]) -> dict[str, frozenset[str]]:
    """For each graph, the graphs an immediate cascade from it can write (transitively)."""
    out: dict[str, frozenset[str]] = {}
    for start in immediate:
        seen: set[str] = set()
        todo = [start]
        while todo:
            graph = todo.pop()
            for reg in immediate.get(graph, ()):
                for target in reg.rule.writes - seen:
                    seen.add(target)
                    todo.append(target)
        out[start] = frozenset(seen | {start})
    return out


def _by_predicate(regs: list[Registered]) -> dict[str | None, list[Registered]]:
    """Rules by a predicate their event requires (the first fixed one; None: a variable)."""
    index: dict[str | None, list[Registered]] = {}
    for reg in regs:
        fixed = [p.predicate for p in reg.rule.on if isinstance(p.predicate, URIRef)]
        index.setdefault(f"<{fixed[0]}>" if fixed else None, []).append(reg)
    return index
