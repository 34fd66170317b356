"""What a subscript reads (`nets["encoder"]`, `self.layers[i]`, `loss[1]`), and what a dict holds
once a loop over its keys has moved each of its values (`for k in batch: batch[k] =
batch[k].to(device)`, a batch moved key by key before the step reads it). A part of the value
model (`values.py`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import libcst as cst

from trainlint.model.candidates import MAX_CANDIDATES
from trainlint.model.containers import DICT, constant_key, tested_as_sequence
from trainlint.model.device_arguments import moved_to_device
from trainlint.model.lattice import ACCEL, HOST, HOST_DATA, MANY_CLASSES, NAMESPACE, UNKNOWN, Kind, Value, join, origins
from trainlint.model.names import dotted
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from trainlint.model.facts import Assign, Site


def subscript_value(expr: cst.Subscript, base: Value, at: "Site | None") -> Value:
    """What `expr` reads from `base`, the value it subscripts."""
    if base.kind is Kind.TENSOR:
        return UNKNOWN if at is not None and at.gate_nodes and tested_as_sequence(at.gate_nodes, expr.value) else base  # (`if isinstance(loss, tuple): n += loss[1]`)
    held = base.keyed(key) if (key := constant_key(expr)) is not None else None
    if held is not None:
        return held  # `nets["encoder"]`: what the dict holds under that key
    if base.kind in (Kind.COLLECTION, Kind.MODULE) and base.element is not None:
        if base.origin in (DICT, NAMESPACE) and len(origins(base.element)) > MAX_CANDIDATES:
            # one of the dict's objects, chosen by its key (`HEADS[cfg.head]`): a class chosen at
            # run time, followed among at most as many candidates as a registry's
            return replace(base.element, origin=MANY_CLASSES if base.element.kind is Kind.MODULE else None)
        return base.element  # (`self.layers[i]`: a module the container holds)
    if base.kind is Kind.HOST_ARRAY:
        return HOST_DATA
    if base.kind is Kind.UNKNOWN and base.device == HOST:
        return base  # (a row of a host copy: `distance_matrix.cpu()[i, j]`)
    return base if moved_to_device(base) else UNKNOWN  # (`batch.to(device)["labels"]`: there too)


def moved_dict(value: Value, moves: "list[Assign]", at: "Site | None", value_of: "Callable[[Assign], Value]", same_binding: "Callable[[Assign], bool]") -> Value:
    """A dict after a loop over its keys moved each value it holds (`moves`, from `keyed_moves`):
    `batch` after `for k in batch: batch[k] = batch[k].to(device)` holds values on the device, but
    under a key the loop names (`if k != "meta":`), which it leaves where it was. `value`: what the
    name is known to hold otherwise; `value_of`: a move's value, where it is made; `same_binding`:
    whether the name still holds the dict the move was made in."""
    if value.kind not in (Kind.UNKNOWN, Kind.COLLECTION) or at is None:
        return value
    moved = [a for a in moves if a.site.function is at.function and a.site.loops[-1].end < at.order and a.site.loops[-1] not in at.loops and same_binding(a)]
    values = [value_of(a) for a in moved]
    if not values or any(v.device != ACCEL for v in values):
        return value
    named = tuple(sorted({n.evaluated_value for a in moved for n in iter_nodes(a.site.loops[-1].node) if isinstance(n, cst.SimpleString) and isinstance(n.evaluated_value, str)}))
    return Value(Kind.COLLECTION, HOST, origin=DICT, element=join(values), items=(UNKNOWN,) * len(named) if named else None, keys=named or None)


def keyed_moves(assigns: "list[Assign]") -> "dict[str, list[Assign]]":
    """By dict name, the assignments `batch[k] = <move>` made in a loop over that dict's keys
    (`for k in batch:`, `for k in batch.keys():`, `for k, v in batch.items():`), each of which
    replaces the value under the loop's key."""
    found: dict[str, list[Assign]] = {}
    for a in assigns:
        node = a.node
        if not isinstance(node, cst.Assign) or len(node.targets) != 1 or not a.site.loops:
            continue
        target = node.targets[0].target
        if not (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and len(target.slice) == 1):
            continue
        index = target.slice[0].slice
        loop = a.site.loops[-1].node
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Name) and isinstance(loop, cst.For) and _over_keys(loop, target.value.value, index.value.value):
            found.setdefault(target.value.value, []).append(a)
    return found


def _over_keys(loop: cst.For, name: str, key: str) -> bool:
    """`for key in name:`, `for key in name.keys():` or `for key, value in name.items():`."""
    it, target = loop.iter, loop.target
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and dotted(it.func.value) == name and not it.args:
        if it.func.attr.value == "items":
            first = target.elements[0].value if isinstance(target, cst.Tuple) and len(target.elements) == 2 else None
            return isinstance(first, cst.Name) and first.value == key
        return it.func.attr.value == "keys" and isinstance(target, cst.Name) and target.value == key
    return isinstance(it, cst.Name) and it.value == name and isinstance(target, cst.Name) and target.value == key
