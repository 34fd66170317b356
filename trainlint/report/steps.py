"""`--show-steps`: the code trainlint takes to run every training step, to answer "why was this (not)
flagged?". One line per step loop and per-step function, with one call chain that makes it per step:

    trainer.py:20:5: `Trainer.step` runs every step via train.py:52
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from trainlint.diagnostics import chain_text
from trainlint.report.text import visible

if TYPE_CHECKING:
    from trainlint.engine.results import FileResult


def steps_text(results: Sequence[FileResult]) -> str:
    """The step scope of each file, then a count; files without one are left out."""
    lines: list[str] = []
    files = functions = 0
    for result in results:
        if not result.steps:
            continue
        files += 1
        for step in result.steps:
            if not step.what.startswith("step loop"):
                functions += 1
            via = f" {chain_text(step.chain, step.where.path)}" if step.chain else ""
            lines.append(visible(f"{step.where.path}:{step.where.line}:{step.where.column}: {step.what}{via}"))
    errors = [d for r in results for d in r.diagnostics if d.code == "TL000"]
    lines.extend(visible(f"{d.path}:{d.line}:{d.column}: {d.code} {d.message}") for d in errors)
    if files:
        lines.append(f"{functions} per-step function{'s' if functions != 1 else ''} in {files} file{'s' if files != 1 else ''}")
    else:
        lines.append("No training step found")
    return "\n".join(lines) + "\n"
