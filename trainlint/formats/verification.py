"""`trainlint verify` in the terminal: each finding with its verdict and measured evidence."""

from __future__ import annotations

from typing import Sequence

from rich.console import Console

STYLE = {"confirmed": "bold red", "not reproduced": "green", "cannot check here": "yellow"}


def render(console: Console, rows: Sequence[dict[str, object]]) -> None:
    counts: dict[str, int] = {}
    for row in rows:
        verdict = row.get("verification")
        where = f"{row['path']}:{row['line']}:{row['column']}"
        console.print(f"[bold]{where}[/] [cyan]{row['code']}[/] {row['message']}")
        if not verdict:
            console.print("  = verification: no probe for this rule")
            counts["no probe"] = counts.get("no probe", 0) + 1
            continue
        status = str(verdict["status"])
        counts[status] = counts.get(status, 0) + 1
        duration = verdict.get("duration_s")
        on = f" on {verdict['device']}" if verdict.get("device") else ""
        took = f", {duration:.1f} s" if isinstance(duration, (int, float)) else ""
        console.print(f"  = [{STYLE.get(status, '')}]{status}[/]{on}{took}: {verdict['summary']}")
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    console.print(f"\nVerified {len(rows)} finding(s): {summary or 'nothing to verify'}")
