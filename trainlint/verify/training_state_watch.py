"""Evaluation of state that only training builds: a module evaluated before its first training-mode
forward when its eval behaviour depends on what those forwards compute.

The case measured is the legacy `torch.nn.utils.spectral_norm`: it starts its power-iteration vectors
`u`, `v` at random and refines them only in training-mode forwards, while an eval-mode forward divides
the weight by `u^T W v` as it stands. Evaluated first, the weight is divided by a random number, not
its largest singular value. `torch.nn.utils.parametrizations.spectral_norm` runs 15 iterations when it
is applied, and `load_state_dict` loads the vectors: neither is reported.
"""

from __future__ import annotations

import sys
import weakref
from types import FrameType
from typing import Any

import torch

from trainlint.verify.live_objects import user_frames
from trainlint.verify.run_invariants import _site

Report = dict[str, Any]
MAX_SITES = 20


class TrainingStateWatch:
    """Where legacy spectral norm was applied, which modules ran a training-mode forward or were
    loaded, and each eval-mode forward that came first."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.applied: weakref.WeakKeyDictionary[torch.nn.Module, Report] = weakref.WeakKeyDictionary()
        self.ready: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()  # trained forward ran, or state loaded
        self.found: dict[int, Report] = {}
        self.modules: dict[int, torch.nn.Module] = {}

    def install(self) -> None:
        """Record where `spectral_norm` is applied and which modules load a state dict."""
        legacy = sys.modules.get("torch.nn.utils.spectral_norm")
        spectral = getattr(legacy, "SpectralNorm", None)
        if spectral is not None:
            original_apply = spectral.apply
            applied = self.recorder.guarded(self._applied)

            def apply(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
                result = original_apply(module, *args, **kwargs)
                applied(module, result, sys._getframe(1))
                return result

            spectral.apply = staticmethod(apply)
        original_load = torch.nn.Module.load_state_dict
        loaded = self.recorder.guarded(self._loaded)

        def load_state_dict(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            result = original_load(module, *args, **kwargs)
            loaded(module)
            return result

        load_state_dict.__wrapped__ = original_load  # type: ignore[attr-defined]
        torch.nn.Module.load_state_dict = load_state_dict  # type: ignore[method-assign]

    def _applied(self, module: torch.nn.Module, hook: Any, frame: FrameType | None) -> None:
        site = next(user_frames(frame), None)
        self.applied[module] = {**(_site(site) if site is not None else {}), "name": getattr(hook, "name", "weight")}

    def _loaded(self, root: torch.nn.Module) -> None:
        for module in root.modules():
            if module in self.applied:
                self.ready.add(module)

    def enter(self, module: torch.nn.Module) -> None:
        """A module's forward starts (called for every module: cheap unless it carries spectral norm)."""
        if not module._forward_pre_hooks or module not in self.applied or module in self.ready:
            return
        if module.training:
            self.ready.add(module)
            return
        if id(module) in self.found or len(self.found) >= MAX_SITES or self.recorder.watch.measuring:
            return
        call = next(user_frames(sys._getframe(1)), None)
        self.modules[id(module)] = module
        self.found[id(module)] = {
            "module_id": id(module), "module_type": type(module).__name__, "applied_at": self.applied[module],
            "called_at": _site(call) if call is not None else None, "after_step": self.recorder.steps,
            "eval_switch": self.recorder.watch.eval_site, **_sigmas(module, self.applied[module]["name"]),
        }

    def report(self, names: dict[int, str]) -> Report:
        """"evaluated_before_training": each module evaluated before its state was built, named."""
        rows = []
        for key, row in self.found.items():
            module = self.modules.get(key)
            name = _module_name(module, names) if module is not None else None
            rows.append({**row, "module": name or row["module_type"]})
        return {"evaluated_before_training": rows}


def _sigmas(module: torch.nn.Module, name: str) -> Report:
    """The norm an eval forward divides the weight by now (`u^T W v`), and the true one (its largest
    singular value), as legacy spectral norm reshapes the weight."""
    try:
        with torch.no_grad():
            weight = getattr(module, name + "_orig").detach().float()
            u, v = getattr(module, name + "_u").float(), getattr(module, name + "_v").float()
            matrix = weight.reshape(u.numel(), -1) if weight.dim() > 1 else weight.reshape(1, -1)
            if matrix.shape[1] != v.numel():  # dim != 0: the hook permutes first
                matrix = weight.transpose(0, 1).reshape(u.numel(), -1)
            used = float(torch.dot(u, matrix.mv(v)))
            true = float(torch.linalg.matrix_norm(matrix, ord=2))
        return {"sigma_used": used, "sigma_true": true}
    except Exception as exc:  # no figures: the finding stands on the order of events
        return {"sigma_error": f"{type(exc).__name__}: {exc}"}


def _module_name(module: torch.nn.Module, parameter_names: dict[int, str]) -> str | None:
    """The module's path in its model, from the name of its `weight_orig` parameter."""
    for param in module.parameters(recurse=False):
        full = parameter_names.get(id(param))
        if full and "." in full:
            return full.rsplit(".", 1)[0]
    return None
