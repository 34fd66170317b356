"""Test code: what the per-step rules skip (a unit test that runs one step is not a training run),
found by path and, for a file named like a test, by whether it defines one as pytest collects."""

from __future__ import annotations

import re
from pathlib import Path, PurePath
from typing import Callable

TEST_DIRS = frozenset({"tests", "test", "testing", "test_utils", "unittests"})


# a test function or class as pytest and unittest name them (`def test_step():`, `def testStep`,
# `class TestLoop:`); a training script's own `def test(model, loader):` evaluates, it tests nothing
# (a notebook's cell source is a JSON string: its lines start with a quote)
TEST_DEFINITION = re.compile(r"^[ \t]*\"?(?:(?:async[ \t]+)?def[ \t]+test[_A-Z]|class[ \t]+Test)", re.MULTILINE)


def is_test_name(name: str, is_class: bool = False) -> bool:
    """A function or class named as a test (`TEST_DEFINITION`)."""
    return name.startswith("Test") if is_class else name.startswith("test") and (name[4:5] == "_" or name[4:5].isupper())


def is_test_path(path: str, has_tests: Callable[[], bool] | None = None) -> bool:
    """`tests/...`, `conftest.py`, and `test_*.py`, `*_test.py` that define a test: test code, not a
    training script. A file named so that defines none (`has_tests()` says; unasked, it is taken
    to) is no test module: pytest collects nothing from it, and TCN's `add_test.py` trains."""
    parts = PurePath(path).parts
    name = parts[-1] if parts else ""
    if name == "conftest.py" or any(p in TEST_DIRS for p in parts[:-1]):
        return True
    if not (name.startswith("test_") or name.endswith("_test.py")):
        return False
    return has_tests() if has_tests is not None else True


def is_test_file(path: str) -> bool:
    """`is_test_path` of a file on disk, whose text says whether it defines a test (`TEST_DEFINITION`)."""

    def has_tests() -> bool:
        try:
            return TEST_DEFINITION.search(Path(path).read_text(encoding="utf-8", errors="replace")) is not None
        except OSError:
            return True

    return is_test_path(path, has_tests)
