"""The invariants "what trains" and "evaluation is deterministic" judged on a run's JSON report (no
torch here): the problems, each with its numbers, the step it began and the script's line that caused
it; deliberate patterns (a head or low-rank adapters over a frozen model, MC dropout) as
information; and every parameter that did not change, with its reason.

What trains is a problem when less than SMALL_SHARE of the model's elements train and the trainable
part is neither the model's last layers nor low-rank adapters beside frozen weights, and whenever
parameters receive gradients that no optimizer holds. Evaluation is a problem when dropout (or SDPA's
`dropout_p`) runs in training behaviour inside an eval-mode module, or BatchNorm updates its running
statistics under an eval-mode model, unless the code asks for it (`training=True` written in the
call, a module set back to training mode on purpose).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

Report = dict[str, Any]
SMALL_SHARE = 0.25  # a model of which less than this share trains, in no deliberate pattern, is a problem
LOW_PRECISION = ("bfloat16", "float16")
UNCHANGED_FROZEN = 0.5  # health.FROZEN: a tracked tensor with this share of its elements unchanged
REASON_ORDER = ("update below resolution", "no update applied", "gradient always zero", "not in an optimizer", "no gradient", "requires_grad=False")


def invariant_problems(report: Report) -> list[str]:
    """Problem lines for what trains and evaluation behaviour (empty when both hold)."""
    return _what_trains(report, problems=True) + _evaluation(report, problems=True)


def invariant_information(report: Report) -> list[str]:
    """Information lines: deliberate freezing patterns, unused parameters, MC dropout."""
    return _what_trains(report, problems=False) + _evaluation(report, problems=False)


def _what_trains(report: Report, problems: bool) -> list[str]:
    trains = report.get("what_trains")
    if not trains or not trains.get("total"):
        return []
    rows = trains.get("parameters") or []
    total, trained = trains["total"], trains["trained"]
    by_status = trains.get("by_status") or {}
    lines: list[str] = []
    orphans = [r for r in rows if r["status"] == "not in an optimizer" and r.get("gradient")]
    if orphans and problems:
        elements = sum(r["numel"] for r in orphans)
        lines.append(
            f"what trains: {len(orphans)} parameter tensor(s) ({elements:,} elements, {elements / total:.1%} of the model) receive gradients "
            f"but no optimizer that stepped holds them, from step 1: {_names(orphans)} (built or replaced after the optimizer, or the "
            "optimizer was given other parameters)"
        )
    share = trained / total
    small = share < SMALL_SHARE and trains.get("pattern") is None
    if small and problems:
        types = ", ".join(f"{name} x{n}" for name, n in (trains.get("trainable_module_types") or {}).items())
        kinds = f", in {types}" if types else ""
        lines.append(
            f"what trains: only {share:.1%} of the parameters train ({trained:,} of {total:,} elements{kinds}) from step "
            f"{trains.get('first_step', 1)}; {_not_training(by_status, total)}{_freeze_cause(trains)}; "
            f"{trains.get('pattern_detail', '')}"
        )
    if not problems and not small and trains.get("pattern") in ("head", "low-rank adapters") and share < 1:
        what = "the model's last layers" if trains["pattern"] == "head" else "low-rank adapters beside frozen weights"
        lines.append(f"what trains: {share:.1%} of the parameters train ({trained:,} of {total:,} elements): {what}, a deliberate pattern{_freeze_cause(trains)}")
    unused = [r for r in rows if r["status"] == "no gradient"]
    if unused and not problems and not small:
        elements = sum(r["numel"] for r in unused)
        lines.append(
            f"what trains: {len(unused)} trainable tensor(s) ({elements:,} elements) in an optimizer received no gradient in "
            f"{report.get('steps', 0)} steps (unused in the graph): {_names(unused)}"
        )
    return lines


def _not_training(by_status: Report, total: int) -> str:
    parts = [f"{n / total:.1%} {status}" for status, n in by_status.items() if status != "trains" and n]
    return ", ".join(parts) if parts else "none frozen"


def _freeze_cause(trains: Report) -> str:
    sites = trains.get("freeze_sites") or []
    if not sites:
        return ""
    site = sites[0]
    more = f" (and {len(sites) - 1} other line(s))" if len(sites) > 1 else ""
    return f", requires_grad set to False at {where(site)} for {site['tensors']} tensor(s){more}"


def _names(rows: Sequence[Report], limit: int = 3) -> str:
    shown = ", ".join(r["name"] for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def where(site: Report) -> str:
    """`train.py:41 (`p.requires_grad = False`)`: a site, relative to the working directory."""
    path = site["path"]
    try:
        relative = os.path.relpath(path)
        path = path if relative.startswith("..") else relative
    except ValueError:  # another drive
        pass
    code = f" (`{site['code']}`)" if site.get("code") else ""
    return f"{path}:{site['line']}{code}"


def _evaluation(report: Report, problems: bool) -> list[str]:
    behaviour = report.get("eval_behaviour") or {}
    measured = behaviour.get("measured") or {}
    lines = []
    for site in behaviour.get("sites") or []:
        if site["explicit"] == problems:
            continue
        when = f"after step {site['after_step']}" if site["after_step"] else "before the first step"
        switch = site.get("eval_switch")
        switched = f", switched to eval at {where(switch)}" if switch else ""
        if not problems:
            how = "a module set to training mode under an eval-mode model" if site.get("module_training") else "`training=True` in the call"
            lines.append(f"evaluation: `{site['function']}` in `{site['module']}` runs in training behaviour on purpose ({how}, e.g. MC dropout) at {where(site)}")
            continue
        if site["kind"] == "batch norm":
            what = (f"BatchNorm running statistics change in eval: `{site['module']}` ({site['module_type']}) computes batch statistics and "
                    "updates its running statistics although the model is in eval mode")
        elif site["kind"] == "attention dropout":
            what = f"evaluation is not deterministic: `scaled_dot_product_attention` applies dropout_p > 0 inside eval-mode `{site['module']}`"
        else:
            kind = f" ({site['module_type']})" if site["module_type"] != site["module"] else ""
            what = f"evaluation is not deterministic: `{site['function']}` runs in training behaviour inside eval-mode `{site['module']}`{kind}"
        lines.append(f"{what}{switched}, at {where(site)}: {site['count']} call(s) from the evaluation {when}{_measured(measured, site['kind'])}{_fix(site)}")
    return lines


def _measured(measured: Report, kind: str) -> str:
    if not measured or measured.get("error"):
        return ""
    parts = []
    if measured.get("max_abs_diff"):
        parts.append(f"two forwards of the same batch differ by up to {measured['max_abs_diff']:.3g} ({measured['max_rel_diff']:.0%} of the largest output)")
    if measured.get("buffers_changed"):
        parts.append(f"{len(measured['buffers_changed'])} buffer(s) changed by two forwards ({', '.join(measured['buffers_changed'][:2])})")
    return "; " + "; ".join(parts) if parts else ""


def _fix(site: Report) -> str:
    if site["kind"] == "dropout" and not site.get("module_training"):
        return "; pass `training=self.training`"
    if site["kind"] == "attention dropout":
        return "; pass `dropout_p=self.p if self.training else 0.0`"
    return ""


def unchanged_parameters(report: Report) -> list[Report]:
    """Every parameter that did not change over the run, with its reason: update below resolution
    (low precision) or no update applied (fp32), although the gradient was non-zero; gradient always
    zero; not in an optimizer; no gradient; requires_grad=False. Rows: name, dtype, numel, reason,
    and `cast_at` / `frozen_at` when known."""
    rows: list[Report] = []
    named: set[str] = set()
    for r in report.get("frozen") or []:
        if r["frozen_fraction"] >= UNCHANGED_FROZEN:
            reason = "update below resolution" if r["dtype"] in LOW_PRECISION else "no update applied"
            rows.append({"name": r["name"], "dtype": r["dtype"], "numel": r["numel"], "reason": reason, "cast_at": r.get("cast_at"),
                         "unchanged_fraction": r["frozen_fraction"]})
            named.add(r["name"])
    for r in (report.get("what_trains") or {}).get("parameters") or []:
        if r.get("changed") is not False or r["name"] in named or any(r["name"].endswith("." + n) for n in named):
            continue
        reason = "gradient always zero" if r["status"] == "trains" else r["status"]
        rows.append({"name": r["name"], "dtype": r["dtype"], "numel": r["numel"], "reason": reason, "frozen_at": r.get("frozen_at"),
                     "unchanged_fraction": 1.0})
    return sorted(rows, key=lambda r: (REASON_ORDER.index(r["reason"]) if r["reason"] in REASON_ORDER else 99, -r["numel"], r["name"]))
