"""A finding's fingerprint: the same finding keeps it while code around it changes.

Made of the rule's code, the file's path, the offending code (the finding's span, whitespace
collapsed) and the line that holds it, and the finding's rank among findings with all of these
equal; so lines moving, edits elsewhere in the file and a renamed enclosing function leave it as it
is, and an edit of the offending line itself makes a new finding. A finding reached through a call
chain is located at its offending end, so that end is what counts; a notebook's finding is read in
its cell's text. Used by the GitLab report and by baselines.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import TYPE_CHECKING, Sequence

from trainlint.diagnostics import Diagnostic

if TYPE_CHECKING:
    from trainlint.report.text import SourceLines


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def offending_text(d: Diagnostic, sources: SourceLines) -> tuple[str, str]:
    """The finding's span and its first line, whitespace collapsed ("" where the source is unknown)."""
    lines = sources.get((d.path, d.cell))
    if not lines or not 1 <= d.line <= len(lines):
        return "", ""
    first = lines[d.line - 1]
    if d.end_line == d.line:
        span = first[d.column - 1 : d.end_column - 1]
    else:
        last = lines[min(d.end_line, len(lines)) - 1]
        span = "\n".join([first[d.column - 1 :], *lines[d.line : d.end_line - 1], last[: d.end_column - 1]])
    return _collapsed(span), _collapsed(first)


def fingerprints(diagnostics: Sequence[Diagnostic], sources: SourceLines) -> list[str]:
    """One fingerprint per diagnostic, in order (diagnostics sorted by position give stable ranks)."""
    seen: Counter[tuple[str, ...]] = Counter()
    out = []
    for d in diagnostics:
        span, line = offending_text(d, sources)
        if not span and not line:  # no source (standard input gone): the message stands in for the code
            span = d.message
        key = (d.code, d.path.replace("\\", "/"), span, line)
        seen[key] += 1
        digest = hashlib.sha256("\x1f".join((*key, str(seen[key]))).encode("utf-8", "surrogatepass")).hexdigest()
        out.append(digest[:32])
    return out
