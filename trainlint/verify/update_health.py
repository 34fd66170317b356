"""The invariants "updates happen" and "learning happens" judged on a run's JSON report (no torch here).

Updates happen: every optimizer step changes the parameters it holds. A parameter group is a problem
when its steps changed none of its sampled elements (an lr of 0; no gradients at step(): cleared
between backward and step, or the optimizer holds parameters the loss does not reach), when a
GradScaler skipped every step (inf/NaN gradients each time), or when its median update-to-weight
ratio ||delta w|| / ||w|| per step is below half its dtype's machine epsilon (the relative spacing of
its values: 2^-7 for bfloat16, 2^-10 for float16, 2^-23 for float32: such updates round away) or above
MAX_RATIO = 1 (each step moves the weights by more than their own norm: nothing learnt persists;
healthy runs sit near 1e-4..1e-2 per step).

Learning happens: the loss series is tested for a downward trend with the one-sided Mann-Kendall
test, and the size of the change is bounded by the 95% confidence interval of Sen's slope (the
median of all pairwise slopes; interval by Gilbert 1987, normal approximation, no tie correction):
- under MIN_STEPS losses, or while the learning rate is still rising (warm-up): "too early to tell";
- a classification loss (cross_entropy / nll_loss over C classes, C >= 2), after 2 * MIN_STEPS
  steps or more, whose last third has a median of at least (1 - CHANCE_SHARE) log C (CHANCE_SHARE =
  5%) while its second half shows no decrease (p >= ALPHA) and the interval rules out a fall of
  CHANCE_SHARE log C over that half: the model predicts no better than chance (a problem);
- a decrease over the run with p < ALPHA (0.05): learning;
- otherwise, after FLAT_MIN_STEPS (60) losses or more, when the interval's most favourable end allows
  the loss to have fallen by less than FLAT_SHARE (2%) of its level over the whole run: the loss does
  not improve (a problem). Shorter runs are not judged so: a healthy fine-tune can sit on a noisy
  plateau for a few dozen steps (a clean LoRA example's 20 steps went 0.31 -> 0.38);
- anything else: "too early to tell" (the test is not confident either way).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from trainlint.report.text import plural
from trainlint.verify.problem_kinds import Problem

Report = dict[str, Any]
MAX_RATIO = 1.0
RESOLUTION = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23, "float64": 2.0**-52}
MIN_STEPS = 20
ALPHA = 0.05
Z_ONE_SIDED = 1.6449  # the normal quantile for ALPHA, one-sided
Z_TWO_SIDED = 1.9600  # for the 95% interval of Sen's slope
FLAT_SHARE = 0.02
FLAT_MIN_STEPS = 3 * MIN_STEPS
CHANCE_SHARE = 0.05
SETTLING_SKIPS = 10  # a GradScaler's first steps may skip while its scale falls from 65536 to what fits
MOST_SKIPPED = 0.5  # after those, a scaler skipping this share of its steps or more is a problem
MAX_POINTS = 200  # longer series are averaged into this many points before the O(n^2) test


def update_problems(report: Report) -> list[Problem]:
    """Problems of updates and learning (empty when both hold or cannot be told)."""
    return _updates(report) + _learning_problems(report)


def _where(site: Report | None) -> str:
    from trainlint.verify.invariant_health import where

    return where(site) if site else "an unknown line"


def _group_label(g: Report) -> str:
    built = f", built at {_where(g['built_at'])}" if g.get("built_at") else ""
    return f"{g['optimizer']} param group {g['group']} ({plural(g['tensors'], 'tensor')}, {g['elements']:,} elements, {g['dtype']}{built})"


def _updates(report: Report) -> list[Problem]:
    updates = report.get("updates") or {}
    lines = []
    scaler = updates.get("scaler") or {}
    if scaler.get("steps") and scaler.get("skipped") == scaler["steps"]:
        lines.append(Problem(
            "TLR104",
            f"updates: GradScaler.step skipped all {plural(scaler['steps'], 'optimizer step')} (inf/NaN gradients every time, from step "
            f"{scaler['first_skipped']}) at {_where(scaler.get('site'))}: the parameters were never updated", scaler.get("site"), scaler.get("first_skipped"),
        ))
    elif _skips_most(scaler):
        lines.append(Problem(
            "TLR107",
            f"updates: GradScaler.step skipped {scaler['skipped']} of {plural(scaler['steps'], 'optimizer step')} ({scaler['skipped'] / scaler['steps']:.0%}; "
            f"{scaler['skipped_after_settling']} of the {scaler['steps'] - SETTLING_SKIPS} after its first {SETTLING_SKIPS}) at {_where(scaler.get('site'))}: "
            "inf/NaN gradients keep recurring, and the run trains on few of its batches", scaler.get("site"), scaler.get("first_skipped"),
        ))
    for g in updates.get("groups") or []:
        steps = g["steps"]
        if g["steps_without_gradients"] == steps and steps:
            if g.get("cleared_at"):
                cause = f"the gradients were cleared between backward and step by {_where(g['cleared_at'])}"
            else:
                cause = (f"the loss's backward reaches none of them ({', '.join(g['names'])}...): the optimizer holds other "
                         "parameters than the model that computes the loss")
            lines.append(Problem("TLR104", f"updates: {_group_label(g)} had no gradient at any of its {plural(steps, 'step')}, from step 1, so step() changed nothing: {cause}",
                                 g.get("cleared_at") or g.get("built_at"), 1))
        elif g["steps_unchanged"] == steps and steps:
            lr = f"lr={g['lr_first']:g}" if g.get("lr_first") is not None else "its lr"
            why = "the learning rate is 0" if g.get("lr_max") == 0 else (
                f"the cleared gradients of {_where(g['cleared_at'])}" if g.get("cleared_at") else "its gradients or learning rate are zero")
            names = f" ({', '.join(g['names'])}{'...' if g['tensors'] > len(g['names']) else ''})" if g.get("names") else ""
            lines.append(Problem("TLR104", f"updates: {_group_label(g)} was unchanged by all {plural(steps, 'step')} ({lr}), from step 1: {why}{names}",
                                 g.get("cleared_at") or g.get("built_at"), 1))
        elif g.get("ratio_median") is not None:
            floor = RESOLUTION.get(g["dtype"], RESOLUTION["float32"]) / 2
            if g["ratio_median"] < floor:
                lines.append(Problem(
                    "TLR105",
                    f"updates: {_group_label(g)}: median update-to-weight ratio {g['ratio_median']:.2g} per step, below half of "
                    f"{g['dtype']}'s relative resolution ({floor:.2g}): most updates round away{_first(g, lambda r: r < floor)}", g.get("built_at"),
                ))
            elif g["ratio_median"] > MAX_RATIO:
                lines.append(Problem(
                    "TLR105",
                    f"updates: {_group_label(g)}: median update-to-weight ratio {g['ratio_median']:.3g} per step (largest {g['ratio_max']:.3g}), "
                    f"above {MAX_RATIO:g}: each step moves the weights by more than their own norm (lr {g.get('lr_first')}){_first(g, lambda r: r > MAX_RATIO)}",
                    g.get("built_at"),
                ))
    return lines


def _skips_most(scaler: Report) -> bool:
    """A GradScaler that, past its first SETTLING_SKIPS steps, skipped MOST_SKIPPED of them or more."""
    after = (scaler.get("steps") or 0) - SETTLING_SKIPS
    return after >= SETTLING_SKIPS and (scaler.get("skipped_after_settling") or 0) >= MOST_SKIPPED * after


def _first(g: Report, bad: Any) -> str:
    steps = [i + 1 for i, r in enumerate(g.get("ratio_per_step") or []) if r is not None and bad(r)]
    return f", from step {steps[0]}" if steps else ""


def update_lines(report: Report) -> list[str]:
    """One line per parameter group: the update-to-weight ratio per step (median, extremes) and lr."""
    lines = []
    for g in (report.get("updates") or {}).get("groups") or []:
        lr = f"lr {g['lr_first']:g}" + (f" -> {g['lr_last']:g}" if g.get("lr_last") not in (None, g["lr_first"]) else "") if g.get("lr_first") is not None else "lr ?"
        if g.get("ratio_median") is None:
            ratio = "no ratio (weights at zero)"
        else:
            ratio = f"update/weight median {g['ratio_median']:.2g} (min {g['ratio_min']:.2g}, max {g['ratio_max']:.2g})"
        lines.append(f"{g['optimizer']} group {g['group']}: {plural(g['tensors'], 'tensor')}, {g['elements']:,} {g['dtype']} elements, {lr}, {ratio}, "
                     f"{g['steps_unchanged']} of {plural(g['steps'], 'step')} changed nothing")
    scaler = (report.get("updates") or {}).get("scaler") or {}
    if scaler.get("skipped"):
        lines.append(f"GradScaler skipped {scaler['skipped']} of {plural(scaler['steps'], 'step')} ({scaler['skipped'] / scaler['steps']:.0%})")
    return lines


# -- learning happens ------------------------------------------------------------------------------

def learning(report: Report) -> Report:
    """The verdict on the loss: `status` ("improving", "not improving", "at chance", "too early to
    tell", or None with no loss), `detail`, and the test's figures."""
    values = [v for v in (report.get("loss") or {}).get("values") or [] if v is not None and math.isfinite(v)]
    if not values:
        return {"status": None, "detail": "no loss recorded"}
    info = report.get("learning") or {}
    n = len(values)
    if n < MIN_STEPS:
        return {"status": "too early to tell", "detail": f"{plural(n, 'loss value')}; the trend test needs {MIN_STEPS}", "n": n}
    points = _average(values, MAX_POINTS)
    z, p = mann_kendall(points)
    low, high = sen_slope_interval(points)
    level = abs(statistics.median(values))
    # the most favourable decrease over the whole run that the interval allows
    best_drop = -low * (len(points) - 1)
    third = max(1, n // 3)
    head, tail = statistics.median(values[:third]), statistics.median(values[-third:])
    figures = {"n": n, "mann_kendall_z": z, "p_decrease": p, "sen_slope_95": [low, high], "first_third": head, "last_third": tail}
    classes = info.get("classes")
    if classes and classes >= 2 and info.get("loss_function") and n >= 2 * MIN_STEPS:
        chance = math.log(classes)
        figures["chance"] = chance
        # the second half, after any fall from an initialisation above chance
        half = _average(values[n // 2:], MAX_POINTS)
        half_p = mann_kendall(half)[1]
        half_drop = -sen_slope_interval(half)[0] * (len(half) - 1)
        if tail >= (1 - CHANCE_SHARE) * chance and half_p >= ALPHA and half_drop < CHANCE_SHARE * chance:
            return {"status": "at chance", "detail": f"the last third's median loss {tail:.4g} is at chance level for {classes} classes "
                    f"(log {classes} = {chance:.4g}), with no downward trend over the second half (Mann-Kendall p = {half_p:.2g}); "
                    f"first third {head:.4g}", **figures}
    if p < ALPHA:
        return {"status": "improving", "detail": f"the loss falls (Mann-Kendall p = {p:.2g}): {head:.4g} -> {tail:.4g}", **figures}
    if _warming_up(report):
        return {"status": "too early to tell", "detail": "the learning rate is still rising (warm-up)", **figures}
    if n >= FLAT_MIN_STEPS and level > 0 and best_drop < FLAT_SHARE * level:
        return {"status": "not improving", "detail": f"no downward trend (Mann-Kendall p = {p:.2g}); the 95% interval of Sen's slope allows a fall of at most "
                f"{max(best_drop, 0) / level:.1%} of the loss over {n} steps: {head:.4g} -> {tail:.4g}", **figures}
    return {"status": "too early to tell", "detail": f"no significant trend yet (Mann-Kendall p = {p:.2g}) over {n} steps", **figures}


def _learning_problems(report: Report) -> list[Problem]:
    verdict = learning(report)
    if verdict["status"] not in ("not improving", "at chance"):
        return []
    from trainlint.verify.sparkline import sparkline

    values = (report.get("loss") or {}).get("values") or []
    what = "the loss stays at chance level" if verdict["status"] == "at chance" else "the loss does not improve"
    code = "TLR402" if verdict["status"] == "at chance" else "TLR401"
    return [Problem(code, f"learning: {what} over {verdict['n']} steps, from step 1: {verdict['detail']} {sparkline(values)}")]


def _warming_up(report: Report) -> bool:
    for g in (report.get("updates") or {}).get("groups") or []:
        first, last = g.get("lr_first"), g.get("lr_last")
        if first is not None and last is not None and last > first * 1.5:
            return True
    return False


def _average(values: Sequence[float], limit: int) -> list[float]:
    if len(values) <= limit:
        return list(values)
    size = len(values) / limit
    return [statistics.fmean(values[int(i * size):int((i + 1) * size)]) for i in range(limit)]


def mann_kendall(values: Sequence[float]) -> tuple[float, float]:
    """The Mann-Kendall statistic's z score and the one-sided p-value of a downward trend
    (normal approximation with continuity correction, no tie correction)."""
    n = len(values)
    s = sum((values[j] > values[i]) - (values[j] < values[i]) for i in range(n) for j in range(i + 1, n))
    variance = n * (n - 1) * (2 * n + 5) / 18
    if variance == 0:
        return 0.0, 1.0
    z = (s - 1) / math.sqrt(variance) if s > 0 else (s + 1) / math.sqrt(variance) if s < 0 else 0.0
    return z, 0.5 * math.erfc(-z / math.sqrt(2))  # P(Z <= z): small when the series falls


def sen_slope_interval(values: Sequence[float]) -> tuple[float, float]:
    """The 95% confidence interval of Sen's slope (per step)."""
    n = len(values)
    slopes = sorted((values[j] - values[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
    if not slopes:
        return 0.0, 0.0
    c = Z_TWO_SIDED * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    lower = max(0, int((len(slopes) - c) / 2))
    upper = min(len(slopes) - 1, int((len(slopes) + c) / 2) + 1)
    return slopes[lower], slopes[upper]
