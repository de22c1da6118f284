"""What the hub sends to a subscriber's callback besides deliveries: the verification of
intent (WebSub §5.3) and denial notices (§5.2), on threads of their own, so that slow
callbacks never hold up deliveries (or the other way round)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

from lucid_hub import outbound
from lucid_hub.config import Settings
from lucid_hub.outbound import AddressPolicy
from lucid_hub.websub.callbacks import parse_cidrs
from lucid_hub.websub.protocol import Request, with_query

log = logging.getLogger(__name__)


class CallbackNotices:
    """Verifications of intent and denial notices to callbacks, each connection kept to the
    outbound address policy (lucid_hub.outbound)."""

    def __init__(self, settings: Settings) -> None:
        self.timeout = settings.delivery_timeout
        self.allowed = parse_cidrs(settings.callback_allow_cidrs)
        self.policy = AddressPolicy(dev_mode=settings.dev_mode, allowed=self.allowed, ca_file=settings.outbound_ca_file)
        self.http = outbound.session(self.policy, "lucid-hub WebSub hub")
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="websub-verify")

    def submit(self, work: Callable[..., Any], *args: Any) -> None:
        """Run `work(*args)` on a notice thread."""
        self._executor.submit(work, *args)

    def deny(self, callback: str, topic: str, reason: str) -> None:
        """Tell a callback its subscription was denied (or has been cancelled), in the background."""
        try:
            self._executor.submit(self._send_denied, callback, topic, reason)
        except RuntimeError:  # shutting down: the cancellation itself is recorded
            log.info("hub stopping: a denial notice was not sent")

    def _send_denied(self, callback: str, topic: str, reason: str) -> None:
        url = with_query(callback, {"hub.mode": "denied", "hub.topic": topic, "hub.reason": reason[:500]})
        try:
            self.http.get(url, timeout=self.timeout, allow_redirects=False)
        except requests.RequestException as exc:
            log.info("denial notice to a callback failed: %s", type(exc).__name__)

    def confirmed(self, request: Request) -> bool:
        """The verification of intent: whether the callback echoes a fresh challenge."""
        challenge = secrets.token_urlsafe(32)
        params = {"hub.mode": request.mode, "hub.topic": request.topic, "hub.challenge": challenge}
        if request.mode == "subscribe":
            params["hub.lease_seconds"] = str(request.lease_seconds)
        try:
            answer = self.http.get(with_query(request.callback, params), timeout=self.timeout,
                                   allow_redirects=False)
            return 200 <= answer.status_code < 300 and answer.text == challenge
        except requests.RequestException as exc:
            log.info("verification of intent failed: %s", type(exc).__name__)
            return False

    def stop(self) -> None:
        """Let the notices in flight finish; send no more."""
        self._executor.shutdown(wait=True, cancel_futures=True)
