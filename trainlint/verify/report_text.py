"""`trainlint verify` in the terminal: each finding with its verdict and measured evidence, and the
health report of `trainlint verify run`."""

from __future__ import annotations

import math
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainlint.verify.sparkline import marker_column, sparkline
from trainlint.report.text import plural, visible, visible_lines
from trainlint.verify.health import (
    FROZEN, clipping_line, failed_ourselves, format_bytes, format_value, frozen_cause, information, iterations, never_cleared, partial, steps_taken,
    rank_lines, relative_path, run_series, script_failed,
)
from trainlint.verify.invariant_health import unchanged_parameters, where
from trainlint.verify.problem_kinds import Problem
from trainlint.verify.update_health import learning, update_lines

STYLE = {"confirmed": "bold red", "not reproduced": "green", "not confirmed": "green", "cannot check here": "yellow"}


def _e(value: object) -> str:
    """Text from the script or its run (paths, names, messages, source lines, error text) for markup:
    never read as markup (`[/tmp/pair.cc:553]` in a gloo error is not a closing tag), control
    characters shown as escapes."""
    return escape(visible(str(value)))


def render(console: Console, rows: Sequence[dict[str, object]], unchecked: str = "no probe") -> None:
    """Each finding with its verdict, then a count per verdict; `unchecked` names findings with none."""
    counts: dict[str, int] = {}
    for row in rows:
        verdict = row.get("verification")
        where = f"{row['path']}:{row['line']}:{row['column']}"
        console.print(f"[bold]{_e(where)}[/] [cyan]{_e(row['code'])}[/] {_e(row['message'])}")
        if not verdict:
            console.print(f"  = verification: {unchecked} for this rule{_run_hint(str(row['code']), unchecked)}")
            counts[unchecked] = counts.get(unchecked, 0) + 1
            continue
        status = str(verdict["status"])
        counts[status] = counts.get(status, 0) + 1
        duration = verdict.get("duration_s")
        on = f" on {_e(verdict['device'])}" if verdict.get("device") else ""
        took = f", {duration:.1f} s" if isinstance(duration, (int, float)) else ""
        console.print(f"  = [{STYLE.get(status, '')}]{_e(status)}[/]{on}{took}: {_e(verdict['summary'])}")
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    console.print(f"\nVerified {plural(len(rows), 'finding')}: {_e(summary) or 'nothing to verify'}")


def render_run(console: Console, report: dict[str, Any], rows: Sequence[dict[str, object]], problems: Sequence[Problem]) -> None:
    """The training-health report of `trainlint verify run`, then the script's static findings judged.

    Each section is drawn on its own: evidence of an unexpected shape costs that section, never the report."""
    steps = report.get("steps") or 0
    took = f", {report['duration_s']:.1f} s" if isinstance(report.get("duration_s"), (int, float)) else ""
    on = f" on {_e(report['device'])}" if report.get("device") else ""
    console.print(f"[bold]{_e(report.get('script'))}[/]: {_e(steps_taken(report))}{on}{took}: {_e(report.get('message', ''))}")
    if report.get("error"):
        # a DataLoader worker's error carries the worker's traceback: its lines, indented under the first
        first, *rest = visible_lines(str(report["error"]))
        console.print(f"  [red]{escape(first)}[/]")
        for line in rest:
            console.print(f"    [red]{escape(line)}[/]" if line else "")
    if partial(report) and report.get("step_time"):  # the run ended before its report: the steps' times are all there is
        _series(console, report)
    if failed_ourselves(report) or partial(report) or not iterations(report):
        return
    for section in (_ranks, _what_trains, _frozen, _evaluation, _series, _updates, _syncs, _graphs, _step_notes):
        try:
            section(console, report)
        except Exception as exc:  # a gap in one section, not a lost report
            console.print(f"\n  [yellow](this part of the report could not be shown: {type(exc).__name__}: {_e(exc)}; `--format json` has the figures)[/]")
    if rows:
        console.print(f"\n[bold]Static findings[/] in {_e(report['script'])}, judged by this run")
        render(console, rows, unchecked="no runtime check")
    open_problems = [p for p in problems if not p.acknowledged]
    for title, shown in (("[bold red]Problems[/]", open_problems), ("[bold]Acknowledged[/] (not counted in the exit code)", [p for p in problems if p.acknowledged]),
                         ("[bold]Information[/]", information(report))):
        if shown:
            console.print(f"\n{title}")
            for problem in shown:
                console.print(f"  - [cyan]{problem.code}[/] {_e(problem.message)}{_acknowledged(problem)}")
    if not open_problems:
        scope = f"the {plural(steps, 'step')} before the run failed" if script_failed(report) else "this run"
        acknowledged = len(problems) - len(open_problems)
        console.print(f"\nNo training-health problem in {scope}" + (f" apart from {acknowledged} acknowledged." if acknowledged else "."))


def _acknowledged(problem: Problem) -> str:
    return f" [dim](acknowledged: {_e(problem.acknowledged)})[/]" if problem.acknowledged else ""


def _ranks(console: Console, report: dict[str, Any]) -> None:
    lines = rank_lines(report)
    if lines:
        nodes = f" on {report['nodes']['count']} nodes" if report.get("nodes") and not report["nodes"].get("partial") else ""
        console.print(f"\n[bold]Ranks[/] ({_e(report.get('world_size'))} processes{nodes} under torchrun; the sections below are rank 0's, frozen tensors of every rank)")
        for line in lines:
            console.print(f"  {'[red]' + _e(line) + '[/]' if 'DIVERGE' in line else _e(line)}")


def _frozen(console: Console, report: dict[str, Any]) -> None:
    steps = report["steps"]
    console.print(f"\n[bold]Frozen parameters[/]: every parameter unchanged after {steps} steps, with the reason")
    rows = unchanged_parameters(report)
    if not rows:
        tensors = (report.get("what_trains") or {}).get("tensors") or report.get("tensors_checked", 0)
        console.print(f"  none of {tensors} tensors (none had {FROZEN:.0%} or more of its elements unchanged)")
        return
    table = Table(box=None, padding=(0, 2, 0, 2), show_header=True, header_style="bold")
    for column, justify in (("parameter", "left"), ("dtype", "left"), ("elements", "right"), ("unchanged", "right"), ("reason", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in rows[:15]:
        bad = r["reason"] in ("update below resolution", "no update applied")
        reason = f"[red]{_e(r['reason'])}[/]" if bad else _e(r["reason"])
        table.add_row(_e(r["name"]), _e(r["dtype"]), f"{r['numel']:,}", f"{r['unchanged_fraction']:.0%}", reason)
    console.print(table)
    if len(rows) > 15:
        console.print(f"  ... and {len(rows) - 15} more")
    counts: dict[str, list[int]] = {}
    for r in rows:
        counts.setdefault(r["reason"], [0, 0])
        counts[r["reason"]][0] += 1
        counts[r["reason"]][1] += r["numel"]
    console.print("  by reason: " + _e("; ".join(f"{reason} {plural(n, 'tensor')}, {elements:,} elements" for reason, (n, elements) in counts.items())))
    cause = frozen_cause([r for r in report.get("frozen") or [] if r["frozen_fraction"] >= FROZEN])
    if cause:
        console.print(f"  cause: {_e(cause.removeprefix('; '))}")


def _what_trains(console: Console, report: dict[str, Any]) -> None:
    trains = report.get("what_trains")
    if not trains or not trains.get("total"):
        return
    total, share = trains["total"], trains["share_trained"]
    pattern = {"all": "", "head": ": the model's last layers", "low-rank adapters": ": low-rank adapters beside frozen weights"}.get(trains.get("pattern") or "", "")
    style = "red" if share < 0.25 and trains.get("pattern") is None else ""
    shown = f"[{style}]{share:.1%}[/]" if style else f"{share:.1%}"
    console.print(f"\n[bold]What trains[/]: {shown} of {total:,} parameter elements ({trains['tensors']} tensors){_e(pattern)}")
    if share >= 1:
        return
    statuses = [s for s in ("trains", "requires_grad=False", "not in an optimizer", "no gradient") if (trains.get("by_status") or {}).get(s)]
    table = Table(box=None, padding=(0, 2, 0, 2), show_header=True, header_style="bold")
    table.add_column("module")
    for status in ["elements", *statuses]:
        table.add_column(status, justify="right")
    modules = trains.get("modules") or []
    for m in modules[:12]:
        table.add_row(_e(m["path"]), f"{m['total']:,}", *(f"{m.get(s, 0) / m['total']:.0%}" if m["total"] else "" for s in statuses))
    console.print(table)
    if len(modules) > 12:
        console.print(f"  ... and {len(modules) - 12} more modules")
    for site in (trains.get("freeze_sites") or [])[:3]:
        console.print(f"  requires_grad=False set at {_e(where(site))} for {plural(site['tensors'], 'tensor')}, {site['elements']:,} elements")


def _evaluation(console: Console, report: dict[str, Any]) -> None:
    behaviour = report.get("eval_behaviour") or {}
    sites = behaviour.get("sites") or []
    if not sites:
        return
    console.print(f"\n[bold]Evaluation[/]: training behaviour under eval mode ({behaviour.get('switches', 0)} switch(es) to eval by the script)")
    for site in sites[:10]:
        verdict = "on purpose" if site["explicit"] else "[red]problem[/]"
        when = (f"in the verifier's evaluation after step {site['after_step']}" if site.get("replayed")
                else f"{plural(site['count'], 'call')}, from after step {site['after_step']}")
        console.print(f"  {_e(where(site))}  {_e(site['function'])} in `{_e(site['module'])}`  {when}  {verdict}")
    measured = behaviour.get("measured") or {}
    if measured.get("error"):
        console.print(f"  the repeated forward could not run: {_e(measured['error'])}")
    elif measured:
        console.print(
            f"  two forwards of one batch under `{_e(measured.get('module_type'))}`: outputs differ by up to {measured['max_abs_diff']:.3g}, "
            f"{plural(len(measured.get('buffers_changed') or []), 'buffer')} changed"
        )


def _series(console: Console, report: dict[str, Any]) -> None:
    console.print(f"\n[bold]Per step[/] (steps 1..{report['steps']})")
    for row in run_series(report):
        values = row["values"]
        finite = [v for v in values if v is not None and math.isfinite(v)]
        line = sparkline(values)
        figures = ""
        if finite:
            shown = [v for v in values if v is not None]
            figures = "  ".join(
                f"{name} {format_value(v, row['unit'])}" for name, v in (("first", shown[0]), ("last", shown[-1]), ("min", min(finite)), ("max", max(finite)))
            )
        console.print(f"  {row['label']:<12}{line}  {figures}")
        for mark in row["marks"]:
            column = marker_column(mark["step"], len(values))
            console.print(f"  {'':<12}{' ' * column}[red]^ {_e(mark['text'])}[/]")
    clip = clipping_line(report)
    if clip:
        console.print(f"  {_e(clip)}")
    scale = report.get("loss_scale")
    if scale and scale.get("enabled") is False:
        console.print(f"  GradScaler disabled: {scale.get('scaled_losses', 0)} loss(es) passed through unscaled")
    elif scale and scale.get("first") is not None:
        console.print(f"  loss scale {scale['first']:g} -> {scale['last']:g}, lowered {plural(scale.get('decreases', 0), 'time')} for inf/NaN gradients")
    if report.get("nonfinite_parameters"):
        console.print(f"  [red]non-finite parameters[/]: {_e(', '.join(report['nonfinite_parameters'][:5]))}")
    timing = report.get("step_time")
    if timing and timing.get("median_rest_s") is not None:
        first, rest = timing["first_s"], timing["median_rest_s"]
        slower = "  [red]later steps are slower than the first[/]" if rest > 1.2 * first else ""
        console.print(f"  step time: median of steps 2..N {rest * 1e3:.1f} ms (step 1: {first * 1e3:.1f} ms){slower}")


def _updates(console: Console, report: dict[str, Any]) -> None:
    lines = update_lines(report)
    if lines:
        console.print("\n[bold]Updates[/] per optimizer step (update-to-weight ratio ||delta w|| / ||w|| on a sample of each tensor)")
        for line in lines:
            console.print(f"  {_e(line)}")
    verdict = learning(report)
    if verdict["status"] is not None:
        style = "red" if verdict["status"] in ("not improving", "at chance") else ""
        status = f"[{style}]{verdict['status']}[/]" if style else verdict["status"]
        console.print(f"\n[bold]Learning[/]: {status}: {_e(verdict['detail'])}")


def _syncs(console: Console, report: dict[str, Any]) -> None:
    console.print("\n[bold]Host-device syncs[/] called by the script (per step, over steps 2..N)")
    syncs = report.get("syncs") or []
    for s in syncs[:10]:
        where = relative_path(s["path"])
        if s["every_step"]:
            often = f"[red]{s['per_step']:.3g} per step[/]"
        elif s["steps_seen"]:
            often = f"in {s['steps_seen']} of {s['steps_measured']} steps"
        else:
            often = f"{plural(s['count'], 'time')}, outside the steps measured"
        console.print(f"  {_e(where)}:{_e(s['line'])}  {_e(s['kind'])}  {often}")
    if not syncs:
        console.print("  none")
    elif report.get("device") == "cpu":
        console.print("  [dim]on the CPU these are value reads that sync when the tensor lives on a GPU[/]")


def _graphs(console: Console, report: dict[str, Any]) -> None:
    console.print("\n[bold]Autograd graphs kept across steps[/]")
    for g in report.get("graphs") or []:
        nodes = g["nodes"]
        holding = f", holding {format_bytes(g['saved_bytes_at_end'])} saved for backward" if g.get("saved_bytes_at_end") else ""
        console.print(f"  [red]{_e(g['name'])}[/]: +{g['growth_per_step']:.0f} nodes per step ({nodes[0]} after step 1, {nodes[-1]} after step {len(nodes)}{holding})")
    saved = report.get("saved_bytes") or {}
    values = saved.get("values") or [0]
    growth = saved.get("growth_per_step") or 0
    grows = f", [red]+{format_bytes(growth)} per step[/]" if growth > 0 else ""
    console.print(f"  tensors saved for backward, alive at step end: {format_bytes(values[0])} after step 1, {format_bytes(values[-1])} after step {len(values)}{grows}")
    cuda = report.get("cuda_memory")
    if cuda and cuda.get("values"):
        console.print(f"  CUDA memory allocated: {format_bytes(cuda['values'][0])} -> {format_bytes(cuda['values'][-1])} (+{format_bytes(cuda['growth_per_step'])} per step)")


def _run_hint(code: str, unchecked: str) -> str:
    from trainlint.verify.script_run import JUDGED  # torch-free, but only needed for this hint

    return "; `trainlint verify run SCRIPT` checks it" if unchecked == "no probe" and code in JUDGED else ""


def _step_notes(console: Console, report: dict[str, Any]) -> None:
    """Lines about the steps beyond the figures above: mode, gradient clearing, schedulers, events."""
    steps = report["steps"]
    notes = []
    if report.get("eval_mode_steps"):
        notes.append(f"[red]the model was in eval mode[/] at {len(report['eval_mode_steps'])} of {steps} optimizer steps")
    if never_cleared(report):
        notes.append("[red]gradients were never cleared[/]: no zero_grad() call, no .grad reset")
    if report.get("scheduler_steps_before_first_step"):
        notes.append(f"the LR scheduler stepped {plural(report['scheduler_steps_before_first_step'], 'time')} before the first optimizer step")
    if report.get("anomaly_steps"):
        notes.append(f"anomaly detection was on at {len(report['anomaly_steps'])} of {steps} steps")
    wait = report.get("data_wait")
    if wait:
        notes.append(f"waiting for the DataLoader: {wait['per_step_s'] * 1e3:.2f} ms per step ({wait['fraction']:.0%} of the step time)")
    for e in report.get("events") or []:
        if e["kind"] != "forward with autograd on":
            often = f"{e['per_step']:.3g} per step" if e["every_step"] else plural(e['count'], 'time')
            notes.append(_e(f"{relative_path(e['path'])}:{e['line']}  {e['kind']}  {often}"))
    if notes:
        console.print("\n[bold]During the steps[/]")
        for note in notes:
            console.print(f"  {note}")
