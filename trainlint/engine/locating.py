"""Findings located as the report gives them: positions, the call chains that make a finding per
step, and fixes' edits in lines and columns."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trainlint.diagnostics import Chain, Diagnostic, Edit, Fix, Location
from trainlint.engine.results import StepScope

if TYPE_CHECKING:

    from trainlint.noqa import Suppressions
    from trainlint.model import Call, Function, TrainingModel
    from trainlint.model.summary import Place
    from trainlint.rules.rule import Finding, NodeEdit, Rule


def located_diagnostics(
    model: TrainingModel, source: str, name: str, findings: list[tuple[Rule, Finding]], suppressions: Suppressions
) -> list[Diagnostic]:
    """The diagnostics of a module's findings: located, with their fixes' edits and, for a per-step
    finding in a function that runs every step, the call chains that make it so; those a `noqa`
    suppresses (on the finding's lines, or on a calling line of every chain) left out."""
    from trainlint.model.positions import positions as positions_of
    from trainlint.model.positions import statement_lines

    # functions that run every step because per-step code calls them: a per-step finding inside one
    # carries the call chains that make it so
    chained = {fn: model.step_chains(fn) for fn in model.functions} if any(r.per_step for r, _ in findings) else {}
    chained = {fn: chains for fn, chains in chained.items() if chains}
    wanted = [f.node for _, f in findings]
    wanted += [e.node for _, f in findings if f.fix is not None for e in f.fix.edits]
    wanted += [c.node for chains in chained.values() for chain in chains for c in chain if not isinstance(c, tuple)]
    wanted += [e.until for _, f in findings if f.fix is not None for e in f.fix.edits if e.until is not None]
    # which chained function holds a finding needs only its lines (a def shares its lines with no other)
    lines_of = statement_lines(model.module, source, [fn.node for fn in chained]) if chained else {}
    if lines_of is None:
        wanted += [fn.node for fn in chained]
    positions = positions_of(model.module, source, wanted)
    if lines_of is None:
        lines_of = {fn.node: (positions[fn.node].start.line, positions[fn.node].end.line) for fn in chained}
    lines = source.splitlines()
    seen: set[tuple[str, int, int]] = set()
    out: list[Diagnostic] = []
    for rule, finding in findings:
        span = positions[finding.node]
        key = (rule.code, span.start.line, span.start.column)
        if key in seen or suppressions.suppressed(rule.code, span.start.line, span.end.line):
            continue
        chains: tuple[Chain, ...] = ()
        if rule.per_step and chained:
            chains = _chains_of(span, chained, lines_of, positions, name, model.chosen_notes)
            kept = tuple(
                c for c in chains if not any(loc.path == name and suppressions.names(rule.code, loc.line) for loc in c)
            )
            if chains and not kept:  # suppressed on a calling line of every chain
                continue
            chains = kept
        seen.add(key)
        fix = None
        if finding.fix is not None:
            edits = tuple(_edit(e, positions, lines) for e in finding.fix.edits)
            fix = Fix(finding.fix.description, edits, finding.fix.applicability)
        out.append(
            Diagnostic(
                code=rule.code,
                name=rule.name,
                message=finding.message,
                severity=rule.severity,
                path=name,
                line=span.start.line,
                column=span.start.column + 1,
                end_line=span.end.line,
                end_column=span.end.column + 1,
                hint=rule.hint,
                fix=fix,
                facts=finding.facts,
                chains=chains,
            )
        )
    return out


def step_scope(model: TrainingModel, source: str, name: str) -> list[StepScope]:
    """The step loops and per-step functions of a module, located, each with one chain."""
    from trainlint.model.positions import positions as positions_of

    scope = model.step_scope()
    wanted = [node for node, _, _ in scope] + [c.node for _, _, chain in scope for c in chain if not isinstance(c, tuple)]
    positions = positions_of(model.module, source, wanted)
    out = [
        StepScope(_located(node, positions, name), what, tuple(_place(c, positions, name, model.chosen_notes) for c in chain))
        for node, what, chain in scope
    ]
    return sorted(out, key=lambda s: (s.where.line, s.where.column))


def _located(node: Any, positions: Any, name: str) -> Location:
    start = positions[node].start
    return Location(name, start.line, start.column + 1)


def _place(call: Call | Place, positions: Any, name: str, notes: dict[int, str] | None = None) -> Location:
    """A call of a chain: one of this file (located), or a place in another file (as shown); with
    what the analysis took it to run where that is no certainty (`notes`, by the call's id)."""
    if isinstance(call, tuple):
        return Location(_shown(call[0], name), call[1], call[2], call[3] if len(call) > 3 else "")  # type: ignore[misc]
    return replace(_located(call.node, positions, name), note=(notes or {}).get(id(call), ""))


def _shown(path: str, name: str) -> str:
    """A file of another module as the linted file's name is written: relative to the working folder
    when that is (and the file is below it), else as it is."""
    if os.path.isabs(name):
        return path
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


def _chains_of(
    span: Any, chained: dict[Function, list[tuple[Call | Place, ...]]], lines_of: dict[Any, tuple[int, int]], positions: Any, name: str,
    notes: dict[int, str] | None = None,
) -> tuple[Chain, ...]:
    """The call chains of the innermost chained function that holds `span` (by the functions' first
    and last lines: a nested one starts on a later line), as locations."""
    holders = [fn for fn in chained if lines_of[fn.node][0] <= span.start.line and lines_of[fn.node][1] >= span.end.line]
    if not holders:
        return ()
    inner = max(holders, key=lambda fn: lines_of[fn.node][0])
    return tuple(
        tuple(
            _place(c, positions, name, notes)
            for c in chain
        )
        for chain in chained[inner]
    )


def _edit(edit: NodeEdit, positions: Any, lines: list[str]) -> Edit:
    span = positions[edit.node]
    if edit.where == "line_before":
        line = span.start.line
        text = lines[line - 1] if line - 1 < len(lines) else ""
        indent = text[: len(text) - len(text.lstrip())]
        return Edit(line, 1, line, 1, f"{indent}{edit.content}\n")
    if edit.where == "after":
        return Edit(span.end.line, span.end.column + 1, span.end.line, span.end.column + 1, edit.content)
    if edit.where == "tail" and edit.until is not None:
        end = positions[edit.until].end
        return Edit(span.end.line, span.end.column + 1, end.line, end.column + 1, edit.content)
    return Edit(span.start.line, span.start.column + 1, span.end.line, span.end.column + 1, edit.content)
