"""A class's bases through the project: which library classes a user's class derives from, however
many project classes lie between (a fact the library's API makes: the methods its trainer calls every
step), and which project classes those are (whose per-step code may call the class's overrides)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from trainlint.model.summary import ClassSummary, FunctionSummary, ModuleSummary

MAX_CLASSES = 12  # classes visited per question: deep hierarchies are rare, cycles possible


def class_hierarchy(
    path: Path,
    name: str,
    outline: Callable[[Path], ModuleSummary],
    locate: Callable[[Path, str], "tuple[Path, list[str]] | None"],
) -> tuple[tuple[str, ...], tuple[tuple[Path, str], ...]]:
    """For class `name` of module `path`: every base, as the module naming it spells it
    (`Overflow(BaseTTS)`, `BaseTTS(BaseTrainerModel)`, `BaseTrainerModel(trainer.TrainerModel)`:
    "tts.models.base_tts.BaseTTS", "tts.model.BaseTrainerModel", "trainer.TrainerModel"), and the
    project classes among them with their modules. Read from outlines (Python's own parser)."""
    spelled: list[str] = []
    project: list[tuple[Path, str]] = []
    seen: set[tuple[Path, str]] = set()
    pending = [(path, name, False)]
    while pending and len(seen) < MAX_CLASSES:
        where, cls_name, is_base = pending.pop(0)
        if (where, cls_name) in seen:
            continue
        seen.add((where, cls_name))
        summary = outline(where)
        cls = summary.classes.get(cls_name)
        if cls is None:  # re-exported by a package's `__init__`
            target = summary.exports.get(cls_name)
            located = locate(where, target) if target is not None else None
            if located is not None and len(located[1]) == 1:
                pending.append((located[0], located[1][0], is_base))
            continue
        if is_base:
            project.append((where, cls_name))
        for base in cls.bases:
            spelled.append(base)
            if "." not in base and base in summary.classes:
                pending.append((where, base, True))
                continue
            located = locate(where, base)
            if located is not None and len(located[1]) == 1:
                pending.append((located[0], located[1][0], True))
    return tuple(spelled), tuple(project)


def inherited_methods(
    path: Path,
    name: str,
    resolve: Callable[[Path, str], "FunctionSummary | ClassSummary | None"],
    outline: Callable[[Path], ModuleSummary],
    locate: Callable[[Path, str], "tuple[Path, list[str]] | None"],
) -> dict[str, FunctionSummary] | None:
    """The method summaries of project class `name` of module `path` (`resolve` gives a name's
    summary), with those it inherits from its project bases in any module, the nearest first."""
    cls = resolve(path, name)
    if not isinstance(cls, ClassSummary):
        return None
    methods = dict(cls.methods)
    for where, base_name in class_hierarchy(path, name, outline, locate)[1]:
        base = resolve(where, base_name)
        for method, summary in (base.methods.items() if isinstance(base, ClassSummary) else ()):
            methods.setdefault(method, summary)
    return methods
