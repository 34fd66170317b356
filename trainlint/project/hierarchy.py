"""Class-hierarchy analysis over the project's own definitions: which classes the project can build
(an override of a class nobody builds never runs), and which project classes an object may be when
the value model cannot tell (built from a configuration string through a registry or a dict of
classes, or declared as a base): the classes that define the called method and could be built there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from trainlint.project.watching import note
from trainlint.reading import module_code, read_state

if TYPE_CHECKING:
    from trainlint.project.index import Project


def built(project: "Project", target: Path, name: str) -> bool:
    """Whether the project may build an object of class `name` of module `target`: another module
    imports it by name (or a package re-exports it), or its own module names it beyond its `class`
    statement (constructs it, registers it, derives from it), or a decorator registers it. A class
    named nowhere else is never built (a name may only silence: an unknown use counts as one)."""
    index = project._import_index(target)
    if any(f != target for f in index.by_word.get(name, ())):
        return True
    state, data = read_state(str(target))
    note(state)
    if data is None:
        return True
    text = module_code(str(target), data)
    uses = len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", text))
    definition = re.search(rf"^([ \t]*)((@.*\n\1)*)class {re.escape(name)}\b", text, re.M)
    return definition is None or uses > 1 or bool(definition.group(2))
