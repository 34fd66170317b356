"""The process between `trainlint verify run` and the instrumented run, which ends the run's whole
process tree however `verify run` itself ends.

`verify run` starts this process (`main([CONTROL_FD, STATUS_PATH, PARENT_PID, COMMAND...])`), which
starts COMMAND (the instruments, which run the script) and waits. The tree is ended, every process
in it with SIGKILL, when COMMAND exits (the script's workers and the children it forgot go with
it), when `verify run` closes its end of the control pipe (its timeout; its SIGTERM, SIGHUP or
SIGINT) and when `verify run` dies: SIGKILL closes the pipe too, and PR_SET_PDEATHSIG sends us
SIGTERM. What finds the tree:
- on Linux this process is a child subreaper (PR_SET_CHILD_SUBREAPER): a process of the run whose
  parent exits, one that left the run's session with `setsid()` (a TensorBoard launcher) included,
  is re-parented to us rather than to init, so every live process of the run descends from us;
- where a cgroup v2 of our own can be made (as root, or in a delegated subtree) the run lives in
  it, and `cgroup.kill` ends it at once, a child forked during the kill included;
- COMMAND has PR_SET_PDEATHSIG=SIGKILL: it dies with us even if we are killed ourselves;
- elsewhere (no /proc) the run's process group is ended: COMMAND starts a session of its own.
COMMAND's exit status is written to STATUS_PATH as JSON (`{"code": N}`, -N for a signal), since our
own exit status cannot carry a signal. Standard library only: no torch, it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
END_WITHIN_S = 20.0  # how long the killed processes get to disappear (one in uninterruptible I/O takes a while)
POLL_S = 0.1
CGROUP_PREFIX = "trainlint-verify-"
RUN_FOLDER_PREFIX = "trainlint-run-"  # the temporary folder of `verify run` (script_run.py)


def main(argv: Sequence[str]) -> None:
    """`CONTROL_FD STATUS_PATH PARENT_PID COMMAND...`: run COMMAND, end its tree, write its status."""
    control, status_path, parent = int(argv[0]), Path(argv[1]), int(argv[2])
    code = supervise(list(argv[3:]), control, parent)
    if os.getppid() != parent and status_path.parent.name.startswith(RUN_FOLDER_PREFIX):
        # `verify run` was killed: nobody reads the status, and its temporary folder is left to us
        shutil.rmtree(status_path.parent, ignore_errors=True)
        sys.exit(0)
    partial = status_path.with_name(status_path.name + ".partial")
    partial.write_text(json.dumps({"code": code}), encoding="utf-8")
    os.replace(partial, status_path)
    sys.exit(0)


def supervise(command: list[str], control: int, parent: int) -> int | None:
    """Run `command` until it exits or we are told to stop (EOF on `control`, SIGTERM, SIGHUP,
    SIGINT, or `parent` gone), then end every process it started; its exit status (-9 when it was
    ended here, None when it could not be reaped)."""
    stop = _Stop()
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # our parent's death is a SIGTERM to us
    if os.getppid() != parent:  # it died before we could ask
        stop.set()
    cgroup = _new_cgroup() if subreaper else None
    child: subprocess.Popen[bytes] | None = None
    code: int | None = None
    try:
        if not stop.requested:
            # a session of its own: what ends a process group (ours, a terminal's) does not reach the run
            child = subprocess.Popen(command, start_new_session=True, preexec_fn=_ChildSetup(cgroup, os.getpid()))
        while child is not None and not stop.requested:
            code = _reap(child.pid, code)
            if code is not None:
                break
            stop.wait(control, POLL_S)
    finally:
        if child is not None:
            code = _end_tree(child.pid, cgroup, subreaper, code)
            child.returncode = code if code is not None else -signal.SIGKILL  # reaped here, not by Popen
        if cgroup is not None:
            _remove_cgroup(cgroup)
    return code


class _Stop:
    """Whether to end the run now: `verify run` closed the control pipe, or a signal came."""

    def __init__(self) -> None:
        self.requested = False
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)  # a signal wakes the select below at once
        for name in ("SIGTERM", "SIGHUP", "SIGINT"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), lambda *_: self.set())

    def set(self) -> None:
        self.requested = True

    def wait(self, control: int, timeout: float) -> None:
        """Until `control` reaches EOF, a signal comes or `timeout` passes."""
        try:
            ready, _, _ = select.select([control, self.wake_read], [], [], timeout)
        except InterruptedError:
            return
        if self.wake_read in ready:
            os.read(self.wake_read, 512)
        if control in ready:
            try:
                if not os.read(control, 512):  # the writer (`verify run`) closed it, or died
                    self.set()
            except OSError:
                self.set()


class _ChildSetup:
    """Runs in the run's first process between fork and exec: into the run's cgroup, and dying with
    the supervisor (which is single-threaded, so code here is safe)."""

    def __init__(self, cgroup: Path | None, supervisor: int) -> None:
        self.cgroup, self.supervisor = cgroup, supervisor

    def __call__(self) -> None:
        if self.cgroup is not None:
            try:
                with open(self.cgroup / "cgroup.procs", "w", encoding="ascii") as procs:
                    procs.write("0")  # this process, and everything it starts
            except OSError:
                pass  # the subreaper still finds the whole tree
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != self.supervisor:  # the supervisor died before the line above
            os._exit(1)


def _reap(child: int, code: int | None) -> int | None:
    """Reap every exited child (the run's first process, and orphans re-parented to us); the first
    process's exit status once it has exited (`code`, what was known before, otherwise)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == child:
            code = os.waitstatus_to_exitcode(status)


def _end_tree(child: int, cgroup: Path | None, subreaper: bool, code: int | None) -> int | None:
    """SIGKILL every process of the run, and wait until none is left (or END_WITHIN_S passed); the
    first process's exit status, when it exited (or was killed here)."""
    deadline = time.monotonic() + END_WITHIN_S
    if cgroup is not None:
        _kill_cgroup(cgroup)
    if subreaper:
        # descendants re-parent to us when their parents die: kill what is left until nothing is
        not_ours: set[int] = set()  # a setuid program's process: no waiting for what we may not end
        while True:
            code = _reap(child, code)
            left = [pid for pid in _descendants(os.getpid()) if pid not in not_ours]
            if not left or time.monotonic() >= deadline:
                return code
            for pid in left:
                if not _kill(pid):
                    not_ours.add(pid)
            time.sleep(0.02)
    # no subreaper (not Linux): the run's process group; its orphans left the tree out of our sight
    try:
        os.killpg(child, signal.SIGKILL)
    except OSError:
        pass
    while code is None and time.monotonic() < deadline:
        code = _reap(child, code)
        time.sleep(0.02)
    return code


def _kill(pid: int) -> bool:
    """SIGKILL `pid`; False when it is not ours to end (gone already counts as ended)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except PermissionError:
        return False
    except OSError:
        pass
    return True


def _descendants(root: int) -> list[int]:
    """Every process below `root`, from /proc (zombies included: they are gone once reaped)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                # the name in parentheses may hold spaces and parentheses: the fields follow the last ")"
                ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, queue = [], [root]
    while queue:
        for pid in children.get(queue.pop(), []):
            found.append(pid)
            queue.append(pid)
    return found


def _prctl(option: int, value: int) -> bool:
    """prctl(2) on Linux; False elsewhere, or where it fails."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _new_cgroup() -> Path | None:
    """A cgroup v2 for the run beside nothing else, below our own; None where none can be made: no
    cgroup v2, no permission, or a systemd that did not delegate our cgroup (systemd owns the cgroups
    of the units it did not delegate, and a child of another's making would break its rules)."""
    try:
        own = next(line[3:] for line in Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines() if line.startswith("0::"))
        base = _cgroup2_path(own)
        if base is None or (Path("/run/systemd/system").is_dir() and not _delegated(base)):
            return None
        path = base / f"{CGROUP_PREFIX}{os.getpid()}"
        path.mkdir()
    except (OSError, StopIteration):
        return None
    if not os.access(path / "cgroup.procs", os.W_OK):
        _remove_cgroup(path)
        return None
    return path


def _cgroup2_path(own: str) -> Path | None:
    """Where the cgroup `own` (as /proc/self/cgroup names it) is in the mounted cgroup v2 hierarchy."""
    for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if rest.split()[:1] != ["cgroup2"] or len(parts) < 5:
            continue
        root, mount = parts[3], parts[4]
        if own == root or own.startswith(root.rstrip("/") + "/"):
            path = Path(mount) / own[len(root.rstrip("/")):].lstrip("/")
            return path if path.is_dir() else None
    return None


def _delegated(path: Path) -> bool:
    """Whether systemd delegated this cgroup (Delegate=yes marks it with an extended attribute)."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(path, name) == b"1":
                return True
        except (OSError, AttributeError):
            continue
    return False


def _kill_cgroup(path: Path) -> None:
    """SIGKILL every process in the cgroup: `cgroup.kill` (Linux 5.14) at once; before it, frozen
    first so that none forks while the others are killed."""
    try:
        (path / "cgroup.kill").write_text("1", encoding="ascii")
        return
    except OSError:
        pass
    frozen = _write(path / "cgroup.freeze", "1")
    try:
        for line in (path / "cgroup.procs").read_text(encoding="ascii").split():
            _kill(int(line))
    except (OSError, ValueError):
        pass
    if frozen:
        _write(path / "cgroup.freeze", "0")  # a frozen process dies of SIGKILL, but thawed it surely does


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text, encoding="ascii")
        return True
    except OSError:
        return False


def _remove_cgroup(path: Path) -> None:
    """Remove the run's cgroup once its processes are gone (it is busy until then)."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


if __name__ == "__main__":  # pragma: no cover - started as `python -c` by script_run
    main(sys.argv[1:])

