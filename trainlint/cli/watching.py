"""`trainlint check --watch`: lint, then lint again whenever something linted changes, as ruff's
`--watch` does. Polls the times and sizes of the files the last run linted, their folders (a file
added or removed changes its folder), the paths given and the configurations that applied: no
file-system notification library is needed, and a run's own `--fix` does not start another."""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, NoReturn, Sequence

import click

from trainlint.cli.common import EXIT_CLEAN, silence

POLL_SECONDS = 0.5  # how often the watched paths are looked at

Snapshot = dict[Path, tuple[int, int] | None]


def snapshot(paths: Sequence[Path]) -> Snapshot:
    """Each path's (modification time in ns, size), None when it is gone; folders of files included."""
    watched = {*paths, *(p.parent for p in paths)}
    out: Snapshot = {}
    for path in watched:
        try:
            info = os.stat(path)
            out[path] = (info.st_mtime_ns, info.st_size)
        except OSError:
            out[path] = None
    return out


def _say(message: str) -> None:
    """A status line on stderr, stamped like ruff's (`[12:03:04] Watching for file changes.`)."""
    if not silence.on:
        click.echo(f"[{datetime.now():%H:%M:%S}] {message}", err=True)


def watch(lint_once: Callable[[], Sequence[Path]], poll: float = POLL_SECONDS) -> NoReturn:
    """Run `lint_once` (which returns the paths to watch) now and after each change; Ctrl-C ends it (exit 0)."""
    try:
        _say("Starting linter in watch mode...")
        while True:
            watched = list(lint_once())
            sys.stdout.flush()  # (a pipe is block-buffered: each run's report is seen when it ends)
            seen = snapshot(watched)  # taken after the run: its own --fix is not a change
            _say("Watching for file changes.")
            sys.stderr.flush()
            while snapshot(watched) == seen:
                time.sleep(poll)
            _say("File change detected...")
    except KeyboardInterrupt:
        sys.exit(EXIT_CLEAN)
