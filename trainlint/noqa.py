"""Suppression comments: `# noqa`, `# noqa: TL101, TL401`, and file-level `# trainlint: noqa[: CODES]`."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,?\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_FILE_NOQA = re.compile(
    r"#\s*trainlint:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,?\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE
)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)


@dataclass
class Suppressions:
    """Codes suppressed per line (None: all codes) and for the whole file."""

    lines: dict[int, frozenset[str] | None] = field(default_factory=dict)
    file_all: bool = False
    file_codes: frozenset[str] = frozenset()

    def suppressed(self, code: str, line: int, end_line: int | None = None) -> bool:
        if self.file_all or code in self.file_codes:
            return True
        for ln in {line, end_line or line}:
            if ln in self.lines:
                codes = self.lines[ln]
                if codes is None or code in codes:
                    return True
        return False


def _codes(text: str | None) -> frozenset[str] | None:
    if not text:
        return None
    return frozenset(c.upper() for c in _CODE.findall(text))


def parse_suppressions(source: str) -> Suppressions:
    """Read suppression comments from real comment tokens, so `"# noqa"` in a string does not count."""
    result = Suppressions()
    if "noqa" not in source.lower():
        return result
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return result
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        file_match = _FILE_NOQA.search(tok.string)
        if file_match:
            codes = _codes(file_match.group("codes"))
            if codes is None:
                result.file_all = True
            else:
                result.file_codes |= codes
            continue
        match = _NOQA.search(tok.string)
        if match:
            result.lines[tok.start[0]] = _codes(match.group("codes"))
    return result
