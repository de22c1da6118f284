"""Choosing a patch serialisation by name or media type, for reading and writing."""

from __future__ import annotations

from lucid_hub.errors import InputError, InputTooLargeError, PatchFormatError
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.patch import Patch
from lucid_hub.rdf.rdfpatch import MEDIA_TYPE as RDF_PATCH_MEDIA_TYPE
from lucid_hub.rdf.rdfpatch import read_rdf_patch, write_rdf_patch
from lucid_hub.rdf.revision import MEDIA_TYPES, read_revision, write_revision

PATCH_FORMATS = ("rdf-patch", "trig", "jsonld")
MEDIA_TYPE_OF = {"rdf-patch": RDF_PATCH_MEDIA_TYPE, **MEDIA_TYPES}
_SUFFIXES = {".rdfp": "rdf-patch", ".patch": "rdf-patch", ".trig": "trig", ".jsonld": "jsonld",
             ".json": "jsonld"}


def write_patch(patch: Patch, fmt: str = "rdf-patch") -> bytes:
    """Serialise a patch as `rdf-patch` (the wire format), `trig` or `jsonld`."""
    if fmt == "rdf-patch":
        return write_rdf_patch(patch)
    if fmt in MEDIA_TYPES:
        return write_revision(patch, fmt)
    raise InputError(f"unknown patch format {fmt!r} (known: {', '.join(PATCH_FORMATS)})")


def sniff_patch_format(raw: bytes, filename: str | None = None) -> str:
    """The patch format of `raw`, by file suffix when given, else by its first bytes."""
    if filename:
        for suffix, fmt in _SUFFIXES.items():
            if filename.lower().endswith(suffix):
                return fmt
    head = raw.lstrip()[:1]
    if raw.startswith(b"H ") or raw.startswith(b"TX"):
        return "rdf-patch"
    if head in (b"{", b"["):
        return "jsonld"
    return "trig"


def read_patch(
    raw: bytes, canonicalizer: Canonicalizer, fmt: str | None = None, max_bytes: int | None = None
) -> Patch:
    """Parse a patch in any supported format; the id it claims must match its content."""
    if max_bytes is not None and len(raw) > max_bytes:
        raise InputTooLargeError(f"patch of {len(raw)} bytes exceeds the limit of {max_bytes} bytes")
    fmt = fmt or sniff_patch_format(raw)
    if fmt == "rdf-patch":
        return read_rdf_patch(raw, canonicalizer)
    if fmt in MEDIA_TYPES:
        return read_revision(raw, fmt, canonicalizer)
    raise PatchFormatError(f"unknown patch format {fmt!r} (known: {', '.join(PATCH_FORMATS)})")
