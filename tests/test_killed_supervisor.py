"""Workers die with the process they work for, whatever kills it.

`timeout`, a cancelled CI job and editors end `trainlint check` and `trainlint lsp` with SIGTERM,
SIGHUP or SIGKILL, none of which the process can clean up after (SIGKILL) or did (the others). The
first tests start the real command, wait until its workers are busy on a slow input (seconds of CPU
time left), send the real signal, and then check by process id (and start time, so that a reused id
is not mistaken for a survivor) that every process that was under it has ended within seconds. The
others check each safeguard on its own: the ends a worker must not hold, the kernel's parent-death
signal, the pool's handlers of SIGTERM and SIGHUP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.test_lsp_robustness import TIMEOUT, RawClient
from trainlint.config import Settings
from trainlint.engine import workers
from trainlint.engine.results import FileResult

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

SIGNALS = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGKILL") if hasattr(signal, name)]
GONE_WITHIN = 5.0  # seconds after the killed process has ended
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

Process = tuple[int, int]  # pid, start time (clock ticks after boot)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children() -> dict[int, list[Process]]:
    """The live processes by parent id, from each /proc/*/stat."""
    children: dict[int, list[Process]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[0] not in ("Z", "X"):
                children.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    return children


def children(pid: int) -> set[Process]:
    return set(_children().get(pid, []))


def descendants(pid: int) -> set[Process]:
    """Every live process under `pid` (children, theirs, ...)."""
    by_parent = _children()
    found: set[Process] = set()
    todo = [pid]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            found.add(child)
            todo.append(child[0])
    return found


def alive(process: Process) -> bool:
    """Whether that process (not another that reuses its id) still runs; a zombie has ended."""
    fields = _stat(process[0])
    return fields is not None and int(fields[19]) == process[1] and fields[0] not in ("Z", "X")


def cpu_seconds(process: Process) -> float:
    fields = _stat(process[0])
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / TICKS


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def kill_and_check(process: subprocess.Popen[bytes], signum: int, under: set[Process]) -> None:
    """Send `signum` to `process`, wait for it to end, then for everything that was `under` it to end."""
    assert under, "nothing was started under the process"
    process.send_signal(signum)
    assert process.wait(timeout=TIMEOUT) == -signum
    deadline = time.monotonic() + GONE_WITHIN
    while any(alive(p) for p in under) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sorted(p[0] for p in under if alive(p))
    for pid in left:  # do not leave them to the next test
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"still running {GONE_WITHIN:g} s after the {signal.Signals(signum).name}: {left}"


def slow_script(statements: int = 30_000) -> str:
    """A training loop whose analysis takes seconds (a finding and a fix for every statement)."""
    return "import torch\nfor x in data:\n    loss = model(x)\n" + "    total += loss\n" * statements + "    loss.backward()\n"


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_the_workers_of_a_killed_check_end_with_it(tmp_path: Path, signum: int):
    """Both workers of `check -j 2` are mid-file (seconds of CPU time left each) when the command is
    killed: neither finishes its file, nor waits for the next one."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("a.py", "b.py", "c.py"):
        (project / name).write_text(slow_script())
    process = subprocess.Popen(
        [sys.executable, "-m", "trainlint", "check", "-j", "2", "--no-cache", "--file-timeout", "600", str(project)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
    )
    try:
        def both_busy() -> bool:  # (the analysis is imported before the workers are forked)
            return sum(cpu_seconds(p) >= 0.3 for p in descendants(process.pid)) >= 2

        wait_until(both_busy, TIMEOUT, "two workers analysing")
        kill_and_check(process, signum, descendants(process.pid))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _started_server(tmp_path: Path) -> tuple[RawClient, set[Process]]:
    """A `trainlint lsp` whose resident worker is up with the parser loaded; what runs under it."""
    client = RawClient(tmp_path)
    client.call("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
    client.notify("initialized", {})

    def warm() -> bool:  # (the fork server, the server's child, has the parser loaded too)
        return any("libcst" in _maps(p) for p in descendants(client.process.pid) - children(client.process.pid))

    wait_until(warm, TIMEOUT, "the resident worker with the parser loaded")
    return client, descendants(client.process.pid)


def _maps(process: Process) -> str:
    try:
        return Path(f"/proc/{process[0]}/maps").read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_the_busy_worker_of_a_killed_language_server_ends_with_it(tmp_path: Path, signum: int):
    """An editor ends a server that stopped answering: here its worker is mid-analysis of a slow
    buffer, with seconds of CPU time left. The worker, the fork server it came from and the
    resource tracker end with the server."""
    client, under = _started_server(tmp_path)
    try:
        client.open(tmp_path / "slow.py", slow_script())
        start = {p: cpu_seconds(p) for p in under}
        wait_until(lambda: any(cpu_seconds(p) - start[p] >= 0.5 for p in under), TIMEOUT, "the worker analysing the buffer")
        kill_and_check(client.process, signum, under)
    finally:
        client.close()


def _open_files(pid: int) -> set[str]:
    """What the descriptors of process `pid` refer to ("socket:[N]", "pipe:[N]", paths)."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return found


def test_a_forked_worker_holds_none_of_the_supervisors_ends_of_the_connections():
    """Else a worker never reads EOF while another (or itself) holds a copy of its supervisor's end."""
    context = workers._fork_context()
    started = [workers.Worker(context, 1024), workers.Worker(context, 1024)]
    try:
        for worker in started:  # a round trip: the worker is past its start
            worker.send(1, os.getpid, (), 10.0)
            assert worker.receive() == worker.process.pid
        ends = {os.readlink(f"/proc/self/fd/{w.conn.fileno()}") for w in started}
        for worker in started:
            assert not ends & _open_files(worker.process.pid)
    finally:
        for worker in started:
            worker.stop()


def test_the_language_servers_worker_does_not_hold_the_fork_servers_alive_pipe():
    """The fork server ends when every holder of that pipe's write end has: the server, and not its worker."""
    from multiprocessing import forkserver

    resident = workers.ResidentWorker()
    try:
        pid = resident.call(os.getpid)
        alive = os.readlink(f"/proc/self/fd/{forkserver._forkserver._forkserver_alive_fd}")
        assert alive not in _open_files(pid)
    finally:
        resident.close()


def _death_signal() -> int:
    """The signal this process gets when its parent ends (PR_GET_PDEATHSIG; 0 for none)."""
    import ctypes

    value = ctypes.c_int()
    ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(value), 0, 0, 0)
    return value.value


def test_the_kernel_kills_a_worker_when_the_process_that_forked_it_ends():
    """The command line's workers (forked from its main thread) and the language server's (from its
    fork server) ask for SIGKILL when their parent ends."""
    forked = workers.Worker(workers._fork_context(), 1024)
    resident = workers.ResidentWorker()
    try:
        forked.send(1, _death_signal, (), 10.0)
        assert forked.receive() == signal.SIGKILL
        assert resident.call(_death_signal) == signal.SIGKILL
    finally:
        forked.stop()
        resident.close()


def _handlers(path: str, settings: Settings, data: bytes | None) -> FileResult:
    """A pool task that reports the worker's handlers of SIGTERM and SIGHUP, by name, as its path."""
    return FileResult(" ".join(str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGHUP)))


def test_the_pool_kills_its_workers_on_sigterm_and_leaves_an_ignored_sighup_alone():
    """While the pool runs, SIGTERM (left at its default) kills the workers before the process; SIGHUP
    ignored (`nohup`) stays ignored; both are as they were afterwards. The workers end on them as before."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        tasks = [(f"{n}.py", Settings(), None) for n in range(2)]
        during = []
        for _, result in workers.run(tasks, 1, _handlers, lambda s: 10.0, lambda s: 1024):
            during.append((signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP), result.path))
        assert during and all(callable(term) and hup == signal.SIG_IGN for term, hup, _ in during)
        assert {path for _, _, path in during} == {f"{signal.SIG_DFL} {signal.SIG_IGN}"}
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
