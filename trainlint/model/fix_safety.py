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

import libcst as cst

from trainlint.model import Site, TrainingModel
from trainlint.model.gates import child_nodes
from trainlint.model.names import dotted

# reading one of these gives a number or a detached copy: the history goes no further
_DETACHING_METHODS = frozenset({"item", "detach", "tolist", "numpy", "size", "dim", "numel", "__len__"})
_NUMBER_FUNCTIONS = frozenset({"float", "int", "bool", "len", "str", "repr", "print", "round", "isinstance", "type", "id"})
# methods that put their argument into the receiver: the receiver now holds the value
_STORING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "put", "__setitem__"})
_AUTOGRAD_FUNCTIONS = frozenset({"torch.autograd.grad", "torch.autograd.backward", "torch.autograd.functional.vjp"})
_MAX_NAMES = 64  # a store that taints this many names is not proven anything about

class _Index:
    """A module's parent table and its names and attribute chains by spelling, built in one walk
    (libcst nodes do not know their parent). With it, each question costs the reads of the names it
    follows rather than a walk of the scope: 800 `total += loss` in one loop were 800 walks of it."""

    def __init__(self, model: TrainingModel) -> None:
        self.module = model.module
        self.parents: dict[int, cst.CSTNode] = {}
        self.spelled: dict[str, list[cst.CSTNode]] = {}
        stack: list[cst.CSTNode] = [model.module]
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.Name, cst.Attribute)):
                text = dotted(node)
                if text is not None:
                    self.spelled.setdefault(text, []).append(node)
            # `child_nodes` leaves out `*args` and `**kwargs` (fields named like punctuation)
            children = node.children if type(node) is cst.Parameters else child_nodes(node)
            for child in children:
                self.parents[id(child)] = node
                stack.append(child)
        self.backward_nodes = {
            id(c.node) for c in model.calls if model.is_backward(c) or (c.qualname or "") in _AUTOGRAD_FUNCTIONS
        }
        self.module_functions = {fn.name for fn in model.functions}
        self.answers: dict[tuple[str, int], bool] = {}

    def reads(self, scope: cst.CSTNode, name: str) -> list[cst.CSTNode]:
        """Names and attribute chains in `scope` spelled `name` (`self.loss`)."""
        found = self.spelled.get(name, [])
        if scope is self.module:
            return found
        return [node for node in found if self._inside(node, scope)]

    def _inside(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        while node is not scope:
            parent = self.parents.get(id(node))
            if parent is None:
                return False
            node = parent
        return True


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
    index = model.fix_safety_index
    if index is None:
        index = model.fix_safety_index = _Index(model)
    local_scope: cst.CSTNode = site.function.node if site.function is not None else model.module
    key = (target, id(local_scope))  # the answer depends on the site only through its scope
    if key not in index.answers:
        index.answers[key] = _may_be_differentiated(index, target, local_scope, site.function is None)
    return index.answers[key]


def _may_be_differentiated(index: _Index, target: str, local_scope: cst.CSTNode, top_level: bool) -> bool:
    parents, backward_nodes, module_functions = index.parents, index.backward_nodes, index.module_functions
    seen: set[str] = set()
    work = [target]
    while work:
        name = work.pop()
        if name in seen:
            continue
        seen.add(name)
        if len(seen) > _MAX_NAMES:
            return True
        scope = index.module if name.startswith("self.") or top_level else local_scope
        for read in index.reads(scope, name):
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
