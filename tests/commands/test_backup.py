"""Backup and restore (lucid_hub.commands.backup) with the real command: a hub backed up while it
publishes, restored into a new data directory and database, every patch verified, the store
equal to a rebuild, nothing acknowledged before the backup lost, and a partner's mirror
following the restored hub at the same URL. Bad input: a wrong passphrase, a file that is not
a backup, a target that is not empty; each a one-line error and nothing half-written."""

from __future__ import annotations

import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from lucid_hub.demo.ports import free_port
from tests.conftest import POSTGRES_ADMIN_URL, RunningHub, running_hub, whole_canonical
from tests.mirror.test_mirror import DEV, G, add_mirror, mirror, publish, version, wait

PASSPHRASE = "a passphrase for the keys"


class Publishing:
    """Publishes versions of the graph in a loop, recording what each 201 acknowledged."""

    def __init__(self, hub: RunningHub) -> None:
        self.hub = hub
        self.acknowledged: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 100
        while not self.stop.is_set():
            self.acknowledged.append(publish(self.hub, version(i)))
            i += 1

    def __enter__(self) -> Publishing:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def fresh_postgres(name: str) -> str:
    assert POSTGRES_ADMIN_URL is not None
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_hub_backed_up_while_it_publishes_is_restored_verified_and_followed(
        tmp_path: Path, kind: str, run_cli) -> None:  # type: ignore[no-untyped-def]
    if kind == "postgresql" and POSTGRES_ADMIN_URL is None:
        pytest.skip("PostgreSQL is not reachable here (set LUCID_TEST_POSTGRES_URL)")
    source_db = f"sqlite:///{tmp_path / 'acme.db'}" if kind == "sqlite" else fresh_postgres("lucid_backup_src")
    target_db = f"sqlite:///{tmp_path / 'restored.db'}" if kind == "sqlite" else fresh_postgres("lucid_backup_dst")
    (tmp_path / "passphrase").write_text(PASSPHRASE + "\n", encoding="utf-8")
    port = free_port()
    backup_file = tmp_path / "acme.tar.gz"
    with running_hub(tmp_path / "globex", f"sqlite:///{tmp_path / 'globex.db'}", DEV) as partner:
        with running_hub(tmp_path / "acme", source_db, DEV, port=port) as acme:
            first = publish(acme, version(0))
            add_mirror(acme, partner)
            wait(lambda: mirror(partner)["head"] == first, show=lambda: mirror(partner))
            jwks = acme.runtime.keys.jwks()
            with Publishing(acme) as publishing:
                wait(lambda: len(publishing.acknowledged) >= 3)
                before = list(publishing.acknowledged)  # acknowledged before the backup began
                made = run_cli("backup", backup_file, "--passphrase-file", tmp_path / "passphrase",
                               env={"LUCID_DATA_DIR": str(tmp_path / "acme"), "LUCID_DATABASE_URL": source_db})
                wait(lambda: len(publishing.acknowledged) >= len(before) + 2)  # it went on publishing
            assert made.code == 0, made.err
            assert made.out.startswith("backed up ") and "keys encrypted" in made.out
            with tarfile.open(backup_file) as tar:  # the keys are not readable in the backup
                assert not [n for n in tar.getnames() if n.startswith("keys/")] and "keys.tar.sealed" in tar.getnames()
            published = {g: acme.runtime.publisher.content(g) for g, _h in acme.runtime.archive.heads()}
        env = {"LUCID_DATA_DIR": str(tmp_path / "restored"), "LUCID_DATABASE_URL": target_db}
        restored = run_cli("restore", backup_file, "--passphrase-file", tmp_path / "passphrase", env=env)
        assert restored.code == 0, restored.err
        assert "every patch verified" in restored.out and "the store was rebuilt" in restored.out
        with running_hub(tmp_path / "restored", target_db, DEV, port=port) as again:
            rt = again.runtime
            assert rt.keys.jwks() == jwks  # partners' pinned keys still verify what it signs
            history = [r.id for r in rt.archive.history(G)]
            assert set(before) <= set(history)  # nothing acknowledged before the backup is lost
            for graph, head in rt.archive.heads():  # the store holds what the archive replays
                assert whole_canonical(rt.publisher.content(graph)[1]) == whole_canonical(
                    rt.publisher.content(graph, head)[1])
                version_then, statements = published[graph]
                if version_then == head:
                    assert whole_canonical(statements) == whole_canonical(rt.publisher.content(graph)[1])
            # The partner's mirror follows the restored hub at the same URL (re-cloning when it
            # had applied patches published after the backup, which the restored hub lacks).
            newest = publish(again, version(999))
            wait(lambda: mirror(partner)["head"] == newest and mirror(partner)["state"] == "active", timeout=60,
                 show=lambda: mirror(partner))
            ours = again.http.get(f"{again.url}/graphs", params={"graph": G},
                                  headers={"Accept": "application/n-triples"}, timeout=30).text
            theirs = partner.http.get(f"{partner.url}/graphs", params={"graph": G},
                                      headers={"Accept": "application/n-triples"}, timeout=30).text
            assert whole_canonical(_lines(ours)) == whole_canonical(_lines(theirs))


def _lines(text: str) -> list[str]:
    return [line[:-2] for line in text.splitlines() if line.endswith(" .")]


def test_bad_backups_and_targets_are_one_line_errors_leaving_nothing(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "passphrase").write_text(PASSPHRASE, encoding="utf-8")
    (tmp_path / "wrong").write_text("not the passphrase at all", encoding="utf-8")
    (tmp_path / "short").write_text("short", encoding="utf-8")
    source = {"LUCID_DATA_DIR": str(tmp_path / "acme")}
    with running_hub(tmp_path / "acme", f"sqlite:///{tmp_path / 'acme' / 'lucid-hub.db'}", DEV) as acme:
        publish(acme, version(1))
        made = run_cli("backup", tmp_path / "b.tar.gz", "--passphrase-file", tmp_path / "passphrase", env=source)
        assert made.code == 0, made.err
        plain = run_cli("backup", tmp_path / "plain.tar.gz", "--keys", "plain", env=source)
        assert plain.code == 0 and "keys plain" in plain.out
        no_choice = run_cli("backup", tmp_path / "c.tar.gz", env=source)
        short = run_cli("backup", tmp_path / "d.tar.gz", "--passphrase-file", tmp_path / "short", env=source)
    cases: dict[str, tuple[Any, ...]] = {
        "does not open the backup's keys": ("restore", tmp_path / "b.tar.gz", "--passphrase-file", tmp_path / "wrong"),
        "keys are encrypted: give --passphrase-file": ("restore", tmp_path / "b.tar.gz"),
        "not a readable lucid-hub backup": ("restore", tmp_path / "passphrase"),
    }
    for expected, args in cases.items():
        target = tmp_path / f"target-{len(expected)}"
        result = run_cli(*args, env={"LUCID_DATA_DIR": str(target)})
        assert result.code != 0 and expected in result.err and len(result.err.strip().splitlines()) == 1, result.err
        assert not (target / "keys").exists() and not (target / "lucid-hub.db").exists()  # nothing half-written
    assert no_choice.code != 0 and "give --passphrase-file, or --keys plain" in no_choice.err
    assert short.code != 0 and "shorter than 12 bytes" in short.err
    not_empty = run_cli("restore", tmp_path / "plain.tar.gz", env=source)  # into the hub it came from
    assert not_empty.code != 0 and "holds keys already: restore into a new data directory" in not_empty.err
    ok = run_cli("restore", tmp_path / "plain.tar.gz", env={"LUCID_DATA_DIR": str(tmp_path / "elsewhere")})
    assert ok.code == 0 and "every patch verified" in ok.out, ok.err
    assert oct((tmp_path / "elsewhere" / "keys" / "signing-key.pem").stat().st_mode & 0o777) == "0o600"
    assert PASSPHRASE not in "".join(r.out + r.err for r in (made, plain, ok))
