"""The summariser: a module's training model read into its summary (`summary.py`'s plain data), one
function and class at a time, for the modules that import it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from trainlint.model.arguments import argument_for
from trainlint.model.names import dotted, root_name, tokens
from trainlint.model.gates import isinstance_tests
from trainlint.model.torchnames import GRAD_SCALER, decorated_no_grad, is_clip_name, is_scheduler_factory, wraps_without_grad
from trainlint.model.lattice import HOST, UNKNOWN, Kind, Value, join, origins
from trainlint.model.function_values import portable
from trainlint.model.added_methods import adds_methods
from trainlint.model.saved_arguments import sets_caller_arguments
from trainlint.model.layer_swaps import optimized_modules, replaced_layers
from trainlint.model.activations import mentions_activation, returned_activation

if TYPE_CHECKING:
    import libcst as cst

    from trainlint.model.facts import Call, ClassInfo, Function, Site
    from trainlint.model.training import TrainingModel

from trainlint.model.summary import (
    ARGUMENT_READS, ENV_WORDS, SYNCHRONIZE, VALUE_READS, ClassSummary, FunctionSummary, ModuleSummary, registry_root,
)


class Summarizer:
    """Builds the summaries of one module's functions from its training-code model."""

    def __init__(self, model: "TrainingModel", label: str) -> None:
        self.model = model
        self.label = label
        self._memo: dict[int, FunctionSummary] = {}
        self._active: set[int] = set()
        from trainlint.model.manual_updates import updated_by_hand  # (libcst's side: not for outlines)

        from trainlint.model.parameter_uses import ParameterUses

        self._by_hand = updated_by_hand(model)  # weights updated through their `.grad`, by hand
        self._activations = mentions_activation(model)  # (else no function here returns probabilities)
        self._uses = ParameterUses(model)

    def module(self) -> ModuleSummary:
        m = self.model
        functions = {fn.name: self.function(fn) for fn in m.functions if fn.class_name is None and _top_level(fn)}
        registered: dict[str, list[str]] = {}
        for statement in m.module.body:  # (top-level definitions)
            for decorator in getattr(statement, "decorators", ()):
                root = registry_root(decorator.decorator)
                if root is not None and m.local_class(root) is not None:
                    registered.setdefault(root, []).append(statement.name.value)  # type: ignore[attr-defined]
        classes = {
            c.name: replace(self.cls(c), registered=tuple(registered.get(c.name, ())), attributes=self._attributes(c))
            for c in m.classes
        }
        return ModuleSummary(functions, classes, {k: v for k, v in m.imports.names.items() if v.split(".", 1)[0] != "torch"})

    def cls(self, info: "ClassInfo") -> ClassSummary:
        methods = {name: self.function(fn) for name, fn in info.methods.items()}
        return ClassSummary(class_kind(info, methods, self.model.is_module_class(info)), methods)

    def kind(self, info: "ClassInfo") -> Kind:
        """`cls(info).kind`, summarising only the methods `class_kind` reads (none for a module)."""
        return class_kind(info, self.methods(info), self.model.is_module_class(info))

    def methods(self, info: "ClassInfo") -> "Mapping[str, FunctionSummary]":
        """The summaries of a class's methods, each made when it is first read."""
        return _Methods(self, info)

    def _attributes(self, info: "ClassInfo") -> dict[str, Value]:
        """The instances of classes (of this module, another project module or `torch.nn`) that the
        class's methods assign to `self` attributes."""
        m = self.model
        names = {t[5:] for a in m.assigns for t in a.targets if t.startswith("self.") and t.count(".") == 1
                 and a.site.function is not None and a.site.function.class_name == info.name}
        out = {}
        for name in sorted(names):
            value = _qualified(m.values.instance_attribute(info.name, name), m)
            if value.kind not in (Kind.MODULE, Kind.OBJECT, Kind.SCALER) or not value.origin:
                continue
            # a class of this module ("file::Lstm"), one of another project module as the imports spell it
            # (`.parts.OutConv`, renamed where it is read), or a torch layer (`self.outc = nn.Conv2d(...)`)
            if "::" in value.origin or all(o.startswith("torch.nn.") or m.project_symbol(o) is not None for o in origins(value)):
                out[name] = value
        return out

    def function(self, fn: "Function") -> FunctionSummary:
        key = id(fn)
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            return FunctionSummary()
        self._active.add(key)
        try:
            summary = self._summarize(fn)
        finally:
            self._active.discard(key)
        self._memo[key] = summary
        return summary

    def _reads_passed(self, fn: "Function", call: "Call", sub: FunctionSummary | None) -> list[str]:
        """The parameters (`FunctionSummary.read_parameters`) whose values `call` reads on the host as
        they came (`targets.cpu()`), or hands on as they came to a function that reads them
        (`self.preprocess(targets)`; not a module's `forward`, whose reads stay where its code is)."""
        m = self.model
        if _chosen_by_a_parameter(fn, call.site):
            return []
        if call.method in ARGUMENT_READS and call.receiver is not None:
            return [parameter_key(fn, call.receiver)] if reads_passed_value(m, fn, call) else []
        if sub is None or not sub.reads_arguments or fn.name == "forward":
            return []
        return [
            parameter_key(fn, a) for a in read_arguments(call.node, sub)
            if m.value(a, call.site).kind in (Kind.TENSOR, Kind.UNKNOWN) and passes_on(m, fn, a, call.site)
        ]

    def _summarize(self, fn: "Function") -> FunctionSummary:
        m = self.model
        steps = backprops = trains = clears = clips = scales = train_mode = False
        read_parameters: list[str] = []
        synchronizes: list[str] = []
        syncs: list[str] = []
        self_calls: list[str] = []
        stepped: list[str] = []
        called_parameters: list[str] = []
        self_methods: list[str] = []
        params = set(fn.params) - {"self", "cls"}
        clip_gates: list[str | None] = []  # for each clip: the parameter that gates it, if one does
        subs: dict[int, FunctionSummary] = {}  # the summaries of the calls of `fn` that run project code
        for call in fn.calls:
            own = call.site.function is fn
            unlooped = own and not call.site.loops
            # every call of the function runs it (inside a loop of its own: several times per call)
            every = own and not call.site.in_except and not any(d >= 0 for d in call.site.gate_depths)
            callee = m.called_function(call)
            if every and callee is None and call.receiver_text == "self" and call.method and fn.class_name:
                self_calls.append(call.method)  # (not a method of the class: an attribute it holds)
            if unlooped and every and call.method == "step" and call.receiver_text in params and len(call.node.args) <= 1:
                stepped.append(call.receiver_text)
            if unlooped and every and callee is not None and callee.class_name and call.receiver_text == "self" and fn.class_name:
                self_methods.append(callee.name)
            if every and call.name in params and call.qualname is None and not m.reaching(fn, call.name, call.site):
                called_parameters.append(call.name)  # (`fn()`, the parameter as it came)
            sub = self.function(callee) if callee is not None else m.project_call_summary(call)
            if sub is not None and own:
                subs[id(call)] = sub
            last = (call.qualname or call.method or call.name or "").rsplit(".", 1)[-1]
            if is_clip_name(last) or (sub is not None and sub.clips):
                clips = True
                clip_gates.append(_gating_parameter(call, params) if own else None)
            if call.method == "zero_grad" or (sub is not None and sub.clears_grads):
                clears = True
            if (call.method == "train" and len(call.node.args) <= 1) or (sub is not None and sub.sets_train_mode):
                train_mode = True
            if call.method == "scale" or (call.qualname or "") in GRAD_SCALER or (sub is not None and sub.scales):
                scales = True
            if not own:
                continue
            if any(loop.is_step for loop in call.site.loops) or (sub is not None and sub.trains):
                trains = True
            if unlooped and (m.is_optimizer_step(call) or (sub is not None and sub.steps)):
                steps = True
            if unlooped and (m.is_backward(call) or (sub is not None and sub.backprops)):
                backprops = True
            if every and (held := [n for n in m.called_names(call) if n in SYNCHRONIZE]):
                synchronizes.append(f"{held[0]}()")
            elif every and sub is not None and sub.synchronizes:
                synchronizes.extend(sub.synchronizes)
            if every and call.method in VALUE_READS and call.receiver is not None:
                value = m.value(call.receiver, call.site)
                if value.is_tensor and value.device != HOST:
                    syncs.append(m.module.code_for_node(call.node))
            elif every and sub is not None and sub.syncs:
                syncs.extend(sub.syncs)
            if every and params:
                read_parameters.extend(self._reads_passed(fn, call, sub))
        reads = bool(read_parameters)
        if any(c.method == "step" and ENV_WORDS & set(tokens(c.receiver_text or "")) for c in fn.calls):
            syncs, reads, read_parameters = [], False, []  # acting in a host environment: the action must reach the host every step
        no_grad = decorated_no_grad(fn.decorators)
        returns = portable(_qualified(_returned(fn, m) if fn.return_facts else UNKNOWN, m))
        return FunctionSummary(
            where=f"`{fn.qualified}` in {self.label}",
            steps=steps or fn in self._by_hand,
            backprops=backprops,
            trains=trains,
            clears_grads=clears,
            clips=clips,
            scales=scales,
            synchronizes=tuple(dict.fromkeys(synchronizes)),
            syncs=tuple(dict.fromkeys(syncs)),
            reads_arguments=reads,
            read_parameters=tuple(dict.fromkeys(read_parameters)),
            no_grad=no_grad,
            sets_train_mode=train_mode,
            differentiates_arguments=None,
            returns=returns if returns.kind is not Kind.UNKNOWN else UNKNOWN,
            defined=(m.path or "", fn.qualified),
            returns_argument=_returned_parameter(fn, m),
            **_passed_parameter(fn, m),
            self_calls=tuple(dict.fromkeys(self_calls)),
            steps_parameter=_parameter_key(fn, stepped[0]) if stepped and not steps else None,
            clips_parameter=_parameter_key(fn, clip_gates[0]) if clip_gates[0:1] != [None] and len(set(clip_gates)) == 1 else None,
            adds_methods=adds_methods(m, fn),
            saves_arguments=fn.class_name is not None and sets_caller_arguments(fn),
            replaces_layers=replaced_layers(m, fn, lambda callee: self.function(callee).replaces_layers),
            optimizes=optimized_modules(m, fn),
            returns_activation=self._returned_activation(fn),
            parameter_facts=self._uses.facts(fn, subs),
            calls_parameters=tuple(k for n in dict.fromkeys(called_parameters) if (k := _parameter_key(fn, n)) is not None),
            self_methods=tuple(dict.fromkeys(self_methods)),
            turns_grad_off=fn.parent is None and wraps_without_grad(fn.node, m.imports.resolve),
        )

    def _returned_activation(self, fn: "Function") -> str | None:
        return returned_activation(self.model, fn) if self._activations else None


def _qualified(value: Value, m: "TrainingModel") -> Value:
    """A returned object of a class of this module, named as other modules can find it ("file::Name"),
    also in the places of a returned tuple."""
    if value.kind is Kind.COLLECTION and value.items is not None:
        items = tuple(_qualified(i, m) for i in value.items)
        return replace(value, element=join(items), items=items) if items != value.items else value
    if value.kind not in (Kind.MODULE, Kind.OBJECT) or not value.origin or not m.path:
        return value
    here = str(Path(m.path).resolve())
    named = [f"{here}::{o}" if m.local_class(o) is not None else o for o in origins(value)]
    return replace(value, origin="|".join(named))


def _returned(fn: "Function", m: "TrainingModel") -> Value:
    """What a call of `fn` returns, for other modules. A factory returning `model, optimizer` on one
    path (`if train:`) and `model` on another: a caller that unpacks the result took the tuple's path,
    which is what it returns there (the outline reads such factories so too)."""
    import libcst as cst

    tuples = [r for r in fn.return_facts if isinstance(r.value, cst.Tuple)]
    if not tuples or len(tuples) == len(fn.return_facts):
        return m.values.returns(fn)
    return join([m.values.of(r.value, fn, r.site) for r in tuples])


def _returned_parameter(fn: "Function", m: "TrainingModel") -> str | None:
    """"0 model" when every `return` of `fn` gives back its parameter `model` unchanged."""
    import libcst as cst

    names = {r.value.value for r in fn.return_facts if isinstance(r.value, cst.Name)}
    if len(names) != 1 or len(fn.return_facts) != len([r for r in fn.return_facts if isinstance(r.value, cst.Name)]):
        return None
    name = names.pop()
    if any(m.reaching(fn, name, r.site) for r in fn.return_facts):
        return None
    return _parameter_key(fn, name)


def _passed_parameter(fn: "Function", m: "TrainingModel") -> dict[str, object]:
    """`passes_argument` and `returns_besides` when some `return`s of `fn` give back one parameter
    unchanged and the others something else (`return input_dict` on one process, the reduced dict
    otherwise); nothing when every one gives it back (`returns_argument`) or none does."""
    import libcst as cst

    # (not under a test of its type, `if isinstance(x, (float, int)): return x`: given back only when a number)
    given = [r for r in fn.return_facts if isinstance(r.value, cst.Name) and r.value.value in fn.params and not m.reaching(fn, r.value.value, r.site)
             and not any(dotted(tested) == r.value.value for tested, _, _ in isinstance_tests(r.site.gate_nodes))]
    names = {r.value.value for r in given}  # type: ignore[union-attr]
    others = [r for r in fn.return_facts if all(r is not g for g in given)]
    key = _parameter_key(fn, next(iter(names))) if len(names) == 1 and others and all(r.value is not None for r in others) else None
    if key is None:
        return {}
    return {"passes_argument": key, "returns_besides": portable(_qualified(join([m.values.of(r.value, fn, r.site) for r in others]), m))}


def _parameter_key(fn: "Function", name: str) -> str | None:
    """"0 model": a parameter's position among the explicit ones, and its name."""
    positional = fn.explicit_params
    return f"{positional.index(name)} {name}" if name in positional else None


def _gating_parameter(call: "Call", params: set[str]) -> str | None:
    """The parameter whose being given gates a call: `if clip_grad is not None:` or `if clip_grad:`
    around it (the innermost such test of the function's `if`s around the call)."""
    import libcst as cst

    for node in reversed(call.site.gate_nodes):
        test = getattr(node, "test", None)
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            test = test.left  # `if clip_grad is not None and clip_grad > 0:`
        if isinstance(test, cst.Name) and test.value in params:
            return test.value
        if (
            isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value in params
            and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.IsNot)
            and isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None"
        ):
            return test.left.value
    return None


def _top_level(fn: "Function") -> bool:
    return fn.class_name is None


# methods that hand back the value they are called on, as far as reading it goes: `v.detach().item()`
# reads what the caller passed; `v.mean().item()`, `torch.max(lengths).item()` read a value the
# helper computes (one finding in the helper, not one per call site)
PASS_THROUGH_METHODS = frozenset({"detach", "float", "double", "half", "clone", "contiguous", "squeeze", "flatten", "view", "reshape"})


def reads_passed_value(m: "TrainingModel", fn: "Function", call: "Call") -> bool:
    """Whether a read (`v.item()`) in `fn` reads a value its caller passed, as it was passed: a
    parameter, a name its loops bind over one (`for k, v in kwargs.items()`), an element or attribute
    of one, through local names and value-keeping methods (`v.detach()`). A value the function
    computes from its arguments (`model(batch)`, `torch.max(lengths)`, `a - b`) is its own: its read is
    reported where the function's code is, not at its call sites (one finding per defect)."""
    # a module's `forward` runs through `model(x)`, whose call sites the analysis does not always
    # resolve to it: its reads stay where its code is
    if call.receiver is None or fn.name in ("forward", "__call__"):
        return False
    return passes_on(m, fn, call.receiver, call.site)


def passes_on(m: "TrainingModel", fn: "Function", expr: "cst.BaseExpression", site: "Site") -> bool:
    """Whether `expr` at `site` in `fn` is a value `fn`'s caller passed, as it was passed (see
    `reads_passed_value`): `targets` in `self.preprocess(targets)` hands on what `fn` was given."""
    import libcst as cst

    from trainlint.model.value_calls import HOST_ATTRIBUTES

    params = set(fn.params) - {"self", "cls"}
    if not params:
        return False
    passed = params | loop_names_over(fn, site, params, m)
    stack: list[tuple[cst.BaseExpression, object]] = [(expr, site)]
    seen = 0
    while stack:
        expr, site = stack.pop()
        seen += 1
        if seen > 16:
            return False
        if isinstance(expr, cst.Name):
            # (the assignment that holds the read binds after it: `v = v.item()` reads the old `v`)
            assigns = [a for a in m.reaching(fn, expr.value, site) if a.site.statement is None or a.site.statement is not site.statement]  # type: ignore[arg-type, attr-defined]
            if expr.value in passed and expr.value not in params:
                # a loop's name over a parameter is bound afresh at each iteration: what a later
                # statement of the body assigns reaches only through the back-edge, overwritten
                assigns = [a for a in assigns if a.site.order < site.order]  # type: ignore[attr-defined]
            if not assigns and expr.value in passed:
                return True
            if len(assigns) != 1 or assigns[0].op is not None or assigns[0].unpacked:
                return False  # rebound on some paths only, or updated: a value the function makes
            stack.append((assigns[0].value, assigns[0].site))
        elif isinstance(expr, cst.Attribute) and expr.attr.value in HOST_ATTRIBUTES:
            return False  # (`preds.shape[0]`: what the tensor says of itself, on the host)
        elif isinstance(expr, (cst.Attribute, cst.Subscript)):
            stack.append((expr.value, site))
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in PASS_THROUGH_METHODS:
            stack.append((expr.func.value, site))
    return False


def _chosen_by_a_parameter(fn: "Function", site: "Site") -> bool:
    """Code under a test of a parameter against a mode's name (`if mode == "cpu":`, YOLOX's assignment
    on the host when the device runs out of memory), or code run only when a caller passes a parameter
    (`else` of `if step is None:` in a logger's `update(head, step=None, **kwargs)`, which logs what an
    epoch's caller passes): which callers run it, their arguments say (a number compared, `if n_items
    != 4:`, is the data's; the path of a caller passing nothing stays every caller's)."""
    import libcst as cst

    def chooses(test: "cst.BaseExpression", passed: type) -> bool:  # (passed: the operator that holds when a value is passed)
        if not isinstance(test, cst.Comparison) or not isinstance(test.left, cst.Name) or test.left.value not in fn.params:
            return False
        optional = dotted(fn.defaults.get(test.left.value)) == "None"  # (`x is not None` of a required `x`: every caller passes one)
        return all(
            isinstance(c.comparator, cst.SimpleString)
            or optional and isinstance(c.operator, passed) and isinstance(c.comparator, cst.Name) and c.comparator.value == "None"
            for c in test.comparisons
        )

    return any(chooses(n.test, cst.IsNot) for n in site.gate_nodes if n is not None) or any(chooses(n.test, cst.Is) for n in site.else_of)


def parameter_key(fn: "Function", read: "cst.BaseExpression") -> str:
    """The `read_parameters` key of the parameter a read value comes from ("0 targets": its position
    among the explicit parameters, and its name), "*" where it is not one (`**kwargs`'s values)."""
    import libcst as cst

    name = root_name(read)
    explicit = [p.name.value for p in (*fn.node.params.posonly_params, *fn.node.params.params)]
    explicit = explicit[1:] if fn.class_name is not None and explicit[:1] in (["self"], ["cls"]) else explicit
    keyword_only = [p.name.value for p in fn.node.params.kwonly_params if isinstance(p, cst.Param)]
    if name in explicit:
        return f"{explicit.index(name)} {name}"
    return f"- {name}" if name in keyword_only else "*"


def read_arguments(call: "cst.Call", summary: FunctionSummary) -> list["cst.BaseExpression"]:
    """The arguments of a call that the function it runs reads on the host (`read_parameters`): all of
    them where the summary cannot say which (an outline, `**kwargs`, an argument given by `*args`)."""
    keys = summary.read_parameters
    if not keys or "*" in keys:
        return [a.value for a in call.args]
    found = [argument_for(call, key) for key in keys]
    return [a.value for a in call.args] if any(f is None for f in found) else [f for f in found if f is not None]


def loop_names_over(fn: "Function", site: "Site", params: set[str], m: "TrainingModel") -> set[str]:
    """Names bound by the loops around `site` that iterate over a parameter (`for k, v in kwargs.items()`)."""
    import libcst as cst

    from trainlint.model.names import target_names

    out: set[str] = set()
    for loop in site.loops:
        node = loop.node
        if isinstance(node, cst.For) and m.roots_of(node.iter, fn) & params:
            out |= target_names(node.target)
    return out


class _Methods(Mapping[str, FunctionSummary]):
    """A class's method summaries, each summarised when first read (a call reads one method of many)."""

    def __init__(self, summarizer: Summarizer, info: "ClassInfo") -> None:
        self._summarizer, self._info = summarizer, info

    def __getitem__(self, name: str) -> FunctionSummary:
        return self._summarizer.function(self._info.methods[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._info.methods)

    def __len__(self) -> int:
        return len(self._info.methods)


def class_kind(info: "ClassInfo", methods: Mapping[str, FunctionSummary], module: bool = False) -> Kind:
    """What an instance of a class is, from its bases and what its methods do (`module`: an
    `nn.Module` through its bases, as the module's analysis resolves them)."""
    bases = " ".join(info.bases)
    if "Optimizer" in bases:
        return Kind.OPTIMIZER
    if any(is_scheduler_factory(b) or b.rpartition(".")[2] == "_LRScheduler" for b in info.bases):
        return Kind.SCHEDULER  # (`class WarmupCosineSchedule(LambdaLR)`: a scheduler, stepped as torch's are)
    if module or any(b.endswith(("Module", "Model", "PreTrainedModel", "LightningModule")) for b in info.bases) or "torch.nn" in bases:
        return Kind.MODULE
    call = methods.get("__call__")
    if call is not None and call.scales and (call.steps or call.backprops):
        return Kind.SCALER
    if any(s.scales for s in methods.values()) and "GradScaler" in bases:
        return Kind.SCALER
    return Kind.OBJECT
