"""Cyclic garbage collection paused while a large change is published.

Publishing a large change allocates millions of objects that all live until it is done;
each time the heap grows by a quarter CPython's collector walks all of it again, which was
a third of a 200,000-triple publish (py-spy). Nothing it could collect is made there, so
the collector is paused for such changes and resumed when the last one ends (reference
counting frees everything as usual meanwhile). Small changes never pause it: under a steady
stream of them it would never run. Hand-written: a few lines around `gc`, no library does
this.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

# Changes with at least this many MSGs pause collection.
LARGE_CHANGE = 20_000
# Bytes of an RDF Patch row, roughly (for a received patch, whose MSGs are not counted yet).
BYTES_PER_ROW = 100

_lock = threading.Lock()
_holders = 0
_resume = False


@contextlib.contextmanager
def paused_for(size: int) -> Iterator[None]:
    """Pause cyclic collection for the block when `size` (MSGs) is large."""
    global _holders, _resume
    if size < LARGE_CHANGE:
        yield
        return
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()


def paused_for_bytes(size: int) -> contextlib.AbstractContextManager[None]:
    """`paused_for` an RDF document or patch of `size` bytes (its MSGs are not counted yet)."""
    return paused_for(size // BYTES_PER_ROW)


def freeze_startup() -> None:
    """Move everything alive after start (modules, the app, the runtime: most of a hub's
    objects) out of the collector's sight. Full collections scanned all of it again: 50 to
    100 ms pauses, every few seconds under a stream of small patches, that were the tail of
    push latency (bench streams, py-spy and gc.callbacks). Nothing made at start becomes
    garbage that only the collector could free; what is made later is collected as ever."""
    gc.collect()
    gc.freeze()

