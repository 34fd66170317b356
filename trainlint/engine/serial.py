"""Lint results as plain JSON, and back, with every field's type checked: what the result cache holds.

Each stored type has its own encoder and decoder, written out field by field (see `checked_json`).
Records are positional lists (faster to write and read than objects with keys); the format number of
the whole entry says which layout.
"""

from __future__ import annotations

from trainlint.checked_json import BadEntry, dumps, header, items, text
from trainlint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Severity
from trainlint.engine.results import FileResult
from trainlint.reading import State

_SEVERITIES = {s.value: s for s in Severity}
_APPLICABILITIES = {a.value: a for a in Applicability}
_FACT_TYPES = (str, int, float, bool, type(None))


_RESULT_KEYS = frozenset({"trainlint", "path", "diagnostics", "dependencies"})


def encode_result(result: FileResult, version: int, dependencies: list[str]) -> bytes:
    """A cacheable result (its source is not kept) as an entry of format `version`; its dependencies
    are named by the group entries that list them (`encode_dependencies`: the files of a project share
    most of theirs)."""
    return dumps({
        "trainlint": version,
        "path": result.path,
        "diagnostics": [_encode_diagnostic(d) for d in result.diagnostics],
        "dependencies": dependencies,
    })


def decode_result(raw: bytes, version: int, size: int) -> tuple[FileResult, list[str]]:
    """The result `encode_result` wrote for a file of `size` bytes (no position lies past them), and
    the names of its dependencies' groups; raises BadEntry (or another ValueError) for anything else."""
    data = header(raw, version, _RESULT_KEYS)
    bound = size + 16  # a position just past the end: an insertion, a syntax error at the end
    result = FileResult(text(data["path"]), [_decode_diagnostic(d, bound) for d in items(data["diagnostics"])])
    return result, [text(name) for name in items(data["dependencies"])]


def _group_header(version: int) -> bytes:
    return b"trainlint dependencies %d" % version


def encode_dependencies(states: tuple[State, ...], version: int) -> bytes:
    """A group of dependency states, as an entry of its own: a header line, then one state per line
    as a JSON list (JSON escapes every line break a path may hold)."""
    return b"\n".join([_group_header(version), *(dumps(list(state)) for state in states)])


def dependency_items(raw: bytes, version: int) -> list[bytes]:
    """The lines of a group `encode_dependencies` wrote, each still to be decoded and checked
    (`checked_json.is_state`): a warm run checks each distinct line once, not each of the thousands
    its groups list, and decodes none it has seen. Raises BadEntry for another header."""
    lines = raw.split(b"\n")
    if lines[0] != _group_header(version):
        raise BadEntry("another format")
    return lines[1:]


def _encode_diagnostic(d: Diagnostic) -> list[object]:
    if any(type(k) is not str or type(v) not in _FACT_TYPES for k, v in d.facts.items()):
        raise TypeError(f"facts of {d.code} are not plain values")
    fix = d.fix
    encoded_fix = None if fix is None else [fix.description, fix.applicability.value, [
        [e.line, e.column, e.end_line, e.end_column, e.content, e.cell] for e in fix.edits
    ]]
    chains = [[[loc.path, loc.line, loc.column, *([loc.note] if loc.note else [])] for loc in chain] for chain in d.chains]
    return [d.code, d.name, d.message, d.severity.value, d.path, d.line, d.column, d.end_line, d.end_column,
            d.hint, encoded_fix, d.facts, d.cell, d.file_span, chains]


def _decode_diagnostic(v: object, bound: int) -> Diagnostic:
    code, name, message, severity, path, line, column, end_line, end_column, hint, fix, facts, cell, span, chains = items(v, 15)
    # checked inline, not field by field through helpers: a warm run decodes every diagnostic
    if (type(code) is not str or type(name) is not str or type(message) is not str or type(path) is not str
            or type(hint) is not str or not _span(line, column, end_line, end_column, bound)
            or (cell is not None and not _span(cell, 1, 1, 1, bound)) or type(facts) is not dict):
        raise BadEntry("not a diagnostic")
    level = _SEVERITIES.get(severity) if type(severity) is str else None
    if level is None:
        raise BadEntry("unknown severity")
    for value in facts.values():
        if type(value) not in _FACT_TYPES:
            raise BadEntry("facts are not plain values")
    if span is not None and not (type(span) is list and len(span) == 4 and _span(*span, bound)):
        raise BadEntry("not a span")
    return Diagnostic(code, name, message, level, path, line, column, end_line, end_column, hint,
                      None if fix is None else _decode_fix(fix, bound), facts, cell, None if span is None else tuple(span),
                      _decode_chains(chains))


def _decode_chains(v: object) -> tuple[tuple[Location, ...], ...]:
    """The call chains of a finding in a function called every step: places in other files too."""
    out = []
    for chain in items(v):
        places = []
        for place in items(chain):
            path, line, column, *note = items(place, 4 if type(place) is list and len(place) == 4 else 3)
            if type(line) is not int or type(column) is not int or line < 0 or column < 0:
                raise BadEntry("not a place")
            places.append(Location(text(path), line, column, text(note[0]) if note else ""))
        out.append(tuple(places))
    return tuple(out)


def _span(line: object, column: object, end_line: object, end_column: object, bound: int) -> bool:
    """Four positions, none past what the linted file can hold."""
    return (type(line) is int and type(column) is int and type(end_line) is int and type(end_column) is int
            and 0 <= line <= bound and 0 <= column <= bound and 0 <= end_line <= bound and 0 <= end_column <= bound)


def _decode_fix(v: object, bound: int) -> Fix:
    description, applicability, edits = items(v, 3)
    how = _APPLICABILITIES.get(applicability) if type(applicability) is str else None
    if how is None or type(description) is not str:
        raise BadEntry("not a fix")
    return Fix(description, tuple(_decode_edit(e, bound) for e in items(edits)), how)


def _decode_edit(v: object, bound: int) -> Edit:
    line, column, end_line, end_column, content, cell = items(v, 6)
    if type(content) is not str or not _span(line, column, end_line, end_column, bound) or not (
            cell is None or _span(cell, 1, 1, 1, bound)):
        raise BadEntry("not an edit")
    return Edit(line, column, end_line, end_column, content, cell)


