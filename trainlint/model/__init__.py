"""The training-code model: what one pass over a module learns about its training step."""

from trainlint.dataclass_methods import import_libcst

import_libcst()  # (before any module below imports libcst: see dataclass_methods)

from trainlint.model.facts import Assign, Call, Condition, FormattedValue, Function, Loop, Site, WithItem
from trainlint.model.training import TrainingModel

__all__ = [
    "Assign",
    "Call",
    "Condition",
    "FormattedValue",
    "Function",
    "Loop",
    "Site",
    "TrainingModel",
    "WithItem",
]
