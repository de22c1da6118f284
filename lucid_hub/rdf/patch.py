"""The patch model: one graph's change between two versions, and its canonical bytes.

The canonical bytes are the RDF Patch text of the patch without its `H id` and
`H signature` lines (docs/patch-format.md); the patch id is `urn:sha256:` + their hex
SHA-256. Everything in them is fixed: header order, MSG order, blank-node labels.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property

import pyoxigraph as ox

from lucid_hub.errors import PatchFormatError
from lucid_hub.rdf.msg import Msg, by_hash
from lucid_hub.rdf.statements import relabel

ID_PREFIX = "urn:sha256:"
PATCH_ID = re.compile(r"urn:sha256:[0-9a-f]{64}")
XSD_DATETIME = "http://www.w3.org/2001/XMLSchema#dateTime"
_CREATED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def format_created(when: datetime) -> str:
    """The canonical lexical form of a creation time: UTC, milliseconds, `Z`."""
    when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def parse_created(text: str) -> datetime:
    """Parse the canonical creation time form (and only it)."""
    if not _CREATED.fullmatch(text):
        raise PatchFormatError(f"created time {text!r} is not of the form YYYY-MM-DDTHH:MM:SS.mmmZ")
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        raise PatchFormatError(f"created time {text!r} is not a valid date and time") from None


def utc_now() -> datetime:
    """The current time at the precision patches keep."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def check_patch_id(value: str, what: str = "patch id") -> str:
    """`value` if it is a well-formed patch id, else PatchFormatError."""
    if not PATCH_ID.fullmatch(value):
        raise PatchFormatError(f"{what} {value!r} is not of the form urn:sha256:<64 hex digits>")
    return value


def blank_label(msg_index: int, canonical_label: str) -> str:
    """The label a canonical blank node `c14nN` of the patch's k-th MSG gets: `mKbN`."""
    return f"_:m{msg_index}b{canonical_label[len('_:c14n'):]}"


def patch_statement(statement: str, msg_index: int) -> str:
    """A canonical MSG statement with its `_:c14nN` renamed for the patch's k-th MSG."""
    return relabel(statement, lambda label: blank_label(msg_index, label))


def _sorted_by_hash(msgs: tuple[Msg, ...]) -> bool:
    hashes = [m.hash for m in msgs]
    return hashes == sorted(hashes)


@dataclass(frozen=True)
class Patch:
    """The change between two consecutive versions of one graph, hash-chained by `prev`."""

    graph: str
    prev: str | None
    author: str
    message: str
    created: datetime
    removed: tuple[Msg, ...]
    added: tuple[Msg, ...]
    signature: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        try:
            ox.NamedNode(self.graph)
        except ValueError:
            raise PatchFormatError(f"graph name {self.graph!r} is not an absolute IRI") from None
        if self.prev is not None:
            check_patch_id(self.prev, "previous patch id")
        if self.created.tzinfo is None:
            raise PatchFormatError("created time must carry a time zone")
        if self.created.microsecond % 1000:
            raise PatchFormatError("created time must be at millisecond precision (use utc_now())")
        if not (_sorted_by_hash(self.removed) and _sorted_by_hash(self.added)):
            raise PatchFormatError("removed and added MSGs must be sorted by hash")

    @classmethod
    def build(
        cls,
        graph: str,
        prev: str | None,
        removed: list[Msg],
        added: list[Msg],
        *,
        author: str = "",
        message: str = "",
        created: datetime | None = None,
    ) -> Patch:
        """A patch with MSGs sorted and `created` at patch precision (now by default)."""
        when = utc_now() if created is None else created
        when = when.replace(microsecond=when.microsecond // 1000 * 1000)
        return cls(graph, prev, author, message, when, tuple(by_hash(removed)), tuple(by_hash(added)))

    @property
    def is_empty(self) -> bool:
        """True when the patch neither removes nor adds anything."""
        return not self.removed and not self.added

    @cached_property
    def canonical_bytes(self) -> bytes:
        """The bytes the patch id is computed over (the RDF Patch text minus id and signature)."""
        return "".join(self.canonical_lines()).encode()

    def canonical_lines(self) -> list[str]:
        """The lines of `canonical_bytes`, each with its newline."""
        graph = f"<{self.graph}>"
        lines = [f"H graph {graph} .\n"]
        if self.prev is not None:
            lines.append(f"H prev <{self.prev}> .\n")
        lines.append(f"H author {ox.Literal(self.author)} .\n")
        lines.append(f"H message {ox.Literal(self.message)} .\n")
        created = ox.Literal(format_created(self.created), datatype=ox.NamedNode(XSD_DATETIME))
        lines.append(f"H created {created} .\n")
        lines.append("TX .\n")
        for index, (op, msg) in enumerate(self.rows()):
            if "_:" not in msg.nquads:  # a ground triple: nothing to relabel
                lines.append(f"{op} {msg.nquads[:-3]} {graph} .\n")
                continue
            for line in msg.statements:
                lines.append(f"{op} {patch_statement(line, index)} {graph} .\n")
        lines.append("TC .\n")
        return lines

    def rows(self) -> list[tuple[str, Msg]]:
        """(`D` or `A`, MSG) in patch order: removals first, each part sorted by hash."""
        return [("D", m) for m in self.removed] + [("A", m) for m in self.added]

    @cached_property
    def id(self) -> str:
        """`urn:sha256:<hex>` over the canonical bytes."""
        return ID_PREFIX + hashlib.sha256(self.canonical_bytes).hexdigest()

    def with_signature(self, signature: str | None) -> Patch:
        """The same patch carrying `signature` (the id does not change, nor is it recomputed)."""
        signed = replace(self, signature=signature)
        for cached in ("canonical_bytes", "id"):
            if cached in self.__dict__:
                signed.__dict__[cached] = self.__dict__[cached]
        return signed
