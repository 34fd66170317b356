"""What linting one file produces, and the TL000 diagnostics of a file that could not be linted."""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field

from trainlint.diagnostics import Chain, Diagnostic, Location, Severity

PARSE_ERROR = ("TL000", "parse-error")
IO_ERROR = ("TL000", "io-error")  # a path that cannot be read at all (missing): nothing was parsed


@dataclass(frozen=True)
class StepScope:
    """Code the analysis takes to run every training step (`--show-steps`): a step loop or a per-step
    function, and why (`what`, and one call chain that makes it per step)."""

    where: Location
    what: str
    chain: Chain = ()


@dataclass
class FileResult:
    """The outcome of linting one file."""

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: str | None = None
    internal_error: bool = False
    # False for an outcome that depends on the machine, not the file (a crash, the time or memory limit)
    cacheable: bool = True
    # the states of other files the result depends on (local modules it imports, paths it looked
    # for, folders whose modules may call it), by content where it read them: see reading.py
    dependencies: tuple[tuple[str, int, str], ...] = ()
    steps: list[StepScope] = field(default_factory=list)  # asked for by `show_steps` only
    # project modules whose summary could not be made within its own time budget: read as unknown
    unknown_summaries: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return any(d.code == PARSE_ERROR[0] for d in self.diagnostics)


def could_not_analyse(path: str, why: str) -> Diagnostic:
    """The TL000 of a file that was refused or lost: its pre-check, a crash, the time or memory limit."""
    return error_diagnostic(path, f"could not be analysed: {why}")


def error_diagnostic(path: str, message: str, line: int = 1, column: int = 1, name: str = PARSE_ERROR[1]) -> Diagnostic:
    """A TL000 at a position of the file: it cannot be read, decoded, parsed or analysed (`name`
    says which: `parse-error`, or `io-error` for a path that does not exist)."""
    return Diagnostic(
        code=PARSE_ERROR[0],
        name=name,
        message=message,
        severity=Severity.ERROR,
        path=path,
        line=line,
        column=column,
        end_line=line,
        end_column=column,
    )


def decode(data: bytes) -> str:
    """Decode source bytes by their PEP 263 cookie (UTF-8 by default); raises UnicodeDecodeError/SyntaxError."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text
