"""How soon an editor shows trainlint's diagnostics: first-diagnostic and per-keystroke latency of
`trainlint lsp`, measured over stdio as an editor sees them.

    python benchmarks/lsp_latency.py [--runs N] [--keystrokes K] [--file FILE] [--project]

- first diagnostic: a fresh server is started, `initialize` and `initialized` are exchanged, and
  `didOpen` of a ~300-line training script is sent at once (as Neovim and VS Code do); the clock runs
  from `didOpen` sent to its `publishDiagnostics` received. Median (and range) over N fresh servers.
  The time from starting the process to the `initialize` answer is shown beside it, and from
  starting the process to the first diagnostic (what an editor opening a file shows first).
- keystroke: in each of those servers, K single-character edits (`didChange`, each after a pause, as
  a typist's), clocked from `didChange` sent to the diagnostics of that version.
- `--project`: the same file inside a generated 200-module project that it imports from, with the
  project's summaries cached by one run beforehand.
- `--in-place FILE`: FILE of a real project opened where it is (the server's folder is the project's):
  first each server with an empty cache, then with the cache one `trainlint check` of the project filled.

The server is this checkout's (`python -m trainlint lsp`), with a cache folder of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "fixtures" / "scripts"
DEFAULT_FILES = ("nanogpt_style.py", "mingpt_style.py")  # 300 lines together
PAUSE_S = 0.6  # between keystrokes: longer than the server's debounce, so each is measured alone


class Client:
    """A minimal LSP client over a server's stdio: requests, notifications and the arrival time of
    every message the server sends."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
        )
        self.messages: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
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
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if length is None:
                continue
            body = json.loads(stream.read(length))
            self.messages.put((time.perf_counter(), body))

    def send(self, message: dict[str, Any]) -> float:
        """Send one message; the time it was written."""
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.process.stdin.flush()
        return time.perf_counter()

    def request(self, method: str, params: Any) -> tuple[float, Any]:
        """Send a request and wait for its answer; (arrival time, result)."""
        self._next_id += 1
        ident = self._next_id
        self.send({"id": ident, "method": method, "params": params})
        arrived, message = self.wait(lambda m: m.get("id") == ident and "method" not in m)
        return arrived, message.get("result")

    def wait(self, wanted: Any, timeout: float = 60.0) -> tuple[float, dict[str, Any]]:
        """The next message that `wanted(message)` accepts (answering the server's own requests)."""
        deadline = time.perf_counter() + timeout
        while True:
            arrived, message = self.messages.get(timeout=max(0.0, deadline - time.perf_counter()))
            if "method" in message and "id" in message:  # e.g. client/registerCapability
                self.send({"id": message["id"], "result": None})
            if wanted(message):
                return arrived, message

    def diagnostics(self, uri: str, version: int) -> tuple[float, list[Any]]:
        """When the diagnostics of `uri` at `version` arrived, and what they were."""
        arrived, message = self.wait(
            lambda m: m.get("method") == "textDocument/publishDiagnostics"
            and m["params"]["uri"] == uri
            and m["params"].get("version") == version
        )
        return arrived, message["params"]["diagnostics"]

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.send({"method": "exit"})
            self.process.wait(timeout=10)
        except (OSError, queue.Empty, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def training_script(files: list[Path]) -> str:
    return "\n".join(p.read_text() for p in files)


def make_project(folder: Path, script: str, modules: int = 200) -> Path:
    """A project of `modules` modules in a package that the training script imports from; the
    script's path."""
    package = folder / "proj"
    package.mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[tool.trainlint]\n")
    (package / "__init__.py").write_text("")
    for i in range(modules):
        (package / f"mod{i:03d}.py").write_text(
            "import torch\nfrom torch import nn\n\n\n"
            f"class Block{i}(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
            "        self.fc = nn.Linear(d, d)\n\n    def forward(self, x):\n        return torch.relu(self.fc(x))\n\n\n"
            f"def helper{i}(loss, history):\n    history.append(loss.detach())\n    return loss\n"
        )
    imports = "".join(f"from proj.mod{i:03d} import Block{i}, helper{i}\n" for i in range(0, modules, 20))
    path = folder / "train.py"
    path.write_text(imports + script)
    return path


def one_server(path: Path, text: str, keystrokes: int, env: dict[str, str], cwd: Path) -> tuple[float, float, float, list[float], int]:
    """(process start to `initialize` answered, didOpen to diagnostics, process start to diagnostics,
    keystroke latencies, findings)."""
    client = Client([sys.executable, "-m", "trainlint", "lsp"], env, cwd)
    try:
        answered, _ = client.request(
            "initialize", {"processId": os.getpid(), "rootUri": cwd.as_uri(), "capabilities": {}}
        )
        client.send({"method": "initialized", "params": {}})
        uri = path.as_uri()
        item = {"uri": uri, "languageId": "python", "version": 1, "text": text}
        opened = client.send({"method": "textDocument/didOpen", "params": {"textDocument": item}})
        arrived_first, found = client.diagnostics(uri, 1)
        first = arrived_first - opened
        typed = []
        lines = text.split("\n")
        for version in range(2, keystrokes + 2):
            time.sleep(PAUSE_S)
            # one more character of a comment on the last line, as typing does
            lines[-1] = lines[-1] + ("#" if version == 2 else "x")
            change = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": "\n".join(lines)}]}
            sent = client.send({"method": "textDocument/didChange", "params": change})
            arrived, _ = client.diagnostics(uri, version)
            typed.append(arrived - sent)
        return answered - client.started, first, arrived_first - client.started, typed, len(found)
    finally:
        client.close()


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:6.0f} ms  (min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f}, n={len(values)})"


def measure(label: str, path: Path, text: str, runs: int, keystrokes: int, cwd: Path, cache: Path, fresh: bool = False) -> None:
    """Time `runs` fresh servers on the buffer; with `fresh`, each with an empty cache folder of its own."""
    starts, firsts, spawned, typed = [], [], [], []
    findings = 0
    for run in range(runs):
        folder = cache / f"run{run}" if fresh else cache
        env = {**os.environ, "TRAINLINT_CACHE_DIR": str(folder), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        start, first, whole, keys, findings = one_server(path, text, keystrokes, env, cwd)
        starts.append(start)
        firsts.append(first)
        spawned.append(whole)
        typed.extend(keys)
    print(f"{label}: {text.count(chr(10)) + 1} lines, {findings} findings")
    print(f"  start to initialize answered: {summary(starts)}")
    print(f"  first diagnostic (didOpen):   {summary(firsts)}")
    print(f"  start to first diagnostic:    {summary(spawned)}")
    if typed:
        print(f"  keystroke (didChange):        {summary(typed)}")


def project_root(path: Path) -> Path:
    """The nearest folder above `path` with a project marker (the folder an editor opens)."""
    for folder in path.parents:
        if any((folder / marker).exists() for marker in (".git", "pyproject.toml", "setup.py", "setup.cfg")):
            return folder
    return path.parent


def in_place(path: Path, runs: int, keystrokes: int) -> None:
    """A file of a real project opened where it is, as an editor opens it: each server with an empty
    cache, then with the cache one `trainlint check` of the project filled."""
    root = project_root(path)
    lines = sum(p.read_bytes().count(b"\n") for p in root.rglob("*.py") if p.is_file())
    work = Path(tempfile.mkdtemp(prefix="trainlint-lsp-latency-"))
    try:
        text = path.read_text()
        measure(f"{path.relative_to(root)} in {root.name} ({lines} lines), empty cache", path, text, runs, keystrokes, root, work, fresh=True)
        env = {**os.environ, "TRAINLINT_CACHE_DIR": str(work / "warm"), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        subprocess.run([sys.executable, "-m", "trainlint", str(root), "--exit-zero", "-q"], env=env, cwd=root, check=False, stdout=subprocess.DEVNULL)
        measure(f"{path.relative_to(root)} in {root.name}, warm cache", path, text, runs, keystrokes, root, work / "warm")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh servers (default 5)")
    parser.add_argument("--keystrokes", type=int, default=6, help="edits timed per server (default 6)")
    parser.add_argument("--file", type=Path, action="append", help="the buffer (default: two fixtures, 300 lines)")
    parser.add_argument("--project", action="store_true", help="also time the file inside a 200-module project")
    parser.add_argument("--in-place", type=Path, action="append", default=[], help="a file of a real project, opened where it is: empty cache, then warm")
    args = parser.parse_args()
    if args.in_place:
        for path in args.in_place:
            in_place(path.resolve(), args.runs, args.keystrokes)
        return
    text = training_script(args.file or [SCRIPTS / name for name in DEFAULT_FILES])
    work = Path(tempfile.mkdtemp(prefix="trainlint-lsp-latency-"))
    try:
        alone = work / "alone"
        alone.mkdir()
        path = alone / "train.py"
        path.write_text(text)
        measure("standalone script", path, text, args.runs, args.keystrokes, alone, work / "cache")
        if args.project:
            project = work / "project"
            script = make_project(project, text)
            env = {**os.environ, "TRAINLINT_CACHE_DIR": str(work / "cache")}
            # one run of the command line caches the project's summaries
            subprocess.run([sys.executable, "-m", "trainlint", str(project), "--exit-zero", "-q"], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            measure("in a 200-module project", script, script.read_text(), args.runs, args.keystrokes, project, work / "cache")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
