"""Imports found the way the interpreter finds them for the file being run, and the project (the
modules read as callers) found without a `.git`, `pyproject.toml`, `setup.py` or `setup.cfg`: a
downloaded archive, a sub-folder linted alone, a notebook folder. A helper of a sub-folder called
every step from a script keeps its chain; a near miss of each shape stays silent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from trainlint.project.path_edits import path_edits
from trainlint.project.roots import project as project_of, roots

ROOT = Path(__file__).resolve().parent.parent

# (a value the helper computes: its read is the helper's own, reported there with the chain)
HELPER = """
    import torch


    def weigh(loss):
        return (loss * 2).item()
"""


def script(imports: str, call: str = "print(weigh(loss))", head: str = "") -> str:
    """A training script that calls `weigh` every step (once after the loop when `call` starts "AFTER:")."""
    after = call.startswith("AFTER:")
    lines = [
        f"{head}import torch", imports, "", "", "def fit(model, loader, opt):", "    for x in loader:",
        "        loss = model(x.cuda())", "        loss.backward()", "        opt.step()", "        opt.zero_grad()",
        f"        {'pass' if after else call}",
    ]
    return "\n".join([*lines, *([f"    {call[6:]}"] if after else [])]) + "\n"


def write(folder: Path, files: dict[str, str]) -> Path:
    """The files, under `folder`, with no project marker anywhere (pytest's tmp_path has none above)."""
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return folder


def trainlint(cwd: Path, *args: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    if cache is not None:
        env["TRAINLINT_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "trainlint", *args], cwd=cwd, capture_output=True, text=True, env=env)


def tl401(cwd: Path, target: str, *args: str) -> list[tuple[str, int, list[str]]]:
    """The TL401 findings of the real command on `target`, each with its chain's locations."""
    done = trainlint(cwd, target, "--select", "TL401", "--output-format", "json", *(args or ("--no-cache",)))
    assert done.returncode in (0, 1), done.stderr
    return [
        (Path(d["path"]).name, d["line"], [f"{Path(loc['path']).name}:{loc['line']}" for r in d.get("related", []) for loc in r["locations"]])
        for d in json.loads(done.stdout)
    ]


def test_a_sub_package_helper_of_a_project_without_a_marker_keeps_its_chain(tmp_path: Path) -> None:
    # a downloaded archive: no .git; `models/` is a package of the folder above it
    project = write(tmp_path / "proj", {"models/__init__.py": "", "models/criterion.py": HELPER, "train.py": script("from models.criterion import weigh")})
    expected = [("criterion.py", 6, ["train.py:11"])]
    assert tl401(project, "models/criterion.py") == expected
    assert tl401(project / "models", "criterion.py") == expected  # linted from its own folder
    assert [f for f in tl401(project, ".") if f[0] == "criterion.py"] == expected
    assert roots(project / "models/criterion.py").root == project


def test_a_setup_py_inside_a_package_does_not_cut_it_off_from_the_scripts_above(tmp_path: Path) -> None:
    # Faster R-CNN's `faster_rcnn/setup.py` builds the package's C extension; EfficientViT has a module
    # `efficientvit/apps/setup.py`: either stands beside an `__init__.py`, and the package's callers
    # are the scripts above it, in the project of the `.git` around
    (tmp_path / "proj/.git").mkdir(parents=True)
    project = write(tmp_path / "proj", {
        "detector/__init__.py": "", "detector/setup.py": "from setuptools import setup\n", "detector/criterion.py": HELPER,
        "train.py": script("from detector.criterion import weigh"),
    })
    assert tl401(project, "detector/criterion.py") == [("criterion.py", 6, ["train.py:11"])]
    assert roots(project / "detector/criterion.py").root == project
    done = trainlint(project, "--show-imports", "detector/criterion.py")
    assert done.stdout.splitlines()[1] == f"project root = .  # the marker {project / '.git'}"


def test_a_setup_py_of_a_folder_that_is_no_package_keeps_it_a_project_of_its_own(tmp_path: Path) -> None:
    # near miss: `tools/` (no __init__.py) is a distribution of its own inside the repository; a script
    # above importing a namesake module by another route is no caller of it
    (tmp_path / "proj/.git").mkdir(parents=True)
    project = write(tmp_path / "proj", {"tools/setup.py": "from setuptools import setup\n", "tools/criterion.py": HELPER})
    assert roots(project / "tools/criterion.py").root == project / "tools"


def test_a_sub_package_helper_called_only_after_the_loop_stays_silent(tmp_path: Path) -> None:
    project = write(tmp_path / "proj", {
        "models/__init__.py": "", "models/criterion.py": HELPER, "train.py": script("from models.criterion import weigh", "AFTER:print(weigh(loss))"),
    })
    assert tl401(project, "models/criterion.py") == []


def test_a_helper_in_a_folder_without_init_imported_by_its_path_keeps_its_chain(tmp_path: Path) -> None:
    # MAE's `util/misc.py` (no __init__.py, no local import of its own) and `main.py` beside `util/`
    project = write(tmp_path / "proj", {"util/misc.py": HELPER, "main.py": script("from util.misc import weigh")})
    assert tl401(project, "util/misc.py") == [("misc.py", 6, ["main.py:11"])]
    root, why, _ = project_of(project / "util/misc.py")
    assert root == project and "main.py" in why


def test_a_script_importing_a_namesake_of_the_helper_is_no_caller_of_it(tmp_path: Path) -> None:
    # near miss: `main.py` imports `util.other`, never `util.misc`; the folder stays the project
    project = write(tmp_path / "proj", {
        "util/misc.py": HELPER, "util/other.py": "def weigh(loss):\n    return loss\n", "main.py": script("from util.other import weigh"),
    })
    assert tl401(project, "util/misc.py") == []
    assert project_of(project / "util/misc.py")[0] == project / "util"


def test_a_folder_without_init_inside_a_package_is_part_of_it(tmp_path: Path) -> None:
    # LLaMA-Factory's `plugins/model_plugins/parallelization/` (no __init__.py) under a package,
    # imported relatively from the package's trainer
    project = write(tmp_path / "proj", {
        "pkg/__init__.py": "", "pkg/core/__init__.py": "", "pkg/plugins/__init__.py": "", "pkg/plugins/parallel/split.py": HELPER,
        "pkg/core/trainer.py": script("from ..plugins.parallel.split import weigh"),
    })
    assert tl401(project, "pkg/plugins/parallel/split.py") == [("split.py", 6, ["trainer.py:11"])]
    assert roots(project / "pkg/plugins/parallel/split.py").root == project


SYS_PATH = "import os\nimport sys\n\nsys.path.insert(0, os.path.dirname(__file__) + '/..')\n"


def test_a_script_that_puts_the_folder_above_on_sys_path_calls_its_helpers(tmp_path: Path) -> None:
    project = write(tmp_path / "proj", {"helpers/losses.py": HELPER, "scripts/train.py": script("from helpers.losses import weigh", head=SYS_PATH)})
    assert tl401(project, "helpers/losses.py") == [("losses.py", 6, ["train.py:15"])]
    edits = roots(project / "scripts/train.py")
    assert edits.inserted == (project,) and edits.search(project / "scripts")[0] == project


def test_a_helper_shadowed_beside_the_script_is_not_the_one_it_calls(tmp_path: Path) -> None:
    # near miss: the script's own folder comes first on sys.path; its `helpers/losses.py` is the one
    # imported, not the top-level helper
    project = write(tmp_path / "proj", {
        "helpers/losses.py": HELPER,
        "scripts/helpers/losses.py": "def weigh(loss):\n    return loss\n",
        "scripts/train.py": script("from helpers.losses import weigh"),
    })
    assert tl401(project, "helpers/losses.py") == []


def test_a_src_layout_package_is_found_from_the_scripts_beside_src(tmp_path: Path) -> None:
    files = {"src/mypkg/__init__.py": "", "src/mypkg/losses.py": HELPER, "scripts/train.py": script("from mypkg.losses import weigh")}
    project = write(tmp_path / "proj", files)
    assert tl401(project, "src/mypkg/losses.py") == [("losses.py", 6, ["train.py:11"])]
    assert roots(project / "src/mypkg/losses.py").root == project  # the folder above src/
    (project / "pyproject.toml").write_text("")  # with a marker too: the script resolves it under src/
    assert tl401(project, "src/mypkg/losses.py") == [("losses.py", 6, ["train.py:11"])]


def test_a_src_layout_package_used_outside_the_step_stays_silent(tmp_path: Path) -> None:
    files = {"src/mypkg/__init__.py": "", "src/mypkg/losses.py": HELPER, "scripts/train.py": script("from mypkg.losses import weigh", "AFTER:print(weigh(loss))")}
    project = write(tmp_path / "proj", {**files, "pyproject.toml": ""})
    assert tl401(project, "src/mypkg/losses.py") == []


def test_sys_path_edits_are_read_from_file_relative_expressions(tmp_path: Path) -> None:
    file = tmp_path / "a" / "b" / "train.py"
    text = textwrap.dedent("""
        import os, sys
        from pathlib import Path

        FILE = Path(__file__).resolve()
        ROOT = FILE.parents[1]
        sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
        sys.path.append(str(ROOT / "lib"))
        sys.path.extend([f"{os.path.dirname(__file__)}/vendor"])
        sys.path.append(some_function())  # not worked out: left out
    """)
    inserted, appended = path_edits(file, text)
    assert inserted == (tmp_path,)
    assert appended == (tmp_path / "a" / "lib", tmp_path / "a" / "b" / "vendor")


INIT_PATHS = """
    import os.path as osp
    import sys


    def add_path(path):
        if path not in sys.path:
            sys.path.insert(0, path)


    this_dir = osp.dirname(__file__)
    add_path(osp.join(this_dir, "lib"))
"""


def test_a_module_imported_for_its_sys_path_edits_makes_them_for_the_script(tmp_path: Path) -> None:
    # faster-rcnn.pytorch (a clone, with its marker): `import _init_paths` runs its `add_path(...)`,
    # which puts lib/ first, so `from model.losses import weigh` is lib/model/losses.py
    files = {"_init_paths.py": INIT_PATHS, "lib/model/__init__.py": "", "lib/model/losses.py": HELPER, "pyproject.toml": ""}
    project = write(tmp_path / "proj", {**files, "train.py": script("from model.losses import weigh", head="import _init_paths\n")})
    assert tl401(project, "lib/model/losses.py") == [("losses.py", 6, ["train.py:12"])]
    assert roots(project / "train.py").inserted == (project / "lib",)


def test_a_script_that_does_not_import_the_path_module_finds_nothing_there(tmp_path: Path) -> None:
    # near misses: the script never imports `_init_paths`; a helper given what is not a path
    files = {"_init_paths.py": INIT_PATHS, "lib/model/__init__.py": "", "lib/model/losses.py": HELPER, "pyproject.toml": ""}
    project = write(tmp_path / "proj", {**files, "train.py": script("from model.losses import weigh")})
    assert tl401(project, "lib/model/losses.py") == []
    assert roots(project / "train.py").inserted == ()
    text = INIT_PATHS.replace('add_path(osp.join(this_dir, "lib"))', "add_path(find_lib())")
    assert path_edits(tmp_path / "_init_paths.py", textwrap.dedent(text)) == ((), ())


def test_show_imports_says_where_each_local_import_resolved(tmp_path: Path) -> None:
    project = write(tmp_path / "proj", {"helpers/losses.py": HELPER, "scripts/train.py": script("from helpers.losses import weigh", head=SYS_PATH)})
    done = trainlint(project, "--show-imports", "scripts/train.py")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "file = scripts/train.py"
    assert lines[1].startswith("project root = .  # the folder its sys.path edit names")
    assert "1: import os -> not local" in lines
    assert "6: from helpers.losses import weigh -> helpers/losses.py" in lines
    assert trainlint(project, "--show-imports", "scripts").returncode == 2


def test_a_cached_helper_result_is_redone_when_a_script_above_starts_importing_it(tmp_path: Path) -> None:
    project = write(tmp_path / "proj", {"util/misc.py": HELPER})  # (main.py comes later: the folder's listing says so)
    cache = tmp_path / "cache"

    def cached() -> list[tuple[str, int]]:
        done = trainlint(project, "util/misc.py", "--select", "TL401", "--output-format", "json", cache=cache)
        return [(d["path"], d["line"]) for d in json.loads(done.stdout)]

    assert cached() == []
    write(project, {"main.py": script("from util.misc import weigh")})
    assert cached() == [("util/misc.py", 6)]
    os.remove(project / "main.py")  # gone again: the folder's listing changed
    assert cached() == []


def test_folders_appearing_beside_a_project_without_a_marker_keep_its_cached_results(tmp_path: Path) -> None:
    """A script alone in a folder of projects (a downloads folder, /tmp): a job's output or cache
    folder made beside it is no module, and the script's cached result still holds."""
    alone = write(tmp_path / "alone", {"train.py": script("import torch")})
    cache = tmp_path / "cache"
    first = trainlint(alone, "train.py", "--format", "json", cache=cache)
    (tmp_path / "outputs").mkdir()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TRAINLINT_CACHE_DIR": str(cache)}
    again = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainlint", "train.py", "--format", "json"],
                           cwd=alone, capture_output=True, text=True, env=env)
    assert again.stdout == first.stdout
    assert "| libcst\n" not in again.stderr  # read from the cache: nothing was parsed


def test_an_installed_package_is_a_project_of_its_own(tmp_path: Path) -> None:
    """A package in site-packages, linted in place: its callers are its own modules, not the other
    distributions beside it (thousands of modules), nor the project whose virtual environment holds
    it; another distribution's modules are libraries to its absolute imports."""
    (tmp_path / ".git").mkdir()  # the user's project, around its virtual environment
    site = tmp_path / "venv/lib/python3.11/site-packages"
    write(site, {
        "mypkg/__init__.py": "", "mypkg/losses.py": HELPER, "mypkg/train.py": script("from mypkg.losses import weigh"),
        "otherdist/__init__.py": "", "otherdist/fit.py": script("from mypkg.losses import weigh"),
        "otherdist/helpers.py": HELPER,
        "mypkg/uses_other.py": "from otherdist.helpers import weigh\nfrom . import losses\n",
    })
    found = roots(site / "mypkg/losses.py")
    assert (found.root, found.marked) == (site / "mypkg", False)
    assert tl401(site / "mypkg", "losses.py") == [("losses.py", 6, ["train.py:11"])]
    done = trainlint(site / "mypkg", "--show-imports", "uses_other.py")
    assert "1: from otherdist.helpers import weigh -> not local" in done.stdout.splitlines(), done.stdout
    assert "2: from . import losses -> losses.py" in done.stdout.splitlines(), done.stdout


def test_a_module_importing_a_namesake_is_no_importer_of_it(tmp_path: Path) -> None:
    """The project's import index finds candidates by the words their imports name; a candidate
    whose imports find another module of that name (the interpreter's way) imports not this one."""
    from trainlint.project.index import Project

    project = write(tmp_path / "proj", {
        "pkg/__init__.py": "", "pkg/a/__init__.py": "", "pkg/a/helpers.py": HELPER, "pkg/b/__init__.py": "", "pkg/b/helpers.py": HELPER,
        "train_a.py": script("from pkg.a.helpers import weigh"), "train_b.py": script("from pkg.b.helpers import weigh"),
        "train_ab.py": script("from pkg.a import (\n    helpers,\n)\nfrom pkg.b.helpers import weigh"),
    })
    importers = Project().importers((project / "pkg/a/helpers.py").resolve())
    assert sorted(p.name for p in importers) == ["train_a.py", "train_ab.py"]


def test_the_outline_walk_visits_what_ast_walk_does_in_its_order_without_contexts_and_operators():
    """The readers of a module's outline walk Python's tree with `python_trees.walk`, which leaves out
    the nodes none of them looks for (`Load`, `Add`, `Eq`): every other node, in `ast.walk`'s order."""
    import ast

    from trainlint.project.python_trees import children, walk

    source = (
        "import torch as t, os.path\nfrom .a import (b as c)\n"
        "@dec(1)\nclass M(t.nn.Module, metaclass=Meta):\n    x: int = 1\n"
        "    def forward(self, x, *a, k=2, **kw):\n        y = -x + 1 if not x and k else [i for i in a if i > 0]\n"
        "        del kw['z']\n        with t.no_grad() as g, open(f'{x!r:>3}'):\n            return (lambda q: q ** 2)(y)\n"
        "try:\n    pass\nexcept (ValueError, KeyError) as e:\n    raise\nfinally:\n    print(*[1], **{'a': 2})\n"
        "match p:\n    case [1, *rest] | {'k': 2} if rest:\n        global g\n"
        "async def f():\n    async for i in s:\n        await i\n    async with m: yield\n"
    )
    tree = ast.parse(source)
    skipped = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
    expected = [n for n in ast.walk(tree) if not isinstance(n, skipped)]
    walked = list(walk(tree))
    assert len(walked) == len(expected) and all(a is b for a, b in zip(walked, expected))
    for node in expected:
        assert children(node) == [c for c in ast.iter_child_nodes(node) if not isinstance(c, skipped)]


BY_NAME = """
    import argparse
    import importlib
    import os
    import sys

    import torch

    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))


    def fit(model, loader, opt, args):
        losses = importlib.import_module(args.loss)
        for x in loader:
            loss = model(x.cuda())
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(losses.weigh(loss))


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--loss", type=str, default="weighing")
        options = parser.parse_args()
"""


def test_a_module_a_script_imports_by_the_name_its_option_defaults_to_is_called_every_step(tmp_path: Path) -> None:
    # PointNet++'s scripts: `model = importlib.import_module(args.model)` with `--model` defaulting to
    # a module of the folder they put on `sys.path` (in a project with a marker); the option is declared
    # below the function
    quiet = "def weigh(loss):\n    return loss\n"
    project = write(tmp_path / "proj", {"models/weighing.py": HELPER, "models/other.py": HELPER, "train.py": BY_NAME, "pyproject.toml": ""})
    assert tl401(project, ".") == [("weighing.py", 6, ["train.py:19"])]
    shown = trainlint(project, "train.py", "--show-imports").stdout.splitlines()
    assert shown[-1] == "importlib.import_module: weighing -> models/weighing.py", shown
    # without a marker: the script that puts `models` on `sys.path` and imports its module makes the
    # project; one putting another folder there imports no module of `models`
    project = write(tmp_path / "bare", {"models/weighing.py": HELPER, "train.py": BY_NAME})
    assert tl401(project, ".") == [("weighing.py", 6, ["train.py:19"])]
    shown = trainlint(project, "models/weighing.py", "--show-imports").stdout.splitlines()
    assert shown[1] == "project root = .  # the folder of train.py, which puts models on sys.path and imports it as weighing", shown
    project = write(tmp_path / "other", {"models/weighing.py": HELPER, "train.py": BY_NAME.replace('"models"))', '"lib"))')})
    assert tl401(project, ".") == []
    # a string written in the call names the module too
    literal = BY_NAME.replace("importlib.import_module(args.loss)", 'importlib.import_module("other")')
    project = write(tmp_path / "literal", {"models/weighing.py": quiet, "models/other.py": HELPER, "train.py": literal, "pyproject.toml": ""})
    assert tl401(project, ".") == [("other.py", 6, ["train.py:19"])]
    # near misses: an option without a default names nothing; a name bound to the module in one
    # function is another variable in the next
    unset = BY_NAME.replace(', default="weighing"', "")
    project = write(tmp_path / "unset", {"models/weighing.py": HELPER, "train.py": unset, "pyproject.toml": ""})
    assert tl401(project, ".") == []
    elsewhere = BY_NAME.replace("            print(losses.weigh(loss))", "            report(losses, loss)") + (
        "\n\n    def report(losses, loss):\n        print(losses.weigh(loss))\n")
    project = write(tmp_path / "elsewhere", {"models/weighing.py": HELPER, "train.py": elsewhere, "pyproject.toml": ""})
    assert tl401(project, ".") == []


def test_the_module_an_option_names_is_read_from_text_as_from_the_tree() -> None:
    from trainlint.model.modules_by_name import modules_named

    text = "import importlib\nm = importlib.import_module(opt.net_name)\np.add_argument('--net-name', type=str, default='unet')\n"
    assert modules_named(text) == ["unet"]
    assert modules_named(text.replace("default='unet'", "default=None")) == []
    assert modules_named("x = importlib.import_module('models.' + name)\n") == []  # (built at run time: not known)
    assert modules_named("x = import_module('loss.vgg')\n") == ["loss.vgg"]


def test_a_module_bound_by_name_at_module_level_leaves_a_parameter_of_that_name_alone() -> None:
    import libcst

    from trainlint.model import TrainingModel

    source = textwrap.dedent("""
        import argparse
        import importlib

        parser = argparse.ArgumentParser()
        parser.add_argument("--net", default="nets")
        model = importlib.import_module("nets")
        net = model.build()


        def train(model, x):
            return model.forward(x)
    """)
    calls = {c.node.func.attr.value: c.qualname for c in TrainingModel.build(libcst.parse_module(source)).calls if isinstance(c.node.func, libcst.Attribute)}
    assert calls["build"] == "nets.build" and calls["forward"] is None, calls


def test_a_package_importing_itself_by_name_is_not_its_namesake_module(tmp_path: Path) -> None:
    # DALLE2-pytorch: `dalle2_pytorch/__init__.py` re-exports `from dalle2_pytorch.trainer import ...`
    # beside a module `dalle2_pytorch/dalle2_pytorch.py`: the import names the package, found from the
    # folder above it (the folder of a package's own modules is not on `sys.path` when it is imported)
    files = {
        "lib/__init__.py": "from lib.helpers import weigh\nfrom lib.lib import Net\n",
        "lib/lib.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n",
        "lib/helpers.py": HELPER,
        "train.py": script("from lib import weigh"),
    }
    project = write(tmp_path / "proj", files)
    assert tl401(project, "train.py") == []
    assert tl401(project, "lib/helpers.py") == [("helpers.py", 6, ["train.py:11"])]


def test_a_class_a_package_re_exports_under_its_module_s_name_is_the_class(tmp_path: Path) -> None:
    # ClovaCall: `models/__init__.py` says `from .Seq2Seq import Seq2Seq`, so `models.Seq2Seq` is the
    # class (the import rebinds the package's attribute), and `models.Seq2Seq.forward` its method, not
    # a function `forward` of the module `models/Seq2Seq.py`
    criterion = """
        import torch


        class Criterion(torch.nn.Module):
            def forward(self, loss):
                return (loss * 2).item()
    """
    files = {
        "models/__init__.py": "from .Criterion import Criterion\n",
        "models/Criterion.py": criterion,
        "train.py": script("from models import Criterion\n\ncrit = Criterion()", call="print(crit(loss))"),
    }
    project = write(tmp_path / "proj", files)
    assert tl401(project, "models/Criterion.py") == [("Criterion.py", 7, ["train.py:13"])]
    # a module that defines what is asked of it keeps it: `models.Criterion.weigh` is the module's own
    files["models/Criterion.py"] = textwrap.dedent(criterion) + "\n\ndef weigh(loss):\n    return (loss * 2).item()\n"
    files["train.py"] = script("import models.Criterion", call="print(models.Criterion.weigh(loss))")
    project = write(tmp_path / "other", files)
    assert tl401(project, "models/Criterion.py") == [("Criterion.py", 11, ["train.py:11"])]


def test_roots_asked_again_after_forget_are_read_again_only_where_a_file_changed(tmp_path: Path, monkeypatch) -> None:
    """The language server forgets what it found before each keystroke's lint: a script's roots are
    kept while every file they were read from is as it was, and found again once its `sys.path`
    edit changes."""
    from trainlint.project import roots as roots_module

    (tmp_path / "lib").mkdir()
    (tmp_path / "tools").mkdir()
    train = tmp_path / "tools" / "train.py"
    train.write_text('import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))\nimport helper\n')
    found = roots(train)
    assert [p.resolve() for p in found.inserted] == [(tmp_path / "lib").resolve()]
    parsed: list[Path] = []
    original = roots_module.path_edits
    monkeypatch.setattr(roots_module, "path_edits", lambda path, text: parsed.append(path) or original(path, text))
    roots_module.forget()
    assert roots(train) is found and not parsed  # nothing changed: the same answer, no file parsed again
    train.write_text('import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))\nimport helper\n')
    roots_module.forget()
    again = roots(train)
    assert parsed == [train] and [p.resolve() for p in again.inserted] == [(tmp_path / "tools").resolve()]
