"""One visitor pass over a module that collects the facts in `facts.py` with their context."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from trainlint.model.facts import Assign, Call, ClassInfo, Condition, FormattedValue, Function, Loop, Return, Site, WithItem
from trainlint.model.gates import (
    after_training_test, child_nodes, constant_test, exit_gates, has_modulo, is_gate_test, is_inference_only_test, is_lazy_init_test, is_sentinel_test, is_latch_test,
)
from trainlint.model.names import ImportMap, dotted
from trainlint.model.hooks import pass_indexes
from trainlint.model.modules_by_name import ImportsByName
from trainlint.model.first_rounds import is_first_rounds_test
from trainlint.model.torchnames import AUTOCAST, NO_GRAD, autocast_dtype, decorated_no_grad, is_false


def _target_texts(target: cst.BaseExpression) -> list[str]:
    kind = target.__class__  # type tests: isinstance on libcst's ABCs is slow, and this runs per assignment
    if kind is cst.Tuple or kind is cst.List:
        out: list[str] = []
        for el in target.elements:  # type: ignore[attr-defined]
            out.extend(_target_texts(el.value))
        return out
    if kind is cst.StarredElement:
        return _target_texts(target.value)  # type: ignore[attr-defined]
    text = dotted(target)
    if text is not None:
        return [text]
    if kind is cst.Subscript:
        base = dotted(target.value)
        return [base + "[]"] if base else []
    return []


def is_early_exit(node: cst.If) -> bool:
    """`if not should_log: return` / `if step % n: continue` gates what follows in the block."""
    return isinstance(_last_statement(node), (cst.Return, cst.Continue))


EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})
# a test for a non-finite loss, or for a batch that ran out of memory (`if found_cuda_oom: ...; continue`)
NON_FINITE_WORDS = frozenset({"nan", "inf", "finite", "isnan", "isinf", "isfinite", "overflow", "found_inf", "oom"})


def _last_statement(node: cst.If) -> cst.BaseSmallStatement | cst.BaseStatement | None:
    body = node.body
    if isinstance(body, cst.IndentedBlock):
        if not body.body:
            return None
        last = body.body[-1]
        if isinstance(last, cst.SimpleStatementLine):
            return last.body[-1] if last.body else None
        return last
    return body.body[-1] if body.body else None


def is_error_branch(node: cst.If) -> bool:
    """A branch that ends the run or skips a broken batch: `if not isfinite(loss): print(...); sys.exit(1)`,
    `if found_oom: shrink_microbatch(); continue`. What it does runs only when something went wrong, like an `except` handler."""
    last = _last_statement(node)
    kind = last.__class__
    if kind is cst.Raise:
        return True
    if kind is cst.Expr and last.value.__class__ is cst.Call:  # type: ignore[union-attr]
        name = dotted(last.value.func)  # type: ignore[union-attr]
        if name in EXIT_CALLS:
            return True
    if kind is cst.Continue or kind is cst.Return:
        return bool(NON_FINITE_WORDS & set(_words(node.test)))
    return False


def _words(expr: cst.CSTNode) -> list[str]:
    from trainlint.model.names import tokens

    out: list[str] = []
    stack: list[cst.CSTNode] = [expr]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name):
            out.extend(tokens(n.value))
            out.append(n.value.lower())
        else:
            stack.extend(child_nodes(n))
    return out


class Extractor(cst.CSTVisitor):
    """Collects calls, assignments, loops and functions with their enclosing context."""

    def __init__(self, imports: ImportMap, extra_gates: frozenset[str] = frozenset(), turns_grad_off: Callable[[str], bool] | None = None) -> None:
        self.imports, self.extra_gates = imports, extra_gates
        self.turns_grad_off = turns_grad_off  # (a project's decorator running what it decorates without grad)
        self.functions: list[Function] = []
        self.loops: list[Loop] = []
        self.calls: list[Call] = []
        self.assigns: list[Assign] = []
        self.conditions: list[Condition] = []
        self.formatted: list[FormattedValue] = []
        self.comprehensions: list[cst.BaseComp] = []  # list, set, dict comprehensions and generators
        self.reads_grads = False  # whether any code reads a `.grad`
        self.context_aliases: dict[str, WithItem] = {}
        self.gate_names: set[str] = set()
        self.cached_globals: set[str] = set()  # names a function declares `global`: module-level caches
        self.classes: list[ClassInfo] = []
        # context stacks; a function starts a fresh frame of loops, gates and handlers
        self._classes: list[tuple[str, tuple[str, ...]]] = []
        self._function: Function | None = None
        self._loop_stack: tuple[Loop, ...] = ()  # a tuple: every site holds it as it is
        self._gates: list[int] = []
        self._gate_nodes: list[cst.If | None] = []
        self._else_of: list[cst.If] = []
        self._excepts = 0
        self._withs: list[WithItem] = []
        self._frames: list[tuple[Function | None, list[Loop], list[int], int, list[WithItem], list[cst.If | None], list[cst.If]]] = []
        self._block_gates: list[int] = []
        self._block_else: list[int] = []  # per block: the `if`s above whose early exit the rest is the else of
        self._block_dead: list[bool] = []  # per block: past a `return`, `raise`, `continue` or `break` of its own
        self._class_infos: list[ClassInfo | None] = []
        self._order = 0
        self._statement: cst.SimpleStatementLine | None = None
        self._by_name = ImportsByName()

    # -- context -------------------------------------------------------------------------------
    def site(self) -> Site:
        self._order += 1
        return Site(
            function=self._function,
            loops=self._loop_stack,
            gate_depths=tuple(self._gates),
            gate_nodes=tuple(self._gate_nodes),
            else_of=tuple(self._else_of),
            in_except=self._excepts > 0,
            withs=tuple(self._withs),
            order=self._order,
            statement=self._statement,
        )

    def _is_gate(self, test: cst.BaseExpression) -> bool:
        fn = self._function
        within = pass_indexes(fn.name, fn.params) if fn is not None and fn.class_name is not None else frozenset()
        return is_gate_test(test, self.gate_names, self.extra_gates, within)

    def _negated_gate(self, test: cst.BaseExpression) -> bool:
        """`if not do_log: return`: an exit on the steps a flag leaves out, which leaves the rest to its steps."""
        return isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and self._is_gate(test.expression)

    # -- imports and module aliases ------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        self.imports.add_import(node, self._function)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.add_import_from(node, self._function)

    def leave_Module(self, original_node: cst.Module) -> None:
        self._by_name.bind(self.imports, self.calls)

    # -- definitions ---------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        bases = []
        for arg in node.bases:
            text = self.imports.resolve(arg.value) or dotted(arg.value)
            if text:
                bases.append(text)
        self._classes.append((node.name.value, tuple(bases)))
        if self._function is None:
            self.classes.append(ClassInfo(node, node.name.value, tuple(bases)))
        self._class_infos.append(self.classes[-1] if self._function is None else None)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()
        self._class_infos.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        cls = self._classes[-1] if self._classes and self._function is None else None
        decorators = []
        for dec in node.decorators:
            expr = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
            decorators.append(self.imports.resolve(expr) or dotted(expr) or "")
        stars = [p for p in (node.params.star_arg, node.params.star_kwarg) if isinstance(p, cst.Param)]
        all_params = [*node.params.posonly_params, *node.params.params, *node.params.kwonly_params, *stars]
        params = tuple(p.name.value for p in all_params)
        annotations = {}
        defaults = {}
        for p in all_params:
            if p.annotation is not None:
                text = self.imports.resolve(p.annotation.annotation) or dotted(p.annotation.annotation)
                if text:
                    annotations[p.name.value] = text
            if p.default is not None:
                defaults[p.name.value] = p.default
        fn = Function(
            node=node, name=node.name.value, class_name=cls[0] if cls else None, class_bases=cls[1] if cls else (),
            decorators=tuple(decorators), params=params, annotations=annotations, defaults=defaults, parent=self._function,
        )
        self.functions.append(fn)
        info = self._class_infos[-1] if self._class_infos and cls else None
        if info is not None:
            # a later `def` of the name replaces the earlier one, as Python binds it (not a property's
            # setter, which extends the getter)
            if any(d.endswith((".setter", ".deleter")) for d in decorators):
                info.methods.setdefault(fn.name, fn)
            else:
                info.methods[fn.name] = fn
        self._frames.append((self._function, self._loop_stack, self._gates, self._excepts, self._withs, self._gate_nodes, self._else_of))
        self._function, self._loop_stack, self._gates, self._excepts, self._withs, self._gate_nodes, self._else_of = fn, (), [], 0, [], [], []
        if decorated_no_grad(decorators, self.turns_grad_off):
            self._withs.append(WithItem("no_grad", None))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._function, self._loop_stack, self._gates, self._excepts, self._withs, self._gate_nodes, self._else_of = self._frames.pop()

    # -- loops ---------------------------------------------------------------------------------
    def _enter_loop(self, node: cst.For | cst.While) -> None:
        loop = Loop(node=node, function=self._function, parent=self._loop_stack[-1] if self._loop_stack else None)
        self.loops.append(loop)
        self._loop_stack = (*self._loop_stack, loop)

    def _leave_loop(self) -> None:
        self._loop_stack[-1].end = self._order
        self._loop_stack = self._loop_stack[:-1]

    def visit_For_body(self, node: cst.For) -> None:
        self._enter_loop(node)

    def leave_For_body(self, node: cst.For) -> None:
        self._leave_loop()

    def visit_While_test(self, node: cst.While) -> None:
        self._enter_loop(node)

    def leave_While_body(self, node: cst.While) -> None:
        self._leave_loop()

    def visit_While(self, node: cst.While) -> None:
        self.conditions.append(Condition(node.test, "while", self.site()))

    # -- gates ---------------------------------------------------------------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._block_gates.append(0)
        self._block_else.append(0)
        self._block_dead.append(False)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        count, after = self._block_gates.pop(), self._block_else.pop()
        self._excepts -= self._block_dead.pop()
        if after:
            del self._else_of[-after:]
        if count:
            del self._gates[-count:]
            del self._gate_nodes[-count:]

    def visit_Global(self, node: cst.Global) -> None:
        for holder in (self.cached_globals, self._function.declared_global if self._function is not None else set()):
            holder.update(item.name.value for item in node.names)  # (the module's, and the function's own)

    def visit_If(self, node: cst.If) -> None:
        self.conditions.append(Condition(node.test, "if", self.site()))

    def visit_If_body(self, node: cst.If) -> None:
        gate = (self._is_gate(node.test) or constant_test(node.test) is False or is_lazy_init_test(node.test, self.cached_globals) or is_inference_only_test(node.test)
                or is_first_rounds_test(node, self._loop_stack[-1].node if self._loop_stack else None) or is_sentinel_test(node) or is_latch_test(node) or after_training_test(self._else_of, node))
        self._gates.append(len(self._loop_stack) if gate else -1)
        self._gate_nodes.append(node)
        if is_error_branch(node):
            self._excepts += 1

    def leave_If_body(self, node: cst.If) -> None:
        self._gates.pop()
        self._gate_nodes.pop()
        if is_error_branch(node):
            self._excepts -= 1

    def visit_If_orelse(self, node: cst.If) -> None:
        self._else_of.append(node)
        if constant_test(node.test) is True:  # (`if True: ... elif ...: ... else: ...`: neither ever runs)
            self._gates.append(len(self._loop_stack))
            self._gate_nodes.append(None)

    def leave_If_orelse(self, node: cst.If) -> None:
        self._else_of.pop()
        if constant_test(node.test) is True:
            self._gates.pop()
            self._gate_nodes.pop()

    # an `else:` block is conditional too (it runs only when the test fails): a gate on `if self.training:`
    def visit_Else(self, node: cst.Else) -> None:
        self._gates.append(len(self._loop_stack) if after_training_test(self._else_of, node) else -1)
        self._gate_nodes.append(None)

    def leave_Else(self, original_node: cst.Else) -> None:
        self._gates.pop()
        self._gate_nodes.pop()

    def leave_If(self, original_node: cst.If) -> None:
        if self._block_else and original_node.orelse is None and is_early_exit(original_node):
            self._else_of.append(original_node)  # `if not reverse: ...; return`: the rest runs when the test fails
            self._block_else[-1] += 1
        # `if step % 10 != 0: return` (true on most steps) leaves the rest to one step in ten
        if self._block_gates and is_early_exit(original_node) and exit_gates(original_node.test, self._is_gate, self._negated_gate):
            self._gates.append(len(self._loop_stack))
            self._gate_nodes.append(original_node)
            self._block_gates[-1] += 1

    def visit_IfExp(self, node: cst.IfExp) -> None:  # (`w = a if t > 0 else b` tests `t` too)
        self.conditions.append(Condition(node.test, "ifexp", self.site()))

    def visit_Assert(self, node: cst.Assert) -> None:
        self.conditions.append(Condition(node.test, "assert", self.site()))

    # an assert's message and a raised exception are built only on the error path, like a handler
    def visit_Assert_msg(self, node: cst.Assert) -> None:
        self._excepts += 1

    def leave_Assert_msg(self, node: cst.Assert) -> None:
        self._excepts -= 1

    def visit_Raise(self, node: cst.Raise) -> None:
        self._excepts += 1

    def leave_Raise(self, original_node: cst.Raise) -> None:
        self._excepts -= 1

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self._excepts += 1

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self._excepts -= 1

    def visit_ExceptStarHandler(self, node: cst.ExceptStarHandler) -> None:
        self._excepts += 1

    def leave_ExceptStarHandler(self, original_node: cst.ExceptStarHandler) -> None:
        self._excepts -= 1

    # -- with ----------------------------------------------------------------------------------
    def _with_item(self, expr: cst.BaseExpression) -> WithItem:
        if isinstance(expr, cst.Name) and expr.value in self.context_aliases:
            return self.context_aliases[expr.value]
        if not isinstance(expr, cst.Call):
            return WithItem("other", None)
        qual = self.imports.resolve(expr.func)
        method = expr.func.attr.value if isinstance(expr.func, cst.Attribute) else None
        if qual in AUTOCAST or (qual is None and method == "autocast"):
            disabled = any(
                a.keyword is not None and a.keyword.value == "enabled" and is_false(a.value) for a in expr.args
            )
            return WithItem("autocast", expr, autocast_dtype(expr, qual, self.imports), disabled)
        if qual in NO_GRAD or (qual is None and dotted(expr.func) in NO_GRAD and not self.imports.names.get("torch")):
            # (`torch` never imported, as in a notebook that relies on another cell: the text is what it says)
            return WithItem("no_grad", expr)
        if qual == "torch.set_grad_enabled":
            arg = expr.args[0].value if expr.args else None
            if isinstance(arg, cst.Name) and arg.value == "False":
                return WithItem("no_grad", expr)
            return WithItem("other", expr)
        if qual == "torch.enable_grad":
            return WithItem("enable_grad", expr)
        if qual in ("torch.autograd.detect_anomaly", "torch.autograd.set_detect_anomaly"):
            return WithItem("anomaly", expr)
        return WithItem("other", expr)

    def visit_With_body(self, node: cst.With) -> None:
        self._withs = [*self._withs, *(self._with_item(item.item) for item in node.items)]

    def leave_With_body(self, node: cst.With) -> None:
        self._withs = self._withs[: len(self._withs) - len(node.items)]

    # -- statements and expressions ------------------------------------------------------------
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statement = node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self._statement = None
        if self._block_dead and not self._block_dead[-1] and isinstance(original_node.body[-1], (cst.Return, cst.Raise, cst.Continue, cst.Break)):
            self._block_dead[-1] = True  # what follows in its block never runs (`continue` above code kept for later)
            self._excepts += 1

    def visit_Assign(self, node: cst.Assign) -> None:
        targets: list[str] = []
        unpacked = False
        for t in node.targets:
            targets.extend(_target_texts(t.target))
            unpacked = unpacked or isinstance(t.target, (cst.Tuple, cst.List))
        self.assigns.append(Assign(node, tuple(targets), node.value, None, self.site(), unpacked))
        self._note_alias(targets, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            targets = _target_texts(node.target)
            self.assigns.append(Assign(node, tuple(targets), node.value, None, self.site()))
            self._note_alias(targets, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        op = node.operator.__class__.__name__
        self.assigns.append(Assign(node, tuple(_target_texts(node.target)), node.value, op, self.site()))

    def _note_alias(self, targets: list[str], value: cst.BaseExpression) -> None:
        if len(targets) != 1 or "." in targets[0]:
            return
        name = targets[0]
        self._by_name.note_assign(self._function, name, value, self.imports)
        # `is_log_step = (step + 1) % n == 0`: a test computed into a name (calls are not searched)
        if isinstance(value, (cst.BinaryOperation, cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)) and (
            has_modulo(value) or (not isinstance(value, cst.BinaryOperation) and self._is_gate(value))
        ):
            self.gate_names.add(name)
        if self._function is not None:
            return
        if _is_own_module(value):
            self.imports.own_module.add(name)
            return
        # module-level aliases: `ptdtype = torch.bfloat16`, `ctx = torch.autocast(...)`,
        # `synchronize = torch.cuda.synchronize if cuda else lambda: None`
        candidates = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        for candidate in candidates:
            resolved = self.imports.resolve(candidate) if isinstance(candidate, (cst.Name, cst.Attribute)) else None
            if resolved and resolved.startswith("torch."):
                self.imports.add_alias(name, resolved)
                return
        for call in calls_in(value):
            item = self._with_item(call)
            if item.kind == "autocast":
                self.context_aliases[name] = item
                return

    def visit_Return(self, node: cst.Return) -> None:
        if self._function is not None and node.value is not None:
            self._function.returns.append(node.value)
            self._function.return_facts.append(Return(node.value, self.site()))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "grad":
            self.reads_grads = True
            for loop in self._loop_stack:
                loop.uses_grad = True

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self.comprehensions.append(node)

    def visit_SetComp(self, node: cst.SetComp) -> None:
        self.comprehensions.append(node)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self.comprehensions.append(node)

    def visit_DictComp(self, node: cst.DictComp) -> None:
        self.comprehensions.append(node)

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        self.formatted.append(FormattedValue(node, self.site()))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = receiver = receiver_text = name = None
        name = self.imports.own_name(func)
        if name is None and func.__class__ is cst.Attribute:
            method = func.attr.value  # type: ignore[attr-defined]
            receiver = func.value  # type: ignore[attr-defined]
            receiver_text = dotted(receiver)
        call = Call(
            node=node,
            qualname=self.imports.resolve(func),
            method=method,
            receiver=receiver,
            receiver_text=receiver_text,
            name=name,
            site=self.site(),
        )
        self.calls.append(call)
        if self._function is not None:
            self._function.calls.append(call)
        if self._loop_stack:
            self._loop_stack[-1].direct_calls.append(call)
        if method == "add_argument":
            self._by_name.note_call(node)


def _is_own_module(value: cst.BaseExpression) -> bool:
    """`sys.modules[__name__]`: the module itself, bound to a name."""
    return (
        isinstance(value, cst.Subscript) and dotted(value.value) == "sys.modules" and len(value.slice) == 1
        and isinstance(value.slice[0].slice, cst.Index) and dotted(value.slice[0].slice.value) == "__name__"
    )


def calls_in(expr: cst.BaseExpression) -> list[cst.Call]:
    """The calls inside an expression (read from node fields; libcst's visit would rebuild them)."""
    calls: list[cst.Call] = []
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call:
            calls.append(node)
        stack.extend(child_nodes(node))
    return calls
