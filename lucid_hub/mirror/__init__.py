"""Mirrors: this hub subscribes to other hubs' graphs and keeps verified copies."""

from lucid_hub.mirror.subscriber import MirrorService, add_mirror, list_mirrors, remove_mirror, trust_mirror

__all__ = ["MirrorService", "add_mirror", "list_mirrors", "remove_mirror", "trust_mirror"]
