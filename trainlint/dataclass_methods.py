"""The methods `dataclasses` writes for libcst's node classes and trainlint's own, compiled once.

For each dataclass, `dataclasses` writes `__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`
and `__delattr__` as source text and compiles it. libcst's nodes are some 230 frozen dataclasses:
measured with cProfile on Python 3.11, that compiling was about 0.2 s of the 0.34 s `import libcst`
takes, and trainlint's own 40-odd dataclasses another 0.03 s, on every run (a one-file run is mostly
start-up). What is compiled depends only on that text and on the interpreter, so the code objects are
kept, by their text, in marshal files beside trainlint's own bytecode (`trainlint/__pycache__/`).
Loading one runs code, as loading a `.pyc` does, so it is read only from a folder and a file that
belong to the user running trainlint and that nobody else can write (the trust Python gives its own
`__pycache__`); never from the user's cache folder, which a CI cache restored from elsewhere can fill.
Anything else about the file, or no file, costs the compile.

The command line keeps the code from its first import on (`keep_dataclass_methods`), so that every
module it imports later reads its classes' methods back; only the classes of trainlint and libcst are
written to the files, one per package, each read only when a class of its package is built.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
from importlib._bootstrap_external import MAGIC_NUMBER  # type: ignore[import-not-found]

_MAX_BYTES = 8 << 20  # (about 0.75 MB for libcst 1.x, 0.2 MB for trainlint; more means something else wrote it)
_HEADER = MAGIC_NUMBER + sys.version.encode() + b"\0"


def _store_path(family: str) -> str:
    return os.path.join(os.path.dirname(__file__), "__pycache__", f"{family}-dataclass-methods.{sys.implementation.cache_tag}.marshal")


def _private(info: os.stat_result) -> bool:
    """Owned by this user (or root, as an installed package is) and writable by nobody else."""
    owner_ok = not hasattr(os, "geteuid") or info.st_uid in (os.geteuid(), 0)
    return owner_ok and not stat.S_IMODE(info.st_mode) & 0o022


def _load(path: str) -> dict[str, object]:
    try:
        if not _private(os.stat(os.path.dirname(path))):
            return {}
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or not _private(info) or info.st_size > _MAX_BYTES:
                return {}
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(_MAX_BYTES + 1)
        finally:
            os.close(fd)
        if not data.startswith(_HEADER):
            return {}
        codes = marshal.loads(data[len(_HEADER):])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    return codes if isinstance(codes, dict) else {}


def _store(path: str, codes: dict[str, object]) -> None:
    """Write atomically; where it cannot be written (a read-only install), say nothing."""
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        if not _private(os.stat(folder)):
            return
        import tempfile  # (only to write: a run that reads what is kept does without it)

        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-dataclass-methods-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_HEADER + marshal.dumps(codes))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError):
        pass


_FAMILIES = ("trainlint", "libcst")  # the packages whose classes' methods are kept, a file each
_kept: dict[str, dict[str, object]] = {}  # family -> its file's code, read when its first class is built
_compiled: dict[str, dict[str, object]] = {}  # family -> what this process compiled that the file lacks
_keeping = False


def _exec_kept(source: object, globals: dict[str, object] | None = None, locals: object = None) -> None:
    """`exec` as `dataclasses` calls it (with the text of a function), the text compiled at most once."""
    family = str((globals or {}).get("__name__", "")).partition(".")[0]
    if type(source) is str and family in _FAMILIES:
        if family not in _kept:
            _kept[family] = _load(_store_path(family))
        code = _kept[family].get(source)
        if type(code) is not type(_exec_kept.__code__):
            new = _compiled.setdefault(family, {})
            code = new.get(source) or new.setdefault(source, compile(source, "<string>", "exec"))
        source = code
    exec(source, globals, locals)  # type: ignore[arg-type]


def keep_dataclass_methods() -> None:
    """From now on in this process, the dataclasses of trainlint and libcst take their methods' code
    from the files where it is there (what is not is compiled, once); idempotent."""
    global _keeping
    if _keeping:
        return
    import dataclasses

    # `dataclasses` calls `exec` by its global name: shadowing it there reaches every class it builds
    dataclasses.exec = _exec_kept  # type: ignore[attr-defined]
    _keeping = True


def save_dataclass_methods() -> None:
    """Write what this process compiled and the files lack (not where Python writes no bytecode)."""
    if sys.dont_write_bytecode:
        return
    for family, new in list(_compiled.items()):
        if new:
            _kept[family] = {**_kept.get(family, {}), **new}
            _compiled[family] = {}
            _store(_store_path(family), _kept[family])


def import_libcst() -> None:
    """Import libcst (once per process), compiling only the dataclass methods not kept from before."""
    if "libcst" in sys.modules:
        return
    keep_dataclass_methods()
    import libcst  # noqa: F401

    save_dataclass_methods()
