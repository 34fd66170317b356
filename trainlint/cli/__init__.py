"""The command line: `trainlint [check] PATH...`, `trainlint rule CODE`, `trainlint rules`.

Exit codes: 0 no findings; 1 findings (a file that fails to parse counts); 2 usage, configuration
or internal error. Heavy modules (libcst, rich) are imported inside the commands so that start-up
stays fast; torch is never imported here.
"""

from __future__ import annotations

import os
import sys
import time

from trainlint.dataclass_methods import keep_dataclass_methods

keep_dataclass_methods()  # (before the modules below define their dataclasses)

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import click

from trainlint import __version__
from trainlint.cli.common import (
    EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, IMPLICIT_COMMAND, DefaultGroup, _warn, refuse_overwriting, result_cache, say_unwritten,
    silence, unflushed, writing_to,
)
from trainlint.cli.catalogue import rule_command, rules_command
from trainlint.cli import fixing
from trainlint.cli.settings import SettingOptions, print_settings, show_imports_and_exit, settings_resolver, warn_preview_selected
from trainlint.cli.verify import verify_group
from trainlint.report.render import COLOR_CHOICES, ReportOptions, fixable_by, make_console
from trainlint.report.text import visible

if TYPE_CHECKING:

    from trainlint.engine.cache import Cache
    from trainlint.config import Settings
    from trainlint.engine.discovery import Target
    from trainlint.engine.results import FileResult

FAIL_LEVELS = ("error", "warning", "info")  # most severe first
OUTPUT_FORMATS = ("text", "full", "concise", "json", "json-lines", "sarif", "github", "gitlab", "junit", "lsp")  # (`full`: ruff's name for text)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainlint")
def main() -> None:
    """trainlint: find the mistakes that silently ruin PyTorch training runs."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, readable=False))  # an unreadable file gets a TL000
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable (replaces the defaults), e.g. TL1,TL401 or ALL.")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option("--extend-select", multiple=True, help="Rule codes or prefixes to enable on top of the selection.")
@click.option("--preview/--no-preview", default=None, help="Enable the rules still in preview (as selected); overrides `preview` in the configuration.")
@click.option("--extend-ignore", multiple=True, help="Rule codes or prefixes to disable on top of the configured ignores.")
@click.option("--per-file-ignores", "--extend-per-file-ignores", "per_file_ignores", multiple=True, metavar="PATTERN:CODES", help="Disable codes for files matching a pattern, e.g. 'tests/*.py:TL401,TL403', on top of the configured ones (so ruff's --extend-per-file-ignores is the same option).")
@click.option("--exclude", multiple=True, help="Gitignore-style patterns of files and folders to skip.")
@click.option("--force-exclude/--no-force-exclude", default=None, help="Apply excludes to files named explicitly too (for pre-commit); overrides `force-exclude` in the configuration.")
@click.option("--output-format", "--format", "output_format", type=click.Choice(OUTPUT_FORMATS), default=None, help="How findings are printed (default: `output-format` in the configuration, else text; `full` is ruff's name for text).")
@click.option("-o", "--output-file", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Write the findings to this file instead of standard output.")
@click.option("--statistics", is_flag=True, help="Print only the number of findings per rule.")
@click.option("-e", "--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel processes (default: CPU count).")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
@click.option("-s", "--silent", is_flag=True, help="Print nothing (errors aside); only the exit code tells (a report still goes to --output-file).")
@click.option("-v", "--verbose", is_flag=True, help="Say on stderr which configurations apply, how many files are linted and how long it took.")
@click.option("-w", "--watch", is_flag=True, help="Lint, then lint again whenever a linted file, its folder or a given path changes (Ctrl-C stops).")
@click.option("--stdin-filename", type=click.Path(path_type=Path), default=None, help="The file name of source read from `-`.")
@click.option("--config", "config", multiple=True, help="A configuration file for every file (pyproject.toml, trainlint.toml), or a TOML `KEY = VALUE` override, e.g. 'preview = true'; repeatable.")
@click.option("--isolated", is_flag=True, help="Read no configuration file.")
@click.option("--fix/--no-fix", default=False, help="Apply safe fixes in place (with `-`: print the fixed source); --no-fix is the default.")
@click.option("--fix-only", is_flag=True, help="Apply fixes, and neither report nor exit 1 for the findings left.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when --fix changed a file, even if no finding is left.")
@click.option("--ignore-noqa", is_flag=True, help="Report findings that `# noqa` comments suppress.")
@click.option("--fail-level", type=click.Choice(FAIL_LEVELS), default="info", show_default=True, help="Findings below this severity are reported but do not make the exit code 1.")
@click.option("--baseline", "baseline_file", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Report only findings not recorded in this baseline file (overrides `baseline` in the configuration).")
@click.option("--write-baseline", type=click.Path(path_type=Path, dir_okay=False), default=None, help="Record today's findings in this baseline file, then exit 0.")
@click.option("--unsafe-fixes", is_flag=True, help="Apply unsafe fixes too (with --fix or --diff).")
@click.option("--fixable", multiple=True, help="Only these rule codes or prefixes may be fixed (and are marked [*]), e.g. TL3.")
@click.option("--unfixable", multiple=True, help="These rule codes or prefixes are never fixed.")
@click.option("--diff", is_flag=True, help="Print only the fixes as a unified diff, writing nothing.")
@click.option("--show-fixes", is_flag=True, help="List the fixes applied (with --fix) or available, per file and rule.")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` comments that silence every finding, then exit.")
@click.option("--color", type=click.Choice(COLOR_CHOICES), default="auto", show_default=True, help="Colour in text output (NO_COLOR in the environment means never, unless always).")
@click.option("--show-files", is_flag=True, help="List the files that would be linted, then exit.")
@click.option("--show-steps", is_flag=True, help="List the step loops and the functions that run every training step, with a call chain each, then exit.")
@click.option("--show-settings", is_flag=True, help="Print the settings in effect (after configuration and options), then exit.")
@click.option("--show-imports", is_flag=True, help="For one file: its project root and where each of its imports resolves to a local module, then exit.")
@click.option("-n", "--no-cache", is_flag=True, help="Analyse every file; neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), default=None, envvar="TRAINLINT_CACHE_DIR", help="Where results are cached (default: the user cache directory; env TRAINLINT_CACHE_DIR).")
@click.option("--file-timeout", type=click.FloatRange(min=0, min_open=True), default=None, help="CPU seconds one file's analysis may take before it is reported as TL000 (default 20).")
@click.option("--file-memory", type=click.IntRange(min=1), default=None, help="MB of memory one worker may use for a file before it is reported as TL000 (default 1024).")
@click.option("--progress/--no-progress", "progress", default=None, help="Show progress on standard error (default: on a terminal, once a run takes over a second; never on a pipe or in CI unless asked).")
def check(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    extend_select: tuple[str, ...],
    preview: bool | None,
    extend_ignore: tuple[str, ...],
    per_file_ignores: tuple[str, ...],
    exclude: tuple[str, ...],
    force_exclude: bool | None,
    output_format: str | None,
    output_file: Path | None,
    statistics: bool,
    exit_zero: bool,
    jobs: int | None,
    quiet: bool,
    silent: bool,
    verbose: bool,
    watch: bool,
    stdin_filename: Path | None,
    config: tuple[str, ...],
    isolated: bool,
    fix: bool,
    fix_only: bool,
    exit_non_zero_on_fix: bool,
    ignore_noqa: bool,
    fail_level: str,
    baseline_file: Path | None,
    write_baseline: Path | None,
    unsafe_fixes: bool,
    fixable: tuple[str, ...],
    unfixable: tuple[str, ...],
    diff: bool,
    show_fixes: bool,
    add_noqa: bool,
    color: str,
    show_files: bool,
    show_steps: bool,
    show_settings: bool,
    show_imports: bool,
    no_cache: bool,
    cache_dir: Path | None,
    file_timeout: float | None,
    file_memory: int | None,
    progress: bool | None,
) -> None:
    """Lint PATHS (files, folders, notebooks; `-` reads standard input)."""
    _ending.without_cleanup = True
    from trainlint.engine.discovery import discover, present
    from trainlint.engine.results import FileResult, error_diagnostic as _error

    from trainlint.config import ConfigError

    context = click.get_current_context()
    if context.meta.get(IMPLICIT_COMMAND) and paths and str(paths[0]) != "-" and not present(paths[0]):
        # `trainlint lintt .`: a mistyped command, not a missing file to report while the rest is linted
        raise click.UsageError(_not_a_command(str(paths[0]), context), context.parent)
    if watch:
        _watch(context)
    silence.on = silent
    can_fix = fixing.fix_filter(fixable, unfixable)
    paths = paths or (Path("."),)
    anchor = stdin_filename or next((p for p in paths if str(p) != "-"), Path("."))
    options = SettingOptions(
        config, isolated, select, (*ignore, *extend_ignore), extend_select, per_file_ignores, exclude, file_timeout, file_memory, preview, ignore_noqa
    )
    try:
        resolver = settings_resolver(options)
        settings = resolver.for_path(anchor)
    except ConfigError as exc:
        _warn(str(exc), prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    fix = fix or fix_only
    # ruff's configuration keys for what the options set; the options win
    output_format = output_format or settings.output_format or "text"
    output_format = "text" if output_format == "full" else output_format
    force_exclude = settings.force_exclude if force_exclude is None else force_exclude
    cache_dir = cache_dir or settings.cache_dir
    warn_preview_selected(settings)
    if unsafe_fixes and not (fix or diff):
        _warn("--unsafe-fixes applies nothing without --fix or --diff (findings it would fix are marked [*])")
    if show_settings:
        with writing_to(what="settings"):
            print_settings(settings, anchor)
        sys.exit(EXIT_CLEAN)
    if show_imports:
        show_imports_and_exit(anchor)
    stdin = any(str(p) == "-" for p in paths)
    disk_paths = [p for p in paths if str(p) != "-"]
    missing = [p for p in disk_paths if not present(p)]
    targets = discover([p for p in disk_paths if present(p)], settings.root, settings.exclude, force_exclude)
    try:  # each file's own configuration: a nested project's settings and excludes
        settings_of = {t.path: resolver.for_path(t.path) for t in targets}
    except ConfigError as exc:
        _warn(str(exc), prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    targets = [t for t in targets if not _excluded_by_own(t, settings_of[t.path], settings, force_exclude)]
    configs = {s.config_path for s in settings_of.values()} | {settings.config_path}
    _ending.watched = [*disk_paths, *(t.path for t in targets), *(c for c in configs if c is not None)]
    if verbose:
        named = ", ".join(sorted(str(c) for c in configs if c is not None)) or "none (the defaults)"
        _warn(f"{len(targets)} file{'s' if len(targets) != 1 else ''} to lint; configuration: {named}", prefix="trainlint: ")
    if show_files:
        with writing_to(what="list of files"):
            for target in targets:
                mark = "  (test code: the per-step rules skip it)" if _test_code(str(target.path), settings_of[target.path]) else ""
                click.echo(visible(str(target.path)) + mark)
        sys.exit(EXIT_CLEAN)
    if not (targets or missing or stdin):
        _warn("No Python files found")
        if output_format in ("text", "concise"):  # machine formats still print their empty report
            sys.exit(EXIT_CLEAN)

    if show_steps:
        from trainlint.report.steps import steps_text

        stepped = _lint_targets([(t.path, replace(settings_of[t.path], show_steps=True)) for t in targets], jobs, color, progress=progress)  # (not cached)
        with writing_to(what="step loops"):
            click.echo(steps_text(sorted(stepped, key=lambda r: r.path)), nl=False)
        sys.exit(EXIT_ERROR if any(r.internal_error for r in stepped) else EXIT_CLEAN)
    sources = [t.path for t in targets] + disk_paths + ([stdin_filename] if stdin and stdin_filename else [])
    refuse_overwriting(sources, [("--output-file", output_file, "report"), ("--write-baseline", write_baseline, "baseline")])
    started = time.perf_counter() if verbose else 0.0
    results = _lint_targets([(t.path, settings_of[t.path]) for t in targets], jobs, color, result_cache(no_cache, cache_dir), progress)
    if verbose:
        _warn(f"linted {len(results)} file{'s' if len(results) != 1 else ''} in {time.perf_counter() - started:.2f} s", prefix="trainlint: ")
    results.extend(FileResult(str(p), [_error(str(p), "cannot read: no such file or directory", name="io-error")]) for p in missing)
    stdin_result = None
    if stdin:
        from trainlint.engine.lint import lint_bytes
        from trainlint.reading import read_stream

        # one byte past max-file-size is enough to refuse it: never buffer an endless stream
        stdin_name = str(stdin_filename or "-")
        stdin_result = lint_bytes(read_stream(sys.stdin.buffer, settings.read_limit(stdin_name)), stdin_name, settings)
        results.append(stdin_result)
    for result in results:
        result.diagnostics.sort(key=lambda d: d.sort_key())
    results.sort(key=lambda r: r.path)
    fixing.restrict_fixes(results, can_fix)
    if add_noqa:
        added = fixing.add_noqa([r for r in results if r is not stdin_result])
        _warn(f"Added {added} noqa directive{'s' if added != 1 else ''}.", prefix="")
        sys.exit(EXIT_CLEAN)

    if write_baseline is not None:
        from trainlint.report.baseline import write_baseline as record
        from trainlint.report.render import source_lines

        try:
            recorded = record(write_baseline, [d for r in results for d in r.diagnostics], source_lines(results))
        except OSError as exc:
            _warn(f"cannot write the baseline {write_baseline}: {exc.strerror or exc}", prefix="trainlint: error: ")
            sys.exit(EXIT_ERROR)
        _warn(f"Recorded {recorded} finding{'s' if recorded != 1 else ''} in {write_baseline}.", prefix="")
        sys.exit(EXIT_CLEAN)

    options = ReportOptions(output_format, statistics, quiet, color, unsafe_fixes)
    before = [d for r in results for d in r.diagnostics]
    would_fix = any(fixable_by(unsafe_fixes)(d) for d in before)
    if stdin_result is not None and (fix or diff):
        # like ruff: the fixed source (or the diff) is the output; with --fix what is left goes to stderr
        results[results.index(stdin_result)] = fixing.fix_stdin(stdin_result, settings, unsafe_fixes, diff, can_fix)
        if not diff:
            _report_to(results, options, output_file, err=True)
            _exit(results, exit_zero)
    elif fix or diff:
        results = fixing.apply_fixes(results, settings, unsafe_fixes, write=fix and not diff, can_fix=can_fix)
    if diff:  # only the diff: exit 1 when there was something to fix
        sys.exit(EXIT_FINDINGS if would_fix and not exit_zero else EXIT_CLEAN)
    fixed = len(before) - sum(len(r.diagnostics) for r in results) if fix else 0
    options = replace(
        options, hidden_by_baseline=_apply_baseline(results, baseline_file or settings.baseline),
        test_code_files=sum(1 for r in results if _test_code(r.path, settings_of.get(Path(r.path), settings))),
    )
    if not fix_only and not (silent and output_file is None):
        _report_to(results, options, output_file)
    if show_fixes and not silent:  # (on stderr when stdout holds a machine-readable report)
        after = [d for r in results for d in r.diagnostics]
        summary_to_stderr = output_format not in ("text", "concise")
        with writing_to("standard error" if summary_to_stderr else "standard output", "fixes"):
            fixing.print_fix_summary(before, after, fix, unsafe_fixes, err=summary_to_stderr)
    if exit_non_zero_on_fix and fixed > 0 and not any(r.internal_error for r in results):
        sys.exit(EXIT_FINDINGS)
    _exit([] if fix_only else results, exit_zero, fail_level)


class _Ending:
    """How the process ends: `check` sets `without_cleanup` (see `run`), and the paths `--watch`
    polls (those given, the files linted and their configurations)."""

    without_cleanup = False
    watched: list[Path] = []


def _not_a_command(word: str, context: click.Context) -> str:
    """What a first word that is neither a command nor an existing path gets told."""
    from difflib import get_close_matches

    commands = sorted(getattr(context.parent.command, "commands", ())) if context.parent is not None else []
    close = get_close_matches(word, commands, n=1)  # (a far word gets the list of commands instead)
    hint = f"did you mean {close[0]!r}?" if close else f"the commands are {', '.join(commands)}"
    return f"{word!r} is neither a command nor an existing path: {hint} (`trainlint check {word}` reports a missing file)"


def _watch(context: click.Context) -> None:
    """`--watch`: run this `check` again (without --watch) whenever a file it watches changes; ends on Ctrl-C."""
    from trainlint.cli.watching import watch

    params = {**context.params, "watch": False}
    given = [name for name, on in (("-", any(str(p) == "-" for p in params["paths"])), ("--show-files", params["show_files"]),
             ("--show-settings", params["show_settings"]), ("--show-steps", params["show_steps"]), ("--add-noqa", params["add_noqa"]),
             ("--write-baseline", params["write_baseline"] is not None), ("--diff", params["diff"])) if on]
    if given:
        raise click.UsageError(f"--watch lints the files on disk again at each change; it does not go with {', '.join(given)}")
    context.meta[IMPLICIT_COMMAND] = False  # (a path removed while watching is then reported, not a usage error)

    def lint_once() -> list[Path]:
        _ending.watched = []
        try:
            context.invoke(check, **params)
        except SystemExit:  # (each run ends as a plain `check` does)
            pass
        if not _ending.watched:  # it ended before finding its files (a configuration error): watch what was given
            from trainlint.config import find_config

            given = [Path(p) for p in params["paths"]] or [Path(".")]
            _ending.watched = [*given, *(c for c in map(find_config, given) if c is not None)]
        return _ending.watched

    watch(lint_once)


_ending = _Ending()


def run() -> None:
    """`main` as the `trainlint` command runs it (`trainlint.__main__`): after `check`, the process
    ends without Python's clean-up. Freeing every object a run made (libcst's classes, trees and the
    analysis's tables) takes about 0.05 s of a one-file run, and 0.015 s of a cached one, and nothing
    needs it: the report, the cache and any file written are closed, the workers stopped, and the
    standard streams are flushed here (a closed pipe, `| head`, ends it quietly)."""
    try:
        main()
    except SystemExit as done:
        if _ending.without_cleanup and (done.code is None or isinstance(done.code, int)):
            code = done.code or 0
            # what stdout still holds is written now: a full disk fails here for a short report
            unwritten = unflushed(sys.stdout)
            if unwritten is not None and code != EXIT_ERROR:  # (2: a failure already said)
                say_unwritten("output", "standard output", unwritten)
                code = EXIT_ERROR  # not 1, which would say "findings"
            unflushed(sys.stderr)
            os._exit(code)
        raise


def _exit(results: Sequence[FileResult], exit_zero: bool, fail_level: str = "info") -> None:
    """2 on an internal error; else 1 when a finding at or above `fail_level` is left (TL000 always counts)."""
    if any(r.internal_error for r in results):
        sys.exit(EXIT_ERROR)
    if exit_zero:
        sys.exit(EXIT_CLEAN)
    counted = FAIL_LEVELS[: FAIL_LEVELS.index(fail_level) + 1]
    failing = any(d.severity.value in counted or d.code == "TL000" for r in results for d in r.diagnostics)
    sys.exit(EXIT_FINDINGS if failing else EXIT_CLEAN)


def _excluded_by_own(target: Target, own: Settings, anchor: Settings, force_exclude: bool) -> bool:
    """Whether a file's own (nested) configuration excludes it: as the anchor's excludes do in
    discovery, for files found in folders, and for named files only with --force-exclude."""
    from trainlint.engine.discovery import is_excluded

    if own.config_path == anchor.config_path or (target.explicit and not force_exclude):
        return False
    return is_excluded(target.path, own.root, own.exclude)


def _test_code(path: str, settings: Settings) -> bool:
    """Whether the per-step rules skip this file as test code (as `TrainingModel.is_test_code` decides)."""
    from trainlint.test_code import is_test_file

    return not settings.lint_test_code and path != "-" and is_test_file(path)


def _apply_baseline(results: Sequence[FileResult], file: Path | None) -> int:
    """Drop the findings a baseline records; how many it hid. An unreadable baseline is a usage error."""
    if file is None:
        return 0
    from trainlint.report.baseline import BaselineError, new_findings, read_baseline
    from trainlint.report.render import source_lines

    try:
        known = read_baseline(file)
    except BaselineError as exc:
        _warn(str(exc), prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    sources = source_lines(results)
    hidden = 0
    for result in results:
        result.diagnostics, dropped = new_findings(result.diagnostics, sources, file, known)
        hidden += dropped
    return hidden



def _lint_targets(
    tasks: list[tuple[Path, Settings]], jobs: int | None, color: str, cache: Cache | None = None, progress: bool | None = None
) -> list[FileResult]:
    """Lint the discovered files; with progress on stderr when `progress_mode` says so (see cli/progress.py)."""
    from trainlint.engine.lint import lint_paths

    # (a pipe or --no-progress: the progress module is not even imported)
    if not tasks or progress is False or (progress is None and not sys.stderr.isatty()):
        return lint_paths(tasks, jobs, keep_source=False, cache=cache)
    from trainlint.cli.progress import RunProgress, progress_mode

    mode = progress_mode(progress)
    if mode is None:
        return lint_paths(tasks, jobs, keep_source=False, cache=cache)
    with RunProgress(len(tasks), mode, color) as shown:
        return lint_paths(tasks, jobs, keep_source=False, cache=cache, done=shown.advance)


def _report_to(results: Sequence[FileResult], options: ReportOptions, output_file: Path | None, err: bool = False) -> None:
    """Render the report to `--output-file`, standard error, or standard output."""
    from trainlint.report.render import render

    if output_file is not None:
        try:
            output_file.parent.mkdir(parents=True, exist_ok=True)
            with output_file.open("w", encoding="utf-8") as out:
                render(results, options, out)
        except OSError as exc:  # the findings are not lost silently: say so, and exit 2
            _warn(f"cannot write the report to {output_file}: {exc.strerror or exc}", prefix="trainlint: error: ")
            sys.exit(EXIT_ERROR)
    else:
        with writing_to("standard error" if err else "standard output", "report"):
            render(results, options, sys.stderr if err else None)
            (sys.stderr if err else sys.stdout).flush()  # a full disk fails here, not unseen at the exit


main.add_command(verify_group)
main.add_command(rule_command)


@main.command("explain")
@click.argument("target")
@click.option("--config", "config", multiple=True, help="A configuration file, or a TOML `KEY = VALUE` override (as for `check`).")
@click.option("--isolated", is_flag=True, help="Read no configuration file.")
@click.pass_context
def explain_command(ctx: click.Context, target: str, config: tuple[str, ...], isolated: bool) -> None:
    """Explain a rule (`explain TL401`), or a line (`explain train.py:120`): for each rule that could
    apply there, what decided it (the gate and why it gates, the value the analysis saw, the name
    list that silenced it, or why the line does not run every step). Exit 1 when a rule fires there."""
    from trainlint.cli.explain import explain  # (its code is not imported by other commands)

    explain(ctx, target, config, isolated)
main.add_command(rules_command)


@main.command("clean")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), default=None, envvar="TRAINLINT_CACHE_DIR", help="The cache to remove (default: the user cache directory; env TRAINLINT_CACHE_DIR).")
def clean_command(cache_dir: Path | None) -> None:
    """Remove the result cache: only the entries trainlint wrote. Anything else in the folder stays,
    and is listed with why."""
    from trainlint.engine.cache_folder import clean, default_directory

    root = cache_dir or default_directory()
    done = clean(root)
    shown = visible(str(root))
    if done.entries or done.folders:
        click.echo(f"Removed the cache at {shown} ({done.entries} entr{'y' if done.entries == 1 else 'ies'})")
    else:
        click.echo(f"No cache at {shown}")
    if done.others:  # (named, not looked into: the folder may be anything a user pointed the cache at)
        names = ", ".join(visible(n) for n in done.others[:5]) + (f" and {len(done.others) - 5} more" if len(done.others) > 5 else "")
        count = len(done.others)
        click.echo(f"Left {count} other file{'s' if count != 1 else ''} or folder{'s' if count != 1 else ''} in {shown}, not trainlint's: {names}")
    for path, why in done.left[:CLEAN_SHOWN]:
        click.echo(f"Left {visible(path)}: {why}")
    if len(done.left) > CLEAN_SHOWN:
        click.echo(f"Left {len(done.left) - CLEAN_SHOWN} more paths, for the same reasons")


CLEAN_SHOWN = 10  # what `clean` left, listed one a line; then only counted


@main.command("lsp")
def lsp_command() -> None:
    """Run the language server over stdio (for editors; needs `pip install trainlint[lsp]`)."""
    from trainlint.lsp.launch import run_command  # (`python -m trainlint lsp` comes straight there)

    run_command()




if __name__ == "__main__":
    main()
