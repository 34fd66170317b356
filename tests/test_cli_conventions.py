"""`trainlint check` behaves like the linters users know (ruff): options, output, stdin, progress."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.test_output_formats import FIXABLE as BASE_FIXABLE
from trainlint.cli import main

ROOT = Path(__file__).resolve().parent.parent
LOOP = """\
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    total += loss.item()  # :smile: :100:
"""
FIXABLE = BASE_FIXABLE + "    noise = torch.randn(4).cuda()\n"  # TL406, whose fix is unsafe


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=input, env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def at_lines(*lines: int) -> str:
    """A file whose `.item()` findings are on the given lines (each loop padded by comments)."""
    out: list[str] = ["import torch"]
    for line in lines:
        out += ["# padding"] * (line - 7 - len(out))
        out += LOOP.splitlines()
    return "\n".join(out) + "\n"


def test_emoji_codes_print_as_written(tmp_path: Path):
    path = write(tmp_path / "train.py", at_lines(100, 1234))
    for fmt in ("text", "concise"):
        code, out, _ = run(str(path), "--output-format", fmt, "--select", "TL401")
        assert code == 1
        assert f"{path}:100:14: TL401" in out and f"{path}:1234:14: TL401" in out, out
        assert not any(ord(ch) > 0x2000 for ch in out), out  # no 💯, 🔢 or 😄
    _, out, _ = run(str(path), "--select", "TL401")
    assert "1234 |     total += loss.item()  # :smile: :100:" in out


def test_stdin_fix_prints_the_fixed_source_and_diff_prints_the_diff(tmp_path: Path):
    code, out, err = run("-", "--stdin-filename", "train.py", "--fix", input=FIXABLE)
    assert out == FIXABLE.replace("history.append(loss)", "history.append(loss.detach())")
    assert code == 1 and "TL406" in err  # what is left (the unsafe fix) is reported on stderr
    code, out, err = run("-", "--stdin-filename", "train.py", "--diff", input=FIXABLE)
    assert out.startswith("--- a/train.py\n+++ b/train.py\n") and "+    history.append(loss.detach())" in out
    assert "TL302" not in out and "Found" not in out and code == 1
    code, out, _ = run("-", "--stdin-filename", "train.py", "--diff", "--unsafe-fixes", input=FIXABLE)
    assert "-    noise = torch.randn(4).cuda()" in out and "+    history.append(loss.detach())" in out


def test_stdin_output_has_code_frames_and_is_ordered_by_position():
    source = at_lines(20, 40)
    code, out, _ = run("-", "--stdin-filename", "train.py", "--select", "TL401", input=source)
    assert code == 1
    assert out.index("train.py:20:14:") < out.index("train.py:40:14:")
    assert "20 |     total += loss.item()" in out and "^^^^^^^^^^^" in out


def test_diff_prints_only_the_diff_and_writes_nothing(tmp_path: Path):
    path = write(tmp_path / "train.py", FIXABLE)
    code, out, err = run(str(path), "--diff")
    assert out.startswith(f"--- a/{path}") and "TL302" not in out and "Found" not in out
    assert path.read_text() == FIXABLE and code == 1
    clean = write(tmp_path / "clean" / "ok.py", "import torch\n")
    code, out, _ = run(str(clean), "--diff")
    assert (code, out) == (0, "")


def test_unsafe_fixes_without_fix_says_what_it_needs(tmp_path: Path):
    path = write(tmp_path / "train.py", FIXABLE)
    code, out, err = run(str(path), "--unsafe-fixes")
    assert "--unsafe-fixes applies nothing without --fix or --diff" in err
    assert path.read_text() == FIXABLE


def test_no_python_files_found_is_a_warning_not_a_pass(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    write(tmp_path / "docs" / "notes.txt", "loss.backward()\n")
    for folder in ("empty", "docs"):
        code, out, err = run(str(tmp_path / folder))
        assert code == 0 and "No Python files found" in err and "All checks passed!" not in out


def test_fix_hints_and_fixable_marks(tmp_path: Path):
    path = write(tmp_path / "train.py", FIXABLE)
    code, out, _ = run(str(path), "--output-format", "concise")
    lines = {line.split(": ", 1)[1].split(" ", 2)[0]: line for line in out.splitlines() if line.startswith(str(path))}
    assert " TL302 [*] " in lines["TL302"] and "[*]" not in lines["TL406"]
    assert "[*] 1 fix available (with --fix)." in out
    assert "1 hidden fix can be enabled with --unsafe-fixes." in out
    _, out, _ = run(str(path), "--output-format", "concise", "--unsafe-fixes")
    assert "[*] 2 fixes available (with --fix --unsafe-fixes)." in out


def test_show_fixes_lists_what_fix_applied(tmp_path: Path):
    path = write(tmp_path / "train.py", FIXABLE)
    code, out, _ = run(str(path), "--fix", "--show-fixes")
    assert "Fixed 1 problem:" in out and f"- {path}:" in out and "1 × TL302 (autograd-history-accumulated)" in out
    assert "history.append(loss.detach())" in path.read_text()


def test_output_file_and_output_format_with_format_alias(tmp_path: Path):
    path = write(tmp_path / "train.py", FIXABLE)
    report = tmp_path / "out" / "report.json"
    code, out, _ = run(str(path), "--output-format", "json", "-o", str(report))
    assert code == 1 and out == ""
    assert {d["code"] for d in json.loads(report.read_text())} == {"TL302", "TL406"}
    assert json.loads(run(str(path), "--format", "json")[1]) == json.loads(report.read_text())
    run(str(path), "--output-file", str(report))
    assert "Found 2 problems" in report.read_text() and "\x1b[" not in report.read_text()


def test_extend_ignore_and_per_file_ignores_on_the_command_line(tmp_path: Path):
    write(tmp_path / "pyproject.toml", '[tool.trainlint]\nignore = ["TL406"]\n')
    path = write(tmp_path / "scripts" / "train.py", FIXABLE)
    codes = lambda *a: {d["code"] for d in json.loads(run(str(path), "--output-format", "json", *a)[1])}  # noqa: E731
    assert codes() == {"TL302"}
    assert codes("--extend-ignore", "TL302") == set()
    assert codes("--per-file-ignores", "scripts/*.py:TL302") == set()
    assert codes("--per-file-ignores", "other/*.py:TL302") == {"TL302"}
    code, _, err = run(str(path), "--per-file-ignores", "TL302")
    assert code == 2 and "PATTERN:CODES" in err


def test_color_always_never_and_no_color(tmp_path: Path):
    path = write(tmp_path / "train.py", FIXABLE)
    assert "\x1b[" in run(str(path), "--color", "always")[1]
    assert "\x1b[" not in run(str(path), "--color", "never", env={"FORCE_COLOR": "1"})[1]
    # NO_COLOR means no escape codes at all (not even bold), however colour is forced
    assert "\x1b[" not in run(str(path), env={"NO_COLOR": "1", "FORCE_COLOR": "1"})[1]
    assert "\x1b[" in run(str(path), "--color", "always", env={"NO_COLOR": "1"})[1]
    assert "\x1b[" not in run("rule", "TL101", env={"NO_COLOR": "1", "FORCE_COLOR": "1"})[1]


def test_show_files_and_show_settings(tmp_path: Path):
    write(tmp_path / "pyproject.toml", '[tool.trainlint]\nignore = ["TL406"]\nstep-functions = ["do_update"]\n')
    write(tmp_path / "a.py", "x = 1\n")
    write(tmp_path / "nb.ipynb", '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    write(tmp_path / "notes.txt", "x\n")
    code, out, _ = run(str(tmp_path), "--show-files")
    assert code == 0 and out.splitlines() == [str(tmp_path / "a.py"), str(tmp_path / "nb.ipynb")]
    code, out, _ = run(str(tmp_path), "--show-settings", "--extend-select", "TL405")
    settings = dict(line.split("  # from ")[0].split(" = ", 1) for line in out.splitlines())
    assert code == 0 and json.loads(settings["config"]) == str(tmp_path / "pyproject.toml")
    assert f'ignore = ["TL406"]  # from {tmp_path / "pyproject.toml"}' in out and 'extend-select = ["TL405"]  # from command line' in out
    rules = json.loads(settings["rules"])
    assert "TL405" in rules and "TL406" not in rules and "TL401" in rules
    assert json.loads(settings["step-functions"]) == ["do_update"]


def test_explain_is_an_alias_of_rule():
    assert run("explain", "TL302")[:2] == run("rule", "TL302")[:2]
    code, out, _ = run("explain", "TL001")
    assert code == 0 and out.startswith("# TL001 unused-noqa")


@pytest.mark.parametrize(("files", "tty", "after", "shown"), [(20, True, "0", True), (20, False, "0", False), (20, True, "60", False)])
def test_progress_bar_only_on_long_runs_to_a_terminal(tmp_path: Path, files: int, tty: bool, after: str, shown: bool):
    """Progress shows on a terminal once the run has taken `TRAINLINT_PROGRESS_AFTER` seconds (1 by
    default), whatever the number of files; never on a pipe (see test_cli_progress.py)."""
    for i in range(files):
        write(tmp_path / f"m{i:03}.py", "x = 1\n")
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "trainlint", str(tmp_path), "-j", "1"],
            stdout=subprocess.PIPE, stderr=slave if tty else subprocess.PIPE, timeout=120,
            env={**{k: v for k, v in os.environ.items() if k != "CI"}, "PYTHONPATH": str(ROOT), "COLUMNS": "100", "TRAINLINT_PROGRESS_AFTER": after},
        )
        os.close(slave)
        slave = -1
        captured = b""
        if tty:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                captured += chunk
        else:
            captured = proc.stderr
    finally:
        os.close(master)
        if slave != -1:
            os.close(slave)
    assert proc.returncode == 0 and b"All checks passed!" in proc.stdout and b"checking" not in proc.stdout
    assert (b"checking" in captured and f"/{files}".encode() in captured) == shown, captured[-400:]


@pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git")
def test_readme_pre_commit_rev_exists_and_autoupdate_pins_a_commit(tmp_path: Path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = re.search(r"```yaml\n(# \.pre-commit-config\.yaml\n.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    hooks = tmp_path / "trainlint"
    hooks.mkdir()
    shutil.copy(ROOT / ".pre-commit-hooks.yaml", hooks)
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "hooks"]):
        subprocess.run([*git, *args], cwd=hooks, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=hooks, check=True, capture_output=True, text=True).stdout.strip()
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    config = project / ".pre-commit-config.yaml"
    config.write_text(snippet.replace("https://github.com/trainlint/trainlint", str(hooks)), encoding="utf-8")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "pre_commit", "autoupdate"], cwd=project, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"rev: {head}\b", config.read_text(encoding="utf-8")), config.read_text(encoding="utf-8")


def test_readme_table_lists_every_option_of_check():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("Options of `trainlint check`:") :].split("\n\n", 2)[1]
    check = main.commands["check"]
    names = [opt for param in check.params if param.param_type_name == "option" for opt in param.opts if opt.startswith("--")]
    missing = [name for name in names if f"`{name}" not in table and f"/{name}" not in table]
    assert not missing, f"options missing from the README's table: {missing}"
