"""Test-wide set-up: lint results are cached in a folder of the test run, never the user's, and
authenticated with a key file of the test run (never the user's configuration folder)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINLINT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "trainlint-cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "trainlint-config"))
    monkeypatch.delenv("TRAINLINT_CACHE_KEY", raising=False)
