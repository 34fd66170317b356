"""Worker processes that analyse files where a crash, a hang or a memory blow-up stays contained.

Each worker takes one file at a time from the supervisor (this process). When a worker dies (libcst's
native parser segfaults on some inputs), runs past the time limit, or runs out of its memory cap,
only the file it was working on is lost: that file gets a TL000 that says which, a fresh worker
takes its place, and every other file is analysed as usual. No `BrokenProcessPool`, ever.

Memory is bounded per worker with an address-space limit (`RLIMIT_AS`, its size at start plus the
cap), so the whole run stays under roughly jobs x (cap + start-up size); a worker that grows past
half its cap is replaced between files, so fragmentation cannot accumulate.

The time limit counts the CPU time a worker spends on a file (`ITIMER_PROF`: the kernel ends the
worker with SIGPROF, even inside the native parser), so a busy machine does not cost a valid file
its findings; a wall-clock backstop of many times the limit ends a worker that does not run at all.

A worker's standard error goes to a file of its own, not the terminal: libcst's native parser
prints "memory allocation of N bytes failed" and a backtrace before it aborts at the cap, and that
text tells the supervisor the file ran out of memory rather than crashed.
"""

from __future__ import annotations

import faulthandler
import gc
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator

from trainlint.config import Settings
from trainlint.engine.results import FileResult, could_not_analyse

Task = tuple[int, str, Settings, bytes | None]  # index, name, settings, the bytes when already read


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def _limit_memory(cap_mb: int) -> None:
    """Cap this process's address space at its current size plus `cap_mb`."""
    try:
        import resource

        with open("/proc/self/statm") as fh:
            size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = size + cap_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError, AttributeError):
        pass  # no /proc or no rlimit (macOS, Windows): the time limit still bounds the worker


# where the kernel cannot count a file's CPU time (no `setitimer`: Windows), wall-clock time is the limit
_CPU_TIMER = hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
# the wall-clock backstop: limit x factor + slack seconds
WALL_CLOCK_FACTOR = 10.0
WALL_CLOCK_SLACK = 60.0


def wall_clock_limit(cpu_limit: float) -> float:
    """The wall-clock time a worker may take for a file whose CPU-time limit is `cpu_limit`."""
    return cpu_limit * WALL_CLOCK_FACTOR + WALL_CLOCK_SLACK if _CPU_TIMER else cpu_limit


def _cpu_limit(seconds: float) -> None:
    """End this process (SIGPROF) once it has used `seconds` more CPU time; 0 disarms."""
    if _CPU_TIMER:
        signal.setitimer(signal.ITIMER_PROF, seconds)


def _serve(
    conn: Connection,
    cap_mb: int,
    lint: Callable[[str, Settings, bytes | None], FileResult],
    keep_source: bool,
    errors: int | None = None,
    timeout: Callable[[Settings], float] | None = None,
) -> None:
    """A worker's loop: analyse the files it is sent until told to stop; standard error goes to the
    file `errors` (a descriptor) when given, emptied before each file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    if _CPU_TIMER:
        signal.signal(signal.SIGPROF, signal.SIG_DFL)  # the default action ends the process
    if errors is not None:
        os.dup2(errors, 2)
        if faulthandler.is_enabled():  # it may write to a copy of the old descriptor (pytest does)
            faulthandler.enable(file=2)
    _limit_memory(cap_mb)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4000))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        index, path, settings, data = task
        if errors is not None:
            try:
                os.ftruncate(2, 0)
                os.lseek(2, 0, os.SEEK_SET)
            except OSError:
                pass
        if timeout is not None:
            _cpu_limit(timeout(settings))
        try:
            result = lint(path, settings, data)
        except MemoryError:
            result = FileResult(path, [could_not_analyse(path, f"needed more than {cap_mb} MB (--file-memory)")], cacheable=False)
        finally:
            _cpu_limit(0)
        if not keep_source:
            result.source = None  # keep the traffic small; --fix re-reads the file
        recycle = _rss_mb() > cap_mb / 2
        # the file's garbage is all young (collection is paused while a file is analysed): a
        # young collection frees it; a full one per file would cost more than half the analysis
        gc.collect(0)
        conn.send((index, result, recycle))
        if recycle:
            return


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    task: Task | None = None
    started: float = 0.0
    folder: str | None = None  # of the last file it was given
    errors: Any = None  # the file its standard error goes to (a fork's only)

    def error_text(self) -> str:
        """The start of what the worker wrote to standard error for its current file."""
        if self.errors is None:
            return ""
        try:
            return os.pread(self.errors.fileno(), 65536, 0).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""


class _Queue:
    """The files still to analyse, grouped by folder in order. A worker keeps to one folder while it
    has files, so the local modules they import are summarised by one worker rather than by all;
    a worker whose folder is done starts a folder nobody has, else helps with the largest left."""

    def __init__(self, tasks: list[Task]) -> None:
        self.groups: dict[str, deque[Task]] = {}
        for task in tasks:
            self.groups.setdefault(os.path.dirname(task[1]), deque()).append(task)
        self.unclaimed: deque[str] = deque(self.groups)
        self.size = len(tasks)

    def __len__(self) -> int:
        return self.size

    def take(self, folder: str | None) -> Task:
        if folder not in self.groups:
            while self.unclaimed and self.unclaimed[0] not in self.groups:
                self.unclaimed.popleft()
            folder = self.unclaimed.popleft() if self.unclaimed else max(self.groups, key=lambda f: len(self.groups[f]))
        group = self.groups[folder]
        task = group.popleft()
        if not group:
            del self.groups[folder]
        self.size -= 1
        return task


def _context() -> multiprocessing.context.BaseContext:
    # fork starts a worker in milliseconds with libcst and the rules already imported
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def run(
    tasks: list[tuple[str, Settings, bytes | None]],
    jobs: int,
    lint: Callable[[str, Settings, bytes | None], FileResult],
    timeout: Callable[[Settings], float],
    cap_mb: Callable[[Settings], int],
    keep_source: bool = False,
) -> Iterator[tuple[int, FileResult]]:
    """Analyse `tasks` in up to `jobs` workers; yields (task index, result) as files finish."""
    context = _context()
    pending = _Queue([(i, path, s, data) for i, (path, s, data) in enumerate(tasks)])
    cap = max((cap_mb(s) for _, s, _ in tasks), default=1024)
    workers: list[_Worker] = []

    def start() -> _Worker:
        parent, child = context.Pipe()
        # a forked worker inherits the descriptor; a spawned one keeps the supervisor's stderr
        errors = tempfile.TemporaryFile() if context.get_start_method() == "fork" else None
        args = (child, cap, lint, keep_source, errors.fileno() if errors is not None else None, timeout)
        process = context.Process(target=_serve, args=args, daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent, errors=errors)

    def retire(worker: _Worker, kill: bool) -> None:
        if kill and worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=5)
        worker.conn.close()
        if worker.errors is not None:
            worker.errors.close()
        workers.remove(worker)

    gc.freeze()  # what the supervisor holds is shared with forked workers, not copied on write
    try:
        while pending or any(w.task for w in workers):
            while pending and len(workers) < min(jobs, len(pending) + sum(1 for w in workers if w.task)):
                workers.append(start())
            for worker in workers:
                if worker.task is None and pending:
                    worker.task = pending.take(worker.folder)
                    worker.folder = os.path.dirname(worker.task[1])
                    worker.started = time.monotonic()
                    try:
                        worker.conn.send(worker.task)
                    except (OSError, ValueError):
                        pass  # it died: found below as a crash
            busy = [w for w in workers if w.task]
            now = time.monotonic()
            deadline = min(w.started + wall_clock_limit(timeout(w.task[2])) for w in busy)  # type: ignore[index]
            ready = wait([w.conn for w in busy], timeout=max(0.0, deadline - now))
            for worker in busy:
                task = worker.task
                assert task is not None
                index, path, settings, _ = task
                if worker.conn in ready:
                    try:
                        got, result, recycle = worker.conn.recv()
                    except (EOFError, OSError):
                        worker.process.join(timeout=5)
                        reason = _signal_name(worker.process.exitcode)
                        message = f"the parser crashed ({reason})"
                        if _CPU_TIMER and worker.process.exitcode == -signal.SIGPROF:
                            message = f"used more than {timeout(settings):g} s of CPU time (--file-timeout)"
                        elif "memory allocation of" in worker.error_text():  # libcst's parser at the cap
                            message = f"needed more than {cap} MB (--file-memory)"
                        elif worker.process.exitcode in (-signal.SIGKILL, -signal.SIGABRT):
                            message = f"the parser crashed or needed more than {cap} MB ({reason})"
                        yield index, FileResult(path, [could_not_analyse(path, message)], cacheable=False)
                        retire(worker, kill=True)
                        continue
                    worker.task = None
                    yield got, result
                    if recycle:
                        retire(worker, kill=False)
                elif time.monotonic() - worker.started >= wall_clock_limit(timeout(settings)):
                    limit = wall_clock_limit(timeout(settings))
                    if _CPU_TIMER:
                        cpu = timeout(settings)
                        message = f"ran {limit:g} s of wall-clock time without using its {cpu:g} s of CPU time (--file-timeout): the machine is overloaded or the worker was stopped"
                    else:
                        message = f"took longer than {limit:g} s (--file-timeout)"
                    yield index, FileResult(path, [could_not_analyse(path, message)], cacheable=False)
                    retire(worker, kill=True)
    finally:
        for worker in list(workers):
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
            retire(worker, kill=worker.task is not None)  # interrupted mid-file: do not wait for it
        gc.unfreeze()
