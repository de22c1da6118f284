"""RDFC-1.0 canonicalisation (pyoxigraph's) with a bound on the work it may take.

pyoxigraph passes the W3C suite but has no work limit: a 10-clique of blank nodes runs
for minutes. Structures that are provably cheap run in process; the rest run in a guard
process that is killed at the deadline, so a worker never hangs.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

import pyoxigraph as ox

from lucid_hub.errors import CanonicalizationLimitExceeded, InputError
from lucid_hub.rdf.statements import blank_labels, document, relabel, terms

ALGORITHMS: dict[str, ox.CanonicalizationAlgorithm] = {
    "sha256": ox.CanonicalizationAlgorithm.RDFC_1_0,
    "sha384": ox.CanonicalizationAlgorithm.RDFC_1_0_SHA_384,
}

# Measured with pyoxigraph 0.5 on the reference machine: the worst case for n blank nodes
# (an n-clique) takes 31 ms at n=6, 0.3 s at n=7, 4 s at n=8 and 62 s at n=9.
SAFE_BLANK_NODES = 6
# Seconds a new guard process may take to start, apart from the work limit.
STARTUP_TIMEOUT = 60.0


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
        self._guard: _GuardProcess | None = None
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
                self._guard = _GuardProcess(self.memory_mb)
            guard = self._guard
            try:
                return guard.canonicalize(nquads.encode(), algorithm, self.timeout)
            except _GuardFailed as failure:
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


class _GuardFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# Hand-written rather than multiprocessing/concurrent.futures: neither can kill one hung
# call and go on, and a plain child process avoids re-importing the caller's __main__.
class _GuardProcess:
    """A child Python running `_guard_main`, speaking length-prefixed frames on stdin/out."""

    def __init__(self, memory_mb: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from lucid_hub.rdf.canon import _guard_main; _guard_main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "LUCID_GUARD_MEMORY_MB": str(memory_mb)},
        )
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def canonicalize(self, nquads: bytes, algorithm: str, timeout: float) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if not self.ready:
            # Start-up (interpreter, imports) is not the job's work: wait for it separately.
            _read_frame(self.proc.stdout, time.monotonic() + STARTUP_TIMEOUT, STARTUP_TIMEOUT)
            self.ready = True
        deadline = time.monotonic() + timeout
        try:
            _write_frame(self.proc.stdin, algorithm.encode() + b"\n" + nquads)
        except BrokenPipeError:
            raise _GuardFailed("failed: the guard process stopped") from None
        status, payload = _read_frame(self.proc.stdout, deadline, timeout)
        if status == b"ok":
            return payload.decode()
        raise _GuardFailed(f"failed: {payload.decode(errors='replace')}")


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(struct.pack(">Q", len(payload)) + payload)
    stream.flush()


def _read_exactly(stream: IO[bytes], size: int, deadline: float, timeout: float) -> bytes:
    fd = stream.fileno()
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            raise _GuardFailed(f"exceeded the work limit of {timeout:g} s")
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise _GuardFailed("exceeded the memory limit or crashed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: IO[bytes], deadline: float, timeout: float) -> tuple[bytes, bytes]:
    (size,) = struct.unpack(">Q", _read_exactly(stream, 8, deadline, timeout))
    body = _read_exactly(stream, size, deadline, timeout)
    status, _, payload = body.partition(b"\n")
    return status, payload


def _guard_main() -> None:
    """Entry point of the guard process: canonicalise documents until stdin closes."""
    import resource

    limit = int(os.environ.get("LUCID_GUARD_MEMORY_MB", "2048")) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    _write_frame(stdout, b"ready\n")
    while True:
        header = stdin.read(8)
        if len(header) < 8:
            return
        (size,) = struct.unpack(">Q", header)
        body = stdin.read(size)
        algorithm, _, nquads = body.partition(b"\n")
        try:
            result = canonicalize_document(nquads.decode(), algorithm.decode())
            _write_frame(stdout, b"ok\n" + result.encode())
        except Exception as exc:  # reported to the parent, which raises its own error
            _write_frame(stdout, b"error\n" + str(exc).encode())
