"""The methods of libcst's and trainlint's dataclasses are compiled once and then read back, only from
files nobody else can write (`trainlint/dataclass_methods.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trainlint import dataclass_methods

ROOT = Path(__file__).resolve().parent.parent

# imports the command line and the analysis in a fresh process with the kept code in the folder
# argv[1], and prints how many methods it compiled
_PROBE = """
import os, sys
from trainlint import dataclass_methods as L
sys.dont_write_bytecode = False
compiled = []
def counting(*args):
    compiled.append(args[0])
    return compile(*args)
L._store_path = lambda family: os.path.join(sys.argv[1], family + ".marshal")
L.compile = counting
import trainlint.cli
from trainlint.engine.lint import _preload
_preload()
import libcst
assert libcst.parse_module("x = 1\\n").code == "x = 1\\n"
print(len(compiled))
"""


def _compiled(folder: Path, probe: str = _PROBE) -> int:
    done = subprocess.run([sys.executable, "-c", probe, str(folder)], capture_output=True, text=True, cwd=ROOT, check=True)
    return int(done.stdout)


def _store(folder: Path, family: str) -> str:
    return str(folder / f"{family}.marshal")


def test_the_second_run_compiles_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "kept"
    os.makedirs(folder, mode=0o755)
    assert _compiled(folder) > 130  # every node class's methods and trainlint's own, the first time
    libcst_kept, trainlint_kept = dataclass_methods._load(_store(folder, "libcst")), dataclass_methods._load(_store(folder, "trainlint"))
    assert len(libcst_kept) > 100 and len(trainlint_kept) > 30
    assert not set(libcst_kept) & set(trainlint_kept)
    assert _compiled(folder) == 0


def test_only_trainlint_s_and_libcst_s_classes_are_written(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    probe = _PROBE.replace(
        "print(len(compiled))",
        "from dataclasses import dataclass\n"
        "@dataclass\nclass Users:\n    only_in_this_probe: int\n"
        "assert Users(3).only_in_this_probe == 3\n"
        "L.save_dataclass_methods()\nprint(len(compiled))",
    )
    _compiled(tmp_path, probe)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libcst.marshal", "trainlint.marshal"]
    for family in ("libcst", "trainlint"):
        assert not any("only_in_this_probe" in text for text in dataclass_methods._load(_store(tmp_path, family)))


def test_code_others_can_write_is_not_run(tmp_path: Path) -> None:
    store = _store(tmp_path, "libcst")
    os.chmod(tmp_path, 0o755)
    _compiled(tmp_path)
    assert dataclass_methods._load(store)
    os.chmod(store, 0o666)
    assert dataclass_methods._load(store) == {}
    assert _compiled(tmp_path) > 100  # (and the file is replaced by a private one)
    assert dataclass_methods._load(store)
    os.chmod(tmp_path, 0o777)
    assert dataclass_methods._load(store) == {}


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    probe = _PROBE.replace("sys.dont_write_bytecode = False", "sys.dont_write_bytecode = True")
    assert _compiled(tmp_path, probe) > 130 and not any(tmp_path.iterdir())


def test_a_damaged_or_foreign_file_costs_only_the_compile(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    store = Path(_store(tmp_path, "libcst"))
    store.write_bytes(b"not marshal at all")
    os.chmod(store, 0o600)
    assert dataclass_methods._load(str(store)) == {}
    store.write_bytes(dataclass_methods._HEADER + b"\xff\x00garbage")
    assert dataclass_methods._load(str(store)) == {}
    assert _compiled(tmp_path) > 100
    link = tmp_path / "link.marshal"
    link.symlink_to(store)
    assert dataclass_methods._load(str(link)) == {}  # (a link could point anywhere)
