"""`trainlint explain FILE:LINE`: for one line, what decided each rule that could apply there.

The file is linted as `check` would (its findings, its `noqa` comments), then its model is built
again and asked, for the line's calls, conditions and f-strings, why they run every step or not
(`model.why`) and what a rule saw there (`Rule.explain_call`). None of this runs on the lint path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainlint.engine.results import decode
from trainlint.reading import ReadError, read_source

if TYPE_CHECKING:
    from trainlint.config import Settings
    from trainlint.diagnostics import Diagnostic
    from trainlint.model import TrainingModel
    from trainlint.rules.rule import Rule


@dataclass
class Decision:
    """What decided one rule (or a group of rules) on the line."""

    codes: tuple[str, ...]  # the rules it is about ("TL401",), or the per-step rules together
    fires: bool
    reasons: list[str]


@dataclass
class LineExplanation:
    """Everything `explain FILE:LINE` says about a line."""

    path: str
    line: int
    text: str = ""  # the line's source
    error: str | None = None  # the file cannot be read or analysed: why
    scope: list[str] = field(default_factory=list)  # why the line runs every step, or not
    every_step: bool | None = None  # None: nothing on the line the per-step analysis judges
    decisions: list[Decision] = field(default_factory=list)


def explain_line(path: Path, line: int, settings: Settings) -> LineExplanation:
    """Explain line `line` of the Python file `path` under `settings`; never raises for a bad file."""
    from trainlint.engine.lint import _codes, _rules, lint_python

    name = str(path)
    out = LineExplanation(name, line)
    if os.path.splitext(name)[1] in (".ipynb", ".json"):
        out.error = "explain FILE:LINE reads Python files (a notebook's lines are its cells')"
        return out
    try:
        source = decode(read_source(path, settings.read_limit(name)))
    except (ReadError, UnicodeDecodeError, SyntaxError, LookupError) as exc:
        out.error = f"cannot read {name}: {exc}"
        return out
    lines = source.splitlines()
    if not 1 <= line <= len(lines):
        out.error = f"{name} has {len(lines)} lines; there is no line {line}"
        return out
    out.text = lines[line - 1]
    result = lint_python(source, name, settings)
    errors = [d for d in result.diagnostics if d.code == "TL000"]
    if errors:
        out.error = errors[0].message
        return out
    ignored = settings.ignored_for(path)
    rules = [r for r in _rules(_codes(settings)) if not any(r.code.startswith(i) for i in ignored) and not r.text_inputs]
    fired = [d for d in result.diagnostics if d.line <= line <= d.end_line]
    model = _model(source, name, settings)
    if model is None:
        out.error = "the file could not be analysed"
        return out
    _decide(out, model, source, rules, fired, settings)
    return out


def _model(source: str, name: str, settings: Settings) -> TrainingModel | None:
    import libcst as cst

    from trainlint.model import TrainingModel
    from trainlint.model.parse import parse_file
    from trainlint.project.shared import shared

    try:
        module = parse_file(source, name)
    except (cst.ParserSyntaxError, RecursionError, MemoryError, UnicodeEncodeError):
        return None
    return TrainingModel.build(module, settings.analysis(), path=name, project=shared())


def _decide(out: LineExplanation, model: TrainingModel, source: str, rules: list[Rule], fired: list[Diagnostic], settings: Settings) -> None:
    from libcst.metadata import MetadataWrapper, PositionProvider

    from trainlint.model.why import step_verdict
    from trainlint.noqa import parse_suppressions

    spans: Any = MetadataWrapper(model.module, unsafe_skip_copy=True).resolve(PositionProvider)  # (the model's own nodes)

    def line_of(node: Any) -> int:
        return spans[node].start.line if node in spans else 0

    line = out.line

    def on_line(node: Any) -> bool:
        span = spans.get(node)
        return span is not None and span.start.line <= line <= span.end.line

    calls = [c for c in model.calls if on_line(c.node)]
    starting = [c for c in calls if line_of(c.node) == line]
    calls = starting or calls
    sites = [c.site for c in calls]
    # the expressions whose value decides a read: an `if`'s test, an f-string's interpolation
    read = [(c.node, c.site) for c in model.conditions if c.kind != "while" and on_line(c.node)]
    read += [(f.node.expression, f.site) for f in model.formatted if on_line(f.node)]
    sites += [site for _, site in read]
    suppressions = parse_suppressions(source)
    for d in fired:  # the rules that fire: their own message says why
        out.decisions.append(Decision((d.code,), True, [d.message]))
    done = {d.code for d in fired}
    for rule in rules:
        if rule.code not in done and suppressions.suppressed(rule.code, line, line) and not settings.ignore_noqa:
            out.decisions.append(Decision((rule.code,), False, [f"silenced by a `noqa` comment naming {rule.code} (`trainlint check --ignore-noqa` reports it)"]))
            done.add(rule.code)
    if model.other_framework:
        out.scope = ["the module imports another deep-learning framework and not torch: trainlint checks nothing in it"]
        return
    if not sites:
        out.scope = ["nothing on this line is what a rule looks at (no call, condition or f-string)"]
        return
    out.every_step, out.scope = step_verdict(model, sites[0], line_of)
    per_step = [r for r in rules if r.per_step and r.code not in done]
    if not out.every_step:
        if per_step:
            codes = tuple(r.code for r in per_step)
            out.decisions.append(Decision(codes, False, [f"the per-step rules ({', '.join(codes)}) judge only code that runs every step"]))
        return
    for rule in per_step:
        reasons = [said for call in calls for said in (rule.explain_call(model, call, line_of),) if said]
        if rule.code == "TL401":  # (what an `if` tests and an f-string formats speaks too)
            reasons += _tl401_fallback(model, [] if reasons else calls, read, line_of)
        if reasons:
            out.decisions.append(Decision((rule.code,), False, list(dict.fromkeys(reasons))))
    if any(r.code == "TL401" for r in per_step) and not any("TL401" in d.codes for d in out.decisions):
        out.decisions.append(Decision(("TL401",), False, ["nothing on this line reads a tensor's value on the host, as far as the analysis sees"]))


def _tl401_fallback(model: TrainingModel, calls: list[Any], read: list[tuple[Any, Any]], line_of: Any) -> list[str]:
    """The values the line's tests, f-strings and method calls are made on, as the analysis saw them
    (when no decision of the rule's own applies)."""
    from trainlint.model.why import describe_value

    out = [describe_value(model, node, site, line_of) + ": not a tensor the analysis knows of on the accelerator" for node, site in read]
    for call in calls:
        if call.receiver is not None and call.method is not None and not (call.qualname or "").startswith("torch."):
            out.append(describe_value(model, call.receiver, call.site, line_of))
    return out[:3]
