"""Who applied what: each partner's newest receipt in a graph's inbox (an `as:Announce`,
docs/streams.md "Receipts"), with the chain position it names and how far behind it is. The
admin API (`/admin/receipts`) and the console's inboxes page show the same."""

from __future__ import annotations

from typing import Any

from lucid_hub.errors import NotFoundError
from lucid_hub.resources import notification_url
from lucid_hub.web.parts import HubParts


def receipts(hub: HubParts, graph: str) -> tuple[int, list[dict[str, Any]]]:
    """(the graph's length, each partner's newest receipt)."""
    length = hub.stream.position(graph)
    prefix = f"{hub.settings.public_url}/patches/"
    out = []
    for item in hub.inbox.latest_per_sender(graph, "Announce"):
        patch = next((o[len(prefix):] for o in item.objects if o.startswith(prefix)), None)
        try:
            position = hub.archive.position(patch, graph) if patch else None
        except NotFoundError:
            position = None  # a patch this hub never made: reported, not trusted
        out.append({"sender": item.sender, "patch": patch, "position": position,
                    "behind": None if position is None else length - position,
                    "received": item.created_at.isoformat().replace("+00:00", "Z"),
                    "notification": notification_url(hub.settings.public_url, item.id)})
    return length, out
