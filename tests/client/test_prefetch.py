"""`prefetched`: pages of a remote archive fetched ahead by a thread, in order, errors and all."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from lucid_hub.client import prefetched
from lucid_hub.errors import RemoteRefusedError


def test_items_arrive_in_order_from_another_thread() -> None:
    producers: set[str] = set()

    def items() -> Iterator[int]:
        for i in range(50):
            producers.add(threading.current_thread().name)
            yield i

    assert list(prefetched(items())) == list(range(50))
    assert producers == {"lucid-prefetch"}


def test_what_the_producer_raises_is_raised_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise RemoteRefusedError("the publisher's archive answered 404", 404)

    got: list[int] = []
    with pytest.raises(RemoteRefusedError) as raised:
        for item in prefetched(items()):
            got.append(item)
    assert got == [1, 2] and raised.value.status == 404


def test_leaving_the_loop_early_stops_the_producer() -> None:
    finished = threading.Event()
    produced: list[int] = []

    def items() -> Iterator[int]:
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            finished.set()

    for item in prefetched(items(), ahead=2):
        if item == 3:
            break
    assert finished.wait(10)  # the producer stopped (its generator was closed) rather than running on
    assert len(produced) <= 3 + 1 + 2 + 1  # what was taken, one in hand, the queue, one waiting to be put
