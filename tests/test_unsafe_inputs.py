"""Inputs that used to crash or hang the run: each gives a TL000 or a clear error line, never a
traceback, a hang or a read of more than max-file-size bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = "import torch\n\nfor x in loader:\n    optimizer.zero_grad()\n    loss = model(x)\n    loss.backward()\n    optimizer.step()\n"


def trainlint(*args: str, cwd: Path, stdin=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real command; a hang fails the test through the timeout."""
    return subprocess.run([sys.executable, "-m", "trainlint", *args], cwd=cwd, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def _json(run: subprocess.CompletedProcess) -> dict[str, list[str]]:
    import json

    assert "Traceback" not in run.stderr, run.stderr
    out: dict[str, list[str]] = {}
    for d in json.loads(run.stdout or "[]"):
        out.setdefault(Path(d["path"]).name, []).append(f"{d['code']}: {d['message']}")
    return out


def test_deepspeed_json_nested_100000_deep_is_a_tl000(tmp_path: Path):
    # deeper than the recursion limit of the workers (50,000: deep but valid code is followed)
    (tmp_path / "ds_config.json").write_text('{"fp16": {"enabled": true}, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "train.py").write_text(GOOD)
    run = trainlint(".", "--format", "json", cwd=tmp_path)
    found = _json(run)
    assert found["ds_config.json"] == ["TL000: cannot read JSON config: nested too deep"]
    assert run.returncode == 1


def test_symlink_loops_are_reported_and_a_scan_with_an_exclude_goes_on(tmp_path: Path):
    (tmp_path / "loop.py").symlink_to("loop.py")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "back").symlink_to("..")  # a folder loop: not followed
    (tmp_path / "sub" / "a.py").symlink_to("b.py")
    (tmp_path / "sub" / "b.py").symlink_to("a.py")
    (tmp_path / "train.py").write_text("import torch\nx = torch.ones(2).item()\n")
    for args in ((".", "--exclude", "skipped.py"), (".",), ("loop.py",), ("sub/a.py", "--exclude", "sub")):
        run = trainlint(*args, "--format", "json", cwd=tmp_path)
        found = _json(run)
        assert run.returncode == 1
        for name in {"loop.py", "a.py", "b.py"} & set(found):
            assert found[name] == ["TL000: cannot read file: Too many levels of symbolic links"]
    assert set(_json(trainlint(".", "--exclude", "skipped.py", "--format", "json", cwd=tmp_path))) == {"loop.py", "a.py", "b.py"}
    assert "Traceback" not in trainlint("loop.py", "--format", "sarif", cwd=tmp_path).stderr


def _as_unprivileged(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run the check command in a forked child that has dropped root (root searches any folder).

    The child keeps this interpreter (already imported, so it needs no access to the Python
    installation) and reports its exit code, output and any exception through a pipe.
    """
    import json

    from click.testing import CliRunner

    import trainlint.engine.discovery, trainlint.report.json  # noqa: F401, E401
    from trainlint.cli import main
    from trainlint.config import Settings
    from trainlint.engine.lint import lint_source

    lint_source(GOOD, "warm.py", Settings(select=("ALL",)))  # loads the parser and every rule before the fork

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.chdir(cwd)
            result = CliRunner().invoke(main, args)
            exc = "" if result.exception is None or isinstance(result.exception, SystemExit) else repr(result.exception)
            os.write(write, json.dumps([result.exit_code, result.output, exc]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    code, output, exc = json.loads(data)
    return code, output, exc


def _unprivileged_python_starts(cwd: Path) -> bool:
    """Whether the unprivileged user can start this Python with trainlint, as the run's workers must:
    not when the interpreter or its virtualenv lies in a folder only root can enter (under /root,
    as in many containers)."""
    try:
        return subprocess.run([sys.executable, "-c", "import libcst, trainlint.engine.lint"], cwd=cwd, user=65534, group=65534,
                              capture_output=True, timeout=120).returncode == 0
    except OSError:  # the interpreter itself cannot be reached
        return False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and setuid")
def test_unsearchable_folder_is_reported():
    import json
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="trainlint-perm-"))  # not under pytest's private tmp folder
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir()
        (locked / "train.py").write_text(GOOD)
        (base / "ok.py").write_text(GOOD)
        locked.chmod(0)
        if os.geteuid() == 0 and not _unprivileged_python_starts(base):
            pytest.skip("the unprivileged user cannot start this Python (it lies in a folder only root can enter)")
        if os.geteuid() == 0:
            code, output, exc = _as_unprivileged([".", "--format", "json"], base)
        else:
            run = trainlint(".", "--format", "json", cwd=base)
            code, output, exc = run.returncode, run.stdout, run.stderr
        assert not exc and code == 1
        assert [(Path(d["path"]).name, d["message"]) for d in json.loads(output)] == [("locked", "cannot read folder: Permission denied")]
        if os.geteuid() == 0:
            code, output, exc = _as_unprivileged(["locked/train.py", "--format", "json"], base)
            assert not exc and code == 1 and json.loads(output)[0]["message"] == "cannot read file: Permission denied"
    finally:
        (base / "locked").chmod(0o755)
        import shutil

        shutil.rmtree(base)


# root reads any file: without these capabilities it is held to the permission bits like anyone
_WITHOUT_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


def test_an_unreadable_file_named_on_the_command_line_is_a_tl000(tmp_path: Path):
    """`chmod 000 train.py; trainlint train.py` was a usage error (exit 2, "Path 'train.py' is not
    readable"); the README promises a TL000."""
    import shutil

    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None or subprocess.run([*_WITHOUT_DAC, "true"], capture_output=True).returncode:
            pytest.skip("root, and its capabilities cannot be dropped here")
        prefix = _WITHOUT_DAC
    (tmp_path / "train.py").write_text(GOOD)
    (tmp_path / "train.py").chmod(0)
    (tmp_path / "ok.py").write_text(GOOD)
    run = subprocess.run([*prefix, sys.executable, "-m", "trainlint", "train.py", "ok.py", "--format", "json", "--no-cache"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert _json(run) == {"train.py": ["TL000: cannot read file: Permission denied"]}  # and ok.py is clean


def test_name_too_long_is_a_clear_error(tmp_path: Path):
    run = trainlint("x" * 300 + ".py", "--format", "json", cwd=tmp_path)
    assert run.returncode == 1 and list(_json(run).values())[0][0].startswith("TL000: ")


def test_a_fifo_named_train_py_does_not_block(tmp_path: Path):
    os.mkfifo(tmp_path / "train.py")
    (tmp_path / "good.py").write_text(GOOD)
    for args in (("train.py",), (".",), ("train.py", "--fix"), ("train.py", "--format", "text")):
        run = trainlint(*args, cwd=tmp_path, timeout=60)
        assert "TL000" in run.stdout and "a FIFO (named pipe), not a regular file" in run.stdout, run.stdout + run.stderr
        assert "Traceback" not in run.stderr and run.returncode == 1


def test_a_gitignore_fifo_does_not_block_the_scan(tmp_path: Path):
    os.mkfifo(tmp_path / ".gitignore")
    (tmp_path / "good.py").write_text(GOOD)
    run = trainlint(".", cwd=tmp_path, timeout=60)
    assert run.returncode == 0 and "Traceback" not in run.stderr


def test_a_py_link_to_dev_zero_is_refused_without_reading_it(tmp_path: Path):
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    run = trainlint(".", "--format", "json", cwd=tmp_path, timeout=60)
    assert _json(run)["zero.py"] == ["TL000: cannot read file: it is a character device, not a regular file"]


def test_stdin_larger_than_max_file_size_is_refused(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-file-size = 1000\n")
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 1000)
    with big.open("rb") as fh:
        run = trainlint("-", "--stdin-filename", "train.py", "--format", "json", cwd=tmp_path, stdin=fh)
    assert _json(run) == {"train.py": ["TL000: file too large to lint (more than max-file-size 1000 bytes)"]}
    # an endless stream: read no further than the limit, then stop
    with open("/dev/zero", "rb") as zero:
        run = trainlint("-", "--format", "json", cwd=tmp_path, stdin=zero, timeout=60)
    assert _json(run) == {"-": ["TL000: file too large to lint (more than max-file-size 1000 bytes)"]}
    small = trainlint("-", "--stdin-filename", "train.py", cwd=tmp_path, stdin=None)
    assert small.returncode == 0


def test_a_file_over_max_file_size_on_disk_is_refused(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-file-size = 1000\n")
    (tmp_path / "big.py").write_text("x = 1\n" * 1000)
    assert _json(trainlint("big.py", "--format", "json", cwd=tmp_path)) == {
        "big.py": ["TL000: file too large to lint (6000 bytes > max-file-size 1000)"]
    }


def test_a_nul_byte_is_a_syntax_error_not_an_internal_error(tmp_path: Path):
    # found by the fuzzing harness: a NUL inside a DeepSpeed dict's string key crashed TL204's literal reader
    (tmp_path / "train.py").write_bytes(
        b'import deepspeed\ncfg = {"fp16": {"enabled": True}, "a\x00b": 1}\ndeepspeed.initialize(model=model, config=cfg)\n'
    )
    run = trainlint("train.py", "--format", "json", cwd=tmp_path)
    assert _json(run) == {"train.py": ["TL000: syntax error: source code cannot contain null bytes"]} and run.returncode == 1
