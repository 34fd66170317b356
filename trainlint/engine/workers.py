"""Worker processes where a crash, a hang or a memory blow-up of the analysis stays contained.

One mechanism serves both front ends. A `Worker` is one child process that runs tasks one at a time
(`_serve`): a task names a module-level function, its arguments and a CPU-time limit, and the child
replies with the outcome (ok, out of memory, or the exception). When the child cannot reply (libcst's
native parser segfaults on some inputs, or the task runs past its limits), the `Worker` says which:
the signal it died of, the CPU time or the memory it needed, or the wall-clock backstop.

- `run()`, the command line's pool, forks workers and gives each one file at a time: only the file
  a worker was working on is lost (it gets a TL000 saying why), a fresh worker takes its place, and
  every other file is analysed as usual. No `BrokenProcessPool`, ever.
- `ResidentWorker`, the language server's, keeps one worker for the whole session and calls the
  server's analysis in it; a failure is raised as `WorkerFailure` and the next call gets a fresh
  child. The server's process runs threads, so its children are not forked from it: they come from
  a fork server (or are spawned where there is none) that has the analysis imported already.

Memory is bounded per worker with an address-space limit (`RLIMIT_AS`, its size at start plus the
cap); a worker that has grown by RECYCLE_GROWTH_MB (or past half its cap) ends after its reply, so
neither fragmentation nor the summaries it remembers accumulate (a fresh one is forked in a few
milliseconds, and the workers of a run share summaries through files). A worker keeps to one
project while it has files (`scheduling.py`) and is replaced by a fresh one, once it holds what it
read of that project, rather than moving on to another; it gives the memory its C allocator holds
free back after each file.

The time limit counts the CPU time a worker spends on a task (`ITIMER_PROF`: the kernel ends the
worker with SIGPROF, even inside the native parser), so a busy machine does not cost a valid file
its findings; a wall-clock backstop of many times the limit ends a worker that does not run at all.

A worker's standard output and error go to a file of its own, not the terminal (or the editor's
channel): libcst's native parser prints "memory allocation of N bytes failed" and a backtrace before
it aborts at the cap, and that text tells the supervisor the task ran out of memory, not crashed.

Workers end with the process they work for, whatever ends it (`timeout`, a cancelled CI job and
editors send SIGTERM, SIGHUP or SIGKILL):

- a worker closes the copies it inherited of the supervisor's ends of the workers' connections (a
  forked child gets them all), so that an idle worker reads EOF once the supervisor is gone, and a
  busy one fails to send its reply; a language server's worker also closes its copy of the fork
  server's "alive" pipe, so that the fork server ends with the server;
- on Linux the kernel kills a worker the moment the process that forked it ends (PR_SET_PDEATHSIG:
  the command line's process, or the language server's fork server), even in the middle of a file;
- the command line's pool kills its workers on SIGTERM and SIGHUP before the process ends of them
  (where there is no PR_SET_PDEATHSIG, a busy worker would otherwise finish its file first).
"""

from __future__ import annotations

import faulthandler
import gc
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from multiprocessing import reduction
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator, Sequence

from trainlint.config import Settings
from trainlint.engine.results import FileResult, could_not_analyse
from trainlint.engine.scheduling import FolderQueue, Task, project_units
from trainlint.engine.worker_process import (
    CPU_TIMER, SUPERVISOR_ENDS, allow_deep_recursion, arm_cpu_limit, close_inherited, end_with_parent, limit_memory, load_prctl,
    release_freed_memory, rss_mb, signal_name, wall_clock_limit,
)

LIMIT_OPTIONS = ("--file-timeout", "--file-memory")  # what sets the pool's limits, named in its messages


class WorkerFailure(Exception):
    """A worker could not answer a task: it crashed, ran out of time or memory, or the task raised."""


# A fresh worker is forked in milliseconds, but it has to read again what the last one knew of the
# project (each module's outline and summary): on a 60k-line project, recycling at 96 MB made a run
# 2.6 times slower. A worker's growth levels off once it knows the project (LLaMA-Factory: 200 MB).
RECYCLE_GROWTH_MB = 256
# A worker that has grown by this much holds what it read of its project: the pool replaces it rather
# than hand it another project. Ending a process frees its heap at once, where collecting the objects
# took 0.2-0.6 s a project; and each worker holds one project's knowledge at a time (the speed set:
# 314 MB peak at 48 MB, 295 at 24, same time).
PROJECT_GROWTH_MB = 24


class _Descriptor:
    """A file descriptor handed to a worker however it starts: forked workers inherit it as is,
    spawned ones (and a fork server's) are sent a copy as the process object is pickled."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        return _received, (reduction.DupFd(self.fd),)


def _received(dup: Any) -> _Descriptor:
    return _Descriptor(dup.detach())


# what `timeout`, a cancelled CI job and a closed terminal send (their default action ends the process)
_ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class _KillWorkers:
    """The handler of SIGTERM and SIGHUP while the command line's pool runs: kill its workers, then
    end the process as the signal would have."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers  # (the pool's list: the workers running when the signal comes)

    def __call__(self, signum: int, frame: Any) -> None:
        for worker in self.workers:
            worker.process.kill()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _serve(conn: Connection, cap_mb: int, output: _Descriptor | None, die_with_parent: bool = False, parent: int | None = None) -> None:
    """A worker's loop: run the tasks it is sent until told to stop, replying to each with
    (index, "ok" | "memory" | "error", value, whether this worker ends now). Standard output and
    error go to the file `output`, emptied before each task. With `die_with_parent`, the process
    that forked it (`parent` when known) takes it along when it ends."""
    if die_with_parent:  # (before the fork server's pipe is closed: until then the fork server stays)
        end_with_parent(parent)
    close_inherited()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    for signum in _ENDING_SIGNALS:  # (a forked worker inherits the pool's handler: it just ends)
        if isinstance(signal.getsignal(signum), _KillWorkers):
            signal.signal(signum, signal.SIG_DFL)
    if CPU_TIMER:
        signal.signal(signal.SIGPROF, signal.SIG_DFL)  # the default action ends the process
    if output is not None:
        os.dup2(output.fd, 2)
        os.dup2(output.fd, 1)  # nothing the analysis prints may reach the report or the editor's channel
        if faulthandler.is_enabled():  # it may write to a copy of the old descriptor (pytest does)
            faulthandler.enable(file=2)
    limit_memory(cap_mb)
    allow_deep_recursion()
    # the collector runs once a task, on that task's objects (below): left on between tasks, its passes
    # over what earlier tasks left alive (the project's summaries and trees) cost 8% of a run
    gc.disable()
    start = rss_mb()
    while True:
        try:
            task = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if output is not None:
            try:
                os.ftruncate(2, 0)
                os.lseek(2, 0, os.SEEK_SET)
            except OSError:
                pass
        index = None
        try:
            request = reduction.ForkingPickler.loads(task)
            if request is None:
                return
            index, function, args, cpu_limit = request
            arm_cpu_limit(cpu_limit)
            try:
                reply: tuple[Any, ...] = (index, "ok", function(*args))
            finally:
                arm_cpu_limit(0)
        except MemoryError:
            reply = (index, "memory", None)
        except BaseException as exc:  # every failure goes back as a message
            reply = (index, "error", f"{type(exc).__name__}: {exc}")
        # after a MemoryError the heap may be in a bad state: a fresh worker takes over
        grown = rss_mb() - start
        recycle = reply[1] == "memory" or grown > min(cap_mb / 2, RECYCLE_GROWTH_MB)
        # the task's garbage is all young (collection is paused while a file is analysed): a
        # young collection frees it; a full one per task would cost more than half the analysis
        gc.collect(0)
        release_freed_memory()
        try:
            conn.send((*reply, recycle, grown > PROJECT_GROWTH_MB))
        except MemoryError:
            conn.send((index, "memory", None, True, True))
            return
        except OSError:
            return  # the supervisor is gone
        except Exception as exc:  # an unpicklable result
            conn.send((index, "error", f"{type(exc).__name__}: {exc}", recycle, grown > PROJECT_GROWTH_MB))
        if recycle:
            return


class Worker:
    """One worker process: start it (forked, spawned or from a fork server, as `context` says), send
    it a task, receive the reply within the deadline, and say why when the worker could not reply.

    `options` names what sets the time and the memory limit, for the messages ("" names nothing).
    """

    def __init__(self, context: multiprocessing.context.BaseContext, cap_mb: int, options: tuple[str, str] = LIMIT_OPTIONS) -> None:
        self.cap_mb = cap_mb
        self.options = options
        self.index: int | None = None  # of the task in hand; None when idle
        self.cpu_limit = 0.0
        self.started = 0.0
        self.ending = False  # it said it ends after its reply
        self.knows_project = False  # it said it has grown by PROJECT_GROWTH_MB: it holds what it read of one
        self.output = tempfile.TemporaryFile()
        parent, child = context.Pipe()
        # where descriptors cannot be handed on (Windows) the worker keeps the standard streams it gets
        output = _Descriptor(self.output.fileno()) if hasattr(reduction, "DupFd") else None
        # who forks the worker: a fork server, from its only thread; else this process, from this
        # thread, whose end (not only the process's) would kill the worker. (The fork server's id is
        # not known here, and not needed: it cannot end before the worker's request, as the worker
        # holds its "alive" pipe until after it.)
        if context.get_start_method() == "forkserver":
            lifeline: tuple[bool, int | None] = (True, None)
        else:
            lifeline = (threading.current_thread() is threading.main_thread(), os.getpid())
            if lifeline[0]:
                load_prctl()  # here, once, rather than in every child (about 2 ms of each start)
        SUPERVISOR_ENDS.add(parent)  # (before the fork: the child closes its copy too)
        self.process = context.Process(target=_serve, args=(child, cap_mb, output, *lifeline), daemon=True)
        try:
            self.process.start()
        except BaseException:
            SUPERVISOR_ENDS.discard(parent)
            parent.close()
            self.output.close()
            raise
        finally:
            child.close()
        self.conn = parent

    @property
    def usable(self) -> bool:
        """Whether it can take another task: idle, alive, and not ending."""
        return self.index is None and not self.ending and self.process.is_alive()

    @property
    def deadline(self) -> float:
        """When the task in hand runs into the wall-clock backstop (time.monotonic())."""
        return self.started + wall_clock_limit(self.cpu_limit)

    def send(self, index: int, function: Callable[..., Any], args: Sequence[Any], cpu_limit: float) -> None:
        """Start `function(*args)` in the worker (a module-level function: it is sent by name)."""
        try:
            task = reduction.ForkingPickler.dumps((index, function, tuple(args), cpu_limit))
        except Exception as exc:  # an argument that cannot be pickled
            raise WorkerFailure(f"the task could not be sent: {type(exc).__name__}: {exc}") from None
        self.index, self.cpu_limit, self.started = index, cpu_limit, time.monotonic()
        try:
            self.conn.send_bytes(task)
        except (OSError, ValueError):
            pass  # it died: found when its reply is read

    def reply(self) -> tuple[int, Any]:
        """(index, value) of the task in hand once the connection is ready; raises WorkerFailure
        saying why when the worker died instead, ran out of memory, or the task raised."""
        index = self.index
        assert index is not None
        try:
            got, status, value, self.ending, self.knows_project = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerFailure(self._lost()) from None
        self.index = None
        if status == "memory":
            raise WorkerFailure(f"needed more than {self.cap_mb} MB{self._option(1)}")
        if status == "error":
            raise WorkerFailure(f"the analysis failed: {value}")
        return (index if got is None else got), value

    def receive(self) -> Any:
        """The value of the task in hand, waiting up to the wall-clock backstop; raises WorkerFailure."""
        if not wait([self.conn], max(0.0, self.deadline - time.monotonic())):
            raise WorkerFailure(self.overdue())
        return self.reply()[1]

    def overdue(self) -> str:
        """Why the task in hand is abandoned at the wall-clock backstop."""
        limit = wall_clock_limit(self.cpu_limit)
        if CPU_TIMER:
            return (
                f"ran {limit:g} s of wall-clock time without using its {self.cpu_limit:g} s of CPU time{self._option(0)}: "
                "the machine is overloaded or the worker was stopped"
            )
        return f"took longer than {limit:g} s{self._option(0)}"

    def _lost(self) -> str:
        """Why the worker died on its task: the CPU-time limit, the memory cap, or a crash."""
        self.process.join(timeout=5)
        code = self.process.exitcode
        reason = signal_name(code)
        if CPU_TIMER and code == -signal.SIGPROF:
            return f"used more than {self.cpu_limit:g} s of CPU time{self._option(0)}"
        if "memory allocation of" in self._output_text():  # libcst's parser at the cap
            return f"needed more than {self.cap_mb} MB{self._option(1)}"
        if code in (-signal.SIGKILL, -signal.SIGABRT):
            return f"the parser crashed or needed more than {self.cap_mb} MB ({reason})"
        return f"the parser crashed ({reason})"

    def _option(self, which: int) -> str:
        return f" ({self.options[which]})" if self.options[which] else ""

    def _output_text(self) -> str:
        """The start of what the worker wrote for its current task."""
        try:
            return os.pread(self.output.fileno(), 65536, 0).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def stop(self) -> None:
        """End the worker: killed when it is mid-task, else asked to finish; waits for it."""
        if self.index is None and not self.ending:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                pass
        if self.index is not None and self.process.is_alive():
            self.process.kill()  # mid-task (interrupted, or past its limits): do not wait for it
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        SUPERVISOR_ENDS.discard(self.conn)
        self.conn.close()
        self.output.close()


def _fork_context() -> multiprocessing.context.BaseContext:
    # fork starts a worker in milliseconds with libcst and the rules already imported
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _analyse_file(
    lint: Callable[[str, Settings, Any], FileResult],
    keep_source: bool,
    path: str,
    settings: Settings,
    data: Any,  # (what `lint` is given with the path: bytes to analyse, or what says how to read them)
) -> FileResult:
    """A pool worker's task: one file's result, without its source unless the supervisor needs it."""
    result = lint(path, settings, data)
    if not keep_source:
        result.source = None  # keep the traffic small; --fix re-reads the file
    return result


def _kill_on_ending_signals(workers: list[Worker]) -> dict[int, Any]:
    """Have SIGTERM and SIGHUP, where they would end this process, kill `workers` (as the list is
    when the signal comes) and then end the process as they would have; returns the handlers that
    were replaced, to put back. Only the main thread can set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    replaced = {}
    for signum in _ENDING_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_DFL:  # (not one that is ignored: `nohup`)
            replaced[signum] = signal.signal(signum, _KillWorkers(workers))
    return replaced


def run(
    tasks: list[tuple[str, Settings, Any]],
    jobs: int,
    lint: Callable[[str, Settings, Any], FileResult],
    timeout: Callable[[Settings], float],
    cap_mb: Callable[[Settings], int],
    keep_source: bool = False,
) -> Iterator[tuple[int, FileResult]]:
    """Analyse `tasks` in up to `jobs` forked workers (`lint` module-level, as a task names it);
    yields (task index, result) as files finish. A worker that holds what it read of one project
    (PROJECT_GROWTH_MB) is replaced by a fresh one rather than given another project's file."""
    context = _fork_context()
    numbered = [(i, path, s, data) for i, (path, s, data) in enumerate(tasks)]
    folders_of_tasks = list(dict.fromkeys(os.path.dirname(path) for path, _, _ in tasks))
    pending = FolderQueue(numbered, project_units(folders_of_tasks) if len(folders_of_tasks) > 1 else None)
    cap = max((cap_mb(s) for _, s, _ in tasks), default=1024)
    workers: list[Worker] = []
    in_hand: dict[Worker, Task] = {}
    folders: dict[Worker, str] = {}  # of the last file each worker was given

    def retire(worker: Worker) -> None:
        worker.stop()
        workers.remove(worker)
        in_hand.pop(worker, None)
        folders.pop(worker, None)

    gc.freeze()  # what the supervisor holds is shared with forked workers, not copied on write
    # SIGTERM and SIGHUP kill the workers first: without PR_SET_PDEATHSIG a busy one would finish its file
    replaced = _kill_on_ending_signals(workers)
    try:
        while pending or in_hand:
            while pending and len(workers) < min(jobs, len(pending) + len(in_hand)):
                workers.append(Worker(context, cap))
            for worker in list(workers):
                if worker not in in_hand and pending:
                    elsewhere = {pending.unit_of(folders[w]) for w in in_hand if w in folders}
                    task = pending.take(folders.get(worker), elsewhere)
                    index, path, settings, data = task
                    folder = os.path.dirname(path)
                    if worker.knows_project and pending.unit_of(folders[worker]) != pending.unit_of(folder):
                        retire(worker)
                        worker = Worker(context, cap)
                        workers.append(worker)
                    in_hand[worker], folders[worker] = task, folder
                    worker.send(index, _analyse_file, (lint, keep_source, path, settings, data), timeout(settings))
            busy = list(in_hand)
            ready = wait([w.conn for w in busy], timeout=max(0.0, min(w.deadline for w in busy) - time.monotonic()))
            for worker in busy:
                index, path, _, _ = in_hand[worker]
                if worker.conn in ready:
                    try:
                        got, result = worker.reply()
                    except WorkerFailure as failure:
                        got, result = index, FileResult(path, [could_not_analyse(path, str(failure))], cacheable=False)
                    del in_hand[worker]
                    yield got, result
                    if not worker.usable:
                        retire(worker)
                elif time.monotonic() >= worker.deadline:
                    yield index, FileResult(path, [could_not_analyse(path, worker.overdue())], cacheable=False)
                    retire(worker)
    finally:
        for worker in list(workers):
            retire(worker)  # one interrupted mid-file is killed, not waited for
        for signum, handler in replaced.items():
            signal.signal(signum, handler)
        gc.unfreeze()


def _resident_context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    # a process with threads must not fork (a lock another thread holds stays locked in the
    # child): workers come from a fork server that has `preload` imported, so that a fresh one
    # starts in milliseconds, or are spawned where there is no fork server
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(preload))
        return context
    return multiprocessing.get_context("spawn")


class ResidentWorker:
    """One long-lived worker that answers calls one at a time (the language server's), started on
    the first call and replaced after a failure. Safe to call from several threads."""

    def __init__(self, timeout_s: float = 20.0, memory_mb: int = 2048, preload: Sequence[str] = ()) -> None:
        """`timeout_s`: CPU seconds one call may use; `memory_mb`: on top of the worker's start-up
        size; `preload`: modules the workers start with imported (the process has one fork server:
        it imports what was asked for last before it started)."""
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._context = _resident_context(preload)
        self._worker: Worker | None = None
        self._lock = threading.Lock()
        self._calls = 0
        self._closed = False

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in the worker; raises WorkerFailure when it cannot answer.

        `function` must be importable by name (a module-level function), and its arguments and
        result picklable.
        """
        with self._lock:
            if self._closed:
                raise WorkerFailure("the worker was closed")
            worker = self._worker
            if worker is None or not worker.usable:
                if worker is not None:
                    worker.stop()
                try:
                    worker = self._worker = Worker(self._context, self.memory_mb, options=("", ""))
                except OSError as exc:
                    self._worker = None
                    raise WorkerFailure(f"could not start a worker: {exc}") from None
            self._calls += 1
            worker.send(self._calls, function, args, self.timeout_s)
            try:
                return worker.receive()
            finally:
                if not worker.usable:
                    worker.stop()
                    self._worker = None

    def close(self) -> None:
        """End the worker (the server is shutting down); a call waiting on it fails at once."""
        self._closed = True
        if self._lock.acquire(blocking=False):
            try:
                if self._worker is not None:
                    self._worker.stop()
                    self._worker = None
            finally:
                self._lock.release()
            return
        worker = self._worker  # a call holds the lock for up to its time limit: end its worker
        if worker is not None and worker.process.is_alive():
            worker.process.kill()
