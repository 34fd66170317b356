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
import threading
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


# -- ruff's flags and configuration keys ---------------------------------------------------------


def test_ruffs_short_flags_and_names_are_understood(tmp_path: Path):
    path = write(tmp_path / "train.py", STEP)
    cache = tmp_path / "cache"
    exit_zero = trainlint("check", "-e", "-n", "--cache-dir", str(cache), str(path))
    assert exit_zero.returncode == 0 and "TL401" in exit_zero.stdout and not cache.exists()  # -e, -n
    silent = trainlint("check", "-s", str(path))
    assert silent.returncode == 1 and silent.stdout == "" and silent.stderr == ""
    verbose = trainlint("check", "-v", "-q", str(path))
    assert "1 file to lint; configuration: none" in verbose.stderr and "linted 1 file in" in verbose.stderr
    full = trainlint("check", "--no-cache", "--output-format", "full", str(path))
    text = trainlint("check", "--no-cache", "--output-format", "text", str(path))
    assert full.returncode == 1 and full.stdout == text.stdout and "^^^" in full.stdout
    no_fix = trainlint("check", "--no-fix", "--no-cache", str(path))
    assert no_fix.returncode == 1 and path.read_text() == STEP
    ignored = trainlint("check", "--no-cache", "--output-format", "concise", "--extend-per-file-ignores", "train.py:TL401", str(path))
    assert "TL401" not in ignored.stdout and "TL406" in ignored.stdout


def test_fixable_and_unfixable_choose_the_fixes_applied(tmp_path: Path):
    path = write(tmp_path / "train.py", STEP)
    kept = trainlint("check", "--no-cache", "--fix", "--unsafe-fixes", "--fixable", "TL4", "--output-format", "concise", str(path))
    assert "history.append(loss)\n" in path.read_text() and "device=" in path.read_text(), kept.stderr  # TL406 fixed, not TL302
    write(path, STEP)
    trainlint("check", "--no-cache", "--fix", "--unsafe-fixes", "--unfixable", "TL4", str(path))
    assert "history.append(loss.detach())" in path.read_text() and "device=" not in path.read_text()
    write(path, STEP)
    marks = trainlint("check", "--no-cache", "--fixable", "TL4", "--output-format", "concise", str(path))
    assert "[*]" not in marks.stdout and "TL302" in marks.stdout  # not offered: it would not be applied
    bad = trainlint("check", "--fixable", "TL999", str(path))
    assert bad.returncode == 2 and "--fixable: 'TL999' matches no rule code" in bad.stderr


def test_ruffs_configuration_keys_output_format_cache_dir_force_exclude(tmp_path: Path):
    write(tmp_path / "pyproject.toml", textwrap.dedent("""\
        [tool.trainlint]
        output-format = "concise"
        cache-dir = ".lint-cache"
        force-exclude = true
        exclude = ["generated.py"]
    """))
    write(tmp_path / "train.py", STEP)
    write(tmp_path / "generated.py", STEP)
    done = trainlint("check", "train.py", "generated.py", cwd=tmp_path)
    assert done.returncode == 1 and "train.py:3:13: TL406" in done.stdout and "^^^" not in done.stdout  # concise
    assert "generated.py" not in done.stdout  # excluded though named: force-exclude
    assert (tmp_path / ".lint-cache").is_dir()
    framed = trainlint("check", "--output-format", "text", "--no-force-exclude", "train.py", "generated.py", cwd=tmp_path)
    assert "^^^" in framed.stdout and "generated.py" in framed.stdout  # the options win
    write(tmp_path / "pyproject.toml", '[tool.trainlint]\noutput-format = "fancy"\n')
    bad = trainlint("check", "train.py", cwd=tmp_path)
    assert bad.returncode == 2 and "output-format: expected one of text, full, concise" in bad.stderr


# -- a mistyped command ends the run -------------------------------------------------------------


def test_a_first_word_that_is_neither_a_command_nor_a_path_ends_the_run(tmp_path: Path):
    write(tmp_path / "train.py", STEP)
    for args in (["lintt", "."], ["--select", "TL4", "lintt", "."]):
        done = trainlint(*args, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", done.stdout  # nothing was linted
        assert "'lintt' is neither a command nor an existing path" in done.stderr and "check, clean" in done.stderr
    close = trainlint("--select", "TL4", "chekc", ".", cwd=tmp_path)  # (after an option: not caught before parsing)
    assert close.returncode == 2 and "did you mean 'check'?" in close.stderr
    named = trainlint("check", "--output-format", "concise", "lintt", ".", cwd=tmp_path)  # `check` named: a missing path
    assert named.returncode == 1 and "lintt:1:1: TL000" in named.stdout and "train.py" in named.stdout


# -- watch mode ----------------------------------------------------------------------------------


class Watching:
    """`trainlint check --watch .` in `folder`, its output (stderr too) read line by line; killed when
    done, or after `limit` seconds whatever happens (a blocked read then ends)."""

    def __init__(self, folder: Path, limit: float = 180) -> None:
        self.proc = subprocess.Popen(
            [*COMMAND, "check", "--watch", "--no-cache", "--output-format", "concise", "."], cwd=folder, env=ENV,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self.seen: list[str] = []
        self.timer = threading.Timer(limit, self.stop)
        self.timer.start()

    def read_until(self, text: str) -> None:
        while not any(text in line for line in self.seen):
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "ended (or killed) before printing " + repr(text) + ":\n" + "".join(self.seen)
            self.seen.append(line)

    def count(self, text: str) -> int:
        return sum(text in line for line in self.seen)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)  # (its own session: the command and any worker it started)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        self.timer.cancel()
        self.stop()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()  # type: ignore[union-attr]


def test_watch_lints_again_when_a_file_is_saved(tmp_path: Path):
    path = write(tmp_path / "train.py", STEP)
    watching = Watching(tmp_path)
    try:
        watching.read_until("Watching for file changes.")
        assert watching.count("train.py:9:11: TL401") == 1 and watching.count("TL402") == 0
        time.sleep(0.1)
        path.write_text(STEP + "    torch.cuda.synchronize()\n", encoding="utf-8")
        watching.read_until("TL402")
        watching.read_until("Found 4 problems")
        watching.read_until("Watching for file changes.")
        assert watching.count("File change detected") == 1 and watching.count("Found ") == 2, "".join(watching.seen)
    finally:
        watching.close()


def test_watch_waits_out_a_broken_configuration(tmp_path: Path):
    write(tmp_path / "train.py", STEP)
    config = write(tmp_path / "pyproject.toml", '[tool.trainlint]\nselect = ["TL999"]\n')
    watching = Watching(tmp_path)
    try:
        watching.read_until("Watching for file changes.")
        assert watching.count("'TL999' matches no rule code") == 1, "".join(watching.seen)
        time.sleep(0.1)
        config.write_text('[tool.trainlint]\nselect = ["TL4"]\n', encoding="utf-8")  # the configuration is watched too
        watching.read_until("TL401")
    finally:
        watching.close()


def test_watch_refuses_what_it_cannot_repeat(tmp_path: Path):
    done = trainlint("check", "--watch", "--show-files", ".", cwd=tmp_path)
    assert done.returncode == 2 and "does not go with --show-files" in done.stderr

