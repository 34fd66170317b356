"""What the commands share: the group that takes a default command, exit codes, warnings."""

from __future__ import annotations

import os

import click

from trainlint.report.text import visible, visible_lines

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


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
        return super().parse_args(ctx, args)


def _mistyped_command(word: str, commands: list[str]) -> bool:
    """A word close to a command's name that names no file: `trainlint chek` is not a missing path."""
    if word.startswith("-") or "/" in word or os.sep in word or "." in word or os.path.lexists(word):
        return False
    from difflib import get_close_matches  # (only for a word that names no file)

    return bool(get_close_matches(word, commands, n=1, cutoff=0.75))


def _warn(message: str, prefix: str = "warning: ") -> None:
    """A line on stderr; control characters in it (from a path, a script's error) shown as escapes."""
    click.echo(visible(f"{prefix}{message}"), err=True)


def _warn_lines(message: str, prefix: str = "warning: ") -> None:
    """`_warn` for a message that may span lines (a script's error with a DataLoader worker's
    traceback): each line escaped on its own, the lines after the first indented under it, so that
    none reads as a line of ours."""
    first, *rest = visible_lines(message)
    click.echo(visible(prefix) + first + "".join("\n" + (f"  {line}" if line else "") for line in rest), err=True)
