"""RDFC-1.0 canonicalisation (pyoxigraph's) with a bound on the work it may take.

pyoxigraph passes the W3C suite but has no work limit: a 10-clique of blank nodes runs
for minutes. Structures that are provably cheap run in process; the rest run in a guard
process that is killed at the deadline, so a worker never hangs.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyoxigraph as ox

from lucid_hub.errors import CanonicalizationLimitExceeded, InputError
from lucid_hub.guard import Frame, GuardFailed, GuardProcess
from lucid_hub.rdf.statements import blank_labels, document, relabel, terms

ALGORITHMS: dict[str, ox.CanonicalizationAlgorithm] = {
    "sha256": ox.CanonicalizationAlgorithm.RDFC_1_0,
    "sha384": ox.CanonicalizationAlgorithm.RDFC_1_0_SHA_384,
}

# Measured with pyoxigraph 0.5 on the reference machine: the worst case for n blank nodes
# (an n-clique) takes 31 ms at n=6, 0.3 s at n=7, 4 s at n=8 and 62 s at n=9.
SAFE_BLANK_NODES = 6


def canonicalize_document(nquads: str, algorithm: str = "sha256") -> str:
    """RDFC-1.0 canonical N-Quads of an N-Quads document, computed in this process.

    No work limit: call it only for structures `needs_guard` clears, or via `Canonicalizer`.
    """
    dataset = ox.Dataset(ox.parse(nquads, format=ox.RdfFormat.N_QUADS))
    dataset.canonicalize(ALGORITHMS[algorithm])
    return "".join(sorted(f"{q} .\n" for q in dataset))


def needs_guard(statements: Sequence[str], safe_blank_nodes: int = SAFE_BLANK_NODES) -> bool:
    """Whether canonicalising these statements could take more than polynomial work.

    RDFC-1.0 only enters its exponential Hash N-Degree Quads step for blank nodes whose
    first-degree hashes collide. A blank node's first-degree hash is a function of its
    statements with itself as `_:a` and every other blank node as `_:z`; comparing those
    signatures is the same test without hashing.
    """
    mentions: dict[str, list[tuple[str, ...]]] = {}
    for statement in statements:
        parts = terms(statement)
        for label in {t for t in parts if t.startswith("_:")}:
            sig = tuple(("a" if t == label else "z") if t.startswith("_:") else t for t in parts)
            mentions.setdefault(label, []).append(sig)
    if len(mentions) <= safe_blank_nodes:
        return False
    seen: set[tuple[tuple[str, ...], ...]] = set()
    for sigs in mentions.values():
        key = tuple(sorted(sigs))
        if key in seen:
            return True
        seen.add(key)
    return False


class Canonicalizer:
    """Canonicalises blank-node structures within a time and memory budget.

    Thread-safe. Cheap structures run in process; the others are sent to one long-lived
    guard process, which is killed and replaced when it overruns `timeout` seconds.
    """

    def __init__(self, timeout: float = 5.0, memory_mb: int = 2048) -> None:
        self.timeout = timeout
        self.memory_mb = memory_mb
        self._lock = threading.Lock()
        self._guard: GuardProcess | None = None
        # Canonicalisations stopped at their budget (for the operator's metrics).
        self.failures = 0

    def canonicalize(self, statements: Sequence[str], algorithm: str = "sha256",
                     labels: set[str] | None = None) -> str:
        """The RDFC-1.0 canonical N-Quads document of the statements (N-Quads without ` .`).

        `labels`, the statements' blank-node labels, may be passed when already known.
        Raises CanonicalizationLimitExceeded when it would take more than the budget.
        """
        if algorithm not in ALGORITHMS:
            raise InputError(f"unknown canonicalisation hash {algorithm!r} (sha256 or sha384)")
        statements = list(dict.fromkeys(statements))  # a dataset is a set
        if labels is None:
            labels = {label for s in statements for label in blank_labels(s)}
        if not labels:
            return document(statements)  # pyoxigraph's statement text is already canonical
        if len(labels) == 1:
            # One blank node: RDFC-1.0 can only issue it _:c14n0, so relabelling is exact.
            return document([relabel(s, lambda _: "_:c14n0") for s in statements])
        nquads = "".join(f"{s} .\n" for s in statements)
        if len(labels) <= SAFE_BLANK_NODES or not needs_guard(statements):
            return canonicalize_document(nquads, algorithm)
        with self._lock:
            if self._guard is None or not self._guard.alive():
                self._guard = GuardProcess("lucid_hub.rdf.canon:guard_canonicalize", self.memory_mb)
            guard = self._guard
            try:
                answer = guard.call(Frame({"algorithm": algorithm}, nquads.encode()), self.timeout)
                if answer.header.get("status") != "ok":
                    raise GuardFailed(f"failed: {answer.header.get('message')}")
                return answer.body.decode()
            except GuardFailed as failure:
                guard.kill()
                self._guard = None
                self.failures += 1
                raise CanonicalizationLimitExceeded(
                    f"canonicalising a blank-node component of {len(labels)} blank nodes and "
                    f"{len(statements)} statements {failure.reason}; such structures (e.g. large "
                    "cliques of blank nodes) cannot be published"
                ) from None

    def close(self) -> None:
        """Stop the guard process, if one runs."""
        with self._lock:
            if self._guard is not None:
                self._guard.kill()
                self._guard = None

    def __enter__(self) -> Canonicalizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def guard_canonicalize(request: Frame) -> Frame:
    """In the guard process: canonicalise the N-Quads document of `request`."""
    return Frame({"status": "ok"}, canonicalize_document(request.body.decode(), request.header["algorithm"]).encode())
