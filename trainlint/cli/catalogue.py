"""`trainlint rule CODE` (or `explain`): a rule's page, the lint's (TL...) or a problem `verify run`
reports (TLR...); `trainlint rules`: the catalogue as a table (`--run`: the problems `verify run` reports)."""

from __future__ import annotations

import sys

import click

from trainlint.cli.common import EXIT_ERROR
from trainlint.report.render import make_console


@click.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Explain a rule, by code or name (`TL401`, `host-sync-in-step`): what it flags, why, an example
    and the fix (`trainlint explain CODE` too); a TLR code: what the problem `trainlint verify run`
    reports means, why it matters and the fix."""
    from rich.markdown import Markdown

    from trainlint.rules.catalogue import PARSE_ERROR_PAGE, render_page
    from trainlint.noqa import UNUSED_NOQA, UNUSED_NOQA_PAGE
    from trainlint.rules import ALL_RULES, RULES_BY_CODE
    from trainlint.verify.problem_kinds import KIND_BY_CODE
    from trainlint.verify.problem_kinds import render_page as render_run_page

    # like ruff's `ruff rule`, a rule's name finds it as its code does
    by_name = {r.name: r.code for r in ALL_RULES} | {"parse-error": "TL000", "io-error": "TL000", UNUSED_NOQA[1]: UNUSED_NOQA[0]}
    key = by_name.get(code.strip().lower(), code.strip().upper())
    rule, run_kind = RULES_BY_CODE.get(key), KIND_BY_CODE.get(key)
    pages = {"TL000": PARSE_ERROR_PAGE, UNUSED_NOQA[0]: UNUSED_NOQA_PAGE}
    page = render_page(rule) if rule is not None else render_run_page(run_kind) if run_kind is not None else pages.get(key)
    if page is None:
        click.echo(f"trainlint: error: unknown rule {code!r} (neither a code nor a name); `trainlint rules` lists them "
                   "(`trainlint rules --run`: those of `verify run`)", err=True)
        sys.exit(EXIT_ERROR)
    console = make_console()
    if console.is_terminal:
        console.print(Markdown(page))
    else:
        click.echo(page)


@click.command("rules")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--run", "run_problems", is_flag=True, help="List the problems `trainlint verify run` reports (TLR codes) instead.")
def rules_command(output_format: str, run_problems: bool) -> None:
    """List all rules with code, name, severity and whether they are on by default, off, or in
    preview; TL000 (a file that could not be analysed) and TL001 (unused noqa) first (`--run`: the
    problems `trainlint verify run` reports, with the invariant each checks)."""
    if run_problems:
        _run_problems(output_format)
        return
    from trainlint.diagnostics import rule_url
    from trainlint.noqa import UNUSED_NOQA, UNUSED_NOQA_SUMMARY
    from trainlint.rules import ALL_RULES

    # (code, name, severity, default, preview, summary): the two codes outside the rule classes first
    rows: list[tuple[str, str, str, str, bool, str]] = [
        ("TL000", "parse-error", "error", "always", False, "A file that could not be analysed (or a path that could not be read)."),
        (UNUSED_NOQA[0], UNUSED_NOQA[1], "warning", "off", False, UNUSED_NOQA_SUMMARY),
    ]
    rows += [
        (r.code, r.name, r.severity.value, "preview" if r.preview else "on" if r.default_enabled else "off", r.preview, r.summary)
        for r in ALL_RULES
    ]
    if output_format == "json":
        import json

        listed = [
            {"code": code, "name": name, "severity": severity, "default": default in ("on", "always"),
             "preview": preview, "summary": summary, "url": rule_url(code, name)}
            for code, name, severity, default, preview, summary in rows
        ]
        click.echo(json.dumps(listed, indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"trainlint rules ({len(rows)})", caption="`trainlint rules --run`: the problems `trainlint verify run` reports")
    for col in ("Code", "Name", "Severity", "Default", "What it flags"):
        table.add_column(col)
    for code, name, severity, default, _, summary in rows:
        table.add_row(code, name, severity, default, escape(summary))
    _print_table(table)


def _run_problems(output_format: str) -> None:
    """The problems `verify run` reports: code, name, invariant and what each means."""
    from trainlint.verify.problem_kinds import KINDS

    if output_format == "json":
        import json

        rows = [{"code": k.code, "name": k.name, "invariant": k.invariant, "summary": k.summary, "url": k.url} for k in KINDS]
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"problems `trainlint verify run` reports ({len(KINDS)})")
    for col in ("Code", "Name", "Invariant", "What it means"):
        table.add_column(col)
    for k in KINDS:
        table.add_row(k.code, k.name, k.invariant, escape(k.summary))
    _print_table(table)


def _print_table(table: object) -> None:
    console = make_console()
    if not sys.stdout.isatty():
        console.width = 200
    console.print(table)
