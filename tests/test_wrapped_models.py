"""A model handed to a diffusion object that wraps it before its base class calls it (guided-diffusion
and DiT: `diffusion = create_diffusion()` in a package, `diffusion.training_losses(model, x, t)` in the
step, `super().training_losses(self._wrap_model(model), *args)` in `SpacedDiffusion`, and the base's
`model(x_t, t)`): the model's `forward` runs every step, through the wrapper's `__call__`."""

from __future__ import annotations

from pathlib import Path

from tests.test_library_hooks import lint_tree
from trainlint.model.arguments import argument_for
from trainlint.model.lattice import Kind, Value

import libcst as cst

GUIDED = {
    "diffusion/__init__.py": """
        from .respace import SpacedDiffusion


        def create_diffusion(steps=1000):
            return SpacedDiffusion(steps)
    """,
    "diffusion/gaussian.py": """
        import torch


        class GaussianDiffusion:
            def __init__(self, steps):
                self.steps = steps

            def training_losses(self, model, x_start, t):
                noise = torch.randn_like(x_start)
                out = model(x_start + noise, t)
                return {"loss": ((out - noise) ** 2).mean()}
    """,
    "diffusion/respace.py": """
        from .gaussian import GaussianDiffusion


        class SpacedDiffusion(GaussianDiffusion):
            def training_losses(self, model, *args, **kwargs):
                return super().training_losses(self._wrap_model(model), *args, **kwargs)

            def _wrap_model(self, model):
                if isinstance(model, _WrappedModel):
                    return model
                return _WrappedModel(model)


        class _WrappedModel:
            def __init__(self, model):
                self.model = model

            def __call__(self, x, ts, **kwargs):
                return self.model(x, ts, **kwargs)
    """,
    "models.py": """
        import math

        import torch
        from torch import nn


        class DiT(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.proj = nn.Linear(dim, dim)
                self.dim = dim

            def forward(self, x, t):
                half = self.dim // 2
                freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half).to(device=t.device)
                return self.proj(x) + freqs.sum()
    """,
    "train.py": """
        import torch

        from diffusion import create_diffusion
        from models import DiT


        def main(loader):
            model = DiT(64).cuda()
            diffusion = create_diffusion()
            opt = torch.optim.AdamW(model.parameters())
            for x in loader:
                x = x.cuda()
                t = torch.randint(0, 1000, (x.shape[0],), device="cuda")
                loss = diffusion.training_losses(model, x, t)["loss"]
                opt.zero_grad()
                loss.backward()
                opt.step()
    """,
}


def test_a_model_wrapped_by_a_diffusion_object_runs_every_step(tmp_path: Path) -> None:
    assert "models.py:16:TL406" in lint_tree(tmp_path, GUIDED)


def test_a_base_that_never_calls_the_wrapped_model_runs_nothing(tmp_path: Path) -> None:
    files = dict(GUIDED)
    files["diffusion/gaussian.py"] = GUIDED["diffusion/gaussian.py"].replace(
        "out = model(x_start + noise, t)", "self.kept = model\n                out = x_start * 2"
    )
    assert "models.py:16:TL406" not in lint_tree(tmp_path, files)


def test_a_positional_argument_before_star_args_is_known() -> None:
    call = cst.parse_expression("f(model, *args, t=1)")
    assert isinstance(call, cst.Call)
    found = argument_for(call, "0 model")
    assert isinstance(found, cst.Name) and found.value == "model"
    assert argument_for(call, "1 x") is None  # (what `*args` puts there is unknown)
    star_first = cst.parse_expression("f(*args, model)")
    assert isinstance(star_first, cst.Call) and argument_for(star_first, "0 model") is None


def test_a_module_or_a_wrapper_object_is_either_class() -> None:
    joined = Value(Kind.MODULE, origin="m.py::DiT") | Value(Kind.OBJECT, origin="_WrappedModel")
    assert joined.kind is Kind.OBJECT and joined.origin == "_WrappedModel|m.py::DiT"
    assert (Value(Kind.MODULE, origin="m.py::DiT") | Value(Kind.OBJECT)).kind is Kind.UNKNOWN  # (nothing known of one side)
