"""`trainlint lsp`'s start-up: the contained child's imports begin before the server's own.

An editor sends `initialize` the moment it starts the server and `didOpen` right after, so the first
diagnostics wait for whatever start-up is left. Most of it is imports: the server's (pygls and
lsprotocol) and the analysis's in the fork server that the contained worker comes from (libcst and
the rules; see `ResidentWorker` in `trainlint/engine/workers.py`). Starting that fork server first
lets both import at once, on two cores; the server then forks its worker and warms it while it
answers `initialize` (`TrainlintServer.start_io`), so the first buffer is linted by a ready worker.

This module imports nothing heavy, so that the fork server starts within milliseconds.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
from typing import Callable

# what the contained worker's fork server imports: the analysis the server calls in it
PRELOAD = ("trainlint.lsp.analysis",)
SERVER_PACKAGES = ("pygls", "lsprotocol")


def start_fork_server() -> None:
    """Start the fork server with the analysis importing, without waiting for it (where there is
    none, the worker is spawned on the first call instead)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    from multiprocessing import forkserver

    try:
        forkserver.ensure_running()
    except OSError:
        pass  # the worker's first call starts it, or says why it cannot


def load_server() -> Callable[[], None]:
    """Start the fork server, then import the server: its `main`. Raises ImportError without the
    `lsp` extra (before starting anything)."""
    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"No module named {missing[0]!r}")
    start_fork_server()
    from trainlint.lsp.server import main

    return main
