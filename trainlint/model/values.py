"""What a value is: an abstract kind for expressions, propagated through assignments, attributes,
returns, unpacking, containers and calls (within a module, and across modules through summaries).

A rule asks what a value is ("a tensor on the accelerator that carries a graph?"), not what it is
called. Unknown stays unknown: rules fire on what the analysis knows, and fall back on names only
where their page says why a guess is safe.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.lattice import ACCEL, ANNOTATED, BOOL, CYCLE, HOST, HOST_DATA, NAMESPACE, NONE, NUMBER, PARSED_OPTIONS, STRING, TENSOR
from trainlint.model.lattice import UNKNOWN, UNKNOWN_DEVICE, Kind, Value, join
from trainlint.model.arguments import argument_for, refinable, refines
from trainlint.model.class_attributes import registered_buffers, torch_layer_parameter
from trainlint.model.function_values import held_calls_of, library_function
from trainlint.model.configurable import configured_value
from trainlint.model.containers import DICT, Drawn, comprehension_bindings, comprehension_value, dict_value, element_of, is_empty_dict, is_empty_list, tested_as_sequence, unpacked_element
from trainlint.model.subscripts import keyed_moves, moved_dict, subscript_value
from trainlint.model.names import dotted, target_names
from trainlint.model.candidates import prepared_argument
from trainlint.model.arithmetic import arithmetic, built_on_host
from trainlint.model.cycles import CycleMemo
from trainlint.model.moving_helpers import placed_before_move
from trainlint.model.saved_arguments import saving_constructor
from trainlint.model.torchnames import decorated_no_grad, returns_indices
from trainlint.model.value_calls import CONFIG_NAMES, HOST_ATTRIBUTES, TENSOR_VALUED_ATTRIBUTES, CallValues
from trainlint.model.device_arguments import moved_later_in_loop, on_device_operands

if TYPE_CHECKING:
    from trainlint.model.facts import Assign, Function, Site
    from trainlint.model.training import TrainingModel


# how many asks of one parameter may be under way at once (the second joins the call sites not under way; a third gets nothing)
PARAMETER_ASKS = 2


class ValueModel(CallValues, CycleMemo):
    """Evaluates expressions of one module to Values, memoised per node and use site."""

    def __init__(self, model: "TrainingModel") -> None:
        CycleMemo.__init__(self)
        self.model = model
        self._memo: dict[tuple[int, int], Value] = {}
        self._attr_memo: dict[tuple[str | None, str], Value] = {}
        self._returns_memo: dict[int, Value] = {}
        self._joins_memo: dict[tuple[object, ...], Value] = {}
        self._augmented_memo: dict[tuple[int, str], Value] = {}
        self._parameters_memo: dict[tuple[tuple[str, int, str], int], Value] = {}
        self._open_asks: dict[tuple[str, int, str], int] = {}  # parameter -> its asks under way

    # -- entry point -----------------------------------------------------------------------------
    def of(self, expr: cst.BaseExpression, function: "Function | None", at: "Site | None" = None) -> Value:
        key = (id(expr), at.order if at is not None else -1)
        cached = self._memo.get(key)  # (the hit, the common case, without making the closure)
        return cached if cached is not None else self._memoised(self._memo, key, lambda: self._evaluate(expr, function, at))

    # -- expressions -------------------------------------------------------------------------------
    def _evaluate(self, expr: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> Value:
        kind = expr.__class__  # type tests: isinstance on libcst's ABCs is slow, and this runs per expression
        if kind in (cst.Integer, cst.Float, cst.Imaginary):
            return NUMBER
        if kind in (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
            return STRING
        if kind is cst.Name:
            bound = self._comprehension_bindings.get(id(expr)) if self.model.comprehensions else None
            drawn = comprehension_value(bound, expr.value, lambda e: self.of(e, fn, at)) if bound is not None else None
            if drawn is not None:  # `l` in `[l.item() for l in losses]`: an element of `losses`
                return drawn
            value = self._name(expr.value, fn, at)
            if (moves := self._keyed_moves.get(expr.value)) and value is not CYCLE:  # (`for k in batch: batch[k] = batch[k].cuda()`)
                value = moved_dict(value, moves, at, lambda a: self.of(a.value, fn, a.site), lambda a: self.model.reaching(fn, expr.value, at) == self.model.reaching(fn, expr.value, a.site))
            if value.kind is Kind.UNKNOWN and value is not CYCLE:
                return self.model.used_as(expr.value, fn) or value
            return value
        if kind is cst.Attribute:
            return self._attribute(expr, fn, at)
        if kind is cst.Call:  # (a tensor computed where autograd is off carries no graph)
            return self._call(expr, fn, at).without_graph() if at is not None and at.grad_off else self._call(expr, fn, at)
        if kind is cst.Subscript:
            return subscript_value(expr, self.of(expr.value, fn, at), at)
        if kind is cst.BinaryOperation:
            scaling = type(expr.operator) in (cst.Multiply, cst.Divide)
            return arithmetic([self.of(expr.left, fn, at), self.of(expr.right, fn, at)], scaling)
        if kind is cst.UnaryOperation:
            inner = self.of(expr.expression, fn, at)
            if isinstance(expr.operator, cst.Not):
                return inner if inner.kind is Kind.TENSOR else BOOL
            return inner
        if kind is cst.Comparison:
            if any(isinstance(c.comparator, cst.Name) and c.comparator.value == "None" for c in expr.comparisons):
                return BOOL  # (`t != None`: torch gives up on None and Python compares identities, no read)
            sides = on_device_operands([self.of(expr.left, fn, at), *(self.of(c.comparator, fn, at) for c in expr.comparisons)])
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                # (`0 in mask`: a tensor's `__contains__` reads `(mask == 0).any()` on the host)
                # (a string is never looked for in a tensor: `"logits" in out` tests a dict's keys)
                held = sides[1] if len(sides) == 2 and isinstance(expr.comparisons[0].operator, (cst.In, cst.NotIn)) and sides[0].kind in (Kind.NUMBER, Kind.TENSOR) else None
                return replace(held, graph=False, dtype="bool", origin=None) if held is not None and held.kind is Kind.TENSOR else BOOL
            tensors = [s for s in sides if s.kind is Kind.TENSOR]
            if tensors:
                built = all(built_on_host(t) for t in tensors) and all(s.kind in (Kind.TENSOR, Kind.NUMBER) for s in sides)
                return replace(tensors[0], graph=False, dtype="bool", origin=tensors[0].origin if built else None)
            return BOOL if all(s.kind in (Kind.NUMBER, Kind.STRING, Kind.BOOL, Kind.NONE) for s in sides) else Value(Kind.UNKNOWN, HOST) if all(s.on_host for s in sides) else UNKNOWN
        if kind is cst.BooleanOperation:
            return self.of(expr.left, fn, at) | self.of(expr.right, fn, at)
        if kind is cst.IfExp:
            return self.of(expr.body, fn, at) | self.of(expr.orelse, fn, at)
        if kind in (cst.List, cst.Tuple, cst.Set):
            elements = [self.of(e.value, fn, at) for e in expr.elements if isinstance(e, cst.Element)]
            exact = kind is cst.Tuple and not any(isinstance(e, cst.StarredElement) for e in expr.elements)  # (by place)
            return Value(Kind.COLLECTION, HOST, element=join(elements) if elements else None, items=tuple(elements) if exact else None)
        if kind is cst.Dict:
            return dict_value(expr, lambda e: self.of(e, fn, at))
        if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp):
            return Value(Kind.COLLECTION, HOST, element=self.of(expr.elt, fn, at))
        if kind is cst.DictComp:
            return Value(Kind.COLLECTION, HOST, element=self.of(expr.value, fn, at))
        if kind is cst.Lambda:
            return Value(Kind.OBJECT)
        if kind is cst.Await:
            return self.of(expr.expression, fn, at)
        return UNKNOWN

    # -- names ---------------------------------------------------------------------------------
    @cached_property
    def _comprehension_bindings(self) -> dict[int, Drawn]:
        return comprehension_bindings(self.model.comprehensions)

    @cached_property
    def _keyed_moves(self) -> "dict[str, list[Assign]]":
        return keyed_moves(self.model.assigns)

    def _name(self, name: str, fn: "Function | None", at: "Site | None") -> Value:
        m = self.model
        if name in ("True", "False"):
            return BOOL
        if name == "None":
            return NONE
        assigns = m.reaching(fn, name, at)
        if assigns:
            value = self._bindings(name, assigns)
            if m.parameter_reaches(fn, name, at) and value.on_host:  # (a host copy on one path only)
                value = value | self._parameter(fn, name)  # type: ignore[arg-type]
            if at is not None and m.loop_binding_reaches(name, at, assigns):  # (`if gpu: x = x.cuda()` in `for x in xs:`)
                value = join([value, self._loop_variable(fn, name, at) or CYCLE])
            return placed_before_move(m, value, name, at, assigns)
        if fn is not None and name in fn.params:
            return placed_before_move(m, self._parameter(fn, name), name, at, [])
        loop_value = self._loop_variable(fn, name, at)  # (a script's loops too)
        if loop_value is not None:
            return placed_before_move(m, loop_value, name, at, [])
        if fn is not None:
            enclosing = fn.parent
            while enclosing is not None:  # a closure reads its enclosing function's names
                outer = m.reaching(enclosing, name, None)
                if outer:
                    return self._bindings(name, outer)
                if name in enclosing.params:
                    return self._parameter(enclosing, name)
                enclosing = enclosing.parent
            module_level = m.reaching(None, name, None) + m.global_rebindings(name)
            if module_level:
                return self._bindings(name, module_level)
        defined = m.visible_function(name, fn)
        if defined is not None:
            return m.function_value(defined)  # `fn = train_step`: the function itself
        qual = m.imports.resolve(cst.Name(name))
        if qual is not None:
            return self._imported(qual)
        return UNKNOWN

    def _bindings(self, name: str, assigns: list) -> Value:  # type: ignore[type-arg]
        """The join of what `name` receives from `assigns`. The uses between two bindings, and every
        use in a nested function, see the same ones: joined once, unless one was still being
        evaluated (a later use may see it complete)."""
        key = (name, *map(id, assigns))
        cached = self._joins_memo.get(key)
        if cached is not None:
            return cached
        saved = self._begin()
        values = [self._assigned(a, name) for a in assigns]
        value = join(values)
        low = self._end(saved)
        if not any(v is CYCLE for v in values):
            self._remember(self._joins_memo, key, value, low)
        return value

    def _augmented(self, assign, name: str, value: Value) -> Value:  # type: ignore[no-untyped-def]
        """What `name` holds after `name op= value`: its value before, combined with `value`."""
        before = self._name(name, assign.site.function, assign.site) if "." not in name else self._set_before(assign, name)
        combined = arithmetic([before, value])
        if before.kind is Kind.TENSOR and before.device == HOST:
            # `count += (labels != pad).sum()` updates the host tensor in place: torch writes
            # no device result into it, so it stays where it is
            return replace(combined, device=HOST)
        return combined

    def _assigned(self, assign, name: str) -> Value:  # type: ignore[no-untyped-def]
        """The value `name` receives from an assignment (unpacking a tuple takes the element)."""
        value = self.of(assign.value, assign.site.function, assign.site)
        if assign.op is not None:
            # `total += loss`, `x /= n`: the old value combined with the right-hand side
            # memoised like an expression: `reports += ...` twenty times after a loop would otherwise
            # evaluate each earlier one again for every later one (asked again while under way, on the
            # previous pass of a loop: no information, what the other definitions say)
            return self._memoised(self._augmented_memo, (id(assign.node), name), lambda: self._augmented(assign, name, value))
        if is_empty_list(assign, name) or is_empty_dict(assign, name):  # `xs = []` (or `xs, ys = [], []`), `losses = {}`
            return self._filled(assign, name, value if is_empty_dict(assign, name) else Value(Kind.COLLECTION, HOST))
        container = self.model.imports.resolve(assign.value.func) if isinstance(assign.value, cst.Call) and not assign.value.args else None
        if container in ("torch.nn.ModuleList", "torch.nn.Sequential") and len(assign.targets) == 1:
            return self._filled(assign, name, Value(Kind.MODULE, origin=container))  # `self.layers.append(Block())`
        if len(assign.targets) > 1 or assign.unpacked:
            prepared = self._prepared(assign, name)
            if prepared is not None:
                return prepared
            parts = assign.value.elements if isinstance(assign.value, (cst.Tuple, cst.List)) else ()
            if len(parts) == len(assign.targets) and not any(isinstance(e, cst.StarredElement) for e in parts):
                # `self.model, self.opt = model, opt`: each target takes the element in its place
                return self.of(parts[assign.targets.index(name)].value, assign.site.function, assign.site)
            if value.items is not None and value.keys is None and len(value.items) == len(assign.targets):
                return value.items[assign.targets.index(name)]  # `event, sync = self._accelerator()` (a dict gives its keys)
            if value.kind is Kind.COLLECTION and value.element is not None:
                return value.element
            if value.kind is Kind.TENSOR and tested_as_sequence(assign.site.gate_nodes, assign.value):
                return UNKNOWN  # `if isinstance(loss, tuple): loss, extra = loss`: not the tensor it is elsewhere
            if value.kind is Kind.TENSOR:
                if len(assign.targets) == 2 and assign.targets[1] == name and returns_indices(assign.value, self.model.imports):
                    return replace(value, graph=False)  # `_, idx = x.max(1)`: integer indices carry no graph
                return value  # `loss, logits = model(x)`: outputs of a forward pass
            return UNKNOWN
        return value

    def _set_before(self, assign, name: str) -> Value:  # type: ignore[no-untyped-def]
        """What `self.tokens` holds before `self.tokens += n`: what the class's plain assignments set
        (`self.tokens = 0` in `__init__`), so that a count stays a number and a host tensor stays one."""
        fn = assign.site.function
        if not name.startswith("self.") or name.count(".") != 1 or fn is None or fn.class_name is None:
            return UNKNOWN
        plain = [a for a in self.model.attribute_assigns(fn.class_name, name) if a.op is None]
        return join(self._assigned(a, name) for a in plain) if plain else UNKNOWN

    def _filled(self, assign, name: str, empty: Value) -> Value:  # type: ignore[no-untyped-def]
        """`xs = []` then `xs.append(x)` / `xs.extend(ys)` in the same function: a list of what is put in;
        `d = {}` then `d.update(other)` / `d[key] = v`: a dict of what is put in (its keys unknown)."""
        key = ("filled", id(assign.node))
        if key in self._in_progress:
            self._cycle(key)
            return empty
        saved = self._enter(key)
        fn, is_dict = assign.site.function, is_empty_dict(assign, name)
        methods = ("update",) if is_dict else ("append", "extend")
        try:
            put: list[Value] = []
            for call in (c for method in methods for c in self.model.calls_by_method.get(method, ())):
                if call.receiver_text != name or call.site.function is not fn:
                    continue
                if len(call.node.args) != 1 or call.node.args[0].keyword is not None or call.node.args[0].star:
                    return empty
                added = self.of(call.node.args[0].value, call.site.function, call.site)
                if call.method in ("extend", "update"):
                    added = added.element if added.kind is Kind.COLLECTION and added.element is not None else UNKNOWN
                put.append(added)
            for item in self.model.assigns if is_dict else ():
                if item.targets == (f"{name}[]",) and item.site.function is fn:
                    put.append(self.of(item.value, fn, item.site))
        finally:
            self._leave(key, saved)
        return Value(Kind.COLLECTION, HOST, origin=DICT, element=join(put)) if put and is_dict else replace(empty, element=join(put)) if put else empty

    def _prepared(self, assign, name: str) -> Value | None:  # type: ignore[no-untyped-def]
        """`model, opt = accelerator.prepare(model, opt)`: Accelerate's `prepare` returns what it is
        given (wrapped for the device), in order; each target takes its argument's value."""
        call = assign.value
        if isinstance(call, cst.Call) and assign.targets and name == assign.targets[0] and self.model.imports.resolve(call.func) == "deepspeed.initialize":
            # `engine, optimizer, _, _ = deepspeed.initialize(model=net, ...)`: calling the engine runs net's forward
            given = argument_for(call, "1 model")
            net = self.of(given, assign.site.function, assign.site) if given is not None else UNKNOWN
            return net if net.kind is Kind.MODULE else None
        given = prepared_argument(self.model, assign, name)
        return self.of(given, assign.site.function, assign.site) if given is not None else None

    def _parameter(self, fn: "Function", name: str) -> Value:
        """A parameter: its annotation, else what this module's calls of the function pass, else its default.
        Asked again while its callers' arguments are evaluated, it is worked out once more (what the
        call sites not under way pass), but not a third time: a recursive `dfg(node, states)` would join
        every call site again at every level of the recursion (exponential in the number of sites)."""
        key = ("parameter", id(fn.node), name)
        final = self._parameters_memo.get((key, 0))
        if final is not None:
            return final
        level = self._open_asks.get(key, 0)
        if level >= PARAMETER_ASKS:
            return self._cycle((key, level - 1))
        self._open_asks[key] = level + 1
        try:  # (each level its own question: the outermost ask's answer is the one kept for good)
            # (an answer that leaned on a question still open is not kept: a parameter is asked from
            # everywhere, and later asks may see more once that question is answered)
            return self._memoised(self._parameters_memo, (key, level), lambda: self._parameter_value(fn, name), settled_only=True)
        finally:
            self._open_asks[key] = level

    def _parameter_value(self, fn: "Function", name: str) -> Value:
        library = self.model.library_argument(fn, name)
        if library is not None and library.kind is not Kind.UNKNOWN:
            return library  # what the library's API passes, whatever the annotation says (coqui's `criterion: nn.Module` is a list)
        annotation = fn.annotations.get(name)
        declared = self._annotation(annotation) if annotation else None
        if declared is not None and not refinable(declared):
            return declared
        # a declared `nn.Module` (`list[Tensor]`) says what kind, not which class (where): what is passed may say
        for passed in (
            configured_value(self.of, self.model.local_class, fn, name),
            self._arguments(fn, name),
            self.model.passed_from_other_modules(fn, name),
        ):
            if passed is not None and (declared is None or refines(passed, declared)):
                return passed
        if declared is not None:
            return declared
        passed = set(self.model.passed_facts(fn, name) or ("?",)) if not self.model.calls_of(fn) else set()
        if passed and passed <= {"tensor", "host", "device"}:  # every call (all in other modules) passes a tensor
            return Value(Kind.TENSOR, HOST, False) if passed == {"host"} else Value(Kind.TENSOR, ACCEL) if passed == {"device"} else TENSOR
        default = fn.defaults.get(name)
        if default is not None and not (isinstance(default, cst.Name) and default.value == "None"):
            value = self.of(default, None, None)
            if value.kind in (Kind.NUMBER, Kind.STRING, Kind.BOOL):
                return value
        return UNKNOWN

    def _arguments(self, fn: "Function", name: str) -> Value | None:
        """The join of the arguments this module's calls pass for parameter `name` (None if no call);
        for `*args`, a tuple whose element is the join of the positional arguments from its place on."""
        star, star_kwarg = fn.node.params.star_arg, fn.node.params.star_kwarg
        if isinstance(star_kwarg, cst.Param) and star_kwarg.name.value == name:
            return None
        starred = isinstance(star, cst.Param) and star.name.value == name
        index = fn.params.index(name) - (1 if fn.class_name is not None and fn.params and fn.params[0] in ("self", "cls") else 0)
        values: list[Value] = []
        for call in [*self.model.calls_of(fn), *self.model.method_calls_of(fn), *held_calls_of(self.model, fn)]:
            if any(a.star for a in call.node.args):
                return None
            positional = [a for a in call.node.args if a.keyword is None]
            if starred:
                passed = positional[index:]
            else:  # by position, or by name (which wins)
                named = [a for a in call.node.args if a.keyword is not None and a.keyword.value == name]
                passed = (positional[index : index + 1] + named)[-1:]
            values.extend(self.of(a.value, call.site.function, call.site) for a in passed)
        if starred:
            return Value(Kind.COLLECTION, HOST, element=join(values)) if values else None
        return join(values) if values else None

    def _annotation(self, text: str) -> Value | None:
        last = text.rsplit(".", 1)[-1]
        if last in ANNOTATED:
            return ANNOTATED[last]
        project = self.model.project_value(text)  # `model: E2TTS`, `exp: Exp`: a class of the project
        if project is not None and project.kind in (Kind.MODULE, Kind.OBJECT) and project.origin == text:
            return project
        local = self.model.local_class(last) if "." not in text else None
        if local is not None:
            return self.model.instance_of_local_class(last)
        return None

    def _loop_variable(self, fn: "Function | None", name: str, at: "Site | None") -> Value | None:
        """`for x in xs:` binds x to an element of xs."""
        if at is None:
            return None
        for loop in reversed(at.loops):
            node = loop.node
            if isinstance(node, cst.For) and name in target_names(node.target):
                iterated = self.of(node.iter, fn, at)
                if iterated.kind is Kind.COLLECTION and iterated.origin == "dict":  # (a dict gives its keys: `for key in batch:`)
                    return STRING if iterated.keys else Value(Kind.UNKNOWN, HOST)
                drawn = unpacked_element(element_of(iterated), node.target, name)
                if drawn.kind is Kind.UNKNOWN and drawn.device == UNKNOWN_DEVICE and moved_later_in_loop(self.model, name, loop, at):
                    return Value(Kind.UNKNOWN, HOST)  # (the loader's batch, before the loop moves it)
                # data drawn from before the loop (`for x, y in batches:`): where it lives, not a factory's
                return replace(drawn, origin=None) if drawn.kind is Kind.TENSOR else drawn
        return None

    def _imported(self, qual: str) -> Value:
        if qual in ("torch.float16", "torch.half", "torch.bfloat16", "torch.float32", "torch.float"):
            return Value(Kind.OBJECT, HOST, origin=qual)
        if qual.startswith(("numpy", "math")):
            return HOST_DATA
        if self.model.is_project_function(qual):
            return Value(Kind.FUNCTION, origin=qual)  # a project function named, not called
        return library_function(qual) or UNKNOWN

    # -- attributes ----------------------------------------------------------------------------
    def _attribute(self, expr: cst.Attribute, fn: "Function | None", at: "Site | None") -> Value:
        attr = expr.attr.value
        base = self.of(expr.value, fn, at)
        if base.origin == PARSED_OPTIONS or isinstance(expr.value, cst.Name) and expr.value.value in CONFIG_NAMES and not self.model.reaching(fn, expr.value.value, at):
            return NUMBER  # `args.w_max`: a setting from the command line or a config file, host data
        if attr == "module" and base.kind is Kind.MODULE and base.origin:
            return base  # `model.module` under DDP: the wrapped module, which the wrapper stands for
        if attr in ("grad", "data"):
            return Value(Kind.TENSOR, base.device if base.kind is Kind.TENSOR else UNKNOWN_DEVICE, False, base.dtype)
        if attr in HOST_ATTRIBUTES:
            return BOOL if attr == "requires_grad" else Value(Kind.COLLECTION, HOST, element=NUMBER) if attr == "shape" else Value(Kind.OBJECT, HOST)
        if base.kind is Kind.TENSOR and attr in TENSOR_VALUED_ATTRIBUTES:
            return base
        if base.kind is Kind.TENSOR and attr in ("values", "indices"):  # `x.max(dim=1).indices`: a tensor there
            return replace(base, graph=None)
        text = dotted(expr)
        if text is not None and text.startswith("self.") and text.count(".") == 1:
            return self.self_attribute(fn, text)
        qual = self.model.imports.resolve(expr)
        if qual is not None:
            return self._imported(qual)
        if base.kind in (Kind.MODULE, Kind.OBJECT) and base.origin and "|" not in base.origin:
            return self._instance_holds(base.origin, attr)  # `model.lstm`: what an object of a known class holds
        if base.origin == NAMESPACE and (held := base.keyed(attr)) is not None:
            return held  # `model.text_encoder` of `Munch(text_encoder=TextEncoder(), ...)`
        return UNKNOWN

    def _instance_holds(self, origin: str, attr: str) -> Value:
        """What `self.<attr>` holds in an object of class `origin` (of this module, or of another by its
        summary), when it holds an instance of a class."""
        if self.model.local_class(origin) is not None:
            value = self.instance_attribute(origin, attr)
            return value if value.kind in (Kind.MODULE, Kind.OBJECT, Kind.SCALER) and value.origin else UNKNOWN
        return self.model.held_attribute(origin, attr) or UNKNOWN

    def instance_attribute(self, class_name: str, attr: str) -> Value:
        """`self.<attr>` of this module's class `class_name`: the join of what its methods assign."""
        info = self.model.local_class(class_name)
        method = next(iter(info.methods.values()), None) if info is not None else None
        return self.self_attribute(method, f"self.{attr}") if method is not None else UNKNOWN

    def self_attribute(self, fn: "Function | None", text: str) -> Value:
        """`self.x`: the join of what every method of the class assigns to it."""
        cls = fn.class_name if fn is not None else None
        key = (cls, text)
        if key in self._attr_memo:
            return self._attr_memo[key]
        if key in self._in_progress:
            return self._cycle(key)
        saved = self._enter(key)
        try:
            values = [self._assigned(a, text) for a in self.model.attribute_assigns(cls, text)]
            # a buffer moves with its module (`model.to(device)`): on the host only if the module stays
            values.extend(self._buffer(self.of(tensor, site.function, site)) for tensor, site in registered_buffers(self.model, cls, text[5:]))
            init = saving_constructor(self.model, cls, text[5:]) if cls is not None else None
            if init is not None:  # `self.save_hyperparameters()`: the argument of that name
                values.append(self._parameter(init, text[5:]))
            if not values and fn is not None and cls is not None:  # set by a project base class, or a method named
                method = self.model.own_method(fn, text[5:])
                method = method if method is None or all(dotted(d.decorator) in ("staticmethod", "classmethod") for d in method.node.decorators) else None  # (a property's value is no function)
                values = [self.model.function_value(method)] if method is not None else self._inherited_attribute(fn, text[5:])
            value = join(values) if values else UNKNOWN  # then what its methods do with it (`self.net.parameters()`: a module)
            value = (self.model.attribute_used_as(cls, text) or value) if value.kind is Kind.UNKNOWN and value is not CYCLE else value
        finally:
            low = self._leave(key, saved)
        if value is not CYCLE:
            self._remember(self._attr_memo, key, value, low)
        return value

    @staticmethod
    def _buffer(value: Value) -> Value:
        return replace(value, device=UNKNOWN_DEVICE, graph=False) if value.kind is Kind.TENSOR else Value(Kind.TENSOR, UNKNOWN_DEVICE, False)

    def _inherited_attribute(self, fn: "Function", name: str) -> list[Value]:
        """What a project class of another module, among the bases of `fn`'s class (or the class a
        function was set on, `@add_to_class(d2l.EncoderDecoder)`), holds in attribute `name`; the
        Parameter a `torch.nn` layer among the bases creates (`self.weight` of an `nn.Linear`)."""
        if torch_layer_parameter(self.model, fn.class_name or "", name):
            return [Value(Kind.MODULE, origin="torch.nn.Parameter")]  # `self.weight` in a subclass of `nn.Linear`
        info = self.model.local_class(fn.class_name or "")
        bases = info.bases if info is not None else fn.class_bases
        held = [self.model.held_attribute(b, name) for b in bases]
        return [v for v in held if v is not None]

    # -- functions -----------------------------------------------------------------------------
    def returns(self, function: "Function") -> Value:
        """What a call of a function of this module returns (the join of its `return`s)."""
        key = id(function)
        if key in self._returns_memo:
            return self._returns_memo[key]
        if ("returns", key) in self._in_progress:
            return self._cycle(("returns", key))
        saved = self._enter(("returns", key))
        try:
            values = [self.of(r.value, function, r.site) for r in function.return_facts]
            value = join(values) if values else NONE
            if value.kind is Kind.TENSOR and decorated_no_grad(function.decorators):
                value = replace(value, graph=False)
        finally:
            low = self._leave(("returns", key), saved)
        if value is not CYCLE:
            self._remember(self._returns_memo, key, value, low)
        return value
