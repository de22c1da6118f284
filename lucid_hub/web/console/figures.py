"""The console's figures and charts: what each page shows that moves (and its live updates)."""

from __future__ import annotations

import concurrent.futures
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lucid_hub.errors import NotFoundError
from lucid_hub.web.http import runtime
from lucid_hub.web.moments import aware, relative

PAGE = 50  # patches or graphs a page


FOLD = 160  # literals longer than this are folded


LAGGING = 100  # a subscription or mirror this many patches behind needs attention


KEY_AGE_DAYS = 365  # a signing key older than this is named for rotation (docs/operations.md, Key rotation)


RULE_FIRINGS = 200  # the newest rule firings the overview looks at for failures


@dataclass
class Bar:
    """One bar of a server-drawn chart: what its tooltip says, and its geometry (SVG units of
    a 100 by 48 view, the baseline at 44)."""

    title: str
    x: float
    y: float
    height: float


@dataclass
class Chart:
    """A bar chart as the overview draws it, and as its live updates redraw it."""

    caption: str
    total: int
    unit: str
    bars: list[Bar]
    span: str  # the first and last bars' labels
    axis: str = ""  # what the y-axis counts: "patches an hour"
    top: str = ""  # the y-axis' highest mark: the highest bar's count ("" while every bar is 0)
    first: str = ""  # the x-axis' marks: the first and last bars' labels
    last: str = ""

    def update(self) -> dict[str, Any]:
        """What a live update sends for it: each bar's (title, y, height), its label, its axes' marks."""
        return {"label": f"{self.caption}: {self.total} {self.unit}", "top": self.top, "first": self.first,
                "last": self.last, "bars": [[b.title, round(b.y, 2), round(b.height, 2)] for b in self.bars]}


def _chart(caption: str, unit: str, bars: list[tuple[str, int, str]], axis: str) -> Chart:
    """A chart of (label, height count, tooltip) bars, scaled to the highest (the y-axis' top
    mark; `axis` says what it counts)."""
    highest = max((count for _label, count, _title in bars), default=0)
    top = highest or 1
    width = 100 / len(bars)
    drawn = [Bar(title, i * width, 44 - 40 * count / top, 40 * count / top)
             for i, (_label, count, title) in enumerate(bars)]
    return Chart(caption, sum(count for _label, count, _title in bars), unit, drawn,
                 f"{bars[0][0]} to {bars[-1][0]}", axis, str(highest) if highest else "", bars[0][0], bars[-1][0])


def _patch_chart(counts: dict[datetime, int], start: datetime, step: timedelta, n: int, label: str,
                 caption: str, axis: str) -> Chart:
    """`n` bars of `step` from `start`, each the sum of the hourly patch counts inside it."""
    sums = [0] * n
    for hour, count in counts.items():
        index = int((hour - start) / step)
        if 0 <= index < n:
            sums[index] += count
    labels = [(start + i * step).strftime(label) for i in range(n)]
    return _chart(caption, "patches", [(text, c, f"{text}: {c}") for text, c in zip(labels, sums, strict=True)], axis)


DELIVERY_MINUTES = 60  # the minutes the deliveries chart shows


def _delivery_chart(delivery: Any, at: datetime) -> tuple[Chart, int, int]:
    """Deliveries a minute over the last hour (every delivering process's, from the table the
    recorders add to), the current rate (the last whole minute and this one so far), and the
    failed attempts of the hour."""
    current = at.replace(second=0, microsecond=0)
    start = current - timedelta(minutes=DELIVERY_MINUTES - 1)
    counts = delivery.by_minute(start)
    bars = []
    for i in range(DELIVERY_MINUTES):
        minute = start + timedelta(minutes=i)
        delivered, failed = counts.get(minute, (0, 0))
        text = minute.strftime("%H:%M")
        bars.append((text, delivered, f"{text}: {delivered} delivered" + (f", {failed} failed" if failed else "")))
    recent = counts.get(current, (0, 0))[0] + counts.get(current - timedelta(minutes=1), (0, 0))[0]
    rate = round(recent * 60 / (60 + (at - current).total_seconds()))
    failed = sum(f for _d, f in counts.values())
    return _chart("Deliveries per minute, last hour", "patches delivered", bars, "patches a minute"), rate, failed


def key_age_days(path: Path) -> int:
    """Days since the active signing key was written (its file's time)."""
    try:
        return int((time.time() - path.stat().st_mtime) // 86400)
    except OSError:
        return 0


def _states(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "none"


def overview_figures(hub: Any, mirrors: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], dict[str, Chart]]:
    """The overview's moving figures and charts (the page's, and each live update's);
    `mirrors` as the page read them, or read here."""
    total_graphs = hub.archive.graph_page(0, 1, internal=False)[1]  # (the hub's own graphs are not published)
    mirrors = hub.mirror_registry.list() if mirrors is None else mirrors
    subscriptions, failures = hub.hub.states()
    at = datetime.now(UTC)
    now = at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)  # the end of this hour
    week_start = at.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=6)  # (calendar days, UTC)
    week = hub.archive.per_hour(week_start)
    day_start = now - timedelta(hours=24)
    charts = {"day": _patch_chart({h: c for h, c in week.items() if h >= day_start}, day_start, timedelta(hours=1),
                                  24, "%H:00", "Patches per hour, last 24 hours (UTC)", "patches an hour"),
              "week": _patch_chart(week, week_start, timedelta(days=1), 7, "%a %d",
                                   "Patches per day, last 7 days (UTC; today so far)", "patches a day")}
    charts["deliveries"], rate, failed = _delivery_chart(hub.delivery, at)
    figures = {"published": total_graphs - len(mirrors), "mirrored": len(mirrors),
               "subscriptions": _states(Counter(subscriptions)),
               "mirror_states": _states(Counter(m["state"] for m in mirrors)),
               "failures": failed, "failures_ever": failures, "deliveries_per_minute": rate}
    for name, chart in charts.items():
        figures[f"{name}_total"], figures[f"{name}_span"] = chart.total, chart.span
    return figures, charts


def subscription_figures(subscriptions: list[dict[str, Any]]) -> dict[str, str]:
    """Each subscription's moving figures, named `s<id>.<what>` (its row on the subscribers
    and graph pages, and their live updates): state, lag in patches and in time, last success,
    failures with the last reason."""
    hub, at = runtime(), datetime.now(UTC)

    def undelivered(s: dict[str, Any]) -> tuple[str, int]:  # the oldest patch not yet delivered
        return s["graph"], int(s["delivered_seq"]) + 1

    made_at = hub.archive.created_times(undelivered(s) for s in subscriptions if s["lag"])
    out: dict[str, str] = {}
    for s in subscriptions:
        made = made_at.get(undelivered(s)) if s["lag"] else None  # behind in time: since it was made
        key = f"s{s['id']}."
        out |= {f"{key}state": s["state"], f"{key}lag": f"{s['lag']} patches",
                f"{key}behind": f"for {_duration(at - made)}" if made else "",
                f"{key}last": _ago(s["last_success_at"], at), f"{key}failures": str(s["failures"]),
                f"{key}error": s["last_error"] or ""}
    return out


def _ago(when: str | None, at: datetime) -> str:
    """A moment in a live figure (text only): how long ago, with the UTC time of day."""
    if not when:
        return "never"
    moment = aware(when).astimezone(UTC)
    return f"{relative(moment, at)} ({moment:%H:%M:%S} UTC)"


def _graph_row(graph: str) -> Any:
    """The archive's row of a graph (head, length); NotFoundError for one it does not hold."""
    row = runtime().archive.graphs_of([graph]).get(graph)
    if row is None:
        raise NotFoundError(f"unknown graph <{graph}>")
    return row


def graph_figures(graph: str, seen: int | None = None, ids: list[int] | None = None) -> dict[str, Any]:
    """A graph's moving figures: version, size, patches, how it is kept, how many patches are
    newer than the page (loaded at `seen`), and its subscribers' rows (those with `ids`)."""
    hub, row = runtime(), _graph_row(graph)
    mirror = next((m for m in hub.mirror_registry.list() if m["graph"] == graph), None)
    newer = row.length - seen if seen is not None else 0
    return {"head": row.head or "(none)", "size": str(hub.archive.size(graph)), "length": str(row.length),
            "kind": f"mirrored from {mirror['hub']} ({mirror['state']}, {mirror['quarantined']} quarantined)"
            if mirror else "published by this hub",
            "newer": f"{newer} patches since this page was loaded: reload to see them" if newer > 0 else "",
            **subscription_figures(hub.hub.subscriptions(ids=ids) if ids else [])}


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def mirror_figures(mirrors: list[dict[str, Any]], lags: dict[str, str]) -> dict[str, str]:
    """The mirrors' moving figures, named `m<id>.<what>`: state, head, lag behind the publisher
    (`lags`, as `_lags` asked them), counts and the last error."""
    figures: dict[str, str] = {}
    for m in mirrors:
        key = f"m{m['id']}"
        figures |= {f"{key}.state": m["state"], f"{key}.head": m["head"] or "(none)",
                    f"{key}.length": f"{m['length']} patches",
                    f"{key}.lag": lags.get(m["id"], f"not followed ({m['state']})"),
                    f"{key}.counts": f"{m['applied']} · {m['quarantined']} · {m['hmac_failures']}",
                    f"{key}.error": m["last_error"] or "none"}
    return figures


# Seconds the mirrors page waits for the publishers to say how far behind each mirror is.
LAG_WAIT = 2.0


_asking = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="console-lag")


def _lags(mirrors: list[dict[str, Any]]) -> dict[str, str]:
    """Each mirror's lag behind its publisher in words, asked of the publishers at once; what
    does not answer within LAG_WAIT (or refuses) says so instead of holding the page."""
    service = runtime().mirrors
    asked = {m["id"]: _asking.submit(service.publisher_lag, m["id"]) for m in mirrors if m["state"] == "active"}
    done, _ = concurrent.futures.wait(asked.values(), timeout=LAG_WAIT)
    out = {}
    for mirror_id, future in asked.items():
        if future not in done:
            out[mirror_id] = "unknown: the publisher did not answer in time"
        elif future.exception() is not None:
            out[mirror_id] = f"unknown: {future.exception()}"[:300]
        else:
            count, more = future.result()
            out[mirror_id] = "up to date" if count == 0 else f"{count}{'+' if more else ''} patches behind"
    return out
