"""The recorded real-code run (`benchmarks/realworld/last_run.json`, written by `score.py --record`)
holds one finding per defect: no host sync reported both in a project helper and at the call that
runs it, and one finding per statement (per file, line and rule)."""

from __future__ import annotations

import json
from pathlib import Path

LAST_RUN = Path(__file__).resolve().parent.parent / "benchmarks" / "realworld" / "last_run.json"


def _run() -> dict:
    return json.loads(LAST_RUN.read_text(encoding="utf-8"))


def test_the_recorded_run_has_its_details() -> None:
    # `details` is written with the findings: a run recorded by an older scorer has none to check
    run = _run()
    assert set(run.get("details", {})) == set(run["findings"])


def _reviewed(verdicts: tuple[str, ...] = ("tp", "fn")) -> set[tuple[str, str, int]]:
    """(repository, path, line) of each TL401 finding the labels give one of `verdicts` (right by default;
    `fn`: expected, right once found)."""
    found = set()
    for labels in (LAST_RUN.parent / "labels").glob("*.jsonl"):
        repo = labels.stem.replace("__", "/", 1)
        for text in labels.read_text(encoding="utf-8").splitlines():
            label = json.loads(text) if text.strip() else None
            if label and label["code"] == "TL401" and label["verdict"] in verdicts:
                found.add((repo, label["path"], label["line"]))
    return found


def test_no_sync_is_reported_in_a_helper_and_at_its_call_site() -> None:
    # a call reported for what the helper reads (`f(x)`, "which reads ... on the host") while the
    # helper's own finding names that call in a chain: one sync, two findings. (A call whose result
    # the caller reads itself, `nanmin(t).item()`, is the caller's own sync: no duplicate. Nor is a
    # helper reading both what it computes and what it is passed, `values.mean().item()` beside
    # `ts.cpu()`: two defects, the first in the helper, the second at the call, each reviewed right.
    # Nor a pair both reviewed wrong: no defect at all, counted against precision twice, not a defect
    # reported twice: dinov3's segmentation evaluation, `gather_all_tensors` and its call.)
    run, right, wrong = _run(), _reviewed(), _reviewed(("fp",))
    both = []
    for repo, rows in run["details"].items():
        reported = {(path, line) for path, line, code, message in run["findings"][repo] if code == "TL401" and ", which reads " in message}
        for path, line, code, _repeats, callers in rows:
            if code == "TL401":
                both.extend(
                    (repo, path, line, caller) for caller in map(tuple, callers)
                    if caller in reported and not {(repo, path, line), (repo, *caller)} <= right
                    and not {(repo, path, line), (repo, *caller)} <= wrong
                )
    assert both == []


def test_one_finding_per_statement() -> None:
    # host syncs on one (path, line) that the run reported more than once: two findings of one defect
    # (not in a notebook, whose findings are numbered by their line within a cell: opacus's text
    # classifier has the same `loss.item()` on line 42 of two cells)
    repeated = [
        (repo, path, line, code, n) for repo, rows in _run()["details"].items() for path, line, code, n, _ in rows
        if n > 1 and code == "TL401" and not path.endswith(".ipynb")
    ]
    assert repeated == []
