"""Input whose parsing recurses, bounded before it is parsed.

Parsers recurse on nesting: oxigraph's JSON-LD parser overflows its stack (SIGSEGV, the
whole process) at about 5,000 nested objects, Python's `json` raises RecursionError at
about 1,000. Every JSON or JSON-LD document from outside (request bodies, tokens, signature
headers, keys fetched from partners) is measured here first, in linear time, and refused
above MAX_NESTING with a clear error. Turtle, TriG and N-Triples need no bound: oxigraph
parses them with an explicit stack (measured: 50,000 nested blank-node property lists and
collections parse fine). SPARQL text is parsed only in the query guard process
(`lucid_hub.store.queries`), where a crash or a stall costs that process, not the hub.
"""

from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate
from typing import Any

from lucid_hub.errors import InputError

# Deepest nesting of JSON objects and arrays accepted. Real JSON-LD rarely nests beyond 20;
# 256 levels are far from any parser's limit, in any thread.
MAX_NESTING = 256

# A JSON string (the unrolled form of "(?:[^"\\]|\\.)*": one pass, no backtracking).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes


class NestingTooDeep(InputError):
    """A document nests deeper than MAX_NESTING (HTTP 400)."""


def json_nesting(data: bytes | str) -> int:
    """The deepest nesting of objects and arrays in a JSON text (strings skipped).

    Exact for well-formed JSON. For malformed JSON it never reports less than a parser
    could reach before failing: the first unterminated string ends what a parser reads.
    """
    raw = data.encode() if isinstance(data, str) else data
    brackets = _JSON_STRING.sub(b"", raw).translate(None, delete=_NOT_BRACKETS)
    if not brackets:
        return 0
    return max(0, max(accumulate(array("b", brackets.translate(_SIGNS)))))


def check_json(data: bytes | str, source: str, limit: int = MAX_NESTING) -> None:
    """NestingTooDeep unless the JSON text nests at most `limit` levels."""
    depth = json_nesting(data)
    if depth > limit:
        raise NestingTooDeep(f"{source} nests {depth} levels deep; at most {limit} are accepted")


def loads(data: bytes | str, source: str) -> Any:
    """`json.loads` of outside input: bounded nesting, and one error family (InputError)."""
    check_json(data, source)
    try:
        return json.loads(data)
    except ValueError as exc:
        raise InputError(f"{source} is not JSON: {exc}") from None
