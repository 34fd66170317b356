"""The rule interface: a rule is a predicate over the training-code model plus its documentation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Literal

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import TrainingModel

if TYPE_CHECKING:
    from trainlint.model import Call


@dataclass(frozen=True)
class NodeEdit:
    """An edit anchored on a node: replace it, insert a line before its statement, insert text
    after it, or ("tail") replace the text from its end to the end of the node `until`."""

    node: cst.CSTNode
    content: str
    where: Literal["replace", "line_before", "after", "tail"] = "replace"
    until: cst.CSTNode | None = None


@dataclass(frozen=True)
class NodeFix:
    description: str
    edits: tuple[NodeEdit, ...]
    applicability: Applicability = Applicability.SAFE


@dataclass(frozen=True)
class Finding:
    """What a rule reports: the node to underline, the message, an optional fix and facts."""

    node: cst.CSTNode
    message: str
    fix: NodeFix | None = None
    facts: dict[str, object] = field(default_factory=dict)


class UnreadableInput(ValueError):
    """A non-Python input (a JSON config) that cannot be read at all: the engine reports a TL000."""


def listed(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`: the others a finding names, in a message."""
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + (items[-1] if items else "")


def shorten(text: str, limit: int) -> str:
    """Code quoted in a message: on one line, cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Rule:
    """Base class of all rules. Subclasses set the class attributes and implement `check`.

    `valid` and `invalid` are code examples: each invalid example must produce at least one
    finding of this rule and each valid one none; the test suite runs them all.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    default_enabled: ClassVar[bool] = True
    # a new rule runs only with `--preview` (or `preview = true`) until its real-code precision is shown
    preview: ClassVar[bool] = False
    summary: ClassVar[str]  # one line: what it flags
    hint: ClassVar[str]  # one line: the fix
    requires: ClassVar[tuple[str, ...]] = ()  # prefilter: the source must contain one of these
    # fires only on code inside a training step: the file must be able to hold one (`TrainingModel.could_step`)
    per_step: ClassVar[bool] = False
    # what it checks may be handed to this module's functions by other modules (a loss module passed
    # as an argument): where other project modules pass objects to them, it runs whatever the text holds
    handed_in: ClassVar[bool] = False
    why: ClassVar[str] = ""
    story: ClassVar[str] = ""
    example: ClassVar[str] = ""
    fixed_example: ClassVar[str] = ""
    not_flagged: ClassVar[str] = ""
    verification: ClassVar[str] = ""
    # for a rule that left preview: the reviewed real-code findings that showed it precise
    evidence: ClassVar[str] = ""
    valid: ClassVar[tuple[str, ...]] = ()
    invalid: ClassVar[tuple[str, ...]] = ()
    # file suffixes of non-Python inputs this rule reads through `check_text` (".json" for configs)
    text_inputs: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        """A finer test of the text than `requires`: False only where this rule cannot fire, so the
        file need not be parsed for it. `imports_project()` says whether the module imports one of
        the project's modules (facts the rule uses may come from there)."""
        return True

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        raise NotImplementedError

    def explain_call(self, model: TrainingModel, call: Call, line_of: Callable[[Any], int]) -> str | None:
        """For `trainlint explain FILE:LINE`, on a line that runs every step and where the rule did not
        fire: what about `call` decided that (None: nothing to say). Never runs on the lint path."""
        return None

    def check_text(self, text: str) -> list[tuple[int, int, str]]:
        """(line, column, message) findings in a non-Python input named by `text_inputs`; raises
        UnreadableInput for one that cannot be read at all."""
        return []
