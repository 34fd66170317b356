"""Training and evaluation mode of modules: the calls that switch it (`m.eval()`, `m.train(False)`,
`m.train()`) and whether a module is provably in training mode at a call.

A module is in training mode from its construction until `.eval()` (or `.train(False)`); `.train()`
puts it back. The mode at a call is found along the function's statements in source order (a switch
later in a loop around the call comes round on the next iteration), and across calls: a function
of this module that switches its argument, a caller that switched what it passes, a function of
another project module whose summary says it keeps the mode or only calls `.train()`
(`parameter_facts`). Anything the analysis cannot follow (a call into another project module that
may switch the module, a module loaded from a checkpoint) leaves the mode unknown, and unknown is
never "training".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Call, Function, Loop, Site
from trainlint.model.names import dotted
from trainlint.model.parameter_facts import mode_effect

if TYPE_CHECKING:
    from trainlint.model.training import TrainingModel

# Wrappers and copies whose result runs the module they are given, in its mode.
PASS_THROUGH = frozenset(
    {"torch.compile", "copy.deepcopy", "copy.copy", "torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel",
     "torch.nn.parallel.DataParallel", "torch.nn.SyncBatchNorm.convert_sync_batchnorm"}
)
# Module methods that return the module itself, mode unchanged.
SAME_MODULE_METHODS = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "xpu", "requires_grad_", "apply", "share_memory"})
# Calls that may be given a module and never switch its mode: Python built-ins and libraries that
# read, print, save or wrap it (a call into the project is followed, or leaves the mode unknown).
HARMLESS_LIBRARIES = frozenset(
    {"torch", "torchvision", "torchinfo", "torchsummary", "thop", "fvcore", "ptflops", "wandb", "tensorboardX", "logging",
     "copy", "numpy", "os", "json", "pickle", "accelerate", "apex", "deepspeed", "tqdm", "mlflow"}
)
BUILTINS = frozenset({"print", "len", "isinstance", "getattr", "hasattr", "setattr", "str", "repr", "id", "type", "list", "sum", "vars", "dir", "callable"})
_MAX_DEPTH = 4


def mode_switch(call: Call) -> bool | None:
    """False for a switch to eval mode (`m.eval()`, `m.train(False)`), True for one to training mode
    (`m.train()`, `m.train(True)`), None for any other call."""
    if call.method == "eval" and not call.node.args:
        return False
    if call.method == "train" and len(call.node.args) <= 1:
        mode = call.arg(0, "mode")
        if mode is None or (isinstance(mode, cst.Name) and mode.value == "True"):
            return True
        if isinstance(mode, cst.Name) and mode.value == "False":
            return False
    return None


def mode_switches(model: "TrainingModel") -> list[Call]:
    """The calls that switch a module's mode, in source order."""
    return sorted((c for c in model.calls if c.receiver_text and mode_switch(c) is not None), key=lambda c: c.site.order)


@dataclass(frozen=True)
class Training:
    """Proof that a module is in training mode at a call: what put it there (a construction or a
    `.train()`), and the calls that carried it there (a caller passing it on)."""

    cause: cst.CSTNode
    how: str  # "constructed", "switched by `.train()`", "put in training mode by `train(...)`"
    through: tuple[Call, ...] = ()


def _key(text: str) -> str:
    """What a switch acts on: `self.model.module` -> `self.model`, `model.module` -> `model`."""
    parts = text.split(".")
    return ".".join(parts[:2]) if parts[0] == "self" and len(parts) > 1 else parts[0]


class ModeAnalysis:
    """Whether modules are provably in training mode, in one module's code."""

    def __init__(self, model: "TrainingModel") -> None:
        self.model = model
        self.switches = mode_switches(model)
        self._effects: dict[tuple[int, str], bool | None | str] = {}
        self._root_memo: dict[tuple[str, int], frozenset[str]] = {}

    # -- relations -----------------------------------------------------------------------------
    def related(self, receiver: str, target: str, fn: Function | None) -> bool:
        """Whether switching `receiver` may switch the module `target` (one contains the other, or one is
        bound from the other in `fn`)."""
        r, t = _key(receiver), _key(target)
        if r == t or (r == "self" and t.startswith("self")) or (t == "self" and r.startswith("self")):
            return True
        if r == "self" or t == "self":
            return False
        return r in self._roots(t, fn) or t in self._roots(r, fn)

    def _roots(self, text: str, fn: Function | None) -> frozenset[str]:
        """The modules a name is bound from in `fn` (`net = model.module`, `m = a if c else b`), as keys."""
        key = (text, id(fn))
        if key not in self._root_memo:
            found: set[str] = set()
            frontier = [text]
            while frontier and len(found) < 20:
                name = frontier.pop()
                for value in self.model.bindings(fn, name):
                    for choice in (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,):
                        bound = dotted(choice)
                        if bound and _key(bound) not in found:
                            found.add(_key(bound))
                            frontier.append(_key(bound))
            self._root_memo[key] = frozenset(found)
        return self._root_memo[key]

    # -- effects of calls --------------------------------------------------------------------------
    def effect(self, fn: Function, target: str, depth: int = 0) -> bool | None | str:
        """What running `fn` does to the mode of `target` (a parameter, `self.x` or a global name):
        True (only `.train()`), None (no switch), "unknown" (it may switch to eval)."""
        key = (id(fn), target)
        if key in self._effects:
            return self._effects[key]
        self._effects[key] = None  # a recursive call adds nothing
        result: bool | None | str = None
        for call in fn.calls:
            if call.site.function is not fn:
                continue
            step = self.call_effect(call, target, fn, depth + 1)
            if step == "unknown" or step is False:
                result = "unknown"
                break
            if step is True:
                result = True
        self._effects[key] = result
        return result

    def call_effect(self, call: Call, target: str, fn: Function | None, depth: int) -> bool | None | str:
        """What one call does to the mode of `target`: a switch (True/False), a function of this module
        run on it (its effect), a call into the project given it ("unknown"), or nothing (None)."""
        switch = mode_switch(call) if call.receiver_text else None
        if switch is not None:
            return switch if self.related(call.receiver_text or "", target, fn) else None
        m = self.model
        given = [a.value for a in call.node.args if dotted(a.value) and self.related(dotted(a.value) or "", target, fn)]
        on_target = call.receiver_text is not None and call.receiver_text not in ("self", "cls") and self.related(call.receiver_text, target, fn)
        callees = m.callees(call)
        if callees:
            if depth > _MAX_DEPTH:
                return "unknown"
            out: bool | None | str = None
            for callee in callees:
                inner = self._inner_target(call, callee, target, given, on_target)
                if inner is None:
                    continue
                e = self.effect(callee, inner, depth)
                if e == "unknown":
                    return "unknown"
                out = True if e is True else out
            return out
        if not given and not on_target:
            return None
        summary = m.project_call_summary(call) if given and not on_target else None
        if summary is not None:  # a function of another project module: what its summary says it does
            return mode_effect(summary, call.node, given)
        if on_target and call.method in SAME_MODULE_METHODS | {"parameters", "named_parameters", "state_dict", "load_state_dict", "modules", "children", "named_modules", "zero_grad", "register_forward_hook"}:
            return None
        if on_target and not given and m.project_call_summary(call) is None and (call.node.func is not None) and self._library_object(call):
            return None
        qual = call.qualname or ""
        if qual and qual.split(".", 1)[0] in HARMLESS_LIBRARIES and m.project_symbol(qual) is None:
            return None
        if call.name in BUILTINS and call.qualname is None and m.callee(call) is None:
            return None
        return "unknown"

    def _library_object(self, call: Call) -> bool:
        """`model(x)`, `model.generate(...)` on a module that is no class of the project: its forward
        and methods are a library's, which do not switch modes."""
        return call.method is not None and call.method not in ("eval", "train")

    def _inner_target(self, call: Call, callee: Function, target: str, given: list, on_target: bool) -> str | None:  # type: ignore[type-arg]
        """The name `target` goes by inside `callee`: the parameter it is passed as, `self...` for a
        method run on it, itself for a global or an attribute of the same object."""
        params = [p for p in callee.params if p not in ("self", "cls")] if callee.class_name else list(callee.params)
        positional = [a for a in call.node.args if a.keyword is None and not a.star]
        for index, arg in enumerate(positional):
            if arg.value in given and index < len(params):
                return params[index]
        for arg in call.node.args:
            if arg.keyword is not None and arg.value in given:
                return arg.keyword.value
        if on_target and callee.class_name is not None:
            return "self"
        if target.startswith("self.") and call.receiver_text in ("self", "cls"):
            return target
        if not target.startswith("self.") and target.split(".")[0] not in callee.params:
            return target  # a global the function may use
        return None

    # -- the mode at a call --------------------------------------------------------------------
    def training_at(self, target: str, site: Site, depth: int = 0) -> Training | None:
        """Proof that module `target` is in training mode at `site`, or None."""
        m = self.model
        fn = site.function
        root = target.split(".")[0]
        start_order = -1
        start_statement: cst.CSTNode | None = None
        entry: Training | None = None
        if root != "self":
            assigns = m.reaching(fn, root, site)
            if assigns:
                if len(assigns) != 1 or assigns[0].unpacked or assigns[0].op is not None:
                    return None  # bound on several paths, unpacked or updated: not followed
                assign = assigns[0]
                entry = self.training_of(assign.value, assign.site, depth + 1)
                start_order, start_statement = assign.site.order, assign.site.statement
        events = self._events(target, fn, site, start_order, start_statement)
        if events is None:
            return None
        last_train = None
        for call, effect in events:
            if effect is True:
                last_train = call
            elif effect is not None:
                return None
        if last_train is not None:
            switcher = last_train.site.function
            if switcher is not None and not function_trains(m, switcher) and not any(l.is_step for l in m.loops if l.function is switcher):
                return None  # `.train()` in code that only evaluates: deliberate (MC dropout, test-time adaptation)
            how = "switched to training mode by `.train()`" if mode_switch(last_train) else f"put in training mode by `{m.module.code_for_node(last_train.node.func)}(...)`"
            return Training(last_train.node, how)
        if start_order >= 0:
            return entry
        if fn is None:
            return None
        return self._from_callers(target, fn, depth) or self._constructed_attribute(target, fn, depth)

    def _events(self, target: str, fn: Function | None, site: Site, start: int, statement: cst.CSTNode | None = None) -> list[tuple[Call, bool | None | str]] | None:
        """The calls of `fn` before `site` (after order `start`) that change `target`'s mode, with
        their effects; a switch to eval later in a loop around `site` (the next iteration) gives None."""
        m = self.model
        calls = fn.calls if fn is not None else [c for c in m.calls if c.site.function is None]
        out: list[tuple[Call, bool | None | str]] = []
        around: set[int] = set()  # the loops round which a later switch comes back to `site`
        for call in calls:
            if call.site.function is not fn or call.site.order <= start or (statement is not None and call.site.statement is statement):
                continue  # (the calls of the assignment that starts the module's life)
            effect = self.call_effect(call, target, fn, 1)
            if effect is None:
                continue
            if call.site.order < site.order:
                out.append((call, effect))
            elif effect is not True:
                around |= {id(loop) for loop in site.loops if loop in call.site.loops and call.site.order <= loop.end}
        # ...unless every such loop switches it to training mode again before `site` in each round
        if around and not all(any(e is True and any(id(l) == a for l in c.site.loops) for c, e in out) for a in around):
            return None
        return out

    def _from_callers(self, target: str, fn: Function, depth: int) -> Training | None:
        """`target` as the callers of `fn` in this module pass it: training mode at one of them."""
        if depth > _MAX_DEPTH:
            return None
        m = self.model
        params = fn.explicit_params
        root = target.split(".")[0]
        for call in m.calls:
            if fn not in m.callees(call) or call.site.function is fn:
                continue
            outer: str | None = None
            if root in params:
                index = params.index(root)
                arg = call.kwarg(root)
                if arg is None:
                    arg = call.positional(index)
                text = dotted(arg) if arg is not None else None
                if text is None:
                    continue
                outer = text + target[len(root):]
            elif root == "self":
                if call.receiver_text not in ("self", "cls"):
                    continue
                outer = target
            elif root not in fn.params:
                outer = target  # a global name
            if outer is None:
                continue
            found = self.training_at(outer, call.site, depth + 1)
            if found is not None:
                return Training(found.cause, found.how, (*found.through, call))
        return None

    def _constructed_attribute(self, target: str, fn: Function, depth: int) -> Training | None:
        """`self.model` built in training mode once, in `__init__`, and switched to eval mode by no method
        of the class (nor its local bases) and by no code of this module on an attribute of that name:
        in training mode in a method that trains it (one that only evaluates may be called from another
        module after `trainer.model.eval()`; a training method is not)."""
        m = self.model
        parts = target.split(".")
        if fn.class_name is None or parts[0] != "self" or len(parts) < 2 or depth > _MAX_DEPTH or not function_trains(m, fn):
            return None
        attribute = ".".join(parts[:2])
        assigns = m.attribute_assigns(fn.class_name, attribute)
        if len(assigns) != 1 or assigns[0].unpacked or assigns[0].op is not None:
            return None
        built = assigns[0]
        if built.site.function is None or built.site.function.name != "__init__" or built.site.loops:
            return None
        found = self.training_of(built.value, built.site, depth + 1)
        info = m.local_class(fn.class_name)
        if found is None or info is None:
            return None
        classes = [info]
        for base in info.bases:  # a base of another module may switch it: not followed
            local = m.local_class(base.rsplit(".", 1)[-1])
            if local is None and base not in ("object",):
                return None
            if local is not None and local is not info:
                classes.append(local)
        for cls in classes:
            for method in cls.methods.values():
                if self.effect(method, attribute) not in (None, True):
                    return None
        name = parts[1]
        if any(mode_switch(c) is False and name in (c.receiver_text or "").split(".")[1:] for c in self.switches):
            return None  # `trainer.model.eval()` from outside the class
        return found

    def training_of(self, expr: cst.BaseExpression, site: Site, depth: int) -> Training | None:
        """Proof that the module an expression makes (at `site`) is in training mode: a constructor
        call, through `.to(...)`-style methods, wrappers and copies of a module in training mode."""
        if depth > 2 * _MAX_DEPTH:  # (a model built, converted to SyncBatchNorm, wrapped in DDP: each binding two steps)
            return None
        m = self.model
        if isinstance(expr, cst.Call):
            func = expr.func
            call = m.call_at(expr)
            if isinstance(func, cst.Attribute) and call is not None and call.method is not None and call.qualname is None:
                if call.method in SAME_MODULE_METHODS:
                    return self.training_of(func.value, site, depth + 1)
                if call.method == "train" and mode_switch(call) is True:
                    return Training(expr, "switched to training mode by `.train()`")
                return None
            qual = m.imports.resolve(func) or ""
            if qual in PASS_THROUGH or qual.endswith(".prepare"):
                args = [a.value for a in expr.args if a.keyword is None]
                return self.training_of(args[0], site, depth + 1) if len(args) == 1 else None
            if constructs_module(m, expr):
                return Training(expr, "constructed in training mode")
            return None
        text = dotted(expr)
        if isinstance(expr, cst.Name) and text:
            return self.training_at(text, site, depth + 1)
        return None


def constructs_module(model: "TrainingModel", call: cst.Call) -> bool:
    """A call that builds a fresh module: a class of this module, a `torch.nn` layer or container,
    a torchvision model. (`from_pretrained` returns a model in eval mode; a project class's
    constructor in another module is not followed.)"""
    func = call.func
    if isinstance(func, cst.Name) and model.local_class(func.value) is not None and model.imports.resolve(func) is None:
        return True
    qual = model.imports.resolve(func) or ""
    if qual.startswith("torch.nn.") and qual.rsplit(".", 1)[-1][:1].isupper() and not qual.startswith("torch.nn.utils"):
        return True
    return qual.startswith("torchvision.models.") and qual.rsplit(".", 1)[-1][:1].islower()


def function_trains(model: "TrainingModel", fn: Function) -> bool:
    """Whether a function trains: it backpropagates or steps an optimizer, or runs a training loop."""
    if any(model.is_backward(c) or model.is_optimizer_step(c) for c in fn.calls):
        return True
    summary = model.summarizer.function(fn)
    return bool(summary.trains or summary.steps or summary.backprops)


def call_trains(model: "TrainingModel", call: Call) -> bool:
    """Whether a call runs training: a function of this module or of the project that trains."""
    callee = model.callee(call)
    if callee is not None:
        return function_trains(model, callee)
    summary = model.project_call_summary(call)
    return summary is not None and bool(summary.trains or summary.steps or summary.backprops)


def loop_ancestors(loop: Loop) -> list[Loop]:
    """The loops around `loop`, innermost first."""
    out = []
    while loop.parent is not None:
        loop = loop.parent
        out.append(loop)
    return out


def discarded(call: Call) -> bool:
    """`model(x)` as a statement of its own: run for its side effects (batch-norm statistics), not its result."""
    statement = call.site.statement
    return statement is not None and any(isinstance(s, cst.Expr) and s.value is call.node for s in statement.body)
