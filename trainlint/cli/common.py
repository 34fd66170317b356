"""What the commands share: the group that takes a default command, exit codes, warnings."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence, TextIO

import click

from trainlint.report.text import visible, visible_lines

if TYPE_CHECKING:
    from trainlint.engine.cache import Cache

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
IMPLICIT_COMMAND = "trainlint.implicit_command"  # in `ctx.meta`: the command was not named (`trainlint src/`)


class DefaultGroup(click.Group):
    """A group with a default command: `trainlint src/` means `trainlint check src/`, and
    `trainlint verify src/` means `trainlint verify probes src/`."""

    def __init__(self, *args: object, default: str = "check", **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.default = default

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            if args and _mistyped_command(args[0], list(self.commands)):
                from difflib import get_close_matches

                close = get_close_matches(args[0], list(self.commands), n=1)
                raise click.UsageError(f"{args[0]!r} is neither a command nor a path: did you mean {close[0]!r}?", ctx)
            args = [self.default, *args]
            ctx.meta[IMPLICIT_COMMAND] = True  # (its first path must then exist: see `check`)
        return super().parse_args(ctx, args)


def _mistyped_command(word: str, commands: list[str]) -> bool:
    """A word close to a command's name that names no file: `trainlint chek` is not a missing path."""
    if word.startswith("-") or "/" in word or os.sep in word or "." in word or os.path.lexists(word):
        return False
    from difflib import get_close_matches  # (only for a word that names no file)

    return bool(get_close_matches(word, commands, n=1, cutoff=0.75))


class _Silence:
    """`check --silent` (ruff's `-s`): no line on stderr but errors (set by `check`)."""

    on = False


silence = _Silence()


def _warn(message: str, prefix: str = "warning: ") -> None:
    """A line on stderr; control characters in it (from a path, a script's error) shown as escapes."""
    if silence.on and "error" not in prefix:
        return
    click.echo(visible(f"{prefix}{message}"), err=True)


@contextmanager
def writing_to(where: str = "standard output", what: str = "output") -> Iterator[None]:
    """Around what a command prints: a write that fails (a full disk, a failing device) ends the run
    with exit 2 and one line on stderr, as `-o FILE` does, not with a traceback and exit 1 (which would
    say "findings"). A closed pipe (`| head`) is left to click, which ends the run quietly."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        say_unwritten(what, where, exc)
        sys.exit(EXIT_ERROR)


def unflushed(stream: TextIO) -> OSError | None:
    """Flush `stream`; the error if what it holds could not be written (a closed pipe is none: its
    reader has what it wanted)."""
    try:
        stream.flush()
    except BrokenPipeError:
        return None
    except OSError as exc:
        return exc
    except ValueError:  # closed
        return None
    return None


def say_unwritten(what: str, where: str, exc: OSError) -> None:
    """The one line that says the output was lost; best effort, as standard error may fail too."""
    try:
        _warn(f"cannot write the {what} to {where}: {exc.strerror or exc}", prefix="trainlint: error: ")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def refuse_overwriting(sources: Sequence[Path], outputs: Sequence[tuple[str, Path | None, str]]) -> None:
    """Exit 2 when a file the run would write (option, path, what) is one of the files it lints:
    `-o train.py train.py` would replace the code with its report. The same file under another
    spelling, or through a symbolic or a hard link, is found by its device and inode."""
    written = []
    for option, output, what in outputs:
        try:
            if output is not None:
                found = output.stat()
                written.append((option, output, what, (found.st_dev, found.st_ino)))
        except (OSError, ValueError):
            pass  # not there yet: it cannot be a file this run lints
    if not written:
        return
    for source in sources:
        try:
            found = source.stat()
        except (OSError, ValueError):
            continue
        for option, output, what, identity in written:
            if (found.st_dev, found.st_ino) == identity:
                same = "" if os.path.normpath(source) == os.path.normpath(output) else f" (the same file as {source})"
                _warn(f"{option} {output}{same} is a file being linted: refusing to overwrite it with the {what}", prefix="trainlint: error: ")
                sys.exit(EXIT_ERROR)


def result_cache(no_cache: bool, directory: Path | None) -> Cache | None:
    """The result cache of a `check` run (None with --no-cache)."""
    if no_cache:
        return None
    from trainlint.engine.cache import Cache
    from trainlint.engine.cache_folder import KEY_VARIABLE, CacheKeyError, default_directory, load_key

    try:
        key = load_key()  # (read once: every entry read or written is authenticated with it)
    except CacheKeyError as exc:
        _warn(f"{exc}; results are not cached (set {KEY_VARIABLE}, or pass --no-cache)")
        return None
    return Cache(directory or default_directory(), key=key)


def _warn_lines(message: str, prefix: str = "warning: ") -> None:
    """`_warn` for a message that may span lines (a script's error with a DataLoader worker's
    traceback): each line escaped on its own, the lines after the first indented under it, so that
    none reads as a line of ours."""
    first, *rest = visible_lines(message)
    click.echo(visible(prefix) + first + "".join("\n" + (f"  {line}" if line else "") for line in rest), err=True)
