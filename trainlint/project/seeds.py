"""Which functions of a module run every training step because other modules run them: joined up
from the callers' summaries, which do not depend on their own callers (DESIGN.md, "The whole
program"), as far up as callers go."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from trainlint.model.lattice import origins
from trainlint.model.summary import DISPATCH, UNSET_FLAG_FACTS, FunctionSummary, ModuleSummary, Place, Seed, StepCall, given_facts
from trainlint.project.classes import class_hierarchy
from trainlint.project.hierarchy import choosing_modules
from trainlint.test_code import is_test_name, is_test_path
from trainlint.project.importers import MAX_CHAINS, MAX_IMPORTERS
from trainlint.project.roots import project_root
from trainlint.project.watching import note
from trainlint.reading import module_code, read_state

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
            if seed is None or (call.flag and _flag_left_unset(project, caller, call.when, call.flag)):
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
    here = str(target)  # (arguments name files as text: compared so, a path made only for those that match)
    # and the modules its importers hand instances of its classes to (`Trainer(model)`)
    for importer in list(callers):
        for a in project.summary(importer).arguments:
            if a.class_path == here and a.callee_path != here and (receiver := Path(a.callee_path)) not in callers:
                callers.append(receiver)
    direct = set(callers)
    direct_text = {str(p) for p in direct}
    callers.extend(_subclassing(project, target, callers))
    callers.extend(p for p in choosing_modules(project, target)[:MAX_IMPORTERS] if p not in callers)
    # and the modules handed instances of classes of its importers (`Trainer(policy)` with a `PGPolicy`
    # deriving from one of its classes, whose inherited methods run there), or of its own classes by a
    # module that gets them from a factory (`train_epoch(model, ...)` with `model = gnn_model(name)`)
    for importer in list(callers):
        for a in project.summary(importer).arguments:
            if (a.class_path in direct_text or a.class_path == here) and a.callee_path != here and (receiver := Path(a.callee_path)) not in callers:
                callers.append(receiver)
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
    for name, seed in _held_elsewhere(project, target, direct):
        for chain in seed.chains[:1]:
            chains = found.setdefault(name, [])
            if chain not in chains and len(chains) < MAX_CHAINS:
                chains.append(chain)
        if seed.accelerator:
            accelerator.add(name)
    # methods overriding ones that a project base class (in another module) calls on `self` every step,
    # and functions set on such a class or on a class of this module (`@add_to_class(Trainer)`)
    outline = project.outline(target)
    methods = [(name, [(target, name)], set(cls.methods)) for name, cls in outline.classes.items()]
    methods.extend(_attached(project, target, outline))
    for name, classes, own in methods:
        bases = [b for path, cls in classes for b in ((path, cls), *class_hierarchy(path, cls, project.outline, project.locate)[1])]
        for base_path, base in dict.fromkeys(bases):
            if base_path == target:
                continue  # (the module's own analysis dispatches within it)
            for call in project.summary(base_path, steps=True).step_calls:
                owner, _, method = call.target.removeprefix(DISPATCH).partition(".")
                if call.target.startswith(DISPATCH) and owner == base and method in own:
                    if project.unbuilt(str(target), name, f"{base_path}::{base}"):
                        break  # (the project builds its siblings, never it: none of its overrides runs)
                    add(base_path, call, f"{name}.{method}")
    return {name: Seed(tuple(chains), name in accelerator) for name, chains in found.items() if chains}


def _held_elsewhere(project: "Project", target: Path, callers: "set[Path]") -> "list[tuple[str, Seed]]":
    """Objects of `target`'s classes its importers hand to a class of another module that holds them
    (`DeepSupervisionWrapper(DC_and_CE_loss(...))`, whose `__init__` keeps `self.loss = loss`): the
    object's `forward` (or `__call__`) runs whenever a method of that class calls the attribute
    (`self.loss(x, y)`), so every step where that method runs (the holder's module's seeds)."""
    out: list[tuple[str, Seed]] = []
    own = project.outline(target).classes
    here = str(target)
    for importer in callers:
        for a in project.summary(importer).arguments:
            if a.class_path != here or a.callee_path == here or "." in a.callee or a.class_name not in own:
                continue
            receiver = Path(a.callee_path)
            holder = project.outline(receiver).classes.get(a.callee)
            ran = next((m for m in ("forward", "__call__") if m in own[a.class_name].methods), None)
            if holder is None or ran is None:
                continue
            held = {h.partition("=")[0] for h in holder.holds if a.key in h.partition("=")[2].split(" ")}
            seeds = project.step_seeds(str(receiver)) if held else {}
            for method, summary in holder.methods.items():
                seed = seeds.get(f"{a.callee}.{method}")
                if seed is not None and held & set(summary.self_calls):
                    out.append((f"{a.class_name}.{ran}", seed))
    return out


def _attached(project: "Project", target: Path, outline: "ModuleSummary") -> "list[tuple[str, list[tuple[Path, str]], set[str]]]":
    """The functions of module `target` that a method-adding decorator sets on a class: for each, the
    class as the module's analysis names it, where that class is, and the function's name."""
    out: list[tuple[str, list[tuple[Path, str]], set[str]]] = []
    for decorator, spelled, qualified in outline.attached:
        where = (target, [decorator]) if "." not in decorator else project.locate(target, decorator)
        adder = project.outline(where[0]).functions.get(where[1][0]) if where is not None and len(where[1]) == 1 else None
        if adder is None or not adder.adds_methods:  # (read from outlines: asking summaries here may meet a cycle)
            continue
        written, _, function = qualified.rpartition(".")
        located = (target, [spelled]) if spelled in outline.classes else project.locate(target, spelled)
        if located is not None and len(located[1]) == 1:
            out.append((written, [(located[0], located[1][0])], {function}))
    return out


def passed_to(project: "Project", target: Path, facts: bool = False, outlined: bool = False, receivers: bool = False) -> dict[tuple[str, str], tuple[str, ...]]:
    """What the importers of module `target` pass to its functions and classes: (name, parameter key)
    -> the classes of the instances ("file::Class"); with `facts`, the facts of each call they make
    every step ("=file#N:tensor"; (name, "") -> "=file#N" for each call), as
    `ProjectLookup.passed_arguments` says. With `outlined`, the classes as the importers' outlines
    say (what a summary reads: the importers' own summaries read it). With `receivers`, the facts of
    the modules the importers hand objects of its classes to as well (`train_one_epoch(model, ...)`
    calling `model(x)` every step)."""
    found: dict[tuple[str, str], set[str]] = {}
    importers = project.importers(target, passing=not facts)
    # and the importers of a package's `__init__` that imports it: `from diffusion import
    # create_diffusion`, a factory returning an object of its class, to whose methods they pass theirs
    for package in [i for i in importers if i.name == "__init__.py" and i.parent == target.parent]:
        importers += [i for i in project.importers(package, passing=not facts) if i not in importers and i != target][:MAX_IMPORTERS]
    if facts and receivers:
        here = str(target)
        for importer in list(importers):
            for a in project.summary(importer).arguments:
                if a.class_path == here and a.callee_path != here and (receiver := Path(a.callee_path)) not in importers:
                    importers.append(receiver)
    for importer in importers:
        # the module linted reads what the steps pass as the step seeds read it (a module with no
        # training code of its own makes calls every step too); summaries, what is summarised
        summary = project.passed_by(importer) if outlined else project.summary(importer, steps=facts)
        for a in summary.arguments:
            if a.callee_path != str(target) or (not a.class_path) != facts:
                continue
            # a call made whenever a function runs ("=3@Model.forward") counts where that one is per step
            call, _, when = a.class_name[1:].partition("@")
            if a.key == "" and when and when not in project.step_seeds(str(importer)):
                continue
            entry = f"={importer}#{call}" if not a.class_path else f"{a.class_path}::{a.class_name}"
            found.setdefault((a.callee, a.key), set()).add(entry)
    return {key: tuple(sorted(origins)) for key, origins in found.items()}


def _flag_left_unset(project: "Project", caller: Path, when: str, flag: str) -> bool:
    """Whether every step call other modules make of function `when` of module `caller` leaves its
    flag `flag` ("1 gen_image") False or None, as by default: the call made under its test is not per
    step (`model(samples)`, while only generation passes `gen_image=True`)."""
    place, _, name = flag.partition(" ")
    owner = when[: -len(".__init__")] if when.endswith(".__init__") else when
    given = given_facts(project.passed_arguments(str(caller), facts=True, receivers=True), owner, [name, place])
    return given is not None and all(fact in UNSET_FLAG_FACTS for fact in given)


def _no_step_source(project: "Project", module: Path, root: Path) -> bool:
    """A module that can make nothing of another per step: test code (whose loops are not training
    steps), or a notebook (which no module imports, so it hands its objects to none)."""
    if module.suffix == ".ipynb":
        return True
    try:
        relative = module.relative_to(root).as_posix()
    except ValueError:
        return False
    outline = project.outline(module)
    names = lambda: [*outline.functions, *(m for cls in outline.classes.values() for m in cls.methods)]  # noqa: E731
    return is_test_path(relative, lambda: any(is_test_name(f) for f in names()) or any(is_test_name(c, True) for c in outline.classes))


MAX_CARRIER_DEPTH = 4  # modules between the one defining a class and the one running its objects


def _subclassing(project: "Project", target: Path, callers: list[Path]) -> list[Path]:
    """Modules that get objects of `target`'s classes from other modules without importing it, and
    may call them every step: handed down by modules that carry them. An importer of `target`
    carries its own classes (`BaseTacotron`, whose inherited `get_criterion` builds the loss) and its
    factories of `target`'s classes (`create_critic_model` returning a `RewardModel`); a module
    further up carries a class deriving from a carried one (`Tacotron2(BaseTacotron)`), a method's
    class or a factory whose every `return` gives a carried class's instance
    (`BaseEncoder.get_criterion`, `setup_encoder_model`). The importers of a carrier are callers."""
    out: list[Path] = []
    own = set(project.outline(target).classes)
    root = project_root(target)
    carried = {i: set(project.outline(i).classes) | _carries(project.outline(i), own) for i in callers if i != target}
    frontier = [i for i in carried if carried[i]]
    for _ in range(MAX_CARRIER_DEPTH):
        next_frontier: list[Path] = []
        for carrier in frontier:
            for module in project.importers(carrier):
                if module == target or _no_step_source(project, module, root) or len(callers) + len(out) >= MAX_IMPORTERS * 2:
                    continue
                outline = project.outline(module)
                names = _carries(outline, carried[carrier])
                uses = names or any(full.rsplit(".", 1)[-1] in carried[carrier] for full in outline.exports.values()) or _named_through_star(module, carried[carrier])
                if uses and module not in callers and module not in out:
                    out.append(module)
                if names - carried.get(module, set()):
                    carried.setdefault(module, set()).update(names)
                    next_frontier.append(module)
        frontier = next_frontier
    return out


def _named_through_star(module: Path, names: set[str]) -> bool:
    """Whether a module that imports names with `from models import *` (which its outline does not
    list) names one of `names` in its text (`build_model(...)`)."""
    state, data = read_state(str(module))
    note(state)
    if data is None or b"import *" not in data:
        return False
    text = module_code(str(module), data)
    # (the substring first: a pattern that opens with a look-behind is tried at every position of the text)
    return any(name in text and re.search(rf"(?<![\w.]){re.escape(name)}\b", text) for name in names)


def _carries(outline: "ModuleSummary", names: set[str]) -> set[str]:
    """What a module hands on of objects of the classes `names`: its classes deriving from one, or
    with a method returning one, and its functions returning one (as its imports spell them, the
    last name is the class's)."""

    def returns_one(summary: "FunctionSummary") -> bool:  # (or a tuple holding one: `return model, diffusion`)
        returned = [summary.returns, *(summary.returns.items or ())]
        return any(o.rsplit(".", 1)[-1].rsplit("::", 1)[-1] in names for value in returned for o in origins(value))

    out = {f for f, summary in outline.functions.items() if returns_one(summary)}
    for name, cls in outline.classes.items():
        if any(b.rsplit(".", 1)[-1] in names for b in cls.bases) or any(returns_one(m) for m in cls.methods.values()):
            out.add(name)
    return out
