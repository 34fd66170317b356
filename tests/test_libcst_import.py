"""libcst's dataclass methods are compiled once and then read back, only from a file nobody else can
write (`trainlint/libcst_import.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trainlint import libcst_import

ROOT = Path(__file__).resolve().parent.parent

# imports libcst in a fresh process with the kept code at STORE, and prints how many methods it compiled
_PROBE = """
import sys
from trainlint import libcst_import as L
sys.dont_write_bytecode = False
compiled = []
def counting(*args):
    compiled.append(args[0])
    return compile(*args)
L._store_path = lambda: sys.argv[1]
L.compile = counting
L.import_libcst()
import libcst
assert libcst.parse_module("x = 1\\n").code == "x = 1\\n"
print(len(compiled))
"""


def _compiled(store: Path) -> int:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(store)], capture_output=True, text=True, cwd=ROOT, check=True)
    return int(done.stdout)


def test_the_second_import_compiles_nothing(tmp_path: Path) -> None:
    store = tmp_path / "kept" / "libcst.marshal"
    os.makedirs(store.parent, mode=0o755)
    assert _compiled(store) > 100  # every node class's methods, the first time
    assert store.is_file()
    assert _compiled(store) == 0


def test_code_others_can_write_is_not_run(tmp_path: Path) -> None:
    store = tmp_path / "libcst.marshal"
    os.chmod(tmp_path, 0o755)
    _compiled(store)
    assert libcst_import._load(str(store))
    os.chmod(store, 0o666)
    assert libcst_import._load(str(store)) == {}
    assert _compiled(store) > 100  # (and the file is replaced by a private one)
    assert libcst_import._load(str(store))
    os.chmod(tmp_path, 0o777)
    assert libcst_import._load(str(store)) == {}


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path) -> None:
    store = tmp_path / "libcst.marshal"
    os.chmod(tmp_path, 0o755)
    probe = _PROBE.replace("sys.dont_write_bytecode = False", "sys.dont_write_bytecode = True")
    done = subprocess.run([sys.executable, "-c", probe, str(store)], capture_output=True, text=True, cwd=ROOT, check=True)
    assert int(done.stdout) > 100 and not store.exists()


def test_a_damaged_or_foreign_file_costs_only_the_compile(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    store = tmp_path / "libcst.marshal"
    store.write_bytes(b"not marshal at all")
    os.chmod(store, 0o600)
    assert libcst_import._load(str(store)) == {}
    store.write_bytes(libcst_import._HEADER + b"\xff\x00garbage")
    assert libcst_import._load(str(store)) == {}
    assert _compiled(store) > 100
    link = tmp_path / "link.marshal"
    link.symlink_to(store)
    assert libcst_import._load(str(link)) == {}  # (a link could point anywhere)
