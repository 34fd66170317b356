"""Code actions: each finding's fix and `# noqa`, and "fix all trainlint findings" (safe fixes only)."""

from __future__ import annotations

import re
from typing import Sequence

from lsprotocol import types
from lsprotocol.converters import get_converter

from trainlint.diagnostics import Applicability, Diagnostic, Edit
from trainlint.report.lsp import lsp_range, to_lsp

FIX_ALL_KIND = "source.fixAll.trainlint"
_BARE_LF = re.compile(r"(?<!\r)\n")
_converter = get_converter()  # plain LSP dicts (as `--format lsp` writes them) -> lsprotocol types


def published(d: Diagnostic, lines: Sequence[str]) -> types.Diagnostic:
    """The LSP diagnostic for a finding, as the server publishes it."""
    return _converter.structure(to_lsp(d, lines), types.Diagnostic)


def line_ending(lines: Sequence[str]) -> str:
    """The buffer's own line ending (from its first line), so that inserted lines match it."""
    first = lines[0] if lines else ""
    return "\r\n" if first.endswith("\r\n") else "\r" if first.endswith("\r") else "\n"


def text_edits(edits: Sequence[Edit], lines: Sequence[str]) -> list[types.TextEdit]:
    """LSP text edits for trainlint's 1-based edits; inserted newlines take the buffer's line ending."""
    newline = line_ending(lines)
    out = []
    for e in edits:
        r = lsp_range(e.line, e.column, e.end_line, e.end_column, lines)
        out.append(
            types.TextEdit(
                range=types.Range(start=types.Position(**r["start"]), end=types.Position(**r["end"])),  # type: ignore[arg-type]
                new_text=_BARE_LF.sub(newline, e.content) if newline != "\n" else e.content,
            )
        )
    return out


def noqa_edit(d: Diagnostic, lines: Sequence[str]) -> types.TextEdit:
    """Append `# noqa: CODE` to the finding's first line, or add the code to a noqa already there."""
    index = d.line - 1
    text = lines[index].rstrip("\r\n") if index < len(lines) else ""
    if "# noqa:" in text:
        new_text = f", {d.code}"
    elif "# noqa" in text:  # a bare noqa comment already silences everything
        new_text = ""
    else:
        new_text = f"  # noqa: {d.code}"
    character = len(text.encode("utf-16-le", "surrogatepass")) // 2
    position = types.Position(line=index, character=character)
    return types.TextEdit(range=types.Range(start=position, end=position), new_text=new_text)


def on_lines(findings: Sequence[Diagnostic], first: int, last: int) -> list[Diagnostic]:
    """Findings that touch any of the 0-based lines `first`..`last` (the cursor's lines)."""
    return [d for d in findings if d.line - 1 <= last and first <= d.end_line - 1]


def quick_fixes(uri: str, findings: Sequence[Diagnostic], lines: Sequence[str], checked: Sequence[Diagnostic]) -> list[types.CodeAction]:
    """A noqa action per finding, and its fix for the findings in `checked` (those of the current
    text whose fix passed the after-fix re-check)."""
    actions = []
    for d in findings:
        diagnostic = published(d, lines)
        if d.fix is not None and d in checked:
            safety = d.fix.applicability.value
            actions.append(
                types.CodeAction(
                    title=f"{d.code}: {d.fix.description} ({safety} fix)",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    is_preferred=safety == "safe",
                    edit=types.WorkspaceEdit(changes={uri: text_edits(d.fix.edits, lines)}),
                )
            )
        actions.append(
            types.CodeAction(
                title=f"{d.code}: silence on this line (# noqa: {d.code})",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[diagnostic],
                edit=types.WorkspaceEdit(changes={uri: [noqa_edit(d, lines)]}),
            )
        )
    return actions


def fix_all(fixed: dict[str, tuple[Sequence[Diagnostic], Sequence[str]]]) -> types.CodeAction | None:
    """One action applying every safe fix at once, as one WorkspaceEdit; None when there is none.

    `fixed` maps each document (a file, or a notebook's cells) to its fixed findings and its lines.
    """
    changes = {
        uri: [edit for d in found if d.fix is not None for edit in text_edits(d.fix.edits, lines)]
        for uri, (found, lines) in fixed.items()
        if found
    }
    count = sum(len(found) for found, _ in fixed.values())
    if not count:
        return None
    return types.CodeAction(
        title=f"Fix all trainlint findings ({count} safe fix{'es' if count != 1 else ''})",
        kind=FIX_ALL_KIND,
        diagnostics=[published(d, lines) for found, lines in fixed.values() for d in found],
        edit=types.WorkspaceEdit(changes=changes),
    )


def wants(only: Sequence[str] | None, kind: str) -> bool:
    """Whether a request filtered to `only` (kinds or their parents, e.g. "source") asks for `kind`."""
    if only is None:
        return True
    return any(kind == k or kind.startswith(k + ".") for k in only)


def hover_text(d: Diagnostic) -> str:
    """The rule's explanation, shortened: summary, why (first two sentences), fix and the page link."""
    # (imported on the first hover: the rules bring libcst and the model, a second or more of the
    # server's start-up that the analysis, which runs in the contained worker, does not need here)
    from trainlint.rules import RULES_BY_CODE

    rule = RULES_BY_CODE.get(d.code)
    if rule is None:
        return f"**{d.code} {d.name}**\n\n{d.message}\n\n[Rule page]({d.url})"
    why = " ".join(rule.why.split())
    sentences = why.split(". ")
    short_why = ". ".join(sentences[:2]) + ("." if len(sentences) > 2 else "")
    return (
        f"**{rule.code} {rule.name}** ({rule.severity.value})\n\n{rule.summary}\n\n"
        f"**Why:** {short_why}\n\n**Fix:** {rule.hint}\n\n[Rule page]({d.url})"
    )


def fixable(findings: Sequence[Diagnostic]) -> bool:
    """Whether a safe fix is among the findings."""
    return any(d.fix is not None and d.fix.applicability is Applicability.SAFE for d in findings)
