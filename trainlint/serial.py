"""Lint results and module summaries as plain JSON, and back, with every field's type checked.

What the result cache and the run's shared summary store hold. Each stored type has its own
encoder and decoder, written out field by field: reading can only build these types from strings,
numbers, booleans and lists (nothing in an entry names a class or runs code), and anything that is
not exactly what the encoder writes raises `BadEntry`. Records are positional lists (faster to
write and read than objects with keys); the format number of the whole entry says which layout.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trainlint.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity

if TYPE_CHECKING:
    from trainlint.cache import State
    from trainlint.engine import FileResult
    from trainlint.model.summary import ClassSummary, FunctionSummary, ModuleSummary
    from trainlint.model.values import Value


class BadEntry(ValueError):
    """Stored data that is not what trainlint writes: a miss."""


_SEVERITIES = {s.value: s for s in Severity}
_APPLICABILITIES = {a.value: a for a in Applicability}
_FACT_TYPES = (str, int, float, bool, type(None))


def dumps(data: object) -> bytes:
    """Compact ASCII JSON (lone surrogates in names and messages are escaped, and come back)."""
    return json.dumps(data, separators=(",", ":"), check_circular=False).encode("ascii")


def _str(v: object) -> str:
    if type(v) is not str:
        raise BadEntry("not a string")
    return v


def _opt_str(v: object) -> str | None:
    return None if v is None else _str(v)


def _bool(v: object) -> bool:
    if type(v) is not bool:
        raise BadEntry("not a boolean")
    return v


def _opt_bool(v: object) -> bool | None:
    return None if v is None else _bool(v)


def _list(v: object, length: int | None = None) -> list[Any]:
    if type(v) is not list or (length is not None and len(v) != length):
        raise BadEntry("not a list of the expected length")
    return v


def _dict(v: object) -> dict[str, Any]:
    if type(v) is not dict:  # JSON object keys are always strings
        raise BadEntry("not an object")
    return v


def _header(raw: bytes, version: int, keys: frozenset[str]) -> dict[str, Any]:
    data = _dict(json.loads(raw))
    found = data.get("trainlint")
    if type(found) is not int or found != version or data.keys() != keys:
        raise BadEntry("another format")
    return data


# -- lint results ----------------------------------------------------------------------------------

_RESULT_KEYS = frozenset({"trainlint", "path", "diagnostics", "dependencies"})


def encode_result(result: FileResult, version: int) -> bytes:
    """A cacheable result (its source is not kept) as an entry of format `version`."""
    return dumps({
        "trainlint": version,
        "path": result.path,
        "diagnostics": [_encode_diagnostic(d) for d in result.diagnostics],
        "dependencies": result.dependencies,
    })


def decode_result(raw: bytes, version: int, size: int) -> FileResult:
    """The result `encode_result` wrote for a file of `size` bytes (no position lies past them);
    raises BadEntry (or another ValueError) for anything else."""
    from trainlint.engine import FileResult

    data = _header(raw, version, _RESULT_KEYS)
    bound = size + 16  # a position just past the end: an insertion, a syntax error at the end
    return FileResult(
        _str(data["path"]),
        [_decode_diagnostic(d, bound) for d in _list(data["diagnostics"])],
        dependencies=decode_states(data["dependencies"]),
    )


def decode_states(data: object) -> tuple[State, ...]:
    """Dependency states (see cache.py): [path, size or code, hex digest or ""]."""
    out = []
    for item in _list(data):  # checked inline: results list many, and each lookup reads them
        if type(item) is not list or len(item) != 3:
            raise BadEntry("not a state")
        path, size, hexdigest = item
        if type(path) is not str or type(size) is not int or type(hexdigest) is not str:
            raise BadEntry("not a state")
        out.append((path, size, hexdigest))
    return tuple(out)


def _encode_diagnostic(d: Diagnostic) -> list[object]:
    if any(type(k) is not str or type(v) not in _FACT_TYPES for k, v in d.facts.items()):
        raise TypeError(f"facts of {d.code} are not plain values")
    fix = d.fix
    encoded_fix = None if fix is None else [fix.description, fix.applicability.value, [
        [e.line, e.column, e.end_line, e.end_column, e.content, e.cell] for e in fix.edits
    ]]
    return [d.code, d.name, d.message, d.severity.value, d.path, d.line, d.column, d.end_line, d.end_column,
            d.hint, encoded_fix, d.facts, d.cell, d.file_span]


def _decode_diagnostic(v: object, bound: int) -> Diagnostic:
    code, name, message, severity, path, line, column, end_line, end_column, hint, fix, facts, cell, span = _list(v, 14)
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
                      None if fix is None else _decode_fix(fix, bound), facts, cell, None if span is None else tuple(span))


def _span(line: object, column: object, end_line: object, end_column: object, bound: int) -> bool:
    """Four positions, none past what the linted file can hold."""
    return (type(line) is int and type(column) is int and type(end_line) is int and type(end_column) is int
            and 0 <= line <= bound and 0 <= column <= bound and 0 <= end_line <= bound and 0 <= end_column <= bound)


def _decode_fix(v: object, bound: int) -> Fix:
    description, applicability, edits = _list(v, 3)
    how = _APPLICABILITIES.get(applicability) if type(applicability) is str else None
    if how is None or type(description) is not str:
        raise BadEntry("not a fix")
    return Fix(description, tuple(_decode_edit(e, bound) for e in _list(edits)), how)


def _decode_edit(v: object, bound: int) -> Edit:
    line, column, end_line, end_column, content, cell = _list(v, 6)
    if type(content) is not str or not _span(line, column, end_line, end_column, bound) or not (
            cell is None or _span(cell, 1, 1, 1, bound)):
        raise BadEntry("not an edit")
    return Edit(line, column, end_line, end_column, content, cell)


# -- module summaries (the run's shared summary store) ---------------------------------------------

_SUMMARY_KEYS = frozenset({"trainlint", "summary", "depends"})


def encode_summary(summary: ModuleSummary, depends: set[State], version: int) -> bytes:
    """A module's summary and the states of the files it was computed from."""
    return dumps({
        "trainlint": version,
        "summary": [
            {k: _encode_function(f) for k, f in summary.functions.items()},
            {k: [c.kind.value, {m: _encode_function(f) for m, f in c.methods.items()}] for k, c in summary.classes.items()},
            summary.exports,
        ],
        "depends": sorted(depends),
    })


def decode_summary(raw: bytes, version: int) -> tuple[ModuleSummary, set[State]]:
    """What `encode_summary` wrote; raises BadEntry (or another ValueError) for anything else."""
    from trainlint.model.summary import ModuleSummary

    data = _header(raw, version, _SUMMARY_KEYS)
    functions, classes, exports = _list(data["summary"], 3)
    summary = ModuleSummary(
        {k: _decode_function(f) for k, f in _dict(functions).items()},
        {k: _decode_class(c) for k, c in _dict(classes).items()},
        {k: _str(v) for k, v in _dict(exports).items()},
    )
    return summary, set(decode_states(data["depends"]))


def _encode_function(f: FunctionSummary) -> list[object]:
    return [f.where, f.steps, f.backprops, f.trains, f.clears_grads, f.clips, f.scales, f.synchronizes, f.syncs,
            f.reads_arguments, f.no_grad, f.sets_train_mode, _encode_value(f.returns)]


def _decode_function(v: object) -> FunctionSummary:
    from trainlint.model.summary import FunctionSummary

    (where, steps, backprops, trains, clears_grads, clips, scales, synchronizes, syncs, reads_arguments, no_grad,
     sets_train_mode, returns) = _list(v, 13)
    return FunctionSummary(
        _str(where), _bool(steps), _bool(backprops), _bool(trains), _bool(clears_grads), _bool(clips), _bool(scales),
        tuple(_str(s) for s in _list(synchronizes)), tuple(_str(s) for s in _list(syncs)), _bool(reads_arguments),
        _bool(no_grad), _bool(sets_train_mode), _decode_value(returns),
    )


def _decode_class(v: object) -> ClassSummary:
    from trainlint.model.summary import ClassSummary

    kind, methods = _list(v, 2)
    return ClassSummary(_kind(kind), {k: _decode_function(f) for k, f in _dict(methods).items()})


def _encode_value(v: Value) -> list[object]:
    return [v.kind.value, v.device, v.graph, v.dtype, v.origin, v.enabled,
            None if v.element is None else _encode_value(v.element)]


def _decode_value(v: object) -> Value:
    from trainlint.model.values import Value

    kind, device, graph, dtype, origin, enabled, element = _list(v, 7)
    value = Value(_kind(kind), _str(device), _opt_bool(graph), _opt_str(dtype), _opt_str(origin), _opt_bool(enabled),
                  None if element is None else _decode_value(element))
    return _interned().get(value, value)


def _kind(v: object) -> Any:
    from trainlint.model.values import Kind

    try:
        return Kind(_str(v))
    except ValueError:
        raise BadEntry("unknown kind") from None


_INTERNED: dict[Value, Value] = {}


def _interned() -> dict[Value, Value]:
    """The analysis's named values, so that a decoded one is the same object (`v is CYCLE`)."""
    if not _INTERNED:
        from trainlint.model import values

        _INTERNED.update((c, c) for c in vars(values).values() if type(c) is values.Value)
    return _INTERNED
