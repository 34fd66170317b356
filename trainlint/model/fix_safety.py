"""Whether a stored value may be differentiated later: the proof a `.detach()` fix needs to be safe.

Detaching what is stored into `self.loss`, a running total or a list changes nothing the program
computes only if nothing read from that store later reaches `backward()`/`autograd.grad` or leaves
the function (a returned value may be backpropagated by the caller). This follows every read of the
store through the expressions around it: into other names (`total = self.loss * 1.0`), containers
(`parts.append(self.loss)`), loop variables and calls, until it ends in a sink that only looks at the
number (`.item()`, `float()`, `print`, an f-string, a condition), or reaches a backward call or a
`return` (then it may be differentiated). Anything it does not recognise counts as "may be": the
answer is "no" only when it is proven.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from trainlint.model import Site, TrainingModel
from trainlint.model.names import dotted

# reading one of these gives a number or a detached copy: the history goes no further
_DETACHING_METHODS = frozenset({"item", "detach", "tolist", "numpy", "size", "dim", "numel", "__len__"})
_NUMBER_FUNCTIONS = frozenset({"float", "int", "bool", "len", "str", "repr", "print", "round", "isinstance", "type", "id"})
# methods that put their argument into the receiver: the receiver now holds the value
_STORING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "put", "__setitem__"})
_AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.grad", "torch.autograd.backward", "torch.autograd.functional.vjp"})
_MAX_NAMES = 64  # a store that taints this many names is not proven anything about

_last_parents: list[tuple[cst.Module, dict[int, cst.CSTNode]]] = []  # the last module's table


def _parents(module: cst.Module) -> dict[int, cst.CSTNode]:
    """Each node's parent, by id (libcst nodes do not know theirs); built once per module."""
    if _last_parents and _last_parents[0][0] is module:
        return _last_parents[0][1]
    table: dict[int, cst.CSTNode] = {}
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        for child in node.children:
            table[id(child)] = node
            stack.append(child)
    _last_parents[:] = [(module, table)]
    return table


def _reads(scope: cst.CSTNode, name: str) -> Iterator[cst.BaseExpression]:
    """Names and attribute chains in `scope` spelled `name` (`self.loss`), outermost match only."""
    stack: list[cst.CSTNode] = [scope]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Name, cst.Attribute)) and dotted(node) == name:
            yield node
            continue
        stack.extend(node.children)


def _targets(node: cst.CSTNode) -> list[str] | None:
    """Dotted names an assignment target binds (`a`, `self.x`, `d[...]` -> `d`, tuples); None if unknown."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        text = dotted(node)
        return [text] if text else None
    if isinstance(node, cst.Subscript):
        return _targets(node.value)
    if isinstance(node, (cst.Tuple, cst.List)):
        out: list[str] = []
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

    `self.x` is followed through every method of the module; a plain name through its function
    (or the module's top level). False only when every path from every read ends in a sink.
    """
    parents = _parents(model.module)
    backward_nodes = {
        id(c.node) for c in model.calls if model.is_backward(c) or (c.qualname or "") in _AUTOGRAD_FUNCTIONS
    }
    module_functions = {fn.name for fn in model.functions}
    local_scope: cst.CSTNode = site.function.node if site.function is not None else model.module
    seen: set[str] = set()
    work = [target]
    while work:
        name = work.pop()
        if name in seen:
            continue
        seen.add(name)
        if len(seen) > _MAX_NAMES:
            return True
        scope = model.module if name.startswith("self.") or site.function is None else local_scope
        for read in _reads(scope, name):
            flows = _flow(read, parents, backward_nodes, module_functions)
            if flows is None:
                return True
            work.extend(flows)
    return False


def _flow(
    read: cst.CSTNode, parents: dict[int, cst.CSTNode], backward_nodes: set[int], module_functions: set[str]
) -> list[str] | None:
    """Where a read value goes: the names it is stored into ([] when it ends in a sink), or None
    when it may be differentiated (reaches a backward call or a return, or goes somewhere unknown)."""
    node = read
    while True:
        parent = parents.get(id(node))
        if parent is None:
            return None
        if id(parent) in backward_nodes:
            return None
        if isinstance(parent, (cst.Return, cst.Yield, cst.Lambda)):
            return None
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            if isinstance(call, cst.Call) and call.func is parent:
                if id(call) in backward_nodes:
                    return None
                if parent.attr.value in _DETACHING_METHODS:
                    return []
            node = parent  # `x.mean`, then the call around it: still the value
            continue
        if isinstance(parent, cst.Arg):
            call = parents.get(id(parent))
            if not isinstance(call, cst.Call):
                return None
            if id(call) in backward_nodes:
                return None
            func = call.func
            if isinstance(func, cst.Name) and func.value in _NUMBER_FUNCTIONS:
                return []
            if isinstance(func, cst.Name) and func.value in module_functions:
                return None  # the module's own function may backpropagate it: not followed
            if isinstance(func, cst.Attribute) and func.attr.value in _STORING_METHODS:
                receiver = _targets(func.value)
                return receiver
            node = call  # an outside call: its result may carry the value on
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
            names: list[str] = []
            targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
            for t in targets:
                bound = _targets(t)
                if bound is None:
                    return None
                names.extend(bound)
            return names
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            if isinstance(parent, cst.CompFor):
                node = parent
                continue
            return _targets(parent.target)
        if isinstance(parent, (cst.BaseExpression, cst.Element, cst.BaseDictElement, cst.Subscript,
                               cst.SubscriptElement, cst.Index, cst.Slice, cst.CompFor, cst.CompIf)):
            node = parent  # arithmetic, containers, subscripts, comprehensions: the value goes on
            continue
        return None
