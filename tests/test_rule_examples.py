"""Every rule's own VALID and INVALID examples (Fixit style), plus its page examples."""

from __future__ import annotations

import pytest

from tests.helpers import lint
from trainlint.rules import ALL_RULES

CASES = [
    pytest.param(rule, code, kind, id=f"{rule.code}-{kind}-{i}")
    for rule in ALL_RULES
    for kind, examples in (("valid", rule.valid), ("invalid", rule.invalid))
    for i, code in enumerate(examples)
]


@pytest.mark.parametrize(("rule", "code", "kind"), CASES)
def test_rule_example(rule, code, kind):
    found = [d for d in lint(code, rule.code) if d.code == rule.code]
    if kind == "invalid":
        assert found, f"{rule.code} should flag:\n{code}"
    else:
        assert not found, f"{rule.code} should not flag:\n{code}\n{found}"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_every_rule_has_positive_and_negative_examples(rule):
    assert rule.valid and rule.invalid
    assert rule.summary and rule.hint and rule.why and rule.example and rule.fixed_example


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_page_example_is_flagged_and_fix_is_clean(rule):
    assert [d for d in lint(rule.example, rule.code) if d.code == rule.code], rule.example
    assert not [d for d in lint(rule.fixed_example, rule.code) if d.code == rule.code], rule.fixed_example
