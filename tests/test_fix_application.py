"""`--fix` and `--diff` never corrupt a file: line endings kept, diffs that `patch` applies, fixes
re-checked before they are kept, and concurrent runs that leave every file as one run would."""

from __future__ import annotations

import shutil
import subprocess
import sys
import json
import textwrap
import time
from pathlib import Path

import pytest

from trainlint.config import Settings
from trainlint.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from trainlint.engine.lint import FileResult, lint_source
from trainlint.fixes import fix_source, replace_if_unchanged

ROOT = Path(__file__).resolve().parent.parent

# a step loop with all three kinds of fix: TL302 and TL406 (safe), TL201's inserted unscale_ (unsafe)
LOOP = textwrap.dedent("""\
    import torch

    device = torch.device("cuda")
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        mask = torch.ones(4).to(device)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x * mask), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        total += loss
    print(total.item())
    """)


def trainlint(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainlint", *args], capture_output=True, cwd=cwd, timeout=300, **kwargs)


def test_cr_only_file_is_fixed_in_place_and_keeps_its_line_endings(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_bytes(LOOP.replace("\n", "\r").encode())
    run = trainlint(str(path), "--fix", "--select", "TL302,TL406")
    fixed = path.read_bytes()
    assert fixed == LOOP.replace("total += loss", "total += loss.detach()").replace(
        "torch.ones(4).to(device)", "torch.ones(4, device=device)").replace("\n", "\r").encode()
    assert b"\n" not in fixed and b"Fixed 2 problems" in run.stderr and run.returncode == 0


def test_crlf_file_gets_an_inserted_line_ending_in_crlf(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_bytes(LOOP.replace("\n", "\r\n").encode())
    trainlint(str(path), "--fix", "--unsafe-fixes", "--select", "TL201")
    fixed = path.read_bytes()
    assert b"    scaler.unscale_(optimizer)\r\n    torch.nn.utils.clip_grad_norm_" in fixed
    assert fixed.count(b"\n") == fixed.count(b"\r\n") == LOOP.count("\n") + 1


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the `patch` program (.ci/run installs it)")
@pytest.mark.parametrize("newline,final", [("\n", False), ("\n", True), ("\r\n", False), ("\r", False), ("\r", True)])
def test_diff_applies_with_patch_and_equals_fix(tmp_path: Path, newline: str, final: bool):
    source = (LOOP if final else LOOP.rstrip("\n")).replace("\n", newline)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.py").write_bytes(source.encode())
    args = ("--unsafe-fixes", "--select", "TL201,TL302,TL406")
    diff = trainlint("train.py", "--diff", *args, cwd=tmp_path / "a")
    assert (tmp_path / "a" / "train.py").read_bytes() == source.encode(), "--diff must not write"
    if not final:
        assert b"\\ No newline at end of file\n" in diff.stdout
    patched = subprocess.run(["patch", "-p1", "--binary"], input=diff.stdout, cwd=tmp_path / "a", capture_output=True)
    assert patched.returncode == 0, patched.stdout + patched.stderr
    trainlint("train.py", "--fix", *args, cwd=tmp_path / "b")
    fixed = (tmp_path / "b" / "train.py").read_bytes()
    assert fixed != source.encode() and (tmp_path / "a" / "train.py").read_bytes() == fixed


def test_fix_keeps_a_bom_and_a_latin1_cookie(tmp_path: Path):
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + LOOP.encode())
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\n# \xe9t\xe9\n" + LOOP.encode())
    trainlint(str(bom), str(latin), "--fix", "--select", "TL302")
    assert bom.read_bytes() == b"\xef\xbb\xbf" + LOOP.replace("total += loss", "total += loss.detach()").encode()
    assert latin.read_bytes().startswith(b"# -*- coding: latin-1 -*-\n# \xe9t\xe9\n")


def _tree(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / f"pkg{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        # vary the files so that positions differ; every third one has no fix at all, every third
        # one no TL406 (so that edits applied to the wrong text would still parse: silent corruption)
        body = LOOP.replace("total", f"total_{i}") if i % 3 else "import torch\nprint(torch.ones(2))\n"
        if i % 3 == 2:
            body = body.replace("torch.ones(4).to(device)", "torch.ones(4, device=device)")
        (folder / f"train_{i}.py").write_text(f"# file {i}\n" + "\n" * (i % 7) + body)


@pytest.mark.parametrize("stagger", [0.0, 0.15])
def test_two_concurrent_fix_runs_leave_every_file_as_one_run_does(tmp_path: Path, stagger: float):
    # the second run starts a moment later, so that it reads files the first is rewriting
    args = ("--fix", "--unsafe-fixes", "--select", "TL201,TL302,TL406", "-q")
    _tree(tmp_path / "single", 50)
    trainlint("single", *args, cwd=tmp_path)
    _tree(tmp_path / "tree", 50)
    procs = []
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, "-m", "trainlint", "tree", *args], cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        time.sleep(stagger)
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(b"Traceback" not in err for _, err in outs), outs
    expected = {p.relative_to(tmp_path / "single"): p.read_text() for p in (tmp_path / "single").rglob("*.py")}
    actual = {p.relative_to(tmp_path / "tree"): p.read_text() for p in (tmp_path / "tree").rglob("*.py")}
    assert actual == expected
    assert sum(text.count("scaler.unscale_(optimizer)") for text in actual.values()) == 33
    assert not list((tmp_path / "tree").rglob("*.trainlint")), "no temporary file left behind"


def test_a_file_changed_after_it_was_read_is_not_written(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_bytes(b"x = 1\n")
    assert not replace_if_unchanged(path, b"x = 0\n", b"x = 2\n")
    assert path.read_bytes() == b"x = 1\n"
    assert replace_if_unchanged(path, b"x = 1\n", b"x = 2\n") and path.read_bytes() == b"x = 2\n"


def test_fix_through_a_symlink_rewrites_the_target_and_keeps_the_link(tmp_path: Path):
    real = tmp_path / "real.py"
    real.write_text(LOOP)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    trainlint(str(link), "--fix", "--select", "TL302")
    assert link.is_symlink() and "total += loss.detach()" in real.read_text()


def _with_planted_fixes(extra: list[Diagnostic]):
    """The real lint, plus fabricated findings whose fixes misbehave, to exercise the re-check."""
    def lint(source: str, name: str, settings: Settings) -> FileResult:
        result = lint_source(source, name, settings)
        if "BROKEN" in source:
            result.diagnostics.extend(extra)
        return result
    return lint


def _planted(line: int, column: int, end_column: int, content: str) -> Diagnostic:
    fix = Fix("planted", (Edit(line, column, line, end_column, content),), Applicability.SAFE)
    return Diagnostic("TL999", "planted", "planted", Severity.INFO, "t.py", line, column, line, end_column, fix=fix)


def _planted_case() -> tuple[str, list[Diagnostic]]:
    """LOOP with two planted safe fixes: one breaks the file, one leaves its finding reported."""
    source = LOOP + "BROKEN = 1\n"
    lines = source.splitlines()
    row = lines.index("BROKEN = 1") + 1
    parse_breaker = _planted(row, 1, 7, "BROKEN =")  # `BROKEN = = 1`
    finding_maker = _planted(row, 10, 11, "torch.zeros(1)")  # harmless alone, but it stays reported
    return source, [parse_breaker, finding_maker]


def test_a_fix_that_breaks_the_file_or_adds_a_finding_is_refused_and_the_good_ones_kept():
    source, planted = _planted_case()
    settings = Settings(select=("TL302", "TL406"))
    outcome = fix_source(source, "t.py", settings, unsafe=False, lint=_with_planted_fixes(planted))
    reasons = sorted(r for _, r in outcome.rejected)
    assert reasons == ["TL999 is still reported after the fix", "the fixed file does not parse"]
    assert {d.code for d in outcome.applied} == {"TL302", "TL406"}
    assert "total += loss.detach()" in outcome.source and "BROKEN = 1\n" in outcome.source


def test_the_language_server_refuses_the_fixes_the_cli_refuses(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("lsprotocol")
    from trainlint.lsp import analysis

    source, planted = _planted_case()
    settings = Settings(select=("TL302", "TL406"))
    lint = _with_planted_fixes(planted)
    monkeypatch.setattr(analysis, "lint_buffer", lint)
    monkeypatch.setattr(analysis, "lint_source", lint)
    found = lint(source, "t.py", settings).diagnostics
    assert {d.code for d in found if d.fix is not None} == {"TL302", "TL406", "TL999"}
    # quick fixes: each finding's fix alone, as `--fix` re-checks it alone
    assert {d.code for d in analysis.checked_fixes(source, "t.py", settings, found)} == {"TL302", "TL406"}
    # "fix all": one round of `--fix`
    assert {d.code for d in analysis.safe_fixes(source, "t.py", settings)} == {"TL302", "TL406"}


# ClassyVision's task: the step calls its own helper to clip, which calls torch's clip
CLIPPING_HELPER = textwrap.dedent("""\
    import torch


    class Task:
        def train_step(self, sample):
            loss = self.loss(self.model(sample["input"]), sample["target"])
            self.amp_grad_scaler.scale(loss).backward()
            if self.clip_grad_norm is not None:
                self._clip_gradients(self.clip_grad_norm)
            self.amp_grad_scaler.step(self.optimizer)
            self.amp_grad_scaler.update()

        def _clip_gradients(self, max_norm):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
""")


def test_a_clip_in_a_helper_is_reported_where_it_clips_and_unscaled_before_the_call(tmp_path: Path):
    path = tmp_path / "task.py"
    path.write_text(CLIPPING_HELPER)
    done = trainlint(str(path), "--select", "TL201", "--output-format", "json", "--no-cache")
    assert [d["line"] for d in json.loads(done.stdout)] == [14]
    trainlint(str(path), "--fix", "--unsafe-fixes", "--select", "TL201", "--no-cache")
    assert "    self.amp_grad_scaler.unscale_(self.optimizer)\n            self._clip_gradients(" in path.read_text()
