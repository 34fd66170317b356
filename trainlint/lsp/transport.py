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
import threading
from typing import Any, BinaryIO, Sequence

from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.protocol import JsonRPCProtocol

from trainlint.lsp.framing import (  # noqa: F401  (MAX_*: the transport's limits, named here too)
    INVALID_REQUEST, MAX_HEADER_BYTES, MAX_MESSAGE_BYTES, PARSE_ERROR, FrameReader, Inbox, Malformed, error_reply, stdin_frames,
)

logger = logging.getLogger(__name__)


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


async def serve(
    protocol: JsonRPCProtocol,
    stop: threading.Event,
    stdin: BinaryIO,
    frames: FrameReader | Inbox | None = None,
    pending: Sequence[bytes | Malformed | None] = (),
) -> None:
    """Read messages on a daemon thread (it cannot hold up exit) and dispatch them on the loop:
    `pending` first (what `launch.py` read before the server was loaded), then the rest of `frames`
    (by default, a reader of `stdin`)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | Malformed | None] = asyncio.Queue()
    for item in pending:
        queue.put_nowait(item)
    reader = frames if frames is not None else stdin_frames(stdin)

    def pump() -> None:
        while True:
            try:
                item = reader.next()
            except (OSError, ValueError):
                item = None
            loop.call_soon_threadsafe(queue.put_nowait, item)
            if item is None:
                return

    if None not in pending:  # (the stream has not ended already)
        threading.Thread(target=pump, name="trainlint-lsp-reader", daemon=True).start()
    while not stop.is_set():
        item = await queue.get()
        if item is None:
            return
        if isinstance(item, Malformed):
            logger.warning("skipped malformed input: %s", item.reason)
            continue
        dispatch(protocol, item)
