"""Values that lean on themselves: a recursive function passing on what its own calls returned
(a tree walker threading `states` through every branch) is evaluated in time linear in its call
sites (the nested asks joined every site again: quadratic, and exponential where such walkers
call each other), and what it computes is unchanged."""

from __future__ import annotations

import pytest

from tests.helpers import lint
from trainlint.model.values import ValueModel

BRANCHES = 12


def _tree_walker(branches: int) -> str:
    """A recursive walker with `branches` call sites, each passing on the `states` the last returned
    (the shape of GraphCodeBERT's data-flow extractors)."""
    lines = ["import torch", "", "def walk(node, index, states):", "    states = states.copy()", "    found = []"]
    for i in range(branches):
        lines += [
            f"    if node.kind == {i}:",
            f"        temp, states = walk(node.children[{i}], index, states)",
            "        found += temp",
        ]
    lines += [
        "    return found, states",
        "",
        "model = torch.nn.Linear(4, 1).cuda()",
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "for batch in loader:",
        "    loss = model(batch.x.cuda()).sum()",
        "    flow, _ = walk(batch.tree, {}, {})",
        "    loss.backward()",
        "    optimizer.step()",
        "    print(loss.item())",
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def counted_parameters(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a parameter's value is worked out from its call sites (each call counted)."""
    calls = [0]
    original = ValueModel._arguments

    def counting(self: ValueModel, fn: object, name: str) -> object:
        calls[0] += 1
        if calls[0] > 10_000:  # the exponential walk: stop it rather than wait for it
            raise AssertionError("a parameter's call sites were joined over 10,000 times")
        return original(self, fn, name)  # type: ignore[arg-type]

    monkeypatch.setattr(ValueModel, "_arguments", counting)
    return calls


def test_recursive_walker_is_evaluated_once_per_parameter(counted_parameters: list[int]) -> None:
    found = [(d.line, d.code) for d in lint(_tree_walker(BRANCHES), "TL401")]
    # the per-step `.item()` is still found; the walker's parameters are joined about twice per call
    # site (26 joins for 12 sites), where every nested ask joined them all again (103)
    assert [code for _, code in found] == ["TL401"]
    assert counted_parameters[0] <= 3 * BRANCHES


def test_walker_evaluation_does_not_grow_with_more_branches(counted_parameters: list[int]) -> None:
    lint(_tree_walker(4), "TL401")
    small = counted_parameters[0]
    counted_parameters[0] = 0
    lint(_tree_walker(16), "TL401")
    assert counted_parameters[0] <= 4 * max(small, 1) + 16  # linear in the sites, not exponential


def _report_builder(appends: int) -> str:
    """A string built with `+=` in a loop and then `appends` times more (torch.fx's `split_preview`):
    each `+=` reads the value of the one before it."""
    lines = ["import torch", "", "def report(subgraphs):", '    reports = ""', "    for i, graph in enumerate(subgraphs):",
             '        reports += f"{i}: "', '        reports += f"{len(graph)} nodes\\n"']
    lines += [f'    reports += "part {i}\\n"' for i in range(appends)]
    lines += [
        "    return reports",
        "",
        "model = torch.nn.Linear(4, 1).cuda()",
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "total = 0",
        "for batch in loader:",
        "    loss = model(batch.x.cuda()).sum()",
        "    text = report(batch.graphs)",
        "    loss.backward()",
        "    optimizer.step()",
        "    total += loss",
    ]
    return "\n".join(lines) + "\n"


def test_each_augmented_assignment_is_evaluated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty `reports += ...` after a loop took minutes in a real module (each evaluated all those
    before it again, through the loop's back-edge every time): each is now worked out once, so a
    name is looked up about once per assignment (37 lookups here; 300 before), and the graph kept
    by `total += loss` is still found."""
    calls = [0]
    original = ValueModel._name

    def counting(self: ValueModel, *args: object) -> object:
        calls[0] += 1
        if calls[0] > 10_000:
            raise AssertionError("names were looked up over 10,000 times")
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ValueModel, "_name", counting)
    assert [d.code for d in lint(_report_builder(20), "TL302")] == ["TL302"]
    assert calls[0] <= 2 * 23
