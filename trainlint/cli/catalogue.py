"""`trainlint rule CODE` (or `explain`): a rule's page; `trainlint rules`: the catalogue as a table."""

from __future__ import annotations

import sys

import click

from trainlint.cli.common import EXIT_ERROR
from trainlint.report.render import make_console


@click.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Explain a rule: what it flags, why, an example and the fix (`trainlint explain CODE` too)."""
    from rich.markdown import Markdown

    from trainlint.rules.catalogue import PARSE_ERROR_PAGE, render_page
    from trainlint.noqa import UNUSED_NOQA, UNUSED_NOQA_PAGE
    from trainlint.rules import RULES_BY_CODE

    rule = RULES_BY_CODE.get(code.upper())
    pages = {"TL000": PARSE_ERROR_PAGE, UNUSED_NOQA[0]: UNUSED_NOQA_PAGE}
    page = render_page(rule) if rule is not None else pages.get(code.upper())
    if page is None:
        click.echo(f"trainlint: error: unknown rule {code!r}; `trainlint rules` lists them", err=True)
        sys.exit(EXIT_ERROR)
    console = make_console()
    if console.is_terminal:
        console.print(Markdown(page))
    else:
        click.echo(page)


@click.command("rules")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_command(output_format: str) -> None:
    """List all rules with code, name, severity and whether they are on by default, off, or in preview."""
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

    table = Table(title=f"trainlint rules ({len(ALL_RULES)})")
    for col in ("Code", "Name", "Severity", "Default", "What it flags"):
        table.add_column(col)
    for r in ALL_RULES:
        table.add_row(r.code, r.name, r.severity.value, "preview" if r.preview else "on" if r.default_enabled else "off", escape(r.summary))
    console = make_console()
    if not sys.stdout.isatty():
        console.width = 200
    console.print(table)
