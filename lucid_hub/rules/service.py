"""Rules at run time (docs/rules.md): the small facade the web layer, the commands and the
composition root use. The parts, each its own module:

- model.py: owners, registered rules, firings; the judgements of a rule and a patch;
- ruleset.py: the rule set (from the rules graph), and the index of which rules a patch fires;
- lanes.py: each party's rules evaluated in a worker of their own (replica.py talks to it);
- cascade.py: immediate rules inside the publish that triggers them (the publisher's hooks);
- deferred.py: deferred rules, webhooks and notifications after commit (the leader's role);
- actions.py: a firing's patches (through the writer it is handed), webhooks and notices;
- history.py: the firing history; dry_run.py: what rules would do, nothing written.

The cascade is built before the publisher (which calls it); this service after it, holding the
publisher as the writer of the rules graph and of deferred firings. So nothing in the rules
holds the publisher that calls them, and the parts form no cycle.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox

from lucid_hub.archive import Archive, at_version
from lucid_hub.config import Settings
from lucid_hub.db.session import Database
from lucid_hub.errors import ConflictError, ForbiddenError, InputError, NotFoundError, PreconditionFailedError
from lucid_hub.metrics import Metrics
from lucid_hub.policy.decisions import Party
from lucid_hub.publish.publisher import Publisher
from lucid_hub.queries.evaluator import BudgetExceeded, Refusal
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs
from lucid_hub.rules.actions import Actions
from lucid_hub.rules.analysis import Analysis, analyse, terminating
from lucid_hub.rules.cascade import RuleCascade
from lucid_hub.rules.deferred import DeferredRules, start_cursors
from lucid_hub.rules.dry_run import simulate
from lucid_hub.rules.history import FiringHistory
from lucid_hub.rules.lanes import Lanes
from lucid_hub.rules.language import Rule, RuleSyntaxError
from lucid_hub.rules.model import LH, RDF_TYPE, RULE_OWNER, RULE_TEXT, RULES_GRAPH, Owner, Registered, check_shape
from lucid_hub.rules.replica import RulesReplica, rule_from_json
from lucid_hub.rules.ruleset import RuleSet
from lucid_hub.signing import SigningKey
from lucid_hub.store.graphs import GraphStore
from lucid_hub.supervisor import Supervisor
from lucid_hub.websub.callbacks import check_callback, parse_cidrs


@dataclass
class RuleParts:
    """The rules' parts that exist before the publisher: the cascade is its hooks."""

    rule_set: RuleSet
    lanes: Lanes
    actions: Actions
    history: FiringHistory
    cascade: RuleCascade
    leading: threading.Event  # set in the leader: it starts the deferred rules' cursors

    @classmethod
    def build(cls, settings: Settings, db: Database, archive: Archive, store: GraphStore,
              canonicalizer: Canonicalizer, metrics: Metrics, key: SigningKey, *, leader: bool,
              allows: Callable[[Party, str, Any], bool], read_only: Callable[[str], bool]) -> RuleParts:
        """`allows` is the access conditions' word on a party, graph and action; `read_only`
        the graphs no rule may write (mirrors)."""
        leading = threading.Event()
        if leader:
            leading.set()
        lanes = Lanes(store, settings.query_memory_mb, settings.rules_budget, metrics)
        rule_set = RuleSet(archive, canonicalizer, lanes,
                           on_deferred=lambda regs: start_cursors(db, archive, regs) if leading.is_set() else None)
        actions = Actions(settings, store, lanes, canonicalizer, read_only, key)
        history = FiringHistory(db)
        cascade = RuleCascade(rule_set, lanes, actions, history, store, archive, canonicalizer, metrics,
                              max_depth=settings.rules_max_depth, allows=allows)
        return cls(rule_set, lanes, actions, history, cascade, leading)


class RuleService:
    """The rule set of one hub process: editing it, reading it and its history, and running
    its deferred rules (in the leader)."""

    def __init__(self, settings: Settings, db: Database, archive: Archive, store: GraphStore,
                 canonicalizer: Canonicalizer, metrics: Metrics, parts: RuleParts, writer: Publisher, *,
                 read_only: Callable[[str], bool] = lambda _graph: False,
                 callback_prefixes: Callable[[Owner], list[str]] = lambda _owner: []) -> None:
        """`writer` publishes the rules graph and deferred rules' patches; `read_only` the graphs
        no rule may write (mirrors); `callback_prefixes` where a party may send webhooks."""
        self.settings = settings
        self.store = store
        self.parts = parts
        self.writer = writer
        self.read_only = read_only
        self.allows = parts.cascade.allows
        self.callback_prefixes = callback_prefixes
        # Rules of partner hubs this set must terminate with, and where each runs (rules.offers).
        self.foreign: Callable[[], list[tuple[Rule, str]]] = lambda: []
        self._parser = RulesReplica(store, settings.query_memory_mb, settings.rules_budget)  # holds no graphs
        self._edit_lock = threading.Lock()
        self.deferred = DeferredRules(db, archive, canonicalizer, parts.rule_set, parts.lanes, parts.actions,
                                      parts.history, metrics, writer, max_attempts=settings.rules_max_attempts,
                                      allows=self.allows)

    # --- reading -----------------------------------------------------------------------------
    @property
    def version(self) -> str | None:
        """The rules graph's version this process holds."""
        return self.parts.rule_set.version

    def rules(self) -> list[Registered]:
        return self.parts.rule_set.all()

    def get(self, iri: str) -> Registered:
        return self.parts.rule_set.get(iri)

    def lanes(self) -> dict[str, dict[str, Any]]:
        """Each lane's state (for the metrics and the console): '' is the operator's."""
        return self.parts.lanes.states()

    def history(self, rule: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The newest firings first (of one rule, or of all)."""
        return self.parts.history.newest(rule, limit)

    # --- editing -----------------------------------------------------------------------------
    def parse(self, text: str) -> list[tuple[Rule, tuple[str, ...], str]]:
        """The rules of a rule file (parsed in the worker: SPARQL is never parsed here)."""
        try:
            return [rule_from_json(data) for data in self._parser.parse(text)]
        except Refusal as refusal:
            raise RuleSyntaxError(refusal.message) from None
        except BudgetExceeded:
            seconds = self._parser.parse_budget(text.encode())
            raise RuleSyntaxError(f"the rule file could not be parsed within {seconds:.0f} s (5 s and a second "
                                  "for every 2 KB of it, at most 60 s); it is too complex") from None

    def check(self, parsed: list[tuple[Rule, tuple[str, ...], str]], owner: Owner,
              keep: Iterable[Registered] = ()) -> Analysis:
        """Refuse rules their owner may not define, or a rule set that can fire forever; the
        analysis of the set with them."""
        for rule, reads, _text in parsed:
            check_shape(rule)
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
        return terminating([*(r.rule for r in keep), *(rule for rule, _reads, _text in parsed)], self.foreign())

    def explain(self) -> Analysis:
        return analyse([r.rule for r in self.rules()])

    def add(self, text: str, owner: Owner, author: str) -> list[Registered]:
        """Add (or replace, by IRI) the rules of a rule file, as one signed patch of the rules graph."""
        parsed = self.parse(text)
        with self._edit_lock:
            rules = self._current()
            for rule, _reads, _text in parsed:
                known = rules.get(rule.iri)
                if known is not None and not owner.admin and known.owner.account != owner.account:
                    raise ForbiddenError(f"rule <{rule.iri}> belongs to another party")
            new = {rule.iri for rule, _reads, _text in parsed}
            self.check(parsed, owner, [r for iri, r in rules.items() if iri not in new])
            stored = {iri: (r.text, r.owner) for iri, r in rules.items()}
            stored.update({rule.iri: (text, owner) for rule, _reads, text in parsed})
            self._publish(stored, author, "rules: set " + ", ".join(f"<{iri}>" for iri in sorted(new)))
        return [self.get(iri) for iri in sorted(new)]

    def remove(self, iri: str, owner: Owner, author: str) -> None:
        with self._edit_lock:
            rules = self._current()
            known = rules.get(iri)
            if known is None:
                raise NotFoundError(f"no rule <{iri}>")
            if not owner.admin and known.owner.account != owner.account:
                raise ForbiddenError(f"rule <{iri}> belongs to another party")
            stored = {i: (r.text, r.owner) for i, r in rules.items() if i != iri}
            self._publish(stored, author, f"rules: removed <{iri}>")

    def clear(self, owner: Owner, author: str) -> None:
        """Remove every rule (admins only), as one patch of the rules graph."""
        if not owner.admin:
            raise ForbiddenError("only an admin removes every rule")
        with self._edit_lock:
            rules = self._current()
            self._publish({}, author, f"rules: removed all {len(rules)}")

    def _current(self) -> dict[str, Registered]:
        """The rules as the rules graph holds them now (before an edit)."""
        self.parts.rule_set.refresh(every=0)
        return self.parts.rule_set.known()

    def _publish(self, stored: dict[str, tuple[str, Owner]], author: str, message: str) -> None:
        statements = set()
        for iri, (text, owner) in stored.items():
            subject = ox.NamedNode(iri)
            statements.add(str(ox.Triple(subject, ox.NamedNode(RDF_TYPE), ox.NamedNode(LH + "Rule"))))
            statements.add(str(ox.Triple(subject, ox.NamedNode(RULE_TEXT), ox.Literal(text))))
            statements.add(str(ox.Triple(subject, ox.NamedNode(RULE_OWNER),
                                         ox.Literal(json.dumps(owner.to_json(), sort_keys=True)))))
        try:
            self.writer.replace(RULES_GRAPH, GraphMsgs(statements, Counter()), author=author[:512],
                                message=message[:4096], if_match=at_version(self.version))
        except PreconditionFailedError:
            raise ConflictError("the rules were changed meanwhile (by another admin or hub process); look at "
                                "them again and retry") from None
        self.parts.rule_set.refresh(every=0)

    def simulate(self, text: str, graph: str, removed: list[str], added: list[str]) -> list[dict[str, Any]]:
        """What the rules of `text` would do on a patch of `graph` (rules.dry_run)."""
        return simulate(self.parse(text), self.store, self.settings, graph, removed, added)

    # --- running -----------------------------------------------------------------------------
    def recover(self) -> None:
        """At start: cascades a crash interrupted (RuleCascade.recover)."""
        self.parts.cascade.recover(self.writer)

    def run_deferred(self, limit: int = 100) -> int:
        """One round of the deferred rules; how many patches they handled."""
        return self.deferred.run(limit)

    def lead(self) -> None:
        """This process took the leadership over: it runs the deferred rules (`start` follows)."""
        self.parts.leading.set()

    def start(self, roles: Supervisor) -> None:
        """Run the deferred rules (in the leader process): the role `deferred-rules`."""
        if self.parts.leading.is_set():
            self.deferred.start(roles)

    def stop(self) -> None:
        """After the role stopped: the history still to write, and the evaluating workers."""
        self.deferred.stop()
        self.parts.history.stop()
        self._parser.close()
        self.parts.lanes.close()
