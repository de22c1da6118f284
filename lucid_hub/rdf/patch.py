"""The patch model: one graph's change between two versions, and its canonical bytes.

The canonical bytes are the RDF Patch text of the patch without its `H id` and
`H signature` lines (docs/patch-format.md); the patch id is `urn:sha256:` + their hex
SHA-256. Everything in them is fixed: header order, MSG order, blank-node labels.

Two formats, told apart by the `H format` header (absent in format 1). Format 1 labels
blank nodes per patch (`_:mKbN`, the K-th MSG of the patch), so a label means nothing
outside its patch. Format 2 labels them across the graph's whole chain: a blank-node MSG
instance is its MSG hash and its *occurrence* (which of the graph's copies of that MSG it
is), `_:hHASHoOCCbN`, the same label in the patch that adds it and in the one that removes
it, so a generic RDF Patch applier that adds and deletes by label keeps the graph exactly.
Occurrences follow one rule (`occurrences`): a removal takes the highest occurrences held,
an addition the lowest free ones. Format 3 is format 2 with the publisher's metadata
(`H meta` lines, rdf.metadata), made only for a patch that carries some. Old patches keep
their format, bytes and ids.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property

import pyoxigraph as ox

from lucid_hub.errors import PatchApplyError, PatchFormatError
from lucid_hub.rdf import metadata as meta
from lucid_hub.rdf.msg import Msg, by_hash, chain_label
from lucid_hub.rdf.statements import relabel

ID_PREFIX = "urn:sha256:"
FORMATS = (1, 2, 3)
CURRENT_FORMAT = 2

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
    """Format 1: the label a canonical blank node `c14nN` of the patch's k-th MSG gets: `mKbN`."""
    return f"_:m{msg_index}b{canonical_label[len('_:c14n'):]}"


def patch_statement(statement: str, msg_index: int) -> str:
    """Format 1: a canonical MSG statement with its `_:c14nN` renamed for the patch's k-th MSG."""
    return relabel(statement, lambda label: blank_label(msg_index, label))


def occurrences(held: Iterable[int], removed: int, added: int) -> tuple[list[int], list[int]]:
    """Which copies of one MSG a change removes and which it adds, given the occurrences the
    graph holds: the highest held ones go, the lowest ones held by none come (not those the
    same change removes: a patch's removed and added rows never share a label); both in
    ascending order. The one rule of publishers, stores and replicas."""
    live = sorted(held)
    if removed > len(live):
        raise PatchApplyError(f"a change removes an MSG {removed}x, the graph holds it {len(live)}x")
    gone = live[len(live) - removed:] if removed else []
    taken = set(live)
    came: list[int] = []
    candidate = 0
    while len(came) < added:
        if candidate not in taken:
            came.append(candidate)
        candidate += 1
    return gone, came


def _assign(removed: list[Msg], added: list[Msg], held: Callable[[str], Iterable[int]]
            ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Occurrences of the rows of a change (sorted by hash), per `occurrences`."""
    removed_occ: list[int] = []
    added_occ: list[int] = []
    removing = Counter(m.hash for m in removed if "_:" in m.nquads)
    adding = Counter(m.hash for m in added if "_:" in m.nquads)
    plans = {h: occurrences(held(h), removing[h], adding[h]) for h in removing.keys() | adding.keys()}
    for msgs, side, out in ((removed, 0, removed_occ), (added, 1, added_occ)):
        taken: Counter[str] = Counter()
        for msg in msgs:
            if "_:" not in msg.nquads:
                out.append(0)
                continue
            out.append(plans[msg.hash][side][taken[msg.hash]])
            taken[msg.hash] += 1
    return tuple(removed_occ), tuple(added_occ)


def _sorted_by_hash(msgs: tuple[Msg, ...]) -> bool:
    hashes = [m.hash for m in msgs]
    return all(a <= b for a, b in itertools.pairwise(hashes))


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
    format: int = 1
    # Format 2: the occurrence of each removed and added MSG (0 for ground triples), aligned
    # with `removed` and `added`; rows of one MSG hash in ascending occurrence.
    removed_occurrences: tuple[int, ...] = ()
    added_occurrences: tuple[int, ...] = ()
    # Format 3: the publisher's metadata, (predicate IRI, N-Triples object), sorted and distinct.
    metadata: meta.Metadata = ()

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
        if self.format not in FORMATS:
            raise PatchFormatError(f"patch format {self.format} is not one of {FORMATS}")
        if self.format == 1 and (self.removed_occurrences or self.added_occurrences):
            raise PatchFormatError("a format 1 patch has no occurrences")
        if self.metadata and self.format != 3:
            raise PatchFormatError(f"metadata needs patch format 3, not {self.format}")
        meta.check(self.metadata)
        if self.format >= 2:
            for msgs, occs in ((self.removed, self.removed_occurrences), (self.added, self.added_occurrences)):
                if len(occs) != len(msgs):
                    raise PatchFormatError("a format 2 patch names an occurrence for every MSG")
                keys = [(m.hash, o) for m, o in zip(msgs, occs, strict=True)]
                if not all(a < b for a, b in itertools.pairwise(keys)):  # (strictly ascending: sorted, distinct)
                    raise PatchFormatError("a format 2 patch's MSGs are sorted by hash, then by distinct occurrence")

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
        held: Callable[[str], Iterable[int]] | None = None,
        metadata: meta.Metadata = (),
    ) -> Patch:
        """A patch with MSGs sorted and `created` at patch precision (now by default).

        With `held` (the occurrences of an MSG hash the graph holds now: a store's or a
        replica's), a format 2 patch, its occurrences by the one rule (format 3 when it
        carries `metadata`); without, format 1, which carries no metadata."""
        when = utc_now() if created is None else created
        when = when.replace(microsecond=when.microsecond // 1000 * 1000)
        gone, came = by_hash(removed), by_hash(added)
        if held is None:
            if metadata:
                raise PatchFormatError("metadata needs patch format 3; this hub makes format 1 "
                                       "patches (LUCID_PATCH_FORMAT=1)")
            return cls(graph, prev, author, message, when, tuple(gone), tuple(came))
        removed_occ, added_occ = _assign(gone, came, held)
        return cls(graph, prev, author, message, when, tuple(gone), tuple(came), format=3 if metadata else 2,
                   removed_occurrences=removed_occ, added_occurrences=added_occ, metadata=meta.normalise(metadata))

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
        if self.format != 1:
            lines.append(f'H format "{self.format}" .\n')
        if self.prev is not None:
            lines.append(f"H prev <{self.prev}> .\n")
        lines.append(f"H author {ox.Literal(self.author)} .\n")
        lines.append(f"H message {ox.Literal(self.message)} .\n")
        created = ox.Literal(format_created(self.created), datatype=ox.NamedNode(XSD_DATETIME))
        lines.append(f"H created {created} .\n")
        lines.extend(f"H meta {ox.Literal(meta.header_text(item))} .\n" for item in self.metadata)
        lines.append("TX .\n")
        lines.extend(f"{op} {statement} {graph} .\n" for op, statement in self.labelled_rows())
        lines.append("TC .\n")
        return lines

    def rows(self) -> list[tuple[str, Msg]]:
        """(`D` or `A`, MSG) in patch order: removals first, each part sorted by hash."""
        return [("D", m) for m in self.removed] + [("A", m) for m in self.added]

    def row_occurrences(self) -> list[int]:
        """The occurrence of each row's MSG (format 2), in `rows()` order."""
        return [*self.removed_occurrences, *self.added_occurrences]

    def labelled_rows(self) -> Iterator[tuple[str, str]]:
        """(`D` or `A`, statement) in patch order, blank nodes labelled as the format says."""
        occs = self.row_occurrences()
        for index, (op, msg) in enumerate(self.rows()):
            if "_:" not in msg.nquads:  # a ground triple: nothing to relabel
                yield op, msg.nquads[:-3]
            elif self.format == 1:
                for line in msg.statements:
                    yield op, patch_statement(line, index)
            else:
                rename = functools.partial(chain_label, msg.hash, occs[index])
                for line in msg.statements:
                    yield op, relabel(line, rename)

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
