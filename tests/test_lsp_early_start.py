"""`initialize` answered before pygls and lsprotocol are loaded (trainlint/lsp/launch.py), with the
answer pygls itself would give; what the editor sends meanwhile is handled once the server is
loaded, and the diagnostics it gets are the command line's."""

from __future__ import annotations

import io
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_lsp_robustness import RawClient
from tests.test_lsp_server import BAD

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 60.0

VSCODE_LIKE = {
    "workspace": {"applyEdit": True, "workspaceFolders": True, "configuration": True,
                  "fileOperations": {"dynamicRegistration": True, "didCreate": True, "willRename": True}},
    "textDocument": {
        "synchronization": {"dynamicRegistration": True, "willSave": True, "willSaveWaitUntil": True, "didSave": True},
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "rename": {"prepareSupport": True},
        "publishDiagnostics": {"relatedInformation": True, "versionSupport": False},
    },
    "notebookDocument": {"synchronization": {"dynamicRegistration": True, "executionSummarySupport": True}},
    "window": {"workDoneProgress": True},
    "general": {"positionEncodings": ["utf-16"], "markdown": {"parser": "marked", "version": "1.1.0"}},
}
CLIENTS = {
    "nothing": {},
    "vscode": VSCODE_LIKE,
    "neovim": {"textDocument": {"synchronization": {"willSave": False, "willSaveWaitUntil": False, "didSave": True}},
               "general": {"positionEncodings": ["utf-8", "utf-16", "utf-32"]}},
    "only will-save": {"textDocument": {"synchronization": {"willSave": True}}},
    "notebooks, no text sync": {"notebookDocument": {"synchronization": {}}, "textDocument": {}},
}


def initialize_message(capabilities: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"processId": None, "rootUri": "file:///project", "capabilities": capabilities, **params}}


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def pygls_answer(message: dict[str, Any]) -> dict[str, Any]:
    """What the server answers through pygls (no early answer), as JSON."""
    from trainlint.lsp.server import build_server
    from trainlint.lsp.transport import dispatch

    written: list[bytes] = []

    class Capture:
        def write(self, data: bytes) -> None:
            written.append(data)

        def close(self) -> None:
            pass

    server = build_server()
    server.protocol.set_writer(Capture())
    dispatch(server.protocol, json.dumps(message).encode())
    replies = [json.loads(data.split(b"\r\n\r\n", 1)[1]) for data in written]
    return next(r for r in replies if r.get("id") == message["id"])


@pytest.mark.parametrize("client", CLIENTS, ids=list(CLIENTS))
def test_the_early_answer_is_the_one_pygls_gives(client: str):
    from trainlint.lsp.initialize import answerable, initialize_result

    message = initialize_message(CLIENTS[client], initializationOptions={"select": ["TL3"]}, clientInfo={"name": client})
    assert answerable(message)
    answer = pygls_answer(message)
    assert "error" not in answer
    # a server feature added, or pygls changed: update `trainlint/lsp/initialize.py` to this
    assert initialize_result(message["params"]) == answer["result"]


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "shutdown"},
        {"jsonrpc": "2.0", "method": "initialize", "params": {"capabilities": {}}},  # a notification
        {"jsonrpc": "2.0", "id": True, "method": "initialize", "params": {"capabilities": {}}},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": None}},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"processId": "12", "capabilities": {}}},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {"general": []}}},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}, "workspaceFolders": [{"uri": 1}]}},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}, "trace": "loud"}},
    ],
)
def test_what_the_early_answer_cannot_vouch_for_is_left_to_pygls(message: dict[str, Any]):
    from trainlint.lsp.initialize import answerable

    assert not answerable(message)


def test_initialize_and_the_first_diagnostics_need_neither_pygls_nor_lsprotocol(tmp_path: Path):
    # in a fresh interpreter: `initialize` answered, the file opened after it linted (in the
    # contained worker) and published, with pygls never loaded; the rest is left for the server
    path = tmp_path / "train.py"
    path.write_text(BAD)
    script = """
import io, json, sys
from trainlint.lsp.framing import FrameReader, Inbox
from trainlint.lsp.launch import start
out = []
early = start(Inbox(FrameReader(io.BytesIO(sys.stdin.buffer.read()).read)), out.append, lambda: False)
early.contained.close()
assert not [m for m in sys.modules if m.split(".")[0] in ("pygls", "lsprotocol", "cattrs", "libcst")], sorted(sys.modules)
print(json.dumps({"written": [w.decode() for w in out], "pending": [p and json.loads(p) for p in early.pending], "linted": list(early.linted)}))
"""
    item = {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": BAD}
    opened = {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": item}}
    sent = frame(initialize_message(VSCODE_LIKE)) + frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}) + frame(opened)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], input=sent, capture_output=True, env=env, timeout=TIMEOUT, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    found = json.loads(done.stdout)
    answer, published = found["written"]
    header, body = answer.split("\r\n\r\n")
    assert header.startswith(f"Content-Length: {len(body)}\r\n")
    assert json.loads(body)["result"] == initialize_result_of(initialize_message(VSCODE_LIKE))
    params = json.loads(published.split("\r\n\r\n")[1])["params"]
    assert (params["uri"], params["version"]) == (path.as_uri(), 1)
    assert by_position(params["diagnostics"]) == by_position(lsp_diagnostics_of_the_cli(path))
    # the server takes in `initialized` and `didOpen` (its workspace holds the file), then the end
    assert [p and p["method"] for p in found["pending"]] == ["initialized", "textDocument/didOpen", None]
    assert found["linted"] == [path.as_uri()]


def initialize_result_of(message: dict[str, Any]) -> dict[str, Any]:
    from trainlint.lsp.initialize import initialize_result

    return initialize_result(message["params"])


def test_a_first_message_that_is_not_initialize_is_the_servers_to_answer():
    from trainlint.lsp.framing import FrameReader, Inbox
    from trainlint.lsp.launch import start

    stream = io.BytesIO(b"Content-Length: 8\r\n\r\nnot json" + frame(initialize_message({})))
    written: list[bytes] = []
    early = start(Inbox(FrameReader(stream.read)), written.append, lambda: False)
    assert written == [] and early.initialize is None and early.pending == [b"not json"]
    assert json.loads(early.frames.next())["method"] == "initialize"


class TimedClient(RawClient):
    """A raw client that also notes when each message arrived, and reads the server's stderr."""

    def __init__(self, cwd: Path, *options: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen(
            [sys.executable, *options, "-m", "trainlint", "lsp"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._next_id = 100  # (above the ids the tests send raw)
        self.arrivals: dict[Any, float] = {}
        self.stderr: list[tuple[float, bytes]] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                if line in (b"\r\n", b"\n") and length is not None:
                    break
            message = json.loads(stream.read(length))
            if "method" not in message:
                self.arrivals.setdefault(message.get("id"), time.monotonic())
            self.messages.put(message)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append((time.monotonic(), line))


def lsp_diagnostics_of_the_cli(path: Path) -> list[dict[str, Any]]:
    """`trainlint check --format lsp FILE`'s diagnostics of the file."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "check", "--format", "lsp", "--no-cache", str(path)],
        capture_output=True, env=env, cwd=path.parent, timeout=TIMEOUT,
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    return json.loads(done.stdout).get(path.as_uri(), [])


def by_position(diagnostics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(diagnostics, key=lambda d: (d["range"]["start"]["line"], d["range"]["start"]["character"], d["code"]))


def test_initialize_is_answered_before_the_server_has_loaded_and_did_open_is_not_lost(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text(BAD)
    client = TimedClient(tmp_path, "-X", "importtime")
    try:
        # as editors do: `initialized` and `didOpen` right behind `initialize`, before its answer
        uri = path.as_uri()
        item = {"uri": uri, "languageId": "python", "version": 1, "text": BAD}
        client.send_raw(
            frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": VSCODE_LIKE}})
            + frame({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            + frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": item}})
        )
        reply = client.response(1)
        assert reply["result"]["capabilities"]["notebookDocumentSync"]
        found = client.diagnostics(uri, 1)
        assert by_position(found) == by_position(lsp_diagnostics_of_the_cli(path))
        # one answer to `initialize`, one publication of the file as opened, and the server answers
        assert client.alive_and_answering()
        # the answer came before the server's module (and lsprotocol's types under it) was imported
        deadline = time.monotonic() + TIMEOUT
        while not (loaded := [when for when, line in client.stderr if re.search(rb"\|\s*trainlint\.lsp\.server$", line.rstrip())]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.arrivals[1] < loaded[0]
        assert not [m for m in client.seen if m.get("id") == 1]
        assert not [m for m in client.seen if m.get("method") == "textDocument/publishDiagnostics"]
    finally:
        client.close()
    assert client.process.returncode == 0


def test_shutdown_and_exit_sent_before_the_server_has_loaded(tmp_path: Path):
    client = TimedClient(tmp_path)
    try:
        client.send_raw(
            frame(initialize_message({}))
            + frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
            + frame({"jsonrpc": "2.0", "method": "exit"})
        )
        assert "result" in client.response(1)
        assert client.response(2).get("result", "missing") is None
        assert client.process.wait(timeout=TIMEOUT) == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()
            client.process.wait()


LOOP = "import torch\nfrom engine import fit_batch\n\nfor batch in loader:\n    fit_batch(model, opt, batch)\n    torch.cuda.synchronize()\n"
ENGINE = "def fit_batch(model, opt, batch):\n    model(batch).mean().backward()\n    opt.step()\n    opt.zero_grad()\n"


def large_project(folder: Path) -> Path:
    """A loop that is a training loop through the module it imports, a module larger than a file
    just opened waits for (`analysis.ALONE_FIRST_BYTES`: a long comment makes it so)."""
    from trainlint.lsp.analysis import ALONE_FIRST_BYTES

    (folder / "pyproject.toml").write_text("[tool.trainlint]\n")
    filler = "# the optimizer's step, then backward\n" * (ALONE_FIRST_BYTES // 38 + 1)
    (folder / "engine.py").write_text(ENGINE + filler)
    path = folder / "train.py"
    path.write_text(LOOP)
    return path


def test_a_file_alone_knows_nothing_of_the_modules_it_imports(tmp_path: Path):
    from trainlint.config import Settings
    from trainlint.engine.lint import lint_alone, lint_python
    from trainlint.project.index import Project

    path = large_project(tmp_path)
    assert "TL402" not in {d.code for d in lint_alone(LOOP, str(path), Settings()).diagnostics}
    assert "TL402" in {d.code for d in lint_python(LOOP, str(path), Settings()).diagnostics}
    project = Project()
    assert project.unsummarised(str(path), LOOP) == (tmp_path / "engine.py").stat().st_size
    project.summary(tmp_path / "engine.py")
    assert project.unsummarised(str(path), LOOP) == 0


def test_a_file_opened_in_a_large_project_is_shown_alone_first_then_as_the_command_line_sees_it(tmp_path: Path):
    path = large_project(tmp_path)
    client = TimedClient(tmp_path)
    try:
        uri = path.as_uri()
        item = {"uri": uri, "languageId": "python", "version": 1, "text": LOOP}
        client.send_raw(
            frame(initialize_message({}, rootUri=tmp_path.as_uri()))
            + frame({"jsonrpc": "2.0", "method": "initialized", "params": {}})
            + frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": item}})
        )
        assert "result" in client.response(1)
        first = client.diagnostics(uri, 1)
        final = client.diagnostics(uri, 1)
        assert "TL402" not in {d["code"] for d in first}
        assert by_position(final) == by_position(lsp_diagnostics_of_the_cli(path))
        assert "TL402" in {d["code"] for d in final}
        assert client.alive_and_answering()
        assert not [m for m in client.seen if m.get("method") == "textDocument/publishDiagnostics"]
        # edits are linted in full at once: the summaries are there now
        change = {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": LOOP + "#"}]}
        client.notify("textDocument/didChange", change)
        assert by_position(client.diagnostics(uri, 2)) == by_position(final)
    finally:
        client.close()


@pytest.mark.parametrize("hover", [{"contentFormat": ["markdown"]}, {"contentFormat": [5]}], ids=["valid", "invalid deeper down"])
def test_the_server_takes_in_the_answered_initialize_without_answering_it_again(hover: dict[str, Any]):
    from trainlint.lsp.initialize import initialize_result
    from trainlint.lsp.server import build_server

    written: list[bytes] = []

    class Capture:
        def write(self, data: bytes) -> None:
            written.append(data)

        def close(self) -> None:
            pass

    server = build_server()
    server.protocol.set_writer(Capture())
    message = initialize_message(
        {"textDocument": {"hover": hover}, "notebookDocument": {"synchronization": {}}},
        initializationOptions={"ignore": ["TL302"]}, workspaceFolders=[{"uri": "file:///project", "name": "project"}],
    )
    server.protocol.adopt_initialize(message, initialize_result(message["params"]))
    assert written == []  # (no second answer, and none in error)
    # the state pygls sets from `initialize`: the workspace, the client's capabilities, the editor's settings
    assert server.workspace.root_uri == "file:///project" and "file:///project" in server.workspace.folders
    assert server.options.ignore == ("TL302",)
    assert server.protocol.client_capabilities.notebook_document is not None or hover["contentFormat"] == [5]


def test_the_workers_analysis_does_not_load_the_protocols_types():
    # lsprotocol's types are seconds of the fork server's start-up, which the first lint waits for
    script = "import sys, trainlint.lsp.analysis; print([m for m in sys.modules if m.split('.')[0] in ('pygls', 'lsprotocol', 'cattrs')])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env, timeout=TIMEOUT, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_a_file_published_before_the_server_loaded_is_its_state_before_the_next_message():
    # a hover sent as soon as the early diagnostics arrive may reach the server right behind the
    # `didOpen` it replays: it finds the findings published
    from trainlint.config import Settings
    from trainlint.lsp.analysis import lint_buffer
    from trainlint.lsp.early import EarlyStart
    from trainlint.lsp.initialize import initialize_result
    from trainlint.lsp.server import build_server

    uri, name = "file:///project/train.py", "/project/train.py"
    message = initialize_message({})
    opened = {"jsonrpc": "2.0", "method": "textDocument/didOpen",
              "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": BAD}}}
    hover = {"jsonrpc": "2.0", "id": 7, "method": "textDocument/hover",
             "params": {"textDocument": {"uri": uri}, "position": {"line": 9, "character": 12}}}
    server = build_server()
    early = EarlyStart(
        io.BytesIO(), contained=server.contained, initialize=message, answer=initialize_result(message["params"]),
        pending=[json.dumps(m).encode() for m in ({"jsonrpc": "2.0", "method": "initialized", "params": {}}, opened, hover)] + [None],
        linted={uri: (1, BAD, lint_buffer(BAD, name, Settings()))},
    )
    out = io.BytesIO()
    out.close = lambda: None  # type: ignore[method-assign]  (read after the server ends)
    assert server.start_io(stdin=io.BytesIO(), stdout=out, early=early) == 0
    replies = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in out.getvalue().split(b"Content-Length")[1:]]
    (answer,) = [r for r in replies if r.get("id") == 7]
    assert answer["result"]["contents"]["value"].startswith("**TL302 ")
    assert not [r for r in replies if r.get("id") == 1 or r.get("method") == "textDocument/publishDiagnostics"]


EARLY_ONLY = """
import io, json, sys
from trainlint.lsp.framing import FrameReader, Inbox
from trainlint.lsp.launch import start
out = []
early = start(Inbox(FrameReader(io.BytesIO(sys.stdin.buffer.read()).read)), out.append, lambda: False)
early.contained.close()
print(json.dumps({"written": [w.decode() for w in out], "libcst": "libcst" in sys.modules}))
"""


def _early_publications(folder: Path, path: Path, text: str, cache: Path) -> tuple[list[list[dict[str, Any]]], bool]:
    """The diagnostics the early server publishes for `path` opened with `text` (run in a fresh
    interpreter with the result cache `cache`), and whether that interpreter loaded libcst."""
    item = {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": text}
    sent = (
        frame(initialize_message({}, rootUri=folder.as_uri()))
        + frame({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        + frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": item}})
    )
    env = {**os.environ, "TRAINLINT_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", EARLY_ONLY], input=sent, capture_output=True, env=env, timeout=TIMEOUT, cwd=folder)
    assert done.returncode == 0, done.stderr.decode()
    found = json.loads(done.stdout)
    published = [json.loads(w.split("\r\n\r\n")[1])["params"]["diagnostics"] for w in found["written"][1:]]
    return published, found["libcst"]


def _check_into(folder: Path, cache: Path) -> None:
    """`trainlint check .` in `folder` (files named relative to it), results kept in `cache`."""
    env = {**os.environ, "TRAINLINT_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "trainlint", "check", ".", "--exit-zero", "-q"], capture_output=True, env=env, cwd=folder, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr.decode()


def test_a_file_opened_as_check_left_it_shows_checks_findings_from_the_cache_at_once(tmp_path: Path):
    # `trainlint check .` named the file `train.py`; the editor opens it by its full path: the
    # cached result is published once, complete (TL402 needs the imported module's summary, which
    # the file alone lacks), without the analysis (libcst never loaded in the front process)
    folder = tmp_path / "project"
    folder.mkdir()
    path = large_project(folder)
    _check_into(folder, tmp_path / "cache")
    published, parsed = _early_publications(folder, path, LOOP, tmp_path / "cache")
    assert [by_position(p) for p in published] == [by_position(lsp_diagnostics_of_the_cli(path))]
    assert "TL402" in {d["code"] for d in published[0]}
    assert not parsed


def test_a_cached_result_is_not_used_once_a_module_it_read_changed_or_the_buffer_differs(tmp_path: Path):
    folder = tmp_path / "project"
    folder.mkdir()
    path = large_project(folder)
    _check_into(folder, tmp_path / "cache")
    # a buffer edited before saving: analysed (alone first, as a file just opened in a large project)
    published, parsed = _early_publications(folder, path, LOOP + "# edited\n", tmp_path / "cache")
    assert len(published) == 2 and "TL402" not in {d["code"] for d in published[0]}
    # the imported module changed since (it trains no more): the cached result no longer holds
    engine = folder / "engine.py"
    engine.write_text(engine.read_text().replace(ENGINE, "def fit_batch(model, opt, batch):\n    return model(batch)\n", 1))
    published, parsed = _early_publications(folder, path, LOOP, tmp_path / "cache")
    assert "TL402" not in {d["code"] for d in published[-1]}
    assert by_position(published[-1]) == by_position(lsp_diagnostics_of_the_cli(path))


def test_a_buffer_equal_to_its_file_keeps_its_result_and_an_edited_one_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from trainlint.config import Settings
    from trainlint.lsp import cached_results
    from trainlint.lsp.analysis import lint_buffer

    folder = tmp_path / "project"
    folder.mkdir()
    path = folder / "train.py"
    path.write_text(BAD)
    monkeypatch.setenv("TRAINLINT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cached_results, "_CACHE", [])
    edited = BAD + "# edited\n"
    lint_buffer(edited, str(path), Settings())
    assert cached_results.cached_result(edited, str(path), Settings()) is None
    found = lint_buffer(BAD, str(path), Settings())
    kept = cached_results.cached_result(BAD, str(path), Settings())
    assert kept is not None and [d.code for d in kept.diagnostics] == [d.code for d in found.diagnostics]
