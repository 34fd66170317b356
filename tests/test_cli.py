"""The command line end to end: exit codes, formats, selection, config, suppression, robustness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainlint.cli import main

ROOT = Path(__file__).resolve().parent.parent
BAD = """\
import torch
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    torch.cuda.reset_peak_memory_stats()
    total += loss.item()
"""
CLEAN = """\
import torch
for step, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""


def run(*args: str, cwd: Path | None = None, input: str | None = None, stdout_only: bool = False) -> tuple[int, str]:
    runner = CliRunner()
    old = os.getcwd()
    if cwd:
        os.chdir(cwd)
    try:
        result = runner.invoke(main, list(args), input=input, catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout if stdout_only else result.output


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def json_findings(*args: str, cwd: Path | None = None) -> tuple[int, list[dict]]:
    code, out = run(*args, "--format", "json", cwd=cwd, stdout_only=True)
    return code, json.loads(out)


def test_examples_exact_findings():
    code, found = json_findings(str(ROOT / "examples"))
    got = [(Path(d["path"]).relative_to(ROOT).as_posix(), d["line"], d["code"]) for d in found]
    assert got == [
        ("examples/bf16_lm.py", 54, "TL101"),
        ("examples/cifar_fp16.py", 21, "TL202"),
        ("examples/energy_trainer.py", 22, "TL403"),
        ("examples/energy_trainer.py", 26, "TL301"),
        ("examples/energy_trainer.py", 27, "TL302"),
        ("examples/energy_trainer.py", 31, "TL401"),
    ]
    assert code == 1


def test_clean_examples_exit_zero():
    code, out = run(str(ROOT / "examples" / "clean"))
    assert code == 0, out
    assert "All checks passed!" in out


def test_json_shape_is_stable(tmp_path):
    path = write(tmp_path, "t.py", BAD)
    code, found = json_findings(str(path))
    assert code == 1
    first = found[0]
    assert set(first) == {"code", "name", "message", "severity", "path", "line", "column", "end_line",
                          "end_column", "hint", "fix", "url"}
    assert (first["code"], first["line"], first["column"], first["end_line"], first["end_column"]) == ("TL403", 7, 5, 7, 41)
    assert first["severity"] == "info" and first["fix"] is None
    assert first["url"].endswith("rules/TL403-memory-stats-in-step.md")


def test_text_output_has_location_source_hint_link_and_summary(tmp_path):
    path = write(tmp_path, "t.py", BAD)
    code, out = run(str(path))
    assert code == 1
    assert f"{path}:8:14: TL401 [host-sync-in-step]" in out
    assert "    total += loss.item()" in out and "^^^^^^^^^^^" in out
    assert "= fix:" in out and "= docs: https://" in out
    assert "Found 2 problems (1 warning, 1 info) in 1 file" in out


def test_concise_and_statistics(tmp_path):
    path = write(tmp_path, "t.py", BAD)
    code, out = run(str(path), "--format", "concise")
    assert f"{path}:7:5: TL403 " in out and "Found 2 problems" in out
    code, out = run(str(path), "--format", "concise", "--statistics")
    # like ruff: only the table, no findings and no summary
    assert [line.split() for line in out.splitlines()] == [["1", "TL401", "host-sync-in-step"], ["1", "TL403", "memory-stats-in-step"]]
    assert code == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), {"TL401", "TL403"}),
        (("--select", "TL4"), {"TL401", "TL403"}),
        (("--select", "TL401"), {"TL401"}),
        (("--ignore", "TL403"), {"TL401"}),
        (("--select", "ALL", "--ignore", "TL4"), set()),
        (("--select", "TL1"), set()),
        (("--select", "TL4", "--ignore", "TL4", "--extend-select", "TL403"), {"TL403"}),
    ],
)
def test_selection(tmp_path, args, expected):
    path = write(tmp_path, "t.py", BAD)
    _, found = json_findings(str(path), *args)
    assert {d["code"] for d in found} == expected


def test_unknown_selector_is_usage_error(tmp_path):
    path = write(tmp_path, "t.py", BAD)
    code, out = run(str(path), "--select", "TL999")
    assert code == 2 and "TL999" in out


def test_exit_zero(tmp_path):
    path = write(tmp_path, "t.py", BAD)
    assert run(str(path), "--exit-zero")[0] == 0


def test_noqa_line_and_file_level(tmp_path):
    line = write(tmp_path, "a.py", BAD.replace("loss.item()", "loss.item()  # noqa: TL401, E501"))
    bare = write(tmp_path, "b.py", BAD.replace("loss.item()", "loss.item()  # noqa"))
    other = write(tmp_path, "c.py", BAD.replace("loss.item()", "loss.item()  # noqa: TL403"))
    whole = write(tmp_path, "d.py", "# trainlint: noqa: TL401\n" + BAD)
    in_string = write(tmp_path, "e.py", BAD.replace("total += loss.item()", 'total += loss.item(); s = "# noqa"'))
    _, found = json_findings(str(line), str(bare), str(other), str(whole), str(in_string))
    got = sorted((Path(d["path"]).name, d["code"]) for d in found)
    assert got == [("a.py", "TL403"), ("b.py", "TL403"), ("c.py", "TL401"), ("c.py", "TL403"),
                   ("d.py", "TL403"), ("e.py", "TL401"), ("e.py", "TL403")]


def test_pyproject_config_select_ignore_per_file_and_exclude(tmp_path):
    write(tmp_path, "pyproject.toml", """
        [tool.trainlint]
        ignore = ["TL403"]
        exclude = ["generated/"]
        per-file-ignores = { "scripts/*.py" = ["TL401"] }
    """)
    write(tmp_path, "src/train.py", BAD)
    write(tmp_path, "scripts/run.py", BAD)
    write(tmp_path, "generated/out.py", BAD)
    _, found = json_findings(str(tmp_path))
    got = sorted((Path(d["path"]).relative_to(tmp_path).as_posix(), d["code"]) for d in found)
    assert got == [("src/train.py", "TL401")]


def test_explicit_file_linted_despite_exclude_unless_force_exclude(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.trainlint]\nexclude = ["gen_*.py"]\n')
    path = write(tmp_path, "gen_x.py", BAD)
    assert json_findings(str(path), cwd=tmp_path)[1]
    assert json_findings(str(path), "--force-exclude", cwd=tmp_path)[1] == []


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[tool.trainlint]\nselects = ["TL1"]\n', "unknown key"),
        ('[tool.trainlint]\nselect = "TL1"\n', "select"),
        ('[tool.trainlint]\nignore = ["XX1"]\n', "XX1"),
        ("[tool.trainlint\n", "invalid TOML"),
    ],
)
def test_bad_config_is_exit_2_with_the_key_named(tmp_path, toml, needle):
    write(tmp_path, "pyproject.toml", toml)
    write(tmp_path, "t.py", BAD)
    code, out = run(str(tmp_path / "t.py"))
    assert code == 2 and needle in out


def test_gitignore_and_default_excludes(tmp_path):
    write(tmp_path, ".gitignore", "ignored/\n*_gen.py\n")
    write(tmp_path, "ignored/a.py", BAD)
    write(tmp_path, "b_gen.py", BAD)
    write(tmp_path, ".venv/lib/c.py", BAD)
    write(tmp_path, "node_modules/d.py", BAD)
    write(tmp_path, "keep.py", BAD)
    _, found = json_findings(str(tmp_path))
    assert {Path(d["path"]).name for d in found} == {"keep.py"}


def test_stdin_with_filename(tmp_path):
    code, out = run("-", "--stdin-filename", "train.py", "--format", "json", input=BAD)
    found = json.loads(out)
    assert code == 1 and {d["path"] for d in found} == {"train.py"}


def test_bad_inputs_give_one_diagnostic_each_and_the_run_goes_on(tmp_path):
    write(tmp_path, "syntax.py", "for x in loader:\n    loss.backward(\n")
    (tmp_path / "latin1.py").write_bytes(b"x = '\xe9\xff'\nloss.backward()\n")
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "dir.py").mkdir()
    write(tmp_path, "dir.py/inner.py", BAD)
    (tmp_path / "huge.py").write_text("x = 1\n" * 2_000_000)
    write(tmp_path, "good.py", BAD)
    code, found = json_findings(str(tmp_path), str(tmp_path / "missing.py"))
    by_file: dict[str, list[str]] = {}
    for d in found:
        by_file.setdefault(Path(d["path"]).name, []).append(d["code"])
    assert by_file["syntax.py"] == ["TL000"] and by_file["latin1.py"] == ["TL000"]
    assert by_file["huge.py"] == ["TL000"] and by_file["missing.py"] == ["TL000"]
    assert "empty.py" not in by_file
    assert by_file["inner.py"] == ["TL403", "TL401"] and by_file["good.py"] == ["TL403", "TL401"]
    syntax = next(d for d in found if d["path"].endswith("syntax.py"))
    assert (syntax["line"], syntax["column"]) == (2, 18) and "was never closed" in syntax["message"]
    assert code == 1


def test_output_identical_whatever_the_job_count(tmp_path):
    for i in range(12):
        write(tmp_path, f"m{i:02}/t.py", BAD)
    one = run(str(tmp_path), "--format", "json", "-j", "1")[1]
    two = run(str(tmp_path), "--format", "json", "-j", "2")[1]
    assert one == two and len(json.loads(one)) == 24


def test_rule_and_rules_commands():
    code, out = run("rule", "TL101")
    assert code == 0 and "# TL101 low-precision-params-trained" in out and "## Why is this bad?" in out
    code, out = run("rules", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and [r["code"] for r in rows] == sorted(r["code"] for r in rows)
    assert run("rule", "TL999")[0] == 2


def test_run_problem_codes_are_rules_users_look_up():
    # `verify run` prints TLR codes: `trainlint rule` explains them like any other rule
    code, out = run("rule", "TLR205")
    assert code == 0 and "# TLR205 gradient-norm-spikes" in out and "## What it means" in out and "## Fix" in out
    assert run("rule", "tlr108")[1].startswith("# TLR108 freeze-not-applied")
    assert run("explain", "TLR701")[:2] == run("rule", "TLR701")[:2]
    code, out = run("rules", "--run", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and "TLR205" in [r["code"] for r in rows] and all(r["url"].endswith(f"/run/{r['code']}-{r['name']}.md") for r in rows)
    code, out = run("rules", "--run")
    assert code == 0 and "TLR108" in out and "freeze-not-applied" in out and "TL101" not in out
    code, out = run("rule", "TLR999")
    assert code == 2


def test_cli_import_does_not_import_torch_or_libcst():
    probe = "import sys, trainlint.cli; print('torch' in sys.modules, 'libcst' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_lint_run_never_imports_torch(tmp_path):
    path = write(tmp_path, "t.py", BAD)
    probe = (
        "import sys\nfrom trainlint.cli import main\n"
        f"try:\n    main([{str(path)!r}, '-q'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True)


# a training loop with many findings: its JSON report is several times a pipe's buffer
MANY = BAD.replace("    total += loss.item()\n", "") + "".join(f"    torch.cuda.synchronize()  # {i}\n" for i in range(300))

# runs the command as `trainlint` does, with an exit hook that says whether Python cleaned up
_ENDING = """
import atexit, sys
marker = sys.argv[1]
atexit.register(lambda: open(marker, "w").write("cleaned up"))
sys.argv = ["trainlint", *sys.argv[2:]]
from trainlint.cli import run
run()
"""


def test_a_check_ends_without_python_s_clean_up_and_loses_no_output(tmp_path):
    path = write(tmp_path, "train.py", MANY)
    marker = tmp_path / "marker"
    proc = subprocess.run(
        [sys.executable, "-c", _ENDING, str(marker), str(path), "--output-format", "json", "--no-cache"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stdout) > 2 * 65536
    reported = json.loads(proc.stdout)
    assert len(reported) == 301 and {d["code"] for d in reported} == {"TL402", "TL403"}
    assert not marker.exists()  # (no exit hook ran: the process ended at once)
    proc = subprocess.run([sys.executable, "-c", _ENDING, str(marker), "rule", "TL401"], capture_output=True, text=True)
    assert proc.returncode == 0 and "TL401" in proc.stdout
    assert marker.read_text() == "cleaned up"  # other commands end as Python ends them


def test_a_closed_pipe_ends_a_check_quietly(tmp_path):
    path = write(tmp_path, "train.py", MANY)
    reader, writer = os.pipe()
    os.close(reader)
    proc = subprocess.run([sys.executable, "-m", "trainlint", str(path), "--no-cache"], stdout=writer, stderr=subprocess.PIPE, text=True)
    os.close(writer)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


def test_python_dash_m_entry_point(tmp_path):
    path = write(tmp_path, "t.py", CLEAN)
    proc = subprocess.run([sys.executable, "-m", "trainlint", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _command(*args: str, cwd: Path | None = None, stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """`trainlint ARGS` as installed (`python -m trainlint`), its exit through `run` included."""
    return subprocess.run([sys.executable, "-m", "trainlint", *args, "--no-cache"], cwd=cwd, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120)


@pytest.mark.parametrize("option", ["-o", "--write-baseline"])
def test_a_report_or_baseline_never_overwrites_a_file_being_linted(tmp_path, option):
    """`-o train.py train.py` would replace the code with its report: refused (exit 2) before anything
    is written, whatever the spelling of the path, and through a symbolic or a hard link."""
    path = write(tmp_path, "pkg/train.py", BAD)
    os.symlink(path, tmp_path / "link.py")
    os.link(path, tmp_path / "hard.txt")
    for output, linted in [
        ("pkg/train.py", "pkg/train.py"),
        ("pkg/../pkg/./train.py", "pkg/train.py"),
        (str(path), "pkg/train.py"),
        ("pkg/train.py", "pkg"),  # found in a folder
        ("link.py", "pkg/train.py"),
        ("pkg/train.py", "link.py"),
        ("hard.txt", "pkg/train.py"),
    ]:
        proc = _command(linted, option, output, cwd=tmp_path)
        assert proc.returncode == 2, (output, linted, proc.stderr)
        (line,) = proc.stderr.splitlines()
        assert line.startswith("trainlint: error: ") and "a file being linted" in line and str(Path(output)) in line, line
        assert path.read_text() == textwrap.dedent(BAD), (output, linted)
    # a file next to the code, not linted, is written as before
    proc = _command("pkg", option, "pkg/report.json", cwd=tmp_path)
    assert proc.returncode == (1 if option == "-o" else 0) and (tmp_path / "pkg" / "report.json").stat().st_size > 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [
    ("--output-format", "json"),  # a short report: held in the buffer until the exit's flush
    ("--output-format", "text"),
    ("--statistics",),
    ("--show-files",),
    ("--show-settings",),
])
def test_a_report_to_a_full_disk_is_an_error_not_a_traceback(tmp_path, args):
    """As `-o /dev/full` is: exit 2 (not 1, which says "findings") and one line on stderr."""
    path = write(tmp_path, "train.py", BAD)
    with open("/dev/full", "w") as full:
        proc = _command(str(path), *args, stdout=full)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("trainlint: error: cannot write") and "No space left on device" in line, proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_long_report_to_a_full_disk_is_an_error_not_a_traceback(tmp_path):
    """A report bigger than the stream's buffer fails while it is written, not at the exit."""
    path = write(tmp_path, "train.py", MANY)
    for name in range(150):  # --show-files's list, bigger than the buffer too
        write(tmp_path, f"files/module_with_a_rather_long_name_{name:04}.py", "x = 1\n")
    for args in ([str(path)], [str(path), "--output-format", "json"], [str(tmp_path / "files"), "--show-files"]):
        with open("/dev/full", "w") as full:
            proc = _command(*args, stdout=full)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.splitlines()
        assert line.startswith("trainlint: error: cannot write") and "No space left on device" in line, proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_diff_or_a_fixed_source_to_a_full_disk_is_an_error(tmp_path):
    """`--diff`, and `-` with `--fix` (an editor's format-on-save reads the fixed source): lost output
    is exit 2 with one line, never exit 1 ("something to fix") or a silent 0."""
    fixable = "history = []\nfor x, y in loader:\n    loss = model(x)\n    loss.backward()\n    optimizer.step()\n    history.append(loss)\n"
    path = write(tmp_path, "train.py", fixable)
    for args, stdin in (([str(path), "--diff"], None), (["-", "--fix", "--stdin-filename", str(path)], fixable)):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "trainlint", *args, "--no-cache"], input=stdin, stdout=full,
                                  stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == 2, (args, proc.stderr)
        (line,) = [line for line in proc.stderr.splitlines() if line.startswith("trainlint: error:")]
        assert "cannot write the" in line and "No space left on device" in line and "Traceback" not in proc.stderr
    assert path.read_text() == fixable  # (--diff writes nothing)
