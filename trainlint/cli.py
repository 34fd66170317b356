"""The command line: `trainlint [check] PATH...`, `trainlint rule CODE`, `trainlint rules`.

Exit codes: 0 no findings; 1 findings (a file that fails to parse counts); 2 usage, configuration
or internal error. Heavy modules (libcst, rich) are imported inside the commands so that start-up
stays fast; torch is never imported here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import click

from trainlint import __version__

if TYPE_CHECKING:
    from rich.console import Console

    from trainlint.config import Settings
    from trainlint.diagnostics import Diagnostic
    from trainlint.engine import FileResult

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
OUTPUT_FORMATS = ("text", "concise", "json", "sarif", "github", "lsp")


class DefaultGroup(click.Group):
    """A group with a default command: `trainlint src/` means `trainlint check src/`, and
    `trainlint verify src/` means `trainlint verify probes src/`."""

    def __init__(self, *args: object, default: str = "check", **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.default = default

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = [self.default, *args]
        return super().parse_args(ctx, args)


def _split_codes(values: Sequence[str]) -> list[str] | None:
    if not values:
        return None
    return [c.strip().upper() if c.strip().upper() != "ALL" else "ALL" for v in values for c in v.split(",") if c.strip()]


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainlint")
def main() -> None:
    """trainlint: find the mistakes that silently ruin PyTorch training runs."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable (replaces the defaults), e.g. TL1,TL401 or ALL.")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option("--extend-select", multiple=True, help="Rule codes or prefixes to enable on top of the selection.")
@click.option("--exclude", multiple=True, help="Gitignore-style patterns of files and folders to skip.")
@click.option("--force-exclude", is_flag=True, help="Apply excludes to files named explicitly too (for pre-commit).")
@click.option("--format", "output_format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True)
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel processes (default: CPU count).")
@click.option("-q", "--quiet", is_flag=True, help="Print findings only, no summary.")
@click.option("--stdin-filename", type=click.Path(path_type=Path), default=None, help="The file name of source read from `-`.")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), default=None, help="A pyproject.toml to read [tool.trainlint] from.")
@click.option("--fix", is_flag=True, help="Apply safe fixes in place.")
@click.option("--unsafe-fixes", is_flag=True, help="Apply unsafe fixes too (with --fix or --diff).")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff instead of writing them.")
@click.option("--no-cache", is_flag=True, help="Analyse every file; neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), default=None, envvar="TRAINLINT_CACHE_DIR", help="Where results are cached (default: the user cache directory; env TRAINLINT_CACHE_DIR).")
@click.option("--file-timeout", type=click.FloatRange(min=0, min_open=True), default=None, help="Seconds one file's analysis may take before it is reported as TL000 (default 20).")
@click.option("--file-memory", type=click.IntRange(min=1), default=None, help="MB of memory one worker may use for a file before it is reported as TL000 (default 1024).")
def check(
    paths: tuple[Path, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    extend_select: tuple[str, ...],
    exclude: tuple[str, ...],
    force_exclude: bool,
    output_format: str,
    statistics: bool,
    exit_zero: bool,
    jobs: int | None,
    quiet: bool,
    stdin_filename: Path | None,
    config_file: Path | None,
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
    no_cache: bool,
    cache_dir: Path | None,
    file_timeout: float | None,
    file_memory: int | None,
) -> None:
    """Lint PATHS (files or folders; `-` reads standard input)."""
    from trainlint.config import ConfigError, find_config, load_settings, with_overrides
    from trainlint.discovery import discover

    paths = paths or (Path("."),)
    anchor = stdin_filename or next((p for p in paths if str(p) != "-"), Path("."))
    try:
        base = load_settings(config_file or find_config(anchor))
        settings = with_overrides(
            base,
            select=tuple(_split_codes(select)) if select else None,
            ignore=tuple(base.ignore) + tuple(_split_codes(ignore) or ()) if ignore else None,
            extend_select=tuple(base.extend_select) + tuple(_split_codes(extend_select) or ()) if extend_select else None,
            exclude=tuple(base.exclude) + exclude if exclude else None,
            file_timeout=file_timeout,
            file_memory=file_memory,
        )
    except ConfigError as exc:
        click.echo(f"trainlint: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)

    results: list[FileResult] = []
    if any(str(p) == "-" for p in paths):
        from trainlint.engine import lint_bytes

        name = str(stdin_filename or "-")
        results.append(lint_bytes(sys.stdin.buffer.read(), name, settings))
    disk_paths = [p for p in paths if str(p) != "-"]
    if disk_paths:
        from trainlint.engine import lint_paths

        missing = [p for p in disk_paths if not p.exists()]
        targets = discover([p for p in disk_paths if p.exists()], settings.root, settings.exclude, force_exclude)
        results.extend(lint_paths([(t.path, settings) for t in targets], jobs, keep_source=False, cache=_cache(no_cache, cache_dir)))
        if missing:
            from trainlint.engine import FileResult as _FR, _error

            results.extend(_FR(str(p), [_error(str(p), "no such file or directory")]) for p in missing)

    if fix or diff:
        results = _apply_fixes(results, settings, unsafe_fixes, write=fix and not diff)

    _report(results, output_format, statistics, quiet)
    if any(r.internal_error for r in results):
        sys.exit(EXIT_ERROR)
    if exit_zero:
        sys.exit(EXIT_CLEAN)
    sys.exit(EXIT_FINDINGS if any(r.diagnostics for r in results) else EXIT_CLEAN)


def _cache(no_cache: bool, directory: Path | None) -> object:
    """The result cache of a `check` run (None with --no-cache)."""
    if no_cache:
        return None
    from trainlint.cache import Cache, default_directory

    return Cache(directory or default_directory())


def _apply_fixes(results: list[FileResult], settings: Settings, unsafe: bool, write: bool) -> list[FileResult]:
    """Apply (or show) fixes; the remaining diagnostics are those not fixed."""
    from trainlint.engine import decode, lint_source
    from trainlint.fixes import applicable, apply_fixes, unified_diff, write_atomic

    out = []
    for result in results:
        fixable = applicable(result.diagnostics, unsafe)
        path = Path(result.path)
        if not fixable or not path.is_file():
            out.append(result)
            continue
        raw = path.read_bytes()
        source = decode(raw)
        new, applied = apply_fixes(source, fixable)
        if not applied:
            out.append(result)
            continue
        if write:
            bom = "\ufeff" if raw.startswith(b"\xef\xbb\xbf") else ""
            import tokenize, io

            encoding = tokenize.detect_encoding(io.BytesIO(raw).readline)[0].replace("-sig", "")
            write_atomic(path, bom + new, encoding)
            relinted = lint_source(new, result.path, settings)
            relinted.source = None
            out.append(relinted)
        else:
            click.echo(unified_diff(result.path, source, new), nl=False)
            out.append(result)
        click.echo(f"{'Fixed' if write else 'Would fix'} {len(applied)} problem(s) in {result.path}", err=True)
    return out


def _report(results: list[FileResult], output_format: str, statistics: bool, quiet: bool) -> None:
    diagnostics = [d for r in results for d in r.diagnostics]
    if output_format in ("json", "sarif", "github"):
        from importlib import import_module

        output = import_module(f"trainlint.formats.{output_format}").render(diagnostics)
        if output:
            click.echo(output)
        return
    if output_format == "lsp":
        from trainlint.formats.lsp import render as render_lsp

        click.echo(render_lsp([r.path for r in results], diagnostics, _source_lines(diagnostics)))
        return
    from rich.console import Console

    from trainlint.formats.text import render_concise, render_full, render_statistics, summary_line

    console = Console(highlight=False, soft_wrap=True, no_color=bool(os.environ.get("NO_COLOR")))
    if output_format == "concise":
        render_concise(console, diagnostics)
    else:
        render_full(console, diagnostics, _source_lines(diagnostics))
    if statistics:
        render_statistics(console, diagnostics)
    if not quiet:
        console.print(summary_line(diagnostics), highlight=False)


def _source_lines(diagnostics: Sequence["Diagnostic"]) -> dict[str, list[str]]:
    """The lines of each file with findings, for snippets and column conversions."""
    sources: dict[str, list[str]] = {}
    for path in {d.path for d in diagnostics}:
        try:
            sources[path] = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            pass
    return sources


@main.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Explain a rule: what it flags, why, an example and the fix."""
    from rich.console import Console
    from rich.markdown import Markdown

    from trainlint.catalogue import render_page
    from trainlint.rules import RULES_BY_CODE

    rule = RULES_BY_CODE.get(code.upper())
    if rule is None:
        click.echo(f"trainlint: error: unknown rule {code!r}; `trainlint rules` lists them", err=True)
        sys.exit(EXIT_ERROR)
    console = Console(no_color=bool(os.environ.get("NO_COLOR")))
    if console.is_terminal:
        console.print(Markdown(render_page(rule)))
    else:
        click.echo(render_page(rule))


@main.group("verify", cls=DefaultGroup, default="probes")
def verify_group() -> None:
    """Confirm findings by running code (needs `pip install trainlint[verify]`).

    `trainlint verify PATH...` runs a probe per finding; `trainlint verify run SCRIPT` runs a
    training script under instruments.
    """


def _need_torch() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        click.echo("trainlint: error: the verifier needs torch: `pip install 'trainlint[verify]'`", err=True)
        sys.exit(EXIT_ERROR)


def _lint_for_verify(paths: Sequence[Path]) -> list[Diagnostic]:
    from trainlint.config import ConfigError, find_config, load_settings
    from trainlint.discovery import discover
    from trainlint.engine import lint_paths

    try:
        settings = load_settings(find_config(paths[0]))
    except ConfigError as exc:
        click.echo(f"trainlint: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    targets = discover(list(paths), settings.root, settings.exclude)
    return [d for r in lint_paths([(t.path, settings) for t in targets]) for d in r.diagnostics]


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, no_color=bool(os.environ.get("NO_COLOR")))


@verify_group.command("probes")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="Where probes run (auto: CUDA when available).")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, help="Seconds each probe may run.")
def verify_probes(paths: tuple[Path, ...], output_format: str, device: str, timeout: float) -> None:
    """Lint PATHS, then confirm or refute each finding by running a small torch experiment."""
    _need_torch()
    from trainlint.verify.runner import verify

    rows = verify(_lint_for_verify(paths or (Path("."),)), device, timeout)
    if output_format == "json":
        import json

        click.echo(json.dumps(rows, indent=2))
    else:
        from trainlint.formats.verification import render

        render(_console(), rows)
    confirmed = any((r["verification"] or {}).get("status") == "confirmed" for r in rows)
    sys.exit(EXIT_FINDINGS if confirmed else EXIT_CLEAN)


@verify_group.command("run")
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", type=click.IntRange(min=1), default=50, show_default=True, help="Stop after this many optimizer steps.")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Seconds the script may run.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True, help="cpu hides CUDA from the script; cuda requires it.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def verify_run(script: Path, script_args: tuple[str, ...], steps: int, timeout: float, device: str, output_format: str) -> None:
    """Run SCRIPT unmodified (arguments after `--`) for N optimizer steps and report its training health.

    Reports frozen parameters, non-finite losses and gradients, host-device syncs per step, autograd
    graphs kept across steps and step times, and marks the script's static findings confirmed or
    not. The script's own output goes to stderr. Exit code 1 when a problem or finding is confirmed,
    else 2 when no optimizer step ran or the script raised an error.
    """
    _need_torch()
    from trainlint.verify.script_run import judge, problems, run_script

    report = run_script(script, script_args, steps, timeout, device)
    rows = judge(report, _lint_for_verify([script]))
    found = problems(report)
    if output_format == "json":
        import json

        click.echo(json.dumps({**report, "findings": rows, "problems": found}, indent=2))
    else:
        from trainlint.formats.verification import render_run

        render_run(_console(), report, rows, found)
    confirmed = any((r["verification"] or {}).get("status") == "confirmed" for r in rows)
    if found or confirmed:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_ERROR if not report.get("steps") or report.get("stopped") == "error" else EXIT_CLEAN)


@main.command("lsp")
def lsp_command() -> None:
    """Run the language server over stdio (for editors; needs `pip install trainlint[lsp]`)."""
    try:
        from trainlint.lsp.server import main as serve
    except ImportError as exc:
        click.echo(f"trainlint: error: the language server needs the `lsp` extra ({exc}); `pip install 'trainlint[lsp]'`", err=True)
        sys.exit(EXIT_ERROR)
    serve()


@main.command("rules")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_command(output_format: str) -> None:
    """List all rules with code, name, severity and whether they are on by default."""
    from trainlint.diagnostics import rule_url
    from trainlint.rules import ALL_RULES

    if output_format == "json":
        import json

        rows = [
            {"code": r.code, "name": r.name, "severity": r.severity.value, "default": r.default_enabled,
             "summary": r.summary, "url": rule_url(r.code, r.name)}
            for r in ALL_RULES
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"trainlint rules ({len(ALL_RULES)})")
    for col in ("Code", "Name", "Severity", "Default", "What it flags"):
        table.add_column(col)
    for r in ALL_RULES:
        table.add_row(r.code, r.name, r.severity.value, "on" if r.default_enabled else "off", r.summary)
    Console(no_color=bool(os.environ.get("NO_COLOR")), width=200 if not sys.stdout.isatty() else None).print(table)


if __name__ == "__main__":
    main()
