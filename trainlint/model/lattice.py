"""The value lattice: the abstract kinds of expressions (a tensor with its device, graph and dtype; a
module with its parameter dtype; an optimizer, a scaler, ...) and their join."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Iterable


class Kind(str, enum.Enum):
    TENSOR = "tensor"
    MODULE = "module"
    OPTIMIZER = "optimizer"
    SCALER = "scaler"  # a GradScaler, or a project object that scales, steps and updates
    SCHEDULER = "scheduler"
    DATALOADER = "dataloader"
    NUMBER = "number"
    STRING = "string"
    BOOL = "bool"
    NONE = "none"
    COLLECTION = "collection"  # list, tuple, dict, set, parameters(), a tokenizer's output
    HOST_ARRAY = "host_array"  # numpy arrays and other host data
    OBJECT = "object"  # an instance of a known non-tensor class
    FUNCTION = "function"  # a function as a value: `origin` is a library's or the project's dotted name, or LOCAL_FUNCTION's
    UNKNOWN = "unknown"


HOST, ACCEL, UNKNOWN_DEVICE = "host", "accelerator", "unknown"


@dataclass(frozen=True)
class Value:
    """The abstract value of an expression."""

    kind: Kind = Kind.UNKNOWN
    device: str = UNKNOWN_DEVICE  # tensors: where the data lives; modules: where the parameters live
    graph: bool | None = None  # tensors: carries autograd history (True), detached (False), unknown
    dtype: str | None = None  # tensors and modules (parameter dtype), when known
    origin: str | None = None  # the class or callable that made it: "torch.optim.AdamW", "utils.NativeScaler"
    enabled: bool | None = None  # scalers: `GradScaler(enabled=False)` is the identity
    element: "Value | None" = None  # collections: what an element is, when known
    items: "tuple[Value, ...] | None" = None  # tuples: each element by position (`return event, sync`)
    keys: "tuple[str, ...] | None" = None  # dicts: the constant key of each of `items` (`Munch(encoder=enc)`)

    @property
    def is_tensor(self) -> bool:
        return self.kind is Kind.TENSOR

    def keyed(self, key: str) -> "Value | None":
        """The value a dict (or a namespace) holds under a constant key, where it is known."""
        return self.items[self.keys.index(key)] if self.keys is not None and self.items is not None and key in self.keys else None

    def without_graph(self) -> "Value":
        """The value made where autograd is off (`torch.no_grad()`): a tensor without a graph."""
        return replace(self, graph=False) if self.kind is Kind.TENSOR and self.graph is not False else self

    @property
    def on_host(self) -> bool:
        """Known not to live on an accelerator: reading it waits for nothing."""
        if self.kind in (Kind.TENSOR, Kind.UNKNOWN) and self.device == HOST:
            return True  # (a tensor on the host; what `.cpu()` copies, or is computed from such a copy)
        return self.kind in (Kind.NUMBER, Kind.STRING, Kind.BOOL, Kind.NONE, Kind.HOST_ARRAY)

    def __or__(self, other: "Value") -> "Value":
        """The join of two possible values (a name bound on two paths)."""
        if self == other:
            return self
        if self.kind is not other.kind:
            # a tensor on one path wins over a number seed (`total = 0.0`, `total += loss`)
            for a, b in ((self, other), (other, self)):
                if a.kind is Kind.TENSOR and b.kind in (Kind.NUMBER, Kind.NONE, Kind.UNKNOWN):
                    return replace(a, device=a.device if b.kind is not Kind.UNKNOWN else UNKNOWN_DEVICE)
                if b.kind in (Kind.NONE,):
                    # a scaler on one path and None on the other (`GradScaler() if use_amp else None`)
                    # scales only when the flag asks for it, as `GradScaler(enabled=use_amp)` does
                    return replace(a, enabled=None) if a.kind is Kind.SCALER else a
                if (a.origin and a.kind in (Kind.MODULE, Kind.OBJECT, Kind.FUNCTION) or a.keys) and b.kind is Kind.UNKNOWN and b.origin is None:
                    # an instance of a project class (or a dict of them by key) on one path, unknown on the
                    # other (`criterion, step = model.load_checkpoint(criterion=criterion)` under a flag): its
                    # methods may run
                    return replace(a, device=UNKNOWN_DEVICE, dtype=None)
            if {self.kind, other.kind} == {Kind.NUMBER, Kind.HOST_ARRAY}:
                return HOST_DATA  # a count that numpy results were added to (`total = 0`, `total += np.sum(hits)`)
            if {a.kind, b.kind} == {Kind.MODULE, Kind.OBJECT} and a.origin and b.origin:
                # a project object either way (`model if isinstance(model, Wrapped) else Wrapped(model)`)
                return Value(Kind.OBJECT, UNKNOWN_DEVICE, origin=_either(replace(a, kind=Kind.OBJECT), replace(b, kind=Kind.OBJECT)))
            return UNKNOWN
        return Value(
            self.kind,
            self.device if self.device == other.device else UNKNOWN_DEVICE,
            join_graph(self.graph, other.graph),
            self.dtype if self.dtype == other.dtype else None,
            # (a tensor's origin is the factory that built it from no data: either factory, if both did)
            self.origin if self.origin == other.origin or self.kind is Kind.TENSOR and self.origin and other.origin else _either(self, other),
            self.enabled if self.enabled == other.enabled else None,
            self.element if self.element == other.element else _join_elements(self.element, other.element),
            self.items if self.items == other.items else _join_items(self.items, other.items) if self.keys == other.keys else None,
            self.keys if self.keys == other.keys else None,
        )


# classes an object may be one of (`init_attn(kind)` returning one of several, a trainer handed a
# game of another class by each of six scripts): each one built or handed there, so each one's
# methods run where the object's do (the class-hierarchy guesses of `candidates` stop at 3)
MAX_ALTERNATIVES = 8
# the origin of a module of more classes than that (a list of every layer kind a config may name):
# none of them is followed, and a join with a module of unknown class leaves it so
MANY_CLASSES = "*"


def origins(value: Value) -> tuple[str, ...]:
    """The classes (or library names) a value may be an instance of: "A|B" is one of A and B."""
    return tuple(value.origin.split("|")) if value.origin and value.origin != MANY_CLASSES else ()


# the origin of a function of the module being analysed: "def:<its index in the module's functions>"
# (nested functions of different scopes may share a name); never seen by other modules
LOCAL_FUNCTION = "def:"


def _join_elements(a: "Value | None", b: "Value | None") -> "Value | None":
    """What two collections' elements are either way (`{"loss_ce": ...}` from one loss, `{"loss_bbox": ...}`
    from another): joined where each is known, for collections holding no collections (a bound on depth)."""
    if a is None or b is None or a.element is not None or b.element is not None:
        return None
    return a | b


def _join_items(a: "tuple[Value, ...] | None", b: "tuple[Value, ...] | None") -> "tuple[Value, ...] | None":
    """Two tuples of one length joined place by place (else nothing known by position)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x | y for x, y in zip(a, b))


def _either(a: Value, b: Value) -> str | None:
    """The origin of the join of two objects of different classes (or two functions): one of them
    ("A|B"). For modules, also the known class where the other's is unknown, and `MANY_CLASSES` past
    `MAX_ALTERNATIVES`."""
    module = a.kind is Kind.MODULE
    if module and MANY_CLASSES in (a.origin, b.origin):
        return MANY_CLASSES
    if module and (a.origin or b.origin) and not (a.origin and b.origin):
        # a model of a project class on one path, one of unknown class on the other (`torch.load(f)`
        # of a checkpoint, often the same class): its `forward` may run
        return a.origin or b.origin
    if a.kind not in (Kind.MODULE, Kind.OBJECT, Kind.FUNCTION) or not a.origin or not b.origin:
        return None
    union = sorted({*origins(a), *origins(b)})
    return "|".join(union) if len(union) <= MAX_ALTERNATIVES else MANY_CLASSES if module else None


def join_graph(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is False and b is False:
        return False
    return None


UNKNOWN = Value()
NUMBER = Value(Kind.NUMBER, HOST)
STRING = Value(Kind.STRING, HOST)
BOOL = Value(Kind.BOOL, HOST)
NONE = Value(Kind.NONE, HOST)
HOST_DATA = Value(Kind.HOST_ARRAY, HOST)
TENSOR = Value(Kind.TENSOR)


# what a name is while its own definition is being evaluated (`x = x.to(device)` in a loop): no
# information, dropped from joins and never memoised, so the other definitions decide
CYCLE = Value(Kind.UNKNOWN, origin="<cycle>")

# what a parameter's annotation says by its last name (`x: torch.Tensor`, `n: int`)
ANNOTATED = {
    "int": NUMBER, "float": NUMBER, "complex": NUMBER, "bool": BOOL, "str": STRING, "Tensor": TENSOR, "ndarray": HOST_DATA,
    "Module": Value(Kind.MODULE), "DistributedDataParallel": Value(Kind.MODULE), "PreTrainedModel": Value(Kind.MODULE),
    "Optimizer": Value(Kind.OPTIMIZER),
}


def join(values: Iterable[Value]) -> Value:
    out: Value | None = None
    for v in values:
        if v is CYCLE:
            continue
        out = v if out is None else out | v
    return out or CYCLE


# -- knowledge of the API surface ------------------------------------------------------------

# the origin of a dict read by attribute too (`Munch(encoder=enc)`), and the classes that make one
NAMESPACE = "namespace"
# the origin of what `parser.parse_args()` gives: each attribute a setting, host data
PARSED_OPTIONS = "argparse.Namespace"
NAMESPACE_CLASSES = frozenset({"munch.Munch", "munch.munchify", "easydict.EasyDict", "types.SimpleNamespace", "addict.Dict"})
