"""The cache's folder on disk: where it is, the key that authenticates its entries, the marker that
says which of its folders trainlint made, and removing only what is provably the cache's.

The folder may be any folder a user named (`--cache-dir`, `TRAINLINT_CACHE_DIR`), a data set's by a
typo: trainlint changes nothing of it but what it made there. A folder it finds keeps its mode (a
team's setgid folder stays one); the entries live in a sub-folder `v<FORMAT>`, private to its user,
that the marker (`MARKER`, at the root) names. The key lives outside every cache folder, so that
whoever can write a cache (a CI cache restored from another branch) cannot sign entries.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from trainlint.reading import digest, read_regular

MARKER = "trainlint-cache.tag"  # at the cache's root: the `v<N>` folders trainlint made there
KEY_VARIABLE = "TRAINLINT_CACHE_KEY"
_SIGNATURE = b"Signature: trainlint result cache\n"
_MARKER_NOTE = (
    b"This folder holds trainlint's result cache: the v<N> folders named above hold its entries.\n"
    b"`trainlint clean` removes them and this file; nothing else here is trainlint's.\n"
)
ENTRY_NAME = re.compile(r"[0-9a-f]{64}")  # in a shard named by its first two digits: v<N>/ab/ab...
TEMPORARY_NAME = re.compile(r"\.tmp-[a-z0-9_]{8}")  # what tempfile.mkstemp(prefix=".tmp-") names
_SHARD = re.compile(r"[0-9a-f]{2}")
_VERSION = re.compile(r"v([1-9][0-9]{0,5})")


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


class CacheKeyError(Exception):
    """No key to authenticate the cache's entries with; the message says why."""


def config_directory() -> Path:
    """`XDG_CONFIG_HOME` (when absolute, as the specification asks), else the platform's user
    configuration folder."""
    explicit = os.environ.get("XDG_CONFIG_HOME")
    if explicit and os.path.isabs(explicit):
        return Path(explicit)
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    return Path.home() / ".config"


def key_file() -> Path:
    """The per-user key file, used when `TRAINLINT_CACHE_KEY` is not set: outside every cache folder,
    so that whoever can write a cache cannot read or replace the key."""
    return config_directory() / "trainlint" / "cache-key"


def load_key() -> bytes:
    """The key that authenticates cache entries (read once a run): `TRAINLINT_CACHE_KEY`, else the
    key file, created with 32 random bytes (mode 0o600) when missing. Raises CacheKeyError when the
    file cannot be created or read, or others could read or write it."""
    explicit = os.environ.get(KEY_VARIABLE)
    if explicit:
        return _derived(explicit.encode("utf-8", "surrogateescape"))
    path = key_file()
    secret = _read_key_file(path)
    if secret is None:
        _create_key_file(path)
        secret = _read_key_file(path)
        if secret is None:
            raise CacheKeyError(f"the cache key file {path} was removed as it was made")
    return _derived(secret)


def _derived(secret: bytes) -> bytes:
    """A key of the size BLAKE2b takes (at most 64 bytes) from a secret of any length."""
    hashed = digest()
    hashed.update(b"trainlint cache key\0")
    hashed.update(secret)
    return hashed.digest()


def _read_key_file(path: Path) -> bytes | None:
    """The key file's secret; None when there is no file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CacheKeyError(f"cannot read the cache key file {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CacheKeyError(f"the cache key file {path} is not a regular file")
        if hasattr(os, "geteuid") and (info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077):
            # another user who can read it can sign entries; one who can write it can choose the key
            raise CacheKeyError(f"the cache key file {path} is not private to its owner (chmod 600 it, or delete it for a new key)")
        data = os.read(fd, 4097)
    except OSError as exc:
        raise CacheKeyError(f"cannot read the cache key file {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    secret = data.strip()
    if not secret or len(data) > 4096:
        raise CacheKeyError(f"the cache key file {path} holds no key (delete it for a new one)")
    return secret


def _create_key_file(path: Path) -> None:
    """Write a new random key to `path` (0o600), unless another run made one meanwhile: keep theirs,
    so that the entries it signed stay valid."""
    import tempfile  # (only the first run makes a key)

    secret = os.urandom(32).hex().encode("ascii") + b"\n"
    try:
        os.makedirs(path.parent, mode=0o700, exist_ok=True)  # (a folder already there keeps its mode)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cache-key-")  # mode 0o600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(secret)
            try:
                os.link(tmp, path)  # whole or not at all, and never over another run's key
            except FileExistsError:
                pass
            except OSError:  # a file system without hard links
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
                except FileExistsError:
                    return
                with os.fdopen(fd, "wb") as fh:
                    fh.write(secret)
        finally:
            os.unlink(tmp)
    except OSError as exc:
        raise CacheKeyError(f"cannot create the cache key file {path}: {exc.strerror or exc}") from None


def marked_formats(root: Path) -> frozenset[int]:
    """The formats whose `v<N>` folders the marker at `root` says trainlint made (none without it)."""
    raw = read_regular(os.path.join(root, MARKER), 4096, follow=False)
    if raw is None or not raw.startswith(_SIGNATURE):
        return frozenset()
    for line in raw.splitlines():
        if line.startswith(b"formats:"):
            return frozenset(int(f) for f in line[8:].split() if f.isdigit() and len(f) <= 6)
    return frozenset()


def write_marker(root: Path, formats: frozenset[int]) -> bool:
    """Write the marker naming `formats` (atomically: a concurrent run reads the old one or the new)."""
    text = _SIGNATURE + b"formats: " + " ".join(str(f) for f in sorted(formats)).encode("ascii") + b"\n" + _MARKER_NOTE
    tmp = os.path.join(root, f".{MARKER}.{os.getpid()}")
    flags = (os.O_WRONLY | os.O_CREAT | os.O_TRUNC  # (never through a link, nor waiting on a FIFO put there)
             | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(tmp, flags, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text)
        os.replace(tmp, os.path.join(root, MARKER))
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True


def user_folder(path: Path) -> bool:
    """Create `path` (private) when it is missing; whether it is a folder of this user. A folder that
    exists keeps its mode: the entries go in a private sub-folder of their own."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        return False
    return not hasattr(os, "geteuid") or info.st_uid == os.geteuid()  # whoever owns it could replace the entries' folder


def private_subfolder(path: Path) -> bool:
    """Create trainlint's own folder of entries (0o700), or make it private again; False when it is
    not a folder of this user (a link, a file, another's)."""
    try:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            return False
        if hasattr(os, "geteuid"):
            if info.st_uid != os.geteuid():
                return False
            if stat.S_IMODE(info.st_mode) & 0o077:
                os.chmod(path, 0o700)  # (the marker names it: it is trainlint's, not the user's)
        return True
    except OSError:
        return False


class Cleaning:
    """What removing a cache did: the entries removed, the `v<N>` folders emptied and removed, what
    it left there with why, and the other names at the root (not trainlint's, never looked into)."""

    def __init__(self) -> None:
        self.entries = 0
        self.folders: list[str] = []
        self.left: list[tuple[str, str]] = []
        self.others: list[str] = []


def clean(root: Path) -> Cleaning:
    """Remove the cache at `root`, only what is provably trainlint's (see `remove_entries`); then the
    marker, when no folder it names is left, and `root` itself when nothing else is in it."""
    done = remove_entries(root, marked_formats(root))
    marked = marked_formats(root)
    if marked and not any(os.path.lexists(os.path.join(root, f"v{n}")) for n in marked):
        try:
            os.unlink(os.path.join(root, MARKER))
        except OSError:
            pass
    try:
        os.rmdir(root)  # only when nothing else is left in it
    except OSError:
        pass
    return done


def remove_entries(root: Path, marked: frozenset[int], earlier_than: int | None = None) -> Cleaning:
    """Remove the entries of the `v<N>` folders at `root` (of formats before `earlier_than` only, when
    given). The cache folder may be any folder a user named (a data set's, by a typo), so only what has
    the exact shapes trainlint writes goes (`v<N>/<2 hex>/<the same 2 hex + 62 hex>` and its temporary
    files, regular files all): every such file of a folder the marker names, and those of a folder it
    does not name (written before the marker existed, or not by trainlint) only when everything in
    that folder has those shapes. Anything else stays, and is listed with why."""
    done = Cleaning()
    try:
        with os.scandir(root) as listing:
            found = sorted(listing, key=lambda e: e.name)
    except OSError:
        return done
    for folder in found:
        version = _VERSION.fullmatch(folder.name)
        if version is None:
            if earlier_than is None and not (folder.name == MARKER and marked):
                done.others.append(folder.name)
            continue
        number = int(version[1])
        if earlier_than is not None and number >= earlier_than:
            continue
        if not folder.is_dir(follow_symlinks=False):
            done.left.append((folder.path, "trainlint makes a folder there, not a link or a file"))
            continue
        entries, shards, strangers = _survey(folder.path, complete=number in marked)
        if strangers == [folder.path]:
            done.left.append((folder.path, "it cannot be read"))
            continue
        if strangers and number not in marked:
            done.left.append((folder.path, f"it holds {os.path.relpath(strangers[0], root)}, which trainlint does not write, "
                                           f"and no trainlint marker names the folder ({MARKER})"))
            continue
        for entry in entries:
            try:
                os.unlink(entry)
                done.entries += 1
            except OSError:
                pass
        for empty in shards:
            try:
                os.rmdir(empty)
            except OSError:
                pass
        try:
            os.rmdir(folder.path)
            done.folders.append(folder.path)
        except OSError:
            pass
        done.left.extend((s, "not a file trainlint writes") for s in strangers)
    return done


def _survey(folder: str, complete: bool) -> tuple[list[str], list[str], list[str]]:
    """The entries and shards of a `v<N>` folder, and what else is in it (when not `complete`, only
    the first such thing: enough to leave the folder alone)."""
    entries: list[str] = []
    strangers: list[str] = []
    try:
        with os.scandir(folder) as listing:
            children = list(listing)
    except OSError:
        return [], [], [folder]
    shards = []
    for child in children:  # (everything at this level first: a stray file here is found without descending)
        if _SHARD.fullmatch(child.name) and child.is_dir(follow_symlinks=False):
            shards.append(child)
        else:
            strangers.append(child.path)
            if not complete:
                return entries, [], strangers
    for shard in shards:
        try:
            with os.scandir(shard.path) as listing:
                for e in listing:
                    if ((ENTRY_NAME.fullmatch(e.name) and e.name.startswith(shard.name)) or TEMPORARY_NAME.fullmatch(e.name)) \
                            and e.is_file(follow_symlinks=False):
                        entries.append(e.path)
                    else:
                        strangers.append(e.path)
                        if not complete:
                            return entries, [], strangers
        except OSError:
            strangers.append(shard.path)
            if not complete:
                return entries, [], strangers
    return entries, [s.path for s in shards], strangers
