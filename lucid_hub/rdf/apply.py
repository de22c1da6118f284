"""Applying a patch to a graph's content: removals by MSG hash, additions with fresh blank nodes."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterable, Iterator

import pyoxigraph as ox

from lucid_hub.errors import ChainError, PatchApplyError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgsBuilder, Msg, blank_components, triple_statement
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.statements import relabel


class GraphReplica:
    """One graph's triples indexed by MSG canonical form, at a known version.

    Local blank-node labels differ from the publisher's, so a removed MSG is found by its
    canonical form; each instance keeps its local statements.
    """

    def __init__(self, triples: Iterable[ox.Quad], canonicalizer: Canonicalizer,
                 version: str | None = None) -> None:
        self.version = version
        builder = GraphMsgsBuilder()
        for q in triples:
            builder.add(q, triple_statement(q))
        self._msgs: dict[str, list[list[str]]] = {f"{s} .\n": [[s]] for s in builder.ground}
        for c in blank_components(builder.blank):
            key = canonicalizer.canonicalize(c.statements, labels=c.labels)
            self._msgs.setdefault(key, []).append(c.statements)
        # Fresh blank nodes get labels no input can have chosen by chance.
        self._fresh_prefix = f"_:n{secrets.token_hex(8)}x"
        self._counter = itertools.count()

    def apply(self, patch: Patch) -> None:
        """Apply `patch`, or raise and change nothing.

        ChainError when the patch does not continue this version; PatchApplyError when a
        removed MSG is not in the graph as often as the patch removes it.
        """
        if patch.prev != self.version:
            have = self.version or "none (empty graph)"
            want = patch.prev or "none (first patch)"
            raise ChainError(f"patch {patch.id} follows {want}, but the graph is at version {have}")
        needed: dict[str, int] = {}
        for msg in patch.removed:
            needed[msg.nquads] = needed.get(msg.nquads, 0) + 1
        for text, count in needed.items():
            held = len(self._msgs.get(text, ()))
            if held < count:
                raise PatchApplyError(
                    f"patch {patch.id} removes MSG sha256:{Msg.of(text).hash} {count}x, but the "
                    f"graph holds it {held}x; the replica has diverged"
                )
        for text, count in needed.items():
            instances = self._msgs[text]
            del instances[-count:]
            if not instances:
                del self._msgs[text]
        for msg in patch.added:
            self._msgs.setdefault(msg.nquads, []).append(self._fresh_instance(msg))
        self.version = patch.id

    def _fresh_instance(self, msg: Msg) -> list[str]:
        statements = msg.statements
        if "_:" not in msg.nquads:
            return statements
        fresh = f"{self._fresh_prefix}{next(self._counter)}b"
        return [relabel(s, lambda label: fresh + label[len("_:c14n"):]) for s in statements]

    def statements(self) -> Iterator[str]:
        """The graph's triples as canonical statements (local blank-node labels)."""
        for instances in self._msgs.values():
            for instance in instances:
                yield from instance

    def triples(self) -> Iterator[ox.Triple]:
        """The graph's triples."""
        text = "".join(f"{s} .\n" for s in self.statements())
        for q in ox.parse(text, format=ox.RdfFormat.N_TRIPLES):
            yield q.triple

    def __len__(self) -> int:
        return sum(len(i) for instances in self._msgs.values() for i in instances)
