"""The immediate rules' cascade: what runs when a rule fires inside a publish. It implements the
publisher's hooks port (publish.hooks): the publisher calls `react(patch, writer)` after each
archived and applied patch, while it still holds the write locks of every graph the cascade
can write (`locks_for`), so a rule's patch follows its trigger before any other patch of its
target graph.

Rules fire depth first in priority order (higher first, then by IRI): a rule's patch fires its
own rules before the next rule of the same trigger is considered. When an action fails or the
cascade runs deeper than LUCID_RULES_MAX_DEPTH, the cascade's own patches are rolled back by
compensating patches (the archive is append-only); the trigger stays."""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lucid_hub.archive import Archive
from lucid_hub.errors import LucidError
from lucid_hub.metrics import Metrics
from lucid_hub.policy.decisions import Party
from lucid_hub.publish.faults import crash_point
from lucid_hub.publish.hooks import Writer
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import read_rdf_patch
from lucid_hub.rules.actions import Actions
from lucid_hub.rules.history import FiringHistory
from lucid_hub.rules.lanes import Lanes
from lucid_hub.rules.model import (
    RULES_GRAPH,
    CascadeStopped,
    Firing,
    Registered,
    RuleFailed,
    aware,
    delta,
    refusal,
)
from lucid_hub.rules.ruleset import RuleSet
from lucid_hub.store.graphs import GraphStore, StoreChange

log = logging.getLogger(__name__)

_FIRED_BY = re.compile(r"fired by patch (\S+) ")


@dataclass
class _Cascade:
    trigger: Patch
    writer: Writer  # what the cascade's patches are published through
    patches: list[Patch] = field(default_factory=list)  # the rules' patches, in commit order
    firings: list[Firing] = field(default_factory=list)
    fired: Counter[str] = field(default_factory=Counter)  # per rule, for BOUND
    failure: LucidError | None = None  # a failure deeper in the cascade (raised where it returns)


class RuleCascade:
    """Fires the immediate rules of each archived patch (the publisher's hooks)."""

    def __init__(self, rule_set: RuleSet, lanes: Lanes, actions: Actions, history: FiringHistory,
                 store: GraphStore, archive: Archive, canonicalizer: Canonicalizer, metrics: Metrics, *,
                 max_depth: int, allows: Callable[[Party, str, Any], bool]) -> None:
        """`allows` is the access conditions' word on a party, graph and action."""
        self.rule_set = rule_set
        self.lanes = lanes
        self.actions = actions
        self.history = history
        self.archive = archive
        self.canonicalizer = canonicalizer
        self.metrics = metrics
        self.max_depth = max_depth
        self.allows = allows
        self._last: dict[str, StoreChange] = {}  # each graph's last store change (store-form deltas)
        self._local = threading.local()  # this thread's cascade, depth, quiet, flagged patches
        store.watch(self._watched)

    # --- the hooks port ------------------------------------------------------------------------
    def locks_for(self, graph: str) -> frozenset[str]:
        return self.rule_set.locks_for(graph)

    def will_react(self, patch: Patch) -> bool:
        """Whether a cascade of immediate rules will start from this patch (asked by the
        publisher before it archives the patch, which then records a pending reaction)."""
        if getattr(self._local, "quiet", False) or getattr(self._local, "cascade", None) is not None:
            return False
        if not self.rule_set.candidates(patch):
            return False
        flagged: set[str] | None = getattr(self._local, "flagged", None)
        if flagged is None:
            flagged = self._local.flagged = set()
        flagged.add(patch.id)
        return True

    def react(self, patch: Patch, writer: Writer) -> None:
        """React to an archived and applied patch (the publisher calls it under the write locks
        of `locks_for(patch.graph)`). Never raises: a rule's failure is recorded."""
        if patch.graph == RULES_GRAPH:
            self.rule_set.changed()
            return
        if getattr(self._local, "quiet", False):
            return
        if self.rule_set.deferred:
            self.rule_set.wake.set()
        cascade: _Cascade | None = getattr(self._local, "cascade", None)
        flagged = patch.id in getattr(self._local, "flagged", ())
        if flagged:
            self._local.flagged.discard(patch.id)
        if cascade is not None:  # a rule's own patch, published inside the cascade: it goes on
            cascade.patches.append(patch)  # (in commit order: what a rollback undoes, newest first)
            if cascade.failure is None and self.rule_set.fires_on(patch.graph):
                try:
                    self._react(patch, cascade, getattr(self._local, "depth", 1))
                except (RuleFailed, CascadeStopped) as exc:  # the publisher would swallow it: kept
                    cascade.failure = exc
            return
        self.rule_set.refresh()
        if not self.rule_set.fires_on(patch.graph):
            if flagged:
                self._reacted(patch.id)
            return
        cascade = self._local.cascade = _Cascade(patch, writer)
        try:
            self._react(patch, cascade, 0)
        except (RuleFailed, CascadeStopped) as exc:
            self._roll_back(cascade, str(exc))
        except Exception as exc:
            log.exception("an immediate rule cascade failed")
            self._roll_back(cascade, f"internal error: {exc}")
        finally:
            self._local.cascade = None
            self.history.record(cascade.firings)
            if flagged:  # done (inside the locks: a process starting now sees it done)
                self._reacted(patch.id)

    # --- firing --------------------------------------------------------------------------------
    def _watched(self, change: StoreChange) -> None:
        # Under the store's writer lock: only note it (the lanes take it before the next firing).
        if self.rule_set.fires_on(change.graph):
            self._last[change.graph] = change
        self.lanes.watched(change)

    def _reacted(self, patch_id: str) -> None:
        try:
            self.archive.reacted(patch_id)
        except Exception:
            log.exception("recording that patch %s's rules are done failed (it is looked at again at start)",
                          patch_id)

    def _react(self, patch: Patch, cascade: _Cascade, depth: int) -> None:
        for reg in self.rule_set.candidates(patch):
            if cascade.failure is not None:
                raise cascade.failure
            self._fire(reg, patch, cascade, depth + 1)

    def _fire(self, reg: Registered, patch: Patch, cascade: _Cascade, depth: int) -> None:
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
        refused = refusal(reg, self.allows)
        if refused:
            firing.outcome, firing.reason = "skipped", refused
            cascade.firings.append(firing)
            self.metrics.rule_firings.labels("skipped").inc()
            return
        cascade.firings.append(firing)
        try:
            answer = self.lanes.evaluate(reg, patch.graph, *self._store_delta(patch))
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
        if not answer["edits"]:
            firing.outcome = "unchanged"
            self.metrics.rule_firings.labels(firing.outcome).inc()
            return
        made = self._write(reg, patch, answer["edits"], cascade, depth, firing)
        firing.patches = [p.id for p in made]
        firing.outcome = "patched" if made else "unchanged"
        self.metrics.rule_firings.labels(firing.outcome).inc()
        if made:
            crash_point("in-rule-cascade")  # test-only: a crash mid-cascade
        if cascade.failure is not None:
            raise cascade.failure

    def _write(self, reg: Registered, patch: Patch, edits: dict[str, Any], cascade: _Cascade, depth: int,
               firing: Firing) -> list[Patch]:
        """The rule's edits, published at `depth` (their own rules fire one deeper)."""
        outer = getattr(self._local, "depth", 1)
        self._local.depth = depth
        try:
            return self.actions.write(reg, patch, edits, cascade.writer)
        except (RuleFailed, CascadeStopped) as exc:
            if firing.outcome == "not-met":
                firing.outcome, firing.reason = "failed", getattr(exc, "reason", str(exc))
            raise
        except LucidError as exc:
            firing.outcome, firing.reason = "failed", str(exc)
            self.metrics.rule_firings.labels("failed").inc()
            raise RuleFailed(reg.rule.iri, str(exc)) from None
        finally:
            self._local.depth = outer

    def _store_delta(self, patch: Patch) -> tuple[list[str], list[str]]:
        """The patch's change as the store made it (blank nodes as the store's skolem IRIs, so
        a condition joins them with the graph), else as the patch writes it."""
        change = self._last.get(patch.graph)
        if change is not None and change.patch == patch.id and change.removed is not None and change.added is not None:
            return change.removed, change.added
        return delta(patch)

    def _roll_back(self, cascade: _Cascade, reason: str) -> None:
        """Undo the cascade's own patches, newest first (compensating patches; rules stay quiet)."""
        self._local.quiet = True
        try:
            for patch in reversed(cascade.patches):
                self.actions.undo(patch, reason, cascade.writer)
        except Exception:
            log.exception("rolling back a rule cascade failed")
        finally:
            self._local.quiet = False
        for firing in cascade.firings:
            if firing.outcome == "patched":
                firing.outcome, firing.reason = "rolled-back", reason
        self.metrics.rule_firings.labels("rolled-back").inc(len(cascade.patches))
        log.warning("rule cascade from patch %s rolled back: %s", cascade.trigger.id, reason)

    # --- after a crash -------------------------------------------------------------------------
    def recover(self, writer: Writer) -> None:
        """At start: cascades a crash interrupted (a pending reaction left in the archive) are
        rolled back and run again, if nothing else has changed their graphs since; otherwise
        their rules are recorded as failed, with the reason. Waits for a cascade another
        process of the hub is still running (its locks)."""
        pending = self.archive.pending_reactions()
        if not pending:
            return
        self.rule_set.refresh(every=0)
        for patch_id, graph in pending:
            with writer.writing(self.locks_for(graph) or {graph}):
                if patch_id not in {p for p, _g in self.archive.pending_reactions()}:
                    continue  # another process finished it while this one waited
                try:
                    self._resume(patch_id, graph, writer)
                except Exception:
                    log.exception("resuming the rules of patch %s failed", patch_id)
                finally:
                    self._reacted(patch_id)

    def _resume(self, trigger_id: str, graph: str, writer: Writer) -> None:
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
                later[g] = [r for r in history if aware(r.created) >= aware(record.created)]
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
            self.history.record([Firing(reg.rule.iri, trigger_id, graph, "immediate", 1, outcome="failed",
                                        reason=reason) for reg in self.rule_set.candidates(trigger)], now=True)
            log.error("rules of patch %s: %s", trigger_id, reason)
            return
        self._local.quiet = True
        try:
            for records in later.values():
                for r in reversed(records):
                    self.actions.undo(read_rdf_patch(r.body, self.canonicalizer),
                                      "its cascade was interrupted by a crash; it runs again", writer)
        finally:
            self._local.quiet = False
        log.warning("rules of patch %s: the cascade a crash interrupted runs again", trigger_id)
        self.react(trigger, writer)
