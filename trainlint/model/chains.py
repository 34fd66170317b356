"""How code comes to run every step, across functions and modules: the call chains from a step loop
(or step hook) down to a function, and the calls a module makes every step into other project
modules (recorded in its summary, they make the callee's functions per step in its own analysis).
A mixin of `TrainingModel`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterable

import libcst as cst

from trainlint.model.candidates import candidate_classes, chosen_note
from trainlint.model.inherited_targets import InheritedTargets
from trainlint.model.whenever_run import WheneverRun
from trainlint.model.containers import what_a_call_runs
from trainlint.model.environments import AFTER, BACKWARD, ENV, OBSERVATION, RETURNED, feeds_environment, observed
from trainlint.model.lattice import MAX_ALTERNATIVES, origins
from trainlint.model.facts import Call, Function
from trainlint.model.function_values import partial_function
from trainlint.model.hooks import LIBRARY_HOOK_ATTRIBUTES, library_step_hook
from trainlint.model.summary import DISPATCH, FunctionSummary, given_facts
from trainlint.model.torchnames import LIBRARY_CLASS, LIBRARY_LOGITS_LOSSES, LIBRARY_LOSS_SCALERS


def _noted(place: "Place", note: str | None) -> "Place":
    """A place with what the analysis took its call to run, where that is no certainty."""
    return (*place[:3], note) if note else place[:3]  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class Bound:
    """Where a step chain starts that is no call: a function bound to a library's per-step attribute."""

    node: cst.BaseExpression


MAX_TABLE_FUNCTIONS = 3  # a dict of more functions may run any of them: none is followed

if TYPE_CHECKING:
    from trainlint.model.lattice import Value
    from trainlint.model.summary import ClassSummary
    from trainlint.model.summary import Place, StepCall


class StepChains(InheritedTargets, WheneverRun):
    """The per-step call chains of one module's functions, and its every-step calls out of it."""

    def step_chains(self, fn: Function) -> list[tuple[Call | Place, ...]]:
        """How a function comes to run every step: for each call from per-step code that reaches it,
        one chain of calls from the step loop (or a step hook) down to that call; calls in other files
        are places `(path, line, column)`. Empty for a function that holds a step loop or is a step
        hook itself."""
        return self._chains(fn, frozenset())

    def _chains(self, fn: Function, seen: frozenset[Function]) -> list[tuple[Call | Place, ...]]:
        out: list[tuple[Call | Place, ...]] = list(self._external_chains.get(fn, ()))
        for call in self._step_callers.get(fn, ()):
            caller = call.site.function
            if caller is None or caller not in self._step_callers and caller not in self._external_chains:
                out.append((call,))
            elif caller not in seen:
                prefix = self._chains(caller, seen | {fn})
                out.append((*prefix[0], call) if prefix else (call,))
        return out

    def passed_from_other_modules(self, fn: Function, name: str) -> "Value | None":
        """An instance of a project class that other modules pass for parameter `name` of `fn` (of a
        class's constructor too): `E2Trainer(model)` in train.py with `model = E2TTS(...)`, or
        `train_one_epoch(..., log_writer=log_writer)` with `log_writer = utils.TensorboardLogger(...)`."""
        from trainlint.model.lattice import Kind, Value
        from trainlint.model.summary import ClassSummary

        passed = self._passed_origins(fn, name)
        if not passed or len(passed) > MAX_ALTERNATIVES:
            return None
        # a model or a loss module (what runs `forward` every step), a plain object (a metric logger
        # whose `update` reads what it is given), a loss scaler (whose `__call__` backpropagates and
        # steps, clipping where a call asks it to), or a learning-rate scheduler of the project (a
        # warm-up built in `main` and stepped in the loop of another module); optimizers passed in keep
        # what the module itself can tell of them. Several classes passed (in several places) make an
        # object of one of them, when all are of one kind.
        kinds = set()
        for origin in passed:
            library = origin.removeprefix(f"{LIBRARY_CLASS}::")
            if library in LIBRARY_LOSS_SCALERS:
                return Value(Kind.SCALER, origin=library) if len(passed) == 1 else None
            if library in LIBRARY_LOGITS_LOSSES:  # `criterion=nn.CrossEntropyLoss()`: a loss module of torch's
                return Value(Kind.MODULE, origin=library) if len(passed) == 1 else None
            symbol = self.project_symbol(origin)
            if not isinstance(symbol, ClassSummary) or symbol.kind not in (Kind.MODULE, Kind.OBJECT, Kind.SCALER, Kind.SCHEDULER):
                return None
            kinds.add(symbol.kind)
        return Value(kinds.pop(), origin="|".join(passed)) if len(kinds) == 1 else None

    def passed_call_returns(self, fn: Function, name: str) -> "Value | None":
        """`grad_norm = loss_scaler(loss, optimizer)` with parameter `loss_scaler`: what the `__call__`
        of the classes other modules pass for it returns (a scaler's too), when all agree."""
        from trainlint.model.lattice import UNKNOWN, join
        from trainlint.model.summary import ClassSummary

        returns = []
        for origin in self._passed_origins(fn, name)[:MAX_ALTERNATIVES]:
            symbol = self.project_symbol(origin)
            called = symbol.methods.get("__call__") if isinstance(symbol, ClassSummary) else None
            if called is None or called.returns is UNKNOWN:
                return None
            returns.append(called.returns)
        return join(returns) if returns else None

    def _passed_origins(self, fn: Function, name: str) -> list[str]:
        """The project classes other modules pass for parameter `name` of `fn` (by name or position;
        a class's constructor is asked as the class), sorted."""
        if self.project is None or not self.path or fn.parent is not None:
            return []
        seeds = self._passed_seeds
        if not seeds:
            return []
        params = fn.explicit_params
        keys = {name, str(params.index(name))} if name in params else {name}
        owner = fn.class_name if fn.name == "__init__" and fn.class_name else fn.qualified
        return sorted({origin for key in keys for origin in seeds.get((owner, key), ())})

    @cached_property
    def _passed_fact_seeds(self) -> "dict[tuple[str, str], tuple[str, ...]]":
        return self.project.passed_arguments(self.path, facts=True) if self.project is not None else {}

    @cached_property
    def _passed_branch_seeds(self) -> "dict[tuple[str, str], tuple[str, ...]]":
        return self.project.passed_arguments(self.path, facts=True, receivers=True) if self.project is not None else {}

    @property
    def _passed_seeds(self) -> "dict[tuple[str, str], tuple[str, ...]]":
        known = getattr(self, "_passed_memo", None)
        if known is None:
            known = self._passed_memo = self.project.passed_arguments(self.path) if self.project is not None else {}
        return known

    def project_arguments(self) -> list[tuple[str, str, str]]:
        """(callee, parameter, class) for each call of a project function or class that passes an
        instance of a project class, or of a class of this module: what other modules' parameters hold.
        The callee and the project class are spelled as this module's imports spell them; a class of
        this module as `::Name`. And what each call of a project function, class or object (`self.
        decoder(y, y_mask)`) passes, as facts: "=N" marks call N, "=N:tensor", "=N:host" (a host tensor), "=N:none", "=N:True",
        "=N:value" (anything but None), "=N:?" (not known) say what it passes for a parameter."""
        from trainlint.model.summary import ClassSummary

        out: list[tuple[str, str, str]] = []
        for number, call in enumerate(self.calls):
            if call.qualname is not None and self._module_function(call) and self._in_project(call.qualname):
                callees = [call.qualname]
                for position, arg in enumerate(a for a in call.node.args if a.keyword is None and not a.star):
                    self._passed(call, str(position), arg.value, out, ClassSummary)
                for arg in call.node.args:
                    if arg.keyword is not None:
                        self._passed(call, arg.keyword.value, arg.value, out, ClassSummary)
                when = ""
            else:  # an object's method or `forward`, called every step (`self.decoder(y, y_mask)`)
                stepping = self._stepping_targets.get(call, [])
                callees, when = [t for t, _ in stepping], stepping[0][1] if stepping else ""
                for callee in dict.fromkeys(c for c in callees if not c.startswith(DISPATCH)):  # (its objects too)
                    for position, arg in enumerate(a for a in call.node.args if a.keyword is None and not a.star):
                        self._passed(call, str(position), arg.value, out, ClassSummary, callee)
            if not callees or any(a.star for a in call.node.args):
                continue
            facts = [(a.keyword.value if a.keyword is not None else str(i), self._fact(a.value, call)) for i, a in enumerate(call.node.args)]
            if feeds_environment(self, call):  # type: ignore[arg-type]
                facts.append((RETURNED, ENV))  # (what it returns is an action for a host environment)
            if self._backward_after(call):  # (a retained graph it leaves is consumed in this step)
                facts.append((AFTER, BACKWARD))
            for callee in dict.fromkeys(callees):  # (an object of one of several classes: each may run)
                out.append((callee, "", f"={number}@{when}"))  # (made whenever `when` runs: per step where it is)
                out.extend((callee, key, f"={number}:{fact}") for key, fact in facts)
        return out

    def _backward_after(self, call: Call) -> bool:
        """A backward later in the function of `call`, in the same round of its loops."""
        if "_backwards" not in self.__dict__:  # (found once: asked of every call into another module)
            self.__dict__["_backwards"] = [c for c in self.calls if self.is_backward(c)]  # type: ignore[attr-defined]
        return any(o.site.function is call.site.function and o.site.order > call.site.order and (
            not call.site.loops or any(loop in o.site.loops for loop in call.site.loops)) for o in self.__dict__["_backwards"])

    def _in_project(self, qualname: str) -> bool:
        """A name of a project module: its summary, or (where summaries know only names, a module with
        training code summarised deep down) its place."""
        if self.project_symbol(qualname) is not None:
            return True
        return self.project is not None and bool(self.path) and self.project.qualify(self.path, qualname) is not None

    def _module_function(self, call: Call) -> bool:
        """`f(x)` or `utils.f(x)` (a function reached through a module, not a class's `Cls.f(x)`)."""
        from trainlint.model.summary import ClassSummary

        if call.receiver is None:
            return True
        receiver = self.imports.resolve(call.receiver)
        return receiver is not None and not isinstance(self.project_symbol(receiver), ClassSummary)

    def _passed(self, call: Call, key: str, expr: cst.BaseExpression, out: list, class_summary: type, callee: str | None = None) -> None:
        callee = callee or call.qualname or ""
        before = len(out)
        self._record_passed(callee, key, origins(self.value(expr, call.site)), out, class_summary)
        if len(out) == before:  # an object whose class the project chooses at run time: each candidate, as at a call
            self._record_passed(callee, key, candidate_classes(self, expr, call.site, None), out, class_summary)  # type: ignore[arg-type]

    def _record_passed(self, callee: str, key: str, found: "Iterable[str]", out: list, class_summary: type) -> None:
        for origin in found:
            if self.local_class(origin) is not None:
                out.append((callee, key, f"::{origin}"))
            elif isinstance(self.project_symbol(origin), class_summary):
                out.append((callee, key, origin))
            elif origin in LIBRARY_LOSS_SCALERS or origin in LIBRARY_LOGITS_LOSSES:  # (a library class whose calls are known)
                out.append((callee, key, f"{LIBRARY_CLASS}::{origin}"))

    @cached_property
    def _stepping_targets(self) -> "dict[Call, list[tuple[str, str]]]":
        """The calls `step_calls` found, each with what it runs in other modules (and the function
        of this module whenever which it runs, if it is not per step here)."""
        return {}

    def _fact(self, expr: cst.BaseExpression, call: Call) -> str:
        """What an argument is, for the callee's branches and values: "True"/"False" (literals), "none",
        "host" (a tensor on the host: `log(loss.cpu())`), "device" (a tensor on an accelerator: `y.cuda()`),
        "tensor", "value" (surely not None), "?"."""
        from trainlint.model.lattice import ACCEL, HOST, Kind

        if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
            return "none" if expr.value == "None" else expr.value
        if observed(self, expr, call.site.function, call.site):  # type: ignore[arg-type]
            return OBSERVATION
        value = self.value(expr, call.site)
        if value.kind in (Kind.TENSOR, Kind.UNKNOWN) and value.device == HOST:
            return "host"  # (`x.cpu()` of a value the analysis cannot see is on the host all the same)
        if value.kind in (Kind.TENSOR, Kind.UNKNOWN) and value.device == ACCEL:
            return "device"  # (`y.cuda()` of an unseen batch: a tensor moved there)
        if value.kind is Kind.TENSOR:
            return "tensor"
        if value.kind is Kind.NONE:
            return "none"
        return "value" if value.kind in (Kind.MODULE, Kind.OBJECT, Kind.NUMBER, Kind.STRING, Kind.COLLECTION) else "?"

    def passed_facts(self, fn: Function, name: str, receivers: bool = False) -> list[str] | None:
        """What each call other modules make of `fn` every step passes for parameter `name`
        (`project_arguments`'s facts; "default" where a call passes none), or None when no other
        module runs it every step. The importers' calls; with `receivers`, also those of the modules
        they hand this module's objects to (`passed_arguments`): a branch's decision reads those, a
        value the importers' only, as the summaries their reports agree with do."""
        if self.project is None or not self.path or fn.parent is not None or fn not in getattr(self, "_external_chains", {}):
            return None  # (asked of the functions other modules run every step: their callers' summaries are read already)
        owner = fn.class_name if fn.name == "__init__" and fn.class_name else fn.qualified
        params = fn.explicit_params
        keys = [k for k in (name, str(params.index(name)) if name in params else None) if k is not None]
        return given_facts(self._passed_branch_seeds if receivers else self._passed_fact_seeds, owner, keys)

    def step_calls(self, place: Callable[[list[Call]], dict[Call, Place]]) -> list[StepCall]:
        """The calls this module makes on every step into names of other project modules: a project
        function, or a method of an instance of a project class (`model(x)` runs its `forward`),
        each with its chain from the step loop (`place` locates calls of this module, asked once for
        all the calls the chains hold)."""
        from trainlint.model.summary import StepCall

        if self.project is None or not self.path:
            return []
        found: list[tuple[str, tuple[Call | Place | Bound, ...], str, str]] = []
        for call in self.calls:
            if not self.every_step(call.site) or self.framework_internal(call.site):
                continue
            targets = self._targets(call)
            if not targets:
                continue
            prefix: tuple[Call | Place, ...] = ()
            fn = call.site.function
            if fn is not None and fn in self.step_functions:
                chains = self.step_chains(fn)
                prefix = chains[0] if chains else ()
            found.extend((target, (*prefix, call), "", "") for target in targets)
        found.extend(self._calls_whenever_run())
        found.extend((target, chain, "", "") for target, chain, _ in self._hook_attribute_bindings())
        for target, chain, when, _ in found:
            self._stepping_targets.setdefault(chain[-1], []).append((target, when))  # type: ignore[index]
        places = place([c for _, chain, _, _ in found for c in chain if not isinstance(c, tuple)]) if found else {}
        notes = self.chosen_notes  # type: ignore[attr-defined]
        out = []
        for target, chain, when, flag in found:
            placed = [c if isinstance(c, tuple) else _noted(places.get(c, (self.path, 0, 0)), notes.get(id(c))) for c in chain]
            last = chain[-1]
            if target in self._chosen_targets_of and not isinstance(last, tuple) and id(last) in self.chosen:  # type: ignore[attr-defined]
                # (the class this target is of, where the call may run several)
                placed[-1] = _noted(placed[-1], chosen_note(self.chosen[id(last)][0], [self._chosen_targets_of[target]]))  # type: ignore[attr-defined]
            out.append(StepCall(target, tuple(placed), self.uses_accelerator, when, flag))
        return out

    def _hook_attribute_bindings(self) -> "list[tuple[str, tuple[Bound], str]]":
        """`self.compute_loss_func = dft_loss_func` in a subclass of a library trainer that calls that
        attribute once per step (`LIBRARY_HOOK_ATTRIBUTES`): the project function bound there (through a
        `lambda` calling it or a `functools.partial` of it too) runs every step; its chain starts at
        the binding."""
        out: list[tuple[str, tuple[Bound], str]] = []
        for assign in self.assigns:
            fn = assign.site.function
            if fn is None or fn.class_name is None or assign.op is not None or len(assign.targets) != 1:
                continue
            owner, _, attr = assign.targets[0].partition(".")
            if owner != "self" or not library_step_hook(attr, self.class_bases(fn), LIBRARY_HOOK_ATTRIBUTES):  # type: ignore[attr-defined]
                continue
            for node, target in self._bound_functions(assign.value):
                out.append((target, (Bound(node),), ""))
        return out

    def _bound_functions(self, expr: cst.BaseExpression) -> list[tuple[cst.BaseExpression, str]]:
        """The project functions a callable expression runs when called: a function's name, the function
        a `lambda`'s body calls, the function of a `functools.partial(f, ...)`."""
        if isinstance(expr, cst.Lambda):
            expr = expr.body
            if not isinstance(expr, cst.Call):
                return []
            expr = expr.func
        elif isinstance(expr, cst.Call) and self.imports.resolve(expr.func) == "functools.partial" and expr.args:
            expr = expr.args[0].value
        qualname = self.imports.resolve(expr)
        if qualname is None or not isinstance(self.project_symbol(qualname), FunctionSummary):
            return []
        return [(expr, qualname)]

    def _targets(self, call: Call) -> list[str]:
        """What a call runs in other modules: functions of project modules, else an override of a
        method called on `self` (`_dispatched`)."""
        targets = self.project_targets(call) or self._super_targets(call)
        dispatched = self._dispatched(call) if not targets else None
        own = call.receiver_text == "self" and self.callee(call) is None  # (a method this module does not define)
        held = self._held_by_self(call) if own else []
        inherited = self._inherited_by_self(call) if dispatched is not None else []
        return [*inherited, dispatched, *held] if dispatched is not None else [*targets, *held]

    def project_target(self, call: Call) -> str | None:
        """The first of `project_targets` (or the method of a project base in another module that a
        call on `self` or `super()` runs), or None."""
        targets = self.project_targets(call) or self._inherited_by_self(call) or self._super_targets(call)
        return targets[0] if targets else None

    def project_targets(self, call: Call) -> list[str]:
        """The functions of other project modules a call runs, as this module's imports spell them
        (`utils.all_reduce`, `losses.SetCriterion.forward` for `criterion(a, b)`; one per class an
        object may be), or none. A call made every step makes them per step in their own modules,
        where their code is reported."""
        from trainlint.model.summary import ClassSummary as class_summary

        if call.qualname is not None and call.receiver is None:
            symbol = self.project_symbol(call.qualname)
            return [call.qualname] if symbol is not None and not isinstance(symbol, class_summary) else []
        if call.qualname is not None and call.method is not None:  # `utils.all_reduce(x)`, `losses.Loss.f`
            symbol = self.project_symbol(call.qualname)
            if symbol is not None and not isinstance(symbol, class_summary):
                return [call.qualname]
            owner = self.project_symbol(call.qualname.rpartition(".")[0]) if call.method == "apply" and symbol is None else None
            if isinstance(owner, class_summary) and {"forward", "backward"} <= set(owner.methods):
                # `ops.BucketizeFn.apply(x)`: a custom autograd function, called on its class, runs its
                # `forward` now and its `backward` when the graph is backpropagated
                return [f"{call.qualname.rpartition('.')[0]}.{m}" for m in ("forward", "backward")]
        func = call.node.func
        table = self.imports.resolve(func.value) if isinstance(func, cst.Subscript) and self.project is not None and self.path else None
        if table is not None:  # `loss_registry[cfg.loss](model, x)`: a dict of another module's functions
            chosen = self.project.class_candidates(self.path, "functions", table)  # type: ignore[union-attr]
            return list(chosen) if len(chosen) <= MAX_TABLE_FUNCTIONS else []
        func = partial_function(self, call) or func  # (`compute_losses()`, a `functools.partial` of a method)
        candidates: list[tuple[cst.BaseExpression, str | None]] = []
        if isinstance(func, cst.Attribute):
            # `obj.m(...)`, `Interface().m(...)` (a singleton built where it is used): a method of its class
            candidates.append((func.value, func.attr.value))
        if isinstance(func, (cst.Attribute, cst.Subscript, cst.Call)) or (isinstance(func, cst.Name) and call.qualname is None):
            # `model(x)`, `self.model(x)`, `criterion[idx](x)`, `Plugin(name)(x)`: the instance's forward
            candidates.append((func, None))
        for expr, method in candidates:
            found = []
            value = self.value(expr, call.site)
            for origin in origins(what_a_call_runs(value) if method is None else value):  # (`self.body(x)` of a Sequential)
                owner = self.project_symbol(origin)
                if not isinstance(owner, class_summary):
                    if owner is not None and method is None and expr is func:
                        found.append(origin)  # a project function the value holds (`fn = losses.l1; fn(x)`)
                    continue
                name = next((n for n in ((method,) if method else ("forward", "__call__")) if n in owner.methods), None)
                if name is not None:
                    found.append(f"{origin}.{name}")
                else:  # inherited from a project base class (`policy.update(batch)` with `update` in `BasePolicy`)
                    found.extend(self._inherited_target(origin, method))
                found.extend(self._dispatched_to(origin, owner, method if name is None else None))
            if found:
                return found
        return self._chosen_targets(call, candidates)

    def _chosen_targets(self, call: Call, candidates: "list[tuple[cst.BaseExpression, str | None]]") -> list[str]:
        """The methods of other modules' classes a call may run where the project chooses the object's
        class at run time (`candidates`): each candidate's own or inherited method."""
        from trainlint.model.summary import ClassSummary

        here = self.resolved_path  # type: ignore[attr-defined]
        # (`self.criterion(x)`: the object the attribute holds, not a method of `self`'s class)
        for expr, method in [(e, m) for e, m in candidates if not (isinstance(e, cst.Name) and e.value == "self")][:1]:
            if self.value(expr, call.site).origin is not None:
                return []
            found: list[str] = []
            for origin in candidate_classes(self, expr, call.site, method):  # type: ignore[arg-type]
                file, _, name = origin.rpartition("::")
                owner = self.project_symbol(origin) if file and file != here else None
                if not isinstance(owner, ClassSummary):
                    continue
                own = next((n for n in ((method,) if method else ("forward", "__call__")) if n in owner.methods), None)
                targets = [f"{origin}.{own}"] if own is not None else self._inherited_target(origin, method)
                if targets:
                    found.extend(targets)
                    text, classes = self.chosen.get(id(call), ("", ()))  # type: ignore[attr-defined]
                    self.chosen[id(call)] = (self.module.code_for_node(expr), tuple(dict.fromkeys((*classes, origin))))  # type: ignore[attr-defined]
                    self._chosen_targets_of.update((t, origin) for t in targets)
            return found
        return []

    @cached_property
    def _chosen_targets_of(self) -> dict[str, str]:
        """The class each target that class-hierarchy analysis found is a method of (or inherited by)."""
        return {}

    def _dispatched_to(self, origin: str, owner: "ClassSummary", method: str | None) -> list[str]:
        """What an instance of a registry class runs by name (`Plugin(name).clip(...)`, `Plugin(name)(x)`):
        the method of each class registered under it (or, called, each registered function)."""
        from trainlint.model.summary import ClassSummary, FunctionSummary

        out: list[str] = []
        module = origin.rpartition(".")[0]
        for name in owner.registered[:MAX_ALTERNATIVES * 2]:
            registered = self.project_symbol(f"{module}.{name}")
            if method is not None and isinstance(registered, ClassSummary) and method in registered.methods:
                out.append(f"{module}.{name}.{method}")
            elif method is None and isinstance(registered, FunctionSummary):
                out.append(f"{module}.{name}")
        return out

    def step_scope(self) -> list[tuple[cst.CSTNode, str, tuple[Call | Place, ...]]]:
        """What the analysis takes to run every training step, for `--show-steps`: each outermost step
        loop, and each per-step function with why (one chain of calls from a step loop, a hook, or a
        function that steps named as a step), in source order."""
        out: list[tuple[cst.CSTNode, str, tuple[Call | Place, ...]]] = []
        for loop in self.loops:
            if loop.is_step and (loop.parent is None or not loop.parent.is_step):
                where = f" in `{loop.function.qualified}`" if loop.function is not None else ""
                out.append((loop.node, f"step loop{where}", ()))
        for fn in self.step_functions:
            chains = self.step_chains(fn)
            if chains:
                out.append((fn.node, f"`{fn.qualified}` runs every step via", chains[0]))
            elif self._is_hook(fn):
                out.append((fn.node, f"`{fn.qualified}` is a per-step hook", ()))
            else:
                out.append((fn.node, f"`{fn.qualified}` steps the optimizer and is named as a step", ()))
        return out
