"""Reaching definitions: which assignments of a name reach a use (found by bisection over source
order, with loops' back-edges), and the names an expression is rooted in. A mixin of `TrainingModel`."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import cached_property

import libcst as cst

from trainlint.model.facts import Assign, Function, Site
from trainlint.model.gates import child_nodes
from trainlint.model.names import dotted, root_name, target_names


def _hides(assign: Assign, at: Site) -> bool:
    """A plain assignment before a use that hides the earlier bindings from it: in the use's loops,
    and inside the use's own `if`s, not in a branch the use is not in (an `else:`, whose block has no
    node here, never hides)."""
    loops, ifs = assign.site.loops, assign.site.gate_nodes
    return assign.op is None and loops == at.loops[: len(loops)] and len(ifs) <= len(at.gate_nodes) and all(
        n is not None and n is u for n, u in zip(ifs, at.gate_nodes)
    )


class ReachingDefinitions:
    """The bindings of names in one module and which of them reach a use."""

    # -- values --------------------------------------------------------------------------------
    @cached_property
    def _assigns_by_name(self) -> dict[tuple[Function | None, str], list[Assign]]:
        table: dict[tuple[Function | None, str], list[Assign]] = {}
        for a in self.assigns:
            for target in a.targets:
                table.setdefault((a.site.function, target), []).append(a)
        return table

    @cached_property
    def _assign_orders(self) -> dict[tuple[Function | None, str], list[int]]:
        return {key: [a.site.order for a in assigns] for key, assigns in self._assigns_by_name.items()}

    def global_rebindings(self, name: str) -> list[Assign]:
        """The assignments to module-level `name` in functions that declare it `global`
        (`global _model` then `_model = SpeakerEncoder(...)` in a loader): a function reading the
        name sees them besides the module's own (`_model = None`)."""
        return self._global_rebindings.get(name, [])

    @cached_property
    def _global_rebindings(self) -> dict[str, list[Assign]]:
        table: dict[str, list[Assign]] = {}
        for fn in self.functions:
            for name in fn.declared_global:
                table.setdefault(name, []).extend(self._assigns_by_name.get((fn, name), []))
        return table

    def bindings(self, function: Function | None, name: str) -> list[cst.BaseExpression]:
        """Values assigned to `name` in this function (or at module level for None)."""
        return [a.value for a in self._assigns_by_name.get((function, name), [])]

    def reaching(self, function: Function | None, name: str, at: Site | None) -> list[Assign]:
        """The assignments to `name` that may reach a use at `at` (all of them when `at` is None).

        A cheap reaching-definitions approximation over source order: the last plain assignment
        before the use, in the use's loops and under no `if` branch the use is not in, hides the earlier
        ones; later assignments reach the use only through a loop back-edge, from a loop that
        encloses the use and lies inside that hiding assignment's loops; a `for` whose target is the
        name binds it afresh on every round.
        """
        found = self._reaching(function, name, at)
        binding = self.binding_loop(name, at) if found else None
        if binding is None:
            return found
        # `for x in loader: x = x.cuda()`: the loop's header binds `x` on every round, so what was
        # assigned before the loop, or on the previous round of it, never reaches its body
        inner, deeper = at.loops[binding], at.loops[binding + 1:]  # type: ignore[union-attr]
        return [
            a for a in found if inner in a.site.loops
            and ((a.site.statement is not at.statement and a.site.order < at.order) or any(loop in a.site.loops for loop in deeper))  # type: ignore[union-attr]
        ]

    def _reaching(self, function: Function | None, name: str, at: Site | None) -> list[Assign]:
        """`reaching` over source order alone, before a `for` that binds the name is heeded."""
        assigns = self._assigns_by_name.get((function, name), [])
        if at is None or not assigns:
            return assigns
        # Assignments are in source order: the ones before the use, and the ones a back-edge brings
        # round (inside the use's loops, up to their end), are found by bisection, not by a scan, so
        # a name bound a thousand times in one scope costs no more per use than one bound once.
        orders = self._assign_orders[(function, name)]
        # `x = x.to("cpu")`: the right-hand side reads the binding from before its own statement (or,
        # in a loop, the one its own statement made on the previous iteration)
        statement = at.statement
        own = [a for a in self.assigns_in(statement) if a.site.function is function for t in a.targets if t == name]
        if own and len(own) == len(assigns):
            return own if at.loops and any(loop in a.site.loops for a in own for loop in at.loops) else []
        split = bisect_left(orders, at.order)  # assigns[:split] come before the use
        start, depth = 0, 0  # the hiding assignment, and the loops of the use a back-edge may come round
        for i in range(split - 1, -1, -1):
            a = assigns[i]
            if statement is not None and a.site.statement is statement:
                continue
            if _hides(a, at):
                start, depth = bisect_left(orders, a.site.order), len(a.site.loops)
                break
        before = [a for a in assigns[start:split] if statement is None or a.site.statement is not statement]
        around = at.loops[depth:]
        later: list[Assign] = []
        if around:
            end = bisect_right(orders, max(loop.end for loop in around))
            later = [
                a for a in assigns[bisect_right(orders, at.order):end]
                if (statement is None or a.site.statement is not statement) and any(loop in a.site.loops for loop in around)
            ]
            later += [a for a in own if any(loop in a.site.loops for loop in around)]
        if not before and not later and function is not None and name in function.params:
            return []  # read before any rebinding: the parameter's value
        rest = [a for a in assigns if statement is None or a.site.statement is not statement] if own else assigns
        return before + later or rest

    def parameter_reaches(self, function: Function | None, name: str, at: Site | None) -> bool:
        """Whether parameter `name`'s value on entry may still reach a use at `at`: no binding before the
        use hides it (`if self.cpu: x = x.cpu()` leaves the `x` passed in on the other path)."""
        if function is None or at is None or name not in function.params:
            return False
        assigns = self._assigns_by_name.get((function, name), [])
        return not any(a.site.order < at.order and a.site.statement is not at.statement and _hides(a, at) for a in assigns)

    def binding_loop(self, name: str, at: Site | None) -> int | None:
        """The index among the use's loops of the innermost `for` whose target binds `name`."""
        for index in range(len(at.loops) - 1, -1, -1) if at is not None else ():
            node = at.loops[index].node
            if isinstance(node, cst.For) and name in target_names(node.target):
                return index
        return None

    def loop_binding_reaches(self, name: str, at: Site, assigns: list[Assign]) -> bool:
        """Whether the binding of `name` by an enclosing `for` reaches the use beside `assigns`: no
        plain assignment of the loop's body before it, outside any `if` the use is not in, hides it."""
        binding = self.binding_loop(name, at)
        if binding is None:
            return False
        inner = at.loops[binding]
        return not any(inner in a.site.loops and a.site.order < at.order and a.site.statement is not at.statement and _hides(a, at) for a in assigns)

    def roots_of(self, expr: cst.BaseExpression, function: Function | None, _depth: int = 0) -> frozenset[str]:
        """Names an expression draws on, through local assignments: `[p for p in model.parameters()]` -> {model}.

        Memoised per node: rules ask about the same expressions many times.
        """
        key = (id(expr), id(function), _depth)
        memo = self._roots_memo
        if key in memo:
            return memo[key]
        memo[key] = frozenset()  # a binding that draws on itself ends here
        result = frozenset(self._roots(expr, function, _depth))
        memo[key] = result
        return result

    @cached_property
    def _roots_memo(self) -> dict[tuple[int, int, int], frozenset[str]]:
        return {}

    def _roots(self, expr: cst.BaseExpression, function: Function | None, _depth: int) -> set[str]:
        out: set[str] = set()
        stack: list[cst.CSTNode] = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.Attribute, cst.Name, cst.Call, cst.Subscript)):
                text = dotted(node) if isinstance(node, (cst.Attribute, cst.Name)) else None
                root = root_name(node) if not isinstance(node, cst.Call) else None
                if text:
                    out.add(text)
                    parts = text.split(".")
                    for i in range(1, len(parts)):
                        out.add(".".join(parts[:i]))
                if root:
                    out.add(root)
                    if _depth < 3:
                        for value in self.bindings(function, root):
                            out |= self.roots_of(value, function, _depth + 1)
            stack.extend(child_nodes(node))
        return out
