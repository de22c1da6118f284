"""A PostgreSQL server as companies run it, for the tests: its own cluster (Debian's initdb and
pg_ctl) in a temporary directory, TLS on with a server certificate from a test CA, passwords
checked (SCRAM-SHA-256), and connections without TLS rejected. The machine's own server runs
with trust authentication and without TLS, so it cannot show that a password or sslmode is
used; this one can."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lucid_hub.demo.ports import free_port


@dataclass
class SecuredPostgres:
    host: str
    port: int
    database: str
    user: str
    password: str
    ca: Path  # the CA that signed the server's certificate


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent  # (/usr/local/bin/initdb links into the version's bin)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


def unavailable() -> str | None:
    """Why a cluster of its own cannot run here (None: it can)."""
    if _bin_dir() is None:
        return "PostgreSQL's initdb is not installed (Debian: postgresql)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: initdb refuses root"
    return None


def _as_owner(args: list[str]) -> list[str]:
    """initdb and the server refuse root: run them as the postgres account then."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextlib.contextmanager
def secured_postgres(password: str) -> Iterator[SecuredPostgres]:
    """The cluster lives in a directory of its own under /tmp (the postgres account must reach
    it, and pytest's temporary directories are root's alone); removed afterwards."""
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="lucid-pg-"))
    try:
        with _cluster(where, password) as server:
            yield server
    finally:
        shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def _cluster(where: Path, password: str) -> Iterator[SecuredPostgres]:
    import trustme

    bin_dir = _bin_dir()
    assert bin_dir is not None
    data = where / "cluster"
    ca = trustme.CA()
    server = ca.issue_cert("localhost")
    ca_file = where / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    superpass = where / "superuser.pass"
    superpass.write_text(password + "-admin\n", encoding="utf-8")
    if os.geteuid() == 0:
        shutil.chown(where, "postgres")
        shutil.chown(superpass, "postgres")
    subprocess.run(_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", "admin", "--auth-local=trust",
                              "--auth-host=scram-sha-256", f"--pwfile={superpass}", "-E", "UTF8"]),
                   check=True, capture_output=True, timeout=120)
    key, cert = data / "server.key", data / "server.crt"
    server.private_key_pem.write_to_path(str(key))
    cert.write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    key.chmod(0o600)
    if os.geteuid() == 0:
        for path in (key, cert):
            shutil.chown(path, "postgres")
    port = free_port()
    with (data / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write(f"\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{where}'\n"
                   "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
                   "password_encryption = 'scram-sha-256'\n")
    (data / "pg_hba.conf").write_text("local all all trust\n"
                                      "hostssl all all 127.0.0.1/32 scram-sha-256\n"
                                      "hostnossl all all 127.0.0.1/32 reject\n", encoding="utf-8")
    ctl = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(where / "server.log"), "-w", "-t", "60"]
    subprocess.run(_as_owner([*ctl, "start"]), check=True, capture_output=True, timeout=120)
    try:
        psql = [str(bin_dir / "psql"), "-h", str(where), "-p", str(port), "-U", "admin", "-d", "postgres",
                "-v", "ON_ERROR_STOP=1", "-q", "-c"]
        quoted = password.replace("'", "''")
        subprocess.run(_as_owner([*psql, f"CREATE ROLE lucid LOGIN PASSWORD '{quoted}'"]), check=True,
                       capture_output=True, timeout=60)
        subprocess.run(_as_owner([*psql, "CREATE DATABASE lucid OWNER lucid"]), check=True, capture_output=True,
                       timeout=60)
        yield SecuredPostgres("localhost", port, "lucid", "lucid", password, ca_file)
    finally:
        subprocess.run(_as_owner([*ctl, "stop", "-m", "fast"]), capture_output=True, timeout=120, check=False)
