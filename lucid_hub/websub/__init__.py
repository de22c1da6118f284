"""The WebSub hub (W3C WebSub with LUCID's authorisation): the protocol's rules, callback
safety, subscriptions with leases, verification of intent and denial."""

from lucid_hub.websub.notices import CallbackNotices
from lucid_hub.websub.protocol import MEDIA_TYPES, NotYoursError, Request
from lucid_hub.websub.subscriptions import WebSubHub

__all__ = ["MEDIA_TYPES", "CallbackNotices", "NotYoursError", "Request", "WebSubHub"]
