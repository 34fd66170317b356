"""`trainlint explain CODE` (a rule's page, as `trainlint rule CODE`) and `trainlint explain FILE:LINE`
(why each rule that could apply to that line fired or not)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from trainlint.cli.catalogue import rule_command
from trainlint.cli.common import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, _warn
from trainlint.report.text import visible

if TYPE_CHECKING:
    from trainlint.engine.explaining import LineExplanation

_LOCATION = re.compile(r"(?P<path>.+?):(?P<line>\d+)(?::\d+)?")  # `train.py:12` (or `train.py:12:5`, as findings print)


def explain(ctx: click.Context, target: str, config: tuple[str, ...], isolated: bool) -> None:
    """`trainlint explain TARGET` (the command is declared in `trainlint.cli`): a rule's page for a
    code, an explanation for a location."""
    where = _LOCATION.fullmatch(target)
    if where is None:  # a rule code: its page, as ever
        ctx.invoke(rule_command, code=target)
        return
    from trainlint.cli.settings import SettingOptions, settings_resolver
    from trainlint.config import ConfigError
    from trainlint.engine.explaining import explain_line

    path = Path(where["path"])
    if not path.is_file():
        _warn(f"{where['path']}: no such file", prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    try:
        settings = settings_resolver(SettingOptions(config, isolated)).for_path(path)
    except ConfigError as exc:
        _warn(str(exc), prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    explained = explain_line(path, int(where["line"]), settings)
    if explained.error is not None:
        _warn(explained.error, prefix="trainlint: error: ")
        sys.exit(EXIT_ERROR)
    click.echo(explanation_text(explained), nl=False)
    sys.exit(EXIT_FINDINGS if any(d.fires for d in explained.decisions) else EXIT_CLEAN)


def explanation_text(explained: LineExplanation) -> str:
    """The explanation as plain text: the line, whether it runs every step and why, then each rule."""
    from trainlint.rules import RULES_BY_CODE

    out = [f"{visible(explained.path)}:{explained.line}: {visible(explained.text.strip())}", ""]
    verdict = {True: "yes", False: "no", None: "not judged"}[explained.every_step]
    out.append(f"Runs every training step: {verdict}")
    out += [f"  - {visible(reason)}" for reason in explained.scope]
    out += ["", "Rules:"]
    if not explained.decisions:
        out.append("  (none of the selected rules applies here)")
    for decision in explained.decisions:
        named = ", ".join(f"{c} {RULES_BY_CODE[c].name}" if c in RULES_BY_CODE and len(decision.codes) == 1 else c for c in decision.codes)
        out.append(f"  {named}: {'fires' if decision.fires else 'not flagged'}")
        out += [f"    - {visible(reason)}" for reason in decision.reasons]
    return "\n".join(out) + "\n"
