"""Functions guard processes run in the tests (lucid_hub.guard targets must be importable)."""

from __future__ import annotations

import pyoxigraph as ox

from lucid_hub.guard import Frame


def oxigraph_service(request: Frame) -> Frame:
    """Let pyoxigraph call a SERVICE endpoint directly, as if a check had missed it."""
    try:
        list(ox.Store().query(f"SELECT * WHERE {{ SERVICE <{request.header['url']}> {{ ?s ?p ?o }} }}"))
    except OSError as exc:
        return Frame({"status": "error", "message": str(exc)})
    return Frame({"status": "ok", "message": "the SERVICE call went through"})


def whoami(request: Frame) -> Frame:
    """The guard's process, its parent, its environment's marker and its memory limit."""
    import os
    import resource

    return Frame({"pid": os.getpid(), "ppid": os.getppid(), "marker": os.environ.get("LUCID_TEST_MARKER"),
                  "limit": resource.getrlimit(resource.RLIMIT_AS)[0]})


def forever(request: Frame) -> Frame:
    """Work that never ends (until the guard is killed at its deadline)."""
    while True:
        pass
