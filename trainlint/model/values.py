"""What a value is: an abstract kind for expressions, propagated through assignments, attributes,
returns, unpacking, containers and calls (within a module, and across modules through summaries).

A rule asks what a value is ("a tensor on the accelerator that carries a graph?"), not what it is
called. Unknown stays unknown: rules fire on what the analysis knows, and fall back on names only
where their page says why a guess is safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable

import libcst as cst

from trainlint.model.names import dotted, tokens
from trainlint.model.torchnames import (
    DETERMINISTIC_FACTORIES,
    GRAD_SCALER,
    RANDOM_FACTORIES,
    dtype_name,
    is_false,
    is_true,
    literal_string,
)

if TYPE_CHECKING:
    from trainlint.model.facts import Function, Site
    from trainlint.model.training import TrainingModel


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

    @property
    def is_tensor(self) -> bool:
        return self.kind is Kind.TENSOR

    @property
    def on_host(self) -> bool:
        """Known not to live on an accelerator: reading it waits for nothing."""
        if self.kind is Kind.TENSOR:
            return self.device == HOST
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
                    return a
            return UNKNOWN
        return Value(
            self.kind,
            self.device if self.device == other.device else UNKNOWN_DEVICE,
            _join_graph(self.graph, other.graph),
            self.dtype if self.dtype == other.dtype else None,
            self.origin if self.origin == other.origin else None,
            self.enabled if self.enabled == other.enabled else None,
            self.element if self.element == other.element else None,
        )


def _join_graph(a: bool | None, b: bool | None) -> bool | None:
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


def join(values: Iterable[Value]) -> Value:
    out: Value | None = None
    for v in values:
        if v is CYCLE:
            continue
        out = v if out is None else out | v
    return out or CYCLE


# -- knowledge of the API surface ------------------------------------------------------------
TENSOR_NAMESPACES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "torch.distributions")
NOT_TENSOR_FUNCTIONS = frozenset(
    """no_grad enable_grad inference_mode device dtype manual_seed seed compile numel typename save load
    is_tensor is_floating_point set_grad_enabled autocast get_default_dtype set_default_dtype
    set_float32_matmul_precision use_deterministic_algorithms""".split()
)
# tensor methods whose result is a tensor on the receiver's device, keeping its graph
TENSOR_METHODS = frozenset(
    """sum mean clone float half bfloat16 double abs max min norm pow sqrt exp log std var view reshape
    squeeze unsqueeze argmax argmin eq ne gt lt ge le softmax log_softmax sigmoid tanh relu mul add sub
    div matmul mm bmm masked_fill contiguous flatten any all prod cumsum gather expand expand_as permute
    transpose t square neg sign clamp clamp_ type_as repeat narrow chunk split unbind index_select
    masked_select nansum logsumexp topk sort round floor ceil long int bool to_dense isnan isinf
    isfinite logical_and logical_or logical_not where detach_ mul_ add_ div_ sub_ float_power reciprocal
    rsqrt exp_ log1p expm1 trace diag diagonal triu tril nan_to_num count_nonzero unsqueeze_ squeeze_
    view_as reshape_as flip roll""".split()
)
NUMBER_METHODS = frozenset({"item", "tolist", "size", "dim", "numel", "nelement", "element_size", "get_device", "data_ptr", "stride"})
HOST_METHODS = frozenset({"numpy"})
TENSOR_ATTRIBUTES = frozenset({"loss", "logits", "last_hidden_state", "hidden_states", "pooler_output", "grad", "data", "T", "mT", "real", "imag"})
HOST_ATTRIBUTES = frozenset({"shape", "device", "dtype", "ndim", "is_cuda", "requires_grad", "param_groups", "state", "training"})
MODULE_METHODS = frozenset({"to", "cuda", "cpu", "half", "bfloat16", "float", "double", "train", "eval", "requires_grad_", "to_empty", "apply", "type", "xpu"})
MODULE_RESULT_WORDS = frozenset(
    """model net network module criterion loss encoder decoder head backbone generator discriminator
    classifier critic actor policy transformer gpt bert vae unet forward""".split()
)
CONFIG_NAMES = frozenset({"args", "cfg", "config", "opt", "opts", "hparams", "hp", "flags", "FLAGS", "conf"})
PREDICATE_PREFIXES = ("is_", "has_", "should_", "can_", "use_")
# names that, unbound, are modules: `vae.cpu()` offloads a model, it reads no value
MODULE_NAME_WORDS = frozenset(
    """model net network module vae unet encoder decoder backbone generator discriminator classifier critic
    actor policy transformer gpt bert teacher student pipeline pipe""".split()
)
HOST_CALL_WORDS = frozenset({"tokenizer", "tokenize", "encode", "decode", "processor", "feature", "extractor", "json", "yaml", "open", "read"})
COLLECTION_BUILTINS = frozenset({"list", "tuple", "dict", "set", "sorted", "zip", "enumerate", "range", "map", "filter", "reversed"})
NUMBER_BUILTINS = frozenset({"float", "int", "len", "round", "abs", "sum", "min", "max", "bool", "hash", "ord"})


def device_of_argument(expr: cst.BaseExpression | None) -> str:
    """`"cpu"` -> host; `"cuda"`, `device`, `torch.device("cuda")` -> accelerator-or-unknown."""
    text = literal_string(expr)
    if text is not None:
        return HOST if text.split(":")[0] == "cpu" else ACCEL
    if isinstance(expr, cst.Call) and expr.args:
        return device_of_argument(expr.args[0].value)
    return UNKNOWN_DEVICE


class ValueModel:
    """Evaluates expressions of one module to Values, memoised per node and use site."""

    def __init__(self, model: "TrainingModel") -> None:
        self.model = model
        self._memo: dict[tuple[int, int], Value] = {}
        self._attr_memo: dict[tuple[str | None, str], Value] = {}
        self._returns_memo: dict[int, Value] = {}
        self._in_progress: set[object] = set()
        self._joins_memo: dict[tuple[object, ...], Value] = {}

    # -- entry point -----------------------------------------------------------------------------
    def of(self, expr: cst.BaseExpression, function: "Function | None", at: "Site | None" = None) -> Value:
        key = (id(expr), at.order if at is not None else -1)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        if key in self._in_progress:
            return CYCLE
        self._in_progress.add(key)
        try:
            value = self._evaluate(expr, function, at)
        finally:
            self._in_progress.discard(key)
        if value is not CYCLE:
            self._memo[key] = value
        return value

    # -- expressions -------------------------------------------------------------------------------
    def _evaluate(self, expr: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> Value:
        kind = expr.__class__  # type tests: isinstance on libcst's ABCs is slow, and this runs per expression
        if kind in (cst.Integer, cst.Float, cst.Imaginary):
            return NUMBER
        if kind in (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
            return STRING
        if kind is cst.Name:
            return self._name(expr.value, fn, at)
        if kind is cst.Attribute:
            return self._attribute(expr, fn, at)
        if kind is cst.Call:
            return self._call(expr, fn, at)
        if kind is cst.Subscript:
            base = self.of(expr.value, fn, at)
            if base.kind is Kind.TENSOR:
                return base
            if base.kind is Kind.COLLECTION and base.element is not None:
                return base.element
            if base.kind is Kind.HOST_ARRAY:
                return HOST_DATA
            return UNKNOWN
        if kind is cst.BinaryOperation:
            return self._arithmetic([self.of(expr.left, fn, at), self.of(expr.right, fn, at)])
        if kind is cst.UnaryOperation:
            inner = self.of(expr.expression, fn, at)
            if isinstance(expr.operator, cst.Not):
                return inner if inner.kind is Kind.TENSOR else BOOL
            return inner
        if kind is cst.Comparison:
            sides = [self.of(expr.left, fn, at), *(self.of(c.comparator, fn, at) for c in expr.comparisons)]
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                return BOOL
            tensors = [s for s in sides if s.kind is Kind.TENSOR]
            if tensors:
                return replace(tensors[0], graph=False, dtype="bool", origin=None)
            return BOOL if all(s.kind in (Kind.NUMBER, Kind.STRING, Kind.BOOL, Kind.NONE) for s in sides) else UNKNOWN
        if kind is cst.BooleanOperation:
            return self.of(expr.left, fn, at) | self.of(expr.right, fn, at)
        if kind is cst.IfExp:
            return self.of(expr.body, fn, at) | self.of(expr.orelse, fn, at)
        if kind in (cst.List, cst.Tuple, cst.Set):
            elements = [self.of(e.value, fn, at) for e in expr.elements if isinstance(e, cst.Element)]
            return Value(Kind.COLLECTION, HOST, element=join(elements) if elements else None)
        if kind is cst.Dict:
            values = [self.of(e.value, fn, at) for e in expr.elements if isinstance(e, cst.DictElement)]
            return Value(Kind.COLLECTION, HOST, element=join(values) if values else None)
        if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp):
            return Value(Kind.COLLECTION, HOST, element=self.of(expr.elt, fn, at))
        if kind is cst.DictComp:
            return Value(Kind.COLLECTION, HOST, element=self.of(expr.value, fn, at))
        if kind is cst.Lambda:
            return Value(Kind.OBJECT)
        if kind is cst.Await:
            return self.of(expr.expression, fn, at)
        return UNKNOWN

    @staticmethod
    def _arithmetic(sides: list[Value]) -> Value:
        tensors = [s for s in sides if s.kind is Kind.TENSOR]
        if tensors:
            out = tensors[0]
            for t in tensors[1:]:
                out = Value(
                    Kind.TENSOR,
                    out.device if out.device == t.device else (ACCEL if ACCEL in (out.device, t.device) else UNKNOWN_DEVICE),
                    _join_graph(out.graph, t.graph),
                    out.dtype if out.dtype == t.dtype else None,
                )
            if any(s.kind is Kind.UNKNOWN for s in sides):
                out = replace(out, graph=True if out.graph else None)
            # `(hi - lo) * torch.rand(n) + lo` is still a factory's tensor; mixed with data it is not
            mixed = len(tensors) > 1 or any(s.kind not in (Kind.TENSOR, Kind.NUMBER) for s in sides)
            return replace(out, origin=None) if mixed else out
        if sides and all(s.kind is Kind.NUMBER for s in sides):
            return NUMBER
        if any(s.kind is Kind.HOST_ARRAY for s in sides) and all(s.on_host for s in sides):
            return HOST_DATA
        if any(s.kind is Kind.STRING for s in sides):
            return STRING
        return UNKNOWN

    # -- names ---------------------------------------------------------------------------------
    def _name(self, name: str, fn: "Function | None", at: "Site | None") -> Value:
        m = self.model
        if name in ("True", "False"):
            return BOOL
        if name == "None":
            return NONE
        assigns = m.reaching(fn, name, at)
        if assigns:
            return self._bindings(name, assigns)
        if fn is not None:
            if name in fn.params:
                return self._parameter(fn, name)
            loop_value = self._loop_variable(fn, name, at)
            if loop_value is not None:
                return loop_value
            enclosing = fn.parent
            while enclosing is not None:  # a closure reads its enclosing function's names
                outer = m.reaching(enclosing, name, None)
                if outer:
                    return self._bindings(name, outer)
                if name in enclosing.params:
                    return self._parameter(enclosing, name)
                enclosing = enclosing.parent
            module_level = m.reaching(None, name, None)
            if module_level:
                return self._bindings(name, module_level)
        qual = m.imports.resolve(cst.Name(name))
        if qual is not None:
            return self._imported(qual)
        return _named_like(name)

    def _bindings(self, name: str, assigns: list) -> Value:  # type: ignore[type-arg]
        """The join of what `name` receives from `assigns`. The uses between two bindings, and every
        use in a nested function, see the same ones: joined once, unless one was still being
        evaluated (a later use may see it complete)."""
        key = (name, *map(id, assigns))
        cached = self._joins_memo.get(key)
        if cached is not None:
            return cached
        values = [self._assigned(a, name) for a in assigns]
        value = join(values)
        if not any(v is CYCLE for v in values):
            self._joins_memo[key] = value
        return value

    def _assigned(self, assign, name: str) -> Value:  # type: ignore[no-untyped-def]
        """The value `name` receives from an assignment (unpacking a tuple takes the element)."""
        value = self.of(assign.value, assign.site.function, assign.site)
        if assign.op is not None:
            # `total += loss`, `x /= n`: the old value combined with the right-hand side
            key = ("augmented", id(assign.node))
            if key in self._in_progress:
                return value
            self._in_progress.add(key)
            try:
                before = self._name(name, assign.site.function, assign.site) if "." not in name else UNKNOWN
            finally:
                self._in_progress.discard(key)
            return self._arithmetic([before, value])
        if len(assign.targets) > 1 or assign.unpacked:
            if value.kind is Kind.COLLECTION and value.element is not None:
                return value.element
            if value.kind is Kind.TENSOR:
                return value  # `loss, logits = model(x)`: outputs of a forward pass
            return UNKNOWN
        return value

    def _parameter(self, fn: "Function", name: str) -> Value:
        """A parameter: its annotation, else what this module's calls of the function pass, else its default."""
        annotation = fn.annotations.get(name)
        if annotation:
            value = self._annotation(annotation)
            if value is not None:
                return value
        passed = self._arguments(fn, name)
        if passed is not None:
            return passed
        default = fn.defaults.get(name)
        if default is not None and not (isinstance(default, cst.Name) and default.value == "None"):
            value = self.of(default, None, None)
            if value.kind in (Kind.NUMBER, Kind.STRING, Kind.BOOL):
                return value
        return _named_like(name)

    def _arguments(self, fn: "Function", name: str) -> Value | None:
        """The join of the arguments this module's calls pass for parameter `name` (None if no call)."""
        stars = (fn.node.params.star_arg, fn.node.params.star_kwarg)
        if any(isinstance(p, cst.Param) and p.name.value == name for p in stars):
            return None  # `*args`, `**kwargs`: a collection of what is passed
        index = fn.params.index(name)
        if fn.class_name is not None and fn.params and fn.params[0] in ("self", "cls"):
            index -= 1
        values: list[Value] = []
        for call in self.model.calls_of(fn):
            arg = None
            for position, a in enumerate(a for a in call.node.args if a.keyword is None and not a.star):
                if position == index:
                    arg = a
            for a in call.node.args:
                if a.keyword is not None and a.keyword.value == name:
                    arg = a
                if a.star:
                    return None
            if arg is None:
                continue
            values.append(self.of(arg.value, call.site.function, call.site))
        return join(values) if values else None

    def _annotation(self, text: str) -> Value | None:
        last = text.rsplit(".", 1)[-1]
        if last in ("int", "float", "complex"):
            return NUMBER
        if last == "bool":
            return BOOL
        if last == "str":
            return STRING
        if last == "Tensor":
            return TENSOR
        if last in ("Module", "DistributedDataParallel", "PreTrainedModel"):
            return Value(Kind.MODULE)
        if last in ("Optimizer",):
            return Value(Kind.OPTIMIZER)
        if last == "ndarray":
            return HOST_DATA
        return None

    def _loop_variable(self, fn: "Function", name: str, at: "Site | None") -> Value | None:
        """`for x in xs:` binds x to an element of xs."""
        if at is None:
            return None
        for loop in reversed(at.loops):
            node = loop.node
            if isinstance(node, cst.For) and name in _target_names(node.target):
                iterable = self.of(node.iter, fn, at)
                if iterable.kind is Kind.COLLECTION and iterable.element is not None and isinstance(node.target, cst.Name):
                    return iterable.element
                if iterable.kind is Kind.TENSOR and isinstance(node.target, cst.Name):
                    return iterable
                return UNKNOWN
        return None

    def _imported(self, qual: str) -> Value:
        if qual in ("torch.float16", "torch.half", "torch.bfloat16", "torch.float32", "torch.float"):
            return Value(Kind.OBJECT, HOST, origin=qual)
        if qual.startswith(("numpy", "math")):
            return HOST_DATA
        return UNKNOWN

    # -- attributes ----------------------------------------------------------------------------
    def _attribute(self, expr: cst.Attribute, fn: "Function | None", at: "Site | None") -> Value:
        attr = expr.attr.value
        if isinstance(expr.value, cst.Name) and expr.value.value in CONFIG_NAMES and not self.model.reaching(fn, expr.value.value, at):
            return NUMBER  # `args.w_max`: a setting from the command line or a config file, host data
        base = self.of(expr.value, fn, at)
        if attr in ("grad", "data"):
            return Value(Kind.TENSOR, base.device if base.kind is Kind.TENSOR else UNKNOWN_DEVICE, False, base.dtype)
        if attr in HOST_ATTRIBUTES:
            return Value(Kind.OBJECT, HOST) if attr != "requires_grad" else BOOL
        if base.kind is Kind.TENSOR and attr in TENSOR_ATTRIBUTES:
            return base
        text = dotted(expr)
        if text is not None and text.startswith("self.") and text.count(".") == 1:
            return self.self_attribute(fn, text)
        qual = self.model.imports.resolve(expr)
        if qual is not None:
            return self._imported(qual)
        if attr in TENSOR_ATTRIBUTES:
            return Value(Kind.TENSOR)
        return UNKNOWN

    def self_attribute(self, fn: "Function | None", text: str) -> Value:
        """`self.x`: the join of what every method of the class assigns to it."""
        cls = fn.class_name if fn is not None else None
        key = (cls, text)
        if key in self._attr_memo:
            return self._attr_memo[key]
        if key in self._in_progress:
            return CYCLE
        self._in_progress.add(key)
        try:
            assigns = [
                a for a in self.model.assigns
                if text in a.targets and a.site.function is not None and a.site.function.class_name == cls
            ]
            value = join(self._assigned(a, text) for a in assigns) if assigns else UNKNOWN
        finally:
            self._in_progress.discard(key)
        if value is not CYCLE:
            self._attr_memo[key] = value
        return value

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        m = self.model
        func = call.func
        qual = m.imports.resolve(func)
        if qual is not None:
            value = self._library_call(qual, call, fn, at)
            if value is not None:
                return value
        if isinstance(func, cst.Attribute):
            return self._method_call(func.attr.value, func.value, call, fn, at)
        if isinstance(func, cst.Name):
            name = func.value
            if qual is None:
                if name in ("any", "all") and call.args:
                    inner = self.of(call.args[0].value, fn, at)
                    if inner.kind is Kind.COLLECTION and inner.element is not None and inner.element.is_tensor:
                        # `any(not torch.isfinite(p.grad).all() for p in params)` reads each tensor
                        return Value(Kind.TENSOR, inner.element.device, False, "bool")
                    return BOOL
                if name in ("sum", "min", "max", "abs") and call.args:
                    # `sum(F.mse_loss(q, t) for q in qs)`, `max(a_loss, b_loss)`: tensors in, a tensor out
                    inner = [self.of(a.value, fn, at) for a in call.args if a.keyword is None]
                    elements = [v.element if v.kind is Kind.COLLECTION and v.element is not None else v for v in inner]
                    tensors = [e for e in elements if e.kind is Kind.TENSOR]
                    if tensors:
                        return self._arithmetic(tensors)
                if name in NUMBER_BUILTINS:
                    return NUMBER if name != "bool" else BOOL
                if name in ("str", "repr", "format"):
                    return STRING
                if name in COLLECTION_BUILTINS:
                    inner = self.of(call.args[0].value, fn, at) if call.args else UNKNOWN
                    element = inner.element if inner.kind is Kind.COLLECTION else None
                    return Value(Kind.COLLECTION, HOST, element=element)
                if name in ("getattr", "isinstance", "hasattr", "callable", "type", "id", "print", "super"):
                    return BOOL if name in ("isinstance", "hasattr", "callable") else UNKNOWN
                local = m.local_function(name)
                if local is not None:
                    return self.returns(local)
                cls = m.local_class(name)
                if cls is not None:
                    return m.instance_of_local_class(name)
            if qual is None and (name[:1].isupper() or name.startswith(PREDICATE_PREFIXES)) and not m.reaching(fn, name, at):
                return self._by_words(name, at)  # `Net(cfg)`: an object of a class we cannot see
            callee = self.of(func, fn, at)
            if callee.kind is Kind.MODULE:
                return self._forward(at, callee)
            return self._by_words(name, at)
        callee = self.of(func, fn, at)
        if callee.kind is Kind.MODULE:
            return self._forward(at, callee)
        return UNKNOWN

    def _forward(self, at: "Site | None", module: Value | None = None) -> Value:
        """The output of a forward pass: a tensor with a graph, unless autograd is off there or the
        module is frozen (`requires_grad_(False)`)."""
        no_grad = at is not None and any(w.kind == "no_grad" for w in at.withs)
        frozen = module is not None and module.graph is False
        return Value(Kind.TENSOR, UNKNOWN_DEVICE, False if no_grad or frozen else True)

    def _by_words(self, name: str, at: "Site | None") -> Value:
        if name.startswith(PREDICATE_PREFIXES):
            return BOOL  # `is_peft_model(model)`: a predicate
        words = set(tokens(name))
        if name[:1].isupper():  # `Net(cfg)`: constructing an object, not a forward pass
            return Value(Kind.MODULE) if words & MODULE_NAME_WORDS else Value(Kind.OBJECT)
        if words & HOST_CALL_WORDS:
            return Value(Kind.COLLECTION, HOST)
        if words & MODULE_RESULT_WORDS:
            return self._forward(at)
        return UNKNOWN

    def _library_call(self, qual: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        m = self.model
        namespace, _, last = qual.rpartition(".")
        project = m.project_value(qual)
        if project is not None:
            return project
        if qual in GRAD_SCALER or qual.endswith("ShardedGradScaler"):
            enabled_arg = _kwarg(call, "enabled")
            enabled = False if is_false(enabled_arg) else (True if enabled_arg is None or is_true(enabled_arg) else None)
            if enabled_arg is not None and enabled is None:
                resolved = self.of(enabled_arg, fn, at)
                enabled = None if resolved.kind is not Kind.BOOL else None
            return Value(Kind.SCALER, origin=qual, enabled=enabled)
        if qual.startswith("torch.optim.lr_scheduler.") or "lr_scheduler" in qual:
            return Value(Kind.SCHEDULER, origin=qual)
        if qual.startswith("torch.optim.") and last[:1].isupper():
            return Value(Kind.OPTIMIZER, origin=qual)
        if last == "DataLoader":
            return Value(Kind.DATALOADER, origin=qual)
        if qual in ("copy.deepcopy", "copy.copy"):
            return self.of(call.args[0].value, fn, at) if call.args else UNKNOWN
        if qual.startswith(("numpy.", "math.", "random.", "time.", "os.", "json.", "pickle.")):
            return NUMBER if qual.startswith(("math.", "time.", "random.")) else HOST_DATA
        if last in ("from_pretrained", "from_config", "from_single_file"):
            owner = namespace.rsplit(".", 1)[-1]
            if any(w in owner for w in ("Tokenizer", "Processor", "Config", "Scheduler", "FeatureExtractor")):
                return Value(Kind.OBJECT, HOST, origin=qual)
            # models and pipelines (which hold models and move with `.to()`)
            dtype = dtype_name(_kwarg(call, "torch_dtype") or _kwarg(call, "dtype"), m.imports)
            return Value(Kind.MODULE, dtype=dtype, origin=qual)
        if namespace.startswith("torch.nn") and last[:1].isupper() and not namespace.startswith("torch.nn.utils"):
            return Value(Kind.MODULE, origin=qual)
        if namespace.startswith("torch.nn.parallel") or last in ("DistributedDataParallel", "DataParallel", "FullyShardedDataParallel"):
            return Value(Kind.MODULE, origin=qual)
        if qual in ("torch.compile",) and call.args:
            return self.of(call.args[0].value, fn, at)
        if namespace in TENSOR_NAMESPACES and last[:1].islower():
            if last in NOT_TENSOR_FUNCTIONS or last.startswith(("is_", "get_", "set_", "_")):
                return UNKNOWN if last not in ("is_tensor", "is_floating_point") else BOOL
            return self._torch_function(last, call, fn, at)
        return None

    def _torch_function(self, name: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        device_arg = _kwarg(call, "device")
        dtype = dtype_name(_kwarg(call, "dtype"), self.model.imports)
        if name in DETERMINISTIC_FACTORIES | RANDOM_FACTORIES or name in ("from_numpy", "as_strided", "zeros_like"):
            if name.endswith("_like") and call.args:
                source = self.of(call.args[0].value, fn, at)
                device = device_of_argument(device_arg) if device_arg is not None else (
                    source.device if source.kind is Kind.TENSOR else UNKNOWN_DEVICE
                )
                return Value(Kind.TENSOR, device, False, dtype)
            device = device_of_argument(device_arg) if device_arg is not None else HOST
            return Value(Kind.TENSOR, device, False, dtype, origin=f"torch.{name}")
        args = [self.of(a.value, fn, at) for a in call.args if a.keyword is None]
        elements: list[Value] = []
        for a in args:
            if a.kind is Kind.COLLECTION and a.element is not None:
                elements.append(a.element)
            else:
                elements.append(a)
        tensors = [e for e in elements if e.kind is Kind.TENSOR]
        if not tensors:
            return Value(Kind.TENSOR, UNKNOWN_DEVICE, None, dtype)
        out = self._arithmetic(tensors)
        return replace(out, dtype=dtype or out.dtype)

    def _method_call(self, method: str, receiver: cst.BaseExpression, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        m = self.model
        base = self.of(receiver, fn, at)
        if base is CYCLE and method in MODULE_METHODS | TENSOR_METHODS:
            return CYCLE
        if base.kind is Kind.TENSOR:
            if method in NUMBER_METHODS:
                return NUMBER if method != "tolist" else Value(Kind.COLLECTION, HOST, element=NUMBER)
            if method in HOST_METHODS:
                return HOST_DATA
            if method == "cpu":
                return replace(base, device=HOST)
            if method == "cuda":
                return replace(base, device=ACCEL)
            if method in ("detach", "detach_"):
                return replace(base, graph=False)
            if method == "to":
                return self._moved(base, call)
            if method in TENSOR_METHODS or method.endswith("_"):
                out = base
                if method in ("half", "float", "bfloat16", "double"):
                    out = replace(out, dtype={"half": "float16", "float": "float32", "double": "float64"}.get(method, method))
                if method in ("argmax", "argmin", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "long", "int", "bool", "round", "floor", "ceil"):
                    out = replace(out, graph=False)
                return out
            return UNKNOWN
        if base.kind is Kind.MODULE:
            if method in MODULE_METHODS:
                dtype = base.dtype
                if method in ("half", "bfloat16"):
                    dtype = "float16" if method == "half" else "bfloat16"
                elif method == "float":
                    dtype = "float32"
                elif method == "to":
                    for a in call.args:
                        if a.keyword is None or a.keyword.value == "dtype":
                            d = dtype_name(a.value, m.imports)
                            if d is not None and not isinstance(a.value, cst.SimpleString):
                                dtype = d
                device = base.device
                if method == "cpu":
                    device = HOST
                elif method == "cuda":
                    device = ACCEL
                graph = base.graph
                if method == "requires_grad_":
                    # a frozen module: its forward records no graph (for inputs that need none)
                    graph = False if call.args and is_false(call.args[0].value) else None
                return replace(base, dtype=dtype, device=device, graph=graph)
            if method in ("parameters", "named_parameters", "state_dict", "modules", "children", "buffers"):
                return Value(Kind.COLLECTION, base.device, origin="parameters")
            if method in ("generate", "sample"):
                return Value(Kind.TENSOR, base.device, False)
            if method == "forward":
                return self._forward(at)
            summary = m.method_value(base, method)
            if summary is not None:
                return summary
            return UNKNOWN
        if base.kind in (Kind.NUMBER, Kind.STRING, Kind.BOOL, Kind.HOST_ARRAY, Kind.NONE):
            if method in ("item", "tolist", "cpu", "numpy", "mean", "sum", "max", "min", "std"):
                return NUMBER if base.kind is not Kind.HOST_ARRAY else HOST_DATA
            return STRING if base.kind is Kind.STRING else UNKNOWN
        if base.kind is Kind.COLLECTION:
            if method in ("get", "pop", "popleft") and base.element is not None:
                return base.element
            if method in ("items", "values", "keys", "copy"):
                return base
            if base.device == HOST and method in ("tolist", "item"):
                return NUMBER
            return UNKNOWN
        if base.kind in (Kind.OBJECT, Kind.SCALER, Kind.OPTIMIZER, Kind.SCHEDULER):
            if base.kind is Kind.SCALER and method == "scale" and call.args:
                return self.of(call.args[0].value, fn, at)
            summary = m.method_value(base, method)
            if summary is not None:
                return summary
            return UNKNOWN
        # an unknown receiver: the method's name is the evidence
        if method in ("item",):
            return NUMBER
        if method == "tolist":
            return Value(Kind.COLLECTION, HOST, element=NUMBER)
        if method == "numpy":
            return HOST_DATA
        if method in ("detach",):
            return Value(Kind.TENSOR, UNKNOWN_DEVICE, False)
        if method == "cpu":
            return Value(Kind.UNKNOWN, HOST)
        if method in ("self", "cls"):
            return UNKNOWN
        local = m.bound_method(receiver, method, fn)
        if local is not None:
            return self.returns(local)
        words = set(tokens(method))
        if words & HOST_CALL_WORDS:
            return Value(Kind.COLLECTION, HOST)
        receiver_text = dotted(receiver) or ""
        if method in ("forward", "__call__") or (words & MODULE_RESULT_WORDS and not words & {"get", "load", "build", "make", "create", "save"}):
            return self._forward(at)
        if method in TENSOR_METHODS and (tokens(receiver_text.rsplit(".", 1)[-1]) and "loss" in tokens(receiver_text.rsplit(".", 1)[-1])):
            return Value(Kind.TENSOR)
        return UNKNOWN

    @staticmethod
    def _moved(base: Value, call: cst.Call) -> Value:
        for a in call.args:
            if a.keyword is None or a.keyword.value == "device":
                if isinstance(a.value, (cst.SimpleString, cst.Call, cst.Name, cst.Attribute)):
                    text = literal_string(a.value)
                    if text is not None:
                        return replace(base, device=HOST if text.split(":")[0] == "cpu" else ACCEL)
                    name = dotted(a.value) or ""
                    if name.startswith("torch.") and name.rsplit(".", 1)[-1] in ("float16", "bfloat16", "float32", "float", "half", "long", "int"):
                        continue  # `.to(torch.float16)`: a dtype, not a device
                    return replace(base, device=ACCEL if base.device != ACCEL else ACCEL)
        return base

    # -- functions -----------------------------------------------------------------------------
    def returns(self, function: "Function") -> Value:
        """What a call of a function of this module returns (the join of its `return`s)."""
        key = id(function)
        if key in self._returns_memo:
            return self._returns_memo[key]
        if ("returns", key) in self._in_progress:
            return CYCLE
        self._in_progress.add(("returns", key))
        try:
            values = [self.of(r.value, function, r.site) for r in function.return_facts]
            value = join(values) if values else NONE
            if value.kind is Kind.TENSOR and any(d in ("torch.no_grad", "torch.inference_mode") for d in function.decorators):
                value = replace(value, graph=False)
        finally:
            self._in_progress.discard(("returns", key))
        if value is not CYCLE:
            self._returns_memo[key] = value
        return value


def _named_like(name: str) -> Value:
    """A name the analysis cannot trace: called `loss` or `logits`, in training code it is a tensor;
    called `model`, `vae` or `unet`, a module. Anything else stays unknown."""
    words = tokens(name)
    if words and words[-1] in ("loss", "logits"):  # `total_loss`, not `loss_scaler` or `loss_fn`
        return Value(Kind.TENSOR)
    if words and words[-1] in MODULE_NAME_WORDS:
        return Value(Kind.MODULE)
    return UNKNOWN


def _kwarg(call: cst.Call, name: str) -> cst.BaseExpression | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    return None


def _target_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        out: set[str] = set()
        for e in target.elements:
            out |= _target_names(e.value)
        return out
    return set()
