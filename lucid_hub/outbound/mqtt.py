"""Notifications over MQTT (docs/queries.md, "MQTT"): the hub publishes each notification of a
subscription (or element of a windowed query) that asked for MQTT to the operator's broker,
QoS 1, in order, under `{LUCID_MQTT_TOPIC_PREFIX}/{account}/subscriptions/{spuid}` (or
`…/windows/{name}`). The query webhooks' machinery (`queries.webhooks`) decides what is due,
re-checks access, retries with backoff and ends what fails; this module only publishes, with
paho-mqtt (MQTT 5: the sequence and an HMAC signature travel as user properties, as
X-Lucid-Sequence and X-Hub-Signature travel with a webhook POST).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import ssl
import threading
from pathlib import Path
from urllib.parse import quote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError

SCHEME = "mqtt:"  # a subscription's callback that says "publish to MQTT": mqtt:<topic prefix>


def topic_base(settings: Settings, account: str, kind: str) -> str:
    """Where a party's subscriptions (kind "subscriptions") or windowed queries ("windows")
    are published; the spuid or the name follows. The account is percent-encoded, so that
    `/`, `+` and `#` in it cannot reach another party's topics."""
    return f"{settings.mqtt_topic_prefix}/{quote(account, safe='')}/{kind}/"


def broker(settings: Settings) -> tuple[str, int, bool]:
    """The broker's host, port and whether TLS is used; ConfigError for a URL that is not one."""
    url = urlsplit(settings.mqtt_url)
    if url.scheme not in ("mqtt", "mqtts") or not url.hostname or url.username or url.password:
        raise ConfigError("LUCID_MQTT_URL must be mqtt://host[:port] or mqtts://host[:port] (credentials in "
                          "LUCID_MQTT_USER and LUCID_MQTT_PASSWORD_FILE)")
    secure = url.scheme == "mqtts"
    return url.hostname, url.port or (8883 if secure else 1883), secure


class MqttPublisher:
    """One connection to the broker, opened at the first publish and kept (paho reconnects)."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.settings = settings
        self.host, self.port, self.secure = broker(settings)
        self.password = settings.mqtt_password
        if settings.mqtt_password_file:
            try:
                self.password = Path(settings.mqtt_password_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"LUCID_MQTT_PASSWORD_FILE cannot be read: {exc.strerror}") from None
        self.client_id = f"lucid-hub-{socket.gethostname()[:40]}-{os.getpid()}-{name}"
        self._client: mqtt.Client | None = None
        self._connected = threading.Event()
        self._lock = threading.Lock()
        self.published = 0

    def _connect(self) -> mqtt.Client:
        with self._lock:
            if self._client is not None:
                return self._client
            client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=self.client_id,
                                 protocol=mqtt.MQTTv5)
            if self.settings.mqtt_user:
                client.username_pw_set(self.settings.mqtt_user, self.password or None)
            if self.secure:
                client.tls_set(ca_certs=self.settings.mqtt_ca_file or None, tls_version=ssl.PROTOCOL_TLS_CLIENT)
            client.on_connect = lambda c, userdata, flags, reason, props: (
                self._connected.set() if not reason.is_failure else self._connected.clear())
            client.on_disconnect = lambda c, userdata, flags, reason, props: self._connected.clear()
            client.reconnect_delay_set(min_delay=1, max_delay=30)
            client.connect_async(self.host, self.port, keepalive=30)
            client.loop_start()
            self._client = client
            return client

    def publish(self, topic: str, payload: bytes, sequence: int, secret: str | None) -> tuple[int, str]:
        """Publish and wait for the broker's PUBACK: (200, "") when it took it, (0, why) not."""
        client = self._connect()
        timeout = self.settings.delivery_timeout
        if not self._connected.wait(timeout):
            return 0, f"the MQTT broker {self.host}:{self.port} took no connection within {timeout:g} s"
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        user = [("X-Lucid-Sequence", str(sequence))]
        if secret:
            user.append(("X-Hub-Signature", "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()))
        properties.UserProperty = user
        properties.ContentType = "application/json"
        info = client.publish(topic, payload, qos=1, properties=properties)
        try:
            info.wait_for_publish(timeout)
        except (RuntimeError, ValueError) as exc:  # not connected, or the queue is full
            return 0, f"the MQTT broker did not take the message: {exc}"
        if not info.is_published():
            return 0, f"the MQTT broker did not acknowledge within {timeout:g} s"
        self.published += 1
        return 200, ""

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.loop_stop()
                self._client.disconnect()
                self._client = None
