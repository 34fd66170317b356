"""The rule catalogue under `rules/`: one Markdown page per rule and an index, generated from the rule classes.

Regenerate with `python -m trainlint.rules.catalogue`; a test fails when a page is stale.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from trainlint.model.name_lists import lists_for
from trainlint.noqa import UNUSED_NOQA_PAGE, UNUSED_NOQA_SUMMARY
from trainlint.rules.rule import Rule
from trainlint.rules import ALL_RULES

CATALOGUE_DIR = Path(__file__).resolve().parents[2] / "rules"


def _code_block(code: str) -> str:
    return f"```python\n{textwrap.dedent(code).strip()}\n```"


def page_name(rule: type[Rule]) -> str:
    return f"{rule.code}-{rule.name}.md"


def render_page(rule: type[Rule]) -> str:
    """The rule's page: what it does, why it is bad, the story, example and fix, exceptions, verification."""
    if rule.preview:
        default = "preview (enable with `--preview`; it joins the defaults once shown at least 95% precise on 10 or more reviewed real-code findings)"
    else:
        default = "on" if rule.default_enabled else "off (enable with `--extend-select " + rule.code + "`)"
    parts = [
        f"# {rule.code} {rule.name}",
        "",
        f"Severity: **{rule.severity.value}** · Default: **{default}**",
        "",
        "## What it does",
        "",
        rule.summary,
        "",
        "## Why is this bad?",
        "",
        rule.why,
        "",
    ]
    if rule.story:
        parts += ["## Where it comes from", "", rule.story, ""]
    parts += ["## Example", "", _code_block(rule.example), "", "## Use instead", "", _code_block(rule.fixed_example), ""]
    parts += ["## Fix", "", rule.hint, ""]
    if rule.not_flagged:
        parts += ["## Not flagged", "", rule.not_flagged, ""]
    if rule.verification:
        parts += ["## Runtime verification", "", rule.verification, ""]
    if rule.evidence:
        parts += ["## Evidence", "", rule.evidence, ""]
    names = lists_for(rule.code)
    if names:
        parts += ["## Names it relies on", "", "Where values cannot tell, these lists of names can silence a finding (never make one):", ""]
        parts += [f"- `{n.where.rsplit('.', 1)[-1]}` (`trainlint/{n.where.rsplit('.', 1)[0].replace('.', '/')}.py`): {n.stands_for}" for n in names]
        parts += [""]
    parts += [
        "## Suppression",
        "",
        f"`# noqa: {rule.code}` on the reported line, `# trainlint: noqa: {rule.code}` for a whole file, "
        f'or `ignore = ["{rule.code}"]` under `[tool.trainlint]`.',
        "",
    ]
    return "\n".join(parts)


PARSE_ERROR_PAGE = """\
# TL000 parse-error

Severity: **error** · Default: **always on**

## What it does

Reports a file trainlint could not analyse: a syntax error (with the parser's message and
position), a file that is not valid UTF-8 (or its declared encoding), a file larger than
`max-file-size` (5 MB by default), or a path that cannot be read. The run goes on with the other
files, and the exit code is 1. A path that does not exist is reported under the name `io-error`
(`cannot read: no such file or directory`), as ruff's E902 is: nothing was parsed.

Files that cannot contain a finding (no training-step token such as `backward`, `.step(`,
`training_step`, nor any token a selected rule needs) are skipped without being parsed, so a
syntax error in such a file is left to your Python linter; so is one in a file that names neither
`torch` nor a training step (a Python 2 module of plain Python or NumPy, even one the training step
calls: it cannot hold a finding of its own).

Code written for Python before 3.7 often names a keyword argument `async`: PyTorch's
`x.cuda(async=True)`, the spelling of `non_blocking=True` before 0.4, a syntax error since `async`
became a keyword. When that is the only error, the file is reported and the rest of it is analysed
as that Python read it (in the file itself, and when other files call it or it calls them): its
findings hold once the line is fixed. They carry no fix, since a fix is made on the text as read.

An internal error of trainlint on a file is reported under this code too; the exit code is then 2.
Please report it with the file.
"""


def render_index() -> str:
    lines = [
        "# trainlint rules",
        "",
        "Generated from the rule modules in `trainlint/rules/` by `python -m trainlint.rules.catalogue`.",
        "The problems `trainlint verify run` reports (codes TLR...) have their own pages: [run/](run/README.md) "
        "(`trainlint rule TLR205` prints one, `trainlint rules --run` lists them).",
        "",
        "| Code | Name | Severity | Default | What it flags |",
        "|---|---|---|---|---|",
        "| [TL000](TL000-parse-error.md) | parse-error | error | always | A file that could not be analysed. |",
        f"| [TL001](TL001-unused-noqa.md) | unused-noqa | warning | off | {UNUSED_NOQA_SUMMARY} |",
    ]
    for rule in ALL_RULES:
        on = "preview" if rule.preview else "on" if rule.default_enabled else "off"
        lines.append(f"| [{rule.code}]({page_name(rule)}) | {rule.name} | {rule.severity.value} | {on} | {rule.summary} |")
    lines.append("")
    return "\n".join(lines)


def expected_files() -> dict[str, str]:
    files = {page_name(r): render_page(r) for r in ALL_RULES}
    files["TL000-parse-error.md"] = PARSE_ERROR_PAGE
    files["TL001-unused-noqa.md"] = UNUSED_NOQA_PAGE
    files["README.md"] = render_index()
    return files


def write(directory: Path = CATALOGUE_DIR) -> None:
    directory.mkdir(exist_ok=True)
    files = expected_files()
    for stale in directory.glob("*.md"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else CATALOGUE_DIR)
