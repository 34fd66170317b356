"""What the script's own configuration says to freeze: settings named like `freeze_stages`,
`frozen_stages`, `freeze_backbone` or `freeze_layers` with a value that asks for a freeze, found in the
script's variables (module globals, the locals of its functions on the stack) at the first optimizer
step, directly or inside a dict, an argparse/SimpleNamespace, a dataclass or a config object of the
script's own. `invariant_health` compares them with what trained. Imports torch (to skip its objects).
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import re
from types import FrameType, ModuleType, SimpleNamespace
from typing import Any, Iterator

import torch

from trainlint.verify.live_objects import SITE_DIRS, user_frames

Report = dict[str, Any]
# `freeze_stages`, `frozen_stages`, `freeze_backbone`, `FREEZE_LAYERS`, `freeze`: a parameter freeze
FREEZE_NAME = re.compile(r"(?:^|_)(?:freeze|frozen)(?:_|$)", re.IGNORECASE)
# not a parameter freeze: batch-norm statistics, the epoch it ends, a flag that undoes it
NOT_A_FREEZE = re.compile(r"unfreeze|bn|norm|stat|epoch|iter|step|until|after|lr", re.IGNORECASE)
MAX_DEPTH = 3  # config -> section -> setting
MAX_SETTINGS = 10
SKIPPED = (torch.nn.Module, torch.Tensor, torch.optim.Optimizer, torch.utils.data.Dataset, torch.utils.data.DataLoader, ModuleType, type)


def freeze_settings(frame: FrameType | None) -> list[Report]:
    """The freeze settings of the script's frames on the stack at `frame`: each with `setting` (how
    the script names it: `cfg['model']['frozen_stages']`), `key`, `value` (JSON-ready) and `path` /
    `line` (the first line of the script's file that names the key)."""
    found: list[Report] = []
    seen: set[int] = set()
    for user_frame in user_frames(frame):
        path = os.path.abspath(user_frame.f_code.co_filename)
        if path.startswith(SITE_DIRS):
            continue  # a library's frames (a trainer's loop): the configuration is the script's
        for name, value in list(user_frame.f_locals.items()):
            if name.startswith("__"):
                continue
            for setting, key, wanted in _search(name, value, 0, seen):
                if any(f["setting"] == setting for f in found):
                    continue
                found.append({"setting": setting, "key": key, "value": wanted, **_line_naming(path, key)})
                if len(found) >= MAX_SETTINGS:
                    return found
    return found


def _search(label: str, value: Any, depth: int, seen: set[int]) -> Iterator[tuple[str, str, Any]]:
    """(how the script names it, key, value) for each freeze setting in `value` named `label`."""
    key = label.rsplit(".", 1)[-1].rsplit("[", 1)[-1].strip("'\"]")
    if FREEZE_NAME.search(key) and not NOT_A_FREEZE.search(key):
        wanted = asks_for_freeze(value)
        if wanted is not None:
            yield label, key, wanted
        return
    if depth >= MAX_DEPTH or id(value) in seen or isinstance(value, SKIPPED):
        return
    seen.add(id(value))
    for child_label, child in _items(label, value):
        yield from _search(child_label, child, depth + 1, seen)


def _items(label: str, value: Any) -> list[tuple[str, Any]]:
    """The named settings a configuration object holds."""
    if isinstance(value, dict):
        return [(f"{label}[{k!r}]", v) for k, v in list(value.items())[:200] if isinstance(k, str)]
    if isinstance(value, SimpleNamespace) or type(value).__name__ == "Namespace" or dataclasses.is_dataclass(value):
        return [(f"{label}.{k}", v) for k, v in list(vars(value).items())[:200]]
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and _defined_by_script(type(value)):
        return [(f"{label}.{k}", v) for k, v in list(attributes.items())[:200] if not k.startswith("_")]
    return []


def _defined_by_script(cls: type) -> bool:
    """A class of the script's own files (a `Config`), not a library's."""
    module = getattr(cls, "__module__", "") or ""
    if module == "__main__":
        return True
    import sys

    file = getattr(sys.modules.get(module), "__file__", None) or ""
    return bool(file) and not os.path.abspath(file).startswith(SITE_DIRS) and not module.startswith(("torch", "trainlint"))


def asks_for_freeze(value: Any) -> Any:
    """The value, JSON-ready, when it asks for a freeze (True, a positive count, a non-empty list of
    stage indices or module names); None otherwise (False, 0, -1, None, empty)."""
    if isinstance(value, bool):
        return True if value else None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        return value if value.strip() and value.lower() not in ("none", "false", "0", "no", "off") else None
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [v for v in list(value)[:50] if isinstance(v, (int, str)) and not isinstance(v, bool)]
        return sorted(items, key=str) if items and len(items) == len(value) else None
    return None


def _line_naming(path: str, key: str) -> Report:
    """The first line of `path` that names `key` (where the setting is written), when there is one."""
    pattern = re.compile(rf"\b{re.escape(key)}\b")
    for number, text in enumerate(linecache.getlines(path), 1):
        if pattern.search(text):
            return {"path": path, "line": number, "code": text.strip()}
    return {}
