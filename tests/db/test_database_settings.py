"""PostgreSQL as operators configure a managed one: host, port, database, user, a password from
a file (a mounted Secret) and libpq's TLS settings, against a real server of its own that checks
passwords (SCRAM) and rejects connections without TLS (tests/secured_postgres.py). The URL
(LUCID_DATABASE_URL) still works, as every other test shows; here, what its parts do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError
from tests.conftest import running_hub
from tests.secured_postgres import SecuredPostgres, secured_postgres, unavailable

PASSWORD = "p@ss w0rd:/?#"


@pytest.fixture(scope="module")
def postgres() -> Iterator[SecuredPostgres]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with secured_postgres(PASSWORD) as server:
        yield server


def parts(server: SecuredPostgres, tmp_path: Path, **over: str) -> dict[str, str]:
    secret = tmp_path / "db-password"
    secret.write_text(PASSWORD + "\n", encoding="utf-8")  # as a mounted Secret holds it
    env = {"LUCID_DATABASE_HOST": server.host, "LUCID_DATABASE_PORT": str(server.port),
           "LUCID_DATABASE_NAME": server.database, "LUCID_DATABASE_USER": server.user,
           "LUCID_DATABASE_PASSWORD_FILE": str(secret), "LUCID_DATABASE_SSLMODE": "verify-full",
           "LUCID_DATABASE_SSLROOTCERT": str(server.ca)}
    env.update(over)
    return {k: v for k, v in env.items() if v}


def test_a_hub_runs_on_postgresql_given_by_its_parts_with_a_password_and_verified_tls(
        postgres: SecuredPostgres, tmp_path: Path) -> None:
    from sqlalchemy import text

    env = parts(postgres, tmp_path)
    settings = Settings.from_env(env)
    assert PASSWORD not in repr(settings)
    with running_hub(tmp_path / "data", "", env) as hub:
        answer = hub.http.put(f"{hub.url}/graphs", params={"graph": "http://example.org/kpi"}, timeout=60,
                              data=b'<http://example.org/a> <http://example.org/v> "1" .\n',
                              headers={"Content-Type": "application/n-triples"})
        assert answer.status_code == 201, answer.text
        with hub.runtime.db.session() as session:
            encrypted = session.execute(text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")).scalar()
            user = session.execute(text("SELECT current_user")).scalar()
        assert encrypted is True and user == "lucid"
        assert len(hub.runtime.archive.history("http://example.org/kpi")) == 1
        assert hub.http.get(f"{hub.url}/readyz", timeout=30).status_code == 200


@pytest.mark.parametrize("case, expected", [
    ("wrong-password", "password authentication failed"),
    ("no-tls", "no encryption"),
    ("untrusted-server", "certificate verify failed"),
])
def test_what_the_database_refuses_stops_the_start_with_one_line(
        postgres: SecuredPostgres, tmp_path: Path, case: str, expected: str, run_cli) -> None:  # type: ignore[no-untyped-def]
    import trustme

    over: dict[str, str] = {}
    if case == "wrong-password":
        (tmp_path / "wrong").write_text("not the password", encoding="utf-8")
        over["LUCID_DATABASE_PASSWORD_FILE"] = str(tmp_path / "wrong")
    elif case == "no-tls":
        over.update(LUCID_DATABASE_SSLMODE="disable", LUCID_DATABASE_SSLROOTCERT="")
    else:
        trustme.CA().cert_pem.write_to_path(str(tmp_path / "other-ca.pem"))
        over["LUCID_DATABASE_SSLROOTCERT"] = str(tmp_path / "other-ca.pem")
    env = parts(postgres, tmp_path, **over)
    result = run_cli("db", "upgrade", env={"LUCID_DATA_DIR": str(tmp_path / "data"), **env})
    assert result.code != 0
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.err
    assert PASSWORD not in result.err and "not the password" not in result.err


def test_database_settings_mistakes_are_one_line_config_errors(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD, encoding="utf-8")
    mistakes = {
        "are both set: give the URL": {"LUCID_DATABASE_URL": "postgresql+psycopg://x@db/x",
                                       "LUCID_DATABASE_HOST": "db"},
        "LUCID_DATABASE_SSLMODE is set but LUCID_DATABASE_HOST is not": {"LUCID_DATABASE_SSLMODE": "require"},
        "LUCID_DATABASE_SSLMODE must be one of": {"LUCID_DATABASE_HOST": "db", "LUCID_DATABASE_SSLMODE": "on"},
        "LUCID_DATABASE_SSLROOTCERT: no file": {"LUCID_DATABASE_HOST": "db",
                                                "LUCID_DATABASE_SSLROOTCERT": str(tmp_path / "none.pem")},
        "LUCID_DATABASE_PASSWORD and LUCID_DATABASE_PASSWORD_FILE are both set": {
            "LUCID_DATABASE_HOST": "db", "LUCID_DATABASE_PASSWORD": "x", "LUCID_DATABASE_PASSWORD_FILE": str(secret)},
        "LUCID_DATABASE_PASSWORD_FILE: cannot read": {"LUCID_DATABASE_HOST": "db",
                                                      "LUCID_DATABASE_PASSWORD_FILE": str(tmp_path / "none")},
        "go together": {"LUCID_DATABASE_HOST": "db", "LUCID_DATABASE_SSLCERT": str(secret)},
    }
    for expected, env in mistakes.items():
        with pytest.raises(ConfigError) as refused:
            Settings.from_env(env)
        assert expected in str(refused.value) and PASSWORD not in str(refused.value), (expected, refused.value)
    url = Settings.from_env({"LUCID_DATABASE_HOST": "db.internal", "LUCID_DATABASE_PASSWORD_FILE": str(secret),
                             "LUCID_DATABASE_SSLMODE": "require"}).db_url
    from sqlalchemy.engine import make_url

    parsed = make_url(url)  # the password's reserved characters survive the URL
    assert (parsed.host, parsed.port, parsed.database, parsed.username, parsed.password) == (
        "db.internal", 5432, "lucid", "lucid", PASSWORD)
    assert parsed.query == {"sslmode": "require"}
