"""What a call runs in a base class of another project module: `super().m(...)`, a method inherited
from there (`policy.update(batch)` with `update` in `BasePolicy`), and what such a method calls on
`self` that the subclass holds (DESIGN.md, "The whole program")."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import libcst as cst

from trainlint.model.facts import Call, ClassInfo, Function, Site
from trainlint.model.names import is_super
from trainlint.model.summary import DISPATCH, FunctionSummary
from trainlint.model.symbols import trains_or_reads
from trainlint.model.torchnames import MODULE_WRAPPERS

# the base classes of custom autograd functions (`class Fn(torch.autograd.Function)`)
AUTOGRAD_FUNCTION_CLASSES = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})


class InheritedTargets:
    """Mixin of the training model (`StepChains`): targets of calls that run a project base's code."""

    def _super_targets(self, call: Call) -> list[str]:
        """`super().training_losses(model, x)` in a method of a class whose base is in another project
        module: the method of the first base (in order) that has it, own or inherited."""
        if call.method is None or not is_super(call.receiver) or self.callee(call) is not None:  # type: ignore[attr-defined]
            return []
        fn = call.site.function
        while fn is not None and fn.class_name is None:
            fn = fn.parent
        info = self.local_class(fn.class_name) if fn is not None and fn.class_name else None  # type: ignore[attr-defined]
        for base in info.bases if info is not None else ():
            found = self._inherited_target(base, call.method)
            if found:
                return found
        return []

    def _inherited_by_self(self, call: Call) -> list[str]:
        """`self.take_optimisation_step(opt, net, loss)` in a method of a class that inherits it from a
        project base in another module: that base's method ("file::Base_Agent.take_optimisation_step"),
        when it trains or reads device values (`trains_or_reads`), as the call's summary says."""
        method = call.site.function
        while method is not None and method.class_name is None:  # (a closure in a method: the method's class)
            method = method.parent
        info = self.local_class(method.class_name) if method is not None else None  # type: ignore[attr-defined]
        if info is None or call.receiver_text != "self" or self.callee(call) is not None:  # type: ignore[attr-defined]
            return []  # (a function set on another module's class, `@add_to_class(Trainer)`, is not inheriting)
        here = f"{self.resolved_path}::"  # type: ignore[attr-defined]
        for base in info.bases:
            found = self._inherited_target(base, call.method)
            if found:  # (this module's own: its analysis runs it; one that neither trains nor reads: nothing to follow)
                summary = self.project_symbol(found[0]) if not found[0].startswith(here) else None  # type: ignore[attr-defined]
                return found if isinstance(summary, FunctionSummary) and trains_or_reads(summary) else []
        return []

    def autograd_function(self, call: Call) -> ClassInfo | None:
        """The class of this module, a `torch.autograd.Function`, whose `apply` a call is (`Fn.apply(x)`)."""
        func = call.node.func
        if call.method != "apply" or type(func) is not cst.Attribute or type(func.value) is not cst.Name:  # type: ignore[attr-defined]
            return None
        info = self.local_class(func.value.value)  # type: ignore[attr-defined]
        seen: set[str] = set()
        pending = [info] if info is not None else []
        while pending:
            current = pending.pop()
            if current.name in seen:
                continue
            seen.add(current.name)
            for base in current.bases:
                qual = self.imports.resolve(cst.parse_expression(base)) if base[:1].isidentifier() else None  # type: ignore[attr-defined]
                if qual in AUTOGRAD_FUNCTION_CLASSES:
                    return info
                parent = self.local_class(base.rsplit(".", 1)[-1])  # type: ignore[attr-defined]
                if parent is not None:
                    pending.append(parent)
        return None

    def _held_by_self(self, call: Call) -> list[str]:
        """`self.compute_vae_embedding(x)`, a method inherited from a base in another module that calls
        `self.vae_layer(...)` every time: what this module's class holds there runs too
        (`self.vae_layer = CapacitronVAE(...)` in the subclass's `__init__`), its `forward`."""
        fn = call.site.function
        summary = None
        for base in self.class_bases(fn) if fn is not None and fn.class_name else ():  # type: ignore[attr-defined]
            methods = self.class_methods(base)  # type: ignore[attr-defined]
            if methods and call.method in methods:
                summary = methods[call.method]
                break
        if summary is None or not summary.self_calls:
            return []
        out: list[str] = []
        for attr in summary.self_calls:
            # (kept for the model's life: values are memoised by node identity)
            held = self._held_calls.setdefault((id(call), attr), cst.Call(func=cst.Attribute(value=cst.Name("self"), attr=cst.Name(attr))))
            out.extend(self.project_targets(replace(call, node=held, method=attr, receiver=held.func.value, qualname=None)))  # type: ignore[attr-defined]
        return out

    @cached_property
    def _held_calls(self) -> dict[tuple[int, str], cst.Call]:
        return {}

    def _inherited_target(self, origin: str, method: str | None) -> list[str]:
        """The method of a project base class an object of class `origin` runs ("file::Base.update"),
        where the class does not define it itself."""
        home = getattr(self.project, "method_home", None)
        for name in (method,) if method else ("forward", "__call__"):
            found = home(self.path, origin, name) if home is not None and self.path else None
            if found is not None:
                return [found]
        return []

    def _dispatched(self, call: Call) -> str | None:
        """`self.compute_loss(batch)` in a method of class `Base`: "self::Base.compute_loss", which runs
        the override of any subclass in another module (`Project.step_seeds` finds them)."""
        fn = call.site.function
        if fn is None or fn.class_name is None or fn.parent is not None:
            return None
        if call.method is None and self.module_called_as_self(call) is not None:
            # `self(x)`, `model = self.train(); model(x)` in a base `nn.Module`'s `fit`: the subclass's `forward`
            return f"{DISPATCH}{fn.class_name}.forward"
        if call.method is None or call.receiver_text not in ("self", "cls"):
            return None
        return f"{DISPATCH}{fn.class_name}.{call.method}"

    def module_called_as_self(self, call: Call) -> ClassInfo | None:
        """The `nn.Module` class of this module whose method calls its own instance (`self(x)`, or
        `model = self.train(); model(x)`): its `forward` (or a subclass's) runs; else None."""
        fn = call.site.function
        if call.method is not None or fn is None or not fn.class_name or fn.parent is not None:
            return None
        if not self._is_self(call.node.func, fn, call.site):
            return None
        info = self.local_class(fn.class_name)  # type: ignore[attr-defined]
        return info if info is not None and self.is_module_class(info) else None  # type: ignore[attr-defined]

    def _is_self(self, expr: cst.BaseExpression, fn: Function, at: Site, depth: int = 0) -> bool:
        """`self`, `self` moved or put in a mode (`self.train()`, `self.to(device)`, which return it) or
        wrapped (`DataParallel(model)`), or a name every binding of which that reaches `at` is one."""
        while isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _RETURNS_SELF:
                expr = func.value
            elif expr.args and self.imports.resolve(func) in MODULE_WRAPPERS:  # type: ignore[attr-defined]
                expr = expr.args[0].value
            else:
                return False
        if not isinstance(expr, cst.Name):
            return False
        if expr.value == "self":
            return True
        assigns = self.reaching(fn, expr.value, at) if depth < 3 else []  # type: ignore[attr-defined]
        return bool(assigns) and all(
            not a.op and not a.unpacked and self._is_self(a.value, fn, a.site, depth + 1) for a in assigns
        )


_RETURNS_SELF = frozenset({"train", "eval", "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "requires_grad_"})
