"""The facts one pass extracts from a module: functions, loops, calls, assignments and their context."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from trainlint.model.names import dotted


ONCE_DECORATORS = frozenset({"functools.lru_cache", "functools.cache", "lru_cache", "cache", "functools.cached_property", "cached_property"})


@dataclass(eq=False)
class Function:
    """A function or method definition."""

    node: cst.FunctionDef
    name: str
    class_name: str | None
    class_bases: tuple[str, ...]
    decorators: tuple[str, ...]
    calls: list["Call"] = field(default_factory=list)
    returns: list[cst.BaseExpression] = field(default_factory=list)
    params: tuple[str, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)  # parameter -> dotted annotation
    defaults: dict[str, cst.BaseExpression] = field(default_factory=dict)  # parameter -> default value
    return_facts: list["Return"] = field(default_factory=list)
    parent: "Function | None" = None  # the enclosing function of a nested one (a closure's scope)
    declared_global: set[str] = field(default_factory=set)  # names its `global` statements bind at module level

    @property
    def runs_once(self) -> bool:
        """Memoised (`@lru_cache`): it computes once per argument, not once per step."""
        return any(d in ONCE_DECORATORS for d in self.decorators)

    @property
    def explicit_params(self) -> list[str]:
        """Its parameters without a method's `self`/`cls`: what a call's arguments are matched to
        ("0 model" names the first of these)."""
        return [p for p in self.params if p not in ("self", "cls")] if self.class_name is not None else list(self.params)

    @property
    def qualified(self) -> str:
        return f"{self.class_name}.{self.name}" if self.class_name else self.name


@dataclass(eq=False)
class ClassInfo:
    """A class definition: its resolved bases and its methods."""

    node: cst.ClassDef
    name: str
    bases: tuple[str, ...]
    methods: dict[str, "Function"] = field(default_factory=dict)


@dataclass(eq=False)
class Return:
    """`return value` in a function, with its site."""

    value: cst.BaseExpression
    site: "Site"


@dataclass(eq=False)
class Loop:
    """A `for` or `while` loop; `is_step` once the model knows it performs a training step."""

    node: cst.For | cst.While
    function: Function | None
    parent: "Loop | None"
    direct_calls: list["Call"] = field(default_factory=list)
    uses_grad: bool = False  # reads or writes some `.grad` in its body (a manual update, clipping, logging)
    is_step: bool = False
    end: int = 0  # the order of the last site inside the loop (sites are numbered in source order)

    @property
    def runs_once(self) -> bool:
        """`for _ in range(1):`: one round, no repetition."""
        node = self.node
        return self.counted and len(node.iter.args) == 1 and isinstance(node.iter.args[0].value, cst.Integer) and node.iter.args[0].value.value == "1"  # type: ignore[union-attr, attr-defined]

    @property
    def counted(self) -> bool:
        """`for _ in range(k):`: a loop that repeats a fixed number of times."""
        node = self.node
        return isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and dotted(node.iter.func) == "range"


@dataclass(frozen=True, eq=False)
class WithItem:
    """An enclosing `with` item that matters: autocast, no_grad, anomaly detection, ..."""

    kind: str  # "autocast", "no_grad", "enable_grad", "anomaly", "other"
    call: cst.Call | None
    dtype: str | None = None  # for autocast: "float16", "bfloat16" or None when unknown
    disabled: bool = False  # `autocast(..., enabled=False)`


@dataclass(eq=False, slots=True)  # not frozen: a frozen dataclass is three times slower to make
class Site:
    """Where a fact sits: its function, enclosing loops, gates, handlers and `with` items."""

    function: Function | None
    loops: tuple[Loop, ...]
    gate_depths: tuple[int, ...]
    in_except: bool  # in an `except` handler, a `raise` or an assert's message (the error path), or past a `return`, `raise`, `continue` or `break` of its block (never runs)
    withs: tuple[WithItem, ...]
    order: int
    statement: cst.SimpleStatementLine | None = None  # the statement line, for fixes that insert beside it
    gate_nodes: tuple[cst.If | None, ...] = ()  # the `if` of each entry of gate_depths
    else_of: tuple[cst.If, ...] = ()  # the `if`s whose `else` (or `elif`) branch holds it

    @property
    def innermost_loop(self) -> Loop | None:
        return self.loops[-1] if self.loops else None

    @property
    def grad_off(self) -> bool:
        """Under `torch.no_grad()` or `inference_mode()` (a decorator too), with no `enable_grad()` inside it."""
        modes = [w.kind for w in self.withs if w.kind in ("no_grad", "enable_grad")]
        return bool(modes) and modes[-1] == "no_grad"


@dataclass(eq=False)
class Call:
    """A call expression, with the callee resolved where the module's imports allow."""

    node: cst.Call
    qualname: str | None  # "torch.cuda.synchronize" for a resolved callee
    method: str | None  # "item" for `x.item()`
    receiver: cst.BaseExpression | None  # `x` for `x.item()`
    receiver_text: str | None  # dotted text of the receiver, "self.model"
    name: str | None  # the plain callee name for `f(...)`
    site: Site

    @property
    def discarded(self) -> bool:
        """Made for its effect alone: its result is not used (an expression statement)."""
        line = self.site.statement
        return line is not None and any(isinstance(s, cst.Expr) and s.value is self.node for s in line.body)

    def kwarg(self, name: str) -> cst.BaseExpression | None:
        for arg in self.node.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg.value
        return None

    def kwarg_node(self, name: str) -> cst.Arg | None:
        for arg in self.node.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg
        return None

    def positional(self, index: int) -> cst.BaseExpression | None:
        args = [a for a in self.node.args if a.keyword is None and not a.star]
        return args[index].value if index < len(args) else None

    def arg(self, index: int, name: str) -> cst.BaseExpression | None:
        """The argument given by keyword `name`, else the positional one at `index`."""
        value = self.kwarg(name)
        return value if value is not None else self.positional(index)


@dataclass(eq=False)
class Assign:
    """`a = b`, `a += b`, `a: T = b`; targets are dotted texts (`loss`, `self.hidden`)."""

    node: cst.CSTNode
    targets: tuple[str, ...]
    value: cst.BaseExpression
    op: str | None  # "+=" etc for augmented assignment
    site: Site
    unpacked: bool = False  # `a, b = value`: each target receives an element


@dataclass(eq=False)
class Condition:
    """The test of an `if`, `while` or `assert`: Python control flow on its value."""

    node: cst.BaseExpression
    kind: str  # "if", "while", "assert", "ifexp" (`a if t else b`)
    site: Site


@dataclass(eq=False)
class FormattedValue:
    """An expression interpolated into an f-string."""

    node: cst.FormattedStringExpression
    site: Site
