"""A rule leaves preview only on evidence: at least 10 reviewed findings on public code, 95% of them right.

The evidence is the real-code set's labels (`benchmarks/realworld/labels/`) of the findings its last
recorded run reported (`last_run.json`): a `tp` or `fp` label on one of them is a finding somebody
reviewed; `fn` labels are misses, and the label of a finding no longer reported (a fixed false one)
no longer counts. A rule out of preview says on its page
what showed it precise (`Rule.evidence`), and the counts it gives must be the labels' own.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from trainlint.rules import ALL_RULES

REALWORLD = Path(__file__).resolve().parents[1] / "benchmarks" / "realworld"
LABELS = REALWORLD / "labels"
# the rules that were introduced in preview: each stays there until its labels show it precise
INTRODUCED_IN_PREVIEW = ("TL205", "TL504", "TL505", "TL506", "TL507", "TL508", "TL509", "TL510", "TL511")
MIN_FINDINGS = 10
MIN_PRECISION = 0.95


def reviewed(code: str) -> Counter[str]:
    """The `tp` and `fp` labels of one rule's findings in the last recorded run of the real-code set."""
    recorded = json.loads((REALWORLD / "last_run.json").read_text(encoding="utf-8"))["findings"]
    reported = {(repo.replace("/", "__", 1), f[0], f[1]) for repo, found in recorded.items() for f in found if f[2] == code}
    counts: Counter[str] = Counter()
    for path in LABELS.glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                label = json.loads(line)
                if label["code"] == code and label["verdict"] in ("tp", "fp") and (path.stem, label["path"], label["line"]) in reported:
                    counts[label["verdict"]] += 1
    return counts


def test_the_real_code_labels_are_present():
    assert len(list(LABELS.glob("*.jsonl"))) >= 40


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if r.code in INTRODUCED_IN_PREVIEW], ids=lambda r: r.code)
def test_a_rule_out_of_preview_has_the_evidence_on_its_page(rule):
    counts = reviewed(rule.code)
    total = counts["tp"] + counts["fp"]
    if rule.preview:
        assert not rule.evidence, f"{rule.code} is in preview: its page claims no evidence"
        return
    assert total >= MIN_FINDINGS, f"{rule.code} left preview on {total} reviewed findings"
    assert counts["tp"] / total >= MIN_PRECISION, f"{rule.code}: {counts['tp']} of {total} right"
    # the page's figures are the labels' figures
    stated = re.search(r"(\d+) of (\d+) reviewed findings", rule.evidence)
    assert stated is not None, rule.evidence
    assert (int(stated.group(1)), int(stated.group(2))) == (counts["tp"], total)
