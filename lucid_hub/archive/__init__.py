"""The archive: every graph's chain of signed patches and its head (advanced only by
compare-and-set), the outbox, and the SQL log's entries; the one owner of those tables."""

from lucid_hub.archive.chains import (
    Archive,
    Archiving,
    ChainLink,
    MirroredGraphError,
    Precondition,
    at_version,
    read_only,
)

__all__ = ["Archive", "Archiving", "ChainLink", "MirroredGraphError", "Precondition", "at_version", "read_only"]
