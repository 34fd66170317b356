"""Run the parser where its failures cannot reach the language server: one child process.

libcst's native parser can segfault, and any parse can hang or grow without bound; inside the
server process that would take the editor's diagnostics down until it is restarted. The server
sends each lint to a long-lived child (`python -m trainlint.lsp.contained`) over a pipe, framed as
an 8-byte length and a pickle, and waits with a time limit. A child that dies, overruns the time
limit or runs out of its memory cap is replaced, and the caller gets a `ContainedFailure` saying
which, to publish as a diagnostic.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO, Callable

DEFAULT_TIMEOUT_S = 20.0
DEFAULT_MEMORY_MB = 2048
_HEADER = struct.Struct("!Q")


class ContainedFailure(Exception):
    """The child could not answer: it crashed, ran too long, or ran out of memory."""


class ContainedProcess:
    """Calls functions in a child process, one at a time, restarting the child after a failure."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in the child; raises ContainedFailure when the child cannot answer.

        `function` must be importable by name (a module-level function), and its arguments and
        result picklable.
        """
        with self._lock:
            child = self._ensure_child()
            payload = pickle.dumps((function, args), protocol=pickle.HIGHEST_PROTOCOL)
            try:
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write(_HEADER.pack(len(payload)) + payload)
                child.stdin.flush()
                deadline = time.monotonic() + self.timeout_s
                (size,) = _HEADER.unpack(_read_exactly(child.stdout, _HEADER.size, deadline))
                status, value = pickle.loads(_read_exactly(child.stdout, size, deadline))
            except TimeoutError:
                self._stop_child()
                raise ContainedFailure(f"the parser took longer than {self.timeout_s:g} s") from None
            except (OSError, EOFError, pickle.UnpicklingError, struct.error):
                raise ContainedFailure(self._death_reason()) from None
            if status == "ok":
                return value
            if status == "memory":
                self._stop_child()  # a MemoryError can leave the child's heap in a bad state
                raise ContainedFailure(f"the parser needed more than {self.memory_mb} MB")
            raise ContainedFailure(f"the analysis failed: {value}")

    def close(self) -> None:
        """End the child (the server is shutting down); a call waiting on it fails at once."""
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()  # without the lock: a call in progress holds it for up to its time limit
            child.wait()

    def _ensure_child(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "trainlint.lsp.contained", str(self.memory_mb)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self._child

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()

    def _death_reason(self) -> str:
        child, self._child = self._child, None
        code = None
        if child is not None:
            try:
                code = child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the parser crashed ({name})"
        return f"the parser process ended unexpectedly (exit status {code})"


def _read_exactly(stream: BinaryIO, size: int, deadline: float) -> bytes:
    """`size` bytes from a pipe, or TimeoutError once `deadline` passes, or EOFError at its end."""
    chunks = []
    fd = stream.fileno()
    while size:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _serve(memory_mb: int) -> None:
    """The child's loop: read a call, run it, write its outcome; end when the server closes the pipe."""
    try:
        import resource

        cap = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ImportError, ValueError, OSError):
        pass  # no cap on this platform: time limits and crash containment still hold
    requests = os.fdopen(os.dup(0), "rb")  # buffered: read(n) returns n bytes unless the pipe ends
    replies = os.fdopen(os.dup(1), "wb")
    sys.stdout = sys.stderr  # nothing a rule prints may corrupt the replies
    while True:
        header = requests.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        body = requests.read(size)
        if len(body) < size:
            return
        try:
            function, args = pickle.loads(body)
            outcome: tuple[str, Any] = ("ok", function(*args))
        except MemoryError:
            outcome = ("memory", None)
        except BaseException as exc:  # every failure goes back as a message
            outcome = ("error", f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        except MemoryError:
            data = pickle.dumps(("memory", None))
        except Exception as exc:  # an unpicklable result
            data = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
        replies.write(_HEADER.pack(len(data)) + data)
        replies.flush()


if __name__ == "__main__":
    _serve(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MEMORY_MB)
