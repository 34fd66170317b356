"""What a worker process sets up for itself: a cap on its memory, room for deep but valid code, and
dying with the process that forked it, its CPU-time limit (see `workers.py`)."""

from __future__ import annotations

import os
import signal
import sys
import weakref
from multiprocessing.connection import Connection
from typing import Any, Callable


_LIBC: list[Any] = []


def release_freed_memory() -> None:
    """Give the memory the C allocator holds free back to the system (glibc's `malloc_trim`; nothing
    elsewhere): what a file's trees and the parser's buffers used would otherwise stay resident."""
    if not _LIBC:
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            _LIBC.append(libc.malloc_trim if hasattr(libc, "malloc_trim") else None)
        except (OSError, AttributeError):
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0](0)


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def limit_memory(cap_mb: int) -> None:
    """Cap this process's address space at its current size plus `cap_mb`."""
    try:
        import resource

        with open("/proc/self/statm") as fh:
            size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = size + cap_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError, AttributeError):
        pass  # no /proc or no rlimit (macOS, Windows): the time limit still bounds the worker


STACK_BYTES = 256 << 20  # the main thread's stack may grow this far (only what is used is memory)
MAX_RECURSION = 50_000


def allow_deep_recursion() -> None:
    """Let the analysis follow deep but valid code (a chain of 1,500 methods calling the next one, a
    long run of assignments to one name) as deep as the main thread's stack allows: its soft limit
    raised towards `STACK_BYTES` (Linux grows the main stack on demand up to it; only the pages
    touched count), and Python's recursion limit set from it. About 1 kB of stack a level is ample:
    a level that goes through C (`any(...)` of a generator) takes a few hundred bytes."""
    stack = 8 << 20
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        stack = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
        if soft != resource.RLIM_INFINITY and soft < stack:
            resource.setrlimit(resource.RLIMIT_STACK, (stack, hard))
        elif soft == resource.RLIM_INFINITY:
            stack = STACK_BYTES
        else:
            stack = soft
    except (ImportError, OSError, ValueError):
        pass  # (no rlimits: Windows) the default stack, a limit it holds
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4000, min(MAX_RECURSION, stack // 4096)))


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_prctl: Callable[..., int] | None = None  # loaded by `load_prctl`


def load_prctl() -> Callable[..., int] | None:
    """Linux's prctl(2), loaded once (a process that forks workers loads it first, so that they find
    it loaded); None elsewhere, or where it cannot be loaded."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        try:
            # ctypes's C core is enough for one function: `import ctypes` costs a few ms more
            import _ctypes

            class _Libc:
                _handle = _ctypes.dlopen(None)

            class _Function(_ctypes.CFuncPtr):
                _flags_ = _ctypes.FUNCFLAG_CDECL  # (returns a C int)

            _prctl = _Function(("prctl", _Libc()))
        except (ImportError, AttributeError, OSError, TypeError):
            pass  # the other safeguards still hold: the closed ends, the time limit
    return _prctl


def end_with_parent(parent: int | None) -> None:
    """Have the kernel SIGKILL this process when the process that forked it ends, however it ends
    (Linux's PR_SET_PDEATHSIG; elsewhere nothing). `parent`, when known, is the process expected to
    have forked this one: if it is no longer the parent, it ended before the request, and so does this.

    The signal comes when the *thread* that forked this process ends: the caller asks for it only when
    that is the process's main thread (or a fork server's only one)."""
    prctl = load_prctl()
    if prctl is None or prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return
    if parent is not None and os.getppid() != parent:
        os._exit(0)


# where the kernel cannot count a task's CPU time (no `setitimer`: Windows), wall-clock time is the limit
CPU_TIMER = hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
# the wall-clock backstop: limit x factor + slack seconds
WALL_CLOCK_FACTOR = 10.0
WALL_CLOCK_SLACK = 60.0


def wall_clock_limit(cpu_limit: float) -> float:
    """The wall-clock time a worker may take for a task whose CPU-time limit is `cpu_limit`."""
    return cpu_limit * WALL_CLOCK_FACTOR + WALL_CLOCK_SLACK if CPU_TIMER else cpu_limit


def arm_cpu_limit(seconds: float) -> None:
    """End this process (SIGPROF) once it has used `seconds` more CPU time; 0 disarms."""
    if CPU_TIMER:
        signal.setitimer(signal.ITIMER_PROF, seconds)


# the supervisor's ends of the live workers' connections: a worker forked from this process has copies
# of them all, which it closes (`close_inherited`)
SUPERVISOR_ENDS: weakref.WeakSet[Connection] = weakref.WeakSet()
def close_inherited() -> None:
    """Close the descriptors this worker inherited that would keep another process waiting on it."""
    # the supervisor's ends, its own and the other workers': while any worker holds one, the
    # worker at its other end never reads EOF
    for end in list(SUPERVISOR_ENDS):
        end.close()
    SUPERVISOR_ENDS.clear()
    # the write end of the fork server's "alive" pipe (every child of a fork server gets one): the fork
    # server ends when its read end sees EOF, and with it, through PR_SET_PDEATHSIG, this worker
    server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(alive, int):
        try:
            os.close(alive)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def signal_name(code: int | None) -> str:
    """How a worker process ended, from its exit code: the signal that ended it, or its status."""
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
