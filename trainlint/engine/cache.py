"""A content cache of lint results in the user's cache directory.

An entry is keyed on everything a file's result depends on: the file's bytes and the name it is
linted under, the settings that change what is reported, trainlint's own code (its version and the
size and modification time of each of its source files, so that an edited checkout never reads a
stale result) and the versions of Python and libcst. A result that read the summaries of local modules
lists the states of the files it depended on (see `read_state` and `probe_state`): a module it read by
the BLAKE2b hash of its content, a path it only looked for by what is there. A lookup whose
dependencies are not all as recorded is a miss; sizes and modification times are never trusted.

Results are authenticated: each starts with a MAC of its name and content (keyed BLAKE2b, RFC 7693),
under a key kept outside the cache folder (`cache_folder.load_key`: `TRAINLINT_CACHE_KEY`, else a key
file in the user's configuration folder). Whoever can write the cache folder without holding the key
(a CI cache restored from another branch, a shared folder) can plant, edit or move entries, and each
is a miss: it can neither hide a finding nor add a fix. Behind the MAC an entry is plain JSON, checked
field by field when read (`trainlint/engine/serial.py`), never code. Anything odd about an entry (not
a regular file, too large, a wrong MAC, not JSON, a wrong type, another format) is a miss.

The folder named (or the user cache directory) keeps its mode: the entries live in a private
sub-folder `v<FORMAT>` that a marker at the root names, and only what is provably the cache's is
ever removed (see `cache_folder.py`). Entries of earlier formats are deleted so, never read.

A result's dependencies, sorted by path, are stored in groups, each an entry of its own named by its
hash, that every result holding the same run of dependencies names. The files of a project share most
of theirs, but each differs somewhere (its own callers, its own imports): a group ends after a path
chosen by the path's own hash (content-defined chunking, as rsync and backup tools split files), so a
difference changes only the group that holds it and the others stay shared. A warm run reads and
checks each group once, not each file's thousand dependencies. A group is a header line and one state
per line (a JSON list): its name, the hash of its content, is covered by the MAC of each result that
names it, so a group planted or edited in its place is a miss without a MAC of its own. A run of many
files also writes one signed index of the states its groups list, each once (`Cache.begin`): the next
run of the same files checks those states from it and reads no group.

Files with findings are cached like clean ones. What depends on the machine rather than the file (a
crash, the time or memory limit, an internal error) is never stored. Entries are written to a
temporary file and renamed into place, so concurrent runs never see half an entry. The cache is
pruned to `max_entries`, oldest first, after a run that wrote to it.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from itertools import chain
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from trainlint import __version__
from trainlint.engine.cache_folder import (
    ENTRY_NAME,
    TEMPORARY_NAME,
    CacheKeyError,
    load_key,
    marked_formats,
    private_subfolder,
    remove_entries,
    user_folder,
    write_marker,
)
from trainlint.checked_json import is_state
from trainlint.reading import State, current_state, digest, read_regular

if TYPE_CHECKING:
    from trainlint.config import Settings
    from trainlint.engine.results import FileResult

try:  # constant-time comparison without `hmac`, which loads OpenSSL (milliseconds of a warm run)
    from _operator import _compare_digest
except ImportError:  # pragma: no cover - another Python implementation
    from hmac import compare_digest as _compare_digest

FORMAT = 6  # bump when the layout of an entry changes (4: authenticated; 5: dependencies in shared groups; 6: a state per line); entries of earlier formats are deleted
MAX_ENTRY_BYTES = 32 << 20
_TAG = 64  # a result's entry: the hex MAC of its name and content, a newline, the content


def _named(data: bytes) -> str:
    """The name of a group of dependencies: the hash of its entry."""
    hashed = digest()
    hashed.update(data)
    return hashed.hexdigest()


INDEX_FROM = 16  # a run of at least this many files keeps an index of the dependencies its results name
GROUP_EVERY = 16  # a group ends after one path in this many, on average
_ENDS_GROUP: dict[str, bool] = {}  # whether a path ends a group, by path


def grouped(states: tuple[State, ...]) -> list[tuple[State, ...]]:
    """Sorted dependency states split into runs, each ending after a path whose CRC-32 is a multiple of
    `GROUP_EVERY`: where a run ends depends on its own paths only, so results that share a run of
    dependencies share its group whatever else each of them depends on."""
    groups: list[tuple[State, ...]] = []
    start = 0
    for index, state in enumerate(states):
        ends = _ENDS_GROUP.get(state[0])
        if ends is None:  # (a run stores a project's thousand paths for each of its files)
            ends = _ENDS_GROUP[state[0]] = zlib.crc32(state[0].encode("utf-8", "surrogatepass")) % GROUP_EVERY == 0
        if ends:
            groups.append(states[start:index + 1])
            start = index + 1
    if start < len(states):
        groups.append(states[start:])
    return groups


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


def _mac(key: bytes, name: str, content: bytes) -> bytes:
    """The MAC of an entry, over its name too: a valid entry moved to another name (the result of a
    file's earlier, clean content) is a miss."""
    mac = _mac_start(key, name)
    mac.update(content)
    return mac.hexdigest().encode("ascii")


def _mac_start(key: bytes, name: str) -> Any:
    """The MAC of entry `name`, its content still to be fed."""
    mac = digest(key)
    mac.update(name.encode("ascii"))
    mac.update(b"\0")
    return mac


def sealed(key: bytes, name: str, content: bytes) -> bytes:
    """The entry `name` holding `content`, as stored: its MAC under `key`, a newline, the content."""
    return _mac(key, name, content) + b"\n" + content


def opened(key: bytes, name: str, raw: bytes) -> bytes | None:
    """The content of the entry `name` read as `raw`, when its MAC under `key` verifies; else None
    (planted, edited, moved from another name, damaged)."""
    if len(raw) <= _TAG or raw[_TAG] != 0x0A:
        return None
    content = raw[_TAG + 1:]
    return content if _compare_digest(_mac(key, name, content), raw[:_TAG]) else None


class Cache:
    """Lint results by content key, stored under `directory`, authenticated with `key` (by default
    `load_key()`, read when the cache is first used; without one the cache is off)."""

    def __init__(self, directory: Path, max_entries: int = 50_000, key: bytes | None = None) -> None:
        self.root = Path(directory)
        self.directory = self.root / f"v{FORMAT}"
        self._folder = str(self.directory)
        self.max_entries = max_entries
        self.stored = 0
        self.enabled = True
        self._secret = key
        self._ready: bool | None = None
        self._states: dict[bytes, bool] = {}  # whether each recorded dependency (a group's line) still holds, this run
        self._groups: dict[str, bool] = {}  # the same of each group of dependencies read
        self._written: set[str] = set()  # groups of dependencies written this run
        # the run's index of dependencies (`begin`): its name, the distinct state lines of the groups the
        # run used (each once), and each group as positions in that table
        self._index: str | None = None
        self._indexed: frozenset[str] = frozenset()
        self._table: dict[bytes, int] = {}
        self._rows: dict[str, list[int]] = {}
        self._used: set[str] = set()  # the groups this run's results name

    def key(self, path: str, data: bytes, settings: Settings) -> str:
        """The name of the entry for `data` linted as `path` with `settings` by this trainlint."""
        hashed = digest()
        for part in (code_key(), settings_key(settings), path):
            hashed.update(part.encode("utf-8", "surrogatepass"))
            hashed.update(b"\0")
        hashed.update(data)
        return hashed.hexdigest()

    def _entry(self, key: str) -> str:
        """The path of entry `key`, in the shard of its first two digits (joined as text: a warm run
        names thousands)."""
        return os.path.join(self._folder, key[:2], key)

    @property
    def _signing_key(self) -> bytes:
        assert self._secret is not None  # (set before `_usable` says yes)
        return self._secret

    def _usable(self) -> bool:
        """Whether the cache can be used this run (decided once, see `_prepare`)."""
        if self._ready is None:
            self._ready = self._prepare()
            if not self._ready:
                self.enabled = False
        return self._ready

    def _prepare(self) -> bool:
        """A key, a root folder of this user (its mode left alone) and the private folder of entries
        that the marker names; entries of earlier formats are deleted, as `clean` would."""
        if self._secret is None:
            try:
                self._secret = load_key()
            except CacheKeyError:
                return False
        if not user_folder(self.root):
            return False
        marked = marked_formats(self.root)  # (as it was before this run: what it proves about earlier folders)
        remove_entries(self.root, marked, earlier_than=FORMAT)
        if FORMAT not in marked:
            if os.path.lexists(self.directory):
                return False  # a folder that trainlint did not make (a data set's): neither used nor touched
            if not write_marker(self.root, marked | {FORMAT}):
                return False
        return private_subfolder(self.directory)

    def refresh(self) -> None:
        """Check recorded dependencies afresh from now on (a long-lived process: files change)."""
        self._states.clear()
        self._groups.clear()

    def lookup(self, path: str, settings: Settings) -> tuple[FileResult | None, str | None, bytes | None]:
        """The cached result of linting `path` now, else the key to store a fresh result under and
        the bytes it was computed from (analyse those, not what the file holds a moment later)."""
        if not self.enabled or not self._usable():
            return None, None, None
        # the analysis reports what is not a readable regular file within max-file-size itself
        data = read_regular(path, settings.max_file_size)
        if data is None:
            return None, None, None
        hit, key = self.lookup_data(path, data, settings)
        return (hit, key, None) if hit is not None else (None, key, data)

    def lookup_data(self, path: str, data: bytes, settings: Settings) -> tuple[FileResult | None, str | None]:
        """The cached result of linting `data` as `path` (an editor's buffer), else the key to store a
        fresh result under."""
        if not self.enabled or not self._usable():
            return None, None
        key = self.key(path, data, settings)
        raw = read_regular(self._entry(key), MAX_ENTRY_BYTES, follow=False)
        content = opened(self._signing_key, key, raw) if raw is not None else None
        if content is None:  # none, or not one this key signed: a miss
            return None, key
        from trainlint.engine.serial import decode_result

        try:
            result, groups = decode_result(content, FORMAT, len(data))
        except Exception:  # damaged, of another format: a miss (decoding runs no code)
            return None, key
        if result.path != path or not all(self._group_holds(group) for group in groups):
            return None, key  # a local module it used changed (or appeared, or went)
        return result, key

    def begin(self, paths: list[str]) -> None:
        """Before the lookups of a run of many files: the groups its last run of the same files used, with
        their states (each once), from one entry. Each state is checked as usual; a warm run then reads
        no group of its own. The index is written at the end of a run whose groups differ (`close`)."""
        if len(paths) < INDEX_FROM or not self.enabled or not self._usable():
            return
        hashed = digest()
        hashed.update(f"dependency index|{code_key()}".encode())
        for path in sorted(paths):
            hashed.update(b"\0" + path.encode("utf-8", "surrogatepass"))
        self._index = hashed.hexdigest()
        content = self.read_entry(self._index)
        if content is None:
            return
        lines = content.split(b"\n")
        head = lines[0].split(b" ")
        if len(head) != 3 or head[:2] != [b"index", str(FORMAT).encode()] or not head[2].isdigit():
            return
        count = int(head[2])
        table, rows = lines[1:count + 1], lines[count + 1:]
        try:
            self._all_hold(table)  # (its verdicts, line by line, are what the groups read below)
            for row in rows:
                name, *positions = row.decode("ascii").split(" ")
                group = [table[int(i)] for i in positions]
                self._groups[name] = all(self._states[line] for line in group)
                self._keep_row(name, group)
        except (ValueError, IndexError, KeyError):  # (signed by this key: trainlint wrote it, but be safe)
            return
        self._indexed = frozenset(self._rows)

    def _keep_row(self, name: str, lines: list[bytes]) -> None:
        """Note a group the run used, for the next run's index (kept only when the run has one)."""
        if self._index is not None and name not in self._rows:
            table = self._table
            self._rows[name] = [table.setdefault(line, len(table)) for line in lines]

    def _write_index(self) -> None:
        """Write the run's index when the groups it used are not the ones its index listed."""
        used = [name for name in self._rows if name in self._used]
        if self._index is None or frozenset(used) == self._indexed:
            return
        lines = list(self._table)  # (in the order of their positions)
        kept: dict[int, int] = {}  # a position in `lines` -> its position in the index written
        rows = [" ".join([name, *(str(kept.setdefault(i, len(kept))) for i in self._rows[name])]).encode("ascii") for name in used]
        parts = [b"index %d %d" % (FORMAT, len(kept)), *(lines[i] for i in kept), *rows]
        if sum(map(len, parts)) + len(parts) + _TAG <= MAX_ENTRY_BYTES:
            # written part by part after its MAC: joined, then sealed, it was two copies of ~5 MB at once
            mac = _mac_start(self._signing_key, self._index)
            for n, part in enumerate(parts):
                mac.update(b"\n" + part if n else part)
            self._write(self._index, chain([mac.hexdigest().encode("ascii")], *((b"\n", part) for part in parts)))

    def _group_holds(self, group: str) -> bool:
        """Whether every dependency of a group entry is as recorded (read and checked once a run)."""
        self._used.add(group)
        known = self._groups.get(group)
        if known is None:
            from trainlint.engine.serial import dependency_items

            known = False
            raw = read_regular(self._entry(group), MAX_ENTRY_BYTES, follow=False) if ENTRY_NAME.fullmatch(group) else None
            # named by the hash of its content, and that name by a result's MAC: a group needs no MAC
            # of its own, and one damaged or planted in its place is a miss
            if raw is not None and _named(raw) == group:
                try:
                    lines = dependency_items(raw, FORMAT)
                    known = self._all_hold(lines)
                    self._keep_row(group, lines)
                except Exception:
                    known = False
            self._groups[group] = known
        return known

    def _all_hold(self, recorded: list[bytes]) -> bool:
        """Whether each recorded state (a line of a group) is a state and still holds; each distinct
        line is decoded and checked once a run (the groups of a project list the same states many times)."""
        states = self._states
        unseen = [line for line in recorded if line not in states]
        if unseen:
            # decoded together (one call, not thousands); the group's content matched its name, so
            # its lines are the ones written, one state each: a count that differs is damage
            values = json.loads(b"[" + b",".join(unseen) + b"]")
            if type(values) is not list or len(values) != len(unseen):
                return False
            for line, value in zip(unseen, values):
                state = tuple(value) if type(value) is list else ()
                states[line] = is_state(state) and current_state(state) == state  # type: ignore[arg-type]
        return all(states[line] for line in recorded)

    def store(self, key: str, result: FileResult) -> None:
        """Write an entry atomically; a cache folder that cannot be written is switched off, not fatal."""
        if not self.enabled or not self._usable():
            return
        from trainlint.engine.serial import encode_dependencies, encode_result

        try:
            groups = [encode_dependencies(run, FORMAT) for run in grouped(tuple(sorted(set(result.dependencies))))]
            names = [_named(group) for group in groups]
            data = encode_result(result, FORMAT, names)
        except (TypeError, ValueError):  # a result holding what an entry cannot say: not cached
            return
        if len(data) + _TAG + 1 > MAX_ENTRY_BYTES or any(len(group) > MAX_ENTRY_BYTES for group in groups):
            return
        for name, group in zip(names, groups):  # the dependencies first: an entry never names a missing group
            self._used.add(name)
            self._keep_row(name, group.split(b"\n")[1:])
            if name not in self._written:
                if not self._stored_already(name, len(group)) and not self._write(name, group):
                    return
                self._written.add(name)
        if self._write(key, sealed(self._signing_key, key, data)):
            self.stored += 1

    def _stored_already(self, name: str, size: int) -> bool:
        """Whether a group of `size` bytes is stored as `name` (from an earlier run). Its name is the
        hash of its content, checked when read: one edited in place is a miss, never a wrong hit."""
        try:
            return os.stat(self._entry(name), follow_symlinks=False).st_size == size
        except OSError:
            return False

    def read_entry(self, name: str) -> bytes | None:
        """The content of entry `name` (a name of 64 hex digits) when this key signed it, else None."""
        if not self.enabled or not self._usable() or not ENTRY_NAME.fullmatch(name):
            return None
        raw = read_regular(self._entry(name), MAX_ENTRY_BYTES, follow=False)
        return opened(self._signing_key, name, raw) if raw is not None else None

    def write_entry(self, name: str, content: bytes) -> None:
        """Store `content` as entry `name`, signed (the project's summaries, which outlive a run)."""
        if self.enabled and self._usable() and ENTRY_NAME.fullmatch(name) and len(content) + _TAG + 1 <= MAX_ENTRY_BYTES:
            if self._write(name, sealed(self._signing_key, name, content)):
                self.stored += 1

    def _write(self, name: str, data: bytes | Iterable[bytes]) -> bool:
        """Write an entry (its bytes, or its pieces in order) atomically; a cache folder that cannot be
        written is switched off."""
        import tempfile  # (a warm run writes nothing)

        target = self._entry(name)
        shard = os.path.dirname(target)
        try:
            try:
                os.mkdir(shard, 0o700)
            except FileExistsError:
                pass
            fd, tmp = tempfile.mkstemp(dir=shard, prefix=".tmp-")  # mode 0o600
        except OSError:
            self.enabled = False
            return False
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data) if isinstance(data, bytes) else fh.writelines(data)
            os.replace(tmp, target)  # over a FIFO or a link in its place; a folder there stays a miss
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        return True

    def close(self) -> None:
        """Write the run's index, and prune the oldest entries when the cache holds more than `max_entries`."""
        self._write_index()
        if not self.stored:
            return
        try:
            entries = [e for shard in os.scandir(self.directory) if shard.is_dir(follow_symlinks=False)
                       for e in os.scandir(shard.path) if ENTRY_NAME.fullmatch(e.name) or TEMPORARY_NAME.fullmatch(e.name)]
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
