"""Applying a patch to a graph's content: removals by MSG hash, additions with fresh blank nodes."""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyoxigraph as ox

from lucid_hub.errors import ChainError, PatchApplyError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import (
    LABEL_HASH_DIGITS,
    GraphMsgs,
    GraphMsgsBuilder,
    Msg,
    blank_components,
    chain_label,
    msg_hash,
    parse_chain_label,
    triple_statement,
)
from lucid_hub.rdf.patch import Patch, occurrences
from lucid_hub.rdf.statements import relabel, statement_quads


@dataclass
class ReplicaChange:
    """The MSG instances a patch removed and added: (MSG hash, occurrence, statements)."""

    gone: list[tuple[str, int, list[str]]] = field(default_factory=list)
    came: list[tuple[str, int, list[str]]] = field(default_factory=list)


class GraphReplica:
    """One graph's triples indexed by MSG canonical form and occurrence, at a known version.

    A removed MSG is found by its canonical form (and, in a format-2 patch, its occurrence);
    each instance's blank nodes carry the labels format-2 patches give them (`_:hHASHoOCCbN`),
    whatever labels the graph was read with.
    """

    def __init__(self, triples: Iterable[ox.Quad], canonicalizer: Canonicalizer,
                 version: str | None = None) -> None:
        self.version = version
        builder = GraphMsgsBuilder()
        for q in triples:
            builder.add(q, triple_statement(q))
        self._msgs: dict[str, dict[int, list[str]]] = {f"{s} .\n": {0: [s]} for s in builder.ground}
        unlabelled: list[str] = []
        for c in blank_components(builder.blank):
            text = canonicalizer.canonicalize(c.statements, labels=c.labels)
            held = self._msgs.setdefault(text, {})
            # A copy read from a hub carries its occurrence in its labels (_:hHASHoOCCbN)
            named = {parsed[:2] if parsed else None for parsed in map(parse_chain_label, c.labels)}
            msg = Msg.of(text)
            if len(named) == 1 and None not in named:
                ((prefix, occurrence),) = named  # type: ignore[misc]
                if prefix == msg.hash[:LABEL_HASH_DIGITS] and occurrence not in held:
                    held[occurrence] = _instance(msg, occurrence)
                    continue
            unlabelled.append(text)
        for text in unlabelled:  # the others take the lowest free occurrences, in order
            held = self._msgs[text]
            occurrence = next(o for o in itertools.count() if o not in held)
            held[occurrence] = _instance(Msg.of(text), occurrence)
        # The blank-node MSGs' canonical forms by hash (for `held`).
        self._texts = {Msg.of(text).hash: text for text in self._msgs if "_:" in text}

    def apply(self, patch: Patch) -> ReplicaChange:
        """Apply `patch`, or raise and change nothing; what it took and gave, per instance.

        ChainError when the patch does not continue this version; PatchApplyError when a
        removed MSG is not in the graph as often as the patch removes it (or, in a format-2
        patch, not at the occurrences it names, or an added one is there already).
        """
        if patch.prev != self.version:
            have = self.version or "none (empty graph)"
            want = patch.prev or "none (first patch)"
            raise ChainError(f"patch {patch.id} follows {want}, but the graph is at version {have}")
        removing = Counter(m.nquads for m in patch.removed)
        adding = Counter(m.nquads for m in patch.added)
        for text, count in removing.items():
            copies = len(self._msgs.get(text, ()))
            if copies < count:
                raise PatchApplyError(
                    f"patch {patch.id} removes MSG sha256:{Msg.of(text).hash} {count}x, but the "
                    f"graph holds it {copies}x; the replica has diverged"
                )
        if patch.format == 1:
            plans = {text: occurrences(self._msgs.get(text, {}), removing[text], adding[text])
                     for text in removing.keys() | adding.keys()}
            gone = {text: plan[0] for text, plan in plans.items()}
            came = {text: plan[1] for text, plan in plans.items()}
        else:
            gone, came = _named(patch.removed, patch.removed_occurrences), _named(patch.added, patch.added_occurrences)
            for text, occs in gone.items():
                if any(o not in self._msgs.get(text, {}) for o in occs):
                    raise PatchApplyError(f"patch {patch.id} removes occurrences {occs} of MSG "
                                          f"sha256:{Msg.of(text).hash} the graph does not hold; "
                                          "the replica has diverged")
            for text, occs in came.items():
                if any(o in self._msgs.get(text, {}) for o in occs):
                    raise PatchApplyError(f"patch {patch.id} adds occurrences {occs} of MSG "
                                          f"sha256:{Msg.of(text).hash} the graph holds; the replica has diverged")
        msgs = {m.nquads: m for m in (*patch.removed, *patch.added)}
        change = ReplicaChange()
        for text, occs in gone.items():
            if not occs:
                continue
            instances = self._msgs[text]
            for occurrence in occs:
                change.gone.append((msgs[text].hash, occurrence, instances.pop(occurrence)))
            if not instances:
                del self._msgs[text]
                self._texts.pop(msgs[text].hash, None)
        for text, occs in came.items():
            msg = msgs[text]
            for occurrence in occs:
                instance = self._msgs.setdefault(text, {})[occurrence] = _instance(msg, occurrence)
                change.came.append((msg.hash, occurrence, instance))
            if occs and "_:" in text:
                self._texts[msg.hash] = text
        self.version = patch.id
        return change

    def apply_ground(self, patch_id: str, prev: str | None, removed: list[str], added: list[str]) -> ReplicaChange:
        """`apply` for a patch of ground statements only (canonical, as the hub's archive holds
        them): no MSG to canonicalise, so none is parsed — what rebuilding a graph's event
        stream from its archive spends its time on otherwise (bench streams). Same checks."""
        if prev != self.version:
            raise ChainError(f"patch {patch_id} follows {prev or 'none (first patch)'}, but the graph is at "
                             f"version {self.version or 'none (empty graph)'}")
        texts = [f"{s} .\n" for s in removed]
        missing = next((t for t in texts if t not in self._msgs), None)
        if missing is not None or len(set(texts)) != len(texts):
            raise PatchApplyError(f"patch {patch_id} removes a statement the graph does not hold: "
                                  f"{(missing or texts[0]).strip()[:200]}; the replica has diverged")
        change = ReplicaChange()
        for text, statement in zip(texts, removed, strict=True):
            del self._msgs[text]
            change.gone.append((msg_hash(text), 0, [statement]))
        for statement in added:
            text = f"{statement} .\n"
            if text in self._msgs:
                raise PatchApplyError(f"patch {patch_id} adds a statement the graph holds: {statement[:200]}; "
                                      "the replica has diverged")
            self._msgs[text] = {0: [statement]}
            change.came.append((msg_hash(text), 0, [statement]))
        self.version = patch_id
        return change

    def held(self, msg_hash: str) -> list[int]:
        """The occurrences of an MSG the graph holds (for building a format-2 patch)."""
        text = self._texts.get(msg_hash)
        return [] if text is None else list(self._msgs.get(text, ()))

    def statements(self) -> Iterator[str]:
        """The graph's triples as canonical statements (blank nodes as format 2 labels them)."""
        for held in self._msgs.values():
            for instance in held.values():
                yield from instance

    def triples(self) -> Iterator[ox.Triple]:
        """The graph's triples."""
        for q in statement_quads(self.statements()):
            yield q.triple

    def __len__(self) -> int:
        return sum(len(i) for held in self._msgs.values() for i in held.values())


def apply_to_msgs(msgs: GraphMsgs, patch: Patch) -> None:
    """Apply a patch to a graph's MSG multiset, in place: its removed MSGs go (one copy
    each), its added ones come. The one way MSG state follows a chain (publisher's cache,
    policy graph); the caller holds `msgs` at `patch.prev`."""
    for msg in patch.removed:
        if "_:" in msg.nquads:
            msgs.blank[msg.nquads] -= 1
            if msgs.blank[msg.nquads] <= 0:
                del msgs.blank[msg.nquads]
        else:
            msgs.ground.discard(msg.nquads[:-3])
    for msg in patch.added:
        if "_:" in msg.nquads:
            msgs.blank[msg.nquads] += 1
        else:
            msgs.ground.add(msg.nquads[:-3])


def _instance(msg: Msg, occurrence: int) -> list[str]:
    """The statements of one copy of an MSG, blank nodes labelled for that copy."""
    if "_:" not in msg.nquads:
        return msg.statements
    rename = functools.partial(chain_label, msg.hash, occurrence)
    return [relabel(s, rename) for s in msg.statements]


def _named(msgs: tuple[Msg, ...], occs: tuple[int, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for msg, occurrence in zip(msgs, occs, strict=True):
        out.setdefault(msg.nquads, []).append(occurrence)
    return out
