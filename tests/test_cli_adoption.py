"""What a ruff user expects of the command line when adopting trainlint: CI report formats, exit-code
policies, baselines that survive edits, `clean`, and errors that name the real mistake."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

from trainlint.cli import main
from trainlint.config import Settings
from trainlint.lsp.analysis import lint_buffer

TRAIN = textwrap.dedent(
    """\
    import torch

    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


    def train(loader):
        for x in loader:
            optimizer.zero_grad()
            scale = torch.full((4,), 0.5).to("cuda")
            loss = model(x.cuda() * scale).sum()
            loss.backward()
            optimizer.step()
            print(loss.item())  # noqa: TL401
    """
)


def run(tmp_path: Path, *args: str) -> tuple[int, str]:
    env = {"TRAINLINT_CACHE_DIR": str(tmp_path / "cache")}
    result = CliRunner().invoke(main, ["check", "--no-cache", *args], env=env, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_gitlab_report_is_code_quality_json_with_stable_fingerprints(project: Path):
    code, out = run(project, "train.py", "--output-format", "gitlab")
    issues = json.loads(out)
    assert code == 1 and [i["check_name"] for i in issues] == ["TL406 host-tensor-moved-per-step"]
    issue = issues[0]
    assert issue["location"] == {"path": "train.py", "lines": {"begin": 10, "end": 10}} and issue["severity"] == "info"
    (project / "train.py").write_text("import os\n\n" + TRAIN.replace("def train(", "def fit("))
    moved = json.loads(run(project, "train.py", "--output-format", "gitlab")[1])[0]
    assert moved["location"]["lines"]["begin"] == 12 and moved["fingerprint"] == issue["fingerprint"]


def test_junit_and_json_lines_reports(project: Path):
    _, out = run(project, "train.py", "--output-format", "junit")
    suites = ET.fromstring(out.split("\n", 1)[1])
    assert suites.get("failures") == "1"
    (case,) = suites.iter("testcase")
    assert case.get("classname") == "train.py" and case.find("failure").get("type") == "TL406"
    _, out = run(project, "train.py", "--output-format", "json-lines", "--ignore-noqa")
    assert [json.loads(line)["code"] for line in out.splitlines()] == ["TL406", "TL401"]
    (project / "clean.py").write_text("x = 1\n")
    code, out = run(project, "clean.py", "--output-format", "junit")
    assert code == 0 and ET.fromstring(out.split("\n", 1)[1]).get("failures") == "0"


def test_ignore_noqa_reports_what_comments_suppress(project: Path):
    assert "TL401" not in run(project, "train.py", "--output-format", "concise")[1]
    assert "TL401" in run(project, "train.py", "--output-format", "concise", "--ignore-noqa")[1]


def test_fail_level_reports_below_it_without_failing(project: Path):
    code, out = run(project, "train.py", "--fail-level", "warning")  # TL406 is info
    assert code == 0 and "TL406" in out
    assert run(project, "train.py", "--fail-level", "warning", "--ignore-noqa")[0] == 1  # TL401 is a warning
    assert run(project, "train.py", "--fail-level", "info")[0] == 1


def test_fix_only_and_exit_non_zero_on_fix(project: Path):
    code, out = run(project, "train.py", "--fix-only", "--ignore-noqa")
    assert code == 0 and "TL401" not in out  # fixed TL406, and the TL401 left is neither reported nor failing
    assert "device=" in (project / "train.py").read_text()
    (project / "train.py").write_text(TRAIN)
    code, _ = run(project, "train.py", "--fix", "--exit-non-zero-on-fix")
    assert code == 1  # nothing left, but a file changed
    assert run(project, "train.py", "--fix", "--exit-non-zero-on-fix")[0] == 0  # nothing to fix any more


def test_baseline_hides_recorded_findings_through_edits_and_reports_new_ones(project: Path):
    code, out = run(project, "train.py", "--write-baseline", "baseline.json")
    assert code == 0 and "Recorded 1 finding" in out
    code, out = run(project, "train.py", "--baseline", "baseline.json")
    assert code == 0 and "All checks passed!" in out and "1 finding hidden by the baseline" in out
    # lines moved, the enclosing function renamed, an unrelated edit: still the recorded finding
    edited = "import os\n\n" + TRAIN.replace("def train(", "def fit(").replace("lr=0.1", "lr=0.2")
    (project / "train.py").write_text(edited + "\n\ndef more(loader):\n    for x in loader:\n        model(x).sum().backward()\n        optimizer.step()\n        mask = torch.ones(3).cuda()\n")
    code, out = run(project, "train.py", "--baseline", "baseline.json", "--output-format", "concise")
    assert code == 1 and out.count("TL406") == 1 and "train.py:23:" in out  # only the new one


def test_baseline_named_in_the_configuration_applies_from_any_folder_and_in_the_editor(project: Path, monkeypatch: pytest.MonkeyPatch):
    run(project, "train.py", "--write-baseline", "ci/baseline.json")
    (project / "pyproject.toml").write_text('[tool.trainlint]\nbaseline = "ci/baseline.json"\n')
    sub = project / "ci"
    monkeypatch.chdir(sub)
    code, out = run(project, "../train.py")
    assert code == 0 and "hidden by the baseline" in out
    settings = Settings(root=project, baseline=project / "ci" / "baseline.json")
    assert lint_buffer(TRAIN, str(project / "train.py"), settings).diagnostics == []
    assert lint_buffer(TRAIN, str(project / "train.py"), Settings(root=project)).diagnostics


def test_unreadable_or_unwritable_baseline_is_a_usage_error(project: Path):
    (project / "baseline.json").write_text("[1, 2]")
    code, out = run(project, "train.py", "--baseline", "baseline.json")
    assert code == 2 and "not a trainlint baseline" in out
    (project / "a_file").write_text("")
    code, out = run(project, "train.py", "--write-baseline", "a_file/baseline.json")
    assert code == 2 and "cannot write the baseline" in out
    code, out = run(project, "train.py", "-o", "a_file/report.txt")
    assert code == 2 and "cannot write the report" in out


def test_test_code_is_counted_marked_and_can_be_linted(project: Path):
    (project / "tests").mkdir()
    (project / "tests" / "test_step.py").write_text(TRAIN)
    code, out = run(project, "tests", "--output-format", "text")
    assert code == 0 and "1 file linted as test code" in out
    out = CliRunner().invoke(main, ["check", "--show-files", "tests"]).output
    assert "test_step.py  (test code" in out
    (project / "pyproject.toml").write_text("[tool.trainlint]\nlint-test-code = true\n")
    code, out = run(project, "tests", "--output-format", "concise")
    assert code == 1 and "TL406" in out


def test_a_script_named_like_a_test_that_defines_no_test_is_training_code(project: Path):
    # TCN's `adding_problem/add_test.py` trains (its `def test():` evaluates); a `*_test.py` with a
    # `def test_...` or a `class Test...`, as pytest collects, stays test code
    (project / "add_test.py").write_text(TRAIN + "\n\ndef test(loader):\n    return sum(model(x).sum() for x in loader)\n")
    (project / "step_test.py").write_text(TRAIN + "\n\ndef test_step():\n    train([])\n")
    (project / "loop_test.py").write_text(TRAIN + "\n\nclass TestLoop:\n    pass\n")
    code, out = run(project, "add_test.py", "step_test.py", "loop_test.py", "--output-format", "concise")
    assert code == 1 and "add_test.py:10:17: TL406" in out and "step_test.py" not in out and "loop_test.py" not in out
    assert "2 files linted as test code" in out


def test_a_notebook_named_like_a_test_is_test_code_only_if_a_cell_defines_one(tmp_path: Path):
    from trainlint.test_code import is_test_file

    def notebook(source: str) -> str:
        return json.dumps({"cells": [{"cell_type": "code", "source": source.splitlines(keepends=True)}], "nbformat": 4}, indent=1)

    (tmp_path / "test_cells.ipynb").write_text(notebook("import torch\n\ndef test_step():\n    assert True\n"))
    (tmp_path / "test_eval.ipynb").write_text(notebook("import torch\n\ndef test(model):\n    return model(x)\n"))
    assert is_test_file(str(tmp_path / "test_cells.ipynb")) and not is_test_file(str(tmp_path / "test_eval.ipynb"))


def test_mistyped_command_and_command_line_selector_errors(project: Path):
    result = CliRunner().invoke(main, ["chek", "."])
    assert result.exit_code == 2 and "'chek' is neither a command nor a path: did you mean 'check'?" in result.output
    (project / "pyproject.toml").write_text('[tool.trainlint]\nselect = ["TL4"]\n')
    code, out = run(project, "--select", "TL9", "train.py")
    assert code == 2 and "command line: select: 'TL9'" in out and "pyproject.toml" not in out


def test_clean_removes_only_the_cache(project: Path):
    cache = project / "cache"
    CliRunner().invoke(main, ["check", "train.py"], env={"TRAINLINT_CACHE_DIR": str(cache)})
    assert any(cache.glob("v*"))
    (cache / "mine.txt").write_text("not the cache's")
    out = CliRunner().invoke(main, ["clean", "--cache-dir", str(cache)]).output
    assert "Removed the cache" in out and not any(cache.glob("v*")) and (cache / "mine.txt").exists()
    assert os.listdir(cache) == ["mine.txt"]


def test_baseline_counts_equal_findings_in_one_function_apart(project: Path):
    def script(copies: int) -> str:
        return TRAIN.replace("        print(loss.item())  # noqa: TL401\n", "        print(loss.item())\n" * copies)

    (project / "train.py").write_text(script(2))
    assert run(project, "train.py", "--output-format", "concise")[1].count("TL401") == 2
    run(project, "train.py", "--write-baseline", "baseline.json")
    assert "3 findings hidden" in run(project, "train.py", "--baseline", "baseline.json")[1]  # 2 x TL401 and TL406
    (project / "train.py").write_text(script(3))
    code, out = run(project, "train.py", "--baseline", "baseline.json", "--output-format", "concise")
    assert code == 1 and out.count("TL401") == 1  # the third equal finding is new; the two recorded stay hidden
    (project / "train.py").write_text(script(1))
    assert "2 findings hidden" in run(project, "train.py", "--baseline", "baseline.json")[1]  # one fixed: it hides one fewer
