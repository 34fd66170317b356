"""Shared test helpers: lint a snippet with a chosen rule set."""

from __future__ import annotations

import textwrap
from pathlib import Path

from trainlint.config import Settings
from trainlint.diagnostics import Diagnostic
from trainlint.engine.lint import lint_paths, lint_source


def lint(code: str, select: str | None = None, name: str = "train.py", **settings: object) -> list[Diagnostic]:
    """Diagnostics for a dedented snippet, with `select` (a code or prefix) or the default rules;
    rules in preview run when selected."""
    settings.setdefault("preview", bool(select))
    s = Settings(select=(select,) if select else None, **settings)  # type: ignore[arg-type]
    result = lint_source(textwrap.dedent(code), name, s)
    assert not result.internal_error, result.diagnostics
    return result.diagnostics


def codes(code: str, select: str | None = None, **settings: object) -> list[str]:
    return [d.code for d in lint(code, select, **settings)]


def lines(code: str, rule: str) -> list[int]:
    """Lines (1-based, of the dedented snippet) where `rule` fires."""
    return [d.line for d in lint(code, rule)]


def lint_project(tmp_path: Path, files: dict[str, str], select: str, preview: bool = False) -> list[str]:
    """"name:line:code" of each finding when a project of dedented `files` (and a `pyproject.toml`
    marking its root) is linted whole with `select` (codes or prefixes, comma-separated)."""
    (tmp_path / "pyproject.toml").write_text("")
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    settings = Settings(select=tuple(select.split(",")), root=tmp_path, preview=preview)
    results = lint_paths([(tmp_path / n, settings) for n in files], jobs=1)
    return sorted(f"{Path(d.path).name}:{d.line}:{d.code}" for r in results for d in r.diagnostics)


def process_alive(pid: int) -> bool:
    """Whether process `pid` is running (a zombie waiting for its parent counts as ended); reads /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def messages(report: dict) -> list[str]:
    """The sentences of a `verify run --format json` report's problems (each also has a code, a page...)."""
    return [p["message"] for p in report["problems"]]


def verify_run_json(script: Path, *args: str, cwd: Path | None = None) -> "tuple[int, dict]":
    """`trainlint verify run SCRIPT --device cpu --format json ARGS...`: its exit code and report."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "verify", "run", str(script), "--device", "cpu", "--format", "json", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd,
    )
    assert done.stdout, done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)
