"""The in-process diff engine: MSG multisets of both versions, then multiset difference.

Large inputs are read concurrently: this process reads the old version while one child
process reads the new one (parsing is ~85% of a bulk diff, and it is CPU-bound).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pyoxigraph as ox

from lucid_hub import gcpause
from lucid_hub.diff import GraphChange
from lucid_hub.errors import InputError, LucidError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs, Msg, by_hash, graph_msgs, split_graphs
from lucid_hub.rdf.syntax import format_of_path, read_file

# Measured break-even of the child process (≈0.1 s to start and hand back): ~6 MB per file
# of ground triples, much less for blank-node-heavy data (7 MB: 1.9 s instead of 2.8 s).
PARALLEL_BYTES = 4 * 1024 * 1024


def diff_msgs(old: GraphMsgs, new: GraphMsgs) -> tuple[tuple[Msg, ...], tuple[Msg, ...]]:
    """(removed, added): multiset differences old - new and new - old, sorted by hash."""
    removed = [Msg.of(f"{s} .\n") for s in old.ground - new.ground]
    added = [Msg.of(f"{s} .\n") for s in new.ground - old.ground]
    for text, n in (old.blank - new.blank).items():
        removed.extend([Msg.of(text)] * n)
    for text, n in (new.blank - old.blank).items():
        added.extend([Msg.of(text)] * n)
    return tuple(by_hash(removed)), tuple(by_hash(added))


def diff_graph(old: Iterable[ox.Quad], new: Iterable[ox.Quad], graph: str,
               canonicalizer: Canonicalizer) -> GraphChange:
    """The change of one graph whose two versions are given as quads (graph names ignored)."""
    removed, added = diff_msgs(graph_msgs(old, canonicalizer), graph_msgs(new, canonicalizer))
    return GraphChange(graph, removed, added)


def diff_graph_maps(before: dict[str, GraphMsgs], after: dict[str, GraphMsgs]) -> list[GraphChange]:
    """Changes of every graph that differs between two {graph IRI: MSGs} maps, by IRI."""
    changes = []
    for graph in sorted(before.keys() | after.keys()):
        removed, added = diff_msgs(before.get(graph, GraphMsgs()), after.get(graph, GraphMsgs()))
        if removed or added:
            changes.append(GraphChange(graph, removed, added))
    return changes


def diff_datasets(old: Iterable[ox.Quad], new: Iterable[ox.Quad], canonicalizer: Canonicalizer,
                  *, default_graph: str | None = None) -> list[GraphChange]:
    """Changes of each named graph that differs; default-graph triples belong to `default_graph`."""
    before = {g: b.build(canonicalizer) for g, b in split_graphs(old, default_graph, "old").items()}
    after = {g: b.build(canonicalizer) for g, b in split_graphs(new, default_graph, "new").items()}
    return diff_graph_maps(before, after)


def file_graph_msgs(path: Path, fmt: str | None, default_graph: str | None,
                    canonicalizer: Canonicalizer,
                    progress: Callable[[int], None] | None = None) -> dict[str, GraphMsgs]:
    """{graph IRI: MSGs} of an RDF file; `progress` gets the bytes read as it goes."""
    rdf_fmt = format_of_path(path, fmt)
    # Triple-term checks happen on each quad's text in split_graphs, more cheaply.
    quads = read_file(path, fmt, check_terms=False, progress=progress)
    with gcpause.paused_for_bytes(path.stat().st_size):  # every MSG of the file lives until it is read
        builders = split_graphs(quads, default_graph, str(path), triples_only=not rdf_fmt.supports_datasets)
        return {graph: builder.build(canonicalizer) for graph, builder in builders.items()}


class _ChildReader:
    """Reads one RDF file into {graph: MSGs} in a child Python, handing the result back pickled.

    A plain child process rather than multiprocessing: spawn and forkserver re-import the
    caller's __main__ (which breaks callers without a main guard), and fork is unsafe in a
    threaded server.
    """

    def __init__(self, path: Path, fmt: str | None, default_graph: str | None,
                 canonicalizer: Canonicalizer) -> None:
        fd, name = tempfile.mkstemp(prefix="lucid-diff-", suffix=".pickle")
        os.close(fd)
        self.result_path = Path(name)
        args = json.dumps([str(path), fmt, default_graph, canonicalizer.timeout,
                           canonicalizer.memory_mb, name])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from lucid_hub.diff.local import _child_main; _child_main()", args],
            stdin=subprocess.DEVNULL,
        )

    def result(self) -> dict[str, GraphMsgs]:
        try:
            code = self.proc.wait()
            data = self.result_path.read_bytes()
            if code != 0 or not data:
                raise LucidError(f"the diff child process failed (exit code {code})")
            return _decode_result(data)
        finally:
            self.result_path.unlink(missing_ok=True)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.result_path.unlink(missing_ok=True)


def _child_main() -> None:
    path, fmt, default_graph, timeout, memory_mb, out = json.loads(sys.argv[1])
    try:
        with Canonicalizer(timeout, memory_mb) as canonicalizer:
            data = _encode_result(file_graph_msgs(Path(path), fmt, default_graph, canonicalizer))
    except LucidError as exc:
        data = b"E" + pickle.dumps(exc)
    Path(out).write_bytes(data)


# The result crosses as: a pickle of everything but the ground statements, then those as
# newline-separated text (canonical statements hold no newline). Pickling a million-string
# set costs twice as much on each side.
def _encode_result(graphs: dict[str, GraphMsgs]) -> bytes:
    head = pickle.dumps({g: (len(m.ground), m.blank) for g, m in graphs.items()})
    body = "\n".join(s for m in graphs.values() for s in m.ground).encode()
    return b"R" + len(head).to_bytes(8, "big") + head + body


def _decode_result(data: bytes) -> dict[str, GraphMsgs]:
    # Our own child wrote these bytes a moment ago into a file only we know of.
    if data[:1] == b"E":
        raise pickle.loads(data[1:])  # noqa: S301
    size = int.from_bytes(data[1:9], "big")
    head = pickle.loads(data[9 : 9 + size])  # noqa: S301
    statements = data[9 + size :].decode().split("\n") if len(data) > 9 + size else []
    graphs, start = {}, 0
    for graph, (count, blank) in head.items():
        graphs[graph] = GraphMsgs(set(statements[start : start + count]), blank)
        start += count
    return graphs


class LocalDiffEngine:
    """Diffs two RDF files on this machine."""

    def __init__(self, canonicalizer: Canonicalizer, parallel_bytes: int = PARALLEL_BYTES) -> None:
        self.canonicalizer = canonicalizer
        self.parallel_bytes = parallel_bytes

    def diff_files(self, old: Path, new: Path, *, default_graph: str | None = None,
                   fmt: str | None = None) -> list[GraphChange]:
        c = self.canonicalizer
        for path in (old, new):
            if path.is_dir():
                raise InputError(f"{path} is a directory: the local engine diffs two files "
                                 "(directories of snapshot files need --engine spark)")
        if self._parallel(old, new):
            format_of_path(new, fmt)  # fail before starting a child
            child = _ChildReader(new, fmt, default_graph, c)
            try:
                before = file_graph_msgs(old, fmt, default_graph, c)
            except BaseException:
                child.stop()
                raise
            after = child.result()
        else:
            before = file_graph_msgs(old, fmt, default_graph, c)
            after = file_graph_msgs(new, fmt, default_graph, c)
        return diff_graph_maps(before, after)

    def _parallel(self, old: Path, new: Path) -> bool:
        try:
            sizes = (old.stat().st_size, new.stat().st_size)
        except OSError:
            return False  # reading will report the missing file
        return (os.cpu_count() or 1) > 1 and min(sizes) >= self.parallel_bytes
