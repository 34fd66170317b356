"""`trainlint rule CODE` (or `explain`): a rule's page; `trainlint rules`: the catalogue as a table."""

from __future__ import annotations

import sys

import click

from trainlint.cli.common import EXIT_ERROR
from trainlint.report.render import make_console


@click.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Explain a rule, by code or name (`TL401`, `host-sync-in-step`): what it flags, why, an example
    and the fix (`trainlint explain CODE` too)."""
    from rich.markdown import Markdown

    from trainlint.rules.catalogue import PARSE_ERROR_PAGE, render_page
    from trainlint.noqa import UNUSED_NOQA, UNUSED_NOQA_PAGE
    from trainlint.rules import ALL_RULES, RULES_BY_CODE

    # like ruff's `ruff rule`, a rule's name finds it as its code does
    by_name = {r.name: r.code for r in ALL_RULES} | {"parse-error": "TL000", "io-error": "TL000", UNUSED_NOQA[1]: UNUSED_NOQA[0]}
    key = by_name.get(code.strip().lower(), code.strip().upper())
    rule = RULES_BY_CODE.get(key)
    pages = {"TL000": PARSE_ERROR_PAGE, UNUSED_NOQA[0]: UNUSED_NOQA_PAGE}
    page = render_page(rule) if rule is not None else pages.get(key)
    if page is None:
        click.echo(f"trainlint: error: unknown rule {code!r} (neither a code nor a name); `trainlint rules` lists them", err=True)
        sys.exit(EXIT_ERROR)
    console = make_console()
    if console.is_terminal:
        console.print(Markdown(page))
    else:
        click.echo(page)


@click.command("rules")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_command(output_format: str) -> None:
    """List all rules with code, name, severity and whether they are on by default, off, or in
    preview; TL000 (a file that could not be analysed) and TL001 (unused noqa) first."""
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

    table = Table(title=f"trainlint rules ({len(rows)})")
    for col in ("Code", "Name", "Severity", "Default", "What it flags"):
        table.add_column(col)
    for code, name, severity, default, _, summary in rows:
        table.add_row(code, name, severity, default, escape(summary))
    console = make_console()
    if not sys.stdout.isatty():
        console.width = 200
    console.print(table)
