"""torch.distributions: a distribution lives where its parameters are, and draws its samples there.
`Normal(0, 1)` is built from numbers, so `noise.sample()` is a host tensor whatever device the step
uses, and `z.to(device)` copies it every step (TL406); `Normal(mu, sigma)` of a policy's outputs
samples on their device. A quasi-random engine, `torch.quasirandom.SobolEngine`, draws on the host
always: `rng.draw(n).to(device)` copies its draw every step."""

from __future__ import annotations

from typing import Callable

import libcst as cst

from trainlint.model.lattice import HOST, UNKNOWN_DEVICE, Kind, Value

DISTRIBUTIONS = "torch.distributions."
SAMPLING = frozenset({"sample", "rsample", "sample_n"})
QUASIRANDOM = "torch.quasirandom."  # (its engines keep their state, and draw, on the CPU)
QUASIRANDOM_DRAWS = frozenset({"draw", "draw_base2"})


def distribution(qual: str, call: cst.Call, evaluate: Callable[[cst.BaseExpression], Value], default_device: str) -> Value | None:
    """`Normal(mu, sigma)`, `torch.distributions.Categorical(logits=x)`: an object on the device of its
    tensor parameters, or, built from numbers only, where torch puts a tensor made from a number (the
    default device); None for any other call."""
    if qual.startswith(QUASIRANDOM) and qual.rpartition(".")[2][:1].isupper():
        return Value(Kind.OBJECT, HOST, origin=qual)
    if not qual.startswith(DISTRIBUTIONS) or not qual.rpartition(".")[2][:1].isupper():
        return None
    given = [evaluate(a.value) for a in call.args if not a.star]
    devices = {v.device for v in given if v.is_tensor}
    if not devices and given and all(v.kind is Kind.NUMBER for v in given):
        devices = {default_device}
    return Value(Kind.OBJECT, devices.pop() if len(devices) == 1 else UNKNOWN_DEVICE, origin=qual)


def sampled(base: Value, method: str) -> Value | None:
    """What a distribution's `sample()` (no graph) or `rsample()` gives: a tensor where it lives (where
    that is not known, nothing: `Beta(alpha, alpha)` of two values the analysis cannot see)."""
    if base.kind is Kind.OBJECT and (base.origin or "").startswith(QUASIRANDOM) and method in QUASIRANDOM_DRAWS:
        return Value(Kind.TENSOR, HOST, False, origin=f"{base.origin}.{method}")
    if base.kind is not Kind.OBJECT or not (base.origin or "").startswith(DISTRIBUTIONS) or method not in SAMPLING or base.device == UNKNOWN_DEVICE:
        return None
    return Value(Kind.TENSOR, base.device, False if method == "sample" else None, origin=f"{base.origin}.{method}")


def drawn(origin: str) -> bool:
    """Whether a tensor's origin ("torch.distributions.Normal.sample") is a distribution's draw."""
    return origin.startswith(DISTRIBUTIONS) and origin.rpartition(".")[2] in SAMPLING or origin.startswith(QUASIRANDOM) and origin.rpartition(".")[2] in QUASIRANDOM_DRAWS
