"""Subscribing a mirror at its publisher's hub, and answering that hub's verification of intent
(WebSub §5.3): subscribe, renew, unsubscribe, and believe a denial only when the publisher
confirms it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import requests

from lucid_hub.client import HubClient
from lucid_hub.config import Settings
from lucid_hub.db.models import Mirror
from lucid_hub.errors import LucidError, NotFoundError, RemoteCredentialsRefused, RemoteError
from lucid_hub.mirror.receipts import Receipts
from lucid_hub.mirror.registry import SCOPE, MirroredGraphs
from lucid_hub.mirror.rows import MirrorRows

log = logging.getLogger(__name__)
RETRY_SECONDS = 60.0  # a (re)subscription not verified by then is asked for again


def publisher_client(row: Mirror, http: requests.Session) -> HubClient:
    """The mirror's publisher, as the mirror's client (with a fresh token)."""
    client = HubClient(row.publisher_url, http)
    client.authorize(row.client_id, row.client_secret, SCOPE)
    return client


def same_topic(row: Mirror, topic: str) -> bool:
    """Whether a hub's topic names the mirror's graph (as itself or as `?graph=`)."""
    return topic == row.graph or parse_qs(urlsplit(topic).query).get("graph", [""])[0] == row.graph


class Subscriptions:
    """A mirror's subscription at its publisher's hub, from our side."""

    def __init__(self, settings: Settings, rows: MirrorRows, http: requests.Session, mirrored: MirroredGraphs,
                 receipts: Receipts, forget: Callable[[str], None]) -> None:
        self.settings = settings
        self.rows = rows
        self.http = http
        self.mirrored = mirrored
        self.receipts = receipts
        self.forget = forget  # drops a mirrored graph's local copy (on a revocation, when told to purge)

    def callback_url(self, mirror_id: str) -> str:
        return f"{self.settings.public_url}/callback/{mirror_id}"

    def _hub_request(self, row: Mirror, mode: str) -> None:
        form = {"hub.mode": mode, "hub.topic": row.graph, "hub.callback": self.callback_url(row.id)}
        if mode == "subscribe":
            form["hub.secret"] = row.hmac_secret
        publisher_client(row, self.http).hub_request(row.hub_url, form)

    def subscribe(self, mirror_id: str) -> None:
        """(Re)subscribe; the hub's verification of intent then makes the mirror active.

        The state moves before the request: the verification may arrive before the hub's
        202 does, and must find the mirror waiting for it (single UPDATEs, no lost update)."""
        self.rows.subscribing(mirror_id, RETRY_SECONDS)
        try:
            self._hub_request(self.rows.get(mirror_id), "subscribe")
        except LucidError as exc:
            log.warning("mirror %s: %s", mirror_id, exc)
            self.rows.subscribing_failed(mirror_id, str(exc))

    def remove(self, mirror_id: str) -> None:
        row = self.rows.get(mirror_id)
        try:
            self._hub_request(row, "unsubscribe")
        except LucidError as exc:  # the publisher's subscription then ends with its lease
            log.info("mirror %s: unsubscribing failed: %s", mirror_id, exc)
        # Forgotten at once: the verification of the unsubscription finds no mirror and is
        # answered 404, so the hub keeps delivering until the lease ends — answered 410
        # Gone, which removes the subscription at the hub.
        self.rows.delete(mirror_id)
        self.mirrored.refresh()
        self.receipts.forget(mirror_id)

    def verify_intent(self, mirror_id: str, mode: str, topic: str, challenge: str, lease: str | None,
                      reason: str = "") -> str | None:
        """The answer to a hub's GET on our callback: the challenge to echo, "" for a
        denial taken note of, None for a request we did not ask for (answered 404).
        State changes are single conditional UPDATEs: `mirror remove` may run meanwhile."""
        try:
            row = self.rows.get(mirror_id)
        except NotFoundError:
            return None
        if not same_topic(row, topic):
            return None
        if mode == "subscribe" and challenge:
            try:
                seconds = int(lease or self.settings.lease_default)
            except ValueError:
                return None
            return challenge if self.rows.activate(mirror_id, seconds) else None
        if mode != "denied":
            return None  # unsubscribe: we forget a mirror before the hub asks (see remove)
        # Anyone can send this GET: believe it only if the publisher agrees.
        if not self._denial_confirmed(row):
            log.warning("mirror of <%s>: a denial notice the publisher does not confirm was ignored", row.graph)
            return ""
        if not self.rows.revoke(mirror_id, reason):
            return None
        log.warning("mirror of <%s>: the publisher withdrew access: %s", row.graph, reason)
        if self.settings.mirror_on_revoke == "purge":
            self.forget(row.graph)
        return ""

    def _denial_confirmed(self, row: Mirror) -> bool:
        """Whether the publisher really refuses us the graph now (a token refused, or 401/403
        on the graph). Unreachable or still readable: not confirmed."""
        try:
            return not publisher_client(row, self.http).may_read(row.graph)
        except RemoteCredentialsRefused:
            return True
        except RemoteError:
            return False
