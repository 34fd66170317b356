"""What a lint run produces: diagnostics, their fixes and severities."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

DOCS_BASE_URL = "https://github.com/trainlint/trainlint/blob/main/rules"


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Applicability(str, enum.Enum):
    """Whether a fix can be applied without review (ruff's safe/unsafe split)."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class Edit:
    """Replace the text between two 1-based (line, column) positions; end is exclusive."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str
    cell: int | None = None  # in a notebook: the cell the positions are relative to

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "content": self.content,
        }
        if self.cell is not None:
            out["cell"] = self.cell
        return out


@dataclass(frozen=True)
class Fix:
    description: str
    edits: tuple[Edit, ...]
    applicability: Applicability = Applicability.SAFE

    def to_dict(self) -> dict[str, object]:
        return {
            "description": self.description,
            "applicability": self.applicability.value,
            "edits": [e.to_dict() for e in self.edits],
        }


@dataclass(frozen=True)
class Location:
    """A place in a file (1-based line and column): a call on the way from the step loop to a finding."""

    path: str
    line: int
    column: int
    # what the analysis took the call to run, where it is no certainty: "`criterion` may be
    # `SetCriterion` (built from the configuration)"
    note: str = ""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" + (f" ({self.note})" if self.note else "")


Chain = tuple[Location, ...]


def chain_text(chain: Chain, here: str | None = None) -> str:
    """`train.py:182 → trainer.py:240`: a chain's calls, the file name left out where it is `here`."""
    return " → ".join(str(loc) if loc.path != here else f"line {loc.line}" + (f" ({loc.note})" if loc.note else "") for loc in chain)


@dataclass(frozen=True)
class Diagnostic:
    """One finding, located by 1-based lines and columns (end column exclusive)."""

    code: str
    name: str
    message: str
    severity: Severity
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    hint: str = ""
    fix: Fix | None = None
    facts: dict[str, object] = field(default_factory=dict, compare=False)
    # In a notebook: the 1-based cell (counting every cell) that `line`/`end_line` are relative to,
    # and the same span as (line, column, end_line, end_column) in the notebook file's JSON text.
    cell: int | None = None
    file_span: tuple[int, int, int, int] | None = field(default=None, compare=False)
    # How the finding's code runs every step when it sits in a function called from the step: one
    # chain of calls per per-step caller, from the step loop (or step hook) down to the function.
    chains: tuple[Chain, ...] = field(default=(), compare=False)

    @property
    def url(self) -> str:
        # TL000 has one page whatever its name says (`parse-error`, `io-error`)
        return rule_url(self.code, "parse-error" if self.code == "TL000" else self.name)

    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    @property
    def file_region(self) -> tuple[int, int, int, int]:
        """(line, column, end_line, end_column) in the file as stored (a notebook's JSON text)."""
        return self.file_span or (self.line, self.column, self.end_line, self.end_column)

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "severity": self.severity.value,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "hint": self.hint,
            "fix": self.fix.to_dict() if self.fix else None,
            "url": self.url,
            **({"cell": self.cell} if self.cell is not None else {}),
            **({"related": [self.chain_dict(c) for c in self.chains]} if self.chains else {}),
        }

    @staticmethod
    def chain_dict(chain: Chain) -> dict[str, object]:
        """A chain as JSON: the message a reader sees and each call's location."""
        return {
            "message": f"runs every step: {chain_text(chain)}",
            "locations": [{"path": loc.path, "line": loc.line, "column": loc.column, **({"note": loc.note} if loc.note else {})} for loc in chain],
        }

    def every_step_via(self) -> str:
        """` (every step via train.py:182)`: the first call of each chain, for one-line formats."""
        if not self.chains:
            return ""
        return " (every step via " + ", ".join(dict.fromkeys(str(c[0]) for c in self.chains)) + ")"


def rule_url(code: str, name: str) -> str:
    """The rule page's address in the catalogue."""
    return f"{DOCS_BASE_URL}/{code}-{name}.md"
