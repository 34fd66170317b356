"""Reading files and streams without trusting them: bounded, never blocking, regular files only.

A path in a project can be a FIFO (opening it for reading blocks until a writer comes), a link to a
device (`/dev/zero` never ends), a link loop or a file too big to lint. Every read of user input
goes through here, so that each of these becomes one clear message instead of a hang, a
MemoryError or a traceback.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO, Iterator

_LINE_MAGIC = re.compile(r"\s*(?:[%!?]|[\w.]+\?\??\s*$|[\w.,\s]+=\s*[%!])")

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class ReadError(Exception):
    """A file that cannot be read as source; the message says why, for a TL000 or an error line."""


def too_large(size: int | None, limit: int) -> str:
    """The message for input over the `max-file-size` setting (`size` None: not known, only that it is more)."""
    if size is None:
        return f"file too large to lint (more than max-file-size {limit} bytes)"
    return f"file too large to lint ({size} bytes > max-file-size {limit})"


def read_source(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; raises ReadError otherwise.

    The file is opened non-blocking (a FIFO does not wait for a writer), checked to be a regular
    file on the open descriptor (no race with a rename), and read at most `limit + 1` bytes, so a
    file that grows or lies about its size still costs no more than that.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise ReadError("is a directory, not a Python file") from None
    except OSError as exc:
        what = "folder" if os.path.isdir(path) else "file"
        raise ReadError(f"cannot read {what}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            if stat.S_ISDIR(info.st_mode):
                raise ReadError("is a directory, not a Python file")
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "a special file")
            raise ReadError(f"cannot read file: it is {kind}, not a regular file")
        if info.st_size > limit:
            raise ReadError(too_large(info.st_size, limit))
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            data = read_stream(fh, limit)
    except OSError as exc:
        raise ReadError(f"cannot read file: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise ReadError(too_large(None, limit))
    return data


def read_stream(stream: BinaryIO, limit: int) -> bytes:
    """At most `limit + 1` bytes of a stream: one byte more than allowed says it is too large."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = stream.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_text(path: Path, limit: int = 50_000_000) -> str | None:
    """A file's text for display (snippets, .gitignore), or None when it cannot be read safely."""
    try:
        data = read_source(path, limit)
    except ReadError:
        return None
    return data.decode("utf-8", errors="replace")


def read_text_lines(path: Path, limit: int = 50_000_000) -> list[str] | None:
    """A file's lines for display, or None when it cannot be read safely."""
    text = read_text(path, limit)
    return None if text is None else text.splitlines()


def resolved(path: Path) -> Path:
    """`path` made absolute with links resolved where they resolve; a link loop stays as written.

    `Path.resolve()` raises RuntimeError (Python < 3.13) or OSError on a symlink loop, which must
    not end a run that merely reports that file.
    """
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def digest(key: bytes = b"") -> Any:
    """A BLAKE2b hash, keyed (a MAC, as in RFC 7693) when `key` is given (at most 64 bytes); `_blake2`
    loads in a fraction of a millisecond, `hashlib` (OpenSSL) in several."""
    try:
        from _blake2 import blake2b
    except ImportError:  # a Python built without it
        from hashlib import blake2b
    return blake2b(digest_size=32, key=key)


MAX_MODULE_BYTES = 2_000_000  # a local module larger than this is not summarised (its content is not read)

# A dependency's state: (path, size of the content read or one of the codes below, BLAKE2b hex or "").
State = tuple[str, int, str]
ABSENT, FOLDER, SPECIAL, EXISTS, TOO_LARGE, UNREADABLE, PROJECT, LISTING, LISTING_MODULES = -1, -2, -3, -4, -5, -6, -8, -9, -10
_READ_CODES = (TOO_LARGE, UNREADABLE)  # outcomes of reading, not of looking
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def read_regular(path: str, limit: int, follow: bool = True) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes, else None (absent, unreadable, a FIFO,
    a folder, a device, too large). Opened non-blocking and checked on the open descriptor, so
    nothing in place of the file can make this wait or read without end."""
    flags = _OPEN_FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return _read_fd(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int) -> bytes | None:
    """At most `limit` bytes from `fd`; None when there are more (a file that grew)."""
    chunks, left = [], limit + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return None if left <= 0 else b"".join(chunks)


def probe_state(path: str) -> State:
    """What is at `path` (links followed): a regular file, a folder, something else or nothing.
    For paths the analysis only looked for; their content is not read. Nothing at a path whose
    folder is missing too is said by the highest missing folder above it (see `_absence`)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return _absence(path)
    return (path, EXISTS if stat.S_ISREG(mode) else FOLDER if stat.S_ISDIR(mode) else SPECIAL, "")


def _absence(path: str) -> State:
    """The state that says nothing is at `path`: its own, or that of the highest missing folder above
    it. A path resolves only through its folder, so the path stays missing while that folder does;
    the imports of a project are looked for under the same missing folders in every root
    (`composer/composer/...`), and a warm run checks each folder once instead of every name."""
    missing = path
    while True:
        folder = os.path.dirname(missing)
        if not folder or folder == missing:
            return (missing, ABSENT, "")
        try:
            os.stat(folder)
        except FileNotFoundError:
            missing = folder
            continue
        except (OSError, ValueError):  # (not a folder, or not looked into: the name itself says it)
            pass
        return (missing, ABSENT, "")


def read_state(path: str, limit: int = MAX_MODULE_BYTES) -> tuple[State, bytes | None]:
    """The content of a module file (a regular file of at most `limit` bytes) and its state: its
    size and BLAKE2b hash, or why it was not read. Never blocks (see `read_regular`)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return (path, ABSENT, ""), None
    except OSError:
        found = probe_state(path)
        return ((path, UNREADABLE, "") if found[1] == EXISTS else found), None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return (path, FOLDER if stat.S_ISDIR(info.st_mode) else SPECIAL, ""), None
        data = _read_fd(fd, limit) if info.st_size <= limit else None
    except OSError:
        return (path, UNREADABLE, ""), None
    finally:
        os.close(fd)
    if data is None:
        return (path, TOO_LARGE, ""), None
    hashed = digest()
    hashed.update(data)
    return (path, len(data), hashed.hexdigest()), data


def current_state(recorded: State) -> State:
    """The state of the recorded path now, found the way it was recorded (read, or looked for)."""
    path, size, _ = recorded
    if size == PROJECT:
        return project_state(path)
    if size in (LISTING, LISTING_MODULES):
        return listing_state(path, modules_only=size == LISTING_MODULES)
    return read_state(path)[0] if size >= 0 or size in _READ_CODES else probe_state(path)


SKIPPED_FOLDERS = frozenset({"__pycache__", "node_modules", "site-packages", ".git", ".venv", "venv", ".tox", "build", "dist"})
MAX_PROJECT_MODULES = 5_000


def project_modules(root: Path | str) -> Iterator[tuple[str, list[str], list[str]]]:
    """The folders of a project (hidden ones, virtual environments and build output left out), each
    with its files and all the names it holds, sorted, until MAX_PROJECT_MODULES modules were seen."""
    count = 0
    for folder, dirs, files in os.walk(root):
        listed = sorted(dirs + files)
        dirs[:] = sorted(
            d for d in dirs
            if d not in SKIPPED_FOLDERS and not d.startswith(".") and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))
        )
        yield folder, sorted(files), listed
        count += sum(1 for name in files if name.endswith(".py"))
        if count > MAX_PROJECT_MODULES:
            return


def project_state(root: str) -> State:
    """The names in every folder of a project, hashed as one state: a module added or removed
    anywhere changes it (the project's index of which modules import which is read from them)."""
    if not os.path.isdir(root):
        return (root, ABSENT, "")
    hashed = digest()
    for folder, _, listed in project_modules(root):
        hashed.update(folder.encode("utf-8", "surrogatepass") + b"\1" + "\0".join(listed).encode("utf-8", "surrogatepass") + b"\2")
    return (root, PROJECT, hashed.hexdigest())


def listing_state(folder: str, modules_only: bool = False) -> State:
    """The names of the modules (`.py`, `.ipynb`) directly in one folder, and unless `modules_only`
    of its folders named like modules that hold modules themselves, hashed as one state: a module, or
    a folder of code, added or removed there changes it (what the folder's modules import was read
    from them). A folder without modules (a job's outputs, a cache made beside a project) is no name
    here: its coming and going would make every cached result of the project miss."""
    try:
        with os.scandir(folder) as entries:
            found = [(e.name, e.is_dir()) for e in entries]
    except (OSError, ValueError):
        return (folder, ABSENT, "")
    names = sorted(name for name, is_dir in found if not is_dir and name.endswith((".py", ".ipynb")))
    if not modules_only:
        names += sorted(
            name + "/" for name, is_dir in found
            if is_dir and name.isidentifier() and name not in SKIPPED_FOLDERS and _holds_modules(os.path.join(folder, name))
        )
    hashed = digest()
    hashed.update("\0".join(names).encode("utf-8", "surrogatepass"))
    return (folder, LISTING if not modules_only else LISTING_MODULES, hashed.hexdigest())


def _holds_modules(folder: str) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(e.name.endswith((".py", ".ipynb")) for e in entries)
    except (OSError, ValueError):
        return False


# -- notebooks: their code cells as one module ---------------------------------------------------
# Cells are joined as ruff joins them: code cells only, in order, each ending with a newline. IPython
# syntax is blanked out, not deleted, so that every line keeps its number: line magics and shell
# escapes (`%time f()`, `!pip install x`, `files = !ls`, `obj?`) become empty lines (`pass` when
# indented, keeping the block valid), and a cell starting with a cell magic (`%%bash`) becomes empty
# lines from top to bottom.


def split_cell(source: str) -> list[str]:
    """A cell's source as lines (without their newlines; a final newline ends the last line)."""
    lines = source.split("\n")
    if source.endswith("\n") or not source:
        lines.pop()
    return lines


def blank_magics(lines: list[str]) -> list[str]:
    """The lines with IPython syntax blanked out, each line keeping its number (see above)."""
    if lines and lines[0].lstrip().startswith("%%"):
        return [""] * len(lines)
    out, continued, code_above = [], False, False
    for line in lines:
        if continued or (_LINE_MAGIC.match(line) and not _inside_brackets(out)):
            indent = line[: len(line) - len(line.lstrip())]
            # an indented first line is IPython's leading indent (it dedents the cell), not a block
            out.append(f"{indent}pass" if indent and code_above and not continued else "")
            continued = line.rstrip().endswith("\\")
        else:
            out.append(line)
        code_above = code_above or bool(out[-1].strip())
    return out


def _inside_brackets(lines: list[str]) -> bool:
    """Whether the code above leaves a bracket (or a triple-quoted string) open: a line starting with `%`
    there continues an expression (`print('%d' \\n % (n,))`), not a magic."""
    if not lines or not any("(" in line or "[" in line or "{" in line or '"""' in line or "'''" in line for line in lines):
        return False
    import io
    import tokenize

    try:
        for _ in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            pass
    except tokenize.TokenError:  # (EOF in a multi-line statement or string)
        return True
    except SyntaxError:
        return False
    return False


def is_python_notebook(data: dict[str, object]) -> bool:
    """Whether a notebook's metadata (its parsed JSON) says its language is Python (or says none)."""
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return True
    for key, sub in (("kernelspec", "language"), ("language_info", "name")):
        value = metadata.get(key)
        if isinstance(value, dict) and isinstance(value.get(sub), str):
            return str(value[sub]).lower() == "python"
    return True


def code_cells(cells: list[object]) -> Iterator[tuple[int, object]]:
    """(number, source) of each code cell of a notebook's `cells` (numbered from 1 among all cells):
    a source given as a list of strings joined, any other source as it is."""
    for number, raw in enumerate(cells, start=1):
        if not isinstance(raw, dict) or raw.get("cell_type") != "code":
            continue
        source = raw.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        yield number, source


def notebook_code(text: str) -> str | None:
    """The code cells of a Python notebook's JSON text joined into one module, as the linter joins
    them (so lines match), or None for text that is not a Python notebook."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or not is_python_notebook(data):
        return None
    code: list[str] = []
    for _, source in code_cells(data["cells"]):
        if not isinstance(source, str):
            return None
        code.extend(blank_magics(split_cell(source)))
    return "".join(f"{line}\n" for line in code)


def module_code(path: str, data: bytes) -> str:
    """A project file's code as the analysis reads it: undecodable bytes replaced, newlines
    universal; a notebook's code cells joined (nothing, for what is not a Python notebook); `async`
    as a keyword argument's name read as a name (`pre37_keywords`)."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    if path.endswith(".ipynb"):
        return notebook_code(text) or ""
    return pre37_keywords(text)


# `async` as a keyword argument's name: `x.cuda(async=True)`, PyTorch's spelling of `non_blocking=True`
# before 0.4, a syntax error since Python 3.7 made `async` a keyword (no valid code holds it)
_PRE37_KEYWORD = re.compile(r"(?<=[(,])(\s*)async(?=\s*=(?!=))")


def pre37_keywords(text: str) -> str:
    """`text` with each `async` that names a keyword argument spelled `_sync`: the same length, so
    every position holds, and code of Python before 3.7 parses and can be analysed. Only in such
    code does the pattern occur outside strings and comments."""
    return _PRE37_KEYWORD.sub(r"\1_sync", text) if "async" in text else text
