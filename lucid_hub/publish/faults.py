"""Test-only crash points: with LUCID_FAULT=name the process exits at that point at once, as a
kill would, so that the recovery tests can show nothing is lost between any two steps."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

FAULT_ENV = "LUCID_FAULT"


def crash_point(name: str, graph: str = "") -> None:
    """Exit here if LUCID_FAULT names this point. The hub's own graphs (the policy graph,
    published at start) never crash: the points are for the publishes a test makes."""
    if os.environ.get(FAULT_ENV) == name and not graph.startswith("urn:lucid-hub:"):
        log.warning("fault injection: exiting at %s", name)
        os._exit(137)
