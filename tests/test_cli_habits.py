"""A ruff user's habits carry over, each checked through the real `trainlint` command (a subprocess):
settings `extend` inherits keep their paths, ruff's flags and keys are understood, a mistyped command
stops the run, and messages say what happened in the right number."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the installed `trainlint` command (beside this Python), run with this checkout's code first on the path
_SCRIPT = shutil.which("trainlint", path=str(Path(sys.executable).parent))
COMMAND = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "trainlint"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "NO_COLOR": "1"}
STEP = textwrap.dedent("""\
    import torch
    for x, y in loader:
        noise = torch.randn(4).cuda()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append(loss)
        print(loss.item())
""")  # TL406 (line 3), TL302 (line 8, safe fix), TL401 (line 9)


def trainlint(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- small things said wrongly ------------------------------------------------------------------


def test_findings_left_after_fix_print_in_line_order_and_counts_are_pluralised(tmp_path: Path):
    path = write(tmp_path / "train.py", STEP)
    done = trainlint("check", "--no-cache", "--fix", "--output-format", "concise", str(path))
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(str(path))]
    assert [int(line.split(":")[1]) for line in lines] == [3, 9], done.stdout  # TL406 before TL401
    assert "Fixed 1 problem in" in done.stderr and "(s)" not in done.stderr
    write(path, STEP)
    diff = trainlint("check", "--no-cache", "--diff", str(path))
    assert "Would fix 1 problem in" in diff.stderr and "(s)" not in diff.stderr


def test_a_bad_code_in_a_config_override_is_blamed_on_the_option(tmp_path: Path):
    write(tmp_path / "pyproject.toml", '[tool.trainlint]\nselect = ["TL4"]\n')
    write(tmp_path / "train.py", STEP)
    done = trainlint("check", "--config", 'select = ["TL999"]', "train.py", cwd=tmp_path)
    assert done.returncode == 2
    assert "--config 'select = [\"TL999\"]'" in done.stderr and "pyproject.toml" not in done.stderr, done.stderr


def test_a_missing_file_is_an_io_error_not_a_parse_error(tmp_path: Path):
    done = trainlint("check", "--no-cache", "--output-format", "json", "nothere.py", cwd=tmp_path)
    assert done.returncode == 1
    (finding,) = json.loads(done.stdout)
    assert finding["code"] == "TL000" and finding["name"] == "io-error", finding
    assert "no such file or directory" in finding["message"]
    assert finding["url"].endswith("TL000-parse-error.md")  # TL000's one page, which names io-error


def test_rules_lists_tl000_and_tl001_and_rule_finds_a_rule_by_name():
    listed = trainlint("rules", "--format", "json")
    codes = [row["code"] for row in json.loads(listed.stdout)]
    assert codes[:3] == ["TL000", "TL001", "TL101"]
    assert "TL000" in trainlint("rules").stdout
    by_name = trainlint("rule", "host-sync-in-step")
    assert by_name.returncode == 0 and by_name.stdout.startswith("# TL401 host-sync-in-step"), by_name.stdout[:200]
    assert trainlint("rule", "unused-noqa").stdout.startswith("# TL001")
    unknown = trainlint("rule", "no-such-rule")
    assert unknown.returncode == 2 and "neither a code nor a name" in unknown.stderr


# -- `extend`: each setting's paths are relative to the file that wrote it ----------------------


def _extending(tmp_path: Path, base: str, own: str = "") -> Path:
    """The root's pyproject.toml holds `base`; b/trainlint.toml extends it (and holds `own`)."""
    write(tmp_path / "pyproject.toml", "[tool.trainlint]\n" + base)
    write(tmp_path / "b" / "trainlint.toml", 'extend = "../pyproject.toml"\n' + own)
    return tmp_path


def _listed(tmp_path: Path, *files: str) -> list[str]:
    for name in files:
        write(tmp_path / name, STEP)
    done = trainlint("check", "--show-files", "b", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return sorted(Path(line).as_posix() for line in done.stdout.split())


def test_an_inherited_exclude_stays_relative_to_the_base_configuration(tmp_path: Path):
    _extending(tmp_path, 'exclude = ["b/legacy/*.py"]\n')
    listed = _listed(tmp_path, "b/train.py", "b/legacy/old.py", "b/b/legacy/old.py")
    assert listed == ["b/b/legacy/old.py", "b/train.py"]  # b/legacy/old.py is the one the root meant


def test_an_inherited_extend_exclude_stays_relative_and_accumulates_with_the_own(tmp_path: Path):
    _extending(tmp_path, 'extend-exclude = ["b/gen/*.py"]\n', 'extend-exclude = ["tmp/*.py"]\n')
    listed = _listed(tmp_path, "b/train.py", "b/gen/x.py", "b/b/gen/x.py", "b/tmp/y.py")
    assert listed == ["b/b/gen/x.py", "b/train.py"]
    shown = trainlint("check", "--show-settings", "b/train.py", cwd=tmp_path).stdout
    assert 'exclude = ["b/gen/*.py", "tmp/*.py"]' in shown  # printed as written


def test_an_inherited_per_file_ignore_stays_relative_to_the_base_configuration(tmp_path: Path):
    _extending(tmp_path, 'per-file-ignores = {"b/scripts/*.py" = ["TL401"]}\n')
    for name in ("b/scripts/run.py", "b/b/scripts/run.py"):
        write(tmp_path / name, STEP)
    done = trainlint("check", "--no-cache", "--output-format", "concise", "--select", "TL401", "b", cwd=tmp_path)
    flagged = sorted(line.split(":")[0] for line in done.stdout.splitlines() if ": TL401 " in line)
    assert flagged == [str(Path("b/b/scripts/run.py"))], done.stdout + done.stderr
