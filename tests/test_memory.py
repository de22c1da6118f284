"""Memory bounds (lucid_hub.memory): the container's limit, the MSG cache's share of it, the
cache's estimate against what its MSGs really take, eviction by bytes, the metrics."""

from __future__ import annotations

import gc
from pathlib import Path

import psutil
import pyoxigraph as ox

from lucid_hub import memory
from lucid_hub.config import Settings
from lucid_hub.publish.cache import MsgCache
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.rdf.msg import GraphMsgs, GraphMsgsBuilder
from lucid_hub.runtime import Runtime


def test_the_container_limit_is_read_from_cgroup_v2_or_v1(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    assert memory.container_limit([v2, v1]) is None  # neither file: no container limit
    v1.write_text("1073741824\n")
    assert memory.container_limit([v2, v1]) == 1 << 30
    v1.write_text("9223372036854771712\n")  # cgroup v1's "unlimited"
    assert memory.container_limit([v2, v1]) is None
    v2.write_text("max\n")
    assert memory.container_limit([v2, v1]) is None
    v2.write_text("536870912\n")
    assert memory.container_limit([v2, v1]) == 512 << 20


def test_the_cache_bound_is_configured_or_a_share_of_the_limit() -> None:
    assert memory.cache_bytes(1000, 4, 1 << 30) == 1000
    assert memory.cache_bytes(0, 2, 1 << 30) == int((1 << 30) * memory.CACHE_SHARE / 2)
    assert memory.cache_bytes(0, 1, None) == memory.DEFAULT_CACHE_BYTES


def msgs(n: int, prefix: str = "s") -> GraphMsgs:
    text = "".join(f'<http://example.org/{prefix}/{i}> <http://example.org/p/{i % 20}> "value {i}" .\n'
                   for i in range(n))
    quads = ox.parse(text, format=ox.RdfFormat.N_TRIPLES)
    canonicalizer = Canonicalizer(30, 1024)
    try:
        return GraphMsgsBuilder().add_default_graph(quads).build(canonicalizer)
    finally:
        canonicalizer.close()


def test_the_estimate_is_close_to_what_the_msgs_take() -> None:
    # Python's allocations, traced: the process's RSS did not grow at all when earlier tests
    # (a thousand connections of tests/web/test_front.py) had left freed memory for these to take.
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = msgs(200_000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    estimate = memory.estimated_bytes(len(held), iter(held.ground))
    assert 0.6 * grown <= estimate <= 1.6 * grown, (estimate, grown)


def test_the_cache_evicts_the_oldest_graph_by_bytes_and_skips_one_too_large() -> None:
    a, b = msgs(1000, "a"), msgs(1000, "b")
    size = memory.estimated_bytes(len(a), iter(a.ground))
    cache = MsgCache(int(size * 1.5))
    cache.put("urn:g:a", "v1", a)
    assert cache.get("urn:g:a", "v1") is a and cache.held == (1000, size)
    cache.put("urn:g:b", "v1", b)  # both would exceed the bound: the oldest goes
    assert cache.get("urn:g:a", "v1") is None and cache.get("urn:g:b", "v1") is b
    small = MsgCache(size // 2)
    small.put("urn:g:a", "v1", a)
    assert small.get("urn:g:a", "v1") is None and small.held == (0, 0)


def test_the_runtime_takes_the_bound_and_reports_the_cache(tmp_path: Path) -> None:
    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path), "LUCID_CACHE_BYTES": "123456"}))
    try:
        assert runtime.publisher.cache.max_bytes == 123456
        text = runtime.metrics.render().decode()
        assert "lucid_msg_cache_limit_bytes 123456.0" in text and "lucid_msg_cache_bytes" in text
    finally:
        runtime.close()
    legacy = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path), "LUCID_MSG_CACHE_STATEMENTS": "1000"}))
    try:
        assert legacy.publisher.cache.max_bytes == 1000 * 220
    finally:
        legacy.close()


def test_trim_gives_freed_heap_memory_back() -> None:
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    process = psutil.Process()
    blocks = [libc.malloc(2048) for _ in range(60_000)]  # 120 MiB of small blocks (the heap, not mmap)
    for block in blocks:
        ctypes.memset(block, 1, 2048)
    for block in blocks[:-1]:  # the last one keeps the heap's top: only trimming returns the rest
        libc.free(block)
    held = process.memory_info().rss
    assert memory.trim() is True
    assert process.memory_info().rss < held - 64 * 2**20
    libc.free(blocks[-1])
