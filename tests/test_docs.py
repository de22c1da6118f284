"""The shell examples of README.md and docs/ as a user meets them.

Every ```sh block is one of three kinds, by its info string:
- `sh`: an example that runs as written. A file's examples run in order in one bash session
  (in an empty folder, `set -euo pipefail`, no LUCID_* settings from outside, the ports 8080
  and 8081 mapped to free ones), and must succeed.
- `sh synopsis`: usage with placeholders, or commands for a cluster that is not here
  (kubectl, helm, spark-submit): each `lucid-hub` command in it must exist with every option
  it names.
- `sh install`: the README's two commands, which CI runs itself (`.ci/run`, from a fresh clone).
An unmarked block, or one of another kind, fails this test: nothing is skipped silently.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from lucid_hub.cli import cli
from lucid_hub.demo.ports import free_port
from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
KINDS = {"sh", "sh synopsis", "sh install"}
_FENCE = re.compile(r"^```(\S.*)?$")


@dataclass
class Block:
    path: Path
    line: int
    kind: str
    text: str


def blocks(path: Path) -> list[Block]:
    """The fenced shell blocks of a Markdown file (other fences are read past whole)."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    inside: str | None = None
    current: Block | None = None
    for number, line in enumerate(lines, 1):
        if inside is None:
            fence = _FENCE.match(line)
            if fence is not None:
                inside = (fence.group(1) or "").strip()
                if inside.split()[:1] and inside.split()[0] in ("sh", "bash", "shell", "console"):
                    current = Block(path, number, inside, "")
            continue
        if line.startswith("```"):
            if current is not None:
                out.append(current)
            inside, current = None, None
        elif current is not None:
            current.text += line + "\n"
    return out


ALL = [b for path in DOCS for b in blocks(path)]


def test_every_shell_block_says_how_it_is_checked() -> None:
    unmarked = [f"{b.path.name}:{b.line} ({b.kind})" for b in ALL if b.kind not in KINDS]
    assert unmarked == [], "shell blocks without one of " + ", ".join(sorted(KINDS)) + ": " + ", ".join(unmarked)
    assert [b.kind for b in ALL if b.path.name == "README.md"][:2] == ["sh install", "sh install"]


# --- synopses: the commands and options exist ----------------------------------------------

def _commands(text: str) -> list[list[str]]:
    """Each `lucid-hub` command line of a block (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
            try:
                words = shlex.split(part.replace("[", " ").replace("]", " ").replace("…", "X"))
            except ValueError:
                words = part.split()
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                words = words[1:]
            if words[:1] == ["lucid-hub"]:
                found.append(words[1:])
    return found


def _check_command(words: list[str], where: str) -> None:
    command: click.Command = cli
    path = ["lucid-hub"]
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.get_command(click.Context(command), words[0])
        if sub is None:
            if words[0].isupper() or words[0] in ("X",):  # a placeholder argument
                break
            raise AssertionError(f"{where}: `{' '.join(path)}` has no command {words[0]!r}")
        command, path, words = sub, [*path, words[0]], words[1:]
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for word in words:
        if word.startswith("--"):
            option = word.split("=", 1)[0]
            assert option in known, f"{where}: `{' '.join(path)}` has no option {option} (known: {sorted(known)})"


@pytest.mark.parametrize("block", [b for b in ALL if b.kind in ("sh synopsis", "sh install")],
                         ids=lambda b: f"{b.path.name}:{b.line}")
def test_synopses_name_commands_and_options_that_exist(block: Block) -> None:
    for words in _commands(block.text):
        _check_command(words, f"{block.path.name}:{block.line}")


# --- examples: they run as written -----------------------------------------------------------

RUNNABLE = sorted({b.path for b in ALL if b.kind == "sh"})


def script(path: Path, ports: dict[str, str]) -> str:
    body = "\n".join(f"# {path.name}:{b.line}\n{b.text}" for b in ALL if b.path == path and b.kind == "sh")
    for old, new in ports.items():
        body = body.replace(old, new)
    # Whatever the examples leave running is stopped with the session.
    return "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body


@pytest.mark.slow
@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_the_examples_run_as_written(path: Path, tmp_path: Path) -> None:
    ports = {"8080": str(free_port()), "8081": str(free_port())}
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUCID_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path)  # (the CLI's caches, gunicorn's files: this run's own)
    done = subprocess.run(["bash", "-c", script(path, ports)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    logs = "".join(f"\n--- {log}\n{log.read_text(errors='replace')[-2000:]}" for log in tmp_path.rglob("*.log")
                   if not any(part.startswith("store") for part in log.parts))  # (the hubs' logs, not RocksDB's)
    assert done.returncode == 0, f"{path.name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}{logs}"


def test_there_are_examples_that_run() -> None:
    assert {p.name for p in RUNNABLE} >= {"README.md", "tutorial-two-hubs.md"}


# --- text meant for users speaks of the product ----------------------------------------------

USER_TEXT = [p for p in DOCS if p.name not in ("decisions.md", "BENCHMARKS.md")]
CODE_TEXT = [*sorted((REPO / "lucid_hub").rglob("*.py")), *sorted((REPO / "lucid_hub").rglob("*.html")),
             *sorted((REPO / "migrations").rglob("*.py"))]
_PROJECT_HISTORY = re.compile(r"\b(?:issues?|decisions?) \d+", re.IGNORECASE)


def test_user_facing_text_speaks_of_the_product_not_of_its_issues() -> None:
    """Docs for users, the code's docstrings and messages, and migration names cite no issue
    or decision numbers (decisions.md and BENCHMARKS.md are the project's records of them)."""
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}" for path in [*USER_TEXT, *CODE_TEXT]
             for n, line in enumerate(path.read_text().splitlines(), 1) if _PROJECT_HISTORY.search(line)]
    assert found == [], "\n".join(found)
