"""The language server under hostile input, driven by a raw JSON-RPC client over stdio.

Every wait is bounded: a server that stops answering fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.test_lsp_server import BAD

TIMEOUT = 30.0


class RawClient:
    """Speaks JSON-RPC to `trainlint lsp` byte by byte, so that it can also send broken frames."""

    def __init__(self, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trainlint", "lsp"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

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
            self.messages.put(json.loads(stream.read(length)))

    def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.send_raw(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = TIMEOUT) -> dict[str, Any]:
        for message in self.seen:
            if predicate(message):
                self.seen.remove(message)
                return message
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if predicate(message):
                return message
            self.seen.append(message)
        raise AssertionError(f"no such message within {timeout} s; server alive: {self.process.poll() is None}")

    def response(self, msg_id: Any) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m)

    def call(self, method: str, params: Any) -> dict[str, Any]:
        return self.response(self.request(method, params))

    def diagnostics(self, uri: str, version: int | None = None) -> list[dict[str, Any]]:
        message = self.wait_for(
            lambda m: m.get("method") == "textDocument/publishDiagnostics"
            and m["params"]["uri"] == uri
            and (version is None or m["params"].get("version") == version)
        )
        return message["params"]["diagnostics"]

    def open(self, path: Path, text: str, version: int = 1) -> str:
        uri = path.as_uri()
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}})
        return uri

    def alive_and_answering(self) -> bool:
        reply = self.call("textDocument/hover", {"textDocument": {"uri": "file:///nowhere.py"}, "position": {"line": 0, "character": 0}})
        return self.process.poll() is None and reply.get("result") is None and "error" not in reply

    def close(self) -> None:
        try:
            self.call("shutdown", None)
            self.notify("exit", None)
            self.process.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def server(tmp_path: Path):
    client = RawClient(tmp_path)
    reply = client.call("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
    assert "capabilities" in reply["result"]
    client.notify("initialized", {})
    yield client
    client.close()


def test_broken_framing_is_skipped_and_the_server_resynchronises(server: RawClient):
    server.send_raw(b"this is not a header\r\n\r\n")  # a header block without a length
    server.send_raw(b"Content-Length: 7\r\n\r\nnot json")  # not JSON (and one byte too long)
    parse_error = server.response(None)
    assert parse_error["error"]["code"] == -32700
    assert server.alive_and_answering()
    # a body shorter than its length: the next message's header shows up inside it
    server.send_raw(b'Content-Length: 400\r\n\r\n{"jsonrpc": "2.0", "id": 77, "meth')
    assert server.alive_and_answering()
    # a length no server should allocate: dropped unread, and the next message is answered
    server.send_raw(b"Content-Length: 99999999999\r\n\r\n" + b"x" * 100_000)
    assert server.alive_and_answering()
    server.send_raw(b"Content-Length: 99999999999\r\n\r\n")
    assert server.alive_and_answering()


def test_requests_that_cannot_be_handled_get_json_rpc_errors(server: RawClient, tmp_path: Path):
    uri = server.open(tmp_path / "train.py", BAD)
    assert [d["code"] for d in server.diagnostics(uri)] == ["TL302"]
    invalid = server.call("textDocument/hover", {"textDocument": 5, "position": {"line": -1, "character": "x"}})
    assert invalid["error"]["code"] == -32602
    missing = server.call("textDocument/codeAction", None)
    assert missing["error"]["code"] in (-32602, -32603)
    unknown = server.call("trainlint/noSuchMethod", {})
    assert unknown["error"]["code"] == -32601
    server.send({"jsonrpc": "2.0", "id": {"an": "object"}, "method": "textDocument/hover", "params": {}})
    assert server.response(None)["error"]["code"] == -32600
    server.send([1, 2, 3])  # valid JSON, not a message
    assert server.response(None)["error"]["code"] == -32600
    assert server.alive_and_answering()


def test_unknown_documents_and_out_of_range_positions(server: RawClient, tmp_path: Path):
    nowhere = (tmp_path / "never_opened.py").as_uri()
    far = {"line": 10**6, "character": 10**6}
    assert server.call("textDocument/codeAction", {
        "textDocument": {"uri": nowhere}, "range": {"start": far, "end": far}, "context": {"diagnostics": []},
    })["result"] == []
    server.notify("textDocument/didChange", {"textDocument": {"uri": nowhere, "version": 2}, "contentChanges": [{"text": "x"}]})
    server.notify("textDocument/didClose", {"textDocument": {"uri": nowhere}})
    uri = server.open(tmp_path / "train.py", BAD)
    server.diagnostics(uri)
    hover = server.call("textDocument/hover", {"textDocument": {"uri": uri}, "position": far})
    assert hover["result"] is None
    actions = server.call("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": {"start": far, "end": far}, "context": {"diagnostics": [], "only": ["quickfix"]},
    })
    assert actions["result"] == []
    assert server.alive_and_answering()


def test_buffers_that_crash_the_parser_get_a_diagnostic_not_a_dead_server(server: RawClient, tmp_path: Path):
    # 1,500 nested parentheses: refused before any parser sees them
    nested = "import torch\nloss.backward()\nx = " + "(" * 1500 + "1" + ")" * 1500 + "\n"
    uri = server.open(tmp_path / "nested.py", nested)
    (finding,) = server.diagnostics(uri)
    assert finding["code"] == "TL000" and "nested more than 100 deep" in finding["message"]
    # 10,000 chained `and`s: valid Python that overflows libcst's native parser; the engine's
    # pre-check refuses it (its line is over max-line-length, and the chain over max-chain), and
    # were it let through, the child would die instead
    chain = "import torch\nloss.backward()\nok = " + " and ".join(f"a{i}" for i in range(10_000)) + "\n"
    uri = server.open(tmp_path / "chain.py", chain)
    (finding,) = server.diagnostics(uri)
    assert finding["code"] == "TL000" and (
        "the parser crashed (SIGSEGV)" in finding["message"] or "max-line-length" in finding["message"]
    )
    # the next buffer is linted as usual
    uri = server.open(tmp_path / "train.py", BAD)
    assert [d["code"] for d in server.diagnostics(uri)] == ["TL302"]
    assert server.alive_and_answering()


def test_lone_surrogate_still_gets_diagnostics(server: RawClient, tmp_path: Path):
    text = BAD.replace("history = []", "history = []  # \ud800 stray half of a pair")
    body = json.dumps({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": (tmp_path / "train.py").as_uri(), "languageId": "python", "version": 1, "text": text}}})
    assert "\\ud800" in body
    server.send_raw(b"Content-Length: %d\r\n\r\n%s" % (len(body), body.encode()))
    found = server.diagnostics((tmp_path / "train.py").as_uri())
    assert [(d["code"], d["range"]["start"]["line"]) for d in found] == [("TL302", 9)]


def test_max_file_size_applies_to_buffers(server: RawClient, tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-file-size = 2000\n")
    big = BAD + "\n".join(f"step_{i} = {i}" for i in range(400)) + "\n"
    uri = server.open(tmp_path / "big.py", big)
    (finding,) = server.diagnostics(uri)
    assert finding["code"] == "TL000" and "max-file-size 2000" in finding["message"]
    # a 12 MB buffer under the default limit (5 MB) is refused at once, and the server goes on
    huge = BAD + "x = 1\n" * 2_000_000
    uri = server.open(tmp_path / "other" / "huge.py", huge)
    (finding,) = server.diagnostics(uri)
    assert "buffer too large to lint" in finding["message"]
    assert server.alive_and_answering()


def test_a_burst_of_edits_ends_with_the_last_texts_diagnostics(server: RawClient, tmp_path: Path):
    uri = server.open(tmp_path / "train.py", BAD)
    server.diagnostics(uri, 1)
    for version in range(2, 302):
        text = BAD if version % 2 else BAD.replace("history.append(loss)", "history.append(loss.item())")
        server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]})
        if version % 50 == 0:
            assert server.alive_and_answering()
    assert server.diagnostics(uri, 301) != []  # version 301 is the odd one: BAD
    assert server.alive_and_answering()


def read_proc(path: Path) -> str:
    """A /proc file's text ("" once its thread or process is gone); NULs as spaces."""
    try:
        return path.read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    """The live processes under `pid` (children, their children, ...), from /proc."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            for child in read_proc(task).split():
                found.append(int(child))
                todo.append(int(child))
    return found


def test_the_worker_starts_with_the_session_and_has_the_parser_loaded(tmp_path: Path):
    client = RawClient(tmp_path)
    try:
        client.call("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
        client.notify("initialized", {})
        if not Path(f"/proc/{client.process.pid}/task/{client.process.pid}/children").exists():
            pytest.skip("no /proc children lists on this system")
        deadline = time.monotonic() + TIMEOUT
        warm: list[int] = []
        while time.monotonic() < deadline and not warm:
            time.sleep(0.2)
            warm = [pid for pid in descendants(client.process.pid) if "libcst" in read_proc(Path(f"/proc/{pid}/maps"))]
        # before any document opens: a live child process with libcst's parser loaded
        assert warm and descendants(client.process.pid), descendants(client.process.pid)
    finally:
        client.close()


def _hover_frame(msg_id: int) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/hover",
                       "params": {"textDocument": {"uri": "file:///nowhere.py"}, "position": {"line": 0, "character": 0}}}).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def test_the_message_after_a_body_shorter_than_its_length_is_kept_when_both_arrive_together(server: RawClient):
    """A cut-off body declaring 60 bytes and the next request, in one write: the reader took the
    first 60 bytes of both as the body and lost the request."""
    server.send_raw(b'Content-Length: 60\r\n\r\n{"jsonrpc": "2.0", "id": 77, "meth' + _hover_frame(5))
    assert server.response(5) == {"jsonrpc": "2.0", "id": 5, "result": None}
    assert server.alive_and_answering()


def test_requests_after_shutdown_are_invalid_and_exit_reports_whether_shutdown_came_first(tmp_path: Path):
    client = RawClient(tmp_path)
    try:
        client.call("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
        client.notify("initialized", {})
        assert client.call("shutdown", None)["result"] is None
        after = client.call("textDocument/hover", {"textDocument": {"uri": "file:///nowhere.py"}, "position": {"line": 0, "character": 0}})
        assert after["error"]["code"] == -32600  # InvalidRequest, as the specification asks
        client.notify("exit", None)
        assert client.process.wait(timeout=TIMEOUT) == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()
    abrupt = RawClient(tmp_path)
    try:
        abrupt.call("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
        abrupt.notify("exit", None)  # no shutdown first
        assert abrupt.process.wait(timeout=TIMEOUT) == 1
    finally:
        if abrupt.process.poll() is None:
            abrupt.process.kill()
