"""Test-wide set-up: lint results are cached in a folder of the test run, never the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINLINT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "trainlint-cache"))
