"""Notifications over MQTT: a partner subscribes with `"mqtt": true` and reads its
notifications with a standard MQTT client (paho-mqtt) from a real Mosquitto broker that the
operator runs with passwords and ACLs (each partner reads only its own topics); ordering,
sequence and signature properties, windows too; bad requests and a stranger's reads."""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import hmac
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from tests.conftest import RunningHub, free_port, running_hub
from tests.queries.test_queries import MINE, ORDERS, ORDERS_NT, put, status, update


class Broker:
    """A Mosquitto broker of its own (port, password file, ACL): users are added as a test goes."""

    def __init__(self, where: Path) -> None:
        self.port = free_port()
        self.passwords = where / "passwd"
        self.passwords.write_text("", encoding="utf-8")
        (where / "acl").write_text("user hub\ntopic write lucid-hub/#\n\npattern read lucid-hub/%u/#\n",
                                   encoding="utf-8")
        (where / "mosquitto.conf").write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous false\npassword_file {self.passwords}\n"
            f"acl_file {where / 'acl'}\npersistence true\npersistence_location {where}/\n"
            "log_dest stderr\nlog_type error\n"
            # as root, Mosquitto drops to its own user, who cannot read the test's files
            + (f"user {getpass.getuser()}\n" if os.geteuid() == 0 else ""), encoding="utf-8")
        self.add("hub", "hub-secret")
        self.conf = where / "mosquitto.conf"
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(["mosquitto", "-c", str(self.conf)], stderr=subprocess.PIPE)
        for _ in range(200):  # until it listens (it starts in milliseconds; a loaded machine takes longer)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if self.proc.poll() is not None:
                break
            threading.Event().wait(0.05)
        raise RuntimeError(f"mosquitto did not start: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")

    def add(self, user: str, password: str) -> None:
        subprocess.run(["mosquitto_passwd", "-b", str(self.passwords), user, password], check=True,
                       capture_output=True)
        if hasattr(self, "proc"):
            self.proc.send_signal(signal.SIGHUP)  # Mosquitto reads its password file again

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    if shutil.which("mosquitto") is None or shutil.which("mosquitto_passwd") is None:
        pytest.skip("Mosquitto (mosquitto, mosquitto_passwd) is not installed on this machine")
    running = Broker(tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def mqtt_hub(tmp_path: Path, db_url: str, broker: Broker) -> Iterator[RunningHub]:
    (tmp_path / "mqtt-password").write_text("hub-secret\n", encoding="utf-8")
    env = {"LUCID_MQTT_URL": f"mqtt://127.0.0.1:{broker.port}", "LUCID_MQTT_USER": "hub",
           "LUCID_MQTT_PASSWORD_FILE": str(tmp_path / "mqtt-password")}
    with running_hub(tmp_path / "data", db_url, env) as hub:
        put(hub, ORDERS, ORDERS_NT)
        yield hub


class Reader:
    """A partner's paho-mqtt client: what arrives on its topic filter, in order."""

    def __init__(self, broker: Broker, user: str, password: str, topic: str, *, session: bool = False) -> None:
        """`session`: the broker keeps the reader's subscription and queues what it misses while
        away (MQTT 5 clean_start false, a session expiry), across a restart of the broker too."""
        self.messages: queue.Queue[Any] = queue.Queue()
        self.granted: queue.Queue[Any] = queue.Queue()
        self.client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=f"reader-{user}",
                                  protocol=mqtt.MQTTv5)
        self.client.username_pw_set(user, password)
        self.client.on_connect = lambda c, u, f, reason, p: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda c, u, mid, codes, p: self.granted.put(codes)
        self.client.on_message = lambda c, u, message: self.messages.put(message)
        properties = None
        if session:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            properties = Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = 600
        self.client.connect("127.0.0.1", broker.port, clean_start=not session, properties=properties)
        self.client.loop_start()

    def next(self, timeout: float = 30) -> Any:
        return self.messages.get(timeout=timeout)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def partner(hub: RunningHub, broker: Broker, name: str) -> tuple[Any, str]:
    token = hub.token(name, ("lucid-hub-admins",), ("graphs:read", "graphs:write", "hub:subscribe"))
    account = hub.runtime.tokens.validate(token).account
    broker.add(account, f"{name}-password")
    return hub.session(token), account


def test_a_partner_reads_its_notifications_with_paho_from_mosquitto(mqtt_hub: RunningHub, broker: Broker) -> None:
    hub = mqtt_hub
    http, account = partner(hub, broker, "acme")
    reader = Reader(broker, account, "acme-password", f"lucid-hub/{account}/#")
    try:
        assert not reader.granted.get(timeout=30)[0].is_failure
        made = http.post(f"{hub.url}/subscriptions", json={"sparql": MINE, "mqtt": True, "secret": "k" * 24})
        assert made.status_code == 201, made.text
        spuid = made.json()["notification"]["spuid"]
        hub.runtime.queries.orphans.detach([spuid])  # it has no socket to lose: never detached
        with hub.runtime.db.session() as session:
            from lucid_hub.db.models import QuerySubscription

            assert session.get(QuerySubscription, spuid).detached_at is None
        assert http.get(made.json()["subscription"]).json()["webhook"]["mqtt"]["topic"] == (
            f"lucid-hub/{account}/subscriptions/{spuid}")
        first = reader.next()
        assert first.topic == f"lucid-hub/{account}/subscriptions/{spuid}"
        body = json.loads(first.payload)
        assert body["notification"]["sequence"] == 0 and body["notification"]["spuid"] == spuid
        properties = dict(first.properties.UserProperty)
        assert properties["X-Lucid-Sequence"] == "0"
        assert properties["X-Hub-Signature"] == "sha256=" + hmac.new(b"k" * 24, first.payload,
                                                                     hashlib.sha256).hexdigest()
        update(hub, status("o1", "open", "packed"))
        update(hub, status("o1", "packed", "shipped"))
        sequences = [json.loads(reader.next().payload)["notification"]["sequence"] for _ in range(2)]
        assert sequences == [1, 2]  # in order, each once
    finally:
        reader.close()


def test_a_stranger_reads_nothing_of_another_partners_topics(mqtt_hub: RunningHub, broker: Broker) -> None:
    hub = mqtt_hub
    http, account = partner(hub, broker, "acme")
    _other, stranger = partner(hub, broker, "stranger")
    spy = Reader(broker, stranger, "stranger-password", f"lucid-hub/{account}/#")
    own = Reader(broker, account, "acme-password", f"lucid-hub/{account}/#")
    try:
        spy.granted.get(timeout=30)  # Mosquitto grants the filter and withholds what its read ACL denies
        assert not own.granted.get(timeout=30)[0].is_failure
        assert http.post(f"{hub.url}/subscriptions", json={"sparql": MINE, "mqtt": True}).status_code == 201
        assert json.loads(own.next().payload)["notification"]["sequence"] == 0
        update(hub, status("o1", "open", "packed"))
        assert json.loads(own.next().payload)["notification"]["sequence"] == 1
        assert spy.messages.empty()  # both went to the broker's subscribers before the second reached acme
    finally:
        spy.close()
        own.close()


def test_windowed_query_elements_go_to_mqtt_too(mqtt_hub: RunningHub, broker: Broker) -> None:
    hub = mqtt_hub
    http, account = partner(hub, broker, "acme")
    reader = Reader(broker, account, "acme-password", f"lucid-hub/{account}/windows/#")
    try:
        reader.granted.get(timeout=30)
        made = http.put(f"{hub.url}/windows/changes", json={
            "sparql": "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }", "graphs": [ORDERS], "range": 1, "step": 1,
            "mqtt": True})
        assert made.status_code == 201, made.text
        update(hub, status("o1", "open", "packed"))
        hub.runtime.windows.evaluate_due()
        message = reader.next()
        assert message.topic == f"lucid-hub/{account}/windows/changes"
        assert json.loads(message.payload)["sequence"] == 0
    finally:
        reader.close()


def test_bad_mqtt_requests_are_refused(mqtt_hub: RunningHub, tmp_path: Path) -> None:
    with running_hub(tmp_path / "plain", f"sqlite:///{tmp_path / 'plain.db'}") as hub:
        without = hub.http.post(f"{hub.url}/subscriptions", json={"sparql": MINE, "mqtt": True})
    cases = [
        (mqtt_hub.http.post(f"{mqtt_hub.url}/subscriptions", json={"sparql": MINE, "mqtt": "yes"}), 400,
         "mqtt must be true or false"),
        (mqtt_hub.http.post(f"{mqtt_hub.url}/subscriptions", json={"sparql": MINE, "mqtt": True,
                                                                  "callback": "https://x.example/cb"}), 400,
         "not both"),
        (without, 400, "LUCID_MQTT_URL"),
    ]
    for answer, code, says in cases:
        assert answer.status_code == code and says in answer.text, (code, answer.status_code, answer.text[:300])


def test_a_broker_outage_loses_nothing_and_ends_nothing(tmp_path: Path, broker: Broker) -> None:
    """The operator's broker goes away while notifications are due: they wait (retried with
    backoff, past LUCID_DELIVERY_MAX_ATTEMPTS: the outage is not the partner's) and arrive, in
    order, when it is back."""
    (tmp_path / "mqtt-password").write_text("hub-secret\n", encoding="utf-8")
    env = {"LUCID_MQTT_URL": f"mqtt://127.0.0.1:{broker.port}", "LUCID_MQTT_USER": "hub",
           "LUCID_MQTT_PASSWORD_FILE": str(tmp_path / "mqtt-password"), "LUCID_DELIVERY_TIMEOUT": "1",
           "LUCID_DELIVERY_BACKOFF_BASE": "0.2", "LUCID_DELIVERY_BACKOFF_MAX": "1", "LUCID_DELIVERY_MAX_ATTEMPTS": "2"}
    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'hub.db'}", env) as hub:
        put(hub, ORDERS, ORDERS_NT)
        http, account = partner(hub, broker, "acme")
        # subscribed on the broker before the hub publishes: MQTT keeps nothing for a topic nobody
        # reads, and the first notification can go out before the POST's answer is read
        reader = Reader(broker, account, "acme-password", f"lucid-hub/{account}/#", session=True)
        try:
            assert not reader.granted.get(timeout=30)[0].is_failure
            made = http.post(f"{hub.url}/subscriptions", json={"sparql": MINE, "mqtt": True})
            assert made.status_code == 201, made.text
            spuid = made.json()["notification"]["spuid"]
            assert json.loads(reader.next().payload)["notification"]["sequence"] == 0
        finally:
            reader.close()  # away: the broker keeps its session (and queues for it)
        broker.stop()
        update(hub, status("o1", "open", "packed"))
        update(hub, status("o1", "packed", "shipped"))
        webhooks = hub.runtime.queries.webhooks

        def failures() -> int:
            described = http.get(f"{hub.url}/subscriptions/{spuid}").json()
            return int(described["webhook"]["failures"])

        deadline = threading.Event()
        for _ in range(300):  # the hub's retries, on its own clock
            if failures() >= 3:
                break
            deadline.wait(0.1)
        assert failures() >= 3 and hub.runtime.queries.state(spuid)[0] == "active"  # past max attempts, not ended
        from lucid_hub.demo.processes import wait_until
        from lucid_hub.web.console.attention import attention

        def failing() -> list[str]:  # what the overview says of it
            return [i.detail for i in attention(hub.runtime) if i.what == "Continuous query webhook failing"]

        (detail,) = failing()
        assert detail.startswith(f"{spuid} of {account} to mqtt:") and "failed attempts" in detail, detail
        broker.start()
        reader = Reader(broker, account, "acme-password", f"lucid-hub/{account}/#", session=True)
        try:
            webhooks.wake()
            assert [json.loads(reader.next(timeout=60).payload)["notification"]["sequence"] for _ in range(2)] == [1, 2]
        finally:
            reader.close()
        wait_until(lambda: not failing(), 30, "the overview no longer names the webhook once delivered")
