"""Whether a stored value may be differentiated later: the proof a `.detach()` fix needs to be safe.

Detaching what is stored into `self.loss`, a running total or a list changes nothing the program
computes only if nothing read from that store later reaches `backward()`/`autograd.grad` or leaves
the function (a returned value may be backpropagated by the caller). This follows every read of the
store through the expressions around it: into other names (`total = self.loss * 1.0`), containers
(`parts.append(self.loss)`), loop variables and calls, until it ends in a sink that only looks at the
number (`.item()`, `float()`, `print`, an f-string, a condition), or reaches a backward call or a
`return` (then it may be differentiated).

A value handed to a call goes on only where the callee is known to leave it alone: torch and a few
plain libraries (numpy, math, logging...), builtins, and the project's own functions whose summary
(`differentiates_arguments`, computed by this same analysis over the callee's body, in this module
or another local module) says so. An unknown callee (a callable object, a name the analysis cannot
resolve, a library it does not know) may backpropagate what it is given. Anything it does not
recognise counts as "may be": the answer is "no" only when it is proven.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import libcst as cst

from trainlint.model.facts import Site
from trainlint.model.names import dotted
from trainlint.model.lattice import Kind
from trainlint.model.walk import content_children

if TYPE_CHECKING:
    from trainlint.model.facts import Function
    from trainlint.model.summary import FunctionSummary
    from trainlint.model.training import TrainingModel

# reading one of these gives a number or a detached copy: the history goes no further
_DETACHING_METHODS = frozenset({"item", "detach", "tolist", "numpy", "size", "dim", "numel", "__len__"})
_NUMBER_FUNCTIONS = frozenset({"float", "int", "bool", "len", "str", "repr", "print", "round", "isinstance", "type", "id"})
# builtins that pass a value on (or look at it) without differentiating it; not the ones that call
# a function they are given (`map`, `filter`)
_PURE_BUILTINS = frozenset({
    "sum", "min", "max", "abs", "pow", "divmod", "list", "tuple", "dict", "set", "frozenset", "sorted",
    "reversed", "zip", "enumerate", "iter", "next", "any", "all", "hasattr", "getattr", "format", "hash",
})
# libraries whose functions do not differentiate the tensors they are given (logging, host maths)
_PURE_LIBRARIES = frozenset({
    "numpy", "math", "json", "logging", "wandb", "os", "sys", "time", "random", "copy", "warnings", "tqdm",
    "statistics", "einops", "pprint", "operator", "re", "string", "pickle", "collections", "csv", "datetime",
})
# torch namespaces that differentiate, or call functions they are given
_TORCH_DIFFERENTIATING = ("torch.autograd", "torch.func", "torch.utils.checkpoint", "torch.vmap")
# methods that put their argument into the receiver: the receiver now holds the value
_STORING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "put", "__setitem__"})
_AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.grad", "torch.autograd.backward", "torch.autograd.functional.vjp"})
_MAX_NAMES = 64  # a store that taints this many names is not proven anything about


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children that can hold reads: not `attr` of `x.attr`, the keyword of `f(k=v)`, a
    parameter's or a definition's own name (and no whitespace or punctuation)."""
    if isinstance(node, cst.Attribute):
        return [node.value]
    if isinstance(node, cst.Arg) and node.keyword is not None:
        return [node.value]
    children = content_children(node)
    if isinstance(node, (cst.Param, cst.FunctionDef, cst.ClassDef)):
        return [c for c in children if c is not node.name]
    return children


Path = list[cst.CSTNode]  # a read's ancestors, outermost first, up to the scope searched


class _ScopeReads:
    """One scope's names and attribute chains by spelling, with their parents, from one walk
    (libcst nodes do not know their parents). With it a question costs the reads of the names it
    follows rather than a walk of the scope: 800 `total += loss` in one loop were 800 walks of it."""

    def __init__(self, scope: cst.CSTNode) -> None:
        self.scope = scope  # held: the tables are keyed by `id`
        self.parents: dict[int, cst.CSTNode] = {}
        self.spelled: dict[str, list[cst.CSTNode]] = {}
        self.by_attr: dict[str, list[tuple[cst.Attribute, str | None]]] = {}
        stack: list[cst.CSTNode] = [scope]
        while stack:  # depth-first, in source order
            node = stack.pop()
            if isinstance(node, (cst.Name, cst.Attribute)):
                text = dotted(node)
                if text is not None:
                    self.spelled.setdefault(text, []).append(node)
                if isinstance(node, cst.Attribute):
                    self.by_attr.setdefault(node.attr.value, []).append((node, dotted(node.value)))
            children = _children(node)
            for child in children:
                self.parents[id(child)] = node
            stack.extend(reversed(children))

    def reads(self, names: set[str], attributes: set[str], owners: set[str]) -> Iterator[tuple[cst.BaseExpression, Path]]:
        """Names and attribute chains spelled as one of `names` (`self.loss`), and `x.attr` for
        `attr` in `attributes` and `x` in `owners` (`trainer.loss` reads what `self.loss` stored);
        outermost match only, each with its ancestors. Lazy: most searches stop at the first read
        that may be differentiated."""
        found: dict[int, cst.CSTNode] = {}
        for name in names:
            found.update((id(n), n) for n in self.spelled.get(name, ()))
        for attr in attributes:
            found.update((id(a), a) for a, owner in self.by_attr.get(attr, ()) if owner in owners)
        for node in found.values():
            path = self._path(node)
            if not any(id(p) in found for p in path):  # inside a longer match: that one is the read
                yield node, path  # type: ignore[misc]

    def _path(self, node: cst.CSTNode) -> Path:
        path: Path = []
        while node is not self.scope:
            node = self.parents[id(node)]
            path.append(node)
        path.reverse()
        return path


class _Index:
    """A model's fix-safety tables: each scope's reads, each function's local names, the module's
    objects of its own classes, and the answers given per store and scope."""

    def __init__(self) -> None:
        self.scopes: dict[int, _ScopeReads] = {}
        self.locals: dict[int, set[str]] = {}
        self.owners: set[str] | None = None
        self.answers: dict[tuple[str, int], bool] = {}
        self.callees: dict[str, bool] = {}  # this module's functions, by qualified name: do they differentiate

    @staticmethod
    def of(model: TrainingModel) -> _Index:
        index = model.fix_safety_index
        if not isinstance(index, _Index):
            index = model.fix_safety_index = _Index()
        return index

    def reads(self, scope: cst.CSTNode) -> _ScopeReads:
        found = self.scopes.get(id(scope))
        if found is None:
            found = self.scopes[id(scope)] = _ScopeReads(scope)
        return found


def _targets(node: cst.CSTNode) -> list[tuple[str, bool]] | None:
    """Dotted names an assignment target binds, each with whether the store mutates an object
    (`d[...]` -> `d`, `obj.x`) rather than rebinds a name; tuples unpacked; None if unknown."""
    if isinstance(node, cst.Name):
        return [(node.value, False)]
    if isinstance(node, cst.Attribute):
        text = dotted(node)
        return [(text, True)] if text else None
    if isinstance(node, cst.Subscript):
        inner = _targets(node.value)
        return None if inner is None else [(name, True) for name, _ in inner]
    if isinstance(node, (cst.Tuple, cst.List)):
        out: list[tuple[str, bool]] = []
        for element in node.elements:
            names = _targets(element.value)
            if names is None:
                return None
            out.extend(names)
        return out
    if isinstance(node, cst.StarredElement):
        return _targets(node.value)
    return None


def may_be_differentiated(model: TrainingModel, target: str, site: Site) -> bool:
    """Whether the value stored into `target` (at `site`) may reach a backward call or a return.

    `self.x` and the module's own top-level names are followed through the whole module (and
    `obj.x` where `obj` is an object of a class of the module); a local name through its function.
    False only when every path from every read ends in a sink.
    """
    answers = _Index.of(model).answers
    # the answer depends on the site only through its function
    key = (target, id(site.function.node) if site.function is not None else id(model.module))
    if key not in answers:
        # `stats["loss"] += loss` stores into `stats[]`: what is read is `stats`
        answers[key] = _Flow(model, site.function, callee=False).reaches([(target.removesuffix("[]"), True)])
    return answers[key]


def summary_differentiates(model: TrainingModel, summary: "FunctionSummary") -> bool:
    """`summary.differentiates_arguments`, computed where it was left open: in this module for its
    own functions, by the project phase for another module's."""
    if summary.differentiates_arguments is not None:
        return summary.differentiates_arguments
    path, qualified = summary.defined
    if not qualified:
        return True
    if path != (model.path or ""):
        return model.project is None or model.project.differentiates(path, qualified)
    return local_differentiates(model, qualified)


def local_differentiates(model: TrainingModel, qualified: str) -> bool:
    """Whether a function of this module (by qualified name; any of that name) may differentiate a
    value it is given."""
    answers = _Index.of(model).callees
    if qualified not in answers:
        answers[qualified] = True  # recursion: unproven
        found = [fn for fn in model.functions if fn.qualified == qualified]
        answers[qualified] = not found or any(differentiates_arguments(model, fn) for fn in found)
    return answers[qualified]


def differentiates_arguments(model: TrainingModel, fn: "Function") -> bool:
    """Whether a call of `fn` may differentiate a value it is given (an argument, or state of its
    object): True unless every parameter's reads end in sinks or in the function's result (which
    the caller follows), and nothing given is stored where this function cannot see it read."""
    if not fn.params:
        return False
    return _Flow(model, fn, callee=True).reaches([(p, False) for p in fn.params])


class _Flow:
    """Follows values through one function (or the module's top level) of a module."""

    def __init__(self, model: TrainingModel, function: "Function | None", callee: bool) -> None:
        self.model = model
        self.function = function
        self.callee = callee  # a callee's parameters: its result goes back to the caller, who follows it
        # the body: a parameter's own name, its default and annotation are no reads
        self.scope: cst.CSTNode = function.node.body if function is not None else model.module
        self.index = _Index.of(model)

    def reaches(self, start: list[tuple[str, bool]]) -> bool:
        """Whether a value held by any of `start` (name, stored by mutation) may be differentiated."""
        seen: set[str] = set()
        work = start
        while work:
            batch: set[str] = set()
            for name, mutated in work:
                if name in seen:
                    continue
                if self._escapes(name, mutated):
                    return True
                seen.add(name)
                batch.add(name)
            if len(seen) > _MAX_NAMES:
                return True
            work = []
            shared = {n for n in batch if n.startswith("self.") or self._global(n)}  # read module-wide
            own = batch - shared
            groups = [(self.scope, own, set(), set())]
            if shared:
                attributes = {n.split(".", 1)[1] for n in shared if n.startswith("self.") and n.count(".") == 1}
                groups.append((self.model.module, shared, attributes, self._instances()))
            for scope, names, attributes, owners in groups:
                if not names:
                    continue
                for read, path in self.index.reads(scope).reads(names, attributes, owners):
                    flows = self._flow(read, path)
                    if flows is None:
                        return True
                    work.extend(flows)
        return False

    def _escapes(self, name: str, mutated: bool) -> bool:
        """A store the analysis cannot follow: into an object the caller holds (a parameter's), or
        a name of another scope (a global, a closure's)."""
        if name.startswith("self."):
            # followed through every method; a callee's store on its object is not: that object
            # may be read anywhere, and the module-wide search is too dear for every summary
            return self.callee
        if self.function is None or name == "self":
            return False  # the top level is read module-wide
        root = name.split(".", 1)[0]
        if root in self.function.params:
            return mutated
        if root in self._locals():
            return False
        # a module-level name is followed through the module; a callee's store into one is not (as
        # on its object); a closure's or an unknown scope's is not followed at all
        return self.callee or not self._global(name)

    def _global(self, name: str) -> bool:
        """A name of the module's top level, used in this function."""
        root = name.split(".", 1)[0]
        return (
            self.function is not None and root not in self.function.params and root not in self._locals()
            and bool(self.model.bindings(None, root))
        )

    def _instances(self) -> set[str]:
        """Names the module binds to an object of one of its classes (`trainer = Trainer()`): their
        attributes are what `self.x` stored."""
        if self.index.owners is None:
            classes = {c.name for c in self.model.classes}
            self.index.owners = {
                t for a in self.model.assigns if isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Name)
                and a.value.func.value in classes for t in a.targets
            }
        return self.index.owners

    def _locals(self) -> set[str]:
        """Names the function binds (assigned, loop and `with` targets, its parameters)."""
        assert self.function is not None
        local = self.index.locals.get(id(self.function.node))
        if local is None:
            found = set(self.function.params)
            declared: set[str] = set()
            stack: list[cst.CSTNode] = [self.scope]
            while stack:
                node = stack.pop()
                if isinstance(node, (cst.Global, cst.Nonlocal)):
                    declared |= {n.name.value for n in node.names}
                elif isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.NamedExpr, cst.AsName)):
                    target = node.name if isinstance(node, cst.AsName) else node.target
                    found |= {n for n, mutated in _targets(target) or [] if not mutated}
                elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                    found.add(node.name.value)
                    continue  # a nested scope's names are its own
                stack.extend(content_children(node))
            local = self.index.locals[id(self.function.node)] = found - declared
        return local

    def _flow(self, read: cst.CSTNode, path: Path) -> list[tuple[str, bool]] | None:
        """Where a read value goes (`path`: its ancestors): the names it is stored into ([] when it
        ends in a sink), or None when it may be differentiated (reaches a backward call or a
        return, or goes somewhere unknown)."""
        node, i = read, len(path) - 1  # path[i] is node's parent
        while True:
            if i < 0:
                return None
            parent = path[i]
            above = path[i - 1] if i > 0 else None
            if self._backward(parent):
                return None
            if isinstance(parent, (cst.Return, cst.Yield)):
                return [] if self.callee else None  # a callee's result: the caller follows it
            if isinstance(parent, cst.Lambda):
                return None
            if isinstance(parent, cst.Attribute) and parent.value is node:
                call = above
                if isinstance(call, cst.Call) and call.func is parent:
                    if self._backward(call):
                        return None
                    if parent.attr.value in _DETACHING_METHODS:
                        return []
                    if self._method_differentiates(call):
                        return None
                node, i = parent, i - 1  # `x.mean`, then the call around it: still the value
                continue
            if isinstance(parent, cst.Arg):
                call = above
                if not isinstance(call, cst.Call):
                    return None
                if self._backward(call):
                    return None
                func = call.func
                if isinstance(func, cst.Name) and func.value in _NUMBER_FUNCTIONS and self._builtin(func.value):
                    return []
                if isinstance(func, cst.Attribute) and func.attr.value in _STORING_METHODS:
                    receiver = _targets(func.value)
                    return None if receiver is None else [(name, True) for name, _ in receiver]
                if not self._leaves_arguments_alone(call):
                    return None
                node, i = call, i - 2  # its result may carry the value on
                continue
            if isinstance(parent, (cst.FormattedStringExpression, cst.Comparison, cst.ComparisonTarget, cst.Del)):
                return []
            if isinstance(parent, (cst.If, cst.While, cst.Assert, cst.IfExp)) and getattr(parent, "test", None) is node:
                return []
            if isinstance(parent, cst.Expr):
                return []  # an expression statement: its value is dropped
            if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is node):
                return []  # the store being written, not read
            if isinstance(parent, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                names: list[tuple[str, bool]] = []
                targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
                for t in targets:
                    bound = _targets(t)
                    if bound is None:
                        return None
                    # `x += value` may add in place, into an object someone else holds
                    names.extend((n, mutated or isinstance(parent, cst.AugAssign)) for n, mutated in bound)
                return names
            if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
                if isinstance(parent, cst.CompFor):
                    node, i = parent, i - 1
                    continue
                return _targets(parent.target)
            if isinstance(parent, (cst.BaseExpression, cst.Element, cst.BaseDictElement, cst.Subscript,
                                   cst.SubscriptElement, cst.Index, cst.Slice, cst.CompFor, cst.CompIf)):
                node, i = parent, i - 1  # arithmetic, containers, subscripts, comprehensions: the value goes on
                continue
            return None

    def _backward(self, node: cst.CSTNode) -> bool:
        """`x.backward()`, `torch.autograd.grad(...)` and their kin."""
        if not isinstance(node, cst.Call):
            return False
        call = self.model.call_at(node)
        return call is not None and (self.model.is_backward(call) or (call.qualname or "") in _AUTOGRAD_FUNCTIONS)

    # -- callees -------------------------------------------------------------------------------
    def _builtin(self, name: str) -> bool:
        """`name` is Python's builtin: not a function, class or binding of this module."""
        m, fn = self.model, self.function
        return m.local_function(name) is None and m.local_class(name) is None and not m.bindings(None, name) and (
            fn is None or (name not in fn.params and not m.bindings(fn, name))
        )

    def _method_differentiates(self, call: cst.Call) -> bool:
        """`holder.method()` on a value (or an object holding it): a method the analysis knows
        (of a class of this module or of the project) whose summary says it may differentiate."""
        fact = self.model.call_at(call)
        if fact is None:
            return False
        summary = self.model.call_summary(fact)
        return summary is not None and summary_differentiates(self.model, summary)

    def _leaves_arguments_alone(self, call: cst.Call) -> bool:
        """Whether the callee is known not to differentiate what it is given."""
        m = self.model
        fact = m.call_at(call)
        if fact is None:
            return False
        if any(self._function(a.value) for a in call.args):
            return False  # a function handed to the callee may be called on the value
        summary = m.call_summary(fact)
        if summary is not None:
            return not summary_differentiates(m, summary)
        qual = fact.qualname
        if qual is not None:
            return self._library_leaves_alone(qual)
        func = call.func
        if isinstance(func, cst.Name):
            local_class = m.local_class(func.value)
            if local_class is not None:  # constructing an object of this module: its `__init__`
                init = m.summarizer.cls(local_class).methods.get("__init__")
                return init is None or not summary_differentiates(m, init)
            if func.value in _PURE_BUILTINS and self._builtin(func.value):
                return True
        if isinstance(func, (cst.Name, cst.Attribute)):
            site = fact.site
            if isinstance(func, cst.Attribute):
                receiver = m.value(func.value, site)
                if receiver.kind in (Kind.TENSOR, Kind.COLLECTION):
                    return True  # `x.add(value)`, `items.index(value)`
                return (receiver.origin or "").startswith("torch.")  # `writer.add_scalar(...)`
            callee = m.value(func, site)
            return callee.kind is Kind.MODULE  # `model(value)`: a forward pass
        return False

    def _function(self, expr: cst.BaseExpression) -> bool:
        """A function of the program's: a lambda, a function or class of this module or of the
        project, a method of `self`."""
        m = self.model
        if isinstance(expr, cst.Lambda):
            return True
        if isinstance(expr, cst.Name) and (m.local_function(expr.value) or m.local_class(expr.value)):
            return True
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
            return m.bound_method(expr.value, expr.attr.value, self.function) is not None
        qual = m.imports.resolve(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        return qual is not None and m.project_symbol(qual) is not None

    def _library_leaves_alone(self, qual: str) -> bool:
        m = self.model
        symbol = m.project_symbol(qual)
        if symbol is not None:  # a project class being constructed: its `__init__`
            init = getattr(symbol, "methods", {}).get("__init__")
            return init is None or not summary_differentiates(m, init)
        if qual.startswith("."):
            return False  # a local module the project phase could not summarise
        root = qual.split(".", 1)[0]
        if root == "torch":
            return not qual.startswith(_TORCH_DIFFERENTIATING)
        return root in _PURE_LIBRARIES
