"""What the names and calls of a module stand for: its own functions and classes, the project's
symbols it imports, values of expressions and summaries of calls. A mixin of `TrainingModel`."""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from pathlib import PurePath
from collections.abc import Mapping
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.facts import Call, ClassInfo, Function, Site
from trainlint.test_code import is_test_name, is_test_path
from trainlint.model.lattice import Kind, Value, join, origins
from trainlint.model.module_classes import is_module_class
from trainlint.model.names import dotted, is_super, keyed
from trainlint.model.arguments import argument_for
from trainlint.model.torchnames import LIBRARY_LOSS_SCALERS
from trainlint.model.function_values import local_function_index, local_function_origin
from trainlint.model.values import ValueModel
from trainlint.model.summary import DEFINING
from trainlint.model.backpropagated import handed_to_backward
from trainlint.model.candidates import candidate_classes

if TYPE_CHECKING:
    from trainlint.model.summary import FunctionSummary
    from trainlint.model.summarizer import Summarizer


def _identity(thing: object | None) -> int | None:
    return id(thing) if thing is not None else None


def _scope(call: Call) -> tuple[int | None, int | None]:
    """A call's function and innermost loop (by identity)."""
    return (_identity(call.site.function), _identity(call.site.innermost_loop))


class SymbolQueries:
    """Values, local and project symbols, and call summaries of one module."""

    # -- values and summaries ------------------------------------------------------------------
    @cached_property
    def values(self) -> ValueModel:
        """The value of any expression of this module (see `trainlint.model.values`)."""
        return ValueModel(self)

    def value(self, expr: cst.BaseExpression, at: Site | None = None, function: Function | None = None) -> Value:
        """The abstract value of `expr`, used at `at` (whose function is the scope)."""
        fn = at.function if at is not None else function
        return self.values.of(expr, fn, at)

    @cached_property
    def summarizer(self) -> "Summarizer":
        from trainlint.model.summarizer import Summarizer

        return Summarizer(self, PurePath(self.path).name if self.path else "<module>")

    @cached_property
    def is_test_code(self) -> bool:
        """Test code by its path (`tests/`, a `test_*.py` that defines a test): per-step rules skip it,
        unless the configuration says to check it as training code (`lint-test-code`)."""
        if not self.path or self.settings.lint_test_code:  # type: ignore[attr-defined]
            return False
        functions, classes = self.functions, self.classes  # type: ignore[attr-defined]
        return is_test_path(self.path, lambda: any(is_test_name(f.name) for f in functions) or any(is_test_name(c.name, True) for c in classes))

    # -- what an unknown name is, by what the module does with it ---------------------------------
    @cached_property
    def duck_optimizers(self) -> frozenset[str]:
        """Receivers (by their text) used as an optimizer or a gradient scaler (`is_optimizer_like`)."""
        methods: dict[str, set[str]] = {}
        for name in ("zero_grad", "scale", "update"):
            for call in self.calls_by_method.get(name, ()):  # type: ignore[attr-defined]
                if receiver := call.receiver_text or keyed(call.receiver):  # (also `self.optimizer["generator"]`)
                    methods.setdefault(receiver, set()).add(name)
        found = {t for t, m in methods.items() if "zero_grad" in m or {"scale", "update"} <= m}
        # the first backward pass of each function, by its innermost loop (None: outside loops)
        backward_at: dict[tuple[int | None, int | None], int] = {}
        for call in (*self.calls_by_method.get("backward", ()), *self.calls_by_method.get("grad", ())):  # type: ignore[attr-defined]
            if self.is_backward(call) or call.qualname == "torch.autograd.grad":  # type: ignore[attr-defined]
                key = _scope(call)
                backward_at[key] = min(backward_at.get(key, call.site.order), call.site.order)
        for call in self.calls_by_method.get("step", ()):  # type: ignore[attr-defined]
            first = backward_at.get(_scope(call))
            stepped = call.receiver_text or keyed(call.receiver)
            if stepped and first is not None and call.site.order > first and len(call.node.args) <= 1:
                found.add(stepped)  # (stepped after a backward pass in the same loop body)
        return frozenset(found)

    def used_as(self, name: str, function: Function | None) -> Value | None:
        """A name whose value is not known, by what this module does with it: backpropagated
        (`loss.backward()`, `scaler.scale(loss).backward()`, `engine.backward(loss)`) in the function,
        or handed to a function that backpropagates it, a tensor with a graph there; `net.parameters()`,
        `net.eval()`, or `net(x)` with `net.cuda()` (in the function, or at module level), a module.
        None when nothing says."""
        found = self._protocol_uses.get((_identity(function), name)) or self._protocol_uses.get((None, name))
        if found is None and function is not None and handed_to_backward(self, name, function):  # type: ignore[arg-type]
            return Value(Kind.TENSOR, graph=True)  # (`self._update(loss)` backpropagates it)
        return found

    def attribute_used_as(self, class_name: str | None, text: str) -> Value | None:
        """`self.network` of class `class_name` whose assignments say nothing (`config.network_fn()`), by
        what the class's methods do with it: `self.network.parameters()` (or `named_parameters()`,
        `modules()`, `eval()`), a module. None when nothing says."""
        return self._attribute_uses.get((class_name, text)) if class_name is not None else None

    @cached_property
    def _attribute_uses(self) -> dict[tuple[str, str], Value]:
        found: dict[tuple[str, str], Value] = {}
        for method in ("parameters", "named_parameters", "modules", "named_modules", "children", "eval"):
            for call in self.calls_by_method.get(method, ()):  # type: ignore[attr-defined]
                fn, text = call.site.function, call.receiver_text
                if fn is not None and fn.class_name and text and text.startswith("self.") and text.count(".") == 1 and not (method == "eval" and call.node.args):
                    found[(fn.class_name, text)] = Value(Kind.MODULE)
        return found

    @cached_property
    def _protocol_uses(self) -> dict[tuple[int | None, str], Value]:
        found: dict[tuple[int | None, str], Value] = {}
        # nn.Module's own API, which tensors do not have (`requires_grad_` they do)
        for method in ("parameters", "named_parameters", "modules", "named_modules", "children", "eval"):
            for call in self.calls_by_method.get(method, ()):  # type: ignore[attr-defined]
                if isinstance(call.receiver, cst.Name) and not (method == "eval" and call.node.args):
                    found[(_identity(call.site.function), call.receiver.value)] = Value(Kind.MODULE)
        # called (`net(x)`) and moved or cast (`net.cuda()`): a module, as a tensor is never called
        called = {(_identity(c.site.function), c.name) for c in self.calls if c.name and not c.qualname}  # type: ignore[attr-defined]
        for method in ("cuda", "to", "half", "bfloat16", "float"):
            for call in self.calls_by_method.get(method, ()):  # type: ignore[attr-defined]
                if isinstance(call.receiver, cst.Name) and (_identity(call.site.function), call.receiver.value) in called:
                    found[(_identity(call.site.function), call.receiver.value)] = Value(Kind.MODULE)
        # backpropagated: `loss.backward()`, `engine.backward(loss)`, `torch.autograd.grad(loss, params)`
        for call in (*self.calls_by_method.get("backward", ()), *self.calls_by_method.get("grad", ())):  # type: ignore[attr-defined]
            if call.method == "grad" and call.qualname != "torch.autograd.grad":
                continue
            first = call.positional(0)
            target = call.receiver if call.method == "backward" and not call.node.args else first
            scaled = target.func if isinstance(target, cst.Call) else None
            if isinstance(scaled, cst.Attribute) and scaled.attr.value == "scale" and target.args:  # type: ignore[union-attr]
                target = target.args[0].value  # type: ignore[union-attr]  # `scaler.scale(loss).backward()`
            if isinstance(target, cst.Name):
                found.setdefault((_identity(call.site.function), target.value), Value(Kind.TENSOR, graph=True))
        # the first argument of torch's `*_like` factories (`torch.zeros_like(mask)`): they take a tensor only
        for call in self.calls:  # type: ignore[attr-defined]
            if (call.qualname or "").startswith("torch.") and call.qualname.endswith("_like") and call.node.args:
                first = call.node.args[0]
                if first.keyword is None and isinstance(first.value, cst.Name):
                    found.setdefault((_identity(call.site.function), first.value.value), Value(Kind.TENSOR))
        for text in self.duck_optimizers:
            if "." not in text and text not in ("self", "cls"):  # (a module's own `self.zero_grad()`: its class says what it is)
                found.setdefault((None, text), Value(Kind.OPTIMIZER))
        return found

    @cached_property
    def _classes_by_name(self) -> dict[str, ClassInfo]:
        return {c.name: c for c in self.classes}

    def local_function(self, name: str) -> Function | None:
        return next((fn for fn in self._by_name.get(name, ()) if fn.class_name is None), None)

    def own_method(self, fn: Function | None, name: str) -> Function | None:
        """Method `name` of the class of method `fn`, defined in that class here (`self.positional_embedding`)."""
        return info.methods.get(name) if fn is not None and fn.class_name and (info := self._classes_by_name.get(fn.class_name)) else None

    def visible_function(self, name: str, fn: Function | None) -> Function | None:
        """The function `name` refers to in `fn` by Python's scopes: one defined in `fn` or in a
        function enclosing it, else at the top level (a parameter or assignment of the name shadows
        it: ask `reaching` first)."""
        candidates = [f for f in self._by_name.get(name, ()) if f.class_name is None]  # type: ignore[attr-defined]
        scope = fn
        while scope is not None:
            found = next((f for f in candidates if f.parent is scope), None)
            if found is not None:
                return found
            scope = scope.parent
        return next((f for f in candidates if f.parent is None), None)

    def function_value(self, function: Function) -> Value:
        """A function of this module as a value (what a name bound to it holds)."""
        return Value(Kind.FUNCTION, origin=local_function_origin(self._function_indexes[id(function)]))

    def held_functions(self, value: Value) -> list[Function]:
        """The functions of this module a function value may be."""
        if value.kind is not Kind.FUNCTION:
            return []
        indexes = [local_function_index(o) for o in origins(value)]
        return [self.functions[i] for i in indexes if i is not None and i < len(self.functions)]  # type: ignore[attr-defined]

    def called_names(self, call: Call) -> tuple[str, ...]:
        """The library or project functions a call runs by name: its resolved name, else those the
        function value it calls may be (`self._synchronize()` after `self._synchronize =
        torch.cuda.synchronize`)."""
        if call.qualname is not None:
            return (call.qualname,)
        if not isinstance(call.node.func, cst.Name) and call.receiver_text != "self":
            return ()
        value = self.value(call.node.func, call.site)
        if value.kind is not Kind.FUNCTION:
            return ()
        return tuple(o for o in origins(value) if local_function_index(o) is None)

    @cached_property
    def _function_indexes(self) -> dict[int, int]:
        return {id(f): i for i, f in enumerate(self.functions)}  # type: ignore[attr-defined]

    def local_class(self, name: str) -> ClassInfo | None:
        return self._classes_by_name.get(name)

    def is_module_class(self, info: ClassInfo) -> bool:
        """Whether instances of a class of this module are `nn.Module`s, through its bases."""
        return is_module_class(self, info)  # type: ignore[arg-type]

    def instance_of_local_class(self, name: str) -> Value:
        info = self._classes_by_name[name]
        return Value(self.summarizer.kind(info), origin=name)

    def is_project_function(self, qualname: str) -> bool:
        """Whether a name this module imports is a function of a local module."""
        from trainlint.model.summary import FunctionSummary

        return isinstance(self.project_symbol(qualname), FunctionSummary)

    def project_symbol(self, qualname: str):  # type: ignore[no-untyped-def]
        """The summary of a name of a local module this one imports (None for libraries)."""
        if self.project is None or not qualname:
            return None
        try:
            return self._symbols[qualname]
        except KeyError:
            found = self._symbols[qualname] = self.project.symbol(self.path, qualname)
            return found

    def project_value(self, qualname: str) -> Value | None:
        """What calling an imported project name returns: an instance of its class, or its result."""
        from trainlint.model.summary import ClassSummary

        symbol = self.project_symbol(qualname)
        if symbol is None:
            return None
        if isinstance(symbol, ClassSummary):
            return Value(symbol.kind, origin=qualname)
        if symbol.returns.kind is not Kind.UNKNOWN:
            return self._requalified(symbol.returns, symbol.defined[0])
        owner, _, method = qualname.rpartition(".")
        if method.startswith("from_") and isinstance(self.project_symbol(owner), ClassSummary):
            # `GPT.from_pretrained(...)`: an alternative constructor
            return Value(self.project_symbol(owner).kind, origin=owner)  # type: ignore[union-attr]
        return None

    def _requalified(self, value: Value, defined_in: str) -> Value:
        """A value another module returns, its classes named as that module's imports spell them (`.lstm.LSTMEncoder`),
        renamed so this module finds them ("file::LSTMEncoder"), and of the kind those classes are; a function's call, what it returns."""
        if value.kind is Kind.COLLECTION and value.items is not None and defined_in and self.project is not None:
            items = tuple(self._requalified(i, defined_in) for i in value.items)  # (`model, diffusion = create(...)`)
            return replace(value, element=join(items), items=items) if items != value.items else value
        if value.kind not in (Kind.MODULE, Kind.OBJECT) or not value.origin or not defined_in or self.project is None:
            return value
        key = (value, defined_in)
        if key not in self._requalified_memo:
            self._requalified_memo[key] = value  # (a factory returning its own call: as it came)
            self._requalified_memo[key] = self._requalify(value, defined_in)
        return self._requalified_memo[key]

    @cached_property
    def _requalified_memo(self) -> "dict[tuple[Value, str], Value]":
        return {}

    def _requalify(self, value: Value, defined_in: str) -> Value:
        from trainlint.model.summary import ClassSummary, FunctionSummary

        assert self.project is not None
        named = [o if "::" in o else (self.project.qualify(defined_in, o) or o) for o in origins(value)]
        classes = [self.project_symbol(o) for o in named]
        if len(classes) == 1 and isinstance(classes[0], FunctionSummary) and classes[0].returns.kind is not Kind.UNKNOWN:
            return self._requalified(classes[0].returns, classes[0].defined[0])  # (`return build(args)` in an `__init__`)
        kinds = {c.kind for c in classes if isinstance(c, ClassSummary)}
        kind = kinds.pop() if len(kinds) == 1 and all(isinstance(c, ClassSummary) for c in classes) else value.kind
        return replace(value, kind=kind, origin="|".join(named))

    def held_attribute(self, origin: str, attr: str) -> Value | None:
        """What an instance of project class `origin` of another module holds in `self.<attr>`, by the
        class's summary: an instance of a `torch.nn` class or of a project class, named as this module
        finds it ("file::OutConv"); None when the summary says nothing of it."""
        from trainlint.model.summary import ClassSummary

        symbol = self.project_symbol(origin)
        if not isinstance(symbol, ClassSummary) or attr not in symbol.attributes:
            return None
        value = symbol.attributes[attr]
        if all("::" in o or o.startswith("torch.nn.") for o in origins(value)):
            return value
        # a class as the defining module's imports spell it (`.unet_parts.OutConv`)
        where = origin if "::" in origin or self.project is None else self.project.qualify(self.path, origin) or ""
        value = self._requalified(replace(value, kind=Kind.OBJECT), where.partition("::")[0])
        return value if all("::" in o for o in origins(value)) else None  # (a library's class: nothing known)

    def class_methods(self, origin: str | None) -> "Mapping[str, FunctionSummary] | None":
        """Method summaries of the class that made a value (a local class, or a project one); None for an
        object of one of several classes ("A|B"), whose methods may do different things."""
        from trainlint.model.summary import ClassSummary

        if origin is None or "|" in origin:
            return None
        info = self._classes_by_name.get(origin)
        if info is not None:
            return self.summarizer.methods(info)
        if self.project is None or not isinstance(self.project_symbol(origin), ClassSummary):
            return None
        try:
            return self._inherited[origin]
        except KeyError:
            found = self._inherited[origin] = self.project.class_methods(self.path, origin)
            return found

    @cached_property
    def _inherited(self) -> "dict[str, dict[str, FunctionSummary] | None]":
        return {}

    def method_value(self, base: Value, method: str) -> Value | None:
        """What calling `method` on an object returns: its class's method (inherited ones too); for
        an object of one of several classes, the join of theirs when each says."""
        returned: list[Value] = []
        for origin in origins(base) if base.origin else ():
            methods = self.class_methods(origin)
            summary = methods.get(method) if methods is not None else None
            if summary is None or summary.returns.kind is Kind.UNKNOWN:
                return None
            returned.append(self._requalified(summary.returns, summary.defined[0]))
        return join(returned) if returned else None

    def bound_method(self, receiver: cst.BaseExpression, method: str, function: Function | None) -> Function | None:
        """`self.helper(...)`: the method of the caller's class; `Tokenizer.load(path)`: a static or
        class method of a class of this module."""
        if not isinstance(receiver, cst.Name):
            return None
        if receiver.value in ("self", "cls"):
            owner = function.class_name if function is not None else None
        else:
            owner = receiver.value if receiver.value in self._classes_by_name else None
        return next((fn for fn in self._by_name.get(method, ()) if fn.class_name == owner), None) if owner is not None else None

    def project_call_summary(self, call: Call) -> "FunctionSummary | None":
        """What a call into the project does: an imported function, a method of an object whose class
        the analysis knows (local or imported), or calling such an object (`loss_scaler(loss, opt)`)."""
        try:
            return self._call_summaries[call]
        except KeyError:
            found = self._call_summaries[call] = self._given_optimizer(call, self._project_call_summary(call))
            return found

    def _given_optimizer(self, call: Call, summary: "FunctionSummary | None") -> "FunctionSummary | None":
        """`optimizer_step(optimizer, loss)`: a helper that steps a parameter it cannot tell is an
        optimizer updates the weights where a call gives it one. And a helper that clips only when
        given a threshold (`loss_scaler(loss, opt, clip_grad=None)`) clips where a call gives one."""
        if summary is not None and summary.clips and summary.clips_parameter:
            given = argument_for(call.node, summary.clips_parameter)
            if given is None or (isinstance(given, cst.Name) and given.value == "None"):
                summary = replace(summary, clips=False)
        if summary is None or summary.steps or not summary.steps_parameter:
            return summary
        passed = argument_for(call.node, summary.steps_parameter)
        if passed is None:
            return summary
        if self.value(passed, call.site).kind in (Kind.OPTIMIZER, Kind.SCALER) or self.is_optimizer_like(dotted(passed)):  # type: ignore[attr-defined]
            return replace(summary, steps=True)
        return summary

    def _project_call_summary(self, call: Call) -> "FunctionSummary | None":
        from trainlint.model.summary import ClassSummary, FunctionSummary

        qual = call.qualname
        if qual is not None and (qual.startswith(".") or qual.split(".", 1)[0] not in ("torch",)):
            symbol = self.project_symbol(qual)
            if isinstance(symbol, FunctionSummary):
                return symbol
            if isinstance(symbol, ClassSummary):
                return None  # constructing an object
        fn = call.site.function
        if call.method is not None and (call.receiver_text == "self" or is_super(call.receiver)):
            inherited = self._inherited_summary(call)
            if inherited is not None or call.receiver_text != "self":
                return inherited
            # `self.compute_loss(preds, targets)` after `self.compute_loss = ComputeLoss()`: the object
            # the attribute holds, called
            held = self.values.of(call.node.func, fn, call.site)
            methods = self.class_methods(held.origin) if held.kind is Kind.OBJECT else None
            return methods.get("__call__") if methods is not None else None
        if call.method is not None and call.receiver is not None and call.receiver_text != "cls":
            base = self.values.of(call.receiver, fn, call.site)
            # an object of one of several classes: written out, or chosen by the project at run time
            chosen = origins(base) if base.origin is not None and "|" in base.origin else candidate_classes(self, call.receiver, call.site, call.method) if base.kind is Kind.UNKNOWN else ()  # type: ignore[arg-type]
            if chosen:
                found = [dispatched((self.class_methods(o) or {}).get(call.method), self.class_methods(o) or {}) for o in chosen]
                return common_summary([f for f in found if f is not None]) if all(found) else None
            if (methods := self.class_methods(base.origin)) is not None:
                return dispatched(methods.get(call.method), methods)
        elif call.name is not None or (call.method is None):
            callee = self.values.of(call.node.func, fn, call.site)
            if (methods := self.class_methods(callee.origin)) is not None:
                return methods.get("__call__")
            # `loss_scaler(loss, optimizer, clip_grad=...)`: timm's loss scaler, handed in as a
            # parameter (DeiT/MAE style): it scales, backpropagates, clips when asked, steps and updates
            if callee.origin in LIBRARY_LOSS_SCALERS and len(call.node.args) >= 2:
                clips = call.kwarg("clip_grad") is not None or call.kwarg("clip_value") is not None
                return FunctionSummary(where=call.name or "", steps=True, backprops=True, scales=True, clips=clips)
        return None

    def _inherited_summary(self, call: Call) -> "FunctionSummary | None":
        """`self.take_optimisation_step(opt, net, loss)` in a method of a class whose project base in
        another module defines it (nothing of this module does): the base's method, as an object of
        the class runs it (`InheritedTargets._inherited_by_self`); `super().training_losses(model)`:
        the base's (`InheritedTargets._super_targets`)."""
        from trainlint.model.summary import FunctionSummary

        found = self._inherited_by_self(call) if call.receiver_text == "self" else self._super_targets(call)  # type: ignore[attr-defined]
        symbol = self.project_symbol(found[0]) if found else None
        return symbol if isinstance(symbol, FunctionSummary) else None

    def parameter_method_summary(self, call: Call) -> "FunctionSummary | None":
        """`log_data.add_metric("errG", errG)` on a parameter nothing here says the class of (its caller
        in another module holds it as an attribute of an object it was handed): what the method does in
        the project classes that define it and that the project builds (`hierarchy.classes_defining`), where
        they all agree; its `where` says the object was known by the method."""
        fn = call.site.function
        receiver = call.receiver
        if fn is None or call.method is None or call.method.startswith("__") or not isinstance(receiver, cst.Name) or receiver.value not in fn.params[fn.class_name is not None:]:
            return None  # (a method's `self` is its class's instance, never a guess)
        ask = getattr(self.project, "class_candidates", None)
        if ask is None or not self.path or self.reaching(fn, receiver.value, call.site) or self.values.of(receiver, fn, call.site).kind is not Kind.UNKNOWN:  # type: ignore[attr-defined]
            return None
        found = ask(self.path, f"{DEFINING}{call.method}", "")
        summaries = [(self.class_methods(origin) or {}).get(call.method) for origin in found]
        if not summaries or not all(summaries):
            return None
        names = " or ".join(f"`{o.rpartition('::')[2]}`" for o in found)
        kept = common_summary(summaries)  # type: ignore[arg-type]
        return replace(kept, where=f"{kept.where}; `{receiver.value}` may be {names}, the project's classes defining `{call.method}`")

    def call_summary(self, call: Call) -> "FunctionSummary | None":
        """What a call does: a function of this module, or of the project."""
        callee = self.callee(call)
        if callee is not None:
            return self._given_optimizer(call, self.summarizer.function(callee))
        return self.project_call_summary(call)


def dispatched(summary: "FunctionSummary | None", methods: "dict[str, FunctionSummary]") -> "FunctionSummary | None":
    """What a method does on an object of a class (`methods`, its own and inherited): an inherited
    `update` that calls `self._update_with_batch(batch)` runs the class's override, which steps."""
    from dataclasses import replace

    for name in summary.self_methods if summary is not None else ():
        over = methods.get(name)
        if over is None or over is summary or summary is None or _owner(over.where) == _owner(summary.where):
            continue  # (a method of the summary's own class: its summary already read it)
        summary = replace(
            summary, steps=summary.steps or over.steps, backprops=summary.backprops or over.backprops,
            clears_grads=summary.clears_grads or over.clears_grads, clips=summary.clips or over.clips,
            scales=summary.scales or over.scales, synchronizes=tuple(dict.fromkeys((*summary.synchronizes, *over.synchronizes))),
            syncs=tuple(dict.fromkeys((*summary.syncs, *over.syncs))),
        )
    return summary


def _owner(where: str) -> str:
    """The class of a method as a summary's `where` names it ("`Agent.play_step` in rl.py": "Agent in rl.py")."""
    name, _, module = where.partition(" in ")
    return f"{name.strip('`').rpartition('.')[0]} in {module}"


def common_summary(summaries: "list[FunctionSummary]") -> "FunctionSummary":
    """What a call does whichever of several methods it runs: what every one of them does."""
    from dataclasses import replace

    first = summaries[0]
    if all(s == first for s in summaries[1:]):
        return first
    flags = ("steps", "backprops", "trains", "clears_grads", "clips", "scales", "reads_arguments", "no_grad", "sets_train_mode")
    return replace(
        first, **{f: all(getattr(s, f) for s in summaries) for f in flags},
        synchronizes=tuple(x for x in first.synchronizes if all(x in s.synchronizes for s in summaries)),
        syncs=tuple(x for x in first.syncs if all(x in s.syncs for s in summaries)),
        replaces_layers=tuple(x for x in first.replaces_layers if all(x in s.replaces_layers for s in summaries)),
        optimizes=first.optimizes if all(s.optimizes == first.optimizes for s in summaries) else (),
        returns_activation=first.returns_activation if all(s.returns_activation == first.returns_activation for s in summaries) else None,
        read_parameters=first.read_parameters if all(s.read_parameters == first.read_parameters for s in summaries) else ("*",),
    )


def trains_or_reads(summary: "FunctionSummary") -> bool:
    """A function that does something of a training step: updates, backpropagates, clips, scales or reads
    device values on the host (an inherited `save_hyperparameters()` is none of these)."""
    return summary.steps or summary.backprops or summary.clips or summary.scales or summary.clears_grads or bool(
        summary.syncs or summary.synchronizes) or summary.reads_arguments
