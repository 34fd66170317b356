"""The per-file pipeline (read, prefilter, pre-check, parse, model, rules, positions, suppressions)
and the run over many files (cache first, then contained worker processes).

libcst and the rules are imported only when a file has to be analysed: a run whose files all come
from the cache never loads them.
"""

from __future__ import annotations

import gc
import os
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, Callable

from trainlint.diagnostics import Diagnostic
from trainlint.engine.parse_failures import lone_surrogate, names_torch_or_a_step, pre37_module, syntax_error
from trainlint.engine.results import FileResult, could_not_analyse, decode, error_diagnostic
from trainlint.reading import ReadError, digest, read_regular, read_source, too_large


if TYPE_CHECKING:

    from trainlint.engine.cache import Cache
    from trainlint.config import Settings
    from trainlint.rules.rule import Finding, Rule

@lru_cache(maxsize=64)
def _codes(settings: Settings) -> tuple[str, ...]:
    from trainlint.rules import enabled_codes

    return enabled_codes(settings)


@lru_cache(maxsize=32)
def _tokens(rules: tuple[Rule, ...]) -> frozenset[str]:
    return frozenset(token for rule in rules for token in rule.requires)


@lru_cache(maxsize=32)
def _rules(codes: tuple[str, ...]) -> tuple[Rule, ...]:
    from trainlint.rules import RULES_BY_CODE

    return tuple(RULES_BY_CODE[c]() for c in codes)


def lint_file(path: Path | str, settings: Settings) -> FileResult:
    """Lint a file on disk, in this process; never raises, never blocks on a FIFO, never reads past
    max-file-size."""
    name = str(path)
    try:
        data = read_source(Path(path), settings.read_limit(name))
    except ReadError as exc:
        return FileResult(name, [error_diagnostic(name, str(exc))])
    return _lint_bytes(data, name, settings)


def lint_bytes(data: bytes, name: str, settings: Settings) -> FileResult:
    """Lint source bytes (standard input) in a worker process, where a parser crash, a hang or a
    memory blow-up is contained like a file's; input over max-file-size is a TL000; never raises."""
    from trainlint.engine import workers

    if len(data) > settings.read_limit(name):
        return FileResult(name, [error_diagnostic(name, too_large(None, settings.read_limit(name)))])
    _preload()
    for _, result in workers.run([(name, settings, data)], 1, _lint_task, _file_timeout, _file_memory, keep_source=True):
        return result
    raise AssertionError("unreachable: a worker run yields one result per task")


@dataclass(frozen=True)
class ReadAs:
    """The digest of the bytes a cache miss's key was computed from, sent in place of them (a run held
    every source until its turn: ~10 MB); the worker reads the file again, as the key read it."""

    digest: bytes


def _content_digest(data: bytes) -> bytes:
    hashed = digest()
    hashed.update(data)
    return hashed.digest()


def _lint_task(name: str, settings: Settings, data: bytes | ReadAs | None) -> FileResult:
    """A worker's job: the bytes given (standard input), the file as its cache key read it, or the file."""
    if isinstance(data, ReadAs):
        read = read_regular(name, settings.max_file_size)  # (as `Cache.lookup` read it)
        if read is None or _content_digest(read) != data.digest:  # edited since: analysed as it is, not cached
            return replace(lint_file(name, settings), cacheable=False)
        data = read
    return lint_file(name, settings) if data is None else _lint_bytes(data, name, settings)


def _lint_bytes(data: bytes, name: str, settings: Settings) -> FileResult:
    try:
        source = decode(data)
    except (UnicodeDecodeError, SyntaxError, LookupError) as exc:
        return FileResult(name, [error_diagnostic(name, f"cannot decode file: {exc}")])
    nul = source.find("\0")
    if nul >= 0 and not name.endswith(".json"):  # Python refuses such source; libcst would not say so
        line = source.count("\n", 0, nul) + 1
        return FileResult(name, [error_diagnostic(name, "syntax error: source code cannot contain null bytes", line, nul - source.rfind("\n", 0, nul))])
    return lint_source(source, name, settings)


def lint_text_input(source: str, name: str, settings: Settings) -> FileResult:
    """Lint a non-Python input (a JSON config) with the selected rules that read its kind (`Rule.text_inputs`)."""
    from trainlint.rules.rule import UnreadableInput

    result = FileResult(name, source=source)
    suffix = os.path.splitext(name)[1]
    ignored = settings.ignored_for(Path(name))
    for rule in _rules(_codes(settings)):
        if suffix not in rule.text_inputs or any(rule.code.startswith(i) for i in ignored):
            continue
        try:
            found = rule.check_text(source)
        except UnreadableInput as exc:
            return FileResult(name, [error_diagnostic(name, str(exc))])
        for line, column, message in found:
            result.diagnostics.append(
                Diagnostic(rule.code, rule.name, message, rule.severity, name, line, column, line, column + 6, hint=rule.hint)
            )
    return result


def lint_notebook(source: str, name: str, settings: Settings) -> FileResult:
    """Lint a Jupyter notebook: its code cells as one module, findings located in cells."""
    from trainlint.engine.notebook import lint_cells

    return lint_cells(source, name, settings, lint_python)


# the input kinds other than Python source, by file suffix
INPUT_KINDS = {".json": lint_text_input, ".ipynb": lint_notebook}


def lint_source(source: str, name: str, settings: Settings) -> FileResult:
    """Lint source text (Python, or another input kind by its suffix); never raises."""
    kind = INPUT_KINDS.get(os.path.splitext(name)[1])
    return kind(source, name, settings) if kind is not None else lint_python(source, name, settings)


def lint_alone(source: str, name: str, settings: Settings) -> FileResult:
    """Lint Python source text as if its project had no other module: what its own text says,
    without the summaries of the modules it imports or of those that call it. Quicker than
    `lint_python` where those are not computed yet (the language server's first result for a file
    just opened); its findings may differ, and are not cached."""
    result = lint_python(source, name, settings, alone=True)
    result.cacheable = False
    return result


def lint_python(source: str, name: str, settings: Settings, alone: bool = False) -> FileResult:
    """Lint Python source text; never raises (an analysis bug becomes an internal-error diagnostic).
    `alone`: see `lint_alone`."""
    from trainlint.project import budget

    _allow_deep_recursion()
    result = FileResult(name, source=source)
    budget.configure(settings.file_timeout)
    budget.forget()
    # the analysis, the project's summaries it asks for included, makes no garbage cycles worth
    # collecting mid-file: the collector's passes over the trees it holds cost a fifth of the run
    # (a worker frees the file's garbage with one young collection after it, workers.py)
    collecting = gc.isenabled()
    gc.disable()
    try:
        _lint_python(source, name, settings, result, alone)
    finally:
        if collecting:
            gc.enable()
        if budget.exceeded():  # what the time limit decided is the machine's, not the file's: not cached
            result.unknown_summaries = tuple(sorted(budget.exceeded()))
            result.cacheable = False
    return result


_DEEP: list[bool] = []


def _allow_deep_recursion() -> None:
    """Room for deep but valid code in this process too, once (a worker makes it for itself; the
    language server, `--fix`, stdin and `explain` analyse in the process that runs them)."""
    if not _DEEP:
        from trainlint.engine.worker_process import allow_deep_recursion

        allow_deep_recursion()
        _DEEP.append(True)


def _lint_python(source: str, name: str, settings: Settings, result: FileResult, alone: bool = False) -> None:
    rules, probed = _prefilter(source, name, settings, alone)
    result.dependencies = probed
    if not rules:
        return
    from trainlint.engine.precheck import refuse, too_big_to_parse

    refused = refuse(source, settings.limits())
    if refused:
        result.diagnostics.append(could_not_analyse(name, refused))
        return
    too_big = too_big_to_parse(source, settings.file_memory)
    if too_big:  # not cached, like the memory cap it anticipates: file-memory is not in the cache key
        result.diagnostics.append(could_not_analyse(name, too_big))
        result.cacheable = False
        return
    _analyse(source, name, settings, rules, result, alone)


def rules_for(source: str, name: str, settings: Settings) -> list[Rule]:
    """The prefilter: the enabled rules that can fire on `source`, judged from its text. A rule's
    tokens (or a configured step function) must occur; a per-step rule needs a module that can hold
    a training step (`could_step`); a rule may refine the test (`Rule.may_fire`).

    A file for which this is empty is not parsed at all.
    """
    return _prefilter(source, name, settings)[0]


def _prefilter(source: str, name: str, settings: Settings, alone: bool = False) -> tuple[list[Rule], tuple[tuple[str, int, str], ...]]:
    """`rules_for`, and the files whose absence or presence it depended on (see `could_step`);
    `alone`: as if the project had no other module (no module imported from it, none calling in)."""
    if not source.strip():
        return [], ()
    if settings.show_steps:  # every module is analysed: the question may be why it has no step
        return _rules(_codes(settings)), ()
    ignored = settings.ignored_for(Path(name))
    codes = tuple(c for c in _codes(settings) if not any(c.startswith(i) for i in ignored))
    configured = any(fn in source for fn in settings.step_functions)
    candidates = _rules(codes)
    present = {token for token in _tokens(candidates) if token in source}  # rules share tokens: each looked for once
    rules = [r for r in candidates if configured or not r.requires or not present.isdisjoint(r.requires)]
    if configured:
        return rules, ()
    # a module with functions may run every step because another module calls it from its step:
    # the per-step rules then need no step (nor a step's tokens) in this module's own text
    per_step = [r for r in candidates if r.per_step]
    handed = [r for r in candidates if r.handed_in] if "def " in source and not alone else []
    if not rules and not (per_step and "def " in source) and not handed:
        return rules, ()
    from trainlint.model.training import could_step
    from trainlint.project.index import watching
    from trainlint.project.shared import shared

    known: list[bool] = []

    def imports_project() -> bool:
        if not known:
            known.append(not alone and shared().imports_project(name, source))
        return known[0]

    with watching() as probed:
        if "def " in source and per_step and not alone and shared().step_seeds(name):
            # run every step from elsewhere: every per-step rule may fire, whatever this text holds
            rules = [r for r in rules if not r.per_step] + per_step
        elif not (any(r.per_step for r in rules) and could_step(source, settings.step_functions, imports_project)):
            rules = [r for r in rules if not r.per_step]
        rules = [r for r in rules if r.may_fire(source, imports_project)]
        missing = [r for r in handed if r not in rules]
        if missing and shared().passed_arguments(name):  # its functions are given objects by other modules
            rules += missing
    return rules, tuple(sorted(probed))


def _analyse(source: str, name: str, settings: Settings, rules: list[Rule], result: FileResult, alone: bool = False) -> None:
    import libcst as cst

    from trainlint.model import TrainingModel
    from trainlint.model.parse import parse_file

    repaired = False
    try:
        module = parse_file(source, name)
    except cst.ParserSyntaxError as exc:
        message, line, column, python_accepts = syntax_error(source, exc)
        if python_accepts:  # e.g. 10,000 implicitly concatenated strings: valid, but not for libcst
            result.diagnostics.append(could_not_analyse(name, f"the parser (libcst) rejects this valid file: {message}"))
            return
        module, source = pre37_module(source, name)
        if module is None:
            if names_torch_or_a_step(source):  # (a Python 2 NumPy reader on the step's path holds nothing to report)
                result.diagnostics.append(error_diagnostic(name, f"syntax error: {message}", line, column))
            return
        # reported, and the rest analysed as that Python read it (its findings hold once the line is fixed)
        result.diagnostics.append(error_diagnostic(name, f"syntax error: {message}; `async=` is a keyword argument of "
                                                   "Python before 3.7 (PyTorch's `non_blocking=`): the rest of the file was analysed", line, column))
        repaired = True
    except RecursionError:
        result.diagnostics.append(could_not_analyse(name, "nesting too deep for the parser"))
        return
    except MemoryError:
        result.diagnostics.append(could_not_analyse(name, "the parser ran out of memory"))
        return
    except UnicodeEncodeError:  # a lone surrogate: a notebook's or an editor's JSON can hold one, a file cannot
        result.diagnostics.append(lone_surrogate(source, name))
        return
    try:
        from trainlint.project.index import watching
        from trainlint.project.kept_models import kept_model
        from trainlint.project.shared import shared

        with watching() as depends:
            # (no project: the model asks no other module, `alone`); the model its summary built, when
            # this view answers what that one asked alike
            analysis, project = settings.analysis(), None if alone else shared()
            model = (project is not None and kept_model(name, source, analysis, project)) or TrainingModel.build(module, analysis, path=name, project=project)
            findings: list[tuple[Rule, Finding]] = []
            for rule in rules if not model.other_framework else ():
                findings.extend((rule, f) for f in rule.check(model))
        result.dependencies = tuple(sorted(set(result.dependencies) | depends))
        if settings.show_steps and not model.other_framework:
            from trainlint.engine.locating import step_scope

            result.steps = step_scope(model, source, name)
        unused_noqa = settings.reports_unused_noqa(Path(name)) and not settings.ignore_noqa
        if findings or unused_noqa:  # reading the comments tokenizes the file: only when they matter
            from trainlint.engine.locating import located_diagnostics
            from trainlint.noqa import Suppressions, parse_suppressions

            suppressions = Suppressions() if settings.ignore_noqa else parse_suppressions(source)
            if findings:
                located = located_diagnostics(model, source, name, findings, suppressions)
                # (a fix's edits were made on the text as read, not as the file holds it)
                result.diagnostics.extend(replace(d, fix=None) if repaired else d for d in located)
            if unused_noqa:
                result.diagnostics.extend(suppressions.unused(name, {r.code for r in rules}))
    except RecursionError:
        result.diagnostics.append(could_not_analyse(name, "nesting too deep"))
    except MemoryError:
        raise  # a worker reports it with its memory cap
    except Exception as exc:  # an analysis bug must not stop the run
        import traceback

        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result.diagnostics.append(error_diagnostic(name, f"internal error while analysing this file: {detail}"))
        result.internal_error = True


def lint_paths(
    tasks: list[tuple[Path, Settings]],
    jobs: int | None = None,
    keep_source: bool = False,
    cache: Cache | None = None,
    done: Callable[[int], None] | None = None,
) -> list[FileResult]:
    """Lint many files: from the cache where it holds them, the rest in contained worker processes.

    Results are sorted by path. Every file gets a result: one whose analysis crashed, hung or ran
    out of memory gets a TL000 saying so. `done(n)` is told as files are done (a progress display).
    """
    jobs = jobs or os.cpu_count() or 1
    results: list[FileResult | None] = [None] * len(tasks)
    misses: list[tuple[str, Settings, ReadAs | None]] = []
    miss_index: list[int] = []
    keys: list[str | None] = []
    if cache is not None:
        cache.begin([str(path) for path, _ in tasks])
    for i, (path, settings) in enumerate(tasks):
        hit, key, data = cache.lookup(str(path), settings) if cache is not None else (None, None, None)
        if hit is not None:
            results[i] = hit
        else:
            misses.append((str(path), settings, ReadAs(_content_digest(data)) if data is not None else None))
            miss_index.append(i)
            keys.append(key)
    if done is not None and len(misses) < len(tasks):
        done(len(tasks) - len(misses))
    if misses:
        from trainlint.engine import workers
        from trainlint.project.store import sharing_summaries

        _preload()
        with _keeping(cache), sharing_summaries() if len(misses) > 1 else nullcontext():  # (a recycled worker finds them there too)
            for j, result in workers.run(misses, jobs, _lint_task, _file_timeout, _file_memory):
                results[miss_index[j]] = result
                key = keys[j]
                if cache is not None and key is not None and result.cacheable and not result.internal_error:
                    cache.store(key, result)
                result.dependencies = ()  # (the cache's only: a run's results would hold the project's states many times over)
                if done is not None:
                    done(1)
    done = [r for r in results if r is not None]
    if cache is not None:
        cache.close()
    for r in done:
        if not keep_source:
            r.source = None
        r.diagnostics.sort(key=Diagnostic.sort_key)
    return sorted(done, key=lambda r: r.path)


def _keeping(cache: Cache | None) -> ContextManager[None]:
    """Keep the project's summaries in the result cache between runs (authenticated like results)."""
    if cache is None or not cache.enabled:
        return nullcontext()
    from trainlint.engine.cache import code_key
    from trainlint.project.store import keeping_summaries

    return keeping_summaries(cache.read_entry, cache.write_entry, code_key())


def _preload() -> None:
    """Import the analysis before workers are forked, so that each starts with it loaded.

    Everything these imports make (libcst's ~400 classes, the rules, their tables) lives as long as
    the process: instead of the collector tracing it again and again while it is made, freeing none
    of it (about 0.02 s of a one-file run), collection is paused and it is then frozen (`gc.freeze`),
    out of every later collection's way and shared with the forked workers, not copied on write.
    """
    from trainlint.dataclass_methods import import_libcst, save_dataclass_methods

    collecting = gc.isenabled()
    gc.disable()
    try:
        import_libcst()

        import trainlint.model  # noqa: F401
        import trainlint.model.positions  # noqa: F401
        import trainlint.engine.locating  # noqa: F401
        import trainlint.engine.precheck  # noqa: F401
        import trainlint.rules  # noqa: F401
    finally:
        gc.freeze()
        if collecting:
            gc.enable()

    save_dataclass_methods()  # (the analysis's own dataclasses, and the command line's before it)


def _file_timeout(settings: Settings) -> float:
    return settings.file_timeout


def _file_memory(settings: Settings) -> int:
    return settings.file_memory
