"""Every page shows a moment one way: how long ago, the exact UTC time on hover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lucid_hub.web.moments import moment, relative

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_relative_times_read_as_people_say_them() -> None:
    assert relative(NOW - timedelta(seconds=3), NOW) == "just now"
    assert relative(NOW - timedelta(seconds=42), NOW) == "42 s ago"
    assert relative(NOW - timedelta(minutes=5, seconds=20), NOW) == "5 min ago"
    assert relative(NOW - timedelta(hours=3, minutes=59), NOW) == "3 h ago"
    assert relative(NOW - timedelta(days=1, hours=2), NOW) == "1 day ago"
    assert relative(NOW - timedelta(days=9), NOW) == "9 days ago"
    assert relative(NOW + timedelta(minutes=10), NOW) == "in 10 min"


def test_a_moment_is_a_time_element_with_the_exact_utc_time_whatever_it_came_as() -> None:
    naive = datetime(2026, 11, 25, 11, 55)  # (as SQLite gives it back: UTC without a zone)
    shown = str(moment(naive, NOW))
    assert shown == ('<time datetime="2026-11-25T11:55:00+00:00" title="2026-11-25 11:55:00 UTC">5 min ago</time>')
    assert str(moment("2026-11-25T13:55:00+02:00", NOW)) == str(moment(naive, NOW))  # another zone: the same moment
    assert str(moment(None, NOW)) == "—"
