"""The real-code set's manifest (`benchmarks/realworld/manifest.toml`) and its optional `rules` field:
a repository labelled for some rules only names them, and score.py scores only those rules' findings
there. These tests read the manifest and the labels; they lint nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REALWORLD = Path(__file__).resolve().parent.parent / "benchmarks" / "realworld"
sys.path.insert(0, str(REALWORLD))

import extract  # noqa: E402
import score  # noqa: E402

from trainlint.rules import RULES_BY_CODE  # noqa: E402


def test_every_manifest_entry_loads_and_names_known_rules() -> None:
    specs = extract.load_manifest()
    assert specs, "the manifest lists repositories"
    for spec in specs:
        if spec.rules is not None:
            assert set(spec.rules) <= set(RULES_BY_CODE), (spec.name, spec.rules)


def test_a_partly_labelled_repository_labels_only_its_rules() -> None:
    # load_labels stops the run on a label of another rule: every labels file must load
    for spec in extract.load_manifest():
        labels = score.load_labels(spec)
        if spec.rules is not None:
            assert {label.code for label in labels.values()} <= set(spec.rules), spec.name


def test_scored_keeps_every_rule_without_the_field_and_only_the_listed_ones_with_it() -> None:
    everything = extract.RepoSpec("a/b", "0" * 40, (".",), "")
    some = extract.RepoSpec("a/b", "0" * 40, (".",), "", ("TL205", "TL508"))
    assert score.scored(everything, "TL401") and score.scored(everything, "TL508")
    assert score.scored(some, "TL508") and not score.scored(some, "TL401")


@pytest.mark.parametrize("rules", [[], ["TL2051"], ["tl205"], ["TL205", "TL205"], "TL205", [205]])
def test_a_malformed_rules_field_stops_the_run(rules: object) -> None:
    with pytest.raises(SystemExit):
        extract._rules({"name": "a/b", "rules": rules})


def test_the_field_absent_means_all_rules() -> None:
    assert extract._rules({"name": "a/b"}) is None
    assert extract._rules({"name": "a/b", "rules": ["TL205"]}) == ("TL205",)


def test_recorded_findings_of_unlisted_rules_are_dropped(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(
        '{"findings": {"a/b": [["x.py", 1, "TL401", "m"], ["x.py", 2, "TL508", "m"]],'
        ' "c/d": [["y.py", 3, "TL401", "m"]]}}',
        encoding="utf-8",
    )
    some = extract.RepoSpec("a/b", "0" * 40, (".",), "", ("TL508",))
    everything = extract.RepoSpec("c/d", "0" * 40, (".",), "")
    found = score.recorded_findings(run, [some, everything])
    assert [(f.repo, f.code) for f in found] == [("a/b", "TL508"), ("c/d", "TL401")]
