"""The language server's worker (`ResidentWorker`, the engine's worker mechanism kept for a whole
session): a crash, a hang or a memory blow-up in it is reported to the caller with the same kind of
message as a file's TL000 on the command line, and the next call gets a fresh child."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from trainlint.engine import worker_process, workers
from trainlint.engine.workers import ResidentWorker, WorkerFailure


def allocate(megabytes: int) -> int:
    """Hold `megabytes` of memory at once (a stand-in for a parse that blows up)."""
    return len(bytearray(megabytes * 1024 * 1024))


def spin() -> None:
    """Run on the CPU forever (a stand-in for a parse that never ends)."""
    while True:
        pass


def abort_at_the_cap() -> None:
    """Die as libcst's native parser does at the memory cap: a line on the output, then SIGABRT."""
    print("memory allocation of 4294967296 bytes failed", flush=True)
    os.abort()


def test_a_hang_is_ended_by_the_cpu_time_limit_and_the_next_call_is_answered_by_a_fresh_child():
    worker = ResidentWorker(timeout_s=1.0)
    try:
        first = worker.call(os.getpid)
        started = time.monotonic()
        with pytest.raises(WorkerFailure, match=r"^used more than 1 s of CPU time$"):
            worker.call(spin)
        assert time.monotonic() - started < 15
        assert worker.call(os.getpid) not in (first, os.getpid())
    finally:
        worker.close()


def test_a_worker_that_does_not_run_is_ended_by_the_wall_clock_backstop(monkeypatch):
    monkeypatch.setattr(worker_process, "WALL_CLOCK_FACTOR", 2.0)
    monkeypatch.setattr(worker_process, "WALL_CLOCK_SLACK", 0.0)
    worker = ResidentWorker(timeout_s=1.0)
    try:
        with pytest.raises(WorkerFailure, match="ran 2 s of wall-clock time without using its 1 s of CPU time: the machine is overloaded"):
            worker.call(time.sleep, 30)
        assert worker.call(sum, [1, 2, 3]) == 6
    finally:
        worker.close()


def test_an_abort_is_reported_with_its_signal_and_the_next_call_is_answered_by_a_fresh_child():
    worker = ResidentWorker()
    try:
        first = worker.call(os.getpid)
        with pytest.raises(WorkerFailure, match=r"^the parser crashed or needed more than 2048 MB \(SIGABRT\)$"):
            worker.call(os.abort)
        assert worker.call(os.getpid) != first
    finally:
        worker.close()


def test_the_native_parser_at_the_memory_cap_is_told_from_a_crash_by_what_the_worker_printed():
    """What the analysis prints goes to the worker's own file (not the server's stdout, which is the
    editor's channel), where the supervisor reads it."""
    worker = ResidentWorker(memory_mb=700)
    try:
        with pytest.raises(WorkerFailure, match=r"^needed more than 700 MB$"):
            worker.call(abort_at_the_cap)
        assert worker.call(sum, [1, 2]) == 3
    finally:
        worker.close()


def test_memory_over_the_cap_is_reported():
    worker = ResidentWorker(memory_mb=600)
    try:
        with pytest.raises(WorkerFailure, match=r"^needed more than 600 MB$"):
            worker.call(allocate, 1024)
        assert worker.call(allocate, 10) == 10 * 1024 * 1024
    finally:
        worker.close()


def test_an_exception_comes_back_as_a_failure_and_the_child_stays():
    worker = ResidentWorker()
    try:
        pid = worker.call(os.getpid)
        with pytest.raises(WorkerFailure, match="the analysis failed: ZeroDivisionError"):
            worker.call(divmod, 1, 0)
        assert worker.call(os.getpid) == pid
    finally:
        worker.close()


def test_close_ends_a_call_in_progress():
    worker = ResidentWorker(timeout_s=60)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            worker.call(time.sleep, 30)
        except WorkerFailure as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(1.0)  # the child is started and sleeping
    started = time.monotonic()
    worker.close()
    thread.join(timeout=20)
    assert not thread.is_alive() and time.monotonic() - started < 15
    assert len(outcome) == 1 and "(SIGKILL)" in str(outcome[0])
    with pytest.raises(WorkerFailure, match="closed"):
        worker.call(os.getpid)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_worker_is_not_forked_from_the_threaded_caller():
    """The server's process runs threads: its worker comes from a fork server (or is spawned)."""
    worker = ResidentWorker()
    try:
        pid = worker.call(os.getpid)
        with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/cmdline") as cmdline:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            spawned = "--multiprocessing-fork" in cmdline.read()
        assert parent != os.getpid() or spawned
    finally:
        worker.close()


def test_the_language_server_child_sees_a_module_created_after_its_first_lint(tmp_path):
    """The child lints many buffers: a module created since the last lint (here the step helper that
    makes the loop a training loop) is found, not remembered as missing."""
    from trainlint.config import Settings
    from trainlint.lsp.analysis import lint_buffer

    main = tmp_path / "main.py"
    source = (
        "import torch\nfrom engine import fit_batch\n\nfor batch in loader:\n"
        "    fit_batch(model, opt, batch)\n    torch.cuda.synchronize()\n"
    )
    assert "TL402" not in {d.code for d in lint_buffer(source, str(main), Settings()).diagnostics}
    (tmp_path / "engine.py").write_text(
        "def fit_batch(model, opt, batch):\n    model(batch).mean().backward()\n    opt.step()\n    opt.zero_grad()\n"
    )
    assert "TL402" in {d.code for d in lint_buffer(source, str(main), Settings()).diagnostics}
