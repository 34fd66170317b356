"""The lists of names the analysis still reads (DESIGN.md, "Values, not names"): what each stands in
for and the rules whose findings it changes. Each only silences a finding, never makes one: a name
can say that code is a logging branch or a scheduler, but what trains, what steps and what runs every
step is known from what the code does. A rule's page names the lists that affect it
(`rules/catalogue.py`), and a test holds this registry to the code: every list of guessed words
(`*_WORDS`, `*_VERBS`) is here, and emptying any of them takes no finding away.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_STEP = ("TL301", "TL302", "TL304", "TL401", "TL402", "TL403", "TL406")  # the rules that ask "every step?"


@dataclass(frozen=True)
class NameList:
    """One list of names and what reading it as a fact does."""

    where: str  # "model.gates.GATE_WORDS": its module under trainlint/ and its name
    stands_for: str
    rules: tuple[str, ...]


NAME_LISTS: tuple[NameList, ...] = (
    NameList("model.gates.GATE_WORDS", "flags that gate periodic work (`if do_log:`, and the words' -ing forms: `if counter.needs_displaying():`) and an episode's end (`if player.done:`, once per episode of a rollout): code under them is not every step, while code under one negated (`if not cross_valid:`) runs on the other steps, every training step", PER_STEP),
    NameList("model.gates.DIAGNOSTIC_LEVEL_WORDS", "debugging and verbosity levels, so that `if opt.debug > 0:` gates what it shows as `if debug:` does (other settings compared with a number gate nothing)", PER_STEP),
    NameList("model.gates.COUNTER_WORDS", "step counters, so that `if it % n == 0` is read as a gate", PER_STEP),
    NameList("model.gates.STEP_COUNTER_WORDS", "step counters, so that an early `if step != capture_step: return` leaves the rest to one step", PER_STEP),
    # (it narrows the silence of the other lists: a rank test's name keeps `last` in `pp_is_last_stage`
    # from reading as a gate word; emptied, that name silences again, as before the list was read)
    NameList("model.gates.RANK_WORDS", "process ranks and pipeline stages: a test of which process runs the code (`if rank == 0:`, `if is_main_process():`, `if pgm.pp_is_last_stage:`) holds on every step of that rank, so it is no gate, and no counter (`if world_size == 1:`)", PER_STEP),
    NameList("model.gates.TRAINING_FLAG_WORDS", "flags that say whether a pass trains (`if is_train:`, `if not training:`): what runs while one is false is the evaluation pass, as under `self.training`", PER_STEP),
    NameList("model.extract.NON_FINITE_WORDS", "tests for a non-finite loss or an out-of-memory batch: the branch is an error path", PER_STEP),
    NameList("model.summary.ENV_WORDS", "host environments, whose actions must reach the host every step", ("TL401",)),
    NameList("model.training.NOT_OPTIMIZER_WORDS", "schedulers and simulators, whose `.step()` updates no weights", (*PER_STEP, "TL501", "TL502")),
    NameList("model.hooks.FRAMEWORK_WORDS", "a framework's own classes, which implement steps for their users' loops", ("TL102", "TL202", "TL501", *PER_STEP)),
    NameList("model.value_calls.HOST_CALL_WORDS", "tokenizers and file readers, whose results live on the host", ("TL401", "TL406")),
    NameList("model.value_calls.CONFIG_NAMES", "configuration objects (`args.lr`), which hold no tensors", ("TL401",)),
    NameList("rules.tl303_eval_forward_with_grad.NOT_FORWARD_VERBS", "verbs that build or load a model rather than run it", ("TL303",)),
    NameList("rules.tl401_host_sync_in_step.MODULE_RECEIVER_WORDS", "models, whose `.cpu()` moves weights rather than reads a value", ("TL401",)),
    NameList("rules.tl501_zero_grad_missing.ENGINE_WORDS", "engines (DeepSpeed, Accelerate, Fabric) that clear gradients themselves", ("TL501",)),
    NameList("rules.tl503_eval_mode_not_reset.NOT_TRAINED_WORDS", "EMA, teacher and reference models, which are never trained", ("TL503",)),
)


def lists_for(code: str) -> list[NameList]:
    """The name lists that change a rule's findings."""
    return [n for n in NAME_LISTS if code in n.rules]
