"""librdkafka's settings from the hub's: the bootstrap servers, TLS, SASL, and any other
property from a client .properties file (the file managed Kafka services hand out).

Secrets come from a variable or from a file (a mounted Secret: `LUCID_KAFKA_SASL_PASSWORD_FILE`
…) and never appear in a message: a refusal names the setting, not its value. A mistake is a
ConfigError at start, one line naming the setting; a broker that cannot be reached is not a
mistake (the hub starts, and /readyz says why Kafka does not answer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Properties whose values are secrets: never shown, in a message or a log line.
SECRETS = frozenset({"sasl.password", "ssl.key.password", "ssl.key.pem", "ssl.keystore.password",
                     "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "sasl.jaas.config"})
# Java clients' properties librdkafka has no equivalent of: a clear refusal, not librdkafka's
# "No such configuration property".
_JAVA_ONLY = {
    "ssl.truststore.location": "give the CA as a PEM file (LUCID_KAFKA_SSL_CA_FILE or ssl.ca.location)",
    "ssl.keystore.location": "give the certificate and key as PEM files (LUCID_KAFKA_SSL_CERT_FILE and "
                             "LUCID_KAFKA_SSL_KEY_FILE, or ssl.certificate.location and ssl.key.location)",
    "sasl.login.callback.handler.class": "use LUCID_KAFKA_OAUTH_* (librdkafka's OIDC client) instead",
}


def uses_kafka(settings: Settings) -> bool:
    """Whether the patch log is Kafka (a bootstrap, or a properties file that names one)."""
    return bool(settings.kafka_bootstrap or settings.kafka_properties_file)


def read_properties(path: str) -> dict[str, str]:
    """A Java-style .properties file of `key=value` (or `key: value`) lines; `#` and `!`
    comments. (Continuation lines and escapes, which client files do not use, are not read.)"""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"LUCID_KAFKA_PROPERTIES_FILE: cannot read {path}: {exc.strerror}") from None
    found: dict[str, str] = {}
    # A properties file's lines end at \n, \r\n or \r (read as text, all \n), not at U+2028 or
    # U+0085, which str.splitlines() also splits at (a secret may hold them).
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise ConfigError(f"LUCID_KAFKA_PROPERTIES_FILE: line {number} of {path} is not key=value")
        found[line[:cut].strip()] = line[cut + 1:].strip()
    return found


def client_config(settings: Settings) -> dict[str, Any]:
    """The librdkafka properties every client of the patch log (producer, consumers, admin)
    shares: the properties file, then the hub's settings over it."""
    props: dict[str, Any] = read_properties(settings.kafka_properties_file) if settings.kafka_properties_file else {}
    for java, instead in _JAVA_ONLY.items():
        if java in props:
            raise ConfigError(f"LUCID_KAFKA_PROPERTIES_FILE: {java} is a Java client's property; {instead}")
    if "sasl.mechanism" in props:  # the Java clients' spelling of librdkafka's sasl.mechanisms
        props.setdefault("sasl.mechanisms", props.pop("sasl.mechanism"))
    if "sasl.jaas.config" in props:
        props.update(_from_jaas(props.pop("sasl.jaas.config")))
    s = settings
    if s.kafka_bootstrap:
        props["bootstrap.servers"] = s.kafka_bootstrap
    if not props.get("bootstrap.servers"):
        raise ConfigError("LUCID_KAFKA_PROPERTIES_FILE names no bootstrap.servers, and LUCID_KAFKA_BOOTSTRAP is empty")
    if s.kafka_security_protocol:
        props["security.protocol"] = s.kafka_security_protocol.upper()
    protocol = str(props.setdefault("security.protocol", "PLAINTEXT")).upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"LUCID_KAFKA_SECURITY_PROTOCOL must be one of {', '.join(PROTOCOLS)}, not {protocol}")
    props["security.protocol"] = protocol
    for setting, prop in (("kafka_ssl_ca_file", "ssl.ca.location"), ("kafka_ssl_cert_file", "ssl.certificate.location"),
                          ("kafka_ssl_key_file", "ssl.key.location")):
        if path := s.file(setting):
            props[prop] = path
    if key_password := s.secret("kafka_ssl_key_password"):
        props["ssl.key.password"] = key_password
    if ("ssl.certificate.location" in props) != ("ssl.key.location" in props):
        raise ConfigError("a client certificate needs its key, and a key its certificate "
                          "(LUCID_KAFKA_SSL_CERT_FILE and LUCID_KAFKA_SSL_KEY_FILE)")
    if not s.kafka_ssl_check_hostname:
        props["ssl.endpoint.identification.algorithm"] = "none"
    props.setdefault("ssl.endpoint.identification.algorithm", "https")
    if s.kafka_sasl_mechanism:
        props["sasl.mechanisms"] = s.kafka_sasl_mechanism.upper()
    if s.kafka_sasl_username:
        props["sasl.username"] = s.kafka_sasl_username
    if password := s.secret("kafka_sasl_password"):
        props["sasl.password"] = password
    _oauth(s, props)
    if protocol.startswith("SASL_"):
        _check_sasl(props)
    elif "sasl.mechanisms" in props:
        raise ConfigError(f"a SASL mechanism is set but the security protocol is {protocol}: "
                          "use SASL_SSL (or SASL_PLAINTEXT on a trusted network)")
    return props


def _oauth(s: Settings, props: dict[str, Any]) -> None:
    """OAUTHBEARER through librdkafka's own OIDC client (client credentials at the token URL)."""
    secret = s.secret("kafka_oauth_client_secret")
    if not (s.kafka_oauth_token_url or s.kafka_oauth_client_id or secret):
        return
    if not (s.kafka_oauth_token_url and s.kafka_oauth_client_id and secret):
        raise ConfigError("OAUTHBEARER needs LUCID_KAFKA_OAUTH_TOKEN_URL, LUCID_KAFKA_OAUTH_CLIENT_ID and "
                          "LUCID_KAFKA_OAUTH_CLIENT_SECRET (or _FILE)")
    props.update({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": s.kafka_oauth_token_url,
                  "sasl.oauthbearer.client.id": s.kafka_oauth_client_id,
                  "sasl.oauthbearer.client.secret": secret})
    if s.kafka_oauth_scope:
        props["sasl.oauthbearer.scope"] = s.kafka_oauth_scope
    props.setdefault("sasl.mechanisms", "OAUTHBEARER")


def _check_sasl(props: dict[str, Any]) -> None:
    mechanism = str(props.get("sasl.mechanisms", "")).upper()
    if mechanism not in MECHANISMS:
        raise ConfigError(f"LUCID_KAFKA_SASL_MECHANISM must be one of {', '.join(MECHANISMS)} with "
                          f"{props['security.protocol']}" + (f", not {mechanism}" if mechanism else ""))
    props["sasl.mechanisms"] = mechanism
    if mechanism == "OAUTHBEARER":
        if props.get("sasl.oauthbearer.method") != "oidc" and "sasl.oauthbearer.config" not in props:
            raise ConfigError("OAUTHBEARER needs LUCID_KAFKA_OAUTH_TOKEN_URL, _CLIENT_ID and _CLIENT_SECRET")
    elif not props.get("sasl.username") or not props.get("sasl.password"):
        raise ConfigError(f"SASL {mechanism} needs LUCID_KAFKA_SASL_USERNAME and LUCID_KAFKA_SASL_PASSWORD (or _FILE)")


def _from_jaas(jaas: str) -> dict[str, str]:
    """username and password from a Java client's sasl.jaas.config (PLAIN and SCRAM login
    modules), which is how most managed services write the credentials."""
    import shlex

    found: dict[str, str] = {}
    for word in shlex.split(jaas.rstrip(";"), posix=True):
        key, _, value = word.partition("=")
        if key in ("username", "password"):
            found[f"sasl.{key}"] = value.rstrip(";")
    if len(found) != 2:
        raise ConfigError("LUCID_KAFKA_PROPERTIES_FILE: sasl.jaas.config names no username and password")
    return found


def shown(props: dict[str, Any]) -> dict[str, Any]:
    """The properties as they may be shown: secrets replaced."""
    return {k: ("(secret)" if k in SECRETS else v) for k, v in props.items()}
