"""The WebSub protocol's rules (W3C WebSub §5, §6) as this hub applies them: what names a
topic, lease bounds, secrets, content types, and the (un)subscription request they make."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pyoxigraph as ox

from lucid_hub.config import Settings
from lucid_hub.errors import ForbiddenError, InputError
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH

# The content types a subscriber may ask its deliveries in (lucid.media_type), and the
# patch serialisation each is written with.
MEDIA_TYPES = {RDF_PATCH: "rdf-patch", "application/trig": "trig", "application/ld+json": "jsonld"}
MAX_SECRET_BYTES = 200  # WebSub §5.1: a secret MUST be less than 200 bytes


def with_query(url: str, params: dict[str, str]) -> str:
    """The URL with `params` added to its own query string (which is preserved)."""
    parts = urlsplit(url)
    extra = urlencode(params)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def topic_graph(topic: str, public_url: str) -> str:
    """The graph a topic names: its IRI, or this hub's `/graphs?graph=` URL of it."""
    if topic.startswith(f"{public_url}/graphs?"):
        values = parse_qs(urlsplit(topic).query).get("graph", [])
        if len(values) != 1:
            raise InputError("hub.topic: a /graphs URL names exactly one graph (?graph=IRI)")
        topic = values[0]
    try:
        ox.NamedNode(topic)
    except ValueError:
        raise InputError(f"hub.topic {topic[:200]!r} is not a graph IRI or a /graphs?graph= URL of this hub") from None
    return topic


def lease_seconds(value: str | None, settings: Settings) -> int:
    """hub.lease_seconds within the hub's bounds (its default when not given)."""
    if not value:
        return settings.lease_default
    try:
        lease = int(value)
    except ValueError:
        raise InputError("hub.lease_seconds must be a whole number of seconds") from None
    if lease <= 0:
        raise InputError("hub.lease_seconds must be positive")
    return min(max(lease, settings.lease_min), settings.lease_max)


def secret(value: str | None) -> str | None:
    """hub.secret, which must be shorter than MAX_SECRET_BYTES (None when not given)."""
    if value and len(value.encode()) >= MAX_SECRET_BYTES:
        raise InputError(f"hub.secret must be shorter than {MAX_SECRET_BYTES} bytes")
    return value or None


def media_type(value: str | None) -> str:
    """lucid.media_type: the content type of deliveries (RDF Patch when not given)."""
    chosen = value or RDF_PATCH
    if chosen not in MEDIA_TYPES:
        raise InputError(f"lucid.media_type must be one of {', '.join(MEDIA_TYPES)}")
    return chosen


@dataclass(frozen=True)
class Request:
    """A verified-to-be-well-formed (un)subscription request of an authorised party."""

    mode: str
    graph: str
    topic: str
    callback: str
    lease_seconds: int
    secret: str | None
    media_type: str
    account: str
    endpoint_id: str
    groups: frozenset[str]
    admin: bool = False  # an admin may change any client's subscription


class NotYoursError(ForbiddenError):
    """A (un)subscription of a callback another client subscribed (HTTP 403)."""
