"""The project phase: the summaries of the local modules a file imports, found and computed on demand.

`from utils import NativeScaler` in `train.py` makes `utils.py` (beside it, or in a parent folder of
the project) part of the analysis of `train.py`: its summary says what `NativeScaler()(loss, opt)`
does. Only modules a file imports are read, and only when the analysis asks about one of their names.

Each module has one summary per content, computed once, through one project (depth 1, its own
`_summariser`): a summary sees the summaries of the modules it imports in full, each computed once in
turn, bottom-up over the import graph, and the modules that import it (its import cycle, importers
passing it objects of their classes) by their outlines (components.py), whichever module a run asked
for first. A module with no training token is known by its outline (Python's own parser, not an
analysis) until a step may pass through it. Summaries are memoised per process by the module's path
and content (read again after `rescan`) and shared through the run's store (store.py), where a worker
waits for one another worker is computing. The file being linted (depth 0) has a view of its own:
every module in full, what other modules pass it and call in it every step, whether it is alone.

What the analysis of a file depended on is recorded as it goes (`watching`): the content of each
module it read and whether each path it looked for is a file, a folder or nothing, as the states of
cache.py, against which a cached result is checked.
"""

from __future__ import annotations

import os
from pathlib import Path
from dataclasses import replace
from typing import Any

from trainlint.project import budget, kept_models, roots as import_roots, store
from trainlint.project.components import Components
from trainlint.project.watching import CycleFixpoint, InProgress, note, note_all, watching
from trainlint.project.classes import class_hierarchy, inherited_methods
from trainlint.project.constructions import constructed_values
from trainlint.project.hierarchy import class_candidates, unbuilt
from trainlint.project.passed_instances import passed_instances, resolved_arguments
from trainlint.project.seeds import join_seeds, passed_to
from trainlint.project.importers import MAX_IMPORTERS, MAX_OUTLINED_IMPORTERS, SUMMARISED_TOKENS, TRAINING_TOKENS, ImportIndex, import_index, importers_in, module_outline, pending_bytes, set_default_device
from trainlint.project.finding import ModuleFinder
from trainlint.project.method_callers import calling_by_text
from trainlint.project.outline_effects import with_outline_facts
from trainlint.project.roots import IMPORT_TEXT, LIBRARY_ROOTS
from trainlint.model.summary import EMPTY, Argument, ClassSummary, FunctionSummary, ModuleSummary, Seed
from trainlint.reading import EXISTS, FOLDER, State, module_code, probe_state, read_state

Symbol = FunctionSummary | ClassSummary

# for both views: outlines (names; names without what is unknown), `resolve()`s until `rescan`
# and whether the module has anything a summary says beyond its outline (SUMMARISED_TOKENS)
_OUTLINES: dict[Path, tuple[State, ModuleSummary, ModuleSummary, bool]] = {}
_real = import_roots.real_path


def _absolute(path: Path) -> Path:
    """The module's path as the run's store names its summary: one from any spelling, links too."""
    return _real(Path(os.path.abspath(path)))


class Project(ModuleFinder):
    """Finds the file of an imported module and returns summaries of its names."""

    def __init__(self, root: Path | None = None, depth: int = 0) -> None:
        # (kept for callers naming one; each file's imports are found from its own roots, roots.py)
        self.root = root.resolve() if root is not None else None
        self.depth = depth  # 0: the view of the file linted; 1: the view a summary's analysis has
        if depth == 0:  # a new project reads the folders afresh (the roots are memoised per process)
            import_roots.forget()
        # path -> the state of the content summarised, the summary, the states it was computed from:
        # each module's one analysis, and the outlines of those with no training code (with what they pass)
        self._summaries: dict[Path, tuple[State, ModuleSummary, set[State]]] = {}
        self._plain: dict[Path, tuple[State, ModuleSummary, set[State]]] = {}
        self._current: set[tuple[Path, bool]] = set()  # those whose content was read since the last `rescan`
        self._components = Components(self.imported_file, _real)
        self._outlines = _OUTLINES
        self._current_outlines: set[Path] = set()
        # (folder, dotted module) -> its file if any, and the states of the paths it was looked for at
        self._files: store.StateMemo[tuple[Path, str], tuple[Path | None, tuple[State, ...]]] = store.StateMemo(lambda f: f[1])
        # (importer, qualname) -> where it is, and the states of the paths probed to find it (noted on each hit)
        self._located: store.StateMemo[tuple[Path, str], tuple[tuple[Path, list[str]] | None, tuple[State, ...]]] = store.StateMemo(lambda f: f[1])
        self._tops: dict[tuple[Path, str], tuple[State, State]] = {}
        self._deeper: Project | None = None  # where summaries are computed: depth 1 (whose own is itself)
        self._index: dict[Path, ImportIndex] = {}  # per project root: which files import which names
        self._rescanned: dict[Path, ImportIndex] = {}  # those `rescan` set aside: reused while current
        self._computing: InProgress[Path] = InProgress()  # summaries being computed (imports may form cycles)
        self._seeds: CycleFixpoint[Path, dict[str, Seed]] = CycleFixpoint({}, store.holds)  # callers may call each other
        self._importers: dict[Path, tuple[tuple[list[Path], frozenset[Path]], tuple[State, ...]]] = {}  # with what they read
        self._differentiates: dict[tuple[Path, str], tuple[State, bool, tuple[State, ...]]] = {}

    # -- public --------------------------------------------------------------------------------
    def symbol(self, from_file: str, qualname: str) -> Symbol | None:
        """The summary of `qualname` (as the importing file's imports spell it: `utils.Scaler`, `.engine.train_one_epoch`), or None when it is not a name of a local module."""
        if not from_file or from_file == "-":
            return None
        found = self.locate_any(Path(from_file), qualname)
        if found is None:
            return None
        path, rest = found
        return self._summariser()._resolve(path, rest, hops=0, asker=self._asker(from_file))

    def _summariser(self) -> Project:
        """The project through which every summary is computed and read (one per process and root)."""
        self._deeper = self._deeper or (self if self.depth else Project(self.root, 1))
        return self._deeper

    def _asker(self, from_file: str) -> Path | None:
        """The module whose summary is being computed, asking (None: the file linted, which sees all)."""
        return _real(Path(from_file)) if self.depth else None

    def locate_any(self, importer: Path, qualname: str) -> tuple[Path, list[str]] | None:
        """`locate`, and "file::Name.attr" (a class another module passed in) by its file."""
        if "::" in qualname:
            file, _, rest = qualname.partition("::")
            return (Path(file), rest.split(".")) if file and rest else None
        return self.locate(importer, qualname)

    def qualify(self, from_file: str, qualname: str) -> str | None:
        """A name as module `from_file` spells it (`.models.lstm.LSTMEncoder`), as any module can find it ("file::LSTMEncoder"); None for a library's name."""
        found = self.locate(Path(from_file), qualname) if from_file and "::" not in qualname else None
        return f"{found[0]}::{'.'.join(found[1])}" if found is not None else None

    def step_seeds(self, path: str) -> dict[str, Seed]:
        """The functions of module `path` ("f", "Class.method") that other modules of the project call
        on every training step, each with the call chains that reach it (`ProjectLookup.step_seeds`).
        Joined up from the callers' summaries, which do not depend on their own callers: the calls a
        module makes from its step loops, and those its functions make whenever they run, which are
        per step where those functions are (asked of their callers in turn, as far up as callers go).
        Only the analysis of the module being linted asks: summaries are free of seeds."""
        target = self._linted(path)
        if target is None:
            return {}
        label = f"{target} (its callers)"
        if self._seeds.asking or target in self._seeds:  # (inside the budget of the module first asked about)
            seeds = self._seeds.ask(target, self._step_seeds)
        else:
            try:  # joining up the callers is work of its own: over its budget, they are unknown, not the file
                with budget.own_budget(label):
                    seeds = self._seeds.ask(target, self._step_seeds)
            except budget.OverBudget:
                self._seeds.keep(target, {})
                seeds = {}
        budget.used(label)
        return seeds

    def _step_seeds(self, target: Path) -> dict[str, Seed]:
        return {} if self.alone(target) else join_seeds(self, target)

    def callers_use_accelerator(self, path: str) -> bool:
        """(`ProjectLookup.callers_use_accelerator`, by the importers' summaries)"""
        return any(self.summary(f, steps=True).uses_accelerator for f in self._importer_files(path))

    def called_with_grad(self, path: str, method: str, anywhere: bool = False) -> bool | None:
        """(`ProjectLookup.called_with_grad`, by the importers' summaries, else by those of the modules calling it by name)"""
        target = self._linted(path)
        for files in (lambda: self._importer_files(path), lambda: calling_by_text(self._import_index(target), target, method, note_all) if anywhere and target else []):
            called = [self.summary(f, steps=True) for f in files()]
            if any(method in s.graded_methods or method in s.quiet_methods for s in called):
                return any(method in s.graded_methods for s in called)
        return None

    def callers_set_default_device(self, path: str) -> bool:
        """(`ProjectLookup.callers_set_default_device`, by the importers' text)"""
        return set_default_device(self._importer_files(path))

    def _importer_files(self, path: str) -> list[Path]:
        """The modules importing module `path`, for the module linted only (a summary is free of its callers)."""
        return [f for f in self.importers(target) if f != target] if (target := self._linted(path)) is not None else []

    def _linted(self, path: str) -> Path | None:
        return _real(Path(path)) if self.depth == 0 and path and path != "-" else None

    def differentiates(self, path: str, qualified: str) -> bool:  # (memoised: the content asked of, the answer, what it read)
        """Whether a function of a project module may differentiate a value it is given
        (`ProjectLookup.differentiates`): the module analysed again as for its summary, which leaves
        this open because only a fix's proof asks it."""
        target = Path(path)
        state, data = read_state(str(target))
        key = (target, qualified)
        known = self._differentiates.get(key)
        if known is None or known[0] != state:
            from trainlint.model.fix_safety import local_differentiates

            with watching() as read:
                model = self._model(target, module_code(str(target), data)) if data is not None else None
                answer = local_differentiates(model, qualified) if model is not None else True
            known = self._differentiates[key] = (state, answer, tuple(read))
        note_all(known[2], known[0])
        return known[1]

    def passed_arguments(self, path: str, facts: bool = False, receivers: bool = False) -> dict[tuple[str, str], tuple[str, ...]]:
        """What other modules pass to this module's functions and classes (`ProjectLookup`'s). A
        summary reads the classes its importers pass as their outlines say (`passed_instances`): their
        summaries read its own."""
        if (self.depth and facts) or not path or path == "-":
            return {}
        return passed_to(self, _real(Path(path)), facts, outlined=bool(self.depth), receivers=receivers)

    def _arguments(self, path: Path, passed: list[tuple[str, str, str]]) -> tuple[Argument, ...]:
        """The instances a module passes to other project modules, resolved to the defining files."""
        return resolved_arguments(self, _real(path), path, passed)

    def defined_in(self, path: Path, rest: list[str], hops: int) -> tuple[Path, list[str]] | None:
        """Where a name a module offers is defined: followed through re-exports (`from .m import f`)."""
        if not rest or hops > 3:
            return None
        summary = self.outline(path)
        if rest[0] in summary.functions or rest[0] in summary.classes:
            return _real(path), rest
        exported = summary.exports.get(rest[0])
        if exported is None:
            return None
        found = self.locate(path, ".".join([exported, *rest[1:]]))
        return self.defined_in(found[0], found[1], hops + 1) if found is not None else None

    def importers(self, target: Path, passing: bool = False) -> list[Path]:
        """The project's files whose imports name `target`'s module, or its package when their text
        names something `target` defines (read from the text, indexed once): training code first,
        `MAX_IMPORTERS` in all; with `passing`, then those with none (read cheaply for what they pass)."""
        known = self._importers.get(target)
        if known is None:
            with watching() as read:
                found = self._importers_of(target)
            known = self._importers[target] = (found, tuple(read))
        note_all(known[1])
        found, training = known[0]
        outlined = [f for f in found[MAX_IMPORTERS:] if f not in training][:MAX_OUTLINED_IMPORTERS] if passing else []
        return [*found[:MAX_IMPORTERS], *outlined]

    def alone(self, target: Path) -> bool:
        """Whether `target` is the only module of its project (a standalone script): no other module
        can run its functions. Answered for the module being linted only (a module summarised for
        another one is not alone), so that deeper levels build no import index for it."""
        return self.depth == 0 and self._import_index(_real(target)).modules <= 1

    def _import_index(self, target: Path) -> ImportIndex:
        root, _, looked = import_roots.project(target)
        note(*looked)
        index = self._index.get(root)
        if index is None:
            kept = self._rescanned.pop(root, None)
            index = self._index[root] = kept if kept is not None and kept.current(root) else import_index(root)
        note(*index.listings)
        return index

    def _importers_of(self, target: Path) -> tuple[list[Path], frozenset[Path]]:
        return importers_in(self._import_index(target), target, self.outline, self.named_modules)

    def rescan(self) -> None:
        """Forget which files exist (remembered for a run's speed). A long-lived process, the
        language server's, calls this before each lint: modules may have appeared or gone since."""
        self._files.forget()  # (each answer given again while the paths it probed are unchanged)
        self._located.forget()
        self._tops.clear()
        self._rescanned.update(self._index)
        self._index.clear()
        self._seeds.forget()  # (each answer given again while the files it read are unchanged)
        self._importers.clear()
        self._differentiates.clear()
        self._current.clear()
        self._current_outlines.clear()
        store.forget_states()
        import_roots.forget()
        self._components.forget()
        if self._deeper is not None and self._deeper is not self:
            self._deeper.rescan()

    def imports_project(self, from_file: str, source: str) -> bool:
        """Whether the module's text imports a module of the project (relatively, or a top-level name
        that is a file or folder beside it or in a parent folder). An over-approximation of what
        `symbol` can resolve, read from the text without parsing; probed paths are noted."""
        if not from_file or from_file == "-":
            return False
        importer = Path(from_file)
        for match in IMPORT_TEXT.finditer(source):
            dots, module, names = match.group(1, 2, 3)
            if dots or "\\" in match.group(0):
                return True  # relative, or a continued line this reading does not follow
            tops = [module.split(".")[0]] if module else [n.split()[0].split(".")[0] for n in names.split(",") if n.strip()]
            for top in tops:
                if top in LIBRARY_ROOTS or not top.isidentifier():
                    continue
                for base in self._search_dirs(importer):
                    folder, file = self._top_level(base, top)
                    note(folder, file)
                    if (file[1] == EXISTS and file[0] != str(importer)) or folder[1] == FOLDER:
                        return True
        return False

    def unsummarised(self, from_file: str, source: str) -> int:
        """The size in bytes of the project's modules with training code that module `from_file`
        (its text `source`) imports and that have no summary in this process yet (`pending_bytes`)."""
        if self.depth or not from_file or from_file == "-":
            return 0
        known = self._summariser()
        return pending_bytes(self.locate, lambda path: _absolute(path) in known._summaries, Path(from_file), source)

    def _top_level(self, base: Path, top: str) -> tuple[State, State]:
        """What `base/top/` and `base/top.py` are (memoised: imports repeat)."""
        key = (base, top)
        if key not in self._tops:
            self._tops[key] = (probe_state(str(base / top)), probe_state(str(base / f"{top}.py")))
        return self._tops[key]

    # -- summaries -----------------------------------------------------------------------------
    def _resolve(self, path: Path, rest: list[str], hops: int, asker: Path | None = None) -> Symbol | None:
        """What name `rest` of module `path` is, as module `asker`'s summary sees it: a module that
        imports it, directly or not (of its own import cycle, or one passing it objects of its classes),
        by its outline, any other by its summary (the file linted, None: all by summaries)."""
        if not rest or hops > 3:
            return None
        summary = self.outline(path, unknown_if_training=True) if asker is not None and self._components.reaches(_real(path), asker) else self.summary(path)
        name = rest[0]
        if name in summary.functions and len(rest) == 1:
            return summary.functions[name]
        if name in summary.classes:
            cls = summary.classes[name]
            if len(rest) == 1:
                return cls
            return cls.methods.get(rest[1]) if len(rest) == 2 else None
        target = summary.exports.get(name)
        if target is not None:  # re-exported: `from .scaler import NativeScaler` in a package
            found = self.locate(path, ".".join([target, *rest[1:]]))
            if found is not None:
                return self._resolve(found[0], found[1], hops + 1, asker)
        return None

    def class_methods(self, from_file: str, qualname: str) -> dict[str, FunctionSummary] | None:
        """The methods of project class `qualname` (as `from_file` spells it, or "file::Name"), with
        those it inherits from its project bases in any module (the nearest definition wins)."""
        if not from_file or from_file == "-":
            return None
        found = self.locate_any(Path(from_file), qualname)
        if found is None or len(found[1]) != 1:
            return None
        summaries, asker = self._summariser(), self._asker(from_file)
        return inherited_methods(found[0], found[1][0], lambda path, name: summaries._resolve(path, [name], 0, asker), self.outline, self.locate)

    def method_home(self, from_file: str, qualname: str, method: str) -> str | None:
        """Where an object of project class `qualname` finds `method` (`ProjectLookup.method_home`), read from outlines."""
        if not from_file or from_file == "-":
            return None
        found = self.locate_any(Path(from_file), qualname)
        if found is None or len(found[1]) != 1:
            return None
        path, name = found[0], found[1][0]
        for where, cls in ((path, name), *class_hierarchy(path, name, self.outline, self.locate)[1]):
            owner = self.outline(where).classes.get(cls)
            if owner is not None and method in owner.methods:
                return f"{_real(where)}::{cls}.{method}"
        return None

    def constructed_values(self, path: str, class_name: str, param: str, index: int) -> frozenset[object] | None:
        """(`ProjectLookup.constructed_values`, `constructions.constructed_values`)"""
        return constructed_values(None if self.depth else lambda t, w: self._import_index(t).by_word.get(w, []), _real(Path(path)), class_name, param, index) if path and path != "-" else None

    def unbuilt(self, path: str, class_name: str, base: str) -> bool:
        """Whether the project builds objects of other classes deriving from `base` ("file::Base") but never one of class `class_name` of module `path` (`hierarchy.unbuilt`)."""
        return bool(path) and path != "-" and unbuilt(self, _real(Path(path)), class_name, base)

    def class_candidates(self, from_file: str, kind: str, qualname: str) -> tuple[str, ...]:
        """The project classes an object built from `qualname` may be (`hierarchy.class_candidates`)."""
        if not from_file or from_file == "-":
            return ()
        return class_candidates(self, Path(from_file), kind, qualname)

    def class_bases(self, from_file: str, class_name: str) -> tuple[str, ...]:
        """Every base of class `class_name` of `from_file`, through its project bases in any module
        (`class_hierarchy`), as the module naming each spells it."""
        if not from_file or from_file == "-":
            return ()
        return class_hierarchy(_real(Path(from_file)), class_name, self.outline, self.locate)[0]

    def outline(self, path: Path, unknown_if_training: bool = False) -> ModuleSummary:
        """The module's names without analysis (`module_outline`): all that finding where a name is
        defined needs, and what a summary knows of the modules of its own import cycle. There
        (`unknown_if_training`) a module with training code offers its names and class kinds only:
        what its functions do is unknown, not nothing."""
        known = self._outlines.get(path)
        if known is None or path not in self._current_outlines:
            state, data = read_state(str(path))
            self._current_outlines.add(path)
            if known is None or known[0] != state:
                text = module_code(str(path), data) if data is not None else ""
                outline, read = self.star_exported(path, module_outline(text, str(_real(path))) if data is not None else EMPTY)
                opaque = replace(outline, functions={}, classes={k: ClassSummary(c.kind) for k, c in outline.classes.items()}) if any(
                    token in text for token in TRAINING_TOKENS) else outline
                summarised = any(token in text for token in SUMMARISED_TOKENS)
                known = self._outlines[path] = (state, outline, opaque, summarised, read)
        note_all(known[4], known[0])
        return known[2] if unknown_if_training else known[1]

    def _outline_says_all(self, path: Path) -> bool:
        """Whether a summary of the module could say nothing beyond its outline (no SUMMARISED_TOKENS)."""
        self.outline(path)
        return not self._outlines[path][3]

    def summary(self, path: Path, steps: bool = False) -> ModuleSummary:
        """The module's summary (one per content, memoised); empty when it cannot be read. A module whose
        summary would say nothing beyond its outline (no SUMMARISED_TOKENS) is known by its outline and
        the instances it passes, unless `steps`: what it calls whenever its functions run is asked (a
        step may pass through a model's `forward` to its loss head); then it is analysed, once."""
        if not self.depth:
            return self._summariser().summary(path, steps)
        if not steps and self._outline_says_all(path):
            return self.passed_by(path)
        key = _absolute(path)  # (one summary however the module is spelled, as the run's store keys it)
        known = self._summaries.get(key)
        if known is None and key in self._computing:  # an import cycle its components did not show: by its outline
            self._computing.cycle(key)
            return self.outline(path, unknown_if_training=True)
        if known is None or (key, True) not in self._current:
            state, data = read_state(str(path))
            if known is None or known[0] != state:
                summary, depends, kept = self._summarise(path, state, data)
                if not kept:
                    note_all(depends, state)
                    return summary
                known = self._summaries[key] = (state, summary, depends)
            self._current.add((key, True))
        state, summary, depends = known
        note_all(depends, state)
        budget.used(str(path))
        return summary

    def passed_by(self, path: Path) -> ModuleSummary:
        """A module's outline and the instances of project classes it passes to other modules, read
        with Python's own parser (no analysis): what summaries know of a module with no training code."""
        known = self._plain.get(path)
        if known is None or (path, False) not in self._current:
            state, data = read_state(str(path))
            if known is None or known[0] != state:
                with watching() as depends:
                    source = module_code(str(path), data) if data is not None else ""
                    summary = replace(self.outline(path), arguments=self._arguments(path, passed_instances(source))) if data is not None else EMPTY
                known = self._plain[path] = (state, summary, depends)
            self._current.add((path, False))
        note_all(known[2], known[0])
        return known[1]

    def _summarise(self, path: Path, state: State, data: bytes | None) -> tuple[ModuleSummary, set[State], bool]:
        """The summary of the content read, from the run's shared store when another process made it,
        and whether it may be kept (computed inside a cycle, it is neither kept nor shared)."""
        if data is None:
            return EMPTY, set(), True
        key = _absolute(path)
        shared_entry = store.shared_entry(key, state)
        stored = store.load_shared(shared_entry)
        if stored is None and not store.claim(shared_entry, budget.patience()):  # another worker was computing it: shared now
            stored = store.load_shared(shared_entry)
        if stored is not None:
            return (*stored, True)
        if store.over_budget(shared_entry):  # another worker spent the budget on it: unknown here too
            store.release(shared_entry)
            budget.ran_out_elsewhere(str(path))
            return self.outline(path, unknown_if_training=True), set(), True
        try:
            store.log_computation(path, state)
            with self._computing.working(key), watching() as depends, budget.own_budget(str(path)):
                summary = self._compute(path, data)
            kept = self._computing.keep(key)
            if kept:  # (shared before the claim is released: a worker waiting for it finds it)
                store.store_shared(shared_entry, summary, depends)
        except budget.OverBudget:  # unknown, not nothing: its names and class kinds only; never shared
            store.mark_over_budget(shared_entry)  # (before the claim is released: a waiting worker sees it)
            return self.outline(path, unknown_if_training=True), depends, self._computing.keep(key)
        finally:
            store.release(shared_entry)
        return summary, depends, kept

    def _compute(self, path: Path, data: bytes) -> ModuleSummary:
        try:
            from trainlint.model.positions import call_placer
            from trainlint.model.evaluation_calls import methods_called_with_grad as graded, methods_called_without_grad as quiet
            from trainlint.model.summarizer import Summarizer

            source = module_code(str(path), data)
            lookup = kept_models.RecordingLookup(self._summariser())
            model = self._model(path, source, lookup)
            if model is None:
                return self.outline(path)
            summary = with_outline_facts(Summarizer(model, path.name).module(), self.outline(path))
            calls = model.step_calls(call_placer(model.module, source, str(path)))
            arguments = self._arguments(path, model.project_arguments())
            kept_models.keep(str(path), source, model, lookup)  # (complete: no answer was cut short)
            return replace(summary, step_calls=tuple(calls), arguments=arguments, uses_accelerator=model.uses_accelerator, graded_methods=graded(model), quiet_methods=quiet(model))
        except Exception:  # a module we cannot analyse says nothing; its own lint reports why
            return self.outline(path)

    def _model(self, path: Path, source: str, lookup: Any = None) -> Any:
        """The training model of a module's source, as its summary sees it (through the summaries' project, or `lookup` forwarding to it)."""
        from trainlint.model.parse import parse_file
        from trainlint.model.training import TrainingModel

        try:
            return TrainingModel.build(parse_file(source, str(path)), path=str(path), project=lookup or self._summariser())
        except Exception:  # a module we cannot analyse says nothing; its own lint reports why
            return None


def forget_outlines() -> None:
    """Forget the outlines read, of every project (`shared.forget_projects`)."""
    _OUTLINES.clear()
