"""Suppression comments: `# noqa`, `# noqa: TL101, TL401`, and file-level `# trainlint: noqa[: CODES]`.

Also the two tools built on them: TL001 unused-noqa (a `# noqa: TL...` code that suppressed nothing
in a run of its rule, ruff's RUF100; off by default) and `--add-noqa` (the comment that silences each
finding, merged into an existing `# noqa: ...`).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Collection, Iterable, Sequence

from trainlint.diagnostics import Diagnostic, Edit, Fix, Severity

_CODES = r"(?P<codes>[A-Z]+[0-9]+(?:\s*,?\s*[A-Z]+[0-9]+)*)"
_NOQA = re.compile(rf"#\s*noqa(?::\s*{_CODES})?", re.IGNORECASE)
_FILE_NOQA = re.compile(rf"#\s*trainlint:\s*noqa(?::\s*{_CODES})?", re.IGNORECASE)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)

UNUSED_NOQA = ("TL001", "unused-noqa")
UNUSED_NOQA_SUMMARY = "A `# noqa: TL...` code that suppresses nothing."
UNUSED_NOQA_HINT = "Remove the code from the `# noqa` comment (the fix does)."
UNUSED_NOQA_PAGE = """\
# TL001 unused-noqa

Severity: **warning** · Default: **off (enable with `--extend-select TL001`)**

## What it does

Reports a trainlint code in a `# noqa: ...` comment that suppressed nothing: the rule ran on the
file and found nothing on that line. Such a comment is left over from code that changed, and it
would hide a real finding there later. Like ruff's RUF100.

Only codes of rules that ran on the file are checked: codes of other tools (`E501`, `F401`), codes
of rules that are not selected or are ignored for the file, and a bare `# noqa` are never reported.

## Example

```python
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()  # noqa: TL401
```

## Fix

A safe fix removes the unused codes, and the comment when nothing is left in it.
"""


@dataclass
class Comment:
    """A `# noqa` comment: its line, its columns (0-based, in code points) and the match in it."""

    line: int
    start: int
    end: int
    text: str
    match: re.Match[str]
    codes: frozenset[str] | None
    code_end: int  # where the code before the comment ends (its trailing blanks excluded)


@dataclass
class Suppressions:
    """Codes suppressed per line (None: all codes) and for the whole file; records what was used."""

    lines: dict[int, frozenset[str] | None] = field(default_factory=dict)
    file_all: bool = False
    file_codes: frozenset[str] = frozenset()
    comments: dict[int, Comment] = field(default_factory=dict)
    used: set[tuple[int, str]] = field(default_factory=set)

    def suppressed(self, code: str, line: int, end_line: int | None = None) -> bool:
        if self.file_all or code in self.file_codes:
            return True
        for ln in sorted({line, end_line or line}):
            if ln in self.lines:
                codes = self.lines[ln]
                if codes is None or code in codes:
                    self.used.add((ln, code))
                    return True
        return False

    def names(self, code: str, line: int) -> bool:
        """Whether a comment on `line` names `code` (`# noqa: TL401`), which a calling line needs to
        drop a call chain: a bare `# noqa` there is about that line's own code (a long call, say)."""
        codes = self.lines.get(line)
        if codes is not None and code in codes:
            self.used.add((line, code))
            return True
        return False

    def unused(self, path: str, ran: Collection[str]) -> list[Diagnostic]:
        """TL001 for each comment naming codes of rules in `ran` that suppressed nothing."""
        if self.file_all or UNUSED_NOQA[0] in self.file_codes:
            return []
        out = []
        for comment in self.comments.values():
            unused = sorted(c for c in comment.codes or () if c in ran and (comment.line, c) not in self.used)
            if unused:
                out.append(_unused_diagnostic(path, comment, unused))
        return out


def _unused_diagnostic(path: str, comment: Comment, unused: list[str]) -> Diagnostic:
    kept = [c for c in _CODE.findall(comment.match.group("codes") or "") if c.upper() not in unused]
    before, after = comment.text[: comment.match.start()], comment.text[comment.match.end() :]
    start, end = comment.start + comment.match.start(), comment.start + comment.match.end()
    content = f"# noqa: {', '.join(kept)}" if kept else ""
    if not kept and before.strip():  # `# type: ignore  # noqa: TL401`: drop the directive and its blanks
        start = comment.start + len(before.rstrip())
    elif not kept and after.strip():  # `# noqa: TL401 reason`: keep a comment for the reason
        content = "#"
    elif not kept:  # the comment is all directive: drop it and the blanks before it
        start = comment.code_end
    listed = ", ".join(unused)
    return Diagnostic(
        code=UNUSED_NOQA[0],
        name=UNUSED_NOQA[1],
        message=f"unused `noqa` directive: {listed} suppressed nothing here",
        severity=Severity.WARNING,
        path=path,
        line=comment.line,
        column=comment.start + 1,
        end_line=comment.line,
        end_column=comment.end + 1,
        hint=UNUSED_NOQA_HINT,
        fix=Fix(f"remove unused `noqa` code{'s' if len(unused) > 1 else ''} {listed}", (Edit(comment.line, start + 1, comment.line, end + 1, content),)),
    )


def _codes(text: str | None) -> frozenset[str] | None:
    if not text:
        return None
    return frozenset(c.upper() for c in _CODE.findall(text))


def _comment_tokens(source: str) -> Iterable[tokenize.TokenInfo]:
    try:
        return [tok for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return []


def parse_suppressions(source: str) -> Suppressions:
    """Read suppression comments from real comment tokens, so `"# noqa"` in a string does not count."""
    result = Suppressions()
    if "noqa" not in source.lower():
        return result
    lines = source.split("\n")  # numbered as tokenize numbers them (not at \f or \x1c)
    for tok in _comment_tokens(source):
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
            line = tok.start[0]
            codes = _codes(match.group("codes"))
            result.lines[line] = codes
            text = lines[line - 1] if line <= len(lines) else ""
            code_end = len(text[: tok.start[1]].rstrip())
            result.comments[line] = Comment(line, tok.start[1], tok.end[1], tok.string, match, codes, code_end)
    return result


def noqa_edits(source: str, diagnostics: Sequence[Diagnostic]) -> list[Edit]:
    """`--add-noqa`: per line, the edit that adds `# noqa: CODES` for its findings (none when already there).

    The comment goes on the finding's first line, or its last when the first ends inside a string;
    an existing `# noqa: X` on that line gets the codes merged in, and a bare `# noqa` is left alone.
    """
    tokens = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    ends = {tok.end[0] for tok in tokens if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT)}
    ends |= {tok.start[0] for tok in tokens if tok.type == tokenize.ENDMARKER}
    comments = {tok.start[0]: tok for tok in tokens if tok.type == tokenize.COMMENT}
    wanted: dict[int, set[str]] = {}
    for d in diagnostics:
        line = next((ln for ln in (d.line, d.end_line) if ln in ends), None)
        if line is not None and d.code not in ("TL000", UNUSED_NOQA[0]):
            wanted.setdefault(line, set()).add(d.code)
    lines = source.split("\n")  # numbered as tokenize numbers them (not at \f or \x1c)
    edits = []
    for line, codes in sorted(wanted.items()):
        comment = comments.get(line)
        match = _NOQA.search(comment.string) if comment is not None else None
        if comment is not None and match is not None:
            present = _codes(match.group("codes"))
            if present is None or codes <= present:
                continue
            merged = ", ".join([*_CODE.findall(match.group("codes")), *sorted(codes - present)])
            start = comment.start[1] + match.start()
            edits.append(Edit(line, start + 1, line, comment.start[1] + match.end() + 1, f"# noqa: {merged}"))
            continue
        text = lines[line - 1] if line <= len(lines) else ""
        end = len(text.rstrip("\r")) + 1
        edits.append(Edit(line, end, line, end, f"  # noqa: {', '.join(sorted(codes))}"))
    return edits
