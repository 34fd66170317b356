"""A read-only walk over a libcst tree that speaks libcst's `CSTVisitor` protocol.

`node.visit(visitor)` rebuilds every node it passes through (`_visit_and_replace_children` constructs
a new parent from the visited children, even for a read-only `CSTVisitor`), and it visits every
whitespace, comma and parenthesis. `walk(node, visitor)` calls the same hooks in the same order
(`visit_<Type>`, `visit_<Type>_<field>`, `leave_<Type>_<field>`, `leave_<Type>`; a `False` from
`visit_<Type>` skips the children) without building anything, and it does not descend into
subtrees where the visitor has no hook at all: a subtree whose node types can hold nothing the
visitor listens to is invisible to it either way.

What is precomputed, once per process:
- per node type, the order libcst visits its fields in (recorded from the first node of that type
  by running its own `_visit_and_replace_children` one level deep, so the order cannot drift from
  the installed libcst);
- per node type and field, which node types the field can hold (from the dataclass annotations);
- per visitor class, which node types can lead to a hook, and so which fields are worth entering.
"""

from __future__ import annotations

import dataclasses
import operator
import sys
import typing
from typing import Any, Callable, Iterable

import libcst as cst

Hook = Callable[[Any, cst.CSTNode], Any]

_BASE_HOOKS = ("on_visit", "on_leave", "on_visit_attribute", "on_leave_attribute")


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Visit `node` and its subtree with `visitor`'s hooks, exactly as `node.visit(visitor)` would."""
    cls = type(visitor)
    if any(getattr(cls, name) is not getattr(cst.CSTVisitor, name) for name in _BASE_HOOKS):
        node.visit(visitor)  # a visitor that overrides the generic dispatch gets libcst's own walk
        return
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _Plan(cls)
    plan.walk(node, visitor)


# -- what libcst's node classes look like ------------------------------------------------------
def _node_classes() -> list[type[cst.CSTNode]]:
    seen: list[type[cst.CSTNode]] = []
    stack: list[type] = [cst.CSTNode]
    while stack:
        current = stack.pop()
        for sub in current.__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    # libcst's `add_slots` replaces each class by a slotted copy; the unslotted original lingers
    return [
        c for c in seen
        if dataclasses.is_dataclass(c) and "__slots__" in c.__dict__ and not getattr(c, "__abstractmethods__", None)
    ]


def _classes_in(hint: object, concrete: dict[type, list[type]], namespace: dict[str, Any]) -> tuple[set[type] | None, bool]:
    """The concrete node classes a field annotation admits (None: unknown), and whether the field may
    be a sequence. Forward references are looked up in `namespace` (the node class's module)."""
    found: set[type] = set()
    sequence = False
    stack = [hint]
    while stack:
        current = stack.pop()
        if isinstance(current, (str, typing.ForwardRef)):
            name = current if isinstance(current, str) else current.__forward_arg__
            if name not in namespace:
                return None, True  # an annotation this reading cannot resolve: enter whatever is there
            current = namespace[name]
        origin = typing.get_origin(current)
        if origin is not None:
            if origin in (list, tuple) or (isinstance(origin, type) and issubclass(origin, typing.Sequence)):  # type: ignore[arg-type]
                sequence = True
            if origin is typing.Literal:
                continue
            stack.extend(typing.get_args(current))
        elif isinstance(current, type) and issubclass(current, cst.CSTNode):
            found.update(concrete.get(current, ()))
    return found, sequence


class _Types:
    """Per node class: the node classes each field can hold (None where the annotation is unknown)."""

    def __init__(self) -> None:
        classes = _node_classes()
        self.classes = classes
        concrete: dict[type, list[type]] = {}
        for c in classes:
            for base in c.__mro__:
                if isinstance(base, type) and issubclass(base, cst.CSTNode):
                    concrete.setdefault(base, []).append(c)
        self.fields: dict[type, dict[str, tuple[set[type] | None, bool]]] = {}
        for c in classes:
            # the dataclass fields' own types, not `typing.get_type_hints` (which evaluates them all
            # again and costs more than analysing a file); forward references resolve by name
            namespace = vars(sys.modules[c.__module__])
            self.fields[c] = {f.name: _classes_in(f.type, concrete, namespace) for f in dataclasses.fields(c)}


_TYPES: _Types | None = None


def _types() -> _Types:
    global _TYPES
    if _TYPES is None:
        _TYPES = _Types()
    return _TYPES


class _OrderRecorder(cst.CSTVisitor):
    """Records the fields a node's `_visit_and_replace_children` visits, in order, one level deep."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if attribute not in self.order:
            self.order.append(attribute)


_ORDERS: dict[type, tuple[str, ...]] = {}


def _visit_order(node: cst.CSTNode) -> tuple[str, ...]:
    cls = type(node)
    order = _ORDERS.get(cls)
    if order is None:
        recorder = _OrderRecorder()
        node._visit_and_replace_children(recorder)
        # a field libcst skips when it is None (a format spec) is visited last, as libcst does
        rest = [f.name for f in dataclasses.fields(cls) if f.name not in recorder.order]
        node_fields = _types().fields.get(cls, {})
        rest = [name for name in rest if node_fields.get(name, (None, True))[0] != set()]
        order = _ORDERS[cls] = (*recorder.order, *rest)
    return order


def _own_hook(visitor_cls: type, name: str) -> Hook | None:
    """The visitor's hook of that name, or None where only libcst's typed no-op stub exists."""
    hook = getattr(visitor_cls, name, None)
    if hook is None or not callable(hook) or hook is getattr(cst.CSTVisitor, name, None):
        return None
    return hook


# -- one visitor class's plan --------------------------------------------------------------------
@dataclasses.dataclass
class _Step:
    field: str
    enter: bool  # whether the field can hold a node that leads to a hook
    visit: Hook | None
    leave: Hook | None
    hooks_when_absent: bool  # libcst calls the attribute hooks of a None field, except guarded sequences


class _Plan:
    """Which hooks a visitor class has and which subtrees can reach one."""

    def __init__(self, visitor_cls: type) -> None:
        self.visitor_cls = visitor_cls
        types = _types()
        hooked_names: set[str] = set()
        self.field_hooked: set[tuple[str, str]] = set()
        for name in dir(visitor_cls):
            for prefix in ("visit_", "leave_"):
                if name.startswith(prefix) and _own_hook(visitor_cls, name) is not None:
                    type_name, _, attribute = name[len(prefix):].partition("_")
                    hooked_names.add(type_name)
                    if attribute:
                        self.field_hooked.add((type_name, attribute))
        # a node type is relevant when it has a hook or one of its fields can hold a relevant type
        relevant = {c for c in types.classes if c.__name__ in hooked_names}
        changed = True
        while changed:
            changed = False
            for c in types.classes:
                if c in relevant:
                    continue
                for classes, _ in types.fields[c].values():
                    if classes is None or classes & relevant:
                        relevant.add(c)
                        changed = True
                        break
        self.relevant = frozenset(relevant)
        # checked per child: a type libcst adds later is entered, not silently skipped
        self.irrelevant = frozenset(types.classes) - self.relevant
        self.entries: dict[type, tuple[Hook | None, Hook | None, tuple[_Step, ...]]] = {}

    def _entry(self, node: cst.CSTNode) -> tuple[Hook | None, Hook | None, tuple[_Step, ...]]:
        cls = type(node)
        name = cls.__name__
        vc = self.visitor_cls
        fields = _types().fields.get(cls, {})
        steps = []
        for attribute in _visit_order(node):
            classes, sequence = fields.get(attribute, (None, True))
            enter = classes is None or bool(classes & self.relevant)
            visit = _own_hook(vc, f"visit_{name}_{attribute}")
            leave = _own_hook(vc, f"leave_{name}_{attribute}")
            if enter or visit or leave:
                steps.append(_Step(attribute, enter, visit, leave, not sequence))
        entry = (_own_hook(vc, f"visit_{name}"), _own_hook(vc, f"leave_{name}"), tuple(steps))
        self.entries[cls] = entry
        return entry

    def walk(self, node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
        entry = self.entries.get(type(node)) or self._entry(node)
        visit, leave, steps = entry
        if visit is None or visit(visitor, node) is not False:
            irrelevant = self.irrelevant
            relevant = self.relevant
            for step in steps:
                value = getattr(node, step.field)
                if value is None and not step.hooks_when_absent:
                    continue
                if step.visit is not None:
                    step.visit(visitor, node)
                if step.enter and value is not None:
                    # type tests, not isinstance: every libcst class is an ABC, whose isinstance is slow
                    kind = value.__class__
                    if kind is tuple or kind is list:
                        for child in value:
                            if child.__class__ not in irrelevant:
                                self.walk(child, visitor)
                    elif kind not in irrelevant and (kind in relevant or isinstance(value, cst.CSTNode)):
                        self.walk(value, visitor)
                if step.leave is not None:
                    step.leave(visitor, node)
        if leave is not None:
            leave(visitor, node)


_PLANS: dict[type, _Plan] = {}


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """A node's children in libcst's visiting order (whitespace and punctuation included)."""
    children: list[cst.CSTNode] = []
    for attribute in _visit_order(node):
        value = getattr(node, attribute, None)
        kind = type(value)
        if kind is tuple or kind is list:
            children.extend(v for v in value if is_node(v))  # type: ignore[union-attr]
        elif is_node(value):
            children.append(value)  # type: ignore[arg-type]
    return children


_NODE_CLASSES: dict[type, bool] = {}  # whether a class is a libcst node (isinstance on its ABCs is slow)


def is_node(value: object) -> bool:
    """isinstance(value, cst.CSTNode), answered by the value's class once (on libcst's ABCs each
    isinstance runs ABCMeta.__instancecheck__)."""
    kind = type(value)
    known = _NODE_CLASSES.get(kind)
    if known is None:
        known = _NODE_CLASSES[kind] = isinstance(value, cst.CSTNode)
    return known


# whitespace, comments and punctuation: never what a rule reports
TRIVIA: tuple[type[cst.CSTNode], ...] = (
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.Newline, cst.EmptyLine,
    cst.Comment, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.LeftParen, cst.RightParen,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace,
)
_TRIVIA_CLASSES = frozenset(TRIVIA)  # (libcst's node classes are final: a class test is an isinstance)
_CONTENT_GETTERS: dict[type, Callable[[cst.CSTNode], tuple[Any, ...]]] = {}


def _content_getter(node: cst.CSTNode) -> Callable[[cst.CSTNode], tuple[Any, ...]]:
    table = _types().fields.get(type(node), {})
    trivia = set(TRIVIA)
    fields = [
        f for f in _visit_order(node)
        if table.get(f, (None, True))[0] is None or not table[f][0] <= trivia  # type: ignore[operator]
    ]
    if not fields:
        getter: Callable[[cst.CSTNode], tuple[Any, ...]] = lambda n: ()
    elif len(fields) == 1:
        one = operator.attrgetter(fields[0])
        getter = lambda n: (one(n),)
    else:
        getter = operator.attrgetter(*fields)
    _CONTENT_GETTERS[type(node)] = getter
    return getter


def content_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """A node's children in visiting order, leaving out the fields that can hold only trivia."""
    getter = _CONTENT_GETTERS.get(type(node)) or _content_getter(node)
    children: list[cst.CSTNode] = []
    for value in getter(node):
        kind = value.__class__
        if kind is tuple or kind is list:
            children.extend(v for v in value if v.__class__ not in _TRIVIA_CLASSES)
        elif kind not in _TRIVIA_CLASSES and is_node(value):
            children.append(value)
    return children


def iter_nodes(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    """Every node of a subtree, parents before children, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(child_nodes(current)))
