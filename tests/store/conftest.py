"""The real triple stores of the store tests, one of each per session (tests clear them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import stores


@pytest.fixture(scope="session")
def oxigraph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stores.RunningStore]:
    yield from stores.oxigraph_server(tmp_path_factory.mktemp("oxigraph"))


@pytest.fixture(scope="session")
def virtuoso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stores.RunningStore]:
    yield from stores.virtuoso(tmp_path_factory.mktemp("virtuoso"))
