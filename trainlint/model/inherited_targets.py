"""What a call runs in a base class of another project module: `super().m(...)`, a method inherited
from there (`policy.update(batch)` with `update` in `BasePolicy`), and what such a method calls on
`self` that the subclass holds (DESIGN.md, "The whole program")."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property

import libcst as cst

from trainlint.model.call_graph import is_super
from trainlint.model.facts import Call
from trainlint.model.summary import FunctionSummary
from trainlint.model.symbols import trains_or_reads


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
