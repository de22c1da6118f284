"""Guard processes are forks of a zygote that imported their modules once: each is its own
process under its own limits, killed at its deadline, and the next one starts at once."""

from __future__ import annotations

import os

import psutil
import pytest

from lucid_hub.demo.processes import wait_until
from lucid_hub.guard import Forked, Frame, GuardFailed, GuardProcess, Zygote


def test_a_guard_is_a_fork_of_the_zygote_with_its_own_environment_and_limit() -> None:
    first = GuardProcess("tests.guard_targets:whoami", 300, {"LUCID_TEST_MARKER": "first"})
    second = GuardProcess("tests.guard_targets:whoami", 400, {"LUCID_TEST_MARKER": "second"})
    try:
        one, two = first.call(Frame(), 30).header, second.call(Frame(), 30).header
    finally:
        first.kill()
        second.kill()
    zygote = Zygote.here()
    assert isinstance(first.proc, Forked) and one["pid"] == first.proc.pid != os.getpid()
    assert one["ppid"] == two["ppid"] == zygote.proc.pid  # forked by the zygote, not started by us
    assert (one["marker"], two["marker"]) == ("first", "second")
    assert (one["limit"], two["limit"]) == (300 << 20, 400 << 20)
    assert not first.alive() and not second.alive()
    wait_until(lambda: not psutil.pid_exists(one["pid"]), 10, "the killed guard reaped")  # (no zombie is left)


def test_a_guard_over_its_deadline_is_killed_and_the_next_one_answers() -> None:
    guard = GuardProcess("tests.guard_targets:forever", 300)
    with pytest.raises(GuardFailed, match=r"work limit of 0\.5 s"):
        guard.call(Frame(), 0.5)
    pid = guard.proc.pid
    guard.kill()
    assert not guard.alive()
    wait_until(lambda: not psutil.pid_exists(pid), 10, "the killed guard reaped")  # (the zygote's child: the kernel's)
    again = GuardProcess("tests.guard_targets:whoami", 300)
    try:
        assert again.call(Frame(), 30).header["pid"] != pid
    finally:
        again.kill()


def test_a_dead_zygote_is_replaced_and_a_closed_one_ends() -> None:
    zygote = Zygote.here()
    zygote.proc.kill()
    zygote.proc.wait()
    guard = GuardProcess("tests.guard_targets:whoami", 300)  # a new zygote
    try:
        assert guard.call(Frame(), 30).header["ppid"] == Zygote.here().proc.pid != zygote.proc.pid
    finally:
        guard.kill()
    mine = Zygote()
    mine.close()  # its socket closed: it reads the end and exits (close waits for it)
    assert mine.proc.returncode == 0
