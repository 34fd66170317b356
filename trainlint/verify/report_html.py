"""`trainlint verify run --html FILE`: the run on one self-contained page (inline SVG charts and CSS,
no script, nothing fetched; each problem's code links to its page and its cause to the file): the per-step series, frozen parameters, sync sites by line, graphs
kept across steps, and each static finding with its verdict."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Sequence

from trainlint.report.text import plural, visible, visible_lines
from trainlint.verify.invariant_health import SMALL_SHARE, unchanged_parameters
from trainlint.verify.update_health import RESOLUTION
from trainlint.verify.problem_kinds import KIND_BY_CODE, Problem
from trainlint.verify.health import (
    clipping_line, format_bytes, format_value, information, rank_lines, steps_taken, relative_path, run_series, script_failed,
)

Report = dict[str, Any]


def escape(text: str) -> str:
    """Text for the page: HTML-escaped, with control characters and bidirectional overrides (from
    the script's names, paths and errors) shown as escapes, as in the terminal."""
    return html.escape(visible(text))

CHART_W, CHART_H, PAD_L, PAD_B, PAD_T = 640, 190, 70, 34, 12
VERDICT_CLASS = {"confirmed": "bad", "not confirmed": "good", "cannot check here": "warn"}
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1000px; color: #1d2330; background: #fff; }
h1 { font-size: 20px; margin-bottom: 4px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #dde; padding-bottom: 4px; }
.meta { color: #556; } .bad { color: #b3261e; } .good { color: #1b7a3a; } .warn { color: #9a6700; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: 3px 10px 3px 0; vertical-align: top; }
th { border-bottom: 1px solid #ccd; } td.num, th.num { text-align: right; } code { font-size: 13px; }
.problems li { color: #b3261e; margin: 3px 0; } .chart { margin: 8px 0 18px; } .chart h3 { font-size: 14px; margin: 0 0 2px; }
.badge { display: inline-block; padding: 0 6px; border-radius: 3px; font-size: 12px; border: 1px solid currentColor; }
.none { color: #778; }
.share { height: 10px; background: #d9dbe3; border-radius: 3px; overflow: hidden; margin: 4px 0 10px; }
.share span { display: block; height: 100%; background: #1b7a3a; }
"""


def render_html(report: Report, rows: Sequence[Report], problems: Sequence[Problem]) -> str:
    """The whole page as one string."""
    if report.get("partial"):  # the run ended before its report: the steps' times, and nothing measured to show
        parts = [_header(report, problems), _series(report), _findings(rows)]
    else:
        parts = [_header(report, problems), *_ranks(report), _what_trains(report), _series(report), _frozen(report), _syncs(report), _graphs(report), _findings(rows)]
    body = "\n".join(p for p in parts if p)
    title = f"trainlint verify run: {report.get('script', '')}"
    return (
        f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
        f"<style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _header(report: Report, problems: Sequence[Problem]) -> str:
    steps = report.get("steps") or 0
    took = f", {report['duration_s']:.1f} s" if isinstance(report.get("duration_s"), (int, float)) else ""
    out = [
        f"<h1>{escape(relative_path(str(report.get('script', ''))))}</h1>",
        f"<p class=\"meta\">{escape(steps_taken(report))} on {escape(str(report.get('device', '?')))}{took}: {escape(str(report.get('message', '')))}</p>",
    ]
    failure = script_failed(report) if report.get("stopped") != "internal-error" else f"{report.get('message')}: {report.get('error')}"
    if failure:
        # a DataLoader worker's error carries the worker's traceback: kept as lines, below the first
        first, *rest = visible_lines(failure)
        out.append(f"<p class=\"bad\">{html.escape(first)}</p>")
        if rest:
            out.append(f"<pre class=\"bad\">{html.escape(chr(10).join(rest))}</pre>")
    open_problems = [p for p in problems if not p.acknowledged]
    for title, css, shown in (("Problems", " class=\"problems\"", open_problems), ("Acknowledged", "", [p for p in problems if p.acknowledged]),
                              ("Information", "", information(report))):
        if shown:
            out.append(f"<h2>{title}</h2><ul{css}>" + "".join(_problem_item(p) for p in shown) + "</ul>")
    if not open_problems and steps and report.get("stopped") != "internal-error" and not report.get("partial"):
        scope = f"the {plural(steps, 'step')} before the run failed" if failure else "this run"
        acknowledged = f" apart from {len(problems) - len(open_problems)} acknowledged" if len(problems) > len(open_problems) else ""
        out.append(f"<p class=\"good\">No training-health problem in {scope}{acknowledged}.</p>")
    return "\n".join(out)


def _problem_item(problem: Problem) -> str:
    """A problem: its code linked to its page, the message, and the line that caused it linked to its
    file (links only: the page still loads nothing)."""
    kind = KIND_BY_CODE[problem.code]
    note = f" <span class=\"meta\">(acknowledged: {escape(problem.acknowledged)})</span>" if problem.acknowledged else ""
    code = f"<a href=\"{escape(kind.url)}\" title=\"rules/run/{escape(kind.page)}\"><code>{problem.code}</code></a>"
    return f"<li>{code} {escape(problem.message)}{_cause_link(problem.site)}{note}</li>"


def _cause_link(site: Report | None) -> str:
    """" (cause: <a href=file:///.../train.py>train.py:41</a>)" for a problem's cause line, or ""."""
    path, line = (site or {}).get("path"), (site or {}).get("line")
    if not path:
        return ""
    try:
        uri = Path(path).resolve().as_uri()
    except ValueError:  # not a path a URI can name
        return ""
    label = f"{relative_path(str(path))}:{line}" if line else relative_path(str(path))
    return f" <span class=\"meta\">(cause: <a href=\"{escape(uri)}\"><code>{escape(label)}</code></a>)</span>"


def _series(report: Report) -> str:
    charts = []
    limit = _clip_limit(report)
    for row in run_series(report):
        guide = limit if row["label"] == "grad norm" else None
        charts.append(_chart(row["label"], line_chart(row["values"], row["unit"], row["marks"], guide)))
    scale = report.get("loss_scale") or {}
    if scale.get("values"):
        charts.append(_chart("loss scale (GradScaler)", line_chart(scale["values"], "", [])))
    for g in ((report.get("updates") or {}).get("groups") or [])[:3]:
        ratios = g.get("ratio_per_step") or []
        if any(r is not None for r in ratios):
            floor = RESOLUTION.get(g["dtype"], 0.0) / 2 if g["dtype"] in ("bfloat16", "float16") else None
            label = f"update-to-weight ratio per step: {g['optimizer']} group {g['group']} ({g['dtype']})"
            charts.append(_chart(label, line_chart(ratios, "", [], floor, f"{g['dtype']} resolution / 2")))
    if not charts:
        return ""
    lowered = f"the GradScaler lowered its scale {plural(scale.get('decreases', 0), 'time')} for inf/NaN gradients" if scale.get("values") else None
    notes = [line for line in (clipping_line(report), lowered) if line]
    return "<h2>Per step</h2>" + "".join(charts) + "".join(f"<p class=\"meta\">{escape(n)}</p>" for n in notes)


def _chart(title: str, svg: str) -> str:
    return f"<div class=\"chart\"><h3>{escape(title)}</h3>{svg}</div>"


def _what_trains(report: Report) -> str:
    """The share of the model's parameter elements that trains, as a bar, and by module."""
    trains = report.get("what_trains") or {}
    if not trains.get("total"):
        return ""
    total, share = trains["total"], trains.get("share_trained", trains.get("trained", 0) / trains["total"])
    pattern = {"head": ": the model's last layers", "low-rank adapters": ": low-rank adapters beside frozen weights"}.get(trains.get("pattern") or "", "")
    bad = share < SMALL_SHARE and trains.get("pattern") is None
    out = [
        "<h2>What trains</h2>",
        f"<p><span class=\"{'bad' if bad else ''}\">{share:.1%}</span> of {total:,} parameter elements ({trains.get('tensors', '?')} tensors) train{escape(pattern)}</p>",
        f"<div class=\"share\"><span style=\"width:{share * 100:.1f}%\"></span></div>",
    ]
    statuses = [s for s in ("trains", "requires_grad=False", "not in an optimizer", "no gradient") if (trains.get("by_status") or {}).get(s)]
    modules = trains.get("modules") or []
    if share < 1 and modules:
        rows = [[f"<code>{escape(m['path'])}</code>", f"{m['total']:,}", *(f"{m.get(s, 0) / m['total']:.0%}" if m["total"] else "" for s in statuses)]
                for m in modules[:20]]
        out.append(_table(["module", "elements", *map(escape, statuses)], rows, numeric=tuple(range(1, 2 + len(statuses)))))
    for site in (trains.get("freeze_sites") or [])[:3]:
        out.append(f"<p class=\"meta\">requires_grad=False set at <code>{escape(relative_path(site['path']))}:{site['line']}</code> "
                   f"{escape(site.get('code', ''))} for {plural(site['tensors'], 'tensor')}, {site['elements']:,} elements</p>")
    return "".join(out)


def _clip_limit(report: Report) -> float | None:
    sites = (report.get("clipping") or {}).get("sites") or []
    try:
        return float(sites[0]["limit"]) if sites and sites[0]["kind"] == "norm" else None
    except (TypeError, ValueError):
        return None


def line_chart(values: Sequence[float | None], unit: str, marks: Sequence[Report], guide: float | None = None, guide_label: str = "clip") -> str:
    """An inline SVG line chart of `values` (step 1..N) with labelled ticks on both axes, red markers
    at `marks` and a dashed horizontal `guide` (the clip limit, a resolution floor)."""
    points = [(i + 1, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    if not points:
        return "<p class=\"none\">no finite value</p>"
    shown = [v for _, v in points] + ([guide] if guide is not None else [])
    low, high = min(shown), max(shown)
    # a spike 1000x the rest would flatten everything else: positive series that wide get a log scale
    logarithmic = low > 0 and high / low > 100
    scale = math.log10 if logarithmic else float
    span = (scale(high) - scale(low)) or 1.0
    n = max(len(values), 2)
    width, height = CHART_W - PAD_L - 8, CHART_H - PAD_B - PAD_T

    def x(step: float) -> float:
        return PAD_L + (step - 1) / (n - 1) * width

    def y(value: float) -> float:
        return PAD_T + (1 - (scale(value) - scale(low)) / span) * height

    path = " ".join(f"{'M' if i == 0 else 'L'}{x(s):.1f},{y(v):.1f}" for i, (s, v) in enumerate(points))
    svg = [
        f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{CHART_W}\" height=\"{CHART_H}\" role=\"img\">",
        f"<rect x=\"{PAD_L}\" y=\"{PAD_T}\" width=\"{width}\" height=\"{height}\" fill=\"#f7f8fb\" stroke=\"#dde\"/>",
    ]
    for tick in ticks(low, high, logarithmic) if high > low else [low]:
        ty = y(tick) if high > low else PAD_T + height / 2
        svg.append(
            f"<line x1=\"{PAD_L}\" x2=\"{PAD_L + width}\" y1=\"{ty:.1f}\" y2=\"{ty:.1f}\" stroke=\"#e4e6ee\"/>"
            f"<text x=\"{PAD_L - 6}\" y=\"{ty + 4:.1f}\" text-anchor=\"end\" font-size=\"11\">{escape(format_value(tick, unit))}</text>"
        )
    for step in (int(t) for t in ticks(1, len(values), False) if t == int(t)) if len(values) > 1 else [1]:
        svg.append(
            f"<line x1=\"{x(step):.1f}\" x2=\"{x(step):.1f}\" y1=\"{PAD_T + height}\" y2=\"{PAD_T + height + 4}\" stroke=\"#99a\"/>"
            f"<text x=\"{x(step):.1f}\" y=\"{PAD_T + height + 16}\" text-anchor=\"middle\" font-size=\"11\">{step}</text>"
        )
    # the steps run on a linear axis; only the values may be on a log one, and the value axis says so
    svg.append(f"<text x=\"{PAD_L + width / 2:.0f}\" y=\"{CHART_H - 3}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#556\">step</text>")
    if logarithmic:
        middle = PAD_T + height / 2
        svg.append(f"<text x=\"12\" y=\"{middle:.0f}\" transform=\"rotate(-90 12 {middle:.0f})\" text-anchor=\"middle\" font-size=\"11\" "
                   "fill=\"#556\">log scale</text>")
    if guide is not None:
        svg.append(
            f"<line x1=\"{PAD_L}\" x2=\"{PAD_L + width}\" y1=\"{y(guide):.1f}\" y2=\"{y(guide):.1f}\" stroke=\"#9a6700\" stroke-dasharray=\"5,4\"/>"
            f"<text x=\"{PAD_L + width - 4}\" y=\"{y(guide) - 4:.1f}\" text-anchor=\"end\" font-size=\"11\" fill=\"#9a6700\">{escape(guide_label)} {guide:.3g}</text>"
        )
    for mark in marks:
        mx = x(mark["step"])
        # a label near the right edge is written leftwards from its marker, so that it is not clipped
        anchor, tx = ("end", mx - 4) if mx > PAD_L + 0.6 * width else ("start", mx + 4)
        svg.append(
            f"<line x1=\"{mx:.1f}\" x2=\"{mx:.1f}\" y1=\"{PAD_T}\" y2=\"{PAD_T + height}\" stroke=\"#b3261e\" stroke-width=\"1.5\"/>"
            f"<text x=\"{tx:.1f}\" y=\"{PAD_T + 12}\" text-anchor=\"{anchor}\" font-size=\"11\" fill=\"#b3261e\">{escape(mark['text'])}</text>"
        )
    svg.append(f"<path d=\"{path}\" fill=\"none\" stroke=\"#2f5fb3\" stroke-width=\"1.6\"/>")
    if len(points) == 1:
        svg.append(f"<circle cx=\"{x(points[0][0]):.1f}\" cy=\"{y(points[0][1]):.1f}\" r=\"3\" fill=\"#2f5fb3\"/>")
    svg.append("</svg>")
    return "".join(svg)


def ticks(low: float, high: float, logarithmic: bool, count: int = 4) -> list[float]:
    """About `count` round values from `low` to `high`: 1, 2, 2.5 or 5 times a power of ten apart, or
    the powers of ten between them on a log scale."""
    if high <= low:
        return [low]
    if logarithmic:
        first, last = math.ceil(math.log10(low)), math.floor(math.log10(high))
        every = max(1, (last - first) // count + 1)
        return [10.0**e for e in range(first, last + 1, every)] or [low, high]
    raw = (high - low) / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    tick, out = math.ceil(low / step) * step, []
    while tick <= high + step * 1e-9:
        out.append(round(tick, 12))
        tick += step
    return out


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table of already-escaped cells; columns in `numeric` are right-aligned."""
    right = ' class="num"'
    head = "".join(f"<th{right if i in numeric else ''}>{h}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td{right if i in numeric else ''}>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _frozen(report: Report) -> str:
    unchanged = unchanged_parameters(report)
    title = f"<h2>Frozen parameters</h2><p class=\"meta\">every parameter unchanged after {report.get('steps', 0)} steps, with the reason</p>"
    if not unchanged:
        tensors = (report.get("what_trains") or {}).get("tensors") or report.get("tensors_checked", 0)
        return title + f"<p class=\"none\">none of {tensors} tensors</p>"
    rows = []
    for r in unchanged:
        site = r.get("cast_at") or r.get("frozen_at")
        bad = r["reason"] in ("update below resolution", "no update applied")
        rows.append([
            f"<code>{escape(r['name'])}</code>", escape(r["dtype"]), f"{r['numel']:,}", f"{r['unchanged_fraction']:.0%}",
            f"<span class=\"{'bad' if bad else ''}\">{escape(r['reason'])}</span>",
            escape(f"{relative_path(site['path'])}:{site['line']} {site['code']}") if site else "",
        ])
    # the cause is said once, in the problem (TLR101) and the table's last column
    return title + _table(["parameter", "dtype", "elements", "unchanged", "reason", "cast or frozen at"], rows, numeric=(2, 3))


def _syncs(report: Report) -> str:
    syncs = report.get("syncs") or []
    if not syncs:
        return "<h2>Host-device syncs</h2><p class=\"none\">none called by the script</p>"
    rows = [
        [f"<code>{escape(relative_path(s['path']))}:{s['line']}</code>", escape(s["kind"]),
         f"<span class=\"{'bad' if s['every_step'] else ''}\">{s['per_step']:.3g}</span>", f"{s['steps_seen']} of {s['steps_measured']}"]
        for s in syncs
    ]
    note = "<p class=\"meta\">on the CPU these are value reads that sync when the tensor lives on a GPU</p>" if report.get("device") == "cpu" else ""
    return "<h2>Host-device syncs, by line</h2>" + _table(["line", "kind", "per step", "steps seen"], rows, numeric=(2,)) + note


def _graphs(report: Report) -> str:
    graphs = report.get("graphs") or []
    saved = report.get("saved_bytes") or {}
    values = saved.get("values") or [0]
    tail = f"<p class=\"meta\">tensors saved for backward, alive at step end: {format_bytes(values[0])} after step 1, {format_bytes(values[-1])} after step {len(values)}</p>"
    if not graphs:
        return "<h2>Autograd graphs kept across steps</h2><p class=\"none\">none</p>" + tail
    rows = [
        [f"<code>{escape(g['name'])}</code>", f"+{g['growth_per_step']:.0f}", f"{g['nodes'][0]} → {g['nodes'][-1]}",
         format_bytes(g["saved_bytes_at_end"]) if g.get("saved_bytes_at_end") else ""]
        for g in graphs
    ]
    return "<h2>Autograd graphs kept across steps</h2>" + _table(["variable", "nodes per step", "nodes", "saved for backward"], rows, numeric=(1,)) + tail


def _findings(rows: Sequence[Report]) -> str:
    if not rows:
        return "<h2>Static findings</h2><p class=\"none\">none in this script</p>"
    cells = []
    for r in rows:
        verdict = r.get("verification") or {}
        status = str(verdict.get("status", "no runtime check"))
        cells.append([
            f"<code>{escape(relative_path(str(r['path'])))}:{r['line']}</code>", f"<b>{escape(str(r['code']))}</b>", escape(str(r["message"])),
            f"<span class=\"badge {VERDICT_CLASS.get(status, '')}\">{escape(status)}</span> {escape(str(verdict.get('summary', '')))}",
        ])
    return "<h2>Static findings, judged by this run</h2>" + _table(["where", "rule", "finding", "verdict"], cells)


def _ranks(report: Report) -> list[str]:
    """One section for a multi-process run: each rank's state and whether their parameters agree."""
    lines = rank_lines(report)
    if not lines:
        return []
    items = "".join(f"<li class=\"{'bad' if 'DIVERGE' in line else ''}\">{escape(line)}</li>" for line in lines)
    return [f"<h2>Ranks</h2><p class=\"meta\">{report.get('world_size')} processes under torchrun; the sections below are rank 0's</p><ul>{items}</ul>"]
