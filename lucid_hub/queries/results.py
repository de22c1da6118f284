"""Result sets of continuous queries and their changes, in the SPARQL 1.1 Query Results
JSON format, and the SE protocol's messages (SEPA: `notification`, `unsubscribed`, errors).

A result set is a multiset of rows (a SELECT's solutions, a CONSTRUCT's triples as rows of
subject, predicate and object) or, for ASK, one boolean. A change is the multiset
difference: rows that came (`addedResults`) and rows that went (`removedResults`); applying
it to the previous rows gives the new ones exactly (`apply`). Order is not part of a change
(docs/queries.md says what that means for ORDER BY and LIMIT).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any


def row_key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"))


@dataclass
class Results:
    """One evaluation's results: `rows` (SELECT, CONSTRUCT) or `boolean` (ASK)."""

    vars: list[str]
    rows: list[dict[str, Any]]
    boolean: bool | None = None

    @classmethod
    def of(cls, value: dict[str, Any]) -> Results:
        if "boolean" in value:
            return cls([], [], bool(value["boolean"]))
        return cls(list(value.get("vars", [])), list(value.get("rows", [])))

    def as_dict(self) -> dict[str, Any]:
        if self.boolean is not None:
            return {"boolean": self.boolean}
        return {"vars": self.vars, "rows": self.rows}

    def counts(self) -> Counter[str]:
        return Counter(row_key(row) for row in self.rows)

    def json(self) -> dict[str, Any]:
        """As SPARQL 1.1 Query Results JSON."""
        if self.boolean is not None:
            return {"head": {}, "boolean": self.boolean}
        return {"head": {"vars": self.vars}, "results": {"bindings": self.rows}}


@dataclass
class Change:
    added: Results
    removed: Results

    @property
    def empty(self) -> bool:
        if self.added.boolean is not None:
            return self.added.boolean == self.removed.boolean
        return not self.added.rows and not self.removed.rows


def diff(old: Results, new: Results) -> Change:
    """What changed from `old` to `new`: for ASK, the new and the old answer."""
    if new.boolean is not None:
        return Change(Results([], [], new.boolean), Results([], [], old.boolean if old.boolean is not None else False))
    before, after = old.counts(), new.counts()
    by_key = {row_key(row): row for row in old.rows}
    by_key.update((row_key(row), row) for row in new.rows)
    gone, came = before - after, after - before
    return Change(Results(new.vars, [by_key[k] for k, n in sorted(came.items()) for _ in range(n)]),
                  Results(new.vars, [by_key[k] for k, n in sorted(gone.items()) for _ in range(n)]))


def apply(current: Results, change: Change) -> Results:
    """The results after `change` (what a client does with a notification)."""
    if change.added.boolean is not None:
        return Results([], [], change.added.boolean)
    counts = current.counts()
    counts.subtract(Counter(row_key(r) for r in change.removed.rows))
    if any(n < 0 for n in counts.values()):
        raise ValueError("the change removes rows the results do not hold")
    counts.update(row_key(r) for r in change.added.rows)
    return Results(change.added.vars or current.vars, [json.loads(k) for k, n in counts.items() for _ in range(n)])


def notification(spuid: str, alias: str, sequence: int, change: Change, **extra: Any) -> dict[str, Any]:
    """An SE protocol notification (SEPA), with lucid-hub's extra members (`patches`, `reset`)."""
    return {"notification": {"spuid": spuid, "alias": alias, "sequence": sequence,
                             "addedResults": change.added.json(), "removedResults": change.removed.json(), **extra}}


def first(results: Results) -> Change:
    """The change a subscription's first notification carries: every current result added."""
    if results.boolean is not None:
        return Change(results, Results([], [], False))
    return Change(results, Results(results.vars, []))


def error(status: int, error: str, description: str, **extra: Any) -> dict[str, Any]:
    """An SE protocol error message (SEPA's error listing: status code, error, description)."""
    return {"error": error, "status_code": status, "error_description": " ".join(description.split()), **extra}
