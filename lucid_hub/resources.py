"""The URLs of this hub's own resources: one spelling for the web layer and for deliveries
(a delivery's `rel="self"` must be the very URL discovery gives)."""

from __future__ import annotations

from urllib.parse import quote


def graph_url(base: str, graph: str) -> str:
    """The graph's resource (Graph Store Protocol, indirect identification); the WebSub topic URL."""
    return f"{base}/graphs?graph={quote(graph, safe='')}"


def patch_url(base: str, patch_id: str) -> str:
    return f"{base}/patches/{patch_id}"


def inbox_url(base: str, graph: str) -> str:
    """The graph's Linked Data Notifications inbox (docs/streams.md, "Inboxes")."""
    return f"{base}/inbox?graph={quote(graph, safe='')}"


def input_url(base: str, graph: str) -> str:
    """The graph's stream input: stream elements POSTed here become its patches (docs/streams.md)."""
    return f"{base}/streams/input?graph={quote(graph, safe='')}"


def output_url(base: str, graph: str) -> str:
    """The graph's stream output: the LDP container of its patches (docs/streams.md)."""
    return f"{base}/patches?graph={quote(graph, safe='')}"


def notification_url(base: str, ident: str) -> str:
    return f"{base}/inbox/notifications/{ident}"


def hub_url(base: str) -> str:
    return f"{base}/hub"


def discovery_links(base: str, graph: str) -> str:
    """WebSub discovery (`rel=hub`, `rel=self`) for a graph: on its resource and on deliveries."""
    return f'<{hub_url(base)}>; rel="hub", <{graph_url(base, graph)}>; rel="self"'
