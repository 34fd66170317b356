"""The server's stdio transport: bounded reads, resynchronisation after bad framing, error replies.

pygls's own loop trusts the client: it allocates whatever `Content-Length` says (99999999999 bytes
is a MemoryError that ends the server), and after one message framed wrongly it keeps misreading
the stream and never answers again; a request whose params do not validate gets no response. Here:

- headers and bodies are bounded (`MAX_HEADER_BYTES`, `MAX_MESSAGE_BYTES`); an oversized message
  is dropped without being read into memory;
- after bad framing (a header block without a length, a body shorter or longer than declared,
  garbage between messages) the reader skips to the next `Content-Length: N` line, which cannot
  occur inside a JSON body (a JSON string cannot hold a raw line break, and outside strings JSON
  has no such word);
- every request gets an answer: a body that is not JSON gets a parse error (-32700), a message that
  is not a request object or a request after `shutdown` an invalid-request error (-32600), params
  that do not validate an invalid-params error (-32602), a handler failure an internal error (-32603).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from typing import Any, BinaryIO, Callable

from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.protocol import JsonRPCProtocol

MAX_HEADER_BYTES = 8 * 1024
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 16
PARSE_ERROR, INVALID_REQUEST = -32700, -32600
# the header line that starts a message; its raw line break cannot be part of a JSON body
_MESSAGE_START = re.compile(rb"Content-Length:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
_LENGTH = re.compile(rb"Content-Length:[ \t]*(\d+)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)
_STRADDLE = 64  # bytes kept between reads, so that a header line cut in two is still found

logger = logging.getLogger(__name__)


class Malformed:
    """A stretch of the stream that is not a message (why, for the log)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


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


def _write(protocol: JsonRPCProtocol, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode("utf-8")
    if protocol.writer is not None:
        protocol.writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def dispatch(protocol: JsonRPCProtocol, body: bytes) -> None:
    """Hand one body to pygls; answer any request that cannot be handled with a JSON-RPC error."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        _write(protocol, error_reply(None, PARSE_ERROR, f"Parse error: {exc}"))
        return
    if not isinstance(data, dict) or "jsonrpc" not in data:
        _write(protocol, error_reply(None, INVALID_REQUEST, "Invalid Request: expected a JSON-RPC 2.0 object"))
        return
    msg_id = data.get("id")
    is_request = "method" in data and isinstance(msg_id, (int, str))
    if "id" in data and not isinstance(msg_id, (int, str, type(None))):
        _write(protocol, error_reply(None, INVALID_REQUEST, "Invalid Request: id must be a number or a string"))
        return
    if is_request and getattr(protocol, "_shutdown", False):
        # the specification: requests after `shutdown` are answered with InvalidRequest
        _write(protocol, error_reply(msg_id, INVALID_REQUEST, f"Invalid Request: the server is shut down: {data.get('method')}"))
        return
    try:
        message = protocol.structure_message(data)
        protocol.handle_message(message)
    except JsonRpcException as exc:
        if is_request:
            _write(protocol, error_reply(msg_id, exc.code, f"{exc.message}: {data.get('method')}"))
    except Exception as exc:  # a handler bug must not end the server
        logger.exception("cannot handle message")
        if is_request:
            _write(protocol, error_reply(msg_id, JsonRpcInternalError.CODE, f"Internal error: {exc}"))


async def serve(protocol: JsonRPCProtocol, stop: threading.Event, stdin: BinaryIO) -> None:
    """Read messages on a daemon thread (it cannot hold up exit) and dispatch them on the loop."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | Malformed | None] = asyncio.Queue()
    try:  # the raw descriptor: a daemon thread blocked in a buffered read would abort exit
        fd = stdin.fileno()
        frames = FrameReader(lambda size: os.read(fd, size))
    except (AttributeError, OSError, ValueError):
        frames = FrameReader(getattr(stdin, "read1", stdin.read))

    def pump() -> None:
        while True:
            try:
                item = frames.next()
            except (OSError, ValueError):
                item = None
            loop.call_soon_threadsafe(queue.put_nowait, item)
            if item is None:
                return

    threading.Thread(target=pump, name="trainlint-lsp-reader", daemon=True).start()
    while not stop.is_set():
        item = await queue.get()
        if item is None:
            return
        if isinstance(item, Malformed):
            logger.warning("skipped malformed input: %s", item.reason)
            continue
        dispatch(protocol, item)
