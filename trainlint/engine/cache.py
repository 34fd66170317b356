"""A content cache of lint results in the user's cache directory.

An entry is keyed on everything a file's result depends on: the file's bytes and the name it is
linted under, the settings that change what is reported, trainlint's own code (its version and the
size and modification time of each of its source files, so that an edited checkout never reads a
stale result) and the versions of Python and libcst. A result that read the summaries of local modules
the file imports lists those modules' files (and the candidate paths probed for them) with their
size and modification time; a lookup whose dependencies changed is a miss.

Files with findings are cached like clean ones. What depends on the machine rather than the file (a
crash, the time or memory limit, an internal error) is never stored. Entries are written to a
temporary file and renamed into place, so concurrent runs never see half an entry; an unreadable
entry is a miss. The cache is pruned to `max_entries`, oldest first, after a run that wrote to it.
"""

from __future__ import annotations

import os
import pickle
import stat
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from trainlint import __version__
from trainlint.reading import digest

if TYPE_CHECKING:
    from trainlint.config import Settings
    from trainlint.engine.results import FileResult

FORMAT = "1"  # bump when the layout of an entry changes


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
    package = Path(__file__).resolve().parent.parent
    for folder, dirs, files in sorted(os.walk(package)):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "verify", "lsp"))
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                hashed.update(f"{os.path.relpath(os.path.join(folder, name), package)}|{st.st_size}|{st.st_mtime_ns}".encode())
    try:  # libcst's version, without importing libcst (or importlib.metadata, slower still)
        from importlib.util import find_spec

        spec = find_spec("libcst")
        version_file = Path(spec.origin).with_name("_version.py")  # type: ignore[union-attr, arg-type]
        hashed.update(version_file.read_bytes())
    except Exception:
        hashed.update(b"libcst?")
    return hashed.hexdigest()


def settings_key(settings: Settings) -> str:
    """The settings that change what a file's result holds (not the time and memory limits)."""
    parts = (
        settings.select, settings.ignore, settings.extend_select, settings.per_file_ignores,
        sorted(settings.step_functions), sorted(settings.gate_names), str(settings.root),
        settings.max_file_size, settings.max_line_length, settings.max_nesting, settings.max_chain,
    )
    return repr(parts)


class Cache:
    """Lint results by content key, stored under `directory`."""

    def __init__(self, directory: Path, max_entries: int = 50_000) -> None:
        self.directory = Path(directory) / f"v{FORMAT}"
        self.max_entries = max_entries
        self.stored = 0
        self.enabled = True

    def key(self, path: str, data: bytes, settings: Settings) -> str:
        hashed = digest()
        for part in (code_key(), settings_key(settings), path):
            hashed.update(part.encode("utf-8", "surrogatepass"))
            hashed.update(b"\0")
        hashed.update(data)
        return hashed.hexdigest()

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def lookup(self, path: str, settings: Settings) -> tuple[FileResult | None, str | None, bytes | None]:
        """The cached result of linting `path` now, else the key to store a fresh result under and
        the bytes it was computed from (analyse those, not what the file holds a moment later)."""
        if not self.enabled:
            return None, None, None
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > settings.max_file_size:
                return None, None, None  # the analysis reports these itself, without reading a FIFO here
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            return None, None, None
        key = self.key(path, data, settings)
        try:
            with open(self._entry(key), "rb") as fh:
                result = pickle.load(fh)
        except Exception:  # no entry, or a damaged or foreign one: a miss
            return None, key, data
        if getattr(result, "path", None) != path:
            return None, key, data
        from trainlint.engine.results import file_state

        if any(file_state(dep[0]) != dep for dep in result.dependencies):
            return None, key, data  # a local module it imports changed (or appeared, or went)
        return result, key, None

    def store(self, key: str, result: FileResult) -> None:
        """Write an entry atomically; a cache that cannot be written is switched off, not fatal."""
        if not self.enabled:
            return
        target = self._entry(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, target)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            self.enabled = False
            return
        self.stored += 1

    def close(self) -> None:
        """Prune the oldest entries when the cache holds more than `max_entries`."""
        if not self.stored:
            return
        try:
            entries = [e for shard in os.scandir(self.directory) if shard.is_dir() for e in os.scandir(shard.path)]
        except OSError:
            return
        if len(entries) <= self.max_entries:
            return
        dated = []
        for e in entries:
            try:
                dated.append((e.stat().st_mtime, e.path))
            except OSError:
                pass
        dated.sort()
        for _, entry in dated[: len(dated) - int(self.max_entries * 0.8)]:
            try:
                os.unlink(entry)
            except OSError:
                pass
