"""`trainlint lsp`'s start-up: `initialize` answered at once, the first files linted before the
server is loaded, the contained child's imports begun first.

An editor sends `initialize` the moment it starts the server, and `initialized` and `didOpen` right
after, so the first diagnostics wait for whatever start-up is left. Most of it is imports: the
server's (pygls, and lsprotocol's types: 1.5 s quiet, 5 s and more on a loaded machine) and the
analysis's in the fork server that the contained worker comes from (libcst and the rules; see
`ResidentWorker` in `trainlint/engine/workers.py`). Here the fork server is started first, then
the server's module is imported on a thread, and meanwhile the editor's messages are read with the
server's framing (`framing.py`): an `initialize` request that comes first is answered at once with
the result pygls would send (`initialize.py`), the worker is started and warmed, and the files
opened before the server is loaded are linted in it and published (`early.py`). The server then
takes in what was read, without answering or publishing it again, and reads on.

This module imports nothing heavy, so that the fork server starts within milliseconds.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import multiprocessing
import sys
import threading
from typing import Any, Callable

from trainlint.lsp.contained import ANALYSIS
from trainlint.lsp.framing import Inbox, parse, stdin_frames
from trainlint.lsp.initialize import answerable, initialize_result, response

# what the contained worker's fork server imports: the analysis the server calls in it
PRELOAD = (ANALYSIS,)
SERVER_PACKAGES = ("pygls", "lsprotocol")
SERVER_MODULE = "trainlint.lsp.server"
EXIT_ERROR = 2  # (as the command line's: usage, configuration or internal error)
logger = logging.getLogger(__name__)


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


class ServerImport:
    """The server's module, imported on a thread from the moment this is made, or once `release`d
    when made with `held` (at most `HOLD_S` later): the first diagnostics may come from the result
    cache in a few milliseconds of this process's time, which the import would share."""

    HOLD_S = 0.3

    def __init__(self, module: str = SERVER_MODULE, held: bool = False) -> None:
        self._module = module
        self._loaded: Any = None
        self._error: BaseException | None = None
        self._go = threading.Event()
        if not held:
            self._go.set()
        self._thread = threading.Thread(target=self._load, name="trainlint-lsp-import", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Let the import begin."""
        self._go.set()

    def _load(self) -> None:
        self._go.wait(self.HOLD_S)
        try:
            self._loaded = __import__(self._module, fromlist=["main"])  # (as `import` does: `-X importtime` shows it)
        except BaseException as exc:  # re-raised where the server is wanted
            self._error = exc
            return
        # what the imports made (lsprotocol's thousands of classes) lives as long as the server:
        # out of the way of every later collection, which a keystroke's handling may run
        gc.freeze()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def module(self) -> Any:
        """The module, once imported (waiting for it); raises what importing it raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._loaded


def _write_stdout(data: bytes) -> None:
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except OSError:  # the editor has gone: the server sees its input end
        logger.warning("cannot write to the editor", exc_info=True)


def load_server() -> Callable[[], None]:
    """Start the fork server and the server's import, and return what serves stdio: it answers
    `initialize` without waiting for that import, then runs the server. Raises ImportError without
    the `lsp` extra (before starting anything)."""
    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"No module named {missing[0]!r}")
    start_fork_server()
    loading = ServerImport(held=True)

    def serve() -> None:
        early = start(Inbox(stdin_frames(sys.stdin.buffer)), _write_stdout, loading.done, loading.release)
        loading.module().main(early)

    return serve


def start(inbox: Inbox, write: Callable[[bytes], None], loaded: Callable[[], bool], release: Callable[[], None] = lambda: None) -> Any:
    """Serve what can be served before the server is loaded (until `loaded()`): `initialize`, when
    it comes first, is answered at once through `write`, then `early.EarlyServer` lints the files
    opened meanwhile (`release` lets the server's import begin, see `ServerImport`). What was read
    and said, for the server (an `early.EarlyStart`)."""
    first = inbox.next()
    message = parse(first)
    if not answerable(message):
        release()
        from trainlint.lsp.early import EarlyStart

        return EarlyStart(inbox, pending=[first])
    answer = initialize_result(message["params"])
    write(response(message, answer))
    # (imported now, not before the answer: the server's thread is importing what they share, and
    # this waits for it where it must, never the other way round, the import graph having no cycles)
    from trainlint.lsp.early import EarlyServer

    return EarlyServer(inbox, write, message, answer, release).run(loaded)


def run_command() -> None:
    """`trainlint lsp`: serve stdio; exit 2 with a message without the `lsp` extra."""
    try:
        serve = load_server()  # the analysis starts importing in the worker's fork server first
    except ImportError as exc:
        sys.stderr.write(f"trainlint: error: the language server needs the `lsp` extra ({exc}); `pip install 'trainlint[lsp]'`\n")
        sys.exit(EXIT_ERROR)
    serve()
