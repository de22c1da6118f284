"""Diff engines: two versions of a dataset in, the changed MSGs of each graph out.

`local` runs in process (small changes, and the reference); a Spark engine for bulk
snapshots gives byte-identical results through the same `lucid_hub.rdf` functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from lucid_hub.rdf.metadata import Metadata
from lucid_hub.rdf.msg import Msg
from lucid_hub.rdf.patch import Patch


@dataclass(frozen=True)
class GraphChange:
    """The MSGs one graph lost and gained between two versions (sorted by hash)."""

    graph: str
    removed: tuple[Msg, ...]
    added: tuple[Msg, ...]

    @property
    def is_empty(self) -> bool:
        return not self.removed and not self.added

    def to_patch(self, prev: str | None, *, author: str = "", message: str = "",
                 created: datetime | None = None, held: Callable[[str], Iterable[int]] | None = None,
                 metadata: Metadata = ()) -> Patch:
        """The unsigned patch that makes this change on top of version `prev`: format 2 with
        `held` (the occurrences of an MSG the graph holds, rdf.patch; format 3 with
        `metadata`), else format 1."""
        return Patch.build(self.graph, prev, list(self.removed), list(self.added),
                           author=author, message=message, created=created, held=held, metadata=metadata)


class DiffEngine(Protocol):
    """Computes the per-graph changes between two snapshots given as RDF files."""

    def diff_files(self, old: Path, new: Path, *, default_graph: str | None = None,
                   fmt: str | None = None) -> list[GraphChange]:
        """Changes of every graph that differs, sorted by graph IRI; unchanged graphs omitted."""
        ...
