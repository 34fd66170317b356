"""The distribution users install: the wheel holds the whole package and its command, and works alone.

CI builds the wheel and sdist with `python -m build` and checks them with `twine check` (`.ci/run`),
then points TRAINLINT_WHEEL at the wheel; elsewhere the test builds one with pip, offline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("TRAINLINT_WHEEL")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    if built.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {built.stderr[-500:]}")
    return next(out.glob("trainlint-*.whl"))


def test_the_wheel_holds_every_module_and_the_command(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "trainlint").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert not any(n.startswith(("tests/", "benchmarks/", "examples/")) for n in names)
    info = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(info).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    # torch only with the verifier's extra: the linter never needs it
    assert all("extra ==" in line for line in requires if line.split()[1].startswith("torch"))
    assert any("pygls" in line and 'extra == "lsp"' in line for line in requires)
    entry_points = zipfile.ZipFile(wheel).read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "trainlint = trainlint.__main__:main" in entry_points


def test_the_installed_wheel_lints_the_examples(wheel: Path, tmp_path: Path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True, timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target), "TRAINLINT_CACHE_DIR": str(tmp_path / "cache")}
    where = subprocess.run(
        [sys.executable, "-c", "import trainlint; print(trainlint.__file__)"], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=True,
    )
    assert where.stdout.startswith(str(target)), where.stdout  # the wheel's copy, not the checkout
    run = subprocess.run(
        [sys.executable, "-m", "trainlint", "check", "--output-format", "concise", str(ROOT / "examples")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 1, run.stderr
    assert "TL101" in run.stdout and "TL401" in run.stdout
    page = subprocess.run([sys.executable, "-m", "trainlint", "rule", "TL401"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert page.returncode == 0 and "host-sync-in-step" in page.stdout
