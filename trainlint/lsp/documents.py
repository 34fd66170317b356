"""What the server keeps of each open document, and how a lint's result becomes what it publishes.

Apart from pygls and lsprotocol, so that the first lint, made before they are loaded (`early.py`),
is published as the server publishes it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

from trainlint.diagnostics import Diagnostic
from trainlint.engine.results import PARSE_ERROR, FileResult

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
def clean_text(source: str) -> str:
    """The buffer with lone surrogates (which no encoder accepts) as U+FFFD; UTF-16 positions keep."""
    return _LONE_SURROGATE.sub("\ufffd", source)


def split_lines(source: str) -> list[str]:
    """Lines as LSP counts them (ended by \\n, \\r\\n or \\r only), with their endings."""
    return io.StringIO(source, newline="").readlines()


def still_in_place(found: list[Diagnostic], then: list[str], now: list[str]) -> list[Diagnostic]:
    """The findings of text `then` whose lines (first to last, and the calls of their chains in this
    buffer) are unchanged at the same place in `now`: a finding whose line moved or was edited would be
    drawn on other code, so it is left out (it comes back, where it belongs, when the text parses
    again). Line endings are not compared: typing a line after the last one gives it one."""

    def same(line: int) -> bool:
        return 0 < line <= min(len(then), len(now)) and then[line - 1].rstrip("\r\n") == now[line - 1].rstrip("\r\n")

    def in_place(d: Diagnostic) -> bool:
        calls = [loc.line for chain in d.chains for loc in chain if loc.path == d.path]
        return all(same(line) for line in [*range(d.line, max(d.line, d.end_line) + 1), *calls])

    return [d for d in found if in_place(d)]


@dataclass
class DocumentState:
    """What the server last published for one open document."""

    version: int | None = None
    lines: list[str] = field(default_factory=list)  # the text those findings belong to
    diagnostics: list[Diagnostic] = field(default_factory=list)
    last_good: list[Diagnostic] = field(default_factory=list)  # findings of the last text that parsed
    last_good_lines: list[str] = field(default_factory=list)  # ... and that text
    fix_checked: dict[Diagnostic, bool] = field(default_factory=dict)  # whether each fix passed the re-check

    def linted(self, version: int | None, source: str, result: FileResult) -> None:
        """Take in the result of linting `source` (the document at `version`): what is published."""
        parse_errors = [d for d in result.diagnostics if d.code == PARSE_ERROR[0]]
        lines = split_lines(source)
        if parse_errors and not result.internal_error:
            # mid-edit: show where it stopped parsing, and keep those findings of the last good text
            # that still sit on the same code
            self.diagnostics = parse_errors + still_in_place(self.last_good, self.last_good_lines, lines)
        else:
            self.diagnostics = result.diagnostics
            self.last_good = [d for d in result.diagnostics if d.code != PARSE_ERROR[0]]
            self.last_good_lines = lines
        self.version, self.lines, self.fix_checked = version, lines, {}
