"""What the instrumented script holds while it runs: whose frames are the script's, the autograd graphs
its variables keep, and the names of its modules' parameters. Imports torch."""

from __future__ import annotations

import gc
import os
import sysconfig
from collections import deque
from types import FrameType, ModuleType
from typing import Any, Iterator

import torch

import trainlint

MAX_GRAPH_NODES = 200_000  # stop counting a graph past this many nodes
HOLDERS = (torch.Tensor, list, tuple, dict, deque)
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
OWN_DIR = os.path.dirname(trainlint.__file__) + os.sep
STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
SITE_DIRS = tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib")})
# torch's Python-level dispatch between a script's call and a TorchFunctionMode
PLUMBING = tuple(TORCH_DIR + p for p in ("overrides.py", "_tensor.py", "autograd" + os.sep + "__init__.py"))


def is_internal(filename: str) -> bool:
    """Frames of torch, of trainlint, of the standard library (site-packages excepted) and `<frozen ...>`."""
    if filename.startswith((TORCH_DIR, OWN_DIR, "<")):
        return True
    return _is_stdlib(filename)


def _is_stdlib(filename: str) -> bool:
    return filename.startswith(STDLIB_DIR) and not filename.startswith(SITE_DIRS)


def calling_frame(frame: FrameType | None, through_torch: bool = False) -> FrameType | None:
    """The script's frame that made a call seen at `frame`, or None when torch or trainlint made it.

    Skips trainlint's wrappers, torch's dispatch plumbing and the standard library (the warnings module, functools); with
    `through_torch`, all of torch (a module's forward hook runs under `Module.__call__`).
    """
    while frame is not None:
        filename = frame.f_code.co_filename
        # our own wrappers (the hooks' guards, patched functions) are never the script's call
        if not (filename.startswith((OWN_DIR, *PLUMBING)) or _is_stdlib(filename) or (through_torch and filename.startswith(TORCH_DIR))):
            break
        frame = frame.f_back
    if frame is None or is_internal(frame.f_code.co_filename):
        return None
    return frame


def user_frames(frame: FrameType | None) -> Iterator[FrameType]:
    """The script's frames on the stack, innermost first."""
    while frame is not None:
        if not is_internal(frame.f_code.co_filename):
            yield frame
        frame = frame.f_back


def graph_roots(frame: FrameType | None) -> dict[str, list[Any]]:
    """The autograd graphs (their output nodes) that each variable of the script's frames on the
    stack holds, directly or through one level of attributes and containers (`self.history`)."""
    found: dict[str, list[Any]] = {}
    seen_objects: set[int] = set()
    for user_frame in user_frames(frame):
        is_module_level = user_frame.f_code.co_name == "<module>"
        for name, value in list(user_frame.f_locals.items()):
            if is_module_level and name.startswith("__"):
                continue
            for label, obj in _candidates(name, value):
                if id(obj) in seen_objects:
                    continue
                seen_objects.add(id(obj))
                roots = [t.grad_fn for t in _tensors(obj) if t.grad_fn is not None]
                if roots:
                    found[label] = roots
    return found


def _candidates(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    """The variable itself when it may hold tensors, else its attributes that may."""
    if isinstance(value, HOLDERS):
        yield name, value
        return
    is_module = isinstance(value, torch.nn.Module)
    if not is_module and (callable(value) or isinstance(value, ModuleType) or not hasattr(value, "__dict__")):
        return
    for attr, inner in list(vars(value).items()):
        if isinstance(inner, HOLDERS) and not (is_module and attr.startswith("_")):
            yield f"{name}.{attr}", inner


def _tensors(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 2 and isinstance(obj, (list, tuple, deque)):
        for item in list(obj)[-10_000:]:
            yield from _tensors(item, depth + 1)
    elif depth < 2 and isinstance(obj, dict):
        for item in list(obj.values())[:10_000]:
            yield from _tensors(item, depth + 1)


def graph_nodes(roots: list[Any]) -> set[Any]:
    """Autograd nodes reachable from `roots` (at most MAX_GRAPH_NODES)."""
    seen: set[Any] = set()
    stack = list(roots)
    while stack and len(seen) < MAX_GRAPH_NODES:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return seen


def saved_bytes(nodes: set[Any], skip_storages: set[int]) -> int:
    """Bytes of the tensors these nodes saved for backward and still hold, each storage once, less
    `skip_storages` (the parameters', which live on anyway)."""
    counted = set(skip_storages)
    total = 0
    for node in nodes:
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(node, attr)
            except RuntimeError:  # freed by a backward without retain_graph
                continue
            for tensor in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided:
                    storage = tensor.untyped_storage()
                    if storage.data_ptr() not in counted:
                        counted.add(storage.data_ptr())
                        total += storage.nbytes()
    return total


def parameter_owners() -> tuple[dict[int, str], list[torch.nn.Module]]:
    """id(parameter) -> dotted name in the largest live module that holds it, and those modules."""
    # type(), not isinstance(): dead weak proxies raise on isinstance, lazy torch objects warn
    modules = [m for m in gc.get_objects() if issubclass(type(m), torch.nn.Module)]
    by_size = sorted(((sum(1 for _ in m.parameters()), i, m) for i, m in enumerate(modules)), key=lambda t: (-t[0], t[1]))
    names: dict[int, str] = {}
    roots: list[torch.nn.Module] = []
    for count, _, module in by_size:
        if count == 0:
            break
        fresh = False
        for name, param in module.named_parameters():
            if id(param) not in names:
                names[id(param)] = name
                fresh = True
        if fresh:
            roots.append(module)
    return names, roots
