"""One summary per module per content, computed once however many files import it and at whatever
depth (a chain, a diamond, modules that import each other), with one worker or two; and the same
findings whichever file a run starts from: `check DIR` gives each file what `check FILE` gives it,
`-j 1` what `-j 2` gives, the editor (one long-lived process, files in any order) what `check` gives.
Through the command, counting computations with TRAINLINT_SUMMARY_LOG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

# a chain: train_chain -> a -> b -> c -> d; each helper has training code (it is analysed)
CHAIN = {
    "a.py": "import torch\nfrom b import step_b\n\ndef step_a(loss, opt):\n    step_b(loss, opt)\n    return loss.item()\n",
    "b.py": "import torch\nfrom c import step_c\n\ndef step_b(loss, opt):\n    return step_c(loss, opt)\n",
    "c.py": "import torch\nfrom d import step_d\n\ndef step_c(loss, opt):\n    return step_d(loss, opt)\n",
    "d.py": "import torch\n\ndef step_d(loss, opt):\n    loss.backward()\n    opt.step()\n    return loss.item()\n",
}
# a diamond: top imports left and right, both import base
DIAMOND = {
    "base.py": "import torch\n\ndef sync_all(t):\n    torch.cuda.synchronize()\n    return t.item()\n",
    "left.py": "import torch\nfrom base import sync_all\n\ndef left(t):\n    return sync_all(t)\n",
    "right.py": "import torch\nfrom base import sync_all\n\ndef right(t):\n    return sync_all(t) + t.item()\n",
    "top.py": "import torch\nfrom left import left\nfrom right import right\n\ndef both(t):\n    return left(t) + right(t)\n",
}
# modules that import each other
CYCLE = {
    "ping.py": "import torch\nimport pong\n\ndef ping(t, n):\n    if n:\n        return pong.pong(t, n - 1)\n    return t.item()\n",
    "pong.py": "import torch\nimport ping\n\ndef pong(t, n):\n    torch.cuda.synchronize()\n    return ping.ping(t, n)\n",
}
# a package whose `__init__` imports its modules, one of which imports a sibling through the package
PACKAGE = {
    "pkg/__init__.py": "from .ops import run_step\nfrom .util import host\n",
    "pkg/ops.py": "import torch\nfrom . import util\n\ndef run_step(loss, opt):\n    loss.backward()\n    opt.step()\n    return util.host(loss)\n",
    "pkg/util.py": "import torch\n\ndef host(t):\n    return t.item()\n",
}
LOOP = """\
import torch
{imports}

def main(model, loader, optimizer):
    model.cuda()
    for x in loader:
        x = x.cuda()
        loss = model(x)
{calls}
"""


def _train(imports: list[str], calls: list[str]) -> str:
    return LOOP.format(imports="\n".join(imports), calls="\n".join(f"        {c}" for c in calls))


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("")
    (root / "pkg").mkdir()
    for name, text in {**CHAIN, **DIAMOND, **CYCLE, **PACKAGE}.items():
        (root / name).write_text(text)
    # files importing the same helpers at different depths of the chain, the diamond's top and a
    # side, and each side of the cycle
    trains = {
        "train_chain.py": _train(["from a import step_a"], ["step_a(loss, optimizer)"]),
        "train_mid.py": _train(["from c import step_c", "from d import step_d"], ["step_c(loss, optimizer)", "step_d(loss, optimizer)"]),
        "train_diamond.py": _train(["from top import both", "from right import right"],
                                   ["loss.backward()", "optimizer.step()", "optimizer.zero_grad()", "both(loss)", "right(loss)"]),
        "train_ping.py": _train(["from ping import ping"], ["loss.backward()", "optimizer.step()", "optimizer.zero_grad()", "ping(loss, 2)"]),
        "train_pkg.py": _train(["from pkg import run_step, host"], ["run_step(loss, optimizer)", "host(loss)", "optimizer.zero_grad()"]),
        "train_pong.py": _train(["from pong import pong", "from b import step_b"], ["pong(loss, 2)", "step_b(loss, optimizer)", "optimizer.zero_grad()"]),
    }
    for name, text in trains.items():
        (root / name).write_text(text)
    return root


def _check(root: Path, *args: str, log: Path | None = None) -> list[tuple[str, int, str]]:
    env = {**os.environ, "TRAINLINT_CACHE_KEY": "k1"}
    if log is not None:
        log.unlink(missing_ok=True)
        env["TRAINLINT_SUMMARY_LOG"] = str(log)
    done = subprocess.run([sys.executable, "-m", "trainlint", "check", "--preview", "--no-cache", "--format", "json", *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return sorted((Path(str(d["path"])).as_posix(), int(d["line"]), str(d["code"])) for d in json.loads(done.stdout))


EDITOR = """
import dataclasses, json, sys
from trainlint.config import Settings
from trainlint.lsp.analysis import lint_buffer
settings = dataclasses.replace(Settings(), preview=True)
out = []
for name in sys.argv[1:]:
    with open(name) as fh:
        out.extend((name, d.line, d.code) for d in lint_buffer(fh.read(), name, settings).diagnostics)
print(json.dumps(sorted(out)))
"""


def _editor(root: Path, tmp_path: Path, names: list[str]) -> list[tuple[str, int, str]]:
    """What the language server's analysis finds in each file, one process linting them in turn."""
    env = {**os.environ, "TRAINLINT_CACHE_DIR": str(tmp_path / "editor-cache"), "TRAINLINT_CACHE_KEY": "k1"}
    done = subprocess.run([sys.executable, "-c", EDITOR, *names], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [(name, line, code) for name, line, code in json.loads(done.stdout)]


def _computed(root: Path, log: Path) -> list[tuple[str, str]]:
    """(module, content hash) for each summary computed."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [(os.path.realpath(root / line.split("\t")[0]), line.split("\t")[1]) for line in lines]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_each_module_content_is_summarised_at_most_once(tmp_path: Path, jobs: str) -> None:
    root = _project(tmp_path)
    log = tmp_path / "summaries.log"
    _check(root, ".", "-j", jobs, log=log)
    computed = _computed(root, log)
    repeated = {k: n for k, n in Counter(computed).items() if n > 1}
    assert not repeated, repeated
    # every helper with training code that a file imports, at any depth, was summarised
    names = {Path(path).name for path, _ in computed}
    assert set(CHAIN) | set(DIAMOND) | set(CYCLE) | {"ops.py", "util.py"} <= names, names


def test_a_project_reached_through_a_link_is_summarised_once_per_module(tmp_path: Path) -> None:
    # a checkout under a linked folder (`/home` a link to `/data/home`): the files named through the
    # link and the modules their imports resolve to are one module each, summarised once
    root = _project(tmp_path)
    link = tmp_path / "linked"
    link.symlink_to(root, target_is_directory=True)
    log = tmp_path / "summaries.log"
    through_link = _check(root, str(link), "-j", "1", log=log)  # (named through the link, not from the folder)
    computed = _computed(root, log)
    repeated = {k: n for k, n in Counter(computed).items() if n > 1}
    assert not repeated, repeated
    assert through_link and [(p.replace(link.as_posix(), root.as_posix()), *rest) for p, *rest in through_link] == _check(root, str(root), "-j", "1")


def test_the_same_findings_whichever_file_a_run_starts_from(tmp_path: Path) -> None:
    root = _project(tmp_path)
    whole = _check(root, ".", "-j", "1")
    assert whole == _check(root, ".", "-j", "2")
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    one_by_one = sorted(f for name in files for f in _check(root, name))
    assert whole == one_by_one
    # the cycle, entered from either side: what each side's findings are does not depend on it
    assert _check(root, "ping.py", "pong.py") == _check(root, "pong.py", "ping.py") == sorted(
        f for f in whole if f[0] in CYCLE)
    # the editor, one file after another in either order, and each side of the cycle first
    assert _editor(root, tmp_path, files) == whole
    assert _editor(root, tmp_path, files[::-1]) == whole
    # the step loops' helpers are analysed across modules: the chain's `.item()` and the cycle's sync
    assert any(f[2].startswith("TL4") for f in whole), whole


def test_imports_inside_functions_are_no_edges_of_the_import_graph() -> None:
    # a module imported inside a function runs when the function is called, not on import (the usual
    # way to break a cycle: an experiment's `get_trainer` importing the trainer that imports it), so it
    # makes no import cycle; a class body runs on import, and its imports are edges
    from trainlint.project.components import imported_modules

    source = "import a\nfrom .b import c\nclass K:\n    import d\ndef get_trainer():\n    from e import f\n    import g\n"
    named = {module for alternatives in imported_modules(source) for module, _ in alternatives}
    assert {"a", "b.c", "b", "d"} <= named
    assert not named & {"e", "e.f", "g"}
