"""The pool's units of work: a worker keeps to one project while it has files, another worker starts
another project, and a worker that holds what it read of a project is replaced rather than moved on
to another."""

from __future__ import annotations

import os
from pathlib import Path

from trainlint.config import Settings
from trainlint.engine import scheduling, workers
from trainlint.engine.lint import lint_paths
from trainlint.engine.results import FileResult


def _tasks(*paths: str) -> list[tuple[int, str, Settings, None]]:
    return [(i, p, Settings(), None) for i, p in enumerate(paths)]


def test_units_are_projects(tmp_path: Path) -> None:
    marked = tmp_path / "runs" / "marked"
    (marked / "pkg").mkdir(parents=True)
    (marked / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    plain = tmp_path / "runs" / "plain" / "sub"
    plain.mkdir(parents=True)
    folders = [str(marked), str(marked / "pkg"), str(plain), str(plain.parent)]
    units = scheduling.project_units(folders)
    assert units[str(marked)] == units[str(marked / "pkg")] == str(marked)
    # no marker: one unit for all such folders (the folders of one project are not told apart)
    assert units[str(plain)] == units[str(plain.parent)] == ""


def test_a_worker_keeps_to_its_unit_and_another_starts_a_unit_nobody_has() -> None:
    tasks = _tasks("a/x/1.py", "a/y/2.py", "a/z/3.py", "b/x/4.py", "b/y/5.py")
    units = {"a/x": "a", "a/y": "a", "a/z": "a", "b/x": "b", "b/y": "b"}
    queue = scheduling.FolderQueue(tasks, units)
    first = queue.take(None)
    assert first[1] == "a/x/1.py"
    second = queue.take(None, {"a"})  # another worker is in unit a
    assert second[1] == "b/x/4.py"
    # the first worker's folder is done: it goes on in its own unit, not to b's next folder
    assert queue.take("a/x", {"b"})[1] == "a/y/2.py"
    assert queue.take("b/x", {"a"})[1] == "b/y/5.py"
    # the second worker's unit is done: it helps with what is left of a
    assert queue.take("b/y", {"a"})[1] == "a/z/3.py"
    assert len(queue) == 0


def test_without_units_each_folder_is_its_own() -> None:
    queue = scheduling.FolderQueue(_tasks("a/1.py", "b/2.py", "a/3.py"))
    assert [queue.take(None)[1], queue.take("a")[1], queue.take("a")[1]] == ["a/1.py", "a/3.py", "b/2.py"]


def _lint(path: str, settings: Settings, data: bytes | None) -> FileResult:
    return FileResult(path)


def _pid_lint(path: str, settings: Settings, data: bytes | None) -> FileResult:
    return FileResult(f"{path}|{os.getpid()}")  # (which worker analysed the file)


def _workers_by_file(tmp_path: Path, jobs: int) -> dict[str, str]:
    files = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "pyproject.toml").write_text("[project]\nname = 'p'\n")
        files += [str(tmp_path / name / f"{i}.py") for i in (1, 2)]
    tasks = [(f, Settings(), None) for f in files]
    replies = [r.path.split("|") for _, r in workers.run(tasks, jobs, _pid_lint, lambda s: 10.0, lambda s: 1024)]
    return {Path(path).relative_to(tmp_path).as_posix(): pid for path, pid in replies}


def test_a_worker_that_holds_a_project_is_replaced_rather_than_given_another(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(workers, "PROJECT_GROWTH_MB", float("-inf"))  # (any size counts as grown, even a shrunk one)
    pid = _workers_by_file(tmp_path, 1)
    assert pid["a/1.py"] == pid["a/2.py"] and pid["b/1.py"] == pid["b/2.py"]  # (a project's files: one worker)
    assert pid["a/1.py"] != pid["b/1.py"]
    monkeypatch.setattr(workers, "PROJECT_GROWTH_MB", 1e9)  # a worker that has not grown goes on to the next project
    assert len(set(_workers_by_file(tmp_path, 1).values())) == 1


def test_replacing_workers_changes_no_finding(tmp_path: Path, monkeypatch) -> None:
    """Three projects linted in one run by two workers, each replaced as it leaves a project: the
    findings that a module's summary gives its importer are found all the same."""
    for name in ("one", "two", "three"):
        project = tmp_path / name
        (project / "pkg").mkdir(parents=True)
        (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
        (project / "pkg" / "__init__.py").write_text("")
        (project / "pkg" / "helpers.py").write_text("def log_loss(loss):\n    print(loss.item())\n")
        (project / "train.py").write_text(
            "import torch\nfrom pkg.helpers import log_loss\n\n"
            "def train(model, loader, opt):\n"
            "    for x, y in loader:\n"
            "        loss = model(x.cuda()).sum()\n"
            "        loss.backward()\n"
            "        opt.step()\n"
            "        opt.zero_grad()\n"
            "        log_loss(loss)\n"
        )
    monkeypatch.setattr(workers, "PROJECT_GROWTH_MB", float("-inf"))
    files = sorted(tmp_path.rglob("*.py"))
    results = lint_paths([(f, Settings()) for f in files], jobs=2)
    # (the helper reads the tensor its caller passes: reported at each project's call, which only
    # the helper's summary can tell)
    found = sorted((Path(r.path).relative_to(tmp_path).as_posix(), d.code, d.line) for r in results for d in r.diagnostics)
    assert found == [(f"{name}/train.py", "TL401", 10) for name in ("one", "three", "two")]
