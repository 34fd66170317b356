"""The language server's start-up and typing: its contained worker is running, the analysis loaded,
before the editor opens a file; a burst of edits is linted once more, for the text the editor holds
last (benchmarks/lsp_latency.py measures how soon)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from tests.test_lsp_server import BAD, change_document, client, open_document, wait_for_diagnostics  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def frame(message: dict) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def descendants(pid: int, deep: bool = True) -> list[tuple[int, str]]:
    """(pid, command line) of every process under `pid` (its children only, unless `deep`; Linux's
    /proc)."""
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found  # (the process has ended)
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue  # (a thread that ended while the tree was read)
        for child in children:
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            found.append((int(child), cmdline))
            if deep:
                found.extend(descendants(int(child)))
    return found


def test_the_fork_server_started_early_is_the_one_the_server_uses():
    from trainlint.lsp.analysis import lint_buffer
    from trainlint.lsp.launch import PRELOAD

    assert PRELOAD == (lint_buffer.__module__,)  # else the fork server started early lacks what the worker runs


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the process tree from /proc (Linux)")
def test_worker_is_ready_before_the_first_buffer(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen(
        [sys.executable, "-m", "trainlint", "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
    )
    try:
        # only `initialize` (no document): the fork server, and the worker forked from it, start anyway
        init = {"processId": os.getpid(), "rootUri": tmp_path.as_uri(), "capabilities": {}}
        server.stdin.write(frame({"id": 1, "method": "initialize", "params": init}))
        server.stdin.flush()
        deadline = time.monotonic() + 60
        fork_servers: list[int] = []
        workers: list[int] = []
        while time.monotonic() < deadline:
            tree = descendants(server.pid)
            fork_servers = [pid for pid, cmdline in descendants(server.pid, deep=False) if "multiprocessing.forkserver" in cmdline]
            workers = [pid for fork_server in fork_servers for pid, _ in descendants(fork_server, deep=False)]
            # the worker has parsed (the warm-up): libcst's native parser is mapped into it
            if workers and "libcst/native" in Path(f"/proc/{workers[0]}/maps").read_text():
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"no warmed worker before the first buffer: {tree}")
        assert len(fork_servers) == 1 and len(workers) == 1
    finally:
        server.kill()
        server.wait()


async def test_a_burst_of_edits_publishes_the_last_text(client: LanguageClient, tmp_path: Path):  # noqa: F811
    uri = open_document(client, tmp_path / "train.py", BAD)
    await wait_for_diagnostics(client, uri, 1)
    fixed = BAD.replace("history.append(loss)", "history.append(loss.detach())")
    # ten keystrokes in a burst: the first is linted at once, the rest together when it ends, and a
    # result for a text already edited again is not published
    for version in range(2, 12):
        change_document(client, uri, fixed + "#" * version, version)
    published: list[int | None] = []
    while 11 not in published:
        params = await asyncio.wait_for(client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 20)
        if params.uri == uri:
            published.append(params.version)
            found = list(params.diagnostics)
    assert found == []
    assert published[-1] == 11 and len(published) <= 3, published
