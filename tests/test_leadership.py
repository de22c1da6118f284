"""The leadership lease (lucid_hub.leadership) on SQLite and PostgreSQL: one holder; a lease
that ran out is taken with a new epoch; a holder that finds it taken gives up its roles; a
clean stop hands it over at once; the same data directory's next candidate resumes it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sqlalchemy import update

from lucid_hub.db.models import Lease
from lucid_hub.db.session import Database
from lucid_hub.leadership import Leadership
from lucid_hub.runtime import replica_id
from lucid_hub.tools.hubproc import wait_until


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
    lost: list[str] = []
    gained = threading.Event()
    a, b = Leadership(db, 0.3, holder="a"), Leadership(db, 0.3, holder="b")
    try:
        assert a.try_acquire()
        a.on_loss = lost.append
        a.start(acquired=True)
        b.on_gain = gained.set
        b.start(acquired=b.try_acquire())
        assert not b.held
        a.stop()  # a stalls: it renews no more, and its lease runs out
        assert gained.wait(10) and b.held and b.epoch == 2
        a.start(acquired=True)  # a wakes up: its next look finds the lease taken
        wait_until(lambda: bool(lost), 10, "the old holder to give up")
        assert not a.held
    finally:
        a.stop()
        b.stop()
        db.dispose()


def test_a_clean_stop_ends_the_lease_at_once(db_url: str) -> None:
    db = database(db_url)
    try:
        a, b = Leadership(db, 30, holder="a"), Leadership(db, 30, holder="b")
        assert a.try_acquire()
        a.start(acquired=True)
        a.release()
        assert b.try_acquire() and b.epoch == 2
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
    lost: list[str] = []
    a = Leadership(db, 0.3, holder="a")
    try:
        assert a.try_acquire()
        looks = threading.Event()

        def unreachable() -> bool:
            looks.set()
            raise ConnectionError("the database does not answer")

        a.try_acquire = unreachable  # type: ignore[method-assign]
        a.on_loss = lost.append
        a.start(acquired=True)
        wait_until(lambda: looks.is_set() and not a.held, 10, "the margin to run out")
        assert lost == []  # the relay checks `held`; the roles wait for the database's word
        del a.try_acquire  # it answers again: someone else took the lease meanwhile
        with db.write() as c:
            c.execute(update(Lease).values(holder="b", expires_at=time.time() + 60))
        wait_until(lambda: bool(lost), 10, "the leadership to end")
    finally:
        a.stop()
        db.dispose()
