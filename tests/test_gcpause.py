"""Cyclic collection is paused only for large changes, and resumed when the last one ends."""

from __future__ import annotations

import gc
import threading

import pytest

from lucid_hub import gcpause


def test_a_large_change_pauses_collection_until_the_last_one_ends() -> None:
    assert gc.isenabled()
    first_in, release = threading.Event(), threading.Event()

    def other() -> None:
        with gcpause.paused_for(gcpause.LARGE_CHANGE):
            first_in.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    assert first_in.wait(30)
    assert not gc.isenabled()
    with gcpause.paused_for(gcpause.LARGE_CHANGE * 2):
        release.set()
        thread.join(30)
        assert not gc.isenabled()  # the other ended, this one still holds the pause
    assert gc.isenabled()


def test_a_small_change_never_pauses_and_a_failure_resumes() -> None:
    with gcpause.paused_for(gcpause.LARGE_CHANGE - 1):
        assert gc.isenabled()
    with pytest.raises(RuntimeError), gcpause.paused_for(gcpause.LARGE_CHANGE):
        assert not gc.isenabled()
        raise RuntimeError("publish failed")
    assert gc.isenabled()


def test_collection_disabled_by_the_operator_stays_disabled() -> None:
    gc.disable()
    try:
        with gcpause.paused_for(gcpause.LARGE_CHANGE):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
