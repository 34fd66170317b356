"""The language server before pygls is loaded: `initialize` answered, the first files linted.

pygls and lsprotocol take 1.5 s to import on a quiet machine (5 s and more on a loaded one), while
an editor sends `initialize`, `initialized` and `didOpen` at once and waits for the answer and the
first diagnostics. Until the server is loaded (`launch.py` imports it on a thread), this answers
`initialize` with the result pygls would send (`initialize.py`) and lints each opened file in the
contained worker, publishing its diagnostics as the server would (`documents.DocumentState`); the
first message it cannot handle so, and everything after it, waits for the server. The server then
takes in what was handled here without answering or publishing it again
(`TrainlintServer.adopt_early`): the `initialize` request, and `initialized` and each `didOpen` with
its result.

Whenever in doubt (a setting in error, a file over max-file-size, a worker failure, a URI that is
not a file's), a file is left to the server, which lints it when it is loaded.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

# (all light: no pygls, lsprotocol or libcst)
from trainlint.config import ConfigError, Settings, find_config, load_settings
from trainlint.engine.results import FileResult
from trainlint.engine.workers import ResidentWorker, WorkerFailure
from trainlint.lsp import contained as analysis
from trainlint.lsp.documents import DocumentState, clean_text
from trainlint.lsp.framing import FrameReader, Inbox, Item, parse
from trainlint.lsp.cached_results import cached_result
from trainlint.lsp.contained import ANALYSIS
from trainlint.lsp.options import EditorOptions, parse_options
from trainlint.report.lsp import to_lsp

logger = logging.getLogger(__name__)


@dataclass
class EarlyStart:
    """What was read and said before the server was loaded, for the server to take in."""

    frames: Inbox | FrameReader  # the rest of the input
    contained: ResidentWorker | None = None  # the worker, started (and the first files linted in it)
    initialize: dict[str, Any] | None = None  # the `initialize` request answered ...
    answer: dict[str, Any] | None = None  # ... and the result it was sent
    pending: list[Item] = field(default_factory=list)  # read, for the server to handle in order
    linted: dict[str, tuple[int | None, str, FileResult]] = field(default_factory=dict)  # uri -> version, text, result published


def _file_path(uri: Any) -> Path | None:
    """The path of a file: URI (None for any other)."""
    if not isinstance(uri, str):
        return None
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" and parsed.path and not parsed.netloc else None


class EarlyServer:
    """Serves what it can of the input until `loaded()` (see the module's docstring)."""

    POLL_S = 0.02  # how often the server's import is checked while no message comes

    def __init__(
        self, inbox: Inbox, write: Callable[[bytes], None], initialize: dict[str, Any], answer: dict[str, Any],
        release: Callable[[], None] = lambda: None,
    ) -> None:
        """`initialize`: the request that `launch.py` answered (with `answer`), through `write`.
        `release`: lets the server's import begin (held until the first cached results are out, or
        nothing is waiting: the two would share one interpreter lock)."""
        self.early = EarlyStart(inbox, initialize=initialize, answer=answer)
        self._release = release
        self._inbox = inbox
        self._write_raw = write
        self._write_lock = threading.Lock()
        self._options: EditorOptions | None = EditorOptions()
        self._lints: list[threading.Thread] = []
        self._opened: set[str] = set()
        self._start(initialize["params"])

    def run(self, loaded: Callable[[], bool]) -> EarlyStart:
        """Handle messages until the server is loaded or one comes that only the server can handle;
        then wait for the lints under way (the server writes after them)."""
        while not loaded():
            try:
                item = self._inbox.get(self.POLL_S)
            except queue.Empty:
                if not any(lint.is_alive() for lint in self._lints):
                    self._release()
                continue
            if not self._take(item):
                self.early.pending.append(item)
                break
        self._release()
        for lint in self._lints:
            lint.join()
        return self.early

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            try:
                self._write_raw(data)
            except OSError:  # the editor has gone: the server sees its input end
                logger.warning("cannot write to the editor", exc_info=True)

    def _take(self, item: Item) -> bool:
        """Handle one item; False if it is the server's to handle."""
        message = parse(item)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "id" in message:
            return False
        if message.get("method") == "initialized":
            self.early.pending.append(item)  # (the server's handler runs when it is loaded)
            return True
        if message.get("method") == "textDocument/didOpen":
            return self._open(item, message.get("params"))
        return False

    def _start(self, params: dict[str, Any]) -> None:
        """Start the worker warming up, and take the editor's settings as the server will."""
        root = _file_path(params.get("rootUri")) or (Path(params["rootPath"]) if params.get("rootPath") else None)
        try:
            self._options = parse_options(params.get("initializationOptions"), root)
        except ConfigError:
            self._options = None  # (the server says what is wrong; it lints every file)
        self.early.contained = ResidentWorker(preload=[ANALYSIS])  # (as `launch.PRELOAD`)
        # (not waited for: the server, once loaded, does not need the worker ready)
        threading.Thread(target=self._warm_up, name="trainlint-warm-up", daemon=True).start()

    def _warm_up(self) -> None:
        try:
            if self.early.contained is not None:
                self.early.contained.call(analysis.warm_up)
        except WorkerFailure:
            pass  # (left to the first lint)

    def _open(self, item: Item, params: Any) -> bool:
        document = params.get("textDocument") if isinstance(params, dict) else None
        if not isinstance(document, dict) or self._options is None:
            return False
        uri, version, text = document.get("uri"), document.get("version"), document.get("text")
        path = _file_path(uri)
        if path is None or not isinstance(text, str) or not isinstance(version, int) or isinstance(version, bool):
            return False
        if uri in self._opened:
            return False  # (opened twice before the server loaded: the server's to sort out)
        self._opened.add(uri)
        self.early.pending.append(item)  # the server's workspace takes it in; `adopt_early` skips its lint
        lint = threading.Thread(target=self._lint, args=(uri, version, text, path), name="trainlint-early-lint", daemon=True)
        self._lints.append(lint)
        lint.start()
        return True

    def _lint(self, uri: str, version: int, text: str, path: Path) -> None:
        """Lint an opened file as `TrainlintServer.lint` does, and publish the result."""
        settings = self._settings(path)
        source = clean_text(text)
        if settings is None or len(source.encode("utf-8")) > settings.max_file_size or self.early.contained is None:
            return  # (the server says why, or lints it itself)
        state = DocumentState()
        cached = cached_result(source, str(path), settings) if settings.baseline is None else None
        if cached is not None:  # (as `check` left it: no need to wait for the worker)
            self._publish(uri, state, version, source, cached)
            self.early.linted[uri] = (version, text, cached)
            return
        self._release()
        try:
            result, alone = self.early.contained.call(analysis.lint_opened, source, str(path), settings)
            if alone:  # the file's findings alone first, then with the project's summaries
                self._publish(uri, state, version, source, result)
                result = self.early.contained.call(analysis.lint_buffer, source, str(path), settings)
        except WorkerFailure:
            return  # (the server lints it again)
        self._publish(uri, state, version, source, result)
        self.early.linted[uri] = (version, text, result)

    def _publish(self, uri: str, state: DocumentState, version: int, source: str, result: FileResult) -> None:
        state.linted(version, source, result)
        diagnostics = [to_lsp(d, state.lines) for d in state.diagnostics]
        body = json.dumps({
            "method": "textDocument/publishDiagnostics",
            "params": {"uri": uri, "version": version, "diagnostics": diagnostics},
            "jsonrpc": "2.0",
        }).encode("utf-8")
        self._write(b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n%s" % (len(body), body))

    def _settings(self, path: Path) -> Settings | None:
        """The file's settings as `TrainlintServer.settings_for` makes them; None when they are in error."""
        options = self._options
        if options is None:
            return None
        try:
            return options.apply(load_settings(options.config_path or find_config(path)))
        except ConfigError:
            return None
