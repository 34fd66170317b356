"""The package's layers (DESIGN.md, "A layout that shows the architecture") hold: import-linter's
contracts in pyproject.toml pass, no module imports in a cycle, and no module grows past 500 lines."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "trainlint"
MAX_LINES = 500

# Imports under `if TYPE_CHECKING:` that point up or close a cycle, each with its reason. Annotations
# only: nothing is imported at run time.
TYPE_ONLY_UPWARD = {
    ("trainlint.model.values", "trainlint.model.training"): "the value evaluator is handed the TrainingModel it serves",
    ("trainlint.model.arguments", "trainlint.model.training"): "lambda calls are evaluated for the same TrainingModel",
    ("trainlint.model.manual_updates", "trainlint.model.training"): "hand updates are read from the TrainingModel being analysed",
    ("trainlint.model.function_values", "trainlint.model.training"): "function values are called for the TrainingModel being analysed",
    ("trainlint.model.chosen_classes", "trainlint.model.training"): "classes chosen at run time are built in the TrainingModel being analysed",
    ("trainlint.model.state_resets", "trainlint.model.training"): "state resets are found in the TrainingModel being analysed",
    ("trainlint.model.device_arguments", "trainlint.model.training"): "device arguments are read in the TrainingModel being analysed",
    ("trainlint.model.saved_arguments", "trainlint.model.training"): "saved arguments are found in the TrainingModel being analysed",
    ("trainlint.model.module_classes", "trainlint.model.training"): "module classes are resolved in the TrainingModel being analysed",
    ("trainlint.model.class_attributes", "trainlint.model.training"): "inherited layer parameters are read in the TrainingModel being analysed",
    ("trainlint.model.backpropagated", "trainlint.model.training"): "backpropagated arguments are found in the TrainingModel being analysed",
    ("trainlint.model.added_methods", "trainlint.model.training"): "added methods are attached in the TrainingModel being built",
    ("trainlint.model.environments", "trainlint.model.training"): "environments are read in the TrainingModel being analysed",
    ("trainlint.model.training", "trainlint.model.summary"): "the project lookup the model is given answers with summaries",
    ("trainlint.model.fix_safety", "trainlint.model.training"): "fix safety reads the TrainingModel it is handed (the summarizer asks it)",
    ("trainlint.model.summarizer", "trainlint.model.training"): "the summarizer is handed the TrainingModel it summarises",
    ("trainlint.model.branches", "trainlint.model.training"): "the branch test reads the calls of the TrainingModel it is handed",
    ("trainlint.model.layer_swaps", "trainlint.model.training"): "replaced layers are read in the TrainingModel being summarised",
    ("trainlint.model.activations", "trainlint.model.training"): "returned probabilities are read in the TrainingModel being analysed",
    ("trainlint.model.modes", "trainlint.model.training"): "the mode analysis reads the TrainingModel it is handed",
    ("trainlint.model.parameter_uses", "trainlint.model.training"): "parameter facts are read from the TrainingModel being summarised",
    ("trainlint.model.moving_helpers", "trainlint.model.training"): "moving helpers are read in the TrainingModel being analysed",
    ("trainlint.model.plain_bindings", "trainlint.model.training"): "plain bindings are read in the TrainingModel being analysed",
    ("trainlint.model.parameter_uses", "trainlint.model.summary"): "a function's parameter facts build on the summaries of its calls",
    ("trainlint.model.parameter_facts", "trainlint.model.summary"): "parameter facts are read from the summaries that hold them",
    ("trainlint.project.seeds", "trainlint.project.index"): "the seeds are joined up over the Project that asks for them",
    ("trainlint.model.candidates", "trainlint.model.training"): "class candidates are found in the TrainingModel being analysed",
    ("trainlint.project.hierarchy", "trainlint.project.index"): "class candidates are found over the Project that asks for them",
}

grimp = pytest.importorskip("grimp")


def _graph(type_checking: bool):  # type: ignore[no-untyped-def]
    return grimp.build_graph("trainlint", cache_dir=None, exclude_type_checking_imports=not type_checking)


def _cycles(graph) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_import_linter_contracts_hold() -> None:
    """Every layer imports only downward and no rule imports another rule (lazy imports included)."""
    from importlinter.cli import lint_imports

    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_the_contract_is_exercised_by_an_upward_import(tmp_path: Path) -> None:
    """A lazy import from the model up into the engine breaks the contract (the check can fail)."""
    import shutil
    import subprocess

    copy = tmp_path / "trainlint"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    facts = copy / "model" / "facts.py"
    facts.write_text(facts.read_text() + "\n\ndef _upward() -> None:\n    from trainlint.engine.lint import lint_source  # noqa: F401\n")
    rule = copy / "rules" / "tl103_scaler_with_bf16.py"
    rule.write_text(rule.read_text() + "\nfrom trainlint.rules.tl101_low_precision_params_trained import parameter_casts  # noqa: E402,F401\n")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"],
        cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode != 0
    assert "trainlint.model.facts -> trainlint.engine.lint" in done.stdout
    assert "tl103_scaler_with_bf16" in done.stdout


def test_every_rule_module_is_in_the_rules_contract() -> None:
    """A new rule file joins the independence layer, so it too may import no other rule."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "rules")
    listed = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    on_disk = {p.stem for p in (PACKAGE / "rules").glob("tl*.py")}
    assert on_disk <= listed, sorted(on_disk - listed)


def test_no_import_cycle_at_run_time() -> None:
    """Counting every import that runs, module-level and inside functions."""
    assert _cycles(_graph(type_checking=False)) == []


def test_type_only_imports_that_point_up_are_listed() -> None:
    graph = _graph(type_checking=True)
    runtime = _graph(type_checking=False)
    cyclic = {m for c in _cycles(graph) for m in c}
    extra = {
        (a, b)
        for a in cyclic
        for b in graph.find_modules_directly_imported_by(a)
        if b in cyclic and b not in runtime.find_modules_directly_imported_by(a)
    }
    assert extra <= set(TYPE_ONLY_UPWARD), sorted(extra - set(TYPE_ONLY_UPWARD))


def test_no_module_is_over_500_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}


def test_only_the_verifier_imports_torch() -> None:
    """The lint path never imports torch (it costs over a second); `verify/` is the only place that may."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "verify" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "torch" or n.startswith("torch.") for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
