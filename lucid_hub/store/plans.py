"""Planning a patch against the store: which stored instance each removed blank-node MSG is,
which occurrence each added one becomes, what the typed literals' recorded forms become, and
so the SPARQL DATA blocks that apply it (with the version marker) in one update. A `Chain`
plans patches that follow each other before any is applied (group commits, catch-up pages)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

from lucid_hub.errors import ChainError, PatchApplyError
from lucid_hub.rdf.msg import Msg
from lucid_hub.rdf.patch import Patch, occurrences
from lucid_hub.rdf.statements import terms
from lucid_hub.store import lexical
from lucid_hub.store.layout import (
    MSG,
    OCCURRENCE,
    SKOLEM_PREFIX,
    SYSTEM,
    VERSION,
    index_graph,
    instance_id,
    skolemise,
)
from lucid_hub.store.reading import GraphReader


class Plan:
    """What applying one patch deletes and inserts, as SPARQL DATA blocks."""

    def __init__(self, patch: Patch) -> None:
        self.patch = patch
        self.delete_data: list[str] = []
        self.delete_index: list[str] = []
        self.delete_lexical: list[str] = []
        self.insert_data: list[str] = []
        self.insert_index: list[str] = []
        self.insert_lexical: list[str] = []
        self.bulk_added: list[str] = []  # data lines bulk-loaded before the update (for watchers)
        # The occurrence of each removed and added row's MSG, and the typed literals' forms
        # after the patch (what a Chain needs to plan the next patch on top of this one).
        self.removed_occurrences: list[int] = []
        self.added_occurrences: list[int] = []
        self.forms: dict[tuple[str, str, str], set[str]] = {}

    def sparql(self) -> str:
        patch = self.patch
        g, idx, system = f"<{patch.graph}>", f"<{index_graph(patch.graph).value}>", f"<{SYSTEM.value}>"
        lex = f"<{lexical.lexical_graph(patch.graph).value}>"
        marker_old = f"{g} <{VERSION.value}> <{patch.prev}> ." if patch.prev else ""
        marker_new = f"{g} <{VERSION.value}> <{patch.id}> ."
        return (
            f"DELETE DATA {{ GRAPH {g} {{ {' '.join(self.delete_data)} }} "
            f"GRAPH {idx} {{ {' '.join(self.delete_index)} }} GRAPH {lex} {{ {' '.join(self.delete_lexical)} }} "
            f"GRAPH {system} {{ {marker_old} }} }} ;\n"
            f"INSERT DATA {{ GRAPH {g} {{ {' '.join(self.insert_data)} }} "
            f"GRAPH {idx} {{ {' '.join(self.insert_index)} }} GRAPH {lex} {{ {' '.join(self.insert_lexical)} }} "
            f"GRAPH {system} {{ {marker_new} }} }}"
        )


class Planner:
    """Makes plans on the graphs as the store holds them (or as a chain leaves them)."""

    def __init__(self, read: GraphReader, version_of: Callable[[str], str | None]) -> None:
        self.read = read
        self.version_of = version_of

    def plan(self, patch: Patch, version: str | None = None, chain: Chain | None = None) -> Plan:
        """What applying the patch deletes and inserts. Removals first (each must be held),
        then additions; statements with typed literals go through their recorded forms
        (lexical.Forms), the others straight to the store. With a `chain`, on the graph as
        the chain's patches planned so far leave it."""
        current = version if version is not None else self.version_of(patch.graph)
        if current != patch.prev:
            raise ChainError(f"store holds {patch.graph} at {current}, patch {patch.id} follows {patch.prev}")
        plan = Plan(patch)
        removed: list[str] = []  # statements as stored (skolem IRIs), literals as published
        added: list[str] = []  # statements with a typed literal
        held_of: Callable[[str], dict[int, str]]
        if chain is not None:
            held_of = chain.held
        elif current is None:  # a new graph holds nothing (a clone's first patch: 25k lookups saved)
            held_of = _nothing_held
        else:
            held_of = functools.partial(self.read.held, patch.graph)
        removed_occ, added_occ, held = _occurrences(patch, held_of)
        plan.removed_occurrences, plan.added_occurrences = removed_occ, added_occ
        for msg, occurrence in zip(patch.removed, removed_occ, strict=True):
            if "_:" not in msg.nquads:
                removed.append(msg.nquads[:-3])
                continue
            instance_iri = held[msg.hash][occurrence]
            instance = instance_iri[len(SKOLEM_PREFIX):]
            removed.extend(skolemise(s, instance) for s in msg.statements)
            plan.delete_index.append(f'<{instance_iri}> <{MSG.value}> "{msg.hash}" .')
            plan.delete_index.append(f'<{instance_iri}> <{OCCURRENCE.value}> "{occurrence}" .')
        # Added statements without a typed literal go straight to the plan (the hot loop of a
        # clone's first patch: one test and one slice a row); typed ones through their forms.
        typed, insert = lexical.typed, plan.insert_data
        for row, (msg, occurrence) in enumerate(zip(patch.added, added_occ, strict=True),
                                                start=len(patch.removed)):
            nquads = msg.nquads
            if "_:" not in nquads:
                if typed(nquads[:-3]):
                    added.append(nquads[:-3])
                else:
                    insert.append(nquads[:-1])
                continue
            instance = instance_id(patch.id, row)
            for statement in (skolemise(s, instance) for s in msg.statements):
                if typed(statement):
                    added.append(statement)
                else:
                    insert.append(f"{statement} .")
            plan.insert_index.append(f'<{SKOLEM_PREFIX}{instance}> <{MSG.value}> "{msg.hash}" .')
            plan.insert_index.append(f'<{SKOLEM_PREFIX}{instance}> <{OCCURRENCE.value}> "{occurrence}" .')
        natives = lexical.NATIVES.of(terms(s)[2] for s in itertools.chain(removed, added) if typed(s))
        forms = lexical.Forms(self.read.raw, patch.graph, natives, exists=current is not None,
                              known=chain.forms if chain is not None else None)
        for statement in removed:
            if typed(statement):
                forms.remove(statement, patch.id)
            elif "<urn:lucid-hub:bnode:" in statement or (
                    chain.contains(statement) if chain is not None else self.read.contains(patch.graph, statement)):
                plan.delete_data.append(f"{statement} .")
            else:
                raise PatchApplyError(f"patch {patch.id} removes a triple the graph does not hold: {statement}")
        for statement in added:  # (typed, all of them)
            forms.add(statement)
        delete, insert, forget, record = forms.changes()
        plan.delete_data.extend(f"{s} ." for s in delete)
        plan.insert_data.extend(f"{s} ." for s in insert)
        plan.delete_lexical.extend(f"{s} ." for s in forget)
        plan.insert_lexical.extend(f"{s} ." for s in record)
        if chain is not None:  # (what the chain's next plan starts from)
            plan.forms = forms.current()
        return plan


def _occurrences(patch: Patch, held_of: Callable[[str], dict[int, str]]
                 ) -> tuple[list[int], list[int], dict[str, dict[int, str]]]:
    """Which instance each blank-node MSG row removes, and which occurrence each added
    one becomes: as a format-2 patch names them (each must fit what the graph holds),
    or by the rule (rdf.patch.occurrences) for a format-1 patch. Also the instances held
    of each of the patch's blank-node MSGs, by hash and occurrence."""
    removed_occ = list(patch.removed_occurrences) or [0] * len(patch.removed)
    added_occ = list(patch.added_occurrences) or [0] * len(patch.added)
    removing, adding = _rows_by_hash(patch.removed), _rows_by_hash(patch.added)
    instances: dict[str, dict[int, str]] = {}
    for digest in removing.keys() | adding.keys():
        held = instances[digest] = held_of(digest)
        gone_rows, came_rows = removing.get(digest, []), adding.get(digest, [])
        if patch.format == 1:
            gone, came = occurrences(held, len(gone_rows), len(came_rows))
            for occs, rows, assigned in ((removed_occ, gone_rows, gone), (added_occ, came_rows, came)):
                for i, occurrence in zip(rows, assigned, strict=True):
                    occs[i] = occurrence
            continue
        gone = [removed_occ[i] for i in gone_rows]
        came = [added_occ[i] for i in came_rows]
        if any(o not in held for o in gone):
            raise PatchApplyError(f"patch {patch.id} removes occurrences {gone} of MSG sha256:{digest}; "
                                  f"the graph holds {sorted(held)}: the replica has diverged")
        if any(o in held for o in came):
            raise PatchApplyError(f"patch {patch.id} adds occurrences {came} of MSG sha256:{digest}; "
                                  f"the graph holds {sorted(held)} already: the replica has diverged")
    return removed_occ, added_occ, instances


def _nothing_held(_digest: str) -> dict[int, str]:
    return {}


def _rows_by_hash(msgs: tuple[Msg, ...]) -> dict[str, list[int]]:
    """The rows of each blank-node MSG, by hash (one pass: a patch can have many)."""
    rows: dict[str, list[int]] = {}
    for i, msg in enumerate(msgs):
        if "_:" in msg.nquads:
            rows.setdefault(msg.hash, []).append(i)
    return rows


class Chain:
    """Plans of patches of one graph that follow each other, made before any is applied (a
    group commit, a mirror's catch-up page): each on the graph as the patches before it leave
    it. What they changed is kept here — ground triples, blank-node MSG instances by hash
    and occurrence, typed literals' recorded forms — and the store answers the rest."""

    def __init__(self, planner: Planner, graph: str, version: str | None) -> None:
        self.planner = planner
        self.graph = graph
        self.version = version
        self._new = version is None  # a graph the store does not hold yet
        self.planned: list[tuple[Patch, Plan]] = []
        self.rows = 0
        self._state: dict[str, bool] = {}
        self._held: dict[str, dict[int, str]] = {}
        self.forms: dict[tuple[str, str, str], set[str]] = {}

    def __bool__(self) -> bool:
        return bool(self.planned)

    def plan(self, patch: Patch) -> Plan:
        """Plan the next patch (raising what `check` raises, with nothing planned)."""
        plan = self.planner.plan(patch, self.version, self)
        for msg, occurrence in zip(patch.removed, plan.removed_occurrences, strict=True):
            if "_:" in msg.nquads:
                del self.held(msg.hash)[occurrence]
            else:
                self._state[msg.nquads[:-3]] = False
        for row, (msg, occurrence) in enumerate(zip(patch.added, plan.added_occurrences, strict=True),
                                                start=len(patch.removed)):
            if "_:" in msg.nquads:
                self.held(msg.hash)[occurrence] = f"{SKOLEM_PREFIX}{instance_id(patch.id, row)}"
            else:
                self._state[msg.nquads[:-3]] = True
        self.forms.update(plan.forms)
        self.planned.append((patch, plan))
        self.rows += len(patch.removed) + len(patch.added)
        self.version = patch.id
        return plan

    def touched(self, statement: str) -> bool | None:
        """Whether the planned patches leave the ground triple in the graph (None: untouched)."""
        return self._state.get(statement)

    def contains(self, statement: str) -> bool:
        found = self._state.get(statement)
        return found if found is not None else self.planner.read.contains(self.graph, statement)

    def held(self, digest: str) -> dict[int, str]:
        """The instances of an MSG the graph holds after the planned patches, by occurrence."""
        found = self._held.get(digest)
        if found is None:
            found = self._held[digest] = {} if self._new else dict(self.planner.read.held(self.graph, digest))
        return found
