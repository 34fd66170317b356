"""Gitignore-style patterns (`exclude`, `extend-exclude`, `per-file-ignores`), each relative to the
folder of the configuration file that wrote it."""

from __future__ import annotations

from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Sequence

from trainlint.reading import resolved


@lru_cache(maxsize=256)
def _glob(pattern: str):  # type: ignore[no-untyped-def]
    import pathspec  # only when a configuration has patterns: its import costs more than a warm run

    return pathspec.GitIgnoreSpec.from_lines([pattern])


class FolderPattern(str):
    """A gitignore-style pattern (`exclude`, `extend-exclude`, a `per-file-ignores` key) written in a
    configuration file that another one `extend`s: it stays relative to the folder of the file that
    wrote it, as ruff resolves each setting's paths, not to the extending file's folder. It reads,
    compares and prints as the pattern it is."""

    folder: Path

    def __new__(cls, pattern: str, folder: Path) -> FolderPattern:
        made = super().__new__(cls, pattern)
        made.folder = folder
        return made

    def __getnewargs__(self) -> tuple[str, Path]:  # (pickled to the workers with its folder)
        return (str(self), self.folder)


def pattern_folder(pattern: str, root: Path) -> Path:
    """The folder a pattern is relative to: the file's that wrote it, else the configuration's root."""
    return pattern.folder if isinstance(pattern, FolderPattern) else root


def in_folder(patterns: Sequence[str], folder: Path) -> list[str]:
    """`patterns` of a configuration file in `folder`, as FolderPatterns (those already one, from a
    file further down the `extend` chain, keep theirs)."""
    return [FolderPattern(p, folder) if isinstance(p, str) and not isinstance(p, FolderPattern) else p for p in patterns]


def excluded_by(patterns: Sequence[str], path: Path, root: Path) -> bool:
    """Whether gitignore-style `patterns` exclude `path`: each matched against the path relative to
    its own folder (`pattern_folder`), in order, the last that matches deciding (a `!` pattern
    re-includes), as in one .gitignore; or any matching the file's bare name."""
    if not patterns:
        return False
    if not any(isinstance(p, FolderPattern) for p in patterns):  # (the usual case: one folder)
        spec = _specs(tuple(patterns))
        return spec.match_file(relative_to(path, root)) or spec.match_file(path.name)
    excluded = False
    for folder, group in groupby(patterns, key=lambda p: pattern_folder(p, root)):
        decided = _specs(tuple(group)).check_file(relative_to(path, folder)).include
        if decided is not None:
            excluded = decided
    return excluded or _specs(tuple(patterns)).match_file(path.name)


@lru_cache(maxsize=64)
def _specs(patterns: tuple[str, ...]):  # type: ignore[no-untyped-def]
    import pathspec  # (see _glob)

    return pathspec.GitIgnoreSpec.from_lines([str(p) for p in patterns])


def glob_matches(pattern: str, relative_path: str) -> bool:
    """Whether a gitignore-style glob matches a path relative to the configuration's folder."""
    return _glob(pattern).match_file(relative_path)


def relative_to(path: Path, root: Path) -> str:
    """`path` relative to `root` (both resolved), in POSIX form; as given when it is not under `root`."""
    try:
        return resolved(path).relative_to(resolved(root)).as_posix()
    except ValueError:
        return path.as_posix()
