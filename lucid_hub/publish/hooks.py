"""The publisher's hooks port: what reacts to each archived patch (the rule cascade), given to
the publisher at construction. The reaction is handed the writer on each call, so whatever
reacts never holds the publisher: the parts form no cycle, and the import graph shows it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from lucid_hub.archive import Precondition
from lucid_hub.diff import GraphChange
from lucid_hub.publish.view import GraphView
from lucid_hub.rdf.metadata import Metadata
from lucid_hub.rdf.patch import Patch


class Writer(Protocol):
    """What a reaction may write through (the publisher)."""

    def publish(self, graph: str, compute: Callable[[GraphView], GraphChange | None], *, author: str,
                message: str, if_match: Precondition | None = None, expect_prev: bool = False,
                prev: str | None = None, unchanged: Callable[[str | None], None] | None = None,
                metadata: Metadata = ()) -> Patch | None: ...

    def publish_all(self, changes: Mapping[str, Callable[[GraphView], GraphChange | None]],
                    versions: dict[str, str | None], *, author: str, message: str) -> list[Patch]: ...

    def writing(self, graphs: Iterable[str]) -> contextlib.AbstractContextManager[None]: ...


class Hooks(Protocol):
    """What the publisher asks of whatever reacts to its patches.

    - `locks_for(graph)`: the graphs a reaction to a patch of `graph` can write, with `graph`
      itself (empty: nothing reacts); the publisher locks them all before the patch.
    - `will_react(patch)`: asked before the patch is archived; True records a pending reaction
      with it, so that a crash before the reaction ends is seen at start.
    - `react(patch, writer)`: after the patch is archived and applied, under those locks; what
      it publishes goes through `writer` (and is reacted to in turn). It must not raise.
    """

    def locks_for(self, graph: str) -> frozenset[str]: ...
    def will_react(self, patch: Patch) -> bool: ...
    def react(self, patch: Patch, writer: Writer) -> None: ...


class NoHooks:
    """Nothing reacts (a hub without rules: commands, tests of the publisher alone)."""

    def locks_for(self, graph: str) -> frozenset[str]:
        return frozenset()

    def will_react(self, patch: Patch) -> bool:
        return False

    def react(self, patch: Patch, writer: Writer) -> None:
        return None
