"""Memory bounds in bytes: the container's limit (cgroup v2 `memory.max`, v1
`memory.limit_in_bytes`) and the share of it a process's caches may hold.

The largest cache of a hub process is the publisher's MSG cache (the current MSGs of graphs,
so that a bulk re-publish need not read the graph back from the store). Its size is an
estimate kept per graph — MSGs times (PER_MSG_OVERHEAD plus their mean text length, from a
sample) — measured against the process's resident memory (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import threading
from collections.abc import Iterable
from pathlib import Path

CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
# The share of the container's limit the MSG caches of all of a pod's hub processes may hold
# (the rest: the interpreter and libraries ~200 MiB, request bodies up to 20x
# LUCID_MAX_BODY_BYTES while parsed, the store's own caches).
CACHE_SHARE = 0.25
# Without a container limit (a process on a host): what 2,000,000 typical statements took.
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
# Bytes a cached MSG takes besides its text: the str object, its set or Counter slot (measured:
# 600,000 MSGs of ~75-character statements took 217 bytes each, with 20% blank nodes 233).
PER_MSG_OVERHEAD = 140
_SAMPLE = 256


def container_limit(paths: Iterable[Path] = CGROUP_LIMITS) -> int | None:
    """The memory limit of the container this process runs in, in bytes; None without one."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max" or not text.isdigit():
            return None
        limit = int(text)
        return None if limit >= 1 << 60 else limit  # cgroup v1 says "none" with a huge number
    return None


def cache_bytes(configured: int, processes: int, limit: int | None) -> int:
    """The MSG cache bound of one process: `configured` (LUCID_CACHE_BYTES) if set, else its
    share of the container's limit (split over the pod's processes), else DEFAULT_CACHE_BYTES."""
    if configured > 0:
        return configured
    if limit is not None:
        return int(limit * CACHE_SHARE / max(1, processes))
    return DEFAULT_CACHE_BYTES


def estimated_bytes(count: int, texts: Iterable[str]) -> int:
    """The memory `count` cached MSGs take, from the mean length of a sample of their texts."""
    sample = [len(t) for t in itertools.islice(texts, _SAMPLE)]
    mean = sum(sample) / len(sample) if sample else 0
    return int(count * (PER_MSG_OVERHEAD + mean))


# Request bodies from this size on leave the heap trimmed after their request (below).
TRIM_AFTER_BYTES = 2 * 1024 * 1024
_libc: ctypes.CDLL | None = None
_libc_lock = threading.Lock()


def trim() -> bool:
    """Give the C heap's free memory back to the system (glibc's `malloc_trim`); False where
    there is none. A large body's parsing and patch leave hundreds of MiB free but held in
    the heap's arenas (a thread's arena each): measured here, three 200,000-triple PUTs left a
    hub process 400 MiB larger without any cache, which trimming returns."""
    global _libc
    with _libc_lock:
        if _libc is None:
            name = ctypes.util.find_library("c")
            if name is None:
                return False
            _libc = ctypes.CDLL(name)
        if not hasattr(_libc, "malloc_trim"):
            return False
        return bool(_libc.malloc_trim(0))
