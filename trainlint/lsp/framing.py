"""Cutting the server's input into messages, bounded and resynchronising (see `transport.py`).

Apart from pygls (this module imports nothing heavy), so that `launch.py` can read the editor's
`initialize` and answer it while pygls and lsprotocol are still importing.
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
from typing import Any, BinaryIO, Callable, Union

MAX_HEADER_BYTES = 8 * 1024
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 16
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
# the header line that starts a message; its raw line break cannot be part of a JSON body
_MESSAGE_START = re.compile(rb"Content-Length:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
_LENGTH = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)
_STRADDLE = 64  # bytes kept between reads, so that a header line cut in two is still found


class Malformed:
    """A stretch of the stream that is not a message (why, for the log)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


Item = Union[bytes, Malformed, None]  # a message's body, a stretch that was not one, the end of the input


class FrameReader:
    """Cuts a byte stream into message bodies, never holding more than a bounded amount of it."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self._buffer = bytearray()
        self._eof = False

    def _fill(self) -> bool:
        """Read more of the stream; False at its end."""
        if self._eof:
            return False
        chunk = self._read(_CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def _skip_to_next_message(self, start: int = 1) -> bool:
        """Drop everything before the next message's header (searched from `start`); False at the end."""
        while True:
            found = _MESSAGE_START.search(self._buffer, start)
            if found:
                del self._buffer[: found.start()]
                return True
            del self._buffer[: max(len(self._buffer) - _STRADDLE, 0)]
            start = 0
            if not self._fill():
                return False

    def next(self) -> bytes | Malformed | None:
        """The next body, a `Malformed` stretch that was skipped, or None at the end of the stream."""
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEADER_BYTES:
                    if not self._skip_to_next_message():
                        return None
                    return Malformed("header block too long")
                if not self._fill():
                    return None
                continue
            lengths = _LENGTH.findall(self._buffer, 0, end)
            del self._buffer[: end + 4]
            if not lengths:
                return Malformed("header block without Content-Length")
            length = int(lengths[-1])
            if length > MAX_MESSAGE_BYTES:
                if not self._skip_to_next_message(start=0):
                    return None
                return Malformed(f"message of {length} bytes is over the {MAX_MESSAGE_BYTES}-byte limit; dropped")
            return self._body(length)

    def _body(self, length: int) -> bytes | Malformed | None:
        scanned = 0
        while True:
            # a body shorter than declared: the next message's header turns up inside the window,
            # also when that message has already arrived in full
            found = _MESSAGE_START.search(self._buffer, scanned, length + _STRADDLE)
            if found and found.start() < length:
                del self._buffer[: found.start()]
                return Malformed("body shorter than its Content-Length")
            if len(self._buffer) >= length:
                break
            scanned = max(len(self._buffer) - _STRADDLE, 0)
            if not self._fill():
                return None
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return body


def error_reply(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def stdin_frames(stdin: BinaryIO) -> FrameReader:
    """A reader of the server's input: its raw descriptor where it has one (a daemon thread blocked
    in a buffered read would abort the interpreter's exit), else its own reads."""
    try:
        fd = stdin.fileno()
        return FrameReader(lambda size: os.read(fd, size))
    except (AttributeError, OSError, ValueError):
        return FrameReader(getattr(stdin, "read1", stdin.read))


class Inbox:
    """The server's input, read on one daemon thread from start to end (it cannot hold up exit):
    read here first, then by the server's transport (as its `frames`)."""

    def __init__(self, frames: FrameReader) -> None:
        self._frames = frames
        self._queue: queue.Queue[Item] = queue.Queue()
        threading.Thread(target=self._pump, name="trainlint-lsp-input", daemon=True).start()

    def _pump(self) -> None:
        while True:
            try:
                item = self._frames.next()
            except (OSError, ValueError):
                item = None
            self._queue.put(item)
            if item is None:
                return

    def get(self, timeout: float) -> Item:
        """The next item; raises queue.Empty after `timeout` seconds without one."""
        return self._queue.get(timeout=timeout)

    def next(self) -> Item:
        """The next item, waiting for it (`FrameReader.next`'s contract)."""
        return self._queue.get()


def parse(item: Item) -> Any:
    """A message's JSON; None for anything that is not (the server answers it with a parse error)."""
    if not isinstance(item, bytes):
        return None
    try:
        return json.loads(item)
    except (ValueError, RecursionError):
        return None
