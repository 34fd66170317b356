"""The instrumented run: execute a training script unmodified and record its health at each optimizer step.

Run in a child process by `trainlint verify run` (`python -m trainlint.verify.instruments REQUEST_JSON`);
it writes one JSON report to the path the request names. What it records, all without adding a
host-device sync to the user's step:
- which parameter elements never changed although their gradient was non-zero (a snapshot on the host
  at the first step, and a per-element "gradient was non-zero" mask updated before each step);
- the loss that was backpropagated and the gradient norm at each step, and the loss scale;
- host-device syncs called directly by the script, with file:line (a `TorchFunctionMode`, and patched
  `torch.cuda.synchronize`/`empty_cache`/memory-statistics functions);
- autograd graphs kept across steps: graph nodes reachable from the script's variables, and live
  saved-tensor bytes (`saved_tensors_hooks`); CUDA memory when CUDA is in use;
- wall time per step.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import statistics
import sys
import sysconfig
import threading
import time
import traceback
import warnings
from collections import Counter, deque
from types import FrameType, ModuleType
from typing import Any, Callable, Iterator

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

import trainlint

Report = dict[str, Any]
MAX_GRAPH_NODES = 200_000  # stop counting a graph past this many nodes
HOLDERS = (torch.Tensor, list, tuple, dict, deque)
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
OWN_DIR = os.path.dirname(trainlint.__file__) + os.sep
STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
SITE_DIRS = tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib")})
# torch's Python-level dispatch plumbing between a user's call and the mode
PLUMBING = tuple(TORCH_DIR + p for p in ("overrides.py", "_tensor.py", "autograd" + os.sep + "__init__.py"))

# Tensor methods that copy a value to the host: on an accelerator each waits for the queued work.
VALUE_READS: dict[Callable[..., Any], str] = {
    torch.Tensor.item: ".item()",
    torch.Tensor.tolist: ".tolist()",
    torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__float__: "float(tensor)",
    torch.Tensor.__int__: "int(tensor)",
    torch.Tensor.__format__: "format(tensor)",
    torch.Tensor.__repr__: "repr(tensor)",
}
# copies to the host: syncs only when the tensor lives on an accelerator
HOST_COPIES: dict[Callable[..., Any], str] = {torch.Tensor.cpu: ".cpu()", torch.Tensor.to: ".to(cpu)", torch.Tensor.numpy: ".numpy()"}
CUDA_CALLS = {
    "synchronize": "torch.cuda.synchronize()",
    "empty_cache": "torch.cuda.empty_cache()",
    "reset_peak_memory_stats": "torch.cuda.reset_peak_memory_stats()",
    "memory_summary": "torch.cuda.memory_summary()",
}


class StopRun(BaseException):
    """Raised from the optimizer-step hook once the requested steps have run (BaseException, so
    that the script's `except Exception` does not swallow it)."""


class _SavedTensor:
    """Holds a tensor saved for backward; its death means the graph that saved it was freed."""

    __slots__ = ("tensor", "nbytes", "recorder")

    def __init__(self, tensor: torch.Tensor, nbytes: int, recorder: Recorder) -> None:
        self.tensor, self.nbytes, self.recorder = tensor, nbytes, recorder
        recorder.saved_bytes += nbytes

    def __del__(self) -> None:
        self.recorder.saved_bytes -= self.nbytes


def _is_internal(filename: str) -> bool:
    """Frames of torch, of trainlint, of the standard library (site-packages excepted) and of `<frozen ...>`."""
    if filename.startswith((TORCH_DIR, OWN_DIR, "<")):
        return True
    return filename.startswith(STDLIB_DIR) and not filename.startswith(SITE_DIRS)


def _user_frames(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            yield frame
        frame = frame.f_back


class _SyncMode(TorchFunctionMode):
    """Sees every torch function the script calls; records value reads, host copies and `backward`."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        kind = VALUE_READS.get(func)
        if kind is not None:
            if not (self.recorder.on_cpu or _on_accelerator(args[0])):
                kind = None
        elif func in HOST_COPIES:
            kind = HOST_COPIES[func] if _on_accelerator(args[0]) and _to_host(func, args, kwargs) else None
        elif func is torch.Tensor.backward or func is torch.autograd.backward:
            self.recorder.backward(args[0] if args else kwargs.get("tensors"))
        if kind is None:
            return func(*args, **kwargs)
        self.recorder.sync(kind, sys._getframe(1))
        self.recorder.in_recorded_sync = True  # CUDA's sync warning for this call is the same sync
        try:
            return func(*args, **kwargs)
        finally:
            self.recorder.in_recorded_sync = False


def _on_accelerator(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type not in ("cpu", "meta")


def _to_host(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if func is not torch.Tensor.to:
        return True
    if kwargs.get("non_blocking"):
        return False
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    try:
        return isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"
    except RuntimeError:
        return False


class Recorder:
    """The state of one instrumented run; `report()` turns it into JSON-ready figures."""

    def __init__(self, script: str, steps: int, device: str, report_path: str) -> None:
        self.script, self.wanted, self.device, self.report_path = script, steps, device, report_path
        self.on_cpu = device == "cpu"
        self.steps = 0  # optimizer steps completed (of the optimizer that stepped most)
        self.optimizer_steps: Counter[int] = Counter()
        self.started = time.perf_counter()
        self.first_forward: float | None = None
        self.boundaries: list[float] = []
        self.tracked: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # param, host snapshot, grad-nonzero mask
        self.norm_squares: list[torch.Tensor] = []  # this step's, one per optimizer step
        self.grad_norms: list[torch.Tensor] = []
        self.norm_device: torch.device | None = None
        self.last_loss: torch.Tensor | None = None
        self.losses: list[torch.Tensor | None] = []
        self.scaled: tuple[int, torch.Tensor] | None = None  # id of scaler.scale(loss)'s output, and loss
        self.scales: list[torch.Tensor] = []
        self.syncs: dict[tuple[str, int, str], Counter[int]] = {}
        self.in_recorded_sync = False
        self.saved_bytes = 0
        self.saved_per_step: list[int] = []
        self.cuda_memory: list[int] = []
        self.graphs: dict[str, list[int]] = {}
        self.stopped: str | None = None
        self.message = ""
        self.error: str | None = None

    # -- events -----------------------------------------------------------------------------
    def sync(self, kind: str, frame: FrameType | None) -> None:
        """A host-device sync called from `frame`; ignored when torch itself made the call."""
        while frame is not None and frame.f_code.co_filename.startswith(PLUMBING):
            frame = frame.f_back
        while frame is not None and frame.f_code.co_filename.startswith(STDLIB_DIR) and not frame.f_code.co_filename.startswith(SITE_DIRS):
            frame = frame.f_back
        if frame is None or _is_internal(frame.f_code.co_filename):
            return
        key = (os.path.abspath(frame.f_code.co_filename), frame.f_lineno, kind)
        self.syncs.setdefault(key, Counter())[self.steps] += 1

    def backward(self, tensor: Any) -> None:
        if isinstance(tensor, (list, tuple)):
            tensor = tensor[0] if tensor else None
        if not isinstance(tensor, torch.Tensor) or tensor.numel() != 1:
            return
        if self.scaled is not None and self.scaled[0] == id(tensor):
            tensor = self.scaled[1]
        self.last_loss = tensor.detach().float().reshape(())

    def forward(self, *_: Any) -> None:
        if self.first_forward is None:
            self.first_forward = time.perf_counter()

    def before_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if self.stopped is not None:
            os._exit(0)  # the script caught StopRun and trained on; the report is written
        squares = []
        for group in optimizer.param_groups:
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if grad.is_sparse:
                    grad = grad.coalesce().to_dense()
                entry = self.tracked.get(id(param))
                if entry is None:
                    # one host copy per parameter, at its first step
                    entry = (param, param.detach().to("cpu", copy=True), torch.zeros_like(param, dtype=torch.bool))
                    self.tracked[id(param)] = entry
                entry[2].logical_or_(grad.detach() != 0)
                if self.norm_device is None:
                    self.norm_device = grad.device
                squares.append(torch.linalg.vector_norm(grad.detach(), dtype=torch.float32).square().to(self.norm_device))
        if squares:
            self.norm_squares.append(torch.stack(squares).sum())

    def after_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.optimizer_steps[id(optimizer)] += 1
        if self.optimizer_steps[id(optimizer)] <= self.steps:
            return  # a second optimizer in the same step (a GAN's generator)
        self.steps += 1
        self.boundaries.append(time.perf_counter())
        self.grad_norms.append(torch.stack(self.norm_squares).sum().sqrt() if self.norm_squares else torch.tensor(float("nan")))
        self.norm_squares = []
        self.losses.append(self.last_loss)
        self.saved_per_step.append(self.saved_bytes)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.cuda_memory.append(torch.cuda.memory_allocated())
        for name, nodes in _graph_sizes(sys._getframe(1)).items():
            self.graphs.setdefault(name, [0] * (self.steps - 1)).append(nodes)
        if self.steps >= self.wanted:
            self.finish("steps", f"stopped after {self.steps} optimizer steps")
            raise StopRun  # the report is written: if the script swallows this, its next step ends the process

    def scale(self, loss: torch.Tensor, scaled: Any) -> None:
        if isinstance(loss, torch.Tensor) and isinstance(scaled, torch.Tensor):
            self.scaled = (id(scaled), loss)

    def scale_updated(self, scaler: Any) -> None:
        scale = getattr(scaler, "_scale", None)
        if isinstance(scale, torch.Tensor):
            self.scales.append(scale.detach().float().reshape(()).clone())

    def pack(self, tensor: torch.Tensor) -> _SavedTensor:
        # parameters are saved by every linear layer but live on anyway: count activations only
        nbytes = 0 if tensor.is_leaf and tensor.requires_grad else tensor.numel() * tensor.element_size()
        return _SavedTensor(tensor.detach(), nbytes, self)

    # -- the report -------------------------------------------------------------------------
    def finish(self, stopped: str, message: str, error: str | None = None) -> None:
        """Record why the run ended and write the report; only the first call counts."""
        if self.stopped is not None:
            return
        self.stopped, self.message, self.error = stopped, message, error
        if stopped == "finished" and self.steps == 0:
            self.message = "the script finished without calling an optimizer's step(): nothing to measure"
        with open(self.report_path, "w", encoding="utf-8") as out:
            json.dump(self.report(), out)

    def report(self) -> Report:
        """The run's figures, JSON-ready."""
        names = _parameter_names() if self.tracked else {}
        return {
            "script": self.script,
            "device": self.device,
            "torch": torch.__version__,
            "requested_steps": self.wanted,
            "steps": self.steps,
            "stopped": self.stopped,
            "message": self.message,
            "error": self.error,
            "duration_s": round(time.perf_counter() - self.started, 3),
            "frozen": self._frozen(names),
            "nonfinite_parameters": self._nonfinite_parameters(names),
            "tensors_checked": len(self.tracked),
            "loss": _series([None if t is None else float(t) for t in self.losses]),
            "grad_norm": _series([float(t) for t in self.grad_norms]),
            "loss_scale": _scale_report([float(t) for t in self.scales]),
            "syncs": self._syncs(),
            "graphs": self._graphs(),
            "saved_bytes": {"values": self.saved_per_step, "growth_per_step": _growth(self.saved_per_step)},
            "cuda_memory": {"values": self.cuda_memory, "growth_per_step": _growth(self.cuda_memory)} if self.cuda_memory else None,
            "step_time": self._step_time(),
        }

    def _frozen(self, names: dict[int, tuple[str, str]]) -> list[Report]:
        rows = []
        for param, snapshot, mask in self.tracked.values():
            moved = mask.cpu()
            with_grad = int(moved.sum())
            if with_grad == 0:
                continue
            same = int(((param.detach().cpu() == snapshot) & moved).sum())
            if same == 0:
                continue
            module, name = names.get(id(param), ("", f"parameter {tuple(param.shape)}"))
            rows.append({
                "name": name, "module": module, "dtype": str(param.dtype).removeprefix("torch."), "numel": param.numel(),
                "elements_with_gradient": with_grad, "frozen_fraction": same / with_grad,
            })
        return sorted(rows, key=lambda r: (-r["frozen_fraction"], -r["numel"], r["name"]))

    def _nonfinite_parameters(self, names: dict[int, tuple[str, str]]) -> list[str]:
        return [
            names.get(id(param), ("", f"parameter {tuple(param.shape)}"))[1]
            for param, _, _ in self.tracked.values()
            if param.is_floating_point() and not bool(torch.isfinite(param.detach()).all())
        ]

    def _syncs(self) -> list[Report]:
        rows = []
        measured = range(2, self.steps + 1) if self.steps >= 2 else range(1, self.steps + 1)
        for (path, line, kind), per_interval in self.syncs.items():
            # interval k holds what ran between step k-1 and step k; step 1 includes set-up
            in_steps = [per_interval.get(k - 1, 0) for k in measured]
            seen = sum(1 for n in in_steps if n)
            rows.append({
                "path": path, "line": line, "kind": kind, "count": sum(per_interval.values()),
                "steps_seen": seen, "steps_measured": len(in_steps),
                "per_step": sum(in_steps) / len(in_steps) if in_steps else 0.0,
                "every_step": bool(in_steps) and seen >= 0.9 * len(in_steps),
            })
        return sorted(rows, key=lambda r: (not r["every_step"], -r["per_step"], r["path"], r["line"]))

    def _graphs(self) -> list[Report]:
        rows = []
        for name, sizes in self.graphs.items():
            growth = _growth(sizes)
            if growth > 0:
                rows.append({"name": name, "nodes": sizes, "growth_per_step": growth})
        return sorted(rows, key=lambda r: -r["growth_per_step"])

    def _step_time(self) -> Report | None:
        if not self.boundaries:
            return None
        start = self.first_forward if self.first_forward is not None and self.first_forward < self.boundaries[0] else self.started
        times = [self.boundaries[0] - start] + [b - a for a, b in zip(self.boundaries, self.boundaries[1:])]
        rest = statistics.median(times[1:]) if len(times) > 1 else None
        return {"values": [round(t, 6) for t in times], "first_s": times[0], "median_rest_s": rest}


def _series(values: list[float | None]) -> Report:
    finite = [v for v in values if v is not None and v == v and abs(v) != float("inf")]
    nonfinite = [i + 1 for i, v in enumerate(values) if v is not None and not (v == v and abs(v) != float("inf"))]
    return {
        "values": values,
        "nonfinite_steps": nonfinite,
        "first": finite[0] if finite else None,
        "last": finite[-1] if finite else None,
        "median": statistics.median(finite) if finite else None,
        "max": max(finite) if finite else None,
    }


def _scale_report(scales: list[float]) -> Report | None:
    if not scales:
        return None
    # GradScaler halves its scale after each step it skipped for inf/NaN gradients
    skipped = sum(1 for a, b in zip([scales[0]] + scales, scales) if b < a)
    return {"values": scales, "first": scales[0], "last": scales[-1], "decreases": skipped}


def _growth(values: list[int]) -> float:
    """Growth per step over steps 2..N when the series grows at least 80% of the time, else 0."""
    tail = values[1:] if len(values) > 2 else values
    if len(tail) < 2 or tail[-1] <= tail[0]:
        return 0.0
    rises = sum(1 for a, b in zip(tail, tail[1:]) if b > a)
    return (tail[-1] - tail[0]) / (len(tail) - 1) if rises >= 0.8 * (len(tail) - 1) else 0.0


def _parameter_names() -> dict[int, tuple[str, str]]:
    """id(parameter) -> (module class, dotted name), from the largest live module that holds it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance() on some lazy torch objects warns
        modules = [m for m in gc.get_objects() if isinstance(m, torch.nn.Module)]
    counted = sorted(((sum(1 for _ in m.parameters()), i, m) for i, m in enumerate(modules)), key=lambda t: (-t[0], t[1]))
    names: dict[int, tuple[str, str]] = {}
    for _, _, module in counted:
        for name, param in module.named_parameters():
            names.setdefault(id(param), (type(module).__name__, name))
    return names


def _graph_sizes(frame: FrameType | None) -> dict[str, int]:
    """Autograd nodes reachable from each variable of the script's frames on the stack (and one level
    of attributes and containers: `self.history`)."""
    sizes: dict[str, int] = {}
    seen_objects: set[int] = set()
    for user_frame in _user_frames(frame):
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
                    sizes[label] = _count_nodes(roots)
    return sizes


def _candidates(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    """The variable itself when it may hold tensors, else its attributes that may (`self.history`)."""
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


def _count_nodes(roots: list[Any]) -> int:
    seen: set[Any] = set()
    stack = list(roots)
    while stack and len(seen) < MAX_GRAPH_NODES:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return len(seen)


def _patch(owner: Any, name: str, before: Callable[..., Any] | None = None, after: Callable[..., Any] | None = None) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if before is not None:
            before(sys._getframe(1), *args)
        result = original(*args, **kwargs)
        if after is not None:
            after(result, *args)
        return result

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)


def run(request: dict[str, Any]) -> None:
    """Run the script of `request` under the instruments and write the report to its path."""
    script, report_path = request["script"], request["report"]
    if request["device"] == "cuda" and not torch.cuda.is_available():
        Recorder(script, request["steps"], "cuda", report_path).finish("error", "no CUDA device is available", "--device cuda needs a CUDA device")
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not request.get("threads_set"):
        torch.set_num_threads(1)
    importlib.import_module("torch._dynamo")  # the first optimizer step imports it (~1 s): keep that out of step 1's time

    recorder = Recorder(script, request["steps"], device, report_path)
    _install(recorder)
    watchdog = threading.Timer(request["timeout"], _on_timeout, (recorder, request["timeout"]))
    watchdog.daemon = True
    watchdog.start()
    sys.argv = [script, *request["args"]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with torch.autograd.graph.saved_tensors_hooks(recorder.pack, _unpack), _SyncMode(recorder):
            runpy.run_path(script, run_name="__main__")
    except StopRun:
        pass
    except SystemExit as exc:
        recorder.finish("exit", f"the script exited (code {exc.code}) after {recorder.steps} optimizer steps")
    except BaseException as exc:  # the script's own error: report what ran before it
        _print_script_traceback(exc)
        recorder.finish("error", f"the script raised {type(exc).__name__} after {recorder.steps} optimizer steps", _error_line(exc))
    watchdog.cancel()
    recorder.finish("finished", f"the script finished after {recorder.steps} optimizer steps")


def _unpack(saved: _SavedTensor) -> torch.Tensor:
    return saved.tensor


def _install(recorder: Recorder) -> None:
    """The global hooks and patches; the saved-tensor hooks and the mode are entered around the script."""
    register_optimizer_step_pre_hook(recorder.before_step)
    register_optimizer_step_post_hook(recorder.after_step)

    def first_forward(*_: Any) -> None:
        recorder.forward()
        handle.remove()

    handle = torch.nn.modules.module.register_module_forward_pre_hook(first_forward)
    _patch(torch.amp.GradScaler, "scale", after=lambda result, scaler, loss, *_: recorder.scale(loss, result))
    _patch(torch.amp.GradScaler, "update", after=lambda result, scaler, *_: recorder.scale_updated(scaler))
    for name, kind in CUDA_CALLS.items():
        _patch(torch.cuda, name, before=lambda frame, *_, kind=kind: recorder.sync(kind, frame))
    if recorder.device == "cuda":
        torch.cuda.set_sync_debug_mode("warn")  # syncs inside kernels launched by the script's own lines
        _capture_sync_warnings(recorder)


def _capture_sync_warnings(recorder: Recorder) -> None:
    shown = warnings.showwarning

    def showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if "synchronizing" not in str(message):
            shown(message, category, filename, lineno, file, line)
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(STDLIB_DIR) and not frame.f_code.co_filename.startswith(SITE_DIRS):
            frame = frame.f_back  # the warnings module itself
        if not recorder.in_recorded_sync:
            recorder.sync("sync inside an op", frame)

    warnings.filterwarnings("always", message=".*synchronizing")
    warnings.showwarning = showwarning


def _print_script_traceback(exc: BaseException) -> None:
    """The traceback as Python would print it for the script alone, without the runner's frames."""
    tb = exc.__traceback__
    while tb is not None and _is_internal(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


def _error_line(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_internal(f.filename)]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _on_timeout(recorder: Recorder, timeout: float) -> None:
    if recorder.steps == 0:
        message = f"no optimizer step within {timeout:g} s: the script must call an optimizer's step() (or needs a longer --timeout)"
    else:
        message = f"stopped by the {timeout:g} s timeout after {recorder.steps} optimizer steps"
    recorder.finish("timeout", message)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str]) -> None:
    run(json.loads(argv[0]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # do not wait for the script's worker threads or processes


if __name__ == "__main__":
    main(sys.argv[1:])
