"""The lists of names the analysis still reads as facts (DESIGN.md, "Values, not names"): what each
stands in for, the rules whose findings it changes, and whether it only silences findings or can
also make one. A rule's page names the lists that affect it (`rules/catalogue.py`), and a test holds
this registry to the code: every list of guessed words (`*_WORDS`, `*_VERBS`) is here, and the lists
that can make a finding are exactly those marked so, each one a debt to be replaced by what the
code does.
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
    creates: bool  # False: it only ever silences a finding (or decides nothing)


NAME_LISTS: tuple[NameList, ...] = (
    NameList("model.gates.GATE_WORDS", "flags that gate periodic work (`if do_log:`): code under them is not every step", PER_STEP, False),
    NameList("model.gates.COUNTER_WORDS", "step counters, so that `if it % n == 0` is read as a gate", PER_STEP, False),
    NameList("model.gates.RANK_WORDS", "process ranks, so that `if rank == 0:` is read as a gate", PER_STEP, False),
    NameList("model.extract.NON_FINITE_WORDS", "tests for a non-finite loss: the branch is an error path", PER_STEP, False),
    NameList("model.summary.ENV_WORDS", "host environments, whose actions must reach the host every step", ("TL401",), False),
    NameList("model.training.NOT_OPTIMIZER_WORDS", "schedulers and simulators, whose `.step()` updates no weights", (*PER_STEP, "TL501", "TL502"), False),
    NameList("model.hooks.FRAMEWORK_WORDS", "a framework's own classes, which implement steps for their users' loops", ("TL102", "TL202", "TL501", *PER_STEP), False),
    NameList("model.value_calls.HOST_CALL_WORDS", "tokenizers and file readers, whose results live on the host", ("TL401", "TL406"), False),
    NameList("model.value_calls.CONFIG_NAMES", "configuration objects (`args.lr`), which hold no tensors", ("TL401",), False),
    NameList("rules.tl303_eval_forward_with_grad.NOT_FORWARD_VERBS", "verbs that build or load a model rather than run it", ("TL303",), False),
    NameList("rules.tl401_host_sync_in_step.MODULE_RECEIVER_WORDS", "models, whose `.cpu()` moves weights rather than reads a value", ("TL401",), False),
    NameList("rules.tl501_zero_grad_missing.ENGINE_WORDS", "engines (DeepSpeed, Accelerate, Fabric) that clear gradients themselves", ("TL501",), False),
    NameList("rules.tl503_eval_mode_not_reset.NOT_TRAINED_WORDS", "EMA, teacher and reference models, which are never trained", ("TL503",), False),
    # what still makes findings from a name: each to be replaced by what the values show
    NameList("model.training.OPTIMIZER_WORDS", "optimizers by the name of the object stepped (`opt.step()`) when its value is unknown", (*PER_STEP, "TL203", "TL501", "TL502"), True),
    NameList("model.training.STEP_NAME_WORDS", "functions that update weights and are named as a step (`train_step`): per step", PER_STEP, True),
    NameList("model.training.DEVICE_WORDS", "calls that put work on an accelerator (`accelerator.prepare`, `xla_device`)", ("TL401", "TL402", "TL406"), True),
    NameList("model.training.MODULE_WORDS", "models by name, when their value is unknown", ("TL303", "TL401"), True),
    NameList("model.value_calls.MODULE_RESULT_WORDS", "calls that return a model, when their value is unknown", ("TL303", "TL401"), True),
    NameList("model.value_calls.MODULE_NAME_WORDS", "attributes and classes named as models", ("TL303", "TL401"), True),
    NameList("rules.tl303_eval_forward_with_grad.EVAL_WORDS", "evaluation functions by name", ("TL303",), True),
    NameList("rules.tl303_eval_forward_with_grad.FORWARD_WORDS", "forward passes by the name of the callee", ("TL303",), True),
)


def lists_for(code: str) -> list[NameList]:
    """The name lists that change a rule's findings."""
    return [n for n in NAME_LISTS if code in n.rules]
