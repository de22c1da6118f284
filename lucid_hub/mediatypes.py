"""Media types and entity tags as HTTP defines them (RFC 9110): the one place that parses
`Accept`, `If-Match` and `If-None-Match` (for the web layer and the SPARQL guard alike).

Written by hand: werkzeug's Accept matching took `text/turtle;charset=utf-8` or JSON-LD with
a `profile` for media types the hub does not offer (406), and compared `If-Match` as a
string, so the ETag exactly as the hub sends it (quoted) never matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lucid_hub.errors import NotAcceptableError


def _split(value: str, separator: str) -> list[str]:
    """Split on `separator` outside double-quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


@dataclass(frozen=True)
class MediaRange:
    type: str
    subtype: str
    params: dict[str, str]
    q: float

    @classmethod
    def parse(cls, text: str) -> MediaRange | None:
        """One element of Accept (`type/subtype;param=value;q=0.5`); None if malformed."""
        pieces = _split(text, ";")
        full = pieces[0].strip().lower()
        if full.count("/") != 1:
            return None
        kind, sub = full.split("/")
        if not kind or not sub or (kind == "*" and sub != "*"):
            return None
        params: dict[str, str] = {}
        q = 1.0
        for piece in pieces[1:]:
            name, _, value = piece.strip().partition("=")
            name, value = name.strip().lower(), value.strip().strip('"')
            if name == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    return None
            elif name:
                params[name] = value
        return cls(kind, sub, params, q)

    def matches(self, offer: str) -> int:
        """How specifically this range matches `offer` (0: not at all). Parameters do not
        narrow the match: the hub's RDF is always UTF-8, and a JSON-LD profile asks for a
        form of the same media type (docs/http-api.md)."""
        kind, _, sub = offer.partition("/")
        if self.type == "*":
            return 1
        if self.type != kind:
            return 0
        if self.subtype == "*":
            return 2
        return 3 if self.subtype == sub else 0


def media_type(value: str | None) -> str:
    """The `type/subtype` of a Content-Type value, lower-cased, without parameters."""
    return (value or "").split(";", 1)[0].strip().lower()


def negotiate(accept: str | None, offers: Sequence[str], default: str) -> str:
    """The offer the Accept header prefers; `default` when it says nothing or `*/*`.

    An offer's quality is that of the most specific range matching it (RFC 9110 §12.5.1);
    at equal quality an offer named exactly beats one matched by a wildcard, then the
    default, then the earlier offer. NotAcceptableError (406) names the offers when none is
    acceptable."""
    ranges = [r for r in (MediaRange.parse(part) for part in _split(accept or "", ",") if part.strip()) if r]
    if not ranges:
        return default
    best: str | None = None
    best_key: tuple[float, int, bool, int] | None = None
    for position, offer in enumerate(offers):
        matching = [(r.matches(offer), r.q) for r in ranges if r.matches(offer)]
        if not matching:
            continue
        specificity, quality = max(matching)
        if quality <= 0:
            continue
        key = (quality, specificity, offer == default, -position)
        if best_key is None or key > best_key:
            best, best_key = offer, key
    if best is None:
        raise NotAcceptableError(f"none of the media types the Accept header asks for is available; "
                                 f"available: {', '.join(offers)}")
    return best


@dataclass(frozen=True)
class EntityTags:
    """An If-Match or If-None-Match value: `*`, or a list of (possibly weak) entity tags."""

    any: bool
    strong: frozenset[str]  # opaque values of strong tags, without quotes
    weak: frozenset[str]  # opaque values of weak tags (W/"…"), without quotes

    @classmethod
    def parse(cls, value: str | None) -> EntityTags | None:
        """None when the header is absent; ValueError when it is malformed."""
        if value is None:
            return None
        if value.strip() == "*":
            return cls(True, frozenset(), frozenset())
        strong: set[str] = set()
        weak: set[str] = set()
        for item in (part.strip() for part in _split(value, ",")):
            if not item:
                continue
            is_weak = item.startswith("W/")
            tag = item[2:] if is_weak else item
            if len(tag) < 2 or tag[0] != '"' or tag[-1] != '"' or '"' in tag[1:-1]:
                raise ValueError(f"{item[:100]!r} is not an entity tag (a quoted string, as ETag gives it)")
            (weak if is_weak else strong).add(tag[1:-1])
        if not strong and not weak:
            raise ValueError("no entity tag given")
        return cls(False, frozenset(strong), frozenset(weak))

    def versions(self) -> EntityTags:
        """The tags as the versions they name: a representation's suffix (`;media/type`, see
        `representation_tag`) taken off, so that a write's If-Match may carry the tag of any
        representation of the version it read."""
        return EntityTags(self.any, frozenset(t.split(";", 1)[0] for t in self.strong),
                          frozenset(t.split(";", 1)[0] for t in self.weak))

    def match_strong(self, current: str | None) -> bool:
        """If-Match (strong comparison): `current` is the resource's opaque tag, None when
        it has no current representation."""
        if current is None:
            return False
        return self.any or current in self.strong

    def match_weak(self, current: str | None) -> bool:
        """If-None-Match (weak comparison)."""
        if current is None:
            return False
        return self.any or current in self.strong or current in self.weak


def representation_tag(version: str, media_type: str, default: str) -> str:
    """The strong entity tag of one representation of a version (RFC 9110 §8.8.3.3: strong
    validators differ per representation): the version itself for the default media type,
    `version;media/type` for the others."""
    return version if media_type == default else f"{version};{media_type}"


def etag(opaque: str) -> str:
    """An ETag header value for an opaque tag."""
    return f'"{opaque}"'
