"""The run's evidence for the invariants "what trains" and "evaluation is deterministic", kept for
`recorder.Recorder`: where the script set `requires_grad` to False and switched modules to eval,
dropout and batch norm running in training behaviour inside eval-mode modules (found through the
`TorchFunctionMode` of `instruments.py`), and the measurements of `invariants.py` at the end.
Imports torch.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
import sys
import threading
import weakref
from types import FrameType
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from trainlint.verify.freeze_config import freeze_settings
from trainlint.verify.grad_norms import local
from trainlint.verify.invariants import eval_forward_determinism, trainable_parameters
from trainlint.verify.live_objects import calling_frame, user_frames

Report = dict[str, Any]
# functional calls whose training behaviour is random or updates state: (kind, index of `training`)
DROPOUTS = {F.dropout: 2, F.dropout1d: 2, F.dropout2d: 2, F.dropout3d: 2, F.alpha_dropout: 2, F.feature_alpha_dropout: 2}
WATCHED: dict[Callable[..., Any], str] = {
    **{f: "dropout" for f in DROPOUTS}, F.batch_norm: "batch norm", F.scaled_dot_product_attention: "attention dropout",
}
FUNCTION_NAMES = {f: f.__name__ for f in WATCHED}
MAX_SITES = 50
MAX_REPLAYED = 4  # models evaluated at the end of the run
WRAPPERS = ("DistributedDataParallel", "FullyShardedDataParallel", "DataParallel")  # their forward may start collectives


class InvariantWatch:
    """Freeze sites, eval switches and eval-mode calls in training behaviour, as the script runs."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.stack: list[torch.nn.Module] = []  # the modules whose forward is running, outermost first
        self.measuring = False  # our own evaluation forwards: not the script's, not evidence
        self.freeze_sites: weakref.WeakKeyDictionary[torch.Tensor, Report] = weakref.WeakKeyDictionary()
        self.optimizers: dict[int, weakref.ref[torch.optim.Optimizer]] = {}
        self.sums: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> parameter, checksum at step 1
        self.eval_site: Report | None = None  # the script's latest switch of a module to eval
        self.eval_switches = 0
        self.sites: dict[tuple[str, int, str, int], Report] = {}
        self.modules: dict[int, torch.nn.Module] = {}  # the modules of `sites`, named at the end
        self.pending = False  # a violation was seen in this forward: measure it once it returns
        self.measured: Report | None = None
        # per model: its latest training forward's inputs (detached), to evaluate it at the end
        self.last_inputs: dict[int, tuple[weakref.ref[torch.nn.Module], tuple[Any, ...], dict[str, Any]]] = {}
        self.replaying: torch.nn.Module | None = None  # the model our own end-of-run evaluation runs
        self.freeze_config: list[Report] = []  # what the script's configuration says to freeze
        self.froze_any = False  # the script set requires_grad to False on some parameter, at any time

    # -- hooks -------------------------------------------------------------------------------
    def install(self) -> None:
        """Record `requires_grad` writes on parameters and switches of modules to eval."""
        guarded = self.recorder.guarded
        frozen = guarded(self._requires_grad_set)
        set_attribute = torch.nn.Parameter.__setattr__

        def setattr_(param: torch.Tensor, name: str, value: Any) -> None:
            if name == "requires_grad":
                frozen(param, value, sys._getframe(1))
            set_attribute(param, name, value)

        original_requires_grad_ = torch.nn.Parameter.requires_grad_

        def requires_grad_(param: torch.Tensor, requires_grad: bool = True) -> torch.Tensor:
            frozen(param, requires_grad, sys._getframe(1))
            return original_requires_grad_(param, requires_grad)

        torch.nn.Parameter.__setattr__ = setattr_  # type: ignore[method-assign, assignment]
        torch.nn.Parameter.requires_grad_ = requires_grad_  # type: ignore[method-assign, assignment]
        original_train = torch.nn.Module.train
        switched = guarded(self._switched)
        depth = [0]

        def train(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
            if not depth[0] and not mode:  # the script's call, not the recursion into children
                switched(module, sys._getframe(1))
            depth[0] += 1
            try:
                return original_train(module, mode)
            finally:
                depth[0] -= 1

        train.__wrapped__ = original_train  # type: ignore[attr-defined]
        torch.nn.Module.train = train  # type: ignore[method-assign]

    def _requires_grad_set(self, param: torch.Tensor, value: Any, frame: FrameType | None) -> None:
        if value:
            self.freeze_sites.pop(param, None)
            return
        self.froze_any = True
        site = next(user_frames(frame), None)
        if site is not None:
            self.freeze_sites[param] = {**_site(site), "step": self.recorder.steps}

    def _switched(self, module: torch.nn.Module, frame: FrameType | None) -> None:
        site = next(user_frames(frame), None)
        if site is not None and not self.measuring:
            self.eval_switches += 1
            self.eval_site = {**_site(site), "step": self.recorder.steps}

    def functional(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], frame: FrameType | None) -> None:
        """A watched functional call (`F.dropout`, `F.batch_norm`, SDPA): note it when it runs in
        training behaviour inside an eval-mode module."""
        if (self.measuring and self.replaying is None) or not self.stack:
            return
        kind = WATCHED[func]
        if not _in_training_behaviour(kind, func, args, kwargs):
            return
        module, root = self.stack[-1], self.stack[0]
        if kind == "batch norm":
            if module.training and root.training:
                return
            # a BatchNorm module set back to training under an eval-mode model, or F.batch_norm(training=True)
            explicit = not module.training and _asks_for_training(calling_frame(frame, through_torch=True), kind)
        elif module.training:
            if root.training:
                return
            explicit = True  # the script put this module in training mode under an eval-mode model (MC dropout)
        else:
            explicit = _asks_for_training(calling_frame(frame, through_torch=True), kind)
        caller = calling_frame(frame, through_torch=True)
        if caller is None:
            return
        where = _site(caller)
        key = (where["path"], where["line"], kind, id(module))
        entry = self.sites.get(key)
        if entry is None:
            if len(self.sites) >= MAX_SITES:
                return
            self.modules[id(module)] = module
            entry = self.sites[key] = {
                **where, "kind": kind, "function": FUNCTION_NAMES[func], "module_id": id(module), "module_type": type(module).__name__,
                "module_training": module.training, "explicit": explicit, "count": 0, "after_step": self.recorder.steps,
                "eval_switch": None if self.replaying is not None else self.eval_site, "replayed": self.replaying is not None,
            }
            if self.replaying is None:
                self.pending = self.pending or (not explicit and self.measured is None)
        entry["count"] += 1

    def enter(self, module: torch.nn.Module) -> None:
        self.stack.append(module)

    def leave(self, module: torch.nn.Module, rest: tuple[Any, ...]) -> None:
        """`module`'s forward returned (`rest`: args, kwargs, output; or args, output after an error)."""
        if self.stack:
            self.stack.pop()
        if not self.stack and not self.measuring and len(rest) == 3 and module.training:
            self._keep_inputs(module, rest[0], rest[1])
        if self.stack or not self.pending or self.measuring or len(rest) != 3:
            return
        self.pending = False
        args, kwargs, _ = rest
        self.measuring = True
        try:
            self.measured = {**eval_forward_determinism(module, args, kwargs, switch_to_eval=False), "module_type": type(module).__name__}
        except Exception as exc:  # the script's forward, re-run: its failure is no evidence either way
            self.measured = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            self.measuring = False

    def _keep_inputs(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        """The inputs of the script's latest training forward of `module`, detached (holding its graph
        would keep a step's activations alive), for `replay_evaluation`."""
        if id(module) not in self.last_inputs and len(self.last_inputs) >= MAX_REPLAYED:
            return
        self.last_inputs[id(module)] = (weakref.ref(module), _detached(tuple(args or ())), _detached(dict(kwargs or {})))

    def replay_evaluation(self, held: set[int]) -> None:
        """Evaluate each trained model (one holding parameters in `held`) as an evaluation would (eval
        mode, two forwards of its last training batch under `no_grad`), watching dropout and batch norm
        as in the script's own forwards.

        A run stopped after `--steps N` never reaches the evaluation written after the training loop
        (nor one every few epochs), so dropout that ignores eval mode would go unseen. Runs at the end
        only, on the main thread, in a single process (a DDP forward may start collectives), and
        leaves modes, buffers and the random state as they were."""
        if threading.current_thread() is not threading.main_thread() or self.stack or self.recorder.world_size > 1:
            return
        if self.recorder.stopped == "internal-error":
            return
        for ref, args, kwargs in list(self.last_inputs.values()):
            module = ref()
            if module is None or type(module).__name__ in WRAPPERS or hasattr(module, "_orig_mod"):
                continue
            if not any(id(p) in held for p in module.parameters()):
                continue  # not a model the run trains
            inside = {id(m) for m in module.modules()}
            if any(not e["explicit"] and e["module_id"] in inside for e in self.sites.values()):
                continue  # the script's own evaluation showed it already
            before = set(self.sites)
            self.measuring, self.replaying = True, module
            try:
                with _WatchMode(self):
                    measured: Report = {**eval_forward_determinism(module, args, kwargs), "module_type": type(module).__name__}
            except BaseException as exc:  # noqa: B036 - the script's forward (or a hook's StopRun), re-run: no evidence either way
                if isinstance(exc, KeyboardInterrupt):
                    raise
                measured = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                self.measuring, self.replaying = False, None
            for new in set(self.sites) - before:
                self.sites[new]["measured"] = measured

    def saw_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) not in self.optimizers:
            self.optimizers[id(optimizer)] = weakref.ref(optimizer)

    def first_step(self, roots: Sequence[torch.nn.Module], tracked: dict[int, Any]) -> None:
        """Checksums of the parameters with no snapshot (frozen, unused, in no optimizer): whether
        they changed is told without a copy of them. Also reads what the script's configuration says
        to freeze, from its variables on the stack (the configuration is built by now)."""
        try:
            self.freeze_config = freeze_settings(sys._getframe(1))
        except Exception:  # a configuration object that fails to be read is no evidence
            self.freeze_config = []
        for root in roots:
            for param in root.parameters():
                if id(param) not in tracked and id(param) not in self.sums:
                    self.sums[id(param)] = (param, _checksum(param))

    # -- the report ------------------------------------------------------------------------
    def report(self, roots: Sequence[torch.nn.Module], tracked: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> Report:
        """"what_trains" and "eval_behaviour" for the run's report."""
        optimizers = [opt for ref in self.optimizers.values() if (opt := ref()) is not None]
        held = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
        models = [r for r in roots if any(id(p) in held for p in r.parameters())]
        what_trains = None
        self.replay_evaluation(held)
        if models:
            changed = {pid: not _unchanged(param, snapshot) for pid, (param, snapshot, _) in tracked.items()}
            changed.update({pid: not bool(torch.equal(_checksum(p), s)) for pid, (p, s) in self.sums.items() if pid not in changed})
            sites = {id(p): s for p, s in list(self.freeze_sites.items())}
            what_trains = trainable_parameters(models, optimizers, set(tracked), sites, changed)
            frozen_steps = [s["step"] for s in sites.values()]
            what_trains["first_step"] = max(frozen_steps, default=0) + 1
            what_trains["freeze_sites"] = _freeze_sites(what_trains["parameters"])
            what_trains["freeze_config"] = self.freeze_config
            what_trains["froze_any"] = self.froze_any
        names = {id(m): name or type(root).__name__ for root in reversed(list(roots)) for name, m in root.named_modules()}
        sites = []
        for entry in self.sites.values():
            row = dict(entry)
            row["module"] = names.get(row.pop("module_id"), row["module_type"])
            sites.append(row)
        sites.sort(key=lambda r: (r["explicit"], r["after_step"], r["path"], r["line"]))
        return {
            "what_trains": what_trains,
            "eval_behaviour": {"switches": self.eval_switches, "sites": sites, "measured": self.measured},
        }


class _WatchMode(TorchFunctionMode):
    """During `replay_evaluation`: passes the watched functional calls to the watch (the run's own
    mode ignores our forwards, and has exited when the script finished)."""

    def __init__(self, watch: InvariantWatch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func in WATCHED:
            self.watch.functional(func, args, kwargs, sys._getframe(1))
        return func(*args, **kwargs)


def _detached(value: Any) -> Any:
    """`value` with every tensor in it (in tuples, lists and dicts) detached from its graph."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        items = [_detached(v) for v in value]
        return type(value)(items) if type(value) in (list, tuple) else value
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _in_training_behaviour(kind: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the call randomises (dropout with p > 0 and training) or updates running statistics."""
    try:
        if kind == "attention dropout":
            return float(kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)) > 0
        if kind == "batch norm":
            running = kwargs.get("running_mean", args[1] if len(args) > 1 else None)
            return running is not None and bool(kwargs.get("training", args[5] if len(args) > 5 else False))
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        return bool(kwargs.get("training", args[DROPOUTS[func]] if len(args) > DROPOUTS[func] else True)) and float(p) > 0
    except (TypeError, ValueError):
        return False


def _asks_for_training(frame: FrameType | None, kind: str) -> bool:
    """The call at `frame` passes `training=True` literally (MC dropout, batch statistics on purpose)."""
    if frame is None:
        return False
    path, line = os.path.abspath(frame.f_code.co_filename), frame.f_lineno
    position = 2 if kind == "dropout" else 5
    for call in _calls(path):
        if call.lineno <= line <= (call.end_lineno or call.lineno):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if "dropout" not in name and "batch_norm" not in name:
                continue
            values = [k.value for k in call.keywords if k.arg == "training"] + call.args[position:position + 1]
            if any(isinstance(v, ast.Constant) and v.value is True for v in values):
                return True
    return False


@functools.lru_cache(maxsize=64)
def _calls(path: str) -> tuple[ast.Call, ...]:
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return ()
    return tuple(node for node in ast.walk(tree) if isinstance(node, ast.Call))


def _site(frame: FrameType) -> Report:
    path = os.path.abspath(frame.f_code.co_filename)
    return {"path": path, "line": frame.f_lineno, "code": linecache.getline(path, frame.f_lineno).strip()}


def _checksum(param: torch.Tensor) -> torch.Tensor:
    values = local(param.detach())
    values = values.float() if values.is_floating_point() else values.double()
    return torch.stack([values.sum(), values.abs().sum()])


def _unchanged(param: torch.Tensor, snapshot: torch.Tensor) -> bool:
    return bool(torch.equal(local(param.detach()).cpu(), snapshot))


def _freeze_sites(rows: Sequence[Report]) -> list[Report]:
    """The lines that set requires_grad to False, with the tensors and elements each froze."""
    by_line: dict[tuple[str, int], Report] = {}
    for r in rows:
        site = r.get("frozen_at")
        if r["status"] != "requires_grad=False" or not site:
            continue
        entry = by_line.setdefault((site["path"], site["line"]), {**site, "tensors": 0, "elements": 0})
        entry["tensors"] += 1
        entry["elements"] += r["numel"]
    return sorted(by_line.values(), key=lambda s: -s["elements"])
