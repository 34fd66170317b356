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
    """Explain a rule: what it flags, why, an example and the fix (`trainlint explain CODE` too); a
    TLR code: what the problem `trainlint verify run` reports means, why it matters and the fix."""
    from rich.markdown import Markdown

    from trainlint.rules.catalogue import PARSE_ERROR_PAGE, render_page
    from trainlint.noqa import UNUSED_NOQA, UNUSED_NOQA_PAGE
    from trainlint.rules import RULES_BY_CODE
    from trainlint.verify.problem_kinds import KIND_BY_CODE
    from trainlint.verify.problem_kinds import render_page as render_run_page

    wanted = code.upper()
    rule, run_kind = RULES_BY_CODE.get(wanted), KIND_BY_CODE.get(wanted)
    pages = {"TL000": PARSE_ERROR_PAGE, UNUSED_NOQA[0]: UNUSED_NOQA_PAGE}
    page = render_page(rule) if rule is not None else render_run_page(run_kind) if run_kind is not None else pages.get(wanted)
    if page is None:
        click.echo(f"trainlint: error: unknown rule {code!r}; `trainlint rules` lists them (`trainlint rules --run`: those of `verify run`)", err=True)
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
    """List all rules with code, name, severity and whether they are on by default, off, or in preview
    (`--run`: the problems `trainlint verify run` reports, with the invariant each checks)."""
    if run_problems:
        _run_problems(output_format)
        return
    from trainlint.diagnostics import rule_url
    from trainlint.rules import ALL_RULES

    if output_format == "json":
        import json

        rows = [
            {"code": r.code, "name": r.name, "severity": r.severity.value, "default": r.default_enabled and not r.preview,
             "preview": r.preview, "summary": r.summary, "url": rule_url(r.code, r.name)}
            for r in ALL_RULES
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"trainlint rules ({len(ALL_RULES)})", caption="`trainlint rules --run`: the problems `trainlint verify run` reports")
    for col in ("Code", "Name", "Severity", "Default", "What it flags"):
        table.add_column(col)
    for r in ALL_RULES:
        table.add_row(r.code, r.name, r.severity.value, "preview" if r.preview else "on" if r.default_enabled else "off", escape(r.summary))
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
