"""The language server's contained child process: a crash, a hang or a memory blow-up in it is
reported to the caller, and the next call gets a fresh child."""

from __future__ import annotations

import os
import threading
import time

import pytest

from trainlint.lsp.contained import ContainedFailure, ContainedProcess


def allocate(megabytes: int) -> int:
    """Hold `megabytes` of memory at once (a stand-in for a parse that blows up)."""
    return len(bytearray(megabytes * 1024 * 1024))


def test_a_hang_is_cut_off_and_the_next_call_is_answered():
    contained = ContainedProcess(timeout_s=1.0)
    try:
        started = time.monotonic()
        with pytest.raises(ContainedFailure, match="the parser took longer than 1 s"):
            contained.call(time.sleep, 30)
        assert time.monotonic() - started < 15
        assert contained.call(os.getpid) != os.getpid()  # answered, by a child
    finally:
        contained.close()


def test_a_crash_is_reported_with_its_signal():
    contained = ContainedProcess()
    try:
        with pytest.raises(ContainedFailure, match=r"the parser crashed \(SIGABRT\)"):
            contained.call(os.abort)
        assert contained.call(sum, [1, 2, 3]) == 6
    finally:
        contained.close()


def test_memory_over_the_cap_is_reported():
    contained = ContainedProcess(memory_mb=600)
    try:
        with pytest.raises(ContainedFailure, match="needed more than 600 MB"):
            contained.call(allocate, 1024)
        assert contained.call(allocate, 10) == 10 * 1024 * 1024
    finally:
        contained.close()


def test_an_exception_comes_back_as_a_failure_and_the_child_stays():
    contained = ContainedProcess()
    try:
        pid = contained.call(os.getpid)
        with pytest.raises(ContainedFailure, match="the analysis failed: ZeroDivisionError"):
            contained.call(divmod, 1, 0)
        assert contained.call(os.getpid) == pid
    finally:
        contained.close()


def test_close_ends_a_call_in_progress():
    contained = ContainedProcess(timeout_s=60)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            contained.call(time.sleep, 30)
        except ContainedFailure as exc:
            outcome.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    time.sleep(1.0)  # the child is started and sleeping
    started = time.monotonic()
    contained.close()
    worker.join(timeout=20)
    assert not worker.is_alive() and time.monotonic() - started < 15
    assert len(outcome) == 1 and "crashed (SIGKILL)" in str(outcome[0])


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
