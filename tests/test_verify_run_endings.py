"""How `trainlint verify run` ends, and how the script's end is reported: a `verify run` killed by
SIGTERM, SIGHUP, SIGINT or SIGKILL leaves no process of the script behind (a child the script started
in a session of its own included); a script that ends with `os._exit()` or is killed keeps the steps
it ran and its real exit status; a DataLoader worker's traceback keeps its lines."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.helpers import process_alive

pytest.importorskip("torch")

from trainlint.verify.health import script_failed  # noqa: E402

PROC = Path("/proc")
ROOT = Path(__file__).resolve().parent.parent
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOBODY = 65534

# The script trains one step, starts a child in a session of its own (as a TensorBoard launcher
# does) that ignores SIGTERM and SIGHUP, and a plain child that sleeps, names them all, then hangs.
HANGS = """\
    import os, signal, subprocess, sys, time
    import torch
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGHUP, signal.SIG_IGN); time.sleep(600)"
    detached = subprocess.Popen([sys.executable, "-c", stubborn], start_new_session=True)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    p.sum().backward()
    opt.step()
    with open(PIDS + ".partial", "w") as out:
        out.write(f"{os.getpid()} {detached.pid} {plain.pid}")
    os.replace(PIDS + ".partial", PIDS)
    while True:
        time.sleep(1)
"""


def _children() -> dict[int, list[int]]:
    """Each process's children, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(b")", 1)[1].split()[1]), []).append(int(entry.name))
    return children


def _descendants(pid: int) -> set[int]:
    children, found, queue = _children(), set(), [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if process_alive(pid)}


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder any user can write (the run as `nobody` reads its script and writes its pids there)."""
    path = Path(tempfile.mkdtemp(prefix="trainlint-ends-"))
    path.chmod(0o777)
    yield path
    for item in path.iterdir():
        item.unlink()
    path.rmdir()


def _as_nobody(env: dict[str, str]) -> list[str]:
    """A command prefix that runs what follows as nobody (skips the test where none can run this
    interpreter, torch and trainlint so)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv to run as nobody")
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    # the run starts this interpreter again: nobody must be able to (a venv's link into /root cannot)
    starts = "import subprocess, sys, torch, trainlint.verify; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    probe = subprocess.run([*prefix, sys.executable, "-c", starts], env=env, capture_output=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run {sys.executable} with torch here")
    return prefix


CASES = [
    pytest.param(signal.SIGTERM, None, id="SIGTERM"),
    pytest.param(signal.SIGHUP, None, id="SIGHUP"),
    pytest.param(signal.SIGINT, None, id="SIGINT"),
    pytest.param(signal.SIGKILL, None, id="SIGKILL"),
    pytest.param(signal.SIGTERM, NOBODY, id="SIGTERM-not-root", marks=pytest.mark.skipif(not IS_ROOT, reason="runs as nobody from root")),
    pytest.param(signal.SIGKILL, NOBODY, id="SIGKILL-not-root", marks=pytest.mark.skipif(not IS_ROOT, reason="runs as nobody from root")),
]


@pytest.mark.skipif(not sys.platform.startswith("linux") or not PROC.is_dir(), reason="follows processes in /proc")
@pytest.mark.parametrize(("sent", "user"), CASES)
def test_ending_verify_run_ends_every_process_of_the_script(shared_dir: Path, sent: signal.Signals, user: int | None):
    pids_file = shared_dir / "pids"
    script = shared_dir / "hangs.py"
    script.write_text(f"PIDS = {str(pids_file)!r}\n" + textwrap.dedent(HANGS), encoding="utf-8")
    script.chmod(0o644)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), "HOME": str(shared_dir)}
    prefix = _as_nobody(env) if user is not None else []  # it execs the command: the same process
    with open(shared_dir / "out", "wb") as out:
        command = [*prefix, sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--timeout", "600"]
        run = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=shared_dir)
    tree: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while not pids_file.exists():
            assert run.poll() is None, (shared_dir / "out").read_text(errors="replace")
            assert time.monotonic() < deadline, "the script did not start"
            time.sleep(0.2)
        script_pid, detached, plain = map(int, pids_file.read_text().split())
        tree = _descendants(run.pid)
        if user is not None:
            assert os.stat(PROC / str(script_pid)).st_uid == user
        assert {script_pid, detached, plain} <= tree
        assert os.getsid(detached) != os.getsid(run.pid) and os.getsid(detached) == detached  # a session of its own
        cgroup = next((line[3:] for line in (PROC / str(script_pid) / "cgroup").read_text().splitlines() if line.startswith("0::")), "")

        os.kill(run.pid, sent)
        run.wait(timeout=60)
        if sent != signal.SIGKILL:  # it cleans up, then ends as the signal would have ended it
            assert run.returncode == -sent, (shared_dir / "out").read_text(errors="replace")
        deadline = time.monotonic() + 10
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(tree), f"left running: {sorted(_alive(tree))}"
        if "trainlint-verify-" in cgroup:  # the run's cgroup is removed with it
            deadline = time.monotonic() + 10
            while Path(f"/sys/fs/cgroup/unified{cgroup}").exists() or Path(f"/sys/fs/cgroup{cgroup}").exists():
                assert time.monotonic() < deadline, f"cgroup {cgroup} left"
                time.sleep(0.1)
    finally:
        for pid in _alive(tree | {run.pid}):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        run.wait()


def _steps_then(tmp_path: Path, name: str, ending: str) -> Path:
    script = tmp_path / name
    script.write_text(textwrap.dedent("""\
        import os, posix, signal
        import torch
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([p], lr=0.1)
        for step in range(4):
            (p * p).sum().backward()
            opt.step()
            opt.zero_grad()
        print("trained", flush=True)
        """) + ending + "\n", encoding="utf-8")
    return script


def verify_run(script: Path, *options: str, output: str = "json") -> tuple[int, Any, str]:
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--format", output, "--steps", "50", *options],
        capture_output=True, text=True, timeout=300,
    )
    return done.returncode, json.loads(done.stdout) if output == "json" else done.stdout, done.stderr


@pytest.mark.parametrize("status", [0, 3])
def test_a_script_that_ends_with_os_exit_keeps_its_steps_and_status(tmp_path: Path, status: int):
    script = _steps_then(tmp_path, "fast_exit.py", f"os._exit({status})")
    code, report, stderr = verify_run(script)
    assert report["steps"] == 4 and report["stopped"] == "exit" and report["exit_code"] == status, stderr
    assert report["message"] == f"the script ended the process with os._exit({status}) after 4 optimizer steps"
    assert len(report["loss"]["values"]) == 4 and report["loss"]["last"] is not None  # the evidence, not a count
    assert "raised" not in stderr
    if status == 0:
        assert code == 0
    else:
        assert code == 2 and stderr.splitlines()[-1] == "trainlint: the script exited with status 3"


@pytest.mark.parametrize(("ending", "how"), [
    ("os.kill(os.getpid(), signal.SIGKILL)", "was killed by SIGKILL"),
    ("posix._exit(5)", "exited with status 5"),  # around os._exit: no report but the steps journal
])
def test_a_script_that_dies_without_a_report_keeps_the_steps_that_ran(tmp_path: Path, ending: str, how: str):
    script = _steps_then(tmp_path, "dies.py", ending)
    code, report, stderr = verify_run(script)
    assert code == 2 and report["steps"] == 4 and report["stopped"] == "no-report" and report["partial"]
    assert report["exit_code"] == (5 if "5" in how else None)
    assert len(report["step_time"]["values"]) == 4
    assert report["message"] == f"the script {how} after 4 optimizer steps, before trainlint's report: only the steps' count and times were kept"
    assert stderr.splitlines()[-1] == f"trainlint: the script {how} after 4 optimizer steps"
    assert all((f["verification"] or {}).get("status") in (None, "cannot check here") for f in report["findings"])
    code, text, _ = verify_run(script, output="text")
    assert code == 2 and text.splitlines()[0].endswith(f": 4 optimizer steps on cpu: {report['message']}")
    assert "No training-health problem" not in text


def test_the_exit_status_is_the_script_s_not_a_constant():
    assert script_failed({"stopped": "error", "exit_code": 1, "error": "ValueError: x"}) == "the script raised an error (exit status 1): ValueError: x"
    assert script_failed({"stopped": "exit", "exit_code": 0}) is None
    assert script_failed({"stopped": "exit", "exit_code": 3}) == "the script exited with status 3"
    # the run did not start the script: nothing was raised
    failed = script_failed({"stopped": "error", "exit_code": None, "message": "no CUDA device is available", "error": "--device cuda needs a CUDA device"})
    assert failed == "the run failed: no CUDA device is available: --device cuda needs a CUDA device"


def test_a_data_loader_worker_s_traceback_keeps_its_lines(tmp_path: Path):
    script = tmp_path / "worker_error.py"
    script.write_text(textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Samples(Dataset):
            def __len__(self):
                return 16

            def __getitem__(self, i):
                if i == 9:
                    raise ValueError(f"bad sample {i}\\x1b[2J")
                return torch.ones(2)

        p = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([p], lr=0.1)
        for batch in DataLoader(Samples(), batch_size=4, num_workers=1):
            (p * batch).sum().backward()
            opt.step()
            opt.zero_grad()
        """), encoding="utf-8")
    code, text, stderr = verify_run(script, output="text")
    assert code == 2 and "\\x0a" not in text and "\\x0a" not in stderr and "\x1b" not in text + stderr.split("trainlint:")[-1]
    lines = text.splitlines()
    first = lines.index(f"  ValueError: Caught ValueError in DataLoader worker process 0. at {script}:15")
    assert lines[first + 1] == "    Original Traceback (most recent call last):"
    tail = lines[first + 1:lines.index("", first)]
    assert all(line.startswith("    ") for line in tail)  # indented under the error: no line of its own
    assert f'      File "{script}", line 10, in __getitem__' in tail  # the traceback's own indentation kept
    assert tail[-1] == "    ValueError: bad sample 9\\x1b[2J"  # control characters still escaped
    warning = stderr[stderr.rindex("trainlint: the script raised an error"):].splitlines()
    assert warning[0] == f"trainlint: the script raised an error (exit status 1): ValueError: Caught ValueError in DataLoader worker process 0. at {script}:15"
    assert warning[1] == "  Original Traceback (most recent call last):" and warning[-1] == "  ValueError: bad sample 9\\x1b[2J"
    assert f'    File "{script}", line 10, in __getitem__' in warning
    _, report, _ = verify_run(script)
    assert report["error"].splitlines()[-1] == "ValueError: bad sample 9\x1b[2J"


def test_the_html_report_keeps_a_worker_s_traceback_as_lines():
    from trainlint.verify.report_html import render_html

    error = 'ValueError: Caught ValueError in DataLoader worker process 0. at train.py:15\nOriginal Traceback (most recent call last):\n  File "train.py", line 10, in __getitem__\nValueError: bad <sample>\x1b[2J'
    page = render_html({"script": "train.py", "steps": 2, "stopped": "error", "exit_code": 1, "error": error, "message": "m"}, [], [])
    assert "\\x0a" not in page and "\x1b" not in page
    assert '<p class="bad">the script raised an error (exit status 1): ValueError: Caught ValueError in DataLoader worker process 0. at train.py:15</p>' in page
    assert '<pre class="bad">Original Traceback (most recent call last):\n  File &quot;train.py&quot;, line 10, in __getitem__\nValueError: bad &lt;sample&gt;\\x1b[2J</pre>' in page
