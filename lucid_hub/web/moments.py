"""One way of showing a moment on every page: how long ago (or how soon), with the exact time
and its zone (UTC) on hover and in the markup (`<time datetime=…>`)."""

from __future__ import annotations

from datetime import UTC, datetime

from markupsafe import Markup


def aware(value: datetime | str) -> datetime:
    """A moment as stored or sent (a datetime, naive from SQLite, or ISO text) with its zone."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)  # (the database keeps UTC)


def relative(moment: datetime, now: datetime) -> str:
    """"just now", "5 min ago", "3 h ago", "2 days ago"; "in 5 min" for what is to come."""
    seconds = (now - moment).total_seconds()
    ahead, seconds = seconds < 0, abs(seconds)
    if seconds < 10:
        return "just now"
    for size, unit in ((86400, "days"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size:
            count = int(seconds // size)
            text = f"{count} {'day' if unit == 'days' and count == 1 else unit}"
            return f"in {text}" if ahead else f"{text} ago"
    return "just now"


def moment(value: datetime | str | None, now: datetime | None = None) -> Markup:
    """The Jinja filter `moment`: a `<time>` element, relative, the exact UTC time as its title."""
    if value is None or value == "":
        return Markup("—")
    when = aware(value).astimezone(UTC)
    exact = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    text = relative(when, now or datetime.now(UTC))
    return Markup('<time datetime="{}" title="{}">{}</time>').format(when.isoformat(), exact, text)  # (escaped)
