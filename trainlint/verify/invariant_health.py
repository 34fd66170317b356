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

from typing import Any, Sequence

from trainlint.report.text import plural
from trainlint.verify.problem_kinds import Problem, relative_path

Report = dict[str, Any]
SMALL_SHARE = 0.25  # a model of which less than this share trains, in no deliberate pattern, is a problem
LOW_PRECISION = ("bfloat16", "float16")
UNCHANGED_FROZEN = 0.5  # health.FROZEN: a tracked tensor with this share of its elements unchanged
REASON_ORDER = ("update below resolution", "no update applied", "gradient always zero", "not in an optimizer", "no gradient", "requires_grad=False")


def invariant_problems(report: Report) -> list[Problem]:
    """Problems of what trains, evaluation behaviour, state only training builds and the data
    workers' randomness (empty when all hold)."""
    return (_what_trains(report, problems=True) + _freeze_not_applied(report) + _evaluation(report, problems=True)
            + _before_training(report) + _data_workers(report))


def invariant_information(report: Report) -> list[Problem]:
    """Information: deliberate freezing patterns, unused parameters, MC dropout."""
    return _what_trains(report, problems=False) + _evaluation(report, problems=False)


def _what_trains(report: Report, problems: bool) -> list[Problem]:
    trains = report.get("what_trains")
    if not trains or not trains.get("total"):
        return []
    rows = trains.get("parameters") or []
    total, trained = trains["total"], trains["trained"]
    by_status = trains.get("by_status") or {}
    lines: list[Problem] = []
    info = not problems
    orphans = [r for r in rows if r["status"] == "not in an optimizer" and r.get("gradient")]
    if orphans and problems:
        elements = sum(r["numel"] for r in orphans)
        lines.append(Problem(
            "TLR102",
            f"what trains: {plural(len(orphans), 'parameter tensor')} ({elements:,} elements, {elements / total:.1%} of the model) receive gradients "
            f"but no optimizer that stepped holds them, from step 1: {_names(orphans)} (built or replaced after the optimizer, or the "
            "optimizer was given other parameters)", step=1,
        ))
    share = trained / total
    small = share < SMALL_SHARE and trains.get("pattern") is None
    if small and problems:
        types = ", ".join(f"{name} x{n}" for name, n in (trains.get("trainable_module_types") or {}).items())
        kinds = f", in {types}" if types else ""
        lines.append(Problem(
            "TLR103",
            f"what trains: only {share:.1%} of the parameters train ({trained:,} of {total:,} elements{kinds}) from step "
            f"{trains.get('first_step', 1)}; {_not_training(by_status, total)}{_freeze_cause(trains)}; "
            f"{trains.get('pattern_detail', '')}", _freeze_site(trains), trains.get("first_step", 1),
        ))
    if not problems and not small and trains.get("pattern") in ("head", "low-rank adapters") and share < 1:
        what = "the model's last layers" if trains["pattern"] == "head" else "low-rank adapters beside frozen weights"
        lines.append(Problem(
            "TLR103", f"what trains: {share:.1%} of the parameters train ({trained:,} of {total:,} elements): {what}, a deliberate pattern{_freeze_cause(trains)}",
            _freeze_site(trains), information=info,
        ))
    unused = [r for r in rows if r["status"] == "no gradient"]
    if unused and not problems and not small:
        elements = sum(r["numel"] for r in unused)
        lines.append(Problem(
            "TLR102",
            f"what trains: {plural(len(unused), 'trainable tensor')} ({elements:,} elements) in an optimizer received no gradient in "
            f"{report.get('steps', 0)} steps (unused in the graph): {_names(unused)}", information=info,
        ))
    return lines


# containers of a model's numbered stages: `stages.0`, `layers.1`, `blocks.2`, `layer1`...
STAGE_CONTAINERS = ("stages", "stage", "layers", "layer", "blocks", "block", "h", "levels", "features", "encoder", "backbone")


def _freeze_not_applied(report: Report) -> list[Problem]:
    """The script's configuration asks for a freeze (`freeze_stages = [0, 1]`, `freeze_backbone =
    True`) and what it names trains: every parameter it names when the names resolve to parameters,
    every parameter of the model when they do not (`freeze = True`, a count no stage matches)."""
    trains = report.get("what_trains") or {}
    rows = trains.get("parameters") or []
    if not rows:
        return []
    found = []
    for setting in trains.get("freeze_config") or []:
        named = _named_by(setting, rows)
        if named:
            if any(r["status"] != "trains" for r in named):
                continue  # some of it is frozen (or left out of the optimizer): applied
            tensors, elements = len(named), sum(r["numel"] for r in named)
            what = f"it names {_names(named)} ({plural(tensors, 'tensor')}, {elements:,} elements) and all of them train"
        elif trains.get("froze_any") or any(r["status"] != "trains" for r in rows):
            continue  # something is frozen; what the setting means is not ours to guess
        else:
            what = f"yet every parameter trains ({trains['total']:,} elements, none with requires_grad=False, all updated by the optimizer)"
        found.append(Problem(
            "TLR108",
            f"freeze not applied: the script's configuration says `{setting['setting']} = {_value(setting['value'])}`, {what}, over "
            f"{report.get('steps', 0)} steps: no line sets their requires_grad to False (nor leaves them out of the optimizer); apply the "
            "freeze where the model is built, before the optimizer takes its parameters",
            {k: setting[k] for k in ("path", "line", "code") if k in setting} or None, 1,
        ))
    return found


def _named_by(setting: Report, rows: Sequence[Report]) -> list[Report]:
    """The parameter rows a freeze setting names: module names (`"backbone"`, `["stem", "stages.0"]`),
    stage indices (`[0, 1]`: `stages.0`, `stages.1`), a count (`2`: stages 0 and 1), or `True` on a key
    that names the part (`freeze_backbone`)."""
    value, key = setting["value"], setting["key"].lower()
    values = value if isinstance(value, list) else [value]
    if value is True:
        part = key.replace("frozen", "freeze").split("freeze", 1)[-1].strip("_")
        values = [part] if part else []
    elif isinstance(value, int):
        values = list(range(value))
    named: list[Report] = []
    for item in values:
        if isinstance(item, str):
            wanted = [c for c in item.strip(".").split(".") if c]
            named += [r for r in rows if _contains(r["name"].split("."), wanted)]
        else:
            named += [r for r in rows if _in_stage(r["name"].split("."), item)]
    unique = {r["name"]: r for r in named}
    return list(unique.values())


def _contains(parts: Sequence[str], wanted: Sequence[str]) -> bool:
    n = len(wanted)
    return bool(n) and any(list(parts[i:i + n]) == list(wanted) for i in range(len(parts) - n + 1))


def _in_stage(parts: Sequence[str], index: int) -> bool:
    """`stages.1.conv.weight` is in stage 1; so is `layer1.0.weight` (ResNet's naming, 1-based)."""
    for i, part in enumerate(parts[:-1]):
        if part in STAGE_CONTAINERS and parts[i + 1] == str(index):
            return True
        if part.rstrip("0123456789") in ("layer", "stage") and part[len(part.rstrip("0123456789")):] == str(index + 1):
            return True
    return False


def _value(value: Any) -> str:
    text = repr(value) if not isinstance(value, bool) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _not_training(by_status: Report, total: int) -> str:
    parts = [f"{n / total:.1%} {status}" for status, n in by_status.items() if status != "trains" and n]
    return ", ".join(parts) if parts else "none frozen"


def _freeze_site(trains: Report) -> Report | None:
    sites = trains.get("freeze_sites") or []
    return sites[0] if sites else None


def _freeze_cause(trains: Report) -> str:
    sites = trains.get("freeze_sites") or []
    if not sites:
        return ""
    site = sites[0]
    more = f" (and {plural(len(sites) - 1, 'other line')})" if len(sites) > 1 else ""
    return f", requires_grad set to False at {where(site)} for {plural(site['tensors'], 'tensor')}{more}"


def _names(rows: Sequence[Report], limit: int = 3) -> str:
    shown = ", ".join(r["name"] for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def where(site: Report) -> str:
    """`train.py:41 (`p.requires_grad = False`)`: a site, relative to the working directory."""
    path = relative_path(site["path"])
    code = f" (`{site['code']}`)" if site.get("code") else ""
    return f"{path}:{site['line']}{code}"


def _evaluation(report: Report, problems: bool) -> list[Problem]:
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
            lines.append(Problem(
                "TLR503" if site["kind"] == "batch norm" else "TLR502",
                f"evaluation: `{site['function']}` in `{site['module']}` runs in training behaviour on purpose ({how}, e.g. MC dropout) at {where(site)}",
                site, information=True,
            ))
            continue
        if site["kind"] == "batch norm":
            what = (f"BatchNorm running statistics change in eval: `{site['module']}` ({site['module_type']}) computes batch statistics and "
                    "updates its running statistics although the model is in eval mode")
        elif site["kind"] == "attention dropout":
            what = f"evaluation is not deterministic: `scaled_dot_product_attention` applies dropout_p > 0 inside eval-mode `{site['module']}`"
        else:
            kind = f" ({site['module_type']})" if site["module_type"] != site["module"] else ""
            what = f"evaluation is not deterministic: `{site['function']}` runs in training behaviour inside eval-mode `{site['module']}`{kind}"
        if site.get("replayed"):  # found by the verifier's own evaluation at the end of the run
            source = (f"found by evaluating `{site['module']}` after step {site['after_step']} as an evaluation runs it (`model.eval()`, "
                      "two forwards of its last training batch under `torch.no_grad()`)")
            lines.append(Problem(
                "TLR502" if site["kind"] != "batch norm" else "TLR503",
                f"{what}, at {where(site)}: {source}{_measured(site.get('measured') or {}, site['kind'])}{_fix(site)}",
                site, site["after_step"] or None,
            ))
            continue
        lines.append(Problem(
            "TLR503" if site["kind"] == "batch norm" else "TLR502",
            f"{what}{switched}, at {where(site)}: {plural(site['count'], 'call')} from the evaluation {when}{_measured(measured, site['kind'])}{_fix(site)}",
            site, site["after_step"] or None,
        ))
    return lines


def _measured(measured: Report, kind: str) -> str:
    if not measured or measured.get("error"):
        return ""
    parts = []
    if measured.get("max_abs_diff"):
        parts.append(f"two forwards of the same batch differ by up to {measured['max_abs_diff']:.3g} ({measured['max_rel_diff']:.0%} of the largest output)")
    if measured.get("buffers_changed"):
        parts.append(f"{plural(len(measured['buffers_changed']), 'buffer')} changed by two forwards ({', '.join(measured['buffers_changed'][:2])})")
    return "; " + "; ".join(parts) if parts else ""


def _fix(site: Report) -> str:
    if site["kind"] == "dropout" and not site.get("module_training"):
        return "; pass `training=self.training`"
    if site["kind"] == "attention dropout":
        return "; pass `dropout_p=self.p if self.training else 0.0`"
    return ""


def _before_training(report: Report) -> list[Problem]:
    groups: dict[tuple[Any, ...], list[Report]] = {}
    for row in report.get("evaluated_before_training") or []:
        applied = row.get("applied_at") or {}
        groups.setdefault((applied.get("path"), applied.get("line"), row.get("after_step")), []).append(row)
    lines = []
    for rows in groups.values():
        row, applied = rows[0], rows[0].get("applied_at") or {}
        modules = ", ".join(f"`{r['module']}`" for r in rows[:4]) + (f" and {len(rows) - 4} more" if len(rows) > 4 else "")
        types = ", ".join(sorted({r["module_type"] for r in rows}))
        switch = f", switched to eval at {where(row['eval_switch'])}" if row.get("eval_switch") else ""
        when = f"after step {row['after_step']}" if row.get("after_step") else "before the first step"
        measured = [r for r in rows if r.get("sigma_true")]
        figures = ""
        if measured:
            worst = max(measured, key=lambda r: abs(abs(r["sigma_used"]) / r["sigma_true"] - 1))
            figures = (f"; the weight of `{worst['module']}` is divided by u^T W v = {worst['sigma_used']:.3g} instead of its largest "
                       f"singular value {worst['sigma_true']:.3g}")
        applied_text = f" applied at {where(applied)}" if applied.get("path") else ""
        lines.append(Problem(
            "TLR504",
            f"evaluated before training: {modules} ({types}) carry the legacy `spectral_norm`{applied_text} and ran in eval mode{switch} "
            f"{when}, before any training-mode forward or `load_state_dict`: their power-iteration vectors are still at their random start"
            f"{figures}; use `torch.nn.utils.parametrizations.spectral_norm`", applied if applied.get("path") else row.get("called_at"),
            row.get("after_step") or None,
        ))
    return lines


def _data_workers(report: Report) -> list[Problem]:
    lines = []
    for loader in report.get("data_workers") or []:
        built = f" built at {where(loader['built_at'])}" if loader.get("built_at") else ""
        seeded = (f"its worker_init_fn `{loader['worker_init_fn']}` does not reseed it" if loader.get("worker_init_fn")
                  else "no worker_init_fn reseeds it")
        for generator in loader.get("generators") or []:
            epochs = generator["epochs_alike"]
            repeats = (f"; and each epoch starts it from the same state ({generator['repeats_every_epoch']} epochs: the same draws every epoch)"
                       if generator.get("repeats_every_epoch") else "")
            lines.append(Problem(
                "TLR701",
                f"data workers: `{generator['attribute']}` ({generator['type']}) of the {loader['dataset']} in the DataLoader{built} is copied into its "
                f"{generator['workers']} workers with the same state and draws the same numbers in each (epoch {', '.join(map(str, epochs[:3]))}): "
                f"{seeded}{repeats}; reseed it per worker from `torch.utils.data.get_worker_info().seed` in a worker_init_fn",
                loader.get("built_at"),
            ))
    return lines


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
