"""Log records of the long-running commands (`serve`, `worker`): text for people, one JSON
object per line for log collectors (`LUCID_LOG_FORMAT=json`), secrets masked in both.

The code logs no secrets by design; the redaction here is the last line of defence for
what the code does not write itself (exception messages of libraries, URLs in errors).
"""

from __future__ import annotations

import logging
import logging.config
import re
from typing import Any

from pythonjsonlogger.json import JsonFormatter

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"
_RENAMED = {"asctime": "time", "levelname": "level", "name": "logger"}

# Hand-written: what a secret looks like in a message. Values stop at a delimiter of the
# surrounding text (space, quote, &, comma, JSON or URL punctuation).
_SECRETS = [
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 ***"),
    (re.compile(r"(?i)\b(client_secret|password|passwd|secret|hub\.secret|access_token|refresh_token|token)"
                r"(\\?[\"']?\s*[=:]\s*\\?[\"']?)[^\s\"'&,;}\\]+"), r"\1\2***"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):[^@\s/]+@"), r"\1:***@"),  # URL passwords
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), "***private key***"),
]


def redact(text: str) -> str:
    """`text` with anything that looks like a credential replaced by ***."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class RedactingTextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class RedactingJsonFormatter(JsonFormatter):
    """One JSON object per record: time, level, logger, message and the record's extras."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(_JSON_FIELDS, rename_fields=_RENAMED, *args, **kwargs)  # noqa: B026

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def dict_config(log_format: str, level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for the settings (gunicorn takes the same one)."""
    formatter: dict[str, Any] = ({"()": RedactingJsonFormatter} if log_format == "json"
                                 else {"()": RedactingTextFormatter, "format": TEXT_FORMAT})
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"lucid": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "lucid", "stream": "ext://sys.stderr"}},
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            # gunicorn's own records go through the same handler (it would add its own).
            "gunicorn.error": {"level": level, "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
            # Our access log (lucid_hub.access) replaces werkzeug's request lines.
            "werkzeug": {"level": "WARNING"},
            # librdkafka's retries while a broker is away: once is enough in the log.
            "confluent_kafka": {"level": "WARNING"},
            # Alembic says what it found at each start (seven lines); only what it did matters,
            # and `lucid-hub db upgrade` says that itself.
            "alembic": {"level": "WARNING"},
        },
    }


def configure_logging(log_format: str, level: str) -> None:
    logging.config.dictConfig(dict_config(log_format, level))
