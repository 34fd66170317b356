"""A one-line progress display on stderr, shown only when stderr is a terminal (never in logs or pipes)."""

from __future__ import annotations

import sys
import time

from trainlint.report.text import visible


class Progress:
    """Rewrites one status line in place (`\\r`), at most every `interval` seconds."""

    def __init__(self, enabled: bool, interval: float = 0.2) -> None:
        self.enabled, self.interval = enabled, interval
        self.started = time.monotonic()
        self.shown_at = 0.0

    def show(self, text: str, force: bool = False) -> None:
        """`text` (its control characters escaped: it may name the script) with the time elapsed,
        unless one was shown less than `interval` ago."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.shown_at < self.interval:
            return
        self.shown_at = now
        sys.stderr.write(f"\r\x1b[K{visible(text)}, {now - self.started:.1f} s elapsed")
        sys.stderr.flush()

    def clear(self) -> None:
        """Erase the line, so that what follows starts on a clean one."""
        if self.enabled and self.shown_at:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
