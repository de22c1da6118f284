"""The subscriber side: mirrors of other hubs' graphs (the registry of mirrors; verify, apply
in order, catch up, quarantine)."""

from lucid_hub.mirror.registry import MirroredGraphs, MirrorRegistry
from lucid_hub.mirror.subscriber import MirrorService

__all__ = ["MirrorRegistry", "MirrorService", "MirroredGraphs"]
