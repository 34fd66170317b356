"""What a function does with the values it is given, as summaries say it to other modules.

A fact is a short text: its kind, then the parameter it is about as summaries name parameters ("0
model": its position among the explicit parameters, and its name), e.g. "evaluates 0 model". Plain
text keeps the stored summary's layout fixed as kinds are added. `parameter_uses` computes them;
this module only reads them (the mode analysis and the rules ask, and must not import the analysis
that computes them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.arguments import argument_for

if TYPE_CHECKING:
    from trainlint.model.summary import FunctionSummary

# never switches the mode (`.train()`/`.eval()`) of the module it is given, nor has it switched
KEEPS_MODE = "keeps_mode"
# switches the module it is given to training mode (`.train()`) and never to eval mode
TRAINS_MODE = "trains_mode"
# runs the module it is given forward under `no_grad` in a loop that evaluates (one that neither
# backpropagates nor steps), without switching its mode: the mode it runs in is the caller's
EVALUATES = "evaluates"
# runs several epochs of training over the loader it is given (a training loop over it inside a loop
# around), and nothing in its module calls `set_epoch`
EPOCHS = "epochs"
# calls `set_epoch` on the loader or sampler it is given (`loader.sampler.set_epoch(epoch)`)
SETS_EPOCH = "sets_epoch"
# returns a DataLoader fed by a shuffling DistributedSampler that it builds: "shuffled_loader -"
# always; "shuffled_loader 1 shuffle True" when the sampler's `shuffle=` is that parameter (the last
# word: its default, "True", "False" or "-" for none)
SHUFFLED_LOADER = "shuffled_loader"
# backpropagates the tensor it is given on every call (`loss.backward()`): a loss, with its graph
BACKPROPS = "backprops"
# returns the tensor it is given moved to the device (`to_var(x)`, `utils.cuda(xs)`): see `moving_helpers`
MOVES = "moves"


def fact(kind: str, key: str) -> str:
    """A fact of `kind` about the parameter `key` ("0 model")."""
    return f"{kind} {key}"


def keys(summary: "FunctionSummary | None", kind: str) -> list[str]:
    """The parameters ("0 model", or "-" and more words for facts about no one parameter) that the
    summary's facts of `kind` are about."""
    if summary is None:
        return []
    return [f[len(kind) + 1:] for f in summary.parameter_facts if f.startswith(kind + " ")]


def arguments(summary: "FunctionSummary | None", kind: str, call: cst.Call) -> list[cst.BaseExpression]:
    """The arguments a call passes for the parameters the summary's facts of `kind` are about."""
    out = []
    for key in keys(summary, kind):
        given = argument_for(call, key)
        if given is not None:
            out.append(given)
    return out


def shuffled_loader(summary: "FunctionSummary | None", call: cst.Call) -> int | None:
    """Where the shuffling loader is in what a call of a `SHUFFLED_LOADER` function returns, with the
    arguments this call passes: -1 for the value returned, k for the k-th element of a returned tuple
    (`return train_loader, test_loader`); None when none shuffles. A loader shuffles always, or when
    the call passes `True` for the parameter (or omits one whose default is `True`). What the analysis
    cannot read as a literal is not a shuffle."""
    for key in keys(summary, SHUFFLED_LOADER):
        words = key.split(" ")
        element = -1
        if words[0].startswith("[") and words[0].endswith("]") and words[0][1:-1].isdigit():
            element, words = int(words[0][1:-1]), words[1:]
        if words == ["-"]:
            return element
        if len(words) != 3:
            continue
        given = argument_for(call, f"{words[0]} {words[1]}")
        if given is None:
            if words[2] == "True" and not any(a.star for a in call.args):
                return element  # not passed: the default shuffles
            continue
        if isinstance(given, cst.Name) and given.value == "True":
            return element
    return None


def mode_effect(summary: "FunctionSummary | None", call: cst.Call, given: list[cst.BaseExpression]) -> bool | None | str:
    """What a call into another project module does to the mode of the modules it is given (`given`,
    nodes of the call's arguments), from the callee's facts: True (only `.train()`), None (no switch),
    "unknown" (no fact about one of them: it may switch to eval)."""
    if summary is None:
        return "unknown"
    keeping = {id(a) for a in arguments(summary, KEEPS_MODE, call)}
    training = {id(a) for a in arguments(summary, TRAINS_MODE, call)}
    out: bool | None = None
    for node in given:
        if id(node) in training:
            out = True
        elif id(node) not in keeping:
            return "unknown"
    return out
