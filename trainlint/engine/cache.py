"""A content cache of lint results in the user's cache directory.

An entry is keyed on everything a file's result depends on: the file's bytes and the name it is
linted under, the settings that change what is reported, trainlint's own code (its version and the
size and modification time of each of its source files, so that an edited checkout never reads a
stale result) and the versions of Python and libcst. A result that read the summaries of local modules
lists the states of the files it depended on (see `read_state` and `probe_state`): a module it read by
the BLAKE2b hash of its content, a path it only looked for by what is there. A lookup whose
dependencies are not all as recorded is a miss; sizes and modification times are never trusted.

Entries are plain JSON, checked field by field when read (`trainlint/engine/serial.py`): a cache folder
that others can write to (a CI cache restored from another branch) can at worst cost a miss, never
run code. Anything odd about an entry (not a regular file, too large, not JSON, a wrong type, another
format) is a miss. The folder is created private to its user; a folder owned by another user is not
used. Entries of earlier formats are deleted, never read.

A result's dependencies are stored as an entry of their own, named by its hash, that every result
with the same dependencies names (the files of a project share most of theirs): a warm run reads and
checks each group once.

Files with findings are cached like clean ones. What depends on the machine rather than the file (a
crash, the time or memory limit, an internal error) is never stored. Entries are written to a
temporary file and renamed into place, so concurrent runs never see half an entry. The cache is
pruned to `max_entries`, oldest first, after a run that wrote to it.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from trainlint import __version__
from trainlint.reading import State, current_state, digest, read_regular

if TYPE_CHECKING:
    from trainlint.config import Settings
    from trainlint.engine.results import FileResult

FORMAT = 3  # bump when the layout of an entry changes; entries of earlier formats are deleted
MAX_ENTRY_BYTES = 32 << 20
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}|\.tmp-.*")
_ENTRY_KEY = re.compile(r"[0-9a-f]{64}")


def _named(data: bytes) -> str:
    """The name of a group of dependencies: the hash of its entry."""
    hashed = digest()
    hashed.update(data)
    return hashed.hexdigest()


def default_directory() -> Path:
    """`TRAINLINT_CACHE_DIR`, else the platform's user cache directory."""
    explicit = os.environ.get("TRAINLINT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trainlint"


@lru_cache(maxsize=1)
def code_key() -> str:
    """trainlint's version and source files, and the Python and libcst it runs on."""
    hashed = digest()
    hashed.update(f"{FORMAT}|{__version__}|{sys.version}".encode())
    package = str(Path(__file__).resolve().parent.parent)
    for folder, dirs, files in sorted(os.walk(package)):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "verify", "lsp"))
        relative = folder[len(package) + 1:]  # (os.path.relpath for each file costs a warm run milliseconds)
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                hashed.update(f"{os.path.join(relative, name)}|{st.st_size}|{st.st_mtime_ns}".encode())
    hashed.update(_libcst_version())
    return hashed.hexdigest()


def _libcst_version() -> bytes:
    """libcst's `_version.py` as the import system would find it, without importing libcst (or
    `importlib.util`/`importlib.metadata`, slow to import for a warm run)."""
    for entry in sys.path:
        try:
            with open(os.path.join(entry or ".", "libcst", "_version.py"), "rb") as fh:
                return fh.read()
        except OSError:
            continue
    return b"libcst?"


def settings_key(settings: Settings) -> str:
    """The settings that change what a file's result holds (not the time and memory limits)."""
    parts = (
        settings.select, settings.ignore, settings.extend_select, settings.per_file_ignores,
        sorted(settings.step_functions), sorted(settings.gate_names), str(settings.root),
        settings.max_file_size, settings.max_line_length, settings.max_nesting, settings.max_chain,
        settings.preview, settings.ignore_noqa, settings.lint_test_code,
        [str(getattr(pattern, "folder", "")) for pattern, _ in settings.per_file_ignores],  # (an inherited pattern's folder)
    )
    return repr(parts)


def private_folder(path: Path, follow: bool = True) -> bool:
    """Create `path` (mode 0o700) or make an existing one 0o700; False when it is not a folder of
    this user (then it is not used: whoever owns it could write its entries)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path) if follow else os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            return False
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            return False
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, 0o700)
        return True
    except OSError:
        return False


class Cache:
    """Lint results by content key, stored under `directory`."""

    def __init__(self, directory: Path, max_entries: int = 50_000) -> None:
        self.root = Path(directory)
        self.directory = self.root / f"v{FORMAT}"
        self.max_entries = max_entries
        self.stored = 0
        self.enabled = True
        self._ready: bool | None = None
        self._states: dict[State, bool] = {}  # whether each recorded dependency still holds, this run
        self._groups: dict[str, bool] = {}  # the same of each group of dependencies read
        self._written: set[str] = set()  # groups of dependencies written this run

    def key(self, path: str, data: bytes, settings: Settings) -> str:
        hashed = digest()
        for part in (code_key(), settings_key(settings), path):
            hashed.update(part.encode("utf-8", "surrogatepass"))
            hashed.update(b"\0")
        hashed.update(data)
        return hashed.hexdigest()

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def _usable(self) -> bool:
        """The folder exists and is private (checked once); entries of earlier formats are deleted."""
        if self._ready is None:
            self._ready = private_folder(self.root) and private_folder(self.directory, follow=False)
            if self._ready:
                _delete_earlier_formats(self.root)
            else:
                self.enabled = False
        return self._ready

    def lookup(self, path: str, settings: Settings) -> tuple[FileResult | None, str | None, bytes | None]:
        """The cached result of linting `path` now, else the key to store a fresh result under and
        the bytes it was computed from (analyse those, not what the file holds a moment later)."""
        if not self.enabled or not self._usable():
            return None, None, None
        # the analysis reports what is not a readable regular file within max-file-size itself
        data = read_regular(path, settings.max_file_size)
        if data is None:
            return None, None, None
        key = self.key(path, data, settings)
        raw = read_regular(str(self._entry(key)), MAX_ENTRY_BYTES, follow=False)
        if raw is None:
            return None, key, data
        from trainlint.engine.serial import decode_result

        try:
            result, group = decode_result(raw, FORMAT, len(data))
        except Exception:  # damaged, foreign, of another format: a miss (decoding runs no code)
            return None, key, data
        if result.path != path or not self._group_holds(group):
            return None, key, data  # a local module it used changed (or appeared, or went)
        return result, key, None

    def _group_holds(self, group: str) -> bool:
        """Whether every dependency of a group entry is as recorded (read and checked once a run)."""
        known = self._groups.get(group)
        if known is None:
            from trainlint.engine.serial import decode_dependencies

            known = False
            raw = read_regular(str(self._entry(group)), MAX_ENTRY_BYTES, follow=False) if _ENTRY_KEY.fullmatch(group) else None
            if raw is not None and _named(raw) == group:  # (named by its content: a damaged one is a miss)
                try:
                    known = all(self._holds(dep) for dep in decode_dependencies(raw, FORMAT))
                except Exception:
                    known = False
            self._groups[group] = known
        return known

    def _holds(self, recorded: State) -> bool:
        known = self._states.get(recorded)
        if known is None:
            known = self._states[recorded] = current_state(recorded) == recorded
        return known

    def store(self, key: str, result: FileResult) -> None:
        """Write an entry atomically; a cache folder that cannot be written is switched off, not fatal."""
        if not self.enabled or not self._usable():
            return
        from trainlint.engine.serial import encode_dependencies, encode_result

        try:
            states = encode_dependencies(tuple(sorted(set(result.dependencies))), FORMAT)
            group = _named(states)
            data = encode_result(result, FORMAT, group)
        except (TypeError, ValueError):  # a result holding what an entry cannot say: not cached
            return
        if len(data) > MAX_ENTRY_BYTES or len(states) > MAX_ENTRY_BYTES:
            return
        if group not in self._written:  # the dependencies first: an entry never names a missing group
            if not self._write(group, states):
                return
            self._written.add(group)
        if self._write(key, data):
            self.stored += 1

    def _write(self, name: str, data: bytes) -> bool:
        """Write an entry atomically; a cache folder that cannot be written is switched off."""
        import tempfile  # (a warm run writes nothing)

        target = self._entry(name)
        try:
            try:
                os.mkdir(target.parent, 0o700)
            except FileExistsError:
                pass
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")  # mode 0o600
        except OSError:
            self.enabled = False
            return False
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)  # over a FIFO or a link in its place; a folder there stays a miss
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        return True

    def close(self) -> None:
        """Prune the oldest entries when the cache holds more than `max_entries`."""
        if not self.stored:
            return
        try:
            entries = [e for shard in os.scandir(self.directory) if shard.is_dir(follow_symlinks=False) for e in os.scandir(shard.path)]
        except OSError:
            return
        if len(entries) <= self.max_entries:
            return
        dated = []
        for e in entries:
            try:
                dated.append((e.stat(follow_symlinks=False).st_mtime, e.path))
            except OSError:
                pass
        dated.sort()
        for _, entry in dated[: len(dated) - int(self.max_entries * 0.8)]:
            try:
                os.unlink(entry)
            except OSError:
                pass


def _delete_earlier_formats(root: Path) -> None:
    """Delete the entries of earlier formats (pickles, which must never be loaded) and their folders.
    Only names an entry can have are deleted: the cache folder may be one the user named."""
    try:
        earlier = [e.path for e in os.scandir(root) if re.fullmatch(r"v[0-9]+", e.name) and int(e.name[1:]) < FORMAT
                   and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for folder in earlier:
        try:
            shards = [s.path for s in os.scandir(folder) if re.fullmatch(r"[0-9a-f]{2}", s.name) and s.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for shard in shards:
            try:
                names = [e.name for e in os.scandir(shard) if _ENTRY_NAME.fullmatch(e.name)]
            except OSError:
                continue
            for name in names:
                try:
                    os.unlink(os.path.join(shard, name))
                except OSError:
                    pass
        for empty in (*shards, folder):
            try:
                os.rmdir(empty)
            except OSError:
                pass
