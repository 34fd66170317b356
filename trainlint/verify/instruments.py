"""The instrumented run: execute a training script unmodified and record its health at each optimizer step.

Run in a child process by `trainlint verify run` (`main([REQUEST_JSON])`);
it writes one JSON report to the path the request names. This module installs the hooks:
- global optimizer-step hooks: count steps, snapshot parameters, mask elements with a non-zero
  gradient, take the gradient norm, and stop the script after the requested steps;
- a `TorchFunctionMode`: value reads and copies to the host (syncs), copies to the device, `backward`;
- global module forward hooks: the script's outermost forward calls, in eval mode or not;
- `saved_tensors_hooks`: bytes saved for backward that are still alive;
- patched `torch.cuda` sync and memory calls, GradScaler, LR schedulers, `zero_grad` and the
  DataLoader iterator.
The figures are kept by `recorder.Recorder`.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import threading
import time
import traceback
import warnings
from typing import Any, Callable, NoReturn

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from trainlint.verify.distributed import RankEvidence, rank_and_world
from trainlint.verify.live_objects import calling_frame, is_internal
from trainlint.verify.recorder import Recorder, SavedTensor, StopRun
from trainlint.verify.run_invariants import WATCHED
from trainlint.verify.update_watch import CLASSIFICATION_LOSSES

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
DEVICE_COPIES: dict[Callable[..., Any], str] = {torch.Tensor.cuda: ".cuda()", torch.Tensor.to: ".to(device)"}
CUDA_CALLS = {
    "synchronize": "torch.cuda.synchronize()",
    "empty_cache": "torch.cuda.empty_cache()",
    "reset_peak_memory_stats": "torch.cuda.reset_peak_memory_stats()",
    "memory_summary": "torch.cuda.memory_summary()",
}


class _SyncMode(TorchFunctionMode):
    """Sees every torch function the script calls: value reads and copies between host and device,
    and `backward` (for the loss and whether autocast is on)."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.observe = recorder.guarded(self._observe)

    def _observe(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], frame: Any) -> str | None:
        """Record what the call is (a copy, a backward); the kind of sync it is, or None."""
        kind = VALUE_READS.get(func)
        if kind is not None:
            if not (self.recorder.on_cpu or _on_accelerator(args[0])):
                kind = None
        elif func in HOST_COPIES or func in DEVICE_COPIES:
            target = _target_device(func, args, kwargs)
            if target == "cpu" and _on_accelerator(args[0]) and func in HOST_COPIES:
                kind = HOST_COPIES[func]
            elif target not in (None, "cpu", "meta") and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu":
                self.recorder.event("host-to-device copy", frame)
        elif func is torch.Tensor.backward or func is torch.autograd.backward:
            self.recorder.backward(args[0] if args else kwargs.get("tensors"), frame)
        elif func in WATCHED:
            self.recorder.watch.functional(func, args, kwargs, frame)
        elif func in CLASSIFICATION_LOSSES:
            self.recorder.updates.loss_function(func, args, kwargs)
        return kind

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if self.recorder.watch.measuring:  # our own evaluation forwards
            return func(*args, **kwargs)
        kind = self.observe(func, args, kwargs, sys._getframe(1))
        if kind is None:
            return func(*args, **kwargs)
        self.recorder.guarded(self.recorder.sync)(kind, sys._getframe(1))
        self.recorder.in_recorded_sync = True  # CUDA's sync warning for this call is the same sync
        try:
            return func(*args, **kwargs)
        finally:
            self.recorder.in_recorded_sync = False


def _on_accelerator(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type not in ("cpu", "meta")


def _target_device(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The device type a copy goes to: `x.cpu()` -> "cpu", `x.to("cuda:0")` -> "cuda"; None when it
    is no blocking device copy (a dtype cast, `non_blocking=True`)."""
    if func is torch.Tensor.cpu or func is torch.Tensor.numpy:
        return "cpu"
    if func is torch.Tensor.cuda:
        return "cuda"
    if kwargs.get("non_blocking") or (len(args) > 2 and args[2] is True and not isinstance(args[1], torch.Tensor)):
        return None
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    if isinstance(target, torch.Tensor):
        target = target.device
    try:
        return torch.device(target).type if isinstance(target, (str, torch.device, int)) else None
    except RuntimeError:
        return None


def _patch(recorder: Recorder, owner: Any, name: str, before: Callable[..., Any] | None = None, after: Callable[..., Any] | None = None) -> None:
    """Wrap `owner.name` so that `before(frame, *args)` and `after(result, *args)` run around it;
    their failures are ours (`Recorder.guarded`), the original's are the script's."""
    original = getattr(owner, name, None)
    if original is None:
        return
    before = recorder.guarded(before) if before is not None else None
    after = recorder.guarded(after) if after is not None else None

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
    rank, world_size = rank_and_world()
    if world_size > 1:  # one report per rank, merged by `ranks.merge`
        report_path = f"{report_path}.rank{rank}"
    if request["device"] == "cuda" and not torch.cuda.is_available():
        Recorder(script, request["steps"], "cuda", report_path).finish("error", "no CUDA device is available", "--device cuda needs a CUDA device")
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not request.get("threads_set"):
        torch.set_num_threads(1)
    importlib.import_module("torch._dynamo")  # the first optimizer step imports it (~1 s): keep that out of step 1's time

    journal = request.get("journal")
    if journal is not None and world_size > 1:
        journal = f"{journal}.rank{rank}"
    recorder = Recorder(script, request["steps"], device, report_path, progress=request.get("progress", False) and rank == 0, journal=journal)
    _install(recorder)
    if world_size > 1:
        recorder.rank, recorder.world_size = rank, world_size
        recorder.rank_evidence = RankEvidence(recorder, request.get("sessions"), int(request.get("node") or 0))
        recorder.rank_evidence.install()
    watchdog = threading.Timer(request["timeout"], _on_timeout, (recorder, request["timeout"]))
    watchdog.daemon = True
    watchdog.start()
    sys.argv = [script, *request["args"]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with torch.autograd.graph.saved_tensors_hooks(recorder.guarded(recorder.pack), _unpack), _SyncMode(recorder):
            runpy.run_path(script, run_name="__main__")
    except StopRun:
        pass
    except SystemExit as exc:
        recorder.exit_code = _exit_status(exc)
        recorder.finish("exit", f"the script exited with status {recorder.exit_code} after {recorder.steps} optimizer steps")
    except BaseException as exc:  # the script's own error: report what ran before it
        _print_script_traceback(exc)
        recorder.exit_code = 1  # what Python exits with after an uncaught exception
        recorder.finish("error", f"the script raised {type(exc).__name__} after {recorder.steps} optimizer steps", _error_line(exc))
    watchdog.cancel()
    recorder.finish("finished", f"the script finished after {recorder.steps} optimizer steps")


def _unpack(saved: SavedTensor) -> torch.Tensor:
    return saved.tensor


def _install(recorder: Recorder) -> None:
    """The global hooks and patches; the saved-tensor hooks and the mode are entered around the script."""
    guarded = recorder.guarded
    register_optimizer_step_pre_hook(guarded(recorder.before_step))
    register_optimizer_step_post_hook(guarded(recorder.after_step))
    torch.nn.modules.module.register_module_forward_pre_hook(guarded(recorder.before_forward))
    torch.nn.modules.module.register_module_forward_hook(guarded(recorder.after_forward), with_kwargs=True, always_call=True)
    recorder.watch.install()
    recorder.updates.install()
    recorder.training_state.install()
    recorder.data_workers.install()
    warnings.filterwarnings("ignore", message="Using `torch.compile\\(module\\)` when there are global hooks")  # ours

    def scaled(result: Any, scaler: Any, loss: Any, *_: Any) -> None:
        recorder.scale(loss, result)
        recorder.norms.scaled_by(scaler)

    _patch(recorder, torch.amp.GradScaler, "scale", after=scaled)
    _patch(recorder, torch.amp.GradScaler, "unscale_", before=lambda *_: recorder.norms.unscaled())
    _patch(recorder, torch.amp.GradScaler, "update", after=lambda result, scaler, *_: recorder.scale_updated(scaler))
    _patch(recorder, torch.optim.lr_scheduler.LRScheduler, "step", before=lambda frame, *_: recorder.scheduler_step(frame))
    for owner in (torch.optim.Optimizer, torch.nn.Module):
        _patch(recorder, owner, "zero_grad", before=lambda *_: setattr(recorder, "zero_grad_calls", recorder.zero_grad_calls + 1))
    _patch(recorder, torch, "set_default_dtype", before=lambda frame, dtype, *_: recorder.default_dtype_set(frame, dtype))
    _report_before_os_exit(recorder)
    _watch_clipping(recorder)
    _watch_casts(recorder)
    _time_data_loading(recorder)
    for name, kind in CUDA_CALLS.items():
        _patch(recorder, torch.cuda, name, before=lambda frame, *_, kind=kind: recorder.sync(kind, frame))
    if recorder.device == "cuda":
        torch.cuda.set_sync_debug_mode("warn")  # syncs inside kernels launched by the script's own lines
        _capture_sync_warnings(recorder)


def _report_before_os_exit(recorder: Recorder) -> None:
    """`os._exit(n)` (a script skipping its slow teardown) ends the process at once, with no
    exception to catch: the report is written first, with the steps that ran and the status `n`.
    Only in this process (a forked worker, or a multiprocessing child, exits through it too) and
    only before the report is written (the instruments' own exits come after it)."""
    original = os._exit
    process = os.getpid()

    def _exit(status: int) -> NoReturn:
        if os.getpid() == process and recorder.stopped is None and isinstance(status, int):
            try:
                recorder.exit_code = status
                recorder.finish("exit", f"the script ended the process with os._exit({status}) after {recorder.steps} optimizer steps")
            except BaseException:  # the process ends as the script asked, report or not
                pass
        original(status)

    _exit.__wrapped__ = original  # type: ignore[attr-defined]
    os._exit = _exit


def _watch_clipping(recorder: Recorder) -> None:
    """`clip_grad_norm_` / `clip_grad_value_`: the gradient norm is measured before they change it."""
    import torch.nn.utils.clip_grad as clip_grad

    for kind, name, limit_name in (("norm", "clip_grad_norm_", "max_norm"), ("value", "clip_grad_value_", "clip_value")):
        original = getattr(clip_grad, name)
        measure = recorder.guarded(recorder.norms.clip)

        def clipped(*args: Any, _original: Any = original, _kind: str = kind, _limit: str = limit_name, **kwargs: Any) -> Any:
            parameters = args[0] if args else kwargs.pop("parameters")
            limit = args[1] if len(args) > 1 else kwargs.get(_limit)
            parameters = measure(_kind, parameters, limit, calling_frame(sys._getframe(1)))
            return _original(parameters, *args[1:], **kwargs)

        clipped.__wrapped__ = original  # type: ignore[attr-defined]
        for owner in (clip_grad, torch.nn.utils):
            if getattr(owner, name, None) is original:
                setattr(owner, name, clipped)


def _watch_casts(recorder: Recorder) -> None:
    """`Module._apply` (behind `.to(dtype)`, `.half()`, `.bfloat16()`, `.double()`): where the
    script changed its parameters' dtype."""
    original = torch.nn.Module._apply
    depth = [0]
    cast = recorder.guarded(recorder.cast)
    dtypes = recorder.guarded(lambda module: {n: p.dtype for n, p in module.named_parameters()})

    def apply(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if depth[0]:  # the children of the module the script converts
            return original(module, *args, **kwargs)
        before = dtypes(module)
        depth[0] += 1
        try:
            result = original(module, *args, **kwargs)
        finally:
            depth[0] -= 1
        cast(before, module, sys._getframe(1))
        if recorder.rank_evidence is not None:
            moved(module, sys._getframe(1))
        return result

    moved = recorder.guarded(lambda module, frame: recorder.rank_evidence.moved(module, frame))
    torch.nn.Module._apply = apply  # type: ignore[method-assign]


def _time_data_loading(recorder: Recorder) -> None:
    """Time spent in `next()` on DataLoader iterators: the step waiting for its batch."""
    iterator = torch.utils.data.dataloader._BaseDataLoaderIter
    original = iterator.__next__

    waited = recorder.guarded(recorder.waited_for_data)

    def timed_next(self: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self)
        finally:
            waited(time.perf_counter() - start)

    iterator.__next__ = timed_next  # type: ignore[method-assign]


def _capture_sync_warnings(recorder: Recorder) -> None:
    shown = warnings.showwarning

    def showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if "synchronizing" not in str(message):
            shown(message, category, filename, lineno, file, line)
            return
        if not recorder.in_recorded_sync:
            recorder.guarded(recorder.sync)("sync inside an op", sys._getframe(1))

    warnings.filterwarnings("always", message=".*synchronizing")
    warnings.showwarning = showwarning


def _exit_status(exc: SystemExit) -> int:
    """The status Python would exit with for `sys.exit(code)`; a message is printed as Python does."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _print_script_traceback(exc: BaseException) -> None:
    """The traceback as Python would print it for the script alone, without the runner's frames
    (a syntax error in the script has none of the script's frames: just its file and line)."""
    tb = exc.__traceback__
    while tb is not None and is_internal(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _error_line(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not is_internal(f.filename)]
    if frames:
        where = f" at {frames[-1].filename}:{frames[-1].lineno}"
    elif isinstance(exc, SyntaxError) and exc.filename:
        where = f" at {exc.filename}:{exc.lineno}"
    else:
        where = ""
    # a DataLoader worker's error holds the worker's traceback after its first line: the place goes there
    first, newline, rest = f"{type(exc).__name__}: {exc}".rstrip("\n").partition("\n")
    return f"{first}{where}{newline}{rest}"


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
