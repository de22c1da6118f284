"""Receipts: a mirror tells its publisher how far it got, as a Linked Data Notification to
the graph's inbox (docs/streams.md, "Receipts"). One `as:Announce` per new head, not per
patch: the chain is hash-linked, so "I verified and applied up to X" covers every patch
before X, and a mirror catching up on a thousand patches sends one notification, not a
thousand. The body depends on the head only, so sending it twice (a restart, a retry) is a
replay the inbox answers with 409: nothing is counted twice."""

from __future__ import annotations

import logging
import time
from typing import Any

from lucid_hub import resources
from lucid_hub.client import HubClient
from lucid_hub.errors import RemoteError, RemoteRefusedError

log = logging.getLogger(__name__)
RETRY_SECONDS = 60.0  # after a refusal or an unreachable inbox


def receipt(actor: str, publisher: str, graph: str, head: str, position: int) -> dict[str, Any]:
    """The notification: `actor` (this hub) announces the publisher's patch `head`."""
    return {"@context": "https://www.w3.org/ns/activitystreams", "type": "Announce", "actor": actor,
            "object": resources.patch_url(publisher, head), "target": resources.graph_url(publisher, graph),
            "summary": f"verified and applied the chain of <{graph}> up to patch {head} (position {position})"}


class Receipts:
    """What each mirror announced last, and when it may try again (in the process that keeps
    the mirrors; a restart announces each head once more, which the inbox takes as a replay)."""

    def __init__(self, actor: str, enabled: bool) -> None:
        self.actor = actor
        self.enabled = enabled
        self._sent: dict[str, str] = {}  # mirror id -> the head announced
        self._inboxes: dict[str, str | None] = {}  # mirror id -> its publisher's inbox (None: none)
        self._not_before: dict[str, float] = {}

    def due(self, mirror_id: str, head: str | None) -> bool:
        return (self.enabled and head is not None and self._sent.get(mirror_id) != head
                and self._not_before.get(mirror_id, 0.0) <= time.monotonic())

    def send(self, mirror_id: str, graph: str, head: str, position: int, publisher: HubClient) -> None:
        """Announce `head` to the publisher's inbox; a failure is logged and retried later
        (receipts are a courtesy: they never hold up mirroring)."""
        try:
            if mirror_id not in self._inboxes:
                self._inboxes[mirror_id] = publisher.inbox_of(graph)
            inbox = self._inboxes[mirror_id]
            if inbox is None:  # the publisher runs a release without inboxes: nothing to tell
                self._sent[mirror_id] = head
                return
            publisher.notify(inbox, receipt(self.actor, publisher.base, graph, head, position))
            self._sent[mirror_id] = head
        except RemoteError as exc:
            if isinstance(exc, RemoteRefusedError) and exc.status == 404:
                self._inboxes.pop(mirror_id, None)  # the inbox moved or went: discover it again
            self._not_before[mirror_id] = time.monotonic() + RETRY_SECONDS
            log.warning("mirror of <%s>: the receipt for %s was not sent: %s", graph, head, exc)

    def forget(self, mirror_id: str) -> None:
        for table in (self._sent, self._inboxes, self._not_before):
            table.pop(mirror_id, None)
