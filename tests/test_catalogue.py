"""The rule pages under rules/ are generated from the rule modules and must not be stale."""

from __future__ import annotations

from trainlint.rules.catalogue import CATALOGUE_DIR, expected_files, render_page
from trainlint.rules import ALL_RULES


def test_rule_pages_are_up_to_date():
    expected = expected_files()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in CATALOGUE_DIR.glob("*.md")}
    stale = sorted(name for name in expected if on_disk.get(name) != expected[name])
    extra = sorted(set(on_disk) - set(expected))
    assert not stale and not extra, f"run `python -m trainlint.rules.catalogue` (stale: {stale}, extra: {extra})"


def test_every_page_has_the_sections_users_need():
    for rule in ALL_RULES:
        page = render_page(rule)
        for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix"):
            assert section in page, (rule.code, section)
