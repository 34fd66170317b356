"""The lists of names the analysis reads (`trainlint/model/name_lists.py`): each is registered, named
on the pages of the rules it affects, and only silences: emptying one never takes a finding away."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from tests.helpers import lint
from trainlint.model.name_lists import NAME_LISTS, PER_STEP
from trainlint.rules import ALL_RULES
from trainlint.rules.catalogue import render_page

PACKAGE = Path(__file__).resolve().parent.parent / "trainlint"


def _word_lists() -> set[str]:
    """Module-level lists of guessed words in the analysis and the rules (`*_WORDS`, `*_VERBS`)."""
    found = set()
    for folder in ("model", "rules"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            for node in ast.parse(path.read_text()).body:
                targets = node.targets if isinstance(node, ast.Assign) else []
                for t in targets:
                    if isinstance(t, ast.Name) and t.id.endswith(("_WORDS", "_VERBS")) and not t.id.startswith("_"):
                        found.add(f"{folder}.{path.stem}.{t.id}")
    return found


def _resolve(where: str) -> tuple[object, str]:
    module, _, name = where.rpartition(".")
    return importlib.import_module(f"trainlint.{module}"), name


def test_every_list_of_guessed_words_is_registered_and_exists() -> None:
    registered = {n.where for n in NAME_LISTS}
    assert _word_lists() <= registered, _word_lists() - registered
    for where in registered:
        module, name = _resolve(where)
        assert isinstance(getattr(module, name), (frozenset, set, tuple)), where


def test_per_step_rules_are_the_rules_that_ask_every_step() -> None:
    per_step = {r.code for r in ALL_RULES if r.per_step} - {"TL501", "TL503"}
    assert set(PER_STEP) == per_step


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_each_list_is_named_on_the_pages_of_the_rules_it_affects(rule) -> None:
    page = render_page(rule)
    for entry in NAME_LISTS:
        name = entry.where.rsplit(".", 1)[-1]
        assert (f"`{name}`" in page) == (rule.code in entry.rules), (rule.code, name)


def _examples() -> list[tuple[str, str]]:
    return [(rule.code, code) for rule in ALL_RULES for code in (*rule.valid, *rule.invalid, rule.example, rule.fixed_example)]


_BEFORE: list[set[tuple[int, str, str, int]]] = []


def _findings() -> set[tuple[int, str, str, int]]:
    out = set()
    for i, (code, text) in enumerate(_examples()):
        out.update((i, code, d.code, d.line) for d in lint(text, code) if d.code == code)
    return out


@pytest.mark.parametrize("entry", NAME_LISTS, ids=lambda n: n.where.rsplit(".", 1)[-1])
def test_a_list_that_only_silences_takes_no_finding_away_when_emptied(entry, monkeypatch) -> None:
    """With the list emptied (everywhere it was imported), every rule example's findings remain."""
    if not _BEFORE:
        _BEFORE.append(_findings())
    before = _BEFORE[0]
    module, name = _resolve(entry.where)
    original = getattr(module, name)
    empty = type(original)()
    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("trainlint."):
            for attr, value in list(vars(loaded).items()):
                if value is original:
                    monkeypatch.setattr(loaded, attr, empty)
    after = _findings()
    assert before <= after, sorted(before - after)
