"""State on `self` rebuilt from nothing before it could outlive a step: what keeps an accumulator
or a recurrent state of a module's methods from holding every step's autograd graph (TL302). A
decoder's `forward` that calls `self._init_states(x)` first, or `self.loss_dict = defaultdict(float)`
at the top of the `forward` that then adds each head's loss into it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainlint.model.lattice import Kind, Value, origins

if TYPE_CHECKING:
    from trainlint.model.facts import Assign, Call
    from trainlint.model.training import TrainingModel


def _fresh(value: Value) -> bool:
    """A value with no autograd history: `None`, or a tensor built from nothing (`torch.zeros(...)`)."""
    return value.graph is False or value.kind is Kind.NONE


def reset_before(model: "TrainingModel", assign: "Assign", target: str) -> bool:
    """A decoder's `forward` that calls `self._init_states(x)` (which sets `self.query =
    torch.zeros(...)`) and then `self.decode(...)` per time step: the state is rebuilt from nothing
    on every call, so its graph lives for one forward pass, not across steps."""
    fn = assign.site.function
    assert fn is not None
    resets = {
        a.site.function for a in model.attribute_assigns(fn.class_name, target)
        if a.op is None and a.site.function is not fn and a.site.function is not None and a.site.function.name != "__init__"
        and _fresh(model.value(a.value, a.site))
    }
    if not resets:
        return False
    if resets & model.step_functions:
        return True  # rebuilt from nothing every step (the decoder of another module calls `init_states`): one step's graph at most
    names = {r.name for r in resets}
    own = [c for c in model.calls if c.receiver_text == "self" and c.site.function is not None and c.site.function.class_name == fn.class_name]
    for reset in (c for c in own if c.method in names):
        caller = reset.site.function
        if caller is fn and reset.site.order < assign.site.order:
            return True
        if any(c.method == fn.name and c.site.function is caller and c.site.order > reset.site.order for c in own):
            return True
    # `self.attention.init_states(x)` in the decoder's `forward`, which then runs the attention per
    # time step: reset by the object that uses it, once per forward pass (not once before a step loop)
    for reset in model.calls:
        caller = reset.site.function
        if reset.method not in names or reset.receiver_text in (None, "self") or caller is None or caller.name == "__init__":
            continue
        if any(l.is_step for l in model.loops if l.function is caller):
            continue
        if fn.class_name in origins(model.value(reset.receiver, reset.site)):
            return True
    return False


def reset_earlier(model: "TrainingModel", fact: "Assign | Call", target: str) -> bool:
    """`self.loss_dict = defaultdict(float)` (or `= 0.0`, or `self.outputs = []`) earlier in the same
    function, in its step loop if it has one, on the path to every `+=` or `.append(...)` (YOLOv3's
    `forward`): rebuilt on every pass, not kept."""
    fn, loops = fact.site.function, [l for l in fact.site.loops if l.is_step]
    branches = {id(n) for n in (*fact.site.gate_nodes, *fact.site.else_of) if n is not None}
    return any(
        a.site.function is fn and a.op is None and a.site.order < fact.site.order and (not loops or loops[0] in a.site.loops)
        and {id(n) for n in (*a.site.gate_nodes, *a.site.else_of) if n is not None} <= branches
        for a in model.attribute_assigns(fn.class_name if fn is not None else None, target.removesuffix("[]"))
    )
