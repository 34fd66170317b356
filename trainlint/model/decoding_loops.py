"""Decoding loops that record graphs no backward can use: a loop feeding what a module gives, through
`argmax` or a token drawn from it, back to that module as its next input (TL303)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.evaluation import grad_disabled, trains_any
from trainlint.model.facts import Call, Function
from trainlint.model.lattice import Kind
from trainlint.model.names import dotted
from trainlint.model.walk import iter_nodes

if TYPE_CHECKING:
    from trainlint.model.training import TrainingModel


def decoding_forward(model: "TrainingModel", fn: Function) -> Call | None:
    """Greedy decoding: a loop of `fn` runs a module whose output goes through `argmax` (or is sampled,
    `_DRAWN`) and comes back as that module's input on the next turn (`Y, state = decoder(outputs[-1], state)`,
    then `outputs.append(Y.argmax(2))`). No backward passes through `argmax`, so what the loop records is
    never used; nor does `fn` backpropagate or train. The forward fed back, outside no_grad, or None."""
    if trains_any(model, fn.calls) or (fn.class_name is not None and fn.name == "forward"):
        return None  # (a module's own `forward`, VAR's multi-scale quantizer: its callers decide, as for prediction helpers)
    for call in fn.calls:
        if call.site.function is not fn or not call.site.loops or model.under(call.site, "no_grad") or grad_disabled(fn, call):
            continue
        if not _module_run(model, fn, call) or model.value(call.node, call.site).graph is False:
            continue
        loop = call.site.loops[-1]
        assigns = [a for a in model.assigns if a.site.function is fn and loop in a.site.loops]
        outputs = _flowing({t for a in model.assigns_in(call.site.statement) for t in a.targets}, assigns)
        fed: set[str] = set()
        picks: list[Call] = []
        for other in fn.calls:
            if loop not in other.site.loops or not {other.name, other.method} & {"argmax", *_DRAWN} or not _names(other.node) & outputs:
                continue
            picks.append(other)
            fed |= {t for a in model.assigns_in(other.site.statement) for t in a.targets}
            for kept in fn.calls:  # `outputs.append(int(Y.argmax(2)))`
                if kept.method in ("append", "extend") and kept.site.statement is other.site.statement and kept.receiver is not None:
                    if any(_holds(a.value, other) for a in kept.node.args):
                        fed |= _names(kept.receiver)
        fed = _flowing(fed, assigns)
        if any({p.name, p.method} & _DRAWN for p in picks) and _returns_graph(model, fn, call, picks, assigns):
            continue  # (a drawn token's log-probability, kept, is what a caller may differentiate)
        if fed and any(_names(a.value) & fed for a in call.node.args):
            return call
    return None


def _holds(expr: cst.CSTNode, call: Call) -> bool:
    return any(n is call.node for n in iter_nodes(expr))


def _returns_graph(model: "TrainingModel", fn: Function, forward: Call, picks: list[Call], assigns: list) -> bool:
    """Whether `fn` gives back something the forward's output reaches other than through the tokens
    picked from it (`return seq, seq_logprobs`, the log-probabilities appended each turn)."""
    through = [a for a in assigns if not any(_holds(a.value, p) for p in picks)]
    carriers = _flowing({t for a in model.assigns_in(forward.site.statement) for t in a.targets}, through)
    for kept in fn.calls:  # (`seq_logprobs.append(logprobs)`: the list carries them)
        if kept.method in ("append", "extend", "insert") and kept.receiver is not None and any(_names(a.value) & carriers for a in kept.node.args):
            carriers = _flowing(carriers | _names(kept.receiver), through)
    return any(r.value is not None and _names(r.value) & carriers for r in fn.return_facts)


def _module_run(model: "TrainingModel", fn: Function, call: Call) -> bool:
    """`decoder(x)` of a module, or `self(idx)` in a method of a module's class (GPT's `generate`)."""
    if dotted(call.node.func) in ("self", "self.forward") and fn.class_name is not None:
        info = model.local_class(fn.class_name)
        return info is not None and model.is_module_class(info)
    return model.value(call.node.func, call.site).kind is Kind.MODULE


# tokens a sampling loop draws or picks (`torch.multinomial(probs, 1)`, `logits.topk(k)`): no backward
# passes through them either, where the function gives back only what it fed (`generate`'s `idx`)
_DRAWN = frozenset({"multinomial", "topk"})


def _flowing(names: set[str], assigns: "list") -> set[str]:
    """`names` and every name assigned, in the loop's assignments, from one of them (a buffer written
    in place too: `seq[:, t] = it`)."""
    out = set(names)
    changed = bool(out)
    while changed:
        changed = False
        for a in assigns:
            targets = {t.removesuffix("[]") for t in a.targets}
            if _names(a.value) & out and not targets <= out:
                out |= targets
                changed = True
    return out


def _names(node: cst.CSTNode) -> set[str]:
    """The variables an expression reads (`outputs` in `outputs[-1]`, not `decoder` in `self.decoder`)."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.add(current.value)
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
        else:
            stack.extend(current.children)
    return found
