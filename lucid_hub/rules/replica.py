"""The rules' worker process, as the hub talks to it: rules compiled and fired there, over the
graphs it holds (the continuous-query worker's replica machinery, with the rules' requests)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rdflib import Variable
from rdflib.util import from_n3

from lucid_hub.queries.evaluator import QueryEngine
from lucid_hub.rules.language import Pattern, Rule
from lucid_hub.store.graphs import GraphStore, StoreChange

WORKER = "lucid_hub.rules.rule_process:handle"


def _term(text: str) -> Any:
    return Variable(text[1:]) if text.startswith(("?", "$")) else from_n3(text)


def rule_from_json(data: dict[str, Any]) -> tuple[Rule, tuple[str, ...], str]:
    """A rule as the worker described it (worker.describe): (rule, reads, text)."""
    def patterns(items: list[list[str]]) -> tuple[Pattern, ...]:
        return tuple(Pattern(*(_term(t) for t in item)) for item in items)

    rule = Rule(data["iri"], int(data["priority"]), data["coupling"], data["granularity"], data["bound"],
                data["event"], patterns(data["on"]), data["condition"], data["action"], data["target"],
                patterns(data["inserts"]), patterns(data["deletes"]), "", data["text"])
    return rule, tuple(data["reads"]), str(data["text"])



# Seconds parsing or compiling a rule may take, at least. Compiling is no firing: it is bounded
# by the rule's size, and a budget set low for firings (LUCID_RULES_BUDGET=1) refused ordinary
# rules, or left a stored one off, on a busy machine.
COMPILE_SECONDS = 5.0
# A rule file's parse grows with its size (rdflib's SPARQL parser: about 14 KB/s on one idle
# core, a 100-rule file of 20 KB in 1.5 s): a second more for every PARSE_BYTES_A_SECOND bytes,
# up to PARSE_SECONDS_MAX, whatever the file (a hostile one costs its worker that at most).
PARSE_BYTES_A_SECOND = 2_000
PARSE_SECONDS_MAX = 60.0


class RulesReplica(QueryEngine):
    """The rules' worker process and the graphs it holds (the continuous-query worker's
    replica machinery, with the rules' requests)."""

    worker_target = WORKER

    def __init__(self, store: GraphStore, memory_mb: int, budget: float) -> None:
        super().__init__(store, memory_mb, budget, max_result_bytes=0)
        self._texts: dict[str, tuple[str, list[str] | None]] = {}
        self.compile_budget = max(budget, COMPILE_SECONDS)  # parse and register (firings: `budget`)

    def _restore(self) -> None:
        for iri, (text, readable) in list(self._texts.items()):
            self._call({"op": "register", "iri": iri, "readable": readable}, text.encode(),
                       timeout=self.compile_budget)

    def parse_budget(self, body: bytes) -> float:
        """Seconds the parse of a rule file of this size may take."""
        return min(max(self.compile_budget, COMPILE_SECONDS + len(body) / PARSE_BYTES_A_SECOND),
                   max(self.compile_budget, PARSE_SECONDS_MAX))

    def parse(self, text: str) -> list[dict[str, Any]]:
        body = text.encode()
        with self.lock:
            answer = self._call({"op": "parse"}, body, timeout=self.parse_budget(body))
            result: list[dict[str, Any]] = json.loads(answer.body)
            return result

    def register(self, iri: str, text: str, readable: list[str] | None) -> dict[str, Any]:  # type: ignore[override]
        """Compile a rule in the worker (reading only `readable` of its graphs; None: all of
        them); its description (worker.describe)."""
        with self.lock:
            answer = self._call({"op": "register", "iri": iri, "readable": readable}, text.encode(),
                                timeout=self.compile_budget)
            self._texts[iri] = (text, readable)
            result: dict[str, Any] = json.loads(answer.body)
            return result

    def forget(self, iri: str) -> None:
        with self.lock:
            if self._texts.pop(iri, None) is not None and self._worker is not None:
                self._call({"op": "forget", "iri": iri})

    def next_change(self, change: StoreChange, after: Sequence[StoreChange] = ()) -> bool:
        """Whether `change` (after `after`) is simply the next patch of a graph the worker holds."""
        if change.graph not in self._graphs or change.patch is None or change.generation <= self._loaded[change.graph]:
            return False
        version = next((c.patch for c in reversed(after) if c.graph == change.graph), self._graphs[change.graph])
        return version == change.prev

    def apply_all(self, changes: list[StoreChange]) -> None:
        """Send changes that `next_change` accepted, on their own (when no firing carries them)."""
        for change in changes:
            self.apply(change)

    def fire(self, iri: str, graph: str, removed: list[str], added: list[str],
             changes: Sequence[StoreChange] = ()) -> dict[str, Any]:
        """Fire a rule on a change of `graph`; `changes` (from `next_change`) are applied to the
        worker's graphs first, in the same call."""
        with self.lock:
            body = {"removed": removed, "added": added,
                    "changes": [{"graph": c.graph, "removed": c.removed, "added": c.added} for c in changes]}
            try:
                answer = self._call({"op": "fire", "iri": iri, "graph": graph}, json.dumps(body).encode())
            finally:
                for change in changes:  # applied (or, if the worker died, reloaded from the store)
                    if change.graph in self._graphs:
                        self._graphs[change.graph] = change.patch
            result: dict[str, Any] = json.loads(answer.body)
            return result

    def change(self, graph: str, removed: list[str], added: list[str]) -> None:
        """Change a held graph without the store (a dry run's hypothetical patches)."""
        with self.lock:
            self._call({"op": "change", "graph": graph, "candidates": []},
                       json.dumps({"removed": removed, "added": added}).encode())

    def version(self, graph: str) -> str | None:
        return self._graphs.get(graph)

    def holds(self, graph: str) -> bool:
        return graph in self._graphs

