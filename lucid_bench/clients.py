"""Load clients in processes of their own (as a load generator's would be), so that their
Python does not share an interpreter with the hub or the benchmark."""

from __future__ import annotations

import subprocess
import sys
import time

import click


def timed_clients(script: str, arguments: list[list[str]], authorization: list[str], what: str) -> float:
    """Run `script` once per argument list, all started together: each reads its
    Authorization header, then "go", from stdin (the token never on a command line, start-up
    not timed). Seconds from "go" until the last one exits; ClickException with the first
    failure's last words."""
    procs = []
    for args, auth in zip(arguments, authorization, strict=True):
        procs.append(subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
        assert procs[-1].stdin is not None
        procs[-1].stdin.write(auth.encode() + b"\n")
        procs[-1].stdin.flush()
    start = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
    failures = [p.communicate()[1].decode().strip() for p in procs if p.wait() != 0]
    elapsed = time.perf_counter() - start
    if failures:
        raise click.ClickException(f"{what} failed under load: {failures[0][-300:]}")
    return elapsed
