"""The subscriber side: mirrors of other hubs' graphs (verify, apply in order, catch up, quarantine)."""

from lucid_hub.mirror.subscriber import (
    MirroredGraphs,
    MirrorService,
    add_mirror,
    list_mirrors,
    pinned_keys,
    remove_mirror,
    trust_mirror,
)

__all__ = ["MirrorService", "MirroredGraphs", "add_mirror", "list_mirrors", "pinned_keys", "remove_mirror",
           "trust_mirror"]
