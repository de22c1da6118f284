"""Access decisions: may this party read (or write) this graph? Compiled per party, cached.

A party is an account, the endpoint (OAuth client) it acts through, and its groups. For a
party seen before, a decision is two
dictionary lookups; every policy change replaces the engine's state, so the next request
is decided on the new conditions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from lucid_hub.policy.model import ALL_GRAPHS_ALIASES, EVERYONE, Condition

Action = Literal["read", "write"]
RESERVED_PREFIX = "urn:lucid-hub:"  # the hub's own graphs (the policy graph): never granted
CACHE_LIMIT = 200_000
ANONYMOUS_ACCOUNT = "urn:lucid-hub:anonymous"
ATTRIBUTE_PREFIX = "urn:lucid-hub:attribute:"


@dataclass(frozen=True)
class Party:
    """Who asks: what access decisions depend on (tokens of one party share cached decisions)."""

    account: str
    endpoint_id: str
    groups: frozenset[str] = frozenset()

    @property
    def anonymous(self) -> bool:
        return self.account == ANONYMOUS_ACCOUNT

    def describe(self) -> dict[str, object]:
        return {"account": self.account, "endpoint_id": self.endpoint_id, "groups": sorted(self.groups)}


# Who calls without any credentials: only conditions for everyone (requiresGroup EVERYONE,
# nothing else required) apply to it, and they grant read only (public graphs; docs/decisions.md).
ANONYMOUS = Party(ANONYMOUS_ACCOUNT, ANONYMOUS_ACCOUNT)


@dataclass(frozen=True)
class Access:
    """What one party may do, compiled from the conditions that apply to it."""

    conditions: tuple[str, ...]
    read: frozenset[str]
    write: frozenset[str]
    read_prefixes: tuple[str, ...]
    write_prefixes: tuple[str, ...]
    all_read: bool
    all_write: bool

    def allows(self, graph: str, action: Action) -> bool:
        if graph.startswith(RESERVED_PREFIX):
            return False
        if self.all_write or graph in self.write or graph.startswith(self.write_prefixes):
            return True
        if action == "write":
            return False
        return self.all_read or graph in self.read or graph.startswith(self.read_prefixes)


@dataclass(frozen=True)
class Decision:
    """An access decision, with its reason; a denial a hub recorded has its request id."""

    allowed: bool
    reason: str
    request_id: str | None = None


def applies(condition: Condition, party: Party) -> bool:
    """Whether all the condition's requirements hold for the party. Every party, authenticated
    or not, is in the group EVERYONE; an anonymous party is in no other group and a condition
    applies to it only when it names EVERYONE (a condition without requirements applies to
    every *authenticated* party, as it always did)."""
    if party.anonymous and EVERYONE not in condition.requiresGroup:
        return False
    return (all(g == EVERYONE or g in party.groups for g in condition.requiresGroup)
            and all(a == party.account for a in condition.requiresAccount)
            and all(e == party.endpoint_id for e in condition.requiresEndpointId)
            and all(attribute_group(*a.split("=", 1)) in party.groups for a in condition.requiresAttribute))


def attribute_group(claim: str, value: str) -> str:
    """How a party carries an attribute (a claim of its token that access conditions may
    require: a partner tier, a country): as a group of the hub's own namespace, which no client
    or issuer can give itself (tokens.py strips such groups), so that every place that keeps a
    party's groups keeps its attributes too."""
    return f"{ATTRIBUTE_PREFIX}{quote(claim, safe='')}={quote(value, safe='')}"


def grants(condition: Condition, graph: str, action: Action) -> bool:
    if graph.startswith(RESERVED_PREFIX):
        return False
    write = (ALL_GRAPHS_ALIASES.intersection(condition.writeGraph) or graph in condition.writeGraph
             or any(graph.startswith(p[:-1]) for p in condition.grantWriteGraphPattern))
    if write or action == "write":
        return bool(write)
    return bool(ALL_GRAPHS_ALIASES.intersection(condition.readGraph) or graph in condition.readGraph
                or any(graph.startswith(p[:-1]) for p in condition.grantReadGraphPattern))


def compile_access(conditions: Iterable[Condition], party: Party) -> Access:
    applying = [c for c in conditions if applies(c, party)]
    read = {g for c in applying for g in c.readGraph}
    write = {g for c in applying for g in c.writeGraph}
    return Access(
        conditions=tuple(c.iri for c in applying),
        read=frozenset(read - ALL_GRAPHS_ALIASES), write=frozenset(write - ALL_GRAPHS_ALIASES),
        read_prefixes=tuple(sorted({p[:-1] for c in applying for p in c.grantReadGraphPattern})),
        write_prefixes=tuple(sorted({p[:-1] for c in applying for p in c.grantWriteGraphPattern})),
        all_read=bool(read & ALL_GRAPHS_ALIASES), all_write=bool(write & ALL_GRAPHS_ALIASES))


def describe(party: Party) -> str:
    group_text = ", ".join(sorted(party.groups)) or "none"
    return f"account {party.account!r} (endpoint {party.endpoint_id!r}, groups: {group_text})"


class PolicyEngine:
    """Decides with the current conditions; `replace` swaps them in for the next request."""

    def __init__(self, conditions: Iterable[Condition] = ()) -> None:
        self._lock = threading.Lock()
        self.version = 0
        self.replace(conditions)

    def replace(self, conditions: Iterable[Condition]) -> None:
        with self._lock:
            self.conditions: tuple[Condition, ...] = tuple(sorted(conditions, key=lambda c: c.iri))
            self._access: dict[Party, Access] = {}
            self._decisions: dict[tuple[Party, str, Action], Decision] = {}
            self.version += 1

    def access(self, party: Party) -> Access:
        found = self._access.get(party)
        if found is None:
            found = compile_access(self.conditions, party)
            if len(self._access) >= CACHE_LIMIT:
                self._access = {}
            self._access[party] = found
        return found

    def decide(self, party: Party, graph: str, action: Action) -> Decision:
        key = (party, graph, action)
        decisions = self._decisions  # the dict of this policy version, even if replaced meanwhile
        found = decisions.get(key)
        if found is not None:
            return found
        if graph.startswith(RESERVED_PREFIX):
            found = Decision(False, f"<{graph}> is one of the hub's own graphs; use the admin API")
        elif self.access(party).allows(graph, action):
            found = Decision(True, f"{action} on <{graph}> granted")
        else:
            found = Decision(False, f"no access condition grants {describe(party)} {action} access to <{graph}>")
        if len(decisions) >= CACHE_LIMIT:
            decisions.clear()
        decisions[key] = found
        return found

    def why(self, party: Party, graph: str, action: Action) -> dict[str, object]:
        """The full explanation of one decision (for admins): each condition and how it fared."""
        rows = []
        for c in self.conditions:
            rows.append({"condition": c.iri, "label": c.label, "applies": applies(c, party),
                         "requires": c.requirements, "grants": grants(c, graph, action)})
        decision = self.decide(party, graph, action)
        return {"allowed": decision.allowed, "reason": decision.reason, "party": party.describe(),
            "graph": graph, "action": action,
            "granting": [r["condition"] for r in rows if r["applies"] and r["grants"]],
            "conditions": [r for r in rows if r["applies"] or r["grants"]]}

    def who_may(self, graph: str, action: Action = "read") -> list[dict[str, object]]:
        """The conditions that grant `action` on `graph`, with what they require of a party."""
        return [{"condition": c.iri, "label": c.label, "requires": c.requirements,
                 "access": "write" if grants(c, graph, "write") else "read"}
                for c in self.conditions if grants(c, graph, action)]

    def what_may(self, party: Party) -> dict[str, object]:
        """What a party may read and write: graphs, patterns, and whether all graphs."""
        a = self.access(party)
        return {"party": party.describe(),
                "conditions": list(a.conditions), "all_graphs": "write" if a.all_write else
                ("read" if a.all_read else None), "read": sorted(a.read), "write": sorted(a.write),
                "read_patterns": [p + "*" for p in a.read_prefixes],
                "write_patterns": [p + "*" for p in a.write_prefixes]}
