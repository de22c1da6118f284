"""Patches as SPARQL 1.1 updates for an operator's store: removals, additions and the version
in one request; blank-node MSGs anchored by their first node or written as skolem IRIs (see
store/remote.py for why each is exact)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from lucid_hub.rdf.msg import Msg
from lucid_hub.rdf.patch import Patch, occurrences
from lucid_hub.rdf.statements import relabel
from lucid_hub.store.layout import MSG, OCCURRENCE, SYSTEM, VERSION, index_graph, instance_id

# An added blank-node MSG as written: the MSG, its occurrence, its instance id (for a skolem
# IRI) and a label unique in its request (for a blank node).
Row = tuple[Msg, int, str, str]


class UpdateRenderer:
    """Patches as SPARQL 1.1 updates for a remote store (see the module's text)."""

    def __init__(self, blank_nodes: str, skolem_base: str) -> None:
        self.skolem = blank_nodes == "skolem"
        self.skolem_base = skolem_base

    def update(self, patches: list[Patch], held: Callable[[str, str], list[int]],
               instances: Callable[[str, list[tuple[str, int]]], dict[tuple[str, int], str]] | None = None) -> str:
        """One update request for consecutive patches of one graph. `held` answers a format 1
        patch's question of which occurrences of an MSG the store holds; in `skolem` mode,
        `instances` which instance (skolem IRIs) holds an MSG's occurrence, asked once for
        the request, so that a removal names its triples (`DELETE DATA`) instead of matching
        a pattern (which a store slows down on after many deletions)."""
        graph = patches[0].graph
        state = Occurrences(graph, held)
        assigned = [state.assign(patch) for patch in patches]
        named: dict[tuple[str, int], str] = {}
        if self.skolem and instances is not None:
            needed = _held_before(patches, assigned)
            named = instances(graph, needed) if needed else {}
        operations: list[str] = []
        for number, (patch, (removed_occ, added_occ)) in enumerate(zip(patches, assigned, strict=True)):
            operations.extend(self._operations(patch, number, removed_occ, added_occ, named))
        operations.append(self.marker(graph, patches[0].prev, patches[-1].id))
        return " ;\n".join(operations)

    def _operations(self, patch: Patch, number: int, removed_occ: list[int], added_occ: list[int],
                    named: dict[tuple[str, int], str]) -> Iterator[str]:
        """The patch's operations; `named` holds the instance of each MSG occurrence known
        (and is moved on by this patch's additions and removals)."""
        g, idx = f"<{patch.graph}>", f"<{index_graph(patch.graph).value}>"
        gone = [msg.nquads[:-3] for msg in patch.removed if "_:" not in msg.nquads]
        gone_index: list[str] = []
        patterns: list[str] = []
        for msg, occurrence in zip(patch.removed, removed_occ, strict=True):
            if "_:" not in msg.nquads:
                continue
            instance = named.pop((msg.hash, occurrence), None)
            if instance is not None:
                node = self._skolem(instance)
                gone.extend(relabel(s, node) for s in msg.statements)
                gone_index.extend(_anchor(node("_:c14n0"), msg.hash, occurrence))
                continue
            pattern = " . ".join(relabel(s, _variable) for s in msg.statements)
            anchor = f'?n0 <{MSG.value}> "{msg.hash}" . ?n0 <{OCCURRENCE.value}> "{occurrence}"'
            patterns.append(f"DELETE {{ GRAPH {g} {{ {pattern} }} GRAPH {idx} {{ {anchor} }} }} "
                            f"WHERE {{ GRAPH {idx} {{ {anchor} }} GRAPH {g} {{ {pattern} }} }}")
        if gone:
            index_block = f" GRAPH {idx} {{ {' . '.join(gone_index)} }}" if gone_index else ""
            yield f"DELETE DATA {{ GRAPH {g} {{ {' . '.join(gone)} }}{index_block} }}"
        yield from patterns
        ground, rows = self.added(patch, number, added_occ)
        if self.skolem:
            named.update(((msg.hash, occurrence), instance) for msg, occurrence, instance, _label in rows)
        yield from self.additions(patch.graph, ground, rows)

    def additions(self, graph: str, ground: list[str], rows: list[Row]) -> Iterator[str]:
        """The operations that add ground statements and blank-node MSG instances (each with
        its occurrence, its instance id for a skolem IRI, and a label unique in the request)
        with their anchors."""
        g, idx = f"<{graph}>", f"<{index_graph(graph).value}>"
        if self.skolem:
            data, index = self.skolem_lines(ground, rows)
            if data:
                index_block = f" GRAPH {idx} {{ {' . '.join(index)} }}" if index else ""
                yield f"INSERT DATA {{ GRAPH {g} {{ {' . '.join(data)} }}{index_block} }}"
            return
        if ground:
            yield f"INSERT DATA {{ GRAPH {g} {{ {' . '.join(ground)} }} }}"
        if rows:
            blank_came: list[str] = []
            index_came: list[str] = []
            for msg, occurrence, _instance, label in rows:
                node = _blank(label)
                blank_came.extend(relabel(s, node) for s in msg.statements)
                index_came.extend(_anchor(node("_:c14n0"), msg.hash, occurrence))
            # Blank nodes go in a template (INSERT DATA refuses them in some stores, Virtuoso's).
            yield (f"INSERT {{ GRAPH {g} {{ {' . '.join(blank_came)} }} GRAPH {idx} {{ {' . '.join(index_came)} }} }} "
                   "WHERE {}")

    def skolem_lines(self, ground: list[str], rows: list[Row]) -> tuple[list[str], list[str]]:
        """Statements of added rows with blank nodes as skolem IRIs, and their anchors."""
        data = list(ground)
        index: list[str] = []
        for msg, occurrence, instance, _label in rows:
            node = self._skolem(instance)
            data.extend(relabel(s, node) for s in msg.statements)
            index.extend(_anchor(node("_:c14n0"), msg.hash, occurrence))
        return data, index

    def added(self, patch: Patch, number: int, added_occ: list[int]) -> tuple[list[str], list[Row]]:
        """A patch's added ground statements, and its added blank-node rows as `additions`
        takes them (the patch's `number` in its request makes the labels unique)."""
        ground = [msg.nquads[:-3] for msg in patch.added if "_:" not in msg.nquads]
        rows = [(msg, occurrence, instance_id(patch.id, row), f"p{number}r{row}")
                for row, (msg, occurrence) in enumerate(zip(patch.added, added_occ, strict=True),
                                                        start=len(patch.removed)) if "_:" in msg.nquads]
        return ground, rows

    def marker(self, graph: str, prev: str | None, version: str) -> str:
        """The operations that move the graph's version from `prev` to `version`."""
        system, marker = f"<{SYSTEM.value}>", f"<{VERSION.value}>"
        moved = f"INSERT DATA {{ GRAPH {system} {{ <{graph}> {marker} <{version}> }} }}"
        if prev is None:
            return moved
        return f"DELETE DATA {{ GRAPH {system} {{ <{graph}> {marker} <{prev}> }} }} ;\n{moved}"

    def rewrite(self, graph: str, ground: list[str], rows: list[tuple[Msg, int, str]], version: str) -> str:
        """One request that makes the store's graph exactly `ground` and the blank-node MSG
        instances of `rows` (MSG, occurrence, instance id) with their anchors, at `version`."""
        g, idx = f"<{graph}>", f"<{index_graph(graph).value}>"
        system, marker = f"<{SYSTEM.value}>", f"<{VERSION.value}>"
        operations = [
            f"DROP SILENT GRAPH {g}",
            f"DROP SILENT GRAPH {idx}",
            f"DELETE WHERE {{ GRAPH {system} {{ {g} {marker} ?v }} }}",
            *self.additions(graph, ground, [(msg, occurrence, instance, f"c{n}")
                                            for n, (msg, occurrence, instance) in enumerate(rows)]),
            self.marker(graph, None, version),
        ]
        return " ;\n".join(operations)

    def _skolem(self, instance: str) -> Callable[[str], str]:
        base = self.skolem_base
        return lambda label: f"<{base}{instance}.{label[len('_:c14n'):]}>"


def _anchor(node: str, digest: str, occurrence: int) -> list[str]:
    return [f'{node} <{MSG.value}> "{digest}"', f'{node} <{OCCURRENCE.value}> "{occurrence}"']


def _variable(label: str) -> str:
    return f"?n{label[len('_:c14n'):]}"


def _blank(prefix: str) -> Callable[[str], str]:
    return lambda label: f"_:{prefix}n{label[len('_:c14n'):]}"


class Occurrences:
    """Which occurrence each blank-node MSG row of a patch removes and adds: as a format 2
    patch names them; for a format 1 patch by the rule (rdf.patch.occurrences) on what the
    store holds, asked once per MSG and followed through the request's patches."""

    def __init__(self, graph: str, held: Callable[[str, str], list[int]]) -> None:
        self.graph = graph
        self.ask = held
        self.known: dict[str, set[int]] = {}

    def assign(self, patch: Patch) -> tuple[list[int], list[int]]:
        removed = list(patch.removed_occurrences) or [0] * len(patch.removed)
        added = list(patch.added_occurrences) or [0] * len(patch.added)
        for digest, gone_rows, came_rows in _by_hash(patch):
            held = self.known.get(digest)
            if held is None:
                held = self.known[digest] = set(self.ask(self.graph, digest)) if patch.format == 1 else set()
            if patch.format == 1:
                gone, came = occurrences(held, len(gone_rows), len(came_rows))
                for i, o in zip(gone_rows, gone, strict=True):
                    removed[i] = o
                for i, o in zip(came_rows, came, strict=True):
                    added[i] = o
            held.difference_update(removed[i] for i in gone_rows)
            held.update(added[i] for i in came_rows)
        return removed, added


def _held_before(patches: list[Patch], assigned: list[tuple[list[int], list[int]]]) -> list[tuple[str, int]]:
    """The MSG occurrences the patches remove that none of them added before: instances the
    store holds from earlier requests."""
    added: set[tuple[str, int]] = set()
    needed: list[tuple[str, int]] = []
    for patch, (removed_occ, added_occ) in zip(patches, assigned, strict=True):
        for msg, occurrence in zip(patch.removed, removed_occ, strict=True):
            key = (msg.hash, occurrence)
            if "_:" not in msg.nquads:
                continue
            if key in added:  # added earlier in the request: its instance is known by then
                added.discard(key)
            else:
                needed.append(key)
        added.update((msg.hash, o) for msg, o in zip(patch.added, added_occ, strict=True) if "_:" in msg.nquads)
    return needed


def _by_hash(patch: Patch) -> Iterable[tuple[str, list[int], list[int]]]:
    rows: dict[str, tuple[list[int], list[int]]] = {}
    for which, msgs in enumerate((patch.removed, patch.added)):
        for i, msg in enumerate(msgs):
            if "_:" in msg.nquads:
                rows.setdefault(msg.hash, ([], []))[which].append(i)
    return [(digest, gone, came) for digest, (gone, came) in rows.items()]
