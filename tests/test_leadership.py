"""The leadership lease (lucid_hub.leadership) on SQLite and PostgreSQL: one holder; a lease
that ran out is taken with a new epoch; a holder that finds it taken gives up its roles; a
clean stop hands it over at once; the same data directory's next candidate resumes it."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import update

from lucid_hub.db.models import Lease
from lucid_hub.db.session import Database
from lucid_hub.demo.processes import wait_until
from lucid_hub.leadership import Leadership
from lucid_hub.runtime import replica_id


def database(url: str) -> Database:
    db = Database(url)
    db.upgrade()
    return db


def run_out(db: Database) -> None:
    """As if the holder had died long ago (no waiting for a real lease to run out)."""
    with db.write() as c:
        c.execute(update(Lease).values(expires_at=0.0))


def test_one_holder_and_a_new_epoch_when_a_lease_runs_out(db_url: str) -> None:
    db = database(db_url)
    try:
        a, b = Leadership(db, 30, holder="a"), Leadership(db, 30, holder="b")
        assert a.try_acquire() and a.held and a.epoch == 1
        assert not b.try_acquire() and not b.held
        assert a.try_acquire() and a.epoch == 1  # renewed, same epoch
        run_out(db)
        assert b.try_acquire() and b.epoch == 2
        assert not a.try_acquire() and not a.held  # taken: the old holder no longer counts on it
    finally:
        db.dispose()


def test_a_holder_that_finds_its_lease_taken_gives_up_and_a_waiting_one_takes_over(db_url: str) -> None:
    db = database(db_url)
    a, b = Leadership(db, 0.3, holder="a"), Leadership(db, 0.3, holder="b")
    try:
        assert a.acquire() and not b.acquire()
        assert b.renew(take=True) is None and not b.held  # a holds it
        assert a.renew(take=False) is None and a.held  # renewed
        # a stalls (renews no more): its lease runs out, and the waiting candidate takes it
        wait_until(lambda: b.renew(take=True) == "gained", 10, "the waiting candidate to take the lease")
        assert b.held and b.epoch == 2
        assert b.renew(take=True) is None  # held, nothing changed
        assert a.renew(take=False) == "lost" and not a.held  # a wakes up: its next round finds it taken
        assert a.renew(take=False) is None  # said once
    finally:
        db.dispose()


def test_a_clean_stop_ends_the_lease_at_once(db_url: str) -> None:
    db = database(db_url)
    try:
        a, b = Leadership(db, 30, holder="a"), Leadership(db, 30, holder="b")
        assert a.acquire()
        a.release()
        assert b.try_acquire() and b.epoch == 2
    finally:
        db.dispose()


def test_a_process_that_does_not_take_roles_over_only_keeps_what_it_holds(db_url: str) -> None:
    db = database(db_url)
    try:
        a, command = Leadership(db, 30, holder="a"), Leadership(db, 30, holder="command")
        assert a.acquire() and not command.acquire()
        run_out(db)  # a died: the lease is free
        assert command.renew(take=False) is None and not command.held  # a command's short run takes nothing
        assert command.renew(take=True) == "gained" and command.held  # what a serving candidate does
    finally:
        db.dispose()


def test_a_data_directory_keeps_its_name_across_restarts(tmp_path: Path, db_url: str) -> None:
    name = replica_id(tmp_path)
    assert replica_id(tmp_path) == name
    db = database(db_url)
    try:
        crashed = Leadership(db, 30, holder=name)
        assert crashed.try_acquire()  # ... and the process dies holding it
        restarted = Leadership(db, 30, holder=replica_id(tmp_path))
        assert restarted.try_acquire()  # no waiting for the lease to run out
        other = tmp_path / "other"
        other.mkdir()
        assert not Leadership(db, 30, holder=replica_id(other)).try_acquire()
    finally:
        db.dispose()


def test_a_database_that_does_not_answer_pauses_the_relay_but_does_not_end_the_leadership(db_url: str) -> None:
    db = database(db_url)
    a = Leadership(db, 0.3, holder="a")
    try:
        assert a.acquire()
        looks: list[bool] = []

        def unreachable() -> bool:
            looks.append(True)
            raise ConnectionError("the database does not answer")

        a.try_acquire = unreachable  # type: ignore[method-assign]
        changes = []

        def renewed_and_run_out() -> bool:
            changes.append(a.renew(take=False))
            return not a.held

        wait_until(renewed_and_run_out, 10, "the margin to run out")
        assert looks and set(changes) == {None}  # the relay checks `held`; the roles wait for the database's word
        del a.try_acquire  # it answers again: someone else took the lease meanwhile
        with db.write() as c:
            c.execute(update(Lease).values(holder="b", expires_at=time.time() + 60))
        assert a.renew(take=False) == "lost"
    finally:
        db.dispose()


def test_a_lease_changing_hands_again_and_again_is_flapping_and_the_overview_says_so(tmp_path: Path) -> None:
    """Each process notes the handovers it sees (a new epoch at its look); three within ten
    minutes are "flapping", named on the overview with the epochs. Two handovers are not."""
    from lucid_hub.web.console.attention import attention
    from tests.conftest import running_hub
    from tests.mirror.test_mirror import DEV

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", DEV) as hub:
        lead = hub.runtime.leadership
        assert lead is not None and lead.held and lead.flapping() == []
        other = Leadership(hub.runtime.db, 30, holder="a process fighting over it")
        first = lead.epoch

        def hand_over_and_back() -> None:
            lead.release()
            assert other.acquire()
            other.release()
            assert lead.acquire()

        hand_over_and_back()
        hand_over_and_back()
        assert len(lead.handovers) == 3 and lead.flapping() == []  # (its first look, then two new epochs)
        assert not [i for i in attention(hub.runtime) if i.what == "Leadership flapping"]
        hand_over_and_back()
        flaps = lead.flapping()
        assert [epoch for _at, epoch in flaps] == [first + 2, first + 4, first + 6], flaps  # (the epochs lead saw)
        (item,) = [i for i in attention(hub.runtime) if i.what == "Leadership flapping"]
        assert "changed hands 3 times in 10 minutes" in item.detail and f"epoch {first + 2} to {first + 6}" in item.detail
        assert item.link == "hub" and item.since is not None


def test_a_lease_that_ran_out_is_named_no_leader_until_a_process_takes_it(tmp_path: Path) -> None:
    """The leader died and no candidate took over: the overview says no process relays,
    delivers or evaluates, with the last holder and epoch; a new holder clears it."""
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime
    from lucid_hub.web.console.attention import attention

    runtime = Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data")}))
    try:  # (opened, not started: it took the lease and does not renew it)
        gone = runtime.leadership
        assert gone is not None and gone.held
        assert not [i for i in attention(runtime) if i.what == "No leader"]  # (held)
        run_out(runtime.db)
        (item,) = [i for i in attention(runtime) if i.what == "No leader"]
        assert f"the lease (epoch {gone.epoch}, last held by {gone.holder}) ran out" in item.detail, item.detail
        assert item.link == "hub" and item.since is not None
        assert Leadership(runtime.db, 30, holder="replica-b/42").acquire()
        assert not [i for i in attention(runtime) if i.what == "No leader"]
    finally:
        runtime.close()
