"""Rules at run time (docs/rules.md): the rule set kept in the rules graph (every change a
signed patch), the index of which rules a graph's patches can fire, the firing of immediate
rules inside the publish that triggers them, the deferred rules' follower, and the firing
history.

Immediate rules fire in the publishing thread, after the triggering patch is archived and
applied and while the publisher still holds the write locks of every graph the cascade can
write (`locks_for`), so a rule's patch follows its trigger before any other patch of its
target graph. Rules fire depth first in priority order (higher first, then by IRI): a rule's
patch fires its own rules before the next rule of the same trigger is considered. When an
action fails or the cascade runs deeper than LUCID_RULES_MAX_DEPTH, the cascade's own patches
are rolled back by compensating patches (the archive is append-only); the trigger stays.

Each party's rules are evaluated in a lane of their own (`_Lane`): a worker process holding
the graphs that party's rules read (the operator's rules share one). A party whose condition
overruns LUCID_RULES_BUDGET costs its own lane's worker (killed and started again) and no one
else's firing waits for it; a lane that overran rests before its rules are evaluated again
(1, 2, 4 … s, RESTING_MAX at most): a firing meanwhile fails at once, without a worker. An idle
lane's worker is stopped after LANE_IDLE_SECONDS and started again (its graphs loaded) at its
next firing.

Deferred rules (and every webhook or notification) run in the leader process after commit:
a follower of each rule's graph with a durable cursor (`rule_cursors`), at least once,
idempotent by triggering patch (`rule_firings` holds one row per rule and trigger); a failing
firing is retried with backoff, LUCID_RULES_MAX_ATTEMPTS times, then recorded as failed and
passed over, so one rule never holds up another.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pyoxigraph as ox
import requests
from rdflib import URIRef, Variable
from rdflib.util import from_n3
from sqlalchemy import select, update

from lucid_hub import outbound
from lucid_hub.archive import Archive, at_version
from lucid_hub.config import Settings
from lucid_hub.db.models import RuleCursor, RuleFiring
from lucid_hub.db.session import Database
from lucid_hub.diff import GraphChange
from lucid_hub.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    LucidError,
    NotFoundError,
    PreconditionFailedError,
)
from lucid_hub.hub.callbacks import check_callback, parse_cidrs
from lucid_hub.metrics import Metrics
from lucid_hub.policy.engine import Party
from lucid_hub.policy.policy_graph import archived_statements
from lucid_hub.publish.publisher import FAULT_ENV, Publisher
from lucid_hub.queries.engine import BudgetExceeded, QueryEngine, Refusal
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rules.analysis import Analysis, analyse
from lucid_hub.rules.language import Pattern, Rule, RuleSyntaxError
from lucid_hub.signing import SigningKey, sign_text
from lucid_hub.store.graphs import GraphStore, StoreChange
from lucid_hub.store.sparql import GraphEdit
from lucid_hub.supervisor import Supervisor

log = logging.getLogger(__name__)

RULES_GRAPH = "urn:lucid-hub:rules"
LH = "https://w3id.org/lucid-hub#"
RULE_TEXT, RULE_OWNER, RDF_TYPE = LH + "ruleText", LH + "ruleOwner", "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
WORKER = "lucid_hub.rules.worker:handle"
REFRESH_SECONDS = 1.0
BACKOFF_BASE, BACKOFF_MAX = 1.0, 300.0  # seconds between a failing deferred firing's attempts
HISTORY_LIMIT = 1000
_FIRED_BY = re.compile(r"fired by patch (\S+) ")
RESTING_MAX = 60.0  # the longest a lane rests after overruns in a row
LANE_IDLE_SECONDS = 300.0  # a lane's worker not used this long is stopped (its memory given back)
HISTORY_DELAY = 0.05  # seconds the background writer gathers immediate firings before writing them


@dataclass(frozen=True)
class Owner:
    """Who defined a rule: an admin, or a party (whose access conditions the rule obeys)."""

    admin: bool
    account: str
    endpoint_id: str
    groups: tuple[str, ...] = ()

    @property
    def party(self) -> Party:
        return Party(self.account, self.endpoint_id, frozenset(self.groups))

    def to_json(self) -> dict[str, Any]:
        return {"admin": self.admin, "account": self.account, "endpoint_id": self.endpoint_id,
                "groups": list(self.groups)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Owner:
        return cls(bool(data["admin"]), str(data["account"]), str(data["endpoint_id"]),
                   tuple(str(g) for g in data.get("groups") or ()))


OPERATOR = Owner(True, "operator", "lucid-hub cli")


@dataclass(frozen=True)
class Registered:
    """A rule of the rule set: as parsed, what it reads, who owns it, its text."""

    rule: Rule
    reads: tuple[str, ...]
    owner: Owner
    text: str

    @property
    def graph(self) -> str:
        """The graph whose patches fire the rule (ON names one)."""
        return str(self.rule.on[0].graph)

    @property
    def order(self) -> tuple[int, str]:
        return -self.rule.priority, self.rule.iri

    def describe(self) -> dict[str, Any]:
        r = self.rule
        return {"iri": r.iri, "priority": r.priority, "coupling": r.coupling, "granularity": r.granularity,
                "bound": r.bound, "event": r.event, "graph": self.graph, "action": r.action,
                "writes": sorted(r.writes), "reads": list(self.reads), "owner": self.owner.to_json(),
                "text": self.text}


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


class CascadeStopped(LucidError):
    """A cascade ran deeper than the limit (something the analysis did not foresee)."""


class RuleFailed(LucidError):
    """A rule's firing failed: its reason is recorded; an immediate cascade is rolled back."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(f"rule <{rule}>: {reason}")
        self.rule = rule
        self.reason = reason


class RulesReplica(QueryEngine):
    """The rules' worker process and the graphs it holds (the continuous-query worker's
    replica machinery, with the rules' requests)."""

    worker_target = WORKER

    def __init__(self, store: GraphStore, memory_mb: int, budget: float) -> None:
        super().__init__(store, memory_mb, budget, max_result_bytes=0)
        self._texts: dict[str, tuple[str, list[str] | None]] = {}

    def _restore(self) -> None:
        for iri, (text, readable) in list(self._texts.items()):
            self._call({"op": "register", "iri": iri, "readable": readable}, text.encode())

    def parse(self, text: str) -> list[dict[str, Any]]:
        with self.lock:
            answer = self._call({"op": "parse"}, text.encode())
            result: list[dict[str, Any]] = json.loads(answer.body)
            return result

    def register(self, iri: str, text: str, readable: list[str] | None) -> dict[str, Any]:  # type: ignore[override]
        """Compile a rule in the worker (reading only `readable` of its graphs; None: all of
        them); its description (worker.describe)."""
        with self.lock:
            answer = self._call({"op": "register", "iri": iri, "readable": readable}, text.encode())
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

    def carry(self, changes: list[StoreChange]) -> None:
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


@dataclass
class Firing:
    """One row of the firing history, as it is being made."""

    rule: str
    trigger: str
    graph: str
    coupling: str
    depth: int
    instances: int = 0
    kept: int = 0
    outcome: str = "not-met"
    reason: str = ""
    patches: list[str] = field(default_factory=list)
    attempts: int = 1

    def row(self) -> dict[str, Any]:
        return {"rule": self.rule, "trigger": self.trigger, "graph": self.graph, "coupling": self.coupling,
                "depth": self.depth, "instances": self.instances, "kept": self.kept, "outcome": self.outcome,
                "reason": self.reason[:4000], "patches": " ".join(self.patches), "attempts": self.attempts,
                "fired_at": datetime.now(UTC)}


@dataclass
class _Cascade:
    trigger: Patch
    patches: list[Patch] = field(default_factory=list)  # the rules' patches, in commit order
    firings: list[Firing] = field(default_factory=list)
    fired: Counter[str] = field(default_factory=Counter)  # per rule, for BOUND
    failure: LucidError | None = None  # a failure deeper in the cascade (raised where it returns)


class _Lane:
    """One party's rules (or the operator's): the worker that evaluates them, holding the
    graphs they read; the store changes it has yet to take; how its last evaluations went."""

    def __init__(self, name: str, replica: RulesReplica) -> None:
        self.name = name
        self.replica = replica
        self.pending: list[StoreChange] = []
        self.pending_lock = threading.Lock()
        self.overruns = 0  # evaluations in a row that overran the budget
        self.resting_until = 0.0  # monotonic: its rules are not evaluated before
        self.used = time.monotonic()

    def resting(self) -> str:
        """Why its rules are not evaluated now, or ''."""
        wait = self.resting_until - time.monotonic()
        if wait <= 0:
            return ""
        return (f"not evaluated: its owner's rules overran the time budget {self.overruns} times in a row "
                f"(LUCID_RULES_BUDGET); they are tried again in {wait:.0f} s")

    def overran(self) -> None:
        self.overruns += 1
        self.resting_until = time.monotonic() + min(RESTING_MAX, 2.0 ** (self.overruns - 1))

    def caught_up(self, graphs: Iterable[str]) -> list[StoreChange]:
        """The worker holds `graphs`, as the store holds them now, but for the changes returned:
        the next patches of held graphs, which the next firing carries to the worker (one call,
        not one per change). Anything else (a drop, a gap) is applied now."""
        replica = self.replica
        with self.pending_lock:
            pending, self.pending = self.pending, []
        carried: list[StoreChange] = []
        for change in pending:
            if replica.next_change(change, after=carried):
                carried.append(change)
            else:
                replica.carry(carried)
                carried = []
                replica.apply(change)
        replica.ensure(set(graphs))
        return carried


def _lane_name(owner: Owner) -> str:
    return "" if owner.admin else owner.account


class RuleEngine:
    """The rule set of one hub process and its firing."""

    def __init__(self, settings: Settings, db: Database, archive: Archive, store: GraphStore,
                 canonicalizer: Canonicalizer, metrics: Metrics, key: SigningKey, *, leader: bool,
                 publisher: Publisher, allows: Callable[[Party, str, Any], bool] = lambda _p, _g, _a: False,
                 read_only: Callable[[str], bool] = lambda _graph: False,
                 callback_prefixes: Callable[[Owner], list[str]] = lambda _owner: []) -> None:
        """`publisher` writes the rules' patches (and reacts with this engine: the runtime
        binds the two); `allows` is the access conditions' word on a party, graph and action;
        `read_only` the graphs no rule may write (mirrors); `callback_prefixes` where a party
        may send webhooks."""
        self.settings = settings
        self.db = db
        self.archive = archive
        self.store = store
        self.canonicalizer = canonicalizer
        self.metrics = metrics
        self.key = key
        self.leader = leader
        self.max_depth = settings.rules_max_depth
        self._parser = RulesReplica(store, settings.query_memory_mb, settings.rules_budget)  # holds no graphs
        self._lanes: dict[str, _Lane] = {}  # by owner (lane_name)
        self._lanes_lock = threading.Lock()
        self._swept = time.monotonic()
        self.publisher = publisher
        self.allows = allows
        self.read_only = read_only
        self.callback_prefixes = callback_prefixes
        self._last: dict[str, StoreChange] = {}  # each graph's last store change (store-form deltas)
        self._rules: dict[str, Registered] = {}
        self._immediate: dict[str, list[Registered]] = {}
        # graph -> predicate (N-Triples, None: any) -> the immediate rules whose event names it
        self._by_predicate: dict[str, dict[str | None, list[Registered]]] = {}
        self._deferred: list[Registered] = []
        self._locks_for: dict[str, frozenset[str]] = {}
        self._head: str | None = None
        self._loaded = False
        self._checked = 0.0
        self._refresh_lock = threading.RLock()
        self._edit_lock = threading.Lock()
        self._history: list[dict[str, Any]] = []  # immediate firings the background writer has yet to write
        self._history_lock = threading.Lock()
        self._history_thread: threading.Thread | None = None
        self._deferred_lock = threading.Lock()
        self._local = threading.local()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._started = False
        self._http: requests.Session | None = None
        self._pool: Any = None
        store.watch(self._watched)

    # --- the rule set ------------------------------------------------------------------------
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
        if time.monotonic() - self._swept > LANE_IDLE_SECONDS / 4:
            self._sweep()
        if self._loaded and time.monotonic() - self._checked < every:
            return
        with self._refresh_lock:
            if self._loaded and time.monotonic() - self._checked < every:
                return
            head = self.archive.current_head(RULES_GRAPH)
            if head != self._head or not self._loaded:
                _version, stored = self.stored()
                self._install(head, stored)
            self._checked = time.monotonic()

    def _install(self, head: str | None, stored: dict[str, tuple[str, Owner]]) -> None:
        rules: dict[str, Registered] = {}
        for iri, (text, owner) in sorted(stored.items()):
            known = self._rules.get(iri)
            if known is not None and known.text == text and known.owner == owner:
                rules[iri] = known
                continue
            if known is not None and _lane_name(known.owner) != _lane_name(owner):
                self._lane(known.owner).replica.forget(iri)  # (its owner changed: another lane)
            try:
                rule, reads, text = rule_from_json(self._lane(owner).replica.register(iri, text, None))
            except (Refusal, BudgetExceeded, ValueError) as exc:  # stored by an older version, say
                log.error("rule <%s> cannot be loaded, it stays off: %s", iri, exc)
                continue
            rules[iri] = Registered(rule, reads, owner, text)
        for iri in set(self._rules) - set(rules):
            self._lane(self._rules[iri].owner).replica.forget(iri)
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
        self._deferred = sorted((r for r in rules.values() if r.rule.iri not in fired_inside), key=lambda r: r.order)
        self._locks_for = _closures(immediate)
        self._head = head
        self._loaded = True
        self._trim_lanes(rules.values())
        if self.leader:
            self._start_cursors(self._deferred)
        self._wake.set()

    @property
    def version(self) -> str | None:
        """The rules graph's version this process holds."""
        return self._head

    def rules(self) -> list[Registered]:
        self.refresh()
        return sorted(self._rules.values(), key=lambda r: r.order)

    def get(self, iri: str) -> Registered:
        self.refresh()
        found = self._rules.get(iri)
        if found is None:
            raise NotFoundError(f"no rule <{iri}>")
        return found

    def parse(self, text: str) -> list[tuple[Rule, tuple[str, ...], str]]:
        """The rules of a rule file (parsed in the worker: SPARQL is never parsed here)."""
        try:
            return [rule_from_json(data) for data in self._parser.parse(text)]
        except Refusal as refusal:
            raise RuleSyntaxError(refusal.message) from None
        except BudgetExceeded:
            raise RuleSyntaxError("the rule file could not be parsed within the time budget "
                                  "(LUCID_RULES_BUDGET); it is too complex") from None

    def check(self, parsed: list[tuple[Rule, tuple[str, ...], str]], owner: Owner,
              keep: Iterable[Registered] = ()) -> Analysis:
        """Refuse rules their owner may not define, or a rule set that can fire forever; the
        analysis of the set with them."""
        for rule, reads, _text in parsed:
            _check_shape(rule)
            for graph in sorted(rule.writes):
                if graph.startswith("urn:lucid-hub:"):
                    raise ForbiddenError(f"rule <{rule.iri}> writes the hub's own graph <{graph}>")
                if self.read_only(graph):
                    raise ForbiddenError(f"rule <{rule.iri}> writes <{graph}>, a mirror of another hub's graph; "
                                         "rules never write into a mirror")
                if not owner.admin and not self.allows(owner.party, graph, "write"):
                    raise ForbiddenError(f"rule <{rule.iri}> writes <{graph}>, which you may not write")
            if not owner.admin:
                if rule.action != "update" and not self.allows(owner.party, str(rule.on[0].graph), "write"):
                    raise ForbiddenError(f"rule <{rule.iri}> sends what <{rule.on[0].graph}> holds: define it "
                                         "as an admin or as a party that may write that graph")
                for graph in reads:
                    if not self.allows(owner.party, graph, "read"):
                        raise ForbiddenError(f"rule <{rule.iri}> reads <{graph}>, which you may not read")
            if rule.action != "update":
                prefixes = [rule.target] if owner.admin else self.callback_prefixes(owner)
                try:
                    check_callback(rule.target, prefixes, dev_mode=self.settings.dev_mode,
                                   allowed=parse_cidrs(self.settings.callback_allow_cidrs))
                except InputError as exc:
                    raise InputError(f"rule <{rule.iri}>: {rule.action.upper()} <{rule.target}>: "
                                     f"{str(exc).replace('hub.callback', 'the URL')}") from None
        analysis = analyse([*(r.rule for r in keep), *(rule for rule, _reads, _text in parsed)])
        if not analysis.terminates:
            raise RuleSyntaxError("the rule set can fire forever: " + analysis.explain().replace("\n", "; "))
        return analysis

    def explain(self) -> Analysis:
        return analyse([r.rule for r in self.rules()])

    def add(self, text: str, owner: Owner, author: str) -> list[Registered]:
        """Add (or replace, by IRI) the rules of a rule file, as one signed patch of the rules graph."""
        parsed = self.parse(text)
        with self._edit_lock:
            self.refresh(every=0)
            for rule, _reads, _text in parsed:
                known = self._rules.get(rule.iri)
                if known is not None and not owner.admin and known.owner.account != owner.account:
                    raise ForbiddenError(f"rule <{rule.iri}> belongs to another party")
            new = {rule.iri for rule, _reads, _text in parsed}
            self.check(parsed, owner, [r for iri, r in self._rules.items() if iri not in new])
            stored = {iri: (r.text, r.owner) for iri, r in self._rules.items()}
            stored.update({rule.iri: (text, owner) for rule, _reads, text in parsed})
            self._publish(stored, author, "rules: set " + ", ".join(f"<{iri}>" for iri in sorted(new)))
        return [self.get(iri) for iri in sorted(new)]

    def remove(self, iri: str, owner: Owner, author: str) -> None:
        with self._edit_lock:
            self.refresh(every=0)
            known = self._rules.get(iri)
            if known is None:
                raise NotFoundError(f"no rule <{iri}>")
            if not owner.admin and known.owner.account != owner.account:
                raise ForbiddenError(f"rule <{iri}> belongs to another party")
            stored = {i: (r.text, r.owner) for i, r in self._rules.items() if i != iri}
            self._publish(stored, author, f"rules: removed <{iri}>")

    def clear(self, owner: Owner, author: str) -> None:
        """Remove every rule (admins only), as one patch of the rules graph."""
        if not owner.admin:
            raise ForbiddenError("only an admin removes every rule")
        with self._edit_lock:
            self.refresh(every=0)
            self._publish({}, author, f"rules: removed all {len(self._rules)}")

    def _publish(self, stored: dict[str, tuple[str, Owner]], author: str, message: str) -> None:
        statements = set()
        for iri, (text, owner) in stored.items():
            subject = ox.NamedNode(iri)
            statements.add(str(ox.Triple(subject, ox.NamedNode(RDF_TYPE), ox.NamedNode(LH + "Rule"))))
            statements.add(str(ox.Triple(subject, ox.NamedNode(RULE_TEXT), ox.Literal(text))))
            statements.add(str(ox.Triple(subject, ox.NamedNode(RULE_OWNER),
                                         ox.Literal(json.dumps(owner.to_json(), sort_keys=True)))))
        try:
            self.publisher.replace(RULES_GRAPH, GraphMsgs(statements, Counter()), author=author[:512],
                                   message=message[:4096], if_match=at_version(self._head))
        except PreconditionFailedError:
            raise ConflictError("the rules were changed meanwhile (by another admin or hub process); look at "
                                "them again and retry") from None
        self.refresh(every=0)

    # --- firing: immediate -------------------------------------------------------------------
    # --- lanes ---------------------------------------------------------------------------------
    def _lane(self, owner: Owner) -> _Lane:
        name = _lane_name(owner)
        with self._lanes_lock:
            lane = self._lanes.get(name)
            if lane is None:
                replica = RulesReplica(self.store, self.settings.query_memory_mb, self.settings.rules_budget)
                lane = self._lanes[name] = _Lane(name, replica)
            return lane

    def _trim_lanes(self, rules: Iterable[Registered]) -> None:
        """Each lane holds the graphs its owner's rules read; a lane without rules is closed."""
        needed: dict[str, set[str]] = {}
        for reg in rules:
            needed.setdefault(_lane_name(reg.owner), set()).update(reg.reads)
        with self._lanes_lock:
            gone = [self._lanes.pop(name) for name in set(self._lanes) - set(needed)]
            kept = list(self._lanes.values())
        for lane in gone:
            lane.replica.close()
        for lane in kept:
            lane.replica.unused_graphs(needed[lane.name])

    def _sweep(self) -> None:
        """Stop the workers of lanes idle for LANE_IDLE_SECONDS (their graphs are loaded
        again at their next firing)."""
        self._swept = time.monotonic()
        with self._lanes_lock:
            idle = [lane for lane in self._lanes.values() if self._swept - lane.used > LANE_IDLE_SECONDS]
        for lane in idle:
            if lane.replica.lock.acquire(blocking=False):  # (one firing now: not idle after all)
                try:
                    lane.replica.close()
                finally:
                    lane.replica.lock.release()

    def lanes(self) -> dict[str, dict[str, Any]]:
        """Each lane's state (for the metrics and the console): '' is the operator's."""
        with self._lanes_lock:
            lanes = list(self._lanes.values())
        return {lane.name: {"overruns": lane.overruns, "resting": bool(lane.resting()),
                            "worker": lane.replica._worker is not None} for lane in lanes}

    def locks_for(self, graph: str) -> frozenset[str]:
        """The graphs an immediate cascade from a patch of `graph` can write, with `graph`
        itself (empty when no immediate rule reacts to it): locked with it."""
        if not self._loaded:
            self.refresh()
        return self._locks_for.get(graph, frozenset())

    def _watched(self, change: StoreChange) -> None:
        # Under the store's writer lock: only note it (the replica takes it before the next firing).
        if change.graph in self._immediate:
            self._last[change.graph] = change
        for lane in list(self._lanes.values()):
            if lane.replica.holds(change.graph):
                with lane.pending_lock:
                    lane.pending.append(change)

    def on_patch(self, patch: Patch) -> None:
        """React to an archived and applied patch (the publisher calls it under the write locks
        of `locks_for(patch.graph)`). Never raises: a rule's failure is recorded."""
        if patch.graph == RULES_GRAPH:
            self._checked = 0.0
            return
        if getattr(self._local, "quiet", False):
            return
        if self._deferred:
            self._wake.set()
        cascade: _Cascade | None = getattr(self._local, "cascade", None)
        flagged = patch.id in getattr(self._local, "flagged", ())
        if flagged:
            self._local.flagged.discard(patch.id)
        if cascade is not None:  # a rule's own patch, published inside the cascade: it goes on
            cascade.patches.append(patch)  # (in commit order: what a rollback undoes, newest first)
            if cascade.failure is None and patch.graph in self._immediate:
                try:
                    self._react(patch, cascade, getattr(self._local, "depth", 1))
                except (RuleFailed, CascadeStopped) as exc:  # the publisher would swallow it: kept
                    cascade.failure = exc
            return
        self.refresh()
        if patch.graph not in self._immediate:
            if flagged:
                self._reacted(patch.id)
            return
        cascade = self._local.cascade = _Cascade(patch)
        try:
            self._react(patch, cascade, 0)
        except (RuleFailed, CascadeStopped) as exc:
            self._roll_back(cascade, str(exc))
        except Exception as exc:
            log.exception("an immediate rule cascade failed")
            self._roll_back(cascade, f"internal error: {exc}")
        finally:
            self._local.cascade = None
            self._record(cascade.firings)
            if flagged:  # done (inside the locks: a process starting now sees it done)
                self._reacted(patch.id)

    def will_react(self, patch: Patch) -> bool:
        """Whether a cascade of immediate rules will start from this patch (asked by the
        publisher before it archives the patch, which then records a pending reaction)."""
        if getattr(self._local, "quiet", False) or getattr(self._local, "cascade", None) is not None:
            return False
        if patch.graph not in self._by_predicate or not self._candidates(patch):
            return False
        flagged: set[str] | None = getattr(self._local, "flagged", None)
        if flagged is None:
            flagged = self._local.flagged = set()
        flagged.add(patch.id)
        return True

    def _reacted(self, patch_id: str) -> None:
        try:
            self.archive.reacted(patch_id)
        except Exception:
            log.exception("recording that patch %s's rules are done failed (it is looked at again at start)",
                          patch_id)

    def recover(self) -> None:
        """At start: cascades a crash interrupted (a pending reaction left in the archive) are
        rolled back and run again, if nothing else has changed their graphs since; otherwise
        their rules are recorded as failed, with the reason. Waits for a cascade another
        process of the hub is still running (its locks)."""
        pending = self.archive.pending_reactions()
        if not pending:
            return
        self.refresh(every=0)
        for patch_id, graph in pending:
            with self.publisher.writing(self.locks_for(graph) or {graph}):
                if patch_id not in {p for p, _g in self.archive.pending_reactions()}:
                    continue  # another process finished it while this one waited
                try:
                    self._resume(patch_id, graph)
                except Exception:
                    log.exception("resuming the rules of patch %s failed", patch_id)
                finally:
                    self._reacted(patch_id)

    def _resume(self, trigger_id: str, graph: str) -> None:
        record = self.archive.patch(trigger_id)
        trigger = read_rdf_patch(record.body, self.canonicalizer)
        graphs = self.locks_for(graph) or frozenset({graph})
        later: dict[str, list[Any]] = {}
        for g in sorted(graphs):
            history = self.archive.history(g) if self.archive.current_head(g) is not None else []
            if g == graph:
                ids = [r.id for r in history]
                later[g] = history[ids.index(trigger_id) + 1:]
            else:
                later[g] = [r for r in history if _aware(r.created) >= _aware(record.created)]
        cascade = {trigger_id}
        grew = True
        while grew:  # the patches the rules made: each names the patch that fired it
            grew = False
            for records in later.values():
                for r in records:
                    fired = _FIRED_BY.match(r.message)
                    if r.id not in cascade and r.author.startswith("rule <") and fired and fired.group(1) in cascade:
                        cascade.add(r.id)
                        grew = True
        strangers = sorted({g for g, records in later.items() for r in records if r.id not in cascade})
        if strangers:
            reason = ("its cascade was interrupted by a crash and is not run again: "
                      f"<{strangers[0]}> has changed since")
            self._record([Firing(reg.rule.iri, trigger_id, graph, "immediate", 1, outcome="failed", reason=reason)
                          for reg in self._candidates(trigger)], now=True)
            log.error("rules of patch %s: %s", trigger_id, reason)
            return
        self._local.quiet = True
        try:
            for records in later.values():
                for r in reversed(records):
                    self._undo(read_rdf_patch(r.body, self.canonicalizer),
                               "its cascade was interrupted by a crash; it runs again")
        finally:
            self._local.quiet = False
        log.warning("rules of patch %s: the cascade a crash interrupted runs again", trigger_id)
        self.on_patch(trigger)

    def _react(self, patch: Patch, cascade: _Cascade, depth: int) -> None:
        for reg in self._candidates(patch):
            if cascade.failure is not None:
                raise cascade.failure
            self._fire_immediate(reg, patch, cascade, depth + 1)

    def _candidates(self, patch: Patch) -> list[Registered]:
        """The immediate rules of the patch's graph whose event can match it, in firing order:
        by the predicates the patch changes (an index, so that rules of other predicates cost
        nothing), then each candidate's first look (`_may_match`)."""
        index = self._by_predicate.get(patch.graph)
        if index is None:
            return []
        found = set(index.get(None, ()))
        for side in (patch.added, patch.removed):
            for msg in side:
                for line in msg.nquads.splitlines():
                    parts = line.split(" ", 2)
                    if len(parts) > 1:
                        found.update(index.get(parts[1], ()))
        return [reg for reg in sorted(found, key=lambda r: r.order) if _may_match(reg.rule, patch)]

    def _fire_immediate(self, reg: Registered, patch: Patch, cascade: _Cascade, depth: int) -> None:
        rule = reg.rule
        firing = Firing(rule.iri, patch.id, patch.graph, rule.coupling, depth)
        if depth > self.max_depth:
            firing.outcome, firing.reason = "stopped", f"cascade deeper than {self.max_depth} (LUCID_RULES_MAX_DEPTH)"
            cascade.firings.append(firing)
            self.metrics.rule_firings.labels("stopped").inc()
            raise CascadeStopped(f"rule <{rule.iri}>: {firing.reason}, from patch {cascade.trigger.id}")
        if rule.bound is not None and cascade.fired[rule.iri] >= rule.bound:
            firing.outcome, firing.reason = "bounded", f"fired {rule.bound} times in this cascade (BOUND)"
            cascade.firings.append(firing)
            return
        refusal = self._refusal(reg)
        if refusal:
            firing.outcome, firing.reason = "skipped", refusal
            cascade.firings.append(firing)
            self.metrics.rule_firings.labels("skipped").inc()
            return
        cascade.firings.append(firing)
        try:
            answer = self._evaluate(reg, patch.graph, *self._store_delta(patch))
        except RuleFailed as exc:
            firing.outcome, firing.reason = "failed", exc.reason
            self.metrics.rule_firings.labels("failed").inc()
            raise
        firing.instances, firing.kept = answer["instances"], answer["kept"]
        if not answer["instances"]:  # the first look passed, the event did not match: no history
            cascade.firings.remove(firing)
            return
        if not answer["kept"]:
            return  # not-met
        cascade.fired[rule.iri] += 1
        edits = answer["edits"]
        if not edits:
            firing.outcome = "unchanged"
            self.metrics.rule_firings.labels(firing.outcome).inc()
            return
        outer = getattr(self._local, "depth", 1)
        self._local.depth = depth
        try:
            made = self._write(reg, patch, edits)
        except (RuleFailed, CascadeStopped) as exc:
            if firing.outcome == "not-met":
                firing.outcome, firing.reason = "failed", getattr(exc, "reason", str(exc))
            raise
        except LucidError as exc:
            firing.outcome, firing.reason = "failed", str(exc)
            self.metrics.rule_firings.labels("failed").inc()
            raise RuleFailed(rule.iri, str(exc)) from None
        finally:
            self._local.depth = outer
        firing.patches = [p.id for p in made]
        firing.outcome = "patched" if made else "unchanged"
        self.metrics.rule_firings.labels(firing.outcome).inc()
        if made and os.environ.get(FAULT_ENV) == "in-rule-cascade":  # test-only: a crash mid-cascade
            log.warning("fault injection: exiting inside a rule cascade")
            os._exit(137)
        if cascade.failure is not None:
            raise cascade.failure

    def _store_delta(self, patch: Patch) -> tuple[list[str], list[str]]:
        """The patch's change as the store made it (blank nodes as the store's skolem IRIs, so
        a condition joins them with the graph), else as the patch writes it."""
        change = self._last.get(patch.graph)
        if change is not None and change.patch == patch.id and change.removed is not None and change.added is not None:
            return change.removed, change.added
        return _delta(patch)

    def _refusal(self, reg: Registered) -> str:
        """Why the rule may not fire now (its owner lost access), or ''."""
        if reg.owner.admin:
            return ""
        party = reg.owner.party
        for graph in reg.reads:
            if not self.allows(party, graph, "read"):
                return f"its owner {reg.owner.account} may no longer read <{graph}>"
        for graph in reg.rule.writes:
            if not self.allows(party, graph, "write"):
                return f"its owner {reg.owner.account} may no longer write <{graph}>"
        return ""

    def _evaluate(self, reg: Registered, graph: str, removed: list[str], added: list[str]) -> dict[str, Any]:
        """The rule's event and condition on a change of `graph`, in its owner's lane."""
        lane = self._lane(reg.owner)
        resting = lane.resting()
        if resting:
            self.metrics.rules_rested.inc()
            raise RuleFailed(reg.rule.iri, resting)
        started = time.perf_counter()
        try:
            with lane.replica.lock:  # (one firing at a time in a lane: its pending changes in order)
                lane.used = time.monotonic()
                answer = lane.replica.fire(reg.rule.iri, graph, removed, added, lane.caught_up(reg.reads))
            lane.overruns = 0
            return answer
        except BudgetExceeded:
            lane.overran()
            raise RuleFailed(reg.rule.iri, "its evaluation overran the time budget of "
                                           f"{self.settings.rules_budget:g} s (LUCID_RULES_BUDGET)") from None
        except Refusal as refusal:
            raise RuleFailed(reg.rule.iri, refusal.message) from None
        finally:
            self.metrics.rule_seconds.observe(time.perf_counter() - started)

    def _write(self, reg: Registered, trigger: Patch, edits: dict[str, Any]) -> list[Patch]:
        """The action's changes as signed patches (one per graph, one transaction), authored by
        the rule, their message naming the triggering patch."""
        writes = reg.rule.writes
        changes = {}
        versions = {}
        for graph, edit in edits.items():
            if graph not in writes or self.read_only(graph):
                raise RuleFailed(reg.rule.iri, f"its action wrote <{graph}>, which it may not")
            removed = self.store.published(graph, edit["removed"])
            graph_edit = GraphEdit(self._lane(reg.owner).replica.version(graph), removed, edit["added"])
            changes[graph] = _computer(graph, graph_edit, self.canonicalizer)
            versions[graph] = graph_edit.version
        return list(self.publisher.publish_all(changes, versions, author=f"rule <{reg.rule.iri}>"[:512],
                                               message=f"fired by patch {trigger.id} of <{trigger.graph}>"))

    def _roll_back(self, cascade: _Cascade, reason: str) -> None:
        """Undo the cascade's own patches, newest first (compensating patches; rules stay quiet)."""
        self._local.quiet = True
        try:
            for patch in reversed(cascade.patches):
                self._undo(patch, reason)
        except Exception:
            log.exception("rolling back a rule cascade failed")
        finally:
            self._local.quiet = False
        for firing in cascade.firings:
            if firing.outcome == "patched":
                firing.outcome, firing.reason = "rolled-back", reason
        self.metrics.rule_firings.labels("rolled-back").inc(len(cascade.patches))
        log.warning("rule cascade from patch %s rolled back: %s", cascade.trigger.id, reason)

    def _undo(self, patch: Patch, reason: str) -> None:
        """A compensating patch: the inverse of a rule's patch (the caller keeps rules quiet)."""
        inverse = GraphChange(patch.graph, patch.added, patch.removed)
        self.publisher.publish(patch.graph, lambda _view: inverse, author="rule engine",
                               message=f"rolled back {patch.id}: {reason}"[:4096])

    def _record(self, firings: list[Firing], now: bool = False) -> None:
        """Add firings to the history: an immediate cascade's in the background (a database
        round trip was a third of a matching rule's cost; the patches themselves are in the
        archive already), a deferred firing's `now` (its row is what makes it idempotent)."""
        if not firings:
            return
        rows = [firing.row() for firing in firings]
        if now:
            self._insert(rows)
            return
        with self._history_lock:
            self._history.extend(rows)
            if self._history_thread is None or not self._history_thread.is_alive():
                self._history_thread = threading.Thread(target=self._write_history, name="lucid-rule-history",
                                                        daemon=True)
                self._history_thread.start()

    def _write_history(self) -> None:
        while True:
            self._stopping.wait(HISTORY_DELAY)  # gather a burst into one transaction
            with self._history_lock:
                rows, self._history = self._history, []
                if not rows:
                    self._history_thread = None
                    return
            self._insert(rows)

    def flush_history(self) -> None:
        """Write what the background writer has not written yet (before reading the history)."""
        with self._history_lock:
            rows, self._history = self._history, []
        self._insert(rows)

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        try:
            with self.db.session() as session:
                for row in rows:
                    session.execute(self.db.insert(RuleFiring).values(**row)
                                    .on_conflict_do_nothing(index_elements=["rule", "trigger"]))
        except Exception:
            log.exception("recording rule firings failed")  # a record; publishing goes on

    # --- firing: deferred ----------------------------------------------------------------------
    def lead(self) -> None:
        """This process took the leadership over: it is the one to run the deferred rules (`start` follows)."""
        self.leader = True

    def start(self, roles: Supervisor) -> None:
        """Run the deferred rules (in the leader process): the role `deferred-rules`."""
        if not self.leader or self._started:
            return
        self._started = True
        self._http = outbound.session(outbound.AddressPolicy.of(self.settings), "lucid-hub rules")
        self._pool = outbound.pool_manager(outbound.AddressPolicy.of(self.settings), timeout=10.0, retries=False)
        roles.add("deferred-rules", self.round, every=1.0, wake=self._wake)

    def stop(self) -> None:
        """After the role stopped: the history still to write, and the evaluating worker."""
        self._stopping.set()
        self._wake.set()
        self.flush_history()
        self._parser.close()
        with self._lanes_lock:
            lanes = list(self._lanes.values())
        for lane in lanes:
            lane.replica.close()

    def round(self) -> bool:
        """A round of the role: the rules as the rules graph says now, then one batch of
        deferred firings; whether more may be waiting (the supervisor runs it again at once)."""
        if self._stopping.is_set():
            return False
        self.refresh()
        return bool(self.run_deferred())

    def _start_cursors(self, rules: list[Registered]) -> None:
        """A new deferred rule starts at its graph's head: it reacts to what comes after it."""
        with self.db.session() as session:
            known = set(session.scalars(select(RuleCursor.rule)))
            for reg in rules:
                if reg.rule.iri not in known:
                    head = self.archive.current_head(reg.graph)
                    session.add(RuleCursor(rule=reg.rule.iri, graph=reg.graph, patch=head, attempts=0, retry_at=None))

    def run_deferred(self, limit: int = 100) -> int:
        """One round of the deferred rules: each handles up to `limit` patches; how many it did."""
        with self._deferred_lock:  # one round at a time: two would send the same webhook twice
            return self._run_deferred(limit)

    def _run_deferred(self, limit: int) -> int:
        done = 0
        for reg in list(self._deferred):
            with self.db.session() as session:
                cursor = session.get(RuleCursor, reg.rule.iri)
                if cursor is None:
                    continue
                at, attempts, retry_at = cursor.patch, cursor.attempts, cursor.retry_at
            if retry_at is not None and _aware(retry_at) > datetime.now(UTC):
                continue
            try:
                records = self.archive.after(reg.graph, at)[:limit]
            except LucidError:
                continue  # the graph is not there (yet)
            for record in records:
                patch = read_rdf_patch(record.body, self.canonicalizer)
                if patch.author == "rule engine" or not _may_match(reg.rule, patch):
                    self._advance(reg.rule.iri, record.id)
                    continue
                firing = Firing(reg.rule.iri, record.id, reg.graph, reg.rule.coupling, 1, attempts=attempts + 1)
                try:
                    self._fire_deferred(reg, patch, firing)
                except RuleFailed as exc:
                    firing.outcome, firing.reason = "failed", exc.reason
                    self.metrics.rule_firings.labels("failed").inc()
                    if firing.attempts < self.settings.rules_max_attempts:
                        delay = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (firing.attempts - 1))
                        self._retry_later(reg.rule.iri, firing, delay)
                        break
                if firing.outcome != "no-match":
                    self._record([firing], now=True)
                self._advance(reg.rule.iri, record.id)
                attempts = 0
                done += 1
        return done

    def _fire_deferred(self, reg: Registered, patch: Patch, firing: Firing) -> None:
        refusal = self._refusal(reg)
        if refusal:
            firing.outcome, firing.reason = "skipped", refusal
            return
        rule = reg.rule
        if rule.action != "update":
            answer = self._evaluate(reg, patch.graph, *_delta(patch))
            if not self._kept(answer, firing):
                return
            self._send(reg, patch, answer, firing)
        else:  # evaluated once, under the locks of what it writes: the graphs hold still for it
            with self.publisher.writing(set(rule.writes) | {g for w in rule.writes for g in self.locks_for(w)}):
                answer = self._evaluate(reg, patch.graph, *_delta(patch))
                if not self._kept(answer, firing):
                    return
                try:
                    made = self._write(reg, patch, answer["edits"]) if answer["edits"] else []
                except LucidError as exc:
                    raise RuleFailed(rule.iri, str(exc)) from None
            firing.patches = [p.id for p in made]
            firing.outcome = "patched" if made else "unchanged"
        self.metrics.rule_firings.labels(firing.outcome).inc()

    @staticmethod
    def _kept(answer: dict[str, Any], firing: Firing) -> bool:
        """Note the event's instances and the condition's result; whether the action runs."""
        firing.instances, firing.kept = answer["instances"], answer["kept"]
        if not answer["kept"]:
            firing.outcome = "not-met" if answer["instances"] else "no-match"
        return bool(answer["kept"])

    def _send(self, reg: Registered, patch: Patch, answer: dict[str, Any], firing: Firing) -> None:
        rule = reg.rule
        public = self.settings.public_url
        message = {"rule": rule.iri, "graph": patch.graph, "patch": patch.id,
                   "patchUrl": f"{public}/patches/{patch.id}", "rows": answer["rows"],
                   "moreRows": answer.get("more_rows", 0)}
        if rule.action == "webhook":
            body = json.dumps(message).encode()
            headers = {"Content-Type": "application/json", "X-Lucid-Rule": rule.iri, "X-Lucid-Trigger": patch.id,
                       "X-Lucid-Signature": sign_text(body, self.key)}
            status, account = outbound.signed_post(self._pool, rule.target, body, headers, None)
            if not 200 <= status < 300:
                raise RuleFailed(rule.iri, f"the webhook {rule.target} answered {account}")
            firing.outcome = "sent"
            return
        notification = {
            "@context": "https://www.w3.org/ns/activitystreams", "type": "Announce",
            "id": f"{public}/rules/firings?rule={rule.iri}&trigger={patch.id}",
            "actor": public, "object": message["patchUrl"], "target": patch.graph,
            "summary": f"rule <{rule.iri}> fired by patch {patch.id}",
            "content": json.dumps(answer["rows"]),
        }
        assert self._http is not None
        try:
            reply = self._http.post(rule.target, data=json.dumps(notification).encode(), timeout=10.0,
                                    headers={"Content-Type": "application/ld+json"}, allow_redirects=False)
        except requests.RequestException as exc:
            raise RuleFailed(rule.iri, f"the inbox {rule.target} did not answer: {type(exc).__name__}") from None
        if reply.status_code not in (201, 202):
            raise RuleFailed(rule.iri, f"the inbox {rule.target} answered HTTP {reply.status_code}")
        firing.outcome = "sent"

    def _advance(self, rule: str, patch_id: str) -> None:
        with self.db.session() as session:
            session.execute(update(RuleCursor).where(RuleCursor.rule == rule)
                            .values(patch=patch_id, attempts=0, retry_at=None))

    def _retry_later(self, rule: str, firing: Firing, delay: float) -> None:
        with self.db.session() as session:
            session.execute(update(RuleCursor).where(RuleCursor.rule == rule)
                            .values(attempts=firing.attempts, retry_at=datetime.now(UTC) + timedelta(seconds=delay)))
        log.warning("deferred rule <%s> failed on patch %s (attempt %d), retried in %.0f s: %s", rule,
                    firing.trigger, firing.attempts, delay, firing.reason)

    # --- dry runs ---------------------------------------------------------------------------------
    def simulate(self, text: str, graph: str, removed: list[str], added: list[str]) -> list[dict[str, Any]]:
        """What the rules of `text` would do if a patch of `graph` removed and added these
        statements now: each firing (depth first, priority order, as immediate rules fire;
        deferred rules and webhooks on the trigger after the cascade). Nothing is written: a
        worker of its own holds copies of the graphs."""
        parsed = self.parse(text)
        analysis = analyse([rule for rule, _reads, _text in parsed])
        if not analysis.terminates:
            raise RuleSyntaxError("the rule set can fire forever: " + analysis.explain().replace("\n", "; "))
        regs = sorted((Registered(rule, reads, OPERATOR, body) for rule, reads, body in parsed), key=lambda r: r.order)
        for reg in regs:
            _check_shape(reg.rule)
        replica = RulesReplica(self.store, self.settings.query_memory_mb, self.settings.rules_budget)
        out: list[dict[str, Any]] = []
        fired: Counter[str] = Counter()

        def fire(reg: Registered, on: str, gone: list[str], came: list[str], depth: int) -> dict[str, Any]:
            try:
                answer = replica.fire(reg.rule.iri, on, gone, came)
            except (Refusal, BudgetExceeded) as exc:
                answer = {"instances": 0, "kept": 0, "edits": {}, "rows": [], "failed": str(exc)}
            entry = {"rule": reg.rule.iri, "graph": on, "depth": depth, **answer}
            if answer["instances"]:
                out.append(entry)
            return answer

        def react(on: str, gone: list[str], came: list[str], depth: int) -> None:
            for reg in regs:
                if reg.rule.coupling != "immediate" or reg.rule.action != "update" or reg.graph != on:
                    continue
                if depth > self.max_depth:
                    out.append({"rule": reg.rule.iri, "graph": on, "depth": depth, "stopped":
                                f"cascade deeper than {self.max_depth} (LUCID_RULES_MAX_DEPTH)"})
                    return
                if reg.rule.bound is not None and fired[reg.rule.iri] >= reg.rule.bound:
                    continue
                answer = fire(reg, on, gone, came, depth)
                if answer["kept"]:
                    fired[reg.rule.iri] += 1
                for target, edit in answer["edits"].items():
                    replica.change(target, edit["removed"], edit["added"])
                    react(target, edit["removed"], edit["added"], depth + 1)

        try:
            for reg in regs:
                replica.register(reg.rule.iri, reg.text, list(reg.reads))
            replica.ensure({g for reg in regs for g in reg.reads} | {graph})
            replica.change(graph, removed, added)
            react(graph, removed, added, 1)
            for reg in regs:
                if reg.graph == graph and not (reg.rule.coupling == "immediate" and reg.rule.action == "update"):
                    fire(reg, graph, removed, added, 1)
        finally:
            replica.close()
        return out

    # --- history ---------------------------------------------------------------------------------
    def history(self, rule: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest firings first (of one rule, or of all)."""
        self.flush_history()
        query = select(RuleFiring).order_by(RuleFiring.seq.desc()).limit(max(1, min(limit, HISTORY_LIMIT)))
        if rule is not None:
            query = query.where(RuleFiring.rule == rule)
        with self.db.session() as session:
            return [{"rule": f.rule, "trigger": f.trigger, "graph": f.graph, "coupling": f.coupling,
                     "depth": f.depth, "instances": f.instances, "kept": f.kept, "outcome": f.outcome,
                     "reason": f.reason or None, "patches": f.patches.split() if f.patches else [],
                     "attempts": f.attempts, "firedAt": _aware(f.fired_at).isoformat()}
                    for f in session.scalars(query)]


def _check_shape(rule: Rule) -> None:
    """What the run time needs of a rule beyond the language: one graph in ON; a webhook or
    notification runs after commit (DEFERRED)."""
    graphs = {p.graph for p in rule.on}
    if len(graphs) != 1 or not isinstance(next(iter(graphs)), URIRef):
        raise RuleSyntaxError(f"rule <{rule.iri}>: ON names one graph, GRAPH <iri> {{ … }}")
    if rule.action != "update" and rule.coupling == "immediate":
        raise RuleSyntaxError(f"rule <{rule.iri}>: a {rule.action.upper()} is sent after commit; write DEFERRED "
                              "(a network call never runs inside a publish)")


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


def _may_match(rule: Rule, patch: Patch) -> bool:
    """A cheap first look: can the patch hold a triple with the event's fixed predicates?"""
    predicates = {f"<{p.predicate}>" for p in rule.on if isinstance(p.predicate, URIRef)}
    if len(predicates) != len(rule.on):
        return True  # a variable predicate: the worker decides
    sides = {"INSERT": (patch.added,), "DELETE": (patch.removed,), "UPDATE": (patch.added, patch.removed)}[rule.event]
    return all(any(f" {p} " in m.nquads for side in sides for m in side) for p in predicates)


def _delta(patch: Patch) -> tuple[list[str], list[str]]:
    """The patch's removed and added statements (blank nodes as the patch labels them)."""
    return ([s for m in patch.removed for s in m.statements], [s for m in patch.added for s in m.statements])


def _computer(graph: str, edit: GraphEdit, canonicalizer: Canonicalizer) -> Callable[[Any], GraphChange]:
    from lucid_hub.publish.update import edit_change

    return lambda view: edit_change(graph, edit, view, canonicalizer)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
