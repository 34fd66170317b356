"""Import libcst with the methods of its node classes compiled once, not at every start.

libcst's nodes are some 230 frozen dataclasses. For each, `dataclasses` writes `__init__`, `__repr__`,
`__eq__`, `__hash__`, `__setattr__` and `__delattr__` as source text and compiles it: measured with
cProfile on Python 3.11, that compiling is about 0.2 s of the 0.34 s `import libcst` takes, on every
run that parses (and a one-file run is mostly start-up). What is compiled depends only on that text and
on the interpreter, so the code objects are kept, by their text, in a marshal file beside trainlint's
own bytecode (`trainlint/__pycache__/`). Loading it runs code, as loading a `.pyc` does, so it is
read only from a folder and a file that belong to the user running trainlint and that nobody else can
write (the trust Python gives its own `__pycache__`); never from the user's cache folder, which a CI
cache restored from elsewhere can fill. Anything else about the file, or no file, costs the compile.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import tempfile
from importlib._bootstrap_external import MAGIC_NUMBER  # type: ignore[import-not-found]

_MAX_BYTES = 8 << 20  # (about 0.75 MB for libcst 1.x; more means something else wrote it)
_HEADER = MAGIC_NUMBER + sys.version.encode() + b"\0"


def _store_path() -> str:
    return os.path.join(os.path.dirname(__file__), "__pycache__", f"libcst-dataclasses.{sys.implementation.cache_tag}.marshal")


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
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-libcst-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_HEADER + marshal.dumps(codes))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError):
        pass


def import_libcst() -> None:
    """Import libcst (once per process), compiling only the dataclass methods not kept from before."""
    if "libcst" in sys.modules:
        return
    import dataclasses

    path = _store_path()
    kept = _load(path)
    compiled: dict[str, object] = {}

    def exec_kept(source: object, globals: object = None, locals: object = None) -> None:
        if type(source) is str:
            code = kept.get(source)
            if type(code) is not type(exec_kept.__code__):
                code = compiled[source] = compile(source, "<string>", "exec")
            source = code
        exec(source, globals, locals)  # type: ignore[arg-type]

    # `dataclasses` calls `exec` by its global name: shadowing it there reaches every class it builds
    dataclasses.exec = exec_kept  # type: ignore[attr-defined]
    try:
        import libcst  # noqa: F401
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
    if compiled and not sys.dont_write_bytecode:  # (as Python writes no `.pyc` then, nor does this)
        _store(path, {**kept, **compiled})
