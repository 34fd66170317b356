"""Arguments a constructor stores on its object without naming them: d2l's `save_hyperparameters()`
reads its caller's frame (`inspect.currentframe().f_back`) and does `setattr(self, k, v)` for each
local, so after `self.save_hyperparameters()` in `__init__(self, rnn, vocab_size)`, `self.rnn` is the
`rnn` argument. Known by what the method does, not by its name (Lightning's method of that name
keeps them in `self.hparams` and sets no attribute)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

if TYPE_CHECKING:
    from trainlint.model.facts import ClassInfo, Function
    from trainlint.model.training import TrainingModel

# what reads the calling function's frame, whose locals are its arguments on entry
FRAME_READERS = frozenset({"inspect.currentframe", "inspect.getargvalues", "inspect.stack", "sys._getframe"})


def saving_constructor(model: "TrainingModel", class_name: str, name: str) -> "Function | None":
    """The `__init__` of class `class_name` (of this module) that has a parameter `name` and calls a
    method of its class (its own or inherited) that sets its caller's arguments as attributes."""
    info = model.local_class(class_name)
    init = info.methods.get("__init__") if info is not None else None
    if init is None or name not in init.params or name in ("self", "cls"):
        return None
    for call in init.calls:
        if call.receiver_text == "self" and call.method is not None and call.site.function is init:
            method = model.inherited_method(info, call.method)
            if method is not None and sets_caller_arguments(method):
                return init
            if method is None and _inherited_saver(model, info, call.method):
                return init
    return None


def _inherited_saver(model: "TrainingModel", info: "ClassInfo", name: str, depth: int = 0) -> bool:
    """Method `name` of a project base of `info` (through its bases in this module) sets its caller's
    arguments (its summary says so): `RNNLMScratch(d2l.Classifier)` in a chapter, whose base's base
    defines `save_hyperparameters` in the package."""
    for base in info.bases if depth < 10 else ():
        local = model.local_class(base.rsplit(".", 1)[-1])
        if local is not None and local is not info:
            if _inherited_saver(model, local, name, depth + 1):
                return True
            continue
        summary = (model.class_methods(base) or {}).get(name)
        if summary is not None and summary.saves_arguments:
            return True
    return False


def sets_caller_arguments(fn: "Function") -> bool:
    """A method that reads its caller's frame and `setattr(self, ...)`s what it finds."""
    reads_frame = any(c.qualname in FRAME_READERS for c in fn.calls)
    sets = any(
        c.name == "setattr" and c.qualname is None and c.node.args and isinstance(c.node.args[0].value, cst.Name)
        and c.node.args[0].value.value == "self"
        for c in fn.calls
    )
    return reads_frame and sets
