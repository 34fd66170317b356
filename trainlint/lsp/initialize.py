"""The server's answer to `initialize`, known without pygls or lsprotocol.

Importing lsprotocol's types takes 1.5 s on a quiet machine (5 s and more on a loaded one), and an
editor waits for the `initialize` answer before it sends anything else. The answer depends only on
the features the server registers (fixed) and on two things the client says, so `launch.py` sends
it while pygls loads, and the server then takes the request in without answering it again
(`TrainlintProtocol.adopt_initialize`). `tests/test_lsp_early_start.py` holds this answer equal to
the one pygls computes (`ServerCapabilitiesBuilder`) for a range of clients.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from trainlint import __version__

SERVER_NAME = "trainlint"

# what pygls answers a client that says nothing of itself (`"capabilities": {}`); positions are
# always UTF-16 (`TrainlintProtocol.lsp_initialize`)
CAPABILITIES: dict[str, Any] = {
    "positionEncoding": "utf-16",
    "textDocumentSync": {"openClose": True, "change": 2, "save": True},  # 2: incremental
    "hoverProvider": True,
    "codeActionProvider": {"codeActionKinds": ["quickfix", "source.fixAll.trainlint"]},
    "executeCommandProvider": {"commands": []},
    "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}, "fileOperations": {}},
}
# offered to a client that declares notebook support (`server.NOTEBOOK_SYNC`)
NOTEBOOK_DOCUMENT_SYNC: dict[str, Any] = {"notebookSelector": [{"notebook": "*", "cells": [{"language": "python"}]}]}

_TRACE_VALUES = ("off", "messages", "verbose")


def initialize_result(params: dict[str, Any]) -> dict[str, Any]:
    """The `InitializeResult` pygls sends for these `initialize` params, as JSON."""
    capabilities = copy.deepcopy(CAPABILITIES)
    client = params.get("capabilities") or {}
    if client.get("notebookDocument") is not None:
        capabilities["notebookDocumentSync"] = copy.deepcopy(NOTEBOOK_DOCUMENT_SYNC)
    sync = (client.get("textDocument") or {}).get("synchronization") or {}
    for flag in ("willSave", "willSaveWaitUntil"):
        # pygls sends `client's flag and the server handles it`: absent stays absent, else false
        # (the server registers neither handler)
        if sync.get(flag) is not None:
            capabilities["textDocumentSync"][flag] = False
    return {"capabilities": capabilities, "serverInfo": {"name": SERVER_NAME, "version": __version__}}


def _optional(value: Any, kind: type) -> bool:
    """Whether `value` is null or of `kind` (a JSON true or false is not a number here)."""
    return value is None or (isinstance(value, kind) and (kind is bool or not isinstance(value, bool)))


def answerable(message: Any) -> bool:
    """Whether `message` is an `initialize` request that pygls accepts as surely as can be told
    without lsprotocol: the request and the fields the answer and the server's state depend on
    have their types. Anything else is left to pygls, which answers it (an error, if need be)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("method") != "initialize":
        return False
    msg_id = message.get("id")
    if isinstance(msg_id, bool) or not isinstance(msg_id, (int, str)):
        return False
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("capabilities"), dict):
        return False
    if "processId" in params and not _optional(params["processId"], int):
        return False
    if not all(_optional(params.get(key), str) for key in ("rootUri", "rootPath", "locale")):
        return False
    if params.get("trace") is not None and params["trace"] not in _TRACE_VALUES:
        return False
    folders = params.get("workspaceFolders")
    if folders is not None and not (
        isinstance(folders, list)
        and all(isinstance(f, dict) and isinstance(f.get("uri"), str) and isinstance(f.get("name"), str) for f in folders)
    ):
        return False
    info = params.get("clientInfo")
    if info is not None and not (isinstance(info, dict) and isinstance(info.get("name"), str) and _optional(info.get("version"), str)):
        return False
    client = params["capabilities"]
    for key in ("workspace", "textDocument", "notebookDocument", "window", "general"):
        if not _optional(client.get(key), dict):
            return False
    sync = (client.get("textDocument") or {}).get("synchronization")
    if not _optional(sync, dict) or not all(_optional((sync or {}).get(f), bool) for f in ("willSave", "willSaveWaitUntil", "didSave", "dynamicRegistration")):
        return False
    encodings = (client.get("general") or {}).get("positionEncodings")
    return encodings is None or (isinstance(encodings, list) and all(isinstance(e, str) for e in encodings))


def response(message: dict[str, Any], result: dict[str, Any]) -> bytes:
    """The framed JSON-RPC response carrying `result`, headed as pygls heads its messages."""
    body = json.dumps({"id": message["id"], "jsonrpc": "2.0", "result": result})
    return b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n%s" % (
        len(body.encode("utf-8")), body.encode("utf-8"),
    )
