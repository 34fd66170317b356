"""The read-only walk calls the same visitor hooks, in the same order, as libcst's own `visit`."""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from trainlint.config import Settings
from trainlint.engine.lint import lint_source
from trainlint.model.extract import Extractor
from trainlint.model.names import ImportMap
from trainlint.model.walk import _node_classes, iter_nodes, walk
from trainlint.rules import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent


def _snippets() -> list[tuple[str, str]]:
    """The repository's examples, the rules' valid/invalid examples and the code snippets of the tests."""
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "examples").rglob("*.py"))]
    for rule in ALL_RULES:
        for i, code in enumerate((*rule.valid, *rule.invalid, rule.example, rule.fixed_example)):
            out.append((f"{rule.code}[{i}]", textwrap.dedent(code)))
    for test in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(test.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
                code = textwrap.dedent(node.value)
                try:
                    cst.parse_module(code)
                except Exception:
                    continue
                out.append((f"{test.name}:{node.lineno}", code))
    return [(name, code) for name, code in out if code.strip()]


SNIPPETS = _snippets()


def _traced(cls: type) -> type:
    """A subclass of a visitor class whose every hook logs (hook, node identity) before running."""
    namespace = {}
    for name in dir(cls):
        if name.startswith(("visit_", "leave_")):
            def hook(self, node, _orig=getattr(cls, name), _name=name):  # noqa: ANN001
                self.log.append((_name, id(node)))
                return _orig(self, node)

            namespace[name] = hook
    return type(f"Traced{cls.__name__}", (cls,), namespace)


def _everything_visitor() -> type:
    """A visitor with a hook on every node type and every field: nothing may be pruned."""
    namespace = {}
    for node_cls in _node_classes():
        t = node_cls.__name__
        namespace[f"visit_{t}"] = lambda self, node: None
        namespace[f"leave_{t}"] = lambda self, node: None
        for f in dataclasses.fields(node_cls):
            namespace[f"visit_{t}_{f.name}"] = lambda self, node: None
            namespace[f"leave_{t}_{f.name}"] = lambda self, node: None
    return type("Everything", (cst.CSTVisitor,), namespace)


TracedExtractor = _traced(Extractor)
TracedEverything = _traced(_everything_visitor())


def test_there_are_many_snippets():
    assert len(SNIPPETS) > 50


@pytest.mark.parametrize("factory", [lambda: TracedExtractor(ImportMap()), lambda: TracedEverything()], ids=["extractor", "every-hook"])
def test_walk_calls_the_same_hooks_in_the_same_order_as_libcst_visit(factory):
    for name, code in SNIPPETS:
        module = cst.parse_module(code)
        by_libcst, by_walk = factory(), factory()
        by_libcst.log, by_walk.log = [], []
        module.visit(by_libcst)
        walk(module, by_walk)
        assert by_walk.log == by_libcst.log, name


def test_a_false_visit_skips_the_children_but_still_leaves():
    class NoFunctionBodies(cst.CSTVisitor):
        def __init__(self) -> None:
            self.log: list[str] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.log.append(f"def {node.name.value}")
            return False

        def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.log.append(f"end {node.name.value}")

        def visit_Call(self, node: cst.Call) -> None:
            self.log.append("call")

    module = cst.parse_module("def train():\n    loss.backward()\nopt.step()\n")
    ours, theirs = NoFunctionBodies(), NoFunctionBodies()
    walk(module, ours)
    module.visit(theirs)
    assert ours.log == theirs.log == ["def train", "end train", "call"]


def test_iter_nodes_yields_every_node_of_libcst_in_order():
    class Collect(cst.CSTVisitor):
        def __init__(self) -> None:
            self.nodes: list[int] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            self.nodes.append(id(node))
            return True

    for name, code in SNIPPETS[:40]:
        module = cst.parse_module(code)
        collect = Collect()
        module.visit(collect)
        assert [id(n) for n in iter_nodes(module)] == collect.nodes, name


def test_lint_results_do_not_change_with_the_walk(monkeypatch):
    """Whole-engine check: every snippet gives the same diagnostics through libcst's visit."""
    settings = Settings(select=("ALL",))
    ours = [lint_source(code, "train.py", settings).diagnostics for _, code in SNIPPETS]
    import trainlint.model.training as training

    monkeypatch.setattr(training, "walk", lambda module, visitor: module.visit(visitor))
    theirs = [lint_source(code, "train.py", settings).diagnostics for _, code in SNIPPETS]
    assert ours == theirs


TRICKY_CALLS = '''\
import torch as T
@decorate(arg=f(1))
def step(model, batch, é="ü"):
    x = model(batch); y = (model(batch)).sum()
    for item in loader(make(é)):
        out = net.forward(item).mean().item(); print(f"{out.item():.3f}", "ü" + str(g(1)))
    with T.no_grad(), ctx(h(2)):
        z = [fn(v) for v in gen(w(3)) if ok(v)] + list(map(lambda q: q.cpu(), items()))
    return outer(inner(
        deep(1),
        key=val(2),
    ))(then(4))
'''


def test_call_starts_agree_with_libcst_positions_on_every_call():
    import libcst as cst

    from trainlint.model.positions import call_starts, positions
    from trainlint.model.walk import content_children

    module = cst.parse_module(TRICKY_CALLS)
    calls, stack = [], [module]
    while stack:
        node = stack.pop()
        calls += [node] if isinstance(node, cst.Call) else []
        stack.extend(content_children(node))
    exact = {n: (r.start.line, r.start.column) for n, r in positions(module, TRICKY_CALLS, calls).items()}
    assert len(calls) == 31 and call_starts(module, TRICKY_CALLS, calls) == exact
