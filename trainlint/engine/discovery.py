"""Which files to lint: Python files and notebooks under the given paths, honouring .gitignore and excludes."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainlint.config import DEFAULT_EXCLUDES
from trainlint.patterns import excluded_by
from trainlint.reading import read_text_lines

if TYPE_CHECKING:
    import pathspec


@dataclass(frozen=True)
class Target:
    path: Path
    explicit: bool  # named on the command line: linted even if an exclude would match


def _spec(patterns: list[str]) -> pathspec.PathSpec:
    import pathspec  # only when there are patterns: its import costs more than a warm run of one file

    return pathspec.GitIgnoreSpec.from_lines(patterns)


def _gitignore(directory: Path) -> pathspec.PathSpec | None:
    lines = read_text_lines(directory / ".gitignore", limit=10_000_000)  # a FIFO named .gitignore must not block
    return _spec(lines) if lines else None


def present(path: Path) -> bool:
    """Whether a path names something, a dangling or looping link included.

    Only "no such file" counts as absent: a path that exists but cannot be examined (a folder
    that is not searchable, a link loop) is present, and reading it reports what is wrong.
    """
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def is_deepspeed_config(name: str) -> bool:
    """JSON files named like DeepSpeed configs: `ds_config.json`, `deepspeed_zero2.json`."""
    lower = name.lower()
    return lower.endswith(".json") and (lower.startswith("ds_") or "deepspeed" in lower or "ds_config" in lower)


def is_excluded(path: Path, root: Path, exclude: tuple[str, ...]) -> bool:
    """Whether a user `exclude` pattern (gitignore syntax, relative to the config root, or to the
    folder of the configuration that wrote it: `patterns.FolderPattern`) matches."""
    return excluded_by(exclude, path, root)


def discover(
    paths: list[Path], root: Path, exclude: tuple[str, ...] = (), force_exclude: bool = False
) -> list[Target]:
    """Files to lint, sorted. Explicit files are kept unless `force_exclude` and an exclude matches."""
    found: dict[Path, Target] = {}
    for given in paths:
        if not _is_dir(given):
            if force_exclude and is_excluded(given, root, exclude):
                continue
            found[given] = Target(given, explicit=True)
            continue
        ignores: list[tuple[Path, pathspec.PathSpec]] = []
        unreadable: list[OSError] = []
        for directory, dirnames, filenames in os.walk(given, onerror=unreadable.append):
            here = Path(directory)
            spec = _gitignore(here)
            if spec is not None:
                ignores.append((here, spec))
            ignores = [(base, s) for base, s in ignores if here == base or base in here.parents]

            def ignored(p: Path, is_dir: bool) -> bool:
                for base, s in ignores:
                    rel = p.relative_to(base).as_posix() + ("/" if is_dir else "")
                    if s.match_file(rel):
                        return True
                return excluded_by(exclude, p, root)

            dirnames[:] = sorted(
                d for d in dirnames if d not in DEFAULT_EXCLUDES and not d.endswith(".egg-info") and not ignored(here / d, True)
            )
            for name in sorted(filenames):
                if not name.endswith((".py", ".ipynb")) and not is_deepspeed_config(name):
                    continue
                path = here / name
                if not ignored(path, False):
                    found.setdefault(path, Target(path, explicit=False))
        # a folder that cannot be listed is reported (its read fails with the reason), not skipped silently
        for error in unreadable:
            if error.filename is not None:
                path = Path(error.filename)
                found.setdefault(path, Target(path, explicit=False))
    return sorted(found.values(), key=lambda t: str(t.path))
