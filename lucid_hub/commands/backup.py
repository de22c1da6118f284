"""Backing a hub up and restoring it (docs/operations.md, "Backup and restore").

A backup is one `.tar.gz`: the database as one consistent snapshot taken while the hub runs
(SQLite's online backup API; PostgreSQL's `pg_dump`, one transaction's snapshot), the signing
keys (encrypted with a passphrase by default: AES-256-GCM, the key from scrypt), and a manifest
(graphs, heads, patch count, schema revision). The RDF store is not in it: it is a cache of the
archive, rebuilt at restore. A restore goes into a new data directory and an empty database,
upgrades the schema if the backup is older, verifies every archived patch (its id, signature
and place in its chain, with the restored keys, or a mirror's pinned ones) and rebuilds the
store, so that what it says is restored is what partners will verify.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError, InputError, PatchVerificationError

FORMAT = 1
MANIFEST = "manifest.json"
KEYS_SEALED = "keys.tar.sealed"
_SCRYPT = {"n": 2**15, "r": 8, "p": 1}  # OWASP's minimum for scrypt (32 MiB a derivation)


# --- the keys, sealed ------------------------------------------------------------------------

def _key_from(passphrase: bytes, salt: bytes) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return Scrypt(salt=salt, length=32, **_SCRYPT).derive(passphrase)


def seal(data: bytes, passphrase: bytes) -> bytes:
    """AES-256-GCM under a key derived from the passphrase: salt (16) + nonce (12) + ciphertext."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    salt, nonce = secrets.token_bytes(16), secrets.token_bytes(12)
    return salt + nonce + AESGCM(_key_from(passphrase, salt)).encrypt(nonce, data, b"lucid-hub keys")


def unseal(blob: bytes, passphrase: bytes) -> bytes:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    salt, nonce, sealed = blob[:16], blob[16:28], blob[28:]
    try:
        return AESGCM(_key_from(passphrase, salt)).decrypt(nonce, sealed, b"lucid-hub keys")
    except InvalidTag:
        raise InputError("the passphrase does not open the backup's keys (or they were altered)") from None


def read_passphrase(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        passphrase = path.read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise InputError(f"cannot read the passphrase file {path}: {exc.strerror}") from None
    if len(passphrase) < 12:
        raise InputError(f"the passphrase in {path} is shorter than 12 bytes")
    return passphrase


def _tar_of(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(directory, arcname="keys")
    return buffer.getvalue()


# --- the database --------------------------------------------------------------------------

def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """A libpq URL without the password, and the environment that carries it (a password in
    an argument would show in the process list)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    env = {**os.environ}
    if parsed.password:
        env["PGPASSWORD"] = str(parsed.password)
    plain = parsed.set(drivername="postgresql", password=None)
    return plain.render_as_string(hide_password=False), env


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"{name} is not installed: PostgreSQL's client tools are needed to back up and restore "
                          "a PostgreSQL database (Debian: postgresql-client)")
    return found


def _dump_database(url: str, target: Path) -> tuple[str, dict[str, str | None], int]:
    """The database's snapshot into `target`: its kind (sqlite, postgresql), and the graphs'
    heads and the number of patches as that very snapshot holds them."""
    if url.startswith("sqlite"):
        source = url.split("///", 1)[-1]
        if not Path(source).is_file():
            raise InputError(f"no hub database at {source}")
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)  # a consistent copy while the hub writes (SQLite's online backup)
        with sqlite3.connect(target) as copy:
            heads = dict(copy.execute("SELECT iri, head FROM graphs ORDER BY iri").fetchall())
            count = int(copy.execute("SELECT count(*) FROM patches").fetchone()[0])
        return "sqlite", heads, count
    from sqlalchemy import create_engine, text

    # pg_dump reads the snapshot this transaction exported, so the heads read here are the
    # dump's exactly, whatever the hub commits meanwhile.
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
            snapshot = str(conn.execute(text("SELECT pg_export_snapshot()")).scalar())
            heads = {str(iri): head for iri, head in conn.execute(text("SELECT iri, head FROM graphs ORDER BY iri"))}
            count = int(conn.execute(text("SELECT count(*) FROM patches")).scalar() or 0)
            plain, env = _libpq(url)
            done = subprocess.run([_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges",
                                   f"--snapshot={snapshot}", f"--file={target}", plain], env=env, capture_output=True,
                                  text=True, check=False)
            conn.rollback()
    finally:
        engine.dispose()
    if done.returncode != 0:
        raise InputError(f"pg_dump failed: {' '.join(done.stderr.split())[:300]}")
    return "postgresql", heads, count


def _load_database(kind: str, source: Path, url: str) -> None:
    if kind == "sqlite":
        if not url.startswith("sqlite"):
            raise InputError("the backup holds a SQLite database; restore it into SQLite (no LUCID_DATABASE_URL), "
                             "then move to PostgreSQL as docs/operations.md says")
        target = Path(url.split("///", 1)[-1])
        target.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        return
    if url.startswith("sqlite"):
        raise InputError("the backup holds a PostgreSQL database: set LUCID_DATABASE_URL (or _HOST) to an empty one")
    plain, env = _libpq(url)
    done = subprocess.run([_tool("pg_restore"), "--no-owner", "--no-privileges", "--single-transaction",
                           f"--dbname={plain}", str(source)], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InputError(f"pg_restore failed: {' '.join(done.stderr.split())[:300]}")


# --- backup ----------------------------------------------------------------------------------

def backup(settings: Settings, target: Path, *, keys: str, passphrase: bytes | None,
           echo: Callable[[str], None]) -> dict[str, Any]:
    """Write the hub's backup to `target` (a .tar.gz); its manifest. `keys`: encrypted (with
    the passphrase), plain, or omit (the operator keeps them, e.g. in a Secret)."""
    from lucid_hub.db.session import Database

    if keys not in ("encrypted", "plain", "omit"):
        raise InputError("--keys must be encrypted, plain or omit")
    if keys == "encrypted" and passphrase is None:
        raise InputError("the signing keys are encrypted with a passphrase: give --passphrase-file, "
                         "or --keys plain (the backup then holds them readable) or --keys omit")
    key_dir = settings.keys_dir
    if keys != "omit" and not (key_dir / "signing-key.pem").is_file():
        raise InputError(f"no signing key at {key_dir}: back up a hub's data directory (LUCID_DATA_DIR), "
                         "or --keys omit when the key comes from elsewhere")
    database = Database(settings.db_url)
    try:
        if not database.is_current():
            raise InputError("the database holds no lucid-hub schema: nothing to back up")
        revision = _revision(database)
        with tempfile.TemporaryDirectory(prefix="lucid-backup-") as tmp:
            work = Path(tmp)
            db_file = work / "database"
            kind, heads, count = _dump_database(settings.db_url, db_file)
            manifest: dict[str, Any] = {"format": FORMAT, "created": datetime.now(UTC).isoformat(), "database": kind,
                                        "schema": revision, "keys": keys, "graphs": heads, "patches": count}
            partial = target.with_name(target.name + ".part")
            with tarfile.open(partial, "w:gz") as tar:
                tar.add(db_file, arcname=f"database.{'sqlite' if kind == 'sqlite' else 'pgdump'}")
                if keys == "plain":
                    tar.add(key_dir, arcname="keys")
                elif keys == "encrypted":
                    assert passphrase is not None
                    _add_bytes(tar, work, KEYS_SEALED, seal(_tar_of(key_dir), passphrase))
                _add_bytes(tar, work, MANIFEST, json.dumps(manifest, indent=2).encode())
            partial.replace(target)
    finally:
        database.dispose()
    echo(f"backed up {len(manifest['graphs'])} graphs, {manifest['patches']} patches, "
         f"keys {keys} ({kind}) to {target}")
    return manifest


def _add_bytes(tar: tarfile.TarFile, work: Path, name: str, data: bytes) -> None:
    """`data` into the backup as `name`, through a file of the work directory (mode 0600)."""
    path = work / name
    path.touch(mode=0o600)
    path.write_bytes(data)
    tar.add(path, arcname=name)


def _revision(database: Any) -> str:
    from sqlalchemy import text

    with database.engine.connect() as conn:
        return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar() or "")


# --- restore ---------------------------------------------------------------------------------

def restore(settings: Settings, source: Path, *, passphrase: bytes | None,
            echo: Callable[[str], None]) -> dict[str, Any]:
    """Restore a backup into this (new) data directory and (empty) database, upgrade the schema,
    verify every patch and rebuild the store; what was restored."""
    from lucid_hub.db.session import Database

    if settings.keys_dir.exists() and any(settings.keys_dir.iterdir()):
        raise InputError(f"{settings.keys_dir} holds keys already: restore into a new data directory (LUCID_DATA_DIR)")
    database = Database(settings.db_url)
    try:
        if database.is_current():
            raise InputError("the database holds a lucid-hub schema already: restore into an empty database")
    finally:
        database.dispose()
    made_keys = not settings.keys_dir.exists()
    try:
        with tarfile.open(source, "r:gz") as tar, tempfile.TemporaryDirectory(prefix="lucid-restore-") as tmp:
            manifest = _unpack(settings, tar, Path(tmp), source, passphrase)
    except (OSError, tarfile.TarError, EOFError) as exc:
        _undo(settings, made_keys)
        raise InputError(f"{source} is not a readable lucid-hub backup: {exc}") from None
    except BaseException:
        _undo(settings, made_keys)
        raise
    database = Database(settings.db_url)
    try:
        database.upgrade()  # a backup of an older release: its schema brought up to this one
    finally:
        database.dispose()
    verified = verify_archive(settings, manifest)
    echo(f"restored {len(manifest['graphs'])} graphs, {verified} patches, every patch verified; "
         f"the store was rebuilt from the archive")
    return {**manifest, "verified": verified}


def _undo(settings: Settings, made_keys: bool) -> None:
    """A restore that failed leaves nothing behind: the keys it wrote, and a SQLite database it
    made (a PostgreSQL restore is one transaction: it left nothing)."""
    if made_keys:
        shutil.rmtree(settings.keys_dir, ignore_errors=True)
    if settings.db_url.startswith("sqlite"):
        for suffix in ("", "-wal", "-shm"):
            Path(settings.db_url.split("///", 1)[-1] + suffix).unlink(missing_ok=True)


def _unpack(settings: Settings, tar: tarfile.TarFile, work: Path, source: Path,
            passphrase: bytes | None) -> dict[str, Any]:
    """The backup's keys into the data directory and its database into the configured one."""
    names = set(tar.getnames())
    if MANIFEST not in names:
        raise InputError(f"{source} is not a lucid-hub backup (no {MANIFEST})")
    manifest = json.loads(_member(tar, MANIFEST))
    if manifest.get("format") != FORMAT:
        raise InputError(f"{source} is a backup of format {manifest.get('format')}; this lucid-hub reads {FORMAT}")
    kind = manifest["database"]
    db_name = f"database.{'sqlite' if kind == 'sqlite' else 'pgdump'}"
    (work / db_name).write_bytes(_member(tar, db_name))
    keys_dir = settings.keys_dir
    if manifest["keys"] == "encrypted":
        if passphrase is None:
            raise InputError("the backup's keys are encrypted: give --passphrase-file")
        with tarfile.open(fileobj=io.BytesIO(unseal(_member(tar, KEYS_SEALED), passphrase))) as keys_tar:
            _extract_keys(keys_tar, keys_dir)
    elif manifest["keys"] == "plain":
        _extract_keys(tar, keys_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _load_database(kind, work / db_name, settings.db_url)
    return dict(manifest)


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    if member is None:
        raise InputError(f"the backup has no {name}")
    return member.read()


def _extract_keys(tar: tarfile.TarFile, keys_dir: Path) -> None:
    """The keys/ members, each written 0600 (no path leaves keys/: a crafted name is refused)."""
    keys_dir.mkdir(parents=True, exist_ok=True)
    keys_dir.chmod(0o700)
    for member in tar.getmembers():
        parts = Path(member.name).parts
        if not parts or parts[0] != "keys" or ".." in parts or Path(member.name).is_absolute():
            continue
        target = keys_dir.joinpath(*parts[1:])
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            data = tar.extractfile(member)
            assert data is not None
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.read())
            target.chmod(0o600)


def verify_archive(settings: Settings, manifest: dict[str, Any]) -> int:
    """Every patch of every graph verified (id, signature, chain) with this hub's keys or the
    mirror's pinned ones, the heads the backup names present; the store rebuilt (Runtime.open
    repairs it from the archive). The number of patches verified."""
    from lucid_hub.rdf.canon import Canonicalizer
    from lucid_hub.runtime import Runtime
    from lucid_hub.signing import TrustedKeys, verify_patch_bytes

    runtime = Runtime.open(settings)
    try:
        canonicalizer = Canonicalizer(settings.canon_timeout, settings.canon_memory_mb)
        own = TrustedKeys(runtime.keys.jwks())
        count = 0
        heads = dict(runtime.archive.heads())
        for graph, head in manifest["graphs"].items():
            if graph not in heads:
                raise PatchVerificationError(f"the restored archive lacks <{graph}>")
            pinned = runtime.mirror_registry.pinned_keys(graph)
            trusted = TrustedKeys(pinned) if pinned is not None else own
            current, bodies = runtime.archive.bodies(graph)
            previous: str | None = None
            for body in bodies:
                patch = verify_patch_bytes(body, trusted, canonicalizer)
                if patch.prev != previous:
                    raise PatchVerificationError(f"<{graph}>: patch {patch.id} follows {patch.prev}, not {previous}")
                previous = patch.id
            if previous != current or current != head:
                raise PatchVerificationError(f"<{graph}>: the chain ends at {previous}, the backup's head is {head}")
            count += len(bodies)
        return count
    finally:
        runtime.close()
