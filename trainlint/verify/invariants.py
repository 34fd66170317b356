"""Measurements of invariants every healthy training run holds, each one function over live torch
objects that returns a JSON-ready dict, so that `verify run` and a rule's probe measure alike:

- `trainable_parameters`: what trains (requires_grad, held by an optimizer, reached by a gradient),
  by module, and whether a small trainable share is a deliberate pattern (a head, low-rank adapters);
- `eval_forward_determinism`: whether two evaluation forwards of the same batch agree and leave the
  buffers (BatchNorm running statistics) as they were.
Imports torch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import torch

Report = dict[str, Any]
TRAINS = "trains"
NO_REQUIRES_GRAD = "requires_grad=False"
NO_OPTIMIZER = "not in an optimizer"
NO_GRADIENT = "no gradient"
# a trainable matrix this many times narrower than the frozen weight beside it is a low-rank adapter
LOW_RANK_RATIO = 4
ADAPTER_ANCESTORS = 3  # how far up from an adapter's module the frozen weight it adapts may sit


def trainable_parameters(
    modules: torch.nn.Module | Sequence[torch.nn.Module],
    optimizers: Iterable[torch.optim.Optimizer],
    grads_seen: set[int] | None = None,
    freeze_sites: Mapping[int, Report] | None = None,
    changed: Mapping[int, bool] | None = None,
) -> Report:
    """What trains in `modules` under `optimizers`.

    Each parameter is `trains` (requires_grad, held by an optimizer, reached by a gradient: its id in
    `grads_seen`, or a `.grad` now when `grads_seen` is None), else the first reason it does not:
    requires_grad=False, not in an optimizer, no gradient. `freeze_sites` (id -> where the script set
    requires_grad to False) and `changed` (id -> whether its values moved) are attached when known.
    The report has the counts by status and by top-level module, the trainable share, and `pattern`:
    "all", "head" (the trainable parameters are the last modules of the model), "low-rank adapters"
    (trainable matrices beside larger frozen weights) or None.
    """
    roots = [modules] if isinstance(modules, torch.nn.Module) else list(modules)
    held = {id(p): i for i, opt in enumerate(optimizers) for group in opt.param_groups for p in group["params"]}
    labels = _root_labels(roots)
    rows: list[Report] = []
    params: dict[int, torch.Tensor] = {}
    owners: dict[int, tuple[torch.nn.Module, str, str]] = {}  # id -> root, module path, full name
    for root, label in zip(roots, labels):
        for module_name, module in root.named_modules():
            for local_name, param in module.named_parameters(recurse=False):
                if id(param) in params:
                    continue  # shared (tied) weights count once
                params[id(param)] = param
                name = ".".join(x for x in (label, module_name, local_name) if x)
                owners[id(param)] = (root, module_name, name)
                status = _status(param, id(param) in held, grads_seen)
                gradient = param.grad is not None or (grads_seen is not None and id(param) in grads_seen)
                row: Report = {
                    "name": name, "module": ".".join(x for x in (label, module_name) if x) or type(root).__name__,
                    "module_type": type(module).__name__, "numel": param.numel(), "dtype": str(param.dtype).removeprefix("torch."),
                    "status": status, "optimizer": held.get(id(param)), "gradient": gradient,
                }
                if freeze_sites and id(param) in freeze_sites:
                    row["frozen_at"] = freeze_sites[id(param)]
                if changed is not None and id(param) in changed:
                    row["changed"] = changed[id(param)]
                rows.append(row)
    total = sum(r["numel"] for r in rows)
    by_status = Counter({TRAINS: 0, NO_REQUIRES_GRAD: 0, NO_OPTIMIZER: 0, NO_GRADIENT: 0})
    for r in rows:
        by_status[r["status"]] += r["numel"]
    trained = by_status[TRAINS]
    intended = {pid for pid, p in params.items() if p.requires_grad and pid in held}
    pattern, detail = _pattern(roots, owners, params, intended)
    outside = sum(p.numel() for opt in _as_list(optimizers) for g in opt.param_groups for p in g["params"] if id(p) not in params)
    return {
        "total": total, "trained": trained, "share_trained": trained / total if total else 0.0, "by_status": dict(by_status),
        "modules": _by_module(rows), "pattern": pattern, "pattern_detail": detail,
        "trainable_module_types": dict(Counter(r["module_type"] for r in rows if r["status"] == TRAINS).most_common(5)),
        "optimizer_elements_outside": outside, "tensors": len(rows),
        "parameters": [r for r in rows if r["status"] != TRAINS] + [r for r in rows if r["status"] == TRAINS],
    }


def _as_list(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
    return optimizers if isinstance(optimizers, list) else list(optimizers)


def _status(param: torch.Tensor, in_optimizer: bool, grads_seen: set[int] | None) -> str:
    if not param.requires_grad:
        return NO_REQUIRES_GRAD
    if not in_optimizer:
        return NO_OPTIMIZER
    got = id(param) in grads_seen if grads_seen is not None else param.grad is not None
    return TRAINS if got or param.grad is not None else NO_GRADIENT


def _root_labels(roots: Sequence[torch.nn.Module]) -> list[str]:
    """No prefix for one model; the class name (numbered when repeated) for several (a GAN's two)."""
    if len(roots) == 1:
        return [""]
    names = [type(r).__name__ for r in roots]
    counts = Counter(names)
    seen: Counter[str] = Counter()
    labels = []
    for name in names:
        seen[name] += 1
        labels.append(f"{name}{seen[name]}" if counts[name] > 1 else name)
    return labels


def _by_module(rows: Sequence[Report]) -> list[Report]:
    """Elements per status under each module two levels deep (`layer1.0`, `fc`): where the frozen part is."""
    groups: dict[str, Counter[str]] = {}
    for r in rows:
        path = ".".join(r["name"].split(".")[:-1][:2]) or "(top level)"
        groups.setdefault(path, Counter())[r["status"]] += r["numel"]
    return [{"path": path, "total": sum(c.values()), **dict(c)} for path, c in groups.items()]


def _pattern(
    roots: Sequence[torch.nn.Module], owners: Mapping[int, tuple[torch.nn.Module, str, str]],
    params: Mapping[int, torch.Tensor], intended: set[int],
) -> tuple[str | None, str]:
    """Whether the parameters meant to train form a deliberate pattern, judged by structure only."""
    if not intended:
        return None, "no parameter is meant to train"
    if len(intended) == len(params):
        return "all", "every parameter is meant to train"
    head = _head_params(roots)
    if intended <= head:
        return "head", "only the last layers train (a linear probe or a fine-tuned head)"
    adapters = {pid for pid in intended if _low_rank_beside_frozen(pid, owners, params, intended)}
    # beside adapters: a new head, or biases of the frozen layers (BitFit-style)
    rest = intended - adapters - head
    if adapters and all(params[pid].dim() <= 1 and _module_holds_frozen_weight(pid, owners) for pid in rest):
        return "low-rank adapters", "low-rank matrices added beside frozen weights train (LoRA-style adapters)"
    return None, "the trainable parameters are neither the model's last layers nor low-rank adapters beside frozen weights"


def _head_params(roots: Sequence[torch.nn.Module]) -> set[int]:
    """Parameters of each model's head: the modules with parameters registered after its last
    module with a frozen parameter (all of them when nothing is frozen)."""
    head: set[int] = set()
    for root in roots:
        owning = [m for _, m in root.named_modules() if any(True for _ in m.parameters(recurse=False))]
        frozen_at = [i for i, m in enumerate(owning) if any(not p.requires_grad for p in m.parameters(recurse=False))]
        start = frozen_at[-1] + 1 if frozen_at else 0
        for module in owning[start:]:
            head.update(id(p) for p in module.parameters(recurse=False))
    return head


def _ancestors(module_path: str) -> list[str]:
    parts = module_path.split(".") if module_path else []
    return [".".join(parts[:i]) for i in range(len(parts), max(-1, len(parts) - ADAPTER_ANCESTORS - 1), -1)]


def _low_rank_beside_frozen(
    pid: int, owners: Mapping[int, tuple[torch.nn.Module, str, str]], params: Mapping[int, torch.Tensor], intended: set[int],
) -> bool:
    """One of a pair of trainable matrices A (r x in) and B (out x r) whose product has the shape of
    a frozen weight near them (in their module or up to ADAPTER_ANCESTORS modules up) at least
    LOW_RANK_RATIO times wider than r: a low-rank update of that weight (LoRA and its kin)."""
    param = params[pid]
    if param.dim() != 2:
        return False
    root, path, _ = owners[pid]
    for ancestor in _ancestors(path):
        scope = list((root.get_submodule(ancestor) if ancestor else root).parameters())
        frozen = {tuple(sorted(w.shape[:2])) for w in scope if not w.requires_grad and w.dim() >= 2}
        if not frozen:
            continue
        for other in scope:
            if other is param or id(other) not in intended or other.dim() != 2:
                continue
            for a, b in ((param, other), (other, param)):
                rank = a.shape[0]
                if b.shape[1] == rank and rank * LOW_RANK_RATIO <= min(b.shape[0], a.shape[1]) and tuple(sorted((b.shape[0], a.shape[1]))) in frozen:
                    return True
    return False


def _module_holds_frozen_weight(pid: int, owners: Mapping[int, tuple[torch.nn.Module, str, str]]) -> bool:
    root, path, _ = owners[pid]
    module = root.get_submodule(path) if path else root
    return any(not p.requires_grad and p.dim() >= 2 for p in module.parameters(recurse=False))


def eval_forward_determinism(module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, switch_to_eval: bool = True) -> Report:
    """Two forwards of the same inputs under `torch.no_grad()`, as an evaluation runs them: whether
    their outputs agree and which buffers (BatchNorm running statistics) the forwards changed.

    With `switch_to_eval` the module is put in eval mode first (as `model.eval()` would); either way
    every submodule's mode, every buffer and the global random state are restored afterwards, so the
    measurement leaves the program as it found it.
    """
    kwargs = dict(kwargs or {})
    modes = [(m, m.training) for m in module.modules()]
    buffers = {name: b.detach().clone() for name, b in module.named_buffers() if b is not None}
    try:
        if switch_to_eval:
            module.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=_cuda_devices(module)):
            first = _flat_outputs(module(*args, **kwargs))
            second = _flat_outputs(module(*args, **kwargs))
        current = dict(module.named_buffers())
        moved = sorted(name for name, before in buffers.items() if name in current and not _same(current[name], before))
    finally:
        for m, training in modes:
            m.training = training
        with torch.no_grad():
            for name, b in module.named_buffers():
                if name in buffers and b is not None and b.shape == buffers[name].shape:
                    b.copy_(buffers[name])
    diffs = [_difference(a, b) for a, b in zip(first, second)]
    worst = max(diffs, key=lambda d: d[0], default=(0.0, 0.0))
    return {
        "deterministic": worst[0] == 0.0 and not moved and len(first) == len(second),
        "outputs_compared": len(diffs), "max_abs_diff": worst[0], "max_rel_diff": worst[1],
        "buffers_changed": [n for n in moved if not n.endswith("num_batches_tracked")][:20],
        "batches_tracked_changed": any(n.endswith("num_batches_tracked") for n in moved),
    }


def _cuda_devices(module: torch.nn.Module) -> list[int]:
    return sorted({p.device.index or 0 for p in module.parameters() if p.device.type == "cuda"})


def _flat_outputs(output: Any) -> list[torch.Tensor]:
    """The floating-point tensors in a forward's output (tuples, lists, dicts, dataclass-like objects)."""
    found: list[torch.Tensor] = []
    stack = [output]
    while stack and len(found) < 64:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            if item.is_floating_point() or item.is_complex():
                found.append(item.detach())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif hasattr(item, "__dict__") and not isinstance(item, torch.nn.Module):
            stack.extend(v for v in vars(item).values() if isinstance(v, (torch.Tensor, list, tuple, dict)))
    return found


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a.detach(), b))


def _difference(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Largest absolute difference, and it relative to the largest magnitude of the first output."""
    if a.shape != b.shape:
        return float("inf"), float("inf")
    delta = (a.float() - b.float()).abs()
    both_nan = torch.isnan(a) & torch.isnan(b)
    delta = torch.where(both_nan, torch.zeros_like(delta), delta)
    largest = float(delta.max()) if delta.numel() else 0.0
    scale = float(a.float().abs().max()) if a.numel() else 0.0
    return largest, largest / scale if scale > 0 else (0.0 if largest == 0 else float("inf"))
