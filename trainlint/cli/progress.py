"""Progress of a `check` run on standard error: files done of the total, and the phase.

Whether it shows (`progress_mode`): on a terminal, once the run is still going after a second
(`TRAINLINT_PROGRESS_AFTER` seconds; tests and the recorded demo set it); never on a pipe or in CI
logs unless `--progress` asks (then as plain lines a log can hold); `--no-progress` turns it off.

Nothing is imported or drawn for a run that ends within the delay: the waiting is one timer thread,
and rich's progress display is imported only when it is due.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType

PROGRESS_AFTER_S = 1.0  # a run that ends sooner shows none
LINE_EVERY_S = 5.0  # a plain progress line (a pipe with --progress) at most this often
SUMMARISING = "summarising the project"
CHECKING = "checking"


def progress_mode(option: bool | None) -> str | None:
    """How a run shows progress: "bar" (a terminal), "lines" (a pipe or a log, with `--progress`), or
    None. Unasked, only a terminal that is not a CI job's shows it (some CI runners give a terminal)."""
    if option is False:
        return None
    terminal = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    if option is None and (not terminal or os.environ.get("CI")):
        return None
    return "bar" if terminal else "lines"


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("TRAINLINT_PROGRESS_AFTER", PROGRESS_AFTER_S)))
    except ValueError:
        return PROGRESS_AFTER_S


class Phase:
    """What the run is doing, as far as the supervisor can tell: its workers summarise the local
    modules the files import (shared through the run's summary store, whose entries it counts), and
    check the files themselves."""

    def __init__(self) -> None:
        self.summaries = 0
        self.changed = 0.0

    def now(self) -> str:
        from trainlint.project.store import shared_count

        count = shared_count()
        clock = time.monotonic()
        if count > self.summaries:
            self.summaries, self.changed = count, clock
        # (summaries are written a module at a time: a second without a new one is checking again)
        return SUMMARISING if clock - self.changed < 1.0 else CHECKING


class RunProgress:
    """A run's progress display (a context manager); `advance` as files finish, from the run's thread."""

    def __init__(self, total: int, mode: str, color: str = "auto") -> None:
        self.total, self.mode, self.color = total, mode, color
        self.done = 0
        self.started = time.monotonic()
        self.phase = Phase()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None
        self._shown = False
        # a daemon: a run interrupted with ^C must not wait for it
        self._thread = threading.Thread(target=self._show, name="trainlint-progress", daemon=True)

    def __enter__(self) -> RunProgress:
        self._thread.start()
        return self

    def advance(self, count: int = 1) -> None:
        """`count` more files are done."""
        with self._lock:
            self.done += count
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self._bar is not None:
                self._bar.stop()  # (transient: the bar is erased, the report follows)
            elif self._shown:
                self._line(f"checked {self.done}/{self.total} files in {time.monotonic() - self.started:.1f} s")

    def _show(self) -> None:
        if self._stop.wait(_delay()):
            return  # ended within the delay: nothing shown
        if self.mode == "bar":
            with self._lock:
                if not self._stop.is_set():
                    self._start_bar()
            return
        last = ""
        while True:
            with self._lock:
                said = f"{self.phase.now()}: {self.done}/{self.total} files"
                if said != last:
                    self._line(f"{said} ({time.monotonic() - self.started:.0f} s)")
                    last, self._shown = said, True
            if self._stop.wait(LINE_EVERY_S):
                return

    def _start_bar(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
        from rich.text import Text

        from trainlint.report.render import make_console

        phase = self.phase

        class PhaseColumn(ProgressColumn):
            """The phase, read again at each refresh (a file can take long: the bar itself may not move)."""

            def render(self, task: Any) -> Text:
                return Text(f"{phase.now():<23}", style="progress.description")

        self._bar = Progress(
            PhaseColumn(), BarColumn(), MofNCompleteColumn(), TextColumn("files"), TimeElapsedColumn(),
            console=make_console(self.color, stderr=True), transient=True, refresh_per_second=4,
        )
        self._task = self._bar.add_task("check", total=self.total, completed=self.done)
        self._bar.start()

    @staticmethod
    def _line(text: str) -> None:
        try:
            sys.stderr.write(f"trainlint: {text}\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed stream: progress is not worth an error
            pass
