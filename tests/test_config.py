"""Settings come from LUCID_* variables with embedded defaults; bad values are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucid_hub.config import Settings
from lucid_hub.errors import ConfigError


def test_defaults_need_nothing_set() -> None:
    settings = Settings.from_env({})
    assert settings.canon_timeout == 5.0 and settings.data_dir.name == "data"


def test_values_are_read_and_converted() -> None:
    settings = Settings.from_env({"LUCID_DATA_DIR": "/srv/hub", "LUCID_CANON_TIMEOUT": "2.5",
                                  "LUCID_MAX_PATCH_BYTES": "1000"})
    assert settings.data_dir == Path("/srv/hub") and settings.canon_timeout == 2.5
    assert settings.max_patch_bytes == 1000


@pytest.mark.parametrize(("name", "value"), [("LUCID_CANON_TIMEOUT", "x"), ("LUCID_CANON_TIMEOUT", "0"),
                                             ("LUCID_MAX_PATCH_BYTES", "-1"), ("LUCID_CANON_MEMORY_MB", "1")])
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})
