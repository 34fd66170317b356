"""How healthy an instrumented run was: the problems its report shows (frozen parameters and their
cause, divergence, gradient-norm spikes, growing graphs...), the series to draw, and how the script
ended. Works on the JSON report only: no torch here."""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from trainlint.report.text import plural
from trainlint.verify.invariant_health import invariant_information, invariant_problems, where
from trainlint.verify.problem_kinds import Problem, relative_path
from trainlint.verify.update_health import update_problems

Report = dict[str, Any]
FROZEN = 0.5  # a tensor whose elements with a gradient stayed unchanged at least this often is frozen


def problems(report: Report) -> list[Problem]:
    """Training-health problems the run showed (empty when healthy, and when our own instruments
    failed: then there is no evidence to judge)."""
    if failed_ourselves(report) or partial(report):
        return []
    found = []
    updates = update_problems(report)
    frozen = [r for r in report.get("frozen") or [] if r["frozen_fraction"] >= FROZEN]
    if any(p.code == "TLR104" for p in updates):  # steps that changed nothing: their cause is stated there
        frozen = [r for r in frozen if r.get("no_master_copy")]
    if frozen:
        cast = next((r["cast_at"] for r in frozen if r.get("cast_at")), None)
        found.append(Problem("TLR101", f"{plural(len(frozen), 'parameter tensor')} frozen: {frozen_examples(frozen)}{frozen_cause(frozen)}", cast))
    for what, code in (("loss", "TLR201"), ("grad_norm", "TLR202")):
        bad = (report.get(what) or {}).get("nonfinite_steps") or []
        if bad:
            found.append(Problem(code, f"{what.replace('_', ' ')} non-finite at step{'s' if len(bad) != 1 else ''} {list_steps(bad)}", step=bad[0]))
    if report.get("nonfinite_parameters"):
        found.append(Problem("TLR203", f"non-finite parameters: {', '.join(report['nonfinite_parameters'][:5])}"))
    rise = divergence(report)
    if rise:
        found.append(Problem(
            "TLR204",
            f"the loss diverged: {rise['baseline']:.4g} at the start, {rise['last']:.4g} after step {rise['steps']} "
            f"({rise['factor']:.0f}x), rising from step {rise['began']}", step=rise["began"],
        ))
    spikes = grad_norm_spikes(report)
    if spikes:
        found.append(Problem(
            "TLR205",
            f"gradient-norm spikes: {plural(len(spikes['steps']), 'step')} at {SPIKE_FACTOR:g}x or more the median norm of the {SPIKE_WINDOW} steps "
            f"before them ({spikes['median']:.3g} before the first) and {SPIKE_SPREAD:g}x their largest, "
            f"from step {spikes['steps'][0]} ({spikes['first']:.4g}; largest {spikes['max']:.4g})", step=spikes["steps"][0],
        ))
    agreement = report.get("rank_agreement") or {}
    averaging = _gradients_not_averaged(report)
    if agreement.get("status") == "diverge":
        why = "their gradients were not averaged: TLR602" if averaging else "replicas trained apart: no DDP wrapper, or a rank-dependent update"
        found.append(Problem(
            "TLR601",
            f"the ranks diverge: parameter checksums of rank{'s' if len(agreement['ranks']) != 1 else ''} {', '.join(map(str, agreement['ranks']))} differ from rank {agreement.get('reference_rank', 0)}'s "
            f"after step {agreement['first_step']} ({why})", step=agreement["first_step"],
        ))
    found += averaging
    for graph in report.get("graphs") or []:
        found.append(Problem("TLR301", f"`{graph['name']}` keeps autograd graphs: +{graph['growth_per_step']:.0f} nodes per step"))
    growth = (report.get("saved_bytes") or {}).get("growth_per_step") or 0
    if growth > 0:
        found.append(Problem("TLR302", f"tensors saved for backward stay alive: +{format_bytes(growth)} per step"))
    if report.get("eval_mode_steps"):
        found.append(Problem("TLR501", f"the model trained in eval mode at {len(report['eval_mode_steps'])} of {report['steps']} steps",
                             step=report["eval_mode_steps"][0]))
    if never_cleared(report):
        found.append(Problem("TLR106", f"gradients were never cleared in {report['steps']} steps: each step applied their running sum"))
    return found + invariant_problems(report) + updates


def _gradients_not_averaged(report: Report) -> list[Problem]:
    """Under a DDP wrapper, the ranks' gradients must be equal when the optimizer applies them."""
    grads = report.get("gradient_agreement") or {}
    ranks = report.get("ranks") or []
    if grads.get("status") != "diverge" or not any(r.get("ddp") for r in ranks):
        return []
    moved = next((r["moved_after_wrap"] for r in ranks if r.get("moved_after_wrap")), None)
    wrapped = next((r["wrapped_at"] for r in ranks if r.get("wrapped_at")), None)
    cause = (f": the wrapped model was moved (device or dtype) at {where(moved)} after DistributedDataParallel wrapped it"
             + (f" at {where(wrapped)}" if wrapped else "") + ", so DDP's gradient buckets no longer hold its parameters") if moved else (
             ": DDP's all-reduce did not reach them (a move of the model after wrapping, `no_sync()` left on, or a comm hook that does not average)")
    return [Problem(
        "TLR602",
        f"gradients not averaged: the gradients of rank{'s' if len(grads['ranks']) != 1 else ''} {', '.join(map(str, grads['ranks']))} differ from rank {grads.get('reference_rank', 0)}'s "
        f"when step {grads['first_step']} applies them, under DistributedDataParallel{cause}", moved or wrapped, grads["first_step"],
    )]


def information(report: Report) -> list[Problem]:
    """Deliberate patterns the run showed (a head over a frozen model, MC dropout...), with their codes."""
    return [] if failed_ourselves(report) or partial(report) else invariant_information(report)


def iterations(report: Report) -> int:
    """Training iterations the run measured: optimizer steps, and those a GradScaler skipped."""
    return (report.get("steps") or 0) + (report.get("skipped_steps") or 0)


def steps_taken(report: Report) -> str:
    """"50 optimizer steps", or "3 optimizer steps and 47 skipped by the GradScaler (94%)"."""
    steps, skipped = report.get("steps") or 0, report.get("skipped_steps") or 0
    if not skipped:
        return plural(steps, 'optimizer step')
    return f"{plural(steps, 'optimizer step')} and {skipped} skipped by the GradScaler ({skipped / (steps + skipped):.0%} of {steps + skipped} iterations)"


def failed_ourselves(report: Report) -> bool:
    """The instruments (trainlint), not the script, failed: the evidence is incomplete."""
    return report.get("stopped") == "internal-error"


def script_failed(report: Report) -> str | None:
    """A line saying how the script failed (an error, a non-zero exit status, an end before the
    report), or None. The status is the one the script's process ended with."""
    stopped, status = report.get("stopped"), report.get("exit_code")
    if stopped == "rank-failed":
        return f"a rank failed: {report.get('error')}"
    if stopped == "no-report":  # even with status 0: nothing but the steps was measured
        if report.get("ended"):
            return f"the script {report['ended']} after {report.get('steps') or 0} optimizer steps"
        return str(report.get("message"))
    if stopped == "error":
        if not isinstance(status, int):  # the run could not start the script: nothing was raised
            return ": ".join(str(part) for part in ("the run failed", report.get("message"), report.get("error")) if part)
        return f"the script raised an error (exit status {status}): {report.get('error') or ''}".rstrip(": ")
    if isinstance(status, int) and status != 0:
        return f"the script exited with status {status}"
    return None


def partial(report: Report) -> bool:
    """The run ended without its report: only the steps' count and times are known, no evidence."""
    return bool(report.get("partial"))


def frozen_cause(frozen: Sequence[Report]) -> str:
    """Why low-precision tensors froze: no fp32 master copy, and the line that cast them."""
    low = [r for r in frozen if r.get("no_master_copy")]
    if not low:
        return ""
    dtype = low[0]["dtype"]
    cause = f"; they are {dtype} and the optimizer updates them in place with no float32 master copy, so updates smaller than half their spacing round away"
    casts = [r["cast_at"] for r in low if r.get("cast_at")]
    if casts:
        site = max(casts, key=lambda c: sum(1 for other in casts if other["line"] == c["line"] and other["path"] == c["path"]))
        code = f" (`{site['code']}`)" if site.get("code") else ""
        cause += f"; cast to {site['to']} at {relative_path(site['path'])}:{site['line']}{code}"
    return cause


DIVERGE_FACTOR = 10.0  # the loss ending this many times above its start has diverged
SPIKE_FACTOR = 10.0  # a gradient norm this many times the median of the steps before it is a spike
SPIKE_WINDOW = 25  # how many steps before it the median is taken over
SPIKE_BASELINE = 8  # no step is judged before this many steps with a finite norm: there is no baseline yet
SPIKE_SPREAD = 3.0  # and this many times the largest norm of those steps
SPIKE_FLOOR = 0.01  # the baseline is at least this share of the median of the run's first SPIKE_BASELINE norms


def divergence(report: Report) -> Report | None:
    """The loss rising by DIVERGE_FACTOR or more over the run, with the step the rise began."""
    values = [v for v in (report.get("loss") or {}).get("values") or [] if v is not None]
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 4 or len(finite) != len(values):  # non-finite losses are reported as such
        return None
    head = max(1, min(5, len(values) // 5))
    baseline = min(values[:head])  # the start, before a fast rise in the first steps
    last = statistics.median(values[-min(3, len(values) - head):])
    if baseline <= 0 or last < DIVERGE_FACTOR * baseline:
        return None
    # the rise began after the last step whose loss was still within twice the start
    within = [i for i, v in enumerate(values) if v <= 2 * baseline]
    began = (within[-1] + 2) if within else 1
    return {"baseline": baseline, "last": values[-1], "factor": last / baseline, "began": began, "steps": len(values)}


def grad_norm_spikes(report: Report) -> Report | None:
    """Steps whose gradient norm is SPIKE_FACTOR times their baseline or more (the median of the
    SPIKE_WINDOW finite norms before them, or SPIKE_FLOOR of the run's first norms when that is larger)
    and SPIKE_SPREAD times the largest of those norms. No step is judged before SPIKE_BASELINE finite
    norms exist.

    Judged against the recent past, not the whole run's median: the first steps of any run have
    gradients far larger than those of its converged end (an MLP's fall from 8 to 0.005 spans 100x),
    and a run whose norms drift over time is not spiking. The floor keeps the noise of a converged
    run (a norm of 1e-3 among 1e-4s, after a start near 1) from passing for a spike: it cannot move
    the weights as the first steps did. Small-batch gradient norms are heavy-tailed: a norm within
    SPIKE_SPREAD of one the window already holds (an LSTM's 0.31 after a 0.27, median 0.03) is that
    spread, not a spike."""
    values = (report.get("grad_norm") or {}).get("values") or []
    past: list[float] = []  # the finite norms before the step, most recent last
    steps, baselines = [], []
    floor = 0.0
    for i, value in enumerate(values):
        if value is None or not math.isfinite(value):
            continue
        if len(past) >= SPIKE_BASELINE:
            floor = floor or SPIKE_FLOOR * statistics.median(past[:SPIKE_BASELINE])
            window = past[-SPIKE_WINDOW:]
            baseline = max(statistics.median(window), floor)
            if baseline > 0 and value >= SPIKE_FACTOR * baseline and value >= SPIKE_SPREAD * max(window):
                steps.append(i + 1)
                baselines.append(baseline)
        past.append(value)
    if not steps:
        return None
    return {"steps": steps, "median": baselines[0], "first": values[steps[0] - 1], "max": max(values[s - 1] for s in steps),
            "window": SPIKE_WINDOW}


def never_cleared(report: Report) -> bool:
    """No zero_grad() call and no `.grad` reset over two steps or more: gradients accumulated."""
    return (report.get("steps") or 0) >= 2 and report.get("zero_grad_calls") == 0 and report.get("renewed_grads_steps") == 0



def format_bytes(n: float) -> str:
    """1536 -> "1.5 KiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def frozen_examples(rows: Sequence[Report], limit: int = 3) -> str:
    shown = ", ".join(f"{r['name']} {r['frozen_fraction']:.0%}" for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def list_steps(steps: Sequence[int], limit: int = 5) -> str:
    return ", ".join(map(str, steps[:limit])) + (f" and {len(steps) - limit} more" if len(steps) > limit else "")



def run_series(report: Report) -> list[Report]:
    """The per-step series worth drawing (loss, gradient norm, step time, CUDA memory), each with
    `label`, `unit` ("" / "s" / "bytes"), `values` and `marks`: the steps where a problem began."""
    rows = []
    loss = (report.get("loss") or {}).get("values") or []
    if any(v is not None for v in loss):
        marks = []
        bad = (report.get("loss") or {}).get("nonfinite_steps") or []
        if bad:
            marks.append({"step": bad[0], "text": f"non-finite from step {bad[0]}"})
        rise = divergence(report)
        if rise:
            marks.append({"step": rise["began"], "text": f"diverging from step {rise['began']}"})
        rows.append({"label": "loss", "unit": "", "values": loss, "marks": marks})
    norms = (report.get("grad_norm") or {}).get("values") or []
    if any(v is not None for v in norms):
        marks = []
        bad = (report.get("grad_norm") or {}).get("nonfinite_steps") or []
        if bad:
            marks.append({"step": bad[0], "text": f"non-finite from step {bad[0]}"})
        spikes = grad_norm_spikes(report)
        if spikes:
            marks.append({"step": spikes["steps"][0], "text": f"spike at step {spikes['steps'][0]}"})
        rows.append({"label": "grad norm", "unit": "", "values": norms, "marks": marks})
    times = (report.get("step_time") or {}).get("values") or []
    if times:
        rows.append({"label": "step time", "unit": "s", "values": times, "marks": []})
    memory = (report.get("cuda_memory") or {}).get("values") or []
    if memory:
        rows.append({"label": "CUDA memory", "unit": "bytes", "values": memory, "marks": []})
    return rows


def format_value(value: float | None, unit: str) -> str:
    """A series value for people: 0.0123 s -> "12.3 ms", 2048 bytes -> "2.0 KiB"."""
    if value is None or not math.isfinite(value):
        return str(value)
    if unit == "s":
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
    if unit == "bytes":
        return format_bytes(value)
    return f"{value:.4g}"


def clipping_line(report: Report) -> str | None:
    """"the script clips the gradient norm to 1 at train.py:80 (...)" or None when it does not clip."""
    clipping = report.get("clipping")
    if not clipping or not clipping.get("sites"):
        return None
    site = clipping["sites"][0]
    what = "the gradient norm" if site["kind"] == "norm" else "each gradient value"
    line = f"the script clips {what} to {site['limit']} at {relative_path(site['path'])}:{site['line']}"
    if site["kind"] == "norm":
        line += f"; the norm (measured before clipping, unscaled) exceeded it at {clipping['steps_clipped']} of {report.get('steps', 0)} steps"
    return line


def rank_lines(report: Report) -> list[str]:
    """A multi-process run: one line per rank, then whether their parameters agree."""
    lines = []
    for rank in report.get("ranks") or []:
        collectives = ", ".join(f"{c['kind']} {c['per_step']:.3g}" for c in rank.get("collectives") or [])
        frozen = len([f for f in rank.get("frozen") or [] if f["frozen_fraction"] >= FROZEN])
        loss = f", loss {rank['loss_first']:.4g} -> {rank['loss_last']:.4g}" if rank.get("loss_first") is not None else ""
        per_step = f"; collectives per step: {collectives}" if collectives else ""
        syncs = len([s for s in rank.get("syncs") or [] if s["every_step"]])
        where = f" (node {rank['node']}, {rank.get('host')})" if report.get("nodes") and rank.get("node") is not None else ""
        lines.append(
            f"rank {rank['rank']}{where}: {plural(rank['steps'], 'step')}, {rank.get('message') or rank.get('stopped')}{loss}, "
            f"{plural(frozen, 'frozen tensor')}, {plural(syncs, 'sync site')} every step{per_step}"
        )
    agreement = report.get("rank_agreement") or {}
    if agreement.get("status") == "agree":
        lines.append(f"parameters agree across ranks {', '.join(map(str, agreement['ranks_compared']))} after each of {agreement['steps_compared']} steps")
    elif agreement.get("status") == "diverge":
        lines.append(f"parameters DIVERGE: rank{'s' if len(agreement['ranks']) != 1 else ''} {', '.join(map(str, agreement['ranks']))} differ from rank {agreement['reference_rank']} after step {agreement['first_step']}")
    elif agreement:
        lines.append(f"parameters not compared: {agreement.get('detail')}")
    grads = report.get("gradient_agreement") or {}
    if grads.get("status") == "agree":
        lines.append(f"gradients agree across ranks {', '.join(map(str, grads['ranks_compared']))} as each of {grads['steps_compared']} steps applies them")
    elif grads.get("status") == "diverge":
        lines.append(f"gradients DIFFER: rank{'s' if len(grads['ranks']) != 1 else ''} {', '.join(map(str, grads['ranks']))} from rank {grads['reference_rank']} at step {grads['first_step']}")
    return lines
