"""The state of one instrumented run, fed by the hooks of `instruments.py`, and its JSON report.

Nothing here adds a host-device sync to the script's step: values stay on the device until the
report is built (once, at the end).
"""

from __future__ import annotations

import functools
import json
import linecache
import os
import statistics
import sys
import threading
import time
import traceback
import weakref
from collections import Counter
from types import FrameType
from typing import Any, Callable

import torch

from trainlint.verify.grad_norms import GradNorms, local
from trainlint.verify.journal import StepJournal
from trainlint.verify.progress import Progress
from trainlint.verify.run_invariants import InvariantWatch
from trainlint.verify.series import growth, series_summary
from trainlint.verify.training_state_watch import TrainingStateWatch
from trainlint.verify.update_watch import UpdateWatch
from trainlint.verify.data_workers import DataWorkerWatch
from trainlint.verify.live_objects import OWN_DIR, calling_frame, graph_nodes, graph_roots, parameter_owners, saved_bytes, user_frames

Report = dict[str, Any]
Sites = dict[tuple[str, int, str], Counter[int]]  # (path, line, kind) -> calls per step interval


class StopRun(BaseException):
    """Raised from the optimizer-step hook once the requested steps have run (BaseException, so
    that the script's `except Exception` does not swallow it)."""


class SavedTensor:
    """Holds a tensor saved for backward; its death means the graph that saved it was freed.

    Bytes are counted per storage, once however many nodes save it (views, shared inputs).
    """

    __slots__ = ("tensor", "storage", "recorder")

    def __init__(self, tensor: torch.Tensor, recorder: Recorder) -> None:
        self.tensor, self.recorder = tensor.detach(), recorder
        # parameters are saved by every linear layer but live on anyway: count activations only
        if (tensor.is_leaf and tensor.requires_grad) or tensor.layout != torch.strided:
            self.storage = None
            return
        storage = tensor.untyped_storage()
        self.storage = (storage.device, storage.data_ptr())
        holders = recorder.saved_storages.get(self.storage)
        if holders is None:
            recorder.saved_storages[self.storage] = [1, storage.nbytes()]
            recorder.saved_bytes += storage.nbytes()
        else:
            holders[0] += 1

    def __del__(self) -> None:
        holders = self.recorder.saved_storages.get(self.storage) if self.storage is not None else None
        if holders is not None:
            holders[0] -= 1
            if holders[0] == 0:
                del self.recorder.saved_storages[self.storage]
                self.recorder.saved_bytes -= holders[1]


class Recorder:
    """What the hooks saw; `finish()` writes the report."""

    def __init__(self, script: str, steps: int, device: str, report_path: str, progress: bool = False, journal: str | None = None) -> None:
        self.script, self.wanted, self.device, self.report_path = script, steps, device, report_path
        self.journal = StepJournal(journal, device)  # the steps, kept as they end: a process that dies keeps them
        self.progress = Progress(progress)
        self.on_cpu = device == "cpu"
        self.steps = 0  # optimizer steps completed (of the optimizer that stepped most)
        self.optimizer_steps: Counter[int] = Counter()
        self.started = time.perf_counter()
        self.own_time = 0.0  # spent in our own scans, left out of the step times
        self.first_forward: float | None = None
        self.forward_depth = 0
        self.boundaries: list[float] = []
        self.tracked: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}  # param, host snapshot, grad-nonzero mask
        self.complete_masks: set[int] = set()  # tracked parameters whose every element has had a gradient
        self.last_grads: dict[int, weakref.ref[torch.Tensor]] = {}
        self.renewed_grads_steps = 0  # steps whose .grad tensors were new objects (cleared to None before)
        self.zero_grad_calls = 0
        self.names: dict[int, str] = {}
        self.roots: list[torch.nn.Module] = []
        self.norms = GradNorms()
        self.casts: dict[int, Report] = {}  # id(parameter) -> where its module cast it to another dtype
        self.last_loss: torch.Tensor | None = None
        self.losses: list[torch.Tensor | None] = []
        self.scaled: tuple[int, torch.Tensor] | None = None  # id of scaler.scale(loss)'s output, and loss
        self.scaled_losses = 0
        self.scale_updates = 0
        self.scales: list[torch.Tensor] = []
        self.syncs: Sites = {}
        self.events: Sites = {}
        self.in_recorded_sync = False
        self.saved_bytes = 0
        self.saved_storages: dict[tuple[torch.device, int], list[int]] = {}  # -> [holders, bytes]
        self.saved_per_step: list[int] = []
        self.cuda_memory: list[int] = []
        self.graphs: dict[str, list[int]] = {}
        self.graph_bytes: dict[str, int] = {}
        self.data_wait: Counter[int] = Counter()
        self.anomaly_steps: list[int] = []
        self.eval_mode_steps: list[int] = []
        self.scheduler_steps_before_first_step = 0
        self.rank_evidence: Any = None  # distributed.RankEvidence in a multi-process run
        self.watch = InvariantWatch(self)  # what trains, and evaluation in training behaviour
        self.updates = UpdateWatch(self)  # updates happen, learning happens
        self.training_state = TrainingStateWatch(self)  # evaluation before the state training builds
        self.data_workers = DataWorkerWatch(self, f"{report_path}.workers")  # workers' randomness
        self.rank, self.world_size = 0, 1
        self.default_dtype_site: Report | None = None
        self.exit_code: int | None = None  # the status the script asked for with sys.exit()
        self.stopped: str | None = None
        self.finishing = threading.RLock()  # held while the report is written
        self.message = ""
        self.error: str | None = None

    # -- what the hooks report ----------------------------------------------------------------
    def sync(self, kind: str, frame: FrameType | None) -> None:
        """A host-device sync called at `frame`; ignored when torch itself made the call."""
        self._site(self.syncs, kind, calling_frame(frame))

    def event(self, kind: str, frame: FrameType | None, through_torch: bool = False) -> None:
        """Something other than a sync that the script did at `frame` (a forward in eval mode...)."""
        self._site(self.events, kind, calling_frame(frame, through_torch))

    def _site(self, sites: Sites, kind: str, frame: FrameType | None) -> None:
        if frame is not None:
            key = (os.path.abspath(frame.f_code.co_filename), frame.f_lineno, kind)
            sites.setdefault(key, Counter())[self.steps] += 1

    def backward(self, tensor: Any, frame: FrameType | None) -> None:
        """`backward` called at `frame`: keep the loss, and note a backward inside autocast."""
        self.updates.backward()
        if any(torch.is_autocast_enabled(d) for d in ("cuda", "cpu")):
            self.event("backward inside autocast", frame)
        if isinstance(tensor, (list, tuple)):
            tensor = tensor[0] if tensor else None
        if not isinstance(tensor, torch.Tensor) or tensor.numel() != 1:
            return
        if self.scaled is not None and self.scaled[0] == id(tensor):
            tensor = self.scaled[1]
        self.last_loss = tensor.detach().float().reshape(())

    def before_forward(self, module: torch.nn.Module, *_: Any) -> None:
        self.watch.enter(module)
        self.training_state.enter(module)
        if self.forward_depth == 0:  # the outermost module call: the script's own
            if self.first_forward is None:
                self.first_forward = self.clock()
            if torch.is_grad_enabled():
                kind = "forward with autograd on" if module.training else "forward in eval mode with autograd on"
                self.event(kind, sys._getframe(1), through_torch=True)
        self.forward_depth += 1

    def after_forward(self, module: torch.nn.Module, *rest: Any) -> None:
        self.forward_depth = max(0, self.forward_depth - 1)
        self.watch.leave(module, rest)

    def before_step(self, optimizer: torch.optim.Optimizer, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> None:
        if self.stopped is not None:
            with self.finishing:  # (another thread may still be writing it)
                os._exit(0)  # the script caught StopRun and trained on; the report is written
        renewed = False
        self.watch.saw_optimizer(optimizer)
        self.updates.before_step(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        for param in params:
            previous = self.last_grads.get(id(param))
            renewed = renewed or (previous is not None and previous() is not param.grad)
            self.last_grads[id(param)] = weakref.ref(param.grad)
            if id(param) not in self.tracked:
                # one host copy per parameter, at its first step
                values = local(param.detach())
                self.tracked[id(param)] = (param, values.to("cpu", copy=True), torch.zeros_like(values, dtype=torch.bool))
        if self.rank_evidence is not None and len(self.rank_evidence.grad_checksums) == self.steps:  # once per step
            self.rank_evidence.before_step(params)
        if not (args and callable(args[0])) and not (kwargs or {}).get("closure"):
            self.norms.add(params)  # those a clip call did not measure already
        self.renewed_grads_steps += renewed
        if not self.roots and self.tracked:
            start = time.perf_counter()
            self.names, self.roots = parameter_owners()
            self.watch.first_step(self.roots, self.tracked)
            self.own_time += time.perf_counter() - start

    def after_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.updates.after_step(optimizer)
        # elements with a gradient, counted once the step that applied it is done; a mask that every
        # element reached (a dense gradient: after step 1) is complete and costs nothing more
        check = self.steps & (self.steps + 1) == 0  # at steps 0, 1, 3, 7, 15...: is the mask complete?
        for group in optimizer.param_groups:
            for param in group["params"]:
                entry = self.tracked.get(id(param))
                if entry is not None and param.grad is not None and id(param) not in self.complete_masks:
                    grad = local(param.grad.detach())
                    torch.logical_or(entry[2], grad.coalesce().to_dense() if grad.is_sparse else grad, out=entry[2])
                    if check and bool(entry[2].all()):  # free the mask: one True stands for every element
                        self.complete_masks.add(id(param))
                        self.tracked[id(param)] = (entry[0], entry[1], torch.ones((), dtype=torch.bool, device=entry[2].device))
        # a closure (LBFGS) computes the gradients inside step(): measure them now
        self.norms.add(p for group in optimizer.param_groups for p in group["params"])
        self.optimizer_steps[id(optimizer)] += 1
        if self.optimizer_steps[id(optimizer)] <= self.steps:
            return  # a second optimizer in the same step (a GAN's generator)
        self.steps += 1
        self.boundaries.append(self.clock())
        self.journal.step(self.steps, self.updates.skipped_iterations(), self.boundaries[-1], self.first_forward)
        self.progress.show(f"trainlint: step {self.steps}/{self.wanted} of {os.path.basename(self.script)}", force=self.steps == self.wanted)
        self.norms.end_step()
        if self.rank_evidence is not None:
            self.rank_evidence.after_step([p for p, _, _ in self.tracked.values()])
        self.losses.append(self.last_loss)
        self.saved_per_step.append(self.saved_bytes)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.cuda_memory.append(torch.cuda.memory_allocated())
        if torch.is_anomaly_enabled():
            self.anomaly_steps.append(self.steps)
        if any(not root.training for root in self.roots):
            self.eval_mode_steps.append(self.steps)
        start = time.perf_counter()
        last = self.iterations() >= self.wanted
        for name, roots in graph_roots(sys._getframe(1)).items():
            nodes = graph_nodes(roots)
            sizes = self.graphs.setdefault(name, [0] * (self.steps - 1))
            sizes.append(len(nodes))
            if last and growth(sizes) > 0:  # what a growing graph holds, once, at the end
                self.graph_bytes[name] = saved_bytes(nodes, {p.untyped_storage().data_ptr() for p, _, _ in self.tracked.values()})
        self.own_time += time.perf_counter() - start
        if last:
            self._stop()

    def iterations(self) -> int:
        """Training iterations so far: optimizer steps taken, and those a GradScaler skipped."""
        return self.steps + self.updates.skipped_iterations()

    def iteration_skipped(self, skipped: int) -> None:
        """A GradScaler skipped an optimizer step (inf/NaN gradients): it counts towards --steps."""
        self.journal.step(self.steps, self.updates.skipped_iterations(), self.clock(), self.first_forward)
        self.progress.show(f"trainlint: iteration {self.iterations()}/{self.wanted} of {os.path.basename(self.script)} ({skipped} skipped)")
        if self.iterations() >= self.wanted:
            self._stop()

    def _stop(self) -> None:
        skipped = self.updates.skipped_iterations()
        if skipped:
            how = f"stopped after {self.iterations()} iterations: {self.steps} optimizer steps, {skipped} skipped by the GradScaler (inf/NaN gradients)"
        else:
            how = f"stopped after {self.steps} optimizer steps"
        self.finish("steps", how)
        raise StopRun  # the report is written: if the script swallows this, its next step ends the process

    def clock(self) -> float:
        """Seconds since the start on the script's own clock: wall time less the time of our scans."""
        return time.perf_counter() - self.started - self.own_time

    def scheduler_step(self, frame: FrameType | None) -> None:
        if not self.optimizer_steps and calling_frame(frame) is not None:
            self.scheduler_steps_before_first_step += 1

    def scale(self, loss: torch.Tensor, scaled: Any) -> None:
        self.scaled_losses += 1
        if isinstance(loss, torch.Tensor) and isinstance(scaled, torch.Tensor):
            self.scaled = (id(scaled), loss)

    def scale_updated(self, scaler: Any) -> None:
        self.scale_updates += 1
        scale = getattr(scaler, "_scale", None)
        if isinstance(scale, torch.Tensor):
            self.scales.append(scale.detach().float().reshape(()).clone())

    def waited_for_data(self, seconds: float) -> None:
        self.data_wait[self.steps] += seconds

    def pack(self, tensor: torch.Tensor) -> SavedTensor:
        return SavedTensor(tensor, self)

    def cast(self, before: dict[str, torch.dtype], module: torch.nn.Module, frame: FrameType | None) -> None:
        """`module` converted its parameters (`.to(dtype)`, `.half()`, `.double()`): remember the
        script's line that changed a parameter's dtype."""
        site = next(user_frames(frame), None)
        if site is None:
            return
        for name, param in module.named_parameters():
            old = before.get(name)
            if old is not None and old != param.dtype:
                self.casts[id(param)] = _site_of(site, old, param.dtype)

    def default_dtype_set(self, frame: FrameType | None, dtype: Any) -> None:
        """`torch.set_default_dtype(dtype)`: parameters created after it have that dtype uncast."""
        site = next(user_frames(frame), None)
        if site is not None and isinstance(dtype, torch.dtype):
            self.default_dtype_site = _site_of(site, torch.float32, dtype)

    def guarded(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """`hook` whose failure (a fault of ours, never the script's) stops the run with a report
        that says so, instead of surfacing as the script's error."""

        @functools.wraps(hook)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return hook(*args, **kwargs)
            except StopRun:
                raise
            except Exception as exc:
                self.failed(exc)
                raise StopRun from exc

        return wrapper

    def failed(self, exc: BaseException) -> None:
        """The instruments raised `exc`: end the run, blaming trainlint, with no evidence judged."""
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(OWN_DIR)]
        where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
        self.finish(
            "internal-error", f"trainlint's instruments failed after {self.steps} optimizer steps (a fault in trainlint, not in the script)",
            f"{type(exc).__name__}: {exc}{where}",
        )

    # -- the report -------------------------------------------------------------------------
    def finish(self, stopped: str, message: str, error: str | None = None) -> None:
        """Record why the run ended and write the report; only the first call counts, and a call
        from another thread (the timeout, the launcher's SIGTERM) returns once the report is written."""
        with self.finishing:
            if self.stopped is None:
                self._write(stopped, message, error)

    def _write(self, stopped: str, message: str, error: str | None) -> None:
        self.stopped, self.message, self.error = stopped, message, error
        self.progress.clear()
        if stopped == "finished" and self.steps == 0:
            self.message = "the script finished without calling an optimizer's step(): nothing to measure"
        try:
            text = json.dumps(self.report())
        except Exception as exc:  # a failure of ours must not hide how the script ended, nor pass for evidence
            text = json.dumps({
                "script": self.script, "device": self.device, "steps": self.steps, "stopped": "internal-error",
                "message": f"{self.message}; building the report failed (a fault in trainlint, not in the script)",
                "error": f"{type(exc).__name__}: {exc}", "script_error": error, "exit_code": self.exit_code,
            })
        partial = f"{self.report_path}.partial"  # a process killed mid-write leaves no half report
        with open(partial, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, self.report_path)

    def report(self) -> Report:
        """The run's figures, JSON-ready."""
        if self.tracked:
            self.names, self.roots = parameter_owners()  # modules built after the first step too
        return {
            "script": self.script,
            "device": self.device,
            "torch": torch.__version__,
            "requested_steps": self.wanted,
            "steps": self.steps,
            "skipped_steps": self.updates.skipped_iterations(),
            "stopped": self.stopped,
            "message": self.message,
            "error": self.error,
            "exit_code": self.exit_code,
            "duration_s": round(time.perf_counter() - self.started, 3),
            "frozen": self._frozen(),
            "nonfinite_parameters": [self._name(p) for p, _, _ in self.tracked.values() if p.is_floating_point() and not bool(torch.isfinite(p.detach()).all())],
            "tensors_checked": len(self.tracked),
            "instrument_memory": {  # what the checks keep: one host copy of the trained parameters, masks freed once complete
                "snapshot_bytes": sum(snap.nbytes for _, snap, _ in self.tracked.values()),
                "mask_bytes": sum(mask.nbytes for _, _, mask in self.tracked.values()),
                "parameter_bytes": sum(p.nbytes for p, _, _ in self.tracked.values()),
            },
            "loss": series_summary([None if t is None else float(t) for t in self.losses]),
            "grad_norm": series_summary(self.norms.values()),
            "clipping": self.norms.clipping(),
            "loss_scale": self._loss_scale(),
            "syncs": self._site_rows(self.syncs),
            "events": self._site_rows(self.events),
            "graphs": self._graphs(),
            "saved_bytes": {"values": self.saved_per_step, "growth_per_step": growth(self.saved_per_step)},
            "cuda_memory": {"values": self.cuda_memory, "growth_per_step": growth(self.cuda_memory)} if self.cuda_memory else None,
            "step_time": self._step_time(),
            "data_wait": self._data_wait(),
            "zero_grad_calls": self.zero_grad_calls,
            "renewed_grads_steps": self.renewed_grads_steps,
            "scheduler_steps_before_first_step": self.scheduler_steps_before_first_step,
            "anomaly_steps": self.anomaly_steps,
            "eval_mode_steps": self.eval_mode_steps,
            "rank": self.rank,
            "world_size": self.world_size,
            "distributed": self.rank_evidence.report() if self.rank_evidence is not None else None,
            **self.watch.report(self.roots, self.tracked),
            **self.updates.report(self._name),
            **self.training_state.report(self.names),
            **self.data_workers.report(),
        }

    def _name(self, param: torch.Tensor) -> str:
        return self.names.get(id(param), f"parameter {tuple(param.shape)}")

    def _frozen(self) -> list[Report]:
        rows = []
        for param, snapshot, mask in self.tracked.values():
            moved = mask.cpu()
            with_grad = snapshot.numel() if moved.dim() == 0 else int(moved.sum())
            same = int(((local(param.detach()).cpu() == snapshot) & moved).sum()) if with_grad else 0
            if same:
                low = param.dtype in (torch.bfloat16, torch.float16)
                rows.append({
                    "name": self._name(param), "dtype": _dtype_name(param.dtype), "numel": param.numel(),
                    "elements_with_gradient": with_grad, "frozen_fraction": same / with_grad,
                    # the optimizer updates this very tensor: in bf16/fp16 there is no fp32 master copy
                    "no_master_copy": low,
                    "cast_at": self.casts.get(id(param)) or (self.default_dtype_site if low else None),
                })
        return sorted(rows, key=lambda r: (-r["frozen_fraction"], -r["numel"], r["name"]))

    def _measured(self) -> range:
        """The step intervals measured: interval k ran between step k-1 and step k; step 1 includes
        the set-up, so it is left out when there are others."""
        return range(2, self.steps + 1) if self.steps >= 2 else range(1, self.steps + 1)

    def _site_rows(self, sites: Sites) -> list[Report]:
        rows = []
        measured = self._measured()
        for (path, line, kind), per_interval in sites.items():
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
        rows = [
            {"name": name, "nodes": sizes, "growth_per_step": growth(sizes), "saved_bytes_at_end": self.graph_bytes.get(name)}
            for name, sizes in self.graphs.items()
        ]
        return sorted((r for r in rows if r["growth_per_step"] > 0), key=lambda r: -r["growth_per_step"])

    def _step_time(self) -> Report | None:
        if not self.boundaries:
            return None
        start = self.first_forward if self.first_forward is not None and self.first_forward < self.boundaries[0] else 0.0
        times = [self.boundaries[0] - start] + [b - a for a, b in zip(self.boundaries, self.boundaries[1:])]
        rest = statistics.median(times[1:]) if len(times) > 1 else None
        return {"values": [round(t, 6) for t in times], "first_s": times[0], "median_rest_s": rest}

    def _data_wait(self) -> Report | None:
        if not self.data_wait or len(self.boundaries) < 2:
            return None
        measured = self._measured()
        waited = sum(self.data_wait.get(k - 1, 0.0) for k in measured)
        stepped = self.boundaries[-1] - self.boundaries[measured.start - 2] if measured.start >= 2 else 0.0
        return {"per_step_s": waited / len(measured), "fraction": waited / stepped if stepped > 0 else 0.0}

    def _loss_scale(self) -> Report | None:
        if not self.scaled_losses:
            return None
        scales = [float(t) for t in self.scales]
        # GradScaler lowers its scale after each step it skipped for inf/NaN gradients
        lowered = sum(1 for a, b in zip(scales, scales[1:]) if b < a)
        first, last = (scales[0], scales[-1]) if scales else (None, None)
        return {
            "enabled": bool(scales), "values": scales, "first": first, "last": last, "decreases": lowered,
            "scaled_losses": self.scaled_losses, "updates": self.scale_updates,
        }


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _site_of(frame: FrameType, old: torch.dtype, new: torch.dtype) -> Report:
    path = os.path.abspath(frame.f_code.co_filename)
    return {
        "path": path, "line": frame.f_lineno, "code": linecache.getline(path, frame.f_lineno).strip(),
        "from": _dtype_name(old), "to": _dtype_name(new),
    }
