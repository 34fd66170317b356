"""Which functions of a module run every training step because other modules run them: joined up
from the callers' summaries, which do not depend on their own callers (DESIGN.md, "The whole
program"), as far up as callers go."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainlint.model.summary import DISPATCH, Place, Seed, StepCall
from trainlint.project.classes import class_hierarchy
from trainlint.project.importers import MAX_CHAINS

if TYPE_CHECKING:
    from trainlint.project.index import Project


def join_seeds(project: "Project", target: Path) -> dict[str, Seed]:
    """The functions of module `target` that other modules run every step (`Project.step_seeds`), from
    the summaries of its callers: the calls their step loops make into it, and the calls their
    functions make whenever they run, per step where those functions are (their own seeds, asked in
    turn); and the overrides of methods that a project base class calls on `self` every step."""
    found: dict[str, list[tuple[Place, ...]]] = {}
    accelerator: set[str] = set()
    callers_seeds: dict[Path, dict[str, Seed]] = {}

    def add(caller: Path, call: StepCall, name: str) -> None:
        prefixes: tuple[tuple[tuple[Place, ...], bool], ...] = (((), call.accelerator),)
        if call.when:  # made whenever a function of the caller runs: per step where it is
            if caller not in callers_seeds:
                callers_seeds[caller] = project.step_seeds(str(caller))
            seed = callers_seeds[caller].get(call.when)
            if seed is None:
                return
            prefixes = tuple((c, call.accelerator or seed.accelerator) for c in seed.chains[:1])
        chains = found.setdefault(name, [])
        for prefix, on_accelerator in prefixes:
            chain = (*prefix, *call.chain)
            if chain not in chains and len(chains) < MAX_CHAINS:
                chains.append(chain)
            if on_accelerator:
                accelerator.add(name)

    callers = project.importers(target)
    # and the modules its importers hand instances of its classes to (`Trainer(model)`)
    for importer in list(callers):
        for a in project.summary(importer).arguments:
            receiver = Path(a.callee_path)
            if a.class_path == str(target) and receiver != target and receiver not in callers:
                callers.append(receiver)
    callers.extend(_subclassing(project, target, callers))
    for importer in callers:
        for call in project.summary(importer, steps=True).step_calls:
            if call.target.startswith(DISPATCH):
                continue
            where = project.locate_any(importer, call.target)
            if where is None:
                continue
            final = project.defined_in(where[0], where[1], hops=0)
            if final is not None and final[0] == target and len(final[1]) in (1, 2):
                add(importer, call, ".".join(final[1]))
    # methods overriding ones that a project base class (in another module) calls on `self` every step
    for name, cls in project.outline(target).classes.items():
        for base_path, base in class_hierarchy(target, name, project.outline, project.locate)[1]:
            if base_path == target:
                continue  # (the module's own analysis dispatches within it)
            for call in project.summary(base_path, steps=True).step_calls:
                owner, _, method = call.target.removeprefix(DISPATCH).partition(".")
                if call.target.startswith(DISPATCH) and owner == base and method in cls.methods:
                    add(base_path, call, f"{name}.{method}")
    return {name: Seed(tuple(chains), name in accelerator) for name, chains in found.items() if chains}


def _subclassing(project: "Project", target: Path, callers: list[Path]) -> list[Path]:
    """Modules that derive a class from a class of one of `target`'s importers (`Tacotron2` from
    `BaseTacotron`, whose module imports the losses): the methods they inherit (`get_criterion`)
    hand them objects of `target`'s classes that they call every step without importing it."""
    out: list[Path] = []
    for importer in list(callers):
        bases = set(project.outline(importer).classes)
        if not bases:
            continue
        for module in project.importers(importer):
            if module in callers or module in out or module == target:
                continue
            if any(b.rsplit(".", 1)[-1] in bases for c in project.outline(module).classes.values() for b in c.bases):
                out.append(module)
    return out
