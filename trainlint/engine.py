"""The per-file pipeline (read, prefilter, parse, model, rules, suppressions) and the process pool."""

from __future__ import annotations

import ast
import os
import re
import tokenize
import io
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from trainlint.config import Settings
from trainlint.diagnostics import Diagnostic, Edit, Fix, Severity
from trainlint.model import TrainingModel
from trainlint.noqa import Suppressions, parse_suppressions
from trainlint.reading import ReadError, read_source, too_large
from trainlint.rule import Finding, NodeEdit, Rule
from trainlint.rules import RULES_BY_CODE

PARSE_ERROR = ("TL000", "parse-error")
_NATIVE_POSITION = re.compile(r"(?:parser error: )?error at (?P<line>\d+):(?P<column>\d+): ")


@dataclass
class FileResult:
    """The outcome of linting one file."""

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    source: str | None = None
    internal_error: bool = False

    @property
    def failed(self) -> bool:
        return any(d.code == PARSE_ERROR[0] for d in self.diagnostics)


def _error(path: str, message: str, line: int = 1, column: int = 1) -> Diagnostic:
    return Diagnostic(
        code=PARSE_ERROR[0],
        name=PARSE_ERROR[1],
        message=message,
        severity=Severity.ERROR,
        path=path,
        line=line,
        column=column,
        end_line=line,
        end_column=column,
    )


@lru_cache(maxsize=64)
def _codes(settings: Settings) -> tuple[str, ...]:
    return settings.rule_codes()


@lru_cache(maxsize=32)
def _rules(codes: tuple[str, ...]) -> tuple[Rule, ...]:
    return tuple(RULES_BY_CODE[c]() for c in codes)


def decode(data: bytes) -> str:
    """Decode source bytes by their PEP 263 cookie (UTF-8 by default); raises UnicodeDecodeError/SyntaxError."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text


def lint_file(path: Path, settings: Settings) -> FileResult:
    """Lint a file on disk; never raises, never blocks on a FIFO, never reads past max-file-size."""
    name = str(path)
    try:
        data = read_source(path, settings.max_file_size)
    except ReadError as exc:
        return FileResult(name, [_error(name, str(exc))])
    return lint_bytes(data, name, settings)


def lint_bytes(data: bytes, name: str, settings: Settings) -> FileResult:
    """Lint source bytes (a file's or standard input's); input over max-file-size is a TL000."""
    if len(data) > settings.max_file_size:
        return FileResult(name, [_error(name, too_large(None, settings.max_file_size))])
    try:
        source = decode(data)
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        return FileResult(name, [_error(name, f"cannot decode file: {exc}")])
    nul = source.find("\0")
    if nul >= 0 and not name.endswith(".json"):  # Python refuses such source; libcst would not say so
        line = source.count("\n", 0, nul) + 1
        return FileResult(name, [_error(name, "syntax error: source code cannot contain null bytes", line, nul - source.rfind("\n", 0, nul))])
    return lint_source(source, name, settings)


def lint_json(source: str, name: str, settings: Settings) -> FileResult:
    """Lint a DeepSpeed JSON config (TL204)."""
    from trainlint.rules.tl204_deepspeed_fp16_without_clipping import DeepspeedFp16WithoutClipping as rule
    from trainlint.rules.tl204_deepspeed_fp16_without_clipping import UnreadableConfig, json_findings

    result = FileResult(name, source=source)
    if rule.code not in _codes(settings) or rule.code in settings.ignored_for(Path(name)):
        return result
    try:
        found = json_findings(source)
    except UnreadableConfig as exc:
        return FileResult(name, [_error(name, str(exc))])
    for line, column, message in found:
        result.diagnostics.append(
            Diagnostic(rule.code, rule.name, message, rule.severity, name, line, column, line, column + 6, hint=rule.hint)
        )
    return result


def lint_source(source: str, name: str, settings: Settings) -> FileResult:
    """Lint source text (Python, a notebook or a DeepSpeed JSON config by its name); never raises."""
    if name.endswith(".json"):
        return lint_json(source, name, settings)
    if name.endswith(".ipynb"):
        from trainlint.notebook import lint_notebook

        return lint_notebook(source, name, settings)
    return lint_python(source, name, settings)


def lint_python(source: str, name: str, settings: Settings) -> FileResult:
    """Lint Python source text; never raises (an analysis bug becomes an internal-error diagnostic)."""
    result = FileResult(name, source=source)
    ignored = settings.ignored_for(Path(name))
    codes = tuple(c for c in _codes(settings) if not any(c.startswith(i) for i in ignored))
    # prefilter: skip parsing when no enabled rule's tokens (or a configured step function) occur
    configured = any(fn in source for fn in settings.step_functions)
    rules = [r for r in _rules(codes) if configured or not r.requires or any(tok in source for tok in r.requires)]
    if not rules or not source.strip():
        return result
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        message, line, column = _syntax_error(source, exc)
        result.diagnostics.append(_error(name, f"syntax error: {message}", line, column))
        return result
    except (RecursionError, MemoryError) as exc:
        result.diagnostics.append(_error(name, f"cannot parse file: {type(exc).__name__}"))
        return result
    try:
        from trainlint.project import shared

        model = TrainingModel.build(module, settings.analysis(), path=name, project=shared())
        findings: list[tuple[Rule, Finding]] = []
        for rule in rules:
            findings.extend((rule, f) for f in rule.check(model))
        suppressions = parse_suppressions(source)
        if findings:
            result.diagnostics.extend(_diagnostics(module, source, name, findings, suppressions))
        if settings.reports_unused_noqa(Path(name)):
            result.diagnostics.extend(suppressions.unused(name, {r.code for r in rules}))
    except RecursionError:
        result.diagnostics.append(_error(name, "cannot analyse file: nesting too deep"))
    except Exception as exc:  # an analysis bug must not stop the run
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result.diagnostics.append(_error(name, f"internal error while analysing this file: {detail}"))
        result.internal_error = True
    return result


def _syntax_error(source: str, exc: cst.ParserSyntaxError) -> tuple[str, int, int]:
    """Message and 1-based position of a syntax error.

    CPython's own parser names the offending token (libcst's reports where its lookahead gave up,
    often the next line), so it is asked first; libcst's account is kept for code CPython accepts.
    """
    try:
        compile(source, "<trainlint>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as err:
        if err.lineno is not None:
            return err.msg, err.lineno, max(err.offset or 1, 1)
    except (ValueError, RecursionError, MemoryError):
        pass
    message = " ".join(exc.message.split())
    line, column = exc.raw_line, exc.raw_column + 1
    where = _NATIVE_POSITION.match(message)  # "parser error: error at 3:4: expected ..."
    if where:
        line, column = int(where["line"]), int(where["column"]) + 1
        message = message[where.end():]
    return message, line, column


def _diagnostics(
    module: cst.Module, source: str, name: str, findings: list[tuple[Rule, Finding]], suppressions: Suppressions
) -> list[Diagnostic]:
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    lines = source.splitlines()
    seen: set[tuple[str, int, int]] = set()
    out: list[Diagnostic] = []
    for rule, finding in findings:
        span = positions[finding.node]
        key = (rule.code, span.start.line, span.start.column)
        if key in seen or suppressions.suppressed(rule.code, span.start.line, span.end.line):
            continue
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
            )
        )
    return out


def _edit(edit: NodeEdit, positions: object, lines: list[str]) -> Edit:
    span = positions[edit.node]  # type: ignore[index]
    if edit.where == "line_before":
        line = span.start.line
        text = lines[line - 1] if line - 1 < len(lines) else ""
        indent = text[: len(text) - len(text.lstrip())]
        return Edit(line, 1, line, 1, f"{indent}{edit.content}\n")
    if edit.where == "after":
        return Edit(span.end.line, span.end.column + 1, span.end.line, span.end.column + 1, edit.content)
    return Edit(span.start.line, span.start.column + 1, span.end.line, span.end.column + 1, edit.content)


def _work(task: tuple[str, Settings]) -> FileResult:
    path, settings = task
    result = lint_file(Path(path), settings)
    result.source = None  # keep inter-process traffic small; --fix re-reads the file
    return result


def lint_paths(tasks: list[tuple[Path, Settings]], jobs: int | None = None, keep_source: bool = False) -> list[FileResult]:
    """Lint many files, in a process pool when there are enough; results sorted by path."""
    jobs = jobs or os.cpu_count() or 1
    items = [(str(p), s) for p, s in tasks]
    if jobs <= 1 or len(items) < 4:
        results = [lint_file(Path(p), s) for p, s in items]
    else:
        chunk = max(1, min(32, len(items) // (jobs * 8)))
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_work, items, chunksize=chunk))
    if not keep_source:
        for r in results:
            r.source = None
    for r in results:
        r.diagnostics.sort(key=Diagnostic.sort_key)
    return sorted(results, key=lambda r: r.path)
