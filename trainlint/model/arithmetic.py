"""The values of arithmetic: how operands combine (a tensor on the accelerator with one on the host,
numbers with numbers), and which tensors were built on the host from no data."""

from __future__ import annotations

from dataclasses import replace

from trainlint.model.device_arguments import on_device_operands
from trainlint.model.distributions import drawn
from trainlint.model.lattice import ACCEL, HOST, HOST_DATA, NUMBER, STRING, UNKNOWN, UNKNOWN_DEVICE, Kind, Value, join_graph
from trainlint.model.torchnames import DETERMINISTIC_FACTORIES, LEGACY_CONSTRUCTORS, RANDOM_FACTORIES

# the factories whose tensors are built where the default device is, from no data (`torch.normal` with
# `size=`), and `torch.from_numpy` of an array NumPy's factories made here (its origin says so)
HOST_FACTORIES = DETERMINISTIC_FACTORIES | RANDOM_FACTORIES | LEGACY_CONSTRUCTORS | {"normal", "from_numpy", "Tensor"}


def arithmetic(sides: list[Value], scaling: bool = False) -> Value:
    """The value of an arithmetic expression (or a torch function combining tensors) from its operands'
    (`scaling`: a product or quotient, `torch.arange(half) * -scale`)."""
    sides = on_device_operands(sides)
    tensors = [s for s in sides if s.kind is Kind.TENSOR]
    if tensors:
        out = tensors[0]
        for t in tensors[1:]:
            out = Value(
                Kind.TENSOR,
                out.device if out.device == t.device else (ACCEL if ACCEL in (out.device, t.device) else UNKNOWN_DEVICE),
                join_graph(out.graph, t.graph),
                out.dtype if out.dtype == t.dtype else None,
            )
        if any(s.kind is Kind.UNKNOWN for s in sides):
            out = replace(out, graph=True if out.graph else None)
        # `(hi - lo) * torch.rand(n) + lo` and `torch.arange(n) == torch.arange(n)[:, None]` are
        # still built on the host by factories, as is `torch.arange(half) * -scale` scaled by a factor
        # of unknown kind (`scale = math.log(10000) / (dim // 2 - 1)`, `dim` a parameter); mixed with
        # data they are not (an array, a list, a count added: `tokens += (labels != pad).sum()`)
        built = all(built_on_host(t) for t in tensors)
        plain = (Kind.TENSOR, Kind.NUMBER, Kind.UNKNOWN) if scaling else (Kind.TENSOR, Kind.NUMBER)
        mixed = not built or any(s.kind not in plain for s in sides)
        return replace(out, origin=None if mixed else tensors[0].origin)
    if sides and all(s.kind is Kind.NUMBER for s in sides):
        return NUMBER
    if any(s.kind is Kind.HOST_ARRAY for s in sides) and all(s.on_host for s in sides):
        return HOST_DATA
    if sides and all(s.on_host for s in sides) and any(s.kind is Kind.UNKNOWN for s in sides):
        return Value(Kind.UNKNOWN, HOST)  # (computed from host copies and numbers: on the host)
    if any(s.kind is Kind.STRING for s in sides):
        return STRING
    return UNKNOWN


def built_on_host(value: Value) -> bool:
    """A tensor a torch factory built on the host (`torch.arange(n)`), or one computed from such tensors
    and numbers only, or a distribution built from numbers draws (`Normal(0, 1).sample()`): nothing in
    it came from data."""
    origin = value.origin or ""
    return value.kind is Kind.TENSOR and value.device == HOST and (origin.removeprefix("torch.") in HOST_FACTORIES or drawn(origin))
