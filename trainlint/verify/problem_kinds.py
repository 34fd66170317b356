"""The problems `trainlint verify run` can report: each with a stable code (TLR...), a name and a
documentation page under `rules/run/`, and what a user may do about one that is deliberate
(acknowledge it: `# noqa: TLR103` on the line the problem names as its cause, `# trainlint: noqa:
TLR103` anywhere in the script, `verify-acknowledge = ["TLR103"]` in the configuration, or
`--acknowledge TLR103`). No torch here.

Regenerate the pages with `python -m trainlint.verify.problem_kinds`; a test fails when one is stale.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from trainlint.diagnostics import DOCS_BASE_URL

Report = dict[str, Any]
PAGES_DIR = Path(__file__).resolve().parents[2] / "rules" / "run"


@dataclass(frozen=True)
class ProblemKind:
    """One kind of problem: its code, name, what it means, why it matters, and the usual fixes."""

    code: str
    name: str
    invariant: str
    summary: str
    why: str
    fix: str

    @property
    def page(self) -> str:
        return f"{self.code}-{self.name}.md"

    @property
    def url(self) -> str:
        return f"{DOCS_BASE_URL}/run/{self.page}"


@dataclass(frozen=True)
class Problem:
    """One problem (or, with `information`, one deliberate pattern) seen in a run: its code, the
    sentence with its numbers, the script's line that caused it when known, and the step it began."""

    code: str
    message: str
    site: Report | None = None  # {"path", "line", "code"?}: the line that caused it
    step: int | None = None
    information: bool = False
    acknowledged: str | None = None  # how it was acknowledged: "comment at train.py:12", "setting"

    def to_dict(self) -> Report:
        kind = KIND_BY_CODE[self.code]
        return {
            "code": self.code, "name": kind.name, "message": self.message, "url": kind.url,
            "path": (self.site or {}).get("path"), "line": (self.site or {}).get("line"), "step": self.step,
            "acknowledged": self.acknowledged,
        }

    def __str__(self) -> str:
        return self.message


KINDS: tuple[ProblemKind, ...] = (
    ProblemKind(
        "TLR101", "parameters-frozen", "what trains",
        "Parameter tensors that received non-zero gradients but stayed unchanged over the run (half or more of their elements).",
        "The optimizer stepped and nothing moved. In bfloat16 or float16 with no float32 master copy, an update smaller than half "
        "the spacing of the weight's value rounds away: at 1.0 bfloat16's spacing is 2^-7, so an AdamW step of lr 1e-4 is lost "
        "on every weight of magnitude above about 0.03. The model looks like it trains (the loss falls through the other "
        "parameters) while these never learn. The report names the line that cast them.",
        "Keep the parameters in float32 and compute in low precision under `torch.autocast`, or keep a float32 master copy "
        "(mixed-precision optimizers); for an fp32 tensor, find why its update is zero (lr, masking).",
    ),
    ProblemKind(
        "TLR102", "gradients-reach-no-optimizer", "what trains",
        "Parameters that receive gradients although no optimizer that stepped holds them.",
        "They were built or replaced after the optimizer was created (a new classification head), or the optimizer was "
        "given another model's parameters: backward computes their gradients and nothing ever applies them.",
        "Build the optimizer after the model is final, or add the new parameters with `optimizer.add_param_group(...)`.",
    ),
    ProblemKind(
        "TLR103", "little-of-model-trains", "what trains",
        "Less than 25% of the model's parameter elements train, and the trainable part is neither the model's last layers "
        "(a linear probe, a new head) nor low-rank adapters beside frozen weights (LoRA). Those deliberate patterns are shown "
        "as information with this code.",
        "A name filter that freezes the wrong parameters (`if 'bn' not in name: p.requires_grad = False` leaves only the "
        "batch norms) makes a run that looks normal and stays near chance. The report names the line that set "
        "`requires_grad` to False.",
        "Fix the filter; if the freezing is intended, acknowledge the problem (see below).",
    ),
    ProblemKind(
        "TLR104", "steps-change-nothing", "updates happen",
        "A parameter group that no optimizer step changed: a learning rate of 0, no gradients at `step()` (cleared "
        "between backward and step, or an optimizer over parameters the loss does not reach), or a GradScaler that skipped "
        "every step.",
        "Every step costs a forward and a backward and the weights stay where they started.",
        "Call `zero_grad()` before `backward()` (or after `step()`), build the optimizer over the trained model's "
        "parameters, check the learning-rate schedule, and find the source of inf/NaN gradients.",
    ),
    ProblemKind(
        "TLR105", "update-ratio-out-of-range", "updates happen",
        "A parameter group whose median update-to-weight ratio ||dw|| / ||w|| per step is below half its dtype's relative "
        "resolution (updates round away) or above 1 (each step moves the weights by more than their norm).",
        "Healthy runs sit near 1e-4..1e-2 per step. Below the resolution the weights do not move; above 1 nothing learnt "
        "persists from one step to the next.",
        "Adjust the learning rate, or keep the weights in float32.",
    ),
    ProblemKind(
        "TLR106", "gradients-never-cleared", "gradients are cleared",
        "No `zero_grad()` and no `.grad` reset in two steps or more.",
        "Gradients accumulate across steps: each step applies the running sum of every gradient so far, and the "
        "effective step size grows with the step count.",
        "Call `optimizer.zero_grad()` once per step (or after every N micro-batches when accumulating on purpose).",
    ),
    ProblemKind(
        "TLR107", "scaler-skips-steps", "updates happen",
        "A GradScaler skipped most optimizer steps (inf/NaN gradients) after its scale settled.",
        "A few skipped steps at the start are how the scaler finds its scale; a run that keeps skipping trains on few of its "
        "batches, and `--steps N` counts only the steps that ran.",
        "Find the source of the non-finite gradients (fp16 overflow in a layer, a bad input), or train in bfloat16.",
    ),
    ProblemKind(
        "TLR108", "freeze-not-applied", "what trains",
        "The script's own configuration asks for a freeze (a setting named like `freeze_stages`, `frozen_stages`, "
        "`freeze_backbone` or `freeze_layers`, in a dict, an argparse or SimpleNamespace, a dataclass or a config object of "
        "the script, or a variable) and what it names trains: every parameter of the stages or modules it names (stage "
        "indices, a count of stages, module names, or the part the key names: `freeze_backbone`), or every parameter of the "
        "model when the names match none.",
        "A configuration read and never applied (the code that sets `requires_grad = False` from it is missing, misspelled, "
        "or behind a branch that never runs) makes a fine-tune that runs and reports losses while it rewrites the pretrained "
        "stages it was told to keep: the result overfits or forgets, and nothing in the log says so. The report names the "
        "line of the script that names the setting.",
        "Apply the freeze where the model is built, before the optimizer takes its parameters: `for p in "
        "model.stages[:2].parameters(): p.requires_grad = False` (or leave those parameters out of the optimizer).",
    ),
    ProblemKind(
        "TLR201", "loss-not-finite", "stability",
        "The loss was inf or NaN at some step.",
        "One non-finite loss poisons the gradients, then the weights (unless a GradScaler skips the step).",
        "Clip gradients, use a GradScaler with fp16, check the inputs and the loss's domain (log of 0).",
    ),
    ProblemKind(
        "TLR202", "gradient-not-finite", "stability",
        "The gradient norm was inf or NaN at some step (measured before clipping, with a GradScaler's scale taken out).",
        "A non-finite gradient applied by the optimizer makes the weights NaN for the rest of the run.",
        "Clip gradients (after `scaler.unscale_` under a GradScaler); find the layer that overflows.",
    ),
    ProblemKind(
        "TLR203", "parameters-not-finite", "stability",
        "Parameters hold inf or NaN at the end of the run.",
        "Every output of the model is now NaN; checkpoints saved from here are lost.",
        "Find the first non-finite loss or gradient (TLR201, TLR202) and its cause.",
    ),
    ProblemKind(
        "TLR204", "loss-diverged", "stability",
        "The loss ended the run 10 times or more above where it started.",
        "The optimizer is making the model worse: too high a learning rate, no warm-up, or a sign error.",
        "Lower the learning rate, add warm-up, clip gradients.",
    ),
    ProblemKind(
        "TLR205", "gradient-norm-spikes", "stability",
        "Steps whose gradient norm is 10 times or more the median of the 25 steps before them (or of 1% of the median of "
        "the run's first 8 norms, when that is larger) and 3 times or more the largest of them. No step is judged before 8 "
        "steps have a finite norm: the large gradients of a run's first steps, falling as it converges, are not spikes, nor "
        "is the noise of a converged run far below where it started, nor the heavy tail of small-batch norms.",
        "Spikes precede loss blow-ups (field reports 003 and 004); unclipped, one of them can wreck the weights.",
        "Clip the gradient norm; look at the batches of the spiking steps.",
    ),
    ProblemKind(
        "TLR301", "graph-kept-across-steps", "no graph kept",
        "A variable of the script (`total_loss`, `self.history`) whose autograd graph grows step after step.",
        "Each step's graph, with every activation it saved, stays alive: memory grows until an out-of-memory error "
        "(field report 004's OOM on batch 2).",
        "Accumulate `loss.item()` or `loss.detach()` rather than the loss; do not keep outputs that require grad.",
    ),
    ProblemKind(
        "TLR302", "saved-tensors-grow", "no graph kept",
        "The bytes of tensors saved for backward that stay alive grow with every step.",
        "Some graph outlives its step; memory grows until out-of-memory.",
        "Find the kept graph (TLR301 names it when a variable holds it); detach what is stored across steps.",
    ),
    ProblemKind(
        "TLR401", "loss-not-improving", "learning happens",
        "After 60 steps or more the loss shows no downward trend (one-sided Mann-Kendall test) and the 95% interval of Sen's "
        "slope rules out a fall of 2% of its level.",
        "Nothing learns: frozen weights, a learning rate of 0 or far too small, labels that do not match inputs.",
        "Check what trains (TLR103) and the update ratios (TLR105); overfit one batch first.",
    ),
    ProblemKind(
        "TLR402", "loss-at-chance", "learning happens",
        "A classification loss (cross-entropy or NLL over C classes) whose last third sits at log C or above with no downward "
        "trend over the second half: the model predicts no better than chance.",
        "The run spends its budget without learning anything about the labels.",
        "Check what trains, the labels, and the learning rate.",
    ),
    ProblemKind(
        "TLR501", "trained-in-eval-mode", "evaluation is deterministic",
        "Optimizer steps taken while the model was in eval mode.",
        "Dropout is off and BatchNorm uses running statistics: the model trains as a different network from the one "
        "evaluated, usually after an evaluation that did not switch back with `model.train()`.",
        "Call `model.train()` after each evaluation.",
    ),
    ProblemKind(
        "TLR502", "eval-not-deterministic", "evaluation is deterministic",
        "Dropout in training behaviour inside a module in eval mode (`F.dropout(h, p)` without `training=self.training`, "
        "SDPA's `dropout_p`): two evaluations of the same batch differ. Where the code asks for it (`training=True`, "
        "MC dropout) it is shown as information with this code.",
        "Validation numbers carry dropout noise, and inference differs from run to run.",
        "Pass `training=self.training` (or `dropout_p=self.p if self.training else 0.0`).",
    ),
    ProblemKind(
        "TLR503", "batchnorm-updates-in-eval", "evaluation is deterministic",
        "BatchNorm computes batch statistics and updates its running statistics while the model is in eval mode.",
        "Evaluation changes the model, and its numbers depend on the batch.",
        "Leave BatchNorm modules in eval mode with the model, or build them with `track_running_stats=False` on purpose.",
    ),
    ProblemKind(
        "TLR504", "evaluated-before-training-state", "evaluation is deterministic",
        "A module evaluated before any training-mode forward, when its eval behaviour depends on state that training-mode "
        "forwards build: the legacy `torch.nn.utils.spectral_norm`, whose power-iteration vectors are still at their random "
        "start.",
        "The first evaluation's weights are divided by a wrong spectral norm: its numbers are wrong, not just early. "
        "`torch.nn.utils.parametrizations.spectral_norm` runs 15 iterations at construction and is exempt, as is an "
        "evaluation after `load_state_dict` (which loads the vectors).",
        "Use `torch.nn.utils.parametrizations.spectral_norm`, or run a training-mode forward (or load a checkpoint) first.",
    ),
    ProblemKind(
        "TLR601", "ranks-diverge", "ranks agree",
        "Under `--nproc-per-node`, the parameters of some rank differ from rank 0's after a step.",
        "Replicas trained apart: no DDP wrapper, a rank-dependent update, or a model moved after wrapping. Each rank ends "
        "with another model and the checkpoint of rank 0 holds a fraction of the training.",
        "Wrap the model in DistributedDataParallel before training and do not move it afterwards.",
    ),
    ProblemKind(
        "TLR602", "gradients-not-averaged", "gradients are averaged",
        "Under `--nproc-per-node` and DistributedDataParallel, the ranks' gradients differ when the optimizer applies them.",
        "DDP's job is to all-reduce them: when it does not (the wrapped model moved to another device or dtype after "
        "wrapping, so its gradient buckets hold stale tensors; `no_sync()` left on; a comm hook that does not average), "
        "each rank trains on its own data alone and the replicas drift apart (TLR601 follows).",
        "Move the model to its device and dtype before wrapping it: `DDP(model.to(device, dtype))`; keep `no_sync()` to "
        "the micro-batches of gradient accumulation.",
    ),
    ProblemKind(
        "TLR701", "workers-share-random-state", "data workers draw different randomness",
        "A random generator owned by the dataset (`torch.Generator`, NumPy `Generator`/`RandomState`, `random.Random`) is "
        "copied into every DataLoader worker with the same state: every worker draws the same numbers.",
        "Every worker applies the same augmentations to its batches (and, without persistent workers, every epoch repeats "
        "them). torch's, Python's and NumPy's global generators are reseeded per worker since PyTorch 1.9: not a problem.",
        "Reseed the dataset's generator per worker in a `worker_init_fn` (from `torch.utils.data.get_worker_info().seed`), "
        "or draw from the global generators.",
    ),
)
KIND_BY_CODE = {k.code: k for k in KINDS}


def acknowledge(problems: Iterable[Problem], codes: Iterable[str], script: Path | None = None) -> list[Problem]:
    """`problems`, each marked acknowledged when `codes` (the setting and `--acknowledge`) hold its
    code, when its cause line carries `# noqa: CODE`, or when the script or the cause's file has
    `# trainlint: noqa: CODE` (the script's own applies to problems with no cause line too)."""
    from dataclasses import replace

    from trainlint.noqa import parse_suppressions

    wanted = {c.upper() for c in codes}
    parsed: dict[str, Any] = {}

    def comments(path: str) -> Any:
        if path not in parsed:
            parsed[path] = parse_suppressions(_read(path))
        return parsed[path]

    out = []
    for problem in problems:
        how = "setting" if problem.code in wanted else None
        path, line = (problem.site or {}).get("path"), (problem.site or {}).get("line")
        for where in ([path] if path else []) + ([str(script)] if script is not None else []):
            if how is None and problem.code in comments(where).file_codes:
                how = f"file comment in {relative_path(where)}"
        if how is None and path and isinstance(line, int) and comments(path).names(problem.code, line):
            how = f"comment at {relative_path(path)}:{line}"
        out.append(replace(problem, acknowledged=how) if how else problem)
    return out


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def relative_path(path: str) -> str:
    """`path` relative to the working directory when it lies below it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if relative.startswith("..") else relative


def unknown_codes(codes: Sequence[str]) -> list[str]:
    """The codes in `codes` that name no problem kind."""
    return [c for c in codes if c.upper() not in KIND_BY_CODE]


def render_page(kind: ProblemKind) -> str:
    """The problem's page: what it checks, why it matters, the fix, and how to acknowledge it."""
    return "\n".join([
        f"# {kind.code} {kind.name}",
        "",
        f"Reported by `trainlint verify run` · Invariant: **{kind.invariant}**",
        "",
        "## What it means",
        "",
        kind.summary,
        "",
        "## Why it matters",
        "",
        kind.why,
        "",
        "## Fix",
        "",
        kind.fix,
        "",
        "## When it is deliberate",
        "",
        f"Acknowledge it so that CI gates on the rest: `# noqa: {kind.code}` on the line the report names as the cause, "
        f"`# trainlint: noqa: {kind.code}` anywhere in the script, `verify-acknowledge = [\"{kind.code}\"]` under "
        f"`[tool.trainlint]`, or `--acknowledge {kind.code}`. An acknowledged problem is still shown, under "
        "\"Acknowledged\", and no longer makes the exit code 1.",
        "",
    ])


def render_index() -> str:
    rows = [f"| [{k.code}]({k.page}) | {k.name} | {k.invariant} |" for k in KINDS]
    return "\n".join([
        "# Problems `trainlint verify run` reports",
        "",
        "Each problem in a run's report (`--format json`: `problems[].code`) has a stable code and a page here; "
        "`trainlint rule TLR205` prints a page, `trainlint rules --run` lists them.",
        "",
        "| code | name | invariant |",
        "|---|---|---|",
        *rows,
        "",
    ])


def expected_pages() -> dict[str, str]:
    """File name -> content of every page under `rules/run/`."""
    return {"README.md": render_index(), **{k.page: render_page(k) for k in KINDS}}


if __name__ == "__main__":  # regenerate rules/run/: python -m trainlint.verify.problem_kinds
    PAGES_DIR.mkdir(parents=True, exist_ok=True)
    for stale in PAGES_DIR.glob("*.md"):
        stale.unlink()
    for name, text in expected_pages().items():
        (PAGES_DIR / name).write_text(text, encoding="utf-8")
    sys.exit(0)
