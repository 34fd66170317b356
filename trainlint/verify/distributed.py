"""The instruments of one rank in a multi-process run (torchrun): collectives counted per step, a
checksum of the parameters after each step (ranks that should agree can be compared), and a report
written when the launcher stops this rank because another one failed. Imports torch."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import weakref
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from trainlint.verify.grad_norms import local
from trainlint.verify.live_objects import user_frames
from trainlint.verify.run_invariants import _site

# torch.distributed's collectives as the script (or FSDP, which calls them from Python) reaches them
# (the `_single` ones are FSDP2's; names a torch version lacks are skipped)
COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_single", "all_gather_coalesced",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "broadcast", "reduce", "barrier", "all_to_all",
    "all_to_all_single", "gather", "scatter", "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
    "send", "recv", "isend", "irecv",
)
DDP_BUCKET = "all_reduce (DDP gradient bucket)"


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size, from the launcher's environment (0 and 1 alone)."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


class RankEvidence:
    """What one rank adds to the report: collectives per step, parameter checksums, sharding."""

    def __init__(self, recorder: Any, sessions: str | None = None, node: int = 0) -> None:
        self.recorder, self.sessions, self.node = recorder, sessions, node
        self.collectives: dict[str, Counter[int]] = {}
        self.checksums: list[torch.Tensor] = []
        self.sharded = False
        self.hooked: set[int] = set()  # DDP modules whose gradient buckets are counted
        self.in_bucket_hook = False
        self.grad_checksums: list[torch.Tensor] = []  # at each step, before the update: DDP must have averaged them
        self.wrapped: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()  # DDP wrappers and the modules they wrap
        self.wrapped_at: dict[str, Any] | None = None
        self.moved_after_wrap: dict[str, Any] | None = None

    def install(self) -> None:
        """Count the collectives; stop with a report on the launcher's SIGTERM."""
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._counting(name, original))
        torch.nn.modules.module.register_module_forward_pre_hook(self.recorder.guarded(self._before_forward))
        ddp_init = torch.nn.parallel.DistributedDataParallel.__init__
        wrapped = self.recorder.guarded(self._wrapped)

        def init(wrapper: Any, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            ddp_init(wrapper, module, *args, **kwargs)
            wrapped(wrapper, module, sys._getframe(1))

        init.__wrapped__ = ddp_init  # type: ignore[attr-defined]
        torch.nn.parallel.DistributedDataParallel.__init__ = init  # type: ignore[method-assign]
        _report_on_sigterm(self.recorder)
        if os.getsid(0) == os.getpid():  # torchrun made this rank a session of its own: name it, to be ended
            # in a node-local folder: on a shared gather folder another node's pids would be ended here
            where = os.path.join(self.sessions, f"rank{self.recorder.rank}") if self.sessions else self.recorder.report_path
            with open(f"{where}.session", "w", encoding="ascii") as out:
                out.write(str(os.getpid()))

    def _counting(self, name: str, original: Any) -> Any:
        count = self.recorder.guarded(self.count)

        def collective(*args: Any, **kwargs: Any) -> Any:
            count(name)
            return original(*args, **kwargs)

        collective.__wrapped__ = original  # type: ignore[attr-defined]
        return collective

    def count(self, kind: str) -> None:
        if self.in_bucket_hook and kind != DDP_BUCKET:
            return
        self.collectives.setdefault(kind, Counter())[self.recorder.steps] += 1

    def _before_forward(self, module: torch.nn.Module, *_: Any) -> None:
        """DDP all-reduces gradients from C++: count its buckets through a comm hook (the default
        all-reduce), registered at the wrapper's first forward unless the script registered one."""
        if id(module) in self.hooked:
            return
        if type(module).__name__ in ("FullyShardedDataParallel", "FSDPModule") or any(
            type(p).__name__ == "DTensor" for p in module.parameters(recurse=False)
        ) or "FSDP" in type(module).__name__:
            self.sharded = True
        if not isinstance(module, torch.nn.parallel.DistributedDataParallel):
            return
        self.hooked.add(id(module))
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        count = self.count

        def counted_allreduce(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects annotations other than its own
            count(DDP_BUCKET)
            self.in_bucket_hook = True  # its dist.all_reduce is this bucket's, counted once
            try:
                return allreduce_hook(state, bucket)
            finally:
                self.in_bucket_hook = False

        try:
            module.register_comm_hook(module.process_group, counted_allreduce)
        except RuntimeError:  # the script's own hook is in place: its collectives go uncounted
            pass

    def _wrapped(self, wrapper: torch.nn.Module, module: torch.nn.Module, frame: Any) -> None:
        self.wrapped.add(wrapper)
        self.wrapped.add(module)
        site = next(user_frames(frame), None)
        if site is not None and self.wrapped_at is None:
            self.wrapped_at = _site(site)

    def moved(self, module: torch.nn.Module, frame: Any) -> None:
        """The script converted `module` (device or dtype): after wrapping, DDP's buckets no longer
        hold its parameters, and their gradients are not averaged."""
        if self.moved_after_wrap is None and module in self.wrapped:
            site = next(user_frames(frame), None)
            if site is not None:
                self.moved_after_wrap = {**_site(site), "step": self.recorder.steps}

    def before_step(self, params: list[torch.Tensor]) -> None:
        """A checksum of this rank's gradients as the optimizer is about to apply them (no sync)."""
        grads = [local(p.grad.detach()) for p in params if p.grad is not None and not p.grad.is_sparse]
        self.grad_checksums.append(torch.stack([g.double().sum() for g in grads]).sum() if grads else torch.zeros((), dtype=torch.float64))

    def after_step(self, params: list[torch.Tensor]) -> None:
        """A checksum of this rank's parameters (no sync: read at the end)."""
        if any(type(p).__name__ == "DTensor" for p in params):
            self.sharded = True
        shards = [local(p.detach()) for p in params]
        self.checksums.append(torch.stack([t.double().sum() for t in shards]).sum() if shards else torch.zeros((), dtype=torch.float64))

    def report(self) -> dict[str, Any]:
        steps = self.recorder.steps
        measured = range(2, steps + 1) if steps >= 2 else range(1, steps + 1)
        return {
            "node": self.node, "host": socket.gethostname(), "torchrun_node": _int(os.environ.get("GROUP_RANK")),
            "local_rank": _int(os.environ.get("LOCAL_RANK")),
            "checksums": [float(t) for t in self.checksums],
            "grad_checksums": [float(t) for t in self.grad_checksums],
            "ddp": self.wrapped_at is not None, "wrapped_at": self.wrapped_at, "moved_after_wrap": self.moved_after_wrap,
            "sharded": self.sharded,
            "collectives": [
                {"kind": kind, "count": sum(per.values()), "per_step": sum(per.get(k - 1, 0) for k in measured) / max(len(measured), 1)}
                for kind, per in sorted(self.collectives.items())
            ],
        }


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _report_on_sigterm(recorder: Any) -> None:
    """torchrun stops the other ranks with SIGTERM when one fails. A rank blocked in a collective
    never returns to Python to run a signal handler, so the signal is taken by a thread instead."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait() -> None:
        signal.sigwait({signal.SIGTERM})
        recorder.finish("stopped", f"stopped by the launcher after {recorder.steps} optimizer steps (another rank failed or the run was ended)")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    threading.Thread(target=wait, name="trainlint-sigterm", daemon=True).start()
