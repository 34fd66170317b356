"""A multi-process run (torchrun) as one report: the ranks' reports merged, each rank's state kept,
and whether ranks that should hold the same parameters do. Works on the JSON reports: no torch."""

from __future__ import annotations

import math
from typing import Any, Sequence

from trainlint.verify.journal import ended, no_report

Report = dict[str, Any]
AGREE_REL = 1e-6  # checksums this close (relative) agree: replicas under DDP are bitwise equal in practice


def merge(reports: Sequence[Report | None], launcher_code: int | None, script: str) -> Report:
    """One report for the run: rank 0's evidence (the first rank that reported, if rank 0 did not)
    plus `ranks` (each rank's state), frozen parameters of every rank, `rank_agreement`, and how
    the run ended: a rank that died without a report, or the first rank that failed."""
    present = [r for r in reports if r is not None]
    merged: Report = dict(present[0]) if present else no_report(script, launcher_code, 0.0)
    merged["world_size"] = len(reports)
    merged["ranks"] = [_rank_summary(rank, r) for rank, r in enumerate(reports)]
    merged["frozen"] = _frozen_on_any_rank(reports)
    merged["rank_agreement"] = agreement(reports)
    merged["gradient_agreement"] = agreement(reports, "grad_checksums")
    if present:
        merged["steps"] = min(r.get("steps") or 0 for r in present)
    missing = [rank for rank, r in enumerate(reports) if r is None]
    failed = [(rank, r) for rank, r in enumerate(reports) if r is not None and r.get("stopped") in ("error", "internal-error")]
    # ranks stopped by the timeout: one hung (the others then wait for it in a collective), or slow steps
    hung = [rank for rank, r in enumerate(reports) if r is not None and r.get("stopped") == "timeout"]
    if missing:
        merged["stopped"] = "rank-failed"
        merged["error"] = f"rank {', '.join(map(str, missing))} ended without writing its report (killed, or crashed in native code); the launcher {ended(launcher_code)}"
        merged["message"] = f"rank {missing[0]} died; the other ranks' evidence is kept"
    elif hung:
        then = f"; rank {failed[0][0]} then failed: {failed[0][1].get('error') or failed[0][1].get('message')}" if failed else ""
        merged["stopped"] = "rank-failed"
        merged["error"] = (
            f"rank {', '.join(map(str, hung))} stopped by the timeout ({reports[hung[0]].get('message')}): a rank hangs "  # type: ignore[union-attr]
            f"(waiting in a collective another rank never joined?) or the steps are slower than --timeout{then}"
        )
        merged["message"] = f"rank {', '.join(map(str, hung))} did not finish the steps in time; the ranks' evidence is kept"
    elif failed:
        rank, worst = failed[0]
        merged.update({key: worst.get(key) for key in ("stopped", "message", "error", "exit_code")})
        merged["message"] = f"rank {rank}: {worst.get('message')}"
    elif any((r.get("exit_code") or 0) != 0 for r in present):
        rank, worst = next((rank, r) for rank, r in enumerate(reports) if r is not None and (r.get("exit_code") or 0) != 0)
        merged.update({"stopped": worst.get("stopped"), "exit_code": worst.get("exit_code"), "message": f"rank {rank}: {worst.get('message')}"})
    return merged


def _rank_summary(rank: int, report: Report | None) -> Report:
    if report is None:
        return {"rank": rank, "reported": False, "steps": 0, "stopped": "died", "message": "ended without writing its report"}
    loss = report.get("loss") or {}
    distributed = report.get("distributed") or {}
    return {
        "rank": rank, "reported": True, "steps": report.get("steps") or 0, "stopped": report.get("stopped"), "message": report.get("message"),
        "error": report.get("error"), "exit_code": report.get("exit_code"), "frozen": report.get("frozen") or [],
        "syncs": report.get("syncs") or [], "loss_first": loss.get("first"), "loss_last": loss.get("last"),
        "collectives": distributed.get("collectives") or [], "sharded": bool(distributed.get("sharded")),
        "node": distributed.get("node"), "host": distributed.get("host"), "ddp": bool(distributed.get("ddp")), "wrapped_at": distributed.get("wrapped_at"), "moved_after_wrap": distributed.get("moved_after_wrap"),
    }


def _frozen_on_any_rank(reports: Sequence[Report | None]) -> list[Report]:
    """Each frozen tensor once (its worst rank's figures), with the ranks where it froze."""
    by_name: dict[str, Report] = {}
    for rank, report in enumerate(reports):
        for row in (report or {}).get("frozen") or []:
            kept = by_name.get(row["name"])
            if kept is None or row["frozen_fraction"] > kept["frozen_fraction"]:
                by_name[row["name"]] = {**row, "ranks": (kept or {}).get("ranks", [])}
            by_name[row["name"]]["ranks"] = sorted({*by_name[row["name"]]["ranks"], rank})
    return sorted(by_name.values(), key=lambda r: (-r["frozen_fraction"], -r["numel"], r["name"]))


def agreement(reports: Sequence[Report | None], key: str = "checksums") -> Report:
    """Whether the ranks' parameter checksums (`key`; "grad_checksums": their gradients as each step
    applies them) agree after each step they all ran.

    `status`: "agree", "diverge" (with `first_step` and the `ranks` that differ from rank 0's),
    "sharded" (FSDP: each rank holds its own shard, nothing to compare) or "not compared"."""
    if any(((r or {}).get("distributed") or {}).get("sharded") for r in reports):
        return {"status": "sharded", "detail": "parameters are sharded (FSDP): each rank holds its own shard"}
    sums = {rank: ((r or {}).get("distributed") or {}).get(key) for rank, r in enumerate(reports)}
    sums = {rank: s for rank, s in sums.items() if s}
    if len(sums) < 2:
        return {"status": "not compared", "detail": "fewer than two ranks reported checksums"}
    reference_rank = min(sums)
    steps = min(len(s) for s in sums.values())
    for step in range(steps):
        reference = sums[reference_rank][step]
        differ = [rank for rank, s in sums.items() if not _close(s[step], reference)]
        if differ:
            return {"status": "diverge", "first_step": step + 1, "ranks": differ, "reference_rank": reference_rank, "steps_compared": steps}
    return {"status": "agree", "steps_compared": steps, "ranks_compared": sorted(sums)}


def _close(a: float, b: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return (a != a and b != b) or a == b
    return abs(a - b) <= AGREE_REL * max(abs(a), abs(b), 1e-12)
