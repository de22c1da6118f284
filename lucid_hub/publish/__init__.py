"""Versioning of owned graphs: take a change, diff, build, chain and sign the patch, archive
it (compare-and-set on the graph's head), write the store, and emit it to the patch log
through a transactional outbox."""

from lucid_hub.archive import Precondition, at_version
from lucid_hub.publish.publisher import Publisher, Unchanged

__all__ = ["Precondition", "Publisher", "Unchanged", "at_version"]
