"""The module's call graph: which function a call reaches, the calls of a function, calls and
assignments by node and statement, and framework internals. A mixin of `TrainingModel`."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import libcst as cst

from trainlint.model.arguments import BUILTINS as _BUILTINS, argument_for
from trainlint.model.candidates import candidate_classes, chosen_note
from trainlint.model.facts import ClassInfo, Assign, Call, Function, Site
from trainlint.model.hooks import FRAMEWORK_WORDS, LIBRARY_HOOK_NAMES, library_argument, library_model_parameter, library_step_hook, registered_hook
from trainlint.model.containers import what_a_call_runs
from trainlint.model.engine_hooks import engine_step_functions
from trainlint.model.lattice import Kind, Value, origins
from trainlint.model.names import dotted, is_super, tokens, walk_names


class CallGraph:
    """Calls resolved to this module's functions, indexed by node, statement and callee."""

    # -- call graph ----------------------------------------------------------------------------
    @cached_property
    def _by_name(self) -> dict[str, list[Function]]:
        table: dict[str, list[Function]] = {}
        for fn in self.functions:
            table.setdefault(fn.name, []).append(fn)
        return table

    @cached_property
    def _method_names(self) -> frozenset[str]:
        """The names of the methods of this module's classes (`@add_to_class` ones included): a call
        `obj.m(...)` of another name runs no method of theirs, whatever obj is."""
        return frozenset(name for info in self.classes for name in info.methods)  # type: ignore[attr-defined]

    def callee(self, call: Call) -> Function | None:
        """The function of this module a call invokes: `f(...)`, `self.f(...)` or `cls.f(...)`."""
        if call.name is not None and call.qualname is None:
            if self._shadowed(call.name, call):
                return None  # a parameter or a variable of that name: what it holds says (`callees`)
            return self.visible_function(call.name, call.site.function)  # type: ignore[attr-defined]
        if call.method is not None and call.receiver_text in ("self", "cls"):
            caller = call.site.function
            candidates = self._by_name.get(call.method, ())
            for fn in candidates:
                if caller is not None and fn.class_name == caller.class_name:
                    return fn
            return candidates[0] if len(candidates) == 1 else None
        if call.method is not None and is_super(call.receiver):
            return self._base_method(call)
        return None

    def _base_method(self, call: Call) -> Function | None:
        """`super().__init__(encoder, decoder)` in a method of a class of this module: the method of
        its first base of this module that has it."""
        fn = call.site.function
        while fn is not None and fn.class_name is None:
            fn = fn.parent
        info = self.local_class(fn.class_name) if fn is not None and fn.class_name else None  # type: ignore[attr-defined]
        for base in info.bases if info is not None else ():
            parent = self.local_class(base.rsplit(".", 1)[-1])  # type: ignore[attr-defined]
            found = self.inherited_method(parent, call.method or "") if parent is not None and parent is not info else None
            if found is not None:
                return found
        return None

    def called_function(self, call: Call) -> Function | None:
        """The function of this module a call runs: its `callee`, else the function the name or
        `self` attribute it calls holds (`step = torch.compile(train_step)`, then `step(batch)`)."""
        direct = self.callee(call)
        if direct is not None or call.qualname is not None:
            return direct
        held = self._held_by(call)
        return held[0] if held else None

    def _held_by(self, call: Call) -> list[Function]:
        """The functions of this module that the name or `self` attribute a call calls may hold."""
        func = call.node.func
        # (`LOSSES[cfg.loss](x)`: a dict of functions picks one of them)
        if type(func) in (cst.Name, cst.Subscript) or (type(func) is cst.Attribute and call.receiver_text == "self"):  # (final classes)
            return self.held_functions(self.value(func, call.site))  # type: ignore[attr-defined]
        return []

    def _shadowed(self, name: str, call: Call) -> bool:
        """Whether `name` is bound where `call` is made by something other than a `def`: a parameter
        of its function (or of one enclosing it) or an assignment reaching it."""
        scope = call.site.function
        while scope is not None:
            if name in scope.params:
                return True
            scope = scope.parent
        return bool(self.reaching(call.site.function, name, call.site))  # type: ignore[attr-defined]

    def callees(self, call: Call) -> tuple[Function, ...]:
        """Every function of this module a call may run: its `callee`; for `self.m()`, the overrides of
        `m` in this module's subclasses too; for an instance of a class of this module (known from
        its value, not its name), `obj(...)` runs the class's `forward` (or `__call__`) and
        `obj.m(...)` its method `m`."""
        key = id(call)
        known = self._callees_memo.get(key)
        if known is None:
            known, final = self.values.final(lambda: self._find_callees(call))
            if final:  # (one that leans on a cycle of values under way may be partial)
                self._callees_memo[key] = known
        return known

    def _find_callees(self, call: Call) -> tuple[Function, ...]:
        direct = self.callee(call)
        if direct is not None:
            if direct.class_name is None or call.receiver_text not in ("self", "cls"):
                return (direct,)
            return (direct, *(info.methods[direct.name] for info in self.subclasses(direct.class_name) if direct.name in info.methods))
        func = call.node.func
        info = self.module_called_as_self(call)  # type: ignore[attr-defined]
        if info is not None:  # `self(x)` in a method of an `nn.Module` (a base's `fit`): its `forward`, or a subclass's
            ran = [info, *self.subclasses(info.name)]
            return tuple(dict.fromkeys(m for c in ran if (m := self.inherited_method(c, "forward")) is not None))
        function = self.autograd_function(call)  # type: ignore[attr-defined]
        if function is not None:
            # `BucketizeFn.apply(x, edges)` runs the class's `forward` now, and its `backward` when the
            # graph it joins is backpropagated
            return tuple(m for name in ("forward", "backward") if (m := self.inherited_method(function, name)) is not None)
        held = self._held_by(call)  # `step(batch)` after `step = make_step(model, opt)`; `self.loss_fn(x)`
        if held:
            return tuple(held)
        passed = self.passed_functions(call)  # `timer(train_step)`, where `timer` calls `fn()`
        if passed:
            return tuple(passed)
        if isinstance(func, cst.Attribute) and call.receiver_text not in ("self", "cls") and not isinstance(func.value, cst.Call):
            # `obj.m(...)`: a method of the class obj is an instance of (of each it may be)
            found = [m for info in self._instance_classes(func.value, call) if (m := self.inherited_method(info, func.attr.value)) is not None] if func.attr.value in self._method_names else []
            if found:
                return tuple(found)
        if call.name is not None and (call.qualname is not None or self.local_class(call.name) is not None):
            return ()  # a library callable, or a class of this module being constructed
        if type(func) in (cst.Name, cst.Attribute, cst.Subscript) and not self._method_names.isdisjoint(("forward", "__call__")):
            # `model(x)`, `self.criterion(a, b)`, `self.layers[i](x)`: an instance called runs its `forward` (or `__call__`)
            found = [
                m for info in self._instance_classes(func, call, ran=True)
                if (m := self.inherited_method(info, "forward") or self.inherited_method(info, "__call__")) is not None
            ]
            if found:
                return tuple(found)
        return self._chosen_callees(call)

    def _chosen_callees(self, call: Call) -> tuple[Function, ...]:
        """The methods of this module's classes that `obj.m(...)` or `obj(...)` may run where the project
        chooses obj's class at run time (a dict of classes, a registry, a declared base: `candidates`)."""
        func = call.node.func
        if isinstance(func, cst.Attribute) and call.receiver_text not in ("self", "cls") and not isinstance(func.value, cst.Call):
            expr, method = func.value, func.attr.value
        elif type(func) is cst.Name or (type(func) is cst.Attribute and call.receiver_text == "self"):
            expr, method = func, None
        else:
            return ()
        if self._method_names.isdisjoint((method,) if method else ("forward", "__call__")):
            return ()  # (no class here has the method run)
        chosen = candidate_classes(self, expr, call.site, method)  # type: ignore[arg-type]
        if not chosen or self.value(expr, call.site).origin is not None:
            return ()  # (none, or the value model knows the class)
        here = self.resolved_path
        found: list[Function] = []
        for origin in chosen:
            file, _, name = origin.rpartition("::")
            info = self.local_class(name) if not file or file == here else None  # type: ignore[attr-defined]
            names = (method,) if method else ("forward", "__call__")
            run = next((f for n in names if info is not None and (f := self.inherited_method(info, n)) is not None), None)
            if run is not None:
                found.append(run)
                self.chosen[id(call)] = (self.module.code_for_node(expr), tuple(dict.fromkeys((*self.chosen.get(id(call), ("", ()))[1], origin))))
        return tuple(found)

    @cached_property
    def chosen(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        """For calls whose callees class-hierarchy analysis found (by the call's id): the object's text
        and the classes it may be."""
        return {}

    @property
    def chosen_notes(self) -> dict[int, str]:
        """What the chains say of the calls class-hierarchy analysis resolved (by the call's id)."""
        return {key: chosen_note(text, classes) for key, (text, classes) in self.chosen.items()}

    def passed_functions(self, call: Call) -> list[Function]:
        """The functions of this module a call into another project module hands to parameters the
        callee calls every time (`FunctionSummary.calls_parameters`): `elapsed, out = timer(train_step)`
        runs `train_step`, and so does `timer(engine)` after `engine = schedule_a if a else schedule_b`
        (each function the argument may hold); and the `__call__` of a plain object of a class of this
        module handed there (`super().training_losses(self._wrap_model(model))`, whose callee calls
        `model(x, t)`)."""
        if self.project is None or (call.qualname is None and call.method is None) or not call.node.args:
            return []
        # (only a call handing over one of this module's functions, or objects, asks the callee's summary)
        functions = any(self._may_hold_function(a.value, call) and self._held_here(a.value, call) for a in call.node.args)
        objects = not functions and self._called_classes and any(self._wrapper(a.value, call) for a in call.node.args)
        if not functions and not objects:
            return []
        summary = self.project_call_summary(call)  # type: ignore[attr-defined]
        out: list[Function] = []
        for key in summary.calls_parameters if summary is not None else ():
            given = argument_for(call.node, key)
            if given is None:
                continue
            found = self._held_here(given, call) if functions else []
            found += [m for info in self._wrapper(given, call) if (m := self.inherited_method(info, "__call__")) is not None]
            out.extend(fn for fn in found if fn not in out)
        return out

    @cached_property
    def _called_classes(self) -> bool:
        """Whether a class of this module defines `__call__` (its objects can be called)."""
        return any(f.class_name is not None and f.name == "__call__" for f in self.functions)  # type: ignore[attr-defined]

    def _wrapper(self, expr: cst.BaseExpression, call: Call) -> list[ClassInfo]:
        """The classes of this module a plain object (no `nn.Module`: a model's is followed where it is
        handed, `ProjectLookup.passed_arguments`) may be an instance of (`_WrappedModel(model)`)."""
        return self._instance_classes(expr, call) if self.value(expr, call.site).kind is Kind.OBJECT else []  # type: ignore[attr-defined]

    def _may_hold_function(self, expr: cst.BaseExpression, call: Call) -> bool:
        """Whether an argument names one of this module's functions, or a name (or `self` attribute)
        some assignment binds to an expression naming one (`engine = schedule_a if cfg.a else
        schedule_b`): only then is its value asked."""
        if type(expr) is cst.Name:
            return expr.value in self._function_names or expr.value in self._function_holders
        if type(expr) is cst.Attribute and dotted(expr.value) == "self":
            return expr.attr.value in self._by_name or f"self.{expr.attr.value}" in self._function_holders
        return False

    @cached_property
    def _function_names(self) -> frozenset[str]:
        return frozenset(f.name for f in self.functions if f.class_name is None)  # type: ignore[attr-defined]

    @cached_property
    def _function_holders(self) -> frozenset[str]:
        """The names and `self` attributes assigned an expression that names a function of this module."""
        names = self._function_names
        if not names:
            return frozenset()
        return frozenset(t for a in self.assigns if any(n.value in names for n in walk_names(a.value)) for t in a.targets)

    def _held_here(self, expr: cst.BaseExpression, call: Call) -> list[Function]:
        """The functions of this module an argument may hold (`train_step`, `engine`)."""
        if type(expr) is cst.Name and not self._shadowed(expr.value, call) and self.visible_function(expr.value, call.site.function) is not None:  # type: ignore[attr-defined]
            return [self.visible_function(expr.value, call.site.function)]  # type: ignore[attr-defined]
        return self.held_functions(self.value(expr, call.site))  # type: ignore[attr-defined]

    def unbuilt_override(self, fn: Function) -> bool:
        """A method overriding one of a project base class in another module (whose code calls it:
        `BasePolicy.update` runs `self._update_with_batch`), of a class the project never builds while
        it builds others deriving from that base: no object of it exists to run it. (Where the
        project builds none, its users do: a library's trainers.)"""
        if self.project is None or not self.path or fn.class_name is None or fn.parent is not None:
            return False
        home = getattr(self.project, "method_home", None)
        info = self.local_class(fn.class_name)  # type: ignore[attr-defined]
        if home is None or info is None:
            return False
        for base in info.bases:
            found = home(self.path, base, fn.name)
            if found is not None and found.partition("::")[0] != self.resolved_path:
                return self.project.unbuilt(self.path, fn.class_name, found.rpartition(".")[0])
        return False

    @cached_property
    def resolved_path(self) -> str:
        """This module's path as other modules name it ("file::Class")."""
        return str(Path(self.path).resolve()) if self.path else ""

    def _instance_classes(self, expr: cst.BaseExpression, call: Call, ran: bool = False) -> list[ClassInfo]:
        """The classes of this module that `expr` may be an instance of, known from its value; of the
        modules it holds where it is an `nn.Sequential` that is `ran` (called: each runs in turn)."""
        out: list[ClassInfo] = []
        value = self.value(expr, call.site)
        for origin in origins(what_a_call_runs(value) if ran else value):
            if "::" in origin:  # a class of this module, passed in (or returned) by another module
                file, _, name = origin.partition("::")
                info = self.local_class(name) if self.path and Path(file) == Path(self.resolved_path) else None
            else:
                info = self.local_class(origin)
            if info is not None and info not in out:
                out.append(info)
        return out

    def inherited_method(self, info: ClassInfo, name: str, depth: int = 0) -> Function | None:
        """A class's method, its own or inherited from a class of this module."""
        if name in info.methods:
            return info.methods[name]
        for base in info.bases if depth < 10 else ():
            parent = self.local_class(base.rsplit(".", 1)[-1])
            if parent is not None and parent is not info:
                found = self.inherited_method(parent, name, depth + 1)
                if found is not None:
                    return found
        return None

    def of_another_class(self, call: Call, name: str) -> bool:
        """A method called on an object known to be of a class other than `name` and its subclasses here
        (`generator.generate(...)` after `generator = SequenceGenerator(...)`): no call of `name`'s method."""
        value = self.value(call.receiver, call.site) if call.receiver is not None else None  # type: ignore[attr-defined]
        built = (value.origin or "").replace("::", ".").rpartition(".")[2] if value is not None and value.kind in (Kind.OBJECT, Kind.MODULE) else ""
        return bool(built) and built != name and built not in {c.name for c in self.subclasses(name)}

    def subclasses(self, name: str) -> list[ClassInfo]:
        """The classes of this module that derive from class `name`, directly or through others."""
        out: list[ClassInfo] = []
        frontier = {name}
        while frontier:
            found = [c for c in self.classes if c not in out and any(b.rsplit(".", 1)[-1] in frontier for b in c.bases)]
            out.extend(found)
            frontier = {c.name for c in found}
        return out

    @cached_property
    def _callees_memo(self) -> dict[int, tuple[Function, ...]]:
        return {}

    @cached_property
    def _calls_by_callee(self) -> dict[int, list[Call]]:
        table: dict[int, list[Call]] = {}
        for call in self.calls:
            fn = self.callee(call)
            if fn is not None:
                table.setdefault(id(fn), []).append(call)
        return table

    @cached_property
    def _calls_by_node(self) -> dict[int, Call]:
        return {id(c.node): c for c in self.calls}

    @cached_property
    def _call_positions(self) -> dict[int, int]:
        return {id(c): i for i, c in enumerate(self.calls)}

    def call_position(self, call: Call) -> int:
        """Where a call is in `calls` (source order)."""
        return self._call_positions[id(call)]

    def call_at(self, node: cst.CSTNode) -> Call | None:
        """The call fact of a `cst.Call` node of this module."""
        return self._calls_by_node.get(id(node))

    @cached_property
    def _assigns_by_statement(self) -> dict[int, list[Assign]]:
        table: dict[int, list[Assign]] = {}
        for a in self.assigns:
            if a.site.statement is not None:
                table.setdefault(id(a.site.statement), []).append(a)
        return table

    @cached_property
    def _assigns_by_attribute(self) -> dict[tuple[str | None, str], list[Assign]]:
        table: dict[tuple[str | None, str], list[Assign]] = {}
        for a in self.assigns:
            if a.site.function is not None:
                for target in a.targets:
                    table.setdefault((a.site.function.class_name, target), []).append(a)
        return table

    def attribute_assigns(self, class_name: str | None, target: str) -> list[Assign]:
        """The assignments to `target` (`self.tokenizer`) in the methods of class `class_name` (None:
        in functions of no class)."""
        return self._assigns_by_attribute.get((class_name, target), [])

    def assigns_in(self, statement: cst.CSTNode | None) -> list[Assign]:
        """The assignments of one statement line."""
        return self._assigns_by_statement.get(id(statement), []) if statement is not None else []

    def calls_of(self, fn: Function) -> list[Call]:
        """The calls of a function of this module (for a class's `__init__`, its constructions too)."""
        calls = self._calls_by_callee.get(id(fn), [])
        if fn.name == "__init__" and fn.class_name is not None:
            calls = calls + self._constructions.get(fn.class_name, [])
        return calls

    def method_calls_of(self, fn: Function) -> list[Call]:
        """`obj.m(...)` where obj is an instance of the class of method `fn` (known from its value)."""
        if fn.class_name is None:
            return []
        found = [c for c in self.calls_by_method.get(fn.name, ()) if c.receiver_text not in ("self", "cls") and fn in self.callees(c)]
        if fn.name in ("forward", "__call__"):  # an instance called runs its `forward`
            found += [c for c in self._instance_calls if c.method != fn.name and fn in self.callees(c)]
        return found

    @cached_property
    def _instance_calls(self) -> list[Call]:
        """Calls that may run an instance: of an attribute of `self` that is no method of the caller's class
        (`self.loss_fn(x)`), of a name that is no function of the module nor a builtin (`model(x)`), of an
        element of a container (`self.layers[i](x)` of an `nn.ModuleList`)."""
        return [
            c for c in self.calls
            if (c.receiver_text == "self" and c.method is not None and c.qualname is None and self.callee(c) is None)
            or (c.name is not None and c.qualname is None and c.name not in _BUILTINS and self.callee(c) is None)
            or isinstance(c.node.func, cst.Subscript)
        ]

    @cached_property
    def calls_by_method(self) -> dict[str, list[Call]]:
        """The calls of a method (`x.m(...)`), by the method's name."""
        table: dict[str, list[Call]] = {}
        for c in self.calls:
            if c.method is not None:
                table.setdefault(c.method, []).append(c)
        return table

    @cached_property
    def _constructions(self) -> dict[str, list[Call]]:
        """`Net(cfg)`: the calls that construct each class of this module."""
        table: dict[str, list[Call]] = {}
        for call in self.calls:
            if call.name is not None and call.qualname is None and self.local_class(call.name) is not None:
                table.setdefault(call.name, []).append(call)
        return table

    def framework_internal(self, site: Site) -> bool:
        """Code of a framework's class (a precision plugin, a trainer base, a strategy) that owns no
        step loop: it implements a step for users' loops, it is not one."""
        fn = site.function
        if fn is None or fn.class_name is None:
            return False
        if any(loop.is_step and loop.function is not None and loop.function.class_name == fn.class_name for loop in self.loops):
            return False
        info = self.local_class(fn.class_name) if fn.parent is None else None
        if info is not None and any(self._is_hook(m) for m in info.methods.values()):
            return False  # a library calls its hooks every step: the user's model, whatever its bases are named
        words = set(tokens(fn.class_name)).union(*(tokens(b.rsplit(".", 1)[-1]) for b in fn.class_bases))
        return bool(words & FRAMEWORK_WORDS)

    def _is_hook(self, fn: Function) -> bool:
        """A method a training library calls once per step (Lightning's `training_step`), by its class's
        bases in any module of the project or the library registry holding the class (detectron2's models),
        a function handed to a library's engine as its step or per-step hook, or one the settings name."""
        if fn.name in self.settings.step_functions or id(fn) in engine_step_functions(self):
            return True
        if fn.class_name and fn.parent is None and registered_hook(fn.name, fn.class_name, self.local_class, self.imports.resolve):
            return True
        if fn.class_name is None or fn.name not in LIBRARY_HOOK_NAMES:
            return False
        return library_step_hook(fn.name, self.class_bases(fn))

    def library_argument(self, fn: Function, parameter: str) -> Value | None:
        """What a library's trainer passes for `parameter` of hook `fn`: the result of another method
        of the object (`criterion` = `self.get_criterion()`), its own or a project base class's."""
        if fn.class_name is None or fn.name not in LIBRARY_HOOK_NAMES:
            return None
        bases = self.class_bases(fn)
        if library_model_parameter(fn.name, parameter, bases):
            return Value(Kind.MODULE)  # (`compute_loss(self, model, inputs)`: the trainer's model)
        provider = library_argument(fn.name, parameter, bases)
        if provider is None:
            return None
        info = self.local_class(fn.class_name)
        local = self.inherited_method(info, provider) if info is not None else None
        if local is not None:
            return self.values.returns(local)
        for base in bases:
            methods = self.class_methods(base)
            if methods is not None and provider in methods and methods[provider].returns.kind is not Kind.UNKNOWN:
                return methods[provider].returns
        return None

    def class_bases(self, fn: Function) -> tuple[str, ...]:
        """The bases of `fn`'s class, through its project bases in any module."""
        bases = self._all_bases.get(fn.class_name or "")
        if bases is None:
            bases = fn.class_bases
            if self.project is not None and self.path and fn.parent is None:
                if self._alone:  # (no other module to look in: this one's classes say it all)
                    bases = self._module_bases(fn.class_name or "")
                else:
                    bases = tuple(dict.fromkeys((*bases, *self.project.class_bases(self.path, fn.class_name or ""))))
            self._all_bases[fn.class_name or ""] = bases
        return bases

    @cached_property
    def _alone(self) -> bool:
        """Whether this module is the only one of its project (a standalone script)."""
        alone = getattr(self.project, "alone", None)
        return alone is not None and alone(Path(self.path))

    def _module_bases(self, name: str) -> tuple[str, ...]:
        """Every base of this module's class `name`, through the module's own classes between."""
        by_name = {info.name: info for info in self.classes}
        found: list[str] = []
        pending, seen = [name], set()
        while pending:
            info = by_name.get(pending.pop(0))
            if info is None or info.name in seen:
                continue
            seen.add(info.name)
            for base in info.bases:
                found.append(base)
                pending.append(base)
        return tuple(dict.fromkeys(found))

    @cached_property
    def _all_bases(self) -> dict[str, tuple[str, ...]]:
        return {}

